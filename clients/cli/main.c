/* wsctl: the command-line console of workspaced. Parses the global
 * options (--addr, --token, the --tls* family, --node, --json, or their
 * WORKSPACED_* environment variables), connects, and hands the rest of the
 * command line to one command.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clients/cli/cli.h"
#include "clients/cli/output.h"
#include "server/base/version.h"

/* The server's default listener. gRPC dials unix:PATH targets itself. */
#define ADDR_DEFAULT "unix:/run/workspaced/workspaced.sock"
/* Largest PEM file wsctl reads: a long chain is a few tens of KiB. */
#define PEM_MAX (1024 * 1024)

static const struct command {
    const char *name;
    int (*run)(struct wsc_ctx *ctx, int argc, char **argv);
    const char *usage;
} commands[] = {
    {"open", wsc_cmd_open,
     "--provider local-bash|local-sandbox|docker|memory\n"
     "              [--image I [--runtime runc|runsc]] [--allow cmd,...] [--network]\n"
     "              [--exec-mode agent|per-command]\n"
     "              [--ttl D] [--idle-timeout D] [--name NAME] [--label K=V]...\n"
     "              [--env K=V]... [--secret-from-env NAME]...\n"
     "              [--from-snapshot SNAPSHOT | --from-path HOSTDIR]"},
    {"list", wsc_cmd_list, "[-l SELECTOR]... [--name NAME] [--page-size N]"},
    {"extend", wsc_cmd_extend, "WS [--ttl D] [--idle-timeout D]"},
    {"set-secrets", wsc_cmd_set_secrets, "WS --secret-from-env NAME... [--replace]"},
    {"resolve", wsc_cmd_resolve, "REF"},
    {"close", wsc_cmd_close, "WS"},
    {"describe", wsc_cmd_describe, "WS"},
    {"providers", wsc_cmd_providers, ""},
    {"ls", wsc_cmd_ls, "WS [PATH] [--depth N]"},
    {"stat", wsc_cmd_stat, "WS PATH"},
    {"cat", wsc_cmd_cat, "WS PATH"},
    {"put", wsc_cmd_put, "WS PATH [FILE] [-p] [--mode OCTAL]"},
    {"rm", wsc_cmd_rm, "WS PATH [-r]"},
    {"mkdir", wsc_cmd_mkdir, "WS PATH [-p]"},
    {"mv", wsc_cmd_mv, "WS FROM TO [-f]"},
    {"glob", wsc_cmd_glob, "WS PATTERN [--path DIR]"},
    {"grep", wsc_cmd_grep, "WS PATTERN [PATH] [-i] [--include GLOB]"},
    {"cp", wsc_cmd_cp, "-r [-z] [--merge|--replace] LOCALDIR WS:PATH | WS:PATH LOCALDIR"},
    {"watch", wsc_cmd_watch, "WS [PATH] [-r] [--include GLOB]... [--exclude GLOB]..."},
    {"snapshot", wsc_cmd_snapshot, "WS [--name NAME] [--label K=V]..."},
    {"snapshots", wsc_cmd_snapshots, "[--workspace WS] [-l SELECTOR] [--name NAME]"},
    {"delete-snapshot", wsc_cmd_delete_snapshot, "SNAPSHOT"},
    {"restore", wsc_cmd_restore, "WS SNAPSHOT [-f]"},
    {"exec", wsc_cmd_exec,
     "WS [-i] [-t [--detach-keys K]] [--timeout D] [--tag T] [--cwd DIR]\n"
     "              [-e K=V] [--secret NAME]... [--background] -- argv..."},
    {"attach", wsc_cmd_attach, "WS TAG|ID [--offset N] [-i] [-t [--detach-keys K]]"},
    {"ps", wsc_cmd_ps, "WS"},
    {"kill", wsc_cmd_kill, "WS TAG|ID [-s SIG]"},
    {"audit", wsc_cmd_audit, "WS [--json]   (exit 3: the log does not verify)"},
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: wsctl [--addr ADDR] [--token T] [TLS options] [--node NAME] [--json]\n"
               "             COMMAND ...\n"
               "       wsctl --version\n"
               "  ADDR is HOST:PORT, or unix:/PATH for the server's unix socket\n"
               "  address and token default to $WORKSPACED_ADDR (else " ADDR_DEFAULT ")\n"
               "  and $WORKSPACED_TOKEN\n"
               "  --node NAME  behind a front proxy, send every call about a workspace to\n"
               "               this node (x-workspace-node; $WORKSPACED_NODE): the node\n"
               "               `open` printed after the id\n"
               "\nTLS options (any of them, or of their variables, turns TLS on):\n"
               "  --tls                   TLS, verifying the server with the system roots\n"
               "  --tls-ca FILE           verify the server with these CAs (PEM)\n"
               "                          ($WORKSPACED_TLS_CA)\n"
               "  --tls-cert FILE         client certificate (PEM) for mutual TLS, with\n"
               "  --tls-key FILE          its key ($WORKSPACED_TLS_CERT, $WORKSPACED_TLS_KEY)\n"
               "  --tls-server-name NAME  the name the server's certificate must carry,\n"
               "                          when it is not the address's host\n"
               "  A token sent in plaintext to an address other than loopback or a unix\n"
               "  socket draws a warning on stderr: it crosses the network in the clear.\n"
               "\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].usage);
    fprintf(f, "\nD, a duration, is a number and a unit: 500ms, 90s, 10m, 2h, 1d (a bare number\n"
               "is seconds). --ttl: the workspace expires that long after open (extend: after\n"
               "now); --idle-timeout: it expires after that long without activity.\n"
               "--label K=V labels a workspace; list -l takes a selector: k=v, k!=v, k, !k,\n"
               "comma-separated or in several -l, all of which must hold.\n"
               "--secret-from-env NAME sends the value of wsctl's own variable NAME as the\n"
               "secret NAME (never printed); exec --secret NAME puts it in the command's\n"
               "environment.\n"
               "\nexec -t and attach -t make the local terminal raw: Ctrl-C, Ctrl-Z and Ctrl-\\\n"
               "go to the remote terminal, and the detach keys (default ctrl-p,ctrl-q; docker's\n"
               "syntax; --detach-keys \"\" turns detaching off) leave the command running:\n"
               "`wsctl attach WS TAG -i -t` picks it up again. -i without -t forwards stdin and\n"
               "closes the command's at EOF; without -t Ctrl-C cancels the remote command\n"
               "(exit 130). exec --background -i keeps the command's stdin open for a later\n"
               "attach -i.\n");
}

