/* The set of providers: the four tables in kind order, and the instances
 * a server makes of them (each table with its runtime). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/posix/fs.h"
#include "server/providers/ops.h"
#include "server/providers/probe.h"

struct ws_providers {
    struct ws_provider items[WS_PROVIDER_COUNT];
};

static void probe_always(struct ws_probe *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->available = true;
}

static const struct ws_providers builtin = {
    .items =
        {
            [WS_PROVIDER_MEMORY] = {.ops = &ws_memory_ops},
            [WS_PROVIDER_LOCAL_BASH] = {.ops = &ws_local_bash_ops},
            [WS_PROVIDER_LOCAL_SANDBOX] = {.ops = &ws_local_sandbox_ops},
            [WS_PROVIDER_DOCKER] = {.ops = &ws_docker_ops},
        },
};

const struct ws_providers *ws_providers_builtin(void)
{
    return &builtin;
}

int ws_providers_new(const struct ws_provider_config *cfg, struct ws_providers **ret)
{
    struct ws_providers *ps = malloc(sizeof(*ps));
    int err = 0;

    if (!ps)
        return -ENOMEM;
    /* Every entry is whole (runtime NULL) before the first runtime is
     * made, so a failure part-way frees exactly what was made. */
    *ps = builtin;
    for (size_t k = 0; k < WS_PROVIDER_COUNT; k++) {
        struct ws_provider *p = &ps->items[k];

        if (p->ops->rt_new) {
            err = p->ops->rt_new(cfg, &p->rt);
            if (err < 0)
                goto out;
        }
    }
    *ret = ps;
    ps = NULL;
out:
    ws_providers_free(ps);
    return err;
}

void ws_providers_free(struct ws_providers *ps)
{
    if (!ps)
        return;
    /* Reverse order: a later runtime may use an earlier one's work. */
    for (size_t k = WS_PROVIDER_COUNT; k-- > 0;) {
        struct ws_provider *p = &ps->items[k];

        if (p->ops && p->ops->rt_free)
            p->ops->rt_free(p->rt);
        p->rt = NULL;
    }
    free(ps);
}

const struct ws_provider *ws_providers_get(const struct ws_providers *ps,
                                           enum ws_provider_kind kind)
{
    if ((unsigned)kind >= WS_PROVIDER_COUNT)
        return NULL;
    return &(ps ? ps : &builtin)->items[kind];
}

const struct ws_provider *ws_providers_by_name(const struct ws_providers *ps, const char *name)
{
    if (!ps)
        ps = &builtin;
    for (size_t k = 0; name && k < WS_PROVIDER_COUNT; k++)
        if (strcmp(ps->items[k].ops->name, name) == 0)
            return &ps->items[k];
    return NULL;
}

const struct ws_provider *ws_providers_of_request(const struct ws_providers *ps,
                                                  const Workspace__V1__OpenRequest *req)
{
    if (!ps)
        ps = &builtin;
    for (size_t k = 0; k < WS_PROVIDER_COUNT; k++)
        if (ps->items[k].ops->open_case == (int)req->provider_case)
            return &ps->items[k];
    return NULL;
}

int ws_providers_check(const struct ws_providers *ps, const Workspace__V1__OpenRequest *req,
                       const char *const *own, size_t n_own, union ws_provider_scratch *scratch,
                       struct ws_diag *d, const Workspace__V1__OpenRequest **ret_req,
                       const struct ws_provider **ret)
{
    const struct ws_provider *p = ws_providers_of_request(ps, req);
    const Workspace__V1__OpenRequest *checked = req;

    if (!p) {
        ws_diag_set(d, "exactly one provider config is required");
        ws_diag_meta(d, "field", "provider");
        return -WS_EMALFORMED;
    }
    if (p->ops->check) {
        int err = p->ops->check(p->rt, req, own, n_own, scratch, &checked, d);
        if (err < 0)
            return err;
    }
    *ret_req = checked;
    *ret = p;
    return 0;
}

const struct ws_provider *ws_provider_get(enum ws_provider_kind kind)
{
    return ws_providers_get(NULL, kind);
}

const struct ws_provider *ws_provider_by_name(const char *name)
{
    return ws_providers_by_name(NULL, name);
}

void ws_provider_probe(const struct ws_provider *p, struct ws_probe *ret)
{
    if (p->ops->probe)
        p->ops->probe(p->rt, ret);
    else
        probe_always(ret);
}

bool ws_provider_uid_owns_storage(const struct ws_provider *p)
{
    return p->ops->on_disk &&
           (p->ops->commands_run_as_uid || (p->ops->exec_env && p->ops->exec_env->on_host));
}

/* Every provider that may own storage keeps it in a host directory
 * (ws_provider_fs_open_dir): opened here with the owner instead. */
int ws_provider_attach_owned_storage(const struct ws_provider *p, int dir_fd, uid_t uid, gid_t gid,
                                     struct ws_vfs **ret_fs)
{
    if (!ws_provider_uid_owns_storage(p))
        return -EINVAL;
    if (dir_fd < 0)
        return -EBADF;
    return ws_posixfs_open_owned(dir_fd, ".", 0, uid, gid, ret_fs);
}

int ws_provider_attach_storage(const struct ws_provider *p, int dir_fd,
                               const struct ws_storage_limits *limits, struct ws_vfs **ret_fs)
{
    return p->ops->fs_open(p->rt, dir_fd, limits, ret_fs);
}

int ws_provider_fs_open_dir(void *rt, int dir_fd, const struct ws_storage_limits *limits,
                            struct ws_vfs **ret_fs)
{
    (void)rt;
    (void)limits;
    if (dir_fd < 0)
        return -EBADF;
    return ws_posixfs_open(dir_fd, ".", ret_fs);
}
