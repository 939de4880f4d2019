/* The audit log: per workspace, an append-only file <dir>/<id>.jsonl
 * with one JSON line per event (a command that ended, a file written,
 * edited, moved or removed through the FileSystem service).
 *
 * Every line is a JSON object printed with sorted keys and no spaces
 * (jansson's JSON_COMPACT | JSON_SORT_KEYS), and carries:
 *   seq    1, 2, 3, ... in file order
 *   ts     unix milliseconds when the record was written
 *   prev   lowercase hex SHA-256 of the previous line's exact bytes (no
 *          newline); 64 zeros for seq 1
 *   hash   lowercase hex SHA-256 of the line printed without "hash"
 *   event  "command", "write", "edit", "move" or "remove"
 * so a line edited, deleted or moved is found by ws_audit_read: the edited
 * line's hash no longer matches, and the line after a deleted or moved one
 * has the wrong seq or prev.
 *
 * Each record is one write() with O_APPEND under the module's lock: it
 * survives a crash of the server process (the page cache keeps it); a
 * record is not fsynced, so a power loss may lose the last ones, and a
 * line torn by one is reported TRUNCATED.
 *
 * Thread safety: every function may be called from any thread.
 */
#ifndef WS_AUDIT_AUDIT_H
#define WS_AUDIT_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest record line, newline excluded. A longer line in a file is
 * MALFORMED. */
#define WS_AUDIT_RECORD_MAX 16384
/* Bytes of argv (as JSON text) a command record keeps; the arguments past
 * it are dropped and the record says "argv_truncated": true. */
#define WS_AUDIT_ARGV_MAX 8192
/* Longest path or cwd kept in a record (longer ones are cut, with
 * "paths_truncated": true). */
#define WS_AUDIT_PATH_MAX 2048
/* Longest workspace id the module accepts as a file name. */
#define WS_AUDIT_ID_MAX 64
/* Workspaces whose chain head (next seq, prev hash) is kept in memory;
 * others are found again by reading their file. */
#define WS_AUDIT_HEADS_MAX 1024

struct ws_audit;

/* Opens (creating it 0700) the directory the logs live in. */
int ws_audit_new(const char *dir, struct ws_audit **ret);
/* Accepts NULL. */
void ws_audit_free(struct ws_audit *a);

struct ws_audit_command {
    const char *process_id;
    const char *tag;         /* "" when none */
    const char *const *argv; /* NULL-terminated */
    const char *cwd;
    const char *cause; /* how it ended: "EXITED", "SIGNALED", ... */
    bool background;
    int exit_code;
    int signal; /* 0 when it exited */
    uint64_t duration_ms;
    uint64_t stdout_bytes;
    uint64_t stderr_bytes;
    uint64_t pty_bytes;
};

/* Appends a "command" record. Returns 0, -EINVAL (bad id), -E2BIG (the
 * record would not fit WS_AUDIT_RECORD_MAX even cut), or the file's error. */
int ws_audit_command(struct ws_audit *a, const char *ws_id, const struct ws_audit_command *c);

struct ws_audit_file {
    const char *event; /* "write", "edit", "move" or "remove" */
    const char *path;
    const char *to_path; /* move only */
    bool has_content;    /* write and edit: size and sha256 below */
    uint64_t size;
    const char *sha256; /* lowercase hex of the new content */
    uint64_t count;     /* edit: replacements; remove: entries removed */
};

/* Appends a file record; returns like ws_audit_command. */
int ws_audit_file(struct ws_audit *a, const char *ws_id, const struct ws_audit_file *f);

/* Appends an "expire" record: the workspace's lifetime ran out and the
 * server closed it (its commands' records come before). Returns like
 * ws_audit_command. */
int ws_audit_expire(struct ws_audit *a, const char *ws_id);

enum ws_audit_problem {
    WS_AUDIT_OK = 0,
    /* A record's hash does not match its content, or its seq or prev does
     * not follow the record before it (an edit, a deletion, a reorder). */
    WS_AUDIT_BROKEN_CHAIN = 1,
    /* The file ends inside a record (no final newline). */
    WS_AUDIT_TRUNCATED = 2,
    /* A line that is not a record: not JSON, fields missing or of the
     * wrong type, not in canonical form, or longer than the maximum. */
    WS_AUDIT_MALFORMED = 3,
};

struct ws_audit_verdict {
    enum ws_audit_problem problem;
    /* The position (1-based line number, which is the seq a valid record
     * there would carry) of the first bad line; 0 when OK. */
    uint64_t bad_seq;
    /* Records that verified, in order, before the first bad line. */
    uint64_t verified;
    char detail[128];
};

/* Called for each record that verified, in order; line is the exact
 * bytes (not NUL-terminated). A negative return stops the delivery of
 * records (verification still reads the whole file). */
typedef int (*ws_audit_record_fn)(void *ud, uint64_t seq, int64_t ts_ms, const char *event,
                                  const char *line, size_t len);

/* Reads and verifies a workspace's log as it was when the call started
 * (appends racing it are not seen). While this process holds the
 * workspace's head (from its first append to the log until the
 * server stops, or until more than WS_AUDIT_HEADS_MAX logs were written
 * since), the log must also end with the last record it appended: records
 * cut off the end are TRUNCATED at the first missing seq, and a chain
 * rebuilt past or instead of that record is BROKEN_CHAIN. Returns 0 and fills *ret, -ENOENT when
 * the workspace has no log, -EINVAL for a bad id, or an I/O error. */
int ws_audit_read(struct ws_audit *a, const char *ws_id, ws_audit_record_fn fn, void *ud,
                  struct ws_audit_verdict *ret);

/* Problem names as the API spells them: "OK", "BROKEN_CHAIN",
 * "TRUNCATED", "MALFORMED". */
const char *ws_audit_problem_name(enum ws_audit_problem p);

#endif
