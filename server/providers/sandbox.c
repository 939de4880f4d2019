#include "server/providers/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <linux/nsfs.h>
#include <linux/openat2.h>

#include <jansson.h>

#include "server/base/fd.h"
#include "server/base/io.h"
#include "server/base/macros.h"
#include "server/base/time.h"
#include "server/posix/limits.h"
#include "server/posix/seccomp.h"
#include "server/posix/spawn.h"
#include "server/agent/client.h"
#include "server/events/pump.h"
#include "server/exec/exec.h"
#include "server/providers/probe.h"

/* The fds bwrap and init get, in this order, as 3, 4, 5, then (with
 * network) 6; the binds' follow. */
#define FD_SECCOMP 3
#define FD_INFO    4
#define FD_STATUS  5
#define FD_NET_GO  6
/* How long a signal waits for bwrap to say which pid init has. */
#define INFO_WAIT_MS 1000
/* Longest status line init writes, and longest info document bwrap does. */
#define STATUS_MAX 64
#define INFO_MAX   1024
/* Upper bound on bwrap's arguments before the command's. */
#define FIXED_ARGS_MAX 160
/* Where binds of host paths appear inside: host path P at BIND_PREFIX + P,
 * never over the sandbox's own /proc, /dev, /tmp or /workspace. */
#define BIND_PREFIX "/mnt"

/* User-mode network of a sandbox with network: slirp4netns attaches a tap
 * device to the sandbox's own network namespace and NATs its traffic
 * through sockets of the host's. Its gateway alias for the host's loopback
 * is disabled, so nothing listening on the host's loopback (the server,
 * metrics, a database) is reachable; its DNS forwarder (NET_DNS) relays to
 * the host's resolver. */
#define NET_TAP "tap0"
#define NET_MTU "--mtu=65520"
#define NET_DNS "10.0.2.3"
/* How long a command's start waits for bwrap's child and then for the
 * network to come up before the command is failed instead. */
#define NET_WAIT_MS 5000
/* The fds slirp4netns gets: the sandbox's network and user namespaces,
 * its ready pipe (it writes "1" there once the device is configured) and
 * its exit pipe (it exits when that reaches EOF: the server went away). */
#define NET_FD_NETNS  3
#define NET_FD_USERNS 4
#define NET_FD_READY  5
#define NET_FD_EXIT   6
#define NET_FD_COUNT  4
/* Longest reason the server hands init when the network failed. */
#define NET_REASON_MAX 128

/* Top-level system directories next to /usr: bound read-only when they are
 * directories, recreated as the same symlink when they are links into /usr
 * (merged-/usr systems). */
static const char *const root_dirs[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"};
#define N_ROOT_DIRS WS_ELEMENTSOF(root_dirs)

/* What of /etc commands need to run: users and groups, name service
 * config, the loader's cache, alternatives (/usr/bin/awk is a link into
 * it), certificates (not /etc/ssl/private), time zone. Copied into one
 * snapshot directory when the server starts and bound as the sandbox's
 * /etc in a single mount (a bind per file costs bwrap a re-read of the
 * mount table each: about 3 ms a command for these). Absent ones are
 * skipped. */
static const char *const etc_entries[] = {
    "passwd",    "group",    "nsswitch.conf", "ld.so.cache", "ld.so.conf",      "ld.so.conf.d",
    "localtime", "timezone", "alternatives",  "ssl/certs",   "ssl/openssl.cnf", "hosts",
    "host.conf", "gai.conf", "os-release",    "mime.types",
};
/* Bound over the snapshot's empty placeholder, and only with network: the
 * user-mode network's DNS forwarder (a file next to the snapshot), or
 * without a snapshot the host's own. */
#define ETC_RESOLV "/etc/resolv.conf"
/* Bounds on what the snapshot copies (the entries above are small). */
#define ETC_DEPTH_MAX   4
#define ETC_ENTRIES_MAX 20000
#define ETC_FILE_MAX    (64ull * 1024 * 1024)

struct root_entry {
    bool present;
    bool is_link;
    char target[PATH_MAX]; /* the link's target */
};

struct ws_sandbox {
    struct ws_seccomp *seccomp;
    char etc[PATH_MAX];    /* the /etc snapshot; "" when none could be made */
    char resolv[PATH_MAX]; /* resolv.conf for network, beside it; "" when none */
    char init[PATH_MAX];   /* a copy of the init program, beside it; "" when none */
    char agent[PATH_MAX];  /* copies of the agent and of its init; "" when none */
    char dinit[PATH_MAX];
    struct ws_limits_host *limits;
    struct root_entry roots[N_ROOT_DIRS];
    /* Agent mode: one box per workspace, made by its first command; the
     * pump that reads their channels, made with the first box. */
    pthread_mutex_t boxes_lock;
    struct box *boxes;
    struct ws_pump *pump;
};

/* One command's sandbox: bwrap's arguments and the pipes to it. */
struct run {
    char **argv;
    size_t argc;
    size_t cap;
    bool oom;
    /* Given to bwrap as 3, 4, ...: the seccomp memfd, the info and status
     * write ends, with network the read end of init's go pipe, then one
     * O_PATH fd per extra bind. */
    int child_fds[8 + 2 * WS_SANDBOX_BINDS_MAX];
    size_t n_child_fds;
    int info_fd; /* read ends */
    int status_fd;
    pid_t init_pid; /* 0 until bwrap said */
    /* With network: the server's end of the socket to init (init says
     * "r" there once the sandbox is built, its network namespace
     * attached, and starts the command only once it reads "1"), and
     * slirp4netns once started (and the write end of its exit pipe). */
    bool network;
    int net_go_fd;
    struct ws_child *net;
    int net_exit_fd;
    /* Who slirp4netns runs as: the owner of the sandbox's user namespace
     * (bwrap's uid), so it may join that namespace with no capability on
     * the host. 0: the server's own. */
    uid_t net_uid;
    gid_t net_gid;
    struct ws_sandbox *sb;
    struct ws_limits_group *group; /* the workspace's, a reference; NULL: no caps */
    uint64_t oom_kills;            /* the group's count when the command started */
};

static int copy_file(const char *src, const char *dst)
{
    char buf[65536];
    uint64_t total = 0;
    int in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    int out = -1, r = 0;

    if (in < 0)
        return -errno;
    out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    /* 0644 whatever the server's umask: what the host's /etc has. */
    if (out < 0 || fchmod(out, 0644) < 0) {
        r = -errno;
        goto out;
    }
    for (;;) {
        ssize_t n = ws_read_all(in, buf, sizeof(buf));
        if (n <= 0) {
            r = (int)n;
            break;
        }
        total += (uint64_t)n;
        if (total > ETC_FILE_MAX) {
            r = -EFBIG;
            break;
        }
        r = ws_write_all(out, buf, (size_t)n);
        if (r < 0)
            break;
    }
out:
    close(in);
    if (out >= 0)
        close(out);
    return r;
}

/* Copies src to dst: symlinks as the same link (absolute ones resolve
 * inside the sandbox, where /usr is the host's), files by content (0644),
 * directories recursively; anything else is left out. *budget bounds the
 * entries. */
static int copy_entry(const char *src, const char *dst, int depth, int *budget)
{
    struct stat st;
    int r = 0;

    if (--*budget < 0)
        return -E2BIG;
    if (lstat(src, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlink(src, target, sizeof(target) - 1);
        if (n <= 0)
            return n < 0 ? -errno : -EINVAL;
        target[n] = '\0';
        return symlink(target, dst) < 0 ? -errno : 0;
    }
    if (S_ISREG(st.st_mode))
        return copy_file(src, dst);
    if (!S_ISDIR(st.st_mode) || depth >= ETC_DEPTH_MAX)
        return 0;
    if (mkdir(dst, 0755) < 0 || chmod(dst, 0755) < 0)
        return -errno;
    DIR *d = opendir(src);
    if (!d)
        return -errno;
    for (struct dirent *e; r == 0 && (e = readdir(d));) {
        char s2[PATH_MAX], d2[PATH_MAX];
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (snprintf(s2, sizeof(s2), "%s/%s", src, e->d_name) >= (int)sizeof(s2) ||
            snprintf(d2, sizeof(d2), "%s/%s", dst, e->d_name) >= (int)sizeof(d2))
            continue;
        r = copy_entry(s2, d2, depth + 1, budget);
    }
    closedir(d);
    return r;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        (void)rmdir(path);
    else
        (void)unlink(path);
    return 0;
}

/* Removes the snapshots earlier servers left in dir. */
static void remove_old_snapshots(const char *dir)
{
    DIR *d = opendir(dir);

    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        char path[PATH_MAX];
        if (strncmp(e->d_name, "etc.", 4) != 0 && strncmp(e->d_name, "init.", 5) != 0)
            continue;
        if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path))
            continue;
        (void)nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    }
    closedir(d);
}

