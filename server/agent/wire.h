/* The in-box agent's control channel, written once for the server and for
 * wsagent (which links it statically, so it depends on libc alone).
 *
 * A frame is a 12-byte header and a payload:
 *
 *     u8  version   WS_WIRE_VERSION
 *     u8  type      enum ws_wire_type
 *     u16 flags     0 (a frame with any bit set is refused)
 *     u32 stream    the command a frame is about; 0 for the channel itself
 *     u32 length    payload bytes, at most WS_WIRE_PAYLOAD_MAX
 *
 * little-endian. The payload is a sequence of fields, each a u16 tag, a u32
 * length and that many bytes; a number is a field of exactly 8 bytes (u64
 * little-endian), a string one of 1 to its limit bytes with no NUL. Tags a
 * reader does not know are skipped, so either side may add fields; a field
 * that runs past the payload, a number of the wrong size or a string with
 * a NUL makes the whole frame malformed.
 *
 * The stream is a unix stream socket. File descriptors travel as
 * SCM_RIGHTS with the bytes of the frame that uses them, which only START
 * does: the reader queues every descriptor in arrival order and a START
 * takes the first ones (three: stdin, stdout, stderr; or one: a terminal
 * for all three). A descriptor always arrives no later than the last byte
 * of its frame, so the queue holds them when the frame is whole.
 *
 * Nothing here does I/O or allocates: callers own every buffer.
 */
#ifndef WS_AGENT_WIRE_H
#define WS_AGENT_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WS_WIRE_VERSION 1
#define WS_WIRE_HEADER  12
/* The largest payload: a START with the guard's largest argv (256 KiB)
 * and environment (64 KiB) and the field headers of 1024 arguments and
 * 256 variables fits with room to spare. */
#define WS_WIRE_PAYLOAD_MAX  (512 * 1024)
#define WS_WIRE_FRAME_MAX    (WS_WIRE_HEADER + WS_WIRE_PAYLOAD_MAX)
#define WS_WIRE_FIELD_HEADER 6
/* The longest string field (one argument, one variable, a message). */
#define WS_WIRE_STRING_MAX (64 * 1024)
/* The one-time secret a docker agent proves itself with: 32 bytes, sent
 * as 64 lowercase hex digits. */
#define WS_WIRE_SECRET_HEX 64

enum ws_wire_type {
    /* Both ways on stream 0, once, first. Server: VERSION, SECRET (when
     * the agent was given one). Agent: VERSION, PID (its own). */
    WS_WIRE_HELLO = 1,
    /* Server to agent: start command `stream` (not in use). ARGV (one per
     * argument, at least one; the first an absolute path or a name looked
     * up in the agent's PATH), ENV (NAME=VALUE, the whole environment),
     * CWD (absolute, inside the box), TIMEOUT_MS (0: none), PTY (1: one
     * descriptor, a terminal), UID/GID/NPROC (docker: the command's
     * identity and process cap; absent: the agent's own). */
    WS_WIRE_START = 2,
    /* Server to agent: SIGNO to every process of the command (SIGKILL:
     * the whole tree ends now). A stream the agent no longer has (the
     * command just ended) is not an error. */
    WS_WIRE_SIGNAL = 3,
    /* Agent to server: the command runs. PID (inside the box). */
    WS_WIRE_STARTED = 4,
    /* Agent to server, last for its stream: the command and every process
     * it left are gone. STATUS (0 exited, 1 signaled), CODE, SIGNO, CORE,
     * OOM, TIMED_OUT, USER_MS, SYS_MS, MAXRSS_KIB. A command whose
     * program could not be started exits 127 (not found) or 126, its
     * reason on its stderr, as a shell would. */
    WS_WIRE_EXITED = 5,
    /* Agent to server. On a stream: the command could not be started at
     * all (no EXITED follows). On stream 0: the agent gives up (a
     * malformed frame, an internal failure) and exits. ERRNO, MESSAGE. */
    WS_WIRE_FAILED = 6,
    WS_WIRE_TYPE_MAX = WS_WIRE_FAILED,
};

