/* The server's subtree of the cgroup v2 (unified) hierarchy: a group per
 * workspace that carries its caps, and a leaf per command that holds every
 * process the command starts, however it forks, until cgroup.kill ends
 * them all.
 *
 * Layout. The host finds the cgroup2 mount in /proc/self/mountinfo and the
 * process's own cgroup on the "0::" line of /proc/self/cgroup, and works
 * under a base directory B:
 *   - own cgroup is the hierarchy's root (a server started by hand on a
 *     host where nothing gave it a cgroup): B is the root;
 *   - own cgroup is below the root (systemd's Delegate=yes, or a start by
 *     hand in a cgroup of its own): B is the own cgroup, and the process
 *     first moves itself into B/server (one cgroup.procs write), because
 *     cgroup v2 lets a cgroup hand controllers to its children only while
 *     no process sits in it;
 *   - the caller names B (a test, or the operator's choice): used as is,
 *     nothing moves.
 * Then
 *     B/workspaced/<server pid>/            the host
 *     B/workspaced/<server pid>/ws-<id>/    a workspace group: its caps
 *     B/workspaced/<server pid>/ws-<id>/c<n>/   a command leaf
 * At every level from B down to the host the pids, memory and cpu
 * controllers are enabled in cgroup.subtree_control where cgroup.controllers
 * offers them. A refusal (EBUSY: other processes share B, i.e. nothing was
 * delegated; EACCES...) leaves that controller out and is not an error:
 * ws_cgroup2_host_available() says what a group can have, and
 * ws_cgroup2_group_enforced() what one has. Whoever must refuse work
 * without a cap compares those with what it wanted.
 *
 * Placing processes. A leaf is opened as an O_DIRECTORY fd, which
 * clone3(CLONE_INTO_CGROUP) takes: the child starts inside the leaf. Moving
 * a process in afterwards (ws_cgroup2_leaf_add, a cgroup.procs write) also
 * works but costs an RCU grace period in the kernel (milliseconds) and
 * leaves a window in which the process is outside.
 *
 * Ending a leaf. cgroup.kill (Linux 5.14+) SIGKILLs every process of the
 * leaf and of the cgroups below it in one kernel operation that a fork
 * cannot race. Where it is missing: cgroup.freeze, SIGKILL to every pid
 * listed in cgroup.procs (a pidfd, after /proc/<pid>/cgroup confirmed the
 * process is still in the leaf), thaw; a frozen process still acts on
 * SIGKILL. A leaf is empty when its cgroup.events reads "populated 0",
 * which the kernel announces with POLLPRI on that file: no polling loop.
 *
 * Sweep. A server that died leaves B/workspaced/<its pid>/ behind, maybe
 * with processes. Setup kills what is in every such directory whose pid is
 * not alive here (and one named after this pid: a leftover of an earlier
 * process with that number), then removes it, deepest cgroups first.
 *
 * Assumptions the caller guarantees:
 *   - at most one host per process at a time (its directory is named after
 *     the pid);
 *   - no other pid namespace's server shares B (a stale directory is
 *     recognised by its pid not being alive here);
 *   - the host is made before the process has threads whose cgroup matters
 *     (the move into B/server takes the whole process).
 * Commands running as root can write to cgroupfs and leave their leaf;
 * containing them is the sandbox providers' job, not this module's.
 *
 * Thread safety: a host is shared by all threads; groups and leaves are
 * made and freed concurrently. One leaf is used by one thread at a time
 * (kill, signal and wait from different threads are fine; free is not
 * concurrent with anything on that leaf). Every fd this module opens is
 * O_CLOEXEC. Paths are built from the server's pid, a counter and the
 * caller's id, which is checked to be letters, digits, '-' and '_'.
 *
 * Returns: int functions return >= 0 or a negated errno; ret_* are written
 * only on success.
 */
#ifndef WS_POSIX_CGROUP2_H
#define WS_POSIX_CGROUP2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The caps, as bits of ws_cgroup2_host_available() and
 * ws_cgroup2_group_enforced(). Same values as limits.h's WS_LIMIT_*. */
enum {
    WS_CGROUP2_PIDS = 1u << 0,
    WS_CGROUP2_MEMORY = 1u << 1,
    WS_CGROUP2_CPU = 1u << 2,
};

/* cpu.max's period; a quota is cpu_millis thousandths of it. */
#define WS_CGROUP2_CPU_PERIOD_US 100000
/* The kernel refuses a cpu.max quota below 1 ms: smaller ones are raised
 * to it (1 % of a CPU over the period). */
