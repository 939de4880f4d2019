/* Glob patterns: split into '/'-separated components, each matched against
 * one path component with fnmatch(3) (FNM_PERIOD: a leading '.' must be
 * matched by a literal '.'), and "**" matching any number of components
 * that do not start with '.'. The pattern runs as an NFA over components,
 * so a walk can stop descending as soon as no continuation can match. */
#include "server/vfs/ops.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "server/vfs/internal.h"

enum comp_kind {
    COMP_LITERAL, /* compared with strcmp */
    COMP_MAGIC,   /* fnmatch */
    COMP_STAR2,   /* "**" */
};

struct ws_globpat {
    size_t n;     /* components */
    size_t words; /* uint64_t words of a state: n + 1 positions */
    char **comp;
    uint8_t *kind;
    char *arena;
};

static inline void bit_set(uint64_t *s, size_t i)
{
    s[i / 64] |= UINT64_C(1) << (i % 64);
}

static inline bool bit_get(const uint64_t *s, size_t i)
{
    return (s[i / 64] >> (i % 64)) & 1;
}

/* Skips a "[:class:]", "[.sym.]" or "[=equiv=]" inside a bracket
 * expression starting at s (which points at '['). Returns the index just
 * past it, or 0 when s does not start one (then '[' is an ordinary
 * member). */
static size_t skip_class_name(const char *s)
{
    char delim = s[1];
    const char *end;

    if (delim != ':' && delim != '.' && delim != '=')
        return 0;
    for (end = s + 2; *end; end++)
        if (end[0] == delim && end[1] == ']')
            return (size_t)(end - s) + 2;
    return 0;
}

/* Checks one component's syntax: no trailing backslash, every '[' closed.
 * Returns 1 when it has magic characters, 0 for a literal, or
 * -WS_EBADPATTERN. */
static int check_component(const char *s)
{
    int magic = 0;

    for (size_t i = 0; s[i]; i++) {
        size_t j, skip;

        switch (s[i]) {
        case '\\':
            if (!s[i + 1])
                return -WS_EBADPATTERN;
            i++;
            magic = 1;
            break;
        case '*':
        case '?':
            magic = 1;
            break;
        case '[':
            j = i + 1;
            if (s[j] == '!' || s[j] == '^')
                j++;
            if (s[j] == ']')
                j++;
            while (s[j] && s[j] != ']') {
                if (s[j] == '[' && (skip = skip_class_name(s + j)) > 0) {
                    j += skip;
                } else if (s[j] == '\\') {
                    if (!s[j + 1])
                        return -WS_EBADPATTERN;
                    j += 2;
                } else {
                    j++;
                }
            }
            if (!s[j])
                return -WS_EBADPATTERN;
            i = j;
            magic = 1;
            break;
        default:
            break;
        }
    }
    return magic;
}

void ws_globpat_free(struct ws_globpat *p)
{
    if (!p)
        return;
    free(p->comp);
    free(p->kind);
    free(p->arena);
    free(p);
}

