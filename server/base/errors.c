#include "server/base/errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void ws_diag_set(struct ws_diag *d, const char *fmt, ...)
{
    va_list ap;

    if (!d)
        return;
    va_start(ap, fmt);
    vsnprintf(d->message, sizeof(d->message), fmt, ap);
    va_end(ap);
}

void ws_diag_meta(struct ws_diag *d, const char *key, const char *fmt, ...)
{
    va_list ap;

    if (!d || d->n_meta >= WS_DIAG_META_MAX)
        return;
    snprintf(d->key[d->n_meta], WS_DIAG_KEY_MAX, "%s", key);
    va_start(ap, fmt);
    vsnprintf(d->value[d->n_meta], WS_DIAG_VALUE_MAX, fmt, ap);
    va_end(ap);
    d->n_meta++;
}
