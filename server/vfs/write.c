/* Write sessions: a vfs writer plus a running SHA-256, the size cap and
 * the if_match check. The check hashes the target before the workspace's
 * commit lock is taken (a large file must not hold up every other write
 * of the workspace) and, under the lock, only makes sure that the target
 * is still the file it hashed. */
#include "server/vfs/ops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "server/vfs/internal.h"
#include "server/work/pool.h"

/* Hashes of the target one commit makes at most: the second change of
 * the target between its hash and the lock is a conflict. */
#define IF_MATCH_TRIES 2

struct ws_write_session {
    struct ws_fsops *ops;
    struct ws_vfs_writer *w;
    EVP_MD_CTX *md;
    uint64_t written;
    uint64_t max_size;
    bool failed;
    bool has_if_match;
    char if_match[WS_SHA256_HEX_LEN + 1];
    char path[]; /* for the if_match check at commit */
};

static void session_free(struct ws_write_session *s)
{
    if (!s)
        return;
    if (s->w)
        s->ops->fs->ops->write_abort(s->w);
    EVP_MD_CTX_free(s->md);
    free(s);
}

int ws_write_begin(struct ws_fsops *ops, const struct ws_write_request *req, struct ws_diag *d,
                   struct ws_write_session **ret)
{
    struct ws_write_session *s = NULL;
    size_t plen;
    int r;

    r = ws_vfs_check_path(req->path);
    if (r < 0)
        return r;
    plen = strlen(req->path);
    s = calloc(1, sizeof(*s) + plen + 1);
    if (!s)
        return -ENOMEM;
    s->ops = ops;
    memcpy(s->path, req->path, plen + 1);
    s->max_size = req->opts.max_size;
    if (req->if_match && req->if_match[0]) {
        r = ws_sha256_parse(req->if_match, s->if_match);
        if (r < 0) {
            ws_diag_set(d, "if_match must be 64 hex digits");
            ws_diag_meta(d, "field", "if_match");
            goto out;
        }
        s->has_if_match = true;
    }
    s->md = EVP_MD_CTX_new();
    if (!s->md) {
        r = -ENOMEM;
        goto out;
    }
    if (EVP_DigestInit_ex(s->md, EVP_sha256(), NULL) != 1) {
        r = -WS_EINTERNAL;
        goto out;
    }
    r = ops->fs->ops->write_begin(ops->fs, req->path, &req->opts, &s->w);
    if (r < 0)
        goto out;
    *ret = s;
    s = NULL;
    r = 0;
out:
    session_free(s);
    return r;
}

int ws_write_append(struct ws_write_session *s, const void *buf, size_t len, struct ws_diag *d)
{
    int r;

    if (s->failed)
        return -EINVAL;
    if (len == 0)
        return 0;
    if (s->max_size && (s->written > s->max_size || len > s->max_size - s->written)) {
        s->failed = true;
        ws_diag_set(d, "file larger than %llu bytes", (unsigned long long)s->max_size);
        ws_diag_meta(d, "limit", "%llu", (unsigned long long)s->max_size);
        return -EFBIG;
    }
    r = s->ops->fs->ops->write(s->w, buf, len);
    if (r < 0) {
        s->failed = true;
        if (r == -EFBIG)
            ws_diag_meta(d, "limit", "%llu", (unsigned long long)s->max_size);
        return r;
    }
    if (EVP_DigestUpdate(s->md, buf, len) != 1) {
        s->failed = true;
        return -WS_EINTERNAL;
    }
    s->written += len;
    return 0;
}

/* Hashes the current target into `actual` ("" when there is none) and
 * notes what it was in *ret_st. A target over the session's size cap is
 * refused from its stat, before a byte of it is read. */
