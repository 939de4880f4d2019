#include "server/posix/limits.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/base/fd.h"
#include "server/base/io.h"
#include "server/posix/cgroup2.h"

#define NAME_MAX_LEN 64
#define PARENT_FMT   "workspaced-%d"

enum ctl { CTL_PIDS = 0, CTL_MEMORY, CTL_CPU, CTL_COUNT };

static const char *const ctl_names[CTL_COUNT] = {"pids", "memory", "cpu"};
static const unsigned ctl_bits[CTL_COUNT] = {WS_LIMIT_PIDS, WS_LIMIT_MEMORY, WS_LIMIT_CPU};

struct controller {
    bool usable;
    char own[PATH_MAX];    /* the server's own cgroup directory */
    char parent[PATH_MAX]; /* own/workspaced-<pid> */
    int own_tasks_fd;      /* own/tasks, to move a thread back */
};

struct ws_limits_host {
    unsigned refs;                  /* under host_lock */
    struct ws_limits_group *listed; /* ws_limits_group_get's, under host_lock */
    struct controller c[CTL_COUNT];
    struct ws_cgroup2_host *v2; /* non-NULL: the v2 mechanism, c unused */
};

struct ws_limits_group {
    struct ws_limits_host *host;
    unsigned enforced;
    char dir[CTL_COUNT][PATH_MAX];
    int tasks_fd[CTL_COUNT];
    struct ws_cgroup2_group *v2;
    /* ws_limits_group_get's table, under host_lock: a listed group has
     * the table's reference and one per user. */
    char name[NAME_MAX_LEN + 1];
    unsigned refs;
    bool listed;
    struct ws_limits_group *next;
};

/* The process's host (see limits.h). */
static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ws_limits_host *the_host;

static bool has_token(const char *list, const char *tok)
{
    size_t n = strlen(tok);

    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, tok, n) == 0)
            return true;
        p = end ? end + 1 : NULL;
    }
    return false;
}

/* The v1 mount of controller `name`: its mount point and the cgroup path
 * it shows (its root). */
static int find_mount(const char *name, char *ret_point, char *ret_root, size_t size)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char *line = NULL;
    size_t cap = 0;
    int r = -ENODEV;

    if (!f)
        return -errno;
    while (r != 0 && getline(&line, &cap, f) > 0) {
        char *fields[24];
        int nf = 0, dash = -1;
        for (char *save = NULL, *tok = strtok_r(line, " \n", &save); tok && nf < 24;
             tok = strtok_r(NULL, " \n", &save)) {
            if (dash < 0 && nf >= 6 && strcmp(tok, "-") == 0)
                dash = nf;
            fields[nf++] = tok;
        }
        /* id parent dev root point opts [optional...] - fstype source super */
        if (dash < 0 || dash + 3 >= nf || strcmp(fields[dash + 1], "cgroup") != 0 ||
            !has_token(fields[dash + 3], name))
            continue;
        /* Mount points with escaped characters are not ours to guess. */
        if (strchr(fields[4], '\\') || strchr(fields[3], '\\') || strlen(fields[4]) >= size ||
            strlen(fields[3]) >= size)
            continue;
        snprintf(ret_point, size, "%s", fields[4]);
        snprintf(ret_root, size, "%s", fields[3]);
        r = 0;
    }
    free(line);
    fclose(f);
    return r;
}

/* The server's cgroup path in the hierarchy that has controller `name`. */
static int own_path(const char *name, char *ret, size_t size)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    char *line = NULL;
    size_t cap = 0;
    int r = -ENOENT;

    if (!f)
        return -errno;
    while (r != 0 && getline(&line, &cap, f) > 0) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        if (!has_token(c1 + 1, name))
            continue;
        char *path = c2 + 1;
        path[strcspn(path, "\n")] = '\0';
        if (strlen(path) >= size)
            continue;
        snprintf(ret, size, "%s", path);
        r = 0;
    }
    free(line);
    fclose(f);
    return r;
}

