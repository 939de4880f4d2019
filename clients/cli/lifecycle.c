/* Workspace lifecycle commands of wsctl: list (by labels and name, every
 * page), extend (a new ttl or idle timeout) and set-secrets. Secret values
 * come from wsctl's own environment and are never printed.
 */
#include "clients/cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clients/cli/args.h"
#include "clients/cli/output.h"
#include "workspace/v1/workspaces.pb-c.h"

/* The longest label selector wsctl builds from its -l options. */
#define SELECTOR_MAX 8192
/* Pages list follows at most: a server whose tokens never end would
 * otherwise keep it busy forever. */
#define LIST_PAGES_MAX 100000

/* Runs a unary RPC; on failure prints the error line. 0 or an exit
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

static const char *state_name(Workspace__V1__WorkspaceState st)
{
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&workspace__v1__workspace_state__descriptor, (int)st);

    if (!v)
        return "?";
    return strncmp(v->name, "STATE_", 6) == 0 ? v->name + 6 : v->name;
}

static void print_summary(const Workspace__V1__WorkspaceSummary *w)
{
    char expires[64];

    wsc_format_time(w->expires_at_unix_ms, expires, sizeof(expires));
    printf("%-35s %-13s %-9s %-20s %-20s ", w->id, w->provider, state_name(w->state),
           w->name[0] ? w->name : "-", expires);
    wsc_print_map(stdout, w->labels, w->n_labels, ",");
    printf("\n");
}

int wsc_cmd_list(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"selector", required_argument, NULL, 'l'},
        {"name", required_argument, NULL, 'N'},
        {"page-size", required_argument, NULL, 'P'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__ListRequest req = WORKSPACE__V1__LIST_REQUEST__INIT;
    char *selector = calloc(1, SELECTOR_MAX);
    char *token = NULL;
    json_t *all = NULL;
    size_t len = 0;
    int opt, r = WSC_EXIT_FAIL;

    if (!selector)
        return wsc_report_errno("list", -ENOMEM);
    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "l:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'l': {
            size_t n = strlen(optarg);
            /* Requirements are ANDed, given in one -l or in several. */
            if (len + n + 2 > SELECTOR_MAX) {
                r = wsc_usage_error("list: selectors longer than %d bytes", SELECTOR_MAX);
                goto out;
            }
            if (len)
                selector[len++] = ',';
            memcpy(selector + len, optarg, n + 1);
            len += n;
            break;
        }
        case 'N':
            req.name = optarg;
            break;
        case 'P': {
            char *end;
            unsigned long v;
            errno = 0;
            v = strtoul(optarg, &end, 10);
            if (errno || end == optarg || *end || v == 0 || v > UINT32_MAX) {
                r = wsc_usage_error("list: bad --page-size '%s'", optarg);
                goto out;
            }
            req.page_size = (uint32_t)v;
            break;
        }
        default:
            r = wsc_usage_error("list: unknown option or missing value");
            goto out;
        }
    }
    if (optind != argc) {
        r = wsc_usage_error("usage: wsctl list [-l SELECTOR]... [--name NAME] [--page-size N]");
        goto out;
    }
    req.label_selector = selector;
    if (ctx->json) {
        all = json_array();
        if (!all) {
            r = wsc_report_errno("list", -ENOMEM);
            goto out;
        }
    } else {
        printf("%-35s %-13s %-9s %-20s %-20s %s\n", "ID", "PROVIDER", "STATE", "NAME", "EXPIRES",
               "LABELS");
    }
    for (int page = 0;; page++) {
        Workspace__V1__ListResponse *resp = NULL;

        if (page == LIST_PAGES_MAX) {
            fprintf(stderr, "wsctl: list: more than %d pages; stopped\n", LIST_PAGES_MAX);
            r = WSC_EXIT_FAIL;
            goto out;
        }
        req.page_token = token ? token : "";
        r = unary(ctx, "/workspace.v1.Workspaces/List", &req,
                  &workspace__v1__list_response__descriptor, &resp);
        if (r)
            goto out;
        for (size_t i = 0; i < resp->n_workspaces; i++) {
            if (all)
                json_array_append_new(all, wsc_json_message(&resp->workspaces[i]->base));
            else
                print_summary(resp->workspaces[i]);
        }
        free(token);
        token = resp->next_page_token[0] ? strdup(resp->next_page_token) : NULL;
        r = resp->next_page_token[0] && !token ? -ENOMEM : 0;
        workspace__v1__list_response__free_unpacked(resp, NULL);
        if (r < 0) {
            r = wsc_report_errno("list", r);
            goto out;
        }
        if (!token)
            break;
    }
    r = 0;
    if (all) {
        r = wsc_json_emit(json_pack("{s:o}", "workspaces", all)) < 0 ? WSC_EXIT_FAIL : 0;
        all = NULL;
    }
