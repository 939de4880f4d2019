#include "server/registry/uids.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
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
/* The kernel allows 340 extents in an id map; more lines are not read. */
#define MAP_EXTENTS_MAX 340

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

/* Whether the id map at `path` ("inside outside count" lines) maps every
 * id of `range`; -errno when it cannot be read. */
static int map_covers(const char *path, const struct ws_uid_range *range, uid_t *ret_missing)
{
    unsigned long inside[MAP_EXTENTS_MAX], count[MAP_EXTENTS_MAX];
    size_t n = 0;
    uint64_t id = range->first;
    FILE *f = fopen(path, "re");

    if (!f)
        return -errno;
    for (unsigned long in_, out_, cnt;
         n < WS_ELEMENTSOF(inside) && fscanf(f, "%lu %lu %lu", &in_, &out_, &cnt) == 3;) {
        inside[n] = in_;
        count[n++] = cnt;
    }
    fclose(f);
    /* Walk the range from its first id, jumping to the end of whichever
     * extent holds the next id; extents do not overlap. */
    while (id <= range->last) {
        size_t i;

        for (i = 0; i < n; i++)
            if (id >= inside[i] && id - inside[i] < count[i])
                break;
        if (i == n) {
            *ret_missing = (uid_t)id;
            return 0;
        }
        id = (uint64_t)inside[i] + count[i];
    }
    *ret_missing = (uid_t)-1;
    return 0;
}

int ws_uids_usable(const struct ws_uid_range *range, const char *uid_map_path,
                   const char *gid_map_path, char *why, size_t why_size)
{
    static const struct {
        int cap;
        const char *name;
    } caps[] = {
        {CAP_CHOWN, "CAP_CHOWN"},
        {CAP_KILL, "CAP_KILL"},
        {CAP_SETGID, "CAP_SETGID"},
        {CAP_SETUID, "CAP_SETUID"},
    };
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct data[2] = {{0}};
    const char *paths[2] = {uid_map_path ? uid_map_path : "/proc/self/uid_map",
                            gid_map_path ? gid_map_path : "/proc/self/gid_map"};

    if (geteuid() != 0) {
        snprintf(why, why_size, "the server does not run as root (uid %u)", (unsigned)geteuid());
        return -EPERM;
    }
    if (syscall(SYS_capget, &hdr, data) < 0) {
        int r = -errno;

        snprintf(why, why_size, "cannot read the server's capabilities: %s", strerror(-r));
        return r;
    }
    for (size_t i = 0; i < WS_ELEMENTSOF(caps); i++)
        if (!(data[caps[i].cap / 32].effective & (1u << (caps[i].cap % 32)))) {
            snprintf(why, why_size, "the server runs as root without %s", caps[i].name);
            return -EPERM;
        }
    for (size_t i = 0; i < 2; i++) {
        uid_t missing;
        int r = map_covers(paths[i], range, &missing);

        if (r < 0) {
            snprintf(why, why_size, "cannot read %s: %s", paths[i], strerror(-r));
            return r;
        }
        if (missing != (uid_t)-1) {
            snprintf(why, why_size,
                     "the server's user namespace does not map %s %u (%s): its root can neither "
                     "chown to nor become the range's ids",
                     i == 0 ? "uid" : "gid", (unsigned)missing, paths[i]);
            return -EPERM;
        }
    }
    return 0;
}

/* ---- host-wide leases ---- */

struct ws_uids_lease {
    int fd; /* the flocked lease file, held open */
};

/* Whether two ranges share an id. */
static bool overlaps(const struct ws_uid_range *a, const struct ws_uid_range *b)
{
    return a->first <= b->last && b->first <= a->last;
}

/* The range a lease file is named after ("FIRST-LAST"), or false. */
static bool lease_name(const char *name, struct ws_uid_range *ret)
{
    unsigned long first, last;
    int n = 0;

    if (sscanf(name, "%lu-%lu%n", &first, &last, &n) != 2 || name[n] != '\0' ||
        !isdigit((unsigned char)name[0]) || first > last || last > UINT32_MAX)
        return false;
    *ret = (struct ws_uid_range){(uid_t)first, (uid_t)last};
    return true;
}

/* The live leases of dir_fd into live[] (at most max; more are refused as
 * -E2BIG: a host with that many servers is not one we know). A lease whose
 * file takes our lock has no holder: it is removed. */
