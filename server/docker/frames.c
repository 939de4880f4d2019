#include "server/docker/frames.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

/* Offsets in a header. */
#define HEADER_STREAM 0
#define HEADER_PAD    1 /* three bytes, always zero */
#define HEADER_SIZE   4

void ws_frames_init(struct ws_frames *d, bool raw)
{
    memset(d, 0, sizeof(*d));
    d->raw = raw;
}

/* Checks the complete header in d->header and, when it is well-formed,
 * makes its frame the current one. Returns 0 or -EPROTO. */
static int frames_parse_header(struct ws_frames *d)
{
    const uint8_t *h = d->header;
    uint32_t size;

    if (h[HEADER_STREAM] != WS_FRAMES_STDOUT && h[HEADER_STREAM] != WS_FRAMES_STDERR &&
        h[HEADER_STREAM] != WS_FRAMES_SYSTEMERR)
        return -EPROTO;
    for (size_t i = HEADER_PAD; i < HEADER_SIZE; i++)
        if (h[i] != 0)
            return -EPROTO;
    size = (uint32_t)h[HEADER_SIZE] << 24 | (uint32_t)h[HEADER_SIZE + 1] << 16 |
           (uint32_t)h[HEADER_SIZE + 2] << 8 | (uint32_t)h[HEADER_SIZE + 3];
    if (size > WS_FRAMES_PAYLOAD_MAX)
        return -EPROTO;
    d->stream = h[HEADER_STREAM];
    d->left = size;
    return 0;
}

ssize_t ws_frames_feed(struct ws_frames *d, const void *data, size_t len, ws_frames_cb cb,
                       void *arg)
{
    const uint8_t *p = data;
    size_t off = 0;

    if (d->failed)
        return -EPROTO;
    if (len > SSIZE_MAX)
        return -EINVAL;

    if (d->raw) {
        if (len > 0) {
            d->total[WS_FRAMES_STDOUT] += len;
            /* The whole input is one slice, so stopping after it is
             * stopping at the end: what cb returns changes nothing. */
            (void)cb(arg, WS_FRAMES_STDOUT, p, len);
        }
        return (ssize_t)len;
    }

    while (off < len) {
        const uint8_t *slice;
        size_t n;

        if (d->header_len < WS_FRAMES_HEADER_LEN) {
            n = WS_FRAMES_HEADER_LEN - d->header_len;
            if (n > len - off)
                n = len - off;
            memcpy(d->header + d->header_len, p + off, n);
            d->header_len += (uint8_t)n;
            off += n;
            if (d->header_len < WS_FRAMES_HEADER_LEN)
                break;
            if (frames_parse_header(d) < 0) {
                /* Where the next header would start is unknown now. */
                d->failed = true;
                return -EPROTO;
            }
            if (d->left == 0)
                d->header_len = 0;
            continue;
        }

        n = d->left;
        if (n > len - off)
            n = len - off;
        slice = p + off;
        off += n;
        d->left -= (uint32_t)n;
        if (d->left == 0)
            d->header_len = 0;
        d->total[d->stream] += n;
        /* The state already accounts for the slice, so when cb stops us
         * the next feed starts exactly after it. */
        if (cb(arg, (enum ws_frames_stream)d->stream, slice, n) != 0)
            break;
    }
    return (ssize_t)off;
}

int ws_frames_eof(const struct ws_frames *d)
{
    if (d->failed)
        return -EPROTO;
    if (d->raw)
        return 0;
    /* header_len is 0 exactly between frames: mid-header it is 1-7, in a
     * payload it is WS_FRAMES_HEADER_LEN. */
    return d->header_len == 0 ? 0 : -EPROTO;
}

uint64_t ws_frames_total(const struct ws_frames *d, enum ws_frames_stream stream)
{
    if (stream != WS_FRAMES_STDOUT && stream != WS_FRAMES_STDERR && stream != WS_FRAMES_SYSTEMERR)
        return 0;
    return d->total[stream];
}
