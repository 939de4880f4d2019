/* Private to server/rpc: the call and server objects shared by call.c and
 * server.c, the wire-level validator (validate.c) and the status builder
 * (status.c). Nothing outside server/rpc includes this file.
 */
#ifndef WS_RPC_INTERNAL_H
#define WS_RPC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <protobuf-c/protobuf-c.h>

#include "server/base/time.h"
#include "server/rpc/call.h"
#include "server/rpc/log.h"

#define ws_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* What gRPC orders between two threads: a tag handed over and the thread
 * its completion reaches, the auth processor's state and the thread gRPC
 * calls it on. gRPC's own locks are not ThreadSanitizer's (the library is
 * not built with it): under -fsanitize=thread each hand-over is told to it
 * (release before, acquire after), or every call would be reported as a
 * race with the one before it. Nothing otherwise. */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define WS_RPC_HANDOFF_RELEASE(p) __tsan_release(p)
#define WS_RPC_HANDOFF_ACQUIRE(p) __tsan_acquire(p)
#else
#define WS_RPC_HANDOFF_RELEASE(p) ((void)(p))
#define WS_RPC_HANDOFF_ACQUIRE(p) ((void)(p))
#endif

/* A completion-queue tag. Every tag handed to gRPC is one of these,
 * embedded in the object it belongs to; the CQ threads call done() with
 * the event's success flag. */
struct ws_tag {
    void (*done)(struct ws_tag *tag, bool ok);
};

/* Requests kept armed per registered method (and for unregistered ones). */
#define WS_RPC_REQUESTS_PER_METHOD 2
/* Default message ceiling in either direction. */
#define WS_RPC_DEFAULT_MAX_MESSAGE (4 * 1024 * 1024 + 64 * 1024)
/* Longest status message sent to a client, bytes. */
#define WS_RPC_STATUS_MESSAGE_MAX 512
/* Longest dotted field path named in a MALFORMED error. */
#define WS_RPC_FIELD_PATH_MAX 128
/* Deepest message nesting the validator follows. */
#define WS_RPC_NESTING_MAX 32

struct ws_call {
    struct ws_rpc_server *server;
    /* NULL for a call to an unregistered method (answered UNIMPLEMENTED). */
    const struct ws_rpc_method *method;
    size_t method_index;

    struct ws_tag accept_tag;
    struct ws_tag close_tag;
    struct ws_tag recv_tag;
    struct ws_tag send_tag;
    struct ws_tag status_tag;

    /* Filled by gRPC when the request is matched. */
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array request_md;
    grpc_call_details details;

    /* Outstanding batches + holders; the object is freed at zero. */
    atomic_long refs;
    pthread_mutex_t mu; /* recursive */
    void *data;

    int close_cancelled;
    grpc_byte_buffer *recv_bb;
    grpc_byte_buffer *send_bb;
    grpc_byte_buffer *status_bb;

    bool accepted;      /* matched to a client call */
    bool started;       /* on_start ran */
    bool md_sent;       /* initial metadata went out */
    bool send_busy;     /* a SEND_MESSAGE batch is in flight */
    bool recv_busy;     /* a RECV_MESSAGE batch is in flight */
    bool finished;      /* a status was issued or queued */
    bool status_queued; /* ... queued behind the send in flight */
    bool cancelled;     /* on_cancel delivered (or the call died unstarted) */
    bool closed;        /* RECV_CLOSE_ON_SERVER completed */

    /* The status; owned here until its batch completes. */
    grpc_status_code code;
    grpc_slice status_message;
    bool has_message;
    grpc_metadata trailer[1];
    size_t n_trailer;

    int64_t accepted_ms;
    char tenant[WS_RPC_TENANT_MAX + 1];

    /* The message in flight (send_bb or status_bb) as counted by the
     * server-wide send queue (sendq.c): its bytes (0: not counted), when
     * it was handed to gRPC, its neighbours in the queue's list and
     * whether the queue cancelled the call. Under sendq.c's lock. */
    size_t queued;
    int64_t queued_ms;
    struct ws_call *q_prev, *q_next;
    bool q_evicted;
};

struct ws_rpc_server {
    grpc_server *server;
    grpc_completion_queue *cq;
    const struct ws_rpc_method *methods;
    size_t n_methods;
    void **registered;
    int max_message_bytes;
    bool is_unix;
    /* Serving TCP without authentication (--insecure-loopback): the
     * trimmer thread repeats the warning. */
    bool insecure;
    /* NULL when the server runs without authentication. */
    struct ws_rpc_auth *auth;

    int n_threads;
    int threads_running;
    pthread_t *threads;
    pthread_t trimmer; /* gives memory back after bursts (server.c) */
    bool trimmer_running;
    bool started;

    pthread_mutex_t mu;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    long live_calls;     /* accepted call objects not yet freed */
    long objects;        /* every call object, armed requests included */
    long burst_peak;     /* most live calls since the heap was last trimmed */
    bool shutdown_called;
    bool shutdown_notified;
    bool shut_down;
    struct ws_tag shutdown_tag;
};

