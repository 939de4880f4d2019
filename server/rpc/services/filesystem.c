/* FileSystem: the ten file RPCs over the workspace's fs ops.
 *
 * What may take long runs on the pool's FS lane, off the completion-queue
 * threads: Grep (its start and every batch), Glob, ListDir, a recursive
 * Remove, and a WriteFile commit or an EditFile with if_match (a hash of
 * the whole file) or with the byte quota on (a charge may walk the
 * tenant's workspaces), and MakeDir with the byte quota on. Stat, ReadFile,
 * Move and the rest stay on the thread that delivered the call, except
 * that a change (EditFile, MakeDir, Remove, Move) on a workspace a
 * snapshot has frozen goes to the FS lane to wait there: never on a
 * completion-queue thread, which would hold up every other call.
 *
 * The per-tenant byte quota (ws_registry_usage_charge): a write or an
 * edit is charged what it adds before it is committed and refused, the
 * old content untouched, when that does not fit; what shrinks is always
 * allowed. MakeDir needs room left. Remove and a replacing Move mark the
 * figure stale (it is measured again when next needed). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/audit/audit.h"
#include "server/base/macros.h"
#include "server/rpc/services/internal.h"
#include "workspace/v1/filesystem.pb-c.h"

/* Bytes per ReadFile message. */
#define READ_CHUNK (256 * 1024)
/* Matches per Grep message. */
#define GREP_BATCH 256
/* A listing stops (truncated) before its response would pass this size,
 * well under the 4 MiB message limit. */
#define LIST_RESPONSE_BUDGET (3 * 1024 * 1024 + 512 * 1024)
/* Rough per-entry cost of a FileInfo besides its path. */
#define ENTRY_OVERHEAD 48

static const char *root_if_empty(const char *path)
{
    return path[0] ? path : ".";
}

static struct ws_registry *registry_of(struct ws_call *call)
{
    return ((struct ws_services *)ws_call_method_data(call))->reg;
}

/* Fails the call. A memory workspace refused by its tenant's memory quota
 * says so with the quota's metadata; the tree itself only knows it is
 * full. */
void ws_services_fs_fail(struct ws_call *call, struct ws_workspace *ws, int err,
                         const struct ws_diag *d)
{
    struct ws_diag quota = {0};

    if (err == -WS_EQUOTA && (!d || !d->message[0]) && ws_registry_memory_explain(&quota))
        d = &quota;
    ws_services_fail(call, ws, err, d);
}

static struct ws_vfs *vfs_of(struct ws_workspace *ws)
{
    return ws_fsops_vfs(ws_workspace_fsops(ws));
}

/* The length of the regular file at path now; 0 when there is none. */
static uint64_t file_size(struct ws_workspace *ws, const char *path)
{
    struct ws_vfs *fs = vfs_of(ws);
    struct ws_stat st;

    return fs->ops->stat(fs, path, &st) == 0 && st.type == WS_FT_REGULAR ? st.size : 0;
}

/* What every file RPC starts with: the workspace, which must have the fs
 * capability, and the client's path checked. On failure the call has
 * been failed and nothing is held. */
int ws_services_fs_workspace(struct ws_call *call, const char *id, const char *path,
                             struct ws_workspace **ret)
{
    struct ws_workspace *ws;
    int err = ws_services_workspace(call, id, WS_CAP_FS, &ws);

    if (err < 0)
        return err;
    err = ws_services_check_path(call, ws, path);
    if (err < 0) {
        ws_workspace_unref(ws);
        return err;
    }
    *ret = ws;
    return 0;
}

/* The start of a unary call whose work may go to the FS lane: its state,
 * with the request copied and the workspace looked up, `path` checked.
 * NULL: the call was failed. */
static struct ws_services_unary *fs_unary(struct ws_call *call, const ProtobufCMessage *msg,
                                          const char *id, const char *path)
{
    struct ws_services_unary *u = ws_services_unary_new(call, msg);

    if (!u || ws_services_fs_workspace(call, id, path, &u->ws) < 0)
        return NULL;
    return u;
}

/* A change on a workspace a snapshot has frozen would wait for the whole
 * snapshot: it runs `run` on the FS lane instead (true: offloaded, or
 * failed and answered). */
static bool wait_on_lane(struct ws_call *call, const ProtobufCMessage *msg, struct ws_workspace *ws,
                         const char *id, const char *path, void (*run)(struct ws_call *call))
{
    if (!ws_fsops_frozen(ws_workspace_fsops(ws)))
        return false;
    struct ws_services_unary *u = fs_unary(call, msg, id, path);
    if (u)
        ws_services_offload(call, &u->job, WS_SERVICES_LANE_FS, run, NULL);
    return true;
}

/* The call succeeded: its file event (NULL: none) goes into the audit
 * log before the client can see the answer, the workspace records the
 * success, and `resp` goes out with the status. */
void ws_services_fs_finish(struct ws_call *call, struct ws_workspace *ws,
                           const ProtobufCMessage *resp, const struct ws_audit_file *audit)
{
    if (audit)
        ws_services_audit_file(ws_call_method_data(call), ws, audit);
    ws_workspace_note(ws, 0, NULL);
    ws_call_finish(call, resp);
}

