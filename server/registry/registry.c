#include "server/registry/registry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/openat2.h>
#include <openssl/evp.h>

#include "server/base/macros.h"
#include "server/base/time.h"
#include "server/metrics/metrics.h"
#include "server/posix/fs.h"
#include "server/guard/guard.h"
#include "server/registry/labels.h"
#include "server/registry/memquota.h"
#include "server/registry/ref.h"
#include "server/registry/requests.h"
#include "server/registry/secrets.h"
#include "server/registry/storage.h"
#include "server/registry/usage.h"
#include "server/vfs/ops.h"

#define BUCKETS        256
#define ID_PREFIX      "ws_"
#define RECORDS_DIR    "records"
#define DEFAULT_ROOT   "workspaces"
#define LOCK_FILE      "lock"
#define IMAGE_NAME_MAX 255

typedef Workspaced__Internal__V1__WorkspaceRecord Record;

struct ws_workspace {
    atomic_long refs;
    char id[WS_ID_LEN + 1];
    const struct ws_provider *provider;
    Record *rec;
    uint8_t *token;
    size_t token_len;
    /* Whether this entry counts against max_workspaces; registry lock. */
    bool counted;
    /* The byte quota's figure (ws_registry_usage_charge); registry lock.
     * `stale`: measure again before use; `unmeasurable`: the last measure
     * could not finish, the tenant counts as full; `charges` moves with
     * every charge, so a measure that overlapped one is not trusted. */
    uint64_t usage;
    bool usage_stale;
    bool usage_unmeasurable;
    uint64_t usage_charges;
    /* One measure of this workspace at a time. */
    pthread_mutex_t measure_lock;
    struct ws_workspace *next; /* hash chain; registry lock */

    pthread_mutex_t lock; /* everything below */
    /* An attach blocks (a runtime may wait on a daemon), so it runs with
     * no lock held, and these say one is in flight: state OPENING while a
     * call attaches a CONFIGURED workspace, `attaching` while a Resolve
     * makes the runtime of an OPEN one again. Only that call changes the
     * state meanwhile (see ensure_open). */
    enum ws_state state;
    bool attaching;
    struct ws_vfs *vfs;
    struct ws_fsops *fsops;
    dev_t dev;
    ino_t ino;
    int64_t opened_at_ms;
    int64_t last_success_ms;
    int64_t last_error_ms;
    char last_error[WS_DIAG_MESSAGE_MAX + 64];
    /* The workspace's own uid, taken from the registry's allocator
     * (claimed from the record at start, or allocated at Open or first
     * attach) until it is given back at Close or eviction. rec->uid and
     * rec->gid say the same once it is recorded. */
    bool uid_held;
    uid_t uid;
    gid_t gid;
    /* The last activity seen (wall ms), for the idle timeout. */
    int64_t activity_ms;
    /* The secrets held in this run (NULL: none given since the start), and
     * whether names the record has are missing from them. */
    struct ws_secrets *secrets;
    bool secrets_missing;
};

/* What one tenant holds, for its quotas; registry lock. One per tenant
 * that ever opened a workspace: tenants are made by the operator (tokens
 * file, client CA), not by clients. */
struct tenant_use {
    char name[WS_TENANT_MAX + 1];
    unsigned live;
    double opens;        /* Opens left in the bucket */
    int64_t refilled_ms; /* when `opens` was last topped up */
    struct tenant_use *next;
};

struct ws_registry {
    pthread_mutex_t lock;
    unsigned tenant_max_workspaces;
    unsigned tenant_opens_per_minute;
    uint64_t tenant_max_bytes;
    /* The memory workspaces' per-tenant accounts (tenant_memory_bytes). */
    struct ws_memquota *memquota;
    unsigned providers_enabled;
    /* The providers with their runtimes (set before serving); NULL: the
     * built-in set, whose providers keep no runtime to attach. */
    const struct ws_providers *providers;
    /* The operator's policy: swapped whole on reload under policy_lock;
     * an Open holds its own reference for its whole check. */
    pthread_mutex_t policy_lock;
    struct ws_policy_set *policy;
    struct tenant_use *tenants;
    struct ws_ref_key key;
    int state_fd;
    /* Holds the state directory's lock (LOCK_FILE) while the registry lives. */
    int lock_fd;
    int records_fd;
    int root_fd;
    unsigned max_workspaces;
    uint64_t max_file_size;
    struct ws_storage_limits limits;
    /* Canonical paths of the state directory and workspace root, only to
     * keep them out of sandbox binds. */
    char *state_path;
    char *root_path;
    unsigned live;
    struct ws_workspace *buckets[BUCKETS];
    /* Closed ids with their tenant: a second Close by the owner succeeds,
     * anyone else's is an unknown id. */
    struct closed_id {
        char id[WS_ID_LEN + 1];
        char tenant[WS_TENANT_MAX + 1];
        bool expired;
    } * closed;
    size_t closed_next;
    ws_registry_close_hook close_hook;
    void *close_hook_ud;
    struct ws_registry_runtime rt;
    /* Workspace uids; NULL when they are off. */
    struct ws_uids *uids;
    struct ws_uid_range uid_range;
    /* This server's host-wide hold on uid_range (uids.h). */
    struct ws_uids_lease *uid_lease;
    void (*say)(void *ud, bool error, const char *message);
    void *say_ud;
    /* Lifetimes: the cap on any workspace's life and the idle timeout of
     * one that asks none (ms, 0: none); the exec layer's busy answer; the
     * reaper thread that closes expired workspaces. */
    uint64_t max_lifetime_ms;
    uint64_t default_idle_ms;
    ws_registry_busy_hook busy_hook;
    void *busy_hook_ud;
    pthread_t reaper;
    bool reaper_running;
    bool reaper_stop;
    pthread_cond_t reaper_cond;
    /* Closes so far; the reaper's count at its last malloc_trim. */
    atomic_uint_fast64_t closes;
    uint_fast64_t closes_trimmed;
    /* Names being taken by Opens in flight (tenant, name), so two Opens
     * never both get one; registry lock. */
    struct pending_name {
        char tenant[WS_TENANT_MAX + 1];
        char name[WS_NAME_MAX + 1];
        struct pending_name *next;
    } * pending_names;
    /* Recent Opens' request ids. */
    struct ws_requests *requests;
    /* The snapshot store, and the host directories from_path may name. */
    struct ws_snapstore *snaps;
    char **source_allow;
    size_t n_source_allow;
};

