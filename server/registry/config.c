/* Validation of an Open request's provider config, before anything is
 * created. */
#include "server/registry/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/docker/api.h"

/* Empty means the server's own uid:gid; otherwise the rule the container
 * spec is built with. */
static bool user_valid(const char *s)
{
    return !*s || ws_docker_user_valid(s);
}

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
    if (n > WS_CONFIG_BINDS_MAX) {
        ws_diag_set(d, "%s has %zu entries; at most %d", what, n, WS_CONFIG_BINDS_MAX);
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

int ws_config_check(const Workspace__V1__OpenRequest *req, const char *const *own, size_t n_own,
                    struct ws_diag *d, const struct ws_provider **ret)
{
    enum ws_provider_kind kind;
    int err;

    switch (req->provider_case) {
    case WORKSPACE__V1__OPEN_REQUEST__PROVIDER_MEMORY:
        kind = WS_PROVIDER_MEMORY;
        break;
    case WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_BASH:
        kind = WS_PROVIDER_LOCAL_BASH;
        break;
    case WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_SANDBOX: {
        const Workspace__V1__LocalSandboxConfig *c = req->local_sandbox;

        err = check_paths(c->n_read_write_paths, c->read_write_paths, "read_write_paths", own,
                          n_own, d);
        if (err == 0)
            err = check_paths(c->n_read_only_paths, c->read_only_paths, "read_only_paths", own,
                              n_own, d);
        if (err < 0)
            return err;
        const char *bad = NULL;
        if (c->pids_limit &&
            (c->pids_limit < WS_CONFIG_PIDS_MIN || c->pids_limit > WS_CONFIG_PIDS_MAX))
            bad = "pids_limit";
        else if (c->memory_mb &&
                 (c->memory_mb < WS_CONFIG_MEMORY_MB_MIN || c->memory_mb > WS_CONFIG_MEMORY_MB_MAX))
            bad = "memory_mb";
        else if (!(c->cpus >= 0 && c->cpus <= WS_CONFIG_CPUS_MAX) ||
                 (c->cpus > 0 && c->cpus < 0.01))
            bad = "cpus";
        if (bad) {
            ws_diag_set(d,
                        "local_sandbox.%s is out of range (pids %u-%u, memory_mb %u-%u, cpus "
                        "0.01-%d; 0 for the default)",
                        bad, WS_CONFIG_PIDS_MIN, WS_CONFIG_PIDS_MAX, WS_CONFIG_MEMORY_MB_MIN,
                        WS_CONFIG_MEMORY_MB_MAX, WS_CONFIG_CPUS_MAX);
            ws_diag_meta(d, "field", "%s", bad);
            return -WS_ELIMIT;
        }
        kind = WS_PROVIDER_LOCAL_SANDBOX;
        break;
    }
    case WORKSPACE__V1__OPEN_REQUEST__PROVIDER_DOCKER: {
        const Workspace__V1__DockerConfig *c = req->docker;

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
        kind = WS_PROVIDER_DOCKER;
        break;
    }
    default:
        ws_diag_set(d, "exactly one provider config is required");
        ws_diag_meta(d, "field", "provider");
        return -WS_EMALFORMED;
    }
    *ret = ws_provider_get(kind);
    return 0;
}
