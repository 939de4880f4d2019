/* ReadArchive's producer: the confined walk of ops.h turned into tar bytes
 * by libarchive, a stretch at a time. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <archive.h>
#include <archive_entry.h>

#include "server/base/macros.h"
#include "server/vfs/archive.h"
#include "server/vfs/internal.h"

/* Bytes read from a file per pread. */
#define READ_CHUNK (256 * 1024)

/* ino -> the first path stored for a file with several links. */
struct link_slot {
    uint64_t ino;
    char *path;
};

struct ws_tar_out {
    struct ws_fsops *ops;
    struct ws_vfs *fs;
    struct archive *ar;
    struct archive_entry *entry;
    struct ws_walk *walk;
    char base[WS_VFS_PATH_MAX + 1]; /* normalized, "" = root */
    size_t base_len;
    bool single; /* path is not a directory: one entry */
    bool single_done;
    bool closed;   /* archive_write_close ran */
    bool in_place; /* plain tar: file data is read into `out` */
    bool done;
    /* The file being stored. */
    struct ws_vfs_file *file;
    uint64_t file_size, file_off;
    char *file_path;
    bool file_changed;
    /* Output of the last call. */
    unsigned char *out;
    size_t out_len, out_cap;
    int out_err;
    unsigned char *chunk;
    struct link_slot *links;
    size_t links_cap, links_n;
    struct ws_globpat **inc, **exc;
    size_t n_inc, n_exc;
    struct ws_tar_stats stats;
};

/* Room for `len` more bytes of output. */
static int out_reserve(struct ws_tar_out *t, size_t len)
{
    if (t->out_len + len <= t->out_cap)
        return 0;
    size_t cap = t->out_cap ? t->out_cap : 64 * 1024;
    while (cap < t->out_len + len)
        cap *= 2;
    unsigned char *p = realloc(t->out, cap);
    if (!p)
        return -ENOMEM;
    t->out = p;
    t->out_cap = cap;
    return 0;
}

static ssize_t write_cb(struct archive *a, void *userdata, const void *buf, size_t len)
{
    struct ws_tar_out *t = userdata;
    (void)a;
    /* File data read straight into place (file_step): nothing to copy. */
    if (t->out && buf == t->out + t->out_len && t->out_len + len <= t->out_cap) {
        t->out_len += len;
        return (ssize_t)len;
    }
    if (out_reserve(t, len) < 0) {
        t->out_err = -ENOMEM;
        return -1;
    }
    memcpy(t->out + t->out_len, buf, len);
    t->out_len += len;
    return (ssize_t)len;
}

static int skip(struct ws_tar_stats *s, const char *path, const char *reason)
{
    if (s->n_skips >= WS_TAR_SKIPS_MAX) {
        s->skipped_more++;
        return 0;
    }
    if (!s->skips) {
        s->skips = calloc(WS_TAR_SKIPS_MAX, sizeof(*s->skips));
        if (!s->skips)
            return -ENOMEM;
    }
    char *p = strdup(path);
    if (!p)
        return -ENOMEM;
    s->skips[s->n_skips++] = (struct ws_tar_skip){.path = p, .reason = reason};
    return 0;
}

static void stats_free(struct ws_tar_stats *s)
{
    for (size_t i = 0; i < s->n_skips; i++)
        free(s->skips[i].path);
    free(s->skips);
}

static int compile_globs(const char *const *in, size_t n, struct ws_globpat ***ret,
                         struct ws_diag *d)
{
    if (!n)
        return 0;
    struct ws_globpat **pats = calloc(n, sizeof(*pats));
    if (!pats)
        return -ENOMEM;
    *ret = pats;
    for (size_t i = 0; i < n; i++) {
        int r = ws_globpat_compile(in[i], &pats[i]);
        if (r < 0) {
            ws_diag_set(d, "bad glob");
            ws_diag_meta(d, "pattern", "%s", in[i]);
            return r;
        }
    }
    return 0;
}

static bool matches(struct ws_globpat *const *pats, size_t n, const char *rel)
{
    char buf[WS_WALK_PATH_MAX + 1];
    for (size_t i = 0; i < n; i++) {
        size_t words = ws_globpat_words(pats[i]);
        uint64_t state[words ? words : 1], next[words ? words : 1];
        ws_globpat_start(pats[i], state);
        size_t len = strlen(rel);
        if (len > WS_WALK_PATH_MAX)
            continue;
        memcpy(buf, rel, len + 1);
        char *save = NULL;
        bool alive = true;
        for (char *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
            ws_globpat_step(pats[i], state, c, next);
            memcpy(state, next, words * sizeof(uint64_t));
            if (!ws_globpat_alive(pats[i], state) && !ws_globpat_accepts(pats[i], state)) {
                alive = false;
                break;
            }
        }
        if (alive && ws_globpat_accepts(pats[i], state))
            return true;
    }
    return false;
}