/* Tells the operator (struct ws_registry_config's `say`). */
static void say(const struct ws_registry *r, bool error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(const struct ws_registry *r, bool error, const char *fmt, ...)
{
    char msg[PATH_MAX + 512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (r->say)
        r->say(r->say_ud, error, msg);
    else
        fprintf(stderr, "workspaced: %s\n", msg);
}

/* Ids are the only client-chosen strings that become file names, so they
 * are checked before any use: "ws_" and 32 lowercase hex digits. */
static bool id_valid(const char *id)
{
    if (!id || strncmp(id, ID_PREFIX, 3) != 0 || strlen(id) != WS_ID_LEN)
        return false;
    for (const char *p = id + 3; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

static int id_new(char ret[WS_ID_LEN + 1])
{
    uint8_t raw[16];
    static const char hex[] = "0123456789abcdef";

    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return -EIO;
    memcpy(ret, ID_PREFIX, 3);
    for (size_t i = 0; i < sizeof(raw); i++) {
        ret[3 + 2 * i] = hex[raw[i] >> 4];
        ret[4 + 2 * i] = hex[raw[i] & 15];
    }
    ret[WS_ID_LEN] = '\0';
    return 0;
}

static unsigned bucket_of(const char *id)
{
    uint32_t h = 2166136261u;

    for (; *id; id++)
        h = (h ^ (uint8_t)*id) * 16777619u;
    return h % BUCKETS;
}

/* ---- table (registry lock held) ---- */

static struct ws_workspace *table_find(struct ws_registry *r, const char *id)
{
    for (struct ws_workspace *w = r->buckets[bucket_of(id)]; w; w = w->next)
        if (strcmp(w->id, id) == 0)
            return w;
    return NULL;
}

static void table_insert(struct ws_registry *r, struct ws_workspace *ws)
{
    unsigned b = bucket_of(ws->id);

    ws->next = r->buckets[b];
    r->buckets[b] = ws;
}

static void table_remove(struct ws_registry *r, struct ws_workspace *ws)
{
    for (struct ws_workspace **p = &r->buckets[bucket_of(ws->id)]; *p; p = &(*p)->next)
        if (*p == ws) {
            *p = ws->next;
            ws->next = NULL;
            return;
        }
}

static const char *tenant_or_default(const char *tenant)
{
    return tenant && tenant[0] ? tenant : WS_TENANT_DEFAULT;
}

static bool owned_by(const struct ws_workspace *ws, const char *tenant)
{
    return strcmp(ws_workspace_tenant(ws), tenant_or_default(tenant)) == 0;
}

static const struct closed_id *closed_find(struct ws_registry *r, const char *tenant,
                                           const char *id)
{
    for (size_t i = 0; i < WS_CLOSED_IDS_KEPT; i++)
        if (strcmp(r->closed[i].id, id) == 0)
            return strcmp(r->closed[i].tenant, tenant_or_default(tenant)) == 0 ? &r->closed[i]
                                                                               : NULL;
    return NULL;
}

static bool closed_contains(struct ws_registry *r, const char *tenant, const char *id)
{
    return closed_find(r, tenant, id) != NULL;
}

/* Whether the tenant's id was closed because it expired (this run). */
static bool closed_expired(struct ws_registry *r, const char *tenant, const char *id)
{
    const struct closed_id *c;
    bool expired;

    pthread_mutex_lock(&r->lock);
    c = closed_find(r, tenant, id);
    expired = c && c->expired;
    pthread_mutex_unlock(&r->lock);
    return expired;
}

/* An id that expired answers like an evicted workspace, saying why. */
static int expired_error(struct ws_diag *d)
{
    ws_diag_set(d, "the workspace expired");
    ws_diag_meta(d, "cause", "expired");
    return -WS_EEVICTED;
}

static void closed_add(struct ws_registry *r, const struct ws_workspace *ws, bool expired)
{
    struct closed_id *c = &r->closed[r->closed_next];

    memcpy(c->id, ws->id, WS_ID_LEN + 1);
    snprintf(c->tenant, sizeof(c->tenant), "%s", ws_workspace_tenant(ws));
    c->expired = expired;
    r->closed_next = (r->closed_next + 1) % WS_CLOSED_IDS_KEPT;
}

/* Takes back the closed_add just made for id (a Close that failed). */
static void closed_undo(struct ws_registry *r, const char *id)
{
    size_t last = (r->closed_next + WS_CLOSED_IDS_KEPT - 1) % WS_CLOSED_IDS_KEPT;

    if (strcmp(r->closed[last].id, id) == 0) {
        r->closed[last].id[0] = '\0';
        r->closed_next = last;
    }
}

/* The tenant's use record, made on first need; NULL only when that
 * allocation fails. Registry lock held. */
static struct tenant_use *tenant_use(struct ws_registry *r, const char *tenant)
{
    struct tenant_use *t;

    for (t = r->tenants; t; t = t->next)
        if (strcmp(t->name, tenant) == 0)
            return t;
    t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    snprintf(t->name, sizeof(t->name), "%s", tenant);
    t->opens = r->tenant_opens_per_minute;
    /* The Open bucket runs on a clock that never steps back. */
    t->refilled_ms = ws_mono_ms();
    t->next = r->tenants;
    r->tenants = t;
    return t;
}

/* Counts one more (delta 1) or one less (-1) open workspace of `tenant`.
 * Registry lock held. */
static void tenant_count(struct ws_registry *r, const char *tenant, int delta)
{
    struct tenant_use *t = tenant_use(r, tenant);

    if (t && (delta > 0 || t->live > 0))
        t->live += (unsigned)delta;
}

static void uncount(struct ws_registry *r, struct ws_workspace *ws)
{
    if (ws->counted) {
        ws->counted = false;
        r->live--;
        tenant_count(r, ws_workspace_tenant(ws), -1);
    }
}

/* Checks the tenant's quotas for one more Open and takes its share.
 * Registry lock held. */
static int tenant_admit(struct ws_registry *r, const char *tenant, struct ws_diag *d)
{
    struct tenant_use *t = tenant_use(r, tenant);
    int64_t now = ws_mono_ms();

    if (!t)
        return -ENOMEM;
    if (r->tenant_max_workspaces && t->live >= r->tenant_max_workspaces) {
        ws_diag_set(d, "too many open workspaces for this tenant (limit %u)",
                    r->tenant_max_workspaces);
        ws_diag_meta(d, "quota", "tenant_open_workspaces");
        ws_diag_meta(d, "limit", "%u", r->tenant_max_workspaces);
        return -WS_EQUOTA;
    }
    if (r->tenant_opens_per_minute) {
        double cap = r->tenant_opens_per_minute;

        t->opens += (double)(now - t->refilled_ms) * cap / 60000.0;
        if (t->opens > cap)
            t->opens = cap;
        t->refilled_ms = now;
        if (t->opens < 1.0) {
            ws_diag_set(d, "too many Opens for this tenant (limit %u a minute)",
                        r->tenant_opens_per_minute);
            ws_diag_meta(d, "quota", "tenant_opens_per_minute");
            ws_diag_meta(d, "limit", "%u", r->tenant_opens_per_minute);
            return -WS_EQUOTA;
        }
        t->opens -= 1.0;
    }
    t->live++;
    return 0;
}

/* ---- workspace objects ---- */

static void workspace_free(struct ws_workspace *ws)
{
    ws_fsops_free(ws->fsops);
    if (ws->vfs)
        ws->vfs->ops->destroy(ws->vfs);
    ws_ref_record_free(ws->rec);
    free(ws->token);
    ws_secrets_free(ws->secrets);
    pthread_mutex_destroy(&ws->lock);
    pthread_mutex_destroy(&ws->measure_lock);
    free(ws);
}

void ws_workspace_ref(struct ws_workspace *ws)
{
    atomic_fetch_add(&ws->refs, 1);
}

void ws_workspace_unref(struct ws_workspace *ws)
{
    if (ws && atomic_fetch_sub(&ws->refs, 1) == 1)
        workspace_free(ws);
}

/* Takes ownership of token. */
static int workspace_new(struct ws_registry *r, uint8_t *token, size_t len, enum ws_state state,
                         struct ws_workspace **ret)
{
    struct ws_workspace *ws;
    Record *rec = NULL;
    int err;

    err = ws_ref_verify(&r->key, token, len, &rec);
    if (err < 0)
        goto fail;
    err = -WS_EBADREF;
    if (!id_valid(rec->id))
        goto fail;
    const struct ws_provider *p = ws_providers_by_name(r->providers, rec->provider);
    if (!p)
        goto fail;
    ws = calloc(1, sizeof(*ws));
    err = -ENOMEM;
    if (!ws)
        goto fail;
    atomic_init(&ws->refs, 1);
    memcpy(ws->id, rec->id, WS_ID_LEN + 1);
    ws->provider = p;
    ws->rec = rec;
    ws->token = token;
    ws->token_len = len;
    ws->state = state;
    ws->opened_at_ms = rec->created_unix_ms;
    ws->activity_ms = ws_wall_ms();
    /* Secrets are never recorded: a workspace that had some lacks them
     * until SetSecrets. */
    ws->secrets_missing = rec->n_secret_names > 0;
    /* Anything but a fresh Open (which clears it) holds files unknown. */
    ws->usage_stale = true;
    pthread_mutex_init(&ws->lock, NULL);
    pthread_mutex_init(&ws->measure_lock, NULL);
    *ret = ws;
    return 0;
fail:
    ws_ref_record_free(rec);
    free(token);
    return err;
}

const char *ws_workspace_id(const struct ws_workspace *ws)
{
    return ws->id;
}

const char *ws_workspace_tenant(const struct ws_workspace *ws)
{
    return tenant_or_default(ws->rec->tenant);
}

const struct ws_provider *ws_workspace_provider(const struct ws_workspace *ws)
{
    return ws->provider;
}

void ws_workspace_token(const struct ws_workspace *ws, const uint8_t **ret_data, size_t *ret_len)
{
    *ret_data = ws->token;
    *ret_len = ws->token_len;
}

const Workspace__V1__Capabilities *ws_workspace_capabilities(const struct ws_workspace *ws)
{
    return ws->rec->capabilities;
}

Workspace__V1__Network ws_workspace_network(const struct ws_workspace *ws)
{
    const struct ws_provider_ops *ops = ws->provider->ops;

    return ops->network ? ops->network(ws->rec) : WORKSPACE__V1__NETWORK__NETWORK_OFF;
}

const ws_record *ws_workspace_record(const struct ws_workspace *ws)
{
    return ws->rec;
}

uint64_t ws_workspace_max_file_size(const struct ws_workspace *ws)
{
    const Workspace__V1__Capabilities *c = ws->rec->capabilities;

    return c && c->fs ? c->fs->max_file_size_bytes : 0;
}

bool ws_workspace_uid(struct ws_workspace *ws, uid_t *ret_uid, gid_t *ret_gid)
{
    bool held;

    pthread_mutex_lock(&ws->lock);
    held = ws->uid_held;
    if (held) {
        *ret_uid = ws->uid;
        *ret_gid = ws->gid;
    }
    pthread_mutex_unlock(&ws->lock);
    return held;
}

struct ws_fsops *ws_workspace_fsops(const struct ws_workspace *ws)
{
    return ws->fsops;
}

/* When ws expires (0: never); ws->lock held. */
static int64_t expires_locked(const struct ws_workspace *ws)
{
    const Workspace__V1__Lifetime *lt = ws->rec->lifetime;
    int64_t ttl_at = ws->rec->ttl_expires_unix_ms;
    int64_t idle_at =
        lt && lt->idle_timeout_ms ? ws->activity_ms + (int64_t)lt->idle_timeout_ms : 0;

    if (!ttl_at || !idle_at)
        return ttl_at ? ttl_at : idle_at;
    return ttl_at < idle_at ? ttl_at : idle_at;
}

/* Fills the lifetime part of ret; ws->lock held. */
static void lifetime_locked(const struct ws_workspace *ws, struct ws_workspace_info *ret)
{
    const Workspace__V1__Lifetime *lt = ws->rec->lifetime;

    ret->expires_at_ms = expires_locked(ws);
    ret->ttl_ms = lt ? lt->ttl_ms : 0;
    ret->idle_timeout_ms = lt ? lt->idle_timeout_ms : 0;
    ret->activity_ms = ws->activity_ms;
    ret->secrets_missing = ws->secrets_missing;
}

/* A call on ws: activity now. */
static void touch(struct ws_workspace *ws)
{
    int64_t now = ws_wall_ms();

    pthread_mutex_lock(&ws->lock);
    if (now > ws->activity_ms)
        ws->activity_ms = now;
    pthread_mutex_unlock(&ws->lock);
}

void ws_workspace_describe(struct ws_workspace *ws, struct ws_workspace_info *ret)
{
    pthread_mutex_lock(&ws->lock);
    ret->state = ws->state;
    ret->opened_at_ms = ws->opened_at_ms;
    ret->last_success_at_ms = ws->last_success_ms;
    ret->last_error_at_ms = ws->last_error_ms;
    memcpy(ret->last_error, ws->last_error, sizeof(ret->last_error));
    lifetime_locked(ws, ret);
    pthread_mutex_unlock(&ws->lock);
}

/* Failures that say something about the workspace's health, as opposed to
 * a client's bad request. */
static bool is_backend_error(int err)
{
    switch (-err) {
    case WS_EFAILED:
    case WS_EEVICTED:
    case WS_EINTERNAL:
    case EIO:
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
    case EROFS:
    case ESTALE:
        return true;
    default:
        return false;
    }
}

static const char *error_name(int err)
{
    switch (-err) {
    case WS_EFAILED:
        return "WORKSPACE_FAILED";
    case WS_EEVICTED:
        return "WORKSPACE_EVICTED";
    case ENOSPC:
    case EDQUOT:
        return "NO_SPACE";
    case ENOMEM:
        return "NO_MEMORY";
    case EROFS:
        return "READ_ONLY";
    default:
        return "INTERNAL";
    }
}

static void note_locked(struct ws_workspace *ws, int err, const struct ws_diag *d)
{
    int64_t t = ws_wall_ms();

    if (err >= 0) {
        ws->last_success_ms = t;
        return;
    }
    if (!is_backend_error(err))
        return;
    ws->last_error_ms = t;
    snprintf(ws->last_error, sizeof(ws->last_error), "%s: %s", error_name(err),
             d && d->message[0] ? d->message : strerror(-err < WS_ERR_BASE ? -err : EIO));
}

void ws_workspace_note(struct ws_workspace *ws, int err, const struct ws_diag *d)
{
    pthread_mutex_lock(&ws->lock);
    note_locked(ws, err, d);
    pthread_mutex_unlock(&ws->lock);
}

/* ---- storage ---- */

static int write_record(struct ws_registry *r, const struct ws_workspace *ws)
{
    char tmp[WS_ID_LEN + 8];

    snprintf(tmp, sizeof(tmp), "%s.tmp", ws->id);
    return ws_storage_write_file(r->records_fd, ws->id, tmp, ws->token, ws->token_len);
}

/* Signs ws's record as it is now (its lifetime or secret names changed)
 * and writes it over the old one; the ref token stays as it was (a ref's
 * record is only used for its id, tenant and provider). */
static int save_record(struct ws_registry *r, struct ws_workspace *ws)
{
    char tmp[WS_ID_LEN + 8];
    uint8_t *token = NULL;
    size_t len = 0;
    int err;

    if (!ws->provider->ops->on_disk)
        return 0;
    pthread_mutex_lock(&ws->lock);
    err = ws_ref_sign(&r->key, ws->rec, &token, &len);
    pthread_mutex_unlock(&ws->lock);
    if (err == 0) {
        snprintf(tmp, sizeof(tmp), "%s.tmp", ws->id);
        err = ws_storage_write_file(r->records_fd, ws->id, tmp, token, len);
    }
    free(token);
    return err;
}

/* Whether a workspace has a runtime of its own to attach and detach: its
 * provider's (only in a set with runtimes), or the hooks a test put in
 * their place. */
static bool has_runtime(const struct ws_registry *r, const struct ws_workspace *ws)
{
    if (r->rt.attach)
        return ws->provider->ops->on_disk;
    return r->providers && ws->provider->ops->attach;
}

/* The provider's view of `ws`, with its directory in `dir`. */
static int provider_ws(struct ws_registry *r, const struct ws_workspace *ws,
                       const struct ws_provider_open *open, char *dir, size_t size,
                       struct ws_provider_ws *ret)
{
    *ret = (struct ws_provider_ws){.id = ws->id, .rec = ws->rec, .open = open};
    if (!ws->provider->ops->on_disk)
        return 0;
    ret->dir = dir;
    return ws_registry_workspace_path(r, ws, dir, size);
}

/* Makes the runtime of a workspace (a docker container): at its Open
 * (`open` set, fresh) or again on first use after a restart or on a
 * Resolve (!fresh: keep what is right). Blocking: no registry lock held. */
static int attach_runtime(struct ws_registry *r, struct ws_workspace *ws,
                          const struct ws_provider_open *open, bool fresh, struct ws_diag *d)
{
    const struct ws_provider *p = ws->provider;
    struct ws_provider_ws w;
    char path[PATH_MAX];
    int err;

    err = provider_ws(r, ws, open, path, sizeof(path), &w);
    if (err < 0)
        return err;
    if (r->rt.attach)
        return r->rt.attach(r->rt.ud, ws, w.dir, fresh, d);
    return p->ops->attach(p->rt, &w, fresh, d);
}

/* Removes it, at Close (d set: a failure keeps the workspace) or best
 * effort at eviction (d NULL). Blocking: no registry lock held. */
static int detach_runtime(struct ws_registry *r, struct ws_workspace *ws, struct ws_diag *d)
{
    const struct ws_provider *p = ws->provider;
    struct ws_provider_ws w;
    char path[PATH_MAX];
    int err;

    if (r->rt.detach)
        return r->rt.detach(r->rt.ud, ws, d);
    if (!p->ops->detach)
        return 0;
    err = provider_ws(r, ws, NULL, path, sizeof(path), &w);
    if (err < 0)
        return err;
    return p->ops->detach(p->rt, &w, d);
}

/* The workspace is gone (closed or evicted): its commands end, and its
 * provider drops what it remembers of it. */
static void forget_as(struct ws_registry *r, struct ws_workspace *ws, bool expired)
{
    const struct ws_provider *p = ws->provider;

    if (r->close_hook)
        r->close_hook(r->close_hook_ud, ws->id, expired);
    if (r->providers && p->ops->forget)
        p->ops->forget(p->rt, ws->id);
    ws_snapstore_forget(r->snaps, ws->id);
}

static void forget(struct ws_registry *r, struct ws_workspace *ws)
{
    forget_as(r, ws, false);
}

/* ---- workspace uids ---- */

/* A uid of the range no workspace holds. */
static int alloc_uid(struct ws_registry *r, uid_t *ret, struct ws_diag *d)
{
    int err = ws_uids_alloc(r->uids, ret);

    if (err == -WS_EQUOTA) {
        unsigned n = r->uid_range.last - r->uid_range.first;

        ws_diag_set(d,
                    "no workspace uid is free: all %u of the range %u-%u are held by workspaces "
                    "or still run processes",
                    n, (unsigned)r->uid_range.first + 1, (unsigned)r->uid_range.last);
        ws_diag_meta(d, "quota", "workspace_uids");
        ws_diag_meta(d, "limit", "%u", n);
    }
    return err;
}

/* Signs ws's record again with its uid and writes it over the old one.
 * The ref token in ws->token stays as it was: callers may be reading it,
 * and a ref's copy of the record is only ever used for its id, tenant and
 * provider. */
static int record_uid(struct ws_registry *r, struct ws_workspace *ws, uid_t uid, gid_t gid)
{
    char tmp[WS_ID_LEN + 8];
    uint8_t *token = NULL;
    size_t len = 0;
    int err;

    pthread_mutex_lock(&ws->lock);
    ws->rec->uid = uid;
    ws->rec->gid = gid;
    err = ws_ref_sign(&r->key, ws->rec, &token, &len);
    pthread_mutex_unlock(&ws->lock);
    if (err == 0) {
        snprintf(tmp, sizeof(tmp), "%s.tmp", ws->id);
        err = ws_storage_write_file(r->records_fd, ws->id, tmp, token, len);
    }
    free(token);
    if (err < 0) {
        pthread_mutex_lock(&ws->lock);
        ws->rec->uid = 0;
        ws->rec->gid = 0;
        pthread_mutex_unlock(&ws->lock);
    }
    return err;
}

/* Makes sure an on-disk workspace being attached (dir_fd, whose stat is
 * st) has its uid: a record from before workspace uids, or from another
 * range, gets a new one, recorded; and where the provider's storage is
 * the uid's, a tree it does not own (a new workspace's empty directory,
 * or the files of an older workspace) is given to it, never following a
 * symlink out. Only the attaching call touches the workspace meanwhile. */
static int ensure_uid(struct ws_registry *r, struct ws_workspace *ws, int dir_fd,
                      const struct stat *st, struct ws_diag *d)
{
    bool fresh = false;
    uid_t uid;
    gid_t gid;
    int err = 0;

    if (!ws_workspace_uid(ws, &uid, &gid)) {
        err = alloc_uid(r, &uid, d);
        if (err < 0)
            return err;
        gid = (gid_t)uid;
        fresh = true;
    }
    if (ws_provider_uid_owns_storage(ws->provider) && (st->st_uid != uid || st->st_gid != gid)) {
        err = ws_posixfs_chown_tree(dir_fd, uid, gid);
        if (err < 0)
            ws_diag_set(d, "the workspace's files cannot be given to its uid %u: %s", (unsigned)uid,
                        strerror(-err < WS_ERR_BASE ? -err : EIO));
    }
    if (err == 0 && fresh) {
        err = record_uid(r, ws, uid, gid);
        if (err < 0)
            ws_diag_set(d, "the workspace's uid cannot be recorded: %s",
                        strerror(-err < WS_ERR_BASE ? -err : EIO));
    }
    if (err < 0) {
        /* No command has run as it: nothing to end. */
        if (fresh)
            ws_uids_release(r->uids, uid);
        return err;
    }
    if (fresh) {
        pthread_mutex_lock(&ws->lock);
        ws->uid_held = true;
        ws->uid = uid;
        ws->gid = gid;
        pthread_mutex_unlock(&ws->lock);
    }
    return 0;
}

/* Ends every process still running as ws's uid: commands that left their
 * process tree and outlived the workspace. After its commands ended. */
static void end_uid_processes(struct ws_registry *r, struct ws_workspace *ws)
{
    uid_t uid;
    gid_t gid;
    int err;

    if (!r->uids || !ws_workspace_uid(ws, &uid, &gid))
        return;
    err = ws_uids_kill_all(uid);
    if (err < 0)
        say(r, false,
            "workspace %s is gone, but processes of its uid %u could not all be ended (%s); "
            "the uid is not handed out again while any of them runs",
            ws->id, (unsigned)uid, strerror(-err));
}

/* Gives ws's uid back to the range, once: after its processes were ended
 * and its storage removed. */
static void release_uid(struct ws_registry *r, struct ws_workspace *ws)
{
    bool held;
    uid_t uid;

    pthread_mutex_lock(&ws->lock);
    held = ws->uid_held;
    uid = ws->uid;
    ws->uid_held = false;
    pthread_mutex_unlock(&ws->lock);
    if (held && r->uids)
        ws_uids_release(r->uids, uid);
}

/* Attaches the storage and runtime of a workspace in state OPENING and
 * makes it OPEN. Called with no registry lock held, by the one call that
 * put it in OPENING (an Open, or the first use after a restart): nobody
 * else touches its storage until it is OPEN. */
static int attach(struct ws_registry *r, struct ws_workspace *ws,
                  const struct ws_provider_open *open, struct ws_diag *d)
{
    struct ws_vfs *fs = NULL;
    struct ws_fsops *ops = NULL;
    struct stat st = {0};
    int dir_fd = -1;
    uid_t uid;
    gid_t gid;
    int err;

    if (ws->provider->ops->on_disk) {
        dir_fd = openat(r->root_fd, ws->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir_fd < 0) {
            err = errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? -WS_EEVICTED : -errno;
            ws_diag_set(d, "the workspace's storage is gone");
            goto out;
        }
        if (fstat(dir_fd, &st) < 0) {
            err = -errno;
            goto out;
        }
        if (r->uids) {
            err = ensure_uid(r, ws, dir_fd, &st, d);
            if (err < 0)
                goto out;
        }
    }
    if (ws_provider_uid_owns_storage(ws->provider) && ws_workspace_uid(ws, &uid, &gid))
        err = ws_provider_attach_owned_storage(ws->provider, dir_fd, uid, gid, &fs);
    else
        err = ws_provider_attach_storage(ws->provider, dir_fd, &r->limits, &fs);
    if (err < 0)
        goto out;
    /* A tree in the server's own memory (the one provider without a
     * directory) counts against its tenant's memory quota. */
    if (!ws->provider->ops->on_disk) {
        struct ws_vfs *wrapped;
        err = ws_memquota_wrap(r->memquota, ws_workspace_tenant(ws), fs, &wrapped);
        if (err < 0)
            goto out;
        fs = wrapped;
    }
    /* Taken back after a restart: a server killed in the middle of a
     * write, an upload or a restore left its transient entries, which no
     * call may see. Nothing else runs on the workspace while it attaches. */
    if (!open && ws->provider->ops->on_disk) {
        uint64_t swept = 0;
        int sweep = ws_vfs_sweep_transient(fs, &swept);
        if (sweep < 0)
            say(r, true, "workspace %s: removing leftovers of an earlier run: %s", ws->id,
                strerror(-sweep));
        else if (swept)
            say(r, false, "workspace %s: removed %llu leftovers of an earlier run", ws->id,
                (unsigned long long)swept);
    }
    err = ws_fsops_new(fs, &ops);
    if (err < 0)
        goto out;
    if (has_runtime(r, ws)) {
        err = attach_runtime(r, ws, open, true, d);
        if (err < 0)
            goto out;
    }
    pthread_mutex_lock(&ws->lock);
    ws->vfs = fs;
    ws->fsops = ops;
    ws->dev = st.st_dev;
    ws->ino = st.st_ino;
    ws->state = WS_STATE_OPEN;
    pthread_mutex_unlock(&ws->lock);
    fs = NULL;
    ops = NULL;
out:
    ws_fsops_free(ops);
    if (fs)
        fs->ops->destroy(fs);
    if (dir_fd >= 0)
        close(dir_fd);
    return err;
}

static int probe_backend(const struct ws_provider *p, struct ws_diag *d)
{
    struct ws_probe pr;

    ws_provider_probe(p, &pr);
    if (pr.available)
        return 0;
    ws_diag_set(d, "%s backend unavailable: %s", p->ops->name, pr.reason);
    ws_diag_meta(d, "transient", "%s", pr.transient ? "true" : "false");
    if (d)
        d->transient = pr.transient;
    return -WS_EFAILED;
}

bool ws_registry_provider_enabled(const struct ws_registry *r, enum ws_provider_kind kind)
{
    return !r->providers_enabled || (r->providers_enabled & (1u << kind));
}

unsigned ws_registry_providers_enabled(const struct ws_registry *r)
{
    return r->providers_enabled;
}

void ws_registry_set_policy(struct ws_registry *r, struct ws_policy_set *set)
{
    struct ws_policy_set *old;

    ws_policy_set_ref(set);
    pthread_mutex_lock(&r->policy_lock);
    old = r->policy;
    r->policy = set;
    pthread_mutex_unlock(&r->policy_lock);
    ws_policy_set_unref(old);
}

struct ws_policy_set *ws_registry_policy(struct ws_registry *r)
{
    struct ws_policy_set *set;

    pthread_mutex_lock(&r->policy_lock);
    set = ws_policy_set_ref(r->policy);
    pthread_mutex_unlock(&r->policy_lock);
    return set;
}

long ws_registry_live(struct ws_registry *r)
{
    long n;

    pthread_mutex_lock(&r->lock);
    n = (long)r->live;
    pthread_mutex_unlock(&r->lock);
    return n;
}

void ws_registry_tenants(struct ws_registry *r,
                         void (*cb)(void *ud, const char *tenant, unsigned live), void *ud)
{
    pthread_mutex_lock(&r->lock);
    for (const struct tenant_use *t = r->tenants; t; t = t->next)
        cb(ud, t->name, t->live);
    pthread_mutex_unlock(&r->lock);
}

/* Marks `ws` evicted (its storage is gone) and ends what it had. Changes
 * nothing while a Resolve is making its runtime again: the detach here
 * would run beside that attach. The Resolve checks the storage when its
 * attach succeeds, and any later call does otherwise. */
/* The workspace is gone: its secrets are wiped now, not when the last
 * reference goes. */
static void wipe_secrets(struct ws_workspace *ws)
{
    struct ws_secrets *s;

    pthread_mutex_lock(&ws->lock);
    s = ws->secrets;
    ws->secrets = NULL;
    pthread_mutex_unlock(&ws->lock);
    ws_secrets_free(s);
}

static void mark_evicted(struct ws_registry *r, struct ws_workspace *ws)
{
    bool attaching;

    pthread_mutex_lock(&r->lock);
    pthread_mutex_lock(&ws->lock);
    attaching = ws->attaching;
    if (!attaching) {
        ws->state = WS_STATE_EVICTED;
        note_locked(ws, -WS_EEVICTED, NULL);
    }
    pthread_mutex_unlock(&ws->lock);
    if (!attaching)
        uncount(r, ws);
    pthread_mutex_unlock(&r->lock);
    if (attaching)
        return;
    ws_metrics_evicted(ws->provider->ops->name); /* metrics hook */
    if (ws->provider->ops->on_disk)
        unlinkat(r->records_fd, ws->id, 0);
    /* Its commands run in a directory that is gone: end them too, and
     * what the runtime holds for it (a container over the lost
     * directory). Best effort: the next start's reconcile sweeps what
     * remains. */
    forget(r, ws);
    wipe_secrets(ws);
    if (has_runtime(r, ws))
        (void)detach_runtime(r, ws, NULL);
    end_uid_processes(r, ws);
    release_uid(r, ws);
}

/* Whether the directory of an attached on-disk workspace is still the one
 * it was attached on; a workspace whose directory is gone is marked
 * evicted. */
static int check_storage(struct ws_registry *r, struct ws_workspace *ws, struct ws_diag *d)
{
    struct stat st;

    if (!ws->provider->ops->on_disk)
        return 0;
    if (fstatat(r->root_fd, ws->id, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
        st.st_dev == ws->dev && st.st_ino == ws->ino)
        return 0;
    mark_evicted(r, ws);
    ws_diag_set(d, "the workspace's storage is gone");
    return -WS_EEVICTED;
}

/* Makes sure `ws` is usable: re-attaches a CONFIGURED one, detects a
 * vanished directory. `reprobe` re-checks the backend even when open, and
 * makes again what the runtime lost since (Resolve: a container removed
 * or stopped behind our back).
 *
 * An attach may wait on a daemon for minutes, so it runs with no lock
 * held and a handler thread never waits for another call's attach: the
 * call that finds the workspace CONFIGURED moves it to OPENING and
 * attaches it, and every other call on it gets -EAGAIN (nothing done,
 * retry) until it is OPEN or CONFIGURED again. A Resolve of an OPEN
 * workspace sets `attaching` instead: file and exec calls go on, a second
 * Resolve (and a Close) gets -EAGAIN. */
static int ensure_open(struct ws_registry *r, struct ws_workspace *ws, bool reprobe,
                       struct ws_diag *d)
{
    bool runtime = reprobe && has_runtime(r, ws);
    bool opening = false, attaching = false, busy;
    int err = 0;

    pthread_mutex_lock(&ws->lock);
    enum ws_state state = ws->state;
    busy = state == WS_STATE_OPENING || (reprobe && ws->attaching);
    if (!busy && state == WS_STATE_CONFIGURED) {
        ws->state = WS_STATE_OPENING;
        opening = true;
    } else if (!busy && state == WS_STATE_OPEN && runtime) {
        ws->attaching = true;
        attaching = true;
    }
    pthread_mutex_unlock(&ws->lock);
    if (state == WS_STATE_EVICTED)
        return -WS_EEVICTED;
    if (state == WS_STATE_CLOSING || state == WS_STATE_CLOSED)
        return -WS_ENOWORKSPACE;
    if (busy) {
        ws_diag_set(d, "the workspace is being attached; retry");
        return -EAGAIN;
    }
    if (opening || reprobe) {
        err = probe_backend(ws->provider, d);
        if (err < 0)
            ws_workspace_note(ws, err, d);
    }
    if (err == 0 && opening)
        err = attach(r, ws, NULL, d);
    else if (err == 0 && attaching)
        err = attach_runtime(r, ws, NULL, false, d);
    if (opening || attaching) {
        pthread_mutex_lock(&ws->lock);
        /* A failed attach leaves the workspace to the next call. One whose
         * storage is gone stays OPENING until mark_evicted below, so that
         * no other call attaches it meanwhile. */
        if (opening && err < 0 && err != -WS_EEVICTED)
            ws->state = WS_STATE_CONFIGURED;
        if (attaching)
            ws->attaching = false;
        pthread_mutex_unlock(&ws->lock);
    }
    if (err == -WS_EEVICTED) {
        mark_evicted(r, ws);
        return err;
    }
    if (err < 0)
        return err;
    return check_storage(r, ws, d);
}

static struct ws_workspace *find_ref(struct ws_registry *r, const char *tenant, const char *id,
                                     bool *ret_closed);

/* ---- open ---- */

/* The lifetime an Open gets: what it asks, within the caps, with the
 * server's defaults where it asks nothing. */
static int open_lifetime(const struct ws_registry *r, const Workspace__V1__Lifetime *lt,
                         uint64_t *ret_ttl, uint64_t *ret_idle, struct ws_diag *d)
{
    uint64_t ttl = lt ? lt->ttl_ms : 0, idle = lt ? lt->idle_timeout_ms : 0;
    uint64_t ttl_cap = r->max_lifetime_ms ? r->max_lifetime_ms : WS_LIFETIME_MS_MAX;

    if (ttl > ttl_cap || idle > WS_LIFETIME_MS_MAX) {
        bool is_ttl = ttl > ttl_cap;

        ws_diag_set(d, "lifetime.%s exceeds the server's limit of %llu ms",
                    is_ttl ? "ttl_ms" : "idle_timeout_ms",
                    (unsigned long long)(is_ttl ? ttl_cap : WS_LIFETIME_MS_MAX));
        ws_diag_meta(d, "field", "lifetime.%s", is_ttl ? "ttl_ms" : "idle_timeout_ms");
        ws_diag_meta(d, "limit", "%llu",
                     (unsigned long long)(is_ttl ? ttl_cap : WS_LIFETIME_MS_MAX));
        return -WS_ELIMIT;
    }
    *ret_ttl = ttl ? ttl : r->max_lifetime_ms;
    *ret_idle = idle ? idle : r->default_idle_ms;
    return 0;
}

static bool request_id_ok(const char *id)
{
    size_t len = strlen(id);

    if (len == 0 || len > WS_REQUEST_ID_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '-'))
            return false;
    }
    return true;
}

/* Name/value pairs for the guard's checks (n <= max, else -WS_ELIMIT). */
static int env_pairs(Workspace__V1__OpenRequest__EnvEntry *const *entries, size_t n, size_t max,
                     size_t max_bytes, const char *field, struct ws_guard_env *out,
                     struct ws_diag *d)
{
    size_t bytes = 0;

    if (n > max) {
        ws_diag_set(d, "more than %zu %s", max, field);
        ws_diag_meta(d, "field", "%s", field);
        ws_diag_meta(d, "limit", "%zu", max);
        return -WS_ELIMIT;
    }
    for (size_t i = 0; i < n; i++) {
        out[i] = (struct ws_guard_env){.name = entries[i]->key, .value = entries[i]->value};
        bytes += strlen(entries[i]->value ? entries[i]->value : "");
    }
    if (bytes > max_bytes) {
        ws_diag_set(d, "the values of %s exceed %zu bytes", field, max_bytes);
        ws_diag_meta(d, "field", "%s", field);
        ws_diag_meta(d, "limit", "%zu", max_bytes);
        return -WS_ELIMIT;
    }
    return 0;
}

/* Checks the variables of an Open (env or secrets: the map entries of
 * both have the same layout) under the rules of a command's own env for
 * provider p. */
static int check_vars(const struct ws_provider *p, bool shell, void *const *entries, size_t n,
                      size_t max, size_t max_bytes, const char *field, struct ws_diag *d)
{
    struct ws_guard_env
        env[WS_SECRETS_MAX > WS_WORKSPACE_ENV_MAX ? WS_SECRETS_MAX : WS_WORKSPACE_ENV_MAX];
    int err;

    if (n == 0)
        return 0;
    if (!shell) {
        ws_diag_set(d, "%s are for commands: the workspace needs the shell capability", field);
        ws_diag_meta(d, "field", "%s", field);
        return -WS_EMALFORMED;
    }
    err = env_pairs((Workspace__V1__OpenRequest__EnvEntry *const *)entries, n, max, max_bytes,
                    field, env, d);
    if (err < 0)
        return err;
    err = ws_guard_check_env(p->ops->exec_env && p->ops->exec_env->on_host, env, n, d);
    if (err < 0)
        ws_diag_meta(d, "field", "%s", field);
    return err;
}

/* The request's content, for a retry with the same request_id: all of it
 * but the id itself and the secrets' values. */
static int request_hash(const Workspace__V1__OpenRequest *req, uint8_t out[WS_REQUEST_HASH_LEN])
{
    Workspace__V1__OpenRequest copy = *req;
    uint8_t *buf;
    size_t len;
    int ok;

    copy.request_id = (char *)"";
    copy.n_secrets = 0;
    copy.secrets = NULL;
    len = protobuf_c_message_get_packed_size(&copy.base);
    buf = malloc(len ? len : 1);
    if (!buf)
        return -ENOMEM;
    protobuf_c_message_pack(&copy.base, buf);
    ok = EVP_Digest(buf, len, out, NULL, EVP_sha256(), NULL);
    free(buf);
    return ok ? 0 : -ENOMEM;
}

/* The id of the tenant's workspace named `name` (not closed or evicted),
 * or of an Open in flight that takes it; registry lock held. */
static bool name_taken(struct ws_registry *r, const char *tenant, const char *name,
                       char ret_id[WS_ID_LEN + 1])
{
    for (struct pending_name *p = r->pending_names; p; p = p->next)
        if (strcmp(p->name, name) == 0 && strcmp(p->tenant, tenant) == 0) {
            snprintf(ret_id, WS_ID_LEN + 1, "%s", "");
            return true;
        }
    for (size_t b = 0; b < BUCKETS; b++)
        for (struct ws_workspace *w = r->buckets[b]; w; w = w->next) {
            if (!w->rec->name || strcmp(w->rec->name, name) != 0 || !owned_by(w, tenant))
                continue;
            pthread_mutex_lock(&w->lock);
            bool live = w->state != WS_STATE_CLOSED && w->state != WS_STATE_EVICTED;
            pthread_mutex_unlock(&w->lock);
            if (live) {
                memcpy(ret_id, w->id, WS_ID_LEN + 1);
                return true;
            }
        }
    return false;
}

static void name_release(struct ws_registry *r, const char *tenant, const char *name)
{
    pthread_mutex_lock(&r->lock);
    for (struct pending_name **pp = &r->pending_names; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->name, name) == 0 && strcmp((*pp)->tenant, tenant) == 0) {
            struct pending_name *p = *pp;
            *pp = p->next;
            free(p);
            break;
        }
    pthread_mutex_unlock(&r->lock);
}

/* What a repeated request_id answers: the workspace the first Open made,
 * while it lives. */
static int request_replay(struct ws_registry *r, const char *tenant, const char *rid,
                          enum ws_request_seen seen, const char *ws_id, struct ws_diag *d,
                          struct ws_workspace **ret)
{
    struct ws_workspace *ws;
    bool closed;

    if (seen == WS_REQUEST_PENDING) {
        ws_diag_set(d, "an Open with this request_id is in progress; retry");
        return -EAGAIN;
    }
    if (seen == WS_REQUEST_MISMATCH) {
        ws_diag_set(d, "request_id was used for a different Open");
        ws_diag_meta(d, "request_id", "%s", rid);
        ws_diag_meta(d, "workspace_id", "%s", ws_id);
        return -WS_EREQUESTID;
    }
    ws = find_ref(r, tenant, ws_id, &closed);
    if (ws) {
        pthread_mutex_lock(&ws->lock);
        bool gone = ws->state == WS_STATE_CLOSING || ws->state == WS_STATE_CLOSED ||
                    ws->state == WS_STATE_EVICTED;
        pthread_mutex_unlock(&ws->lock);
        if (!gone) {
            touch(ws);
            *ret = ws;
            return 0;
        }
        ws_workspace_unref(ws);
    }
    ws_diag_set(d, "the workspace this request_id opened is gone");
    ws_diag_meta(d, "request_id", "%s", rid);
    ws_diag_meta(d, "workspace_id", "%s", ws_id);
    if (closed && closed_expired(r, tenant, ws_id))
        ws_diag_meta(d, "cause", "expired");
    return -WS_EEVICTED;
}

/* The record's copies of the request's labels and env (the map entries
 * are of another message type), pointing into the request. */
struct record_maps {
    Workspaced__Internal__V1__WorkspaceRecord__LabelsEntry *labels;
    Workspaced__Internal__V1__WorkspaceRecord__LabelsEntry **label_ptrs;
    Workspaced__Internal__V1__WorkspaceRecord__EnvEntry *env;
    Workspaced__Internal__V1__WorkspaceRecord__EnvEntry **env_ptrs;
    char **secret_names;
};

static void record_maps_free(struct record_maps *m)
{
    free(m->labels);
    free(m->label_ptrs);
    free(m->env);
    free(m->env_ptrs);
    free(m->secret_names);
}

static int record_maps(const Workspace__V1__OpenRequest *req, Record *rec, struct record_maps *m)
{
    size_t nl = req->n_labels, ne = req->n_env, ns = req->n_secrets;

    m->labels = calloc(nl ? nl : 1, sizeof(*m->labels));
    m->label_ptrs = calloc(nl ? nl : 1, sizeof(*m->label_ptrs));
    m->env = calloc(ne ? ne : 1, sizeof(*m->env));
    m->env_ptrs = calloc(ne ? ne : 1, sizeof(*m->env_ptrs));
    m->secret_names = calloc(ns ? ns : 1, sizeof(*m->secret_names));
    if (!m->labels || !m->label_ptrs || !m->env || !m->env_ptrs || !m->secret_names)
        return -ENOMEM;
    for (size_t i = 0; i < nl; i++) {
        workspaced__internal__v1__workspace_record__labels_entry__init(&m->labels[i]);
        m->labels[i].key = req->labels[i]->key;
        m->labels[i].value = req->labels[i]->value;
        m->label_ptrs[i] = &m->labels[i];
    }
    for (size_t i = 0; i < ne; i++) {
        workspaced__internal__v1__workspace_record__env_entry__init(&m->env[i]);
        m->env[i].key = req->env[i]->key;
        m->env[i].value = req->env[i]->value;
        m->env_ptrs[i] = &m->env[i];
    }
    for (size_t i = 0; i < ns; i++)
        m->secret_names[i] = req->secrets[i]->key;
    rec->n_labels = nl;
    rec->labels = m->label_ptrs;
    rec->n_env = ne;
    rec->env = m->env_ptrs;
    rec->n_secret_names = ns;
    rec->secret_names = m->secret_names;
    return 0;
}

static int check_labels(const Workspace__V1__OpenRequest *req, struct ws_diag *d)
{
    struct ws_label labels[WS_LABELS_MAX];

    if (req->n_labels > WS_LABELS_MAX)
        return ws_labels_check(NULL, req->n_labels, d);
    for (size_t i = 0; i < req->n_labels; i++)
        labels[i] = (struct ws_label){.key = req->labels[i]->key, .value = req->labels[i]->value};
    return ws_labels_check(labels, req->n_labels, d);
}

/* ---- forks and shadows: where a new workspace's files come from ---- */

static int tenant_bytes_admit(struct ws_registry *r, const char *tenant, struct ws_workspace *ws,
                              int64_t delta, bool apply, struct ws_diag *d);

static int source_denied(const char *path, const char *why, struct ws_diag *d)
{
    ws_diag_set(d, "from_path %s", why);
    ws_diag_meta(d, "path", "%.120s", path);
    return -WS_ESOURCEPATH;
}

/* openat2 beneath `at` without following any symlink; -errno. */
static int open_beneath(int at, const char *path, int *ret_fd)
{
    struct open_how how = {
        .flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
        .resolve =
            RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | (at == AT_FDCWD ? 0 : RESOLVE_BENEATH),
    };
    long fd = syscall(SYS_openat2, at, path, &how, sizeof(how));

    if (fd < 0)
        return -errno;
    *ret_fd = (int)fd;
    return 0;
}

/* The host directory `path` of an Open's from_path, opened: an absolute
 * path without ".", ".." or empty components, equal to or under one of the
 * operator's directories, reached without following a symlink anywhere
 * (a symlink component is refused, not resolved). */
static int source_open(struct ws_registry *r, const char *path, struct ws_diag *d, int *ret_fd)
{
    size_t len = strlen(path), best = 0;
    const char *allow = NULL;
    int root = -1, fd = -1, err;

    if (path[0] != '/' || len >= PATH_MAX)
        return source_denied(path, "is not an absolute path", d);
    if (len > 1 && path[len - 1] == '/')
        return source_denied(path, "is not canonical (a trailing '/')", d);
    for (const char *c = path + 1; len > 1 && c <= path + len;) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return source_denied(path, "is not canonical (empty, \".\" or \"..\" components)", d);
        if (!e)
            break;
        c = e + 1;
    }
    for (size_t i = 0; i < r->n_source_allow; i++) {
        const char *a = r->source_allow[i];
        size_t n = strlen(a);
        bool under = strcmp(a, "/") == 0 ||
                     (strncmp(path, a, n) == 0 && (path[n] == '\0' || path[n] == '/'));
        if (under && n >= best) {
            allow = a;
            best = n;
        }
    }
    if (!allow)
        return source_denied(path, "is not a directory the operator allows (--source-path-allow)",
                             d);
    err = open_beneath(AT_FDCWD, allow, &root);
    if (err == 0) {
        const char *rest = path + (strcmp(allow, "/") == 0 ? 1 : best);
        while (*rest == '/')
            rest++;
        err = open_beneath(root, *rest ? rest : ".", &fd);
        close(root);
    }
    if (err == -ELOOP || err == -ENOTDIR || err == -EXDEV)
        return source_denied(path, "has a symlink or a non-directory in it", d);
    if (err == -ENOENT)
        return source_denied(path, "does not exist", d);
    if (err < 0) {
        ws_diag_set(d, "from_path cannot be opened: %s", strerror(-err));
        ws_diag_meta(d, "path", "%.120s", path);
        return err;
    }
    *ret_fd = fd;
    return 0;
}

struct fill_admit {
    struct ws_registry *r;
    const char *tenant;
};

static int fill_admit(void *ud, uint64_t total, struct ws_diag *d)
{
    struct fill_admit *fa = ud;

    if (total > INT64_MAX)
        return -WS_EQUOTA;
    return tenant_bytes_admit(fa->r, fa->tenant, NULL, (int64_t)total, false, d);
}

/* Fills the new workspace ws (attached, not published) from a snapshot
 * or a host directory; *ret_bytes what it now holds. */
static int fill_new(struct ws_registry *r, struct ws_workspace *ws, struct ws_snap *snap,
                    int src_fd, uint64_t max_file_size, struct ws_diag *d, uint64_t *ret_bytes)
{
    struct fill_admit fa = {r, ws_workspace_tenant(ws)};
    struct ws_copy_caps caps = {
        .max_file_size = max_file_size, .admit = fill_admit, .admit_ud = &fa};
    struct ws_copy_stats stats = {0};
    struct ws_vfs *dst = ws_fsops_vfs(ws->fsops), *src = NULL;
    int err;

    if (snap) {
        err = ws_snapstore_materialize(r->snaps, snap, dst, &caps, d, &stats);
    } else {
        err = ws_posixfs_open(src_fd, ".", &src);
        if (err == 0) {
            err = ws_tree_copy(src, dst, &caps, d, &stats);
            src->ops->destroy(src);
        }
    }
    if (err == 0)
        *ret_bytes = stats.bytes;
    return err;
}

static int open_new(struct ws_registry *r, const char *tenant,
                    const Workspace__V1__OpenRequest *req, struct ws_diag *d,
                    struct ws_workspace **ret);

int ws_registry_open(struct ws_registry *r, const char *tenant,
                     const Workspace__V1__OpenRequest *req, struct ws_diag *d,
                     struct ws_workspace **ret)
{
    const char *rid = req->request_id ? req->request_id : "";
    const char *who = tenant_or_default(tenant);
    uint8_t hash[WS_REQUEST_HASH_LEN];
    char first[WS_REQUEST_WS_ID_MAX];
    enum ws_request_seen seen;
    int err;

    if (!rid[0])
        return open_new(r, tenant, req, d, ret);
    if (!request_id_ok(rid)) {
        ws_diag_set(d, "invalid request_id: 1-%d bytes of [A-Za-z0-9._:-]", WS_REQUEST_ID_MAX);
        ws_diag_meta(d, "field", "request_id");
        return -WS_EMALFORMED;
    }
    err = request_hash(req, hash);
    if (err == 0)
        err = ws_requests_begin(r->requests, who, rid, hash, ws_mono_ms(), first, &seen);
    if (err < 0)
        return err;
    if (seen != WS_REQUEST_NEW)
        return request_replay(r, tenant, rid, seen, first, d, ret);
    err = open_new(r, tenant, req, d, ret);
    ws_requests_finish(r->requests, who, rid, err < 0 ? NULL : (*ret)->id);
    return err;
}

static int open_new(struct ws_registry *r, const char *tenant,
                    const Workspace__V1__OpenRequest *req, struct ws_diag *d,
                    struct ws_workspace **ret)
{
    const struct ws_provider *p = NULL;
    const Workspace__V1__Capabilities *want = req->capabilities;
    Workspace__V1__Capabilities caps = WORKSPACE__V1__CAPABILITIES__INIT;
    Workspace__V1__FsCapability fs_cap = WORKSPACE__V1__FS_CAPABILITY__INIT;
    union ws_provider_scratch checked, recorded;
    Record rec = WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__INIT;
    struct ws_workspace *ws = NULL;
    uint8_t *token = NULL;
    size_t token_len = 0;
    bool reserved = false, made_dir = false, took_uid = false;
    char id[WS_ID_LEN + 1];
    uid_t uid = 0;
    Workspace__V1__Lifetime life = WORKSPACE__V1__LIFETIME__INIT;
    struct record_maps maps = {0};
    const char *name = req->name ? req->name : "";
    struct pending_name *pending = NULL;
    const char *from_snapshot = req->from_snapshot ? req->from_snapshot : "";
    const char *from_path = req->from_path ? req->from_path : "";
    struct ws_snap *snap = NULL;
    int src_fd = -1;
    uint64_t filled = 0;
    int err;

    /* The request's own checks, with the provider's defaults filled in
     * (docker: the server's default image for an Open that names none);
     * the server's directories are kept out of binds by the policy check
     * below, which refuses them by name. */
    err = ws_providers_check(r->providers, req, NULL, 0, &checked, d, &req, &p);
    if (err < 0)
        return err;
    if (!ws_registry_provider_enabled(r, p->ops->kind)) {
        ws_diag_set(d, "provider %s is not enabled on this server", p->ops->name);
        ws_diag_meta(d, "provider", "%s", p->ops->name);
        return -WS_EDISABLED;
    }
    /* One snapshot of the policy for the whole check: a reload meanwhile
     * applies to the next Open. */
    const char *own[] = {r->state_path, r->root_path};
    struct ws_policy_set *pset = ws_registry_policy(r);
    const struct ws_policy *pol = ws_policy_for(pset, tenant_or_default(tenant));
    const struct ws_provider_open open = {
        .req = req,
        .pulls_allowed = pol->docker_pull,
        .own = own,
        .n_own = WS_ELEMENTSOF(own),
        .own_uid = r->uids != NULL && p->ops->on_disk,
        .address_space_mb = pol->address_space_mb,
    };
    err = ws_policy_check_open(pol, req, p->ops->policy_image ? p->ops->policy_image(req) : NULL,
                               own, WS_ELEMENTSOF(own), d);
    ws_policy_set_unref(pset);
    if (err < 0)
        return err;

    /* What the workspace is besides its provider. */
    bool shell = want && want->shell;
    err = open_lifetime(r, req->lifetime, &life.ttl_ms, &life.idle_timeout_ms, d);
    if (err == 0)
        err = check_labels(req, d);
    if (err == 0 && name[0])
        err = ws_name_check(name, d);
    if (err == 0)
        err = check_vars(p, shell, (void *const *)req->env, req->n_env, WS_WORKSPACE_ENV_MAX,
                         WS_WORKSPACE_ENV_BYTES_MAX, "env", d);
    if (err == 0)
        err = check_vars(p, shell, (void *const *)req->secrets, req->n_secrets, WS_SECRETS_MAX,
                         WS_SECRETS_BYTES_MAX, "secrets", d);
    if (err < 0)
        return err;
    if (from_snapshot[0] && from_path[0]) {
        ws_diag_set(d, "from_snapshot and from_path exclude each other");
        ws_diag_meta(d, "field", "from_path");
        return -WS_EMALFORMED;
    }

    /* No capability declared at all means the least useful one: fs. */
    bool want_fs = !want || want->fs || !want->shell;
    /* A provider lacks a shell when it has no exec environment. */
    if (want && want->shell && (!(p->ops->caps & WS_CAP_SHELL) || !p->ops->exec_env)) {
        ws_diag_set(d, "provider %s has no shell capability", p->ops->name);
        ws_diag_meta(d, "capability", "shell");
        return -WS_ECAPABILITY;
    }
    if (want_fs) {
        uint64_t asked = want && want->fs ? want->fs->max_file_size_bytes : 0;

        if (asked > r->max_file_size) {
            ws_diag_set(d, "fs.max_file_size_bytes exceeds the server's limit of %llu",
                        (unsigned long long)r->max_file_size);
            ws_diag_meta(d, "limit", "%llu", (unsigned long long)r->max_file_size);
            return -WS_ELIMIT;
        }
        fs_cap.max_file_size_bytes = asked ? asked : r->max_file_size;
        caps.fs = &fs_cap;
    }
    if (want && want->shell)
        caps.shell = want->shell;

    err = probe_backend(p, d);
    if (err < 0)
        return err;
    /* What this Open needs beyond the backend (a sandbox with network:
     * its user-mode network), failing closed now rather than at every
     * command. */
    if (p->ops->open_check) {
        err = p->ops->open_check(p->rt, &open, d);
        if (err < 0)
            return err;
    }
    /* Where its files come from, refused before anything is made. */
    if (from_snapshot[0]) {
        err = ws_registry_snapshot_get(r, tenant, from_snapshot, d, &snap);
        if (err == 0)
            err = tenant_bytes_admit(r, tenant_or_default(tenant), NULL, (int64_t)snap->bytes,
                                     false, d);
        if (err < 0) {
            ws_snap_unref(snap);
            return err;
        }
    } else if (from_path[0]) {
        err = source_open(r, from_path, d, &src_fd);
        if (err < 0)
            return err;
    }

    if (name[0]) {
        pending = calloc(1, sizeof(*pending));
        if (!pending) {
            err = -ENOMEM;
            goto out_source;
        }
        snprintf(pending->tenant, sizeof(pending->tenant), "%s", tenant_or_default(tenant));
        snprintf(pending->name, sizeof(pending->name), "%s", name);
    }
    pthread_mutex_lock(&r->lock);
    if (pending) {
        char other[WS_ID_LEN + 1];

        if (name_taken(r, pending->tenant, name, other)) {
            pthread_mutex_unlock(&r->lock);
            free(pending);
            ws_diag_set(d, other[0] ? "the tenant has a workspace of that name"
                                    : "a workspace of that name is being opened");
            ws_diag_meta(d, "name", "%s", name);
            ws_diag_meta(d, "workspace_id", "%s", other);
            err = -EEXIST;
            goto out_source;
        }
    }
    if (r->live >= r->max_workspaces) {
        pthread_mutex_unlock(&r->lock);
        free(pending);
        ws_diag_set(d, "too many open workspaces (limit %u)", r->max_workspaces);
        ws_diag_meta(d, "quota", "open_workspaces");
        ws_diag_meta(d, "limit", "%u", r->max_workspaces);
        err = -WS_EQUOTA;
        goto out_source;
    }
    err = tenant_admit(r, tenant_or_default(tenant), d);
    if (err < 0) {
        pthread_mutex_unlock(&r->lock);
        free(pending);
        goto out_source;
    }
    r->live++;
    reserved = true;
    if (pending) {
        pending->next = r->pending_names;
        r->pending_names = pending;
    }
    pthread_mutex_unlock(&r->lock);

    err = id_new(id);
    if (err < 0)
        goto out;
    if (p->ops->on_disk && r->uids) {
        err = alloc_uid(r, &uid, d);
        if (err < 0)
            goto out;
        took_uid = true;
    }
    if (p->ops->on_disk) {
        /* The attach below gives it to the workspace's uid. */
        if (mkdirat(r->root_fd, id, 0700) < 0) {
            err = -errno;
            goto out;
        }
        made_dir = true;
    }

    rec.schema = WS_REF_SCHEMA;
    rec.id = id;
    rec.provider = (char *)p->ops->name;
    rec.capabilities = &caps;
    rec.created_unix_ms = ws_wall_ms();
    rec.tenant = (char *)tenant_or_default(tenant);
    rec.uid = uid;
    rec.gid = (gid_t)uid;
    rec.lifetime = &life;
    rec.ttl_expires_unix_ms = life.ttl_ms ? rec.created_unix_ms + (int64_t)life.ttl_ms : 0;
    rec.name = (char *)name;
    err = record_maps(req, &rec, &maps);
    if (err < 0)
        goto out;
    /* The provider's part of the record (docker: its defaults, and never
     * a pull when the policy allows none). */
    err = p->ops->record(&open, &rec, &recorded);
    if (err < 0)
        goto out;
    err = ws_ref_sign(&r->key, &rec, &token, &token_len);
    if (err < 0)
        goto out;
    /* Not published yet: nobody else can reach it while it attaches. */
    err = workspace_new(r, token, token_len, WS_STATE_OPENING, &ws);
    token = NULL;
    if (err < 0)
        goto out;
    /* Not published yet: no lock needed. */
    ws->uid_held = took_uid;
    ws->uid = uid;
    ws->gid = (gid_t)uid;
    if (req->n_secrets) {
        struct ws_secret pairs[WS_SECRETS_MAX];

        for (size_t i = 0; i < req->n_secrets; i++)
            pairs[i] = (struct ws_secret){req->secrets[i]->key, req->secrets[i]->value};
        err = ws_secrets_new(pairs, req->n_secrets, &ws->secrets);
        if (err < 0)
            goto out;
        ws->secrets_missing = false;
    }
    err = attach(r, ws, &open, d);
    if (err < 0)
        goto out;
    if (snap || src_fd >= 0) {
        err = fill_new(r, ws, snap, src_fd, caps.fs ? fs_cap.max_file_size_bytes : r->max_file_size,
                       d, &filled);
        if (err < 0) {
            /* Nobody saw it: its runtime goes with it. */
            if (has_runtime(r, ws))
                detach_runtime(r, ws, NULL);
            goto out;
        }
    }
    ws->opened_at_ms = ws_wall_ms();
    if (p->ops->on_disk) {
        err = write_record(r, ws);
        if (err < 0)
            goto out;
    }

    pthread_mutex_lock(&r->lock);
    ws->counted = true;
    ws->usage_stale = false; /* new: empty, or what was copied in */
    ws->usage = filled;
    reserved = false;
    table_insert(r, ws);
    pthread_mutex_unlock(&r->lock);
    ws_workspace_ref(ws);
    *ret = ws;
    ws = NULL;
out:
    ws_workspace_unref(ws);
    free(token);
    record_maps_free(&maps);
    /* Published (or failed): the table says who has the name now. */
    if (pending)
        name_release(r, tenant_or_default(tenant), name);
    if (err < 0 && made_dir)
        ws_storage_remove_tree(r->root_fd, id);
    /* No command ran as it: nothing to end. */
    if (err < 0 && took_uid)
        ws_uids_release(r->uids, uid);
    if (reserved) {
        pthread_mutex_lock(&r->lock);
        r->live--;
        tenant_count(r, tenant_or_default(tenant), -1);
        pthread_mutex_unlock(&r->lock);
    }
out_source:
    ws_snap_unref(snap);
    if (src_fd >= 0)
        close(src_fd);
    return err;
}

/* ---- resolve / get ---- */

static struct ws_workspace *find_ref(struct ws_registry *r, const char *tenant, const char *id,
                                     bool *ret_closed)
{
    struct ws_workspace *ws;

    pthread_mutex_lock(&r->lock);
    ws = table_find(r, id);
    /* Another tenant's workspace is not there at all. */
    if (ws && !owned_by(ws, tenant))
        ws = NULL;
    if (ws)
        ws_workspace_ref(ws);
    *ret_closed = !ws && closed_contains(r, tenant, id);
    pthread_mutex_unlock(&r->lock);
    return ws;
}

int ws_registry_resolve(struct ws_registry *r, const char *tenant, const uint8_t *token, size_t len,
                        struct ws_diag *d, struct ws_workspace **ret)
{
    Record *rec = NULL;
    struct ws_workspace *ws;
    bool closed;
    int err;

    err = ws_ref_verify(&r->key, token, len, &rec);
    if (err < 0) {
        ws_diag_set(d, "the ref does not verify (tampered, truncated or from another server)");
        return err;
    }
    if (!id_valid(rec->id) || !ws_providers_by_name(r->providers, rec->provider)) {
        ws_ref_record_free(rec);
        ws_diag_set(d, "the ref does not verify");
        return -WS_EBADREF;
    }
    /* A genuine ref held by another tenant: answered like an unknown id,
     * before anything (closed, evicted) is told about the workspace. */
    if (strcmp(tenant_or_default(rec->tenant), tenant_or_default(tenant)) != 0) {
        ws_ref_record_free(rec);
        ws_diag_set(d, "no such workspace");
        return -WS_ENOWORKSPACE;
    }
    char id_buf[WS_ID_LEN + 1];
    snprintf(id_buf, sizeof(id_buf), "%s", rec->id);
    ws = find_ref(r, tenant, rec->id, &closed);
    ws_ref_record_free(rec);
    if (!ws) {
        /* Closed, lost with the process (memory), or its storage and record
         * are gone: either way the client must open a new workspace. */
        if (closed && closed_expired(r, tenant, id_buf))
            return expired_error(d);
        ws_diag_set(d, closed ? "the workspace was closed" : "the workspace no longer exists");
        return -WS_EEVICTED;
    }
    touch(ws);
    err = ensure_open(r, ws, true, d);
    if (err == -WS_ENOWORKSPACE)
        err = -WS_EEVICTED;
    if (err < 0) {
        ws_workspace_unref(ws);
        return err;
    }
    if (r->tenant_max_bytes) {
        pthread_mutex_lock(&r->lock);
        ws->usage_stale = true;
        pthread_mutex_unlock(&r->lock);
    }
    ws_workspace_note(ws, 0, NULL);
    *ret = ws;
    return 0;
}

int ws_registry_get(struct ws_registry *r, const char *tenant, const char *id, unsigned need_caps,
                    struct ws_diag *d, struct ws_workspace **ret)
{
    struct ws_workspace *ws;
    bool closed;
    int err;

    if (!id_valid(id)) {
        ws_diag_set(d, "no such workspace");
        return -WS_ENOWORKSPACE;
    }
    ws = find_ref(r, tenant, id, &closed);
    if (!ws) {
        if (closed && closed_expired(r, tenant, id))
            return expired_error(d);
        ws_diag_set(d, "no such workspace");
        return -WS_ENOWORKSPACE;
    }
    touch(ws);
    const Workspace__V1__Capabilities *c = ws->rec->capabilities;
    if (((need_caps & WS_CAP_FS) && !(c && c->fs)) ||
        ((need_caps & WS_CAP_SHELL) && !(c && c->shell))) {
        const char *cap = (need_caps & WS_CAP_FS) && !(c && c->fs) ? "fs" : "shell";

        ws_diag_set(d, "the workspace did not declare the %s capability", cap);
        ws_diag_meta(d, "capability", "%s", cap);
        ws_workspace_unref(ws);
        return -WS_ECAPABILITY;
    }
    err = ensure_open(r, ws, false, d);
    if (err < 0) {
        if (err == -WS_ENOWORKSPACE)
            ws_diag_set(d, "no such workspace");
        ws_workspace_unref(ws);
        return err;
    }
    *ret = ws;
    return 0;
}

int ws_registry_peek(struct ws_registry *r, const char *tenant, const char *id,
                     struct ws_workspace **ret)
{
    struct ws_workspace *ws;
    bool closed;

    if (!id_valid(id))
        return -WS_ENOWORKSPACE;
    ws = find_ref(r, tenant, id, &closed);
    if (!ws)
        return -WS_ENOWORKSPACE;
    touch(ws);
    /* Notice a vanished directory so Describe tells the truth; never
     * attach (nor wait for an attach): Describe answers at once. */
    pthread_mutex_lock(&ws->lock);
    bool check = ws->state == WS_STATE_OPEN;
    pthread_mutex_unlock(&ws->lock);
    if (check)
        (void)check_storage(r, ws, NULL);
    *ret = ws;
    return 0;
}

bool ws_registry_owns(struct ws_registry *r, const char *tenant, const char *id)
{
    struct ws_workspace *ws;
    bool closed;

    if (!id_valid(id))
        return false;
    ws = find_ref(r, tenant, id, &closed);
    bool live = ws != NULL;
    ws_workspace_unref(ws);
    return live || closed;
}

bool ws_registry_expired(struct ws_registry *r, const char *tenant, const char *id,
                         struct ws_diag *d)
{
    if (!id_valid(id) || !closed_expired(r, tenant, id))
        return false;
    expired_error(d);
    return true;
}

/* ---- close ---- */

int ws_registry_close(struct ws_registry *r, const char *tenant, const char *id,
                      bool *ret_already_closed)
{
    return ws_registry_close_diag(r, tenant, id, NULL, ret_already_closed);
}

static int close_id(struct ws_registry *r, const char *tenant, const char *id, bool expired,
                    struct ws_diag *d, bool *ret_already_closed);

int ws_registry_close_diag(struct ws_registry *r, const char *tenant, const char *id,
                           struct ws_diag *d, bool *ret_already_closed)
{
    return close_id(r, tenant, id, false, d, ret_already_closed);
}

/* Closes the tenant's workspace id; `expired`: the reaper does, and the
 * hooks and closed ids are told so. */
static int close_id(struct ws_registry *r, const char *tenant, const char *id, bool expired,
                    struct ws_diag *d, bool *ret_already_closed)
{
    struct ws_workspace *ws;
    enum ws_state before;
    bool busy;

    if (!id_valid(id))
        return -WS_ENOWORKSPACE;
    pthread_mutex_lock(&r->lock);
    ws = table_find(r, id);
    if (ws && !owned_by(ws, tenant))
        ws = NULL;
    if (!ws) {
        bool closed = closed_contains(r, tenant, id);

        pthread_mutex_unlock(&r->lock);
        if (!closed)
            return -WS_ENOWORKSPACE;
        *ret_already_closed = true;
        return 0;
    }
    /* An attach in flight owns the workspace's state until it is done:
     * the Close changes nothing and the client retries (an attach ends
     * within the runtime's own timeouts). */
    pthread_mutex_lock(&ws->lock);
    before = ws->state;
    busy = before == WS_STATE_OPENING || ws->attaching;
    if (!busy)
        ws->state = WS_STATE_CLOSING;
    pthread_mutex_unlock(&ws->lock);
    if (busy) {
        pthread_mutex_unlock(&r->lock);
        ws_diag_set(d, "the workspace is being attached; retry");
        return -EAGAIN;
    }
    table_remove(r, ws);
    uncount(r, ws);
    closed_add(r, ws, expired);
    pthread_mutex_unlock(&r->lock);

    forget_as(r, ws, expired);
    if (has_runtime(r, ws)) {
        int err = detach_runtime(r, ws, d);

        if (err < 0) {
            /* Nothing is removed yet: the workspace is as it was, minus
             * its commands, and a later Close tries again. */
            pthread_mutex_lock(&ws->lock);
            ws->state = before;
            note_locked(ws, err, d);
            pthread_mutex_unlock(&ws->lock);
            pthread_mutex_lock(&r->lock);
            closed_undo(r, id);
            table_insert(r, ws);
            if (!ws->counted) {
                ws->counted = true;
                r->live++;
                tenant_count(r, ws_workspace_tenant(ws), 1);
            }
            pthread_mutex_unlock(&r->lock);
            return err;
        }
    }
    /* Its commands ended above, so nothing needs its secrets any more;
     * what left their process trees goes now, before the files it might
     * still be writing. */
    wipe_secrets(ws);
    end_uid_processes(r, ws);
    if (ws->provider->ops->on_disk) {
        /* Record first: a crash after this point leaves only a directory
         * without a record, which the next start removes. */
        unlinkat(r->records_fd, ws->id, 0);
        fsync(r->records_fd);
        ws_storage_remove_tree(r->root_fd, ws->id);
    }
    release_uid(r, ws);
    pthread_mutex_lock(&ws->lock);
    ws->state = WS_STATE_CLOSED;
    pthread_mutex_unlock(&ws->lock);
    ws_workspace_unref(ws); /* the table's reference */
    atomic_fetch_add(&r->closes, 1);
    *ret_already_closed = false;
    return 0;
}

void ws_registry_set_runtime(struct ws_registry *r, const struct ws_registry_runtime *rt)
{
    r->rt = *rt;
}

void ws_registry_set_providers(struct ws_registry *r, const struct ws_providers *ps)
{
    pthread_mutex_lock(&r->lock);
    r->providers = ps;
    /* The workspaces loaded from records hold the built-in set's
     * instances: give each its provider's instance with the runtime. */
    for (size_t b = 0; b < BUCKETS; b++)
        for (struct ws_workspace *ws = r->buckets[b]; ws; ws = ws->next)
            ws->provider = ws_providers_get(ps, ws->provider->ops->kind);
    pthread_mutex_unlock(&r->lock);
}

void ws_registry_set_busy_hook(struct ws_registry *r, ws_registry_busy_hook fn, void *userdata)
{
    r->busy_hook = fn;
    r->busy_hook_ud = userdata;
}

/* ---- lifetimes ---- */

void ws_registry_reap(struct ws_registry *r)
{
    struct ws_workspace **all = NULL;
    size_t n = 0, cap = 0;

    /* Every workspace with a lifetime, with a reference: the busy hook,
     * and the closes, run with no registry lock held. */
    pthread_mutex_lock(&r->lock);
    for (size_t b = 0; b < BUCKETS; b++)
        for (struct ws_workspace *w = r->buckets[b]; w; w = w->next) {
            const Workspace__V1__Lifetime *lt = w->rec->lifetime;

            if (!w->rec->ttl_expires_unix_ms && !(lt && lt->idle_timeout_ms))
                continue;
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 64;
                struct ws_workspace **tmp = realloc(all, ncap * sizeof(*all));
                if (!tmp)
                    break;
                all = tmp;
                cap = ncap;
            }
            ws_workspace_ref(w);
            all[n++] = w;
        }
    pthread_mutex_unlock(&r->lock);

    for (size_t i = 0; i < n; i++) {
        struct ws_workspace *ws = all[i];
        const Workspace__V1__Lifetime *lt = ws->rec->lifetime;

        if (lt && lt->idle_timeout_ms && r->busy_hook && r->busy_hook(r->busy_hook_ud, ws->id))
            touch(ws);
        pthread_mutex_lock(&ws->lock);
        int64_t at = expires_locked(ws);
        enum ws_state st = ws->state;
        pthread_mutex_unlock(&ws->lock);
        bool live = st == WS_STATE_OPEN || st == WS_STATE_CONFIGURED || st == WS_STATE_FAILED;
        if (live && at && at <= ws_wall_ms()) {
            struct ws_diag d = {0};
            bool already = false;

            /* A Close that cannot finish now (an attach in flight, a
             * daemon that failed the detach) is tried again next tick. */
            if (close_id(r, ws_workspace_tenant(ws), ws->id, true, &d, &already) == 0 && !already)
                ws_metrics_expired(ws->provider->ops->name); /* metrics hook */
        }
        ws_workspace_unref(ws);
    }
    free(all);
}

