/* The file-system interface every provider's storage implements.
 *
 * Two implementations: server/posix/fs.c (a host directory held open by a
 * root fd, every lookup confined with openat2) and
 * server/providers/memory.c (an in-process tree). The generic operations
 * built on top (atomic conditional writes, edit, listing, glob, grep) live
 * in server/vfs/ops.h and are written once against this table.
 *
 * Paths given to the path-taking operations are workspace-relative,
 * '/'-separated, already checked by ws_vfs_check_path() (non-empty, not
 * absolute, <= WS_VFS_PATH_MAX bytes, components <= WS_VFS_NAME_MAX). "."
 * is the root. Implementations still refuse anything that would resolve
 * outside the root (-EXDEV), whatever the path or a concurrent change of
 * the tree.
 *
 * Names given to the *_at operations are single components as returned by
 * readdir (no '/', not "." or ".."); they are never followed if they are
 * symlinks.
 *
 * Return values: >= 0 on success, a negated errno or WS_E* number
 * (server/base/errors.h) on failure. Out-parameters (ret_*) are written
 * only on success.
 *
 * Thread safety: a struct ws_vfs may be used from many threads at once;
 * a dir, file or writer handle by one thread at a time.
 */
#ifndef WS_VFS_VFS_H
#define WS_VFS_VFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define WS_VFS_PATH_MAX 4096
#define WS_VFS_NAME_MAX 255

enum ws_ftype {
    WS_FT_UNKNOWN = 0,
    WS_FT_REGULAR = 1,
    WS_FT_DIRECTORY = 2,
    WS_FT_SYMLINK = 3,
    WS_FT_OTHER = 4, /* FIFO, socket, device */
};

struct ws_stat {
    enum ws_ftype type;
    uint64_t size;
    uint32_t mode; /* permission bits only (07777) */
    int64_t mtime_ns;
    uint64_t nlink;
    /* Identity within the storage: two names of one file (hard links)
     * have the same ino; 0 when the storage cannot tell. */
    uint64_t ino;
    /* When the file last changed in any way (content, mode, times, name),
     * on the wall clock; nothing can set it back. 0 when the storage
     * cannot tell. */
    int64_t ctime_ns;
};

struct ws_dirent {
    const char *name; /* valid until the next readdir/closedir */
    size_t name_len;
    enum ws_ftype type;
};

struct ws_write_opts {
    uint32_t mode;       /* 0: keep an existing file's mode, else 0644 */
    bool create_parents; /* mkdir -p the parent (0755) */
    bool if_absent;      /* -EEXIST when the file exists */
    uint64_t max_size;   /* write() fails with -EFBIG past this; 0 = none */
    /* Skip the flush to disk at commit (the write-back only starts): the
     * caller flushes many new files at once with the storage's sync entry
     * (archives, snapshots). */
    bool no_sync;
    /* Nothing is at the path, and its directory is the caller's alone
     * until the caller publishes it (a staging directory): the file is
     * made under its own name at once, without a temporary file and a
     * rename. -EEXIST when something is there; an aborted or failed write
     * removes the file. Storage may ignore it. */
    bool fresh;
};

struct ws_vfs;
struct ws_vfs_dir;
struct ws_vfs_file;
struct ws_vfs_writer;
struct ws_vfs_sub;

/* A change a storage reports to its subscribers (see subscribe). */
enum ws_vfs_change {
    WS_VFS_CREATED = 1,
    WS_VFS_MODIFIED,
    WS_VFS_REMOVED,
    WS_VFS_MOVED, /* from_path -> path */
};

/* Called by the storage, with its own lock held, for each change: it must
 * return quickly and never call into the storage. Paths are
 * workspace-relative and normalized ("." is never reported); from_path is
 * NULL unless MOVED. A recursive remove reports each entry removed. */
typedef void (*ws_vfs_change_cb)(void *userdata, enum ws_vfs_change what, enum ws_ftype type,
                                 const char *path, const char *from_path);

struct ws_vfs_ops {
    /* lstat: the leaf is never followed. */
    int (*stat)(struct ws_vfs *fs, const char *path, struct ws_stat *ret_st);

    /* Opens a directory for reading. A symlink leaf is -WS_ESYMLINK_LEAF,
     * a non-directory -ENOTDIR. */
    int (*opendir)(struct ws_vfs *fs, const char *path, struct ws_vfs_dir **ret_dir);
    /* Child directory of an open one; a symlink or non-directory child is
     * -ENOTDIR (never followed). */
    int (*opendir_at)(struct ws_vfs_dir *dir, const char *name, struct ws_vfs_dir **ret_dir);
    /* Next entry, in no particular order, "." and ".." skipped: returns 1
     * and fills *ret_ent, 0 at the end. */
    int (*readdir)(struct ws_vfs_dir *dir, struct ws_dirent *ret_ent);
    /* lstat of a child. */
    int (*stat_at)(struct ws_vfs_dir *dir, const char *name, struct ws_stat *ret_st);
    /* Accepts NULL. */
    void (*closedir)(struct ws_vfs_dir *dir);

    /* Opens a regular file for reading, never blocking: symlink leaf
     * -WS_ESYMLINK_LEAF, FIFO/socket/device -WS_ESPECIAL, directory
     * -EISDIR. *ret_st describes the opened file. */
    int (*open_read)(struct ws_vfs *fs, const char *path, struct ws_vfs_file **ret_file,
                     struct ws_stat *ret_st);
    /* Same for a child of an open directory. */
    int (*open_read_at)(struct ws_vfs_dir *dir, const char *name, struct ws_vfs_file **ret_file,
                        struct ws_stat *ret_st);
    /* Returns bytes read (0 at end of file). */
    ssize_t (*pread)(struct ws_vfs_file *file, void *buf, size_t len, uint64_t offset);
    /* Accepts NULL. */
    void (*close)(struct ws_vfs_file *file);

