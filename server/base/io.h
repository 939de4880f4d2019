/* Whole reads and writes on blocking fds, and the one EINTR retry, so no
 * module writes its own loop. Header-only, so the static programs that run
 * inside a box (built by a bare gcc) can use them too.
 *
 *   ws_read_all(fd, buf, n)        reads until n bytes or end of file; returns
 *                                  the bytes read (fewer than n only at end of
 *                                  file) or -errno. For files, pipes and
 *                                  sockets whose writer ends with EOF.
 *   ws_write_all(fd, buf, n)       writes all n bytes; 0 or -errno (-EIO if
 *                                  the kernel took nothing and said no error).
 *   ws_pread_all / ws_pwrite_all   the same at a file offset, leaving the fd's
 *                                  own offset alone.
 *   WS_RETRY_EINTR(expr)           evaluates expr again while it returns < 0
 *                                  with errno EINTR, and yields its last value:
 *                                  for one call that must not fail because a
 *                                  signal arrived (waitpid, waitid, a single
 *                                  read that must not be repeated for more).
 *
 * A signal handler installed without SA_RESTART makes a blocking call fail
 * with EINTR; these retry it, since the caller asked for the data, not for
 * news of the signal. On a non-blocking fd EAGAIN is returned as -EAGAIN
 * like any other error; event loops that must react to a signal (poll,
 * epoll_wait, sigwaitinfo) check EINTR themselves.
 */
#ifndef WS_BASE_IO_H
#define WS_BASE_IO_H

#include <errno.h>
#include <stddef.h>
#include <sys/types.h>
#include <unistd.h>

#define WS_RETRY_EINTR(expr)                                                                       \
    ({                                                                                             \
        __typeof__(expr) ws_retry_r_;                                                              \
        do                                                                                         \
            ws_retry_r_ = (expr);                                                                  \
        while (ws_retry_r_ < 0 && errno == EINTR);                                                 \
        ws_retry_r_;                                                                               \
    })

/* The loops behind the four: at `off`, or at the fd's own offset when
 * off < 0. */
static inline ssize_t ws_io_read_at(int fd, void *buf, size_t n, off_t off)
{
    size_t have = 0;

    while (have < n) {
        char *at = (char *)buf + have;
        ssize_t k = WS_RETRY_EINTR(off < 0 ? read(fd, at, n - have)
                                           : pread(fd, at, n - have, off + (off_t)have));
        if (k < 0)
            return -errno;
        if (k == 0)
            break;
        have += (size_t)k;
    }
    return (ssize_t)have;
}

static inline int ws_io_write_at(int fd, const void *buf, size_t n, off_t off)
{
    size_t done = 0;

    while (done < n) {
        const char *at = (const char *)buf + done;
        ssize_t k = WS_RETRY_EINTR(off < 0 ? write(fd, at, n - done)
                                           : pwrite(fd, at, n - done, off + (off_t)done));
        if (k < 0)
            return -errno;
        if (k == 0)
            return -EIO;
        done += (size_t)k;
    }
    return 0;
}

static inline ssize_t ws_read_all(int fd, void *buf, size_t n)
{
    return ws_io_read_at(fd, buf, n, -1);
}

static inline int ws_write_all(int fd, const void *buf, size_t n)
{
    return ws_io_write_at(fd, buf, n, -1);
}

/* `off` >= 0. */
static inline ssize_t ws_pread_all(int fd, void *buf, size_t n, off_t off)
{
    return ws_io_read_at(fd, buf, n, off);
}

static inline int ws_pwrite_all(int fd, const void *buf, size_t n, off_t off)
{
    return ws_io_write_at(fd, buf, n, off);
}

#endif
