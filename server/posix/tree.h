/* Ending a command's whole process tree, descendants that left its process
 * group or session (setsid, double fork) included.
 *
 * spawn.h signals a command's process group; a descendant that calls
 * setsid() or setpgid() leaves it. This module keeps track of every process
 * a command starts, by one of two mechanisms chosen once per host:
 *
 * "cgroup-v1-freezer" (preferred). The host owns the freezer cgroup
 * <root>/workspaced/<server pid>/ (root: WS_TREE_CGROUP_ROOT_DEFAULT unless
 * configured) and makes one child cgroup per tree. posix_spawn cannot put a
 * child into a cgroup, but cgroup v1 moves single threads (a TID written to
 * `tasks`) and a child forked by a thread starts in that thread's cgroup. So
 * ws_tree_enter() moves the calling thread into the tree's cgroup, the
 * caller runs ws_spawn(), and ws_tree_leave() moves the thread back to the
 * cgroup it was in when the host was made: every process of the command is
 * in the tree's cgroup from its first instruction, and no process can leave
 * a cgroup without write access to cgroupfs. A kill freezes the cgroup
 * (freezer.state), SIGKILLs every process listed in cgroup.procs and thaws
 * it: nothing can fork in between. Only the freezer hierarchy is touched;
 * the memory hierarchy (the server's own limit) never is. cgroup v1 drops a
 * task from cgroup.procs when it exits, so a zombie (a leader awaiting
 * wait4) is not counted.
 *
 * "subreaper" (fallback when the freezer cgroup cannot be made: not root,
 * no freezer hierarchy, read-only cgroupfs; or forced by the config). The
 * host makes the server a child subreaper (PR_SET_CHILD_SUBREAPER), so an
 * orphaned descendant is re-parented to the server instead of init. A tree
 * is then, from a scan of /proc:
 *   - its leader (ws_tree_set_leader) and every process in the leader's
 *     session or process group (spawn.h makes pgid == sid == leader pid);
 *   - every descendant of those, through ppid chains;
 *   - every orphan adopted by the server (ppid == server pid) that is not
 *     a live tree's leader, not in a live tree's session or group, and did
 *     not start before this tree's leader (/proc/<pid>/stat field 22).
 * The last rule is a heuristic: with commands running concurrently, an
 * escaped orphan of a command started later can be attributed to (and
 * killed with) an earlier tree too. A kill SIGSTOPs everything found,
 * rescans until nothing new appears (at most WS_TREE_STOP_ROUNDS_MAX
 * rounds), then SIGKILLs them all. Adopted orphans are the server's
 * children: ws_tree_host_reap() reaps them.
 *
 * Signals reach each process through a pidfd opened after the process was
 * found and checked again (cgroup membership, or the start time), so a pid
 * recycled between the listing and the signal is never hit.
 *
 * Typical use, on one thread except where noted:
 *     ws_tree_new(h, &t);
 *     ws_tree_enter(t); r = ws_spawn(&opts, &c); ws_tree_leave(t);
 *     ws_tree_set_leader(t, ws_child_pid(c));
 *     ...  ws_tree_signal(t, SIGTERM), grace period, ws_tree_kill(t)
 *          (any thread, one at a time) ...
 *     ws_child_free(c);   (reaps the leader: before ws_tree_free)
 *     ws_tree_free(t);
 * enter and leave are needed in both modes: in subreaper mode enter marks
 * a spawn in flight whose leader is not known yet, so that neither
 * ws_tree_host_reap() nor another tree's kill takes that leader for an
 * orphan before ws_tree_set_leader().
 *
 * Assumptions the caller guarantees:
 *   - at most one host per process at a time (its cgroup is named after
 *     the pid; the subreaper state is per process);
 *   - threads that call ws_tree_enter() are in the freezer cgroup of the
 *     thread that made the host (threads inherit it; the server never moves
 *     its threads otherwise): ws_tree_leave() moves them there;
 *   - in subreaper mode, every child process of the server is some live
 *     tree's leader while it is unreaped: any other child that started
 *     after a tree's leader counts as that tree's orphan, and
 *     ws_tree_host_reap() reaps any other zombie child; and nothing else
 *     reaps with waitpid(-1) (spawn.h reaps leaders by pid);
 *   - no other pid namespace's server shares the cgroup root (a stale
 *     directory is recognised by its pid not being alive here).
 * Commands running as root can write to cgroupfs and leave their cgroup;
 * containing them is the sandbox providers' job, not this module's.
 *
 * Cost (measured on this project's test host, kernel 6.18, cgroup v1, two
 * CPUs): mkdir of a freezer cgroup takes about 15 us and rmdir about 13 us,
 * a few percent of a posix_spawn, so trees make and remove their cgroup
 * each time and there is no pool of empty cgroups to reuse. Moving a
 * thread is what could cost: written as its tid, the first move after
 * 25 ms or more without a cgroup migration takes 3-15 ms (the kernel's
 * global cgroup_threadgroup_rwsem waits for an RCU grace period). Written
 * as "0" (the calling thread itself), the kernel skips that lock: an
 * enter+leave pair takes about 40 us, idle or not.
 * A kill of 200 processes takes about 10 ms in cgroup mode (freeze 1-3 ms)
 * and 20-30 ms in subreaper mode, where each count is a /proc scan (2-5 ms
 * with 100-300 processes on the host) against 0.1 ms for reading cgroup.procs.
 * /proc start times have a resolution of one clock tick (10 ms), which is
 * what the orphan rule compares.
 *
 * Thread safety: a host is shared by all threads (trees are made, entered,
 * killed and freed concurrently; the host's list of live trees is behind a
 * mutex). A tree is used by one thread at a time, and between
 * ws_tree_enter() and ws_tree_leave() by that thread only. Every fd this
 * module opens is O_CLOEXEC. All paths are built from the server's pid and
 * a counter; nothing a client sends reaches them.
 *
 * Returns: int functions return >= 0 or a negated errno; ret_* are written
 * only on success.
 */
