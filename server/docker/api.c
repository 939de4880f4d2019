/* The Docker Engine API as data: see api.h. */
#include "server/docker/api.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/base/macros.h"
#include "server/base/utf8.h"

/* --- character classes ------------------------------------------------------ */

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_lower_hex(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f');
}

static bool is_lower_alnum(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'z');
}

static bool is_alnum(char c)
{
    return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

/* Go's \w, which Docker's tag grammar uses. */
static bool is_word(char c)
{
    return is_alnum(c) || c == '_';
}

static bool utf8_ok(const char *s)
{
    return ws_utf8_valid(s, strlen(s));
}

/* --- versions --------------------------------------------------------------- */

static const struct ws_docker_api_version ours = {WS_DOCKER_API_MAJOR, WS_DOCKER_API_MINOR};
static const struct ws_docker_api_version floor_version = {WS_DOCKER_API_MIN_MAJOR,
                                                           WS_DOCKER_API_MIN_MINOR};

/* Parses 1..4 decimal digits at *pp, at most WS_DOCKER_VERSION_PART_MAX. */
static bool version_part(const char **pp, unsigned *ret)
{
    const char *p = *pp;
    unsigned v = 0;
    int n = 0;

    while (is_digit(*p)) {
        if (++n > 4)
            return false;
        v = v * 10 + (unsigned)(*p++ - '0');
    }
    if (n == 0 || v > WS_DOCKER_VERSION_PART_MAX)
        return false;
    *pp = p;
    *ret = v;
    return true;
}

int ws_docker_api_version_parse(const char *s, struct ws_docker_api_version *ret)
{
    struct ws_docker_api_version v;

    if (!s || !version_part(&s, &v.major) || *s++ != '.' || !version_part(&s, &v.minor) || *s)
        return -EINVAL;
    *ret = v;
    return 0;
}

int ws_docker_api_version_cmp(struct ws_docker_api_version a, struct ws_docker_api_version b)
{
    if (a.major != b.major)
        return a.major < b.major ? -1 : 1;
    if (a.minor != b.minor)
        return a.minor < b.minor ? -1 : 1;
    return 0;
}

static bool version_printable(struct ws_docker_api_version v)
{
    return v.major <= WS_DOCKER_VERSION_PART_MAX && v.minor <= WS_DOCKER_VERSION_PART_MAX;
}

int ws_docker_negotiate(const struct ws_docker_version *daemon, struct ws_docker_api_version *ret)
{
    struct ws_docker_api_version v = daemon->api;

    if (ws_docker_api_version_cmp(ours, v) < 0)
        v = ours;
    if (ws_docker_api_version_cmp(v, floor_version) < 0 ||
        ws_docker_api_version_cmp(v, daemon->min) < 0)
        return -EPROTONOSUPPORT;
    *ret = v;
    return 0;
}

/* --- identifiers ------------------------------------------------------------ */

bool ws_docker_id_valid(const char *s)
{
    size_t i;

    if (!s)
        return false;
    for (i = 0; i < WS_DOCKER_ID_LEN; i++)
        if (!is_lower_hex(s[i]))
            return false;
    return s[i] == '\0';
}

/* [a-zA-Z0-9][a-zA-Z0-9_.-]* of min..max bytes; sets *ret_non_hex when some
 * character is not a lowercase hex digit. */
static bool name_chars(const char *s, size_t min, size_t max, bool *ret_non_hex)
{
    bool non_hex = false;
    size_t n;

    if (!s || !is_alnum(s[0]))
        return false;
    for (n = 0; s[n]; n++) {
        if (n >= max || !(is_alnum(s[n]) || s[n] == '_' || s[n] == '.' || s[n] == '-'))
            return false;
        if (!is_lower_hex(s[n]))
            non_hex = true;
    }
    if (n < min)
        return false;
    if (ret_non_hex)
        *ret_non_hex = non_hex;
    return true;
}

bool ws_docker_name_valid(const char *s)
{
    bool non_hex;

    return name_chars(s, 2, WS_DOCKER_NAME_MAX, &non_hex) && non_hex;
}

bool ws_docker_container_ref_valid(const char *s)
{
    return ws_docker_id_valid(s) || ws_docker_name_valid(s);
}

static bool label_id_valid(const char *s)
{
    return name_chars(s, 1, WS_DOCKER_LABEL_ID_MAX, NULL);
}

/* path-component: [a-z0-9]+ joined by '.', '_', '__' or one or more '-'. */
static bool path_component_valid(const char *s, size_t n)
{
    size_t i = 0;

    if (n == 0 || !is_lower_alnum(s[0]))
        return false;
    while (i < n) {
        size_t j = i + 1;

        if (is_lower_alnum(s[i])) {
            i++;
            continue;
        }
        if (s[i] == '_' && j < n && s[j] == '_')
            j++;
        else if (s[i] == '-')
            while (j < n && s[j] == '-')
                j++;
        else if (s[i] != '.' && s[i] != '_')
            return false;
        if (j >= n || !is_lower_alnum(s[j]))
            return false;
        i = j;
    }
    return true;
}

/* path-component ('/' path-component)* */
static bool path_valid(const char *s, size_t n)
{
    size_t start = 0;

    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '/') {
            if (!path_component_valid(s + start, i - start))
                return false;
            start = i + 1;
        }
    }
    return true;
}

/* [a-zA-Z0-9] | [a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9] */
static bool domain_component_valid(const char *s, size_t n)
{
    if (n == 0 || !is_alnum(s[0]) || !is_alnum(s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_alnum(s[i]) && s[i] != '-')
            return false;
    return true;
}

/* Port numbers have at most this many digits. */
#define PORT_DIGITS_MAX 5

/* host[:port], host = domain-component ('.' domain-component)* */
static bool domain_valid(const char *s, size_t n)
{
    const char *colon = memchr(s, ':', n);
    size_t host = colon ? (size_t)(colon - s) : n, start = 0;

    if (colon) {
        size_t digits = n - host - 1;

        if (digits == 0 || digits > PORT_DIGITS_MAX)
            return false;
        for (size_t i = host + 1; i < n; i++)
            if (!is_digit(s[i]))
                return false;
    }
    for (size_t i = 0; i <= host; i++) {
        if (i == host || s[i] == '.') {
            if (!domain_component_valid(s + start, i - start))
                return false;
            start = i + 1;
        }
    }
    return true;
}

/* [domain '/'] path: the first component is a domain only when the rest is
 * a valid path after it; either reading being valid makes the name valid. */
static bool image_name_valid(const char *s, size_t n)
{
    const char *slash = memchr(s, '/', n);

    if (n == 0 || n > WS_DOCKER_IMAGE_NAME_MAX)
        return false;
    if (path_valid(s, n))
        return true;
    return slash && domain_valid(s, (size_t)(slash - s)) &&
           path_valid(slash + 1, n - (size_t)(slash - s) - 1);
}

static bool tag_valid(const char *s, size_t n)
{
    if (n == 0 || n > WS_DOCKER_TAG_MAX || !is_word(s[0]))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!is_word(s[i]) && s[i] != '.' && s[i] != '-')
            return false;
    return true;
}

