/* The composition root: builds the server's parts in dependency order,
 * wires the hooks between them, and tears them down in reverse with one
 * destructor that accepts a half-built app. The only file above the
 * providers that may name one: it makes their runtimes. */
#include "server/app.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/audit/audit.h"
#include "server/base/io.h"
#include "server/base/macros.h"
#include "server/exec/exec.h"
#include "server/metrics/http.h"
#include "server/metrics/metrics.h"
#include "server/policy/policy.h"
#include "server/providers/provider.h"
#include "server/registry/registry.h"
#include "server/rpc/call.h"
#include "server/rpc/log.h"
#include "server/rpc/services/services.h"
#include "server/work/pool.h"

struct ws_app {
    struct ws_registry *reg;
    /* The registry refused to start and said why (registry_says). */
    bool registry_said;
    /* The providers with their runtimes (the Docker provider's containers
     * are named and labelled with this state directory's server id). */
    struct ws_providers *providers;
    struct ws_audit *audit;
    struct ws_exec *exec;
    /* Where the services' slow work runs (freed right after the RPC
     * server, see app.h). */
    struct ws_pool *pool;
    struct ws_services *svc;
    struct ws_rpc_server *server;
    struct ws_metrics_http *metrics;
    int port;
};

static int make_state_dir(const char *dir)
{
    struct stat st;

    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -errno;
    if (stat(dir, &st) < 0)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        return -ENOTDIR;
    return 0;
}

/* <state_dir>/<name> into ret; false when it does not fit. */
static bool state_path(const char *state_dir, const char *name, char ret[static PATH_MAX])
{
    return snprintf(ret, PATH_MAX, "%s/%s", state_dir, name) < PATH_MAX;
}

/* This server's id (16 hex digits) from <state>/server-id, made on first
 * start: it names and labels the Docker containers of this state
 * directory's workspaces, so a restart finds what it left and two servers
 * on one daemon never touch each other's. */
static int load_server_id(const char *dir, char ret[17])
{
    char path[PATH_MAX], buf[17];
    ssize_t n = 0;
    int fd;

    if (!state_path(dir, "server-id", path))
        return -ENAMETOOLONG;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        n = ws_read_all(fd, buf, 16);
        close(fd);
        if (n == 16) {
            buf[16] = '\0';
            if (strspn(buf, "0123456789abcdef") == 16) {
                memcpy(ret, buf, 17);
                return 0;
            }
        }
        return -EINVAL;
    }
    if (errno != ENOENT)
        return -errno;
    uint8_t rnd[8];
    if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
        return -EIO;
    for (int i = 0; i < 8; i++)
        snprintf(buf + 2 * i, 3, "%02x", rnd[i]);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    if (ws_write_all(fd, buf, 16) < 0 || fsync(fd) < 0) {
        close(fd);
        unlink(path);
        return -EIO;
    }
    close(fd);
    memcpy(ret, buf, 17);
    return 0;
}

/* A unix socket left behind by a server that died would make the bind
 * fail, and gRPC would silently take over the path of a live one. So: a
 * socket nobody answers on is removed; one a server answers on is
 * -EADDRINUSE. */
static int claim_unix_socket(const char *listen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    const char *path = listen + 5;
    struct stat st;
    int fd, err = 0;

    if (strncmp(listen, "unix:", 5) != 0)
        return 0;
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode))
        return -EEXIST;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
        err = -EADDRINUSE;
    else if (errno == ECONNREFUSED && unlink(path) < 0)
        err = -errno;
    close(fd);
    return err;
}

_Static_assert(WS_POLICY_TENANT_MAX == WS_RPC_TENANT_MAX, "one tenant name length");

/* What the registry tells the operator: why it refused to start, or a
 * warning. */
static void registry_says(void *ud, bool error, const char *message)
{
    struct ws_app *app = ud;

    if (error)
        app->registry_said = true;
    ws_log_msg(WS_RPC_LOG_ERROR, error ? "server.start_failed" : "registry.warning", "%s", message);
}

