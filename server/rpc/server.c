/* The gRPC server: one completion queue served by N threads, armed
 * requests for every registered method (and for unregistered ones, which
 * are answered UNIMPLEMENTED), and the graceful drain.
 *
 * Tags on the queue are struct ws_tag embedded in their owner: a call
 * object's accept tag and batch tags, the server's shutdown tag. The CQ
 * threads only dispatch; they never block on anything but the queue.
 */
#include "server/base/time.h"
#include "server/metrics/metrics.h"
#include "server/rpc/conncap.h"
#include "server/rpc/internal.h"
#include "server/rpc/listen.h"

#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <grpc/grpc_security.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>
#include <openssl/crypto.h>

/* Most CQ threads started, whatever the configuration asks. */
#define THREADS_MAX 64
/* Flow-control window of one stream: what a sender may have in flight. */
#define WS_RPC_STREAM_WINDOW (2 * 1024 * 1024)
/* How often a drain that is still waiting says so. */
#define DRAIN_LOG_PERIOD_MS 5000
/* How long a drain with no call left waits for clients to go away. */
#define DRAIN_IDLE_MS 200

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int log_level = WS_RPC_LOG_ERROR;

static void log_init(void)
{
    const char *e = getenv("WS_RPC_LOG");

    if (!e)
        return;
    if (strcmp(e, "debug") == 0)
        log_level = WS_RPC_LOG_DEBUG;
    else if (strcmp(e, "info") == 0)
        log_level = WS_RPC_LOG_INFO;
}

bool ws_rpc_log_enabled(int level)
{
    pthread_once(&log_once, log_init);
    return level <= log_level;
}

void ws_rpc_log(int level, const char *event, const char *fmt, ...)
{
    char fields[1024];
    va_list ap;
    int n;

    if (!ws_rpc_log_enabled(level))
        return;
    fields[0] = '{';
    va_start(ap, fmt);
    n = vsnprintf(fields + 1, sizeof(fields) - 2, fmt ? fmt : "", ap);
    va_end(ap);
    /* A cut line would not parse: drop the fields rather than send half. */
    if (n < 0 || (size_t)n >= sizeof(fields) - 2)
        n = 0;
    fields[1 + n] = '}';
    fields[2 + n] = '\0';
    ws_log_json(level, event, fields);
}

/* gRPC's own messages (gpr_log) go into the JSON log too, as event
 * "grpc.log", so every line on stderr parses. Its debug chatter is left
 * to GRPC_VERBOSITY as usual. */
static void gpr_log_to_json(gpr_log_func_args *a)
{
    char msg[WS_LOG_LINE_MAX / 2], file[256], fields[WS_LOG_LINE_MAX];
    int level = a->severity == GPR_LOG_SEVERITY_ERROR  ? WS_RPC_LOG_ERROR
                : a->severity == GPR_LOG_SEVERITY_INFO ? WS_RPC_LOG_INFO
                                                       : WS_RPC_LOG_DEBUG;

    ws_log_escape(msg, sizeof(msg), a->message);
    ws_log_escape(file, sizeof(file), a->file);
    snprintf(fields, sizeof(fields), "{\"file\":\"%s\",\"line\":%d,\"message\":\"%s\"}", file,
             a->line, msg);
    ws_log_json(level, "grpc.log", fields);
}

static void *cq_thread(void *arg)
{
    struct ws_rpc_server *s = arg;

    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        struct ws_tag *tag;

        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        tag = ev.tag;
        WS_RPC_HANDOFF_ACQUIRE(tag);
        tag->done(tag, ev.success != 0);
    }
    return NULL;
}

static void on_accept(struct ws_tag *t, bool ok);

/* Hands gRPC a fresh call object to fill with the next call to method
 * `index` (n_methods: any unregistered method). */
static int arm(struct ws_rpc_server *s, size_t index)
{
    struct ws_call *c;
    grpc_call_error e;

    c = ws_rpc_call_alloc(s, index);
    if (!c)
        return -ENOMEM;
    c->accept_tag.done = on_accept;
    WS_RPC_HANDOFF_RELEASE(&c->accept_tag);
    if (index < s->n_methods)
        e = grpc_server_request_registered_call(s->server, s->registered[index], &c->call,
                                                &c->deadline, &c->request_md, NULL, s->cq, s->cq,
                                                &c->accept_tag);
    else
        e = grpc_server_request_call(s->server, &c->call, &c->details, &c->request_md, s->cq, s->cq,
                                     &c->accept_tag);
    if (e != GRPC_CALL_OK) {
        ws_rpc_log(WS_RPC_LOG_ERROR, "rpc.request_failed", "\"error\":\"%s\"",
                   grpc_call_error_to_string(e));
        ws_rpc_call_discard(c);
        return -EIO;
    }
    return 0;
}

