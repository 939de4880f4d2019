/* Workspaces: Open, Resolve, Close, Describe, List, ReadAudit, Extend,
 * SetSecrets, and the snapshots: Snapshot, ListSnapshots, DeleteSnapshot,
 * Restore.
 *
 * Open, Resolve, Close and a Describe whose provider has a section of its
 * own may talk to a container daemon (a pull, an attach, a detach, an
 * inspect): they run on the pool's DAEMON lane, so a slow daemon holds up
 * only its own tenant's calls. The job's ctl carries the call's deadline
 * and its cancel down to the provider (ws_work_ctl_current): an image
 * pull inside an Open ends before the client's deadline instead of
 * holding the lane's thread for the server's own limit. List and
 * ReadAudit read the server's own state and stay on the thread that
 * delivered the call. Snapshot, DeleteSnapshot and Restore copy or sweep
 * trees: they run on the FS lane; ListSnapshots reads the store's list. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/audit/audit.h"
#include "server/base/macros.h"
#include "server/base/time.h"
#include "server/base/version.h"
#include "server/exec/exec.h"
#include "server/exec/process.h"
#include "server/metrics/metrics.h"
#include "server/registry/labels.h"
#include "server/registry/secrets.h"
#include "server/rpc/services/internal.h"
#include "workspace/v1/workspaces.pb-c.h"

/* A string map of a response, made from one of the record's: every
 * string-to-string map entry has the layout of this one, under its own
 * descriptor. The strings stay the record's. */
typedef Workspaced__Internal__V1__WorkspaceRecord__LabelsEntry map_entry;

struct map_out {
    map_entry *entries;
    map_entry **ptrs;
    size_t n;
};

static int map_out(const ProtobufCMessageDescriptor *desc, map_entry *const *in, size_t n,
                   struct map_out *out)
{
    out->entries = calloc(n ? n : 1, sizeof(*out->entries));
    out->ptrs = calloc(n ? n : 1, sizeof(*out->ptrs));
    if (!out->entries || !out->ptrs)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        protobuf_c_message_init(desc, &out->entries[i]);
        out->entries[i].key = in[i]->key;
        out->entries[i].value = in[i]->value;
        out->ptrs[i] = &out->entries[i];
    }
    out->n = n;
    return 0;
}

static void map_out_free(struct map_out *m)
{
    free(m->entries);
    free(m->ptrs);
}

/* A Workspace message and what it points at. */
struct workspace_out {
    Workspace__V1__Workspace w;
    Workspace__V1__WorkspaceRef ref;
    Workspace__V1__Lifetime lifetime;
    struct map_out labels;
};

/* Fills `o` from a live workspace; strings stay owned by the workspace,
 * which the caller keeps referenced until the send. */
static int fill_workspace(struct ws_workspace *ws, struct workspace_out *o)
{
    const ws_record *rec = ws_workspace_record(ws);
    struct ws_workspace_info info;
    const uint8_t *token;
    size_t len;

    workspace__v1__workspace__init(&o->w);
    workspace__v1__workspace_ref__init(&o->ref);
    workspace__v1__lifetime__init(&o->lifetime);
    ws_workspace_token(ws, &token, &len);
    o->ref.token.data = (uint8_t *)token;
    o->ref.token.len = len;
    o->w.id = (char *)ws_workspace_id(ws);
    o->w.ref = &o->ref;
    o->w.provider = (char *)ws_workspace_provider(ws)->ops->name;
    o->w.capabilities = (Workspace__V1__Capabilities *)ws_workspace_capabilities(ws);
    ws_workspace_describe(ws, &info);
    o->w.expires_at_unix_ms = info.expires_at_ms;
    o->lifetime.ttl_ms = info.ttl_ms;
    o->lifetime.idle_timeout_ms = info.idle_timeout_ms;
    o->w.lifetime = &o->lifetime;
    o->w.name = rec->name;
    if (map_out(&workspace__v1__workspace__labels_entry__descriptor, rec->labels, rec->n_labels,
                &o->labels) < 0)
        return -ENOMEM;
    o->w.labels = (Workspace__V1__Workspace__LabelsEntry **)o->labels.ptrs;
    o->w.n_labels = o->labels.n;
    return 0;
}

/* How Open and Resolve end: with err (and d), or with `resp` whose
 * `workspace` (*slot, pointing here only while resp is sent) describes
 * ws; then the handler's reference goes (the strings point into ws, and
 * the message is serialized before that). */
static void finish_workspace(struct ws_call *call, int err, const struct ws_diag *d,
                             struct ws_workspace *ws, ProtobufCMessage *resp,
                             Workspace__V1__Workspace **slot)
{
    struct workspace_out o = {0};

    if (err < 0) {
        ws_call_fail(call, err, d);
        return;
    }
    if (fill_workspace(ws, &o) < 0)
        ws_call_fail(call, -ENOMEM, NULL);
    else {
        *slot = &o.w;
        ws_call_finish(call, resp);
    }
    map_out_free(&o.labels);
    ws_workspace_unref(ws);
}

/* metrics: the provider an OpenRequest names, from the oneof (never the
 * client's text), and the outcome label of an error. */
static const char *open_provider(const struct ws_services *s, const Workspace__V1__OpenRequest *req)
{
    const struct ws_provider *p = ws_providers_of_request(s->providers, req);

    return p ? p->ops->name : "unknown";
}

static const char *error_reason(int err)
{
    const char *reason;

    ws_rpc_error_status(err, NULL, &reason);
    return reason;
}

