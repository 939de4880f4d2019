/* The local-bash provider: the workspace is a host directory and its
 * commands run on the host with the server's uid, each with a home of its
 * own and the guard's narrower environment. No runtime, no wrapper. */
#include "server/providers/ops.h"

static int local_bash_record(const struct ws_provider_open *o, ws_record *rec,
                             union ws_provider_scratch *scratch)
{
    (void)scratch;
    rec->config_case = WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__CONFIG_LOCAL_BASH;
    rec->local_bash = o->req->local_bash;
    return 0;
}

static const struct ws_provider_exec_env local_bash_exec_env = {
    .path = NULL,
    .home = NULL,
    .on_host = true,
    .foreign_root = false,
};

const struct ws_provider_ops ws_local_bash_ops = {
    .kind = WS_PROVIDER_LOCAL_BASH,
    .name = "local-bash",
    .isolation = "none",
    .caps = WS_CAP_FS | WS_CAP_SHELL,
    .on_disk = true,
    .open_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_BASH,
    .record_case = WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__CONFIG_LOCAL_BASH,
    .record = local_bash_record,
    .fs_open = ws_provider_fs_open_dir,
    .exec_env = &local_bash_exec_env,
};