static void on_accept(struct ws_tag *t, bool ok)
{
    struct ws_call *c = ws_container_of(t, struct ws_call, accept_tag);
    struct ws_rpc_server *s = c->server;
    bool draining;

    pthread_mutex_lock(&s->mu);
    draining = s->shutdown_called;
    if (ok && ++s->live_calls > s->burst_peak)
        s->burst_peak = s->live_calls;
    pthread_mutex_unlock(&s->mu);

    if (!ok) {
        /* The server is shutting down and gRPC hands back the requests it
         * still held: nothing to re-arm. */
        if (!draining)
            ws_rpc_log(WS_RPC_LOG_ERROR, "rpc.request_failed", "\"error\":\"not ok\"");
        ws_rpc_call_discard(c);
        return;
    }
    c->accepted = true;
    /* Re-arm first, so the next call to this method is not kept waiting
     * behind this one's handler. After shutdown gRPC fails the request at
     * once and it comes back here as !ok. */
    if (!draining)
        arm(s, c->method_index);
    ws_rpc_call_accepted(c);
}

void ws_rpc_server_call_gone(struct ws_rpc_server *s, bool accepted)
{
    pthread_mutex_lock(&s->mu);
    s->objects--;
    if (accepted)
        s->live_calls--;
    if (s->shutdown_called)
        pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
}

static void on_shutdown_done(struct ws_tag *t, bool ok)
{
    struct ws_rpc_server *s = ws_container_of(t, struct ws_rpc_server, shutdown_tag);

    ws_rpc_log(WS_RPC_LOG_DEBUG, "rpc.shutdown_notified", "\"ok\":%d", ok);
    pthread_mutex_lock(&s->mu);
    s->shutdown_notified = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
}

long ws_rpc_server_live_calls(struct ws_rpc_server *s)
{
    long n;

    pthread_mutex_lock(&s->mu);
    n = s->live_calls;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Waits on s->cond (s->mu held) until `deadline_ms` on the monotonic clock;
 * false once it has passed. */
static bool wait_until(struct ws_rpc_server *s, int64_t deadline_ms)
{
    struct timespec ts;

    if (ws_mono_ms() >= deadline_ms)
        return false;
    ts.tv_sec = deadline_ms / 1000;
    ts.tv_nsec = (deadline_ms % 1000) * 1000000;
    pthread_cond_timedwait(&s->cond, &s->mu, &ts);
    return true;
}

/* Shuts down a server whose CQ threads are not running, serving the queue
 * from the calling thread. Calls grpc_server_shutdown_and_notify itself. */
static void teardown_inline(struct ws_rpc_server *s)
{
    grpc_event ev;
    bool done = false;

    WS_RPC_HANDOFF_RELEASE(&s->shutdown_tag);
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
    grpc_server_cancel_all_calls(s->server);
    while (!done) {
        /* Bounded: the last call object may go on a handler's thread. */
        ev = grpc_completion_queue_next(
            s->cq,
            gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(100, GPR_TIMESPAN)),
            NULL);
        if (ev.type == GRPC_OP_COMPLETE) {
            WS_RPC_HANDOFF_ACQUIRE(ev.tag);
            ((struct ws_tag *)ev.tag)->done(ev.tag, ev.success != 0);
        }
        pthread_mutex_lock(&s->mu);
        done = s->shutdown_notified && s->objects == 0;
        pthread_mutex_unlock(&s->mu);
    }
    grpc_completion_queue_shutdown(s->cq);
    do {
        ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_OP_COMPLETE) {
            WS_RPC_HANDOFF_ACQUIRE(ev.tag);
            ((struct ws_tag *)ev.tag)->done(ev.tag, ev.success != 0);
        }
    } while (ev.type != GRPC_QUEUE_SHUTDOWN);
    grpc_server_destroy(s->server);
    ws_metrics_set_connections_source(NULL, NULL, NULL);
    ws_metrics_set_send_source(NULL, NULL);
    ws_conncap_release();
    s->server = NULL;
    grpc_completion_queue_destroy(s->cq);
    s->cq = NULL;
}

