/* The snapshot stat cache; see snapcache.h. */
#include "server/registry/snapcache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct seen {
    char *path; /* NULL: a free slot */
    uint64_t ino, size;
    int64_t mtime_ns, ctime_ns;
    uint8_t hash[WS_SNAPCACHE_HASH_LEN];
};

struct ws_snapset {
    int64_t began_ns;
    struct seen *v; /* open addressing, cap a power of two */
    size_t n, cap;
};

/* A workspace's set in the cache, most recently put first. */
struct slot {
    char *workspace_id;
    struct ws_snapset *set;
    struct slot *next;
};

struct ws_snapcache {
    pthread_mutex_t lock;
    size_t max_entries, entries;
    struct slot *slots;
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

struct ws_snapset *ws_snapset_new(int64_t began_ns)
{
    struct ws_snapset *set = calloc(1, sizeof(*set));
    if (set)
        set->began_ns = began_ns;
    return set;
}

void ws_snapset_free(struct ws_snapset *set)
{
    if (!set)
        return;
    for (size_t i = 0; i < set->cap; i++)
        free(set->v[i].path);
    free(set->v);
    free(set);
}

size_t ws_snapset_size(const struct ws_snapset *set)
{
    return set ? set->n : 0;
}

static struct seen *find(const struct ws_snapset *set, const char *path)
{
    if (!set || !set->cap)
        return NULL;
    for (size_t i = hash_str(path) & (set->cap - 1);; i = (i + 1) & (set->cap - 1)) {
        if (!set->v[i].path || strcmp(set->v[i].path, path) == 0)
            return &set->v[i];
    }
}

static int grow(struct ws_snapset *set)
{
    size_t cap = set->cap ? 2 * set->cap : 1024;
    struct seen *v = calloc(cap, sizeof(*v));

    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < set->cap; i++) {
        if (!set->v[i].path)
            continue;
        size_t j = hash_str(set->v[i].path) & (cap - 1);
        while (v[j].path)
            j = (j + 1) & (cap - 1);
        v[j] = set->v[i];
    }
    free(set->v);
    set->v = v;
    set->cap = cap;
    return 0;
}

int ws_snapset_add(struct ws_snapset *set, const char *path, const struct ws_stat *st,
                   const uint8_t hash[WS_SNAPCACHE_HASH_LEN])
{
    struct seen *e;

    if (!st->ctime_ns || !st->ino || set->n >= WS_SNAPCACHE_MAX_ENTRIES)
        return 0;
    if (4 * (set->n + 1) > 3 * set->cap) {
        int err = grow(set);
        if (err < 0)
            return err;
    }
    e = find(set, path);
    if (!e->path) {
        e->path = strdup(path);
        if (!e->path)
            return -ENOMEM;
        set->n++;
    }
    e->ino = st->ino;
    e->size = st->size;
    e->mtime_ns = st->mtime_ns;
    e->ctime_ns = st->ctime_ns;
    memcpy(e->hash, hash, WS_SNAPCACHE_HASH_LEN);
    return 0;
}

bool ws_snapset_lookup(const struct ws_snapset *set, const char *path, const struct ws_stat *st,
                       uint8_t hash[WS_SNAPCACHE_HASH_LEN])
{
    const struct seen *e = find(set, path);

    if (!e || !e->path || !st->ctime_ns || !st->ino)
        return false;
    if (e->ino != st->ino || e->size != st->size || e->mtime_ns != st->mtime_ns ||
        e->ctime_ns != st->ctime_ns)
        return false;
    if (st->ctime_ns > set->began_ns - WS_SNAPCACHE_RACY_NS)
        return false;
    memcpy(hash, e->hash, WS_SNAPCACHE_HASH_LEN);
    return true;
}

int ws_snapcache_new(size_t max_entries, struct ws_snapcache **ret)
{
    struct ws_snapcache *c = calloc(1, sizeof(*c));

    if (!c)
        return -ENOMEM;
    pthread_mutex_init(&c->lock, NULL);
    c->max_entries = max_entries;
    *ret = c;
    return 0;
}

static void slot_free(struct slot *s)
{
    ws_snapset_free(s->set);
    free(s->workspace_id);
    free(s);
}

void ws_snapcache_free(struct ws_snapcache *c)
{
    if (!c)
        return;
    while (c->slots) {
        struct slot *s = c->slots;
        c->slots = s->next;
        slot_free(s);
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Unlinks the slot of `workspace_id` (lock held); NULL when none. */
static struct slot *unlink_slot(struct ws_snapcache *c, const char *workspace_id)
{
    for (struct slot **p = &c->slots; *p; p = &(*p)->next) {
        if (strcmp((*p)->workspace_id, workspace_id) == 0) {
            struct slot *s = *p;
            *p = s->next;
            c->entries -= s->set->n;
            return s;
        }
    }
    return NULL;
}

struct ws_snapset *ws_snapcache_take(struct ws_snapcache *c, const char *workspace_id)
{
    struct ws_snapset *set = NULL;

    pthread_mutex_lock(&c->lock);
    struct slot *s = unlink_slot(c, workspace_id);
    pthread_mutex_unlock(&c->lock);
    if (s) {
        set = s->set;
        s->set = NULL;
        slot_free(s);
    }
    return set;
}

void ws_snapcache_put(struct ws_snapcache *c, const char *workspace_id, struct ws_snapset *set)
{
    struct slot *s = NULL, *old, *drop = NULL;

    if (!set)
        return;
    if (set->n > c->max_entries || !(s = calloc(1, sizeof(*s))) ||
        !(s->workspace_id = strdup(workspace_id))) {
        if (s)
            free(s);
        ws_snapset_free(set);
        return;
    }
    s->set = set;
    pthread_mutex_lock(&c->lock);
    old = unlink_slot(c, workspace_id);
    s->next = c->slots;
    c->slots = s;
    c->entries += set->n;
    /* Forget the oldest until the whole fits. */
    while (c->entries > c->max_entries) {
        struct slot **p = &c->slots;
        while ((*p)->next)
            p = &(*p)->next;
        struct slot *last = *p;
        *p = NULL;
        c->entries -= last->set->n;
        last->next = drop;
        drop = last;
    }
    pthread_mutex_unlock(&c->lock);
    if (old)
        slot_free(old);
    while (drop) {
        struct slot *next = drop->next;
        slot_free(drop);
        drop = next;
    }
}

void ws_snapcache_forget(struct ws_snapcache *c, const char *workspace_id)
{
    pthread_mutex_lock(&c->lock);
    struct slot *s = unlink_slot(c, workspace_id);
    pthread_mutex_unlock(&c->lock);
    if (s)
        slot_free(s);
}
