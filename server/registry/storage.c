#include "server/registry/storage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/base/io.h"
#include "server/posix/fs.h"

int ws_storage_write_file(int dir_fd, const char *name, const char *tmp_name, const uint8_t *data,
                          size_t len)
{
    int fd, err;

    fd = openat(dir_fd, tmp_name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    err = ws_write_all(fd, data, len);
    if (err < 0)
        goto out;
    if (fsync(fd) < 0) {
        err = -errno;
        goto out;
    }
    if (renameat(dir_fd, tmp_name, dir_fd, name) < 0) {
        err = -errno;
        goto out;
    }
    fsync(dir_fd);
out:
    close(fd);
    if (err < 0)
        unlinkat(dir_fd, tmp_name, 0);
    return err;
}

int ws_storage_read_file(int dir_fd, const char *name, size_t max, uint8_t **ret_data,
                         size_t *ret_len)
{
    struct stat st;
    uint8_t *buf = NULL;
    ssize_t got;
    int fd, err = 0;

    fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0) {
        err = -errno;
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        err = -EINVAL;
        goto out;
    }
    if ((uint64_t)st.st_size > max) {
        err = -EFBIG;
        goto out;
    }
    buf = malloc(st.st_size ? (size_t)st.st_size : 1);
    if (!buf) {
        err = -ENOMEM;
        goto out;
    }
    /* A file that shrank since the fstat is read as far as it goes. */
    got = ws_read_all(fd, buf, (size_t)st.st_size);
    if (got < 0) {
        err = (int)got;
        goto out;
    }
    *ret_data = buf;
    *ret_len = (size_t)got;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return err;
}

int ws_storage_remove_tree(int parent_fd, const char *name)
{
    struct ws_vfs *fs = NULL;
    struct ws_vfs_dir *dir = NULL;
    struct ws_dirent ent;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int fd, err;

    fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    err = ws_posixfs_open(fd, ".", &fs);
    close(fd);
    if (err < 0)
        return err;
    err = fs->ops->opendir(fs, ".", &dir);
    if (err < 0)
        goto out;
    /* Collect first: removing while reading a directory skips entries. */
    while ((err = fs->ops->readdir(dir, &ent)) > 0) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 32;
            char **tmp = realloc(names, ncap * sizeof(*names));
            if (!tmp) {
                err = -ENOMEM;
                goto out;
            }
            names = tmp;
            cap = ncap;
        }
        names[n] = strndup(ent.name, ent.name_len);
        if (!names[n]) {
            err = -ENOMEM;
            goto out;
        }
        n++;
    }
    if (err < 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        uint64_t removed;
        int r = fs->ops->remove(fs, names[i], true, &removed);
        if (r < 0 && r != -ENOENT && err == 0)
            err = r;
    }
    if (err == 0 && unlinkat(parent_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        err = -errno;
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (dir)
        fs->ops->closedir(dir);
    fs->ops->destroy(fs);
    return err;
}
