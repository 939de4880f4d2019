/* Exec: Run, Start, Attach, ListProcesses, SendSignal, SendInput,
 * CloseInput, Resize.
 *
 * Every command passes the shell guard first (nothing is spawned for a
 * refused one), then starts through the exec layer (server/exec), which
 * owns the process tree, the pump and the output rings. This file turns
 * requests into guard and exec calls and the exec layer's subscriber
 * events into ProcessEvent messages.
 *
 * Streaming: a Start or Attach call holds one subscriber. Events are
 * pulled from it whenever no send is in flight: after each completed send
 * (on_sent) and when the pump says there is something new (notify, on the
 * pump thread). `sending` and `kick` under the call's own mutex make sure
 * exactly one of them sends and no wakeup is lost between "nothing to
 * send" and "something arrived".
 *
 * A launch into a workspace whose provider wraps its commands (the wrapper
 * may create an exec over a container daemon's API, or set up a network
 * for the command), or whose byte-quota charge may walk the tenant's
 * workspaces, runs on the pool's DAEMON lane rather than on the
 * completion-queue thread; the rest of the call stays where it was. Such a
 * launch can end after the client cancelled: it then kills what it
 * started, as on_cancel would have.
 *
 * Environment: every command gets its workspace's env (fixed at Open),
 * under its own env (a name both set is the command's), and the secrets it
 * names (ProcessConfig.secrets), which win over both: a command that names
 * a secret asked for that value, and a same-named entry of its env is
 * taken for a leftover, not a reason to run with something else. The
 * values of secrets are copied out of the registry for the launch only and
 * wiped once the command is spawned; no diag, log line or audit record
 * ever holds a value of the environment.
 *
 * SendInput, CloseInput and Resize reach a process the way SendSignal
 * does (by id or tag, in a workspace of the caller's tenant) and use the
 * same stdin queue and terminal as its Start stream: they work wherever
 * Start's stdin and resize do.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <jansson.h>

#include "server/audit/audit.h"
#include "server/base/macros.h"
#include "server/exec/exec.h"
#include "server/metrics/metrics.h"
#include "server/posix/fs.h"
#include "server/guard/guard.h"
#include "server/posix/spawn.h"
#include "server/rpc/log.h"
#include "server/rpc/services/internal.h"
#include "workspace/v1/exec.pb-c.h"

#define RUN_OUTPUT_DEFAULT (1024 * 1024)
#define RUN_OUTPUT_MAX     (2 * 1024 * 1024)
#define RUN_STDIN_MAX      (1024 * 1024)
/* Run keeps a small ring too, so a running Run command can be attached. */
#define RUN_RING_BYTES     (64 * 1024)
#define START_RING_DEFAULT (512 * 1024)
#define START_RING_MAX     (1024 * 1024)
#define START_RING_MIN     (4 * 1024)
/* Names a command may list in ProcessConfig.secrets (a workspace holds
 * far fewer: the rest are unknown or repeated). */
#define SECRET_NAMES_MAX WS_GUARD_ENV_MAX

/* ---- shared ---- */

static bool tag_valid(const char *t)
{
    size_t n = strlen(t);

    if (n == 0 || n > WS_PROC_TAG_MAX)
        return false;
    for (const char *c = t; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '_' || *c == '-'))
            return false;
    return true;
}

uint64_t ws_services_max_duration_ms(const Workspace__V1__Capabilities *caps)
{
    if (caps && caps->shell && caps->shell->max_duration_ms)
        return caps->shell->max_duration_ms;
    return WS_SERVICES_MAX_DURATION_DEFAULT_MS;
}

/* What Run and Start share: validation, the guard, the cwd, the spawn.
 * On failure the call has been failed and *ret is untouched. */
struct launch {
    bool stdin_pipe;
    bool background;
    bool wait_for_subscriber;
    size_t ring_bytes;
    size_t capture_bytes;
};

/* The process config's own checks, before the guard sees it. */
static int check_process_config(const Workspace__V1__ProcessConfig *pc, struct ws_diag *d)
{
    if (pc->tag[0] && !tag_valid(pc->tag)) {
        ws_diag_set(d, "a tag is 1-%d bytes of letters, digits, '.', '_' and '-'", WS_PROC_TAG_MAX);
        ws_diag_meta(d, "field", "tag");
        return -WS_EMALFORMED;
    }
    if (pc->pty && (pc->pty->rows > WS_SPAWN_PTY_DIM_MAX || pc->pty->cols > WS_SPAWN_PTY_DIM_MAX)) {
        ws_diag_set(d, "terminal size over %d", WS_SPAWN_PTY_DIM_MAX);
        ws_diag_meta(d, "field", "pty");
        return -WS_EMALFORMED;
    }
    return 0;
}

/* The secrets a command named, copied out of the registry for the length
 * of its launch (secrets_wipe). */
struct secrets {
    char **names;
    char **values;
    size_t n, cap;
};

static void secrets_wipe(struct secrets *sec)
{
    for (size_t i = 0; i < sec->n; i++) {
        explicit_bzero(sec->values[i], strlen(sec->values[i]));
        free(sec->values[i]);
        free(sec->names[i]);
    }
    free(sec->names);
    free(sec->values);
    *sec = (struct secrets){0};
}

/* ws_workspace_secrets_use's callback: runs under the workspace's secret
 * lock, so it only copies. */
static int secret_copy(void *ud, const char *name, const char *value)
{
    struct secrets *sec = ud;

    if (sec->n == sec->cap) {
        size_t ncap = sec->cap ? sec->cap * 2 : 8;
        char **nn = realloc(sec->names, ncap * sizeof(*nn));
        if (!nn)
            return -ENOMEM;
        sec->names = nn;
        char **nv = realloc(sec->values, ncap * sizeof(*nv));
        if (!nv)
            return -ENOMEM;
        sec->values = nv;
        sec->cap = ncap;
    }
    char *n = strdup(name);
    char *v = strdup(value ? value : "");
    if (!n || !v) {
        free(n);
        if (v)
            explicit_bzero(v, strlen(v));
        free(v);
        return -ENOMEM;
    }
    sec->names[sec->n] = n;
    sec->values[sec->n] = v;
    sec->n++;
    return 0;
}

/* Copies the secrets pc names. Every command of a workspace passes here,
 * also one that names none: a workspace whose secrets the server no longer
 * holds runs nothing (-WS_ESECRETS) until they are given again, and that
 * refusal comes before anything is made for the command. */
static int secrets_take(struct ws_workspace *ws, const Workspace__V1__ProcessConfig *pc,
                        struct secrets *sec, struct ws_diag *d)
{
    const char **names = NULL;
    size_t n = 0;
    int err;

    if (pc->n_secrets > SECRET_NAMES_MAX) {
        ws_diag_set(d, "more than %d secret names", SECRET_NAMES_MAX);
        ws_diag_meta(d, "field", "secrets");
        return -WS_EMALFORMED;
    }
    if (pc->n_secrets) {
        names = calloc(pc->n_secrets, sizeof(*names));
        if (!names)
            return -ENOMEM;
    }
    /* A name listed twice is one secret. */
    for (size_t i = 0; i < pc->n_secrets; i++) {
        bool seen = false;
        for (size_t j = 0; j < n && !seen; j++)
            seen = strcmp(names[j], pc->secrets[i]) == 0;
        if (!seen)
            names[n++] = pc->secrets[i];
    }
    err = ws_workspace_secrets_use(ws, names, n, secret_copy, sec, d);
    free(names);
    if (err < 0)
        secrets_wipe(sec);
    return err;
}

static bool secrets_has(const struct secrets *sec, const char *name)
{
    for (size_t i = 0; i < sec->n; i++)
        if (strcmp(sec->names[i], name) == 0)
            return true;
    return false;
}

