/* grpc.reflection.v1alpha and grpc.reflection.v1 ServerReflection: tools
 * such as grpcurl learn the server's services and message types from the
 * server itself.
 *
 * The answers come from the FileDescriptorSet built with the server
 * (proto/reflection_set.h: the API, the reflection protos and their
 * imports, comments included). At first use it is split into its files, each
 * a slice of the embedded bytes with its name, package and the transitive
 * closure of its imports; a symbol is found by walking the files' wire form,
 * following only the scopes whose name is a prefix of the one asked for.
 * Nothing is allocated per request and the set is never written after the
 * split, so calls share it without a lock.
 *
 * The two packages' messages are the same on the wire: both methods decode
 * and encode with v1alpha's C code. A stream answers its requests one at a
 * time (the next is read only once the answer to the last was sent), and
 * failures are in-band ErrorResponses with a gRPC code, as the protocol
 * wants: the stream stays usable after a name that is not found.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "grpc/reflection/v1alpha/reflection.pb-c.h"
#include "proto/reflection_set.h"
#include "server/base/macros.h"
#include "server/rpc/services/internal.h"

typedef Grpc__Reflection__V1alpha__ServerReflectionRequest Request;
typedef Grpc__Reflection__V1alpha__ServerReflectionResponse Response;

/* Files the embedded set may hold: a file's imports are a bit mask. */
#define REFLECTION_FILES_MAX 64
/* Longest symbol name looked up: longer ones are not found without a
 * walk. */
#define REFLECTION_SYMBOL_MAX 1024
/* Deepest nesting of message types the symbol walk follows. */
#define REFLECTION_NESTING_MAX 32
/* Longest service name list_services reports (the method table's own). */
#define REFLECTION_SERVICE_NAME_MAX 128

/* Field numbers of google/protobuf/descriptor.proto. */
enum {
    SET_FILE = 1,          /* FileDescriptorSet.file */
    FILE_NAME = 1,         /* FileDescriptorProto.name */
    FILE_PACKAGE = 2,      /* .package */
    FILE_DEPENDENCY = 3,   /* .dependency */
    FILE_MESSAGE = 4,      /* .message_type */
    FILE_ENUM = 5,         /* .enum_type */
    FILE_SERVICE = 6,      /* .service */
    FILE_EXTENSION = 7,    /* .extension */
    MESSAGE_FIELD = 2,     /* DescriptorProto.field */
    MESSAGE_NESTED = 3,    /* .nested_type */
    MESSAGE_ENUM = 4,      /* .enum_type */
    MESSAGE_EXTENSION = 6, /* .extension */
    MESSAGE_ONEOF = 8,     /* .oneof_decl */
    ENUM_VALUE = 2,        /* EnumDescriptorProto.value */
    SERVICE_METHOD = 2,    /* ServiceDescriptorProto.method */
    NAME = 1,              /* the name of every element above */
};

struct span {
    const uint8_t *p;
    size_t len;
};

struct file {
    struct span bytes; /* the serialized FileDescriptorProto */
    struct span name;
    struct span package;
    uint64_t imports; /* bit i: files[i], directly or not */
};

static struct {
    struct file files[REFLECTION_FILES_MAX];
    size_t n;
    int err; /* < 0: the set could not be read; every answer fails */
} set;
static pthread_once_t set_once = PTHREAD_ONCE_INIT;

/* ---- protobuf wire format ---- */

struct wire {
    const uint8_t *p;
    const uint8_t *end;
};

static int wire_varint(struct wire *w, uint64_t *ret)
{
    uint64_t v = 0;

    for (unsigned shift = 0; shift < 64 && w->p < w->end; shift += 7) {
        uint8_t b = *w->p++;

        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *ret = v;
            return 0;
        }
    }
    return -EBADMSG;
}

/* Reads the next field of the message w walks: its number, and for a
 * length-delimited field its bytes (other fields are skipped over, their
 * span empty). Returns 1, 0 at the end, -EBADMSG when the bytes are not
 * a message. */
