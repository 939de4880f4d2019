/* Providers: one table of behaviour per kind (struct ws_provider_ops, one
 * file each: memory_ops.c, local_bash_ops.c, local_sandbox_ops.c,
 * docker_ops.c) and the instance a server holds of it (struct ws_provider:
 * the table and its runtime).
 *
 * The layers above never ask which provider they hold: they call the
 * table's entries, the way curl's core calls a connection filter's
 * `struct Curl_cftype`. A NULL entry means the provider lacks that
 * behaviour, and each entry below says what the caller does then; a
 * capability a provider lacks is answered with CAPABILITY_MISSING.
 *
 * Providers never see gRPC types (protobuf-c messages they do), nor the
 * policy or the registry: what those decide reaches them as data.
 *
 * Thread safety: the tables are constant; every entry may be called from
 * any handler thread, and the runtimes lock what they share.
 */
#ifndef WS_PROVIDERS_PROVIDER_H
#define WS_PROVIDERS_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "server/base/errors.h"
#include "server/vfs/vfs.h"
#include "workspace/v1/workspaces.pb-c.h"
#include "workspaced/internal/v1/record.pb-c.h"

enum ws_provider_kind {
    WS_PROVIDER_MEMORY = 0,
    WS_PROVIDER_LOCAL_BASH,
    WS_PROVIDER_LOCAL_SANDBOX,
    WS_PROVIDER_DOCKER,
    WS_PROVIDER_COUNT,
};

/* How many providers a server has, for arrays of one entry each. */
#define WS_PROVIDERS_MAX WS_PROVIDER_COUNT

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

/* Bounds on storage the server holds itself (the memory provider). */
struct ws_storage_limits {
    uint64_t memory_max_bytes; /* 0: the memory provider's default */
};

typedef Workspaced__Internal__V1__WorkspaceRecord ws_record;
struct ws_proc_wrapper; /* server/exec/process.h */

/* What the server gives every provider's runtime at start. Strings are
 * copied by the runtimes that keep them. */
struct ws_provider_config {
    /* local-sandbox: where the /etc snapshot is kept (made 0700); NULL:
     * none (each /etc entry is then bound on its own, slower). */
    const char *sandbox_dir;
    /* docker: names and labels this server's containers, stable across
     * restarts; NULL: no container runtime (docker Opens fail). */
    const char *server_id;
    /* docker: the image of an Open that names none (a valid reference,
     * else the runtime is not made); NULL: such an Open is malformed. */
    const char *docker_default_image;
    /* docker: the uid and gid the in-container init takes while a command
     * of a workspace with a uid runs, one no workspace has (the first of
     * the workspace uid range). 0: the default range's first, 524288
     * (WS_DOCKER_HELPER_UID_DEFAULT). */
    uid_t helper_uid;
    /* local-sandbox: the first uid of the workspace uid range when
     * workspace uids are on (every workspace's uid is above it), else 0. */
    uid_t uid_range_first;
    /* docker: a directory for the containers' /etc/passwd and /etc/group
     * (ws_docker_identity); NULL: the image's own. */
    const char *accounts_dir;
    /* docker: where the in-box agents' channel directories are made;
     * NULL: no agent mode. */
    const char *channels_dir;
};

/* One Open being made; valid for the duration of the Open only. */
struct ws_provider_open {
    /* As check() returned it: defaults filled in. */
    const Workspace__V1__OpenRequest *req;
    /* The tenant's policy allows image pulls. The answer, not the policy:
     * providers do not depend on it. */
    bool pulls_allowed;
    /* Canonical server directories no bind may touch (state, root). */
    const char *const *own;
    size_t n_own;
    /* The workspace will have a host uid of its own (registry.h). */
    bool own_uid;
    /* The tenant's policy's address-space-mb (local-bash's RLIMIT_AS
     * when the request asks none); 0: none. */
    uint32_t address_space_mb;
};

/* A provider's view of one workspace, handed to every per-workspace
 * entry; valid for the duration of the call. */
struct ws_provider_ws {
    const char *id;
    /* Host path of its directory; NULL when the provider is not on disk. */
    const char *dir;
    /* The persisted record (the provider's config is its oneof). */
    const ws_record *rec;
    /* Non-NULL only for the attach inside an Open. */
    const struct ws_provider_open *open;
};

