#include "server/rpc/services/services.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/audit/audit.h"
#include "server/base/utf8.h"
#include "server/exec/exec.h"
#include "server/metrics/metrics.h"
#include "server/providers/docker.h"
#include "server/rpc/log.h"
#include "server/providers/sandbox.h"
#include "server/rpc/services/internal.h"

/* metrics: the per-tenant gauges read the counts the quotas use. */
static void gauge_one(void *ud, const char *tenant, unsigned n)
{
    ws_metrics_tenant_gauge(ud, tenant, (long)n);
}

static void workspaces_gauge(void *ud, struct ws_metrics_gauges *g)
{
    ws_registry_tenants(ud, gauge_one, g);
}

static void commands_gauge(void *ud, struct ws_metrics_gauges *g)
{
    ws_exec_tenants(ud, gauge_one, g);
}

static void close_hook(void *ud, const char *id)
{
    struct ws_services *s = ud;
    ws_exec_close_workspace(s->exec, id, WS_CAUSE_EVICTED);
    ws_sandbox_forget(s->sandbox, id);
}

static int rt_attach(void *ud, struct ws_workspace *ws, const char *dir, bool fresh,
                     struct ws_diag *d)
{
    struct ws_services *s = ud;
    const Workspace__V1__DockerConfig *cfg = ws_workspace_docker_config(ws);

    if (!cfg)
        return 0;
    if (!s->docker) {
        ws_diag_set(d, "docker backend unavailable: the server runs without a Docker runtime");
        return -WS_EFAILED;
    }
    return ws_docker_rt_attach(s->docker, ws_workspace_id(ws), dir, cfg, fresh, d);
}

static int rt_detach(void *ud, struct ws_workspace *ws, struct ws_diag *d)
{
    struct ws_services *s = ud;

    if (!ws_workspace_docker_config(ws) || !s->docker)
        return 0;
    return ws_docker_rt_detach(s->docker, ws_workspace_id(ws), d);
}

int ws_services_reconcile(struct ws_services *s, struct ws_diag *d)
{
    return s->docker ? ws_docker_rt_reconcile(s->docker, d) : 0;
}

void ws_services_sandbox_limits(const Workspace__V1__LocalSandboxConfig *c, struct ws_limits *ret)
{
    *ret = (struct ws_limits){
        .pids_max = c && c->pids_limit ? c->pids_limit : WS_SANDBOX_PIDS_DEFAULT,
        .memory_bytes = (uint64_t)(c && c->memory_mb ? c->memory_mb : WS_SANDBOX_MEMORY_MB_DEFAULT)
                        << 20,
        .cpu_millis = c && c->cpus > 0 ? (uint32_t)(c->cpus * 1000 + 0.5) : 0,
    };
}

bool ws_services_exec_path_valid(const char *path)
{
    size_t n = path ? strlen(path) : 0;

    if (n == 0 || n > WS_SERVICES_EXEC_PATH_MAX)
        return false;
    for (const char *c = path; *c;) {
        if (*c != '/')
            return false; /* relative or empty component */
        const char *end = strchr(c, ':');
        if (!end)
            break;
        c = end + 1;
    }
    return path[n - 1] != ':';
}

int ws_services_new(struct ws_registry *reg, const struct ws_services_config *cfg,
                    struct ws_services **ret)
{
    struct ws_services *s = calloc(1, sizeof(*s));
    size_t n = 0;
    int err;

    if (!s)
        return -ENOMEM;
    s->methods = calloc(WS_SERVICES_MAX_METHODS, sizeof(*s->methods));
    if (!s->methods) {
        free(s);
        return -ENOMEM;
    }
    s->reg = reg;
    const char *path = cfg && cfg->exec_path ? cfg->exec_path : WS_SERVICES_EXEC_PATH_DEFAULT;
    if (!ws_services_exec_path_valid(path)) {
        free(s->methods);
        free(s);
        return -EINVAL;
    }
    s->exec_path = strdup(path);
    if (!s->exec_path) {
        free(s->methods);
        free(s);
        return -ENOMEM;
    }
    struct ws_exec_config ec = {
        .grace_ms = cfg ? cfg->kill_grace_ms : 0,
        .containment = cfg && cfg->force_subreaper ? WS_TREE_FORCE_SUBREAPER : WS_TREE_AUTO,
        .running_per_tenant = cfg ? cfg->tenant_max_commands : 0,
        .home_root = cfg ? cfg->home_root : NULL,
        .on_finished = ws_services_exec_audit,
        .ud = s,
    };
    err = ws_sandbox_new(cfg ? cfg->sandbox_dir : NULL, &s->sandbox);
    if (err < 0) {
        free(s->exec_path);
        free(s->methods);
        free(s);
        return err;
    }
    if (cfg && cfg->server_id) {
        err = ws_docker_rt_new(cfg->server_id, &s->docker);
        if (err < 0) {
            ws_sandbox_free(s->sandbox);
            free(s->exec_path);
            free(s->methods);
            free(s);
            return err;
        }
    }
    if (cfg && cfg->audit_dir) {
        err = ws_audit_new(cfg->audit_dir, &s->audit);
        if (err < 0) {
            ws_docker_rt_free(s->docker);
            ws_sandbox_free(s->sandbox);
            free(s->exec_path);
            free(s->methods);
            free(s);
            return err;
        }
    }
    err = ws_exec_new(&ec, &s->exec);
    if (err < 0) {
        ws_audit_free(s->audit);
        ws_docker_rt_free(s->docker);
        ws_sandbox_free(s->sandbox);
        free(s->exec_path);
        free(s->methods);
        free(s);
        return err;
    }
    ws_registry_set_close_hook(reg, close_hook, s);
    ws_metrics_set_source(WS_METRICS_WORKSPACES, workspaces_gauge, reg); /* metrics */
    ws_metrics_set_source(WS_METRICS_COMMANDS, commands_gauge, s->exec);
    struct ws_registry_runtime rt = {.attach = rt_attach, .detach = rt_detach, .ud = s};
    ws_registry_set_runtime(reg, &rt);
    atomic_init(&s->draining, false);
    pthread_mutex_init(&s->watch_lock, NULL);
    n += ws_services_providers(s, s->methods + n);
    n += ws_services_workspaces(s, s->methods + n);
    n += ws_services_filesystem(s, s->methods + n);
    n += ws_services_exec(s, s->methods + n);
    n += ws_services_health(s, s->methods + n);
    s->n_methods = n;
    *ret = s;
    return 0;
}