static int wire_next(struct wire *w, uint32_t *ret_num, struct span *ret_bytes)
{
    struct span bytes = {0};
    uint64_t key, v;

    if (w->p == w->end)
        return 0;
    if (wire_varint(w, &key) < 0 || key >> 3 == 0 || key >> 3 > UINT32_MAX)
        return -EBADMSG;
    switch (key & 7) {
    case 0:
        if (wire_varint(w, &v) < 0)
            return -EBADMSG;
        break;
    case 1:
    case 5: {
        size_t n = (key & 7) == 1 ? 8 : 4;

        if ((size_t)(w->end - w->p) < n)
            return -EBADMSG;
        w->p += n;
        break;
    }
    case 2:
        if (wire_varint(w, &v) < 0 || v > (uint64_t)(w->end - w->p))
            return -EBADMSG;
        bytes.p = w->p;
        bytes.len = (size_t)v;
        w->p += v;
        break;
    default: /* groups: descriptors have none */
        return -EBADMSG;
    }
    *ret_num = (uint32_t)(key >> 3);
    *ret_bytes = bytes;
    return 1;
}

static struct wire wire_of(struct span s)
{
    return (struct wire){.p = s.p, .end = s.p + s.len};
}

/* The name (field 1) of a descriptor message; empty when it has none. */
static struct span name_of(struct span msg)
{
    struct wire w = wire_of(msg);
    struct span bytes, name = {0};
    uint32_t num;

    while (wire_next(&w, &num, &bytes) > 0)
        if (num == NAME)
            name = bytes;
    return name;
}

/* Whether the string str is s. Reads no further into str than s is long:
 * a client's name may be megabytes. */
static bool span_is(struct span s, const char *str)
{
    return strncmp(str, (const char *)s.p, s.len) == 0 && str[s.len] == '\0';
}

/* When `name` starts with the element's name s followed by a dot, the rest
 * after the dot; else NULL. */
static const char *span_scope(struct span s, const char *name)
{
    if (s.len == 0 || strncmp(name, (const char *)s.p, s.len) != 0 || name[s.len] != '.')
        return NULL;
    return name + s.len + 1;
}

/* ---- the set, split once ---- */

static int file_index(struct span name, size_t *ret)
{
    for (size_t i = 0; i < set.n; i++)
        if (set.files[i].name.len == name.len &&
            memcmp(set.files[i].name.p, name.p, name.len) == 0) {
            *ret = i;
            return 0;
        }
    return -ENOENT;
}

static int set_split(void)
{
    struct wire w = {.p = ws_reflection_set, .end = ws_reflection_set + ws_reflection_set_len};
    struct span bytes;
    uint32_t num;
    int r;

    while ((r = wire_next(&w, &num, &bytes)) > 0) {
        if (num != SET_FILE)
            continue;
        if (set.n == REFLECTION_FILES_MAX)
            return -E2BIG;
        struct file *f = &set.files[set.n++];
        struct wire fw = wire_of(bytes);
        struct span fb;
        uint32_t fnum;

        f->bytes = bytes;
        while ((r = wire_next(&fw, &fnum, &fb)) > 0) {
            if (fnum == FILE_NAME)
                f->name = fb;
            else if (fnum == FILE_PACKAGE)
                f->package = fb;
        }
        if (r < 0 || f->name.len == 0)
            return -EBADMSG;
    }
    if (r < 0)
        return r;
    /* The direct imports, then their closure: a few rounds for a few
     * files. Every import is in the set (protoc --include_imports). */
    for (size_t i = 0; i < set.n; i++) {
        struct wire fw = wire_of(set.files[i].bytes);
        struct span fb;
        uint32_t fnum;
        size_t j;

        while (wire_next(&fw, &fnum, &fb) > 0) {
            if (fnum != FILE_DEPENDENCY)
                continue;
            if (file_index(fb, &j) < 0)
                return -EBADMSG;
            set.files[i].imports |= UINT64_C(1) << j;
        }
    }
    for (bool grew = true; grew;) {
        grew = false;
        for (size_t i = 0; i < set.n; i++) {
            uint64_t m = set.files[i].imports;

            for (size_t j = 0; j < set.n; j++)
                if (m & (UINT64_C(1) << j))
                    m |= set.files[j].imports;
            if (m != set.files[i].imports) {
                set.files[i].imports = m;
                grew = true;
            }
        }
    }
    return 0;
}

