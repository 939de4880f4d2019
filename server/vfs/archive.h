/* Whole trees in and out of a workspace as tar (optionally gzip), on top
 * of the vfs table, so every storage gets them.
 *
 * Out (ws_tar_out_*): a pull-based producer. Each ws_tar_out_next call
 * walks on (the confined, sorted, never-following walker of ops.h) and
 * hands back the next stretch of archive bytes, so the RPC layer streams
 * with the client's pace and holds a bounded amount of memory.
 *
 * In (ws_tar_in_*): the archive is read by libarchive from bytes the
 * caller feeds (ws_tar_in_feed, from any thread) while ws_tar_in_run
 * extracts on its own thread into a staging directory beside the target
 * and, only when the whole stream was read and every entry passed,
 * publishes it (ws_tar_in_publish). Nothing is ever created outside the
 * staging directory before the publish, and a failure removes it.
 *
 * libarchive is used only as the tar/gzip codec: every file-system action
 * goes through the vfs and is checked here.
 */
#ifndef WS_VFS_ARCHIVE_H
#define WS_VFS_ARCHIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/base/errors.h"
#include "server/vfs/ops.h"

enum ws_tar_format {
    WS_TAR_PLAIN = 0,
    WS_TAR_GZIP = 1,
};

/* Entries left out of an archive (out), or changed on the way in. */
struct ws_tar_skip {
    char *path;
    const char *reason; /* "special", "unreadable", "changed", "setuid" */
};

/* Kept skips: the first WS_TAR_SKIPS_MAX; skipped_more counts the rest. */
#define WS_TAR_SKIPS_MAX 1000

struct ws_tar_stats {
    uint64_t entries, files, directories, symlinks, hardlinks, bytes;
    struct ws_tar_skip *skips;
    size_t n_skips;
    uint64_t skipped_more;
    bool truncated;
};

/* ---- out ---- */

struct ws_tar_out_request {
    const char *path; /* "." for the root */
    enum ws_tar_format format;
    const char *const *include; /* globs on the path relative to `path` */
    size_t n_include;
    const char *const *exclude;
    size_t n_exclude;
    /* Walk budget (NULL: the defaults); its ctl stops the producer. */
    const struct ws_budget *budget;
};

struct ws_tar_out;

/* Checks the request (path as ReadFile: -ENOENT, -WS_ESYMLINK_LEAF...;
 * globs: -WS_EBADPATTERN with metadata "pattern") and starts. */
int ws_tar_out_new(struct ws_fsops *ops, const struct ws_tar_out_request *req, struct ws_diag *d,
                   struct ws_tar_out **ret);
/* Produces the next stretch of archive bytes (about `want` bytes, at
 * least one byte unless the archive is complete) into *ret_data (valid
 * until the next call). Returns 1 with data, 0 when the archive is
 * complete (no more data; the stats are final), or -errno. */
int ws_tar_out_next(struct ws_tar_out *t, size_t want, const void **ret_data, size_t *ret_len);
const struct ws_tar_stats *ws_tar_out_stats(const struct ws_tar_out *t);
void ws_tar_out_free(struct ws_tar_out *t);

/* ---- in ---- */

enum ws_tar_overwrite {
    WS_TAR_OVERWRITE_NONE = 0,
    WS_TAR_OVERWRITE_REPLACE = 1,
    WS_TAR_OVERWRITE_MERGE = 2,
};

#define WS_TAR_IN_MAX_ENTRIES 100000
#define WS_TAR_IN_MAX_BYTES   (UINT64_C(4) << 30)
/* A gzip stream may not unpack past this with a ratio above the next. */
#define WS_TAR_IN_RATIO_FLOOR (UINT64_C(64) << 20)
#define WS_TAR_IN_MAX_RATIO   200
/* Bytes fed but not yet read by the extractor, past which the feeder
 * should wait (ws_tar_in_feed returns 0 instead of 1). */
#define WS_TAR_IN_QUEUE_HIGH (8u << 20)

/* Checks the extraction makes against the tenant's byte quota: called with
 * the total content bytes so far; a negative return stops the extraction
 * and is its error. */
typedef int (*ws_tar_quota_fn)(void *userdata, uint64_t bytes, struct ws_diag *d);

struct ws_tar_in_request {
    const char *path;
    enum ws_tar_format format;
    enum ws_tar_overwrite overwrite;
    bool create_parents;
    uint64_t max_file_size; /* 0: none */
    ws_tar_quota_fn quota;  /* NULL: none */
    void *quota_userdata;
};

struct ws_tar_in;

/* Checks the target (path rules; "." needs MERGE; NONE and an existing
 * path: -EEXIST; MERGE onto a non-directory: -ENOTDIR) and makes the
 * staging directory. */
int ws_tar_in_new(struct ws_fsops *ops, const struct ws_tar_in_request *req, struct ws_diag *d,
                  struct ws_tar_in **ret);
/* Queues bytes for the extractor (copied). Returns 1 when the caller may
 * feed more at once, 0 when the queue is over WS_TAR_IN_QUEUE_HIGH (the
 * `drained` callback fires once it has room again), or -errno once the
 * extraction failed or stopped. */
int ws_tar_in_feed(struct ws_tar_in *t, const void *data, size_t len);
/* The end of the stream. */
void ws_tar_in_end(struct ws_tar_in *t);
/* Stops the extraction (a cancelled upload): ws_tar_in_run returns
 * -ECANCELED. */
void ws_tar_in_cancel(struct ws_tar_in *t);
/* Called (from the extractor's thread) when the queue went below half of
 * WS_TAR_IN_QUEUE_HIGH after a feed returned 0. */
void ws_tar_in_set_drained(struct ws_tar_in *t, void (*drained)(void *userdata), void *userdata);
/* Extracts everything into the staging directory, blocking for bytes as
 * they are fed. 0 when the whole archive is staged; else the error (its
 * detail in d: -WS_EBADARCHIVE with "entry" and "problem", -EFBIG with
 * "entry" and "limit", -WS_ELIMIT with "field" and "limit", the quota's
 * error). Call once. */
int ws_tar_in_run(struct ws_tar_in *t, struct ws_diag *d);
/* Publishes what ws_tar_in_run staged (as the overwrite policy says),
 * inside a change of the file API. */
int ws_tar_in_publish(struct ws_tar_in *t, struct ws_diag *d);
const struct ws_tar_stats *ws_tar_in_stats(const struct ws_tar_in *t);
/* Removes the staging directory now, if still there (a failed run). */
void ws_tar_in_discard(struct ws_tar_in *t);
/* Removes the staging directory if still there, and frees. */
void ws_tar_in_free(struct ws_tar_in *t);

#endif
