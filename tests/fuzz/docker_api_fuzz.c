/* The Engine API response parsers (server/docker/api.h): the first input
 * byte picks the response (version, a create, a container inspect read
 * for its hardening and its state, an image inspect read for its volumes
 * and its environment, a container list, an exec inspect, an error
 * body); the rest is the body as the daemon sent it. The identifier and
 * version checks also get the body as a string.
 *
 * Checked besides memory safety: every parser answers 0 or one of its
 * documented errors; what it fills in is terminated and within its
 * field; ids it returns pass ws_docker_id_valid; an error message is no
 * longer than the buffer, valid UTF-8 and free of control characters; a negotiated
 * version is never newer than ours.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "server/base/utf8.h"
#include "server/docker/api.h"
#include "tests/fuzz/fuzz.h"

static bool documented(int r)
{
    return r == 0 || r == -EPROTO || r == -EMSGSIZE || r == -ENOMEM;
}

#define TERMINATED(field) (memchr((field), '\0', sizeof(field)) != NULL)

static void check_names(char **names, bool ids)
{
    size_t n = 0;

    FUZZ_CHECK(names != NULL, "success without a list");
    for (; names[n]; n++)
        if (ids)
            FUZZ_CHECK(ws_docker_id_valid(names[n]), "an invalid id in a container list");
    FUZZ_CHECK(ids || n <= WS_DOCKER_ENV_MAX, "more names than the limit");
    ws_docker_names_free(names);
}

static void parse(unsigned which, const char *json, size_t len)
{
    int r = 0;

    switch (which) {
    case 0: {
        struct ws_docker_version v;
        struct ws_docker_api_version use;
        r = ws_docker_parse_version(json, len, &v);
        if (r == 0 && ws_docker_negotiate(&v, &use) == 0)
            FUZZ_CHECK(ws_docker_api_version_cmp(use, v.api) <= 0, "negotiated past the daemon");
        break;
    }
    case 1: {
        struct ws_docker_created c;
        r = ws_docker_parse_created(json, len, &c);
        if (r == 0)
            FUZZ_CHECK(ws_docker_id_valid(c.id) && TERMINATED(c.warning), "created: fields");
        break;
    }
    case 2: {
        struct ws_docker_hardening h;
        r = ws_docker_parse_hardening(json, len, &h);
        if (r == 0) {
            FUZZ_CHECK(TERMINATED(h.network_mode) && TERMINATED(h.ipc_mode) &&
                           TERMINATED(h.log_type) && TERMINATED(h.user) &&
                           TERMINATED(h.tmp_options) && TERMINATED(h.server_id) &&
                           TERMINATED(h.workspace_id) && TERMINATED(h.runtime),
                       "hardening: a field unterminated");
            for (unsigned i = 0; i < WS_DOCKER_CAP_ADD_MAX && i < h.n_cap_add; i++)
                FUZZ_CHECK(TERMINATED(h.cap_add[i]), "hardening: a capability unterminated");
        }
        break;
    }
    case 3: {
        struct ws_docker_state s;
        r = ws_docker_parse_state(json, len, &s);
        if (r == 0)
            FUZZ_CHECK(TERMINATED(s.status), "state: status unterminated");
        break;
    }
    case 4: {
        bool has = false;
        r = ws_docker_parse_image_volumes(json, len, &has);
        break;
    }
    case 5: {
        char **names = NULL;
        r = ws_docker_parse_image_env_names(json, len, &names);
        if (r == 0)
            check_names(names, false);
        break;
    }
    case 6: {
        char **ids = NULL;
        r = ws_docker_parse_container_ids(json, len, &ids);
        if (r == 0)
            check_names(ids, true);
        break;
    }
    case 7: {
        struct ws_docker_exec_state e;
        r = ws_docker_parse_exec_inspect(json, len, &e);
        if (r == 0)
            FUZZ_CHECK(e.exited || e.exit_code == -1, "exec inspect: a code without an exit");
        break;
    }
    default: {
        char msg[WS_DOCKER_MESSAGE_MAX];
        r = ws_docker_parse_error(json, len, msg, sizeof(msg));
        if (r >= 0) {
            FUZZ_CHECK((size_t)r < sizeof(msg) && strlen(msg) == (size_t)r, "error: length");
            FUZZ_CHECK(ws_utf8_valid(msg, (size_t)r), "error: not UTF-8");
            for (int i = 0; i < r; i++)
                FUZZ_CHECK((unsigned char)msg[i] >= 0x20 && msg[i] != 0x7f,
                           "error: a control character");
            r = 0;
        }
        break;
    }
    }
    FUZZ_CHECK(documented(r), "an undocumented error");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s;
    size_t len;

    if (size < 1)
        return 0;
    parse(data[0] % 9, (const char *)data + 1, size - 1);

    /* The string checks, on the body up to its first NUL. */
    len = strnlen((const char *)data + 1, size - 1);
    s = malloc(len + 1);
    FUZZ_CHECK(s != NULL, "malloc");
    memcpy(s, data + 1, len);
    s[len] = '\0';
    {
        struct ws_docker_api_version v;
        uid_t uid;
        gid_t gid;
        if (ws_docker_api_version_parse(s, &v) == 0)
            FUZZ_CHECK(v.major <= WS_DOCKER_VERSION_PART_MAX &&
                           v.minor <= WS_DOCKER_VERSION_PART_MAX,
                       "a version component past the limit");
        if (ws_docker_id_valid(s))
            FUZZ_CHECK(ws_docker_container_ref_valid(s), "an id that is not a container ref");
        (void)ws_docker_name_valid(s);
        (void)ws_docker_image_valid(s);
        if (ws_docker_user_valid(s))
            FUZZ_CHECK(ws_docker_user_parse(s, &uid, &gid) == 0, "a valid user does not parse");
        else
            FUZZ_CHECK(ws_docker_user_parse(s, &uid, &gid) == -EINVAL, "an invalid user parses");
        (void)ws_docker_user_unprivileged(s);
    }
    free(s);
    return 0;
}
