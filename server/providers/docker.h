/* The Docker provider's runtime: one hardened, labelled container per
 * workspace over the workspace's host directory, and every command run in
 * it through `docker exec` under our in-container init.
 *
 * Containers: created and started at Open (and again wherever the
 * registry re-attaches a workspace: after a restart, or on Resolve when
 * the container is gone or stopped), removed at Close. Their hardening is
 * read back from inspect after the start and compared with what was asked
 * for; any difference removes the container and fails the Open (the
 * daemon may drop a limit its kernel cannot enforce with only a warning).
 * Any failure after the create removes what was created. Names are
 * "workspaced-<server id>-<workspace id>", labels carry both ids, so a
 * server finds what an earlier run of itself left (ws_docker_rt_reconcile).
 *
 * Commands: the server creates the exec with the command wrapped as
 *     /.workspaced-init run [--uid U --gid G --helper H] [--nproc N] HANDLE BACKSTOP_MS ARGV...
 * and starts a host-side relay (workspaced-docker-relay) in the command's
 * place under the exec layer's process machinery; the relay attaches to
 * the exec (the hijacked connection: output demultiplexed into the
 * command's pipes, stdin forwarded) and reports the exit record the init
 * writes. Every exec gets a fresh 128-bit nonce in its environment
 * (WSINIT_NONCE, which the init takes out before the command exists) and
 * the relay the same on its command line: the init's record carries it,
 * so a record the command writes itself is only output. Abort is two
 * layers: signals and kills go into the container to the init's process
 * tree (an exec of "init signal [--helper H] HANDLE SIG"), and the relay
 * itself is killed with the host-side tree, so a call returns even when
 * the daemon is slow. The init bounds every command by BACKSTOP_MS on its
 * own, in case the server is gone.
 *
 * Identities (struct ws_docker_identity): a workspace with a uid of its
 * own gets a container whose user is root with CAP_KILL, CAP_SETGID and
 * CAP_SETUID alone (no-new-privileges kept), so that the init, exec'd as
 * root, can split at once: the command becomes U:G with no capability,
 * the init the helper uid H with CAP_KILL alone, out of the command's
 * reach (it can neither signal, trace nor read the init, nor forge its
 * record). The container's main process, its pid 1 (no Docker init,
 * which would stay root), is our keepalive: it becomes H without any
 * capability at once and reaps the orphans the kernel hands it. So while
 * commands run, no process of the container is root but an init for the
 * moment it splits. /tmp belongs to U:G. A workspace without a uid (the
 * server is not root) keeps the container's user as the command's, as
 * before.
 *
 * Agent mode (DockerConfig.exec_mode AGENT, and the default): the container's main process
 * is the in-box agent (wsagent, bound read-only at /.workspaced-agent),
 * started as root only to take the helper uid at once, keeping CAP_SETUID,
 * CAP_SETGID and CAP_KILL for the commands' reapers. It connects to a
 * unix socket the server listens on in a per-workspace host directory
 * (<channel root>/<workspace id>, 0700 and the socket 0600, both the
 * helper's; bound read-only at /.workspaced-channel), presents the
 * one-time secret of its container's environment, and the server takes
 * that one connection and removes the socket. Commands then start through
 * it (server/agent/client.h) with the exec layer's own pipes or terminal:
 * no daemon call and no relay per command. The agent's loss (it died, the
 * container stopped, a broken frame) ends the running commands with cause
 * EVICTED and fails the box until a Resolve makes the container again.
 * Under gVisor the runtime must let the container reach a host socket
 * (runsc --host-uds=open), else the attach is refused saying so; and
 * since gVisor takes a host terminal passed in as a plain file, a command
 * with a terminal starts through `docker exec` there, as in per-command
 * mode. An OOM kill under gVisor takes the whole sandbox, agent included:
 * its commands end EVICTED and Describe shows the container OOM-killed.
 *
 * Runtimes: DockerConfig.runtime names the OCI runtime ("runsc": gVisor);
 * before a container is created under a named one the daemon is asked
 * whether it has it (GET /info), and a missing one fails the attach, so
 * a workspace never falls back to a weaker runtime, at Open or later. So
 * does a network the runtime cannot give: a container that asks for one
 * under a runtime registered with --network=none (gVisor where the daemon
 * runs in the host's network namespace). Under gVisor the pids cap is
 * the command's RLIMIT_NPROC (--nproc, the container's pids_limit), and
 * the host cgroup gets a budget for the sandbox's host tasks instead
 * (WS_DOCKER_RUNTIME_GVISOR).
 *
 * Threads: every function may be called from any thread but the runtime's
 * own pump thread; the blocking ones (attach, detach, wrap, reconcile,
 * describe) are for handler threads.
 */
#ifndef WS_PROVIDERS_DOCKER_H
#define WS_PROVIDERS_DOCKER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "server/base/errors.h"
#include "server/docker/api.h"
#include "server/exec/process.h"
#include "server/providers/probe.h"
#include "workspace/v1/common.pb-c.h"

