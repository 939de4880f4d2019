/* Lock order: ws->measure_lock (a usage walk), then r->lock, then ws->lock; r->policy_lock alone.
 * Locks inside providers and storage (docker rt->lock, sandbox sb->lock, memfs) are leaves,
 * as is the request-id table's (requests.h).
 * No provider call, close hook or daemon call runs under r->lock, ws->lock or r->policy_lock.
 *
 * The workspace registry: open / resolve / close / describe / list, the
 * lifecycle states, signed refs, persistence in the state directory and the
 * cap on open workspaces.
 *
 * State directory layout (created 0700 by the caller):
 *   ref.key            HMAC key for refs (0600)
 *   records/<id>       the WorkspaceRecord of every open on-disk workspace
 *   snapshots/         the snapshot store (snapshots.h)
 * Workspace root (default <state>/workspaces, 0700): one 0700 directory per
 * on-disk workspace, named by its id. A record without a directory is an
 * evicted workspace; a directory without a record is garbage from an
 * interrupted Close and is removed at start.
 *
 * Workspace uids (uids.h): with them on, every on-disk workspace has a host
 * uid of its own (gid the same number), allocated at Open, kept in its
 * record and claimed again at start; a record made before (uid 0) or under
 * another range gets a new one at its first attach. Where the provider's
 * commands can use files of that uid (ws_provider_uid_owns_storage), the
 * workspace's directory and everything the API creates in it are that
 * uid's; a tree not owned by it at attach is given to it by a walk that
 * never follows a symlink. At Close, after the commands ended, every
 * process still running as the uid is killed, and the uid goes back to
 * the range. Since commands of those uids must reach their directories by
 * path, the state directory becomes searchable by others (0711: its
 * entries are private) and the workspace root 0711 (x only: no listing;
 * ids are 128 bits of randomness), and every directory above them must
 * already be searchable by others: a state directory under a 0700 home
 * (root's /root) is refused at start.
 *
 * After a restart every record is known in state CONFIGURED; the first
 * call on it (or Resolve of its ref) re-attaches it, probing the provider's
 * backend live. Memory workspaces die with the process.
 *
 * An attach (storage and runtime: a Docker container may take minutes)
 * runs with no lock held, in the call that started it, with the workspace
 * in state OPENING. Meanwhile Describe and List report OPENING at once,
 * and every call that would need it attached, or would close it, fails
 * with -EAGAIN (nothing was done; retry) instead of waiting: a handler
 * thread never waits on another call's daemon. A Resolve that makes the
 * runtime of an OPEN workspace again keeps it OPEN (file and exec calls go
 * on); a second Resolve and a Close get -EAGAIN until it is done.
 *
 * Tenants: every workspace belongs to the tenant that opened it. Every call
 * below that names a workspace (by id or ref) takes the caller's tenant
 * (NULL: WS_TENANT_DEFAULT) and treats another tenant's workspace exactly
 * like one that does not exist, before looking at anything else about it.
 *
 * Thread safety: every function may be called from any thread.
 * Workspaces are reference counted: every ws_registry_* call that returns
 * one returns a new reference, released with ws_workspace_unref.
 */
#ifndef WS_REGISTRY_REGISTRY_H
#define WS_REGISTRY_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/base/errors.h"
#include "server/policy/policy.h"
#include "server/providers/provider.h"
#include "server/registry/snapshots.h"
#include "server/registry/uids.h"
#include "server/vfs/ops.h"
#include "workspace/v1/workspaces.pb-c.h"

#define WS_ID_LEN                 35 /* "ws_" + 32 hex */
#define WS_DEFAULT_MAX_WORKSPACES 256
#define WS_DEFAULT_MAX_FILE_SIZE  (1ull << 30)
/* Memory workspaces live in the server's own memory: each is bounded. */
#define WS_DEFAULT_MEMORY_MAX_BYTES (256ull << 20)
/* Closed ids remembered so a second Close succeeds (oldest forgotten). */
#define WS_CLOSED_IDS_KEPT 4096
/* Longest tenant name, and the tenant of every caller when the server runs
 * without authentication (also the owner of records made before tenants). */
