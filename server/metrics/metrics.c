/* Process-wide metrics and their Prometheus text rendering. See metrics.h
 * for ownership, thread safety and the cardinality bound. */
#include "server/metrics/metrics.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/base/macros.h"
#include "server/base/version.h"

#define LABELS_MAX 2
/* Upper bounds of the latency histograms, seconds (+Inf is implied). */
static const double latency_bounds[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                        0.5,   1,     2.5,  5,     10,   30,  60};
#define BUCKETS WS_ELEMENTSOF(latency_bounds)
/* First size of the rendering buffer; it grows by doubling. */
#define RENDER_INITIAL 8192

struct series {
    char value[LABELS_MAX][WS_METRICS_LABEL_MAX + 1];
    double v;
};

struct family {
    const char *name;
    const char *help;
    const char *type; /* "counter" or "gauge" */
    int n_labels;
    const char *label[LABELS_MAX];
    size_t n;
    struct series series[WS_METRICS_SERIES_MAX];
};

struct histogram {
    const char *name;
    const char *help;
    uint64_t bucket[BUCKETS]; /* non-cumulative; summed when rendered */
    uint64_t count;
    double sum;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

#define FAMILY(n, h, t, k, ...)                                                                    \
    {                                                                                              \
        .name = (n), .help = (h), .type = (t), .n_labels = (k), .label = { __VA_ARGS__ }           \
    }

static struct family opens =
    FAMILY("workspaced_workspace_opens_total",
           "Workspaces.Open calls by provider and outcome (ok or the reason).", "counter", 2,
           "provider", "status");
static struct family closes =
    FAMILY("workspaced_workspace_closes_total", "Workspaces.Close calls by provider and outcome.",
           "counter", 2, "provider", "status");
static struct family evictions =
    FAMILY("workspaced_workspace_evictions_total",
           "Workspaces found evicted (storage gone), by provider.", "counter", 1, "provider");
static struct family expirations = FAMILY(
    "workspaced_workspace_expirations_total",
    "Workspaces closed because their lifetime ran out, by provider.", "counter", 1, "provider");
static struct family cmd_started =
    FAMILY("workspaced_commands_started_total", "Commands started.", "counter", 0, NULL);
static struct family cmd_ended =
    FAMILY("workspaced_commands_ended_total", "Commands ended, by cause.", "counter", 1, "cause");
static struct family stream_bytes = FAMILY(
    "workspaced_stream_bytes_total", "Bytes commands wrote, by stream.", "counter", 1, "stream");
static struct family rejections =
    FAMILY("workspaced_rejections_total", "Calls ended with an error, by ErrorInfo reason.",
           "counter", 1, "reason");
static struct family audit_lost =
    FAMILY("workspaced_audit_records_lost_total",
           "Audit records that could not be appended (disk full, I/O error), by event.", "counter",
           1, "event");
/* The per-tenant gauges' names and labels; their values come from the
 * sources at render time. */
static const struct family active_ws =
    FAMILY("workspaced_active_workspaces", "Open workspaces.", "gauge", 1, "tenant");
static const struct family active_cmd =
    FAMILY("workspaced_active_commands", "Commands running.", "gauge", 1, "tenant");

static struct histogram open_seconds = {.name = "workspaced_workspace_open_seconds",
                                        .help = "Workspaces.Open latency, seconds."};
static struct histogram command_seconds = {.name = "workspaced_command_seconds",
                                           .help = "Command wall-clock duration, seconds."};

static struct {
    ws_metrics_source fn;
    void *ud;
} sources[2];

static unsigned (*conns_open)(void);
static uint64_t (*conns_refused)(void);
static uint64_t (*conns_shed)(void);
static uint64_t (*send_queued)(void);
static uint64_t (*send_evicted)(void);

/* What the sources report while rendering: a copy of each gauge family,
 * filled outside the lock. */
struct ws_metrics_gauges {
    struct family *f;
};

/* Label values end up inside quotes in the text format: keep them to a
 * character set that needs no escaping. */
static void clean_label(char *dst, const char *src)
{
    size_t i;

    if (!src || !*src)
        src = "none";
    for (i = 0; i < WS_METRICS_LABEL_MAX && src[i]; i++) {
        char c = src[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        dst[i] = ok ? c : '_';
    }
    dst[i] = '\0';
}

/* The series for these label values, made if there is room, else the
 * "overflow" one. mu held (or, for a render's gauge copies, the render
 * lock). */
static struct series *series_for(struct family *f, const char *const *values)
{
    char want[LABELS_MAX][WS_METRICS_LABEL_MAX + 1];
    size_t i;
    int k;

    for (k = 0; k < f->n_labels; k++)
        clean_label(want[k], values[k]);
    for (;;) {
        for (i = 0; i < f->n; i++) {
            for (k = 0; k < f->n_labels; k++)
                if (strcmp(f->series[i].value[k], want[k]) != 0)
                    break;
            if (k == f->n_labels)
                return &f->series[i];
        }
        /* The last slot is kept for the overflow series. */
        if (f->n < WS_METRICS_SERIES_MAX - 1 ||
            (f->n == WS_METRICS_SERIES_MAX - 1 && strcmp(want[0], "overflow") == 0)) {
            struct series *s = &f->series[f->n++];
            memcpy(s->value, want, sizeof(s->value));
            s->v = 0;
            return s;
        }
        for (k = 0; k < f->n_labels; k++)
            snprintf(want[k], sizeof(want[k]), "overflow");
    }
}

static void add(struct family *f, double v, const char *l0, const char *l1)
{
    const char *values[LABELS_MAX] = {l0, l1};

    pthread_mutex_lock(&mu);
    series_for(f, values)->v += v;
    pthread_mutex_unlock(&mu);
}

static void observe(struct histogram *h, double seconds)
{
    size_t i;

    if (seconds < 0)
        seconds = 0;
    pthread_mutex_lock(&mu);
    for (i = 0; i < BUCKETS && seconds > latency_bounds[i]; i++)
        ;
    if (i < BUCKETS)
        h->bucket[i]++;
    h->count++;
    h->sum += seconds;
    pthread_mutex_unlock(&mu);
}

void ws_metrics_open(const char *provider, const char *status, int64_t ms)
{
    add(&opens, 1, provider, status);
    observe(&open_seconds, (double)ms / 1000.0);
}

void ws_metrics_close(const char *provider, const char *status)
{
    add(&closes, 1, provider, status);
}

void ws_metrics_evicted(const char *provider)
{
    add(&evictions, 1, provider, NULL);
}

void ws_metrics_expired(const char *provider)
{
    add(&expirations, 1, provider, NULL);
}

void ws_metrics_command_started(void)
{
    add(&cmd_started, 1, NULL, NULL);
}

void ws_metrics_command_ended(const char *cause, uint64_t wall_ms, uint64_t stdout_bytes,
                              uint64_t stderr_bytes, uint64_t pty_bytes)
{
    add(&cmd_ended, 1, cause, NULL);
    add(&stream_bytes, (double)stdout_bytes, "stdout", NULL);
    add(&stream_bytes, (double)stderr_bytes, "stderr", NULL);
    add(&stream_bytes, (double)pty_bytes, "pty", NULL);
    observe(&command_seconds, (double)wall_ms / 1000.0);
}

void ws_metrics_rejected(const char *reason)
{
    add(&rejections, 1, reason, NULL);
}

void ws_metrics_audit_lost(const char *event)
{
    add(&audit_lost, 1, event, NULL);
}

void ws_metrics_set_source(enum ws_metrics_gauge which, ws_metrics_source fn, void *ud)
{
    pthread_mutex_lock(&mu);
    sources[which].fn = fn;
    sources[which].ud = ud;
    pthread_mutex_unlock(&mu);
}

void ws_metrics_set_connections_source(unsigned (*open)(void), uint64_t (*refused)(void),
                                       uint64_t (*shed)(void))
{
    pthread_mutex_lock(&mu);
    conns_open = open;
    conns_refused = refused;
    conns_shed = shed;
    pthread_mutex_unlock(&mu);
}

void ws_metrics_set_send_source(uint64_t (*queued)(void), uint64_t (*evicted)(void))
{
    pthread_mutex_lock(&mu);
    send_queued = queued;
    send_evicted = evicted;
    pthread_mutex_unlock(&mu);
}

void ws_metrics_tenant_gauge(struct ws_metrics_gauges *g, const char *tenant, long value)
{
    const char *values[1] = {tenant};
    struct series *s = series_for(g->f, values);

    if (s)
        s->v += (double)value;
}

/* Asks source `which` for its gauge, into `f` (emptied first). */
static void read_source(enum ws_metrics_gauge which, struct family *f)
{
    ws_metrics_source fn;
    void *ud;

    f->n = 0;
    pthread_mutex_lock(&mu);
    fn = sources[which].fn;
    ud = sources[which].ud;
    pthread_mutex_unlock(&mu);
    if (fn) {
        struct ws_metrics_gauges g = {.f = f};
        fn(ud, &g);
    }
}

/* ---- rendering ---- */

struct buf {
    char *p;
    size_t len, cap;
    bool failed;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (b->failed)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        char *np = realloc(b->p, b->cap * 2);
        if (!np) {
            b->failed = true;
            return;
        }
        b->p = np;
        b->cap *= 2;
    }
}

static void render_family(struct buf *b, const struct family *f)
{
    size_t i;
    int k;

    put(b, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, f->type);
    if (f->n_labels == 0 && f->n == 0) {
        put(b, "%s 0\n", f->name);
        return;
    }
    for (i = 0; i < f->n; i++) {
        put(b, "%s", f->name);
        for (k = 0; k < f->n_labels; k++)
            put(b, "%s%s=\"%s\"", k ? "," : "{", f->label[k], f->series[i].value[k]);
        put(b, "%s %.17g\n", f->n_labels ? "}" : "", f->series[i].v);
    }
}

static void render_histogram(struct buf *b, const struct histogram *h)
{
    uint64_t cum = 0;
    size_t i;

    put(b, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
    for (i = 0; i < BUCKETS; i++) {
        cum += h->bucket[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", h->name, latency_bounds[i], (unsigned long long)cum);
    }
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n", h->name, (unsigned long long)h->count);
    put(b, "%s_sum %.17g\n%s_count %llu\n", h->name, h->sum, h->name, (unsigned long long)h->count);
}

int ws_metrics_render(char **ret_text, size_t *ret_len)
{
    struct buf b = {.p = malloc(RENDER_INITIAL), .cap = RENDER_INITIAL};
    /* Static: a family is large, and renders are serialised below. */
    static pthread_mutex_t render_mu = PTHREAD_MUTEX_INITIALIZER;
    static struct family ws_now, cmd_now;

    if (!b.p)
        return -ENOMEM;
    b.p[0] = '\0';
    pthread_mutex_lock(&render_mu);
    ws_now = active_ws;
    cmd_now = active_cmd;
    /* Outside mu: the sources take the registry's and the exec layer's
     * locks. */
    read_source(WS_METRICS_WORKSPACES, &ws_now);
    read_source(WS_METRICS_COMMANDS, &cmd_now);
    pthread_mutex_lock(&mu);
    unsigned (*open_fn)(void) = conns_open;
    uint64_t (*refused_fn)(void) = conns_refused;
    uint64_t (*shed_fn)(void) = conns_shed;
    uint64_t (*queued_fn)(void) = send_queued;
    uint64_t (*evicted_fn)(void) = send_evicted;
    pthread_mutex_unlock(&mu);
    unsigned conns = open_fn ? open_fn() : 0;
    uint64_t refused = refused_fn ? refused_fn() : 0;
    uint64_t shed = shed_fn ? shed_fn() : 0;
    uint64_t queued = queued_fn ? queued_fn() : 0;
    uint64_t evicted = evicted_fn ? evicted_fn() : 0;
    /* Every tenant that holds workspaces shows its commands, 0 included. */
    for (size_t i = 0; i < ws_now.n; i++) {
        const char *tenant[1] = {ws_now.series[i].value[0]};
        series_for(&cmd_now, tenant);
    }

    pthread_mutex_lock(&mu);
    render_family(&b, &opens);
    render_family(&b, &closes);
    render_family(&b, &evictions);
    render_family(&b, &expirations);
    render_histogram(&b, &open_seconds);
    render_family(&b, &cmd_started);
    render_family(&b, &cmd_ended);
    render_histogram(&b, &command_seconds);
    render_family(&b, &stream_bytes);
    render_family(&b, &rejections);
    render_family(&b, &audit_lost);
    render_family(&b, &ws_now);
    render_family(&b, &cmd_now);
    if (open_fn)
        put(&b,
            "# HELP workspaced_connections Client connections open now.\n"
            "# TYPE workspaced_connections gauge\nworkspaced_connections %u\n",
            conns);
    /* The release this server is (VERSION), as Prometheus' convention
     * for build information: a gauge of 1 with the version as a label. */
    put(&b,
        "# HELP workspaced_build_info The server's release, as the label version.\n"
        "# TYPE workspaced_build_info gauge\nworkspaced_build_info{version=\"%s\"} 1\n",
        WS_VERSION);
    if (refused_fn)
        put(&b,
            "# HELP workspaced_connections_refused_total Connections closed on accept: the "
            "bound (--max-connections) was reached.\n"
            "# TYPE workspaced_connections_refused_total counter\n"
            "workspaced_connections_refused_total %llu\n",
            (unsigned long long)refused);
    if (shed_fn)
        put(&b,
            "# HELP workspaced_connections_shed_total Connections closed on accept because "
            "the server was out of file descriptors.\n"
            "# TYPE workspaced_connections_shed_total counter\n"
            "workspaced_connections_shed_total %llu\n",
            (unsigned long long)shed);
    if (queued_fn)
        put(&b,
            "# HELP workspaced_send_buffer_bytes Bytes of responses handed to the transport "
            "and not yet written to their clients.\n"
            "# TYPE workspaced_send_buffer_bytes gauge\n"
            "workspaced_send_buffer_bytes %llu\n",
            (unsigned long long)queued);
    if (evicted_fn)
        put(&b,
            "# HELP workspaced_send_buffer_evicted_total Calls cancelled because the responses "
            "waiting for their clients were over --max-send-buffer-bytes.\n"
            "# TYPE workspaced_send_buffer_evicted_total counter\n"
            "workspaced_send_buffer_evicted_total %llu\n",
            (unsigned long long)evicted);
    pthread_mutex_unlock(&mu);
    pthread_mutex_unlock(&render_mu);

    if (b.failed) {
        free(b.p);
        return -ENOMEM;
    }
    *ret_text = b.p;
    *ret_len = b.len;
    return 0;
}