static void server_release(struct ws_rpc_server *s)
{
    ws_rpc_auth_free(s->auth);
    free(s->registered);
    free(s->threads);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mu);
    free(s);
    grpc_shutdown();
}

/* Longest PEM file read (a certificate chain, a CA bundle). */
#define PEM_MAX (1024 * 1024)

/* Reads a whole PEM file into a malloc'ed string. */
static int read_pem(const char *path, char **ret, char *why, size_t why_len)
{
    FILE *f = fopen(path, "re");
    char *buf;
    size_t n;

    if (!f) {
        int e = errno;
        snprintf(why, why_len, "%s: %s", path, strerror(e));
        return -e;
    }
    buf = malloc(PEM_MAX + 1);
    if (!buf) {
        fclose(f);
        return -ENOMEM;
    }
    n = fread(buf, 1, PEM_MAX + 1, f);
    fclose(f);
    if (n == 0 || n > PEM_MAX) {
        snprintf(why, why_len, "%s: empty or larger than %d bytes", path, PEM_MAX);
        free(buf);
        return -EINVAL;
    }
    buf[n] = '\0';
    *ret = buf;
    return 0;
}

/* The server credentials: TLS (with required, verified client certificates
 * when a client CA is given) or insecure, with the auth processor when the
 * server authenticates. */
static int make_creds(struct ws_rpc_server *s, const struct ws_rpc_config *cfg,
                      grpc_server_credentials **ret, char *why, size_t why_len)
{
    char *cert = NULL, *key = NULL, *ca = NULL;
    grpc_server_credentials *creds = NULL;
    int r = 0;

    if (cfg->tokens_file || cfg->tls_client_ca || s->is_unix) {
        r = ws_rpc_auth_new(cfg->tokens_file, cfg->tls_client_ca != NULL, &s->auth, why, why_len);
        if (r < 0)
            return r;
        if (s->is_unix)
            ws_rpc_auth_use_peers(s->auth, cfg->peer_tenant, cfg->peer_ud);
    }
    if (cfg->tls_cert) {
        grpc_ssl_pem_key_cert_pair pair;
        grpc_ssl_server_certificate_config *sc;
        grpc_ssl_server_credentials_options *opts;

        if ((r = read_pem(cfg->tls_cert, &cert, why, why_len)) < 0 ||
            (r = read_pem(cfg->tls_key, &key, why, why_len)) < 0 ||
            (cfg->tls_client_ca && (r = read_pem(cfg->tls_client_ca, &ca, why, why_len)) < 0))
            goto out;
        pair.private_key = key;
        pair.cert_chain = cert;
        sc = grpc_ssl_server_certificate_config_create(ca, &pair, 1);
        opts = grpc_ssl_server_credentials_create_options_using_config(
            ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            sc);
        creds = grpc_ssl_server_credentials_create_with_options(opts);
    } else {
        creds = grpc_insecure_server_credentials_create();
    }
    if (!creds) {
        snprintf(why, why_len, "the TLS certificate or key was not accepted");
        r = -EINVAL;
        goto out;
    }
    if (s->auth)
        ws_rpc_auth_install(s->auth, creds);
    *ret = creds;
out:
    if (key)
        OPENSSL_cleanse(key, strlen(key));
    free(cert);
    free(key);
    free(ca);
    return r;
}

int ws_rpc_server_reload_tokens(struct ws_rpc_server *s, char *why, size_t why_len)
{
    int n;

    if (!s || !s->auth)
        return 0;
    n = ws_rpc_auth_reload(s->auth, why, why_len);
    if (n < 0)
        ws_rpc_log(WS_RPC_LOG_ERROR, "rpc.tokens_reload_failed", "\"why\":\"%s\"", why);
    else
        ws_rpc_log(WS_RPC_LOG_ERROR, "rpc.tokens_reloaded", "\"tokens\":%d", n);
    return n;
}

