/*
 * workspaced-docker-init: the wrapper around every command the Docker provider runs.
 *
 * The server bind-mounts this static binary read-only into each workspace container and runs
 * every command through `docker exec` as
 *
 *     init run ID TIMEOUT_MS PROGRAM [ARGS...]
 *     init signal ID SIGNO
 *     init keepalive
 *
 * `run` forks PROGRAM (an absolute path, or a name without '/' looked up in init's PATH as execvp
 * does, relative entries skipped; argv[0] = PROGRAM as given) as the command, in a session of its
 * own, with the terminal on fd 0 (if any) as its controlling terminal. Init is a child subreaper,
 * so every process the command starts stays a descendant of init however it detaches. HUP, INT,
 * QUIT, TERM, USR1, USR2 and WINCH sent to init are forwarded to every descendant. When the
 * command ends, or TIMEOUT_MS (0 = no bound) expires, every descendant is SIGKILLed and reaped,
 * and only then init writes its exit record to stderr, as one write() and as the very last bytes
 * it writes:
 *
 *     ESC _ wsinit; STATUS ESC \        (an APC sequence: terminals ignore it)
 *
 * STATUS is `exited N` or `signaled N`, then ` core` when a core was dumped, then ` oom` when the
 * command died of a SIGKILL init did not send while the memory cgroup's OOM-kill counter went up.
 * A timed-out command is SIGKILLed with the rest and normally reads `signaled 9`. When PROGRAM
 * cannot be executed, a message precedes `exited 127` (ENOENT) or `exited 126` (anything else).
 * Init exits with the code, or 128 + the signal.
 *
 * `keepalive` is the container's main process: it waits for HUP, INT or TERM and exits 0.
 *
 * `signal` finds the `run` init(s) for ID through /proc and sends SIGNO (1..64) to every
 * descendant of them, not to the inits themselves: Docker cannot signal an exec, so this is how
 * the server reaches a running command. SIGKILL is repeated until no descendant is left (or a
 * bound). It exits 0 when an init was found, 3 when none was (the command had already ended).
 *
 * Misuse exits 127 and an internal failure before the command started exits 125, each with a
 * one-line message on stderr and no exit record; a missing record means the command's fate is
 * unknown.
 *
 * Built static and without sanitizers: it runs inside images that promise nothing about their
 * libc, and it is neither pid 1 (Docker's own init is) nor privileged (often uid 0, but without
 * capabilities and with no-new-privileges, or an unprivileged uid).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "server/base/io.h"
#include "server/base/macros.h"
#include "server/base/time.h"

#define PREFIX        "workspaced-docker-init: "
#define EXIT_MISUSE   127
#define EXIT_INTERNAL 125
#define EXIT_NO_INIT  3

#define ID_PREFIX        "p_"
#define ID_HEX_DIGITS    16
#define TIMEOUT_MS_LIMIT (1ULL << 40) /* ~35 years: "no bound" is spelled 0 */
#define SIGNO_LIMIT      64

#define STATUS_OPEN  "\x1b_wsinit;"
#define STATUS_CLOSE "\x1b\\"

/* What init reads from /proc and cgroupfs: bounded, since the kernel's answers are. */
#define STAT_SIZE_LIMIT    1024    /* /proc/PID/stat through field 22 is well under this */
#define CMDLINE_SIZE_LIMIT 4096    /* enough for argv[0..2]; the rest is not looked at */
#define EVENTS_SIZE_LIMIT  4096    /* memory.events / memory.oom_control */
#define PROC_COUNT_LIMIT   4194304 /* the kernel's PID_MAX_LIMIT */

/* The final kill loop waits this long at most between rescans, and gives up after the limit
 * (a process stuck in the kernel with SIGKILL pending can no longer write anything). */
#define REAP_POLL_MS              10
#define KILL_LIMIT_MS             10000
#define SIGNAL_MODE_KILL_LIMIT_MS 2000

extern char **environ;

static const char *const oom_counter_files[] = {
    "/sys/fs/cgroup/memory.events",             /* cgroup v2, the container's own cgroup */
    "/sys/fs/cgroup/memory/memory.oom_control", /* cgroup v1 */
};

