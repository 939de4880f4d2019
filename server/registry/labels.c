#include "server/registry/labels.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static bool is_lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* 1..WS_LABEL_NAME_MAX bytes of [A-Za-z0-9._-], alphanumeric at both ends. */
static bool name_part_ok(const char *s, size_t len)
{
    if (len == 0 || len > WS_LABEL_NAME_MAX || !is_alnum(s[0]) || !is_alnum(s[len - 1]))
        return false;
    for (size_t i = 0; i < len; i++)
        if (!is_alnum(s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

/* A DNS subdomain: dot-separated parts of [a-z0-9-], alphanumeric at both
 * ends of each. */
static bool prefix_ok(const char *s, size_t len)
{
    size_t start = 0;

    if (len == 0 || len > WS_LABEL_PREFIX_MAX)
        return false;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] != '.') {
            if (!is_lower_alnum(s[i]) && s[i] != '-')
                return false;
            continue;
        }
        if (i == start || !is_lower_alnum(s[start]) || !is_lower_alnum(s[i - 1]) || i - start > 63)
            return false;
        start = i + 1;
    }
    return true;
}

static bool key_ok(const char *key)
{
    const char *slash = strchr(key, '/');

    if (!slash)
        return name_part_ok(key, strlen(key));
    return prefix_ok(key, (size_t)(slash - key)) && name_part_ok(slash + 1, strlen(slash + 1));
}

static bool value_ok(const char *value)
{
    size_t len = strlen(value);

    return len == 0 || name_part_ok(value, len);
}

static int refuse(struct ws_diag *d, const char *field, const char *key, const char *item,
                  const char *message)
{
    ws_diag_set(d, "%s", message);
    ws_diag_meta(d, "field", "%s", field);
    /* Metadata values are bounded: a long key is cut, never refused twice. */
    ws_diag_meta(d, key, "%.*s", WS_DIAG_VALUE_MAX - 1, item);
    return -WS_EMALFORMED;
}

int ws_labels_check(const struct ws_label *labels, size_t n, struct ws_diag *d)
{
    if (n > WS_LABELS_MAX) {
        ws_diag_set(d, "more than %d labels", WS_LABELS_MAX);
        ws_diag_meta(d, "field", "labels");
        ws_diag_meta(d, "limit", "%d", WS_LABELS_MAX);
        return -WS_EMALFORMED;
    }
    for (size_t i = 0; i < n; i++) {
        const char *key = labels[i].key ? labels[i].key : "";
        const char *value = labels[i].value ? labels[i].value : "";

        if (!key_ok(key))
            return refuse(d, "labels", "label", key,
                          "invalid label key: [prefix/]name, the name 1-63 bytes of "
                          "[A-Za-z0-9._-] starting and ending with a letter or digit");
        if (!value_ok(value))
            return refuse(d, "labels", "label", key,
                          "invalid label value: empty, or 1-63 bytes of [A-Za-z0-9._-] "
                          "starting and ending with a letter or digit");
        for (size_t j = 0; j < i; j++)
            if (strcmp(labels[j].key, key) == 0)
                return refuse(d, "labels", "label", key, "label given twice");
    }
    return 0;
}

int ws_name_check(const char *name, struct ws_diag *d)
{
    size_t len = strlen(name);
    bool ok =
        len > 0 && len <= WS_NAME_MAX && is_lower_alnum(name[0]) && is_lower_alnum(name[len - 1]);

    for (size_t i = 0; ok && i < len; i++)
        ok = is_lower_alnum(name[i]) || name[i] == '-';
    if (ok)
        return 0;
    return refuse(d, "name", "name", name,
                  "invalid name: 1-63 bytes of [a-z0-9-] starting and ending with a letter or "
                  "digit");
}

