/* How many bytes a workspace holds, for the per-tenant byte quota.
 *
 * The figure is the sum of the lengths (st_size) of the workspace's
 * regular files and symlinks: exactly what FileSystem writes change, so
 * the effect of a write is known before it is made, and the same for every
 * provider (the memory provider's files count like files on disk).
 * Directories and special files count nothing. A sparse file counts its
 * whole length and a file with several links once per link: the figure
 * can only be above the space really used, never below.
 *
 * The measure walks the workspace through its file operations (for a
 * directory on disk: fstatat without following symlinks, directories
 * opened O_NOFOLLOW below the workspace's root fd), iteratively, holding
 * one open directory per level. Its cost is bounded: it stops after
 * WS_USAGE_ENTRIES_MAX entries or WS_USAGE_DEPTH_MAX levels, and a
 * directory it cannot read stops it too. Such a workspace cannot be
 * measured (-WS_ELIMIT): its tenant counts as full until entries are
 * removed, since what was not seen could be any size.
 *
 * Thread safety: any thread; concurrent changes to the tree are seen or
 * not (an entry that vanishes mid-walk is skipped).
 */
#ifndef WS_REGISTRY_USAGE_H
#define WS_REGISTRY_USAGE_H

#include <stdint.h>

#include "server/vfs/ops.h"

#define WS_USAGE_ENTRIES_MAX 100000
#define WS_USAGE_DEPTH_MAX   64

/* Measures the workspace behind `ops`. Returns 0 and the bytes in
 * *ret_bytes; -WS_ELIMIT (too many entries, too deep, or an unreadable
 * directory); -ENOMEM or another error of the file operations. */
int ws_usage_measure(struct ws_fsops *ops, uint64_t *ret_bytes);

#endif
