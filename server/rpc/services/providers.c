/* Providers.ListProviders: every kind, its capabilities and a live probe,
 * and the caller's policy. */
#include <stdio.h>
#include <stdlib.h>

#include "server/providers/docker.h"

#include "server/rpc/services/internal.h"
#include "workspace/v1/providers.pb-c.h"

static void list_providers(struct ws_call *call, const ProtobufCMessage *req)
{
    Workspace__V1__ListProvidersResponse resp = WORKSPACE__V1__LIST_PROVIDERS_RESPONSE__INIT;
    Workspace__V1__ProviderInfo infos[WS_PROVIDER_COUNT];
    Workspace__V1__ProviderInfo *ptrs[WS_PROVIDER_COUNT];
    struct ws_probe probes[WS_PROVIDER_COUNT];
    char *caps[WS_PROVIDER_COUNT][2];
    char api[16] = "";
    struct ws_services *s = ws_call_method_data(call);
    /* The caller's policy as it is now: one snapshot for the answer. */
    struct ws_policy_set *pset = ws_registry_policy(s->reg);
    const char *tenant = ws_call_tenant(call);
    const struct ws_policy *pol =
        ws_policy_for(pset, tenant && tenant[0] ? tenant : WS_TENANT_DEFAULT);
    Workspace__V1__Policy policy;
    char *policy_providers[WS_PROVIDER_COUNT];

    (void)req;
    for (size_t i = 0; i < WS_PROVIDER_COUNT; i++) {
        const struct ws_provider *p = ws_provider_get((enum ws_provider_kind)i);
        Workspace__V1__ProviderInfo *info = &infos[i];
        size_t nc = 0;

        workspace__v1__provider_info__init(info);
        /* A provider the operator left out is not probed: it is not
         * available whatever its backend would say. */
        if (!ws_registry_provider_enabled(s->reg, p->kind)) {
            probes[i] = (struct ws_probe){.available = false};
            snprintf(probes[i].reason, sizeof(probes[i].reason),
                     "PROVIDER_DISABLED: not enabled on this server");
        } else if (!(pol->providers & 1u << p->kind)) {
            /* Nor one the caller's policy leaves out: an Open of it would
             * be PERMISSION_DENIED POLICY. */
            probes[i] = (struct ws_probe){.available = false};
            snprintf(probes[i].reason, sizeof(probes[i].reason),
                     "POLICY: not allowed for this tenant");
        } else {
            p->probe(&probes[i]);
        }
        info->kind = (char *)p->name;
        info->available = probes[i].available;
        info->reason = probes[i].reason;
        info->isolation = (char *)p->isolation;
        if (p->kind == WS_PROVIDER_DOCKER && info->available) {
            struct ws_diag d = {0};

            /* The daemon answers, but Open needs our programs and an API
             * version we speak too. */
            if (!s->docker || !ws_docker_rt_init_path() || !ws_docker_rt_relay_path()) {
                info->available = false;
                snprintf(probes[i].reason, sizeof(probes[i].reason),
                         "the server's Docker programs (%s, %s) are missing", WS_DOCKER_INIT_NAME,
                         WS_DOCKER_RELAY_NAME);
            } else if (ws_docker_rt_ping(s->docker, api, sizeof(api), &d) < 0) {
                info->available = false;
                snprintf(probes[i].reason, sizeof(probes[i].reason), "%s", d.message);
            }
            info->api_version = api;
        }
        if (p->caps & WS_CAP_FS)
            caps[i][nc++] = "fs";
        if (p->caps & WS_CAP_SHELL)
            caps[i][nc++] = "shell";
        info->capabilities = caps[i];
        info->n_capabilities = nc;
        ptrs[i] = info;
    }
    resp.providers = ptrs;
    resp.n_providers = WS_PROVIDER_COUNT;
    ws_policy_to_proto(pol, ws_registry_providers_enabled(s->reg), &policy, policy_providers);
    policy.tenant = (char *)(tenant && tenant[0] ? tenant : WS_TENANT_DEFAULT);
    resp.policy = &policy;
    ws_call_finish(call, &resp.base);
    ws_policy_set_unref(pset);
}

size_t ws_services_providers(struct ws_services *s, struct ws_rpc_method *out)
{
    out[0] = (struct ws_rpc_method){
        .path = "/workspace.v1.Providers/ListProviders",
        .kind = WS_RPC_UNARY,
        .request = &workspace__v1__list_providers_request__descriptor,
        .on_start = list_providers,
        .method_data = s,
    };
    return 1;
}
