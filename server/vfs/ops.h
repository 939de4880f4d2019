/* File operations built once on top of the vfs interface: conditional
 * atomic writes with a running SHA-256, edit, recursive listing, glob and
 * grep. They never follow symlinks while walking, walk iteratively (an
 * explicit stack, no recursion) and bound every count a client controls.
 *
 * Thread safety: the functions take the workspace's `struct ws_fsops`
 * which serializes the commit step of writes and edits; everything else,
 * including the hashing an if_match needs, runs concurrently.
 *
 * Work budgets: the slow operations (walks, grep, the hashing behind
 * if_match) also come in a form that takes a `struct ws_budget`, which
 * bounds the work one request may do and lets its caller cancel it. A NULL
 * budget bounds nothing beyond the fixed limits below.
 */
#ifndef WS_VFS_OPS_H
#define WS_VFS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/base/errors.h"
#include "server/vfs/vfs.h"

#define WS_SHA256_HEX_LEN 64

struct ws_work_ctl; /* server/work/pool.h */

/* ---- work budgets ---- */

/* Defaults for a request's budget (the server's configuration may change
 * them). */
#define WS_BUDGET_DEFAULT_MAX_ENTRIES   1000000
#define WS_BUDGET_DEFAULT_CPU_NS        (10LL * 1000000000LL)
#define WS_BUDGET_DEFAULT_DIR_NAMES_MAX 100000

/* What one request may spend. The struct is read during the call that
 * takes it (ws_grep_start copies it); `ctl` must stay valid for as long as
 * the work runs (for grep, until ws_grep_free).
 *
 * A budget that runs out is not an error: the operation returns what it
 * found, with truncated = true and the reason. A stopped ctl is: the
 * operation returns -ECANCELED (cancelled) or -ETIMEDOUT (deadline
 * passed), checked every 256 directory entries read or reported, every
 * 1 MiB hashed or read, and in a grep before a PCRE2 call once some tens
 * of microseconds went by since the last look (and at the start of each
 * ws_grep_next). */
struct ws_budget {
    /* NULL: never cancelled, no deadline. */
    const struct ws_work_ctl *ctl;
    /* Directory entries a walk reads in all (ListDir, Glob, grep's file
     * walk); 0: no bound. */
    uint64_t max_entries;
    /* Grep only: CPU time of the threads that run the search, summed over
     * the whole request (every ws_grep_next call); 0: no bound. Looked
     * at between PCRE2 calls, and under a budget a call tries at most 64
     * start positions of a line (or 4,096 of a chunk, with a lower limit
     * per position), so a search overruns it by about one line's cost. */
    int64_t cpu_budget_ns;
    /* Names of one directory a walk holds in memory at once; a directory
     * with more is walked through its smallest names only. 0: every name,
     * up to a fixed 1,000,000 (more is -WS_ELIMIT, as without a budget). */
    size_t dir_names_max;
};

/* Why a listing, glob or grep stopped before the end. */
enum ws_trunc_reason {
    WS_TRUNC_NONE = 0,
    WS_TRUNC_MAX_RESULTS,    /* the request's own limit */
    WS_TRUNC_ENTRIES_BUDGET, /* budget max_entries or dir_names_max */
    WS_TRUNC_TIME_BUDGET,    /* budget cpu_budget_ns */
};

/* The reason as the API spells it: "", "max_results", "entries_budget",
 * "time_budget". */
const char *ws_trunc_reason_name(enum ws_trunc_reason r);

/* Per-workspace state of the generic layer. */
struct ws_fsops;

/* Wraps `fs` (not owned). Returns 0 or -ENOMEM. */
int ws_fsops_new(struct ws_vfs *fs, struct ws_fsops **ret);
/* Accepts NULL. */
void ws_fsops_free(struct ws_fsops *ops);
struct ws_vfs *ws_fsops_vfs(struct ws_fsops *ops);

/* Changes through the file API and consistent copies of the whole tree.
 * Every operation that changes the tree through the API (the commit of a
 * write or an edit, mkdir, remove, move, an archive's publish) runs
 * between ws_fsops_change_begin and ws_fsops_change_end; a snapshot runs
 * between ws_fsops_freeze and ws_fsops_thaw, which waits for the changes
 * in progress and holds new ones back until the thaw. Changes run
 * concurrently with each other (their own locks order them). */
