/* The one table from error numbers to gRPC codes and ErrorInfo reasons, and
 * the google.rpc.Status that travels in grpc-status-details-bin.
 */
#include "server/rpc/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <grpc/slice.h>

#include "google/protobuf/any.pb-c.h"
#include "google/rpc/error_details.pb-c.h"
#include "google/rpc/status.pb-c.h"
#include "workspace/v1/common.pb-c.h"
#include "server/base/errors.h"
#include "server/base/macros.h"
#include "server/metrics/metrics.h"

#define DOMAIN   "workspaced"
#define TYPE_URL "type.googleapis.com/google.rpc.ErrorInfo"
/* ErrorInfo metadata pairs: the diag's plus the ones added here. */
#define META_MAX   (WS_DIAG_META_MAX + 2)
#define REASON_MAX 64
#define R(name)    WORKSPACE__V1__ERROR_REASON__##name

static const struct errmap {
    int err;
    Workspace__V1__ErrorReason reason;
} errmap[] = {
    {-EXDEV, R(PATH_ESCAPE)},
    {-ELOOP, R(SYMLINK_LOOP)},
    {-WS_ESYMLINK_LEAF, R(SYMLINK_LEAF)},
    {-WS_EBADPATTERN, R(BAD_PATTERN)},
    {-WS_EBADPATH, R(BAD_PATH)},
    {-ENAMETOOLONG, R(BAD_PATH)},
    {-WS_EMALFORMED, R(MALFORMED)},
    {-EINVAL, R(MALFORMED)},
    {-WS_ELIMIT, R(LIMIT)},
    {-WS_EBADREF, R(BAD_REF)},
    {-EFBIG, R(SIZE_CAP)},
    {-WS_EQUOTA, R(QUOTA)},
    {-ENOSPC, R(NO_SPACE)},
    {-EDQUOT, R(NO_SPACE)},
    {-ENOMEM, R(NO_MEMORY)},
    {-EMFILE, R(NO_DESCRIPTORS)},
    {-ENFILE, R(NO_DESCRIPTORS)},
    {-ENOENT, R(NO_SUCH_FILE)},
    {-WS_ENOWORKSPACE, R(NO_SUCH_WORKSPACE)},
    {-ESRCH, R(NO_SUCH_PROCESS)},
    {-WS_EEVICTED, R(WORKSPACE_EVICTED)},
    {-WS_ECAPABILITY, R(CAPABILITY_MISSING)},
    {-WS_EDISABLED, R(PROVIDER_DISABLED)},
    /* UNAVAILABLE instead when the diag says transient. */
    {-WS_EFAILED, R(WORKSPACE_FAILED)},
    {-WS_ECONFLICT, R(CONFLICT)},
    {-WS_ENOMATCH, R(NO_MATCH)},
    {-WS_EMULTIMATCH, R(MULTIPLE_MATCHES)},
    {-WS_ESPECIAL, R(SPECIAL_FILE)},
    {-WS_EHARDLINK, R(HARDLINK)},
    {-EISDIR, R(IS_DIRECTORY)},
    {-ENOTDIR, R(NOT_DIRECTORY)},
    {-ENOTEMPTY, R(NOT_EMPTY)},
    {-EROFS, R(READ_ONLY)},
    {-EBUSY, R(BUSY)},
    /* A concurrent rename kept the resolver from proving a lookup safe, or
     * a file was swapped during an open: nothing happened, a retry may
     * succeed. */
    {-EAGAIN, R(RETRY)},
    {-ESTALE, R(RETRY)},
    {-EEXIST, R(EXISTS)},
    {-EACCES, R(ACCESS_DENIED)},
    {-EPERM, R(ACCESS_DENIED)},
    /* The shell guard (server/guard/guard.h); its malformed input (a bad
     * env name, an unterminated quote) is -WS_EMALFORMED above. */
    {-WS_ENOTALLOWED, R(COMMAND_NOT_ALLOWED)},
    {-WS_EMETACHAR, R(METACHAR)},
    {-WS_EGLOB, R(GLOB)},
    {-WS_EENVDENIED, R(ENV_DENIED)},
    {-WS_ECWDESCAPE, R(CWD_ESCAPE)},
    {-WS_EARGLIMIT, R(ARG_LIMIT)},
    {-WS_ESECRETS, R(SECRETS_MISSING)},
    {-WS_EREQUESTID, R(REQUEST_ID_REUSED)},
    {-WS_EINPUTGAP, R(INPUT_GAP)},
    {-WS_EBADARCHIVE, R(BAD_ARCHIVE)},
    {-WS_ENOSNAPSHOT, R(NO_SUCH_SNAPSHOT)},
    {-WS_ESOURCEPATH, R(SOURCE_PATH_DENIED)},
    /* The operator's policy for the caller's tenant (server/policy). */
    {-WS_EPOLICY, R(POLICY)},
    {-ECANCELED, R(CANCELLED)},
    {-ETIMEDOUT, R(DEADLINE)},
    /* The server stopped taking work (its worker pool, a daemon client)
     * before this call's could run: another server, or this one after a
     * restart, may take it. */
    {-ESHUTDOWN, R(SHUTTING_DOWN)},
    {-ENOSYS, R(UNIMPLEMENTED)},
};

