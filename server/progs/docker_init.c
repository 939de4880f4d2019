/*
 * workspaced-docker-init: the wrapper around every command the Docker provider runs.
 *
 * The server bind-mounts this static binary read-only into each workspace container and runs
 * every command through `docker exec` as
 *
 *     init run [--uid U --gid G --helper H] [--nproc N] [--record-fd FD] [--cwd DIR] ID
 *              TIMEOUT_MS PROGRAM [ARGS...]
 *     init signal [--helper H] ID SIGNO
 *     init keepalive [--helper H]
 *
 * `run` forks PROGRAM (an absolute path, or a name without '/' looked up in init's PATH as execvp
 * does, relative entries skipped; argv[0] = PROGRAM as given) as the command, in a session of its
 * own, with the terminal on fd 0 (if any) as its controlling terminal. Init is a child subreaper,
 * so every process the command starts stays a descendant of init however it detaches. Where the
 * kernel refuses that (gVisor gives it to a container's first process alone) and init has the
 * identities to split, the command gets a tag instead: a supplementary group of its own,
 * TAG_GID_BASE plus the low 24 bits of ID, which nothing without CAP_SETGID can drop, so that its
 * processes are found by their groups after they left the tree (`id -G` shows it there). HUP, INT,
 * QUIT, TERM, USR1, USR2 and WINCH sent to init are forwarded to every descendant. When the
 * command ends, or TIMEOUT_MS (0 = no bound) expires, every descendant is SIGKILLed and reaped,
 * and only then init writes its exit record to stderr, as one write() and as the very last bytes
 * it writes:
 *
 *     ESC _ wsinit; STATUS ESC \            (an APC sequence: terminals ignore it)
 *     ESC _ wsinit; NONCE ; STATUS ESC \    (when init was given a nonce, see below)
 *
 * STATUS is `exited N` or `signaled N`, then ` core` when a core was dumped, then ` oom` when the
 * command died of a SIGKILL init did not send while the memory cgroup's OOM-kill counter went up.
 * A timed-out command is SIGKILLed with the rest and normally reads `signaled 9`.
 *
 * --record-fd FD (3 or more, open for writing; the in-box agent's private pipe) takes the record
 * instead of stderr, with ` timeout` after the rest when TIMEOUT_MS expired, and init closes its
 * stderr too once the command runs, so the command's streams end with its processes. FD never
 * reaches the command. No nonce is needed there: the command has no way to that pipe. When PROGRAM
 * cannot be executed, a message precedes `exited 127` (ENOENT) or `exited 126` (anything else).
 * Init exits with the code, or 128 + the signal.
 *
 * The nonce: when init's environment holds WSINIT_NONCE (exactly 32 lowercase hex digits), `run`
 * scrubs its value from its own memory and removes it from the environment before the command
 * exists, and writes it into the record. The command never sees it, so a record the command
 * writes itself cannot carry it; the reader that knows the nonce takes only a record with it.
 * NONCE and STATUS cannot be confused: a nonce has no space and no ';', and neither `exited` nor
 * `signaled` is hex.
 *
 * Identities: with --uid U --gid G --helper H (all three or none; decimal; none of them 0, and H
 * differs from U) init is started as root, with CAP_SETUID, CAP_SETGID and CAP_KILL at least, and
 * splits at once. The command's child takes the groups {G} (with its tag, {G, tag}), the gids G
 * and the uids U before it does anything else: leaving uid 0 clears its capabilities, and it
 * sets no-new-privileges so nothing it runs can regain any. Init itself becomes uid and gid H
 * (groups {H}) keeping CAP_KILL alone, permitted and effective, and stays non-dumpable. So the
 * command can neither signal, ptrace nor read /proc/PID/environ (or anything else ptrace-guarded)
 * of init, another uid it holds no capability over, while init can still signal and kill the
 * command's processes. `signal --helper H` drops to H with CAP_KILL the same way before it looks at
 * anything. Without the options every process keeps the uid init was started with, as before.
 *
 * --cwd DIR (absolute) is the command's working directory, entered by the command's child once it
 * has its identity (init's own uid may not be let into the workspace); failing to enter it is
 * reported like a failed execve (`exited 126`, or 127 when DIR does not exist). Without it the
 * command starts where init was started (docker exec's WorkingDir).
 *
 * --nproc N (1..4194304) gives the command RLIMIT_NPROC N, soft and hard, once it has its uid:
 * the kernel then refuses it a fork or a thread beyond N processes of its uid. That is how a
 * pids cap holds under gVisor, whose guest processes the host's pids cgroup does not count
 * (gVisor counts RLIMIT_NPROC per uid in its own kernel); the command cannot raise the hard
 * limit without CAP_SYS_RESOURCE, which it never has. Failing to set it is an internal failure
 * like the identity's.
 *
 * `keepalive` is the container's main process: it waits for HUP, INT or TERM and exits 0. With
 * --helper H it first becomes uid and gid H with no capability at all. It may be the container's
 * pid 1 (no Docker init above it): it then reaps every orphan the kernel hands it, whatever its
 * uid, so no zombie of an exec whose `run` init died piles up against the pids limit.
 *
 * `signal` finds the `run` init(s) for ID through /proc and sends SIGNO (1..64) to every
 * descendant of them, not to the inits themselves: Docker cannot signal an exec, so this is how
 * the server reaches a running command. SIGKILL is repeated until no descendant is left (or a
 * bound). It exits 0 when an init was found, 3 when none was (the command had already ended).
 *
 * Misuse exits 127 and an internal failure before the command started exits 125, each with a
 * one-line message on stderr and no exit record; a missing record means the command's fate is
 * unknown. Failing to take the command's or the helper's identity is such an internal failure:
 * the command is never left running with more than it was meant to have.
 *
 * Built static and without sanitizers: it runs inside images that promise nothing about their
 * libc, and it is never privileged (root only for the moment the identities above take, or an
 * unprivileged uid).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
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
#define ID_VALUE_LIMIT   4294967294ULL /* (uid_t)-1 is no user */

