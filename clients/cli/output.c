/* Output formats of wsctl (see output.h). JSON comes from a generic walk
 * over protobuf-c descriptors, so every --json rendering uses the proto's
 * own field names and stays in step with the .proto files.
 */
#include "clients/cli/output.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/grpc.h>

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int wsc_report(const struct wsc_error *e)
{
    const char *reason = e->reason[0] ? e->reason : wsc_status_name(e->code);

    /* The message comes from the server: keep it to one line. */
    fprintf(stderr, "wsctl: %s: ", reason);
    for (const char *p = e->message; *p; p++)
        fputc(*p == '\n' || *p == '\r' ? ' ' : *p, stderr);
    for (size_t i = 0; i < e->n_meta; i++)
        fprintf(stderr, "%s%s=%s", i == 0 ? " (" : ", ", e->meta_key[i], e->meta_value[i]);
    fputs(e->n_meta ? ")\n" : "\n", stderr);
    return WSC_EXIT_FAIL;
}

int wsc_report_errno(const char *what, int err)
{
    fprintf(stderr, "wsctl: %s: %s\n", what, strerror(err < 0 ? -err : err));
    return WSC_EXIT_FAIL;
}

int wsc_usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("wsctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see wsctl --help)\n", stderr);
    return WSC_EXIT_USAGE;
}

char *wsc_base64_encode(const uint8_t *data, size_t len)
{
    size_t n = 4 * ((len + 2) / 3);
    char *out = malloc(n + 1);
    size_t o = 0;

    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)data[i + 1] << 8;
        if (i + 2 < len)
            v |= data[i + 2];
        out[o++] = b64[(v >> 18) & 63];
        out[o++] = b64[(v >> 12) & 63];
        out[o++] = i + 1 < len ? b64[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? b64[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

static int b64_value(char ch)
{
    const char *p = ch ? strchr(b64, ch) : NULL;
    /* URL-safe spellings are accepted too: refs get pasted around. */
    if (ch == '-')
        return 62;
    if (ch == '_')
        return 63;
    return p ? (int)(p - b64) : -1;
}

int wsc_base64_decode(const char *text, uint8_t **ret_data, size_t *ret_len)
{
    size_t len = strlen(text);
    uint8_t *out = malloc(len / 4 * 3 + 3);
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;

    if (!out)
        return -ENOMEM;
    for (size_t i = 0; i < len; i++) {
        int v;
        if (text[i] == '=')
            break;
        v = b64_value(text[i]);
        if (v < 0) {
            free(out);
            return -EINVAL;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    *ret_data = out;
    *ret_len = o;
    return 0;
}

json_t *wsc_json_bytes(const uint8_t *data, size_t len)
{
    json_t *s = json_stringn((const char *)data, len);
    char *enc;

    if (s)
        return s;
    /* Not UTF-8: jansson refuses it, so carry the bytes losslessly. */
    enc = wsc_base64_encode(data, len);
    if (!enc)
        return NULL;
    s = json_pack("{s:s}", "base64", enc);
    free(enc);
    return s;
}

static json_t *field_value(const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        return json_integer(*(const int32_t *)p);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return json_integer(*(const uint32_t *)p);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        return json_integer(*(const int64_t *)p);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return json_integer((json_int_t) * (const uint64_t *)p);
    case PROTOBUF_C_TYPE_FLOAT:
        return json_real(*(const float *)p);
    case PROTOBUF_C_TYPE_DOUBLE:
        return json_real(*(const double *)p);
    case PROTOBUF_C_TYPE_BOOL:
        return json_boolean(*(const protobuf_c_boolean *)p);
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)p);
        return ev ? json_string(ev->name) : json_integer(*(const int *)p);
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return json_string(s ? s : "");
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = p;
        char *enc = wsc_base64_encode(b->data, b->len);
        json_t *j = enc ? json_string(enc) : NULL;
        free(enc);
        return j;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *m = *(ProtobufCMessage *const *)p;
        return m ? wsc_json_message(m) : json_null();
    }
    }
    return json_null();
}

static size_t field_size(const ProtobufCFieldDescriptor *f)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_ENUM:
        return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return 8;
    case PROTOBUF_C_TYPE_FLOAT:
        return sizeof(float);
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    }
    return 0;
}

/* A map field arrives as repeated key/value entry messages. */
static bool is_map_entry(const ProtobufCFieldDescriptor *f)
{
    const ProtobufCMessageDescriptor *d = f->descriptor;
    size_t n;

    if (f->type != PROTOBUF_C_TYPE_MESSAGE || f->label != PROTOBUF_C_LABEL_REPEATED)
        return false;
    n = strlen(d->name);
    return n > 5 && strcmp(d->name + n - 5, "Entry") == 0 && d->n_fields == 2 &&
           strcmp(d->fields[0].name, "key") == 0;
}

