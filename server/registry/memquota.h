/* The per-tenant quota on memory workspaces: what all of one tenant's
 * in-process trees hold together, metadata counted.
 *
 * A tree counts its bytes as the memory provider counts them (file
 * contents, replaced contents still open by a reader, writers' buffers)
 * plus WS_MEMQUOTA_ENTRY_COST and the name's bytes for every file and
 * directory in it, the root included: a client that makes millions of
 * empty files or long names spends the quota as surely as one that writes
 * big files. The entry cost is a round figure above what the tree spends
 * on a node (its struct, the parent's slot, the allocator's overhead).
 *
 * Each tree is wrapped (ws_memquota_wrap) so that every change to it goes
 * through its tenant's account: growth is checked before it happens, and
 * a change that would pass the quota is -WS_EQUOTA with nothing done.
 * Changes of one tenant's trees are serialized by the account's lock
 * (reads are not), so the count of entries and names is exact; a file
 * created at a commit or directories made by a mkdir -p may pass the
 * quota by those entries, never by file contents.
 *
 * Thread safety: every function may be called from any thread; a wrapped
 * tree is used like any struct ws_vfs.
 */
#ifndef WS_REGISTRY_MEMQUOTA_H
#define WS_REGISTRY_MEMQUOTA_H

#include <stdbool.h>
#include <stdint.h>

#include "server/base/errors.h"
#include "server/vfs/vfs.h"

#define WS_MEMQUOTA_ENTRY_COST 256

struct ws_memquota;

/* The accounts of every tenant, each bounded by `max` bytes (0: no quota;
 * ws_memquota_wrap then wraps nothing). Returns 0 or -ENOMEM. */
int ws_memquota_new(uint64_t max, struct ws_memquota **ret);
/* Accepts NULL. A tree still alive keeps what it needs until it is
 * destroyed. */
void ws_memquota_free(struct ws_memquota *q);

/* Makes `inner` (a fresh tree of ws_memfs_new) count against `tenant`'s
 * account: *ret is the tree to use, and destroying it destroys `inner`.
 * Without a quota *ret is inner itself. Returns 0 or -ENOMEM (inner is
 * then still the caller's). */
int ws_memquota_wrap(struct ws_memquota *q, const char *tenant, struct ws_vfs *inner,
                     struct ws_vfs **ret);

/* After an operation on a wrapped tree failed with -WS_EQUOTA on this
 * thread: whether the tenant's quota refused it (rather than the tree's
 * own bound); then d gets the message and metadata quota=
 * tenant_memory_bytes, limit and used. Consumes what it reports. */
bool ws_memquota_explain(struct ws_diag *d);

#endif
