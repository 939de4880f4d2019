/* What a child started by ws_spawn with run_as sees from the inside, printed
 * for run_as_test to compare. One command per run:
 *
 *   ids               "uid R E S", "gid R E S", "groups G..." (getresuid,
 *                     getresgid, getgroups)
 *   regain            tries setuid(0), setgid(0) and setgroups(0): one line
 *                     each, "NAME ok" or "NAME <errno name>"
 *   fds               the open fds, one per line, without the directory fd
 *                     that lists them
 *   fork N            forks up to N children that wait; then "forked K" and
 *                     "error <errno name>" (or "error none"), and ends them
 *   write FILE N      writes N bytes to FILE (created in the working
 *                     directory) in one write loop
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROBE_FORK_MAX   1000
#define PROBE_GROUPS_MAX 64

static const char *errno_name(int e)
{
    switch (e) {
    case 0:
        return "ok";
    case EPERM:
        return "EPERM";
    case EAGAIN:
        return "EAGAIN";
    case EINVAL:
        return "EINVAL";
    default:
        return strerror(e);
    }
}

static int ids(void)
{
    uid_t ru, eu, su;
    gid_t rg, eg, sg, groups[PROBE_GROUPS_MAX];

    if (getresuid(&ru, &eu, &su) < 0 || getresgid(&rg, &eg, &sg) < 0)
        return 1;
    int n = getgroups(PROBE_GROUPS_MAX, groups);
    if (n < 0)
        return 1;
    printf("uid %u %u %u\ngid %u %u %u\ngroups", ru, eu, su, rg, eg, sg);
    for (int i = 0; i < n; i++)
        printf(" %u", groups[i]);
    printf("\n");
    return 0;
}

static int regain(void)
{
    printf("setuid %s\n", errno_name(setuid(0) < 0 ? errno : 0));
    printf("setgid %s\n", errno_name(setgid(0) < 0 ? errno : 0));
    printf("setgroups %s\n", errno_name(setgroups(0, NULL) < 0 ? errno : 0));
    return 0;
}

static int fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;

    if (!d)
        return 1;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' && atoi(de->d_name) != dirfd(d))
            printf("%s\n", de->d_name);
    closedir(d);
    return 0;
}

static int fork_loop(int n)
{
    pid_t kids[PROBE_FORK_MAX];
    int k = 0, err = 0;

    if (n > PROBE_FORK_MAX)
        n = PROBE_FORK_MAX;
    for (; k < n; k++) {
        pid_t p = fork();
        if (p < 0) {
            err = errno;
            break;
        }
        if (p == 0) {
            pause();
            _exit(0);
        }
        kids[k] = p;
    }
    printf("forked %d\nerror %s\n", k, err ? errno_name(err) : "none");
    fflush(stdout);
    for (int i = 0; i < k; i++) {
        kill(kids[i], SIGKILL);
        waitpid(kids[i], NULL, 0);
    }
    return 0;
}

static int write_file(const char *name, long n)
{
    static const char block[4096];
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    if (fd < 0)
        return 1;
    while (n > 0) {
        ssize_t w = write(fd, block, n < (long)sizeof(block) ? (size_t)n : sizeof(block));
        if (w < 0) {
            printf("write %s\n", strerror(errno));
            return 2;
        }
        n -= w;
    }
    close(fd);
    printf("wrote\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "ids") == 0)
        return ids();
    if (argc == 2 && strcmp(argv[1], "regain") == 0)
        return regain();
    if (argc == 2 && strcmp(argv[1], "fds") == 0)
        return fds();
    if (argc == 3 && strcmp(argv[1], "fork") == 0)
        return fork_loop(atoi(argv[2]));
    if (argc == 4 && strcmp(argv[1], "write") == 0)
        return write_file(argv[2], atol(argv[3]));
    fprintf(stderr, "usage: spawn_probe ids|regain|fds|fork N|write FILE N\n");
    return 64;
}
