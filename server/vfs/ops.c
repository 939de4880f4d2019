/* The per-workspace state of the generic layer, budgets, path
 * normalization and whole-file hashing. */
#include "server/vfs/ops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "server/vfs/internal.h"
#include "server/work/pool.h"

/* Read size when hashing a whole file. */
#define SHA_READ_CHUNK (64 * 1024)

int ws_fsops_new(struct ws_vfs *fs, struct ws_fsops **ret)
{
    struct ws_fsops *ops;

    ops = calloc(1, sizeof(*ops));
    if (!ops)
        return -ENOMEM;
    ops->fs = fs;
    if (pthread_mutex_init(&ops->commit_lock, NULL) != 0) {
        free(ops);
        return -ENOMEM;
    }
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    int rc = pthread_rwlock_init(&ops->change_lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_destroy(&ops->commit_lock);
        free(ops);
        return -ENOMEM;
    }
    *ret = ops;
    return 0;
}

void ws_fsops_free(struct ws_fsops *ops)
{
    if (!ops)
        return;
    pthread_mutex_destroy(&ops->commit_lock);
    pthread_rwlock_destroy(&ops->change_lock);
    free(ops);
}

void ws_fsops_change_begin(struct ws_fsops *ops)
{
    pthread_rwlock_rdlock(&ops->change_lock);
}

void ws_fsops_change_end(struct ws_fsops *ops)
{
    pthread_rwlock_unlock(&ops->change_lock);
}

void ws_fsops_freeze(struct ws_fsops *ops)
{
    atomic_fetch_add(&ops->freezers, 1);
    pthread_rwlock_wrlock(&ops->change_lock);
}

void ws_fsops_thaw(struct ws_fsops *ops)
{
    pthread_rwlock_unlock(&ops->change_lock);
    atomic_fetch_sub(&ops->freezers, 1);
}

bool ws_fsops_frozen(struct ws_fsops *ops)
{
    return atomic_load(&ops->freezers) > 0;
}

struct ws_vfs *ws_fsops_vfs(struct ws_fsops *ops)
{
    return ops->fs;
}

int ws_budget_check(const struct ws_budget *b)
{
    return b ? ws_work_ctl_check(b->ctl) : 0;
}

const char *ws_trunc_reason_name(enum ws_trunc_reason r)
{
    switch (r) {
    case WS_TRUNC_MAX_RESULTS:
        return "max_results";
    case WS_TRUNC_ENTRIES_BUDGET:
        return "entries_budget";
    case WS_TRUNC_TIME_BUDGET:
        return "time_budget";
    case WS_TRUNC_NONE:
        break;
    }
    return "";
}

bool ws_target_unchanged(struct ws_fsops *ops, const char *path, uint64_t commits,
                         const struct ws_stat *was)
{
    struct ws_stat now;

    if (ws_fsops_commits(ops) != commits)
        return false;
    if (ops->fs->ops->stat(ops->fs, path, &now) < 0)
        return false;
    return now.type == was->type && now.size == was->size && now.mtime_ns == was->mtime_ns &&
           now.nlink == was->nlink;
}

int ws_path_normalize(const char *path, char *buf, size_t size)
{
    size_t len = 0;
    long depth = 0;
    const char *p = path;

    if (size == 0)
        return -WS_EBADPATH;
    while (*p) {
        const char *end = strchrnul(p, '/');
        size_t n = (size_t)(end - p);

        if (n == 0 || (n == 1 && p[0] == '.')) {
            /* nothing */
        } else {
            /* ".." stays: folding it would be wrong after a symlink
             * ("link/.." is link's target's parent, not "."). */
            bool dotdot = n == 2 && p[0] == '.' && p[1] == '.';

            depth += dotdot ? -1 : 1;
            if (depth < 0)
                return -EXDEV;
            size_t need = len + (len ? 1 : 0) + n;

            if (need + 1 > size)
                return -WS_EBADPATH;
            if (len)
                buf[len++] = '/';
            memcpy(buf + len, p, n);
            len += n;
        }
        p = *end ? end + 1 : end;
    }
    buf[len] = '\0';
    return (int)len;
}

void ws_sha256_hex(const unsigned char digest[32], char ret_hex[WS_SHA256_HEX_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";

    for (size_t i = 0; i < 32; i++) {
        ret_hex[2 * i] = hex[digest[i] >> 4];
        ret_hex[2 * i + 1] = hex[digest[i] & 0xf];
    }
    ret_hex[WS_SHA256_HEX_LEN] = '\0';
}

int ws_sha256_parse(const char *in, char ret_hex[WS_SHA256_HEX_LEN + 1])
{
    char out[WS_SHA256_HEX_LEN + 1];
    size_t len = strnlen(in, WS_SHA256_HEX_LEN + 1);

    if (len != WS_SHA256_HEX_LEN)
        return -WS_EMALFORMED;
    for (size_t i = 0; i < len; i++) {
        char c = in[i];

        if (c >= 'A' && c <= 'F')
            c = (char)(c - 'A' + 'a');
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return -WS_EMALFORMED;
        out[i] = c;
    }
    out[len] = '\0';
    memcpy(ret_hex, out, sizeof(out));
    return 0;
}

int ws_sha256_open_file(struct ws_vfs *fs, struct ws_vfs_file *f, uint64_t max_size,
                        const struct ws_work_ctl *ctl, char ret_hex[WS_SHA256_HEX_LEN + 1])
{
    EVP_MD_CTX *md = NULL;
    unsigned char *buf = NULL;
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    uint64_t off = 0, next_check = 0;
    int r;

    buf = malloc(SHA_READ_CHUNK);
    md = EVP_MD_CTX_new();
    if (!buf || !md) {
        r = -ENOMEM;
        goto out;
    }
    if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        r = -WS_EINTERNAL;
        goto out;
    }
    for (;;) {
        ssize_t n;

        if (ctl && off >= next_check) {
            r = ws_work_ctl_check(ctl);
            if (r < 0)
                goto out;
            next_check = off + WS_BUDGET_CHECK_BYTES;
        }
        n = fs->ops->pread(f, buf, SHA_READ_CHUNK, off);
        if (n < 0) {
            r = (int)n;
            goto out;
        }
        if (n == 0)
            break;
        if (EVP_DigestUpdate(md, buf, (size_t)n) != 1) {
            r = -WS_EINTERNAL;
            goto out;
        }
        off += (uint64_t)n;
        if (max_size && off > max_size) {
            r = -EFBIG;
            goto out;
        }
    }
    if (EVP_DigestFinal_ex(md, digest, &dlen) != 1 || dlen != 32) {
        r = -WS_EINTERNAL;
        goto out;
    }
    ws_sha256_hex(digest, ret_hex);
    r = 0;
out:
    EVP_MD_CTX_free(md);
    free(buf);
    return r;
}

int ws_sha256_file(struct ws_vfs *fs, const char *path, char ret_hex[WS_SHA256_HEX_LEN + 1])
{
    struct ws_vfs_file *f = NULL;
    struct ws_stat st;
    int r;

    r = ws_vfs_check_path(path);
    if (r < 0)
        return r;
    r = fs->ops->open_read(fs, path, &f, &st);
    if (r < 0)
        return r;
    r = ws_sha256_open_file(fs, f, 0, NULL, ret_hex);
    fs->ops->close(f);
    return r;
}
