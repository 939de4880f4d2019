/* Write sessions: a vfs writer plus a running SHA-256, the size cap and
 * the if_match check done under the workspace's commit lock. */
#include "server/vfs/ops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "server/vfs/internal.h"

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

/* Compares the current content of the target with if_match. */
static int check_if_match(struct ws_write_session *s, struct ws_diag *d)
{
    char actual[WS_SHA256_HEX_LEN + 1];
    int r;

    r = ws_sha256_file(s->ops->fs, s->path, actual);
    if (r == -ENOENT)
        actual[0] = '\0';
    else if (r < 0)
        return r;
    if (strcmp(actual, s->if_match) == 0)
        return 0;
    ws_diag_set(d, "%s", actual[0] ? "content changed" : "file does not exist");
    ws_diag_meta(d, "actual_sha256", "%s", actual);
    return -WS_ECONFLICT;
}

int ws_write_commit_held(struct ws_write_session *s, struct ws_diag *d, struct ws_write_result *ret)
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    struct ws_write_result res = {0};
    struct ws_vfs_writer *w;
    int r;

    if (s->failed) {
        r = -EINVAL;
        goto out;
    }
    if (EVP_DigestFinal_ex(s->md, digest, &dlen) != 1 || dlen != 32) {
        r = -WS_EINTERNAL;
        goto out;
    }
    if (s->has_if_match) {
        r = check_if_match(s, d);
        if (r < 0)
            goto out;
    }
    w = s->w;
    s->w = NULL; /* write_commit frees it whatever happens */
    r = s->ops->fs->ops->write_commit(w, &res.st);
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
    struct ws_fsops *ops = s->ops;
    int r;

    pthread_mutex_lock(&ops->commit_lock);
    r = ws_write_commit_held(s, d, ret);
    pthread_mutex_unlock(&ops->commit_lock);
    return r;
}

void ws_write_abort(struct ws_write_session *s)
{
    session_free(s);
}
