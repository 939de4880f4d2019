/*
 * escape_probe: run inside a local-sandbox command, tries each known way out and prints one
 * JSON object per check on stdout, nothing else:
 *
 *     {"check":"<name>","result":"<result>","detail":"<errno names or short text>"}
 *
 *     escape_probe [--planted PATH]... [--port N] [--unix PATH]... [--only NAME]
 *
 * The result is "blocked" (every attempt was refused), "succeeded" (every attempt did what it
 * tried), "mixed" (some of each) or "not-tried" (an attempt could not be made). The same binary
 * runs outside the sandbox as the control, which must see "succeeded": a refusal is only
 * evidence of the sandbox where the same attempt succeeds without it.
 *
 * Exit status 0 whatever the results (they are the data); 2 on a bad command line.
 * Every attempt that a seccomp filter could answer by killing runs in a forked child, so a
 * SIGSYS ends only that attempt and shows up as "killed by SIGSYS". Attempts that succeed are
 * undone (files unlinked, mounts detached, the parent released, the terminal restored), since
 * outside the sandbox they succeed on the host. A check never says blocked for an attempt it
 * could not make. See README.md.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/sched.h>
#include <linux/vm_sockets.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <linux/if_ether.h>
#include <termios.h>
#include <unistd.h>

#define DETAIL_MAX      1024 /* longer details end in "..." */
#define PATHS_MAX       64   /* --planted and --unix each */
#define PROC_FEW_PIDS   10   /* a sandbox shows fewer processes than this */
#define CONNECT_TIMEOUT 2    /* seconds */
#define UNIX_PATH_FIT   sizeof(((struct sockaddr_un *)0)->sun_path)

struct options {
    const char *planted[PATHS_MAX];
    int n_planted;
    const char *unix_paths[PATHS_MAX];
    int n_unix;
    int port; /* 0: none given */
};

/* The zero value is RESULT_NOT_TRIED, so a check that never decides is not blocked. */
enum result {
    RESULT_NOT_TRIED = 0,
    RESULT_BLOCKED,
    RESULT_SUCCEEDED,
    RESULT_MIXED,
};

static const char *const result_names[] = {
    [RESULT_NOT_TRIED] = "not-tried",
    [RESULT_BLOCKED] = "blocked",
    [RESULT_SUCCEEDED] = "succeeded",
    [RESULT_MIXED] = "mixed",
};

struct verdict {
    enum result result;
    char detail[DETAIL_MAX];
    size_t len;
};

/* The attempts of a check that is made of several. */
struct tally {
    int ok;
    int refused;
    int untried;
};

/* Appends to the detail, space-separated; a truncated detail ends in "...". */
static __attribute__((format(printf, 2, 3))) void note(struct verdict *v, const char *fmt, ...)
{
    size_t room = sizeof(v->detail) - v->len;
    if (room <= 4)
        return;
    if (v->len > 0) {
        v->detail[v->len++] = ' ';
        room--;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(v->detail + v->len, room, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= room) {
        memcpy(v->detail + sizeof(v->detail) - 4, "...", 4);
        v->len = sizeof(v->detail) - 1;
    } else {
        v->len += (size_t)n;
    }
}

static const char *errname(int err)
{
    static char buf[16];
    const char *name = strerrorname_np(err);
    if (name)
        return name;
    snprintf(buf, sizeof(buf), "E%d", err);
    return buf;
}

/* Writes the whole buffer to stdout; a failing stdout leaves nothing to report to. */
static void out(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(STDOUT_FILENO, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            exit(0);
        buf += n;
        len -= (size_t)n;
    }
}

/* One JSON line; detail bytes other than printable ASCII are \u-escaped. */
static void emit(const char *check, const struct verdict *v)
{
    char line[64 + DETAIL_MAX * 6];
    size_t n =
        (size_t)snprintf(line, sizeof(line), "{\"check\":\"%s\",\"result\":\"%s\",\"detail\":\"",
                         check, result_names[v->result]);
    for (const unsigned char *p = (const unsigned char *)v->detail; *p; p++) {
        if (*p == '"' || *p == '\\') {
            line[n++] = '\\';
            line[n++] = (char)*p;
        } else if (*p < 0x20 || *p >= 0x7f) {
            n += (size_t)snprintf(line + n, 7, "\\u%04x", *p);
        } else {
            line[n++] = (char)*p;
        }
    }
    memcpy(line + n, "\"}\n", 3);
    out(line, n + 3);
}

/*
 * Runs fn(arg) in a forked child. fn returns >= 0 or -1 with errno. On return 0, *ret_val and
 * *ret_err hold its result (errno 0 on success), or *ret_sig the signal that killed the child.
 * Returns -errno if the child could not be run.
 */
typedef long (*trial_fn)(const void *arg);

static int trial(trial_fn fn, const void *arg, long *ret_val, int *ret_err, int *ret_sig)
{
    struct {
        long val;
        int err;
    } res = {0, 0};
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        close(p[0]);
        close(p[1]);
        return -err;
    }
    if (pid == 0) {
        close(p[0]);
        errno = 0;
        res.val = fn(arg);
        res.err = res.val < 0 ? errno : 0;
        _exit(write(p[1], &res, sizeof(res)) == (ssize_t)sizeof(res) ? 0 : 1);
    }
    close(p[1]);
    ssize_t n;
    do
        n = read(p[0], &res, sizeof(res));
    while (n < 0 && errno == EINTR);
    close(p[0]);
    int status;
    while (waitpid(pid, &status, __WALL) < 0) {
        if (errno != EINTR)
            return -errno;
    }
    *ret_sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    if (*ret_sig == 0 && n != (ssize_t)sizeof(res))
        return -EIO;
    *ret_val = res.val;
    *ret_err = res.err;
    return 0;
}

