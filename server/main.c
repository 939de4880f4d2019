/* workspaced: flags and the configuration file, signals, the graceful
 * drain and the process's exit. The server itself is built and torn down
 * by server/app.c. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "server/app.h"
#include "server/base/macros.h"
#include "server/base/time.h"
#include "server/base/version.h"
#include "server/conf/conf.h"
#include "server/docker/api.h"
#include "server/docker/endpoint.h"
#include "server/exec/exec.h"
#include "server/metrics/http.h"
#include "server/policy/policy.h"
#include "server/providers/probe.h"
#include "server/providers/provider.h"
#include "server/registry/memquota.h"
#include "server/registry/registry.h"
#include "server/rpc/call.h"
#include "server/rpc/listen.h"
#include "server/rpc/log.h"
#include "server/rpc/services/services.h"
#include "server/work/pool.h"

#define DEFAULT_LISTEN   WS_LISTEN_DEFAULT
#define DEFAULT_GRACE_MS 10000
/* A workspace nobody uses for a day is taken back: an agent that crashed
 * leaks nothing for longer. */
#define DEFAULT_IDLE_MS (24LL * 3600 * 1000)
/* gRPC message ceiling: a 4 MiB chunk plus its envelope. */
#define MAX_MESSAGE_DEFAULT (4 * 1024 * 1024 + 64 * 1024)
#define MAX_MESSAGE_MIN     (64 * 1024)
#define MAX_MESSAGE_MAX     (64 * 1024 * 1024)

/* Every setting, by the id of its flag. Settings come from flags and from
 * the configuration file alike: `settings` below maps each id to its flag,
 * its section.key and what its value may be, and apply() is the one place
 * a value is checked. A new setting is an id here and a row there, plus a
 * check function when the row's fields cannot say what it accepts. */
enum {
    LISTEN = 256,
    STATE,
    ROOT,
    MAXWS,
    MAXSIZE,
    MEMBYTES,
    THREADS,
    GRACE,
    KILLGRACE,
    KEEPALIVE,
    EXECPATH,
    CONTAIN,
    TOKENS,
    TLSCERT,
    TLSKEY,
    TLSCA,
    PLAINTEXT,
    INSECURE_LOOPBACK,
    TENANTWS,
    TENANTOPENS,
    TENANTCMDS,
    TENANTBYTES,
    TENANTMEM,
    TENANTRETAINED,
    TENANTSTREAMS,
    FINISHEDTTL,
    MAXLIFE,
    IDLE,
    METRICS,
    METRICS_REMOTE,
    MAXMSG,
    MAXSTREAMS,
    MEMQUOTA,
    SENDBUF,
    MAXCONNS,
    PROVIDERS,
    BWRAP,
    DOCKERHOST,
    DOCKERIMAGE,
    WORK_FS,
    WORK_DAEMON,
    WORK_RUNNING,
    WORK_QUEUED,
    UIDS_MODE,
    UIDS_RANGE,
    ROOT_COMMANDS,
    /* The default policy ([policy]); see server/policy/policy.h. */
    POL_PROVIDERS,
    POL_NETWORK,
    POL_BINDROOTS,
    POL_PASSENV,
    POL_COMMANDS,
    POL_IMAGES,
    POL_PULL,
    POL_USERS,
    POL_ADDRESS_SPACE,
    /* Snapshots and shadow workspaces. */
    SOURCE_ALLOW,
    MAXSNAPS,
    MAXWATCHES,
    MAXWATCHES_WS,
    SETTINGS_END,
    /* Flags that are not settings. */
    CONFIG = SETTINGS_END,
    CHECKCONFIG,
    HELP,
    VERSION_FLAG
};
#define N_SETTINGS (SETTINGS_END - LISTEN)

/* The file's sections, in the order the example and the README use.
 * "policy." admits one [policy.TENANT] section per tenant. */
static const char *const conf_sections[] = {
    "server",    "auth",   "tls",       "limits",        "quotas", "exec",
    "work",      "uids",   "providers", "local-sandbox", "docker", "metrics",
    "transport", "policy", "policy.",   "peers",         NULL,
};

/* Values of source-path-allow (flags and the file's key) one start takes. */
#define SOURCE_ALLOW_VALUES_MAX 32

/* What the flags and the file set. Every number is a long long, whatever
 * the type of the configuration it ends in: apply() stores them all one
 * way, and each row's range fits the type main() narrows it to. */
struct options {
    const char *listen;
    const char *state_dir;
    const char *workspace_root;
    long long max_workspaces;
    long long max_file_size;
    long long memory_max_bytes;
    long long threads;
    long long grace_ms;
    long long kill_grace_ms; /* -1: no grace */
    long long keepalive_ms;  /* -1: no keepalive */
    const char *exec_path;
    bool force_subreaper;
    /* Workspace uids ([uids]): auto, on or off; the range ({0, 0}: the
     * default); whether commands may run as root when they are off. */
    enum ws_uids_mode uids_mode;
    struct ws_uid_range uid_range;
    bool allow_root_commands;
    const char *tokens_file;
    const char *tls_cert;
    const char *tls_key;
    const char *tls_client_ca;
    bool allow_plaintext;
    bool insecure_loopback;
    long long tenant_max_workspaces;
    long long tenant_opens_per_minute;
    long long tenant_max_commands;
    long long tenant_max_bytes;
    long long tenant_memory_bytes;
    long long tenant_retained_bytes;
    long long tenant_max_streams;
    /* How long a finished command's output is kept (-1: for ever). */
    long long finished_output_ttl_ms;
    /* Workspace lifetimes: the cap, and the idle timeout of one that asks
     * none (0: none). */
    long long max_lifetime_ms;
    long long default_idle_ms;
    /* The file named [peers] (at start): callers on a unix socket are
     * then told apart as tenants. */
    bool peers_given;
    /* Observability and transport limits. */
    const char *metrics_listen;
    bool metrics_allow_remote;
    long long max_message_bytes;
    long long max_streams;
    long long memory_quota_bytes;
    long long max_send_buffer_bytes;
    long long max_connections; /* 0: half the open-file limit */
    /* The worker pool: -1 is the default (the lane's threads: one per CPU,
     * or WS_APP_DAEMON_THREADS), 0 an inline lane. */
    long long work_fs_threads;
    long long work_daemon_threads;
    long long work_tenant_running;
    long long work_tenant_queued;
    /* Providers: which may be opened (1 << WS_PROVIDER_*; 0: all), where
     * their backends are, the docker image an Open gets when it names
     * none. */
    unsigned providers;
    const char *bwrap;
    const char *docker_host;
    const char *docker_image;
    /* The policy sections and flags, and the [peers] map (built here,
     * finished and handed to the registry at start; built again on
     * SIGHUP). */
    struct ws_policy_set *policy;
    char policy_why[256];
    /* The configuration file, and the line each setting came from there
     * (0: a default or a flag); cross-option errors name that line. */
    const char *conf_path;
    unsigned line[N_SETTINGS];
    /* Snapshots a tenant may hold (0: the registry's default), and the
     * values that name the host directories an Open's from_path may copy
     * (each a comma-separated list, checked; the file's and the flags'
     * add up). */
    long long max_snapshots;
    /* FileSystem.Watch calls at once: the server's, one workspace's (0:
     * the defaults). */
    long long max_watches, max_watches_ws;
    const char *source_allow[SOURCE_ALLOW_VALUES_MAX];
    size_t n_source_allow;
};

/* What a setting's value is, and so how apply() reads it and which type
 * its field in struct options has. */
enum setting_kind {
    /* Any text but the empty one, kept by reference: a const char *. */
    STRING,
    /* A flag without argument; in the file, true or false: a bool. */
    SWITCH,
    /* A decimal number in min..max: a long long. */
    NUMBER,
};

