/* An iterative, sorted directory walk (an explicit stack of open
 * directories, never recursion) and ListDir on top of it. A walk never
 * follows a symlink: it only descends through opendir_at, which refuses
 * them. */
#include "server/vfs/ops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/vfs/internal.h"
#include "server/work/pool.h"

/* One name of a directory, stored in the frame's name arena. */
struct went {
    uint32_t off;
    uint16_t len;
    uint8_t type;
};

struct frame {
    struct ws_vfs_dir *dir;
    char *names; /* arena, names not NUL-terminated */
    size_t names_len, names_cap;
    struct went *ents;
    size_t n, cap, idx;
    size_t path_len; /* length of this directory's path in walk->path */
    unsigned depth;  /* 0 for the walk's root */
};

struct ws_walk {
    struct ws_vfs *fs;
    const struct ws_budget *budget; /* NULL: none */
    uint64_t entries;               /* names read */
    uint64_t ticks;                 /* names read or returned, for the ctl checks */
    bool spent;                     /* max_entries reached with names still unread */
    bool names_dropped;             /* a directory held more than dir_names_max */
    unsigned nframes;
    bool have_last; /* the last entry returned can be descended into */
    const char *last_name;
    size_t last_path_len;
    struct frame frames[WS_LIST_DEPTH_MAX + 1];
    char path[WS_WALK_PATH_MAX + 1];
};

bool ws_walk_skippable(int err)
{
    switch (-err) {
    case ENOENT:
    case ENOTDIR:
    case EISDIR:
    case EACCES:
    case EPERM:
    case ELOOP:
    case EXDEV:
    case ESTALE:
    case WS_ESYMLINK_LEAF:
    case WS_ESPECIAL:
        return true;
    default:
        return false;
    }
}

static int went_cmp(const void *a, const void *b, void *arena)
{
    const struct went *x = a, *y = b;
    const char *names = arena;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(names + x->off, names + y->off, n);

    if (c)
        return c;
    return (x->len > y->len) - (x->len < y->len);
}

static void frame_sort(struct frame *f)
{
    if (f->n > 1)
        qsort_r(f->ents, f->n, sizeof(*f->ents), went_cmp, f->names);
}

/* Keeps the `keep` smallest names and compacts the arena. */
static int frame_trim(struct frame *f, size_t keep)
{
    size_t total = 0, off = 0;
    char *arena;

    frame_sort(f);
    if (f->n <= keep)
        return 0;
    f->n = keep;
    for (size_t i = 0; i < f->n; i++)
        total += f->ents[i].len;
    arena = malloc(total ? total : 1);
    if (!arena)
        return -ENOMEM;
    for (size_t i = 0; i < f->n; i++) {
        memcpy(arena + off, f->names + f->ents[i].off, f->ents[i].len);
        f->ents[i].off = (uint32_t)off;
        off += f->ents[i].len;
    }
    free(f->names);
    f->names = arena;
    f->names_cap = total ? total : 1;
    f->names_len = total;
    return 0;
}

static int frame_add(struct frame *f, const char *name, size_t len, enum ws_ftype type)
{
    if (f->n == f->cap) {
        size_t ncap = f->cap ? f->cap * 2 : 64;
        struct went *n = reallocarray(f->ents, ncap, sizeof(*n));

        if (!n)
            return -ENOMEM;
        f->ents = n;
        f->cap = ncap;
    }
    if (f->names_cap - f->names_len < len) {
        size_t ncap = f->names_cap ? f->names_cap * 2 : 1024;
        char *n;

        while (ncap - f->names_len < len)
            ncap *= 2;
        if (ncap > UINT32_MAX)
            return -WS_ELIMIT;
        n = realloc(f->names, ncap);
        if (!n)
            return -ENOMEM;
        f->names = n;
        f->names_cap = ncap;
    }
    memcpy(f->names + f->names_len, name, len);
    f->ents[f->n++] = (struct went){
        .off = (uint32_t)f->names_len,
        .len = (uint16_t)len,
        .type = (uint8_t)type,
    };
    f->names_len += len;
    return 0;
}

/* Counts one name read or returned; every WS_BUDGET_CHECK_ENTRIES, the
 * budget's ctl decides whether the walk goes on. */
static int walk_tick(struct ws_walk *w)
{
    if (!w->budget || (++w->ticks & (WS_BUDGET_CHECK_ENTRIES - 1)) != 0)
        return 0;
    return ws_budget_check(w->budget);
}