/* Runs a trial, notes "label:OUTCOME" and counts it: a kill or an errno is a refusal. */
static void attempt(struct verdict *v, struct tally *t, const char *label, trial_fn fn,
                    const void *arg)
{
    long val = 0;
    int err = 0, sig = 0;
    int r = trial(fn, arg, &val, &err, &sig);
    if (r < 0) {
        note(v, "%s:not-tried(%s)", label, errname(-r));
        t->untried++;
    } else if (sig) {
        note(v, "%s:killed-by-SIG%s", label, sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
        t->refused++;
    } else if (err) {
        note(v, "%s:%s", label, errname(err));
        t->refused++;
    } else {
        note(v, "%s:ok", label);
        t->ok++;
    }
}

/* Blocked only when every attempt was made and refused; succeeded only when every attempt was
 * made and did what it tried. */
static void settle(struct verdict *v, const struct tally *t)
{
    if (t->untried > 0 || t->ok + t->refused == 0)
        v->result = RESULT_NOT_TRIED;
    else if (t->ok == 0)
        v->result = RESULT_BLOCKED;
    else if (t->refused == 0)
        v->result = RESULT_SUCCEEDED;
    else
        v->result = RESULT_MIXED;
}

/* For checks that only look: whether what they looked for was hidden. */
static void look(struct verdict *v, bool hidden)
{
    v->result = hidden ? RESULT_BLOCKED : RESULT_SUCCEEDED;
}

/* Reads a whole small file into buf (NUL-terminated); returns its length or -errno. */
static ssize_t slurp(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = 0;
    while (len + 1 < size) {
        ssize_t n = read(fd, buf + len, size - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int err = errno;
            close(fd);
            return -err;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    return (ssize_t)len;
}

/* Finds "Field:\t<value>" in /proc/self/status; returns 0 or -errno (-ENOENT: no such field). */
static int status_field(const char *field, char *ret_value, size_t size)
{
    char buf[8192];
    ssize_t n = slurp("/proc/self/status", buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    size_t flen = strlen(field);
    for (char *line = buf; *line;) {
        char *next = line + strcspn(line, "\n");
        if (*next)
            next++;
        if (strncmp(line, field, flen) != 0 || line[flen] != ':') {
            line = next;
            continue;
        }
        char *val = line + flen + 1;
        val += strspn(val, " \t");
        size_t vlen = strcspn(val, "\n");
        if (vlen >= size)
            vlen = size - 1;
        memcpy(ret_value, val, vlen);
        ret_value[vlen] = '\0';
        return 0;
    }
    return -ENOENT;
}

/* ---- write_outside ---------------------------------------------------------------------- */

/* ".." is the working directory's parent: /workspace/.. in the sandbox, the directory that
 * holds the workspaces outside it (an absolute /workspace does not exist there). */
static void check_write_outside(const struct options *o, struct verdict *v)
{
    static const char *const dirs[] = {"/", "/usr", "/etc", ".."};
    struct tally t = {0, 0, 0};
    (void)o;
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        char path[256];
        snprintf(path, sizeof(path), "%s/.escape_probe.%d", strcmp(dirs[i], "/") ? dirs[i] : "",
                 (int)getpid());
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            note(v, "%s:%s", dirs[i], errname(errno));
            t.refused++;
            continue;
        }
        close(fd);
        t.ok++;
        note(v, "%s:created", dirs[i]);
        if (unlink(path) < 0)
            note(v, "(unlink %s)", errname(errno));
    }
    settle(v, &t);
}

/* ---- read_planted ----------------------------------------------------------------------- */

static void check_read_planted(const struct options *o, struct verdict *v)
{
    struct tally t = {0, 0, 0};
    if (o->n_planted == 0)
        note(v, "not tried: no --planted");
    for (int i = 0; i < o->n_planted; i++) {
        int fd = open(o->planted[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            note(v, "%s:%s", o->planted[i], errname(errno));
            t.refused++;
            continue;
        }
        char c;
        ssize_t n = read(fd, &c, 1);
        close(fd);
        t.ok++;
        note(v, "%s:%s", o->planted[i], n >= 0 ? "readable" : "opened");
    }
    settle(v, &t);
}

/* ---- read_home -------------------------------------------------------------------------- */

static void check_read_home(const struct options *o, struct verdict *v)
{
    static const char *const dirs[] = {"/root", "/home"};
    bool seen = false;
    (void)o;
    for (size_t i = 0; i < 2; i++) {
        DIR *d = opendir(dirs[i]);
        if (!d) {
            note(v, "%s:%s", dirs[i], errname(errno));
            continue;
        }
        int count = 0;
        struct dirent *e;
        note(v, "%s:[", dirs[i]);
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            note(v, "%s", e->d_name);
            count++;
        }
        closedir(d);
        note(v, "]");
        if (count > 0)
            seen = true;
    }
    look(v, !seen);
}

/* ---- proc_host -------------------------------------------------------------------------- */

static void check_proc_host(const struct options *o, struct verdict *v)
{
    (void)o;
    DIR *d = opendir("/proc");
    if (!d) {
        look(v, true);
        note(v, "/proc:%s", errname(errno));
        return;
    }
    int count = 0;
    long max = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end != '\0' || pid <= 0)
            continue;
        count++;
        if (pid > max)
            max = pid;
    }
    closedir(d);
    char cmd[128];
    ssize_t n = slurp("/proc/1/cmdline", cmd, sizeof(cmd));
    if (n < 0) {
        snprintf(cmd, sizeof(cmd), "(%s)", errname((int)-n));
    } else {
        for (ssize_t i = 0; i < n; i++)
            if (cmd[i] == '\0')
                cmd[i] = ' ';
    }
    /* argv[0] of pid 1 names the sandbox init, e.g. /.workspaced-init, or
     * in agent mode the box's agent, /.workspaced-agent */
    char arg0[128];
    snprintf(arg0, sizeof(arg0), "%.*s", (int)strcspn(cmd, " "), cmd);
    bool init_is_ours =
        strstr(arg0, "workspaced") && (strstr(arg0, "init") || strstr(arg0, "agent"));
    look(v, count < PROC_FEW_PIDS && init_is_ours);
    note(v, "pids=%d max=%ld pid1=%s", count, max, cmd);
}