#define NONCE_ENV        "WSINIT_NONCE"
#define NONCE_HEX_DIGITS 32

#define STATUS_OPEN  "\x1b_wsinit;"
#define STATUS_CLOSE "\x1b\\"

/* What init reads from /proc and cgroupfs: bounded, since the kernel's answers are. */
#define STAT_SIZE_LIMIT    1024    /* /proc/PID/stat through field 22 is well under this */
#define CMDLINE_SIZE_LIMIT 4096    /* enough for argv[0..2]; the rest is not looked at */
#define EVENTS_SIZE_LIMIT  4096    /* memory.events / memory.oom_control */
#define PROC_COUNT_LIMIT   4194304 /* the kernel's PID_MAX_LIMIT */
#define STATUS_SIZE_LIMIT  4096    /* /proc/PID/status up to its Groups line */

/* Tag groups (see the top): a range no distribution hands out, 2^24 of them. */
#define TAG_GID_BASE   0x7f000000u
#define TAG_HEX_DIGITS 6
#define TAG_LOW_MASK   0xffffffu

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

static bool is_lower_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    }
    return true;
}

/* An ID is what the server generates: "p_" and exactly 16 lowercase hex digits. */
static bool valid_id(const char *id)
{
    if (strncmp(id, ID_PREFIX, sizeof(ID_PREFIX) - 1) != 0)
        return false;
    id += sizeof(ID_PREFIX) - 1;
    return strnlen(id, ID_HEX_DIGITS + 1) == ID_HEX_DIGITS && is_lower_hex(id, ID_HEX_DIGITS);
}

/* ---- identities ---- */

/* Who the command and init become; none of it when !set. */
struct identity {
    bool set;
    uid_t uid;
    gid_t gid;
    uid_t helper;    /* also the helper's gid */
    rlim_t nproc;    /* the command's RLIMIT_NPROC; 0: the one init has */
    gid_t tag;       /* the command's tag group (see the top); 0: none */
    int record_fd;   /* --record-fd; -1: the record goes to stderr */
    const char *cwd; /* --cwd; NULL: init's own */
};

enum { OPT_UID, OPT_GID, OPT_HELPER, OPT_NPROC, OPT_RECORD_FD, OPT_CWD, OPT_COUNT };
static const char *const option_names[OPT_COUNT] = {"--uid",   "--gid",       "--helper",
                                                    "--nproc", "--record-fd", "--cwd"};

/* Parses the options that follow the mode word, up to the first argument that does not start
 * with "--" (an ID never does); only --helper when !run_mode. Returns the index of that
 * argument, or -1 after saying what is wrong. */
