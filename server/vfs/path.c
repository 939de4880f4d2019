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
#include "server/base/macros.h"

static bool has_transient_form(const char *name, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);

    if (len != n + WS_VFS_TRANSIENT_HEX || memcmp(name, prefix, n) != 0)
        return false;
    for (size_t i = n; i < len; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return false;
    return true;
}

bool ws_vfs_transient_name(const char *name, size_t len, const char *prefix)
{
    static const char *const all[] = {WS_VFS_TMP_PREFIX, WS_VFS_STAGE_PREFIX, WS_VFS_TRASH_PREFIX,
                                      WS_VFS_RESTORE_PREFIX, WS_VFS_REPLACED_PREFIX};

    if (len < 1 || name[0] != '.')
        return false;
    if (prefix)
        return has_transient_form(name, len, prefix);
    for (size_t i = 0; i < WS_ELEMENTSOF(all); i++)
        if (has_transient_form(name, len, all[i]))
            return true;
    return false;
}

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
