/* ReadArchive's producer (ws_tar_out_*, server/vfs/archive.h) as a
 * round trip: the input describes a small tree, which is made for real in
 * a fresh directory of each run and opened as a host workspace
 * (server/posix/fs.h); the producer archives it; libarchive reads the
 * archive back.
 *
 * The first input byte: bit 0 gzip; bits 1-2 what is asked for (0 the
 * root, 1 the first directory made, 2 the first file made: one entry);
 * bit 3 small stretches (`want`). Then records, until the input ends:
 *
 *     u8  kind (bits 0-1: file, directory, symlink, hard link) and parent
 *         (the rest: which directory made so far, modulo their number)
 *     u8  name length - 1 (modulo NAME_BYTES), then the name ('/' and NUL
 *         read as '_'; "." and ".." get a '_' in front)
 *     u16 mode (07777 of it: files get 0600, directories 0700 besides)
 *     u16 length (modulo CONTENT_MAX + 1), then a file's content or a
 *         symlink's target (to its first NUL); for a hard link, which
 *         file made so far
 *
 * Beside the tree lies `outside/`, with a file of its own, which the
 * seeds' symlinks point at (as do "/" and ".."): the archive must hold the
 * links, never what they lead to.
 *
 * Checked besides memory safety: the stream comes in non-empty stretches
 * and then ends; libarchive reads it whole, in the format asked for; every
 * entry is a node of the tree below what was asked for, once, with its
 * type, permission bits, mtime, a file's size and exact content, a link's
 * exact target, and a second name of a file as a hard link to the name
 * stored first; every node is there, except the server's transient names
 * (and what is below them), which never are; nothing was skipped and the
 * producer's counts agree.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/posix/fs.h"
#include "server/vfs/archive.h"
#include "server/vfs/ops.h"
#include "server/vfs/vfs.h"
#include "tests/fuzz/fuzz.h"

#define NODES_MAX   48
#define NAME_BYTES  120
#define CONTENT_MAX 4096
/* Longest path below the tree made (the producer's own limits are far
 * beyond; this keeps the tree small). */
#define REL_MAX 1024
/* A file's mtime: seconds from here on, whole (tar keeps seconds). */
#define MTIME_BASE 1600000000

enum kind { K_FILE, K_DIR, K_LINK };

struct node {
    enum kind kind;
    char rel[REL_MAX + 1]; /* "" for the root */
    unsigned mode;
    const uint8_t *data; /* content, or the link's target */
    size_t len;
    long mtime;
    int group;   /* a file: the node whose inode it shares (itself if none) */
    bool hidden; /* a transient name, or below one */
    bool seen;
};

static struct node nodes[NODES_MAX + 1];
static size_t n_nodes;
static int group_first[NODES_MAX + 1]; /* group -> node stored first, or -1 */
static char outside[PATH_MAX];
static unsigned long runs;

static const char lure[] = "content that lies outside the workspace\n";

/* Splits a node's path into the name the archive gives it, relative to
 * `base` ("" for the root); NULL when it is not below base. */
static const char *rel_to(const char *rel, const char *base, bool single)
{
    size_t n = strlen(base);

    if (single)
        return strcmp(rel, base) == 0 ? (strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel) : NULL;
    if (n == 0)
        return rel[0] ? rel : NULL;
    if (strncmp(rel, base, n) == 0 && rel[n] == '/')
        return rel + n + 1;
    return NULL;
}

static bool name_taken(const char *parent, const char *name)
{
    char rel[REL_MAX + 1];

    snprintf(rel, sizeof(rel), "%s%s%s", parent, parent[0] ? "/" : "", name);
    for (size_t i = 0; i < n_nodes; i++)
        if (strcmp(nodes[i].rel, rel) == 0)
            return true;
    return false;
}

static void make_node(const char *tree, struct node *n, const struct node *link_to)
{
    char p[PATH_MAX + REL_MAX + 2];
    int r;

    snprintf(p, sizeof(p), "%s/%s", tree, n->rel);
    switch (n->kind) {
    case K_DIR:
        r = mkdir(p, 0700);
        if (r == 0)
            r = chmod(p, n->mode);
        break;
    case K_LINK: {
        char target[CONTENT_MAX + 1];
        memcpy(target, n->data, n->len);
        target[n->len] = '\0';
        r = symlink(target, p);
        break;
    }
    default:
        if (link_to) {
            char q[PATH_MAX + REL_MAX + 2];
            snprintf(q, sizeof(q), "%s/%s", tree, link_to->rel);
            r = link(q, p);
            break;
        }
        fuzz_write_file(p, n->data, n->len);
        struct timespec ts[2] = {{.tv_sec = n->mtime}, {.tv_sec = n->mtime}};
        r = chmod(p, n->mode);
        if (r == 0)
            r = utimensat(AT_FDCWD, p, ts, AT_SYMLINK_NOFOLLOW);
        break;
    }
    if (r < 0) {
        perror(p);
        FUZZ_CHECK(false, "making the tree");
    }
}