#define WS_CGROUP2_CPU_QUOTA_MIN_US 1000
/* How long a fallback kill waits for cgroup.events to read "frozen 1"
 * before it sends SIGKILL anyway (a task in uninterruptible sleep delays
 * the freeze; SIGKILL reaches it when it wakes). */
#define WS_CGROUP2_FREEZE_WAIT_MS 100
/* How long the sweep at setup, ws_cgroup2_leaf_free(),
 * ws_cgroup2_group_free() and ws_cgroup2_host_free() wait, per cgroup, for
 * its processes to die before leaving it for the next start's sweep. */
#define WS_CGROUP2_FREE_WAIT_MS 2000
/* Nested cgroups below a stale or leftover one are removed down to this
 * depth (a command running as root could make them). */
#define WS_CGROUP2_DEPTH_MAX 8
/* The longest workspace id a group name takes. */
#define WS_CGROUP2_ID_MAX 64

struct ws_cgroup2_config {
    /* An absolute directory on a cgroup2 file system to use as B; NULL:
     * found from the process's own cgroup as above. */
    const char *root;
    /* Kill through cgroup.freeze and SIGKILL even where cgroup.kill
     * exists, so that tests reach the fallback on a new kernel. */
    bool no_kill_file;
};

/* What a workspace group caps; 0 means no cap of that kind. */
struct ws_cgroup2_caps {
    uint32_t pids_max;     /* pids.max */
    uint64_t memory_bytes; /* memory.max, with memory.swap.max 0 */
    uint32_t cpu_millis;   /* thousandths of a CPU: cpu.max */
};

struct ws_cgroup2_host;
struct ws_cgroup2_group;
struct ws_cgroup2_leaf;

/* Sets up the host as described above (cfg NULL: all defaults): finds B,
 * moves the process into B/server when B is its own non-root cgroup,
 * enables the controllers, sweeps stale hosts and makes
 * B/workspaced/<pid>/. Returns 0 and the host in *ret, or:
 *   -EINVAL  cfg->root not absolute;
 *   -EBUSY   another host exists in this process;
 *   -ENODEV  no cgroup2 mount, cfg->root not on one, or the own cgroup not
 *            visible through the mount;
 *   -ENOMEM, -ENAMETOOLONG;
 *   the mkdir, open or cgroup.procs write error (-EACCES, -EROFS...). */
int ws_cgroup2_host_new(const struct ws_cgroup2_config *cfg, struct ws_cgroup2_host **ret);

/* Kills and removes whatever groups and leaves are left (free them first:
 * they must not outlive the host), then the host's directory, waiting up
 * to WS_CGROUP2_FREE_WAIT_MS per cgroup that still has processes. The
 * process stays in B/server if it moved there; B/workspaced stays too
 * (another server may be making its directory in it). Accepts NULL. */
void ws_cgroup2_host_free(struct ws_cgroup2_host *h);

/* "cgroup-v2". Static string. */
const char *ws_cgroup2_host_mechanism(const struct ws_cgroup2_host *h);

/* The host's directory, B/workspaced/<pid>, as an absolute path. */
const char *ws_cgroup2_host_path(const struct ws_cgroup2_host *h);

/* WS_CGROUP2_* bits of the caps a group of this host can have: the
 * controllers enabled in the host directory's cgroup.subtree_control. */
unsigned ws_cgroup2_host_available(const struct ws_cgroup2_host *h);

/* The negated errno of the first refused controller enable (-EBUSY: the
 * base is shared with other processes, i.e. not delegated), 0 when none
 * was refused. For the caller's log, next to what is missing. */
int ws_cgroup2_host_enable_error(const struct ws_cgroup2_host *h);

/* Makes the group ws-<id> with the caps in *caps (NULL: none): writes
 * pids.max, memory.max and memory.swap.max 0 (where swap is accounted; no
 * such file means no swap to go around the cap), cpu.max. Returns 0 and
 * the group in *ret, -EINVAL for a NULL host or a bad id (empty, over
 * WS_CGROUP2_ID_MAX, or other than letters, digits, '-', '_'), -EEXIST,
 * -ENOMEM, or the mkdir/open error. A cap whose controller is missing or
 * whose write fails is not an error: it is left out of
 * ws_cgroup2_group_enforced(). */
int ws_cgroup2_group_new(struct ws_cgroup2_host *h, const char *id,
                         const struct ws_cgroup2_caps *caps, struct ws_cgroup2_group **ret);

/* WS_CGROUP2_* bits of the caps in force: asked for, the controller in the
 * group's cgroup.controllers, and the value written. */
unsigned ws_cgroup2_group_enforced(const struct ws_cgroup2_group *g);

