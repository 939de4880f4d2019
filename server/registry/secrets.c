#include "server/registry/secrets.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The mapping: this header, then n offsets pairs, then "name\0value\0"
 * for each pair. */
struct ws_secrets {
    size_t map_len;
    size_t n;
    struct {
        size_t name, value;
    } at[];
};

static size_t page_round(size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    return (len + page - 1) / page * page;
}

/* Builds a set from two lists (a name in `add` wins over `base`'s). */
static int build(const struct ws_secret *base, size_t n_base, const struct ws_secret *add,
                 size_t n_add, struct ws_secrets **ret)
{
    size_t n = 0, bytes = 0;
    const struct ws_secret *keep[WS_SECRETS_MAX * 2];

    if (n_base > WS_SECRETS_MAX || n_add > WS_SECRETS_MAX)
        return -E2BIG;
    for (size_t i = 0; i < n_base; i++) {
        bool replaced = false;
        for (size_t j = 0; j < n_add && !replaced; j++)
            replaced = strcmp(base[i].name, add[j].name) == 0;
        if (!replaced)
            keep[n++] = &base[i];
    }
    for (size_t j = 0; j < n_add; j++)
        keep[n++] = &add[j];
    for (size_t i = 0; i < n; i++)
        bytes += strlen(keep[i]->name) + 1 + strlen(keep[i]->value ? keep[i]->value : "") + 1;

    size_t head = sizeof(struct ws_secrets) + n * sizeof(((struct ws_secrets *)0)->at[0]);
    size_t len = page_round(head + bytes + 1);
    struct ws_secrets *s =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED)
        return -errno;
    /* Out of core dumps whatever the server's RLIMIT_CORE, and not copied
     * into a child by fork. */
    if (madvise(s, len, MADV_DONTDUMP) < 0 || madvise(s, len, MADV_DONTFORK) < 0) {
        int err = -errno;
        munmap(s, len);
        return err;
    }
    (void)mlock(s, len); /* best effort: RLIMIT_MEMLOCK may not allow it */
    s->map_len = len;
    s->n = n;
    char *p = (char *)s + head;
    for (size_t i = 0; i < n; i++) {
        const char *v = keep[i]->value ? keep[i]->value : "";
        size_t nl = strlen(keep[i]->name) + 1, vl = strlen(v) + 1;

        s->at[i].name = (size_t)(p - (char *)s);
        memcpy(p, keep[i]->name, nl);
        p += nl;
        s->at[i].value = (size_t)(p - (char *)s);
        memcpy(p, v, vl);
        p += vl;
    }
    *ret = s;
    return 0;
}

int ws_secrets_new(const struct ws_secret *pairs, size_t n, struct ws_secrets **ret)
{
    return build(NULL, 0, pairs, n, ret);
}

int ws_secrets_merge(const struct ws_secrets *base, const struct ws_secret *add, size_t n_add,
                     struct ws_secrets **ret)
{
    struct ws_secret own[WS_SECRETS_MAX];
    size_t n = base ? base->n : 0;

    if (n > WS_SECRETS_MAX)
        return -E2BIG;
    for (size_t i = 0; i < n; i++)
        ws_secrets_at(base, i, &own[i].name, &own[i].value);
    return build(own, n, add, n_add, ret);
}

void ws_secrets_free(struct ws_secrets *s)
{
    size_t len;

    if (!s)
        return;
    len = s->map_len;
    explicit_bzero(s, len);
    munlock(s, len);
    munmap(s, len);
}

size_t ws_secrets_count(const struct ws_secrets *s)
{
    return s ? s->n : 0;
}

void ws_secrets_at(const struct ws_secrets *s, size_t i, const char **ret_name,
                   const char **ret_value)
{
    *ret_name = (const char *)s + s->at[i].name;
    *ret_value = (const char *)s + s->at[i].value;
}

const char *ws_secrets_get(const struct ws_secrets *s, const char *name)
{
    for (size_t i = 0; s && i < s->n; i++)
        if (strcmp((const char *)s + s->at[i].name, name) == 0)
            return (const char *)s + s->at[i].value;
    return NULL;
}

const void *ws_secrets_memory(const struct ws_secrets *s, size_t *ret_len)
{
    *ret_len = s->map_len;
    return s;
}
