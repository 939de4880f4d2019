/* Output retention for commands.
 *
 * struct ws_ring keeps the most recent `capacity` bytes of a stream,
 * addressed by absolute stream offsets, so a subscriber that reconnects can
 * replay from an offset and learns exactly how many bytes it missed when it
 * fell behind (never a silent drop).
 *
 * struct ws_capture keeps the head and the tail of a stream whose size is
 * unknown in advance, within a fixed budget, with exact counts: the first
 * `head_cap` bytes, and the last `tail_cap` bytes of what followed them.
 *
 * Neither allocates after creation; memory is bounded by the capacities.
 * Not thread-safe: one owner (the pump) at a time.
 */
#ifndef WS_POSIX_RING_H
#define WS_POSIX_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct ws_ring;

/* A ring of `capacity` (> 0) bytes. Returns 0, -EINVAL or -ENOMEM. */
int ws_ring_new(size_t capacity, struct ws_ring **ret);
/* Accepts NULL. */
void ws_ring_free(struct ws_ring *r);

/* Appends; the oldest bytes are overwritten once the ring is full. */
void ws_ring_append(struct ws_ring *r, const void *data, size_t len);

/* Zero-copy appends: the space the next `max` bytes (at most the capacity)
 * would go to, as one or two regions (the second when it wraps); returns
 * how many regions were filled in. Reading into them overwrites the oldest
 * bytes, exactly as an append would. ws_ring_commit(n) then accounts for
 * the first n bytes written there. */
size_t ws_ring_reserve(const struct ws_ring *r, size_t max, struct iovec iov[2]);
void ws_ring_commit(struct ws_ring *r, size_t n);

/* Zero-copy reads: points *ret at the stream's bytes from `offset` (held,
 * and before the end) and returns how many are contiguous there, at most
 * max; 0 when offset is not held or at the end. The pointer stays valid
 * until those bytes are overwritten. */
size_t ws_ring_peek(const struct ws_ring *r, uint64_t offset, size_t max, const uint8_t **ret);

/* Offset one past the last byte ever appended (the stream's length). */
uint64_t ws_ring_end(const struct ws_ring *r);
/* The capacity given at creation. */
size_t ws_ring_capacity(const struct ws_ring *r);
/* Oldest offset still held (end - bytes held). */
uint64_t ws_ring_start(const struct ws_ring *r);

/* Copies up to `max` bytes of the stream from `offset` into buf and
 * returns how many. An offset the ring no longer holds starts the copy at
 * ws_ring_start() and sets *ret_gap to the bytes skipped (else 0). An
 * offset at or past the end copies nothing. */
size_t ws_ring_read(const struct ws_ring *r, uint64_t offset, void *buf, size_t max,
                    uint64_t *ret_gap);

struct ws_capture;

/* Keeps the first head_cap and the last tail_cap bytes. Returns 0,
 * -EINVAL (both 0) or -ENOMEM. */
int ws_capture_new(size_t head_cap, size_t tail_cap, struct ws_capture **ret);
/* Accepts NULL. */
void ws_capture_free(struct ws_capture *c);
void ws_capture_append(struct ws_capture *c, const void *data, size_t len);

struct ws_capture_view {
    const uint8_t *head; /* the stream's first head_len bytes */
    size_t head_len;
    /* The last bytes of the stream after the head (copied into the
     * caller's buffer by ws_capture_tail). */
    size_t tail_len;
    uint64_t total;   /* bytes ever appended */
    uint64_t dropped; /* bytes between head and tail that were not kept */
    bool truncated;   /* dropped > 0 */
};

void ws_capture_get_view(const struct ws_capture *c, struct ws_capture_view *ret);
/* Copies the tail (view.tail_len bytes) into buf (at least that big). */
void ws_capture_tail(const struct ws_capture *c, void *buf);

#endif