/* The state of an offloaded call, and its request copy as type T. */
#define UNARY_REQ(call, T) ((const T *)((struct ws_services_unary *)ws_call_data(call))->req)

/* Hands the call to the DAEMON lane: run gets the request copy. */
static void on_daemon(struct ws_call *call, const ProtobufCMessage *msg,
                      void (*run)(struct ws_call *call))
{
    struct ws_services_unary *u = ws_services_unary_new(call, msg);

    if (u)
        ws_services_offload(call, &u->job, WS_SERVICES_LANE_DAEMON, run, NULL);
}

static void open_run(struct ws_call *call)
{
    const Workspace__V1__OpenRequest *req = UNARY_REQ(call, Workspace__V1__OpenRequest);
    struct ws_services *s = ws_call_method_data(call);
    Workspace__V1__OpenResponse resp = WORKSPACE__V1__OPEN_RESPONSE__INIT;
    struct ws_workspace *ws = NULL;
    struct ws_diag d = {0};
    int64_t t0 = ws_mono_ms(); /* metrics */
    int err;

    err = ws_registry_open(s->reg, ws_call_tenant(call), req, &d, &ws);
    ws_metrics_open(open_provider(s, req), err < 0 ? error_reason(err) : "ok",
                    ws_mono_ms() - t0); /* metrics */
    /* The workspace holds its own copy of the secrets: this one goes. */
    for (size_t i = 0; i < req->n_secrets; i++)
        if (req->secrets[i]->value)
            explicit_bzero(req->secrets[i]->value, strlen(req->secrets[i]->value));
    finish_workspace(call, err, &d, ws, &resp.base, &resp.workspace);
}

static void open_ws(struct ws_call *call, const ProtobufCMessage *msg)
{
    on_daemon(call, msg, open_run);
}

static void resolve_run(struct ws_call *call)
{
    const Workspace__V1__ResolveRequest *req = UNARY_REQ(call, Workspace__V1__ResolveRequest);
    struct ws_services *s = ws_call_method_data(call);
    Workspace__V1__ResolveResponse resp = WORKSPACE__V1__RESOLVE_RESPONSE__INIT;
    struct ws_workspace *ws = NULL;
    struct ws_diag d = {0};
    int err;

    if (!req->ref) {
        ws_diag_set(&d, "ref is required");
        ws_diag_meta(&d, "field", "ref");
        ws_call_fail(call, -WS_EMALFORMED, &d);
        return;
    }
    err = ws_registry_resolve(s->reg, ws_call_tenant(call), req->ref->token.data,
                              req->ref->token.len, &d, &ws);
    finish_workspace(call, err, &d, ws, &resp.base, &resp.workspace);
}

static void resolve_ws(struct ws_call *call, const ProtobufCMessage *msg)
{
    on_daemon(call, msg, resolve_run);
}

static void close_run(struct ws_call *call)
{
    const Workspace__V1__CloseRequest *req = UNARY_REQ(call, Workspace__V1__CloseRequest);
    struct ws_services *s = ws_call_method_data(call);
    Workspace__V1__CloseResponse resp = WORKSPACE__V1__CLOSE_RESPONSE__INIT;
    struct ws_diag d = {0};
    bool already = false;
    const char *provider = "unknown"; /* metrics */
    struct ws_workspace *peeked;
    int err;

    /* metrics: the provider is a table name; an unknown id (or another
     * tenant's) stays "unknown". */
    if (ws_registry_peek(s->reg, ws_call_tenant(call), req->workspace_id, &peeked) == 0) {
        provider = ws_workspace_provider(peeked)->ops->name;
        ws_workspace_unref(peeked);
    }
    err = ws_registry_close_diag(s->reg, ws_call_tenant(call), req->workspace_id, &d, &already);
    ws_metrics_close(provider, err < 0 ? error_reason(err) : already ? "already_closed" : "ok");
    if (err < 0) {
        if (!d.message[0])
            ws_diag_set(&d, "no such workspace");
        ws_call_fail(call, err, &d);
        return;
    }
    resp.already_closed = already;
    ws_call_finish(call, &resp.base);
}

static void close_ws(struct ws_call *call, const ProtobufCMessage *msg)
{
    on_daemon(call, msg, close_run);
}

static Workspace__V1__WorkspaceState state_of(enum ws_state st)
{
    return (Workspace__V1__WorkspaceState)st; /* same numbering by design */
}

static void append(char **ops, size_t *n, const char *name)
{
    ops[(*n)++] = (char *)name;
}

