/* The server assembled in one place: the state directory, the registry,
 * the providers' runtimes, the audit log, the exec layer, the worker pool,
 * the RPC services, the RPC server and the metrics listener, built in that
 * order and torn down in reverse. The registry comes before everything
 * else that writes into the state directory because it takes the
 * directory's lock; the exec layer goes before the services at teardown
 * because its last commands are recorded through them. The pool goes
 * right after the RPC server: every job in it holds a reference on its
 * call, and the server's shutdown waits for every call object, so by then
 * no job is left and none can finish a call whose server is gone.
 *
 * main owns the process (flags, the configuration file, signals, exit);
 * this module owns everything main used to wire by hand. It logs its own
 * start-up failures (one "server.start_failed" line each, or the RPC
 * layer's reason on stderr), so main only maps a failure to its exit code.
 *
 * Thread safety: ws_app_start, ws_app_drain, ws_app_take_server and
 * ws_app_free run on main's thread, one at a time; ws_app_reload too, and
 * it may run while calls are served.
 */
#ifndef WS_APP_H
#define WS_APP_H

#include <stdbool.h>
#include <stdint.h>

#include "server/registry/registry.h"
#include "server/rpc/call.h"

struct ws_app;
struct ws_policy_set;

/* Everything main hands on; strings are only read during ws_app_start
 * (the modules that keep one make their own copy). */
struct ws_app_config {
    /* Made 0700 when missing. The registry's records and lock, the
     * sandbox's /etc snapshot, the server id, the audit logs and the
     * commands' homes all live under it. */
    const char *state_dir;
    /* The registry's caps, quotas, enabled providers and policy (its
     * state_dir is the one above). */
    struct ws_registry_config registry;
    /* The image of a docker Open that names none (a valid reference);
     * NULL: such an Open is malformed. */
    const char *docker_default_image;
    /* The exec layer and the services: SIGTERM-to-SIGKILL grace (0: the
     * default, < 0: none), the subreaper fallback forced, where commands
     * are looked up (NULL: the default), running commands per tenant
     * (0: no quota). */
    int kill_grace_ms;
    bool force_subreaper;
    const char *exec_path;
    unsigned tenant_max_commands;
    /* Output of finished commands kept for Attach: bytes per tenant (0:
     * no quota; past it the tenant's oldest are freed), and how long
     * after it ended a command's output is kept (0: until pushed out). */
    uint64_t tenant_retained_output_bytes;
    long long finished_output_ttl_ms;
    /* The RPC server's address, authentication and transport limits (the
     * app fills in the [peers] lookup and the buffer for the reason of a
     * refused configuration). */
    struct ws_rpc_config rpc;
    /* GET /metrics on this address; NULL: no metrics listener. */
    const char *metrics_listen;
    /* The worker pool that keeps slow work off the RPC threads
     * (server/work/pool.h): the FS lane's threads (walks, searches,
     * hashing; < 0: one per CPU), the DAEMON lane's (container daemon
     * calls; < 0: WS_APP_DAEMON_THREADS); 0 makes a lane inline, the work
     * running on the RPC thread as before there was a pool. Per tenant
     * and lane: jobs running at once (0: WS_APP_FS_TENANT_RUNNING's rule
     * and WS_APP_DAEMON_TENANT_RUNNING, within the lane's threads) and
     * jobs waiting (0: WS_POOL_DEFAULT_TENANT_QUEUED). Without
     * authentication (no tokens file, no client CA) every caller shares a
     * few tenant names, so the defaults become the whole lane and
     * WS_APP_SHARED_TENANT_QUEUED. */
    struct {
        int fs_threads;
        int daemon_threads;
        unsigned tenant_running;
        unsigned tenant_queued;
    } work;
};

/* The per-tenant quotas main gives the ones the operator left alone
 * when callers are told apart as tenants (a tokens file, a client CA,
 * [peers] on a unix socket); without that they are none. Generous enough
 * for one agent's real work, small enough that one tenant cannot take
 * the whole server: a quarter of the server's workspaces, of its running
 * commands and of its transport memory. */
#define WS_APP_AUTH_TENANT_WORKSPACES       64
#define WS_APP_AUTH_TENANT_OPENS_PER_MINUTE 600
#define WS_APP_AUTH_TENANT_COMMANDS         256
#define WS_APP_AUTH_TENANT_BYTES            (16ull << 30)
#define WS_APP_AUTH_TENANT_MEMORY_BYTES     (1ull << 30)
#define WS_APP_AUTH_TENANT_RETAINED_BYTES   (256ull << 20)
#define WS_APP_AUTH_TENANT_STREAMS          256

/* The server's own oom_score_adj, written at start. */
#define WS_APP_OOM_SCORE_ADJ "-500"

#define WS_APP_DAEMON_THREADS        16
#define WS_APP_DAEMON_TENANT_RUNNING 4
/* The FS lane's default per tenant: half its threads, at least one. */
#define WS_APP_FS_TENANT_RUNNING(threads) ((threads) / 2 > 0 ? (threads) / 2 : 1)
/* The FS lane's threads yield to the RPC threads by this nice value. */
#define WS_APP_FS_NICE              10
#define WS_APP_SHARED_TENANT_QUEUED 1024

/* Builds and starts the server: when it returns 0 calls are served and
 * *ret holds it. On failure the reason has been logged, everything built
 * so far is freed again, and a negative errno comes back. */
int ws_app_start(const struct ws_app_config *cfg, struct ws_app **ret);

/* The TCP port the RPC server is bound to (0 on a unix socket). */
int ws_app_port(const struct ws_app *app);

/* SIGHUP: re-reads the tokens file (a bad one keeps the old table; the
 * RPC layer logs either way), then puts `policy` in force for later Opens
 * and for the [peers] map, when it is not NULL (the app takes its own
 * reference). */
void ws_app_reload(struct ws_app *app, struct ws_policy_set *policy);

/* The graceful drain: stops the metrics listener, turns health to
 * NOT_SERVING, and lets calls in flight finish for up to grace_ms before
 * they are cancelled. Returns when no call is left. */
void ws_app_drain(struct ws_app *app, int grace_ms);

/* Hands the RPC server (after ws_app_drain) to the caller, who frees it
 * with ws_rpc_server_free once ws_app_free has ended every command and
 * workspace: gRPC's own teardown can take seconds, and main bounds it. */
struct ws_rpc_server *ws_app_take_server(struct ws_app *app);

/* Ends every command still running and waits for it, then frees every
 * part in the reverse order of its making. Accepts NULL and an app that
 * ws_app_start left half-built. */
void ws_app_free(struct ws_app *app);

#endif