/* The entry's name in the archive: its path below the request's. */
static const char *rel_of(const struct ws_tar_out *t, const char *path)
{
    if (t->base_len == 0)
        return path;
    return path[t->base_len] == '/' ? path + t->base_len + 1 : path + t->base_len;
}

static const char *link_find(const struct ws_tar_out *t, uint64_t ino)
{
    if (!t->links_cap)
        return NULL;
    for (size_t i = ino % t->links_cap;; i = (i + 1) % t->links_cap) {
        if (!t->links[i].path)
            return NULL;
        if (t->links[i].ino == ino)
            return t->links[i].path;
    }
}

static int link_add(struct ws_tar_out *t, uint64_t ino, const char *rel)
{
    if ((t->links_n + 1) * 2 > t->links_cap) {
        size_t cap = t->links_cap ? t->links_cap * 2 : 64;
        struct link_slot *n = calloc(cap, sizeof(*n));
        if (!n)
            return -ENOMEM;
        for (size_t i = 0; i < t->links_cap; i++) {
            if (!t->links[i].path)
                continue;
            size_t j = t->links[i].ino % cap;
            while (n[j].path)
                j = (j + 1) % cap;
            n[j] = t->links[i];
        }
        free(t->links);
        t->links = n;
        t->links_cap = cap;
    }
    char *p = strdup(rel);
    if (!p)
        return -ENOMEM;
    size_t j = ino % t->links_cap;
    while (t->links[j].path)
        j = (j + 1) % t->links_cap;
    t->links[j] = (struct link_slot){.ino = ino, .path = p};
    t->links_n++;
    return 0;
}

static int ar_fail(struct ws_tar_out *t)
{
    return t->out_err ? t->out_err : -EIO;
}

static void entry_common(struct ws_tar_out *t, const char *rel, const struct ws_stat *st)
{
    struct archive_entry *e = archive_entry_clear(t->entry);
    archive_entry_copy_pathname(e, rel);
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    archive_entry_set_perm(e, st->mode & 07777);
    int64_t sec = st->mtime_ns / 1000000000, nsec = st->mtime_ns % 1000000000;
    if (nsec < 0) {
        nsec += 1000000000;
        sec--;
    }
    archive_entry_set_mtime(e, (time_t)sec, (long)nsec);
}

/* Starts storing one walk entry (or the single file: dir NULL). 0 also
 * when the entry was skipped. */
static int store(struct ws_tar_out *t, struct ws_vfs_dir *dir, const char *name, const char *path,
                 const char *rel, struct ws_stat *st)
{
    int r;

    switch (st->type) {
    case WS_FT_DIRECTORY:
        entry_common(t, rel, st);
        archive_entry_set_filetype(t->entry, AE_IFDIR);
        if (archive_write_header(t->ar, t->entry) < ARCHIVE_WARN)
            return ar_fail(t);
        t->stats.directories++;
        break;
    case WS_FT_SYMLINK: {
        char target[WS_VFS_PATH_MAX + 1];
        ssize_t n = t->fs->ops->readlink
                        ? t->fs->ops->readlink(t->fs, path, target, sizeof(target) - 1)
                        : -EOPNOTSUPP;
        if (n < 0)
            return ws_walk_skippable((int)n) ? skip(&t->stats, rel, "unreadable") : (int)n;
        target[n] = '\0';
        entry_common(t, rel, st);
        archive_entry_set_filetype(t->entry, AE_IFLNK);
        archive_entry_set_perm(t->entry, 0777);
        archive_entry_copy_symlink(t->entry, target);
        if (archive_write_header(t->ar, t->entry) < ARCHIVE_WARN)
            return ar_fail(t);
        t->stats.symlinks++;
        break;
    }
    case WS_FT_REGULAR: {
        struct ws_stat fst;
        struct ws_vfs_file *f = NULL;
        /* From the walk's open directory: no lookup from the root. */
        r = dir ? t->fs->ops->open_read_at(dir, name, &f, &fst)
                : t->fs->ops->open_read(t->fs, path, &f, &fst);
        if (r < 0) {
            if (r == -WS_ESPECIAL)
                return skip(&t->stats, rel, "special");
            return ws_walk_skippable(r) ? skip(&t->stats, rel, "unreadable") : r;
        }
        if (fst.nlink > 1 && fst.ino) {
            const char *first = link_find(t, fst.ino);
            if (first) {
                t->fs->ops->close(f);
                entry_common(t, rel, &fst);
                archive_entry_set_filetype(t->entry, AE_IFREG);
                archive_entry_copy_hardlink(t->entry, first);
                archive_entry_set_size(t->entry, 0);
                if (archive_write_header(t->ar, t->entry) < ARCHIVE_WARN)
                    return ar_fail(t);
                t->stats.hardlinks++;
                break;
            }
            r = link_add(t, fst.ino, rel);
            if (r < 0) {
                t->fs->ops->close(f);
                return r;
            }
        }
        entry_common(t, rel, &fst);
        archive_entry_set_filetype(t->entry, AE_IFREG);
        archive_entry_set_size(t->entry, (la_int64_t)fst.size);
        if (archive_write_header(t->ar, t->entry) < ARCHIVE_WARN) {
            t->fs->ops->close(f);
            return ar_fail(t);
        }
        free(t->file_path);
        t->file_path = strdup(rel);
        if (!t->file_path) {
            t->fs->ops->close(f);
            return -ENOMEM;
        }
        t->file = f;
        t->file_size = fst.size;
        t->file_off = 0;
        t->file_changed = false;
        t->stats.files++;
        t->stats.bytes += fst.size;
        break;
    }
    default:
        return skip(&t->stats, rel, "special");
    }
    t->stats.entries++;
    return 0;
}

