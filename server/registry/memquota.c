/* Per-tenant accounts over memory workspaces; see memquota.h. */
#include "server/registry/memquota.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/providers/memory.h"
#include "server/registry/registry.h"

struct mq_fs;

/* One tenant's trees; lives while it has any (quota lock). */
struct account {
    char name[WS_TENANT_MAX + 1];
    unsigned refs; /* trees; quota lock */
    pthread_mutex_t lock;
    /* Entries' costs and names over all the trees; the trees themselves
     * (their bytes are read live). Account lock. */
    uint64_t meta;
    struct mq_fs *trees;
    struct account *next;
};

struct ws_memquota {
    pthread_mutex_t lock;
    uint64_t max;
    struct account *accounts;
    /* ws_memquota_free ran while a tree was still alive: the last one's
     * destroy frees the quota. */
    bool dead;
};

struct mq_fs {
    struct ws_vfs base;
    /* The inner tree's table, with the path-taking and changing entries
     * replaced by this file's. */
    struct ws_vfs_ops ops;
    struct ws_vfs *inner;
    struct ws_memquota *q;
    struct account *acct;
    uint64_t meta; /* this tree's share of acct->meta */
    struct mq_fs *next;
};

/* A writer of a wrapped tree: the inner writer, and what its commit
 * may add (the new file's entry). */
struct ws_vfs_writer {
    struct mq_fs *fs;
    struct ws_vfs_writer *inner;
    size_t leaf_len;
};

/* The last refusal on this thread, for ws_memquota_explain. */
static _Thread_local struct {
    bool set;
    uint64_t limit, used;
} refusal;

static struct mq_fs *to_mq(struct ws_vfs *fs)
{
    return (struct mq_fs *)fs;
}

/* What the tenant's trees hold now; account lock held. */
static uint64_t used_locked(const struct account *a)
{
    uint64_t used = a->meta;

    for (const struct mq_fs *t = a->trees; t; t = t->next)
        used += ws_memfs_bytes(t->inner);
    return used;
}

/* Whether `more` bytes still fit; on false the refusal is noted for
 * ws_memquota_explain. Account lock held. */
static bool room_for(struct mq_fs *fs, uint64_t more)
{
    uint64_t used = used_locked(fs->acct), max = fs->q->max;

    /* Only the latest change on this thread is explained: a refusal by
     * the tree's own bound after this check must not look like ours. */
    refusal.set = false;
    if (used <= max && more <= max - used)
        return true;
    refusal.set = true;
    refusal.limit = max;
    refusal.used = used;
    return false;
}

static void meta_add(struct mq_fs *fs, int64_t delta)
{
    fs->meta += (uint64_t)delta;
    fs->acct->meta += (uint64_t)delta;
}

/* The lengths of the last `k` components of `path` read lexically ("."
 * skipped, ".." drops the one before, as the tree resolves it), leaving
 * out the last `skip` components. */
static uint64_t tail_names(const char *path, size_t k, size_t skip)
{
    size_t cap = strlen(path) / 2 + 2, n = 0;
    uint16_t *len = malloc(cap * sizeof(*len));
    uint64_t sum = 0;

    if (!len)
        return 0;
    for (const char *p = path; *p;) {
        size_t l = strcspn(p, "/");
        if (l == 2 && p[0] == '.' && p[1] == '.') {
            if (n)
                n--;
        } else if (l && !(l == 1 && p[0] == '.') && n < cap) {
            len[n++] = (uint16_t)(l > UINT16_MAX ? UINT16_MAX : l);
        }
        p += l;
        p += *p == '/';
    }
    for (size_t i = 0; i < k && i + skip < n; i++)
        sum += len[n - 1 - skip - i];
    free(len);
    return sum;
}

static size_t leaf_len(const char *path)
{
    return (size_t)tail_names(path, 1, 0);
}

/* The cost of everything below `path` (its own entry left out): the
 * entries and names of its subtree. Account lock held, so no change runs
 * meanwhile and the walk is exact. */
