/* workspaced-docker-relay: one command of a Docker workspace as a host
 * process, so that the server's process machinery (pipes or a PTY read by
 * the pump into replay rings, the stdin pipe, the freezer-cgroup tree kill)
 * serves Docker commands exactly as it serves local ones.
 *
 *   workspaced-docker-relay --host DOCKER_HOST [--tls-verify --cert-path DIR]
 *                           --api MAJOR.MINOR [--tty] [--stdin] [--nonce HEX]
 *                           [--container ID] --status-fd N EXEC_ID
 *
 * The server has created the exec (POST /containers/{id}/exec, the command
 * wrapped by the in-container init); the relay starts it on a hijacked
 * connection and copies bytes:
 *   fd 0  stdin: read and sent to the process with --stdin, never touched
 *         without it (except, with --tty, to put the terminal in raw mode
 *         and read its size);
 *   fd 1  the process' stdout (with --tty: the whole terminal output);
 *   fd 2  its stderr (with --tty the same terminal as fd 1), and the
 *         relay's own one-line messages;
 *   fd N  one status line, "exited 3\n" or "signaled 9 core oom\n", from
 *         the exit record; none when there was no record.
 *
 * The exit record: the init ends every command by writing, in one write
 * and as the very last bytes of the stream (stderr, or with a TTY the one
 * stream), ESC "_wsinit;" STATUS ESC "\\" with STATUS "exited N" (0..255)
 * or "signaled N" (1..64), then optionally " core", then optionally
 * " oom". Only a record that ends the stream is the init's: the init writes
 * it after everything else in the container is dead, while the command can
 * write lookalikes of its own at any earlier point, and those are output.
 * The relay strips the final record from the output and writes its STATUS
 * as the status line.
 *
 * With --nonce HEX (32 lowercase hex digits, the value the server gave the
 * init as WSINIT_NONCE, which the command never sees) the record must be
 * ESC "_wsinit;" HEX ";" STATUS ESC "\\" instead: a final record without
 * the nonce, or with another one, is output like any other bytes, and the
 * exit code then comes from inspect as when no record came. This is what
 * holds when the command outlives or outruns the init (it stops the
 * container, say) and ends the stream with a lookalike of its own. Without
 * --nonce only the form without one is a record.
 *
 * Exit status: the command's (N for exited N, 128 + N for signaled N) when
 * the record came; otherwise the exec's ExitCode from GET /exec/{id}/json;
 * 125 when the daemon refused the exec, could not be reached, broke the
 * stream's framing, or the exit code is unknown; 127 for a usage error
 * (nothing was started then).
 *
 * With --container ID (the exec's container) the relay also looks at the
 * container whenever the stream has been quiet for CONTAINER_CHECK_MS: a
 * container that is no longer running ends the command even though the
 * stream does not end. That is gVisor's way (runsc): its memory limit is
 * the host cgroup's, whose OOM killer takes the whole sandbox, and the
 * daemon then keeps the exec's stream open for minutes, or ends it at once
 * without a record; so a stream that ends without one also has the
 * container looked at (CONTAINER_SETTLE_TRIES times, INSPECT_PAUSE_MS
 * apart, while it still runs; CONTAINER_OOM_TRIES times once it stopped,
 * for the daemon's word on an OOM kill) before the exec's code is taken. A
 * container the daemon reports OOMKilled gives the status line "signaled
 * 9 oom" (the command died with it, for lack of memory); any other end
 * gives no status line and 125, the command's fate unknown. Either way
 * the container is gone, and the workspace's next command says so.
 *
 * Memory stays bounded whatever the command writes: output is written with
 * blocking writes before the socket is read again, so a server that stops
 * reading stops the relay, which stops the daemon, which stops the process.
 * If a reader goes away for good (EPIPE), its output is dropped but the
 * socket is still drained to its end, so the command never hangs on a full
 * pipe and the exit record is still read.
 *
 * Transport: a unix socket or plain tcp, spoken directly (no libcurl: the
 * relay starts once per command, and loading curl's libraries took longer
 * than the daemon's exec start). A TLS daemon is refused with 125: the
 * server's own calls reach one through libcurl, but exec streams over TLS
 * (and their stdin half-close, which needs TLS's close_notify) are not
 * implemented.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/uio.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "server/base/io.h"
#include "server/base/time.h"
#include "server/docker/api.h"
#include "server/docker/frames.h"
#include "server/docker/endpoint.h"

#define PROGRAM "workspaced-docker-relay"

/* Exit statuses of the relay's own failures, chosen like docker run's:
 * they sit beside the command's statuses, so the status line (written only
 * when the command's real status is known) is what tells them apart. */
#define EXIT_FAILED 125
#define EXIT_USAGE  127

/* --- Named limits ----------------------------------------------------------- */

/* The response head of the exec start; dockerd's is about 100 bytes. */
#define HEAD_MAX (16 * 1024)
/* An error body read back for the message; dockerd's are one short line. */
#define ERROR_BODY_MAX (64 * 1024)
/* One read from the socket and one read from stdin. Large, so that one
 * read gathers many of the daemon's small frames (it writes one per write
 * of the process, often 4 KiB) into one write to the server. */
#define IO_BUF_SIZE (256 * 1024)
/* Output that flows steadily is read in batches. The daemon sends one
 * frame per write of the process (busybox writes 4 KiB at a time), and
 * each write of ours wakes the server, which sends what it read as one
 * message to the client: reading frames as fast as they come makes
 * thousands of small messages a second, each costing three processes a
 * wake-up, and on a small machine that CPU is what the stream runs short
 * of. So when a read finds data less than BURST_WINDOW_US after the
 * previous one did, and found less than BATCH_BYTES, the socket is left
 * alone for BATCH_PAUSE_US (stdin and resizes are still served) while the
 * daemon's frames pile up in it, to be read and written on in one go.
 * Output that comes on its own, a prompt or an echo, is never held; in a
 * steady stream a byte waits at most BATCH_PAUSE_US longer. At the rates
 * seen here (~150 MB/s) a pause's worth is about what the daemon's socket
 * buffer holds, so the daemon blocks little if at all; measured with
 * tests/bench, 0.5, 1 and 2 ms pauses gave 51, 90 and 148 KiB per message
 * to the client, and the stream's rate rose with them. */
#define BATCH_BYTES     (192 * 1024)
#define BATCH_PAUSE_US  2000
#define BURST_WINDOW_US 4000
/* Payload slices gathered for one writev. */
#define GATHER_MAX 64
/* Bytes of a possible exit record held back from the output. The longest
 * valid record, ESC "_wsinit;" HEX ";signaled 64 core oom" ESC "\\", is 64
 * bytes, so anything longer is output. */
