/* The local-sandbox provider: the workspace is a host directory, and each
 * command runs in a bubblewrap sandbox of its own with a seccomp filter
 * (sandbox.h). The runtime is the sandbox backend: the seccomp program,
 * the /etc snapshot and the workspaces' resource groups. */
#include "server/providers/local_sandbox_ops.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/agent/client.h"
#include "server/providers/ops.h"
#include "server/providers/probe.h"

/* Describe reports every bind the check lets through. */
#define BINDS_REPORTED WS_SANDBOX_BINDS_MAX
#define NAMESPACES_MAX 8

static const Workspace__V1__LocalSandboxConfig *config_of(const ws_record *rec)
{
    if (rec->config_case == WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__CONFIG_LOCAL_SANDBOX)
        return rec->local_sandbox;
    return NULL;
}

bool ws_local_sandbox_agent_mode(const Workspace__V1__LocalSandboxConfig *c)
{
    /* Agent mode is the default. */
    return c && c->exec_mode != WORKSPACE__V1__EXEC_MODE__EXEC_MODE_PER_COMMAND;
}

void ws_local_sandbox_limits(const Workspace__V1__LocalSandboxConfig *c, struct ws_limits *ret)
{
    *ret = (struct ws_limits){
        .pids_max = c && c->pids_limit ? c->pids_limit : WS_SANDBOX_DEFAULT_PIDS,
        .memory_bytes = (uint64_t)(c && c->memory_mb ? c->memory_mb : WS_SANDBOX_DEFAULT_MEMORY_MB)
                        << 20,
        .cpu_millis = c && c->cpus > 0 ? (uint32_t)(c->cpus * 1000 + 0.5) : 0,
    };
}

static int sandbox_rt_new(const struct ws_provider_config *cfg, void **ret_rt)
{
    struct ws_sandbox *sb;
    int err =
        ws_sandbox_new_ids(cfg ? cfg->sandbox_dir : NULL, cfg ? cfg->uid_range_first : 0, &sb);

    if (err < 0)
        return err;
    *ret_rt = sb;
    return 0;
}

static void sandbox_rt_free(void *rt)
{
    ws_sandbox_free(rt);
}

/* ---- the Open ---- */

/* Whether one of two canonical paths contains the other. */
static bool paths_overlap(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), n = la < lb ? la : lb;

    if (strncmp(a, b, n) != 0)
        return false;
    /* "/" contains everything; otherwise the shorter must end at a '/'. */
    return la == lb || n == 1 || (la > lb ? a[n] : b[n]) == '/';
}

/* Extra host paths for the sandbox must be canonical (so what is checked
 * is what gets bound) and must neither be nor contain nor sit inside the
 * server's state directory or workspace root: the ref key and other
 * workspaces stay out of every sandbox. */
static int check_paths(size_t n, char **paths, const char *what, const char *const *own,
                       size_t n_own, struct ws_diag *d)
{
    if (n > WS_SANDBOX_BINDS_MAX) {
        ws_diag_set(d, "%s has %zu entries; at most %d", what, n, WS_SANDBOX_BINDS_MAX);
        ws_diag_meta(d, "field", "%s", what);
        return -WS_ELIMIT;
    }
    for (size_t i = 0; i < n; i++) {
        char *canon = realpath(paths[i], NULL);
        bool ok = paths[i][0] == '/' && canon && strcmp(canon, paths[i]) == 0;

        free(canon);
        if (!ok) {
            ws_diag_set(d, "%s[%zu] must be an existing canonical absolute path (no symlinks)",
                        what, i);
            ws_diag_meta(d, "field", "%s", what);
            return -WS_EMALFORMED;
        }
        for (size_t k = 0; k < n_own; k++) {
            if (paths_overlap(paths[i], own[k])) {
                ws_diag_set(d, "%s[%zu] overlaps the server's own directories", what, i);
                ws_diag_meta(d, "field", "%s", what);
                return -WS_EMALFORMED;
            }
        }
    }
    return 0;
}