/* Makes dir/etc.<pid>: the sandbox's /etc. */
static int make_etc_snapshot(const char *dir, char *ret, size_t size)
{
    char path[PATH_MAX], parent[PATH_MAX];
    int budget = ETC_ENTRIES_MAX, r;

    /* Searchable, not listable: bwrap runs as a workspace's uid and finds
     * what it binds by path (it resolves even an fd bind's path again). */
    if ((mkdir(dir, 0711) < 0 && errno != EEXIST) || chmod(dir, 0711) < 0)
        return -errno;
    remove_old_snapshots(dir);
    if (snprintf(path, sizeof(path), "%s/etc.%d", dir, (int)getpid()) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    if (mkdir(path, 0755) < 0 || chmod(path, 0755) < 0)
        return -errno;
    r = 0;
    for (size_t i = 0; r == 0 && i < WS_ELEMENTSOF(etc_entries); i++) {
        char src[PATH_MAX], dst[PATH_MAX];
        const char *slash = strchr(etc_entries[i], '/');
        if (snprintf(src, sizeof(src), "/etc/%s", etc_entries[i]) >= (int)sizeof(src) ||
            snprintf(dst, sizeof(dst), "%s/%s", path, etc_entries[i]) >= (int)sizeof(dst)) {
            r = -ENAMETOOLONG;
            break;
        }
        if (slash) {
            if (snprintf(parent, sizeof(parent), "%s/%.*s", path, (int)(slash - etc_entries[i]),
                         etc_entries[i]) >= (int)sizeof(parent))
                r = -ENAMETOOLONG;
            else if ((mkdir(parent, 0755) < 0 && errno != EEXIST) || chmod(parent, 0755) < 0)
                r = -errno;
        }
        if (r == 0)
            r = copy_entry(src, dst, 0, &budget);
    }
    if (r == 0) {
        char resolv[PATH_MAX];
        int fd = -1;
        if (snprintf(resolv, sizeof(resolv), "%s/resolv.conf", path) < (int)sizeof(resolv))
            fd = open(resolv, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0 && fchmod(fd, 0644) < 0) {
            close(fd);
            fd = -1;
        } else
            errno = ENAMETOOLONG;
        if (fd < 0)
            r = -errno;
        else
            close(fd);
    }
    if (r < 0) {
        (void)nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
        return r;
    }
    snprintf(ret, size, "%s", path);
    return 0;
}

/* Copies one of the programs a sandbox runs (its init, the agent, the
 * agent's init) to dir/NAME.<pid> (0755), where a workspace's uid can reach
 * it: the program's own directory may be below one it cannot search (a
 * build tree in a 0700 home). */
static int copy_program(const char *src, const char *dir, const char *name, char *ret, size_t size)
{
    char path[PATH_MAX];
    int r;

    if (!src)
        return 0; /* none: wrap fails closed */
    if (snprintf(path, sizeof(path), "%s/%s.%d", dir, name, (int)getpid()) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    (void)unlink(path);
    r = copy_file(src, path);
    if (r == 0 && chmod(path, 0755) < 0)
        r = -errno;
    if (r < 0) {
        (void)unlink(path);
        return r;
    }
    snprintf(ret, size, "%s", path);
    return 0;
}

/* Makes dir/etc.<pid>.resolv.conf, the sandbox's resolv.conf with network:
 * the host's may name a resolver on the host's loopback (a local caching
 * daemon), which the sandbox's own loopback does not have; the user-mode
 * network's forwarder relays to whichever the host uses. Removed with the
 * snapshots by a later server (same prefix). */
static int make_resolv(const char *dir, char *ret, size_t size)
{
    static const char content[] = "nameserver " NET_DNS "\n";
    char path[PATH_MAX];
    int fd, r = 0;

    if (snprintf(path, sizeof(path), "%s/etc.%d.resolv.conf", dir, (int)getpid()) >=
        (int)sizeof(path))
        return -ENAMETOOLONG;
    (void)unlink(path);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -errno;
    errno = 0;
    if (fchmod(fd, 0644) < 0 || write(fd, content, sizeof(content) - 1) != sizeof(content) - 1)
        r = errno ? -errno : -EIO;
    close(fd);
    if (r < 0) {
        (void)unlink(path);
        return r;
    }
    snprintf(ret, size, "%s", path);
    return 0;
}

int ws_sandbox_new(const char *dir, struct ws_sandbox **ret)
{
    return ws_sandbox_new_ids(dir, 0, ret);
}

int ws_sandbox_new_ids(const char *dir, unsigned id_floor, struct ws_sandbox **ret)
{
    struct ws_sandbox *sb = calloc(1, sizeof(*sb));
    int r;

    if (!sb)
        return -ENOMEM;
    pthread_mutex_init(&sb->boxes_lock, NULL);
    r = ws_seccomp_new_ids(id_floor, &sb->seccomp);
    if (r < 0) {
        free(sb);
        return r;
    }
    r = ws_limits_host_new(&sb->limits);
    if (r < 0) {
        ws_seccomp_free(sb->seccomp);
        free(sb);
        return r;
    }
    if (dir) {
        r = make_etc_snapshot(dir, sb->etc, sizeof(sb->etc));
        if (r == 0) {
            r = make_resolv(dir, sb->resolv, sizeof(sb->resolv));
            if (r == 0)
                r = copy_program(ws_probe_sandbox_init_path(), dir, "init", sb->init,
                                 sizeof(sb->init));
            if (r == 0)
                r = copy_program(ws_probe_agent_path(), dir, "agent", sb->agent, sizeof(sb->agent));
            if (r == 0)
                r = copy_program(ws_probe_inbox_init_path(), dir, "agent-init", sb->dinit,
                                 sizeof(sb->dinit));
            if (r < 0) {
                (void)nftw(sb->etc, remove_one, 16, FTW_DEPTH | FTW_PHYS);
                const char *made[] = {sb->resolv, sb->init, sb->agent};
                for (size_t i = 0; i < WS_ELEMENTSOF(made); i++)
                    if (made[i][0])
                        (void)unlink(made[i]);
            }
        }
        if (r < 0) {
            ws_limits_host_free(sb->limits);
            ws_seccomp_free(sb->seccomp);
            free(sb);
            return r;
        }
    }
    for (size_t i = 0; i < N_ROOT_DIRS; i++) {
        char path[64];
        struct stat st;
        struct root_entry *e = &sb->roots[i];

        snprintf(path, sizeof(path), "/%s", root_dirs[i]);
        if (lstat(path, &st) != 0)
            continue;
        if (S_ISLNK(st.st_mode)) {
            ssize_t n = readlink(path, e->target, sizeof(e->target) - 1);
            if (n <= 0)
                continue;
            e->target[n] = '\0';
            e->is_link = true;
            e->present = true;
        } else if (S_ISDIR(st.st_mode)) {
            e->present = true;
        }
    }
    *ret = sb;
    return 0;
}

static void boxes_stop_all(struct ws_sandbox *sb);

void ws_sandbox_free(struct ws_sandbox *sb)
{
    if (!sb)
        return;
    /* The boxes first: they hold their workspaces' groups. */
    boxes_stop_all(sb);
    ws_limits_host_free(sb->limits);
    ws_seccomp_free(sb->seccomp);
    if (sb->etc[0])
        (void)nftw(sb->etc, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    if (sb->resolv[0])
        (void)unlink(sb->resolv);
    if (sb->init[0])
        (void)unlink(sb->init);
    if (sb->agent[0])
        (void)unlink(sb->agent);
    if (sb->dinit[0])
        (void)unlink(sb->dinit);
    ws_pump_free(sb->pump);
    pthread_mutex_destroy(&sb->boxes_lock);
    free(sb);
}

/* The workspace's group, made on first use and shared by its commands
 * (the limits host lists it until the workspace is forgotten); a new
 * reference. NULL when no cap is asked for or the group cannot be made
 * (the caps are then not in force, and the command is refused). */
static struct ws_limits_group *group_get(struct ws_sandbox *sb, const char *id,
                                         const struct ws_limits *l)
{
    struct ws_limits_group *g;

    if (!id || strlen(id) > WS_SANDBOX_ID_MAX || !(l->pids_max || l->memory_bytes || l->cpu_millis))
        return NULL;
    return ws_limits_group_get(sb->limits, id, l, &g) == 0 ? g : NULL;
}

void ws_sandbox_forget(struct ws_sandbox *sb, const char *workspace_id)
{
    /* Its box first: that holds a reference to its group. */
    ws_sandbox_box_reset(sb, workspace_id);
    ws_limits_forget(sb->limits, workspace_id);
}

/* The WS_LIMIT_* bits of the caps *l asks for. */
static unsigned limits_wanted(const struct ws_limits *l)
{
    return (l->pids_max ? WS_LIMIT_PIDS : 0) | (l->memory_bytes ? WS_LIMIT_MEMORY : 0) |
           (l->cpu_millis ? WS_LIMIT_CPU : 0);
}

/* The name of the first cap of `bits`. */
static const char *cap_name(unsigned bits)
{
    return bits & WS_LIMIT_PIDS ? "pids" : bits & WS_LIMIT_MEMORY ? "memory" : "cpu";
}

int ws_sandbox_limits_check(const struct ws_sandbox *sb, const struct ws_limits *l,
                            const char **ret_cap)
{
    unsigned missing = limits_wanted(l) & ~ws_limits_host_available(sb->limits);

    if (!missing)
        return 0;
    *ret_cap = cap_name(missing);
    return -EOPNOTSUPP;
}

void ws_sandbox_limits_report(struct ws_sandbox *sb, const char *workspace_id,
                              const struct ws_limits *l, struct ws_sandbox_limits_info *ret)
{
    unsigned want = (l->pids_max ? WS_LIMIT_PIDS : 0) | (l->memory_bytes ? WS_LIMIT_MEMORY : 0) |
                    (l->cpu_millis ? WS_LIMIT_CPU : 0);
    unsigned have = ws_limits_host_available(sb->limits) & want;

    struct ws_limits_group *g;

    if (ws_limits_group_lookup(sb->limits, workspace_id, &g) == 0) {
        have = ws_limits_group_enforced(g);
        ws_limits_group_put(g);
    }
    ret->enforced = have;
    ret->mechanism = have ? ws_limits_host_mechanism(sb->limits) : "";
}

const char *ws_sandbox_seccomp_summary(const struct ws_sandbox *sb)
{
    return ws_seccomp_summary(sb->seccomp);
}

const char *ws_sandbox_namespaces(bool network)
{
    /* With network too: it is the sandbox's own namespace, connected
     * through the user-mode network, never the host's. */
    (void)network;
    return "user,pid,ipc,uts,cgroup,mount,net";
}

/* Ends slirp4netns, if started, and reaps it (through the spawn module,
 * which only signals a child it has not reaped). Its exit pipe closes
 * too. Quick: SIGKILL cannot be caught. */
static void net_stop(struct run *r)
{
    ws_close_fd(&r->net_exit_fd);
    ws_child_free(r->net);
    r->net = NULL;
}

static void run_free(struct run *r)
{
    if (!r)
        return;
    net_stop(r);
    ws_close_fd(&r->net_go_fd);
    if (r->argv)
        for (size_t i = 0; i < r->argc; i++)
            free(r->argv[i]);
    free(r->argv);
    for (size_t i = 0; i < r->n_child_fds; i++)
        ws_close_fd(&r->child_fds[i]);
    r->n_child_fds = 0;
    ws_close_fd(&r->info_fd);
    ws_close_fd(&r->status_fd);
    ws_limits_group_put(r->group);
    free(r);
}

/* Appends copies of the strings; remembers an allocation failure for the
 * caller to check once. */
static void add(struct run *r, const char *a)
{
    if (r->oom)
        return;
    if (r->argc + 2 > r->cap) {
        size_t cap = r->cap ? r->cap * 2 : FIXED_ARGS_MAX;
        char **v = realloc(r->argv, cap * sizeof(*v));
        if (!v) {
            r->oom = true;
            return;
        }
        r->argv = v;
        r->cap = cap;
    }
    r->argv[r->argc] = strdup(a);
    if (!r->argv[r->argc]) {
        r->oom = true;
        return;
    }
    r->argc++;
    r->argv[r->argc] = NULL;
}

static void add2(struct run *r, const char *a, const char *b)
{
    add(r, a);
    add(r, b);
}

static void add3(struct run *r, const char *a, const char *b, const char *c)
{
    add(r, a);
    add(r, b);
    add(r, c);
}

/* Reads what is there on a non-blocking pipe, up to max - 1 bytes. */
static size_t read_avail(int fd, char *buf, size_t max)
{
    size_t have = 0;

    while (have + 1 < max) {
        ssize_t n = WS_RETRY_EINTR(read(fd, buf + have, max - 1 - have));
        if (n <= 0)
            break;
        have += (size_t)n;
    }
    buf[have] = '\0';
    return have;
}

/* init's host pid from bwrap's info document, waiting up to INFO_WAIT_MS
 * for it (bwrap writes it as soon as the sandbox's first process exists,
 * before the command can run). */
static pid_t init_pid(struct run *r)
{
    char buf[INFO_MAX];
    struct pollfd pfd = {.fd = r->info_fd, .events = POLLIN};
    json_t *doc, *v;

    if (r->init_pid > 0 || r->info_fd < 0)
        return r->init_pid;
    if (poll(&pfd, 1, INFO_WAIT_MS) <= 0)
        return 0;
    read_avail(r->info_fd, buf, sizeof(buf));
    doc = json_loads(buf, 0, NULL);
    v = doc ? json_object_get(doc, "child-pid") : NULL;
    if (json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) < INT_MAX)
        r->init_pid = (pid_t)json_integer_value(v);
    json_decref(doc);
    ws_close_fd(&r->info_fd);
    return r->init_pid;
}

static int hook_signal(void *arg, struct ws_tree *tree, pid_t leader, int sig)
{
    struct run *r = arg;
    pid_t skip[2] = {leader, init_pid(r)};

    /* Without init's pid the sandbox is still being built: there is no
     * command to signal yet, and bwrap's setup must not be hit. */
    if (skip[1] <= 0)
        return 0;
    return ws_tree_signal_except(tree, sig, skip, 2);
}

/* init's line: "exited CODE" or "signaled SIG[ core]". Without one the
 * command never started (bwrap or init failed and said why on stderr):
 * bwrap's own exit stands. */
static int hook_enter(void *arg)
{
    struct run *r = arg;

    return r->group ? ws_limits_group_enter(r->group) : 0;
}

static void hook_leave(void *arg)
{
    struct run *r = arg;

    if (r->group)
        (void)ws_limits_group_leave(r->group);
}

static void hook_exited(void *arg, struct ws_child_exit *e, enum ws_cause *ret_cause)
{
    struct run *r = arg;
    char buf[STATUS_MAX], word[16] = "", core[8] = "";
    int v = -1;

    /* bwrap ends after the sandbox's pid 1, so the namespace is gone and
     * its network has nothing left to serve: end it now, before the exec
     * layer looks for what the command left running. */
    net_stop(r);
    if (r->status_fd < 0)
        return;
    /* Exactly one line, as init writes it; anything else (nothing: the
     * command never started; more: someone else wrote too) is no report. */
    size_t n = read_avail(r->status_fd, buf, sizeof(buf));
    if (n == 0 || buf[n - 1] != '\n' || memchr(buf, '\n', n) != buf + n - 1)
        return;
    if (sscanf(buf, "%15s %d %7s", word, &v, core) < 2)
        return;
    if (strcmp(word, "exited") == 0 && v >= 0 && v <= 255) {
        e->signaled = false;
        e->exit_code = v;
        e->signal = 0;
        e->core_dumped = false;
    } else if (strcmp(word, "signaled") == 0 && v > 0 && v < NSIG) {
        e->signaled = true;
        e->exit_code = 0;
        e->signal = v;
        e->core_dumped = strcmp(core, "core") == 0;
        /* SIGKILLed while the workspace's OOM count went up: the kernel's
         * OOM killer (the group is the workspace's, so a sibling command's
         * OOM in the same moment would read the same). */
        if (v == SIGKILL && r->group && ws_limits_group_oom_kills(r->group) > r->oom_kills)
            *ret_cause = WS_CAUSE_OOM;
    }
}

/* A pipe whose read end (ours) is non-blocking and whose ends are both
 * close-on-exec (spawn gives the write end to bwrap under a fixed fd). */
static int make_pipe(int *ret_read, int *ret_write)
{
    int p[2];

    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0) {
        int r = -errno;
        close(p[0]);
        close(p[1]);
        return r;
    }
    *ret_read = p[0];
    *ret_write = p[1];
    return 0;
}

/* Waits until fd is readable or the deadline passed; true when readable
 * (or at EOF). */
static bool wait_readable(int fd, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - ws_mono_ms();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (left <= 0)
            return false;
        int n = poll(&pfd, 1, (int)left);
        if (n < 0 && errno == EINTR)
            continue;
        return n > 0;
    }
}

