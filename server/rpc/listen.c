/* The listener rules and the unix socket's modes (listen.h). */
#include "server/rpc/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool ws_listen_is_unix(const char *addr)
{
    return addr && strncmp(addr, "unix:", 5) == 0 && addr[5] != '\0';
}

bool ws_listen_is_loopback(const char *addr)
{
    char host[256];
    const char *end;
    struct in_addr v4;
    struct in6_addr v6;

    if (!addr || strncmp(addr, "unix", 4) == 0)
        return false;
    if (addr[0] == '[') {
        end = strchr(addr, ']');
        if (!end || end[1] != ':')
            return false;
        addr++;
    } else {
        end = strrchr(addr, ':');
        if (!end)
            return false;
    }
    if ((size_t)(end - addr) >= sizeof(host))
        return false;
    memcpy(host, addr, (size_t)(end - addr));
    host[end - addr] = '\0';
    if (strcmp(host, "localhost") == 0)
        return true;
    if (inet_pton(AF_INET, host, &v4) == 1)
        return (ntohl(v4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &v6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&v6);
    return false;
}

int ws_listen_check(const char *addr, bool has_tokens, bool has_client_ca, bool insecure_loopback,
                    uid_t euid, char *why, size_t why_len)
{
    if (insecure_loopback && euid == 0) {
        snprintf(why, why_len,
                 "refusing --insecure-loopback as root: every local user, and every box that "
                 "shares the host's network, could run commands as root through it; run the "
                 "server as an unprivileged user, or use a unix: socket or --tokens-file");
        return -1;
    }
    if (!addr || ws_listen_is_unix(addr) || has_tokens || has_client_ca)
        return 0;
    if (!ws_listen_is_loopback(addr)) {
        snprintf(why, why_len,
                 "refusing to listen on '%s' without authentication: give --tokens-file or "
                 "--tls-client-ca (unix: sockets need none; --insecure-loopback covers loopback "
                 "addresses only)",
                 addr);
        return -1;
    }
    if (!insecure_loopback) {
        snprintf(why, why_len,
                 "refusing to listen on '%s' without authentication: any local user or box "
                 "sharing the host's network could reach it; give --tokens-file or "
                 "--tls-client-ca, listen on a unix: socket (the default), or for development "
                 "only, as a user other than root, --insecure-loopback",
                 addr);
        return -1;
    }
    return 0;
}

/* The gid of `name` into *gid; 0 when found, 1 when there is no such
 * group, -errno when it could not be looked up. */
static int group_gid(const char *name, gid_t *gid)
{
    struct group gr, *res = NULL;
    size_t size = 16384;
    char *buf = NULL;
    int e;

    for (;;) {
        char *nb = realloc(buf, size);
        if (!nb) {
            free(buf);
            return -ENOMEM;
        }
        buf = nb;
        e = getgrnam_r(name, &gr, buf, size, &res);
        if (e != ERANGE || size >= (1u << 22))
            break;
        size *= 2;
    }
    if (e == 0 && res)
        *gid = gr.gr_gid;
    free(buf);
    if (e == 0 || e == ENOENT || e == ESRCH)
        return res ? 0 : 1;
    return -e;
}

/* The directory part of `path` ("." when it has none). */
static int dir_of(const char *path, char *ret, size_t size)
{
    const char *slash = strrchr(path, '/');
    size_t n;

    if (!slash) {
        snprintf(ret, size, ".");
        return 0;
    }
    n = slash == path ? 1 : (size_t)(slash - path);
    if (n >= size)
        return -ENAMETOOLONG;
    memcpy(ret, path, n);
    ret[n] = '\0';
    return 0;
}

int ws_listen_prepare_unix(const char *path, const char *group, char *why, size_t why_len)
{
    char dir[PATH_MAX];
    gid_t gid = 0;
    int r, fd, g;

    group = group ? group : WS_LISTEN_GROUP;
    r = dir_of(path, dir, sizeof(dir));
    if (r < 0) {
        snprintf(why, why_len, "the socket path '%s' is too long", path);
        return r;
    }
    if (mkdir(dir, 0750) < 0) {
        if (errno == EEXIST)
            return 0;
        r = -errno;
        snprintf(why, why_len, "cannot make the socket's directory '%s': %s", dir, strerror(-r));
        return r;
    }
    /* The mode given to mkdir went through the umask; set it outright,
     * on the directory just made (not whatever its name may point to). */
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        r = -errno;
        snprintf(why, why_len, "cannot open the socket's directory '%s': %s", dir, strerror(-r));
        return r;
    }
    g = group_gid(group, &gid);
    if (g < 0)
        r = g;
    else if ((g == 0 && fchown(fd, (uid_t)-1, gid) < 0) || fchmod(fd, 0750) < 0)
        r = -errno;
    close(fd);
    if (r < 0)
        snprintf(why, why_len, "cannot give the socket's directory '%s' mode 0750%s%s: %s", dir,
                 g == 0 ? " and group " : "", g == 0 ? group : "", strerror(-r));
    return r;
}

int ws_listen_secure_unix(const char *path, const char *group, char *why, size_t why_len)
{
    struct stat st;
    gid_t gid = 0;
    int g, r = 0;

    group = group ? group : WS_LISTEN_GROUP;
    if (lstat(path, &st) < 0)
        r = -errno;
    else if (!S_ISSOCK(st.st_mode))
        r = -ENOTSOCK;
    if (r < 0) {
        snprintf(why, why_len, "'%s' is not the socket just bound: %s", path, strerror(-r));
        return r;
    }
    g = group_gid(group, &gid);
    if (g < 0)
        r = g;
    else if ((g == 0 && lchown(path, (uid_t)-1, gid) < 0) || chmod(path, 0660) < 0)
        r = -errno;
    if (r < 0)
        snprintf(why, why_len, "cannot give the socket '%s' mode 0660%s%s: %s", path,
                 g == 0 ? " and group " : "", g == 0 ? group : "", strerror(-r));
    return r;
}
