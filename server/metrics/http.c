/* GET /metrics on libmicrohttpd's internal polling thread. */
#include "server/metrics/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "server/metrics/metrics.h"

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define HOST_MAX     64

struct ws_metrics_http {
    struct MHD_Daemon *d;
};

/* Splits "host:port" / "[v6]:port" into a socket address. */
static int parse_addr(const char *addr, struct sockaddr_storage *ss, bool *ret_loopback)
{
    char host[HOST_MAX];
    const char *end, *port_s;
    char *stop;
    unsigned long port;
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;

    if (!addr)
        return -EINVAL;
    if (addr[0] == '[') {
        end = strchr(addr, ']');
        if (!end || end[1] != ':')
            return -EINVAL;
        addr++;
        port_s = end + 2;
    } else {
        end = strrchr(addr, ':');
        if (!end)
            return -EINVAL;
        port_s = end + 1;
    }
    if ((size_t)(end - addr) >= sizeof(host) || !*port_s)
        return -EINVAL;
    memcpy(host, addr, (size_t)(end - addr));
    host[end - addr] = '\0';
    errno = 0;
    port = strtoul(port_s, &stop, 10);
    if (errno || *stop || port > 65535 || *port_s == '-')
        return -EINVAL;
    memset(ss, 0, sizeof(*ss));
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof(host), "127.0.0.1");
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *ret_loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *ret_loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
        return 0;
    }
    return -EINVAL;
}

bool ws_metrics_http_addr_is_loopback(const char *addr)
{
    struct sockaddr_storage ss;
    bool loopback = false;

    return parse_addr(addr, &ss, &loopback) == 0 && loopback;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, const char *text,
                             size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)text, mode);
    enum MHD_Result ret;

    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, CONTENT_TYPE);
    ret = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **state)
{
    static const char not_found[] = "not found\n";
    static const char bad_method[] = "method not allowed\n";
    char *text;
    size_t len;

    (void)cls;
    (void)version;
    (void)upload;
    /* A request body is never wanted: refuse it rather than buffer it. */
    if (*upload_size)
        return MHD_NO;
    (void)state;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, bad_method, sizeof(bad_method) - 1,
                     MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/metrics") != 0)
        return reply(conn, MHD_HTTP_NOT_FOUND, not_found, sizeof(not_found) - 1,
                     MHD_RESPMEM_PERSISTENT);
    if (ws_metrics_render(&text, &len) < 0)
        return MHD_NO;
    return reply(conn, MHD_HTTP_OK, text, len, MHD_RESPMEM_MUST_FREE);
}

/* libmicrohttpd's own messages are dropped: the server's log is JSON and
 * these would be free text. */
static void quiet(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    (void)fmt;
    (void)ap;
}

int ws_metrics_http_start(const char *addr, struct ws_metrics_http **ret, int *ret_port)
{
    struct sockaddr_storage ss;
    struct ws_metrics_http *h;
    const union MHD_DaemonInfo *info;
    bool loopback;
    int r;

    r = parse_addr(addr, &ss, &loopback);
    if (r < 0)
        return r;
    h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
                                (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
                            0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)WS_METRICS_HTTP_CONNECTIONS_MAX,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)WS_METRICS_HTTP_TIMEOUT_S,
                            MHD_OPTION_EXTERNAL_LOGGER, quiet, NULL, MHD_OPTION_END);
    if (!h->d) {
        free(h);
        return -EADDRNOTAVAIL;
    }
    info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    *ret_port = info ? (int)info->port : 0;
    *ret = h;
    return 0;
}

void ws_metrics_http_stop(struct ws_metrics_http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    free(h);
}
