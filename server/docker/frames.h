/* Demultiplexing the output of a `docker exec` (Engine API, hijacked
 * connection).
 *
 * Without a TTY the daemon sends stdout and stderr interleaved on one
 * connection, each write as a frame: an 8-byte header
 *
 *     [STREAM, 0, 0, 0, SIZE (4 bytes, big-endian)]
 *
 * then SIZE bytes of payload. With a TTY there is no framing: the stream is
 * the PTY's output as is (raw mode below).
 *
 * The demultiplexer is incremental and zero-copy: it takes whatever the
 * socket returned, in any chunking (a header split over many reads, many
 * frames in one read), and hands the payload to a callback as slices that
 * point into the caller's buffer. Payloads are never copied or buffered;
 * only a header that straddles two reads is kept (at most 8 bytes). A
 * frame's payload may so arrive in several slices, and a zero-length frame
 * delivers none.
 *
 * Input is untrusted: anything that is not a well-formed frame puts the
 * demultiplexer in a failed state from which every call returns -EPROTO,
 * since once a header is wrong nothing says where the next one starts.
 * Rejected:
 *   - a stream byte other than 1 (stdout), 2 (stderr), 3 (systemerr). That
 *     includes 0 (stdin): the Engine API documents it as "written on
 *     stdout", but no daemon writer produces it (exec frames are stdout
 *     and stderr; systemerr comes from log streams), and an all-zero
 *     header reads as "stdin, 0 bytes", so accepting 0 would let a
 *     zero-filled stream pass as endless empty frames instead of being
 *     reported;
 *   - a non-zero padding byte (1 to 3): the daemon always writes zeros;
 *   - a size above WS_FRAMES_PAYLOAD_MAX.
 *
 * Ownership: struct ws_frames is a plain struct the caller embeds (in its
 * exec object) and sets up with ws_frames_init(); it holds no resources,
 * so there is nothing to free. Its fields are internal: read it through
 * the functions below.
 *
 * Thread safety: none; one owner (the pump thread reading the connection)
 * at a time. Not reentrant: the callback must not feed the demultiplexer
 * that called it.
 *
 * Returns: ws_frames_feed returns the bytes consumed (>= 0) or a negated
 * errno; int functions return >= 0 or a negated errno.
 */
#ifndef WS_DOCKER_FRAMES_H
#define WS_DOCKER_FRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Length of a frame header on the wire. */
#define WS_FRAMES_HEADER_LEN 8

/* Largest frame payload accepted, in bytes (64 MiB). The daemon writes one
 * frame per write of the process' output, which its copy loop makes at
 * most 32 KiB long, so real frames are small. Payloads are never buffered,
 * so this limit bounds no memory: it is a sanity check. A size in the
 * hundreds of megabytes or gigabytes means the bytes being read are not
 * frames (a desynchronised or foreign stream), and following it would
 * swallow the rest of the connection as one bogus payload. 64 MiB leaves
 * three orders of magnitude of headroom over what the daemon writes. */
#define WS_FRAMES_PAYLOAD_MAX (64u * 1024 * 1024)

/* The streams payload is delivered on; the values are the wire's. */
enum ws_frames_stream {
    WS_FRAMES_STDOUT = 1,
    WS_FRAMES_STDERR = 2,
    /* Errors from the daemon itself, not the process (moby writes them in
     * log streams; exec output has none so far). Delivered separately so
     * the caller reports them as such rather than as the command's output. */
    WS_FRAMES_SYSTEMERR = 3,
};

/* Receives `len` (> 0) bytes of `stream`'s payload at `data`, which points
 * into the buffer given to ws_frames_feed and is valid as long as that
 * buffer is. Returns 0 to go on, non-zero to stop consuming (backpressure:
 * the caller's buffer for that stream is full). */
typedef int (*ws_frames_cb)(void *arg, enum ws_frames_stream stream, const uint8_t *data,
                            size_t len);

struct ws_frames {
    /* Internal. */
    uint8_t header[WS_FRAMES_HEADER_LEN];
    /* Header bytes held; WS_FRAMES_HEADER_LEN while in a payload. */
    uint8_t header_len;
    /* Stream of the payload being delivered. */
    uint8_t stream;
    bool raw;
    bool failed;
    /* Payload bytes of the current frame not yet delivered. */
    uint32_t left;
    /* Payload bytes delivered, by wire stream value (0 is never used). */
    uint64_t total[WS_FRAMES_SYSTEMERR + 1];
};

/* Sets d up for a new stream: framed, or raw (a TTY exec: every byte is
 * stdout). Also resets a used or failed demultiplexer. */
void ws_frames_init(struct ws_frames *d, bool raw);

/* Consumes data[0..len) in order, calling cb for each slice of payload.
 *
 * Returns the number of bytes consumed, or:
 *   -EPROTO  the input is not well-formed (see the top of this file), now
 *            or in an earlier call; the offending frame delivered nothing,
 *            frames before it in this input were delivered.
 *   -EINVAL  len > SSIZE_MAX (the count could not be returned); nothing
 *            consumed, nothing delivered.
 *
 * All of data is consumed (the return is len) unless cb returns non-zero:
 * consumption then stops right after the slice cb was given, and the
 * return is the offset one past that slice. Nothing after it is looked at,
 * not even a header that follows, so the caller resumes by feeding
 * data + returned count later. A return below len therefore always means
 * that cb asked to stop. Header bytes are consumed without a call to cb.
 *
 * In raw mode the whole of data is one stdout slice (when len > 0) and the
 * return is len whatever cb returns. */
ssize_t ws_frames_feed(struct ws_frames *d, const void *data, size_t len, ws_frames_cb cb,
                       void *arg);

/* To be called when the connection is closed. Returns 0 when the stream
 * ended between frames (or is raw), -EPROTO when it ended inside a header
 * or a payload (truncated) or the demultiplexer has failed. Changes
 * nothing. */
int ws_frames_eof(const struct ws_frames *d);

/* Payload bytes delivered on `stream` since ws_frames_init; 0 for a value
 * that is not a stream. */
uint64_t ws_frames_total(const struct ws_frames *d, enum ws_frames_stream stream);

#endif