static int write_str(const char *dir, const char *file, const char *value)
{
    char path[PATH_MAX + 64];
    int fd, r = 0;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    /* One write: cgroupfs takes a value in a single write. */
    if (WS_RETRY_EINTR(write(fd, value, strlen(value))) < 0)
        r = -errno;
    close(fd);
    return r;
}

static int write_fd0(int fd)
{
    /* "0" moves the writing thread (tasks file, cgroup v1). */
    return WS_RETRY_EINTR(write(fd, "0", 1)) < 0 ? -errno : 0;
}

/* Kills what still runs in group `dir` and removes it. The processes are
 * a dead server's orphans (a killed server's commands, which the trees'
 * own sweep may be ending at this moment); a group empties only once they
 * are gone, so the rmdir is retried for up to a second. */
static void remove_group(const char *dir)
{
    char procs[PATH_MAX + 16];

    snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
    for (int tries = 0; tries < 50; tries++) {
        if (rmdir(dir) == 0 || errno != EBUSY)
            return;
        FILE *f = fopen(procs, "re");
        if (f) {
            int pid;
            while (fscanf(f, "%d", &pid) == 1)
                if (pid > 0)
                    (void)kill(pid, SIGKILL);
            fclose(f);
        }
        usleep(20 * 1000);
    }
}

/* Removes a parent group left by a server that is gone, and its
 * workspaces' groups. */
static void sweep_parent(const char *own, const char *entry)
{
    char path[PATH_MAX + NAME_MAX + 2];
    DIR *d;
    struct dirent *e;

    snprintf(path, sizeof(path), "%s/%s", own, entry);
    d = opendir(path);
    if (!d)
        return;
    while ((e = readdir(d))) {
        char sub[sizeof(path) + NAME_MAX + 2];
        if (e->d_type != DT_DIR || e->d_name[0] == '.')
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        remove_group(sub);
    }
    closedir(d);
    remove_group(path);
}

static void sweep_stale(const char *own)
{
    DIR *d = opendir(own);
    struct dirent *e;

    if (!d)
        return;
    while ((e = readdir(d))) {
        int pid;
        char tail;
        if (sscanf(e->d_name, PARENT_FMT "%c", &pid, &tail) != 1 || pid <= 0)
            continue;
        if (pid == getpid() || kill(pid, 0) == 0)
            continue; /* a live server's */
        sweep_parent(own, e->d_name);
    }
    closedir(d);
}

static void controller_init(struct controller *c, const char *name)
{
    char point[PATH_MAX], root[PATH_MAX], own[PATH_MAX], tasks[PATH_MAX + 8];
    const char *rest;

    c->own_tasks_fd = -1;
    if (find_mount(name, point, root, sizeof(point)) < 0 || own_path(name, own, sizeof(own)) < 0)
        return;
    /* The server's path relative to what the mount shows. */
    size_t rl = strcmp(root, "/") == 0 ? 0 : strlen(root);
    if (strncmp(own, root, rl) != 0 || (own[rl] != '/' && own[rl] != '\0'))
        return;
    rest = own + rl;
    if (snprintf(c->own, sizeof(c->own), "%s%s", point, strcmp(rest, "/") == 0 ? "" : rest) >=
            (int)sizeof(c->own) ||
        snprintf(c->parent, sizeof(c->parent), "%s/" PARENT_FMT, c->own, (int)getpid()) >=
            (int)sizeof(c->parent))
        return;
    snprintf(tasks, sizeof(tasks), "%s/tasks", c->own);
    c->own_tasks_fd = open(tasks, O_WRONLY | O_CLOEXEC);
    if (c->own_tasks_fd < 0)
        return;
    sweep_stale(c->own);
    if (mkdir(c->parent, 0755) < 0 && errno != EEXIST)
        goto fail;
    /* Memory accounting of the children must roll up (v1). */
    if (strcmp(name, "memory") == 0)
        (void)write_str(c->parent, "memory.use_hierarchy", "1");
    c->usable = true;
    return;
fail:
    close(c->own_tasks_fd);
    c->own_tasks_fd = -1;
}

