/* Child process trees through posix_spawn (or, to run as another user,
 * clone3, or clone where clone3 is refused) + pidfd; see spawn.h. */
#include "server/posix/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <linux/sched.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "server/base/fd.h"
#include "server/base/io.h"
#include "server/base/time.h"

struct ws_child {
    pid_t pid;
    int pidfd;
    int stdin_fd;
    int stdout_fd;
    int stderr_fd;
    int pty_fd;
    /* stdin was asked as a pipe (stdin_fd may since have been closed). */
    bool stdin_piped;
    /* The leader has been waited for; `exit` is valid unless `lost`. */
    bool reaped;
    /* Someone else reaped the leader (-ECHILD). */
    bool lost;
    /* kill(-pid, 0) reported ESRCH after the leader was reaped: the group
     * is empty for good, and its number may be reused, so never signal it
     * again. */
    bool group_gone;
    struct ws_child_exit exit;
    /* Started by someone else (ws_child_detached): no process here to
     * wait for or signal; pidfd is an eventfd, exit_given says when
     * `exit` holds what ws_child_detached_exit gave. */
    bool detached;
    atomic_bool exit_given;
};

/* Moves an fd that landed on 0-2 (a server started with those closed) above
 * them, so the child's dup2 onto 0-2 never clobbers another of its fds. */
static int move_above_stdio(int *fd)
{
    if (*fd > STDERR_FILENO)
        return 0;
    int nfd = fcntl(*fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    if (nfd < 0)
        return -errno;
    close(*fd);
    *fd = nfd;
    return 0;
}

/* A pipe whose parent end is O_NONBLOCK; both ends O_CLOEXEC (the child's
 * end loses it through the dup2 onto 0-2). */
static int make_pipe(bool parent_reads, int *ret_parent, int *ret_child)
{
    int p[2] = {-1, -1};
    int r;

    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    r = move_above_stdio(&p[0]);
    if (r < 0)
        goto out;
    r = move_above_stdio(&p[1]);
    if (r < 0)
        goto out;
    int parent = parent_reads ? 0 : 1;
    if (fcntl(p[parent], F_SETFL, O_NONBLOCK) < 0) {
        r = -errno;
        goto out;
    }
    *ret_parent = p[parent];
    *ret_child = p[1 - parent];
    p[0] = p[1] = -1;
    r = 0;
out:
    ws_close_fd(&p[0]);
    ws_close_fd(&p[1]);
    return r;
}

static int check_dim(unsigned v, unsigned def, unsigned short *ret)
{
    if (v == 0)
        v = def;
    if (v > WS_SPAWN_PTY_DIM_MAX)
        return -EINVAL;
    *ret = (unsigned short)v;
    return 0;
}

/* Opens a PTY master (O_CLOEXEC | O_NONBLOCK, atomically, unlike openpty)
 * with the given size and returns it and the slave's path. The slave stays
 * closed in the parent, so the master sees EOF (EIO) once the child's
 * session has let go of it. */
static int open_pty(unsigned short rows, unsigned short cols, int *ret_master, char *ret_name,
                    size_t name_size)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
    int r;

    if (master < 0)
        return -errno;
    r = move_above_stdio(&master);
    if (r < 0)
        goto out;
    if (grantpt(master) < 0 || unlockpt(master) < 0) {
        r = -errno;
        goto out;
    }
    r = -ptsname_r(master, ret_name, name_size);
    if (r < 0)
        goto out;
    struct winsize ws = {.ws_row = rows, .ws_col = cols};
    if (ioctl(master, TIOCSWINSZ, &ws) < 0) {
        r = -errno;
        goto out;
    }
    *ret_master = master;
    master = -1;
    r = 0;
out:
    ws_close_fd(&master);
    return r;
}

static void child_close_fds(struct ws_child *c)
{
    ws_close_fd(&c->stdin_fd);
    ws_close_fd(&c->stdout_fd);
    ws_close_fd(&c->stderr_fd);
    ws_close_fd(&c->pty_fd);
    ws_close_fd(&c->pidfd);
}

static void fill_exit(struct ws_child_exit *e, int status, const struct rusage *ru)
{
    *e = (struct ws_child_exit){0};
    if (WIFSIGNALED(status)) {
        e->signaled = true;
        e->signal = WTERMSIG(status);
        e->core_dumped = WCOREDUMP(status);
    } else {
        e->exit_code = WEXITSTATUS(status);
    }
    e->user_ms = (uint64_t)ru->ru_utime.tv_sec * 1000 + (uint64_t)ru->ru_utime.tv_usec / 1000;
    e->sys_ms = (uint64_t)ru->ru_stime.tv_sec * 1000 + (uint64_t)ru->ru_stime.tv_usec / 1000;
    e->max_rss_kib = ru->ru_maxrss > 0 ? (uint64_t)ru->ru_maxrss : 0;
}

/* wait4() on the leader. Returns 0 once reaped (now or before), -EAGAIN
 * while it runs (WNOHANG), -ECHILD when someone else reaped it. */
