/* A running (or recently finished) command: its process tree, its output
 * streams, the subscribers reading them, and the record of how it ended.
 *
 * Output: every stream (stdout and stderr, or one PTY stream) is read by
 * the pump thread into a fixed-size replay ring (ring_bytes) and, for Run,
 * into a head+tail capture. Subscribers (a Start stream, Attach streams)
 * pull events with ws_sub_next(); each has its own offset per stream.
 * While a subscriber is attached the pump never overwrites bytes it has not
 * taken: it stops reading the pipe instead, so the child blocks and memory
 * stays bounded. A subscriber that asks for bytes the ring no longer holds
 * (it attached late) gets a gap event first, never a silent drop.
 *
 * Ending: when the first process exits, whatever it left running is ended
 * (SIGTERM, grace, SIGKILL) and the pipes are drained; when it is killed
 * (timeout, cancel, close, SIGKILL from a client) the same happens to the
 * whole tree. The command is done once the first process is reaped, the
 * tree is empty and every stream reached EOF. Then `exited` is final,
 * subscribers see it after the last byte, and done callbacks run.
 *
 * Threads: all I/O runs on the pump thread; every function here may be
 * called from any thread. Subscriber notifications and done callbacks run
 * on the pump thread, with no lock of this module held.
 *
 * References: ws_proc_spawn returns one reference; subscribers and done
 * callbacks hold their own until they end.
 */
#ifndef WS_EXEC_PROCESS_H
#define WS_EXEC_PROCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "server/events/pump.h"
#include "server/posix/spawn.h"
#include "server/posix/tree.h"

#define WS_PROC_ID_LEN  18 /* "p_" + 16 hex */
#define WS_PROC_TAG_MAX 128
/* Largest read from a child pipe, and largest chunk handed to a
 * subscriber. */
#define WS_PROC_READ_MAX  (1024 * 1024)
#define WS_PROC_CHUNK_MAX (512 * 1024)
/* Bytes of one stdin write, and bytes SendInput may have queued for a
 * command's stdin and not yet written. */
#define WS_PROC_STDIN_MAX (1024 * 1024)
/* After SIGKILL, how long to wait for the tree to empty and the pipes to
 * reach EOF before giving up on them (a pipe end passed to a process
 * outside the tree never closes). */
#define WS_PROC_SETTLE_MS 5000
/* Tick while waiting for a tree to empty (no notification exists for it). */
#define WS_PROC_POLL_MS 10

enum ws_stream { WS_STREAM_STDOUT = 0, WS_STREAM_STDERR, WS_STREAM_PTY, WS_STREAM_COUNT };

enum ws_cause {
    WS_CAUSE_NONE = 0,
    WS_CAUSE_EXITED,
    WS_CAUSE_SIGNALED,
    WS_CAUSE_TIMEOUT,
    WS_CAUSE_OOM,
    WS_CAUSE_CANCELLED,
    WS_CAUSE_EVICTED,
    WS_CAUSE_EXPIRED,
};

/* "EXITED", "SIGNALED", ... */
const char *ws_cause_name(enum ws_cause c);

struct ws_proc_stream_stats {
    bool present;
    uint64_t total;
    /* Run: the capture's head and tail; truncated when bytes were not
     * kept. Subscribers fill their own delivered counts. */
    uint64_t head;
    uint64_t tail;
    bool truncated;
};

struct ws_proc_result {
    enum ws_cause cause;
    int exit_code;
    int signal;
    uint64_t wall_ms;
    uint64_t user_ms;
    uint64_t sys_ms;
    uint64_t max_rss_bytes;
    struct ws_proc_stream_stats streams[WS_STREAM_COUNT];
};

struct ws_proc_env {
    struct ws_pump *pump;
    struct ws_tree_host *trees;
    int grace_ms;
};

/* A wrapper started in the command's place (a sandbox): it runs the
 * command inside itself and stays around it. The tree still holds
 * everything (wrapper and command), so kills are unchanged; signals and
 * the exit record go through these hooks to reach the command itself. */