static unsigned v1_available(const struct ws_limits_host *h)
{
    unsigned m = 0;

    for (int i = 0; i < CTL_COUNT; i++)
        if (h->c[i].usable)
            m |= ctl_bits[i];
    return m;
}

static void v1_release(struct ws_limits_host *h)
{
    for (int i = 0; i < CTL_COUNT; i++) {
        if (h->c[i].usable)
            (void)rmdir(h->c[i].parent);
        h->c[i].usable = false;
        ws_close_fd(&h->c[i].own_tasks_fd);
    }
}

/* The WS_LIMIT_* and WS_CGROUP2_* bits are the same: a cap counts once. */
static int caps_count(unsigned bits)
{
    return __builtin_popcount(bits & (WS_LIMIT_PIDS | WS_LIMIT_MEMORY | WS_LIMIT_CPU));
}

/* Picks the mechanism: v1 where it has every cap (a hybrid host, whose
 * unified hierarchy offers none of them), else the v2 subtree when it
 * offers more than v1. */
static void choose(struct ws_limits_host *h)
{
    unsigned v1 = v1_available(h);
    struct ws_cgroup2_host *v2;

    if (caps_count(v1) == CTL_COUNT || ws_cgroup2_host_new(NULL, &v2) < 0)
        return;
    if (caps_count(ws_cgroup2_host_available(v2)) <= caps_count(v1)) {
        ws_cgroup2_host_free(v2);
        return;
    }
    v1_release(h);
    h->v2 = v2;
}

int ws_limits_host_new(struct ws_limits_host **ret)
{
    struct ws_limits_host *h;

    pthread_mutex_lock(&host_lock);
    h = the_host;
    if (!h && (h = calloc(1, sizeof(*h)))) {
        for (int i = 0; i < CTL_COUNT; i++)
            controller_init(&h->c[i], ctl_names[i]);
        choose(h);
        the_host = h;
    }
    if (h)
        h->refs++;
    pthread_mutex_unlock(&host_lock);
    if (!h)
        return -ENOMEM;
    *ret = h;
    return 0;
}

void ws_limits_host_free(struct ws_limits_host *h)
{
    bool last;

    if (!h)
        return;
    pthread_mutex_lock(&host_lock);
    last = --h->refs == 0;
    if (last)
        the_host = NULL;
    pthread_mutex_unlock(&host_lock);
    if (!last)
        return;
    /* Groups nobody forgot: their users are gone with the host's. */
    while (h->listed) {
        struct ws_limits_group *g = h->listed;
        h->listed = g->next;
        ws_limits_group_free(g);
    }
    v1_release(h);
    ws_cgroup2_host_free(h->v2);
    free(h);
}

unsigned ws_limits_host_available(const struct ws_limits_host *h)
{
    return h->v2 ? ws_cgroup2_host_available(h->v2) : v1_available(h);
}

const char *ws_limits_host_mechanism(const struct ws_limits_host *h)
{
    if (!ws_limits_host_available(h))
        return "";
    return h->v2 ? ws_cgroup2_host_mechanism(h->v2) : "cgroup-v1";
}

static bool name_valid(const char *n)
{
    size_t len = n ? strlen(n) : 0;

    if (len == 0 || len > NAME_MAX_LEN)
        return false;
    for (const char *c = n; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '-' || *c == '_'))
            return false;
    return true;
}

