/* The local-sandbox provider's bounds and defaults, for the Open check,
 * the commands' caps and Describe. */
#ifndef WS_PROVIDERS_LOCAL_SANDBOX_OPS_H
#define WS_PROVIDERS_LOCAL_SANDBOX_OPS_H

#include "server/posix/limits.h"
#include "server/providers/sandbox.h"
#include "workspace/v1/workspaces.pb-c.h"

/* Bounds on a sandbox's caps (0 always means the default). At most
 * WS_SANDBOX_BINDS_MAX extra binds of each kind. */
#define WS_SANDBOX_PIDS_MIN      8
#define WS_SANDBOX_PIDS_MAX      (1u << 22)
#define WS_SANDBOX_MEMORY_MB_MIN 16
#define WS_SANDBOX_MEMORY_MB_MAX (1u << 22)
#define WS_SANDBOX_CPUS_MAX      1024

/* The caps of a workspace whose config sets none. */
#define WS_SANDBOX_DEFAULT_PIDS      512
#define WS_SANDBOX_DEFAULT_MEMORY_MB 2048

/* Where the sandbox shows a bind of host path P: at this prefix + P, never
 * over its own /proc, /dev, /tmp or /workspace. */
#define WS_SANDBOX_BIND_PREFIX "/mnt"

/* The caps of a workspace's commands (c NULL: all defaults): pids and
 * memory always, cpu only when the config sets it. */
void ws_local_sandbox_limits(const Workspace__V1__LocalSandboxConfig *c, struct ws_limits *ret);
/* Whether the workspace's commands start through an agent in one box. */
bool ws_local_sandbox_agent_mode(const Workspace__V1__LocalSandboxConfig *c);

#endif
