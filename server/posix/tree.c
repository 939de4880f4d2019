/* Whole process trees through a cgroup v1 freezer or a child subreaper; see
 * tree.h. */
#include "server/posix/tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server/base/fd.h"
#include "server/base/io.h"
#include "server/base/time.h"

/* The directory under the cgroup root that holds one directory per
 * server. */
#define HOSTS_DIR "workspaced"
/* Polling step while waiting for FROZEN or for a cgroup or tree to empty. */
#define POLL_STEP_MS 1
/* Free and destroy re-send SIGKILL this often while waiting: a process
 * that was not frozen in time may have forked. */
#define REKILL_EVERY_MS 50
/* Largest /proc/<pid>/cgroup or /proc/<pid>/stat read; both are far
 * smaller in practice (a stat line is under 1 KiB). */
#define PROC_FILE_MAX 8192
/* Longest decimal pid or tree number plus newline and NUL. */
#define NUM_MAX 32

enum mech {
    MECH_CGROUP,
    MECH_SUBREAPER,
};

struct ws_tree_host {
    enum mech mech;
    pid_t pid;
    int fallback_error;
    int proc_fd; /* /proc */
    long clk_tck;

    /* cgroup mode */
    int hosts_fd;      /* <root>/workspaced */
    int host_fd;       /* <root>/workspaced/<pid> */
    int orig_tasks_fd; /* `tasks` of the cgroup enter leaves from */
    char host_name[NUM_MAX];
    /* The host directory's path as /proc/<pid>/cgroup shows it. */
    char *host_rel;

    /* subreaper mode */
    int prev_subreaper;

    /* Guards trees, next_id and every tree's leader/pending fields. */
    pthread_mutex_t lock;
    struct ws_tree *trees;
    uint64_t next_id;
};

struct ws_tree {
    struct ws_tree_host *host;
    struct ws_tree *prev, *next; /* host->trees */

    /* cgroup mode */
    int dir_fd;
    int tasks_fd;
    char name[NUM_MAX];
    char *rel; /* as /proc/<pid>/cgroup shows it */

    /* The calling thread sits in the cgroup (or a spawn is in flight). */
    bool entered;
    pid_t entered_tid;

    /* Under host->lock: read by other trees' scans and by reaping. */
    pid_t leader;
    unsigned long long leader_start;
    /* Entered and no leader yet: a fresh child of the server that started
     * at or after enter_ticks may be this tree's unregistered leader. */
    bool pending;
    unsigned long long enter_ticks;

    /* Subreaper mode: nothing holds the leader's number as pid, pgid or
     * sid any more, so it may be recycled: stop matching on it. */
    bool session_gone;
};

/* One process from a /proc scan. */
struct proc_info {
    pid_t pid;
    pid_t ppid;
    pid_t pgrp;
    pid_t sid;
    unsigned long long start; /* clock ticks after boot */
    char state;
    bool member;
};

struct scan {
    struct proc_info *v;
    size_t n;
    size_t cap;
};

/* A process the subreaper kill stopped, by pidfd. */
struct stopped {
    pid_t pid;
    unsigned long long start;
    int pidfd;
};

/* One host per process: the cgroup is named after the pid, and both the
 * subreaper flag and the set of children are per process. */
static pthread_mutex_t host_guard = PTHREAD_MUTEX_INITIALIZER;
static bool host_exists;

/* Now in the unit of /proc/<pid>/stat's start time: clock ticks of the
 * boot-time clock, rounded down as the kernel rounds. */
static unsigned long long now_ticks(const struct ws_tree_host *h)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    unsigned long long ns =
        (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
    return ns / (1000000000ULL / (unsigned long long)h->clk_tck);
}

/* A positive decimal pid (or tree number) filling the whole string. */
static bool parse_pid(const char *s, size_t len, pid_t *ret)
{
    long v = 0;
    if (len == 0 || len > 10)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v <= 0 || v > INT_MAX)
        return false;
    *ret = (pid_t)v;
    return true;
}

/* Reads at most size - 1 bytes of dir_fd/name and NUL-terminates. Returns
 * the length, -E2BIG when the file does not fit, or -errno. */
static ssize_t read_file_at(int dir_fd, const char *name, char *buf, size_t size)
{
    int fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    ssize_t r;

    if (fd < 0)
        return -errno;
    r = ws_read_all(fd, buf, size - 1);
    buf[r > 0 ? r : 0] = '\0';
    /* A full buffer fits only if the file ends right there. */
    if (r == (ssize_t)(size - 1)) {
        char extra;
        if (WS_RETRY_EINTR(read(fd, &extra, 1)) != 0)
            r = -E2BIG;
    }
    ws_close_fd(&fd);
    return r;
}

/* One write(), as cgroupfs wants a value in a single write. */
static int write_fd(int fd, const char *s)
{
    size_t len = strlen(s);
    ssize_t k = WS_RETRY_EINTR(write(fd, s, len));

    if (k < 0)
        return -errno;
    return (size_t)k == len ? 0 : -EIO;
}

static int write_file_at(int dir_fd, const char *name, const char *s)
{
    int fd = openat(dir_fd, name, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    int r = write_fd(fd, s);
    ws_close_fd(&fd);
    return r;
}

/* Whether the comma-separated list holds tok. */
static bool has_token(const char *list, const char *tok)
{
    size_t n = strlen(tok);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, tok, n) == 0)
            return true;
        if (!end)
            break;
        p = end + 1;
    }
    return false;
}