/* init's host pid, read from bwrap's whole info document by the deadline:
 * bwrap writes it in pieces, and the write end stays open in the sandbox,
 * so the end of the document is where it parses. */
static pid_t read_init_pid(struct run *r, int64_t deadline)
{
    char buf[INFO_MAX];
    size_t have = 0;

    while (r->info_fd >= 0 && have + 1 < sizeof(buf) && wait_readable(r->info_fd, deadline)) {
        ssize_t n = WS_RETRY_EINTR(read(r->info_fd, buf + have, sizeof(buf) - 1 - have));
        if (n < 0 && errno == EAGAIN)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
        buf[have] = '\0';
        json_t *doc = json_loads(buf, 0, NULL);
        json_t *v = doc ? json_object_get(doc, "child-pid") : NULL;
        if (json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) < INT_MAX)
            r->init_pid = (pid_t)json_integer_value(v);
        json_decref(doc);
        if (doc)
            break;
    }
    ws_close_fd(&r->info_fd);
    return r->init_pid;
}

/* Whether fd is a network namespace other than the server's own:
 * configuring that would put the tap device on the host. */
static int check_netns(int fd)
{
    struct stat mine, theirs;

    if (ioctl(fd, NS_GET_NSTYPE) != CLONE_NEWNET)
        return -EINVAL;
    if (stat("/proc/self/ns/net", &mine) < 0 || fstat(fd, &theirs) < 0)
        return -errno;
    if (mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino)
        return -EPERM;
    return 0;
}

