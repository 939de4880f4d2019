/* The local-bash provider: the workspace is a host directory and its
 * commands run on the host as the workspace's own uid (the server's when
 * workspace uids are off), each with a home of its own and the guard's
 * narrower environment. No runtime, no wrapper. */
#include "server/providers/ops.h"

#include <sys/resource.h>

#include "server/posix/spawn.h"

static int local_bash_record(const struct ws_provider_open *o, ws_record *rec,
                             union ws_provider_scratch *scratch)
{
    (void)scratch;
    rec->config_case = WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__CONFIG_LOCAL_BASH;
    rec->local_bash = o->req->local_bash;
    return 0;
}

/* Caps a local-bash Open may ask for. pids holds where the workspace has
 * a uid of its own: RLIMIT_NPROC counts the processes of a real uid, so
 * set on every command it caps the whole workspace. memory and cpu need a
 * cgroup of the workspace's, which local-bash has not yet; a cap that
 * cannot be enforced refuses the Open: never a workspace that merely runs
 * without it. */
static int local_bash_open_check(void *rt, const struct ws_provider_open *o, struct ws_diag *d)
{
    const Workspace__V1__LocalBashConfig *c = o->req->local_bash;
    const char *cap = NULL;

    (void)rt;
    if (!c)
        return 0;
    if (c->pids_limit && !o->own_uid)
        cap = "pids";
    else if (c->memory_mb)
        cap = "memory";
    else if (c->cpus != 0)
        cap = "cpu";
    if (!cap)
        return 0;
    ws_diag_set(d, "local-bash cannot enforce the %s cap on this server", cap);
    ws_diag_meta(d, "cap", "%s", cap);
    ws_diag_meta(d, "transient", "false");
    return -WS_EFAILED;
}

static void local_bash_spawn_limits(const struct ws_provider_ws *w, struct ws_run_as *ra)
{
    const Workspace__V1__LocalBashConfig *c =
        w->rec->config_case == WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__CONFIG_LOCAL_BASH
            ? w->rec->local_bash
            : NULL;

    if (c && c->pids_limit && ra->n_rlimits < WS_SPAWN_RLIMITS_MAX)
        ra->rlimits[ra->n_rlimits++] =
            (struct ws_rlimit){.resource = RLIMIT_NPROC, .value = c->pids_limit};
}

static const struct ws_provider_exec_env local_bash_exec_env = {
    .path = NULL,
    .home = NULL,
    .on_host = true,
    .spawn_as_uid = true,
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
    .open_check = local_bash_open_check,
    .record = local_bash_record,
    .fs_open = ws_provider_fs_open_dir,
    .exec_env = &local_bash_exec_env,
    .spawn_limits = local_bash_spawn_limits,
};
