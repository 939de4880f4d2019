/* The server's metrics: counters, gauges and histograms kept in this
 * process and rendered in the Prometheus text format (version 0.0.4).
 *
 * Ownership: the metrics are one process-wide set owned by this module
 * (static storage; nothing to create or free). Recording functions copy
 * what they are given; the caller keeps its strings.
 *
 * Thread safety: every function may be called from any thread at any
 * time, including concurrently with ws_metrics_render; one mutex guards
 * the whole set (recording is a few compares and adds under it).
 *
 * Cardinality: label values are bounded here whatever the caller passes.
 * Each labelled family holds at most WS_METRICS_SERIES_MAX series; a value
 * is cut to WS_METRICS_LABEL_MAX bytes and characters outside
 * [A-Za-z0-9_.-] become '_'; once a family is full, further label values
 * are counted under "overflow". Callers still pass only server-side names
 * (provider table names, ErrorInfo reasons, exit causes), never raw
 * client input.
 */
#ifndef WS_METRICS_H
#define WS_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* Series kept per labelled family. */
#define WS_METRICS_SERIES_MAX 64
/* Longest label value kept, bytes. */
#define WS_METRICS_LABEL_MAX 48

/* Workspaces.Open finished: provider name ("memory", ...; "unknown" when
 * the request named none), "ok" or the ErrorInfo reason, and how long the
 * call took. */
void ws_metrics_open(const char *provider, const char *status, int64_t ms);
/* Workspaces.Close finished ("ok", "already_closed" or the reason). */
void ws_metrics_close(const char *provider, const char *status);
/* A workspace was found evicted (its storage gone behind the server). */
void ws_metrics_evicted(const char *provider);
/* A workspace expired (its lifetime ran out) and was closed. */
void ws_metrics_expired(const char *provider);

/* A command started; ws_metrics_command_ended follows exactly once. */
void ws_metrics_command_started(void);
/* A command ended with `cause` ("EXITED", "TIMEOUT", ...) after wall_ms,
 * having produced these byte counts per stream. */
void ws_metrics_command_ended(const char *cause, uint64_t wall_ms, uint64_t stdout_bytes,
                              uint64_t stderr_bytes, uint64_t pty_bytes);

/* A call ended with an error status carrying this ErrorInfo reason. */
void ws_metrics_rejected(const char *reason);
/* An audit record ("command", "write", ...) could not be appended: the
 * call it records stands (its change was made), the record is lost and
 * counted here for the operator to alert on. */
void ws_metrics_audit_lost(const char *event);

/* The per-tenant gauges (open workspaces, running commands) are read at
 * render time from whoever counts them, so they can never drift from the
 * counts the quotas use. A source is called with no lock of this module
 * held and reports each tenant it knows through ws_metrics_tenant_gauge
 * on the `g` it was given. Set each once, before serving; NULL reports
 * nothing. A tenant appears once it has opened a workspace in this run,
 * and stays (at 0) after. */
struct ws_metrics_gauges;
enum ws_metrics_gauge {
    WS_METRICS_WORKSPACES, /* workspaced_active_workspaces */
    WS_METRICS_COMMANDS,   /* workspaced_active_commands */
};
typedef void (*ws_metrics_source)(void *ud, struct ws_metrics_gauges *g);
void ws_metrics_set_source(enum ws_metrics_gauge which, ws_metrics_source fn, void *ud);
void ws_metrics_tenant_gauge(struct ws_metrics_gauges *g, const char *tenant, long value);

/* Where the connection figures come from (the transport's bound): open
 * connections now, those refused since the start, and those closed on
 * accept because the server was out of descriptors. Called at render
 * time with no lock of this module held. NULL: not reported. */
void ws_metrics_set_connections_source(unsigned (*open)(void), uint64_t (*refused)(void),
                                       uint64_t (*shed)(void));

/* Where the send buffer's figures come from (server/rpc/sendq.c): bytes
 * of responses waiting for their clients now, and calls cancelled since
 * the start because they were over the cap. As above; NULL: not
 * reported. */
void ws_metrics_set_send_source(uint64_t (*queued)(void), uint64_t (*evicted)(void));

/* The whole set in the Prometheus text format: a malloc'd, NUL-terminated
 * string in *ret_text (the caller frees it) and its length. 0 or -ENOMEM. */
int ws_metrics_render(char **ret_text, size_t *ret_len);

#endif
