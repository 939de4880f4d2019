/* The operator's policy; see policy.h. */
#include "server/policy/policy.h"

#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "server/base/macros.h"
#include "server/providers/provider.h"

/* Most [policy.TENANT] sections and [peers] entries. */
#define TENANTS_MAX 4096
#define PEERS_MAX   4096

static const char *const key_names[WS_POLICY_KEYS] = {
    [WS_POLICY_PROVIDERS] = "providers",
    [WS_POLICY_NETWORK] = "network",
    [WS_POLICY_BIND_ROOTS] = "bind-roots",
    [WS_POLICY_PASS_ENV] = "pass-env",
    [WS_POLICY_COMMANDS] = "commands",
    [WS_POLICY_DOCKER_IMAGES] = "docker-images",
    [WS_POLICY_DOCKER_PULL] = "docker-pull",
    [WS_POLICY_DOCKER_USERS] = "docker-users",
    [WS_POLICY_ADDRESS_SPACE] = "address-space-mb",
};

/* Host trees no sandbox ever gets, whatever the bind roots say: the
 * kernel's views of the host (/proc, /sys), its devices, its runtime
 * sockets (/run holds docker.sock), its configuration and secrets (/etc,
 * /root) and its boot files. */
static const char *const forbidden[] = {"/proc", "/sys", "/dev", "/run", "/etc", "/boot", "/root"};

struct peer {
    uid_t uid;
    char tenant[WS_POLICY_TENANT_MAX + 1];
};

struct ws_policy_set {
    atomic_long refs;
    struct ws_policy def;
    struct ws_policy **tenants;
    size_t n_tenants;
    struct peer *peers;
    size_t n_peers;
};

const char *ws_policy_key_name(enum ws_policy_key k)
{
    return (unsigned)k < WS_POLICY_KEYS ? key_names[k] : "";
}

bool ws_policy_tenant_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;

    return n > 0 && n <= WS_POLICY_TENANT_MAX &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* ---- lists ---- */

static void list_free(struct ws_policy_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    *l = (struct ws_policy_list){0};
}

static int list_copy(struct ws_policy_list *dst, const struct ws_policy_list *src)
{
    *dst = (struct ws_policy_list){0};
    if (!src->n)
        return 0;
    dst->v = calloc(src->n, sizeof(*dst->v));
    if (!dst->v)
        return -ENOMEM;
    for (size_t i = 0; i < src->n; i++) {
        dst->v[i] = strdup(src->v[i]);
        if (!dst->v[i]) {
            dst->n = i;
            list_free(dst);
            return -ENOMEM;
        }
    }
    dst->n = src->n;
    return 0;
}

static bool list_has(const struct ws_policy_list *l, const char *s)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i], s) == 0)
            return true;
    return false;
}

/* Checks one entry of a list key; NULL or why it is refused (written to
 * why when the reason names the entry). */
typedef const char *(*entry_fn)(const char *entry, char *why, size_t why_size);

/* Splits a comma-separated value (blanks around entries dropped) into a
 * new list, every entry checked by fn; duplicates are dropped. "none"
 * alone is the empty list. */
