/* Lexical checks on a client path, before any lookup. Escapes through ".."
 * or symlinks are the resolver's business: this only refuses what no
 * resolver should ever see. */
#include "server/vfs/vfs.h"

#include <errno.h>
#include <string.h>

#include "server/base/errors.h"

int ws_vfs_check_path(const char *path)
{
    size_t len, comp = 0;

    if (!path || path[0] == '\0')
        return -WS_EBADPATH;
    len = strnlen(path, WS_VFS_PATH_MAX + 1);
    if (len > WS_VFS_PATH_MAX)
        return -WS_EBADPATH;
    if (path[0] == '/')
        return -EXDEV;
    for (size_t i = 0; i < len; i++) {
        if (path[i] == '/') {
            comp = 0;
            continue;
        }
        if (++comp > WS_VFS_NAME_MAX)
            return -WS_EBADPATH;
    }
    return 0;
}
