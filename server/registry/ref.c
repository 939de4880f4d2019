#include "server/registry/ref.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "server/base/errors.h"
#include "server/base/io.h"

#define KEY_FILE "ref.key"

static int key_create(int dir_fd, struct ws_ref_key *ret)
{
    struct ws_ref_key key;
    int fd, r;

    if (getrandom(key.bytes, sizeof(key.bytes), 0) != (ssize_t)sizeof(key.bytes))
        return -EIO;
    fd = openat(dir_fd, KEY_FILE, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    r = ws_write_all(fd, key.bytes, sizeof(key.bytes));
    if (r == 0 && fsync(fd) < 0)
        r = -errno;
    close(fd);
    if (r < 0) {
        unlinkat(dir_fd, KEY_FILE, 0);
        return r;
    }
    *ret = key;
    return 0;
}

int ws_ref_key_load(int state_dir_fd, struct ws_ref_key *ret)
{
    struct ws_ref_key key;
    struct stat st;
    ssize_t n;
    int fd, r;

    fd = openat(state_dir_fd, KEY_FILE, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT) {
        r = key_create(state_dir_fd, ret);
        if (r != -EEXIST)
            return r;
        /* Lost a race with another creator: read theirs. */
        fd = openat(state_dir_fd, KEY_FILE, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    }
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0) {
        r = -errno;
        goto out;
    }
    /* A key others can read would let them forge refs. */
    if (!S_ISREG(st.st_mode) || st.st_size != WS_REF_KEY_LEN || (st.st_mode & 077) != 0) {
        r = -EINVAL;
        goto out;
    }
    n = ws_read_all(fd, key.bytes, sizeof(key.bytes));
    /* Shorter than its size said: changed under us, not a key to trust. */
    r = n < 0 ? (int)n : n == (ssize_t)sizeof(key.bytes) ? 0 : -EINVAL;
    if (r == 0)
        *ret = key;
out:
    close(fd);
    return r;
}

static void mac(const struct ws_ref_key *key, const uint8_t *data, size_t len,
                uint8_t out[WS_REF_MAC_LEN])
{
    unsigned int out_len = WS_REF_MAC_LEN;

    HMAC(EVP_sha256(), key->bytes, sizeof(key->bytes), data, len, out, &out_len);
}

int ws_ref_sign(const struct ws_ref_key *key, const Workspaced__Internal__V1__WorkspaceRecord *rec,
                uint8_t **ret_token, size_t *ret_len)
{
    size_t body = protobuf_c_message_get_packed_size(&rec->base);
    size_t len = 1 + body + WS_REF_MAC_LEN;
    uint8_t *token;

    if (len > WS_REF_TOKEN_MAX)
        return -WS_EMALFORMED;
    token = malloc(len);
    if (!token)
        return -ENOMEM;
    token[0] = WS_REF_SCHEMA;
    protobuf_c_message_pack(&rec->base, token + 1);
    mac(key, token, 1 + body, token + 1 + body);
    *ret_token = token;
    *ret_len = len;
    return 0;
}

int ws_ref_verify(const struct ws_ref_key *key, const uint8_t *token, size_t len,
                  Workspaced__Internal__V1__WorkspaceRecord **ret)
{
    uint8_t want[WS_REF_MAC_LEN];
    Workspaced__Internal__V1__WorkspaceRecord *rec;

    if (!token || len < 1 + WS_REF_MAC_LEN + 1 || len > WS_REF_TOKEN_MAX)
        return -WS_EBADREF;
    /* The MAC covers the schema byte, so a downgrade is a MAC failure. */
    mac(key, token, len - WS_REF_MAC_LEN, want);
    if (CRYPTO_memcmp(want, token + len - WS_REF_MAC_LEN, WS_REF_MAC_LEN) != 0)
        return -WS_EBADREF;
    if (token[0] != WS_REF_SCHEMA)
        return -WS_EBADREF;
    rec = workspaced__internal__v1__workspace_record__unpack(NULL, len - 1 - WS_REF_MAC_LEN,
                                                             token + 1);
    if (!rec)
        return -WS_EBADREF;
    if (rec->schema != WS_REF_SCHEMA) {
        ws_ref_record_free(rec);
        return -WS_EBADREF;
    }
    *ret = rec;
    return 0;
}

void ws_ref_record_free(Workspaced__Internal__V1__WorkspaceRecord *rec)
{
    if (rec)
        workspaced__internal__v1__workspace_record__free_unpacked(rec, NULL);
}
