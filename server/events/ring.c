#include "server/events/ring.h"

#include <sys/uio.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct ws_ring {
    uint8_t *buf;
    size_t capacity;
    uint64_t end; /* bytes ever appended; buf[end % capacity] is the next slot */
};

int ws_ring_new(size_t capacity, struct ws_ring **ret)
{
    struct ws_ring *r;

    if (capacity == 0)
        return -EINVAL;
    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->buf = malloc(capacity);
    if (!r->buf) {
        free(r);
        return -ENOMEM;
    }
    r->capacity = capacity;
    *ret = r;
    return 0;
}

void ws_ring_free(struct ws_ring *r)
{
    if (!r)
        return;
    free(r->buf);
    free(r);
}

void ws_ring_append(struct ws_ring *r, const void *data, size_t len)
{
    const uint8_t *p = data;

    /* Only the last `capacity` bytes of a large append can survive. */
    if (len > r->capacity) {
        r->end += len - r->capacity;
        p += len - r->capacity;
        len = r->capacity;
    }
    while (len > 0) {
        size_t pos = (size_t)(r->end % r->capacity);
        size_t n = r->capacity - pos < len ? r->capacity - pos : len;

        memcpy(r->buf + pos, p, n);
        r->end += n;
        p += n;
        len -= n;
    }
}

size_t ws_ring_reserve(const struct ws_ring *r, size_t max, struct iovec iov[2])
{
    size_t pos = (size_t)(r->end % r->capacity);
    size_t n = max < r->capacity ? max : r->capacity;
    size_t first = r->capacity - pos < n ? r->capacity - pos : n;

    iov[0].iov_base = r->buf + pos;
    iov[0].iov_len = first;
    if (first == n)
        return 1;
    iov[1].iov_base = r->buf;
    iov[1].iov_len = n - first;
    return 2;
}

void ws_ring_commit(struct ws_ring *r, size_t n)
{
    r->end += n;
}

size_t ws_ring_peek(const struct ws_ring *r, uint64_t offset, size_t max, const uint8_t **ret)
{
    if (offset < ws_ring_start(r) || offset >= r->end)
        return 0;
    size_t pos = (size_t)(offset % r->capacity);
    uint64_t left = r->end - offset;
    size_t n = r->capacity - pos;

    if (n > left)
        n = (size_t)left;
    if (n > max)
        n = max;
    *ret = r->buf + pos;
    return n;
}

uint64_t ws_ring_end(const struct ws_ring *r)
{
    return r->end;
}

size_t ws_ring_capacity(const struct ws_ring *r)
{
    return r->capacity;
}

uint64_t ws_ring_start(const struct ws_ring *r)
{
    return r->end > r->capacity ? r->end - r->capacity : 0;
}

size_t ws_ring_read(const struct ws_ring *r, uint64_t offset, void *buf, size_t max,
                    uint64_t *ret_gap)
{
    uint64_t start = ws_ring_start(r);
    uint8_t *out = buf;
    size_t done = 0;

    *ret_gap = 0;
    if (offset < start) {
        *ret_gap = start - offset;
        offset = start;
    }
    while (offset < r->end && done < max) {
        size_t pos = (size_t)(offset % r->capacity);
        uint64_t left = r->end - offset;
        size_t n = r->capacity - pos;

        if (n > left)
            n = (size_t)left;
        if (n > max - done)
            n = max - done;
        memcpy(out + done, r->buf + pos, n);
        done += n;
        offset += n;
    }
    return done;
}

struct ws_capture {
    uint8_t *head;
    size_t head_cap;
    size_t head_len;
    struct ws_ring *tail; /* NULL when tail_cap is 0 */
    uint64_t total;
};

int ws_capture_new(size_t head_cap, size_t tail_cap, struct ws_capture **ret)
{
    struct ws_capture *c;
    int err;

    if (head_cap == 0 && tail_cap == 0)
        return -EINVAL;
    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->head_cap = head_cap;
    c->head = head_cap ? malloc(head_cap) : NULL;
    if (head_cap && !c->head) {
        free(c);
        return -ENOMEM;
    }
    if (tail_cap) {
        err = ws_ring_new(tail_cap, &c->tail);
        if (err < 0) {
            free(c->head);
            free(c);
            return err;
        }
    }
    *ret = c;
    return 0;
}

void ws_capture_free(struct ws_capture *c)
{
    if (!c)
        return;
    ws_ring_free(c->tail);
    free(c->head);
    free(c);
}

void ws_capture_append(struct ws_capture *c, const void *data, size_t len)
{
    const uint8_t *p = data;
    size_t room = c->head_cap - c->head_len;
    size_t n = room < len ? room : len;

    if (n) {
        memcpy(c->head + c->head_len, p, n);
        c->head_len += n;
    }
    c->total += len;
    if (c->tail && len > n)
        ws_ring_append(c->tail, p + n, len - n);
}

void ws_capture_get_view(const struct ws_capture *c, struct ws_capture_view *ret)
{
    uint64_t after_head = c->total - c->head_len;
    uint64_t kept = c->tail ? ws_ring_end(c->tail) - ws_ring_start(c->tail) : 0;

    ret->head = c->head;
    ret->head_len = c->head_len;
    ret->tail_len = (size_t)kept;
    ret->total = c->total;
    ret->dropped = after_head - kept;
    ret->truncated = ret->dropped > 0;
}

void ws_capture_tail(const struct ws_capture *c, void *buf)
{
    uint64_t gap;

    if (c->tail)
        ws_ring_read(c->tail, ws_ring_start(c->tail), buf, SIZE_MAX, &gap);
}