static int live_leases(int dir_fd, struct ws_uid_range *live, pid_t *pids, size_t max,
                       size_t *ret_n)
{
    int fd = dup(dir_fd);
    DIR *d;
    struct dirent *e;
    size_t n = 0;
    int err = 0;

    if (fd < 0)
        return -errno;
    d = fdopendir(fd);
    if (!d) {
        err = -errno;
        close(fd);
        return err;
    }
    while (err == 0 && (e = readdir(d))) {
        struct ws_uid_range r;
        int lf;

        if (!lease_name(e->d_name, &r))
            continue;
        lf = openat(dir_fd, e->d_name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (lf < 0)
            continue;
        if (flock(lf, LOCK_EX | LOCK_NB) == 0) {
            /* Its holder is gone. */
            (void)unlinkat(dir_fd, e->d_name, 0);
        } else if (n == max) {
            err = -E2BIG;
        } else {
            char buf[32] = {0};

            (void)ws_pread_all(lf, buf, sizeof(buf) - 1, 0);
            pids[n] = (pid_t)atoi(buf);
            live[n++] = r;
        }
        close(lf);
    }
    closedir(d);
    *ret_n = n;
    return err;
}

/* Whether `want` overlaps no live lease; else the first it does, in *hit. */
static bool lease_free(const struct ws_uid_range *want, const struct ws_uid_range *live, size_t n,
                       size_t *hit)
{
    for (size_t i = 0; i < n; i++)
        if (overlaps(want, &live[i])) {
            *hit = i;
            return false;
        }
    return true;
}

/* Creates and locks the lease file of `r` (no live lease overlaps it, and
 * takers are serialised: the lock cannot be contended but by a holder that
 * died and left the file, which the lock then takes over). */
static int take_lease(int dir_fd, const struct ws_uid_range *r, int *ret_fd)
{
    char name[32], pid[24];
    int fd, err;

    snprintf(name, sizeof(name), "%u-%u", (unsigned)r->first, (unsigned)r->last);
    fd = openat(dir_fd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        err = errno == EWOULDBLOCK ? -EBUSY : -errno;
        close(fd);
        return err;
    }
    snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    err = ftruncate(fd, 0) < 0 ? -errno : ws_pwrite_all(fd, pid, strlen(pid), 0);
    if (err < 0) {
        close(fd);
        return err;
    }
    *ret_fd = fd;
    return 0;
}

int ws_uids_lease_take(const char *dir, struct ws_uid_range *range, bool exact,
                       const struct ws_uid_range *prefer, struct ws_uids_lease **ret, char *why,
                       size_t why_size)
{
    struct ws_uid_range live[256];
    pid_t pids[WS_ELEMENTSOF(live)];
    struct ws_uid_range chosen = {0, 0};
    struct ws_uids_lease *l;
    size_t n = 0, hit = 0;
    int dir_fd = -1, lock_fd = -1, fd = -1, err;
    bool found = false;

    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        err = -errno;
        snprintf(why, why_size, "cannot make %s: %s", dir, strerror(-err));
        return err;
    }
    dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dir_fd < 0) {
        err = -errno;
        snprintf(why, why_size, "cannot open %s: %s", dir, strerror(-err));
        return err;
    }
    lock_fd = openat(dir_fd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX) < 0) {
        err = -errno;
        snprintf(why, why_size, "cannot lock %s/.lock: %s", dir, strerror(-err));
        goto out;
    }
    err = live_leases(dir_fd, live, pids, WS_ELEMENTSOF(live), &n);
    if (err < 0) {
        snprintf(why, why_size, "cannot read the uid leases in %s: %s", dir, strerror(-err));
        goto out;
    }
    if (exact) {
        found = lease_free(range, live, n, &hit);
        chosen = *range;
    } else {
        uint64_t size = (uint64_t)range->last - range->first + 1;
        uint64_t slot = size < WS_UIDS_SLOT ? size : WS_UIDS_SLOT;

        if (prefer && prefer->first >= range->first && prefer->last <= range->last &&
            (uint64_t)prefer->last - prefer->first + 1 == slot &&
            (prefer->first - range->first) % slot == 0 && lease_free(prefer, live, n, &hit)) {
            chosen = *prefer;
            found = true;
        }
        for (uint64_t f = range->first; !found && f + slot - 1 <= range->last; f += slot) {
            chosen = (struct ws_uid_range){(uid_t)f, (uid_t)(f + slot - 1)};
            found = lease_free(&chosen, live, n, &hit);
        }
    }
    if (!found) {
        err = -EBUSY;
        if (exact)
            snprintf(why, why_size,
                     "overlaps the range %u-%u that another workspaced (pid %ld) holds on this "
                     "host; give each server a range of its own",
                     (unsigned)live[hit].first, (unsigned)live[hit].last, (long)pids[hit]);
        else
            snprintf(why, why_size,
                     "has no slot of %u uids that another workspaced on this host does not hold "
                     "already (%zu do)",
                     WS_UIDS_SLOT, n);
        goto out;
    }
    err = take_lease(dir_fd, &chosen, &fd);
    if (err < 0) {
        snprintf(why, why_size, "cannot take the lease %s/%u-%u: %s", dir, (unsigned)chosen.first,
                 (unsigned)chosen.last, strerror(-err));
        goto out;
    }
    l = malloc(sizeof(*l));
    if (!l) {
        err = -ENOMEM;
        snprintf(why, why_size, "out of memory");
        goto out;
    }
    l->fd = fd;
    fd = -1;
    *range = chosen;
    *ret = l;
out:
    if (fd >= 0) {
        char name[32];

        snprintf(name, sizeof(name), "%u-%u", (unsigned)chosen.first, (unsigned)chosen.last);
        (void)unlinkat(dir_fd, name, 0);
        close(fd);
    }
    if (lock_fd >= 0)
        close(lock_fd);
    close(dir_fd);
    return err;
}

void ws_uids_lease_free(struct ws_uids_lease *l)
{
    if (!l)
        return;
    /* The file stays: the next taker sees it unlocked and removes it. */
    close(l->fd);
    free(l);
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