#define RECORD_MAX 80
/* The nonce: lowercase hex digits, as the init takes it. */
#define NONCE_HEX_DIGITS 32
/* Connecting to the daemon (and the TLS handshake). */
#define CONNECT_TIMEOUT_MS 10000L
/* From sending the exec start to the end of the response head (or of an
 * error body). dockerd answers before the process even starts. */
#define HEAD_TIMEOUT_MS 60000
/* A resize or an inspect, each on its own short-lived connection. dockerd
 * holds a resize up to 10 s waiting for the exec to start. */
#define CALL_TIMEOUT_MS 30000L
/* Inspect bodies (a few hundred bytes). */
#define INSPECT_BODY_MAX (64 * 1024)
/* Without an exit record the exit code comes from inspect, which can still
 * say Running when the process closed its output before exiting; it is
 * asked again, this many times this far apart, before giving up. */
#define INSPECT_TRIES    50
#define INSPECT_PAUSE_MS 100
/* How long the stream may be quiet before the container is looked at
 * (--container): one inspect a second per quiet command at most. */
#define CONTAINER_CHECK_MS 1000
/* A stream that ended without a record may have ended with its container,
 * whose state the daemon updates on its own time: it is looked at this
 * many times, INSPECT_PAUSE_MS apart, while it still runs. */
#define CONTAINER_SETTLE_TRIES 30
/* A stopped container not (yet) said to be OOM-killed is asked again this
 * many times, INSPECT_PAUSE_MS apart: under gVisor the daemon learns of
 * the host's OOM kill from an event of its own, which a loaded host was
 * seen to deliver more than 3 s after the stop. */
#define CONTAINER_OOM_TRIES 100

/* The exit record: ESC '_' "wsinit;" STATUS ESC '\\' (an APC string, which
 * terminals ignore, so a stray one does no harm on screen). */
#define RECORD_OPEN  "\x1b_wsinit;"
#define RECORD_CLOSE "\x1b\\"
/* RECORD_OPEN, the nonce and ';', with the NUL. */
#define RECORD_OPEN_MAX (sizeof(RECORD_OPEN) + NONCE_HEX_DIGITS + 1)
#define ESC             0x1b

/* A connection or call failure's message. */
#define ERRBUF_MAX 256

struct options {
    struct ws_docker_http_config cfg;
    struct ws_docker_api_version api;
    bool tty;
    bool stdin_on;
    int status_fd;
    const char *exec_id;
    const char *container_id; /* NULL: the container is not watched */
    /* What a record starts with: RECORD_OPEN, then with --nonce the nonce
     * and ';'. */
    char record_open[RECORD_OPEN_MAX];
};

/* The hijacked connection: a plain socket we speak raw bytes over. */
struct conn {
    int sock;
};

struct relay {
    struct options opt;
    struct conn conn;
    struct ws_frames frames;
    /* Indexed by fd, 1 and 2: the reader went away, output is dropped. */
    bool gone[3];
    /* The stream the exit record travels on (stderr, or with a TTY the only
     * stream) and the bytes of it held back because they could be, or
     * could still become, the final record. */
    enum ws_frames_stream watched;
    uint8_t held[RECORD_MAX];
    size_t held_len;
    /* The container stopped while the stream was still open, and whether
     * the daemon says it was for lack of memory. */
    bool container_ended;
    bool container_oom;
    /* stdin to the socket: in_buf[in_off, in_len) is still to be sent. */
    bool in_reading; /* fd 0 is still read */
    bool in_closed;  /* the write side has been shut down (or given up) */
    size_t in_off, in_len;
    uint8_t *in_buf;
    int sigfd; /* SIGWINCH with --tty, else -1 */
    /* Payload of one socket read bound for the same fd, written at once:
     * slices of sock_buf, valid until feed() returns. */
    int gather_fd;
    struct iovec gather[GATHER_MAX];
    int n_gather;
    char err[ERRBUF_MAX];
};

static uint8_t sock_buf[IO_BUF_SIZE];
static uint8_t stdin_buf[IO_BUF_SIZE];
static char head_buf[HEAD_MAX];

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line on stderr, prefixed with the program's name, written at once so
 * it does not interleave with output the server is reading. */
static void say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    int n = snprintf(line, sizeof(line), PROGRAM ": ");

    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    n = (int)strnlen(line, sizeof(line) - 2);
    line[n++] = '\n';
    if (write(STDERR_FILENO, line, (size_t)n) < 0) {
        /* Nowhere left to report to. */
    }
}

/* Milliseconds left until deadline, at least 0. */
static int ms_left(int64_t deadline)
{
    int64_t left = deadline - ws_mono_ms();

    return left < 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}

/* Waits for events on fd. Returns 0, -ETIMEDOUT or -errno. */
static int wait_fd(int fd, short events, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = events};
    int n = WS_RETRY_EINTR(poll(&p, 1, timeout_ms));

    if (n < 0)
        return -errno;
    return n == 0 ? -ETIMEDOUT : 0;
}

/* --- Arguments -------------------------------------------------------------- */

static void usage_line(void)
{
    say("usage: " PROGRAM " --host DOCKER_HOST [--tls-verify --cert-path DIR] "
        "--api MAJOR.MINOR [--tty] [--stdin] [--nonce HEX] --status-fd N EXEC_ID");
}

/* A file descriptor number in decimal, nothing else. */
static int parse_fd(const char *s, int *ret_fd)
{
    long v = 0;

    if (!*s)
        return -EINVAL;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        v = v * 10 + (*p - '0');
        if (v > INT_MAX)
            return -EINVAL;
    }
    *ret_fd = (int)v;
    return 0;
}

static bool fd_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

