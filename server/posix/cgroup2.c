/* The server's cgroup v2 subtree: workspace groups with caps, command
 * leaves ended by cgroup.kill; see cgroup2.h. */
#include "server/posix/cgroup2.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "server/base/fd.h"
#include "server/base/io.h"
#include "server/base/macros.h"
#include "server/base/time.h"

/* The directory under the base that holds one directory per server. */
#define HOSTS_DIR "workspaced"
/* Where the process moves when its own cgroup is the base. */
#define SERVER_DIR "server"
/* A workspace group's name: this prefix and the caller's id. */
#define GROUP_PREFIX "ws-"
/* The fallback kill re-sends SIGKILL this often while it waits for a
 * cgroup to empty: a process that was not frozen in time may have forked. */
#define REKILL_EVERY_MS 50
/* Largest /proc/<pid>/cgroup, mountinfo line or cgroupfs value read; a
 * /proc/<pid>/cgroup of a hybrid host with every v1 hierarchy is under
 * 1 KiB. */
#define PROC_FILE_MAX 8192
/* Longest decimal pid or counter plus a prefix, newline and NUL. */
#define NUM_MAX 32

/* The controllers behind the caps, in the order of their bits. */
static const char *const ctl_names[] = {"pids", "memory", "cpu"};
static const unsigned ctl_bits[] = {WS_CGROUP2_PIDS, WS_CGROUP2_MEMORY, WS_CGROUP2_CPU};

struct ws_cgroup2_host {
    pid_t pid;
    int proc_fd;  /* /proc */
    int hosts_fd; /* B/workspaced */
    int host_fd;  /* B/workspaced/<pid> */
    char host_name[NUM_MAX];
    char *hosts_rel; /* B/workspaced as /proc/<pid>/cgroup shows it */
    char *host_rel;
    char *host_path; /* absolute */
    bool has_kill;
    unsigned available;
    int enable_error;
    atomic_uint_fast64_t next_leaf;
};

struct ws_cgroup2_group {
    struct ws_cgroup2_host *host;
    int dir_fd;
    char name[sizeof(GROUP_PREFIX) + WS_CGROUP2_ID_MAX];
    char *rel;
    unsigned wanted;
    unsigned enforced;
};

struct ws_cgroup2_leaf {
    struct ws_cgroup2_group *group;
    int dir_fd;
    int events_fd;
    char name[NUM_MAX];
    char *rel;
    char *path;
};

/* One host per process: its directory is named after the pid. */
static pthread_mutex_t host_guard = PTHREAD_MUTEX_INITIALIZER;
static bool host_exists;
/* After a host moved the process from its own cgroup into <own>/server,
 * the process's cgroup reads <own>/server: a later host in the same
 * process must use <own> again, not move one level deeper. Under
 * host_guard. */
static char moved_from[PATH_MAX];
static char moved_to[PATH_MAX];

/* ---- small helpers ------------------------------------------------------- */

/* A positive decimal pid (or counter) filling the whole string. */
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

/* Reads at most size - 1 bytes of fd from offset 0 and NUL-terminates.
 * Reading a cgroupfs file from the start also re-arms its POLLPRI. Returns
 * the length, -E2BIG when the file does not fit, or -errno. */
static ssize_t read_whole(int fd, char *buf, size_t size)
{
    ssize_t r = ws_pread_all(fd, buf, size - 1, 0);
    buf[r > 0 ? r : 0] = '\0';
    if (r == (ssize_t)(size - 1)) {
        char extra;
        if (WS_RETRY_EINTR(pread(fd, &extra, 1, r)) != 0)
            r = -E2BIG;
    }
    return r;
}

static ssize_t read_file_at(int dir_fd, const char *name, char *buf, size_t size)
{
    ws_cleanup_fd int fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    return read_whole(fd, buf, size);
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
    ws_cleanup_fd int fd = openat(dir_fd, name, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    return write_fd(fd, s);
}

/* Whether the list separated by any of `seps` holds the word w. */
static bool has_word(const char *list, const char *seps, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, seps);
        if (len == n && strncmp(p, w, n) == 0)
            return true;
        if (!p[len])
            break;
        p += len + 1;
    }
    return false;
}

/* The value of `key` in a "key value" per line file (cgroup.events,
 * memory.events). Returns 0, -ENOENT when the key is absent, -EIO. */