static int subtree_meta(struct mq_fs *fs, const char *path, uint64_t *ret)
{
    const struct ws_vfs_ops *in = fs->inner->ops;
    struct ws_vfs_dir **stack = NULL, *d;
    size_t n = 0, cap = 0;
    struct ws_dirent ent;
    struct ws_stat st;
    uint64_t sum = 0;
    int err;

    err = in->stat(fs->inner, path, &st);
    if (err < 0 || st.type != WS_FT_DIRECTORY)
        goto out;
    err = in->opendir(fs->inner, path, &d);
    if (err < 0)
        goto out;
    for (;;) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct ws_vfs_dir **ns = realloc(stack, ncap * sizeof(*ns));
            if (!ns) {
                in->closedir(d);
                err = -ENOMEM;
                goto out;
            }
            stack = ns;
            cap = ncap;
        }
        stack[n++] = d;
        while (n) {
            err = in->readdir(stack[n - 1], &ent);
            if (err < 0)
                goto out;
            if (err == 0) {
                in->closedir(stack[--n]);
                continue;
            }
            sum += WS_MEMQUOTA_ENTRY_COST + ent.name_len;
            if (ent.type == WS_FT_DIRECTORY) {
                char name[WS_VFS_NAME_MAX + 1];
                snprintf(name, sizeof(name), "%.*s", (int)ent.name_len, ent.name);
                err = in->opendir_at(stack[n - 1], name, &d);
                if (err < 0)
                    goto out;
                break;
            }
        }
        if (!n)
            break;
    }
    err = 0;
out:
    while (n)
        in->closedir(stack[--n]);
    free(stack);
    if (err >= 0)
        *ret = sum;
    return err;
}

/* ---- the wrapped table ---- */

static int mq_stat(struct ws_vfs *vfs, const char *path, struct ws_stat *ret_st)
{
    struct mq_fs *fs = to_mq(vfs);

    return fs->inner->ops->stat(fs->inner, path, ret_st);
}

static int mq_opendir(struct ws_vfs *vfs, const char *path, struct ws_vfs_dir **ret_dir)
{
    struct mq_fs *fs = to_mq(vfs);

    return fs->inner->ops->opendir(fs->inner, path, ret_dir);
}

static int mq_open_read(struct ws_vfs *vfs, const char *path, struct ws_vfs_file **ret_file,
                        struct ws_stat *ret_st)
{
    struct mq_fs *fs = to_mq(vfs);

    return fs->inner->ops->open_read(fs->inner, path, ret_file, ret_st);
}

static int mq_write_begin(struct ws_vfs *vfs, const char *path, const struct ws_write_opts *opts,
                          struct ws_vfs_writer **ret_writer)
{
    struct mq_fs *fs = to_mq(vfs);
    struct ws_vfs_writer *w = calloc(1, sizeof(*w));
    size_t leaf = leaf_len(path);
    uint64_t before;
    int err;

    if (!w)
        return -ENOMEM;
    w->fs = fs;
    w->leaf_len = leaf;
    pthread_mutex_lock(&fs->acct->lock);
    err = -WS_EQUOTA;
    if (!room_for(fs, WS_MEMQUOTA_ENTRY_COST + leaf))
        goto out;
    before = ws_memfs_nodes(fs->inner);
    err = fs->inner->ops->write_begin(fs->inner, path, opts, &w->inner);
    if (err >= 0) {
        /* Parents made on the way (create_parents). */
        uint64_t made = ws_memfs_nodes(fs->inner) - before;
        meta_add(fs, (int64_t)(made * WS_MEMQUOTA_ENTRY_COST + tail_names(path, made, 1)));
    }
out:
    pthread_mutex_unlock(&fs->acct->lock);
    if (err < 0) {
        free(w);
        return err;
    }
    *ret_writer = w;
    return 0;
}

static int mq_write(struct ws_vfs_writer *w, const void *buf, size_t len)
{
    struct mq_fs *fs = w->fs;
    int err = -WS_EQUOTA;

    pthread_mutex_lock(&fs->acct->lock);
    if (room_for(fs, len))
        err = fs->inner->ops->write(w->inner, buf, len);
    pthread_mutex_unlock(&fs->acct->lock);
    return err;
}

static int mq_write_commit(struct ws_vfs_writer *w, struct ws_stat *ret_st)
{
    struct mq_fs *fs = w->fs;
    uint64_t before;
    int err;

    pthread_mutex_lock(&fs->acct->lock);
    before = ws_memfs_nodes(fs->inner);
    err = fs->inner->ops->write_commit(w->inner, ret_st);
    if (ws_memfs_nodes(fs->inner) > before)
        meta_add(fs, (int64_t)(WS_MEMQUOTA_ENTRY_COST + w->leaf_len));
    pthread_mutex_unlock(&fs->acct->lock);
    free(w);
    return err;
}

static void mq_write_abort(struct ws_vfs_writer *w)
{
    if (!w)
        return;
    w->fs->inner->ops->write_abort(w->inner);
    free(w);
}