struct setting {
    int id;
    const char *flag;
    const char *section;
    const char *key;
    enum setting_kind kind;
    /* Where the value goes: FIELD(name) of struct options, of the kind's
     * type. Unused when set() stores the value. */
    size_t field;
    /* NUMBER: the range. With zero_is_none, 0 also passes and is stored
     * as -1: "none", where the consumer's 0 would be its default. */
    unsigned long long min, max;
    bool zero_is_none;
    /* STRING: a test the text must pass (NULL: none). */
    bool (*valid)(const char *v);
    /* Stores a value that has no field of its own kind, or that another
     * module keeps; a switch's gets "true" or "false". Returns NULL, or
     * why the value is refused. */
    const char *(*set)(struct options *o, const struct setting *s, const char *v);
    /* Why a value is refused: out of range, not valid(), or set()'s own
     * reason when it has a fixed one. */
    const char *refused;
};

#define FIELD(name) offsetof(struct options, name)
/* A per-tenant quota the flags and the file left alone (default_quotas). */
#define QUOTA_NOT_GIVEN (-2)

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: workspaced [--config FILE] [options]\n"
        "       workspaced --check-config FILE [options]\n"
        "       workspaced --version\n"
        "  --config FILE          read settings from FILE first; flags override it\n"
        "                         (the file's keys are in the README's Configuration section)\n"
        "  --check-config FILE    check FILE (and the flags with it) as a start would, start\n"
        "                         nothing: exit 0, or 2 with 'config: FILE:LINE: key ...: why'\n"
        "  --listen ADDR          unix:PATH or host:port [" DEFAULT_LISTEN "];\n"
        "                         on a unix socket (0660, group workspaced when it exists)\n"
        "                         a caller's tenant is its uid's in [peers] (root and\n"
        "                         the server's own uid: default); a TCP address, loopback\n"
        "                         included, needs --tokens-file or --tls-client-ca, and a\n"
        "                         non-loopback one TLS or --allow-plaintext\n"
        "  --insecure-loopback    development only: let a loopback TCP address serve\n"
        "                         without authentication (refused as root; logs a\n"
        "                         warning every minute)\n"
        "  --tokens-file PATH     bearer tokens, 'TENANT SHA256HEX' lines; re-read on SIGHUP\n"
        "  --tls-cert FILE --tls-key FILE  serve TLS (PEM)\n"
        "  --tls-client-ca FILE   require client certificates signed by this CA (mTLS);\n"
        "                         the certificate's CN is the tenant when no token is sent\n"
        "  --allow-plaintext      allow a non-loopback address without TLS\n"
        "Per-tenant quotas (0: no quota). A quota not given is none without\n"
        "authentication, and the second default when callers are told apart as\n"
        "tenants (a tokens file, a client CA, or [peers] on a unix socket):\n"
        "  --tenant-max-workspaces N   open workspaces per tenant [0; %u]\n"
        "  --tenant-opens-per-minute N Opens per tenant and minute [0; %u]\n"
        "  --tenant-max-commands N     running commands per tenant [0; %u]\n"
        "  --tenant-max-bytes BYTES    bytes of files in a tenant's workspaces [0; %llu]\n"
        "  --tenant-memory-bytes BYTES what a tenant's memory workspaces hold together, each\n"
        "                         file and directory counted as %u bytes plus its name\n"
        "                         on top of its contents [0; %llu]\n"
        "  --tenant-retained-output-bytes BYTES  output kept of a tenant's finished\n"
        "                         commands (the oldest is freed first past it) [0; %llu]\n"
        "  --tenant-max-streams N  streaming calls (ReadFile, Grep, Exec, Attach, ...) a\n"
        "                         tenant holds open at once over all its connections;\n"
        "                         it also bounds the files its streams hold open [0; %u]\n"
        "  --finished-output-ttl-ms MS  a finished command's output is freed this long\n"
        "                         after it ended, 0: kept until pushed out [%d]\n"
        "  --state-dir DIR        refs key, workspace records (created 0700) [required]\n"
        "  --workspace-root DIR   per-workspace directories [STATE_DIR/workspaces]\n"
        "  --max-workspaces N     cap on open workspaces [%d]\n"
        "  --max-lifetime-ms MS   no workspace lives longer than this from its Open; one\n"
        "                         that asks no ttl gets it (0: no cap) [0]\n"
        "  --default-idle-timeout-ms MS  a workspace that asks no idle timeout expires\n"
        "                         after this long without a call, a command or a stream\n"
        "                         (0: never) [%lld]\n"
        "  --max-file-size BYTES  default and ceiling of a workspace's file size cap [%llu]\n"
        "  --memory-workspace-bytes BYTES  what one memory workspace may hold [%llu]\n"
        "  --max-snapshots N      snapshots one tenant may hold [100]\n"
        "  --max-watches N        FileSystem.Watch calls at once, the whole server; each\n"
        "                         is an inotify instance (the kernel's\n"
        "                         fs.inotify.max_user_instances bounds it too) [100]\n"
        "  --max-watches-per-workspace N  Watch calls at once on one workspace [16]\n"
        "  --source-path-allow DIR  a host directory an Open's from_path may copy (it or\n"
        "                         below it); absolute and canonical, repeatable [none]\n"
        "  --threads N            completion-queue threads [number of CPUs]\n"
        "  --drain-grace-ms MS    how long in-flight calls may finish on SIGTERM [%d]\n"
        "  --kill-grace-ms MS     SIGTERM-to-SIGKILL grace when a command is ended [%d]\n"
        "  --keepalive-ms MS      ping interval and ping timeout: a client gone without\n"
        "                         closing its connection is dropped (and its commands\n"
        "                         killed) after about twice this; 0 disables [%d]\n"
        "  --exec-path DIRS       where commands are looked up, and their PATH\n"
        "                         [" WS_SERVICES_EXEC_PATH_DEFAULT "]\n"
        "  --process-containment auto|subreaper\n"
        "                         how a command's whole tree is ended: a cgroup per\n"
        "                         command where possible (auto), or the subreaper sweep [auto]\n"
        "  --workspace-uids auto|on|off\n"
        "                         a host uid of its own per workspace, its files and its\n"
        "                         commands' (auto: where the server can, as root) [auto]\n"
        "  --workspace-uid-range FIRST-LAST\n"
        "                         the uids workspaces get; FIRST is the helper uid\n"
        "                         [%u-%u]\n"
        "  --allow-root-commands  let commands run as root when workspace uids are off\n"
        "                         or cannot be used (unsafe)\n"
        "  --providers LIST       providers an Open may name, comma-separated, from memory,\n"
        "                         local-bash, local-sandbox, docker [all]\n"
        "  --bwrap PATH           the bubblewrap binary for local-sandbox (no search)\n"
        "                         [$WORKSPACED_BWRAP, else /usr/bin/bwrap, ..., $PATH]\n"
        "  --docker-host URL      the Docker daemon, unix://PATH or tcp://HOST[:PORT]\n"
        "                         [$DOCKER_HOST, else unix:///var/run/docker.sock]\n"
        "  --docker-default-image IMAGE  the image of a docker Open that names none [none]\n"
        "  --metrics-listen ADDR  serve GET /metrics (Prometheus text) on host:port,\n"
        "                         loopback only unless --metrics-allow-remote [off]\n"
        "  --metrics-allow-remote let --metrics-listen bind a non-loopback address\n"
        "  --max-message-bytes N  largest gRPC message either way [%d]\n"
        "  --max-streams-per-connection N  concurrent calls one connection may hold [%d]\n"
        "  --memory-quota-bytes N memory gRPC's transport may use in all [%lld]\n"
        "  --max-send-buffer-bytes N  responses waiting for clients that do not read;\n"
        "                         past it the calls waiting longest are cancelled [%lld]\n"
        "  --max-connections N    connections open at once; more are closed on accept\n"
        "                         [half the open-file limit, at least 64]\n"
        "Slow work (walks, searches, hashing, container daemon calls) runs on a pool,\n"
        "off the RPC threads:\n"
        "  --work-fs-threads N    threads for walks, searches and hashing, at nice +10;\n"
        "                         0 runs them on the RPC threads [number of CPUs]\n"
        "  --work-daemon-threads N  threads for container daemon calls; 0 runs them on\n"
        "                         the RPC threads [%d]\n"
        "  --work-tenant-running N  jobs of one tenant running at once in a lane, 0: the\n"
        "                         default [FS: half its threads, daemon: %d; without\n"
        "                         authentication the whole lane]\n"
        "  --work-tenant-queued N jobs of one tenant waiting in a lane; one more is\n"
        "                         RESOURCE_EXHAUSTED / QUOTA, 0: the default [%d; %d\n"
        "                         without authentication]\n"
        "Default policy (the file's [policy]; [policy.TENANT] overrides it per tenant;\n"
        "lists are comma-separated, 'none' for an empty one; re-read on SIGHUP):\n"
        "  --policy-providers LIST    kinds a tenant may open [memory,local-sandbox,docker]\n"
        "  --policy-network           an Open may ask NETWORK_ALLOW\n"
        "  --policy-bind-roots DIRS   absolute canonical directories local-sandbox binds must\n"
        "                             be or be under [none]\n"
        "  --policy-pass-env NAMES    environment names pass_env may name [none]\n"
        "  --policy-commands LIST     ceiling on allowed_commands, names or absolute paths\n"
        "                             [no ceiling]\n"
        "  --policy-docker-images PATTERNS  fnmatch patterns a docker image must match [*]\n"
        "  --policy-docker-pull       the server may pull a missing image\n"
        "  --policy-docker-users LIST uid:gid values a docker Open may ask for, neither 0\n"
        "                             [none: only the server's default user]\n"
        "  --policy-address-space-mb N  ceiling on and default of each local-bash command\n"
        "                             process's virtual memory (RLIMIT_AS), MiB [0: none]\n"
        "Precedence: a flag, then the environment (WORKSPACED_BWRAP, DOCKER_HOST), then\n"
        "the configuration file, then the default.\n",
        WS_APP_AUTH_TENANT_WORKSPACES, WS_APP_AUTH_TENANT_OPENS_PER_MINUTE,
        WS_APP_AUTH_TENANT_COMMANDS, (unsigned long long)WS_APP_AUTH_TENANT_BYTES,
        WS_MEMQUOTA_ENTRY_COST, (unsigned long long)WS_APP_AUTH_TENANT_MEMORY_BYTES,
        (unsigned long long)WS_APP_AUTH_TENANT_RETAINED_BYTES, WS_APP_AUTH_TENANT_STREAMS,
        WS_EXEC_FINISHED_TTL_MS_DEFAULT, WS_DEFAULT_MAX_WORKSPACES, DEFAULT_IDLE_MS,
        (unsigned long long)WS_DEFAULT_MAX_FILE_SIZE,
        (unsigned long long)WS_DEFAULT_MEMORY_MAX_BYTES, DEFAULT_GRACE_MS, WS_EXEC_GRACE_MS_DEFAULT,
        WS_RPC_KEEPALIVE_MS_DEFAULT, WS_UIDS_DEFAULT_FIRST, WS_UIDS_DEFAULT_LAST,
        MAX_MESSAGE_DEFAULT, WS_RPC_MAX_STREAMS_DEFAULT, WS_RPC_MEMORY_QUOTA_DEFAULT,
        WS_RPC_SEND_BUFFER_DEFAULT, WS_APP_DAEMON_THREADS, WS_APP_DAEMON_TENANT_RUNNING,
        WS_POOL_DEFAULT_TENANT_QUEUED, WS_APP_SHARED_TENANT_QUEUED);
}

