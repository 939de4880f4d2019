/* UTF-8 validation (RFC 3629: no overlongs, no surrogates, <= U+10FFFF). */
#ifndef WS_BASE_UTF8_H
#define WS_BASE_UTF8_H

#include <stdbool.h>
#include <stddef.h>

#include <stdint.h>

/* Length (1-4) of the valid UTF-8 sequence starting at p (n > 0 bytes
 * available), or 0 when none does. A NUL byte counts as invalid: no string
 * the server accepts or reports may contain one. */
size_t ws_utf8_sequence(const uint8_t *p, size_t n);

/* Whether all `len` bytes are valid UTF-8 without NUL. */
bool ws_utf8_valid(const char *s, size_t len);

#endif