#define WS_TENANT_MAX     64
#define WS_TENANT_DEFAULT "default"

/* Whether workspaces get host uids of their own. */
enum ws_uids_mode {
    /* On where they can be used: the server runs as root and its user
     * namespace maps the range (ws_uids_usable); else off, said once
     * through `say`. */
    WS_UIDS_AUTO = 0,
    /* On, or ws_registry_new refuses to start. */
    WS_UIDS_ON,
    /* Off: every workspace's files are the server's, records keep the
     * uids they have for a later start with uids on. */
    WS_UIDS_OFF,
};

struct ws_registry_config {
    const char *state_dir;
    /* NULL: <state_dir>/workspaces. */
    const char *workspace_root;
    /* Cap on workspaces that are open (or resumable); 0: the default. */
    unsigned max_workspaces;
    /* Default and ceiling of a workspace's max_file_size_bytes; 0: 1 GiB. */
    uint64_t max_file_size;
    /* Bytes one memory workspace may hold; 0: 256 MiB. */
    uint64_t memory_max_bytes;
    /* Per-tenant quotas, 0: none. Open workspaces of one tenant, and
     * Opens it may make per minute (a bucket that refills evenly, so a
     * burst of the whole minute's worth is allowed). Exceeding either is
     * -WS_EQUOTA with metadata quota=tenant_open_workspaces or
     * quota=tenant_opens_per_minute. */
    unsigned tenant_max_workspaces;
    unsigned tenant_opens_per_minute;
    /* Per-tenant quota on the bytes held in all of one tenant's
     * workspaces (usage.h says what counts), 0: none. See
     * ws_registry_usage_charge. */
    uint64_t tenant_max_bytes;
    /* Per-tenant quota on what all of one tenant's memory workspaces hold,
     * entries and names counted (server/registry/memquota.h), 0: none.
     * Past it a file operation is -WS_EQUOTA; ws_registry_memory_explain
     * gives the metadata (quota=tenant_memory_bytes, limit, used). */
    uint64_t tenant_memory_bytes;
    /* Providers an Open may name, 1 << WS_PROVIDER_*; 0: all. Opening
     * another is -WS_EDISABLED (metadata "provider"); workspaces that
     * exist stay usable until closed. */
    unsigned providers_enabled;
    /* The operator's policy (finished; the registry takes its own
     * reference). NULL: the default policy with nothing configured. */
    struct ws_policy_set *policy;
    /* Workspace uids (see above). The range ({0, 0}: WS_UIDS_DEFAULT_FIRST
     * to WS_UIDS_DEFAULT_LAST) is checked at start unless the mode is off:
     * one that holds an account, a group or one of `peer_uids` (the
     * [peers] map's uids) refuses the start in auto mode too, since the
     * range must then be fixed. An exhausted range is -WS_EQUOTA at Open
     * (metadata quota=workspace_uids). */
    enum ws_uids_mode uids_mode;
    struct ws_uid_range uid_range;
    const uid_t *peer_uids;
    size_t n_peer_uids;
    /* Without it a server that runs as root refuses to start when
     * workspace uids are off or cannot be used: its commands would run as
     * root. */
    bool allow_root_commands;
    /* Where the host's uid leases are (uids.h); NULL: WS_UIDS_LEASE_DIR.
     * Without an operator's range (uid_range {0, 0}) the server takes a
     * slot of WS_UIDS_SLOT uids of the default range, and keeps it in its
     * state directory for the next start. */
    const char *uid_lease_dir;
    /* How the registry tells the operator something: why ws_registry_new
     * refused to start (`error` true; it then returns -EINVAL or -errno),
     * why workspace uids are off in auto mode, processes of a closed
     * workspace's uid that could not be ended. NULL: a line on standard
     * error. */
    void (*say)(void *ud, bool error, const char *message);
    void *say_ud;
    /* Lifetimes (OpenRequest.lifetime): no workspace lives longer than
     * max_lifetime_ms from its Open (0: no cap; a workspace that asks no
     * ttl gets it), and one that asks no idle timeout gets
     * default_idle_timeout_ms (0: none). */
    uint64_t max_lifetime_ms;
    uint64_t default_idle_timeout_ms;
    /* Snapshots one tenant may hold; 0: WS_SNAP_DEFAULT_MAX. */
    unsigned max_snapshots;
    /* The host directories an Open's from_path may name or lie under:
     * absolute and canonical (no symlink, "." or ".." in them), checked
     * by the caller; copied. */
    const char *const *source_allow;
    size_t n_source_allow;
};

