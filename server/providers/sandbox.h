/* The local-sandbox boundary: every command of a local-sandbox workspace
 * runs inside its own bubblewrap sandbox, with a seccomp filter, under a
 * small init of ours as the sandbox's pid 1.
 *
 * What a command sees (the shell guard has already vetted it host-side):
 *   - new user, pid, ipc, uts, cgroup and network namespaces, always: with
 *     network: allow the network namespace is still the sandbox's own,
 *     connected by a user-mode network (slirp4netns, started for each
 *     command, gone with it) that reaches what the host reaches except the
 *     host's loopback, so loopback services (the server itself, metrics,
 *     a database) stay out of reach; without slirp4netns a command with
 *     network fails rather than run with less; no nested user
 *     namespaces (--disable-userns), no capabilities, no_new_privs, its
 *     own session (--new-session: no terminal injection into the server's);
 *   - a read-only root holding only /usr (and the /bin, /lib... links or
 *     dirs next to it), an /etc that is a snapshot taken at server start
 *     of a few entries (passwd, group, nsswitch, the loader cache,
 *     alternatives, certificates, time zone; with network a resolv.conf
 *     naming the user-mode network's DNS forwarder), a fresh /proc, a
 *     minimal /dev, a private /tmp tmpfs;
 *   - the workspace read-write at /workspace (cwd and HOME), plus the
 *     workspace's extra read-write / read-only binds: host path P at
 *     /mnt + P (/srv/data at /mnt/srv/data), so a bind never lands on the
 *     sandbox's own /proc, /dev, /tmp or /workspace; a program the guard
 *     found in a bound directory is run from its place under /mnt.
 * Nothing else of the host: no home directories, /run, sockets, or the
 * server's state directory.
 *
 * Process shape: the server spawns bwrap (the tree's leader), bwrap's child
 * execs our init as pid 1 (--as-pid-1), init forks the command and reports
 * its exact exit (code, or signal) on a status pipe before it ends the
 * namespace. Signals for the command spare bwrap and init so they can
 * report; kills go to the whole tree as for any command. With network,
 * init tells the server (on a socket) once the sandbox is built, the
 * server starts slirp4netns on the namespace of init's pid (which bwrap
 * names), and init starts the command only once the server says the
 * network is up; slirp4netns is ended when bwrap is reaped.
 *
 * Thread safety: a struct ws_sandbox is immutable after ws_sandbox_new and
 * may be used from any thread.
 */
#ifndef WS_PROVIDERS_SANDBOX_H
#define WS_PROVIDERS_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>

#include "server/exec/process.h"
#include "server/posix/limits.h"

/* Where init is found inside the sandbox; in a box (agent mode), the agent
 * and the init it runs each command under. */
#define WS_SANDBOX_INIT_PATH       "/.workspaced-init"
#define WS_SANDBOX_AGENT_PATH      "/.workspaced-agent"
#define WS_SANDBOX_AGENT_INIT_PATH "/.workspaced-agent-init"
/* Where the workspace is bound. */
#define WS_SANDBOX_WORKSPACE "/workspace"
/* Size of the sandbox's private /tmp. */
#define WS_SANDBOX_TMP_BYTES (256ull * 1024 * 1024)

struct ws_sandbox;

/* Builds the seccomp program and the fixed part of the sandbox: with a
 * directory `dir` (made 0700 if missing; NULL: none), a snapshot of the
 * /etc entries commands need, in dir/etc.<pid>, bound as the sandbox's
 * /etc (snapshots of earlier servers there are removed; ws_sandbox_free
 * removes this one). Returns 0, -ENOMEM, libseccomp's error, or the
 * snapshot's. The backend itself (bwrap, init) is looked up for every
 * command, never pinned here. */
int ws_sandbox_new(const char *dir, struct ws_sandbox **ret);
/* The same, for sandboxes of workspaces with uids of their own from a
 * range that starts at `id_floor` (ws_seccomp_new_ids; 0: none). */
int ws_sandbox_new_ids(const char *dir, unsigned id_floor, struct ws_sandbox **ret);
/* Accepts NULL. */
void ws_sandbox_free(struct ws_sandbox *sb);

/* "x86_64 only; ..." for Describe. */
const char *ws_sandbox_seccomp_summary(const struct ws_sandbox *sb);
/* The namespaces a command gets, comma-separated: all of them, network
 * or not. */
const char *ws_sandbox_namespaces(bool network);

#define WS_SANDBOX_ID_MAX 64
/* Most extra binds of each kind (the registry refuses more at Open). */
#define WS_SANDBOX_BINDS_MAX 32

