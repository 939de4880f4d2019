#include "server/rpc/conncap.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
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

/* The directory part of the peer addresses written for connections on a
 * guarded unix listener; the rest is a secret of this process and the
 * caller's uid (see conncap.h). */
#define PEER_DIR  "/workspaced-peer/"
#define NONCE_HEX 32

struct sock {
    int fd;
    ino_t ino;
    /* Connections on a unix listener: the peer's uid by SO_PEERCRED, or
     * -1 when it could not be read (the call layer then refuses it). */
    int64_t uid;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct sock listeners[LISTENERS_MAX];
static size_t n_listeners;
static bool listeners_unix; /* the guarded listeners are a unix socket */
static struct sock *conns;  /* admitted connections, at most `cap` */
static size_t n_conns, cap;
static uint64_t refused, refused_logged;
static time_t logged_at;
/* A descriptor held back for the moment the process runs out: closed to
 * accept, and close at once, a connection that would otherwise wait in
 * the backlog (see shed()). -1 while it is spent. */
static int reserve = -1;
static uint64_t shed_count, shed_logged;
static time_t shed_logged_at;

typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);
typedef int (*getpeername_fn)(int, struct sockaddr *, socklen_t *);
static accept4_fn next_accept4;
static getpeername_fn next_getpeername;
static pthread_once_t next_once = PTHREAD_ONCE_INIT;

/* The secret in peer addresses, as lowercase hex; "" when the kernel gave
 * no random bytes, and then no peer address names a uid. */
static char nonce[NONCE_HEX + 1];

static void find_next(void)
{
    uint8_t rnd[NONCE_HEX / 2];

    next_accept4 = (accept4_fn)dlsym(RTLD_NEXT, "accept4");
    next_getpeername = (getpeername_fn)dlsym(RTLD_NEXT, "getpeername");
    if (getrandom(rnd, sizeof(rnd), 0) == (ssize_t)sizeof(rnd))
        for (size_t i = 0; i < sizeof(rnd); i++)
            snprintf(nonce + 2 * i, 3, "%02x", rnd[i]);
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
    pthread_mutex_lock(&mu);
    if (reserve < 0)
        reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pthread_mutex_unlock(&mu);
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
    listeners_unix = port == 0;
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
    listeners_unix = false;
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

uint64_t ws_conncap_shed(void)
{
    pthread_mutex_lock(&mu);
    uint64_t n = shed_count;
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

/* guarded(), taking the lock. */
static bool guarded_listener(int lfd)
{
    pthread_mutex_lock(&mu);
    bool g = guarded(lfd);
    pthread_mutex_unlock(&mu);
    return g;
}

/* The uid of the process that connected unix socket c, or -1 (also for a
 * TCP listener, where no uid is recorded). mu held. */
static int64_t peer_uid(int c)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);

    if (!listeners_unix || getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
        len != sizeof(cred))
        return -1;
    return (int64_t)cred.uid;
}

/* The admitted connection with fd c, or NULL. mu held. */
static const struct sock *admitted(int c)
{
    for (size_t i = 0; i < n_conns; i++)
        if (conns[i].fd == c)
            return same_socket(c, conns[i].ino) ? &conns[i] : NULL;
    return NULL;
}

/* The peer address of connection c when it came in on a guarded unix
 * listener: PEER_DIR, the nonce, '/', the uid ("none" when unknown). Its
 * length (with the terminating NUL) in *len. False for any other socket. */
static bool peer_address(int c, struct sockaddr_un *un, socklen_t *len)
{
    const struct sock *k;
    char uid[24] = "none";

    pthread_mutex_lock(&mu);
    k = listeners_unix ? admitted(c) : NULL;
    if (k && k->uid >= 0)
        snprintf(uid, sizeof(uid), "%lld", (long long)k->uid);
    pthread_mutex_unlock(&mu);
    if (!k)
        return false;
    memset(un, 0, sizeof(*un));
    un->sun_family = AF_UNIX;
    snprintf(un->sun_path, sizeof(un->sun_path), "%s%s/%s", PEER_DIR, nonce,
             nonce[0] ? uid : "none");
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(un->sun_path) + 1);
    return true;
}

/* Copies a made-up address into the caller's buffer of `room` bytes as
 * the kernel would: truncated to it, *addrlen set to the full length. */
static void put_address(const struct sockaddr_un *un, socklen_t len, struct sockaddr *addr,
                        socklen_t room, socklen_t *addrlen)
{
    memcpy(addr, un, len < room ? len : room);
    *addrlen = len;
}