static int list_parse(const char *value, entry_fn fn, struct ws_policy_list *ret, char *why,
                      size_t why_size)
{
    struct ws_policy_list l = {0};
    char *buf = strdup(value), *save = NULL;

    if (!buf) {
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    *ret = l;
    if (strcmp(value, "none") == 0) {
        free(buf);
        return 0;
    }
    l.v = calloc(WS_POLICY_LIST_MAX, sizeof(*l.v));
    if (!l.v) {
        free(buf);
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    /* A value that is only commas or blanks names nothing: "none" says
     * that on purpose, an empty entry is a slip. */
    for (const char *c = value; *c; c++)
        if (*c == ',' && (c == value || c[1] == '\0' || c[1] == ',')) {
            snprintf(why, why_size, "an empty entry in the comma-separated list");
            goto fail;
        }
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        t += strspn(t, " \t");
        size_t n = strlen(t);
        while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
            t[--n] = '\0';
        if (n == 0) {
            snprintf(why, why_size, "an empty entry in the comma-separated list");
            goto fail;
        }
        if (n > WS_POLICY_ENTRY_MAX) {
            snprintf(why, why_size, "an entry longer than %d bytes", WS_POLICY_ENTRY_MAX);
            goto fail;
        }
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)t[i] < 0x21 || (unsigned char)t[i] > 0x7e) {
                snprintf(why, why_size,
                         "an entry with a blank or a byte that is not printable "
                         "ASCII");
                goto fail;
            }
        const char *bad = fn(t, why, why_size);
        if (bad) {
            if (bad != why)
                snprintf(why, why_size, "%s", bad);
            goto fail;
        }
        if (list_has(&l, t))
            continue;
        if (l.n == WS_POLICY_LIST_MAX) {
            snprintf(why, why_size, "more than %d entries", WS_POLICY_LIST_MAX);
            goto fail;
        }
        l.v[l.n] = strdup(t);
        if (!l.v[l.n]) {
            snprintf(why, why_size, "out of memory");
            goto fail;
        }
        l.n++;
    }
    free(buf);
    *ret = l;
    return 0;
fail:
    free(buf);
    list_free(&l);
    return -1;
}

/* ---- entry checks ---- */

static const char *provider_entry(const char *e, char *why, size_t why_size)
{
    (void)why;
    (void)why_size;
    return ws_provider_kind_by_name(e) >= 0 ? NULL
                                            : "not a comma-separated list of memory, local-bash, "
                                              "local-sandbox, docker";
}

