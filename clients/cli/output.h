/* What wsctl prints: the one-line error format, JSON renderings of
 * protobuf-c messages for --json, base64, and the human-readable forms
 * shared by several commands.
 *
 * Functions that build JSON return a new reference (NULL only when out of
 * memory); wsc_json_emit steals it. Nothing here knows gRPC beyond the
 * decoded wsc_error.
 */
#ifndef WSC_OUTPUT_H
#define WSC_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

#include "clients/cli/rpc.h"
#include "workspace/v1/common.pb-c.h"

/* Exit statuses of wsctl itself (a remote command's own status is passed
 * through by exec). */
#define WSC_EXIT_OK    0
#define WSC_EXIT_FAIL  1
#define WSC_EXIT_USAGE 2
/* audit: the log was read but its chain does not verify. */
#define WSC_EXIT_AUDIT   3
#define WSC_EXIT_TIMEOUT 124
#define WSC_EXIT_SIGINT  130

/* "wsctl: REASON: message" on stderr; returns WSC_EXIT_FAIL. */
int wsc_report(const struct wsc_error *e);
/* "wsctl: what: strerror(-err)" for a local failure; returns WSC_EXIT_FAIL. */
int wsc_report_errno(const char *what, int err);
/* "wsctl: message" plus a hint at --help; returns WSC_EXIT_USAGE. */
int wsc_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Every field of `msg` as a JSON object: proto field names, enums by name,
 * bytes as base64, only the set member of a oneof, absent messages left
 * out, maps as objects. */
json_t *wsc_json_message(const ProtobufCMessage *msg);
/* A byte string as JSON: a string when it is valid UTF-8, else an object
 * {"base64": ...}. */
json_t *wsc_json_bytes(const uint8_t *data, size_t len);
/* Prints `j` on one line to stdout and releases it. 0, or -EIO. */
int wsc_json_emit(json_t *j);

/* Standard base64 with padding. Encode returns a malloc'd string (NULL when
 * out of memory); decode returns the length written to a malloc'd buffer
 * or -EINVAL / -ENOMEM. */
char *wsc_base64_encode(const uint8_t *data, size_t len);
int wsc_base64_decode(const char *text, uint8_t **ret_data, size_t *ret_len);

/* A unix-ms instant as "2025-01-31T12:00:00Z" (UTC); 0 is "never". */
void wsc_format_time(int64_t unix_ms, char *buf, size_t cap);
/* A duration as "1d2h", "1h30m", "90s" is "1m30s", "500ms"; 0 is "none". */
void wsc_format_duration(uint64_t ms, char *buf, size_t cap);

/* A protobuf map field (its entries, each a key and a string value) as
 * "k1=v1<sep>k2=v2", keys sorted, to `f`; "-" when it is empty. */
void wsc_print_map(FILE *f, const void *entries, size_t n, const char *sep);

/* One line per entry: type letter, mode, size, path. */
void wsc_print_file_info(const Workspace__V1__FileInfo *fi);
/* The path of a FileInfo, or "?" when the server could only send bytes. */
const char *wsc_file_path(const Workspace__V1__FileInfo *fi);

#endif