static bool digest_valid(const char *s, size_t n)
{
    static const struct {
        const char *algorithm;
        size_t hex;
    } known[] = {{"sha256:", 64}, {"sha384:", 96}, {"sha512:", 128}};

    for (size_t k = 0; k < WS_ELEMENTSOF(known); k++) {
        size_t a = strlen(known[k].algorithm);

        if (n != a + known[k].hex || strncmp(s, known[k].algorithm, a) != 0)
            continue;
        for (size_t i = a; i < n; i++)
            if (!is_lower_hex(s[i]))
                return false;
        return true;
    }
    return false;
}

/* An image reference cut into its parts (offsets into the string). */
struct image_parts {
    size_t name_len;
    const char *tag; /* NULL when none */
    size_t tag_len;
    const char *digest; /* NULL when none */
    size_t digest_len;
};

static bool image_split(const char *s, struct image_parts *ret)
{
    struct image_parts p = {0};
    const char *at, *colon, *slash;
    size_t n;

    if (!s)
        return false;
    n = strlen(s);
    at = memchr(s, '@', n);
    if (at) {
        p.digest = at + 1;
        p.digest_len = n - (size_t)(at - s) - 1;
        if (!digest_valid(p.digest, p.digest_len))
            return false;
        n = (size_t)(at - s);
    }
    /* A ':' after the last '/' starts the tag; one before it is a port. */
    colon = memrchr(s, ':', n);
    slash = memrchr(s, '/', n);
    if (colon && (!slash || colon > slash)) {
        p.tag = colon + 1;
        p.tag_len = n - (size_t)(colon - s) - 1;
        if (!tag_valid(p.tag, p.tag_len))
            return false;
        n = (size_t)(colon - s);
    }
    if (!image_name_valid(s, n))
        return false;
    p.name_len = n;
    *ret = p;
    return true;
}

bool ws_docker_image_valid(const char *s)
{
    struct image_parts p;

    return image_split(s, &p);
}

/* Digits of a uid or gid. */
#define USER_PART_DIGITS_MAX 10

static bool user_part(const char *s, size_t n, uint32_t *ret)
{
    uint64_t v = 0;

    if (n == 0 || n > USER_PART_DIGITS_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(s[i]))
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v >= UINT32_MAX)
        return false;
    *ret = (uint32_t)v;
    return true;
}

int ws_docker_user_parse(const char *s, uid_t *ret_uid, gid_t *ret_gid)
{
    const char *colon;
    uint32_t uid, gid;

    if (!s || !(colon = strchr(s, ':')) || !user_part(s, (size_t)(colon - s), &uid) ||
        !user_part(colon + 1, strlen(colon + 1), &gid))
        return -EINVAL;
    *ret_uid = (uid_t)uid;
    *ret_gid = (gid_t)gid;
    return 0;
}

bool ws_docker_user_valid(const char *s)
{
    uid_t uid;
    gid_t gid;

    return ws_docker_user_parse(s, &uid, &gid) == 0;
}

bool ws_docker_user_unprivileged(const char *s)
{
    uid_t uid;
    gid_t gid;

    return ws_docker_user_parse(s, &uid, &gid) == 0 && uid != 0 && gid != 0;
}

int ws_docker_user_format(uid_t uid, gid_t gid, char *buf, size_t size)
{
    char tmp[WS_DOCKER_USER_MAX];
    int n;

    if (uid == (uid_t)-1 || gid == (gid_t)-1)
        return -EINVAL;
    n = snprintf(tmp, sizeof(tmp), "%" PRIu32 ":%" PRIu32, (uint32_t)uid, (uint32_t)gid);
    if (n < 0 || (size_t)n >= sizeof(tmp) || (size_t)n >= size)
        return -ENOBUFS;
    memcpy(buf, tmp, (size_t)n + 1);
    return 0;
}

/* An absolute path with at least one component and no empty, "." or ".."
 * component: what realpath() returns, and what cannot walk anywhere. */
static bool canonical_abs(const char *s, size_t max)
{
    size_t n = s ? strnlen(s, max + 1) : 0;
    const char *p;

    if (n < 2 || n > max || s[0] != '/')
        return false;
    for (p = s + 1;;) {
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);

        if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        if (!end)
            return true;
        p = end + 1;
    }
}

/* --- paths ------------------------------------------------------------------ */

/* Copies a formatted path into the caller's buffer only when it fits. */
static int path_finish(const char *tmp, int n, char *buf, size_t size)
{
    if (n < 0 || n >= WS_DOCKER_PATH_MAX || (size_t)n >= size)
        return -ENOBUFS;
    memcpy(buf, tmp, (size_t)n + 1);
    return n;
}

const char *ws_docker_container_op_method(enum ws_docker_container_op op)
{
    switch (op) {
    case WS_DOCKER_CONTAINER_INSPECT:
        return "GET";
    case WS_DOCKER_CONTAINER_REMOVE:
        return "DELETE";
    default:
        return "POST";
    }
}

const char *ws_docker_exec_op_method(enum ws_docker_exec_op op)
{
    return op == WS_DOCKER_EXEC_INSPECT ? "GET" : "POST";
}

int ws_docker_path_container(struct ws_docker_api_version v, const char *ref,
                             enum ws_docker_container_op op, char *buf, size_t size)
{
    char tmp[WS_DOCKER_PATH_MAX];
    const char *suffix;

    switch (op) {
    case WS_DOCKER_CONTAINER_INSPECT:
        suffix = "/json";
        break;
    case WS_DOCKER_CONTAINER_START:
        suffix = "/start";
        break;
    case WS_DOCKER_CONTAINER_KILL:
        suffix = "/kill";
        break;
    case WS_DOCKER_CONTAINER_EXEC:
        suffix = "/exec";
        break;
    case WS_DOCKER_CONTAINER_REMOVE:
        suffix = "?force=true&v=true";
        break;
    default:
        return -EINVAL;
    }
    if (!version_printable(v) || !ws_docker_container_ref_valid(ref))
        return -EINVAL;
    return path_finish(
        tmp, snprintf(tmp, sizeof(tmp), "/v%u.%u/containers/%s%s", v.major, v.minor, ref, suffix),
        buf, size);
}

int ws_docker_path_exec(struct ws_docker_api_version v, const char *exec_id,
                        enum ws_docker_exec_op op, char *buf, size_t size)
{
    char tmp[WS_DOCKER_PATH_MAX];
    const char *suffix;

    switch (op) {
    case WS_DOCKER_EXEC_START:
        suffix = "/start";
        break;
    case WS_DOCKER_EXEC_INSPECT:
        suffix = "/json";
        break;
    default:
        return -EINVAL;
    }
    if (!version_printable(v) || !ws_docker_id_valid(exec_id))
        return -EINVAL;
    return path_finish(
        tmp, snprintf(tmp, sizeof(tmp), "/v%u.%u/exec/%s%s", v.major, v.minor, exec_id, suffix),
        buf, size);
}

/* A terminal dimension the resize endpoint takes (it is a uint16 there). */
#define TTY_DIM_MAX 65535u