static int mq_mkdir(struct ws_vfs *vfs, const char *path, bool parents, uint32_t mode)
{
    struct mq_fs *fs = to_mq(vfs);
    uint64_t before;
    int err = -WS_EQUOTA;

    pthread_mutex_lock(&fs->acct->lock);
    if (!room_for(fs, WS_MEMQUOTA_ENTRY_COST + leaf_len(path)))
        goto out;
    before = ws_memfs_nodes(fs->inner);
    err = fs->inner->ops->mkdir(fs->inner, path, parents, mode);
    if (err >= 0) {
        uint64_t made = ws_memfs_nodes(fs->inner) - before;
        meta_add(fs, (int64_t)(made * WS_MEMQUOTA_ENTRY_COST + tail_names(path, made, 0)));
    }
out:
    pthread_mutex_unlock(&fs->acct->lock);
    return err;
}

static int mq_symlink(struct ws_vfs *vfs, const char *target, const char *path)
{
    struct mq_fs *fs = to_mq(vfs);
    uint64_t cost = WS_MEMQUOTA_ENTRY_COST + leaf_len(path) + strlen(target);
    int err = -WS_EQUOTA;

    pthread_mutex_lock(&fs->acct->lock);
    if (room_for(fs, cost)) {
        err = fs->inner->ops->symlink(fs->inner, target, path);
        if (err >= 0)
            meta_add(fs, (int64_t)cost);
    }
    pthread_mutex_unlock(&fs->acct->lock);
    return err;
}

static ssize_t mq_readlink(struct ws_vfs *vfs, const char *path, char *buf, size_t len)
{
    struct mq_fs *fs = to_mq(vfs);

    return fs->inner->ops->readlink(fs->inner, path, buf, len);
}

static int mq_set_mode(struct ws_vfs *vfs, const char *path, uint32_t mode)
{
    struct mq_fs *fs = to_mq(vfs);

    return fs->inner->ops->set_mode(fs->inner, path, mode);
}

static int mq_set_mtime(struct ws_vfs *vfs, const char *path, int64_t mtime_ns)
{
    struct mq_fs *fs = to_mq(vfs);

    return fs->inner->ops->set_mtime(fs->inner, path, mtime_ns);
}

static int mq_subscribe(struct ws_vfs *vfs, ws_vfs_change_cb cb, void *userdata,
                        struct ws_vfs_sub **ret_sub)
{
    struct mq_fs *fs = to_mq(vfs);

    return fs->inner->ops->subscribe(fs->inner, cb, userdata, ret_sub);
}

static int mq_remove(struct ws_vfs *vfs, const char *path, bool recursive, uint64_t *ret_removed)
{
    struct mq_fs *fs = to_mq(vfs);
    uint64_t below = 0;
    int err;

    pthread_mutex_lock(&fs->acct->lock);
    err = subtree_meta(fs, path, &below);
    if (err >= 0 || err == -ENOENT)
        err = fs->inner->ops->remove(fs->inner, path, recursive, ret_removed);
    if (err >= 0)
        meta_add(fs, -(int64_t)(WS_MEMQUOTA_ENTRY_COST + leaf_len(path) + below));
    pthread_mutex_unlock(&fs->acct->lock);
    return err;
}

static int mq_move(struct ws_vfs *vfs, const char *from, const char *to, bool replace)
{
    struct mq_fs *fs = to_mq(vfs);
    struct ws_stat st;
    uint64_t replaced = 0;
    bool existed;
    int err;

    pthread_mutex_lock(&fs->acct->lock);
    existed = fs->inner->ops->stat(fs->inner, to, &st) >= 0;
    err = existed && replace ? subtree_meta(fs, to, &replaced) : 0;
    if (err >= 0)
        err = fs->inner->ops->move(fs->inner, from, to, replace);
    if (err >= 0) {
        int64_t d = (int64_t)leaf_len(to) - (int64_t)leaf_len(from);
        if (existed)
            d -= (int64_t)(WS_MEMQUOTA_ENTRY_COST + leaf_len(to) + replaced);
        meta_add(fs, d);
    }
    pthread_mutex_unlock(&fs->acct->lock);
    return err;
}

static void account_put(struct ws_memquota *q, struct account *a)
{
    bool last = false;

    pthread_mutex_lock(&q->lock);
    if (--a->refs == 0) {
        for (struct account **pp = &q->accounts; *pp; pp = &(*pp)->next)
            if (*pp == a) {
                *pp = a->next;
                break;
            }
        pthread_mutex_destroy(&a->lock);
        free(a);
        last = q->dead && !q->accounts;
    }
    pthread_mutex_unlock(&q->lock);
    if (last) {
        pthread_mutex_destroy(&q->lock);
        free(q);
    }
}