/* How the commands of a provider see the world: data the exec layer and
 * the shell guard read, not code. */
struct ws_provider_exec_env {
    /* The children's PATH and the guard's lookup path; NULL: the
     * server's exec path. */
    const char *path;
    /* HOME and default directory inside the box; NULL: a home of its own
     * on the host. */
    const char *home;
    /* Runs on the host with the server's uid: a home and runtime dir of
     * its own, and the guard's narrower environment. */
    bool on_host;
    /* What the server spawns for a command (the command itself on the
     * host, or the box around it) runs as the workspace's uid when it has
     * one, with no capability: local-bash, and local-sandbox (whose user
     * namespace then maps that uid alone). A provider whose spawn talks to
     * a daemon on the server's behalf (docker's relay) leaves it false and
     * switches the uid inside its box. */
    bool spawn_as_uid;
    /* argv[0] is looked up in the box's own file system, not the host's. */
    bool foreign_root;
};

/* One command the shell guard has vetted, for exec_wrap. */
struct ws_provider_cmd {
    const char *const *argv;
    const char *const *envp;
    const char *cwd; /* workspace-relative, "." for the root */
    bool pty;
    bool stdin_pipe;
    uint64_t timeout_ms; /* the server's deadline, 0: none */
    /* Who what the exec layer spawns runs as, with its limits: also what
     * a box the provider starts itself (an agent's) is given. */
    const struct ws_run_as *run_as;
};

/* Storage check() and record() fill instead of allocating: the caller
 * keeps one per call (on its stack) as long as it uses what they return. */
union ws_provider_scratch {
    struct {
        Workspace__V1__OpenRequest req;
        Workspace__V1__DockerConfig docker;
    } open;
    Workspace__V1__DockerConfig docker;
    Workspace__V1__LocalBashConfig local_bash;
};

struct ws_run_as;

/* One runtime of a provider's, as ListProviders reports it. */
struct ws_provider_runtime {
    const char *name; /* static */
    bool usable;
    char reason[WS_PROBE_REASON_MAX]; /* why not; "" when usable */
};
/* The most runtimes a provider lists. */
#define WS_RUNTIMES_LISTED_MAX 4

struct ws_provider_ops {
    enum ws_provider_kind kind;
    /* "docker": the metrics label, the record's field, ListProviders. */
    const char *name;
    /* "process", "none", "namespaces+seccomp", "container". */
    const char *isolation;
    /* WS_CAP_* it can offer; WS_CAP_SHELL exactly when exec_env is set. */
    unsigned caps;
    /* Storage is <root>/<id>, a directory that survives a restart. */
    bool on_disk;
    /* Around the spawn of each of w's commands, on the spawning thread:
     * spawn_limits adds the caps of the workspace's config to *ra
     * (rlimits; the cgroup v2 directory the command starts in; struct
     * ws_run_as in posix/spawn.h, whose identity is already set when the
     * command runs as the workspace's own uid) and, on cgroup v1, moves
     * the thread into the workspace's groups. Its *ret_token goes to
     * spawn_done after the spawn, whether it worked or not (NULL: nothing
     * to undo). An error (-errno, a diagnosis in *d) refuses the command:
     * a cap the Open granted that cannot be placed now (the host's
     * cgroups changed). NULL: no caps of its own. */
    int (*spawn_limits)(void *rt, const struct ws_provider_ws *w, struct ws_run_as *ra,
                        void **ret_token, struct ws_diag *d);
    void (*spawn_done)(void *rt, void *token);
    /* Its commands run as the workspace's own uid (registry.h), so its
     * storage is given to that uid (ws_provider_uid_owns_storage). Left
     * false by a box whose commands still run as a root without
     * capabilities: that root could not enter a directory of another uid.
     * Commands on the host (exec_env->on_host) count as true. */
    bool commands_run_as_uid;
    /* The WORKSPACE__V1__OPEN_REQUEST__PROVIDER_* it answers, and the
     * WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__CONFIG_* it records. */
    int open_case;
    int record_case;

