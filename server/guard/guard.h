/* The shell guard: the host-side check every command passes before any
 * provider starts it. Pure policy: no process is spawned and the only file
 * system access is resolving command names in the server's fixed PATH
 * (stat, access, realpath on host paths the operator configured, never on
 * workspace paths).
 *
 * A request carries either `argv` (run directly, never through a shell) or
 * a `command` string that the guard tokenizes itself. Exactly one of them
 * must be non-empty, else -WS_EMALFORMED.
 *
 * Command string rules (argv entries are taken verbatim: no shell ever sees
 * them, so there is nothing to expand):
 *   - Words are separated by unquoted spaces and tabs.
 *   - NUL, CR, LF and every other control byte (0x01-0x1f but tab, 0x7f) are
 *     -WS_EMETACHAR anywhere, quoted or not: they split lines in logs and
 *     shells alike.
 *   - Single quotes: everything up to the next ' is literal, including
 *     metacharacters, glob characters and backslashes. This is the one way
 *     to pass a metacharacter inside a command string.
 *   - Double quotes: make whitespace and glob/brace/tilde characters
 *     literal; \" and \\ escape; any other backslash is literal. A
 *     metacharacter inside double quotes is still -WS_EMETACHAR, `$` and
 *     backtick included, escaped or not: those are where shells expand, so
 *     they are refused rather than reinterpreted.
 *   - Unquoted: the metacharacters ; & | $ ` < > ( ) are -WS_EMETACHAR,
 *     also after a backslash (`\;` is refused, write ';' instead). A
 *     backslash makes any other next character literal (space, quote,
 *     backslash, glob). A trailing backslash is -WS_EMALFORMED.
 *   - Unquoted * ? [ ] are -WS_EGLOB (rule "glob"), { } -WS_EGLOB (rule
 *     "brace"; any brace, not only the {a,b} form) and ~ -WS_EGLOB (rule
 *     "tilde", anywhere in a word): all three are word expansions that would
 *     name files the client did not spell out. Quoted or escaped they are
 *     literal.
 *   - Adjacent quoted and unquoted parts join into one word ('a'"b"c is
 *     "abc"); '' is an empty word. An unterminated quote is -WS_EMALFORMED.
 *   - A string of only blanks is -WS_EMALFORMED.
 *
 * Command resolution (argv[0], in both forms):
 *   - A name without '/' is looked up in policy->path, like execvp: the
 *     first directory holding an executable regular file of that name.
 *     Relative and empty PATH entries are skipped (an empty entry would
 *     mean the server's cwd). The client's PATH plays no part.
 *   - An absolute path is taken as is. A relative path containing '/'
 *     (./ls, bin/cat, ../../bin/sh) is refused without being resolved: it
 *     would name a file in the workspace or the server's cwd.
 *   - The file found is canonicalized (realpath) and must equal one of the
 *     allowlist entries canonicalized the same way (names through
 *     policy->path, absolute entries through realpath; entries that do not
 *     resolve, and relative ones with '/', match nothing). So a symlink to
 *     an allowed binary runs that binary, and /bin/../bin/sh is sh. An
 *     empty allowlist denies everything. Every refusal, including "not
 *     found", is -WS_ENOTALLOWED: the client learns nothing about the host.
 *   - argv[0] of the result is the canonical absolute path; the spawn step
 *     executes exactly that file. A multi-call binary (busybox) that picks
 *     its behaviour from argv[0], or any allowed program that runs other
 *     programs (env, sh, find -exec, xargs), extends the allowlist to
 *     whatever it can run: that is the operator's choice.
 *
 * Environment of the child (envp of the result): built from nothing (the
 * sudo env_reset model), never from the server's own environment.
 *   - The base: PATH = policy->path, HOME = policy->home, LANG = C.UTF-8,
 *     and TERM = WS_GUARD_TERM when the request has a terminal.
 *   - For a command on the host (policy->host, local-bash), also:
 *     XDG_CONFIG_HOME, XDG_CACHE_HOME, XDG_DATA_HOME and XDG_STATE_HOME at
 *     HOME/.config, HOME/.cache, HOME/.local/share and HOME/.local/state
 *     (the specification's defaults, spelled out so nothing of the
 *     server's own reaches the child); XDG_RUNTIME_DIR =
 *     policy->runtime_dir (left unset when NULL); and git locked down:
 *     GIT_CONFIG_NOSYSTEM=1 and GIT_CONFIG_GLOBAL=/dev/null (no system or
 *     user config), GIT_PAGER=cat, GIT_EDITOR=: and GIT_SEQUENCE_EDITOR=:
 *     (they win over core.pager, pager.<cmd>, core.editor and
 *     sequence.editor), empty GIT_ASKPASS and GIT_PROXY_COMMAND (no
 *     core.askPass, no core.gitProxy), and command-line scope config
 *     through GIT_CONFIG_COUNT / GIT_CONFIG_KEY_n / GIT_CONFIG_VALUE_n,
 *     which wins over a repository's own .git/config: core.fsmonitor=false,
 *     core.hooksPath=/dev/null, core.sshCommand=ssh, credential.helper=
 *     (empty: no helper), gpg.format=openpgp, gpg.program=gpg,
 *     commit.gpgSign=false, tag.gpgSign=false, log.showSignature=false,
 *     protocol.ext.allow=never, safe.bareRepository=explicit. The list is
 *     guard.c's `git_overrides`. What git still runs from a repository's
 *     config (drivers named by .gitattributes: filter.*.clean/smudge,
 *     diff.*.command/textconv, merge.*.driver; diff.external;
 *     remote.*.uploadpack/receivepack; submodule.*.update; aliases) is not
 *     reachable this way: names are the repository's to choose. An
 *     allowed git also takes -c, --upload-pack and --exec-path from argv:
 *     allowing git on the host is allowing what it can run.
 *   - Then each variable named in policy->pass_env that is set on the host
 *     (getenv), unless it is already in the base, on the denylist or not a
 *     valid name: the denylist holds for the operator's names too.
 *   - Then the client's variables. Names must be 1..WS_GUARD_ENV_NAME_MAX
 *     bytes without '=' (-WS_EMALFORMED); names on the denylist are
 *     -WS_EENVDENIED (rule "denylist"); the remaining names must match
 *     [A-Za-z_][A-Za-z0-9_]* (-WS_EMALFORMED). The denylist is matched
 *     case-insensitively on the name with surrounding blanks stripped, so
 *     "ld_preload" and "LD_PRELOAD " are denied, not merely malformed.
 *     PATH and HOME are on it. A value starting with "()" (an exported
 *     shell function, after leading blanks) is -WS_EENVDENIED (rule
 *     "function_value"). For a command on the host, a name must moreover
 *     be on the allowlist (-WS_EENVDENIED, rule "env_allowlist"), and its
 *     value of the form the allowlist gives it (-WS_EENVDENIED, rule
 *     "env_value"): LANG, LANGUAGE, LC_* a locale name (letters, digits,
 *     _ . @ + - :), TZ a zone name or rule (no absolute path, no ".."),
 *     TERM, COLORTERM, NO_COLOR, FORCE_COLOR, CLICOLOR, CLICOLOR_FORCE, CI
 *     a word (letters, digits, _ . + -), COLUMNS, LINES, SOURCE_DATE_EPOCH
 *     digits. Why each is harmless, and what is left out on purpose:
 *     guard.c, `host_allowlist`. The isolated providers (a sandbox, a
 *     container) keep the denylist alone: what a variable could make a
 *     tool run there runs inside the same box. A name given twice is
 *     -WS_EMALFORMED. A client variable replaces a base (LANG, TERM) or
 *     pass_env one.
 *   The denylist: guard.c, `denylist`.
 *
 * cwd: NULL or "" means "."; otherwise it must pass ws_vfs_check_path()
 * (server/vfs/vfs.h). A lexical escape (absolute, or `..` above the root)
 * is -WS_ECWDESCAPE, other bad paths -WS_EBADPATH. Only lexical: the spawn
 * step opens it confined beneath the workspace root.
 *
 * Limits (per request; a zero field in struct ws_guard_limits means the
 * default below): argument count, bytes per argument, total argv bytes
 * (each argument plus its NUL), command string bytes, client env count and
 * client env bytes (name + '=' + value + NUL each). Reaching a limit
 * exactly is fine; one past is -WS_EARGLIMIT.
 *
 * Diagnostics: every refusal fills `d` (may be NULL) with a message and the
 * metadata "token" (the offending word as the client wrote it, the
 * argument, the variable name or the cwd; control bytes shown as \n, \r,
 * \t or \xHH, cut to WS_DIAG_VALUE_MAX - 1 bytes), and "rule" naming the
 * check; METACHAR and GLOB add "char" (the offending character), ARG_LIMIT
 * adds "limit" (the number). Metadata is appended to `d`: pass a zeroed one.
 *
 * Return values: 0 on success, with *ret_res set; else a negated error
 * number: -WS_ENOTALLOWED, -WS_EMETACHAR, -WS_EGLOB, -WS_EENVDENIED,
 * -WS_ECWDESCAPE, -WS_EARGLIMIT, -WS_EMALFORMED (malformed request),
 * -WS_EBADPATH (unusable cwd), -EINVAL (a policy without path or home: a
 * server bug) or -ENOMEM. *ret_res is written only on success.
 *
 * Thread safety: ws_guard_check may run on many threads at once; it reads
 * the host environment with getenv, so nobody may setenv/putenv meanwhile.
 * The policy and request are only read and may be shared.
 */
