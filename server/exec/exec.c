/* Process tables per workspace; see exec.h. */
#include "server/exec/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/base/macros.h"
#include "server/base/time.h"
#include "server/posix/fs.h"

#define BUCKETS 256

/* One tenant's running commands and the output its finished ones keep;
 * exists while it has either. */
struct tenant_run {
    char name[WS_EXEC_TENANT_MAX + 1];
    unsigned running;
    uint64_t retained;
    struct tenant_run *next;
};

struct entry {
    struct ws_proc *p; /* NULL while its spawn is in progress */
    char tag[WS_PROC_TAG_MAX + 1];
    bool running;
    /* The tenant count this command holds a place in while running; NULL:
     * none. */
    struct tenant_run *tenant;
    /* What its output holds, counted against `owner` from its end until it
     * is forgotten (owner NULL: counted against nobody). */
    uint64_t retained;
    struct tenant_run *owner;
    int64_t ended_ms; /* monotonic */
    struct entry *next;
};

/* A command forgotten with its output. */
struct freed_cmd {
    char id[WS_PROC_ID_LEN + 1];
    char tag[WS_PROC_TAG_MAX + 1];
};

struct table {
    char id[64];
    bool closed;
    struct table *closed_next; /* oldest first, among emptied tombstones */
    unsigned running;
    unsigned finished;
    struct entry *entries; /* newest first */
    /* WS_EXEC_FREED_KEPT of them, made with the first one. */
    struct freed_cmd *freed;
    unsigned freed_next;
    struct table *next;
};

struct ws_exec {
    struct ws_exec_config cfg;
    struct ws_proc_env env;
    struct ws_pump *pump;
    struct ws_tree_host *trees;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* signalled whenever a command ends */
    unsigned running;
    struct tenant_run *tenants;
    struct table *buckets[BUCKETS];
    /* Forgets finished commands whose time is up (cfg.finished_ttl_ms);
     * woken through sweep_cond to stop. */
    pthread_t sweeper;
    bool sweeper_started;
    bool stopping;
    pthread_cond_t sweep_cond;
    /* Tables of closed workspaces, kept so a command racing its
     * workspace's Close is refused; the oldest are dropped past
     * WS_EXEC_TOMBSTONES_KEPT. */
    struct table *closed_head;
    struct table **closed_tail;
    unsigned n_closed;
    /* The home root, held open as a confined file system: homes are made
     * and removed through it, never following a symlink out of it. */
    struct ws_vfs *home_fs;
    char *home_root;     /* canonical path */
    bool home_root_temp; /* made by ws_exec_new: removed by ws_exec_free */
    /* The root was opened to others' search (0711) for homes of other
     * uids; e->lock. */
    bool home_root_shared;
};

struct ws_exec_home {
    struct ws_exec *e;
    char name[32]; /* under the root */
    char dir[WS_EXEC_HOME_PATH_MAX];
    char run[WS_EXEC_HOME_PATH_MAX];
};

static unsigned hash(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h % BUCKETS;
}

/* lock held */
static struct table *table_get(struct ws_exec *e, const char *ws_id, bool create)
{
    unsigned b = hash(ws_id);
    for (struct table *t = e->buckets[b]; t; t = t->next)
        if (strcmp(t->id, ws_id) == 0)
            return t;
    if (!create || strlen(ws_id) >= sizeof(((struct table *)0)->id))
        return NULL;
    struct table *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    snprintf(t->id, sizeof(t->id), "%s", ws_id);
    t->next = e->buckets[b];
    e->buckets[b] = t;
    return t;
}

/* The tenant's count, made when missing; NULL when that allocation
 * fails. Lock held. */
static struct tenant_run *tenant_get(struct ws_exec *e, const char *name)
{
    struct tenant_run *t;

    for (t = e->tenants; t; t = t->next)
        if (strcmp(t->name, name) == 0)
            return t;
    t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->next = e->tenants;
    e->tenants = t;
    return t;
}

/* Frees the tenant's count once nothing runs for it and nothing it
 * finished is kept; lock held. */
static void tenant_put(struct ws_exec *e, struct tenant_run *t)
{
    if (!t || t->running || t->retained)
        return;
    for (struct tenant_run **pp = &e->tenants; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            free(t);
            return;
        }
}

/* A running entry stops counting (ended, or never started); lock held. */
static void entry_stopped(struct ws_exec *e, struct table *t, struct entry *en)
{
    t->running--;
    e->running--;
    if (en->tenant) {
        en->tenant->running--;
        tenant_put(e, en->tenant);
        en->tenant = NULL;
    }
}