json_t *wsc_json_message(const ProtobufCMessage *msg)
{
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    const char *base = (const char *)msg;
    json_t *obj = json_object();

    if (!obj)
        return NULL;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *p = base + f->offset;
        json_t *v;

        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which = *(const uint32_t *)(base + f->quantifier_offset);
            if (which != f->id)
                continue;
        }
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            const char *arr = *(char *const *)p;
            bool map = is_map_entry(f);

            v = map ? json_object() : json_array();
            for (size_t k = 0; v && k < n; k++) {
                const void *elem = arr + k * field_size(f);
                if (map) {
                    const ProtobufCMessage *e = *(ProtobufCMessage *const *)elem;
                    const ProtobufCFieldDescriptor *kf = &e->descriptor->fields[0];
                    const ProtobufCFieldDescriptor *vf = &e->descriptor->fields[1];
                    const char *key = *(char *const *)((const char *)e + kf->offset);
                    json_object_set_new(v, key ? key : "",
                                        field_value(vf, (const char *)e + vf->offset));
                } else {
                    json_array_append_new(v, field_value(f, elem));
                }
            }
        } else if (f->type == PROTOBUF_C_TYPE_MESSAGE && !*(ProtobufCMessage *const *)p) {
            continue;
        } else {
            v = field_value(f, p);
        }
        if (v)
            json_object_set_new(obj, f->name, v);
    }
    return obj;
}

int wsc_json_emit(json_t *j)
{
    int r = 0;

    if (!j)
        return -ENOMEM;
    if (json_dumpf(j, stdout, JSON_COMPACT) < 0 || fputc('\n', stdout) == EOF)
        r = -EIO;
    json_decref(j);
    return r;
}

const char *wsc_file_path(const Workspace__V1__FileInfo *fi)
{
    return fi->path && fi->path[0] ? fi->path : "?";
}

void wsc_print_file_info(const Workspace__V1__FileInfo *fi)
{
    char type;

    switch (fi->type) {
    case WORKSPACE__V1__FILE_TYPE__FILE_TYPE_REGULAR:
        type = '-';
        break;
    case WORKSPACE__V1__FILE_TYPE__FILE_TYPE_DIRECTORY:
        type = 'd';
        break;
    case WORKSPACE__V1__FILE_TYPE__FILE_TYPE_SYMLINK:
        type = 'l';
        break;
    default:
        type = '?';
        break;
    }
    printf("%c %04o %12" PRIu64 " %s\n", type, fi->mode & 07777, fi->size, wsc_file_path(fi));
}

void wsc_format_time(int64_t unix_ms, char *buf, size_t cap)
{
    time_t t = (time_t)(unix_ms / 1000);
    struct tm tm;

    if (unix_ms <= 0 || !gmtime_r(&t, &tm) || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, cap, "%s", unix_ms ? "?" : "never");
}

void wsc_format_duration(uint64_t ms, char *buf, size_t cap)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}};
    size_t n = 0;

    if (ms == 0) {
        snprintf(buf, cap, "none");
        return;
    }
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]) && n < cap; i++) {
        uint64_t v = ms / units[i].ms;
        int w;

        if (v == 0)
            continue;
        ms -= v * units[i].ms;
        w = snprintf(buf + n, cap - n, "%" PRIu64 "%s", v, units[i].unit);
        if (w < 0)
            break;
        n += (size_t)w;
    }
}

struct kv_view {
    const char *key, *value;
};

static int kv_view_cmp(const void *a, const void *b)
{
    return strcmp(((const struct kv_view *)a)->key, ((const struct kv_view *)b)->key);
}

/* A map entry's string field `i` (0: key, 1: value), through its
 * descriptor, so every map<string, string> type reads the same way. */
static const char *entry_string(const ProtobufCMessage *m, unsigned i)
{
    const ProtobufCFieldDescriptor *f;
    const char *s;

    if (i >= m->descriptor->n_fields)
        return "?";
    f = &m->descriptor->fields[i];
    if (f->type != PROTOBUF_C_TYPE_STRING)
        return "?";
    memcpy(&s, (const char *)m + f->offset, sizeof(s));
    return s ? s : "";
}

void wsc_print_map(FILE *f, const void *entries, size_t n, const char *sep)
{
    const ProtobufCMessage *const *e = entries;
    struct kv_view *v = n ? calloc(n, sizeof(*v)) : NULL;

    if (n == 0 || !v) {
        fputs(n ? "?" : "-", f);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        v[i].key = entry_string(e[i], 0);
        v[i].value = entry_string(e[i], 1);
    }
    qsort(v, n, sizeof(*v), kv_view_cmp);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s%s=%s", i ? sep : "", v[i].key, v[i].value);
    free(v);
}