/* Gives the heap's free memory back to the system once closes have
 * stopped for a tick. glibc keeps what a burst of workspaces freed in
 * its per-thread arenas: after 10,000 commands over 100 workspaces, all
 * closed, the server held 225 MiB more than before; trimmed, it is back
 * to its baseline. Waiting for a quiet tick keeps the trim (which holds
 * each arena's lock while it walks it) out of a burst's way. */
static void trim_after_closes(struct ws_registry *r, uint_fast64_t *seen)
{
    uint_fast64_t now = atomic_load(&r->closes);

    if (now == *seen && now != r->closes_trimmed) {
        malloc_trim(0);
        r->closes_trimmed = now;
    }
    *seen = now;
}

static void *reaper_main(void *arg)
{
    struct ws_registry *r = arg;
    uint_fast64_t seen = atomic_load(&r->closes);

    pthread_mutex_lock(&r->lock);
    while (!r->reaper_stop) {
        pthread_mutex_unlock(&r->lock);
        ws_registry_reap(r);
        trim_after_closes(r, &seen);
        pthread_mutex_lock(&r->lock);
        if (r->reaper_stop)
            break;
        int64_t ns = ws_mono_ns() + (int64_t)WS_REAPER_TICK_MS * WS_NSEC_PER_MSEC;
        struct timespec until = {.tv_sec = (time_t)(ns / WS_NSEC_PER_SEC),
                                 .tv_nsec = (long)(ns % WS_NSEC_PER_SEC)};
        pthread_cond_timedwait(&r->reaper_cond, &r->lock, &until);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

int ws_registry_start_reaper(struct ws_registry *r)
{
    int err;

    if (r->reaper_running)
        return 0;
    r->reaper_stop = false;
    err = pthread_create(&r->reaper, NULL, reaper_main, r);
    if (err)
        return -err;
    r->reaper_running = true;
    return 0;
}

void ws_registry_stop_reaper(struct ws_registry *r)
{
    if (!r->reaper_running)
        return;
    pthread_mutex_lock(&r->lock);
    r->reaper_stop = true;
    pthread_cond_signal(&r->reaper_cond);
    pthread_mutex_unlock(&r->lock);
    pthread_join(r->reaper, NULL);
    r->reaper_running = false;
}

int ws_registry_extend(struct ws_registry *r, const char *tenant, const char *id, uint64_t ttl_ms,
                       uint64_t idle_ms, struct ws_diag *d, struct ws_workspace_info *ret)
{
    struct ws_workspace *ws = NULL;
    int err;

    if (!ttl_ms && !idle_ms) {
        ws_diag_set(d, "lifetime: ttl_ms or idle_timeout_ms is required");
        ws_diag_meta(d, "field", "lifetime");
        return -WS_EMALFORMED;
    }
    if (idle_ms > WS_LIFETIME_MS_MAX || ttl_ms > WS_LIFETIME_MS_MAX) {
        ws_diag_set(d, "lifetime over the limit of %llu ms",
                    (unsigned long long)WS_LIFETIME_MS_MAX);
        ws_diag_meta(d, "field", "lifetime.%s",
                     ttl_ms > WS_LIFETIME_MS_MAX ? "ttl_ms" : "idle_timeout_ms");
        ws_diag_meta(d, "limit", "%llu", (unsigned long long)WS_LIFETIME_MS_MAX);
        return -WS_ELIMIT;
    }
    err = ws_registry_get(r, tenant, id, 0, d, &ws);
    if (err < 0)
        return err;
    Workspace__V1__Lifetime *fresh = ws->rec->lifetime ? NULL : malloc(sizeof(*fresh));
    int64_t now = ws_wall_ms();

    pthread_mutex_lock(&ws->lock);
    Record *rec = ws->rec;
    int64_t cap_at = r->max_lifetime_ms ? rec->created_unix_ms + (int64_t)r->max_lifetime_ms : 0;
    if (ttl_ms && cap_at && now + (int64_t)ttl_ms > cap_at) {
        pthread_mutex_unlock(&ws->lock);
        free(fresh);
        ws_diag_set(d, "the workspace may live %lld ms more (--max-lifetime)",
                    (long long)(cap_at > now ? cap_at - now : 0));
        ws_diag_meta(d, "field", "lifetime.ttl_ms");
        ws_diag_meta(d, "limit", "%lld", (long long)(cap_at > now ? cap_at - now : 0));
        ws_workspace_unref(ws);
        return -WS_ELIMIT;
    }
    if (!rec->lifetime) {
        if (!fresh) {
            pthread_mutex_unlock(&ws->lock);
            ws_workspace_unref(ws);
            return -ENOMEM;
        }
        workspace__v1__lifetime__init(fresh);
        rec->lifetime = fresh; /* freed with the record (malloc'ed) */
    } else {
        free(fresh);
    }
    Workspace__V1__Lifetime old = *rec->lifetime;
    int64_t old_at = rec->ttl_expires_unix_ms;
    if (ttl_ms) {
        rec->lifetime->ttl_ms = ttl_ms;
        rec->ttl_expires_unix_ms = now + (int64_t)ttl_ms;
    }
    if (idle_ms)
        rec->lifetime->idle_timeout_ms = idle_ms;
    pthread_mutex_unlock(&ws->lock);
    err = save_record(r, ws);
    if (err < 0) {
        pthread_mutex_lock(&ws->lock);
        *rec->lifetime = old;
        rec->ttl_expires_unix_ms = old_at;
        pthread_mutex_unlock(&ws->lock);
    }
    if (err == 0 && ret)
        ws_workspace_describe(ws, ret);
    ws_workspace_unref(ws);
    return err;
}

/* Names the record has that `s` holds no value of, comma-separated into
 * buf; whether there is one. ws->lock held. */
static bool missing_names(const struct ws_workspace *ws, const struct ws_secrets *s, char *buf,
                          size_t size)
{
    size_t used = 0;
    bool any = false;

    if (size)
        buf[0] = '\0';
    for (size_t i = 0; i < ws->rec->n_secret_names; i++) {
        const char *n = ws->rec->secret_names[i];
        if (ws_secrets_get(s, n))
            continue;
        any = true;
        if (used < size) {
            int k = snprintf(buf + used, size - used, "%s%s", used ? "," : "", n);
            used += k > 0 ? (size_t)k : 0;
        }
    }
    return any;
}

int ws_workspace_secrets_use(struct ws_workspace *ws, const char *const *names, size_t n_names,
                             int (*fn)(void *ud, const char *name, const char *value), void *ud,
                             struct ws_diag *d)
{
    char missing[WS_DIAG_VALUE_MAX];
    int err = 0;

    pthread_mutex_lock(&ws->lock);
    if (missing_names(ws, ws->secrets, missing, sizeof(missing))) {
        pthread_mutex_unlock(&ws->lock);
        ws_diag_set(d, "the server restarted since the workspace's secrets were given: "
                       "SetSecrets supplies them again");
        ws_diag_meta(d, "names", "%s", missing);
        return -WS_ESECRETS;
    }
    for (size_t i = 0; i < n_names && err == 0; i++) {
        const char *v = ws_secrets_get(ws->secrets, names[i]);

        if (!v) {
            ws_diag_set(d, "the workspace has no secret of that name");
            ws_diag_meta(d, "field", "secrets");
            ws_diag_meta(d, "name", "%s", names[i]);
            err = -WS_EMALFORMED;
            break;
        }
        err = fn(ud, names[i], v);
    }
    pthread_mutex_unlock(&ws->lock);
    return err;
}

void ws_strv_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

static int names_copy(char *const *names, size_t n, char ***ret)
{
    char **v = calloc(n ? n : 1, sizeof(*v));

    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        v[i] = strdup(names[i]);
        if (!v[i]) {
            ws_strv_free(v, i);
            return -ENOMEM;
        }
    }
    *ret = v;
    return 0;
}

int ws_workspace_secret_names(struct ws_workspace *ws, char ***ret, size_t *ret_n)
{
    int err;

    pthread_mutex_lock(&ws->lock);
    err = names_copy(ws->rec->secret_names, ws->rec->n_secret_names, ret);
    if (err == 0)
        *ret_n = ws->rec->n_secret_names;
    pthread_mutex_unlock(&ws->lock);
    return err;
}

int ws_registry_set_secrets(struct ws_registry *r, const char *tenant, const char *id,
                            const struct ws_secret *pairs, size_t n, bool replace,
                            struct ws_diag *d, char ***ret_names, size_t *ret_n_names,
                            bool *ret_missing)
{
    struct ws_guard_env env[WS_SECRETS_MAX];
    struct ws_workspace *ws = NULL;
    struct ws_secrets *set = NULL, *old;
    char **names = NULL, **old_names;
    size_t n_names = 0, old_n;
    int err;

    if (n > WS_SECRETS_MAX) {
        ws_diag_set(d, "more than %d secrets", WS_SECRETS_MAX);
        ws_diag_meta(d, "field", "secrets");
        ws_diag_meta(d, "limit", "%d", WS_SECRETS_MAX);
        return -WS_ELIMIT;
    }
    for (size_t i = 0; i < n; i++)
        env[i] = (struct ws_guard_env){.name = pairs[i].name, .value = pairs[i].value};
    err = ws_registry_get(r, tenant, id, WS_CAP_SHELL, d, &ws);
    if (err < 0)
        return err;
    const struct ws_provider_exec_env *xe = ws->provider->ops->exec_env;
    err = ws_guard_check_env(xe && xe->on_host, env, n, d);
    if (err < 0) {
        ws_diag_meta(d, "field", "secrets");
        goto out;
    }
    pthread_mutex_lock(&ws->lock);
    err = replace ? ws_secrets_new(pairs, n, &set) : ws_secrets_merge(ws->secrets, pairs, n, &set);
    /* The names: the record's (unless replaced) and the new ones. */
    if (err == 0) {
        names = calloc(ws->rec->n_secret_names + n + 1, sizeof(*names));
        if (!names)
            err = -ENOMEM;
    }
    for (size_t i = 0; err == 0 && !replace && i < ws->rec->n_secret_names; i++)
        names[n_names++] = ws->rec->secret_names[i];
    for (size_t i = 0; err == 0 && i < n; i++) {
        bool dup = false;
        for (size_t j = 0; j < n_names && !dup; j++)
            dup = strcmp(names[j], pairs[i].name) == 0;
        if (!dup)
            names[n_names++] = (char *)pairs[i].name;
    }
    size_t total = 0;
    for (size_t i = 0; err == 0 && i < ws_secrets_count(set); i++) {
        const char *k, *v;
        ws_secrets_at(set, i, &k, &v);
        total += strlen(v);
    }
    if (err == 0 && (total > WS_SECRETS_BYTES_MAX || n_names > WS_SECRETS_MAX)) {
        ws_diag_set(d, "the workspace's secrets would exceed %d names or %d bytes", WS_SECRETS_MAX,
                    WS_SECRETS_BYTES_MAX);
        ws_diag_meta(d, "field", "secrets");
        ws_diag_meta(d, "limit", "%d", WS_SECRETS_BYTES_MAX);
        err = -WS_ELIMIT;
    }
    char **copy = NULL;
    if (err == 0)
        err = names_copy(names, n_names, &copy);
    free(names);
    if (err < 0) {
        pthread_mutex_unlock(&ws->lock);
        ws_secrets_free(set);
        goto out;
    }
    old_names = ws->rec->secret_names;
    old_n = ws->rec->n_secret_names;
    ws->rec->secret_names = copy;
    ws->rec->n_secret_names = n_names;
    pthread_mutex_unlock(&ws->lock);
    err = save_record(r, ws);
    pthread_mutex_lock(&ws->lock);
    if (err < 0) {
        ws->rec->secret_names = old_names;
        ws->rec->n_secret_names = old_n;
        pthread_mutex_unlock(&ws->lock);
        ws_strv_free(copy, n_names);
        ws_secrets_free(set);
        goto out;
    }
    ws_strv_free(old_names, old_n);
    old = ws->secrets;
    ws->secrets = set;
    char missing[WS_DIAG_VALUE_MAX];
    ws->secrets_missing = missing_names(ws, set, missing, sizeof(missing));
    *ret_missing = ws->secrets_missing;
    err = names_copy(ws->rec->secret_names, ws->rec->n_secret_names, ret_names);
    *ret_n_names = ws->rec->n_secret_names;
    pthread_mutex_unlock(&ws->lock);
    ws_secrets_free(old);
out:
    ws_workspace_unref(ws);
    return err;
}

void ws_registry_set_close_hook(struct ws_registry *r, ws_registry_close_hook fn, void *userdata)
{
    r->close_hook = fn;
    r->close_hook_ud = userdata;
}

int ws_registry_workspace_path(struct ws_registry *r, const struct ws_workspace *ws, char *buf,
                               size_t len)
{
    if (!ws->provider->ops->on_disk)
        return -EINVAL;
    int n = snprintf(buf, len, "%s/%s", r->root_path, ws->id);
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    return 0;
}

void ws_registry_list(struct ws_registry *r, const char *tenant, ws_registry_list_cb cb,
                      void *userdata)
{
    struct ws_workspace **all = NULL;
    size_t n = 0, cap = 0;

    pthread_mutex_lock(&r->lock);
    for (size_t b = 0; b < BUCKETS; b++)
        for (struct ws_workspace *w = r->buckets[b]; w; w = w->next) {
            if (!owned_by(w, tenant))
                continue;
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 64;
                struct ws_workspace **tmp = realloc(all, ncap * sizeof(*all));
                if (!tmp)
                    goto unlock;
                all = tmp;
                cap = ncap;
            }
            ws_workspace_ref(w);
            all[n++] = w;
        }
unlock:
    pthread_mutex_unlock(&r->lock);
    for (size_t i = 0; i < n; i++) {
        cb(userdata, all[i]);
        ws_workspace_unref(all[i]);
    }
    free(all);
}