/* Whether path is prefix itself or below it. */
static bool path_within(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strcmp(prefix, "/") == 0)
        return path[0] == '/';
    return strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* a + b, where b is "" or starts with '/', and a may be "/". */
static int path_join(char *out, size_t size, const char *a, const char *b)
{
    int n;
    if (strcmp(a, "/") == 0 && b[0] != '\0')
        n = snprintf(out, size, "%s", b);
    else
        n = snprintf(out, size, "%s%s", a, b);
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* The rest of path after prefix (path_within(path, prefix) holds): "" or
 * "/...". */
static const char *path_rest(const char *path, const char *prefix)
{
    return strcmp(prefix, "/") == 0 ? (strcmp(path, "/") == 0 ? "" : path) : path + strlen(prefix);
}

/* The freezer line's path in a /proc/.../cgroup file ("N:a,b:/path"). */
static int freezer_path_in(int proc_fd, const char *file, char *ret, size_t size)
{
    char buf[PROC_FILE_MAX];
    ssize_t n = read_file_at(proc_fd, file, buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        if (!has_token(c1 + 1, "freezer"))
            continue;
        int len = snprintf(ret, size, "%s", c2 + 1);
        return len < 0 || (size_t)len >= size ? -ENAMETOOLONG : 0;
    }
    return -ENODEV;
}

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape_octal(char *s)
{
    char *w = s;
    for (char *r = s; *r;) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 4;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
}

/* The cgroup v1 freezer mount that holds `path` (the longest mount point
 * that is a prefix): its mount point and the hierarchy path it shows. */
static int find_freezer_mount(const char *path, char *ret_point, char *ret_root, size_t size)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char *line = NULL;
    size_t cap = 0, best = 0;
    int r = -ENODEV;

    if (!f)
        return -errno;
    while (getline(&line, &cap, f) > 0) {
        char *fields[16];
        int nf = 0, dash = -1;
        for (char *save = NULL, *tok = strtok_r(line, " \n", &save); tok && nf < 16;
             tok = strtok_r(NULL, " \n", &save)) {
            if (dash < 0 && nf >= 6 && strcmp(tok, "-") == 0)
                dash = nf;
            fields[nf++] = tok;
        }
        /* id parent dev root point opts [optional...] - fstype source super */
        if (dash < 0 || dash + 3 >= nf)
            continue;
        if (strcmp(fields[dash + 1], "cgroup") != 0 || !has_token(fields[dash + 3], "freezer"))
            continue;
        unescape_octal(fields[3]);
        unescape_octal(fields[4]);
        size_t len = strlen(fields[4]);
        if (!path_within(path, fields[4]) || len <= best)
            continue;
        size_t rlen = strlen(fields[3]);
        if (rlen >= size || len >= size) {
            r = -ENAMETOOLONG;
            continue;
        }
        memcpy(ret_point, fields[4], len + 1);
        memcpy(ret_root, fields[3], rlen + 1);
        best = len;
        r = 0;
    }
    free(line);
    fclose(f);
    return r;
}

/* ---- cgroup mode --------------------------------------------------------- */

static bool skipped(pid_t pid, const pid_t *skip, size_t n_skip)
{
    for (size_t i = 0; i < n_skip; i++)
        if (skip[i] == pid)
            return true;
    return false;
}

/* Counts the pids in dir_fd's cgroup.procs other than the server's own
 * (there while one of its threads is entered: it is never signalled), and
 * if sig >= 0 sends it to each, through a pidfd and only after
 * /proc/<pid>/cgroup confirmed the process is still in `rel`. With cont,
 * SIGCONT follows. Returns how many were counted (sig < 0) or signalled,
 * or -errno; *ret_self tells whether the server's pid was listed. The
 * pids in skip[] are never signalled. */