/* Sets the cap of controller i on dir; true when it is in force. */
static bool set_cap(int i, const char *dir, const struct ws_limits *l)
{
    char v[32];

    switch (i) {
    case CTL_PIDS:
        snprintf(v, sizeof(v), "%u", l->pids_max);
        return write_str(dir, "pids.max", v) == 0;
    case CTL_MEMORY:
        snprintf(v, sizeof(v), "%llu", (unsigned long long)l->memory_bytes);
        if (write_str(dir, "memory.limit_in_bytes", v) < 0)
            return false;
        /* Where swap is accounted, swap counts too (absent otherwise). */
        (void)write_str(dir, "memory.memsw.limit_in_bytes", v);
        return true;
    case CTL_CPU:
        snprintf(v, sizeof(v), "%d", WS_LIMITS_CPU_PERIOD_US);
        if (write_str(dir, "cpu.cfs_period_us", v) < 0)
            return false;
        snprintf(v, sizeof(v), "%llu",
                 (unsigned long long)l->cpu_millis * WS_LIMITS_CPU_PERIOD_US / 1000);
        return write_str(dir, "cpu.cfs_quota_us", v) == 0;
    }
    return false;
}

static bool wanted(int i, const struct ws_limits *l)
{
    return (i == CTL_PIDS && l->pids_max) || (i == CTL_MEMORY && l->memory_bytes) ||
           (i == CTL_CPU && l->cpu_millis);
}

int ws_limits_group_new(struct ws_limits_host *h, const char *name, const struct ws_limits *l,
                        struct ws_limits_group **ret)
{
    struct ws_limits_group *g;

    if (!h || !l || !name_valid(name))
        return -EINVAL;
    g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->host = h;
    for (int i = 0; i < CTL_COUNT; i++)
        g->tasks_fd[i] = -1;
    if (h->v2) {
        struct ws_cgroup2_caps caps = {
            .pids_max = l->pids_max,
            .memory_bytes = l->memory_bytes,
            .cpu_millis = l->cpu_millis,
        };
        int r = ws_cgroup2_group_new(h->v2, name, &caps, &g->v2);
        if (r < 0) {
            free(g);
            return r;
        }
        g->enforced = ws_cgroup2_group_enforced(g->v2);
        *ret = g;
        return 0;
    }
    for (int i = 0; i < CTL_COUNT; i++) {
        const struct controller *c = &h->c[i];
        char tasks[PATH_MAX + 8];

        if (!c->usable || !wanted(i, l))
            continue;
        if (snprintf(g->dir[i], sizeof(g->dir[i]), "%s/%s", c->parent, name) >=
            (int)sizeof(g->dir[i]))
            continue;
        if (mkdir(g->dir[i], 0755) < 0) {
            int r = -errno;
            if (r == -EEXIST) {
                g->dir[i][0] = '\0';
                ws_limits_group_free(g);
                return r;
            }
            g->dir[i][0] = '\0';
            continue;
        }
        snprintf(tasks, sizeof(tasks), "%s/tasks", g->dir[i]);
        if (!set_cap(i, g->dir[i], l) || (g->tasks_fd[i] = open(tasks, O_WRONLY | O_CLOEXEC)) < 0) {
            (void)rmdir(g->dir[i]);
            g->dir[i][0] = '\0';
            continue;
        }
        g->enforced |= ctl_bits[i];
    }
    *ret = g;
    return 0;
}

unsigned ws_limits_group_enforced(const struct ws_limits_group *g)
{
    return g ? g->enforced : 0;
}