static int keyed_value(const char *buf, const char *key, uint64_t *ret)
{
    size_t n = strlen(key);
    for (const char *p = buf; *p;) {
        if (strncmp(p, key, n) == 0 && p[n] == ' ') {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(p + n + 1, &end, 10);
            if (end == p + n + 1 || errno || (*end != '\n' && *end != '\0'))
                return -EIO;
            *ret = v;
            return 0;
        }
        const char *nl = strchr(p, '\n');
        if (!nl)
            break;
        p = nl + 1;
    }
    return -ENOENT;
}

/* Whether path is prefix itself or below it. */
static bool path_within(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strcmp(prefix, "/") == 0)
        return path[0] == '/';
    return strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* The rest of path after prefix (path_within(path, prefix) holds): "" or
 * "/...". */
static const char *path_rest(const char *path, const char *prefix)
{
    return strcmp(prefix, "/") == 0 ? (strcmp(path, "/") == 0 ? "" : path) : path + strlen(prefix);
}

/* a + b, where b is "" or starts with '/', and a may be "/"; malloc'd. */
static char *path_join(const char *a, const char *b)
{
    char *out = NULL;
    if (strcmp(a, "/") == 0 && b[0] != '\0')
        a = "";
    if (asprintf(&out, "%s%s", a, b) < 0)
        return NULL;
    return out;
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

/* The cgroup2 mount through which to reach a directory: with `path` (an
 * absolute real path), the mount with the longest mount point that holds
 * it; with `rel` (a cgroup as /proc/<pid>/cgroup shows it), the mount with
 * the longest root that holds it. Writes the mount point and its root.
 * Returns 0, -ENODEV or -errno. */
static int find_mount(const char *path, const char *rel, char *ret_point, char *ret_root,
                      size_t size)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char *line = NULL;
    size_t cap = 0, best = 0;
    bool found = false;
    int r = -ENODEV;

    if (!f)
        return -errno;
    while (getline(&line, &cap, f) > 0) {
        char *fields[24];
        int nf = 0, dash = -1;
        for (char *save = NULL, *tok = strtok_r(line, " \n", &save); tok && nf < 24;
             tok = strtok_r(NULL, " \n", &save)) {
            if (dash < 0 && nf >= 6 && strcmp(tok, "-") == 0)
                dash = nf;
            fields[nf++] = tok;
        }
        /* id parent dev root point opts [optional...] - fstype source super */
        if (dash < 0 || dash + 1 >= nf || strcmp(fields[dash + 1], "cgroup2") != 0)
            continue;
        unescape_octal(fields[3]);
        unescape_octal(fields[4]);
        const char *key = path ? fields[4] : fields[3];
        size_t len = strlen(key);
        if (!path_within(path ? path : rel, key) || (found && len <= best))
            continue;
        if (strlen(fields[3]) >= size || strlen(fields[4]) >= size) {
            r = -ENAMETOOLONG;
            continue;
        }
        memcpy(ret_point, fields[4], strlen(fields[4]) + 1);
        memcpy(ret_root, fields[3], strlen(fields[3]) + 1);
        best = len;
        found = true;
        r = 0;
    }
    free(line);
    fclose(f);
    return r;
}

/* The "0::" line's path of a /proc/.../cgroup file under proc_fd. */
static int v2_path_in(int proc_fd, const char *file, char *ret, size_t size)
{
    char buf[PROC_FILE_MAX];
    ssize_t n = read_file_at(proc_fd, file, buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "0::", 3) != 0)
            continue;
        int len = snprintf(ret, size, "%s", line + 3);
        return len < 0 || (size_t)len >= size ? -ENAMETOOLONG : 0;
    }
    return -ENODEV;
}

