/* Snapshots: point-in-time copies of workspace trees in a content-addressed
 * store in the state directory, and the tree copies that fork, restore and
 * shadow workspaces are made of.
 *
 * Layout (under <state>/snapshots, 0700, the server's alone):
 *   objects/ab/cdef...   one file per distinct content, named by its
 *                        SHA-256 (hex, the first two digits a directory)
 *   manifests/<id>       the tree of snapshot <id>, one entry a line
 *   meta/<id>            its description (JSON); written last, so a
 *                        snapshot exists once its meta does
 *   tmp/                 objects and files being written (emptied at start)
 * Every file is written to a temporary name and renamed into place; the
 * objects of a snapshot are flushed (syncfs) before its manifest, and the
 * manifest and the meta are fsync'ed before their rename. Objects are
 * always copies (a reflink where the file system makes one: FICLONE from
 * the storage's host fd), never hard links of workspace files: a command
 * could otherwise change stored content in place, and the file API
 * refuses to write a file with several links.
 *
 * The manifest is read and written as a stream, so a tree of any size
 * costs memory only for one directory handle per level (at most
 * WS_SNAP_DEPTH_MAX levels) and a line. Delete collects the hashes of the
 * deleted snapshot (at most WS_SNAP_ENTRIES_MAX) and streams every other
 * manifest to find which of them are still held; the rest are removed.
 *
 * Locks: the store's lock (the list) is a leaf: no call into the registry
 * or a storage is made under it. Object lifetimes: a copy into the store
 * and a copy out of it hold `gc` shared, a delete's sweep exclusively.
 *
 * Thread safety: every function may be called from any thread. Snapshots
 * are reference counted and immutable once committed.
 */
#ifndef WS_REGISTRY_SNAPSHOTS_H
#define WS_REGISTRY_SNAPSHOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/base/errors.h"
#include "server/vfs/vfs.h"

#define WS_SNAP_ID_PREFIX "snap-"
#define WS_SNAP_ID_LEN    31 /* "snap-" + 26 base32 */
/* Snapshots one tenant may hold when the operator sets no cap. */
#define WS_SNAP_DEFAULT_MAX 100
/* Directory levels a copy descends, and entries one tree may have. */
#define WS_SNAP_DEPTH_MAX   256
#define WS_SNAP_ENTRIES_MAX 10000000
/* A meta file is never larger. */
#define WS_SNAP_META_MAX (256 * 1024)

struct ws_snapstore;

struct ws_snap_kv {
    char *key;
    char *value;
};

/* One snapshot. The fields are fixed once it is committed. */
struct ws_snap {
    char id[WS_SNAP_ID_LEN + 1];
    char *name; /* "" when none */
    char *tenant;
    char *workspace_id;
    char *provider;
    struct ws_snap_kv *labels;
    size_t n_labels;
    struct ws_snap_kv *ws_labels;
    size_t n_ws_labels;
    int64_t created_ms;
    uint64_t files, dirs, symlinks;
    uint64_t bytes;     /* content bytes of its files */
    uint64_t new_bytes; /* what it added to the store */
    uint64_t duration_ms;
    uint64_t read_bytes; /* of its files' content, read to make it */
};

void ws_snap_ref(struct ws_snap *s);
/* Accepts NULL. */
void ws_snap_unref(struct ws_snap *s);

/* Opens (creating) <state>/snapshots under state_fd (kept by the caller),
 * loads the committed snapshots, removes what an interrupted one left.
 * max_per_tenant 0: WS_SNAP_DEFAULT_MAX. */
int ws_snapstore_open(int state_fd, unsigned max_per_tenant, struct ws_snapstore **ret);
/* Accepts NULL. */
void ws_snapstore_free(struct ws_snapstore *st);

/* Drops what the store remembers of a closed workspace's files (the
 * stat cache that lets a snapshot read only what changed). */
void ws_snapstore_forget(struct ws_snapstore *st, const char *workspace_id);

/* What a new snapshot says about itself and its source. */
struct ws_snap_source {
    const char *tenant;
    const char *name; /* NULL or "": none */
    const struct ws_snap_kv *labels;
    size_t n_labels;
    const char *workspace_id;
    const char *provider;
    const struct ws_snap_kv *ws_labels;
    size_t n_ws_labels;
};