    /* The runtime: one per server, made before serving. NULL rt_new: the
     * provider keeps none, and rt is NULL in every call (as it is in the
     * built-in set). rt_free accepts NULL. */
    int (*rt_new)(const struct ws_provider_config *cfg, void **ret_rt);
    void (*rt_free)(void *rt);
    /* At start, before serving: removes what an earlier run of this
     * server left (docker: containers with its label). Returns how many,
     * or -WS_EFAILED with d set. NULL: nothing to do. */
    int (*reconcile)(void *rt, struct ws_diag *d);

    /* Validates the Open's config and fills in defaults (docker: the
     * default image): *ret_req is `req` or a copy in *scratch. Errors
     * -WS_EMALFORMED / -WS_ELIMIT with metadata "field". NULL: nothing to
     * check, the request stands. */
    int (*check)(void *rt, const Workspace__V1__OpenRequest *req, const char *const *own,
                 size_t n_own, union ws_provider_scratch *scratch,
                 const Workspace__V1__OpenRequest **ret_req, struct ws_diag *d);
    /* The image the policy check sees (docker). NULL: none. */
    const char *(*policy_image)(const Workspace__V1__OpenRequest *req);
    /* Checks of this Open beyond the backend's probe (local-sandbox with
     * network: its user-mode network). -WS_EFAILED with d. NULL: none. */
    int (*open_check)(void *rt, const struct ws_provider_open *o, struct ws_diag *d);
    /* Sets rec->config_case and its member, pointing into o->req or
     * *scratch (docker: the pids default, PULL_NEVER without pulls).
     * Required. */
    int (*record)(const struct ws_provider_open *o, ws_record *rec,
                  union ws_provider_scratch *scratch);
    /* The network of a workspace. NULL: NETWORK_OFF. */
    Workspace__V1__Network (*network)(const ws_record *rec);

    /* Fills *ret with whether the backend is usable, probed now (never
     * cached on failure). NULL: always available (ws_provider_probe). */
    void (*probe)(void *rt, struct ws_probe *ret);
    /* ListProviders' second look after a successful probe: may turn
     * io->available off with a reason (docker: its programs missing, the
     * daemon's API refused) and fills api_version. NULL: nothing more. */
    void (*list_info)(void *rt, struct ws_probe *io, char *api_version, size_t size);
    /* ListProviders: the runtimes an Open may name and whether each is
     * usable now, at most `max` into out; how many. NULL: none. */
    size_t (*list_runtimes)(void *rt, struct ws_provider_runtime *out, size_t max);

    /* The runtime of one workspace: made at Open (fresh) and at a
     * re-attach (!fresh: keep what is right, make again what is missing);
     * a failure fails that Open or call. Blocking: call with no registry
     * lock held. NULL: nothing to attach. */
    int (*attach)(void *rt, const struct ws_provider_ws *w, bool fresh, struct ws_diag *d);
    /* Removes it at Close, after the commands ended (a failure keeps the
     * workspace open) and, best effort with d NULL, at eviction. Blocking.
     * NULL: nothing. */
    int (*detach)(void *rt, const struct ws_provider_ws *w, struct ws_diag *d);
    /* The workspace is gone (closed or evicted): drops what the runtime
     * remembers of it. Never blocks. NULL: nothing. */
    void (*forget)(void *rt, const char *id);

    /* The workspace's storage: the in-process tree, or the confined view
     * of dir_fd (an open workspace directory, not consumed). Required. */
    int (*fs_open)(void *rt, int dir_fd, const struct ws_storage_limits *limits,
                   struct ws_vfs **ret_fs);

    /* How its commands run. NULL: no shell (the caller answers
     * CAPABILITY_MISSING). */
    const struct ws_provider_exec_env *exec_env;
    /* Fills *ret with what is spawned in the command's place (bwrap and
     * init, the docker relay). NULL: the command is spawned as it is on
     * the host. Errors are final (-WS_EFAILED with d, -ENOMEM, ...). */
    int (*exec_wrap)(void *rt, const struct ws_provider_ws *w, const struct ws_provider_cmd *c,
                     struct ws_proc_wrapper *ret, struct ws_diag *d);
    /* Frees a wrapper never handed to the exec layer. Set with exec_wrap. */
    void (*exec_discard)(struct ws_proc_wrapper *w);

