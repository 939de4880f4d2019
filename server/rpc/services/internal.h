/* Shared by the service files; not for other modules. */
#ifndef WS_RPC_SERVICES_INTERNAL_H
#define WS_RPC_SERVICES_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "server/rpc/services/services.h"
#include "server/vfs/ops.h"
#include "workspace/v1/common.pb-c.h"

/* The parts (struct ws_services_deps) are borrowed; the rest is owned. */
struct ws_services {
    struct ws_registry *reg;
    struct ws_exec *exec;
    /* NULL: the built-in set. */
    const struct ws_providers *providers;
    /* NULL when the server keeps no audit log. */
    struct ws_audit *audit;
    char *exec_path;
    atomic_bool draining;
    pthread_mutex_t watch_lock;
    struct watcher *watchers;
    struct ws_rpc_method *methods;
    size_t n_methods;
};

/* Each service file appends its methods; returns the number added. */
size_t ws_services_workspaces(struct ws_services *s, struct ws_rpc_method *out);
size_t ws_services_filesystem(struct ws_services *s, struct ws_rpc_method *out);
size_t ws_services_providers(struct ws_services *s, struct ws_rpc_method *out);
size_t ws_services_health(struct ws_services *s, struct ws_rpc_method *out);
size_t ws_services_exec(struct ws_services *s, struct ws_rpc_method *out);
void ws_services_health_drain(struct ws_services *s);

#define WS_SERVICES_MAX_METHODS 32

/* For the service files, which state their methods as a static table of
 * these rows: a method's full path, its kind, the descriptor of its
 * request messages, then its handlers as designated initializers
 * (.on_start = ..., .on_sent = ...). WS_SERVICES_UNARY is the row of a
 * unary method whose only handler is on_start. */
#define WS_SERVICES_METHOD(path_, kind_, request_, ...)                                            \
    {                                                                                              \
        .path = (path_), .kind = (kind_), .request = (request_), __VA_ARGS__                       \
    }
#define WS_SERVICES_UNARY(path_, request_, on_start_)                                              \
    WS_SERVICES_METHOD(path_, WS_RPC_UNARY, request_, .on_start = (on_start_))

/* Copies a service's n methods to `out` with the services as every
 * method's data (ws_call_method_data); returns n. */
size_t ws_services_add_methods(struct ws_services *s, const struct ws_rpc_method *methods, size_t n,
                               struct ws_rpc_method *out);

/* A command's time limit when the workspace's shell policy sets none. */
#define WS_SERVICES_MAX_DURATION_DEFAULT_MS (60ull * 60 * 1000)

/* The longest host path of a workspace directory the handlers handle. */
#define WS_SERVICES_DIR_MAX 4096

/* The effective shell.max_duration_ms of a workspace. */
uint64_t ws_services_max_duration_ms(const Workspace__V1__Capabilities *caps);

/* Audit hook for the FileSystem service: records a file event that
 * succeeded (failures to record are reported on stderr, never to the
 * client whose call did succeed). */
struct ws_audit_file;
void ws_services_audit_file(struct ws_services *s, struct ws_workspace *ws,
                            const struct ws_audit_file *f);

/* A FileInfo whose strings live in `storage` (path, path_bytes point into
 * the entry given). */
void ws_fileinfo_fill(Workspace__V1__FileInfo *fi, const char *path, size_t path_len,
                      const struct ws_stat *st);

/* Looks up the workspace for an id-scoped call; on failure fails the call
 * and returns the error. */
int ws_services_workspace(struct ws_call *call, const char *id, unsigned need_caps,
                          struct ws_workspace **ret);

/* Fails the call with err, and records the outcome on the workspace. */
void ws_services_fail(struct ws_call *call, struct ws_workspace *ws, int err,
                      const struct ws_diag *d);

/* The provider's view of ws for one call: *ret points at ws's id and
 * record, and at `dir` (size bytes), which receives the host path of its
 * directory when the provider keeps one (else ret->dir is NULL). Returns
 * 0 or -ENAMETOOLONG. */
struct ws_provider_ws;
int ws_services_provider_ws(struct ws_services *s, struct ws_workspace *ws, char *dir, size_t size,
                            struct ws_provider_ws *ret);

/* Validates a client path (ws_vfs_check_path); fails the call if bad. */
int ws_services_check_path(struct ws_call *call, struct ws_workspace *ws, const char *path);

#endif
