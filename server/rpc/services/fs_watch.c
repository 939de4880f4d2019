/* FileSystem.Watch: a stream of changes below a workspace path.
 *
 * The work is the watch engine's (server/watch): one thread for the whole
 * server, started with the first Watch. A call holds a reference on its
 * workspace, which keeps the storage the watch reads alive, and the watch
 * holds a reference on the call until the engine has released it.
 *
 * Streaming: events are taken from the watch whenever no send is in
 * flight: after each completed send (on_sent) and when the engine says
 * there are new ones (notify, on the engine's thread). `sending` under the
 * state's lock makes sure exactly one of them sends; a notify that comes
 * while a send is in flight is not lost, since on_sent looks again.
 *
 * The end: GONE (sent, then OK), the client's cancel, or the workspace
 * closing (checked by the engine every WS_WATCH_CHECK_MS, and when the
 * watched directory disappears with it): the call then fails as any call
 * on a closed workspace does (NOT_FOUND, NO_SUCH_WORKSPACE).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "server/base/macros.h"
#include "server/base/utf8.h"
#include "server/registry/registry.h"
#include "server/rpc/services/internal.h"
#include "server/watch/watch.h"
#include "workspace/v1/filesystem.pb-c.h"

/* The server's engine: made with the first Watch, kept for the process's
 * life (its thread sleeps while no watch runs). */
static pthread_mutex_t engine_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ws_watch_engine *engine;
static unsigned limit_watches, limit_per_workspace;

/* Sets the server's watch limits (--max-watches, and
 * --max-watches-per-workspace; 0: the defaults). Call before serving. */
void ws_services_watch_limits(unsigned max_watches, unsigned max_per_workspace)
{
    pthread_mutex_lock(&engine_lock);
    limit_watches = max_watches;
    limit_per_workspace = max_per_workspace;
    if (engine)
        ws_watch_engine_set_limits(engine, limit_watches, limit_per_workspace);
    pthread_mutex_unlock(&engine_lock);
}

bool ws_services_watched(const char *workspace_id)
{
    bool watched = false;

    pthread_mutex_lock(&engine_lock);
    if (engine)
        watched = ws_watch_engine_count_key(engine, workspace_id) > 0;
    pthread_mutex_unlock(&engine_lock);
    return watched;
}

static int get_engine(struct ws_watch_engine **ret)
{
    int r = 0;

    pthread_mutex_lock(&engine_lock);
    if (!engine) {
        r = ws_watch_engine_new(&engine);
        if (r == 0)
            ws_watch_engine_set_limits(engine, limit_watches, limit_per_workspace);
    }
    if (r == 0)
        *ret = engine;
    pthread_mutex_unlock(&engine_lock);
    return r;
}

struct watch_state {
    struct ws_services_job job;
    struct ws_call *call;
    struct ws_workspace *ws;
    Workspace__V1__WatchRequest *req;
    pthread_mutex_t lock;
    /* NULL before the start and once stopped. */
    struct ws_watch *w;
    bool sending;
    bool finished;
};

/* The error of a workspace that is no longer open, or 0. */
static int closed_error(struct ws_workspace *ws)
{
    struct ws_workspace_info info;

    ws_workspace_describe(ws, &info);
    switch (info.state) {
    case WS_STATE_OPEN:
    case WS_STATE_OPENING:
        return 0;
    case WS_STATE_EVICTED:
    case WS_STATE_FAILED:
        return -WS_EEVICTED;
    default:
        return -WS_ENOWORKSPACE;
    }
}

static int watch_check(void *ud)
{
    struct watch_state *st = ud;

    return closed_error(st->ws);
}

static void watch_released(void *ud)
{
    struct watch_state *st = ud;

    ws_call_unref(st->call);
}

/* Takes the watch away from the state (st->lock held): the caller stops
 * it once the lock is dropped. */
static struct ws_watch *take_watch(struct watch_state *st)
{
    struct ws_watch *w = st->w;

    st->w = NULL;
    st->finished = true;
    return w;
}

static Workspace__V1__WatchEventType event_type(enum ws_watch_kind k)
{
    switch (k) {
    case WS_WATCH_READY:
        return WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_READY;
    case WS_WATCH_CREATED:
        return WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_CREATED;
    case WS_WATCH_MODIFIED:
        return WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_MODIFIED;
    case WS_WATCH_REMOVED:
        return WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_REMOVED;
    case WS_WATCH_MOVED:
        return WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_MOVED;
    case WS_WATCH_OVERFLOW:
        return WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_OVERFLOW;
    case WS_WATCH_GONE:
        return WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_GONE;
    }
    return WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_TYPE_UNSPECIFIED;
}

/* A path as the string field, or as bytes when it is not UTF-8. */
static void set_path(char *p, char **ret_str, ProtobufCBinaryData *ret_bytes)
{
    if (!p)
        return;
    if (ws_utf8_valid(p, strlen(p))) {
        *ret_str = p;
    } else {
        ret_bytes->data = (uint8_t *)p;
        ret_bytes->len = strlen(p);
    }
}

