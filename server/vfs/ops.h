/* File operations built once on top of the vfs interface: conditional
 * atomic writes with a running SHA-256, edit, recursive listing, glob and
 * grep. They never follow symlinks while walking, walk iteratively (an
 * explicit stack, no recursion) and bound every count a client controls.
 *
 * Thread safety: the functions take the workspace's `struct ws_fsops`
 * which serializes the check-then-commit step of conditional writes and
 * edits; everything else runs concurrently.
 */
#ifndef WS_VFS_OPS_H
#define WS_VFS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/base/errors.h"
#include "server/vfs/vfs.h"

#define WS_SHA256_HEX_LEN 64

/* Per-workspace state of the generic layer. */
struct ws_fsops;

/* Wraps `fs` (not owned). Returns 0 or -ENOMEM. */
int ws_fsops_new(struct ws_vfs *fs, struct ws_fsops **ret);
/* Accepts NULL. */
void ws_fsops_free(struct ws_fsops *ops);
struct ws_vfs *ws_fsops_vfs(struct ws_fsops *ops);

/* ---- writes ---- */

struct ws_write_request {
    const char *path;
    struct ws_write_opts opts;
    const char *if_match; /* lowercase hex sha256 or NULL/"" */
};

struct ws_write_result {
    struct ws_stat st;
    uint64_t bytes_written;
    char sha256[WS_SHA256_HEX_LEN + 1];
};

struct ws_write_session;

/* Validates the path and opens a writer (vfs write_begin). */
int ws_write_begin(struct ws_fsops *ops, const struct ws_write_request *req, struct ws_diag *d,
                   struct ws_write_session **ret);
/* Appends data; -EFBIG past the size cap (diag metadata "limit"). After an
 * error the session can only be aborted. */
int ws_write_append(struct ws_write_session *s, const void *buf, size_t len, struct ws_diag *d);
/* Checks if_match against the current content (-WS_ECONFLICT with
 * metadata "actual_sha256") and commits, atomically with respect to other
 * writes through the same ws_fsops. Frees the session. An if_match that
 * is not 64 hex digits (either case) is -WS_EMALFORMED, metadata "field",
 * at begin. `ret` may be NULL. */
int ws_write_commit(struct ws_write_session *s, struct ws_diag *d, struct ws_write_result *ret);
/* Frees the session; the old content stays. Accepts NULL. */
void ws_write_abort(struct ws_write_session *s);

/* ---- edit ---- */

struct ws_edit_request {
    const char *path;
    const char *old_text;
    size_t old_len;
    const char *new_text;
    size_t new_len;
    bool replace_all;
    const char *if_match;
    uint64_t max_size;
};

struct ws_edit_result {
    uint32_t replacements;
    struct ws_stat st;
    char sha256[WS_SHA256_HEX_LEN + 1];
};

/* -WS_ENOMATCH / -WS_EMULTIMATCH with metadata "matches"; -EFBIG past
 * max_size (the file or the result; metadata "limit"); -WS_EMALFORMED for
 * an empty old_text; -WS_ECONFLICT as for writes. Occurrences are counted
 * left to right without overlap. The whole read-modify-write holds the
 * commit lock, so no write through the same ws_fsops is lost. The file's
 * mode is kept. The old content is kept on every error. `ret` may be
 * NULL. */
int ws_edit(struct ws_fsops *ops, const struct ws_edit_request *req, struct ws_diag *d,
            struct ws_edit_result *ret);

/* ---- listing, glob ---- */

#define WS_LIST_DEPTH_MAX       64
#define WS_LIST_DEFAULT_ENTRIES 10000
#define WS_LIST_MAX_ENTRIES     100000
#define WS_GLOB_PATTERN_MAX     4096

/* One entry reported by a walk. `path` is workspace-relative and
 * NUL-terminated (it may still contain bytes that are not UTF-8). */
struct ws_entry {
    const char *path;
    size_t path_len;
    struct ws_stat st;
};

/* Called per entry; a negative return stops the walk and is returned. */
typedef int (*ws_entry_cb)(void *userdata, const struct ws_entry *e);

/* Lists `path` down to `depth` levels (0 and 1: its own entries). Each
 * directory's entries sorted by name, a directory's contents right after
 * it. Stops after max_entries (0: default) and sets *ret_truncated.
 * depth > WS_LIST_DEPTH_MAX or max_entries > WS_LIST_MAX_ENTRIES is
 * -WS_ELIMIT. */
