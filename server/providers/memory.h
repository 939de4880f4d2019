/* The memory provider's storage: an in-process file tree behind the vfs
 * interface (server/vfs/vfs.h). Regular files, directories and symlinks
 * (no special files). A symlink only stores its target: no lookup follows
 * one (a path through it is -ENOTDIR, a symlink leaf where a file or a
 * directory is opened -WS_ESYMLINK_LEAF). Paths resolve lexically:
 * "a/../b" is "b", "." is the root, a ".." above the root is -EXDEV.
 * ws_stat.ino is a node id, unique for the tree's lifetime. There are no
 * host descriptors (file_fd, writer_fd, open_dir_fd are NULL).
 *
 * Change reports (subscribe): every change, under the tree's write lock,
 * in the order made: a commit of a writer (CREATED or MODIFIED), mkdir
 * and each parent it makes (CREATED), symlink (CREATED), set_mode and
 * set_mtime (MODIFIED), remove (REMOVED for every entry, deepest first),
 * move (MOVED; an entry it replaces is not reported apart).
 *
 * Thread safety: one rwlock per tree. A directory handle sees the names
 * the directory had when it was opened; an open file keeps the content it
 * had when it was opened (a later replace does not tear it); a writer
 * buffers privately and swaps the new content in at commit. The tree must
 * outlive its handles (close them before destroy).
 *
 * Limits: the bytes held (file contents plus writers' buffers) and the
 * number of entries are bounded per tree; going past either is
 * -WS_EQUOTA.
 */
#ifndef WS_PROVIDERS_MEMORY_H
#define WS_PROVIDERS_MEMORY_H

#include <stdint.h>

#include "server/vfs/vfs.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WS_MEMFS_DEFAULT_MAX_BYTES (UINT64_C(1) << 30)
#define WS_MEMFS_DEFAULT_MAX_NODES 1000000

/* An empty tree (just the root, mode 0755) with the default limits.
 * Returns 0 or -ENOMEM. Free it with fs->ops->destroy(fs). */
int ws_memfs_new(struct ws_vfs **ret);

/* Sets the tree's limits (0: the default). Lowering them below the
 * current use only refuses further growth. `fs` must come from
 * ws_memfs_new. */
void ws_memfs_set_limits(struct ws_vfs *fs, uint64_t max_bytes, uint64_t max_nodes);

/* Bytes held now: file contents (including replaced contents still open
 * by a reader) and uncommitted writers' buffers. */
uint64_t ws_memfs_bytes(struct ws_vfs *fs);

/* Entries in the tree, the root included. */
uint64_t ws_memfs_nodes(struct ws_vfs *fs);

#ifdef __cplusplus
}
#endif

#endif
