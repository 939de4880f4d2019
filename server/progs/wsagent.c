/*
 * wsagent: the in-box agent. It lives inside a workspace's box for the life of the box and
 * starts its commands on the server's request, so a command costs a fork and two execs inside
 * the box instead of a `docker exec` or a fresh bubblewrap.
 *
 *     wsagent --init PATH (--channel-fd FD | --connect SOCKET) [--helper H] [--wait-fd FD]
 *
 * The channel (server/agent/wire.h) is FD, a unix stream socket the agent was started with (a
 * sandbox), or the socket at SOCKET it connects to (a container, whose directory the server
 * bind-mounts; the server takes exactly one connection there). The agent says HELLO first, with
 * the one-time secret of WSAGENT_SECRET when it was given one (64 lowercase hex digits; the value
 * is wiped from the agent's memory and environment before anything else runs), and waits for the
 * server's HELLO before it takes a START. With --wait-fd (pid 1 of a sandbox with network) it
 * first passes the network gate (netgate.h): no HELLO, and so no command, before the sandbox's
 * network is up, and none at all when it could not be.
 *
 * Each START forks a reaper: PATH (workspaced-docker-init) as `run --record-fd 3 --cwd DIR ID
 * TIMEOUT_MS PROGRAM ARGS...`, with --uid/--gid/--helper/--nproc when the START names an
 * identity, in a session of its own, with exactly the START's environment and the descriptors
 * that came with it as 0, 1 and 2. The command enters the START's directory itself, as its own
 * uid (the agent's may not be let in); a directory that does not exist fails the START. The
 * reaper is a child subreaper: the command's
 * escapees stay its descendants, its timeout ends them all, and it writes the exit record on
 * its private pipe once nothing of the command is left. The command's output never passes
 * through the agent: the descriptors are the server's own pipes or terminal. The agent answers
 * STARTED, then EXITED (the record, with the CPU time and peak RSS from wait4), or FAILED when
 * the command could not be started or its reaper died without a record (its orphans, which then
 * come to the agent, are killed first). A SIGNAL runs PATH `signal ID SIGNO`, which reaches every
 * descendant of the reaper (and, under gVisor, every process of the command's tag group).
 *
 * The agent trusts the server alone. A malformed, oversized or out-of-order frame, or a START it
 * cannot read, makes it say FAILED on stream 0 with the reason and exit 1; the end of the
 * channel (the server went away) makes it exit 0. Either way every command's processes are
 * killed first: with the agent pid 1 of its namespace, everything else in it.
 *
 * Nothing a command does can reach the channel: the agent is non-dumpable (no ptrace, no
 * /proc/PID/fd or environ of it for a process without CAP_SYS_PTRACE), its descriptors are
 * close-on-exec and closed in every child, and the reapers hold only their own record pipe.
 * With --helper H (a container, started as root) the agent becomes uid and gid H at once,
 * keeping CAP_SETUID, CAP_SETGID and CAP_KILL (also as ambient capabilities, which is how the
 * reaper gets what it needs to give the command its identity), so a command's uid can neither
 * signal nor trace it. Where the kernel has no ambient capabilities (gVisor), the child that
 * becomes a reaper or a `signal` takes uid 0 back just before its exec, as `docker exec`
 * would have started the init: no_new_privs then holds the exec to the three capabilities it
 * had, and the init splits at once as it does under `docker exec`.
 *
 * Built static and without sanitizers, like the inits.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server/agent/wire.h"
#include "server/base/io.h"
#include "server/base/macros.h"
#include "server/base/time.h"
#include "server/progs/netgate.h"

#define PREFIX        "wsagent: "
#define EXIT_MISUSE   127
#define EXIT_INTERNAL 125

#define SECRET_ENV "WSAGENT_SECRET"
/* Commands at once; a START beyond it fails its stream (EAGAIN). */
#define COMMANDS_MAX 1024
/* Descriptors received and not yet taken by a START. */
#define FDQ_MAX 64
/* The exit record: "\x1b_wsinit;signaled 9 core oom timeout\x1b\\" and room to spare. */
#define RECORD_MAX   128
#define RECORD_OPEN  "\x1b_wsinit;"
#define RECORD_CLOSE "\x1b\\"
/* The reaper's record pipe is its fd 3. */
#define REAPER_RECORD_FD 3
/* Most arguments and variables of one START (the guard's limits, and room). */
#define ARGS_MAX 1100
#define ENVS_MAX 400
/* How long the sweeps of orphans and of everything at exit keep at it. */
#define SWEEP_LIMIT_MS 5000

extern char **environ;

struct command {
    bool used;
    uint32_t stream;
    pid_t reaper;
    int record_fd; /* read end; -1 once at EOF */
    char record[RECORD_MAX];
    size_t record_len;
    bool reaped;
    int status;
    struct rusage ru;
};