/* Exactly NONCE_HEX_DIGITS lowercase hex digits. */
static bool nonce_valid(const char *s)
{
    size_t i;

    for (i = 0; i < NONCE_HEX_DIGITS; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return s[i] == '\0';
}

/* Fills ret_opts from argv, or says what is wrong and returns -EINVAL. */
static int parse_args(int argc, char **argv, struct options *ret_opts)
{
    enum {
        OPT_HOST = 1,
        OPT_TLS,
        OPT_CERT,
        OPT_API,
        OPT_TTY,
        OPT_STDIN,
        OPT_STATUS,
        OPT_NONCE,
        OPT_CONTAINER,
        OPT_N
    };
    static const struct option longopts[] = {
        {"host", required_argument, NULL, OPT_HOST},
        {"tls-verify", no_argument, NULL, OPT_TLS},
        {"cert-path", required_argument, NULL, OPT_CERT},
        {"api", required_argument, NULL, OPT_API},
        {"tty", no_argument, NULL, OPT_TTY},
        {"stdin", no_argument, NULL, OPT_STDIN},
        {"status-fd", required_argument, NULL, OPT_STATUS},
        {"nonce", required_argument, NULL, OPT_NONCE},
        {"container", required_argument, NULL, OPT_CONTAINER},
        {NULL, 0, NULL, 0},
    };
    struct options o = {.status_fd = -1};
    const char *host = NULL, *cert_path = NULL, *api = NULL, *status = NULL, *nonce = NULL;
    unsigned seen[OPT_N] = {0};
    int c, r;

    opterr = 0;
    /* '+': options end at the first operand, as they do for a command. */
    while ((c = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
        if (c <= 0 || c >= OPT_N) {
            say("unknown option or missing value: %s", argv[optind - 1]);
            return -EINVAL;
        }
        if (seen[c]++) {
            say("option given twice: %s", argv[optind - 1]);
            return -EINVAL;
        }
        switch (c) {
        case OPT_HOST:
            host = optarg;
            break;
        case OPT_TLS:
            break;
        case OPT_CERT:
            cert_path = optarg;
            break;
        case OPT_API:
            api = optarg;
            break;
        case OPT_TTY:
            o.tty = true;
            break;
        case OPT_STDIN:
            o.stdin_on = true;
            break;
        case OPT_STATUS:
            status = optarg;
            break;
        case OPT_NONCE:
            nonce = optarg;
            break;
        case OPT_CONTAINER:
            o.container_id = optarg;
            break;
        }
    }
    if (optind != argc - 1) {
        say(optind >= argc ? "no EXEC_ID" : "more than one operand");
        return -EINVAL;
    }
    o.exec_id = argv[optind];
    if (!ws_docker_id_valid(o.exec_id)) {
        say("EXEC_ID is not a full exec id (64 lowercase hex digits)");
        return -EINVAL;
    }
    if (o.container_id && !ws_docker_id_valid(o.container_id)) {
        say("--container wants a full container id (64 lowercase hex digits)");
        return -EINVAL;
    }
    if (!host || !*host) {
        say("--host is required (unix:///path or tcp://host[:port])");
        return -EINVAL;
    }
    if ((seen[OPT_TLS] > 0) != (cert_path != NULL)) {
        /* Without the directory, the parser would fall back on $HOME:
         * keys are named by the server, never guessed here. */
        say("--tls-verify and --cert-path go together");
        return -EINVAL;
    }
    r = ws_docker_http_config_parse(host, seen[OPT_TLS] ? "1" : NULL, cert_path, NULL, &o.cfg);
    if (r < 0) {
        say("--host %s: %s", host,
            r == -EPROTONOSUPPORT ? "unsupported scheme (or TLS with a unix socket)"
                                  : strerror(-r));
        return -EINVAL;
    }
    if (!api || ws_docker_api_version_parse(api, &o.api) < 0) {
        say("--api MAJOR.MINOR is required");
        return -EINVAL;
    }
    if (!status || parse_fd(status, &o.status_fd) < 0 || o.status_fd < 3) {
        say("--status-fd needs a descriptor number of 3 or more");
        return -EINVAL;
    }
    if (!fd_open(o.status_fd)) {
        say("--status-fd %d is not open", o.status_fd);
        return -EINVAL;
    }
    if (nonce && !nonce_valid(nonce)) {
        say("--nonce wants %d lowercase hex digits", NONCE_HEX_DIGITS);
        return -EINVAL;
    }
    snprintf(o.record_open, sizeof(o.record_open), "%s%s%s", RECORD_OPEN, nonce ? nonce : "",
             nonce ? ";" : "");
    *ret_opts = o;
    return 0;
}

/* --- The connection -------------------------------------------------------- */

/* Connects to the daemon's unix socket or tcp port (blocking, bounded by
 * CONNECT_TIMEOUT_MS), then makes the socket non-blocking. No libcurl: the
 * relay starts for every command, and loading curl's libraries cost more
 * than the daemon's whole exec start. TLS is refused (see the top). On
 * failure, says why into errbuf. */
static int conn_open(const struct ws_docker_http_config *cfg, char *errbuf, struct conn *ret_conn)
{
    int fd = -1, err = 0;

    errbuf[0] = '\0';
    if (cfg->tls) {
        snprintf(errbuf, ERRBUF_MAX, "a TLS daemon is not supported for exec");
        return -EPROTONOSUPPORT;
    }
    if (cfg->transport == WS_DOCKER_HTTP_UNIX) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};

        if (strlen(cfg->unix_path) >= sizeof(sa.sun_path))
            return -ENAMETOOLONG;
        memcpy(sa.sun_path, cfg->unix_path, strlen(cfg->unix_path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
            err = -errno;
    } else {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        struct addrinfo *ai = NULL;
        char host[WS_DOCKER_HTTP_HOST_MAX], port[8];
        size_t n = strlen(cfg->host);

        /* A bracketed IPv6 literal is looked up without its brackets. */
        if (n >= 2 && cfg->host[0] == '[' && cfg->host[n - 1] == ']')
            snprintf(host, sizeof(host), "%.*s", (int)(n - 2), cfg->host + 1);
        else
            snprintf(host, sizeof(host), "%s", cfg->host);
        snprintf(port, sizeof(port), "%u", cfg->port);
        int g = getaddrinfo(host, port, &hints, &ai);
        if (g != 0) {
            snprintf(errbuf, ERRBUF_MAX, "%.128s: %.100s", host, gai_strerror(g));
            return -EHOSTUNREACH;
        }
        err = -ECONNREFUSED;
        for (struct addrinfo *a = ai; a; a = a->ai_next) {
            fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
            if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
                int one = 1;
                (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
                (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                err = 0;
                break;
            }
            err = -errno;
            if (fd >= 0)
                close(fd);
            fd = -1;
        }
        freeaddrinfo(ai);
    }
    if (err == 0 && fcntl(fd, F_SETFL, O_NONBLOCK) < 0)
        err = -errno;
    if (err < 0) {
        if (!errbuf[0])
            snprintf(errbuf, ERRBUF_MAX, "%s", strerror(-err));
        if (fd >= 0)
            close(fd);
        return err;
    }
    ret_conn->sock = fd;
    return 0;
}

/* Sends one chunk. Returns the bytes sent (> 0), -EAGAIN, or -EPIPE when
 * the connection no longer takes data. */
static ssize_t conn_send(struct conn *c, const void *data, size_t len)
{
    ssize_t n = send(c->sock, data, len, MSG_NOSIGNAL);

    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return -EAGAIN;
    if (n <= 0)
        return -EPIPE;
    return n;
}

/* Reads what is there. Returns the byte count (0 at the end of the
 * stream), -EAGAIN, or -ECONNRESET. */
static ssize_t conn_recv(struct conn *c, void *buf, size_t size)
{
    ssize_t n = recv(c->sock, buf, size, 0);

    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return -EAGAIN;
    if (n < 0)
        return -ECONNRESET;
    return n;
}

static int conn_send_all(struct conn *c, const char *data, size_t len, int64_t deadline)
{
    while (len > 0) {
        ssize_t n = conn_send(c, data, len);

        if (n == -EAGAIN) {
            int r = wait_fd(c->sock, POLLOUT, ms_left(deadline));

            if (r < 0)
                return r;
            continue;
        }
        if (n < 0)
            return (int)n;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads into buf[*len, size) until more bytes come in. Returns 0 with *len
 * grown, -ENODATA at the end of the stream, -ETIMEDOUT, -ECONNRESET. */
static int conn_read_more(struct conn *c, char *buf, size_t size, size_t *len, int64_t deadline)
{
    for (;;) {
        ssize_t n = conn_recv(c, buf + *len, size - *len);

        if (n > 0) {
            *len += (size_t)n;
            return 0;
        }
        if (n == 0)
            return -ENODATA;
        if (n != -EAGAIN)
            return (int)n;
        int r = wait_fd(c->sock, POLLIN, ms_left(deadline));
        if (r < 0)
            return r;
    }
}

static void conn_close(struct conn *c)
{
    if (c->sock >= 0)
        close(c->sock);
    c->sock = -1;
}

static size_t head_end(const char *buf, size_t len);
static int head_status(const char *h, size_t len);
static const char *head_value(const char *h, size_t len, const char *name, size_t *ret_len);
static int dechunk(const char *buf, size_t len, char *out, size_t *ret_len);

/* A plain request on its own connection (resize, inspect), answered on a
 * connection the daemon closes after it: the whole answer is read (bounded
 * by size), its body (de-chunked) left in buf, NUL-terminated. Returns 0
 * with *ret_status set, or a negative errno with a message in errbuf. */
static int simple_call(const struct ws_docker_http_config *cfg, bool post, const char *path,
                       char *buf, size_t size, size_t *ret_len, long *ret_status, char *errbuf)
{
    static char raw[HEAD_MAX + INSPECT_BODY_MAX];
    char req[WS_DOCKER_PATH_MAX + 128];
    int64_t deadline = ws_mono_ms() + CALL_TIMEOUT_MS;
    struct conn c = {.sock = -1};
    size_t len = 0, head, vlen = 0, body_len;
    const char *v;
    int r, status;

    r = conn_open(cfg, errbuf, &c);
    if (r < 0)
        return r;
    int n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: docker\r\nContent-Length: 0\r\n"
                     "Connection: close\r\n\r\n",
                     post ? "POST" : "GET", path);
    r = conn_send_all(&c, req, (size_t)n, deadline);
    while (r == 0 && len < sizeof(raw))
        r = conn_read_more(&c, raw, sizeof(raw), &len, deadline);
    conn_close(&c);
    if (r != -ENODATA) {
        snprintf(errbuf, ERRBUF_MAX, "%s", r == 0 ? "the answer is too long" : strerror(-r));
        return r == 0 ? -EMSGSIZE : r;
    }
    head = head_end(raw, len);
    status = head ? head_status(raw, head) : -EPROTO;
    if (status < 0) {
        snprintf(errbuf, ERRBUF_MAX, "the daemon's answer is not HTTP");
        return -EPROTO;
    }
    v = head_value(raw, head, "transfer-encoding", &vlen);
    if (v && vlen == 7 && strncasecmp(v, "chunked", 7) == 0) {
        if (dechunk(raw + head, len - head, buf, &body_len) != 1 || body_len >= size) {
            snprintf(errbuf, ERRBUF_MAX, "the daemon's chunked answer is malformed");
            return -EPROTO;
        }
    } else {
        body_len = len - head;
        if (body_len >= size) {
            snprintf(errbuf, ERRBUF_MAX, "the answer is too long");
            return -EMSGSIZE;
        }
        memcpy(buf, raw + head, body_len);
    }
    buf[body_len] = '\0';
    *ret_len = body_len;
    *ret_status = status;
    return 0;
}

/* --- Starting the exec ------------------------------------------------------ */

/* Finds "\r\n\r\n" in buf[0, len); returns the head's length through it, or
 * 0 when it is not there yet. */
static size_t head_end(const char *buf, size_t len)
{
    for (size_t i = 3; i < len; i++)
        if (buf[i] == '\n' && buf[i - 1] == '\r' && buf[i - 2] == '\n' && buf[i - 3] == '\r')
            return i + 1;
    return 0;
}

/* "HTTP/1.x NNN ..." -> NNN, or -EPROTO. */
static int head_status(const char *h, size_t len)
{
    if (len < 13 || memcmp(h, "HTTP/1.", 7) != 0 || h[7] < '0' || h[7] > '9' || h[8] != ' ')
        return -EPROTO;
    for (int i = 9; i < 12; i++)
        if (h[i] < '0' || h[i] > '9')
            return -EPROTO;
    if (h[12] != ' ' && h[12] != '\r')
        return -EPROTO;
    return (h[9] - '0') * 100 + (h[10] - '0') * 10 + (h[11] - '0');
}

/* The value of header `name` (case-insensitive) in the head, trimmed, or
 * NULL; *ret_len is its length. */
static const char *head_value(const char *h, size_t len, const char *name, size_t *ret_len)
{
    size_t nlen = strlen(name);
    const char *end = h + len;
    const char *line = memchr(h, '\n', len);

    while (line && ++line < end) {
        const char *eol = memchr(line, '\n', (size_t)(end - line));

        if (!eol)
            break;
        if ((size_t)(eol - line) > nlen && strncasecmp(line, name, nlen) == 0 &&
            line[nlen] == ':') {
            const char *v = line + nlen + 1, *ve = eol;

            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            *ret_len = (size_t)(ve - v);
            return v;
        }
        line = eol;
    }
    return NULL;
}

/* Decodes the chunked body in buf[0, len) into out (as large as buf).
 * Returns 1 when it is complete (the last chunk seen; *ret_len set), 0
 * when more is needed, -EPROTO. */
static int dechunk(const char *buf, size_t len, char *out, size_t *ret_len)
{
    size_t i = 0, o = 0;

    for (;;) {
        size_t size = 0, digits = 0;

        for (; i < len; i++, digits++) {
            char ch = buf[i];
            int v = ch >= '0' && ch <= '9'   ? ch - '0'
                    : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                    : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                             : -1;
            if (v < 0)
                break;
            if (size > ERROR_BODY_MAX)
                return -EPROTO;
            size = size * 16 + (size_t)v;
        }
        /* Chunk extensions up to the line's end are ignored. */
        while (i < len && buf[i] != '\n')
            i++;
        if (i >= len)
            return 0;
        if (digits == 0)
            return -EPROTO;
        i++;
        if (size == 0) {
            *ret_len = o;
            return 1;
        }
        if (len - i < size + 2)
            return 0;
        memcpy(out + o, buf + i, size);
        o += size;
        i += size + 2;
    }
}

/* Reads the body of a refusal (bounded, by Content-Length, chunks or the
 * connection's end) and says what the daemon said, or at least the
 * status. */
static void report_refusal(struct conn *c, int status, const char *head, size_t head_len,
                           const char *extra, size_t extra_len, int64_t deadline)
{
    static char raw[ERROR_BODY_MAX], decoded[ERROR_BODY_MAX];
    char msg[WS_DOCKER_MESSAGE_MAX];
    size_t vlen = 0, len, want = ERROR_BODY_MAX, body_len = 0;
    const char *v, *body = raw;
    bool chunked = false, has_length = false;
    int r = 0;

    v = head_value(head, head_len, "content-length", &vlen);
    if (v) {
        size_t n = 0, i = 0;

        has_length = true;
        for (; i < vlen && v[i] >= '0' && v[i] <= '9' && n <= ERROR_BODY_MAX; i++)
            n = n * 10 + (size_t)(v[i] - '0');
        if (i == 0)
            r = -EPROTO;
        else if (n < want)
            want = n;
    } else {
        v = head_value(head, head_len, "transfer-encoding", &vlen);
        chunked = v && vlen == 7 && strncasecmp(v, "chunked", 7) == 0;
        if (chunked)
            body = decoded;
    }
    len = extra_len < sizeof(raw) ? extra_len : sizeof(raw);
    memcpy(raw, extra, len);
    while (r == 0) {
        if (chunked) {
            r = dechunk(raw, len, decoded, &body_len);
            if (r != 0)
                break;
        } else if (len >= want) {
            body_len = want;
            break;
        }
        if (len >= sizeof(raw)) {
            r = -EMSGSIZE;
            break;
        }
        r = conn_read_more(c, raw, chunked ? sizeof(raw) : want, &len, deadline);
        if (r == -ENODATA && !chunked && !has_length) {
            /* Without a length, the connection's end ends the body. */
            body_len = len;
            r = 0;
            break;
        }
    }
    if (r >= 0)
        r = ws_docker_parse_error(body, body_len, msg, sizeof(msg));
    if (r >= 0)
        say("the daemon refused the exec: %s", msg);
    else
        say("the daemon refused the exec: HTTP status %d", status);
}

/* Sends the exec start and reads the response head. Returns 0 when the
 * stream follows (*ret_extra is how many bytes of it are already in
 * head_buf, at *ret_off), -EPERM when the daemon refused (and said why),
 * or another -errno (said too). */
static int start_exec(struct relay *r, size_t *ret_off, size_t *ret_extra)
{
    char path[WS_DOCKER_PATH_MAX], req[WS_DOCKER_PATH_MAX + 256];
    char *body = NULL;
    int64_t deadline = ws_mono_ms() + HEAD_TIMEOUT_MS;
    size_t len = 0, hlen = 0;
    int n, status, err;

    err = ws_docker_path_exec(r->opt.api, r->opt.exec_id, WS_DOCKER_EXEC_START, path, sizeof(path));
    if (err < 0)
        goto out;
    err = ws_docker_exec_start_body(r->opt.tty, &body);
    if (err < 0)
        goto out;
    n = snprintf(req, sizeof(req),
                 "POST %s HTTP/1.1\r\n"
                 "Host: docker\r\n"
                 "Content-Type: application/json\r\n"
                 "Connection: Upgrade\r\n"
                 "Upgrade: tcp\r\n"
                 "Content-Length: %zu\r\n"
                 "\r\n"
                 "%s",
                 path, strlen(body), body);
    if (n < 0 || (size_t)n >= sizeof(req)) {
        err = -ENOBUFS;
        goto out;
    }
    err = conn_send_all(&r->conn, req, (size_t)n, deadline);
    if (err < 0) {
        say("sending the exec start failed: %s", strerror(-err));
        goto out;
    }
    while ((hlen = head_end(head_buf, len)) == 0) {
        if (len == sizeof(head_buf)) {
            err = -EMSGSIZE;
            say("the daemon's response head is over %d bytes", HEAD_MAX);
            goto out;
        }
        err = conn_read_more(&r->conn, head_buf, sizeof(head_buf), &len, deadline);
        if (err < 0) {
            say("no response to the exec start: %s",
                err == -ENODATA ? "the daemon closed the connection" : strerror(-err));
            goto out;
        }
    }
    status = head_status(head_buf, hlen);
    if (status < 0) {
        err = status;
        say("the daemon's response is not HTTP/1.x");
        goto out;
    }
    /* 101 is the upgrade; daemons before API 1.30-ish answer 200 and
     * hijack the connection all the same. */
    if (status != 101 && status != 200) {
        report_refusal(&r->conn, status, head_buf, hlen, head_buf + hlen, len - hlen, deadline);
        err = -EPERM;
        goto out;
    }
    *ret_off = hlen;
    *ret_extra = len - hlen;
    err = 0;
out:
    free(body);
    return err;
}

/* --- The exit record ---------------------------------------------------------- */

enum record {
    RECORD_NO,     /* not a record, nor the start of one */
    RECORD_PREFIX, /* the start of a record: more bytes will tell */
    RECORD_FULL,   /* exactly one whole record */
};

struct cursor {
    const uint8_t *p;
    size_t n;
};

/* Matches the literal s at c, advancing past it when it is all there. */
static enum record match_lit(struct cursor *c, const char *s)
{
    size_t l = strlen(s), m = c->n < l ? c->n : l;

    if (memcmp(c->p, s, m) != 0)
        return RECORD_NO;
    c->p += m;
    c->n -= m;
    return m == l ? RECORD_FULL : RECORD_PREFIX;
}

/* Classifies s[0, n) against OPEN STATUS ESC "\\" where OPEN is
 * ESC "_wsinit;", or with a nonce ESC "_wsinit;" HEX ";" (the relay's
 * record_open), and STATUS is "exited N" (0..255) or "signaled N" (1..64),
 * decimal without leading zeros, then optionally " core", then optionally
 * " oom". Strict, so that the record the relay acts on is exactly the one
 * the init can write. */
static enum record record_match(const char *open, const uint8_t *s, size_t n)
{
    struct cursor c = {s, n};
    unsigned v = 0, digits = 0, min, max;
    bool core = false, oom = false;
    enum record m;

    if ((m = match_lit(&c, open)) != RECORD_FULL)
        return m;
    if ((m = match_lit(&c, "exited ")) == RECORD_FULL) {
        min = 0;
        max = 255;
    } else if (m == RECORD_PREFIX) {
        return m;
    } else if ((m = match_lit(&c, "signaled ")) == RECORD_FULL) {
        min = 1;
        max = 64;
    } else {
        return m;
    }
    for (; c.n > 0 && *c.p >= '0' && *c.p <= '9'; c.p++, c.n--, digits++) {
        if (digits > 0 && v == 0)
            return RECORD_NO;
        v = v * 10 + (unsigned)(*c.p - '0');
        if (v > max)
            return RECORD_NO;
    }
    if (digits == 0)
        return c.n == 0 ? RECORD_PREFIX : RECORD_NO;
    if (v < min)
        return RECORD_NO;
    for (;;) {
        if (c.n == 0)
            return RECORD_PREFIX;
        if ((m = match_lit(&c, RECORD_CLOSE)) == RECORD_FULL)
            return c.n == 0 ? RECORD_FULL : RECORD_NO;
        if (m == RECORD_PREFIX)
            return m;
        if (!core && !oom && (m = match_lit(&c, " core")) != RECORD_NO) {
            if (m == RECORD_PREFIX)
                return m;
            core = true;
            continue;
        }
        if (!oom && (m = match_lit(&c, " oom")) != RECORD_NO) {
            if (m == RECORD_PREFIX)
                return m;
            oom = true;
            continue;
        }
        return RECORD_NO;
    }
}

/* --- Output ------------------------------------------------------------------- */

/* A blocking full write to fd 1 or 2: while it blocks the socket is not
 * read, which is the backpressure. A reader that went away (EPIPE, or EIO
 * from a terminal whose master is closed) turns the fd's output off for
 * good; the caller keeps draining the socket regardless. */
static void out_write(struct relay *r, int fd, const uint8_t *p, size_t len)
{
    while (len > 0 && !r->gone[fd]) {
        ssize_t n = WS_RETRY_EINTR(write(fd, p, len));

        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* Someone handed us a non-blocking descriptor: block anyway. */
            wait_fd(fd, POLLOUT, -1);
            continue;
        }
        int e = n < 0 ? errno : EIO;
        r->gone[fd] = true;
        if (e != EPIPE && e != EIO && fd != STDERR_FILENO)
            say("writing to fd %d failed, its output is dropped: %s", fd, strerror(e));
    }
}

/* Writes the gathered slices (one writev, retried on partial writes). */
static void gather_flush(struct relay *r)
{
    struct iovec *iov = r->gather;
    int n = r->n_gather, fd = r->gather_fd;

    r->n_gather = 0;
    while (n > 0 && !r->gone[fd]) {
        ssize_t w = WS_RETRY_EINTR(writev(fd, iov, n));

        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            wait_fd(fd, POLLOUT, -1);
            continue;
        }
        if (w <= 0) {
            /* Let out_write say it (or mark the reader gone). */
            out_write(r, fd, iov[0].iov_base, iov[0].iov_len);
            iov++;
            n--;
            continue;
        }
        while (n > 0 && (size_t)w >= iov[0].iov_len) {
            w -= (ssize_t)iov[0].iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov[0].iov_base = (uint8_t *)iov[0].iov_base + w;
            iov[0].iov_len -= (size_t)w;
        }
    }
}

static void gather_add(struct relay *r, int fd, const uint8_t *p, size_t len)
{
    if (r->n_gather > 0 && (r->gather_fd != fd || r->n_gather == GATHER_MAX))
        gather_flush(r);
    r->gather_fd = fd;
    r->gather[r->n_gather++] = (struct iovec){.iov_base = (void *)p, .iov_len = len};
}

/* Passes the watched stream's bytes on, holding back the longest suffix of
 * what came so far that is, or may still become, an exit record: only that
 * suffix (at most RECORD_MAX bytes) waits for more bytes; everything
 * before it goes out now, so interactive output is not delayed. A held
 * record followed by anything is no longer a suffix and goes out as
 * output: only the record at the very end of the stream is the init's. */
static void hold_feed(struct relay *r, const uint8_t *data, size_t len)
{
    int fd = r->watched == WS_FRAMES_STDOUT ? STDOUT_FILENO : STDERR_FILENO;
    uint8_t win[RECORD_MAX];
    size_t total = r->held_len + len;
    size_t wlen = total < RECORD_MAX ? total : RECORD_MAX;
    size_t wstart = total - wlen, keep = 0, flush, from_held;

    for (size_t i = 0; i < wlen; i++) {
        size_t at = wstart + i;

        win[i] = at < r->held_len ? r->held[at] : data[at - r->held_len];
    }
    for (size_t i = 0; i < wlen; i++) {
        if (win[i] == ESC && record_match(r->opt.record_open, win + i, wlen - i) != RECORD_NO) {
            keep = wlen - i;
            break;
        }
    }
    flush = total - keep;
    from_held = flush < r->held_len ? flush : r->held_len;
    out_write(r, fd, r->held, from_held);
    out_write(r, fd, data, flush - from_held);
    memcpy(r->held, win + wlen - keep, keep);
    r->held_len = keep;
}

static int on_payload(void *arg, enum ws_frames_stream stream, const uint8_t *data, size_t len)
{
    struct relay *r = arg;

    if (stream == r->watched) {
        if (r->n_gather > 0)
            gather_flush(r);
        hold_feed(r, data, len);
    } else {
        /* systemerr is the daemon's, not the command's, but the command's
         * stderr is still the only place a reader will look. */
        gather_add(r, stream == WS_FRAMES_STDOUT ? STDOUT_FILENO : STDERR_FILENO, data, len);
    }
    return 0;
}

/* Returns 0 or -EPROTO (said). */
static int feed(struct relay *r, const uint8_t *data, size_t len)
{
    ssize_t n = ws_frames_feed(&r->frames, data, len, on_payload, r);

    /* Before the buffer is read into again, and before anything else is
     * written. */
    if (r->n_gather > 0)
        gather_flush(r);
    if (n < 0) {
        say("the daemon's stream is not well-formed: %s", strerror((int)-n));
        return (int)n;
    }
    return 0;
}

/* --- The terminal --------------------------------------------------------- */

/* Tells the daemon fd 0's size; a 0x0 terminal (nobody set one) is left to
 * the daemon's default. Failures are not reported: stderr is the user's
 * terminal here, and a wrong size is no reason to end the command. */
static void resize(struct relay *r)
{
    char path[WS_DOCKER_PATH_MAX], body[256];
    struct winsize ws;
    size_t len;
    long status;

    if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) < 0 || ws.ws_row == 0 || ws.ws_col == 0)
        return;
    if (ws_docker_path_exec_resize(r->opt.api, r->opt.exec_id, ws.ws_row, ws.ws_col, path,
                                   sizeof(path)) < 0)
        return;
    (void)simple_call(&r->opt.cfg, true, path, body, sizeof(body), &len, &status, r->err);
}