static int sandbox_check(void *rt, const Workspace__V1__OpenRequest *req, const char *const *own,
                         size_t n_own, union ws_provider_scratch *scratch,
                         const Workspace__V1__OpenRequest **ret_req, struct ws_diag *d)
{
    const Workspace__V1__LocalSandboxConfig *c = req->local_sandbox;
    const char *bad = NULL;
    int err;

    (void)rt;
    (void)scratch;
    err =
        check_paths(c->n_read_write_paths, c->read_write_paths, "read_write_paths", own, n_own, d);
    if (err == 0)
        err =
            check_paths(c->n_read_only_paths, c->read_only_paths, "read_only_paths", own, n_own, d);
    if (err < 0)
        return err;
    if (c->pids_limit &&
        (c->pids_limit < WS_SANDBOX_PIDS_MIN || c->pids_limit > WS_SANDBOX_PIDS_MAX))
        bad = "pids_limit";
    else if (c->memory_mb &&
             (c->memory_mb < WS_SANDBOX_MEMORY_MB_MIN || c->memory_mb > WS_SANDBOX_MEMORY_MB_MAX))
        bad = "memory_mb";
    else if (!(c->cpus >= 0 && c->cpus <= WS_SANDBOX_CPUS_MAX) || (c->cpus > 0 && c->cpus < 0.01))
        bad = "cpus";
    if (bad) {
        ws_diag_set(d,
                    "local_sandbox.%s is out of range (pids %u-%u, memory_mb %u-%u, cpus "
                    "0.01-%d; 0 for the default)",
                    bad, WS_SANDBOX_PIDS_MIN, WS_SANDBOX_PIDS_MAX, WS_SANDBOX_MEMORY_MB_MIN,
                    WS_SANDBOX_MEMORY_MB_MAX, WS_SANDBOX_CPUS_MAX);
        ws_diag_meta(d, "field", "%s", bad);
        return -WS_ELIMIT;
    }
    *ret_req = req;
    return 0;
}

/* Every cap of the workspace (asked for, or a default) must be one this
 * host enforces, and a sandbox with network needs its user-mode network:
 * without the tool it would fail every command. Either way the Open fails
 * closed now. */
static int sandbox_open_check(void *rt, const struct ws_provider_open *o, struct ws_diag *d)
{
    const Workspace__V1__LocalSandboxConfig *c = o->req->local_sandbox;
    struct ws_limits l;
    const char *cap = NULL;
    struct ws_probe pr;

    ws_local_sandbox_limits(c, &l);
    if (rt && ws_sandbox_limits_check(rt, &l, &cap) < 0) {
        ws_diag_set(d,
                    "local-sandbox cannot enforce the %s cap on this host (no writable cgroup "
                    "controller for it); a cap that cannot be enforced refuses the Open",
                    cap);
        ws_diag_meta(d, "cap", "%s", cap);
        ws_diag_meta(d, "transient", "false");
        return -WS_EFAILED;
    }
    if (!c || c->network != WORKSPACE__V1__NETWORK__NETWORK_ALLOW)
        return 0;
    ws_probe_usernet(&pr);
    if (pr.available)
        ws_probe_tun(WS_TUN_PATH, o->own_uid, &pr);
    if (!pr.available) {
        ws_diag_set(d, "local-sandbox with network unavailable: %s", pr.reason);
        ws_diag_meta(d, "transient", "false");
        return -WS_EFAILED;
    }
    return 0;
}

/* A Resolve (!fresh) of a workspace whose box lost its agent brings up a
 * fresh box over the same files, with its next command; a box that is
 * well is kept. Nothing to make at Open: the first command makes it. */
static int sandbox_attach(void *rt, const struct ws_provider_ws *w, bool fresh, struct ws_diag *d)
{
    (void)d;
    if (rt && !fresh && ws_sandbox_box_failed(rt, w->id, NULL, 0))
        ws_sandbox_box_reset(rt, w->id);
    return 0;
}

