/* FileSystem.ReadArchive and WriteArchive: whole trees in and out as tar
 * (server/vfs/archive.h does the work).
 *
 * ReadArchive produces each stretch of the archive on the FS lane and
 * sends it; the next stretch is made only once the client took the last
 * (on_sent), so a slow reader holds one stretch of memory.
 *
 * WriteArchive extracts on a thread of its own, fed by the messages as
 * they arrive: the next message is asked for only while the extractor's
 * queue has room (the extractor asks for it when it drains), so a fast
 * client cannot fill the server's memory, and a slow one holds a thread
 * that only waits. The thread finishes the call. At most
 * ARCHIVE_UPLOADS_MAX run at once (RESOURCE_EXHAUSTED QUOTA
 * quota=archive_uploads). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "server/audit/audit.h"
#include "server/base/macros.h"
#include "server/base/utf8.h"
#include "server/rpc/services/internal.h"
#include "server/vfs/archive.h"
#include "workspace/v1/filesystem.pb-c.h"

/* Bytes of archive per ReadArchive message. */
#define ARCHIVE_CHUNK (1024 * 1024)
/* Directory entries one ReadArchive may walk. */
#define ARCHIVE_MAX_ENTRIES 1000000
/* Path bytes of the trailer's skipped list (the message stays small). */
#define TRAILER_PATHS_MAX   (1024 * 1024)
#define ARCHIVE_UPLOADS_MAX 64

static atomic_uint uploads;

/* The trailer message: pointers into stats, valid while they are. */
struct trailer {
    Workspace__V1__ArchiveTrailer msg;
    Workspace__V1__ArchiveSkipped *items;
    Workspace__V1__ArchiveSkipped **ptrs;
};

static int trailer_fill(struct trailer *t, const struct ws_tar_stats *s)
{
    workspace__v1__archive_trailer__init(&t->msg);
    t->msg.entries = s->entries;
    t->msg.files = s->files;
    t->msg.directories = s->directories;
    t->msg.symlinks = s->symlinks;
    t->msg.hardlinks = s->hardlinks;
    t->msg.bytes = s->bytes;
    t->msg.truncated = s->truncated;
    t->items = NULL;
    t->ptrs = NULL;
    if (!s->n_skips)
        return 0;
    t->items = calloc(s->n_skips, sizeof(*t->items));
    t->ptrs = calloc(s->n_skips, sizeof(*t->ptrs));
    if (!t->items || !t->ptrs)
        return -ENOMEM;
    size_t bytes = 0, n = 0;
    for (; n < s->n_skips; n++) {
        bytes += strlen(s->skips[n].path);
        if (bytes > TRAILER_PATHS_MAX)
            break;
        workspace__v1__archive_skipped__init(&t->items[n]);
        /* Paths come from the workspace: the wire needs UTF-8. */
        t->items[n].path =
            ws_utf8_valid(s->skips[n].path, strlen(s->skips[n].path)) ? s->skips[n].path : "";
        t->items[n].reason = (char *)s->skips[n].reason;
        t->ptrs[n] = &t->items[n];
    }
    t->msg.n_skipped = n;
    t->msg.skipped = t->ptrs;
    return 0;
}

static void trailer_free(struct trailer *t)
{
    free(t->items);
    free(t->ptrs);
}

static enum ws_tar_format format_of(Workspace__V1__ArchiveFormat f)
{
    return f == WORKSPACE__V1__ARCHIVE_FORMAT__ARCHIVE_FORMAT_TAR_GZIP ? WS_TAR_GZIP : WS_TAR_PLAIN;
}

/* ---- ReadArchive ---- */

struct rarch_state {
    struct ws_services_job job;
    struct ws_workspace *ws;
    Workspace__V1__ReadArchiveRequest *req; /* a copy, for the first job */
    struct ws_budget budget;
    struct ws_tar_out *tar;
};

static void rarch_destroy(struct ws_call *call)
{
    struct rarch_state *st = ws_call_data(call);

    if (!st)
        return;
    ws_tar_out_free(st->tar);
    if (st->req)
        protobuf_c_message_free_unpacked(&st->req->base, NULL);
    ws_workspace_unref(st->ws);
    free(st);
}