/* One line on stderr, assembled first so it is one write(). Failure to report is ignored. */
static __attribute__((format(printf, 2, 3))) void say(int err, const char *fmt, ...)
{
    char line[512];
    const size_t max = sizeof(line) - 1; /* room for the newline */
    size_t len = sizeof(PREFIX) - 1;
    va_list ap;

    memcpy(line, PREFIX, len);
    va_start(ap, fmt);
    int n = vsnprintf(line + len, max - len, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    len = len + (size_t)n < max ? len + (size_t)n : max - 1;
    if (err) {
        n = snprintf(line + len, max - len, ": %s", strerror(err));
        if (n > 0)
            len = len + (size_t)n < max ? len + (size_t)n : max - 1;
    }
    line[len++] = '\n';
    (void)!write(STDERR_FILENO, line, len);
}

/* Parses a plain decimal (digits only, no sign or space) up to limit; returns 0 or -EINVAL. */
static int parse_decimal(const char *s, uint64_t limit, uint64_t *ret_value)
{
    uint64_t v = 0;
    if (*s == '\0')
        return -EINVAL;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -EINVAL;
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > limit)
            return -EINVAL;
    }
    *ret_value = v;
    return 0;
}

/* An ID is what the server generates: "p_" and exactly 16 lowercase hex digits. */
static bool valid_id(const char *id)
{
    if (strncmp(id, ID_PREFIX, sizeof(ID_PREFIX) - 1) != 0)
        return false;
    id += sizeof(ID_PREFIX) - 1;
    for (int i = 0; i < ID_HEX_DIGITS; i++) {
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return false;
    }
    return id[ID_HEX_DIGITS] == '\0';
}

/* Reads up to size - 1 bytes of a small kernel-generated file and NUL-terminates them; returns
 * the length or -errno. */
