/* Workspaces: Open, Resolve, Close, Describe, List.
 *
 * Open, Resolve, Close and a Describe whose provider has a section of its
 * own may talk to a container daemon (a pull, an attach, a detach, an
 * inspect): they run on the pool's DAEMON lane, so a slow daemon holds up
 * only its own tenant's calls. The job's ctl carries the call's deadline
 * and its cancel down to the provider (ws_work_ctl_current): an image
 * pull inside an Open ends before the client's deadline instead of
 * holding the lane's thread for the server's own limit. List and
 * ReadAudit read the server's own state and stay on the thread that
 * delivered the call. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/audit/audit.h"
#include "server/base/macros.h"
#include "server/base/time.h"
#include "server/base/version.h"
#include "server/exec/exec.h"
#include "server/metrics/metrics.h"
#include "server/rpc/services/internal.h"
#include "workspace/v1/workspaces.pb-c.h"

/* Fills `out` (and its ref) from a live workspace; strings stay owned by
 * the workspace, which the caller keeps referenced until the send. */
static void fill_workspace(struct ws_workspace *ws, Workspace__V1__Workspace *out,
                           Workspace__V1__WorkspaceRef *ref)
{
    const uint8_t *token;
    size_t len;

    workspace__v1__workspace__init(out);
    workspace__v1__workspace_ref__init(ref);
    ws_workspace_token(ws, &token, &len);
    ref->token.data = (uint8_t *)token;
    ref->token.len = len;
    out->id = (char *)ws_workspace_id(ws);
    out->ref = ref;
    out->provider = (char *)ws_workspace_provider(ws)->ops->name;
    out->capabilities = (Workspace__V1__Capabilities *)ws_workspace_capabilities(ws);
}

/* How Open and Resolve end: with err (and d), or with `resp` whose
 * `workspace` (*slot, pointing here only while resp is sent) describes
 * ws; then the handler's reference goes (the strings point into ws, and
 * the message is serialized before that). */
static void finish_workspace(struct ws_call *call, int err, const struct ws_diag *d,
                             struct ws_workspace *ws, ProtobufCMessage *resp,
                             Workspace__V1__Workspace **slot)
{
    Workspace__V1__Workspace w;
    Workspace__V1__WorkspaceRef ref;

    if (err < 0) {
        ws_call_fail(call, err, d);
        return;
    }
    fill_workspace(ws, &w, &ref);
    *slot = &w;
    ws_call_finish(call, resp);
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
    struct ws_workspace_info info;
    char *ops[16];
    size_t n_ops = 0;

    ws_workspace_describe(ws, &info);
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
        static const char *const exec_ops[] = {"Run", "Start", "Attach", "ListProcesses",
                                               "SendSignal"};
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

/* A summary with its own copy of the workspace's id, which it points at
 * once the list is complete (until then the array may move). */
struct summary {
    Workspace__V1__WorkspaceSummary item;
    char id[WS_ID_LEN + 1];
};

struct list_acc {
    struct summary *items;
    Workspace__V1__WorkspaceSummary **ptrs;
    size_t n, cap;
    bool oom;
};

static void list_one(void *userdata, struct ws_workspace *ws)
{
    struct list_acc *acc = userdata;
    struct ws_workspace_info info;

    if (acc->oom)
        return;
    if (acc->n == acc->cap) {
        size_t ncap = acc->cap ? acc->cap * 2 : 32;
        struct summary *items = realloc(acc->items, ncap * sizeof(*items));

        if (!items) {
            acc->oom = true;
            return;
        }
        acc->items = items;
        acc->cap = ncap;
    }
    ws_workspace_describe(ws, &info);
    struct summary *one = &acc->items[acc->n];
    Workspace__V1__WorkspaceSummary *it = &one->item;
    workspace__v1__workspace_summary__init(it);
    snprintf(one->id, sizeof(one->id), "%s", ws_workspace_id(ws));
    it->provider = (char *)ws_workspace_provider(ws)->ops->name;
    it->state = state_of(info.state);
    it->opened_at_unix_ms = info.opened_at_ms;
    acc->n++;
}

static void list_ws(struct ws_call *call, const ProtobufCMessage *msg)
{
    struct ws_services *s = ws_call_method_data(call);
    Workspace__V1__ListResponse resp = WORKSPACE__V1__LIST_RESPONSE__INIT;
    struct list_acc acc = {0};

    (void)msg;
    ws_registry_list(s->reg, ws_call_tenant(call), list_one, &acc);
    if (acc.oom) {
        ws_call_fail(call, -ENOMEM, NULL);
        goto out;
    }
    acc.ptrs = calloc(acc.n ? acc.n : 1, sizeof(*acc.ptrs));
    if (!acc.ptrs) {
        ws_call_fail(call, -ENOMEM, NULL);
        goto out;
    }
    for (size_t i = 0; i < acc.n; i++) {
        acc.items[i].item.id = acc.items[i].id;
        acc.ptrs[i] = &acc.items[i].item;
    }
    resp.workspaces = acc.ptrs;
    resp.n_workspaces = acc.n;
    ws_call_finish(call, &resp.base);
out:
    free(acc.ptrs);
    free(acc.items);
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
    };

    return ws_services_add_methods(s, methods, WS_ELEMENTSOF(methods), out);
}
