/* A workspace's secrets (OpenRequest.secrets): name/value pairs held in
 * memory only, in pages of their own that are excluded from core dumps
 * (MADV_DONTDUMP), locked in RAM where RLIMIT_MEMLOCK allows (never
 * swapped), and wiped before they are unmapped. Immutable once made: a
 * SetSecrets makes a new set. */
#ifndef WS_REGISTRY_SECRETS_H
#define WS_REGISTRY_SECRETS_H

#include <stdbool.h>
#include <stddef.h>

#include "server/base/errors.h"

#define WS_SECRETS_MAX       64
#define WS_SECRETS_BYTES_MAX (64 * 1024) /* all values */

struct ws_secrets;

struct ws_secret {
    const char *name;
    const char *value; /* NULL: "" */
};

/* Copies n pairs (n may be 0) into a new set. Names must be distinct
 * (checked by the caller). -ENOMEM, or -errno of mmap. */
int ws_secrets_new(const struct ws_secret *pairs, size_t n, struct ws_secrets **ret);
/* A set with `base`'s pairs, then `add`'s: a name of both takes add's
 * value. */
int ws_secrets_merge(const struct ws_secrets *base, const struct ws_secret *add, size_t n_add,
                     struct ws_secrets **ret);
/* Wipes and unmaps; accepts NULL. */
void ws_secrets_free(struct ws_secrets *s);

size_t ws_secrets_count(const struct ws_secrets *s);
/* The i-th pair (0 <= i < count). */
void ws_secrets_at(const struct ws_secrets *s, size_t i, const char **ret_name,
                   const char **ret_value);
/* The value of `name`, or NULL. Valid until the set is freed. */
const char *ws_secrets_get(const struct ws_secrets *s, const char *name);
/* Where the set's bytes are (for tests: the mapping's dump flag). */
const void *ws_secrets_memory(const struct ws_secrets *s, size_t *ret_len);

#endif