int ws_docker_path_exec_resize(struct ws_docker_api_version v, const char *exec_id, unsigned rows,
                               unsigned cols, char *buf, size_t size)
{
    char tmp[WS_DOCKER_PATH_MAX];

    if (!version_printable(v) || !ws_docker_id_valid(exec_id) || rows == 0 || rows > TTY_DIM_MAX ||
        cols == 0 || cols > TTY_DIM_MAX)
        return -EINVAL;
    return path_finish(tmp,
                       snprintf(tmp, sizeof(tmp), "/v%u.%u/exec/%s/resize?h=%u&w=%u", v.major,
                                v.minor, exec_id, rows, cols),
                       buf, size);
}

int ws_docker_path_create(struct ws_docker_api_version v, const char *name, char *buf, size_t size)
{
    char tmp[WS_DOCKER_PATH_MAX];

    if (!version_printable(v) || !ws_docker_name_valid(name))
        return -EINVAL;
    return path_finish(
        tmp,
        snprintf(tmp, sizeof(tmp), "/v%u.%u/containers/create?name=%s", v.major, v.minor, name),
        buf, size);
}

int ws_docker_path_image_inspect(struct ws_docker_api_version v, const char *image, char *buf,
                                 size_t size)
{
    char tmp[WS_DOCKER_PATH_MAX];

    if (!version_printable(v) || !ws_docker_image_valid(image))
        return -EINVAL;
    return path_finish(
        tmp, snprintf(tmp, sizeof(tmp), "/v%u.%u/images/%s/json", v.major, v.minor, image), buf,
        size);
}

int ws_docker_path_image_pull(struct ws_docker_api_version v, const char *image, char *buf,
                              size_t size)
{
    char tmp[WS_DOCKER_PATH_MAX];
    struct image_parts p;
    const char *tag = "latest";
    size_t tag_len = strlen(tag);

    if (!version_printable(v) || !image_split(image, &p))
        return -EINVAL;
    if (p.digest) {
        tag = p.digest;
        tag_len = p.digest_len;
    } else if (p.tag) {
        tag = p.tag;
        tag_len = p.tag_len;
    }
    /* Every character the grammar admits is literal in a query, so
     * nothing needs escaping. */
    return path_finish(tmp,
                       snprintf(tmp, sizeof(tmp), "/v%u.%u/images/create?fromImage=%.*s&tag=%.*s",
                                v.major, v.minor, (int)p.name_len, image, (int)tag_len, tag),
                       buf, size);
}

int ws_docker_path_list_by_label(struct ws_docker_api_version v, const char *label,
                                 const char *value, char *buf, size_t size)
{
    char tmp[WS_DOCKER_PATH_MAX];

    /* Both are fixed names or ids of [a-zA-Z0-9_.-]: only the JSON
     * punctuation of the filter needs percent-encoding. */
    if (!version_printable(v) || !label_id_valid(value) || !label || !*label)
        return -EINVAL;
    for (const char *c = label; *c; c++)
        if (!is_word(*c) && *c != '.')
            return -EINVAL;
    return path_finish(tmp,
                       snprintf(tmp, sizeof(tmp),
                                "/v%u.%u/containers/json?all=true&filters="
                                "%%7B%%22label%%22%%3A%%5B%%22%s%%3D%s%%22%%5D%%7D",
                                v.major, v.minor, label, value),
                       buf, size);
}

/* --- building documents ----------------------------------------------------- */

/* Adds a member. json_object_set_new() takes the value's reference even
 * when it fails, and fails on a NULL value (a failed allocation), so calls
 * can be chained without leaks. Inputs are validated (UTF-8 included)
 * before any document is built, so a failure here is memory. */
static int put(json_t *obj, const char *key, json_t *value)
{
    return json_object_set_new(obj, key, value) == 0 ? 0 : -ENOMEM;
}

