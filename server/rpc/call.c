/* Call objects: the batches of one RPC, their completion callbacks and the
 * ws_call_* functions handlers drive a call with.
 *
 * A call holds one reference per outstanding batch plus one per holder
 * (ws_call_ref). Batches on one call: RECV_CLOSE_ON_SERVER, issued at accept
 * and outstanding until gRPC is done with the call; at most one
 * RECV_MESSAGE; at most one SEND_MESSAGE; one status batch. A failed
 * grpc_call_start_batch delivers no tag, so its reference is dropped at
 * once.
 *
 * Every callback and every ws_call_* function runs under the call's
 * recursive mutex. Each of them holds a reference while it does, so a
 * reference dropped under the lock never frees the object; the last one is
 * always dropped after unlocking.
 */
#include "server/rpc/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/support/time.h>

#include "server/base/errors.h"

static void on_close_done(struct ws_tag *t, bool ok);
static void on_recv_done(struct ws_tag *t, bool ok);
static void on_send_done(struct ws_tag *t, bool ok);
static void on_status_done(struct ws_tag *t, bool ok);

static void call_lock(struct ws_call *c)
{
    pthread_mutex_lock(&c->mu);
}

static void call_unlock(struct ws_call *c)
{
    pthread_mutex_unlock(&c->mu);
}

static const char *call_path(const struct ws_call *c)
{
    return c->method ? c->method->path : "(unregistered)";
}

struct ws_call *ws_rpc_call_alloc(struct ws_rpc_server *s, size_t index)
{
    pthread_mutexattr_t attr;
    struct ws_call *c;

    c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&c->mu, &attr);
    pthread_mutexattr_destroy(&attr);

    c->server = s;
    c->method_index = index;
    c->method = index < s->n_methods ? &s->methods[index] : NULL;
    c->close_tag.done = on_close_done;
    c->recv_tag.done = on_recv_done;
    c->send_tag.done = on_send_done;
    c->status_tag.done = on_status_done;
    c->deadline = gpr_inf_future(GPR_CLOCK_REALTIME);
    c->status_message = grpc_empty_slice();
    grpc_metadata_array_init(&c->request_md);
    grpc_call_details_init(&c->details);
    atomic_init(&c->refs, 0);

    pthread_mutex_lock(&s->mu);
    s->objects++;
    pthread_mutex_unlock(&s->mu);
    return c;
}

/* ---- streams per tenant ----
 *
 * The counts live here rather than in the server because a call is
 * counted and released by its own life, whichever thread ends it; one
 * server runs per process, and ws_rpc_server_free waits for every call,
 * so a count never outlives the server that set the quota. A call is
 * counted exactly when the quota is on, it streams, and on_start ran: the
 * admission is the last step before on_start. */
struct tenant_streams {
    char name[WS_RPC_TENANT_MAX + 1];
    unsigned open;
    struct tenant_streams *next;
};

static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned streams_max;
static struct tenant_streams *streams_tenants;

void ws_rpc_streams_set_max(unsigned max)
{
    pthread_mutex_lock(&streams_lock);
    streams_max = max;
    pthread_mutex_unlock(&streams_lock);
}

static bool counts_as_stream(const struct ws_call *c)
{
    return c->method && (c->method->kind == WS_RPC_SERVER_STREAM || c->method->kind == WS_RPC_BIDI);
}

/* Takes a place for one more stream of `tenant`: 0, -ENOMEM, or -WS_EQUOTA
 * with d filled. */
static int streams_admit(const char *tenant, struct ws_diag *d)
{
    struct tenant_streams *t;
    int err = 0;

    pthread_mutex_lock(&streams_lock);
    if (!streams_max)
        goto out;
    for (t = streams_tenants; t && strcmp(t->name, tenant) != 0; t = t->next)
        ;
    if (!t) {
        err = -ENOMEM;
        t = calloc(1, sizeof(*t));
        if (!t)
            goto out;
        snprintf(t->name, sizeof(t->name), "%s", tenant);
        t->next = streams_tenants;
        streams_tenants = t;
        err = 0;
    }
    if (t->open >= streams_max) {
        err = -WS_EQUOTA;
        ws_diag_set(d, "too many open streams for this tenant (limit %u)", streams_max);
        ws_diag_meta(d, "quota", "tenant_streams");
        ws_diag_meta(d, "limit", "%u", streams_max);
        goto out;
    }
    t->open++;
out:
    pthread_mutex_unlock(&streams_lock);
    return err;
}