static int cg_procs(const struct ws_tree_host *h, int dir_fd, const char *rel, int sig, bool cont,
                    const pid_t *skip, size_t n_skip, bool *ret_self)
{
    char buf[4096];
    size_t have = 0;
    bool self = false, eof = false;
    int n = 0, r;
    int fd = openat(dir_fd, "cgroup.procs", O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -errno;
    while (!eof) {
        ssize_t k = WS_RETRY_EINTR(read(fd, buf + have, sizeof(buf) - have));
        if (k < 0) {
            r = -errno;
            goto out;
        }
        if (k == 0) {
            eof = true;
            if (have == 0)
                break;
            buf[have++] = '\n'; /* room: have < sizeof(buf) after the shift below */
        } else {
            have += (size_t)k;
        }
        size_t start = 0;
        for (size_t i = 0; i < have; i++) {
            if (buf[i] != '\n')
                continue;
            pid_t pid;
            if (parse_pid(buf + start, i - start, &pid)) {
                if (pid == h->pid) {
                    self = true;
                } else if (sig >= 0 && skipped(pid, skip, n_skip)) {
                    /* spared: a wrapper's own process */
                } else if (sig < 0) {
                    n++;
                } else {
                    int pfd = pidfd_open(pid, 0);
                    char now[PATH_MAX], file[NUM_MAX + 8];
                    snprintf(file, sizeof(file), "%d/cgroup", (int)pid);
                    if (pfd >= 0 && freezer_path_in(h->proc_fd, file, now, sizeof(now)) == 0 &&
                        strcmp(now, rel) == 0 && pidfd_send_signal(pfd, sig, NULL, 0) == 0) {
                        n++;
                        if (cont)
                            (void)pidfd_send_signal(pfd, SIGCONT, NULL, 0);
                    }
                    ws_close_fd(&pfd);
                }
            }
            start = i + 1;
        }
        memmove(buf, buf + start, have - start);
        have -= start;
        if (have == sizeof(buf)) {
            r = -EIO; /* no line is that long */
            goto out;
        }
    }
    if (ret_self)
        *ret_self = self;
    r = n;
out:
    ws_close_fd(&fd);
    return r;
}

/* Writes FROZEN and waits up to WS_TREE_FREEZE_WAIT_MS for the state to
 * read FROZEN. Returns 0 once the write succeeded (frozen or not: the
 * caller kills anyway and must thaw), or the write error. */
static int cg_freeze(int dir_fd)
{
    int r = write_file_at(dir_fd, "freezer.state", "FROZEN");
    if (r < 0)
        return r;
    int64_t deadline = ws_mono_ms() + WS_TREE_FREEZE_WAIT_MS;
    for (;;) {
        char state[64];
        if (read_file_at(dir_fd, "freezer.state", state, sizeof(state)) >= 0 &&
            strncmp(state, "FROZEN", 6) == 0)
            return 0;
        if (ws_mono_ms() >= deadline)
            return 0;
        ws_sleep_ms(POLL_STEP_MS);
    }
}

/* Freeze, SIGKILL everything listed, thaw. Does not freeze when a server
 * thread is inside (it would stop too): then it is a plain sweep. Returns
 * the number killed or -errno. */
static int cg_kill(const struct ws_tree_host *h, int dir_fd, const char *rel)
{
    bool self = false;
    int n = cg_procs(h, dir_fd, rel, -1, false, NULL, 0, &self);
    if (n <= 0)
        return n;
    if (!self)
        (void)cg_freeze(dir_fd);
    n = cg_procs(h, dir_fd, rel, SIGKILL, false, NULL, 0, NULL);
    /* Always thaw, also after a failed freeze write: a frozen task never
     * acts on SIGKILL. */
    if (!self)
        (void)write_file_at(dir_fd, "freezer.state", "THAWED");
    return n;
}

/* Kills until the cgroup is empty, up to WS_TREE_FREE_WAIT_MS. Returns 0
 * when empty, -ETIMEDOUT, or -errno. */
static int cg_kill_until_empty(const struct ws_tree_host *h, int dir_fd, const char *rel)
{
    int64_t deadline = ws_mono_ms() + WS_TREE_FREE_WAIT_MS, last_kill = 0;
    for (;;) {
        int64_t t = ws_mono_ms();
        if (t - last_kill >= REKILL_EVERY_MS) {
            int r = cg_kill(h, dir_fd, rel);
            if (r < 0)
                return r;
            last_kill = t;
        }
        bool self = false;
        int n = cg_procs(h, dir_fd, rel, -1, false, NULL, 0, &self);
        if (n < 0)
            return n;
        if (n == 0 && !self)
            return 0;
        if (t >= deadline)
            return -ETIMEDOUT;
        ws_sleep_ms(POLL_STEP_MS);
    }
}

/* Kills everything in parent_fd/name and in the cgroups below it (down to
 * WS_TREE_CGROUP_DEPTH_MAX), then removes them bottom-up. rel is the
 * directory's path as /proc shows it. Returns 0 or the first error. */
static int cg_destroy(const struct ws_tree_host *h, int parent_fd, const char *name,
                      const char *rel, int depth)
{
    int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int r = 0;

    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    if (depth < WS_TREE_CGROUP_DEPTH_MAX) {
        int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (!d) {
            r = -errno;
            ws_close_fd(&dfd);
        }
        while (d) {
            errno = 0;
            struct dirent *de = readdir(d);
            if (!de)
                break;
            if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 ||
                strcmp(de->d_name, "..") == 0)
                continue;
            char sub[PATH_MAX];
            int n = snprintf(sub, sizeof(sub), "%s/%s", rel, de->d_name);
            int k = n < 0 || (size_t)n >= sizeof(sub)
                        ? -ENAMETOOLONG
                        : cg_destroy(h, fd, de->d_name, sub, depth + 1);
            if (k < 0 && r == 0)
                r = k;
        }
        if (d)
            closedir(d);
    }
    int k = cg_kill_until_empty(h, fd, rel);
    if (k < 0 && r == 0)
        r = k;
    ws_close_fd(&fd);
    if (unlinkat(parent_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
        r = -errno;
    return r;
}

/* Removes <root>/workspaced/<pid> for every pid that is not alive, and the
 * one named after our own pid (a leftover of an earlier process with it;
 * this process has no other host). Errors are ignored: a directory that
 * cannot go now is retried at the next start. */
static void cg_sweep(const struct ws_tree_host *h, const char *hosts_rel)
{
    int dfd = fcntl(h->hosts_fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        ws_close_fd(&dfd);
        return;
    }
    for (;;) {
        struct dirent *de = readdir(d);
        if (!de)
            break;
        pid_t pid;
        if (de->d_type != DT_DIR || !parse_pid(de->d_name, strlen(de->d_name), &pid))
            continue;
        if (pid != h->pid && (kill(pid, 0) == 0 || errno != ESRCH))
            continue;
        char rel[PATH_MAX];
        int n = snprintf(rel, sizeof(rel), "%s/%s", hosts_rel, de->d_name);
        if (n > 0 && (size_t)n < sizeof(rel))
            (void)cg_destroy(h, h->hosts_fd, de->d_name, rel, 0);
    }
    closedir(d);
}

/* Sets up the cgroup mode; on failure leaves h's cgroup fields closed. */
static int cg_host_init(struct ws_tree_host *h, const char *root)
{
    char real[PATH_MAX], point[PATH_MAX], mroot[PATH_MAX], orig[PATH_MAX];
    char path[PATH_MAX], hosts_rel[PATH_MAX];
    int root_fd = -1, orig_fd = -1;
    struct statfs sfs;
    struct stat st_root, st_orig;
    int r;

    if (!realpath(root, real))
        return -errno;
    root_fd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0) {
        r = -errno;
        goto out;
    }
    if (fstatfs(root_fd, &sfs) < 0 || fstat(root_fd, &st_root) < 0) {
        r = -errno;
        goto out;
    }
    if (sfs.f_type != CGROUP_SUPER_MAGIC) {
        r = -ENODEV;
        goto out;
    }
    r = find_freezer_mount(real, point, mroot, sizeof(point));
    if (r < 0)
        goto out;

    /* Where leave sends threads back: the calling thread's freezer cgroup,
     * found on the same mount (and checked to be the same hierarchy). */
    r = freezer_path_in(h->proc_fd, "thread-self/cgroup", orig, sizeof(orig));
    if (r < 0)
        goto out;
    if (!path_within(orig, mroot)) {
        r = -ENODEV; /* our cgroup is outside what the mount shows */
        goto out;
    }
    r = path_join(path, sizeof(path), point, path_rest(orig, mroot));
    if (r < 0)
        goto out;
    orig_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (orig_fd < 0 || fstat(orig_fd, &st_orig) < 0) {
        r = -errno;
        goto out;
    }
    if (st_orig.st_dev != st_root.st_dev) {
        r = -ENODEV;
        goto out;
    }
    h->orig_tasks_fd = openat(orig_fd, "tasks", O_WRONLY | O_CLOEXEC);
    if (h->orig_tasks_fd < 0) {
        r = -errno;
        goto out;
    }

    /* The hierarchy path of root, as /proc/<pid>/cgroup will show ours. */
    char root_rel[PATH_MAX];
    r = path_join(root_rel, sizeof(root_rel), mroot, path_rest(real, point));
    if (r < 0)
        goto out;
    r = path_join(hosts_rel, sizeof(hosts_rel), root_rel, "/" HOSTS_DIR);
    if (r < 0)
        goto out;

    if (mkdirat(root_fd, HOSTS_DIR, 0755) < 0 && errno != EEXIST) {
        r = -errno;
        goto out;
    }
    h->hosts_fd = openat(root_fd, HOSTS_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (h->hosts_fd < 0) {
        r = -errno;
        goto out;
    }
    snprintf(h->host_name, sizeof(h->host_name), "%d", (int)h->pid);
    cg_sweep(h, hosts_rel);
    if (mkdirat(h->hosts_fd, h->host_name, 0755) < 0) {
        r = -errno;
        goto out;
    }
    h->host_fd = openat(h->hosts_fd, h->host_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (h->host_fd < 0) {
        r = -errno;
        (void)unlinkat(h->hosts_fd, h->host_name, AT_REMOVEDIR);
        goto out;
    }
    /* Only a non-root cgroup of a freezer hierarchy has this file. */
    if (faccessat(h->host_fd, "freezer.state", W_OK, 0) < 0) {
        r = errno == ENOENT ? -ENODEV : -errno;
        ws_close_fd(&h->host_fd);
        (void)unlinkat(h->hosts_fd, h->host_name, AT_REMOVEDIR);
        goto out;
    }
    size_t len = strlen(hosts_rel) + 1 + strlen(h->host_name) + 1;
    h->host_rel = malloc(len);
    if (!h->host_rel) {
        r = -ENOMEM;
        ws_close_fd(&h->host_fd);
        (void)unlinkat(h->hosts_fd, h->host_name, AT_REMOVEDIR);
        goto out;
    }
    snprintf(h->host_rel, len, "%s/%s", hosts_rel, h->host_name);
    r = 0;
out:
    if (r < 0) {
        ws_close_fd(&h->orig_tasks_fd);
        ws_close_fd(&h->hosts_fd);
    }
    ws_close_fd(&root_fd);
    ws_close_fd(&orig_fd);
    return r;
}

/* ---- subreaper mode ------------------------------------------------------ */

/* Parses /proc/<pid>/stat. Returns 0, or -errno (-ENOENT: gone). */
static int stat_read(int proc_fd, pid_t pid, struct proc_info *ret)
{
    char file[NUM_MAX + 8], buf[PROC_FILE_MAX];
    snprintf(file, sizeof(file), "%d/stat", (int)pid);
    ssize_t n = read_file_at(proc_fd, file, buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    /* comm may hold spaces and parentheses: the fields follow the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2])
        return -EIO;
    struct proc_info e = {.pid = pid, .state = p[2]};
    p += 3;
    /* Fields 4 (ppid) to 22 (starttime). */
    for (int field = 4; field <= 22; field++) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno)
            return -EIO;
        p = end;
        if (field == 4)
            e.ppid = (pid_t)v;
        else if (field == 5)
            e.pgrp = (pid_t)v;
        else if (field == 6)
            e.sid = (pid_t)v;
        else if (field == 22)
            e.start = (unsigned long long)v;
    }
    *ret = e;
    return 0;
}

static int cmp_pid(const void *a, const void *b)
{
    pid_t x = ((const struct proc_info *)a)->pid, y = ((const struct proc_info *)b)->pid;
    return (x > y) - (x < y);
}

static struct proc_info *scan_find(const struct scan *s, pid_t pid)
{
    struct proc_info key = {.pid = pid};
    return bsearch(&key, s->v, s->n, sizeof(*s->v), cmp_pid);
}

/* Every process in /proc, sorted by pid. Processes that vanish while the
 * scan runs are skipped. Returns 0 or -errno. */
static int scan_procs(const struct ws_tree_host *h, struct scan *s)
{
    int dfd = openat(h->proc_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    int r = 0;

    s->n = 0;
    if (!d) {
        r = -errno;
        ws_close_fd(&dfd);
        return r;
    }
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            r = -errno;
            break;
        }
        pid_t pid;
        if (!parse_pid(de->d_name, strlen(de->d_name), &pid))
            continue;
        if (s->n == s->cap) {
            if (s->cap >= WS_TREE_SCAN_PROCS_MAX)
                break;
            size_t cap = s->cap ? s->cap * 2 : 256;
            struct proc_info *v = realloc(s->v, cap * sizeof(*v));
            if (!v) {
                r = -ENOMEM;
                break;
            }
            s->v = v;
            s->cap = cap;
        }
        if (stat_read(h->proc_fd, pid, &s->v[s->n]) == 0)
            s->n++;
    }
    closedir(d);
    if (r == 0)
        qsort(s->v, s->n, sizeof(*s->v), cmp_pid);
    return r;
}

/* Whether e is o's leader. By start time too: a leader reaped while its
 * tree lives leaves a number that may be recycled. */
static bool is_leader_of(const struct ws_tree *o, const struct proc_info *e)
{
    return o->leader > 0 && e->pid == o->leader && e->start == o->leader_start;
}

/* Whether e belongs to a live tree other than t (its leader, or in the
 * leader's session or group). Under host->lock. */
static bool other_tree(const struct ws_tree *t, const struct proc_info *e)
{
    for (const struct ws_tree *o = t->host->trees; o; o = o->next) {
        if (o == t || o->leader <= 0)
            continue;
        if (is_leader_of(o, e))
            return true;
        if ((e->sid == o->leader || e->pgrp == o->leader) && e->start >= o->leader_start &&
            !o->session_gone)
            return true;
    }
    return false;
}

/* Whether a spawn in flight (entered, no leader yet) may have made e.
 * Under host->lock. The tick before enter is included: the kernel and
 * now_ticks() round separately. */
static bool maybe_pending_leader(const struct ws_tree_host *h, const struct proc_info *e)
{
    for (const struct ws_tree *o = h->trees; o; o = o->next)
        if (o->pending && e->start + 1 >= o->enter_ticks)
            return true;
    return false;
}

/* Sets member on the processes of t (see tree.h for the rules), zombies
 * included. */
static void mark_members(struct ws_tree *t, struct scan *s)
{
    struct ws_tree_host *h = t->host;
    bool held = false;

    pthread_mutex_lock(&h->lock);
    pid_t leader = t->leader;
    unsigned long long leader_start = t->leader_start;
    for (size_t i = 0; i < s->n; i++) {
        struct proc_info *e = &s->v[i];
        e->member = false;
        if (leader <= 0 || e->pid == h->pid)
            continue;
        if (e->pid == leader || e->sid == leader || e->pgrp == leader) {
            held = true;
            /* A different start: the number was recycled. */
            if (e->pid == leader && e->start != leader_start)
                t->session_gone = true;
        }
        if (e->start < leader_start)
            continue;
        if (e->pid == leader) {
            e->member = e->start == leader_start;
            continue;
        }
        if (!t->session_gone && (e->sid == leader || e->pgrp == leader)) {
            e->member = true;
            continue;
        }
        if (e->ppid == h->pid && !other_tree(t, e) && !maybe_pending_leader(h, e))
            e->member = true;
    }
    if (leader > 0 && !held)
        t->session_gone = true;
    pthread_mutex_unlock(&h->lock);

    /* Descendants: one pass per generation. */
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < s->n; i++) {
            struct proc_info *e = &s->v[i];
            if (e->member || e->pid == h->pid || e->ppid <= 0)
                continue;
            const struct proc_info *p = scan_find(s, e->ppid);
            if (p && p->member) {
                e->member = true;
                changed = true;
            }
        }
    }
}