/* Answers a Describe of ws (a reference the caller keeps). */
static void describe(struct ws_call *call, struct ws_workspace *ws)
{
    struct ws_services *s = ws_call_method_data(call);
    Workspace__V1__DescribeResponse resp = WORKSPACE__V1__DESCRIBE_RESPONSE__INIT;
    Workspace__V1__ServerInfo server = WORKSPACE__V1__SERVER_INFO__INIT;
    Workspace__V1__Limits limits = WORKSPACE__V1__LIMITS__INIT;
    Workspace__V1__Lifetime lifetime = WORKSPACE__V1__LIFETIME__INIT;
    struct map_out labels = {0}, env = {0};
    char **secret_names = NULL;
    size_t n_secret_names = 0;
    struct ws_workspace_info info;
    char *ops[24];
    size_t n_ops = 0;

    ws_workspace_describe(ws, &info);
    const ws_record *rec = ws_workspace_record(ws);
    if (map_out(&workspace__v1__describe_response__labels_entry__descriptor, rec->labels,
                rec->n_labels, &labels) < 0 ||
        map_out(&workspace__v1__describe_response__env_entry__descriptor,
                (map_entry *const *)rec->env, rec->n_env, &env) < 0 ||
        ws_workspace_secret_names(ws, &secret_names, &n_secret_names) < 0) {
        ws_call_fail(call, -ENOMEM, NULL);
        goto out;
    }
    resp.expires_at_unix_ms = info.expires_at_ms;
    lifetime.ttl_ms = info.ttl_ms;
    lifetime.idle_timeout_ms = info.idle_timeout_ms;
    resp.lifetime = &lifetime;
    resp.last_activity_at_unix_ms = info.activity_ms;
    resp.name = rec->name;
    resp.labels = (Workspace__V1__DescribeResponse__LabelsEntry **)labels.ptrs;
    resp.n_labels = labels.n;
    resp.env = (Workspace__V1__DescribeResponse__EnvEntry **)env.ptrs;
    resp.n_env = env.n;
    resp.secret_names = secret_names;
    resp.n_secret_names = n_secret_names;
    resp.secrets_missing = info.secrets_missing;
    const Workspace__V1__Capabilities *caps = ws_workspace_capabilities(ws);
    resp.id = (char *)ws_workspace_id(ws);
    resp.provider = (char *)ws_workspace_provider(ws)->ops->name;
    resp.state = state_of(info.state);
    uid_t uid;
    gid_t gid;
    /* Only where its commands and files are that uid's. */
    if (ws_provider_uid_owns_storage(ws_workspace_provider(ws)) &&
        ws_workspace_uid(ws, &uid, &gid)) {
        resp.uid = uid;
        resp.gid = gid;
    }
    resp.isolation = (char *)ws_workspace_provider(ws)->ops->isolation;
    resp.capabilities = (Workspace__V1__Capabilities *)caps;
    resp.network = ws_workspace_network(ws);
    limits.max_file_size_bytes = ws_workspace_max_file_size(ws);
    if (caps && caps->shell)
        limits.max_duration_ms = ws_services_max_duration_ms(caps);
    resp.limits = &limits;
    if (caps && caps->fs) {
        static const char *const fs_ops[] = {"ReadFile", "WriteFile", "EditFile", "ListDir",
                                             "Glob",     "Grep",      "Stat",     "MakeDir",
                                             "Remove",   "Move"};
        for (size_t i = 0; i < WS_ELEMENTSOF(fs_ops); i++)
            append(ops, &n_ops, fs_ops[i]);
    }
    if (caps && caps->shell) {
        static const char *const exec_ops[] = {"Run",           "Start",      "Attach",
                                               "ListProcesses", "SendSignal", "SendInput",
                                               "CloseInput",    "Resize"};
        for (size_t i = 0; i < WS_ELEMENTSOF(exec_ops); i++)
            append(ops, &n_ops, exec_ops[i]);
        resp.process_containment = (char *)ws_exec_containment(s->exec);
    }
    resp.opened_at_unix_ms = info.opened_at_ms;
    resp.last_success_at_unix_ms = info.last_success_at_ms;
    resp.last_error_at_unix_ms = info.last_error_at_ms;
    resp.last_error = info.last_error;
    /* The provider's own section, as its runtime sees the workspace now
     * (it may also say the workspace failed: a box that lost its agent).
     * Its storage lives until the response is sent; short of memory the
     * answer goes without it. */
    const struct ws_provider *p = ws_workspace_provider(ws);
    struct ws_provider_ws w;
    char ws_dir[WS_SERVICES_DIR_MAX];
    void *keep = NULL;
    if (p->ops->describe && ws_services_provider_ws(s, ws, ws_dir, sizeof(ws_dir), &w) == 0)
        (void)p->ops->describe(p->rt, &w, &resp, &keep);
    resp.operations = ops;
    resp.n_operations = n_ops;
    /* The caller's policy now, next to what this workspace was opened
     * with above. */
    struct ws_policy_set *pset = ws_registry_policy(s->reg);
    const char *tenant = ws_call_tenant(call);
    Workspace__V1__Policy policy;
    char *policy_providers[WS_PROVIDERS_MAX];
    ws_policy_to_proto(ws_policy_for(pset, tenant && tenant[0] ? tenant : WS_TENANT_DEFAULT),
                       ws_registry_providers_enabled(s->reg), &policy, policy_providers);
    policy.tenant = (char *)(tenant && tenant[0] ? tenant : WS_TENANT_DEFAULT);
    resp.policy = &policy;
    server.version = (char *)WS_VERSION;
    resp.server = &server;
    ws_call_finish(call, &resp.base);
    ws_policy_set_unref(pset);
    if (p->ops->describe)
        p->ops->describe_free(keep);
out:
    map_out_free(&labels);
    map_out_free(&env);
    ws_strv_free(secret_names, n_secret_names);
}

static void describe_run(struct ws_call *call)
{
    struct ws_services_unary *u = ws_call_data(call);

    describe(call, u->ws);
}

/* The provider's section may ask its daemon (a container inspected):
 * such a Describe goes to the DAEMON lane. */
static void describe_ws(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__DescribeRequest *req = (const void *)msg;
    struct ws_services *s = ws_call_method_data(call);
    struct ws_services_unary *u;
    struct ws_workspace *ws = NULL;
    struct ws_diag d = {0};
    int err;

    err = ws_registry_peek(s->reg, ws_call_tenant(call), req->workspace_id, &ws);
    if (err < 0) {
        if (ws_registry_expired(s->reg, ws_call_tenant(call), req->workspace_id, &d))
            err = -WS_EEVICTED;
        else
            ws_diag_set(&d, "no such workspace");
        ws_call_fail(call, err, &d);
        return;
    }
    if (!ws_workspace_provider(ws)->ops->describe) {
        describe(call, ws);
        ws_workspace_unref(ws);
        return;
    }
    u = ws_services_unary_new(call, msg);
    if (!u) {
        ws_workspace_unref(ws);
        return;
    }
    u->ws = ws;
    ws_services_offload(call, &u->job, WS_SERVICES_LANE_DAEMON, describe_run, NULL);
}

