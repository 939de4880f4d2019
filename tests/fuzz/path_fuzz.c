/* Workspace paths: the client-path check (ws_vfs_check_path), the lexical
 * normaliser of the generic operations (ws_path_normalize) and the
 * confined resolver of the host storage (server/posix/fs.h), over a small
 * tree made once per process:
 *
 *     a.txt  dir/  dir/b.txt  dir/sub/  dir/up -> ../..
 *     link_root -> /   link_up -> ..   link_file -> a.txt   link_dir -> dir
 *     abs_passwd -> /etc/passwd   loop -> loop
 *
 * The input (up to its first NUL) is the path. Checked besides memory
 * safety: whatever stat, open_read, opendir or readlink resolve is inside
 * the tree (its inode is one recorded at setup; a directory lists only
 * names of the tree; a link reads back as one of the targets made), a
 * path the check accepts is relative, non-empty and short enough, and a
 * normalised path is relative, has no empty or "." component and
 * normalises to itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/posix/fs.h"
#include "server/vfs/vfs.h"
#include "tests/fuzz/fuzz.h"

/* server/vfs/internal.h, private to //server/vfs:ops. */
int ws_path_normalize(const char *path, char *buf, size_t size);

#define INOS_MAX 32

static struct ws_vfs *fs;
static char root[PATH_MAX - 64];
static uint64_t inos[INOS_MAX];
static size_t n_inos;

static const char *const names[] = {"a.txt",    "dir",        "b.txt",   "sub",
                                    "up",       "link_root",  "link_up", "link_file",
                                    "link_dir", "abs_passwd", "loop"};
static const char *const targets[] = {"../..", "/", "..", "a.txt", "dir", "/etc/passwd", "loop"};

static int record(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)path;
    (void)flag;
    (void)ftw;
    FUZZ_CHECK(n_inos < INOS_MAX, "tree too big");
    inos[n_inos++] = st->st_ino;
    return 0;
}

static void make(const char *rel, const char *link_target, bool dir)
{
    char p[PATH_MAX + 64];
    int r;

    FUZZ_CHECK(snprintf(p, sizeof(p), "%s/%s", root, rel) < (int)sizeof(p), "path too long");
    if (link_target)
        r = symlink(link_target, p);
    else if (dir)
        r = mkdir(p, 0755);
    else {
        fuzz_write_file(p, rel, strlen(rel));
        r = 0;
    }
    if (r < 0) {
        perror(p);
        FUZZ_CHECK(false, "making the tree");
    }
}

static void setup(void)
{
    int r;

    snprintf(root, sizeof(root), "%s/root", fuzz_scratch_dir("path_fuzz"));
    FUZZ_CHECK(mkdir(root, 0755) == 0, "mkdir root");
    make("a.txt", NULL, false);
    make("dir", NULL, true);
    make("dir/b.txt", NULL, false);
    make("dir/sub", NULL, true);
    make("dir/up", "../..", false);
    make("link_root", "/", false);
    make("link_up", "..", false);
    make("link_file", "a.txt", false);
    make("link_dir", "dir", false);
    make("abs_passwd", "/etc/passwd", false);
    make("loop", "loop", false);
    FUZZ_CHECK(nftw(root, record, 16, FTW_PHYS) == 0, "walking the tree");
    r = ws_posixfs_open(AT_FDCWD, root, &fs);
    if (r < 0) {
        fprintf(stderr, "ws_posixfs_open(%s): %s\n", root, strerror(-r));
        FUZZ_CHECK(false, "ws_posixfs_open");
    }
}

static bool in_tree(uint64_t ino)
{
    for (size_t i = 0; i < n_inos; i++)
        if (inos[i] == ino)
            return true;
    return false;
}

static bool known_name(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strlen(names[i]) == len && memcmp(names[i], name, len) == 0)
            return true;
    return false;
}

static void check_normalized(const char *path)
{
    char buf[WS_VFS_PATH_MAX + 1], again[WS_VFS_PATH_MAX + 1];
    int n = ws_path_normalize(path, buf, sizeof(buf));

    if (n < 0) {
        FUZZ_CHECK(n == -EXDEV || n == -WS_EBADPATH, "ws_path_normalize: unexpected error");
        return;
    }
    FUZZ_CHECK((size_t)n == strlen(buf), "normalised length");
    FUZZ_CHECK(buf[0] != '/', "normalised path is absolute");
    for (const char *p = buf; *p;) {
        const char *end = strchrnul(p, '/');
        size_t len = (size_t)(end - p);
        FUZZ_CHECK(len > 0, "normalised path has an empty component");
        FUZZ_CHECK(!(len == 1 && p[0] == '.'), "normalised path has a \".\" component");
        p = *end ? end + 1 : end;
    }
    FUZZ_CHECK(ws_path_normalize(buf, again, sizeof(again)) == n && strcmp(buf, again) == 0,
               "normalising is not idempotent");
}

static void resolve(const char *path)
{
    struct ws_stat st;
    struct ws_vfs_file *f = NULL;
    struct ws_vfs_dir *d = NULL;
    char link[PATH_MAX];
    ssize_t n;

    if (fs->ops->stat(fs, path, &st) == 0)
        FUZZ_CHECK(in_tree(st.ino), "stat resolved outside the tree");
    if (fs->ops->open_read(fs, path, &f, &st) == 0) {
        char buf[64];
        FUZZ_CHECK(in_tree(st.ino), "open_read resolved outside the tree");
        FUZZ_CHECK(st.type == WS_FT_REGULAR, "open_read opened a non-file");
        n = fs->ops->pread(f, buf, sizeof(buf), 0);
        FUZZ_CHECK(n >= 0 && (size_t)n == st.size, "a tree file reads whole");
        fs->ops->close(f);
    }
    if (fs->ops->opendir(fs, path, &d) == 0) {
        struct ws_dirent e;
        int r;
        while ((r = fs->ops->readdir(d, &e)) == 1)
            FUZZ_CHECK(known_name(e.name, e.name_len), "opendir listed a directory outside");
        FUZZ_CHECK(r == 0, "readdir failed");
        fs->ops->closedir(d);
    }
    n = fs->ops->readlink(fs, path, link, sizeof(link));
    if (n >= 0) {
        bool known = false;
        for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++)
            known |= strlen(targets[i]) == (size_t)n && memcmp(targets[i], link, (size_t)n) == 0;
        FUZZ_CHECK(known, "readlink read a link outside the tree");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *path;
    size_t len;
    int r;

    if (!fs)
        setup();
    len = strnlen((const char *)data, size);
    if (len > 2 * WS_VFS_PATH_MAX)
        return 0;
    path = malloc(len + 1);
    FUZZ_CHECK(path != NULL, "malloc");
    memcpy(path, data, len);
    path[len] = '\0';

    r = ws_vfs_check_path(path);
    if (r == 0)
        FUZZ_CHECK(len > 0 && len <= WS_VFS_PATH_MAX && path[0] != '/',
                   "ws_vfs_check_path accepted a bad path");
    else
        FUZZ_CHECK(r == -WS_EBADPATH || r == -EXDEV, "ws_vfs_check_path: unexpected error");
    check_normalized(path);
    resolve(path);
    free(path);
    return 0;
}