#ifndef WS_POSIX_TREE_H
#define WS_POSIX_TREE_H

#include <sys/types.h>

/* The freezer hierarchy used when the config names none. */
#define WS_TREE_CGROUP_ROOT_DEFAULT "/sys/fs/cgroup/freezer"
/* How long a kill waits for freezer.state to read FROZEN (subreaper: for
 * the SIGSTOPped processes to stop) before it sends SIGKILL anyway; a task
 * in uninterruptible sleep delays both. */
#define WS_TREE_FREEZE_WAIT_MS 100
/* How long ws_tree_free(), ws_tree_host_free() and the sweep at
 * ws_tree_host_new() wait, per cgroup or tree, for its processes to die. */
#define WS_TREE_FREE_WAIT_MS 2000
/* Subreaper kill: rescans after SIGSTOP until one finds nothing new, at
 * most this many. */
#define WS_TREE_STOP_ROUNDS_MAX 16
/* Nested cgroups below a stale or leftover cgroup are removed down to this
 * depth (a command running as root could make them). */
#define WS_TREE_CGROUP_DEPTH_MAX 8
/* Processes one /proc scan records (the kernel's PID_MAX_LIMIT). */
#define WS_TREE_SCAN_PROCS_MAX 4194304

enum ws_tree_mode {
    WS_TREE_AUTO = 0,        /* the freezer cgroup if possible, else subreaper */
    WS_TREE_FORCE_SUBREAPER, /* subreaper even where cgroups would work */
};

struct ws_tree_host_config {
    enum ws_tree_mode mode;
    /* An absolute path inside a cgroup v1 freezer hierarchy (its mount
     * point or a cgroup below it); NULL: WS_TREE_CGROUP_ROOT_DEFAULT. The
     * host uses <cgroup_root>/workspaced/<pid>. Tests point it elsewhere. */
    const char *cgroup_root;
};

struct ws_tree_host;
struct ws_tree;

/* Sets up the process-wide part. cfg NULL means all defaults. In
 * WS_TREE_AUTO mode: makes <root>/workspaced/ if needed, removes stale
 * siblings <root>/workspaced/<pid> whose pid is not alive (and a leftover
 * one named after this pid), killing what is left in them (up to
 * WS_TREE_FREE_WAIT_MS each), makes <root>/workspaced/<own pid>/ and
 * records the calling thread's freezer cgroup; if any of that fails, or in
 * WS_TREE_FORCE_SUBREAPER mode, makes the process a child subreaper
 * instead. Returns 0 and the host in *ret, or:
 *   -EINVAL  unknown mode, cgroup_root not absolute;
 *   -EBUSY   another host exists in this process;
 *   -ENOMEM, -EMFILE...;
 *   the prctl() error when the subreaper fallback fails too. */
int ws_tree_host_new(const struct ws_tree_host_config *cfg, struct ws_tree_host **ret);

/* Kills and removes whatever trees are left (free them first: a tree must
 * not outlive its host), removes the host's cgroup, and in subreaper mode
 * reaps adopted zombies and restores the subreaper flag the process had
 * before. Blocks up to WS_TREE_FREE_WAIT_MS per leftover cgroup. Accepts
 * NULL. */
void ws_tree_host_free(struct ws_tree_host *h);