bool ws_registry_memory_explain(struct ws_diag *d)
{
    return ws_memquota_explain(d);
}

/* ---- the per-tenant byte quota ---- */

/* Measures the tenant's stale workspaces (each at most once at a time;
 * a second caller waits for the first one's result). Registry lock not
 * held. */
static void usage_refresh(struct ws_registry *r, const char *tenant)
{
    struct ws_workspace **stale = NULL;
    size_t n = 0, cap = 0;

    pthread_mutex_lock(&r->lock);
    for (size_t b = 0; b < BUCKETS; b++)
        for (struct ws_workspace *w = r->buckets[b]; w; w = w->next) {
            if (!w->usage_stale || !w->counted || !owned_by(w, tenant))
                continue;
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 16;
                struct ws_workspace **tmp = reallocarray(stale, ncap, sizeof(*stale));
                if (!tmp)
                    goto unlock; /* the rest keep their last figure */
                stale = tmp;
                cap = ncap;
            }
            ws_workspace_ref(w);
            stale[n++] = w;
        }
unlock:
    pthread_mutex_unlock(&r->lock);
    for (size_t i = 0; i < n; i++) {
        struct ws_workspace *w = stale[i];
        struct ws_fsops *ops = ws_workspace_fsops(w);
        uint64_t bytes = 0, charges;
        bool measure;
        int err;

        pthread_mutex_lock(&w->measure_lock);
        pthread_mutex_lock(&r->lock);
        /* Not attached yet (after a restart): it is measured once used. */
        measure = w->usage_stale && ops;
        if (measure)
            w->usage_stale = false;
        charges = w->usage_charges;
        pthread_mutex_unlock(&r->lock);
        if (measure) {
            err = ws_usage_measure(ops, &bytes);
            pthread_mutex_lock(&r->lock);
            if (err == 0) {
                w->usage = bytes;
                w->usage_unmeasurable = false;
            } else {
                w->usage_unmeasurable = true;
                /* Too big stays too big until its files change; anything
                 * else is tried again next time. */
                if (err != -WS_ELIMIT)
                    w->usage_stale = true;
            }
            /* A write charged while the walk ran may or may not be in
             * `bytes`: the next charge measures again. */
            if (w->usage_charges != charges)
                w->usage_stale = true;
            pthread_mutex_unlock(&r->lock);
        }
        pthread_mutex_unlock(&w->measure_lock);
        ws_workspace_unref(w);
    }
    free(stale);
}