static struct {
    const char *init;
    pid_t pid;    /* the agent's own (children call getpid() for theirs) */
    uid_t helper; /* 0: none */
    /* No ambient capabilities here: reapers and `signal`s are exec'd as uid 0. */
    bool root_exec;
    int channel;
    int sigfd;
    char secret[WS_WIRE_SECRET_HEX + 1];
    bool hello_seen;
    struct command commands[COMMANDS_MAX];
    size_t n_commands;
    int fdq[FDQ_MAX];
    size_t n_fdq;
    uint8_t in_buf[WS_WIRE_FRAME_MAX];
    struct ws_wire_in in;
    uint8_t out_buf[4096];
    /* A START's strings, copied out of the frame with their NULs. */
    char strings[WS_WIRE_PAYLOAD_MAX + ARGS_MAX + ENVS_MAX];
} A;

static __attribute__((format(printf, 2, 3))) void say(int err, const char *fmt, ...)
{
    char line[512];
    int n = snprintf(line, sizeof(line), PREFIX);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (err && n < (int)sizeof(line))
        n += snprintf(line + n, sizeof(line) - (size_t)n, ": %s", strerror(err));
    if (n >= (int)sizeof(line) - 1)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    (void)ws_write_all(STDERR_FILENO, line, (size_t)n);
}

/* ---- the channel ---- */

static int send_frame(struct ws_wire_out *o)
{
    long n = ws_wire_end(o);
    if (n < 0)
        return (int)n;
    for (size_t done = 0; done < (size_t)n;) {
        ssize_t w = WS_RETRY_EINTR(send(A.channel, o->buf + done, (size_t)n - done, MSG_NOSIGNAL));
        if (w < 0)
            return -errno;
        done += (size_t)w;
    }
    return 0;
}

static void send_failed(uint32_t stream, int err, const char *message)
{
    struct ws_wire_out o;
    ws_wire_begin(&o, A.out_buf, sizeof(A.out_buf), WS_WIRE_FAILED, stream);
    ws_wire_put_u64(&o, WS_WIRE_T_ERRNO, (uint64_t)err);
    ws_wire_put_str(&o, WS_WIRE_T_MESSAGE, message);
    (void)send_frame(&o);
}

/* Reads what the channel has; queues the descriptors that came with it. 1: bytes came, 0: the
 * channel ended, -errno. */
static int channel_read(void)
{
    size_t room;
    uint8_t *at = ws_wire_in_space(&A.in, &room);
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(FDQ_MAX * sizeof(int))];
    } ctl;
    struct iovec iov = {.iov_base = at, .iov_len = room};
    struct msghdr m = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = ctl.buf,
                       .msg_controllen = sizeof(ctl.buf)};
    if (room == 0)
        return -EMSGSIZE;
    ssize_t n = WS_RETRY_EINTR(recvmsg(A.channel, &m, MSG_CMSG_CLOEXEC));
    /* A server that closed its end with frames of ours unread resets the
     * connection: it went away all the same. */
    if (n < 0 && errno == ECONNRESET)
        return 0;
    if (n < 0)
        return errno == EAGAIN ? 1 : -errno;
    int err = 0;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
            if (A.n_fdq < FDQ_MAX)
                A.fdq[A.n_fdq++] = fd;
            else {
                (void)close(fd);
                err = -EMFILE;
            }
        }
    }
    if (m.msg_flags & MSG_CTRUNC)
        err = -EMFILE;
    if (err < 0)
        return err;
    ws_wire_in_added(&A.in, (size_t)n);
    return n > 0 ? 1 : 0;
}

/* ---- processes ---- */

/* The pids of the agent's children, from /proc (every process whose parent is the agent). */
static size_t children(pid_t *out, size_t max)
{
    DIR *d = opendir("/proc");
    size_t n = 0;
    pid_t self = getpid();

    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < max;) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t len = ws_read_all(fd, buf, sizeof(buf) - 1);
        (void)close(fd);
        if (len <= 0)
            continue;
        buf[len] = '\0';
        /* pid (comm) state ppid: comm may hold anything, so from the last ')'. */
        char *p = strrchr(buf, ')');
        long ppid;
        if (p && sscanf(p + 1, " %*c %ld", &ppid) == 1 && ppid == self)
            out[n++] = (pid_t)pid;
    }
    (void)closedir(d);
    return n;
}

static struct command *by_reaper(pid_t pid)
{
    for (size_t i = 0; i < COMMANDS_MAX; i++)
        if (A.commands[i].used && A.commands[i].reaper == pid)
            return &A.commands[i];
    return NULL;
}

static struct command *by_stream(uint32_t stream)
{
    for (size_t i = 0; i < COMMANDS_MAX; i++)
        if (A.commands[i].used && A.commands[i].stream == stream)
            return &A.commands[i];
    return NULL;
}

/* Collects every child that ended: a reaper's status is kept for its command, anything else
 * (a `signal` helper, an orphan) is just reaped. */
