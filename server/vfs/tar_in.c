/* WriteArchive's extractor: libarchive reads the tar (or tar.gz) from
 * bytes fed by the RPC layer; every entry is checked here and made through
 * the vfs inside a staging directory, which is published at the end. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <archive.h>
#include <archive_entry.h>

#include "server/base/macros.h"
#include "server/vfs/archive.h"
#include "server/vfs/internal.h"

#define STAGE_PREFIX WS_VFS_STAGE_PREFIX
#define TRASH_PREFIX WS_VFS_TRASH_PREFIX
#define COPY_CHUNK   (256 * 1024)
/* Bytes after the end-of-archive blocks that are read and dropped (block
 * padding, a gzip trailer); more is a malformed stream. */
#define TAIL_MAX (16u << 20)

struct qchunk {
    struct qchunk *next;
    size_t len;
    unsigned char data[];
};

/* What the archive made so far, by path below the staging directory. */
struct made {
    char *path;
    enum ws_ftype type;
};

struct dirmeta {
    char *path; /* full vfs path */
    uint32_t mode;
    int64_t mtime_ns;
};

struct ws_tar_in {
    struct ws_fsops *ops;
    struct ws_vfs *fs;
    struct ws_tar_in_request req;
    char target[WS_VFS_PATH_MAX + 1]; /* normalized, "" = root */
    char stage[WS_VFS_PATH_MAX + 1];  /* vfs path of the staging directory */
    size_t stage_len;
    bool stage_made;
    bool staged;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct qchunk *head, *tail;
    size_t queued;
    bool ended, cancelled, failed, feeder_waits;
    void (*drained)(void *);
    void *drained_ud;
    struct qchunk *cur; /* handed to libarchive, freed at the next read */
    uint64_t raw_bytes;

    struct archive *ar;
    struct made *made;
    size_t made_cap, made_n;
    struct dirmeta *dirs;
    size_t dirs_n, dirs_cap;
    unsigned char *buf;
    struct ws_tar_stats stats;
};

/* ---- the queue ---- */

static ssize_t read_cb(struct archive *a, void *userdata, const void **ret)
{
    struct ws_tar_in *t = userdata;
    void (*drained)(void *) = NULL;
    ssize_t n;

    pthread_mutex_lock(&t->lock);
    free(t->cur);
    t->cur = NULL;
    while (!t->head && !t->ended && !t->cancelled)
        pthread_cond_wait(&t->cond, &t->lock);
    if (t->cancelled) {
        pthread_mutex_unlock(&t->lock);
        archive_set_error(a, ECANCELED, "cancelled");
        return -1;
    }
    if (!t->head) {
        pthread_mutex_unlock(&t->lock);
        return 0;
    }
    t->cur = t->head;
    t->head = t->cur->next;
    if (!t->head)
        t->tail = NULL;
    t->queued -= t->cur->len;
    t->raw_bytes += t->cur->len;
    if (t->feeder_waits && t->queued < WS_TAR_IN_QUEUE_HIGH / 2) {
        t->feeder_waits = false;
        drained = t->drained;
    }
    *ret = t->cur->data;
    n = (ssize_t)t->cur->len;
    void *ud = t->drained_ud;
    pthread_mutex_unlock(&t->lock);
    if (drained)
        drained(ud);
    return n;
}

int ws_tar_in_feed(struct ws_tar_in *t, const void *data, size_t len)
{
    struct qchunk *c = NULL;
    int r;

    if (len) {
        c = malloc(sizeof(*c) + len);
        if (!c)
            return -ENOMEM;
        c->next = NULL;
        c->len = len;
        memcpy(c->data, data, len);
    }
    pthread_mutex_lock(&t->lock);
    if (t->failed || t->cancelled || t->ended) {
        pthread_mutex_unlock(&t->lock);
        free(c);
        return -ECANCELED;
    }
    if (c) {
        if (t->tail)
            t->tail->next = c;
        else
            t->head = c;
        t->tail = c;
        t->queued += len;
    }
    r = 1;
    if (t->queued >= WS_TAR_IN_QUEUE_HIGH) {
        t->feeder_waits = true;
        r = 0;
    }
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    return r;
}