static int child_wait(struct ws_child *c, bool block)
{
    int status = 0;
    struct rusage ru = {0};
    pid_t p;

    if (c->reaped)
        return c->lost ? -ECHILD : 0;
    if (c->detached) {
        /* Nothing to block on here: whoever runs it says when it ended. */
        if (!atomic_load_explicit(&c->exit_given, memory_order_acquire))
            return -EAGAIN;
        c->reaped = true;
        return 0;
    }
    p = WS_RETRY_EINTR(wait4(c->pid, &status, block ? 0 : WNOHANG, &ru));
    if (p < 0) {
        int r = -errno;
        if (r == -ECHILD) {
            c->reaped = true;
            c->lost = true;
        }
        return r;
    }
    if (p == 0)
        return -EAGAIN;
    /* wait4 without WUNTRACED/WCONTINUED reports only termination. */
    fill_exit(&c->exit, status, &ru);
    c->reaped = true;
    return 0;
}

/* Reaps the members of the group that are our children besides the leader:
 * only possible when the server is a child subreaper and they were
 * re-parented to it. Never reaps another group's processes. */
static void reap_orphans(const struct ws_child *c)
{
    while (waitpid(-c->pid, NULL, WNOHANG) > 0)
        ;
}

/* Whether any process (zombies included) is left in the group. Marks the
 * group gone for good once the leader is reaped and nothing answers. */
static bool group_alive(struct ws_child *c)
{
    if (c->group_gone)
        return false;
    if (c->reaped)
        reap_orphans(c);
    if (kill(-c->pid, 0) == 0 || errno != ESRCH)
        return true;
    /* Until the leader is reaped its zombie holds the group, so ESRCH
     * cannot happen before; after, the number may be recycled. */
    c->group_gone = c->reaped;
    return false;
}

/* Waits until `deadline` (monotonic ms) for the leader to exit (poll on the
 * pidfd, then reaps it) and then for the rest of the group to leave.
 * Returns true when the group emptied in time. */
static bool wait_group_until(struct ws_child *c, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - ws_mono_ms();
        if (!c->reaped) {
            struct pollfd pfd = {.fd = c->pidfd, .events = POLLIN};
            int n = poll(&pfd, 1, left > 0 ? (int)left : 0);
            if (n > 0)
                (void)child_wait(c, true);
            else if (n < 0 && errno != EINTR)
                return false;
            if (!c->reaped && ws_mono_ms() >= deadline)
                return false;
            continue;
        }
        if (!group_alive(c))
            return true;
        if (left <= 0)
            return false;
        ws_sleep_ms(left < WS_SPAWN_POLL_STEP_MS ? left : WS_SPAWN_POLL_STEP_MS);
    }
}

/* What the child gets on its fds, made by the parent before either way of
 * spawning: the child ends of the pipes (or the PTY slave's name) and copies
 * of the kept fds above the range they go to. All O_CLOEXEC in the parent;
 * the child's dup2s make its own copies inheritable. */
struct child_fds {
    int in; /* the stdin pipe's read end; -1: /dev/null, or the PTY */
    int out;
    int err;
    bool pty;
    char pty_name[WS_SPAWN_PTY_NAME_MAX];
    int keep[WS_SPAWN_KEEP_FDS_MAX];
    size_t n_keep;
};

static void child_fds_init(struct child_fds *f)
{
    f->in = f->out = f->err = -1;
    f->pty = false;
    f->pty_name[0] = '\0';
    for (size_t i = 0; i < WS_SPAWN_KEEP_FDS_MAX; i++)
        f->keep[i] = -1;
    f->n_keep = 0;
}

static void child_fds_close(struct child_fds *f)
{
    ws_close_fd(&f->in);
    ws_close_fd(&f->out);
    ws_close_fd(&f->err);
    for (size_t i = 0; i < WS_SPAWN_KEEP_FDS_MAX; i++)
        ws_close_fd(&f->keep[i]);
}

/* Makes the pipes or the PTY (the parent's ends go into c) and the copies of
 * the kept fds. */
static int make_child_fds(const struct ws_spawn_opts *o, unsigned short rows, unsigned short cols,
                          struct ws_child *c, struct child_fds *f)
{
    int r;

    if (o->pty) {
        r = open_pty(rows, cols, &c->pty_fd, f->pty_name, sizeof(f->pty_name));
        if (r < 0)
            return r;
        f->pty = true;
    } else {
        if (o->stdin_mode == WS_SPAWN_STDIN_PIPE) {
            r = make_pipe(false, &c->stdin_fd, &f->in);
            if (r < 0)
                return r;
            c->stdin_piped = true;
        }
        if (o->output_null) {
            f->out = open("/dev/null", O_WRONLY | O_CLOEXEC);
            if (f->out < 0)
                return -errno;
            f->err = fcntl(f->out, F_DUPFD_CLOEXEC, 0);
            if (f->err < 0)
                return -errno;
        } else {
            r = make_pipe(true, &c->stdout_fd, &f->out);
            if (r < 0)
                return r;
            r = make_pipe(true, &c->stderr_fd, &f->err);
            if (r < 0)
                return r;
        }
    }
    /* Kept fds land at 3, 4, ... from copies above that range, so no
     * dup2 overwrites a source another one still needs. */
    for (size_t i = 0; i < o->n_keep_fds; i++) {
        f->keep[i] =
            fcntl(o->keep_fds[i], F_DUPFD_CLOEXEC, (int)(STDERR_FILENO + 1 + o->n_keep_fds));
        if (f->keep[i] < 0)
            return -errno;
        f->n_keep = i + 1;
    }
    return 0;
}