static int open_dir_at(int dir_fd, const char *name)
{
    int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

static int check_cgroup2(int fd)
{
    struct statfs sfs;
    if (fstatfs(fd, &sfs) < 0)
        return -errno;
    return sfs.f_type == CGROUP2_SUPER_MAGIC ? 0 : -ENODEV;
}

/* ---- processes in a cgroup ---------------------------------------------- */

static bool skipped(pid_t pid, const pid_t *skip, size_t n_skip)
{
    for (size_t i = 0; i < n_skip; i++)
        if (skip[i] == pid)
            return true;
    return false;
}

/* Counts the pids in dir_fd's cgroup.procs, or if sig >= 0 sends it to
 * each (SIGCONT after it with cont), through a pidfd and only after
 * /proc/<pid>/cgroup confirmed the process is still in `rel`. The server's
 * own pid and those in skip[] are never signalled. Returns how many were
 * counted or signalled, or -errno. */
static int cg_procs(const struct ws_cgroup2_host *h, int dir_fd, const char *rel, int sig,
                    bool cont, const pid_t *skip, size_t n_skip)
{
    char buf[4096];
    size_t have = 0;
    bool eof = false;
    int n = 0;
    ws_cleanup_fd int fd = openat(dir_fd, "cgroup.procs", O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -errno;
    while (!eof) {
        ssize_t k = WS_RETRY_EINTR(read(fd, buf + have, sizeof(buf) - have));
        if (k < 0)
            return -errno;
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
            if (!parse_pid(buf + start, i - start, &pid)) {
                /* not a pid: nothing to do */
            } else if (sig < 0) {
                n++;
            } else if (pid != h->pid && !skipped(pid, skip, n_skip)) {
                ws_cleanup_fd int pfd = pidfd_open(pid, 0);
                char now[PATH_MAX], file[NUM_MAX + 8];
                snprintf(file, sizeof(file), "%d/cgroup", (int)pid);
                if (pfd >= 0 && v2_path_in(h->proc_fd, file, now, sizeof(now)) == 0 &&
                    strcmp(now, rel) == 0 && pidfd_send_signal(pfd, sig, NULL, 0) == 0) {
                    n++;
                    if (cont)
                        (void)pidfd_send_signal(pfd, SIGCONT, NULL, 0);
                }
            }
            start = i + 1;
        }
        memmove(buf, buf + start, have - start);
        have -= start;
        if (have == sizeof(buf))
            return -EIO; /* no line is that long */
    }
    return n;
}

/* populated (and frozen, when ret_frozen) of a cgroup.events fd. */
static int read_events(int events_fd, bool *ret_populated, bool *ret_frozen)
{
    char buf[256];
    uint64_t pop = 0, frz = 0;
    ssize_t n = read_whole(events_fd, buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    int r = keyed_value(buf, "populated", &pop);
    if (r < 0)
        return r;
    if (ret_frozen) {
        r = keyed_value(buf, "frozen", &frz);
        if (r < 0)
            return r;
        *ret_frozen = frz != 0;
    }
    *ret_populated = pop != 0;
    return 0;
}

/* Waits on a cgroup.events fd until `done` holds for what it reads, up to
 * timeout_ms (< 0: no limit) and at most step_ms per poll (< 0: no step).
 * Returns 1 when done, 0 after a step with the deadline ahead (so the
 * caller can act and call again), -ETIMEDOUT, or -errno. */
static int events_wait(int events_fd, bool want_frozen, int64_t deadline, int step_ms)
{
    for (;;) {
        bool populated = true, frozen = false;
        int r = read_events(events_fd, &populated, want_frozen ? &frozen : NULL);
        if (r < 0)
            return r;
        if (want_frozen ? frozen || !populated : !populated)
            return 1;
        int64_t left = deadline < 0 ? -1 : deadline - ws_mono_ms();
        if (deadline >= 0 && left <= 0)
            return -ETIMEDOUT;
        int wait = left < 0 || left > INT_MAX ? -1 : (int)left;
        if (step_ms >= 0 && (wait < 0 || wait > step_ms))
            wait = step_ms;
        struct pollfd p = {.fd = events_fd, .events = POLLPRI};
        int k = poll(&p, 1, wait);
        if (k < 0 && errno != EINTR)
            return -errno;
        if (k == 0 && wait == step_ms)
            return 0;
    }
}

/* SIGKILLs every process in fd's cgroup and in the cgroups below it, down
 * to WS_CGROUP2_DEPTH_MAX. For the freeze fallback. */
static void kill_listed(const struct ws_cgroup2_host *h, int fd, const char *rel, int depth)
{
    (void)cg_procs(h, fd, rel, SIGKILL, false, NULL, 0);
    if (depth >= WS_CGROUP2_DEPTH_MAX)
        return;
    int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        ws_close_fd(&dfd);
        return;
    }
    /* The dup shares the offset of every earlier listing of fd. */
    rewinddir(d);
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char *sub = NULL;
        ws_cleanup_fd int sfd = open_dir_at(fd, de->d_name);
        if (sfd < 0 || asprintf(&sub, "%s/%s", rel, de->d_name) < 0)
            continue;
        kill_listed(h, sfd, sub, depth + 1);
        free(sub);
    }
    closedir(d);
}

/* Ends every process of fd's cgroup and below: cgroup.kill, or freeze
 * (the whole subtree: cgroup.freeze is hierarchical), SIGKILL what is
 * listed, thaw. Returns 0 or -errno. */