/* [peers]: the tenant of a caller on the unix socket by its uid, from the
 * policy set in force (swapped whole on SIGHUP, so a reload applies to the
 * next call). */
static bool peer_tenant_of(void *ud, uint32_t uid, char *ret)
{
    struct ws_policy_set *set;
    bool found;

    /* A workspace's uid (its commands) is never anyone's peer. */
    if (ws_registry_uid_in_range(ud, (uid_t)uid))
        return false;
    set = ws_registry_policy(ud);
    found = ws_policy_peer_tenant(set, (uid_t)uid, ret);

    ws_policy_set_unref(set);
    return found;
}

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

/* A workspace closed or evicted: its commands end. (The registry then
 * has its provider forget it.) */
static void close_hook(void *ud, const char *id, bool expired)
{
    struct ws_app *app = ud;

    ws_exec_close_workspace(app->exec, id, expired ? WS_CAUSE_EXPIRED : WS_CAUSE_EVICTED);
    /* After its commands' own records: the log ends with why it closed. */
    if (expired && app->audit && ws_audit_expire(app->audit, id) < 0)
        ws_metrics_audit_lost("expire");
    if (expired)
        ws_log_msg(WS_RPC_LOG_INFO, "workspace.expired", "workspace %s expired and was closed", id);
}

/* A workspace is not idle while its commands or streams run (the exec
 * layer knows) or while a client watches it. */
static bool busy_hook(void *ud, const char *id)
{
    struct ws_app *app = ud;

    return ws_exec_workspace_busy(app->exec, id) || ws_services_watched(id);
}

/* The exec layer is made before the services (they start commands in
 * it), so its callback for a finished command reaches them through the
 * app. ws_app_free ends the exec layer before it frees the services, so
 * the last commands are recorded too. */
static void command_finished(void *ud, const char *workspace_id, struct ws_proc *p,
                             const struct ws_proc_result *r)
{
    struct ws_app *app = ud;

    if (app->svc)
        ws_services_exec_audit(app->svc, workspace_id, p, r);
}

/* The pool's two lanes from the configuration: the FS lane's threads
 * compete with the RPC threads for the CPU, so they run at a lower
 * priority; the DAEMON lane's mostly wait on a socket, and spawn commands,
 * which inherit a thread's priority: theirs stays the server's. */
static int start_pool(struct ws_app *app, const struct ws_app_config *cfg)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned fs = cfg->work.fs_threads >= 0    ? (unsigned)cfg->work.fs_threads
                  : ncpu < 1                   ? 1
                  : ncpu > WS_POOL_THREADS_MAX ? WS_POOL_THREADS_MAX
                                               : (unsigned)ncpu;
    unsigned daemon =
        cfg->work.daemon_threads >= 0 ? (unsigned)cfg->work.daemon_threads : WS_APP_DAEMON_THREADS;
    /* Authenticated callers are tenants each; the others share the
     * default tenant (and the [peers] names), which then gets whole
     * lanes, as it had all the RPC threads before. */
    bool tenants = cfg->rpc.tokens_file || cfg->rpc.tls_client_ca;
    unsigned running = cfg->work.tenant_running;
    unsigned queued = cfg->work.tenant_queued
                          ? cfg->work.tenant_queued
                          : (tenants ? WS_POOL_DEFAULT_TENANT_QUEUED : WS_APP_SHARED_TENANT_QUEUED);
    struct ws_pool_lane_config lanes[] = {
        {
            .name = WS_SERVICES_LANE_FS_NAME,
            .threads = fs,
            .per_tenant_running = running   ? running
                                  : tenants ? WS_APP_FS_TENANT_RUNNING(fs)
                                            : fs,
            .per_tenant_queued = queued,
            .nice = WS_APP_FS_NICE,
        },
        {
            .name = WS_SERVICES_LANE_DAEMON_NAME,
            .threads = daemon,
            .per_tenant_running = running   ? running
                                  : tenants ? WS_APP_DAEMON_TENANT_RUNNING
                                            : daemon,
            .per_tenant_queued = queued,
        },
    };
    int err = ws_pool_new(lanes, WS_ELEMENTSOF(lanes), &app->pool);

    if (err < 0)
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "cannot start the worker pool: %s",
                   strerror(-err));
    return err;
}

