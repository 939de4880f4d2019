/* Lexical checks on a client path, before any lookup. Escapes through
 * symlinks are the resolver's business; this refuses what no resolver
 * should ever see, and any ".." that climbs above the root counted
 * lexically. The latter is stricter than the kernel ("link/../.." may stay
 * inside when link points deeper) but gives every provider the same answer,
 * PATH_ESCAPE, whether or not the intermediate names exist. */
#include "server/vfs/vfs.h"

#include <errno.h>
#include <string.h>

#include "server/base/errors.h"

int ws_vfs_check_path(const char *path)
{
    size_t len, comp = 0;
    long depth = 0;

    if (!path || path[0] == '\0')
        return -WS_EBADPATH;
    len = strnlen(path, WS_VFS_PATH_MAX + 1);
    if (len > WS_VFS_PATH_MAX)
        return -WS_EBADPATH;
    if (path[0] == '/')
        return -EXDEV;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && path[i] != '/') {
            if (++comp > WS_VFS_NAME_MAX)
                return -WS_EBADPATH;
            continue;
        }
        /* End of a component of length comp ending before i. */
        const char *c = path + i - comp;
        if (comp == 2 && c[0] == '.' && c[1] == '.') {
            if (--depth < 0)
                return -EXDEV;
        } else if (comp > 0 && !(comp == 1 && c[0] == '.')) {
            depth++;
        }
        comp = 0;
    }
    return 0;
}
