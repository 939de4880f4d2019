/* UTF-8 validation (RFC 3629: no overlongs, no surrogates, <= U+10FFFF). */
#ifndef WS_BASE_UTF8_H
#define WS_BASE_UTF8_H

#include <stdbool.h>
#include <stddef.h>

bool ws_utf8_valid(const char *s, size_t len);

#endif