/* ---- tcp_loopback ----------------------------------------------------------------------- */

static long try_tcp(const void *arg)
{
    int port = *(const int *)arg;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {.tv_sec = CONNECT_TIMEOUT};
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return connect(fd, (struct sockaddr *)&sa, sizeof(sa));
}

static void check_tcp_loopback(const struct options *o, struct verdict *v)
{
    if (o->port == 0) {
        note(v, "not tried: no --port");
        return;
    }
    char label[32];
    struct tally t = {0, 0, 0};
    snprintf(label, sizeof(label), "127.0.0.1:%d", o->port);
    attempt(v, &t, label, try_tcp, &o->port);
    settle(v, &t);
}

/* ---- unix_socket ------------------------------------------------------------------------ */

static long try_unix(const void *arg)
{
    const char *path = arg;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char via[sizeof(sa.sun_path)];
    if (strlen(path) >= sizeof(sa.sun_path)) {
        /* Too long for sun_path (check_unix_socket made sure the name fits): reach it through
         * its directory's fd instead. */
        const char *slash = strrchr(path, '/');
        char dir[4096];
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
        int dfd = open(dir[0] ? dir : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
            return -1;
        snprintf(via, sizeof(via), "/proc/self/fd/%d/%s", dfd, slash + 1);
        path = via;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    return connect(fd, (struct sockaddr *)&sa, sizeof(sa));
}

/* The caller names every socket, the docker daemon's included: only it knows which of them
 * exist on the host, and a socket that is not there proves nothing when it is not reached. */
static void check_unix_socket(const struct options *o, struct verdict *v)
{
    struct tally t = {0, 0, 0};
    if (o->n_unix == 0)
        note(v, "not tried: no --unix");
    for (int i = 0; i < o->n_unix; i++) {
        const char *path = o->unix_paths[i];
        const char *slash = strrchr(path, '/');
        /* A path too long even through /proc/self/fd/N/NAME is our limit, not the sandbox's. */
        if (strlen(path) >= UNIX_PATH_FIT &&
            (!slash || strlen(slash) + 24 >= UNIX_PATH_FIT || slash - path >= 4096)) {
            note(v, "%s:not-tried(too long)", path);
            t.untried++;
        } else {
            attempt(v, &t, path, try_unix, path);
        }
    }
    settle(v, &t);
}

/* ---- interfaces ------------------------------------------------------------------------- */

static void check_interfaces(const struct options *o, struct verdict *v)
{
    (void)o;
    char names[64][IF_NAMESIZE + 1];
    int n = 0;
    struct ifaddrs *ifa;
    if (getifaddrs(&ifa) == 0) {
        for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
            int j = 0;
            while (j < n && strcmp(names[j], i->ifa_name) != 0)
                j++;
            if (j == n && n < 64)
                snprintf(names[n++], sizeof(names[0]), "%s", i->ifa_name);
        }
        freeifaddrs(ifa);
    } else {
        /* Netlink may be filtered; /proc/net/dev shows the same namespace. */
        note(v, "getifaddrs:%s", errname(errno));
        char buf[8192];
        ssize_t len = slurp("/proc/net/dev", buf, sizeof(buf));
        if (len < 0) {
            note(v, "/proc/net/dev:%s", errname((int)-len));
            look(v, true);
            return;
        }
        char *line = strchr(buf, '\n');
        line = line ? strchr(line + 1, '\n') : NULL; /* two header lines */
        while (line && *++line && n < 64) {
            line += strspn(line, " ");
            size_t l = strcspn(line, ":");
            snprintf(names[n++], sizeof(names[0]), "%.*s", (int)l, line);
            line = strchr(line, '\n');
        }
    }
    bool only_lo = true;
    for (int i = 0; i < n; i++) {
        note(v, "%s", names[i]);
        if (strcmp(names[i], "lo") != 0)
            only_lo = false;
    }
    if (n == 0)
        note(v, "(none)");
    look(v, only_lo);
}

/* ---- ptrace_parent ---------------------------------------------------------------------- */

/* PTRACE_SEIZE passes the same permission checks as PTRACE_ATTACH but does not stop the
 * parent; the trial child exits right after, which detaches it. */
static long try_seize(const void *arg)
{
    return ptrace(PTRACE_SEIZE, *(const pid_t *)arg, 0, 0);
}

static long try_traceme(const void *arg)
{
    (void)arg;
    return ptrace(PTRACE_TRACEME, 0, 0, 0);
}

static void check_ptrace_parent(const struct options *o, struct verdict *v)
{
    (void)o;
    pid_t parent = getppid();
    char label[48];
    struct tally t = {0, 0, 0};
    snprintf(label, sizeof(label), "seize(ppid=%d)", (int)parent);
    attempt(v, &t, label, try_seize, &parent);
    attempt(v, &t, "traceme", try_traceme, NULL);
    settle(v, &t);
}

/* ---- unshare_user ----------------------------------------------------------------------- */

static long try_unshare_user(const void *arg)
{
    (void)arg;
    return unshare(CLONE_NEWUSER);
}

/* Without CLONE_VM the new child runs on a copy of this stack, as after fork(). */
static long try_clone_user(const void *arg)
{
    (void)arg;
    long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0)
        _exit(0);
    if (pid > 0)
        (void)waitpid((pid_t)pid, NULL, __WALL);
    return pid < 0 ? -1 : 0;
}

