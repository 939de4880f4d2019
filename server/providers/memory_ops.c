/* The memory provider: an in-process file tree per workspace, gone with
 * the server; files only, no shell, nothing outside the process. */
#include "server/providers/memory.h"
#include "server/providers/ops.h"

static int memory_record(const struct ws_provider_open *o, ws_record *rec,
                         union ws_provider_scratch *scratch)
{
    (void)scratch;
    rec->config_case = WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__CONFIG_MEMORY;
    rec->memory = o->req->memory;
    return 0;
}

/* The tree lives in the server's own memory: it gets the server's bound. */
static int memory_fs_open(void *rt, int dir_fd, const struct ws_storage_limits *limits,
                          struct ws_vfs **ret_fs)
{
    struct ws_vfs *fs;
    int err;

    (void)rt;
    (void)dir_fd;
    err = ws_memfs_new(&fs);
    if (err < 0)
        return err;
    ws_memfs_set_limits(fs, limits ? limits->memory_max_bytes : 0, 0);
    *ret_fs = fs;
    return 0;
}

const struct ws_provider_ops ws_memory_ops = {
    .kind = WS_PROVIDER_MEMORY,
    .name = "memory",
    .isolation = "process",
    .caps = WS_CAP_FS,
    .on_disk = false,
    .open_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_MEMORY,
    .record_case = WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__CONFIG_MEMORY,
    .record = memory_record,
    .fs_open = memory_fs_open,
};