/* The program every command runs under inside the container, and the
 * host-side relay; found next to the server binary or named by these
 * variables. */
#define WS_DOCKER_INIT_NAME  WS_INBOX_INIT_NAME
#define WS_DOCKER_INIT_ENV   WS_INBOX_INIT_ENV
#define WS_DOCKER_RELAY_NAME "workspaced-docker-relay"
#define WS_DOCKER_RELAY_ENV  "WORKSPACED_DOCKER_RELAY"
/* The relay's exit code, without a status line, when it could not learn
 * the command's end: the daemon refused the exec, died or broke the
 * stream, or the container stopped under it. */
#define WS_DOCKER_RELAY_EXIT_UNKNOWN 125

/* PATH of commands in a container (the guard's lookup path there). */
#define WS_DOCKER_EXEC_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
/* The init's own bound on a command beyond the server's deadline. */
#define WS_DOCKER_BACKSTOP_MARGIN_MS 30000
/* Pulling an image (if-not-present) may take this long when the caller
 * has no sooner deadline. */
#define WS_DOCKER_PULL_TIMEOUT_MS (10L * 60 * 1000)
/* A pull for a caller with a deadline ends this long before it, so that
 * the answer saying so, and the clean-up of the Open, reach the caller in
 * time. */
#define WS_DOCKER_PULL_MARGIN_MS 500L
/* How often a waiting pull looks whether its caller still wants it (the
 * caller's cancel is a flag, not an event to wait for). */
#define WS_DOCKER_PULL_POLL_MS 100L
/* Bytes of one line of a pull's progress stream kept to parse; a longer
 * line (the daemon's are a few hundred bytes) is skipped. */
#define WS_DOCKER_PULL_LINE_MAX 4096
/* Every other call to the daemon. */
#define WS_DOCKER_CALL_TIMEOUT_MS 60000L
/* Containers of failed Opens kept to remove once the daemon is back
 * (the daemon died before the Open could remove what it made); beyond,
 * the reconcile at the server's next start removes them. */
#define WS_DOCKER_ORPHANS_MAX 1024

/* The helper uid when the server names none: the first uid of the
 * default workspace uid range, which no workspace is given. */
#define WS_DOCKER_HELPER_UID_DEFAULT 524288u

/* Who runs what in a workspace's container (see Identities above). uid 0:
 * no identities; the container's user (the config's, else the server's
 * own uid:gid) runs everything. Else the command's uid:gid and the helper
 * uid, all three nonzero, the helper differing from both. */
struct ws_docker_identity {
    uid_t uid;
    gid_t gid;
    uid_t helper;
    /* A host directory (searchable by the daemon) where the container's
     * /etc/passwd and /etc/group for `uid` are written, as <uid>.passwd
     * and <uid>.group, and bound read-only over the image's: root, nobody
     * and "workspace" (uid:gid, home /workspace), so that a command can
     * look itself up. NULL: the image's own. */
    const char *accounts_dir;
};

struct ws_docker_rt;
struct ws_work_ctl; /* server/work/pool.h */

/* Creates the runtime: its own pump thread and HTTP client for the daemon
 * named by DOCKER_HOST (DOCKER_TLS_VERIFY, DOCKER_CERT_PATH), read now.
 * server_id labels and names this server's containers ([a-zA-Z0-9_.-],
 * stable across restarts). channel_root: the host directory where the
 * agents' channel directories are made (agent mode), or NULL (agent mode
 * refused). Nothing is contacted yet. Returns 0, -EINVAL (bad server_id or
 * DOCKER_HOST), -ENOMEM. */
int ws_docker_rt_new(const char *server_id, const char *channel_root, struct ws_docker_rt **ret);

/* Whether a workspace's commands are to run through the in-box agent
 * (DockerConfig.exec_mode): AGENT, or DEFAULT without a docker.user. The
 * default still falls back to per-command at attach where agent mode
 * cannot run (the agent not installed, gVisor registered without
 * --host-uds=open); ws_docker_rt_exec_mode says what a container got. */
bool ws_docker_agent_mode(const Workspace__V1__DockerConfig *cfg);
/* Accepts NULL. After every command using it is done. */
void ws_docker_rt_free(struct ws_docker_rt *rt);

/* Removes every container carrying this server's label: run at start,
 * before serving, when no workspace has a container of this run yet (the
 * ones of workspaces still open are made again when they are next used).
 * Returns the number removed, or -WS_EFAILED when the daemon cannot be
 * asked (d says why). */
int ws_docker_rt_reconcile(struct ws_docker_rt *rt, struct ws_diag *d);

