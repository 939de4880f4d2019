/* A small server on the RPC core for rpc_test.cc: a few methods under
 * /test.Echo/ built from existing messages, counters the test reads through
 * /test.Echo/Stats, and a drain on SIGTERM.
 *
 * Usage: test_server --listen ADDR [--grace-ms N] [--max-bytes N]
 * Prints "PORT <n>" once serving; on SIGTERM/SIGINT drains, prints
 * "live_calls=<n> started=<n> destroyed=<n> cancelled=<n>" and exits 0.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "google/rpc/error_details.pb-c.h"
#include "google/rpc/status.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "server/base/errors.h"
#include "server/rpc/call.h"

typedef Grpc__Health__V1__HealthCheckRequest Req;
typedef Grpc__Health__V1__HealthCheckResponse Resp;

static atomic_long n_started;   /* on_start calls, all methods */
static atomic_long n_destroyed; /* on_destroy calls, all methods */
static atomic_long n_slow_started;
static atomic_long n_cancelled; /* on_cancel calls, all methods */
static struct ws_rpc_server *server;

static const Req *as_req(const ProtobufCMessage *m)
{
    return (const Req *)m;
}

static long parse_long(const char *s)
{
    return s ? strtol(s, NULL, 10) : 0;
}

/* Per-call state shared by every method: a counter and a copy of the first
 * request's string. */
struct state {
    long n, i, sum;
    char *text;
};

static struct state *state_new(struct ws_call *call, const ProtobufCMessage *req)
{
    struct state *st = calloc(1, sizeof(*st));

    if (!st)
        abort();
    if (req && req->descriptor == &grpc__health__v1__health_check_request__descriptor)
        st->text = strdup(as_req(req)->service);
    ws_call_set_data(call, st);
    return st;
}

static void on_destroy(struct ws_call *call)
{
    struct state *st = ws_call_data(call);

    if (st) {
        free(st->text);
        free(st);
    }
    n_destroyed++;
}

static void on_cancel(struct ws_call *call)
{
    (void)call;
    n_cancelled++;
}

static int send_text(struct ws_call *call, const char *text, bool finish)
{
    Req r = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;

    r.service = (char *)text;
    return finish ? ws_call_finish(call, &r.base) : ws_call_send(call, &r.base);
}

static int send_number(struct ws_call *call, long v, bool finish)
{
    Resp r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;

    r.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)v;
    return finish ? ws_call_finish(call, &r.base) : ws_call_send(call, &r.base);
}

/* ---- /test.Echo/Unary: echoes the request. */
static void unary_start(struct ws_call *call, const ProtobufCMessage *req)
{
    n_started++;
    state_new(call, req);
    send_text(call, as_req(req)->service, true);
}

/* ---- /test.Echo/ServerStream: service "N[:SIZE]" sends N messages
 * ("<i>" padded to SIZE bytes), the next only once the previous is sent,
 * then finishes while the last send is still in flight. */
static void stream_next(struct ws_call *call)
{
    struct state *st = ws_call_data(call);
    char head[32];
    char *text;
    long size = 0;
    const char *colon = strchr(st->text, ':');

    if (colon)
        size = parse_long(colon + 1);
    if (size < 32)
        size = 32;
    text = malloc((size_t)size + 1);
    if (!text)
        abort();
    snprintf(head, sizeof(head), "%ld", st->i);
    memset(text, '.', (size_t)size);
    memcpy(text, head, strlen(head));
    text[size] = '\0';
    st->i++;
    send_text(call, text, false);
    free(text);
    if (st->i == st->n)
        ws_call_finish(call, NULL); /* queued behind the last send */
}

static void stream_start(struct ws_call *call, const ProtobufCMessage *req)
{
    struct state *st;

    n_started++;
    st = state_new(call, req);
    st->n = parse_long(st->text);
    if (st->n <= 0) {
        ws_call_finish(call, NULL);
        return;
    }
    stream_next(call);
}

static void stream_sent(struct ws_call *call, bool ok)
{
    struct state *st = ws_call_data(call);

    if (ok && st->i < st->n)
        stream_next(call);
}

/* ---- /test.Echo/ClientStream: sums the numbers in service. */
static void sum_message(struct ws_call *call, const ProtobufCMessage *msg)
{
    struct state *st = ws_call_data(call);

    if (!msg) {
        send_number(call, st->sum, true);
        return;
    }
    st->sum += parse_long(as_req(msg)->service);
    st->n++;
    ws_call_recv(call);
}

static void sum_start(struct ws_call *call, const ProtobufCMessage *req)
{
    n_started++;
    state_new(call, NULL);
    sum_message(call, req);
}

/* ---- /test.Echo/Bidi: echoes each message, reading the next once the
 * echo is sent; finishes when the client half-closes. */
static void bidi_message(struct ws_call *call, const ProtobufCMessage *msg)
{
    if (!msg) {
        ws_call_finish(call, NULL);
        return;
    }
    send_text(call, as_req(msg)->service, false);
}