/* List pages: at most this many per response, and this many when the
 * request asks none. */
#define LIST_PAGE_MAX     1000
#define LIST_PAGE_DEFAULT 100

/* The workspaces a List matches, each with a reference until the
 * response is sent (the summaries point at their strings). */
struct list_acc {
    const struct ws_selector *sel;
    const char *name;
    const char *after; /* page token: ids after this one */
    struct ws_workspace **all;
    size_t n, cap;
    bool oom;
};

static void list_one(void *userdata, struct ws_workspace *ws)
{
    struct list_acc *acc = userdata;
    const ws_record *rec = ws_workspace_record(ws);
    struct ws_label labels[WS_LABELS_MAX];
    size_t n_labels = rec->n_labels < WS_LABELS_MAX ? rec->n_labels : WS_LABELS_MAX;

    if (acc->oom || (acc->after[0] && strcmp(ws_workspace_id(ws), acc->after) <= 0))
        return;
    if (acc->name[0] && strcmp(rec->name ? rec->name : "", acc->name) != 0)
        return;
    for (size_t i = 0; i < n_labels; i++)
        labels[i] = (struct ws_label){rec->labels[i]->key, rec->labels[i]->value};
    if (!ws_selector_match(acc->sel, labels, n_labels))
        return;
    if (acc->n == acc->cap) {
        size_t ncap = acc->cap ? acc->cap * 2 : 32;
        struct ws_workspace **all = realloc(acc->all, ncap * sizeof(*all));

        if (!all) {
            acc->oom = true;
            return;
        }
        acc->all = all;
        acc->cap = ncap;
    }
    ws_workspace_ref(ws);
    acc->all[acc->n++] = ws;
}

static int by_id(const void *a, const void *b)
{
    return strcmp(ws_workspace_id(*(struct ws_workspace *const *)a),
                  ws_workspace_id(*(struct ws_workspace *const *)b));
}

static void list_ws(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__ListRequest *req = (const void *)msg;
    struct ws_services *s = ws_call_method_data(call);
    Workspace__V1__ListResponse resp = WORKSPACE__V1__LIST_RESPONSE__INIT;
    Workspace__V1__WorkspaceSummary *items = NULL, **ptrs = NULL;
    struct map_out *labels = NULL;
    struct ws_selector sel = {0};
    struct ws_diag d = {0};
    size_t page = req->page_size ? req->page_size : LIST_PAGE_DEFAULT, n = 0;
    char next[WS_ID_LEN + 1] = "";
    int err;

    if (req->page_size > LIST_PAGE_MAX) {
        ws_diag_set(&d, "page_size over %d", LIST_PAGE_MAX);
        ws_diag_meta(&d, "field", "page_size");
        ws_diag_meta(&d, "limit", "%d", LIST_PAGE_MAX);
        ws_call_fail(call, -WS_ELIMIT, &d);
        return;
    }
    /* A token is the last id of the page before: anything else was not
     * made by this server. */
    if (req->page_token[0] &&
        (strlen(req->page_token) != WS_ID_LEN || strncmp(req->page_token, "ws_", 3) != 0 ||
         strspn(req->page_token + 3, "0123456789abcdef") != WS_ID_LEN - 3)) {
        ws_diag_set(&d, "invalid page_token");
        ws_diag_meta(&d, "field", "page_token");
        ws_call_fail(call, -WS_EMALFORMED, &d);
        return;
    }
    err = ws_selector_parse(req->label_selector, &sel, &d);
    if (err < 0) {
        ws_call_fail(call, err, &d);
        return;
    }
    struct list_acc acc = {.sel = &sel, .name = req->name, .after = req->page_token};
    ws_registry_list(s->reg, ws_call_tenant(call), list_one, &acc);
    if (acc.oom)
        goto oom;
    if (acc.n > 1)
        qsort(acc.all, acc.n, sizeof(*acc.all), by_id);
    n = acc.n < page ? acc.n : page;
    if (acc.n > page)
        snprintf(next, sizeof(next), "%s", ws_workspace_id(acc.all[page - 1]));
    items = calloc(n ? n : 1, sizeof(*items));
    ptrs = calloc(n ? n : 1, sizeof(*ptrs));
    labels = calloc(n ? n : 1, sizeof(*labels));
    if (!items || !ptrs || !labels)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        struct ws_workspace *ws = acc.all[i];
        const ws_record *rec = ws_workspace_record(ws);
        struct ws_workspace_info info;
        Workspace__V1__WorkspaceSummary *it = &items[i];

        ws_workspace_describe(ws, &info);
        workspace__v1__workspace_summary__init(it);
        it->id = (char *)ws_workspace_id(ws);
        it->provider = (char *)ws_workspace_provider(ws)->ops->name;
        it->state = state_of(info.state);
        it->opened_at_unix_ms = info.opened_at_ms;
        it->expires_at_unix_ms = info.expires_at_ms;
        it->name = rec->name;
        if (map_out(&workspace__v1__workspace_summary__labels_entry__descriptor, rec->labels,
                    rec->n_labels, &labels[i]) < 0)
            goto oom;
        it->labels = (Workspace__V1__WorkspaceSummary__LabelsEntry **)labels[i].ptrs;
        it->n_labels = labels[i].n;
        ptrs[i] = it;
    }
    resp.workspaces = ptrs;
    resp.n_workspaces = n;
    resp.next_page_token = next;
    ws_call_finish(call, &resp.base);
    goto out;
