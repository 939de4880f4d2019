/* The watch engine (watch.h).
 *
 * Threads and locks: e->lock guards the engine's list of watches and its
 * counts; w->lock guards a watch's queues (taken by the engine thread, by
 * the consumer in ws_watch_next, and by a storage's change report, which
 * holds the storage's own lock: w->lock is a leaf). The directory table
 * of an inotify watch (wd -> parent, name) is the engine thread's alone
 * once the watch is started.
 *
 * Queues: an event first waits in `pending` (a FIFO with a hash by path)
 * for its window; a later event of the same path within it is merged into
 * it. Due events move to `ready`, where ws_watch_next takes them. A move
 * (and GONE, OVERFLOW) first flushes everything pending, so the order of
 * events is the order of the changes. Both queues together hold at most
 * WS_WATCH_MAX_PENDING events; one slot is kept for OVERFLOW.
 */
#include "server/watch/watch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "server/base/fd.h"
#include "server/base/time.h"
#include "server/vfs/ops.h"

#define PHASH_SIZE 8192 /* power of two, >= 2 * WS_WATCH_MAX_PENDING */
#define WHASH_MIN  64
#define READ_BUF   (64 * 1024)
/* inotify reads per watch per turn of the loop, so one busy watch cannot
 * starve the others. */
#define READ_ROUNDS 8

#define WATCH_MASK                                                                                 \
    (IN_CREATE | IN_DELETE | IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO |                 \
     IN_DELETE_SELF | IN_MOVE_SELF | IN_EXCL_UNLINK)

struct item {
    struct item *next;  /* queue */
    struct item *hnext; /* pending hash */
    enum ws_watch_kind kind;
    enum ws_ftype type;
    char *path;
    char *from;
    uint64_t dropped;
    int64_t due_ns;
    uint32_t hash;
};

struct wnode {
    struct wnode *hnext;
    int wd;
    int parent; /* -1 for the watch's directory */
    char *name; /* NULL for the watch's directory */
};

struct ws_watch {
    struct ws_watch_engine *e;
    struct ws_watch *next; /* e->watches */
    /* Set once start succeeded: the engine's loop looks at it. */
    atomic_bool started;
    atomic_bool stopping;
    void (*notify)(void *ud);
    int (*check)(void *ud);
    void (*released)(void *ud);
    void *ud;
    struct ws_vfs *fs;
    char *key;
    char **include, **exclude;
    size_t n_include, n_exclude;
    bool recursive;
    int64_t window_ns;
    int64_t next_check_ns;
    /* Workspace-relative, "" for the root. A directory watch: the
     * directory. A file watch: the file (fpath) and its directory (base). */
    char *base;
    char *fpath;
    const char *fname; /* in fpath */

    /* inotify (engine thread after start) */
    int ifd, rootfd;
    struct wnode **wtab;
    size_t wcap, nwd;
    int root_wd;
    int cache_wd, cache_fd;
    struct {
        bool set;
        uint32_t cookie;
        int wd;
        bool isdir;
        bool hidden; /* a writer's temporary name: the move is a create */
        char *name;
        char *path;
    } mfrom;
    /* memory */
    struct ws_vfs_sub *sub;

    pthread_mutex_t lock;
    struct item *pend_head, *pend_tail, *ready_head, *ready_tail;
    struct item *phash[PHASH_SIZE];
    size_t count;
    uint64_t dropped;
    bool overflow, kernel_overflow;
    bool gone, gone_taken;
    int error;
    bool kick; /* ready gained events since the last notify */
};

struct ws_watch_engine {
    pthread_mutex_t lock;
    pthread_t thread;
    int epfd, evfd;
    bool quit;
    struct ws_watch *watches;
    unsigned n, max, max_per_key;
};

/* ---- small helpers ---- */

static uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u;

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* a + "/" + b, or the one that is not empty. NULL when memory is short. */
static char *join(const char *a, const char *b)
{
    char *s;

    if (!*a)
        return strdup(b);
    if (!*b)
        return strdup(a);
    if (asprintf(&s, "%s/%s", a, b) < 0)
        return NULL;
    return s;
}