static int cg_kill(const struct ws_cgroup2_host *h, int fd, const char *rel)
{
    if (h->has_kill)
        return write_file_at(fd, "cgroup.kill", "1");

    int r = write_file_at(fd, "cgroup.freeze", "1");
    if (r == 0) {
        ws_cleanup_fd int efd = openat(fd, "cgroup.events", O_RDONLY | O_CLOEXEC);
        if (efd >= 0)
            (void)events_wait(efd, true, ws_mono_ms() + WS_CGROUP2_FREEZE_WAIT_MS, -1);
    }
    kill_listed(h, fd, rel, 0);
    /* Thaw even after a failed freeze write: nothing may stay frozen. */
    int k = write_file_at(fd, "cgroup.freeze", "0");
    return r < 0 ? r : k;
}

/* Kills until fd's cgroup is empty, up to timeout_ms. Returns 0 when
 * empty, -ETIMEDOUT, or -errno. */
static int cg_kill_until_empty(const struct ws_cgroup2_host *h, int fd, const char *rel,
                               int timeout_ms)
{
    ws_cleanup_fd int efd = openat(fd, "cgroup.events", O_RDONLY | O_CLOEXEC);
    int64_t deadline = ws_mono_ms() + timeout_ms;

    if (efd < 0)
        return -errno;
    for (;;) {
        int r = cg_kill(h, fd, rel);
        if (r < 0)
            return r;
        /* cgroup.kill also kills what forks while it runs: one is enough. */
        r = events_wait(efd, false, deadline, h->has_kill ? -1 : REKILL_EVERY_MS);
        if (r != 0)
            return r < 0 ? r : 0;
    }
}

/* Removes every cgroup below fd, deepest first, down to
 * WS_CGROUP2_DEPTH_MAX. Returns 0 or the first error. */
static int cg_remove_below(int fd, int depth)
{
    int r = 0;
    if (depth >= WS_CGROUP2_DEPTH_MAX)
        return -ELOOP;
    int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        r = -errno;
        ws_close_fd(&dfd);
        return r;
    }
    rewinddir(d); /* as in kill_listed */
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        ws_cleanup_fd int sfd = open_dir_at(fd, de->d_name);
        int k = sfd < 0 ? sfd : cg_remove_below(sfd, depth + 1);
        if (k == 0 && unlinkat(fd, de->d_name, AT_REMOVEDIR) < 0)
            k = -errno;
        if (k < 0 && k != -ENOENT && r == 0)
            r = k;
    }
    closedir(d);
    return r;
}

/* Kills everything in parent_fd/name and below, waits up to
 * WS_CGROUP2_FREE_WAIT_MS for it to die, then removes the cgroups deepest
 * first. Returns 0 or the first error (what is left waits for the next
 * start's sweep). */
