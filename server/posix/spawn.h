/* Starting and controlling a child process tree on the host.
 *
 * The server is multithreaded (gRPC), so there is no fork(): ws_spawn() uses
 * glibc's posix_spawn(), which clones with CLONE_VM | CLONE_VFORK, runs the
 * file actions in the child and reports an exec failure (ENOENT, EACCES,
 * ENOEXEC...) as its own return value after reaping the failed child. A
 * pidfd is opened right after the spawn; since only this module reaps the
 * child, its pid cannot be recycled while the struct ws_child lives.
 *
 * posix_spawn can neither change the child's identity nor its limits, so
 * when opts->run_as asks for anything (see struct ws_run_as) the child is
 * made by this module instead: clone3(CLONE_VM | CLONE_VFORK | CLONE_PIDFD
 * [| CLONE_INTO_CGROUP]) on a private stack, a child that makes raw system
 * calls only (glibc's setresuid/setgroups would signal every thread of the
 * server through the shared memory), the same file setup as below, and an
 * exec failure reported back the same way. The pidfd comes from the clone
 * itself. Where clone3 is refused (a kernel without it, or a container
 * runtime's seccomp profile answering it with ENOSYS, or with EPERM when a
 * call with no arguments gets that too), the legacy clone(2) makes the same
 * child with the same flags, CLONE_INTO_CGROUP aside; the first refusal is
 * remembered for the life of the process. x86_64 only: elsewhere such a
 * request fails with -ENOSYS.
 * The credential change of that child marks the shared address space
 * non-dumpable for a moment (the kernel applies fs.suid_dumpable to the mm
 * of a task whose uid changes); the server's own setting is put back once
 * no such spawn is in flight, so nothing else in the server may change it.
 *
 * What the child gets:
 *   - its own session and process group (POSIX_SPAWN_SETSID): pgid == sid
 *     == pid, so the whole tree is signalled with kill(-pid, sig);
 *   - an empty signal mask and every signal's disposition at its default,
 *     whatever the server blocks or ignores (the server ignores SIGPIPE),
 *     glibc's internal signals 32 and 33 included (glibc's own spawn would
 *     leave them ignored);
 *   - exactly fds 0-2 (and opts->keep_fds at 3, 4, ...), everything else
 *     closed (closefrom in the child);
 *   - exactly opts->envp as its environment, nothing inherited;
 *   - opts->cwd_fd as its working directory (fchdir);
 *   - the server's umask, inherited unchanged: the server sets 077 at start,
 *     so files a command creates are private to the user it runs as (the
 *     server's, or opts->run_as's) unless the command widens them itself;
 *   - stdin: /dev/null, or a pipe (WS_SPAWN_STDIN_PIPE); stdout and stderr:
 *     two separate pipes (or both /dev/null with opts->output_null), or
 *   - with opts->pty, a pseudo-terminal instead: the slave, opened by name
 *     after setsid() and without O_NOCTTY, becomes the controlling terminal
 *     and fds 0, 1 and 2; stdin_mode is ignored (input goes to the master);
 *     with run_as.set the slave is given to run_as.uid, as login does, so
 *     the command can open its terminal by name.
 * The parent's ends (pipes, PTY master) are O_CLOEXEC | O_NONBLOCK and owned
 * by the struct ws_child: callers may read, write and poll them but must
 * not close them (except through ws_child_close_stdin).
 *
 * Reaping: ws_child_try_reap() and ws_child_kill_tree() call wait4() on the
 * child's pid. The rest of the server must not reap with waitpid(-1, ...)
 * nor set SIGCHLD to SIG_IGN (both steal the exit status: -ECHILD).
 *
 * Limitation: a descendant that calls setsid() (or setpgid() into another
 * group) leaves the process group, and ws_child_signal() and
 * ws_child_kill_tree() no longer reach it. The sandbox providers close that
 * hole with a pid namespace; the local provider needs a cgroup or a child
 * subreaper sweep on top of this module. When the server is a subreaper,
 * ws_child_kill_tree() reaps the group members re-parented to it.
 *
 * Thread safety: ws_spawn() may be called from many threads at once (every
 * fd it makes is O_CLOEXEC, so a concurrent spawn never inherits another's
 * pipe). A struct ws_child is used by one thread at a time.
 *
 * Returns: int functions return >= 0 or a negated errno; ret_* are written
 * only on success.
 */