/* The byte quota of `tenant`: its workspaces and its snapshots. With
 * `apply`, a charge that fits is counted on ws. */
static int tenant_bytes_admit(struct ws_registry *r, const char *tenant, struct ws_workspace *ws,
                              int64_t delta, bool apply, struct ws_diag *d)
{
    uint64_t used = 0, max = r->tenant_max_bytes;
    bool unmeasurable = false;
    int err = 0;

    if (!max)
        return 0;
    if (delta < 0) {
        if (apply)
            ws_registry_usage_refund(r, ws, -delta);
        return 0;
    }
    usage_refresh(r, tenant);
    pthread_mutex_lock(&r->lock);
    /* The store's lock is a leaf. */
    used = r->snaps ? ws_snapstore_tenant_bytes(r->snaps, tenant) : 0;
    for (size_t b = 0; b < BUCKETS; b++)
        for (struct ws_workspace *w = r->buckets[b]; w; w = w->next) {
            if (!w->counted || !owned_by(w, tenant))
                continue;
            used += w->usage;
            unmeasurable = unmeasurable || w->usage_unmeasurable;
        }
    if (unmeasurable) {
        ws_diag_set(d,
                    "a workspace of this tenant holds more than %d entries, %d levels or an "
                    "unreadable directory: its size cannot be measured, so the tenant's "
                    "byte quota counts as used up until entries are removed",
                    WS_USAGE_ENTRIES_MAX, WS_USAGE_DEPTH_MAX);
        err = -WS_EQUOTA;
    } else if (delta == 0 ? used >= max : used > max || (uint64_t)delta > max - used) {
        ws_diag_set(d, "the tenant's workspaces and snapshots hold %llu bytes (limit %llu)%s",
                    (unsigned long long)used, (unsigned long long)max,
                    delta ? ": this would add more than the room left" : "");
        err = -WS_EQUOTA;
    }
    if (err < 0) {
        ws_diag_meta(d, "quota", "tenant_bytes");
        ws_diag_meta(d, "limit", "%llu", (unsigned long long)max);
        ws_diag_meta(d, "used", "%llu", (unsigned long long)used);
    } else if (apply && ws && delta > 0) {
        ws->usage += (uint64_t)delta;
        ws->usage_charges++;
    }
    pthread_mutex_unlock(&r->lock);
    return err;
}