static int sandbox_record(const struct ws_provider_open *o, ws_record *rec,
                          union ws_provider_scratch *scratch)
{
    (void)scratch;
    rec->config_case = WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__CONFIG_LOCAL_SANDBOX;
    rec->local_sandbox = o->req->local_sandbox;
    return 0;
}

static Workspace__V1__Network sandbox_network(const ws_record *rec)
{
    const Workspace__V1__LocalSandboxConfig *c = config_of(rec);

    return c ? c->network : WORKSPACE__V1__NETWORK__NETWORK_OFF;
}

static void sandbox_probe(void *rt, struct ws_probe *ret)
{
    (void)rt;
    ws_probe_bwrap(ret);
}

static void sandbox_forget(void *rt, const char *id)
{
    if (rt)
        ws_sandbox_forget(rt, id);
}

/* ---- commands ---- */

static const struct ws_provider_exec_env sandbox_exec_env = {
    .path = NULL,
    .home = WS_SANDBOX_WORKSPACE,
    .on_host = false,
    .foreign_root = false,
    .spawn_as_uid = true,
};

static int sandbox_exec_wrap(void *rt, const struct ws_provider_ws *w,
                             const struct ws_provider_cmd *c, struct ws_proc_wrapper *ret,
                             struct ws_diag *d)
{
    const Workspace__V1__LocalSandboxConfig *sc = config_of(w->rec);
    struct ws_sandbox_spec spec = {
        .workspace_id = w->id,
        .workspace_dir = w->dir,
        .cwd = c->cwd,
        .network = sandbox_network(w->rec) == WORKSPACE__V1__NETWORK__NETWORK_ALLOW,
        .rw_paths = sc ? (const char *const *)sc->read_write_paths : NULL,
        .n_rw = sc ? sc->n_read_write_paths : 0,
        .ro_paths = sc ? (const char *const *)sc->read_only_paths : NULL,
        .n_ro = sc ? sc->n_read_only_paths : 0,
        .argv = c->argv,
        .pty = c->pty,
        /* The spawn runs bwrap as it (spawn_as_uid). */
        .uid = w->rec->uid,
        .gid = w->rec->gid,
    };
    int err;

    ws_local_sandbox_limits(sc, &spec.limits);
    if (rt && ws_local_sandbox_agent_mode(sc)) {
        char why[WS_DIAG_MESSAGE_MAX] = "";
        err = ws_sandbox_agent_wrap(rt, &spec, c->run_as, c->envp, c->timeout_ms, ret, why,
                                    sizeof(why));
        /* bubblewrap itself first (below), then the agent's programs. */
        struct ws_probe bw;
        if (err == -ENOENT)
            ws_probe_bwrap(&bw);
        if (err == -ENOENT && bw.available && !ws_probe_agent_path()) {
            ws_diag_set(d, "the sandbox's agent (" WS_AGENT_NAME ") is not installed");
            return -WS_EFAILED;
        }
        if (err == -ENOENT && bw.available && !ws_probe_inbox_init_path()) {
            ws_diag_set(d, "the agent's init (" WS_INBOX_INIT_NAME ") is not installed");
            return -WS_EFAILED;
        }
        if (err < 0 && err != -ENOENT && err != -ENOMEM) {
            ws_diag_set(d, "%s", why[0] ? why : strerror(-err));
            ws_diag_meta(d, "transient", "false");
            /* A box that ended: its files are there, a Resolve makes a
             * fresh box over them. */
            if (err == -EPIPE)
                ws_diag_meta(d, "resolve", "true");
            return -WS_EFAILED;
        }
    } else {
        /* Without a runtime there is no sandbox, as without its backend. */
        err = rt ? ws_sandbox_wrap(rt, &spec, ret) : -ENOENT;
    }
    if (err == -ENOENT) {
        /* Fail closed: the backend went away since Open. */
        struct ws_probe pr;
        ws_probe_bwrap(&pr);
        ws_diag_set(d, "the sandbox cannot be created: %s",
                    pr.reason[0] ? pr.reason : "its backend is missing");
        return -WS_EFAILED;
    }
    if (err == -ESTALE) {
        ws_diag_set(d, "a bind path of this workspace changed since it was opened (it is "
                       "gone, or a symlink now): the sandbox is not started");
        return -WS_EFAILED;
    }
    if (err == -EOPNOTSUPP) {
        const char *cap = "pids";
        (void)ws_sandbox_limits_check(rt, &spec.limits, &cap);
        ws_diag_set(d,
                    "the workspace's %s cap is not in force on this host now: the sandbox is "
                    "not started",
                    cap);
        ws_diag_meta(d, "cap", "%s", cap);
        return -WS_EFAILED;
    }
    return err;
}

