/* gRPC C core client plumbing for wsctl (see rpc.h). Each call has three
 * tags embedded in it (send, receive, status); the completion queue is the
 * client's, and only one call is in flight at a time, so a completion
 * that belongs to no tag of the call is a bug, not another call's event.
 * A thread that needs calls of its own next to another's takes a sibling
 * client: the same channel, another queue.
 */
#include "clients/cli/rpc.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "google/protobuf/any.pb-c.h"
#include "google/rpc/error_details.pb-c.h"
#include "google/rpc/status.pb-c.h"

#define ERROR_INFO_URL "type.googleapis.com/google.rpc.ErrorInfo"
#define AUTH_MAX       4096
#define NODE_HEADER    "x-workspace-node"

struct wsc_client {
    grpc_channel *channel;
    grpc_completion_queue *cq;
    /* "Bearer TOKEN", or "" when no token is configured. */
    char auth[AUTH_MAX];
    /* The node calls about a workspace go to, or "". */
    char node[WSC_NODE_MAX];
    /* The node the last response named, or "". */
    char answered[WSC_NODE_MAX];
    /* A sibling (wsc_client_sibling): the channel is its parent's. */
    bool borrowed_channel;
};

struct wsc_call {
    struct wsc_client *cl;
    grpc_call *call;
    /* The tags: their addresses identify the completion. */
    char tag_send, tag_recv, tag_status;
    atomic_bool send_pending, recv_pending, status_pending;
    bool headers_asked, answered_noted;
    grpc_byte_buffer *send_bb;
    grpc_byte_buffer *recv_bb;
    /* authorization and x-workspace-node, as configured. */
    grpc_metadata md[2];
    bool pinned;
    grpc_metadata_array initial_md;
    grpc_metadata_array trailing_md;
    grpc_status_code status;
    grpc_slice details;
    struct wsc_error error;
};

/* gRPC's own log lines ("E1124 ... Handshake failed ...") would come
 * before wsctl's one-line error and say the same: the failed call's status
 * carries the cause. */
static void log_nothing(gpr_log_func_args *args)
{
    (void)args;
}

int wsc_client_new(const char *addr, const char *token, const struct wsc_tls *tls,
                   struct wsc_client **ret_client)
{
    struct wsc_client *cl;
    grpc_channel_credentials *creds;
    grpc_arg args[3];
    grpc_channel_args chargs = {.num_args = 2, .args = args};

    if (tls && !tls->cert_chain != !tls->private_key)
        return -EINVAL;
    cl = calloc(1, sizeof(*cl));
    if (!cl)
        return -ENOMEM;
    if (token && token[0]) {
        int n = snprintf(cl->auth, sizeof(cl->auth), "Bearer %s", token);
        if (n < 0 || (size_t)n >= sizeof(cl->auth)) {
            free(cl);
            return -E2BIG;
        }
    }
    /* GRPC_VERBOSITY or GRPC_TRACE set: someone is debugging, let it
     * speak. */
    if (!getenv("GRPC_VERBOSITY") && !getenv("GRPC_TRACE"))
        gpr_set_log_function(log_nothing);
    grpc_init();
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = WSC_MAX_RECV_BYTES;
    /* A put chunk plus framing must fit. */
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = WSC_MAX_RECV_BYTES;
    if (tls) {
        grpc_ssl_pem_key_cert_pair pair = {
            .private_key = tls->private_key,
            .cert_chain = tls->cert_chain,
        };
        /* NULL roots: gRPC's default, the system's CA bundle. */
        creds = grpc_ssl_credentials_create(tls->root_certs, tls->cert_chain ? &pair : NULL, NULL,
                                            NULL);
        if (tls->server_name) {
            args[2].type = GRPC_ARG_STRING;
            args[2].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
            args[2].value.string = (char *)tls->server_name;
            chargs.num_args = 3;
        }
    } else {
        creds = grpc_insecure_credentials_create();
    }
    if (!creds) {
        free(cl);
        grpc_shutdown();
        return -ENOMEM;
    }
    cl->channel = grpc_channel_create(addr, creds, &chargs);
    grpc_channel_credentials_release(creds);
    cl->cq = grpc_completion_queue_create_for_next(NULL);
    if (!cl->channel || !cl->cq) {
        wsc_client_free(cl);
        return -ENOMEM;
    }
    *ret_client = cl;
    return 0;
}