static void reap_children(void)
{
    for (;;) {
        int st;
        struct rusage ru;
        pid_t pid = wait4(-1, &st, WNOHANG | __WALL, &ru);
        if (pid <= 0)
            return;
        struct command *c = by_reaper(pid);
        if (c) {
            c->reaped = true;
            c->status = st;
            c->ru = ru;
        }
    }
}

/* Kills the agent's children that are not reapers (the orphans of a reaper that died), and
 * theirs as they come to the agent, until none is left or the limit passed. */
static void sweep_orphans(void)
{
    int64_t deadline = ws_mono_ms() + SWEEP_LIMIT_MS;
    pid_t kids[256];

    while (ws_mono_ms() < deadline) {
        size_t n = children(kids, WS_ELEMENTSOF(kids)), killed = 0;
        for (size_t i = 0; i < n; i++) {
            if (by_reaper(kids[i]))
                continue;
            (void)kill(kids[i], SIGKILL);
            killed++;
        }
        reap_children();
        if (!killed)
            return;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 5 * 1000000L};
        (void)nanosleep(&ts, NULL);
    }
}

/* The id the inits know a command by: "p_" and 16 hex digits, the agent's pid and the stream, so
 * that `signal` never takes another agent's command for this one where several share a pid
 * namespace (tests on a host; in a box the agent is alone). */
static void init_id(uint32_t stream, char buf[19])
{
    snprintf(buf, 19, "p_%08x%08x", (unsigned)A.pid, (unsigned)stream);
}

static int exec_identity(void);

/* Runs `init signal [--helper H] ID SIGNO` for c; returns its pid (or -1) without waiting:
 * the agent reaps it with the rest. */
static pid_t signal_command(struct command *c, int signo)
{
    char id[19], sig[16], helper[16];
    snprintf(sig, sizeof(sig), "%d", signo);
    snprintf(helper, sizeof(helper), "%lu", (unsigned long)A.helper);
    init_id(c->stream, id);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    const char *argv[8];
    size_t n = 0;
    argv[n++] = A.init;
    argv[n++] = "signal";
    if (A.helper) {
        argv[n++] = "--helper";
        argv[n++] = helper;
    }
    argv[n++] = id;
    argv[n++] = sig;
    argv[n] = NULL;
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        (void)dup2(null, STDIN_FILENO);
        (void)dup2(null, STDOUT_FILENO);
    }
    char *const envp[] = {NULL};
    if (exec_identity() == 0)
        execve(A.init, (char *const *)argv, envp);
    _exit(127);
}

/* Ends every command's processes: with the agent pid 1 of its namespace, everything else in
 * it; otherwise each command through its init, then the reapers themselves. */
static void kill_everything(void)
{
    if (getpid() == 1) {
        (void)kill(-1, SIGKILL);
    } else {
        /* One at a time: each `signal` ends its command's tree and returns. */
        for (size_t i = 0; i < COMMANDS_MAX; i++) {
            struct command *c = &A.commands[i];
            if (!c->used || c->reaped)
                continue;
            pid_t pid = signal_command(c, SIGKILL);
            if (pid > 0)
                (void)WS_RETRY_EINTR(waitpid(pid, NULL, __WALL));
        }
        sweep_orphans();
    }
    for (size_t i = 0; i < COMMANDS_MAX; i++)
        if (A.commands[i].used && !A.commands[i].reaped)
            (void)kill(A.commands[i].reaper, SIGKILL);
    while (waitpid(-1, NULL, __WALL) > 0 || errno == EINTR)
        ;
}

/* ---- commands ---- */

/* "exited N" / "signaled N" [core] [oom] [timeout] between the markers; false when it is not
 * exactly that. */
static bool parse_record(const char *rec, size_t len, bool *signaled, int *value, bool *core,
                         bool *oom, bool *timed_out)
{
    const size_t open_len = sizeof(RECORD_OPEN) - 1, close_len = sizeof(RECORD_CLOSE) - 1;
    char body[RECORD_MAX];

    if (len < open_len + close_len || memcmp(rec, RECORD_OPEN, open_len) != 0 ||
        memcmp(rec + len - close_len, RECORD_CLOSE, close_len) != 0)
        return false;
    size_t n = len - open_len - close_len;
    memcpy(body, rec + open_len, n);
    body[n] = '\0';
    *core = *oom = *timed_out = false;
    char *word = body, *save = NULL;
    char *kind = strtok_r(word, " ", &save);
    char *num = strtok_r(NULL, " ", &save);
    if (!kind || !num)
        return false;
    if (strcmp(kind, "exited") == 0)
        *signaled = false;
    else if (strcmp(kind, "signaled") == 0)
        *signaled = true;
    else
        return false;
    char *end;
    long v = strtol(num, &end, 10);
    if (*end || v < 0 || v > 255 || (*signaled && (v == 0 || v >= NSIG)))
        return false;
    *value = (int)v;
    for (char *t; (t = strtok_r(NULL, " ", &save)) != NULL;) {
        if (strcmp(t, "core") == 0 && *signaled)
            *core = true;
        else if (strcmp(t, "oom") == 0 && *signaled)
            *oom = true;
        else if (strcmp(t, "timeout") == 0)
            *timed_out = true;
        else
            return false;
    }
    return true;
}