static void set_init(void)
{
    set.err = set_split();
    if (set.err < 0)
        set.n = 0;
}

/* ---- symbols ---- */

enum symbol {
    SYMBOL_NONE,
    SYMBOL_PACKAGE,
    SYMBOL_MESSAGE,
    SYMBOL_OTHER, /* enum, enum value, field, oneof, service, method */
};

/* `rest` is a name relative to the scope that declares `e`, an enum: the
 * enum itself, or one of its values, which protobuf scopes beside it. */
static enum symbol match_enum(struct span e, const char *rest)
{
    struct wire w = wire_of(e);
    struct span bytes;
    uint32_t num;

    if (span_is(name_of(e), rest))
        return SYMBOL_OTHER;
    while (wire_next(&w, &num, &bytes) > 0)
        if (num == ENUM_VALUE && span_is(name_of(bytes), rest))
            return SYMBOL_OTHER;
    return SYMBOL_NONE;
}

static enum symbol match_message(struct span m, const char *rest, unsigned depth)
{
    struct span name = name_of(m), bytes;
    const char *inner = span_scope(name, rest);
    struct wire w = wire_of(m);
    enum symbol found = SYMBOL_NONE;
    uint32_t num;

    if (span_is(name, rest))
        return SYMBOL_MESSAGE;
    if (!inner || depth == REFLECTION_NESTING_MAX)
        return SYMBOL_NONE;
    while (!found && wire_next(&w, &num, &bytes) > 0) {
        switch (num) {
        case MESSAGE_FIELD:
        case MESSAGE_EXTENSION:
        case MESSAGE_ONEOF:
            if (span_is(name_of(bytes), inner))
                found = SYMBOL_OTHER;
            break;
        case MESSAGE_NESTED:
            found = match_message(bytes, inner, depth + 1);
            break;
        case MESSAGE_ENUM:
            found = match_enum(bytes, inner);
            break;
        }
    }
    return found;
}

static enum symbol match_service(struct span s, const char *rest)
{
    struct span name = name_of(s), bytes;
    const char *inner = span_scope(name, rest);
    struct wire w = wire_of(s);
    uint32_t num;

    if (span_is(name, rest))
        return SYMBOL_OTHER;
    if (!inner)
        return SYMBOL_NONE;
    while (wire_next(&w, &num, &bytes) > 0)
        if (num == SERVICE_METHOD && span_is(name_of(bytes), inner))
            return SYMBOL_OTHER;
    return SYMBOL_NONE;
}

/* The file declaring the fully-qualified `symbol`, and what it is. A
 * package is declared by the first file that names it. */
static enum symbol find_symbol(const char *symbol, size_t *ret_file)
{
    if (strnlen(symbol, REFLECTION_SYMBOL_MAX + 1) > REFLECTION_SYMBOL_MAX)
        return SYMBOL_NONE;
    for (size_t i = 0; i < set.n; i++) {
        const struct file *f = &set.files[i];
        const char *rest = f->package.len ? span_scope(f->package, symbol) : symbol;
        struct wire w = wire_of(f->bytes);
        enum symbol found = SYMBOL_NONE;
        struct span bytes;
        uint32_t num;

        if (f->package.len && span_is(f->package, symbol))
            found = SYMBOL_PACKAGE;
        while (rest && !found && wire_next(&w, &num, &bytes) > 0) {
            switch (num) {
            case FILE_MESSAGE:
                found = match_message(bytes, rest, 0);
                break;
            case FILE_ENUM:
                found = match_enum(bytes, rest);
                break;
            case FILE_SERVICE:
                found = match_service(bytes, rest);
                break;
            case FILE_EXTENSION:
                if (span_is(name_of(bytes), rest))
                    found = SYMBOL_OTHER;
                break;
            }
        }
        if (found) {
            *ret_file = i;
            return found;
        }
    }
    return SYMBOL_NONE;
}

