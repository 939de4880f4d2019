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
#include "server/base/errors.h"
#include "server/base/macros.h"
#include "server/metrics/metrics.h"

#define DOMAIN   "workspaced"
#define TYPE_URL "type.googleapis.com/google.rpc.ErrorInfo"
/* ErrorInfo metadata pairs: the diag's plus the ones added here. */
#define META_MAX   (WS_DIAG_META_MAX + 2)
#define REASON_MAX 64

static const struct errmap {
    int err;
    grpc_status_code code;
    const char *reason;
} errmap[] = {
    {-EXDEV, GRPC_STATUS_INVALID_ARGUMENT, "PATH_ESCAPE"},
    {-ELOOP, GRPC_STATUS_INVALID_ARGUMENT, "SYMLINK_LOOP"},
    {-WS_ESYMLINK_LEAF, GRPC_STATUS_INVALID_ARGUMENT, "SYMLINK_LEAF"},
    {-WS_EBADPATTERN, GRPC_STATUS_INVALID_ARGUMENT, "BAD_PATTERN"},
    {-WS_EBADPATH, GRPC_STATUS_INVALID_ARGUMENT, "BAD_PATH"},
    {-ENAMETOOLONG, GRPC_STATUS_INVALID_ARGUMENT, "BAD_PATH"},
    {-WS_EMALFORMED, GRPC_STATUS_INVALID_ARGUMENT, "MALFORMED"},
    {-EINVAL, GRPC_STATUS_INVALID_ARGUMENT, "MALFORMED"},
    {-WS_ELIMIT, GRPC_STATUS_INVALID_ARGUMENT, "LIMIT"},
    {-WS_EBADREF, GRPC_STATUS_INVALID_ARGUMENT, "BAD_REF"},
    {-EFBIG, GRPC_STATUS_RESOURCE_EXHAUSTED, "SIZE_CAP"},
    {-WS_EQUOTA, GRPC_STATUS_RESOURCE_EXHAUSTED, "QUOTA"},
    {-ENOSPC, GRPC_STATUS_RESOURCE_EXHAUSTED, "NO_SPACE"},
    {-EDQUOT, GRPC_STATUS_RESOURCE_EXHAUSTED, "NO_SPACE"},
    {-ENOMEM, GRPC_STATUS_RESOURCE_EXHAUSTED, "NO_MEMORY"},
    {-ENOENT, GRPC_STATUS_NOT_FOUND, "NO_SUCH_FILE"},
    {-WS_ENOWORKSPACE, GRPC_STATUS_NOT_FOUND, "NO_SUCH_WORKSPACE"},
    {-ESRCH, GRPC_STATUS_NOT_FOUND, "NO_SUCH_PROCESS"},
    {-WS_EEVICTED, GRPC_STATUS_NOT_FOUND, "WORKSPACE_EVICTED"},
    {-WS_ECAPABILITY, GRPC_STATUS_FAILED_PRECONDITION, "CAPABILITY_MISSING"},
    {-WS_EDISABLED, GRPC_STATUS_FAILED_PRECONDITION, "PROVIDER_DISABLED"},
    /* UNAVAILABLE instead when the diag says transient. */
    {-WS_EFAILED, GRPC_STATUS_FAILED_PRECONDITION, "WORKSPACE_FAILED"},
    {-WS_ECONFLICT, GRPC_STATUS_FAILED_PRECONDITION, "CONFLICT"},
    {-WS_ENOMATCH, GRPC_STATUS_FAILED_PRECONDITION, "NO_MATCH"},
    {-WS_EMULTIMATCH, GRPC_STATUS_FAILED_PRECONDITION, "MULTIPLE_MATCHES"},
    {-WS_ESPECIAL, GRPC_STATUS_FAILED_PRECONDITION, "SPECIAL_FILE"},
    {-WS_EHARDLINK, GRPC_STATUS_FAILED_PRECONDITION, "HARDLINK"},
    {-EISDIR, GRPC_STATUS_FAILED_PRECONDITION, "IS_DIRECTORY"},
    {-ENOTDIR, GRPC_STATUS_FAILED_PRECONDITION, "NOT_DIRECTORY"},
    {-ENOTEMPTY, GRPC_STATUS_FAILED_PRECONDITION, "NOT_EMPTY"},
    {-EROFS, GRPC_STATUS_FAILED_PRECONDITION, "READ_ONLY"},
    {-EBUSY, GRPC_STATUS_FAILED_PRECONDITION, "BUSY"},
    /* A concurrent rename kept the resolver from proving a lookup safe, or
     * a file was swapped during an open: nothing happened, a retry may
     * succeed. */
    {-EAGAIN, GRPC_STATUS_UNAVAILABLE, "RETRY"},
    {-ESTALE, GRPC_STATUS_UNAVAILABLE, "RETRY"},
    {-EEXIST, GRPC_STATUS_ALREADY_EXISTS, "EXISTS"},
    {-EACCES, GRPC_STATUS_PERMISSION_DENIED, "ACCESS_DENIED"},
    {-EPERM, GRPC_STATUS_PERMISSION_DENIED, "ACCESS_DENIED"},
    /* The shell guard (server/guard/guard.h); its malformed input (a bad
     * env name, an unterminated quote) is -WS_EMALFORMED above. */
    {-WS_ENOTALLOWED, GRPC_STATUS_PERMISSION_DENIED, "COMMAND_NOT_ALLOWED"},
    {-WS_EMETACHAR, GRPC_STATUS_PERMISSION_DENIED, "METACHAR"},
    {-WS_EGLOB, GRPC_STATUS_PERMISSION_DENIED, "GLOB"},
    {-WS_EENVDENIED, GRPC_STATUS_PERMISSION_DENIED, "ENV_DENIED"},
    {-WS_ECWDESCAPE, GRPC_STATUS_PERMISSION_DENIED, "CWD_ESCAPE"},
    {-WS_EARGLIMIT, GRPC_STATUS_PERMISSION_DENIED, "ARG_LIMIT"},
    /* The operator's policy for the caller's tenant (server/policy). */
    {-WS_EPOLICY, GRPC_STATUS_PERMISSION_DENIED, "POLICY"},
    {-ECANCELED, GRPC_STATUS_CANCELLED, "CANCELLED"},
    {-ETIMEDOUT, GRPC_STATUS_DEADLINE_EXCEEDED, "DEADLINE"},
    /* The server stopped taking work (its worker pool, a daemon client)
     * before this call's could run: another server, or this one after a
     * restart, may take it. */
    {-ESHUTDOWN, GRPC_STATUS_UNAVAILABLE, "SHUTTING_DOWN"},
    {-ENOSYS, GRPC_STATUS_UNIMPLEMENTED, "UNIMPLEMENTED"},
};

