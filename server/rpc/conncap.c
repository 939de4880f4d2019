#include "server/rpc/conncap.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "server/rpc/internal.h"

/* Guarded listeners: the gRPC server binds one or two (IPv4 and IPv6). */
#define LISTENERS_MAX 8
/* At most one log line about refusals per this many seconds. */
#define LOG_EVERY_S 10

struct sock {
    int fd;
    ino_t ino;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct sock listeners[LISTENERS_MAX];
static size_t n_listeners;
static struct sock *conns; /* admitted connections, at most `cap` */
static size_t n_conns, cap;
static uint64_t refused, refused_logged;
static time_t logged_at;

typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);
static accept4_fn next_accept4;
static pthread_once_t next_once = PTHREAD_ONCE_INIT;

static void find_next(void)
{
    next_accept4 = (accept4_fn)dlsym(RTLD_NEXT, "accept4");
}

/* Whether fd is open and is the socket with inode `ino`. */
static bool same_socket(int fd, ino_t ino)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == ino;
}

/* Whether fd is a listening socket bound to `port` (port > 0) or to the
 * unix socket `path`; its inode in *ino. */
static bool is_listener(int fd, int port, const char *path, ino_t *ino)
{
    struct stat st;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int on = 0;
    socklen_t on_len = sizeof(on);

    if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
        return false;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &on_len) < 0 || !on)
        return false;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return false;
    *ino = st.st_ino;
    if (port > 0 && ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port) == port;
    if (port > 0 && ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) == port;
    if (port == 0 && path && ss.ss_family == AF_UNIX) {
        const struct sockaddr_un *un = (const struct sockaddr_un *)&ss;
        return strncmp(un->sun_path, path, sizeof(un->sun_path)) == 0;
    }
    return false;
}

int ws_conncap_guard(int port, const char *unix_path, unsigned max)
{
    struct sock found[LISTENERS_MAX];
    size_t n = 0;
    DIR *d;
    struct dirent *e;

    if (max == 0 || max > WS_CONNCAP_MAX || port < 0 || (port == 0 && !unix_path))
        return -EINVAL;
    pthread_once(&next_once, find_next);
    if (!next_accept4)
        return -ENOSYS;
    d = opendir("/proc/self/fd");
    if (!d)
        return -errno;
    while ((e = readdir(d)) != NULL && n < LISTENERS_MAX) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || fd < 0 || fd == dirfd(d))
            continue;
        ino_t ino;
        if (is_listener((int)fd, port, unix_path, &ino))
            found[n++] = (struct sock){.fd = (int)fd, .ino = ino};
    }
    closedir(d);
    if (n == 0)
        return -ENOENT;
    struct sock *list = calloc(max, sizeof(*list));
    if (!list)
        return -ENOMEM;

    pthread_mutex_lock(&mu);
    memcpy(listeners, found, n * sizeof(found[0]));
    n_listeners = n;
    /* Connections admitted under an earlier bound still count. */
    size_t keep = n_conns < max ? n_conns : max;
    if (conns)
        memcpy(list, conns, keep * sizeof(*list));
    free(conns);
    conns = list;
    n_conns = keep;
    cap = max;
    pthread_mutex_unlock(&mu);
    return 0;
}

void ws_conncap_release(void)
{
    pthread_mutex_lock(&mu);
    n_listeners = 0;
    free(conns);
    conns = NULL;
    n_conns = cap = 0;
    pthread_mutex_unlock(&mu);
}

/* Drops the connections that have closed. mu held. */
static void sweep(void)
{
    size_t i = 0;

    while (i < n_conns) {
        if (same_socket(conns[i].fd, conns[i].ino))
            i++;
        else
            conns[i] = conns[--n_conns];
    }
}

unsigned ws_conncap_open(void)
{
    pthread_mutex_lock(&mu);
    sweep();
    unsigned n = (unsigned)n_conns;
    pthread_mutex_unlock(&mu);
    return n;
}

uint64_t ws_conncap_refused(void)
{
    pthread_mutex_lock(&mu);
    uint64_t n = refused;
    pthread_mutex_unlock(&mu);
    return n;
}

/* Whether `lfd` is a guarded listener. mu held. */
static bool guarded(int lfd)
{
    for (size_t i = 0; i < n_listeners; i++)
        if (listeners[i].fd == lfd)
            return same_socket(lfd, listeners[i].ino);
    return false;
}

/* Decides on connection `c`, accepted on `lfd`: true to hand it on. */
static bool admit(int lfd, int c)
{
    struct stat st;
    bool ok = true;
    uint64_t to_log = 0;

    pthread_mutex_lock(&mu);
    if (!guarded(lfd) || fstat(c, &st) < 0)
        goto out;
    /* An entry under this fd number is a connection that closed. */
    for (size_t i = 0; i < n_conns; i++)
        if (conns[i].fd == c) {
            conns[i] = conns[--n_conns];
            break;
        }
    if (n_conns >= cap)
        sweep();
    if (n_conns >= cap) {
        ok = false;
        refused++;
        time_t now = time(NULL);
        if (now - logged_at >= LOG_EVERY_S) {
            to_log = refused - refused_logged;
            refused_logged = refused;
            logged_at = now;
        }
        goto out;
    }
    conns[n_conns++] = (struct sock){.fd = c, .ino = st.st_ino};
out:;
    size_t limit = cap;
    pthread_mutex_unlock(&mu);
    if (to_log)
        ws_rpc_log(WS_RPC_LOG_ERROR, "transport.connections_refused",
                   "\"refused\":%llu,\"max_connections\":%zu", (unsigned long long)to_log, limit);
    return ok;
}

/* The definition gRPC's accept calls reach (see conncap.h). */
int accept4(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags)
{
    socklen_t len0 = addrlen ? *addrlen : 0;

    pthread_once(&next_once, find_next);
    if (!next_accept4) {
        errno = ENOSYS;
        return -1;
    }
    for (;;) {
        int c = next_accept4(fd, addr, addrlen, flags);
        if (c < 0 || admit(fd, c))
            return c;
        /* Refused: closed before anyone saw it; take the next in line. */
        close(c);
        if (addrlen)
            *addrlen = len0;
    }
}