oom:
    ws_call_fail(call, -ENOMEM, NULL);
out:
    for (size_t i = 0; labels && i < n; i++)
        map_out_free(&labels[i]);
    free(labels);
    free(items);
    free(ptrs);
    for (size_t i = 0; i < acc.n; i++)
        ws_workspace_unref(acc.all[i]);
    free(acc.all);
    ws_selector_free(&sel);
}

/* ---- Extend, SetSecrets ---- */

static void extend_run(struct ws_call *call)
{
    const Workspace__V1__ExtendRequest *req = UNARY_REQ(call, Workspace__V1__ExtendRequest);
    struct ws_services *s = ws_call_method_data(call);
    Workspace__V1__ExtendResponse resp = WORKSPACE__V1__EXTEND_RESPONSE__INIT;
    Workspace__V1__Lifetime lifetime = WORKSPACE__V1__LIFETIME__INIT;
    struct ws_workspace_info info;
    struct ws_diag d = {0};
    int err;

    err = ws_registry_extend(s->reg, ws_call_tenant(call), req->workspace_id,
                             req->lifetime ? req->lifetime->ttl_ms : 0,
                             req->lifetime ? req->lifetime->idle_timeout_ms : 0, &d, &info);
    if (err < 0) {
        if (err == -WS_ENOWORKSPACE && !d.message[0])
            ws_diag_set(&d, "no such workspace");
        ws_call_fail(call, err, &d);
        return;
    }
    resp.expires_at_unix_ms = info.expires_at_ms;
    lifetime.ttl_ms = info.ttl_ms;
    lifetime.idle_timeout_ms = info.idle_timeout_ms;
    resp.lifetime = &lifetime;
    ws_call_finish(call, &resp.base);
}

static void extend_ws(struct ws_call *call, const ProtobufCMessage *msg)
{
    on_daemon(call, msg, extend_run);
}

static void set_secrets_run(struct ws_call *call)
{
    const Workspace__V1__SetSecretsRequest *req = UNARY_REQ(call, Workspace__V1__SetSecretsRequest);
    struct ws_services *s = ws_call_method_data(call);
    Workspace__V1__SetSecretsResponse resp = WORKSPACE__V1__SET_SECRETS_RESPONSE__INIT;
    struct ws_secret pairs[WS_SECRETS_MAX];
    struct ws_diag d = {0};
    char **names = NULL;
    size_t n_names = 0, n = req->n_secrets < WS_SECRETS_MAX ? req->n_secrets : 0;
    bool missing = false;
    int err;

    for (size_t i = 0; i < n; i++)
        pairs[i] = (struct ws_secret){req->secrets[i]->key, req->secrets[i]->value};
    /* Over the count: the registry says so, naming the limit. */
    err = ws_registry_set_secrets(s->reg, ws_call_tenant(call), req->workspace_id, pairs,
                                  req->n_secrets > WS_SECRETS_MAX ? req->n_secrets : n,
                                  req->replace, &d, &names, &n_names, &missing);
    for (size_t i = 0; i < req->n_secrets; i++)
        if (req->secrets[i]->value)
            explicit_bzero(req->secrets[i]->value, strlen(req->secrets[i]->value));
    if (err < 0) {
        if (err == -WS_ENOWORKSPACE && !d.message[0])
            ws_diag_set(&d, "no such workspace");
        ws_call_fail(call, err, &d);
        return;
    }
    resp.secret_names = names;
    resp.n_secret_names = n_names;
    resp.secrets_missing = missing;
    ws_call_finish(call, &resp.base);
    ws_strv_free(names, n_names);
}

static void set_secrets_ws(struct ws_call *call, const ProtobufCMessage *msg)
{
    on_daemon(call, msg, set_secrets_run);
}

/* ---- ReadAudit ---- */

/* Records one response carries at most, and bytes of record text. */
#define AUDIT_READ_RECORDS_MAX 1000
#define AUDIT_READ_BYTES_MAX   (2u * 1024 * 1024)

struct audit_acc {
    uint64_t from_seq;
    size_t max;
    size_t bytes;
    Workspace__V1__AuditRecord *items;
    Workspace__V1__AuditRecord **ptrs;
    size_t n;
    uint64_t next_seq;
    bool oom;
};

static int audit_one(void *ud, uint64_t seq, int64_t ts_ms, const char *event, const char *line,
                     size_t len)
{
    struct audit_acc *acc = ud;

    if (seq < acc->from_seq)
        return 0;
    if (acc->n == acc->max || acc->bytes + len > AUDIT_READ_BYTES_MAX) {
        acc->next_seq = seq;
        return -1;
    }
    Workspace__V1__AuditRecord *r = &acc->items[acc->n];
    workspace__v1__audit_record__init(r);
    r->json = strndup(line, len);
    r->event = strdup(event);
    if (!r->json || !r->event) {
        free(r->json);
        free(r->event);
        acc->oom = true;
        return -1;
    }
    r->seq = seq;
    r->ts_unix_ms = ts_ms;
    acc->ptrs[acc->n++] = r;
    acc->bytes += len;
    return 0;
}

