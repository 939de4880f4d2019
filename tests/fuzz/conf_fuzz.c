/* The server's file readers: the configuration file (server/conf/conf.h,
 * ws_conf_parse with the server's own section list) and the bearer
 * tokens file (server/rpc/auth.c, read by ws_rpc_auth_new and again by
 * ws_rpc_auth_reload). The input is written to a file and both read it.
 *
 * Checked besides memory safety: every key = value handed to the
 * callback has a known section, a key of the grammar's characters, a
 * non-empty value without surrounding blanks, a line break or a leading
 * quote, and is set once per section; an error is -EINVAL with one line
 * of printable ASCII; the tokens reader answers 0 or -EINVAL, and a file
 * it read once it reads again.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/conf/conf.h"
#include "tests/fuzz/fuzz.h"

/* server/rpc/internal.h, private to //server/rpc:core. */
struct ws_rpc_auth;
int ws_rpc_auth_new(const char *tokens_path, bool client_certs, struct ws_rpc_auth **ret, char *why,
                    size_t why_len);
void ws_rpc_auth_free(struct ws_rpc_auth *a);
int ws_rpc_auth_reload(struct ws_rpc_auth *a, char *why, size_t why_len);

/* server/main.c's list. */
static const char *const sections[] = {
    "server",    "auth",   "tls",       "limits",        "quotas", "exec",
    "work",      "uids",   "providers", "local-sandbox", "docker", "metrics",
    "transport", "policy", "policy.",   "peers",         NULL,
};

struct seen {
    char *keys[WS_CONF_KEYS_MAX + 1];
    size_t n;
};

static bool known_section(const char *s)
{
    for (size_t i = 0; sections[i]; i++) {
        size_t n = strlen(sections[i]);
        if (sections[i][n - 1] == '.' ? strncmp(s, sections[i], n) == 0 && s[n] != '\0'
                                      : strcmp(s, sections[i]) == 0)
            return true;
    }
    return false;
}

static int take(void *ud, const char *section, const char *key, const char *value, unsigned line,
                char *why, size_t why_size)
{
    struct seen *seen = ud;
    size_t vlen = strlen(value);
    char *both;

    FUZZ_CHECK(line >= 1, "line numbers start at 1");
    FUZZ_CHECK(known_section(section), "a key in an unknown section");
    FUZZ_CHECK(strlen(section) <= WS_CONF_SECTION_MAX, "a section name too long");
    FUZZ_CHECK(key[0] && strlen(key) <= WS_CONF_NAME_MAX, "a key name empty or too long");
    FUZZ_CHECK(strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789-_") == strlen(key),
               "a key outside the grammar");
    FUZZ_CHECK(vlen > 0, "an empty value");
    FUZZ_CHECK(value[0] != ' ' && value[0] != '\t' && value[vlen - 1] != ' ' &&
                   value[vlen - 1] != '\t',
               "a value with surrounding blanks");
    FUZZ_CHECK(!strchr(value, '\n'), "a value with a line break");
    FUZZ_CHECK(value[0] != '"' && value[0] != '\'', "a quoted value");
    FUZZ_CHECK(asprintf(&both, "%s\n%s", section, key) > 0, "asprintf");
    for (size_t i = 0; i < seen->n; i++)
        FUZZ_CHECK(strcmp(seen->keys[i], both) != 0, "a key set twice");
    FUZZ_CHECK(seen->n < WS_CONF_KEYS_MAX, "more keys than the limit");
    seen->keys[seen->n++] = both;
    /* The callback's refusal path too. */
    if (strcmp(value, "refuse") == 0) {
        snprintf(why, why_size, "refused");
        return -1;
    }
    return 0;
}

static void check_msg(const char *msg)
{
    size_t n = strnlen(msg, WS_CONF_MSG_MAX);

    FUZZ_CHECK(n < WS_CONF_MSG_MAX && n > 0, "an error without a message");
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(msg[i] >= 0x20 && msg[i] < 0x7f, "an error message that is not printable");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[PATH_MAX];
    static char msg[WS_CONF_MSG_MAX];
    struct seen seen = {.n = 0};
    struct ws_rpc_auth *auth = NULL;
    char why[512];
    int r;

    if (!path[0])
        snprintf(path, sizeof(path), "%s/input.conf", fuzz_scratch_dir("conf_fuzz"));
    fuzz_write_file(path, data, size);

    msg[0] = '\0';
    r = ws_conf_parse(path, sections, take, &seen, msg, sizeof(msg));
    if (r < 0) {
        FUZZ_CHECK(r == -EINVAL, "ws_conf_parse: unexpected error");
        check_msg(msg);
    }
    for (size_t i = 0; i < seen.n; i++)
        free(seen.keys[i]);

    why[0] = '\0';
    r = ws_rpc_auth_new(path, false, &auth, why, sizeof(why));
    if (r == 0) {
        FUZZ_CHECK(ws_rpc_auth_reload(auth, why, sizeof(why)) >= 0,
                   "a tokens file read once fails");
        ws_rpc_auth_free(auth);
    } else {
        FUZZ_CHECK(r == -EINVAL, "ws_rpc_auth_new: unexpected error");
        FUZZ_CHECK(memchr(why, '\0', sizeof(why)) && why[0], "a refusal without a reason");
    }
    return 0;
}
