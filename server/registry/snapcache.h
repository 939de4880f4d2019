/* What the last snapshot of each workspace learnt about its files, so that
 * the next one reads only what changed.
 *
 * A file is taken as unchanged when its inode, size, mtime and ctime are
 * those recorded, and its ctime lies well before the recording snapshot
 * began (a change in the same clock tick as the recorded one would not
 * move the ctime; git calls such entries "racily clean"). Nothing can set
 * a ctime back, so a command that rewrites a file and restores its mtime
 * is still seen. Storage that reports no ctime or inode is never cached.
 *
 * The cache lives in memory only: after a restart the first snapshot of a
 * workspace reads every file again. Its size is bounded server-wide; the
 * workspaces snapshotted longest ago are forgotten first. */
#ifndef WORKSPACED_REGISTRY_SNAPCACHE_H
#define WORKSPACED_REGISTRY_SNAPCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/vfs/vfs.h"

#define WS_SNAPCACHE_HASH_LEN 32
/* Entries kept over all workspaces (about 120 bytes each). */
#define WS_SNAPCACHE_MAX_ENTRIES 200000
/* How far before the recording snapshot's start a ctime must lie. */
#define WS_SNAPCACHE_RACY_NS (1000LL * 1000 * 1000)

struct ws_snapcache;
/* One workspace's entries: read from while a snapshot runs (the previous
 * set) or filled by it (the next). */
struct ws_snapset;

int ws_snapcache_new(size_t max_entries, struct ws_snapcache **ret);
/* Accepts NULL. */
void ws_snapcache_free(struct ws_snapcache *c);

/* Takes the set recorded for `workspace_id` out of the cache (NULL when
 * there is none); the caller owns it. */
struct ws_snapset *ws_snapcache_take(struct ws_snapcache *c, const char *workspace_id);
/* Hands `set` over as what `workspace_id`'s latest snapshot learnt,
 * replacing any earlier set. A set larger than the whole cache is
 * dropped. */
void ws_snapcache_put(struct ws_snapcache *c, const char *workspace_id, struct ws_snapset *set);
/* Forgets a workspace (closed). */
void ws_snapcache_forget(struct ws_snapcache *c, const char *workspace_id);

/* A new, empty set for a snapshot that began at wall time `began_ns`. */
struct ws_snapset *ws_snapset_new(int64_t began_ns);
/* Accepts NULL. */
void ws_snapset_free(struct ws_snapset *set);
size_t ws_snapset_size(const struct ws_snapset *set);
/* Records what `path` held when stat'ed as `st` (before it was read).
 * Storage without ctime or inode is skipped. */
int ws_snapset_add(struct ws_snapset *set, const char *path, const struct ws_stat *st,
                   const uint8_t hash[WS_SNAPCACHE_HASH_LEN]);
/* Whether `set` (accepts NULL) vouches for `path` with stat `st`; its
 * content hash in `hash`. */
bool ws_snapset_lookup(const struct ws_snapset *set, const char *path, const struct ws_stat *st,
                       uint8_t hash[WS_SNAPCACHE_HASH_LEN]);

#endif