static int cg_destroy(const struct ws_cgroup2_host *h, int parent_fd, const char *name,
                      const char *rel)
{
    ws_cleanup_fd int fd = open_dir_at(parent_fd, name);
    if (fd < 0)
        return fd == -ENOENT ? 0 : fd;
    int r = cg_kill_until_empty(h, fd, rel, WS_CGROUP2_FREE_WAIT_MS);
    int k = cg_remove_below(fd, 0);
    if (k < 0 && r == 0)
        r = k;
    if (unlinkat(parent_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
        r = -errno;
    return r;
}

/* ---- host ---------------------------------------------------------------- */

/* Enables each cap's controller in dir_fd's cgroup.subtree_control where
 * its cgroup.controllers offers it, one write per controller so that one
 * refusal does not cost the others. Records the first refusal. */
static void enable_controllers(struct ws_cgroup2_host *h, int dir_fd)
{
    char offered[PROC_FILE_MAX], enabled[PROC_FILE_MAX];
    if (read_file_at(dir_fd, "cgroup.controllers", offered, sizeof(offered)) < 0)
        return;
    if (read_file_at(dir_fd, "cgroup.subtree_control", enabled, sizeof(enabled)) < 0)
        enabled[0] = '\0';
    for (size_t i = 0; i < WS_ELEMENTSOF(ctl_names); i++) {
        char v[NUM_MAX];
        if (!has_word(offered, " \n", ctl_names[i]) || has_word(enabled, " \n", ctl_names[i]))
            continue;
        snprintf(v, sizeof(v), "+%s", ctl_names[i]);
        int r = write_file_at(dir_fd, "cgroup.subtree_control", v);
        if (r < 0 && h->enable_error == 0)
            h->enable_error = r;
    }
}

/* The caps whose controllers are in dir_fd's file `file`. */
static unsigned controllers_in(int dir_fd, const char *file)
{
    char buf[PROC_FILE_MAX];
    unsigned m = 0;
    if (read_file_at(dir_fd, file, buf, sizeof(buf)) < 0)
        return 0;
    for (size_t i = 0; i < WS_ELEMENTSOF(ctl_names); i++)
        if (has_word(buf, " \n", ctl_names[i]))
            m |= ctl_bits[i];
    return m;
}

/* Removes B/workspaced/<pid> for every pid that is not alive, and the one
 * named after our own pid (a leftover of an earlier process with it; this
 * process has no other host), unless the process itself sits below it.
 * Errors are ignored: a directory that cannot go now is retried at the
 * next start. */
static void sweep(const struct ws_cgroup2_host *h)
{
    char own[PATH_MAX];
    if (v2_path_in(h->proc_fd, "self/cgroup", own, sizeof(own)) < 0)
        return;
    int dfd = fcntl(h->hosts_fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        ws_close_fd(&dfd);
        return;
    }
    rewinddir(d); /* as in kill_listed */
    for (struct dirent *de; (de = readdir(d));) {
        pid_t pid;
        if (de->d_type != DT_DIR || !parse_pid(de->d_name, strlen(de->d_name), &pid))
            continue;
        if (pid != h->pid && (kill(pid, 0) == 0 || errno != ESRCH))
            continue;
        char *rel = NULL;
        if (asprintf(&rel, "%s/%s", h->hosts_rel, de->d_name) < 0)
            continue;
        if (!path_within(own, rel))
            (void)cg_destroy(h, h->hosts_fd, de->d_name, rel);
        free(rel);
    }
    closedir(d);
}

/* Moves the whole process into base_fd/server. */
static int move_into_server(int base_fd)
{
    if (mkdirat(base_fd, SERVER_DIR, 0755) < 0 && errno != EEXIST)
        return -errno;
    ws_cleanup_fd int sfd = open_dir_at(base_fd, SERVER_DIR);
    if (sfd < 0)
        return sfd;
    /* "0" names the writing process: all its threads move together. */
    return write_file_at(sfd, "cgroup.procs", "0");
}

/* Finds B: its fd, absolute path and path as /proc shows it; moves the
 * process into B/server where B is its own non-root cgroup. Under
 * host_guard. */
static int find_base(struct ws_cgroup2_host *h, const struct ws_cgroup2_config *cfg, int *ret_fd,
                     char **ret_path, char **ret_rel)
{
    char point[PATH_MAX], mroot[PATH_MAX], own[PATH_MAX];
    ws_cleanup_fd int fd = -1;
    char *path = NULL, *rel = NULL;
    int r;

    if (cfg->root) {
        char real[PATH_MAX];
        if (!realpath(cfg->root, real))
            return -errno;
        r = find_mount(real, NULL, point, mroot, sizeof(point));
        if (r < 0)
            return r;
        path = strdup(real);
        rel = path_join(mroot, path_rest(real, point));
    } else {
        r = v2_path_in(h->proc_fd, "self/cgroup", own, sizeof(own));
        if (r < 0)
            return r;
        if (moved_to[0] && strcmp(own, moved_to) == 0)
            memcpy(own, moved_from, sizeof(own));
        r = find_mount(NULL, own, point, mroot, sizeof(point));
        if (r < 0)
            return r;
        path = path_join(point, path_rest(own, mroot));
        rel = strdup(own);
    }
    if (!path || !rel) {
        r = -ENOMEM;
        goto out;
    }
    fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        r = -errno;
        goto out;
    }
    r = check_cgroup2(fd);
    if (r < 0)
        goto out;
    if (!cfg->root && strcmp(own, "/") != 0 && strcmp(own, moved_from) != 0) {
        int n = snprintf(moved_to, sizeof(moved_to), "%s/" SERVER_DIR, own);
        if (n < 0 || (size_t)n >= sizeof(moved_to)) {
            moved_to[0] = '\0';
            r = -ENAMETOOLONG;
            goto out;
        }
        r = move_into_server(fd);
        if (r < 0) {
            moved_to[0] = '\0';
            goto out;
        }
        memcpy(moved_from, own, sizeof(moved_from));
    }
    *ret_fd = ws_steal_fd(&fd);
    *ret_path = path;
    *ret_rel = rel;
    path = rel = NULL;
    r = 0;
out:
    free(path);
    free(rel);
    return r;
}

int ws_cgroup2_host_new(const struct ws_cgroup2_config *cfg, struct ws_cgroup2_host **ret)
{
    struct ws_cgroup2_config defaults = {0};
    struct ws_cgroup2_host *h = NULL;
    ws_cleanup_fd int base_fd = -1;
    char *base_path = NULL, *base_rel = NULL;
    bool made = false;
    int r;

    if (!ret)
        return -EINVAL;
    if (!cfg)
        cfg = &defaults;
    if (cfg->root && cfg->root[0] != '/')
        return -EINVAL;

    pthread_mutex_lock(&host_guard);
    if (host_exists) {
        pthread_mutex_unlock(&host_guard);
        return -EBUSY;
    }
    h = calloc(1, sizeof(*h));
    if (!h) {
        r = -ENOMEM;
        goto out;
    }
    h->pid = getpid();
    h->proc_fd = h->hosts_fd = h->host_fd = -1;
    atomic_init(&h->next_leaf, 1);
    h->proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (h->proc_fd < 0) {
        r = -errno;
        goto out;
    }
    r = find_base(h, cfg, &base_fd, &base_path, &base_rel);
    if (r < 0)
        goto out;

    enable_controllers(h, base_fd);
    if (mkdirat(base_fd, HOSTS_DIR, 0755) < 0 && errno != EEXIST) {
        r = -errno;
        goto out;
    }
    h->hosts_fd = open_dir_at(base_fd, HOSTS_DIR);
    if (h->hosts_fd < 0) {
        r = h->hosts_fd;
        goto out;
    }
    enable_controllers(h, h->hosts_fd);
    /* The root cgroup has no cgroup.kill: ask a child. */
    h->has_kill = !cfg->no_kill_file && faccessat(h->hosts_fd, "cgroup.kill", W_OK, 0) == 0;
    snprintf(h->host_name, sizeof(h->host_name), "%d", (int)h->pid);
    h->hosts_rel = path_join(base_rel, "/" HOSTS_DIR);
    if (!h->hosts_rel || asprintf(&h->host_rel, "%s/%s", h->hosts_rel, h->host_name) < 0 ||
        asprintf(&h->host_path, "%s/" HOSTS_DIR "/%s", strcmp(base_path, "/") ? base_path : "",
                 h->host_name) < 0) {
        h->host_rel = h->host_path = NULL;
        r = -ENOMEM;
        goto out;
    }

    sweep(h);
    if (mkdirat(h->hosts_fd, h->host_name, 0755) < 0) {
        r = -errno;
        goto out;
    }
    made = true;
    h->host_fd = open_dir_at(h->hosts_fd, h->host_name);
    if (h->host_fd < 0) {
        r = h->host_fd;
        goto out;
    }
    enable_controllers(h, h->host_fd);
    h->available = controllers_in(h->host_fd, "cgroup.subtree_control");
    host_exists = true;
    *ret = h;
    h = NULL;
    r = 0;
out:
    if (h) {
        if (made)
            (void)unlinkat(h->hosts_fd, h->host_name, AT_REMOVEDIR);
        ws_close_fd(&h->host_fd);
        ws_close_fd(&h->hosts_fd);
        ws_close_fd(&h->proc_fd);
        free(h->hosts_rel);
        free(h->host_rel);
        free(h->host_path);
        free(h);
    }
    pthread_mutex_unlock(&host_guard);
    free(base_path);
    free(base_rel);
    return r;
}

void ws_cgroup2_host_free(struct ws_cgroup2_host *h)
{
    if (!h)
        return;
    ws_close_fd(&h->host_fd);
    (void)cg_destroy(h, h->hosts_fd, h->host_name, h->host_rel);
    ws_close_fd(&h->hosts_fd);
    ws_close_fd(&h->proc_fd);
    free(h->hosts_rel);
    free(h->host_rel);
    free(h->host_path);
    free(h);
    pthread_mutex_lock(&host_guard);
    host_exists = false;
    pthread_mutex_unlock(&host_guard);
}

const char *ws_cgroup2_host_mechanism(const struct ws_cgroup2_host *h)
{
    (void)h;
    return "cgroup-v2";
}

const char *ws_cgroup2_host_path(const struct ws_cgroup2_host *h)
{
    return h->host_path;
}

unsigned ws_cgroup2_host_available(const struct ws_cgroup2_host *h)
{
    return h->available;
}

int ws_cgroup2_host_enable_error(const struct ws_cgroup2_host *h)
{
    return h->enable_error;
}

/* ---- groups -------------------------------------------------------------- */

static bool id_valid(const char *id)
{
    size_t len = id ? strlen(id) : 0;
    if (len == 0 || len > WS_CGROUP2_ID_MAX)
        return false;
    for (const char *c = id; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '-' || *c == '_'))
            return false;
    return true;
}