static bool parse_ull(const char *s, unsigned long long max, unsigned long long *ret)
{
    char *end;
    unsigned long long v;

    if (!s || !*s || *s == '-')
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end || v > max)
        return false;
    *ret = v;
    return true;
}

/* A TCP address must end in ":PORT" with PORT a decimal number in
 * 0..65535 (0: the kernel picks one). gRPC reads the port with atoi and
 * keeps the low 16 bits, so "host:99999" would quietly bind port 34463. */
static bool listen_port_ok(const char *addr)
{
    const char *colon;
    size_t digits;

    if (strncmp(addr, "unix:", 5) == 0)
        return true;
    colon = strrchr(addr, ':');
    if (!colon || colon == addr)
        return false;
    digits = strspn(colon + 1, "0123456789");
    if (digits == 0 || digits > 5 || colon[1 + digits] != '\0')
        return false;
    return strtoul(colon + 1, NULL, 10) <= 65535;
}

/* A comma-separated list of provider names (blanks around each allowed)
 * as a mask of 1 << WS_PROVIDER_*; false when a name is unknown or the
 * list names none. */
static bool parse_providers(const char *v, unsigned *ret)
{
    char buf[256];
    unsigned mask = 0;

    if (strlen(v) >= sizeof(buf))
        return false;
    memcpy(buf, v, strlen(v) + 1);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        t += strspn(t, " \t");
        size_t n = strlen(t);
        while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
            t[--n] = '\0';
        int kind = ws_provider_kind_by_name(t);
        if (kind < 0)
            return false;
        mask |= 1u << kind;
    }
    if (!mask)
        return false;
    *ret = mask;
    return true;
}

/* The tests and setters rows of settings[] name: what a value must be
 * when a range or "any text" does not say it, and where it goes when it
 * has no field of its own kind. */
static bool absolute_path(const char *v)
{
    return v[0] == '/';
}

static bool docker_host_ok(const char *v)
{
    struct ws_docker_http_config dc;

    return ws_docker_http_config_parse(v, NULL, NULL, NULL, &dc) >= 0;
}

/* auto: a cgroup per command where possible; subreaper: the sweep
 * always. */
static const char *set_containment(struct options *o, const struct setting *s, const char *v)
{
    if (strcmp(v, "auto") == 0)
        o->force_subreaper = false;
    else if (strcmp(v, "subreaper") == 0)
        o->force_subreaper = true;
    else
        return s->refused;
    return NULL;
}

static const char *set_uids_mode(struct options *o, const struct setting *s, const char *v)
{
    if (strcmp(v, "auto") == 0)
        o->uids_mode = WS_UIDS_AUTO;
    else if (strcmp(v, "on") == 0)
        o->uids_mode = WS_UIDS_ON;
    else if (strcmp(v, "off") == 0)
        o->uids_mode = WS_UIDS_OFF;
    else
        return s->refused;
    return NULL;
}

static const char *set_uid_range(struct options *o, const struct setting *s, const char *v)
{
    const char *why = NULL;

    (void)s;
    if (ws_uids_parse_range(v, &o->uid_range, &why) < 0)
        return why;
    return NULL;
}

static const char *set_providers(struct options *o, const struct setting *s, const char *v)
{
    if (!parse_providers(v, &o->providers))
        return s->refused;
    return NULL;
}

/* Calls fn for each item of a comma-separated list, blanks around items
 * trimmed; stops at the first non-zero return. */
static int each_item(const char *v, int (*fn)(const char *item, size_t len, void *ud), void *ud)
{
    while (*v) {
        const char *end = strchr(v, ',');
        size_t len = end ? (size_t)(end - v) : strlen(v);
        const char *b = v;
        size_t n = len;
        while (n && (*b == ' ' || *b == '\t'))
            b++, n--;
        while (n && (b[n - 1] == ' ' || b[n - 1] == '\t'))
            n--;
        int r = fn(b, n, ud);
        if (r)
            return r;
        v += len + (end ? 1 : 0);
        if (end && !*v)
            return fn(v, 0, ud);
    }
    return 0;
}

