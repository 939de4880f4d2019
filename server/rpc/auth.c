/* Who is calling: bearer tokens, client certificates and the tenant of a
 * call.
 *
 * The check runs in a gRPC auth metadata processor, installed on the
 * server credentials (insecure ones too: in gRPC 1.51 insecure server
 * credentials carry a security connector, so the server auth filter is in
 * every server channel and calls the processor with each call's initial
 * metadata before the call is matched to a request). A call it refuses
 * never reaches the completion queue, so no handler runs for it.
 *
 * The auth context the processor gets is the connection's, shared by every
 * call on it (the filter passes its channel's context), so the tenant
 * cannot be stored there: the call layer derives it again from the call's
 * own metadata when the call is accepted (ws_rpc_auth_tenant). A reload in
 * between that removed the token makes that second look fail, and the call
 * is refused the same way.
 *
 * On a unix socket a caller without a token (or whose token the server
 * has no tokens file to check) is named by its uid: the tenant the
 * operator mapped it to, else `default` for root and the server's own uid,
 * else refused. The processor never sees the connection's peer, so it lets
 * such a call through and the call layer decides, before any handler runs,
 * from the call's peer string (conncap.h says how the uid gets there).
 *
 * Health checks are not exempt: the processor is one gate with no list of
 * exceptions to get wrong, and a probe of a server that demands
 * credentials should prove they work; give the probe its own tenant's
 * token (a tenant with no workspaces sees nothing).
 */
#include "server/rpc/conncap.h"
#include "server/rpc/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

/* Lines in a tokens file, and the longest line. */
#define TOKENS_MAX     10000
#define TOKEN_LINE_MAX 512
/* Longest bearer token looked at. */
#define TOKEN_MAX  4096
#define DIGEST_LEN 32

struct token_entry {
    uint8_t digest[DIGEST_LEN];
    char tenant[WS_RPC_TENANT_MAX + 1];
};

struct token_table {
    size_t n;
    struct token_entry e[];
};

struct ws_rpc_auth {
    pthread_mutex_t mu;
    struct token_table *table; /* NULL: no tokens file */
    char *tokens_path;
    bool client_certs;
    /* A unix listener: callers without a token are named by their uid. */
    bool peer_uids;
    ws_rpc_peer_fn peer_tenant; /* NULL: no uid is mapped */
    void *peer_ud;
    uid_t self; /* the server's effective uid */
};