static int parse_identity(int argc, char **argv, bool run_mode, struct identity *ret)
{
    uint64_t v[OPT_COUNT] = {0};
    bool seen[OPT_COUNT] = {false};
    const char *cwd = NULL;
    int i = 2;

    while (i < argc && strncmp(argv[i], "--", 2) == 0) {
        int opt = -1;
        for (int o = 0; o < OPT_COUNT; o++) {
            if ((run_mode || o == OPT_HELPER) && strcmp(argv[i], option_names[o]) == 0)
                opt = o;
        }
        if (opt < 0) {
            say(0, "unknown option %s", argv[i]);
            return -1;
        }
        if (seen[opt]) {
            say(0, "%s given twice", argv[i]);
            return -1;
        }
        if (opt == OPT_NPROC) {
            if (i + 1 >= argc || parse_decimal(argv[i + 1], PROC_COUNT_LIMIT, &v[opt]) < 0 ||
                v[opt] == 0) {
                say(0, "--nproc wants a decimal count from 1 to %d", PROC_COUNT_LIMIT);
                return -1;
            }
        } else if (opt == OPT_CWD) {
            if (i + 1 >= argc || argv[i + 1][0] != '/' || strlen(argv[i + 1]) >= PATH_MAX) {
                say(0, "--cwd wants an absolute path");
                return -1;
            }
            cwd = argv[i + 1];
        } else if (opt == OPT_RECORD_FD) {
            if (i + 1 >= argc || parse_decimal(argv[i + 1], INT32_MAX, &v[opt]) < 0 ||
                v[opt] <= STDERR_FILENO || fcntl((int)v[opt], F_GETFL) < 0 ||
                (fcntl((int)v[opt], F_GETFL) & O_ACCMODE) == O_RDONLY) {
                say(0, "--record-fd wants an fd above 2 open for writing");
                return -1;
            }
        } else if (i + 1 >= argc || parse_decimal(argv[i + 1], ID_VALUE_LIMIT, &v[opt]) < 0) {
            say(0, "%s wants a decimal id up to %llu", argv[i], (unsigned long long)ID_VALUE_LIMIT);
            return -1;
        }
        seen[opt] = true;
        i += 2;
    }
    struct identity id = {
        .set = seen[OPT_HELPER],
        .uid = (uid_t)v[OPT_UID],
        .gid = (gid_t)v[OPT_GID],
        .helper = (uid_t)v[OPT_HELPER],
        .nproc = (rlim_t)v[OPT_NPROC],
        .record_fd = seen[OPT_RECORD_FD] ? (int)v[OPT_RECORD_FD] : -1,
        .cwd = cwd,
    };
    if (run_mode && (seen[OPT_UID] != seen[OPT_HELPER] || seen[OPT_GID] != seen[OPT_HELPER])) {
        say(0, "--uid, --gid and --helper go together");
        return -1;
    }
    /* Root for either would hand the command, or what it can reach, everything back; one uid
     * for both would let the command signal and trace init. */
    if (id.set && (id.helper == 0 || (run_mode && (id.uid == 0 || id.gid == 0)))) {
        say(0, "--uid, --gid and --helper must not be 0");
        return -1;
    }
    if (id.set && run_mode && id.helper == id.uid) {
        say(0, "--helper must differ from --uid");
        return -1;
    }
    *ret = id;
    return i;
}

/* Sets the permitted and effective capability sets to caps and the inheritable set to none;
 * returns 0 or -errno. Raw capset(2): static glibc has no libcap. */
static int set_capabilities(uint64_t caps)
{
    struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {
        {.effective = (uint32_t)caps, .permitted = (uint32_t)caps, .inheritable = 0},
        {.effective = (uint32_t)(caps >> 32),
         .permitted = (uint32_t)(caps >> 32),
         .inheritable = 0},
    };
    if (syscall(SYS_capset, &header, data) < 0)
        return -errno;
    /* The ambient set lies within permitted and inheritable and is empty by now; said for
     * kernels that predate it (EINVAL) and to be sure on the others. */
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return -errno;
    return 0;
}

/* Whether the effective set holds every capability of caps; returns 1, 0 or -errno. */
static int have_capabilities(uint64_t caps)
{
    struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    if (syscall(SYS_capget, &header, data) < 0)
        return -errno;
    uint64_t eff = (uint64_t)data[1].effective << 32 | data[0].effective;
    return (eff & caps) == caps;
}

/* What splitting into the command's and the helper's identities takes. */
#define IDENTITY_CAPS                                                                              \
    (UINT64_C(1) << CAP_SETUID | UINT64_C(1) << CAP_SETGID | UINT64_C(1) << CAP_KILL)

/* In the command's child, before anything else it does: groups {G} or {G, tag}, gids G, uids U,
 * then no capability in any set and no-new-privileges, so neither a setuid program nor file
 * capabilities give anything back. Single-threaded: glibc's set*id calls are plain syscalls
 * here. Returns 0 or -errno. */