/* Longest ttl or idle timeout a workspace may ask (ten years), whatever
 * the caps. */
#define WS_LIFETIME_MS_MAX (10ull * 365 * 24 * 3600 * 1000)
/* Limits of a workspace's env (OpenRequest.env). */
#define WS_WORKSPACE_ENV_MAX       64
#define WS_WORKSPACE_ENV_BYTES_MAX (32 * 1024)
/* How often the reaper looks for expired workspaces. */
#define WS_REAPER_TICK_MS 500

enum ws_state {
    WS_STATE_CONFIGURED = 1,
    WS_STATE_OPENING = 2,
    WS_STATE_OPEN = 3,
    WS_STATE_CLOSING = 4,
    WS_STATE_CLOSED = 5,
    WS_STATE_FAILED = 6,
    WS_STATE_EVICTED = 7,
};

struct ws_registry;
struct ws_workspace;

/* Opens the state directory (must exist), loads or creates the ref key,
 * creates the workspace root, loads records, removes leftovers of
 * interrupted closes. */
int ws_registry_new(const struct ws_registry_config *cfg, struct ws_registry **ret);
/* Drops the registry's references; storage stays for the next start.
 * Only once no call is in flight (the RPC server has shut down): an
 * attach in progress uses the registry until it returns. */
void ws_registry_free(struct ws_registry *r);

/* Whether workspaces get uids of their own in this run. */
bool ws_registry_uids_on(const struct ws_registry *r);
/* The helper uid of the range (uids.h), or (uid_t)-1 when uids are off. */
uid_t ws_registry_helper_uid(const struct ws_registry *r);
/* Whether uid is of the workspace uid range in force (false when uids are
 * off): the helper's or a workspace's, never a caller's peer. */
bool ws_registry_uid_in_range(const struct ws_registry *r, uid_t uid);

/* Whether Open may name provider `kind` (struct ws_registry_config's
 * providers_enabled). */
bool ws_registry_provider_enabled(const struct ws_registry *r, enum ws_provider_kind kind);

/* Replaces the policy every later Open is checked against (a reload);
 * takes its own reference to `set` (finished). An Open in flight keeps
 * the set it started with. */
void ws_registry_set_policy(struct ws_registry *r, struct ws_policy_set *set);
/* The policy now, as a new reference (ws_policy_set_unref). */
struct ws_policy_set *ws_registry_policy(struct ws_registry *r);
/* The server-wide provider mask (providers_enabled; 0: all). */
unsigned ws_registry_providers_enabled(const struct ws_registry *r);

/* Besides the provider: lifetime, labels, name, env, secrets and
 * request_id as workspaces.proto documents them. A request_id seen in the
 * window returns that Open's workspace (a new reference, 0) instead of
 * opening another; -WS_EREQUESTID, -EAGAIN (still opening) or
 * -WS_EEVICTED (closed since) otherwise. A name the tenant's open
 * workspaces have is -EEXIST (metadata name, workspace_id).
 * Errors: -WS_EMALFORMED (no provider config, invalid config),
 * -WS_EDISABLED (the provider is not enabled),
 * -WS_EPOLICY (the tenant's policy refuses it: metadata "rule" and the
 * item; a docker Open without pulls allowed is made PULL_NEVER),
 * -WS_ECAPABILITY (metadata "capability"), -WS_ELIMIT, -WS_EFAILED (backend
 * missing; diag->transient), -WS_EQUOTA (metadata "quota"). */
