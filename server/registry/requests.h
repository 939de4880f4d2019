/* The request ids of recent Opens (OpenRequest.request_id), so that a
 * retried Open returns the workspace the first one opened.
 *
 * An entry is kept WS_REQUESTS_WINDOW_MS after its Open began, per tenant,
 * in memory only; the table holds at most WS_REQUESTS_MAX entries and
 * forgets the oldest first when full. Thread safe (a lock of its own, a
 * leaf).
 */
#ifndef WS_REGISTRY_REQUESTS_H
#define WS_REGISTRY_REQUESTS_H

#include <stdint.h>

#define WS_REQUESTS_WINDOW_MS (10 * 60 * 1000)
#define WS_REQUESTS_MAX       16384
#define WS_REQUEST_ID_MAX     128
#define WS_REQUEST_HASH_LEN   32
#define WS_REQUEST_WS_ID_MAX  64

struct ws_requests;

enum ws_request_seen {
    /* First sight: the caller opens, then calls ws_requests_finish. */
    WS_REQUEST_NEW,
    /* An Open with this id is still running. */
    WS_REQUEST_PENDING,
    /* Done: ret_ws_id names the workspace it opened. */
    WS_REQUEST_DONE,
    /* Done, for a request with other content (ret_ws_id set). */
    WS_REQUEST_MISMATCH,
};

int ws_requests_new(struct ws_requests **ret);
void ws_requests_free(struct ws_requests *q);

/* Looks up (tenant, id) and, when new, claims it as pending. hash is the
 * request's content (WS_REQUEST_HASH_LEN bytes); ret_ws_id holds
 * WS_REQUEST_WS_ID_MAX bytes. -ENOMEM. */
int ws_requests_begin(struct ws_requests *q, const char *tenant, const char *id,
                      const uint8_t *hash, int64_t now_ms, char *ret_ws_id,
                      enum ws_request_seen *ret);
/* Ends a pending claim: ws_id is what the Open made, NULL when it failed
 * (the id is forgotten, so a retry opens again). */
void ws_requests_finish(struct ws_requests *q, const char *tenant, const char *id,
                        const char *ws_id);

#endif