static uint64_t ms_of(const struct timeval *tv)
{
    return (uint64_t)tv->tv_sec * 1000 + (uint64_t)tv->tv_usec / 1000;
}

/* The command is over once its reaper was reaped and its record pipe reached EOF. */
static void maybe_finish(struct command *c)
{
    if (!c->reaped || c->record_fd >= 0)
        return;
    bool signaled, core, oom, timed_out;
    int value;
    if (parse_record(c->record, c->record_len, &signaled, &value, &core, &oom, &timed_out)) {
        struct ws_wire_out o;
        ws_wire_begin(&o, A.out_buf, sizeof(A.out_buf), WS_WIRE_EXITED, c->stream);
        ws_wire_put_u64(&o, WS_WIRE_T_STATUS, signaled);
        ws_wire_put_u64(&o, signaled ? WS_WIRE_T_SIGNO : WS_WIRE_T_CODE, (uint64_t)value);
        ws_wire_put_u64(&o, WS_WIRE_T_CORE, core);
        ws_wire_put_u64(&o, WS_WIRE_T_OOM, oom);
        ws_wire_put_u64(&o, WS_WIRE_T_TIMED_OUT, timed_out);
        ws_wire_put_u64(&o, WS_WIRE_T_USER_MS, ms_of(&c->ru.ru_utime));
        ws_wire_put_u64(&o, WS_WIRE_T_SYS_MS, ms_of(&c->ru.ru_stime));
        ws_wire_put_u64(&o, WS_WIRE_T_MAXRSS_KIB, (uint64_t)c->ru.ru_maxrss);
        (void)send_frame(&o);
    } else {
        /* No record: the reaper failed before the command ran (its reason is on the command's
         * stderr), or it was killed, and what the command left came to the agent. */
        sweep_orphans();
        char msg[160];
        if (WIFEXITED(c->status))
            snprintf(msg, sizeof(msg),
                     "the command's init exited %d without an exit record (its reason is on the "
                     "command's stderr)",
                     WEXITSTATUS(c->status));
        else
            snprintf(msg, sizeof(msg),
                     "the command's init was killed by signal %d before it wrote an exit record; "
                     "every process it left was killed",
                     WTERMSIG(c->status));
        send_failed(c->stream, 0, msg);
    }
    c->used = false;
    A.n_commands--;
}

static void read_record(struct command *c)
{
    char buf[RECORD_MAX];
    ssize_t n = WS_RETRY_EINTR(read(c->record_fd, buf, sizeof(buf)));
    if (n < 0 && errno == EAGAIN)
        return;
    if (n <= 0) {
        (void)close(c->record_fd);
        c->record_fd = -1;
        maybe_finish(c);
        return;
    }
    /* Past the limit it is no record: kept too long to parse, so it fails. */
    size_t take = (size_t)n < sizeof(c->record) - c->record_len ? (size_t)n
                                                                : sizeof(c->record) - c->record_len;
    memcpy(c->record + c->record_len, buf, take);
    c->record_len += take;
    if (take < (size_t)n)
        c->record_len = sizeof(c->record);
}

struct start {
    char *argv[ARGS_MAX + 1];
    size_t argc;
    char *envp[ENVS_MAX + 1];
    size_t envc;
    char *cwd;
    uint64_t timeout_ms, uid, gid, nproc;
    bool has_uid, has_gid, pty;
};

