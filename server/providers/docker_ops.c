/* The docker provider: the workspace is a host directory bound into a
 * hardened container of its own (docker.h), made at Open and removed at
 * Close; commands run in it through the relay. The runtime is the
 * container runtime when the server has an id to name containers by,
 * the server's default image and the helper uid.
 *
 * Whom commands run as: a workspace with a uid of its own (the record's)
 * runs them as that uid and gid, or as the DockerConfig.user the
 * operator's policy let the client name, never as root; the in-container
 * init runs as the helper uid, which is neither. A workspace without one
 * (the server is not root) runs them as the container's user: the
 * config's, else the server's own, as before workspaces had uids. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/base/macros.h"
#include "server/docker/api.h"
#include "server/providers/docker.h"
#include "server/providers/ops.h"
#include "server/providers/probe.h"
#include "server/work/pool.h"

/* A container's pids cap when its config sets none. */
#define DEFAULT_PIDS_LIMIT 512

struct docker_ops_rt {
    /* NULL: the server runs without a container runtime (no server id). */
    struct ws_docker_rt *docker;
    /* The image of an Open that names none; NULL: none. */
    char *default_image;
    /* The in-container init's uid while a command runs. */
    uid_t helper_uid;
    /* Where the containers' account files go (ws_docker_identity). */
    char *accounts_dir;
};

static struct ws_docker_rt *runtime_of(void *rt)
{
    return rt ? ((struct docker_ops_rt *)rt)->docker : NULL;
}

static const Workspace__V1__DockerConfig *config_of(const ws_record *rec)
{
    if (rec->config_case == WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__CONFIG_DOCKER)
        return rec->docker;
    return NULL;
}

static void docker_rt_free(void *rt)
{
    struct docker_ops_rt *t = rt;

    if (!t)
        return;
    ws_docker_rt_free(t->docker);
    free(t->default_image);
    free(t->accounts_dir);
    free(t);
}

static int docker_rt_new(const struct ws_provider_config *cfg, void **ret_rt)
{
    struct docker_ops_rt *t = calloc(1, sizeof(*t));
    int err = 0;

    if (!t)
        return -ENOMEM;
    t->helper_uid = cfg && cfg->helper_uid ? cfg->helper_uid : WS_DOCKER_HELPER_UID_DEFAULT;
    if (cfg && cfg->accounts_dir) {
        t->accounts_dir = strdup(cfg->accounts_dir);
        if (!t->accounts_dir) {
            err = -ENOMEM;
            goto out;
        }
    }
    if (cfg && cfg->docker_default_image) {
        if (!ws_docker_image_valid(cfg->docker_default_image)) {
            err = -EINVAL;
            goto out;
        }
        t->default_image = strdup(cfg->docker_default_image);
        if (!t->default_image) {
            err = -ENOMEM;
            goto out;
        }
    }
    if (cfg && cfg->server_id) {
        err = ws_docker_rt_new(cfg->server_id, cfg->channels_dir, &t->docker);
        if (err < 0)
            goto out;
    }
    *ret_rt = t;
    t = NULL;
out:
    docker_rt_free(t);
    return err;
}

static int docker_reconcile(void *rt, struct ws_diag *d)
{
    struct ws_docker_rt *docker = runtime_of(rt);

    return docker ? ws_docker_rt_reconcile(docker, d) : 0;
}

/* ---- the Open ---- */

/* Empty means the workspace's own uid:gid; otherwise the rule the
 * container spec is built with. */
static bool user_valid(const char *s)
{
    return !*s || ws_docker_user_valid(s);
}

/* The helper uid a runtime gives its inits (the default without one). */
static uid_t helper_of(const void *rt)
{
    return rt ? ((const struct docker_ops_rt *)rt)->helper_uid : WS_DOCKER_HELPER_UID_DEFAULT;
}

/* Whether a valid user is or shares an id with the helper: a command of
 * the helper's uid could signal and trace the init. */
static bool user_is_helper(const char *s, uid_t helper)
{
    uid_t uid;
    gid_t gid;

    return ws_docker_user_parse(s, &uid, &gid) == 0 && (uid == helper || gid == (gid_t)helper);
}

