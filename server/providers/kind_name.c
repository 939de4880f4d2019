/* The provider kinds by name and by request, with no table behind them:
 * for the policy and the flag parser, which must not link the providers
 * themselves. */
#include <string.h>

#include "server/providers/provider.h"

static const char *const names[WS_PROVIDER_COUNT] = {
    [WS_PROVIDER_MEMORY] = "memory",
    [WS_PROVIDER_LOCAL_BASH] = "local-bash",
    [WS_PROVIDER_LOCAL_SANDBOX] = "local-sandbox",
    [WS_PROVIDER_DOCKER] = "docker",
};

const char *ws_provider_kind_name(enum ws_provider_kind kind)
{
    return (unsigned)kind < WS_PROVIDER_COUNT ? names[kind] : NULL;
}

int ws_provider_kind_by_name(const char *name)
{
    for (int k = 0; name && k < WS_PROVIDER_COUNT; k++)
        if (strcmp(names[k], name) == 0)
            return k;
    return -1;
}

int ws_provider_kind_of_request(const Workspace__V1__OpenRequest *req)
{
    switch (req->provider_case) {
    case WORKSPACE__V1__OPEN_REQUEST__PROVIDER_MEMORY:
        return WS_PROVIDER_MEMORY;
    case WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_BASH:
        return WS_PROVIDER_LOCAL_BASH;
    case WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_SANDBOX:
        return WS_PROVIDER_LOCAL_SANDBOX;
    case WORKSPACE__V1__OPEN_REQUEST__PROVIDER_DOCKER:
        return WS_PROVIDER_DOCKER;
    default:
        return -1;
    }
}
