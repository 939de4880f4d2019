/* Edit: replace old_text by new_text in a whole file. The read, the
 * if_match hash and the new content are made outside the workspace's
 * commit lock (a large file must not hold up every other write of the
 * workspace); under the lock the edit only makes sure that the file is
 * still the one it read before it commits, and starts over when it is
 * not, so no write through the same ws_fsops slips in between (a lost
 * update). */
#include "server/vfs/ops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "server/vfs/internal.h"
#include "server/work/pool.h"

/* First allocation when the opened file claims to be empty (it may have
 * grown since). */
#define EDIT_MIN_BUF 4096
/* Tries that read outside the lock. After as many changes of the file
 * an edit with if_match is a conflict, and one without reads under the
 * lock (bounded by max_size, and sure to succeed). */
#define EDIT_TRIES_UNLOCKED 2
/* edit_once: the file changed before the commit; nothing was written. */
#define EDIT_AGAIN 1

static int size_cap(uint64_t max_size, struct ws_diag *d)
{
    ws_diag_set(d, "file larger than %llu bytes", (unsigned long long)max_size);
    ws_diag_meta(d, "limit", "%llu", (unsigned long long)max_size);
    return -EFBIG;
}

/* Reads the whole file into a malloc'd buffer, failing with -EFBIG past
 * max_size (0: no cap) and checking ctl (may be NULL) every
 * WS_BUDGET_CHECK_BYTES. *ret_st is the file as it was opened. */
static int read_all(struct ws_vfs *fs, const char *path, uint64_t max_size,
                    const struct ws_work_ctl *ctl, struct ws_diag *d, unsigned char **ret_buf,
                    size_t *ret_len, struct ws_stat *ret_st)
{
    struct ws_vfs_file *f = NULL;
    unsigned char *buf = NULL;
    size_t len = 0, cap, next_check = 0;
    struct ws_stat st;
    int r;

    r = fs->ops->open_read(fs, path, &f, &st);
    if (r < 0)
        return r;
    if (max_size && st.size > max_size) {
        r = size_cap(max_size, d);
        goto out;
    }
    if (st.size >= SIZE_MAX / 2) {
        r = -ENOMEM;
        goto out;
    }
    /* One byte more than the size, so a file that grew shows at once. */
    cap = (size_t)st.size + 1 < EDIT_MIN_BUF ? EDIT_MIN_BUF : (size_t)st.size + 1;
    buf = malloc(cap);
    if (!buf) {
        r = -ENOMEM;
        goto out;
    }
    for (;;) {
        ssize_t n;

        if (ctl && len >= next_check) {
            r = ws_work_ctl_check(ctl);
            if (r < 0)
                goto out;
            next_check = len + WS_BUDGET_CHECK_BYTES;
        }
        if (len == cap) {
            size_t ncap = cap * 2;
            unsigned char *nbuf;

            if (max_size && ncap > max_size + 1)
                ncap = (size_t)max_size + 1;
            if (ncap <= cap || cap > SIZE_MAX / 2) {
                r = -ENOMEM;
                goto out;
            }
            nbuf = realloc(buf, ncap);
            if (!nbuf) {
                r = -ENOMEM;
                goto out;
            }
            buf = nbuf;
            cap = ncap;
        }
        n = fs->ops->pread(f, buf + len, cap - len, len);
        if (n < 0) {
            r = (int)n;
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (max_size && len > max_size) {
            r = size_cap(max_size, d);
            goto out;
        }
    }
    *ret_buf = buf;
    *ret_len = len;
    *ret_st = st;
    buf = NULL;
    r = 0;
out:
    free(buf);
    fs->ops->close(f);
    return r;
}

/* Non-overlapping occurrences, left to right. */
static uint64_t count_matches(const unsigned char *buf, size_t len, const char *needle, size_t nlen)
{
    uint64_t n = 0;
    size_t off = 0;

    while (off + nlen <= len) {
        const unsigned char *m = memmem(buf + off, len - off, needle, nlen);

        if (!m)
            break;
        n++;
        off = (size_t)(m - buf) + nlen;
    }
    return n;
}

/* Streams the edited content into the session: the original with every
 * occurrence (or the only one) replaced. */
static int write_edited(struct ws_write_session *s, const unsigned char *buf, size_t len,
                        const struct ws_edit_request *req, struct ws_diag *d)
{
    size_t off = 0;
    int r;

    while (off < len) {
        const unsigned char *m = NULL;
        size_t upto;

        if (off + req->old_len <= len)
            m = memmem(buf + off, len - off, req->old_text, req->old_len);
        upto = m ? (size_t)(m - buf) : len;
        r = ws_write_append(s, buf + off, upto - off, d);
        if (r < 0)
            return r;
        if (!m)
            break;
        r = ws_write_append(s, req->new_text, req->new_len, d);
        if (r < 0)
            return r;
        off = upto + req->old_len;
    }
    return 0;
}

/* SHA-256 of buf, checking ctl (may be NULL) every
 * WS_BUDGET_CHECK_BYTES. */
static int sha256_buf(const unsigned char *buf, size_t len, const struct ws_work_ctl *ctl,
                      char ret_hex[WS_SHA256_HEX_LEN + 1])
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    EVP_MD_CTX *md;
    size_t off = 0;
    int r;

    md = EVP_MD_CTX_new();
    if (!md)
        return -ENOMEM;
    if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        r = -WS_EINTERNAL;
        goto out;
    }
    do {
        size_t n = len - off < WS_BUDGET_CHECK_BYTES ? len - off : WS_BUDGET_CHECK_BYTES;

        r = ws_work_ctl_check(ctl);
        if (r < 0)
            goto out;
        if (EVP_DigestUpdate(md, buf + off, n) != 1) {
            r = -WS_EINTERNAL;
            goto out;
        }
        off += n;
    } while (off < len);
    if (EVP_DigestFinal_ex(md, digest, &dlen) != 1 || dlen != 32) {
        r = -WS_EINTERNAL;
        goto out;
    }
    ws_sha256_hex(digest, ret_hex);
    r = 0;