static bool is_live(const struct proc_info *e)
{
    return e->state != 'Z' && e->state != 'X' && e->state != 'x';
}

/* A pidfd for e if pid still names the process the scan saw (same start
 * time, read after the pidfd was opened). Returns the fd or -errno. */
static int open_checked(const struct ws_tree_host *h, const struct proc_info *e)
{
    int pfd = pidfd_open(e->pid, 0);
    if (pfd < 0)
        return -errno;
    struct proc_info now;
    if (stat_read(h->proc_fd, e->pid, &now) < 0 || now.start != e->start) {
        ws_close_fd(&pfd);
        return -ESRCH;
    }
    return pfd;
}

static bool stop_signal(int sig)
{
    return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

static int sr_signal(struct ws_tree *t, int sig, const pid_t *skip, size_t n_skip)
{
    struct scan s = {0};
    bool cont = sig != 0 && sig != SIGKILL && sig != SIGCONT && !stop_signal(sig);
    int r = scan_procs(t->host, &s);
    if (r < 0)
        goto out;
    mark_members(t, &s);
    for (size_t i = 0; i < s.n; i++) {
        if (!s.v[i].member || !is_live(&s.v[i]) || skipped(s.v[i].pid, skip, n_skip))
            continue;
        int pfd = open_checked(t->host, &s.v[i]);
        if (pfd < 0)
            continue;
        if (pidfd_send_signal(pfd, sig, NULL, 0) == 0) {
            r++;
            if (cont)
                (void)pidfd_send_signal(pfd, SIGCONT, NULL, 0);
        }
        ws_close_fd(&pfd);
    }
out:
    free(s.v);
    return r;
}

static int sr_count(struct ws_tree *t)
{
    struct scan s = {0};
    int r = scan_procs(t->host, &s);
    if (r == 0) {
        mark_members(t, &s);
        for (size_t i = 0; i < s.n; i++)
            if (s.v[i].member && is_live(&s.v[i]))
                r++;
    }
    free(s.v);
    return r;
}

static bool stopped_has(const struct stopped *v, size_t n, const struct proc_info *e)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].pid == e->pid && v[i].start == e->start)
            return true;
    return false;
}