/* Waits for init's "r" and takes the network namespace it attached:
 * init's own, sent before any command of the sandbox runs, so the
 * server needs no right over another uid's /proc/PID/ns. -ESRCH when no
 * "r" came (the sandbox did not start), -ENOENT when it came alone. */
static int recv_netns(struct run *r, int64_t deadline, int *ret)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(2 * sizeof(int))];
    } ctl;
    char c = 0;
    struct iovec iov = {.iov_base = &c, .iov_len = 1};
    struct msghdr m;
    ssize_t n = -1;
    int fd = -1;

    while (wait_readable(r->net_go_fd, deadline)) {
        memset(&m, 0, sizeof(m));
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof(ctl.buf);
        n = WS_RETRY_EINTR(recvmsg(r->net_go_fd, &m, MSG_CMSG_CLOEXEC));
        if (n < 0 && errno == EAGAIN)
            continue;
        break;
    }
    if (n != 1 || c != 'r')
        return -ESRCH;
    /* Every fd that came is taken, so none leaks; one is the answer. */
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int got;
            memcpy(&got, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
            if (fd < 0)
                fd = got;
            else
                close(got);
        }
    }
    if (fd < 0)
        return -ENOENT;
    *ret = fd;
    return 0;
}

/* Starts slirp4netns on the sandbox's network namespace (init's, as it
 * sent it) and waits for it to say the device is up. It runs as the
 * owner of the sandbox's user namespace, the one identity that may join
 * it without a capability on the host; a compromise of the packet parser
 * therefore lands as that workspace's uid, not the server's. On failure
 * says why in reason. */
static int net_start(struct run *r, int64_t deadline, char *reason, size_t size)
{
    const char *tool = ws_probe_usernet_path();
    int fds[NET_FD_COUNT] = {-1, -1, -1, -1}; /* netns, userns, ready w, exit r */
    int ready_r = -1, root = -1, err;
    char arg_ready[32], arg_exit[32], arg_userns[48], arg_netns[32];
    char c;

    if (!tool) {
        snprintf(reason, size, WS_USERNET_NAME " is not installed");
        return -ENOENT;
    }
    if (read_init_pid(r, deadline) <= 0) {
        snprintf(reason, size, "the sandbox did not start");
        return -ESRCH;
    }
    /* Only once init runs: bwrap configures the namespace's loopback
     * device while it builds the sandbox, and slirp4netns configuring its
     * device at the same moment makes bwrap's request fail. */
    err = recv_netns(r, deadline, &fds[0]);
    if (err == -ESRCH) {
        snprintf(reason, size, "the sandbox did not start");
        return err;
    }
    if (err == 0)
        err = check_netns(fds[0]);
    if (err < 0) {
        snprintf(reason, size, "its network namespace did not come from init: %s", strerror(-err));
        goto out;
    }
    /* The namespace's owner, not init's user namespace of the moment:
     * bwrap nests another one (--disable-userns), which holds no
     * capability over the network namespace. */
    fds[1] = ioctl(fds[0], NS_GET_USERNS);
    if (fds[1] < 0) {
        err = -errno;
        snprintf(reason, size, "its user namespace cannot be opened: %s", strerror(-err));
        goto out;
    }
    (void)fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    err = make_pipe(&ready_r, &fds[2]);
    if (err == 0) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
            err = -errno;
        else {
            fds[3] = p[0];
            r->net_exit_fd = p[1];
        }
    }
    root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (err == 0 && root < 0)
        err = -errno;
    if (err < 0) {
        snprintf(reason, size, "%s", strerror(-err));
        goto out;
    }
    snprintf(arg_ready, sizeof(arg_ready), "--ready-fd=%d", NET_FD_READY);
    snprintf(arg_exit, sizeof(arg_exit), "--exit-fd=%d", NET_FD_EXIT);
    snprintf(arg_userns, sizeof(arg_userns), "--userns-path=/proc/self/fd/%d", NET_FD_USERNS);
    snprintf(arg_netns, sizeof(arg_netns), "/proc/self/fd/%d", NET_FD_NETNS);
    /* --disable-host-loopback: no gateway alias for the host's loopback.
     * It parses the sandbox's packets, so --enable-seccomp filters its
     * system calls, and it runs without privilege: as a workspace's uid,
     * or with --enable-sandbox (an empty mount namespace, capabilities
     * dropped) when it must run as root. That option needs root: it
     * switches to gid 0 in the namespace it makes. */
    const char *argv[16];
    size_t argc = 0;
    argv[argc++] = tool;
    argv[argc++] = "--configure";
    argv[argc++] = NET_MTU;
    argv[argc++] = "--disable-host-loopback";
    argv[argc++] = "--enable-seccomp";
    if (r->net_uid == 0 && geteuid() == 0)
        argv[argc++] = "--enable-sandbox";
    argv[argc++] = arg_ready;
    argv[argc++] = arg_exit;
    argv[argc++] = arg_userns;
    argv[argc++] = "--netns-type=path";
    argv[argc++] = arg_netns;
    argv[argc++] = NET_TAP;
    argv[argc] = NULL;
    const char *const envp[] = {NULL};
    /* fds land at NET_FD_NETNS... in this order. */
    struct ws_spawn_opts so = {
        .argv = argv,
        .envp = envp,
        .cwd_fd = root,
        .stdin_mode = WS_SPAWN_STDIN_NULL,
        .output_null = true,
        .keep_fds = fds,
        .n_keep_fds = NET_FD_COUNT,
    };
    if (r->net_uid != 0) {
        so.run_as.set = true;
        so.run_as.uid = r->net_uid;
        so.run_as.gid = r->net_gid;
    }
    err = ws_spawn(&so, &r->net);
    if (err < 0) {
        snprintf(reason, size, WS_USERNET_NAME " cannot be started: %s", strerror(-err));
        goto out;
    }
    ws_close_fd(&fds[2]);
    ws_close_fd(&fds[3]);
    /* "1" on the ready pipe; EOF means it exited first. */
    c = 0;
    while (wait_readable(ready_r, deadline)) {
        ssize_t n = WS_RETRY_EINTR(read(ready_r, &c, 1));
        if (n < 0 && errno == EAGAIN)
            continue;
        break;
    }
    if (c != '1') {
        err = -EIO;
        snprintf(reason, size, WS_USERNET_NAME " %s",
                 ws_mono_ms() >= deadline ? "did not come up in time" : "failed to start");
        goto out;
    }
    err = 0;
