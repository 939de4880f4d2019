/* The four providers' tables and what their files share; for the files
 * of the :providers target only. */
#ifndef WS_PROVIDERS_OPS_H
#define WS_PROVIDERS_OPS_H

#include "server/providers/provider.h"

extern const struct ws_provider_ops ws_memory_ops;
extern const struct ws_provider_ops ws_local_bash_ops;
extern const struct ws_provider_ops ws_local_sandbox_ops;
extern const struct ws_provider_ops ws_docker_ops;

/* fs_open of the providers whose storage is a host directory: the
 * confined view of dir_fd (not consumed); -EBADF without one. */
int ws_provider_fs_open_dir(void *rt, int dir_fd, const struct ws_storage_limits *limits,
                            struct ws_vfs **ret_fs);

#endif
