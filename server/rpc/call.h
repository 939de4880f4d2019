/* gRPC C-core plumbing: one completion queue served by N threads, a call
 * object per RPC with its tags embedded and a reference count, and one
 * callback table per method covering unary, server-streaming,
 * client-streaming and bidi calls.
 *
 * Life of a call: the core accepts it, issues RECV_CLOSE_ON_SERVER at once
 * (that is how a client cancel or an expired deadline is learned), reads
 * and decodes the first request message, then calls on_start. From there
 * the handler drives the call with ws_call_send / ws_call_recv /
 * ws_call_finish / ws_call_fail; completions come back as on_sent and
 * on_message. on_cancel runs at most once if the client cancels, the
 * deadline passes or the server drains before the handler finished.
 * on_destroy runs exactly once, when the last reference is dropped, for
 * every call whose on_start ran (a call the core rejects before on_start,
 * e.g. a malformed first message, never reaches the handler at all).
 *
 * Thread safety: callbacks of one call never run concurrently (the call's
 * own recursive lock is held around each). Any thread may call the ws_call_*
 * functions on a call it holds a reference to; they take the same lock.
 * Threads other than the callback's own must hold a reference
 * (ws_call_ref / ws_call_unref). A handler that takes its own lock inside
 * a callback must not hold that lock while calling ws_call_* (the call's
 * lock would then be taken in both orders).
 *
 * Messages handed to on_start / on_message are owned by the core and freed
 * when the callback returns. Messages passed to ws_call_send / finish are
 * serialized before the function returns and stay the caller's.
 */
#ifndef WS_RPC_CALL_H
#define WS_RPC_CALL_H

#include <stdbool.h>
#include <stdint.h>

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

#include "server/base/errors.h"
#include "workspace/v1/common.pb-c.h"

enum ws_rpc_kind {
    WS_RPC_UNARY,
    WS_RPC_SERVER_STREAM,
    WS_RPC_CLIENT_STREAM,
    WS_RPC_BIDI,
};

struct ws_call;

struct ws_rpc_method {
    /* Full method path, e.g. "/workspace.v1.FileSystem/ReadFile". */
    const char *path;
    enum ws_rpc_kind kind;
    /* Type of the request messages; the core decodes them. Before decoding
     * the core checks every string field (nested ones too) is valid UTF-8
     * without NUL bytes, else the call fails INVALID_ARGUMENT, reason
     * MALFORMED, metadata "field". */
    const ProtobufCMessageDescriptor *request;
    /* Required. The first request message; NULL for a client-streaming or
     * bidi call whose client half-closed before sending anything. */
    void (*on_start)(struct ws_call *call, const ProtobufCMessage *req);
    /* Client-streaming and bidi: the message asked for by ws_call_recv, or
     * NULL when the client half-closed. Not called if the stream broke
     * (on_cancel follows instead). A later message that fails the
     * UTF-8 / decoding checks ends the call INVALID_ARGUMENT MALFORMED and
     * the handler gets on_cancel. */
    void (*on_message)(struct ws_call *call, const ProtobufCMessage *msg);
    /* The send started by ws_call_send completed; !ok means the stream is
     * gone (the call will be cancelled). Optional. */
    void (*on_sent)(struct ws_call *call, bool ok);
    /* The client cancelled, the deadline passed or the server is draining,
     * and the handler had not finished the call. Optional. */
    void (*on_cancel)(struct ws_call *call);
    /* Frees handler state (ws_call_data). Optional. */
    void (*on_destroy)(struct ws_call *call);
    /* Opaque value for the handler (ws_call_method_data). */
    void *method_data;
};

/* Per-call handler state. */
void ws_call_set_data(struct ws_call *call, void *data);
void *ws_call_data(struct ws_call *call);
void *ws_call_method_data(struct ws_call *call);

void ws_call_ref(struct ws_call *call);
void ws_call_unref(struct ws_call *call);