/* An absolute, canonical directory (realpath gives it back unchanged). */
static int canonical_dir(const char *item, size_t len, void *ud)
{
    char path[PATH_MAX], *real;
    struct stat sb;
    bool ok;

    (void)ud;
    if (len == 0 || len >= sizeof(path) || item[0] != '/')
        return 1;
    memcpy(path, item, len);
    path[len] = '\0';
    real = realpath(path, NULL);
    ok = real && strcmp(real, path) == 0 && stat(real, &sb) == 0 && S_ISDIR(sb.st_mode);
    free(real);
    return ok ? 0 : 1;
}

static const char *set_source_allow(struct options *o, const struct setting *s, const char *v)
{
    if (o->n_source_allow == SOURCE_ALLOW_VALUES_MAX)
        return "given too many times";
    if (each_item(v, canonical_dir, NULL) != 0)
        return s->refused;
    o->source_allow[o->n_source_allow++] = v;
    return NULL;
}

struct allow_list {
    char **v;
    size_t n;
};

static int allow_add(const char *item, size_t len, void *ud)
{
    struct allow_list *l = ud;
    char **nv = reallocarray(l->v, l->n + 1, sizeof(*nv));

    if (!nv)
        return -1;
    l->v = nv;
    l->v[l->n] = strndup(item, len);
    if (!l->v[l->n])
        return -1;
    l->n++;
    return 0;
}