/* Sends the next event if none is in flight. */
static void watch_pump(struct watch_state *st)
{
    struct ws_watch_event *ev = NULL;
    struct ws_watch *stop = NULL;
    int r;

    pthread_mutex_lock(&st->lock);
    if (st->sending || st->finished || !st->w) {
        pthread_mutex_unlock(&st->lock);
        return;
    }
    r = ws_watch_next(st->w, &ev);
    if (r == 0) {
        pthread_mutex_unlock(&st->lock);
        return;
    }
    if (r < 0 || ev->kind == WS_WATCH_GONE) {
        stop = take_watch(st);
        /* The directory went with its workspace: the call ends as others
         * on a closed workspace do. */
        int closed = closed_error(st->ws);

        if (closed < 0)
            r = closed;
    }
    st->sending = r > 0;
    pthread_mutex_unlock(&st->lock);

    if (r < 0) {
        ws_services_fs_fail(st->call, st->ws, r == -ENOENT ? -WS_EINTERNAL : r, NULL);
        ws_watch_event_free(ev);
        if (stop)
            ws_watch_stop(stop);
        return;
    }
    Workspace__V1__WatchEvent msg = WORKSPACE__V1__WATCH_EVENT__INIT;
    msg.type = event_type(ev->kind);
    msg.file_type = (Workspace__V1__FileType)ev->type;
    msg.dropped = ev->dropped;
    set_path(ev->path, &msg.path, &msg.path_bytes);
    set_path(ev->from, &msg.from_path, &msg.from_path_bytes);
    int sent = ws_call_send(st->call, &msg.base);
    ws_watch_event_free(ev);
    if (stop) {
        /* GONE: the status follows the send. */
        ws_call_finish(st->call, NULL);
        ws_watch_stop(stop);
        return;
    }
    if (sent < 0) {
        /* Cancelled or over: on_cancel (if any) stops the watch. */
        pthread_mutex_lock(&st->lock);
        st->sending = false;
        st->finished = true;
        pthread_mutex_unlock(&st->lock);
    }
    /* Otherwise on_sent continues. */
}

static void watch_notify(void *ud)
{
    watch_pump(ud);
}

static void watch_sent(struct ws_call *call, bool ok)
{
    struct watch_state *st = ws_call_data(call);

    pthread_mutex_lock(&st->lock);
    st->sending = false;
    if (!ok)
        st->finished = true;
    pthread_mutex_unlock(&st->lock);
    if (ok)
        watch_pump(st);
}

/* On the FS lane: the watches are put in place (a recursive one walks the
 * tree), then READY goes out. */
static void watch_begin(struct ws_call *call)
{
    struct watch_state *st = ws_call_data(call);
    const Workspace__V1__WatchRequest *req = st->req;
    struct ws_watch_engine *e = NULL;
    struct ws_diag d = {0};
    struct ws_watch *w;
    int err;

    err = get_engine(&e);
    if (err < 0) {
        ws_services_fs_fail(call, st->ws, err, NULL);
        return;
    }
    struct ws_watch_config cfg = {
        .fs = ws_fsops_vfs(ws_workspace_fsops(st->ws)),
        .key = ws_workspace_id(st->ws),
        .path = req->path[0] ? req->path : ".",
        .recursive = req->recursive,
        .coalesce_ms = req->coalesce_ms,
        .include = (const char *const *)req->include,
        .n_include = req->n_include,
        .exclude = (const char *const *)req->exclude,
        .n_exclude = req->n_exclude,
        .notify = watch_notify,
        .check = watch_check,
        .released = watch_released,
        .ud = st,
    };
    /* The watch's reference, released by the engine (watch_released). */
    ws_call_ref(call);
    err = ws_watch_start(e, &cfg, &d, &w);
    if (err < 0) {
        ws_call_unref(call);
        ws_services_fs_fail(call, st->ws, err, &d);
        return;
    }
    pthread_mutex_lock(&st->lock);
    if (st->finished) {
        /* Cancelled while the watches were put in place. */
        pthread_mutex_unlock(&st->lock);
        ws_watch_stop(w);
        return;
    }
    st->w = w;
    pthread_mutex_unlock(&st->lock);
    watch_pump(st);
}

static void watch_start(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__WatchRequest *req = (const void *)msg;
    struct watch_state *st = calloc(1, sizeof(*st));

    if (!st) {
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    pthread_mutex_init(&st->lock, NULL);
    st->call = call;
    ws_call_set_data(call, st);
    if (ws_services_fs_workspace(call, req->workspace_id, req->path[0] ? req->path : ".", &st->ws) <
        0)
        return;
    st->req = (Workspace__V1__WatchRequest *)ws_services_message_copy(msg);
    if (!st->req) {
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    ws_services_job_init(&st->job, call);
    ws_services_offload(call, &st->job, WS_SERVICES_LANE_FS, watch_begin, NULL);
}

static void watch_cancel(struct ws_call *call)
{
    struct watch_state *st = ws_call_data(call);
    struct ws_watch *w;

    if (!st)
        return;
    ws_services_job_cancel(call, &st->job);
    pthread_mutex_lock(&st->lock);
    w = take_watch(st);
    pthread_mutex_unlock(&st->lock);
    if (w)
        ws_watch_stop(w);
}

static void watch_destroy(struct ws_call *call)
{
    struct watch_state *st = ws_call_data(call);

    if (!st)
        return;
    ws_workspace_unref(st->ws);
    if (st->req)
        protobuf_c_message_free_unpacked(&st->req->base, NULL);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

size_t ws_services_fs_watch(struct ws_services *s, struct ws_rpc_method *out)
{
    static const struct ws_rpc_method methods[] = {
        WS_SERVICES_METHOD("/workspace.v1.FileSystem/Watch", WS_RPC_SERVER_STREAM,
                           &workspace__v1__watch_request__descriptor, .on_start = watch_start,
                           .on_sent = watch_sent, .on_cancel = watch_cancel,
                           .on_destroy = watch_destroy),
    };

    return ws_services_add_methods(s, methods, WS_ELEMENTSOF(methods), out);
}