/* Reads a PEM file named by `what` (the option or variable it came from)
 * into a NUL-terminated string. WSC_EXIT_OK with *ret_text, else prints
 * one line and returns WSC_EXIT_FAIL. */
static int read_pem(const char *what, const char *path, char **ret_text)
{
    FILE *f = fopen(path, "re");
    char *text = NULL;
    size_t n;
    int r = WSC_EXIT_FAIL;

    if (!f) {
        fprintf(stderr, "wsctl: %s %s: %s\n", what, path, strerror(errno));
        return WSC_EXIT_FAIL;
    }
    text = malloc(PEM_MAX + 1);
    if (!text) {
        fprintf(stderr, "wsctl: %s %s: %s\n", what, path, strerror(ENOMEM));
        goto out;
    }
    n = fread(text, 1, PEM_MAX + 1, f);
    if (ferror(f)) {
        fprintf(stderr, "wsctl: %s %s: %s\n", what, path, strerror(errno ? errno : EIO));
        goto out;
    }
    if (n > PEM_MAX) {
        fprintf(stderr, "wsctl: %s %s: larger than %d bytes\n", what, path, PEM_MAX);
        goto out;
    }
    text[n] = '\0';
    /* gRPC would only say "handshake failed" later: catch the wrong file
     * here, with its name. */
    if (strlen(text) != n || !strstr(text, "-----BEGIN ")) {
        fprintf(stderr, "wsctl: %s %s: not a PEM file\n", what, path);
        goto out;
    }
    *ret_text = text;
    text = NULL;
    r = WSC_EXIT_OK;
out:
    free(text);
    fclose(f);
    return r;
}

/* Whether `addr` stays on this machine: a unix socket or a loopback host
 * (127.0.0.0/8, ::1, localhost), with or without a dns:/ipv4:/ipv6:
 * scheme. */
