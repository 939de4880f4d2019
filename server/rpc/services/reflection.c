/* grpc.reflection.v1alpha and grpc.reflection.v1 ServerReflection: tools
 * such as grpcurl learn the server's services and message types from the
 * server itself.
 *
 * The answers come from the FileDescriptorSet built with the server
 * (proto/reflection_set.h: the API, the reflection protos and their
 * imports, comments included). At first use protobuf-c unpacks it; each
 * file keeps its FileDescriptorProto, its serialized form (packed again
 * once, into one buffer) and the transitive closure of its imports. A
 * symbol is found by walking the files' descriptors, following only the
 * scopes whose name is a prefix of the one asked for. Nothing is allocated
 * per request and the set is never written after it is loaded, so calls
 * share it without a lock.
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
#include <stdlib.h>
#include <string.h>

#include "google/protobuf/descriptor.pb-c.h"
#include "grpc/reflection/v1alpha/reflection.pb-c.h"
#include "proto/reflection_set.h"
#include "server/base/macros.h"
#include "server/rpc/services/internal.h"

typedef Grpc__Reflection__V1alpha__ServerReflectionRequest Request;
typedef Grpc__Reflection__V1alpha__ServerReflectionResponse Response;
typedef Google__Protobuf__FileDescriptorProto FileProto;
typedef Google__Protobuf__DescriptorProto MessageProto;
typedef Google__Protobuf__EnumDescriptorProto EnumProto;
typedef Google__Protobuf__ServiceDescriptorProto ServiceProto;

/* Files the embedded set may hold: a file's imports are a bit mask. */
#define REFLECTION_FILES_MAX 64
/* Longest symbol name looked up: longer ones are not found without a
 * walk. */
#define REFLECTION_SYMBOL_MAX 1024
/* Deepest nesting of message types the symbol walk follows. */
#define REFLECTION_NESTING_MAX 32
/* Longest service name list_services reports (the method table's own). */
#define REFLECTION_SERVICE_NAME_MAX 128

struct file {
    const FileProto *proto;
    ProtobufCBinaryData bytes; /* the serialized FileDescriptorProto */
    uint64_t imports;          /* bit i: files[i], directly or not */
};

static struct {
    Google__Protobuf__FileDescriptorSet *fds; /* owns every file's proto */
    struct file files[REFLECTION_FILES_MAX];
    size_t n;
    int err; /* < 0: the set could not be read; every answer fails */
} set;
static pthread_once_t set_once = PTHREAD_ONCE_INIT;

/* Whether a descriptor element's name (NULL when it has none) is `name`.
 * strcmp stops at the first difference: a client's name may be megabytes,
 * ours are short. */
static bool named(const char *ours, const char *name)
{
    return ours && strcmp(ours, name) == 0;
}

/* Whether one of the n descriptor elements of `array` is named `wanted`. */
#define ANY_NAMED(array, n, wanted)                                                                \
    ({                                                                                             \
        bool found_ = false;                                                                       \
        for (size_t i_ = 0; i_ < (n) && !found_; i_++)                                             \
            found_ = named((array)[i_]->name, (wanted));                                           \
        found_;                                                                                    \
    })

/* When `name` starts with the scope's name followed by a dot, the rest
 * after the dot; else NULL. */
static const char *in_scope(const char *scope, const char *name)
{
    size_t len = scope ? strlen(scope) : 0;

    if (len == 0 || strncmp(name, scope, len) != 0 || name[len] != '.')
        return NULL;
    return name + len + 1;
}

/* ---- the set, loaded once ---- */

static int file_index(const char *name, size_t *ret_index)
{
    for (size_t i = 0; i < set.n; i++)
        if (strcmp(set.files[i].proto->name, name) == 0) {
            *ret_index = i;
            return 0;
        }
    return -ENOENT;
}

/* Unpacks the embedded set, packs each file again into one buffer (the
 * same bytes: protobuf-c writes fields in protoc's order), and works out
 * each file's imports. Both allocations last as long as the process. */