/* Whether canonical path p is `root` or under it. */
static bool path_under(const char *p, const char *root)
{
    size_t n = strlen(root);

    if (strcmp(root, "/") == 0)
        return p[0] == '/';
    return strncmp(p, root, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

/* The forbidden tree p is or lies under, or NULL ("/" itself too). */
static const char *forbidden_tree(const char *p)
{
    if (strcmp(p, "/") == 0)
        return "/";
    for (size_t i = 0; i < WS_ELEMENTSOF(forbidden); i++)
        if (path_under(p, forbidden[i]))
            return forbidden[i];
    return NULL;
}

static const char *bind_root_entry(const char *e, char *why, size_t why_size)
{
    struct stat st;
    const char *tree;
    char *canon;

    if (e[0] != '/') {
        snprintf(why, why_size, "\"%s\" is not an absolute path", e);
        return why;
    }
    tree = forbidden_tree(e);
    if (tree && strcmp(tree, "/") == 0) {
        snprintf(why, why_size, "\"/\" cannot be a bind root: list the directories to share");
        return why;
    }
    if (tree) {
        snprintf(why, why_size, "\"%s\" is %s%s, which is never bound into a sandbox", e,
                 strcmp(tree, e) == 0 ? "" : "under ", tree);
        return why;
    }
    canon = realpath(e, NULL);
    if (!canon) {
        snprintf(why, why_size, "\"%s\": %s", e, strerror(errno));
        return why;
    }
    bool same = strcmp(canon, e) == 0;
    free(canon);
    if (!same) {
        snprintf(why, why_size,
                 "\"%s\" is not canonical (a symlink, '.', '..', '//' or a trailing '/')", e);
        return why;
    }
    if (stat(e, &st) < 0 || !S_ISDIR(st.st_mode)) {
        snprintf(why, why_size, "\"%s\" is not a directory", e);
        return why;
    }
    return NULL;
}

static const char *env_name_entry(const char *e, char *why, size_t why_size)
{
    size_t n = strlen(e);

    if ((e[0] >= '0' && e[0] <= '9') ||
        strspn(e, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != n) {
        snprintf(why, why_size,
                 "\"%s\" is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", e);
        return why;
    }
    return NULL;
}

static const char *command_entry(const char *e, char *why, size_t why_size)
{
    /* Names and absolute paths, as allowed_commands takes them. */
    if (e[0] != '/' && strchr(e, '/')) {
        snprintf(why, why_size, "\"%s\" is neither a command name nor an absolute path", e);
        return why;
    }
    return NULL;
}

static const char *image_entry(const char *e, char *why, size_t why_size)
{
    /* fnmatch's own syntax; an unmatched '[' simply never matches, so the
     * one mistake worth catching is a bracket that is not closed. */
    const char *open = strchr(e, '[');
    if (open && !strchr(open, ']')) {
        snprintf(why, why_size, "\"%s\": a '[' without its ']'", e);
        return why;
    }
    return NULL;
}

/* A uid or gid: decimal, 1..4294967294 (0 is root; -1 is "none"). */
static bool id_part(const char *s, size_t n, uint32_t *ret)
{
    uint64_t v = 0;

    if (n == 0 || n > 10)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v >= UINT32_MAX)
        return false;
    *ret = (uint32_t)v;
    return true;
}

static bool user_parse(const char *s, uint32_t *uid, uint32_t *gid)
{
    const char *colon = strchr(s, ':');

    return colon && id_part(s, (size_t)(colon - s), uid) &&
           id_part(colon + 1, strlen(colon + 1), gid);
}

static const char *user_entry(const char *e, char *why, size_t why_size)
{
    uint32_t uid, gid;

    if (!user_parse(e, &uid, &gid)) {
        snprintf(why, why_size, "\"%s\" is not uid:gid (decimal numbers)", e);
        return why;
    }
    if (uid == 0 || gid == 0) {
        snprintf(why, why_size, "\"%s\": uid or gid 0 (root) is never allowed", e);
        return why;
    }
    return NULL;
}

/* ---- sets ---- */

/* local-bash is no isolation at all: only an operator who lists it gets
 * it. Any image may be used (pulls are off, so only what the operator
 * put on the daemon). */
static int policy_defaults(struct ws_policy *p)
{
    static char any[] = "*";
    static char *any_list[] = {any};
    static const struct ws_policy_list images = {.v = any_list, .n = 1};

    p->providers =
        1u << WS_PROVIDER_MEMORY | 1u << WS_PROVIDER_LOCAL_SANDBOX | 1u << WS_PROVIDER_DOCKER;
    return list_copy(&p->docker_images, &images);
}

static void policy_clear(struct ws_policy *p)
{
    list_free(&p->bind_roots);
    list_free(&p->pass_env);
    list_free(&p->commands);
    list_free(&p->docker_images);
    list_free(&p->docker_users);
}

int ws_policy_set_new(struct ws_policy_set **ret)
{
    struct ws_policy_set *s = calloc(1, sizeof(*s));

    if (!s)
        return -ENOMEM;
    atomic_init(&s->refs, 1);
    if (policy_defaults(&s->def) < 0) {
        free(s);
        return -ENOMEM;
    }
    *ret = s;
    return 0;
}

struct ws_policy_set *ws_policy_set_ref(struct ws_policy_set *s)
{
    if (s)
        atomic_fetch_add(&s->refs, 1);
    return s;
}

void ws_policy_set_unref(struct ws_policy_set *s)
{
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    policy_clear(&s->def);
    for (size_t i = 0; i < s->n_tenants; i++) {
        policy_clear(s->tenants[i]);
        free(s->tenants[i]);
    }
    free(s->tenants);
    free(s->peers);
    free(s);
}

static struct ws_policy *tenant_policy(struct ws_policy_set *s, const char *tenant, bool create)
{
    for (size_t i = 0; i < s->n_tenants; i++)
        if (strcmp(s->tenants[i]->tenant, tenant) == 0)
            return s->tenants[i];
    if (!create || s->n_tenants == TENANTS_MAX)
        return NULL;
    struct ws_policy **v = realloc(s->tenants, (s->n_tenants + 1) * sizeof(*v));
    if (!v)
        return NULL;
    s->tenants = v;
    struct ws_policy *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    snprintf(p->tenant, sizeof(p->tenant), "%s", tenant);
    s->tenants[s->n_tenants++] = p;
    return p;
}

static int parse_bool(const char *v, bool *ret, char *why, size_t why_size)
{
    if (strcmp(v, "true") == 0)
        *ret = true;
    else if (strcmp(v, "false") == 0)
        *ret = false;
    else {
        snprintf(why, why_size, "not true or false");
        return -1;
    }
    return 0;
}

int ws_policy_set_key(struct ws_policy_set *s, const char *tenant, const char *key,
                      const char *value, char *why, size_t why_size)
{
    struct ws_policy_list l = {0}, *dst = NULL;
    struct ws_policy *p;
    int k;

    for (k = 0; k < WS_POLICY_KEYS; k++)
        if (strcmp(key, key_names[k]) == 0)
            break;
    if (k == WS_POLICY_KEYS) {
        snprintf(why, why_size, "unknown key");
        return -1;
    }
    if (tenant && !ws_policy_tenant_valid(tenant)) {
        snprintf(why, why_size, "not a valid tenant name");
        return -1;
    }
    p = tenant ? tenant_policy(s, tenant, true) : &s->def;
    if (!p) {
        snprintf(why, why_size, "too many tenants (at most %d)", TENANTS_MAX);
        return -1;
    }
    switch (k) {
    case WS_POLICY_PROVIDERS: {
        unsigned mask = 0;
        if (list_parse(value, provider_entry, &l, why, why_size) < 0)
            return -1;
        for (size_t i = 0; i < l.n; i++)
            mask |= 1u << ws_provider_kind_by_name(l.v[i]);
        list_free(&l);
        p->providers = mask;
        break;
    }
    case WS_POLICY_NETWORK:
        if (parse_bool(value, &p->network, why, why_size) < 0)
            return -1;
        break;
    case WS_POLICY_DOCKER_PULL:
        if (parse_bool(value, &p->docker_pull, why, why_size) < 0)
            return -1;
        break;
    case WS_POLICY_ADDRESS_SPACE: {
        uint32_t v;
        if (!id_part(value, strlen(value), &v) || v > WS_POLICY_ADDRESS_SPACE_MAX) {
            snprintf(why, why_size, "not a number of MiB from 0 to %u",
                     WS_POLICY_ADDRESS_SPACE_MAX);
            return -1;
        }
        p->address_space_mb = v;
        break;
    }
    case WS_POLICY_BIND_ROOTS:
        if (list_parse(value, bind_root_entry, &l, why, why_size) < 0)
            return -1;
        dst = &p->bind_roots;
        break;
    case WS_POLICY_PASS_ENV:
        if (list_parse(value, env_name_entry, &l, why, why_size) < 0)
            return -1;
        dst = &p->pass_env;
        break;
    case WS_POLICY_COMMANDS:
        if (list_parse(value, command_entry, &l, why, why_size) < 0)
            return -1;
        dst = &p->commands;
        p->commands_ceiling = true;
        break;
    case WS_POLICY_DOCKER_IMAGES:
        if (list_parse(value, image_entry, &l, why, why_size) < 0)
            return -1;
        dst = &p->docker_images;
        break;
    case WS_POLICY_DOCKER_USERS:
        if (list_parse(value, user_entry, &l, why, why_size) < 0)
            return -1;
        dst = &p->docker_users;
        break;
    }
    if (dst) {
        list_free(dst);
        *dst = l;
    }
    p->set |= 1u << k;
    return 0;
}

int ws_policy_set_peer(struct ws_policy_set *s, const char *uid, const char *tenant, char *why,
                       size_t why_size)
{
    uint32_t v;

    if (!id_part(uid, strlen(uid), &v)) {
        snprintf(why, why_size, "not a decimal uid");
        return -1;
    }
    if (!ws_policy_tenant_valid(tenant)) {
        snprintf(why, why_size, "not a tenant name ([A-Za-z0-9._-], 1-64 characters)");
        return -1;
    }
    for (size_t i = 0; i < s->n_peers; i++)
        if (s->peers[i].uid == v) {
            snprintf(why, why_size, "uid %u is mapped twice", v);
            return -1;
        }
    if (s->n_peers == PEERS_MAX) {
        snprintf(why, why_size, "more than %d peers", PEERS_MAX);
        return -1;
    }
    struct peer *np = realloc(s->peers, (s->n_peers + 1) * sizeof(*np));
    if (!np) {
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    s->peers = np;
    s->peers[s->n_peers].uid = v;
    snprintf(s->peers[s->n_peers].tenant, sizeof(s->peers[s->n_peers].tenant), "%s", tenant);
    s->n_peers++;
    return 0;
}

int ws_policy_set_finish(struct ws_policy_set *s)
{
    const struct ws_policy *d = &s->def;

    for (size_t i = 0; i < s->n_tenants; i++) {
        struct ws_policy *p = s->tenants[i];

        if (!(p->set & 1u << WS_POLICY_PROVIDERS))
            p->providers = d->providers;
        if (!(p->set & 1u << WS_POLICY_NETWORK))
            p->network = d->network;
        if (!(p->set & 1u << WS_POLICY_DOCKER_PULL))
            p->docker_pull = d->docker_pull;
        if (!(p->set & 1u << WS_POLICY_COMMANDS))
            p->commands_ceiling = d->commands_ceiling;
        if (!(p->set & 1u << WS_POLICY_ADDRESS_SPACE))
            p->address_space_mb = d->address_space_mb;
        struct {
            int key;
            struct ws_policy_list *dst;
            const struct ws_policy_list *src;
        } lists[] = {
            {WS_POLICY_BIND_ROOTS, &p->bind_roots, &d->bind_roots},
            {WS_POLICY_PASS_ENV, &p->pass_env, &d->pass_env},
            {WS_POLICY_COMMANDS, &p->commands, &d->commands},
            {WS_POLICY_DOCKER_IMAGES, &p->docker_images, &d->docker_images},
            {WS_POLICY_DOCKER_USERS, &p->docker_users, &d->docker_users},
        };
        for (size_t k = 0; k < WS_ELEMENTSOF(lists); k++)
            if (!(p->set & 1u << lists[k].key) && list_copy(lists[k].dst, lists[k].src) < 0)
                return -ENOMEM;
    }
    return 0;
}

const struct ws_policy *ws_policy_for(const struct ws_policy_set *s, const char *tenant)
{
    if (tenant)
        for (size_t i = 0; i < s->n_tenants; i++)
            if (strcmp(s->tenants[i]->tenant, tenant) == 0)
                return s->tenants[i];
    return &s->def;
}

bool ws_policy_peer_tenant(const struct ws_policy_set *s, uid_t uid,
                           char ret[WS_POLICY_TENANT_MAX + 1])
{
    for (size_t i = 0; i < s->n_peers; i++)
        if (s->peers[i].uid == uid) {
            memcpy(ret, s->peers[i].tenant, sizeof(s->peers[i].tenant));
            return true;
        }
    return false;
}

/* ---- enforcement ---- */

static int refuse(struct ws_diag *d, enum ws_policy_key k, const char *item_key, const char *item)
{
    ws_diag_meta(d, "rule", "%s", key_names[k]);
    ws_diag_meta(d, item_key, "%s", item);
    return -WS_EPOLICY;
}

/* Whether one of two canonical paths contains the other. */
static bool paths_overlap(const char *a, const char *b)
{
    return path_under(a, b) || path_under(b, a);
}

static int check_binds(const struct ws_policy *p, size_t n, char **paths, const char *what,
                       const char *const *own, size_t n_own, struct ws_diag *d)
{
    for (size_t i = 0; i < n; i++) {
        const char *path = paths[i];
        const char *tree = forbidden_tree(path);
        struct stat st;

        if (tree) {
            ws_diag_set(d,
                        "policy rule bind-roots: %s[%zu] \"%s\" is %s%s, which is never bound "
                        "into a sandbox",
                        what, i, path, strcmp(tree, path) == 0 ? "" : "under ", tree);
            return refuse(d, WS_POLICY_BIND_ROOTS, "path", path);
        }
        for (size_t k = 0; k < n_own; k++)
            if (own[k] && paths_overlap(path, own[k])) {
                ws_diag_set(d,
                            "policy rule bind-roots: %s[%zu] \"%s\" overlaps the server's own "
                            "directories, which are never bound into a sandbox",
                            what, i, path);
                return refuse(d, WS_POLICY_BIND_ROOTS, "path", path);
            }
        /* The path is canonical, so lstat sees what bwrap would bind. A
         * socket or device would hand the sandbox a host service or the
         * hardware; a FIFO would block it. */
        if (lstat(path, &st) < 0 || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))) {
            ws_diag_set(d,
                        "policy rule bind-roots: %s[%zu] \"%s\" is a socket, device or FIFO; only "
                        "directories and regular files are bound",
                        what, i, path);
            return refuse(d, WS_POLICY_BIND_ROOTS, "path", path);
        }
        bool under = false;
        for (size_t r = 0; r < p->bind_roots.n && !under; r++)
            under = path_under(path, p->bind_roots.v[r]);
        if (!under) {
            ws_diag_set(d,
                        "policy rule bind-roots: %s[%zu] \"%s\" is not under a bind root of "
                        "this tenant's policy",
                        what, i, path);
            return refuse(d, WS_POLICY_BIND_ROOTS, "path", path);
        }
    }
    return 0;
}

static int check_shell(const struct ws_policy *p, const Workspace__V1__ShellCapability *sh,
                       struct ws_diag *d)
{
    for (size_t i = 0; i < sh->n_pass_env; i++)
        if (!list_has(&p->pass_env, sh->pass_env[i])) {
            ws_diag_set(d,
                        "policy rule pass-env: pass_env names \"%.64s\", which this tenant's "
                        "policy does not list",
                        sh->pass_env[i]);
            return refuse(d, WS_POLICY_PASS_ENV, "name", sh->pass_env[i]);
        }
    if (!p->commands_ceiling)
        return 0;
    for (size_t i = 0; i < sh->n_allowed_commands; i++)
        if (!list_has(&p->commands, sh->allowed_commands[i])) {
            ws_diag_set(d,
                        "policy rule commands: allowed_commands names \"%.64s\", outside this "
                        "tenant's command ceiling",
                        sh->allowed_commands[i]);
            return refuse(d, WS_POLICY_COMMANDS, "command", sh->allowed_commands[i]);
        }
    return 0;
}

static int check_docker(const struct ws_policy *p, const Workspace__V1__DockerConfig *c,
                        const char *image, struct ws_diag *d)
{
    bool match = false;

    for (size_t i = 0; i < p->docker_images.n && !match; i++)
        match = fnmatch(p->docker_images.v[i], image, 0) == 0;
    if (!match) {
        ws_diag_set(d,
                    "policy rule docker-images: image \"%.128s\" matches none of this tenant's "
                    "image patterns",
                    image);
        return refuse(d, WS_POLICY_DOCKER_IMAGES, "image", image);
    }
    if (c->user && c->user[0]) {
        uint32_t uid, gid;
        bool ok = false;

        if (user_parse(c->user, &uid, &gid))
            for (size_t i = 0; i < p->docker_users.n && !ok; i++) {
                uint32_t pu, pg;
                ok = user_parse(p->docker_users.v[i], &pu, &pg) && pu == uid && pg == gid;
            }
        if (!ok) {
            ws_diag_set(d,
                        "policy rule docker-users: user \"%.32s\" is not one this tenant's "
                        "policy lists",
                        c->user);
            return refuse(d, WS_POLICY_DOCKER_USERS, "user", c->user);
        }
    }
    /* The API's two policies both mean "never contact a registry unless
     * the image is missing"; any other value asks for more than that. */
    if (!p->docker_pull && c->pull_policy != WORKSPACE__V1__PULL_POLICY__PULL_IF_NOT_PRESENT &&
        c->pull_policy != WORKSPACE__V1__PULL_POLICY__PULL_NEVER) {
        ws_diag_set(d,
                    "policy rule docker-pull: image \"%.128s\" with a pull policy that may pull; "
                    "this tenant's policy allows no pulls",
                    image);
        ws_diag_meta(d, "rule", "%s", key_names[WS_POLICY_DOCKER_PULL]);
        ws_diag_meta(d, "image", "%s", image);
        return -WS_EPOLICY;
    }
    return 0;
}

int ws_policy_check_open(const struct ws_policy *p, const Workspace__V1__OpenRequest *req,
                         const char *image, const char *const *own, size_t n_own, struct ws_diag *d)
{
    int kind = ws_provider_kind_of_request(req);
    Workspace__V1__Network net = WORKSPACE__V1__NETWORK__NETWORK_OFF;
    const char *name;
    int err;

    if (kind < 0) {
        ws_diag_set(d, "exactly one provider config is required");
        return -WS_EMALFORMED;
    }
    name = ws_provider_kind_name(kind);
    if (kind == WS_PROVIDER_LOCAL_SANDBOX)
        net = req->local_sandbox->network;
    else if (kind == WS_PROVIDER_DOCKER)
        net = req->docker->network;
    if (!(p->providers & 1u << kind)) {
        ws_diag_set(d, "policy rule providers: provider %s is not allowed for this tenant", name);
        return refuse(d, WS_POLICY_PROVIDERS, "provider", name);
    }
    if (net != WORKSPACE__V1__NETWORK__NETWORK_OFF && !p->network) {
        ws_diag_set(d, "policy rule network: this tenant's policy allows no network (%s)", name);
        return refuse(d, WS_POLICY_NETWORK, "provider", name);
    }
    if (kind == WS_PROVIDER_LOCAL_SANDBOX) {
        const Workspace__V1__LocalSandboxConfig *c = req->local_sandbox;

        err = check_binds(p, c->n_read_write_paths, c->read_write_paths, "read_write_paths", own,
                          n_own, d);
        if (err == 0)
            err = check_binds(p, c->n_read_only_paths, c->read_only_paths, "read_only_paths", own,
                              n_own, d);
        if (err < 0)
            return err;
    }
    if (kind == WS_PROVIDER_LOCAL_BASH && p->address_space_mb &&
        req->local_bash->address_space_mb > p->address_space_mb) {
        char asked[16];

        ws_diag_set(d,
                    "policy rule address-space-mb: %u MiB of address space asked; this tenant's "
                    "policy allows at most %u",
                    req->local_bash->address_space_mb, p->address_space_mb);
        ws_diag_meta(d, "limit", "%u", p->address_space_mb);
        snprintf(asked, sizeof(asked), "%u", req->local_bash->address_space_mb);
        return refuse(d, WS_POLICY_ADDRESS_SPACE, "address_space_mb", asked);
    }
    if (req->capabilities && req->capabilities->shell) {
        err = check_shell(p, req->capabilities->shell, d);
        if (err < 0)
            return err;
    }
    if (kind == WS_PROVIDER_DOCKER)
        return check_docker(p, req->docker, image ? image : "", d);
    return 0;
}

/* ---- Describe / ListProviders ---- */

void ws_policy_to_proto(const struct ws_policy *p, unsigned enabled, Workspace__V1__Policy *out,
                        char **names)
{
    size_t n = 0;

    workspace__v1__policy__init(out);
    out->tenant = (char *)(p->tenant[0] ? p->tenant : "");
    for (int k = 0; k < WS_PROVIDER_COUNT; k++)
        if ((p->providers & 1u << k) && (!enabled || (enabled & 1u << k)))
            names[n++] = (char *)ws_provider_kind_name((enum ws_provider_kind)k);
    out->providers = names;
    out->n_providers = n;
    out->network = p->network;
    out->bind_roots = p->bind_roots.v;
    out->n_bind_roots = p->bind_roots.n;
    out->pass_env = p->pass_env.v;
    out->n_pass_env = p->pass_env.n;
    out->commands_ceiling = p->commands_ceiling;
    out->commands = p->commands.v;
    out->n_commands = p->commands.n;
    out->docker_images = p->docker_images.v;
    out->n_docker_images = p->docker_images.n;
    out->docker_pull = p->docker_pull;
    out->docker_users = p->docker_users.v;
    out->n_docker_users = p->docker_users.n;
    out->address_space_mb = p->address_space_mb;
}