static bool is_local_address(const char *addr)
{
    static const char *const schemes[] = {"dns:///", "dns:", "ipv4:", "ipv6:"};
    char host[256];
    const char *end;
    size_t len;

    if (strncmp(addr, "unix:", 5) == 0 || strncmp(addr, "unix-abstract:", 14) == 0)
        return true;
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
        if (strncmp(addr, schemes[i], strlen(schemes[i])) == 0) {
            addr += strlen(schemes[i]);
            break;
        }
    if (addr[0] == '[') {
        addr++;
        end = strchr(addr, ']');
    } else {
        end = strrchr(addr, ':');
        /* A bare IPv6 address has more than one colon and no port. */
        if (end && strchr(addr, ':') != end)
            end = NULL;
    }
    len = end ? (size_t)(end - addr) : strlen(addr);
    if (len >= sizeof(host))
        return false;
    memcpy(host, addr, len);
    host[len] = '\0';
    return strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 ||
           strcmp(host, "::1") == 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"addr", required_argument, NULL, 'a'},
        {"token", required_argument, NULL, 'k'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {"tls", no_argument, NULL, 'T'},
        {"tls-ca", required_argument, NULL, 'C'},
        {"tls-cert", required_argument, NULL, 'c'},
        {"tls-key", required_argument, NULL, 'K'},
        {"tls-server-name", required_argument, NULL, 'N'},
        {"node", required_argument, NULL, 'n'},
        {NULL, 0, NULL, 0},
    };
    const char *addr = getenv("WORKSPACED_ADDR");
    const char *token = getenv("WORKSPACED_TOKEN");
    const char *node = getenv("WORKSPACED_NODE"), *node_from = "WORKSPACED_NODE";
    /* Each TLS file with the name of where it came from, for errors. */
    const char *ca = getenv("WORKSPACED_TLS_CA"), *ca_from = "WORKSPACED_TLS_CA";
    const char *cert = getenv("WORKSPACED_TLS_CERT"), *cert_from = "WORKSPACED_TLS_CERT";
    const char *key = getenv("WORKSPACED_TLS_KEY"), *key_from = "WORKSPACED_TLS_KEY";
    const char *server_name = NULL;
    bool use_tls = false;
    char *ca_pem = NULL, *cert_pem = NULL, *key_pem = NULL;
    struct wsc_tls tls = {0};
    const struct command *cmd = NULL;
    struct wsc_ctx ctx = {0};
    int opt, r;

    opterr = 0;
    /* "+": the first non-option is the command; its options are its own. */
    while ((opt = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'a':
            addr = optarg;
            break;
        case 'k':
            token = optarg;
            break;
        case 'j':
            ctx.json = true;
            break;
        case 'T':
            use_tls = true;
            break;
        case 'C':
            ca = optarg;
            ca_from = "--tls-ca";
            break;
        case 'c':
            cert = optarg;
            cert_from = "--tls-cert";
            break;
        case 'K':
            key = optarg;
            key_from = "--tls-key";
            break;
        case 'N':
            server_name = optarg;
            break;
        case 'n':
            node = optarg;
            node_from = "--node";
            break;
        case 'h':
            usage(stdout);
            return WSC_EXIT_OK;
        case 'V':
            printf("wsctl %s\n", WS_VERSION);
            return WSC_EXIT_OK;
        default:
            return wsc_usage_error("unknown global option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return WSC_EXIT_USAGE;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(argv[optind], commands[i].name) == 0)
            cmd = &commands[i];
    if (!cmd)
        return wsc_usage_error("unknown command '%s'", argv[optind]);
    if (!addr || !addr[0])
        addr = ADDR_DEFAULT;
    /* An empty variable is an unset one. */
    if (ca && !ca[0])
        ca = NULL;
    if (cert && !cert[0])
        cert = NULL;
    if (key && !key[0])
        key = NULL;
    if (!cert != !key)
        return wsc_usage_error("%s without %s: a client certificate and its key go together",
                               cert ? cert_from : key_from, cert ? "--tls-key" : "--tls-cert");
    use_tls = use_tls || ca || cert || server_name;

    if (use_tls) {
        r = WSC_EXIT_FAIL;
        if ((ca && read_pem(ca_from, ca, &ca_pem) != WSC_EXIT_OK) ||
            (cert && read_pem(cert_from, cert, &cert_pem) != WSC_EXIT_OK) ||
            (key && read_pem(key_from, key, &key_pem) != WSC_EXIT_OK))
            goto out;
        tls = (struct wsc_tls){
            .root_certs = ca_pem,
            .cert_chain = cert_pem,
            .private_key = key_pem,
            .server_name = server_name,
        };
    } else if (token && token[0] && !is_local_address(addr)) {
        fprintf(stderr,
                "wsctl: warning: the token goes to %s in plaintext (use --tls or "
                "--tls-ca)\n",
                addr);
    }

    if (cmd->run == wsc_cmd_exec || cmd->run == wsc_cmd_attach) {
        /* gRPC starts threads in wsc_client_new: block first, so these
         * signals reach only the console's signalfd. */
        sigset_t set;
        wsc_exec_signals(&set);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
    }
    r = wsc_client_new(addr, token, use_tls ? &tls : NULL, &ctx.cl);
    if (r < 0) {
        r = wsc_report_errno("connect", r);
        goto out;
    }
    if (wsc_client_set_node(ctx.cl, node) < 0) {
        r = wsc_usage_error("%s '%s' is not a node name (1 to %d of A-Z a-z 0-9 . _ -)", node_from,
                            node, WSC_NODE_MAX - 1);
        wsc_client_free(ctx.cl);
        goto out;
    }
    r = cmd->run(&ctx, argc - optind, argv + optind);
    fflush(stdout);
    wsc_client_free(ctx.cl);
out:
    free(ca_pem);
    free(cert_pem);
    if (key_pem) {
        /* The private key does not outlive its use. */
        explicit_bzero(key_pem, strlen(key_pem));
        free(key_pem);
    }
    return r;
}
