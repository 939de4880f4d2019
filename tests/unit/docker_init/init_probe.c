/*
 * What a command that workspaced-docker-init runs as another uid can do to
 * the init, its parent. One line on stdout per probe, errno by name, so a
 * test compares exact outcomes:
 *
 *   init_probe attack       waits until the parent is no longer uid 0 (it
 *                           drops right after the fork), prints
 *                           "parent uid N", then tries kill, ptrace,
 *                           /proc/PPID/environ and /proc/PPID/mem of it and
 *                           setuid(0) for itself, each as "NAME ok" or
 *                           "NAME ERRNO"
 *   init_probe attack-pid PID  the same against process PID (the in-box
 *                           agent, the command's grandparent) at once,
 *                           with "fd" (listing /proc/PID/fd) after "mem"
 *   init_probe wait-signal  prints "ready", waits for HUP, USR1 or TERM
 *                           and prints "signal N from uid U" (the sender's
 *                           real uid, as the kernel reports it)
 *
 * Built static and without sanitizers, like the init: it runs as a uid that
 * cannot read the build tree, from a copy in /tmp.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <time.h>
#include <unistd.h>

/* How long the parent may take to drop to its helper uid; only a broken
 * init makes the probe wait this long. */
#define PARENT_DROP_WAIT_MS 20000

static void report(const char *name, int r)
{
    const char *e = r == 0 ? "ok" : strerrorname_np(errno);
    printf("%s %s\n", name, e ? e : "?");
    fflush(stdout);
}

/* The parent's real uid from /proc/PPID/status, or -1. */
static long parent_uid(pid_t ppid)
{
    char path[64], line[256];
    long uid = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)ppid);
    FILE *f = fopen(path, "re");
    while (f && fgets(line, sizeof(line), f)) {
        if (sscanf(line, "Uid: %ld", &uid) == 1)
            break;
    }
    if (f)
        fclose(f);
    return uid;
}

static int attack(pid_t target)
{
    pid_t ppid = target ? target : getppid();
    char path[64];
    long uid = parent_uid(ppid);
    struct timespec pause = {.tv_nsec = 5 * 1000000L};
    for (int waited = 0; !target && uid == 0 && waited < PARENT_DROP_WAIT_MS; waited += 5) {
        nanosleep(&pause, NULL);
        uid = parent_uid(ppid);
    }
    printf("%s uid %ld\n", target ? "target" : "parent", uid);
    fflush(stdout);

    report("kill", kill(ppid, SIGKILL));
    report("ptrace", (int)ptrace(PTRACE_ATTACH, ppid, NULL, NULL));
    snprintf(path, sizeof(path), "/proc/%d/environ", (int)ppid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    report("environ", fd < 0 ? -1 : 0);
    if (fd >= 0)
        close(fd);
    snprintf(path, sizeof(path), "/proc/%d/mem", (int)ppid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    report("mem", fd < 0 ? -1 : 0);
    if (fd >= 0)
        close(fd);
    if (target) {
        snprintf(path, sizeof(path), "/proc/%d/fd", (int)ppid);
        DIR *d = opendir(path);
        report("fd", d ? 0 : -1);
        if (d)
            closedir(d);
    }
    report("setuid", setuid(0));
    return 0;
}

static int wait_signal(void)
{
    sigset_t set;
    siginfo_t si;
    sigemptyset(&set);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGTERM);
    if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
        return 2;
    printf("ready\n");
    fflush(stdout);
    int sig;
    while ((sig = sigwaitinfo(&set, &si)) < 0 && errno == EINTR)
        ;
    if (sig < 0)
        return 2;
    printf("signal %d from uid %ld\n", sig, (long)si.si_uid);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "attack") == 0)
        return attack(0);
    if (argc == 3 && strcmp(argv[1], "attack-pid") == 0 && atoi(argv[2]) > 0)
        return attack((pid_t)atoi(argv[2]));
    if (argc == 2 && strcmp(argv[1], "wait-signal") == 0)
        return wait_signal();
    fprintf(stderr, "usage: init_probe attack | attack-pid PID | wait-signal\n");
    return 2;
}