out:
    for (int i = 0; i < NET_FD_COUNT; i++)
        ws_close_fd(&fds[i]);
    ws_close_fd(&ready_r);
    ws_close_fd(&root);
    return err;
}

/* Hands init the outcome: "1" lets the command start; anything else (a
 * "0" and the reason) makes init refuse to. */
static void net_go(struct run *r, bool ok, const char *reason)
{
    char buf[NET_REASON_MAX + 8];
    int n = ok ? snprintf(buf, sizeof(buf), "1") : snprintf(buf, sizeof(buf), "0%s", reason);

    /* Without init there is no reader (the spawn failed): nothing to say. */
    if (n > 0 && r->net_go_fd >= 0 && r->init_pid > 0)
        (void)!send(r->net_go_fd, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1,
                    MSG_NOSIGNAL);
    ws_close_fd(&r->net_go_fd);
}

static void hook_spawned(void *arg)
{
    struct run *r = arg;

    for (size_t i = 0; i < r->n_child_fds; i++)
        ws_close_fd(&r->child_fds[i]);
    r->n_child_fds = 0;
    if (r->network) {
        /* Once bwrap built the sandbox, its network comes up: init waits
         * for it. A failed spawn shows here as no pid: nothing is started. */
        char reason[NET_REASON_MAX] = "";
        int err = net_start(r, ws_mono_ms() + NET_WAIT_MS, reason, sizeof(reason));
        if (err < 0)
            net_stop(r);
        net_go(r, err == 0, reason);
    }
}

/* The tree is being SIGKILLed: slirp4netns is not in it under every tree
 * mechanism, so it is ended here too (reaped when the command ends). */
static void hook_kill(void *arg)
{
    struct run *r = arg;

    if (r->net)
        (void)pidfd_send_signal(ws_child_pidfd(r->net), SIGKILL, NULL, 0);
}

static void hook_free(void *arg)
{
    run_free(arg);
}

/* An O_PATH fd on a bind's source, refusing a symlink anywhere on the way
 * (the path was canonical at Open: a link now means it was swapped). */
static int open_bind(const char *path, int *ret)
{
    struct open_how how = {
        .flags = O_PATH | O_CLOEXEC,
        .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));

    if (fd < 0)
        return errno == ELOOP || errno == ENOENT || errno == ENOTDIR ? -ESTALE : -errno;
    *ret = fd;
    return 0;
}

/* A sealed memfd holding `text`, at offset 0 (bwrap reads it from there). */
static int data_fd(const char *name, const char *text, int *ret)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    int err;

    if (fd < 0)
        return -errno;
    err = ws_pwrite_all(fd, text, strlen(text), 0);
    if (err == 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
        err = -errno;
    if (err < 0) {
        close(fd);
        return err;
    }
    *ret = fd;
    return 0;
}

/* With a workspace uid the sandbox's /etc/passwd and /etc/group name that
 * uid and group alone ("workspace", home /workspace): a command can look
 * itself up (getpwuid, id, whoami) and learns no host account. No other
 * uid is mapped in its user namespace, so no other account could be used
 * there anyway (a chown to one is EINVAL). */
static int add_accounts(struct run *r, const struct ws_sandbox_spec *spec)
{
    char text[256], num[16];
    static const char *const dest[2] = {"/etc/passwd", "/etc/group"};

    for (int i = 0; i < 2; i++) {
        int err;

        if (i == 0)
            snprintf(text, sizeof(text), "workspace:x:%u:%u:workspace:%s:/bin/sh\n",
                     (unsigned)spec->uid, (unsigned)spec->gid, WS_SANDBOX_WORKSPACE);
        else
            snprintf(text, sizeof(text), "workspace:x:%u:\n", (unsigned)spec->gid);
        err = data_fd(i == 0 ? "ws-passwd" : "ws-group", text, &r->child_fds[r->n_child_fds]);
        if (err < 0)
            return err;
        snprintf(num, sizeof(num), "%zu", FD_SECCOMP + r->n_child_fds);
        r->n_child_fds++;
        add3(r, "--ro-bind-data", num, dest[i]);
    }
    return 0;
}

int ws_sandbox_wrap(struct ws_sandbox *sb, const struct ws_sandbox_spec *spec,
                    struct ws_proc_wrapper *ret)
{
    const char *bwrap = ws_probe_bwrap_path();
    const char *init = ws_probe_sandbox_init_path();
    char buf[PATH_MAX + 64], num[16];
    struct run *r;
    int err;

    if (!spec || !spec->workspace_dir ||
        (!spec->agent && (!spec->argv || !spec->argv[0] || spec->argv[0][0] != '/')) ||
        (spec->agent && spec->channel_fd < 0))
        return -EINVAL;
    /* Fail closed: no bwrap or no init means no sandbox, never less; and
     * no user-mode network means no sandbox with network (never one with
     * the host's). A box needs its agent and the agent's init. */
    const char *agent = ws_probe_agent_path(), *dinit = ws_probe_inbox_init_path();
    if (!bwrap || (!spec->agent && !init) || (spec->network && !ws_probe_usernet_path()) ||
        (spec->agent && (!agent || !dinit)))
        return -ENOENT;
    /* The copies a workspace's uid can reach, once the originals are
     * known to be still installed. */
    if (spec->agent && sb->agent[0])
        agent = sb->agent;
    if (spec->agent && sb->dinit[0])
        dinit = sb->dinit;
    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    for (size_t i = 0; i < sizeof(r->child_fds) / sizeof(r->child_fds[0]); i++)
        r->child_fds[i] = -1;
    r->n_child_fds = 3;
    r->info_fd = r->status_fd = -1;
    r->net_go_fd = r->net_exit_fd = -1;
    r->network = spec->network;
    r->net_uid = spec->uid;
    r->net_gid = spec->gid;
    r->sb = sb;
    r->group = group_get(sb, spec->workspace_id, &spec->limits);
    if (r->group)
        r->oom_kills = ws_limits_group_oom_kills(r->group);
    /* Fail closed: every cap the workspace has is in force, or nothing
     * runs (a host whose cgroups changed since the Open). */
    unsigned wanted = limits_wanted(&spec->limits);
    if (wanted && (!r->group || (ws_limits_group_enforced(r->group) & wanted) != wanted)) {
        err = -EOPNOTSUPP;
        goto fail;
    }