static unsigned caps_wanted(const struct ws_cgroup2_caps *c)
{
    return (c->pids_max ? WS_CGROUP2_PIDS : 0u) | (c->memory_bytes ? WS_CGROUP2_MEMORY : 0u) |
           (c->cpu_millis ? WS_CGROUP2_CPU : 0u);
}

/* Writes the cap `bit` into the group's files; true when it is in force. */
static bool set_cap(int dir_fd, unsigned bit, const struct ws_cgroup2_caps *c)
{
    char v[64];

    switch (bit) {
    case WS_CGROUP2_PIDS:
        snprintf(v, sizeof(v), "%u", c->pids_max);
        return write_file_at(dir_fd, "pids.max", v) == 0;
    case WS_CGROUP2_MEMORY: {
        snprintf(v, sizeof(v), "%llu", (unsigned long long)c->memory_bytes);
        if (write_file_at(dir_fd, "memory.max", v) < 0)
            return false;
        /* Where swap is accounted, a swapped-out page would go around
         * memory.max: none is allowed. Without swap accounting there is
         * no file (and a kernel built so cannot charge swap at all). */
        int r = write_file_at(dir_fd, "memory.swap.max", "0");
        return r == 0 || r == -ENOENT;
    }
    case WS_CGROUP2_CPU: {
        unsigned long long quota =
            (unsigned long long)c->cpu_millis * WS_CGROUP2_CPU_PERIOD_US / 1000;
        if (quota < WS_CGROUP2_CPU_QUOTA_MIN_US)
            quota = WS_CGROUP2_CPU_QUOTA_MIN_US;
        snprintf(v, sizeof(v), "%llu %d", quota, WS_CGROUP2_CPU_PERIOD_US);
        return write_file_at(dir_fd, "cpu.max", v) == 0;
    }
    }
    return false;
}