/* A command ended (or never got its done callback): its output is kept,
 * counted against its tenant, until it is forgotten; lock held. */
static void entry_finished(struct ws_exec *e, struct table *t, struct entry *en)
{
    en->running = false;
    t->finished++;
    en->ended_ms = ws_mono_ms();
    if (en->tenant && en->retained) {
        en->owner = en->tenant;
        en->owner->retained += en->retained;
    }
    entry_stopped(e, t, en);
}

/* Forgets a finished entry (already unlinked from t): its tenant no longer
 * counts its output, and its id and tag are remembered as freed. The
 * entry goes on *dropped, whose processes the caller releases after
 * unlocking (entries_free). Lock held. */
static void entry_forget(struct ws_exec *e, struct table *t, struct entry *en,
                         struct entry **dropped)
{
    t->finished--;
    if (en->owner) {
        en->owner->retained -= en->retained;
        tenant_put(e, en->owner);
        en->owner = NULL;
    }
    if (!t->freed)
        t->freed = calloc(WS_EXEC_FREED_KEPT, sizeof(*t->freed));
    if (t->freed && en->p) {
        struct freed_cmd *f = &t->freed[t->freed_next++ % WS_EXEC_FREED_KEPT];
        snprintf(f->id, sizeof(f->id), "%s", ws_proc_id(en->p));
        snprintf(f->tag, sizeof(f->tag), "%s", en->tag);
    }
    en->next = *dropped;
    *dropped = en;
}

/* Releases entries forgotten under the lock; call it unlocked (the last
 * reference to a process may free its rings). */
static void entries_free(struct entry *list)
{
    while (list) {
        struct entry *next = list->next;
        ws_proc_unref(list->p);
        free(list);
        list = next;
    }
}

/* ---- homes ---- */

/* Removes everything in the home root. */
static int home_root_empty(struct ws_vfs *fs)
{
    struct ws_vfs_dir *dir = NULL;
    struct ws_dirent ent;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int err;

    err = fs->ops->opendir(fs, ".", &dir);
    if (err < 0)
        return err;
    /* Collect first: removing while reading a directory skips entries. */
    while ((err = fs->ops->readdir(dir, &ent)) > 0) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            char **tmp = realloc(names, ncap * sizeof(*names));
            if (!tmp) {
                err = -ENOMEM;
                break;
            }
            names = tmp;
            cap = ncap;
        }
        names[n] = strndup(ent.name, ent.name_len);
        if (!names[n]) {
            err = -ENOMEM;
            break;
        }
        n++;
    }
    fs->ops->closedir(dir);
    for (size_t i = 0; i < n; i++) {
        uint64_t removed;
        int r = fs->ops->remove(fs, names[i], true, &removed);
        if (r < 0 && r != -ENOENT && err == 0)
            err = r;
        free(names[i]);
    }
    free(names);
    return err < 0 ? err : 0;
}

static int home_root_open(struct ws_exec *e, const char *root)
{
    char tmpl[PATH_MAX];
    struct stat st;
    int fd, err;

    if (!root) {
        const char *tmp = getenv("TMPDIR");

        if (!tmp || tmp[0] != '/' ||
            (size_t)snprintf(tmpl, sizeof(tmpl), "%s/workspaced-homes.XXXXXX", tmp) >= sizeof(tmpl))
            snprintf(tmpl, sizeof(tmpl), "/tmp/workspaced-homes.XXXXXX");
        if (!mkdtemp(tmpl))
            return -errno;
        root = tmpl;
        e->home_root_temp = true;
    } else if (mkdir(root, 0700) < 0 && errno != EEXIST) {
        return -errno;
    }
    fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        err = -errno;
        goto fail;
    }
    /* Another user's directory, or one others may enter, would let them
     * into every command's home. */
    err = 0;
    if (fstat(fd, &st) < 0)
        err = -errno;
    else if (st.st_uid != geteuid())
        err = -EPERM;
    else if (fchmod(fd, 0700) < 0)
        err = -errno;
    if (err < 0) {
        close(fd);
        goto fail;
    }
    e->home_root = realpath(root, NULL);
    err = e->home_root ? ws_posixfs_open(fd, ".", &e->home_fs) : -errno;
    close(fd);
    if (err < 0)
        goto fail;
    if (strlen(e->home_root) + 64 > WS_EXEC_HOME_PATH_MAX) {
        err = -ENAMETOOLONG;
        goto fail;
    }
    /* Homes of commands an earlier run did not see end. */
    if (!e->home_root_temp) {
        err = home_root_empty(e->home_fs);
        if (err < 0)
            goto fail;
    }
    return 0;
