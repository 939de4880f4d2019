/* The exec layer's state: the pump thread, process-tree containment, and
 * each workspace's table of running and recently finished commands (ids,
 * tags, quotas, the audit record of every finished command).
 *
 * Running commands are counted per workspace, per tenant (the tenant a
 * workspace's commands were started for) and for the server; a command
 * holds its place from ws_exec_start until its done callback, background
 * ones included.
 *
 * Thread safety: every function may be called from any thread except
 * ws_exec_free (not from the pump thread). Returned processes carry a
 * reference (ws_proc_unref).
 */
#ifndef WS_EXEC_EXEC_H
#define WS_EXEC_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "server/base/errors.h"
#include "server/exec/process.h"

/* Default grace between SIGTERM and SIGKILL, and its ceiling. */
#define WS_EXEC_GRACE_MS_DEFAULT 1000
#define WS_EXEC_GRACE_MS_MAX     60000
/* Commands running at once in one workspace, and in the server. */
#define WS_EXEC_RUNNING_PER_WS_DEFAULT 256
#define WS_EXEC_RUNNING_TOTAL_DEFAULT  1024
/* Finished commands kept per workspace for Attach and ListProcesses
 * (oldest forgotten first). */
#define WS_EXEC_FINISHED_KEPT 64
/* A finished command's output is freed this long after it ended unless
 * configured otherwise (its entry is forgotten: Attach and ListProcesses
 * no longer see it). */
#define WS_EXEC_FINISHED_TTL_MS_DEFAULT 600000
/* Ids and tags of commands whose output was freed, remembered per
 * workspace (oldest forgotten first) so a later Attach can say so. */
#define WS_EXEC_FREED_KEPT 32
/* Closed workspaces remembered so a command racing the Close is refused
 * (oldest forgotten first). */
#define WS_EXEC_TOMBSTONES_KEPT 4096

struct ws_exec_config {
    int grace_ms;                   /* 0: default; < 0: no grace */
    enum ws_tree_mode containment;  /* auto or forced subreaper */
    const char *cgroup_root;        /* NULL: the host's freezer hierarchy */
    unsigned running_per_workspace; /* 0: default */
    unsigned running_total;         /* 0: default */
    unsigned running_per_tenant;    /* 0: no per-tenant quota */
    /* Bytes a tenant's finished commands keep for Attach (0: no quota):
     * each one counts the rings and captures it was started with, two
     * streams' worth (ws_proc_config ring_bytes and capture_bytes), from
     * the moment it ends until it is forgotten. Past the quota the
     * tenant's oldest finished commands are forgotten first. */
    uint64_t retained_per_tenant;
    /* A finished command is forgotten this long after it ended; 0: only
     * when pushed out (WS_EXEC_FINISHED_KEPT, the tenant's quota). */
    long long finished_ttl_ms;
    /* Where commands' own home directories are made (ws_exec_home_new):
     * a directory of the server's, outside every workspace. Created 0700
     * when missing; it must be the server's own directory, not a symlink;
     * whatever an earlier run left in it is removed at ws_exec_new. NULL:
     * a new directory under $TMPDIR (absolute) or /tmp, made with the
     * first home and removed with everything in it by ws_exec_free. */
    const char *home_root;
    /* Called once per finished command, on the pump thread (audit). */
    void (*on_finished)(void *ud, const char *workspace_id, struct ws_proc *p,
                        const struct ws_proc_result *r);
    void *ud;
};

struct ws_exec;

int ws_exec_new(const struct ws_exec_config *cfg, struct ws_exec **ret);
/* Kills every command (cause CANCELLED, with grace), waits for them to end,
 * stops the pump. Accepts NULL. */
void ws_exec_free(struct ws_exec *e);

/* Process tables held, closed workspaces' tombstones included (tests). */
size_t ws_exec_table_count(struct ws_exec *e);

/* "cgroup-v1-freezer" or "subreaper". */
const char *ws_exec_containment(const struct ws_exec *e);

/* A command's own home, for a command that runs on the host itself: an
 * empty 0700 directory for HOME (and the XDG base directories under it)
 * and a second one for XDG_RUNTIME_DIR, both in a 0700 directory of their
 * own under the home root, so nothing a client wrote into its workspace
 * is any program's dotfile. Handed to ws_exec_start_for, it is removed,
 * with whatever the command left in it, once the command is done: after
 * its process tree is empty and before its done callbacks run, so a
 * client that saw the command end finds it gone. */