/* Waits, until `deadline`, for the processes v[from..n) to be stopped or
 * dead. A signal aimed at one process does not restart a fork() it is in
 * the middle of (Linux >= 5.0): the child appears after the SIGSTOP was
 * sent, and only a stopped parent is sure to have none still coming. */
static void wait_stopped(const struct ws_tree_host *h, const struct stopped *v, size_t from,
                         size_t n, int64_t deadline)
{
    for (size_t i = from; i < n;) {
        struct proc_info now;
        if (stat_read(h->proc_fd, v[i].pid, &now) < 0 || now.start != v[i].start ||
            now.state == 'T' || now.state == 't' || !is_live(&now)) {
            i++;
            continue;
        }
        if (ws_mono_ms() >= deadline)
            return;
        ws_sleep_ms(POLL_STEP_MS);
    }
}

/* SIGSTOP everything found, wait for it to stop and rescan until a round
 * finds nothing new, so nothing forks unseen; then SIGKILL them all. */
static int sr_kill(struct ws_tree *t)
{
    struct scan s = {0};
    struct stopped *v = NULL;
    size_t n = 0, cap = 0;
    int killed = 0, r = 0;

    int64_t deadline = ws_mono_ms() + WS_TREE_FREEZE_WAIT_MS;
    for (int round = 0; round < WS_TREE_STOP_ROUNDS_MAX; round++) {
        size_t first = n;
        r = scan_procs(t->host, &s);
        if (r < 0)
            break;
        mark_members(t, &s);
        bool added = false;
        for (size_t i = 0; i < s.n; i++) {
            struct proc_info *e = &s.v[i];
            if (!e->member || !is_live(e) || stopped_has(v, n, e))
                continue;
            int pfd = open_checked(t->host, e);
            if (pfd < 0)
                continue;
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 64;
                struct stopped *nv = realloc(v, ncap * sizeof(*nv));
                if (!nv) {
                    /* Nothing may stay stopped: kill this one now. */
                    if (pidfd_send_signal(pfd, SIGKILL, NULL, 0) == 0)
                        killed++;
                    ws_close_fd(&pfd);
                    continue;
                }
                v = nv;
                cap = ncap;
            }
            if (pidfd_send_signal(pfd, SIGSTOP, NULL, 0) < 0) {
                ws_close_fd(&pfd);
                continue;
            }
            v[n++] = (struct stopped){.pid = e->pid, .start = e->start, .pidfd = pfd};
            added = true;
        }
        if (!added)
            break;
        wait_stopped(t->host, v, first, n, deadline);
    }
    for (size_t i = 0; i < n; i++) {
        if (pidfd_send_signal(v[i].pidfd, SIGKILL, NULL, 0) == 0)
            killed++;
        ws_close_fd(&v[i].pidfd);
    }
    free(v);
    free(s.v);
    return (killed > 0 || r == 0) ? killed : r;
}