fail:
    if (e->home_fs)
        e->home_fs->ops->destroy(e->home_fs);
    e->home_fs = NULL;
    free(e->home_root);
    e->home_root = NULL;
    if (e->home_root_temp)
        (void)rmdir(tmpl);
    e->home_root_temp = false;
    return err;
}

/* After every command has ended. */
static void home_root_close(struct ws_exec *e)
{
    if (!e->home_fs)
        return;
    if (e->home_root_temp) {
        (void)home_root_empty(e->home_fs);
        (void)rmdir(e->home_root);
    }
    e->home_fs->ops->destroy(e->home_fs);
    e->home_fs = NULL;
    free(e->home_root);
    e->home_root = NULL;
}

/* Gives directory `path` of the home root to uid:gid, through an fd that
 * did not follow a symlink. */
static int home_chown(struct ws_vfs *fs, const char *path, uid_t uid, gid_t gid)
{
    int fd, err;

    err = ws_posixfs_open_dir_fd(fs, path, &fd);
    if (err < 0)
        return err;
    err = fchown(fd, uid, gid) < 0 ? -errno : 0;
    close(fd);
    return err;
}

/* Lets other uids search (not list) the home root, so a command of
 * another uid reaches its own home by path; names are random. e->lock
 * held. */
static int home_root_share(struct ws_exec *e)
{
    int fd, err;

    if (e->home_root_shared)
        return 0;
    err = ws_posixfs_open_dir_fd(e->home_fs, ".", &fd);
    if (err < 0)
        return err;
    err = fchmod(fd, 0711) < 0 ? -errno : 0;
    close(fd);
    if (err == 0)
        e->home_root_shared = true;
    return err;
}

int ws_exec_home_new(struct ws_exec *e, struct ws_exec_home **ret)
{
    return ws_exec_home_new_owned(e, (uid_t)-1, (gid_t)-1, ret);
}

int ws_exec_home_new_owned(struct ws_exec *e, uid_t uid, gid_t gid, struct ws_exec_home **ret)
{
    bool owned = uid != (uid_t)-1 || gid != (gid_t)-1;
    static const char hex[] = "0123456789abcdef";
    static atomic_ulong ctr;
    struct ws_exec_home *h = calloc(1, sizeof(*h));
    char sub[sizeof(h->name) + 8];
    uint8_t r[12];
    uint64_t removed;
    int err;

    if (!h)
        return -ENOMEM;
    pthread_mutex_lock(&e->lock);
    err = e->home_fs ? 0 : home_root_open(e, NULL);
    if (err == 0 && owned)
        err = home_root_share(e);
    pthread_mutex_unlock(&e->lock);
    if (err < 0) {
        free(h);
        return err;
    }
    h->e = e;
    if (getrandom(r, sizeof(r), 0) != sizeof(r)) {
        /* Not secret, only unique: a counter does. */
        unsigned long v = atomic_fetch_add(&ctr, 1);
        memset(r, 0, sizeof(r));
        memcpy(r, &v, sizeof(v));
    }
    h->name[0] = 'c';
    h->name[1] = '-';
    for (size_t i = 0; i < sizeof(r); i++) {
        h->name[2 + 2 * i] = hex[r[i] >> 4];
        h->name[3 + 2 * i] = hex[r[i] & 15];
    }
    h->name[2 + 2 * sizeof(r)] = '\0';
    snprintf(h->dir, sizeof(h->dir), "%s/%s/home", e->home_root, h->name);
    snprintf(h->run, sizeof(h->run), "%s/%s/run", e->home_root, h->name);

    err = e->home_fs->ops->mkdir(e->home_fs, h->name, false, 0700);
    if (err < 0) {
        free(h);
        return err;
    }
    snprintf(sub, sizeof(sub), "%s/home", h->name);
    err = e->home_fs->ops->mkdir(e->home_fs, sub, false, 0700);
    if (err == 0) {
        snprintf(sub, sizeof(sub), "%s/run", h->name);
        err = e->home_fs->ops->mkdir(e->home_fs, sub, false, 0700);
    }
    /* The uid gets its two directories first and the one around them
     * last: it reaches nothing of the home before the whole is its own. */
    if (err == 0 && owned) {
        snprintf(sub, sizeof(sub), "%s/home", h->name);
        err = home_chown(e->home_fs, sub, uid, gid);
        snprintf(sub, sizeof(sub), "%s/run", h->name);
        if (err == 0)
            err = home_chown(e->home_fs, sub, uid, gid);
        if (err == 0)
            err = home_chown(e->home_fs, h->name, uid, gid);
    }
    if (err < 0) {
        (void)e->home_fs->ops->remove(e->home_fs, h->name, true, &removed);
        free(h);
        return err;
    }
    *ret = h;
    return 0;
}