    /* Starts an atomic replace of `path`. Checks now: parent exists (or is
     * created), leaf is not a symlink (-WS_ESYMLINK_LEAF), directory
     * (-EISDIR), special file (-WS_ESPECIAL) or multiply linked file
     * (-WS_EHARDLINK); if_absent (-EEXIST). Nothing is visible until
     * commit. */
    int (*write_begin)(struct ws_vfs *fs, const char *path, const struct ws_write_opts *opts,
                       struct ws_vfs_writer **ret_writer);
    /* Appends; -EFBIG once the total passes opts->max_size. */
    int (*write)(struct ws_vfs_writer *w, const void *buf, size_t len);
    /* Makes the new content visible atomically (fsync + rename on disk)
     * and frees the writer whatever the result. The leaf checks of
     * write_begin are repeated first. */
    int (*write_commit)(struct ws_vfs_writer *w, struct ws_stat *ret_st);
    /* Drops the new content, frees the writer; the old content stays.
     * Accepts NULL. */
    void (*write_abort)(struct ws_vfs_writer *w);

    /* mkdir; with parents, existing directories along the way (and at the
     * end) are fine. Without, an existing path is -EEXIST. */
    int (*mkdir)(struct ws_vfs *fs, const char *path, bool parents, uint32_t mode);
    /* Removes a file, symlink or directory (non-empty needs recursive, else
     * -ENOTEMPTY). Never follows symlinks. "." is -EXDEV. */
    int (*remove)(struct ws_vfs *fs, const char *path, bool recursive, uint64_t *ret_removed);
    /* rename; an existing destination is -EEXIST unless replace. "." as
     * either end is -EXDEV. */
    int (*move)(struct ws_vfs *fs, const char *from, const char *to, bool replace);

    /* Frees the instance (storage itself is not removed). */
    void (*destroy)(struct ws_vfs *fs);

    /* ---- trees (archives, snapshots) ---- */

    /* Reads the target of the symlink `path` (its leaf is not followed;
     * anything but a symlink is -EINVAL) into buf, not NUL-terminated.
     * Returns the target's length; a target longer than len is
     * -ENAMETOOLONG. */
    ssize_t (*readlink)(struct ws_vfs *fs, const char *path, char *buf, size_t len);
    /* Makes the symlink `path` -> `target` (stored verbatim, never
     * followed by any vfs operation). The parent must exist; an existing
     * path is -EEXIST. */
    int (*symlink)(struct ws_vfs *fs, const char *target, const char *path);
    /* Sets the permission bits (07777 masked by the storage) of a file or
     * directory; a symlink leaf is -WS_ESYMLINK_LEAF. */
    int (*set_mode)(struct ws_vfs *fs, const char *path, uint32_t mode);
    /* Sets the modification time of a file, directory or symlink (the
     * link itself). */
    int (*set_mtime)(struct ws_vfs *fs, const char *path, int64_t mtime_ns);
    /* The host file descriptor behind an open file or a writer's new
     * content, for the storage's own copy-on-write clones (FICLONE): owned
     * by the handle, valid while it is open. -EOPNOTSUPP when the storage
     * has none (memory). NULL entries mean the same. */
    int (*file_fd)(struct ws_vfs_file *file);
    int (*writer_fd)(struct ws_vfs_writer *w);
    /* Flushes everything written to the storage to disk (syncfs). NULL
     * when there is nothing to flush. */
    int (*sync)(struct ws_vfs *fs);

    /* ---- watching ---- */

    /* A storage on a host directory: opens the directory `path` (never
     * through a symlink, confined like every lookup) as an O_PATH
     * descriptor the caller owns, for inotify. -EOPNOTSUPP (or a NULL
     * entry) when the storage is not a host directory. */
    int (*open_dir_fd)(struct ws_vfs *fs, const char *path, int *ret_fd);
    /* A storage whose changes only it sees (memory): calls cb for every
     * change from now until unsubscribe, which returns only once no call
     * of cb is running. NULL when the storage has no such reports. */
    int (*subscribe)(struct ws_vfs *fs, ws_vfs_change_cb cb, void *userdata,
                     struct ws_vfs_sub **ret_sub);
    void (*unsubscribe)(struct ws_vfs_sub *sub);
};

/* Every implementation's instance struct starts with this. */
struct ws_vfs {
    const struct ws_vfs_ops *ops;
};

/* Validates a client path before any lookup: 0, or -WS_EBADPATH (empty,
 * longer than WS_VFS_PATH_MAX, a component longer than WS_VFS_NAME_MAX),
 * -EXDEV (absolute). ".." is left to the resolver, which refuses escapes. */
int ws_vfs_check_path(const char *path);

/* The server's own transient entries inside a workspace, each named by a
 * prefix and 16 lowercase hex digits: a write's temporary file, the
 * staging and trash directories of WriteArchive, the build and the old
 * tree of a Restore. Snapshots and tree copies leave them out. */
#define WS_VFS_TMP_PREFIX      ".ws-tmp-"
#define WS_VFS_STAGE_PREFIX    ".ws-stage-"
#define WS_VFS_TRASH_PREFIX    ".ws-trash-"
#define WS_VFS_RESTORE_PREFIX  ".workspaced-restore-"
#define WS_VFS_REPLACED_PREFIX ".workspaced-replaced-"
#define WS_VFS_TRANSIENT_HEX   16
/* Whether `name` (one component, len bytes) is one of them; `prefix`,
 * when not NULL, only that kind. */
bool ws_vfs_transient_name(const char *name, size_t len, const char *prefix);

#endif