bool ws_conncap_peer_uid(const char *peer, uint32_t *uid)
{
    static const char prefix[] = "unix:" PEER_DIR;
    unsigned char diff = 0;
    unsigned long long v = 0;
    const char *p;
    size_t n;

    pthread_once(&next_once, find_next);
    if (!peer || !nonce[0] || strncmp(peer, prefix, sizeof(prefix) - 1) != 0)
        return false;
    p = peer + sizeof(prefix) - 1;
    if (strnlen(p, NONCE_HEX + 1) < NONCE_HEX + 1)
        return false;
    /* Every byte compared, whatever the first difference: how long a
     * refusal takes says nothing about how much of a guess was right. */
    for (size_t i = 0; i < NONCE_HEX; i++)
        diff |= (unsigned char)(p[i] ^ nonce[i]);
    if (diff || p[NONCE_HEX] != '/')
        return false;
    p += NONCE_HEX + 1;
    n = strspn(p, "0123456789");
    if (n == 0 || n > 10 || p[n] != '\0' || (n > 1 && p[0] == '0'))
        return false;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (unsigned)(p[i] - '0');
    if (v > UINT32_MAX)
        return false;
    *uid = (uint32_t)v;
    return true;
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
    conns[n_conns++] = (struct sock){.fd = c, .ino = st.st_ino, .uid = peer_uid(c)};
out:;
    size_t limit = cap;
    pthread_mutex_unlock(&mu);
    if (to_log)
        ws_rpc_log(WS_RPC_LOG_ERROR, "transport.connections_refused",
                   "\"refused\":%llu,\"max_connections\":%zu", (unsigned long long)to_log, limit);
    return ok;
}

/* accept4 on guarded listener `lfd` failed with EMFILE or ENFILE. gRPC
 * 1.51 takes any accept error but EAGAIN for a dead listener and stops
 * accepting for good, and a connection left in the backlog would hang its
 * client: instead the reserve descriptor makes room to accept the first
 * waiting connection, which is closed at once (its client sees the
 * connection reset, and retries), and the reserve is taken again. Returns
 * true when a connection was shed (look at the next one), false when none
 * waits or no room could be made (the caller answers EAGAIN: the listener
 * is polled again, edge-triggered, so nothing spins). */
static bool shed(int lfd)
{
    bool done = false;
    uint64_t to_log = 0;

    pthread_mutex_lock(&mu);
    if (!guarded(lfd))
        goto out;
    if (reserve >= 0) {
        close(reserve);
        reserve = -1;
    }
    int c = next_accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (c >= 0) {
        close(c);
        done = true;
        shed_count++;
        time_t now = time(NULL);
        if (now - shed_logged_at >= LOG_EVERY_S) {
            to_log = shed_count - shed_logged;
            shed_logged = shed_count;
            shed_logged_at = now;
        }
    }
    reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
out:
    pthread_mutex_unlock(&mu);
    if (to_log)
        ws_rpc_log(WS_RPC_LOG_ERROR, "transport.out_of_descriptors", "\"closed_on_accept\":%llu",
                   (unsigned long long)to_log);
    return done;
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
        if (c >= 0 && admit(fd, c)) {
            struct sockaddr_un un;
            socklen_t len;
            if (addr && addrlen && peer_address(c, &un, &len))
                put_address(&un, len, addr, len0, addrlen);
            return c;
        }
        if (c < 0 && (errno == EMFILE || errno == ENFILE) && guarded_listener(fd)) {
            if (shed(fd))
                continue;
            errno = EAGAIN;
            return -1;
        }
        if (c < 0)
            return c;
        /* Refused: closed before anyone saw it; take the next in line. */
        close(c);
        if (addrlen)
            *addrlen = len0;
    }
}

/* The definition gRPC's getpeername calls reach: for a connection on a
 * guarded unix listener it answers with the peer address made for it
 * (gRPC 1.51 names the peer of a unix connection by getpeername, not by
 * what accept4 returned), so a path the client bound its own socket to
 * never becomes the peer. Every other socket passes through. */
int getpeername(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
    socklen_t room = addrlen ? *addrlen : 0, len;
    struct sockaddr_un un;
    int r;

    pthread_once(&next_once, find_next);
    if (!next_getpeername) {
        errno = ENOSYS;
        return -1;
    }
    r = next_getpeername(fd, addr, addrlen);
    if (r == 0 && addr && room >= sizeof(sa_family_t) && addr->sa_family == AF_UNIX &&
        peer_address(fd, &un, &len))
        put_address(&un, len, addr, room, addrlen);
    return r;
}
