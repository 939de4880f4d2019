/* The snapshot store and tree copies; see snapshots.h. */
#include "server/registry/snapshots.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "server/base/io.h"
#include "server/base/macros.h"
#include "server/base/time.h"
#include "server/registry/snapcache.h"
#include "server/registry/storage.h"

#define STORE_DIR     "snapshots"
#define OBJECTS_DIR   "objects"
#define MANIFESTS_DIR "manifests"
#define META_DIR      "meta"
#define TMP_DIR       "tmp"
#define MANIFEST_HEAD "workspaced-manifest 1"
/* The hidden directory a restore builds in, at the workspace's root. */
#define RESTORE_PREFIX WS_VFS_RESTORE_PREFIX
#define RESTORE_OLD    WS_VFS_REPLACED_PREFIX
#define COPY_BUF       (128 * 1024)
#define HASH_LEN       32
#define HEX_LEN        (2 * HASH_LEN)

struct entry {
    struct ws_snap *snap;
    bool committed;
    struct entry *next;
};

struct ws_snapstore {
    int dir_fd, objects_fd, manifests_fd, meta_fd, tmp_fd;
    unsigned max;
    pthread_mutex_t lock; /* the list */
    struct entry *entries;
    pthread_rwlock_t gc;
    struct ws_snapcache *cache;
};

/* A snapshot's refcount lives beside it. */
struct snap_box {
    struct ws_snap s;
    atomic_long refs;
};

static struct snap_box *box_of(struct ws_snap *s)
{
    return (struct snap_box *)s;
}

static void kv_free(struct ws_snap_kv *kv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(kv[i].key);
        free(kv[i].value);
    }
    free(kv);
}

static void snap_free(struct ws_snap *s)
{
    free(s->name);
    free(s->tenant);
    free(s->workspace_id);
    free(s->provider);
    kv_free(s->labels, s->n_labels);
    kv_free(s->ws_labels, s->n_ws_labels);
    free(box_of(s));
}

void ws_snap_ref(struct ws_snap *s)
{
    atomic_fetch_add(&box_of(s)->refs, 1);
}

void ws_snap_unref(struct ws_snap *s)
{
    if (s && atomic_fetch_sub(&box_of(s)->refs, 1) == 1)
        snap_free(s);
}

static struct ws_snap *snap_new(void)
{
    struct snap_box *b = calloc(1, sizeof(*b));

    if (!b)
        return NULL;
    atomic_init(&b->refs, 1);
    return &b->s;
}

static int kv_copy(const struct ws_snap_kv *in, size_t n, struct ws_snap_kv **ret)
{
    struct ws_snap_kv *kv = calloc(n ? n : 1, sizeof(*kv));

    if (!kv)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        kv[i].key = strdup(in[i].key ? in[i].key : "");
        kv[i].value = strdup(in[i].value ? in[i].value : "");
        if (!kv[i].key || !kv[i].value) {
            kv_free(kv, i + 1);
            return -ENOMEM;
        }
    }
    *ret = kv;
    return 0;
}

/* ---- names, hashes, escapes ---- */

static int id_new(char ret[WS_SNAP_ID_LEN + 1])
{
    static const char b32[] = "abcdefghijklmnopqrstuvwxyz234567";
    uint8_t raw[17];
    size_t bit = 0;

    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return -EIO;
    memcpy(ret, WS_SNAP_ID_PREFIX, 5);
    for (int i = 0; i < 26; i++, bit += 5) {
        unsigned v = ((unsigned)raw[bit / 8] << 8 | raw[bit / 8 + 1]) >> (11 - bit % 8);
        ret[5 + i] = b32[v & 31];
    }
    ret[WS_SNAP_ID_LEN] = '\0';
    return 0;
}

static bool id_valid(const char *id)
{
    return id && strlen(id) == WS_SNAP_ID_LEN && strncmp(id, WS_SNAP_ID_PREFIX, 5) == 0 &&
           strspn(id + 5, "abcdefghijklmnopqrstuvwxyz234567") == 26;
}