static void rarch_produce(struct ws_call *call)
{
    struct rarch_state *st = ws_call_data(call);
    struct ws_diag d = {0};
    const void *data;
    size_t len;
    int r;

    if (!st->tar) {
        const Workspace__V1__ReadArchiveRequest *req = st->req;
        struct ws_tar_out_request tr = {
            .path = req->path,
            .format = format_of(req->format),
            .include = (const char *const *)req->include,
            .n_include = req->n_include,
            .exclude = (const char *const *)req->exclude,
            .n_exclude = req->n_exclude,
            .budget = &st->budget,
        };
        r = ws_tar_out_new(ws_workspace_fsops(st->ws), &tr, &d, &st->tar);
        if (r < 0) {
            ws_services_fs_fail(call, st->ws, r, &d);
            return;
        }
    }
    r = ws_tar_out_next(st->tar, ARCHIVE_CHUNK, &data, &len);
    if (r < 0) {
        ws_services_fs_fail(call, st->ws, r, NULL);
        return;
    }
    Workspace__V1__ReadArchiveResponse resp = WORKSPACE__V1__READ_ARCHIVE_RESPONSE__INIT;
    if (r == 1) {
        resp.data.data = (uint8_t *)data;
        resp.data.len = len;
        ws_call_send(call, &resp.base);
        return;
    }
    struct trailer t;
    if (trailer_fill(&t, ws_tar_out_stats(st->tar)) < 0) {
        trailer_free(&t);
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    resp.trailer = &t.msg;
    ws_services_fs_finish(call, st->ws, &resp.base, NULL);
    trailer_free(&t);
}

static void rarch_start(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__ReadArchiveRequest *req = (const void *)msg;
    struct rarch_state *st = calloc(1, sizeof(*st));

    if (!st) {
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    ws_call_set_data(call, st);
    if (ws_services_fs_workspace(call, req->workspace_id, req->path, &st->ws) < 0)
        return;
    st->req = (Workspace__V1__ReadArchiveRequest *)ws_services_message_copy(msg);
    if (!st->req) {
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    ws_services_job_init(&st->job, call);
    st->budget = (struct ws_budget){.ctl = &st->job.ctl, .max_entries = ARCHIVE_MAX_ENTRIES};
    ws_services_offload(call, &st->job, WS_SERVICES_LANE_FS, rarch_produce, NULL);
}

static void rarch_sent(struct ws_call *call, bool ok)
{
    struct rarch_state *st = ws_call_data(call);

    if (ok)
        ws_services_offload(call, &st->job, WS_SERVICES_LANE_FS, rarch_produce, NULL);
}

static void rarch_cancel(struct ws_call *call)
{
    struct rarch_state *st = ws_call_data(call);

    if (st)
        ws_services_job_cancel(call, &st->job);
}

/* ---- WriteArchive ---- */

struct warch_state {
    struct ws_call *call;
    struct ws_workspace *ws;
    struct ws_registry *reg;
    struct ws_tar_in *tar;
    char *path;
    bool require_finish;
    bool counted; /* holds one of the uploads */
    bool ended;   /* the stream's end was given to the extractor */
    /* A refusal found on a message (set before the extractor is
     * cancelled, read by it once it stops). */
    pthread_mutex_t lock;
    int early_err;
    struct ws_diag early_d;
};

static void warch_destroy(struct ws_call *call)
{
    struct warch_state *st = ws_call_data(call);

    if (!st)
        return;
    ws_tar_in_free(st->tar);
    if (st->counted)
        atomic_fetch_sub(&uploads, 1);
    ws_workspace_unref(st->ws);
    pthread_mutex_destroy(&st->lock);
    free(st->path);
    free(st);
}

static int quota_check(void *userdata, uint64_t bytes, struct ws_diag *d)
{
    struct warch_state *st = userdata;

    return ws_registry_usage_check(st->reg, st->ws, (int64_t)bytes, d);
}

static void drained(void *userdata)
{
    struct warch_state *st = userdata;

    ws_call_recv(st->call);
}

/* Stops the upload with err (the extractor finishes the call with it). */
static void warch_refuse(struct warch_state *st, int err, const struct ws_diag *d)
{
    pthread_mutex_lock(&st->lock);
    if (!st->early_err) {
        st->early_err = err;
        if (d)
            st->early_d = *d;
    }
    pthread_mutex_unlock(&st->lock);
    ws_tar_in_cancel(st->tar);
}

static void warch_end(struct warch_state *st)
{
    if (!st->ended) {
        st->ended = true;
        ws_tar_in_end(st->tar);
    }
}

static void *warch_thread(void *arg)
{
    struct ws_call *call = arg;
    struct warch_state *st = ws_call_data(call);
    struct ws_diag d = {0};
    int r = ws_tar_in_run(st->tar, &d);
    int64_t charged = 0;

    pthread_mutex_lock(&st->lock);
    if (st->early_err) {
        r = st->early_err;
        d = st->early_d;
    }
    pthread_mutex_unlock(&st->lock);
    if (r == 0) {
        charged = (int64_t)ws_tar_in_stats(st->tar)->bytes;
        r = ws_registry_usage_charge(st->reg, st->ws, charged, &d);
        if (r < 0)
            charged = 0;
    }
    if (r == 0)
        r = ws_tar_in_publish(st->tar, &d);
    if (r < 0) {
        ws_tar_in_discard(st->tar);
        if (charged)
            ws_registry_usage_refund(st->reg, st->ws, charged);
        if (r == -ECANCELED && ws_call_cancelled(call))
            ws_call_fail(call, r, NULL);
        else
            ws_services_fs_fail(call, st->ws, r, &d);
    } else {
        Workspace__V1__WriteArchiveResponse resp = WORKSPACE__V1__WRITE_ARCHIVE_RESPONSE__INIT;
        struct trailer t;
        ws_registry_usage_stale(st->reg, ws_workspace_id(st->ws));
        if (trailer_fill(&t, ws_tar_in_stats(st->tar)) < 0) {
            ws_call_fail(call, -ENOMEM, NULL);
        } else {
            resp.trailer = &t.msg;
            ws_services_fs_finish(call, st->ws, &resp.base,
                                  &(struct ws_audit_file){
                                      .event = "extract",
                                      .path = st->path,
                                      .count = ws_tar_in_stats(st->tar)->entries,
                                  });
        }
        trailer_free(&t);
    }
    ws_call_unref(call);
    return NULL;
}

static void warch_start(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__WriteArchiveRequest *req = (const void *)msg;
    struct warch_state *st = calloc(1, sizeof(*st));
    struct ws_diag d = {0};
    pthread_attr_t attr;
    pthread_t th;
    int r;

    if (!st) {
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    pthread_mutex_init(&st->lock, NULL);
    st->call = call;
    ws_call_set_data(call, st);
    if (!req || req->msg_case != WORKSPACE__V1__WRITE_ARCHIVE_REQUEST__MSG_HEADER) {
        ws_diag_set(&d, "the first message must be the header");
        ws_diag_meta(&d, "field", "msg");
        ws_call_fail(call, -WS_EMALFORMED, &d);
        return;
    }
    const Workspace__V1__WriteArchiveHeader *h = req->header;
    if (ws_services_fs_workspace(call, h->workspace_id, h->path, &st->ws) < 0)
        return;
    st->reg = ((struct ws_services *)ws_call_method_data(call))->reg;
    st->require_finish = h->require_finish;
    st->path = strdup(h->path);
    if (!st->path) {
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    if (atomic_fetch_add(&uploads, 1) >= ARCHIVE_UPLOADS_MAX) {
        atomic_fetch_sub(&uploads, 1);
        ws_diag_set(&d, "too many archive uploads at once");
        ws_diag_meta(&d, "quota", "archive_uploads");
        ws_call_fail(call, -WS_EQUOTA, &d);
        return;
    }
    st->counted = true;
    struct ws_tar_in_request tr = {
        .path = h->path,
        .format = format_of(h->format),
        .overwrite = h->overwrite == WORKSPACE__V1__ARCHIVE_OVERWRITE__ARCHIVE_OVERWRITE_REPLACE
                         ? WS_TAR_OVERWRITE_REPLACE
                     : h->overwrite == WORKSPACE__V1__ARCHIVE_OVERWRITE__ARCHIVE_OVERWRITE_MERGE
                         ? WS_TAR_OVERWRITE_MERGE
                         : WS_TAR_OVERWRITE_NONE,
        .create_parents = h->create_parents,
        .max_file_size = ws_workspace_max_file_size(st->ws),
        .quota = quota_check,
        .quota_userdata = st,
    };
    r = ws_tar_in_new(ws_workspace_fsops(st->ws), &tr, &d, &st->tar);
    if (r < 0) {
        ws_services_fs_fail(call, st->ws, r, &d);
        return;
    }
    ws_tar_in_set_drained(st->tar, drained, st);
    ws_call_ref(call);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    r = pthread_create(&th, &attr, warch_thread, call);
    pthread_attr_destroy(&attr);
    if (r != 0) {
        ws_call_unref(call);
        ws_call_fail(call, -r, NULL);
        return;
    }
    if (req->finish)
        warch_end(st);
    else
        ws_call_recv(call);
}

static void warch_message(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__WriteArchiveRequest *req = (const void *)msg;
    struct warch_state *st = ws_call_data(call);
    struct ws_diag d = {0};

    if (!st->tar || st->ended)
        return;
    if (!req) {
        /* Half-close without finish: as WriteFile, prove the stream is
         * still open before the end counts (a cancel looks the same). */
        if (st->require_finish) {
            ws_diag_set(&d, "the stream ended without finish (the header set require_finish)");
            ws_diag_meta(&d, "field", "finish");
            warch_refuse(st, -WS_EMALFORMED, &d);
            return;
        }
        if (ws_call_send_headers(call) < 0)
            ws_tar_in_cancel(st->tar);
        return;
    }
    if (req->msg_case == WORKSPACE__V1__WRITE_ARCHIVE_REQUEST__MSG_HEADER) {
        ws_diag_set(&d, "only one header is allowed, then data");
        ws_diag_meta(&d, "field", "msg");
        warch_refuse(st, -WS_EMALFORMED, &d);
        return;
    }
    int r = ws_tar_in_feed(st->tar, req->data.data, req->data.len);
    if (r < 0)
        return; /* the extractor stopped: it finishes the call */
    if (req->finish)
        warch_end(st);
    else if (r == 1)
        ws_call_recv(call);
    /* r == 0: the extractor asks for the next message when it drains. */
}

static void warch_sent(struct ws_call *call, bool ok)
{
    struct warch_state *st = ws_call_data(call);

    if (!st->tar || st->ended)
        return;
    if (ok && !ws_call_cancelled(call) && ws_call_deadline_remaining_ms(call) > 0)
        warch_end(st);
    else
        ws_tar_in_cancel(st->tar);
}

static void warch_cancel(struct ws_call *call)
{
    struct warch_state *st = ws_call_data(call);

    if (st && st->tar)
        ws_tar_in_cancel(st->tar);
}

size_t ws_services_fs_archive(struct ws_services *s, struct ws_rpc_method *out)
{
    static const struct ws_rpc_method methods[] = {
        WS_SERVICES_METHOD("/workspace.v1.FileSystem/ReadArchive", WS_RPC_SERVER_STREAM,
                           &workspace__v1__read_archive_request__descriptor,
                           .on_start = rarch_start, .on_sent = rarch_sent,
                           .on_cancel = rarch_cancel, .on_destroy = rarch_destroy),
        WS_SERVICES_METHOD("/workspace.v1.FileSystem/WriteArchive", WS_RPC_CLIENT_STREAM,
                           &workspace__v1__write_archive_request__descriptor,
                           .on_start = warch_start, .on_message = warch_message,
                           .on_sent = warch_sent, .on_cancel = warch_cancel,
                           .on_destroy = warch_destroy),
    };

    return ws_services_add_methods(s, methods, WS_ELEMENTSOF(methods), out);
}