static ssize_t read_small(int dir_fd, const char *path, char *buf, size_t size)
{
    int fd = openat(dir_fd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    ssize_t len = ws_read_all(fd, buf, size - 1);
    (void)close(fd);
    if (len >= 0)
        buf[len] = '\0';
    return len;
}

/* ---- the process tree, from /proc ---- */

struct proc {
    pid_t pid;
    pid_t ppid;
    char state;               /* Z (zombie) and X (dead) are gone already, bar the reaping */
    unsigned long long start; /* with pid, names one process even across pid reuse */
    bool mark;
};

struct proc_table {
    struct proc *v;
    size_t n, cap;
};

/* Reads /proc/PID/stat; returns 0 or -errno (-ENOENT/-ESRCH when the process is gone). */
static int read_stat(int proc_fd, pid_t pid, struct proc *ret)
{
    char path[32], buf[STAT_SIZE_LIMIT];
    (void)snprintf(path, sizeof(path), "%d/stat", (int)pid);
    ssize_t len = read_small(proc_fd, path, buf, sizeof(buf));
    if (len < 0)
        return (int)len;
    /* The comm field (2) is in parentheses and may hold anything, spaces and ')' included;
     * nothing after it can hold a ')', so the last one closes it. */
    char *p = memrchr(buf, ')', (size_t)len);
    if (!p)
        return -EINVAL;
    struct proc r = {.pid = pid};
    int field = 2;
    bool have_ppid = false, have_start = false;
    while (*++p) {
        if (*p != ' ')
            continue;
        field++;
        if (field == 3) {
            r.state = p[1];
        } else if (field == 4) {
            char *end;
            long v = strtol(p + 1, &end, 10);
            if (end == p + 1 || v < 0 || v > INT_MAX)
                return -EINVAL;
            r.ppid = (pid_t)v;
            have_ppid = true;
        } else if (field == 22) {
            char *end;
            r.start = strtoull(p + 1, &end, 10);
            if (end == p + 1)
                return -EINVAL;
            have_start = true;
            break;
        }
    }
    if (!have_ppid || !have_start || r.state == '\0')
        return -EINVAL;
    *ret = r;
    return 0;
}

static bool is_pid_name(const char *s, pid_t *ret_pid)
{
    uint64_t v;
    if (parse_decimal(s, INT_MAX, &v) < 0 || v == 0)
        return false;
    *ret_pid = (pid_t)v;
    return true;
}

static void proc_table_free(struct proc_table *t)
{
    free(t->v);
    *t = (struct proc_table){0};
}

/* Snapshots every process in /proc. Processes that vanish meanwhile are left out; returns 0
 * or -errno. */
static int proc_table_scan(int proc_fd, struct proc_table *ret)
{
    struct proc_table t = {0};
    /* A new open file description each time: a dup would share the directory offset, and
     * every scan after the first would start at the end. */
    int dir_fd = openat(proc_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0)
        return -errno;
    DIR *dir = fdopendir(dir_fd);
    if (!dir) {
        int err = errno;
        (void)close(dir_fd);
        return -err;
    }
    int r = 0;
    struct dirent *de;
    errno = 0;
    while ((de = readdir(dir))) {
        pid_t pid;
        struct proc p;
        if (!is_pid_name(de->d_name, &pid) || read_stat(proc_fd, pid, &p) < 0) {
            errno = 0;
            continue;
        }
        if (t.n == t.cap) {
            size_t cap = t.cap ? t.cap * 2 : 256;
            struct proc *v;
            if (cap > PROC_COUNT_LIMIT || !(v = realloc(t.v, cap * sizeof(*v)))) {
                r = -ENOMEM;
                goto out;
            }
            t.v = v;
            t.cap = cap;
        }
        t.v[t.n++] = p;
        errno = 0;
    }
    if (errno)
        r = -errno;
out:
    (void)closedir(dir);
    if (r < 0) {
        proc_table_free(&t);
        return r;
    }
    *ret = t;
    return 0;
}

static int by_pid(const void *a, const void *b)
{
    pid_t x = ((const struct proc *)a)->pid, y = ((const struct proc *)b)->pid;
    return (x > y) - (x < y);
}

static struct proc *proc_table_find(struct proc_table *t, pid_t pid)
{
    struct proc key = {.pid = pid};
    return bsearch(&key, t->v, t->n, sizeof(*t->v), by_pid);
}

/* Marks every process whose parent chain leads to root. A snapshot of /proc is not atomic, so
 * the chains are followed by passes to a fixed point (at most one per generation) instead of
 * trusting them to be acyclic. */
static void proc_table_mark_descendants(struct proc_table *t, pid_t root)
{
    qsort(t->v, t->n, sizeof(*t->v), by_pid);
    for (size_t i = 0; i < t->n; i++)
        t->v[i].mark = false;
    bool changed = true;
    for (size_t pass = 0; changed && pass <= t->n; pass++) {
        changed = false;
        for (size_t i = 0; i < t->n; i++) {
            struct proc *p = &t->v[i], *parent;
            if (p->mark || p->pid == root)
                continue;
            if (p->ppid == root || ((parent = proc_table_find(t, p->ppid)) && parent->mark)) {
                p->mark = true;
                changed = true;
            }
        }
    }
}

/* Signals the process the snapshot saw, not whatever has its pid by now: through a pidfd,
 * opened and then checked against the start time. Kernels or seccomp profiles without pidfds
 * get a plain kill(). Returns 0 or -errno. */
static int signal_proc(int proc_fd, const struct proc *p, int sig)
{
    int fd = (int)syscall(SYS_pidfd_open, p->pid, 0);
    if (fd < 0) {
        if (errno != ENOSYS && errno != EPERM)
            return -errno;
        return kill(p->pid, sig) < 0 ? -errno : 0;
    }
    struct proc now;
    int r = read_stat(proc_fd, p->pid, &now);
    if (r == 0 && now.start != p->start)
        r = -ESRCH;
    if (r == 0 && syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) < 0) {
        r = -errno;
        if (r == -ENOSYS || r == -EPERM)
            r = kill(p->pid, sig) < 0 ? -errno : 0;
    }
    (void)close(fd);
    return r;
}

/* Sends sig to every descendant of root except the caller itself (a `signal` run from inside
 * the tree finishes its job first). Returns how many descendants were still alive, or -errno
 * when /proc could not be read. */