static int become_command_user(const struct identity *id)
{
    gid_t groups[2] = {id->gid, id->tag};
    gid_t gid = id->gid;
    if (setgroups(id->tag ? 2 : 1, groups) < 0 || setresgid(gid, gid, gid) < 0 ||
        setresuid(id->uid, id->uid, id->uid) < 0)
        return -errno;
    int r = set_capabilities(0);
    if (r < 0)
        return r;
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ? -errno : 0;
}

/* Init (or `signal`, or `keepalive`) becomes uid and gid H, groups {H}, keeping the
 * capabilities caps and no other: CAP_KILL is enough to signal the command's uid, and nothing
 * is left to change identity or files with. Returns 0 or -errno. */
static int become_helper(uid_t helper, uint64_t caps)
{
    gid_t gid = (gid_t)helper;
    /* Without KEEPCAPS, leaving uid 0 would clear the permitted set CAP_KILL is taken from. */
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 || setgroups(1, &gid) < 0 ||
        setresgid(gid, gid, gid) < 0 || setresuid(helper, helper, helper) < 0)
        return -errno;
    int r = set_capabilities(caps);
    if (r < 0)
        return r;
    (void)prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
    /* A change of euid resets the dumpable flag to fs.suid_dumpable, which may be 1: say 0
     * again, so that even a process of uid H could not trace init or read its memory. */
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 ? -errno : 0;
}

/* Takes WSINIT_NONCE out of the environment into nonce ("" when there is none): every copy of
 * the value is overwritten in place, since /proc/PID/environ shows the memory the environment
 * started in whatever unsetenv() does, and the name is removed so the command never inherits
 * it. Returns 0, or -EINVAL when the value is not NONCE_HEX_DIGITS lowercase hex digits. */
static int take_nonce(char nonce[NONCE_HEX_DIGITS + 1])
{
    const size_t name_len = sizeof(NONCE_ENV) - 1;
    bool found = false, valid = false;

    nonce[0] = '\0';
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, NONCE_ENV "=", name_len + 1) != 0)
            continue;
        char *value = *e + name_len + 1;
        size_t len = strlen(value);
        if (!found) {
            found = true;
            valid = len == NONCE_HEX_DIGITS && is_lower_hex(value, len);
            if (valid)
                memcpy(nonce, value, NONCE_HEX_DIGITS + 1);
        }
        explicit_bzero(value, len);
    }
    if (found && unsetenv(NONCE_ENV) < 0)
        return -errno;
    if (found && !valid) {
        nonce[0] = '\0';
        return -EINVAL;
    }
    return 0;
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
    bool tagged;              /* holds the tag group the scan looked for */
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

