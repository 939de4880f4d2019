/* Private to //server/vfs:ops: the pieces the generic operations share
 * (the fsops struct, a sorted iterative directory walker, compiled glob
 * patterns, write-session internals). Not for use outside this library.
 */
#ifndef WS_VFS_INTERNAL_H
#define WS_VFS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/base/errors.h"
#include "server/vfs/ops.h"
#include "server/vfs/vfs.h"

struct ws_fsops {
    struct ws_vfs *fs;
    /* Serializes commits (and the check just before each that the target
     * is still the one hashed or read). Never held while hashing. */
    pthread_mutex_t commit_lock;
    /* Commits through this ws_fsops so far: written under commit_lock,
     * read without it (atomic builtins) before hashing, so a change made
     * through the API in between is seen even when the target looks the
     * same (same size, an mtime within the same clock tick). */
    uint64_t commits;
    /* Changes hold it shared, a freeze exclusively (writer-preferring, so
     * a stream of changes cannot keep a snapshot waiting for ever). */
    pthread_rwlock_t change_lock;
    /* Freezes held or waited for: ws_fsops_frozen(). */
    atomic_int freezers;
};

/* ---- paths ---- */

/* Spells a workspace-relative path without empty and "." components into
 * buf; ".." components stay (only the resolver knows where they lead once
 * a symlink is involved). The root is "". Returns the length, -EXDEV when
 * ".." would climb above the root lexically, -WS_EBADPATH when it does not
 * fit (`size` includes the NUL). */
int ws_path_normalize(const char *path, char *buf, size_t size);

/* The vfs spelling of a normalized path: "" becomes ".". */
static inline const char *ws_path_vfs(const char *normalized)
{
    return normalized[0] ? normalized : ".";
}

/* ---- budgets ---- */

/* Bytes hashed or read between two checks of a ctl. */
#define WS_BUDGET_CHECK_BYTES (1024 * 1024)
/* Directory entries between two checks of a ctl (a power of two). */
#define WS_BUDGET_CHECK_ENTRIES 256

/* ws_work_ctl_check of the budget's ctl; 0 for a NULL budget or ctl. */
int ws_budget_check(const struct ws_budget *b);

/* ---- hashing ---- */

void ws_sha256_hex(const unsigned char digest[32], char ret_hex[WS_SHA256_HEX_LEN + 1]);
/* Accepts 64 hex digits in either case and stores them lowercase; else
 * -WS_EMALFORMED. */
int ws_sha256_parse(const char *in, char ret_hex[WS_SHA256_HEX_LEN + 1]);
/* Hashes an open file from offset 0 to its end, checking `ctl` (may be
 * NULL) every WS_BUDGET_CHECK_BYTES. -EFBIG once more than max_size bytes
 * were read (0: no bound), so a file that keeps growing ends too. */
int ws_sha256_open_file(struct ws_vfs *fs, struct ws_vfs_file *f, uint64_t max_size,
                        const struct ws_work_ctl *ctl, char ret_hex[WS_SHA256_HEX_LEN + 1]);

/* ---- writes ---- */

/* Commits a session without an if_match (-EINVAL for one with) for a
 * caller that already holds ops->commit_lock, and counts the commit. */
int ws_write_commit_held(struct ws_write_session *s, struct ws_write_result *ret);

/* The commit count to compare with after hashing: read before the target
 * is opened. */
static inline uint64_t ws_fsops_commits(struct ws_fsops *ops)
{
    return __atomic_load_n(&ops->commits, __ATOMIC_ACQUIRE);
}

/* Under ops->commit_lock: is `path` still the file that was opened as
 * `was` when the commit count was `commits`? A mismatch only costs a
 * second try, so every field that a replace or an in-place write changes
 * is compared. */
bool ws_target_unchanged(struct ws_fsops *ops, const char *path, uint64_t commits,
                         const struct ws_stat *was);

/* ---- walking ---- */

/* Longest path a walk can build: a base path plus WS_LIST_DEPTH_MAX
 * components below it. */
