/* Resource caps on a group of commands (a workspace's), through cgroups.
 *
 * Two mechanisms; a host uses one, chosen at ws_limits_host_new():
 *
 * "cgroup-v1". Each cap has its v1 controller: pids (pids.max), memory
 * (memory.limit_in_bytes, and memory.memsw.limit_in_bytes to the same
 * value where swap is accounted, so swap is no way around it) and cpu (CFS
 * quota over a 100 ms period). A group is a directory in each controller's
 * hierarchy, under the server's own cgroup there (so an operator's limit
 * on the server still covers everything it starts), named
 * workspaced-<server pid>/<name>. Commands join a group the way the tree
 * module puts them in their freezer cgroup: the spawning thread moves
 * itself into the group (ws_limits_group_enter), spawns (the child
 * inherits every cgroup of its parent thread) and moves back
 * (ws_limits_group_leave).
 *
 * "cgroup-v2" (posix/cgroup2.h: the server's subtree of the unified
 * hierarchy, delegated by systemd or made by the server itself), used when
 * it offers more of the caps than v1 does: a host that boots cgroup v2
 * only, as current distributions do. A group is a cgroup
 * .../workspaced/<pid>/ws-<name> with pids.max, memory.max (and
 * memory.swap.max 0) and cpu.max. v2 cannot move a thread, so enter and
 * leave do nothing there: the spawn starts the child in the group through
 * clone3(CLONE_INTO_CGROUP) with ws_limits_group_cgroup_fd().
 *
 * Where a controller is missing or its hierarchy is not writable the cap
 * is not enforced and the host says so (ws_limits_host_available,
 * ws_limits_group_enforced); whoever asked for the cap then refuses the
 * Open. A v2 host that was not delegated (the server's own cgroup holds
 * other processes) cannot enable controllers for its children: nothing is
 * available there, and the refusal names the cap.
 *
 * One host per process (the cgroups are named after its pid): every
 * ws_limits_host_new() returns the same host, counted, and the last
 * ws_limits_host_free() releases it.
 *
 * Thread safety: a host and its groups may be used from any thread; enter
 * and leave concern the calling thread only.
 */
#ifndef WS_POSIX_LIMITS_H
#define WS_POSIX_LIMITS_H

#include <stdbool.h>
#include <stdint.h>

enum {
    WS_LIMIT_PIDS = 1u << 0,
    WS_LIMIT_MEMORY = 1u << 1,
    WS_LIMIT_CPU = 1u << 2,
};

struct ws_limits {
    uint32_t pids_max;     /* 0: none */
    uint64_t memory_bytes; /* 0: none */
    uint32_t cpu_millis;   /* thousandths of a CPU; 0: none */
};

#define WS_LIMITS_CPU_PERIOD_US 100000

struct ws_limits_host;
struct ws_limits_group;

/* The process's host: made at the first call (finds the controllers,
 * makes the server's parent group in each, removes what earlier servers'
 * parent groups left), a new reference to it after that. Returns 0 or
 * -ENOMEM; a host without controllers is not an error. */
int ws_limits_host_new(struct ws_limits_host **ret);
/* Drops a reference; the last removes the server's parent groups (when
 * empty). Accepts NULL. */
void ws_limits_host_free(struct ws_limits_host *h);
/* WS_LIMIT_* bits of the caps this host can enforce. */
unsigned ws_limits_host_available(const struct ws_limits_host *h);
/* "cgroup-v1" or "cgroup-v2", or "" when no cap can be enforced. */
const char *ws_limits_host_mechanism(const struct ws_limits_host *h);

/* Makes the group `name` (letters, digits, '-', '_'; at most 64 bytes)
 * with the caps in *l. Returns 0, -EINVAL for a bad name, -EEXIST when it
 * exists already, -ENOMEM; a cap that cannot be set is left out of
 * ws_limits_group_enforced, not an error. */
int ws_limits_group_new(struct ws_limits_host *h, const char *name, const struct ws_limits *l,
                        struct ws_limits_group **ret);
/* WS_LIMIT_* bits of the caps in force for this group. */
unsigned ws_limits_group_enforced(const struct ws_limits_group *g);
/* How many processes the kernel's OOM killer ended in the group so far
 * (0 when the kernel does not count them). */
uint64_t ws_limits_group_oom_kills(const struct ws_limits_group *g);
/* The cgroup v2 directory a command of the group starts in (spawn.h's
 * run_as.into_cgroup; the fd stays the group's), or -1 on a v1 host,
 * where enter and leave place it instead. */
int ws_limits_group_cgroup_fd(const struct ws_limits_group *g);
/* v1: moves the calling thread into the group (every enforced
 * controller). Returns 0 or the first error (then nothing is moved). v2:
 * does nothing. */
int ws_limits_group_enter(struct ws_limits_group *g);
/* v1: moves it back where the server runs. v2: does nothing. */
int ws_limits_group_leave(struct ws_limits_group *g);
/* Removes the group's directories. v1: processes still in it keep their
 * caps until they end; the directories are then removed by the next
 * server's sweep. v2: what is left in it is killed first (up to
 * WS_CGROUP2_FREE_WAIT_MS). Accepts NULL. */
void ws_limits_group_free(struct ws_limits_group *g);

/* A table of named groups on the host, shared by whoever places commands
 * of the same workspace: the group `name` with the caps in *l, made at the
 * first call (its caps stay those of that call), a new reference after
 * that. Returns 0, -EINVAL (a bad name), -ENOMEM, or ws_limits_group_new's
 * error. */
int ws_limits_group_get(struct ws_limits_host *h, const char *name, const struct ws_limits *l,
                        struct ws_limits_group **ret);
/* A new reference to the listed group `name`, or -ENOENT. */
int ws_limits_group_lookup(struct ws_limits_host *h, const char *name,
                           struct ws_limits_group **ret);
/* Drops a reference from ws_limits_group_get or _lookup; the last one
 * frees the group. Accepts NULL. */
void ws_limits_group_put(struct ws_limits_group *g);
/* Takes `name` out of the table and drops the table's reference: the
 * group goes with its last user, and the next get makes a new one.
 * Nothing happens when it is not listed. */
void ws_limits_forget(struct ws_limits_host *h, const char *name);

#endif