static void on_sigwinch(struct relay *r)
{
    struct signalfd_siginfo si[8];
    bool any = false;

    /* Several changes since the last look need one resize: the latest. */
    while (read(r->sigfd, si, sizeof(si)) > 0)
        any = true;
    if (any)
        resize(r);
}

/* Puts fd 0 in raw mode: the terminal that interprets keys and output is
 * the container's; this one must pass bytes untouched both ways. */
static int tty_setup(struct termios *ret_saved)
{
    struct termios t, saved;

    if (tcgetattr(STDIN_FILENO, &saved) < 0)
        return -errno;
    t = saved;
    cfmakeraw(&t);
    if (tcsetattr(STDIN_FILENO, TCSANOW, &t) < 0)
        return -errno;
    *ret_saved = saved;
    return 0;
}

/* --- The relay loop ------------------------------------------------------- */

/* Ends the forwarding of stdin, telling the process when we can. */
static void stdin_close(struct relay *r)
{
    r->in_reading = false;
    r->in_off = r->in_len = 0;
    if (r->in_closed)
        return;
    r->in_closed = true;
    /* Over TLS a half-close would end the session (see the top). */
    if (!r->opt.cfg.tls)
        shutdown(r->conn.sock, SHUT_WR);
}

static void stdin_read(struct relay *r)
{
    ssize_t n = WS_RETRY_EINTR(read(STDIN_FILENO, r->in_buf, IO_BUF_SIZE));

    if (n > 0) {
        r->in_off = 0;
        r->in_len = (size_t)n;
        return;
    }
    if (n < 0 && errno == EAGAIN)
        return;
    /* EOF, or EIO from a terminal whose other side is gone: the same end. */
    if (n < 0 && errno != EIO)
        say("reading stdin failed, closing the command's stdin: %s", strerror(errno));
    stdin_close(r);
}