static int usage_admit(struct ws_registry *r, struct ws_workspace *ws, int64_t delta, bool apply,
                       struct ws_diag *d)
{
    return tenant_bytes_admit(r, ws_workspace_tenant(ws), ws, delta, apply, d);
}

int ws_registry_usage_charge(struct ws_registry *r, struct ws_workspace *ws, int64_t delta,
                             struct ws_diag *d)
{
    return usage_admit(r, ws, delta, true, d);
}

int ws_registry_usage_check(struct ws_registry *r, struct ws_workspace *ws, int64_t delta,
                            struct ws_diag *d)
{
    return usage_admit(r, ws, delta, false, d);
}

void ws_registry_usage_refund(struct ws_registry *r, struct ws_workspace *ws, int64_t delta)
{
    if (!r->tenant_max_bytes || delta <= 0)
        return;
    pthread_mutex_lock(&r->lock);
    ws->usage = ws->usage > (uint64_t)delta ? ws->usage - (uint64_t)delta : 0;
    ws->usage_charges++;
    pthread_mutex_unlock(&r->lock);
}

void ws_registry_usage_stale(struct ws_registry *r, const char *id)
{
    struct ws_workspace *ws;

    if (!r->tenant_max_bytes || !id_valid(id))
        return;
    pthread_mutex_lock(&r->lock);
    ws = table_find(r, id);
    if (ws)
        ws->usage_stale = true;
    pthread_mutex_unlock(&r->lock);
}

