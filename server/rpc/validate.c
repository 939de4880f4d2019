/* Wire-level checks on request bytes before protobuf-c sees them.
 *
 * protobuf-c copies string fields into NUL-terminated C strings without
 * looking at their bytes: an embedded NUL would silently cut a path short
 * and invalid UTF-8 would travel on into file names and logs. So the raw
 * message is walked here, by descriptor, and every string field at any depth
 * is checked before the message is unpacked.
 */
#include "server/rpc/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "server/base/errors.h"
#include "server/base/utf8.h"

enum {
    WIRE_VARINT = 0,
    WIRE_FIXED64 = 1,
    WIRE_LEN = 2,
    WIRE_FIXED32 = 5,
};

void ws_rpc_utf8_copy(char *dst, size_t size, const char *src, size_t src_max)
{
    const uint8_t *p = (const uint8_t *)(src ? src : "");
    size_t n = strnlen((const char *)p, src_max), i = 0, o = 0;

    if (size == 0)
        return;
    while (i < n && o + 1 < size) {
        size_t k = ws_utf8_sequence(p + i, n - i);
        if (k == 0) {
            dst[o++] = '?';
            i++;
            continue;
        }
        if (o + k >= size)
            break;
        memcpy(dst + o, p + i, k);
        o += k;
        i += k;
    }
    dst[o] = '\0';
}

/* Reads a base-128 varint; returns 0 or -WS_EMALFORMED. */
static int read_varint(const uint8_t **pp, const uint8_t *end, uint64_t *ret_value)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    int shift;

    for (shift = 0; shift < 64; shift += 7) {
        if (p >= end)
            return -WS_EMALFORMED;
        v |= (uint64_t)(*p & 0x7f) << shift;
        if (!(*p++ & 0x80)) {
            *pp = p;
            *ret_value = v;
            return 0;
        }
    }
    return -WS_EMALFORMED;
}

static const ProtobufCFieldDescriptor *find_field(const ProtobufCMessageDescriptor *desc,
                                                  uint32_t id)
{
    unsigned i;

    for (i = 0; i < desc->n_fields; i++)
        if (desc->fields[i].id == id)
            return &desc->fields[i];
    return NULL;
}

/* Appends ".name" (or "name" at the top) to the path at path[len]; returns
 * the new length. Truncates silently: the path is only a hint. */
static size_t path_push(char *path, size_t size, size_t len, const char *name)
{
    int n;

    if (size == 0 || len >= size)
        return len;
    n = snprintf(path + len, size - len, "%s%s", len ? "." : "", name);
    if (n < 0)
        return len;
    return (size_t)n >= size - len ? size - 1 : len + (size_t)n;
}

static int walk(const ProtobufCMessageDescriptor *desc, const uint8_t *p, const uint8_t *end,
                int depth, char *path, size_t size, size_t len)
{
    if (depth > WS_RPC_NESTING_MAX)
        return -WS_EMALFORMED;

    while (p < end) {
        const ProtobufCFieldDescriptor *fd;
        uint64_t key, n;
        uint32_t id;
        int r;

        r = read_varint(&p, end, &key);
        if (r < 0)
            return r;
        if ((key >> 3) == 0 || (key >> 3) > 0x1fffffff)
            return -WS_EMALFORMED;
        id = (uint32_t)(key >> 3);

        switch (key & 7) {
        case WIRE_VARINT:
            r = read_varint(&p, end, &n);
            if (r < 0)
                return r;
            break;
        case WIRE_FIXED64:
            if (end - p < 8)
                return -WS_EMALFORMED;
            p += 8;
            break;
        case WIRE_FIXED32:
            if (end - p < 4)
                return -WS_EMALFORMED;
            p += 4;
            break;
        case WIRE_LEN:
            r = read_varint(&p, end, &n);
            if (r < 0)
                return r;
            if (n > (uint64_t)(end - p))
                return -WS_EMALFORMED;
            fd = find_field(desc, id);
            if (fd && fd->type == PROTOBUF_C_TYPE_STRING) {
                if (!ws_utf8_valid((const char *)p, (size_t)n)) {
                    path_push(path, size, len, fd->name);
                    return -WS_EMALFORMED;
                }
            } else if (fd && fd->type == PROTOBUF_C_TYPE_MESSAGE && fd->descriptor) {
                size_t sub = path_push(path, size, len, fd->name);
                r = walk(fd->descriptor, p, p + n, depth + 1, path, size, sub);
                if (r < 0)
                    return r;
                path[len] = '\0';
            }
            p += n;
            break;
        default:
            /* Groups (3, 4) are not proto3; 6 and 7 do not exist. */
            return -WS_EMALFORMED;
        }
    }
    return 0;
}

int ws_rpc_validate_message(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                            char *field, size_t field_size)
{
    char path[WS_RPC_FIELD_PATH_MAX] = "";
    int r;

    r = walk(desc, data, data + len, 0, path, sizeof(path), 0);
    if (r < 0 && field && field_size > 0)
        snprintf(field, field_size, "%s", path);
    return r;
}
