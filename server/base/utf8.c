#include "server/base/utf8.h"

#include <stdint.h>

/* Returns the length of the UTF-8 sequence at p[0..n), or 0 if it is not
 * valid (overlong forms, surrogates and code points above U+10FFFF are not),
 * or is a NUL byte. */
size_t ws_utf8_sequence(const uint8_t *p, size_t n)
{
    uint8_t c = p[0];
    size_t len, i;
    uint8_t lo = 0x80, hi = 0xbf;

    if (c == 0)
        return 0;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4;
    else
        return 0;
    if (n < len)
        return 0;
    /* The second byte's range depends on the first (RFC 3629, table 3-7). */
    if (c == 0xe0)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return len;
}

bool ws_utf8_valid(const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;

    while (i < len) {
        size_t k = ws_utf8_sequence(p + i, len - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}