/* Whether path is base or below it. */
static bool is_at_or_below(const char *path, const char *base)
{
    size_t n = strlen(base);

    if (n == 0)
        return true;
    return strncmp(path, base, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Normalizes a workspace-relative path lexically into a new string ("" for
 * the root). -EXDEV when it climbs above the root. */
static int normalize(const char *path, char **ret)
{
    size_t len = strlen(path);
    char *out = malloc(len + 1);
    size_t o = 0;
    const char *p = path;

    if (!out)
        return -ENOMEM;
    while (*p) {
        const char *end = strchrnul(p, '/');
        size_t n = (size_t)(end - p);

        if (n == 0 || (n == 1 && p[0] == '.')) {
            /* nothing */
        } else if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (o == 0) {
                free(out);
                return -EXDEV;
            }
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--;
        } else {
            if (o)
                out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p = *end ? end + 1 : end;
    }
    out[o] = '\0';
    *ret = out;
    return 0;
}

static int open_beneath(int dirfd, const char *path, uint64_t flags)
{
    struct open_how how = {
        .flags = flags | O_CLOEXEC | O_NOFOLLOW,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };

    for (int i = 0; i < 8; i++) {
        long fd = syscall(SYS_openat2, dirfd, *path ? path : ".", &how, sizeof(how));

        if (fd >= 0)
            return (int)fd;
        if (errno != EAGAIN && errno != EINTR)
            return -errno;
    }
    return -EAGAIN;
}

static enum ws_ftype ftype_of_mode(mode_t m)
{
    if (S_ISREG(m))
        return WS_FT_REGULAR;
    if (S_ISDIR(m))
        return WS_FT_DIRECTORY;
    if (S_ISLNK(m))
        return WS_FT_SYMLINK;
    return WS_FT_OTHER;
}

static enum ws_ftype ftype_of_dtype(unsigned char t)
{
    switch (t) {
    case DT_REG:
        return WS_FT_REGULAR;
    case DT_DIR:
        return WS_FT_DIRECTORY;
    case DT_LNK:
        return WS_FT_SYMLINK;
    case DT_UNKNOWN:
        return WS_FT_UNKNOWN;
    default:
        return WS_FT_OTHER;
    }
}

void ws_watch_event_free(struct ws_watch_event *ev)
{
    if (!ev)
        return;
    free(ev->path);
    free(ev->from);
    free(ev);
}

static void item_free(struct item *it)
{
    if (!it)
        return;
    free(it->path);
    free(it->from);
    free(it);
}

static void wake(struct ws_watch_engine *e)
{
    uint64_t one = 1;

    (void)!write(e->evfd, &one, sizeof(one));
}

/* ---- filters ---- */

static bool matches_any(char *const *pats, size_t n, const char *path)
{
    for (size_t i = 0; i < n; i++)
        if (ws_glob_match(pats[i], path) == 1)
            return true;
    return false;
}

static bool wanted(const struct ws_watch *w, const char *path)
{
    if (w->n_include && !matches_any(w->include, w->n_include, path))
        return false;
    return !matches_any(w->exclude, w->n_exclude, path);
}

/* A directory an exclude pattern ending in a slash and "**" covers is not
 * watched. */
static bool pruned(const struct ws_watch *w, const char *path)
{
    for (size_t i = 0; i < w->n_exclude; i++) {
        size_t n = strlen(w->exclude[i]);

        if (n >= 3 && strcmp(w->exclude[i] + n - 3, "/**") == 0 &&
            ws_glob_match(w->exclude[i], path) == 1)
            return true;
    }
    return false;
}

/* ---- queues (w->lock held) ---- */

static void ready_push(struct ws_watch *w, struct item *it)
{
    it->next = NULL;
    if (w->ready_tail)
        w->ready_tail->next = it;
    else
        w->ready_head = it;
    w->ready_tail = it;
    w->kick = true;
}

static void phash_remove(struct ws_watch *w, struct item *it)
{
    for (struct item **p = &w->phash[it->hash & (PHASH_SIZE - 1)]; *p; p = &(*p)->hnext) {
        if (*p == it) {
            *p = it->hnext;
            return;
        }
    }
}

/* Moves pending events to ready: all, or those due by now_ns. */
static void flush_pending(struct ws_watch *w, bool all, int64_t now_ns)
{
    while (w->pend_head && (all || w->pend_head->due_ns <= now_ns)) {
        struct item *it = w->pend_head;

        w->pend_head = it->next;
        if (!w->pend_head)
            w->pend_tail = NULL;
        phash_remove(w, it);
        ready_push(w, it);
    }
}

static struct item *item_new(enum ws_watch_kind kind, enum ws_ftype type, const char *path,
                             const char *from)
{
    struct item *it = calloc(1, sizeof(*it));

    if (!it)
        return NULL;
    it->kind = kind;
    it->type = type;
    it->path = strdup(path ? path : "");
    it->from = from ? strdup(from) : NULL;
    if (!it->path || (from && !it->from)) {
        item_free(it);
        return NULL;
    }
    return it;
}

/* Queues OVERFLOW once there is room for it. */
static void place_overflow(struct ws_watch *w)
{
    struct item *it;

    if (!w->overflow || w->gone || w->count >= WS_WATCH_MAX_PENDING)
        return;
    it = item_new(WS_WATCH_OVERFLOW, WS_FT_UNKNOWN, "", NULL);
    if (!it)
        return;
    it->dropped = w->kernel_overflow ? 0 : w->dropped;
    flush_pending(w, true, 0);
    ready_push(w, it);
    w->count++;
    w->overflow = false;
    w->kernel_overflow = false;
    w->dropped = 0;
}

static void drop_one(struct ws_watch *w)
{
    w->dropped++;
    w->overflow = true;
}

static bool has_room(const struct ws_watch *w)
{
    return w->count + 1 < WS_WATCH_MAX_PENDING;
}

/* Merges a change into a pending event of the same path: returns false when
 * the pair cancels out (the pending event is then removed). */
static bool merge(struct item *it, enum ws_watch_kind kind, enum ws_ftype type)
{
    switch (it->kind) {
    case WS_WATCH_CREATED:
        if (kind == WS_WATCH_REMOVED)
            return false;
        break;
    case WS_WATCH_MODIFIED:
        if (kind == WS_WATCH_REMOVED)
            it->kind = WS_WATCH_REMOVED;
        break;
    case WS_WATCH_REMOVED:
        if (kind != WS_WATCH_REMOVED)
            it->kind = WS_WATCH_MODIFIED;
        break;
    default:
        break;
    }
    if (type != WS_FT_UNKNOWN)
        it->type = type;
    return true;
}

static void pending_unlink(struct ws_watch *w, struct item *it)
{
    struct item *prev = NULL;

    for (struct item *p = w->pend_head; p; prev = p, p = p->next) {
        if (p == it) {
            if (prev)
                prev->next = it->next;
            else
                w->pend_head = it->next;
            if (w->pend_tail == it)
                w->pend_tail = prev;
            break;
        }
    }
    phash_remove(w, it);
}

/* Queues one change (already filtered). Returns whether the engine has to
 * look at the watch sooner (a first pending event, or a ready one). */
static bool add_change(struct ws_watch *w, enum ws_watch_kind kind, enum ws_ftype type,
                       const char *path, const char *from)
{
    bool was_idle = !w->pend_head;
    struct item *it;

    if (w->gone || w->error)
        return false;
    place_overflow(w);
    if (kind == WS_WATCH_MOVED || kind == WS_WATCH_GONE) {
        if (kind != WS_WATCH_GONE && !has_room(w)) {
            drop_one(w);
            return false;
        }
        it = item_new(kind, type, path, from);
        if (!it) {
            drop_one(w);
            return false;
        }
        flush_pending(w, true, 0);
        ready_push(w, it);
        w->count++;
        if (kind == WS_WATCH_GONE)
            w->gone = true;
        return true;
    }
    uint32_t h = hash_str(path);
    for (it = w->phash[h & (PHASH_SIZE - 1)]; it; it = it->hnext) {
        if (it->hash == h && strcmp(it->path, path) == 0) {
            if (!merge(it, kind, type)) {
                pending_unlink(w, it);
                item_free(it);
                w->count--;
            }
            return false;
        }
    }
    if (!has_room(w)) {
        drop_one(w);
        return false;
    }
    it = item_new(kind, type, path, NULL);
    if (!it) {
        drop_one(w);
        return false;
    }
    it->hash = h;
    it->due_ns = ws_mono_ns() + w->window_ns;
    it->hnext = w->phash[h & (PHASH_SIZE - 1)];
    w->phash[h & (PHASH_SIZE - 1)] = it;
    if (w->pend_tail)
        w->pend_tail->next = it;
    else
        w->pend_head = it;
    w->pend_tail = it;
    w->count++;
    return was_idle;
}

/* Filters a change by the patterns, then queues it. */
static bool emit(struct ws_watch *w, enum ws_watch_kind kind, enum ws_ftype type, const char *path,
                 const char *from)
{
    bool r;

    if (kind == WS_WATCH_MOVED) {
        bool tin = wanted(w, path), fin = wanted(w, from);

        if (!tin && !fin)
            return false;
        if (!fin) {
            kind = WS_WATCH_CREATED;
            from = NULL;
        } else if (!tin) {
            kind = WS_WATCH_REMOVED;
            path = from;
            from = NULL;
        }
    } else if (kind != WS_WATCH_GONE && kind != WS_WATCH_READY && !wanted(w, path)) {
        return false;
    }
    pthread_mutex_lock(&w->lock);
    r = add_change(w, kind, type, path, from);
    pthread_mutex_unlock(&w->lock);
    return r;
}

static void gone(struct ws_watch *w)
{
    emit(w, WS_WATCH_GONE, WS_FT_UNKNOWN, "", NULL);
}

/* An event the watch could not follow (no room for a directory watch): it
 * counts as dropped. */
static void lost(struct ws_watch *w)
{
    pthread_mutex_lock(&w->lock);
    drop_one(w);
    place_overflow(w);
    pthread_mutex_unlock(&w->lock);
}

/* ---- the directory table (inotify) ---- */

static struct wnode *wd_find(const struct ws_watch *w, int wd)
{
    if (!w->wcap)
        return NULL;
    for (struct wnode *n = w->wtab[(unsigned)wd & (w->wcap - 1)]; n; n = n->hnext)
        if (n->wd == wd)
            return n;
    return NULL;
}

static int wd_add(struct ws_watch *w, int wd, int parent, const char *name)
{
    struct wnode *n;

    if (w->nwd + 1 > w->wcap) {
        size_t ncap = w->wcap ? w->wcap * 2 : WHASH_MIN;
        struct wnode **t = calloc(ncap, sizeof(*t));

        if (!t)
            return -ENOMEM;
        for (size_t i = 0; i < w->wcap; i++) {
            while (w->wtab[i]) {
                struct wnode *m = w->wtab[i];

                w->wtab[i] = m->hnext;
                m->hnext = t[(unsigned)m->wd & (ncap - 1)];
                t[(unsigned)m->wd & (ncap - 1)] = m;
            }
        }
        free(w->wtab);
        w->wtab = t;
        w->wcap = ncap;
    }
    n = calloc(1, sizeof(*n));
    if (!n)
        return -ENOMEM;
    n->wd = wd;
    n->parent = parent;
    if (name) {
        n->name = strdup(name);
        if (!n->name) {
            free(n);
            return -ENOMEM;
        }
    }
    n->hnext = w->wtab[(unsigned)wd & (w->wcap - 1)];
    w->wtab[(unsigned)wd & (w->wcap - 1)] = n;
    w->nwd++;
    return 0;
}

static void wd_drop(struct ws_watch *w, int wd)
{
    for (struct wnode **p = &w->wtab[(unsigned)wd & (w->wcap - 1)]; *p; p = &(*p)->hnext) {
        if ((*p)->wd == wd) {
            struct wnode *n = *p;

            *p = n->hnext;
            free(n->name);
            free(n);
            w->nwd--;
            return;
        }
    }
}

/* The child directory `name` of wd in the table, or NULL. */
static struct wnode *wd_child(const struct ws_watch *w, int parent, const char *name)
{
    for (size_t i = 0; i < w->wcap; i++)
        for (struct wnode *n = w->wtab[i]; n; n = n->hnext)
            if (n->parent == parent && n->name && strcmp(n->name, name) == 0)
                return n;
    return NULL;
}

/* Whether wd is `top` or below it. */
static bool wd_below(const struct ws_watch *w, int wd, int top)
{
    for (int depth = 0; wd >= 0 && depth < 100000; depth++) {
        const struct wnode *n;

        if (wd == top)
            return true;
        n = wd_find(w, wd);
        if (!n)
            return false;
        wd = n->parent;
    }
    return false;
}

/* Stops watching a directory and everything below it (moved out of the
 * watched tree: whatever it is now, it is not ours to watch). */
static void wd_remove_tree(struct ws_watch *w, int top)
{
    int *v = NULL;
    size_t n = 0;

    if (top == w->root_wd)
        return;
    v = malloc(sizeof(*v) * (w->nwd ? w->nwd : 1));
    if (!v)
        return;
    /* First find them all: the chains are read through the table. */
    for (size_t i = 0; i < w->wcap; i++)
        for (struct wnode *x = w->wtab[i]; x; x = x->hnext)
            if (x->wd != w->root_wd && wd_below(w, x->wd, top))
                v[n++] = x->wd;
    for (size_t i = 0; i < n; i++) {
        inotify_rm_watch(w->ifd, v[i]);
        wd_drop(w, v[i]);
    }
    free(v);
}

/* The path of a watched directory relative to the watch's directory ("" for
 * it), NULL when memory is short or the chain is broken. */
static char *wd_relpath(const struct ws_watch *w, int wd)
{
    const char *names[256];
    size_t depth = 0, len = 0;
    char *s, *p;
    const struct wnode *n = wd_find(w, wd);

    /* Deeper trees than this are rare: walk again with a heap array. */
    const char **many = NULL;
    size_t cap = 256;
    const char **v = names;

    while (n && n->name) {
        if (depth == cap) {
            const char **m = realloc(many, 2 * cap * sizeof(*m));

            if (!m) {
                free(many);
                return NULL;
            }
            if (!many)
                memcpy(m, names, sizeof(names));
            many = m;
            v = many;
            cap *= 2;
        }
        v[depth++] = n->name;
        len += strlen(n->name) + 1;
        n = wd_find(w, n->parent);
    }
    if (!n) {
        free(many);
        return NULL;
    }
    s = malloc(len + 1);
    if (!s) {
        free(many);
        return NULL;
    }
    p = s;
    while (depth > 0) {
        const char *name = v[--depth];
        size_t l = strlen(name);

        memcpy(p, name, l);
        p += l;
        if (depth)
            *p++ = '/';
    }
    *p = '\0';
    free(many);
    return s;
}

/* A path relative to the watch's directory to a workspace-relative one. */
static char *to_ws(const struct ws_watch *w, const char *rel)
{
    return join(w->base, rel);
}

static void cache_drop(struct ws_watch *w)
{
    ws_close_fd(&w->cache_fd);
    w->cache_wd = -1;
}

/* lstat of `name` in watched directory wd: its type, or UNKNOWN. */
static enum ws_ftype type_in(struct ws_watch *w, int wd, const char *name)
{
    struct stat st;

    if (w->cache_wd != wd) {
        char *rel = wd_relpath(w, wd);

        cache_drop(w);
        if (!rel)
            return WS_FT_UNKNOWN;
        w->cache_fd = open_beneath(w->rootfd, rel, O_PATH | O_DIRECTORY);
        free(rel);
        if (w->cache_fd < 0) {
            w->cache_fd = -1;
            return WS_FT_UNKNOWN;
        }
        w->cache_wd = wd;
    }
    if (fstatat(w->cache_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return WS_FT_UNKNOWN;
    return ftype_of_mode(st.st_mode);
}

/* Watches the directory at `rel` (relative to the watch's directory; the
 * fd when the caller has it open, else -1), child `name` of `parent`. Returns
 * the wd, 0 when it is already watched, or -errno. */
static int watch_dir(struct ws_watch *w, int fd, const char *rel, int parent, const char *name)
{
    ws_cleanup_fd int own = -1;
    char proc[64];
    int wd, r;

    if (w->nwd >= WS_WATCH_MAX_DIRECTORIES)
        return -ENOSPC;
    if (fd < 0) {
        own = open_beneath(w->rootfd, rel, O_PATH | O_DIRECTORY);
        if (own < 0)
            return own;
        fd = own;
    }
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    /* The magic link is the descriptor itself, opened confined: following
     * it (no IN_DONT_FOLLOW, which would watch the link) cannot leave the
     * tree. IN_ONLYDIR refuses anything but a directory. */
    wd = inotify_add_watch(w->ifd, proc, WATCH_MASK | IN_ONLYDIR);
    if (wd < 0)
        return -errno;
    if (wd_find(w, wd)) {
        struct wnode *n = wd_find(w, wd);

        if (n->wd != w->root_wd && name && (n->parent != parent || strcmp(n->name, name))) {
            /* The same directory under a new name: a move we missed. */
            char *nn = strdup(name);

            if (nn) {
                free(n->name);
                n->name = nn;
                n->parent = parent;
            }
        }
        return 0;
    }
    r = wd_add(w, wd, parent, name);
    if (r < 0) {
        inotify_rm_watch(w->ifd, wd);
        return r;
    }
    return wd;
}

struct pending_dir {
    int parent;
    char *name; /* NULL for the watch's directory */
    char *rel;
};

/* Watches the directory rel (child `name` of parent; parent -1 and name
 * NULL for the watch's own directory, fd its descriptor) and, when the
 * watch is recursive, every directory below it: each is watched first and
 * listed second. With `report`, every entry a listing finds is reported
 * created. Returns 0 or, at the start only (strict), the first error. */
static int watch_tree(struct ws_watch *w, int fd, int parent, const char *name, const char *rel,
                      bool report, bool strict)
{
    struct pending_dir *stack = NULL;
    size_t n = 0, cap = 0;
    int r = 0;

    stack = malloc(sizeof(*stack) * 16);
    if (!stack)
        return -ENOMEM;
    cap = 16;
    stack[n++] = (struct pending_dir){
        .parent = parent,
        .name = name ? strdup(name) : NULL,
        .rel = strdup(rel),
    };
    while (n > 0) {
        struct pending_dir pd = stack[--n];
        ws_cleanup_fd int dfd = -1;
        char *wsp = NULL;
        DIR *d = NULL;
        int wd;

        if (!pd.rel || (pd.parent >= 0 && !pd.name)) {
            r = strict ? -ENOMEM : r;
            goto next;
        }
        wsp = to_ws(w, pd.rel);
        if (!wsp)
            goto next;
        if (pd.parent >= 0 && pruned(w, wsp))
            goto next;
        wd = watch_dir(w, pd.parent < 0 ? fd : -1, pd.rel, pd.parent, pd.name);
        if (wd == -ENOSPC || wd == -ENOMEM) {
            if (strict) {
                r = -ENOSPC;
                goto next;
            }
            lost(w);
            goto next;
        }
        if (wd <= 0) {
            if (strict && pd.parent < 0)
                r = wd < 0 ? wd : -EEXIST;
            goto next;
        }
        if (pd.parent < 0)
            w->root_wd = wd;
        if (!w->recursive && pd.parent >= 0)
            goto next;
        if (!w->recursive && !report)
            goto next;
        dfd = open_beneath(w->rootfd, pd.rel, O_RDONLY | O_DIRECTORY);
        if (dfd < 0)
            goto next;
        d = fdopendir(dfd);
        if (!d)
            goto next;
        dfd = -1;
        for (struct dirent *de; (de = readdir(d));) {
            char *crel, *cws;
            enum ws_ftype t;

            if (de->d_name[0] == '.' &&
                (de->d_name[1] == '\0' || (de->d_name[1] == '.' && de->d_name[2] == '\0')))
                continue;
            t = ftype_of_dtype(de->d_type);
            if (report) {
                cws = join(wsp, de->d_name);
                if (cws)
                    emit(w, WS_WATCH_CREATED, t, cws, NULL);
                free(cws);
            }
            if (t != WS_FT_DIRECTORY || !w->recursive)
                continue;
            crel = join(pd.rel, de->d_name);
            if (n == cap) {
                struct pending_dir *s = realloc(stack, sizeof(*s) * cap * 2);

                if (!s) {
                    free(crel);
                    lost(w);
                    continue;
                }
                stack = s;
                cap *= 2;
            }
            stack[n++] = (struct pending_dir){
                .parent = wd,
                .name = strdup(de->d_name),
                .rel = crel,
            };
        }
        closedir(d);
    next:
        free(wsp);
        free(pd.name);
        free(pd.rel);
        if (r < 0 && strict)
            break;
    }
    while (n > 0) {
        n--;
        free(stack[n].name);
        free(stack[n].rel);
    }
    free(stack);
    return r;
}

/* After the kernel's queue overflowed: directories made meanwhile were
 * not seen; watch them now (their entries are covered by OVERFLOW). */
static void rescan(struct ws_watch *w)
{
    if (w->recursive && w->root_wd >= 0)
        watch_tree(w, w->rootfd, -1, NULL, "", false, false);
}

/* ---- inotify events ---- */

static void finish_move_from(struct ws_watch *w)
{
    if (!w->mfrom.set)
        return;
    w->mfrom.set = false;
    if (w->mfrom.hidden) {
        /* A writer's temporary file went away: nothing to report. */
    } else if (w->fpath) {
        if (strcmp(w->mfrom.name, w->fname) == 0)
            gone(w);
    } else {
        emit(w, WS_WATCH_REMOVED, w->mfrom.isdir ? WS_FT_DIRECTORY : WS_FT_UNKNOWN, w->mfrom.path,
             NULL);
        if (w->mfrom.isdir && w->recursive) {
            struct wnode *c = wd_child(w, w->mfrom.wd, w->mfrom.name);

            if (c)
                wd_remove_tree(w, c->wd);
            cache_drop(w);
        }
    }
    free(w->mfrom.name);
    free(w->mfrom.path);
    w->mfrom.name = w->mfrom.path = NULL;
    w->mfrom.hidden = false;
}

/* The names the host storage's atomic writes use on the way (see
 * server/posix/fs.c): a temporary file linked under a transient name,
 * then renamed over its target. Such a write is the target's create,
 * never a move. */
static bool writer_tmp_name(const char *name)
{
    return ws_vfs_transient_name(name, strlen(name), WS_VFS_TMP_PREFIX);
}

/* An unnamed file (O_TMPFILE) being written shows up as "#" and its inode
 * number: only when no such name exists. */
static bool tmpfile_name(struct ws_watch *w, int wd, const char *name)
{
    if (name[0] != '#' || !name[1])
        return false;
    for (const char *p = name + 1; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return type_in(w, wd, name) == WS_FT_UNKNOWN;
}

static void on_inotify(struct ws_watch *w, const struct inotify_event *ev)
{
    bool isdir = ev->mask & IN_ISDIR;
    struct wnode *dn;
    char *drel = NULL, *rel = NULL, *path = NULL;
    enum ws_ftype t;

    if (w->mfrom.set && !((ev->mask & IN_MOVED_TO) && ev->cookie == w->mfrom.cookie))
        finish_move_from(w);
    if (ev->mask & IN_Q_OVERFLOW) {
        pthread_mutex_lock(&w->lock);
        w->kernel_overflow = true;
        w->overflow = true;
        place_overflow(w);
        pthread_mutex_unlock(&w->lock);
        rescan(w);
        return;
    }
    dn = wd_find(w, ev->wd);
    if (!dn)
        return;
    if (ev->mask & (IN_IGNORED | IN_UNMOUNT)) {
        if (ev->wd == w->root_wd)
            gone(w);
        else
            wd_drop(w, ev->wd);
        cache_drop(w);
        return;
    }
    if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
        if (ev->wd == w->root_wd && !w->fpath)
            gone(w);
        return;
    }
    if (ev->len == 0 || !ev->name[0])
        return;
    if (writer_tmp_name(ev->name)) {
        if ((ev->mask & IN_MOVED_FROM) && !w->fpath) {
            w->mfrom.name = strdup(ev->name);
            if (!w->mfrom.name)
                return;
            w->mfrom.set = true;
            w->mfrom.hidden = true;
            w->mfrom.cookie = ev->cookie;
            w->mfrom.wd = ev->wd;
            w->mfrom.isdir = false;
        }
        return;
    }
    if (tmpfile_name(w, ev->wd, ev->name))
        return;
    if (w->fpath && strcmp(ev->name, w->fname) != 0) {
        /* A file watch: only its own name counts. */
        return;
    }
    drel = wd_relpath(w, ev->wd);
    if (!drel)
        goto out;
    rel = join(drel, ev->name);
    path = rel ? to_ws(w, rel) : NULL;
    if (!path) {
        lost(w);
        goto out;
    }
    if (w->fpath) {
        if (ev->mask & (IN_DELETE | IN_MOVED_FROM))
            gone(w);
        else if (ev->mask & (IN_MODIFY | IN_ATTRIB | IN_MOVED_TO))
            emit(w, WS_WATCH_MODIFIED, type_in(w, ev->wd, ev->name), path, NULL);
        else if (ev->mask & IN_CREATE)
            emit(w, WS_WATCH_CREATED, type_in(w, ev->wd, ev->name), path, NULL);
        goto out;
    }
    if (ev->mask & IN_CREATE) {
        t = isdir ? WS_FT_DIRECTORY : type_in(w, ev->wd, ev->name);
        emit(w, WS_WATCH_CREATED, t, path, NULL);
        if (isdir && w->recursive)
            watch_tree(w, -1, ev->wd, ev->name, rel, true, false);
    }
    if (ev->mask & (IN_MODIFY | IN_ATTRIB))
        emit(w, WS_WATCH_MODIFIED, isdir ? WS_FT_DIRECTORY : WS_FT_REGULAR, path, NULL);
    if (ev->mask & IN_DELETE) {
        emit(w, WS_WATCH_REMOVED, isdir ? WS_FT_DIRECTORY : WS_FT_UNKNOWN, path, NULL);
        if (isdir)
            cache_drop(w);
    }
    if (ev->mask & IN_MOVED_FROM) {
        w->mfrom.set = true;
        w->mfrom.cookie = ev->cookie;
        w->mfrom.wd = ev->wd;
        w->mfrom.isdir = isdir;
        w->mfrom.name = strdup(ev->name);
        w->mfrom.path = path;
        path = NULL;
        if (!w->mfrom.name || !w->mfrom.path) {
            free(w->mfrom.name);
            free(w->mfrom.path);
            w->mfrom.name = w->mfrom.path = NULL;
            w->mfrom.set = false;
            lost(w);
        }
    }
    if (ev->mask & IN_MOVED_TO) {
        if (w->mfrom.set && w->mfrom.hidden) {
            emit(w, WS_WATCH_CREATED, type_in(w, ev->wd, ev->name), path, NULL);
            w->mfrom.set = w->mfrom.hidden = false;
            free(w->mfrom.name);
            w->mfrom.name = NULL;
        } else if (w->mfrom.set) {
            t = isdir ? WS_FT_DIRECTORY : type_in(w, ev->wd, ev->name);
            emit(w, WS_WATCH_MOVED, t, path, w->mfrom.path);
            if (isdir && w->recursive) {
                struct wnode *c = wd_child(w, w->mfrom.wd, w->mfrom.name);
                char *nn = strdup(ev->name);

                if (c && nn) {
                    free(c->name);
                    c->name = nn;
                    c->parent = ev->wd;
                } else {
                    free(nn);
                    watch_tree(w, -1, ev->wd, ev->name, rel, true, false);
                }
                cache_drop(w);
            }
            w->mfrom.set = false;
            free(w->mfrom.name);
            free(w->mfrom.path);
            w->mfrom.name = w->mfrom.path = NULL;
        } else {
            t = isdir ? WS_FT_DIRECTORY : type_in(w, ev->wd, ev->name);
            emit(w, WS_WATCH_CREATED, t, path, NULL);
            if (isdir && w->recursive)
                watch_tree(w, -1, ev->wd, ev->name, rel, true, false);
        }
    }
out:
    free(drel);
    free(rel);
    free(path);
}

static void read_inotify(struct ws_watch *w)
{
    static __thread char buf[READ_BUF] __attribute__((aligned(__alignof__(struct inotify_event))));
    bool drained = false;

    for (int round = 0; round < READ_ROUNDS; round++) {
        ssize_t n = read(w->ifd, buf, sizeof(buf));

        if (n <= 0) {
            drained = true;
            break;
        }
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;

            on_inotify(w, ev);
            p += sizeof(*ev) + ev->len;
        }
    }
    /* A rename's two halves are queued together: a lone first half at the
     * end of the queue moved out of the tree. */
    if (drained)
        finish_move_from(w);
}

/* ---- memory storages ---- */

/* Whether path (workspace-relative) is something the watch reports. */
static bool covers(const struct ws_watch *w, const char *path)
{
    const char *slash;

    if (w->fpath)
        return strcmp(path, w->fpath) == 0;
    if (!is_at_or_below(path, w->base) || strcmp(path, w->base) == 0)
        return false;
    if (w->recursive)
        return true;
    slash = strrchr(path, '/');
    if (!slash)
        return w->base[0] == '\0';
    return strlen(w->base) == (size_t)(slash - path) &&
           strncmp(path, w->base, (size_t)(slash - path)) == 0;
}

static void on_change(void *ud, enum ws_vfs_change what, enum ws_ftype type, const char *path,
                      const char *from)
{
    struct ws_watch *w = ud;
    const char *self = w->fpath ? w->fpath : w->base;
    bool kick = false;

    if (atomic_load(&w->stopping))
        return;
    if (self[0] && ((what == WS_VFS_REMOVED && strcmp(path, self) == 0) ||
                    (what == WS_VFS_MOVED && is_at_or_below(self, from)))) {
        gone(w);
        wake(w->e);
        return;
    }
    switch (what) {
    case WS_VFS_CREATED:
    case WS_VFS_MODIFIED:
    case WS_VFS_REMOVED:
        if (covers(w, path))
            kick = emit(w,
                        what == WS_VFS_CREATED    ? WS_WATCH_CREATED
                        : what == WS_VFS_MODIFIED ? WS_WATCH_MODIFIED
                                                  : WS_WATCH_REMOVED,
                        type, path, NULL);
        break;
    case WS_VFS_MOVED: {
        bool tin = covers(w, path), fin = covers(w, from);

        if (w->fpath && tin)
            kick = emit(w, WS_WATCH_MODIFIED, type, path, NULL);
        else if (tin && fin)
            kick = emit(w, WS_WATCH_MOVED, type, path, from);
        else if (tin)
            kick = emit(w, WS_WATCH_CREATED, type, path, NULL);
        else if (fin)
            kick = emit(w, WS_WATCH_REMOVED, type, from, NULL);
        break;
    }
    }
    if (kick)
        wake(w->e);
}

/* ---- the engine thread ---- */

static void watch_free(struct ws_watch *w)
{
    if (w->sub)
        w->fs->ops->unsubscribe(w->sub);
    ws_close_fd(&w->ifd);
    ws_close_fd(&w->rootfd);
    cache_drop(w);
    for (size_t i = 0; i < w->wcap; i++) {
        while (w->wtab[i]) {
            struct wnode *n = w->wtab[i];

            w->wtab[i] = n->hnext;
            free(n->name);
            free(n);
        }
    }
    free(w->wtab);
    free(w->mfrom.name);
    free(w->mfrom.path);
    for (struct item *it = w->pend_head, *nx; it; it = nx) {
        nx = it->next;
        item_free(it);
    }
    for (struct item *it = w->ready_head, *nx; it; it = nx) {
        nx = it->next;
        item_free(it);
    }
    for (size_t i = 0; i < w->n_include; i++)
        free(w->include[i]);
    for (size_t i = 0; i < w->n_exclude; i++)
        free(w->exclude[i]);
    free(w->include);
    free(w->exclude);
    free(w->key);
    free(w->base);
    free(w->fpath);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

/* Due events to ready, the check; then notify. Returns the next time the
 * watch needs the engine (monotonic ns). */
static int64_t service(struct ws_watch *w, int64_t now)
{
    int64_t next = w->next_check_ns;
    bool kick;

    if (now >= w->next_check_ns) {
        int r = w->check ? w->check(w->ud) : 0;
        struct stat st;

        /* The directory's descriptor keeps a removed directory's inode,
         * and with it the kernel's IN_DELETE_SELF, alive: look. */
        if (w->rootfd >= 0 && fstat(w->rootfd, &st) == 0 && st.st_nlink == 0)
            gone(w);

        w->next_check_ns = now + (int64_t)WS_WATCH_CHECK_MS * 1000000;
        next = w->next_check_ns;
        if (r < 0) {
            pthread_mutex_lock(&w->lock);
            if (!w->error)
                w->error = r;
            w->kick = true;
            pthread_mutex_unlock(&w->lock);
        }
    }
    pthread_mutex_lock(&w->lock);
    flush_pending(w, false, now);
    place_overflow(w);
    if (w->pend_head && w->pend_head->due_ns < next)
        next = w->pend_head->due_ns;
    kick = w->kick;
    w->kick = false;
    pthread_mutex_unlock(&w->lock);
    if (kick && !atomic_load(&w->stopping))
        w->notify(w->ud);
    return next;
}

static void *engine_main(void *arg)
{
    struct ws_watch_engine *e = arg;
    struct epoll_event evs[32];
    int timeout = -1;

    for (;;) {
        int n = epoll_wait(e->epfd, evs, 32, timeout);
        struct ws_watch *head, **pp;
        int64_t now, next = INT64_MAX;

        for (int i = 0; i < n; i++) {
            struct ws_watch *w = evs[i].data.ptr;

            if (!w) {
                uint64_t v;

                (void)!read(e->evfd, &v, sizeof(v));
                continue;
            }
            if (!atomic_load(&w->stopping))
                read_inotify(w);
        }
        pthread_mutex_lock(&e->lock);
        if (e->quit && !e->watches) {
            pthread_mutex_unlock(&e->lock);
            return NULL;
        }
        head = e->watches;
        pthread_mutex_unlock(&e->lock);
        now = ws_mono_ns();
        for (struct ws_watch *w = head; w; w = w->next) {
            int64_t t;

            if (atomic_load(&w->stopping) || !atomic_load(&w->started))
                continue;
            t = service(w, now);
            if (t < next)
                next = t;
        }
        /* Stopped watches go; new ones are only ever put at the head. */
        pthread_mutex_lock(&e->lock);
        pp = &e->watches;
        while (*pp) {
            struct ws_watch *w = *pp;

            if (atomic_load(&w->stopping)) {
                *pp = w->next;
                pthread_mutex_unlock(&e->lock);
                if (w->ifd >= 0)
                    epoll_ctl(e->epfd, EPOLL_CTL_DEL, w->ifd, NULL);
                void (*released)(void *) = w->released;
                void *ud = w->ud;
                watch_free(w);
                if (released)
                    released(ud);
                pthread_mutex_lock(&e->lock);
                pp = &e->watches;
                continue;
            }
            pp = &w->next;
        }
        pthread_mutex_unlock(&e->lock);
        now = ws_mono_ns();
        if (next == INT64_MAX)
            timeout = -1;
        else if (next <= now)
            timeout = 0;
        else
            timeout = (int)((next - now + 999999) / 1000000);
    }
}

int ws_watch_engine_new(struct ws_watch_engine **ret)
{
    struct ws_watch_engine *e = calloc(1, sizeof(*e));
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    int r;

    if (!e)
        return -ENOMEM;
    e->epfd = epoll_create1(EPOLL_CLOEXEC);
    e->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    e->max = WS_WATCH_MAX_WATCHES_DEFAULT;
    e->max_per_key = WS_WATCH_MAX_WATCHES_PER_KEY_DEFAULT;
    if (e->epfd < 0 || e->evfd < 0 || epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->evfd, &ev) < 0) {
        r = -errno;
        goto fail;
    }
    pthread_mutex_init(&e->lock, NULL);
    r = -pthread_create(&e->thread, NULL, engine_main, e);
    if (r < 0) {
        pthread_mutex_destroy(&e->lock);
        goto fail;
    }
    *ret = e;
    return 0;
fail:
    ws_close_fd(&e->epfd);
    ws_close_fd(&e->evfd);
    free(e);
    return r;
}

void ws_watch_engine_free(struct ws_watch_engine *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->lock);
    e->quit = true;
    pthread_mutex_unlock(&e->lock);
    wake(e);
    pthread_join(e->thread, NULL);
    pthread_mutex_destroy(&e->lock);
    close(e->epfd);
    close(e->evfd);
    free(e);
}

void ws_watch_engine_set_limits(struct ws_watch_engine *e, unsigned max_watches,
                                unsigned max_watches_per_key)
{
    pthread_mutex_lock(&e->lock);
    e->max = max_watches ? max_watches : WS_WATCH_MAX_WATCHES_DEFAULT;
    e->max_per_key =
        max_watches_per_key ? max_watches_per_key : WS_WATCH_MAX_WATCHES_PER_KEY_DEFAULT;
    pthread_mutex_unlock(&e->lock);
}

unsigned ws_watch_engine_count(struct ws_watch_engine *e)
{
    unsigned n;

    pthread_mutex_lock(&e->lock);
    n = e->n;
    pthread_mutex_unlock(&e->lock);
    return n;
}

/* ---- watches ---- */

static int copy_patterns(const char *const *in, size_t n, char ***ret)
{
    char **v;

    if (n > WS_WATCH_PATTERNS_MAX)
        return -WS_ELIMIT;
    v = calloc(n ? n : 1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    *ret = v;
    for (size_t i = 0; i < n; i++) {
        int r = ws_glob_match(in[i], "x");

        if (r < 0)
            return r;
        v[i] = strdup(in[i]);
        if (!v[i])
            return -ENOMEM;
    }
    return 0;
}

/* Takes a slot of the limits. */
unsigned ws_watch_engine_count_key(struct ws_watch_engine *e, const char *key)
{
    unsigned n = 0;

    pthread_mutex_lock(&e->lock);
    for (struct ws_watch *o = e->watches; o; o = o->next)
        if (!atomic_load(&o->stopping) && strcmp(o->key, key) == 0)
            n++;
    pthread_mutex_unlock(&e->lock);
    return n;
}

static int admit(struct ws_watch_engine *e, struct ws_watch *w, struct ws_diag *d)
{
    unsigned same = 0;
    int r = 0;

    pthread_mutex_lock(&e->lock);
    for (struct ws_watch *o = e->watches; o; o = o->next)
        if (!atomic_load(&o->stopping) && strcmp(o->key, w->key) == 0)
            same++;
    if (e->n >= e->max) {
        ws_diag_set(d, "the server runs %u watches, its limit", e->max);
        ws_diag_meta(d, "quota", "server_watches");
        ws_diag_meta(d, "limit", "%u", e->max);
        r = -WS_EQUOTA;
    } else if (same >= e->max_per_key) {
        ws_diag_set(d, "the workspace has %u watches, its limit", e->max_per_key);
        ws_diag_meta(d, "quota", "watches");
        ws_diag_meta(d, "limit", "%u", e->max_per_key);
        r = -WS_EQUOTA;
    } else {
        e->n++;
        w->next = e->watches;
        e->watches = w;
    }
    pthread_mutex_unlock(&e->lock);
    return r;
}

static void dirs_quota(struct ws_diag *d)
{
    ws_diag_set(d, "the watch would cover more directories than %u (or the host's inotify limits)",
                WS_WATCH_MAX_DIRECTORIES);
    ws_diag_meta(d, "quota", "watched_directories");
    ws_diag_meta(d, "limit", "%u", WS_WATCH_MAX_DIRECTORIES);
}

/* The kernel's fs.inotify.max_user_instances (0 when unreadable). */
static long inotify_instances_limit(void)
{
    FILE *f = fopen("/proc/sys/fs/inotify/max_user_instances", "re");
    long v = 0;

    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

/* Each host watch holds one inotify instance; the host ran out of them
 * (fs.inotify.max_user_instances, counted over every process of the
 * server's user). */
static void instances_quota(struct ws_diag *d)
{
    long lim = inotify_instances_limit();

    ws_diag_set(d,
                "the host refused the server another inotify instance: each watch of an on-disk "
                "workspace holds one, and the server's user may have %ld "
                "(fs.inotify.max_user_instances), the server only so many descriptors",
                lim);
    ws_diag_meta(d, "quota", "inotify_instances");
    ws_diag_meta(d, "limit", "%ld", lim);
}

/* The inotify half of a start: returns 0 or an error. */
static int start_inotify(struct ws_watch *w, bool is_dir, struct ws_diag *d)
{
    int r;

    w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->ifd < 0) {
        r = -errno;
        if (r == -EMFILE || r == -ENFILE) {
            /* The per-user instance limit, or descriptors. */
            instances_quota(d);
            return -WS_EQUOTA;
        }
        return r;
    }
    r = w->fs->ops->open_dir_fd(w->fs, w->base[0] ? w->base : ".", &w->rootfd);
    if (r < 0)
        return r == -WS_ESYMLINK_LEAF && is_dir ? -ENOTDIR : r;
    r = watch_tree(w, w->rootfd, -1, NULL, "", false, true);
    if (r == -ENOSPC) {
        dirs_quota(d);
        return -WS_EQUOTA;
    }
    return r;
}

int ws_watch_start(struct ws_watch_engine *e, const struct ws_watch_config *cfg, struct ws_diag *d,
                   struct ws_watch **ret)
{
    const struct ws_vfs_ops *ops = cfg->fs->ops;
    struct ws_watch *w;
    struct ws_stat st;
    char *norm = NULL;
    bool admitted = false;
    int r;

    if (cfg->coalesce_ms > WS_WATCH_COALESCE_MS_MAX)
        return -WS_ELIMIT;
    if (!ops->subscribe && !ops->open_dir_fd)
        return -WS_ECAPABILITY;
    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    pthread_mutex_init(&w->lock, NULL);
    w->e = e;
    w->ifd = w->rootfd = w->cache_fd = -1;
    w->cache_wd = w->root_wd = -1;
    w->fs = cfg->fs;
    w->notify = cfg->notify;
    w->check = cfg->check;
    w->released = cfg->released;
    w->ud = cfg->ud;
    w->recursive = cfg->recursive;
    w->window_ns =
        (int64_t)(cfg->coalesce_ms ? cfg->coalesce_ms : WS_WATCH_COALESCE_MS_DEFAULT) * 1000000;
    w->next_check_ns = ws_mono_ns() + (int64_t)WS_WATCH_CHECK_MS * 1000000;
    w->n_include = cfg->n_include;
    w->n_exclude = cfg->n_exclude;
    w->key = strdup(cfg->key ? cfg->key : "");
    if (!w->key) {
        r = -ENOMEM;
        goto fail;
    }
    r = copy_patterns(cfg->include, cfg->n_include, &w->include);
    if (r == 0)
        r = copy_patterns(cfg->exclude, cfg->n_exclude, &w->exclude);
    if (r < 0)
        goto fail;
    r = normalize(cfg->path, &norm);
    if (r < 0)
        goto fail;
    r = ops->stat(cfg->fs, norm[0] ? norm : ".", &st);
    if (r < 0)
        goto fail;
    if (st.type == WS_FT_DIRECTORY) {
        w->base = norm;
        norm = NULL;
    } else {
        char *slash = strrchr(norm, '/');

        if (cfg->recursive) {
            r = -ENOTDIR;
            goto fail;
        }
        w->fpath = norm;
        norm = NULL;
        w->fname = slash ? slash + 1 : w->fpath;
        w->base = slash ? strndup(w->fpath, (size_t)(slash - w->fpath)) : strdup("");
        if (!w->base) {
            r = -ENOMEM;
            goto fail;
        }
    }
    r = admit(e, w, d);
    if (r < 0)
        goto fail;
    admitted = true;
    /* READY is first, whatever comes while the watches are put in place. */
    pthread_mutex_lock(&w->lock);
    struct item *ready = item_new(WS_WATCH_READY, WS_FT_UNKNOWN, "", NULL);
    if (ready) {
        ready_push(w, ready);
        w->count++;
    }
    pthread_mutex_unlock(&w->lock);
    if (!ready) {
        r = -ENOMEM;
        goto fail;
    }
    if (ops->subscribe) {
        r = ops->subscribe(cfg->fs, on_change, w, &w->sub);
        if (r < 0)
            goto fail;
        /* Removed between the stat and the subscription: it is missing. */
        r = ops->stat(cfg->fs, w->fpath ? w->fpath : w->base[0] ? w->base : ".", &st);
        if (r < 0)
            goto fail;
    } else {
        r = start_inotify(w, st.type == WS_FT_DIRECTORY, d);
        if (r < 0)
            goto fail;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = w};
        if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, w->ifd, &ev) < 0) {
            r = -errno;
            goto fail;
        }
    }
    atomic_store(&w->started, true);
    wake(e);
    *ret = w;
    return 0;
fail:
    free(norm);
    if (!admitted) {
        watch_free(w);
        return r;
    }
    /* The engine's loop may be walking its list, so the engine frees the
     * struct; what uses the storage goes now (the caller may free it as
     * soon as this returns). Nothing was registered with epoll. */
    if (w->sub) {
        ops->unsubscribe(w->sub);
        w->sub = NULL;
    }
    ws_close_fd(&w->ifd);
    ws_close_fd(&w->rootfd);
    cache_drop(w);
    w->released = NULL;
    ws_watch_stop(w);
    return r;
}