enum ws_wire_tag {
    WS_WIRE_T_VERSION = 1,
    WS_WIRE_T_SECRET = 2,
    WS_WIRE_T_PID = 3,
    WS_WIRE_T_ARGV = 10,
    WS_WIRE_T_ENV = 11,
    WS_WIRE_T_CWD = 12,
    WS_WIRE_T_TIMEOUT_MS = 13,
    WS_WIRE_T_PTY = 14,
    WS_WIRE_T_UID = 15,
    WS_WIRE_T_GID = 16,
    WS_WIRE_T_NPROC = 17,
    WS_WIRE_T_SIGNO = 20,
    WS_WIRE_T_STATUS = 30,
    WS_WIRE_T_CODE = 31,
    WS_WIRE_T_CORE = 32,
    WS_WIRE_T_OOM = 33,
    WS_WIRE_T_TIMED_OUT = 34,
    WS_WIRE_T_USER_MS = 35,
    WS_WIRE_T_SYS_MS = 36,
    WS_WIRE_T_MAXRSS_KIB = 37,
    WS_WIRE_T_ERRNO = 40,
    WS_WIRE_T_MESSAGE = 41,
};

/* "HELLO", "START", ...; "?" for anything else. */
const char *ws_wire_type_name(unsigned type);

/* ---- writing ---- */

/* A frame being built in a caller's buffer; an overflow is remembered and
 * reported by ws_wire_end. */
struct ws_wire_out {
    uint8_t *buf;
    size_t cap;
    size_t len;
    bool overflow;
};

void ws_wire_begin(struct ws_wire_out *o, uint8_t *buf, size_t cap, enum ws_wire_type type,
                   uint32_t stream);
void ws_wire_put_u64(struct ws_wire_out *o, enum ws_wire_tag tag, uint64_t v);
void ws_wire_put_bytes(struct ws_wire_out *o, enum ws_wire_tag tag, const void *data, size_t n);
void ws_wire_put_str(struct ws_wire_out *o, enum ws_wire_tag tag, const char *s);
/* Fills in the length. Returns the frame's size, or -EMSGSIZE when it
 * did not fit the buffer or WS_WIRE_PAYLOAD_MAX. */
long ws_wire_end(struct ws_wire_out *o);

/* ---- reading ---- */

struct ws_wire_frame {
    uint8_t type;
    uint32_t stream;
    uint32_t len;
    const uint8_t *payload; /* into the reader's buffer */
};

/* Frames out of a byte stream, in a caller's buffer of at least
 * WS_WIRE_FRAME_MAX bytes: append what was read at buf + have (room:
 * cap - have), then take frames with ws_wire_next until it returns 0. */
struct ws_wire_in {
    uint8_t *buf;
    size_t cap;
    size_t have;
    size_t taken; /* bytes of frames already handed out */
};

void ws_wire_in_init(struct ws_wire_in *in, uint8_t *buf, size_t cap);
/* Where the next read goes and how much room it has (frames handed out
 * earlier are dropped first: their payloads are no longer valid). */
uint8_t *ws_wire_in_space(struct ws_wire_in *in, size_t *ret_room);
void ws_wire_in_added(struct ws_wire_in *in, size_t n);
/* 1 and the next frame, 0 when it is not whole yet, or -EPROTO (an
 * unknown version, a flag set, type 0 or beyond WS_WIRE_TYPE_MAX) or
 * -EMSGSIZE (a length over WS_WIRE_PAYLOAD_MAX): the stream cannot be
 * read further. Checks the header only; ws_wire_check checks a payload. */
int ws_wire_next(struct ws_wire_in *in, struct ws_wire_frame *ret);
/* Bytes held of a frame not yet whole (0 at a frame boundary): a stream
 * that ends with some is truncated. */
size_t ws_wire_in_pending(const struct ws_wire_in *in);

struct ws_wire_field {
    uint16_t tag;
    uint32_t len;
    const uint8_t *data;
};

/* Walks a payload: *pos starts at 0. 1 and the next field, 0 at the end,
 * -EPROTO when a field runs past the payload. */
int ws_wire_next_field(const struct ws_wire_frame *f, size_t *pos, struct ws_wire_field *ret);
/* The field's value: -EPROTO unless it is 8 bytes. */
int ws_wire_u64(const struct ws_wire_field *fl, uint64_t *ret);
/* Copies a string field into buf (size > len) with its NUL: -EPROTO when
 * it is empty, longer than WS_WIRE_STRING_MAX or holds a NUL, -ENOSPC
 * when buf is too small. */
int ws_wire_str(const struct ws_wire_field *fl, char *buf, size_t size);
/* Whether every field of the payload is whole: 0 or -EPROTO. */
int ws_wire_check(const struct ws_wire_frame *f);

#endif
