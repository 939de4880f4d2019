/* Where the Docker daemon is: the DOCKER_HOST conventions (unix socket,
 * tcp, TLS certificates) parsed into a plain struct. Shared by the HTTP
 * client (http.h) and the exec relay, which must not pull in libcurl.
 *
 * Pure functions of their arguments (config_from_env reads the
 * environment); no resources are held.
 */
#ifndef WS_DOCKER_ENDPOINT_H
#define WS_DOCKER_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>

/* The daemon's default socket when DOCKER_HOST is unset. */
#define WS_DOCKER_HTTP_DEFAULT_SOCKET "/var/run/docker.sock"
/* DOCKER_HOST=tcp://host without a port: Docker's registered ports. */
#define WS_DOCKER_HTTP_TCP_PORT     2375
#define WS_DOCKER_HTTP_TCP_TLS_PORT 2376
/* sizeof(sockaddr_un.sun_path), including the NUL. */
#define WS_DOCKER_HTTP_UNIX_PATH_MAX 108
/* A host name or bracketed IPv6 literal, including the NUL. */
#define WS_DOCKER_HTTP_HOST_MAX 256
/* CA, certificate and key paths, including the NUL. */
#define WS_DOCKER_HTTP_CERT_PATH_MAX 4096

/* --- Configuration -------------------------------------------------------- */

enum ws_docker_http_transport {
    WS_DOCKER_HTTP_UNIX = 0,
    WS_DOCKER_HTTP_TCP,
};

/* Plain data; a zeroed struct is not valid, use config_default or
 * config_from_env (or fill it in). */
struct ws_docker_http_config {
    enum ws_docker_http_transport transport;
    char unix_path[WS_DOCKER_HTTP_UNIX_PATH_MAX]; /* WS_DOCKER_HTTP_UNIX */
    char host[WS_DOCKER_HTTP_HOST_MAX];           /* WS_DOCKER_HTTP_TCP */
    unsigned port;
    /* TCP only: HTTPS with the daemon's certificate verified against ca,
     * the client authenticating with cert and key (PEM files). */
    bool tls;
    char tls_ca[WS_DOCKER_HTTP_CERT_PATH_MAX];
    char tls_cert[WS_DOCKER_HTTP_CERT_PATH_MAX];
    char tls_key[WS_DOCKER_HTTP_CERT_PATH_MAX];
    /* The HTTP client's limits (http.h); 0 means its _DEFAULT. */
    unsigned calls_max;
    unsigned connections_max;
};

/* The default: unix socket WS_DOCKER_HTTP_DEFAULT_SOCKET. */
void ws_docker_http_config_default(struct ws_docker_http_config *ret);

/* Parses the Docker client's conventions; NULL or "" stands for an unset
 * variable. docker_host: "unix:///path" or "tcp://host[:port]" (host may
 * be a bracketed IPv6 literal); unset means the default socket.
 * tls_verify non-empty turns TLS on (tcp only) with ca.pem, cert.pem and
 * key.pem from cert_path, or from $HOME/.docker when cert_path is unset
 * (home may be NULL, then cert_path is required).
 * Returns 0, -EINVAL (malformed), -EPROTONOSUPPORT (another scheme such as
 * ssh:// or npipe://, or TLS with a unix socket), -ENAMETOOLONG. */
int ws_docker_http_config_parse(const char *docker_host, const char *tls_verify,
                                const char *cert_path, const char *home,
                                struct ws_docker_http_config *ret);

/* ws_docker_http_config_parse over DOCKER_HOST, DOCKER_TLS_VERIFY,
 * DOCKER_CERT_PATH and HOME. Reads the environment: call it at startup,
 * before threads that might setenv(). */
int ws_docker_http_config_from_env(struct ws_docker_http_config *ret);

#endif
