/* Signed workspace refs.
 *
 * A token is: one schema byte, the serialized WorkspaceRecord, and an
 * HMAC-SHA256 over both with the server's key. The key is 32 random bytes
 * in the state directory (file "ref.key", mode 0600), created on first
 * start. A token that is truncated, edited or signed with another key never
 * verifies.
 */
#ifndef WS_REGISTRY_REF_H
#define WS_REGISTRY_REF_H

#include <stddef.h>
#include <stdint.h>

#include "workspaced/internal/v1/record.pb-c.h"

#define WS_REF_SCHEMA  1
#define WS_REF_KEY_LEN 32
#define WS_REF_MAC_LEN 32
/* Upper bound on an accepted token (a config, labels and env). */
#define WS_REF_TOKEN_MAX (128 * 1024)

struct ws_ref_key {
    uint8_t bytes[WS_REF_KEY_LEN];
};

/* Loads the key from `state_dir_fd`/ref.key, creating it (O_EXCL, 0600)
 * when absent. A key file of the wrong size or mode is -EINVAL. */
int ws_ref_key_load(int state_dir_fd, struct ws_ref_key *ret);

/* Serializes and signs `rec`. *ret_token is malloc'ed. */
int ws_ref_sign(const struct ws_ref_key *key, const Workspaced__Internal__V1__WorkspaceRecord *rec,
                uint8_t **ret_token, size_t *ret_len);

/* Verifies and decodes a token: -WS_EBADREF for any defect (size, schema,
 * MAC, encoding). *ret is freed with ws_ref_record_free. */
int ws_ref_verify(const struct ws_ref_key *key, const uint8_t *token, size_t len,
                  Workspaced__Internal__V1__WorkspaceRecord **ret);

void ws_ref_record_free(Workspaced__Internal__V1__WorkspaceRecord *rec);

#endif