const char *ws_exec_home_dir(const struct ws_exec_home *h)
{
    return h->dir;
}

const char *ws_exec_home_runtime_dir(const struct ws_exec_home *h)
{
    return h->run;
}

void ws_exec_home_free(struct ws_exec_home *h)
{
    uint64_t removed;

    if (!h)
        return;
    /* Best effort: what cannot be removed now (a tree deeper than the
     * confined remove descends) goes with the root at the next start. */
    (void)h->e->home_fs->ops->remove(h->e->home_fs, h->name, true, &removed);
    free(h);
}

/* ---- the exec layer ---- */

static void *sweeper_main(void *arg);

int ws_exec_new(const struct ws_exec_config *cfg, struct ws_exec **ret)
{
    struct ws_exec *e = calloc(1, sizeof(*e));
    int err;

    if (!e)
        return -ENOMEM;
    e->cfg = *cfg;
    if (e->cfg.grace_ms == 0)
        e->cfg.grace_ms = WS_EXEC_GRACE_MS_DEFAULT;
    if (e->cfg.grace_ms < 0)
        e->cfg.grace_ms = 0;
    if (e->cfg.grace_ms > WS_EXEC_GRACE_MS_MAX)
        e->cfg.grace_ms = WS_EXEC_GRACE_MS_MAX;
    if (!e->cfg.running_per_workspace)
        e->cfg.running_per_workspace = WS_EXEC_RUNNING_PER_WS_DEFAULT;
    if (!e->cfg.running_total)
        e->cfg.running_total = WS_EXEC_RUNNING_TOTAL_DEFAULT;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
    pthread_cond_init(&e->sweep_cond, NULL);
    e->closed_tail = &e->closed_head;
    struct ws_tree_host_config tc = {.mode = cfg->containment, .cgroup_root = cfg->cgroup_root};
    err = ws_tree_host_new(&tc, &e->trees);
    if (err < 0)
        goto fail;
    /* A configured root is opened (and emptied) now; the temporary one
     * only when a first home needs it, so a server that runs no command
     * on the host leaves nothing behind even when it is killed. */
    err = cfg->home_root ? home_root_open(e, cfg->home_root) : 0;
    if (err < 0)
        goto fail;
    err = ws_pump_new(&e->pump);
    if (err < 0)
        goto fail;
    e->env = (struct ws_proc_env){.pump = e->pump, .trees = e->trees, .grace_ms = e->cfg.grace_ms};
    if (e->cfg.finished_ttl_ms > 0) {
        err = -pthread_create(&e->sweeper, NULL, sweeper_main, e);
        if (err < 0)
            goto fail;
        e->sweeper_started = true;
    }
    *ret = e;
    return 0;
fail:
    ws_pump_free(e->pump);
    home_root_close(e);
    ws_tree_host_free(e->trees);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->cond);
    pthread_cond_destroy(&e->sweep_cond);
    free(e);
    return err;
}

size_t ws_exec_table_count(struct ws_exec *e)
{
    size_t n = 0;

    pthread_mutex_lock(&e->lock);
    for (unsigned b = 0; b < BUCKETS; b++)
        for (struct table *t = e->buckets[b]; t; t = t->next)
            n++;
    pthread_mutex_unlock(&e->lock);
    return n;
}

const char *ws_exec_containment(const struct ws_exec *e)
{
    return ws_tree_host_mechanism(e->trees);
}

/* The oldest finished entry of t, as the link that points at it (NULL:
 * none); lock held. */
static struct entry **oldest_finished(struct table *t)
{
    struct entry **last = NULL;

    for (struct entry **pp = &t->entries; *pp; pp = &(*pp)->next)
        if (!(*pp)->running && (*pp)->p)
            last = pp;
    return last;
}

/* Drops the oldest finished entries over the per-workspace count; lock
 * held. */
