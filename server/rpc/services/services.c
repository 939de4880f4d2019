#include "server/rpc/services/services.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/audit/audit.h"
#include "server/metrics/metrics.h"
#include "server/base/time.h"
#include "server/base/utf8.h"
#include "server/rpc/log.h"
#include "server/rpc/services/internal.h"

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

int ws_services_new(const struct ws_services_deps *deps, struct ws_services **ret)
{
    const char *path = deps->exec_path ? deps->exec_path : WS_SERVICES_EXEC_PATH_DEFAULT;
    struct ws_services *s = NULL;
    size_t n = 0;
    int err = -EINVAL;

    if (!ws_services_exec_path_valid(path))
        goto out;
    err = -ENOMEM;
    s = calloc(1, sizeof(*s));
    if (!s)
        goto out;
    atomic_init(&s->draining, false);
    pthread_mutex_init(&s->watch_lock, NULL);
    s->methods = calloc(WS_SERVICES_MAX_METHODS, sizeof(*s->methods));
    s->exec_path = strdup(path);
    if (!s->methods || !s->exec_path)
        goto out;
    s->reg = deps->reg;
    s->exec = deps->exec;
    s->pool = deps->pool;
    s->usage_walks = deps->usage_walks;
    if (s->pool) {
        int fs = ws_pool_lane(s->pool, WS_SERVICES_LANE_FS_NAME);
        int daemon = ws_pool_lane(s->pool, WS_SERVICES_LANE_DAEMON_NAME);

        err = -EINVAL;
        if (fs < 0 || daemon < 0)
            goto out;
        s->lanes[WS_SERVICES_LANE_FS] = (unsigned)fs;
        s->lanes[WS_SERVICES_LANE_DAEMON] = (unsigned)daemon;
    }
    s->audit = deps->audit;
    s->providers = deps->providers;
    n += ws_services_providers(s, s->methods + n);
    n += ws_services_workspaces(s, s->methods + n);
    n += ws_services_filesystem(s, s->methods + n);
    n += ws_services_exec(s, s->methods + n);
    n += ws_services_health(s, s->methods + n);
    n += ws_services_reflection(s, s->methods + n);
    s->n_methods = n;
    *ret = s;
    s = NULL;
    err = 0;
out:
    ws_services_free(s);
    return err;
}