static void streams_release(const char *tenant)
{
    pthread_mutex_lock(&streams_lock);
    for (struct tenant_streams **pp = &streams_tenants; *pp; pp = &(*pp)->next) {
        struct tenant_streams *t = *pp;
        if (strcmp(t->name, tenant) != 0)
            continue;
        if (t->open && --t->open == 0) {
            *pp = t->next;
            free(t);
        }
        break;
    }
    pthread_mutex_unlock(&streams_lock);
}

static void call_free(struct ws_call *c)
{
    struct ws_rpc_server *s = c->server;
    bool accepted = c->accepted;
    size_t i;

    if (c->started && counts_as_stream(c))
        streams_release(c->tenant);
    if (c->call)
        grpc_call_unref(c->call);
    grpc_metadata_array_destroy(&c->request_md);
    grpc_call_details_destroy(&c->details);
    if (c->recv_bb)
        grpc_byte_buffer_destroy(c->recv_bb);
    if (c->send_bb)
        grpc_byte_buffer_destroy(c->send_bb);
    if (c->status_bb)
        grpc_byte_buffer_destroy(c->status_bb);
    grpc_slice_unref(c->status_message);
    for (i = 0; i < c->n_trailer; i++) {
        grpc_slice_unref(c->trailer[i].key);
        grpc_slice_unref(c->trailer[i].value);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
    ws_rpc_server_call_gone(s, accepted);
}

void ws_rpc_call_discard(struct ws_call *c)
{
    call_free(c);
}

static void call_destroy(struct ws_call *c)
{
    if (c->started && c->method->on_destroy) {
        call_lock(c);
        c->method->on_destroy(c);
        call_unlock(c);
    }
    ws_rpc_log(WS_RPC_LOG_DEBUG, "rpc.free", "\"method\":\"%s\"", call_path(c));
    call_free(c);
}

void ws_call_ref(struct ws_call *call)
{
    atomic_fetch_add_explicit(&call->refs, 1, memory_order_relaxed);
}

void ws_call_unref(struct ws_call *call)
{
    if (!call)
        return;
    if (atomic_fetch_sub_explicit(&call->refs, 1, memory_order_acq_rel) == 1)
        call_destroy(call);
}

void ws_call_set_data(struct ws_call *call, void *data)
{
    call_lock(call);
    call->data = data;
    call_unlock(call);
}

void *ws_call_data(struct ws_call *call)
{
    void *data;

    call_lock(call);
    data = call->data;
    call_unlock(call);
    return data;
}

void *ws_call_method_data(struct ws_call *call)
{
    return call->method ? call->method->method_data : NULL;
}

const char *ws_call_tenant(struct ws_call *call)
{
    return call->tenant;
}

bool ws_call_cancelled(struct ws_call *call)
{
    bool cancelled;

    call_lock(call);
    cancelled = call->cancelled;
    call_unlock(call);
    return cancelled;
}

int64_t ws_call_deadline_remaining_ms(struct ws_call *call)
{
    gpr_timespec deadline, now, left;
    int64_t ms;

    if (call->deadline.tv_sec == INT64_MAX)
        return INT64_MAX;
    deadline = gpr_convert_clock_type(call->deadline, GPR_CLOCK_MONOTONIC);
    now = gpr_now(GPR_CLOCK_MONOTONIC);
    if (gpr_time_cmp(deadline, now) <= 0)
        return 0;
    left = gpr_time_sub(deadline, now);
    if (left.tv_sec > INT64_MAX / 1000 - 1)
        return INT64_MAX;
    ms = left.tv_sec * 1000 + left.tv_nsec / 1000000;
    return ms;
}

/* Starts a batch that will hold a reference until its tag completes. On
 * failure nothing changed and no tag will come, so the reference goes back
 * at once (never the last one: the caller holds its own). */
static int start_batch(struct ws_call *c, const grpc_op *ops, size_t n, struct ws_tag *tag)
{
    grpc_call_error e;

    ws_call_ref(c);
    WS_RPC_HANDOFF_RELEASE(tag);
    e = grpc_call_start_batch(c->call, ops, n, tag, NULL);
    if (e != GRPC_CALL_OK) {
        ws_rpc_log(WS_RPC_LOG_ERROR, "rpc.batch_failed", "\"method\":\"%s\",\"error\":\"%s\"",
                   call_path(c), grpc_call_error_to_string(e));
        atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel);
        return -EIO;
    }
    return 0;
}