    err = ws_seccomp_fd(sb->seccomp);
    if (err < 0)
        goto fail;
    r->child_fds[0] = err;
    err = make_pipe(&r->info_fd, &r->child_fds[1]);
    if (err < 0)
        goto fail;
    err = make_pipe(&r->status_fd, &r->child_fds[2]);
    if (err < 0)
        goto fail;
    if (spec->network) {
        /* init's end is blocking (it reads to the end), ours is not. */
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
            err = -errno;
            goto fail;
        }
        r->net_go_fd = sv[0];
        r->child_fds[3] = sv[1];
        r->n_child_fds = 4;
        if (fcntl(r->net_go_fd, F_SETFL, O_NONBLOCK) < 0) {
            err = -errno;
            goto fail;
        }
    }
    /* A box: the agent's channel, after the fixed fds. */
    char channel_num[16] = "";
    if (spec->agent) {
        int fd = fcntl(spec->channel_fd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0) {
            err = -errno;
            goto fail;
        }
        snprintf(channel_num, sizeof(channel_num), "%zu", FD_SECCOMP + r->n_child_fds);
        r->child_fds[r->n_child_fds++] = fd;
    }

    add(r, bwrap);
    /* --unshare-user explicitly: --unshare-all only tries it, and a
     * sandbox without its own user namespace is not the one asked for.
     * The network namespace is the sandbox's own with network too (never
     * --share-net: the host's loopback holds the control plane). */
    add2(r, "--unshare-all", "--unshare-user");
    add(r, "--unshare-net");
    add(r, "--disable-userns");
    add2(r, "--die-with-parent", "--new-session");
    add(r, "--as-pid-1");
    add2(r, "--cap-drop", "ALL");
    add2(r, "--hostname", "workspace");
    /* The workspace's uid is the sandbox's too: bwrap, spawned as it,
     * maps it alone, so inside and out a command is that uid, not a root
     * without capabilities that tools would take for root. */
    if (spec->uid != 0) {
        snprintf(num, sizeof(num), "%u", (unsigned)spec->uid);
        add2(r, "--uid", num);
        snprintf(num, sizeof(num), "%u", (unsigned)spec->gid);
        add2(r, "--gid", num);
    }
    add3(r, "--ro-bind", "/usr", "/usr");
    for (size_t i = 0; i < N_ROOT_DIRS; i++) {
        const struct root_entry *e = &sb->roots[i];
        snprintf(buf, sizeof(buf), "/%s", root_dirs[i]);
        if (!e->present)
            continue;
        if (e->is_link)
            add3(r, "--symlink", e->target, buf);
        else
            add3(r, "--ro-bind", buf, buf);
    }
    if (sb->etc[0]) {
        add3(r, "--ro-bind", sb->etc, "/etc");
    } else {
        /* No snapshot (a caller without a directory for it): a bind per
         * entry, slower, the same view. */
        for (size_t i = 0; i < WS_ELEMENTSOF(etc_entries); i++) {
            snprintf(buf, sizeof(buf), "/etc/%s", etc_entries[i]);
            add3(r, "--ro-bind-try", buf, buf);
        }
    }
    if (spec->uid != 0) {
        err = add_accounts(r, spec);
        if (err < 0)
            goto fail;
    }
    if (spec->network && sb->resolv[0])
        add3(r, "--ro-bind", sb->resolv, ETC_RESOLV);
    else if (spec->network)
        add3(r, "--ro-bind-try", ETC_RESOLV, ETC_RESOLV);
    add2(r, "--proc", "/proc");
    add2(r, "--dev", "/dev");
    snprintf(num, sizeof(num), "%llu", WS_SANDBOX_TMP_BYTES);
    add2(r, "--size", num);
    add2(r, "--tmpfs", "/tmp");
    add3(r, "--bind", spec->workspace_dir, WS_SANDBOX_WORKSPACE);
    /* Extra binds go by fd, opened now without following any symlink: bwrap
     * would resolve a path on the host when it mounts, and a sandbox that
     * can write a bind's parent could have swapped a component for a link
     * to the server's state since Open checked it. */
    if (spec->n_rw > WS_SANDBOX_BINDS_MAX || spec->n_ro > WS_SANDBOX_BINDS_MAX) {
        err = -E2BIG;
        goto fail;
    }
    for (size_t k = 0; k < spec->n_rw + spec->n_ro; k++) {
        bool ro = k >= spec->n_rw;
        const char *path = ro ? spec->ro_paths[k - spec->n_rw] : spec->rw_paths[k];
        if (path[0] != '/' ||
            snprintf(buf, sizeof(buf), "%s%s", BIND_PREFIX, path) >= (int)sizeof(buf)) {
            err = path[0] != '/' ? -EINVAL : -ENAMETOOLONG;
            goto fail;
        }
        err = open_bind(path, &r->child_fds[r->n_child_fds]);
        if (err < 0)
            goto fail;
        snprintf(num, sizeof(num), "%zu", FD_SECCOMP + r->n_child_fds);
        r->n_child_fds++;
        add3(r, ro ? "--ro-bind-fd" : "--bind-fd", num, buf);
    }
    if (spec->agent) {
        add3(r, "--ro-bind", agent, WS_SANDBOX_AGENT_PATH);
        add3(r, "--ro-bind", dinit, WS_SANDBOX_AGENT_INIT_PATH);
    } else {
        add3(r, "--ro-bind", sb->init[0] ? sb->init : init, WS_SANDBOX_INIT_PATH);
    }
    /* After every bind: the root itself (bwrap's tmpfs) becomes read-only,
     * the mounts on it keep their own modes. */
    add2(r, "--remount-ro", "/");
    if (spec->agent || !spec->cwd || !spec->cwd[0] || strcmp(spec->cwd, ".") == 0)
        snprintf(buf, sizeof(buf), "%s", WS_SANDBOX_WORKSPACE);
    else if (snprintf(buf, sizeof(buf), "%s/%s", WS_SANDBOX_WORKSPACE, spec->cwd) >=
             (int)sizeof(buf)) {
        err = -ENAMETOOLONG;
        goto fail;
    }
    add2(r, "--chdir", buf);
    snprintf(num, sizeof(num), "%d", FD_SECCOMP);
    add2(r, "--seccomp", num);
    snprintf(num, sizeof(num), "%d", FD_INFO);
    add2(r, "--info-fd", num);
    /* Everything after this is the command: no user string is ever read
     * as one of bwrap's options. */
    add(r, "--");
    if (spec->agent) {
        /* The agent is the box's pid 1, for the box's life. */
        add(r, WS_SANDBOX_AGENT_PATH);
        add2(r, "--init", WS_SANDBOX_AGENT_INIT_PATH);
        add2(r, "--channel-fd", channel_num);
        if (spec->network) {
            snprintf(num, sizeof(num), "%d", FD_NET_GO);
            add2(r, "--wait-fd", num);
        }
        goto built;
    }
    add(r, WS_SANDBOX_INIT_PATH);
    if (spec->network) {
        snprintf(buf, sizeof(buf), "--wait-fd=%d", FD_NET_GO);
        add(r, buf);
    }
    snprintf(num, sizeof(num), "%d", FD_STATUS);
    add(r, num);
    /* The guard resolved the program on the host: one found in a bound
     * directory is at that bind's place inside. */
    const char *bound = NULL;
    for (size_t k = 0; k < spec->n_rw + spec->n_ro && !bound; k++) {
        const char *path = k < spec->n_rw ? spec->rw_paths[k] : spec->ro_paths[k - spec->n_rw];
        size_t len = strlen(path);
        if (strncmp(spec->argv[0], path, len) == 0 && spec->argv[0][len] == '/')
            bound = spec->argv[0];
    }
    if (bound && snprintf(buf, sizeof(buf), "%s%s", BIND_PREFIX, bound) >= (int)sizeof(buf)) {
        err = -ENAMETOOLONG;
        goto fail;
    }
    add(r, bound ? buf : spec->argv[0]);
    for (const char *const *a = spec->argv + 1; *a; a++)
        add(r, *a);