struct ws_sandbox_spec {
    /* The workspace: its commands share one resource group with these
     * caps (made on first use, removed by ws_sandbox_forget). */
    const char *workspace_id;
    struct ws_limits limits;
    const char *workspace_dir; /* host path, bound at /workspace */
    const char *cwd;           /* workspace-relative ("." for the root) */
    bool network;
    const char *const *rw_paths;
    size_t n_rw;
    const char *const *ro_paths;
    size_t n_ro;
    /* The vetted command: argv[0] an absolute path visible inside. */
    const char *const *argv;
    bool pty;
    /* The workspace's uid and gid, which bwrap is spawned as (the caller
     * sees to that) and which the sandbox's user namespace maps, inside
     * and out; 0: none, bwrap runs as the server's uid. With a uid every
     * server-side path (the workspace, the /etc snapshot, the init) is
     * bound by an fd opened here, since that uid may search none of the
     * server's directories. */
    uid_t uid;
    gid_t gid;
    /* A box instead of one command (ws_sandbox_box_*): the agent as pid 1
     * with channel_fd (duplicated, not consumed) as its channel, in
     * /workspace; argv, cwd and pty are not used. */
    bool agent;
    int channel_fd;
};

/* Fills *ret with the wrapper that runs spec->argv sandboxed. Returns 0;
 * -ENOENT when bwrap or init is missing, or slirp4netns for a spec with
 * network (the sandbox must not run: fail closed; ws_probe_bwrap's reason
 * says which); -EOPNOTSUPP when a cap of spec->limits is not in force for
 * the workspace's group; -ESTALE when a bind path has become a symlink or is gone;
 * -E2BIG over WS_SANDBOX_BINDS_MAX binds; -ENOMEM, -EMFILE...
 * Handed to the exec layer (ws_exec_start / ws_proc_spawn), the wrapper
 * is theirs: its spawned hook closes the child's fds, its free hook the
 * rest. Used directly (ws_spawn with ret->argv and ret->keep_fds), call
 * ws_sandbox_spawned after the spawn and ws_sandbox_discard when done. */
int ws_sandbox_wrap(struct ws_sandbox *sb, const struct ws_sandbox_spec *spec,
                    struct ws_proc_wrapper *ret);
/* Whether this host can enforce every cap of *l (each is asked for, or
 * a default): 0, or -EOPNOTSUPP with *ret_cap naming the first it cannot
 * ("pids", "memory", "cpu"). A cap that cannot be enforced refuses the
 * Open, and ws_sandbox_wrap refuses a command whose workspace's caps are
 * not all in force: nothing runs without a cap it was given. */
int ws_sandbox_limits_check(const struct ws_sandbox *sb, const struct ws_limits *l,
                            const char **ret_cap);

/* The workspace is gone: its resource group is removed once its last
 * command ended. */
void ws_sandbox_forget(struct ws_sandbox *sb, const char *workspace_id);

struct ws_sandbox_limits_info {
    unsigned enforced;     /* WS_LIMIT_* in force (or that would be) */
    const char *mechanism; /* "cgroup-v1", "" */
};
/* Which of the caps `l` are enforced for the workspace: its group's when
 * it has one, else what the host would enforce. */
void ws_sandbox_limits_report(struct ws_sandbox *sb, const char *workspace_id,
                              const struct ws_limits *l, struct ws_sandbox_limits_info *ret);
/* bubblewrap's version ("0.8.0"), asked now; "" when it cannot say. */
void ws_sandbox_backend_version(char *buf, size_t size);

/* Agent mode: fills *ret with the wrapper that runs spec->argv (in
 * spec->cwd, with envp, a terminal when spec->pty) through the
 * workspace's box, starting the box first if it has none: one bubblewrap
 * with the same binds, seccomp filter, namespaces, network and group as
 * a command's own, spawned as ra, the agent its pid 1. timeout_ms is the
 * command's deadline (the agent's backstop comes after it). Returns 0;
 * -EPIPE when the box's agent was lost (its reason in why: the box is
 * refused until ws_sandbox_box_reset); -ENOENT when the agent, its init,
 * bwrap or (with network) slirp4netns is missing; the box's start error
 * with why; -ENOMEM. */
int ws_sandbox_agent_wrap(struct ws_sandbox *sb, const struct ws_sandbox_spec *spec,
                          const struct ws_run_as *ra, const char *const *envp, uint64_t timeout_ms,
                          struct ws_proc_wrapper *ret, char *why, size_t why_size);
/* Ends the workspace's box, if any (its commands end EVICTED); the next
 * command starts a fresh one. ws_sandbox_forget does it too. Blocking
 * (the box's processes are reaped). */
void ws_sandbox_box_reset(struct ws_sandbox *sb, const char *workspace_id);
/* Whether the workspace's box lost its agent, and why. */
bool ws_sandbox_box_failed(struct ws_sandbox *sb, const char *workspace_id, char *why, size_t size);

/* For direct use: closes the fds that only the sandbox's processes need. */
void ws_sandbox_spawned(struct ws_proc_wrapper *w);
/* For direct use, or a wrapper never handed over: frees it. */
void ws_sandbox_discard(struct ws_proc_wrapper *w);

#endif