/* ---- Describe ---- */

/* Everything the SandboxInfo points at, kept until the response is sent. */
struct sandbox_describe {
    Workspace__V1__SandboxInfo info;
    Workspace__V1__SandboxLimits limits;
    Workspace__V1__SandboxBind bind_items[1 + 2 * BINDS_REPORTED];
    Workspace__V1__SandboxBind *binds[1 + 2 * BINDS_REPORTED];
    char *targets[1 + 2 * BINDS_REPORTED];
    size_t n_targets;
    char *ns[NAMESPACES_MAX];
    char *enforced[3];
    char version[32];
    char ns_buf[64];
    struct ws_probe probe;
    char box_why[WS_AGENT_WHY_MAX];
    char last_error[WS_AGENT_WHY_MAX + 96];
};

static void sandbox_describe_free(void *keep)
{
    struct sandbox_describe *k = keep;

    if (!k)
        return;
    for (size_t i = 0; i < k->n_targets; i++)
        free(k->targets[i]);
    free(k);
}

static void describe_binds(struct sandbox_describe *k, const Workspace__V1__LocalSandboxConfig *sc)
{
    size_t n = 0;

    k->bind_items[n] = (Workspace__V1__SandboxBind)WORKSPACE__V1__SANDBOX_BIND__INIT;
    k->bind_items[n].source = "";
    k->bind_items[n].target = WS_SANDBOX_WORKSPACE;
    k->binds[n] = &k->bind_items[n];
    n++;
    for (size_t i = 0; i < sc->n_read_write_paths + sc->n_read_only_paths; i++) {
        bool ro = i >= sc->n_read_write_paths;
        size_t j = ro ? i - sc->n_read_write_paths : i;
        if (j >= BINDS_REPORTED)
            continue;
        char *src = ro ? sc->read_only_paths[j] : sc->read_write_paths[j];
        char *target = NULL;
        if (asprintf(&target, "%s%s", WS_SANDBOX_BIND_PREFIX, src) < 0)
            continue;
        k->targets[k->n_targets++] = target;
        k->bind_items[n] = (Workspace__V1__SandboxBind)WORKSPACE__V1__SANDBOX_BIND__INIT;
        k->bind_items[n].source = src;
        k->bind_items[n].target = target;
        k->bind_items[n].read_only = ro;
        k->binds[n] = &k->bind_items[n];
        n++;
    }
    k->info.binds = k->binds;
    k->info.n_binds = n;
}

/* The caps in force: the workspace's group's when it has one, else what
 * the host would enforce. */
static void describe_limits(struct ws_sandbox *sb, const char *id, struct sandbox_describe *k,
                            const Workspace__V1__LocalSandboxConfig *sc)
{
    struct ws_limits l;
    struct ws_sandbox_limits_info li;
    size_t n = 0;

    ws_local_sandbox_limits(sc, &l);
    ws_sandbox_limits_report(sb, id, &l, &li);
    k->limits.pids_max = l.pids_max;
    k->limits.memory_bytes = l.memory_bytes;
    k->limits.cpus = l.cpu_millis / 1000.0;
    k->limits.mechanism = (char *)li.mechanism;
    if (li.enforced & WS_LIMIT_PIDS)
        k->enforced[n++] = "pids";
    if (li.enforced & WS_LIMIT_MEMORY)
        k->enforced[n++] = "memory";
    if (li.enforced & WS_LIMIT_CPU)
        k->enforced[n++] = "cpu";
    k->limits.enforced = k->enforced;
    k->limits.n_enforced = n;
    k->info.limits = &k->limits;
}