static void mq_destroy(struct ws_vfs *vfs)
{
    struct mq_fs *fs = to_mq(vfs);
    struct account *a = fs->acct;

    pthread_mutex_lock(&a->lock);
    for (struct mq_fs **pp = &a->trees; *pp; pp = &(*pp)->next)
        if (*pp == fs) {
            *pp = fs->next;
            break;
        }
    a->meta -= fs->meta;
    pthread_mutex_unlock(&a->lock);
    fs->inner->ops->destroy(fs->inner);
    account_put(fs->q, a);
    free(fs);
}

/* ---- the quota ---- */

int ws_memquota_new(uint64_t max, struct ws_memquota **ret)
{
    struct ws_memquota *q = calloc(1, sizeof(*q));

    if (!q)
        return -ENOMEM;
    pthread_mutex_init(&q->lock, NULL);
    q->max = max;
    *ret = q;
    return 0;
}

void ws_memquota_free(struct ws_memquota *q)
{
    bool now;

    if (!q)
        return;
    pthread_mutex_lock(&q->lock);
    q->dead = true;
    now = !q->accounts;
    pthread_mutex_unlock(&q->lock);
    if (now) {
        pthread_mutex_destroy(&q->lock);
        free(q);
    }
}

int ws_memquota_wrap(struct ws_memquota *q, const char *tenant, struct ws_vfs *inner,
                     struct ws_vfs **ret)
{
    struct mq_fs *fs;
    struct account *a;

    if (!q || !q->max) {
        *ret = inner;
        return 0;
    }
    fs = calloc(1, sizeof(*fs));
    if (!fs)
        return -ENOMEM;
    pthread_mutex_lock(&q->lock);
    for (a = q->accounts; a && strcmp(a->name, tenant) != 0; a = a->next)
        ;
    if (!a) {
        a = calloc(1, sizeof(*a));
        if (!a) {
            pthread_mutex_unlock(&q->lock);
            free(fs);
            return -ENOMEM;
        }
        snprintf(a->name, sizeof(a->name), "%s", tenant);
        pthread_mutex_init(&a->lock, NULL);
        a->next = q->accounts;
        q->accounts = a;
    }
    a->refs++;
    pthread_mutex_unlock(&q->lock);

    fs->ops = *inner->ops;
    fs->ops.stat = mq_stat;
    fs->ops.opendir = mq_opendir;
    fs->ops.open_read = mq_open_read;
    fs->ops.write_begin = mq_write_begin;
    fs->ops.write = mq_write;
    fs->ops.write_commit = mq_write_commit;
    fs->ops.write_abort = mq_write_abort;
    fs->ops.mkdir = mq_mkdir;
    fs->ops.remove = mq_remove;
    fs->ops.move = mq_move;
    fs->ops.destroy = mq_destroy;
    /* The path-taking entries of trees and watching reach the inner tree;
     * a symlink is charged like any entry, plus its target. */
    fs->ops.readlink = inner->ops->readlink ? mq_readlink : NULL;
    fs->ops.symlink = inner->ops->symlink ? mq_symlink : NULL;
    fs->ops.set_mode = inner->ops->set_mode ? mq_set_mode : NULL;
    fs->ops.set_mtime = inner->ops->set_mtime ? mq_set_mtime : NULL;
    fs->ops.subscribe = inner->ops->subscribe ? mq_subscribe : NULL;
    fs->ops.file_fd = NULL;
    fs->ops.writer_fd = NULL;
    fs->ops.sync = NULL;
    fs->ops.open_dir_fd = NULL;
    fs->base.ops = &fs->ops;
    fs->inner = inner;
    fs->q = q;
    fs->acct = a;
    pthread_mutex_lock(&a->lock);
    /* The root: an entry without a name. */
    fs->next = a->trees;
    a->trees = fs;
    meta_add(fs, (int64_t)(ws_memfs_nodes(inner) * WS_MEMQUOTA_ENTRY_COST));
    pthread_mutex_unlock(&a->lock);
    *ret = &fs->base;
    return 0;
}

bool ws_memquota_explain(struct ws_diag *d)
{
    if (!refusal.set)
        return false;
    refusal.set = false;
    ws_diag_set(d,
                "the tenant's memory workspaces hold %llu bytes, each file and directory "
                "counted as %d bytes plus its name (limit %llu)",
                (unsigned long long)refusal.used, WS_MEMQUOTA_ENTRY_COST,
                (unsigned long long)refusal.limit);
    ws_diag_meta(d, "quota", "tenant_memory_bytes");
    ws_diag_meta(d, "limit", "%llu", (unsigned long long)refusal.limit);
    ws_diag_meta(d, "used", "%llu", (unsigned long long)refusal.used);
    return true;
}