struct ws_proc_wrapper {
    /* What is spawned instead of argv (argv stays the command's, for
     * listings and audit). Borrowed for the spawn. */
    const char *const *argv;
    /* Borrowed fds the wrapper gets as 3, 4, ... */
    const int *keep_fds;
    size_t n_keep_fds;
    /* The PTY must not become the wrapper's controlling terminal (the
     * wrapper gives it to the command's session). */
    bool pty_noctty;
    /* Sends sig to the command's processes, not the wrapper's own; leader
     * is the spawned wrapper. Returns like ws_tree_signal. Any thread,
     * the process's lock held. */
    int (*signal)(void *arg, struct ws_tree *tree, pid_t leader, int sig);
    /* When the tree is SIGKILLed: ends the command's processes where the
     * tree cannot reach them (a container's), without blocking. Any
     * thread, the process's lock held. NULL: nothing. */
    void (*kill)(void *arg);
    /* Once the wrapper is reaped: replaces its exit code and signal with
     * the command's, when the wrapper reported them, and may name the
     * cause when the exit alone does not tell it: WS_CAUSE_OOM (the
     * kernel's OOM killer ended the command) or WS_CAUSE_EVICTED (its box
     * went away under it). Pump thread. */
    void (*exited)(void *arg, struct ws_child_exit *e, enum ws_cause *ret_cause);
    /* Around the spawn, on the spawning thread: enter moves the thread
     * where the wrapper must start (its resource group), leave moves it
     * back. A failed enter fails the spawn. NULL: nothing. */
    int (*enter)(void *arg);
    void (*leave)(void *arg);
    /* Start the wrapper in this cgroup v2 directory (an O_DIRECTORY fd,
     * borrowed for the spawn) through clone3's CLONE_INTO_CGROUP: its
     * resource group on a hierarchy that cannot move a thread there for
     * enter. Off unless into_cgroup. */
    bool into_cgroup;
    int cgroup_fd;
    /* Right after the spawn, on the spawning thread, whether it worked or
     * not: the wrapper drops what only the child needed (its ends of
     * pipes). NULL: nothing. */
    void (*spawned)(void *arg);
    /* Instead of a spawn here: the command runs elsewhere (an in-box
     * agent starts it). start hands the child's ends (stdin, stdout,
     * stderr; or the terminal alone: n 1) to whoever runs it, and the exit
     * comes through ws_child_detached_exit(child), from any thread, until
     * free runs (which comes first of everything that frees the child).
     * Blocking: returns once the command started, or its error (the fds
     * are closed by the caller either way). With start there is no tree
     * here, and argv, keep_fds, pty_noctty, enter, leave, into_cgroup and
     * spawned are not used: signal and kill reach the command (leader 0),
     * exited gives its record. NULL: a spawn on the host. */
    int (*start)(void *arg, struct ws_child *child, const int *fds, size_t n);
    /* Frees arg when the process is freed. */
    void (*free)(void *arg);
    void *arg;
};

struct ws_proc_config {
    /* Vetted by the shell guard; argv[0] absolute. Borrowed. */
    const char *const *argv;
    const char *const *envp;
    int cwd_fd;      /* borrowed */
    const char *cwd; /* workspace-relative, for ListProcesses and audit */
    bool stdin_pipe;
    bool pty;
    unsigned pty_rows;
    unsigned pty_cols;
    /* 0: none. */
    uint64_t timeout_ms;
    bool background;
    const char *tag; /* NULL or "" */
    size_t ring_bytes;
    /* Run: head+tail kept per stream; 0: no capture. */
    size_t capture_bytes;
    /* Read nothing until the first subscriber attaches (or the command is
     * killed): a Start stream subscribes right after the spawn, and
     * output written in between must wait for it rather than be
     * overwritten in the ring. */
    bool wait_for_subscriber;
    /* NULL: argv is spawned itself. Copied; ws_proc_spawn takes
     * wrapper->arg in every case: freed through wrapper->free with the
     * process, or at once when the spawn fails. */
    const struct ws_proc_wrapper *wrapper;
    /* NULL: the command runs as the server's uid; else the identity and
     * limits given to it (struct ws_run_as in posix/spawn.h), copied. */
    const struct ws_run_as *run_as;
};