static void allow_list_free(struct allow_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* The policy module checks and keeps its own copy; its reason names what
 * it refuses, so it is not the row's. */
static const char *set_policy(struct options *o, const struct setting *s, const char *v)
{
    if (ws_policy_set_key(o->policy, NULL, s->key, v, o->policy_why, sizeof(o->policy_why)) < 0)
        return o->policy_why;
    return NULL;
}

#define STR_(x) #x
#define STR(x)  STR_(x)
/* The ranges the rows below name in their messages. */
_Static_assert(MAX_MESSAGE_MIN == 65536 && MAX_MESSAGE_MAX == 67108864, "max-message-bytes range");
_Static_assert(WS_RPC_MEMORY_QUOTA_MIN == 16777216, "memory-quota-bytes range");
_Static_assert(WS_RPC_SEND_BUFFER_MIN == 1048576, "max-send-buffer-bytes range");
_Static_assert(WS_RPC_MAX_CONNECTIONS_MAX == 1048576 && WS_RPC_MAX_CONNECTIONS_MIN == 64,
               "max-connections range");
_Static_assert(WS_EXEC_GRACE_MS_MAX == 60000, "kill-grace-ms range");
_Static_assert(WS_POOL_THREADS_MAX == 256, "work thread range");

/* One row per setting: its id, flag, section and key, then what its
 * value is (the kind, the field, what the kind needs) and the message
 * that refuses a value. */
static const struct setting settings[] = {
    {LISTEN, "listen", "server", "listen", .kind = STRING, .field = FIELD(listen),
     .valid = listen_port_ok, .refused = "not HOST:PORT with a port in 0..65535, or unix:PATH"},
    {STATE, "state-dir", "server", "state-dir", .kind = STRING, .field = FIELD(state_dir)},
    {ROOT, "workspace-root", "server", "workspace-root", .kind = STRING,
     .field = FIELD(workspace_root)},
    {THREADS, "threads", "server", "threads", .kind = NUMBER, .field = FIELD(threads), .min = 0,
     .max = 256, .refused = "not a number in 0..256 (0: one per CPU)"},
    {GRACE, "drain-grace-ms", "server", "drain-grace-ms", .kind = NUMBER, .field = FIELD(grace_ms),
     .min = 0, .max = 3600000, .refused = "not a number of ms in 0..3600000"},
    {KEEPALIVE, "keepalive-ms", "server", "keepalive-ms", .kind = NUMBER,
     .field = FIELD(keepalive_ms), .min = WS_RPC_KEEPALIVE_MS_MIN, .max = 3600000,
     .zero_is_none = true,
     .refused = "not 0 or a number of ms in " STR(WS_RPC_KEEPALIVE_MS_MIN) "..3600000"},
    {TOKENS, "tokens-file", "auth", "tokens-file", .kind = STRING, .field = FIELD(tokens_file)},
    {TLSCERT, "tls-cert", "tls", "cert", .kind = STRING, .field = FIELD(tls_cert)},
    {TLSKEY, "tls-key", "tls", "key", .kind = STRING, .field = FIELD(tls_key)},
    {TLSCA, "tls-client-ca", "tls", "client-ca", .kind = STRING, .field = FIELD(tls_client_ca)},
    {PLAINTEXT, "allow-plaintext", "tls", "allow-plaintext", .kind = SWITCH,
     .field = FIELD(allow_plaintext)},
    {INSECURE_LOOPBACK, "insecure-loopback", "server", "insecure-loopback", .kind = SWITCH,
     .field = FIELD(insecure_loopback)},
    {MAXWS, "max-workspaces", "limits", "max-workspaces", .kind = NUMBER,
     .field = FIELD(max_workspaces), .min = 1, .max = 1000000,
     .refused = "not a number in 1..1000000"},
    {MAXSIZE, "max-file-size", "limits", "max-file-size", .kind = NUMBER,
     .field = FIELD(max_file_size), .min = 1, .max = 1ull << 40,
     .refused = "not a number of bytes in 1..1099511627776"},
    {MEMBYTES, "memory-workspace-bytes", "limits", "memory-workspace-bytes", .kind = NUMBER,
     .field = FIELD(memory_max_bytes), .min = 1, .max = 1ull << 40,
     .refused = "not a number of bytes in 1..1099511627776"},
    {TENANTWS, "tenant-max-workspaces", "quotas", "tenant-max-workspaces", .kind = NUMBER,
     .field = FIELD(tenant_max_workspaces), .min = 0, .max = 1000000,
     .refused = "not a number in 0..1000000 (0: no quota)"},
    {TENANTOPENS, "tenant-opens-per-minute", "quotas", "tenant-opens-per-minute", .kind = NUMBER,
     .field = FIELD(tenant_opens_per_minute), .min = 0, .max = 1000000,
     .refused = "not a number in 0..1000000 (0: no quota)"},
    {TENANTCMDS, "tenant-max-commands", "quotas", "tenant-max-commands", .kind = NUMBER,
     .field = FIELD(tenant_max_commands), .min = 0, .max = 1000000,
     .refused = "not a number in 0..1000000 (0: no quota)"},
    {TENANTBYTES, "tenant-max-bytes", "quotas", "tenant-max-bytes", .kind = NUMBER,
     .field = FIELD(tenant_max_bytes), .min = 0, .max = 1ull << 50,
     .refused = "not a number of bytes in 0..1125899906842624 (0: no quota)"},
    {TENANTMEM, "tenant-memory-bytes", "quotas", "tenant-memory-bytes", .kind = NUMBER,
     .field = FIELD(tenant_memory_bytes), .min = 0, .max = 1ull << 50,
     .refused = "not a number of bytes in 0..1125899906842624 (0: no quota)"},
    {TENANTRETAINED, "tenant-retained-output-bytes", "quotas", "tenant-retained-output-bytes",
     .kind = NUMBER, .field = FIELD(tenant_retained_bytes), .min = 0, .max = 1ull << 50,
     .refused = "not a number of bytes in 0..1125899906842624 (0: no quota)"},
    {TENANTSTREAMS, "tenant-max-streams", "quotas", "tenant-max-streams", .kind = NUMBER,
     .field = FIELD(tenant_max_streams), .min = 0, .max = 1000000,
     .refused = "not a number in 0..1000000 (0: no quota)"},
    {FINISHEDTTL, "finished-output-ttl-ms", "exec", "finished-output-ttl-ms", .kind = NUMBER,
     .field = FIELD(finished_output_ttl_ms), .min = 0, .max = 7ull * 24 * 3600 * 1000,
     .zero_is_none = true, .refused = "not a number of ms in 0..604800000 (0: no bound)"},
    {MAXLIFE, "max-lifetime-ms", "limits", "max-lifetime-ms", .kind = NUMBER,
     .field = FIELD(max_lifetime_ms), .min = 0, .max = WS_LIFETIME_MS_MAX,
     .refused = "not a number of ms in 0..315360000000 (0: no cap)"},
    {IDLE, "default-idle-timeout-ms", "limits", "default-idle-timeout-ms", .kind = NUMBER,
     .field = FIELD(default_idle_ms), .min = 0, .max = WS_LIFETIME_MS_MAX,
     .refused = "not a number of ms in 0..315360000000 (0: none)"},
    {EXECPATH, "exec-path", "exec", "path", .kind = STRING, .field = FIELD(exec_path),
     .valid = ws_services_exec_path_valid,
     .refused = "not a colon-separated list of absolute directories"},
    /* 0 here means no grace (the services config's 0 is "default"). */
    {KILLGRACE, "kill-grace-ms", "exec", "kill-grace-ms", .kind = NUMBER,
     .field = FIELD(kill_grace_ms), .min = 0, .max = WS_EXEC_GRACE_MS_MAX, .zero_is_none = true,
     .refused = "not a number of ms in 0..60000"},
    {CONTAIN, "process-containment", "exec", "process-containment", .kind = STRING,
     .set = set_containment, .refused = "not auto or subreaper"},
    {UIDS_MODE, "workspace-uids", "uids", "mode", .kind = STRING, .set = set_uids_mode,
     .refused = "not auto, on or off"},
    {UIDS_RANGE, "workspace-uid-range", "uids", "range", .kind = STRING, .set = set_uid_range},
    {ROOT_COMMANDS, "allow-root-commands", "uids", "allow-root-commands", .kind = SWITCH,
     .field = FIELD(allow_root_commands)},
    {PROVIDERS, "providers", "providers", "enabled", .kind = STRING, .set = set_providers,
     .refused = "not a comma-separated list of memory, local-bash, local-sandbox, docker"},
    {BWRAP, "bwrap", "local-sandbox", "bwrap", .kind = STRING, .field = FIELD(bwrap),
     .valid = absolute_path, .refused = "not an absolute path"},
    {DOCKERHOST, "docker-host", "docker", "host", .kind = STRING, .field = FIELD(docker_host),
     .valid = docker_host_ok, .refused = "not unix:///PATH or tcp://HOST[:PORT]"},
    {DOCKERIMAGE, "docker-default-image", "docker", "default-image", .kind = STRING,
     .field = FIELD(docker_image), .valid = ws_docker_image_valid,
     .refused = "not a valid image reference"},
    {METRICS, "metrics-listen", "metrics", "listen", .kind = STRING,
     .field = FIELD(metrics_listen)},
    {METRICS_REMOTE, "metrics-allow-remote", "metrics", "allow-remote", .kind = SWITCH,
     .field = FIELD(metrics_allow_remote)},
    {MAXMSG, "max-message-bytes", "transport", "max-message-bytes", .kind = NUMBER,
     .field = FIELD(max_message_bytes), .min = MAX_MESSAGE_MIN, .max = MAX_MESSAGE_MAX,
     .refused = "not a number of bytes in 65536..67108864"},
    {MAXSTREAMS, "max-streams-per-connection", "transport", "max-streams-per-connection",
     .kind = NUMBER, .field = FIELD(max_streams), .min = 1, .max = WS_RPC_MAX_STREAMS_MAX,
     .refused = "not a number in 1.." STR(WS_RPC_MAX_STREAMS_MAX)},
    {MEMQUOTA, "memory-quota-bytes", "transport", "memory-quota-bytes", .kind = NUMBER,
     .field = FIELD(memory_quota_bytes), .min = WS_RPC_MEMORY_QUOTA_MIN, .max = 1ull << 40,
     .refused = "not a number of bytes in 16777216..1099511627776"},
    {SENDBUF, "max-send-buffer-bytes", "transport", "max-send-buffer-bytes", .kind = NUMBER,
     .field = FIELD(max_send_buffer_bytes), .min = WS_RPC_SEND_BUFFER_MIN, .max = 1ull << 40,
     .refused = "not a number of bytes in 1048576..1099511627776"},
    {MAXCONNS, "max-connections", "transport", "max-connections", .kind = NUMBER,
     .field = FIELD(max_connections), .min = 1, .max = WS_RPC_MAX_CONNECTIONS_MAX,
     .refused = "not a number in 1..1048576"},
    {WORK_FS, "work-fs-threads", "work", "fs-threads", .kind = NUMBER,
     .field = FIELD(work_fs_threads), .min = 0, .max = WS_POOL_THREADS_MAX,
     .refused = "not a number in 0..256 (0: inline, on the RPC threads)"},
    {WORK_DAEMON, "work-daemon-threads", "work", "daemon-threads", .kind = NUMBER,
     .field = FIELD(work_daemon_threads), .min = 0, .max = WS_POOL_THREADS_MAX,
     .refused = "not a number in 0..256 (0: inline, on the RPC threads)"},
    {WORK_RUNNING, "work-tenant-running", "work", "tenant-running", .kind = NUMBER,
     .field = FIELD(work_tenant_running), .min = 0, .max = WS_POOL_THREADS_MAX,
     .refused = "not a number in 0..256 (0: the lane's default)"},
    {WORK_QUEUED, "work-tenant-queued", "work", "tenant-queued", .kind = NUMBER,
     .field = FIELD(work_tenant_queued), .min = 0, .max = 100000,
     .refused = "not a number in 0..100000 (0: the default)"},
    /* The policy module checks these and says why it refuses one. */
    {POL_PROVIDERS, "policy-providers", "policy", "providers", .kind = STRING, .set = set_policy},
    {POL_NETWORK, "policy-network", "policy", "network", .kind = SWITCH, .set = set_policy},
    {POL_BINDROOTS, "policy-bind-roots", "policy", "bind-roots", .kind = STRING, .set = set_policy},
    {POL_PASSENV, "policy-pass-env", "policy", "pass-env", .kind = STRING, .set = set_policy},
    {POL_COMMANDS, "policy-commands", "policy", "commands", .kind = STRING, .set = set_policy},
    {POL_IMAGES, "policy-docker-images", "policy", "docker-images", .kind = STRING,
     .set = set_policy},
    {POL_PULL, "policy-docker-pull", "policy", "docker-pull", .kind = SWITCH, .set = set_policy},
    {POL_USERS, "policy-docker-users", "policy", "docker-users", .kind = STRING, .set = set_policy},
    {POL_ADDRESS_SPACE, "policy-address-space-mb", "policy", "address-space-mb", .kind = STRING,
     .set = set_policy},
    {SOURCE_ALLOW, "source-path-allow", "server", "source-path-allow", .kind = STRING,
     .set = set_source_allow,
     .refused = "not a comma-separated list of absolute canonical directories (no symlink, "
                "\".\" or \"..\" in them)"},
    {MAXSNAPS, "max-snapshots", "limits", "max-snapshots", .kind = NUMBER,
     .field = FIELD(max_snapshots), .min = 1, .max = 1000000,
     .refused = "not a number in 1..1000000"},
    {MAXWATCHES, "max-watches", "limits", "max-watches", .kind = NUMBER,
     .field = FIELD(max_watches), .min = 1, .max = 100000, .refused = "not a number in 1..100000"},
    {MAXWATCHES_WS, "max-watches-per-workspace", "limits", "max-watches-per-workspace",
     .kind = NUMBER, .field = FIELD(max_watches_ws), .min = 1, .max = 10000,
     .refused = "not a number in 1..10000"},
};
#define N_ROWS WS_ELEMENTSOF(settings)

static const struct setting *setting_of(int id)
{
    for (size_t i = 0; i < N_ROWS; i++)
        if (settings[i].id == id)
            return &settings[i];
    return NULL;
}

/* Sets setting `id` from its text, for a flag and a configuration key
 * alike (a switch's flag passes NULL; its key passes "true" or "false").
 * Returns NULL, or why the value is refused. Strings are kept by
 * reference: `v` must outlive `o`. */
static const char *apply(struct options *o, int id, const char *v)
{
    const struct setting *s = setting_of(id);
    char *field;
    unsigned long long n;
    bool on = true;

    if (v && !*v)
        return "empty";
    if (!s)
        return "unknown setting";
    field = (char *)o + s->field;
    switch (s->kind) {
    case STRING:
        if (s->valid && !s->valid(v))
            return s->refused;
        if (s->set)
            return s->set(o, s, v);
        *(const char **)field = v;
        return NULL;
    case SWITCH:
        if (v && strcmp(v, "false") == 0)
            on = false;
        else if (v && strcmp(v, "true") != 0)
            return "not true or false";
        if (s->set)
            return s->set(o, s, on ? "true" : "false");
        *(bool *)field = on;
        return NULL;
    case NUMBER:
        if (!parse_ull(v, s->max, &n))
            return s->refused;
        if (n == 0 && s->zero_is_none) {
            *(long long *)field = -1;
            return NULL;
        }
        if (n < s->min)
            return s->refused;
        *(long long *)field = (long long)n;
        return NULL;
    }
    return "unknown setting";
}

/* One reading of the file: the options it sets, and the values read
 * (options point into them, so they live as long as the options do: the
 * process's life at start, the reload's for a SIGHUP). */
struct conf_read {
    struct options *o;
    char *values[WS_CONF_KEYS_MAX];
    size_t n_values;
};

static struct conf_read start_read;

static int conf_set(void *ud, const char *section, const char *key, const char *value,
                    unsigned line, char *why, size_t why_size)
{
    struct conf_read *cr = ud;
    struct options *o = cr->o;

    /* [policy.TENANT] and [peers] are the policy module's: their keys
     * are not settings with a flag. */
    if (strncmp(section, "policy.", 7) == 0)
        return ws_policy_set_key(o->policy, section + 7, key, value, why, why_size);
    if (strcmp(section, "peers") == 0) {
        o->peers_given = true;
        return ws_policy_set_peer(o->policy, key, value, why, why_size);
    }
    for (size_t i = 0; i < N_ROWS; i++) {
        if (strcmp(settings[i].section, section) != 0 || strcmp(settings[i].key, key) != 0)
            continue;
        char *copy = cr->n_values < WS_CONF_KEYS_MAX ? strdup(value) : NULL;
        if (!copy) {
            snprintf(why, why_size, "out of memory");
            return -1;
        }
        cr->values[cr->n_values++] = copy;
        const char *bad = apply(o, settings[i].id, copy);
        if (bad) {
            snprintf(why, why_size, "%s", bad);
            return -1;
        }
        o->line[settings[i].id - LISTEN] = line;
        return 0;
    }
    snprintf(why, why_size, "unknown key");
    return -1;
}

static void conf_read_free(struct conf_read *cr)
{
    for (size_t i = 0; i < cr->n_values; i++)
        free(cr->values[i]);
    cr->n_values = 0;
}

/* The flags given, kept for the process's life: a reload reads the file
 * again and then applies the policy flags over it, as the start did. */
struct flag {
    int id;
    const char *value;
};
static struct flag *given_flags;
static size_t n_given_flags;

static void free_conf_values(void)
{
    conf_read_free(&start_read);
    free(given_flags);
    given_flags = NULL;
    n_given_flags = 0;
}

/* Reports a refused combination against what set setting `id`: its line
 * in the file ("config: FILE:LINE: key "section.key": <in_file>"), or the
 * command line ("workspaced: <by_flag>"). */
static void refuse(const struct options *o, int id, const char *in_file, const char *by_flag)
{
    const struct setting *s = setting_of(id);
    unsigned line = o->line[id - LISTEN];

    if (line)
        fprintf(stderr, "config: %s:%u: key \"%s.%s\": %s\n", o->conf_path, line, s->section,
                s->key, in_file);
    else
        fprintf(stderr, "workspaced: %s\n", by_flag);
}

/* The rules between settings, the same for the file and the flags.
 * Returns 0, or -1 with the reason printed. */
static int check_options(const struct options *o, bool quiet)
{
    char flag_msg[512];

    if (!o->state_dir) {
        if (o->conf_path)
            fprintf(stderr,
                    "config: %s: key \"server.state-dir\": required (here or as --state-dir)\n",
                    o->conf_path);
        else
            fprintf(stderr, "workspaced: --state-dir is required\n");
        return -1;
    }
    if (!o->tls_cert != !o->tls_key) {
        refuse(o, o->tls_cert ? TLSCERT : TLSKEY, "tls.cert and tls.key go together",
               "--tls-cert and --tls-key go together");
        return -1;
    }
    if (o->tls_client_ca && !o->tls_cert) {
        refuse(o, TLSCA, "needs tls.cert and tls.key",
               "--tls-client-ca needs --tls-cert and --tls-key");
        return -1;
    }
    /* A TCP listener carries no caller's uid: without tokens or client
     * certificates anyone who reaches it (every local user, every box on
     * the host's network) would be the default tenant. */
    if (ws_listen_check(o->listen, o->tokens_file != NULL, o->tls_client_ca != NULL,
                        o->insecure_loopback, geteuid(), flag_msg, sizeof(flag_msg)) < 0) {
        refuse(o, o->insecure_loopback && geteuid() == 0 ? INSECURE_LOOPBACK : LISTEN, flag_msg,
               flag_msg);
        return -1;
    }
    /* One without TLS would hand the tokens to anyone on the path, unless
     * the operator says the network is trusted. */
    if (!ws_listen_is_unix(o->listen) && !ws_listen_is_loopback(o->listen)) {
        if (!o->tls_cert && !o->allow_plaintext) {
            snprintf(flag_msg, sizeof(flag_msg),
                     "refusing to listen on '%s' in plaintext: give --tls-cert and --tls-key, or "
                     "--allow-plaintext",
                     o->listen);
            refuse(o, LISTEN,
                   "not a loopback address or unix: socket, and neither TLS (tls.cert, tls.key) "
                   "nor tls.allow-plaintext = true is configured",
                   flag_msg);
            return -1;
        }
        if (!o->tls_cert && !quiet)
            fprintf(stderr,
                    "workspaced: warning: serving '%s' in plaintext (--allow-plaintext): "
                    "tokens cross the network in the clear\n",
                    o->listen);
    }
    /* /metrics says how many workspaces and commands there are: no secret,
     * but not for the network unless asked for. */
    if (o->metrics_listen && !o->metrics_allow_remote &&
        !ws_metrics_http_addr_is_loopback(o->metrics_listen)) {
        snprintf(flag_msg, sizeof(flag_msg),
                 "refusing to serve metrics on '%s': only loopback addresses (127.0.0.1, [::1], "
                 "localhost) unless --metrics-allow-remote is given",
                 o->metrics_listen);
        refuse(o, METRICS,
               "not a loopback address (127.0.0.1, [::1], localhost) and metrics.allow-remote is "
               "not true",
               flag_msg);
        return -1;
    }
    return 0;
}

/* Whether callers are told apart as tenants: bearer tokens and client
 * certificates name them, and so does [peers] for callers on a unix
 * socket. Without any of these every caller is one tenant (root and the
 * server's own uid on a unix socket, anyone on an insecure loopback), and
 * a quota per tenant would only be a lower server-wide cap. */
static bool tenants_told_apart(const struct options *o)
{
    return o->tokens_file || o->tls_client_ca || (ws_listen_is_unix(o->listen) && o->peers_given);
}

/* A per-tenant quota not given explicitly: none when callers are not told
 * apart, else its default. An explicit 0 stays "no quota", so an operator
 * can still turn one off. */
static void default_quotas(struct options *o)
{
    bool on = tenants_told_apart(o);
    struct {
        long long *field;
        long long dflt;
    } q[] = {
        {&o->tenant_max_workspaces, WS_APP_AUTH_TENANT_WORKSPACES},
        {&o->tenant_opens_per_minute, WS_APP_AUTH_TENANT_OPENS_PER_MINUTE},
        {&o->tenant_max_commands, WS_APP_AUTH_TENANT_COMMANDS},
        {&o->tenant_max_bytes, (long long)WS_APP_AUTH_TENANT_BYTES},
        {&o->tenant_memory_bytes, (long long)WS_APP_AUTH_TENANT_MEMORY_BYTES},
        {&o->tenant_retained_bytes, (long long)WS_APP_AUTH_TENANT_RETAINED_BYTES},
        {&o->tenant_max_streams, WS_APP_AUTH_TENANT_STREAMS},
    };

    for (size_t i = 0; i < WS_ELEMENTSOF(q); i++)
        if (*q[i].field == QUOTA_NOT_GIVEN)
            *q[i].field = on ? q[i].dflt : 0;
}

/* Returns 0 to run, 1 to exit 0 (--help, --version, a good
 * --check-config), -1 to exit 2. The file is read first, whatever the order of the arguments,
 * so a flag overrides it. */
static int parse_args(int argc, char **argv, struct options *o)
{
    struct option longopts[N_ROWS + 5];
    struct flag *flags = NULL;
    size_t n_flags = 0, i;
    const char *check = NULL;
    char msg[WS_CONF_MSG_MAX];
    int c, rc = -1;

    *o = (struct options){.listen = DEFAULT_LISTEN,
                          .grace_ms = DEFAULT_GRACE_MS,
                          .work_fs_threads = -1,
                          .work_daemon_threads = -1,
                          .tenant_max_workspaces = QUOTA_NOT_GIVEN,
                          .tenant_opens_per_minute = QUOTA_NOT_GIVEN,
                          .tenant_max_commands = QUOTA_NOT_GIVEN,
                          .tenant_max_bytes = QUOTA_NOT_GIVEN,
                          .tenant_memory_bytes = QUOTA_NOT_GIVEN,
                          .tenant_retained_bytes = QUOTA_NOT_GIVEN,
                          .tenant_max_streams = QUOTA_NOT_GIVEN,
                          .finished_output_ttl_ms = WS_EXEC_FINISHED_TTL_MS_DEFAULT,
                          .default_idle_ms = DEFAULT_IDLE_MS};
    if (ws_policy_set_new(&o->policy) < 0)
        return -1;
    for (i = 0; i < N_ROWS; i++)
        longopts[i] = (struct option){settings[i].flag,
                                      settings[i].kind == SWITCH ? no_argument : required_argument,
                                      NULL, settings[i].id};
    longopts[i++] = (struct option){"config", required_argument, NULL, CONFIG};
    longopts[i++] = (struct option){"check-config", required_argument, NULL, CHECKCONFIG};
    longopts[i++] = (struct option){"help", no_argument, NULL, HELP};
    longopts[i++] = (struct option){"version", no_argument, NULL, VERSION_FLAG};
    longopts[i] = (struct option){NULL, 0, NULL, 0};

    flags = calloc((size_t)argc + 1, sizeof(*flags));
    if (!flags)
        return -1;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case CONFIG:
        case CHECKCONFIG:
            if (o->conf_path) {
                fprintf(stderr, "workspaced: one --config or --check-config at most\n");
                goto out;
            }
            o->conf_path = optarg;
            if (c == CHECKCONFIG)
                check = optarg;
            break;
        case HELP:
            usage(stdout);
            rc = 1;
            goto out;
        case VERSION_FLAG:
            printf("workspaced %s\n", WS_VERSION);
            rc = 1;
            goto out;
        default:
            if (c < LISTEN || c >= SETTINGS_END) {
                usage(stderr);
                goto out;
            }
            flags[n_flags].id = c;
            flags[n_flags++].value = optarg;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "workspaced: unexpected argument '%s'\n", argv[optind]);
        goto out;
    }
    start_read.o = o;
    if (o->conf_path &&
        ws_conf_parse(o->conf_path, conf_sections, conf_set, &start_read, msg, sizeof(msg)) < 0) {
        fprintf(stderr, "%s\n", msg);
        goto out;
    }
    /* The providers read these from the environment, where an operator's
     * variable beats the file (a flag beats both). */
    if (getenv(WS_BWRAP_ENV) && *getenv(WS_BWRAP_ENV)) {
        o->bwrap = NULL;
        o->line[BWRAP - LISTEN] = 0;
    }
    if (getenv("DOCKER_HOST") && *getenv("DOCKER_HOST")) {
        o->docker_host = NULL;
        o->line[DOCKERHOST - LISTEN] = 0;
    }
    for (i = 0; i < n_flags; i++) {
        const char *why = apply(o, flags[i].id, flags[i].value);
        if (why) {
            fprintf(stderr, "workspaced: invalid value '%s' for --%s: %s\n", flags[i].value,
                    setting_of(flags[i].id)->flag, why);
            goto out;
        }
        o->line[flags[i].id - LISTEN] = 0;
    }
    if (ws_policy_set_finish(o->policy) < 0) {
        fprintf(stderr, "workspaced: out of memory\n");
        goto out;
    }
    if (check_options(o, check != NULL) < 0)
        goto out;
    default_quotas(o);
    if (check) {
        printf("config: %s: ok\n", check);
        rc = 1;
        goto out;
    }
    /* Still one thread: setenv is safe, and the providers read these. */
    if (o->bwrap)
        setenv(WS_BWRAP_ENV, o->bwrap, 1);
    if (o->docker_host)
        setenv("DOCKER_HOST", o->docker_host, 1);
    rc = 0;
