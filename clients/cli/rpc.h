/* The client side of the gRPC C core for wsctl: one channel and one
 * completion queue per client, and call objects that drive a single RPC of
 * any shape (unary, client-, server- or bidi-streaming) with protobuf-c
 * messages.
 *
 * Ownership: a wsc_call belongs to its creator and must be freed with
 * wsc_call_free after its status arrived (wsc_call_status) or after
 * wsc_call_cancel + wsc_call_status. Received messages are the caller's
 * (protobuf_c_message_free_unpacked).
 *
 * Threads: the blocking helpers (wsc_call_send, _recv, _status) are for
 * one thread. The exec console splits the work: one thread pumps the queue
 * with wsc_call_next while another may start sends (wsc_call_start_send)
 * and cancel; at most one send may be in flight, one receive likewise.
 *
 * Returns: 0 / 1 as documented, or -errno; a failed RPC is -EREMOTEIO with
 * the decoded status in the call's error (wsc_call_error). A call sent to
 * a node (wsc_client_set_node) that fails UNAVAILABLE has node=NAME added
 * to its error's metadata, so the report says which node is unreachable.
 */
#ifndef WSC_RPC_H
#define WSC_RPC_H

#include <stdbool.h>
#include <stddef.h>

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

/* Upper bounds of what a server can make wsctl hold. */
#define WSC_REASON_MAX  64
#define WSC_MESSAGE_MAX 1024
#define WSC_META_MAX    8
#define WSC_META_LEN    256
/* Longest node name (`x-workspace-node`), with its NUL. */
#define WSC_NODE_MAX 64
/* Largest message accepted from the server (its own limit is 4 MiB plus
 * framing). */
#define WSC_MAX_RECV_BYTES (8 * 1024 * 1024)

/* A failed RPC as the server described it. */
struct wsc_error {
    grpc_status_code code;
    /* ErrorInfo.reason, or "" when the status had no details. */
    char reason[WSC_REASON_MAX];
    char message[WSC_MESSAGE_MAX];
    size_t n_meta;
    char meta_key[WSC_META_MAX][WSC_META_LEN];
    char meta_value[WSC_META_MAX][WSC_META_LEN];
};

struct wsc_client;
struct wsc_call;

enum wsc_event {
    WSC_EV_SENT,
    WSC_EV_RECEIVED,
    WSC_EV_STATUS,
};

/* TLS settings of a client: PEM text (not paths), borrowed for the
 * duration of wsc_client_new only. */
struct wsc_tls {
    /* The CAs that verify the server; NULL: the system roots. */
    const char *root_certs;
    /* A client certificate chain and its key for mutual TLS: both or
     * neither. */
    const char *cert_chain;
    const char *private_key;
    /* The name the server's certificate must carry, when it is not the
     * address's host; NULL: the host. */
    const char *server_name;
};

/* Calls grpc_init and connects lazily to `addr`, a gRPC target:
 * "host:port", or "unix:/ABSOLUTE/PATH" (or "unix:///ABSOLUTE/PATH") for a
 * unix socket, which gRPC's own resolver handles. `token` may be NULL;
 * `tls` NULL is plaintext. Returns 0, -E2BIG for an oversized token,
 * -EINVAL for half a key pair, or -ENOMEM. */
int wsc_client_new(const char *addr, const char *token, const struct wsc_tls *tls,
                   struct wsc_client **ret_client);
/* Accepts NULL. Every call must have been freed, and every sibling. */
void wsc_client_free(struct wsc_client *cl);
/* A client on the same channel (connection, token, node) with a completion
 * queue of its own, for a second thread that makes calls while the first
 * drives a stream (attach -i: SendInput next to Attach). Free it before
 * `cl`. Returns 0 or -ENOMEM. */
int wsc_client_sibling(const struct wsc_client *cl, struct wsc_client **ret_client);

/* Behind a front proxy that routes by node: every later call about a
 * workspace (all but Open, ListProviders and Health) carries
 * `x-workspace-node: NODE`. NULL or "" sends none. Returns 0, or -EINVAL
 * for a name that is not 1 to WSC_NODE_MAX - 1 of [A-Za-z0-9._-]. */
int wsc_client_set_node(struct wsc_client *cl, const char *node);
/* The node set with wsc_client_set_node, or "". */
const char *wsc_client_node(const struct wsc_client *cl);
/* The node a front proxy named in the `x-workspace-node` header of the
 * last response received, or "" when it named none (no proxy, or a name
 * that is not a node name). */
const char *wsc_client_answered_node(const struct wsc_client *cl);

/* Starts `method` ("/workspace.v1.Exec/Start"): sends the headers and asks
 * for the final status. Returns 0, -ENOMEM or -EIO. */
int wsc_call_new(struct wsc_client *cl, const char *method, struct wsc_call **ret_call);
/* Accepts NULL. Only once every started operation has completed. */
void wsc_call_free(struct wsc_call *c);

/* Blocking: sends `msg` (and half-closes after it when `close`). 0, or
 * -EPIPE when the stream is gone (read the status for why). */
int wsc_call_send(struct wsc_call *c, const ProtobufCMessage *msg, bool close);
/* Blocking: half-closes without a message. */
int wsc_call_close_send(struct wsc_call *c);
/* Blocking: receives the next message of type `desc`. 1 with *ret_msg set,
 * 0 at the end of the stream, -EBADMSG if it does not decode. */
int wsc_call_recv(struct wsc_call *c, const ProtobufCMessageDescriptor *desc,
                  ProtobufCMessage **ret_msg);
/* Blocking: waits for the final status. 0 for OK, else -EREMOTEIO. */
int wsc_call_status(struct wsc_call *c);
/* The decoded status of a finished call. */
const struct wsc_error *wsc_call_error(const struct wsc_call *c);

/* Thread-safe: cancels the call; the status still arrives (CANCELLED). */
void wsc_call_cancel(struct wsc_call *c);

/* Asynchronous halves for the exec console. start_send: -EBUSY while a
 * send is in flight, -EPIPE if the core refused. start_recv likewise. */
int wsc_call_start_send(struct wsc_call *c, const ProtobufCMessage *msg, bool close);
int wsc_call_start_recv(struct wsc_call *c);
/* Waits up to timeout_ms (< 0: forever) for the next completion. 1 with
 * *ret_ev / *ret_ok, 0 on timeout. After WSC_EV_RECEIVED with ok, take the
 * message with wsc_call_take (1 message, 0 end of stream). */
int wsc_call_next(struct wsc_call *c, int timeout_ms, enum wsc_event *ret_ev, bool *ret_ok);
int wsc_call_take(struct wsc_call *c, const ProtobufCMessageDescriptor *desc,
                  ProtobufCMessage **ret_msg);
bool wsc_call_send_pending(const struct wsc_call *c);
bool wsc_call_recv_pending(const struct wsc_call *c);
bool wsc_call_done(const struct wsc_call *c);

/* One request, one response. 0 with *ret_resp, or -errno (-EREMOTEIO with
 * *ret_err filled). */
int wsc_unary(struct wsc_client *cl, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **ret_resp,
              struct wsc_error *ret_err);

/* Name of a gRPC status code ("NOT_FOUND"). */
const char *wsc_status_name(grpc_status_code code);

#endif