static int docker_check(void *rt, const Workspace__V1__OpenRequest *req, const char *const *own,
                        size_t n_own, union ws_provider_scratch *scratch,
                        const Workspace__V1__OpenRequest **ret_req, struct ws_diag *d)
{
    const struct docker_ops_rt *t = rt;
    const Workspace__V1__DockerConfig *c = req->docker;

    (void)own;
    (void)n_own;
    /* The server's default image for an Open that names none: the request
     * as if the client had named it. */
    if (c && (!c->image || !c->image[0]) && t && t->default_image) {
        scratch->open.docker = *c;
        scratch->open.docker.image = t->default_image;
        scratch->open.req = *req;
        scratch->open.req.docker = &scratch->open.docker;
        req = &scratch->open.req;
        c = req->docker;
    }
    if (!ws_docker_image_valid(c->image)) {
        ws_diag_set(d, c->image[0]
                           ? "docker.image is not a valid image reference"
                           : "docker.image is required (this server sets no default image)");
        ws_diag_meta(d, "field", "image");
        return -WS_EMALFORMED;
    }
    if (!user_valid(c->user) || c->cpus < 0) {
        ws_diag_set(d, "docker.user must be \"uid:gid\" and cpus >= 0");
        ws_diag_meta(d, "field", c->cpus < 0 ? "cpus" : "user");
        return -WS_EMALFORMED;
    }
    /* Before the policy: no policy can make root a command's user. */
    if (c->user[0] && !ws_docker_user_unprivileged(c->user)) {
        ws_diag_set(d, "docker.user must not have uid or gid 0: commands never run as root");
        ws_diag_meta(d, "field", "user");
        return -WS_EMALFORMED;
    }
    /* An agent's command enters /workspace as itself, which only the
     * workspace's own uid may. */
    if (c->user[0] && c->exec_mode == WORKSPACE__V1__EXEC_MODE__EXEC_MODE_AGENT) {
        ws_diag_set(d, "docker.user cannot be combined with exec_mode AGENT: the agent's commands "
                       "enter /workspace as their own uid, and only the workspace's may");
        ws_diag_meta(d, "field", "exec_mode");
        return -WS_EMALFORMED;
    }
    if (c->user[0] && user_is_helper(c->user, helper_of(rt))) {
        ws_diag_set(d,
                    "docker.user must not have the uid or gid %u: the server's own helper has it",
                    (unsigned)helper_of(rt));
        ws_diag_meta(d, "field", "user");
        return -WS_EMALFORMED;
    }
    if (c->runtime && c->runtime[0] && strcmp(c->runtime, "runc") != 0 &&
        strcmp(c->runtime, "runsc") != 0) {
        ws_diag_set(d, "docker.runtime must be \"runc\" or \"runsc\"");
        ws_diag_meta(d, "field", "runtime");
        return -WS_EMALFORMED;
    }
    *ret_req = req;
    return 0;
}

static const char *docker_policy_image(const Workspace__V1__OpenRequest *req)
{
    return req->docker ? req->docker->image : NULL;
}

static int docker_record(const struct ws_provider_open *o, ws_record *rec,
                         union ws_provider_scratch *scratch)
{
    Workspace__V1__DockerConfig *docker = &scratch->docker;

    *docker = *o->req->docker;
    if (docker->pids_limit == 0)
        docker->pids_limit = DEFAULT_PIDS_LIMIT;
    /* Without pulls by policy nothing may reach a registry, now or when
     * the container is made again after a restart: the record says
     * never. */
    if (!o->pulls_allowed)
        docker->pull_policy = WORKSPACE__V1__PULL_POLICY__PULL_NEVER;
    rec->config_case = WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__CONFIG_DOCKER;
    rec->docker = docker;
    return 0;
}

static Workspace__V1__Network docker_network(const ws_record *rec)
{
    const Workspace__V1__DockerConfig *c = config_of(rec);

    return c ? c->network : WORKSPACE__V1__NETWORK__NETWORK_OFF;
}

static void docker_probe(void *rt, struct ws_probe *ret)
{
    (void)rt;
    ws_probe_docker(ret);
}

/* runc (the daemon's default) and runsc (gVisor), as the daemon has
 * them registered now. */
static size_t docker_list_runtimes(void *rt, struct ws_provider_runtime *out, size_t max)
{
    static const char *const names[] = {"runc", "runsc"};
    struct ws_docker_rt *docker = runtime_of(rt);
    size_t n = 0;

    for (size_t i = 0; i < WS_ELEMENTSOF(names) && n < max; i++, n++) {
        struct ws_diag d = {0};

        out[n] = (struct ws_provider_runtime){.name = names[i]};
        if (!docker) {
            snprintf(out[n].reason, sizeof(out[n].reason), "no docker runtime on this server");
            continue;
        }
        out[n].usable = ws_docker_rt_runtime_usable(docker, names[i], &d) == 0;
        if (!out[n].usable)
            snprintf(out[n].reason, sizeof(out[n].reason), "%s", d.message);
    }
    return n;
}

static void docker_list_info(void *rt, struct ws_probe *io, char *api_version, size_t size)
{
    struct ws_docker_rt *docker = runtime_of(rt);
    struct ws_diag d = {0};

    /* The daemon answers, but Open needs our programs and an API version
     * we speak too. */
    if (!docker || !ws_docker_rt_init_path() || !ws_docker_rt_relay_path()) {
        io->available = false;
        snprintf(io->reason, sizeof(io->reason),
                 "the server's Docker programs (%s, %s) are missing", WS_DOCKER_INIT_NAME,
                 WS_DOCKER_RELAY_NAME);
    } else if (ws_docker_rt_ping(docker, api_version, size, &d) < 0) {
        io->available = false;
        snprintf(io->reason, sizeof(io->reason), "%s", d.message);
    }
}

