/*
 * workspaced-sandbox-init: pid 1 of a local-sandbox command's pid namespace.
 *
 *     workspaced-sandbox-init [--wait-fd=FD] STATUS_FD PROGRAM [ARGS...]
 *
 * With --wait-fd, FD is a socket to the server: init first writes "r" there (the sandbox is
 * built: bubblewrap is done with its network namespace, so the server may attach the network
 * now without racing bubblewrap's own setup of the loopback device), with its network
 * namespace (/proc/self/ns/net) attached as SCM_RIGHTS, so the server needs no right to open
 * another uid's /proc/PID/ns (CAP_SYS_PTRACE) to reach it; then it reads FD to its end:
 * the server writes "1" once the sandbox's network is up, or "0" and a reason when it could not
 * be set up, and closes it. Anything but "1" (the server gone: nothing at all) means no command
 * is started: a sandbox that asked for a network never runs without the one it was given.
 *
 * bwrap --as-pid-1 execs this; it forks PROGRAM (an absolute path, argv[0] = PROGRAM) as the
 * command, reaps every orphan the command leaves, and when the command itself ends writes
 * exactly one line to STATUS_FD:
 *
 *     exited <code>\n            (126/127 when PROGRAM could not be executed)
 *     signaled <signo>\n  or  signaled <signo> core\n
 *
 * then SIGKILLs everything else in the namespace, reaps it, and exits with the command's code
 * (128 + signo when it was signaled). No status line means the command never started: 127 on
 * misuse, 125 when init itself failed, with a one-line message on stderr.
 *
 * All signals stay blocked in pid 1. HUP, INT, QUIT, TERM, USR1 and USR2 sent from outside the
 * namespace (the server) are forwarded to the command's process group; everything else is
 * consumed and ignored.
 *
 * Built static and without sanitizers: it runs inside the sandbox, where the host's shared
 * libraries are not a dependency we want.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include "server/base/io.h"
#include "server/progs/netgate.h"

#define PREFIX          "workspaced-sandbox-init: "
#define STATUS_FD_LIMIT 65535 /* "small": a pipe end the server dup2'd into place */
#define EXIT_MISUSE     127
#define EXIT_INTERNAL   125
#define WAIT_FD_OPT     "--wait-fd="

extern char **environ;

/* One line on stderr, assembled first so it is one write(). Failure to report is ignored. */
static void say(const char *what, int err)
{
    char line[256];
    int n = snprintf(line, sizeof(line), PREFIX "%s%s%s\n", what, err ? ": " : "",
                     err ? strerror(err) : "");
    if (n > 0)
        (void)ws_write_all(STDERR_FILENO, line,
                           (size_t)n < sizeof(line) ? (size_t)n : sizeof(line));
}

/* Parses a decimal fd number in [3, STATUS_FD_LIMIT]; returns it or -1. */
static int parse_fd(const char *s)
{
    long v = 0;
    if (*s == '\0')
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (*s - '0');
        if (v > STATUS_FD_LIMIT)
            return -1;
    }
    return v >= 3 ? (int)v : -1;
}

/* In the forked child: a clean signal state, only fds 0-2, its own job, then PROGRAM. */
static __attribute__((noreturn)) void run_command(char **argv)
{
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigset_t none;

    /* SIG_IGN survives execve; EINVAL (SIGKILL, SIGSTOP, glibc's internal ones) is expected. */
    for (int sig = 1; sig < NSIG; sig++)
        (void)sigaction(sig, &dfl, NULL);
    if (close_range(3, ~0U, 0) < 0) {
        struct rlimit rl;
        unsigned int max = 65536;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
            max = (unsigned int)rl.rlim_cur;
        for (unsigned int fd = 3; fd < max; fd++)
            (void)close((int)fd);
    }
    /* bwrap --new-session detached the PTY; a new session takes it back as controlling tty.
     * The kernel then makes this session's group the terminal's foreground group. */
    if (isatty(STDIN_FILENO)) {
        if (setsid() < 0 || ioctl(STDIN_FILENO, TIOCSCTTY, 0) < 0) {
            say("cannot set the controlling terminal", errno);
            _exit(126);
        }
    } else if (setpgid(0, 0) < 0) {
        say("cannot create a process group", errno);
        _exit(126);
    }
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) < 0) {
        say("cannot unblock signals", errno);
        _exit(126);
    }
    execve(argv[0], argv, environ);
    int err = errno;
    say("cannot execute", err);
    _exit(err == ENOENT ? 127 : 126);
}

/* Signals the server may send to pid 1 meaning "tell the command". */
static int forwarded(int sig)
{
    return sig == SIGHUP || sig == SIGINT || sig == SIGQUIT || sig == SIGTERM || sig == SIGUSR1 ||
           sig == SIGUSR2;
}