/* glibc's posix_spawn, with the file actions that give the child `f`. */
static int spawn_posix(const struct ws_spawn_opts *o, const struct child_fds *f, pid_t *ret_pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    bool fa_init = false, attr_init = false;
    sigset_t set;
    int r;

    r = -posix_spawnattr_init(&attr);
    if (r < 0)
        goto out;
    attr_init = true;
    /* New session (hence group), clean signal state: the child must not
     * inherit the server's blocked SIGTERM or ignored SIGPIPE. */
    r = -posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                             POSIX_SPAWN_SETSIGDEF);
    if (r < 0)
        goto out;
    sigemptyset(&set);
    r = -posix_spawnattr_setsigmask(&attr, &set);
    if (r < 0)
        goto out;
    /* Every bit, not sigfillset(): that leaves out glibc's internal
     * signals (32, 33), which glibc's spawn child then sets to SIG_IGN, a
     * disposition exec keeps. They are blocked in the child until the exec
     * installs the empty mask, so SIG_DFL is safe there. */
    memset(&set, 0xff, sizeof(set));
    r = -posix_spawnattr_setsigdefault(&attr, &set);
    if (r < 0)
        goto out;

    r = -posix_spawn_file_actions_init(&fa);
    if (r < 0)
        goto out;
    fa_init = true;
    /* fchdir first: cwd_fd may be a low number the dup2s below replace. */
    r = -posix_spawn_file_actions_addfchdir_np(&fa, o->cwd_fd);
    if (r < 0)
        goto out;

    if (f->pty) {
        /* glibc runs setsid() before the file actions, so this open (no
         * O_NOCTTY) makes the slave the new session's controlling tty. */
        r = -posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, f->pty_name,
                                              O_RDWR | (o->pty_noctty ? O_NOCTTY : 0), 0);
        if (r < 0)
            goto out;
        r = -posix_spawn_file_actions_adddup2(&fa, STDIN_FILENO, STDOUT_FILENO);
        if (r < 0)
            goto out;
        r = -posix_spawn_file_actions_adddup2(&fa, STDIN_FILENO, STDERR_FILENO);
        if (r < 0)
            goto out;
    } else {
        if (f->in >= 0)
            r = -posix_spawn_file_actions_adddup2(&fa, f->in, STDIN_FILENO);
        else
            r = -posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
        if (r < 0)
            goto out;
        r = -posix_spawn_file_actions_adddup2(&fa, f->out, STDOUT_FILENO);
        if (r < 0)
            goto out;
        r = -posix_spawn_file_actions_adddup2(&fa, f->err, STDERR_FILENO);
        if (r < 0)
            goto out;
    }
    for (size_t i = 0; i < f->n_keep; i++) {
        r = -posix_spawn_file_actions_adddup2(&fa, f->keep[i], STDERR_FILENO + 1 + (int)i);
        if (r < 0)
            goto out;
    }
    r = -posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1 + (int)f->n_keep);
    if (r < 0)
        goto out;

    r = -posix_spawn(ret_pid, o->argv[0], &fa, &attr, (char *const *)o->argv,
                     (char *const *)o->envp);
out:
    if (fa_init)
        posix_spawn_file_actions_destroy(&fa);
    if (attr_init)
        posix_spawnattr_destroy(&attr);
    return r;
}

/* Whether posix_spawn falls short: anything run_as asks needs the cloned
 * child. */
static bool run_as_asked(const struct ws_run_as *ra)
{
    return ra->set || ra->n_rlimits > 0 || ra->set_oom || ra->into_cgroup;
}

/* The checks struct ws_run_as documents, before anything is made. */
static int check_run_as(const struct ws_run_as *ra)
{
    if (ra->set && (ra->uid == 0 || ra->uid == (uid_t)-1 || ra->gid == 0 || ra->gid == (gid_t)-1))
        return -EINVAL;
    if (ra->n_rlimits > WS_SPAWN_RLIMITS_MAX)
        return -EINVAL;
    for (size_t i = 0; i < ra->n_rlimits; i++)
        if (ra->rlimits[i].resource < 0 || ra->rlimits[i].resource >= RLIM_NLIMITS)
            return -EINVAL;
    if (ra->set_oom && (ra->oom_score_adj < -1000 || ra->oom_score_adj > 1000))
        return -EINVAL;
    if (ra->into_cgroup && ra->cgroup_fd < 0)
        return -EBADF;
    return 0;
}

#if defined(__x86_64__)

/* The cloned child runs on the server's memory while the calling thread
 * waits: nothing in it may be instrumented (the sanitizers' bookkeeping
 * belongs to threads they know, and this one shares the caller's TLS), so
 * its functions are compiled without them and call nothing but the inline
 * system calls below: no glibc, no errno. */
#define CHILD_CODE   __attribute__((no_sanitize("address", "undefined", "thread")))
#define CHILD_INLINE static inline __attribute__((always_inline)) CHILD_CODE

#define WS_SPAWN_STR_(x) #x
#define WS_SPAWN_STR(x)  WS_SPAWN_STR_(x)

/* The child's stack: its one frame and the system calls' needs are far
 * below this. A guard page under it turns an overflow into a fault rather
 * than a write into whatever the server has mapped there. */
#define CLONE_STACK_SIZE (64 * 1024)

/* The kernel's signals are 1..64 on x86_64, and its sigset_t, which
 * rt_sigaction and rt_sigprocmask take, is 8 bytes (glibc's is 128). */