void ws_selector_free(struct ws_selector *sel)
{
    for (size_t i = 0; i < sel->n; i++) {
        free(sel->terms[i].key);
        free(sel->terms[i].value);
    }
    free(sel->terms);
    *sel = (struct ws_selector){0};
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* One term, text[0..len) with blanks around it already stripped. */
static int parse_term(const char *text, size_t len, struct ws_selector_term *t)
{
    const char *op = NULL;
    size_t key_len, op_len = 0;

    t->op = WS_SELECT_EXISTS;
    if (len > 0 && text[0] == '!') {
        t->op = WS_SELECT_ABSENT;
        text++;
        len--;
    } else {
        for (size_t i = 0; i < len; i++)
            if (text[i] == '=' || (text[i] == '!' && i + 1 < len && text[i + 1] == '=')) {
                op = text + i;
                break;
            }
    }
    key_len = op ? (size_t)(op - text) : len;
    if (op && op[0] == '!') {
        t->op = WS_SELECT_NE;
        op_len = 2;
    } else if (op) {
        t->op = WS_SELECT_EQ;
        op_len = (size_t)(text + len - op) >= 2 && op[1] == '=' ? 2 : 1;
    }
    while (key_len > 0 && is_blank(text[key_len - 1]))
        key_len--;
    t->key = strndup(text, key_len);
    if (!t->key)
        return -ENOMEM;
    if (op) {
        const char *v = op + op_len;
        size_t vlen = (size_t)(text + len - v);

        while (vlen > 0 && is_blank(*v)) {
            v++;
            vlen--;
        }
        t->value = strndup(v, vlen);
        if (!t->value)
            return -ENOMEM;
    }
    if (!key_ok(t->key) || (t->value && !value_ok(t->value)))
        return -WS_EMALFORMED;
    return 0;
}

int ws_selector_parse(const char *text, struct ws_selector *ret, struct ws_diag *d)
{
    struct ws_selector sel = {0};
    size_t len = strlen(text), start = 0;
    int err;

    if (len > WS_SELECTOR_BYTES_MAX) {
        ws_diag_set(d, "label selector over %d bytes", WS_SELECTOR_BYTES_MAX);
        ws_diag_meta(d, "field", "label_selector");
        return -WS_EMALFORMED;
    }
    while (start < len) {
        size_t end = start;

        while (end < len && text[end] != ',')
            end++;
        size_t a = start, b = end;
        while (a < b && is_blank(text[a]))
            a++;
        while (b > a && is_blank(text[b - 1]))
            b--;
        if (sel.n == WS_SELECTOR_TERMS_MAX) {
            ws_selector_free(&sel);
            ws_diag_set(d, "more than %d terms in the label selector", WS_SELECTOR_TERMS_MAX);
            ws_diag_meta(d, "field", "label_selector");
            return -WS_EMALFORMED;
        }
        struct ws_selector_term *terms = realloc(sel.terms, (sel.n + 1) * sizeof(*terms));
        if (!terms) {
            ws_selector_free(&sel);
            return -ENOMEM;
        }
        sel.terms = terms;
        sel.terms[sel.n] = (struct ws_selector_term){0};
        err = parse_term(text + a, b - a, &sel.terms[sel.n]);
        sel.n++;
        if (err < 0) {
            ws_selector_free(&sel);
            if (err == -ENOMEM)
                return err;
            char term[WS_DIAG_VALUE_MAX];
            snprintf(term, sizeof(term), "%.*s", (int)(b - a), text + a);
            return refuse(d, "label_selector", "term", term,
                          "invalid label selector term: key, !key, key=value or key!=value");
        }
        if (end == len)
            break;
        start = end + 1;
        if (start == len) {
            ws_selector_free(&sel);
            return refuse(d, "label_selector", "term", "",
                          "invalid label selector: empty term after ','");
        }
    }
    *ret = sel;
    return 0;
}

static const char *label_value(const struct ws_label *labels, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(labels[i].key, key) == 0)
            return labels[i].value ? labels[i].value : "";
    return NULL;
}

bool ws_selector_match(const struct ws_selector *sel, const struct ws_label *labels, size_t n)
{
    for (size_t i = 0; i < sel->n; i++) {
        const struct ws_selector_term *t = &sel->terms[i];
        const char *v = label_value(labels, n, t->key);
        bool ok;

        switch (t->op) {
        case WS_SELECT_EQ:
            ok = v && strcmp(v, t->value) == 0;
            break;
        case WS_SELECT_NE:
            ok = !v || strcmp(v, t->value) != 0;
            break;
        case WS_SELECT_EXISTS:
            ok = v != NULL;
            break;
        default:
            ok = v == NULL;
            break;
        }
        if (!ok)
            return false;
    }
    return true;
}
