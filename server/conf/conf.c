/* The configuration file's grammar; see conf.h. */
#include "server/conf/conf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/base/io.h"

/* How much of an offending line or name an error quotes. */
#define QUOTE_MAX 64

struct seen {
    char name[WS_CONF_SECTION_MAX + WS_CONF_NAME_MAX + 2]; /* section.key */
    unsigned line;
};

static bool blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* Trims blanks at both ends of s[0..*len) in place; returns the start. */
static char *trim(char *s, size_t *len)
{
    while (*len && blank(*s)) {
        s++;
        (*len)--;
    }
    while (*len && blank(s[*len - 1]))
        (*len)--;
    s[*len] = '\0';
    return s;
}

static bool name_ok(const char *s)
{
    size_t n = strlen(s);

    return n > 0 && n <= WS_CONF_NAME_MAX &&
           strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-_") == n;
}

/* The NAME of a "prefix.NAME" section. */
static bool subname_ok(const char *s)
{
    size_t n = strlen(s);

    return n > 0 && n <= WS_CONF_NAME_MAX &&
           strspn(s, "abcdefghijklmnopqrstuvwxyz"
                     "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* Whether `name` is one of `sections`, or a named section of one of its
 * "prefix." entries; *ret_bad_name when the prefix matched but the NAME
 * after it is not a valid one. */
static bool section_known(const char *const *sections, const char *name, bool *ret_bad_name)
{
    *ret_bad_name = false;
    for (const char *const *sec = sections; *sec; sec++) {
        size_t n = strlen(*sec);
        if (n && (*sec)[n - 1] == '.') {
            if (strncmp(*sec, name, n) != 0)
                continue;
            if (subname_ok(name + n))
                return true;
            *ret_bad_name = true;
        } else if (strcmp(*sec, name) == 0) {
            return true;
        }
    }
    return false;
}

/* Up to QUOTE_MAX bytes of s for an error line, anything but printable
 * ASCII (escape sequences, UTF-8, quotes) as '?', so a hostile file cannot
 * write to the operator's terminal through the message. */
static const char *quote(const char *s, char buf[QUOTE_MAX + 4])
{
    size_t i;

    for (i = 0; s[i] && i < QUOTE_MAX; i++)
        buf[i] = (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"') ? s[i] : '?';
    if (s[i])
        buf[i++] = '.', buf[i++] = '.', buf[i++] = '.';
    buf[i] = '\0';
    return buf;
}

/* Reads the whole file (bounded) into a NUL-terminated buffer. */
static int slurp(const char *path, char **ret, size_t *ret_len)
{
    struct stat st;
    char *buf = NULL;
    ssize_t n;
    int fd, err;

    /* O_NONBLOCK: a FIFO named as the file must not hang the start before
     * fstat refuses it (regular files ignore the flag). */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0) {
        err = -errno;
        goto out;
    }
    err = -EINVAL;
    if (!S_ISREG(st.st_mode))
        goto out;
    err = -EFBIG;
    if (st.st_size > WS_CONF_FILE_MAX)
        goto out;
    err = -ENOMEM;
    /* One byte more than allowed: a file that grew since fstat is seen. */
    buf = malloc(WS_CONF_FILE_MAX + 2);
    if (!buf)
        goto out;
    n = ws_read_all(fd, buf, WS_CONF_FILE_MAX + 1);
    if (n < 0) {
        err = (int)n;
        goto out;
    }
    if (n > WS_CONF_FILE_MAX) {
        err = -EFBIG;
        goto out;
    }
    buf[n] = '\0';
    *ret = buf;
    buf = NULL;
    *ret_len = (size_t)n;
    err = 0;
out:
    free(buf);
    close(fd);
    return err;
}

int ws_conf_parse(const char *path, const char *const *sections, ws_conf_fn fn, void *ud, char *msg,
                  size_t msg_size)
{
    struct seen *seen = NULL;
    size_t n_seen = 0, len = 0;
    char section[WS_CONF_SECTION_MAX + 1] = "";
    char q[QUOTE_MAX + 4];
    char *buf = NULL;
    unsigned line_no = 0;
    int err;

    err = slurp(path, &buf, &len);
    if (err < 0) {
        if (err == -EFBIG)
            snprintf(msg, msg_size, "config: %s: larger than %d bytes", path, WS_CONF_FILE_MAX);
        else if (err == -EINVAL)
            snprintf(msg, msg_size, "config: %s: not a regular file", path);
        else
            snprintf(msg, msg_size, "config: %s: %s", path, strerror(-err));
        return err;
    }
    err = -ENOMEM;
    seen = calloc(WS_CONF_KEYS_MAX, sizeof(*seen));
    if (!seen) {
        snprintf(msg, msg_size, "config: %s: out of memory", path);
        goto out;
    }
    err = -EINVAL;
    for (char *p = buf; p < buf + len;) {
        char *nl = memchr(p, '\n', (size_t)(buf + len - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(buf + len - p);
        char *next = nl ? nl + 1 : buf + len;

        line_no++;
        if (n > WS_CONF_LINE_MAX) {
            snprintf(msg, msg_size, "config: %s:%u: line longer than %d bytes", path, line_no,
                     WS_CONF_LINE_MAX);
            goto out;
        }
        /* A NUL would end the line for every string function below and
         * hide the rest of it; no text file has one. */
        if (memchr(p, '\0', n)) {
            snprintf(msg, msg_size, "config: %s:%u: NUL byte in the line", path, line_no);
            goto out;
        }
        char *s = trim(p, &n);
        p = next;
        if (n == 0 || s[0] == '#' || s[0] == ';')
            continue;
        if (s[0] == '[') {
            if (n < 3 || s[n - 1] != ']') {
                snprintf(msg, msg_size, "config: %s:%u: \"%s\": a section header is [name]", path,
                         line_no, quote(s, q));
                goto out;
            }
            s[n - 1] = '\0';
            size_t k = n - 2;
            char *name = trim(s + 1, &k);
            bool bad_name;
            if (!section_known(sections, name, &bad_name)) {
                snprintf(msg, msg_size,
                         bad_name ? "config: %s:%u: section \"%s\": the name after the '.' must "
                                    "be 1-64 of A-Z a-z 0-9 . _ -"
                                  : "config: %s:%u: section \"%s\": unknown section",
                         path, line_no, quote(name, q));
                goto out;
            }
            snprintf(section, sizeof(section), "%s", name);
            continue;
        }
        char *eq = strchr(s, '=');
        size_t klen = eq ? (size_t)(eq - s) : strcspn(s, " \t");
        char key[WS_CONF_NAME_MAX + 1] = "";
        char full[sizeof(seen->name)];
        if (klen <= WS_CONF_NAME_MAX) {
            /* s starts with no blank: only trailing ones go. */
            memcpy(key, s, klen);
            key[klen] = '\0';
            trim(key, &klen);
        }
        if (!name_ok(key)) {
            snprintf(msg, msg_size, "config: %s:%u: \"%s\": expected key = value", path, line_no,
                     quote(s, q));
            goto out;
        }
        if (!section[0]) {
            snprintf(msg, msg_size, "config: %s:%u: key \"%s\": outside any [section]", path,
                     line_no, key);
            goto out;
        }
        snprintf(full, sizeof(full), "%s.%s", section, key);
        if (!eq) {
            snprintf(msg, msg_size, "config: %s:%u: key \"%s\": no '=' (expected key = value)",
                     path, line_no, full);
            goto out;
        }
        size_t vlen = n - (size_t)(eq + 1 - s);
        char *value = trim(eq + 1, &vlen);
        if (vlen == 0) {
            snprintf(msg, msg_size, "config: %s:%u: key \"%s\": empty value", path, line_no, full);
            goto out;
        }
        if (value[0] == '"' || value[0] == '\'') {
            snprintf(msg, msg_size,
                     "config: %s:%u: key \"%s\": quotes are not part of the syntax; write the "
                     "value bare",
                     path, line_no, full);
            goto out;
        }
        for (size_t i = 0; i < n_seen; i++)
            if (strcmp(seen[i].name, full) == 0) {
                snprintf(msg, msg_size,
                         "config: %s:%u: key \"%s\": duplicate, first set on line %u", path,
                         line_no, full, seen[i].line);
                goto out;
            }
        char why[256] = "";
        if (fn(ud, section, key, value, line_no, why, sizeof(why)) < 0) {
            snprintf(msg, msg_size, "config: %s:%u: key \"%s\": %s", path, line_no, full, why);
            goto out;
        }
        if (n_seen == WS_CONF_KEYS_MAX) {
            snprintf(msg, msg_size, "config: %s:%u: more than %d keys", path, line_no,
                     WS_CONF_KEYS_MAX);
            goto out;
        }
        snprintf(seen[n_seen].name, sizeof(seen[n_seen].name), "%s", full);
        seen[n_seen++].line = line_no;
    }
    err = 0;
out:
    free(seen);
    free(buf);
    return err;
}