/* Serializes `msg` into one contiguous slice wrapped in a byte buffer. */
static int pack_message(struct ws_call *c, const ProtobufCMessage *msg, grpc_byte_buffer **ret_bb)
{
    grpc_byte_buffer *bb;
    grpc_slice slice;
    size_t n;

    n = protobuf_c_message_get_packed_size(msg);
    if (n > (size_t)c->server->max_message_bytes)
        return -EFBIG;
    slice = grpc_slice_malloc(n);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(slice));
    bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    *ret_bb = bb;
    return 0;
}

/* Issues the status batch (with initial metadata if none went out yet and
 * the final message `bb`, whose ownership moves here). */
static void issue_status_locked(struct ws_call *c, grpc_byte_buffer *bb)
{
    grpc_op ops[3];
    size_t n = 0, len;
    bool md_was_sent = c->md_sent;

    memset(ops, 0, sizeof(ops));
    if (!c->md_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->md_sent = true;
    }
    if (bb) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = bb;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = c->code;
    ops[n].data.send_status_from_server.status_details = c->has_message ? &c->status_message : NULL;
    ops[n].data.send_status_from_server.trailing_metadata_count = c->n_trailer;
    ops[n].data.send_status_from_server.trailing_metadata = c->n_trailer ? c->trailer : NULL;
    n++;

    c->status_bb = bb;
    len = bb ? grpc_byte_buffer_length(bb) : 0;
    if (start_batch(c, ops, n, &c->status_tag) == 0) {
        ws_rpc_sendq_charge(c, len);
    } else {
        c->status_bb = NULL;
        c->md_sent = md_was_sent;
        if (bb)
            grpc_byte_buffer_destroy(bb);
        /* Without a status the call would linger until the client gave
         * up; cancelling ends it and completes RECV_CLOSE_ON_SERVER. */
        grpc_call_cancel(c->call, NULL);
    }
    ws_rpc_log(WS_RPC_LOG_DEBUG, "rpc.finish", "\"method\":\"%s\",\"code\":%d,\"ms\":%lld",
               call_path(c), (int)c->code, (long long)(ws_rpc_now_ms() - c->accepted_ms));
}

/* Records the status and sends it now, or after the send in flight. */
static void finish_locked(struct ws_call *c, grpc_byte_buffer *bb)
{
    c->finished = true;
    if (c->send_busy) {
        c->status_queued = true;
        return;
    }
    issue_status_locked(c, bb);
}

static void set_status_locked(struct ws_call *c, struct ws_rpc_status *st)
{
    c->code = st->code;
    grpc_slice_unref(c->status_message);
    c->status_message = st->message;
    c->has_message = GRPC_SLICE_LENGTH(st->message) > 0;
    c->trailer[0].key = grpc_slice_from_static_string("grpc-status-details-bin");
    c->trailer[0].value = st->details;
    c->n_trailer = 1;
}

/* The core ends the call itself (bad request, unknown method). */
static void fail_core_locked(struct ws_call *c, grpc_status_code code,
                             Workspace__V1__ErrorReason why, const char *message, const char *field)
{
    const char *reason = ws_rpc_reason_name(why);
    const char *key = "field";
    struct ws_rpc_status st;

    ws_rpc_status_build(code, reason, message, &key, &field, field && field[0] ? 1 : 0, &st);
    set_status_locked(c, &st);
    ws_rpc_log(WS_RPC_LOG_INFO, "rpc.rejected", "\"method\":\"%s\",\"code\":%d,\"reason\":\"%s\"",
               call_path(c), (int)code, reason ? reason : "");
    finish_locked(c, NULL);
}

/* Tells the handler its call is over, once. */
static void deliver_cancel_locked(struct ws_call *c)
{
    if (c->cancelled)
        return;
    c->cancelled = true;
    ws_rpc_log(WS_RPC_LOG_DEBUG, "rpc.cancel", "\"method\":\"%s\",\"ms\":%lld", call_path(c),
               (long long)(ws_rpc_now_ms() - c->accepted_ms));
    if (c->started && c->method->on_cancel)
        c->method->on_cancel(c);
}

