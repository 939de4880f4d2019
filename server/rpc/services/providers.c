/* Providers.ListProviders: every kind, its capabilities and a live probe,
 * and the caller's policy. The probes may ask a container daemon: the
 * call runs on the pool's DAEMON lane. */
#include <stdio.h>
#include <stdlib.h>

#include "server/base/macros.h"
#include "server/base/version.h"
#include "server/rpc/services/internal.h"
#include "workspace/v1/providers.pb-c.h"

static void list_providers_run(struct ws_call *call)
{
    Workspace__V1__ListProvidersResponse resp = WORKSPACE__V1__LIST_PROVIDERS_RESPONSE__INIT;
    Workspace__V1__ServerInfo server = WORKSPACE__V1__SERVER_INFO__INIT;
    Workspace__V1__ProviderInfo infos[WS_PROVIDERS_MAX];
    Workspace__V1__ProviderInfo *ptrs[WS_PROVIDERS_MAX];
    struct ws_probe probes[WS_PROVIDERS_MAX];
    char *caps[WS_PROVIDERS_MAX][2];
    char api[WS_PROVIDERS_MAX][16] = {""};
    struct ws_provider_runtime rts[WS_PROVIDERS_MAX][WS_RUNTIMES_LISTED_MAX];
    Workspace__V1__RuntimeInfo rinfo[WS_PROVIDERS_MAX][WS_RUNTIMES_LISTED_MAX];
    Workspace__V1__RuntimeInfo *rptrs[WS_PROVIDERS_MAX][WS_RUNTIMES_LISTED_MAX];
    struct ws_services *s = ws_call_method_data(call);
    /* The caller's policy as it is now: one snapshot for the answer. */
    struct ws_policy_set *pset = ws_registry_policy(s->reg);
    const char *tenant = ws_call_tenant(call);
    const struct ws_policy *pol =
        ws_policy_for(pset, tenant && tenant[0] ? tenant : WS_TENANT_DEFAULT);
    Workspace__V1__Policy policy;
    char *policy_providers[WS_PROVIDERS_MAX];
    const struct ws_provider *p;
    size_t n = 0;

    /* In kind order, as ws_providers_get numbers them. */
    for (; n < WS_PROVIDERS_MAX && (p = ws_providers_get(s->providers, (enum ws_provider_kind)n));
         n++) {
        const struct ws_provider_ops *ops = p->ops;
        Workspace__V1__ProviderInfo *info = &infos[n];
        size_t nc = 0;

        workspace__v1__provider_info__init(info);
        /* A provider the operator left out is not probed: it is not
         * available whatever its backend would say. */
        if (!ws_registry_provider_enabled(s->reg, ops->kind)) {
            probes[n] = (struct ws_probe){.available = false};
            snprintf(probes[n].reason, sizeof(probes[n].reason),
                     "PROVIDER_DISABLED: not enabled on this server");
        } else if (!(pol->providers & 1u << ops->kind)) {
            /* Nor one the caller's policy leaves out: an Open of it would
             * be PERMISSION_DENIED POLICY. */
            probes[n] = (struct ws_probe){.available = false};
            snprintf(probes[n].reason, sizeof(probes[n].reason),
                     "POLICY: not allowed for this tenant");
        } else {
            ws_provider_probe(p, &probes[n]);
            /* A backend that answers may still be unusable to this server
             * (its own programs missing); the provider says, and names
             * the version it speaks. */
            if (probes[n].available && ops->list_info) {
                ops->list_info(p->rt, &probes[n], api[n], sizeof(api[n]));
                info->api_version = api[n];
            }
            /* Which runtimes an Open may name, asked of the backend now. */
            if (probes[n].available && ops->list_runtimes) {
                size_t nr = ops->list_runtimes(p->rt, rts[n], WS_RUNTIMES_LISTED_MAX);
                for (size_t k = 0; k < nr; k++) {
                    workspace__v1__runtime_info__init(&rinfo[n][k]);
                    rinfo[n][k].name = (char *)rts[n][k].name;
                    rinfo[n][k].usable = rts[n][k].usable;
                    rinfo[n][k].reason = rts[n][k].reason;
                    rptrs[n][k] = &rinfo[n][k];
                }
                info->runtimes = rptrs[n];
                info->n_runtimes = nr;
            }
        }
        info->kind = (char *)ops->name;
        info->available = probes[n].available;
        info->reason = probes[n].reason;
        info->isolation = (char *)ops->isolation;
        if (ops->caps & WS_CAP_FS)
            caps[n][nc++] = "fs";
        if (ops->caps & WS_CAP_SHELL)
            caps[n][nc++] = "shell";
        info->capabilities = caps[n];
        info->n_capabilities = nc;
        ptrs[n] = info;
    }
    resp.providers = ptrs;
    resp.n_providers = n;
    ws_policy_to_proto(pol, ws_registry_providers_enabled(s->reg), &policy, policy_providers);
    policy.tenant = (char *)(tenant && tenant[0] ? tenant : WS_TENANT_DEFAULT);
    resp.policy = &policy;
    server.version = (char *)WS_VERSION;
    resp.server = &server;
    ws_call_finish(call, &resp.base);
    ws_policy_set_unref(pset);
}

static void list_providers(struct ws_call *call, const ProtobufCMessage *req)
{
    struct ws_services_unary *u = ws_services_unary_new(call, req);

    if (u)
        ws_services_offload(call, &u->job, WS_SERVICES_LANE_DAEMON, list_providers_run, NULL);
}

size_t ws_services_providers(struct ws_services *s, struct ws_rpc_method *out)
{
    static const struct ws_rpc_method methods[] = {
        WS_SERVICES_OFFLOADED("/workspace.v1.Providers/ListProviders",
                              &workspace__v1__list_providers_request__descriptor, list_providers),
    };

    return ws_services_add_methods(s, methods, WS_ELEMENTSOF(methods), out);
}