built:
    if (r->oom) {
        err = -ENOMEM;
        goto fail;
    }

    *ret = (struct ws_proc_wrapper){
        .argv = (const char *const *)r->argv,
        .keep_fds = r->child_fds,
        .n_keep_fds = r->n_child_fds,
        .pty_noctty = spec->pty,
        .signal = hook_signal,
        .kill = hook_kill,
        .exited = hook_exited,
        .enter = hook_enter,
        .leave = hook_leave,
        .spawned = hook_spawned,
        .free = hook_free,
        .arg = r,
    };
    /* cgroup v2: bwrap starts inside the workspace's group (the thread
     * cannot be moved there), and everything in the sandbox with it. */
    if (r->group && ws_limits_group_cgroup_fd(r->group) >= 0) {
        ret->into_cgroup = true;
        ret->cgroup_fd = ws_limits_group_cgroup_fd(r->group);
    }
    return 0;

fail:
    run_free(r);
    return err;
}

void ws_sandbox_spawned(struct ws_proc_wrapper *w)
{
    struct run *r = w ? w->arg : NULL;

    if (!r)
        return;
    hook_spawned(r);
    w->argv = NULL;
    w->keep_fds = NULL;
    w->n_keep_fds = 0;
}

static void box_cmd_free(void *arg);

void ws_sandbox_discard(struct ws_proc_wrapper *w)
{
    if (!w || !w->arg)
        return;
    /* A command through a box frees itself; a sandbox's own is a run. */
    if (w->free == box_cmd_free)
        box_cmd_free(w->arg);
    else
        run_free(w->arg);
    w->arg = NULL;
}

void ws_sandbox_backend_version(char *buf, size_t size)
{
    const char *bwrap = ws_probe_bwrap_path();
    char *const argv[] = {"bwrap", "--version", NULL};
    char *const envp[] = {NULL};
    posix_spawn_file_actions_t fa;
    int p[2];
    pid_t pid;
    char out[128];
    size_t have = 0;

    if (size)
        buf[0] = '\0';
    if (!bwrap || size == 0 || pipe2(p, O_CLOEXEC) < 0)
        return;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawn(&pid, bwrap, &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (rc == 0) {
        ssize_t n = ws_read_all(p[0], out, sizeof(out) - 1);
        have = n > 0 ? (size_t)n : 0;
        (void)WS_RETRY_EINTR(waitpid(pid, NULL, 0));
    }
    close(p[0]);
    out[have] = '\0';
    /* "bubblewrap 0.8.0\n" */
    char *v = strchr(out, ' ');
    if (v) {
        v[strcspn(v, "\n")] = '\0';
        snprintf(buf, size, "%s", v + 1);
    }
}

/* ---- agent mode: one box per workspace ---- */

/* A workspace's box: one bubblewrap for the workspace's life, the agent its
 * pid 1, every command started through the agent. */
struct box {
    struct ws_sandbox *sb;
    char id[WS_SANDBOX_ID_MAX + 1];
    struct ws_proc_wrapper w; /* its run: network, group, pipes */
    struct ws_child *bwrap;
    int agent_pidfd; /* the agent (bwrap's child, pid 1 inside); -1: unknown */
    struct ws_agent *agent;
    bool failed; /* the agent was lost: refused until reset */
    char why[WS_AGENT_WHY_MAX];
    struct box *next;
};

/* The agent was lost (it died, or broke the protocol): the box is failed
 * until the workspace is resolved again. */
static void box_lost(void *arg, const char *why)
{
    struct box *b = arg;

    pthread_mutex_lock(&b->sb->boxes_lock);
    b->failed = true;
    snprintf(b->why, sizeof(b->why), "%s", why);
    pthread_mutex_unlock(&b->sb->boxes_lock);
}

/* Ends a box no longer listed: the agent (which kills every process in
 * the box), bwrap (the box's pid namespace goes with it), the network. */
static void box_free(struct box *b)
{
    if (!b)
        return;
    ws_agent_free(b->agent);
    if (b->w.kill)
        b->w.kill(b->w.arg);
    ws_child_free(b->bwrap);
    /* Its pid 1 exits only once every process of the box's namespace is
     * gone: then the group it leaves behind can be removed. */
    if (b->agent_pidfd >= 0) {
        struct pollfd p = {.fd = b->agent_pidfd, .events = POLLIN};
        (void)WS_RETRY_EINTR(poll(&p, 1, WS_PROC_SETTLE_MS));
        ws_close_fd(&b->agent_pidfd);
    }
    ws_sandbox_discard(&b->w);
    free(b);
}

static void boxes_stop_all(struct ws_sandbox *sb)
{
    pthread_mutex_lock(&sb->boxes_lock);
    struct box *list = sb->boxes;
    sb->boxes = NULL;
    pthread_mutex_unlock(&sb->boxes_lock);
    while (list) {
        struct box *next = list->next;
        box_free(list);
        list = next;
    }
}

void ws_sandbox_box_reset(struct ws_sandbox *sb, const char *workspace_id)
{
    struct box *found = NULL;

    pthread_mutex_lock(&sb->boxes_lock);
    for (struct box **pp = &sb->boxes; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->id, workspace_id) == 0) {
            found = *pp;
            *pp = found->next;
            break;
        }
    pthread_mutex_unlock(&sb->boxes_lock);
    box_free(found);
}

bool ws_sandbox_box_failed(struct ws_sandbox *sb, const char *workspace_id, char *why, size_t size)
{
    bool failed = false;

    pthread_mutex_lock(&sb->boxes_lock);
    for (struct box *b = sb->boxes; b; b = b->next)
        if (strcmp(b->id, workspace_id) == 0 && b->failed) {
            failed = true;
            if (why)
                snprintf(why, size, "%s", b->why);
        }
    pthread_mutex_unlock(&sb->boxes_lock);
    return failed;
}

/* Starts a box for spec's workspace, as ra (the identity and limits its
 * commands would have had); boxes_lock held. */