int ws_registry_open(struct ws_registry *r, const char *tenant,
                     const Workspace__V1__OpenRequest *req, struct ws_diag *d,
                     struct ws_workspace **ret);

/* Errors: -WS_EBADREF, -WS_ENOWORKSPACE (a ref of another tenant),
 * -WS_EEVICTED, -WS_EFAILED, -EAGAIN (being attached by another call). */
int ws_registry_resolve(struct ws_registry *r, const char *tenant, const uint8_t *token, size_t len,
                        struct ws_diag *d, struct ws_workspace **ret);

/* The workspace for an id-scoped call, re-attaching it if needed and
 * checking that its storage still exists. `need_caps` (WS_CAP_*) must all
 * be declared, else -WS_ECAPABILITY. Errors: -WS_ENOWORKSPACE (unknown,
 * malformed or closed id), -WS_EEVICTED, -WS_EFAILED, -EAGAIN (being
 * attached by another call). */
int ws_registry_get(struct ws_registry *r, const char *tenant, const char *id, unsigned need_caps,
                    struct ws_diag *d, struct ws_workspace **ret);

/* Workspaces counted against max_workspaces now (open, not evicted). */
long ws_registry_live(struct ws_registry *r);
/* Calls cb for each tenant that has opened a workspace in this run, with
 * how many it holds open now (under the registry lock: cb must not call
 * back into the registry). */
void ws_registry_tenants(struct ws_registry *r,
                         void (*cb)(void *ud, const char *tenant, unsigned live), void *ud);

/* Like ws_registry_get but also returns evicted workspaces (and ones being
 * attached) and never re-attaches nor waits (for Describe). */
int ws_registry_peek(struct ws_registry *r, const char *tenant, const char *id,
                     struct ws_workspace **ret);
/* Whether id is a workspace of `tenant`: a known one, or one this run saw
 * closed (the closed ids kept in memory; after a restart a closed id is
 * nobody's). For what outlives a workspace, like its audit log, so another
 * tenant never learns anything about it. */
bool ws_registry_owns(struct ws_registry *r, const char *tenant, const char *id);
/* Whether id is a workspace of `tenant` that this run closed because it
 * expired; then d is filled (message, cause=expired). */
bool ws_registry_expired(struct ws_registry *r, const char *tenant, const char *id,
                         struct ws_diag *d);

/* Closes: terminal, idempotent (*ret_already_closed = true the second
 * time). Removes the workspace's record and storage. Unknown id:
 * -WS_ENOWORKSPACE; a workspace being attached: -EAGAIN, nothing
 * changed. */
int ws_registry_close(struct ws_registry *r, const char *tenant, const char *id,
                      bool *ret_already_closed);
/* Like ws_registry_close; a runtime's detach failure is returned (its
 * diag in d) and the workspace stays open. */
int ws_registry_close_diag(struct ws_registry *r, const char *tenant, const char *id,
                           struct ws_diag *d, bool *ret_already_closed);

/* Called by ws_registry_close for a workspace that is being closed, after
 * it stopped accepting calls (state CLOSING) and before its storage is
 * removed, and when a workspace is found evicted: the exec layer ends the
 * workspace's commands there (blocking until they are gone). Set once,
 * before serving. */
typedef void (*ws_registry_close_hook)(void *userdata, const char *id, bool expired);
void ws_registry_set_close_hook(struct ws_registry *r, ws_registry_close_hook fn, void *userdata);

/* Whether workspace `id` has a command running or an output stream
 * attached (the exec layer knows): a busy workspace is never idle, so its
 * idle timeout counts from when it stops being busy. Called by the
 * lifetime reaper with no registry lock held; must not block. Set once,
 * before serving; without one, only calls count as activity. */
typedef bool (*ws_registry_busy_hook)(void *userdata, const char *id);
void ws_registry_set_busy_hook(struct ws_registry *r, ws_registry_busy_hook fn, void *userdata);