static int signal_descendants(int proc_fd, pid_t root, int sig)
{
    struct proc_table t;
    int r = proc_table_scan(proc_fd, &t);
    if (r < 0)
        return r;
    proc_table_mark_descendants(&t, root);
    pid_t self = getpid();
    int alive = 0;
    for (size_t i = 0; i < t.n; i++) {
        const struct proc *p = &t.v[i];
        if (!p->mark || p->pid == self || p->state == 'Z' || p->state == 'X')
            continue;
        alive++;
        (void)signal_proc(proc_fd, p, sig);
    }
    proc_table_free(&t);
    return alive;
}

/* ---- run ---- */

static const char *next_line(const char *line)
{
    const char *nl = strchr(line, '\n');
    return nl ? nl + 1 : NULL;
}

/* Reads the memory cgroup's OOM-kill counter; returns it or -errno when there is none. */
static int64_t read_oom_counter(void)
{
    for (size_t i = 0; i < WS_ELEMENTSOF(oom_counter_files); i++) {
        char buf[EVENTS_SIZE_LIMIT];
        if (read_small(AT_FDCWD, oom_counter_files[i], buf, sizeof(buf)) < 0)
            continue;
        /* "oom_kill N" opens a line; v1's "oom_kill_disable" and v2's "oom_group_kill" are
         * other counters. */
        for (const char *line = buf; line; line = next_line(line)) {
            if (strncmp(line, "oom_kill ", strlen("oom_kill ")) != 0)
                continue;
            line += strlen("oom_kill ");
            if (*line < '0' || *line > '9')
                break;
            errno = 0;
            uint64_t v = strtoull(line, NULL, 10);
            if (errno || v > INT64_MAX)
                break;
            return (int64_t)v;
        }
    }
    return -ENOENT;
}

/* Signals init stands in for: sent to init, meant for the command. */
static bool forwarded(int sig)
{
    return sig == SIGHUP || sig == SIGINT || sig == SIGQUIT || sig == SIGTERM || sig == SIGUSR1 ||
           sig == SIGUSR2 || sig == SIGWINCH;
}

/* What the child tells init through the CLOEXEC pipe when it fails before or at execve. */
struct start_error {
    int step;
    int err;
};

static const char *const start_steps[] = {"cannot start a session for", "cannot execute"};

/* Runs the name argv[0] from the first directory of PATH that has it, like execvp but never
 * from a relative or empty entry (that would be the command's cwd, the workspace). Returns only
 * on failure, with errno EACCES when some candidate existed but could not run, else ENOENT. */
static void exec_in_path(char **argv)
{
    const char *path = getenv("PATH");
    size_t name_len = strlen(argv[0]);
    bool denied = false;

    while (path && *path) {
        const char *end = strchrnul(path, ':');
        size_t dir_len = (size_t)(end - path);
        char cand[4096];

        if (dir_len > 0 && path[0] == '/' && dir_len + 1 + name_len < sizeof(cand)) {
            memcpy(cand, path, dir_len);
            cand[dir_len] = '/';
            memcpy(cand + dir_len + 1, argv[0], name_len + 1);
            execve(cand, argv, environ);
            if (errno == EACCES)
                denied = true;
            else if (errno != ENOENT && errno != ENOTDIR)
                return;
        }
        path = *end ? end + 1 : end;
    }
    errno = denied ? EACCES : ENOENT;
}

/* In the forked child: default signals, a session of its own (with the terminal, if any), then
 * PROGRAM. Everything that fails is written to error_fd; its exit code is init's report. */
static __attribute__((noreturn)) void start_command(char **argv, int error_fd)
{
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    struct start_error e = {0};
    sigset_t none;

    /* SIG_IGN survives execve; EINVAL (SIGKILL, SIGSTOP, glibc's internal ones) is expected. */
    for (int sig = 1; sig < NSIG; sig++)
        (void)sigaction(sig, &dfl, NULL);
    if (setsid() < 0) {
        e = (struct start_error){.step = 0, .err = errno};
        goto fail;
    }
    /* Job control for an interactive shell. Best effort: a terminal that is still some other
     * session's (init did not own it) leaves the command without one rather than not run. The
     * kernel makes this session's group the foreground on TIOCSCTTY; tcsetpgrp says so again
     * for kernels that do not, while signals (SIGTTOU) are still blocked. */
    if (isatty(STDIN_FILENO) && ioctl(STDIN_FILENO, TIOCSCTTY, 0) == 0)
        (void)tcsetpgrp(STDIN_FILENO, getpid());
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);
    if (argv[0][0] == '/') {
        execve(argv[0], argv, environ);
        e = (struct start_error){.step = 1, .err = errno};
    } else {
        exec_in_path(argv);
        e = (struct start_error){.step = 1, .err = errno};
    }