/* ---- answers ---- */

/* Sends resp; a response over the message limit becomes an in-band error.
 * Any other failure means the call is over already. */
static void send_response(struct ws_call *call, Response *resp)
{
    Grpc__Reflection__V1alpha__ErrorResponse e = GRPC__REFLECTION__V1ALPHA__ERROR_RESPONSE__INIT;

    if (ws_call_send(call, &resp->base) != -EFBIG)
        return;
    e.error_code = GRPC_STATUS_RESOURCE_EXHAUSTED;
    e.error_message = (char *)"the answer is larger than the server's message limit";
    resp->message_response_case =
        GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
    resp->error_response = &e;
    ws_call_send(call, &resp->base);
}

static void send_error(struct ws_call *call, Response *resp, grpc_status_code code,
                       const char *message)
{
    Grpc__Reflection__V1alpha__ErrorResponse e = GRPC__REFLECTION__V1ALPHA__ERROR_RESPONSE__INIT;

    e.error_code = code;
    e.error_message = (char *)message;
    resp->message_response_case =
        GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
    resp->error_response = &e;
    send_response(call, resp);
}

/* The file, first (clients take the first as the one they asked for), then
 * every file it imports, directly or not, in the set's order. */
static void send_file(struct ws_call *call, Response *resp, size_t index)
{
    Grpc__Reflection__V1alpha__FileDescriptorResponse fr =
        GRPC__REFLECTION__V1ALPHA__FILE_DESCRIPTOR_RESPONSE__INIT;
    ProtobufCBinaryData files[REFLECTION_FILES_MAX];
    size_t n = 0;

    files[n++] = (ProtobufCBinaryData){.data = (uint8_t *)set.files[index].bytes.p,
                                       .len = set.files[index].bytes.len};
    for (size_t j = 0; j < set.n; j++)
        if (j != index && (set.files[index].imports & (UINT64_C(1) << j)))
            files[n++] = (ProtobufCBinaryData){.data = (uint8_t *)set.files[j].bytes.p,
                                               .len = set.files[j].bytes.len};
    fr.n_file_descriptor_proto = n;
    fr.file_descriptor_proto = files;
    resp->message_response_case =
        GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
    resp->file_descriptor_response = &fr;
    send_response(call, resp);
}

/* Every service of the method table, once each: what the server serves,
 * not what the set declares. */
static void send_services(struct ws_call *call, Response *resp)
{
    struct ws_services *s = ws_call_method_data(call);
    Grpc__Reflection__V1alpha__ListServiceResponse lr =
        GRPC__REFLECTION__V1ALPHA__LIST_SERVICE_RESPONSE__INIT;
    Grpc__Reflection__V1alpha__ServiceResponse svc[WS_SERVICES_MAX_METHODS];
    Grpc__Reflection__V1alpha__ServiceResponse *ptrs[WS_SERVICES_MAX_METHODS];
    char names[WS_SERVICES_MAX_METHODS][REFLECTION_SERVICE_NAME_MAX];
    size_t n = 0;

    for (size_t i = 0; i < s->n_methods && i < WS_SERVICES_MAX_METHODS; i++) {
        const char *path = s->methods[i].path + 1; /* "/pkg.Service/Method" */
        const char *slash = strchr(path, '/');
        size_t len = slash ? (size_t)(slash - path) : 0;
        bool seen = false;

        if (len == 0 || len >= REFLECTION_SERVICE_NAME_MAX)
            continue;
        for (size_t k = 0; k < n && !seen; k++)
            seen = strncmp(names[k], path, len) == 0 && names[k][len] == '\0';
        if (seen)
            continue;
        memcpy(names[n], path, len);
        names[n][len] = '\0';
        grpc__reflection__v1alpha__service_response__init(&svc[n]);
        svc[n].name = names[n];
        ptrs[n] = &svc[n];
        n++;
    }
    lr.n_service = n;
    lr.service = ptrs;
    resp->message_response_case =
        GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
    resp->list_services_response = &lr;
    send_response(call, resp);
}

