/* An HTTP client for the Docker Engine API whose transfers run on the
 * server's pump thread (server/events/pump.h), through libcurl's multi
 * socket API: curl's sockets and one timerfd are pump watches, so a
 * thousand idle log streams cost no thread each and never block the loop.
 *
 * Ownership and lifetime
 *   - A client (struct ws_docker_http) belongs to its creator; the pump
 *     must outlive it. ws_docker_http_free() ends every call still in
 *     flight (on_done gets -ECANCELED) before it returns.
 *   - A call is started by ws_docker_http_start(). If start returns an
 *     error, no callback is ever called. If it returns 0, on_done is
 *     called exactly once, on the pump thread, and nothing else of the
 *     call (no on_body) is called after it.
 *   - The transfer (curl handle, copied request body, sockets it alone
 *     used) is released as soon as on_done returns. The struct
 *     ws_docker_http_call itself is reference counted: if the caller asked
 *     for it (ret non-NULL) it holds one reference and must drop it with
 *     ws_docker_http_call_unref() exactly once, from any thread, before or
 *     after on_done; until then cancel and resume are always safe to call
 *     (after on_done they do nothing). A caller that passes ret == NULL
 *     never sees the call, and the call is freed right after on_done.
 *
 * Threading
 *   - on_body and on_done run on the pump thread. They must not block; they
 *     may call start, cancel, resume and unref (never call_sync, which
 *     returns -EDEADLK there, nor ws_docker_http_free).
 *   - new, start, cancel, resume, unref and call_sync may be called from
 *     any thread; cancel and resume are posted to the pump thread
 *     (ws_pump_post), so their effect is asynchronous but ordered after any
 *     earlier start of the same call.
 *   - ws_docker_http_free must not be called from the pump thread, nor
 *     concurrently with or after any other use of the client or its calls,
 *     except ws_docker_http_call_unref.
 *   - libcurl is initialised once (curl_global_init under pthread_once) on
 *     the first ws_docker_http_new.
 *
 * Errors of a finished call (on_done's err; call_sync's return)
 *   0              the exchange completed; http_status is the daemon's
 *                  status, whatever it is (404 is not an error here)
 *   -ECANCELED     ws_docker_http_cancel() or ws_docker_http_free()
 *   -ETIMEDOUT     the total or the connect timeout expired
 *   -ENOENT        unix socket: the socket path does not exist
 *   -ECONNREFUSED  nothing listens (unix or tcp), or another connect error
 *   -EACCES        unix socket: no permission to connect
 *   -EHOSTUNREACH  tcp: the host name does not resolve
 *   -ECONNRESET    the connection broke or closed before a full response
 *   -EPROTO        not HTTP, bad chunked encoding, TLS handshake failure
 *   -EKEYREJECTED  TLS: the daemon's certificate does not verify
 *   -EMSGSIZE      call_sync: the body exceeded max_body
 *   -ENOMEM        out of memory
 *   -EIO           any other transport failure
 *   an on_body's own negative return value, if it aborted the call
 *   http_status is 0 when no response status line was received.
 */
#ifndef WS_DOCKER_HTTP_H
#define WS_DOCKER_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "server/docker/endpoint.h"

struct ws_pump;
struct ws_work_ctl; /* server/work/pool.h */
struct ws_docker_http;
struct ws_docker_http_call;

/* --- Named limits and defaults ------------------------------------------- */

/* Request target (path and query), in bytes without the NUL. */
#define WS_DOCKER_HTTP_PATH_MAX 4096
/* Request body (a JSON document such as a container create). */
#define WS_DOCKER_HTTP_REQUEST_BODY_MAX (1024 * 1024)
/* Calls in flight per client, started but not yet done: beyond, -EBUSY. */
#define WS_DOCKER_HTTP_CALLS_MAX_DEFAULT 1024
/* Connections to the daemon per client; more calls queue inside curl.
 * Long streams (logs, events, attach) each hold one for their lifetime. */
#define WS_DOCKER_HTTP_CONNECTIONS_MAX_DEFAULT 256
/* A call's total duration, unless the request says otherwise. */
#define WS_DOCKER_HTTP_TIMEOUT_MS_DEFAULT 30000L
/* Connecting (and TLS handshake) to the daemon. */
#define WS_DOCKER_HTTP_CONNECT_TIMEOUT_MS_DEFAULT 5000L
/* request.timeout_ms: no total timeout, for streams that last as long as
 * the container (logs follow, events, attach); cancel ends them. */
#define WS_DOCKER_HTTP_NO_TIMEOUT (-1L)
/* call_sync's max_body when the caller passes 0. */
#define WS_DOCKER_HTTP_SYNC_BODY_MAX_DEFAULT (1024 * 1024)

/* --- Client --------------------------------------------------------------- */

/* Creates a client whose transfers run on pump. cfg is copied. Nothing is
 * connected yet. Returns 0, -EINVAL (bad cfg), -ENOMEM, -EMFILE... */
int ws_docker_http_new(struct ws_pump *pump, const struct ws_docker_http_config *cfg,
                       struct ws_docker_http **ret);

/* Ends every call in flight (each on_done gets -ECANCELED, on the pump
 * thread), closes the connections and frees the client; waits for that.
 * Accepts NULL. Not from the pump thread (see above). */
