/* The shell guard; the rules and their reasons are in guard.h. */
#include "server/guard/guard.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/base/macros.h"
#include "server/vfs/vfs.h"

/* Unquoted, these would make a shell do something other than run one
 * command with literal words. */
#define METACHARS  ";&|$`<>()"
#define GLOBCHARS  "*?[]"
#define BRACECHARS "{}"

/* Variables that make a loader, libc, a shell or an interpreter load or run
 * code or config the client chose, or move a tool away from the workspace.
 * Matched case-insensitively (a lowercase ld_preload is harmless to glibc
 * but not to every program that upper-cases names); `prefix` entries match
 * every name that starts with them. */
static const struct {
    const char *name;
    bool prefix;
} denylist[] = {
    /* The fixed base: command lookup and the home directory stay put. */
    {"PATH", false},
    {"HOME", false},
    /* Dynamic loader and libc. */
    {"LD_", true},
    {"DYLD_", true},
    {"GCONV_PATH", false},
    {"GLIBC_TUNABLES", false},
    {"MALLOC_", true},
    {"LOCPATH", false},
    {"NLSPATH", false},
    {"HOSTALIASES", false},
    {"RESOLV_HOST_CONF", false},
    {"RES_OPTIONS", false},
    {"GETCONF_DIR", false},
    {"OPENSSL_CONF", false},
    {"OPENSSL_ENGINES", false},
    {"OPENSSL_MODULES", false},
    /* Shells. */
    {"BASH_ENV", false},
    {"ENV", false},
    {"BASH_FUNC_", true},
    {"SHELLOPTS", false},
    {"BASHOPTS", false},
    {"BASH_XTRACEFD", false},
    {"BASH_LOADABLES_PATH", false},
    {"PS1", false},
    {"PS2", false},
    {"PS4", false},
    {"PROMPT_COMMAND", false},
    {"IFS", false},
    {"CDPATH", false},
    {"GLOBIGNORE", false},
    {"ZDOTDIR", false},
    {"SHELL", false},
    /* Programs that run other programs named by a variable. */
    {"EDITOR", false},
    {"VISUAL", false},
    {"PAGER", false},
    {"MANPAGER", false},
    {"LESSOPEN", false},
    {"LESSCLOSE", false},
    {"SSH_ASKPASS", false},
    /* git: config injection, helpers it runs, repositories elsewhere. */
    {"GIT_CONFIG", true}, /* GIT_CONFIG, GIT_CONFIG_COUNT, _KEY_n, _GLOBAL, ... */
    {"GIT_SSH", false},
    {"GIT_SSH_COMMAND", false},
    {"GIT_PROXY_COMMAND", false},
    {"GIT_ASKPASS", false},
    {"GIT_EDITOR", false},
    {"GIT_SEQUENCE_EDITOR", false},
    {"GIT_PAGER", false},
    {"GIT_EXTERNAL_DIFF", false},
    {"GIT_EXEC_PATH", false},
    {"GIT_TEMPLATE_DIR", false},
    {"GIT_DIR", false},
    {"GIT_WORK_TREE", false},
    {"GIT_COMMON_DIR", false},
    {"GIT_INDEX_FILE", false},
    {"GIT_OBJECT_DIRECTORY", false},
    {"GIT_ALTERNATE_OBJECT_DIRECTORIES", false},
    /* Interpreters: module paths, startup code, option injection. */
    {"PYTHONPATH", false},
    {"PYTHONHOME", false},
    {"PYTHONSTARTUP", false},
    {"PYTHONUSERBASE", false},
    {"PYTHONINSPECT", false},
    {"PYTHONBREAKPOINT", false},
    {"PYTHONWARNINGS", false}, /* a warning category names a module to import */
    {"PYTHONEXECUTABLE", false},
    {"PYTHONPLATLIBDIR", false},
    {"NODE_OPTIONS", false},
    {"NODE_PATH", false},
    {"PERL5OPT", false},
    {"PERL5LIB", false},
    {"PERLLIB", false},
    {"PERL5DB", false},
    {"RUBYOPT", false},
    {"RUBYLIB", false},
    {"JAVA_TOOL_OPTIONS", false},
    {"_JAVA_OPTIONS", false},
    {"JDK_JAVA_OPTIONS", false},
    {"LUA_INIT", true}, /* LUA_INIT, LUA_INIT_5_4, ... */
    {"LUA_PATH", true},
    {"LUA_CPATH", true},
    {"TCLLIBPATH", false},
    /* Option variables of tools that can run a program named in an
     * option (tar --checkpoint-action=exec, make's and go's flags, zip
     * -TT, less's +! command) and remote shells of copy tools. */
    {"TAR_OPTIONS", false},
    {"MAKEFLAGS", false},
    {"MFLAGS", false},
    {"GNUMAKEFLAGS", false},
    {"GOFLAGS", false},
    {"ZIPOPT", false},
    {"LESS", false},
    {"RSYNC_RSH", false},
    {"RSYNC_CONNECT_PROG", false},
    {"CVS_RSH", false},
    {"BROWSER", false},
};