/* Kills until no live process of the tree is left, up to
 * WS_TREE_FREE_WAIT_MS. Returns 0, -ETIMEDOUT or -errno. */
static int sr_kill_until_empty(struct ws_tree *t)
{
    int64_t deadline = ws_mono_ms() + WS_TREE_FREE_WAIT_MS, last_kill = 0;
    for (;;) {
        int64_t now = ws_mono_ms();
        if (now - last_kill >= REKILL_EVERY_MS) {
            int r = sr_kill(t);
            if (r < 0)
                return r;
            last_kill = now;
        }
        int n = sr_count(t);
        if (n <= 0)
            return n;
        if (now >= deadline)
            return -ETIMEDOUT;
        ws_sleep_ms(POLL_STEP_MS);
    }
}

/* ---- host ---------------------------------------------------------------- */

int ws_tree_host_new(const struct ws_tree_host_config *cfg, struct ws_tree_host **ret)
{
    struct ws_tree_host_config defaults = {0};
    struct ws_tree_host *h = NULL;
    bool guarded = false;
    int r;

    if (!ret)
        return -EINVAL;
    if (!cfg)
        cfg = &defaults;
    if (cfg->mode != WS_TREE_AUTO && cfg->mode != WS_TREE_FORCE_SUBREAPER)
        return -EINVAL;
    const char *root = cfg->cgroup_root ? cfg->cgroup_root : WS_TREE_CGROUP_ROOT_DEFAULT;
    if (root[0] != '/')
        return -EINVAL;

    pthread_mutex_lock(&host_guard);
    if (host_exists) {
        pthread_mutex_unlock(&host_guard);
        return -EBUSY;
    }
    host_exists = guarded = true;
    pthread_mutex_unlock(&host_guard);

    h = calloc(1, sizeof(*h));
    if (!h) {
        r = -ENOMEM;
        goto out;
    }
    h->pid = getpid();
    h->proc_fd = h->hosts_fd = h->host_fd = h->orig_tasks_fd = -1;
    h->prev_subreaper = -1;
    h->next_id = 1;
    h->clk_tck = sysconf(_SC_CLK_TCK);
    if (h->clk_tck <= 0 || 1000000000L % h->clk_tck != 0)
        h->clk_tck = 100;
    r = -pthread_mutex_init(&h->lock, NULL);
    if (r < 0) {
        free(h);
        h = NULL;
        goto out;
    }
    h->proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (h->proc_fd < 0) {
        r = -errno;
        goto out;
    }

    if (cfg->mode == WS_TREE_AUTO) {
        r = cg_host_init(h, root);
        if (r == 0) {
            h->mech = MECH_CGROUP;
            goto done;
        }
        h->fallback_error = r;
    }
    h->mech = MECH_SUBREAPER;
    int prev = 0;
    if (prctl(PR_GET_CHILD_SUBREAPER, (unsigned long)&prev, 0, 0, 0) < 0 ||
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) {
        r = -errno;
        goto out;
    }
    h->prev_subreaper = prev;
done:
    *ret = h;
    h = NULL;
    guarded = false;
    r = 0;
out:
    if (h) {
        ws_close_fd(&h->proc_fd);
        pthread_mutex_destroy(&h->lock);
        free(h);
    }
    if (guarded) {
        pthread_mutex_lock(&host_guard);
        host_exists = false;
        pthread_mutex_unlock(&host_guard);
    }
    return r;
}