#define KERNEL_NSIG        64
#define KERNEL_SIGSET_SIZE sizeof(uint64_t)

/* long ws_spawn_clone3(struct clone_args *args, size_t size,
 *                      int (*fn)(void *), void *arg)
 *
 * clone3 that runs fn(arg) in the child on the stack `args` gives it and
 * ends the child with fn's return value, so the child never returns into
 * the caller's frame (which it shares, CLONE_VM). Returns the child's pid,
 * or -errno, in the parent. Assembly, as glibc's and musl's clone are: C
 * cannot change stacks. fn stays in rdx and arg is moved to r8, registers
 * the syscall instruction keeps; the child starts with the parent's
 * registers on the new stack. The section is pushed and popped so the
 * compiler's idea of the current one stays true; clang-format is off for
 * it to keep one instruction per line. */
// clang-format off
__asm__(".pushsection .text\n"
        ".globl ws_spawn_clone3\n"
        ".hidden ws_spawn_clone3\n"
        ".type ws_spawn_clone3, @function\n"
        ".p2align 4\n"
        "ws_spawn_clone3:\n"
        "    .cfi_startproc\n"
        "    movq %rcx, %r8\n"
        "    movl $" WS_SPAWN_STR(__NR_clone3) ", %eax\n"
        "    syscall\n"
        "    testq %rax, %rax\n"
        "    jz 1f\n"
        "    ret\n"
        "1:\n"
        "    .cfi_undefined rip\n"
        "    xorl %ebp, %ebp\n"
        "    andq $-16, %rsp\n"
        "    movq %r8, %rdi\n"
        "    call *%rdx\n"
        "    movl %eax, %edi\n"
        "    movl $" WS_SPAWN_STR(__NR_exit) ", %eax\n"
        "    syscall\n"
        "    hlt\n"
        "    .cfi_endproc\n"
        ".size ws_spawn_clone3, .-ws_spawn_clone3\n"
        ".popsection\n");
// clang-format on

__attribute__((visibility("hidden"))) long ws_spawn_clone3(struct clone_args *args, size_t size,
                                                           int (*fn)(void *), void *arg);

/* A system call with up to five arguments; returns the result or -errno. */
CHILD_INLINE long sys5(long nr, long a, long b, long c, long d, long e)
{
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    long ret;

    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                     : "rcx", "r11", "memory");
    return ret;
}

#define sys1(nr, a)          sys5((nr), (long)(a), 0, 0, 0, 0)
#define sys2(nr, a, b)       sys5((nr), (long)(a), (long)(b), 0, 0, 0)
#define sys3(nr, a, b, c)    sys5((nr), (long)(a), (long)(b), (long)(c), 0, 0)
#define sys4(nr, a, b, c, d) sys5((nr), (long)(a), (long)(b), (long)(c), (long)(d), 0)

/* The kernel's struct sigaction, as rt_sigaction takes it on x86_64. */
struct kernel_sigaction {
    uintptr_t handler;
    unsigned long flags;
    uintptr_t restorer;
    uint64_t mask;
};

/* Everything the cloned child needs, prepared by the parent so that the
 * child only reads memory and makes system calls. It lives in the parent's
 * frame, which stays put while the child runs (CLONE_VFORK). */
struct clone_child {
    /* The cgroup v2 directory the child must move itself into, -1 when it
     * needs no move (none asked, or clone3 put it there already). */
    int join_cgroup_fd;
    const char *path;
    const char *const *argv;
    const char *const *envp;
    int cwd_fd;
    bool pty_noctty;
    const struct child_fds *fds;
    const struct ws_run_as *ra;
    struct rlimit limits[WS_SPAWN_RLIMITS_MAX];
    char oom[16];
    size_t oom_len;
    struct __user_cap_header_struct cap_header;
    struct __user_cap_data_struct cap_data[_LINUX_CAPABILITY_U32S_3];
    struct kernel_sigaction sig_default;
    uint64_t no_signals;
    /* The positive errno of the step that failed, 0 when the exec
     * succeeded. The parent reads it after the clone returned, which
     * CLONE_VFORK holds back until the child has exec'd or exited. */
    volatile int err;
};

/* Opens `path` onto fd `at`, as posix_spawn's addopen does. */
CHILD_INLINE long child_open_at(const char *path, int flags, int at)
{
    long fd = sys4(__NR_openat, AT_FDCWD, path, flags, 0);
    if (fd < 0 || fd == at)
        return fd;
    long r = sys2(__NR_dup2, fd, at);
    (void)sys1(__NR_close, fd);
    return r;
}

/* The child, in the order glibc's spawn child works (signals, session,
 * files), then the limits and the identity while it still has the
 * privileges they need, the capabilities last, then the exec. A failed step
 * leaves its errno for the parent and exits. */