/* ---- the workspace's container ---- */

/* Whom the workspace's commands run as (see the top of this file). A
 * recorded user that may no longer be one (a record from before uid 0 was
 * refused, or one that is now the helper's) fails the attach: the
 * workspace's commands would otherwise run as it. */
static int identity_of(const void *rt, const ws_record *rec, const Workspace__V1__DockerConfig *cfg,
                       struct ws_docker_identity *ret, struct ws_diag *d)
{
    struct ws_docker_identity id = {
        .helper = helper_of(rt),
        .accounts_dir = rt ? ((const struct docker_ops_rt *)rt)->accounts_dir : NULL,
    };

    if (rec->uid == 0) {
        *ret = (struct ws_docker_identity){0};
        return 0;
    }
    if (!cfg->user || !cfg->user[0]) {
        id.uid = rec->uid;
        id.gid = rec->gid;
    } else if (!ws_docker_user_unprivileged(cfg->user) || user_is_helper(cfg->user, id.helper) ||
               ws_docker_user_parse(cfg->user, &id.uid, &id.gid) < 0) {
        ws_diag_set(d, "the workspace's docker.user %.32s may not run commands on this server",
                    cfg->user);
        ws_diag_meta(d, "field", "user");
        return -WS_EFAILED;
    }
    if (id.gid == 0 || id.uid == id.helper || id.gid == (gid_t)id.helper) {
        ws_diag_set(d, "the workspace's uid %u cannot run commands beside the helper uid %u",
                    (unsigned)id.uid, (unsigned)id.helper);
        return -WS_EFAILED;
    }
    *ret = id;
    return 0;
}

static int docker_attach(void *rt, const struct ws_provider_ws *w, bool fresh, struct ws_diag *d)
{
    struct ws_docker_rt *docker = runtime_of(rt);
    const Workspace__V1__DockerConfig *cfg = config_of(w->rec);
    const struct ws_provider_open *o = w->open;
    struct ws_docker_identity id;
    int err;

    if (!cfg)
        return 0;
    if (!docker) {
        ws_diag_set(d, "docker backend unavailable: the server runs without a Docker runtime");
        return -WS_EFAILED;
    }
    err = identity_of(rt, w->rec, cfg, &id, d);
    if (err < 0)
        return err;
    /* The Open, Resolve or call that attaches runs as a pool job, whose
     * ctl carries its caller's deadline and cancel. */
    err = ws_docker_rt_attach(docker, w->id, w->dir, cfg, &id, fresh, ws_work_ctl_current(), d);
    /* A missing image with pulls off: say that it is the operator's
     * policy, not the client's pull_policy, that kept it from a pull. */
    if (err == -WS_EFAILED && o && !o->pulls_allowed && d &&
        o->req->docker->pull_policy != WORKSPACE__V1__PULL_POLICY__PULL_NEVER &&
        strstr(d->message, "is not present")) {
        ws_diag_set(d,
                    "image %.128s is not present and pulls are off by policy (docker-pull); the "
                    "operator must load it",
                    o->req->docker->image);
        ws_diag_meta(d, "rule", "docker-pull");
    }
    return err;
}

static int docker_detach(void *rt, const struct ws_provider_ws *w, struct ws_diag *d)
{
    struct ws_docker_rt *docker = runtime_of(rt);

    if (!config_of(w->rec) || !docker)
        return 0;
    return ws_docker_rt_detach(docker, w->id, d);
}

static void docker_forget(void *rt, const char *id)
{
    struct ws_docker_rt *docker = runtime_of(rt);

    if (docker)
        ws_docker_rt_forget(docker, id);
}

/* ---- commands ---- */

/* Commands of a container are found in its own file system. */
static const struct ws_provider_exec_env docker_exec_env = {
    .path = WS_DOCKER_EXEC_PATH,
    .home = WS_DOCKER_WORKDIR,
    .on_host = false,
    .foreign_root = true,
};

static int docker_exec_wrap(void *rt, const struct ws_provider_ws *w,
                            const struct ws_provider_cmd *c, struct ws_proc_wrapper *ret,
                            struct ws_diag *d)
{
    struct ws_docker_rt *docker = runtime_of(rt);
    struct ws_docker_rt_exec spec = {
        .workspace_id = w->id,
        .argv = c->argv,
        .envp = c->envp,
        .cwd = c->cwd,
        .tty = c->pty,
        .stdin_pipe = c->stdin_pipe,
        .timeout_ms = c->timeout_ms,
    };
    int err = docker ? ws_docker_rt_wrap(docker, &spec, ret, d) : -ENOENT;