uint64_t ws_limits_group_oom_kills(const struct ws_limits_group *g)
{
    char path[PATH_MAX + 32], buf[512];
    unsigned long long n = 0;
    ssize_t k;
    int fd;

    if (!g || !(g->enforced & WS_LIMIT_MEMORY))
        return 0;
    if (g->v2) {
        uint64_t kills;
        return ws_cgroup2_group_oom_kills(g->v2, &kills) == 0 ? kills : 0;
    }
    snprintf(path, sizeof(path), "%s/memory.oom_control", g->dir[CTL_MEMORY]);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    k = ws_read_all(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (k <= 0)
        return 0;
    buf[k] = '\0';
    const char *p = strstr(buf, "oom_kill ");
    if (p)
        sscanf(p + 9, "%llu", &n);
    return n;
}

int ws_limits_group_cgroup_fd(const struct ws_limits_group *g)
{
    return g->v2 ? ws_cgroup2_group_fd(g->v2) : -1;
}

int ws_limits_group_enter(struct ws_limits_group *g)
{
    int moved[CTL_COUNT], n = 0, r = 0;

    for (int i = 0; i < CTL_COUNT && r == 0; i++) {
        if (g->tasks_fd[i] < 0)
            continue;
        r = write_fd0(g->tasks_fd[i]);
        if (r == 0)
            moved[n++] = i;
    }
    if (r < 0)
        for (int k = 0; k < n; k++)
            (void)write_fd0(g->host->c[moved[k]].own_tasks_fd);
    return r;
}

int ws_limits_group_leave(struct ws_limits_group *g)
{
    int r = 0;

    for (int i = 0; i < CTL_COUNT; i++) {
        if (g->tasks_fd[i] < 0)
            continue;
        int k = write_fd0(g->host->c[i].own_tasks_fd);
        if (k < 0 && r == 0)
            r = k;
    }
    return r;
}

void ws_limits_group_free(struct ws_limits_group *g)
{
    if (!g)
        return;
    ws_cgroup2_group_free(g->v2);
    for (int i = 0; i < CTL_COUNT; i++) {
        if (g->tasks_fd[i] >= 0)
            close(g->tasks_fd[i]);
        if (g->dir[i][0])
            (void)rmdir(g->dir[i]);
    }
    free(g);
}

/* The listed group `name`; host_lock held. */
static struct ws_limits_group *find_listed(struct ws_limits_host *h, const char *name)
{
    for (struct ws_limits_group *g = h->listed; g; g = g->next)
        if (strcmp(g->name, name) == 0)
            return g;
    return NULL;
}

int ws_limits_group_get(struct ws_limits_host *h, const char *name, const struct ws_limits *l,
                        struct ws_limits_group **ret)
{
    struct ws_limits_group *g;
    int r = 0;

    if (!h || !l || !name_valid(name))
        return -EINVAL;
    pthread_mutex_lock(&host_lock);
    g = find_listed(h, name);
    if (!g) {
        r = ws_limits_group_new(h, name, l, &g);
        if (r == 0) {
            snprintf(g->name, sizeof(g->name), "%s", name);
            g->refs = 1; /* the table's */
            g->listed = true;
            g->next = h->listed;
            h->listed = g;
        }
    }
    if (r == 0) {
        g->refs++;
        *ret = g;
    }
    pthread_mutex_unlock(&host_lock);
    return r;
}

int ws_limits_group_lookup(struct ws_limits_host *h, const char *name, struct ws_limits_group **ret)
{
    struct ws_limits_group *g;

    pthread_mutex_lock(&host_lock);
    g = find_listed(h, name);
    if (g) {
        g->refs++;
        *ret = g;
    }
    pthread_mutex_unlock(&host_lock);
    return g ? 0 : -ENOENT;
}

void ws_limits_group_put(struct ws_limits_group *g)
{
    bool last;

    if (!g)
        return;
    pthread_mutex_lock(&host_lock);
    last = --g->refs == 0;
    pthread_mutex_unlock(&host_lock);
    if (last)
        ws_limits_group_free(g);
}

void ws_limits_forget(struct ws_limits_host *h, const char *name)
{
    struct ws_limits_group *g;
    bool last = false;

    pthread_mutex_lock(&host_lock);
    g = find_listed(h, name);
    if (g) {
        /* Out of the table at once (a reopened name gets a new group);
         * commands still ending keep theirs. */
        for (struct ws_limits_group **pp = &h->listed; *pp; pp = &(*pp)->next)
            if (*pp == g) {
                *pp = g->next;
                break;
            }
        g->next = NULL;
        g->listed = false;
        last = --g->refs == 0;
    }
    pthread_mutex_unlock(&host_lock);
    if (last)
        ws_limits_group_free(g);
}