/* The providers' runtimes, the audit log, the exec layer and the services
 * over them: together, what a failure calls the exec layer. What was made
 * stays in app for ws_app_free. */
static int start_exec_layer(struct ws_app *app, const struct ws_app_config *cfg)
{
    char sandbox_dir[PATH_MAX], audit_dir[PATH_MAX], home_root[PATH_MAX], server_id[17];
    char accounts_dir[PATH_MAX], channels_dir[PATH_MAX];
    int err;

    if (!state_path(cfg->state_dir, "sandbox", sandbox_dir) ||
        !state_path(cfg->state_dir, "channels", channels_dir) ||
        !state_path(cfg->state_dir, "audit", audit_dir) ||
        !state_path(cfg->state_dir, "homes", home_root) ||
        !state_path(cfg->state_dir, "accounts", accounts_dir)) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "--state-dir is too long");
        return -ENAMETOOLONG;
    }
    err = load_server_id(cfg->state_dir, server_id);
    if (err < 0) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed",
                   "cannot read or make <state>/server-id: %s", strerror(-err));
        return err;
    }

    struct ws_exec_config ec = {
        .grace_ms = cfg->kill_grace_ms,
        .containment = cfg->force_subreaper ? WS_TREE_FORCE_SUBREAPER : WS_TREE_AUTO,
        .running_per_tenant = cfg->tenant_max_commands,
        .retained_per_tenant = cfg->tenant_retained_output_bytes,
        .finished_ttl_ms = cfg->finished_output_ttl_ms,
        .home_root = home_root,
        .on_finished = command_finished,
        .ud = app,
    };
    struct ws_provider_config pc = {
        .sandbox_dir = sandbox_dir,
        .accounts_dir = accounts_dir,
        .channels_dir = channels_dir,
        .server_id = server_id,
        .docker_default_image = cfg->docker_default_image,
        /* The first uid of the range no workspace ever gets. */
        .uid_range_first =
            ws_registry_helper_uid(app->reg) != (uid_t)-1 ? ws_registry_helper_uid(app->reg) : 0,
        .helper_uid = ws_registry_helper_uid(app->reg) != (uid_t)-1
                          ? ws_registry_helper_uid(app->reg)
                          : WS_UIDS_DEFAULT_FIRST,
    };
    err = ws_providers_new(&pc, &app->providers);
    if (err >= 0)
        err = ws_audit_new(audit_dir, &app->audit);
    if (err >= 0)
        err = ws_exec_new(&ec, &app->exec);
    if (err >= 0) {
        struct ws_services_deps deps = {
            .reg = app->reg,
            .exec = app->exec,
            .audit = app->audit,
            .providers = app->providers,
            .exec_path = cfg->exec_path,
            .pool = app->pool,
            .usage_walks = cfg->registry.tenant_max_bytes != 0,
        };
        err = ws_services_new(&deps, &app->svc);
    }
    if (err < 0) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "cannot start the exec layer: %s",
                   strerror(-err < 4096 ? -err : EINVAL));
        return err;
    }

    ws_registry_set_providers(app->reg, app->providers);
    ws_registry_set_close_hook(app->reg, close_hook, app);
    ws_registry_set_busy_hook(app->reg, busy_hook, app);
    ws_metrics_set_source(WS_METRICS_WORKSPACES, workspaces_gauge, app->reg);
    ws_metrics_set_source(WS_METRICS_COMMANDS, commands_gauge, app->exec);
    return 0;
}