static uint16_t u16_at(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* Reads the records into nodes[] and makes them under tree. */
static void build(const char *tree, const uint8_t *data, size_t size, struct fuzz_rng *rng)
{
    size_t dirs[NODES_MAX + 1], n_dirs = 1, files[NODES_MAX + 1], n_files = 0;
    size_t pos = 0;

    memset(&nodes[0], 0, sizeof(nodes[0]));
    nodes[0].kind = K_DIR;
    n_nodes = 1;
    dirs[0] = 0;
    while (pos < size && n_nodes <= NODES_MAX) {
        uint8_t k = data[pos++];
        enum { R_FILE, R_DIR, R_LINK, R_HARD } rk = k & 3;
        const struct node *parent = &nodes[dirs[(k >> 2) % n_dirs]];
        char name[NAME_BYTES + 2];
        size_t name_len, len;
        unsigned mode;

        if (pos >= size)
            break;
        name_len = 1 + data[pos++] % NAME_BYTES;
        if (size - pos < name_len + 4)
            break;
        for (size_t i = 0; i < name_len; i++) {
            uint8_t c = data[pos + i];
            name[i] = c == '/' || c == '\0' ? '_' : (char)c;
        }
        name[name_len] = '\0';
        pos += name_len;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
            memmove(name + 1, name, name_len + 1);
            name[0] = '_';
            name_len++;
        }
        mode = u16_at(data + pos) & 07777;
        len = u16_at(data + pos + 2) % (CONTENT_MAX + 1);
        pos += 4;
        if (rk != R_HARD) {
            if (len > size - pos)
                len = size - pos;
        }
        const uint8_t *content = data + pos;
        if (rk != R_HARD)
            pos += len;

        if (strlen(parent->rel) + 1 + name_len > REL_MAX || name_taken(parent->rel, name))
            continue;
        struct node *n = &nodes[n_nodes];
        const struct node *link_to = NULL;
        char rel[REL_MAX + 1];
        snprintf(rel, sizeof(rel), "%s%s%s", parent->rel, parent->rel[0] ? "/" : "", name);
        memset(n, 0, sizeof(*n));
        memcpy(n->rel, rel, sizeof(rel));
        n->hidden = parent->hidden || ws_vfs_transient_name(name, name_len, NULL);
        n->group = (int)n_nodes;
        switch (rk) {
        case R_DIR:
            n->kind = K_DIR;
            n->mode = mode | 0700;
            break;
        case R_LINK:
            n->kind = K_LINK;
            n->mode = 0777;
            n->data = content;
            n->len = strnlen((const char *)content, len);
            if (n->len == 0)
                continue;
            break;
        case R_HARD:
            if (n_files == 0)
                continue;
            link_to = &nodes[files[len % n_files]];
            n->kind = K_FILE;
            n->mode = link_to->mode;
            n->data = link_to->data;
            n->len = link_to->len;
            n->mtime = link_to->mtime;
            n->group = link_to->group;
            break;
        default:
            n->kind = K_FILE;
            n->mode = mode | 0600;
            n->data = content;
            n->len = len;
            n->mtime = MTIME_BASE + (long)fuzz_rng_below(rng, 1u << 28);
            break;
        }
        make_node(tree, n, link_to);
        if (n->kind == K_DIR)
            dirs[n_dirs++] = n_nodes;
        else if (n->kind == K_FILE)
            files[n_files++] = n_nodes;
        n_nodes++;
    }
}

static struct node *find_node(const char *name, const char *base, bool single)
{
    for (size_t i = 0; i < n_nodes; i++) {
        const char *r = rel_to(nodes[i].rel, base, single);
        if (r && strcmp(r, name) == 0)
            return &nodes[i];
    }
    return NULL;
}