fail:
    (void)!write(error_fd, &e, sizeof(e));
    _exit(e.err == ENOENT ? 127 : 126);
}

/* Gives up init's controlling terminal so the command's new session can take it. When init
 * leads the terminal's session (docker exec -t), the kernel sends SIGHUP and SIGCONT to the
 * foreground group, which is init's own: those are consumed here and never forwarded. */
static void release_terminal(void)
{
    if (!isatty(STDIN_FILENO) || ioctl(STDIN_FILENO, TIOCNOTTY) < 0)
        return;
    sigset_t hup;
    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    sigaddset(&hup, SIGCONT);
    struct timespec zero = {0};
    while (sigtimedwait(&hup, NULL, &zero) > 0)
        ;
}

/* Reaps every child that has ended, keeping the command's status. Returns 1 while init still
 * has children, 0 when it has none left, or -errno. */
static int reap(pid_t command, int *status, bool *reaped)
{
    for (;;) {
        int s;
        pid_t pid = WS_RETRY_EINTR(waitpid(-1, &s, WNOHANG | __WALL));
        if (pid > 0) {
            if (pid == command) {
                *status = s;
                *reaped = true;
            }
            continue;
        }
        if (pid == 0)
            return 1;
        return errno == ECHILD ? 0 : -errno;
    }
}

/* SIGKILLs and reaps every descendant until init has no child left: a rescan after every
 * round catches what was forked while the previous one went out. Returns 0, or -ETIMEDOUT
 * when some survived KILL_LIMIT_MS. */
static int kill_descendants(int proc_fd, pid_t command, int *status, bool *reaped,
                            const sigset_t *all)
{
    pid_t self = getpid();
    int64_t give_up = ws_mono_ms() + KILL_LIMIT_MS;
    bool scan_reported = false;
    for (;;) {
        int r = reap(command, status, reaped);
        if (r <= 0)
            return r;
        if (ws_mono_ms() >= give_up)
            return -ETIMEDOUT;
        /* Unreaped, the command's pid cannot be anyone else's: no /proc needed to kill it. */
        if (!*reaped)
            (void)kill(command, SIGKILL);
        r = signal_descendants(proc_fd, self, SIGKILL);
        if (r < 0 && !scan_reported) {
            say(-r, "cannot list the command's processes");
            scan_reported = true;
        }
        /* Anything else that arrives now is about a command that is going away anyway. */
        struct timespec poll = {.tv_nsec = REAP_POLL_MS * 1000000L};
        (void)sigtimedwait(all, NULL, &poll);
    }
}

