/* Validation of an Open request's provider config, before anything is
 * created: the providers check their own. */
#include "server/registry/config.h"

int ws_config_check(const Workspace__V1__OpenRequest *req, const char *const *own, size_t n_own,
                    struct ws_diag *d, const struct ws_provider **ret)
{
    union ws_provider_scratch scratch;
    const Workspace__V1__OpenRequest *checked;

    return ws_providers_check(NULL, req, own, n_own, &scratch, d, &checked, ret);
}
