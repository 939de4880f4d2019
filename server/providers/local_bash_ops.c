/* The local-bash provider: the workspace is a host directory and its
 * commands run on the host as the workspace's own uid (the server's when
 * workspace uids are off), each with a home of its own and the guard's
 * narrower environment, inside the workspace's cgroup when it asked for
 * caps. No wrapper. */
#include "server/providers/ops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "server/posix/limits.h"
#include "server/posix/spawn.h"

/* The record holds the caps in force: an address space the request left
 * to the policy is the policy's, so Describe shows it and a later policy
 * change does not move it under the workspace. */
static int local_bash_record(const struct ws_provider_open *o, ws_record *rec,
                             union ws_provider_scratch *scratch)
{
    scratch->local_bash = *o->req->local_bash;
    if (!scratch->local_bash.address_space_mb)
        scratch->local_bash.address_space_mb = o->address_space_mb;
    rec->config_case = WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__CONFIG_LOCAL_BASH;
    rec->local_bash = &scratch->local_bash;
    return 0;
}

/* The workspace's caps: its cgroup (posix/limits.h) on whichever
 * hierarchy the host offers, shared with local-sandbox's through the one
 * limits host of the process. */
struct local_bash_rt {
    struct ws_limits_host *limits;
};

static int local_bash_rt_new(const struct ws_provider_config *cfg, void **ret_rt)
{
    struct local_bash_rt *rt = calloc(1, sizeof(*rt));
    int err;

    (void)cfg;
    if (!rt)
        return -ENOMEM;
    err = ws_limits_host_new(&rt->limits);
    if (err < 0) {
        free(rt);
        return err;
    }
    *ret_rt = rt;
    return 0;
}

static void local_bash_rt_free(void *arg)
{
    struct local_bash_rt *rt = arg;

    if (!rt)
        return;
    ws_limits_host_free(rt->limits);
    free(rt);
}

static const Workspace__V1__LocalBashConfig *config_of(const ws_record *rec)
{
    return rec->config_case == WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__CONFIG_LOCAL_BASH
               ? rec->local_bash
               : NULL;
}

/* The config's caps as the limits module takes them. */
static struct ws_limits limits_of(const Workspace__V1__LocalBashConfig *c)
{
    return (struct ws_limits){
        .pids_max = c ? c->pids_limit : 0,
        .memory_bytes = c ? (uint64_t)c->memory_mb << 20 : 0,
        .cpu_millis = c && c->cpus > 0 ? (uint32_t)(c->cpus * 1000 + 0.5) : 0,
    };
}

static unsigned limits_wanted(const struct ws_limits *l)
{
    return (l->pids_max ? WS_LIMIT_PIDS : 0) | (l->memory_bytes ? WS_LIMIT_MEMORY : 0) |
           (l->cpu_millis ? WS_LIMIT_CPU : 0);
}

/* Caps a local-bash Open may ask for: each one the workspace's cgroup can
 * hold, and pids also where the workspace has a uid of its own
 * (RLIMIT_NPROC counts the processes of a real uid, so set on every
 * command it caps the whole workspace). A cap that cannot be enforced
 * refuses the Open: never a workspace that merely runs without it. */
static int local_bash_open_check(void *arg, const struct ws_provider_open *o, struct ws_diag *d)
{
    struct local_bash_rt *rt = arg;
    const Workspace__V1__LocalBashConfig *c = o->req->local_bash;
    struct ws_limits l = limits_of(c);
    unsigned missing = limits_wanted(&l) & ~(rt ? ws_limits_host_available(rt->limits) : 0);
    const char *cap;

    if (o->own_uid)
        missing &= ~WS_LIMIT_PIDS;
    if (!missing)
        return 0;
    cap = missing & WS_LIMIT_PIDS ? "pids" : missing & WS_LIMIT_MEMORY ? "memory" : "cpu";
    ws_diag_set(d,
                "local-bash cannot enforce the %s cap on this host (no writable cgroup "
                "controller for it)",
                cap);
    ws_diag_meta(d, "cap", "%s", cap);
    ws_diag_meta(d, "transient", "false");
    return -WS_EFAILED;
}

static int local_bash_spawn_limits(void *arg, const struct ws_provider_ws *w, struct ws_run_as *ra,
                                   void **ret_token, struct ws_diag *d)
{
    struct local_bash_rt *rt = arg;
    struct ws_limits l = limits_of(config_of(w->rec));
    unsigned grouped = limits_wanted(&l) & ws_limits_host_available(rt->limits);
    struct ws_limits_group *g;
    int err;

    const Workspace__V1__LocalBashConfig *c = config_of(w->rec);

    *ret_token = NULL;
    if (l.pids_max && ra->set && ra->n_rlimits < WS_SPAWN_RLIMITS_MAX)
        ra->rlimits[ra->n_rlimits++] =
            (struct ws_rlimit){.resource = RLIMIT_NPROC, .value = l.pids_max};
    if (c && c->address_space_mb && ra->n_rlimits < WS_SPAWN_RLIMITS_MAX)
        ra->rlimits[ra->n_rlimits++] =
            (struct ws_rlimit){.resource = RLIMIT_AS, .value = (uint64_t)c->address_space_mb << 20};
    if (!grouped)
        return 0;
    /* Only the caps the group can hold: pids may be RLIMIT_NPROC's alone. */
    l.pids_max = grouped & WS_LIMIT_PIDS ? l.pids_max : 0;
    err = ws_limits_group_get(rt->limits, w->id, &l, &g);
    if (err == 0 && (ws_limits_group_enforced(g) & grouped) != grouped) {
        ws_limits_group_put(g);
        err = -EOPNOTSUPP;
    }
    if (err == 0 && ws_limits_group_cgroup_fd(g) >= 0) {
        ra->into_cgroup = true;
        ra->cgroup_fd = ws_limits_group_cgroup_fd(g);
    } else if (err == 0) {
        err = ws_limits_group_enter(g);
        if (err < 0)
            ws_limits_group_put(g);
    }
    if (err < 0) {
        ws_diag_set(d, "the workspace's caps cannot be applied to the command: %s", strerror(-err));
        ws_diag_meta(d, "transient", "false");
        return -WS_EFAILED;
    }
    *ret_token = g;
    return 0;
}

static void local_bash_spawn_done(void *rt, void *token)
{
    struct ws_limits_group *g = token;

    (void)rt;
    if (!g)
        return;
    (void)ws_limits_group_leave(g);
    ws_limits_group_put(g);
}

/* Describe: the caps in force, as recorded at Open. */
static int local_bash_describe(void *rt, const struct ws_provider_ws *w,
                               Workspace__V1__DescribeResponse *resp, void **ret_keep)
{
    (void)rt;
    *ret_keep = NULL;
    resp->local_bash = (Workspace__V1__LocalBashConfig *)config_of(w->rec);
    return 0;
}

static void local_bash_describe_free(void *keep)
{
    (void)keep;
}

static void local_bash_forget(void *arg, const char *id)
{
    struct local_bash_rt *rt = arg;

    ws_limits_forget(rt->limits, id);
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
    .rt_new = local_bash_rt_new,
    .rt_free = local_bash_rt_free,
    .open_check = local_bash_open_check,
    .record = local_bash_record,
    .fs_open = ws_provider_fs_open_dir,
    .exec_env = &local_bash_exec_env,
    .spawn_limits = local_bash_spawn_limits,
    .spawn_done = local_bash_spawn_done,
    .describe = local_bash_describe,
    .describe_free = local_bash_describe_free,
    .forget = local_bash_forget,
};