out:
    EVP_MD_CTX_free(md);
    return r;
}

static int check_if_match(const char *want, const unsigned char *buf, size_t len,
                          const struct ws_work_ctl *ctl, struct ws_diag *d)
{
    char actual[WS_SHA256_HEX_LEN + 1];
    int r;

    r = sha256_buf(buf, len, ctl, actual);
    if (r < 0)
        return r;
    if (strcmp(want, actual) == 0)
        return 0;
    ws_diag_set(d, "content changed");
    ws_diag_meta(d, "actual_sha256", "%s", actual);
    return -WS_ECONFLICT;
}

/* One try at the edit: reads the file (under the commit lock when
 * `locked`), checks and edits it, then commits under the lock if the file
 * is still the one read. 0, -errno, or EDIT_AGAIN when it changed first
 * (nothing written). */
static int edit_once(struct ws_fsops *ops, const struct ws_edit_request *req, const char *want,
                     bool locked, struct ws_diag *d, struct ws_edit_result *ret)
{
    const struct ws_work_ctl *ctl = req->budget ? req->budget->ctl : NULL;
    struct ws_write_session *s = NULL;
    struct ws_write_result wr;
    unsigned char *buf = NULL;
    size_t len = 0;
    uint64_t matches, new_size, commits;
    struct ws_stat st;
    int r;

    if (locked) {
        ws_fsops_change_begin(ops);
        pthread_mutex_lock(&ops->commit_lock);
    }
    commits = ws_fsops_commits(ops);
    r = read_all(ops->fs, req->path, req->max_size, ctl, d, &buf, &len, &st);
    if (r < 0) {
        /* An if_match on a missing file is a conflict, as for writes. */
        if (r == -ENOENT && want) {
            ws_diag_set(d, "file does not exist");
            ws_diag_meta(d, "actual_sha256", "%s", "");
            r = -WS_ECONFLICT;
        }
        goto out;
    }
    if (want) {
        r = check_if_match(want, buf, len, ctl, d);
        if (r < 0)
            goto out;
    }
    matches = count_matches(buf, len, req->old_text, req->old_len);
    if (matches == 0 || (matches > 1 && !req->replace_all)) {
        ws_diag_set(d, "old_text found %llu times", (unsigned long long)matches);
        ws_diag_meta(d, "matches", "%llu", (unsigned long long)matches);
        r = matches == 0 ? -WS_ENOMATCH : -WS_EMULTIMATCH;
        goto out;
    }
    if (matches > UINT32_MAX) {
        r = -WS_ELIMIT;
        goto out;
    }
    /* new_size = len - matches * old_len + matches * new_len, without
     * overflow: the removed part is inside the file, the added part is
     * checked against the cap. */
    new_size = (uint64_t)len - matches * req->old_len;
    if (req->new_len && matches > (UINT64_MAX - new_size) / req->new_len) {
        r = size_cap(req->max_size, d);
        goto out;
    }
    new_size += matches * req->new_len;
    if (req->max_size && new_size > req->max_size) {
        r = size_cap(req->max_size, d);
        goto out;
    }

    /* mode 0 keeps the file's mode. */
    r = ws_write_begin(ops,
                       &(struct ws_write_request){
                           .path = req->path,
                           .opts = {.max_size = req->max_size},
                       },
                       d, &s);
    if (r < 0)
        goto out;
    r = write_edited(s, buf, len, req, d);
    if (r < 0)
        goto out;
    if (!locked) {
        ws_fsops_change_begin(ops);
        pthread_mutex_lock(&ops->commit_lock);
        locked = true;
        if (!ws_target_unchanged(ops, req->path, commits, &st)) {
            r = EDIT_AGAIN;
            goto out;
        }
    }
    r = ws_write_commit_held(s, &wr);
    s = NULL;
    if (r < 0)
        goto out;
    if (ret) {
        ret->replacements = (uint32_t)matches;
        ret->st = wr.st;
        memcpy(ret->sha256, wr.sha256, sizeof(ret->sha256));
    }
    r = 0;
out:
    ws_write_abort(s);
    if (locked) {
        pthread_mutex_unlock(&ops->commit_lock);
        ws_fsops_change_end(ops);
    }
    free(buf);
    return r;
}