/* How the value of an allowlisted client variable must look: each class
 * admits only what the variable's readers take as a name or a number,
 * never a path they would open. */
enum value_class {
    /* A locale name or list (en_US.UTF-8, C, de_DE@euro, fr:en): no '/',
     * because glibc loads a locale named by an absolute path from that
     * path, and gettext catalogs found through it carry format strings. */
    V_LOCALE,
    /* A time zone rule or zoneinfo name (UTC, CET-1CEST, Europe/Berlin,
     * :Europe/Paris): no absolute path and no "..", which would make libc
     * parse a file of the client's choosing as a tzfile. */
    V_TZ,
    /* A word (xterm-256color, true, 1): terminfo names and flags. */
    V_WORD,
    /* Decimal digits. */
    V_NUMBER,
};

/* What a client may set for a command on the host (policy->host): names
 * that only shape output or formatting. None of them makes a tool load or
 * run anything: no pager, editor, shell, option or flags variable, no
 * loader, interpreter, proxy or git variable, nothing naming a directory
 * a tool reads config or code from. Exact names, case-sensitive; a
 * `prefix` entry matches every name that starts with it.
 *   LANG, LANGUAGE, LC_*   the locale, by name (V_LOCALE);
 *   TZ                     the time zone, by name or rule (V_TZ);
 *   TERM, COLORTERM        the terminal type, looked up in the system's
 *                          terminfo only (TERMINFO* are not allowed, and
 *                          HOME holds no ~/.terminfo);
 *   COLUMNS, LINES         the terminal size;
 *   NO_COLOR, FORCE_COLOR, CLICOLOR, CLICOLOR_FORCE   colour on or off;
 *   CI                     "running unattended": tools stop prompting;
 *   SOURCE_DATE_EPOCH      the build time reproducible builds stamp.
 * Left out on purpose, among others: TMPDIR (a directory tools write
 * scripts to and may run them from), USER/LOGNAME (some tools find a home
 * or config through them), PWD and OLDPWD, TERMINFO*, TZDIR, LOCPATH. */
static const struct {
    const char *name;
    bool prefix;
    enum value_class value;
} host_allowlist[] = {
    {"LANG", false, V_LOCALE},    {"LANGUAGE", false, V_LOCALE},
    {"LC_", true, V_LOCALE},      {"TZ", false, V_TZ},
    {"TERM", false, V_WORD},      {"COLORTERM", false, V_WORD},
    {"COLUMNS", false, V_NUMBER}, {"LINES", false, V_NUMBER},
    {"NO_COLOR", false, V_WORD},  {"FORCE_COLOR", false, V_WORD},
    {"CLICOLOR", false, V_WORD},  {"CLICOLOR_FORCE", false, V_WORD},
    {"CI", false, V_WORD},        {"SOURCE_DATE_EPOCH", false, V_NUMBER},
};

/* git, for a command on the host: configuration from the command line's
 * scope (GIT_CONFIG_COUNT/KEY_n/VALUE_n), which wins over a repository's
 * own .git/config, against settings that make an ordinary git command run
 * a program named in that file. The client can write .git/config (and
 * .git/hooks) like any other workspace file. */
static const struct {
    const char *key;
    const char *value;
} git_overrides[] = {
    /* git status, diff, add...: runs the monitor command. */
    {"core.fsmonitor", "false"},
    /* Every hook of every command. */
    {"core.hooksPath", "/dev/null"},
    /* fetch/push over ssh. */
    {"core.sshCommand", "ssh"},
    /* Credential helpers ("!cmd"): an empty value empties the list. */
    {"credential.helper", ""},
    /* Signing and showing signatures run the signing program. */
    {"gpg.format", "openpgp"},
    {"gpg.program", "gpg"},
    {"commit.gpgSign", "false"},
    {"tag.gpgSign", "false"},
    {"log.showSignature", "false"},
    /* ext:: URLs run a command; a repository may allow them. */
    {"protocol.ext.allow", "never"},
    /* A bare repository planted inside the workspace is not entered
     * (and its config not read) unless named with --git-dir. */
    {"safe.bareRepository", "explicit"},
};