#ifndef WS_POSIX_SPAWN_H
#define WS_POSIX_SPAWN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

/* Largest grace period ws_child_kill_tree() waits between SIGTERM and
 * SIGKILL; longer requests are clamped. */
#define WS_SPAWN_GRACE_MS_MAX 60000
/* After SIGKILL, how long ws_child_kill_tree() waits for the leader to die
 * and for the group to empty before giving up with -ETIMEDOUT. */
#define WS_SPAWN_SETTLE_MS 5000
/* Polling step while waiting for group members other than the leader,
 * which have no pidfd here. */
#define WS_SPAWN_POLL_STEP_MS 5
/* Terminal size bounds (struct winsize holds unsigned shorts). */
#define WS_SPAWN_PTY_DIM_MAX 4096
/* Default terminal size when opts->pty_rows / pty_cols are 0. */
#define WS_SPAWN_PTY_ROWS_DEFAULT 24
#define WS_SPAWN_PTY_COLS_DEFAULT 80
/* Most fds a child may get besides 0-2 (a sandbox: three of its own and
 * one per bind). */
#define WS_SPAWN_KEEP_FDS_MAX 72
/* Buffer for the PTY slave's path (/dev/pts/N). */
#define WS_SPAWN_PTY_NAME_MAX 64
/* Most resource limits one spawn sets (a local command: processes, file
 * size, address space, and one to spare). */
#define WS_SPAWN_RLIMITS_MAX 4

enum ws_spawn_stdin {
    WS_SPAWN_STDIN_NULL = 0, /* /dev/null: a read gets EOF at once */
    WS_SPAWN_STDIN_PIPE,     /* a pipe; the parent writes ws_child_stdin_fd() */
};

/* One resource limit for the child: soft and hard both become `value`, so
 * the command cannot raise it back (an unprivileged process may lower its
 * hard limit but never raise it). */
struct ws_rlimit {
    int resource; /* RLIMIT_NPROC, RLIMIT_FSIZE, RLIMIT_AS... */
    rlim_t value; /* RLIM_INFINITY allowed */
};

/* Who the child becomes and what bounds it, applied in the child before the
 * exec. Each part is asked separately (zero-initialised: nothing asked, and
 * ws_spawn keeps to posix_spawn); anything asked needs the privileges to do
 * it (CAP_SETUID/CAP_SETGID for the identity, CAP_SYS_RESOURCE to raise a
 * hard limit or lower oom_score_adj), else ws_spawn fails with the child's
 * -EPERM. */
struct ws_run_as {
    /* Switch identity: the child's real, effective and saved uid become
     * `uid`, its gids `gid`, its supplementary groups exactly {gid}, so
     * it keeps none of the server's group memberships. Its capabilities
     * (effective, permitted, inheritable, ambient) are cleared and
     * no_new_privs is set, so neither the command nor anything it execs
     * (set-user-ID or file-capability programs included) regains the
     * server's privileges. Neither id may be 0 (the child would stay root)
     * nor -1 (setresuid's "unchanged"): -EINVAL. */
    bool set;
    uid_t uid;
    gid_t gid;
    /* Limits that hold for the command and everything it starts, set
     * before the identity switch (raising a hard limit needs the server's
     * privileges). RLIMIT_NPROC counts the processes of the child's real
     * uid, so with a uid of its own it caps exactly that uid's processes.
     * At most WS_SPAWN_RLIMITS_MAX; a resource out of range is -EINVAL. */
    struct ws_rlimit rlimits[WS_SPAWN_RLIMITS_MAX];
    size_t n_rlimits;
    /* Write oom_score_adj (-1000..1000, else -EINVAL) for the child, so
     * that under memory pressure the kernel kills commands before the
     * server; the server's own value is left as it is. Without set_oom
     * the child inherits the server's value. */
    bool set_oom;
    int oom_score_adj;
    /* Start the child in the cgroup v2 directory `cgroup_fd` (an
     * O_DIRECTORY fd, borrowed) through CLONE_INTO_CGROUP, so it is
     * inside its caps from its first instruction and no cgroup.procs
     * write (and its wait for an RCU grace period) is needed. Where clone3
     * is refused, the child writes itself to the directory's cgroup.procs
     * instead, as its first step and with the server's identity; it is in
     * the cgroup before it runs anything of the command's, but a pids.max
     * already reached does not stop that move as it stops a clone into
     * the cgroup. Off unless into_cgroup; then cgroup_fd < 0 is -EBADF,
     * and what the kernel refuses (not a v2 cgroup: EBADF; a cgroup with
     * controllers in its subtree_control: EBUSY; a removed one: ENODEV,
     * or ENOENT from the cgroup.procs open...) is ws_spawn's error. */
    bool into_cgroup;
    int cgroup_fd;
};

