#include "server/registry/requests.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/registry/registry.h"

struct entry {
    bool used;
    bool pending;
    int64_t began_ms;
    char tenant[WS_TENANT_MAX + 1];
    char id[WS_REQUEST_ID_MAX + 1];
    uint8_t hash[WS_REQUEST_HASH_LEN];
    char ws_id[WS_REQUEST_WS_ID_MAX];
};

/* A ring in the order entries began: the oldest is overwritten first. */
struct ws_requests {
    pthread_mutex_t lock;
    struct entry *ring;
    size_t next;
};

int ws_requests_new(struct ws_requests **ret)
{
    struct ws_requests *q = calloc(1, sizeof(*q));

    if (!q)
        return -ENOMEM;
    q->ring = calloc(WS_REQUESTS_MAX, sizeof(*q->ring));
    if (!q->ring) {
        free(q);
        return -ENOMEM;
    }
    pthread_mutex_init(&q->lock, NULL);
    *ret = q;
    return 0;
}

void ws_requests_free(struct ws_requests *q)
{
    if (!q)
        return;
    pthread_mutex_destroy(&q->lock);
    free(q->ring);
    free(q);
}

static struct entry *find(struct ws_requests *q, const char *tenant, const char *id, int64_t now_ms)
{
    for (size_t i = 0; i < WS_REQUESTS_MAX; i++) {
        struct entry *e = &q->ring[i];

        if (!e->used)
            continue;
        if (!e->pending && now_ms - e->began_ms > WS_REQUESTS_WINDOW_MS) {
            e->used = false; /* out of the window */
            continue;
        }
        if (strcmp(e->id, id) == 0 && strcmp(e->tenant, tenant) == 0)
            return e;
    }
    return NULL;
}

int ws_requests_begin(struct ws_requests *q, const char *tenant, const char *id,
                      const uint8_t *hash, int64_t now_ms, char *ret_ws_id,
                      enum ws_request_seen *ret)
{
    struct entry *e;

    pthread_mutex_lock(&q->lock);
    e = find(q, tenant, id, now_ms);
    if (e) {
        if (e->pending)
            *ret = WS_REQUEST_PENDING;
        else
            *ret = memcmp(e->hash, hash, WS_REQUEST_HASH_LEN) == 0 ? WS_REQUEST_DONE
                                                                   : WS_REQUEST_MISMATCH;
        snprintf(ret_ws_id, WS_REQUEST_WS_ID_MAX, "%s", e->ws_id);
        pthread_mutex_unlock(&q->lock);
        return 0;
    }
    /* The slot after the newest: free, expired, or the oldest. A pending
     * one is skipped (its Open is running) unless every slot is. */
    size_t slot = q->next;
    for (size_t i = 0; i < WS_REQUESTS_MAX; i++) {
        size_t k = (q->next + i) % WS_REQUESTS_MAX;
        if (!q->ring[k].pending) {
            slot = k;
            break;
        }
    }
    e = &q->ring[slot];
    *e = (struct entry){.used = true, .pending = true, .began_ms = now_ms};
    snprintf(e->tenant, sizeof(e->tenant), "%s", tenant);
    snprintf(e->id, sizeof(e->id), "%s", id);
    memcpy(e->hash, hash, WS_REQUEST_HASH_LEN);
    q->next = (slot + 1) % WS_REQUESTS_MAX;
    *ret = WS_REQUEST_NEW;
    ret_ws_id[0] = '\0';
    pthread_mutex_unlock(&q->lock);
    return 0;
}

void ws_requests_finish(struct ws_requests *q, const char *tenant, const char *id,
                        const char *ws_id)
{
    pthread_mutex_lock(&q->lock);
    for (size_t i = 0; i < WS_REQUESTS_MAX; i++) {
        struct entry *e = &q->ring[i];

        if (!e->used || !e->pending || strcmp(e->id, id) != 0 || strcmp(e->tenant, tenant) != 0)
            continue;
        e->pending = false;
        if (ws_id)
            snprintf(e->ws_id, sizeof(e->ws_id), "%s", ws_id);
        else
            e->used = false;
        break;
    }
    pthread_mutex_unlock(&q->lock);
}
