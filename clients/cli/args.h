/* Argument forms shared by several wsctl commands: durations, NAME=VALUE
 * lists (labels, env, secrets), docker's detach-key sequences, and the
 * random request id that makes a retried Open safe.
 *
 * Nothing here prints or knows gRPC. Functions return 0 or -errno and
 * write their ret_* out-parameters only on success.
 */
#ifndef WSC_ARGS_H
#define WSC_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most entries of one NAME=VALUE list: the server's own limit on
 * labels, env and secrets. */
#define WSC_KV_MAX 64
/* The longest detach sequence. */
#define WSC_DETACH_KEYS_MAX 16
/* The bytes of a request id, with its NUL: "wsctl-" and 32 hex digits. */
#define WSC_REQUEST_ID_LEN 39

/* A duration: a decimal number and a unit, ms, s, m, h or d ("500ms",
 * "90s", "10m", "2h", "1.5d"); a bare number is seconds. -EINVAL for
 * anything else, -ERANGE past what milliseconds in 63 bits hold. */
int wsc_parse_duration_ms(const char *s, uint64_t *ret_ms);

/* Pointers into the caller's strings (argv or the environment). */
struct wsc_kvs {
    size_t n;
    const char *key[WSC_KV_MAX];
    const char *value[WSC_KV_MAX];
};

/* Adds `key` with `value`; a key given again takes the later value.
 * -E2BIG past WSC_KV_MAX, -EINVAL for an empty key. */
int wsc_kvs_set(struct wsc_kvs *kv, const char *key, const char *value);
/* Adds "KEY=VALUE" (split at the first '=', which `arg` loses: it becomes
 * the key's NUL). -EINVAL without a '=' or with an empty key. */
int wsc_kvs_add(struct wsc_kvs *kv, char *arg);
/* Adds NAME with the value of wsctl's own environment variable NAME:
 * -ENOENT when it is not set. */
int wsc_kvs_add_from_env(struct wsc_kvs *kv, const char *name);

/* docker's detach-key syntax: comma-separated keys, each a single
 * character or "ctrl-X" for X in a-z, @, [, \, ], ^, _ ("ctrl-p,ctrl-q").
 * "" is no sequence (detaching off). */
struct wsc_detach {
    uint8_t keys[WSC_DETACH_KEYS_MAX];
    size_t n;
    /* Keys of the sequence matched so far (held back, not yet sent). */
    size_t matched;
};

int wsc_detach_parse(const char *spec, struct wsc_detach *ret_detach);
/* Filters typed bytes: what is not (yet) part of the sequence goes to
 * `out` (room for len + WSC_DETACH_KEYS_MAX bytes), its length in
 * *ret_out_len. A prefix of the sequence is held back until the next key
 * shows whether it is one; a key that breaks it releases the prefix.
 * Returns true when the whole sequence was typed: the bytes after it in
 * `in` are dropped. */
bool wsc_detach_feed(struct wsc_detach *d, const uint8_t *in, size_t len, uint8_t *out,
                     size_t *ret_out_len);

/* A fresh random OpenRequest.request_id: "wsctl-" and 32 hex digits. */
int wsc_request_id(char ret_id[WSC_REQUEST_ID_LEN]);

#endif
