/* The workspace.v1 services, grpc.health.v1.Health and gRPC server
 * reflection (v1 and v1alpha) on top of the RPC core: request validation,
 * registry calls, response building. Handlers turn protobuf requests into
 * registry / fs-ops calls and errors into ws_call_fail; they never touch a
 * file descriptor themselves. */
#ifndef WS_RPC_SERVICES_H
#define WS_RPC_SERVICES_H

#include <stdbool.h>
#include <stddef.h>

#include "server/base/errors.h"
#include "server/registry/registry.h"
#include "server/rpc/call.h"

struct ws_services;

#define WS_SERVICES_EXEC_PATH_DEFAULT "/usr/local/bin:/usr/bin:/bin"
#define WS_SERVICES_EXEC_PATH_MAX     4096

/* Whether `path` is a usable exec path: 1-WS_SERVICES_EXEC_PATH_MAX bytes
 * of colon-separated absolute directories, none empty. */
bool ws_services_exec_path_valid(const char *path);

struct ws_exec;
struct ws_audit;
struct ws_providers;
struct ws_proc;
struct ws_proc_result;
struct ws_pool;

/* The parts the handlers work with, built by the caller, which keeps them
 * alive until after ws_services_free. */
struct ws_services_deps {
    struct ws_registry *reg;
    struct ws_exec *exec;
    /* NULL: no audit log. */
    struct ws_audit *audit;
    /* The server's providers with their runtimes, the set the registry
     * holds too: ListProviders asks each of them. NULL: the built-in set,
     * without runtimes. */
    const struct ws_providers *providers;
    /* Where commands are looked up (colon-separated absolute dirs), and
     * the children's PATH, unless the provider runs its commands with a
     * PATH of its own; NULL: WS_SERVICES_EXEC_PATH_DEFAULT. Copied. A
     * command run in a box finds only the dirs bound into the box. */
    const char *exec_path;
    /* Where slow work runs, off the completion-queue threads: a pool with
     * the lanes WS_SERVICES_LANE_FS_NAME (walks, searches, hashing) and
     * WS_SERVICES_LANE_DAEMON_NAME (container daemon calls and the spawns
     * behind them). NULL: all of it runs on the handler's thread. */
    struct ws_pool *pool;
    /* The registry keeps a byte quota, whose charges may walk a tenant's
     * workspaces (ws_registry_usage_charge): such charges go to the pool
     * too. */
    bool usage_walks;
};

#define WS_SERVICES_LANE_FS_NAME     "fs"
#define WS_SERVICES_LANE_DAEMON_NAME "daemon"

/* The services own only their method table, the exec path's copy and the
 * Health watchers. Returns 0, -EINVAL (exec_path is not valid, or the
 * pool lacks one of the two lanes) or -ENOMEM. */
int ws_services_new(const struct ws_services_deps *deps, struct ws_services **ret);
/* Only after the RPC server that used the methods has shut down (which
 * waits for every job of theirs in the pool: each holds a reference on its
 * call). Accepts NULL. */
void ws_services_free(struct ws_services *s);

/* The exec layer's callback for a finished command (struct
 * ws_exec_config.on_finished, with the services as ud): the workspace's
 * usage is measured again, and the command goes into the audit log, the
 * metrics and a log line. */
void ws_services_exec_audit(void *ud, const char *workspace_id, struct ws_proc *p,
                            const struct ws_proc_result *r);

/* The method table to register with ws_rpc_server_new. */
const struct ws_rpc_method *ws_services_methods(struct ws_services *s, size_t *ret_n);

/* Health turns NOT_SERVING (watchers are told, then their streams end). */
void ws_services_drain(struct ws_services *s);

/* FileSystem.Watch's limits (fs_watch.c): Watch calls at once on the
 * whole server and on one workspace; 0 keeps a default (100, 16). Call
 * before serving. */
void ws_services_watch_limits(unsigned max_watches, unsigned max_per_workspace);
/* Whether a FileSystem.Watch runs on the workspace: a client watching it
 * is using it (the idle timeout waits). */
bool ws_services_watched(const char *workspace_id);

#endif