/* Whether /proc/PID/status lists gid tag among the groups; a process that is gone has none. */
static bool has_group(int proc_fd, pid_t pid, gid_t tag)
{
    char path[32], buf[STATUS_SIZE_LIMIT];
    (void)snprintf(path, sizeof(path), "%d/status", (int)pid);
    if (read_small(proc_fd, path, buf, sizeof(buf)) < 0)
        return false;
    const char *line = strstr(buf, "\nGroups:");
    if (!line)
        return false;
    line += sizeof("\nGroups:") - 1;
    for (;;) {
        char *end;
        while (*line == ' ' || *line == '\t')
            line++;
        /* strtoull would skip the newline and read on into the next line. */
        if (*line < '0' || *line > '9')
            return false;
        unsigned long long v = strtoull(line, &end, 10);
        if (end == line)
            return false;
        if (v == tag)
            return true;
        line = end;
    }
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

/* Snapshots every process in /proc, with whether it holds the group tag (when tag is not 0).
 * Processes that vanish meanwhile are left out; returns 0 or -errno. */
static int proc_table_scan(int proc_fd, gid_t tag, struct proc_table *ret)
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
        p.tagged = tag && has_group(proc_fd, pid, tag);
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

/* Marks every process whose parent chain leads to root or to a tagged process, tagged ones
 * included. A snapshot of /proc is not atomic, so
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
            if (p->tagged || p->ppid == root ||
                ((parent = proc_table_find(t, p->ppid)) && parent->mark)) {
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

/* Sends sig to every descendant of root, and every process with the group tag (not 0), except
 * the caller itself (a `signal` run from inside the tree finishes its job first). Returns how
 * many of them were still alive, or -errno when /proc could not be read. */
static int signal_descendants(int proc_fd, pid_t root, gid_t tag, int sig)
{
    struct proc_table t;
    int r = proc_table_scan(proc_fd, tag, &t);
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

enum { STEP_SESSION, STEP_EXEC, STEP_IDENTITY, STEP_NPROC, STEP_CWD, STEP_COUNT };
static const char *const start_steps[STEP_COUNT] = {
    "cannot start a session for",
    "cannot execute",
    "cannot take the command's uid and gid for",
    "cannot cap the processes (RLIMIT_NPROC) of",
    "cannot enter the working directory (--cwd) of",
};

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

/* In the forked child: default signals, the command's identity (when given), a session of its
 * own (with the terminal, if any), then PROGRAM. Everything that fails is written to error_fd;
 * its exit code is init's report. */
static __attribute__((noreturn)) void start_command(char **argv, const struct identity *id,
                                                    int error_fd)
{
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    struct start_error e = {0};
    sigset_t none;

    /* SIG_IGN survives execve; EINVAL (SIGKILL, SIGSTOP, glibc's internal ones) is expected. */
    for (int sig = 1; sig < NSIG; sig++)
        (void)sigaction(sig, &dfl, NULL);
    /* First, so that nothing below runs as root: with signals still blocked, and before the
     * command's own code exists. */
    if (id->set) {
        int r = become_command_user(id);
        if (r < 0) {
            e = (struct start_error){.step = STEP_IDENTITY, .err = -r};
            goto fail;
        }
    }
    /* After the uid, which is what the kernel counts the processes of. */
    if (id->nproc) {
        struct rlimit cap = {.rlim_cur = id->nproc, .rlim_max = id->nproc};
        if (setrlimit(RLIMIT_NPROC, &cap) < 0) {
            e = (struct start_error){.step = STEP_NPROC, .err = errno};
            goto fail;
        }
    }
    /* As the command: init's own uid may not enter the workspace. */
    if (id->cwd && chdir(id->cwd) < 0) {
        e = (struct start_error){.step = STEP_CWD, .err = errno};
        goto fail;
    }
    if (setsid() < 0) {
        e = (struct start_error){.step = STEP_SESSION, .err = errno};
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
    if (argv[0][0] == '/')
        execve(argv[0], argv, environ);
    else
        exec_in_path(argv);
    e = (struct start_error){.step = STEP_EXEC, .err = errno};
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

/* SIGKILLs and reaps every descendant until init has no child left, and no process with the
 * group tag (not 0) is alive either: those left the tree, and whoever reaps them, the kernel
 * has them killed. A rescan after every round catches what was forked while the previous one
 * went out. Returns 0, or -ETIMEDOUT when some survived KILL_LIMIT_MS. */
static int kill_descendants(int proc_fd, pid_t command, gid_t tag, int *status, bool *reaped,
                            const sigset_t *all)
{
    pid_t self = getpid();
    int64_t give_up = ws_mono_ms() + KILL_LIMIT_MS;
    bool scan_reported = false;
    for (;;) {
        int children = reap(command, status, reaped);
        if (children < 0 || (children == 0 && !tag))
            return children;
        if (ws_mono_ms() >= give_up)
            return -ETIMEDOUT;
        /* Unreaped, the command's pid cannot be anyone else's: no /proc needed to kill it. */
        if (!*reaped)
            (void)kill(command, SIGKILL);
        int r = signal_descendants(proc_fd, self, tag, SIGKILL);
        if (children == 0 && r == 0)
            return 0;
        if (r < 0 && !scan_reported) {
            say(-r, "cannot list the command's processes");
            scan_reported = true;
        }
        /* Anything else that arrives now is about a command that is going away anyway. */
        struct timespec poll = {.tv_nsec = REAP_POLL_MS * 1000000L};
        (void)sigtimedwait(all, NULL, &poll);
    }
}

/* The command's tag group for ID: TAG_GID_BASE plus the low 24 bits of the ID's hex, which the
 * server draws at random for each command, so that commands running at once differ. Never the
 * command's own gid or the helper's, whose processes it would take for the command's. */
static gid_t tag_gid(const char *id, const struct identity *ident)
{
    uint32_t low = (uint32_t)strtoul(id + strlen(id) - TAG_HEX_DIGITS, NULL, 16);
    while (TAG_GID_BASE + low == ident->gid || TAG_GID_BASE + low == (gid_t)ident->helper)
        low = (low + 1) & TAG_LOW_MASK;
    return TAG_GID_BASE + low;
}

#define RUN_USAGE                                                                                  \
    "run [--uid U --gid G --helper H] [--nproc N] [--record-fd FD] ID TIMEOUT_MS /PROGRAM "        \
    "[ARGS...]"

static int run(int argc, char **argv)
{
    uint64_t timeout_ms;
    struct identity id;
    char nonce[NONCE_HEX_DIGITS + 1];
    int at = parse_identity(argc, argv, true, &id);
    if (at < 0)
        return EXIT_MISUSE;
    if (argc - at < 3) {
        say(0, "usage: " RUN_USAGE);
        return EXIT_MISUSE;
    }
    if (!valid_id(argv[at])) {
        say(0, "bad ID (want " ID_PREFIX " and %d lowercase hex digits)", ID_HEX_DIGITS);
        return EXIT_MISUSE;
    }
    if (parse_decimal(argv[at + 1], TIMEOUT_MS_LIMIT, &timeout_ms) < 0) {
        say(0, "bad TIMEOUT_MS (want decimal milliseconds up to %llu, 0 = none)",
            (unsigned long long)TIMEOUT_MS_LIMIT);
        return EXIT_MISUSE;
    }
    char **command_argv = argv + at + 2;
    if (command_argv[0][0] == '\0' || (command_argv[0][0] != '/' && strchr(command_argv[0], '/'))) {
        say(0, "PROGRAM must be an absolute path or a name without '/'");
        return EXIT_MISUSE;
    }
    if (take_nonce(nonce) < 0) {
        say(0, "bad " NONCE_ENV " (want %d lowercase hex digits)", NONCE_HEX_DIGITS);
        return EXIT_MISUSE;
    }
    /* The record's pipe stays init's: the command never inherits it. */
    int record_fd = id.record_fd >= 0 ? id.record_fd : STDERR_FILENO;
    if (id.record_fd >= 0 && fcntl(id.record_fd, F_SETFD, FD_CLOEXEC) < 0) {
        say(errno, "cannot keep --record-fd from the command");
        return EXIT_INTERNAL;
    }

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
     * instead of the container's pid 1: that is what lets init find them and kill them. gVisor
     * (runsc) refuses the attribute to every process but its container's first (EINVAL): there
     * orphans go to pid 1, and the command's tag group is what finds them. Without identities
     * init cannot give the command a group, and an escapee outlives the command until the
     * container goes. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) {
        if (errno != EINVAL) {
            say(errno, "cannot become a subreaper");
            return EXIT_INTERNAL;
        }
        if (id.set)
            id.tag = tag_gid(argv[at], &id);
    }
    /* Without identities the command runs as the same uid: a dumpable init would let it
     * ptrace init or write its memory and forge the exit record. The child is dumpable again
     * after its execve. */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
        say(errno, "cannot make init undumpable");
        return EXIT_INTERNAL;
    }
    /* Checked before anything starts: without them the command could be left running as a uid
     * init can no longer kill. */
    if (id.set && have_capabilities(IDENTITY_CAPS) != 1) {
        say(0, "--uid, --gid and --helper need CAP_SETUID, CAP_SETGID and CAP_KILL");
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
        start_command(command_argv, &id, error_pipe[1]);
    }
    (void)close(error_pipe[1]);
    int status = 0;
    bool reaped = false, timed_out = false;
    /* At once, while the child is still becoming the command. Until init is H it is root, and
     * root is out of the command's reach as H is. */
    if (id.set) {
        int r = become_helper(id.helper, UINT64_C(1) << CAP_KILL);
        if (r < 0) {
            say(-r, "cannot become the helper uid %lu", (unsigned long)id.helper);
            (void)close(error_pipe[0]);
            (void)kill_descendants(proc_fd, command, id.tag, &status, &reaped, &all);
            return EXIT_INTERNAL;
        }
    }
    /* EOF: the execve happened (the pipe is CLOEXEC). Anything else is why it did not. */
    struct start_error e;
    ssize_t n = ws_read_all(error_pipe[0], &e, sizeof(e));
    (void)close(error_pipe[0]);
    if (n == (ssize_t)sizeof(e) && e.step >= 0 && e.step < STEP_COUNT)
        say(e.err, "%s %s", start_steps[e.step], command_argv[0]);
    /* The command never ran; an exit record would say it had. */
    if (n == (ssize_t)sizeof(e) && (e.step == STEP_IDENTITY || e.step == STEP_NPROC)) {
        (void)kill_descendants(proc_fd, command, id.tag, &status, &reaped, &all);
        return EXIT_INTERNAL;
    }

    /* Held by init, stdin would keep the server's writes blocking after the command closed
     * it, and stdout would hide its EOF. stderr stays for the exit record, unless it has a
     * pipe of its own. */
    (void)close(STDIN_FILENO);
    (void)close(STDOUT_FILENO);
    if (id.record_fd >= 0)
        (void)close(STDERR_FILENO);

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
            (void)signal_descendants(proc_fd, getpid(), id.tag, sig);
    }

    int r = kill_descendants(proc_fd, command, id.tag, &status, &reaped, &all);
    if (r < 0)
        say(-r, "cannot kill every process of the command");
    (void)close(proc_fd);
    if (!reaped) {
        say(0, "the command's exit status is lost");
        return EXIT_INTERNAL;
    }
    int64_t oom_after = read_oom_counter();

    char record[128];
    const char *sep = nonce[0] ? ";" : "";
    int code, len;
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        /* The counter is the whole container's: a SIGKILL init sent itself (the timeout) is
         * not blamed on memory even if something else ran out of it meanwhile. */
        bool oom = sig == SIGKILL && !timed_out && oom_before >= 0 && oom_after > oom_before;
        code = 128 + sig;
        len = snprintf(record, sizeof(record), STATUS_OPEN "%s%ssignaled %d%s%s%s" STATUS_CLOSE,
                       nonce, sep, sig, WCOREDUMP(status) ? " core" : "", oom ? " oom" : "",
                       timed_out && id.record_fd >= 0 ? " timeout" : "");
    } else {
        code = WEXITSTATUS(status);
        len = snprintf(record, sizeof(record), STATUS_OPEN "%s%sexited %d%s" STATUS_CLOSE, nonce,
                       sep, code, timed_out && id.record_fd >= 0 ? " timeout" : "");
    }
    /* The command may have left stderr's file description non-blocking. One write() of a few
     * bytes to a pipe or terminal is then whole; a short one is finished rather than lost. */
    int fl = fcntl(record_fd, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK))
        (void)fcntl(record_fd, F_SETFL, fl & ~O_NONBLOCK);
    /* EPIPE (nobody listens) changes nothing: the exit code carries the same. */
    (void)ws_write_all(record_fd, record, (size_t)len);
    return code;
}