/* Stores the next piece of the open file. Plain tar passes data through
 * unchanged, so it is read straight into the output, where write_cb finds
 * it; through gzip it is read into the chunk buffer. */
static int file_step(struct ws_tar_out *t, size_t room)
{
    uint64_t left = t->file_size - t->file_off;
    size_t want = left < READ_CHUNK ? (size_t)left : READ_CHUNK;
    ssize_t n = 0;

    if (t->in_place && room && want > room)
        want = room;
    if (want) {
        unsigned char *into = t->chunk;
        if (t->in_place) {
            int r = out_reserve(t, want);
            if (r < 0)
                return r;
            into = t->out + t->out_len;
        }
        n = t->fs->ops->pread(t->file, into, want, t->file_off);
        if (n < 0)
            return (int)n;
        if ((size_t)n < want) {
            /* Shrank while read: pad with zeros to the size stored. */
            memset(into + n, 0, want - (size_t)n);
            t->file_changed = true;
        }
        if (archive_write_data(t->ar, into, want) < 0)
            return ar_fail(t);
        t->file_off += want;
    }
    if (t->file_off == t->file_size) {
        unsigned char probe;
        if (!t->file_changed && t->fs->ops->pread(t->file, &probe, 1, t->file_size) > 0)
            t->file_changed = true; /* grew: stored as first seen */
        t->fs->ops->close(t->file);
        t->file = NULL;
        if (t->file_changed) {
            int r = skip(&t->stats, t->file_path, "changed");
            if (r < 0)
                return r;
        }
    }
    return 0;
}

/* Takes the next walk entry and starts storing it; 0 at the end. */
static int walk_step(struct ws_tar_out *t)
{
    struct ws_walk_entry e;

    for (;;) {
        int r = ws_walk_next(t->walk, &e);
        if (r <= 0)
            return r;
        /* The server's own work in progress: never content. */
        if (ws_vfs_transient_name(e.name, e.name_len, NULL))
            continue;
        const char *rel = rel_of(t, e.path);
        struct ws_stat st;
        r = t->fs->ops->stat_at(e.dir, e.name, &st);
        if (r < 0) {
            if (!ws_walk_skippable(r))
                return r;
            r = skip(&t->stats, rel, "unreadable");
            if (r < 0)
                return r;
            continue;
        }
        if (t->n_exc && matches(t->exc, t->n_exc, rel))
            continue; /* an excluded directory is not entered either */
        bool stored = !t->n_inc || matches(t->inc, t->n_inc, rel);
        if (st.type == WS_FT_DIRECTORY) {
            r = ws_walk_descend(t->walk, 0);
            if (r < 0 && r != -WS_ELIMIT)
                return r;
            if (r == -WS_ELIMIT)
                t->stats.truncated = true;
        }
        if (!stored)
            continue;
        r = store(t, e.dir, e.name, e.path, rel, &st);
        if (r < 0)
            return r;
        return 1;
    }
}