void ws_tree_host_free(struct ws_tree_host *h)
{
    if (!h)
        return;
    if (h->mech == MECH_CGROUP) {
        (void)cg_destroy(h, h->hosts_fd, h->host_name, h->host_rel, 0);
        /* <root>/workspaced stays: another server may be making its own
         * directory in it right now. */
    } else {
        ws_tree_host_reap(h);
        if (h->prev_subreaper >= 0)
            (void)prctl(PR_SET_CHILD_SUBREAPER, (unsigned long)h->prev_subreaper, 0, 0, 0);
    }
    ws_close_fd(&h->orig_tasks_fd);
    ws_close_fd(&h->host_fd);
    ws_close_fd(&h->hosts_fd);
    ws_close_fd(&h->proc_fd);
    free(h->host_rel);
    pthread_mutex_destroy(&h->lock);
    free(h);
    pthread_mutex_lock(&host_guard);
    host_exists = false;
    pthread_mutex_unlock(&host_guard);
}

const char *ws_tree_host_mechanism(const struct ws_tree_host *h)
{
    return h->mech == MECH_CGROUP ? "cgroup-v1-freezer" : "subreaper";
}

int ws_tree_host_fallback_error(const struct ws_tree_host *h)
{
    return h->fallback_error;
}

void ws_tree_host_reap(struct ws_tree_host *h)
{
    struct scan s = {0};
    pid_t *zombies = NULL;
    size_t nz = 0;

    if (!h || h->mech != MECH_SUBREAPER)
        return;
    /* Peek (WNOWAIT leaves it) whether any child is a zombie at all. */
    siginfo_t si = {0};
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
        return;
    if (scan_procs(h, &s) < 0)
        goto out;
    zombies = malloc((s.n ? s.n : 1) * sizeof(*zombies));
    if (!zombies)
        goto out;
    pthread_mutex_lock(&h->lock);
    for (size_t i = 0; i < s.n; i++) {
        const struct proc_info *e = &s.v[i];
        if (e->ppid != h->pid || e->state != 'Z' || maybe_pending_leader(h, e))
            continue;
        bool leader = false;
        for (const struct ws_tree *o = h->trees; o && !leader; o = o->next)
            leader = is_leader_of(o, e);
        if (!leader)
            zombies[nz++] = e->pid;
    }
    pthread_mutex_unlock(&h->lock);
    for (size_t i = 0; i < nz; i++) {
        struct proc_info *e = scan_find(&s, zombies[i]);
        int pfd = open_checked(h, e);
        if (pfd < 0)
            continue;
        siginfo_t info = {0};
        (void)WS_RETRY_EINTR(waitid((idtype_t)P_PIDFD, (id_t)pfd, &info, WEXITED | WNOHANG));
        ws_close_fd(&pfd);
    }
out:
    free(zombies);
    free(s.v);
}

/* ---- trees --------------------------------------------------------------- */