/* The providers the registry opens workspaces with, and whose runtimes it
 * attaches and detaches (set once, before serving; owned by the caller,
 * which keeps it until every command has ended: ws_registry_free calls no
 * provider). Until then, and in a registry that
 * never gets one, the built-in set: no runtime is attached.
 *
 * A workspace's runtime (the Docker provider's container) is attached
 * when it is opened or re-attached (after a restart, or on Resolve with
 * `fresh` false: then what exists is checked and only what is missing
 * made again); a failure fails that Open or Resolve. It is detached on
 * Close after the commands were ended and before the storage is removed;
 * a failure fails the Close, which leaves the workspace open so the Close
 * can be retried. It is also detached, best effort, when a workspace is
 * found evicted. Both may block (handler threads) and run with no
 * registry lock held. */
void ws_registry_set_providers(struct ws_registry *r, const struct ws_providers *ps);

/* Hooks a test puts in place of every on-disk provider's attach and
 * detach (same rules as above, with the workspace's directory path). */
struct ws_registry_runtime {
    int (*attach)(void *ud, struct ws_workspace *ws, const char *dir, bool fresh,
                  struct ws_diag *d);
    int (*detach)(void *ud, struct ws_workspace *ws, struct ws_diag *d);
    void *ud;
};
void ws_registry_set_runtime(struct ws_registry *r, const struct ws_registry_runtime *rt);

/* The host path of an on-disk workspace's directory (HOME of its commands)
 * into buf. Returns 0, -ENAMETOOLONG, -EINVAL for a memory workspace. */
int ws_registry_workspace_path(struct ws_registry *r, const struct ws_workspace *ws, char *buf,
                               size_t len);

/* Calls cb for every known workspace (not closed) of `tenant`, with a
 * reference held for the duration of the call only. */
typedef void (*ws_registry_list_cb)(void *userdata, struct ws_workspace *ws);
void ws_registry_list(struct ws_registry *r, const char *tenant, ws_registry_list_cb cb,
                      void *userdata);

void ws_workspace_ref(struct ws_workspace *ws);
/* Accepts NULL. */
void ws_workspace_unref(struct ws_workspace *ws);

struct ws_workspace_info {
    enum ws_state state;
    int64_t opened_at_ms;
    int64_t last_success_at_ms;
    int64_t last_error_at_ms;
    char last_error[WS_DIAG_MESSAGE_MAX + 64];
    /* Its lifetime now: when it expires (0: never), the ttl and idle
     * timeout in force, its last activity (wall ms). */
    int64_t expires_at_ms;
    uint64_t ttl_ms;
    uint64_t idle_timeout_ms;
    int64_t activity_ms;
    bool secrets_missing;
};

/* ---- lifetimes ----
 *
 * A workspace expires at the earlier of its ttl (recorded as an absolute
 * time, so it survives a restart) and its last activity plus its idle
 * timeout. Activity: every ws_registry_get, _resolve and _peek of it, and
 * every reaper tick at which the busy hook says it is busy. The reaper
 * closes an expired workspace exactly like ws_registry_close, with the
 * close hook told `expired`; its id and ref then answer -WS_EEVICTED with
 * metadata cause=expired for the rest of the run. */

/* Starts and stops the reaper thread (start after the hooks and providers
 * are set; stop before they go). -errno of pthread_create. */
int ws_registry_start_reaper(struct ws_registry *r);
void ws_registry_stop_reaper(struct ws_registry *r);
/* One reaper pass, on the calling thread. */
void ws_registry_reap(struct ws_registry *r);

/* Workspaces.Extend: ttl_ms > 0 makes it expire ttl_ms from now,
 * idle_ms > 0 replaces its idle timeout. Errors: those of
 * ws_registry_get, -WS_EMALFORMED (both 0), -WS_ELIMIT (past
 * max_lifetime_ms from its Open: metadata field, limit), or the record's
 * write. *ret describes it after the change. */
int ws_registry_extend(struct ws_registry *r, const char *tenant, const char *id, uint64_t ttl_ms,
                       uint64_t idle_ms, struct ws_diag *d, struct ws_workspace_info *ret);