static void read_audit(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__ReadAuditRequest *req = (const void *)msg;
    struct ws_services *s = ws_call_method_data(call);
    Workspace__V1__ReadAuditResponse resp = WORKSPACE__V1__READ_AUDIT_RESPONSE__INIT;
    Workspace__V1__AuditVerification ver = WORKSPACE__V1__AUDIT_VERIFICATION__INIT;
    struct ws_audit_verdict v = {0};
    struct audit_acc acc = {0};
    struct ws_diag d = {0};
    int err = -ENOENT;

    acc.from_seq = req->from_seq ? req->from_seq : 1;
    acc.max = req->max_records && req->max_records < AUDIT_READ_RECORDS_MAX
                  ? req->max_records
                  : AUDIT_READ_RECORDS_MAX;
    acc.items = calloc(acc.max, sizeof(*acc.items));
    acc.ptrs = calloc(acc.max, sizeof(*acc.ptrs));
    if (!acc.items || !acc.ptrs) {
        ws_call_fail(call, -ENOMEM, NULL);
        goto out;
    }
    /* Only the owner reads a log, and only while the server knows the
     * workspace is theirs: another tenant's id (or one nobody owns any
     * more) is an unknown workspace, whatever lies on disk. */
    if (!ws_registry_owns(s->reg, ws_call_tenant(call), req->workspace_id)) {
        ws_diag_set(&d, "no such workspace");
        ws_call_fail(call, -WS_ENOWORKSPACE, &d);
        goto out;
    }
    if (s->audit)
        err = ws_audit_read(s->audit, req->workspace_id, audit_one, &acc, &v);
    if (err == -ENOENT)
        err = 0; /* no log yet: no records */
    if (err < 0 || acc.oom) {
        ws_call_fail(call, acc.oom ? -ENOMEM : err, NULL);
        goto out;
    }
    ver.ok = v.problem == WS_AUDIT_OK;
    ver.problem = (Workspace__V1__AuditProblem)v.problem; /* same numbering by design */
    ver.bad_seq = v.bad_seq;
    ver.detail = v.detail;
    ver.verified_records = v.verified;
    resp.records = acc.ptrs;
    resp.n_records = acc.n;
    resp.verification = &ver;
    resp.next_seq = acc.next_seq;
    ws_call_finish(call, &resp.base);
out:
    for (size_t i = 0; i < acc.n; i++) {
        free(acc.items[i].json);
        free(acc.items[i].event);
    }
    free(acc.items);
    free(acc.ptrs);
}

/* ---- snapshots ---- */

/* A Snapshot message and what it points at (the strings stay the
 * snapshot's, referenced until the send). */
struct snapshot_out {
    Workspace__V1__Snapshot m;
    map_entry *entries;
    map_entry **labels, **ws_labels;
};

static int fill_snapshot(const struct ws_snap *sn, struct snapshot_out *o)
{
    size_t n = sn->n_labels + sn->n_ws_labels;

    workspace__v1__snapshot__init(&o->m);
    o->entries = calloc(n ? n : 1, sizeof(*o->entries));
    o->labels = calloc(sn->n_labels ? sn->n_labels : 1, sizeof(*o->labels));
    o->ws_labels = calloc(sn->n_ws_labels ? sn->n_ws_labels : 1, sizeof(*o->ws_labels));
    if (!o->entries || !o->labels || !o->ws_labels)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        bool own = i < sn->n_labels;
        const struct ws_snap_kv *kv = own ? &sn->labels[i] : &sn->ws_labels[i - sn->n_labels];
        protobuf_c_message_init(own ? &workspace__v1__snapshot__labels_entry__descriptor
                                    : &workspace__v1__snapshot__workspace_labels_entry__descriptor,
                                &o->entries[i]);
        o->entries[i].key = kv->key;
        o->entries[i].value = kv->value;
        if (own)
            o->labels[i] = &o->entries[i];
        else
            o->ws_labels[i - sn->n_labels] = &o->entries[i];
    }
    o->m.id = (char *)sn->id;
    o->m.name = sn->name;
    o->m.labels = (Workspace__V1__Snapshot__LabelsEntry **)o->labels;
    o->m.n_labels = sn->n_labels;
    o->m.workspace_id = sn->workspace_id;
    o->m.provider = sn->provider;
    o->m.workspace_labels = (Workspace__V1__Snapshot__WorkspaceLabelsEntry **)o->ws_labels;
    o->m.n_workspace_labels = sn->n_ws_labels;
    o->m.created_at_unix_ms = sn->created_ms;
    o->m.files = sn->files;
    o->m.directories = sn->dirs;
    o->m.symlinks = sn->symlinks;
    o->m.bytes = sn->bytes;
    o->m.new_bytes = sn->new_bytes;
    o->m.duration_ms = sn->duration_ms;
    o->m.read_bytes = sn->read_bytes;
    return 0;
}

static void snapshot_out_free(struct snapshot_out *o)
{
    free(o->entries);
    free(o->labels);
    free(o->ws_labels);
}

/* Hands the call to the FS lane: run gets the request copy. */
static void on_fs(struct ws_call *call, const ProtobufCMessage *msg,
                  void (*run)(struct ws_call *call))
{
    struct ws_services_unary *u = ws_services_unary_new(call, msg);

    if (u)
        ws_services_offload(call, &u->job, WS_SERVICES_LANE_FS, run, NULL);
}

