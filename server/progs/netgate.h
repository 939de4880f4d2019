/* The sandbox's network gate, shared by the programs that can be pid 1 of a
 * local-sandbox (sandbox_init, wsagent); header-only, as they are built by a
 * bare gcc.
 *
 * With network, the program first writes "r" on FD, a socket to the
 * server, with its network namespace (/proc/self/ns/net) attached as
 * SCM_RIGHTS: the sandbox is built (bubblewrap is done with the namespace,
 * so the server may attach the user-mode network now without racing
 * bubblewrap's own setup of the loopback device), and the server needs no
 * right to open another uid's /proc/PID/ns (CAP_SYS_PTRACE). Then it reads
 * FD to its end: the server writes "1" once the network is up, or "0" and a
 * reason when it could not be set up. Anything but "1" (the server gone:
 * nothing at all) means nothing runs: a sandbox that asked for a network
 * never runs without the one it was given. */
#ifndef WS_PROGS_NETGATE_H
#define WS_PROGS_NETGATE_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/base/io.h"

/* The longest reason the server gives. */
#define WS_NETGATE_MSG_MAX 160

/* "r", with the network namespace when it can be opened (without it the
 * server, finding none, says so). 0 or -errno. */
static inline int ws_netgate_ready(int fd)
{
    int netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct iovec iov = {.iov_base = (void *)"r", .iov_len = 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    ssize_t n;

    if (netns >= 0) {
        memset(&ctl, 0, sizeof(ctl));
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof(ctl.buf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &netns, sizeof(int));
    }
    n = WS_RETRY_EINTR(sendmsg(fd, &m, MSG_NOSIGNAL));
    int err = n == 1 ? 0 : n < 0 ? -errno : -EIO;
    if (netns >= 0)
        (void)close(netns);
    return err;
}

/* Says "r", then reads the server's word to its end and closes fd.
 * Returns 0 when it is "1"; else -1 with why in why[0..size) (printable
 * ASCII only: the reason is the server's, but it reaches a client). */
static inline int ws_netgate_pass(int fd, char *why, size_t size)
{
    char buf[WS_NETGATE_MSG_MAX + 1];
    size_t have = 0;
    int err = ws_netgate_ready(fd);

    if (err < 0) {
        snprintf(why, size, "cannot tell the server the sandbox is up: %s", strerror(-err));
        return -1;
    }
    for (;;) {
        ssize_t n = WS_RETRY_EINTR(
            read(fd, buf + have, have < WS_NETGATE_MSG_MAX ? WS_NETGATE_MSG_MAX - have : 1));
        if (n < 0) {
            snprintf(why, size, "cannot read the server's word on the sandbox's network: %s",
                     strerror(errno));
            return -1;
        }
        if (n == 0)
            break;
        /* Past the limit the rest is read and dropped, to the end. */
        if (have < WS_NETGATE_MSG_MAX)
            have += (size_t)n;
    }
    (void)close(fd);
    if (have == 1 && buf[0] == '1')
        return 0;
    size_t len = 0;
    for (size_t i = have > 0 ? 1 : 0; i < have; i++)
        if (buf[i] >= 0x20 && buf[i] < 0x7f)
            buf[len++] = buf[i];
    buf[len] = '\0';
    snprintf(why, size, "the sandbox's network could not be set up%s%s", len ? ": " : "",
             len ? buf : "");
    return -1;
}

#endif