/* The zeroed state of a streaming call, set as its data (its on_destroy
 * frees it); NULL, the call failed, when memory is short. */
static void *stream_state(struct ws_call *call, size_t size)
{
    void *state = calloc(1, size);

    if (!state) {
        ws_call_fail(call, -ENOMEM, NULL);
        return NULL;
    }
    ws_call_set_data(call, state);
    return state;
}

/* ---- ReadFile ---- */

struct read_state {
    struct ws_workspace *ws;
    struct ws_vfs *fs;
    struct ws_vfs_file *file;
    struct ws_stat st;
    char *path;
    uint64_t off, end;
    uint8_t *buf;
    bool sent_info;
};

static void read_destroy(struct ws_call *call)
{
    struct read_state *rs = ws_call_data(call);

    if (!rs)
        return;
    if (rs->file)
        rs->fs->ops->close(rs->file);
    ws_workspace_unref(rs->ws);
    free(rs->path);
    free(rs->buf);
    free(rs);
}

/* Sends the next chunk; the last one goes out together with the status. */
static void read_next(struct ws_call *call, struct read_state *rs)
{
    Workspace__V1__ReadFileResponse resp = WORKSPACE__V1__READ_FILE_RESPONSE__INIT;
    Workspace__V1__FileInfo info;
    size_t want = rs->end - rs->off > READ_CHUNK ? READ_CHUNK : (size_t)(rs->end - rs->off);
    size_t got = 0;

    while (got < want) {
        ssize_t n = rs->fs->ops->pread(rs->file, rs->buf + got, want - got, rs->off + got);
        if (n < 0) {
            ws_services_fs_fail(call, rs->ws, (int)n, NULL);
            return;
        }
        if (n == 0)
            break; /* the file shrank: stop at its new end */
        got += (size_t)n;
    }
    resp.data.data = rs->buf;
    resp.data.len = got;
    resp.offset = rs->off;
    if (!rs->sent_info) {
        ws_fileinfo_fill(&info, rs->path, strlen(rs->path), &rs->st);
        resp.info = &info;
        rs->sent_info = true;
    }
    rs->off += got;
    if (got < want)
        rs->end = rs->off;
    if (rs->off >= rs->end)
        ws_services_fs_finish(call, rs->ws, &resp.base, NULL);
    else
        ws_call_send(call, &resp.base);
}

