/* The workspace size walk; see usage.h. */
#include "server/registry/usage.h"

#include <errno.h>
#include <stdbool.h>

/* An entry that vanished between readdir and the next look at it. */
static bool gone(int err)
{
    return err == -ENOENT || err == -ESTALE;
}

int ws_usage_measure(struct ws_fsops *ops, uint64_t *ret_bytes)
{
    struct ws_vfs *fs = ws_fsops_vfs(ops);
    struct ws_vfs_dir *stack[WS_USAGE_DEPTH_MAX + 1];
    unsigned depth = 0;
    uint64_t bytes = 0, entries = 0;
    int r;

    r = fs->ops->opendir(fs, ".", &stack[0]);
    if (r < 0)
        return r;
    depth = 1;
    while (depth > 0) {
        struct ws_vfs_dir *dir = stack[depth - 1];
        struct ws_dirent ent;
        struct ws_stat st;

        r = fs->ops->readdir(dir, &ent);
        if (r < 0)
            goto out;
        if (r == 0) {
            fs->ops->closedir(dir);
            depth--;
            continue;
        }
        if (++entries > WS_USAGE_ENTRIES_MAX) {
            r = -WS_ELIMIT;
            goto out;
        }
        r = fs->ops->stat_at(dir, ent.name, &st);
        if (gone(r))
            continue;
        if (r < 0)
            goto out;
        if (st.type == WS_FT_REGULAR || st.type == WS_FT_SYMLINK) {
            bytes += st.size;
            continue;
        }
        if (st.type != WS_FT_DIRECTORY)
            continue;
        /* What lies below the last level would go unseen: not measurable. */
        if (depth > WS_USAGE_DEPTH_MAX) {
            r = -WS_ELIMIT;
            goto out;
        }
        r = fs->ops->opendir_at(dir, ent.name, &stack[depth]);
        if (gone(r) || r == -ENOTDIR)
            continue; /* gone, or no longer a directory */
        if (r == -EACCES || r == -EPERM)
            r = -WS_ELIMIT; /* unreadable: what it holds is unseen */
        if (r < 0)
            goto out;
        depth++;
    }
    *ret_bytes = bytes;
    r = 0;
out:
    while (depth > 0)
        fs->ops->closedir(stack[--depth]);
    return r;
}