static __attribute__((noinline)) CHILD_CODE int clone_child_main(void *arg)
{
    struct clone_child *x = arg;
    const struct child_fds *f = x->fds;
    const struct ws_run_as *ra = x->ra;
    long r = 0;

    /* The legacy clone has no CLONE_INTO_CGROUP, so the child moves itself,
     * before anything else: the cgroup's caps then hold for all it does,
     * and it still has the server's identity, which the write needs (the
     * server owns the delegated subtree, not the uid the command runs
     * as). "0" is the writer itself: this child, a thread group of its
     * own despite the shared memory. */
    if (x->join_cgroup_fd >= 0) {
        long fd = sys4(__NR_openat, x->join_cgroup_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC, 0);
        if (fd < 0) {
            r = fd;
            goto fail;
        }
        r = sys3(__NR_write, fd, "0", 1);
        (void)sys1(__NR_close, fd);
        if (r >= 0 && r != 1)
            r = -EIO;
        if (r < 0)
            goto fail;
    }
    /* Every disposition back to the default (SIGKILL and SIGSTOP cannot be
     * changed): no handler of the server may run on this stack, and the
     * command must not inherit an ignored SIGPIPE. Every signal is
     * blocked meanwhile (the parent did so before the clone). */
    for (long sig = 1; sig <= KERNEL_NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP)
            continue;
        r = sys4(__NR_rt_sigaction, sig, &x->sig_default, 0, KERNEL_SIGSET_SIZE);
        if (r < 0)
            goto fail;
    }
    r = sys5(__NR_setsid, 0, 0, 0, 0, 0);
    if (r < 0)
        goto fail;
    /* fchdir first: cwd_fd may be a low number the dup2s below replace. */
    r = sys1(__NR_fchdir, x->cwd_fd);
    if (r < 0)
        goto fail;
    if (f->pty) {
        /* After setsid() and without O_NOCTTY, this open makes the slave
         * the new session's controlling terminal. */
        r = child_open_at(f->pty_name, O_RDWR | (x->pty_noctty ? O_NOCTTY : 0), STDIN_FILENO);
        if (r < 0)
            goto fail;
        r = sys2(__NR_dup2, STDIN_FILENO, STDOUT_FILENO);
        if (r < 0)
            goto fail;
        r = sys2(__NR_dup2, STDIN_FILENO, STDERR_FILENO);
        if (r < 0)
            goto fail;
        /* The terminal belongs to the user the command runs as, as login
         * makes it, so the command can open it by name too. */
        if (ra->set) {
            r = sys3(__NR_fchown, STDIN_FILENO, ra->uid, -1);
            if (r < 0)
                goto fail;
        }
    } else {
        if (f->in >= 0)
            r = sys2(__NR_dup2, f->in, STDIN_FILENO);
        else
            r = child_open_at("/dev/null", O_RDONLY, STDIN_FILENO);
        if (r < 0)
            goto fail;
        r = sys2(__NR_dup2, f->out, STDOUT_FILENO);
        if (r < 0)
            goto fail;
        r = sys2(__NR_dup2, f->err, STDERR_FILENO);
        if (r < 0)
            goto fail;
    }
    for (size_t i = 0; i < f->n_keep; i++) {
        r = sys2(__NR_dup2, f->keep[i], STDERR_FILENO + 1 + (long)i);
        if (r < 0)
            goto fail;
    }
    /* Limits after the dup2s, which a low RLIMIT_NOFILE would refuse. */
    for (size_t i = 0; i < ra->n_rlimits; i++) {
        r = sys4(__NR_prlimit64, 0, ra->rlimits[i].resource, &x->limits[i], 0);
        if (r < 0)
            goto fail;
    }
    if (ra->set_oom) {
        long fd = sys4(__NR_openat, AT_FDCWD, "/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC, 0);
        if (fd < 0) {
            r = fd;
            goto fail;
        }
        r = sys3(__NR_write, fd, x->oom, x->oom_len);
        (void)sys1(__NR_close, fd);
        if (r >= 0 && (size_t)r != x->oom_len)
            r = -EIO;
        if (r < 0)
            goto fail;
    }
    if (ra->set) {
        /* Groups first: after setresuid there is no CAP_SETGID left. */
        r = sys2(__NR_setgroups, 1, &ra->gid);
        if (r < 0)
            goto fail;
        r = sys3(__NR_setresgid, ra->gid, ra->gid, ra->gid);
        if (r < 0)
            goto fail;
        r = sys3(__NR_setresuid, ra->uid, ra->uid, ra->uid);
        if (r < 0)
            goto fail;
        /* Leaving uid 0 already clears the capabilities; a server that is
         * not root (ambient capabilities from its unit) or keeps them
         * across a uid change (securebits) would pass them on. */
        r = sys5(__NR_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        if (r < 0)
            goto fail;
        r = sys2(__NR_capset, &x->cap_header, x->cap_data);
        if (r < 0)
            goto fail;
        /* And nothing exec'd later (set-user-ID, file capabilities) gains
         * any. */
        r = sys5(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        if (r < 0)
            goto fail;
    }
    /* Needs Linux 5.9; without it the exec must not happen with the
     * server's fds, so ENOSYS is the error. */
    r = sys3(__NR_close_range, STDERR_FILENO + 1 + f->n_keep, ~0U, 0);
    if (r < 0)
        goto fail;
    r = sys4(__NR_rt_sigprocmask, SIG_SETMASK, &x->no_signals, 0, KERNEL_SIGSET_SIZE);
    if (r < 0)
        goto fail;
    r = sys3(__NR_execve, x->path, x->argv, x->envp);
fail:
    x->err = r < 0 ? (int)-r : EIO;
    return 127;
}

/* The credential change of a cloned child marks the address space it shares
 * with the server non-dumpable (commit_creds applies fs.suid_dumpable to
 * the task's mm). The server's own setting is read by the first of
 * overlapping spawns and put back by the last, so concurrent spawns never
 * read each other's transient value. */
static pthread_mutex_t dumpable_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned dumpable_spawns;
static int dumpable_before;

static void dumpable_hold(void)
{
    pthread_mutex_lock(&dumpable_lock);
    if (dumpable_spawns++ == 0)
        dumpable_before = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
    pthread_mutex_unlock(&dumpable_lock);
}

static void dumpable_release(void)
{
    pthread_mutex_lock(&dumpable_lock);
    /* PR_SET_DUMPABLE takes 0 or 1 only; 1 is what a server has unless it
     * changed it itself. */
    if (--dumpable_spawns == 0 && dumpable_before == 1 && prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 1)
        (void)prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    pthread_mutex_unlock(&dumpable_lock);
}

/* Set once clone3 has been refused by the system rather than for the child
 * asked (see clone3_refused): every later run-as spawn goes straight to the
 * legacy clone. A race only makes two threads learn the same thing. */
static atomic_bool clone3_unusable;

/* Whether a failed clone3 (`r`, -errno) means the call itself is refused
 * here, so the legacy clone should make the child instead:
 *   - ENOSYS: a kernel without clone3, or a seccomp profile that refuses it
 *     so that callers fall back (Docker's default profile does, as do
 *     other container runtimes and flatpak: the flags sit in memory a
 *     filter cannot read, so the filter cannot vet them);
 *   - EPERM, only when a call with no arguments gets it too. Some profiles
 *     (older Docker releases among them) answer every system call they do
 *     not know with EPERM. But the kernel has EPERMs of its own for a
 *     real clone3, and those must stay the spawn's error; it reads the
 *     arguments before any of them, and refuses a size of 0 with EINVAL,
 *     so only a filter says EPERM to that call, which makes no child. */
static bool clone3_refused(long r)
{
    if (r == -ENOSYS)
        return true;
    if (r != -EPERM)
        return false;
    return syscall(__NR_clone3, NULL, 0) < 0 && errno == EPERM;
}

/* Makes the child: clone3 with `ca` (which holds the pidfd's address and,
 * with CLONE_INTO_CGROUP, the cgroup), or, where clone3 is refused, the
 * legacy clone with the same flags save CLONE_INTO_CGROUP, on the same
 * stack (`stack_top` is its top), the child then moving itself into the
 * cgroup. Returns the child's pid or -errno; the caller has blocked every
 * signal. */
static long clone_child(struct clone_args *ca, char *stack_top, struct clone_child *x)
{
    if (!atomic_load_explicit(&clone3_unusable, memory_order_relaxed)) {
        long pid = ws_spawn_clone3(ca, sizeof(*ca), clone_child_main, x);
        if (pid >= 0 || !clone3_refused(pid))
            return pid;
        atomic_store_explicit(&clone3_unusable, true, memory_order_relaxed);
    }
    if (ca->flags & CLONE_INTO_CGROUP) {
        /* clone3 takes a v2 cgroup only; a v1 directory has a cgroup.procs
         * too, which would take the child without a word. */
        struct statfs sfs;
        if (fstatfs((int)ca->cgroup, &sfs) < 0)
            return -errno;
        if (sfs.f_type != CGROUP2_SUPER_MAGIC)
            return -EBADF;
        x->join_cgroup_fd = (int)ca->cgroup;
    }
    /* glibc's clone, the legacy system call posix_spawn falls back to as
     * well: assembly that calls clone_child_main on the new stack and ends
     * the child with its return value, touching nothing else (no TLS, no
     * errno) in the child. The pidfd is written where the parent's tid
     * would go. */
    int flags = (int)(ca->flags & ~(uint64_t)CLONE_INTO_CGROUP) | (int)ca->exit_signal;
    int pid = clone(clone_child_main, stack_top, flags, x, (int *)(uintptr_t)ca->pidfd);
    return pid < 0 ? -errno : pid;
}

/* The run-as child: see struct clone_child and clone_child_main. Returns 0
 * with the child's pid and pidfd, or -errno with no child left. */
static int spawn_clone(const struct ws_spawn_opts *o, const struct child_fds *f, pid_t *ret_pid,
                       int *ret_pidfd)
{
    const struct ws_run_as *ra = &o->run_as;
    struct clone_child x = {
        .join_cgroup_fd = -1,
        .path = o->argv[0],
        .argv = o->argv,
        .envp = o->envp,
        .cwd_fd = o->cwd_fd,
        .pty_noctty = o->pty_noctty,
        .fds = f,
        .ra = ra,
        .cap_header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0},
        .sig_default = {.handler = (uintptr_t)SIG_DFL},
        .no_signals = 0,
        .err = 0,
    };
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t map_size = CLONE_STACK_SIZE + page;
    uint64_t all = ~(uint64_t)0, old = 0;
    int pidfd = -1;
    char *map;
    long pid;
    int r;

    for (size_t i = 0; i < ra->n_rlimits; i++)
        x.limits[i] = (struct rlimit){ra->rlimits[i].value, ra->rlimits[i].value};
    if (ra->set_oom) {
        int n = snprintf(x.oom, sizeof(x.oom), "%d", ra->oom_score_adj);
        if (n < 0 || (size_t)n >= sizeof(x.oom))
            return -EINVAL;
        x.oom_len = (size_t)n;
    }

    map = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1,
               0);
    if (map == MAP_FAILED)
        return -errno;
    if (mprotect(map, page, PROT_NONE) < 0) {
        r = -errno;
        goto out;
    }
    struct clone_args ca = {
        .flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD,
        .pidfd = (uintptr_t)&pidfd,
        .exit_signal = SIGCHLD,
        .stack = (uintptr_t)(map + page),
        .stack_size = CLONE_STACK_SIZE,
    };
    if (ra->into_cgroup) {
        ca.flags |= CLONE_INTO_CGROUP;
        ca.cgroup = (uint64_t)ra->cgroup_fd;
    }

    /* Every signal blocked across the clone, glibc's internal ones too
     * (pthread_sigmask leaves them out, hence the raw call), so no handler
     * runs in the child before it has reset the dispositions. */
    if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, KERNEL_SIGSET_SIZE) < 0) {
        r = -errno;
        goto out;
    }
    if (ra->set)
        dumpable_hold();
    pid = clone_child(&ca, map + map_size, &x);
    if (ra->set)
        dumpable_release();
    (void)syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, KERNEL_SIGSET_SIZE);
    if (pid < 0) {
        r = (int)pid;
        goto out;
    }
    if (x.err != 0) {
        r = -x.err;
        (void)WS_RETRY_EINTR(waitpid((pid_t)pid, NULL, 0));
        ws_close_fd(&pidfd);
        goto out;
    }
    *ret_pid = (pid_t)pid;
    *ret_pidfd = pidfd;
    r = 0;