static void bidi_start(struct ws_call *call, const ProtobufCMessage *req)
{
    n_started++;
    state_new(call, NULL);
    bidi_message(call, req);
}

static void bidi_sent(struct ws_call *call, bool ok)
{
    if (ok)
        ws_call_recv(call);
}

/* ---- /test.Echo/Fail: service "ERR[:t][:message]" fails with -ERR, a
 * metadata pair k=v, transient when "t" is given. */
static void fail_start(struct ws_call *call, const ProtobufCMessage *req)
{
    struct ws_diag d;
    const char *s = as_req(req)->service, *p;

    n_started++;
    memset(&d, 0, sizeof(d));
    ws_diag_meta(&d, "k", "v");
    p = strchr(s, ':');
    if (p && p[1] == 't') {
        d.transient = 1;
        p = strchr(p + 1, ':');
    }
    if (p && p[1])
        ws_diag_set(&d, "%s", p + 1);
    ws_call_fail(call, -(int)parse_long(s), &d);
}

/* ---- /test.Echo/Slow: never answers; waits for a cancel. */
static void slow_start(struct ws_call *call, const ProtobufCMessage *req)
{
    (void)call;
    (void)req;
    n_started++;
    n_slow_started++;
}

/* ---- /test.Echo/Delayed: service "MS" answers from another thread after
 * MS milliseconds (holding a reference meanwhile). */
static void *delayed_thread(void *arg)
{
    struct ws_call *call = arg;
    struct state *st = ws_call_data(call);
    struct timespec ts;

    ts.tv_sec = st->n / 1000;
    ts.tv_nsec = (st->n % 1000) * 1000000;
    nanosleep(&ts, NULL);
    send_text(call, st->text, true);
    ws_call_unref(call);
    return NULL;
}

static void delayed_start(struct ws_call *call, const ProtobufCMessage *req)
{
    struct state *st;
    pthread_t t;

    n_started++;
    st = state_new(call, req);
    st->n = parse_long(st->text);
    ws_call_ref(call);
    if (pthread_create(&t, NULL, delayed_thread, call) != 0) {
        ws_call_unref(call);
        ws_call_fail(call, -EAGAIN, NULL);
        return;
    }
    pthread_detach(t);
}

/* ---- /test.Echo/Stats: service names a counter, returned in status. */
static void stats_start(struct ws_call *call, const ProtobufCMessage *req)
{
    const char *s = as_req(req)->service;
    long v = -1;

    if (strcmp(s, "started") == 0)
        v = n_started;
    else if (strcmp(s, "destroyed") == 0)
        v = n_destroyed;
    else if (strcmp(s, "slow_started") == 0)
        v = n_slow_started;
    else if (strcmp(s, "cancelled") == 0)
        v = n_cancelled;
    else if (strcmp(s, "live") == 0)
        v = ws_rpc_server_live_calls(server);
    else if (strcmp(s, "deadline") == 0)
        v = ws_call_deadline_remaining_ms(call) == INT64_MAX
                ? -2
                : (long)ws_call_deadline_remaining_ms(call);
    send_number(call, v, true);
}

/* ---- /test.Echo/Info (google.rpc.ErrorInfo) and /test.Echo/Nested
 * (google.rpc.Status): nested-field validation; answer a count. */
static void info_start(struct ws_call *call, const ProtobufCMessage *req)
{
    send_number(call, (long)((const Google__Rpc__ErrorInfo *)req)->n_metadata, true);
}

static void nested_start(struct ws_call *call, const ProtobufCMessage *req)
{
    send_number(call, (long)((const Google__Rpc__Status *)req)->n_details, true);
}

/* ---- /test.Echo/Big: service "N" answers a string of N bytes; over the
 * message ceiling the handler gets -EFBIG and fails with it. */
static void big_start(struct ws_call *call, const ProtobufCMessage *req)
{
    long n = parse_long(as_req(req)->service);
    char *text;
    int r;

    if (n < 0 || n > 64L * 1024 * 1024) {
        ws_call_fail(call, -WS_ELIMIT, NULL);
        return;
    }
    text = malloc((size_t)n + 1);
    if (!text)
        abort();
    memset(text, 'x', (size_t)n);
    text[n] = '\0';
    r = send_text(call, text, true);
    free(text);
    if (r < 0)
        ws_call_fail(call, r, NULL);
}

/* ---- /test.Echo/FailAfterSend: sends one message and fails at once
 * (the status waits for the send). */
static void fail_after_send_start(struct ws_call *call, const ProtobufCMessage *req)
{
    struct ws_diag d;
    int r;

    (void)req;
    n_started++;
    state_new(call, NULL);
    memset(&d, 0, sizeof(d));
    ws_diag_meta(&d, "step", "after-send");
    send_text(call, "first", false);
    /* A second send while one is in flight is refused. */
    r = send_text(call, "second", false);
    ws_call_fail(call, r == -EBUSY ? -WS_ECONFLICT : -EIO, &d);
}

