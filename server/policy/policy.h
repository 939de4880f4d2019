/* The operator's policy: what each tenant may ask of an Open.
 *
 * A policy set holds the default policy (the configuration file's
 * [policy] section and the --policy-* flags) and one policy per tenant
 * ([policy.TENANT]; a key it does not set comes from [policy]). Keys:
 *
 *   providers      kinds the tenant may open (memory, local-bash,
 *                  local-sandbox, docker) [memory, local-sandbox, docker]
 *   network        whether an Open may ask NETWORK_ALLOW [false]
 *   bind-roots     absolute canonical directories a local-sandbox bind
 *                  must be or be under [none]
 *   pass-env       environment names a shell capability's pass_env may
 *                  name [none]
 *   commands       ceiling on allowed_commands, compared as given [none:
 *                  no ceiling]
 *   docker-images  fnmatch patterns a docker image must match [*]
 *   docker-pull    whether a missing image may be pulled [false]
 *   docker-users   "uid:gid" values a docker Open may ask for, neither 0
 *                  [none: only the server's default user]
 *   address-space-mb
 *                  ceiling on and default of each local-bash command
 *                  process's RLIMIT_AS, in MiB [0: none]
 *
 * Some binds are refused whatever the roots say: "/" itself, /proc, /sys,
 * /dev, /run, /etc, /boot, /root and everything under them, the server's
 * own directories (state directory, workspace root), and a path that is a
 * socket, a device or a FIFO.
 *
 * The set also holds the [peers] map (decimal uid = tenant) that names the
 * tenant of a caller on a unix socket; it is parsed, checked and reloaded
 * with the policy so one SIGHUP swaps both.
 *
 * A set is built on one thread (ws_policy_set_key, _peer, then _finish)
 * and is immutable after ws_policy_set_finish: readers on any thread hold
 * a reference (ws_policy_set_ref / _unref) for as long as they use it, so
 * a reload that swaps sets never changes one under an Open in flight.
 */
#ifndef WS_POLICY_POLICY_H
#define WS_POLICY_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "server/base/errors.h"
#include "workspace/v1/providers.pb-c.h"
#include "workspace/v1/workspaces.pb-c.h"

/* Longest tenant name (as the tokens file and [policy.TENANT] allow). */
#define WS_POLICY_TENANT_MAX 64
/* The largest address-space-mb: 16 TiB, beyond any host's memory. */
#define WS_POLICY_ADDRESS_SPACE_MAX (16u << 20)
/* Most entries of one list key, and the longest entry. */
#define WS_POLICY_LIST_MAX  256
#define WS_POLICY_ENTRY_MAX 1024

/* The keys, as bits of struct ws_policy's `set`. */
enum ws_policy_key {
    WS_POLICY_PROVIDERS,
    WS_POLICY_NETWORK,
    WS_POLICY_BIND_ROOTS,
    WS_POLICY_PASS_ENV,
    WS_POLICY_COMMANDS,
    WS_POLICY_DOCKER_IMAGES,
    WS_POLICY_DOCKER_PULL,
    WS_POLICY_DOCKER_USERS,
    WS_POLICY_ADDRESS_SPACE,
    WS_POLICY_KEYS,
};

/* The name of key k ("bind-roots"), as in the file and in the `rule`
 * metadata of a refusal. */
const char *ws_policy_key_name(enum ws_policy_key k);

struct ws_policy_list {
    char **v;
    size_t n;
};

/* One tenant's effective policy (after ws_policy_set_finish). */
struct ws_policy {
    char tenant[WS_POLICY_TENANT_MAX + 1]; /* "" for the default */
    unsigned set;                          /* 1 << key: set in its own section */
    unsigned providers;                    /* 1 << WS_PROVIDER_* */
    bool network;
    struct ws_policy_list bind_roots;
    struct ws_policy_list pass_env;
    bool commands_ceiling; /* false: allowed_commands is not limited */
    struct ws_policy_list commands;
    struct ws_policy_list docker_images;
    bool docker_pull;
    struct ws_policy_list docker_users;
    uint32_t address_space_mb; /* 0: none */
};

struct ws_policy_set;

/* A set with the default policy's defaults and no tenant. */
int ws_policy_set_new(struct ws_policy_set **ret);
struct ws_policy_set *ws_policy_set_ref(struct ws_policy_set *s);
/* Accepts NULL. */
void ws_policy_set_unref(struct ws_policy_set *s);

/* Sets `key` = `value` (the file's text; a switch takes "true" or
 * "false") in the default policy (tenant NULL) or the tenant's. A key set
 * again replaces the earlier value (a flag after the file). Returns 0, or
 * -1 with why the value is refused in why[0..why_size). */
int ws_policy_set_key(struct ws_policy_set *s, const char *tenant, const char *key,
                      const char *value, char *why, size_t why_size);

/* [peers]: `uid` (decimal) is tenant `tenant`. Returns 0 or -1 with why. */
int ws_policy_set_peer(struct ws_policy_set *s, const char *uid, const char *tenant, char *why,
                       size_t why_size);

/* Fills every tenant's unset keys from the default policy. Returns 0 or
 * -ENOMEM. */
int ws_policy_set_finish(struct ws_policy_set *s);

/* The policy of `tenant` (NULL or unknown: the default); valid while the
 * set is referenced. */
const struct ws_policy *ws_policy_for(const struct ws_policy_set *s, const char *tenant);

/* [peers]: the tenant mapped to uid into ret; false when none is. */
bool ws_policy_peer_tenant(const struct ws_policy_set *s, uid_t uid,
                           char ret[WS_POLICY_TENANT_MAX + 1]);

/* Whether a tenant name is valid: [A-Za-z0-9._-], 1-64 bytes. */
bool ws_policy_tenant_valid(const char *s);

/* Checks an Open against policy p, after the request's own checks (one
 * provider config, canonical existing bind paths): the provider, the
 * network, every bind (own[0..n_own): the server's canonical state
 * directory and workspace root), pass_env, allowed_commands, and for
 * docker the image (`image`: the effective one, the server's default
 * filled in), the user and the pull policy, and for local-bash the
 * address space. Returns 0 or -WS_EPOLICY with metadata rule=<key> and
 * the refused item (provider, path, name, command, image, user or
 * limit). */
int ws_policy_check_open(const struct ws_policy *p, const Workspace__V1__OpenRequest *req,
                         const char *image, const char *const *own, size_t n_own,
                         struct ws_diag *d);

/* Fills `out` from p (strings and arrays point into p, which must outlive
 * the message); `enabled` is the server-wide provider mask (0: all), so
 * the providers shown are the ones the tenant can open. `names` has room
 * for WS_PROVIDER_COUNT pointers. */
void ws_policy_to_proto(const struct ws_policy *p, unsigned enabled, Workspace__V1__Policy *out,
                        char **names);

#endif