static long try_clone3_user(const void *arg)
{
    (void)arg;
    struct clone_args ca = {.flags = CLONE_NEWUSER, .exit_signal = SIGCHLD};
    long pid = syscall(SYS_clone3, &ca, sizeof(ca));
    if (pid == 0)
        _exit(0);
    if (pid > 0)
        (void)waitpid((pid_t)pid, NULL, __WALL);
    return pid < 0 ? -1 : 0;
}

static void check_unshare_user(const struct options *o, struct verdict *v)
{
    struct tally t = {0, 0, 0};
    (void)o;
    attempt(v, &t, "unshare", try_unshare_user, NULL);
    attempt(v, &t, "clone", try_clone_user, NULL);
    attempt(v, &t, "clone3", try_clone3_user, NULL);
    settle(v, &t);
}

/* ---- mount ------------------------------------------------------------------------------ */

/* A mount over /tmp itself would hide the host's /tmp during a control run: use a fresh
 * directory in it; the permission checks are the same. */
static long try_mount(const void *arg)
{
    const char *target = arg;
    if (mount("none", target, "tmpfs", 0, NULL) < 0)
        return -1;
    (void)umount2(target, MNT_DETACH);
    return 0;
}

static long try_fsopen(const void *arg)
{
    (void)arg;
    return syscall(SYS_fsopen, "tmpfs", 0);
}