static int hash_target(struct ws_write_session *s, const struct ws_work_ctl *ctl, struct ws_diag *d,
                       char actual[WS_SHA256_HEX_LEN + 1], struct ws_stat *ret_st)
{
    struct ws_vfs *fs = s->ops->fs;
    struct ws_vfs_file *f = NULL;
    struct ws_stat st;
    int r;

    r = fs->ops->open_read(fs, s->path, &f, &st);
    if (r == -ENOENT) {
        actual[0] = '\0';
        return 0;
    }
    if (r < 0)
        return r;
    if (s->max_size && st.size > s->max_size)
        r = -EFBIG;
    else
        r = ws_sha256_open_file(fs, f, s->max_size, ctl, actual);
    fs->ops->close(f);
    if (r == -EFBIG) {
        ws_diag_set(d, "file larger than %llu bytes", (unsigned long long)s->max_size);
        ws_diag_meta(d, "limit", "%llu", (unsigned long long)s->max_size);
        ws_diag_meta(d, "field", "if_match");
    }
    if (r < 0)
        return r;
    *ret_st = st;
    return 0;
}

static int conflict(const char *actual, struct ws_diag *d)
{
    ws_diag_set(d, "%s", actual[0] ? "content changed" : "file does not exist");
    ws_diag_meta(d, "actual_sha256", "%s", actual);
    return -WS_ECONFLICT;
}

int ws_write_commit_held(struct ws_write_session *s, struct ws_write_result *ret)
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    struct ws_write_result res = {0};
    struct ws_vfs_writer *w;
    int r;

    if (s->failed || s->has_if_match) {
        r = -EINVAL;
        goto out;
    }
    if (EVP_DigestFinal_ex(s->md, digest, &dlen) != 1 || dlen != 32) {
        r = -WS_EINTERNAL;
        goto out;
    }
    w = s->w;
    s->w = NULL; /* write_commit frees it whatever happens */
    r = s->ops->fs->ops->write_commit(w, &res.st);
    /* Counted whatever the result: a failed commit may still have
     * changed the target, and a needless second hash is cheap. */
    __atomic_store_n(&s->ops->commits, s->ops->commits + 1, __ATOMIC_RELEASE);
    if (r < 0)
        goto out;
    res.bytes_written = s->written;
    ws_sha256_hex(digest, res.sha256);
    if (ret)
        *ret = res;
    r = 0;
out:
    session_free(s);
    return r;
}

int ws_write_commit(struct ws_write_session *s, struct ws_diag *d, struct ws_write_result *ret)
{
    return ws_write_commit_within(s, NULL, d, ret);
}

int ws_write_commit_within(struct ws_write_session *s, const struct ws_budget *budget,
                           struct ws_diag *d, struct ws_write_result *ret)
{
    const struct ws_work_ctl *ctl = budget ? budget->ctl : NULL;
    struct ws_fsops *ops = s->ops;
    char actual[WS_SHA256_HEX_LEN + 1];
    int r;

    if (s->failed) {
        r = -EINVAL;
        goto fail;
    }
    if (s->has_if_match) {
        for (int tries = 1;; tries++) {
            uint64_t commits = ws_fsops_commits(ops);
            struct ws_stat st;
            bool same;

            r = hash_target(s, ctl, d, actual, &st);
            if (r < 0)
                goto fail;
            if (strcmp(actual, s->if_match) != 0) {
                r = conflict(actual, d);
                goto fail;
            }
            ws_fsops_change_begin(ops);
            pthread_mutex_lock(&ops->commit_lock);
            same = ws_target_unchanged(ops, s->path, commits, &st);
            if (same) {
                /* Checked: from here on it is a plain commit. */
                s->has_if_match = false;
                r = ws_write_commit_held(s, ret);
            }
            pthread_mutex_unlock(&ops->commit_lock);
            ws_fsops_change_end(ops);
            if (same)
                return r;
            if (tries == IF_MATCH_TRIES) {
                /* What it holds now is not known without a third hash. */
                ws_diag_set(d, "content changed while it was compared");
                r = -WS_ECONFLICT;
                goto fail;
            }
        }
    }
    ws_fsops_change_begin(ops);
    pthread_mutex_lock(&ops->commit_lock);
    r = ws_write_commit_held(s, ret);
    pthread_mutex_unlock(&ops->commit_lock);
    ws_fsops_change_end(ops);
    return r;
fail:
    session_free(s);
    return r;
}

void ws_write_abort(struct ws_write_session *s)
{
    session_free(s);
}