/* "cgroup-v1-freezer" or "subreaper". Static string. */
const char *ws_tree_host_mechanism(const struct ws_tree_host *h);

/* Why WS_TREE_AUTO fell back to the subreaper: the negated errno the
 * cgroup setup failed with (-ENOENT: no such root; -ENODEV: root not in a
 * cgroup v1 freezer hierarchy; -EACCES, -EROFS...). 0 when the cgroup is
 * in use or the subreaper was forced. For the caller's log. */
int ws_tree_host_fallback_error(const struct ws_tree_host *h);

/* Subreaper mode: reaps the server's zombie children that are neither a
 * live tree's leader nor possibly the leader of a spawn in flight (between
 * ws_tree_enter and ws_tree_set_leader), i.e. adopted orphans. Reaps by
 * pid(fd), never with waitpid(-1). Cheap when there is no zombie child
 * (one waitid peek). Call it on SIGCHLD or periodically; ws_tree_free()
 * calls it too. A no-op in cgroup mode, where orphans go to init. */
void ws_tree_host_reap(struct ws_tree_host *h);

/* Makes an empty tree: in cgroup mode a new cgroup
 * <root>/workspaced/<pid>/<n>. Returns 0 and the tree in *ret, -EINVAL for
 * NULL arguments, -ENOMEM, or the mkdir/open error (-ENOSPC...). */
int ws_tree_new(struct ws_tree_host *h, struct ws_tree **ret);

/* Moves the calling thread into the tree (cgroup mode), so that processes
 * it spawns until ws_tree_leave() belong to the tree; in both modes marks a
 * spawn in flight until ws_tree_set_leader() (or ws_tree_free()). The
 * thread must not block on anything but the spawn in between, and must
 * call ws_tree_leave() even when the spawn fails. Returns 0, -EBUSY when
 * already entered, or the write error. */
int ws_tree_enter(struct ws_tree *t);

/* Moves the calling thread back to the cgroup the host recorded. Returns
 * 0, -EINVAL when the tree was not entered or was entered by another
 * thread, or the write error (the thread is then still inside: the tree
 * refuses ws_tree_kill() with -EBUSY, and ws_tree_free() tries leaving
 * again). */
int ws_tree_leave(struct ws_tree *t);

/* Records the command's leader (the pid ws_spawn returned; pgid == sid ==
 * leader) and ends the spawn-in-flight mark of ws_tree_enter(). Call it
 * before the leader can be reaped. Subreaper mode needs it to find the
 * tree at all; in cgroup mode it is only recorded. */
void ws_tree_set_leader(struct ws_tree *t, pid_t leader);

/* Sends sig to every live process of the tree, followed by SIGCONT so that
 * stopped processes act on it (not after 0, SIGKILL, SIGCONT or a stop
 * signal); sig 0 probes. Not atomic: a process forked meanwhile can be
 * missed (ws_tree_kill is). Returns the number of processes signalled,
 * -EINVAL for a bad signal number, or a read error. */
int ws_tree_signal(struct ws_tree *t, int sig);
/* The same, sparing the processes in skip[] (a sandbox's own wrapper
 * processes, which must outlive the command to report how it ended). */
int ws_tree_signal_except(struct ws_tree *t, int sig, const pid_t *skip, size_t n_skip);

/* SIGKILLs every process of the tree, atomically (freezer, or SIGSTOP and
 * rescans). Does not wait for them to die: poll ws_tree_count(). Blocks at
 * most WS_TREE_FREEZE_WAIT_MS waiting for the freeze or the stops, plus
 * the reads (one /proc scan per round in subreaper mode). If that time runs
 * out, a process forked meanwhile can be missed: ws_tree_free() and
 * another ws_tree_kill() get it. Returns the number of processes killed (0
 * when the tree is empty), -EBUSY between ws_tree_enter() and a successful
 * ws_tree_leave() (freezing would stop the server's own thread), or a read
 * error. */
int ws_tree_kill(struct ws_tree *t);

/* The number of live processes in the tree (zombies, the leader awaiting
 * wait4 included, are not counted; neither is a server thread between
 * enter and leave). Signal, kill and count cover the tree's cgroup itself,
 * not cgroups a command running as root made below it (only free does).
 * Returns >= 0 or a read error. */
int ws_tree_count(struct ws_tree *t);

/* Kills what is left of the tree, waits up to WS_TREE_FREE_WAIT_MS for it
 * to die, removes its cgroup and any a command made below it (left for the
 * host or the next start's sweep when something is stuck), forgets it, and in subreaper mode reaps
 * adopted zombies (ws_tree_host_reap): free the leader's struct ws_child,
 * which reaps it, first. Accepts NULL. */
void ws_tree_free(struct ws_tree *t);

#endif