/* Plain variables git looks at before any configuration. */
static const struct {
    const char *name;
    const char *value;
} git_env[] = {
    {"GIT_CONFIG_NOSYSTEM", "1"},       /* no /etc/gitconfig */
    {"GIT_CONFIG_GLOBAL", "/dev/null"}, /* no ~/.gitconfig, no XDG git config */
    {"GIT_PAGER", "cat"},               /* over core.pager and pager.<cmd> */
    {"GIT_EDITOR", ":"},                /* over core.editor: no editor at all */
    {"GIT_SEQUENCE_EDITOR", ":"},       /* over sequence.editor */
    {"GIT_ASKPASS", ""},                /* empty: no core.askPass program */
    {"GIT_PROXY_COMMAND", ""},          /* empty: no core.gitProxy command */
};

enum quote {
    Q_NONE,
    Q_SINGLE,
    Q_DOUBLE,
};

struct strv {
    char **v; /* n entries + NULL once anything was pushed */
    size_t n;
    size_t cap;
};

struct limits {
    size_t args, arg_bytes, argv_bytes, command_bytes, env, env_bytes;
};

static void strv_free(struct strv *s)
{
    size_t i;

    for (i = 0; i < s->n; i++) {
        if (s->v[i])
            explicit_bzero(s->v[i], strlen(s->v[i])); /* values may be secrets */
        free(s->v[i]);
    }
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

/* Appends `str`, taking ownership (freed on failure). */
static int strv_push(struct strv *s, char *str)
{
    if (!str)
        return -ENOMEM;
    if (s->n + 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        char **v = realloc(s->v, cap * sizeof(*v));
        if (!v) {
            free(str);
            return -ENOMEM;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = str;
    s->v[s->n] = NULL;
    return 0;
}

static bool is_control(unsigned char c)
{
    return (c < 0x20 && c != '\t') || c == 0x7f;
}

static bool in_set(unsigned char c, const char *set)
{
    return c != '\0' && strchr(set, c) != NULL;
}

/* Copies `len` bytes of `s` into `out` with control bytes spelled out, so a
 * token never carries a newline into a log; stops before an escape that
 * does not fit. */
static void render(char *out, size_t size, const char *s, size_t len)
{
    size_t i, o = 0;

    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[5];
        size_t k;

        if (c == '\n')
            k = (size_t)snprintf(esc, sizeof(esc), "\\n");
        else if (c == '\r')
            k = (size_t)snprintf(esc, sizeof(esc), "\\r");
        else if (c == '\t')
            k = (size_t)snprintf(esc, sizeof(esc), "\\t");
        else if (is_control(c))
            k = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", c);
        else {
            esc[0] = (char)c;
            esc[1] = '\0';
            k = 1;
        }
        if (o + k + 1 > size)
            break;
        memcpy(out + o, esc, k);
        o += k;
    }
    out[o] = '\0';
}

/* Fills the diag for a refusal and returns `err`. `token` is `token_len`
 * bytes (only the first WS_DIAG_VALUE_MAX are looked at). */
static int refuse(struct ws_diag *d, int err, const char *rule, const char *token, size_t token_len,
                  const char *message)
{
    char buf[WS_DIAG_VALUE_MAX];

    if (!d)
        return err;
    render(buf, sizeof(buf), token ? token : "",
           token ? (token_len < WS_DIAG_VALUE_MAX ? token_len : WS_DIAG_VALUE_MAX) : 0);
    ws_diag_set(d, "%s", message);
    ws_diag_meta(d, "token", "%s", buf);
    ws_diag_meta(d, "rule", "%s", rule);
    return err;
}

static int refuse_str(struct ws_diag *d, int err, const char *rule, const char *token,
                      const char *message)
{
    return refuse(d, err, rule, token, token ? strnlen(token, WS_DIAG_VALUE_MAX) : 0, message);
}

static int refuse_limit(struct ws_diag *d, const char *rule, const char *token, size_t limit,
                        const char *message)
{
    refuse_str(d, -WS_EARGLIMIT, rule, token, message);
    ws_diag_meta(d, "limit", "%zu", limit);
    return -WS_EARGLIMIT;
}

/* ---- the command string ---- */

/* End of the word starting at `start` as a shell would delimit it, quotes
 * tracked loosely: only used to show the client the word it wrote. */
static size_t raw_word_end(const char *s, size_t len, size_t start)
{
    enum quote q = Q_NONE;
    size_t i;

    for (i = start; i < len; i++) {
        char c = s[i];

        if (q == Q_SINGLE) {
            if (c == '\'')
                q = Q_NONE;
        } else if (c == '\\') {
            i++;
        } else if (q == Q_DOUBLE) {
            if (c == '"')
                q = Q_NONE;
        } else if (c == '\'') {
            q = Q_SINGLE;
        } else if (c == '"') {
            q = Q_DOUBLE;
        } else if (c == ' ' || c == '\t') {
            return i;
        }
    }
    return len;
}

/* Refuses the word starting at `start` because of the byte at `at`. */
static int refuse_word(struct ws_diag *d, int err, const char *rule, const char *s, size_t len,
                       size_t start, size_t at, const char *message)
{
    char c[WS_DIAG_VALUE_MAX];

    refuse(d, err, rule, s + start, raw_word_end(s, len, start) - start, message);
    if (at < len) {
        render(c, sizeof(c), s + at, 1);
        ws_diag_meta(d, "char", "%s", c);
    }
    return err;
}

/* Splits the command string into words (rules in guard.h). */
static int tokenize(const char *s, size_t len, struct ws_diag *d, struct strv *ret_words)
{
    struct strv words = {0};
    enum quote q = Q_NONE;
    bool in_word = false;
    size_t i, start = 0, n = 0;
    char *buf;
    int r = 0;

    buf = malloc(len + 1);
    if (!buf)
        return -ENOMEM;

    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        if (!in_word) {
            if (c == ' ' || c == '\t')
                continue;
            in_word = true;
            start = i;
            n = 0;
        }
        if (is_control(c)) {
            r = refuse_word(d, -WS_EMETACHAR, "control", s, len, start, i,
                            "control character in command");
            goto out;
        }
        if (q == Q_SINGLE) {
            if (c == '\'')
                q = Q_NONE;
            else
                buf[n++] = (char)c;
            continue;
        }
        if (q == Q_DOUBLE) {
            if (c == '"') {
                q = Q_NONE;
                continue;
            }
            if (in_set(c, METACHARS)) {
                r = refuse_word(d, -WS_EMETACHAR, "metachar", s, len, start, i,
                                "shell metacharacter in double quotes (use single quotes)");
                goto out;
            }
            if (c == '\\' && i + 1 < len && (s[i + 1] == '"' || s[i + 1] == '\\'))
                c = (unsigned char)s[++i];
            buf[n++] = (char)c;
            continue;
        }

        if (c == ' ' || c == '\t') {
            r = strv_push(&words, strndup(buf, n));
            if (r < 0)
                goto out;
            in_word = false;
            continue;
        }
        if (c == '\'') {
            q = Q_SINGLE;
            continue;
        }
        if (c == '"') {
            q = Q_DOUBLE;
            continue;
        }
        if (c == '\\') {
            unsigned char next;

            if (i + 1 == len) {
                r = refuse_word(d, -WS_EMALFORMED, "escape", s, len, start, i,
                                "command ends with a backslash");
                goto out;
            }
            next = (unsigned char)s[i + 1];
            if (is_control(next)) {
                r = refuse_word(d, -WS_EMETACHAR, "control", s, len, start, i + 1,
                                "control character in command");
                goto out;
            }
            if (in_set(next, METACHARS)) {
                r = refuse_word(d, -WS_EMETACHAR, "metachar", s, len, start, i + 1,
                                "escaped shell metacharacter (use single quotes)");
                goto out;
            }
            buf[n++] = (char)next;
            i++;
            continue;
        }
        if (in_set(c, METACHARS)) {
            r = refuse_word(d, -WS_EMETACHAR, "metachar", s, len, start, i,
                            "shell metacharacter in command");
            goto out;
        }
        if (in_set(c, GLOBCHARS)) {
            r = refuse_word(d, -WS_EGLOB, "glob", s, len, start, i, "glob pattern in command");
            goto out;
        }
        if (in_set(c, BRACECHARS)) {
            r = refuse_word(d, -WS_EGLOB, "brace", s, len, start, i, "brace form in command");
            goto out;
        }
        if (c == '~') {
            r = refuse_word(d, -WS_EGLOB, "tilde", s, len, start, i, "tilde in command");
            goto out;
        }
        buf[n++] = (char)c;
    }

    if (q != Q_NONE) {
        r = refuse_word(d, -WS_EMALFORMED, "quote", s, len, start, len, "unterminated quote");
        goto out;
    }
    if (in_word) {
        r = strv_push(&words, strndup(buf, n));
        if (r < 0)
            goto out;
    }
    if (words.n == 0) {
        r = refuse(d, -WS_EMALFORMED, "empty", s, len, "empty command");
        goto out;
    }
    *ret_words = words;
    words = (struct strv){0};
out:
    strv_free(&words);
    free(buf);
    return r;
}

/* ---- limits ---- */

static int check_args(const char *const *argv, size_t argc, const struct limits *lim,
                      struct ws_diag *d)
{
    size_t i, total = 0;

    if (argc > lim->args)
        return refuse_limit(d, "args", argv[lim->args], lim->args, "too many arguments");
    for (i = 0; i < argc; i++) {
        size_t n;

        if (!argv[i])
            return refuse_str(d, -WS_EMALFORMED, "argv", "", "argv entry missing");
        n = strnlen(argv[i], lim->arg_bytes + 1);
        if (n > lim->arg_bytes)
            return refuse_limit(d, "arg_bytes", argv[i], lim->arg_bytes, "argument too long");
        total += n + 1;
        if (total > lim->argv_bytes)
            return refuse_limit(d, "argv_bytes", argv[i], lim->argv_bytes,
                                "arguments too long in total");
    }
    return 0;
}

/* ---- command resolution ---- */

/* The canonical path of `file` if it is an executable regular file: 1 and
 * *ret_path (malloc'd), 0 when it is not, or -ENOMEM. */
static int canonical_exec(const char *file, char **ret_path)
{
    struct stat st;
    char *path;

    if (stat(file, &st) != 0 || !S_ISREG(st.st_mode) || access(file, X_OK) != 0)
        return 0;
    path = realpath(file, NULL);
    if (!path)
        return errno == ENOMEM ? -ENOMEM : 0;
    *ret_path = path;
    return 1;
}

/* Looks `name` (no '/') up in the PATH-style list `search` like execvp,
 * skipping relative and empty entries. Returns as canonical_exec. */
static int lookup(const char *search, const char *name, char **ret_path)
{
    size_t name_len = strlen(name);
    const char *p = search;

    if (name_len == 0 || name_len > WS_VFS_NAME_MAX)
        return 0;
    while (*p) {
        const char *end = strchrnul(p, ':');
        size_t dir_len = (size_t)(end - p);

        if (dir_len > 0 && p[0] == '/' && dir_len + 1 + name_len < PATH_MAX) {
            char cand[PATH_MAX];
            int r;

            memcpy(cand, p, dir_len);
            cand[dir_len] = '/';
            memcpy(cand + dir_len + 1, name, name_len + 1);
            r = canonical_exec(cand, ret_path);
            if (r != 0)
                return r;
        }
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* Resolves a command name or path the same way for the allowlist and the
 * request. Relative paths with '/' resolve to nothing. */
static int resolve(const char *search, const char *cmd, char **ret_path)
{
    if (!cmd || !cmd[0])
        return 0;
    if (strchr(cmd, '/'))
        return cmd[0] == '/' ? canonical_exec(cmd, ret_path) : 0;
    return lookup(search, cmd, ret_path);
}

/* Whether the canonical path `exe` is one of the allowlist's: 1, 0 or
 * -ENOMEM. */
static int is_allowed(const struct ws_guard_policy *p, const char *exe)
{
    size_t i;

    for (i = 0; i < p->n_allowed; i++) {
        char *entry = NULL;
        bool same;
        int r;

        r = resolve(p->path, p->allowed[i], &entry);
        if (r < 0)
            return r;
        if (r == 0)
            continue;
        same = strcmp(entry, exe) == 0;
        free(entry);
        if (same)
            return 1;
    }
    return 0;
}

static int check_command(const struct ws_guard_policy *p, const char *argv0, struct ws_diag *d,
                         char **ret_exe)
{
    char *exe = NULL;
    int r;

    if (p->n_allowed == 0)
        return refuse_str(d, -WS_ENOTALLOWED, "allowlist", argv0, "no command is allowed");
    if (strchr(argv0, '/') && argv0[0] != '/')
        return refuse_str(d, -WS_ENOTALLOWED, "relative_path", argv0,
                          "command given as a relative path");
    if (p->foreign_root) {
        /* Nothing of that file system can be looked at from here: the
         * spelling itself must be on the list. */
        for (size_t i = 0; i < p->n_allowed; i++) {
            if (p->allowed[i] && strcmp(p->allowed[i], argv0) == 0) {
                exe = strdup(argv0);
                if (!exe)
                    return -ENOMEM;
                *ret_exe = exe;
                return 0;
            }
        }
        return refuse_str(d, -WS_ENOTALLOWED, "allowlist", argv0, "command not allowed");
    }
    r = resolve(p->path, argv0, &exe);
    if (r < 0)
        return r;
    if (r > 0) {
        r = is_allowed(p, exe);
        if (r > 0) {
            *ret_exe = exe;
            return 0;
        }
        free(exe);
        if (r < 0)
            return r;
    }
    return refuse_str(d, -WS_ENOTALLOWED, "allowlist", argv0, "command not allowed");
}

/* ---- environment ---- */

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static bool denied(const char *name)
{
    size_t len = strlen(name), i;

    while (len > 0 && is_blank(*name)) {
        name++;
        len--;
    }
    while (len > 0 && is_blank(name[len - 1]))
        len--;
    for (i = 0; i < WS_ELEMENTSOF(denylist); i++) {
        size_t n = strlen(denylist[i].name);

        if (denylist[i].prefix ? len >= n : len == n)
            if (strncasecmp(name, denylist[i].name, n) == 0)
                return true;
    }
    return false;
}

static bool valid_name(const char *name)
{
    size_t i;

    if (!((name[0] >= 'A' && name[0] <= 'Z') || (name[0] >= 'a' && name[0] <= 'z') ||
          name[0] == '_'))
        return false;
    for (i = 1; name[i]; i++)
        if (!((name[i] >= 'A' && name[i] <= 'Z') || (name[i] >= 'a' && name[i] <= 'z') ||
              (name[i] >= '0' && name[i] <= '9') || name[i] == '_'))
            return false;
    return i <= WS_GUARD_ENV_NAME_MAX;
}

static bool is_function(const char *value)
{
    while (is_blank(*value))
        value++;
    return value[0] == '(' && value[1] == ')';
}

/* Sets NAME=VALUE in `env`, replacing an earlier entry of that name. */
static int env_set(struct strv *env, const char *name, const char *value)
{
    size_t name_len = strlen(name), len = name_len + 1 + strlen(value) + 1, i;
    char *entry = malloc(len);

    if (!entry)
        return -ENOMEM;
    snprintf(entry, len, "%s=%s", name, value);
    for (i = 0; i < env->n; i++) {
        if (strncmp(env->v[i], name, name_len) == 0 && env->v[i][name_len] == '=') {
            free(env->v[i]);
            env->v[i] = entry;
            return 0;
        }
    }
    return strv_push(env, entry);
}

/* The allowlist entry for `name`, or -1. */
static int host_allowed(const char *name)
{
    size_t i;

    for (i = 0; i < WS_ELEMENTSOF(host_allowlist); i++) {
        size_t n = strlen(host_allowlist[i].name);

        if (host_allowlist[i].prefix ? strncmp(name, host_allowlist[i].name, n) == 0
                                     : strcmp(name, host_allowlist[i].name) == 0)
            return (int)i;
    }
    return -1;
}

static bool value_ok(enum value_class c, const char *v)
{
    const char *extra = c == V_LOCALE ? "_.@+-:"
                        : c == V_TZ   ? "_.+-,:<>/"
                        : c == V_WORD ? "_.+-"
                                      : "";
    const char *p;

    for (p = v; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        bool alnum =
            (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');

        if (c == V_NUMBER ? !(ch >= '0' && ch <= '9') : !(alnum || in_set(ch, extra)))
            return false;
    }
    if (c == V_TZ && (v[0] == '/' || (v[0] == ':' && v[1] == '/') || strstr(v, "..")))
        return false;
    return true;
}

static int check_client_env(const struct ws_guard_policy *p, const struct ws_guard_request *r,
                            const struct limits *lim, struct ws_diag *d)
{
    size_t i, j, total = 0;

    if (r->n_env > 0 && !r->env)
        return refuse_str(d, -WS_EMALFORMED, "env", "", "env missing");
    if (r->n_env > lim->env)
        return refuse_limit(d, "env", r->env[lim->env].name, lim->env,
                            "too many environment variables");
    for (i = 0; i < r->n_env; i++) {
        const char *name = r->env[i].name;
        const char *value = r->env[i].value ? r->env[i].value : "";
        size_t name_len;

        if (!name || !name[0])
            return refuse_str(d, -WS_EMALFORMED, "env_name", "", "empty environment variable name");
        name_len = strnlen(name, WS_GUARD_ENV_NAME_MAX + 1);
        if (name_len > WS_GUARD_ENV_NAME_MAX || strchr(name, '='))
            return refuse_str(d, -WS_EMALFORMED, "env_name", name,
                              "invalid environment variable name");
        if (denied(name))
            return refuse_str(d, -WS_EENVDENIED, "denylist", name,
                              "environment variable not allowed");
        if (!valid_name(name))
            return refuse_str(d, -WS_EMALFORMED, "env_name", name,
                              "invalid environment variable name");
        if (is_function(value))
            return refuse_str(d, -WS_EENVDENIED, "function_value", name,
                              "environment value looks like a shell function");
        if (p->host) {
            int k = host_allowed(name);

            if (k < 0)
                return refuse_str(d, -WS_EENVDENIED, "env_allowlist", name,
                                  "environment variable not on the allowlist of a command "
                                  "on the host");
            if (!value_ok(host_allowlist[k].value, value))
                return refuse_str(d, -WS_EENVDENIED, "env_value", name,
                                  "environment value not allowed for this variable");
        }
        for (j = 0; j < i; j++)
            if (strcmp(r->env[j].name, name) == 0)
                return refuse_str(d, -WS_EMALFORMED, "env_duplicate", name,
                                  "environment variable given twice");
        total += name_len + 1 + strnlen(value, lim->env_bytes + 1) + 1;
        if (total > lim->env_bytes)
            return refuse_limit(d, "env_bytes", name, lim->env_bytes, "environment too large");
    }
    return 0;
}

static bool env_has(const struct strv *env, const char *name)
{
    size_t name_len = strlen(name), i;

    for (i = 0; i < env->n; i++)
        if (strncmp(env->v[i], name, name_len) == 0 && env->v[i][name_len] == '=')
            return true;
    return false;
}

/* HOME's XDG base directories where the specification puts them by
 * default, and git locked down (the tables above). */
static int host_env(const struct ws_guard_policy *p, struct strv *env)
{
    static const struct {
        const char *name;
        const char *sub;
    } xdg[] = {
        {"XDG_CONFIG_HOME", "/.config"},
        {"XDG_CACHE_HOME", "/.cache"},
        {"XDG_DATA_HOME", "/.local/share"},
        {"XDG_STATE_HOME", "/.local/state"},
    };
    char buf[PATH_MAX + 64], name[32];
    size_t i, n = WS_ELEMENTSOF(git_overrides);
    int e = 0;

    for (i = 0; e >= 0 && i < WS_ELEMENTSOF(xdg); i++) {
        if ((size_t)snprintf(buf, sizeof(buf), "%s%s", p->home, xdg[i].sub) >= sizeof(buf))
            return -EINVAL;
        e = env_set(env, xdg[i].name, buf);
    }
    if (e >= 0 && p->runtime_dir)
        e = env_set(env, "XDG_RUNTIME_DIR", p->runtime_dir);
    for (i = 0; e >= 0 && i < WS_ELEMENTSOF(git_env); i++)
        e = env_set(env, git_env[i].name, git_env[i].value);
    snprintf(buf, sizeof(buf), "%zu", n);
    if (e >= 0)
        e = env_set(env, "GIT_CONFIG_COUNT", buf);
    for (i = 0; e >= 0 && i < n; i++) {
        snprintf(name, sizeof(name), "GIT_CONFIG_KEY_%zu", i);
        e = env_set(env, name, git_overrides[i].key);
        snprintf(name, sizeof(name), "GIT_CONFIG_VALUE_%zu", i);
        if (e >= 0)
            e = env_set(env, name, git_overrides[i].value);
    }
    return e;
}

static int build_env(const struct ws_guard_policy *p, const struct ws_guard_request *r,
                     struct strv *ret_env)
{
    struct strv env = {0};
    size_t i;
    int e;

    e = env_set(&env, "PATH", p->path);
    if (e >= 0)
        e = env_set(&env, "HOME", p->home);
    if (e >= 0)
        e = env_set(&env, "LANG", WS_GUARD_LANG);
    if (e >= 0 && r->pty)
        e = env_set(&env, "TERM", WS_GUARD_TERM);
    if (e >= 0 && p->host)
        e = host_env(p, &env);
    /* The operator's names never replace the base. */
    for (i = 0; e >= 0 && i < p->n_pass_env; i++) {
        const char *name = p->pass_env[i], *value;

        if (!name || !valid_name(name) || env_has(&env, name) || denied(name))
            continue;
        value = getenv(name);
        if (value)
            e = env_set(&env, name, value);
    }
    for (i = 0; e >= 0 && i < r->n_env; i++)
        e = env_set(&env, r->env[i].name, r->env[i].value ? r->env[i].value : "");
    if (e < 0) {
        strv_free(&env);
        return e;
    }
    *ret_env = env;
    return 0;
}

/* ---- the whole check ---- */

static size_t or_default(size_t v, size_t def)
{
    return v ? v : def;
}

int ws_guard_check_env(bool host, const struct ws_guard_env *env, size_t n_env, struct ws_diag *d)
{
    const struct ws_guard_policy p = {.host = host};
    const struct ws_guard_request r = {.env = env, .n_env = n_env};
    const struct limits lim = {
        .env = WS_GUARD_ENV_MAX,
        .env_bytes = WS_GUARD_ENV_BYTES_MAX,
    };

    return check_client_env(&p, &r, &lim, d);
}

struct ws_guard_result *ws_guard_result_free(struct ws_guard_result *res)
{
    size_t i;

    if (!res)
        return NULL;
    if (res->argv)
        for (i = 0; i < res->argc; i++)
            free(res->argv[i]);
    free(res->argv);
    if (res->envp)
        for (i = 0; i < res->n_env; i++) {
            explicit_bzero(res->envp[i], strlen(res->envp[i]));
            free(res->envp[i]);
        }
    free(res->envp);
    free(res->cwd);
    free(res);
    return NULL;
}

int ws_guard_check(const struct ws_guard_policy *p, const struct ws_guard_request *r,
                   struct ws_diag *d, struct ws_guard_result **ret_res)
{
    struct strv args = {0}, env = {0};
    struct ws_guard_result *res = NULL;
    struct limits lim;
    bool has_argv, has_command;
    const char *cwd;
    char *exe = NULL;
    size_t i;
    int e;

    if (!p || !r || !ret_res || !p->path || !p->home || (p->n_allowed > 0 && !p->allowed) ||
        (p->n_pass_env > 0 && !p->pass_env))
        return -EINVAL;
    lim = (struct limits){
        .args = or_default(p->limits.args, WS_GUARD_ARGS_MAX),
        .arg_bytes = or_default(p->limits.arg_bytes, WS_GUARD_ARG_BYTES_MAX),
        .argv_bytes = or_default(p->limits.argv_bytes, WS_GUARD_ARGV_BYTES_MAX),
        .command_bytes = or_default(p->limits.command_bytes, WS_GUARD_COMMAND_BYTES_MAX),
        .env = or_default(p->limits.env, WS_GUARD_ENV_MAX),
        .env_bytes = or_default(p->limits.env_bytes, WS_GUARD_ENV_BYTES_MAX),
    };

    has_argv = r->argc > 0;
    has_command = r->command && r->command_len > 0;
    if (has_argv == has_command)
        return refuse_str(d, -WS_EMALFORMED, "request", "",
                          has_argv ? "both argv and command given"
                                   : "neither argv nor command given");
    if (has_argv && !r->argv)
        return refuse_str(d, -WS_EMALFORMED, "argv", "", "argv missing");

    if (has_command) {
        if (r->command_len > lim.command_bytes)
            return refuse_limit(d, "command_bytes", r->command, lim.command_bytes,
                                "command too long");
        e = tokenize(r->command, r->command_len, d, &args);
        if (e < 0)
            goto out;
        e = check_args((const char *const *)args.v, args.n, &lim, d);
        if (e < 0)
            goto out;
    } else {
        e = check_args(r->argv, r->argc, &lim, d);
        if (e < 0)
            goto out;
        for (i = 0; i < r->argc; i++) {
            e = strv_push(&args, strdup(r->argv[i]));
            if (e < 0)
                goto out;
        }
    }

    e = check_command(p, args.v[0], d, &exe);
    if (e < 0)
        goto out;
    free(args.v[0]);
    args.v[0] = exe;
    exe = NULL;

    e = check_client_env(p, r, &lim, d);
    if (e < 0)
        goto out;

    cwd = r->cwd && r->cwd[0] ? r->cwd : ".";
    e = ws_vfs_check_path(cwd);
    if (e == -EXDEV) {
        e = refuse_str(d, -WS_ECWDESCAPE, "cwd", cwd, "working directory escapes the workspace");
        goto out;
    }
    if (e < 0) {
        refuse_str(d, e, "cwd", cwd, "unusable working directory");
        goto out;
    }

    e = build_env(p, r, &env);
    if (e < 0)
        goto out;

    res = calloc(1, sizeof(*res));
    if (!res || !(res->cwd = strdup(cwd))) {
        e = -ENOMEM;
        goto out;
    }
    res->argv = args.v;
    res->argc = args.n;
    res->envp = env.v;
    res->n_env = env.n;
    args = (struct strv){0};
    env = (struct strv){0};
    *ret_res = res;
    res = NULL;
    e = 0;
out:
    free(exe);
    strv_free(&args);
    strv_free(&env);
    ws_guard_result_free(res);
    return e;
}