/* Every reason of workspace.v1.ErrorReason (proto/workspace/v1/common.proto):
 * its gRPC code, the one its comment there documents, and what the client is
 * told when the diag carries no message (none names a path). Indexed by the
 * enum, so a reason missing from the proto does not build, and a reason the
 * proto has but this table lacks is caught by the status table test. */
static const struct reason_info {
    grpc_status_code code;
    const char *message;
} reasons[] = {
    [R(PATH_ESCAPE)] = {GRPC_STATUS_INVALID_ARGUMENT, "path escapes the workspace"},
    [R(SYMLINK_LOOP)] = {GRPC_STATUS_INVALID_ARGUMENT, "too many levels of symbolic links"},
    [R(SYMLINK_LEAF)] = {GRPC_STATUS_INVALID_ARGUMENT, "path names a symbolic link"},
    [R(BAD_PATTERN)] = {GRPC_STATUS_INVALID_ARGUMENT, "pattern rejected"},
    [R(BAD_PATH)] = {GRPC_STATUS_INVALID_ARGUMENT, "path is empty, too long or otherwise unusable"},
    [R(MALFORMED)] = {GRPC_STATUS_INVALID_ARGUMENT, "malformed request"},
    [R(LIMIT)] = {GRPC_STATUS_INVALID_ARGUMENT, "requested limit exceeds the server's ceiling"},
    [R(BAD_REF)] = {GRPC_STATUS_INVALID_ARGUMENT, "workspace ref does not verify"},
    [R(SIZE_CAP)] = {GRPC_STATUS_RESOURCE_EXHAUSTED, "size cap exceeded"},
    [R(QUOTA)] = {GRPC_STATUS_RESOURCE_EXHAUSTED, "quota exhausted"},
    [R(NO_SPACE)] = {GRPC_STATUS_RESOURCE_EXHAUSTED, "no space left"},
    [R(NO_MEMORY)] = {GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory"},
    [R(NO_DESCRIPTORS)] = {GRPC_STATUS_RESOURCE_EXHAUSTED, "the server is out of file descriptors"},
    [R(NO_SUCH_FILE)] = {GRPC_STATUS_NOT_FOUND, "no such file or directory"},
    [R(NO_SUCH_WORKSPACE)] = {GRPC_STATUS_NOT_FOUND, "no such workspace"},
    [R(NO_SUCH_PROCESS)] = {GRPC_STATUS_NOT_FOUND, "no such process"},
    [R(WORKSPACE_EVICTED)] = {GRPC_STATUS_NOT_FOUND, "the workspace's storage is gone"},
    [R(CAPABILITY_MISSING)] = {GRPC_STATUS_FAILED_PRECONDITION,
                               "capability not declared or not supported"},
    [R(PROVIDER_DISABLED)] = {GRPC_STATUS_FAILED_PRECONDITION,
                              "the provider is not enabled on this server"},
    [R(WORKSPACE_FAILED)] = {GRPC_STATUS_FAILED_PRECONDITION,
                             "the workspace's backend is not usable"},
    [R(CONFLICT)] = {GRPC_STATUS_FAILED_PRECONDITION, "the file changed (if_match did not match)"},
    [R(NO_MATCH)] = {GRPC_STATUS_FAILED_PRECONDITION, "text not found"},
    [R(MULTIPLE_MATCHES)] = {GRPC_STATUS_FAILED_PRECONDITION, "text found more than once"},
    [R(SPECIAL_FILE)] = {GRPC_STATUS_FAILED_PRECONDITION, "not a regular file or directory"},
    [R(HARDLINK)] = {GRPC_STATUS_FAILED_PRECONDITION, "file has more than one link"},
    [R(IS_DIRECTORY)] = {GRPC_STATUS_FAILED_PRECONDITION, "is a directory"},
    [R(NOT_DIRECTORY)] = {GRPC_STATUS_FAILED_PRECONDITION, "not a directory"},
    [R(NOT_EMPTY)] = {GRPC_STATUS_FAILED_PRECONDITION, "directory not empty"},
    [R(READ_ONLY)] = {GRPC_STATUS_FAILED_PRECONDITION, "read-only"},
    [R(BUSY)] = {GRPC_STATUS_FAILED_PRECONDITION, "busy (a mount point)"},
    [R(RETRY)] = {GRPC_STATUS_UNAVAILABLE,
                  "a concurrent change got in the way; nothing was done, retry"},
    [R(EXISTS)] = {GRPC_STATUS_ALREADY_EXISTS, "already exists"},
    [R(ACCESS_DENIED)] = {GRPC_STATUS_PERMISSION_DENIED, "access denied"},
    [R(COMMAND_NOT_ALLOWED)] = {GRPC_STATUS_PERMISSION_DENIED, "command not allowed"},
    [R(METACHAR)] = {GRPC_STATUS_PERMISSION_DENIED, "shell metacharacter rejected"},
    [R(GLOB)] = {GRPC_STATUS_PERMISSION_DENIED, "glob, brace or tilde form rejected"},
    [R(ENV_DENIED)] = {GRPC_STATUS_PERMISSION_DENIED, "environment variable not allowed"},
    [R(CWD_ESCAPE)] = {GRPC_STATUS_PERMISSION_DENIED, "working directory escapes the workspace"},
    [R(ARG_LIMIT)] = {GRPC_STATUS_PERMISSION_DENIED, "argument or environment limit exceeded"},
    [R(POLICY)] = {GRPC_STATUS_PERMISSION_DENIED, "refused by the operator's policy"},
    [R(CANCELLED)] = {GRPC_STATUS_CANCELLED, "cancelled"},
    [R(DEADLINE)] = {GRPC_STATUS_DEADLINE_EXCEEDED, "deadline exceeded"},
    [R(SHUTTING_DOWN)] = {GRPC_STATUS_UNAVAILABLE, "the server is shutting down"},
    [R(UNIMPLEMENTED)] = {GRPC_STATUS_UNIMPLEMENTED, "not implemented"},
    [R(INTERNAL)] = {GRPC_STATUS_INTERNAL, "internal error"},
    [R(STDIN_CLOSED)] = {GRPC_STATUS_FAILED_PRECONDITION, "stdin is closed"},
    [R(NO_PTY)] = {GRPC_STATUS_FAILED_PRECONDITION, "the process has no terminal"},
    [R(NO_SUCH_SERVICE)] = {GRPC_STATUS_NOT_FOUND, "unknown service"},
    [R(SECRETS_MISSING)] = {GRPC_STATUS_FAILED_PRECONDITION,
                            "the workspace's secrets must be given again (SetSecrets)"},
    [R(REQUEST_ID_REUSED)] = {GRPC_STATUS_FAILED_PRECONDITION,
                              "request_id already used for a different request"},
    [R(INPUT_GAP)] = {GRPC_STATUS_OUT_OF_RANGE, "input offset past the bytes stdin took"},
    [R(BAD_ARCHIVE)] = {GRPC_STATUS_INVALID_ARGUMENT, "archive refused"},
    [R(NO_SUCH_SNAPSHOT)] = {GRPC_STATUS_NOT_FOUND, "no such snapshot"},
    [R(SOURCE_PATH_DENIED)] = {GRPC_STATUS_PERMISSION_DENIED,
                               "source path not allowed by the operator"},
};

const char *ws_rpc_reason_name(Workspace__V1__ErrorReason reason)
{
    const ProtobufCEnumValue *v;

    if (reason == R(ERROR_REASON_UNSPECIFIED))
        return NULL;
    v = protobuf_c_enum_descriptor_get_value(&workspace__v1__error_reason__descriptor, (int)reason);
    return v ? v->name : "INTERNAL";
}

bool ws_rpc_reason_info(Workspace__V1__ErrorReason reason, grpc_status_code *ret_code,
                        const char **ret_message)
{
    if (reason <= R(ERROR_REASON_UNSPECIFIED) || (size_t)reason >= WS_ELEMENTSOF(reasons) ||
        !reasons[reason].message)
        return false;
    if (ret_code)
        *ret_code = reasons[reason].code;
    if (ret_message)
        *ret_message = reasons[reason].message;
    return true;
}

Workspace__V1__ErrorReason ws_rpc_error_reason(int err)
{
    size_t i;

    for (i = 0; i < WS_ELEMENTSOF(errmap); i++)
        if (errmap[i].err == err)
            return errmap[i].reason;
    return R(INTERNAL);
}

void ws_rpc_error_status(int err, grpc_status_code *ret_code, const char **ret_reason)
{
    Workspace__V1__ErrorReason reason = ws_rpc_error_reason(err);
    grpc_status_code code = GRPC_STATUS_INTERNAL;

    (void)ws_rpc_reason_info(reason, &code, NULL);
    if (ret_code)
        *ret_code = code;
    if (ret_reason)
        *ret_reason = ws_rpc_reason_name(reason);
}

/* The message for a reason's name, for a diag without one. */
static const char *default_message(const char *reason)
{
    const ProtobufCEnumValue *v;
    const char *message = "";

    if (!reason)
        return "";
    v = protobuf_c_enum_descriptor_get_value_by_name(&workspace__v1__error_reason__descriptor,
                                                     reason);
    if (v)
        (void)ws_rpc_reason_info((Workspace__V1__ErrorReason)v->value, NULL, &message);
    return message;
}

/* Serializes ErrorInfo{reason, domain, metadata} into a new slice. */
static grpc_slice pack_error_info(const char *reason, char (*keys)[WS_DIAG_KEY_MAX],
                                  char (*values)[WS_DIAG_VALUE_MAX], size_t n)
{
    Google__Rpc__ErrorInfo info = GOOGLE__RPC__ERROR_INFO__INIT;
    Google__Rpc__ErrorInfo__MetadataEntry entries[META_MAX];
    Google__Rpc__ErrorInfo__MetadataEntry *pentries[META_MAX];
    grpc_slice out;
    size_t i;

    for (i = 0; i < n; i++) {
        google__rpc__error_info__metadata_entry__init(&entries[i]);
        entries[i].key = keys[i];
        entries[i].value = values[i];
        pentries[i] = &entries[i];
    }
    info.reason = (char *)reason;
    info.domain = (char *)DOMAIN;
    info.n_metadata = n;
    info.metadata = n ? pentries : NULL;
    out = grpc_slice_malloc(google__rpc__error_info__get_packed_size(&info));
    google__rpc__error_info__pack(&info, GRPC_SLICE_START_PTR(out));
    return out;
}

void ws_rpc_status_build(grpc_status_code code, const char *reason, const char *message,
                         const char *const *keys, const char *const *values, size_t n_meta,
                         struct ws_rpc_status *ret)
{
    char msg[WS_RPC_STATUS_MESSAGE_MAX];
    char why[REASON_MAX];
    char k[META_MAX][WS_DIAG_KEY_MAX];
    char v[META_MAX][WS_DIAG_VALUE_MAX];
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    Google__Protobuf__Any *pany = &any;
    Google__Rpc__Status st = GOOGLE__RPC__STATUS__INIT;
    grpc_slice info, details;
    size_t i, n = 0;

    /* Everything that reaches the client is valid UTF-8 (a C++ or Go client
     * refuses to parse a Status whose strings are not). */
    ws_rpc_utf8_copy(msg, sizeof(msg), message ? message : default_message(reason), SIZE_MAX);
    ws_rpc_utf8_copy(why, sizeof(why), reason, SIZE_MAX);
    for (i = 0; i < n_meta && n < META_MAX; i++) {
        if (!keys[i] || !keys[i][0])
            continue;
        ws_rpc_utf8_copy(k[n], sizeof(k[n]), keys[i], SIZE_MAX);
        ws_rpc_utf8_copy(v[n], sizeof(v[n]), values[i], SIZE_MAX);
        n++;
    }

    /* metrics: every error status the server sends passes here, once. */
    if (code != GRPC_STATUS_OK && reason)
        ws_metrics_rejected(why);
    info = pack_error_info(why, k, v, n);
    any.type_url = (char *)TYPE_URL;
    any.value.len = GRPC_SLICE_LENGTH(info);
    any.value.data = GRPC_SLICE_START_PTR(info);
    st.code = (int32_t)code;
    st.message = msg;
    st.n_details = 1;
    st.details = &pany;
    details = grpc_slice_malloc(google__rpc__status__get_packed_size(&st));
    google__rpc__status__pack(&st, GRPC_SLICE_START_PTR(details));
    grpc_slice_unref(info);

    ret->code = code;
    ret->message = grpc_slice_from_copied_string(msg);
    ret->details = details;
}

void ws_rpc_status_from_error(int err, const struct ws_diag *d, struct ws_rpc_status *ret)
{
    const char *keys[META_MAX], *values[META_MAX];
    char errname[32];
    grpc_status_code code;
    const char *reason;
    size_t n = 0;
    int i, n_diag;

    ws_rpc_error_status(err, &code, &reason);

    n_diag = d ? d->n_meta : 0;
    if (n_diag > WS_DIAG_META_MAX)
        n_diag = WS_DIAG_META_MAX;
    for (i = 0; i < n_diag; i++) {
        /* The diag's arrays are fixed-size; do not trust a terminator. */
        if (memchr(d->key[i], 0, WS_DIAG_KEY_MAX) && memchr(d->value[i], 0, WS_DIAG_VALUE_MAX)) {
            keys[n] = d->key[i];
            values[n] = d->value[i];
            n++;
        }
    }

    if (err == -WS_EFAILED) {
        bool transient = d && d->transient;
        code = transient ? GRPC_STATUS_UNAVAILABLE : GRPC_STATUS_FAILED_PRECONDITION;
        keys[n] = "transient";
        values[n] = transient ? "true" : "false";
        n++;
    } else if ((code == GRPC_STATUS_INTERNAL || err == -EMFILE || err == -ENFILE) && err < 0 &&
               err > -WS_ERR_BASE) {
        /* The errno's name helps whoever reads the client's logs and says
         * nothing about the host; for descriptors it says whose limit ran
         * out (EMFILE the server's, ENFILE the host's). */
        const char *name = strerrorname_np(-err);
        if (name)
            snprintf(errname, sizeof(errname), "%s", name);
        else
            snprintf(errname, sizeof(errname), "%d", -err);
        keys[n] = "errno";
        values[n] = errname;
        n++;
    }

    ws_rpc_status_build(code, reason,
                        d && memchr(d->message, 0, sizeof(d->message)) && d->message[0] ? d->message
                                                                                        : NULL,
                        keys, values, n, ret);
}