out:
    munmap(map, map_size);
    return r;
}

#else

static int spawn_clone(const struct ws_spawn_opts *o, const struct child_fds *f, pid_t *ret_pid,
                       int *ret_pidfd)
{
    (void)o;
    (void)f;
    (void)ret_pid;
    (void)ret_pidfd;
    return -ENOSYS;
}

#endif

int ws_spawn(const struct ws_spawn_opts *o, struct ws_child **ret)
{
    struct child_fds f;
    struct ws_child *c = NULL;
    unsigned short rows = 0, cols = 0;
    bool run_as;
    pid_t pid;
    int r;

    child_fds_init(&f);
    if (!o || !ret || !o->argv || !o->argv[0] || o->argv[0][0] != '/' || !o->envp)
        return -EINVAL;
    if (o->stdin_mode != WS_SPAWN_STDIN_NULL && o->stdin_mode != WS_SPAWN_STDIN_PIPE)
        return -EINVAL;
    if (o->output_null && o->pty)
        return -EINVAL;
    if (o->cwd_fd < 0)
        return -EBADF;
    if (o->n_keep_fds > WS_SPAWN_KEEP_FDS_MAX || (o->n_keep_fds && !o->keep_fds))
        return -EINVAL;
    for (size_t i = 0; i < o->n_keep_fds; i++)
        if (o->keep_fds[i] < 0)
            return -EBADF;
    run_as = run_as_asked(&o->run_as);
    if (run_as) {
        r = check_run_as(&o->run_as);
        if (r < 0)
            return r;
    }
    if (o->pty) {
        r = check_dim(o->pty_rows, WS_SPAWN_PTY_ROWS_DEFAULT, &rows);
        if (r < 0)
            return r;
        r = check_dim(o->pty_cols, WS_SPAWN_PTY_COLS_DEFAULT, &cols);
        if (r < 0)
            return r;
    }

    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->pid = -1;
    c->pidfd = c->stdin_fd = c->stdout_fd = c->stderr_fd = c->pty_fd = -1;

    r = make_child_fds(o, rows, cols, c, &f);
    if (r < 0)
        goto out;

    if (run_as) {
        /* The pidfd comes with the clone; a failed child is reaped. */
        r = spawn_clone(o, &f, &c->pid, &c->pidfd);
        if (r < 0)
            goto out;
    } else {
        /* On failure glibc has already reaped the child that could not
         * exec. */
        r = spawn_posix(o, &f, &pid);
        if (r < 0)
            goto out;
        c->pid = pid;

        /* The child is ours and unreaped, so `pid` still names it. */
        c->pidfd = pidfd_open(pid, 0);
        if (c->pidfd < 0) {
            r = -errno;
            kill(-pid, SIGKILL);
            (void)WS_RETRY_EINTR(waitpid(pid, NULL, 0));
            goto out;
        }
    }

    *ret = c;
    c = NULL;
    r = 0;
out:
    child_fds_close(&f);
    if (c) {
        child_close_fds(c);
        free(c);
    }
    return r;
}