/* A JSON array of the strings of a NULL-terminated vector (NULL: empty). */
static json_t *string_array(const char *const *v)
{
    json_t *a = json_array();

    for (size_t i = 0; a && v && v[i]; i++) {
        if (json_array_append_new(a, json_string(v[i])) < 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* Serializes and releases the document. */
static int finish(json_t *root, int err, char **ret_json)
{
    char *s = NULL;

    if (err == 0 && !root)
        err = -ENOMEM;
    if (err == 0) {
        s = json_dumps(root, JSON_COMPACT);
        if (!s)
            err = -ENOMEM;
    }
    json_decref(root);
    if (err == 0)
        *ret_json = s;
    return err;
}

/* Checks a NULL-terminated vector: 1..max_count strings of valid UTF-8,
 * argv[0] not empty, at most max_bytes in all with their NULs. */
static bool argv_ok(const char *const *v, size_t max_count, size_t max_each, size_t max_bytes)
{
    size_t bytes = 0, i;

    if (!v || !v[0] || !v[0][0])
        return false;
    for (i = 0; v[i]; i++) {
        size_t n = strnlen(v[i], max_each + 1);

        if (i >= max_count || n > max_each || (bytes += n + 1) > max_bytes ||
            !ws_utf8_valid(v[i], n))
            return false;
    }
    return true;
}

int ws_docker_container_name(const char *server_id, const char *workspace_id, char *buf,
                             size_t size)
{
    char tmp[WS_DOCKER_NAME_MAX + 1];
    int n;

    if (!label_id_valid(server_id) || !label_id_valid(workspace_id))
        return -EINVAL;
    n = snprintf(tmp, sizeof(tmp), WS_DOCKER_NAME_PREFIX "%s-%s", server_id, workspace_id);
    if (n < 0 || (size_t)n >= sizeof(tmp) || (size_t)n >= size)
        return -ENOBUFS;
    memcpy(buf, tmp, (size_t)n + 1);
    return n;
}

static const char *const keepalive_default[] = {WS_DOCKER_KEEPALIVE_ARGV0,
                                                WS_DOCKER_KEEPALIVE_ARGV1, NULL};

/* A capability as the daemon may write it back: its name with or without
 * "CAP_", in any case. */
static const char *cap_base(const char *name)
{
    return strncasecmp(name, "CAP_", 4) == 0 ? name + 4 : name;
}

static bool cap_same(const char *a, const char *b)
{
    return strcasecmp(cap_base(a), cap_base(b)) == 0;
}

/* A name we send: [A-Z][A-Z0-9_]*, without "CAP_", not "ALL". */
static bool cap_name_valid(const char *s)
{
    size_t n = strnlen(s, WS_DOCKER_CAP_NAME_MAX);

    if (n == 0 || n >= WS_DOCKER_CAP_NAME_MAX || !(s[0] >= 'A' && s[0] <= 'Z') ||
        strncmp(s, "CAP_", 4) == 0 || strcmp(s, "ALL") == 0)
        return false;
    for (size_t i = 1; i < n; i++)
        if (!((s[i] >= 'A' && s[i] <= 'Z') || is_digit(s[i]) || s[i] == '_'))
            return false;
    return true;
}

/* NULL, or at most WS_DOCKER_CAP_ADD_MAX valid names without repeats;
 * their count in *ret_n. */
static bool cap_add_valid(const char *const *caps, size_t *ret_n)
{
    size_t n = 0;

    for (; caps && caps[n]; n++) {
        if (n >= WS_DOCKER_CAP_ADD_MAX || !cap_name_valid(caps[n]))
            return false;
        for (size_t j = 0; j < n; j++)
            if (cap_same(caps[j], caps[n]))
                return false;
    }
    *ret_n = n;
    return true;
}

/* A runtime name: [a-zA-Z0-9][a-zA-Z0-9_.-]*, shorter than
 * WS_DOCKER_RUNTIME_MAX. */
static bool runtime_valid(const char *s)
{
    size_t n = strnlen(s, WS_DOCKER_RUNTIME_MAX);

    if (n == 0 || n >= WS_DOCKER_RUNTIME_MAX || !is_alnum(s[0]))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!is_alnum(s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
            return false;
    return true;
}

static bool has_text(const char *s)
{
    return s && s[0];
}

/* The spec with its defaults applied, once validated. */
struct effective {
    int64_t pids_limit;
    int64_t tmp_bytes;
    const char *tmp_user;
    size_t n_cap_add;
};

static int spec_check(const struct ws_docker_container_spec *spec, struct effective *ret)
{
    const char *const *keepalive = spec->keepalive ? spec->keepalive : keepalive_default;
    struct effective e = {
        .pids_limit = spec->pids_limit ? spec->pids_limit : WS_DOCKER_PIDS_DEFAULT,
        .tmp_bytes = spec->tmp_bytes ? spec->tmp_bytes : WS_DOCKER_TMP_BYTES_DEFAULT,
        .tmp_user = has_text(spec->tmp_user) ? spec->tmp_user : spec->user,
    };

    if (!ws_docker_image_valid(spec->image) || !ws_docker_user_valid(spec->user) ||
        !label_id_valid(spec->server_id) || !label_id_valid(spec->workspace_id) ||
        !canonical_abs(spec->workspace_dir, WS_DOCKER_HOST_PATH_MAX) ||
        !utf8_ok(spec->workspace_dir))
        return -EINVAL;
    if (spec->init_path &&
        (!canonical_abs(spec->init_path, WS_DOCKER_HOST_PATH_MAX) || !utf8_ok(spec->init_path)))
        return -EINVAL;
    if (!spec->agent_path != !spec->channel_dir)
        return -EINVAL;
    for (int i = 0; spec->agent_path && i < 2; i++) {
        const char *p = i ? spec->channel_dir : spec->agent_path;
        if (!canonical_abs(p, WS_DOCKER_HOST_PATH_MAX) || !utf8_ok(p))
            return -EINVAL;
    }
    for (size_t i = 0; spec->env && spec->env[i]; i++) {
        size_t n = strnlen(spec->env[i], WS_DOCKER_CONTAINER_ENV_VAR_MAX);
        if (i >= WS_DOCKER_CONTAINER_ENV_MAX || n >= WS_DOCKER_CONTAINER_ENV_VAR_MAX ||
            spec->env[i][0] == '=' || !memchr(spec->env[i], '=', n) || !utf8_ok(spec->env[i]))
            return -EINVAL;
    }
    if (!argv_ok(keepalive, WS_DOCKER_KEEPALIVE_ARGS_MAX, WS_DOCKER_KEEPALIVE_ARG_MAX,
                 WS_DOCKER_KEEPALIVE_ARGS_MAX * (WS_DOCKER_KEEPALIVE_ARG_MAX + 1)))
        return -EINVAL;
    if (spec->memory_bytes < 0 || (spec->memory_bytes && spec->memory_bytes < WS_DOCKER_MEMORY_MIN))
        return -EINVAL;
    if (spec->nano_cpus < 0 || (spec->nano_cpus && spec->nano_cpus < WS_DOCKER_NANO_CPUS_MIN))
        return -EINVAL;
    if (e.pids_limit < 1 || e.pids_limit > WS_DOCKER_PIDS_MAX)
        return -EINVAL;
    if (e.tmp_bytes < WS_DOCKER_TMP_BYTES_MIN || e.tmp_bytes > WS_DOCKER_TMP_BYTES_MAX)
        return -EINVAL;
    if (!ws_docker_user_valid(e.tmp_user) || !cap_add_valid(spec->cap_add, &e.n_cap_add) ||
        (has_text(spec->runtime) && !runtime_valid(spec->runtime)))
        return -EINVAL;
    if (ret)
        *ret = e;
    return 0;
}

/* Tmpfs options for /tmp. "exec" is explicit: Docker's default for a tmpfs
 * is noexec, which breaks compilers and test runners that execute what
 * they build under TMPDIR, and buys nothing when the workspace itself is
 * executable. nosuid and nodev keep /tmp from becoming a way around the
 * rest of the hardening. uid and gid make the container's user own it:
 * runc gives a tmpfs the mode of the image's directory it covers, so
 * "mode=1777" alone leaves /tmp unwritable in an image whose /tmp is 0755
 * (seen with the test image on Docker 20.10). */
static void tmpfs_options(int64_t bytes, const char *user, char buf[WS_DOCKER_TMPFS_OPTIONS_MAX])
{
    const char *colon = strchr(user, ':');

    snprintf(buf, WS_DOCKER_TMPFS_OPTIONS_MAX,
             "rw,exec,nosuid,nodev,size=%" PRId64 ",mode=1777,uid=%.*s,gid=%s", bytes,
             (int)(colon - user), user, colon + 1);
}

int ws_docker_create_body(const struct ws_docker_container_spec *spec, char **ret_json)
{
    char tmpfs[WS_DOCKER_TMPFS_OPTIONS_MAX];
    struct effective e;
    json_t *root, *hc;
    int err;

    err = spec_check(spec, &e);
    if (err < 0)
        return err;
    tmpfs_options(e.tmp_bytes, e.tmp_user, tmpfs);
    root = json_pack("{s:s, s:s, s:s}", "Image", spec->image, "User", spec->user, "WorkingDir",
                     WS_DOCKER_WORKDIR);
    if (!root)
        return -ENOMEM;
    err = put(root, "Entrypoint",
              string_array(spec->keepalive ? spec->keepalive : keepalive_default));
    if (err == 0)
        err = put(root, "Cmd", json_array());
    if (err == 0)
        err = put(root, "Labels",
                  json_pack("{s:s, s:s}", WS_DOCKER_LABEL_SERVER, spec->server_id,
                            WS_DOCKER_LABEL_WORKSPACE, spec->workspace_id));
    /* The workspace is a Mounts entry rather than a Binds string: Binds
     * parses "src:dst:opts" (a ':' or ',' in the host path would be read
     * as syntax) and silently creates a missing source as root, where a
     * bind mount refuses one. */
    if (err == 0)
        err = put(root, "HostConfig",
                  json_pack("{s:[{s:s, s:s, s:s, s:b}], s:[s], s:[s], s:b, s:{s:s}, s:s, s:s, "
                            "s:I, s:b, s:{s:s}}",
                            "Mounts", "Type", "bind", "Source", spec->workspace_dir, "Target",
                            WS_DOCKER_WORKDIR, "ReadOnly", 0, "CapDrop", "ALL", "SecurityOpt",
                            "no-new-privileges", "ReadonlyRootfs", 1, "Tmpfs", WS_DOCKER_TMP, tmpfs,
                            "NetworkMode", spec->network_allow ? "bridge" : "none", "IpcMode",
                            "private", "PidsLimit", (json_int_t)e.pids_limit, "Init",
                            !spec->keepalive_is_pid1, "RestartPolicy", "Name", "no"));
    hc = json_object_get(root, "HostConfig");
    if (err == 0 && e.n_cap_add)
        err = put(hc, "CapAdd", string_array(spec->cap_add));
    if (err == 0 && has_text(spec->runtime))
        err = put(hc, "Runtime", json_string(spec->runtime));
    if (err == 0 && spec->init_path)
        err = json_array_append_new(json_object_get(hc, "Mounts"),
                                    json_pack("{s:s, s:s, s:s, s:b}", "Type", "bind", "Source",
                                              spec->init_path, "Target", WS_DOCKER_INIT_TARGET,
                                              "ReadOnly", 1)) < 0
                  ? -ENOMEM
                  : 0;
    for (int i = 0; err == 0 && spec->agent_path && i < 2; i++)
        err = json_array_append_new(json_object_get(hc, "Mounts"),
                                    json_pack("{s:s, s:s, s:s, s:b}", "Type", "bind", "Source",
                                              i ? spec->channel_dir : spec->agent_path, "Target",
                                              i ? WS_DOCKER_CHANNEL_TARGET : WS_DOCKER_AGENT_TARGET,
                                              "ReadOnly", 1)) < 0
                  ? -ENOMEM
                  : 0;
    if (err == 0 && spec->env)
        err = put(root, "Env", string_array(spec->env));
    for (int i = 0; err == 0 && spec->passwd_path && spec->group_path && i < 2; i++)
        err = json_array_append_new(json_object_get(hc, "Mounts"),
                                    json_pack("{s:s, s:s, s:s, s:b}", "Type", "bind", "Source",
                                              i ? spec->group_path : spec->passwd_path, "Target",
                                              i ? "/etc/group" : "/etc/passwd", "ReadOnly", 1)) < 0
                  ? -ENOMEM
                  : 0;
    if (err == 0)
        err = put(hc, "LogConfig",
                  json_pack("{s:s, s:{s:s, s:s, s:s}}", "Type", WS_DOCKER_LOG_DRIVER, "Config",
                            "max-size", WS_DOCKER_LOG_MAX_SIZE, "max-file", WS_DOCKER_LOG_MAX_FILE,
                            "compress", "false"));
    /* Swap equal to memory: the limit is the limit, not a threshold at
     * which the container starts swapping. */
    if (err == 0 && spec->memory_bytes) {
        err = put(hc, "Memory", json_integer(spec->memory_bytes));
        if (err == 0)
            err = put(hc, "MemorySwap", json_integer(spec->memory_bytes));
    }
    if (err == 0 && spec->nano_cpus)
        err = put(hc, "NanoCpus", json_integer(spec->nano_cpus));
    return finish(root, err, ret_json);
}

/* A working directory: /workspace or a canonical path below it. */
static bool cwd_ok(const char *cwd)
{
    size_t n = strlen(WS_DOCKER_WORKDIR);

    return canonical_abs(cwd, WS_DOCKER_CWD_MAX) && strncmp(cwd, WS_DOCKER_WORKDIR, n) == 0 &&
           (cwd[n] == '\0' || cwd[n] == '/') && utf8_ok(cwd);
}

/* NULL or "NAME=value" entries with a non-empty NAME within the limits. */
static bool env_ok(const char *const *envp)
{
    size_t bytes = 0;

    for (size_t i = 0; envp && envp[i]; i++) {
        size_t n = strnlen(envp[i], WS_DOCKER_ENV_BYTES_MAX + 1);

        if (i >= WS_DOCKER_ENV_MAX || (bytes += n + 1) > WS_DOCKER_ENV_BYTES_MAX ||
            envp[i][0] == '=' || !memchr(envp[i], '=', n) || !ws_utf8_valid(envp[i], n))
            return false;
    }
    return true;
}

/* NULL or names without '=' within the environment limits. */
static bool unset_ok(const char *const *names)
{
    size_t bytes = 0;

    for (size_t i = 0; names && names[i]; i++) {
        size_t n = strnlen(names[i], WS_DOCKER_ENV_BYTES_MAX + 1);

        if (i >= WS_DOCKER_ENV_MAX || (bytes += n + 1) > WS_DOCKER_ENV_BYTES_MAX || n == 0 ||
            memchr(names[i], '=', n) || !ws_utf8_valid(names[i], n))
            return false;
    }
    return true;
}

int ws_docker_exec_body(const struct ws_docker_exec_spec *spec, char **ret_json)
{
    const char *cwd = spec->cwd ? spec->cwd : WS_DOCKER_WORKDIR;
    bool has_user = spec->user && spec->user[0];
    json_t *root;
    int err;

    if (!argv_ok(spec->argv, WS_DOCKER_ARGS_MAX, WS_DOCKER_ARGV_BYTES_MAX,
                 WS_DOCKER_ARGV_BYTES_MAX) ||
        !env_ok(spec->envp) || !unset_ok(spec->unset) || !cwd_ok(cwd) ||
        (has_user && !ws_docker_user_valid(spec->user)))
        return -EINVAL;
    root = json_pack("{s:b, s:b, s:b, s:b, s:s}", "AttachStdin", spec->attach_stdin, "AttachStdout",
                     1, "AttachStderr", 1, "Tty", spec->tty, "WorkingDir", cwd);
    if (!root)
        return -ENOMEM;
    err = put(root, "Cmd", string_array(spec->argv));
    /* Removals first: the daemon applies the entries in order, and a
     * removal after "NAME=value" would take that value away again. */
    if (err == 0)
        err = put(root, "Env", string_array(spec->unset));
    for (size_t i = 0; err == 0 && spec->envp && spec->envp[i]; i++)
        if (json_array_append_new(json_object_get(root, "Env"), json_string(spec->envp[i])) < 0)
            err = -ENOMEM;
    if (err == 0 && has_user)
        err = put(root, "User", json_string(spec->user));
    return finish(root, err, ret_json);
}

int ws_docker_exec_start_body(bool tty, char **ret_json)
{
    return finish(json_pack("{s:b, s:b}", "Detach", 0, "Tty", tty), 0, ret_json);
}

/* --- parsing responses ------------------------------------------------------ */

static int load_any(const char *json, size_t len, json_t **ret);

static int load(const char *json, size_t len, json_t **ret)
{
    json_t *root;
    int err = load_any(json, len, &root);

    if (err < 0)
        return err;
    if (!json_is_object(root)) {
        json_decref(root);
        return -EPROTO;
    }
    *ret = root;
    return 0;
}

/* Any JSON document (a list answer is an array). */
static int load_any(const char *json, size_t len, json_t **ret)
{
    json_error_t error;
    json_t *root;

    if (!json)
        return -EPROTO;
    if (len > WS_DOCKER_RESPONSE_MAX)
        return -EMSGSIZE;
    /* Go never writes a key twice; a document that does is not the
     * daemon's, and which copy "wins" must not be left to chance. */
    root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &error);
    if (!root)
        return json_error_code(&error) == json_error_out_of_memory ? -ENOMEM : -EPROTO;
    *ret = root;
    return 0;
}

/* A member of the given type, or NULL when absent or null (-EPROTO when it
 * has another type). JSON_TRUE stands for either boolean. */
static int member(json_t *obj, const char *key, json_type type, json_t **ret)
{
    json_t *v = obj ? json_object_get(obj, key) : NULL;

    if (!v || json_is_null(v)) {
        *ret = NULL;
        return 0;
    }
    if (type == JSON_TRUE ? !json_is_boolean(v) : json_typeof(v) != type)
        return -EPROTO;
    *ret = v;
    return 0;
}

static int get_bool(json_t *obj, const char *key, bool *ret)
{
    json_t *v;
    int err = member(obj, key, JSON_TRUE, &v);

    if (err == 0)
        *ret = v ? json_is_true(v) : false;
    return err;
}

static int get_int(json_t *obj, const char *key, int64_t *ret)
{
    json_t *v;
    int err = member(obj, key, JSON_INTEGER, &v);

    if (err == 0)
        *ret = v ? (int64_t)json_integer_value(v) : 0;
    return err;
}

/* Copies a string member ("" when absent); -EPROTO when it does not fit. */
static int get_str(json_t *obj, const char *key, char *buf, size_t size)
{
    json_t *v;
    int err = member(obj, key, JSON_STRING, &v);
    size_t n;

    if (err < 0)
        return err;
    n = v ? json_string_length(v) : 0;
    if (n >= size)
        return -EPROTO;
    memcpy(buf, v ? json_string_value(v) : "", n + 1);
    return 0;
}

/* Copies text for reporting into buf (size > 0): whole characters only,
 * control characters (C0, DEL and C1) as spaces. */
static size_t copy_text(const char *src, char *buf, size_t size)
{
    const uint8_t *p = (const uint8_t *)src;
    size_t n = strlen(src), i = 0, o = 0;

    while (i < n) {
        size_t k = ws_utf8_sequence(p + i, n - i);
        bool control =
            k == 1 ? (p[i] < 0x20 || p[i] == 0x7f) : (k == 2 && p[i] == 0xc2 && p[i + 1] < 0xa0);

        if (k == 0) { /* jansson only hands out valid UTF-8; be safe anyway */
            k = 1;
            control = true;
        }
        if (o + (control ? 1 : k) > size - 1)
            break;
        if (control) {
            buf[o++] = ' ';
        } else {
            memcpy(buf + o, p + i, k);
            o += k;
        }
        i += k;
    }
    buf[o] = '\0';
    return o;
}

int ws_docker_parse_version(const char *json, size_t len, struct ws_docker_version *ret)
{
    struct ws_docker_version v = {{0, 0}, {0, 0}};
    json_t *root, *api, *min;
    int err = load(json, len, &root);

    if (err < 0)
        return err;
    err = member(root, "ApiVersion", JSON_STRING, &api);
    if (err == 0)
        err = member(root, "MinAPIVersion", JSON_STRING, &min);
    if (err == 0 && (!api || ws_docker_api_version_parse(json_string_value(api), &v.api) < 0))
        err = -EPROTO;
    if (err == 0 && min && ws_docker_api_version_parse(json_string_value(min), &v.min) < 0)
        err = -EPROTO;
    json_decref(root);
    if (err == 0)
        *ret = v;
    return err;
}

int ws_docker_parse_created(const char *json, size_t len, struct ws_docker_created *ret)
{
    struct ws_docker_created c = {.n_warnings = 0};
    json_t *root, *id, *warnings;
    int err = load(json, len, &root);

    if (err < 0)
        return err;
    err = member(root, "Id", JSON_STRING, &id);
    if (err == 0)
        err = member(root, "Warnings", JSON_ARRAY, &warnings);
    if (err == 0 && (!id || !ws_docker_id_valid(json_string_value(id))))
        err = -EPROTO;
    for (size_t i = 0; err == 0 && warnings && i < json_array_size(warnings); i++) {
        json_t *w = json_array_get(warnings, i);

        if (!json_is_string(w))
            err = -EPROTO;
        else if (c.n_warnings++ == 0)
            copy_text(json_string_value(w), c.warning, sizeof(c.warning));
    }
    if (err == 0)
        memcpy(c.id, json_string_value(id), WS_DOCKER_ID_LEN + 1);
    json_decref(root);
    if (err == 0)
        *ret = c;
    return err;
}

/* "size=" in a comma-separated tmpfs option string, in bytes; -1 when
 * there is none or it is not a plain decimal number. */
#define SIZE_DIGITS_MAX 18 /* below INT64_MAX whatever the digits */

static int64_t tmpfs_size(const char *opts)
{
    for (const char *p = opts; p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);

        if (n > 5 && strncmp(p, "size=", 5) == 0) {
            int64_t v = 0;

            if (n - 5 > SIZE_DIGITS_MAX)
                return -1;
            for (size_t i = 5; i < n; i++) {
                if (!is_digit(p[i]))
                    return -1;
                v = v * 10 + (p[i] - '0');
            }
            return v;
        }
        p = end ? end + 1 : NULL;
    }
    return -1;
}

/* The no-new-privileges forms Docker accepts; later entries win, as they
 * do in the daemon. */
static int security_opts(json_t *hc, bool *ret)
{
    json_t *a, *s;
    bool nnp = false;
    size_t i;
    int err = member(hc, "SecurityOpt", JSON_ARRAY, &a);

    if (err < 0)
        return err;
    json_array_foreach(a, i, s)
    {
        const char *v = json_string_value(s);

        if (!v)
            return -EPROTO;
        if (!strcmp(v, "no-new-privileges") || !strcmp(v, "no-new-privileges:true") ||
            !strcmp(v, "no-new-privileges=true"))
            nnp = true;
        else if (!strcmp(v, "no-new-privileges:false") || !strcmp(v, "no-new-privileges=false"))
            nnp = false;
    }
    *ret = nnp;
    return 0;
}

static int read_caps(json_t *hc, struct ws_docker_hardening *h)
{
    json_t *drop, *add, *s;
    size_t i;
    int err = member(hc, "CapDrop", JSON_ARRAY, &drop);

    if (err == 0)
        err = member(hc, "CapAdd", JSON_ARRAY, &add);
    if (err < 0)
        return err;
    json_array_foreach(drop, i, s)
    {
        if (!json_is_string(s))
            return -EPROTO;
        if (!strcasecmp(json_string_value(s), "ALL"))
            h->cap_drop_all = true;
    }
    json_array_foreach(add, i, s)
    {
        if (!json_is_string(s))
            return -EPROTO;
        if (i < WS_DOCKER_CAP_ADD_MAX) {
            if (json_string_length(s) >= sizeof(h->cap_add[i]))
                return -EPROTO;
            memcpy(h->cap_add[i], json_string_value(s), json_string_length(s) + 1);
        }
        h->n_cap_add++;
    }
    return 0;
}

static int read_tmpfs(json_t *hc, struct ws_docker_hardening *h)
{
    json_t *t, *opts;
    int err = member(hc, "Tmpfs", JSON_OBJECT, &t);

    if (err == 0)
        err = member(t, WS_DOCKER_TMP, JSON_STRING, &opts);
    if (err == 0 && opts) {
        if (json_string_length(opts) >= sizeof(h->tmp_options))
            return -EPROTO;
        memcpy(h->tmp_options, json_string_value(opts), json_string_length(opts) + 1);
        h->tmp_bytes = tmpfs_size(h->tmp_options);
    }
    return err;
}

static int read_mounts(json_t *root, struct ws_docker_hardening *h)
{
    json_t *a, *m;
    size_t i;
    int err = member(root, "Mounts", JSON_ARRAY, &a);

    if (err < 0)
        return err;
    json_array_foreach(a, i, m)
    {
        char type[WS_DOCKER_FIELD_MAX], dest[WS_DOCKER_CWD_MAX + 1];
        bool rw;

        if (!json_is_object(m))
            return -EPROTO;
        if ((err = get_str(m, "Type", type, sizeof(type))) < 0 ||
            (err = get_str(m, "Destination", dest, sizeof(dest))) < 0 ||
            (err = get_bool(m, "RW", &rw)) < 0)
            return err;
        if (!strcmp(dest, WS_DOCKER_WORKDIR) && !strcmp(type, "bind") && rw)
            h->workspace_rw = true;
        else if (!strcmp(dest, WS_DOCKER_INIT_TARGET) && !strcmp(type, "bind") && !rw)
            h->init_ro = true;
        else if (!strcmp(dest, WS_DOCKER_AGENT_TARGET) && !strcmp(type, "bind") && !rw)
            h->agent_ro = true;
        else if (!strcmp(dest, WS_DOCKER_CHANNEL_TARGET) && !strcmp(type, "bind") && !rw)
            h->channel_ro = true;
        else if ((!strcmp(dest, "/etc/passwd") || !strcmp(dest, "/etc/group")) &&
                 !strcmp(type, "bind") && !rw)
            h->accounts_ro++;
        else
            h->n_other_mounts++;
    }
    return 0;
}

/* Reads every hardening member of an inspect document into h. */
static int read_hardening(json_t *root, struct ws_docker_hardening *h)
{
    json_t *hc, *config, *log, *labels;
    int err;

    if ((err = member(root, "HostConfig", JSON_OBJECT, &hc)) < 0 ||
        (err = member(root, "Config", JSON_OBJECT, &config)) < 0)
        return err;
    if (!hc || !config)
        return -EPROTO;
    if ((err = member(hc, "LogConfig", JSON_OBJECT, &log)) < 0 ||
        (err = member(config, "Labels", JSON_OBJECT, &labels)) < 0 ||
        (err = read_caps(hc, h)) < 0 || (err = security_opts(hc, &h->no_new_privileges)) < 0 ||
        (err = read_tmpfs(hc, h)) < 0 || (err = read_mounts(root, h)) < 0 ||
        (err = get_bool(hc, "Privileged", &h->privileged)) < 0 ||
        (err = get_bool(hc, "ReadonlyRootfs", &h->readonly_rootfs)) < 0 ||
        (err = get_bool(hc, "Init", &h->init)) < 0 ||
        (err = get_str(hc, "NetworkMode", h->network_mode, sizeof(h->network_mode))) < 0 ||
        (err = get_str(hc, "IpcMode", h->ipc_mode, sizeof(h->ipc_mode))) < 0 ||
        (err = get_str(hc, "Runtime", h->runtime, sizeof(h->runtime))) < 0 ||
        (err = get_str(log, "Type", h->log_type, sizeof(h->log_type))) < 0 ||
        (err = get_str(config, "User", h->user, sizeof(h->user))) < 0 ||
        (err = get_int(hc, "PidsLimit", &h->pids_limit)) < 0 ||
        (err = get_int(hc, "Memory", &h->memory)) < 0 ||
        (err = get_int(hc, "MemorySwap", &h->memory_swap)) < 0 ||
        (err = get_int(hc, "NanoCpus", &h->nano_cpus)) < 0 ||
        (err = get_str(labels, WS_DOCKER_LABEL_SERVER, h->server_id, sizeof(h->server_id))) < 0)
        return err;
    return get_str(labels, WS_DOCKER_LABEL_WORKSPACE, h->workspace_id, sizeof(h->workspace_id));
}

int ws_docker_parse_hardening(const char *json, size_t len, struct ws_docker_hardening *ret)
{
    struct ws_docker_hardening h = {.cap_drop_all = false};
    json_t *root;
    int err = load(json, len, &root);

    if (err < 0)
        return err;
    err = read_hardening(root, &h);
    json_decref(root);
    if (err == 0)
        *ret = h;
    return err;
}

/* Exactly the spec's capabilities: as many entries, and each of the
 * spec's among them (the spec has no repeats, so a repeat read back leaves
 * one of the spec's out). */
static bool cap_add_matches(const struct ws_docker_hardening *h,
                            const struct ws_docker_container_spec *spec, size_t n)
{
    if (h->n_cap_add != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        bool found = false;

        for (size_t j = 0; j < n && !found; j++)
            found = cap_same(h->cap_add[j], spec->cap_add[i]);
        if (!found)
            return false;
    }
    return true;
}

const char *ws_docker_hardening_mismatch(const struct ws_docker_hardening *h,
                                         const struct ws_docker_container_spec *spec)
{
    char tmpfs[WS_DOCKER_TMPFS_OPTIONS_MAX];
    struct effective e;

    /* A spec that does not validate was never sent; nothing can match it. */
    if (spec_check(spec, &e) < 0)
        return "spec";
    if (!h->cap_drop_all)
        return "HostConfig.CapDrop";
    if (!cap_add_matches(h, spec, e.n_cap_add))
        return "HostConfig.CapAdd";
    if (h->privileged)
        return "HostConfig.Privileged";
    if (has_text(spec->runtime) && strcmp(h->runtime, spec->runtime))
        return "HostConfig.Runtime";
    if (!h->no_new_privileges)
        return "HostConfig.SecurityOpt";
    if (!h->readonly_rootfs)
        return "HostConfig.ReadonlyRootfs";
    if (h->init == spec->keepalive_is_pid1)
        return "HostConfig.Init";
    if (strcmp(h->network_mode, spec->network_allow ? "bridge" : "none"))
        return "HostConfig.NetworkMode";
    if (strcmp(h->ipc_mode, "private"))
        return "HostConfig.IpcMode";
    if (strcmp(h->log_type, WS_DOCKER_LOG_DRIVER))
        return "HostConfig.LogConfig.Type";
    if (strcmp(h->user, spec->user))
        return "Config.User";
    if (h->pids_limit != e.pids_limit)
        return "HostConfig.PidsLimit";
    if (h->memory != spec->memory_bytes)
        return "HostConfig.Memory";
    if (h->memory_swap != spec->memory_bytes)
        return "HostConfig.MemorySwap";
    if (h->nano_cpus != spec->nano_cpus)
        return "HostConfig.NanoCpus";
    tmpfs_options(e.tmp_bytes, e.tmp_user, tmpfs);
    if (strcmp(h->tmp_options, tmpfs))
        return "HostConfig.Tmpfs";
    if (!h->workspace_rw || h->n_other_mounts || h->init_ro != (spec->init_path != NULL) ||
        h->agent_ro != (spec->agent_path != NULL) || h->channel_ro != (spec->agent_path != NULL) ||
        h->accounts_ro != (spec->passwd_path && spec->group_path ? 2u : 0u))
        return "Mounts";
    if (strcmp(h->server_id, spec->server_id) || strcmp(h->workspace_id, spec->workspace_id))
        return "Config.Labels";
    return NULL;
}

/* Exit statuses and pids are ints in the API's Go types. */
static bool int_range(int64_t v, int64_t lo, int64_t hi)
{
    return v >= lo && v <= hi;
}

static int read_state(json_t *root, struct ws_docker_state *s)
{
    json_t *state;
    int64_t code = 0;
    int err;

    if ((err = member(root, "State", JSON_OBJECT, &state)) < 0)
        return err;
    if (!state)
        return -EPROTO;
    if ((err = get_bool(state, "Running", &s->running)) < 0 ||
        (err = get_bool(state, "OOMKilled", &s->oom_killed)) < 0 ||
        (err = get_int(state, "ExitCode", &code)) < 0 ||
        (err = get_str(state, "Status", s->status, sizeof(s->status))) < 0)
        return err;
    if (!int_range(code, INT32_MIN, INT32_MAX))
        return -EPROTO;
    s->exit_code = (int)code;
    return 0;
}

int ws_docker_parse_state(const char *json, size_t len, struct ws_docker_state *ret)
{
    struct ws_docker_state s = {.running = false};
    json_t *root;
    int err = load(json, len, &root);

    if (err < 0)
        return err;
    err = read_state(root, &s);
    json_decref(root);
    if (err == 0)
        *ret = s;
    return err;
}

int ws_docker_parse_image_volumes(const char *json, size_t len, bool *ret_has_volumes)
{
    json_t *root, *config, *volumes = NULL;
    bool has = false;
    int err = load(json, len, &root);

    if (err < 0)
        return err;
    err = member(root, "Config", JSON_OBJECT, &config);
    if (err == 0)
        err = member(config, "Volumes", JSON_OBJECT, &volumes);
    if (err == 0)
        has = volumes && json_object_size(volumes) > 0;
    json_decref(root);
    if (err == 0)
        *ret_has_volumes = has;
    return err;
}

int ws_docker_parse_image_env_names(const char *json, size_t len, char ***ret_names)
{
    json_t *root, *config, *env = NULL, *v;
    char **names = NULL;
    size_t i, n = 0;
    int err = load(json, len, &root);

    if (err < 0)
        return err;
    err = member(root, "Config", JSON_OBJECT, &config);
    if (err == 0 && config)
        err = member(config, "Env", JSON_ARRAY, &env);
    if (err == 0 && env && json_array_size(env) > WS_DOCKER_ENV_MAX)
        err = -EMSGSIZE;
    if (err == 0) {
        names = calloc((env ? json_array_size(env) : 0) + 1, sizeof(*names));
        if (!names)
            err = -ENOMEM;
    }
    json_array_foreach(env, i, v)
    {
        const char *entry = json_string_value(v);
        const char *eq = entry ? strchr(entry, '=') : NULL;

        if (err < 0)
            break;
        /* "NAME=value"; anything else is not the daemon's. */
        if (!eq || eq == entry) {
            err = -EPROTO;
            break;
        }
        names[n] = strndup(entry, (size_t)(eq - entry));
        if (!names[n++])
            err = -ENOMEM;
    }
    json_decref(root);
    if (err < 0) {
        ws_docker_names_free(names);
        return err;
    }
    *ret_names = names;
    return 0;
}

void ws_docker_names_free(char **names)
{
    for (size_t i = 0; names && names[i]; i++)
        free(names[i]);
    free(names);
}

int ws_docker_parse_container_ids(const char *json, size_t len, char ***ret_ids)
{
    json_t *root, *v;
    char **ids = NULL;
    size_t i, n = 0;
    int err = load_any(json, len, &root);

    if (err < 0)
        return err;
    if (!json_is_array(root))
        err = -EPROTO;
    if (err == 0) {
        ids = calloc(json_array_size(root) + 1, sizeof(*ids));
        if (!ids)
            err = -ENOMEM;
    }
    json_array_foreach(root, i, v)
    {
        json_t *id = json_object_get(v, "Id");

        if (err < 0)
            break;
        if (!json_is_string(id) || !ws_docker_id_valid(json_string_value(id))) {
            err = -EPROTO;
            break;
        }
        ids[n] = strdup(json_string_value(id));
        if (!ids[n++])
            err = -ENOMEM;
    }
    json_decref(root);
    if (err < 0) {
        ws_docker_names_free(ids);
        return err;
    }
    *ret_ids = ids;
    return 0;
}

int ws_docker_parse_exec_inspect(const char *json, size_t len, struct ws_docker_exec_state *ret)
{
    struct ws_docker_exec_state s = {.exit_code = -1};
    json_t *root, *code;
    int64_t pid = 0;
    int err = load(json, len, &root);

    if (err < 0)
        return err;
    if ((err = get_bool(root, "Running", &s.running)) < 0 ||
        (err = get_int(root, "Pid", &pid)) < 0 ||
        (err = member(root, "ExitCode", JSON_INTEGER, &code)) < 0)
        goto out;
    if (!int_range(pid, 0, INT32_MAX)) {
        err = -EPROTO;
        goto out;
    }
    s.pid = (int)pid;
    /* ExitCode is null until the process has finished; a running exec
     * with a code would be a daemon bug, and is not taken as an exit. */
    if (code && !s.running) {
        json_int_t v = json_integer_value(code);

        if (!int_range(v, INT32_MIN, INT32_MAX)) {
            err = -EPROTO;
            goto out;
        }
        s.exited = true;
        s.exit_code = (int)v;
    }
out:
    json_decref(root);
    if (err == 0)
        *ret = s;
    return err;
}

int ws_docker_parse_error(const char *json, size_t len, char *buf, size_t size)
{
    json_t *root, *msg;
    int err;

    if (size == 0)
        return -EINVAL;
    err = load(json, len, &root);
    if (err < 0)
        return err;
    err = member(root, "message", JSON_STRING, &msg);
    if (err == 0 && !msg)
        err = -EPROTO;
    if (err == 0)
        err = (int)copy_text(json_string_value(msg), buf, size); /* < WS_DOCKER_RESPONSE_MAX */
    json_decref(root);
    return err;
}