/* Reads every entry of f->dir, sorted, keeping the `keep` smallest
 * (0: all, up to WS_WALK_DIR_MAX), within the walk's budget. */
static int frame_fill(struct ws_walk *w, struct frame *f, size_t keep)
{
    const struct ws_budget *b = w->budget;
    struct ws_dirent ent;
    bool budget_keeps = false;
    int r = 0;

    /* The budget's bound on names held applies when it is the tighter
     * one; a directory cut by it is a truncated walk, one cut by the
     * caller's `keep` is the caller's business. */
    if (b && b->dir_names_max) {
        size_t most = b->dir_names_max < WS_WALK_DIR_MAX ? b->dir_names_max : WS_WALK_DIR_MAX;

        if (!keep || most < keep) {
            keep = most;
            budget_keeps = true;
        }
    }
    while (!w->spent && (r = w->fs->ops->readdir(f->dir, &ent)) > 0) {
        if (ent.name_len == 0 || ent.name_len > WS_VFS_NAME_MAX)
            continue;
        r = walk_tick(w);
        if (r < 0)
            return r;
        if (b && b->max_entries && w->entries >= b->max_entries) {
            w->spent = true;
            break;
        }
        w->entries++;
        if (!keep && f->n >= WS_WALK_DIR_MAX)
            return -WS_ELIMIT;
        r = frame_add(f, ent.name, ent.name_len, ent.type);
        if (r < 0)
            return r;
        if (keep && f->n >= 2 * keep) {
            w->names_dropped |= budget_keeps;
            r = frame_trim(f, keep);
            if (r < 0)
                return r;
        }
    }
    if (r < 0)
        return r;
    if (keep) {
        w->names_dropped |= budget_keeps && f->n > keep;
        return frame_trim(f, keep);
    }
    frame_sort(f);
    return 0;
}

static void frame_clear(struct ws_vfs *fs, struct frame *f)
{
    fs->ops->closedir(f->dir);
    free(f->names);
    free(f->ents);
    *f = (struct frame){0};
}

/* Takes ownership of dir. */
static int walk_push(struct ws_walk *w, struct ws_vfs_dir *dir, size_t path_len, unsigned depth,
                     size_t keep)
{
    struct frame *f = &w->frames[w->nframes];
    int r;

    *f = (struct frame){.dir = dir, .path_len = path_len, .depth = depth};
    r = frame_fill(w, f, keep);
    if (r < 0) {
        frame_clear(w->fs, f);
        return r;
    }
    w->nframes++;
    return 0;
}

int ws_walk_open(struct ws_vfs *fs, const char *open_path, const char *base, size_t keep,
                 const struct ws_budget *budget, struct ws_walk **ret)
{
    struct ws_walk *w;
    struct ws_vfs_dir *dir = NULL;
    size_t blen = strlen(base);
    int r;

    if (blen > WS_VFS_PATH_MAX)
        return -WS_EBADPATH;
    r = ws_budget_check(budget);
    if (r < 0)
        return r;
    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->fs = fs;
    w->budget = budget;
    memcpy(w->path, base, blen + 1);
    r = fs->ops->opendir(fs, open_path, &dir);
    if (r < 0)
        goto out;
    r = walk_push(w, dir, blen, 0, keep);
    if (r < 0)
        goto out;
    *ret = w;
    w = NULL;
    r = 0;
out:
    ws_walk_free(w);
    return r;
}

int ws_walk_next(struct ws_walk *w, struct ws_walk_entry *ret)
{
    w->have_last = false;
    while (w->nframes > 0) {
        struct frame *f = &w->frames[w->nframes - 1];
        const struct went *e;
        size_t pos;
        int r;

        if (f->idx >= f->n) {
            frame_clear(w->fs, f);
            w->nframes--;
            continue;
        }
        /* The names were read already, but each one returned costs its
         * caller a stat or more: a cancel must stop that too. */
        r = walk_tick(w);
        if (r < 0)
            return r;
        e = &f->ents[f->idx++];
        pos = f->path_len;
        if (pos > 0)
            w->path[pos++] = '/';
        memcpy(w->path + pos, f->names + e->off, e->len);
        w->path[pos + e->len] = '\0';
        w->have_last = true;
        w->last_name = w->path + pos;
        w->last_path_len = pos + e->len;
        *ret = (struct ws_walk_entry){
            .path = w->path,
            .path_len = pos + e->len,
            .name = w->path + pos,
            .name_len = e->len,
            .type = (enum ws_ftype)e->type,
            .depth = f->depth + 1,
            .dir = f->dir,
        };
        return 1;
    }
    return 0;
}