/* ---- snapshots ---- */

int ws_registry_snapshot_get(struct ws_registry *r, const char *tenant, const char *id,
                             struct ws_diag *d, struct ws_snap **ret)
{
    int err = ws_snapstore_get(r->snaps, tenant_or_default(tenant), id ? id : "", ret);

    if (err == -WS_ENOSNAPSHOT) {
        ws_diag_set(d, "no such snapshot");
        ws_diag_meta(d, "snapshot_id", "%.40s", id ? id : "");
    }
    return err;
}

int ws_registry_snapshots(struct ws_registry *r, const char *tenant, struct ws_snap ***ret,
                          size_t *ret_n)
{
    return ws_snapstore_list(r->snaps, tenant_or_default(tenant), ret, ret_n);
}

int ws_registry_delete_snapshot(struct ws_registry *r, const char *tenant, const char *id,
                                struct ws_diag *d, uint64_t *ret_reclaimed)
{
    int err = ws_snapstore_delete(r->snaps, tenant_or_default(tenant), id ? id : "", ret_reclaimed);

    if (err == -WS_ENOSNAPSHOT) {
        ws_diag_set(d, "no such snapshot");
        ws_diag_meta(d, "snapshot_id", "%.40s", id ? id : "");
    }
    return err;
}

/* A request's or a record's labels as the store keeps them. */
static int kv_of(Workspace__V1__SnapshotRequest__LabelsEntry *const *in, size_t n,
                 struct ws_snap_kv **ret)
{
    struct ws_snap_kv *kv = calloc(n ? n : 1, sizeof(*kv));

    if (!kv)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        kv[i] = (struct ws_snap_kv){in[i]->key, in[i]->value};
    *ret = kv;
    return 0;
}

int ws_registry_snapshot(struct ws_registry *r, const char *tenant,
                         const Workspace__V1__SnapshotRequest *req, struct ws_diag *d,
                         struct ws_snap **ret)
{
    const char *who = tenant_or_default(tenant);
    const char *name = req->name ? req->name : "";
    struct ws_label labels[WS_LABELS_MAX];
    struct ws_snap_kv *kv = NULL, *wkv = NULL;
    struct ws_workspace *ws = NULL;
    struct ws_snap *s = NULL;
    struct ws_fsops *ops;
    int err;

    if (name[0]) {
        err = ws_name_check(name, d);
        if (err < 0)
            return err;
    }
    if (req->n_labels > WS_LABELS_MAX)
        return ws_labels_check(NULL, req->n_labels, d);
    for (size_t i = 0; i < req->n_labels; i++)
        labels[i] = (struct ws_label){.key = req->labels[i]->key, .value = req->labels[i]->value};
    err = ws_labels_check(labels, req->n_labels, d);
    if (err < 0)
        return err;
    err = ws_registry_get(r, tenant, req->workspace_id, 0, d, &ws);
    if (err < 0)
        return err;
    ops = ws_workspace_fsops(ws);
    if (!ops) {
        err = -WS_EFAILED;
        goto out;
    }
    const Record *rec = ws->rec;
    err = kv_of(req->labels, req->n_labels, &kv);
    if (err == 0)
        err = kv_of((Workspace__V1__SnapshotRequest__LabelsEntry *const *)rec->labels,
                    rec->n_labels, &wkv);
    if (err < 0)
        goto out;
    const struct ws_snap_source src = {
        .tenant = who,
        .name = name,
        .labels = kv,
        .n_labels = req->n_labels,
        .workspace_id = ws->id,
        .provider = ws->provider->ops->name,
        .ws_labels = wkv,
        .n_ws_labels = rec->n_labels,
    };
    err = ws_snapstore_begin(r->snaps, &src, d, &s);
    if (err < 0)
        goto out;
    /* Writes through the file API wait meanwhile. */
    ws_fsops_freeze(ops);
    err = ws_snapstore_fill(r->snaps, s, ws_fsops_vfs(ops), d);
    ws_fsops_thaw(ops);
    /* Counted from its commit on: a snapshot the quota has no room for
     * is not kept. */
    if (err == 0)
        err = tenant_bytes_admit(r, who, NULL, (int64_t)s->bytes, false, d);
    if (err == 0)
        err = ws_snapstore_commit(r->snaps, s);
    if (err < 0) {
        ws_snapstore_abort(r->snaps, s);
        ws_snap_unref(s);
        goto out;
    }
    *ret = s;
out:
    if (err < 0)
        ws_workspace_note(ws, err, d);
    free(kv);
    free(wkv);
    ws_workspace_unref(ws);
    return err;
}

int ws_registry_restore(struct ws_registry *r, const char *tenant, const char *id,
                        struct ws_snap *snap, struct ws_diag *d)
{
    struct fill_admit fa = {r, tenant_or_default(tenant)};
    struct ws_workspace *ws = NULL;
    struct ws_fsops *ops;
    int err;

    err = ws_registry_get(r, tenant, id, 0, d, &ws);
    if (err < 0)
        return err;
    ops = ws_workspace_fsops(ws);
    if (!ops) {
        ws_workspace_unref(ws);
        return -WS_EFAILED;
    }
    uint64_t max = ws_workspace_max_file_size(ws);
    struct ws_copy_caps caps = {
        .max_file_size = max ? max : r->max_file_size, .admit = fill_admit, .admit_ud = &fa};
    ws_fsops_freeze(ops);
    err = ws_snapstore_restore(r->snaps, snap, ws_fsops_vfs(ops), &caps, d, NULL);
    ws_fsops_thaw(ops);
    /* Its files changed behind the charges. */
    pthread_mutex_lock(&r->lock);
    ws->usage_stale = true;
    pthread_mutex_unlock(&r->lock);
    ws_workspace_note(ws, err, d);
    ws_workspace_unref(ws);
    return err;
}

/* ---- start-up ---- */

static int load_records(struct ws_registry *r)
{
    int fd = dup(r->records_fd);
    DIR *dir;
    struct dirent *de;

    if (fd < 0)
        return -errno;
    dir = fdopendir(fd);
    if (!dir) {
        close(fd);
        return -errno;
    }
    while ((de = readdir(dir))) {
        uint8_t *token = NULL;
        size_t len = 0;
        struct ws_workspace *ws = NULL;

        if (!id_valid(de->d_name)) {
            if (de->d_name[0] != '.')
                unlinkat(r->records_fd, de->d_name, 0); /* an interrupted write */
            continue;
        }
        if (ws_storage_read_file(r->records_fd, de->d_name, WS_REF_TOKEN_MAX, &token, &len) < 0)
            continue;
        if (workspace_new(r, token, len, WS_STATE_CONFIGURED, &ws) < 0 ||
            strcmp(ws->id, de->d_name) != 0 || !ws->provider->ops->on_disk) {
            ws_workspace_unref(ws);
            continue; /* not ours or damaged: never trusted, kept for an operator */
        }
        struct stat st;
        if (fstatat(r->root_fd, ws->id, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode)) {
            unlinkat(r->records_fd, ws->id, 0); /* evicted while we were down */
            ws_workspace_unref(ws);
            continue;
        }
        /* Its uid, if the record has one of the range that no other record
         * claimed; else a new one at its first attach. In memory the
         * record's uid is the one the workspace holds in this run (0:
         * none), the file keeps what it has until then. */
        Record *rec = ws->rec;
        if (r->uids && rec->uid == rec->gid && ws_uids_claim(r->uids, rec->uid) == 0) {
            ws->uid_held = true;
            ws->uid = rec->uid;
            ws->gid = rec->gid;
        } else {
            rec->uid = 0;
            rec->gid = 0;
        }
        ws->counted = true;
        r->live++;
        tenant_count(r, ws_workspace_tenant(ws), 1);
        table_insert(r, ws);
    }
    closedir(dir);
    return 0;
}

