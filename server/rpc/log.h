/* The server's log: one JSON object per line on stderr,
 *   {"ts":"2026-01-02T03:04:05.678Z","level":"info","event":"rpc.drain","fields":{...}}
 * ts is UTC with milliseconds, level one of error|info|debug, event a
 * dotted name, fields an object (empty when there is nothing to add).
 * Nothing logged carries a secret, an environment value or file
 * contents: callers pass names, numbers and error texts only.
 *
 * Thread safety: any thread; each line is written with one call so lines
 * from several threads never interleave.
 */
#ifndef WS_RPC_LOG_H
#define WS_RPC_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum { WS_RPC_LOG_ERROR = 0, WS_RPC_LOG_INFO = 1, WS_RPC_LOG_DEBUG = 2 };

/* Longest line written; longer free text is cut. */
#define WS_LOG_LINE_MAX 4096

/* Writes one line whatever the level setting; `fields_json` is the text
 * of a JSON object ("{...}") or NULL for {}. */
void ws_log_json(int level, const char *event, const char *fields_json);
/* One line with a single free-text field "message" (escaped here), always
 * written. For main's start-up and shutdown notes. */
void ws_log_msg(int level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Copies `src` into dst[0..size) as the inside of a JSON string (quotes,
 * backslashes and control characters escaped), always terminated, cut at
 * a character boundary when it does not fit. */
void ws_log_escape(char *dst, size_t size, const char *src);

#endif
