#include "server/registry/uids.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/base/errors.h"
#include "server/base/io.h"
#include "server/base/macros.h"
#include "server/base/time.h"

/* The ids the kernel and every distribution reserve for "no mapping". */
#define OVERFLOW_ID 65534u
#define INVALID_16  65535u

struct ws_uids {
    pthread_mutex_t lock;
    struct ws_uid_range range;
    bool (*has_processes)(uid_t uid);
    /* One bit per uid of the range, first included (never set). */
    uint64_t *taken;
    size_t n_taken;
    /* The next uid to try. */
    uid_t cursor;
};

static bool parse_id(const char *s, const char **end, uid_t *ret)
{
    unsigned long long v = 0;

    if (!isdigit((unsigned char)*s))
        return false;
    for (; isdigit((unsigned char)*s); s++) {
        v = v * 10 + (unsigned)(*s - '0');
        if (v >= UINT32_MAX)
            return false;
    }
    *end = s;
    *ret = (uid_t)v;
    return true;
}

int ws_uids_parse_range(const char *text, struct ws_uid_range *ret, const char **why)
{
    struct ws_uid_range r;
    const char *p;

    if (!parse_id(text, &p, &r.first) || *p != '-' || !parse_id(p + 1, &p, &r.last) || *p) {
        *why = "not FIRST-LAST, two uids below 4294967295";
        return -EINVAL;
    }
    if (r.last < r.first || r.last - r.first + 1 < WS_UIDS_MIN_SIZE) {
        *why = "not a range of at least 2 uids (the helper's and one workspace's)";
        return -EINVAL;
    }
    *ret = r;
    return 0;
}

static bool in(const struct ws_uid_range *r, unsigned long id)
{
    return id >= r->first && id <= r->last;
}

int ws_uids_check_range(const struct ws_uid_range *range, const char *passwd_path,
                        const char *group_path, const uid_t *taken, size_t n_taken, char *why,
                        size_t why_size)
{
    static const unsigned long reserved[] = {0, OVERFLOW_ID, INVALID_16};
    FILE *f;
    int r = 0;

    for (size_t i = 0; i < WS_ELEMENTSOF(reserved); i++)
        if (in(range, reserved[i])) {
            snprintf(why, why_size, "includes the reserved id %lu", reserved[i]);
            return -EINVAL;
        }
    for (size_t i = 0; i < n_taken; i++)
        if (in(range, taken[i])) {
            snprintf(why, why_size, "includes uid %u, a peer's ([peers])", (unsigned)taken[i]);
            return -EINVAL;
        }

    f = fopen(passwd_path ? passwd_path : "/etc/passwd", "re");
    if (!f) {
        r = -errno;
        snprintf(why, why_size, "cannot read the accounts file: %s", strerror(errno));
        return r;
    }
    for (struct passwd *pw; (pw = fgetpwent(f));)
        if (in(range, pw->pw_uid) || in(range, pw->pw_gid)) {
            snprintf(why, why_size, "includes the account %s (uid %u, gid %u)", pw->pw_name,
                     (unsigned)pw->pw_uid, (unsigned)pw->pw_gid);
            r = -EINVAL;
            break;
        }
    fclose(f);
    if (r < 0)
        return r;

    f = fopen(group_path ? group_path : "/etc/group", "re");
    if (!f) {
        r = -errno;
        snprintf(why, why_size, "cannot read the groups file: %s", strerror(errno));
        return r;
    }
    for (struct group *gr; (gr = fgetgrent(f));)
        if (in(range, gr->gr_gid)) {
            snprintf(why, why_size, "includes the group %s (gid %u)", gr->gr_name,
                     (unsigned)gr->gr_gid);
            r = -EINVAL;
            break;
        }
    fclose(f);
    return r;
}

int ws_uids_new(const struct ws_uid_range *range, bool (*has_processes)(uid_t uid),
                struct ws_uids **ret)
{
    struct ws_uids *u;
    size_t n = (size_t)(range->last - range->first) + 1;

    if (range->last < range->first || n < WS_UIDS_MIN_SIZE)
        return -EINVAL;
    u = calloc(1, sizeof(*u));
    if (!u)
        return -ENOMEM;
    u->taken = calloc((n + 63) / 64, sizeof(*u->taken));
    if (!u->taken) {
        free(u);
        return -ENOMEM;
    }
    pthread_mutex_init(&u->lock, NULL);
    u->range = *range;
    u->has_processes = has_processes ? has_processes : ws_uids_has_processes;
    u->cursor = range->first + 1;
    *ret = u;
    return 0;
}

void ws_uids_free(struct ws_uids *u)
{
    if (!u)
        return;
    pthread_mutex_destroy(&u->lock);
    free(u->taken);
    free(u);
}

uid_t ws_uids_helper(const struct ws_uids *u)
{
    return u->range.first;
}

bool ws_uids_in_range(const struct ws_uids *u, uid_t uid)
{
    return uid > u->range.first && uid <= u->range.last;
}

static bool bit(const struct ws_uids *u, uid_t uid)
{
    size_t i = uid - u->range.first;

    return u->taken[i / 64] & (1ull << (i % 64));
}

