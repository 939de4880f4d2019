/* The server-wide cap on response bytes waiting for their clients.
 *
 * A call has at most one message in flight (call.c). gRPC's transport
 * holds that message until the client's flow-control window lets it be
 * written, so a client that never reads keeps it, and its handler's state,
 * as long as it likes; many such streams over many connections would grow
 * the process without bound. Every message handed to gRPC is therefore
 * counted here from the batch's start until its completion, in one list
 * ordered by when it was sent. When a new one takes the total past the cap,
 * the calls whose messages have waited longest are cancelled,
 * RESOURCE_EXHAUSTED, until what is left fits: a client that reads sees
 * its message written within a round trip, so the oldest in the list are
 * the ones not reading. Their bytes come back when gRPC completes their
 * batches, which a cancel does at once.
 *
 * A cancel from the server side can carry only a code and a message (no
 * trailing metadata), so the status has no ErrorInfo.
 */
#include "server/rpc/internal.h"

#include <pthread.h>
#include <stdatomic.h>

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
/* Calls with a message in flight, oldest first. */
static struct ws_call *q_head, *q_tail;
/* Bytes in flight, and the part of them whose calls were cancelled here. */
static uint64_t q_bytes, q_doomed;
static uint64_t q_max;
static atomic_uint_least64_t q_evicted;

void ws_rpc_sendq_set_max(uint64_t max)
{
    pthread_mutex_lock(&q_lock);
    q_max = max;
    pthread_mutex_unlock(&q_lock);
}

uint64_t ws_rpc_sendq_bytes(void)
{
    uint64_t n;

    pthread_mutex_lock(&q_lock);
    n = q_bytes;
    pthread_mutex_unlock(&q_lock);
    return n;
}

uint64_t ws_rpc_sendq_evicted(void)
{
    return atomic_load_explicit(&q_evicted, memory_order_relaxed);
}

/* Cancels `v`, whose message has waited since v->queued_ms. gRPC's cancel
 * posts the completions to the queue and runs none of our callbacks here,
 * so it is safe under q_lock; being on the list, v cannot be freed while
 * it is held (its send batch holds a reference until on_send_done or
 * on_status_done, which take q_lock to leave the list). */
static void evict_locked(struct ws_call *v, int64_t now)
{
    v->q_evicted = true;
    q_doomed += v->queued;
    atomic_fetch_add_explicit(&q_evicted, 1, memory_order_relaxed);
    grpc_call_cancel_with_status(v->call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                 "the server's buffer for responses waiting to be read is full, "
                                 "and this stream's response waited longest",
                                 NULL);
    ws_rpc_log(WS_RPC_LOG_INFO, "rpc.send_evicted",
               "\"method\":\"%s\",\"bytes\":%zu,\"waited_ms\":%lld,\"queued\":%llu,\"max\":%llu",
               v->method ? v->method->path : "(unregistered)", v->queued,
               (long long)(now - v->queued_ms), (unsigned long long)q_bytes,
               (unsigned long long)q_max);
}

void ws_rpc_sendq_charge(struct ws_call *c, size_t n)
{
    int64_t now = ws_rpc_now_ms();

    if (!n || c->queued)
        return;
    pthread_mutex_lock(&q_lock);
    c->queued = n;
    c->queued_ms = now;
    c->q_evicted = false;
    c->q_next = NULL;
    c->q_prev = q_tail;
    if (q_tail)
        q_tail->q_next = c;
    else
        q_head = c;
    q_tail = c;
    q_bytes += n;
    /* The newest (c) is never the one cancelled: it has not waited. */
    for (struct ws_call *v = q_head; q_max && v && v != c && q_bytes - q_doomed > q_max;
         v = v->q_next)
        if (!v->q_evicted)
            evict_locked(v, now);
    pthread_mutex_unlock(&q_lock);
}

void ws_rpc_sendq_release(struct ws_call *c)
{
    if (!c->queued)
        return;
    pthread_mutex_lock(&q_lock);
    if (c->q_prev)
        c->q_prev->q_next = c->q_next;
    else
        q_head = c->q_next;
    if (c->q_next)
        c->q_next->q_prev = c->q_prev;
    else
        q_tail = c->q_prev;
    q_bytes -= c->queued;
    if (c->q_evicted)
        q_doomed -= c->queued;
    c->q_prev = c->q_next = NULL;
    c->queued = 0;
    c->q_evicted = false;
    pthread_mutex_unlock(&q_lock);
}
