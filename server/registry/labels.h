/* Workspace names, labels and label selectors (OpenRequest.name, labels;
 * ListRequest.label_selector), with the forms Kubernetes gives them.
 *
 * A label key is an optional prefix and "/", then a name: the prefix a DNS
 * subdomain of at most 253 bytes (lowercase letters, digits, '-' and '.',
 * each dot-separated part starting and ending with a letter or digit),
 * the name 1-63 bytes of [A-Za-z0-9._-] starting and ending with a letter
 * or digit. A value is empty or of a name's form. A workspace name is
 * 1-63 bytes of [a-z0-9-] starting and ending with a letter or digit.
 *
 * Every refusal is -WS_EMALFORMED with `d` filled: a message, metadata
 * "field" and the offending key ("label") or term ("term"), cut to fit.
 */
#ifndef WS_REGISTRY_LABELS_H
#define WS_REGISTRY_LABELS_H

#include <stdbool.h>
#include <stddef.h>

#include "server/base/errors.h"

#define WS_LABELS_MAX         64
#define WS_LABEL_NAME_MAX     63
#define WS_LABEL_PREFIX_MAX   253
#define WS_NAME_MAX           63
#define WS_SELECTOR_BYTES_MAX 4096
#define WS_SELECTOR_TERMS_MAX 64

struct ws_label {
    const char *key;
    const char *value;
};

/* Checks n labels (at most WS_LABELS_MAX, keys distinct). */
int ws_labels_check(const struct ws_label *labels, size_t n, struct ws_diag *d);
/* Checks a workspace name. */
int ws_name_check(const char *name, struct ws_diag *d);

enum ws_selector_op {
    WS_SELECT_EQ,     /* key=value, key==value */
    WS_SELECT_NE,     /* key!=value: also true without the key */
    WS_SELECT_EXISTS, /* key */
    WS_SELECT_ABSENT, /* !key */
};

struct ws_selector_term {
    enum ws_selector_op op;
    char *key;
    char *value;
};

struct ws_selector {
    struct ws_selector_term *terms;
    size_t n;
};

/* Parses a selector ("" selects everything) into *ret; free it with
 * ws_selector_free. Errors: -WS_EMALFORMED (field=label_selector),
 * -ENOMEM. */
int ws_selector_parse(const char *text, struct ws_selector *ret, struct ws_diag *d);
void ws_selector_free(struct ws_selector *sel);
/* Whether n labels meet every term of sel. */
bool ws_selector_match(const struct ws_selector *sel, const struct ws_label *labels, size_t n);

#endif