static int run(int argc, char **argv)
{
    uint64_t timeout_ms;
    if (argc < 5) {
        say(0, "usage: run ID TIMEOUT_MS /PROGRAM [ARGS...]");
        return EXIT_MISUSE;
    }
    if (!valid_id(argv[2])) {
        say(0, "bad ID (want " ID_PREFIX " and %d lowercase hex digits)", ID_HEX_DIGITS);
        return EXIT_MISUSE;
    }
    if (parse_decimal(argv[3], TIMEOUT_MS_LIMIT, &timeout_ms) < 0) {
        say(0, "bad TIMEOUT_MS (want decimal milliseconds up to %llu, 0 = none)",
            (unsigned long long)TIMEOUT_MS_LIMIT);
        return EXIT_MISUSE;
    }
    if (argv[4][0] == '\0' || (argv[4][0] != '/' && strchr(argv[4], '/'))) {
        say(0, "PROGRAM must be an absolute path or a name without '/'");
        return EXIT_MISUSE;
    }
    char **command_argv = argv + 4;

    /* Every signal is taken synchronously below. An inherited SIG_IGN or SA_NOCLDWAIT on
     * SIGCHLD would make the kernel discard the statuses init is here to collect. */
    sigset_t all;
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigfillset(&all);
    if (sigprocmask(SIG_SETMASK, &all, NULL) < 0 || sigaction(SIGCHLD, &dfl, NULL) < 0) {
        say(errno, "cannot set up signals");
        return EXIT_INTERNAL;
    }
    /* Orphans of the command, setsid() and double-fork escapees included, re-parent to init
     * instead of Docker's pid 1: that is what lets init find them and kill them. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) {
        say(errno, "cannot become a subreaper");
        return EXIT_INTERNAL;
    }
    /* The command runs as the same uid: a dumpable init would let it ptrace init or write
     * its memory and forge the exit record. The child is dumpable again after its execve. */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
        say(errno, "cannot make init undumpable");
        return EXIT_INTERNAL;
    }
    int proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (proc_fd < 0) {
        say(errno, "cannot open /proc");
        return EXIT_INTERNAL;
    }
    release_terminal();
    int64_t oom_before = read_oom_counter();
    int64_t deadline = timeout_ms ? ws_mono_ms() + (int64_t)timeout_ms : INT64_MAX;

    int error_pipe[2];
    if (pipe2(error_pipe, O_CLOEXEC) < 0) {
        say(errno, "cannot create a pipe");
        return EXIT_INTERNAL;
    }
    pid_t command = fork();
    if (command < 0) {
        say(errno, "cannot fork");
        return EXIT_INTERNAL;
    }
    if (command == 0) {
        (void)close(error_pipe[0]);
        start_command(command_argv, error_pipe[1]);
    }
    (void)close(error_pipe[1]);
    /* EOF: the execve happened (the pipe is CLOEXEC). Anything else is why it did not. */
    struct start_error e;
    ssize_t n = ws_read_all(error_pipe[0], &e, sizeof(e));
    (void)close(error_pipe[0]);
    if (n == (ssize_t)sizeof(e) && e.step >= 0 && e.step <= 1)
        say(e.err, "%s %s", start_steps[e.step], command_argv[0]);

    /* Held by init, stdin would keep the server's writes blocking after the command closed
     * it, and stdout would hide its EOF. stderr stays for the exit record. */
    (void)close(STDIN_FILENO);
    (void)close(STDOUT_FILENO);

    int status = 0;
    bool reaped = false, timed_out = false;
    for (;;) {
        int r = reap(command, &status, &reaped);
        if (r < 0) {
            say(-r, "cannot wait for the command");
            break;
        }
        if (reaped)
            break;
        int64_t left = deadline - ws_mono_ms();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        struct timespec ts = {.tv_sec = left / 1000, .tv_nsec = (left % 1000) * 1000000L};
        siginfo_t si;
        int sig = sigtimedwait(&all, &si, deadline == INT64_MAX ? NULL : &ts);
        if (sig > 0 && forwarded(sig))
            (void)signal_descendants(proc_fd, getpid(), sig);
    }

    int r = kill_descendants(proc_fd, command, &status, &reaped, &all);
    if (r < 0)
        say(-r, "cannot kill every process of the command");
    (void)close(proc_fd);
    if (!reaped) {
        say(0, "the command's exit status is lost");
        return EXIT_INTERNAL;
    }
    int64_t oom_after = read_oom_counter();

    char record[96];
    int code, len;
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        /* The counter is the whole container's: a SIGKILL init sent itself (the timeout) is
         * not blamed on memory even if something else ran out of it meanwhile. */
        bool oom = sig == SIGKILL && !timed_out && oom_before >= 0 && oom_after > oom_before;
        code = 128 + sig;
        len = snprintf(record, sizeof(record), STATUS_OPEN "signaled %d%s%s" STATUS_CLOSE, sig,
                       WCOREDUMP(status) ? " core" : "", oom ? " oom" : "");
    } else {
        code = WEXITSTATUS(status);
        len = snprintf(record, sizeof(record), STATUS_OPEN "exited %d" STATUS_CLOSE, code);
    }
    /* The command may have left stderr's file description non-blocking. One write() of a few
     * bytes to a pipe or terminal is then whole; a short one is finished rather than lost. */
    int fl = fcntl(STDERR_FILENO, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK))
        (void)fcntl(STDERR_FILENO, F_SETFL, fl & ~O_NONBLOCK);
    /* EPIPE (nobody listens) changes nothing: the exit code carries the same. */
    (void)ws_write_all(STDERR_FILENO, record, (size_t)len);
    return code;
}