static void check_mount(const struct options *o, struct verdict *v)
{
    char dir[] = "/tmp/escape_probe.XXXXXX";
    struct tally t = {0, 0, 0};
    (void)o;
    if (mkdtemp(dir)) {
        char label[64];
        snprintf(label, sizeof(label), "mount(%s)", dir);
        attempt(v, &t, label, try_mount, dir);
        (void)rmdir(dir);
    } else {
        note(v, "mount:not-tried(mkdtemp %s)", errname(errno));
        t.untried++;
    }
    attempt(v, &t, "fsopen", try_fsopen, NULL);
    settle(v, &t);
}

/* ---- tiocsti ---------------------------------------------------------------------------- */

/* Outside the sandbox the injection works on the command's real terminal: echo is off while
 * the byte is pushed, so it never reaches the output, and the input queue is flushed before the
 * terminal's settings are put back. */
static long try_tiocsti_stdin(const void *arg)
{
    (void)arg;
    struct termios saved, quiet;
    if (tcgetattr(STDIN_FILENO, &saved) < 0)
        return -1;
    quiet = saved;
    quiet.c_lflag &= ~(tcflag_t)(ECHO | ECHONL);
    if (tcsetattr(STDIN_FILENO, TCSANOW, &quiet) < 0)
        return -1;
    long r = ioctl(STDIN_FILENO, TIOCSTI, "x");
    int err = errno;
    (void)tcflush(STDIN_FILENO, TCIFLUSH);
    (void)tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    errno = err;
    return r;
}

/* With stdin not a terminal, a terminal of our own: a new session's controlling pty. */
static long try_tiocsti_own(const void *arg)
{
    (void)arg;
    if (setsid() < 0)
        return -1;
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0)
        return -1;
    const char *name = ptsname(m);
    if (!name)
        return -1;
    int s = open(name, O_RDWR | O_CLOEXEC);
    if (s < 0)
        return -1;
    return ioctl(s, TIOCSTI, "x");
}

static void check_tiocsti(const struct options *o, struct verdict *v)
{
    char legacy[16];
    (void)o;
    if (slurp("/proc/sys/dev/tty/legacy_tiocsti", legacy, sizeof(legacy)) > 0)
        note(v, "legacy_tiocsti=%.*s", (int)strcspn(legacy, "\n"), legacy);
    struct tally t = {0, 0, 0};
    if (isatty(STDIN_FILENO))
        attempt(v, &t, "stdin", try_tiocsti_stdin, NULL);
    else
        attempt(v, &t, "own-pty", try_tiocsti_own, NULL);
    settle(v, &t);
}

/* ---- af_packet, af_alg, af_vsock -------------------------------------------------------- */

struct family {
    int domain, type, protocol;
};

static long try_socket(const void *arg)
{
    const struct family *f = arg;
    return socket(f->domain, f->type | SOCK_CLOEXEC, f->protocol);
}

static void check_family(struct verdict *v, const struct family *f)
{
    struct tally t = {0, 0, 0};
    attempt(v, &t, "socket", try_socket, f);
    settle(v, &t);
}

static void check_af_packet(const struct options *o, struct verdict *v)
{
    const struct family f = {AF_PACKET, SOCK_RAW, htons(ETH_P_ALL)};
    (void)o;
    check_family(v, &f);
}