/* Removes what an earlier run of this server left (the Docker provider's
 * containers). A daemon that cannot be asked does not stop the start: it
 * is logged. */
static void reconcile(struct ws_app *app)
{
    for (size_t k = 0; k < WS_PROVIDER_COUNT; k++) {
        const struct ws_provider *p = ws_providers_get(app->providers, (enum ws_provider_kind)k);
        struct ws_diag d = {0};
        int removed;

        if (!p->ops->reconcile)
            continue;
        removed = p->ops->reconcile(p->rt, &d);
        if (removed > 0)
            ws_log_msg(WS_RPC_LOG_INFO, "server.reconciled",
                       "removed %d container(s) left by an earlier run", removed);
        else if (removed < 0)
            ws_log_msg(WS_RPC_LOG_ERROR, "server.reconcile_failed",
                       "containers left by an earlier run not checked: %s", d.message);
    }
}

static int start_rpc_server(struct ws_app *app, const struct ws_app_config *cfg)
{
    size_t n_methods;
    const struct ws_rpc_method *methods = ws_services_methods(app->svc, &n_methods);
    char why[512] = "";
    struct ws_rpc_config rc = cfg->rpc;
    int err;

    rc.peer_tenant = peer_tenant_of;
    rc.peer_ud = app->reg;
    rc.why = why;
    rc.why_len = sizeof(why);
    err = ws_rpc_server_new(&rc, methods, n_methods, &app->server, &app->port);
    if (err < 0 && why[0]) {
        fprintf(stderr, "workspaced: %s\n", why);
        return err;
    }
    if (err < 0) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "cannot listen on '%s': %s",
                   cfg->rpc.listen, strerror(-err < 4096 ? -err : EINVAL));
        return err;
    }
    err = ws_rpc_server_start(app->server);
    if (err < 0)
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "cannot start: %s",
                   strerror(-err < 4096 ? -err : EINVAL));
    return err;
}

/* metrics: its own listener, started before main prints its "listening"
 * line, so whoever waits for that line finds the metrics address logged. */
static int start_metrics(struct ws_app *app, const char *addr)
{
    char fields[32];
    int port = 0;
    int err = ws_metrics_http_start(addr, &app->metrics, &port);

    if (err < 0) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "cannot serve metrics on '%s': %s",
                   addr, strerror(-err));
        return err;
    }
    snprintf(fields, sizeof(fields), "{\"port\":%d}", port);
    ws_log_json(WS_RPC_LOG_INFO, "metrics.listen", fields);
    return 0;
}