int ws_child_detached(const struct ws_spawn_opts *o, struct ws_child **ret, int ret_fds[3],
                      size_t *ret_n)
{
    struct child_fds f;
    struct ws_child *c = NULL;
    unsigned short rows = 0, cols = 0;
    int r;

    child_fds_init(&f);
    if (!o || !ret || !ret_fds || !ret_n || o->output_null || o->n_keep_fds)
        return -EINVAL;
    if (o->stdin_mode != WS_SPAWN_STDIN_NULL && o->stdin_mode != WS_SPAWN_STDIN_PIPE)
        return -EINVAL;
    if (o->pty) {
        r = check_dim(o->pty_rows, WS_SPAWN_PTY_ROWS_DEFAULT, &rows);
        if (r < 0)
            return r;
        r = check_dim(o->pty_cols, WS_SPAWN_PTY_COLS_DEFAULT, &cols);
        if (r < 0)
            return r;
    }
    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->pid = 0;
    c->detached = true;
    atomic_init(&c->exit_given, false);
    c->stdin_fd = c->stdout_fd = c->stderr_fd = c->pty_fd = -1;
    c->pidfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->pidfd < 0) {
        r = -errno;
        goto out;
    }
    r = make_child_fds(o, rows, cols, c, &f);
    if (r < 0)
        goto out;
    if (f.pty) {
        /* The slave by name, as the child would open it: no controlling
         * terminal of the server's. */
        ret_fds[0] = open(f.pty_name, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (ret_fds[0] < 0) {
            r = -errno;
            goto out;
        }
        *ret_n = 1;
    } else {
        if (f.in < 0) {
            f.in = open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (f.in < 0) {
                r = -errno;
                goto out;
            }
        }
        ret_fds[0] = f.in;
        ret_fds[1] = f.out;
        ret_fds[2] = f.err;
        f.in = f.out = f.err = -1;
        *ret_n = 3;
    }
    *ret = c;
    c = NULL;
    r = 0;
out:
    child_fds_close(&f);
    if (c) {
        child_close_fds(c);
        free(c);
    }
    return r;
}