static void check_af_alg(const struct options *o, struct verdict *v)
{
    const struct family f = {AF_ALG, SOCK_SEQPACKET, 0};
    (void)o;
    check_family(v, &f);
}

static void check_af_vsock(const struct options *o, struct verdict *v)
{
    const struct family f = {AF_VSOCK, SOCK_STREAM, 0};
    (void)o;
    check_family(v, &f);
}

/* ---- x32_syscall, i386_syscall ---------------------------------------------------------- */

#ifndef __X32_SYSCALL_BIT
#define __X32_SYSCALL_BIT 0x40000000
#endif

static long try_x32(const void *arg)
{
    (void)arg;
    return syscall(__X32_SYSCALL_BIT + 39); /* getpid: x32 shares x86_64's number */
}

static void check_x32_syscall(const struct options *o, struct verdict *v)
{
    (void)o;
    long val = 0;
    int err = 0, sig = 0;
    int r = trial(try_x32, NULL, &val, &err, &sig);
    if (r < 0) {
        note(v, "not tried: %s", errname(-r));
    } else if (sig) {
        v->result = RESULT_BLOCKED;
        note(v, "killed by SIG%s", sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
    } else {
        v->result = val == -1 ? RESULT_BLOCKED : RESULT_SUCCEEDED;
        if (val == -1)
            note(v, "%s", errname(err));
        else
            note(v, "returned %ld", val);
    }
}

/* The raw result: a pid, or -errno. Without ia32 emulation the int traps (SIGSEGV). */
static long try_i386(const void *arg)
{
    (void)arg;
    long ret = 20; /* __NR_getpid in the i386 table */
    __asm__ volatile("int $0x80" : "+a"(ret) : : "r8", "r9", "r10", "r11", "memory");
    return ret; /* errno stays 0: trial() passes a negative value through as it is */
}

static void check_i386_syscall(const struct options *o, struct verdict *v)
{
    (void)o;
    long val = 0;
    int err = 0, sig = 0;
    int r = trial(try_i386, NULL, &val, &err, &sig);
    if (r < 0) {
        note(v, "not tried: %s", errname(-r));
    } else if (sig) {
        v->result = RESULT_BLOCKED;
        note(v, "killed by SIG%s", sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
    } else {
        v->result = val < 0 ? RESULT_BLOCKED : RESULT_SUCCEEDED;
        if (val < 0)
            note(v, "raw %ld (%s)", val, errname((int)-val));
        else
            note(v, "raw %ld", val);
    }
}

/* ---- extra_fds -------------------------------------------------------------------------- */

static void check_extra_fds(const struct options *o, struct verdict *v)
{
    bool none = true;
    (void)o;
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        /* Without /proc, ask the kernel fd by fd. */
        note(v, "/proc/self/fd:%s", errname(errno));
        for (int fd = 3; fd < 4096; fd++) {
            if (fcntl(fd, F_GETFD) >= 0) {
                none = false;
                note(v, "%d", fd);
            }
        }
        look(v, none);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end != '\0' || e->d_name[0] == '\0' || fd < 3 || fd == dirfd(d))
            continue;
        char target[256], link[64];
        snprintf(link, sizeof(link), "/proc/self/fd/%ld", fd);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n < 0)
            snprintf(target, sizeof(target), "(%s)", errname(errno));
        else
            target[n] = '\0';
        none = false;
        note(v, "%ld->%s", fd, target);
    }
    closedir(d);
    look(v, none);
}

/* ---- capabilities, no_new_privs, seccomp_mode ------------------------------------------- */

static void check_status(struct verdict *v, const char *field, const char *safe)
{
    char value[64];
    int r = status_field(field, value, sizeof(value));
    if (r < 0) {
        note(v, "/proc/self/status %s:%s", field, errname(-r));
        return;
    }
    look(v, strcmp(value, safe) == 0);
    note(v, "%s", value);
}

static void check_capabilities(const struct options *o, struct verdict *v)
{
    (void)o;
    check_status(v, "CapEff", "0000000000000000");
}

static void check_no_new_privs(const struct options *o, struct verdict *v)
{
    (void)o;
    check_status(v, "NoNewPrivs", "1");
}

static void check_seccomp_mode(const struct options *o, struct verdict *v)
{
    (void)o;
    check_status(v, "Seccomp", "2");
}