static void snapshot_run(struct ws_call *call)
{
    const Workspace__V1__SnapshotRequest *req = UNARY_REQ(call, Workspace__V1__SnapshotRequest);
    struct ws_services *s = ws_call_method_data(call);
    Workspace__V1__SnapshotResponse resp = WORKSPACE__V1__SNAPSHOT_RESPONSE__INIT;
    struct snapshot_out o = {0};
    struct ws_snap *sn = NULL;
    struct ws_diag d = {0};
    int err;

    err = ws_registry_snapshot(s->reg, ws_call_tenant(call), req, &d, &sn);
    if (err == 0)
        err = fill_snapshot(sn, &o);
    if (err < 0) {
        ws_call_fail(call, err, &d);
    } else {
        resp.snapshot = &o.m;
        ws_call_finish(call, &resp.base);
    }
    snapshot_out_free(&o);
    ws_snap_unref(sn);
}

static void snapshot_ws(struct ws_call *call, const ProtobufCMessage *msg)
{
    on_fs(call, msg, snapshot_run);
}

static bool snap_id_token_ok(const char *t)
{
    return strlen(t) == WS_SNAP_ID_LEN && strncmp(t, WS_SNAP_ID_PREFIX, 5) == 0 &&
           strspn(t + 5, "abcdefghijklmnopqrstuvwxyz234567") == WS_SNAP_ID_LEN - 5;
}

static void list_snapshots(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__ListSnapshotsRequest *req = (const void *)msg;
    struct ws_services *s = ws_call_method_data(call);
    Workspace__V1__ListSnapshotsResponse resp = WORKSPACE__V1__LIST_SNAPSHOTS_RESPONSE__INIT;
    Workspace__V1__Snapshot **ptrs = NULL;
    struct snapshot_out *outs = NULL;
    struct ws_selector sel = {0};
    struct ws_snap **all = NULL;
    size_t n_all = 0, n = 0, page = req->page_size ? req->page_size : LIST_PAGE_DEFAULT;
    char next[WS_SNAP_ID_LEN + 1] = "";
    struct ws_diag d = {0};
    int err;

    if (req->page_size > LIST_PAGE_MAX) {
        ws_diag_set(&d, "page_size over %d", LIST_PAGE_MAX);
        ws_diag_meta(&d, "field", "page_size");
        ws_diag_meta(&d, "limit", "%d", LIST_PAGE_MAX);
        ws_call_fail(call, -WS_ELIMIT, &d);
        return;
    }
    /* A token is the last id of the page before. */
    if (req->page_token[0] && !snap_id_token_ok(req->page_token)) {
        ws_diag_set(&d, "invalid page_token");
        ws_diag_meta(&d, "field", "page_token");
        ws_call_fail(call, -WS_EMALFORMED, &d);
        return;
    }
    err = ws_selector_parse(req->label_selector, &sel, &d);
    if (err < 0) {
        ws_call_fail(call, err, &d);
        return;
    }
    err = ws_registry_snapshots(s->reg, ws_call_tenant(call), &all, &n_all);
    if (err < 0)
        goto fail;
    outs = calloc(page, sizeof(*outs));
    ptrs = calloc(page, sizeof(*ptrs));
    err = -ENOMEM;
    if (!outs || !ptrs)
        goto fail;
    for (size_t i = 0; i < n_all; i++) {
        const struct ws_snap *sn = all[i];
        struct ws_label labels[WS_LABELS_MAX];
        size_t nl = sn->n_labels < WS_LABELS_MAX ? sn->n_labels : WS_LABELS_MAX;

        if (req->page_token[0] && strcmp(sn->id, req->page_token) <= 0)
            continue;
        if (req->workspace_id[0] && strcmp(sn->workspace_id, req->workspace_id) != 0)
            continue;
        if (req->name[0] && strcmp(sn->name, req->name) != 0)
            continue;
        for (size_t k = 0; k < nl; k++)
            labels[k] = (struct ws_label){sn->labels[k].key, sn->labels[k].value};
        if (!ws_selector_match(&sel, labels, nl))
            continue;
        if (n == page) {
            /* The previous match is the page's last: its id. */
            snprintf(next, sizeof(next), "%s", ptrs[n - 1]->id);
            break;
        }
        err = fill_snapshot(sn, &outs[n]);
        if (err < 0) {
            snapshot_out_free(&outs[n]);
            goto fail;
        }
        ptrs[n] = &outs[n].m;
        n++;
    }
    resp.snapshots = ptrs;
    resp.n_snapshots = n;
    resp.next_page_token = next;
    ws_call_finish(call, &resp.base);
    err = 0;
fail:
    if (err < 0)
        ws_call_fail(call, err, NULL);
    for (size_t i = 0; i < n; i++)
        snapshot_out_free(&outs[i]);
    free(outs);
    free(ptrs);
    ws_snapstore_list_free(all, n_all);
    ws_selector_free(&sel);
}

static void delete_snapshot_run(struct ws_call *call)
{
    const Workspace__V1__DeleteSnapshotRequest *req =
        UNARY_REQ(call, Workspace__V1__DeleteSnapshotRequest);
    struct ws_services *s = ws_call_method_data(call);
    Workspace__V1__DeleteSnapshotResponse resp = WORKSPACE__V1__DELETE_SNAPSHOT_RESPONSE__INIT;
    struct ws_diag d = {0};
    uint64_t reclaimed = 0;
    int err;

    err =
        ws_registry_delete_snapshot(s->reg, ws_call_tenant(call), req->snapshot_id, &d, &reclaimed);
    if (err < 0) {
        ws_call_fail(call, err, &d);
        return;
    }
    resp.reclaimed_bytes = reclaimed;
    ws_call_finish(call, &resp.base);
}

static void delete_snapshot_ws(struct ws_call *call, const ProtobufCMessage *msg)
{
    on_fs(call, msg, delete_snapshot_run);
}