int ws_walk_descend(struct ws_walk *w, size_t keep)
{
    struct frame *top;
    struct ws_vfs_dir *dir = NULL;
    int r;

    if (!w->have_last || w->nframes == 0)
        return -EINVAL;
    if (w->spent) {
        w->have_last = false;
        return 0;
    }
    top = &w->frames[w->nframes - 1];
    if (top->depth + 1 > WS_LIST_DEPTH_MAX)
        return -WS_ELIMIT;
    r = w->fs->ops->opendir_at(top->dir, w->last_name, &dir);
    if (r < 0)
        return r;
    w->have_last = false;
    return walk_push(w, dir, w->last_path_len, top->depth + 1, keep);
}

bool ws_walk_truncated(const struct ws_walk *w)
{
    return w->spent || w->names_dropped;
}

void ws_walk_free(struct ws_walk *w)
{
    if (!w)
        return;
    while (w->nframes > 0)
        frame_clear(w->fs, &w->frames[--w->nframes]);
    free(w);
}

int ws_list(struct ws_fsops *ops, const char *path, unsigned depth, unsigned max_entries,
            ws_entry_cb cb, void *userdata, bool *ret_truncated)
{
    return ws_list_within(ops, path, depth, max_entries, NULL, cb, userdata, ret_truncated, NULL);
}

int ws_list_within(struct ws_fsops *ops, const char *path, unsigned depth, unsigned max_entries,
                   const struct ws_budget *budget, ws_entry_cb cb, void *userdata,
                   bool *ret_truncated, enum ws_trunc_reason *ret_reason)
{
    char base[WS_VFS_PATH_MAX + 1];
    struct ws_walk *w = NULL;
    struct ws_walk_entry e;
    unsigned count = 0;
    enum ws_trunc_reason reason = WS_TRUNC_NONE;
    int r;

    if (depth > WS_LIST_DEPTH_MAX || max_entries > WS_LIST_MAX_ENTRIES)
        return -WS_ELIMIT;
    if (depth == 0)
        depth = 1;
    if (max_entries == 0)
        max_entries = WS_LIST_DEFAULT_ENTRIES;
    r = ws_vfs_check_path(path);
    if (r < 0)
        return r;
    r = ws_path_normalize(path, base, sizeof(base));
    if (r < 0)
        return r;
    /* One name more than can be reported, to tell a full listing from a
     * truncated one. */
    r = ws_walk_open(ops->fs, path, base, (size_t)max_entries + 1, budget, &w);
    if (r < 0)
        return r;
    while ((r = ws_walk_next(w, &e)) > 0) {
        struct ws_stat st;

        if (count == max_entries) {
            reason = WS_TRUNC_MAX_RESULTS;
            break;
        }
        r = ops->fs->ops->stat_at(e.dir, e.name, &st);
        if (r < 0) {
            if (ws_walk_skippable(r))
                continue;
            goto out;
        }
        r = cb(userdata, &(struct ws_entry){.path = e.path, .path_len = e.path_len, .st = st});
        if (r < 0)
            goto out;
        count++;
        if (st.type == WS_FT_DIRECTORY && e.depth < depth) {
            r = ws_walk_descend(w, (size_t)(max_entries - count) + 1);
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
    return r;
}

/* ---- sweeping the server's leftovers ---- */

int ws_vfs_sweep_transient(struct ws_vfs *fs, uint64_t *ret_removed)
{
    struct ws_walk *w = NULL;
    struct ws_walk_entry e;
    uint64_t removed = 0;
    int r;

    r = ws_walk_open(fs, ".", "", 0, NULL, &w);
    if (r < 0)
        goto out;
    while ((r = ws_walk_next(w, &e)) > 0) {
        if (ws_vfs_transient_name(e.name, e.name_len, NULL)) {
            /* The walk holds the directory's sorted names already: removing
             * one of them does not disturb it. */
            r = fs->ops->remove(fs, e.path, true, NULL);
            if (r < 0 && r != -ENOENT)
                goto out;
            removed += r == 0;
            continue;
        }
        if (e.type != WS_FT_DIRECTORY)
            continue;
        r = ws_walk_descend(w, 0);
        /* Deeper than a walk goes (WS_LIST_DEPTH_MAX) or gone: nothing the
         * server made lies there. */
        if (r < 0 && r != -WS_ELIMIT && !ws_walk_skippable(r))
            goto out;
    }
out:
    ws_walk_free(w);
    if (ret_removed)
        *ret_removed = removed;
    return r < 0 ? r : 0;
}
