#include "server/audit/audit.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "server/base/fd.h"
#include "server/base/io.h"
#include "server/base/time.h"
#include "server/base/utf8.h"

#define HEX_LEN 64
/* File reads go through a buffer this large. */
#define READ_CHUNK 65536

static const char ZERO_HASH[HEX_LEN + 1] =
    "0000000000000000000000000000000000000000000000000000000000000000";

/* Where the next record of one workspace goes: found by reading the file
 * once, then kept up to date by each append. */
struct head {
    char id[WS_AUDIT_ID_MAX + 1];
    uint64_t next_seq;
    char prev[HEX_LEN + 1];
    /* The file ends without a newline (a torn record): the next append
     * ends that line first, so it stays visible as the bad line it is. */
    bool torn;
};

struct ws_audit {
    int dir_fd;
    pthread_mutex_t lock;
    struct head *heads;
    size_t n_heads;
    size_t next_victim;
};

static void sha256_hex(const void *data, size_t len, char ret[HEX_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;

    if (EVP_Digest(data, len, d, &n, EVP_sha256(), NULL) != 1 || n != 32) {
        memset(ret, '?', HEX_LEN); /* never verifies: the record is then flagged */
        ret[HEX_LEN] = '\0';
        return;
    }
    for (size_t i = 0; i < 32; i++) {
        ret[2 * i] = hex[d[i] >> 4];
        ret[2 * i + 1] = hex[d[i] & 0xf];
    }
    ret[HEX_LEN] = '\0';
}

/* Ids become file names: letters, digits, '_' and '-' only. */
static bool id_ok(const char *id)
{
    size_t n = id ? strlen(id) : 0;

    if (n == 0 || n > WS_AUDIT_ID_MAX)
        return false;
    return strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

int ws_audit_new(const char *dir, struct ws_audit **ret)
{
    struct ws_audit *a;
    int fd;

    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -errno;
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    a = calloc(1, sizeof(*a));
    if (a)
        a->heads = calloc(WS_AUDIT_HEADS_MAX, sizeof(*a->heads));
    if (!a || !a->heads) {
        free(a);
        close(fd);
        return -ENOMEM;
    }
    a->dir_fd = fd;
    pthread_mutex_init(&a->lock, NULL);
    *ret = a;
    return 0;
}

void ws_audit_free(struct ws_audit *a)
{
    if (!a)
        return;
    close(a->dir_fd);
    pthread_mutex_destroy(&a->lock);
    free(a->heads);
    free(a);
}

/* ---- reading lines ---- */

struct reader {
    int fd;
    uint64_t left; /* bytes of the snapshot not read yet */
    size_t pos, len;
    char buf[READ_CHUNK];
};

/* The next line into out[0..WS_AUDIT_RECORD_MAX] (bytes past that are
 * counted in *ret_len, not kept). Returns 1 with a line, 0 at the end, or
 * -errno. *ret_complete: the line ended with a newline. */
static int next_line(struct reader *r, char *out, size_t *ret_len, bool *ret_complete)
{
    size_t n = 0;
    bool any = false;

    for (;;) {
        if (r->pos == r->len) {
            if (r->left == 0)
                break;
            size_t want = r->left < sizeof(r->buf) ? (size_t)r->left : sizeof(r->buf);
            ssize_t got = WS_RETRY_EINTR(read(r->fd, r->buf, want));
            if (got < 0)
                return -errno;
            if (got == 0) {
                r->left = 0;
                break;
            }
            r->pos = 0;
            r->len = (size_t)got;
            r->left -= (uint64_t)got;
        }
        any = true;
        char *nl = memchr(r->buf + r->pos, '\n', r->len - r->pos);
        size_t take = nl ? (size_t)(nl - (r->buf + r->pos)) : r->len - r->pos;
        if (n < WS_AUDIT_RECORD_MAX + 1) {
            size_t room = WS_AUDIT_RECORD_MAX + 1 - n;
            memcpy(out + n, r->buf + r->pos, take < room ? take : room);
        }
        n += take;
        r->pos += take;
        if (nl) {
            r->pos++;
            *ret_len = n;
            *ret_complete = true;
            return 1;
        }
    }
    if (!any)
        return 0;
    *ret_len = n;
    *ret_complete = false;
    return 1;
}

/* ---- records ---- */

/* A copy of s cut to at most max bytes at a character boundary, bytes that
 * are not UTF-8 replaced by '?' (a record must stay valid JSON whatever a
 * command's arguments were). *cut says whether anything was dropped. */
static json_t *safe_string(const char *s, size_t max, bool *cut)
{
    size_t n = s ? strlen(s) : 0, o = 0;
    char *buf;
    json_t *j;

    if (n > max) {
        n = max;
        *cut = true;
    }
    buf = malloc(n + 1);
    if (!buf)
        return NULL;
    for (size_t i = 0; i < n;) {
        size_t k = ws_utf8_sequence((const uint8_t *)s + i, n - i);
        if (k == 0) {
            buf[o++] = '?';
            i++;
        } else {
            memcpy(buf + o, s + i, k);
            o += k;
            i += k;
        }
    }
    j = json_stringn(buf, o);
    free(buf);
    return j;
}

/* What one string costs in JSON text, quotes and a comma included. */
static size_t json_cost(const char *s)
{
    size_t n = 3;

    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        n += (*p < 0x20) ? 6 : (*p == '"' || *p == '\\') ? 2 : 1;
    return n;
}

static char *dump(const json_t *o)
{
    return json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
}

/* Finds (or loads from the file) the head of ws_id. Lock held. */
static int head_get(struct ws_audit *a, const char *ws_id, int fd, struct head **ret)
{
    struct head *h = NULL;
    struct stat st;
    int err;

    for (size_t i = 0; i < a->n_heads; i++)
        if (strcmp(a->heads[i].id, ws_id) == 0) {
            *ret = &a->heads[i];
            return 0;
        }
    if (fstat(fd, &st) < 0)
        return -errno;
    struct reader *r = calloc(1, sizeof(*r));
    char *line = malloc(WS_AUDIT_RECORD_MAX + 1);
    struct head fresh = {.next_seq = 1};
    memcpy(fresh.prev, ZERO_HASH, sizeof(fresh.prev));
    snprintf(fresh.id, sizeof(fresh.id), "%s", ws_id);
    err = -ENOMEM;
    if (!r || !line)
        goto out;
    r->fd = fd;
    r->left = (uint64_t)st.st_size;
    if (lseek(fd, 0, SEEK_SET) < 0) {
        err = -errno;
        goto out;
    }
    for (;;) {
        size_t len;
        bool complete;
        err = next_line(r, line, &len, &complete);
        if (err < 0)
            goto out;
        if (err == 0)
            break;
        sha256_hex(line, len < WS_AUDIT_RECORD_MAX ? len : WS_AUDIT_RECORD_MAX, fresh.prev);
        fresh.next_seq++;
        fresh.torn = !complete;
    }
    if (a->n_heads < WS_AUDIT_HEADS_MAX) {
        h = &a->heads[a->n_heads++];
    } else {
        h = &a->heads[a->next_victim];
        a->next_victim = (a->next_victim + 1) % WS_AUDIT_HEADS_MAX;
    }
    *h = fresh;
    *ret = h;
    err = 0;
out:
    free(r);
    free(line);
    return err;
}

/* Adds seq, ts, prev and hash to `o` and appends it as one line. Takes o. */
static int append(struct ws_audit *a, const char *ws_id, json_t *o)
{
    char name[WS_AUDIT_ID_MAX + 8];
    char hash[HEX_LEN + 1];
    char *body = NULL, *line = NULL;
    struct head *h = NULL;
    struct stat st;
    int fd = -1, err;

    if (!id_ok(ws_id)) {
        json_decref(o);
        return -EINVAL;
    }
    if (!o)
        return -ENOMEM;
    snprintf(name, sizeof(name), "%s.jsonl", ws_id);
    pthread_mutex_lock(&a->lock);
    fd = openat(a->dir_fd, name, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        err = -errno;
        goto out;
    }
    err = head_get(a, ws_id, fd, &h);
    if (err < 0)
        goto out;
    err = -ENOMEM;
    if (json_object_set_new(o, "seq", json_integer((json_int_t)h->next_seq)) < 0 ||
        json_object_set_new(o, "ts", json_integer(ws_wall_ms())) < 0 ||
        json_object_set_new(o, "prev", json_string(h->prev)) < 0)
        goto out;
    body = dump(o);
    if (!body)
        goto out;
    sha256_hex(body, strlen(body), hash);
    if (json_object_set_new(o, "hash", json_string(hash)) < 0)
        goto out;
    line = dump(o);
    if (!line)
        goto out;
    size_t len = strlen(line);
    if (len > WS_AUDIT_RECORD_MAX) {
        err = -E2BIG;
        goto out;
    }
    /* One write per record, newline included: a crash leaves either the
     * whole record or a torn last line, never two records interleaved. */
    size_t lead = h->torn ? 1 : 0;
    char *buf = malloc(lead + len + 1);
    if (!buf)
        goto out;
    buf[0] = '\n';
    memcpy(buf + lead, line, len);
    buf[lead + len] = '\n';
    if (fstat(fd, &st) < 0) {
        err = -errno;
        free(buf);
        goto out;
    }
    ssize_t w = write(fd, buf, lead + len + 1);
    free(buf);
    if (w != (ssize_t)(lead + len + 1)) {
        err = w < 0 ? -errno : -EIO;
        /* A short write (disk full) would leave a torn record in the
         * middle of the log: take it back. */
        if (w > 0 && ftruncate(fd, st.st_size) < 0)
            h->torn = true;
        goto out;
    }
    /* A torn line was counted when the head was read: it is a line of its
     * own now, and this record the one after it. */
    h->torn = false;
    sha256_hex(line, len, h->prev);
    h->next_seq++;
    err = 0;
out:
    pthread_mutex_unlock(&a->lock);
    if (fd >= 0)
        close(fd);
    free(body);
    free(line);
    json_decref(o);
    return err;
}

int ws_audit_command(struct ws_audit *a, const char *ws_id, const struct ws_audit_command *c)
{
    json_t *argv = json_array(), *o = json_object();
    bool argv_cut = false, path_cut = false;
    size_t budget = WS_AUDIT_ARGV_MAX;

    if (!argv || !o) {
        json_decref(argv);
        json_decref(o);
        return -ENOMEM;
    }
    for (const char *const *p = c->argv; p && *p; p++) {
        size_t cost = json_cost(*p);
        if (cost > budget) {
            argv_cut = true;
            break;
        }
        budget -= cost;
        json_array_append_new(argv, safe_string(*p, WS_AUDIT_ARGV_MAX, &argv_cut));
    }
    json_object_set_new(o, "event", json_string("command"));
    json_object_set_new(o, "process_id", safe_string(c->process_id, 64, &path_cut));
    json_object_set_new(o, "tag", safe_string(c->tag, 256, &path_cut));
    json_object_set_new(o, "argv", argv);
    if (argv_cut)
        json_object_set_new(o, "argv_truncated", json_true());
    json_object_set_new(o, "cwd", safe_string(c->cwd, WS_AUDIT_PATH_MAX, &path_cut));
    json_object_set_new(o, "cause", safe_string(c->cause, 64, &path_cut));
    json_object_set_new(o, "background", json_boolean(c->background));
    json_object_set_new(o, "exit_code", json_integer(c->exit_code));
    json_object_set_new(o, "signal", json_integer(c->signal));
    json_object_set_new(o, "duration_ms", json_integer((json_int_t)c->duration_ms));
    json_object_set_new(o, "stdout_bytes", json_integer((json_int_t)c->stdout_bytes));
    json_object_set_new(o, "stderr_bytes", json_integer((json_int_t)c->stderr_bytes));
    json_object_set_new(o, "pty_bytes", json_integer((json_int_t)c->pty_bytes));
    if (path_cut)
        json_object_set_new(o, "paths_truncated", json_true());
    return append(a, ws_id, o);
}

int ws_audit_file(struct ws_audit *a, const char *ws_id, const struct ws_audit_file *f)
{
    json_t *o = json_object();
    bool cut = false;

    if (!o)
        return -ENOMEM;
    json_object_set_new(o, "event", json_string(f->event));
    json_object_set_new(o, "path", safe_string(f->path, WS_AUDIT_PATH_MAX, &cut));
    if (f->to_path)
        json_object_set_new(o, "to_path", safe_string(f->to_path, WS_AUDIT_PATH_MAX, &cut));
    if (f->has_content) {
        json_object_set_new(o, "size", json_integer((json_int_t)f->size));
        json_object_set_new(o, "sha256", safe_string(f->sha256, HEX_LEN, &cut));
    }
    if (strcmp(f->event, "edit") == 0)
        json_object_set_new(o, "replacements", json_integer((json_int_t)f->count));
    if (strcmp(f->event, "remove") == 0)
        json_object_set_new(o, "removed", json_integer((json_int_t)f->count));
    if (cut)
        json_object_set_new(o, "paths_truncated", json_true());
    return append(a, ws_id, o);
}

int ws_audit_expire(struct ws_audit *a, const char *ws_id)
{
    json_t *o = json_object();

    if (!o)
        return -ENOMEM;
    json_object_set_new(o, "event", json_string("expire"));
    return append(a, ws_id, o);
}

/* ---- verification ---- */

const char *ws_audit_problem_name(enum ws_audit_problem p)
{
    switch (p) {
    case WS_AUDIT_OK:
        return "OK";
    case WS_AUDIT_BROKEN_CHAIN:
        return "BROKEN_CHAIN";
    case WS_AUDIT_TRUNCATED:
        return "TRUNCATED";
    case WS_AUDIT_MALFORMED:
        return "MALFORMED";
    }
    return "?";
}

static bool is_hex64(const json_t *j)
{
    const char *s = json_string_value(j);

    return s && strlen(s) == HEX_LEN && strspn(s, "0123456789abcdef") == HEX_LEN;
}

/* Checks one complete line at position `pos` against the chain so far
 * (`prev`). Returns the problem (detail filled) or OK with *ret_ts and
 * ret_event set. */
static enum ws_audit_problem check_line(const char *line, size_t len, uint64_t pos,
                                        const char *prev, char *detail, size_t dsize,
                                        int64_t *ret_ts, char *ret_event, size_t esize)
{
    enum ws_audit_problem p = WS_AUDIT_MALFORMED;
    char *again = NULL, *body = NULL;
    char hash[HEX_LEN + 1];
    json_error_t jerr;
    json_t *o;

    if (len > WS_AUDIT_RECORD_MAX) {
        snprintf(detail, dsize, "line longer than %d bytes", WS_AUDIT_RECORD_MAX);
        return p;
    }
    o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o || !json_is_object(o)) {
        snprintf(detail, dsize, "not a JSON object");
        goto out;
    }
    json_t *seq = json_object_get(o, "seq"), *ts = json_object_get(o, "ts");
    json_t *ev = json_object_get(o, "event");
    if (!json_is_integer(seq) || !json_is_integer(ts) || !json_is_string(ev) ||
        !is_hex64(json_object_get(o, "prev")) || !is_hex64(json_object_get(o, "hash"))) {
        snprintf(detail, dsize, "seq, ts, event, prev or hash missing or mistyped");
        goto out;
    }
    again = dump(o);
    if (!again || strlen(again) != len || memcmp(again, line, len) != 0) {
        snprintf(detail, dsize, "not in canonical form");
        goto out;
    }
    p = WS_AUDIT_BROKEN_CHAIN;
    if ((uint64_t)json_integer_value(seq) != pos) {
        snprintf(detail, dsize, "seq %" PRId64 " where %" PRIu64 " was expected",
                 (int64_t)json_integer_value(seq), pos);
        goto out;
    }
    if (strcmp(json_string_value(json_object_get(o, "prev")), prev) != 0) {
        snprintf(detail, dsize, "prev is not the hash of the record before");
        goto out;
    }
    char want[HEX_LEN + 1];
    snprintf(want, sizeof(want), "%s", json_string_value(json_object_get(o, "hash")));
    json_object_del(o, "hash");
    body = dump(o);
    if (!body) {
        p = WS_AUDIT_MALFORMED;
        snprintf(detail, dsize, "out of memory");
        goto out;
    }
    sha256_hex(body, strlen(body), hash);
    if (strcmp(hash, want) != 0) {
        snprintf(detail, dsize, "hash does not match the record's content");
        goto out;
    }
    *ret_ts = (int64_t)json_integer_value(ts);
    snprintf(ret_event, esize, "%s", json_string_value(ev));
    p = WS_AUDIT_OK;
out:
    free(again);
    free(body);
    json_decref(o);
    return p;
}

int ws_audit_read(struct ws_audit *a, const char *ws_id, ws_audit_record_fn fn, void *ud,
                  struct ws_audit_verdict *ret)
{
    char name[WS_AUDIT_ID_MAX + 8];
    char prev[HEX_LEN + 1];
    struct ws_audit_verdict v = {0};
    struct reader *r = NULL;
    char *line = NULL;
    struct stat st;
    bool deliver = true;
    int fd, err;

    if (!id_ok(ws_id))
        return -EINVAL;
    snprintf(name, sizeof(name), "%s.jsonl", ws_id);
    /* The size is taken under the lock: appends hold it for their whole
     * write, so the snapshot ends on a record boundary. */
    pthread_mutex_lock(&a->lock);
    fd = openat(a->dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0 && fstat(fd, &st) < 0)
        ws_close_fd(&fd);
    err = fd < 0 ? -errno : 0;
    /* What this server appended last, when it knows: records cut off the
     * end at a line boundary leave a chain that verifies by itself, and
     * only the head kept here can tell. */
    struct head known = {0};
    for (size_t i = 0; i < a->n_heads; i++)
        if (strcmp(a->heads[i].id, ws_id) == 0)
            known = a->heads[i];
    pthread_mutex_unlock(&a->lock);
    if (err < 0)
        return err;
    r = calloc(1, sizeof(*r));
    line = malloc(WS_AUDIT_RECORD_MAX + 1);
    err = -ENOMEM;
    if (!r || !line)
        goto out;
    r->fd = fd;
    r->left = (uint64_t)st.st_size;
    memcpy(prev, ZERO_HASH, sizeof(prev));
    for (uint64_t pos = 1;; pos++) {
        size_t len;
        bool complete;
        char event[32];
        int64_t ts = 0;

        err = next_line(r, line, &len, &complete);
        if (err < 0)
            goto out;
        if (err == 0)
            break;
        if (!complete) {
            v.problem = WS_AUDIT_TRUNCATED;
            snprintf(v.detail, sizeof(v.detail), "the file ends inside this record");
        } else {
            v.problem = check_line(line, len, pos, prev, v.detail, sizeof(v.detail), &ts, event,
                                   sizeof(event));
        }
        if (v.problem != WS_AUDIT_OK) {
            v.bad_seq = pos;
            break;
        }
        if (known.next_seq && !known.torn) {
            if (pos >= known.next_seq) {
                /* A valid-looking record after the last one this server
                 * wrote: put there by someone else. */
                v.problem = WS_AUDIT_BROKEN_CHAIN;
                snprintf(v.detail, sizeof(v.detail), "a record this server did not write");
            } else if (pos + 1 == known.next_seq) {
                /* The last record this server wrote, byte for byte, or
                 * the chain was rebuilt up to here. */
                char h[HEX_LEN + 1];
                sha256_hex(line, len, h);
                if (strcmp(h, known.prev) != 0) {
                    v.problem = WS_AUDIT_BROKEN_CHAIN;
                    snprintf(v.detail, sizeof(v.detail), "not the record this server wrote here");
                }
            }
            if (v.problem != WS_AUDIT_OK) {
                v.bad_seq = pos;
                break;
            }
        }
        v.verified++;
        sha256_hex(line, len, prev);
        if (deliver && fn && fn(ud, pos, ts, event, line, len) < 0)
            deliver = false;
    }
    if (v.problem == WS_AUDIT_OK && known.next_seq && !known.torn &&
        v.verified + 1 < known.next_seq) {
        v.problem = WS_AUDIT_TRUNCATED;
        v.bad_seq = v.verified + 1;
        snprintf(v.detail, sizeof(v.detail),
                 "records %llu to %llu, written by this server, are gone from the end",
                 (unsigned long long)v.bad_seq, (unsigned long long)(known.next_seq - 1));
    }
    *ret = v;
    err = 0;
out:
    close(fd);
    free(r);
    free(line);
    return err;
}