    /* Describe's provider section: sets resp->sandbox or resp->container
     * to storage returned in *ret_keep (NULL when it set nothing), which
     * the caller frees with describe_free once the response is sent.
     * Returns 0 or -ENOMEM (nothing set). NULL: no section. */
    int (*describe)(void *rt, const struct ws_provider_ws *w, Workspace__V1__DescribeResponse *resp,
                    void **ret_keep);
    /* Accepts NULL. Set with describe. */
    void (*describe_free)(void *keep);
};

/* The instance: a table and its runtime (NULL when the provider keeps
 * none, or in the built-in set). */
struct ws_provider {
    const struct ws_provider_ops *ops;
    void *rt;
};

/* ---- instances (target :providers; the engines link only :provider) ---- */

/* The built-in set's entry for a kind, or NULL. */
const struct ws_provider *ws_provider_get(enum ws_provider_kind kind);
/* By name ("local-bash"), in the built-in set, or NULL. */
const struct ws_provider *ws_provider_by_name(const char *name);

/* p->ops->probe, or available when the provider has none. */
void ws_provider_probe(const struct ws_provider *p, struct ws_probe *ret);

/* Whether the storage of p's workspaces belongs to the workspace's uid
 * (the directory, and what the API creates in it): only where p's
 * commands can use files of that uid. Those that run as it do
 * (commands_run_as_uid), and so do those that run on the host (with the
 * server's capabilities where they do not run as the uid yet); a box whose
 * commands run as a root without capabilities could not enter a 0700
 * directory of another uid, so its storage stays the server's. */
bool ws_provider_uid_owns_storage(const struct ws_provider *p);

/* Storage of a new or re-attached workspace: p->ops->fs_open. */
int ws_provider_attach_storage(const struct ws_provider *p, int dir_fd,
                               const struct ws_storage_limits *limits, struct ws_vfs **ret_fs);
/* Same, for a provider whose storage belongs to the workspace's uid
 * (ws_provider_uid_owns_storage, else -EINVAL): the host directory dir_fd
 * (not consumed), where every file and directory the API creates is given
 * to uid:gid. */
int ws_provider_attach_owned_storage(const struct ws_provider *p, int dir_fd, uid_t uid, gid_t gid,
                                     struct ws_vfs **ret_fs);

/* ---- the set: one instance per kind ----
 *
 * Every function taking a const set accepts NULL for the built-in set. */
struct ws_providers;

/* Makes each runtime in kind order. Returns 0, or the first rt_new's
 * error with whatever was made freed again. */
int ws_providers_new(const struct ws_provider_config *cfg, struct ws_providers **ret);
/* Frees the runtimes in reverse kind order. Accepts NULL and a set whose
 * making stopped half-way. */
void ws_providers_free(struct ws_providers *ps);
/* The set with no runtime at all (units that run no commands). */
const struct ws_providers *ws_providers_builtin(void);
const struct ws_provider *ws_providers_get(const struct ws_providers *ps,
                                           enum ws_provider_kind kind);
/* By name ("local-bash"), or NULL. */
const struct ws_provider *ws_providers_by_name(const struct ws_providers *ps, const char *name);
/* The provider whose config the request carries, or NULL (no oneof). */
const struct ws_provider *ws_providers_of_request(const struct ws_providers *ps,
                                                  const Workspace__V1__OpenRequest *req);
/* Picks the provider of `req` and runs its check: exactly one provider
 * config (else -WS_EMALFORMED, metadata field=provider), then the
 * provider's own checks. *ret_req is the request with defaults filled in
 * (pointing into *scratch or at req). */
int ws_providers_check(const struct ws_providers *ps, const Workspace__V1__OpenRequest *req,
                       const char *const *own, size_t n_own, union ws_provider_scratch *scratch,
                       struct ws_diag *d, const Workspace__V1__OpenRequest **ret_req,
                       const struct ws_provider **ret);

/* ---- names only, no tables (kind_name.c, in :provider) ---- */

/* "docker", or NULL for a kind out of range. */
const char *ws_provider_kind_name(enum ws_provider_kind kind);
/* The kind named `name`, or -1. */
int ws_provider_kind_by_name(const char *name);
/* The kind whose config the request carries, or -1 (no oneof). */
int ws_provider_kind_of_request(const Workspace__V1__OpenRequest *req);

#endif