static bool process_env_has(const Workspace__V1__ProcessConfig *pc, const char *name)
{
    for (size_t i = 0; i < pc->n_env; i++)
        if (strcmp(pc->env[i]->key, name) == 0)
            return true;
    return false;
}

/* Bytes an entry takes in the guard's count ("NAME=VALUE\0"). */
static size_t env_entry_bytes(const char *name, const char *value)
{
    return strlen(name) + 1 + strlen(value ? value : "") + 1;
}

/* Runs the shell guard over `pc` with the workspace's shell capability
 * and the environment its provider gives commands (`own_home` for one
 * that runs on the host), the workspace's env and the secrets `sec` added
 * to the command's own (see the top of this file for which wins). */
static int vet(const struct ws_services *s, const struct ws_workspace *ws,
               const struct ws_provider_exec_env *xe, const struct ws_exec_home *own_home,
               const Workspace__V1__ProcessConfig *pc, const struct secrets *sec, struct ws_diag *d,
               struct ws_guard_result **ret)
{
    const Workspace__V1__ShellCapability *sh = ws_workspace_capabilities(ws)->shell;
    const ws_record *rec = ws_workspace_record(ws);
    size_t n_ws_env = rec ? rec->n_env : 0;
    size_t cap = pc->n_env + n_ws_env + sec->n;
    struct ws_guard_env *env = calloc(cap ? cap : 1, sizeof(*env));
    /* What the workspace adds: the guard's limits grow by exactly that, so
     * the command's own env keeps the limits it always had. */
    size_t n = 0, added = 0, added_bytes = 0;
    int err;

    if (!env)
        return -ENOMEM;
    for (size_t i = 0; i < pc->n_env; i++)
        if (!secrets_has(sec, pc->env[i]->key))
            env[n++] = (struct ws_guard_env){.name = pc->env[i]->key, .value = pc->env[i]->value};
    for (size_t i = 0; i < n_ws_env; i++) {
        const char *name = rec->env[i]->key, *value = rec->env[i]->value;
        if (process_env_has(pc, name) || secrets_has(sec, name))
            continue;
        env[n++] = (struct ws_guard_env){.name = name, .value = value};
        added++;
        added_bytes += env_entry_bytes(name, value);
    }
    for (size_t i = 0; i < sec->n; i++) {
        env[n++] = (struct ws_guard_env){.name = sec->names[i], .value = sec->values[i]};
        added++;
        added_bytes += env_entry_bytes(sec->names[i], sec->values[i]);
    }
    struct ws_guard_policy policy = {
        .allowed = (const char *const *)sh->allowed_commands,
        .n_allowed = sh->n_allowed_commands,
        .pass_env = (const char *const *)sh->pass_env,
        .n_pass_env = sh->n_pass_env,
        .path = xe->path ? xe->path : s->exec_path,
        .home = xe->home ? xe->home : ws_exec_home_dir(own_home),
        .host = xe->on_host,
        .runtime_dir = xe->on_host ? ws_exec_home_runtime_dir(own_home) : NULL,
        .foreign_root = xe->foreign_root,
        .limits =
            {
                .env = WS_GUARD_ENV_MAX + added,
                .env_bytes = WS_GUARD_ENV_BYTES_MAX + added_bytes,
            },
    };
    struct ws_guard_request greq = {
        .argv = (const char *const *)pc->argv,
        .argc = pc->n_argv,
        .command = pc->command,
        .command_len = strlen(pc->command),
        .env = env,
        .n_env = n,
        .cwd = pc->cwd,
        .pty = pc->pty != NULL,
    };
    err = ws_guard_check(&policy, &greq, d, ret);
    /* Pointers only (the values stay in sec and the record). */
    free(env);
    return err;
}

/* Whether a command of provider p needs work of the provider's own
 * before it starts (exec_wrap), which may wait on a daemon or on the
 * setup of the command's network: a plain spawn on the host does not. */
static bool wrap_blocks(const struct ws_provider *p)
{
    return p->ops->exec_wrap != NULL;
}

/* Whether the launch into workspace ws_id goes to the DAEMON lane. An id
 * that names no workspace of the caller's launches here, and fails. */
static bool launch_offloaded(struct ws_call *call, const char *ws_id)
{
    struct ws_services *s = ws_call_method_data(call);
    struct ws_workspace *ws;
    bool blocks;

    if (s->usage_walks)
        return true;
    if (ws_registry_peek(s->reg, ws_call_tenant(call), ws_id, &ws) < 0)
        return false;
    blocks = wrap_blocks(ws_workspace_provider(ws));
    ws_workspace_unref(ws);
    return blocks;
}