int ws_tree_new(struct ws_tree_host *h, struct ws_tree **ret)
{
    struct ws_tree *t;
    int r;

    if (!h || !ret)
        return -EINVAL;
    t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->host = h;
    t->dir_fd = t->tasks_fd = -1;

    pthread_mutex_lock(&h->lock);
    uint64_t id = h->next_id++;
    pthread_mutex_unlock(&h->lock);

    if (h->mech == MECH_CGROUP) {
        snprintf(t->name, sizeof(t->name), "%llu", (unsigned long long)id);
        size_t len = strlen(h->host_rel) + 1 + strlen(t->name) + 1;
        t->rel = malloc(len);
        if (!t->rel) {
            r = -ENOMEM;
            goto out;
        }
        snprintf(t->rel, len, "%s/%s", h->host_rel, t->name);
        if (mkdirat(h->host_fd, t->name, 0755) < 0) {
            r = -errno;
            goto out;
        }
        t->dir_fd = openat(h->host_fd, t->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (t->dir_fd >= 0)
            t->tasks_fd = openat(t->dir_fd, "tasks", O_WRONLY | O_CLOEXEC);
        if (t->tasks_fd < 0) {
            r = -errno;
            ws_close_fd(&t->dir_fd);
            (void)unlinkat(h->host_fd, t->name, AT_REMOVEDIR);
            goto out;
        }
    }

    pthread_mutex_lock(&h->lock);
    t->next = h->trees;
    if (h->trees)
        h->trees->prev = t;
    h->trees = t;
    pthread_mutex_unlock(&h->lock);
    *ret = t;
    t = NULL;
    r = 0;
out:
    if (t) {
        free(t->rel);
        free(t);
    }
    return r;
}

int ws_tree_enter(struct ws_tree *t)
{
    if (!t)
        return -EINVAL;
    if (t->entered)
        return -EBUSY;
    struct ws_tree_host *h = t->host;
    pid_t tid = gettid();
    if (h->mech == MECH_CGROUP) {
        /* "0" names the calling thread. Moving only the caller lets the
         * kernel skip the global threadgroup lock, whose first writer
         * after an idle spell waits for an RCU grace period: measured
         * here, 6-15 ms per enter+leave after 50 ms idle with the tid
         * written, 0.04 ms with "0". */
        int r = write_fd(t->tasks_fd, "0\n");
        if (r < 0)
            return r;
    }
    t->entered = true;
    t->entered_tid = tid;
    pthread_mutex_lock(&h->lock);
    t->pending = true;
    t->enter_ticks = now_ticks(h);
    pthread_mutex_unlock(&h->lock);
    return 0;
}

int ws_tree_leave(struct ws_tree *t)
{
    if (!t || !t->entered || t->entered_tid != gettid())
        return -EINVAL;
    if (t->host->mech == MECH_CGROUP) {
        int r = write_fd(t->host->orig_tasks_fd, "0\n"); /* see ws_tree_enter */
        if (r < 0)
            return r;
    }
    t->entered = false;
    return 0;
}

void ws_tree_set_leader(struct ws_tree *t, pid_t leader)
{
    if (!t)
        return;
    struct ws_tree_host *h = t->host;
    struct proc_info e = {0};
    bool known = h->mech == MECH_SUBREAPER && leader > 0 && stat_read(h->proc_fd, leader, &e) == 0;
    pthread_mutex_lock(&h->lock);
    t->leader = leader;
    /* Unreadable (cannot happen for an unreaped child): the spawn started
     * after enter, so that bounds the start from below. */
    t->leader_start = known ? e.start : (t->pending ? t->enter_ticks : now_ticks(h));
    t->pending = false;
    t->session_gone = false;
    pthread_mutex_unlock(&h->lock);
}

static bool valid_signal(int sig)
{
    return sig >= 0 && sig < NSIG;
}

int ws_tree_signal_except(struct ws_tree *t, int sig, const pid_t *skip, size_t n_skip)
{
    if (!t || !valid_signal(sig) || (n_skip && !skip))
        return -EINVAL;
    if (t->host->mech == MECH_SUBREAPER)
        return sr_signal(t, sig, skip, n_skip);
    bool cont = sig != 0 && sig != SIGKILL && sig != SIGCONT && !stop_signal(sig);
    return cg_procs(t->host, t->dir_fd, t->rel, sig, cont, skip, n_skip, NULL);
}

int ws_tree_signal(struct ws_tree *t, int sig)
{
    return ws_tree_signal_except(t, sig, NULL, 0);
}

int ws_tree_kill(struct ws_tree *t)
{
    if (!t)
        return -EINVAL;
    if (t->entered)
        return -EBUSY;
    if (t->host->mech == MECH_SUBREAPER)
        return sr_kill(t);
    return cg_kill(t->host, t->dir_fd, t->rel);
}

int ws_tree_count(struct ws_tree *t)
{
    if (!t)
        return -EINVAL;
    if (t->host->mech == MECH_SUBREAPER)
        return sr_count(t);
    return cg_procs(t->host, t->dir_fd, t->rel, -1, false, NULL, 0, NULL);
}

void ws_tree_free(struct ws_tree *t)
{
    if (!t)
        return;
    struct ws_tree_host *h = t->host;
    if (t->entered && t->entered_tid == gettid())
        (void)ws_tree_leave(t);

    ws_close_fd(&t->tasks_fd);
    ws_close_fd(&t->dir_fd);
    if (h->mech == MECH_CGROUP) {
        /* With a thread still inside, neither freeze nor rmdir can work:
         * the host (or the next start's sweep) removes the cgroup. Below
         * it, too, what a command running as root may have made. */
        if (!t->entered)
            (void)cg_destroy(h, h->host_fd, t->name, t->rel, 0);
    } else {
        /* Entering moved no thread here: the kill is safe regardless. */
        t->entered = false;
        (void)sr_kill_until_empty(t);
    }

    pthread_mutex_lock(&h->lock);
    if (t->prev)
        t->prev->next = t->next;
    else
        h->trees = t->next;
    if (t->next)
        t->next->prev = t->prev;
    pthread_mutex_unlock(&h->lock);

    ws_tree_host_reap(h);
    free(t->rel);
    free(t);
}