static void send_extension_numbers(struct ws_call *call, Response *resp, const char *type)
{
    Grpc__Reflection__V1alpha__ExtensionNumberResponse er =
        GRPC__REFLECTION__V1ALPHA__EXTENSION_NUMBER_RESPONSE__INIT;
    size_t file;

    /* No file of the set extends a message: a known type has none. */
    if (find_symbol(type, &file) != SYMBOL_MESSAGE) {
        send_error(call, resp, GRPC_STATUS_NOT_FOUND, "message type not found");
        return;
    }
    er.base_type_name = (char *)type;
    resp->message_response_case =
        GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE;
    resp->all_extension_numbers_response = &er;
    send_response(call, resp);
}

static void answer(struct ws_call *call, const Request *req)
{
    Response resp = GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__INIT;
    struct span name;
    size_t file;

    pthread_once(&set_once, set_init);
    if (set.err < 0) {
        struct ws_diag d = {0};

        ws_diag_set(&d, "the server's embedded descriptors are unreadable");
        ws_call_fail(call, -WS_EINTERNAL, &d);
        return;
    }
    resp.valid_host = req->host;
    resp.original_request = (Request *)req;
    switch (req->message_request_case) {
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
        name = (struct span){.p = (const uint8_t *)req->file_by_filename,
                             .len = strlen(req->file_by_filename)};
        if (file_index(name, &file) < 0)
            send_error(call, &resp, GRPC_STATUS_NOT_FOUND, "file not found");
        else
            send_file(call, &resp, file);
        break;
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
        if (find_symbol(req->file_containing_symbol, &file) == SYMBOL_NONE)
            send_error(call, &resp, GRPC_STATUS_NOT_FOUND, "symbol not found");
        else
            send_file(call, &resp, file);
        break;
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION:
        send_error(call, &resp, GRPC_STATUS_NOT_FOUND, "extension not found");
        break;
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE:
        send_extension_numbers(call, &resp, req->all_extension_numbers_of_type);
        break;
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
        send_services(call, &resp);
        break;
    default:
        send_error(call, &resp, GRPC_STATUS_INVALID_ARGUMENT, "the request asks for nothing");
        break;
    }
}

static void on_start(struct ws_call *call, const ProtobufCMessage *msg)
{
    if (!msg)
        ws_call_finish(call, NULL);
    else
        answer(call, (const Request *)msg);
}

/* The answer went out: read the next request. A failed send or receive
 * means the stream is gone; on_cancel (not needed here) follows. */
static void on_sent(struct ws_call *call, bool ok)
{
    if (ok)
        ws_call_recv(call);
}

static void on_message(struct ws_call *call, const ProtobufCMessage *msg)
{
    on_start(call, msg);
}

size_t ws_services_reflection(struct ws_services *s, struct ws_rpc_method *out)
{
    static const struct ws_rpc_method methods[] = {
        WS_SERVICES_METHOD("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                           WS_RPC_BIDI,
                           &grpc__reflection__v1alpha__server_reflection_request__descriptor,
                           .on_start = on_start, .on_message = on_message, .on_sent = on_sent),
        WS_SERVICES_METHOD("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", WS_RPC_BIDI,
                           &grpc__reflection__v1alpha__server_reflection_request__descriptor,
                           .on_start = on_start, .on_message = on_message, .on_sent = on_sent),
    };

    /* Split the set now, at start, rather than in the first call. */
    pthread_once(&set_once, set_init);
    return ws_services_add_methods(s, methods, WS_ELEMENTSOF(methods), out);
}