/* Copies the byte buffer out, checks it on the wire, then unpacks it.
 * Returns 0 or -WS_EMALFORMED with the offending field's path in `field`. */
static int decode(struct ws_call *c, grpc_byte_buffer *bb, ProtobufCMessage **ret_msg, char *field,
                  size_t field_size)
{
    const ProtobufCMessageDescriptor *desc = c->method->request;
    grpc_byte_buffer_reader reader;
    ProtobufCMessage *msg = NULL;
    grpc_slice slice;
    int r;

    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return -WS_EMALFORMED;
    slice = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);

    r = ws_rpc_validate_message(desc, GRPC_SLICE_START_PTR(slice), GRPC_SLICE_LENGTH(slice), field,
                                field_size);
    if (r < 0)
        goto out;
    msg = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(slice),
                                    GRPC_SLICE_START_PTR(slice));
    if (!msg) {
        r = -WS_EMALFORMED;
        goto out;
    }
    *ret_msg = msg;
    r = 0;
out:
    grpc_slice_unref(slice);
    return r;
}

static int issue_recv_locked(struct ws_call *c)
{
    grpc_op op;
    int r;

    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv_bb;
    r = start_batch(c, &op, 1, &c->recv_tag);
    if (r < 0)
        return r;
    c->recv_busy = true;
    return 0;
}

void ws_rpc_call_accepted(struct ws_call *c)
{
    grpc_op op;

    /* This reference covers the work below; the batches take their own. */
    atomic_store(&c->refs, 1);
    c->accepted = true;
    c->accepted_ms = ws_rpc_now_ms();
    if (!c->method)
        c->deadline = c->details.deadline;

    call_lock(c);
    ws_rpc_log(WS_RPC_LOG_DEBUG, "rpc.accept", "\"method\":\"%s\"", call_path(c));

    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->close_cancelled;
    if (start_batch(c, &op, 1, &c->close_tag) < 0) {
        /* Without it no cancel would ever be seen: refuse the call. */
        c->finished = true;
        c->cancelled = true;
        grpc_call_cancel(c->call, NULL);
        goto out;
    }

    /* The processor already let the call in; this second look names the
     * tenant (see auth.c for why it is not carried from there). */
    if (c->server->auth &&
        !ws_rpc_auth_tenant(c->server->auth, c->call, &c->request_md, c->tenant)) {
        fail_core_locked(c, GRPC_STATUS_UNAUTHENTICATED,
                         WORKSPACE__V1__ERROR_REASON__ERROR_REASON_UNSPECIFIED,
                         WS_RPC_UNAUTHENTICATED, NULL);
        goto out;
    }
    if (!c->server->auth)
        snprintf(c->tenant, sizeof(c->tenant), "%s", WS_RPC_TENANT_DEFAULT);
    if (!c->method) {
        fail_core_locked(c, GRPC_STATUS_UNIMPLEMENTED, WORKSPACE__V1__ERROR_REASON__UNIMPLEMENTED,
                         "unknown method", NULL);
        goto out;
    }
    if (issue_recv_locked(c) < 0) {
        fail_core_locked(c, GRPC_STATUS_INTERNAL, WORKSPACE__V1__ERROR_REASON__INTERNAL, NULL,
                         NULL);
        goto out;
    }
out:
    call_unlock(c);
    ws_call_unref(c);
}

static void on_close_done(struct ws_tag *t, bool ok)
{
    struct ws_call *c = ws_container_of(t, struct ws_call, close_tag);

    call_lock(c);
    c->closed = true;
    if ((!ok || c->close_cancelled) && !c->finished) {
        if (c->started)
            deliver_cancel_locked(c);
        else
            c->cancelled = true;
    }
    ws_rpc_log(WS_RPC_LOG_DEBUG, "rpc.closed", "\"method\":\"%s\",\"cancelled\":%d", call_path(c),
               c->close_cancelled);
    call_unlock(c);
    ws_call_unref(c);
}

