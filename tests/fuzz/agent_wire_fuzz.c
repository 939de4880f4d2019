/* The in-box agent's wire parser (server/agent/wire.h): frames out of a
 * byte stream fed in pieces of sizes drawn from the input, and the fields
 * of each frame read as the server reads an agent's HELLO, STARTED,
 * EXITED (the exit records) and FAILED.
 *
 * Checked besides memory safety: a frame has a known type and a payload
 * within the limit; ws_wire_check accepts a payload exactly when walking
 * its fields reaches the end; a field lies inside its payload; a number
 * reads only from 8 bytes and a string back at its own length; a frame
 * that checks out is written again, field by field, to the same bytes.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "server/agent/wire.h"
#include "tests/fuzz/fuzz.h"

static uint8_t in_buf[WS_WIRE_FRAME_MAX];
static uint8_t out_buf[WS_WIRE_FRAME_MAX];
static char str_buf[WS_WIRE_STRING_MAX + 1];

static void take(const struct ws_wire_frame *f)
{
    struct ws_wire_field fl;
    struct ws_wire_out o;
    size_t pos = 0;
    int r, check;

    FUZZ_CHECK(f->type >= 1 && f->type <= WS_WIRE_TYPE_MAX, "a frame of an unknown type");
    FUZZ_CHECK(f->len <= WS_WIRE_PAYLOAD_MAX, "a payload over the limit");
    FUZZ_CHECK(strcmp(ws_wire_type_name(f->type), "?") != 0, "a type without a name");
    check = ws_wire_check(f);
    FUZZ_CHECK(check == 0 || check == -EPROTO, "ws_wire_check: unexpected error");

    ws_wire_begin(&o, out_buf, sizeof(out_buf), (enum ws_wire_type)f->type, f->stream);
    while ((r = ws_wire_next_field(f, &pos, &fl)) == 1) {
        uint64_t v;
        int n;

        FUZZ_CHECK(fl.data >= f->payload && fl.len <= f->len &&
                       (size_t)(fl.data - f->payload) <= f->len - fl.len,
                   "a field outside its payload");
        FUZZ_CHECK(pos <= f->len, "position past the payload");
        n = ws_wire_u64(&fl, &v);
        FUZZ_CHECK(n == (fl.len == 8 ? 0 : -EPROTO), "ws_wire_u64 on a field of that size");
        n = ws_wire_str(&fl, str_buf, sizeof(str_buf));
        if (n == 0)
            FUZZ_CHECK(fl.len > 0 && strlen(str_buf) == fl.len, "a string of another length");
        else
            FUZZ_CHECK(n == -EPROTO, "ws_wire_str: unexpected error");
        ws_wire_put_bytes(&o, (enum ws_wire_tag)fl.tag, fl.data, fl.len);
    }
    FUZZ_CHECK(r == 0 || r == -EPROTO, "ws_wire_next_field: unexpected error");
    FUZZ_CHECK((r == 0) == (check == 0), "ws_wire_check and the field walk disagree");
    if (check == 0) {
        long len = ws_wire_end(&o);
        FUZZ_CHECK(len == (long)(WS_WIRE_HEADER + f->len), "written again: another size");
        FUZZ_CHECK(out_buf[0] == WS_WIRE_VERSION && out_buf[1] == f->type,
                   "written again: another header");
        FUZZ_CHECK(f->len == 0 || memcmp(out_buf + WS_WIRE_HEADER, f->payload, f->len) == 0,
                   "written again: other bytes");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ws_wire_in in;
    struct fuzz_rng rng;
    size_t pos = 0;

    fuzz_rng_seed(&rng, data, size);
    ws_wire_in_init(&in, in_buf, sizeof(in_buf));
    while (pos < size) {
        size_t room, left = size - pos, n;
        struct ws_wire_frame f;
        uint8_t *space = ws_wire_in_space(&in, &room);
        int r;

        FUZZ_CHECK(room > 0, "no room in a buffer of WS_WIRE_FRAME_MAX");
        n = fuzz_rng_below(&rng, 2) ? 1 + fuzz_rng_below(&rng, left < 16 ? left : 16)
                                    : 1 + fuzz_rng_below(&rng, left);
        if (n > room)
            n = room;
        memcpy(space, data + pos, n);
        ws_wire_in_added(&in, n);
        pos += n;
        while ((r = ws_wire_next(&in, &f)) == 1)
            take(&f);
        if (r < 0) {
            FUZZ_CHECK(r == -EPROTO || r == -EMSGSIZE, "ws_wire_next: unexpected error");
            return 0;
        }
        FUZZ_CHECK(ws_wire_in_pending(&in) < WS_WIRE_FRAME_MAX, "a whole frame held back");
    }
    return 0;
}