void ws_fsops_change_begin(struct ws_fsops *ops);
void ws_fsops_change_end(struct ws_fsops *ops);
void ws_fsops_freeze(struct ws_fsops *ops);
void ws_fsops_thaw(struct ws_fsops *ops);
/* Whether a freeze holds or waits: a change begun now would wait for a
 * whole snapshot. The RPC layer then runs the change on a thread that
 * may wait, not on one that serves every other call. */
bool ws_fsops_frozen(struct ws_fsops *ops);

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
 * at begin. `ret` may be NULL.
 *
 * The current content is hashed before the commit lock is taken, and
 * under it the target is checked to be the one hashed (no commit through
 * this ws_fsops since, same type, size, mtime and link count); if it is
 * not, it is hashed once more, and a second change is -WS_ECONFLICT
 * without "actual_sha256" (the content it settles on is not known). A
 * target larger than the session's max_size is -EFBIG (metadata "limit",
 * "field" = "if_match") without being read. */
int ws_write_commit(struct ws_write_session *s, struct ws_diag *d, struct ws_write_result *ret);
/* The same, hashing within `budget` (only its ctl applies; NULL: none). */
int ws_write_commit_within(struct ws_write_session *s, const struct ws_budget *budget,
                           struct ws_diag *d, struct ws_write_result *ret);
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
    /* Only its ctl applies (reading and hashing); NULL: none. */
    const struct ws_budget *budget;
};

struct ws_edit_result {
    uint32_t replacements;
    struct ws_stat st;
    char sha256[WS_SHA256_HEX_LEN + 1];
};

/* -WS_ENOMATCH / -WS_EMULTIMATCH with metadata "matches"; -EFBIG past
 * max_size (the file or the result; metadata "limit"), a file over it
 * refused before it is read; -WS_EMALFORMED for an empty old_text;
 * -WS_ECONFLICT as for writes. Occurrences are counted left to right
 * without overlap. The file is read, hashed and edited outside the commit
 * lock; under it the target is checked to be the one read (as for
 * writes), and if it is not the edit starts over, so no write through the
 * same ws_fsops is lost. An edit with if_match that finds the file changed
 * twice is -WS_ECONFLICT; one without reads under the lock on its third
 * try. The file's mode is kept. The old content is kept on every error.
 * `ret` may be NULL. */
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
/* ws_list within `budget` (NULL: none). *ret_reason (may be NULL) says
 * why the listing is truncated, WS_TRUNC_NONE when it is not. */
int ws_list_within(struct ws_fsops *ops, const char *path, unsigned depth, unsigned max_entries,
                   const struct ws_budget *budget, ws_entry_cb cb, void *userdata,
                   bool *ret_truncated, enum ws_trunc_reason *ret_reason);

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
/* ws_glob within `budget` (NULL: none); *ret_reason as for
 * ws_list_within. */
int ws_glob_within(struct ws_fsops *ops, const char *base, const char *pattern,
                   unsigned max_results, const struct ws_budget *budget, ws_entry_cb cb,
                   void *userdata, bool *ret_truncated, enum ws_trunc_reason *ret_reason);

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
    /* NULL: none. Copied by ws_grep_start; its ctl must outlive the
     * grep. */
    const struct ws_budget *budget;
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
    enum ws_trunc_reason truncated_reason; /* WS_TRUNC_NONE unless truncated */
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
 * if more may follow, 0 when the search is complete (or truncated, also
 * by its budget), -ECANCELED / -ETIMEDOUT when the budget's ctl stopped
 * (and again on every later call). It
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

/* ---- leftovers ---- */

/* Removes every transient entry of the server's (ws_vfs_transient_name:
 * a write's temporary, an upload's staging or trash, a restore's trees)
 * anywhere in the tree, never following a symlink; for a storage the
 * server takes back after a restart, before any call sees it, since a
 * server killed mid-call leaves them. Returns 0 (*ret_removed, may be
 * NULL, counts them) or the first error. */
int ws_vfs_sweep_transient(struct ws_vfs *fs, uint64_t *ret_removed);

/* ---- reading ---- */

/* Lowercase hex SHA-256 of a whole file (used by if_match). */
int ws_sha256_file(struct ws_vfs *fs, const char *path, char ret_hex[WS_SHA256_HEX_LEN + 1]);

#endif
