/* The workspace.v1 services and grpc.health.v1.Health on top of the RPC
 * core: request validation, registry calls, response building. Handlers
 * turn protobuf requests into registry / fs-ops calls and errors into
 * ws_call_fail; they never touch a file descriptor themselves. */
#ifndef WS_RPC_SERVICES_H
#define WS_RPC_SERVICES_H

#include <stdbool.h>
#include <stddef.h>

#include "server/base/errors.h"
#include "server/registry/registry.h"
#include "server/rpc/call.h"

struct ws_services;

struct ws_services_config {
    /* SIGTERM-to-SIGKILL grace for commands; 0: the default. */
    int kill_grace_ms;
    /* Force the subreaper fallback instead of a cgroup per command. */
    bool force_subreaper;
    /* Where commands are looked up (colon-separated absolute dirs), and
     * the children's PATH; NULL: WS_SERVICES_EXEC_PATH_DEFAULT. Copied.
     * For local-sandbox, dirs outside /usr must also be bound into the
     * workspace's sandbox (read_only_paths) to be usable there. */
    const char *exec_path;
    /* Where the sandbox keeps its /etc snapshot (made 0700); NULL: none
     * (each /etc entry is then bound on its own, slower). */
    const char *sandbox_dir;
    /* Names and labels this server's Docker containers; stable across
     * restarts of the same state directory. NULL: the Docker provider's
     * runtime is not started (its workspaces fail to open). */
    const char *server_id;
    /* Where the per-workspace audit logs are kept (created 0700; outside
     * every workspace); NULL: no audit log. */
    const char *audit_dir;
    /* Where local-bash commands get their own empty HOME (made 0700,
     * outside every workspace; emptied at start); NULL: a temporary
     * directory of the exec layer's. */
    const char *home_root;
    /* Per-tenant quota, 0: none. Commands of one tenant running at once
     * across all its workspaces (background ones included); one more is
     * RESOURCE_EXHAUSTED QUOTA with quota=tenant_running_commands. */
    unsigned tenant_max_commands;
};

#define WS_SERVICES_EXEC_PATH_DEFAULT "/usr/local/bin:/usr/bin:/bin"
#define WS_SERVICES_EXEC_PATH_MAX     4096

/* Whether `path` is a usable exec path: 1-WS_SERVICES_EXEC_PATH_MAX bytes
 * of colon-separated absolute directories, none empty. */
bool ws_services_exec_path_valid(const char *path);

/* Handlers share `reg` (not owned). Starts the exec layer (its pump
 * thread) and hooks it into workspace Close. */
int ws_services_new(struct ws_registry *reg, const struct ws_services_config *cfg,
                    struct ws_services **ret);
/* Only after the RPC server that used the methods has shut down: ends
 * every command still running (background ones too) and waits for them. */
void ws_services_free(struct ws_services *s);

/* The method table to register with ws_rpc_server_new. */
const struct ws_rpc_method *ws_services_methods(struct ws_services *s, size_t *ret_n);

/* Removes the Docker containers an earlier run of this server left
 * (before serving). Returns how many, or a negative error with d set when
 * the daemon could not be asked. */
int ws_services_reconcile(struct ws_services *s, struct ws_diag *d);

/* Health turns NOT_SERVING (watchers are told, then their streams end). */
void ws_services_drain(struct ws_services *s);

#endif