static void trim_finished(struct ws_exec *e, struct table *t, struct entry **dropped)
{
    while (t->finished > WS_EXEC_FINISHED_KEPT) {
        struct entry **last = oldest_finished(t);
        if (!last)
            return;
        struct entry *victim = *last;
        *last = victim->next;
        entry_forget(e, t, victim, dropped);
    }
}

/* Drops the oldest finished entries of `owner`, in all its workspaces,
 * until its output fits its quota; lock held. */
static void trim_tenant(struct ws_exec *e, struct tenant_run *owner, struct entry **dropped)
{
    uint64_t max = e->cfg.retained_per_tenant;

    while (max && owner->retained > max) {
        struct entry **oldest = NULL;
        struct table *in = NULL;
        for (unsigned b = 0; b < BUCKETS; b++)
            for (struct table *t = e->buckets[b]; t; t = t->next)
                for (struct entry **pp = &t->entries; *pp; pp = &(*pp)->next)
                    if ((*pp)->owner == owner && !(*pp)->running &&
                        (!oldest || (*pp)->ended_ms < (*oldest)->ended_ms)) {
                        oldest = pp;
                        in = t;
                    }
        if (!oldest)
            return;
        struct entry *victim = *oldest;
        *oldest = victim->next;
        /* The last of its output may free the tenant's count. */
        bool last = owner->retained == victim->retained && !owner->running;
        entry_forget(e, in, victim, dropped);
        if (last)
            return;
    }
}

/* Forgets every finished entry that ended more than the ttl ago; lock
 * held. */
static void expire_finished(struct ws_exec *e, struct entry **dropped)
{
    int64_t ttl = e->cfg.finished_ttl_ms, now = ws_mono_ms();

    if (ttl <= 0)
        return;
    for (unsigned b = 0; b < BUCKETS; b++)
        for (struct table *t = e->buckets[b]; t; t = t->next)
            for (struct entry **pp = &t->entries; *pp;) {
                struct entry *en = *pp;
                if (en->running || !en->p || now - en->ended_ms < ttl) {
                    pp = &en->next;
                    continue;
                }
                *pp = en->next;
                entry_forget(e, t, en, dropped);
            }
}

/* How often the sweeper looks: often enough that output outlives its ttl
 * by at most half of it, and at most once a second. */
static int64_t sweep_period_ms(const struct ws_exec *e)
{
    int64_t p = e->cfg.finished_ttl_ms / 2;

    return p < 10 ? 10 : p > 1000 ? 1000 : p;
}

