/* Shared by the service files; not for other modules. */
#ifndef WS_RPC_SERVICES_INTERNAL_H
#define WS_RPC_SERVICES_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "server/rpc/services/services.h"
#include "server/vfs/ops.h"
#include "server/work/pool.h"
#include "workspace/v1/common.pb-c.h"

/* The pool's lanes the handlers put work on. */
enum ws_services_lane {
    /* Tree walks, searches, hashing, usage walks: CPU and disk, at a lower
     * priority than the RPC threads. */
    WS_SERVICES_LANE_FS,
    /* Calls that may wait on a container daemon, and the spawns behind
     * them: at the server's own priority, which a spawned command
     * inherits. */
    WS_SERVICES_LANE_DAEMON,
    WS_SERVICES_LANES,
};

/* The parts (struct ws_services_deps) are borrowed; the rest is owned. */
struct ws_services {
    struct ws_registry *reg;
    struct ws_exec *exec;
    /* NULL: the built-in set. */
    const struct ws_providers *providers;
    /* NULL when the server keeps no audit log. */
    struct ws_audit *audit;
    char *exec_path;
    /* NULL: every job runs on the handler's thread. */
    struct ws_pool *pool;
    /* The pool's lane of each enum ws_services_lane. */
    unsigned lanes[WS_SERVICES_LANES];
    /* A charge of the byte quota may walk workspaces. */
    bool usage_walks;
    atomic_bool draining;
    pthread_mutex_t watch_lock;
    struct watcher *watchers;
    struct ws_rpc_method *methods;
    size_t n_methods;
};

/* Each service file appends its methods; returns the number added. */
size_t ws_services_workspaces(struct ws_services *s, struct ws_rpc_method *out);
size_t ws_services_filesystem(struct ws_services *s, struct ws_rpc_method *out);
/* Parts of the FileSystem service kept in files of their own, added by
 * ws_services_filesystem: Watch (fs_watch.c), ReadArchive and
 * WriteArchive (fs_archive.c). */
size_t ws_services_fs_watch(struct ws_services *s, struct ws_rpc_method *out);
size_t ws_services_fs_archive(struct ws_services *s, struct ws_rpc_method *out);

/* For the FileSystem files (filesystem.c): what every file RPC starts with
 * (the workspace, which must have the fs capability, and the client's path
 * checked; on failure the call has been failed and nothing is held); a
 * failure (a memory workspace's quota explained); a success, with its
 * audit event (NULL: none) logged before the answer goes out. */
struct ws_audit_file;
int ws_services_fs_workspace(struct ws_call *call, const char *id, const char *path,
                             struct ws_workspace **ret);
void ws_services_fs_fail(struct ws_call *call, struct ws_workspace *ws, int err,
                         const struct ws_diag *d);
void ws_services_fs_finish(struct ws_call *call, struct ws_workspace *ws,
                           const ProtobufCMessage *resp, const struct ws_audit_file *audit);
size_t ws_services_providers(struct ws_services *s, struct ws_rpc_method *out);
size_t ws_services_health(struct ws_services *s, struct ws_rpc_method *out);
size_t ws_services_exec(struct ws_services *s, struct ws_rpc_method *out);
size_t ws_services_reflection(struct ws_services *s, struct ws_rpc_method *out);
void ws_services_health_drain(struct ws_services *s);

#define WS_SERVICES_MAX_METHODS 64

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

/* ---- work off the completion-queue threads ----
 *
 * A handler whose work may take long (a walk, a search, a hash, a call to
 * a container daemon) hands it to a lane of the pool instead of doing it
 * on the completion-queue thread that delivered the call, so one tenant's
 * slow call never holds up another's. The job lives in the call's state
 * (ws_call_data), which its on_destroy frees: the job holds a reference
 * on the call until it is done, so the state, and the workspace it holds,
 * outlive the job. The handler's on_cancel calls ws_services_job_cancel,
 * so a job still queued when its client gives up never runs. */
struct ws_services_job {
    /* Cancelled by on_cancel; the deadline is the call's. Read by the
     * running job (ws_work_ctl_check) to stop early. */
    struct ws_work_ctl ctl;
    struct ws_call *call;
    /* The work, on a pool thread (or inline): it ends the call, or leaves
     * it to a later callback, as the handler would have. */
    void (*run)(struct ws_call *call);
    /* Optional: called instead of run when the job does not run, before
     * the call is failed: frees what run would have consumed. */
    void (*skipped)(struct ws_call *call);
};

/* Ties j to call, with the call's deadline. Once per call, before the
 * first ws_services_offload. */
void ws_services_job_init(struct ws_services_job *j, struct ws_call *call);

/* Runs j->run = run on `lane` for the call's tenant, holding a reference
 * on the call until it returns. Exactly one of run and skipped is called.
 * When the job does not run (its client cancelled or its deadline passed
 * while it waited, the pool is shutting down, or the tenant already has
 * too much work waiting: RESOURCE_EXHAUSTED QUOTA
 * quota=tenant_pending_work) skipped is called and the call is failed
 * with the reason. Call it from one of the call's callbacks, or from the
 * run of its previous job. */
void ws_services_offload(struct ws_call *call, struct ws_services_job *j,
                         enum ws_services_lane lane, void (*run)(struct ws_call *call),
                         void (*skipped)(struct ws_call *call));

/* For on_cancel: a queued job of the call is dropped at once (its skipped
 * runs here), a running one sees its ctl cancelled. */
void ws_services_job_cancel(struct ws_call *call, struct ws_services_job *j);

/* A deep copy of msg (through its wire form), freed with
 * protobuf_c_message_free_unpacked; NULL when memory is short. */
ProtobufCMessage *ws_services_message_copy(const ProtobufCMessage *msg);

/* The state of a unary call whose work goes to the pool: the job, a copy
 * of the request (the core frees its own when on_start returns) and the
 * workspace the call works on. */
struct ws_services_unary {
    struct ws_services_job job;
    ProtobufCMessage *req;
    /* A reference, released with the state; NULL until looked up. */
    struct ws_workspace *ws;
};

/* Makes the state of `call`, with a copy of req, and sets it as the
 * call's data; NULL, the call failed, when memory is short. */
struct ws_services_unary *ws_services_unary_new(struct ws_call *call, const ProtobufCMessage *req);
/* on_cancel and on_destroy of such a call (both accept a call without
 * state). */
void ws_services_unary_cancel(struct ws_call *call);
void ws_services_unary_destroy(struct ws_call *call);

/* The row of a unary method whose state is a struct ws_services_unary. */
#define WS_SERVICES_OFFLOADED(path_, request_, on_start_)                                          \
    WS_SERVICES_METHOD(path_, WS_RPC_UNARY, request_, .on_start = (on_start_),                     \
                       .on_cancel = ws_services_unary_cancel,                                      \
                       .on_destroy = ws_services_unary_destroy)

/* A command's time limit when the workspace's shell policy sets none. */
#define WS_SERVICES_MAX_DURATION_DEFAULT_MS (60ull * 60 * 1000)

/* The oom_score_adj of a command that runs as a workspace's uid on the
 * host: the first the kernel kills under memory pressure. */
#define WS_SERVICES_COMMAND_OOM_SCORE_ADJ 1000

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