/* Reads a START's fields into s (strings into A.strings). 0 or -EPROTO with why. */
static int parse_start(const struct ws_wire_frame *f, struct start *s, const char **why)
{
    size_t pos = 0, used = 0;
    struct ws_wire_field fl;
    int r;

    memset(s, 0, sizeof(*s));
    while ((r = ws_wire_next_field(f, &pos, &fl)) > 0) {
        uint64_t v;
        switch (fl.tag) {
        case WS_WIRE_T_ARGV:
        case WS_WIRE_T_ENV:
        case WS_WIRE_T_CWD: {
            char *dst = A.strings + used;
            if (ws_wire_str(&fl, dst, sizeof(A.strings) - used) < 0) {
                *why = "a string field is empty, too long or holds a NUL";
                return -EPROTO;
            }
            used += fl.len + 1;
            if (fl.tag == WS_WIRE_T_ARGV) {
                if (s->argc == ARGS_MAX) {
                    *why = "too many arguments";
                    return -EPROTO;
                }
                s->argv[s->argc++] = dst;
            } else if (fl.tag == WS_WIRE_T_ENV) {
                if (s->envc == ENVS_MAX || !strchr(dst, '=')) {
                    *why = "too many variables, or one without '='";
                    return -EPROTO;
                }
                s->envp[s->envc++] = dst;
            } else {
                if (dst[0] != '/') {
                    *why = "the directory is not absolute";
                    return -EPROTO;
                }
                s->cwd = dst;
            }
            break;
        }
        case WS_WIRE_T_TIMEOUT_MS:
        case WS_WIRE_T_PTY:
        case WS_WIRE_T_UID:
        case WS_WIRE_T_GID:
        case WS_WIRE_T_NPROC:
            if (ws_wire_u64(&fl, &v) < 0) {
                *why = "a number field is not 8 bytes";
                return -EPROTO;
            }
            if (fl.tag == WS_WIRE_T_TIMEOUT_MS)
                s->timeout_ms = v;
            else if (fl.tag == WS_WIRE_T_PTY)
                s->pty = v != 0;
            else if (fl.tag == WS_WIRE_T_UID)
                s->uid = v, s->has_uid = true;
            else if (fl.tag == WS_WIRE_T_GID)
                s->gid = v, s->has_gid = true;
            else
                s->nproc = v;
            break;
        default:
            break;
        }
    }
    if (r < 0) {
        *why = "a field runs past the frame";
        return -EPROTO;
    }
    if (s->argc == 0 || !s->cwd) {
        *why = "no argument or no directory";
        return -EPROTO;
    }
    if (s->has_uid != s->has_gid ||
        (s->has_uid && (s->uid == 0 || s->gid == 0 || !A.helper || s->uid > UINT32_MAX - 1 ||
                        s->gid > UINT32_MAX - 1 || s->uid == A.helper))) {
        *why = "an identity that is partial, root, the agent's own, or without --helper";
        return -EPROTO;
    }
    if (s->nproc > 4194304) {
        *why = "a process cap beyond the kernel's";
        return -EPROTO;
    }
    return 0;
}

/* In the child: the descriptors in place, the directory, then PATH `run`. On failure writes
 * errno to err_fd. */
static __attribute__((noreturn)) void exec_reaper(const struct start *s, uint32_t stream,
                                                  const int fds[3], int record_w, int err_fd)
{
    char id[19], timeout[24], uid[24], gid[24], helper[24], nproc[24], record[8];
    const char *argv[ARGS_MAX + 16];
    size_t n = 0;
    sigset_t none;
    int e;

    /* Out of the way of the dup2s below. */
    int err_hi = fcntl(err_fd, F_DUPFD_CLOEXEC, 16);
    if (err_hi < 0)
        goto fail;
    err_fd = err_hi;
    init_id(stream, id);
    snprintf(timeout, sizeof(timeout), "%llu", (unsigned long long)s->timeout_ms);
    snprintf(record, sizeof(record), "%d", REAPER_RECORD_FD);
    argv[n++] = A.init;
    argv[n++] = "run";
    if (s->has_uid) {
        snprintf(uid, sizeof(uid), "%llu", (unsigned long long)s->uid);
        snprintf(gid, sizeof(gid), "%llu", (unsigned long long)s->gid);
        snprintf(helper, sizeof(helper), "%lu", (unsigned long)A.helper);
        argv[n++] = "--uid";
        argv[n++] = uid;
        argv[n++] = "--gid";
        argv[n++] = gid;
        argv[n++] = "--helper";
        argv[n++] = helper;
    }
    if (s->nproc) {
        snprintf(nproc, sizeof(nproc), "%llu", (unsigned long long)s->nproc);
        argv[n++] = "--nproc";
        argv[n++] = nproc;
    }
    argv[n++] = "--record-fd";
    argv[n++] = record;
    /* Entered by the command once it has its identity: the agent's own
     * uid may not be let into the workspace. */
    argv[n++] = "--cwd";
    argv[n++] = s->cwd;
    argv[n++] = id;
    argv[n++] = timeout;
    for (size_t i = 0; i < s->argc; i++)
        argv[n++] = s->argv[i];
    argv[n] = NULL;

    /* Above every target, so no dup2 below overwrites a source still needed. */
    int hi[4];
    const int src[4] = {fds[0], fds[1], fds[2], record_w};
    for (int i = 0; i < 4; i++) {
        hi[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 16);
        if (hi[i] < 0)
            goto fail;
    }
    for (int i = 0; i < 4; i++)
        if (dup2(hi[i], i) < 0)
            goto fail;
    /* The error pipe at 4, close-on-exec: EOF there is the exec's success. */
    if (dup3(err_fd, 4, O_CLOEXEC) < 0)
        goto fail;
    err_fd = 4;
    (void)syscall(SYS_close_range, 5, ~0U, 0);
    if (setsid() < 0 || chdir("/") < 0)
        goto fail;
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);
    if (exec_identity() < 0)
        goto fail;
    execve(A.init, (char *const *)argv, s->envp);
fail:
    e = errno;
    (void)!write(err_fd, &e, sizeof(e));
    _exit(EXIT_INTERNAL);
}

/* A directory that is not there fails its START: ENOENT or ENOTDIR, else 0. One the agent may not
 * look into (another uid's) is the command's to enter (--cwd), which says so itself if it cannot.
 */