/* Without a runtime (the built-in set) there is nothing to report on. */
static int sandbox_describe(void *rt, const struct ws_provider_ws *w,
                            Workspace__V1__DescribeResponse *resp, void **ret_keep)
{
    const Workspace__V1__LocalSandboxConfig *sc = config_of(w->rec);
    struct sandbox_describe *k;
    size_t n = 0;

    if (!sc || !rt) {
        *ret_keep = NULL;
        return 0;
    }
    k = calloc(1, sizeof(*k));
    if (!k)
        return -ENOMEM;
    workspace__v1__sandbox_info__init(&k->info);
    workspace__v1__sandbox_limits__init(&k->limits);
    ws_probe_bwrap(&k->probe);
    ws_sandbox_backend_version(k->version, sizeof(k->version));
    k->info.backend = "bubblewrap";
    k->info.version = k->version;
    k->info.available = k->probe.available;
    k->info.reason = k->probe.reason;
    snprintf(k->ns_buf, sizeof(k->ns_buf), "%s",
             ws_sandbox_namespaces(sc->network == WORKSPACE__V1__NETWORK__NETWORK_ALLOW));
    for (char *save = NULL, *t = strtok_r(k->ns_buf, ",", &save); t && n < NAMESPACES_MAX;
         t = strtok_r(NULL, ",", &save))
        k->ns[n++] = t;
    k->info.namespaces = k->ns;
    k->info.n_namespaces = n;
    k->info.seccomp = true;
    k->info.seccomp_policy = (char *)ws_sandbox_seccomp_summary(rt);
    k->info.network = sc->network;
    resp->exec_mode = ws_local_sandbox_agent_mode(sc) ? "agent" : "per-command";
    /* A box that lost its agent: the workspace is failed until a Resolve
     * brings up a fresh one. */
    if (ws_sandbox_box_failed(rt, w->id, k->box_why, sizeof(k->box_why))) {
        resp->state = WORKSPACE__V1__WORKSPACE_STATE__STATE_FAILED;
        snprintf(k->last_error, sizeof(k->last_error),
                 "WORKSPACE_FAILED: the workspace's box ended (%s); Resolve brings up a fresh one",
                 k->box_why);
        resp->last_error = k->last_error;
    }
    describe_binds(k, sc);
    describe_limits(rt, w->id, k, sc);
    resp->sandbox = &k->info;
    *ret_keep = k;
    return 0;
}

const struct ws_provider_ops ws_local_sandbox_ops = {
    .kind = WS_PROVIDER_LOCAL_SANDBOX,
    .name = "local-sandbox",
    .isolation = "namespaces+seccomp",
    .caps = WS_CAP_FS | WS_CAP_SHELL,
    .on_disk = true,
    .commands_run_as_uid = true,
    .open_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_SANDBOX,
    .record_case = WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__CONFIG_LOCAL_SANDBOX,
    .rt_new = sandbox_rt_new,
    .rt_free = sandbox_rt_free,
    .check = sandbox_check,
    .open_check = sandbox_open_check,
    .attach = sandbox_attach,
    .record = sandbox_record,
    .network = sandbox_network,
    .probe = sandbox_probe,
    .forget = sandbox_forget,
    .fs_open = ws_provider_fs_open_dir,
    .exec_env = &sandbox_exec_env,
    .exec_wrap = sandbox_exec_wrap,
    .exec_discard = ws_sandbox_discard,
    .describe = sandbox_describe,
    .describe_free = sandbox_describe_free,
};
