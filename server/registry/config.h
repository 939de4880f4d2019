/* Checks of the provider config in an Open request. */
#ifndef WS_REGISTRY_CONFIG_H
#define WS_REGISTRY_CONFIG_H

#include <stddef.h>

#include "server/base/errors.h"
#include "server/providers/provider.h"
#include "workspace/v1/workspaces.pb-c.h"

/* Most extra binds of each kind (read-write, read-only) one sandbox has. */
#define WS_CONFIG_BINDS_MAX 32
/* Bounds on a sandbox's caps (0 always means the default). */
#define WS_CONFIG_PIDS_MIN      8
#define WS_CONFIG_PIDS_MAX      (1u << 22)
#define WS_CONFIG_MEMORY_MB_MIN 16
#define WS_CONFIG_MEMORY_MB_MAX (1u << 22)
#define WS_CONFIG_CPUS_MAX      1024

/* Picks the provider of `req` and validates its config: exactly one
 * provider (else -WS_EMALFORMED, metadata "field"), a docker image and user
 * that are well-formed, local-sandbox bind paths that are existing,
 * canonical, absolute and do not overlap any of the `own` canonical paths
 * (the server's state directory and workspace root), at most
 * WS_CONFIG_BINDS_MAX of each kind, and caps within the bounds above
 * (-WS_ELIMIT, metadata "field"). */
int ws_config_check(const Workspace__V1__OpenRequest *req, const char *const *own, size_t n_own,
                    struct ws_diag *d, const struct ws_provider **ret);

#endif