/* Removes directories that look like ours but have no record: the rest of
 * a Close that was interrupted. Anything else in the root is left alone. */
static void sweep_root(struct ws_registry *r)
{
    int fd = dup(r->root_fd);
    DIR *dir;
    struct dirent *de;

    if (fd < 0)
        return;
    dir = fdopendir(fd);
    if (!dir) {
        close(fd);
        return;
    }
    while ((de = readdir(dir))) {
        if (!id_valid(de->d_name) || table_find(r, de->d_name))
            continue;
        ws_storage_remove_tree(r->root_fd, de->d_name);
    }
    closedir(dir);
}

static int open_dir_at(int at, const char *name, bool create, int *ret_fd)
{
    int fd;

    if (create && mkdirat(at, name, 0700) < 0 && errno != EEXIST)
        return -errno;
    fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    *ret_fd = fd;
    return 0;
}

/* One server per state directory: two would hand out the same ids, load
 * each other's records half-written and sweep each other's workspaces. An
 * flock on a file inside it is held for the registry's life (and so the
 * process's: the kernel drops it when the process dies, however it dies).
 * The holder's pid is written in the file for the operator. */
static int lock_state_dir(struct ws_registry *r)
{
    char pid[24];
    int fd, n;

    fd = openat(r->state_fd, LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;

        close(fd);
        return e == EWOULDBLOCK ? -EBUSY : -e;
    }
    r->lock_fd = fd;
    n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        /* The pid is a courtesy to the operator; the lock is what counts. */
    }
    return 0;
}

/* Whether workspace uids are on in this run (cfg->uids_mode), and with
 * which range; the range is checked unless they are off. Touches no file:
 * a refused start leaves the state directory as it was. */
static int uids_decide(struct ws_registry *r, const struct ws_registry_config *cfg, bool *ret_on)
{
    struct ws_uid_range range = cfg->uid_range;
    char why[512];
    int err;

    *ret_on = false;
    if (cfg->uids_mode == WS_UIDS_OFF && geteuid() == 0 && !cfg->allow_root_commands) {
        say(r, true,
            "workspace uids are off ([uids] mode = off) and the server runs as root, so every "
            "command would run as root: turn them on, or say allow-root-commands = true "
            "(--allow-root-commands) to accept that");
        return -EPERM;
    }
    if (cfg->uids_mode == WS_UIDS_OFF)
        return 0;
    if (range.first == 0 && range.last == 0)
        range = (struct ws_uid_range){WS_UIDS_DEFAULT_FIRST, WS_UIDS_DEFAULT_LAST};
    err =
        ws_uids_check_range(&range, NULL, NULL, cfg->peer_uids, cfg->n_peer_uids, why, sizeof(why));
    if (err < 0) {
        say(r, true,
            "the workspace uid range %u-%u cannot be used: it %s. Give a range no account, "
            "group or peer has ([uids] range), or turn workspace uids off ([uids] mode = off)",
            (unsigned)range.first, (unsigned)range.last, why);
        return err;
    }
    err = ws_uids_usable(&range, NULL, NULL, why, sizeof(why));
    if (err < 0 && cfg->uids_mode == WS_UIDS_ON) {
        say(r, true, "workspace uids are on ([uids] mode = on) but cannot be used here: %s", why);
        return err;
    }
    if (err < 0 && geteuid() == 0 && !cfg->allow_root_commands) {
        say(r, true,
            "workspace uids cannot be used here (%s), and without them every command would run "
            "as root: give the server what it lacks, or say allow-root-commands = true "
            "(--allow-root-commands) to accept that",
            why);
        return err;
    }
    if (err < 0) {
        say(r, false,
            "workspace uids are off: %s. Every workspace's files are the server's and its "
            "commands run as the server's uid",
            why);
        return 0;
    }
    r->uid_range = range;
    *ret_on = true;
    return 0;
}

/* The uid of a workspace reaches its directory by path: every directory
 * above `path` must let others search it. The state directory itself is
 * not looked at: uids_paths opens it to search. */
static int check_searchable(struct ws_registry *r, const char *path, const char *what)
{
    char buf[PATH_MAX];
    size_t n = strlen(path);
    struct stat st;
    int err = 0;

    if (n >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    /* From the deepest: each prefix that ends before a '/', then "/". */
    for (size_t i = n; err == 0 && i-- > 0;) {
        if (buf[i] != '/')
            continue;
        buf[i == 0 ? 1 : i] = '\0';
        if (strcmp(buf, r->state_path) == 0)
            continue; /* uids_paths opens it to search */
        if (stat(buf, &st) < 0) {
            err = -errno;
        } else if (!(st.st_mode & S_IXOTH)) {
            say(r, true,
                "workspace uids need every directory above the %s to be searchable by other "
                "users, and '%s' is not (mode %04o): put the state directory where they are (not "
                "under a 0700 home such as /root), let others search it (chmod o+x), or turn "
                "workspace uids off ([uids] mode = off)",
                what, buf, (unsigned)(st.st_mode & 07777));
            err = -EACCES;
        }
    }
    return err;
}

/* With workspace uids on: every directory above the state directory and
 * the workspace root must already let others search it (else nothing is
 * changed); then the state directory lets others search it (0711 for a
 * 0700 one; its entries stay private) and the workspace root becomes 0711
 * (search, no listing). */
static int uids_paths(struct ws_registry *r)
{
    struct stat st;
    int err;

    err = check_searchable(r, r->state_path, "state directory");
    if (err == 0)
        err = check_searchable(r, r->root_path, "workspace root");
    if (err < 0)
        return err;
    if (fstat(r->state_fd, &st) < 0)
        return -errno;
    if (!(st.st_mode & S_IXOTH) &&
        fchmod(r->state_fd, (st.st_mode & 07777) | S_IXGRP | S_IXOTH) < 0)
        return -errno;
    if (fchmod(r->root_fd, 0711) < 0)
        return -errno;
    return 0;
}

/* The file in the state directory that remembers the slot of the default
 * range this server had, so that after a restart its workspaces keep
 * their uids. */
#define UID_RANGE_FILE "uid-range"

/* Takes this server's host-wide lease on its uids: the operator's range
 * exactly, or a slot of the default one (the slot it had before when it
 * is free), which r->uid_range becomes. */
static int uids_lease(struct ws_registry *r, const struct ws_registry_config *cfg)
{
    bool exact = cfg->uid_range.first != 0 || cfg->uid_range.last != 0;
    struct ws_uid_range before = r->uid_range, prefer = {0, 0};
    const char *dir = cfg->uid_lease_dir ? cfg->uid_lease_dir : WS_UIDS_LEASE_DIR;
    bool had = false;
    uint8_t *data = NULL;
    size_t len = 0;
    char why[512], text[48];
    int err;

    if (!exact && ws_storage_read_file(r->state_fd, UID_RANGE_FILE, 64, &data, &len) == 0) {
        char *s = strndup((const char *)data, len);
        const char *ignored;

        if (s)
            s[strcspn(s, "\n")] = '\0';
        had = s && ws_uids_parse_range(s, &prefer, &ignored) == 0;
        free(s);
        free(data);
    }
    /* A server without a recorded slot prefers one picked by its state
     * directory's identity, so that fresh servers spread over the slots
     * rather than all taking the first free one, which a stopped server's
     * workspaces may still own files of. */
    struct stat st;
    if (!had && fstat(r->state_fd, &st) == 0) {
        uint64_t size = (uint64_t)r->uid_range.last - r->uid_range.first + 1;
        uint64_t slots = size / WS_UIDS_SLOT;

        if (slots > 1) {
            uint64_t k = ((uint64_t)st.st_dev * 0x9e3779b97f4a7c15ull) ^ (uint64_t)st.st_ino;
            uint64_t first = r->uid_range.first + (k % slots) * WS_UIDS_SLOT;

            prefer = (struct ws_uid_range){(uid_t)first, (uid_t)(first + WS_UIDS_SLOT - 1)};
            had = true;
        }
    }
    err = ws_uids_lease_take(dir, &r->uid_range, exact, had ? &prefer : NULL, &r->uid_lease, why,
                             sizeof(why));
    if (err < 0) {
        say(r, true, "the workspace uid range %u-%u cannot be used: it %s", (unsigned)before.first,
            (unsigned)before.last, why);
        /* Not the state directory's lock (-EBUSY). */
        return err == -EBUSY ? -EUSERS : err;
    }
    if (!exact) {
        len = (size_t)snprintf(text, sizeof(text), "%u-%u\n", (unsigned)r->uid_range.first,
                               (unsigned)r->uid_range.last);
        err = ws_storage_write_file(r->state_fd, UID_RANGE_FILE, UID_RANGE_FILE ".tmp",
                                    (const uint8_t *)text, len);
        if (err < 0)
            say(r, true, "cannot record the workspace uid range in the state directory: %s",
                strerror(-err));
    }
    return err;
}

bool ws_registry_uids_on(const struct ws_registry *r)
{
    return r->uids != NULL;
}

uid_t ws_registry_helper_uid(const struct ws_registry *r)
{
    return r->uids ? ws_uids_helper(r->uids) : (uid_t)-1;
}

bool ws_registry_uid_in_range(const struct ws_registry *r, uid_t uid)
{
    return r->uids && uid >= r->uid_range.first && uid <= r->uid_range.last;
}

int ws_registry_new(const struct ws_registry_config *cfg, struct ws_registry **ret)
{
    struct ws_registry *r;
    int err;

    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->state_fd = r->records_fd = r->root_fd = r->lock_fd = -1;
    r->say = cfg->say;
    r->say_ud = cfg->say_ud;
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->policy_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->reaper_cond, &ca);
    pthread_condattr_destroy(&ca);
    if (cfg->policy) {
        r->policy = ws_policy_set_ref(cfg->policy);
    } else {
        err = ws_policy_set_new(&r->policy);
        if (err == 0)
            err = ws_policy_set_finish(r->policy);
        if (err < 0) {
            ws_policy_set_unref(r->policy);
            pthread_cond_destroy(&r->reaper_cond);
            pthread_mutex_destroy(&r->policy_lock);
            pthread_mutex_destroy(&r->lock);
            free(r);
            return err;
        }
    }
    r->max_workspaces = cfg->max_workspaces ? cfg->max_workspaces : WS_DEFAULT_MAX_WORKSPACES;
    r->max_lifetime_ms = cfg->max_lifetime_ms;
    r->default_idle_ms = cfg->default_idle_timeout_ms;
    err = ws_requests_new(&r->requests);
    if (err < 0)
        goto fail;
    r->tenant_max_workspaces = cfg->tenant_max_workspaces;
    r->tenant_opens_per_minute = cfg->tenant_opens_per_minute;
    r->tenant_max_bytes = cfg->tenant_max_bytes;
    err = ws_memquota_new(cfg->tenant_memory_bytes, &r->memquota);
    if (err < 0)
        goto fail;
    r->providers_enabled = cfg->providers_enabled;
    r->max_file_size = cfg->max_file_size ? cfg->max_file_size : WS_DEFAULT_MAX_FILE_SIZE;
    r->limits.memory_max_bytes =
        cfg->memory_max_bytes ? cfg->memory_max_bytes : WS_DEFAULT_MEMORY_MAX_BYTES;
    bool uids_on = false;
    err = uids_decide(r, cfg, &uids_on);
    if (err < 0)
        goto fail;
    r->closed = calloc(WS_CLOSED_IDS_KEPT, sizeof(*r->closed));
    err = -ENOMEM;
    if (!r->closed)
        goto fail;
    err = open_dir_at(AT_FDCWD, cfg->state_dir, false, &r->state_fd);
    if (err < 0)
        goto fail;
    err = lock_state_dir(r);
    if (err < 0)
        goto fail;
    err = ws_ref_key_load(r->state_fd, &r->key);
    if (err < 0)
        goto fail;
    err = open_dir_at(r->state_fd, RECORDS_DIR, true, &r->records_fd);
    if (err < 0)
        goto fail;
    err = ws_snapstore_open(r->state_fd, cfg->max_snapshots, &r->snaps);
    if (err < 0)
        goto fail;
    err = -ENOMEM;
    r->source_allow = calloc(cfg->n_source_allow ? cfg->n_source_allow : 1, sizeof(char *));
    if (!r->source_allow)
        goto fail;
    for (size_t i = 0; i < cfg->n_source_allow; i++) {
        r->source_allow[i] = strdup(cfg->source_allow[i]);
        if (!r->source_allow[i])
            goto fail;
        r->n_source_allow++;
    }
    if (cfg->workspace_root)
        err = open_dir_at(AT_FDCWD, cfg->workspace_root, true, &r->root_fd);
    else
        err = open_dir_at(r->state_fd, DEFAULT_ROOT, true, &r->root_fd);
    if (err < 0)
        goto fail;
    r->state_path = realpath(cfg->state_dir, NULL);
    r->root_path = cfg->workspace_root ? realpath(cfg->workspace_root, NULL) : NULL;
    if (!r->root_path && r->state_path &&
        asprintf(&r->root_path, "%s/%s", r->state_path, DEFAULT_ROOT) < 0)
        r->root_path = NULL;
    err = -ENOMEM;
    if (!r->state_path || !r->root_path)
        goto fail;
    if (uids_on) {
        err = uids_paths(r);
        if (err == 0)
            err = uids_lease(r, cfg);
        if (err == 0)
            err = ws_uids_new(&r->uid_range, NULL, &r->uids);
        if (err < 0)
            goto fail;
    }
    err = load_records(r);
    if (err < 0)
        goto fail;
    sweep_root(r);
    *ret = r;
    return 0;
fail:
    ws_registry_free(r);
    return err;
}

void ws_registry_free(struct ws_registry *r)
{
    if (!r)
        return;
    ws_registry_stop_reaper(r);
    for (size_t b = 0; b < BUCKETS; b++)
        while (r->buckets[b]) {
            struct ws_workspace *w = r->buckets[b];
            r->buckets[b] = w->next;
            ws_workspace_unref(w);
        }
    if (r->state_fd >= 0)
        close(r->state_fd);
    if (r->records_fd >= 0)
        close(r->records_fd);
    if (r->root_fd >= 0)
        close(r->root_fd);
    if (r->lock_fd >= 0)
        close(r->lock_fd);
    free(r->closed);
    while (r->tenants) {
        struct tenant_use *t = r->tenants;
        r->tenants = t->next;
        free(t);
    }
    free(r->state_path);
    free(r->root_path);
    ws_uids_free(r->uids);
    ws_uids_lease_free(r->uid_lease);
    ws_memquota_free(r->memquota);
    ws_policy_set_unref(r->policy);
    ws_requests_free(r->requests);
    ws_snapstore_free(r->snaps);
    for (size_t i = 0; i < r->n_source_allow; i++)
        free(r->source_allow[i]);
    free(r->source_allow);
    while (r->pending_names) {
        struct pending_name *p = r->pending_names;
        r->pending_names = p->next;
        free(p);
    }
    pthread_cond_destroy(&r->reaper_cond);
    pthread_mutex_destroy(&r->policy_lock);
    pthread_mutex_destroy(&r->lock);
    free(r);
}