/* The first request message arrived (or the client half-closed). */
static void first_message_locked(struct ws_call *c, bool ok, grpc_byte_buffer *bb)
{
    const struct ws_rpc_method *m = c->method;
    char field[WS_RPC_FIELD_PATH_MAX] = "";
    ProtobufCMessage *msg = NULL;

    if (c->cancelled || c->finished)
        return;
    if (!ok) {
        /* gRPC failed the call (oversized or undecompressable message);
         * make sure it is over so RECV_CLOSE_ON_SERVER completes. */
        grpc_call_cancel(c->call, NULL);
        return;
    }
    if (!bb && (m->kind == WS_RPC_UNARY || m->kind == WS_RPC_SERVER_STREAM)) {
        fail_core_locked(c, GRPC_STATUS_INVALID_ARGUMENT, WORKSPACE__V1__ERROR_REASON__MALFORMED,
                         "missing request message", NULL);
        return;
    }
    if (bb && decode(c, bb, &msg, field, sizeof(field)) < 0) {
        fail_core_locked(c, GRPC_STATUS_INVALID_ARGUMENT, WORKSPACE__V1__ERROR_REASON__MALFORMED,
                         NULL, field);
        return;
    }
    if (counts_as_stream(c)) {
        struct ws_diag d = {0};
        int err = streams_admit(c->tenant, &d);
        if (err < 0) {
            struct ws_rpc_status st;
            ws_rpc_status_from_error(err, &d, &st);
            set_status_locked(c, &st);
            ws_rpc_log(WS_RPC_LOG_INFO, "rpc.rejected",
                       "\"method\":\"%s\",\"code\":%d,\"reason\":\"QUOTA\"", call_path(c),
                       (int)st.code);
            finish_locked(c, NULL);
            if (msg)
                protobuf_c_message_free_unpacked(msg, NULL);
            return;
        }
    }
    c->started = true;
    m->on_start(c, msg);
    if (msg)
        protobuf_c_message_free_unpacked(msg, NULL);
}

/* A message asked for by ws_call_recv arrived (or the client half-closed). */
static void next_message_locked(struct ws_call *c, bool ok, grpc_byte_buffer *bb)
{
    const struct ws_rpc_method *m = c->method;
    char field[WS_RPC_FIELD_PATH_MAX] = "";
    ProtobufCMessage *msg = NULL;

    if (c->cancelled)
        return;
    if (!ok) {
        /* The stream broke; on_cancel follows from RECV_CLOSE_ON_SERVER
         * unless the handler already finished. */
        if (!c->finished)
            grpc_call_cancel(c->call, NULL);
        return;
    }
    if (bb && decode(c, bb, &msg, field, sizeof(field)) < 0) {
        if (c->finished)
            return;
        fail_core_locked(c, GRPC_STATUS_INVALID_ARGUMENT, WORKSPACE__V1__ERROR_REASON__MALFORMED,
                         NULL, field);
        deliver_cancel_locked(c);
        return;
    }
    if (m->on_message)
        m->on_message(c, msg);
    if (msg)
        protobuf_c_message_free_unpacked(msg, NULL);
}

static void on_recv_done(struct ws_tag *t, bool ok)
{
    struct ws_call *c = ws_container_of(t, struct ws_call, recv_tag);
    grpc_byte_buffer *bb;

    call_lock(c);
    bb = c->recv_bb;
    c->recv_bb = NULL;
    c->recv_busy = false;
    if (!c->started)
        first_message_locked(c, ok, bb);
    else
        next_message_locked(c, ok, bb);
    if (bb)
        grpc_byte_buffer_destroy(bb);
    call_unlock(c);
    ws_call_unref(c);
}

static void on_send_done(struct ws_tag *t, bool ok)
{
    struct ws_call *c = ws_container_of(t, struct ws_call, send_tag);

    call_lock(c);
    ws_rpc_sendq_release(c);
    if (c->send_bb) {
        grpc_byte_buffer_destroy(c->send_bb);
        c->send_bb = NULL;
    }
    c->send_busy = false;
    if (c->status_queued) {
        c->status_queued = false;
        issue_status_locked(c, NULL);
    }
    if (c->method->on_sent)
        c->method->on_sent(c, ok);
    call_unlock(c);
    ws_call_unref(c);
}

static void on_status_done(struct ws_tag *t, bool ok)
{
    struct ws_call *c = ws_container_of(t, struct ws_call, status_tag);

    (void)ok;
    call_lock(c);
    ws_rpc_sendq_release(c);
    if (c->status_bb) {
        grpc_byte_buffer_destroy(c->status_bb);
        c->status_bb = NULL;
    }
    call_unlock(c);
    ws_call_unref(c);
}

