/* The commands of wsctl. Each takes the shared context and its own
 * arguments (argv[0] is the command name), parses them with getopt_long,
 * and returns the process exit status: 0, WSC_EXIT_FAIL after printing
 * the error line, WSC_EXIT_USAGE for bad arguments, or (exec, attach) the
 * remote command's status.
 */
#ifndef WSC_CLI_H
#define WSC_CLI_H

#include <signal.h>
#include <stdbool.h>

#include "clients/cli/rpc.h"

struct wsc_ctx {
    struct wsc_client *cl;
    /* --json: machine-readable output on stdout. */
    bool json;
};

/* commands.c: workspaces, providers and files. */
int wsc_cmd_open(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_resolve(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_close(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_describe(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_providers(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_ls(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_stat(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_cat(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_put(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_rm(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_mkdir(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_mv(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_glob(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_grep(struct wsc_ctx *ctx, int argc, char **argv);
/* Prints a workspace's audit log; WSC_EXIT_AUDIT when it does not verify. */
int wsc_cmd_audit(struct wsc_ctx *ctx, int argc, char **argv);

/* lifecycle.c: listing, lifetimes and secrets. */
int wsc_cmd_list(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_extend(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_set_secrets(struct wsc_ctx *ctx, int argc, char **argv);

/* trees.c: whole trees (cp -r through archives), watch, snapshots. */
int wsc_cmd_cp(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_watch(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_snapshot(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_snapshots(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_delete_snapshot(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_restore(struct wsc_ctx *ctx, int argc, char **argv);

/* exec.c: processes. */
int wsc_cmd_exec(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_attach(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_ps(struct wsc_ctx *ctx, int argc, char **argv);
int wsc_cmd_kill(struct wsc_ctx *ctx, int argc, char **argv);

/* The signals the exec and attach consoles read through a signalfd;
 * main() blocks them before gRPC starts any thread. */
void wsc_exec_signals(sigset_t *ret_set);

#endif