struct ws_exec_home;

/* Longest path of either directory. */
#define WS_EXEC_HOME_PATH_MAX 4096

/* Makes a new home. Returns 0, -ENAMETOOLONG (the root's path is too
 * long) or the error of mkdir. */
int ws_exec_home_new(struct ws_exec *e, struct ws_exec_home **ret);
/* Same, for a command that runs as uid:gid (a workspace's own user): its
 * directories are given to it, and the home root becomes 0711 (searchable,
 * not listable, by other uids; homes are named at random). (uid_t)-1 and
 * (gid_t)-1: ws_exec_home_new. Needs CAP_CHOWN; a failed chown is
 * returned. */
int ws_exec_home_new_owned(struct ws_exec *e, uid_t uid, gid_t gid, struct ws_exec_home **ret);
/* HOME: an absolute path. */
const char *ws_exec_home_dir(const struct ws_exec_home *h);
/* XDG_RUNTIME_DIR: an absolute path. */
const char *ws_exec_home_runtime_dir(const struct ws_exec_home *h);
/* Removes the home now, with everything in it (not following symlinks),
 * and frees it; for a home that was not handed to ws_exec_start_for.
 * Accepts NULL. */
void ws_exec_home_free(struct ws_exec_home *h);

/* Longest tenant name counted; a longer one is -EINVAL. */
#define WS_EXEC_TENANT_MAX 64

/* Starts a command in workspace `ws_id` on behalf of `tenant` (the
 * workspace's owner; NULL or "": counted against no tenant), with `home`
 * (NULL: none) as its own home: taken in every case, removed when the
 * command is done or at once when it does not start. Errors:
 * -EEXIST (tag in use, diag metadata "tag"), -WS_EQUOTA (metadata "quota"
 * = "processes", "tenant_running_commands" or "processes_total", and
 * "limit"), -WS_ENOWORKSPACE (the workspace is closing), or the spawn's
 * error. Tag and quota refusals come before anything is spawned. Takes
 * cfg->wrapper->arg in every case (freed through its free hook on
 * failure). */
int ws_exec_start_for(struct ws_exec *e, const char *tenant, const char *ws_id,
                      const struct ws_proc_config *cfg, struct ws_exec_home *home,
                      struct ws_diag *d, struct ws_proc **ret);
/* ws_exec_start_for with no tenant and no home. */
int ws_exec_start(struct ws_exec *e, const char *ws_id, const struct ws_proc_config *cfg,
                  struct ws_diag *d, struct ws_proc **ret);

/* By id, or by tag when id is NULL or empty. -ESRCH when unknown. */
int ws_exec_find(struct ws_exec *e, const char *ws_id, const char *id, const char *tag,
                 struct ws_proc **ret);
/* Whether a command of the workspace with this id (or tag, when id is NULL
 * or empty) finished and was forgotten with its output (its time was up,
 * its tenant's quota or the workspace's count pushed it out); only the
 * last WS_EXEC_FREED_KEPT of a workspace are remembered. */
bool ws_exec_was_freed(struct ws_exec *e, const char *ws_id, const char *id, const char *tag);

/* Calls cb for each command of the workspace, running ones first, oldest
 * first within each group. */
void ws_exec_list(struct ws_exec *e, const char *ws_id, void (*cb)(void *ud, struct ws_proc *p),
                  void *ud);

/* For Close: refuses new commands in the workspace from now on, ends the
 * running ones with `cause` (SIGTERM, grace, SIGKILL) and waits until all
 * have ended. */
void ws_exec_close_workspace(struct ws_exec *e, const char *ws_id, enum ws_cause cause);

/* Whether workspace `ws_id` has a command running (or starting) or an
 * output stream (a Start or Attach subscriber) attached to one of its
 * commands, running or finished. Takes the exec layer's lock only for a
 * walk of the workspace's table (never a process's, never waiting on a
 * command): callable from a thread that must not block, such as the
 * registry's lifetime reaper. */
bool ws_exec_workspace_busy(struct ws_exec *e, const char *ws_id);

/* Calls cb for each tenant with commands running, with their number
 * (under the exec layer's lock: cb must not call back into it). */
void ws_exec_tenants(struct ws_exec *e, void (*cb)(void *ud, const char *tenant, unsigned running),
                     void *ud);

#endif