/* Makes the workspace's container exist and run with the config's
 * hardening and the identities of `id` over dir (an absolute host path);
 * the commands wrapped later run under the same identities. fresh: create
 * it (a name already taken, by what an earlier run left, is removed and
 * the create made again); else keep a running container whose hardening
 * reads back right and replace anything else.
 *
 * A missing image is pulled when cfg's pull_policy allows it (the
 * provider makes it PULL_NEVER when the operator's policy does not). The
 * pull is bounded by ctl (the calling job's, may be NULL): it ends
 * WS_DOCKER_PULL_MARGIN_MS before ctl's deadline, at once when ctl is
 * cancelled, and after WS_DOCKER_PULL_TIMEOUT_MS whatever the caller
 * allows. Ending it closes our connection to the daemon, which drops the
 * pull at its next step; a request to the registry already in flight is
 * not interrupted and lasts as long as the daemon's own timeouts allow
 * (Docker 20.10: 10 s for a TLS handshake, 15 s for the registry's /v2/
 * probe, none that we saw end for a manifest). A caller that stopped
 * wanting the answer during the pull gets no container.
 *
 * Errors: -WS_EFAILED (d: why; d->transient when the daemon is
 * unreachable; metadata "runtime" when the daemon lacks the config's
 * runtime, "image" when the image is missing or its pull failed),
 * -ETIMEDOUT (the pull outlasted ctl's deadline, metadata "image" and
 * "timeout_ms", or the server's limit, metadata "image" and "limit_ms"),
 * -ECANCELED (ctl was cancelled), -EINVAL (`id` breaks its rules). */
int ws_docker_rt_attach(struct ws_docker_rt *rt, const char *workspace_id, const char *dir,
                        const Workspace__V1__DockerConfig *cfg, const struct ws_docker_identity *id,
                        bool fresh, const struct ws_work_ctl *ctl, struct ws_diag *d);

/* Stops and removes the workspace's container (and its anonymous
 * volumes); a container that does not exist is fine. Errors: -WS_EFAILED
 * (the daemon is unreachable or refused; nothing was forgotten). */
int ws_docker_rt_detach(struct ws_docker_rt *rt, const char *workspace_id, struct ws_diag *d);

/* How the workspace's container runs its commands: "agent",
 * "per-command", or NULL when it has no container now. */
const char *ws_docker_rt_exec_mode(struct ws_docker_rt *rt, const char *workspace_id);

/* Whether the workspace's container lost its agent (agent mode), and why:
 * it is failed until a Resolve makes it again. */
bool ws_docker_rt_box_failed(struct ws_docker_rt *rt, const char *workspace_id, char *why,
                             size_t size);

/* Drops what the runtime remembers of a workspace (evicted). */
void ws_docker_rt_forget(struct ws_docker_rt *rt, const char *workspace_id);

struct ws_docker_rt_exec {
    const char *workspace_id;
    /* The shell guard's result (foreign_root): argv[0] a name or an
     * absolute path in the container; envp the whole environment. */
    const char *const *argv;
    const char *const *envp;
    /* Workspace-relative, checked by the guard ("." for the root). */
    const char *cwd;
    bool tty;
    bool stdin_pipe;
    /* The server's deadline (0: none); the init adds its margin. */
    uint64_t timeout_ms;
};

/* Creates the exec and fills *ret with the relay to spawn in the command's
 * place (ownership as struct ws_proc_wrapper says: ws_proc_spawn takes
 * ret->arg). Errors: -WS_EFAILED (no container: the workspace was not
 * attached, or the daemon refused), -ENOENT (the relay or init program is
 * missing), -ENOMEM. */
int ws_docker_rt_wrap(struct ws_docker_rt *rt, const struct ws_docker_rt_exec *spec,
                      struct ws_proc_wrapper *ret, struct ws_diag *d);
/* Frees a wrapper that was never handed to ws_proc_spawn. */
void ws_docker_rt_discard(struct ws_proc_wrapper *w);

/* What Describe reports, read from the daemon now. */
struct ws_docker_rt_info {
    bool reachable;
    char api_version[16];
    char container_id[WS_DOCKER_ID_LEN + 1]; /* "" when there is none */
    bool running;
    bool oom_killed;
    struct ws_docker_hardening hardening; /* valid when container_id[0] */
};
void ws_docker_rt_describe(struct ws_docker_rt *rt, const char *workspace_id,
                           struct ws_docker_rt_info *ret);

/* The daemon's reachability and negotiated API version, asked now (for
 * ListProviders). Returns 0 or -WS_EFAILED with d set. */
int ws_docker_rt_ping(struct ws_docker_rt *rt, char *api_version, size_t size, struct ws_diag *d);

/* Whether the daemon has the OCI runtime `name` registered (GET /info):
 * 0, or -WS_EFAILED with d saying why not (not registered, or the daemon
 * did not answer). */
int ws_docker_rt_runtime_usable(struct ws_docker_rt *rt, const char *name, struct ws_diag *d);

/* Host paths of the init and the relay, or NULL when missing. */
const char *ws_docker_rt_init_path(void);
const char *ws_docker_rt_relay_path(void);

#endif
