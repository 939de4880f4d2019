/* DOCKER_HOST and friends; see endpoint.h. */
#include "server/docker/endpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- Configuration -------------------------------------------------------- */

void ws_docker_http_config_default(struct ws_docker_http_config *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->transport = WS_DOCKER_HTTP_UNIX;
    snprintf(ret->unix_path, sizeof(ret->unix_path), "%s", WS_DOCKER_HTTP_DEFAULT_SOCKET);
}

static bool empty(const char *s)
{
    return !s || !*s;
}

/* Copies src into dst[size]; -ENAMETOOLONG rather than truncating. */
static int copy_str(char *dst, size_t size, const char *src, size_t len)
{
    if (len >= size)
        return -ENAMETOOLONG;
    memcpy(dst, src, len);
    dst[len] = '\0';
    return 0;
}

static int join_path(char *dst, size_t size, const char *dir, const char *name)
{
    int n = snprintf(dst, size, "%s/%s", dir, name);

    if (n < 0 || (size_t)n >= size)
        return -ENAMETOOLONG;
    return 0;
}

static bool host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
}

/* "host[:port]" or "[v6]:port" into cfg->host and cfg->port. */
static int parse_tcp(const char *s, struct ws_docker_http_config *cfg)
{
    const char *host_end, *port = NULL;
    int r;

    if (*s == '[') {
        host_end = strchr(s, ']');
        if (!host_end || host_end == s + 1)
            return -EINVAL;
        for (const char *p = s + 1; p < host_end; p++)
            if (!(host_char(*p) || *p == ':' || *p == '%'))
                return -EINVAL;
        host_end++;
    } else {
        host_end = s;
        while (host_char(*host_end))
            host_end++;
        if (host_end == s)
            return -EINVAL;
    }
    if (*host_end == ':')
        port = host_end + 1;
    else if (*host_end != '\0' && strcmp(host_end, "/") != 0)
        return -EINVAL;
    r = copy_str(cfg->host, sizeof(cfg->host), s, (size_t)(host_end - s));
    if (r < 0)
        return r;
    if (port) {
        unsigned long v = 0;
        const char *p = port;

        for (; *p >= '0' && *p <= '9'; p++) {
            v = v * 10 + (unsigned long)(*p - '0');
            if (v > 65535)
                return -EINVAL;
        }
        if (p == port || v == 0 || (*p != '\0' && strcmp(p, "/") != 0))
            return -EINVAL;
        cfg->port = (unsigned)v;
    }
    return 0;
}

int ws_docker_http_config_parse(const char *docker_host, const char *tls_verify,
                                const char *cert_path, const char *home,
                                struct ws_docker_http_config *ret)
{
    struct ws_docker_http_config cfg;
    char dir[WS_DOCKER_HTTP_CERT_PATH_MAX];
    int r;

    ws_docker_http_config_default(&cfg);
    if (empty(docker_host))
        goto done;
    if (strncmp(docker_host, "unix://", 7) == 0) {
        const char *path = docker_host + 7;

        if (path[0] != '/')
            return -EINVAL;
        r = copy_str(cfg.unix_path, sizeof(cfg.unix_path), path, strlen(path));
        if (r < 0)
            return r;
        /* The Docker CLI ignores DOCKER_TLS_VERIFY for a local socket. */
        goto done;
    }
    if (strncmp(docker_host, "tcp://", 6) != 0)
        return strstr(docker_host, "://") ? -EPROTONOSUPPORT : -EINVAL;
    cfg.transport = WS_DOCKER_HTTP_TCP;
    cfg.unix_path[0] = '\0';
    cfg.tls = !empty(tls_verify);
    cfg.port = cfg.tls ? WS_DOCKER_HTTP_TCP_TLS_PORT : WS_DOCKER_HTTP_TCP_PORT;
    r = parse_tcp(docker_host + 6, &cfg);
    if (r < 0)
        return r;
    if (cfg.tls) {
        if (!empty(cert_path))
            r = copy_str(dir, sizeof(dir), cert_path, strlen(cert_path));
        else if (!empty(home))
            r = join_path(dir, sizeof(dir), home, ".docker");
        else
            r = -EINVAL;
        if (r < 0)
            return r;
        r = join_path(cfg.tls_ca, sizeof(cfg.tls_ca), dir, "ca.pem");
        if (r == 0)
            r = join_path(cfg.tls_cert, sizeof(cfg.tls_cert), dir, "cert.pem");
        if (r == 0)
            r = join_path(cfg.tls_key, sizeof(cfg.tls_key), dir, "key.pem");
        if (r < 0)
            return r;
    }
done:
    *ret = cfg;
    return 0;
}

int ws_docker_http_config_from_env(struct ws_docker_http_config *ret)
{
    return ws_docker_http_config_parse(getenv("DOCKER_HOST"), getenv("DOCKER_TLS_VERIFY"),
                                       getenv("DOCKER_CERT_PATH"), getenv("HOME"), ret);
}