/* ---- io_uring, kernel_keyring ----------------------------------------------------------- */

static long try_io_uring(const void *arg)
{
    (void)arg;
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    return syscall(SYS_io_uring_setup, 1, &p);
}

static void check_io_uring(const struct options *o, struct verdict *v)
{
    char disabled[16];
    struct tally t = {0, 0, 0};
    (void)o;
    if (slurp("/proc/sys/kernel/io_uring_disabled", disabled, sizeof(disabled)) > 0)
        note(v, "io_uring_disabled=%.*s", (int)strcspn(disabled, "\n"), disabled);
    attempt(v, &t, "io_uring_setup", try_io_uring, NULL);
    settle(v, &t);
}

/* The process keyring dies with the trial child: nothing is left in a shared keyring. */
static long try_add_key(const void *arg)
{
    (void)arg;
    return syscall(SYS_add_key, "user", "escape_probe", "x", (size_t)1, KEY_SPEC_PROCESS_KEYRING);
}

static void check_kernel_keyring(const struct options *o, struct verdict *v)
{
    struct tally t = {0, 0, 0};
    (void)o;
    attempt(v, &t, "add_key", try_add_key, NULL);
    settle(v, &t);
}

/* ---- main ------------------------------------------------------------------------------- */

static const struct check {
    const char *name;
    void (*run)(const struct options *o, struct verdict *v);
} checks[] = {
    /* first, before any other check could leave an fd behind by mistake */
    {"extra_fds", check_extra_fds},
    {"write_outside", check_write_outside},
    {"read_planted", check_read_planted},
    {"read_home", check_read_home},
    {"proc_host", check_proc_host},
    {"tcp_loopback", check_tcp_loopback},
    {"unix_socket", check_unix_socket},
    {"interfaces", check_interfaces},
    {"ptrace_parent", check_ptrace_parent},
    {"unshare_user", check_unshare_user},
    {"mount", check_mount},
    {"tiocsti", check_tiocsti},
    {"af_packet", check_af_packet},
    {"af_alg", check_af_alg},
    {"af_vsock", check_af_vsock},
    {"x32_syscall", check_x32_syscall},
    {"i386_syscall", check_i386_syscall},
    {"capabilities", check_capabilities},
    {"no_new_privs", check_no_new_privs},
    {"seccomp_mode", check_seccomp_mode},
    {"io_uring", check_io_uring},
    {"kernel_keyring", check_kernel_keyring},
};

#define N_CHECKS (sizeof(checks) / sizeof(checks[0]))

static __attribute__((noreturn)) void usage(const char *why)
{
    fprintf(stderr,
            "escape_probe: %s\n"
            "usage: escape_probe [--planted PATH]... [--port N] [--unix PATH]... [--only NAME]\n",
            why);
    exit(2);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"planted", required_argument, NULL, 'p'},
        {"port", required_argument, NULL, 'P'},
        {"unix", required_argument, NULL, 'u'},
        {"only", required_argument, NULL, 'o'},
        {NULL, 0, NULL, 0},
    };
    static struct options o;
    const struct check *only = NULL;
    int c;

    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (o.n_planted == PATHS_MAX)
                usage("too many --planted");
            o.planted[o.n_planted++] = optarg;
            break;
        case 'u':
            if (o.n_unix == PATHS_MAX)
                usage("too many --unix");
            o.unix_paths[o.n_unix++] = optarg;
            break;
        case 'P': {
            char *end;
            errno = 0;
            long port = strtol(optarg, &end, 10);
            if (errno || *end || end == optarg || port < 1 || port > 65535)
                usage("--port wants 1..65535");
            o.port = (int)port;
            break;
        }
        case 'o':
            for (size_t i = 0; i < N_CHECKS && !only; i++)
                if (strcmp(checks[i].name, optarg) == 0)
                    only = &checks[i];
            if (!only)
                usage("unknown check for --only");
            break;
        default:
            usage("bad option");
        }
    }
    if (optind != argc)
        usage("unexpected argument");
    /* A dead reader must not turn into SIGPIPE halfway through. */
    signal(SIGPIPE, SIG_IGN);

    for (size_t i = 0; i < N_CHECKS; i++) {
        if (only && only != &checks[i])
            continue;
        struct verdict v = {.result = RESULT_NOT_TRIED, .len = 0};
        checks[i].run(&o, &v);
        emit(checks[i].name, &v);
    }
    return 0;
}