int ws_app_start(const struct ws_app_config *cfg, struct ws_app **ret)
{
    struct ws_app *app = calloc(1, sizeof(*app));
    int err = -ENOMEM;

    if (!app) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "%s", strerror(ENOMEM));
        goto out;
    }
    /* Under memory pressure the kernel kills commands (1000, see the
     * services) long before the server. Lowering needs CAP_SYS_RESOURCE: a
     * server without it keeps what it has, and says so. */
    int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    int oom_err =
        oom < 0 ? -errno : ws_write_all(oom, WS_APP_OOM_SCORE_ADJ, strlen(WS_APP_OOM_SCORE_ADJ));
    if (oom_err < 0)
        ws_log_msg(WS_RPC_LOG_ERROR, "server.warning",
                   "cannot set the server's oom_score_adj to " WS_APP_OOM_SCORE_ADJ ": %s",
                   strerror(-oom_err));
    if (oom >= 0)
        close(oom);
    err = make_state_dir(cfg->state_dir);
    if (err < 0) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "cannot create the state directory: %s",
                   strerror(-err));
        goto out;
    }
    /* The registry locks the state directory: it comes before everything
     * that writes there (the sandbox replaces the /etc snapshots it finds),
     * so a second server on the same directory is refused untouched. */
    struct ws_registry_config rc = cfg->registry;
    rc.state_dir = cfg->state_dir;
    rc.say = registry_says;
    rc.say_ud = app;
    err = ws_registry_new(&rc, &app->reg);
    if (err == -EBUSY) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed",
                   "the state directory '%s' is in use by another workspaced (its pid is in "
                   "%s/lock); one state directory serves one server at a time",
                   cfg->state_dir, cfg->state_dir);
        goto out;
    }
    if (err < 0) {
        /* Unless the registry said why itself. */
        if (!app->registry_said)
            ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed",
                       "cannot open the state directory: %s",
                       strerror(-err < 4096 ? -err : EINVAL));
        goto out;
    }
    /* Before anything talks to a daemon or starts a thread: a second
     * server on a live socket stops here. */
    err = claim_unix_socket(cfg->rpc.listen);
    if (err < 0) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "cannot listen on '%s': %s",
                   cfg->rpc.listen,
                   err == -EADDRINUSE ? "another server is listening there" : strerror(-err));
        goto out;
    }
    err = start_pool(app, cfg);
    if (err < 0)
        goto out;
    err = start_exec_layer(app, cfg);
    if (err < 0)
        goto out;
    reconcile(app);
    err = start_rpc_server(app, cfg);
    if (err < 0)
        goto out;
    /* Workspaces that expired while the server was down close on its
     * first pass. */
    err = ws_registry_start_reaper(app->reg);
    if (err < 0) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "cannot start the reaper: %s",
                   strerror(-err));
        goto out;
    }
    if (cfg->metrics_listen) {
        err = start_metrics(app, cfg->metrics_listen);
        if (err < 0)
            goto out;
    }
    *ret = app;
    app = NULL;
out:
    ws_app_free(app);
    return err;
}

int ws_app_port(const struct ws_app *app)
{
    return app->port;
}

void ws_app_reload(struct ws_app *app, struct ws_policy_set *policy)
{
    char why[512];

    ws_rpc_server_reload_tokens(app->server, why, sizeof(why));
    if (policy)
        ws_registry_set_policy(app->reg, policy);
}

void ws_app_drain(struct ws_app *app, int grace_ms)
{
    ws_metrics_http_stop(app->metrics);
    app->metrics = NULL;
    ws_services_drain(app->svc);
    ws_rpc_server_shutdown(app->server, grace_ms);
}

struct ws_rpc_server *ws_app_take_server(struct ws_app *app)
{
    struct ws_rpc_server *s = app->server;

    app->server = NULL;
    return s;
}

void ws_app_free(struct ws_app *app)
{
    if (!app)
        return;
    ws_metrics_http_stop(app->metrics);
    /* No call may reach the parts below once this returns. */
    ws_rpc_server_free(app->server);
    /* The server's shutdown (here, or in ws_app_drain when main took the
     * server) waited for every call object, and each job holds a reference
     * on its call: no job is left, and none ever finishes a call after
     * its server is gone. The pool goes before everything its jobs use. */
    ws_pool_free(app->pool);
    ws_metrics_set_source(WS_METRICS_WORKSPACES, NULL, NULL);
    ws_metrics_set_source(WS_METRICS_COMMANDS, NULL, NULL);
    if (app->reg) {
        /* Before the hooks go: an expiry in progress ends first. */
        ws_registry_stop_reaper(app->reg);
        ws_registry_set_close_hook(app->reg, NULL, NULL);
        ws_registry_set_busy_hook(app->reg, NULL, NULL);
    }
    /* Ends every command still running; each one's record goes through
     * the services into the audit log, so both outlive it. */
    ws_exec_free(app->exec);
    ws_services_free(app->svc);
    ws_audit_free(app->audit);
    /* After every command that ran in a box or a container, and before the
     * registry: a runtime may clean up in the state directory (the
     * sandbox's /etc snapshot) while the registry's lock still guards it.
     * The registry calls no provider on its way out. */
    ws_providers_free(app->providers);
    /* Last: its lock on the state directory goes with it. */
    ws_registry_free(app->reg);
    free(app);
}