#ifndef WS_POSIX_GUARD_H
#define WS_POSIX_GUARD_H

#include <stdbool.h>
#include <stddef.h>

#include "server/base/errors.h"

#define WS_GUARD_ARGS_MAX          1024         /* arguments, argv[0] included */
#define WS_GUARD_ARG_BYTES_MAX     (32 * 1024)  /* one argument, without its NUL */
#define WS_GUARD_ARGV_BYTES_MAX    (256 * 1024) /* all arguments, with their NULs */
#define WS_GUARD_COMMAND_BYTES_MAX (64 * 1024)  /* the command string */
#define WS_GUARD_ENV_MAX           256          /* client variables */
#define WS_GUARD_ENV_BYTES_MAX     (64 * 1024)  /* client "NAME=VALUE\0" bytes */
#define WS_GUARD_ENV_NAME_MAX      128          /* bytes in a variable name */

/* The child's LANG unless the client sets one. */
#define WS_GUARD_LANG "C.UTF-8"
/* The child's TERM when it has a terminal, unless the client sets one. */
#define WS_GUARD_TERM "xterm-256color"

struct ws_guard_limits {
    size_t args;          /* 0: WS_GUARD_ARGS_MAX */
    size_t arg_bytes;     /* 0: WS_GUARD_ARG_BYTES_MAX */
    size_t argv_bytes;    /* 0: WS_GUARD_ARGV_BYTES_MAX */
    size_t command_bytes; /* 0: WS_GUARD_COMMAND_BYTES_MAX */
    size_t env;           /* 0: WS_GUARD_ENV_MAX */
    size_t env_bytes;     /* 0: WS_GUARD_ENV_BYTES_MAX */
};