int ws_globpat_compile(const char *pattern, struct ws_globpat **ret)
{
    struct ws_globpat *p = NULL;
    size_t len, max_comp;
    char *s;
    int r;

    if (!pattern)
        return -WS_EBADPATTERN;
    len = strnlen(pattern, WS_GLOB_PATTERN_MAX + 1);
    if (len == 0 || len > WS_GLOB_PATTERN_MAX || pattern[0] == '/')
        return -WS_EBADPATTERN;
    max_comp = len / 2 + 1;
    p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->arena = strndup(pattern, len);
    p->comp = calloc(max_comp, sizeof(*p->comp));
    p->kind = calloc(max_comp, sizeof(*p->kind));
    if (!p->arena || !p->comp || !p->kind) {
        r = -ENOMEM;
        goto out;
    }
    s = p->arena;
    while (*s) {
        char *end = strchrnul(s, '/');
        bool last = *end == '\0';

        *end = '\0';
        if (s[0] == '\0' || strcmp(s, ".") == 0) {
            /* "a//b" and "./a" mean "a/b" and "a" */
        } else if (strcmp(s, "..") == 0) {
            r = -WS_EBADPATTERN;
            goto out;
        } else if (strcmp(s, "**") == 0) {
            /* "**" twice in a row means the same as once. */
            if (p->n == 0 || p->kind[p->n - 1] != COMP_STAR2) {
                p->comp[p->n] = s;
                p->kind[p->n++] = COMP_STAR2;
            }
        } else {
            r = check_component(s);
            if (r < 0)
                goto out;
            p->comp[p->n] = s;
            p->kind[p->n++] = r ? COMP_MAGIC : COMP_LITERAL;
        }
        s = last ? end : end + 1;
    }
    if (p->n == 0) {
        r = -WS_EBADPATTERN;
        goto out;
    }
    p->words = (p->n + 1 + 63) / 64;
    *ret = p;
    p = NULL;
    r = 0;
out:
    ws_globpat_free(p);
    return r;
}

size_t ws_globpat_words(const struct ws_globpat *p)
{
    return p->words;
}

/* "**" may match no component at all. */
static void closure(const struct ws_globpat *p, uint64_t *s)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->kind[i] == COMP_STAR2 && bit_get(s, i))
            bit_set(s, i + 1);
}

void ws_globpat_start(const struct ws_globpat *p, uint64_t *ret_state)
{
    memset(ret_state, 0, p->words * sizeof(*ret_state));
    bit_set(ret_state, 0);
    closure(p, ret_state);
}

void ws_globpat_step(const struct ws_globpat *p, const uint64_t *state, const char *name,
                     uint64_t *ret_state)
{
    memset(ret_state, 0, p->words * sizeof(*ret_state));
    for (size_t w = 0; w < p->words; w++) {
        uint64_t bits = state[w];

        while (bits) {
            size_t i = w * 64 + (size_t)__builtin_ctzll(bits);

            bits &= bits - 1;
            if (i >= p->n)
                continue;
            switch (p->kind[i]) {
            case COMP_STAR2:
                if (name[0] != '.')
                    bit_set(ret_state, i);
                break;
            case COMP_LITERAL:
                if (strcmp(p->comp[i], name) == 0)
                    bit_set(ret_state, i + 1);
                break;
            case COMP_MAGIC:
                if (fnmatch(p->comp[i], name, FNM_PERIOD) == 0)
                    bit_set(ret_state, i + 1);
                break;
            }
        }
    }
    closure(p, ret_state);
}

bool ws_globpat_accepts(const struct ws_globpat *p, const uint64_t *state)
{
    return bit_get(state, p->n);
}

bool ws_globpat_alive(const struct ws_globpat *p, const uint64_t *state)
{
    for (size_t i = 0; i < p->n; i++)
        if (bit_get(state, i))
            return true;
    return false;
}

int ws_glob_match(const char *pattern, const char *path)
{
    struct ws_globpat *p = NULL;
    uint64_t *a = NULL, *b = NULL;
    char name[WS_VFS_NAME_MAX + 1];
    const char *s = path;
    int r;

    r = ws_globpat_compile(pattern, &p);
    if (r < 0)
        return r;
    a = calloc(p->words, sizeof(*a));
    b = calloc(p->words, sizeof(*b));
    if (!a || !b) {
        r = -ENOMEM;
        goto out;
    }
    ws_globpat_start(p, a);
    while (*s) {
        const char *end = strchrnul(s, '/');
        size_t n = (size_t)(end - s);

        if (n > WS_VFS_NAME_MAX) {
            r = 0;
            goto out;
        }
        if (n > 0 && !(n == 1 && s[0] == '.')) {
            uint64_t *t;

            memcpy(name, s, n);
            name[n] = '\0';
            ws_globpat_step(p, a, name, b);
            t = a;
            a = b;
            b = t;
        }
        s = *end ? end + 1 : end;
    }
    r = ws_globpat_accepts(p, a) ? 1 : 0;
out:
    free(a);
    free(b);
    ws_globpat_free(p);
    return r;
}

