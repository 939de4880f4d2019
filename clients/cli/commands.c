/* Workspace, provider and file-system commands of wsctl: each builds one
 * request, runs the RPC and prints the answer either for a person or, with
 * --json, as one JSON document on stdout (cat and grep stream).
 */
#include "clients/cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clients/cli/args.h"
#include "clients/cli/output.h"
#include "workspace/v1/filesystem.pb-c.h"
#include "workspace/v1/providers.pb-c.h"
#include "workspace/v1/workspaces.pb-c.h"

/* put sends the file in messages of this size: well under the server's
 * 4 MiB message limit, large enough that per-message overhead vanishes. */
#define PUT_CHUNK_BYTES (1024 * 1024)
/* Inputs at least this large get a progress bar (when stderr is a tty). */
#define PROGRESS_MIN_BYTES (8 * 1024 * 1024)
/* Commands declared with --allow, at most. */
#define ALLOW_MAX 256
/* Open retries transient failures (UNAVAILABLE or transient=true). */
#define OPEN_ATTEMPTS   4
#define OPEN_BACKOFF_MS 200

/* Parses options for a command; returns the option or -1 at the end.
 * Unknown options are usage errors reported by the caller. */
/* Points a protobuf map field's `entries` and `ptrs` (arrays of
 * WSC_KV_MAX) at the pairs of `kv`; `init` is the entry type's
 * initialiser. The strings stay the caller's. */
#define FILL_MAP(kv, entries, ptrs, init)                                                          \
    do {                                                                                           \
        for (size_t i_ = 0; i_ < (kv)->n; i_++) {                                                  \
            init(&(entries)[i_]);                                                                  \
            (entries)[i_].key = (char *)(kv)->key[i_];                                             \
            (entries)[i_].value = (char *)(kv)->value[i_];                                         \
            (ptrs)[i_] = &(entries)[i_];                                                           \
        }                                                                                          \
    } while (0)

static int next_opt(int argc, char **argv, const char *shortopts, const struct option *longopts)
{
    return getopt_long(argc, argv, shortopts, longopts, NULL);
}

static void opts_reset(void)
{
    /* 0 makes glibc reinitialise its state for a new argv. */
    optind = 0;
    opterr = 0;
}

static int bad_option(char **argv)
{
    return wsc_usage_error("%s: unknown option or missing value near '%s'", argv[0],
                           argv[optind - 1 > 0 ? optind - 1 : 0]);
}

static int need_args(int argc, char **argv, int min, int max, const char *usage)
{
    int n = argc - optind;

    if (n < min || n > max)
        return wsc_usage_error("usage: wsctl %s %s", argv[0], usage);
    return 0;
}

static int parse_u32(const char *s, uint32_t *ret)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v > UINT32_MAX)
        return -EINVAL;
    *ret = (uint32_t)v;
    return 0;
}

/* Runs a unary RPC; on failure prints the error line. Returns 0 or an exit
 * status. */
static int unary(struct wsc_ctx *ctx, const char *method, const void *req,
                 const ProtobufCMessageDescriptor *desc, void *ret_resp)
{
    struct wsc_error err;
    int r = wsc_unary(ctx->cl, method, req, desc, ret_resp, &err);

    if (r == -EREMOTEIO)
        return wsc_report(&err);
    if (r < 0)
        return wsc_report_errno(method, r);
    return 0;
}

static bool transient(const struct wsc_error *e)
{
    if (e->code == GRPC_STATUS_UNAVAILABLE)
        return true;
    for (size_t i = 0; i < e->n_meta; i++)
        if (strcmp(e->meta_key[i], "transient") == 0 && strcmp(e->meta_value[i], "true") == 0)
            return true;
    return false;
}

/* The workspace's id, and its node (after the id, or as "node" in JSON;
 * nothing without one): the node a front proxy named in the answer, else
 * the node the call was sent to (`pinned`, "" for none). */
static int print_workspace(struct wsc_ctx *ctx, const Workspace__V1__Workspace *ws,
                           const char *pinned)
{
    const char *node =
        wsc_client_answered_node(ctx->cl)[0] ? wsc_client_answered_node(ctx->cl) : pinned;
    json_t *j;
    char *ref;

    if (!ctx->json) {
        printf(node[0] ? "%s %s\n" : "%s\n", ws->id, node);
        return 0;
    }
    ref = ws->ref ? wsc_base64_encode(ws->ref->token.data, ws->ref->token.len) : strdup("");
    if (!ref)
        return wsc_report_errno("ref", -ENOMEM);
    j = json_pack("{s:s, s:s, s:s}", "id", ws->id, "ref", ref, "provider", ws->provider);
    free(ref);
    if (j && node[0])
        json_object_set_new(j, "node", json_string(node));
    if (j && ws->capabilities)
        json_object_set_new(j, "capabilities", wsc_json_message(&ws->capabilities->base));
    if (j && ws->name[0])
        json_object_set_new(j, "name", json_string(ws->name));
    if (j && ws->n_labels) {
        json_t *labels = json_object();
        for (size_t i = 0; i < ws->n_labels; i++)
            json_object_set_new(labels, ws->labels[i]->key, json_string(ws->labels[i]->value));
        json_object_set_new(j, "labels", labels);
    }
    if (j && ws->expires_at_unix_ms)
        json_object_set_new(j, "expires_at_unix_ms", json_integer(ws->expires_at_unix_ms));
    return wsc_json_emit(j) < 0 ? WSC_EXIT_FAIL : 0;
}