static void *sweeper_main(void *arg)
{
    struct ws_exec *e = arg;

    pthread_mutex_lock(&e->lock);
    while (!e->stopping) {
        struct timespec ts;
        struct entry *dropped = NULL;

        ws_abstime_after_ms(sweep_period_ms(e), &ts);
        pthread_cond_timedwait(&e->sweep_cond, &e->lock, &ts);
        if (e->stopping)
            break;
        expire_finished(e, &dropped);
        if (dropped) {
            pthread_mutex_unlock(&e->lock);
            entries_free(dropped);
            pthread_mutex_lock(&e->lock);
        }
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

struct done_ctx {
    struct ws_exec *e;
    char ws_id[64];
    struct ws_exec_home *home; /* NULL: none */
};

/* Frees a done context that never reached its command, and its home. */
static void done_ctx_free(struct done_ctx *dc)
{
    if (dc)
        ws_exec_home_free(dc->home);
    free(dc);
}

static void on_proc_done(void *arg, struct ws_proc *p)
{
    struct done_ctx *dc = arg;
    struct ws_exec *e = dc->e;
    struct ws_proc_result r;
    struct entry *dropped = NULL;

    /* The tree is empty: nothing of the command uses its home any more. */
    ws_exec_home_free(dc->home);
    dc->home = NULL;
    ws_proc_get_result(p, &r);
    if (e->cfg.on_finished)
        e->cfg.on_finished(e->cfg.ud, dc->ws_id, p, &r);
    pthread_mutex_lock(&e->lock);
    struct table *t = table_get(e, dc->ws_id, false);
    if (t) {
        struct tenant_run *owner = NULL;
        for (struct entry *en = t->entries; en; en = en->next)
            if (en->p == p && en->running) {
                entry_finished(e, t, en);
                owner = en->owner;
                break;
            }
        /* The tenant's quota first: trimming the workspace's count may
         * forget the tenant's last output, and its count with it. */
        if (owner)
            trim_tenant(e, owner, &dropped);
        trim_finished(e, t, &dropped);
    }
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    entries_free(dropped);
    /* Subreaper mode: orphans of this command that died are the server's
     * zombies now. */
    ws_tree_host_reap(e->trees);
    free(dc);
}

/* The command's wrapper is ours from ws_exec_start on, even when it fails
 * before ws_proc_spawn (which then frees it itself). */
static void release_wrapper(const struct ws_proc_config *cfg)
{
    if (cfg->wrapper && cfg->wrapper->free)
        cfg->wrapper->free(cfg->wrapper->arg);
}

int ws_exec_start(struct ws_exec *e, const char *ws_id, const struct ws_proc_config *cfg,
                  struct ws_diag *d, struct ws_proc **ret)
{
    return ws_exec_start_for(e, NULL, ws_id, cfg, NULL, d, ret);
}

int ws_exec_start_for(struct ws_exec *e, const char *tenant, const char *ws_id,
                      const struct ws_proc_config *cfg, struct ws_exec_home *home,
                      struct ws_diag *d, struct ws_proc **ret)
{
    struct entry *en = calloc(1, sizeof(*en));
    struct done_ctx *dc = calloc(1, sizeof(*dc));
    struct tenant_run *tr = NULL;
    struct ws_proc *p = NULL;
    int err;

    if (!dc)
        ws_exec_home_free(home);
    else
        dc->home = home;
    if (tenant && strlen(tenant) > WS_EXEC_TENANT_MAX) {
        free(en);
        done_ctx_free(dc);
        release_wrapper(cfg);
        return -EINVAL;
    }
    if (!en || !dc) {
        free(en);
        done_ctx_free(dc);
        release_wrapper(cfg);
        return -ENOMEM;
    }
    dc->e = e;
    snprintf(dc->ws_id, sizeof(dc->ws_id), "%s", ws_id);
    if (cfg->tag)
        snprintf(en->tag, sizeof(en->tag), "%s", cfg->tag);
    en->running = true;
    en->retained = 2 * ((uint64_t)cfg->ring_bytes + cfg->capture_bytes);

    /* Reserve the slot (and the tag) before the spawn, which runs
     * unlocked. */
    pthread_mutex_lock(&e->lock);
    struct table *t = table_get(e, ws_id, true);
    err = -ENOMEM;
    if (!t)
        goto unlock_fail;
    err = -WS_ENOWORKSPACE;
    if (t->closed)
        goto unlock_fail;
    if (en->tag[0])
        for (struct entry *x = t->entries; x; x = x->next)
            if (strcmp(x->tag, en->tag) == 0) {
                err = -EEXIST;
                ws_diag_set(d, "tag '%s' is in use in this workspace", en->tag);
                ws_diag_meta(d, "tag", "%s", en->tag);
                goto unlock_fail;
            }
    if (t->running >= e->cfg.running_per_workspace) {
        err = -WS_EQUOTA;
        ws_diag_set(d, "the workspace already runs %u commands", t->running);
        ws_diag_meta(d, "quota", "%s", "processes");
        goto unlock_fail;
    }
    if (tenant && tenant[0]) {
        tr = tenant_get(e, tenant);
        err = -ENOMEM;
        if (!tr)
            goto unlock_fail;
        if (e->cfg.running_per_tenant && tr->running >= e->cfg.running_per_tenant) {
            err = -WS_EQUOTA;
            ws_diag_set(d, "too many running commands for this tenant (limit %u)",
                        e->cfg.running_per_tenant);
            ws_diag_meta(d, "quota", "%s", "tenant_running_commands");
            ws_diag_meta(d, "limit", "%u", e->cfg.running_per_tenant);
            goto unlock_fail;
        }
    }
    if (e->running >= e->cfg.running_total) {
        err = -WS_EQUOTA;
        ws_diag_set(d, "the server already runs %u commands", e->running);
        ws_diag_meta(d, "quota", "%s", "processes_total");
        goto unlock_fail;
    }
    t->running++;
    e->running++;
    if (tr) {
        tr->running++;
        en->tenant = tr;
        tr = NULL;
    }
    en->next = t->entries;
    t->entries = en;
    pthread_mutex_unlock(&e->lock);

    err = ws_proc_spawn(&e->env, cfg, &p);

    pthread_mutex_lock(&e->lock);
    if (err < 0 || t->closed) {
        for (struct entry **pp = &t->entries; *pp; pp = &(*pp)->next)
            if (*pp == en) {
                *pp = en->next;
                break;
            }
        entry_stopped(e, t, en);
        pthread_cond_broadcast(&e->cond);
        pthread_mutex_unlock(&e->lock);
        free(en);
        if (err == 0) {
            /* Closed while spawning: the command never counts as started. */
            ws_proc_kill(p, WS_CAUSE_EVICTED, false);
            ws_proc_unref(p);
            err = -WS_ENOWORKSPACE;
        }
        done_ctx_free(dc);
        return err;
    }
    en->p = p; /* the table's reference */
    pthread_mutex_unlock(&e->lock);

    ws_proc_ref(p); /* the caller's */
    err = ws_proc_on_done(p, on_proc_done, dc);
    if (err < 0) {
        /* Without its done callback the slot would never be released. */
        ws_proc_kill(p, WS_CAUSE_CANCELLED, false);
        done_ctx_free(dc);
        struct entry *dropped = NULL;
        pthread_mutex_lock(&e->lock);
        entry_finished(e, t, en);
        if (en->owner)
            trim_tenant(e, en->owner, &dropped);
        pthread_mutex_unlock(&e->lock);
        entries_free(dropped);
    }
    *ret = p;
    return 0;

unlock_fail:
    /* A count made for this start alone goes again. */
    tenant_put(e, tr);
    pthread_mutex_unlock(&e->lock);
    free(en);
    done_ctx_free(dc);
    release_wrapper(cfg);
    return err;
}

int ws_exec_find(struct ws_exec *e, const char *ws_id, const char *id, const char *tag,
                 struct ws_proc **ret)
{
    int err = -ESRCH;

    pthread_mutex_lock(&e->lock);
    struct table *t = table_get(e, ws_id, false);
    for (struct entry *en = t ? t->entries : NULL; en; en = en->next) {
        if (!en->p)
            continue;
        bool match = id && id[0] ? strcmp(ws_proc_id(en->p), id) == 0
                                 : tag && tag[0] && strcmp(en->tag, tag) == 0;
        if (match) {
            ws_proc_ref(en->p);
            *ret = en->p;
            err = 0;
            break;
        }
    }
    pthread_mutex_unlock(&e->lock);
    return err;
}

bool ws_exec_was_freed(struct ws_exec *e, const char *ws_id, const char *id, const char *tag)
{
    bool found = false;

    pthread_mutex_lock(&e->lock);
    struct table *t = table_get(e, ws_id, false);
    for (unsigned i = 0; t && t->freed && i < WS_EXEC_FREED_KEPT && !found; i++) {
        const struct freed_cmd *f = &t->freed[i];
        found = id && id[0] ? strcmp(f->id, id) == 0 : tag && tag[0] && strcmp(f->tag, tag) == 0;
    }
    pthread_mutex_unlock(&e->lock);
    return found;
}

void ws_exec_list(struct ws_exec *e, const char *ws_id, void (*cb)(void *ud, struct ws_proc *p),
                  void *ud)
{
    struct ws_proc **all = NULL;
    size_t n = 0, cap = 0;

    pthread_mutex_lock(&e->lock);
    struct table *t = table_get(e, ws_id, false);
    for (struct entry *en = t ? t->entries : NULL; en; en = en->next) {
        if (!en->p)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 32;
            struct ws_proc **na = realloc(all, ncap * sizeof(*na));
            if (!na)
                break;
            all = na;
            cap = ncap;
        }
        ws_proc_ref(en->p);
        all[n++] = en->p;
    }
    pthread_mutex_unlock(&e->lock);
    /* Entries are newest first: report running ones, then finished, each
     * oldest first. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = n; i-- > 0;) {
            bool done = ws_proc_get_result(all[i], NULL);
            if (done == (pass == 1))
                cb(ud, all[i]);
        }
    for (size_t i = 0; i < n; i++)
        ws_proc_unref(all[i]);
    free(all);
}

/* Ends every running command of t (or of all tables when t is NULL) and
 * waits; lock held on entry and exit. */
static void kill_and_wait(struct ws_exec *e, struct table *only, enum ws_cause cause)
{
    for (;;) {
        struct ws_proc *victims[64];
        size_t n = 0;
        bool any = false;

        for (unsigned b = 0; b < BUCKETS; b++)
            for (struct table *t = e->buckets[b]; t; t = t->next) {
                if (only && t != only)
                    continue;
                if (t->running)
                    any = true;
                for (struct entry *en = t->entries; en && n < 64; en = en->next)
                    if (en->running && en->p) {
                        ws_proc_ref(en->p);
                        victims[n++] = en->p;
                    }
            }
        if (!any)
            return;
        pthread_mutex_unlock(&e->lock);
        for (size_t i = 0; i < n; i++) {
            ws_proc_kill(victims[i], cause, true);
            ws_proc_unref(victims[i]);
        }
        pthread_mutex_lock(&e->lock);
        /* Wait for one to end (or a spawn in progress to register). */
        struct timespec ts;
        ws_abstime_after_ms(50, &ts);
        pthread_cond_timedwait(&e->cond, &e->lock, &ts);
    }
}

bool ws_exec_workspace_busy(struct ws_exec *e, const char *ws_id)
{
    bool busy = false;

    pthread_mutex_lock(&e->lock);
    struct table *t = table_get(e, ws_id, false);
    if (t && t->running)
        busy = true;
    for (struct entry *en = t && !busy ? t->entries : NULL; en && !busy; en = en->next)
        busy = en->p && ws_proc_subscribers(en->p) > 0;
    pthread_mutex_unlock(&e->lock);
    return busy;
}

void ws_exec_tenants(struct ws_exec *e, void (*cb)(void *ud, const char *tenant, unsigned running),
                     void *ud)
{
    pthread_mutex_lock(&e->lock);
    for (const struct tenant_run *t = e->tenants; t; t = t->next)
        if (t->running)
            cb(ud, t->name, t->running);
    pthread_mutex_unlock(&e->lock);
}

void ws_exec_close_workspace(struct ws_exec *e, const char *ws_id, enum ws_cause cause)
{
    pthread_mutex_lock(&e->lock);
    struct table *t = table_get(e, ws_id, true);
    if (!t) {
        pthread_mutex_unlock(&e->lock);
        return;
    }
    t->closed = true;
    kill_and_wait(e, t, cause);
    /* Forget the finished ones; the table stays as a tombstone so a
     * command racing the close is refused. */
    struct entry *list = NULL;
    while (t->entries) {
        struct entry *en = t->entries;
        t->entries = en->next;
        entry_forget(e, t, en, &list);
    }
    t->finished = 0;
    free(t->freed);
    t->freed = NULL;
    struct table *drop = NULL;
    if (!t->closed_next && e->closed_tail != &t->closed_next) {
        *e->closed_tail = t;
        e->closed_tail = &t->closed_next;
        e->n_closed++;
    }
    if (e->n_closed > WS_EXEC_TOMBSTONES_KEPT && e->closed_head != t) {
        drop = e->closed_head;
        e->closed_head = drop->closed_next;
        if (!e->closed_head)
            e->closed_tail = &e->closed_head;
        e->n_closed--;
        /* Long closed and empty (closed tables take no commands): nothing
         * can race it any more. */
        for (struct table **pp = &e->buckets[hash(drop->id)]; *pp; pp = &(*pp)->next)
            if (*pp == drop) {
                *pp = drop->next;
                break;
            }
    }
    pthread_mutex_unlock(&e->lock);
    if (drop)
        free(drop->freed);
    free(drop);
    entries_free(list);
}

void ws_exec_free(struct ws_exec *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->lock);
    for (unsigned b = 0; b < BUCKETS; b++)
        for (struct table *t = e->buckets[b]; t; t = t->next)
            t->closed = true;
    kill_and_wait(e, NULL, WS_CAUSE_CANCELLED);
    e->stopping = true;
    pthread_cond_broadcast(&e->sweep_cond);
    pthread_mutex_unlock(&e->lock);
    if (e->sweeper_started)
        pthread_join(e->sweeper, NULL);
    for (unsigned b = 0; b < BUCKETS; b++)
        while (e->buckets[b]) {
            struct table *t = e->buckets[b];
            e->buckets[b] = t->next;
            while (t->entries) {
                struct entry *en = t->entries;
                t->entries = en->next;
                ws_proc_unref(en->p);
                free(en);
            }
            free(t->freed);
            free(t);
        }
    while (e->tenants) {
        struct tenant_run *t = e->tenants;
        e->tenants = t->next;
        free(t);
    }
    /* The pump runs the posted frees before it stops. */
    ws_pump_free(e->pump);
    home_root_close(e);
    ws_tree_host_free(e->trees);
    pthread_cond_destroy(&e->sweep_cond);
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    free(e);
}