void ws_tar_in_end(struct ws_tar_in *t)
{
    pthread_mutex_lock(&t->lock);
    t->ended = true;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

void ws_tar_in_cancel(struct ws_tar_in *t)
{
    pthread_mutex_lock(&t->lock);
    t->cancelled = true;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

void ws_tar_in_set_drained(struct ws_tar_in *t, void (*drained)(void *userdata), void *userdata)
{
    pthread_mutex_lock(&t->lock);
    t->drained = drained;
    t->drained_ud = userdata;
    pthread_mutex_unlock(&t->lock);
}

/* ---- what was made ---- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static struct made *made_find(const struct ws_tar_in *t, const char *path)
{
    if (!t->made_cap)
        return NULL;
    for (size_t i = hash_str(path) % t->made_cap;; i = (i + 1) % t->made_cap) {
        if (!t->made[i].path)
            return NULL;
        if (strcmp(t->made[i].path, path) == 0)
            return &t->made[i];
    }
}

static int made_add(struct ws_tar_in *t, const char *path, enum ws_ftype type)
{
    struct made *m = made_find(t, path);
    if (m) {
        m->type = type;
        return 0;
    }
    if ((t->made_n + 1) * 2 > t->made_cap) {
        size_t cap = t->made_cap ? t->made_cap * 2 : 256;
        struct made *n = calloc(cap, sizeof(*n));
        if (!n)
            return -ENOMEM;
        for (size_t i = 0; i < t->made_cap; i++) {
            if (!t->made[i].path)
                continue;
            size_t j = hash_str(t->made[i].path) % cap;
            while (n[j].path)
                j = (j + 1) % cap;
            n[j] = t->made[i];
        }
        free(t->made);
        t->made = n;
        t->made_cap = cap;
    }
    char *p = strdup(path);
    if (!p)
        return -ENOMEM;
    size_t j = hash_str(p) % t->made_cap;
    while (t->made[j].path)
        j = (j + 1) % t->made_cap;
    t->made[j] = (struct made){.path = p, .type = type};
    t->made_n++;
    return 0;
}

/* ---- refusals ---- */

static int refuse(struct ws_diag *d, const char *entry, const char *problem, const char *what)
{
    ws_diag_set(d, "archive entry refused: %s", what);
    if (entry)
        ws_diag_meta(d, "entry", "%s", entry);
    ws_diag_meta(d, "problem", "%s", problem);
    return -WS_EBADARCHIVE;
}

static int limit(struct ws_diag *d, const char *field, uint64_t lim)
{
    char v[32];
    snprintf(v, sizeof(v), "%llu", (unsigned long long)lim);
    ws_diag_set(d, "archive over the limit of %s", field);
    ws_diag_meta(d, "field", "%s", field);
    ws_diag_meta(d, "limit", "%s", v);
    return -WS_ELIMIT;
}

/* The error libarchive stopped with, as a refusal (or the queue's). */
static int stream_error(struct ws_tar_in *t, struct ws_diag *d, const char *entry)
{
    int e = archive_errno(t->ar);
    const char *msg = archive_error_string(t->ar);

    if (e == ECANCELED || t->cancelled)
        return -ECANCELED;
    if (e == ENOMEM)
        return -ENOMEM;
    if (!msg)
        msg = "";
    if (strstr(msg, "runcated") || strstr(msg, "remature end") || strstr(msg, "nexpected EOF"))
        return refuse(d, entry, "truncated", "the stream ends inside the archive");
    if (t->req.format == WS_TAR_GZIP &&
        (strstr(msg, "gzip") || strstr(msg, "zlib") || strstr(msg, "ecompress") ||
         strstr(msg, "nrecognized") || strstr(msg, "Damaged")))
        return refuse(d, entry, "gzip", "not a gzip stream, or a corrupt one");
    return refuse(d, entry, "malformed", "not a tar stream, or a damaged header");
}

/* Spells an entry's name below the staging directory: no empty or "."
 * components; refuses absolute names, ".." and names the vfs cannot
 * hold. Returns the length (0: the archive's root), or a refusal. */
static int entry_path(struct ws_tar_in *t, const char *in, char *out, size_t cap, struct ws_diag *d)
{
    size_t n = 0;

    if (!in || !*in)
        return refuse(d, in, "bad_name", "an empty name");
    if (in[0] == '/')
        return refuse(d, in, "absolute", "an absolute name");
    for (const char *p = in; *p;) {
        const char *q = p;
        while (*q && *q != '/')
            q++;
        size_t len = (size_t)(q - p);
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return refuse(d, in, "dotdot", "a \"..\" component");
        if (len > WS_VFS_NAME_MAX)
            return refuse(d, in, "bad_name", "a component longer than 255 bytes");
        if (len && !(len == 1 && p[0] == '.')) {
            if (n + len + 2 + t->stage_len > WS_VFS_PATH_MAX || n + len + 2 > cap)
                return refuse(d, in, "bad_name", "a name longer than the workspace allows");
            if (n)
                out[n++] = '/';
            memcpy(out + n, p, len);
            n += len;
        }
        p = *q ? q + 1 : q;
    }
    out[n] = '\0';
    return (int)n;
}

/* The vfs path of a name below the staging directory. */
static void full_path(const struct ws_tar_in *t, const char *rel, char *out)
{
    /* entry_path bounded rel to fit after the staging directory. */
    size_t n = strlen(rel);
    memcpy(out, t->stage, t->stage_len);
    out[t->stage_len] = '/';
    memcpy(out + t->stage_len + 1, rel, n + 1);
}

static int remember_dir(struct ws_tar_in *t, const char *full, uint32_t mode, int64_t mtime)
{
    if (t->dirs_n == t->dirs_cap) {
        size_t cap = t->dirs_cap ? t->dirs_cap * 2 : 64;
        struct dirmeta *n = realloc(t->dirs, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        t->dirs = n;
        t->dirs_cap = cap;
    }
    char *p = strdup(full);
    if (!p)
        return -ENOMEM;
    t->dirs[t->dirs_n++] = (struct dirmeta){.path = p, .mode = mode, .mtime_ns = mtime};
    return 0;
}

/* Makes sure every parent of `rel` is a directory the archive made (or
 * makes it): a symlink or a file on the way is refused. */
static int parents(struct ws_tar_in *t, const char *entry, char *rel, struct ws_diag *d)
{
    char full[WS_VFS_PATH_MAX + 1];

    for (char *s = strchr(rel, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        struct made *m = made_find(t, rel);
        int r = 0;
        if (!m) {
            full_path(t, rel, full);
            r = t->fs->ops->mkdir(t->fs, full, false, 0755);
            if (r == 0)
                r = made_add(t, rel, WS_FT_DIRECTORY);
            if (r == 0)
                r = remember_dir(t, full, 0755, -1);
            if (r == 0)
                t->stats.directories++;
        } else if (m->type == WS_FT_SYMLINK) {
            r = refuse(d, entry, "through_symlink", "the name passes through a symlink");
        } else if (m->type != WS_FT_DIRECTORY) {
            r = refuse(d, entry, "not_directory", "the name passes through a file");
        }
        *s = '/';
        if (r < 0)
            return r;
    }
    return 0;
}

static int check_ratio(struct ws_tar_in *t, struct ws_diag *d)
{
    if (t->req.format != WS_TAR_GZIP)
        return 0;
    uint64_t unpacked = (uint64_t)archive_filter_bytes(t->ar, 0);
    uint64_t raw = (uint64_t)archive_filter_bytes(t->ar, -1);
    if (unpacked > WS_TAR_IN_RATIO_FLOOR && unpacked / WS_TAR_IN_MAX_RATIO > raw)
        return limit(d, "ratio", WS_TAR_IN_MAX_RATIO);
    return 0;
}

static int count_bytes(struct ws_tar_in *t, const char *entry, uint64_t size, struct ws_diag *d)
{
    char v[32];

    if (t->req.max_file_size && size > t->req.max_file_size) {
        snprintf(v, sizeof(v), "%llu", (unsigned long long)t->req.max_file_size);
        ws_diag_set(d, "archive entry over the workspace's file size cap");
        ws_diag_meta(d, "entry", "%s", entry);
        ws_diag_meta(d, "limit", "%s", v);
        return -EFBIG;
    }
    if (size > WS_TAR_IN_MAX_BYTES - t->stats.bytes)
        return limit(d, "bytes", WS_TAR_IN_MAX_BYTES);
    t->stats.bytes += size;
    if (t->req.quota)
        return t->req.quota(t->req.quota_userdata, t->stats.bytes, d);
    return 0;
}

static uint32_t entry_mode(struct ws_tar_in *t, struct archive_entry *e, const char *rel)
{
    uint32_t perm = (uint32_t)archive_entry_perm(e) & 07777;
    if (perm & 06000) {
        if (t->stats.n_skips < WS_TAR_SKIPS_MAX) {
            if (!t->stats.skips)
                t->stats.skips = calloc(WS_TAR_SKIPS_MAX, sizeof(*t->stats.skips));
            char *p = t->stats.skips ? strdup(rel) : NULL;
            if (p)
                t->stats.skips[t->stats.n_skips++] =
                    (struct ws_tar_skip){.path = p, .reason = "setuid"};
        } else {
            t->stats.skipped_more++;
        }
    }
    return perm & 0777;
}

static int64_t entry_mtime(struct archive_entry *e)
{
    if (!archive_entry_mtime_is_set(e))
        return -1;
    /* The archive's number: before 1970 or past what nanoseconds in an
     * int64 hold (2262), it is left unset rather than overflowed. */
    int64_t sec = (int64_t)archive_entry_mtime(e);
    long nsec = archive_entry_mtime_nsec(e);
    if (sec < 0 || sec >= INT64_MAX / 1000000000)
        return -1;
    return sec * 1000000000 + (nsec >= 0 && nsec < 1000000000 ? nsec : 0);
}

/* Writes a regular file from the archive's data (src NULL) or as a copy of
 * the staged file `src` (a hard link). */
static int write_file(struct ws_tar_in *t, const char *full, uint32_t mode, const char *src,
                      const char *entry, bool fresh, struct ws_diag *d)
{
    /* The staging directory is ours: a name the archive has not made yet
     * is written in place. */
    struct ws_write_opts o = {.mode = mode ? mode : 0644, .no_sync = true, .fresh = fresh};
    struct ws_vfs_writer *w = NULL;
    struct ws_vfs_file *f = NULL;
    uint64_t off = 0;
    int r = t->fs->ops->write_begin(t->fs, full, &o, &w);
    if (r < 0)
        return r;
    if (src) {
        struct ws_stat st;
        r = t->fs->ops->open_read(t->fs, src, &f, &st);
        if (r < 0)
            goto out;
    }
    for (;;) {
        ssize_t n;
        if (f) {
            n = t->fs->ops->pread(f, t->buf, COPY_CHUNK, off);
            off += n > 0 ? (uint64_t)n : 0;
        } else {
            n = archive_read_data(t->ar, t->buf, COPY_CHUNK);
            if (n < 0) {
                r = stream_error(t, d, entry);
                goto out;
            }
        }
        if (n < 0) {
            r = (int)n;
            goto out;
        }
        if (n == 0)
            break;
        r = t->fs->ops->write(w, t->buf, (size_t)n);
        if (r < 0)
            goto out;
        if (!f) {
            r = check_ratio(t, d);
            if (r < 0)
                goto out;
        }
    }
    r = t->fs->ops->write_commit(w, NULL);
    w = NULL;
    if (r == 0 && !mode)
        r = t->fs->ops->set_mode ? t->fs->ops->set_mode(t->fs, full, 0) : 0;
out:
    if (w)
        t->fs->ops->write_abort(w);
    if (f)
        t->fs->ops->close(f);
    return r;
}

static int one_entry(struct ws_tar_in *t, struct archive_entry *e, struct ws_diag *d)
{
    char rel[WS_VFS_PATH_MAX + 1], full[WS_VFS_PATH_MAX + 1];
    /* The name as the locale spells it, else as the archive's UTF-8. */
    const char *name = archive_entry_pathname(e);
    if (!name)
        name = archive_entry_pathname_utf8(e);
    const char *link = archive_entry_hardlink(e);
    if (!link && archive_entry_hardlink_utf8(e))
        link = archive_entry_hardlink_utf8(e);
    mode_t type = archive_entry_filetype(e);
    int r;

    if (++t->stats.entries > WS_TAR_IN_MAX_ENTRIES)
        return limit(d, "entries", WS_TAR_IN_MAX_ENTRIES);
    r = entry_path(t, name, rel, sizeof(rel), d);
    if (r < 0)
        return r;
    if (r == 0) {
        if (type == AE_IFDIR && !link)
            return 0; /* "./": the root, which is the staging directory */
        return refuse(d, name, "bad_name", "a file named as the archive's root");
    }
    if (!link) {
        switch (type) {
        case AE_IFCHR:
        case AE_IFBLK:
            return refuse(d, name, "device", "a device");
        case AE_IFIFO:
            return refuse(d, name, "fifo", "a FIFO");
        case AE_IFSOCK:
            return refuse(d, name, "socket", "a socket");
        case AE_IFREG:
        case AE_IFDIR:
        case AE_IFLNK:
            break;
        default:
            return refuse(d, name, "malformed", "an entry of unknown type");
        }
    }
    r = parents(t, name, rel, d);
    if (r < 0)
        return r;
    full_path(t, rel, full);
    struct made *was = made_find(t, rel);
    enum ws_ftype want = link               ? WS_FT_REGULAR
                         : type == AE_IFDIR ? WS_FT_DIRECTORY
                         : type == AE_IFLNK ? WS_FT_SYMLINK
                                            : WS_FT_REGULAR;
    if (was && (was->type != want || want == WS_FT_SYMLINK))
        return refuse(d, name, "duplicate", "an entry that replaces one of another type");
    uint32_t mode = entry_mode(t, e, rel);
    int64_t mtime = entry_mtime(e);

    if (link) {
        char target[WS_VFS_PATH_MAX + 1], src[WS_VFS_PATH_MAX + 1];
        /* A target that is no name of this archive (absolute, "..") is
         * outside it: the one answer for every such link. */
        struct ws_diag scratch = {0};
        r = entry_path(t, link, target, sizeof(target), &scratch);
        struct made *m = r > 0 ? made_find(t, target) : NULL;
        if (!m || m->type != WS_FT_REGULAR || strcmp(target, rel) == 0)
            return refuse(d, name, "link_outside",
                          "a hard link to a name that is not an earlier file of the archive");
        full_path(t, target, src);
        struct ws_stat st;
        r = t->fs->ops->stat(t->fs, src, &st);
        if (r < 0)
            return r;
        r = count_bytes(t, name, st.size, d);
        if (r < 0)
            return r;
        r = write_file(t, full, mode ? mode : (st.mode & 0777), src, name, !was, d);
        if (r < 0)
            return r;
        t->stats.hardlinks++;
    } else if (type == AE_IFDIR) {
        if (!was) {
            r = t->fs->ops->mkdir(t->fs, full, false, 0755);
            if (r < 0)
                return r;
            t->stats.directories++;
        }
        r = remember_dir(t, full, mode, mtime);
        if (r < 0)
            return r;
    } else if (type == AE_IFLNK) {
        const char *target = archive_entry_symlink(e);
        if (!target)
            target = archive_entry_symlink_utf8(e);
        if (!target || !*target)
            return refuse(d, name, "bad_name", "a symlink without a target");
        if (!t->fs->ops->symlink)
            return -EOPNOTSUPP;
        r = t->fs->ops->symlink(t->fs, target, full);
        if (r < 0)
            return r;
        t->stats.symlinks++;
    } else {
        la_int64_t size = archive_entry_size(e);
        r = count_bytes(t, name, size < 0 ? 0 : (uint64_t)size, d);
        if (r < 0)
            return r;
        r = write_file(t, full, mode, NULL, name, !was, d);
        if (r < 0)
            return r;
        t->stats.files++;
    }
    if (!was) {
        r = made_add(t, rel, want);
        if (r < 0)
            return r;
    }
    if (type != AE_IFDIR && mtime >= 0 && t->fs->ops->set_mtime)
        (void)t->fs->ops->set_mtime(t->fs, full, mtime);
    return 0;
}

/* ---- the run ---- */

int ws_tar_in_run(struct ws_tar_in *t, struct ws_diag *d)
{
    struct archive_entry *e;
    int r;

    t->ar = archive_read_new();
    t->buf = malloc(COPY_CHUNK);
    if (!t->ar || !t->buf)
        return -ENOMEM;
    archive_read_support_format_tar(t->ar);
    if (t->req.format == WS_TAR_GZIP)
        archive_read_append_filter(t->ar, ARCHIVE_FILTER_GZIP);
    else
        archive_read_support_filter_none(t->ar);
    if (archive_read_open(t->ar, t, NULL, read_cb, NULL) != ARCHIVE_OK) {
        r = stream_error(t, d, NULL);
        goto out;
    }
    for (;;) {
        r = archive_read_next_header(t->ar, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
            r = stream_error(t, d, NULL);
            goto out;
        }
        r = one_entry(t, e, d);
        if (r < 0)
            goto out;
        r = check_ratio(t, d);
        if (r < 0)
            goto out;
    }
    /* Read what follows the end-of-archive blocks, to the stream's end. */
    for (uint64_t tail = 0;;) {
        const void *p;
        ssize_t n = read_cb(t->ar, t, &p);
        if (n < 0) {
            r = -ECANCELED;
            goto out;
        }
        if (n == 0)
            break;
        tail += (uint64_t)n;
        if (tail > TAIL_MAX) {
            r = refuse(d, NULL, "malformed", "data after the end of the archive");
            goto out;
        }
    }
    /* Directory modes and times last: a read-only directory is filled
     * first, and its time is not changed by its children. */
    for (size_t i = t->dirs_n; i-- > 0;) {
        /* Always: mkdir's mode went through the server's umask. */
        if (t->fs->ops->set_mode)
            (void)t->fs->ops->set_mode(t->fs, t->dirs[i].path, t->dirs[i].mode);
        if (t->fs->ops->set_mtime && t->dirs[i].mtime_ns >= 0)
            (void)t->fs->ops->set_mtime(t->fs, t->dirs[i].path, t->dirs[i].mtime_ns);
    }
    t->staged = true;
    r = 0;
out:
    if (r < 0) {
        pthread_mutex_lock(&t->lock);
        t->failed = true;
        pthread_mutex_unlock(&t->lock);
    }
    return r;
}

/* ---- set up, publish, free ---- */

static int random_name(const char *prefix, char *out, size_t cap)
{
    unsigned char b[8];
    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
        return -EIO;
    snprintf(out, cap, "%s%02x%02x%02x%02x%02x%02x%02x%02x", prefix, b[0], b[1], b[2], b[3], b[4],
             b[5], b[6], b[7]);
    return 0;
}

/* A sibling of the target: `name` in its parent directory. */
static int sibling(const char *target, const char *name, char *out, size_t cap)
{
    const char *slash = strrchr(target, '/');
    int n = slash ? snprintf(out, cap, "%.*s/%s", (int)(slash - target), target, name)
                  : snprintf(out, cap, "%s", name);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : n;
}

int ws_tar_in_new(struct ws_fsops *ops, const struct ws_tar_in_request *req, struct ws_diag *d,
                  struct ws_tar_in **ret)
{
    struct ws_vfs *fs = ws_fsops_vfs(ops);
    struct ws_stat st;
    char name[64];
    int r = ws_vfs_check_path(req->path);
    if (r < 0)
        return r;
    if (!fs->ops->symlink || !fs->ops->set_mode)
        return -EOPNOTSUPP;

    struct ws_tar_in *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    t->ops = ops;
    t->fs = fs;
    t->req = *req;
    r = ws_path_normalize(req->path, t->target, sizeof(t->target));
    if (r < 0)
        goto fail;
    t->req.path = t->target;

    r = t->target[0] ? fs->ops->stat(fs, t->target, &st) : 0;
    if (!t->target[0])
        st.type = WS_FT_DIRECTORY;
    if (r == -ENOENT) {
        if (!t->target[0]) {
            r = -ENOENT;
            goto fail;
        }
    } else if (r < 0) {
        goto fail;
    } else if (req->overwrite == WS_TAR_OVERWRITE_NONE) {
        ws_diag_set(d, "the path exists (overwrite is NONE)");
        r = -EEXIST;
        goto fail;
    } else if (req->overwrite == WS_TAR_OVERWRITE_MERGE && st.type != WS_FT_DIRECTORY) {
        r = st.type == WS_FT_SYMLINK ? -WS_ESYMLINK_LEAF : -ENOTDIR;
        goto fail;
    }
    if (!t->target[0] && req->overwrite != WS_TAR_OVERWRITE_MERGE) {
        ws_diag_set(d, "the root can only be merged into");
        r = -EXDEV;
        goto fail;
    }
    if (req->create_parents && strchr(t->target, '/')) {
        char parent[WS_VFS_PATH_MAX + 1];
        snprintf(parent, sizeof(parent), "%.*s", (int)(strrchr(t->target, '/') - t->target),
                 t->target);
        r = fs->ops->mkdir(fs, parent, true, 0755);
        if (r < 0)
            goto fail;
    }
    r = random_name(STAGE_PREFIX, name, sizeof(name));
    if (r < 0)
        goto fail;
    r = t->target[0] ? sibling(t->target, name, t->stage, sizeof(t->stage))
                     : snprintf(t->stage, sizeof(t->stage), "%s", name);
    if (r < 0)
        goto fail;
    t->stage_len = strlen(t->stage);
    r = fs->ops->mkdir(fs, t->stage, false, 0700);
    if (r < 0)
        goto fail;
    t->stage_made = true;
    *ret = t;
    return 0;
fail:
    ws_tar_in_free(t);
    return r;
}

static int is_dir(struct ws_vfs *fs, const char *path, bool *ret)
{
    struct ws_stat st;
    int r = fs->ops->stat(fs, path, &st);
    if (r < 0)
        return r;
    *ret = st.type == WS_FT_DIRECTORY;
    return 0;
}

/* Moves each entry of directory `from` into directory `to`, merging
 * directories; `dry` only looks for what would be refused (a file of the
 * archive where the workspace has a directory). */
static int merge(struct ws_tar_in *t, const char *from, const char *to, bool dry, struct ws_diag *d,
                 unsigned depth)
{
    struct ws_vfs *fs = t->fs;
    struct ws_vfs_dir *dir = NULL;
    struct ws_dirent de;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int r;

    if (depth > WS_LIST_DEPTH_MAX)
        return -WS_ELIMIT;
    r = fs->ops->opendir(fs, from, &dir);
    if (r < 0)
        return r;
    while ((r = fs->ops->readdir(dir, &de)) == 1) {
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            char **nn = realloc(names, cap * sizeof(*nn));
            if (!nn) {
                r = -ENOMEM;
                break;
            }
            names = nn;
        }
        names[n] = strndup(de.name, de.name_len);
        if (!names[n]) {
            r = -ENOMEM;
            break;
        }
        n++;
    }
    fs->ops->closedir(dir);
    for (size_t i = 0; r >= 0 && i < n; i++) {
        char src[WS_VFS_PATH_MAX + 1], dst[WS_VFS_PATH_MAX + 1];
        int a = snprintf(src, sizeof(src), "%s/%s", from, names[i]);
        int b = to[0] ? snprintf(dst, sizeof(dst), "%s/%s", to, names[i])
                      : snprintf(dst, sizeof(dst), "%s", names[i]);
        if (a < 0 || b < 0 || (size_t)a >= sizeof(src) || (size_t)b >= sizeof(dst)) {
            r = -ENAMETOOLONG;
            break;
        }
        bool src_dir, dst_dir;
        r = is_dir(fs, src, &src_dir);
        if (r < 0)
            break;
        r = is_dir(fs, dst, &dst_dir);
        if (r == -ENOENT) {
            r = dry ? 0 : fs->ops->move(fs, src, dst, false);
            continue;
        }
        if (r < 0)
            break;
        if (src_dir && dst_dir) {
            r = merge(t, src, dst, dry, d, depth + 1);
        } else if (dst_dir) {
            ws_diag_set(d, "a file of the archive where the workspace has a directory");
            ws_diag_meta(d, "entry", "%s", dst);
            r = -EISDIR;
        } else if (!dry) {
            /* A file or symlink of the workspace gives way. */
            r = src_dir ? fs->ops->remove(fs, dst, false, NULL) : 0;
            if (r == 0)
                r = fs->ops->move(fs, src, dst, true);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return r < 0 ? r : 0;
}

int ws_tar_in_publish(struct ws_tar_in *t, struct ws_diag *d)
{
    struct ws_vfs *fs = t->fs;
    struct ws_stat st;
    int r;

    if (!t->staged)
        return -EINVAL;
    if (fs->ops->sync) {
        r = fs->ops->sync(fs);
        if (r < 0)
            return r;
    }
    ws_fsops_change_begin(t->ops);
    st.type = WS_FT_DIRECTORY; /* the root */
    r = t->target[0] ? fs->ops->stat(fs, t->target, &st) : 0;
    if (r == -ENOENT) {
        r = fs->ops->move(fs, t->stage, t->target, false);
        if (r == 0)
            t->stage_made = false;
    } else if (r < 0) {
        /* fall through with the error */
    } else if (t->req.overwrite == WS_TAR_OVERWRITE_NONE) {
        ws_diag_set(d, "the path exists (overwrite is NONE)");
        r = -EEXIST;
    } else if (t->req.overwrite == WS_TAR_OVERWRITE_REPLACE) {
        char name[64], trash[WS_VFS_PATH_MAX + 1];
        r = random_name(TRASH_PREFIX, name, sizeof(name));
        if (r == 0)
            r = sibling(t->target, name, trash, sizeof(trash));
        if (r >= 0)
            r = fs->ops->move(fs, t->target, trash, false);
        if (r == 0) {
            r = fs->ops->move(fs, t->stage, t->target, false);
            if (r < 0) {
                (void)fs->ops->move(fs, trash, t->target, false);
            } else {
                t->stage_made = false;
                (void)fs->ops->remove(fs, trash, true, NULL);
            }
        }
    } else if (st.type != WS_FT_DIRECTORY) {
        r = -ENOTDIR;
    } else {
        r = merge(t, t->stage, t->target, true, d, 0);
        if (r == 0)
            r = merge(t, t->stage, t->target, false, d, 0);
    }
    ws_fsops_change_end(t->ops);
    return r;
}

const struct ws_tar_stats *ws_tar_in_stats(const struct ws_tar_in *t)
{
    return &t->stats;
}

void ws_tar_in_discard(struct ws_tar_in *t)
{
    if (t->stage_made) {
        ws_fsops_change_begin(t->ops);
        (void)t->fs->ops->remove(t->fs, t->stage, true, NULL);
        ws_fsops_change_end(t->ops);
        t->stage_made = false;
    }
}

void ws_tar_in_free(struct ws_tar_in *t)
{
    if (!t)
        return;
    ws_tar_in_discard(t);
    if (t->ar)
        archive_read_free(t->ar);
    while (t->head) {
        struct qchunk *c = t->head;
        t->head = c->next;
        free(c);
    }
    free(t->cur);
    for (size_t i = 0; i < t->made_cap; i++)
        free(t->made[i].path);
    free(t->made);
    for (size_t i = 0; i < t->dirs_n; i++)
        free(t->dirs[i].path);
    free(t->dirs);
    free(t->buf);
    for (size_t i = 0; i < t->stats.n_skips; i++)
        free(t->stats.skips[i].path);
    free(t->stats.skips);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    free(t);
}