/* ---- server.c ---- */

/* One line on stderr (log.h) when `level` is enabled (WS_RPC_LOG=info|debug;
 * errors always); fmt formats the members of "fields", without braces. */
void ws_rpc_log(int level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool ws_rpc_log_enabled(int level);
/* The monotonic clock in ms, under the name call.c still uses. */
static inline int64_t ws_rpc_now_ms(void)
{
    return ws_mono_ms();
}

/* Called by call.c when a call object is freed. */
void ws_rpc_server_call_gone(struct ws_rpc_server *s, bool accepted);

/* ---- sendq.c ---- */

/* The cap on bytes of messages handed to gRPC and not yet written (0: no
 * cap); what is over it is taken back by cancelling the calls whose
 * messages have waited longest. */
void ws_rpc_sendq_set_max(uint64_t max);
/* Counts c's message of n bytes, just handed to gRPC, and cancels older
 * calls while the total is over the cap. Under c's lock. */
void ws_rpc_sendq_charge(struct ws_call *c, size_t n);
/* Its batch completed: the bytes are no longer gRPC's. Under c's lock. */
void ws_rpc_sendq_release(struct ws_call *c);
uint64_t ws_rpc_sendq_bytes(void);
/* Calls cancelled by the cap since the start. */
uint64_t ws_rpc_sendq_evicted(void);

/* ---- auth.c ---- */

struct ws_rpc_auth;
/* Loads the tokens file (NULL: none); client_certs: a verified client
 * certificate's CN names the tenant of a call without a token. On failure
 * `why` names the file and line. */
int ws_rpc_auth_new(const char *tokens_path, bool client_certs, struct ws_rpc_auth **ret, char *why,
                    size_t why_len);
void ws_rpc_auth_free(struct ws_rpc_auth *a);
/* Swaps in a re-read table; on failure the old one stays. Returns the
 * number of tokens or -errno. */
int ws_rpc_auth_reload(struct ws_rpc_auth *a, char *why, size_t why_len);
/* Unix listener: a caller without a token is named by its uid (fn may be
 * NULL: only root and the server's own uid, as the default tenant). */
void ws_rpc_auth_use_peers(struct ws_rpc_auth *a, ws_rpc_peer_fn fn, void *ud);
/* Makes creds check every call's metadata before it is matched. */
void ws_rpc_auth_install(struct ws_rpc_auth *a, grpc_server_credentials *creds);
/* The tenant of an accepted call from its metadata and connection; false
 * when it does not authenticate (any more). */
bool ws_rpc_auth_tenant(struct ws_rpc_auth *a, grpc_call *call, const grpc_metadata_array *md,
                        char ret[WS_RPC_TENANT_MAX + 1]);

/* ---- call.c ---- */

/* A fresh call object for method `index` (n_methods: unregistered), ready
 * to be handed to grpc_server_request_*call with its accept_tag; counted
 * in s->objects. NULL on allocation failure. */
struct ws_call *ws_rpc_call_alloc(struct ws_rpc_server *s, size_t index);
/* Frees a call object whose request never matched (accept tag !ok). */
void ws_rpc_call_discard(struct ws_call *c);
/* The request matched: issues RECV_CLOSE_ON_SERVER and reads the first
 * message (or answers UNIMPLEMENTED). */
void ws_rpc_call_accepted(struct ws_call *c);

/* ---- validate.c ---- */

/* Checks the serialized message `data` of type `desc` at the wire level:
 * well-formed tags and lengths, every string field (nested messages,
 * repeated fields and map entries included) valid UTF-8 without NUL bytes.
 * Returns 0 or -WS_EMALFORMED; on failure the dotted path of the offending
 * field (or of the message whose bytes are broken; empty at the top level)
 * is written to `field`. */
int ws_rpc_validate_message(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                            char *field, size_t field_size);
/* Copies at most src_max bytes of the string `src` (NULL: "") into
 * dst[0..size), always terminated, replacing bytes that are not valid UTF-8
 * with '?'. */
void ws_rpc_utf8_copy(char *dst, size_t size, const char *src, size_t src_max);

/* ---- status.c ---- */

struct ws_rpc_status {
    grpc_status_code code;
    /* For grpc-message; empty for OK. */
    grpc_slice message;
    /* Serialized google.rpc.Status for grpc-status-details-bin. */
    grpc_slice details;
};

/* Builds the status for error `err` and diag `d` (may be NULL). */
void ws_rpc_status_from_error(int err, const struct ws_diag *d, struct ws_rpc_status *ret);
/* Builds a status with an explicit code, ErrorInfo reason (NULL: none),
 * message (NULL: the reason's default) and metadata pairs. */
void ws_rpc_status_build(grpc_status_code code, const char *reason, const char *message,
                         const char *const *keys, const char *const *values, size_t n_meta,
                         struct ws_rpc_status *ret);

#endif