/* WS_CGROUP2_* bits of the caps asked for and not in force. */
unsigned ws_cgroup2_group_missing(const struct ws_cgroup2_group *g);

/* The group's O_DIRECTORY fd, for clone3's cgroup field with
 * CLONE_INTO_CGROUP: a process may live in the group itself (it hands no
 * controller down to its leaves), which is where a caller without a leaf
 * per command puts its commands. Owned by the group. */
int ws_cgroup2_group_fd(const struct ws_cgroup2_group *g);

/* How many processes of the group the kernel's OOM killer ended so far:
 * the oom_kill count of its memory.events (0 without the memory
 * controller). Returns 0 and the count in *ret, or -errno. */
int ws_cgroup2_group_oom_kills(const struct ws_cgroup2_group *g, uint64_t *ret);

/* Kills what is left in the group (its leaves included: free them first),
 * waits up to WS_CGROUP2_FREE_WAIT_MS for it to die and removes the group
 * and every cgroup below it. Accepts NULL. */
void ws_cgroup2_group_free(struct ws_cgroup2_group *g);

/* Makes an empty leaf c<n> in the group and opens it. Returns 0 and the
 * leaf in *ret, -EINVAL, -ENOMEM, or the mkdir/open error. */
int ws_cgroup2_leaf_new(struct ws_cgroup2_group *g, struct ws_cgroup2_leaf **ret);

/* The leaf's O_DIRECTORY fd, for clone3's cgroup field with
 * CLONE_INTO_CGROUP. Owned by the leaf. */
int ws_cgroup2_leaf_fd(const struct ws_cgroup2_leaf *l);

/* The leaf's absolute path (for logs and tests). */
const char *ws_cgroup2_leaf_path(const struct ws_cgroup2_leaf *l);

/* Moves process pid (all its threads) into the leaf. Returns 0 or the
 * write error (-ESRCH: no such process). */
int ws_cgroup2_leaf_add(struct ws_cgroup2_leaf *l, pid_t pid);

/* Sends sig to every process listed in the leaf's cgroup.procs (through a
 * pidfd, after /proc/<pid>/cgroup confirmed it is still in the leaf),
 * followed by SIGCONT so that stopped processes act on it (not after 0,
 * SIGKILL, SIGCONT or a stop signal); sig 0 probes. The pids in skip[] are
 * spared. Not atomic: a process forked meanwhile can be missed
 * (ws_cgroup2_leaf_kill is atomic). Cgroups a command made below the leaf
 * are not covered. Returns the number signalled, -EINVAL for a bad signal,
 * or a read error. */
int ws_cgroup2_leaf_signal(struct ws_cgroup2_leaf *l, int sig, const pid_t *skip, size_t n_skip);

/* The number of processes listed in the leaf's cgroup.procs (zombies are
 * not). Returns >= 0 or a read error. */
int ws_cgroup2_leaf_count(struct ws_cgroup2_leaf *l);

/* SIGKILLs every process of the leaf and of the cgroups below it:
 * cgroup.kill, or the freeze fallback (blocks up to
 * WS_CGROUP2_FREEZE_WAIT_MS). Does not wait for them to die: see
 * ws_cgroup2_leaf_wait_empty(). Returns 0 or -errno. */
int ws_cgroup2_leaf_kill(struct ws_cgroup2_leaf *l);

/* The leaf's cgroup.events, open for reading, for the caller's poll or
 * epoll: POLLPRI (EPOLLPRI) reports a change since the file was last read
 * (ws_cgroup2_leaf_populated() reads it). Owned by the leaf. */
int ws_cgroup2_leaf_events_fd(const struct ws_cgroup2_leaf *l);

/* Whether the leaf or a cgroup below it holds a live process: 1 or 0 from
 * cgroup.events, or -errno. Re-arms the POLLPRI of the events fd. */
int ws_cgroup2_leaf_populated(struct ws_cgroup2_leaf *l);

/* Waits until the leaf is empty, up to timeout_ms (< 0: no limit), by
 * polling the events fd. Returns 0 when empty, -ETIMEDOUT, or -errno. */
int ws_cgroup2_leaf_wait_empty(struct ws_cgroup2_leaf *l, int timeout_ms);

/* Kills what is left in the leaf, waits up to WS_CGROUP2_FREE_WAIT_MS for
 * it to die, removes the leaf and any cgroup a command made below it (left
 * for the group or the next start's sweep when something is stuck).
 * Accepts NULL. */
void ws_cgroup2_leaf_free(struct ws_cgroup2_leaf *l);

#endif
