/* The host file system behind a workspace: a directory held open by a root
 * fd for the instance's life, every lookup confined beneath it.
 *
 * Each path is resolved with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
 * relative to the root fd; an operation on a leaf (create, remove, rename,
 * lstat) opens the leaf's parent that way and then acts on the single leaf
 * name with *at() calls that never follow it. Symlinks in the middle of a
 * path are followed while they stay beneath the root; anything that would
 * leave it (`..`, absolute paths, absolute or escaping symlinks, magic links
 * such as /proc/self/root, a directory swapped for a symlink mid-call) fails
 * with -EXDEV without touching anything outside.
 *
 * Requires Linux >= 5.6 (openat2); ws_posixfs_open() fails with -ENOSYS on
 * older kernels rather than falling back to weaker checks.
 *
 * Paths given to the operations should have passed ws_vfs_check_path(), but
 * unchecked input is safe: NULL or "" is -WS_EBADPATH, a path longer than
 * WS_VFS_PATH_MAX or a component longer than WS_VFS_NAME_MAX is
 * -ENAMETOOLONG, an absolute path is -EXDEV. Trailing slashes require the
 * leaf to be a directory (a symlink leaf is not followed to find one). A leaf
 * of "." or ".." names the directory itself: it can be stat'ed and opened,
 * but not removed or moved (-EINVAL, or -EXDEV when it is the root itself)
 * nor written (-EISDIR). The caller must reject strings with embedded NUL
 * bytes before they become C strings.
 *
 * Error numbers beyond vfs.h that callers may see:
 *   -EAGAIN   openat2 kept reporting a concurrent rename that it could not
 *             prove harmless while resolving `..` (retried
 *             WS_POSIXFS_RESOLVE_RETRIES times first); retrying may succeed.
 *   -ESTALE   open_read: the file was swapped between the type check and the
 *             open, twice in a row.
 *   -WS_ELIMIT  recursive remove met a tree deeper than
 *             WS_POSIXFS_REMOVE_DEPTH_MAX (what was already removed stays
 *             removed).
 *   -EBUSY    remove/move of a mount point.
 *   -EINVAL   move of a directory into itself, or across mounts inside the
 *             workspace (the kernel's EXDEV there is not a path escape).
 *
 * mkdir: mode 0 means 0755, else mode & 0777 (the umask applies);
 * directories made on the way by mkdir with parents or by create_parents are
 * 0755. Like mkdir -p, a failure part way (a later component escapes or is
 * not a directory) leaves the directories already made; all of them are
 * inside the workspace. With parents, an existing directory at the end is
 * fine but a symlink to one is -EEXIST (the leaf is never followed).
 *
 * Writes: write_begin creates an unnamed O_TMPFILE in the leaf's parent
 * (or, where the file system lacks O_TMPFILE, a hidden ".ws-tmp-*" file
 * created with O_EXCL); write_commit fsyncs it, links it under a hidden
 * temporary name and renames that over the leaf, then fsyncs the directory
 * (best effort: the rename has already made the new content visible). A
 * crash leaves either the old or the new content. The mode is opts->mode &
 * 0777 when given, else an existing file's permission bits (set-id and
 * sticky bits dropped), else 0644; an existing file's owner is kept when the
 * server is allowed to (root).
 *
 * Owner: an instance opened with an owner (ws_posixfs_open_owned) gives
 * every file and directory it creates to that uid and gid before the name
 * can be used: a write's temporary file is chowned before it is linked, a
 * directory is chowned through an fd that did not follow a symlink, right
 * after its mkdir (a failed chown removes the directory again). A file that
 * replaces an existing one keeps the old owner as above. Without an owner,
 * what it creates is the server's.
 *
 * Thread safety: the struct ws_vfs may be used from many threads at once;
 * each dir, file or writer handle by one thread at a time.
 */
#ifndef WS_POSIX_FS_H
#define WS_POSIX_FS_H

#include <sys/types.h>

#include "server/base/errors.h"
#include "server/vfs/vfs.h"

/* openat2 -EAGAIN retries before giving up with -EAGAIN. */
#define WS_POSIXFS_RESOLVE_RETRIES 64
/* Directory levels a recursive remove descends (one fd per level). */
#define WS_POSIXFS_REMOVE_DEPTH_MAX 256

/* ws_posixfs_open_with() flags. */
enum {
    /* Never use O_TMPFILE; always the named hidden temp file fallback. For
     * file systems whose O_TMPFILE misbehaves, and for tests. */
    WS_POSIXFS_NO_TMPFILE = 1u << 0,
};

/* Opens `dir_path` (relative to `dirfd`, which may be AT_FDCWD; the caller
 * keeps `dirfd`) as a workspace root. The root itself must be a directory
 * and not a symlink (-ENOTDIR / -ELOOP). Returns 0 and the new instance in
 * *ret (free with ret->ops->destroy), or a negated errno. */
int ws_posixfs_open(int dirfd, const char *dir_path, struct ws_vfs **ret);
/* Same, with WS_POSIXFS_* flags. Unknown flags are -EINVAL. */
int ws_posixfs_open_with(int dirfd, const char *dir_path, unsigned flags, struct ws_vfs **ret);

/* Same, with an owner for everything it creates (see above); (uid_t)-1
 * and (gid_t)-1: none, as ws_posixfs_open_with. Creating then needs
 * CAP_CHOWN (a failed chown fails the operation). */
int ws_posixfs_open_owned(int dirfd, const char *dir_path, unsigned flags, uid_t uid, gid_t gid,
                          struct ws_vfs **ret);

/* Gives the directory `dir_fd` (not consumed) and everything beneath it to
 * uid:gid, never following a symlink: symlinks are changed themselves,
 * directories are entered through fds opened without following, and
 * another mount below is not entered. A regular file with more than one
 * link and a device node are left as they are: either may stand for
 * something outside the tree (a hard link to a host file, a disk). A tree
 * deeper than WS_POSIXFS_REMOVE_DEPTH_MAX keeps its deeper levels' owners.
 * Returns 0 or the first -errno (what was changed stays changed). */
int ws_posixfs_chown_tree(int dir_fd, uid_t uid, gid_t gid);

/* Opens the workspace directory `path` (confined like every lookup; a
 * symlink leaf is -WS_ESYMLINK_LEAF) and returns an O_RDONLY | O_DIRECTORY
 * | O_CLOEXEC fd the caller owns in *ret_fd, e.g. for a child's working
 * directory. -EINVAL when `fs` is not a posixfs instance. */
int ws_posixfs_open_dir_fd(struct ws_vfs *fs, const char *path, int *ret_fd);

#endif