static int check_config(const struct ws_rpc_config *cfg, const struct ws_rpc_method *methods,
                        size_t n_methods)
{
    size_t i;

    if (!cfg || !cfg->listen || !cfg->listen[0] || cfg->threads < 0 || cfg->max_message_bytes < 0 ||
        cfg->max_streams_per_connection < 0 || cfg->memory_quota_bytes < 0 ||
        cfg->max_send_buffer_bytes < 0 || cfg->max_connections > WS_RPC_MAX_CONNECTIONS_MAX ||
        (n_methods && !methods) || !cfg->tls_cert != !cfg->tls_key ||
        (cfg->tls_client_ca && !cfg->tls_cert))
        return -EINVAL;
    for (i = 0; i < n_methods; i++) {
        const struct ws_rpc_method *m = &methods[i];
        if (!m->path || m->path[0] != '/' || !m->request || !m->on_start)
            return -EINVAL;
        if (m->kind != WS_RPC_UNARY && m->kind != WS_RPC_SERVER_STREAM &&
            m->kind != WS_RPC_CLIENT_STREAM && m->kind != WS_RPC_BIDI)
            return -EINVAL;
    }
    return 0;
}

_Static_assert(WS_RPC_MAX_CONNECTIONS_MAX == WS_CONNCAP_MAX, "one largest bound");

/* The connection bound when none is set: half the open-file limit, so
 * the other half stays for workspaces, commands and the state directory. */
static unsigned default_max_connections(void)
{
    struct rlimit rl;
    rlim_t n = WS_CONNCAP_MAX;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        n = rl.rlim_cur / 2;
    if (n < WS_RPC_MAX_CONNECTIONS_MIN)
        n = WS_RPC_MAX_CONNECTIONS_MIN;
    return n > WS_CONNCAP_MAX ? WS_CONNCAP_MAX : (unsigned)n;
}

/* The socket path of a "unix:PATH" or "unix:///PATH" address. */
static const char *unix_path(const char *listen)
{
    const char *p = listen + strlen("unix:");
    return strncmp(p, "//", 2) == 0 ? p + 2 : p;
}

