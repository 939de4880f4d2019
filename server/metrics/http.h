/* The metrics listener: GET /metrics over plain HTTP/1.1 (libmicrohttpd),
 * on its own thread, separate from the gRPC port.
 *
 * Ownership: ws_metrics_http_start returns a listener the caller stops
 * with ws_metrics_http_stop (which joins its thread).
 * Thread safety: start and stop from one thread (main); requests are
 * served on the listener's own thread.
 */
#ifndef WS_METRICS_HTTP_H
#define WS_METRICS_HTTP_H

#include <stdbool.h>

/* Connections served at once; more wait in the kernel's backlog. */
#define WS_METRICS_HTTP_CONNECTIONS_MAX 16
/* An idle or slow connection is dropped after this, seconds. */
#define WS_METRICS_HTTP_TIMEOUT_S 10

struct ws_metrics_http;

/* True when `addr` ("host:port", "[v6]:port") names a loopback host
 * (127.0.0.0/8, ::1, localhost). */
bool ws_metrics_http_addr_is_loopback(const char *addr);

/* Binds `addr` (a literal IPv4 or [IPv6] address or "localhost", with a
 * port; 0 picks one) and starts serving. *ret_port receives the bound
 * port. -EINVAL for an address it cannot parse, -EADDRNOTAVAIL when the
 * bind fails, -ENOMEM. */
int ws_metrics_http_start(const char *addr, struct ws_metrics_http **ret, int *ret_port);
/* Accepts NULL. */
void ws_metrics_http_stop(struct ws_metrics_http *h);

#endif