/* Sends one response message (initial metadata goes with the first).
 * Returns 0, -EBUSY while a previous send is in flight, -ECANCELED after
 * a cancel, -EALREADY after finish/fail, -EFBIG if the message is larger
 * than the server's max_message_bytes. on_sent follows a 0 return. */
int ws_call_send(struct ws_call *call, const ProtobufCMessage *msg);

/* Sends the response headers (initial metadata) alone; on_sent follows a 0
 * return. A client that cancelled shows up to the server as an ordinary
 * half-close (an empty receive), but its stream is already closed for
 * writing: this send then completes with !ok. Handlers that must not act on
 * a cancelled stream (a write commit) probe with it first. -EALREADY when
 * headers were already sent, -EBUSY while a send is in flight. */
int ws_call_send_headers(struct ws_call *call);

/* Asks for the next request message (client-streaming, bidi); on_message
 * follows a 0 return (unless the stream breaks: on_cancel). -EBUSY if a
 * receive is in flight, -EINVAL for a unary or server-streaming method,
 * -ECANCELED / -EALREADY as for ws_call_send. */
int ws_call_recv(struct ws_call *call);

/* Ends the call with OK, sending `msg` first if not NULL (unary calls must
 * pass their response). Waits for nothing: safe while a send is in flight
 * only if msg is NULL (the status then follows that send; with a msg it
 * is -EBUSY). Returns 0, -EALREADY if already finished, -ECANCELED after a
 * cancel, -EFBIG if msg is over max_message_bytes (the call stays open:
 * fail it). */
int ws_call_finish(struct ws_call *call, const ProtobufCMessage *msg);

/* Ends the call with the status for error `err` (a negated errno or WS_E*
 * number, see server/base/errors.h), the message and metadata of `d`
 * (may be NULL), and google.rpc.Status + ErrorInfo in
 * grpc-status-details-bin. An empty diag message is replaced by the
 * reason's default; strings are made valid UTF-8. Like finish, safe while
 * a send is in flight. Returns as ws_call_finish. */
int ws_call_fail(struct ws_call *call, int err, const struct ws_diag *d);

/* Ends the call with a reason of workspace.v1.ErrorReason and its code
 * (the one table's); message NULL: the reason's default. -EINVAL for
 * ERROR_REASON_UNSPECIFIED. */
int ws_call_fail_status(struct ws_call *call, Workspace__V1__ErrorReason reason,
                        const char *message);

/* The tenant the call was authenticated as (WS_RPC_TENANT_DEFAULT when the
 * server runs without authentication). Valid for the call's lifetime. */
const char *ws_call_tenant(struct ws_call *call);

/* True once on_cancel has been (or is being) delivered. */
bool ws_call_cancelled(struct ws_call *call);

/* Whether s is a valid tenant name. */
bool ws_rpc_tenant_valid(const char *s, size_t len);

/* Milliseconds until the client's deadline, or INT64_MAX when none. */
int64_t ws_call_deadline_remaining_ms(struct ws_call *call);

/* ---- server ---- */

/* Names the tenant of a caller on the unix socket by its uid: writes the
 * name (at most WS_RPC_TENANT_MAX bytes, terminated) to ret and returns
 * true, or returns false when the uid is not mapped. Called on gRPC's
 * threads, several at once, for every call that sends no token. */
typedef bool (*ws_rpc_peer_fn)(void *ud, uint32_t uid, char *ret);