struct ws_secret;
/* Workspaces.SetSecrets: merges the n pairs into what the workspace holds
 * (`replace`: they become all of it) and records their names. Errors:
 * those of ws_registry_get, -WS_EMALFORMED / -WS_ELIMIT / -WS_EENVDENIED
 * for a bad name or size (a name in the diag, never a value). On success
 * *ret_names (n_names, malloc'ed, ws_strv_free) are the names now and
 * *ret_missing whether some still lack a value. */
int ws_registry_set_secrets(struct ws_registry *r, const char *tenant, const char *id,
                            const struct ws_secret *pairs, size_t n, bool replace,
                            struct ws_diag *d, char ***ret_names, size_t *ret_n_names,
                            bool *ret_missing);
/* The names of ws's secrets (recorded), as a malloc'ed copy. -ENOMEM. */
int ws_workspace_secret_names(struct ws_workspace *ws, char ***ret, size_t *ret_n);
/* Frees n strings and their array; accepts NULL. */
void ws_strv_free(char **v, size_t n);

const char *ws_workspace_id(const struct ws_workspace *ws);
/* The owning tenant (never empty). */
const char *ws_workspace_tenant(const struct ws_workspace *ws);
const struct ws_provider *ws_workspace_provider(const struct ws_workspace *ws);
/* The signed ref token; valid while the reference is held. */
void ws_workspace_token(const struct ws_workspace *ws, const uint8_t **ret_data, size_t *ret_len);
/* The effective capabilities (server defaults filled in). */
const Workspace__V1__Capabilities *ws_workspace_capabilities(const struct ws_workspace *ws);
/* Network policy of the provider config (NETWORK_OFF when not applicable). */
Workspace__V1__Network ws_workspace_network(const struct ws_workspace *ws);
/* The persisted record (its provider's config in the `config` oneof). */
const ws_record *ws_workspace_record(const struct ws_workspace *ws);
uint64_t ws_workspace_max_file_size(const struct ws_workspace *ws);
/* The workspace's own uid and gid, when it has one in this run (uids on,
 * an on-disk workspace that was opened or attached); false otherwise (its
 * commands run as the server). */
bool ws_workspace_uid(struct ws_workspace *ws, uid_t *ret_uid, gid_t *ret_gid);
/* The generic file operations over the workspace's storage; NULL unless
 * the workspace is open. */
struct ws_fsops *ws_workspace_fsops(const struct ws_workspace *ws);
void ws_workspace_describe(struct ws_workspace *ws, struct ws_workspace_info *ret);

/* ---- the per-tenant byte quota ----
 *
 * Every workspace keeps a usage figure (usage.h). It starts at 0 for a new
 * workspace, moves by exactly what the FileSystem writes charged here add
 * or remove, and is measured again from the files themselves whenever it
 * may be wrong: after a command ended (commands write files the server
 * does not see), a Remove or a replacing Move, a Resolve, and for every
 * workspace found at start. Marking it stale is cheap; the measure (a walk
 * bounded by usage.h) runs on the next charge for that tenant, on the
 * calling handler thread, never on the pump thread. A workspace not used
 * since a restart (not attached) counts from its first use. With
 * tenant_max_bytes 0 these functions do nothing and return 0. */

/* Charges `delta` bytes to ws's tenant (a write's new size minus the
 * old): measures the tenant's stale workspaces, then refuses with
 * -WS_EQUOTA (metadata quota=tenant_bytes, limit, used) when the tenant's
 * usage would pass the quota. delta < 0 always succeeds (a tenant over its
 * quota may shrink); delta 0 asks whether the tenant may grow at all (a
 * new command, MakeDir) and fails once its usage reached the quota. A
 * tenant with a workspace that cannot be measured is full. A successful
 * charge counts at once, so concurrent writers cannot both take the last
 * room; ws_registry_usage_refund gives back one whose write did not
 * happen. */
int ws_registry_usage_charge(struct ws_registry *r, struct ws_workspace *ws, int64_t delta,
                             struct ws_diag *d);
/* Like ws_registry_usage_charge, but counts nothing: would this much
 * more still fit (a write in progress)? */