void ws_docker_http_free(struct ws_docker_http *h);

/* --- Calls ---------------------------------------------------------------- */

enum ws_docker_http_method {
    WS_DOCKER_HTTP_GET = 0,
    WS_DOCKER_HTTP_POST,
    WS_DOCKER_HTTP_PUT,
    WS_DOCKER_HTTP_DELETE,
    WS_DOCKER_HTTP_HEAD,
};

/* on_body's return value asking to pause; see on_body. */
#define WS_DOCKER_HTTP_PAUSE 1

/* Receives response body bytes (chunked encoding already removed), on the
 * pump thread. Returns 0 when it consumed them all, WS_DOCKER_HTTP_PAUSE
 * when it consumed none of them and wants no more for now (backpressure:
 * the same bytes, possibly followed by more, are delivered again after
 * ws_docker_http_resume), or a negated errno to abort the call, which then
 * ends with that error. */
typedef int (*ws_docker_http_body_fn)(void *arg, const char *data, size_t len);
/* The call's end; see the error table above. Exactly once per started
 * call, on the pump thread. */
typedef void (*ws_docker_http_done_fn)(void *arg, int err, long http_status);

struct ws_docker_http_request {
    enum ws_docker_http_method method;
    /* Request target, starting with '/', already validated and
     * percent-encoded by the caller (server/docker/api.h); at most
     * WS_DOCKER_HTTP_PATH_MAX bytes, no spaces or control bytes. */
    const char *path;
    /* Optional JSON body, copied by start; sent with Content-Type
     * application/json. NULL for none. body_len <= REQUEST_BODY_MAX. */
    const char *body;
    size_t body_len;
    /* Milliseconds; 0 means the default. timeout_ms may also be
     * WS_DOCKER_HTTP_NO_TIMEOUT (not for call_sync). */
    long timeout_ms;
    long connect_timeout_ms;
    /* May be NULL: the body is discarded. */
    ws_docker_http_body_fn on_body;
    ws_docker_http_done_fn on_done; /* required */
    void *arg;
};

/* Starts a call; see the lifetime rules above for ret (may be NULL).
 * Returns 0, -EINVAL (bad request), -E2BIG (body over REQUEST_BODY_MAX),
 * -EBUSY (calls_max calls in flight), -ESHUTDOWN (ws_docker_http_free has
 * begun, e.g. from an on_done it runs), -ENOMEM. */
int ws_docker_http_start(struct ws_docker_http *h, const struct ws_docker_http_request *req,
                         struct ws_docker_http_call **ret);

/* Ends the call with -ECANCELED, unless it has already ended (then nothing
 * happens). Any thread; asynchronous (on_done follows on the pump thread).
 * Returns 0 or -ENOMEM (nothing happens then). */
int ws_docker_http_cancel(struct ws_docker_http_call *call);

/* Undoes an on_body pause. Any thread; asynchronous; nothing happens if the
 * call is not paused or has ended. Returns 0 or -ENOMEM. */
int ws_docker_http_resume(struct ws_docker_http_call *call);

/* Drops the caller's reference from start; the pointer is invalid
 * afterwards. Does not cancel. Any thread. Accepts NULL. */
void ws_docker_http_call_unref(struct ws_docker_http_call *call);

/* Runs one call to its end, blocking the calling thread (a handler
 * thread, never the pump thread: -EDEADLK). req's on_body, on_done and
 * arg are ignored; req->timeout_ms must be finite. The body is collected
 * up to max_body bytes (0 means WS_DOCKER_HTTP_SYNC_BODY_MAX_DEFAULT);
 * beyond, the call is aborted with -EMSGSIZE.
 * On 0, *ret_body (if ret_body) is a malloc'd copy of the body with a NUL
 * after ret_len bytes (the caller frees it), *ret_len and *ret_status (each
 * if non-NULL) are written. Returns 0 or any error of the table above, or
 * start's errors. */
int ws_docker_http_call_sync(struct ws_docker_http *h, const struct ws_docker_http_request *req,
                             char **ret_body, size_t *ret_len, long *ret_status, size_t max_body);

/* How often call_ctl looks at its ctl: a cancel is a flag to read, not an
 * event to wait for. */
#define WS_DOCKER_HTTP_CTL_POLL_MS 100L

/* Like call_sync, for a call that may outlast its caller's wish for it (an
 * image pull): the body goes to req->on_body as it comes, on the pump
 * thread (nothing is collected; on_body must not pause, and may be NULL),
 * and the call is cancelled once ctl stops (ws_work_ctl_check, looked at
 * every WS_DOCKER_HTTP_CTL_POLL_MS; NULL never stops). req->on_done and
 * arg are ignored; req->timeout_ms must be finite. Returns 0 with
 * *ret_status (if non-NULL) when the exchange completed, whatever ctl
 * says by then; ctl's reason (-ETIMEDOUT, -ECANCELED) when it stopped the
 * call; else an error of the table above or of start. Every on_body has
 * returned before this does. */
int ws_docker_http_call_ctl(struct ws_docker_http *h, const struct ws_docker_http_request *req,
                            const struct ws_work_ctl *ctl, long *ret_status);

#endif