int ws_tar_out_new(struct ws_fsops *ops, const struct ws_tar_out_request *req, struct ws_diag *d,
                   struct ws_tar_out **ret)
{
    struct ws_vfs *fs = ws_fsops_vfs(ops);
    struct ws_stat st;
    int r = ws_vfs_check_path(req->path);
    if (r < 0)
        return r;

    struct ws_tar_out *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->ops = ops;
    t->fs = fs;
    r = ws_path_normalize(req->path, t->base, sizeof(t->base));
    if (r < 0)
        goto fail;
    t->base_len = (size_t)r;
    r = compile_globs(req->include, req->n_include, &t->inc, d);
    t->n_inc = req->n_include;
    if (r < 0)
        goto fail;
    r = compile_globs(req->exclude, req->n_exclude, &t->exc, d);
    t->n_exc = req->n_exclude;
    if (r < 0)
        goto fail;

    r = fs->ops->stat(fs, req->path, &st);
    if (r < 0)
        goto fail;
    if (st.type == WS_FT_SYMLINK) {
        r = -WS_ESYMLINK_LEAF;
        goto fail;
    }
    if (st.type == WS_FT_OTHER) {
        r = -WS_ESPECIAL;
        goto fail;
    }
    t->single = st.type != WS_FT_DIRECTORY;
    t->in_place = req->format != WS_TAR_GZIP;
    if (!t->single) {
        r = ws_walk_open(fs, req->path, t->base, 0, req->budget, &t->walk);
        if (r < 0)
            goto fail;
    }

    t->chunk = malloc(READ_CHUNK);
    t->entry = archive_entry_new();
    t->ar = archive_write_new();
    if (!t->chunk || !t->entry || !t->ar) {
        r = -ENOMEM;
        goto fail;
    }
    if (archive_write_set_format_pax_restricted(t->ar) != ARCHIVE_OK ||
        (req->format == WS_TAR_GZIP && archive_write_add_filter_gzip(t->ar) != ARCHIVE_OK) ||
        /* Bytes go out as they come: no copy into 10 KiB blocks (the
         * stream still ends on a 512-byte record). */
        archive_write_set_bytes_per_block(t->ar, 0) != ARCHIVE_OK ||
        archive_write_open2(t->ar, t, NULL, write_cb, NULL, NULL) != ARCHIVE_OK) {
        r = -EIO;
        goto fail;
    }
    *ret = t;
    return 0;
fail:
    ws_tar_out_free(t);
    return r;
}

int ws_tar_out_next(struct ws_tar_out *t, size_t want, const void **ret_data, size_t *ret_len)
{
    int r = 0;

    t->out_len = 0;
    if (t->done)
        return 0;
    while (t->out_len < want) {
        if (t->file) {
            r = file_step(t, want - t->out_len);
        } else if (t->single) {
            if (t->single_done)
                break;
            t->single_done = true;
            struct ws_stat st;
            const char *slash = strrchr(t->base, '/');
            r = t->fs->ops->stat(t->fs, t->base, &st);
            if (r == 0)
                r = store(t, NULL, NULL, t->base, slash ? slash + 1 : t->base, &st);
        } else {
            r = walk_step(t);
            if (r == 0)
                break;
        }
        if (r < 0)
            return r;
    }
    if (t->out_len < want && !t->file) {
        /* The end: the tar trailer and the gzip end go into this stretch. */
        if (t->walk && ws_walk_truncated(t->walk))
            t->stats.truncated = true;
        if (archive_write_close(t->ar) != ARCHIVE_OK)
            return ar_fail(t);
        t->closed = true;
        t->done = true;
        if (!t->out_len)
            return 0;
    }
    *ret_data = t->out;
    *ret_len = t->out_len;
    return 1;
}

const struct ws_tar_stats *ws_tar_out_stats(const struct ws_tar_out *t)
{
    return &t->stats;
}

void ws_tar_out_free(struct ws_tar_out *t)
{
    if (!t)
        return;
    if (t->file)
        t->fs->ops->close(t->file);
    if (t->ar)
        archive_write_free(t->ar);
    if (t->entry)
        archive_entry_free(t->entry);
    ws_walk_free(t->walk);
    for (size_t i = 0; i < t->n_inc && t->inc; i++)
        ws_globpat_free(t->inc[i]);
    for (size_t i = 0; i < t->n_exc && t->exc; i++)
        ws_globpat_free(t->exc[i]);
    free(t->inc);
    free(t->exc);
    for (size_t i = 0; i < t->links_cap; i++)
        free(t->links[i].path);
    free(t->links);
    free(t->chunk);
    free(t->out);
    free(t->file_path);
    stats_free(&t->stats);
    free(t);
}