int ws_registry_usage_check(struct ws_registry *r, struct ws_workspace *ws, int64_t delta,
                            struct ws_diag *d);
/* Takes back `delta` bytes charged to ws. */
void ws_registry_usage_refund(struct ws_registry *r, struct ws_workspace *ws, int64_t delta);
/* Marks the figure of workspace `id` (any tenant's; unknown ids are
 * ignored) stale. Never blocks on a measure: callable from the pump
 * thread. */
void ws_registry_usage_stale(struct ws_registry *r, const char *id);

/* After a file operation on a memory workspace failed with -WS_EQUOTA on
 * this thread: whether its tenant's memory quota refused it, with d then
 * filled (message, quota=tenant_memory_bytes, limit, used). */
bool ws_registry_memory_explain(struct ws_diag *d);

/* ---- env and secrets ----
 *
 * A workspace's env is its record's (ws_workspace_record(ws)->env, fixed
 * at Open). Its secrets live in memory only, in pages excluded from core
 * dumps and wiped when the workspace closes. */

/* For a command about to start in ws: fails with -WS_ESECRETS (d:
 * message, metadata names) when the workspace lacks secrets it has names
 * of (a restart), and with -WS_EMALFORMED (d: field=secrets, name) for a
 * name it has no secret of; else calls fn for each of the n_names named
 * secrets, with the workspace's secret lock held: fn copies what it needs
 * (and wipes its copy with explicit_bzero after use) and must not call
 * back into the registry. A negative return of fn stops and is
 * returned. */
int ws_workspace_secrets_use(struct ws_workspace *ws, const char *const *names, size_t n_names,
                             int (*fn)(void *ud, const char *name, const char *value), void *ud,
                             struct ws_diag *d);

/* ---- snapshots ----
 *
 * Open's from_snapshot (a fork: any provider with storage) and from_path
 * (a shadow of a host directory the operator allows: -WS_ESOURCEPATH,
 * metadata path, for anything else) fill the new workspace's files before
 * it is published, counted against the tenant's byte quota and the
 * workspace's max_file_size_bytes. Snapshots belong to their tenant
 * (another's id is -WS_ENOSNAPSHOT) and their bytes count against its
 * byte quota (ws_snapstore_tenant_bytes). */

/* Workspaces.Snapshot: copies the workspace's tree with its file API held
 * still (ws_fsops_freeze). Errors: those of ws_registry_get,
 * -WS_EMALFORMED (name, labels), -EEXIST (name), -WS_EQUOTA
 * (quota=snapshots, or tenant_bytes), -WS_ELIMIT, or the copy's. *ret a
 * new reference. */
int ws_registry_snapshot(struct ws_registry *r, const char *tenant,
                         const Workspace__V1__SnapshotRequest *req, struct ws_diag *d,
                         struct ws_snap **ret);
/* A snapshot of the tenant, or -WS_ENOSNAPSHOT (d says so). */
int ws_registry_snapshot_get(struct ws_registry *r, const char *tenant, const char *id,
                             struct ws_diag *d, struct ws_snap **ret);
/* The tenant's snapshots in id order (ws_snapstore_list). */
int ws_registry_snapshots(struct ws_registry *r, const char *tenant, struct ws_snap ***ret,
                          size_t *ret_n);
int ws_registry_delete_snapshot(struct ws_registry *r, const char *tenant, const char *id,
                                struct ws_diag *d, uint64_t *ret_reclaimed);
/* Workspaces.Restore, once the caller made sure no command runs: puts the
 * workspace's files back to the snapshot's (ws_snapstore_restore) with
 * the file API held still. Errors: those of ws_registry_get,
 * -WS_ENOSNAPSHOT, -EFBIG, -WS_EQUOTA, or the copy's. */
int ws_registry_restore(struct ws_registry *r, const char *tenant, const char *id,
                        struct ws_snap *snap, struct ws_diag *d);

/* Records the outcome of an operation for Describe: success updates
 * last_success_at; backend failures (not a client's bad input) update
 * last_error. */
void ws_workspace_note(struct ws_workspace *ws, int err, const struct ws_diag *d);

#endif