int ws_watch_next(struct ws_watch *w, struct ws_watch_event **ret)
{
    struct ws_watch_event *ev;
    struct item *it;
    int r;

    pthread_mutex_lock(&w->lock);
    if (w->error) {
        r = w->error;
        goto out;
    }
    if (w->gone_taken) {
        r = -ENOENT;
        goto out;
    }
    it = w->ready_head;
    if (!it) {
        r = 0;
        goto out;
    }
    ev = calloc(1, sizeof(*ev));
    if (!ev) {
        r = -ENOMEM;
        goto out;
    }
    w->ready_head = it->next;
    if (!w->ready_head)
        w->ready_tail = NULL;
    w->count--;
    if (it->kind == WS_WATCH_GONE)
        w->gone_taken = true;
    *ev = (struct ws_watch_event){
        .kind = it->kind,
        .type = it->type,
        .path = it->path,
        .from = it->from,
        .dropped = it->dropped,
    };
    free(it);
    place_overflow(w);
    *ret = ev;
    r = 1;
out:
    pthread_mutex_unlock(&w->lock);
    return r;
}

void ws_watch_stop(struct ws_watch *w)
{
    struct ws_watch_engine *e = w->e;

    pthread_mutex_lock(&e->lock);
    atomic_store(&w->stopping, true);
    e->n--;
    pthread_mutex_unlock(&e->lock);
    wake(e);
}