#define WS_WALK_PATH_MAX (WS_VFS_PATH_MAX + (WS_LIST_DEPTH_MAX + 1) * (WS_VFS_NAME_MAX + 1))
/* Entries one directory may hold when all of them must be kept (to sort
 * them) and no budget says fewer; more is -WS_ELIMIT. */
#define WS_WALK_DIR_MAX 1000000

struct ws_walk;

struct ws_walk_entry {
    const char *path; /* workspace-relative, NUL-terminated; valid until the next ws_walk_next */
    size_t path_len;
    const char *name; /* last component of path */
    size_t name_len;
    enum ws_ftype type;     /* as readdir saw it; may be WS_FT_UNKNOWN */
    unsigned depth;         /* 1 for the entries of the walk's root */
    struct ws_vfs_dir *dir; /* the entry's parent, for the *_at operations */
};

/* Starts a walk of the directory `open_path` (as the client gave it, so it
 * resolves exactly as in every other operation), naming entries below
 * `base` (its normalized spelling, "" = root). Each
 * directory's entries come sorted by name (byte order); a directory's
 * contents follow it only when the caller asks with ws_walk_descend.
 * `keep` > 0 keeps only the `keep` smallest names of the directory (bounded
 * memory when the caller cannot use more); 0 keeps all, up to
 * WS_WALK_DIR_MAX.
 *
 * `budget` (NULL: none; the walk keeps the pointer, so it must outlive
 * the walk) bounds the names read in all (max_entries) and the names kept
 * per directory (dir_names_max, the smallest ones, like `keep`), and its
 * ctl is checked every WS_BUDGET_CHECK_ENTRIES names read or returned.
 * Once max_entries names were read, nothing more is read: the names
 * already held are still returned, ws_walk_descend does nothing, and
 * ws_walk_truncated says so. */
int ws_walk_open(struct ws_vfs *fs, const char *open_path, const char *base, size_t keep,
                 const struct ws_budget *budget, struct ws_walk **ret);
/* 1 and *ret filled, 0 at the end, or -errno (-ECANCELED, -ETIMEDOUT from
 * the budget's ctl). */
int ws_walk_next(struct ws_walk *w, struct ws_walk_entry *ret);
/* Descends into the directory last returned by ws_walk_next: its entries
 * come next. -ENOTDIR when it is not (or no longer) a directory,
 * -WS_ELIMIT past WS_LIST_DEPTH_MAX levels. Returns 0 without descending
 * once the budget's max_entries is spent. */
int ws_walk_descend(struct ws_walk *w, size_t keep);
/* Whether the budget left out names: max_entries was reached with names
 * still unread, or a directory held more than dir_names_max. */
bool ws_walk_truncated(const struct ws_walk *w);
/* Accepts NULL. */
void ws_walk_free(struct ws_walk *w);

/* Errors on one entry that a walk skips rather than fails on: the entry
 * vanished, changed type or is not readable. */
bool ws_walk_skippable(int err);

/* ---- glob patterns ---- */

/* A pattern compiled into components, matched as an NFA whose state is a
 * bitset of "next component to match" positions (one uint64_t word per 64
 * positions, ws_globpat_words of them). */
struct ws_globpat;

int ws_globpat_compile(const char *pattern, struct ws_globpat **ret);
void ws_globpat_free(struct ws_globpat *p);
size_t ws_globpat_words(const struct ws_globpat *p);
void ws_globpat_start(const struct ws_globpat *p, uint64_t *ret_state);
/* State after matching one more path component `name`. */
void ws_globpat_step(const struct ws_globpat *p, const uint64_t *state, const char *name,
                     uint64_t *ret_state);
/* The path so far matches the whole pattern. */
bool ws_globpat_accepts(const struct ws_globpat *p, const uint64_t *state);
/* Some longer path could still match (worth descending). */
bool ws_globpat_alive(const struct ws_globpat *p, const uint64_t *state);

#endif
