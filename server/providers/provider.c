#include "server/providers/provider.h"

#include <errno.h>
#include <string.h>

#include "server/posix/fs.h"
#include "server/providers/memory.h"
#include "server/providers/probe.h"

static void probe_always(struct ws_probe *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->available = true;
}

static const struct ws_provider providers[WS_PROVIDER_COUNT] = {
    [WS_PROVIDER_MEMORY] =
        {
            .kind = WS_PROVIDER_MEMORY,
            .name = "memory",
            .isolation = "process",
            .caps = WS_CAP_FS,
            .on_disk = false,
            .probe = probe_always,
        },
    [WS_PROVIDER_LOCAL_BASH] =
        {
            .kind = WS_PROVIDER_LOCAL_BASH,
            .name = "local-bash",
            .isolation = "none",
            .caps = WS_CAP_FS | WS_CAP_SHELL,
            .on_disk = true,
            .probe = probe_always,
        },
    [WS_PROVIDER_LOCAL_SANDBOX] =
        {
            .kind = WS_PROVIDER_LOCAL_SANDBOX,
            .name = "local-sandbox",
            .isolation = "namespaces+seccomp",
            .caps = WS_CAP_FS | WS_CAP_SHELL,
            .on_disk = true,
            .probe = ws_probe_bwrap,
        },
    [WS_PROVIDER_DOCKER] =
        {
            .kind = WS_PROVIDER_DOCKER,
            .name = "docker",
            .isolation = "container",
            .caps = WS_CAP_FS | WS_CAP_SHELL,
            .on_disk = true,
            .probe = ws_probe_docker,
        },
};

const struct ws_provider *ws_provider_get(enum ws_provider_kind kind)
{
    if ((unsigned)kind >= WS_PROVIDER_COUNT)
        return NULL;
    return &providers[kind];
}

const struct ws_provider *ws_provider_by_name(const char *name)
{
    for (size_t i = 0; i < WS_PROVIDER_COUNT; i++)
        if (strcmp(providers[i].name, name) == 0)
            return &providers[i];
    return NULL;
}

int ws_provider_attach_storage(const struct ws_provider *p, int dir_fd,
                               const struct ws_storage_limits *limits, struct ws_vfs **ret_fs)
{
    if (!p->on_disk) {
        struct ws_vfs *fs;
        int err = ws_memfs_new(&fs);

        if (err < 0)
            return err;
        ws_memfs_set_limits(fs, limits ? limits->memory_max_bytes : 0, 0);
        *ret_fs = fs;
        return 0;
    }
    if (dir_fd < 0)
        return -EBADF;
    return ws_posixfs_open(dir_fd, ".", ret_fs);
}