struct ws_spawn_opts {
    /* NULL-terminated; argv[0] is the absolute path executed (no PATH
     * search), already vetted by the shell guard. Borrowed for the call. */
    const char *const *argv;
    /* NULL-terminated "NAME=value" strings: the complete environment. */
    const char *const *envp;
    /* Directory fd the child starts in (e.g. ws_posixfs_open_dir_fd());
     * borrowed, the caller keeps it. */
    int cwd_fd;
    enum ws_spawn_stdin stdin_mode;
    /* stdout and stderr go to /dev/null, not pipes (a helper whose
     * chatter nobody reads must never block on a full pipe); the
     * child's stdout and stderr fds are then -1. Not with pty. */
    bool output_null;
    /* A pseudo-terminal for fds 0-2 instead of pipes. rows/cols 0 means
     * the default, at most WS_SPAWN_PTY_DIM_MAX. */
    bool pty;
    unsigned pty_rows;
    unsigned pty_cols;
    /* The PTY slave does not become the new session's controlling
     * terminal (a wrapper in between makes it that of the command's own
     * session). */
    bool pty_noctty;
    /* Borrowed fds the child gets as 3, 4, ... in this order (a sandbox's
     * seccomp program and status pipes); at most WS_SPAWN_KEEP_FDS_MAX. */
    const int *keep_fds;
    size_t n_keep_fds;
    /* Identity and limits of the child; all off when zero-initialised. */
    struct ws_run_as run_as;
};

struct ws_child;

/* How the group leader ended, from wait4(). */
struct ws_child_exit {
    bool signaled;    /* killed by `signal`, else exited with `exit_code` */
    int exit_code;    /* 0-255 when !signaled, else 0 */
    int signal;       /* the terminating signal when signaled, else 0 */
    bool core_dumped; /* signaled with a core dump */
    /* CPU time and peak resident set of the leader and of the descendants
     * it waited for (rusage semantics). */
    uint64_t user_ms;
    uint64_t sys_ms;
    uint64_t max_rss_kib;
};

/* Starts opts->argv. Returns 0 and a new child in *ret (free with
 * ws_child_free), or:
 *   -EINVAL  NULL opts/argv/envp, empty argv, argv[0] not absolute, a PTY
 *            dimension over WS_SPAWN_PTY_DIM_MAX, unknown stdin_mode, a bad
 *            run_as field (see struct ws_run_as);
 *   -EBADF   cwd_fd < 0 (or not open: reported by the child's fchdir);
 *   -ENOENT, -EACCES, -ENOEXEC, -ENOTDIR... the exec (or fchdir) failed in
 *            the child; the failed child is already reaped and every fd
 *            this call opened is closed again;
 *   -EPERM   a run_as step the server lacks the privilege for (same: the
 *            child is reaped);
 *   -EMFILE, -ENOMEM, -EAGAIN... resource exhaustion (-EAGAIN also from
 *            an exec over run_as's RLIMIT_NPROC);
 *   -ENOSYS  no pidfd_open (Linux < 5.3; the child is killed and reaped),
 *            or run_as asked for anything where it cannot be done (not
 *            x86_64; Linux < 5.2 has no CLONE_PIDFD, close_range needs 5.9
 *            and CLONE_INTO_CGROUP, unless clone3 is refused, 5.7). */
int ws_spawn(const struct ws_spawn_opts *o, struct ws_child **ret);