/* ---- signal ---- */

/* True when /proc/PID/cmdline is `...init run ID ...`. */
static bool is_run_init(int proc_fd, pid_t pid, const char *id)
{
    char path[32], buf[CMDLINE_SIZE_LIMIT];
    (void)snprintf(path, sizeof(path), "%d/cmdline", (int)pid);
    ssize_t len = read_small(proc_fd, path, buf, sizeof(buf));
    if (len <= 0)
        return false;
    const char *arg0 = buf, *end = buf + len;
    const char *arg1 = arg0 + strlen(arg0) + 1;
    if (arg1 >= end)
        return false;
    const char *arg2 = arg1 + strlen(arg1) + 1;
    if (arg2 >= end)
        return false;
    size_t len0 = strlen(arg0);
    return len0 >= 4 && strcmp(arg0 + len0 - 4, "init") == 0 && strcmp(arg1, "run") == 0 &&
           strcmp(arg2, id) == 0;
}

static int signal_command(int argc, char **argv)
{
    uint64_t signo;
    if (argc != 4) {
        say(0, "usage: signal ID SIGNO");
        return EXIT_MISUSE;
    }
    if (!valid_id(argv[2])) {
        say(0, "bad ID (want " ID_PREFIX " and %d lowercase hex digits)", ID_HEX_DIGITS);
        return EXIT_MISUSE;
    }
    if (parse_decimal(argv[3], SIGNO_LIMIT, &signo) < 0 || signo == 0) {
        say(0, "bad SIGNO (want 1..%d)", SIGNO_LIMIT);
        return EXIT_MISUSE;
    }
    int sig = (int)signo;
    int proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (proc_fd < 0) {
        say(errno, "cannot open /proc");
        return EXIT_INTERNAL;
    }
    struct proc_table t;
    int r = proc_table_scan(proc_fd, &t);
    if (r < 0) {
        say(-r, "cannot list processes");
        (void)close(proc_fd);
        return EXIT_INTERNAL;
    }
    pid_t self = getpid();
    int found = 0;
    for (size_t i = 0; i < t.n; i++) {
        pid_t init = t.v[i].pid;
        if (init == self || !is_run_init(proc_fd, init, argv[2]))
            continue;
        found++;
        r = signal_descendants(proc_fd, init, sig);
        /* A SIGKILL is the server's last word: make it stick against a tree that forks as
         * fast as it dies. The init reaps them and then reports by itself. */
        int64_t give_up = ws_mono_ms() + SIGNAL_MODE_KILL_LIMIT_MS;
        while (sig == SIGKILL && r > 0 && ws_mono_ms() < give_up) {
            ws_sleep_ms(REAP_POLL_MS);
            r = signal_descendants(proc_fd, init, sig);
        }
        if (r < 0)
            say(-r, "cannot list the processes of %s", argv[2]);
    }
    proc_table_free(&t);
    (void)close(proc_fd);
    return found ? 0 : EXIT_NO_INIT;
}

/* ---- keepalive ---- */

/* The container's main process: nothing but waiting, so the container runs
 * whatever the image holds (no `sleep` needed, an empty image will do).
 * Docker's init is pid 1 above it, reaps what execs leave and passes the
 * stop signal on: HUP, INT or TERM end it at once, exit 0. */
static int keepalive(int argc)
{
    sigset_t stop;
    int sig = 0;

    if (argc != 2) {
        say(0, "usage: keepalive");
        return EXIT_MISUSE;
    }
    sigemptyset(&stop);
    sigaddset(&stop, SIGHUP);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    if (sigprocmask(SIG_BLOCK, &stop, NULL) < 0)
        return EXIT_INTERNAL;
    while (sigwait(&stop, &sig) != 0)
        ;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "run") == 0)
        return run(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "signal") == 0)
        return signal_command(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "keepalive") == 0)
        return keepalive(argc);
    say(0, "usage: run ID TIMEOUT_MS /PROGRAM [ARGS...] | signal ID SIGNO | keepalive");
    return EXIT_MISUSE;
}