int ws_cgroup2_group_new(struct ws_cgroup2_host *h, const char *id,
                         const struct ws_cgroup2_caps *caps, struct ws_cgroup2_group **ret)
{
    struct ws_cgroup2_caps none = {0};
    struct ws_cgroup2_group *g;
    int r;

    if (!h || !ret || !id_valid(id))
        return -EINVAL;
    if (!caps)
        caps = &none;
    g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->host = h;
    g->dir_fd = -1;
    g->wanted = caps_wanted(caps);
    snprintf(g->name, sizeof(g->name), GROUP_PREFIX "%s", id);
    if (asprintf(&g->rel, "%s/%s", h->host_rel, g->name) < 0) {
        g->rel = NULL;
        r = -ENOMEM;
        goto out;
    }
    if (mkdirat(h->host_fd, g->name, 0755) < 0) {
        r = -errno;
        goto out;
    }
    g->dir_fd = open_dir_at(h->host_fd, g->name);
    if (g->dir_fd < 0) {
        r = g->dir_fd;
        (void)unlinkat(h->host_fd, g->name, AT_REMOVEDIR);
        goto out;
    }
    /* The group's own list, not the host's: what the kernel gives this
     * cgroup is what holds, whatever setup believed. */
    unsigned offered = controllers_in(g->dir_fd, "cgroup.controllers");
    for (size_t i = 0; i < WS_ELEMENTSOF(ctl_bits); i++) {
        unsigned bit = ctl_bits[i];
        if ((g->wanted & bit) && (offered & bit) && set_cap(g->dir_fd, bit, caps))
            g->enforced |= bit;
    }
    *ret = g;
    g = NULL;
    r = 0;
out:
    if (g) {
        free(g->rel);
        free(g);
    }
    return r;
}

unsigned ws_cgroup2_group_enforced(const struct ws_cgroup2_group *g)
{
    return g ? g->enforced : 0;
}

unsigned ws_cgroup2_group_missing(const struct ws_cgroup2_group *g)
{
    return g ? g->wanted & ~g->enforced : 0;
}

int ws_cgroup2_group_fd(const struct ws_cgroup2_group *g)
{
    return g->dir_fd;
}

int ws_cgroup2_group_oom_kills(const struct ws_cgroup2_group *g, uint64_t *ret)
{
    char buf[PROC_FILE_MAX];
    uint64_t n = 0;

    if (!g || !ret)
        return -EINVAL;
    ssize_t k = read_file_at(g->dir_fd, "memory.events", buf, sizeof(buf));
    if (k == -ENOENT) {
        *ret = 0; /* no memory controller here: nothing counted */
        return 0;
    }
    if (k < 0)
        return (int)k;
    int r = keyed_value(buf, "oom_kill", &n);
    if (r < 0 && r != -ENOENT)
        return r;
    *ret = n;
    return 0;
}