/* Reaps until the command itself is reaped; returns its wait status or -errno. */
static int wait_command(pid_t child, const sigset_t *all)
{
    for (;;) {
        int status;
        pid_t pid;
        while ((pid = WS_RETRY_EINTR(wait4(-1, &status, WNOHANG | __WALL, NULL))) > 0) {
            if (pid == child)
                return status;
        }
        if (pid < 0)
            return -errno; /* ECHILD here would mean the command vanished unreaped */
        siginfo_t si;
        int sig = sigwaitinfo(all, &si);
        if (sig < 0 && errno != EINTR)
            return -errno;
        /* si_pid is 0 when the sender is outside this namespace, i.e. not the command itself. */
        if (sig > 0 && forwarded(sig) && si.si_code == SI_USER && si.si_pid == 0) {
            if (kill(-child, sig) < 0 && errno == ESRCH)
                (void)kill(child, sig); /* before the child's setsid/setpgid */
        }
    }
}

/* The server's word on the sandbox's network (netgate.h); 0 when it is "1", else -1 after saying
 * why on stderr. */
static int wait_for_server(int wait_fd)
{
    char why[WS_NETGATE_MSG_MAX + 128];

    if (ws_netgate_pass(wait_fd, why, sizeof(why)) == 0)
        return 0;
    say(why, 0);
    return -1;
}

int main(int argc, char **argv)
{
    sigset_t all;
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    int wait_fd = -1;

    if (argc >= 2 && strncmp(argv[1], WAIT_FD_OPT, strlen(WAIT_FD_OPT)) == 0) {
        wait_fd = parse_fd(argv[1] + strlen(WAIT_FD_OPT));
        if (wait_fd < 0) {
            say("usage: --wait-fd=FD(>=3)", 0);
            return EXIT_MISUSE;
        }
        argv++;
        argc--;
    }
    int status_fd = argc >= 3 ? parse_fd(argv[1]) : -1;
    if (status_fd < 0 || argv[2][0] != '/' || status_fd == wait_fd) {
        say("usage: workspaced-sandbox-init [--wait-fd=FD] STATUS_FD(>=3) /ABSOLUTE/PROGRAM "
            "[ARGS...]",
            0);
        return EXIT_MISUSE;
    }
    if (fcntl(status_fd, F_SETFD, FD_CLOEXEC) < 0) {
        say("STATUS_FD is not open", errno);
        return EXIT_MISUSE;
    }
    /* kill(-1, SIGKILL) below must only ever reach a sandbox, never a host. */
    if (getpid() != 1) {
        say("refusing to run: not pid 1 of a pid namespace", 0);
        return EXIT_MISUSE;
    }
    /* An inherited SIG_IGN or SA_NOCLDWAIT on SIGCHLD would make the kernel discard statuses. */
    sigfillset(&all);
    if (sigprocmask(SIG_SETMASK, &all, NULL) < 0 || sigaction(SIGCHLD, &dfl, NULL) < 0) {
        say("cannot set up signals", errno);
        return EXIT_INTERNAL;
    }
    /* The command runs as the same uid, without capabilities: a dumpable
     * init would let it open /proc/1/fd (the status pipe: a forged exit
     * record) and /proc/1/mem. The child is dumpable again after its exec. */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
        say("cannot make init undumpable", errno);
        return EXIT_INTERNAL;
    }
    if (wait_fd >= 0 && wait_for_server(wait_fd) < 0)
        return EXIT_INTERNAL;
    pid_t child = fork();
    if (child < 0) {
        say("cannot fork", errno);
        return EXIT_INTERNAL;
    }
    if (child == 0)
        run_command(argv + 2);

    /* Held by pid 1, stdin would keep the server's writes blocking on a full pipe after the
     * command closed it, and stdout would hide its EOF. stderr stays for the messages below. */
    (void)close(STDIN_FILENO);
    (void)close(STDOUT_FILENO);

    int status = wait_command(child, &all);
    if (status < 0) {
        say("cannot wait for the command", -status);
        return EXIT_INTERNAL;
    }
    char line[64];
    int code, n;
    if (WIFSIGNALED(status)) {
        code = 128 + WTERMSIG(status);
        n = snprintf(line, sizeof(line), "signaled %d%s\n", WTERMSIG(status),
                     WCOREDUMP(status) ? " core" : "");
    } else {
        code = WEXITSTATUS(status);
        n = snprintf(line, sizeof(line), "exited %d\n", code);
    }
    /* EPIPE (the server stopped listening) changes nothing: the exit code carries the same. */
    (void)ws_write_all(status_fd, line, (size_t)n);
    (void)close(status_fd);

    /* Whatever the command left behind dies with it; killing again after every reap also
     * catches a process that was still forking when the previous kill went out. */
    for (;;) {
        if (kill(-1, SIGKILL) < 0 && errno != ESRCH)
            say("cannot kill the namespace", errno);
        if (WS_RETRY_EINTR(wait4(-1, NULL, __WALL, NULL)) < 0) {
            if (errno != ECHILD)
                say("cannot reap the namespace", errno);
            break;
        }
    }
    return code;
}
