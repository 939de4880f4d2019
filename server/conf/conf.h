/* The configuration file's grammar, line by line:
 *
 *   # comment            (also ';'; whole lines only, after blanks)
 *   [section]            a section from the caller's list
 *   [prefix.NAME]        a named section, when the list has "prefix."
 *                        (NAME: [A-Za-z0-9._-], 1 to WS_CONF_NAME_MAX bytes,
 *                        e.g. one section per tenant)
 *   key = value          the value is the rest of the line, blanks trimmed
 *                        at both ends; it must not be empty
 *
 * Blank lines are ignored; a line may end in CRLF. Every key belongs to
 * the section above it and may be set once. Quotes are not syntax: a value
 * that starts with a quote is refused rather than taken with its quotes.
 * Section and key names are lowercase letters, digits, '-' and '_'; the
 * NAME of a named section may also hold uppercase letters and '.'.
 *
 * What keys exist and what values they take is the caller's: ws_conf_parse
 * hands each key = value to a callback, which validates and keeps it.
 *
 * Errors are one line in the caller's buffer:
 *   config: FILE:LINE: key "section.key": why
 *   config: FILE:LINE: section "name": why
 *   config: FILE:LINE: why                 (a line that names no key)
 *   config: FILE: why                      (the file could not be read)
 * Bytes of the file quoted there are printable ASCII ('?' for others).
 *
 * Single-threaded use only; no state outside the call.
 */
#ifndef WS_CONF_CONF_H
#define WS_CONF_CONF_H

#include <stddef.h>

/* The largest file read, and the longest line (without its newline). */
#define WS_CONF_FILE_MAX (1024 * 1024)
#define WS_CONF_LINE_MAX 8192
/* Distinct keys one file may set (duplicates are found among them). */
#define WS_CONF_KEYS_MAX 128
/* Longest section or key name (and NAME of a named section). */
#define WS_CONF_NAME_MAX 64
/* Longest section as the callback sees it: "prefix.NAME". */
#define WS_CONF_SECTION_MAX (2 * WS_CONF_NAME_MAX + 1)
/* Room for any error line ws_conf_parse writes, path included. */
#define WS_CONF_MSG_MAX (4096 + 512)

/* Called for each key = value with the line it is on. Returns 0, or -1
 * with a reason written to why[0..why_size) ("unknown key", "not a number
 * in 1..10", ...). `value` lives only for the call. */
typedef int (*ws_conf_fn)(void *ud, const char *section, const char *key, const char *value,
                          unsigned line, char *why, size_t why_size);

/* Reads `path`. `sections` is a NULL-terminated list of the known section
 * names; one that ends in '.' admits every "prefix.NAME". Returns 0; -EINVAL with the error line in
 * msg for a file that breaks the grammar or a value the callback refused; or the -errno of a file
 * that could not be read (-EFBIG: over WS_CONF_FILE_MAX), with "config: FILE: reason" in msg. */
int ws_conf_parse(const char *path, const char *const *sections, ws_conf_fn fn, void *ud, char *msg,
                  size_t msg_size);

#endif