int wsc_cmd_open(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"provider", required_argument, NULL, 'p'},
        {"image", required_argument, NULL, 'I'},
        {"runtime", required_argument, NULL, 'R'},
        {"allow", required_argument, NULL, 'a'},
        {"max-duration-ms", required_argument, NULL, 'd'},
        {"network", no_argument, NULL, 'n'},
        {"exec-mode", required_argument, NULL, 'm'},
        {"ttl", required_argument, NULL, 't'},
        {"idle-timeout", required_argument, NULL, 'i'},
        {"label", required_argument, NULL, 'l'},
        {"name", required_argument, NULL, 'N'},
        {"env", required_argument, NULL, 'e'},
        {"secret-from-env", required_argument, NULL, 's'},
        {"from-snapshot", required_argument, NULL, 'F'},
        {"from-path", required_argument, NULL, 'P'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__OpenRequest req = WORKSPACE__V1__OPEN_REQUEST__INIT;
    Workspace__V1__MemoryConfig mem = WORKSPACE__V1__MEMORY_CONFIG__INIT;
    Workspace__V1__LocalBashConfig bash = WORKSPACE__V1__LOCAL_BASH_CONFIG__INIT;
    Workspace__V1__LocalSandboxConfig sandbox = WORKSPACE__V1__LOCAL_SANDBOX_CONFIG__INIT;
    Workspace__V1__DockerConfig docker = WORKSPACE__V1__DOCKER_CONFIG__INIT;
    Workspace__V1__Capabilities caps = WORKSPACE__V1__CAPABILITIES__INIT;
    Workspace__V1__FsCapability fs = WORKSPACE__V1__FS_CAPABILITY__INIT;
    Workspace__V1__ShellCapability shell = WORKSPACE__V1__SHELL_CAPABILITY__INIT;
    Workspace__V1__Lifetime lifetime = WORKSPACE__V1__LIFETIME__INIT;
    Workspace__V1__OpenRequest__LabelsEntry label_e[WSC_KV_MAX], *label_p[WSC_KV_MAX];
    Workspace__V1__OpenRequest__EnvEntry env_e[WSC_KV_MAX], *env_p[WSC_KV_MAX];
    Workspace__V1__OpenRequest__SecretsEntry secret_e[WSC_KV_MAX], *secret_p[WSC_KV_MAX];
    struct wsc_kvs labels = {0}, env = {0}, secrets = {0};
    char request_id[WSC_REQUEST_ID_LEN];
    Workspace__V1__OpenResponse *resp = NULL;
    const char *provider = "local-bash", *image = NULL, *runtime = NULL;
    char *allow = NULL, *allowed[ALLOW_MAX];
    size_t n_allowed = 0;
    uint32_t max_ms = 0;
    bool network = false;
    Workspace__V1__ExecMode exec_mode = WORKSPACE__V1__EXEC_MODE__EXEC_MODE_DEFAULT;
    struct wsc_error err;
    int opt, r;

    opts_reset();
    while ((opt = next_opt(argc, argv, "", longopts)) != -1) {
        switch (opt) {
        case 'p':
            provider = optarg;
            break;
        case 'I':
            image = optarg;
            break;
        case 'R':
            runtime = optarg;
            break;
        case 'a':
            allow = optarg;
            break;
        case 'd':
            if (parse_u32(optarg, &max_ms) < 0)
                return wsc_usage_error("open: bad --max-duration-ms '%s'", optarg);
            break;
        case 'n':
            network = true;
            break;
        case 'm':
            if (strcmp(optarg, "agent") == 0)
                exec_mode = WORKSPACE__V1__EXEC_MODE__EXEC_MODE_AGENT;
            else if (strcmp(optarg, "per-command") == 0)
                exec_mode = WORKSPACE__V1__EXEC_MODE__EXEC_MODE_PER_COMMAND;
            else
                return wsc_usage_error("open: --exec-mode is agent or per-command, not '%s'",
                                       optarg);
            break;
        case 't':
        case 'i':
            if (wsc_parse_duration_ms(optarg, opt == 't' ? &lifetime.ttl_ms
                                                         : &lifetime.idle_timeout_ms) < 0)
                return wsc_usage_error("open: bad --%s '%s' (a number and a unit: 500ms, 90s, "
                                       "10m, 2h, 1d)",
                                       opt == 't' ? "ttl" : "idle-timeout", optarg);
            req.lifetime = &lifetime;
            break;
        case 'N':
            req.name = optarg;
            break;
        case 'F':
            req.from_snapshot = optarg;
            break;
        case 'P':
            req.from_path = optarg;
            break;
        case 'l':
        case 'e':
            r = wsc_kvs_add(opt == 'l' ? &labels : &env, optarg);
            if (r == -E2BIG)
                return wsc_usage_error("open: more than %d --%s", WSC_KV_MAX,
                                       opt == 'l' ? "label" : "env");
            if (r < 0)
                return wsc_usage_error("open: --%s wants KEY=VALUE, not '%s'",
                                       opt == 'l' ? "label" : "env", optarg);
            break;
        case 's':
            r = wsc_kvs_add_from_env(&secrets, optarg);
            if (r == -ENOENT)
                return wsc_usage_error("open: --secret-from-env %s: the variable %s is not set",
                                       optarg, optarg);
            if (r < 0)
                return wsc_usage_error("open: bad or more than %d --secret-from-env", WSC_KV_MAX);
            break;
        default:
            return bad_option(argv);
        }
    }
    r = need_args(argc, argv, 0, 0,
                  "--provider local-bash|local-sandbox|docker|memory "
                  "[--image I [--runtime runc|runsc]] [--allow cmd,...] [--network] "
                  "[--exec-mode agent|per-command] [--ttl D] [--idle-timeout D] [--name NAME] "
                  "[--label K=V]... [--env K=V]... [--secret-from-env NAME]...");
    if (r)
        return r;

    if (strcmp(provider, "memory") == 0) {
        req.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_MEMORY;
        req.memory = &mem;
    } else if (strcmp(provider, "local-bash") == 0) {
        req.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_BASH;
        req.local_bash = &bash;
    } else if (strcmp(provider, "local-sandbox") == 0) {
        req.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_SANDBOX;
        req.local_sandbox = &sandbox;
    } else if (strcmp(provider, "docker") == 0) {
        if (!image)
            return wsc_usage_error("open: --provider docker needs --image");
        docker.image = (char *)image;
        /* Any name goes to the server, which knows the daemon's runtimes
         * and refuses one it cannot use. */
        if (runtime)
            docker.runtime = (char *)runtime;
        req.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_DOCKER;
        req.docker = &docker;
    } else {
        return wsc_usage_error("open: unknown provider '%s'", provider);
    }
    if (image && req.provider_case != WORKSPACE__V1__OPEN_REQUEST__PROVIDER_DOCKER)
        return wsc_usage_error("open: --image is for --provider docker");
    if (runtime && req.provider_case != WORKSPACE__V1__OPEN_REQUEST__PROVIDER_DOCKER)
        return wsc_usage_error("open: --runtime is for --provider docker");
    /* NETWORK_ALLOW, which the operator's policy must allow. */
    if (network && req.provider_case == WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_SANDBOX)
        sandbox.network = WORKSPACE__V1__NETWORK__NETWORK_ALLOW;
    else if (network && req.provider_case == WORKSPACE__V1__OPEN_REQUEST__PROVIDER_DOCKER)
        docker.network = WORKSPACE__V1__NETWORK__NETWORK_ALLOW;
    else if (network)
        return wsc_usage_error("open: --network is for --provider local-sandbox or docker");
    /* How the box's commands start (agent: one box, an agent in it). */
    if (exec_mode && req.provider_case == WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_SANDBOX)
        sandbox.exec_mode = exec_mode;
    else if (exec_mode && req.provider_case == WORKSPACE__V1__OPEN_REQUEST__PROVIDER_DOCKER)
        docker.exec_mode = exec_mode;
    else if (exec_mode)
        return wsc_usage_error("open: --exec-mode is for --provider local-sandbox or docker");

    caps.fs = &fs;
    /* The memory provider has no shell; declaring one would fail Open. */
    if (req.provider_case != WORKSPACE__V1__OPEN_REQUEST__PROVIDER_MEMORY || allow) {
        for (char *tok = allow ? strtok(allow, ",") : NULL; tok; tok = strtok(NULL, ",")) {
            if (n_allowed == ALLOW_MAX)
                return wsc_usage_error("open: more than %d commands in --allow", ALLOW_MAX);
            if (*tok)
                allowed[n_allowed++] = tok;
        }
        shell.allowed_commands = allowed;
        shell.n_allowed_commands = n_allowed;
        shell.max_duration_ms = max_ms;
        caps.shell = &shell;
    }
    req.capabilities = &caps;
    FILL_MAP(&labels, label_e, label_p, workspace__v1__open_request__labels_entry__init);
    req.labels = label_p;
    req.n_labels = labels.n;
    FILL_MAP(&env, env_e, env_p, workspace__v1__open_request__env_entry__init);
    req.env = env_p;
    req.n_env = env.n;
    FILL_MAP(&secrets, secret_e, secret_p, workspace__v1__open_request__secrets_entry__init);
    req.secrets = secret_p;
    req.n_secrets = secrets.n;
    /* One id for every attempt below: a retry whose first try did open a
     * workspace (the answer was lost) gets that workspace, not a second. */
    r = wsc_request_id(request_id);
    if (r < 0)
        return wsc_report_errno("open: request id", r);
    req.request_id = request_id;

    for (int attempt = 1;; attempt++) {
        r = wsc_unary(ctx->cl, "/workspace.v1.Workspaces/Open", &req.base,
                      &workspace__v1__open_response__descriptor, (ProtobufCMessage **)&resp, &err);
        if (r != -EREMOTEIO || attempt == OPEN_ATTEMPTS || !transient(&err))
            break;
        struct timespec ts = {.tv_sec = 0,
                              .tv_nsec = (long)OPEN_BACKOFF_MS * 1000000L << (attempt - 1)};
        while (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        nanosleep(&ts, NULL);
    }
    if (r == -EREMOTEIO)
        return wsc_report(&err);
    if (r < 0)
        return wsc_report_errno("open", r);
    r = print_workspace(ctx, resp->workspace, "");
    workspace__v1__open_response__free_unpacked(resp, NULL);
    return r;
}

int wsc_cmd_resolve(struct wsc_ctx *ctx, int argc, char **argv)
{
    Workspace__V1__ResolveRequest req = WORKSPACE__V1__RESOLVE_REQUEST__INIT;
    Workspace__V1__WorkspaceRef ref = WORKSPACE__V1__WORKSPACE_REF__INIT;
    Workspace__V1__ResolveResponse *resp = NULL;
    uint8_t *token = NULL;
    size_t len = 0;
    int r;

    opts_reset();
    if (next_opt(argc, argv, "", (const struct option[]){{NULL, 0, NULL, 0}}) != -1)
        return bad_option(argv);
    r = need_args(argc, argv, 1, 1, "REF");
    if (r)
        return r;
    if (wsc_base64_decode(argv[optind], &token, &len) < 0)
        return wsc_usage_error("resolve: REF is not base64");
    ref.token.data = token;
    ref.token.len = len;
    req.ref = &ref;
    r = unary(ctx, "/workspace.v1.Workspaces/Resolve", &req,
              &workspace__v1__resolve_response__descriptor, &resp);
    free(token);
    if (r)
        return r;
    r = print_workspace(ctx, resp->workspace, wsc_client_node(ctx->cl));
    workspace__v1__resolve_response__free_unpacked(resp, NULL);
    return r;
}

int wsc_cmd_close(struct wsc_ctx *ctx, int argc, char **argv)
{
    Workspace__V1__CloseRequest req = WORKSPACE__V1__CLOSE_REQUEST__INIT;
    Workspace__V1__CloseResponse *resp = NULL;
    int r;

    opts_reset();
    if (next_opt(argc, argv, "", (const struct option[]){{NULL, 0, NULL, 0}}) != -1)
        return bad_option(argv);
    r = need_args(argc, argv, 1, 1, "WS");
    if (r)
        return r;
    req.workspace_id = argv[optind];
    r = unary(ctx, "/workspace.v1.Workspaces/Close", &req,
              &workspace__v1__close_response__descriptor, &resp);
    if (r)
        return r;
    if (ctx->json)
        r = wsc_json_emit(json_pack("{s:s, s:b}", "id", req.workspace_id, "already_closed",
                                    resp->already_closed)) < 0;
    workspace__v1__close_response__free_unpacked(resp, NULL);
    return r;
}

/* Describe's name, labels, lifetime, env and secrets. Secrets by name
 * only: the server never sends a value. */
static void print_lifecycle(const Workspace__V1__DescribeResponse *resp)
{
    char t[64], ttl[64], idle[64];

    printf("name:        %s\n", resp->name[0] ? resp->name : "-");
    printf("labels:      ");
    wsc_print_map(stdout, resp->labels, resp->n_labels, " ");
    wsc_format_time(resp->expires_at_unix_ms, t, sizeof(t));
    printf("\nexpires:     %s\n", t);
    wsc_format_duration(resp->lifetime ? resp->lifetime->ttl_ms : 0, ttl, sizeof(ttl));
    wsc_format_duration(resp->lifetime ? resp->lifetime->idle_timeout_ms : 0, idle, sizeof(idle));
    printf("lifetime:    ttl=%s idle_timeout=%s\n", ttl, idle);
    if (resp->last_activity_at_unix_ms) {
        wsc_format_time(resp->last_activity_at_unix_ms, t, sizeof(t));
        printf("activity:    %s\n", t);
    }
    printf("env:         ");
    wsc_print_map(stdout, resp->env, resp->n_env, " ");
    printf("\nsecrets:     ");
    for (size_t i = 0; i < resp->n_secret_names; i++)
        printf("%s%s", i ? " " : "", resp->secret_names[i]);
    printf(resp->n_secret_names ? "" : "-");
    if (resp->secrets_missing)
        printf(" (MISSING: the server restarted; give them again with wsctl set-secrets)");
    printf("\n");
}

int wsc_cmd_describe(struct wsc_ctx *ctx, int argc, char **argv)
{
    Workspace__V1__DescribeRequest req = WORKSPACE__V1__DESCRIBE_REQUEST__INIT;
    Workspace__V1__DescribeResponse *resp = NULL;
    int r;

    opts_reset();
    if (next_opt(argc, argv, "", (const struct option[]){{NULL, 0, NULL, 0}}) != -1)
        return bad_option(argv);
    r = need_args(argc, argv, 1, 1, "WS");
    if (r)
        return r;
    req.workspace_id = argv[optind];
    r = unary(ctx, "/workspace.v1.Workspaces/Describe", &req,
              &workspace__v1__describe_response__descriptor, &resp);
    if (r)
        return r;
    if (ctx->json) {
        r = wsc_json_emit(wsc_json_message(&resp->base)) < 0;
    } else {
        const ProtobufCEnumValue *st = protobuf_c_enum_descriptor_get_value(
            &workspace__v1__workspace_state__descriptor, (int)resp->state);
        printf("id:          %s\n", resp->id);
        printf("provider:    %s\n", resp->provider);
        printf("state:       %s\n", st ? st->name : "?");
        printf("isolation:   %s\n", resp->isolation);
        printf("containment: %s\n", resp->process_containment);
        /* 0 for a workspace without a user of its own (memory) and from a
         * server that predates per-workspace users. */
        printf("uid:         %" PRIu32 "\n", resp->uid);
        printf("gid:         %" PRIu32 "\n", resp->gid);
        if (resp->container)
            printf("runtime:     %s\n",
                   resp->container->runtime[0] ? resp->container->runtime : "-");
        if (resp->limits)
            printf("limits:      max_file_size_bytes=%" PRIu64 " max_duration_ms=%" PRIu64 "\n",
                   resp->limits->max_file_size_bytes, resp->limits->max_duration_ms);
        if (resp->capabilities && resp->capabilities->shell) {
            printf("allowed:    ");
            for (size_t i = 0; i < resp->capabilities->shell->n_allowed_commands; i++)
                printf(" %s", resp->capabilities->shell->allowed_commands[i]);
            printf("\n");
        }
        printf("operations: ");
        for (size_t i = 0; i < resp->n_operations; i++)
            printf(" %s", resp->operations[i]);
        printf("\n");
        if (resp->last_error[0])
            printf("last_error:  %s\n", resp->last_error);
        print_lifecycle(resp);
    }
    workspace__v1__describe_response__free_unpacked(resp, NULL);
    return r;
}

int wsc_cmd_providers(struct wsc_ctx *ctx, int argc, char **argv)
{
    Workspace__V1__ListProvidersRequest req = WORKSPACE__V1__LIST_PROVIDERS_REQUEST__INIT;
    Workspace__V1__ListProvidersResponse *resp = NULL;
    int r;

    opts_reset();
    if (next_opt(argc, argv, "", (const struct option[]){{NULL, 0, NULL, 0}}) != -1)
        return bad_option(argv);
    r = need_args(argc, argv, 0, 0, "");
    if (r)
        return r;
    r = unary(ctx, "/workspace.v1.Providers/ListProviders", &req,
              &workspace__v1__list_providers_response__descriptor, &resp);
    if (r)
        return r;
    if (ctx->json) {
        r = wsc_json_emit(wsc_json_message(&resp->base)) < 0;
    } else {
        for (size_t i = 0; i < resp->n_providers; i++) {
            const Workspace__V1__ProviderInfo *p = resp->providers[i];
            printf("%-14s %-13s %-19s %s\n", p->kind, p->available ? "available" : "unavailable",
                   p->isolation, p->reason);
        }
    }
    workspace__v1__list_providers_response__free_unpacked(resp, NULL);
    return r;
}

/* The stderr line of a listing the server cut short, with what cut it when
 * the server says ("max_results", "entries_budget", ...). */
static void print_truncated(const char *what, const char *reason)
{
    if (reason && reason[0])
        fprintf(stderr, "wsctl: %s truncated (%s)\n", what, reason);
    else
        fprintf(stderr, "wsctl: %s truncated\n", what);
}

int wsc_cmd_ls(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"depth", required_argument, NULL, 'd'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__ListDirRequest req = WORKSPACE__V1__LIST_DIR_REQUEST__INIT;
    Workspace__V1__ListDirResponse *resp = NULL;
    int opt, r;

    opts_reset();
    while ((opt = next_opt(argc, argv, "", longopts)) != -1) {
        if (opt != 'd')
            return bad_option(argv);
        if (parse_u32(optarg, &req.depth) < 0)
            return wsc_usage_error("ls: bad --depth '%s'", optarg);
    }
    r = need_args(argc, argv, 1, 2, "WS [PATH] [--depth N]");
    if (r)
        return r;
    req.workspace_id = argv[optind];
    req.path = optind + 1 < argc ? argv[optind + 1] : ".";
    r = unary(ctx, "/workspace.v1.FileSystem/ListDir", &req,
              &workspace__v1__list_dir_response__descriptor, &resp);
    if (r)
        return r;
    if (ctx->json) {
        r = wsc_json_emit(wsc_json_message(&resp->base)) < 0;
    } else {
        for (size_t i = 0; i < resp->n_entries; i++)
            wsc_print_file_info(resp->entries[i]);
        if (resp->truncated)
            print_truncated("listing", resp->truncated_reason);
    }
    workspace__v1__list_dir_response__free_unpacked(resp, NULL);
    return r;
}

int wsc_cmd_stat(struct wsc_ctx *ctx, int argc, char **argv)
{
    Workspace__V1__StatRequest req = WORKSPACE__V1__STAT_REQUEST__INIT;
    Workspace__V1__StatResponse *resp = NULL;
    int r;

    opts_reset();
    if (next_opt(argc, argv, "", (const struct option[]){{NULL, 0, NULL, 0}}) != -1)
        return bad_option(argv);
    r = need_args(argc, argv, 2, 2, "WS PATH");
    if (r)
        return r;
    req.workspace_id = argv[optind];
    req.path = argv[optind + 1];
    r = unary(ctx, "/workspace.v1.FileSystem/Stat", &req, &workspace__v1__stat_response__descriptor,
              &resp);
    if (r)
        return r;
    if (ctx->json) {
        r = wsc_json_emit(resp->info ? wsc_json_message(&resp->info->base) : json_object()) < 0;
    } else if (resp->info) {
        const Workspace__V1__FileInfo *fi = resp->info;
        const ProtobufCEnumValue *t =
            protobuf_c_enum_descriptor_get_value(&workspace__v1__file_type__descriptor, fi->type);
        printf("path:  %s\ntype:  %s\nsize:  %" PRIu64 "\nmode:  %04o\nmtime: %" PRId64
               ".%09" PRId64 "\nnlink: %" PRIu64 "\n",
               wsc_file_path(fi), t ? t->name + strlen("FILE_TYPE_") : "?", fi->size,
               fi->mode & 07777, fi->mtime_unix_ns / 1000000000, fi->mtime_unix_ns % 1000000000,
               fi->nlink);
    }
    workspace__v1__stat_response__free_unpacked(resp, NULL);
    return r;
}

/* Writes all of `len` bytes, retrying short writes. */
static int write_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int wsc_cmd_cat(struct wsc_ctx *ctx, int argc, char **argv)
{
    Workspace__V1__ReadFileRequest req = WORKSPACE__V1__READ_FILE_REQUEST__INIT;
    struct wsc_call *call = NULL;
    int r, ret = 0;

    opts_reset();
    if (next_opt(argc, argv, "", (const struct option[]){{NULL, 0, NULL, 0}}) != -1)
        return bad_option(argv);
    r = need_args(argc, argv, 2, 2, "WS PATH");
    if (r)
        return r;
    req.workspace_id = argv[optind];
    req.path = argv[optind + 1];

    r = wsc_call_new(ctx->cl, "/workspace.v1.FileSystem/ReadFile", &call);
    if (r < 0)
        return wsc_report_errno("cat", r);
    (void)wsc_call_send(call, &req.base, true);
    for (;;) {
        Workspace__V1__ReadFileResponse *m = NULL;

        r = wsc_call_recv(call, &workspace__v1__read_file_response__descriptor,
                          (ProtobufCMessage **)&m);
        if (r <= 0)
            break;
        if (ctx->json)
            r = wsc_json_emit(wsc_json_message(&m->base));
        else
            r = write_all(STDOUT_FILENO, m->data.data, m->data.len);
        workspace__v1__read_file_response__free_unpacked(m, NULL);
        if (r < 0) {
            /* Nobody reads our output any more: stop the transfer. */
            wsc_call_cancel(call);
            ret = wsc_report_errno("stdout", r);
            break;
        }
    }
    if (r < 0 && ret == 0 && r != -EPIPE)
        ret = wsc_report_errno("cat", r);
    if (wsc_call_status(call) < 0 && ret == 0)
        ret = wsc_report(wsc_call_error(call));
    wsc_call_free(call);
    return ret;
}

/* Reads until `cap` bytes or end of input. */
static ssize_t read_full(int fd, uint8_t *buf, size_t cap)
{
    size_t got = 0;

    while (got < cap) {
        ssize_t n = read(fd, buf + got, cap - got);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

/* "put PATH  42% [=====     ] 42.0/100.0 MiB", redrawn in place. */
static void progress(const char *path, uint64_t done, uint64_t total, bool final)
{
    const double mib = 1024.0 * 1024.0;

    if (total > 0) {
        int pct = (int)(done * 100 / total), bars = pct / 5;
        fprintf(stderr, "\rput %s %3d%% [%.*s%*s] %.1f/%.1f MiB", path, pct, bars,
                "====================", 20 - bars, "", done / mib, total / mib);
    } else {
        fprintf(stderr, "\rput %s %.1f MiB", path, done / mib);
    }
    if (final)
        fputc('\n', stderr);
    fflush(stderr);
}

int wsc_cmd_put(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"parents", no_argument, NULL, 'p'},
        {"mode", required_argument, NULL, 'm'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__WriteFileHeader hdr = WORKSPACE__V1__WRITE_FILE_HEADER__INIT;
    Workspace__V1__WriteFileRequest msg = WORKSPACE__V1__WRITE_FILE_REQUEST__INIT;
    Workspace__V1__WriteFileResponse *resp = NULL;
    struct wsc_call *call = NULL;
    uint8_t *bufs[2] = {NULL, NULL};
    ssize_t lens[2];
    int fd = STDIN_FILENO, cur = 0, opt, r, ret = 0;
    uint64_t total = 0, sent = 0;
    bool show = false, sent_ok = true;
    struct stat st;

    opts_reset();
    while ((opt = next_opt(argc, argv, "pm:", longopts)) != -1) {
        char *end;
        unsigned long mode;
        switch (opt) {
        case 'p':
            hdr.create_parents = true;
            break;
        case 'm':
            mode = strtoul(optarg, &end, 8);
            if (end == optarg || *end || mode > 0777)
                return wsc_usage_error("put: bad --mode '%s'", optarg);
            hdr.mode = (uint32_t)mode;
            break;
        default:
            return bad_option(argv);
        }
    }
    r = need_args(argc, argv, 2, 3, "WS PATH [FILE] [-p] [--mode OCTAL]");
    if (r)
        return r;
    hdr.workspace_id = argv[optind];
    hdr.path = argv[optind + 1];
    /* The last message carries finish: an interrupted upload, which can
     * reach the server looking like a half-close, never commits. */
    hdr.require_finish = true;
    if (optind + 2 < argc && strcmp(argv[optind + 2], "-") != 0) {
        fd = open(argv[optind + 2], O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return wsc_report_errno(argv[optind + 2], -errno);
    }
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        total = (uint64_t)st.st_size;
    show = !ctx->json && isatty(STDERR_FILENO);

    bufs[0] = malloc(PUT_CHUNK_BYTES);
    bufs[1] = malloc(PUT_CHUNK_BYTES);
    if (!bufs[0] || !bufs[1]) {
        ret = wsc_report_errno("put", -ENOMEM);
        goto out;
    }
    /* One chunk of read-ahead: the last data message must carry finish,
     * and only the next read tells which one is last. */
    lens[0] = read_full(fd, bufs[0], PUT_CHUNK_BYTES);
    if (lens[0] < 0) {
        ret = wsc_report_errno("read", (int)lens[0]);
        goto out;
    }
    r = wsc_call_new(ctx->cl, "/workspace.v1.FileSystem/WriteFile", &call);
    if (r < 0) {
        ret = wsc_report_errno("put", r);
        goto out;
    }
    msg.msg_case = WORKSPACE__V1__WRITE_FILE_REQUEST__MSG_HEADER;
    msg.header = &hdr;
    msg.finish = lens[0] == 0;
    /* The message that finishes the file half-closes the call too: a
     * front proxy that sees the response end while the request is still
     * open may reset the stream (HAProxy 2.6: RST_STREAM CANCEL), and the client
     * would see CANCELLED for a file that was written. */
    if (wsc_call_send(call, &msg.base, msg.finish) < 0)
        sent_ok = false;
    while (sent_ok && lens[cur] > 0) {
        int nxt = 1 - cur;

        lens[nxt] = read_full(fd, bufs[nxt], PUT_CHUNK_BYTES);
        if (lens[nxt] < 0) {
            /* A broken input must not commit a truncated file. */
            wsc_call_cancel(call);
            ret = wsc_report_errno("read", (int)lens[nxt]);
            sent_ok = false;
            break;
        }
        msg.msg_case = WORKSPACE__V1__WRITE_FILE_REQUEST__MSG_DATA;
        msg.data.data = bufs[cur];
        msg.data.len = (size_t)lens[cur];
        msg.finish = lens[nxt] == 0;
        if (wsc_call_send(call, &msg.base, msg.finish) < 0) {
            sent_ok = false;
            break;
        }
        sent += (uint64_t)lens[cur];
        if (show && (total >= PROGRESS_MIN_BYTES || (total == 0 && sent >= PROGRESS_MIN_BYTES)))
            progress(hdr.path, sent, total, lens[nxt] == 0);
        cur = nxt;
    }
    if (ret == 0) {
        r = wsc_call_recv(call, &workspace__v1__write_file_response__descriptor,
                          (ProtobufCMessage **)&resp);
        if (r < 0)
            ret = wsc_report_errno("put", r);
    }
    if (wsc_call_status(call) < 0) {
        if (ret == 0 || ret == WSC_EXIT_OK)
            ret = wsc_report(wsc_call_error(call));
    } else if (ret == 0 && resp) {
        if (ctx->json)
            ret = wsc_json_emit(wsc_json_message(&resp->base)) < 0;
    } else if (ret == 0) {
        ret = wsc_report_errno("put", -EBADMSG);
    }
out:
    if (resp)
        workspace__v1__write_file_response__free_unpacked(resp, NULL);
    wsc_call_free(call);
    free(bufs[0]);
    free(bufs[1]);
    if (fd != STDIN_FILENO)
        close(fd);
    return ret;
}

int wsc_cmd_rm(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"recursive", no_argument, NULL, 'r'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__RemoveRequest req = WORKSPACE__V1__REMOVE_REQUEST__INIT;
    Workspace__V1__RemoveResponse *resp = NULL;
    int opt, r;

    opts_reset();
    while ((opt = next_opt(argc, argv, "r", longopts)) != -1) {
        if (opt != 'r')
            return bad_option(argv);
        req.recursive = true;
    }
    r = need_args(argc, argv, 2, 2, "WS PATH [-r]");
    if (r)
        return r;
    req.workspace_id = argv[optind];
    req.path = argv[optind + 1];
    r = unary(ctx, "/workspace.v1.FileSystem/Remove", &req,
              &workspace__v1__remove_response__descriptor, &resp);
    if (r)
        return r;
    if (ctx->json)
        r = wsc_json_emit(wsc_json_message(&resp->base)) < 0;
    workspace__v1__remove_response__free_unpacked(resp, NULL);
    return r;
}

int wsc_cmd_mkdir(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"parents", no_argument, NULL, 'p'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__MakeDirRequest req = WORKSPACE__V1__MAKE_DIR_REQUEST__INIT;
    Workspace__V1__MakeDirResponse *resp = NULL;
    int opt, r;

    opts_reset();
    while ((opt = next_opt(argc, argv, "p", longopts)) != -1) {
        if (opt != 'p')
            return bad_option(argv);
        req.parents = true;
    }
    r = need_args(argc, argv, 2, 2, "WS PATH [-p]");
    if (r)
        return r;
    req.workspace_id = argv[optind];
    req.path = argv[optind + 1];
    r = unary(ctx, "/workspace.v1.FileSystem/MakeDir", &req,
              &workspace__v1__make_dir_response__descriptor, &resp);
    if (r)
        return r;
    if (ctx->json)
        r = wsc_json_emit(resp->info ? wsc_json_message(&resp->info->base) : json_object()) < 0;
    workspace__v1__make_dir_response__free_unpacked(resp, NULL);
    return r;
}

int wsc_cmd_mv(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"force", no_argument, NULL, 'f'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__MoveRequest req = WORKSPACE__V1__MOVE_REQUEST__INIT;
    Workspace__V1__MoveResponse *resp = NULL;
    int opt, r;

    opts_reset();
    while ((opt = next_opt(argc, argv, "f", longopts)) != -1) {
        if (opt != 'f')
            return bad_option(argv);
        req.replace = true;
    }
    r = need_args(argc, argv, 3, 3, "WS FROM TO [-f]");
    if (r)
        return r;
    req.workspace_id = argv[optind];
    req.from_path = argv[optind + 1];
    req.to_path = argv[optind + 2];
    r = unary(ctx, "/workspace.v1.FileSystem/Move", &req, &workspace__v1__move_response__descriptor,
              &resp);
    if (r)
        return r;
    if (ctx->json)
        r = wsc_json_emit(resp->info ? wsc_json_message(&resp->info->base) : json_object()) < 0;
    workspace__v1__move_response__free_unpacked(resp, NULL);
    return r;
}

int wsc_cmd_glob(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"path", required_argument, NULL, 'P'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__GlobRequest req = WORKSPACE__V1__GLOB_REQUEST__INIT;
    Workspace__V1__GlobResponse *resp = NULL;
    int opt, r;

    opts_reset();
    while ((opt = next_opt(argc, argv, "", longopts)) != -1) {
        if (opt != 'P')
            return bad_option(argv);
        req.path = optarg;
    }
    r = need_args(argc, argv, 2, 2, "WS PATTERN [--path DIR]");
    if (r)
        return r;
    req.workspace_id = argv[optind];
    req.pattern = argv[optind + 1];
    r = unary(ctx, "/workspace.v1.FileSystem/Glob", &req, &workspace__v1__glob_response__descriptor,
              &resp);
    if (r)
        return r;
    if (ctx->json) {
        r = wsc_json_emit(wsc_json_message(&resp->base)) < 0;
    } else {
        for (size_t i = 0; i < resp->n_matches; i++)
            printf("%s\n", wsc_file_path(resp->matches[i]));
        if (resp->truncated)
            print_truncated("results", resp->truncated_reason);
    }
    workspace__v1__glob_response__free_unpacked(resp, NULL);
    return r;
}

int wsc_cmd_grep(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"ignore-case", no_argument, NULL, 'i'},
        {"include", required_argument, NULL, 'I'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__GrepRequest req = WORKSPACE__V1__GREP_REQUEST__INIT;
    struct wsc_call *call = NULL;
    uint64_t matches = 0;
    int opt, r, ret = 0;

    opts_reset();
    while ((opt = next_opt(argc, argv, "i", longopts)) != -1) {
        if (opt == 'i')
            req.ignore_case = true;
        else if (opt == 'I')
            req.include = optarg;
        else
            return bad_option(argv);
    }
    r = need_args(argc, argv, 2, 3, "WS PATTERN [PATH] [-i] [--include GLOB]");
    if (r)
        return r;
    req.workspace_id = argv[optind];
    req.pattern = argv[optind + 1];
    if (optind + 2 < argc)
        req.path = argv[optind + 2];

    r = wsc_call_new(ctx->cl, "/workspace.v1.FileSystem/Grep", &call);
    if (r < 0)
        return wsc_report_errno("grep", r);
    (void)wsc_call_send(call, &req.base, true);
    for (;;) {
        Workspace__V1__GrepResponse *m = NULL;

        r = wsc_call_recv(call, &workspace__v1__grep_response__descriptor, (ProtobufCMessage **)&m);
        if (r <= 0)
            break;
        /* JSON: one line per streamed message, matches and then the
         * summary, so a consumer can act before the walk ends. */
        if (ctx->json) {
            wsc_json_emit(wsc_json_message(&m->base));
        } else {
            for (size_t i = 0; i < m->n_matches; i++) {
                const Workspace__V1__GrepMatch *g = m->matches[i];
                printf("%s:%" PRIu64 ":", g->path[0] ? g->path : "?", g->line_number);
                fwrite(g->line.data, 1, g->line.len, stdout);
                fputc('\n', stdout);
            }
        }
        matches += m->n_matches;
        workspace__v1__grep_response__free_unpacked(m, NULL);
    }
    if (r < 0)
        ret = wsc_report_errno("grep", r);
    if (wsc_call_status(call) < 0 && ret == 0)
        ret = wsc_report(wsc_call_error(call));
    wsc_call_free(call);
    /* Like grep(1): no match is status 1, without an error line. */
    if (ret == 0 && matches == 0)
        ret = WSC_EXIT_FAIL;
    return ret;
}

/* Pages through the whole log (next_seq); the verdict is the last page's,
 * which read the whole file again. Records are printed as the server
 * stored them, one JSON line each; the verdict goes to stderr. */
int wsc_cmd_audit(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {{"json", no_argument, NULL, 'j'}, {NULL, 0, NULL, 0}};
    Workspace__V1__ReadAuditRequest req = WORKSPACE__V1__READ_AUDIT_REQUEST__INIT;
    Workspace__V1__ReadAuditResponse *resp = NULL;
    json_t *records = NULL;
    bool ok = false;
    int c, r;

    opts_reset();
    while ((c = next_opt(argc, argv, "", longopts)) != -1) {
        if (c != 'j')
            return bad_option(argv);
        ctx->json = true;
    }
    r = need_args(argc, argv, 1, 1, "WS [--json]");
    if (r)
        return r;
    req.workspace_id = argv[optind];
    req.from_seq = 1;
    if (ctx->json && !(records = json_array()))
        return wsc_report_errno("audit", -ENOMEM);
    for (;;) {
        if (resp)
            workspace__v1__read_audit_response__free_unpacked(resp, NULL);
        resp = NULL;
        r = unary(ctx, "/workspace.v1.Workspaces/ReadAudit", &req,
                  &workspace__v1__read_audit_response__descriptor, &resp);
        if (r) {
            json_decref(records);
            return r;
        }
        for (size_t i = 0; i < resp->n_records; i++) {
            if (!ctx->json) {
                printf("%s\n", resp->records[i]->json);
                continue;
            }
            json_t *rec = json_loads(resp->records[i]->json, 0, NULL);
            json_array_append_new(records, rec ? rec : json_string(resp->records[i]->json));
        }
        if (!resp->next_seq)
            break;
        req.from_seq = resp->next_seq;
    }
    const Workspace__V1__AuditVerification *v = resp->verification;
    const ProtobufCEnumValue *pv =
        v ? protobuf_c_enum_descriptor_get_value(&workspace__v1__audit_problem__descriptor,
                                                 (int)v->problem)
          : NULL;
    const char *problem = pv ? pv->name + strlen("AUDIT_PROBLEM_") : "UNKNOWN";
    ok = v && v->ok;
    if (ctx->json) {
        json_t *j =
            json_pack("{s:s, s:o, s:{s:b, s:s, s:I, s:s, s:I}}", "id", req.workspace_id, "records",
                      records, "verification", "ok", ok, "problem", problem, "bad_seq",
                      (json_int_t)(v ? v->bad_seq : 0), "detail", v ? v->detail : "",
                      "verified_records", (json_int_t)(v ? v->verified_records : 0));
        if (wsc_json_emit(j) < 0)
            ok = false;
    } else if (ok) {
        fprintf(stderr, "audit: ok, %" PRIu64 " records verified\n", v->verified_records);
    } else {
        fprintf(stderr, "audit: %s at seq %" PRIu64 ": %s\n", problem, v ? v->bad_seq : 0,
                v ? v->detail : "no verification in the answer");
    }
    fflush(stdout);
    workspace__v1__read_audit_response__free_unpacked(resp, NULL);
    return ok ? 0 : WSC_EXIT_AUDIT;
}
