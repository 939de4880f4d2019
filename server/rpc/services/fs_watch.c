/* FileSystem.Watch: a stream of changes below a workspace path. */
#include "server/rpc/services/internal.h"

size_t ws_services_fs_watch(struct ws_services *s, struct ws_rpc_method *out)
{
    (void)s;
    (void)out;
    return 0;
}