out:
    given_flags = flags;
    n_given_flags = n_flags;
    return rc;
}

/* SIGHUP: reads the whole file again into fresh structures, applies the
 * policy flags over it as the start did, and returns the new policy set
 * (with the [peers] map). Settings other than the policy are checked but
 * not applied: they need a restart. On any error the old set stays and
 * msg says why. */
static int reload_policy(const struct options *running, struct ws_policy_set **ret, char *msg,
                         size_t msg_size)
{
    struct options fresh = {.listen = DEFAULT_LISTEN, .conf_path = running->conf_path};
    struct conf_read cr = {.o = &fresh};
    int err = -1;

    if (ws_policy_set_new(&fresh.policy) < 0) {
        snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    if (fresh.conf_path &&
        ws_conf_parse(fresh.conf_path, conf_sections, conf_set, &cr, msg, msg_size) < 0)
        goto out;
    for (size_t i = 0; i < n_given_flags; i++) {
        int id = given_flags[i].id;
        if (id < POL_PROVIDERS || id > POL_ADDRESS_SPACE)
            continue;
        const char *why = apply(&fresh, id, given_flags[i].value);
        if (why) {
            snprintf(msg, msg_size, "--%s: %s", setting_of(id)->flag, why);
            goto out;
        }
    }
    if (ws_policy_set_finish(fresh.policy) < 0) {
        snprintf(msg, msg_size, "out of memory");
        goto out;
    }
    *ret = fresh.policy;
    fresh.policy = NULL;
    err = 0;
out:
    ws_policy_set_unref(fresh.policy);
    conf_read_free(&cr);
    return err;
}

/* gRPC's teardown (grpc_shutdown) joins its executor threads, and one of
 * them can be inside a poll with seconds left on it (seen after keepalive
 * dropped a connection: ~10 s). The server's own state is already gone by
 * then, so the process does not wait for it past this. */
#define GRPC_TEARDOWN_WAIT_MS 1000

struct teardown {
    struct ws_rpc_server *server;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool done;
};

static void *teardown_main(void *arg)
{
    struct teardown *t = arg;

    ws_rpc_server_free(t->server);
    pthread_mutex_lock(&t->mu);
    t->done = true;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* Frees the server on another thread; true when that finished within ms.
 * On false the thread still runs and the caller must _exit. */
static bool free_server_bounded(struct ws_rpc_server *s, int ms)
{
    static struct teardown t = {.mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    struct timespec deadline;
    pthread_t th;
    bool done;

    t.server = s;
    if (pthread_create(&th, NULL, teardown_main, &t) != 0) {
        ws_rpc_server_free(s);
        return true;
    }
    /* The condition variable has default attributes: its clock is
     * CLOCK_REALTIME. */
    ws_abstime_after_ms(ms, &deadline);
    pthread_mutex_lock(&t.mu);
    while (!t.done && pthread_cond_timedwait(&t.cond, &t.mu, &deadline) == 0)
        ;
    done = t.done;
    pthread_mutex_unlock(&t.mu);
    if (done)
        pthread_join(th, NULL);
    return done;
}

int main(int argc, char **argv)
{
    struct options o;
    struct ws_app *app = NULL;
    struct ws_rpc_server *server;
    sigset_t sigs;
    int sig = 0, rc = 1, err;

    /* Before any secret is read (the ref key, the tokens, TLS keys): no
     * other process of this uid, a local-bash command among them, may
     * ptrace this one or open its /proc/PID/mem, environ, fd or root. It
     * also means no core dump, which would hold the same secrets. */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
        fprintf(stderr, "workspaced: prctl(PR_SET_DUMPABLE): %s\n", strerror(errno));
        return 1;
    }

    err = parse_args(argc, argv, &o);
    if (err != 0) {
        ws_policy_set_unref(o.policy);
        free_conf_values();
        return err > 0 ? 0 : 2;
    }

    /* Signals are handled by this thread alone (sigwait below): block them
     * before any other thread exists so every thread inherits the mask. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    umask(077);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    /* The server holds workspaces' secrets in memory: it never dumps core
     * (their pages are also marked MADV_DONTDUMP, for a core limit raised
     * behind its back). Commands get their own limits when spawned. */
    struct rlimit no_core = {0, 0};
    if (setrlimit(RLIMIT_CORE, &no_core) < 0)
        fprintf(stderr, "workspaced: cannot disable core dumps: %s\n", strerror(errno));

    struct allow_list allow = {0};
    for (size_t i = 0; i < o.n_source_allow; i++)
        if (each_item(o.source_allow[i], allow_add, &allow) != 0) {
            fprintf(stderr, "workspaced: out of memory\n");
            allow_list_free(&allow);
            goto out;
        }
    struct ws_app_config cfg = {
        .state_dir = o.state_dir,
        .registry =
            {
                .workspace_root = o.workspace_root,
                .max_workspaces = (unsigned)o.max_workspaces,
                .max_lifetime_ms = (uint64_t)o.max_lifetime_ms,
                .default_idle_timeout_ms = (uint64_t)o.default_idle_ms,
                .max_file_size = (uint64_t)o.max_file_size,
                .memory_max_bytes = (uint64_t)o.memory_max_bytes,
                .tenant_max_workspaces = (unsigned)o.tenant_max_workspaces,
                .tenant_opens_per_minute = (unsigned)o.tenant_opens_per_minute,
                .tenant_max_bytes = (uint64_t)o.tenant_max_bytes,
                .tenant_memory_bytes = (uint64_t)o.tenant_memory_bytes,
                .providers_enabled = o.providers,
                .policy = o.policy,
                .uids_mode = o.uids_mode,
                .uid_range = o.uid_range,
                .allow_root_commands = o.allow_root_commands,
                .max_snapshots = (unsigned)o.max_snapshots,
                .source_allow = (const char *const *)allow.v,
                .n_source_allow = allow.n,
            },
        .docker_default_image = o.docker_image,
        .kill_grace_ms = (int)o.kill_grace_ms,
        .force_subreaper = o.force_subreaper,
        .exec_path = o.exec_path,
        .tenant_max_commands = (unsigned)o.tenant_max_commands,
        .tenant_retained_output_bytes = (uint64_t)o.tenant_retained_bytes,
        .finished_output_ttl_ms = o.finished_output_ttl_ms < 0 ? 0 : o.finished_output_ttl_ms,
        .rpc =
            {
                .listen = o.listen,
                .threads = (int)o.threads,
                .keepalive_ms = (int)o.keepalive_ms,
                .tokens_file = o.tokens_file,
                .insecure_loopback = o.insecure_loopback,
                .tls_cert = o.tls_cert,
                .tls_key = o.tls_key,
                .tls_client_ca = o.tls_client_ca,
                .max_message_bytes = (int)o.max_message_bytes,
                .max_streams_per_connection = (int)o.max_streams,
                .tenant_max_streams = (unsigned)o.tenant_max_streams,
                .memory_quota_bytes = o.memory_quota_bytes,
                .max_send_buffer_bytes = o.max_send_buffer_bytes,
                .max_connections = (unsigned)o.max_connections,
            },
        .metrics_listen = o.metrics_listen,
        .work =
            {
                .fs_threads = (int)o.work_fs_threads,
                .daemon_threads = (int)o.work_daemon_threads,
                .tenant_running = (unsigned)o.work_tenant_running,
                .tenant_queued = (unsigned)o.work_tenant_queued,
            },
    };
    /* It says why itself when it fails. The registry keeps its own copy
     * of the allowed directories. */
    ws_services_watch_limits((unsigned)o.max_watches, (unsigned)o.max_watches_ws);
    err = ws_app_start(&cfg, &app);
    allow_list_free(&allow);
    if (err < 0)
        goto out;
    if (strncmp(o.listen, "unix:", 5) == 0) {
        printf("workspaced listening on %s\n", o.listen);
    } else {
        const char *colon = strrchr(o.listen, ':');
        printf("workspaced listening on %.*s:%d\n", (int)(colon - o.listen), o.listen,
               ws_app_port(app));
    }
    fflush(stdout);

    for (;;) {
        if (sigwait(&sigs, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            /* The policy and [peers]: the whole file read again; a bad one
             * keeps what is in force. The [peers] map rides in the same
             * set (the RPC layer asks for it at each call). The tokens
             * file is read again either way. */
            struct ws_policy_set *fresh = NULL;
            char pmsg[WS_CONF_MSG_MAX];
            bool ok = reload_policy(&o, &fresh, pmsg, sizeof(pmsg)) == 0;
            ws_app_reload(app, fresh);
            ws_policy_set_unref(fresh);
            if (!ok)
                ws_log_msg(WS_RPC_LOG_ERROR, "policy.reload_failed",
                           "the policy was not reloaded, the old one stays: %s", pmsg);
            else
                ws_log_msg(WS_RPC_LOG_INFO, "policy.reloaded", "the policy was reloaded%s%s",
                           o.conf_path ? " from " : "", o.conf_path ? o.conf_path : "");
            continue;
        }
        break;
    }
    ws_log_msg(WS_RPC_LOG_INFO, "server.drain", "%s received, draining", strsignal(sig));
    ws_app_drain(app, (int)o.grace_ms);
    /* No call is left: end every command and workspace now, then gRPC's
     * own teardown, which is not waited for past a bound. */
    server = ws_app_take_server(app);
    ws_app_free(app);
    app = NULL;
    if (!free_server_bounded(server, GRPC_TEARDOWN_WAIT_MS)) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.teardown_slow",
                   "gRPC teardown still busy after %d ms; exiting", GRPC_TEARDOWN_WAIT_MS);
        fflush(NULL);
        _exit(0);
    }
    rc = 0;
out:
    ws_app_free(app);
    curl_global_cleanup();
    ws_policy_set_unref(o.policy);
    free_conf_values();
    return rc;
}