out:
    json_decref(all);
    free(token);
    free(selector);
    return r;
}

int wsc_cmd_extend(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"ttl", required_argument, NULL, 't'},
        {"idle-timeout", required_argument, NULL, 'i'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__ExtendRequest req = WORKSPACE__V1__EXTEND_REQUEST__INIT;
    Workspace__V1__Lifetime lifetime = WORKSPACE__V1__LIFETIME__INIT;
    Workspace__V1__ExtendResponse *resp = NULL;
    bool given = false;
    int opt, r;

    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if ((opt != 't' && opt != 'i') ||
            wsc_parse_duration_ms(optarg,
                                  opt == 't' ? &lifetime.ttl_ms : &lifetime.idle_timeout_ms) < 0)
            return wsc_usage_error("extend: bad option or duration (a number and a unit: 500ms, "
                                   "90s, 10m, 2h, 1d)");
        given = true;
    }
    if (argc - optind != 1 || !given)
        return wsc_usage_error("usage: wsctl extend WS [--ttl D] [--idle-timeout D] (one or both)");
    req.workspace_id = argv[optind];
    req.lifetime = &lifetime;
    r = unary(ctx, "/workspace.v1.Workspaces/Extend", &req,
              &workspace__v1__extend_response__descriptor, &resp);
    if (r)
        return r;
    if (ctx->json) {
        r = wsc_json_emit(wsc_json_message(&resp->base)) < 0;
    } else {
        char t[64], ttl[64], idle[64];
        wsc_format_time(resp->expires_at_unix_ms, t, sizeof(t));
        wsc_format_duration(resp->lifetime ? resp->lifetime->ttl_ms : 0, ttl, sizeof(ttl));
        wsc_format_duration(resp->lifetime ? resp->lifetime->idle_timeout_ms : 0, idle,
                            sizeof(idle));
        printf("expires:  %s\nlifetime: ttl=%s idle_timeout=%s\n", t, ttl, idle);
    }
    workspace__v1__extend_response__free_unpacked(resp, NULL);
    return r;
}

int wsc_cmd_set_secrets(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"secret-from-env", required_argument, NULL, 's'},
        {"replace", no_argument, NULL, 'r'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__SetSecretsRequest req = WORKSPACE__V1__SET_SECRETS_REQUEST__INIT;
    Workspace__V1__SetSecretsRequest__SecretsEntry entry[WSC_KV_MAX], *entryp[WSC_KV_MAX];
    Workspace__V1__SetSecretsResponse *resp = NULL;
    struct wsc_kvs secrets = {0};
    int opt, r;

    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case 's':
            r = wsc_kvs_add_from_env(&secrets, optarg);
            if (r == -ENOENT)
                return wsc_usage_error("set-secrets: --secret-from-env %s: the variable %s is "
                                       "not set",
                                       optarg, optarg);
            if (r < 0)
                return wsc_usage_error("set-secrets: bad or more than %d --secret-from-env",
                                       WSC_KV_MAX);
            break;
        case 'r':
            req.replace = true;
            break;
        default:
            return wsc_usage_error("set-secrets: unknown option or missing value");
        }
    }
    if (argc - optind != 1 || (secrets.n == 0 && !req.replace))
        return wsc_usage_error("usage: wsctl set-secrets WS --secret-from-env NAME... [--replace]");
    req.workspace_id = argv[optind];
    for (size_t i = 0; i < secrets.n; i++) {
        workspace__v1__set_secrets_request__secrets_entry__init(&entry[i]);
        entry[i].key = (char *)secrets.key[i];
        entry[i].value = (char *)secrets.value[i];
        entryp[i] = &entry[i];
    }
    req.secrets = entryp;
    req.n_secrets = secrets.n;
    r = unary(ctx, "/workspace.v1.Workspaces/SetSecrets", &req,
              &workspace__v1__set_secrets_response__descriptor, &resp);
    if (r)
        return r;
    if (ctx->json) {
        r = wsc_json_emit(wsc_json_message(&resp->base)) < 0;
    } else {
        printf("secrets:");
        for (size_t i = 0; i < resp->n_secret_names; i++)
            printf(" %s", resp->secret_names[i]);
        printf(resp->secrets_missing ? " (some still missing)\n" : "\n");
    }
    workspace__v1__set_secrets_response__free_unpacked(resp, NULL);
    return r;
}