static int launch(struct ws_call *call, const char *ws_id, const Workspace__V1__ProcessConfig *pc,
                  const struct launch *how, struct ws_workspace **ret_ws, struct ws_proc **ret)
{
    struct ws_services *s = ws_call_method_data(call);
    struct ws_workspace *ws = NULL;
    const struct ws_provider *p = NULL;
    const struct ws_provider_exec_env *xe;
    struct ws_provider_ws w;
    struct ws_guard_result *g = NULL;
    struct ws_diag d = {0};
    char ws_dir[WS_SERVICES_DIR_MAX];
    struct ws_proc_wrapper wrap = {0};
    struct ws_exec_home *own_home = NULL;
    struct ws_run_as run_as = {0};
    struct secrets sec = {0};
    int cwd_fd = -1;
    int err;

    if (!pc) {
        ws_call_fail_status(call, WORKSPACE__V1__ERROR_REASON__MALFORMED,
                            "the request has no process config");
        return -EINVAL;
    }
    /* `shell` alone is enough: commands run in the workspace's storage
     * whether or not the file RPCs were declared. */
    err = ws_services_workspace(call, ws_id, WS_CAP_SHELL, &ws);
    if (err < 0)
        return err;
    p = ws_workspace_provider(ws);
    xe = p->ops->exec_env;
    if (!xe) {
        /* A provider without a shell. The registry has refused such a
         * workspace the capability already; the check stays so that a
         * NULL entry can never mean a plain spawn on the host. */
        ws_diag_set(&d, "the workspace did not declare the shell capability");
        ws_diag_meta(&d, "capability", "shell");
        err = -WS_ECAPABILITY;
        goto fail;
    }
    if (!ws_workspace_fsops(ws)) {
        err = -WS_EFAILED;
        ws_diag_set(&d, "the workspace's storage is not attached");
        goto fail;
    }
    err = check_process_config(pc, &d);
    if (err < 0)
        goto fail;
    err = secrets_take(ws, pc, &sec, &d);
    if (err < 0)
        goto fail;
    err = ws_services_provider_ws(s, ws, ws_dir, sizeof(ws_dir), &w);
    if (err < 0)
        goto fail;
    /* What is spawned runs as the workspace's own uid when it has one
     * (else the server's): the command on the host, or the box around it. A
     * command that is not in a box of its own gets a home of its own (not
     * the workspace, where the client writes files) and the guard's
     * narrower environment. */
    if (xe->spawn_as_uid && ws_workspace_uid(ws, &run_as.uid, &run_as.gid)) {
        run_as.set = true;
        /* Under memory pressure the kernel kills commands first, never
         * the server. (Only with the identity switch, whose spawn can
         * write it: a server without workspace uids spawns through
         * posix_spawn, which cannot.) */
        run_as.set_oom = true;
        run_as.oom_score_adj = WS_SERVICES_COMMAND_OOM_SCORE_ADJ;
    }
    if (xe->on_host) {
        err = run_as.set ? ws_exec_home_new_owned(s->exec, run_as.uid, run_as.gid, &own_home)
                         : ws_exec_home_new(s->exec, &own_home);
        if (err < 0) {
            ws_diag_set(&d, "the command's home directory cannot be made: %s", strerror(-err));
            /* Out of memory or descriptors: the server's state, not the
             * workspace's, and it passes. */
            if (err != -ENOMEM && err != -EMFILE && err != -ENFILE)
                err = -WS_EFAILED;
            goto fail;
        }
    }

    err = vet(s, ws, xe, own_home, pc, &sec, &d, &g);
    /* The guard's result holds the environment now (and wipes it when
     * freed). */
    secrets_wipe(&sec);
    if (err < 0)
        goto fail;
    /* A tenant whose files reached its byte quota runs nothing until it
     * removes some: a command could only add more. */
    err = ws_registry_usage_charge(s->reg, ws, 0, &d);
    if (err < 0)
        goto fail;
    err = ws_posixfs_open_dir_fd(ws_fsops_vfs(ws_workspace_fsops(ws)), g->cwd, &cwd_fd);
    if (err < 0) {
        if (!d.message[0])
            ws_diag_set(&d, "the working directory cannot be used");
        ws_diag_meta(&d, "field", "cwd");
        goto fail;
    }

    uint64_t max_ms = ws_services_max_duration_ms(ws_workspace_capabilities(ws));
    uint64_t timeout_ms = pc->timeout_ms && pc->timeout_ms < max_ms ? pc->timeout_ms : max_ms;
    /* No file a command writes grows past the workspace's file size cap,
     * as none the API writes does: the kernel stops the write (SIGXFSZ,
     * or EFBIG where the command ignores that signal). A box's own file
     * systems (its /tmp) are held to it too. */
    if (xe->spawn_as_uid && run_as.n_rlimits < WS_SPAWN_RLIMITS_MAX)
        run_as.rlimits[run_as.n_rlimits++] =
            (struct ws_rlimit){.resource = RLIMIT_FSIZE, .value = ws_workspace_max_file_size(ws)};
    if (p->ops->exec_wrap) {
        struct ws_provider_cmd cmd = {
            .argv = (const char *const *)g->argv,
            .envp = (const char *const *)g->envp,
            .cwd = g->cwd,
            .pty = pc->pty != NULL,
            .stdin_pipe = how->stdin_pipe,
            .timeout_ms = timeout_ms,
            .run_as = &run_as,
        };
        err = p->ops->exec_wrap(p->rt, &w, &cmd, &wrap, &d);
        if (err < 0)
            goto fail;
    }
    struct ws_proc_config cfg = {
        .argv = (const char *const *)g->argv,
        .envp = (const char *const *)g->envp,
        .cwd_fd = cwd_fd,
        .cwd = g->cwd,
        .stdin_pipe = how->stdin_pipe,
        .pty = pc->pty != NULL,
        .pty_rows = pc->pty ? pc->pty->rows : 0,
        .pty_cols = pc->pty ? pc->pty->cols : 0,
        .timeout_ms = timeout_ms,
        .background = how->background,
        .tag = pc->tag,
        .ring_bytes = how->ring_bytes,
        .capture_bytes = how->capture_bytes,
        .wait_for_subscriber = how->wait_for_subscriber,
        .wrapper = p->ops->exec_wrap ? &wrap : NULL,
        .run_as = run_as.set ? &run_as : NULL,
    };
    /* The workspace's caps (local-bash: its cgroup, or pids as
     * RLIMIT_NPROC, which counts the uid's processes: the whole
     * workspace's) around the spawn, which ws_exec_start_for makes on
     * this thread. */
    void *placed = NULL;
    if (p->ops->spawn_limits) {
        err = p->ops->spawn_limits(p->rt, &w, &run_as, &placed, &d);
        if (err < 0)
            goto fail;
    }
    if (run_as.set || run_as.into_cgroup || run_as.n_rlimits)
        cfg.run_as = &run_as;
    err = ws_exec_start_for(s->exec, ws_workspace_tenant(ws), ws_workspace_id(ws), &cfg, own_home,
                            &d, ret);
    if (p->ops->spawn_limits)
        p->ops->spawn_done(p->rt, placed);
    /* The exec layer owns the wrapper and the home now, whatever happened
     * (and may already have freed them: a quick command is done by now). */
    wrap.arg = NULL;
    own_home = NULL;
    if (err >= 0)
        ws_metrics_command_started(); /* metrics: ended in the audit below */
    if (err < 0) {
        if (err != -EEXIST && err != -WS_EQUOTA && err != -WS_ENOWORKSPACE) {
            /* The guard resolved the command, so this is the host's
             * refusal (resources, a vanished binary). */
            ws_diag_set(&d, "the command could not be started: %s", strerror(-err));
            if (err != -ENOMEM && err != -EMFILE && err != -ENFILE && err != -EAGAIN)
                err = -WS_EFAILED;
        }
        goto fail;
    }
    close(cwd_fd);
    ws_guard_result_free(g);
    *ret_ws = ws;
    return 0;

fail:
    secrets_wipe(&sec);
    if (cwd_fd >= 0)
        close(cwd_fd);
    /* Only a wrapper exec_wrap made is left here. */
    if (wrap.arg)
        p->ops->exec_discard(&wrap);
    ws_exec_home_free(own_home);
    ws_guard_result_free(g);
    ws_services_fail(call, ws, err, &d);
    ws_workspace_unref(ws);
    return err;
}

static Workspace__V1__ExitCause cause_to_pb(enum ws_cause c)
{
    switch (c) {
    case WS_CAUSE_EXITED:
        return WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_EXITED;
    case WS_CAUSE_SIGNALED:
        return WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_SIGNALED;
    case WS_CAUSE_TIMEOUT:
        return WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_TIMEOUT;
    case WS_CAUSE_OOM:
        return WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_OOM;
    case WS_CAUSE_CANCELLED:
        return WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_CANCELLED;
    case WS_CAUSE_EVICTED:
        return WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_EVICTED;
    case WS_CAUSE_EXPIRED:
        return WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_EXPIRED;
    default:
        return WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_UNSPECIFIED;
    }
}

/* Storage for one Exited message. */
struct exited_pb {
    Workspace__V1__Exited x;
    Workspace__V1__StreamStats ss[WS_STREAM_COUNT];
};

/* delivered: a subscriber's counts, or NULL for Run (the capture). */
static void fill_exited(struct exited_pb *e, const struct ws_proc_result *r,
                        const uint64_t *delivered)
{
    workspace__v1__exited__init(&e->x);
    e->x.cause = cause_to_pb(r->cause);
    e->x.exit_code = r->exit_code;
    e->x.signal = r->signal;
    e->x.wall_time_ms = r->wall_ms;
    e->x.cpu_user_ms = r->user_ms;
    e->x.cpu_system_ms = r->sys_ms;
    e->x.peak_memory_bytes = r->max_rss_bytes;
    for (int i = 0; i < WS_STREAM_COUNT; i++) {
        const struct ws_proc_stream_stats *st = &r->streams[i];
        Workspace__V1__StreamStats *ss = &e->ss[i];

        workspace__v1__stream_stats__init(ss);
        if (!st->present)
            continue;
        ss->bytes_total = st->total;
        if (delivered) {
            ss->bytes_delivered = delivered[i];
            ss->truncated = delivered[i] < st->total;
        } else {
            ss->bytes_delivered = st->head + st->tail;
            ss->head_bytes = st->head;
            ss->tail_bytes = st->tail;
            ss->truncated = st->truncated;
        }
        if (i == WS_STREAM_STDOUT)
            e->x.stdout = ss;
        else if (i == WS_STREAM_STDERR)
            e->x.stderr = ss;
        else
            e->x.pty = ss;
    }
}

/* ---- Run ---- */

