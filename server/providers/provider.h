/* The provider table: one entry per kind, the same shape for all four.
 *
 * A provider says what it can do (capabilities, isolation), whether its
 * backend is usable right now (probe, always live, never cached on
 * failure), and how to attach storage to a workspace. Capabilities a
 * provider lacks are absent from `caps`; the registry answers them with
 * CAPABILITY_MISSING. Execution entries join this table with the exec
 * layer.
 *
 * Providers never see gRPC types.
 */
#ifndef WS_PROVIDERS_PROVIDER_H
#define WS_PROVIDERS_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/base/errors.h"
#include "server/vfs/vfs.h"

enum ws_provider_kind {
    WS_PROVIDER_MEMORY = 0,
    WS_PROVIDER_LOCAL_BASH,
    WS_PROVIDER_LOCAL_SANDBOX,
    WS_PROVIDER_DOCKER,
    WS_PROVIDER_COUNT,
};

enum {
    WS_CAP_FS = 1u << 0,
    WS_CAP_SHELL = 1u << 1,
};

#define WS_PROBE_REASON_MAX 256

struct ws_probe {
    bool available;
    /* Why not, for humans; never a host path of the server. */
    char reason[WS_PROBE_REASON_MAX];
    /* The failure may clear by itself (a daemon restarting). */
    bool transient;
};

struct ws_provider {
    enum ws_provider_kind kind;
    /* "memory", "local-bash", "local-sandbox", "docker". */
    const char *name;
    /* "process", "none", "namespaces+seccomp", "container". */
    const char *isolation;
    unsigned caps;
    /* Storage is a host directory that survives a server restart. */
    bool on_disk;
    /* Fills *ret with the backend's availability, probed now. */
    void (*probe)(struct ws_probe *ret);
};

/* The table entry for a kind, or NULL. */
const struct ws_provider *ws_provider_get(enum ws_provider_kind kind);
/* By name ("local-bash"), or NULL. */
const struct ws_provider *ws_provider_by_name(const char *name);

/* Bounds on storage the server holds itself (the memory provider). */
struct ws_storage_limits {
    uint64_t memory_max_bytes; /* 0: the memory provider's default */
};

/* Storage of a new or re-attached workspace: the in-process tree for
 * memory, otherwise the confined view of `dir_fd` (an open workspace
 * directory, not consumed). */
int ws_provider_attach_storage(const struct ws_provider *p, int dir_fd,
                               const struct ws_storage_limits *limits, struct ws_vfs **ret_fs);

#endif