int ws_glob(struct ws_fsops *ops, const char *base, const char *pattern, unsigned max_results,
            ws_entry_cb cb, void *userdata, bool *ret_truncated)
{
    return ws_glob_within(ops, base, pattern, max_results, NULL, cb, userdata, ret_truncated, NULL);
}

int ws_glob_within(struct ws_fsops *ops, const char *base, const char *pattern,
                   unsigned max_results, const struct ws_budget *budget, ws_entry_cb cb,
                   void *userdata, bool *ret_truncated, enum ws_trunc_reason *ret_reason)
{
    char norm[WS_VFS_PATH_MAX + 1];
    struct ws_globpat *p = NULL;
    struct ws_walk *w = NULL;
    struct ws_walk_entry e;
    uint64_t *states = NULL;
    unsigned count = 0;
    enum ws_trunc_reason reason = WS_TRUNC_NONE;
    size_t words;
    int r;

    if (max_results > WS_LIST_MAX_ENTRIES)
        return -WS_ELIMIT;
    if (max_results == 0)
        max_results = WS_LIST_DEFAULT_ENTRIES;
    if (!base || !base[0])
        base = ".";
    r = ws_vfs_check_path(base);
    if (r < 0)
        return r;
    r = ws_path_normalize(base, norm, sizeof(norm));
    if (r < 0)
        return r;
    r = ws_globpat_compile(pattern, &p);
    if (r < 0)
        return r;
    words = p->words;
    /* One state per depth: an entry's state derives from its parent's,
     * which a pre-order walk keeps intact while the subtree runs. */
    states = calloc((WS_LIST_DEPTH_MAX + 1) * words, sizeof(*states));
    if (!states) {
        r = -ENOMEM;
        goto out;
    }
    ws_globpat_start(p, states);
    r = ws_walk_open(ops->fs, base, norm, 0, budget, &w);
    if (r < 0)
        goto out;
    while ((r = ws_walk_next(w, &e)) > 0) {
        uint64_t *st_here = states + (size_t)e.depth * words;
        struct ws_stat st;
        bool accept, alive;

        ws_globpat_step(p, st_here - words, e.name, st_here);
        accept = ws_globpat_accepts(p, st_here);
        alive = ws_globpat_alive(p, st_here) && e.depth < WS_LIST_DEPTH_MAX;
        if (!accept && !(alive && (e.type == WS_FT_DIRECTORY || e.type == WS_FT_UNKNOWN)))
            continue;
        r = ops->fs->ops->stat_at(e.dir, e.name, &st);
        if (r < 0) {
            if (ws_walk_skippable(r))
                continue;
            goto out;
        }
        if (accept) {
            if (count == max_results) {
                reason = WS_TRUNC_MAX_RESULTS;
                break;
            }
            r = cb(userdata, &(struct ws_entry){.path = e.path, .path_len = e.path_len, .st = st});
            if (r < 0)
                goto out;
            count++;
        }
        if (alive && st.type == WS_FT_DIRECTORY) {
            r = ws_walk_descend(w, 0);
            if (r < 0 && !ws_walk_skippable(r))
                goto out;
        }
    }
    if (r < 0)
        goto out;
    if (reason == WS_TRUNC_NONE && ws_walk_truncated(w))
        reason = WS_TRUNC_ENTRIES_BUDGET;
    if (ret_truncated)
        *ret_truncated = reason != WS_TRUNC_NONE;
    if (ret_reason)
        *ret_reason = reason;
    r = 0;
out:
    ws_walk_free(w);
    free(states);
    ws_globpat_free(p);
    return r;
}