static int cwd_missing(const char *cwd)
{
    struct stat st;
    if (stat(cwd, &st) < 0)
        return errno == ENOENT || errno == ENOTDIR ? errno : 0;
    return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

static int on_start(const struct ws_wire_frame *f, const char **why)
{
    struct start s;
    int r = parse_start(f, &s, why);
    if (r < 0)
        return r;
    size_t want = s.pty ? 1 : 3;
    if (A.n_fdq < want) {
        *why = "a START without its descriptors";
        return -EPROTO;
    }
    int fds[3];
    for (size_t i = 0; i < 3; i++)
        fds[i] = A.fdq[s.pty ? 0 : i];
    size_t took = want;
    memmove(A.fdq, A.fdq + took, (A.n_fdq - took) * sizeof(int));
    A.n_fdq -= took;
    if (f->stream == 0 || by_stream(f->stream)) {
        for (size_t i = 0; i < took; i++)
            (void)close(fds[i]);
        *why = "a START on stream 0 or on a stream in use";
        return -EPROTO;
    }

    struct command *c = NULL;
    for (size_t i = 0; i < COMMANDS_MAX && !c; i++)
        if (!A.commands[i].used)
            c = &A.commands[i];
    int rec[2] = {-1, -1}, err[2] = {-1, -1};
    int fail = 0;
    if (!c)
        fail = EAGAIN;
    if (!fail)
        fail = cwd_missing(s.cwd);
    if (!fail && (pipe2(rec, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0))
        fail = errno;
    pid_t pid = -1;
    if (!fail) {
        pid = fork();
        if (pid < 0)
            fail = errno;
        else if (pid == 0)
            exec_reaper(&s, f->stream, fds, rec[1], err[1]);
    }
    for (size_t i = 0; i < took; i++)
        (void)close(fds[i]);
    if (rec[1] >= 0)
        (void)close(rec[1]);
    if (err[1] >= 0)
        (void)close(err[1]);
    if (!fail) {
        int e = 0;
        if (ws_read_all(err[0], &e, sizeof(e)) == (ssize_t)sizeof(e)) {
            fail = e ? e : EIO;
            int st;
            (void)WS_RETRY_EINTR(waitpid(pid, &st, 0));
        }
    }
    if (err[0] >= 0)
        (void)close(err[0]);
    if (fail) {
        if (rec[0] >= 0)
            (void)close(rec[0]);
        char msg[128];
        snprintf(msg, sizeof(msg), "the command could not be started: %s", strerror(fail));
        send_failed(f->stream, fail, msg);
        return 0;
    }
    (void)fcntl(rec[0], F_SETFL, O_NONBLOCK);
    *c = (struct command){.used = true, .stream = f->stream, .reaper = pid, .record_fd = rec[0]};
    A.n_commands++;
    struct ws_wire_out o;
    ws_wire_begin(&o, A.out_buf, sizeof(A.out_buf), WS_WIRE_STARTED, f->stream);
    ws_wire_put_u64(&o, WS_WIRE_T_PID, (uint64_t)pid);
    /* A channel that broke shows as its end on the next read. */
    (void)send_frame(&o);
    return 0;
}

static int on_signal(const struct ws_wire_frame *f, const char **why)
{
    size_t pos = 0;
    struct ws_wire_field fl;
    uint64_t signo = 0;
    int r;

    while ((r = ws_wire_next_field(f, &pos, &fl)) > 0)
        if (fl.tag == WS_WIRE_T_SIGNO && ws_wire_u64(&fl, &signo) < 0)
            r = -EPROTO;
    if (r < 0 || signo == 0 || signo >= NSIG) {
        *why = "a SIGNAL without a signal number in range";
        return -EPROTO;
    }
    struct command *c = by_stream(f->stream);
    if (c && !c->reaped)
        signal_command(c, (int)signo);
    return 0;
}

static int on_hello(const struct ws_wire_frame *f, const char **why)
{
    size_t pos = 0;
    struct ws_wire_field fl;
    uint64_t version = 0;
    int r;

    while ((r = ws_wire_next_field(f, &pos, &fl)) > 0)
        if (fl.tag == WS_WIRE_T_VERSION && ws_wire_u64(&fl, &version) < 0)
            r = -EPROTO;
    if (r < 0 || f->stream != 0 || version != WS_WIRE_VERSION) {
        *why = "a HELLO of another version, or on a stream";
        return -EPROTO;
    }
    A.hello_seen = true;
    return 0;
}

/* Every whole frame in the buffer. 0, or -EPROTO with why. */
static int take_frames(const char **why)
{
    struct ws_wire_frame f;
    int r;

    while ((r = ws_wire_next(&A.in, &f)) > 0) {
        if (!A.hello_seen && f.type != WS_WIRE_HELLO) {
            *why = "a frame before the server's HELLO";
            return -EPROTO;
        }
        switch (f.type) {
        case WS_WIRE_HELLO:
            r = A.hello_seen ? (*why = "a second HELLO", -EPROTO) : on_hello(&f, why);
            break;
        case WS_WIRE_START:
            r = on_start(&f, why);
            break;
        case WS_WIRE_SIGNAL:
            r = on_signal(&f, why);
            break;
        default:
            *why = "a frame only the agent sends";
            r = -EPROTO;
        }
        if (r < 0)
            return r;
    }
    if (r == -EMSGSIZE)
        *why = "a frame longer than the protocol allows";
    else if (r < 0)
        *why = "a frame header of another version, type or flags";
    return r < 0 ? -EPROTO : 0;
}

/* ---- start-up ---- */

static bool is_lower_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* Takes WSAGENT_SECRET out of the environment, wiping every copy of its value in place. */
static int take_secret(void)
{
    const size_t name_len = sizeof(SECRET_ENV) - 1;
    bool valid = true, found = false;

    for (char **e = environ; e && *e;) {
        if (strncmp(*e, SECRET_ENV "=", name_len + 1) != 0) {
            e++;
            continue;
        }
        char *value = *e + name_len + 1;
        size_t len = strlen(value);
        if (!found)
            valid = len == WS_WIRE_SECRET_HEX && is_lower_hex(value, len);
        if (!found && valid)
            memcpy(A.secret, value, len + 1);
        found = true;
        explicit_bzero(value, len);
        for (char **m = e; *m; m++)
            m[0] = m[1];
    }
    return valid ? 0 : -EINVAL;
}

static int set_caps(uint64_t caps, bool ambient)
{
    struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {
        {.effective = (uint32_t)caps,
         .permitted = (uint32_t)caps,
         .inheritable = ambient ? (uint32_t)caps : 0},
        {.effective = (uint32_t)(caps >> 32),
         .permitted = (uint32_t)(caps >> 32),
         .inheritable = ambient ? (uint32_t)(caps >> 32) : 0},
    };
    if (syscall(SYS_capset, &header, data) < 0)
        return -errno;
    for (int cap = 0; ambient && cap < 64; cap++)
        if ((caps >> cap) & 1 && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) < 0)
            return -errno;
    return 0;
}

/* Becomes uid and gid H, keeping what the reapers need to give commands their identities. */
static int become_helper(uid_t helper)
{
    const uint64_t caps =
        UINT64_C(1) << CAP_SETUID | UINT64_C(1) << CAP_SETGID | UINT64_C(1) << CAP_KILL;
    gid_t gid = (gid_t)helper;
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 || setgroups(1, &gid) < 0 ||
        setresgid(gid, gid, gid) < 0 || setresuid(helper, helper, helper) < 0)
        return -errno;
    int r = set_caps(caps, true);
    if (r == -EINVAL) {
        /* No ambient capabilities (gVisor): the permitted ones stay. */
        A.root_exec = true;
        r = set_caps(caps, false);
    }
    if (r < 0)
        return r;
    (void)prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
    return 0;
}

