/* Error numbers shared by every layer below the RPC layer.
 *
 * Functions return >= 0 on success or a negated error number: either a
 * kernel errno (-ENOENT, -EXDEV, ...) or one of the project's own numbers
 * below, which sit above the kernel's range so they never collide. The RPC
 * layer alone turns them into a gRPC status and an ErrorInfo reason (one
 * table, server/rpc/status.c).
 *
 * Kernel errnos with a fixed meaning here:
 *   EXDEV   the path escapes the workspace          -> PATH_ESCAPE
 *   ELOOP   a symlink loop inside the path          -> SYMLINK_LOOP
 *   ENOENT  no such file                            -> NO_SUCH_FILE
 *   EISDIR / ENOTDIR / ENOTEMPTY / EEXIST           -> IS_DIRECTORY / NOT_DIRECTORY /
 *                                                      NOT_EMPTY / EXISTS
 *   ENAMETOOLONG                                    -> BAD_PATH
 *   EINVAL                                          -> MALFORMED
 *   EFBIG   over the file size cap                  -> SIZE_CAP
 *   ECANCELED the client went away                  -> CANCELLED
 */
#ifndef WS_BASE_ERRORS_H
#define WS_BASE_ERRORS_H

#include <stddef.h>

enum {
    WS_ERR_BASE = 4096,
    WS_ESYMLINK_LEAF, /* last component is a symlink */
    WS_ESPECIAL,      /* FIFO, socket or device */
    WS_EHARDLINK,     /* write to a file with st_nlink > 1 */
    WS_ECONFLICT,     /* if_match did not match */
    WS_ENOMATCH,      /* edit: old_text not found */
    WS_EMULTIMATCH,   /* edit: old_text found more than once */
    WS_EBADPATTERN,   /* glob or regex pattern rejected */
    WS_EBADPATH,      /* empty, overlong or otherwise unusable path */
    WS_EMALFORMED,    /* request violates the API contract */
    WS_ELIMIT,        /* a requested limit exceeds the server's ceiling */
    WS_EQUOTA,        /* a server quota is exhausted */
    WS_ECAPABILITY,   /* capability not declared or not supported */
    WS_ENOWORKSPACE,  /* unknown or closed workspace id */
    WS_EEVICTED,      /* the workspace's storage is gone */
    WS_EFAILED,       /* the provider's backend is not usable */
    WS_EBADREF,       /* ref does not verify */
    WS_EINTERNAL,     /* a bug or an unexpected host failure */
    WS_ENOTALLOWED,   /* shell guard: command not in the allowlist */
    WS_EMETACHAR,     /* shell guard: shell metacharacter or control byte */
    WS_EGLOB,         /* shell guard: glob, brace or tilde form */
    WS_EENVDENIED,    /* shell guard: environment variable on the denylist */
    WS_ECWDESCAPE,    /* shell guard: cwd escapes the workspace */
    WS_EARGLIMIT,     /* shell guard: argument or environment limit exceeded */
    WS_EDISABLED,     /* the provider is not enabled on this server */
    WS_EPOLICY,       /* refused by the operator's policy for the tenant */
    WS_ESECRETS,      /* the workspace's secrets are not held (a restart) */
    WS_EREQUESTID,    /* Open: request_id reused for another request */
    WS_EINPUTGAP,     /* SendInput: offset past what stdin took */
    WS_EBADARCHIVE,   /* WriteArchive: an entry or the stream is refused */
    WS_ENOSNAPSHOT,   /* unknown snapshot id (or another tenant's) */
    WS_ESOURCEPATH,   /* Open from_path outside --source-path-allow */
    WS_ERR_END,
};

/* Optional detail that goes with an error: a message for humans (never a
 * host path) and a few metadata pairs for machines. Functions that can
 * produce detail take a `struct ws_diag *` that may be NULL. */
#define WS_DIAG_MESSAGE_MAX 256
#define WS_DIAG_META_MAX    4
#define WS_DIAG_KEY_MAX     32
#define WS_DIAG_VALUE_MAX   128

struct ws_diag {
    char message[WS_DIAG_MESSAGE_MAX];
    int n_meta;
    char key[WS_DIAG_META_MAX][WS_DIAG_KEY_MAX];
    char value[WS_DIAG_META_MAX][WS_DIAG_VALUE_MAX];
    /* WS_EFAILED only: the condition may clear by itself (UNAVAILABLE). */
    int transient;
};

/* printf-style message; truncates. Accepts NULL diag. */
void ws_diag_set(struct ws_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Adds a metadata pair (dropped when full). Accepts NULL diag. */
void ws_diag_meta(struct ws_diag *d, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