/* Whether the handler may still end the call. */
static int check_open_locked(struct ws_call *c)
{
    if (c->cancelled)
        return -ECANCELED;
    if (c->finished)
        return -EALREADY;
    return 0;
}

int ws_call_send_headers(struct ws_call *call)
{
    grpc_op op;
    int r;

    call_lock(call);
    r = check_open_locked(call);
    if (r < 0)
        goto out;
    if (call->md_sent) {
        r = -EALREADY;
        goto out;
    }
    if (call->send_busy) {
        r = -EBUSY;
        goto out;
    }
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_SEND_INITIAL_METADATA;
    r = start_batch(call, &op, 1, &call->send_tag);
    if (r < 0)
        goto out;
    call->send_busy = true;
    call->md_sent = true;
out:
    call_unlock(call);
    return r;
}

int ws_call_send(struct ws_call *call, const ProtobufCMessage *msg)
{
    grpc_byte_buffer *bb = NULL;
    grpc_op ops[2];
    size_t n = 0, len;
    int r;

    if (!msg)
        return -EINVAL;
    call_lock(call);
    r = check_open_locked(call);
    if (r < 0)
        goto out;
    if (call->send_busy) {
        r = -EBUSY;
        goto out;
    }
    r = pack_message(call, msg, &bb);
    if (r < 0)
        goto out;

    memset(ops, 0, sizeof(ops));
    if (!call->md_sent)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = bb;
    len = grpc_byte_buffer_length(bb);
    r = start_batch(call, ops, n, &call->send_tag);
    if (r < 0) {
        grpc_byte_buffer_destroy(bb);
        goto out;
    }
    call->send_bb = bb;
    call->send_busy = true;
    call->md_sent = true;
    ws_rpc_sendq_charge(call, len);
out:
    call_unlock(call);
    return r;
}

int ws_call_recv(struct ws_call *call)
{
    int r;

    call_lock(call);
    if (call->method->kind != WS_RPC_CLIENT_STREAM && call->method->kind != WS_RPC_BIDI) {
        r = -EINVAL;
        goto out;
    }
    r = check_open_locked(call);
    if (r < 0)
        goto out;
    if (call->recv_busy) {
        r = -EBUSY;
        goto out;
    }
    r = issue_recv_locked(call);
out:
    call_unlock(call);
    return r;
}

int ws_call_finish(struct ws_call *call, const ProtobufCMessage *msg)
{
    grpc_byte_buffer *bb = NULL;
    int r;

    call_lock(call);
    r = check_open_locked(call);
    if (r < 0)
        goto out;
    if (msg && call->send_busy) {
        r = -EBUSY;
        goto out;
    }
    if (msg) {
        r = pack_message(call, msg, &bb);
        if (r < 0)
            goto out;
    }
    call->code = GRPC_STATUS_OK;
    finish_locked(call, bb);
    r = 0;
out:
    call_unlock(call);
    return r;
}

int ws_call_fail(struct ws_call *call, int err, const struct ws_diag *d)
{
    struct ws_rpc_status st;
    int r;

    call_lock(call);
    r = check_open_locked(call);
    if (r < 0)
        goto out;
    ws_rpc_status_from_error(err, d, &st);
    set_status_locked(call, &st);
    ws_rpc_log(WS_RPC_LOG_INFO, "rpc.fail", "\"method\":\"%s\",\"code\":%d,\"err\":%d",
               call_path(call), (int)st.code, err);
    finish_locked(call, NULL);
out:
    call_unlock(call);
    return r;
}

int ws_call_fail_status(struct ws_call *call, Workspace__V1__ErrorReason why, const char *message)
{
    const char *reason = ws_rpc_reason_name(why);
    grpc_status_code code;
    struct ws_rpc_status st;
    int r;

    if (!ws_rpc_reason_info(why, &code, NULL))
        return -EINVAL;
    call_lock(call);
    r = check_open_locked(call);
    if (r < 0)
        goto out;
    ws_rpc_status_build(code, reason, message, NULL, NULL, 0, &st);
    set_status_locked(call, &st);
    ws_rpc_log(WS_RPC_LOG_INFO, "rpc.fail", "\"method\":\"%s\",\"code\":%d,\"reason\":\"%s\"",
               call_path(call), (int)code, reason ? reason : "");
    finish_locked(call, NULL);
out:
    call_unlock(call);
    return r;
}