static void read_start(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__ReadFileRequest *req = (const void *)msg;
    struct read_state *rs;
    int err;

    rs = stream_state(call, sizeof(*rs));
    if (!rs || ws_services_fs_workspace(call, req->workspace_id, req->path, &rs->ws) < 0)
        return;
    rs->fs = vfs_of(rs->ws);
    rs->path = strdup(req->path);
    rs->buf = malloc(READ_CHUNK);
    if (!rs->path || !rs->buf) {
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    err = rs->fs->ops->open_read(rs->fs, req->path, &rs->file, &rs->st);
    if (err < 0) {
        ws_services_fs_fail(call, rs->ws, err, NULL);
        return;
    }
    rs->off = req->offset < rs->st.size ? req->offset : rs->st.size;
    rs->end = rs->st.size;
    if (req->length && req->length < rs->end - rs->off)
        rs->end = rs->off + req->length;
    read_next(call, rs);
}

static void read_sent(struct ws_call *call, bool ok)
{
    struct read_state *rs = ws_call_data(call);

    if (ok)
        read_next(call, rs);
}

/* ---- WriteFile ---- */

struct write_state {
    struct ws_services_job job;
    struct ws_workspace *ws;
    struct ws_write_session *session;
    /* The session handed to the commit on the FS lane: only that job (or
     * its skipped) touches it. */
    struct ws_write_session *committing;
    /* The commit hashes the old content (if_match) or may walk for the
     * byte quota: it goes to the FS lane. */
    bool slow_commit;
    /* The header's require_finish: a half-close never commits. */
    bool require_finish;
    char *path;
    /* Bytes appended, and the length of the file being replaced when the
     * write began (for the byte quota's early refusal). */
    uint64_t written;
    uint64_t old_size;
};

static void write_destroy(struct ws_call *call)
{
    struct write_state *st = ws_call_data(call);

    if (!st)
        return;
    ws_write_abort(st->session);
    ws_write_abort(st->committing);
    ws_workspace_unref(st->ws);
    free(st->path);
    free(st);
}

static void write_failed(struct ws_call *call, struct write_state *st, int err,
                         const struct ws_diag *d)
{
    ws_write_abort(st->session);
    st->session = NULL;
    ws_services_fs_fail(call, st->ws, err, d);
}

static void write_commit(struct ws_call *call, struct write_state *st);
static void write_cancel(struct ws_call *call);

static void write_malformed(struct ws_call *call, struct write_state *st, const char *why)
{
    struct ws_diag d = {0};

    ws_diag_set(&d, "%s", why);
    ws_diag_meta(&d, "field", "msg");
    write_failed(call, st, -WS_EMALFORMED, &d);
}

static void write_start(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__WriteFileRequest *req = (const void *)msg;
    struct write_state *st;
    struct ws_diag d = {0};
    int err;

    st = stream_state(call, sizeof(*st));
    if (!st)
        return;
    if (!req || req->msg_case != WORKSPACE__V1__WRITE_FILE_REQUEST__MSG_HEADER) {
        write_malformed(call, st, "the first message must be the header");
        return;
    }
    const Workspace__V1__WriteFileHeader *h = req->header;
    if (ws_services_fs_workspace(call, h->workspace_id, h->path, &st->ws) < 0)
        return;
    struct ws_write_request wr = {
        .path = h->path,
        .opts =
            {
                .mode = h->mode & 0777,
                .create_parents = h->create_parents,
                .if_absent = h->if_absent,
                .max_size = ws_workspace_max_file_size(st->ws),
            },
        .if_match = h->if_match,
    };
    st->path = strdup(h->path);
    if (!st->path) {
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    ws_services_job_init(&st->job, call);
    st->require_finish = h->require_finish;
    st->slow_commit = (h->if_match && h->if_match[0]) ||
                      ((struct ws_services *)ws_call_method_data(call))->usage_walks;
    err = ws_write_begin(ws_workspace_fsops(st->ws), &wr, &d, &st->session);
    if (err < 0) {
        write_failed(call, st, err, &d);
        return;
    }
    st->old_size = file_size(st->ws, h->path);
    if (req->finish)
        write_commit(call, st);
    else
        ws_call_recv(call);
}

/* Commits session s (the client sent `finish`) and answers. */
static void commit_now(struct ws_call *call, struct write_state *st, struct ws_write_session *s)
{
    Workspace__V1__WriteFileResponse resp = WORKSPACE__V1__WRITE_FILE_RESPONSE__INIT;
    Workspace__V1__FileInfo info;
    struct ws_write_result res;
    struct ws_registry *reg = registry_of(call);
    struct ws_diag d = {0};
    int64_t delta = (int64_t)st->written - (int64_t)file_size(st->ws, st->path);
    int err;

    if (delta > 0) {
        err = ws_registry_usage_charge(reg, st->ws, delta, &d);
        if (err < 0) {
            ws_write_abort(s); /* the old content stays */
            ws_services_fs_fail(call, st->ws, err, &d);
            return;
        }
    }
    err = ws_write_commit(s, &d, &res);
    if (err < 0) {
        ws_registry_usage_refund(reg, st->ws, delta);
        ws_services_fs_fail(call, st->ws, err, &d);
        return;
    }
    if (delta < 0)
        ws_registry_usage_refund(reg, st->ws, -delta);
    ws_fileinfo_fill(&info, st->path, strlen(st->path), &res.st);
    resp.info = &info;
    resp.bytes_written = res.bytes_written;
    resp.sha256 = res.sha256;
    /* Audit hook. */
    ws_services_fs_finish(call, st->ws, &resp.base,
                          &(struct ws_audit_file){.event = "write",
                                                  .path = st->path,
                                                  .has_content = true,
                                                  .size = res.st.size,
                                                  .sha256 = res.sha256});
}

static void commit_run(struct ws_call *call)
{
    struct write_state *st = ws_call_data(call);
    struct ws_write_session *s = st->committing;

    st->committing = NULL;
    commit_now(call, st, s);
}

/* The commit never ran (cancelled, deadline, shutdown): the old content
 * stays. */
static void commit_skipped(struct ws_call *call)
{
    struct write_state *st = ws_call_data(call);

    ws_write_abort(st->committing);
    st->committing = NULL;
}

/* Commits the write, here or on the FS lane. */
static void write_commit(struct ws_call *call, struct write_state *st)
{
    struct ws_write_session *s = st->session;

    st->session = NULL;
    if (!st->slow_commit) {
        commit_now(call, st, s);
        return;
    }
    st->committing = s;
    ws_services_offload(call, &st->job, WS_SERVICES_LANE_FS, commit_run, commit_skipped);
}

static void write_message(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__WriteFileRequest *req = (const void *)msg;
    struct write_state *st = ws_call_data(call);
    struct ws_diag d = {0};
    int err;

    if (!st->session)
        return;
    if (!req) {
        /* Half-close without `finish`. A client's cancel looks exactly like
         * this to the server, so prove the stream is still open before
         * committing: the headers go out first and write_sent commits only
         * if they could be sent. That proof has a window (a reset that
         * follows the end of the stream closely); a client that asked for
         * require_finish never has a half-close committed. */
        if (st->require_finish) {
            struct ws_diag m = {0};

            ws_diag_set(&m, "the stream ended without finish (the header set require_finish)");
            ws_diag_meta(&m, "field", "finish");
            write_failed(call, st, -WS_EMALFORMED, &m);
            return;
        }
        if (ws_call_send_headers(call) < 0)
            write_cancel(call);
        return;
    }
    if (req->msg_case == WORKSPACE__V1__WRITE_FILE_REQUEST__MSG_HEADER) {
        write_malformed(call, st, "only one header is allowed, then data");
        return;
    }
    err = ws_write_append(st->session, req->data.data, req->data.len, &d);
    if (err < 0) {
        write_failed(call, st, err, &d);
        return;
    }
    st->written += req->data.len;
    /* Refused as soon as it cannot fit, not after the whole upload. */
    if (st->written > st->old_size) {
        err = ws_registry_usage_check(registry_of(call), st->ws,
                                      (int64_t)(st->written - st->old_size), &d);
        if (err < 0) {
            write_failed(call, st, err, &d);
            return;
        }
    }
    if (req->finish)
        write_commit(call, st);
    else
        ws_call_recv(call);
}

/* The probe of a half-closed stream went out (ok) or found it cancelled. */
static void write_sent(struct ws_call *call, bool ok)
{
    struct write_state *st = ws_call_data(call);

    if (!st->session)
        return;
    if (ok && !ws_call_cancelled(call) && ws_call_deadline_remaining_ms(call) > 0)
        write_commit(call, st);
    else
        write_cancel(call);
}

static void write_cancel(struct ws_call *call)
{
    struct write_state *st = ws_call_data(call);

    /* A cancelled write must leave the old content: drop the temp file,
     * and the commit if it still waits for the FS lane (its skipped drops
     * that session; a commit already running finishes). */
    if (st) {
        ws_services_job_cancel(call, &st->job);
        ws_write_abort(st->session);
        st->session = NULL;
    }
}

/* ---- EditFile ---- */

/* The most an edit can add to a file of old_size bytes (every possible
 * match replaced, the result within max_size), charged before it runs;
 * 0 when it cannot grow the file. */
static int64_t edit_growth(const Workspace__V1__EditFileRequest *req, uint64_t old_size,
                           uint64_t max_size)
{
    uint64_t old_len = strlen(req->old_text), new_len = strlen(req->new_text), grow;

    if (old_len == 0 || new_len <= old_len || old_size < old_len)
        return 0;
    if (__builtin_mul_overflow(req->replace_all ? old_size / old_len : 1, new_len - old_len, &grow))
        grow = UINT64_MAX;
    if (max_size && grow > (max_size > old_size ? max_size - old_size : 0))
        grow = max_size > old_size ? max_size - old_size : 0;
    return grow > INT64_MAX ? INT64_MAX : (int64_t)grow;
}

static void do_edit(struct ws_call *call, struct ws_workspace *ws,
                    const Workspace__V1__EditFileRequest *req)
{
    Workspace__V1__EditFileResponse resp = WORKSPACE__V1__EDIT_FILE_RESPONSE__INIT;
    Workspace__V1__FileInfo info;
    struct ws_edit_result res;
    struct ws_registry *reg = registry_of(call);
    struct ws_diag d = {0};
    int64_t charged = 0;
    int err;

    uint64_t old_size = file_size(ws, req->path);
    charged = edit_growth(req, old_size, ws_workspace_max_file_size(ws));
    if (charged > 0) {
        err = ws_registry_usage_charge(reg, ws, charged, &d);
        if (err < 0) {
            charged = 0;
            ws_services_fs_fail(call, ws, err, &d);
            goto out;
        }
    }
    struct ws_edit_request er = {
        .path = req->path,
        .old_text = req->old_text,
        .old_len = strlen(req->old_text),
        .new_text = req->new_text,
        .new_len = strlen(req->new_text),
        .replace_all = req->replace_all,
        .if_match = req->if_match,
        .max_size = ws_workspace_max_file_size(ws),
    };
    err = ws_edit(ws_workspace_fsops(ws), &er, &d, &res);
    if (err < 0) {
        ws_services_fs_fail(call, ws, err, &d);
        goto out;
    }
    /* Keep what the edit really added; the rest of the charge goes back. */
    charged -= (int64_t)res.st.size - (int64_t)old_size;
    ws_fileinfo_fill(&info, req->path, strlen(req->path), &res.st);
    resp.replacements = res.replacements;
    resp.sha256 = res.sha256;
    resp.info = &info;
    /* Audit hook. */
    ws_services_fs_finish(call, ws, &resp.base,
                          &(struct ws_audit_file){.event = "edit",
                                                  .path = req->path,
                                                  .has_content = true,
                                                  .size = res.st.size,
                                                  .sha256 = res.sha256,
                                                  .count = res.replacements});
out:
    if (charged > 0)
        ws_registry_usage_refund(reg, ws, charged);
    else if (charged < 0)
        ws_registry_usage_stale(reg, ws_workspace_id(ws)); /* grew past the charge: a race */
}

static void edit_run(struct ws_call *call)
{
    struct ws_services_unary *u = ws_call_data(call);

    do_edit(call, u->ws, (const void *)u->req);
}

/* An edit with if_match hashes the whole file, and a charge of the byte
 * quota may walk the tenant's workspaces: on the FS lane. */
static void edit(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__EditFileRequest *req = (const void *)msg;
    struct ws_services *s = ws_call_method_data(call);
    struct ws_services_unary *u;
    struct ws_workspace *ws;

    if ((req->if_match && req->if_match[0]) || s->usage_walks) {
        u = fs_unary(call, msg, req->workspace_id, req->path);
        if (u)
            ws_services_offload(call, &u->job, WS_SERVICES_LANE_FS, edit_run, NULL);
        return;
    }
    if (ws_services_fs_workspace(call, req->workspace_id, req->path, &ws) < 0)
        return;
    if (!wait_on_lane(call, msg, ws, req->workspace_id, req->path, edit_run))
        do_edit(call, ws, req);
    ws_workspace_unref(ws);
}

/* ---- ListDir, Glob ---- */

/* A listed entry: its FileInfo points at its own copy of the path. */
struct entry {
    Workspace__V1__FileInfo info;
    char *path;
};

/* The entries collected for one response. */
struct entries {
    struct entry *items;
    Workspace__V1__FileInfo **ptrs;
    size_t n, cap;
    size_t bytes;
    bool budget_hit;
};

static int entries_add(void *userdata, const struct ws_entry *e)
{
    struct entries *es = userdata;
    char *copy;

    if (es->bytes + e->path_len + ENTRY_OVERHEAD > LIST_RESPONSE_BUDGET) {
        es->budget_hit = true;
        return -ENOBUFS;
    }
    if (es->n == es->cap) {
        size_t ncap = es->cap ? es->cap * 2 : 64;
        struct entry *items = realloc(es->items, ncap * sizeof(*items));

        if (!items)
            return -ENOMEM;
        es->items = items;
        es->cap = ncap;
    }
    copy = malloc(e->path_len + 1);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, e->path, e->path_len);
    copy[e->path_len] = '\0';
    es->items[es->n].path = copy;
    ws_fileinfo_fill(&es->items[es->n].info, copy, e->path_len, &e->st);
    es->n++;
    es->bytes += e->path_len + ENTRY_OVERHEAD;
    return 0;
}

static void entries_free(struct entries *es)
{
    for (size_t i = 0; i < es->n; i++)
        free(es->items[i].path);
    free(es->items);
    free(es->ptrs);
}

static int entries_finish(struct entries *es)
{
    es->ptrs = calloc(es->n ? es->n : 1, sizeof(*es->ptrs));
    if (!es->ptrs)
        return -ENOMEM;
    for (size_t i = 0; i < es->n; i++)
        es->ptrs[i] = &es->items[i].info;
    return 0;
}

/* The outcome of a walk that filled `es`: a response budget hit becomes a
 * truncated listing, and the pointer array is built. */
static int entries_result(int err, struct entries *es, bool *truncated)
{
    if (err == -ENOBUFS && es->budget_hit) {
        err = 0;
        *truncated = true;
    }
    if (err == 0)
        err = entries_finish(es);
    return err;
}

/* What ListDir and Glob walk: Glob the entries below `path` that match
 * `pattern`, ListDir (no pattern) those down to `depth` levels. */
struct listing {
    const char *path;
    const char *pattern;
    unsigned depth;
    unsigned max;
};

/* Walks into `entries` and answers with what it found: `resp`, whose
 * fields the entries, their count and the truncated flag go to (ListDir
 * and Glob name them differently). */
static void run_listing(struct ws_call *call, struct ws_workspace *ws, const struct listing *l,
                        ProtobufCMessage *resp, Workspace__V1__FileInfo ***ret_entries,
                        size_t *ret_n, protobuf_c_boolean *ret_truncated)
{
    const char *path = root_if_empty(l->path);
    struct ws_fsops *ops = ws_workspace_fsops(ws);
    struct entries es = {0};
    bool truncated = false;
    int err;

    if (l->pattern)
        err = ws_glob(ops, path, l->pattern, l->max, entries_add, &es, &truncated);
    else
        err = ws_list(ops, path, l->depth, l->max, entries_add, &es, &truncated);
    err = entries_result(err, &es, &truncated);
    if (err < 0) {
        ws_services_fs_fail(call, ws, err, NULL);
        goto out;
    }
    *ret_entries = es.ptrs;
    *ret_n = es.n;
    *ret_truncated = truncated;
    ws_services_fs_finish(call, ws, resp, NULL);
out:
    entries_free(&es);
}

static void list_dir_run(struct ws_call *call)
{
    struct ws_services_unary *u = ws_call_data(call);
    const Workspace__V1__ListDirRequest *req = (const void *)u->req;
    Workspace__V1__ListDirResponse resp = WORKSPACE__V1__LIST_DIR_RESPONSE__INIT;
    struct listing l = {.path = req->path, .depth = req->depth, .max = req->max_entries};

    run_listing(call, u->ws, &l, &resp.base, &resp.entries, &resp.n_entries, &resp.truncated);
}

static void list_dir(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__ListDirRequest *req = (const void *)msg;
    struct ws_services_unary *u = fs_unary(call, msg, req->workspace_id, root_if_empty(req->path));

    if (u)
        ws_services_offload(call, &u->job, WS_SERVICES_LANE_FS, list_dir_run, NULL);
}

static void glob_run(struct ws_call *call)
{
    struct ws_services_unary *u = ws_call_data(call);
    const Workspace__V1__GlobRequest *req = (const void *)u->req;
    Workspace__V1__GlobResponse resp = WORKSPACE__V1__GLOB_RESPONSE__INIT;
    struct listing l = {.path = req->path, .pattern = req->pattern, .max = req->max_results};

    run_listing(call, u->ws, &l, &resp.base, &resp.matches, &resp.n_matches, &resp.truncated);
}

static void glob(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__GlobRequest *req = (const void *)msg;
    struct ws_services_unary *u = fs_unary(call, msg, req->workspace_id, root_if_empty(req->path));

    if (u)
        ws_services_offload(call, &u->job, WS_SERVICES_LANE_FS, glob_run, NULL);
}

/* ---- Grep ---- */

struct grep_state {
    struct ws_services_job job;
    /* The request, for the job that starts the search. */
    Workspace__V1__GrepRequest *req;
    struct ws_workspace *ws;
    struct ws_grep *grep;
    Workspace__V1__GrepMatch matches[GREP_BATCH];
    Workspace__V1__GrepMatch *ptrs[GREP_BATCH];
    char *strings[GREP_BATCH]; /* path + line copies, one block each */
    size_t n;
};

static void grep_clear(struct grep_state *gs)
{
    for (size_t i = 0; i < gs->n; i++)
        free(gs->strings[i]);
    gs->n = 0;
}

static void grep_destroy(struct ws_call *call)
{
    struct grep_state *gs = ws_call_data(call);

    if (!gs)
        return;
    grep_clear(gs);
    ws_grep_free(gs->grep);
    ws_workspace_unref(gs->ws);
    if (gs->req)
        protobuf_c_message_free_unpacked(&gs->req->base, NULL);
    free(gs);
}

static int grep_collect(void *userdata, const struct ws_grep_match *m)
{
    struct grep_state *gs = userdata;
    Workspace__V1__GrepMatch *gm;
    char *block;

    if (gs->n >= GREP_BATCH)
        return -ENOBUFS;
    block = malloc(m->path_len + 1 + m->line_len + 1);
    if (!block)
        return -ENOMEM;
    memcpy(block, m->path, m->path_len);
    block[m->path_len] = '\0';
    memcpy(block + m->path_len + 1, m->line, m->line_len);
    gm = &gs->matches[gs->n];
    workspace__v1__grep_match__init(gm);
    /* FileInfo's UTF-8 rule applies to the path here as well. */
    Workspace__V1__FileInfo tmp;
    struct ws_stat none = {0};
    ws_fileinfo_fill(&tmp, block, m->path_len, &none);
    gm->path = tmp.path;
    gm->path_bytes = tmp.path_bytes;
    gm->line_number = m->line_number;
    gm->line.data = (uint8_t *)block + m->path_len + 1;
    gm->line.len = m->line_len;
    gm->line_truncated = m->line_truncated;
    gs->strings[gs->n] = block;
    gs->ptrs[gs->n] = gm;
    gs->n++;
    return 0;
}

/* One batch, on the FS lane: sent, or sent with the summary and the
 * status when the search is over. */
static void grep_next(struct ws_call *call)
{
    struct grep_state *gs = ws_call_data(call);
    Workspace__V1__GrepResponse resp = WORKSPACE__V1__GREP_RESPONSE__INIT;
    Workspace__V1__GrepSummary summary = WORKSPACE__V1__GREP_SUMMARY__INIT;
    struct ws_grep_summary sum;
    int more;

    grep_clear(gs);
    more = ws_grep_next(gs->grep, GREP_BATCH, grep_collect, gs);
    if (more < 0) {
        ws_services_fs_fail(call, gs->ws, more, NULL);
        return;
    }
    resp.matches = gs->ptrs;
    resp.n_matches = gs->n;
    if (more) {
        /* Last: once sent, grep_sent may queue the next batch. */
        ws_call_send(call, &resp.base);
        return;
    }
    ws_grep_get_summary(gs->grep, &sum);
    summary.files_scanned = sum.files_scanned;
    summary.binary_files_skipped = sum.binary_files_skipped;
    summary.limited_files = sum.limited_files;
    summary.matches = sum.matches;
    summary.truncated = sum.truncated;
    resp.summary = &summary;
    ws_services_fs_finish(call, gs->ws, &resp.base, NULL);
}

/* On the FS lane: compiles the pattern (which may take long too), then
 * the first batch. */
static void grep_begin(struct ws_call *call)
{
    struct grep_state *gs = ws_call_data(call);
    const Workspace__V1__GrepRequest *req = gs->req;
    struct ws_diag d = {0};
    struct ws_grep_request gr = {
        .path = root_if_empty(req->path),
        .pattern = req->pattern,
        .include = req->include,
        .ignore_case = req->ignore_case,
        .max_matches = req->max_matches,
        .max_depth = req->max_depth,
    };
    int err = ws_grep_start(ws_workspace_fsops(gs->ws), &gr, &d, &gs->grep);

    if (err < 0) {
        ws_services_fs_fail(call, gs->ws, err, &d);
        return;
    }
    grep_next(call);
}

static void grep_start(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__GrepRequest *req = (const void *)msg;
    struct grep_state *gs;

    gs = stream_state(call, sizeof(*gs));
    if (!gs ||
        ws_services_fs_workspace(call, req->workspace_id, root_if_empty(req->path), &gs->ws) < 0)
        return;
    gs->req = (Workspace__V1__GrepRequest *)ws_services_message_copy(msg);
    if (!gs->req) {
        ws_call_fail(call, -ENOMEM, NULL);
        return;
    }
    ws_services_job_init(&gs->job, call);
    ws_services_offload(call, &gs->job, WS_SERVICES_LANE_FS, grep_begin, NULL);
}

static void grep_sent(struct ws_call *call, bool ok)
{
    struct grep_state *gs = ws_call_data(call);

    if (ok && !ws_call_cancelled(call))
        ws_services_offload(call, &gs->job, WS_SERVICES_LANE_FS, grep_next, NULL);
}

static void grep_cancel(struct ws_call *call)
{
    struct grep_state *gs = ws_call_data(call);

    if (gs)
        ws_services_job_cancel(call, &gs->job);
}

/* ---- Stat, MakeDir, Remove, Move ---- */

/* How Stat, MakeDir and Move end once their operation succeeded: the
 * answer is what `path` is now, as the response's `info` (*slot, which
 * points here only while resp is sent); a path that cannot be stat'ed
 * fails the call. `audit`: as fs_finish. */
static void finish_info(struct ws_call *call, struct ws_workspace *ws, const char *path,
                        ProtobufCMessage *resp, Workspace__V1__FileInfo **slot,
                        const struct ws_audit_file *audit)
{
    Workspace__V1__FileInfo info;
    struct ws_vfs *fs = vfs_of(ws);
    struct ws_stat st;
    int err = fs->ops->stat(fs, path, &st);

    if (err < 0) {
        ws_services_fs_fail(call, ws, err, NULL);
        return;
    }
    ws_fileinfo_fill(&info, path, strlen(path), &st);
    *slot = &info;
    ws_services_fs_finish(call, ws, resp, audit);
}

static void stat_file(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__StatRequest *req = (const void *)msg;
    Workspace__V1__StatResponse resp = WORKSPACE__V1__STAT_RESPONSE__INIT;
    struct ws_workspace *ws;

    if (ws_services_fs_workspace(call, req->workspace_id, req->path, &ws) < 0)
        return;
    finish_info(call, ws, req->path, &resp.base, &resp.info, NULL);
    ws_workspace_unref(ws);
}

static void do_make_dir(struct ws_call *call, struct ws_workspace *ws,
                        const Workspace__V1__MakeDirRequest *req)
{
    Workspace__V1__MakeDirResponse resp = WORKSPACE__V1__MAKE_DIR_RESPONSE__INIT;
    struct ws_vfs *fs = vfs_of(ws);
    struct ws_diag d = {0};
    int err;

    err = ws_registry_usage_charge(registry_of(call), ws, 0, &d);
    if (err == 0) {
        ws_fsops_change_begin(ws_workspace_fsops(ws));
        err = fs->ops->mkdir(fs, req->path, req->parents, req->mode ? req->mode & 0777 : 0755);
        ws_fsops_change_end(ws_workspace_fsops(ws));
    }
    if (err < 0)
        ws_services_fs_fail(call, ws, err, &d);
    else
        finish_info(call, ws, req->path, &resp.base, &resp.info, NULL);
}

static void make_dir_run(struct ws_call *call)
{
    struct ws_services_unary *u = ws_call_data(call);

    do_make_dir(call, u->ws, (const void *)u->req);
}

/* With the byte quota on, the charge may walk the tenant's workspaces:
 * on the FS lane. */
static void make_dir(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__MakeDirRequest *req = (const void *)msg;
    struct ws_services *s = ws_call_method_data(call);
    struct ws_services_unary *u;
    struct ws_workspace *ws;

    if (s->usage_walks) {
        u = fs_unary(call, msg, req->workspace_id, req->path);
        if (u)
            ws_services_offload(call, &u->job, WS_SERVICES_LANE_FS, make_dir_run, NULL);
        return;
    }
    if (ws_services_fs_workspace(call, req->workspace_id, req->path, &ws) < 0)
        return;
    if (!wait_on_lane(call, msg, ws, req->workspace_id, req->path, make_dir_run))
        do_make_dir(call, ws, req);
    ws_workspace_unref(ws);
}

static void do_remove(struct ws_call *call, struct ws_workspace *ws,
                      const Workspace__V1__RemoveRequest *req)
{
    Workspace__V1__RemoveResponse resp = WORKSPACE__V1__REMOVE_RESPONSE__INIT;
    struct ws_vfs *fs = vfs_of(ws);
    struct ws_diag d = {0};
    uint64_t removed = 0;
    int err;

    ws_fsops_change_begin(ws_workspace_fsops(ws));
    err = fs->ops->remove(fs, req->path, req->recursive, &removed);
    ws_fsops_change_end(ws_workspace_fsops(ws));
    if (err < 0) {
        if (err == -EXDEV)
            ws_diag_set(&d, "the path is the workspace root or outside it");
        ws_services_fs_fail(call, ws, err, &d);
        return;
    }
    resp.removed = removed;
    ws_registry_usage_stale(registry_of(call), ws_workspace_id(ws));
    /* Audit hook. */
    ws_services_fs_finish(
        call, ws, &resp.base,
        &(struct ws_audit_file){.event = "remove", .path = req->path, .count = removed});
}

static void remove_run(struct ws_call *call)
{
    struct ws_services_unary *u = ws_call_data(call);

    do_remove(call, u->ws, (const void *)u->req);
}

/* A recursive Remove walks the tree: on the FS lane. */
static void remove_path(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__RemoveRequest *req = (const void *)msg;
    struct ws_services_unary *u;
    struct ws_workspace *ws;

    if (req->recursive) {
        u = fs_unary(call, msg, req->workspace_id, req->path);
        if (u)
            ws_services_offload(call, &u->job, WS_SERVICES_LANE_FS, remove_run, NULL);
        return;
    }
    if (ws_services_fs_workspace(call, req->workspace_id, req->path, &ws) < 0)
        return;
    if (!wait_on_lane(call, msg, ws, req->workspace_id, req->path, remove_run))
        do_remove(call, ws, req);
    ws_workspace_unref(ws);
}

static void do_move(struct ws_call *call, struct ws_workspace *ws,
                    const Workspace__V1__MoveRequest *req)
{
    Workspace__V1__MoveResponse resp = WORKSPACE__V1__MOVE_RESPONSE__INIT;
    struct ws_vfs *fs = vfs_of(ws);
    int err;

    if (ws_services_check_path(call, ws, req->to_path) < 0)
        return;
    ws_fsops_change_begin(ws_workspace_fsops(ws));
    err = fs->ops->move(fs, req->from_path, req->to_path, req->replace);
    ws_fsops_change_end(ws_workspace_fsops(ws));
    if (err < 0) {
        ws_services_fs_fail(call, ws, err, NULL);
        return;
    }
    if (req->replace)
        ws_registry_usage_stale(registry_of(call), ws_workspace_id(ws)); /* one may be gone */
    /* Audit hook. */
    finish_info(
        call, ws, req->to_path, &resp.base, &resp.info,
        &(struct ws_audit_file){.event = "move", .path = req->from_path, .to_path = req->to_path});
}

static void move_run(struct ws_call *call)
{
    struct ws_services_unary *u = ws_call_data(call);

    do_move(call, u->ws, (const void *)u->req);
}

static void move(struct ws_call *call, const ProtobufCMessage *msg)
{
    const Workspace__V1__MoveRequest *req = (const void *)msg;
    struct ws_workspace *ws;

    if (ws_services_fs_workspace(call, req->workspace_id, req->from_path, &ws) < 0)
        return;
    if (!wait_on_lane(call, msg, ws, req->workspace_id, req->from_path, move_run))
        do_move(call, ws, req);
    ws_workspace_unref(ws);
}

size_t ws_services_filesystem(struct ws_services *s, struct ws_rpc_method *out)
{
    static const struct ws_rpc_method methods[] = {
        WS_SERVICES_METHOD("/workspace.v1.FileSystem/ReadFile", WS_RPC_SERVER_STREAM,
                           &workspace__v1__read_file_request__descriptor, .on_start = read_start,
                           .on_sent = read_sent, .on_destroy = read_destroy),
        WS_SERVICES_METHOD("/workspace.v1.FileSystem/WriteFile", WS_RPC_CLIENT_STREAM,
                           &workspace__v1__write_file_request__descriptor, .on_start = write_start,
                           .on_message = write_message, .on_sent = write_sent,
                           .on_cancel = write_cancel, .on_destroy = write_destroy),
        WS_SERVICES_OFFLOADED("/workspace.v1.FileSystem/EditFile",
                              &workspace__v1__edit_file_request__descriptor, edit),
        WS_SERVICES_OFFLOADED("/workspace.v1.FileSystem/ListDir",
                              &workspace__v1__list_dir_request__descriptor, list_dir),
        WS_SERVICES_OFFLOADED("/workspace.v1.FileSystem/Glob",
                              &workspace__v1__glob_request__descriptor, glob),
        WS_SERVICES_METHOD("/workspace.v1.FileSystem/Grep", WS_RPC_SERVER_STREAM,
                           &workspace__v1__grep_request__descriptor, .on_start = grep_start,
                           .on_sent = grep_sent, .on_cancel = grep_cancel,
                           .on_destroy = grep_destroy),
        WS_SERVICES_UNARY("/workspace.v1.FileSystem/Stat", &workspace__v1__stat_request__descriptor,
                          stat_file),
        WS_SERVICES_OFFLOADED("/workspace.v1.FileSystem/MakeDir",
                              &workspace__v1__make_dir_request__descriptor, make_dir),
        WS_SERVICES_OFFLOADED("/workspace.v1.FileSystem/Remove",
                              &workspace__v1__remove_request__descriptor, remove_path),
        WS_SERVICES_OFFLOADED("/workspace.v1.FileSystem/Move",
                              &workspace__v1__move_request__descriptor, move),
    };

    size_t n = ws_services_add_methods(s, methods, WS_ELEMENTSOF(methods), out);
    n += ws_services_fs_watch(s, out + n);
    n += ws_services_fs_archive(s, out + n);
    return n;
}