void ws_services_free(struct ws_services *s)
{
    if (!s)
        return;
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

size_t ws_services_add_methods(struct ws_services *s, const struct ws_rpc_method *methods, size_t n,
                               struct ws_rpc_method *out)
{
    /* The table holds every service's methods: outgrowing it is a mistake
     * of the build, which the first start of any server shows. */
    if ((size_t)(out - s->methods) + n > WS_SERVICES_MAX_METHODS) {
        fprintf(stderr, "workspaced: more than %d methods: raise WS_SERVICES_MAX_METHODS\n",
                WS_SERVICES_MAX_METHODS);
        abort();
    }
    for (size_t i = 0; i < n; i++) {
        out[i] = methods[i];
        out[i].method_data = s;
    }
    return n;
}

void ws_services_drain(struct ws_services *s)
{
    atomic_store(&s->draining, true);
    ws_services_health_drain(s);
}

/* ---- jobs ---- */

void ws_services_job_init(struct ws_services_job *j, struct ws_call *call)
{
    int64_t left = ws_call_deadline_remaining_ms(call);

    j->call = call;
    j->ctl.cancelled = false;
    /* A deadline too far to add to the clock is no deadline; one that
     * passed already is now. */
    if (left == INT64_MAX || left > INT64_MAX / 4)
        j->ctl.deadline_mono_ms = 0;
    else
        j->ctl.deadline_mono_ms = ws_mono_ms() + (left > 0 ? left : 0);
}

static void job_run(const struct ws_work_ctl *ctl, void *arg)
{
    struct ws_services_job *j = arg;
    /* The call's state, j included, may go with the reference. */
    struct ws_call *call = j->call;

    (void)ctl;
    j->run(call);
    ws_call_unref(call);
}

/* The call for a job that did not run: err is -ECANCELED, -ETIMEDOUT,
 * -ESHUTDOWN, or the refusal of the submit with d. */
static void job_not_run(struct ws_services_job *j, int err, const struct ws_diag *d)
{
    struct ws_diag why = {0};

    if (j->skipped)
        j->skipped(j->call);
    if (!d) {
        if (err == -ETIMEDOUT)
            ws_diag_set(&why, "the deadline passed before the work could start");
        else if (err == -ESHUTDOWN)
            ws_diag_set(&why, "the server is shutting down");
        d = &why;
    }
    /* A call its client cancelled is over already: this sends nothing. */
    ws_call_fail(j->call, err, d);
}

static void job_skipped(void *arg, int err)
{
    struct ws_services_job *j = arg;
    struct ws_call *call = j->call;

    job_not_run(j, err, NULL);
    ws_call_unref(call);
}

void ws_services_offload(struct ws_call *call, struct ws_services_job *j,
                         enum ws_services_lane lane, void (*run)(struct ws_call *call),
                         void (*skipped)(struct ws_call *call))
{
    struct ws_services *s = ws_call_method_data(call);
    struct ws_diag d = {0};
    int err;

    j->run = run;
    j->skipped = skipped;
    if (!s->pool) {
        run(call);
        return;
    }
    struct ws_pool_job job = {
        .run = job_run,
        .skipped = job_skipped,
        .arg = j,
        .tenant = ws_call_tenant(call),
        .ctl = &j->ctl,
    };
    ws_call_ref(call);
    err = ws_pool_submit(s->pool, s->lanes[lane], &job, &d);
    if (err < 0) {
        /* Neither callback will come: the refusal ends the call. */
        job_not_run(j, err, err == -WS_EQUOTA ? &d : NULL);
        ws_call_unref(call);
    }
}

void ws_services_job_cancel(struct ws_call *call, struct ws_services_job *j)
{
    struct ws_services *s = ws_call_method_data(call);

    if (s->pool)
        ws_pool_cancel(s->pool, &j->ctl);
    else
        ws_work_ctl_cancel(&j->ctl);
}

ProtobufCMessage *ws_services_message_copy(const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(len ? len : 1);
    ProtobufCMessage *copy = NULL;

    if (!buf)
        return NULL;
    protobuf_c_message_pack(msg, buf);
    copy = protobuf_c_message_unpack(msg->descriptor, NULL, len, buf);
    free(buf);
    return copy;
}

struct ws_services_unary *ws_services_unary_new(struct ws_call *call, const ProtobufCMessage *req)
{
    struct ws_services_unary *u = calloc(1, sizeof(*u));

    if (u)
        u->req = ws_services_message_copy(req);
    if (!u || !u->req) {
        free(u);
        ws_call_fail(call, -ENOMEM, NULL);
        return NULL;
    }
    ws_services_job_init(&u->job, call);
    ws_call_set_data(call, u);
    return u;
}

void ws_services_unary_cancel(struct ws_call *call)
{
    struct ws_services_unary *u = ws_call_data(call);

    if (u)
        ws_services_job_cancel(call, &u->job);
}

void ws_services_unary_destroy(struct ws_call *call)
{
    struct ws_services_unary *u = ws_call_data(call);

    if (!u)
        return;
    protobuf_c_message_free_unpacked(u->req, NULL);
    ws_workspace_unref(u->ws);
    free(u);
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
    if (err < 0) {
        ws_log_msg(WS_RPC_LOG_ERROR, "audit.failed", "cannot record %s of a file in %s: %s",
                   f->event, ws_workspace_id(ws), strerror(-err));
        ws_metrics_audit_lost(f->event);
    }
}

int ws_services_provider_ws(struct ws_services *s, struct ws_workspace *ws, char *dir, size_t size,
                            struct ws_provider_ws *ret)
{
    struct ws_provider_ws w = {
        .id = ws_workspace_id(ws),
        .rec = ws_workspace_record(ws),
    };

    if (ws_workspace_provider(ws)->ops->on_disk) {
        int err = ws_registry_workspace_path(s->reg, ws, dir, size);

        if (err < 0)
            return err;
        w.dir = dir;
    }
    *ret = w;
    return 0;
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