static int box_start(struct ws_sandbox *sb, const struct ws_sandbox_spec *spec,
                     const struct ws_run_as *ra, struct box **ret, char *why, size_t why_size)
{
    struct box *b = calloc(1, sizeof(*b));
    int sv[2] = {-1, -1}, root = -1, err;

    if (!b)
        return -ENOMEM;
    b->sb = sb;
    b->agent_pidfd = -1;
    snprintf(b->id, sizeof(b->id), "%s", spec->workspace_id);
    if (!sb->pump) {
        err = ws_pump_new(&sb->pump);
        if (err < 0) {
            snprintf(why, why_size, "cannot start the agents' pump: %s", strerror(-err));
            goto fail;
        }
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        err = -errno;
        snprintf(why, why_size, "cannot make the agent's channel: %s", strerror(-err));
        goto fail;
    }
    struct ws_sandbox_spec s = *spec;
    s.agent = true;
    s.channel_fd = sv[1];
    s.argv = NULL;
    s.cwd = NULL;
    s.pty = false;
    err = ws_sandbox_wrap(sb, &s, &b->w);
    ws_close_fd(&sv[1]);
    if (err < 0) {
        snprintf(why, why_size, "the box cannot be made: %s", strerror(-err));
        goto fail;
    }
    root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) {
        err = -errno;
        snprintf(why, why_size, "%s", strerror(-err));
        goto fail;
    }
    /* The agent needs no environment: each command brings its own. */
    const char *const envp[] = {NULL};
    struct ws_spawn_opts so = {
        .argv = b->w.argv,
        .envp = envp,
        .cwd_fd = root,
        .stdin_mode = WS_SPAWN_STDIN_NULL,
        .output_null = true,
        .keep_fds = b->w.keep_fds,
        .n_keep_fds = b->w.n_keep_fds,
    };
    if (ra)
        so.run_as = *ra;
    if (b->w.into_cgroup) {
        so.run_as.into_cgroup = true;
        so.run_as.cgroup_fd = b->w.cgroup_fd;
    }
    err = b->w.enter ? b->w.enter(b->w.arg) : 0;
    if (err == 0) {
        err = ws_spawn(&so, &b->bwrap);
        if (b->w.leave)
            b->w.leave(b->w.arg);
    }
    /* The box's ends of its pipes close; with network, it comes up now. */
    struct run *run = b->w.arg;
    ws_sandbox_spawned(&b->w);
    if (err < 0) {
        snprintf(why, why_size, "the box cannot be started: %s", strerror(-err));
        goto fail;
    }
    pid_t agent_pid = read_init_pid(run, ws_mono_ms() + NET_WAIT_MS);
    if (agent_pid > 0)
        b->agent_pidfd = pidfd_open(agent_pid, 0);
    struct ws_agent_config cfg = {
        .pump = sb->pump,
        .fd = sv[0],
        .lost = box_lost,
        .arg = b,
    };
    sv[0] = -1; /* consumed */
    char awhy[WS_AGENT_WHY_MAX];
    err = ws_agent_new(&cfg, &b->agent, awhy, sizeof(awhy));
    if (err < 0) {
        snprintf(why, why_size, "the box's agent did not come up: %s", awhy);
        goto fail;
    }
    ws_close_fd(&root);
    *ret = b;
    return 0;

fail:
    ws_close_fd(&sv[0]);
    ws_close_fd(&sv[1]);
    ws_close_fd(&root);
    box_free(b);
    return err;
}

/* One command through a box, with the workspace's OOM kills told apart
 * (the agent in a sandbox cannot read the group's counter). */
struct box_cmd {
    struct ws_proc_wrapper inner;
    struct ws_limits_group *group; /* a reference; NULL: no caps */
    uint64_t oom_kills;
};

static int box_cmd_start(void *arg, struct ws_child *child, const int *fds, size_t n)
{
    struct box_cmd *bc = arg;
    return bc->inner.start(bc->inner.arg, child, fds, n);
}

static int box_cmd_signal(void *arg, struct ws_tree *tree, pid_t leader, int sig)
{
    struct box_cmd *bc = arg;
    return bc->inner.signal(bc->inner.arg, tree, leader, sig);
}

static void box_cmd_kill(void *arg)
{
    struct box_cmd *bc = arg;
    bc->inner.kill(bc->inner.arg);
}

static void box_cmd_exited(void *arg, struct ws_child_exit *e, enum ws_cause *ret_cause)
{
    struct box_cmd *bc = arg;

    bc->inner.exited(bc->inner.arg, e, ret_cause);
    if (!*ret_cause && e->signaled && e->signal == SIGKILL && bc->group &&
        ws_limits_group_oom_kills(bc->group) > bc->oom_kills)
        *ret_cause = WS_CAUSE_OOM;
}

static void box_cmd_free(void *arg)
{
    struct box_cmd *bc = arg;

    bc->inner.free(bc->inner.arg);
    if (bc->group)
        ws_limits_group_put(bc->group);
    free(bc);
}

int ws_sandbox_agent_wrap(struct ws_sandbox *sb, const struct ws_sandbox_spec *spec,
                          const struct ws_run_as *ra, const char *const *envp, uint64_t timeout_ms,
                          struct ws_proc_wrapper *ret, char *why, size_t why_size)
{
    char cwd[PATH_MAX], prog[PATH_MAX];
    struct box *b = NULL;
    int err = 0;

    if (!spec || !spec->argv || !spec->argv[0] || spec->argv[0][0] != '/' || !envp)
        return -EINVAL;
    /* Where the command is inside: its directory under /workspace, its
     * program under /mnt when the guard found it in a bound directory. */
    if (!spec->cwd || !spec->cwd[0] || strcmp(spec->cwd, ".") == 0)
        snprintf(cwd, sizeof(cwd), "%s", WS_SANDBOX_WORKSPACE);
    else if (snprintf(cwd, sizeof(cwd), "%s/%s", WS_SANDBOX_WORKSPACE, spec->cwd) >=
             (int)sizeof(cwd))
        return -ENAMETOOLONG;
    const char *program = spec->argv[0];
    for (size_t k = 0; k < spec->n_rw + spec->n_ro; k++) {
        const char *path = k < spec->n_rw ? spec->rw_paths[k] : spec->ro_paths[k - spec->n_rw];
        size_t len = strlen(path);
        if (strncmp(spec->argv[0], path, len) == 0 && spec->argv[0][len] == '/') {
            if (snprintf(prog, sizeof(prog), "%s%s", BIND_PREFIX, spec->argv[0]) >=
                (int)sizeof(prog))
                return -ENAMETOOLONG;
            program = prog;
            break;
        }
    }

    pthread_mutex_lock(&sb->boxes_lock);
    for (b = sb->boxes; b && strcmp(b->id, spec->workspace_id) != 0; b = b->next)
        ;
    if (b && b->failed) {
        snprintf(why, why_size,
                 "the workspace's box ended (%s); Resolve brings up a fresh one over the same "
                 "files",
                 b->why);
        err = -EPIPE;
    } else if (!b) {
        /* Made while the lock is held: two first commands make one box. */
        err = box_start(sb, spec, ra, &b, why, why_size);
        if (err == 0) {
            b->next = sb->boxes;
            sb->boxes = b;
        }
    }
    struct ws_agent *agent = err == 0 ? b->agent : NULL;
    pthread_mutex_unlock(&sb->boxes_lock);
    if (err < 0)
        return err;

    size_t n = 0;
    while (spec->argv[n])
        n++;
    const char **argv = calloc(n + 1, sizeof(*argv));
    struct box_cmd *bc = calloc(1, sizeof(*bc));
    if (!argv || !bc) {
        free(argv);
        free(bc);
        return -ENOMEM;
    }
    argv[0] = program;
    for (size_t i = 1; i < n; i++)
        argv[i] = spec->argv[i];
    /* The exec layer's own timeout acts first; this is the box's backstop
     * should the server's kill never arrive. */
    uint64_t backstop = timeout_ms ? timeout_ms + WS_EXEC_GRACE_MS_MAX + WS_PROC_SETTLE_MS : 0;
    struct ws_agent_command c = {
        .argv = argv,
        .envp = envp,
        .cwd = cwd,
        .timeout_ms = backstop,
        .pty = spec->pty,
    };
    err = ws_agent_wrap(agent, &c, &bc->inner);
    free(argv);
    if (err < 0) {
        free(bc);
        snprintf(why, why_size, "the box's agent cannot take the command: %s", strerror(-err));
        return err;
    }
    bc->group = group_get(sb, spec->workspace_id, &spec->limits);
    if (bc->group)
        bc->oom_kills = ws_limits_group_oom_kills(bc->group);
    *ret = (struct ws_proc_wrapper){
        .start = box_cmd_start,
        .signal = box_cmd_signal,
        .kill = box_cmd_kill,
        .exited = box_cmd_exited,
        .free = box_cmd_free,
        .arg = bc,
    };
    return 0;
}