static void stdin_send(struct relay *r)
{
    while (r->in_off < r->in_len) {
        ssize_t n = conn_send(&r->conn, r->in_buf + r->in_off, r->in_len - r->in_off);

        if (n == -EAGAIN)
            return;
        if (n < 0) {
            /* The process no longer reads stdin (or is gone): the rest of
             * the input has nowhere to go, the output may still come. */
            r->in_closed = true;
            stdin_close(r);
            return;
        }
        r->in_off += (size_t)n;
    }
    r->in_off = r->in_len = 0;
}

/* Relays until the daemon closes the stream. Returns 0 at its end, or
 * -EPROTO (said). */
/* Whether the watched container still runs (GET /containers/{id}/json):
 * when it does not, or is gone, says so in container_ended and
 * container_oom. A daemon that does not answer changes nothing: the next
 * quiet spell asks again. */
static void container_check(struct relay *r)
{
    static char body[INSPECT_BODY_MAX];
    char path[WS_DOCKER_PATH_MAX];
    struct ws_docker_state st;
    size_t len;
    long status;

    if (ws_docker_path_container(r->opt.api, r->opt.container_id, WS_DOCKER_CONTAINER_INSPECT, path,
                                 sizeof(path)) < 0 ||
        simple_call(&r->opt.cfg, false, path, body, sizeof(body), &len, &status, r->err) < 0)
        return;
    if (status == 404) {
        r->container_ended = true;
    } else if (status == 200 && ws_docker_parse_state(body, len, &st) == 0 && !st.running) {
        r->container_ended = true;
        r->container_oom = st.oom_killed;
    }
}

