/* The confined host file system: see fs.h for the contract.
 *
 * Every lookup goes through resolve(), a thin openat2() wrapper; nothing
 * here ever passes a path string to a syscall relative to "/" or the
 * current directory (the one exception is /proc/self/fd/N, our own fd, for
 * linking an O_TMPFILE where AT_EMPTY_PATH is not permitted).
 */
#include "server/posix/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "server/base/fd.h"
#include "server/base/io.h"
#include "server/base/macros.h"

/* Lookups that may follow symlinks in the middle of a path, as long as they
 * stay beneath the directory fd. */
#define RES_BENEATH (RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
/* Lookups of a single leaf name that must never follow it. */
#define RES_LEAF (RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS)

#define TMP_PREFIX      WS_VFS_TMP_PREFIX
#define TMP_NAME_LEN    (sizeof(TMP_PREFIX) - 1 + WS_VFS_TRANSIENT_HEX)
#define TMP_NAME_TRIES  16
#define RM_RESCANS      3
#define OPEN_READ_TRIES 2

struct posixfs {
    struct ws_vfs base;
    int root_fd;
    dev_t root_dev;
    ino_t root_ino;
    unsigned flags;
    /* Owner of what this instance creates; -1: the server's. */
    uid_t uid;
    gid_t gid;
};

struct pfs_dir {
    struct posixfs *fs;
    int fd;   /* O_RDONLY | O_DIRECTORY, for the *at calls */
    DIR *dir; /* on a dup of fd, so the stream's position is its own */
};

struct pfs_file {
    int fd;
};

struct pfs_writer {
    struct posixfs *fs;
    int parent_fd; /* O_PATH | O_DIRECTORY */
    int tmp_fd;
    bool tmp_named; /* tmp_name currently exists in the parent */
    bool leaf_made; /* opts.fresh: the leaf is ours until commit */
    char tmp_name[TMP_NAME_LEN + 1];
    char leaf[WS_VFS_NAME_MAX + 1];
    struct ws_write_opts opts;
    uint64_t size;
    int error; /* sticky: after a failed write only abort makes sense */
};

/* A path cut into the leaf's parent and the leaf. When the leaf is "." or
 * "..", nothing is cut and `leaf` is the whole path. */
struct split {
    char buf[WS_VFS_PATH_MAX + 1];
    const char *parent;
    const char *leaf;
    bool must_be_dir; /* trailing slash */
    bool leaf_is_dot;
};

static const struct ws_vfs_ops posixfs_ops;

static struct posixfs *to_fs(struct ws_vfs *vfs)
{
    return (struct posixfs *)vfs;
}

/* openat2 with O_CLOEXEC always added. Returns the fd or a negated errno;
 * -EAGAIN only after WS_POSIXFS_RESOLVE_RETRIES attempts, since the kernel
 * reports it for any concurrent rename while it resolves "..". */
static int resolve(int dirfd, const char *path, uint64_t flags, uint64_t mode, uint64_t res)
{
    struct open_how how = {.flags = flags | O_CLOEXEC, .mode = mode, .resolve = res};

    for (int i = 0; i < WS_POSIXFS_RESOLVE_RETRIES; i++) {
        long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
        if (fd >= 0)
            return (int)fd;
        if (errno != EAGAIN && errno != EINTR)
            return -errno;
    }
    return -EAGAIN;
}

static enum ws_ftype ftype_of(mode_t m)
{
    if (S_ISREG(m))
        return WS_FT_REGULAR;
    if (S_ISDIR(m))
        return WS_FT_DIRECTORY;
    if (S_ISLNK(m))
        return WS_FT_SYMLINK;
    return WS_FT_OTHER;
}

static void to_ws_stat(const struct stat *st, struct ws_stat *ret)
{
    *ret = (struct ws_stat){
        .type = ftype_of(st->st_mode),
        .size = st->st_size < 0 ? 0 : (uint64_t)st->st_size,
        .mode = st->st_mode & 07777,
        .mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec,
        .nlink = st->st_nlink,
        .ino = st->st_ino,
        .ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec,
    };
}

/* Cuts `path` into parent and leaf (see struct split). Refuses what no
 * lookup should ever see, whether or not ws_vfs_check_path() ran. */
static int split_path(const char *path, struct split *s)
{
    if (!path || !*path)
        return -WS_EBADPATH;
    size_t len = strnlen(path, WS_VFS_PATH_MAX + 1);
    if (len > WS_VFS_PATH_MAX)
        return -ENAMETOOLONG;
    if (path[0] == '/')
        return -EXDEV;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && path[j] != '/')
            j++;
        if (j - i > WS_VFS_NAME_MAX)
            return -ENAMETOOLONG;
        i = j + 1;
    }

    memcpy(s->buf, path, len + 1);
    s->must_be_dir = false;
    /* Never empties the buffer: the path does not start with '/'. */
    while (s->buf[len - 1] == '/') {
        s->buf[--len] = '\0';
        s->must_be_dir = true;
    }

    char *slash = strrchr(s->buf, '/');
    const char *leaf = slash ? slash + 1 : s->buf;
    s->leaf_is_dot = strcmp(leaf, ".") == 0 || strcmp(leaf, "..") == 0;
    if (s->leaf_is_dot) {
        s->parent = NULL;
        s->leaf = s->buf;
    } else if (!slash) {
        s->parent = ".";
        s->leaf = s->buf;
    } else {
        *slash = '\0';
        s->parent = s->buf;
        s->leaf = slash + 1;
    }
    return 0;
}

