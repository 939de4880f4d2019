#include "server/agent/wire.h"

#include <errno.h>
#include <string.h>

static const char *const type_names[] = {
    [WS_WIRE_HELLO] = "HELLO",     [WS_WIRE_START] = "START",   [WS_WIRE_SIGNAL] = "SIGNAL",
    [WS_WIRE_STARTED] = "STARTED", [WS_WIRE_EXITED] = "EXITED", [WS_WIRE_FAILED] = "FAILED",
};

const char *ws_wire_type_name(unsigned type)
{
    if (type == 0 || type > WS_WIRE_TYPE_MAX)
        return "?";
    return type_names[type];
}

static void put_le(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;

    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* ---- writing ---- */

void ws_wire_begin(struct ws_wire_out *o, uint8_t *buf, size_t cap, enum ws_wire_type type,
                   uint32_t stream)
{
    o->buf = buf;
    o->cap = cap;
    o->len = WS_WIRE_HEADER;
    o->overflow = cap < WS_WIRE_HEADER;
    if (o->overflow)
        return;
    buf[0] = WS_WIRE_VERSION;
    buf[1] = (uint8_t)type;
    put_le(buf + 2, 0, 2);
    put_le(buf + 4, stream, 4);
    put_le(buf + 8, 0, 4);
}

static uint8_t *field(struct ws_wire_out *o, enum ws_wire_tag tag, size_t n)
{
    if (o->overflow || n > o->cap - o->len || WS_WIRE_FIELD_HEADER > o->cap - o->len - n ||
        n > UINT32_MAX) {
        o->overflow = true;
        return NULL;
    }
    uint8_t *p = o->buf + o->len;
    put_le(p, (uint64_t)tag, 2);
    put_le(p + 2, n, 4);
    o->len += WS_WIRE_FIELD_HEADER + n;
    return p + WS_WIRE_FIELD_HEADER;
}

void ws_wire_put_u64(struct ws_wire_out *o, enum ws_wire_tag tag, uint64_t v)
{
    uint8_t *p = field(o, tag, 8);

    if (p)
        put_le(p, v, 8);
}

void ws_wire_put_bytes(struct ws_wire_out *o, enum ws_wire_tag tag, const void *data, size_t n)
{
    uint8_t *p = field(o, tag, n);

    if (p && n)
        memcpy(p, data, n);
}

void ws_wire_put_str(struct ws_wire_out *o, enum ws_wire_tag tag, const char *s)
{
    ws_wire_put_bytes(o, tag, s, strlen(s));
}

long ws_wire_end(struct ws_wire_out *o)
{
    if (o->overflow || o->len - WS_WIRE_HEADER > WS_WIRE_PAYLOAD_MAX)
        return -EMSGSIZE;
    put_le(o->buf + 8, o->len - WS_WIRE_HEADER, 4);
    return (long)o->len;
}

/* ---- reading ---- */

void ws_wire_in_init(struct ws_wire_in *in, uint8_t *buf, size_t cap)
{
    in->buf = buf;
    in->cap = cap;
    in->have = 0;
    in->taken = 0;
}

uint8_t *ws_wire_in_space(struct ws_wire_in *in, size_t *ret_room)
{
    if (in->taken) {
        memmove(in->buf, in->buf + in->taken, in->have - in->taken);
        in->have -= in->taken;
        in->taken = 0;
    }
    *ret_room = in->cap - in->have;
    return in->buf + in->have;
}

void ws_wire_in_added(struct ws_wire_in *in, size_t n)
{
    in->have += n;
}

int ws_wire_next(struct ws_wire_in *in, struct ws_wire_frame *ret)
{
    const uint8_t *h = in->buf + in->taken;
    size_t avail = in->have - in->taken;

    /* The header is judged as soon as it is whole: a stream that sends a
     * bad one is refused before anything waits for its payload. */
    if (avail < WS_WIRE_HEADER)
        return 0;
    if (h[0] != WS_WIRE_VERSION || get_le(h + 2, 2) != 0 || h[1] == 0 || h[1] > WS_WIRE_TYPE_MAX)
        return -EPROTO;
    uint64_t len = get_le(h + 8, 4);
    if (len > WS_WIRE_PAYLOAD_MAX || WS_WIRE_HEADER + len > in->cap)
        return -EMSGSIZE;
    if (avail < WS_WIRE_HEADER + len)
        return 0;
    ret->type = h[1];
    ret->stream = (uint32_t)get_le(h + 4, 4);
    ret->len = (uint32_t)len;
    ret->payload = h + WS_WIRE_HEADER;
    in->taken += WS_WIRE_HEADER + len;
    return 1;
}

size_t ws_wire_in_pending(const struct ws_wire_in *in)
{
    return in->have - in->taken;
}

int ws_wire_next_field(const struct ws_wire_frame *f, size_t *pos, struct ws_wire_field *ret)
{
    size_t at = *pos;

    if (at == f->len)
        return 0;
    if (at > f->len || f->len - at < WS_WIRE_FIELD_HEADER)
        return -EPROTO;
    uint64_t n = get_le(f->payload + at + 2, 4);
    if (n > f->len - at - WS_WIRE_FIELD_HEADER)
        return -EPROTO;
    ret->tag = (uint16_t)get_le(f->payload + at, 2);
    ret->len = (uint32_t)n;
    ret->data = f->payload + at + WS_WIRE_FIELD_HEADER;
    *pos = at + WS_WIRE_FIELD_HEADER + n;
    return 1;
}

int ws_wire_u64(const struct ws_wire_field *fl, uint64_t *ret)
{
    if (fl->len != 8)
        return -EPROTO;
    *ret = get_le(fl->data, 8);
    return 0;
}

int ws_wire_str(const struct ws_wire_field *fl, char *buf, size_t size)
{
    if (fl->len == 0 || fl->len > WS_WIRE_STRING_MAX || memchr(fl->data, '\0', fl->len))
        return -EPROTO;
    if (size <= fl->len)
        return -ENOSPC;
    memcpy(buf, fl->data, fl->len);
    buf[fl->len] = '\0';
    return 0;
}

int ws_wire_check(const struct ws_wire_frame *f)
{
    struct ws_wire_field fl;
    size_t pos = 0;
    int r;

    while ((r = ws_wire_next_field(f, &pos, &fl)) > 0)
        ;
    return r;
}