bool ws_rpc_tenant_valid(const char *s, size_t len)
{
    if (len == 0 || len > WS_RPC_TENANT_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Parses one non-comment line "TENANT HEX" into e; false when malformed. */
static bool parse_line(char *line, struct token_entry *e)
{
    char *save = NULL, *tenant, *hex, *extra;

    tenant = strtok_r(line, " \t", &save);
    hex = strtok_r(NULL, " \t", &save);
    extra = strtok_r(NULL, " \t", &save);
    if (!tenant || !hex || extra || !ws_rpc_tenant_valid(tenant, strlen(tenant)) ||
        strlen(hex) != 2 * DIGEST_LEN)
        return false;
    for (size_t i = 0; i < DIGEST_LEN; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        e->digest[i] = (uint8_t)(hi << 4 | lo);
    }
    snprintf(e->tenant, sizeof(e->tenant), "%s", tenant);
    return true;
}

/* Reads a tokens file; on failure `why` says which line and what. */
static int load_table(const char *path, struct token_table **ret, char *why, size_t why_len)
{
    struct token_table *t = NULL;
    char line[TOKEN_LINE_MAX + 2];
    size_t lineno = 0;
    FILE *f;
    int r = 0;

    f = fopen(path, "re");
    if (!f) {
        r = -errno;
        snprintf(why, why_len, "%s: %s", path, strerror(errno));
        return r;
    }
    t = calloc(1, sizeof(*t) + TOKENS_MAX * sizeof(t->e[0]));
    if (!t) {
        r = -ENOMEM;
        snprintf(why, why_len, "out of memory");
        goto out;
    }
    while (fgets(line, sizeof(line), f)) {
        size_t len = strlen(line);
        char *p = line;

        lineno++;
        if (len > TOKEN_LINE_MAX || (len && line[len - 1] != '\n' && !feof(f))) {
            snprintf(why, why_len, "%s: line %zu: longer than %d bytes", path, lineno,
                     TOKEN_LINE_MAX);
            r = -EINVAL;
            goto out;
        }
        line[strcspn(line, "\r\n")] = '\0';
        p += strspn(p, " \t");
        if (*p == '\0' || *p == '#')
            continue;
        if (t->n == TOKENS_MAX) {
            snprintf(why, why_len, "%s: line %zu: more than %d tokens", path, lineno, TOKENS_MAX);
            r = -EINVAL;
            goto out;
        }
        if (!parse_line(p, &t->e[t->n])) {
            snprintf(why, why_len,
                     "%s: line %zu: expected 'TENANT SHA256HEX' (tenant [A-Za-z0-9._-]{1,64}, "
                     "64 lowercase hex digits)",
                     path, lineno);
            r = -EINVAL;
            goto out;
        }
        for (size_t i = 0; i < t->n; i++)
            if (memcmp(t->e[i].digest, t->e[t->n].digest, DIGEST_LEN) == 0) {
                snprintf(why, why_len, "%s: line %zu: the same token digest is listed twice", path,
                         lineno);
                r = -EINVAL;
                goto out;
            }
        t->n++;
    }
    if (ferror(f)) {
        r = -EIO;
        snprintf(why, why_len, "%s: read error", path);
    }
out:
    fclose(f);
    if (r < 0) {
        free(t);
        return r;
    }
    *ret = t;
    return 0;
}

int ws_rpc_auth_new(const char *tokens_path, bool client_certs, struct ws_rpc_auth **ret, char *why,
                    size_t why_len)
{
    struct ws_rpc_auth *a;
    int r;

    a = calloc(1, sizeof(*a));
    if (!a)
        return -ENOMEM;
    pthread_mutex_init(&a->mu, NULL);
    a->client_certs = client_certs;
    if (tokens_path) {
        a->tokens_path = strdup(tokens_path);
        r = a->tokens_path ? load_table(tokens_path, &a->table, why, why_len) : -ENOMEM;
        if (r < 0) {
            ws_rpc_auth_free(a);
            return r;
        }
    }
    *ret = a;
    return 0;
}

void ws_rpc_auth_free(struct ws_rpc_auth *a)
{
    if (!a)
        return;
    /* After gRPC's last call of process(), which gRPC orders. */
    WS_RPC_HANDOFF_ACQUIRE(a);
    pthread_mutex_destroy(&a->mu);
    free(a->table);
    free(a->tokens_path);
    free(a);
}

int ws_rpc_auth_reload(struct ws_rpc_auth *a, char *why, size_t why_len)
{
    struct token_table *t = NULL, *old;
    int r;

    if (!a || !a->tokens_path)
        return 0;
    r = load_table(a->tokens_path, &t, why, why_len);
    if (r < 0)
        return r;
    pthread_mutex_lock(&a->mu);
    old = a->table;
    a->table = t;
    pthread_mutex_unlock(&a->mu);
    free(old);
    return (int)t->n;
}

/* The tenant of a bearer token. Digests are compared, never tokens, and
 * every entry is compared in constant time without stopping at a match,
 * so the time taken says nothing about which digest bytes matched. */
static bool token_tenant(struct ws_rpc_auth *a, const char *value, size_t len, char *ret)
{
    static const char scheme[] = "Bearer ";
    uint8_t digest[DIGEST_LEN];
    unsigned dlen = 0;
    long hit = -1;
    bool ok = false;

    if (len <= sizeof(scheme) - 1 || len > TOKEN_MAX ||
        strncasecmp(value, scheme, sizeof(scheme) - 1) != 0)
        return false;
    if (!EVP_Digest(value + sizeof(scheme) - 1, len - (sizeof(scheme) - 1), digest, &dlen,
                    EVP_sha256(), NULL) ||
        dlen != DIGEST_LEN)
        return false;
    pthread_mutex_lock(&a->mu);
    if (a->table) {
        for (size_t i = 0; i < a->table->n; i++) {
            bool eq = CRYPTO_memcmp(a->table->e[i].digest, digest, DIGEST_LEN) == 0;
            hit = eq ? (long)i : hit;
        }
        if (hit >= 0) {
            memcpy(ret, a->table->e[hit].tenant, WS_RPC_TENANT_MAX + 1);
            ok = true;
        }
    }
    pthread_mutex_unlock(&a->mu);
    return ok;
}

/* A verified client certificate's subject CN, when it is a tenant name. */
static bool cert_tenant(const grpc_auth_context *ctx, char *ret)
{
    grpc_auth_property_iterator it;
    const grpc_auth_property *p;

    if (!ctx)
        return false;
    it = grpc_auth_context_find_properties_by_name(ctx, GRPC_X509_CN_PROPERTY_NAME);
    p = grpc_auth_property_iterator_next(&it);
    if (!p || !ws_rpc_tenant_valid(p->value, p->value_length))
        return false;
    memcpy(ret, p->value, p->value_length);
    ret[p->value_length] = '\0';
    return true;
}

enum verdict {
    REFUSED,
    NAMED,   /* the tenant is in ret */
    BY_PEER, /* the caller's uid decides */
};

/* The rule: a token, when one is sent, decides (a bad one is refused even
 * over a verified certificate), unless the server has nothing to check it
 * against but uids (a unix socket without a tokens file: the token is
 * ignored, as it always was without one); without one a verified client
 * certificate names the tenant by its CN (mTLS only); else, on a unix
 * socket, the caller's uid. Two authorization entries are refused rather
 * than picking one. */
static enum verdict tenant_of(struct ws_rpc_auth *a, const grpc_auth_context *ctx,
                              const grpc_metadata *md, size_t n, char *ret)
{
    const grpc_metadata *authz = NULL;

    for (size_t i = 0; i < n; i++)
        if (grpc_slice_str_cmp(md[i].key, "authorization") == 0) {
            if (authz)
                return REFUSED;
            authz = &md[i];
        }
    if (authz && (a->tokens_path || a->client_certs || !a->peer_uids))
        return token_tenant(a, (const char *)GRPC_SLICE_START_PTR(authz->value),
                            GRPC_SLICE_LENGTH(authz->value), ret)
                   ? NAMED
                   : REFUSED;
    if (a->client_certs && cert_tenant(ctx, ret))
        return NAMED;
    return a->peer_uids ? BY_PEER : REFUSED;
}

/* The tenant of the caller at the other end of `call` by its uid. */
static bool peer_tenant(struct ws_rpc_auth *a, grpc_call *call, char *ret)
{
    char *peer = grpc_call_get_peer(call);
    uint32_t uid;
    bool known = ws_conncap_peer_uid(peer, &uid);

    gpr_free(peer);
    if (!known) {
        ws_rpc_log(WS_RPC_LOG_INFO, "rpc.unauthenticated", "\"uid\":null");
        return false;
    }
    if (a->peer_tenant && a->peer_tenant(a->peer_ud, uid, ret) &&
        ws_rpc_tenant_valid(ret, strnlen(ret, WS_RPC_TENANT_MAX + 1)))
        return true;
    if (uid == 0 || uid == (uint32_t)a->self) {
        snprintf(ret, WS_RPC_TENANT_MAX + 1, "%s", WS_RPC_TENANT_DEFAULT);
        return true;
    }
    ws_rpc_log(WS_RPC_LOG_INFO, "rpc.unauthenticated", "\"uid\":%u", uid);
    return false;
}

bool ws_rpc_auth_tenant(struct ws_rpc_auth *a, grpc_call *call, const grpc_metadata_array *md,
                        char ret[WS_RPC_TENANT_MAX + 1])
{
    grpc_auth_context *ctx = grpc_call_auth_context(call);
    enum verdict v = tenant_of(a, ctx, md->metadata, md->count, ret);

    if (ctx)
        grpc_auth_context_release(ctx);
    return v == NAMED || (v == BY_PEER && peer_tenant(a, call, ret));
}

static void process(void *state, grpc_auth_context *ctx, const grpc_metadata *md, size_t n,
                    grpc_process_auth_metadata_done_cb cb, void *user_data)
{
    char tenant[WS_RPC_TENANT_MAX + 1];

    WS_RPC_HANDOFF_ACQUIRE(state);
    enum verdict v = tenant_of(state, ctx, md, n, tenant);
    WS_RPC_HANDOFF_RELEASE(state);
    /* One message whatever was wrong: missing, unknown, malformed. A call
     * left to the caller's uid is decided when it is accepted. */
    if (v == REFUSED) {
        ws_rpc_log(WS_RPC_LOG_INFO, "rpc.unauthenticated", NULL);
        cb(user_data, NULL, 0, NULL, 0, GRPC_STATUS_UNAUTHENTICATED, WS_RPC_UNAUTHENTICATED);
        return;
    }
    cb(user_data, NULL, 0, NULL, 0, GRPC_STATUS_OK, NULL);
}

void ws_rpc_auth_use_peers(struct ws_rpc_auth *a, ws_rpc_peer_fn fn, void *ud)
{
    a->peer_uids = true;
    a->peer_tenant = fn;
    a->peer_ud = ud;
    a->self = geteuid();
}

void ws_rpc_auth_install(struct ws_rpc_auth *a, grpc_server_credentials *creds)
{
    grpc_auth_metadata_processor p = {.process = process, .destroy = NULL, .state = a};

    WS_RPC_HANDOFF_RELEASE(a);
    grpc_server_credentials_set_auth_metadata_processor(creds, p);
}