static int relay_loop(struct relay *r)
{
    /* Read first, poll once the socket says EAGAIN: the first read may
     * find what arrived with the head. */
    bool sock_ready = true;
    /* When the last read found data, and until when the socket is left
     * alone (see BATCH_BYTES). */
    int64_t last_data_us = INT64_MIN / 2, pause_until_us = 0;

    for (;;) {
        struct pollfd p[3];
        int np = 1, in_i = -1, sig_i = -1, n;
        bool pending_in = r->in_off < r->in_len;
        int64_t now = sock_ready ? 0 : ws_mono_us();
        bool pausing = !sock_ready && now < pause_until_us;
        struct timespec ts = {0}, *tsp = NULL;
        bool watching = false;

        if (sock_ready) {
            tsp = &ts;
        } else if (pausing) {
            int64_t left = pause_until_us - now;

            ts = (struct timespec){.tv_sec = left / 1000000, .tv_nsec = (left % 1000000) * 1000};
            tsp = &ts;
        } else if (r->opt.container_id) {
            ts = (struct timespec){.tv_sec = CONTAINER_CHECK_MS / 1000,
                                   .tv_nsec = (CONTAINER_CHECK_MS % 1000) * 1000000L};
            tsp = &ts;
            watching = true;
        }
        /* While pausing the socket is watched only for a pending stdin
         * write (a hang-up or an error is reported whatever the mask). */
        p[0] = (struct pollfd){.fd = r->conn.sock,
                               .events = (pausing ? 0 : POLLIN) | (pending_in ? POLLOUT : 0)};
        if (r->in_reading && !pending_in) {
            in_i = np;
            p[np++] = (struct pollfd){.fd = STDIN_FILENO, .events = POLLIN};
        }
        if (r->sigfd >= 0) {
            sig_i = np;
            p[np++] = (struct pollfd){.fd = r->sigfd, .events = POLLIN};
        }
        n = ppoll(p, (nfds_t)np, tsp, NULL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            say("poll failed: %s", strerror(errno));
            return -errno;
        }
        if (n == 0 && watching) {
            container_check(r);
            if (r->container_ended)
                return 0;
            continue;
        }
        if (sig_i >= 0 && p[sig_i].revents)
            on_sigwinch(r);
        if (pausing && ((p[0].revents & (POLLHUP | POLLERR)) || ws_mono_us() >= pause_until_us))
            sock_ready = true;
        if (sock_ready || (!pausing && (p[0].revents & (POLLIN | POLLHUP | POLLERR)))) {
            ssize_t got = conn_recv(&r->conn, sock_buf, sizeof(sock_buf));

            /* Take what else is queued already, so that many small frames
             * leave as one write (each write wakes the server). Never
             * waits: what is not there yet goes with the next read. */
            while (got > 0 && (size_t)got < sizeof(sock_buf)) {
                ssize_t more = conn_recv(&r->conn, sock_buf + got, sizeof(sock_buf) - (size_t)got);

                if (more <= 0)
                    break; /* EAGAIN, or the end: the next read sees it */
                got += more;
            }
            if (got == -EAGAIN) {
                sock_ready = false;
            } else if (got <= 0) {
                /* A reset is an end like any other: whether the stream was
                 * whole is for the framing and the exit record to say. */
                return 0;
            } else {
                int err = feed(r, sock_buf, (size_t)got);
                int64_t t = ws_mono_us();
                bool burst = t - last_data_us < BURST_WINDOW_US;

                if (err < 0)
                    return err;
                last_data_us = t;
                if (burst && (size_t)got < BATCH_BYTES) {
                    pause_until_us = t + BATCH_PAUSE_US;
                    sock_ready = false;
                } else {
                    sock_ready = true;
                }
            }
        }
        if (in_i >= 0 && p[in_i].revents)
            stdin_read(r);
        if (r->in_off < r->in_len)
            stdin_send(r);
    }
}