static void set_bit(struct ws_uids *u, uid_t uid, bool on)
{
    size_t i = uid - u->range.first;

    if (on)
        u->taken[i / 64] |= 1ull << (i % 64);
    else
        u->taken[i / 64] &= ~(1ull << (i % 64));
}

static uid_t next(const struct ws_uids *u, uid_t uid)
{
    return uid >= u->range.last ? u->range.first + 1 : uid + 1;
}

int ws_uids_claim(struct ws_uids *u, uid_t uid)
{
    int r = 0;

    if (!ws_uids_in_range(u, uid))
        return -EINVAL;
    pthread_mutex_lock(&u->lock);
    if (bit(u, uid)) {
        r = -EEXIST;
    } else {
        set_bit(u, uid, true);
        u->n_taken++;
        /* Records are claimed in no particular order: the cursor ends past
         * the highest, so new workspaces get uids no record had. */
        if (uid >= u->cursor)
            u->cursor = next(u, uid);
    }
    pthread_mutex_unlock(&u->lock);
    return r;
}

int ws_uids_alloc(struct ws_uids *u, uid_t *ret)
{
    size_t n = u->range.last - u->range.first;
    int r = -WS_EQUOTA;

    pthread_mutex_lock(&u->lock);
    for (size_t i = 0; i < n && u->n_taken < n; i++) {
        uid_t uid = u->cursor;

        u->cursor = next(u, uid);
        if (bit(u, uid) || u->has_processes(uid))
            continue;
        set_bit(u, uid, true);
        u->n_taken++;
        *ret = uid;
        r = 0;
        break;
    }
    pthread_mutex_unlock(&u->lock);
    return r;
}

void ws_uids_release(struct ws_uids *u, uid_t uid)
{
    if (!ws_uids_in_range(u, uid))
        return;
    pthread_mutex_lock(&u->lock);
    if (bit(u, uid)) {
        set_bit(u, uid, false);
        u->n_taken--;
    }
    pthread_mutex_unlock(&u->lock);
}

size_t ws_uids_taken(struct ws_uids *u)
{
    size_t n;

    pthread_mutex_lock(&u->lock);
    n = u->n_taken;
    pthread_mutex_unlock(&u->lock);
    return n;
}

/* Whether the process whose /proc directory is `dfd` is alive (not a
 * zombie: a zombie runs nothing and goes when its parent reaps it) and has
 * `uid` as its real, effective or saved uid. */
static bool process_has_uid(int dfd, uid_t uid)
{
    char buf[4096];
    ssize_t n;
    int fd = openat(dfd, "status", O_RDONLY | O_CLOEXEC);
    const char *state, *uids;
    unsigned long ruid, euid, suid;

    if (fd < 0)
        return false;
    n = ws_read_all(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    state = strstr(buf, "\nState:\t");
    if (state && (state[8] == 'Z' || state[8] == 'X'))
        return false;
    uids = strstr(buf, "\nUid:\t");
    if (!uids || sscanf(uids + 6, "%lu %lu %lu", &ruid, &euid, &suid) != 3)
        return false;
    return ruid == uid || euid == uid || suid == uid;
}

bool ws_uids_has_processes(uid_t uid)
{
    DIR *d = opendir("/proc");
    bool found = false;

    if (!d)
        return true; /* cannot tell: treat the uid as busy */
    for (struct dirent *e; !found && (e = readdir(d));) {
        int dfd;

        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        dfd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
            continue;
        found = process_has_uid(dfd, uid);
        close(dfd);
    }
    closedir(d);
    return found;
}

/* One round: a child becomes `uid` and signals everything it may. */
static int kill_round(uid_t uid)
{
    int status;
    pid_t pid = fork();

    if (pid < 0)
        return -errno;
    if (pid == 0) {
        /* Raw system calls only: the child of a threaded server. Becoming
         * the uid drops every capability, so kill(-1) reaches exactly the
         * processes whose real or saved uid is `uid`. */
        if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, uid, uid, uid) < 0 ||
            syscall(SYS_setresuid, uid, uid, uid) < 0)
            _exit(1);
        /* kill(-1) as anyone else (root above all) would end far more
         * than the uid's processes: make sure the switch took. */
        if (syscall(SYS_getuid) != uid || syscall(SYS_geteuid) != uid)
            _exit(1);
        kill(-1, SIGKILL);
        _exit(0);
    }
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -errno;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EPERM;
}

int ws_uids_kill_all(uid_t uid)
{
    int64_t deadline = ws_mono_ms() + 2000;
    int r;

    /* Neither root nor (uid_t)-1, which setresuid reads as "unchanged". */
    if (uid == 0 || uid == (uid_t)-1)
        return -EINVAL;
    for (;;) {
        r = kill_round(uid);
        if (r < 0)
            return r;
        /* SIGKILLed processes take a moment to exit (one in
         * uninterruptible sleep longer): look again, kill again. */
        for (int i = 0; i < 20; i++) {
            if (!ws_uids_has_processes(uid))
                return 0;
            ws_sleep_ms(5);
        }
        if (ws_mono_ms() > deadline)
            return -EBUSY;
    }
}