/* A single name from readdir, for the *_at operations. */
static int check_name(const char *name)
{
    if (!name || !*name)
        return -WS_EBADPATH;
    if (strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return -EXDEV;
    if (strlen(name) > WS_VFS_NAME_MAX)
        return -ENAMETOOLONG;
    return 0;
}

/* Gives what `fd` refers to (any fd, O_PATH included) to the instance's
 * owner, when it has one. */
static int give(const struct posixfs *fs, int fd)
{
    if (fs->uid == (uid_t)-1 && fs->gid == (gid_t)-1)
        return 0;
    return fchownat(fd, "", fs->uid, fs->gid, AT_EMPTY_PATH) < 0 ? -errno : 0;
}

/* After mkdirat(parent_fd, name): gives the new directory to the owner
 * through an fd that did not follow a symlink put in its place, or
 * removes it again when that fails. */
static int give_new_dir(const struct posixfs *fs, int parent_fd, const char *name)
{
    if (fs->uid == (uid_t)-1 && fs->gid == (gid_t)-1)
        return 0;
    ws_cleanup_fd int fd = resolve(parent_fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW, 0, RES_LEAF);
    int r = fd < 0 ? fd : give(fs, fd);
    if (r < 0)
        (void)unlinkat(parent_fd, name, AT_REMOVEDIR);
    return r;
}

static int open_parent(struct posixfs *fs, const struct split *s)
{
    return resolve(fs->root_fd, s->parent, O_PATH | O_DIRECTORY, 0, RES_BENEATH);
}

/* For a path whose leaf is "." or "..": resolves it (so escapes and missing
 * components report as such) and returns `at_root` when it names the
 * workspace root, `elsewhere` otherwise. */
static int dot_leaf(struct posixfs *fs, const struct split *s, int at_root, int elsewhere)
{
    ws_cleanup_fd int fd = resolve(fs->root_fd, s->leaf, O_PATH | O_DIRECTORY, 0, RES_BENEATH);
    struct stat st;

    if (fd < 0)
        return fd;
    if (fstat(fd, &st) < 0)
        return -errno;
    return st.st_dev == fs->root_dev && st.st_ino == fs->root_ino ? at_root : elsewhere;
}

/* Opens the directory `path` O_RDONLY, refusing a symlink leaf. */
static int open_dir_path(struct posixfs *fs, const char *path, int *ret_fd)
{
    struct split s;
    int r = split_path(path, &s);
    if (r < 0)
        return r;

    int fd;
    if (s.leaf_is_dot) {
        fd = resolve(fs->root_fd, s.leaf, O_RDONLY | O_DIRECTORY, 0, RES_BENEATH);
    } else {
        ws_cleanup_fd int parent = open_parent(fs, &s);
        if (parent < 0)
            return parent;
        /* O_DIRECTORY fails before the open itself on a FIFO or device,
         * so this cannot block. */
        fd = resolve(parent, s.leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, RES_LEAF);
        if (fd == -ENOTDIR || fd == -ELOOP) {
            /* The kernel says ENOTDIR for a symlink leaf too: tell them apart. */
            struct stat st;
            if (fstatat(parent, s.leaf, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
                fd = -WS_ESYMLINK_LEAF;
            else
                fd = -ENOTDIR;
        }
    }
    if (fd < 0)
        return fd;
    *ret_fd = fd;
    return 0;
}

/* Opens the regular file `leaf` in `parent_fd` for reading without ever
 * opening anything else: the type is checked on an O_PATH fd first, and the
 * real open must find the same inode. */
static int open_regular(int parent_fd, const char *leaf, bool must_be_dir, int *ret_fd,
                        struct stat *ret_st)
{
    for (int i = 0; i < OPEN_READ_TRIES; i++) {
        ws_cleanup_fd int pfd = resolve(parent_fd, leaf, O_PATH | O_NOFOLLOW, 0, RES_LEAF);
        struct stat a, b;

        if (pfd < 0)
            return pfd;
        if (fstat(pfd, &a) < 0)
            return -errno;
        if (S_ISLNK(a.st_mode))
            return -WS_ESYMLINK_LEAF;
        if (must_be_dir && !S_ISDIR(a.st_mode))
            return -ENOTDIR;
        if (S_ISDIR(a.st_mode))
            return -EISDIR;
        if (!S_ISREG(a.st_mode))
            return -WS_ESPECIAL;

        ws_cleanup_fd int fd =
            resolve(parent_fd, leaf, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY, 0, RES_LEAF);
        if (fd == -ELOOP || fd == -ENOENT || fd == -ENXIO)
            continue; /* swapped after the check */
        if (fd < 0)
            return fd;
        if (fstat(fd, &b) < 0)
            return -errno;
        if (b.st_dev != a.st_dev || b.st_ino != a.st_ino || !S_ISREG(b.st_mode))
            continue;
        *ret_st = b;
        *ret_fd = ws_steal_fd(&fd);
        return 0;
    }
    return -ESTALE;
}

static int new_file(int fd, const struct stat *st, struct ws_vfs_file **ret_file,
                    struct ws_stat *ret_st)
{
    struct pfs_file *f = malloc(sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->fd = fd;
    *ret_file = (struct ws_vfs_file *)f;
    if (ret_st)
        to_ws_stat(st, ret_st);
    return 0;
}

/* Takes ownership of `fd` (closed on failure too). */
static int new_dir(struct posixfs *fs, int fd, struct ws_vfs_dir **ret_dir)
{
    ws_cleanup_fd int owned = fd;
    struct pfs_dir *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;

    int dup_fd = fcntl(owned, F_DUPFD_CLOEXEC, 3);
    if (dup_fd < 0) {
        int r = -errno;
        free(d);
        return r;
    }
    d->dir = fdopendir(dup_fd);
    if (!d->dir) {
        int r = -errno;
        close(dup_fd);
        free(d);
        return r;
    }
    d->fs = fs;
    d->fd = ws_steal_fd(&owned);
    *ret_dir = (struct ws_vfs_dir *)d;
    return 0;
}

/* ---- read side ---- */

static int pfs_stat(struct ws_vfs *vfs, const char *path, struct ws_stat *ret_st)
{
    struct posixfs *fs = to_fs(vfs);
    struct split s;
    struct stat st;
    int r = split_path(path, &s);
    if (r < 0)
        return r;

    if (s.leaf_is_dot) {
        ws_cleanup_fd int fd = resolve(fs->root_fd, s.leaf, O_PATH | O_DIRECTORY, 0, RES_BENEATH);
        if (fd < 0)
            return fd;
        if (fstat(fd, &st) < 0)
            return -errno;
    } else {
        ws_cleanup_fd int parent = open_parent(fs, &s);
        if (parent < 0)
            return parent;
        if (fstatat(parent, s.leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
            return -errno;
    }
    if (s.must_be_dir && !S_ISDIR(st.st_mode))
        return -ENOTDIR;
    to_ws_stat(&st, ret_st);
    return 0;
}

static int pfs_opendir(struct ws_vfs *vfs, const char *path, struct ws_vfs_dir **ret_dir)
{
    int fd;
    int r = open_dir_path(to_fs(vfs), path, &fd);
    if (r < 0)
        return r;
    return new_dir(to_fs(vfs), fd, ret_dir);
}

static int pfs_opendir_at(struct ws_vfs_dir *wd, const char *name, struct ws_vfs_dir **ret_dir)
{
    struct pfs_dir *d = (struct pfs_dir *)wd;
    int r = check_name(name);
    if (r < 0)
        return r;
    int fd = resolve(d->fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, RES_LEAF);
    if (fd == -ELOOP)
        return -ENOTDIR; /* a symlink child */
    if (fd < 0)
        return fd;
    return new_dir(d->fs, fd, ret_dir);
}

static int pfs_readdir(struct ws_vfs_dir *wd, struct ws_dirent *ret_ent)
{
    struct pfs_dir *d = (struct pfs_dir *)wd;

    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d->dir);
        if (!de)
            return errno ? -errno : 0;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;

        enum ws_ftype type;
        switch (de->d_type) {
        case DT_REG:
            type = WS_FT_REGULAR;
            break;
        case DT_DIR:
            type = WS_FT_DIRECTORY;
            break;
        case DT_LNK:
            type = WS_FT_SYMLINK;
            break;
        case DT_UNKNOWN: {
            struct stat st;
            type = fstatat(d->fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? ftype_of(st.st_mode)
                                                                             : WS_FT_UNKNOWN;
            break;
        }
        default:
            type = WS_FT_OTHER;
            break;
        }
        *ret_ent =
            (struct ws_dirent){.name = de->d_name, .name_len = strlen(de->d_name), .type = type};
        return 1;
    }
}

static int pfs_stat_at(struct ws_vfs_dir *wd, const char *name, struct ws_stat *ret_st)
{
    struct pfs_dir *d = (struct pfs_dir *)wd;
    struct stat st;
    int r = check_name(name);
    if (r < 0)
        return r;
    if (fstatat(d->fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return -errno;
    to_ws_stat(&st, ret_st);
    return 0;
}

static void pfs_closedir(struct ws_vfs_dir *wd)
{
    struct pfs_dir *d = (struct pfs_dir *)wd;
    if (!d)
        return;
    int saved = errno;
    closedir(d->dir);
    close(d->fd);
    free(d);
    errno = saved;
}

static int pfs_open_read(struct ws_vfs *vfs, const char *path, struct ws_vfs_file **ret_file,
                         struct ws_stat *ret_st)
{
    struct posixfs *fs = to_fs(vfs);
    struct split s;
    struct stat st;
    int fd;
    int r = split_path(path, &s);
    if (r < 0)
        return r;
    if (s.leaf_is_dot)
        return dot_leaf(fs, &s, -EISDIR, -EISDIR);

    ws_cleanup_fd int parent = open_parent(fs, &s);
    if (parent < 0)
        return parent;
    r = open_regular(parent, s.leaf, s.must_be_dir, &fd, &st);
    if (r < 0)
        return r;
    r = new_file(fd, &st, ret_file, ret_st);
    if (r < 0)
        close(fd);
    return r;
}

static int pfs_open_read_at(struct ws_vfs_dir *wd, const char *name, struct ws_vfs_file **ret_file,
                            struct ws_stat *ret_st)
{
    struct pfs_dir *d = (struct pfs_dir *)wd;
    struct stat st;
    int fd;
    int r = check_name(name);
    if (r < 0)
        return r;
    r = open_regular(d->fd, name, false, &fd, &st);
    if (r < 0)
        return r;
    r = new_file(fd, &st, ret_file, ret_st);
    if (r < 0)
        close(fd);
    return r;
}

static ssize_t pfs_pread(struct ws_vfs_file *wf, void *buf, size_t len, uint64_t offset)
{
    struct pfs_file *f = (struct pfs_file *)wf;
    if (offset > INT64_MAX)
        return -EINVAL;
    ssize_t n = WS_RETRY_EINTR(pread(f->fd, buf, len, (off_t)offset));
    return n < 0 ? -errno : n;
}

static void pfs_close(struct ws_vfs_file *wf)
{
    struct pfs_file *f = (struct pfs_file *)wf;
    if (!f)
        return;
    int saved = errno;
    close(f->fd);
    free(f);
    errno = saved;
}

/* ---- directories ---- */

/* Opens directory `path` (workspace-relative, writable buffer), creating
 * each missing component with `mode`. Each prefix is resolved from the
 * root, so symlinks and ".." inside the workspace work as in any lookup; a
 * missing component is created with mkdirat() in the previous component's
 * fd and opened again without following, so a symlink planted meanwhile is
 * never followed. Returns an O_PATH | O_DIRECTORY fd in *ret_fd. */
static int make_dirs(struct posixfs *fs, const char *dir_path, mode_t mode, int *ret_fd)
{
    char path[WS_VFS_PATH_MAX + 1];
    size_t n = strnlen(dir_path, sizeof(path));
    if (n >= sizeof(path))
        return -ENAMETOOLONG;
    memcpy(path, dir_path, n + 1);

    ws_cleanup_fd int cur = resolve(fs->root_fd, path, O_PATH | O_DIRECTORY, 0, RES_BENEATH);
    if (cur >= 0) {
        *ret_fd = ws_steal_fd(&cur);
        return 0;
    }
    if (cur != -ENOENT)
        return cur;

    cur = resolve(fs->root_fd, ".", O_PATH | O_DIRECTORY, 0, RES_BENEATH);
    if (cur < 0)
        return cur;

    for (size_t i = 0; i < n;) {
        while (i < n && path[i] == '/')
            i++;
        if (i == n)
            break;
        size_t j = i;
        while (j < n && path[j] != '/')
            j++;

        char saved = path[j];
        path[j] = '\0';
        const char *comp = path + i;
        int next = resolve(fs->root_fd, path, O_PATH | O_DIRECTORY, 0, RES_BENEATH);
        if (next == -ENOENT && strcmp(comp, ".") != 0 && strcmp(comp, "..") != 0) {
            bool made = mkdirat(cur, comp, mode) == 0;

            if (!made && errno != EEXIST)
                next = -errno;
            else if (!made || (next = give_new_dir(fs, cur, comp)) == 0)
                next = resolve(cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW, 0, RES_LEAF);
            if (next == -ELOOP)
                next = -ENOTDIR; /* a symlink where a directory must be */
        }
        path[j] = saved;
        if (next < 0)
            return next;
        close(cur);
        cur = next;
        i = j;
    }
    *ret_fd = ws_steal_fd(&cur);
    return 0;
}

static int pfs_mkdir(struct ws_vfs *vfs, const char *path, bool parents, uint32_t mode)
{
    struct posixfs *fs = to_fs(vfs);
    struct split s;
    mode_t m = mode ? (mode & 0777) : 0755;
    int r = split_path(path, &s);
    if (r < 0)
        return r;

    if (s.leaf_is_dot) {
        if (!parents)
            return dot_leaf(fs, &s, -EEXIST, -EEXIST);
        ws_cleanup_fd int fd = -1;
        return make_dirs(fs, s.leaf, m, &fd);
    }

    ws_cleanup_fd int parent = -1;
    if (parents)
        r = make_dirs(fs, s.parent, 0755, &parent);
    else
        r = parent = open_parent(fs, &s);
    if (r < 0)
        return r;

    if (mkdirat(parent, s.leaf, m) == 0)
        return give_new_dir(fs, parent, s.leaf);
    r = -errno;
    if (r == -EEXIST && parents) {
        struct stat st;
        if (fstatat(parent, s.leaf, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
            return 0;
    }
    return r;
}

struct rm_frame {
    DIR *dir;
    char *name; /* this directory's name in the frame below (or the parent) */
    unsigned rescans;
};

static void rm_frame_pop(struct rm_frame *f)
{
    closedir(f->dir);
    free(f->name);
}

/* statx mount id of `name` in `dirfd` (name "" for dirfd itself), or the
 * device when the kernel does not report mount ids. */
static int mount_key(int dirfd, const char *name, uint64_t *ret_key, mode_t *ret_mode)
{
    struct statx stx;
    int flags = AT_SYMLINK_NOFOLLOW | (*name ? 0 : AT_EMPTY_PATH);
    if (statx(dirfd, name, flags, STATX_TYPE | STATX_MNT_ID, &stx) < 0)
        return -errno;
    *ret_key = (stx.stx_mask & STATX_MNT_ID)
                   ? stx.stx_mnt_id
                   : ((uint64_t)stx.stx_dev_major << 32 | stx.stx_dev_minor);
    *ret_mode = stx.stx_mode;
    return 0;
}

/* Removes the non-empty directory `name` in `parent_fd` and everything in
 * it, depth first with an explicit stack of directory fds. Symlinks are
 * unlinked, never followed; another mount below is -EBUSY, never entered. */
static int rm_tree(int parent_fd, const char *name, uint64_t *count)
{
    struct rm_frame *stack = NULL;
    size_t n = 0, cap = 0;
    uint64_t removed = 0, top_key;
    mode_t mode;
    int r;

    int fd = resolve(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, RES_LEAF);
    if (fd < 0)
        return fd == -ELOOP ? -ENOTDIR : fd;
    r = mount_key(fd, "", &top_key, &mode);
    if (r < 0) {
        close(fd);
        return r;
    }

    for (;;) {
        /* Push `fd` (owned) as directory `name`. */
        if (fd >= 0) {
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 16;
                struct rm_frame *ns = realloc(stack, ncap * sizeof(*ns));
                if (!ns) {
                    close(fd);
                    r = -ENOMEM;
                    goto out;
                }
                stack = ns;
                cap = ncap;
            }
            char *copy = strdup(name);
            DIR *dir = copy ? fdopendir(fd) : NULL;
            if (!dir) {
                r = copy ? -errno : -ENOMEM;
                free(copy);
                close(fd);
                goto out;
            }
            stack[n++] = (struct rm_frame){.dir = dir, .name = copy};
            fd = -1;
        }
        if (n == 0)
            break;

        struct rm_frame *top = &stack[n - 1];
        int top_fd = dirfd(top->dir);
        errno = 0;
        struct dirent *de = readdir(top->dir);
        if (!de) {
            if (errno) {
                r = -errno;
                goto out;
            }
            int below = n > 1 ? dirfd(stack[n - 2].dir) : parent_fd;
            if (unlinkat(below, top->name, AT_REMOVEDIR) < 0) {
                /* Something was added while we walked: look again. */
                if ((errno == ENOTEMPTY || errno == EEXIST) && top->rescans < RM_RESCANS) {
                    top->rescans++;
                    rewinddir(top->dir);
                    continue;
                }
                r = -errno;
                goto out;
            }
            removed++;
            rm_frame_pop(top);
            n--;
            continue;
        }
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;

        uint64_t key;
        r = mount_key(top_fd, de->d_name, &key, &mode);
        if (r == -ENOENT)
            continue;
        if (r < 0)
            goto out;
        if (S_ISDIR(mode)) {
            if (key != top_key) {
                r = -EBUSY;
                goto out;
            }
            if (n >= WS_POSIXFS_REMOVE_DEPTH_MAX) {
                r = -WS_ELIMIT;
                goto out;
            }
            fd = resolve(top_fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, RES_LEAF);
            if (fd >= 0) {
                name = de->d_name; /* copied at the push above */
                continue;
            }
            if (fd == -ENOENT)
                continue;
            if (fd != -ELOOP && fd != -ENOTDIR) {
                r = fd;
                goto out;
            }
            fd = -1; /* swapped for a non-directory: unlink it below */
        }
        if (unlinkat(top_fd, de->d_name, 0) < 0) {
            /* Gone, or swapped for a directory: the rescan handles it. */
            if (errno == ENOENT || errno == EISDIR)
                continue;
            r = -errno;
            goto out;
        }
        removed++;
    }
    *count += removed;
    r = 0;
out:
    while (n > 0)
        rm_frame_pop(&stack[--n]);
    free(stack);
    return r;
}

static int pfs_remove(struct ws_vfs *vfs, const char *path, bool recursive, uint64_t *ret_removed)
{
    struct posixfs *fs = to_fs(vfs);
    struct split s;
    struct stat st;
    uint64_t removed = 0;
    int r = split_path(path, &s);
    if (r < 0)
        return r;
    if (s.leaf_is_dot)
        return dot_leaf(fs, &s, -EXDEV, -EINVAL);

    ws_cleanup_fd int parent = open_parent(fs, &s);
    if (parent < 0)
        return parent;
    if (fstatat(parent, s.leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return -errno;

    if (!S_ISDIR(st.st_mode)) {
        if (s.must_be_dir)
            return -ENOTDIR;
        if (unlinkat(parent, s.leaf, 0) < 0)
            return -errno;
        removed = 1;
    } else if (unlinkat(parent, s.leaf, AT_REMOVEDIR) == 0) {
        removed = 1;
    } else {
        r = -errno;
        if (r == -EEXIST)
            r = -ENOTEMPTY;
        if (r != -ENOTEMPTY || !recursive)
            return r;
        r = rm_tree(parent, s.leaf, &removed);
        if (r < 0)
            return r;
    }
    if (ret_removed)
        *ret_removed = removed;
    return 0;
}

static int pfs_move(struct ws_vfs *vfs, const char *from, const char *to, bool replace)
{
    struct posixfs *fs = to_fs(vfs);
    struct split a, b;
    int r = split_path(from, &a);
    if (r < 0)
        return r;
    r = split_path(to, &b);
    if (r < 0)
        return r;
    if (a.leaf_is_dot)
        return dot_leaf(fs, &a, -EXDEV, -EINVAL);
    if (b.leaf_is_dot)
        return dot_leaf(fs, &b, -EXDEV, -EINVAL);

    ws_cleanup_fd int from_parent = open_parent(fs, &a);
    if (from_parent < 0)
        return from_parent;
    ws_cleanup_fd int to_parent = open_parent(fs, &b);
    if (to_parent < 0)
        return to_parent;

    if (a.must_be_dir || b.must_be_dir) {
        struct stat st;
        if (fstatat(from_parent, a.leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
            return -errno;
        if (!S_ISDIR(st.st_mode))
            return -ENOTDIR;
    }
    if (renameat2(from_parent, a.leaf, to_parent, b.leaf, replace ? 0 : RENAME_NOREPLACE) == 0)
        return 0;
    r = -errno;
    if (r == -EXDEV)
        return -EINVAL; /* across mounts inside the workspace, not an escape */
    if (r == -EEXIST && replace)
        return -ENOTEMPTY;
    return r;
}

/* ---- ownership ---- */

/* One entry of a directory being walked by ws_posixfs_chown_tree: gives it
 * to uid:gid unless it may stand for something outside the tree, and
 * returns in *ret_dir_fd (else -1) a directory to enter next. */
static int chown_entry(int dir_fd, const char *name, uint64_t tree_key, uid_t uid, gid_t gid,
                       int *ret_dir_fd)
{
    ws_cleanup_fd int fd = resolve(dir_fd, name, O_PATH | O_NOFOLLOW, 0, RES_LEAF);
    struct stat st;
    uint64_t key;
    mode_t mode;
    int r;

    *ret_dir_fd = -1;
    if (fd == -ENOENT)
        return 0; /* removed meanwhile */
    if (fd < 0)
        return fd;
    if (fstat(fd, &st) < 0)
        return -errno;
    /* A device node is a way into a disk or a terminal, and a second link
     * to a regular file may be a host file linked in: either would hand
     * something outside the tree to the uid. */
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || (S_ISREG(st.st_mode) && st.st_nlink > 1))
        return 0;
    if (S_ISDIR(st.st_mode)) {
        r = mount_key(fd, "", &key, &mode);
        if (r < 0)
            return r;
        if (key != tree_key)
            return 0; /* another mount: not ours to change */
    }
    if (fchownat(fd, "", uid, gid, AT_EMPTY_PATH) < 0)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        return 0;
    int dfd = resolve(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, RES_LEAF);
    if (dfd == -ENOENT || dfd == -ELOOP || dfd == -ENOTDIR)
        return 0; /* swapped meanwhile: not entered */
    if (dfd < 0)
        return dfd;
    struct stat again;
    if (fstat(dfd, &again) < 0 || again.st_dev != st.st_dev || again.st_ino != st.st_ino) {
        close(dfd);
        return 0;
    }
    *ret_dir_fd = dfd;
    return 0;
}

int ws_posixfs_chown_tree(int dir_fd, uid_t uid, gid_t gid)
{
    DIR *stack[WS_POSIXFS_REMOVE_DEPTH_MAX];
    size_t n = 0;
    uint64_t key;
    mode_t mode;
    int r;

    int fd = resolve(dir_fd, ".", O_RDONLY | O_DIRECTORY, 0, RES_BENEATH);
    if (fd < 0)
        return fd;
    r = mount_key(fd, "", &key, &mode);
    if (r == 0 && fchown(fd, uid, gid) < 0)
        r = -errno;
    if (r == 0 && !(stack[n] = fdopendir(fd)))
        r = -errno;
    if (r < 0) {
        close(fd);
        return r;
    }
    n++;
    while (n > 0 && r == 0) {
        DIR *top = stack[n - 1];
        errno = 0;
        struct dirent *de = readdir(top);
        if (!de) {
            r = errno ? -errno : 0;
            closedir(top);
            n--;
            continue;
        }
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        r = chown_entry(dirfd(top), de->d_name, key, uid, gid, &fd);
        if (fd < 0)
            continue;
        /* Deeper than the stack: that directory itself is changed, what is
         * below it keeps its owners. */
        if (n == WS_ELEMENTSOF(stack)) {
            close(fd);
            continue;
        }
        stack[n] = fdopendir(fd);
        if (!stack[n]) {
            r = -errno;
            close(fd);
            continue;
        }
        n++;
    }
    while (n > 0)
        closedir(stack[--n]);
    return r;
}

/* ---- atomic writes ---- */

static void random_tmp_name(char out[TMP_NAME_LEN + 1])
{
    static atomic_uint_fast64_t counter;
    uint64_t v;

    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        v = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid() ^
            (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull);
    }
    snprintf(out, TMP_NAME_LEN + 1, TMP_PREFIX "%016llx", (unsigned long long)v);
}

/* The write_begin/write_commit checks on the existing leaf: returns 1 with
 * *ret_st when a replaceable file exists, 0 when there is none. */
static int check_leaf(int parent_fd, const char *leaf, bool if_absent, struct stat *ret_st)
{
    struct stat st;
    if (fstatat(parent_fd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (S_ISLNK(st.st_mode))
        return -WS_ESYMLINK_LEAF;
    if (S_ISDIR(st.st_mode))
        return -EISDIR;
    if (!S_ISREG(st.st_mode))
        return -WS_ESPECIAL;
    if (st.st_nlink > 1)
        return -WS_EHARDLINK;
    if (if_absent)
        return -EEXIST;
    *ret_st = st;
    return 1;
}

/* Creates the temp file in the parent: unnamed when the file system has
 * O_TMPFILE, else under a fresh hidden name. */
static int create_tmp(struct pfs_writer *w)
{
    if (!(w->fs->flags & WS_POSIXFS_NO_TMPFILE)) {
        int fd = resolve(w->parent_fd, ".", O_TMPFILE | O_WRONLY, 0600, RES_BENEATH);
        if (fd >= 0) {
            w->tmp_fd = fd;
            return 0;
        }
        /* EISDIR: a kernel that only sees O_DIRECTORY in O_TMPFILE. */
        if (fd != -EOPNOTSUPP && fd != -EISDIR && fd != -EINVAL)
            return fd;
    }
    for (int i = 0; i < TMP_NAME_TRIES; i++) {
        random_tmp_name(w->tmp_name);
        int fd = resolve(w->parent_fd, w->tmp_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600,
                         RES_LEAF);
        if (fd >= 0) {
            w->tmp_fd = fd;
            w->tmp_named = true;
            return 0;
        }
        if (fd != -EEXIST)
            return fd;
    }
    return -EEXIST;
}

/* create_tmp, then gives the file to the instance's owner before
 * write_commit links it under the leaf. */
static int make_tmp(struct pfs_writer *w)
{
    int r = create_tmp(w);

    if (r < 0)
        return r;
    r = give(w->fs, w->tmp_fd);
    if (r < 0) {
        if (w->tmp_named)
            (void)unlinkat(w->parent_fd, w->tmp_name, 0);
        w->tmp_named = false;
        close(w->tmp_fd);
        w->tmp_fd = -1;
    }
    return r;
}

/* Gives the O_TMPFILE a hidden name in the parent, ready for renameat. */
static int link_tmp(struct pfs_writer *w)
{
    for (int i = 0; i < TMP_NAME_TRIES; i++) {
        random_tmp_name(w->tmp_name);
        if (linkat(w->tmp_fd, "", w->parent_fd, w->tmp_name, AT_EMPTY_PATH) == 0)
            goto linked;
        if (errno == EEXIST)
            continue;
        if (errno != ENOENT && errno != EPERM)
            return -errno;
        /* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH before Linux 6.10. */
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", w->tmp_fd);
        if (linkat(AT_FDCWD, proc, w->parent_fd, w->tmp_name, AT_SYMLINK_FOLLOW) == 0)
            goto linked;
        if (errno != EEXIST)
            return -errno;
    }
    return -EEXIST;
linked:
    w->tmp_named = true;
    return 0;
}

static void free_writer(struct pfs_writer *w)
{
    int saved = errno;
    if (w->tmp_named)
        unlinkat(w->parent_fd, w->tmp_name, 0);
    if (w->leaf_made)
        unlinkat(w->parent_fd, w->leaf, 0);
    if (w->tmp_fd >= 0)
        close(w->tmp_fd);
    if (w->parent_fd >= 0)
        close(w->parent_fd);
    free(w);
    errno = saved;
}

static int pfs_write_begin(struct ws_vfs *vfs, const char *path, const struct ws_write_opts *opts,
                           struct ws_vfs_writer **ret_writer)
{
    static const struct ws_write_opts defaults;
    struct posixfs *fs = to_fs(vfs);
    struct pfs_writer *w = NULL;
    struct split s;
    struct stat st;
    int r;

    if (!opts)
        opts = &defaults;
    r = split_path(path, &s);
    if (r < 0)
        return r;
    if (s.leaf_is_dot)
        return dot_leaf(fs, &s, -EISDIR, -EISDIR);

    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->fs = fs;
    w->parent_fd = -1;
    w->tmp_fd = -1;
    w->opts = *opts;
    /* split_path bounded the leaf to WS_VFS_NAME_MAX. */
    memcpy(w->leaf, s.leaf, strlen(s.leaf) + 1);

    if (opts->create_parents)
        r = make_dirs(fs, s.parent, 0755, &w->parent_fd);
    else
        r = w->parent_fd = open_parent(fs, &s);
    if (r < 0)
        goto out;

    if (opts->fresh && !s.must_be_dir) {
        r = resolve(w->parent_fd, w->leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600,
                    RES_LEAF);
        if (r < 0)
            goto out;
        w->tmp_fd = r;
        w->leaf_made = true;
        r = give(w->fs, w->tmp_fd);
        if (r < 0)
            goto out;
        *ret_writer = (struct ws_vfs_writer *)w;
        return 0;
    }
    r = check_leaf(w->parent_fd, w->leaf, opts->if_absent, &st);
    if (r < 0)
        goto out;
    if (s.must_be_dir) {
        r = r ? -ENOTDIR : -EISDIR;
        goto out;
    }
    r = make_tmp(w);
    if (r < 0)
        goto out;

    *ret_writer = (struct ws_vfs_writer *)w;
    w = NULL;
    r = 0;
out:
    if (w)
        free_writer(w);
    return r;
}

static int pfs_write(struct ws_vfs_writer *ww, const void *buf, size_t len)
{
    struct pfs_writer *w = (struct pfs_writer *)ww;
    int r;

    if (w->error)
        return w->error;
    if (w->opts.max_size && len > w->opts.max_size - w->size)
        return w->error = -EFBIG;
    r = ws_write_all(w->tmp_fd, buf, len);
    if (r < 0)
        return w->error = r;
    w->size += (uint64_t)len;
    return 0;
}

static int pfs_write_commit(struct ws_vfs_writer *ww, struct ws_stat *ret_st)
{
    struct pfs_writer *w = (struct pfs_writer *)ww;
    struct stat old, st;
    mode_t mode;
    int r;

    if (w->error) {
        r = w->error;
        goto out;
    }
    if (w->leaf_made) {
        /* opts.fresh: already under its name. */
        mode = w->opts.mode ? w->opts.mode & 0777 : 0644;
        if (fchmod(w->tmp_fd, mode) < 0 || (!w->opts.no_sync && fsync(w->tmp_fd) < 0) ||
            fstat(w->tmp_fd, &st) < 0) {
            r = -errno;
            goto out;
        }
        if (w->opts.no_sync)
            (void)sync_file_range(w->tmp_fd, 0, 0, SYNC_FILE_RANGE_WRITE);
        w->leaf_made = false;
        if (ret_st)
            to_ws_stat(&st, ret_st);
        r = 0;
        goto out;
    }
    r = check_leaf(w->parent_fd, w->leaf, w->opts.if_absent, &old);
    if (r < 0)
        goto out;

    if (w->opts.mode)
        mode = w->opts.mode & 0777;
    else
        mode = r == 1 ? (old.st_mode & 0777) : 0644;
    /* Keep the owner where we may (the server runs as root); otherwise the
     * file simply becomes ours. Before fchmod: chown clears set-id bits. */
    if (r == 1 && fchown(w->tmp_fd, old.st_uid, old.st_gid) < 0) {
        /* Not permitted: the new file keeps our owner. */
    }
    if (fchmod(w->tmp_fd, mode) < 0 || (!w->opts.no_sync && fsync(w->tmp_fd) < 0)) {
        r = -errno;
        goto out;
    }
    /* Not flushed now, but started: the caller's sync at the end of the
     * batch then waits for little, and the disk works while the next
     * files are written. */
    if (w->opts.no_sync)
        (void)sync_file_range(w->tmp_fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    if (!w->tmp_named) {
        r = link_tmp(w);
        if (r < 0)
            goto out;
    }
    if (renameat2(w->parent_fd, w->tmp_name, w->parent_fd, w->leaf,
                  w->opts.if_absent ? RENAME_NOREPLACE : 0) < 0) {
        r = -errno;
        goto out;
    }
    w->tmp_named = false;

    if (fstat(w->tmp_fd, &st) < 0) {
        r = -errno;
        goto out;
    }
    /* Durability of the rename. Best effort: the new content is already
     * visible, and a crash before this leaves old or new, both whole. */
    int dfd =
        w->opts.no_sync ? -1 : resolve(w->parent_fd, ".", O_RDONLY | O_DIRECTORY, 0, RES_BENEATH);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    if (ret_st)
        to_ws_stat(&st, ret_st);
    r = 0;
out:
    free_writer(w);
    return r;
}

static void pfs_write_abort(struct ws_vfs_writer *ww)
{
    if (ww)
        free_writer((struct pfs_writer *)ww);
}

/* ---- trees ---- */

static ssize_t pfs_readlink(struct ws_vfs *vfs, const char *path, char *buf, size_t len)
{
    struct split s;
    int r = split_path(path, &s);
    if (r < 0)
        return r;
    if (s.leaf_is_dot)
        return -EINVAL;
    ws_cleanup_fd int parent = open_parent(to_fs(vfs), &s);
    if (parent < 0)
        return parent;
    ssize_t n = readlinkat(parent, s.leaf, buf, len);
    if (n < 0)
        return -errno;
    if ((size_t)n == len) {
        /* Exactly len, or cut: the link's size says which. */
        struct stat st;
        if (fstatat(parent, s.leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
            return -errno;
        if (st.st_size < 0 || (uint64_t)st.st_size > len)
            return -ENAMETOOLONG;
    }
    return n;
}

static int pfs_symlink(struct ws_vfs *vfs, const char *target, const char *path)
{
    struct posixfs *fs = to_fs(vfs);
    struct split s;
    int r = split_path(path, &s);
    if (r < 0)
        return r;
    if (!target || !*target || strlen(target) >= WS_VFS_PATH_MAX)
        return -WS_EBADPATH;
    if (s.leaf_is_dot)
        return -EEXIST;
    ws_cleanup_fd int parent = open_parent(fs, &s);
    if (parent < 0)
        return parent;
    if (symlinkat(target, parent, s.leaf) < 0)
        return -errno;
    if ((fs->uid != (uid_t)-1 || fs->gid != (gid_t)-1) &&
        fchownat(parent, s.leaf, fs->uid, fs->gid, AT_SYMLINK_NOFOLLOW) < 0) {
        r = -errno;
        (void)unlinkat(parent, s.leaf, 0);
        return r;
    }
    return 0;
}

/* Opens `path` O_PATH without following its leaf: the target of a change
 * of mode or times, made through /proc/self/fd so that a symlink swapped
 * in after the open is never followed. */
static int open_leaf_path(struct posixfs *fs, const char *path, int *ret_parent, int *ret_fd,
                          struct split *s)
{
    int r = split_path(path, s);
    if (r < 0)
        return r;
    *ret_parent = -1;
    if (s->leaf_is_dot) {
        r = resolve(fs->root_fd, s->leaf, O_PATH | O_DIRECTORY, 0, RES_BENEATH);
    } else {
        int parent = open_parent(fs, s);
        if (parent < 0)
            return parent;
        /* A symlink leaf gives an fd of the link itself. */
        r = resolve(parent, s->leaf, O_PATH | O_NOFOLLOW, 0, RES_LEAF);
        if (r < 0) {
            close(parent);
            return r;
        }
        *ret_parent = parent;
    }
    if (r < 0)
        return r;
    *ret_fd = r;
    return 0;
}

static int pfs_set_mode(struct ws_vfs *vfs, const char *path, uint32_t mode)
{
    struct split s;
    int parent_raw, fd_raw;
    int r = open_leaf_path(to_fs(vfs), path, &parent_raw, &fd_raw, &s);
    if (r < 0)
        return r;
    ws_cleanup_fd int parent = parent_raw;
    ws_cleanup_fd int fd = fd_raw;
    struct stat st;
    (void)parent; /* used by its cleanup alone */
    if (fstat(fd, &st) < 0)
        return -errno;
    if (S_ISLNK(st.st_mode))
        return -WS_ESYMLINK_LEAF;
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        return -WS_ESPECIAL;
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    return chmod(proc, mode & 07777) < 0 ? -errno : 0;
}

static int pfs_set_mtime(struct ws_vfs *vfs, const char *path, int64_t mtime_ns)
{
    struct split s;
    int parent_raw, fd_raw;
    int r = open_leaf_path(to_fs(vfs), path, &parent_raw, &fd_raw, &s);
    if (r < 0)
        return r;
    ws_cleanup_fd int parent = parent_raw;
    ws_cleanup_fd int fd = fd_raw;
    int64_t sec = mtime_ns / 1000000000, nsec = mtime_ns % 1000000000;
    if (nsec < 0) {
        nsec += 1000000000;
        sec--;
    }
    const struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = sec, .tv_nsec = nsec}};
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (S_ISLNK(st.st_mode))
        /* The link's own time: a swap after the open changes the new
         * entry's, still never a target's. */
        return utimensat(parent, s.leaf, ts, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    return utimensat(AT_FDCWD, proc, ts, 0) < 0 ? -errno : 0;
}

static int pfs_file_fd(struct ws_vfs_file *wf)
{
    return ((struct pfs_file *)wf)->fd;
}

static int pfs_writer_fd(struct ws_vfs_writer *ww)
{
    return ((struct pfs_writer *)ww)->tmp_fd;
}

static int pfs_sync(struct ws_vfs *vfs)
{
    return syncfs(to_fs(vfs)->root_fd) < 0 ? -errno : 0;
}

static int pfs_open_dir_fd(struct ws_vfs *vfs, const char *path, int *ret_fd)
{
    return open_dir_path(to_fs(vfs), path, ret_fd);
}

/* ---- instance ---- */

static void pfs_destroy(struct ws_vfs *vfs)
{
    struct posixfs *fs = to_fs(vfs);
    if (!fs)
        return;
    int saved = errno;
    close(fs->root_fd);
    free(fs);
    errno = saved;
}

static const struct ws_vfs_ops posixfs_ops = {
    .stat = pfs_stat,
    .opendir = pfs_opendir,
    .opendir_at = pfs_opendir_at,
    .readdir = pfs_readdir,
    .stat_at = pfs_stat_at,
    .closedir = pfs_closedir,
    .open_read = pfs_open_read,
    .open_read_at = pfs_open_read_at,
    .pread = pfs_pread,
    .close = pfs_close,
    .write_begin = pfs_write_begin,
    .write = pfs_write,
    .write_commit = pfs_write_commit,
    .write_abort = pfs_write_abort,
    .mkdir = pfs_mkdir,
    .remove = pfs_remove,
    .move = pfs_move,
    .destroy = pfs_destroy,
    .readlink = pfs_readlink,
    .symlink = pfs_symlink,
    .set_mode = pfs_set_mode,
    .set_mtime = pfs_set_mtime,
    .file_fd = pfs_file_fd,
    .writer_fd = pfs_writer_fd,
    .open_dir_fd = pfs_open_dir_fd,
    .sync = pfs_sync,
};

int ws_posixfs_open_with(int dirfd, const char *dir_path, unsigned flags, struct ws_vfs **ret)
{
    return ws_posixfs_open_owned(dirfd, dir_path, flags, (uid_t)-1, (gid_t)-1, ret);
}

int ws_posixfs_open_owned(int dirfd, const char *dir_path, unsigned flags, uid_t uid, gid_t gid,
                          struct ws_vfs **ret)
{
    struct stat st;

    if (!dir_path || !*dir_path || (flags & ~(unsigned)WS_POSIXFS_NO_TMPFILE))
        return -EINVAL;
    ws_cleanup_fd int fd = openat(dirfd, dir_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0)
        return -errno;

    /* No openat2, no confinement: refuse rather than fall back. */
    ws_cleanup_fd int probe = resolve(fd, ".", O_PATH | O_DIRECTORY, 0, RES_BENEATH);
    if (probe < 0)
        return probe;

    struct posixfs *fs = calloc(1, sizeof(*fs));
    if (!fs)
        return -ENOMEM;
    fs->base.ops = &posixfs_ops;
    fs->root_dev = st.st_dev;
    fs->root_ino = st.st_ino;
    fs->flags = flags;
    fs->uid = uid;
    fs->gid = gid;
    fs->root_fd = ws_steal_fd(&fd);
    *ret = &fs->base;
    return 0;
}

int ws_posixfs_open(int dirfd, const char *dir_path, struct ws_vfs **ret)
{
    return ws_posixfs_open_with(dirfd, dir_path, 0, ret);
}

int ws_posixfs_open_dir_fd(struct ws_vfs *vfs, const char *path, int *ret_fd)
{
    if (!vfs || vfs->ops != &posixfs_ops)
        return -EINVAL;
    return open_dir_path(to_fs(vfs), path, ret_fd);
}