/* --- The end -------------------------------------------------------------- */

/* The exit code from GET /exec/{id}/json, or -ENODATA when it is not known
 * (said either way). */
static int inspect_exit(struct relay *r)
{
    static char body[INSPECT_BODY_MAX];
    char path[WS_DOCKER_PATH_MAX];
    struct ws_docker_exec_state st;
    size_t len;
    long status;
    int err;

    err =
        ws_docker_path_exec(r->opt.api, r->opt.exec_id, WS_DOCKER_EXEC_INSPECT, path, sizeof(path));
    if (err < 0)
        return err;
    for (int i = 0; i < INSPECT_TRIES; i++) {
        if (i > 0)
            ws_sleep_ms(INSPECT_PAUSE_MS);
        err = simple_call(&r->opt.cfg, false, path, body, sizeof(body), &len, &status, r->err);
        if (err < 0) {
            say("inspecting the exec failed: %s", r->err);
            return -ENODATA;
        }
        if (status != 200) {
            say("inspecting the exec failed: HTTP status %ld", status);
            return -ENODATA;
        }
        err = ws_docker_parse_exec_inspect(body, len, &st);
        if (err < 0) {
            say("the exec's inspect does not parse");
            return -ENODATA;
        }
        if (st.exited) {
            if (st.exit_code < 0 || st.exit_code > 255) {
                say("the exec's exit code %d is out of range", st.exit_code);
                return -ENODATA;
            }
            return st.exit_code;
        }
        if (!st.running)
            break;
    }
    say("the exec's exit code is unknown");
    return -ENODATA;
}