/* Checks one entry read back; returns the content bytes it had. */
static uint64_t check_entry(struct archive *ar, struct archive_entry *e, const char *base,
                            bool single)
{
    char name[REL_MAX + 2];
    const char *p = archive_entry_pathname(e);
    size_t len;

    FUZZ_CHECK(p != NULL, "an entry without a name");
    len = strlen(p);
    FUZZ_CHECK(len <= REL_MAX + 1, "an entry's name longer than any made");
    memcpy(name, p, len + 1);
    if (archive_entry_filetype(e) == AE_IFDIR && len > 1 && name[len - 1] == '/')
        name[len - 1] = '\0';
    struct node *n = find_node(name, base, single);
    FUZZ_CHECK(n != NULL, "an entry that is no node of the tree asked for");
    FUZZ_CHECK(!n->hidden, "a transient entry archived");
    FUZZ_CHECK(!n->seen, "an entry archived twice");
    n->seen = true;

    const char *hard = archive_entry_hardlink(e);
    switch (n->kind) {
    case K_DIR:
        FUZZ_CHECK(archive_entry_filetype(e) == AE_IFDIR, "a directory of another type");
        FUZZ_CHECK(!hard, "a directory as a hard link");
        FUZZ_CHECK((archive_entry_perm(e) & 07777) == n->mode, "a directory's mode");
        return 0;
    case K_LINK:
        FUZZ_CHECK(archive_entry_filetype(e) == AE_IFLNK, "a symlink of another type");
        FUZZ_CHECK(!hard, "a symlink as a hard link");
        p = archive_entry_symlink(e);
        FUZZ_CHECK(p && strlen(p) == n->len && memcmp(p, n->data, n->len) == 0,
                   "a symlink's target");
        FUZZ_CHECK(archive_entry_size(e) == 0, "a symlink with content");
        return 0;
    default:
        break;
    }
    if (hard) {
        int first = group_first[n->group];
        FUZZ_CHECK(first >= 0, "a hard link before its file");
        const char *first_name = rel_to(nodes[first].rel, base, single);
        FUZZ_CHECK(first_name && strcmp(hard, first_name) == 0,
                   "a hard link to another name than the one stored first");
        FUZZ_CHECK(archive_entry_size(e) == 0, "a hard link with content");
        return 0;
    }
    FUZZ_CHECK(archive_entry_filetype(e) == AE_IFREG, "a file of another type");
    FUZZ_CHECK(group_first[n->group] < 0, "a second name of a file stored as a file");
    group_first[n->group] = (int)(n - nodes);
    FUZZ_CHECK((archive_entry_perm(e) & 07777) == n->mode, "a file's mode");
    FUZZ_CHECK(archive_entry_mtime(e) == n->mtime, "a file's mtime");
    FUZZ_CHECK(archive_entry_size_is_set(e) && archive_entry_size(e) == (la_int64_t)n->len,
               "a file's size");
    uint8_t buf[CONTENT_MAX + 1];
    size_t got = 0;
    for (;;) {
        la_ssize_t r = archive_read_data(ar, buf + got, sizeof(buf) - got);
        FUZZ_CHECK(r >= 0, "reading a file's content back");
        if (r == 0)
            break;
        got += (size_t)r;
        FUZZ_CHECK(got <= n->len, "a file with more content than it has");
    }
    FUZZ_CHECK(got == n->len && memcmp(buf, n->data, got) == 0, "a file's content");
    return got;
}

