/* The Docker stream frame demultiplexer (server/docker/frames.h), framed
 * and raw. The first input byte picks the mode (bit 0: raw); the rest is
 * the stream. It is demultiplexed twice: in one piece, and in pieces of
 * sizes drawn from the input with a callback that asks to stop now and
 * then (the caller then feeds the rest again, as the pump does).
 *
 * Checked besides memory safety: both runs deliver the same bytes on
 * each stream, fail (-EPROTO) or not alike and agree at the end of the
 * stream; the per-stream totals are what was delivered; raw mode hands
 * the whole input to stdout; a return below the piece is a stop asked
 * for, never a loss.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "server/docker/frames.h"
#include "tests/fuzz/fuzz.h"

#define STREAMS (WS_FRAMES_SYSTEMERR + 1)

struct sink {
    uint8_t *out[STREAMS];
    size_t len[STREAMS];
    size_t cap;
    struct fuzz_rng *rng; /* NULL: never stop */
    bool stopped;
};

static int collect(void *arg, enum ws_frames_stream stream, const uint8_t *data, size_t len)
{
    struct sink *s = arg;

    FUZZ_CHECK(stream >= WS_FRAMES_STDOUT && stream <= WS_FRAMES_SYSTEMERR, "bad stream");
    FUZZ_CHECK(len > 0, "an empty slice");
    FUZZ_CHECK(s->len[stream] + len <= s->cap, "more payload than input");
    memcpy(s->out[stream] + s->len[stream], data, len);
    s->len[stream] += len;
    s->stopped = s->rng && fuzz_rng_below(s->rng, 4) == 0;
    return s->stopped;
}

static void sink_init(struct sink *s, size_t cap, struct fuzz_rng *rng)
{
    memset(s, 0, sizeof(*s));
    s->cap = cap;
    s->rng = rng;
    for (int i = 0; i < STREAMS; i++) {
        s->out[i] = malloc(cap ? cap : 1);
        FUZZ_CHECK(s->out[i] != NULL, "malloc");
    }
}

static void sink_free(struct sink *s)
{
    for (int i = 0; i < STREAMS; i++)
        free(s->out[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ws_frames whole, parts;
    struct sink a, b;
    struct fuzz_rng rng;
    bool raw, failed_whole, failed_parts = false;
    ssize_t r;
    size_t pos = 0;

    if (size < 1)
        return 0;
    raw = data[0] & 1;
    fuzz_rng_seed(&rng, data, size);
    data++;
    size--;

    sink_init(&a, size, NULL);
    ws_frames_init(&whole, raw);
    r = ws_frames_feed(&whole, data, size, collect, &a);
    FUZZ_CHECK(r == (ssize_t)size || r == -EPROTO, "one piece: consumed all or failed");
    failed_whole = r < 0;

    sink_init(&b, size, &rng);
    ws_frames_init(&parts, raw);
    while (pos < size) {
        size_t left = size - pos;
        size_t piece = fuzz_rng_below(&rng, 2) ? 1 + fuzz_rng_below(&rng, left < 16 ? left : 16)
                                               : 1 + fuzz_rng_below(&rng, left);
        b.stopped = false;
        r = ws_frames_feed(&parts, data + pos, piece, collect, &b);
        if (r < 0) {
            FUZZ_CHECK(r == -EPROTO, "pieces: an error other than -EPROTO");
            failed_parts = true;
            break;
        }
        FUZZ_CHECK(r > 0 && (size_t)r <= piece, "pieces: consumed count");
        if ((size_t)r < piece)
            FUZZ_CHECK(b.stopped && !raw, "consumed less without a stop");
        pos += (size_t)r;
    }
    if (failed_parts)
        FUZZ_CHECK(ws_frames_feed(&parts, data, size, collect, &b) == -EPROTO,
                   "a failed demultiplexer took more input");

    FUZZ_CHECK(failed_whole == failed_parts, "one piece and pieces disagree on failing");
    FUZZ_CHECK(ws_frames_eof(&whole) == ws_frames_eof(&parts), "disagree at the end");
    for (int i = WS_FRAMES_STDOUT; i < STREAMS; i++) {
        FUZZ_CHECK(a.len[i] == b.len[i] && memcmp(a.out[i], b.out[i], a.len[i]) == 0,
                   "one piece and pieces delivered different bytes");
        FUZZ_CHECK(ws_frames_total(&whole, (enum ws_frames_stream)i) == a.len[i],
                   "total is not what was delivered");
    }
    if (raw) {
        FUZZ_CHECK(!failed_whole && a.len[WS_FRAMES_STDOUT] == size &&
                       (size == 0 || memcmp(a.out[WS_FRAMES_STDOUT], data, size) == 0),
                   "raw mode is not the input on stdout");
        FUZZ_CHECK(ws_frames_eof(&whole) == 0, "raw mode ends cleanly");
    }
    sink_free(&a);
    sink_free(&b);
    return 0;
}
