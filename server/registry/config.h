/* Checks of the provider config in an Open request: the providers' own
 * (each provider's ops->check), picked by the request's oneof. */
#ifndef WS_REGISTRY_CONFIG_H
#define WS_REGISTRY_CONFIG_H

#include <stddef.h>

#include "server/base/errors.h"
#include "server/providers/local_sandbox_ops.h"
#include "server/providers/provider.h"
#include "workspace/v1/workspaces.pb-c.h"

/* The local-sandbox bounds under their older names. */
#define WS_CONFIG_BINDS_MAX     WS_SANDBOX_BINDS_MAX
#define WS_CONFIG_PIDS_MIN      WS_SANDBOX_PIDS_MIN
#define WS_CONFIG_PIDS_MAX      WS_SANDBOX_PIDS_MAX
#define WS_CONFIG_MEMORY_MB_MIN WS_SANDBOX_MEMORY_MB_MIN
#define WS_CONFIG_MEMORY_MB_MAX WS_SANDBOX_MEMORY_MB_MAX
#define WS_CONFIG_CPUS_MAX      WS_SANDBOX_CPUS_MAX

/* Picks the provider of `req` from the built-in set and validates its
 * config (ws_providers_check): exactly one provider (else -WS_EMALFORMED,
 * metadata "field"), a docker image and user that are well-formed,
 * local-sandbox bind paths that are existing, canonical, absolute and do
 * not overlap any of the `own` canonical paths (the server's state
 * directory and workspace root), at most WS_SANDBOX_BINDS_MAX of each
 * kind, and caps within the local-sandbox bounds (-WS_ELIMIT, metadata
 * "field"). No default is filled in: the built-in set has none. */
int ws_config_check(const Workspace__V1__OpenRequest *req, const char *const *own, size_t n_own,
                    struct ws_diag *d, const struct ws_provider **ret);

#endif
