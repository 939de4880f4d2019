#include "server/rpc/services/services.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/audit/audit.h"
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
    s->audit = deps->audit;
    s->providers = deps->providers;
    n += ws_services_providers(s, s->methods + n);
    n += ws_services_workspaces(s, s->methods + n);
    n += ws_services_filesystem(s, s->methods + n);
    n += ws_services_exec(s, s->methods + n);
    n += ws_services_health(s, s->methods + n);
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