static int set_load(void)
{
    Google__Protobuf__FileDescriptorSet *fds;
    uint8_t *buf = NULL, *p;
    size_t total = 0, j;
    int r = -EBADMSG;

    fds = google__protobuf__file_descriptor_set__unpack(NULL, ws_reflection_set_len,
                                                        ws_reflection_set);
    if (!fds)
        return -EBADMSG;
    if (fds->n_file == 0)
        goto out;
    if (fds->n_file > REFLECTION_FILES_MAX) {
        r = -E2BIG;
        goto out;
    }
    for (size_t i = 0; i < fds->n_file; i++) {
        if (!fds->file[i]->name)
            goto out;
        total += google__protobuf__file_descriptor_proto__get_packed_size(fds->file[i]);
    }
    p = buf = malloc(total);
    if (!buf) {
        r = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < fds->n_file; i++) {
        struct file *f = &set.files[i];

        f->proto = fds->file[i];
        f->bytes.data = p;
        f->bytes.len = google__protobuf__file_descriptor_proto__pack(fds->file[i], p);
        p += f->bytes.len;
    }
    set.n = fds->n_file;
    /* The direct imports, then their closure: a few rounds for a few
     * files. Every import is in the set (protoc --include_imports). */
    for (size_t i = 0; i < set.n; i++)
        for (size_t d = 0; d < set.files[i].proto->n_dependency; d++) {
            if (file_index(set.files[i].proto->dependency[d], &j) < 0)
                goto out;
            set.files[i].imports |= UINT64_C(1) << j;
        }
    for (bool grew = true; grew;) {
        grew = false;
        for (size_t i = 0; i < set.n; i++) {
            uint64_t m = set.files[i].imports;

            for (j = 0; j < set.n; j++)
                if (m & (UINT64_C(1) << j))
                    m |= set.files[j].imports;
            if (m != set.files[i].imports) {
                set.files[i].imports = m;
                grew = true;
            }
        }
    }
    set.fds = fds;
    return 0;
out:
    set.n = 0;
    free(buf);
    google__protobuf__file_descriptor_set__free_unpacked(fds, NULL);
    return r;
}

static void set_init(void)
{
    set.err = set_load();
}

/* ---- symbols ---- */

enum symbol {
    SYMBOL_NONE,
    SYMBOL_PACKAGE,
    SYMBOL_MESSAGE,
    SYMBOL_OTHER, /* enum, enum value, field, oneof, service, method */
};

/* `rest` is a name relative to the scope that declares `e`: the enum
 * itself, or one of its values, which protobuf scopes beside it. */
static enum symbol match_enum(const EnumProto *e, const char *rest)
{
    if (named(e->name, rest) || ANY_NAMED(e->value, e->n_value, rest))
        return SYMBOL_OTHER;
    return SYMBOL_NONE;
}

static enum symbol match_message(const MessageProto *m, const char *rest, unsigned depth)
{
    const char *inner = in_scope(m->name, rest);
    enum symbol found = SYMBOL_NONE;

    if (named(m->name, rest))
        return SYMBOL_MESSAGE;
    if (!inner || depth == REFLECTION_NESTING_MAX)
        return SYMBOL_NONE;
    if (ANY_NAMED(m->field, m->n_field, inner) || ANY_NAMED(m->extension, m->n_extension, inner) ||
        ANY_NAMED(m->oneof_decl, m->n_oneof_decl, inner))
        return SYMBOL_OTHER;
    for (size_t i = 0; i < m->n_nested_type && !found; i++)
        found = match_message(m->nested_type[i], inner, depth + 1);
    for (size_t i = 0; i < m->n_enum_type && !found; i++)
        found = match_enum(m->enum_type[i], inner);
    return found;
}

static enum symbol match_service(const ServiceProto *s, const char *rest)
{
    const char *inner = in_scope(s->name, rest);

    if (named(s->name, rest) || (inner && ANY_NAMED(s->method, s->n_method, inner)))
        return SYMBOL_OTHER;
    return SYMBOL_NONE;
}

/* What the fully-qualified `symbol` is in file f, SYMBOL_NONE when f does
 * not declare it. */
static enum symbol match_file(const FileProto *f, const char *symbol)
{
    const char *package = f->package && *f->package ? f->package : NULL;
    const char *rest = package ? in_scope(package, symbol) : symbol;
    enum symbol found = SYMBOL_NONE;

    if (named(package, symbol))
        return SYMBOL_PACKAGE;
    if (!rest)
        return SYMBOL_NONE;
    for (size_t i = 0; i < f->n_message_type && !found; i++)
        found = match_message(f->message_type[i], rest, 0);
    for (size_t i = 0; i < f->n_enum_type && !found; i++)
        found = match_enum(f->enum_type[i], rest);
    for (size_t i = 0; i < f->n_service && !found; i++)
        found = match_service(f->service[i], rest);
    if (!found && ANY_NAMED(f->extension, f->n_extension, rest))
        found = SYMBOL_OTHER;
    return found;
}

/* The file declaring the fully-qualified `symbol`, and what it is. A
 * package is declared by the first file that names it. */
static enum symbol find_symbol(const char *symbol, size_t *ret_file)
{
    if (strnlen(symbol, REFLECTION_SYMBOL_MAX + 1) > REFLECTION_SYMBOL_MAX)
        return SYMBOL_NONE;
    for (size_t i = 0; i < set.n; i++) {
        enum symbol found = match_file(set.files[i].proto, symbol);

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

    files[n++] = set.files[index].bytes;
    for (size_t j = 0; j < set.n; j++)
        if (j != index && (set.files[index].imports & (UINT64_C(1) << j)))
            files[n++] = set.files[j].bytes;
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
        if (file_index(req->file_by_filename, &file) < 0)
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

    /* Load the set now, at start, rather than in the first call. */
    pthread_once(&set_once, set_init);
    return ws_services_add_methods(s, methods, WS_ELEMENTSOF(methods), out);
}