/* After the container ended under an open stream: what was held back is
 * output, and the status line says OOM when the daemon does. */
static int container_end(struct relay *r)
{
    static const char oom_line[] = "signaled 9 oom\n";

    out_write(r, r->watched == WS_FRAMES_STDOUT ? STDOUT_FILENO : STDERR_FILENO, r->held,
              r->held_len);
    r->held_len = 0;
    /* The daemon learns of the OOM kill and of the end as two events, in
     * either order: a stopped container is asked again for a while. */
    for (int i = 0; !r->container_oom && i < CONTAINER_OOM_TRIES; i++) {
        ws_sleep_ms(INSPECT_PAUSE_MS);
        container_check(r);
    }
    if (!r->container_oom) {
        say("the container stopped while the command ran; the command's exit is unknown");
        return EXIT_FAILED;
    }
    say("the container was killed for lack of memory (its memory limit) while the command ran");
    (void)ws_write_all(r->opt.status_fd, oom_line, sizeof(oom_line) - 1);
    return 128 + SIGKILL;
}

/* After the stream's end: the status line and the exit code. */
static int finish(struct relay *r)
{
    const size_t open_len = strlen(r->opt.record_open), close_len = sizeof(RECORD_CLOSE) - 1;
    char line[RECORD_MAX];
    const char *p;
    size_t len;
    unsigned v = 0;
    bool signaled;
    int code;

    if (ws_frames_eof(&r->frames) < 0) {
        say("the daemon's stream ended inside a frame");
        return EXIT_FAILED;
    }
    if (record_match(r->opt.record_open, r->held, r->held_len) != RECORD_FULL) {
        /* A partial record at the end is output like any other bytes. */
        out_write(r, r->watched == WS_FRAMES_STDOUT ? STDOUT_FILENO : STDERR_FILENO, r->held,
                  r->held_len);
        r->held_len = 0;
        for (int i = 0; r->opt.container_id && i < CONTAINER_SETTLE_TRIES; i++) {
            if (i > 0)
                ws_sleep_ms(INSPECT_PAUSE_MS);
            container_check(r);
            if (r->container_ended)
                return container_end(r);
        }
        say("no exit record came from the container; the exit code is the exec's");
        code = inspect_exit(r);
        return code < 0 ? EXIT_FAILED : code;
    }
    /* record_match vouched for the form: "exited N..." or "signaled N...",
     * so the number starts after the first space and the line fits. */
    len = r->held_len - open_len - close_len;
    memcpy(line, r->held + open_len, len);
    line[len++] = '\n';
    signaled = line[0] == 's';
    for (p = (const char *)memchr(line, ' ', len) + 1; *p >= '0' && *p <= '9'; p++)
        v = v * 10 + (unsigned)(*p - '0');
    /* A failure means the server went away: the exit code still tells. */
    (void)ws_write_all(r->opt.status_fd, line, len);
    return signaled ? 128 + (int)v : (int)v;
}

int main(int argc, char **argv)
{
    struct relay r = {.sigfd = -1, .in_buf = stdin_buf, .conn = {.sock = -1}};
    struct termios saved;
    bool tty_saved = false;
    size_t off = 0, extra = 0;
    int code, err;

    /* An fd the server forgot to open would be taken by the socket, and
     * output would go to the daemon. */
    for (int fd = 0; fd <= 2; fd++) {
        if (!fd_open(fd)) {
            say("fd %d is not open", fd);
            return EXIT_USAGE;
        }
    }
    if (parse_args(argc, argv, &r.opt) < 0) {
        usage_line();
        return EXIT_USAGE;
    }
    /* A reader that goes away is seen as EPIPE, not a signal. */
    signal(SIGPIPE, SIG_IGN);
    if (r.opt.tty) {
        sigset_t mask;

        err = tty_setup(&saved);
        if (err < 0) {
            say("--tty needs a terminal on fd 0: %s", strerror(-err));
            return EXIT_USAGE;
        }
        tty_saved = true;
        /* Blocked before the first resize, so a change from then on is
         * pending on the signalfd rather than lost. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGWINCH);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        r.sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    }
    r.watched = r.opt.tty ? WS_FRAMES_STDOUT : WS_FRAMES_STDERR;
    r.in_reading = r.opt.stdin_on;
    /* Without --stdin the exec has no stdin: nothing is half-closed. */
    r.in_closed = !r.opt.stdin_on;
    ws_frames_init(&r.frames, r.opt.tty);

    err = conn_open(&r.opt.cfg, r.err, &r.conn);
    if (err < 0) {
        say("cannot connect to the daemon: %s", r.err);
        code = EXIT_FAILED;
        goto out;
    }
    err = start_exec(&r, &off, &extra);
    if (err < 0) {
        code = EXIT_FAILED;
        goto out;
    }
    /* The daemon holds a resize until the exec has started, which it
     * does right after the head it just sent. */
    if (r.opt.tty)
        resize(&r);
    /* Bytes read with the head are the stream's first. */
    err = feed(&r, (const uint8_t *)head_buf + off, extra);
    if (err == 0)
        err = relay_loop(&r);
    code = err < 0 ? EXIT_FAILED : r.container_ended ? container_end(&r) : finish(&r);
out:
    conn_close(&r.conn);
    if (r.sigfd >= 0)
        close(r.sigfd);
    if (tty_saved)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    return code;
}