static const struct ws_rpc_method methods[] = {
    {
        .path = "/test.Echo/Unary",
        .kind = WS_RPC_UNARY,
        .request = &grpc__health__v1__health_check_request__descriptor,
        .on_start = unary_start,
        .on_cancel = on_cancel,
        .on_destroy = on_destroy,
    },
    {
        .path = "/test.Echo/ServerStream",
        .kind = WS_RPC_SERVER_STREAM,
        .request = &grpc__health__v1__health_check_request__descriptor,
        .on_start = stream_start,
        .on_sent = stream_sent,
        .on_cancel = on_cancel,
        .on_destroy = on_destroy,
    },
    {
        .path = "/test.Echo/ClientStream",
        .kind = WS_RPC_CLIENT_STREAM,
        .request = &grpc__health__v1__health_check_request__descriptor,
        .on_start = sum_start,
        .on_message = sum_message,
        .on_cancel = on_cancel,
        .on_destroy = on_destroy,
    },
    {
        .path = "/test.Echo/Bidi",
        .kind = WS_RPC_BIDI,
        .request = &grpc__health__v1__health_check_request__descriptor,
        .on_start = bidi_start,
        .on_message = bidi_message,
        .on_sent = bidi_sent,
        .on_cancel = on_cancel,
        .on_destroy = on_destroy,
    },
    {
        .path = "/test.Echo/Fail",
        .kind = WS_RPC_UNARY,
        .request = &grpc__health__v1__health_check_request__descriptor,
        .on_start = fail_start,
        .on_destroy = on_destroy,
    },
    {
        .path = "/test.Echo/Slow",
        .kind = WS_RPC_UNARY,
        .request = &grpc__health__v1__health_check_request__descriptor,
        .on_start = slow_start,
        .on_cancel = on_cancel,
        .on_destroy = on_destroy,
    },
    {
        .path = "/test.Echo/Delayed",
        .kind = WS_RPC_UNARY,
        .request = &grpc__health__v1__health_check_request__descriptor,
        .on_start = delayed_start,
        .on_cancel = on_cancel,
        .on_destroy = on_destroy,
    },
    {
        .path = "/test.Echo/Stats",
        .kind = WS_RPC_UNARY,
        .request = &grpc__health__v1__health_check_request__descriptor,
        .on_start = stats_start,
    },
    {
        .path = "/test.Echo/Info",
        .kind = WS_RPC_UNARY,
        .request = &google__rpc__error_info__descriptor,
        .on_start = info_start,
    },
    {
        .path = "/test.Echo/Nested",
        .kind = WS_RPC_UNARY,
        .request = &google__rpc__status__descriptor,
        .on_start = nested_start,
    },
    {
        .path = "/test.Echo/Big",
        .kind = WS_RPC_UNARY,
        .request = &grpc__health__v1__health_check_request__descriptor,
        .on_start = big_start,
    },
    {
        .path = "/test.Echo/FailAfterSend",
        .kind = WS_RPC_SERVER_STREAM,
        .request = &grpc__health__v1__health_check_request__descriptor,
        .on_start = fail_after_send_start,
        .on_destroy = on_destroy,
    },
};

int main(int argc, char **argv)
{
    struct ws_rpc_config cfg = {.listen = NULL};
    int grace_ms = 1000, port = 0, sig, r, i;
    sigset_t set;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--listen") == 0)
            cfg.listen = argv[i + 1];
        else if (strcmp(argv[i], "--grace-ms") == 0)
            grace_ms = (int)parse_long(argv[i + 1]);
        else if (strcmp(argv[i], "--max-bytes") == 0)
            cfg.max_message_bytes = (int)parse_long(argv[i + 1]);
        else if (strcmp(argv[i], "--threads") == 0)
            cfg.threads = (int)parse_long(argv[i + 1]);
    }
    if (!cfg.listen) {
        fprintf(stderr, "usage: %s --listen ADDR [--grace-ms N] [--max-bytes N]\n", argv[0]);
        return 2;
    }

    /* Blocked before gRPC starts any thread, so only sigwait sees them. */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    r = ws_rpc_server_new(&cfg, methods, sizeof(methods) / sizeof(methods[0]), &server, &port);
    if (r < 0) {
        fprintf(stderr, "ws_rpc_server_new: %s\n", strerror(-r));
        return 1;
    }
    r = ws_rpc_server_start(server);
    if (r < 0) {
        fprintf(stderr, "ws_rpc_server_start: %s\n", strerror(-r));
        ws_rpc_server_shutdown(server, 0);
        ws_rpc_server_free(server);
        return 1;
    }
    printf("PORT %d\n", port);
    fflush(stdout);

    if (sigwait(&set, &sig) != 0)
        return 1;
    ws_rpc_server_shutdown(server, grace_ms);
    printf("live_calls=%ld started=%ld destroyed=%ld cancelled=%ld\n",
           ws_rpc_server_live_calls(server), (long)n_started, (long)n_destroyed, (long)n_cancelled);
    fflush(stdout);
    ws_rpc_server_free(server);
    return 0;
}