static void hex_of(const uint8_t *h, char out[HEX_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";

    for (int i = 0; i < HASH_LEN; i++) {
        out[2 * i] = digits[h[i] >> 4];
        out[2 * i + 1] = digits[h[i] & 15];
    }
    out[HEX_LEN] = '\0';
}

static int nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static bool hash_of_hex(const char *hex, uint8_t out[HASH_LEN])
{
    if (strlen(hex) != HEX_LEN)
        return false;
    for (int i = 0; i < HASH_LEN; i++) {
        int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

/* "ab/cdef..." of a hash. */
static void object_name(const char *hex, char out[HEX_LEN + 2])
{
    out[0] = hex[0];
    out[1] = hex[1];
    out[2] = '/';
    memcpy(out + 3, hex + 2, HEX_LEN - 2);
    out[HEX_LEN + 1] = '\0';
}

/* Paths and link targets in a manifest: every byte outside '!'..'~', and
 * '%', as %xx, so a line splits on blanks. */
static void esc_put(FILE *f, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c >= 0x7f || c == '%')
            fprintf(f, "%%%02x", c);
        else
            putc(c, f);
    }
}

/* Unescapes in place; -1 for a bad escape or a NUL. */
static int unesc(char *s)
{
    char *o = s;

    for (char *p = s; *p; p++) {
        if (*p != '%') {
            *o++ = *p;
            continue;
        }
        int hi = nibble(p[1]), lo = hi >= 0 ? nibble(p[2]) : -1;
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
            return -1;
        *o++ = (char)(hi << 4 | lo);
        p += 2;
    }
    *o = '\0';
    return 0;
}

/* ---- meta files ---- */

static json_t *kv_json(const struct ws_snap_kv *kv, size_t n)
{
    json_t *o = json_object();

    for (size_t i = 0; o && i < n; i++)
        json_object_set_new(o, kv[i].key, json_string(kv[i].value));
    return o;
}

static int kv_from_json(json_t *o, struct ws_snap_kv **ret, size_t *ret_n)
{
    size_t n = json_is_object(o) ? json_object_size(o) : 0, i = 0;
    struct ws_snap_kv *kv = calloc(n ? n : 1, sizeof(*kv));
    const char *k;
    json_t *v;

    if (!kv)
        return -ENOMEM;
    if (n) {
        json_object_foreach(o, k, v)
        {
            if (i == n)
                break;
            kv[i].key = strdup(k);
            kv[i].value = strdup(json_is_string(v) ? json_string_value(v) : "");
            i++;
            if (!kv[i - 1].key || !kv[i - 1].value) {
                kv_free(kv, i);
                return -ENOMEM;
            }
        }
    }
    *ret = kv;
    *ret_n = i;
    return 0;
}

static int meta_write(struct ws_snapstore *st, const struct ws_snap *s)
{
    char tmp[WS_SNAP_ID_LEN + 8];
    json_t *o = json_pack(
        "{s:s,s:s,s:s,s:s,s:s,s:o,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "id", s->id, "name",
        s->name, "tenant", s->tenant, "workspace_id", s->workspace_id, "provider", s->provider,
        "labels", kv_json(s->labels, s->n_labels), "workspace_labels",
        kv_json(s->ws_labels, s->n_ws_labels), "created_ms", (json_int_t)s->created_ms, "files",
        (json_int_t)s->files, "dirs", (json_int_t)s->dirs, "symlinks", (json_int_t)s->symlinks,
        "bytes", (json_int_t)s->bytes, "new_bytes", (json_int_t)s->new_bytes, "duration_ms",
        (json_int_t)s->duration_ms, "read_bytes", (json_int_t)s->read_bytes);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    int err = -ENOMEM;

    json_decref(o);
    if (text) {
        snprintf(tmp, sizeof(tmp), "%s.tmp", s->id);
        err = ws_storage_write_file(st->meta_fd, s->id, tmp, (const uint8_t *)text, strlen(text));
    }
    free(text);
    return err;
}

static uint64_t json_u64(json_t *o, const char *key)
{
    json_int_t v = json_integer_value(json_object_get(o, key));
    return v > 0 ? (uint64_t)v : 0;
}

static char *json_strdup(json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return strdup(v ? v : "");
}

static int meta_read(struct ws_snapstore *st, const char *id, struct ws_snap **ret)
{
    uint8_t *data = NULL;
    size_t len = 0;
    json_t *o = NULL;
    struct ws_snap *s = NULL;
    int err;

    err = ws_storage_read_file(st->meta_fd, id, WS_SNAP_META_MAX, &data, &len);
    if (err < 0)
        return err;
    o = json_loadb((const char *)data, len, 0, NULL);
    free(data);
    err = -EINVAL;
    if (!json_is_object(o))
        goto out;
    const char *sid = json_string_value(json_object_get(o, "id"));
    if (!sid || strcmp(sid, id) != 0)
        goto out;
    err = -ENOMEM;
    s = snap_new();
    if (!s)
        goto out;
    snprintf(s->id, sizeof(s->id), "%s", id);
    s->name = json_strdup(o, "name");
    s->tenant = json_strdup(o, "tenant");
    s->workspace_id = json_strdup(o, "workspace_id");
    s->provider = json_strdup(o, "provider");
    if (!s->name || !s->tenant || !s->workspace_id || !s->provider)
        goto out;
    if (kv_from_json(json_object_get(o, "labels"), &s->labels, &s->n_labels) < 0 ||
        kv_from_json(json_object_get(o, "workspace_labels"), &s->ws_labels, &s->n_ws_labels) < 0)
        goto out;
    s->created_ms = (int64_t)json_u64(o, "created_ms");
    s->files = json_u64(o, "files");
    s->dirs = json_u64(o, "dirs");
    s->symlinks = json_u64(o, "symlinks");
    s->bytes = json_u64(o, "bytes");
    s->new_bytes = json_u64(o, "new_bytes");
    s->duration_ms = json_u64(o, "duration_ms");
    s->read_bytes = json_u64(o, "read_bytes");
    *ret = s;
    s = NULL;
    err = 0;
out:
    json_decref(o);
    if (s)
        snap_free(s);
    return err;
}

/* ---- the store ---- */

static int open_sub(int at, const char *name, int *ret)
{
    int fd;

    if (mkdirat(at, name, 0700) < 0 && errno != EEXIST)
        return -errno;
    fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    *ret = fd;
    return 0;
}

/* Calls fn for each name in dir_fd (not "." or ".."). */
static int each_name(int dir_fd, void (*fn)(struct ws_snapstore *st, const char *name),
                     struct ws_snapstore *st)
{
    int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir;
    struct dirent *de;

    if (fd < 0)
        return -errno;
    dir = fdopendir(fd);
    if (!dir) {
        close(fd);
        return -errno;
    }
    while ((de = readdir(dir)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            fn(st, de->d_name);
    closedir(dir);
    return 0;
}

static void drop_tmp(struct ws_snapstore *st, const char *name)
{
    unlinkat(st->tmp_fd, name, 0);
}

static void load_meta(struct ws_snapstore *st, const char *name)
{
    struct ws_snap *s;
    struct entry *e;
    struct stat sb;

    if (!id_valid(name)) {
        /* A meta being written when the server stopped. */
        if (strstr(name, ".tmp"))
            unlinkat(st->meta_fd, name, 0);
        return;
    }
    if (fstatat(st->manifests_fd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
        meta_read(st, name, &s) < 0)
        return;
    e = calloc(1, sizeof(*e));
    if (!e) {
        ws_snap_unref(s);
        return;
    }
    e->snap = s;
    e->committed = true;
    e->next = st->entries;
    st->entries = e;
}

static void drop_orphan_objects(struct ws_snapstore *st);

static void drop_orphan_manifest(struct ws_snapstore *st, const char *name)
{
    struct stat sb;

    /* A manifest without its meta: a snapshot that never committed. */
    if (!id_valid(name) || fstatat(st->meta_fd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
        unlinkat(st->manifests_fd, name, 0);
}

int ws_snapstore_open(int state_fd, unsigned max_per_tenant, struct ws_snapstore **ret)
{
    struct ws_snapstore *st = calloc(1, sizeof(*st));
    int err;

    if (!st)
        return -ENOMEM;
    st->dir_fd = st->objects_fd = st->manifests_fd = st->meta_fd = st->tmp_fd = -1;
    st->max = max_per_tenant ? max_per_tenant : WS_SNAP_DEFAULT_MAX;
    pthread_mutex_init(&st->lock, NULL);
    pthread_rwlock_init(&st->gc, NULL);
    err = open_sub(state_fd, STORE_DIR, &st->dir_fd);
    if (err == 0)
        err = open_sub(st->dir_fd, OBJECTS_DIR, &st->objects_fd);
    if (err == 0)
        err = open_sub(st->dir_fd, MANIFESTS_DIR, &st->manifests_fd);
    if (err == 0)
        err = open_sub(st->dir_fd, META_DIR, &st->meta_fd);
    if (err == 0)
        err = open_sub(st->dir_fd, TMP_DIR, &st->tmp_fd);
    if (err == 0)
        err = ws_snapcache_new(WS_SNAPCACHE_MAX_ENTRIES, &st->cache);
    if (err == 0)
        err = each_name(st->tmp_fd, drop_tmp, st);
    if (err == 0)
        err = each_name(st->meta_fd, load_meta, st);
    if (err == 0)
        err = each_name(st->manifests_fd, drop_orphan_manifest, st);
    if (err == 0)
        drop_orphan_objects(st);
    if (err < 0) {
        ws_snapstore_free(st);
        return err;
    }
    *ret = st;
    return 0;
}

void ws_snapstore_free(struct ws_snapstore *st)
{
    if (!st)
        return;
    while (st->entries) {
        struct entry *e = st->entries;
        st->entries = e->next;
        ws_snap_unref(e->snap);
        free(e);
    }
    int fds[] = {st->dir_fd, st->objects_fd, st->manifests_fd, st->meta_fd, st->tmp_fd};
    for (size_t i = 0; i < WS_ELEMENTSOF(fds); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    ws_snapcache_free(st->cache);
    pthread_rwlock_destroy(&st->gc);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

void ws_snapstore_forget(struct ws_snapstore *st, const char *workspace_id)
{
    if (st && st->cache)
        ws_snapcache_forget(st->cache, workspace_id);
}

int ws_snapstore_begin(struct ws_snapstore *st, const struct ws_snap_source *src, struct ws_diag *d,
                       struct ws_snap **ret)
{
    const char *name = src->name ? src->name : "";
    struct ws_snap *s = snap_new();
    struct entry *e = calloc(1, sizeof(*e));
    unsigned n = 0;
    int err = -ENOMEM;

    if (!s || !e)
        goto fail;
    s->name = strdup(name);
    s->tenant = strdup(src->tenant);
    s->workspace_id = strdup(src->workspace_id ? src->workspace_id : "");
    s->provider = strdup(src->provider ? src->provider : "");
    if (!s->name || !s->tenant || !s->workspace_id || !s->provider)
        goto fail;
    err = kv_copy(src->labels, src->n_labels, &s->labels);
    if (err < 0)
        goto fail;
    s->n_labels = src->n_labels;
    err = kv_copy(src->ws_labels, src->n_ws_labels, &s->ws_labels);
    if (err < 0)
        goto fail;
    s->n_ws_labels = src->n_ws_labels;
    err = id_new(s->id);
    if (err < 0)
        goto fail;
    s->created_ms = ws_wall_ms();

    pthread_mutex_lock(&st->lock);
    for (struct entry *x = st->entries; x; x = x->next) {
        if (strcmp(x->snap->tenant, src->tenant) != 0)
            continue;
        n++;
        if (name[0] && strcmp(x->snap->name, name) == 0) {
            pthread_mutex_unlock(&st->lock);
            ws_diag_set(d, x->committed ? "the tenant has a snapshot of that name"
                                        : "a snapshot of that name is being taken");
            ws_diag_meta(d, "name", "%s", name);
            ws_diag_meta(d, "snapshot_id", "%s", x->committed ? x->snap->id : "");
            err = -EEXIST;
            goto fail;
        }
    }
    if (n >= st->max) {
        pthread_mutex_unlock(&st->lock);
        ws_diag_set(d, "the tenant holds %u snapshots (limit %u)", n, st->max);
        ws_diag_meta(d, "quota", "snapshots");
        ws_diag_meta(d, "limit", "%u", st->max);
        err = -WS_EQUOTA;
        goto fail;
    }
    e->snap = s;
    ws_snap_ref(s);
    e->next = st->entries;
    st->entries = e;
    pthread_mutex_unlock(&st->lock);
    *ret = s;
    return 0;
fail:
    free(e);
    if (s)
        snap_free(s);
    return err;
}

/* Unlinks s's entry from the list; returns it (NULL: not there). */
static struct entry *unlist(struct ws_snapstore *st, struct ws_snap *s)
{
    struct entry *found = NULL;

    pthread_mutex_lock(&st->lock);
    for (struct entry **pp = &st->entries; *pp; pp = &(*pp)->next)
        if ((*pp)->snap == s) {
            found = *pp;
            *pp = found->next;
            break;
        }
    pthread_mutex_unlock(&st->lock);
    return found;
}

/* ---- hashing and storing content ---- */

struct hasher {
    EVP_MD_CTX *ctx;
};

static int hasher_start(struct hasher *h)
{
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h->ctx);
        h->ctx = NULL;
        return -ENOMEM;
    }
    return 0;
}

static void hasher_end(struct hasher *h, uint8_t out[HASH_LEN])
{
    unsigned len = HASH_LEN;

    EVP_DigestFinal_ex(h->ctx, out, &len);
    EVP_MD_CTX_free(h->ctx);
    h->ctx = NULL;
}

static void hasher_drop(struct hasher *h)
{
    EVP_MD_CTX_free(h->ctx);
    h->ctx = NULL;
}

/* A new temporary file in tmp/; its name in `name`. */
static int tmp_open(struct ws_snapstore *st, char name[40], int *ret_fd)
{
    uint8_t raw[8];
    int fd;

    for (int tries = 0; tries < 8; tries++) {
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
            return -EIO;
        snprintf(name, 40, "t%02x%02x%02x%02x%02x%02x%02x%02x", raw[0], raw[1], raw[2], raw[3],
                 raw[4], raw[5], raw[6], raw[7]);
        fd = openat(st->tmp_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            *ret_fd = fd;
            return 0;
        }
        if (errno != EEXIST)
            return -errno;
    }
    return -EEXIST;
}

/* Reads all of `file` (through the vfs) into the hash, and into out_fd
 * when it is >= 0. */
static int pump_file(struct ws_vfs *fs, struct ws_vfs_file *file, char *buf, struct hasher *h,
                     int out_fd, uint64_t *ret_size)
{
    uint64_t off = 0;

    for (;;) {
        ssize_t n = fs->ops->pread(file, buf, COPY_BUF, off);
        if (n < 0)
            return (int)n;
        if (n == 0)
            break;
        if (EVP_DigestUpdate(h->ctx, buf, (size_t)n) != 1)
            return -ENOMEM;
        if (out_fd >= 0) {
            int err = ws_write_all(out_fd, buf, (size_t)n);
            if (err < 0)
                return err;
        }
        off += (uint64_t)n;
    }
    *ret_size = off;
    return 0;
}

/* Hashes the content of host fd `fd` (pread from 0). */
static int hash_fd(int fd, char *buf, struct hasher *h, uint64_t *ret_size)
{
    uint64_t off = 0;

    for (;;) {
        ssize_t n = ws_pread_all(fd, buf, COPY_BUF, (off_t)off);
        if (n < 0)
            return (int)n;
        if (n == 0)
            break;
        if (EVP_DigestUpdate(h->ctx, buf, (size_t)n) != 1)
            return -ENOMEM;
        off += (uint64_t)n;
    }
    *ret_size = off;
    return 0;
}

/* Puts tmp/<tmp> in the store as object `hex`; *ret_new whether it was
 * not there yet. The temporary is gone afterwards either way. */
static int object_publish(struct ws_snapstore *st, const char *tmp, const char *hex, bool *ret_new)
{
    char obj[HEX_LEN + 2];
    char sub[3] = {hex[0], hex[1], '\0'};

    object_name(hex, obj);
    if (mkdirat(st->objects_fd, sub, 0700) < 0 && errno != EEXIST) {
        int err = -errno;
        unlinkat(st->tmp_fd, tmp, 0);
        return err;
    }
    if (renameat2(st->tmp_fd, tmp, st->objects_fd, obj, RENAME_NOREPLACE) == 0) {
        *ret_new = true;
        return 0;
    }
    int err = errno == EEXIST ? 0 : -errno;
    unlinkat(st->tmp_fd, tmp, 0);
    *ret_new = false;
    return err;
}

static bool object_exists(struct ws_snapstore *st, const char *hex)
{
    char obj[HEX_LEN + 2];
    struct stat sb;

    object_name(hex, obj);
    return fstatat(st->objects_fd, obj, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode);
}

/* Stores the content of an open workspace file; its hash in `hex`, its
 * length, and whether the store did not have it. A reflink of the
 * storage's host file is hashed where it lies (a stable copy); else the
 * file is hashed first, and copied only when the store lacks it (hashed
 * again as it is copied: what is stored is what its name says). */
static int object_store(struct ws_snapstore *st, struct ws_vfs *fs, struct ws_vfs_file *file,
                        char *buf, char hex[HEX_LEN + 1], uint64_t *ret_size, bool *ret_new)
{
    struct hasher h = {0};
    uint8_t sum[HASH_LEN];
    char tmp[40];
    int fd = -1, src_fd = -1, err;
    uint64_t size = 0;

    if (fs->ops->file_fd)
        src_fd = fs->ops->file_fd(file);
    if (src_fd >= 0) {
        err = tmp_open(st, tmp, &fd);
        if (err < 0)
            return err;
        if (ioctl(fd, FICLONE, src_fd) == 0) {
            err = hasher_start(&h);
            if (err == 0)
                err = hash_fd(fd, buf, &h, &size);
            close(fd);
            if (err < 0) {
                hasher_drop(&h);
                unlinkat(st->tmp_fd, tmp, 0);
                return err;
            }
            hasher_end(&h, sum);
            hex_of(sum, hex);
            *ret_size = size;
            return object_publish(st, tmp, hex, ret_new);
        }
        close(fd);
        unlinkat(st->tmp_fd, tmp, 0);
    }
    err = hasher_start(&h);
    if (err == 0)
        err = pump_file(fs, file, buf, &h, -1, &size);
    if (err < 0) {
        hasher_drop(&h);
        return err;
    }
    hasher_end(&h, sum);
    hex_of(sum, hex);
    if (object_exists(st, hex)) {
        *ret_size = size;
        *ret_new = false;
        return 0;
    }
    err = tmp_open(st, tmp, &fd);
    if (err < 0)
        return err;
    err = hasher_start(&h);
    if (err == 0)
        err = pump_file(fs, file, buf, &h, fd, &size);
    /* The write-back starts now; the syncfs before the manifest waits. */
    if (err == 0)
        (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    close(fd);
    if (err < 0) {
        hasher_drop(&h);
        unlinkat(st->tmp_fd, tmp, 0);
        return err;
    }
    /* Changed between the two reads (a command writing): the copy is what
     * counts, under its own hash. */
    hasher_end(&h, sum);
    hex_of(sum, hex);
    *ret_size = size;
    return object_publish(st, tmp, hex, ret_new);
}

/* ---- walking a tree ---- */

struct walker;

/* Called for each entry with its workspace-relative path; `dir` is its
 * parent's handle, `name` its name there. Returning < 0 stops the walk. */
struct walk_ops {
    int (*file)(struct walker *w, struct ws_vfs_dir *dir, const char *name, const char *path,
                const struct ws_stat *st);
    int (*symlink)(struct walker *w, const char *path, const struct ws_stat *st);
    /* A directory before its entries ("." first) and after them. */
    int (*enter)(struct walker *w, const char *path, const struct ws_stat *st);
    int (*leave)(struct walker *w, const char *path, const struct ws_stat *st);
};

struct walker {
    struct ws_vfs *fs;
    const struct walk_ops *ops;
    void *ud;
    uint64_t entries;
};

static bool gone(int err)
{
    return err == -ENOENT || err == -ESTALE;
}

/* Depth-first, one open directory per level; paths are built in one
 * buffer. */
static int walk(struct walker *w)
{
    struct level {
        struct ws_vfs_dir *dir;
        size_t len; /* of the path of this directory */
        struct ws_stat st;
    } *stack = calloc(WS_SNAP_DEPTH_MAX + 1, sizeof(*stack));
    char *path = malloc(WS_VFS_PATH_MAX + 1);
    struct ws_vfs *fs = w->fs;
    unsigned depth = 0;
    int err;

    if (!stack || !path) {
        err = -ENOMEM;
        goto out;
    }
    err = fs->ops->stat(fs, ".", &stack[0].st);
    if (err < 0)
        goto out;
    err = fs->ops->opendir(fs, ".", &stack[0].dir);
    if (err < 0)
        goto out;
    depth = 1;
    memcpy(path, ".", 2);
    stack[0].len = 0;
    err = w->ops->enter ? w->ops->enter(w, ".", &stack[0].st) : 0;
    if (err < 0)
        goto out;
    while (depth > 0) {
        struct level *lv = &stack[depth - 1];
        struct ws_dirent ent;
        struct ws_stat st;

        err = fs->ops->readdir(lv->dir, &ent);
        if (err < 0)
            goto out;
        if (err == 0) {
            fs->ops->closedir(lv->dir);
            lv->dir = NULL;
            depth--;
            path[lv->len] = '\0';
            err = w->ops->leave ? w->ops->leave(w, lv->len ? path : ".", &lv->st) : 0;
            if (err < 0)
                goto out;
            continue;
        }
        /* The server's own work in progress (a write's temporary, an
         * upload's staging) is not the tree's content. */
        if (ws_vfs_transient_name(ent.name, ent.name_len, NULL))
            continue;
        if (++w->entries > WS_SNAP_ENTRIES_MAX) {
            err = -WS_ELIMIT;
            goto out;
        }
        size_t len = lv->len + (lv->len ? 1 : 0) + ent.name_len;
        if (len > WS_VFS_PATH_MAX) {
            err = -ENAMETOOLONG;
            goto out;
        }
        if (lv->len)
            path[lv->len] = '/';
        memcpy(path + lv->len + (lv->len ? 1 : 0), ent.name, ent.name_len);
        path[len] = '\0';
        /* The name is valid only until the next readdir: copy it. */
        char name[WS_VFS_NAME_MAX + 1];
        snprintf(name, sizeof(name), "%.*s", (int)ent.name_len, ent.name);
        err = fs->ops->stat_at(lv->dir, name, &st);
        if (gone(err))
            continue;
        if (err < 0)
            goto out;
        switch (st.type) {
        case WS_FT_REGULAR:
            err = w->ops->file(w, lv->dir, name, path, &st);
            break;
        case WS_FT_SYMLINK:
            err = w->ops->symlink(w, path, &st);
            break;
        case WS_FT_DIRECTORY:
            if (depth > WS_SNAP_DEPTH_MAX) {
                err = -WS_ELIMIT;
                goto out;
            }
            err = fs->ops->opendir_at(lv->dir, name, &stack[depth].dir);
            if (gone(err) || err == -ENOTDIR) {
                err = 0;
                break;
            }
            if (err < 0)
                goto out;
            stack[depth].len = len;
            stack[depth].st = st;
            depth++;
            err = w->ops->enter ? w->ops->enter(w, path, &st) : 0;
            break;
        default:
            err = 0; /* special files are left out */
        }
        if (gone(err))
            err = 0;
        if (err < 0)
            goto out;
    }
    err = 0;
out:
    while (depth > 0)
        fs->ops->closedir(stack[--depth].dir);
    free(stack);
    free(path);
    return err;
}

/* ---- fill: a tree into the store ---- */

struct fill {
    struct ws_snapstore *st;
    struct ws_snap *s;
    FILE *man;
    char *buf;
    bool any_new;
    /* What the workspace's previous snapshot learnt, and what this one
     * learns (NULL when it cannot be kept). */
    struct ws_snapset *prev, *next;
};

static int fill_file(struct walker *w, struct ws_vfs_dir *dir, const char *name, const char *path,
                     const struct ws_stat *lst)
{
    struct fill *f = w->ud;
    struct ws_vfs_file *file = NULL;
    struct ws_stat st;
    uint8_t sum[HASH_LEN];
    char hex[HEX_LEN + 1];
    uint64_t size = 0;
    bool fresh = false;
    int err;

    /* Unchanged since the last snapshot, and still in the store: nothing
     * to read. */
    if (ws_snapset_lookup(f->prev, path, lst, sum)) {
        hex_of(sum, hex);
        if (object_exists(f->st, hex)) {
            st = *lst;
            size = lst->size;
            goto record;
        }
    }
    err = w->fs->ops->open_read_at(dir, name, &file, &st);
    if (err == -WS_ESPECIAL || err == -WS_ESYMLINK_LEAF || err == -EISDIR)
        return 0; /* changed type under us: a command's business */
    if (err < 0)
        return err;
    err = object_store(f->st, w->fs, file, f->buf, hex, &size, &fresh);
    w->fs->ops->close(file);
    if (err < 0)
        return err;
    f->s->read_bytes += size;
record:
    /* Only what the file held when it was opened is vouched for: the
     * stat is from before the read, so a change during it shows. */
    if (f->next && size == st.size && hash_of_hex(hex, sum) &&
        ws_snapset_add(f->next, path, &st, sum) < 0) {
        ws_snapset_free(f->next);
        f->next = NULL;
    }
    fprintf(f->man, "F %o %lld %llu %s ", st.mode & 07777, (long long)st.mtime_ns,
            (unsigned long long)size, hex);
    esc_put(f->man, path, strlen(path));
    putc('\n', f->man);
    f->s->files++;
    f->s->bytes += size;
    if (fresh) {
        f->s->new_bytes += size;
        f->any_new = true;
    }
    return 0;
}

static int fill_symlink(struct walker *w, const char *path, const struct ws_stat *st)
{
    struct fill *f = w->ud;
    char target[WS_VFS_PATH_MAX + 1];
    ssize_t n;

    if (!w->fs->ops->readlink)
        return -EOPNOTSUPP;
    n = w->fs->ops->readlink(w->fs, path, target, sizeof(target) - 1);
    if (n == -EINVAL)
        return 0; /* no longer a symlink */
    if (n < 0)
        return (int)n;
    fprintf(f->man, "L %lld ", (long long)st->mtime_ns);
    esc_put(f->man, path, strlen(path));
    putc(' ', f->man);
    esc_put(f->man, target, (size_t)n);
    putc('\n', f->man);
    f->s->symlinks++;
    return 0;
}

static int fill_enter(struct walker *w, const char *path, const struct ws_stat *st)
{
    struct fill *f = w->ud;

    fprintf(f->man, "D %o %lld ", st->mode & 07777, (long long)st->mtime_ns);
    esc_put(f->man, path, strlen(path));
    putc('\n', f->man);
    if (strcmp(path, ".") != 0)
        f->s->dirs++;
    return 0;
}

/* Writes f's FILE to its temporary, fsyncs and renames it into dir_fd as
 * `name`; the FILE is closed either way. */
static int file_commit(struct ws_snapstore *st, FILE *fp, const char *tmp, int dir_fd,
                       const char *name)
{
    int err = 0;

    /* fflush's errno says why (ENOSPC on a full disk: NO_SPACE, not an
     * internal error); a write that failed before it left only the flag. */
    if (fflush(fp) != 0)
        err = errno > 0 ? -errno : -EIO;
    else if (ferror(fp))
        err = -EIO;
    if (err == 0 && fsync(fileno(fp)) < 0)
        err = -errno;
    fclose(fp);
    if (err == 0 && renameat(st->tmp_fd, tmp, dir_fd, name) < 0)
        err = -errno;
    if (err < 0)
        unlinkat(st->tmp_fd, tmp, 0);
    else
        fsync(dir_fd);
    return err;
}

int ws_snapstore_fill(struct ws_snapstore *st, struct ws_snap *s, struct ws_vfs *fs,
                      struct ws_diag *d)
{
    static const struct walk_ops ops = {
        .file = fill_file, .symlink = fill_symlink, .enter = fill_enter};
    struct fill f = {.st = st, .s = s};
    struct walker w = {.fs = fs, .ops = &ops, .ud = &f};
    int64_t t0 = ws_mono_ms();
    char tmp[40];
    int fd = -1, err;

    f.buf = malloc(COPY_BUF);
    if (!f.buf)
        return -ENOMEM;
    if (st->cache && s->workspace_id) {
        f.prev = ws_snapcache_take(st->cache, s->workspace_id);
        f.next = ws_snapset_new(ws_wall_ns());
    }
    pthread_rwlock_rdlock(&st->gc);
    err = tmp_open(st, tmp, &fd);
    if (err < 0)
        goto out;
    f.man = fdopen(fd, "w");
    if (!f.man) {
        err = -errno;
        close(fd);
        unlinkat(st->tmp_fd, tmp, 0);
        goto out;
    }
    fprintf(f.man, "%s\n", MANIFEST_HEAD);
    err = walk(&w);
    if (err == -WS_ELIMIT)
        ws_diag_set(d, "the tree has more than %d entries or %d levels", WS_SNAP_ENTRIES_MAX,
                    WS_SNAP_DEPTH_MAX);
    /* The objects reach the disk before the manifest that names them. */
    if (err == 0 && f.any_new && syncfs(st->objects_fd) < 0)
        err = -errno;
    if (err < 0) {
        fclose(f.man);
        unlinkat(st->tmp_fd, tmp, 0);
        goto out;
    }
    err = file_commit(st, f.man, tmp, st->manifests_fd, s->id);
out:
    pthread_rwlock_unlock(&st->gc);
    s->duration_ms = (uint64_t)(ws_mono_ms() - t0);
    free(f.buf);
    ws_snapset_free(f.prev);
    if (err == 0 && f.next)
        ws_snapcache_put(st->cache, s->workspace_id, f.next);
    else
        ws_snapset_free(f.next);
    return err;
}

int ws_snapstore_commit(struct ws_snapstore *st, struct ws_snap *s)
{
    int err = meta_write(st, s);

    if (err < 0)
        return err;
    pthread_mutex_lock(&st->lock);
    for (struct entry *e = st->entries; e; e = e->next)
        if (e->snap == s)
            e->committed = true;
    pthread_mutex_unlock(&st->lock);
    return 0;
}

/* ---- delete and the sweep ---- */

struct hashes {
    uint8_t (*v)[HASH_LEN];
    bool *held;
    size_t n, cap;
};

static int cmp_hash(const void *a, const void *b)
{
    return memcmp(a, b, HASH_LEN);
}

/* Splits a manifest line into at most max blank-separated fields. */
static size_t fields(char *line, char **out, size_t max)
{
    size_t n = 0;
    char *save = NULL;

    for (char *t = strtok_r(line, " \n", &save); t && n < max; t = strtok_r(NULL, " \n", &save))
        out[n++] = t;
    return n;
}

/* Calls fn for the hash of each file of manifest `id`. */
static int manifest_hashes(struct ws_snapstore *st, const char *id,
                           int (*fn)(void *ud, const uint8_t *h), void *ud)
{
    int fd = openat(st->manifests_fd, id, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    char *line = NULL;
    size_t cap = 0;
    int err = 0;
    FILE *fp;

    if (fd < 0)
        return -errno;
    fp = fdopen(fd, "r");
    if (!fp) {
        close(fd);
        return -ENOMEM;
    }
    while (err == 0 && getline(&line, &cap, fp) > 0) {
        char *f[6];
        uint8_t h[HASH_LEN];
        if (line[0] != 'F' || fields(line, f, 6) != 6 || !hash_of_hex(f[4], h))
            continue;
        err = fn(ud, h);
    }
    free(line);
    fclose(fp);
    return err;
}

static int collect(void *ud, const uint8_t *h)
{
    struct hashes *hs = ud;

    if (hs->n == hs->cap) {
        size_t ncap = hs->cap ? hs->cap * 2 : 1024;
        void *v = reallocarray(hs->v, ncap, HASH_LEN);
        if (!v)
            return -ENOMEM;
        hs->v = v;
        hs->cap = ncap;
    }
    memcpy(hs->v[hs->n++], h, HASH_LEN);
    return 0;
}

static int mark(void *ud, const uint8_t *h)
{
    struct hashes *hs = ud;
    uint8_t(*hit)[HASH_LEN] = bsearch(h, hs->v, hs->n, HASH_LEN, cmp_hash);

    if (hit)
        hs->held[hit - hs->v] = true;
    return 0;
}

/* At open, before anything else runs: removes the objects no committed
 * snapshot holds. A crash between an object's publish and its snapshot's
 * commit leaves such objects; nothing else would ever free them. Best
 * effort: when a manifest cannot be read, everything is kept. */
static void drop_orphan_objects(struct ws_snapstore *st)
{
    struct hashes hs = {0};
    DIR *top = NULL;
    int err = 0;

    for (struct entry *e = st->entries; e && err == 0; e = e->next) {
        err = manifest_hashes(st, e->snap->id, collect, &hs);
        if (err == -ENOENT)
            err = 0; /* listed without content: holds nothing */
    }
    if (err < 0)
        goto out; /* cannot tell what is held */
    if (hs.n)
        qsort(hs.v, hs.n, HASH_LEN, cmp_hash);
    int fd = openat(st->objects_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || !(top = fdopendir(fd))) {
        if (fd >= 0)
            close(fd);
        goto out;
    }
    for (struct dirent *de; (de = readdir(top));) {
        if (strlen(de->d_name) != 2 || nibble(de->d_name[0]) < 0 || nibble(de->d_name[1]) < 0)
            continue;
        int sfd =
            openat(st->objects_fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *sub = sfd >= 0 ? fdopendir(sfd) : NULL;
        if (!sub) {
            if (sfd >= 0)
                close(sfd);
            continue;
        }
        for (struct dirent *o; (o = readdir(sub));) {
            char hex[HEX_LEN + 1];
            uint8_t h[HASH_LEN];
            if (snprintf(hex, sizeof(hex), "%s%s", de->d_name, o->d_name) != HEX_LEN ||
                !hash_of_hex(hex, h))
                continue; /* not an object's name: not ours to judge */
            if (!hs.n || !bsearch(h, hs.v, hs.n, HASH_LEN, cmp_hash))
                unlinkat(dirfd(sub), o->d_name, 0);
        }
        closedir(sub);
    }
out:
    if (top)
        closedir(top);
    free(hs.v);
}

/* Removes the objects of manifest `id` that no other listed snapshot
 * holds, then the manifest. gc held exclusively; `id` already unlisted. */
static int sweep(struct ws_snapstore *st, const char *id, uint64_t *ret_reclaimed)
{
    struct hashes hs = {0};
    char **others = NULL;
    size_t n_others = 0, u = 0;
    uint64_t reclaimed = 0;
    int err;

    err = manifest_hashes(st, id, collect, &hs);
    if (err == -ENOENT)
        err = 0;
    if (err < 0)
        goto out;
    if (hs.n) {
        qsort(hs.v, hs.n, HASH_LEN, cmp_hash);
        for (size_t i = 0; i < hs.n; i++)
            if (u == 0 || memcmp(hs.v[u - 1], hs.v[i], HASH_LEN) != 0)
                memmove(hs.v[u++], hs.v[i], HASH_LEN);
        hs.n = u;
    }
    hs.held = calloc(hs.n ? hs.n : 1, sizeof(*hs.held));
    err = -ENOMEM;
    if (!hs.held)
        goto out;
    /* The ids of every other snapshot, committed or being taken (a fill
     * that finished holds its objects through its manifest). */
    pthread_mutex_lock(&st->lock);
    for (struct entry *e = st->entries; e; e = e->next)
        n_others++;
    others = calloc(n_others ? n_others : 1, sizeof(*others));
    if (others) {
        size_t i = 0;
        for (struct entry *e = st->entries; e; e = e->next)
            others[i++] = strdup(e->snap->id);
    }
    pthread_mutex_unlock(&st->lock);
    if (!others)
        goto out;
    for (size_t i = 0; i < n_others; i++) {
        if (!others[i])
            goto out; /* cannot tell what is held: keep everything */
        err = hs.n ? manifest_hashes(st, others[i], mark, &hs) : 0;
        if (err == -ENOENT)
            err = 0;
        if (err < 0)
            goto out;
    }
    for (size_t i = 0; i < hs.n; i++) {
        char hex[HEX_LEN + 1], obj[HEX_LEN + 2];
        struct stat sb;
        if (hs.held[i])
            continue;
        hex_of(hs.v[i], hex);
        object_name(hex, obj);
        if (fstatat(st->objects_fd, obj, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
            unlinkat(st->objects_fd, obj, 0) == 0)
            reclaimed += (uint64_t)sb.st_size;
    }
    unlinkat(st->manifests_fd, id, 0);
    err = 0;
out:
    for (size_t i = 0; i < n_others; i++)
        free(others[i]);
    free(others);
    free(hs.v);
    free(hs.held);
    if (err == 0 && ret_reclaimed)
        *ret_reclaimed = reclaimed;
    return err;
}

void ws_snapstore_abort(struct ws_snapstore *st, struct ws_snap *s)
{
    struct entry *e = unlist(st, s);

    unlinkat(st->meta_fd, s->id, 0);
    pthread_rwlock_wrlock(&st->gc);
    sweep(st, s->id, NULL);
    pthread_rwlock_unlock(&st->gc);
    if (e) {
        ws_snap_unref(e->snap);
        free(e);
    }
}

int ws_snapstore_delete(struct ws_snapstore *st, const char *tenant, const char *id,
                        uint64_t *ret_reclaimed)
{
    struct entry *found = NULL;
    int err;

    if (!id_valid(id))
        return -WS_ENOSNAPSHOT;
    pthread_mutex_lock(&st->lock);
    for (struct entry **pp = &st->entries; *pp; pp = &(*pp)->next) {
        struct entry *e = *pp;
        if (e->committed && strcmp(e->snap->id, id) == 0 && strcmp(e->snap->tenant, tenant) == 0) {
            found = e;
            *pp = e->next;
            break;
        }
    }
    pthread_mutex_unlock(&st->lock);
    if (!found)
        return -WS_ENOSNAPSHOT;
    /* Gone from here on (the meta is the commit point); the sweep is
     * the store's own business. */
    if (unlinkat(st->meta_fd, id, 0) < 0 && errno != ENOENT) {
        err = -errno;
        pthread_mutex_lock(&st->lock);
        found->next = st->entries;
        st->entries = found;
        pthread_mutex_unlock(&st->lock);
        return err;
    }
    fsync(st->meta_fd);
    pthread_rwlock_wrlock(&st->gc);
    err = sweep(st, id, ret_reclaimed);
    pthread_rwlock_unlock(&st->gc);
    if (err < 0 && ret_reclaimed)
        *ret_reclaimed = 0;
    ws_snap_unref(found->snap);
    free(found);
    return 0;
}

int ws_snapstore_get(struct ws_snapstore *st, const char *tenant, const char *id,
                     struct ws_snap **ret)
{
    int err = -WS_ENOSNAPSHOT;

    if (!id_valid(id))
        return err;
    pthread_mutex_lock(&st->lock);
    for (struct entry *e = st->entries; e; e = e->next)
        if (e->committed && strcmp(e->snap->id, id) == 0 && strcmp(e->snap->tenant, tenant) == 0) {
            ws_snap_ref(e->snap);
            *ret = e->snap;
            err = 0;
            break;
        }
    pthread_mutex_unlock(&st->lock);
    return err;
}

static int by_id(const void *a, const void *b)
{
    return strcmp((*(struct ws_snap *const *)a)->id, (*(struct ws_snap *const *)b)->id);
}

int ws_snapstore_list(struct ws_snapstore *st, const char *tenant, struct ws_snap ***ret,
                      size_t *ret_n)
{
    struct ws_snap **v = NULL;
    size_t n = 0, cap = 0;

    pthread_mutex_lock(&st->lock);
    for (struct entry *e = st->entries; e; e = e->next) {
        if (!e->committed || strcmp(e->snap->tenant, tenant) != 0)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct ws_snap **nv = reallocarray(v, ncap, sizeof(*v));
            if (!nv) {
                pthread_mutex_unlock(&st->lock);
                ws_snapstore_list_free(v, n);
                return -ENOMEM;
            }
            v = nv;
            cap = ncap;
        }
        ws_snap_ref(e->snap);
        v[n++] = e->snap;
    }
    pthread_mutex_unlock(&st->lock);
    if (n > 1)
        qsort(v, n, sizeof(*v), by_id);
    *ret = v;
    *ret_n = n;
    return 0;
}

void ws_snapstore_list_free(struct ws_snap **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ws_snap_unref(v[i]);
    free(v);
}

uint64_t ws_snapstore_tenant_bytes(struct ws_snapstore *st, const char *tenant)
{
    uint64_t sum = 0;

    pthread_mutex_lock(&st->lock);
    for (struct entry *e = st->entries; e; e = e->next)
        if (e->committed && strcmp(e->snap->tenant, tenant) == 0)
            sum += e->snap->bytes;
    pthread_mutex_unlock(&st->lock);
    return sum;
}

/* ---- copies into a workspace ---- */

struct out {
    struct ws_vfs *dst;
    const struct ws_copy_caps *caps;
    struct ws_diag *d;
    struct ws_copy_stats stats;
    char *buf;
    /* Where the tree goes: "" (the root) or a hidden directory. */
    char prefix[64];
    char path[WS_VFS_PATH_MAX + 1];
};

/* The destination path of `path` (a tree path, "." the root). */
static int out_path(struct out *o, const char *path)
{
    int n;

    if (!o->prefix[0])
        n = snprintf(o->path, sizeof(o->path), "%s", path);
    else if (strcmp(path, ".") == 0)
        n = snprintf(o->path, sizeof(o->path), "%s", o->prefix);
    else
        n = snprintf(o->path, sizeof(o->path), "%s/%s", o->prefix, path);
    return n < 0 || (size_t)n >= sizeof(o->path) ? -ENAMETOOLONG : 0;
}

/* A file of `size` bytes may come in: the caps. */
static int out_admit(struct out *o, const char *path, uint64_t size)
{
    if (o->caps->max_file_size && size > o->caps->max_file_size) {
        ws_diag_set(o->d, "a file is larger than the workspace's max_file_size_bytes");
        ws_diag_meta(o->d, "path", "%.120s", path);
        ws_diag_meta(o->d, "limit", "%llu", (unsigned long long)o->caps->max_file_size);
        return -EFBIG;
    }
    if (o->caps->admit)
        return o->caps->admit(o->caps->admit_ud, o->stats.bytes + size, o->d);
    return 0;
}

static int out_mode_time(struct out *o, uint32_t mode, int64_t mtime_ns, bool set_mode)
{
    struct ws_vfs *dst = o->dst;
    int err = 0;

    if (set_mode && dst->ops->set_mode) {
        err = dst->ops->set_mode(dst, o->path, mode & 07777);
        if (err == -EOPNOTSUPP)
            err = 0;
    }
    if (err == 0 && dst->ops->set_mtime) {
        err = dst->ops->set_mtime(dst, o->path, mtime_ns);
        if (err == -EOPNOTSUPP)
            err = 0;
    }
    return err;
}

/* Writes a regular file at o->path from host fd `fd` or, when fd < 0,
 * from an open vfs file of `src`. A reflink where both sides have host
 * fds and the file system makes one. */
static int out_file(struct out *o, int fd, struct ws_vfs *src, struct ws_vfs_file *file,
                    uint32_t mode, int64_t mtime_ns, uint64_t size)
{
    struct ws_vfs *dst = o->dst;
    /* Flushed all at once at the end (out_sync). */
    struct ws_write_opts opts = {.mode = (mode & 0777) ? (mode & 0777) : 0600, .no_sync = true};
    struct ws_vfs_writer *w = NULL;
    bool cloned = false;
    uint64_t off = 0;
    int err;

    if (fd < 0 && src->ops->file_fd) {
        int sfd = src->ops->file_fd(file);
        if (sfd >= 0)
            fd = sfd;
    }
    err = dst->ops->write_begin(dst, o->path, &opts, &w);
    if (err < 0)
        return err;
    if (fd >= 0 && dst->ops->writer_fd) {
        int wfd = dst->ops->writer_fd(w);
        cloned = wfd >= 0 && ioctl(wfd, FICLONE, fd) == 0;
    }
    while (!cloned) {
        ssize_t n;
        if (fd >= 0) {
            n = ws_pread_all(fd, o->buf, COPY_BUF, (off_t)off);
        } else {
            n = src->ops->pread(file, o->buf, COPY_BUF, off);
        }
        if (n < 0) {
            err = (int)n;
            break;
        }
        if (n == 0)
            break;
        /* Grown past what was admitted (a source that changes). */
        if (off + (uint64_t)n > size && out_admit(o, o->path, off + (uint64_t)n) < 0) {
            err = -EFBIG;
            break;
        }
        err = dst->ops->write(w, o->buf, (size_t)n);
        if (err < 0)
            break;
        off += (uint64_t)n;
    }
    if (err < 0) {
        dst->ops->write_abort(w);
        return err;
    }
    err = dst->ops->write_commit(w, NULL);
    if (err < 0)
        return err;
    err = out_mode_time(o, mode, mtime_ns, true);
    if (err < 0)
        return err;
    o->stats.files++;
    o->stats.bytes += cloned ? size : (off > size ? off : size);
    return 0;
}

/* The files a copy wrote reach the disk before it reports success. */
static int out_sync(struct out *o)
{
    return o->dst->ops->sync ? o->dst->ops->sync(o->dst) : 0;
}

static int out_symlink(struct out *o, const char *target, int64_t mtime_ns)
{
    int err;

    if (!o->dst->ops->symlink)
        return -EOPNOTSUPP;
    err = o->dst->ops->symlink(o->dst, target, o->path);
    if (err == 0)
        err = out_mode_time(o, 0, mtime_ns, false);
    if (err == 0)
        o->stats.symlinks++;
    return err;
}

/* ---- fork and restore: a manifest into a tree ---- */

/* Reads manifest `s` line by line; pass 1 makes every entry, pass 2 gives
 * directories their modes and times (after their entries were made, so a
 * read-only directory is filled first). */
static int materialize(struct ws_snapstore *st, struct ws_snap *s, struct out *o, int pass)
{
    int fd = openat(st->manifests_fd, s->id, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    char *line = NULL;
    size_t cap = 0;
    bool head = false;
    int err = 0;
    FILE *fp;

    if (fd < 0)
        return errno == ENOENT ? -WS_ENOSNAPSHOT : -errno;
    fp = fdopen(fd, "r");
    if (!fp) {
        close(fd);
        return -ENOMEM;
    }
    while (err == 0 && getline(&line, &cap, fp) > 0) {
        char *f[6];
        size_t n;
        if (!head) {
            head = true;
            if (strncmp(line, MANIFEST_HEAD, strlen(MANIFEST_HEAD)) != 0)
                err = -EIO;
            continue;
        }
        n = fields(line, f, 6);
        if (n == 4 && f[0][0] == 'D') {
            uint32_t mode = (uint32_t)strtoul(f[1], NULL, 8);
            int64_t mtime = strtoll(f[2], NULL, 10);
            if (unesc(f[3]) < 0) {
                err = -EIO;
                break;
            }
            if (strcmp(f[3], ".") == 0)
                continue;
            err = out_path(o, f[3]);
            if (err == 0 && pass == 1) {
                err = o->dst->ops->mkdir(o->dst, o->path, false, 0700);
                if (err == 0)
                    o->stats.dirs++;
            } else if (err == 0) {
                err = out_mode_time(o, mode, mtime, true);
            }
        } else if (pass == 2) {
            continue;
        } else if (n == 6 && f[0][0] == 'F') {
            uint32_t mode = (uint32_t)strtoul(f[1], NULL, 8);
            int64_t mtime = strtoll(f[2], NULL, 10);
            uint64_t size = strtoull(f[3], NULL, 10);
            char obj[HEX_LEN + 2];
            if (strlen(f[4]) != HEX_LEN || unesc(f[5]) < 0) {
                err = -EIO;
                break;
            }
            err = out_path(o, f[5]);
            if (err == 0)
                err = out_admit(o, f[5], size);
            if (err < 0)
                break;
            object_name(f[4], obj);
            int ofd = openat(st->objects_fd, obj, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            if (ofd < 0) {
                err = -EIO; /* a stored object is missing */
                break;
            }
            err = out_file(o, ofd, NULL, NULL, mode, mtime, size);
            close(ofd);
        } else if (n == 4 && f[0][0] == 'L') {
            int64_t mtime = strtoll(f[1], NULL, 10);
            if (unesc(f[2]) < 0 || unesc(f[3]) < 0) {
                err = -EIO;
                break;
            }
            err = out_path(o, f[2]);
            if (err == 0)
                err = out_symlink(o, f[3], mtime);
        } else {
            err = -EIO;
        }
    }
    free(line);
    fclose(fp);
    return err;
}

static int out_init(struct out *o, struct ws_vfs *dst, const struct ws_copy_caps *caps,
                    struct ws_diag *d)
{
    static const struct ws_copy_caps none = {0};

    memset(o, 0, sizeof(*o));
    o->dst = dst;
    o->caps = caps ? caps : &none;
    o->d = d;
    o->buf = malloc(COPY_BUF);
    return o->buf ? 0 : -ENOMEM;
}

int ws_snapstore_materialize(struct ws_snapstore *st, struct ws_snap *s, struct ws_vfs *dst,
                             const struct ws_copy_caps *caps, struct ws_diag *d,
                             struct ws_copy_stats *ret)
{
    struct out *o = malloc(sizeof(*o));
    int err;

    if (!o)
        return -ENOMEM;
    err = out_init(o, dst, caps, d);
    if (err == 0) {
        pthread_rwlock_rdlock(&st->gc);
        err = materialize(st, s, o, 1);
        if (err == 0)
            err = materialize(st, s, o, 2);
        pthread_rwlock_unlock(&st->gc);
        if (err == 0)
            err = out_sync(o);
    }
    if (err == 0 && ret)
        *ret = o->stats;
    free(o->buf);
    free(o);
    return err;
}

/* The names at the root of dst, but for `skip1` and `skip2`. */
static int root_names(struct ws_vfs *dst, const char *skip1, const char *skip2, char ***ret,
                      size_t *ret_n)
{
    struct ws_vfs_dir *dir = NULL;
    struct ws_dirent ent;
    char **v = NULL;
    size_t n = 0, cap = 0;
    int err;

    err = dst->ops->opendir(dst, ".", &dir);
    if (err < 0)
        return err;
    while ((err = dst->ops->readdir(dir, &ent)) > 0) {
        char *name = strndup(ent.name, ent.name_len);
        if (!name) {
            err = -ENOMEM;
            break;
        }
        if (strcmp(name, skip1) == 0 || strcmp(name, skip2) == 0) {
            free(name);
            continue;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char **nv = reallocarray(v, ncap, sizeof(*v));
            if (!nv) {
                free(name);
                err = -ENOMEM;
                break;
            }
            v = nv;
            cap = ncap;
        }
        v[n++] = name;
    }
    dst->ops->closedir(dir);
    if (err < 0) {
        for (size_t i = 0; i < n; i++)
            free(v[i]);
        free(v);
        return err;
    }
    *ret = v;
    *ret_n = n;
    return 0;
}

static void names_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Moves each name from dir `from` ("" the root) to dir `to`; on a failure
 * moves back the ones moved. */
static int move_all(struct ws_vfs *dst, char **names, size_t n, const char *from, const char *to)
{
    char a[WS_VFS_PATH_MAX + 1], b[WS_VFS_PATH_MAX + 1];
    size_t i;
    int err = 0;

    for (i = 0; i < n; i++) {
        snprintf(a, sizeof(a), "%s%s%s", from, from[0] ? "/" : "", names[i]);
        snprintf(b, sizeof(b), "%s%s%s", to, to[0] ? "/" : "", names[i]);
        err = dst->ops->move(dst, a, b, false);
        if (err < 0)
            break;
    }
    if (err < 0)
        while (i-- > 0) {
            snprintf(a, sizeof(a), "%s%s%s", from, from[0] ? "/" : "", names[i]);
            snprintf(b, sizeof(b), "%s%s%s", to, to[0] ? "/" : "", names[i]);
            dst->ops->move(dst, b, a, false);
        }
    return err;
}

int ws_snapstore_restore(struct ws_snapstore *st, struct ws_snap *s, struct ws_vfs *dst,
                         const struct ws_copy_caps *caps, struct ws_diag *d,
                         struct ws_copy_stats *ret)
{
    struct out *o = malloc(sizeof(*o));
    char build[64], old[64], tag[17];
    char **olds = NULL, **news = NULL;
    size_t n_olds = 0, n_news = 0;
    uint8_t raw[8];
    int err;

    if (!o)
        return -ENOMEM;
    err = out_init(o, dst, caps, d);
    if (err < 0)
        goto out;
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        err = -EIO;
        goto out;
    }
    for (int i = 0; i < 8; i++)
        snprintf(tag + 2 * i, 3, "%02x", raw[i]);
    snprintf(build, sizeof(build), "%s%s", RESTORE_PREFIX, tag);
    snprintf(old, sizeof(old), "%s%s", RESTORE_OLD, tag);
    err = dst->ops->mkdir(dst, build, false, 0700);
    if (err < 0)
        goto out;
    snprintf(o->prefix, sizeof(o->prefix), "%s", build);
    pthread_rwlock_rdlock(&st->gc);
    err = materialize(st, s, o, 1);
    if (err == 0)
        err = materialize(st, s, o, 2);
    pthread_rwlock_unlock(&st->gc);
    /* On disk before the swap makes it the workspace's content. */
    if (err == 0)
        err = out_sync(o);
    if (err == 0)
        err = dst->ops->mkdir(dst, old, false, 0700);
    if (err == 0)
        err = root_names(dst, build, old, &olds, &n_olds);
    if (err < 0) {
        dst->ops->remove(dst, build, true, NULL);
        dst->ops->remove(dst, old, true, NULL);
        goto out;
    }
    /* The swap: the old entries aside, the new ones in. */
    err = move_all(dst, olds, n_olds, "", old);
    if (err == 0) {
        struct ws_vfs_dir *dir = NULL;
        struct ws_dirent ent;
        err = dst->ops->opendir(dst, build, &dir);
        while (err >= 0 && (err = dst->ops->readdir(dir, &ent)) > 0) {
            char **nv = reallocarray(news, n_news + 1, sizeof(*news));
            if (!nv) {
                err = -ENOMEM;
                break;
            }
            news = nv;
            news[n_news] = strndup(ent.name, ent.name_len);
            if (!news[n_news]) {
                err = -ENOMEM;
                break;
            }
            n_news++;
        }
        if (dir)
            dst->ops->closedir(dir);
        if (err == 0)
            err = move_all(dst, news, n_news, build, "");
        if (err < 0)
            move_all(dst, olds, n_olds, old, "");
    }
    dst->ops->remove(dst, build, true, NULL);
    dst->ops->remove(dst, old, true, NULL);
out:
    if (err == 0 && ret)
        *ret = o->stats;
    names_free(olds, n_olds);
    names_free(news, n_news);
    if (o)
        free(o->buf);
    free(o);
    return err;
}

/* ---- shadow: a host tree into a workspace ---- */

struct tree_copy {
    struct out *o;
    struct ws_vfs *src;
};

static int tc_file(struct walker *w, struct ws_vfs_dir *dir, const char *name, const char *path,
                   const struct ws_stat *lst)
{
    struct tree_copy *tc = w->ud;
    struct ws_vfs_file *file = NULL;
    struct ws_stat st;
    int err;

    (void)lst; /* the stat of the open file counts */
    err = w->fs->ops->open_read_at(dir, name, &file, &st);
    if (err == -WS_ESPECIAL || err == -WS_ESYMLINK_LEAF || err == -EISDIR)
        return 0;
    if (err < 0)
        return err;
    err = out_path(tc->o, path);
    if (err == 0)
        err = out_admit(tc->o, path, st.size);
    if (err == 0)
        err = out_file(tc->o, -1, w->fs, file, st.mode, st.mtime_ns, st.size);
    w->fs->ops->close(file);
    return err;
}

static int tc_symlink(struct walker *w, const char *path, const struct ws_stat *st)
{
    struct tree_copy *tc = w->ud;
    char target[WS_VFS_PATH_MAX + 1];
    ssize_t n;
    int err;

    if (!w->fs->ops->readlink)
        return -EOPNOTSUPP;
    n = w->fs->ops->readlink(w->fs, path, target, sizeof(target) - 1);
    if (n == -EINVAL)
        return 0;
    if (n < 0)
        return (int)n;
    target[n] = '\0';
    err = out_path(tc->o, path);
    return err < 0 ? err : out_symlink(tc->o, target, st->mtime_ns);
}

static int tc_enter(struct walker *w, const char *path, const struct ws_stat *st)
{
    struct tree_copy *tc = w->ud;
    int err;

    (void)st;
    if (strcmp(path, ".") == 0)
        return 0;
    err = out_path(tc->o, path);
    if (err == 0)
        err = tc->o->dst->ops->mkdir(tc->o->dst, tc->o->path, false, 0700);
    if (err == 0)
        tc->o->stats.dirs++;
    return err;
}

static int tc_leave(struct walker *w, const char *path, const struct ws_stat *st)
{
    struct tree_copy *tc = w->ud;
    int err;

    if (strcmp(path, ".") == 0)
        return 0;
    err = out_path(tc->o, path);
    return err < 0 ? err : out_mode_time(tc->o, st->mode, st->mtime_ns, true);
}

int ws_tree_copy(struct ws_vfs *src, struct ws_vfs *dst, const struct ws_copy_caps *caps,
                 struct ws_diag *d, struct ws_copy_stats *ret)
{
    static const struct walk_ops ops = {
        .file = tc_file, .symlink = tc_symlink, .enter = tc_enter, .leave = tc_leave};
    struct out *o = malloc(sizeof(*o));
    struct tree_copy tc = {.o = o, .src = src};
    struct walker w = {.fs = src, .ops = &ops, .ud = &tc};
    int err;

    if (!o)
        return -ENOMEM;
    err = out_init(o, dst, caps, d);
    if (err == 0)
        err = walk(&w);
    if (err == 0)
        err = out_sync(o);
    if (err == -WS_ELIMIT && d && !d->message[0])
        ws_diag_set(d, "the tree has more than %d entries or %d levels", WS_SNAP_ENTRIES_MAX,
                    WS_SNAP_DEPTH_MAX);
    if (err == 0 && ret)
        *ret = o->stats;
    free(o->buf);
    free(o);
    return err;
}