void ws_child_detached_started(struct ws_child *c, pid_t pid)
{
    if (c && c->detached)
        c->pid = pid;
}

void ws_child_detached_exit(struct ws_child *c, const struct ws_child_exit *e)
{
    if (!c || !c->detached || atomic_load(&c->exit_given))
        return;
    c->exit = *e;
    atomic_store_explicit(&c->exit_given, true, memory_order_release);
    uint64_t one = 1;
    (void)!write(c->pidfd, &one, sizeof(one));
}

pid_t ws_child_pid(const struct ws_child *c)
{
    return c->pid;
}

int ws_child_pidfd(const struct ws_child *c)
{
    return c->pidfd;
}

int ws_child_stdin_fd(const struct ws_child *c)
{
    return c->stdin_fd;
}

int ws_child_stdout_fd(const struct ws_child *c)
{
    return c->stdout_fd;
}

int ws_child_stderr_fd(const struct ws_child *c)
{
    return c->stderr_fd;
}

int ws_child_pty_fd(const struct ws_child *c)
{
    return c->pty_fd;
}

int ws_child_signal(struct ws_child *c, int sig)
{
    if (!c || sig < 0 || sig >= NSIG)
        return -EINVAL;
    if (c->group_gone || c->detached)
        return -ESRCH;
    if (kill(-c->pid, sig) < 0) {
        int r = -errno;
        if (r == -ESRCH && c->reaped)
            c->group_gone = true;
        return r;
    }
    return 0;
}

int ws_child_resize(struct ws_child *c, unsigned rows, unsigned cols)
{
    if (!c)
        return -EINVAL;
    if (c->pty_fd < 0)
        return -ENOTTY;
    if (rows == 0 || cols == 0 || rows > WS_SPAWN_PTY_DIM_MAX || cols > WS_SPAWN_PTY_DIM_MAX)
        return -EINVAL;
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    if (ioctl(c->pty_fd, TIOCSWINSZ, &ws) < 0)
        return -errno;
    return 0;
}

int ws_child_close_stdin(struct ws_child *c)
{
    if (!c)
        return -EINVAL;
    if (!c->stdin_piped)
        return -EBADF;
    ws_close_fd(&c->stdin_fd);
    return 0;
}

int ws_child_try_reap(struct ws_child *c, struct ws_child_exit *ret)
{
    if (!c || !ret)
        return -EINVAL;
    int r = child_wait(c, false);
    if (r < 0)
        return r;
    *ret = c->exit;
    return 0;
}

int ws_child_kill_tree(struct ws_child *c, int grace_ms)
{
    if (!c)
        return -EINVAL;
    if (c->detached)
        return 0;
    if (grace_ms > WS_SPAWN_GRACE_MS_MAX)
        grace_ms = WS_SPAWN_GRACE_MS_MAX;

    /* Fast path, and no signal to a group number that may be recycled. */
    if (!group_alive(c))
        return c->lost ? -ECHILD : 0;

    if (grace_ms > 0) {
        (void)ws_child_signal(c, SIGTERM);
        (void)ws_child_signal(c, SIGCONT);
        if (wait_group_until(c, ws_mono_ms() + grace_ms))
            return c->lost ? -ECHILD : 0;
    }

    int64_t deadline = ws_mono_ms() + WS_SPAWN_SETTLE_MS;
    for (;;) {
        /* Again on every round: a member may have forked meanwhile. */
        (void)ws_child_signal(c, SIGKILL);
        if (wait_group_until(c, ws_mono_ms() + WS_SPAWN_POLL_STEP_MS))
            return c->lost ? -ECHILD : 0;
        if (ws_mono_ms() >= deadline)
            return -ETIMEDOUT;
    }
}

void ws_child_free(struct ws_child *c)
{
    if (!c)
        return;
    if (c->detached) {
        child_close_fds(c);
        free(c);
        return;
    }
    (void)ws_child_kill_tree(c, 0);
    /* Only if the leader is stuck past the settle time: block rather than
     * leave a zombie behind. */
    (void)child_wait(c, true);
    child_close_fds(c);
    free(c);
}