int ws_rpc_server_new(const struct ws_rpc_config *cfg, const struct ws_rpc_method *methods,
                      size_t n_methods, struct ws_rpc_server **ret_server, int *ret_port)
{
    struct ws_rpc_server *s = NULL;
    grpc_server_credentials *creds;
    pthread_condattr_t cattr;
    grpc_channel_args args;
    grpc_arg arg[12];
    grpc_resource_quota *quota;
    size_t i;
    long ncpu;
    int r, port, keepalive;

    r = check_config(cfg, methods, n_methods);
    if (r < 0 || !ret_server)
        return r < 0 ? r : -EINVAL;

    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->registered = calloc(n_methods ? n_methods : 1, sizeof(*s->registered));
    if (!s->registered) {
        free(s);
        return -ENOMEM;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cond, &cattr);
    pthread_condattr_destroy(&cattr);
    s->methods = methods;
    s->n_methods = n_methods;
    s->shutdown_tag.done = on_shutdown_done;
    s->max_message_bytes =
        cfg->max_message_bytes > 0 ? cfg->max_message_bytes : WS_RPC_DEFAULT_MAX_MESSAGE;
    ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    s->n_threads = cfg->threads > 0 ? cfg->threads : (ncpu > 2 ? (int)ncpu : 2);
    if (s->n_threads > THREADS_MAX)
        s->n_threads = THREADS_MAX;
    s->is_unix = strncmp(cfg->listen, "unix", 4) == 0;
    ws_rpc_streams_set_max(cfg->tenant_max_streams);
    ws_rpc_sendq_set_max(cfg->max_send_buffer_bytes > 0 ? (uint64_t)cfg->max_send_buffer_bytes
                                                        : (uint64_t)WS_RPC_SEND_BUFFER_DEFAULT);
    s->insecure = !s->is_unix && cfg->insecure_loopback && !cfg->tokens_file && !cfg->tls_client_ca;

    gpr_set_log_function(gpr_log_to_json);
    grpc_init();

    memset(arg, 0, sizeof(arg));
    arg[0].type = GRPC_ARG_INTEGER;
    arg[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    arg[0].value.integer = s->max_message_bytes;
    arg[1].type = GRPC_ARG_INTEGER;
    arg[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    arg[1].value.integer = s->max_message_bytes;
    /* A fixed flow-control window per stream (no BDP growth) bounds what
     * a client streaming a large write can make the server buffer. */
    arg[2].type = GRPC_ARG_INTEGER;
    arg[2].key = (char *)GRPC_ARG_HTTP2_BDP_PROBE;
    arg[2].value.integer = 0;
    arg[3].type = GRPC_ARG_INTEGER;
    arg[3].key = (char *)GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES;
    arg[3].value.integer = WS_RPC_STREAM_WINDOW;
    args.num_args = 4;
    /* Keepalive: a client that vanished without closing its connection (a
     * host gone, a cable pulled) is noticed within two intervals, so its
     * commands are cancelled and their process trees killed. Clients may
     * ping as often as the server does. */
    keepalive = cfg->keepalive_ms ? cfg->keepalive_ms : WS_RPC_KEEPALIVE_MS_DEFAULT;
    if (keepalive > 0) {
        if (keepalive < WS_RPC_KEEPALIVE_MS_MIN)
            keepalive = WS_RPC_KEEPALIVE_MS_MIN;
        arg[4].type = GRPC_ARG_INTEGER;
        arg[4].key = (char *)GRPC_ARG_KEEPALIVE_TIME_MS;
        arg[4].value.integer = keepalive;
        arg[5].type = GRPC_ARG_INTEGER;
        arg[5].key = (char *)GRPC_ARG_KEEPALIVE_TIMEOUT_MS;
        arg[5].value.integer = keepalive;
        arg[6].type = GRPC_ARG_INTEGER;
        arg[6].key = (char *)GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS;
        arg[6].value.integer = 1;
        arg[7].type = GRPC_ARG_INTEGER;
        arg[7].key = (char *)GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS;
        arg[7].value.integer = keepalive;
        arg[8].type = GRPC_ARG_INTEGER;
        arg[8].key = (char *)GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA;
        arg[8].value.integer = 0;
        args.num_args = 9;
    }
    /* Transport limits (see struct ws_rpc_config). */
    arg[args.num_args].type = GRPC_ARG_INTEGER;
    arg[args.num_args].key = (char *)GRPC_ARG_MAX_CONCURRENT_STREAMS;
    arg[args.num_args].value.integer = cfg->max_streams_per_connection > 0
                                           ? cfg->max_streams_per_connection
                                           : WS_RPC_MAX_STREAMS_DEFAULT;
    args.num_args++;
    quota = grpc_resource_quota_create("workspaced");
    grpc_resource_quota_resize(quota,
                               (size_t)(cfg->memory_quota_bytes > 0 ? cfg->memory_quota_bytes
                                                                    : WS_RPC_MEMORY_QUOTA_DEFAULT));
    arg[args.num_args].type = GRPC_ARG_POINTER;
    arg[args.num_args].key = (char *)GRPC_ARG_RESOURCE_QUOTA;
    arg[args.num_args].value.pointer.p = quota;
    arg[args.num_args].value.pointer.vtable = grpc_resource_quota_arg_vtable();
    args.num_args++;
    args.args = arg;
    s->server = grpc_server_create(&args, NULL);
    /* The server holds its own reference now. */
    grpc_resource_quota_unref(quota);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);

    for (i = 0; i < n_methods; i++) {
        s->registered[i] =
            grpc_server_register_method(s->server, methods[i].path, NULL, GRPC_SRM_PAYLOAD_NONE, 0);
        if (!s->registered[i]) {
            /* gRPC refuses a path registered twice. */
            r = -EINVAL;
            goto fail;
        }
    }

    char why_local[256];
    char *why = cfg->why ? cfg->why : why_local;
    size_t why_len = cfg->why ? cfg->why_len : sizeof(why_local);
    why[0] = '\0';
    r = make_creds(s, cfg, &creds, why, why_len);
    if (r < 0)
        goto fail;
    if (s->is_unix &&
        (r = ws_listen_prepare_unix(unix_path(cfg->listen), NULL, why, why_len)) < 0) {
        grpc_server_credentials_release(creds);
        goto fail;
    }
    port = grpc_server_add_http2_port(s->server, cfg->listen, creds);
    grpc_server_credentials_release(creds);
    if (port <= 0) {
        ws_rpc_log(WS_RPC_LOG_ERROR, "rpc.bind_failed", "\"listen\":\"%s\"", cfg->listen);
        r = -EADDRNOTAVAIL;
        goto fail;
    }
    /* Bound under the process's umask; nobody connects before the server
     * starts, so the modes are right before the first accept. */
    if (s->is_unix && (r = ws_listen_secure_unix(unix_path(cfg->listen), NULL, why, why_len)) < 0)
        goto fail;

    unsigned max_conns = cfg->max_connections ? cfg->max_connections : default_max_connections();
    r = ws_conncap_guard(s->is_unix ? 0 : port, s->is_unix ? unix_path(cfg->listen) : NULL,
                         max_conns);
    if (r < 0) {
        snprintf(why, why_len, "cannot bound the connections on '%s': %s", cfg->listen,
                 strerror(-r));
        goto fail;
    }

    ws_metrics_set_connections_source(ws_conncap_open, ws_conncap_refused, ws_conncap_shed);
    ws_metrics_set_send_source(ws_rpc_sendq_bytes, ws_rpc_sendq_evicted);

    ws_rpc_log(WS_RPC_LOG_INFO, "rpc.listen",
               "\"port\":%d,\"methods\":%zu,\"threads\":%d,\"max_connections\":%u",
               s->is_unix ? 0 : port, n_methods, s->n_threads, max_conns);
    *ret_server = s;
    if (ret_port)
        *ret_port = s->is_unix ? 0 : port;
    return 0;

fail:
    pthread_mutex_lock(&s->mu);
    s->shutdown_called = true;
    pthread_mutex_unlock(&s->mu);
    teardown_inline(s);
    server_release(s);
    return r;
}

/* After a burst of calls (held streams, floods of calls) the allocator
 * keeps what they freed: every thread's arena stays at its high-water
 * mark, hundreds of MiB after a few hundred held streams. Once a second
 * this thread looks at the calls in flight: when a burst of at least
 * TRIM_BURST_CALLS has come down to a quarter, and again when the last of
 * it is gone, the free memory goes back to the kernel (malloc_trim). A
 * server that never holds that many calls at once is never trimmed, so a
 * steady load does not pay for memory it would take back at once. Calls
 * cancelled by the send buffer's cap (sendq.c) free what a burst of
 * stalled streams took without ending the burst: a tick with no new such
 * cancel after some trims too. */
#define TRIM_BURST_CALLS 64
#define TRIM_TICK_MS     1000

/* How often a server without authentication on TCP says so again; the
 * trimmer's tick repeats it. */
#define INSECURE_WARN_MS 60000

/* At the error level, the one every log shows: a warning an operator can
 * turn off by configuration would not do its job. */
static void warn_insecure(void)
{
    ws_rpc_log(WS_RPC_LOG_ERROR, "rpc.insecure_loopback",
               "\"message\":\"serving TCP without authentication (--insecure-loopback): every "
               "local user and every box sharing this host's network can act as the default "
               "tenant; for development only\"");
}

static void *trim_thread(void *arg)
{
    struct ws_rpc_server *s = arg;
    bool tail = false; /* trimmed with calls of the burst still live */
    uint64_t evicted_seen = 0, evicted_trimmed = 0;
    int64_t warn_at = ws_mono_ms() + INSECURE_WARN_MS;

    pthread_mutex_lock(&s->mu);
    while (!s->shutdown_called) {
        int64_t next = ws_mono_ms() + TRIM_TICK_MS;
        while (!s->shutdown_called && wait_until(s, next))
            ;
        if (s->shutdown_called)
            break;
        if (s->insecure && ws_mono_ms() >= warn_at) {
            warn_at += INSECURE_WARN_MS;
            pthread_mutex_unlock(&s->mu);
            warn_insecure();
            pthread_mutex_lock(&s->mu);
        }
        long live = s->live_calls, peak = s->burst_peak;
        uint64_t evicted = ws_rpc_sendq_evicted();
        bool quiet = evicted == evicted_seen && evicted != evicted_trimmed;
        bool trim = (peak >= TRIM_BURST_CALLS && live <= peak / 4) || (tail && live == 0) || quiet;
        evicted_seen = evicted;
        if (!trim)
            continue;
        evicted_trimmed = evicted;
        tail = live > 0;
        s->burst_peak = live;
        pthread_mutex_unlock(&s->mu);
        int64_t t0 = ws_mono_ms();
        malloc_trim(0);
        ws_rpc_log(WS_RPC_LOG_INFO, "rpc.heap_trimmed",
                   "\"burst_calls\":%ld,\"live_calls\":%ld,\"ms\":%lld", peak, live,
                   (long long)(ws_mono_ms() - t0));
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int ws_rpc_server_start(struct ws_rpc_server *s)
{
    size_t i;
    int k, r = 0, e;

    if (!s || s->started)
        return -EINVAL;
    s->threads = calloc((size_t)s->n_threads, sizeof(*s->threads));
    if (!s->threads)
        return -ENOMEM;
    grpc_server_start(s->server);
    s->started = true;
    if (s->insecure)
        warn_insecure();

    for (i = 0; i <= s->n_methods; i++)
        for (k = 0; k < WS_RPC_REQUESTS_PER_METHOD; k++)
            if (arm(s, i) < 0 && r == 0)
                r = -ENOMEM;

    for (k = 0; k < s->n_threads; k++) {
        e = pthread_create(&s->threads[k], NULL, cq_thread, s);
        if (e != 0) {
            if (r == 0)
                r = -e;
            break;
        }
        s->threads_running++;
    }
    if (r == 0) {
        e = pthread_create(&s->trimmer, NULL, trim_thread, s);
        if (e != 0)
            r = -e;
        else
            s->trimmer_running = true;
    }
    return r;
}

void ws_rpc_server_shutdown(struct ws_rpc_server *s, int grace_ms)
{
    int64_t t0, deadline, next_log, idle_deadline;
    int k;

    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    if (s->shutdown_called) {
        pthread_mutex_unlock(&s->mu);
        return;
    }
    s->shutdown_called = true;
    pthread_cond_broadcast(&s->cond); /* the trimmer stops */
    ws_rpc_log(WS_RPC_LOG_INFO, "rpc.drain", "\"live_calls\":%ld,\"grace_ms\":%d", s->live_calls,
               grace_ms);
    pthread_mutex_unlock(&s->mu);
    if (s->trimmer_running) {
        pthread_join(s->trimmer, NULL);
        s->trimmer_running = false;
    }

    if (s->threads_running == 0) {
        teardown_inline(s);
        s->shut_down = true;
        return;
    }

    t0 = ws_mono_ms();
    deadline = t0 + (grace_ms > 0 ? grace_ms : 0);
    WS_RPC_HANDOFF_RELEASE(&s->shutdown_tag);
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);

    /* Once no call is left, the tag may still wait for idle clients to
     * acknowledge the GOAWAY ping, which a C-core client with no call in
     * progress answers only when its backup poller runs (seconds later):
     * after a short settling time, drop them rather than sit out the
     * grace period. */
    pthread_mutex_lock(&s->mu);
    idle_deadline = -1;
    while (!s->shutdown_notified) {
        int64_t until = deadline;
        if (s->live_calls == 0) {
            if (idle_deadline < 0)
                idle_deadline = ws_mono_ms() + DRAIN_IDLE_MS;
            if (idle_deadline < until)
                until = idle_deadline;
        } else {
            idle_deadline = -1;
        }
        if (!wait_until(s, until))
            break;
    }
    if (!s->shutdown_notified) {
        ws_rpc_log(WS_RPC_LOG_INFO, "rpc.drain_cancel", "\"live_calls\":%ld", s->live_calls);
        pthread_mutex_unlock(&s->mu);
        /* Handlers learn of it through RECV_CLOSE_ON_SERVER: on_cancel. */
        grpc_server_cancel_all_calls(s->server);
        pthread_mutex_lock(&s->mu);
    }
    /* gRPC posts the tag once every channel, and so every call, is gone;
     * the call objects follow as their last references drop. */
    next_log = ws_mono_ms() + DRAIN_LOG_PERIOD_MS;
    while (!s->shutdown_notified || s->objects > 0) {
        if (!wait_until(s, next_log)) {
            ws_rpc_log(WS_RPC_LOG_ERROR, "rpc.drain_waiting", "\"live_calls\":%ld,\"objects\":%ld",
                       s->live_calls, s->objects);
            next_log = ws_mono_ms() + DRAIN_LOG_PERIOD_MS;
        }
    }
    pthread_mutex_unlock(&s->mu);

    grpc_completion_queue_shutdown(s->cq);
    for (k = 0; k < s->threads_running; k++)
        pthread_join(s->threads[k], NULL);
    s->threads_running = 0;
    grpc_server_destroy(s->server);
    s->server = NULL;
    grpc_completion_queue_destroy(s->cq);
    s->cq = NULL;
    s->shut_down = true;
    ws_rpc_log(WS_RPC_LOG_INFO, "rpc.stopped", "\"ms\":%lld", (long long)(ws_mono_ms() - t0));
}

void ws_rpc_server_free(struct ws_rpc_server *s)
{
    if (!s)
        return;
    if (!s->shut_down)
        ws_rpc_server_shutdown(s, 0);
    server_release(s);
}