    if (err == -ENOENT) {
        ws_diag_set(d, "docker backend unavailable: the server's Docker programs are "
                       "missing");
        err = -WS_EFAILED;
    }
    return err;
}

/* ---- Describe ---- */

/* What the ContainerInfo points at, kept until the response is sent. */
struct docker_describe {
    Workspace__V1__ContainerInfo info;
    struct ws_docker_rt_info rt;
    char why[WS_DIAG_MESSAGE_MAX];
    char last_error[WS_DIAG_MESSAGE_MAX + 128];
};

static void docker_describe_free(void *keep)
{
    free(keep);
}

/* The container as the daemon reports it now; the hardening only when
 * there is a container to read it from. */
static int docker_describe(void *rt, const struct ws_provider_ws *w,
                           Workspace__V1__DescribeResponse *resp, void **ret_keep)
{
    struct ws_docker_rt *docker = runtime_of(rt);
    const Workspace__V1__DockerConfig *dc = config_of(w->rec);
    struct docker_describe *k;

    if (!dc || !docker) {
        *ret_keep = NULL;
        return 0;
    }
    k = calloc(1, sizeof(*k));
    if (!k)
        return -ENOMEM;
    workspace__v1__container_info__init(&k->info);
    ws_docker_rt_describe(docker, w->id, &k->rt);
    const struct ws_docker_rt_info *di = &k->rt;
    const struct ws_docker_hardening *h = &di->hardening;
    Workspace__V1__ContainerInfo *ci = &k->info;
    ci->daemon_reachable = di->reachable;
    ci->api_version = (char *)di->api_version;
    ci->id = (char *)di->container_id;
    ci->image = dc->image;
    ci->running = di->running;
    ci->oom_killed = di->oom_killed;
    if (di->container_id[0]) {
        ci->cap_drop_all = h->cap_drop_all;
        ci->cap_add = h->n_cap_add;
        ci->privileged = h->privileged;
        ci->no_new_privileges = h->no_new_privileges;
        ci->read_only_rootfs = h->readonly_rootfs;
        ci->init = h->init;
        ci->network_mode = (char *)h->network_mode;
        ci->user = (char *)h->user;
        ci->pids_limit = h->pids_limit;
        ci->memory_bytes = h->memory;
        ci->memory_swap_bytes = h->memory_swap;
        ci->nano_cpus = h->nano_cpus;
        ci->tmp_options = (char *)h->tmp_options;
        ci->log_driver = (char *)h->log_type;
        ci->ipc_mode = (char *)h->ipc_mode;
        ci->other_mounts = h->n_other_mounts;
        ci->runtime = (char *)h->runtime;
    }
    resp->container = ci;
    const char *mode = ws_docker_rt_exec_mode(docker, w->id);
    resp->exec_mode = (char *)(mode ? mode : ws_docker_agent_mode(dc) ? "agent" : "per-command");
    /* A container that lost its agent: the workspace is failed until a
     * Resolve makes it again. */
    if (ws_docker_rt_box_failed(docker, w->id, k->why, sizeof(k->why))) {
        resp->state = WORKSPACE__V1__WORKSPACE_STATE__STATE_FAILED;
        snprintf(k->last_error, sizeof(k->last_error),
                 "WORKSPACE_FAILED: the workspace's container ended (%s); Resolve brings up a "
                 "fresh one",
                 k->why);
        resp->last_error = k->last_error;
    }
    *ret_keep = k;
    return 0;
}

const struct ws_provider_ops ws_docker_ops = {
    .kind = WS_PROVIDER_DOCKER,
    .name = "docker",
    .isolation = "container",
    .caps = WS_CAP_FS | WS_CAP_SHELL,
    .on_disk = true,
    /* Its commands run as the workspace's uid (or the policy's docker.user),
     * never as the container's root. */
    .commands_run_as_uid = true,
    .open_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_DOCKER,
    .record_case = WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__CONFIG_DOCKER,
    .rt_new = docker_rt_new,
    .rt_free = docker_rt_free,
    .reconcile = docker_reconcile,
    .check = docker_check,
    .policy_image = docker_policy_image,
    .record = docker_record,
    .network = docker_network,
    .probe = docker_probe,
    .list_info = docker_list_info,
    .list_runtimes = docker_list_runtimes,
    .attach = docker_attach,
    .detach = docker_detach,
    .forget = docker_forget,
    .fs_open = ws_provider_fs_open_dir,
    .exec_env = &docker_exec_env,
    .exec_wrap = docker_exec_wrap,
    .exec_discard = ws_docker_rt_discard,
    .describe = docker_describe,
    .describe_free = docker_describe_free,
};
