/* File descriptor ownership helpers, shared by the modules that hold fds.
 *
 *   ws_close_fd(&fd)   closes fd if open and sets it to -1; errno is kept,
 *                      so it can sit on an error path before `return -errno`;
 *   ws_cleanup_fd      a variable attribute: the fd is closed (as above)
 *                      when the variable goes out of scope;
 *   ws_steal_fd(&fd)   hands the fd over (returns it, leaves -1 behind), so
 *                      a ws_cleanup_fd variable does not close it.
 */
#ifndef WS_BASE_FD_H
#define WS_BASE_FD_H

#include <errno.h>
#include <unistd.h>

static inline void ws_close_fd(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
        *fd = -1;
    }
}

#define ws_cleanup_fd __attribute__((cleanup(ws_close_fd)))

static inline int ws_steal_fd(int *fd)
{
    int r = *fd;
    *fd = -1;
    return r;
}

#endif