struct ws_proc;

/* Starts the command. Returns 0 and a reference, or the spawn's error
 * (-ENOENT, -EACCES, -EMFILE, ...). */
int ws_proc_spawn(const struct ws_proc_env *env, const struct ws_proc_config *cfg,
                  struct ws_proc **ret);

void ws_proc_ref(struct ws_proc *p);
/* Accepts NULL. */
void ws_proc_unref(struct ws_proc *p);

const char *ws_proc_id(const struct ws_proc *p);
const char *ws_proc_tag(const struct ws_proc *p); /* "" when none */
pid_t ws_proc_pid(const struct ws_proc *p);
bool ws_proc_background(const struct ws_proc *p);
int64_t ws_proc_started_at_ms(const struct ws_proc *p); /* unix ms */
/* The working directory as the client named it ("." for the root). */
const char *ws_proc_cwd(const struct ws_proc *p);
/* argv as vetted (argv[0] the resolved path); valid for p's life. */
const char *const *ws_proc_argv(const struct ws_proc *p);

/* Whether the command is done; fills *ret when it is. */
bool ws_proc_get_result(struct ws_proc *p, struct ws_proc_result *ret);

/* Runs fn(arg, p) once on the pump thread when the command is done (at
 * once on the calling thread if it already is). Returns 0 or -ENOMEM. */
typedef void (*ws_proc_done_fn)(void *arg, struct ws_proc *p);
int ws_proc_on_done(struct ws_proc *p, ws_proc_done_fn fn, void *arg);

/* Ends the whole tree with `cause` (unless the command already ended or is
 * being ended: the first cause wins): SIGTERM, the grace period, SIGKILL;
 * without `graceful` SIGKILL at once. */
void ws_proc_kill(struct ws_proc *p, enum ws_cause cause, bool graceful);

/* Sends sig to every process of the tree. SIGKILL ends the command
 * (cause SIGNALED). Returns 0, -ESRCH when it is already done, -EINVAL. */
int ws_proc_signal(struct ws_proc *p, int sig);

/* Stdin. One queue per command, written by the pump in order, fed by
 * two kinds of callers: the Start stream (ws_proc_write_stdin, one write
 * at a time, each waited for) and SendInput (ws_proc_send_input, any
 * number, never waited for). Every byte accepted counts in the stdin
 * offset (the bytes taken so far), whichever way it came. Once the input
 * is closed (ws_proc_close_stdin, or the command closed its end) nothing
 * more is taken. */

/* Queues data for stdin (copied); cb(arg, err) runs on the pump thread
 * once it is written (err 0) or cannot be (-EPIPE: the command closed its
 * stdin or ended; the data is dropped). Returns 0, -EBUSY while a write
 * with a callback is pending, -EBADF when stdin is not a pipe or was
 * closed, -E2BIG over WS_PROC_STDIN_MAX, -ENOMEM. With a PTY the bytes go
 * to the terminal. Not bounded by the queue's limit below: the one write
 * in flight comes on top of it. */
typedef void (*ws_proc_write_fn)(void *arg, int err);
int ws_proc_write_stdin(struct ws_proc *p, const void *data, size_t len, ws_proc_write_fn cb,
                        void *arg);
/* Queues the part of data that the stdin has not taken yet: `offset` is
 * the stdin offset of data[0] (with `append`: whatever the offset now).
 * Bytes before the current offset are skipped, so a retry delivers
 * nothing twice. Never blocks. Returns 0; -ERANGE when offset is past
 * the current offset (bytes would be missing); -ENOBUFS when the bytes
 * would take the queue past WS_PROC_STDIN_MAX (nothing is queued);
 * -ENODEV when the command has no stdin (started without a pipe or a
 * terminal), -EBADF when it was closed, -EPIPE when the command is done;
 * -E2BIG over WS_PROC_STDIN_MAX; -ENOMEM. *taken is the stdin offset
 * after the call, written in every case but -E2BIG. */
