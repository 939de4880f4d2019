/* Argument forms shared by wsctl's commands (see args.h). */
#include "clients/cli/args.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

int wsc_parse_duration_ms(const char *s, uint64_t *ret_ms)
{
    static const struct {
        const char *unit;
        double ms;
    } units[] = {
        {"ms", 1.0}, {"s", 1e3}, {"", 1e3}, {"m", 60e3}, {"h", 3600e3}, {"d", 86400e3},
    };
    char *end;
    double v;

    /* strtod would take "inf", "nan", hex and a sign: only digits and a
     * point are a duration. */
    if (!isdigit((unsigned char)s[0]))
        return -EINVAL;
    for (const char *p = s; *p && !isalpha((unsigned char)*p); p++)
        if (!isdigit((unsigned char)*p) && *p != '.')
            return -EINVAL;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s)
        return -EINVAL;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(end, units[i].unit) != 0)
            continue;
        v *= units[i].ms;
        if (!(v < 9.2e18))
            return -ERANGE;
        *ret_ms = (uint64_t)(v + 0.5);
        return 0;
    }
    return -EINVAL;
}

int wsc_kvs_set(struct wsc_kvs *kv, const char *key, const char *value)
{
    if (!key[0])
        return -EINVAL;
    for (size_t i = 0; i < kv->n; i++) {
        if (strcmp(kv->key[i], key) == 0) {
            kv->value[i] = value;
            return 0;
        }
    }
    if (kv->n == WSC_KV_MAX)
        return -E2BIG;
    kv->key[kv->n] = key;
    kv->value[kv->n] = value;
    kv->n++;
    return 0;
}

int wsc_kvs_add(struct wsc_kvs *kv, char *arg)
{
    char *eq = strchr(arg, '=');

    if (!eq || eq == arg)
        return -EINVAL;
    *eq = '\0';
    return wsc_kvs_set(kv, arg, eq + 1);
}

int wsc_kvs_add_from_env(struct wsc_kvs *kv, const char *name)
{
    const char *value = getenv(name);

    if (!name[0])
        return -EINVAL;
    if (!value)
        return -ENOENT;
    return wsc_kvs_set(kv, name, value);
}

/* One key of a detach sequence: a character, or ctrl-X. */
static int detach_key(const char *s, size_t len, uint8_t *ret_key)
{
    if (len == 1) {
        *ret_key = (uint8_t)s[0];
        return 0;
    }
    if (len == 6 && strncasecmp(s, "ctrl-", 5) == 0) {
        char x = s[5];
        if (x >= 'a' && x <= 'z')
            x = (char)(x - 'a' + 'A');
        /* @ A-Z [ \ ] ^ _ are 0x40-0x5f: ctrl clears bit 6. */
        if (x >= '@' && x <= '_') {
            *ret_key = (uint8_t)(x & 0x1f);
            return 0;
        }
    }
    return -EINVAL;
}

int wsc_detach_parse(const char *spec, struct wsc_detach *ret_detach)
{
    struct wsc_detach d = {0};
    const char *p = spec;

    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);

        if (d.n == WSC_DETACH_KEYS_MAX || detach_key(p, len, &d.keys[d.n]) < 0)
            return -EINVAL;
        d.n++;
        p += len;
        if (*p == ',' && !*++p)
            return -EINVAL;
    }
    *ret_detach = d;
    return 0;
}

bool wsc_detach_feed(struct wsc_detach *d, const uint8_t *in, size_t len, uint8_t *out,
                     size_t *ret_out_len)
{
    size_t n = 0;

    for (size_t i = 0; i < len; i++) {
        if (d->n == 0) {
            out[n++] = in[i];
            continue;
        }
        if (in[i] != d->keys[d->matched] && d->matched > 0) {
            /* The held prefix was typing after all; the key that broke
             * it may start the sequence again. */
            memcpy(out + n, d->keys, d->matched);
            n += d->matched;
            d->matched = 0;
        }
        if (in[i] == d->keys[d->matched]) {
            if (++d->matched == d->n) {
                d->matched = 0;
                *ret_out_len = n;
                return true;
            }
            continue;
        }
        out[n++] = in[i];
    }
    *ret_out_len = n;
    return false;
}

int wsc_request_id(char ret_id[WSC_REQUEST_ID_LEN])
{
    uint8_t raw[16];
    char id[WSC_REQUEST_ID_LEN];
    ssize_t got = getrandom(raw, sizeof(raw), 0);

    if (got < 0)
        return -errno;
    if ((size_t)got != sizeof(raw))
        return -EIO;
    memcpy(id, "wsctl-", 6);
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(id + 6 + 2 * i, 3, "%02x", raw[i]);
    memcpy(ret_id, id, sizeof(id));
    return 0;
}
