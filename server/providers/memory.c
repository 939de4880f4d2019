/* An in-process file tree implementing struct ws_vfs_ops.
 *
 * Ownership: the tree holds one reference on every node attached to it;
 * directory handles hold one on their directory, writers one on the
 * directory they will commit into. A node removed from the tree is
 * detached (no parent, no children) and freed with its last reference.
 * File contents are immutable, reference-counted buffers: an open file
 * holds one, a commit swaps the node's pointer to a new buffer.
 *
 * A symlink is a node whose content is its target; no lookup ever
 * follows one (a path through it is -ENOTDIR, as for a file).
 *
 * Every field of a node is read under the tree's read lock and changed
 * under its write lock; reference counts are atomic because readers take
 * them concurrently. Every change happens under the write lock, which is
 * also where the subscribers hear of it: unsubscribe takes the write lock,
 * so once it has it no report is running.
 */
#include "server/providers/memory.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "server/base/errors.h"
#include "server/base/time.h"

/* First allocation of a writer's buffer. */
#define MEMFS_WRITE_MIN 4096
/* A committed buffer with more slack than this is shrunk to its size. */
#define MEMFS_SLACK_MAX 4096
#define MEMFS_DIR_MODE  0755
#define MEMFS_FILE_MODE 0644

struct memfs;

struct mem_content {
    atomic_uint refs;
    struct memfs *fs; /* bytes accounting */
    size_t size, cap;
    unsigned char data[];
};

struct mem_node {
    atomic_uint refs;
    uint64_t id; /* ws_stat.ino */
    enum ws_ftype type;
    bool attached;
    uint32_t mode;
    int64_t mtime_ns;
    int64_t ctime_ns; /* any change, as st_ctime */
    struct mem_node *parent;
    char *name;
    size_t name_len;
    /* directory: children sorted by name (byte order) */
    struct mem_node **kids;
    size_t nkids, cap_kids, ndirs;
    /* regular file (NULL when empty), symlink (its target, never NULL) */
    struct mem_content *content;
};

struct memfs {
    struct ws_vfs base;
    pthread_rwlock_t lock;
    struct mem_node *root;
    atomic_uint_fast64_t bytes;
    uint64_t nodes;   /* under the write lock */
    uint64_t next_id; /* under the write lock */
    struct ws_vfs_sub *subs;
    _Atomic uint64_t max_bytes, max_nodes;
};

struct ws_vfs_sub {
    struct memfs *fs;
    ws_vfs_change_cb cb;
    void *userdata;
    struct ws_vfs_sub *next;
};

struct dsnap {
    uint32_t off;
    uint16_t len;
    uint8_t type;
};

struct ws_vfs_dir {
    struct memfs *fs;
    struct mem_node *node;
    struct dsnap *ents;
    char *names; /* NUL-terminated */
    size_t n, idx;
};

struct ws_vfs_file {
    struct mem_content *c;
};

struct ws_vfs_writer {
    struct memfs *fs;
    struct mem_node *parent;
    char *name;
    size_t name_len;
    struct ws_write_opts opts;
    struct mem_content *buf;
};

/* ---- helpers ---- */

static struct memfs *to_memfs(struct ws_vfs *fs)
{
    return (struct memfs *)fs;
}

static void content_unref(struct mem_content *c)
{
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    atomic_fetch_sub(&c->fs->bytes, c->size);
    free(c);
}

static void node_free(struct mem_node *n)
{
    content_unref(n->content);
    free(n->kids);
    free(n->name);
    free(n);
}

static struct mem_node *node_ref(struct mem_node *n)
{
    atomic_fetch_add(&n->refs, 1);
    return n;
}

static void node_unref(struct mem_node *n)
{
    if (n && atomic_fetch_sub(&n->refs, 1) == 1)
        node_free(n);
}

static int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);

    if (c)
        return c;
    return (alen > blen) - (alen < blen);
}

/* Index of `name` in dir's children, or of where it would go (*found
 * false). */
