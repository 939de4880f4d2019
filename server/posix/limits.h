/* Resource caps on a group of commands (a workspace's), through cgroups.
 *
 * Each cap has its cgroup v1 controller: pids (pids.max), memory
 * (memory.limit_in_bytes, and memory.memsw.limit_in_bytes to the same
 * value where swap is accounted, so swap is no way around it) and cpu (CFS
 * quota over a 100 ms period). A group is a directory in each controller's
 * hierarchy, under the server's own cgroup there (so an operator's limit
 * on the server still covers everything it starts), named
 * workspaced-<server pid>/<name>.
 *
 * Commands join a group the way the tree module puts them in their
 * freezer cgroup: the spawning thread moves itself into the group, spawns
 * (the child inherits every cgroup of its parent thread) and moves back.
 *
 * Where a controller is missing or its hierarchy is not writable the cap
 * is not enforced and the host says so (ws_limits_host_available,
 * ws_limits_group_enforced); the sandbox then refuses the Open. On a pure cgroup v2 host the
 * server's own cgroup holds the server's processes, and v2 forbids enabling controllers for
 * children there: no cap is enforced (a delegated subtree would lift that).
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

/* Finds the controllers and makes the server's parent group in each;
 * removes what earlier servers' parent groups left (empty ones). Returns 0
 * or -ENOMEM; a host without controllers is not an error. */
int ws_limits_host_new(struct ws_limits_host **ret);
/* Removes the server's parent groups (when empty). Accepts NULL. */
void ws_limits_host_free(struct ws_limits_host *h);
/* WS_LIMIT_* bits of the caps this host can enforce. */
unsigned ws_limits_host_available(const struct ws_limits_host *h);
/* "cgroup-v1", or "" when no cap can be enforced. */
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
/* Moves the calling thread into the group (every enforced controller).
 * Returns 0 or the first error (then nothing is moved). */
int ws_limits_group_enter(struct ws_limits_group *g);
/* Moves it back where the server runs. */
int ws_limits_group_leave(struct ws_limits_group *g);
/* Removes the group's directories (processes still in it keep their caps
 * until they end; the directories are then removed by the next server's
 * sweep). Accepts NULL. */
void ws_limits_group_free(struct ws_limits_group *g);

#endif