void wsc_client_free(struct wsc_client *cl)
{
    if (!cl)
        return;
    if (cl->cq) {
        grpc_completion_queue_shutdown(cl->cq);
        for (;;) {
            grpc_event ev =
                grpc_completion_queue_next(cl->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
            if (ev.type == GRPC_QUEUE_SHUTDOWN)
                break;
        }
        grpc_completion_queue_destroy(cl->cq);
    }
    if (cl->channel && !cl->borrowed_channel)
        grpc_channel_destroy(cl->channel);
    free(cl);
    grpc_shutdown();
}

int wsc_client_sibling(const struct wsc_client *cl, struct wsc_client **ret_client)
{
    struct wsc_client *sib = calloc(1, sizeof(*sib));

    if (!sib)
        return -ENOMEM;
    grpc_init();
    /* A channel serves calls of any completion queue, from any thread. */
    sib->channel = cl->channel;
    sib->borrowed_channel = true;
    memcpy(sib->auth, cl->auth, sizeof(sib->auth));
    memcpy(sib->node, cl->node, sizeof(sib->node));
    sib->cq = grpc_completion_queue_create_for_next(NULL);
    if (!sib->cq) {
        wsc_client_free(sib);
        return -ENOMEM;
    }
    *ret_client = sib;
    return 0;
}

/* Whether `s` (of length `len`) is a node name: 1 to WSC_NODE_MAX - 1
 * of [A-Za-z0-9._-], nothing a header or a terminal could misread. */
static bool node_name_ok(const char *s, size_t len)
{
    if (len == 0 || len >= WSC_NODE_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

int wsc_client_set_node(struct wsc_client *cl, const char *node)
{
    if (!node || !node[0]) {
        cl->node[0] = '\0';
        return 0;
    }
    if (!node_name_ok(node, strlen(node)))
        return -EINVAL;
    memcpy(cl->node, node, strlen(node) + 1);
    return 0;
}

const char *wsc_client_node(const struct wsc_client *cl)
{
    return cl->node;
}

const char *wsc_client_answered_node(const struct wsc_client *cl)
{
    return cl->answered;
}

/* Calls that are about no one workspace go to any node: Open (whose
 * answer names the node), ListProviders and the health service. */
static bool about_a_workspace(const char *method)
{
    return strcmp(method, "/workspace.v1.Workspaces/Open") != 0 &&
           strcmp(method, "/workspace.v1.Providers/ListProviders") != 0 &&
           strncmp(method, "/grpc.health.v1.Health/", 23) != 0;
}

/* Records the node the response's headers name (a front proxy's
 * `x-workspace-node`), if any. */
static void note_answered_node(struct wsc_call *c)
{
    for (size_t i = 0; i < c->initial_md.count; i++) {
        const grpc_metadata *md = &c->initial_md.metadata[i];
        size_t len = GRPC_SLICE_LENGTH(md->value);

        if (grpc_slice_str_cmp(md->key, NODE_HEADER) != 0)
            continue;
        if (node_name_ok((const char *)GRPC_SLICE_START_PTR(md->value), len)) {
            memcpy(c->cl->answered, GRPC_SLICE_START_PTR(md->value), len);
            c->cl->answered[len] = '\0';
        }
        return;
    }
}

static int pack(const ProtobufCMessage *msg, grpc_byte_buffer **ret_bb)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    grpc_slice slice = grpc_slice_malloc(n);
    grpc_byte_buffer *bb;

    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(slice));
    bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    if (!bb)
        return -ENOMEM;
    *ret_bb = bb;
    return 0;
}

/* Copies a byte buffer into one slice and decodes it. */
static int unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                  ProtobufCMessage **ret_msg)
{
    grpc_byte_buffer_reader reader;
    grpc_slice slice;
    ProtobufCMessage *msg;

    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return -EBADMSG;
    slice = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    msg = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(slice),
                                    GRPC_SLICE_START_PTR(slice));
    grpc_slice_unref(slice);
    if (!msg)
        return -EBADMSG;
    *ret_msg = msg;
    return 0;
}

