/* The audit-log reader (server/audit/audit.h, ws_audit_read): the input
 * is a workspace's log file, read back and verified by a reader that
 * never appended to it (so no head in memory: the file alone decides).
 *
 * Checked besides memory safety: the reader answers 0 with a known
 * verdict; the records it delivers come in order (seq 1, 2, ...), are the
 * file's lines byte for byte and are as many as it says verified; OK has
 * no bad line, anything else names one past the verified records.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/audit/audit.h"
#include "tests/fuzz/fuzz.h"

#define WS_ID "fuzz"

struct delivered {
    const uint8_t *data;
    size_t size;
    size_t at; /* where the next line starts in data */
    uint64_t n;
};

static int record(void *ud, uint64_t seq, int64_t ts_ms, const char *event, const char *line,
                  size_t len)
{
    struct delivered *d = ud;
    const uint8_t *nl;
    size_t line_len;

    (void)ts_ms;
    FUZZ_CHECK(seq == d->n + 1, "records out of order");
    FUZZ_CHECK(event != NULL, "a record without an event");
    FUZZ_CHECK(d->at < d->size, "a record past the end of the file");
    nl = memchr(d->data + d->at, '\n', d->size - d->at);
    line_len = nl ? (size_t)(nl - (d->data + d->at)) : d->size - d->at;
    FUZZ_CHECK(len == line_len && memcmp(line, d->data + d->at, len) == 0,
               "a record that is not the file's line");
    FUZZ_CHECK(len <= WS_AUDIT_RECORD_MAX, "a record longer than the maximum");
    d->at += line_len + 1;
    d->n++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct ws_audit *reader;
    static char path[PATH_MAX];
    struct delivered d = {.data = data, .size = size};
    struct ws_audit_verdict v;
    int r;

    if (!reader) {
        const char *dir = fuzz_scratch_dir("audit_fuzz");
        FUZZ_CHECK(ws_audit_new(dir, &reader) == 0, "ws_audit_new");
        snprintf(path, sizeof(path), "%s/%s.jsonl", dir, WS_ID);
    }
    fuzz_write_file(path, data, size);
    memset(&v, 0, sizeof(v));
    r = ws_audit_read(reader, WS_ID, record, &d, &v);
    FUZZ_CHECK(r == 0, "ws_audit_read failed on a readable file");
    if (getenv("FUZZ_VERBOSE"))
        fprintf(stderr, "audit: problem %d, verified %llu, bad %llu: %s\n", (int)v.problem,
                (unsigned long long)v.verified, (unsigned long long)v.bad_seq, v.detail);
    FUZZ_CHECK(v.problem >= WS_AUDIT_OK && v.problem <= WS_AUDIT_MALFORMED, "unknown verdict");
    FUZZ_CHECK(v.verified == d.n, "verified is not what was delivered");
    FUZZ_CHECK(memchr(v.detail, '\0', sizeof(v.detail)) != NULL, "detail unterminated");
    if (v.problem == WS_AUDIT_OK)
        FUZZ_CHECK(v.bad_seq == 0, "OK names a bad line");
    else
        FUZZ_CHECK(v.bad_seq == v.verified + 1, "the bad line is not the one after the verified");
    return 0;
}