struct run {
    struct ws_services_job job;
    /* The request, copied for a launch on the pool. */
    ProtobufCMessage *req;
    struct ws_call *call;
    struct ws_workspace *ws;
    /* Set by the launch, which may run on a pool thread while run_cancel
     * reads it: accessed atomically. */
    struct ws_proc *p;
};

static void run_done(void *arg, struct ws_proc *p)
{
    struct run *r = arg;
    Workspace__V1__RunResponse resp = WORKSPACE__V1__RUN_RESPONSE__INIT;
    struct ws_proc_result res;
    struct exited_pb ex;
    uint8_t *out = NULL, *err_buf = NULL;

    ws_proc_get_result(p, &res);
    fill_exited(&ex, &res, NULL);
    resp.exited = &ex.x;
    resp.process_id = (char *)ws_proc_id(p);
    /* PTY output is returned as stdout. */
    enum ws_stream first = res.streams[WS_STREAM_PTY].present ? WS_STREAM_PTY : WS_STREAM_STDOUT;
    size_t n_out = res.streams[first].head + res.streams[first].tail;
    size_t n_err = res.streams[WS_STREAM_STDERR].head + res.streams[WS_STREAM_STDERR].tail;
    out = malloc(n_out ? n_out : 1);
    err_buf = malloc(n_err ? n_err : 1);
    if (!out || !err_buf) {
        ws_call_fail(r->call, -ENOMEM, NULL);
        goto out;
    }
    resp.stdout.data = out;
    resp.stdout.len = ws_proc_capture(p, first, out, n_out);
    resp.stderr.data = err_buf;
    resp.stderr.len = res.streams[WS_STREAM_STDERR].present
                          ? ws_proc_capture(p, WS_STREAM_STDERR, err_buf, n_err)
                          : 0;
    ws_workspace_note(r->ws, 0, NULL);
    ws_call_finish(r->call, &resp.base);
out:
    free(out);
    free(err_buf);
    ws_call_unref(r->call); /* the done callback's reference */
}

static void run_cancel(struct ws_call *call);