int ws_list(struct ws_fsops *ops, const char *path, unsigned depth, unsigned max_entries,
            ws_entry_cb cb, void *userdata, bool *ret_truncated);

/* Matches `pattern` (see filesystem.proto) below `base` ("" or "." for the
 * root). Pattern errors are -WS_EBADPATTERN: empty, absolute, over
 * WS_GLOB_PATTERN_MAX, an unclosed '[', a trailing '\\', a ".."
 * component. Empty and "." components are ignored; "**" never matches a
 * name starting with '.', and a last "**" component also matches the
 * directory it follows (zero components). Walks at most
 * WS_LIST_DEPTH_MAX levels, pruning directories no continuation of the
 * pattern can match. max_results: 0 = WS_LIST_DEFAULT_ENTRIES, over
 * WS_LIST_MAX_ENTRIES is -WS_ELIMIT. */
int ws_glob(struct ws_fsops *ops, const char *base, const char *pattern, unsigned max_results,
            ws_entry_cb cb, void *userdata, bool *ret_truncated);

/* Does `path` (workspace-relative) match the glob `pattern`? 1, 0, or
 * -WS_EBADPATTERN. Used by grep's include filter. */
int ws_glob_match(const char *pattern, const char *path);

/* ---- grep ---- */

#define WS_GREP_PATTERN_MAX     4096
#define WS_GREP_DEFAULT_MATCHES 1000
#define WS_GREP_MAX_MATCHES     100000
#define WS_GREP_LINE_MAX        4096
#define WS_GREP_BINARY_PROBE    8192

/* Matching is per line (as grep): a match never spans a newline, ^ and $
 * are the line's ends. Patterns are UTF-8 (bytes that are not UTF-8 in a
 * file match nothing but do not stop the rest of the line matching).
 * Files are visited in walk order (sorted by name per directory); symlinks
 * and special files are skipped. A line longer than the read chunk
 * (128 KiB) is searched in windows overlapping by 1 KiB: a match longer
 * than that across a window boundary is missed. */
struct ws_grep_request {
    const char *path;    /* "" or "." = root; a directory or a file */
    const char *pattern; /* PCRE2 */
    const char *include; /* glob on the workspace-relative path, or NULL/"" */
    bool ignore_case;
    unsigned max_matches; /* 0 = default */
    unsigned max_depth;   /* 0 = WS_LIST_DEPTH_MAX; 1 = the files directly in path */
};

struct ws_grep_match {
    const char *path;
    size_t path_len;
    uint64_t line_number; /* 1-based */
    const char *line;     /* without the newline, cut at WS_GREP_LINE_MAX */
    size_t line_len;
    bool line_truncated;
};

struct ws_grep_summary {
    uint64_t files_scanned;        /* text files searched */
    uint64_t binary_files_skipped; /* NUL in the first WS_GREP_BINARY_PROBE bytes */
    uint64_t limited_files;        /* stopped by a PCRE2 match/depth/heap limit */
    uint64_t matches;
    bool truncated;
};

/* A grep in progress: created by ws_grep_start, advanced by ws_grep_next
 * so the RPC layer can stream batches without holding a thread for the
 * whole search. */
struct ws_grep;

/* Compiles the pattern (-WS_EBADPATTERN, metadata "offset") and checks the
 * limits (-WS_ELIMIT). */
int ws_grep_start(struct ws_fsops *ops, const struct ws_grep_request *req, struct ws_diag *d,
                  struct ws_grep **ret);
/* Reports up to `batch` matches (0: no limit) through cb, then returns 1
 * if more may follow, 0 when the search is complete (or truncated). It
 * also returns 1 after a bounded amount of work (about 16 MiB read) even
 * with fewer matches, possibly none, so a caller can check for
 * cancellation between calls. The match's strings are valid during the
 * callback only. A negative return from cb stops the call and is returned
 * (that match counts as reported). */
typedef int (*ws_grep_cb)(void *userdata, const struct ws_grep_match *m);
int ws_grep_next(struct ws_grep *g, unsigned batch, ws_grep_cb cb, void *userdata);
void ws_grep_get_summary(const struct ws_grep *g, struct ws_grep_summary *ret);
/* Accepts NULL. */
void ws_grep_free(struct ws_grep *g);

/* ---- reading ---- */

/* Lowercase hex SHA-256 of a whole file (used by if_match). */
int ws_sha256_file(struct ws_vfs *fs, const char *path, char ret_hex[WS_SHA256_HEX_LEN + 1]);

#endif