/* In a child about to exec the init as the helper's stand-in: without ambient capabilities,
 * uid 0 again (see the top), which CAP_SETUID and CAP_SETGID allow. */
static int exec_identity(void)
{
    if (!A.root_exec)
        return 0;
    if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
        return -errno;
    return 0;
}

static int parse_uint(const char *s, unsigned long max, unsigned long *ret)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v > max || s[0] == '-')
        return -1;
    *ret = v;
    return 0;
}

static int open_channel(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (WS_RETRY_EINTR(connect(fd, (struct sockaddr *)&sa, sizeof(sa))) < 0) {
        int e = -errno;
        (void)close(fd);
        return e;
    }
    return fd;
}

#define USAGE                                                                                      \
    "usage: wsagent --init PATH (--channel-fd FD | --connect SOCKET) [--helper H] [--wait-fd FD]"

int main(int argc, char **argv)
{
    const char *connect_to = NULL;
    unsigned long channel_fd = 0, helper = 0, wait_fd = 0;
    bool have_fd = false;

    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) {
            say(0, USAGE);
            return EXIT_MISUSE;
        }
        if (strcmp(argv[i], "--init") == 0 && argv[i + 1][0] == '/')
            A.init = argv[i + 1];
        else if (strcmp(argv[i], "--connect") == 0)
            connect_to = argv[i + 1];
        else if (strcmp(argv[i], "--channel-fd") == 0 &&
                 parse_uint(argv[i + 1], INT_MAX, &channel_fd) == 0 && channel_fd > 2)
            have_fd = true;
        else if (strcmp(argv[i], "--wait-fd") == 0 &&
                 parse_uint(argv[i + 1], INT_MAX, &wait_fd) == 0 && wait_fd > 2)
            ;
        else if (strcmp(argv[i], "--helper") == 0 &&
                 parse_uint(argv[i + 1], UINT32_MAX - 1, &helper) == 0 && helper != 0)
            A.helper = (uid_t)helper;
        else {
            say(0, USAGE);
            return EXIT_MISUSE;
        }
    }
    if (!A.init || have_fd == (connect_to != NULL)) {
        say(0, USAGE);
        return EXIT_MISUSE;
    }
    A.pid = getpid();
    if (take_secret() < 0) {
        say(0, "bad " SECRET_ENV " (want %d lowercase hex digits)", WS_WIRE_SECRET_HEX);
        return EXIT_MISUSE;
    }
    /* Signals come through the signalfd alone; an inherited SIG_IGN on SIGCHLD would have the
     * kernel reap the reapers and lose their statuses. */
    sigset_t all;
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigfillset(&all);
    if (sigprocmask(SIG_SETMASK, &all, NULL) < 0 || sigaction(SIGCHLD, &dfl, NULL) < 0 ||
        sigaction(SIGPIPE, &dfl, NULL) < 0) {
        say(errno, "cannot set up signals");
        return EXIT_INTERNAL;
    }
    if (A.helper && become_helper(A.helper) < 0) {
        say(errno, "cannot become the helper uid %lu", helper);
        return EXIT_INTERNAL;
    }
    /* After the uid change, which resets it. */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 || prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) {
        say(errno, "cannot make the agent undumpable and a subreaper");
        return EXIT_INTERNAL;
    }
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    A.sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (A.sigfd < 0) {
        say(errno, "cannot make a signalfd");
        return EXIT_INTERNAL;
    }
    if (connect_to) {
        int fd = open_channel(connect_to);
        if (fd < 0) {
            say(-fd, "cannot connect to %s", connect_to);
            return EXIT_INTERNAL;
        }
        A.channel = fd;
    } else {
        A.channel = (int)channel_fd;
        if (fcntl(A.channel, F_SETFD, FD_CLOEXEC) < 0) {
            say(errno, "bad --channel-fd");
            return EXIT_MISUSE;
        }
    }
    /* Whatever else the agent was started with is not its business. */
    for (int fd = 3; fd < 1024; fd++)
        if (fd != A.channel && fd != A.sigfd)
            (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (wait_fd) {
        char why[WS_NETGATE_MSG_MAX + 128];
        if (ws_netgate_pass((int)wait_fd, why, sizeof(why)) < 0) {
            say(0, "%s", why);
            return EXIT_INTERNAL;
        }
    }
    ws_wire_in_init(&A.in, A.in_buf, sizeof(A.in_buf));

    struct ws_wire_out o;
    ws_wire_begin(&o, A.out_buf, sizeof(A.out_buf), WS_WIRE_HELLO, 0);
    ws_wire_put_u64(&o, WS_WIRE_T_VERSION, WS_WIRE_VERSION);
    ws_wire_put_u64(&o, WS_WIRE_T_PID, (uint64_t)getpid());
    if (A.secret[0])
        ws_wire_put_str(&o, WS_WIRE_T_SECRET, A.secret);
    explicit_bzero(A.secret, sizeof(A.secret));
    if (send_frame(&o) < 0) {
        say(errno, "cannot say HELLO");
        return EXIT_INTERNAL;
    }

    static struct pollfd pfd[COMMANDS_MAX + 2];
    static struct command *who[COMMANDS_MAX + 2];
    const char *why = NULL;
    int status = 0;
    for (;;) {
        size_t n = 0;
        pfd[n++] = (struct pollfd){.fd = A.channel, .events = POLLIN};
        pfd[n++] = (struct pollfd){.fd = A.sigfd, .events = POLLIN};
        for (size_t i = 0; i < COMMANDS_MAX; i++) {
            struct command *c = &A.commands[i];
            if (c->used && c->record_fd >= 0) {
                who[n] = c;
                pfd[n++] = (struct pollfd){.fd = c->record_fd, .events = POLLIN};
            }
        }
        if (WS_RETRY_EINTR(poll(pfd, n, -1)) < 0) {
            say(errno, "poll");
            status = EXIT_INTERNAL;
            break;
        }
        if (pfd[1].revents) {
            struct signalfd_siginfo si;
            while (read(A.sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
                ;
            reap_children();
            for (size_t i = 0; i < COMMANDS_MAX; i++)
                if (A.commands[i].used)
                    maybe_finish(&A.commands[i]);
        }
        for (size_t i = 2; i < n; i++)
            if (pfd[i].revents && who[i]->used && who[i]->record_fd == pfd[i].fd)
                read_record(who[i]);
        if (pfd[0].revents) {
            int r = channel_read();
            if (r == 0) {
                if (ws_wire_in_pending(&A.in))
                    why = "the channel ended inside a frame";
                else
                    break; /* the server went away */
            } else if (r < 0) {
                why = r == -EMFILE ? "more descriptors than the agent holds" : "cannot read";
            }
            if (!why && take_frames(&why) < 0 && !why)
                why = "a malformed frame";
            if (why) {
                send_failed(0, EPROTO, why);
                status = 1;
                break;
            }
        }
    }
    if (why)
        say(0, "%s", why);
    kill_everything();
    return status;
}