/* ---- signal ---- */

/* The argument after the one at arg in a NUL-separated list ending at end, or NULL. */
static const char *next_arg(const char *arg, const char *end)
{
    const char *next = arg + strlen(arg) + 1;
    return next < end ? next : NULL;
}

/* True when /proc/PID/cmdline is `...init run [OPTION VALUE]... ID ...`. */
static bool is_run_init(int proc_fd, pid_t pid, const char *id)
{
    char path[32], buf[CMDLINE_SIZE_LIMIT];
    (void)snprintf(path, sizeof(path), "%d/cmdline", (int)pid);
    ssize_t len = read_small(proc_fd, path, buf, sizeof(buf));
    if (len <= 0)
        return false;
    /* The kernel's last NUL may be cut off by the bound: read_small's own ends the string. */
    const char *end = buf + len;
    const char *arg0 = buf, *arg = next_arg(arg0, end);
    size_t len0 = strlen(arg0);
    if (len0 < 4 || strcmp(arg0 + len0 - 4, "init") != 0 || !arg || strcmp(arg, "run") != 0)
        return false;
    arg = next_arg(arg, end);
    while (arg && strncmp(arg, "--", 2) == 0) {
        arg = next_arg(arg, end);
        arg = arg ? next_arg(arg, end) : NULL;
    }
    return arg && strcmp(arg, id) == 0;
}