/* Said to the client when the diag carries no message. None names a path. */
static const struct {
    const char *reason;
    const char *message;
} default_messages[] = {
    {"PATH_ESCAPE", "path escapes the workspace"},
    {"SYMLINK_LOOP", "too many levels of symbolic links"},
    {"SYMLINK_LEAF", "path names a symbolic link"},
    {"BAD_PATTERN", "pattern rejected"},
    {"BAD_PATH", "path is empty, too long or otherwise unusable"},
    {"MALFORMED", "malformed request"},
    {"LIMIT", "requested limit exceeds the server's ceiling"},
    {"BAD_REF", "workspace ref does not verify"},
    {"SIZE_CAP", "size cap exceeded"},
    {"QUOTA", "quota exhausted"},
    {"NO_SPACE", "no space left"},
    {"NO_MEMORY", "out of memory"},
    {"NO_SUCH_FILE", "no such file or directory"},
    {"NO_SUCH_WORKSPACE", "no such workspace"},
    {"NO_SUCH_PROCESS", "no such process"},
    {"WORKSPACE_EVICTED", "the workspace's storage is gone"},
    {"CAPABILITY_MISSING", "capability not declared or not supported"},
    {"PROVIDER_DISABLED", "the provider is not enabled on this server"},
    {"WORKSPACE_FAILED", "the workspace's backend is not usable"},
    {"CONFLICT", "the file changed (if_match did not match)"},
    {"NO_MATCH", "text not found"},
    {"MULTIPLE_MATCHES", "text found more than once"},
    {"SPECIAL_FILE", "not a regular file or directory"},
    {"HARDLINK", "file has more than one link"},
    {"IS_DIRECTORY", "is a directory"},
    {"NOT_DIRECTORY", "not a directory"},
    {"NOT_EMPTY", "directory not empty"},
    {"READ_ONLY", "read-only"},
    {"BUSY", "busy (a mount point)"},
    {"RETRY", "a concurrent change got in the way; nothing was done, retry"},
    {"EXISTS", "already exists"},
    {"ACCESS_DENIED", "access denied"},
    {"COMMAND_NOT_ALLOWED", "command not allowed"},
    {"METACHAR", "shell metacharacter rejected"},
    {"GLOB", "glob, brace or tilde form rejected"},
    {"ENV_DENIED", "environment variable not allowed"},
    {"CWD_ESCAPE", "working directory escapes the workspace"},
    {"ARG_LIMIT", "argument or environment limit exceeded"},
    {"POLICY", "refused by the operator's policy"},
    {"CANCELLED", "cancelled"},
    {"DEADLINE", "deadline exceeded"},
    {"SHUTTING_DOWN", "the server is shutting down"},
    {"UNIMPLEMENTED", "not implemented"},
    {"INTERNAL", "internal error"},
};

void ws_rpc_error_status(int err, grpc_status_code *ret_code, const char **ret_reason)
{
    grpc_status_code code = GRPC_STATUS_INTERNAL;
    const char *reason = "INTERNAL";
    size_t i;

    for (i = 0; i < WS_ELEMENTSOF(errmap); i++) {
        if (errmap[i].err == err) {
            code = errmap[i].code;
            reason = errmap[i].reason;
            break;
        }
    }
    if (ret_code)
        *ret_code = code;
    if (ret_reason)
        *ret_reason = reason;
}

static const char *default_message(const char *reason)
{
    size_t i;

    if (!reason)
        return "";
    for (i = 0; i < WS_ELEMENTSOF(default_messages); i++)
        if (strcmp(default_messages[i].reason, reason) == 0)
            return default_messages[i].message;
    return "";
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
    } else if (code == GRPC_STATUS_INTERNAL && err < 0 && err > -WS_ERR_BASE) {
        /* The errno's name helps whoever reads the client's logs and says
         * nothing about the host. */
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
