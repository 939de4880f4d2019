/* wsctl: the command-line console of workspaced. Parses the global
 * options (--addr, --token, --json, or WORKSPACED_ADDR / WORKSPACED_TOKEN),
 * connects, and hands the rest of the command line to one command.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clients/cli/cli.h"
#include "clients/cli/output.h"

#define ADDR_DEFAULT "127.0.0.1:7878"

static const struct command {
    const char *name;
    int (*run)(struct wsc_ctx *ctx, int argc, char **argv);
    const char *usage;
} commands[] = {
    {"open", wsc_cmd_open,
     "--provider local-bash|local-sandbox|docker|memory [--image I] [--allow cmd,...]"},
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
    {"exec", wsc_cmd_exec,
     "WS [-i] [-t] [--timeout D] [--tag T] [--cwd DIR] [-e K=V] [--background] -- argv..."},
    {"attach", wsc_cmd_attach, "WS TAG|ID [--offset N]"},
    {"ps", wsc_cmd_ps, "WS"},
    {"kill", wsc_cmd_kill, "WS TAG|ID [-s SIG]"},
    {"audit", wsc_cmd_audit, "WS [--json]   (exit 3: the log does not verify)"},
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: wsctl [--addr HOST:PORT] [--token T] [--json] COMMAND ...\n"
               "  address and token default to $WORKSPACED_ADDR (else " ADDR_DEFAULT
               ") and $WORKSPACED_TOKEN\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].usage);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"addr", required_argument, NULL, 'a'},
        {"token", required_argument, NULL, 'k'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *addr = getenv("WORKSPACED_ADDR");
    const char *token = getenv("WORKSPACED_TOKEN");
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
        case 'h':
            usage(stdout);
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

    if (cmd->run == wsc_cmd_exec) {
        /* gRPC starts threads in wsc_client_new: block first, so these
         * signals reach only the console's signalfd. */
        sigset_t set;
        wsc_exec_signals(&set);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
    }
    r = wsc_client_new(addr, token, &ctx.cl);
    if (r < 0)
        return wsc_report_errno("connect", r);
    r = cmd->run(&ctx, argc - optind, argv + optind);
    fflush(stdout);
    wsc_client_free(ctx.cl);
    return r;
}