/* A child whose process another party starts (the in-box agent, whose
 * reaper runs the command inside a box). The pipes or terminal are made as
 * ws_spawn makes them from o's stdin_mode, pty and its size (argv, envp,
 * cwd_fd and run_as are the other party's business; keep_fds and
 * output_null must be unset), and the child's ends come back in ret_fds,
 * O_CLOEXEC, for the caller to pass on and close: stdin (/dev/null when
 * not piped), stdout and stderr (*ret_n 3), or the terminal's slave
 * (*ret_n 1). The parent's ends are c's as usual. There is no process
 * here: ws_child_pid is 0 until ws_child_detached_started names one (the
 * other side's), ws_child_signal answers -ESRCH and ws_child_kill_tree 0
 * (the other party ends it), ws_child_pidfd is an eventfd that becomes
 * readable once ws_child_detached_exit gave the exit, which
 * ws_child_try_reap then returns; ws_child_free frees without waiting. */
int ws_child_detached(const struct ws_spawn_opts *o, struct ws_child **ret, int ret_fds[3],
                      size_t *ret_n);
void ws_child_detached_started(struct ws_child *c, pid_t pid);
/* The exit of a detached child; the first one given counts. Any thread,
 * while c lives. */
void ws_child_detached_exit(struct ws_child *c, const struct ws_child_exit *e);

/* The leader's pid, which is also the session id and process group id. */
pid_t ws_child_pid(const struct ws_child *c);
/* The leader's pidfd: becomes readable (POLLIN) when the leader exits.
 * Owned by c. */
int ws_child_pidfd(const struct ws_child *c);
/* Parent ends, owned by c; -1 when absent (stdin not piped, or closed by
 * ws_child_close_stdin; stdout/stderr in PTY mode; the master without a
 * PTY). */
int ws_child_stdin_fd(const struct ws_child *c);
int ws_child_stdout_fd(const struct ws_child *c);
int ws_child_stderr_fd(const struct ws_child *c);
int ws_child_pty_fd(const struct ws_child *c);

/* Sends `sig` (0 probes) to the child's whole process group. Works after the
 * leader has exited while other members live on. Returns 0, -ESRCH when no
 * member is left (also once the tree is known dead: no signal is sent then,
 * so a recycled pid is never hit), -EINVAL for a bad signal number. */
int ws_child_signal(struct ws_child *c, int sig);

/* Sets the terminal size (TIOCSWINSZ on the master; the child gets
 * SIGWINCH). Returns 0, -ENOTTY without a PTY, -EINVAL for a dimension of 0
 * or over WS_SPAWN_PTY_DIM_MAX. */
int ws_child_resize(struct ws_child *c, unsigned rows, unsigned cols);

/* Closes the parent's end of the stdin pipe so the child reads EOF.
 * Returns 0 (also when already closed), -EBADF when stdin was not a pipe.
 * In PTY mode, write the terminal's EOF character (^D) to the master. */
int ws_child_close_stdin(struct ws_child *c);

/* Non-blocking reap of the leader. Returns 0 and fills *ret once the
 * leader has exited (again on later calls: the status is kept), -EAGAIN
 * while it runs, -ECHILD when someone else reaped it. Other group members
 * may still run after the leader exited; ws_child_kill_tree ends them. */
int ws_child_try_reap(struct ws_child *c, struct ws_child_exit *ret);

/* Ends the whole tree: SIGTERM (and SIGCONT, so stopped members act on it)
 * to the group, waits up to grace_ms (clamped to WS_SPAWN_GRACE_MS_MAX; <= 0
 * skips the wait) for the group to empty, then SIGKILL to the group, reaps
 * the leader (its status stays available to ws_child_try_reap) and waits
 * until no member of the group is left. Blocks up to grace_ms +
 * WS_SPAWN_SETTLE_MS. Returns 0 when the group is gone (also when it
 * already was), -ETIMEDOUT when members were still there after the settle
 * time (a process stuck in the kernel, or a zombie its parent does not
 * reap), -ECHILD when the leader was reaped by someone else. Members that
 * left the group (setsid) are not reached: see the limitation above. */
int ws_child_kill_tree(struct ws_child *c, int grace_ms);

/* Ends the tree if anything of it is left (ws_child_kill_tree with no
 * grace, i.e. SIGKILL at once: call that first for a graceful stop), reaps,
 * closes every fd and frees c. Blocks up to WS_SPAWN_SETTLE_MS, longer only
 * if the leader is stuck in the kernel (it is reaped rather than left a
 * zombie). Accepts NULL. */
void ws_child_free(struct ws_child *c);

#endif
