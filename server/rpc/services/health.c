/* grpc.health.v1.Health: SERVING until the server drains, then
 * NOT_SERVING; Watch streams the status and ends at drain. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/health/v1/health.pb-c.h"
#include "server/base/macros.h"
#include "server/rpc/services/internal.h"

typedef Grpc__Health__V1__HealthCheckResponse__ServingStatus ServingStatus;

enum { PHASE_SENDING, PHASE_IDLE, PHASE_FINAL };

struct watcher {
    struct ws_call *call;
    atomic_int phase;
    struct watcher *next;
};

static const char *const known_services[] = {
    "",
    "workspace.v1.Providers",
    "workspace.v1.Workspaces",
    "workspace.v1.FileSystem",
    "workspace.v1.Exec",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
};

static bool known(const char *service)
{
    for (size_t i = 0; i < WS_ELEMENTSOF(known_services); i++)
        if (strcmp(service, known_services[i]) == 0)
            return true;
    return false;
}

static ServingStatus current(struct ws_services *s)
{
    return atomic_load(&s->draining)
               ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
               : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
}

static int send_status(struct ws_call *call, ServingStatus st)
{
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;

    resp.status = st;
    return ws_call_send(call, &resp.base);
}

static void check(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Grpc__Health__V1__HealthCheckRequest *req = (const void *)msg;
    struct ws_services *s = ws_call_method_data(call);
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;

    if (!known(req->service)) {
        ws_call_fail_status(call, WORKSPACE__V1__ERROR_REASON__NO_SUCH_SERVICE, "unknown service");
        return;
    }
    resp.status = current(s);
    ws_call_finish(call, &resp.base);
}

static void unlink_watcher(struct ws_services *s, struct watcher *w)
{
    pthread_mutex_lock(&s->watch_lock);
    for (struct watcher **p = &s->watchers; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    pthread_mutex_unlock(&s->watch_lock);
}

/* Sends the final NOT_SERVING if the stream is idle; the send's completion
 * then ends the call. */
static void watcher_drain(struct watcher *w)
{
    int idle = PHASE_IDLE;

    if (atomic_compare_exchange_strong(&w->phase, &idle, PHASE_FINAL) &&
        send_status(w->call, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING) <
            0)
        ws_call_finish(w->call, NULL);
}

static void watch(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Grpc__Health__V1__HealthCheckRequest *req = (const void *)msg;
    struct ws_services *s = ws_call_method_data(call);
    struct watcher *w;

    w = calloc(1, sizeof(*w));
    if (!w) {
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    w->call = call;
    atomic_init(&w->phase, PHASE_SENDING);
    ws_call_set_data(call, w);
    pthread_mutex_lock(&s->watch_lock);
    w->next = s->watchers;
    s->watchers = w;
    pthread_mutex_unlock(&s->watch_lock);
    if (send_status(
            call, known(req->service)
                      ? current(s)
                      : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN) <
        0)
        ws_call_finish(call, NULL);
}

static void watch_sent(struct ws_call *call, bool ok)
{
    struct watcher *w = ws_call_data(call);
    struct ws_services *s = ws_call_method_data(call);

    if (!ok)
        return;
    if (atomic_load(&w->phase) == PHASE_FINAL) {
        ws_call_finish(call, NULL);
        return;
    }
    atomic_store(&w->phase, PHASE_IDLE);
    if (atomic_load(&s->draining))
        watcher_drain(w);
}

static void watch_destroy(struct ws_call *call)
{
    struct watcher *w = ws_call_data(call);

    if (!w)
        return;
    unlink_watcher(ws_call_method_data(call), w);
    free(w);
}

void ws_services_health_drain(struct ws_services *s)
{
    struct ws_call **calls = NULL;
    size_t n = 0, cap = 0;

    /* Collect references under the list lock, act outside it: the calls'
     * own locks are taken by the sends. */
    pthread_mutex_lock(&s->watch_lock);
    for (struct watcher *w = s->watchers; w; w = w->next) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct ws_call **tmp = realloc(calls, ncap * sizeof(*calls));

            if (!tmp)
                break; /* the rest end with the server's own shutdown */
            calls = tmp;
            cap = ncap;
        }
        ws_call_ref(w->call);
        calls[n++] = w->call;
    }
    pthread_mutex_unlock(&s->watch_lock);
    for (size_t i = 0; i < n; i++) {
        struct watcher *w = ws_call_data(calls[i]);

        if (w)
            watcher_drain(w);
        ws_call_unref(calls[i]);
    }
    free(calls);
}

size_t ws_services_health(struct ws_services *s, struct ws_rpc_method *out)
{
    static const struct ws_rpc_method methods[] = {
        WS_SERVICES_UNARY("/grpc.health.v1.Health/Check",
                          &grpc__health__v1__health_check_request__descriptor, check),
        WS_SERVICES_METHOD("/grpc.health.v1.Health/Watch", WS_RPC_SERVER_STREAM,
                           &grpc__health__v1__health_check_request__descriptor, .on_start = watch,
                           .on_sent = watch_sent, .on_destroy = watch_destroy),
    };

    return ws_services_add_methods(s, methods, WS_ELEMENTSOF(methods), out);
}