static void copy_bounded(char *dst, size_t cap, const void *src, size_t len)
{
    if (len >= cap)
        len = cap - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* Fills c->error from the status, its details text and the
 * grpc-status-details-bin trailer (google.rpc.Status with an ErrorInfo). */
static void decode_error(struct wsc_call *c)
{
    struct wsc_error *e = &c->error;

    memset(e, 0, sizeof(*e));
    e->code = c->status;
    copy_bounded(e->message, sizeof(e->message), GRPC_SLICE_START_PTR(c->details),
                 GRPC_SLICE_LENGTH(c->details));
    for (size_t i = 0; i < c->trailing_md.count; i++) {
        const grpc_metadata *md = &c->trailing_md.metadata[i];
        Google__Rpc__Status *st;

        if (grpc_slice_str_cmp(md->key, "grpc-status-details-bin") != 0)
            continue;
        st = google__rpc__status__unpack(NULL, GRPC_SLICE_LENGTH(md->value),
                                         GRPC_SLICE_START_PTR(md->value));
        if (!st)
            continue;
        if (st->message && st->message[0])
            copy_bounded(e->message, sizeof(e->message), st->message, strlen(st->message));
        for (size_t j = 0; j < st->n_details; j++) {
            Google__Protobuf__Any *any = st->details[j];
            Google__Rpc__ErrorInfo *info;

            if (!any->type_url || strcmp(any->type_url, ERROR_INFO_URL) != 0)
                continue;
            info = google__rpc__error_info__unpack(NULL, any->value.len, any->value.data);
            if (!info)
                continue;
            copy_bounded(e->reason, sizeof(e->reason), info->reason, strlen(info->reason));
            for (size_t k = 0; k < info->n_metadata && e->n_meta < WSC_META_MAX; k++) {
                copy_bounded(e->meta_key[e->n_meta], WSC_META_LEN, info->metadata[k]->key,
                             strlen(info->metadata[k]->key));
                copy_bounded(e->meta_value[e->n_meta], WSC_META_LEN, info->metadata[k]->value,
                             strlen(info->metadata[k]->value));
                e->n_meta++;
            }
            google__rpc__error_info__free_unpacked(info, NULL);
            break;
        }
        google__rpc__status__free_unpacked(st, NULL);
        break;
    }
    /* A front proxy that cannot reach the node says only UNAVAILABLE:
     * name the node the call was for. */
    if (c->pinned && e->code == GRPC_STATUS_UNAVAILABLE && e->n_meta < WSC_META_MAX) {
        copy_bounded(e->meta_key[e->n_meta], WSC_META_LEN, "node", 4);
        copy_bounded(e->meta_value[e->n_meta], WSC_META_LEN, c->cl->node, strlen(c->cl->node));
        e->n_meta++;
    }
}

int wsc_call_new(struct wsc_client *cl, const char *method, struct wsc_call **ret_call)
{
    struct wsc_call *c;
    grpc_op ops[2];
    grpc_slice path;
    grpc_call_error err;
    size_t n_md = 0;

    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->cl = cl;
    c->details = grpc_empty_slice();
    grpc_metadata_array_init(&c->initial_md);
    grpc_metadata_array_init(&c->trailing_md);
    path = grpc_slice_from_copied_string(method);
    c->call = grpc_channel_create_call(cl->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cl->cq, path,
                                       NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_slice_unref(path);
    if (!c->call) {
        wsc_call_free(c);
        return -EIO;
    }

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (cl->auth[0]) {
        c->md[n_md].key = grpc_slice_from_static_string("authorization");
        c->md[n_md].value = grpc_slice_from_static_string(cl->auth);
        n_md++;
    }
    if (cl->node[0] && about_a_workspace(method)) {
        c->md[n_md].key = grpc_slice_from_static_string(NODE_HEADER);
        c->md[n_md].value = grpc_slice_from_static_string(cl->node);
        n_md++;
        c->pinned = true;
    }
    ops[0].data.send_initial_metadata.count = n_md;
    ops[0].data.send_initial_metadata.metadata = n_md ? c->md : NULL;
    ops[1].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[1].data.recv_status_on_client.trailing_metadata = &c->trailing_md;
    ops[1].data.recv_status_on_client.status = &c->status;
    ops[1].data.recv_status_on_client.status_details = &c->details;
    /* Headers and status in one batch: its tag completes when the call
     * ends, and the headers go out before any message does. */
    atomic_store(&c->status_pending, true);
    err = grpc_call_start_batch(c->call, ops, 2, &c->tag_status, NULL);
    if (err != GRPC_CALL_OK) {
        atomic_store(&c->status_pending, false);
        wsc_call_free(c);
        return -EIO;
    }
    *ret_call = c;
    return 0;
}

void wsc_call_free(struct wsc_call *c)
{
    if (!c)
        return;
    if (c->send_bb)
        grpc_byte_buffer_destroy(c->send_bb);
    if (c->recv_bb)
        grpc_byte_buffer_destroy(c->recv_bb);
    if (c->call)
        grpc_call_unref(c->call);
    grpc_metadata_array_destroy(&c->initial_md);
    grpc_metadata_array_destroy(&c->trailing_md);
    grpc_slice_unref(c->details);
    free(c);
}

void wsc_call_cancel(struct wsc_call *c)
{
    grpc_call_cancel(c->call, NULL);
}

int wsc_call_start_send(struct wsc_call *c, const ProtobufCMessage *msg, bool close)
{
    grpc_op ops[2];
    size_t n = 0;
    int r;

    if (atomic_load(&c->send_pending))
        return -EBUSY;
    if (c->send_bb) {
        grpc_byte_buffer_destroy(c->send_bb);
        c->send_bb = NULL;
    }
    memset(ops, 0, sizeof(ops));
    if (msg) {
        r = pack(msg, &c->send_bb);
        if (r < 0)
            return r;
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = c->send_bb;
        n++;
    }
    if (close) {
        ops[n].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        n++;
    }
    atomic_store(&c->send_pending, true);
    if (grpc_call_start_batch(c->call, ops, n, &c->tag_send, NULL) != GRPC_CALL_OK) {
        atomic_store(&c->send_pending, false);
        return -EPIPE;
    }
    return 0;
}

int wsc_call_start_recv(struct wsc_call *c)
{
    grpc_op ops[2];
    size_t n = 0;

    if (atomic_load(&c->recv_pending))
        return -EBUSY;
    if (c->recv_bb) {
        grpc_byte_buffer_destroy(c->recv_bb);
        c->recv_bb = NULL;
    }
    memset(ops, 0, sizeof(ops));
    if (!c->headers_asked) {
        ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[n].data.recv_initial_metadata.recv_initial_metadata = &c->initial_md;
        n++;
        c->headers_asked = true;
    }
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n].data.recv_message.recv_message = &c->recv_bb;
    n++;
    atomic_store(&c->recv_pending, true);
    if (grpc_call_start_batch(c->call, ops, n, &c->tag_recv, NULL) != GRPC_CALL_OK) {
        atomic_store(&c->recv_pending, false);
        return -EPIPE;
    }
    return 0;
}

int wsc_call_next(struct wsc_call *c, int timeout_ms, enum wsc_event *ret_ev, bool *ret_ok)
{
    gpr_timespec deadline = timeout_ms < 0
                                ? gpr_inf_future(GPR_CLOCK_REALTIME)
                                : gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                               gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_next(c->cl->cq, deadline, NULL);

    if (ev.type == GRPC_QUEUE_TIMEOUT)
        return 0;
    if (ev.type != GRPC_OP_COMPLETE)
        return -EIO;
    if (ev.tag == &c->tag_send) {
        atomic_store(&c->send_pending, false);
        *ret_ev = WSC_EV_SENT;
    } else if (ev.tag == &c->tag_recv) {
        /* The first receive asked for the headers too: they are in. */
        if (!c->answered_noted) {
            note_answered_node(c);
            c->answered_noted = true;
        }
        atomic_store(&c->recv_pending, false);
        *ret_ev = WSC_EV_RECEIVED;
    } else if (ev.tag == &c->tag_status) {
        decode_error(c);
        atomic_store(&c->status_pending, false);
        *ret_ev = WSC_EV_STATUS;
    } else {
        return -EIO;
    }
    *ret_ok = ev.success;
    return 1;
}

int wsc_call_take(struct wsc_call *c, const ProtobufCMessageDescriptor *desc,
                  ProtobufCMessage **ret_msg)
{
    int r;

    if (!c->recv_bb)
        return 0;
    r = unpack(c->recv_bb, desc, ret_msg);
    grpc_byte_buffer_destroy(c->recv_bb);
    c->recv_bb = NULL;
    return r < 0 ? r : 1;
}

bool wsc_call_send_pending(const struct wsc_call *c)
{
    return atomic_load(&c->send_pending);
}

bool wsc_call_recv_pending(const struct wsc_call *c)
{
    return atomic_load(&c->recv_pending);
}

bool wsc_call_done(const struct wsc_call *c)
{
    return !atomic_load(&c->status_pending);
}

/* Pumps the queue until `want` completes; the status may complete on the
 * way (a failed call ends before its sends do), which is recorded. */
static int wait_for(struct wsc_call *c, enum wsc_event want, bool *ret_ok)
{
    for (;;) {
        enum wsc_event ev;
        bool ok;
        int r = wsc_call_next(c, -1, &ev, &ok);

        if (r < 0)
            return r;
        if (r == 1 && ev == want) {
            *ret_ok = ok;
            return 0;
        }
    }
}

int wsc_call_send(struct wsc_call *c, const ProtobufCMessage *msg, bool close)
{
    bool ok = false;
    int r = wsc_call_start_send(c, msg, close);

    if (r < 0)
        return r;
    r = wait_for(c, WSC_EV_SENT, &ok);
    if (r < 0)
        return r;
    return ok ? 0 : -EPIPE;
}

int wsc_call_close_send(struct wsc_call *c)
{
    return wsc_call_send(c, NULL, true);
}

int wsc_call_recv(struct wsc_call *c, const ProtobufCMessageDescriptor *desc,
                  ProtobufCMessage **ret_msg)
{
    bool ok = false;
    int r = wsc_call_start_recv(c);

    if (r < 0)
        return r;
    r = wait_for(c, WSC_EV_RECEIVED, &ok);
    if (r < 0)
        return r;
    if (!ok)
        return 0;
    return wsc_call_take(c, desc, ret_msg);
}

int wsc_call_status(struct wsc_call *c)
{
    bool ok;

    if (!wsc_call_done(c)) {
        int r = wait_for(c, WSC_EV_STATUS, &ok);
        if (r < 0)
            return r;
    }
    /* Operations still in flight complete right after the status. */
    while (wsc_call_send_pending(c) || wsc_call_recv_pending(c)) {
        enum wsc_event ev;
        if (wsc_call_next(c, -1, &ev, &ok) < 0)
            break;
    }
    return c->status == GRPC_STATUS_OK ? 0 : -EREMOTEIO;
}

const struct wsc_error *wsc_call_error(const struct wsc_call *c)
{
    return &c->error;
}

int wsc_unary(struct wsc_client *cl, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **ret_resp,
              struct wsc_error *ret_err)
{
    struct wsc_call *c = NULL;
    ProtobufCMessage *resp = NULL;
    int r, st;

    r = wsc_call_new(cl, method, &c);
    if (r < 0)
        return r;
    /* A refused send means the call already ended: the status says why. */
    (void)wsc_call_send(c, req, true);
    r = wsc_call_recv(c, resp_desc, &resp);
    st = wsc_call_status(c);
    if (st < 0) {
        *ret_err = *wsc_call_error(c);
        r = st;
        goto out;
    }
    if (r < 0)
        goto out;
    if (r == 0) {
        r = -EBADMSG;
        goto out;
    }
    *ret_resp = resp;
    resp = NULL;
    r = 0;
out:
    if (resp)
        protobuf_c_message_free_unpacked(resp, NULL);
    wsc_call_free(c);
    return r;
}

const char *wsc_status_name(grpc_status_code code)
{
    static const char *const names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if ((unsigned)code < sizeof(names) / sizeof(names[0]))
        return names[code];
    return "UNKNOWN";
}