/* Operator configuration; everything is borrowed and only read. */
struct ws_guard_policy {
    const char *const *allowed; /* command names or absolute paths */
    size_t n_allowed;
    const char *const *pass_env; /* host variable names */
    size_t n_pass_env;
    const char *path; /* fixed PATH, e.g. "/usr/local/bin:/usr/bin:/bin" */
    const char *home; /* the child's HOME */
    /* The command runs on the host, with the server's uid and file system
     * (local-bash): client variables must be on the allowlist, the XDG
     * base directories are set under `home` and git is locked down (see
     * above). `home` is then an empty directory of the command's own,
     * never the workspace: a file the client wrote in the workspace is
     * nobody's ~/.gitconfig, ~/.bashrc or ~/.config. */
    bool host;
    /* With `host`: XDG_RUNTIME_DIR, an empty 0700 directory of the
     * command's own; NULL leaves it unset. */
    const char *runtime_dir;
    /* The command runs in a file system the server cannot look into (a
     * container): argv[0] passes only when an allowlist entry is spelled
     * exactly like it (a name matches the same name, which the runner
     * looks up in `path` over there; an absolute path the same path), and
     * argv[0] of the result stays as given. Nothing is resolved here, so
     * /bin/../bin/sh or a name whose entry is a path is refused. */
    bool foreign_root;
    struct ws_guard_limits limits;
};

struct ws_guard_env {
    const char *name;
    const char *value; /* NULL means "" */
};

/* One client request; everything is borrowed and only read. Strings are C
 * strings except `command`, which is `command_len` bytes and may hold
 * NULs (refused): pass strlen() for a C string. */
struct ws_guard_request {
    const char *const *argv; /* argc entries; argc 0 means "no argv" */
    size_t argc;
    const char *command; /* NULL or command_len 0 means "no command" */
    size_t command_len;
    const struct ws_guard_env *env;
    size_t n_env;
    const char *cwd; /* workspace-relative; NULL or "" is "." */
    bool pty;        /* the command gets a terminal: TERM in the base */
};

/* The vetted command, owned by the caller (ws_guard_result_free). */
struct ws_guard_result {
    char **argv; /* argc entries + NULL; argv[0] is the absolute path to exec
                  * (with foreign_root: as the client spelled it) */
    size_t argc;
    char **envp; /* n_env "NAME=VALUE" entries + NULL */
    size_t n_env;
    char *cwd; /* workspace-relative, checked lexically only */
};

int ws_guard_check(const struct ws_guard_policy *p, const struct ws_guard_request *r,
                   struct ws_diag *d, struct ws_guard_result **ret_res);

/* Checks variables a client gives ahead of any command (a workspace's
 * env and secrets at Open) under the rules for client variables above:
 * `host` as in struct ws_guard_policy, the default limits. Diagnostics
 * name a variable, never its value. */
int ws_guard_check_env(bool host, const struct ws_guard_env *env, size_t n_env, struct ws_diag *d);

/* Frees a result, wiping the environment's bytes first (it may hold
 * secrets); accepts NULL. Returns NULL. */
struct ws_guard_result *ws_guard_result_free(struct ws_guard_result *res);

#endif