struct ws_rpc_config {
    /* "host:port" or "unix:PATH". A unix socket's directory is made 0750
     * when missing, the socket is 0660, both given to the group
     * "workspaced" when it exists (server/rpc/listen.h). Which addresses
     * need authentication is the caller's check (ws_listen_check). */
    const char *listen;
    /* Completion-queue threads; 0 = number of CPUs, at least 2. */
    int threads;
    /* Largest message in either direction, bytes; 0 = 4 MiB + 64 KiB. */
    int max_message_bytes;
    /* Keepalive ping interval, and how long an unanswered ping may take
     * before the connection (and every call on it) is dropped, so a
     * client that vanished without closing its connection is noticed.
     * 0 = WS_RPC_KEEPALIVE_MS_DEFAULT; < 0 = no keepalive. A C-core
     * client (C++, and wsctl) that is not reading answers pings only when
     * its backup poller runs, every 5 s: a timeout below that drops live
     * clients. */
    int keepalive_ms;
    /* Bearer tokens: "TENANT SHA256HEX" lines (NULL: none). With it or
     * with tls_client_ca every call must authenticate, else the call is
     * UNAUTHENTICATED before any handler runs; without both, on TCP, every
     * caller is WS_RPC_TENANT_DEFAULT. On a unix socket every call is
     * authenticated: by its token when it sends one and there is a tokens
     * file, else by the caller's uid (SO_PEERCRED): the tenant peer_tenant
     * names, else WS_RPC_TENANT_DEFAULT for uid 0 and the server's own
     * effective uid, else UNAUTHENTICATED. */
    const char *tokens_file;
    /* Unix socket: uid to tenant (NULL: no uid is mapped). */
    ws_rpc_peer_fn peer_tenant;
    void *peer_ud;
    /* TCP without authentication was allowed by --insecure-loopback: a
     * warning goes to the log at start and once a minute while serving. */
    bool insecure_loopback;
    /* PEM files. cert and key: serve TLS; client_ca: also require and
     * verify client certificates (mTLS), whose subject CN names the tenant
     * of a call that sends no token. */
    const char *tls_cert;
    const char *tls_key;
    const char *tls_client_ca;
    /* Filled by ws_rpc_server_new on a configuration error: one line. */
    char *why;
    size_t why_len;
    /* Streams (calls) one connection may have open at once: the HTTP/2
     * SETTINGS_MAX_CONCURRENT_STREAMS the server announces, so one client
     * holding many streams it never reads cannot take every handler.
     * 0 = WS_RPC_MAX_STREAMS_DEFAULT. */
    int max_streams_per_connection;
    /* Memory gRPC's transport may use for all connections together (a
     * resource quota): past it the core refuses new work and drops idle
     * connections rather than let the process grow. 0 =
     * WS_RPC_MEMORY_QUOTA_DEFAULT. */
    long long memory_quota_bytes;
    /* Connections the listener may hold open at once; one more is closed
     * as soon as it is accepted (server/rpc/conncap.h). 0 = half the
     * process's open-file limit (RLIMIT_NOFILE), within
     * WS_RPC_MAX_CONNECTIONS_MIN..WS_RPC_MAX_CONNECTIONS_MAX: the other
     * half stays for workspaces and commands. */
    unsigned max_connections;
    /* Server-streaming and bidi calls one tenant may have open at once,
     * over all its connections (0: no quota). One more is refused before
     * its handler runs: RESOURCE_EXHAUSTED, reason QUOTA, metadata
     * quota=tenant_streams and limit. A stream is what holds files open
     * past one call's work (a ReadFile, a Grep), so this also bounds the
     * descriptors a tenant's streams hold. A call counts from its first
     * message until its call object is gone. */
    unsigned tenant_max_streams;
    /* Bytes of responses handed to gRPC and not yet written to their
     * clients, over all calls (sendq.c). A client that never reads holds
     * its stream's message, and its handler's buffers, indefinitely; past
     * this cap the calls whose messages have waited longest are cancelled,
     * RESOURCE_EXHAUSTED, until the rest fits. 0 =
     * WS_RPC_SEND_BUFFER_DEFAULT. */
    long long max_send_buffer_bytes;
};

/* Tenant names: [A-Za-z0-9._-]{1,64}. */
#define WS_RPC_TENANT_MAX     64
#define WS_RPC_TENANT_DEFAULT "default"
/* The one message of every refused call, whatever was wrong. */
#define WS_RPC_UNAUTHENTICATED "unauthenticated"