#define SIGNAL_USAGE "signal [--helper H] ID SIGNO"

static int signal_command(int argc, char **argv)
{
    uint64_t signo;
    struct identity id;
    int at = parse_identity(argc, argv, false, &id);
    if (at < 0)
        return EXIT_MISUSE;
    if (argc - at != 2) {
        say(0, "usage: " SIGNAL_USAGE);
        return EXIT_MISUSE;
    }
    if (!valid_id(argv[at])) {
        say(0, "bad ID (want " ID_PREFIX " and %d lowercase hex digits)", ID_HEX_DIGITS);
        return EXIT_MISUSE;
    }
    if (parse_decimal(argv[at + 1], SIGNO_LIMIT, &signo) < 0 || signo == 0) {
        say(0, "bad SIGNO (want 1..%d)", SIGNO_LIMIT);
        return EXIT_MISUSE;
    }
    int sig = (int)signo;
    const char *run_id = argv[at];
    /* Before anything is read or signalled: the command's processes are reached with
     * CAP_KILL, and nothing else of root's is kept. */
    if (id.set) {
        int r = become_helper(id.helper, UINT64_C(1) << CAP_KILL);
        if (r < 0) {
            say(-r, "cannot become the helper uid %lu", (unsigned long)id.helper);
            return EXIT_INTERNAL;
        }
    }
    int proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (proc_fd < 0) {
        say(errno, "cannot open /proc");
        return EXIT_INTERNAL;
    }
    struct proc_table t;
    int r = proc_table_scan(proc_fd, 0, &t);
    if (r < 0) {
        say(-r, "cannot list processes");
        (void)close(proc_fd);
        return EXIT_INTERNAL;
    }
    pid_t self = getpid();
    int found = 0;
    for (size_t i = 0; i < t.n; i++) {
        pid_t init = t.v[i].pid;
        if (init == self || !is_run_init(proc_fd, init, run_id))
            continue;
        found++;
        r = signal_descendants(proc_fd, init, 0, sig);
        /* A SIGKILL is the server's last word: make it stick against a tree that forks as
         * fast as it dies. The init reaps them and then reports by itself. */
        int64_t give_up = ws_mono_ms() + SIGNAL_MODE_KILL_LIMIT_MS;
        while (sig == SIGKILL && r > 0 && ws_mono_ms() < give_up) {
            ws_sleep_ms(REAP_POLL_MS);
            r = signal_descendants(proc_fd, init, 0, sig);
        }
        if (r < 0)
            say(-r, "cannot list the processes of %s", run_id);
    }
    proc_table_free(&t);
    (void)close(proc_fd);
    return found ? 0 : EXIT_NO_INIT;
}