static void setup(void)
{
    const char *scratch = fuzz_scratch_dir("tar_out_fuzz");

    snprintf(outside, sizeof(outside), "%s/outside", scratch);
    FUZZ_CHECK(mkdir(outside, 0755) == 0, "mkdir outside");
    char p[PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/secret", outside);
    fuzz_write_file(p, lure, sizeof(lure) - 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char tree[PATH_MAX];
    struct ws_vfs *fs = NULL;
    struct ws_fsops *ops = NULL;
    struct ws_tar_out *t = NULL;
    struct ws_diag d;
    struct fuzz_rng rng;
    uint8_t *ar_bytes = NULL;
    size_t ar_len = 0, ar_cap = 0;
    int r;

    if (size < 1)
        return 0;
    if (!outside[0])
        setup();
    fuzz_rng_seed(&rng, data, size);
    bool gzip = data[0] & 1, small = data[0] & 8;
    unsigned ask = (data[0] >> 1) & 3;

    snprintf(tree, sizeof(tree), "%s/tree-%lu", fuzz_scratch_dir("tar_out_fuzz"), runs++);
    FUZZ_CHECK(mkdir(tree, 0755) == 0, "mkdir tree");
    build(tree, data + 1, size - 1, &rng);

    /* What is asked for; single: one file. */
    const char *base = "";
    bool single = false;
    for (size_t i = 1; i < n_nodes && (ask == 1 || ask == 2); i++) {
        if (nodes[i].hidden)
            continue;
        if (ask == 1 && nodes[i].kind == K_DIR) {
            base = nodes[i].rel;
            break;
        }
        if (ask == 2 && nodes[i].kind == K_FILE) {
            base = nodes[i].rel;
            single = true;
            break;
        }
    }
    for (size_t i = 0; i <= NODES_MAX; i++)
        group_first[i] = -1;

    r = ws_posixfs_open(AT_FDCWD, tree, &fs);
    FUZZ_CHECK(r == 0, "ws_posixfs_open");
    FUZZ_CHECK(ws_fsops_new(fs, &ops) == 0, "ws_fsops_new");
    struct ws_tar_out_request req = {
        .path = base[0] ? base : ".",
        .format = gzip ? WS_TAR_GZIP : WS_TAR_PLAIN,
    };
    memset(&d, 0, sizeof(d));
    r = ws_tar_out_new(ops, &req, &d, &t);
    FUZZ_CHECK(r == 0, "ws_tar_out_new refused a tree's own path");
    for (;;) {
        size_t want = small ? 1 + fuzz_rng_below(&rng, 64) : 1 + fuzz_rng_below(&rng, 256 * 1024);
        const void *out = NULL;
        size_t n = 0;
        r = ws_tar_out_next(t, want, &out, &n);
        FUZZ_CHECK(r == 0 || r == 1, "ws_tar_out_next failed on a quiet tree");
        if (r == 0)
            break;
        FUZZ_CHECK(n > 0 && out != NULL, "an empty stretch");
        if (ar_len + n > ar_cap) {
            ar_cap = (ar_len + n) * 2;
            ar_bytes = realloc(ar_bytes, ar_cap);
            FUZZ_CHECK(ar_bytes != NULL, "realloc");
        }
        memcpy(ar_bytes + ar_len, out, n);
        ar_len += n;
        FUZZ_CHECK(ar_len < (64u << 20), "an archive far larger than its tree");
    }
    {
        const void *out = NULL;
        size_t n = 0;
        FUZZ_CHECK(ws_tar_out_next(t, 1, &out, &n) == 0, "more after the end");
    }
    FUZZ_CHECK(ar_len > 0, "no archive at all");

    struct archive *ar = archive_read_new();
    struct archive_entry *e;
    uint64_t entries = 0, files = 0, dirs = 0, links = 0, hard = 0, bytes = 0;
    FUZZ_CHECK(ar != NULL, "archive_read_new");
    archive_read_support_format_tar(ar);
    if (gzip)
        archive_read_support_filter_gzip(ar);
    FUZZ_CHECK(archive_read_open_memory(ar, ar_bytes, ar_len) == ARCHIVE_OK,
               "libarchive does not open the archive");
    while ((r = archive_read_next_header(ar, &e)) == ARCHIVE_OK) {
        entries++;
        bytes += check_entry(ar, e, base, single);
        if (archive_entry_hardlink(e))
            hard++;
        else if (archive_entry_filetype(e) == AE_IFDIR)
            dirs++;
        else if (archive_entry_filetype(e) == AE_IFLNK)
            links++;
        else
            files++;
    }
    if (r != ARCHIVE_EOF)
        fprintf(stderr, "libarchive: %s\n", archive_error_string(ar));
    FUZZ_CHECK(r == ARCHIVE_EOF, "libarchive does not read the archive to its end");
    FUZZ_CHECK(archive_filter_code(ar, 0) == (gzip ? ARCHIVE_FILTER_GZIP : ARCHIVE_FILTER_NONE),
               "another compression than asked for");
    archive_read_free(ar);

    for (size_t i = 0; i < n_nodes; i++)
        if (!nodes[i].hidden && rel_to(nodes[i].rel, base, single))
            FUZZ_CHECK(nodes[i].seen, "a node of the tree left out");

    const struct ws_tar_stats *s = ws_tar_out_stats(t);
    FUZZ_CHECK(s->n_skips == 0 && s->skipped_more == 0, "an entry skipped in a quiet tree");
    FUZZ_CHECK(!s->truncated, "a small tree truncated");
    FUZZ_CHECK(s->entries == entries && s->files == files && s->directories == dirs &&
                   s->symlinks == links && s->hardlinks == hard && s->bytes == bytes,
               "the producer's counts disagree with the archive");

    ws_tar_out_free(t);
    ws_fsops_free(ops);
    fs->ops->destroy(fs);
    free(ar_bytes);
    fuzz_remove_tree(tree);
    return 0;
}