int ws_proc_send_input(struct ws_proc *p, const void *data, size_t len, uint64_t offset,
                       bool append, uint64_t *taken);
/* Closes stdin after what is queued (with a PTY: sends the terminal's
 * EOF character then); from then on no more input is taken, on either
 * path. Returns 0 (also when already closed) or -EBADF when the command
 * never had stdin. */
int ws_proc_close_stdin(struct ws_proc *p);
/* Whether stdin takes input now, and the stdin offset. */
void ws_proc_stdin_state(struct ws_proc *p, bool *ret_open, uint64_t *ret_taken);
/* -ENOTTY without a PTY, -EINVAL for a bad size, -ESRCH when done. */
int ws_proc_resize(struct ws_proc *p, unsigned rows, unsigned cols);
/* Whether the command has a PTY, and its size (as started, or as last
 * resized). */
bool ws_proc_pty_size(struct ws_proc *p, unsigned *ret_rows, unsigned *ret_cols);
/* Subscribers attached now. Reads one atomic counter: never blocks. */
int ws_proc_subscribers(struct ws_proc *p);

/* The Run capture of a done command: the head and tail of `stream`
 * concatenated into buf (at least head+tail bytes, see the result). */
size_t ws_proc_capture(struct ws_proc *p, enum ws_stream s, void *buf, size_t max);

/* ---- subscribers ---- */

struct ws_sub;

enum ws_sub_event_kind {
    WS_SUB_NONE = 0, /* nothing now: notify will be called */
    WS_SUB_STARTED,
    WS_SUB_DATA,
    WS_SUB_GAP,
    WS_SUB_EXITED,
};

struct ws_sub_event {
    enum ws_sub_event_kind kind;
    enum ws_stream stream;
    uint64_t offset; /* DATA, GAP */
    /* DATA: the bytes, in the ring (not copied). They stay valid and in
     * place until ws_sub_taken() or the next ws_sub_next(), which count
     * them as delivered. */
    const uint8_t *data;
    size_t len;
    uint64_t dropped; /* GAP */
    /* EXITED: the result, with this subscriber's delivered counts. */
    struct ws_proc_result result;
    uint64_t delivered[WS_STREAM_COUNT];
};

/* Subscribes from `offset` on every stream. notify(arg) runs on the pump
 * thread when ws_sub_next returned NONE and something new is there;
 * release(arg) runs once when the subscriber is freed (after
 * ws_sub_close and any notification in progress). Returns 0 or -ENOMEM. */
int ws_sub_new(struct ws_proc *p, uint64_t offset, void (*notify)(void *arg),
               void (*release)(void *arg), void *arg, struct ws_sub **ret);
/* The next event (DATA: at most max bytes). Events come in order:
 * STARTED once, then DATA/GAP, EXITED once last, then NONE forever. One
 * thread at a time per subscriber. */
void ws_sub_next(struct ws_sub *s, size_t max, struct ws_sub_event *ret);
/* The caller is done with DATA event ev's bytes (copied or sent): the
 * pump may reuse their room. Nothing happens unless ev is still the last
 * DATA event handed out: a caller whose send completes on another thread
 * may have its next ws_sub_next there before this runs, and that event's
 * bytes must stay protected until they are serialized in turn. */
void ws_sub_taken(struct ws_sub *s, const struct ws_sub_event *ev);
/* Bytes handed to this subscriber per stream so far. */
void ws_sub_delivered(struct ws_sub *s, uint64_t ret[WS_STREAM_COUNT]);
/* Detaches; the subscriber no longer holds the pump back. */
void ws_sub_close(struct ws_sub *s);
struct ws_proc *ws_sub_proc(struct ws_sub *s);

#endif