/* How long a forced Restore waits for the commands it ended: their grace
 * at its longest, and the tree's teardown. */
#define RESTORE_END_WAIT_MS (WS_EXEC_GRACE_MS_MAX + 15000)

/* The running commands of a workspace, referenced. */
struct running {
    struct ws_proc **v;
    size_t n, cap;
    bool oom;
};

static void running_one(void *ud, struct ws_proc *p)
{
    struct running *r = ud;

    if (ws_proc_get_result(p, NULL) || r->oom)
        return;
    if (r->n == r->cap) {
        size_t ncap = r->cap ? r->cap * 2 : 8;
        struct ws_proc **v = reallocarray(r->v, ncap, sizeof(*v));
        if (!v) {
            r->oom = true;
            return;
        }
        r->v = v;
        r->cap = ncap;
    }
    ws_proc_ref(p);
    r->v[r->n++] = p;
}

static void restore_run(struct ws_call *call)
{
    const Workspace__V1__RestoreRequest *req = UNARY_REQ(call, Workspace__V1__RestoreRequest);
    struct ws_services *s = ws_call_method_data(call);
    Workspace__V1__RestoreResponse resp = WORKSPACE__V1__RESTORE_RESPONSE__INIT;
    struct ws_workspace *ws = NULL;
    struct running run = {0};
    struct snapshot_out o = {0};
    struct ws_snap *sn = NULL;
    struct ws_diag d = {0};
    int err;

    if (ws_services_workspace(call, req->workspace_id, 0, &ws) < 0)
        return;
    err = ws_registry_snapshot_get(s->reg, ws_call_tenant(call), req->snapshot_id, &d, &sn);
    if (err < 0)
        goto out;
    ws_exec_list(s->exec, ws_workspace_id(ws), running_one, &run);
    err = -ENOMEM;
    if (run.oom)
        goto out;
    if (run.n && !req->force) {
        ws_diag_set(&d, "%zu commands run in the workspace: end them, or restore with force",
                    run.n);
        ws_diag_meta(&d, "processes", "%zu", run.n);
        err = -EBUSY;
        goto out;
    }
    for (size_t i = 0; i < run.n; i++)
        ws_proc_kill(run.v[i], WS_CAUSE_SIGNALED, true);
    int64_t until = ws_mono_ms() + RESTORE_END_WAIT_MS;
    for (size_t i = 0; i < run.n; i++)
        while (!ws_proc_get_result(run.v[i], NULL) && ws_mono_ms() < until)
            ws_sleep_ms(10);
    err = ws_registry_restore(s->reg, ws_call_tenant(call), req->workspace_id, sn, &d);
    if (err == 0)
        err = fill_snapshot(sn, &o);
out:
    if (err < 0) {
        ws_services_fail(call, ws, err, &d);
    } else {
        resp.snapshot = &o.m;
        resp.processes_ended = (uint32_t)run.n;
        ws_call_finish(call, &resp.base);
    }
    for (size_t i = 0; i < run.n; i++)
        ws_proc_unref(run.v[i]);
    free(run.v);
    snapshot_out_free(&o);
    ws_snap_unref(sn);
    ws_workspace_unref(ws);
}

static void restore_ws(struct ws_call *call, const ProtobufCMessage *msg)
{
    on_fs(call, msg, restore_run);
}

size_t ws_services_workspaces(struct ws_services *s, struct ws_rpc_method *out)
{
    static const struct ws_rpc_method methods[] = {
        WS_SERVICES_OFFLOADED("/workspace.v1.Workspaces/Open",
                              &workspace__v1__open_request__descriptor, open_ws),
        WS_SERVICES_OFFLOADED("/workspace.v1.Workspaces/Resolve",
                              &workspace__v1__resolve_request__descriptor, resolve_ws),
        WS_SERVICES_OFFLOADED("/workspace.v1.Workspaces/Close",
                              &workspace__v1__close_request__descriptor, close_ws),
        WS_SERVICES_OFFLOADED("/workspace.v1.Workspaces/Describe",
                              &workspace__v1__describe_request__descriptor, describe_ws),
        WS_SERVICES_UNARY("/workspace.v1.Workspaces/List", &workspace__v1__list_request__descriptor,
                          list_ws),
        WS_SERVICES_UNARY("/workspace.v1.Workspaces/ReadAudit",
                          &workspace__v1__read_audit_request__descriptor, read_audit),
        WS_SERVICES_OFFLOADED("/workspace.v1.Workspaces/Extend",
                              &workspace__v1__extend_request__descriptor, extend_ws),
        WS_SERVICES_OFFLOADED("/workspace.v1.Workspaces/SetSecrets",
                              &workspace__v1__set_secrets_request__descriptor, set_secrets_ws),
        WS_SERVICES_OFFLOADED("/workspace.v1.Workspaces/Snapshot",
                              &workspace__v1__snapshot_request__descriptor, snapshot_ws),
        WS_SERVICES_UNARY("/workspace.v1.Workspaces/ListSnapshots",
                          &workspace__v1__list_snapshots_request__descriptor, list_snapshots),
        WS_SERVICES_OFFLOADED("/workspace.v1.Workspaces/DeleteSnapshot",
                              &workspace__v1__delete_snapshot_request__descriptor,
                              delete_snapshot_ws),
        WS_SERVICES_OFFLOADED("/workspace.v1.Workspaces/Restore",
                              &workspace__v1__restore_request__descriptor, restore_ws),
    };

    return ws_services_add_methods(s, methods, WS_ELEMENTSOF(methods), out);
}