#define WS_RPC_MAX_STREAMS_DEFAULT  100
#define WS_RPC_MAX_STREAMS_MAX      100000
#define WS_RPC_MEMORY_QUOTA_DEFAULT (1024LL * 1024 * 1024)
#define WS_RPC_MEMORY_QUOTA_MIN     (16LL * 1024 * 1024)
#define WS_RPC_SEND_BUFFER_DEFAULT  (64LL * 1024 * 1024)
#define WS_RPC_SEND_BUFFER_MIN      (1024LL * 1024)
#define WS_RPC_MAX_CONNECTIONS_MIN  64
#define WS_RPC_MAX_CONNECTIONS_MAX  1048576

#define WS_RPC_KEEPALIVE_MS_DEFAULT 10000
#define WS_RPC_KEEPALIVE_MS_MIN     100

struct ws_rpc_server;

/* Creates the server, registers `methods` (the array must outlive the
 * server), binds the address. Unregistered methods are answered
 * UNIMPLEMENTED. *ret_port receives the bound TCP port (0 for unix).
 * Calls grpc_init() (ws_rpc_server_free calls grpc_shutdown()). gRPC starts
 * threads here: block the signals main wants to sigwait for before this.
 * A unix socket path must not exist yet. Returns 0, -EINVAL for a bad
 * config or a path registered twice, -EADDRNOTAVAIL if binding failed.
 * Logging: errors only, on stderr, one JSON line each; WS_RPC_LOG=info
 * adds failed calls and the drain, WS_RPC_LOG=debug every call event. */
int ws_rpc_server_new(const struct ws_rpc_config *cfg, const struct ws_rpc_method *methods,
                      size_t n_methods, struct ws_rpc_server **ret_server, int *ret_port);
/* Re-reads the tokens file. On failure the old table stays and `why` says
 * which line was wrong. Returns the number of tokens, 0 without a tokens
 * file, or -errno. */
int ws_rpc_server_reload_tokens(struct ws_rpc_server *s, char *why, size_t why_len);
/* Starts the threads. */
int ws_rpc_server_start(struct ws_rpc_server *s);
/* Graceful drain: stops accepting calls, lets in-flight calls finish for up
 * to grace_ms, then cancels the rest (handlers see on_cancel; clients see
 * UNAVAILABLE), waits for every call object to be destroyed and the
 * threads to exit. Ends early once no call is left (idle client
 * connections are dropped after a short settling time). Blocks: never
 * call it from a callback. */
void ws_rpc_server_shutdown(struct ws_rpc_server *s, int grace_ms);
/* Accepts NULL. Only after shutdown. */
void ws_rpc_server_free(struct ws_rpc_server *s);

/* Sets the per-tenant stream quota (ws_rpc_config.tenant_max_streams) of
 * the process's server; ws_rpc_server_new calls it before serving. */
void ws_rpc_streams_set_max(unsigned max);

/* Number of live call objects (for tests and the drain). */
long ws_rpc_server_live_calls(struct ws_rpc_server *s);

/* Maps an error number to a gRPC code and ErrorInfo reason (the one
 * table). Exposed for tests. */
void ws_rpc_error_status(int err, grpc_status_code *ret_code, const char **ret_reason);
/* The reason an error number maps to (INTERNAL for any the table lacks). */
Workspace__V1__ErrorReason ws_rpc_error_reason(int err);
/* A reason's name as ErrorInfo carries it; NULL for UNSPECIFIED. */
const char *ws_rpc_reason_name(Workspace__V1__ErrorReason reason);
/* A reason's gRPC code and default message; false when the server's table
 * lacks the reason (the status table test proves it lacks none). */
bool ws_rpc_reason_info(Workspace__V1__ErrorReason reason, grpc_status_code *ret_code,
                        const char **ret_message);

#endif