static size_t kid_index(const struct mem_node *dir, const char *name, size_t len, bool *found)
{
    size_t lo = 0, hi = dir->nkids;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct mem_node *k = dir->kids[mid];
        int c = name_cmp(k->name, k->name_len, name, len);

        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

static struct mem_node *kid_find(const struct mem_node *dir, const char *name, size_t len)
{
    bool found;
    size_t i;

    if (dir->type != WS_FT_DIRECTORY)
        return NULL;
    i = kid_index(dir, name, len, &found);
    return found ? dir->kids[i] : NULL;
}

static int kids_reserve(struct mem_node *dir, size_t extra)
{
    struct mem_node **n;
    size_t ncap;

    if (dir->nkids + extra <= dir->cap_kids)
        return 0;
    ncap = dir->cap_kids ? dir->cap_kids * 2 : 8;
    while (ncap < dir->nkids + extra)
        ncap *= 2;
    n = reallocarray(dir->kids, ncap, sizeof(*n));
    if (!n)
        return -ENOMEM;
    dir->kids = n;
    dir->cap_kids = ncap;
    return 0;
}

/* Links `n` into `dir` (room reserved, name absent). */
static void kid_insert(struct mem_node *dir, struct mem_node *n)
{
    bool found;
    size_t i = kid_index(dir, n->name, n->name_len, &found);

    memmove(dir->kids + i + 1, dir->kids + i, (dir->nkids - i) * sizeof(*dir->kids));
    dir->kids[i] = n;
    dir->nkids++;
    if (n->type == WS_FT_DIRECTORY)
        dir->ndirs++;
    n->parent = dir;
    n->ctime_ns = dir->mtime_ns = dir->ctime_ns = ws_wall_ns();
}

static void kid_unlink(struct mem_node *n)
{
    struct mem_node *dir = n->parent;
    bool found;
    size_t i = kid_index(dir, n->name, n->name_len, &found);

    memmove(dir->kids + i, dir->kids + i + 1, (dir->nkids - i - 1) * sizeof(*dir->kids));
    dir->nkids--;
    if (n->type == WS_FT_DIRECTORY)
        dir->ndirs--;
    n->parent = NULL;
    dir->mtime_ns = dir->ctime_ns = ws_wall_ns();
}

/* A new node, not yet linked; counts against the node limit. */
static int node_new(struct memfs *fs, enum ws_ftype type, const char *name, size_t len,
                    uint32_t mode, struct mem_node **ret)
{
    struct mem_node *n;

    if (fs->nodes >= atomic_load(&fs->max_nodes))
        return -WS_EQUOTA;
    n = calloc(1, sizeof(*n));
    if (!n)
        return -ENOMEM;
    n->name = strndup(name, len);
    if (!n->name) {
        free(n);
        return -ENOMEM;
    }
    atomic_init(&n->refs, 1);
    n->type = type;
    n->attached = true;
    n->name_len = len;
    n->mode = mode & 07777;
    n->mtime_ns = n->ctime_ns = ws_wall_ns();
    n->id = ++fs->next_id;
    fs->nodes++;
    *ret = n;
    return 0;
}

/* ---- change reports (write lock held) ---- */

/* A growable path ("a/b/c"), for the reports only. */
struct pathbuf {
    char *s;
    size_t len, cap;
};

static bool pathbuf_add(struct pathbuf *pb, const char *name, size_t len)
{
    size_t need = pb->len + (pb->len ? 1 : 0) + len + 1;

    if (need > pb->cap) {
        size_t ncap = pb->cap ? pb->cap : 256;
        char *n;

        while (ncap < need)
            ncap *= 2;
        n = realloc(pb->s, ncap);
        if (!n)
            return false;
        pb->s = n;
        pb->cap = ncap;
    }
    if (pb->len)
        pb->s[pb->len++] = '/';
    memcpy(pb->s + pb->len, name, len);
    pb->len += len;
    pb->s[pb->len] = '\0';
    return true;
}

static void pathbuf_drop(struct pathbuf *pb, size_t name_len)
{
    pb->len = pb->len > name_len ? pb->len - name_len - 1 : 0;
    pb->s[pb->len] = '\0';
}

/* The workspace-relative path of an attached node (not the root) into pb;
 * false when memory is short. */
static bool node_path(const struct mem_node *n, struct pathbuf *pb)
{
    size_t total = 0, end;

    for (const struct mem_node *p = n; p->parent; p = p->parent)
        total += p->name_len + 1;
    if (total > pb->cap) {
        char *s = realloc(pb->s, total);

        if (!s)
            return false;
        pb->s = s;
        pb->cap = total;
    }
    end = total - 1;
    pb->len = end;
    pb->s[end] = '\0';
    for (const struct mem_node *p = n; p->parent; p = p->parent) {
        end -= p->name_len;
        memcpy(pb->s + end, p->name, p->name_len);
        if (end)
            pb->s[--end] = '/';
    }
    return true;
}

static void notify_path(struct memfs *fs, enum ws_vfs_change what, enum ws_ftype type,
                        const char *path, const char *from)
{
    for (struct ws_vfs_sub *s = fs->subs; s; s = s->next)
        s->cb(s->userdata, what, type, path, from);
}

/* Reports a change of the attached node n. */
static void notify(struct memfs *fs, enum ws_vfs_change what, const struct mem_node *n)
{
    struct pathbuf pb = {0};

    if (!fs->subs)
        return;
    if (node_path(n, &pb))
        notify_path(fs, what, n->type, pb.s, NULL);
    free(pb.s);
}

/* Removes `top` and everything below it from the tree, post-order through
 * the parent pointers (no recursion), reporting each entry removed when
 * `report`. Returns the number of entries removed. */
static uint64_t subtree_detach(struct memfs *fs, struct mem_node *top, bool report)
{
    struct mem_node *n = top;
    struct pathbuf pb = {0};
    uint64_t count = 0;

    report = report && fs->subs && top->parent && node_path(top, &pb);
    if (top->parent)
        kid_unlink(top);
    for (;;) {
        struct mem_node *p;

        while (n->nkids > 0) {
            n = n->kids[n->nkids - 1];
            if (report && !pathbuf_add(&pb, n->name, n->name_len))
                report = false;
        }
        p = n == top ? NULL : n->parent;
        if (report) {
            notify_path(fs, WS_VFS_REMOVED, n->type, pb.s, NULL);
            if (p)
                pathbuf_drop(&pb, n->name_len);
        }
        if (p) {
            p->nkids--;
            if (n->type == WS_FT_DIRECTORY)
                p->ndirs--;
        }
        n->parent = NULL;
        n->attached = false;
        fs->nodes--;
        count++;
        node_unref(n);
        if (!p) {
            free(pb.s);
            return count;
        }
        n = p;
    }
}

static void fill_stat(const struct mem_node *n, struct ws_stat *st)
{
    *st = (struct ws_stat){
        .type = n->type,
        .size = n->content ? n->content->size : 0,
        .mode = n->mode,
        .mtime_ns = n->mtime_ns,
        .nlink = n->type == WS_FT_DIRECTORY ? 2 + n->ndirs : 1,
        .ino = n->id,
        .ctime_ns = n->ctime_ns,
    };
}

/* ---- path resolution (caller holds the lock) ---- */

/* A path split into components (offsets into it), ".." folded
 * lexically. */
struct mpath {
    const char *path;
    size_t n;
    uint16_t off[WS_VFS_PATH_MAX / 2 + 1];
    uint16_t len[WS_VFS_PATH_MAX / 2 + 1];
};

#define COMP(mp, i) ((mp)->path + (mp)->off[i])

static int split(const char *path, struct mpath *mp)
{
    const char *p = path;

    if (strnlen(path, WS_VFS_PATH_MAX + 1) > WS_VFS_PATH_MAX)
        return -ENAMETOOLONG;
    mp->path = path;
    mp->n = 0;
    while (*p) {
        const char *end = strchrnul(p, '/');
        size_t n = (size_t)(end - p);

        if (n == 0 || (n == 1 && p[0] == '.')) {
            /* nothing */
        } else if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (mp->n == 0)
                return -EXDEV;
            mp->n--;
        } else {
            if (n > WS_VFS_NAME_MAX)
                return -ENAMETOOLONG;
            mp->off[mp->n] = (uint16_t)(p - path);
            mp->len[mp->n++] = (uint16_t)n;
        }
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* The directory holding the last component. With `create`, missing
 * directories are made (mode 0755). */
static int walk_parent(struct memfs *fs, const struct mpath *mp, bool create, struct mem_node **ret)
{
    struct mem_node *d = fs->root;
    int r;

    for (size_t i = 0; i + 1 < mp->n; i++) {
        struct mem_node *k = kid_find(d, COMP(mp, i), mp->len[i]);

        if (!k) {
            if (!create)
                return -ENOENT;
            r = kids_reserve(d, 1);
            if (r < 0)
                return r;
            r = node_new(fs, WS_FT_DIRECTORY, COMP(mp, i), mp->len[i], MEMFS_DIR_MODE, &k);
            if (r < 0)
                return r;
            kid_insert(d, k);
            notify(fs, WS_VFS_CREATED, k);
        } else if (k->type != WS_FT_DIRECTORY) {
            return -ENOTDIR;
        }
        d = k;
    }
    *ret = d;
    return 0;
}

static int lookup(struct memfs *fs, const char *path, struct mem_node **ret)
{
    struct mpath mp;
    struct mem_node *d, *n;
    int r;

    r = split(path, &mp);
    if (r < 0)
        return r;
    if (mp.n == 0) {
        *ret = fs->root;
        return 0;
    }
    r = walk_parent(fs, &mp, false, &d);
    if (r < 0)
        return r;
    n = kid_find(d, COMP(&mp, mp.n - 1), mp.len[mp.n - 1]);
    if (!n)
        return -ENOENT;
    *ret = n;
    return 0;
}

/* ---- directories ---- */

/* Snapshots the names of `node` into a new handle (lock held). */
static int dir_open(struct memfs *fs, struct mem_node *node, struct ws_vfs_dir **ret)
{
    struct ws_vfs_dir *d;
    size_t total = 0, off = 0;

    if (node->type != WS_FT_DIRECTORY)
        return -ENOTDIR;
    d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    for (size_t i = 0; i < node->nkids; i++)
        total += node->kids[i]->name_len + 1;
    d->ents = calloc(node->nkids ? node->nkids : 1, sizeof(*d->ents));
    d->names = malloc(total ? total : 1);
    if (!d->ents || !d->names) {
        free(d->ents);
        free(d->names);
        free(d);
        return -ENOMEM;
    }
    for (size_t i = 0; i < node->nkids; i++) {
        const struct mem_node *k = node->kids[i];

        memcpy(d->names + off, k->name, k->name_len);
        d->names[off + k->name_len] = '\0';
        d->ents[i] = (struct dsnap){
            .off = (uint32_t)off,
            .len = (uint16_t)k->name_len,
            .type = (uint8_t)k->type,
        };
        off += k->name_len + 1;
    }
    d->n = node->nkids;
    d->fs = fs;
    d->node = node_ref(node);
    *ret = d;
    return 0;
}

static int m_opendir(struct ws_vfs *vfs, const char *path, struct ws_vfs_dir **ret_dir)
{
    struct memfs *fs = to_memfs(vfs);
    struct mem_node *n;
    int r;

    pthread_rwlock_rdlock(&fs->lock);
    r = lookup(fs, path, &n);
    if (r == 0)
        r = n->type == WS_FT_SYMLINK ? -WS_ESYMLINK_LEAF : dir_open(fs, n, ret_dir);
    pthread_rwlock_unlock(&fs->lock);
    return r;
}

static int m_opendir_at(struct ws_vfs_dir *dir, const char *name, struct ws_vfs_dir **ret_dir)
{
    struct memfs *fs = dir->fs;
    struct mem_node *n;
    int r;

    pthread_rwlock_rdlock(&fs->lock);
    n = kid_find(dir->node, name, strlen(name));
    r = n ? dir_open(fs, n, ret_dir) : -ENOENT;
    pthread_rwlock_unlock(&fs->lock);
    return r;
}

static int m_readdir(struct ws_vfs_dir *dir, struct ws_dirent *ret_ent)
{
    const struct dsnap *e;

    if (dir->idx >= dir->n)
        return 0;
    e = &dir->ents[dir->idx++];
    *ret_ent = (struct ws_dirent){
        .name = dir->names + e->off,
        .name_len = e->len,
        .type = (enum ws_ftype)e->type,
    };
    return 1;
}

static int m_stat_at(struct ws_vfs_dir *dir, const char *name, struct ws_stat *ret_st)
{
    struct memfs *fs = dir->fs;
    struct mem_node *n;
    int r = 0;

    pthread_rwlock_rdlock(&fs->lock);
    n = kid_find(dir->node, name, strlen(name));
    if (n)
        fill_stat(n, ret_st);
    else
        r = -ENOENT;
    pthread_rwlock_unlock(&fs->lock);
    return r;
}

static void m_closedir(struct ws_vfs_dir *dir)
{
    if (!dir)
        return;
    node_unref(dir->node);
    free(dir->ents);
    free(dir->names);
    free(dir);
}

/* ---- reading ---- */

static int m_stat(struct ws_vfs *vfs, const char *path, struct ws_stat *ret_st)
{
    struct memfs *fs = to_memfs(vfs);
    struct mem_node *n;
    int r;

    pthread_rwlock_rdlock(&fs->lock);
    r = lookup(fs, path, &n);
    if (r == 0)
        fill_stat(n, ret_st);
    pthread_rwlock_unlock(&fs->lock);
    return r;
}

/* Lock held. */
static int file_open(struct mem_node *n, struct ws_vfs_file **ret_file, struct ws_stat *ret_st)
{
    struct ws_vfs_file *f;

    if (n->type == WS_FT_DIRECTORY)
        return -EISDIR;
    if (n->type == WS_FT_SYMLINK)
        return -WS_ESYMLINK_LEAF;
    f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    if (n->content) {
        f->c = n->content;
        atomic_fetch_add(&f->c->refs, 1);
    }
    fill_stat(n, ret_st);
    *ret_file = f;
    return 0;
}

static int m_open_read(struct ws_vfs *vfs, const char *path, struct ws_vfs_file **ret_file,
                       struct ws_stat *ret_st)
{
    struct memfs *fs = to_memfs(vfs);
    struct mem_node *n;
    int r;

    pthread_rwlock_rdlock(&fs->lock);
    r = lookup(fs, path, &n);
    if (r == 0)
        r = file_open(n, ret_file, ret_st);
    pthread_rwlock_unlock(&fs->lock);
    return r;
}

static int m_open_read_at(struct ws_vfs_dir *dir, const char *name, struct ws_vfs_file **ret_file,
                          struct ws_stat *ret_st)
{
    struct memfs *fs = dir->fs;
    struct mem_node *n;
    int r;

    pthread_rwlock_rdlock(&fs->lock);
    n = kid_find(dir->node, name, strlen(name));
    r = n ? file_open(n, ret_file, ret_st) : -ENOENT;
    pthread_rwlock_unlock(&fs->lock);
    return r;
}

static ssize_t m_pread(struct ws_vfs_file *file, void *buf, size_t len, uint64_t offset)
{
    const struct mem_content *c = file->c;
    size_t n;

    if (!c || offset >= c->size)
        return 0;
    n = c->size - (size_t)offset;
    if (n > len)
        n = len;
    if (n > SSIZE_MAX)
        n = SSIZE_MAX;
    memcpy(buf, c->data + offset, n);
    return (ssize_t)n;
}

static void m_close(struct ws_vfs_file *file)
{
    if (!file)
        return;
    content_unref(file->c);
    free(file);
}

/* ---- writing ---- */

static int m_write_begin(struct ws_vfs *vfs, const char *path, const struct ws_write_opts *opts,
                         struct ws_vfs_writer **ret_writer)
{
    struct memfs *fs = to_memfs(vfs);
    struct ws_vfs_writer *w = NULL;
    struct mem_node *parent, *leaf;
    struct mpath mp;
    int r;

    r = split(path, &mp);
    if (r < 0)
        return r;
    if (mp.n == 0)
        return -EISDIR;
    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->name_len = mp.len[mp.n - 1];
    w->name = strndup(COMP(&mp, mp.n - 1), w->name_len);
    if (!w->name) {
        free(w);
        return -ENOMEM;
    }
    pthread_rwlock_wrlock(&fs->lock);
    r = walk_parent(fs, &mp, opts->create_parents, &parent);
    if (r < 0)
        goto out;
    leaf = kid_find(parent, w->name, w->name_len);
    if (leaf && leaf->type == WS_FT_DIRECTORY) {
        r = -EISDIR;
        goto out;
    }
    if (leaf && leaf->type == WS_FT_SYMLINK) {
        r = -WS_ESYMLINK_LEAF;
        goto out;
    }
    if (leaf && opts->if_absent) {
        r = -EEXIST;
        goto out;
    }
    w->fs = fs;
    w->parent = node_ref(parent);
    w->opts = *opts;
    *ret_writer = w;
    w = NULL;
    r = 0;
out:
    pthread_rwlock_unlock(&fs->lock);
    if (w) {
        free(w->name);
        free(w);
    }
    return r;
}

static int m_write(struct ws_vfs_writer *w, const void *buf, size_t len)
{
    struct memfs *fs = w->fs;
    size_t size = w->buf ? w->buf->size : 0;
    uint64_t max = w->opts.max_size;

    if (len == 0)
        return 0;
    if (len > SIZE_MAX / 4 - size || (max && size + len > max))
        return -EFBIG;
    if (atomic_fetch_add(&fs->bytes, len) + len > atomic_load(&fs->max_bytes)) {
        atomic_fetch_sub(&fs->bytes, len);
        return -WS_EQUOTA;
    }
    if (!w->buf || w->buf->cap - size < len) {
        size_t ncap = w->buf ? w->buf->cap * 2 : MEMFS_WRITE_MIN;
        struct mem_content *c;

        while (ncap < size + len)
            ncap *= 2;
        if (max && ncap > max)
            ncap = (size_t)max;
        c = realloc(w->buf, sizeof(*c) + ncap);
        if (!c) {
            atomic_fetch_sub(&fs->bytes, len);
            return -ENOMEM;
        }
        if (!w->buf) {
            atomic_init(&c->refs, 1);
            c->fs = fs;
            c->size = 0;
        }
        c->cap = ncap;
        w->buf = c;
    }
    memcpy(w->buf->data + size, buf, len);
    w->buf->size += len;
    return 0;
}

static void writer_free(struct ws_vfs_writer *w)
{
    node_unref(w->parent);
    free(w->name);
    free(w);
}

static int m_write_commit(struct ws_vfs_writer *w, struct ws_stat *ret_st)
{
    struct memfs *fs = w->fs;
    struct mem_content *c = w->buf, *old = NULL;
    struct mem_node *parent = w->parent, *leaf;
    enum ws_vfs_change what = WS_VFS_MODIFIED;
    int r;

    if (c && c->size == 0) {
        content_unref(c);
        c = NULL;
    } else if (c && c->cap - c->size > MEMFS_SLACK_MAX) {
        struct mem_content *s = realloc(c, sizeof(*c) + c->size);

        if (s) {
            c = s;
            c->cap = c->size;
        }
    }
    w->buf = NULL;
    pthread_rwlock_wrlock(&fs->lock);
    if (!parent->attached) {
        r = -ENOENT;
        goto out;
    }
    leaf = kid_find(parent, w->name, w->name_len);
    if (leaf && leaf->type == WS_FT_DIRECTORY) {
        r = -EISDIR;
        goto out;
    }
    if (leaf && leaf->type == WS_FT_SYMLINK) {
        r = -WS_ESYMLINK_LEAF;
        goto out;
    }
    if (leaf && w->opts.if_absent) {
        r = -EEXIST;
        goto out;
    }
    if (!leaf) {
        r = kids_reserve(parent, 1);
        if (r < 0)
            goto out;
        r = node_new(fs, WS_FT_REGULAR, w->name, w->name_len,
                     w->opts.mode ? w->opts.mode : MEMFS_FILE_MODE, &leaf);
        if (r < 0)
            goto out;
        kid_insert(parent, leaf);
        what = WS_VFS_CREATED;
    } else {
        if (w->opts.mode)
            leaf->mode = w->opts.mode & 07777;
        leaf->mtime_ns = leaf->ctime_ns = ws_wall_ns();
        old = leaf->content;
    }
    leaf->content = c;
    c = NULL;
    notify(fs, what, leaf);
    if (ret_st)
        fill_stat(leaf, ret_st);
    r = 0;
out:
    pthread_rwlock_unlock(&fs->lock);
    content_unref(old);
    content_unref(c);
    writer_free(w);
    return r;
}

static void m_write_abort(struct ws_vfs_writer *w)
{
    if (!w)
        return;
    content_unref(w->buf);
    writer_free(w);
}

/* ---- namespace changes ---- */

static int m_mkdir(struct ws_vfs *vfs, const char *path, bool parents, uint32_t mode)
{
    struct memfs *fs = to_memfs(vfs);
    struct mem_node *parent, *leaf;
    struct mpath mp;
    int r;

    r = split(path, &mp);
    if (r < 0)
        return r;
    if (mp.n == 0)
        return parents ? 0 : -EEXIST;
    pthread_rwlock_wrlock(&fs->lock);
    r = walk_parent(fs, &mp, parents, &parent);
    if (r < 0)
        goto out;
    leaf = kid_find(parent, COMP(&mp, mp.n - 1), mp.len[mp.n - 1]);
    if (leaf) {
        r = parents && leaf->type == WS_FT_DIRECTORY ? 0 : -EEXIST;
        goto out;
    }
    r = kids_reserve(parent, 1);
    if (r < 0)
        goto out;
    r = node_new(fs, WS_FT_DIRECTORY, COMP(&mp, mp.n - 1), mp.len[mp.n - 1],
                 mode ? mode : MEMFS_DIR_MODE, &leaf);
    if (r < 0)
        goto out;
    kid_insert(parent, leaf);
    notify(fs, WS_VFS_CREATED, leaf);
out:
    pthread_rwlock_unlock(&fs->lock);
    return r;
}

static int m_remove(struct ws_vfs *vfs, const char *path, bool recursive, uint64_t *ret_removed)
{
    struct memfs *fs = to_memfs(vfs);
    struct mem_node *n;
    uint64_t removed;
    int r;

    pthread_rwlock_wrlock(&fs->lock);
    r = lookup(fs, path, &n);
    if (r < 0)
        goto out;
    if (n == fs->root) {
        r = -EXDEV;
        goto out;
    }
    if (n->nkids > 0 && !recursive) {
        r = -ENOTEMPTY;
        goto out;
    }
    removed = subtree_detach(fs, n, true);
    if (ret_removed)
        *ret_removed = removed;
out:
    pthread_rwlock_unlock(&fs->lock);
    return r;
}

static int m_move(struct ws_vfs *vfs, const char *from, const char *to, bool replace)
{
    struct memfs *fs = to_memfs(vfs);
    struct mem_node *src, *dparent, *dst;
    struct pathbuf from_pb = {0};
    struct mpath mp;
    char *name = NULL;
    size_t name_len;
    int r;

    r = split(to, &mp);
    if (r < 0)
        return r;
    if (mp.n == 0)
        return -EXDEV;
    name_len = mp.len[mp.n - 1];
    name = strndup(COMP(&mp, mp.n - 1), name_len);
    if (!name)
        return -ENOMEM;
    pthread_rwlock_wrlock(&fs->lock);
    r = lookup(fs, from, &src);
    if (r < 0)
        goto out;
    if (src == fs->root) {
        r = -EXDEV;
        goto out;
    }
    r = walk_parent(fs, &mp, false, &dparent);
    if (r < 0)
        goto out;
    /* A directory cannot move below itself. */
    for (struct mem_node *p = dparent; p; p = p->parent) {
        if (p == src) {
            r = -EINVAL;
            goto out;
        }
    }
    dst = kid_find(dparent, name, name_len);
    if (dst == src) {
        r = 0;
        goto out;
    }
    if (dst) {
        if (!replace) {
            r = -EEXIST;
            goto out;
        }
        if (dst->type == WS_FT_DIRECTORY && src->type != WS_FT_DIRECTORY) {
            r = -EISDIR;
            goto out;
        }
        if (dst->type != WS_FT_DIRECTORY && src->type == WS_FT_DIRECTORY) {
            r = -ENOTDIR;
            goto out;
        }
        if (dst->nkids > 0) {
            r = -ENOTEMPTY;
            goto out;
        }
    }
    r = kids_reserve(dparent, 1);
    if (r < 0)
        goto out;
    /* Nothing below can fail (but the report, when memory is short). */
    bool report = fs->subs && node_path(src, &from_pb);
    /* Like rename(2) under inotify: the replaced entry is not reported
     * apart from the move. */
    if (dst)
        subtree_detach(fs, dst, false);
    kid_unlink(src);
    free(src->name);
    src->name = name;
    src->name_len = name_len;
    name = NULL;
    kid_insert(dparent, src);
    if (report) {
        struct pathbuf to_pb = {0};

        if (node_path(src, &to_pb))
            notify_path(fs, WS_VFS_MOVED, src->type, to_pb.s, from_pb.s);
        free(to_pb.s);
    }
    r = 0;
out:
    pthread_rwlock_unlock(&fs->lock);
    free(from_pb.s);
    free(name);
    return r;
}

/* ---- trees ---- */

static ssize_t m_readlink(struct ws_vfs *vfs, const char *path, char *buf, size_t len)
{
    struct memfs *fs = to_memfs(vfs);
    struct mem_node *n;
    ssize_t r;

    pthread_rwlock_rdlock(&fs->lock);
    r = lookup(fs, path, &n);
    if (r < 0)
        goto out;
    if (n->type != WS_FT_SYMLINK) {
        r = -EINVAL;
        goto out;
    }
    if (n->content->size > len) {
        r = -ENAMETOOLONG;
        goto out;
    }
    memcpy(buf, n->content->data, n->content->size);
    r = (ssize_t)n->content->size;
out:
    pthread_rwlock_unlock(&fs->lock);
    return r;
}

static int m_symlink(struct ws_vfs *vfs, const char *target, const char *path)
{
    struct memfs *fs = to_memfs(vfs);
    size_t tlen = strnlen(target, WS_VFS_PATH_MAX + 1);
    struct mem_node *parent, *leaf;
    struct mem_content *c;
    struct mpath mp;
    int r;

    if (tlen == 0)
        return -ENOENT;
    if (tlen > WS_VFS_PATH_MAX)
        return -ENAMETOOLONG;
    r = split(path, &mp);
    if (r < 0)
        return r;
    if (mp.n == 0)
        return -EEXIST;
    if (atomic_fetch_add(&fs->bytes, tlen) + tlen > atomic_load(&fs->max_bytes)) {
        atomic_fetch_sub(&fs->bytes, tlen);
        return -WS_EQUOTA;
    }
    c = malloc(sizeof(*c) + tlen);
    if (!c) {
        atomic_fetch_sub(&fs->bytes, tlen);
        return -ENOMEM;
    }
    atomic_init(&c->refs, 1);
    c->fs = fs;
    c->size = c->cap = tlen;
    memcpy(c->data, target, tlen);
    pthread_rwlock_wrlock(&fs->lock);
    r = walk_parent(fs, &mp, false, &parent);
    if (r < 0)
        goto out;
    if (kid_find(parent, COMP(&mp, mp.n - 1), mp.len[mp.n - 1])) {
        r = -EEXIST;
        goto out;
    }
    r = kids_reserve(parent, 1);
    if (r < 0)
        goto out;
    r = node_new(fs, WS_FT_SYMLINK, COMP(&mp, mp.n - 1), mp.len[mp.n - 1], 0777, &leaf);
    if (r < 0)
        goto out;
    leaf->content = c;
    c = NULL;
    kid_insert(parent, leaf);
    notify(fs, WS_VFS_CREATED, leaf);
out:
    pthread_rwlock_unlock(&fs->lock);
    content_unref(c);
    return r;
}

static int m_set_mode(struct ws_vfs *vfs, const char *path, uint32_t mode)
{
    struct memfs *fs = to_memfs(vfs);
    struct mem_node *n;
    int r;

    pthread_rwlock_wrlock(&fs->lock);
    r = lookup(fs, path, &n);
    if (r == 0 && n->type == WS_FT_SYMLINK)
        r = -WS_ESYMLINK_LEAF;
    if (r == 0) {
        n->mode = mode & 07777;
        n->ctime_ns = ws_wall_ns();
        if (n != fs->root)
            notify(fs, WS_VFS_MODIFIED, n);
    }
    pthread_rwlock_unlock(&fs->lock);
    return r;
}

static int m_set_mtime(struct ws_vfs *vfs, const char *path, int64_t mtime_ns)
{
    struct memfs *fs = to_memfs(vfs);
    struct mem_node *n;
    int r;

    pthread_rwlock_wrlock(&fs->lock);
    r = lookup(fs, path, &n);
    if (r == 0) {
        n->mtime_ns = mtime_ns;
        n->ctime_ns = ws_wall_ns();
        if (n != fs->root)
            notify(fs, WS_VFS_MODIFIED, n);
    }
    pthread_rwlock_unlock(&fs->lock);
    return r;
}

/* ---- change reports ---- */

static int m_subscribe(struct ws_vfs *vfs, ws_vfs_change_cb cb, void *userdata,
                       struct ws_vfs_sub **ret_sub)
{
    struct memfs *fs = to_memfs(vfs);
    struct ws_vfs_sub *s = calloc(1, sizeof(*s));

    if (!s)
        return -ENOMEM;
    s->fs = fs;
    s->cb = cb;
    s->userdata = userdata;
    pthread_rwlock_wrlock(&fs->lock);
    s->next = fs->subs;
    fs->subs = s;
    pthread_rwlock_unlock(&fs->lock);
    *ret_sub = s;
    return 0;
}

static void m_unsubscribe(struct ws_vfs_sub *sub)
{
    struct memfs *fs;

    if (!sub)
        return;
    fs = sub->fs;
    /* Reports run under the write lock: none runs while we hold it. */
    pthread_rwlock_wrlock(&fs->lock);
    for (struct ws_vfs_sub **p = &fs->subs; *p; p = &(*p)->next) {
        if (*p == sub) {
            *p = sub->next;
            break;
        }
    }
    pthread_rwlock_unlock(&fs->lock);
    free(sub);
}

/* ---- the instance ---- */

static void m_destroy(struct ws_vfs *vfs)
{
    struct memfs *fs = to_memfs(vfs);

    if (!fs)
        return;
    if (fs->root)
        subtree_detach(fs, fs->root, false);
    while (fs->subs) {
        struct ws_vfs_sub *s = fs->subs;

        fs->subs = s->next;
        free(s);
    }
    pthread_rwlock_destroy(&fs->lock);
    free(fs);
}

static const struct ws_vfs_ops memfs_ops = {
    .stat = m_stat,
    .opendir = m_opendir,
    .opendir_at = m_opendir_at,
    .readdir = m_readdir,
    .stat_at = m_stat_at,
    .closedir = m_closedir,
    .open_read = m_open_read,
    .open_read_at = m_open_read_at,
    .pread = m_pread,
    .close = m_close,
    .write_begin = m_write_begin,
    .write = m_write,
    .write_commit = m_write_commit,
    .write_abort = m_write_abort,
    .mkdir = m_mkdir,
    .remove = m_remove,
    .move = m_move,
    .destroy = m_destroy,
    .readlink = m_readlink,
    .symlink = m_symlink,
    .set_mode = m_set_mode,
    .set_mtime = m_set_mtime,
    .file_fd = NULL,
    .writer_fd = NULL,
    .open_dir_fd = NULL,
    .subscribe = m_subscribe,
    .unsubscribe = m_unsubscribe,
};

int ws_memfs_new(struct ws_vfs **ret)
{
    struct memfs *fs;
    int r;

    fs = calloc(1, sizeof(*fs));
    if (!fs)
        return -ENOMEM;
    fs->base.ops = &memfs_ops;
    atomic_init(&fs->bytes, 0);
    atomic_init(&fs->max_bytes, WS_MEMFS_DEFAULT_MAX_BYTES);
    atomic_init(&fs->max_nodes, WS_MEMFS_DEFAULT_MAX_NODES);
    if (pthread_rwlock_init(&fs->lock, NULL) != 0) {
        free(fs);
        return -ENOMEM;
    }
    r = node_new(fs, WS_FT_DIRECTORY, "", 0, MEMFS_DIR_MODE, &fs->root);
    if (r < 0) {
        pthread_rwlock_destroy(&fs->lock);
        free(fs);
        return r;
    }
    *ret = &fs->base;
    return 0;
}

void ws_memfs_set_limits(struct ws_vfs *vfs, uint64_t max_bytes, uint64_t max_nodes)
{
    struct memfs *fs = to_memfs(vfs);

    atomic_store(&fs->max_bytes, max_bytes ? max_bytes : WS_MEMFS_DEFAULT_MAX_BYTES);
    atomic_store(&fs->max_nodes, max_nodes ? max_nodes : WS_MEMFS_DEFAULT_MAX_NODES);
}

uint64_t ws_memfs_bytes(struct ws_vfs *vfs)
{
    return atomic_load(&to_memfs(vfs)->bytes);
}

uint64_t ws_memfs_nodes(struct ws_vfs *vfs)
{
    struct memfs *fs = to_memfs(vfs);
    uint64_t n;

    pthread_rwlock_rdlock(&fs->lock);
    n = fs->nodes;
    pthread_rwlock_unlock(&fs->lock);
    return n;
}