/* Takes a snapshot of the tree of `fs` (the caller holds it still: a
 * freeze) in three steps. begin reserves the name and a place under the
 * tenant's cap: -EEXIST (metadata name, snapshot_id) or -WS_EQUOTA
 * (quota=snapshots, limit). fill copies the tree into the store: special
 * files are left out; -WS_ELIMIT past WS_SNAP_DEPTH_MAX levels or
 * WS_SNAP_ENTRIES_MAX entries. commit makes it durable and visible; abort
 * (after a failed fill or commit, or when the caller refuses it) removes
 * what it stored. Until commit the snapshot is not listed, and its bytes
 * do not count in ws_snapstore_tenant_bytes. */
int ws_snapstore_begin(struct ws_snapstore *st, const struct ws_snap_source *src, struct ws_diag *d,
                       struct ws_snap **ret);
int ws_snapstore_fill(struct ws_snapstore *st, struct ws_snap *s, struct ws_vfs *fs,
                      struct ws_diag *d);
int ws_snapstore_commit(struct ws_snapstore *st, struct ws_snap *s);
void ws_snapstore_abort(struct ws_snapstore *st, struct ws_snap *s);

/* A committed snapshot of `tenant` (a new reference), else
 * -WS_ENOSNAPSHOT (any other tenant's is unknown alike). */
int ws_snapstore_get(struct ws_snapstore *st, const char *tenant, const char *id,
                     struct ws_snap **ret);
/* The tenant's committed snapshots in id order, each referenced; free
 * with ws_snapstore_list_free. */
int ws_snapstore_list(struct ws_snapstore *st, const char *tenant, struct ws_snap ***ret,
                      size_t *ret_n);
void ws_snapstore_list_free(struct ws_snap **v, size_t n);
/* Deletes a snapshot of the tenant and removes the objects no other holds;
 * *ret_reclaimed their bytes. -WS_ENOSNAPSHOT. */
int ws_snapstore_delete(struct ws_snapstore *st, const char *tenant, const char *id,
                        uint64_t *ret_reclaimed);
/* The content bytes of the tenant's committed snapshots (its byte quota
 * counts them; shared content counts in each snapshot that holds it). */
uint64_t ws_snapstore_tenant_bytes(struct ws_snapstore *st, const char *tenant);

/* ---- copies out ---- */

/* The caps of a copy into a workspace: no file larger than max_file_size
 * (-EFBIG, metadata path and limit), and `admit` (NULL: none) asked
 * before each file with the bytes copied so far plus that file's: a
 * negative return stops the copy with it. */
struct ws_copy_caps {
    uint64_t max_file_size;
    int (*admit)(void *ud, uint64_t total, struct ws_diag *d);
    void *admit_ud;
};

/* What a copy made. */
struct ws_copy_stats {
    uint64_t files, dirs, symlinks, bytes;
};

/* Fork: writes snapshot s's tree into the empty tree `dst` (its root's
 * own mode and time are left as they are). */
int ws_snapstore_materialize(struct ws_snapstore *st, struct ws_snap *s, struct ws_vfs *dst,
                             const struct ws_copy_caps *caps, struct ws_diag *d,
                             struct ws_copy_stats *ret);
/* Restore: builds s's tree in a hidden directory of `dst`, then moves the
 * old entries out of the way and the new ones in, and removes the old
 * ones. A failure while building (a cap, a full disk) leaves dst as it
 * was. The caller holds the tree still. */
int ws_snapstore_restore(struct ws_snapstore *st, struct ws_snap *s, struct ws_vfs *dst,
                         const struct ws_copy_caps *caps, struct ws_diag *d,
                         struct ws_copy_stats *ret);

/* Shadow: copies the tree of `src` (only read: opendir, readdir, stat,
 * open_read, readlink) into the empty tree `dst`, symlinks as symlinks
 * (never followed), special files left out, with the same caps. */
int ws_tree_copy(struct ws_vfs *src, struct ws_vfs *dst, const struct ws_copy_caps *caps,
                 struct ws_diag *d, struct ws_copy_stats *ret);

#endif