void ws_services_free(struct ws_services *s)
{
    if (!s)
        return;
    ws_metrics_set_source(WS_METRICS_WORKSPACES, NULL, NULL);
    ws_metrics_set_source(WS_METRICS_COMMANDS, NULL, NULL);
    ws_exec_free(s->exec);
    /* After the exec layer: its last commands' records go in first. */
    ws_audit_free(s->audit);
    ws_docker_rt_free(s->docker);
    ws_sandbox_free(s->sandbox);
    free(s->exec_path);
    pthread_mutex_destroy(&s->watch_lock);
    free(s->methods);
    free(s);
}

const struct ws_rpc_method *ws_services_methods(struct ws_services *s, size_t *ret_n)
{
    *ret_n = s->n_methods;
    return s->methods;
}

void ws_services_drain(struct ws_services *s)
{
    atomic_store(&s->draining, true);
    ws_services_health_drain(s);
}

static Workspace__V1__FileType file_type(enum ws_ftype t)
{
    switch (t) {
    case WS_FT_REGULAR:
        return WORKSPACE__V1__FILE_TYPE__FILE_TYPE_REGULAR;
    case WS_FT_DIRECTORY:
        return WORKSPACE__V1__FILE_TYPE__FILE_TYPE_DIRECTORY;
    case WS_FT_SYMLINK:
        return WORKSPACE__V1__FILE_TYPE__FILE_TYPE_SYMLINK;
    case WS_FT_OTHER:
        return WORKSPACE__V1__FILE_TYPE__FILE_TYPE_OTHER;
    default:
        return WORKSPACE__V1__FILE_TYPE__FILE_TYPE_UNSPECIFIED;
    }
}

void ws_fileinfo_fill(Workspace__V1__FileInfo *fi, const char *path, size_t path_len,
                      const struct ws_stat *st)
{
    static char empty[] = "";

    workspace__v1__file_info__init(fi);
    /* A name that is not UTF-8 would corrupt a proto string: it travels as
     * bytes instead. */
    if (ws_utf8_valid(path, path_len)) {
        fi->path = (char *)path;
    } else {
        fi->path = empty;
        fi->path_bytes.data = (uint8_t *)path;
        fi->path_bytes.len = path_len;
    }
    fi->type = file_type(st->type);
    fi->size = st->size;
    fi->mode = st->mode;
    fi->mtime_unix_ns = st->mtime_ns;
    fi->nlink = st->nlink;
}

int ws_services_workspace(struct ws_call *call, const char *id, unsigned need_caps,
                          struct ws_workspace **ret)
{
    struct ws_services *s = ws_call_method_data(call);
    struct ws_diag d = {0};
    int err = ws_registry_get(s->reg, ws_call_tenant(call), id, need_caps, &d, ret);

    if (err < 0)
        ws_call_fail(call, err, &d);
    return err;
}

void ws_services_fail(struct ws_call *call, struct ws_workspace *ws, int err,
                      const struct ws_diag *d)
{
    if (ws)
        ws_workspace_note(ws, err, d);
    ws_call_fail(call, err, d);
}

void ws_services_audit_file(struct ws_services *s, struct ws_workspace *ws,
                            const struct ws_audit_file *f)
{
    int err;

    if (!s->audit)
        return;
    err = ws_audit_file(s->audit, ws_workspace_id(ws), f);
    if (err < 0)
        ws_log_msg(WS_RPC_LOG_ERROR, "audit.failed", "cannot record %s of a file in %s: %s",
                   f->event, ws_workspace_id(ws), strerror(-err));
}

int ws_services_check_path(struct ws_call *call, struct ws_workspace *ws, const char *path)
{
    int err = ws_vfs_check_path(path);

    if (err < 0) {
        struct ws_diag d = {0};

        ws_diag_set(&d, err == -EXDEV ? "the path leads outside the workspace"
                                      : "the path is empty or too long");
        ws_services_fail(call, ws, err, &d);
    }
    return err;
}