void ws_cgroup2_group_free(struct ws_cgroup2_group *g)
{
    if (!g)
        return;
    ws_close_fd(&g->dir_fd);
    (void)cg_destroy(g->host, g->host->host_fd, g->name, g->rel);
    free(g->rel);
    free(g);
}

/* ---- leaves -------------------------------------------------------------- */

int ws_cgroup2_leaf_new(struct ws_cgroup2_group *g, struct ws_cgroup2_leaf **ret)
{
    struct ws_cgroup2_leaf *l;
    int r;

    if (!g || !ret)
        return -EINVAL;
    l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->group = g;
    l->dir_fd = l->events_fd = -1;
    snprintf(l->name, sizeof(l->name), "c%llu",
             (unsigned long long)atomic_fetch_add(&g->host->next_leaf, 1));
    if (asprintf(&l->rel, "%s/%s", g->rel, l->name) < 0) {
        l->rel = NULL;
        r = -ENOMEM;
        goto out;
    }
    if (asprintf(&l->path, "%s/%s/%s", g->host->host_path, g->name, l->name) < 0) {
        l->path = NULL;
        r = -ENOMEM;
        goto out;
    }
    if (mkdirat(g->dir_fd, l->name, 0755) < 0) {
        r = -errno;
        goto out;
    }
    l->dir_fd = open_dir_at(g->dir_fd, l->name);
    if (l->dir_fd >= 0)
        l->events_fd = openat(l->dir_fd, "cgroup.events", O_RDONLY | O_CLOEXEC);
    if (l->events_fd < 0) {
        r = l->dir_fd < 0 ? l->dir_fd : -errno;
        ws_close_fd(&l->dir_fd);
        (void)unlinkat(g->dir_fd, l->name, AT_REMOVEDIR);
        goto out;
    }
    *ret = l;
    l = NULL;
    r = 0;
out:
    if (l) {
        free(l->rel);
        free(l->path);
        free(l);
    }
    return r;
}

int ws_cgroup2_leaf_fd(const struct ws_cgroup2_leaf *l)
{
    return l->dir_fd;
}

const char *ws_cgroup2_leaf_path(const struct ws_cgroup2_leaf *l)
{
    return l->path;
}

int ws_cgroup2_leaf_add(struct ws_cgroup2_leaf *l, pid_t pid)
{
    char v[NUM_MAX];

    if (!l || pid <= 0)
        return -EINVAL;
    snprintf(v, sizeof(v), "%d\n", (int)pid);
    return write_file_at(l->dir_fd, "cgroup.procs", v);
}

static bool stop_signal(int sig)
{
    return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

int ws_cgroup2_leaf_signal(struct ws_cgroup2_leaf *l, int sig, const pid_t *skip, size_t n_skip)
{
    if (!l || sig < 0 || sig >= NSIG || (n_skip && !skip))
        return -EINVAL;
    bool cont = sig != 0 && sig != SIGKILL && sig != SIGCONT && !stop_signal(sig);
    return cg_procs(l->group->host, l->dir_fd, l->rel, sig, cont, skip, n_skip);
}

int ws_cgroup2_leaf_count(struct ws_cgroup2_leaf *l)
{
    if (!l)
        return -EINVAL;
    return cg_procs(l->group->host, l->dir_fd, l->rel, -1, false, NULL, 0);
}

int ws_cgroup2_leaf_kill(struct ws_cgroup2_leaf *l)
{
    if (!l)
        return -EINVAL;
    return cg_kill(l->group->host, l->dir_fd, l->rel);
}

int ws_cgroup2_leaf_events_fd(const struct ws_cgroup2_leaf *l)
{
    return l->events_fd;
}

int ws_cgroup2_leaf_populated(struct ws_cgroup2_leaf *l)
{
    bool populated;
    if (!l)
        return -EINVAL;
    int r = read_events(l->events_fd, &populated, NULL);
    return r < 0 ? r : populated;
}

int ws_cgroup2_leaf_wait_empty(struct ws_cgroup2_leaf *l, int timeout_ms)
{
    if (!l)
        return -EINVAL;
    int r = events_wait(l->events_fd, false, timeout_ms < 0 ? -1 : ws_mono_ms() + timeout_ms, -1);
    return r < 0 ? r : 0;
}

void ws_cgroup2_leaf_free(struct ws_cgroup2_leaf *l)
{
    if (!l)
        return;
    ws_close_fd(&l->events_fd);
    ws_close_fd(&l->dir_fd);
    (void)cg_destroy(l->group->host, l->group->dir_fd, l->name, l->rel);
    free(l->rel);
    free(l->path);
    free(l);
}
