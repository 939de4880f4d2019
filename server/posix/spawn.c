/* Child process trees through posix_spawn + pidfd; see spawn.h. */
#include "server/posix/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/pidfd.h>
#include <sys/resource.h>
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

int ws_spawn(const struct ws_spawn_opts *o, struct ws_child **ret)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    bool fa_init = false, attr_init = false;
    int child_in = -1, child_out = -1, child_err = -1;
    int keep[WS_SPAWN_KEEP_FDS_MAX];
    char pty_name[WS_SPAWN_PTY_NAME_MAX];
    struct ws_child *c = NULL;
    unsigned short rows = 0, cols = 0;
    sigset_t set;
    pid_t pid;
    int r;

    if (!o || !ret || !o->argv || !o->argv[0] || o->argv[0][0] != '/' || !o->envp)
        return -EINVAL;
    if (o->stdin_mode != WS_SPAWN_STDIN_NULL && o->stdin_mode != WS_SPAWN_STDIN_PIPE)
        return -EINVAL;
    if (o->cwd_fd < 0)
        return -EBADF;
    if (o->n_keep_fds > WS_SPAWN_KEEP_FDS_MAX || (o->n_keep_fds && !o->keep_fds))
        return -EINVAL;
    for (size_t i = 0; i < WS_SPAWN_KEEP_FDS_MAX; i++)
        keep[i] = -1;
    for (size_t i = 0; i < o->n_keep_fds; i++)
        if (o->keep_fds[i] < 0)
            return -EBADF;
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

    if (o->pty) {
        r = open_pty(rows, cols, &c->pty_fd, pty_name, sizeof(pty_name));
        if (r < 0)
            goto out;
        /* glibc runs setsid() before the file actions, so this open (no
         * O_NOCTTY) makes the slave the new session's controlling tty. */
        r = -posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, pty_name,
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
        if (o->stdin_mode == WS_SPAWN_STDIN_PIPE) {
            r = make_pipe(false, &c->stdin_fd, &child_in);
            if (r < 0)
                goto out;
            c->stdin_piped = true;
            r = -posix_spawn_file_actions_adddup2(&fa, child_in, STDIN_FILENO);
        } else {
            r = -posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
        }
        if (r < 0)
            goto out;
        r = make_pipe(true, &c->stdout_fd, &child_out);
        if (r < 0)
            goto out;
        r = make_pipe(true, &c->stderr_fd, &child_err);
        if (r < 0)
            goto out;
        r = -posix_spawn_file_actions_adddup2(&fa, child_out, STDOUT_FILENO);
        if (r < 0)
            goto out;
        r = -posix_spawn_file_actions_adddup2(&fa, child_err, STDERR_FILENO);
        if (r < 0)
            goto out;
    }
    /* Kept fds land at 3, 4, ... from copies above that range, so no
     * dup2 overwrites a source another one still needs. */
    for (size_t i = 0; i < o->n_keep_fds; i++) {
        keep[i] = fcntl(o->keep_fds[i], F_DUPFD_CLOEXEC, (int)(STDERR_FILENO + 1 + o->n_keep_fds));
        if (keep[i] < 0) {
            r = -errno;
            goto out;
        }
        r = -posix_spawn_file_actions_adddup2(&fa, keep[i], STDERR_FILENO + 1 + (int)i);
        if (r < 0)
            goto out;
    }
    r = -posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1 + (int)o->n_keep_fds);
    if (r < 0)
        goto out;

    /* On failure glibc has already reaped the child that could not exec. */
    r = -posix_spawn(&pid, o->argv[0], &fa, &attr, (char *const *)o->argv, (char *const *)o->envp);
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

    *ret = c;
    c = NULL;
    r = 0;
out:
    if (fa_init)
        posix_spawn_file_actions_destroy(&fa);
    if (attr_init)
        posix_spawnattr_destroy(&attr);
    ws_close_fd(&child_in);
    ws_close_fd(&child_out);
    ws_close_fd(&child_err);
    for (size_t i = 0; i < WS_SPAWN_KEEP_FDS_MAX; i++)
        ws_close_fd(&keep[i]);
    if (c) {
        child_close_fds(c);
        free(c);
    }
    return r;
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
    if (c->group_gone)
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
    (void)ws_child_kill_tree(c, 0);
    /* Only if the leader is stuck past the settle time: block rather than
     * leave a zombie behind. */
    (void)child_wait(c, true);
    child_close_fds(c);
    free(c);
}