/* Starts the command of `req` and waits for it to end (run_done). */
static void run_launch(struct ws_call *call, const Workspace__V1__RunRequest *req)
{
    const Workspace__V1__ProcessConfig *pc = req->process;
    struct run *r = ws_call_data(call);
    struct ws_workspace *ws = NULL;
    struct ws_proc *p = NULL;
    bool want_stdin = req->stdin_data.len > 0 || (pc && pc->stdin);
    struct launch how = {
        .stdin_pipe = want_stdin,
        .ring_bytes = RUN_RING_BYTES,
        .capture_bytes = pc && pc->max_output_bytes ? pc->max_output_bytes : RUN_OUTPUT_DEFAULT,
    };

    if (launch(call, req->workspace_id, pc, &how, &ws, &p) < 0)
        return;
    r->ws = ws;
    __atomic_store_n(&r->p, p, __ATOMIC_RELEASE);
    if (want_stdin && !(pc && pc->pty)) {
        if (req->stdin_data.len)
            (void)ws_proc_write_stdin(p, req->stdin_data.data, req->stdin_data.len, NULL, NULL);
        (void)ws_proc_close_stdin(p);
    }
    ws_call_ref(call);
    if (ws_proc_on_done(p, run_done, r) < 0) {
        ws_call_unref(call);
        ws_proc_kill(p, WS_CAUSE_CANCELLED, false);
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    /* On the pool, a cancel may have come before the process was there to
     * be killed. */
    if (ws_call_cancelled(call))
        run_cancel(call);
}

static void run_launch_job(struct ws_call *call)
{
    struct run *r = ws_call_data(call);

    run_launch(call, (const Workspace__V1__RunRequest *)r->req);
}

static void run_start(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__RunRequest *req = (const Workspace__V1__RunRequest *)msg;
    const Workspace__V1__ProcessConfig *pc = req->process;
    struct run *r;

    if (pc && pc->background) {
        ws_call_fail_status(call, WORKSPACE__V1__ERROR_REASON__MALFORMED,
                            "Run cannot start a background process: use Start");
        return;
    }
    if (req->stdin_data.len > RUN_STDIN_MAX) {
        ws_call_fail_status(call, WORKSPACE__V1__ERROR_REASON__LIMIT,
                            "stdin_data is larger than 1 MiB: stream it with Start");
        return;
    }
    if (pc && pc->max_output_bytes > RUN_OUTPUT_MAX) {
        ws_call_fail_status(call, WORKSPACE__V1__ERROR_REASON__LIMIT,
                            "max_output_bytes is above 2 MiB: stream the output with Start");
        return;
    }
    r = calloc(1, sizeof(*r));
    if (!r) {
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    r->call = call;
    ws_call_set_data(call, r);
    ws_services_job_init(&r->job, call);
    if (!launch_offloaded(call, req->workspace_id)) {
        run_launch(call, req);
        return;
    }
    r->req = ws_services_message_copy(msg);
    if (!r->req) {
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    ws_services_offload(call, &r->job, WS_SERVICES_LANE_DAEMON, run_launch_job, NULL);
}

static void run_cancel(struct ws_call *call)
{
    struct run *r = ws_call_data(call);
    struct ws_proc *p;

    if (!r)
        return;
    ws_services_job_cancel(call, &r->job);
    p = __atomic_load_n(&r->p, __ATOMIC_ACQUIRE);
    if (p)
        ws_proc_kill(p, WS_CAUSE_CANCELLED, true);
}

static void run_destroy(struct ws_call *call)
{
    struct run *r = ws_call_data(call);

    if (!r)
        return;
    ws_proc_unref(r->p);
    ws_workspace_unref(r->ws);
    if (r->req)
        protobuf_c_message_free_unpacked(r->req, NULL);
    free(r);
}

/* ---- event streams (Start, Attach) ---- */

struct stream {
    struct ws_services_job job;
    /* Start: the request, copied for a launch on the pool. */
    ProtobufCMessage *req;
    struct ws_call *call;
    struct ws_workspace *ws;
    /* Set under `lock` when Start's launch runs on the pool. */
    struct ws_proc *p;
    struct ws_sub *sub;
    bool owner;      /* Start: the stream's end may kill the process */
    bool want_stdin; /* Start: stdin messages are accepted */
    pthread_mutex_t lock;
    bool sending;
    bool kick;
    bool finished;
    /* stream_pump is between its send and the end of its iteration; a
     * send completing meanwhile only sets sent_early, and the loop goes
     * on by itself: two threads never run the loop at once. */
    bool looping;
    bool sent_early;
    /* A cancel came while stream_pump was looping: the loop is using the
     * subscriber, so closing it (which may free it) waits for the loop to
     * end, and the loop closes it then. */
    bool close_pending;
};

static void stream_pump(struct stream *st);

static void stream_notify(void *arg)
{
    stream_pump(arg);
}

static void stream_release(void *arg)
{
    struct stream *st = arg;
    ws_call_unref(st->call);
}

static Workspace__V1__OutputStream stream_pb(enum ws_stream s)
{
    switch (s) {
    case WS_STREAM_STDOUT:
        return WORKSPACE__V1__OUTPUT_STREAM__OUTPUT_STREAM_STDOUT;
    case WS_STREAM_STDERR:
        return WORKSPACE__V1__OUTPUT_STREAM__OUTPUT_STREAM_STDERR;
    default:
        return WORKSPACE__V1__OUTPUT_STREAM__OUTPUT_STREAM_PTY;
    }
}

/* At the end of a loop, with st->lock held: the subscriber a cancel left
 * for the loop to close, or NULL. */
static struct ws_sub *take_pending_close(struct stream *st)
{
    struct ws_sub *sub = NULL;

    if (st->close_pending) {
        st->close_pending = false;
        sub = st->sub;
        st->sub = NULL;
    }
    return sub;
}

/* Sends the next event if none is in flight. */
static void stream_pump(struct stream *st)
{
    pthread_mutex_lock(&st->lock);
    if (st->sending || st->finished) {
        st->kick = true;
        pthread_mutex_unlock(&st->lock);
        return;
    }
    st->sending = true;
    st->kick = false;
    st->looping = true;
    pthread_mutex_unlock(&st->lock);

    for (;;) {
        struct ws_sub_event ev;
        ws_sub_next(st->sub, WS_PROC_CHUNK_MAX, &ev);
        if (ev.kind == WS_SUB_NONE) {
            pthread_mutex_lock(&st->lock);
            if (st->kick) {
                st->kick = false;
                pthread_mutex_unlock(&st->lock);
                continue;
            }
            st->sending = false;
            st->looping = false;
            struct ws_sub *closing = take_pending_close(st);
            pthread_mutex_unlock(&st->lock);
            ws_sub_close(closing);
            return;
        }

        Workspace__V1__ProcessEvent pe = WORKSPACE__V1__PROCESS_EVENT__INIT;
        Workspace__V1__Started started = WORKSPACE__V1__STARTED__INIT;
        Workspace__V1__OutputChunk chunk = WORKSPACE__V1__OUTPUT_CHUNK__INIT;
        Workspace__V1__Gap gap = WORKSPACE__V1__GAP__INIT;
        struct exited_pb ex;

        switch (ev.kind) {
        case WS_SUB_STARTED:
            started.pid = ws_proc_pid(st->p);
            started.id = (char *)ws_proc_id(st->p);
            started.tag = (char *)ws_proc_tag(st->p);
            pe.event_case = WORKSPACE__V1__PROCESS_EVENT__EVENT_STARTED;
            pe.started = &started;
            break;
        case WS_SUB_DATA:
            chunk.data.data = (uint8_t *)ev.data;
            chunk.data.len = ev.len;
            chunk.offset = ev.offset;
            if (ev.stream == WS_STREAM_STDOUT) {
                pe.event_case = WORKSPACE__V1__PROCESS_EVENT__EVENT_STDOUT;
                pe.stdout = &chunk;
            } else if (ev.stream == WS_STREAM_STDERR) {
                pe.event_case = WORKSPACE__V1__PROCESS_EVENT__EVENT_STDERR;
                pe.stderr = &chunk;
            } else {
                pe.event_case = WORKSPACE__V1__PROCESS_EVENT__EVENT_PTY;
                pe.pty = &chunk;
            }
            break;
        case WS_SUB_GAP:
            gap.stream = stream_pb(ev.stream);
            gap.offset = ev.offset;
            gap.bytes_dropped = ev.dropped;
            pe.event_case = WORKSPACE__V1__PROCESS_EVENT__EVENT_GAP;
            pe.gap = &gap;
            break;
        case WS_SUB_EXITED:
            fill_exited(&ex, &ev.result, ev.delivered);
            pe.event_case = WORKSPACE__V1__PROCESS_EVENT__EVENT_EXITED;
            pe.exited = &ex.x;
            break;
        default:
            break;
        }
        if (ev.kind == WS_SUB_EXITED) {
            pthread_mutex_lock(&st->lock);
            st->finished = true;
            st->looping = false;
            struct ws_sub *sub = st->sub;
            st->sub = NULL;
            pthread_mutex_unlock(&st->lock);
            ws_call_send(st->call, &pe.base);
            ws_call_finish(st->call, NULL);
            /* Last: releasing the subscriber drops its call reference. */
            ws_sub_close(sub);
            return;
        }
        int sent = ws_call_send(st->call, &pe.base);
        /* The message is serialized: the ring's bytes may be reused while
         * it travels. The send may already have completed and the next
         * event been taken on another thread: ws_sub_taken then leaves
         * that one alone. */
        if (ev.kind == WS_SUB_DATA)
            ws_sub_taken(st->sub, &ev);
        pthread_mutex_lock(&st->lock);
        if (sent < 0) {
            /* Cancelled or finished: on_cancel detaches. */
            st->finished = true;
        }
        if (sent >= 0 && st->sent_early && !st->finished) {
            /* The send is done already: carry on here. */
            st->sent_early = false;
            pthread_mutex_unlock(&st->lock);
            continue;
        }
        if (st->sent_early)
            st->sending = false;
        st->sent_early = false;
        st->looping = false;
        struct ws_sub *closing = take_pending_close(st);
        pthread_mutex_unlock(&st->lock);
        ws_sub_close(closing);
        /* Otherwise on_sent continues. */
        return;
    }
}

static void stream_sent(struct ws_call *call, bool ok)
{
    struct stream *st = ws_call_data(call);

    pthread_mutex_lock(&st->lock);
    if (!ok)
        st->finished = true;
    if (st->looping) {
        /* stream_pump is still finishing the iteration that sent this. */
        st->sent_early = true;
        pthread_mutex_unlock(&st->lock);
        return;
    }
    st->sending = false;
    pthread_mutex_unlock(&st->lock);
    if (ok)
        stream_pump(st);
}

static void stream_cancel(struct ws_call *call)
{
    struct stream *st = ws_call_data(call);
    struct ws_proc *p;

    if (!st)
        return;
    ws_services_job_cancel(call, &st->job);
    pthread_mutex_lock(&st->lock);
    p = st->p;
    if (!p) {
        /* Start's launch has not ended: it looks for the cancel itself. */
        pthread_mutex_unlock(&st->lock);
        return;
    }
    st->finished = true;
    struct ws_sub *sub = NULL;
    if (st->looping) {
        /* stream_pump is using it: it closes it when its loop ends. */
        st->close_pending = true;
    } else {
        sub = st->sub;
        st->sub = NULL;
    }
    pthread_mutex_unlock(&st->lock);
    if (st->owner && !ws_proc_background(p))
        ws_proc_kill(p, WS_CAUSE_CANCELLED, true);
    ws_sub_close(sub);
}

static void stream_destroy(struct ws_call *call)
{
    struct stream *st = ws_call_data(call);

    if (!st)
        return;
    /* The subscriber is gone: it held a reference to this call. */
    ws_proc_unref(st->p);
    ws_workspace_unref(st->ws);
    if (st->req)
        protobuf_c_message_free_unpacked(st->req, NULL);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

/* Ends a Start call with an error the handler chose: the call will see no
 * on_cancel, so what on_cancel would do happens here (the process ends
 * with its stream unless it runs in the background; the subscriber and
 * its call reference go). */
static void stream_fail(struct stream *st, Workspace__V1__ErrorReason reason, const char *message)
{
    ws_call_fail_status(st->call, reason, message);
    stream_cancel(st->call);
}

static struct stream *stream_new(struct ws_call *call)
{
    struct stream *st = calloc(1, sizeof(*st));

    if (!st)
        return NULL;
    st->call = call;
    pthread_mutex_init(&st->lock, NULL);
    ws_call_set_data(call, st);
    return st;
}

/* Subscribes and sends `started`. The subscriber holds a call reference
 * until it is released. */
static int stream_attach(struct stream *st, uint64_t offset)
{
    ws_call_ref(st->call);
    int err = ws_sub_new(st->p, offset, stream_notify, stream_release, st, &st->sub);
    if (err < 0) {
        ws_call_unref(st->call);
        return err;
    }
    stream_pump(st);
    return 0;
}

/* ---- Start ---- */

static void start_recv(struct stream *st)
{
    (void)ws_call_recv(st->call);
}

static void stdin_written(void *arg, int err)
{
    struct stream *st = arg;

    /* -EPIPE: the command closed stdin or ended; later chunks meet the
     * same fate, which is no error of the client's. */
    (void)err;
    start_recv(st);
    ws_call_unref(st->call);
}

/* Starts the command of `req`, and streams its events. */
static void start_launch(struct ws_call *call, const Workspace__V1__StartRequest *req)
{
    struct stream *st = ws_call_data(call);
    const Workspace__V1__ProcessConfig *pc = req->start->process;
    struct ws_workspace *ws = NULL;
    struct ws_proc *p = NULL;
    size_t ring = pc && pc->max_output_bytes ? pc->max_output_bytes : START_RING_DEFAULT;

    if (ring < START_RING_MIN)
        ring = START_RING_MIN;
    struct launch how = {
        .stdin_pipe = pc && pc->stdin,
        .background = pc && pc->background,
        .ring_bytes = ring,
        .wait_for_subscriber = true,
    };
    if (launch(call, req->start->workspace_id, pc, &how, &ws, &p) < 0)
        return;
    pthread_mutex_lock(&st->lock);
    st->ws = ws;
    st->p = p;
    st->owner = true;
    st->want_stdin = pc->stdin || pc->pty;
    pthread_mutex_unlock(&st->lock);
    if (stream_attach(st, 0) < 0) {
        ws_proc_kill(p, WS_CAUSE_CANCELLED, false);
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    /* On the pool, a cancel may have come before there was a process and a
     * subscriber to end: end them now, as on_cancel would have. */
    if (ws_call_cancelled(call)) {
        stream_cancel(call);
        return;
    }
    start_recv(st);
}

static void start_launch_job(struct ws_call *call)
{
    struct stream *st = ws_call_data(call);

    start_launch(call, (const Workspace__V1__StartRequest *)st->req);
}

static void start_start(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__StartRequest *req = (const Workspace__V1__StartRequest *)msg;
    struct stream *st;

    if (!req || req->msg_case != WORKSPACE__V1__START_REQUEST__MSG_START || !req->start) {
        ws_call_fail_status(call, WORKSPACE__V1__ERROR_REASON__MALFORMED,
                            "the first message must be `start`");
        return;
    }
    const Workspace__V1__ProcessConfig *pc = req->start->process;
    if (pc && pc->max_output_bytes > START_RING_MAX) {
        ws_call_fail_status(call, WORKSPACE__V1__ERROR_REASON__LIMIT,
                            "max_output_bytes is above 1 MiB");
        return;
    }
    st = stream_new(call);
    if (!st) {
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    ws_services_job_init(&st->job, call);
    if (!launch_offloaded(call, req->start->workspace_id)) {
        start_launch(call, req);
        return;
    }
    st->req = ws_services_message_copy(msg);
    if (!st->req) {
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    ws_services_offload(call, &st->job, WS_SERVICES_LANE_DAEMON, start_launch_job, NULL);
}

static void start_message(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__StartRequest *req = (const Workspace__V1__StartRequest *)msg;
    struct stream *st = ws_call_data(call);
    int err;

    if (!req)
        return; /* half-close: the command runs on, output keeps coming */
    switch (req->msg_case) {
    case WORKSPACE__V1__START_REQUEST__MSG_STDIN:
        if (!st->want_stdin) {
            stream_fail(st, WORKSPACE__V1__ERROR_REASON__STDIN_CLOSED,
                        "stdin was not requested (set process.stdin)");
            return;
        }
        ws_call_ref(call);
        err = ws_proc_write_stdin(st->p, req->stdin.data, req->stdin.len, stdin_written, st);
        if (err == 0)
            return; /* the next receive follows the write */
        ws_call_unref(call);
        if (err == -EBADF) {
            stream_fail(st, WORKSPACE__V1__ERROR_REASON__STDIN_CLOSED, "stdin was already closed");
            return;
        }
        if (err == -E2BIG) {
            stream_fail(st, WORKSPACE__V1__ERROR_REASON__LIMIT,
                        "a stdin message holds at most 1 MiB");
            return;
        }
        break; /* -EPIPE: the command has ended */
    case WORKSPACE__V1__START_REQUEST__MSG_CLOSE_STDIN:
        if (st->want_stdin)
            (void)ws_proc_close_stdin(st->p);
        break;
    case WORKSPACE__V1__START_REQUEST__MSG_SIGNAL:
        if (req->signal <= 0 || req->signal >= NSIG) {
            stream_fail(st, WORKSPACE__V1__ERROR_REASON__MALFORMED, "signal number out of range");
            return;
        }
        (void)ws_proc_signal(st->p, req->signal);
        break;
    case WORKSPACE__V1__START_REQUEST__MSG_RESIZE:
        err = req->resize ? ws_proc_resize(st->p, req->resize->rows, req->resize->cols) : -EINVAL;
        if (err == -ENOTTY) {
            stream_fail(st, WORKSPACE__V1__ERROR_REASON__NO_PTY, "the process has no terminal");
            return;
        }
        if (err == -EINVAL) {
            stream_fail(st, WORKSPACE__V1__ERROR_REASON__MALFORMED, "terminal size out of range");
            return;
        }
        break;
    default:
        stream_fail(st, WORKSPACE__V1__ERROR_REASON__MALFORMED,
                    "`start` may only be the first message");
        return;
    }
    start_recv(st);
}

/* ---- Attach ---- */

static int find_target(struct ws_call *call, const char *ws_id, const char *id, const char *tag,
                       struct ws_workspace **ret_ws, struct ws_proc **ret)
{
    struct ws_services *s = ws_call_method_data(call);
    struct ws_workspace *ws = NULL;
    int err;

    if ((id[0] != 0) == (tag[0] != 0)) {
        ws_call_fail_status(call, WORKSPACE__V1__ERROR_REASON__MALFORMED,
                            "name the process by exactly one of id and tag");
        return -EINVAL;
    }
    err = ws_services_workspace(call, ws_id, WS_CAP_SHELL, &ws);
    if (err < 0)
        return err;
    err = ws_exec_find(s->exec, ws_workspace_id(ws), id, tag, ret);
    if (err < 0) {
        struct ws_diag d = {0};
        /* Same status either way; the message tells a client whose command
         * did exist that waiting longer will not bring its output back. */
        if (ws_exec_was_freed(s->exec, ws_workspace_id(ws), id, tag))
            ws_diag_set(&d, "the process finished and its output was freed (it was kept for "
                            "--finished-output-ttl-ms, or pushed out by newer output)");
        else
            ws_diag_set(&d, "no such process in this workspace");
        ws_diag_meta(&d, id[0] ? "id" : "tag", "%s", id[0] ? id : tag);
        ws_call_fail(call, err, &d);
        ws_workspace_unref(ws);
        return err;
    }
    *ret_ws = ws;
    return 0;
}

static void attach_start(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__AttachRequest *req = (const Workspace__V1__AttachRequest *)msg;
    struct stream *st = stream_new(call);

    if (!st) {
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    if (find_target(call, req->workspace_id, req->id, req->tag, &st->ws, &st->p) < 0)
        return;
    if (stream_attach(st, req->offset) < 0)
        ws_call_fail(call, -ENOMEM, NULL);
}

/* ---- ListProcesses ---- */

struct list_ctx {
    Workspace__V1__ProcessInfo **infos;
    struct exited_pb *exited;
    size_t n, cap;
    bool oom;
};

static void list_one(void *ud, struct ws_proc *p)
{
    struct list_ctx *lc = ud;

    if (lc->n == lc->cap) {
        size_t ncap = lc->cap ? lc->cap * 2 : 16;
        Workspace__V1__ProcessInfo **ni = realloc(lc->infos, ncap * sizeof(*ni));
        if (!ni) {
            lc->oom = true;
            return;
        }
        lc->infos = ni;
        struct exited_pb *ne = realloc(lc->exited, ncap * sizeof(*ne));
        if (!ne) {
            lc->oom = true;
            return;
        }
        /* Exited messages point into lc->exited: re-point after moving. */
        for (size_t i = 0; i < lc->n; i++)
            if (lc->infos[i]->exited) {
                struct exited_pb *e = &ne[i];
                lc->infos[i]->exited = &e->x;
                for (int k = 0; k < WS_STREAM_COUNT; k++) {
                    Workspace__V1__StreamStats *ss = &e->ss[k];
                    if (k == WS_STREAM_STDOUT && e->x.stdout)
                        e->x.stdout = ss;
                    if (k == WS_STREAM_STDERR && e->x.stderr)
                        e->x.stderr = ss;
                    if (k == WS_STREAM_PTY && e->x.pty)
                        e->x.pty = ss;
                }
            }
        lc->exited = ne;
        lc->cap = ncap;
    }
    /* The info first: freed through its pointer. */
    struct info_pb {
        Workspace__V1__ProcessInfo pi;
        Workspace__V1__PtySize pty;
    } *ip = malloc(sizeof(*ip));
    if (!ip) {
        lc->oom = true;
        return;
    }
    Workspace__V1__ProcessInfo *pi = &ip->pi;
    workspace__v1__process_info__init(pi);
    pi->id = (char *)ws_proc_id(p);
    pi->tag = (char *)ws_proc_tag(p);
    pi->pid = ws_proc_pid(p);
    const char *const *argv = ws_proc_argv(p);
    size_t argc = 0;
    while (argv[argc])
        argc++;
    pi->n_argv = argc;
    pi->argv = (char **)argv;
    pi->background = ws_proc_background(p);
    pi->started_at_unix_ms = ws_proc_started_at_ms(p);
    struct ws_proc_result r;
    pi->running = !ws_proc_get_result(p, &r);
    if (!pi->running) {
        fill_exited(&lc->exited[lc->n], &r, NULL);
        pi->exited = &lc->exited[lc->n].x;
    }
    bool stdin_open;
    ws_proc_stdin_state(p, &stdin_open, &pi->stdin_offset);
    pi->stdin_open = stdin_open;
    unsigned rows, cols;
    if (ws_proc_pty_size(p, &rows, &cols)) {
        workspace__v1__pty_size__init(&ip->pty);
        ip->pty.rows = rows;
        ip->pty.cols = cols;
        pi->pty = &ip->pty;
    }
    lc->infos[lc->n++] = pi;
}

struct list_hold {
    struct ws_proc **procs;
    size_t n, cap;
};

static void list_hold_one(void *ud, struct ws_proc *p)
{
    struct list_hold *h = ud;

    if (h->n == h->cap) {
        size_t ncap = h->cap ? h->cap * 2 : 16;
        struct ws_proc **np = realloc(h->procs, ncap * sizeof(*np));
        if (!np)
            return;
        h->procs = np;
        h->cap = ncap;
    }
    ws_proc_ref(p);
    h->procs[h->n++] = p;
}

static void list_start(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__ListProcessesRequest *req =
        (const Workspace__V1__ListProcessesRequest *)msg;
    struct ws_services *s = ws_call_method_data(call);
    struct ws_workspace *ws = NULL;
    struct list_hold h = {0};
    struct list_ctx lc = {0};

    if (ws_services_workspace(call, req->workspace_id, WS_CAP_SHELL, &ws) < 0)
        return;
    /* Hold the processes (their argv and ids back the response) while it
     * is built and sent. */
    ws_exec_list(s->exec, ws_workspace_id(ws), list_hold_one, &h);
    for (size_t i = 0; i < h.n && !lc.oom; i++)
        list_one(&lc, h.procs[i]);
    if (lc.oom) {
        ws_call_fail(call, -ENOMEM, NULL);
    } else {
        Workspace__V1__ListProcessesResponse resp = WORKSPACE__V1__LIST_PROCESSES_RESPONSE__INIT;
        resp.n_processes = lc.n;
        resp.processes = lc.infos;
        ws_call_finish(call, &resp.base);
    }
    for (size_t i = 0; i < lc.n; i++)
        free(lc.infos[i]);
    free(lc.infos);
    free(lc.exited);
    for (size_t i = 0; i < h.n; i++)
        ws_proc_unref(h.procs[i]);
    free(h.procs);
    ws_workspace_unref(ws);
}

/* ---- SendSignal ---- */

static void signal_start(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__SendSignalRequest *req = (const Workspace__V1__SendSignalRequest *)msg;
    struct ws_workspace *ws = NULL;
    struct ws_proc *p = NULL;

    if (req->signal <= 0 || req->signal >= NSIG) {
        ws_call_fail_status(call, WORKSPACE__V1__ERROR_REASON__MALFORMED,
                            "signal number out of range");
        return;
    }
    if (find_target(call, req->workspace_id, req->id, req->tag, &ws, &p) < 0)
        return;
    int err = ws_proc_signal(p, req->signal);
    if (err == -ESRCH) {
        struct ws_diag d = {0};
        ws_diag_set(&d, "the process has already ended");
        ws_call_fail(call, err, &d);
    } else if (err < 0) {
        ws_call_fail(call, err, NULL);
    } else {
        Workspace__V1__SendSignalResponse resp = WORKSPACE__V1__SEND_SIGNAL_RESPONSE__INIT;
        ws_call_finish(call, &resp.base);
    }
    ws_proc_unref(p);
    ws_workspace_unref(ws);
}

/* ---- SendInput, CloseInput, Resize ---- */

static void input_start(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__SendInputRequest *req = (const Workspace__V1__SendInputRequest *)msg;
    struct ws_workspace *ws = NULL;
    struct ws_proc *p = NULL;
    struct ws_diag d = {0};
    uint64_t taken = 0;

    if (req->data.len > WS_PROC_STDIN_MAX) {
        ws_diag_set(&d, "SendInput carries at most %d bytes", WS_PROC_STDIN_MAX);
        ws_diag_meta(&d, "field", "data");
        ws_diag_meta(&d, "limit", "%d", WS_PROC_STDIN_MAX);
        ws_call_fail(call, -WS_ELIMIT, &d);
        return;
    }
    if (find_target(call, req->workspace_id, req->id, req->tag, &ws, &p) < 0)
        return;
    int err =
        ws_proc_send_input(p, req->data.data, req->data.len, req->offset, req->append, &taken);
    switch (err) {
    case 0: {
        Workspace__V1__SendInputResponse resp = WORKSPACE__V1__SEND_INPUT_RESPONSE__INIT;
        resp.offset = taken;
        ws_call_finish(call, &resp.base);
        break;
    }
    case -ERANGE:
        ws_diag_set(&d, "offset %llu is past the %llu bytes the process's stdin took",
                    (unsigned long long)req->offset, (unsigned long long)taken);
        ws_diag_meta(&d, "offset", "%llu", (unsigned long long)taken);
        ws_call_fail(call, -WS_EINPUTGAP, &d);
        break;
    case -ENOBUFS:
        /* Transient: the queue drains as the command reads. */
        ws_diag_set(&d,
                    "the process's stdin has %d bytes queued at most; retry once it reads "
                    "them",
                    WS_PROC_STDIN_MAX);
        ws_diag_meta(&d, "quota", "stdin_queued_bytes");
        ws_diag_meta(&d, "limit", "%d", WS_PROC_STDIN_MAX);
        ws_call_fail(call, -WS_EQUOTA, &d);
        break;
    case -ENODEV:
        ws_call_fail_status(call, WORKSPACE__V1__ERROR_REASON__STDIN_CLOSED,
                            "the process was started without stdin (set process.stdin)");
        break;
    case -EBADF:
        ws_call_fail_status(call, WORKSPACE__V1__ERROR_REASON__STDIN_CLOSED,
                            "the process's stdin was closed");
        break;
    case -EPIPE:
        ws_call_fail_status(call, WORKSPACE__V1__ERROR_REASON__STDIN_CLOSED,
                            "the process has ended");
        break;
    default:
        ws_call_fail(call, err, NULL);
        break;
    }
    ws_proc_unref(p);
    ws_workspace_unref(ws);
}

static void close_input_start(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__CloseInputRequest *req = (const Workspace__V1__CloseInputRequest *)msg;
    struct ws_workspace *ws = NULL;
    struct ws_proc *p = NULL;
    Workspace__V1__CloseInputResponse resp = WORKSPACE__V1__CLOSE_INPUT_RESPONSE__INIT;
    bool open;

    if (find_target(call, req->workspace_id, req->id, req->tag, &ws, &p) < 0)
        return;
    /* Idempotent: a stdin closed already, by anyone, or never opened is
     * closed, which is what was asked. */
    (void)ws_proc_close_stdin(p);
    ws_proc_stdin_state(p, &open, &resp.offset);
    ws_call_finish(call, &resp.base);
    ws_proc_unref(p);
    ws_workspace_unref(ws);
}

static void resize_start(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__ResizeRequest *req = (const Workspace__V1__ResizeRequest *)msg;
    struct ws_workspace *ws = NULL;
    struct ws_proc *p = NULL;
    struct ws_diag d = {0};

    if (!req->size || req->size->rows == 0 || req->size->cols == 0 ||
        req->size->rows > WS_SPAWN_PTY_DIM_MAX || req->size->cols > WS_SPAWN_PTY_DIM_MAX) {
        ws_diag_set(&d, "size: rows and cols are 1-%d", WS_SPAWN_PTY_DIM_MAX);
        ws_diag_meta(&d, "field", "size");
        ws_call_fail(call, -WS_EMALFORMED, &d);
        return;
    }
    if (find_target(call, req->workspace_id, req->id, req->tag, &ws, &p) < 0)
        return;
    int err = ws_proc_resize(p, req->size->rows, req->size->cols);
    if (err == 0) {
        Workspace__V1__ResizeResponse resp = WORKSPACE__V1__RESIZE_RESPONSE__INIT;
        ws_call_finish(call, &resp.base);
    } else if (err == -ENOTTY) {
        ws_call_fail_status(call, WORKSPACE__V1__ERROR_REASON__NO_PTY,
                            "the process has no terminal");
    } else if (err == -ESRCH) {
        ws_diag_set(&d, "the process has already ended");
        ws_call_fail(call, err, &d);
    } else {
        ws_call_fail(call, err, NULL);
    }
    ws_proc_unref(p);
    ws_workspace_unref(ws);
}

/* ---- audit ---- */

/* One JSON line per finished command on stderr: what ran, where, how it
 * ended. Never the environment (it may hold secrets). */
void ws_services_exec_audit(void *ud, const char *workspace_id, struct ws_proc *p,
                            const struct ws_proc_result *r)
{
    struct ws_services *s = ud;

    /* The command may have written files: the tenant byte quota's figure
     * is measured again before it is next used (not here, on the pump). */
    ws_registry_usage_stale(s->reg, workspace_id);
    /* Audit hook: the workspace's tamper-evident log (server/audit). */
    if (s->audit) {
        struct ws_audit_command ac = {
            .process_id = ws_proc_id(p),
            .tag = ws_proc_tag(p),
            .argv = ws_proc_argv(p),
            .cwd = ws_proc_cwd(p),
            .cause = ws_cause_name(r->cause),
            .background = ws_proc_background(p),
            .exit_code = r->exit_code,
            .signal = r->signal,
            .duration_ms = (uint64_t)r->wall_ms,
            .stdout_bytes = r->streams[WS_STREAM_STDOUT].total,
            .stderr_bytes = r->streams[WS_STREAM_STDERR].total,
            .pty_bytes = r->streams[WS_STREAM_PTY].total,
        };
        int err = ws_audit_command(s->audit, workspace_id, &ac);
        if (err < 0) {
            ws_log_msg(WS_RPC_LOG_ERROR, "audit.failed", "cannot record a command in %s: %s",
                       workspace_id, strerror(-err));
            ws_metrics_audit_lost("command");
        }
    }
    ws_metrics_command_ended(ws_cause_name(r->cause), r->wall_ms, /* metrics */
                             r->streams[WS_STREAM_STDOUT].total, r->streams[WS_STREAM_STDERR].total,
                             r->streams[WS_STREAM_PTY].total);
    json_t *argv = json_array();
    for (const char *const *a = ws_proc_argv(p); argv && *a; a++)
        json_array_append_new(argv, json_string(*a));
    json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:s, s:s, s:b, s:i, s:i, s:I, s:I, s:I, s:I}",
                          "workspace", workspace_id, "id", ws_proc_id(p), "tag", ws_proc_tag(p),
                          "argv", argv ? argv : json_null(), "cwd", ws_proc_cwd(p), "cause",
                          ws_cause_name(r->cause), "background", ws_proc_background(p), "exit_code",
                          r->exit_code, "signal", r->signal, "duration_ms", (json_int_t)r->wall_ms,
                          "stdout_bytes", (json_int_t)r->streams[WS_STREAM_STDOUT].total,
                          "stderr_bytes", (json_int_t)r->streams[WS_STREAM_STDERR].total,
                          "pty_bytes", (json_int_t)r->streams[WS_STREAM_PTY].total);
    if (!o)
        return;
    char *fields = json_dumps(o, JSON_COMPACT);
    if (fields) {
        ws_log_json(WS_RPC_LOG_INFO, "command", fields);
        free(fields);
    }
    json_decref(o);
}

size_t ws_services_exec(struct ws_services *s, struct ws_rpc_method *out)
{
    static const struct ws_rpc_method methods[] = {
        WS_SERVICES_METHOD("/workspace.v1.Exec/Run", WS_RPC_UNARY,
                           &workspace__v1__run_request__descriptor, .on_start = run_start,
                           .on_cancel = run_cancel, .on_destroy = run_destroy),
        WS_SERVICES_METHOD("/workspace.v1.Exec/Start", WS_RPC_BIDI,
                           &workspace__v1__start_request__descriptor, .on_start = start_start,
                           .on_message = start_message, .on_sent = stream_sent,
                           .on_cancel = stream_cancel, .on_destroy = stream_destroy),
        WS_SERVICES_METHOD("/workspace.v1.Exec/Attach", WS_RPC_SERVER_STREAM,
                           &workspace__v1__attach_request__descriptor, .on_start = attach_start,
                           .on_sent = stream_sent, .on_cancel = stream_cancel,
                           .on_destroy = stream_destroy),
        WS_SERVICES_UNARY("/workspace.v1.Exec/ListProcesses",
                          &workspace__v1__list_processes_request__descriptor, list_start),
        WS_SERVICES_UNARY("/workspace.v1.Exec/SendSignal",
                          &workspace__v1__send_signal_request__descriptor, signal_start),
        WS_SERVICES_UNARY("/workspace.v1.Exec/SendInput",
                          &workspace__v1__send_input_request__descriptor, input_start),
        WS_SERVICES_UNARY("/workspace.v1.Exec/CloseInput",
                          &workspace__v1__close_input_request__descriptor, close_input_start),
        WS_SERVICES_UNARY("/workspace.v1.Exec/Resize", &workspace__v1__resize_request__descriptor,
                          resize_start),
    };

    return ws_services_add_methods(s, methods, WS_ELEMENTSOF(methods), out);
}