int ws_edit(struct ws_fsops *ops, const struct ws_edit_request *req, struct ws_diag *d,
            struct ws_edit_result *ret)
{
    char want[WS_SHA256_HEX_LEN + 1];
    bool has_if_match = req->if_match && req->if_match[0];
    int r;

    r = ws_vfs_check_path(req->path);
    if (r < 0)
        return r;
    if (!req->old_text || req->old_len == 0) {
        ws_diag_set(d, "old_text is empty");
        ws_diag_meta(d, "field", "old_text");
        return -WS_EMALFORMED;
    }
    if (!req->new_text && req->new_len) {
        ws_diag_meta(d, "field", "new_text");
        return -WS_EMALFORMED;
    }
    if (has_if_match) {
        r = ws_sha256_parse(req->if_match, want);
        if (r < 0) {
            ws_diag_set(d, "if_match must be 64 hex digits");
            ws_diag_meta(d, "field", "if_match");
            return r;
        }
    }
    for (int tries = 1;; tries++) {
        bool locked = !has_if_match && tries > EDIT_TRIES_UNLOCKED;

        r = edit_once(ops, req, has_if_match ? want : NULL, locked, d, ret);
        if (r != EDIT_AGAIN)
            return r;
        if (has_if_match && tries == EDIT_TRIES_UNLOCKED) {
            /* What it holds now is not known without a third hash. */
            ws_diag_set(d, "content changed while it was compared");
            return -WS_ECONFLICT;
        }
    }
}
