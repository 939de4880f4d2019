/* Small state-directory helpers for the registry: whole-file atomic writes
 * and bounded reads relative to a directory fd, and removal of a workspace
 * directory tree through the confined file system. */
#ifndef WS_REGISTRY_STORAGE_H
#define WS_REGISTRY_STORAGE_H

#include <stddef.h>
#include <stdint.h>

/* Writes `name` atomically in dir_fd (via `tmp_name`, fsync, rename, fsync
 * of the directory). Mode 0600. */
int ws_storage_write_file(int dir_fd, const char *name, const char *tmp_name, const uint8_t *data,
                          size_t len);

/* Reads `name` (a regular file, not followed if a symlink) of at most
 * `max` bytes; *ret_data is malloc'ed. Larger: -EFBIG. */
int ws_storage_read_file(int dir_fd, const char *name, size_t max, uint8_t **ret_data,
                         size_t *ret_len);

/* Removes directory `name` of parent_fd with everything in it, never
 * following a symlink. A missing directory is success. */
int ws_storage_remove_tree(int parent_fd, const char *name);

#endif