/* ---- keepalive ---- */

#define KEEPALIVE_USAGE "keepalive [--helper H]"

/* The container's main process: nothing but waiting, so the container runs
 * whatever the image holds (no `sleep` needed, an empty image will do).
 * HUP, INT or TERM end it at once, exit 0. With --helper it first becomes
 * uid and gid H without any capability: a container whose user is root (so
 * that `run` can split identities) then keeps no root process of ours
 * between commands, and the commands cannot stop it.
 *
 * It may be the container's pid 1, with no Docker init above it: orphans
 * (what an exec whose `run` init was itself killed leaves) are then its
 * children, and it reaps each as it ends. Reaping takes no permission over
 * the child, so the helper uid reaps the command's uid as well. As pid 1 it
 * only gets the signals it waits for: the kernel drops a signal without a
 * handler sent to pid 1 from inside its namespace, but not a blocked one. */
static int keepalive(int argc, char **argv)
{
    sigset_t wait_for;
    struct identity id;
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    int sig = 0;
    int at = parse_identity(argc, argv, false, &id);

    if (at < 0)
        return EXIT_MISUSE;
    if (at != argc) {
        say(0, "usage: " KEEPALIVE_USAGE);
        return EXIT_MISUSE;
    }
    if (id.set) {
        int r = become_helper(id.helper, 0);
        if (r < 0) {
            say(-r, "cannot become the helper uid %lu", (unsigned long)id.helper);
            return EXIT_INTERNAL;
        }
    }
    sigemptyset(&wait_for);
    sigaddset(&wait_for, SIGHUP);
    sigaddset(&wait_for, SIGINT);
    sigaddset(&wait_for, SIGTERM);
    sigaddset(&wait_for, SIGCHLD);
    /* An inherited SIG_IGN on SIGCHLD would have the kernel reap by itself
     * and never say so; the default keeps the statuses ours to collect. */
    if (sigprocmask(SIG_BLOCK, &wait_for, NULL) < 0 || sigaction(SIGCHLD, &dfl, NULL) < 0)
        return EXIT_INTERNAL;
    for (;;) {
        /* Orphans that ended before the wait began, and every SIGCHLD's
         * worth since: one signal may stand for many children. */
        while (waitpid(-1, NULL, WNOHANG | __WALL) > 0)
            ;
        if (sigwait(&wait_for, &sig) == 0 && sig != SIGCHLD)
            return 0;
    }
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "run") == 0)
        return run(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "signal") == 0)
        return signal_command(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "keepalive") == 0)
        return keepalive(argc, argv);
    say(0, "usage: " RUN_USAGE " | " SIGNAL_USAGE " | " KEEPALIVE_USAGE);
    return EXIT_MISUSE;
}
