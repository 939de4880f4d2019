/* The exec console and the process commands of wsctl.
 *
 * exec drives the Exec.Start bidi stream with two threads: the main thread
 * pumps the completion queue and writes output to the matching local fds
 * as it arrives; an input thread polls stdin and a signalfd and turns
 * them into stream messages (stdin chunks, close_stdin, resize) or a
 * cancel (SIGINT, SIGTERM, SIGHUP; wsctl then exits 128 + that signal's
 * number, the status a shell reports for a command the signal ended, so
 * a script can tell a SIGTERM from a Ctrl-C). Only the input thread sends
 * after the first message, and it waits for each send to complete before
 * the next (the core allows one send in flight); the main thread tells it
 * about completions through a condition variable.
 *
 * With -t the local terminal is raw, signals included, as with docker
 * exec -it: Ctrl-C, Ctrl-Z and Ctrl-\ travel as bytes and the remote
 * terminal's line discipline signals its foreground job. The detach keys
 * (ctrl-p,ctrl-q unless --detach-keys says otherwise) end wsctl and leave
 * the command running, so exec -t starts it as a background process; a
 * signal that reaches wsctl itself (kill, a hangup) then kills the remote
 * tree explicitly with the stream's signal message, since the end of a
 * background process's stream does not. The terminal is restored on every
 * path out.
 *
 * attach follows a process's output on Exec.Attach; with -i its stdin
 * goes through Exec.SendInput on a sibling client (its own completion
 * queue, for the input thread), each call carrying the stdin offset of its
 * first byte, so a retried call never delivers a byte twice or skips one;
 * EOF is Exec.CloseInput. With -t the terminal is raw as for exec, and
 * Exec.Resize follows the local size (once to another size first, so a
 * full-screen program redraws what the re-attached terminal lacks).
 *
 * main() blocks the consoles' signals before gRPC starts its threads, so
 * they are only ever read from the signalfd.
 */
#include "clients/cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include "clients/cli/args.h"
#include "clients/cli/output.h"
#include "workspace/v1/exec.pb-c.h"

/* Bytes of stdin per message (the server takes at most 1 MiB). */
#define STDIN_CHUNK_BYTES (64 * 1024)
/* Extra environment variables given with -e. */
#define ENV_MAX 64
/* Secrets named with --secret. */
#define SECRET_MAX 64
/* PTY size when the local side is not a terminal. */
#define PTY_ROWS_DEFAULT 24
#define PTY_COLS_DEFAULT 80
/* The detach sequence when --detach-keys is not given (docker's). */
#define DETACH_KEYS_DEFAULT "ctrl-p,ctrl-q"
/* Longest process id and tag kept for the detach message, with the NUL. */
#define PROC_REF_MAX 130
/* SendInput retries a transient failure (UNAVAILABLE, a full input
 * queue) after a pause that doubles from BACKOFF_MIN_MS to BACKOFF_MAX_MS;
 * UNAVAILABLE at most INPUT_ATTEMPTS times. A full queue waits for as long
 * as it stays full, like a write to a full pipe. */
#define INPUT_ATTEMPTS 8
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000
/* Bytes the stop pipe carries to the input thread. */
#define STOP_BYTE 'x'
#define KILL_BYTE 'k'

struct console {
    struct wsc_call *call;
    bool forward_stdin;
    bool pty;
    /* --background: leave once the process started (it keeps running). */
    bool background;
    /* -t with detach keys: the process runs in the background so that a
     * detach leaves it running, and an interrupt kills it explicitly. */
    bool detachable;
    struct wsc_detach keys;
    int sigfd;
    /* The main thread writes STOP_BYTE here to stop the input thread,
     * KILL_BYTE to have it kill the remote tree. */
    int stop_pipe[2];

    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Under mu: a send completed; the call is over (stop sending). */
    bool send_completed;
    bool finished;
    /* Under mu: the detach keys were typed; the stream was ended on
     * purpose (--background or a detach) and the process keeps running;
     * the id and tag Started named. */
    bool detach_requested;
    bool detached;
    char id[PROC_REF_MAX];
    char tag[PROC_REF_MAX];

    /* The signal that made the input thread end the command (0: none). */
    volatile sig_atomic_t interrupted;
};

void wsc_exec_signals(sigset_t *ret_set)
{
    sigemptyset(ret_set);
    sigaddset(ret_set, SIGINT);
    sigaddset(ret_set, SIGTERM);
    sigaddset(ret_set, SIGHUP);
    sigaddset(ret_set, SIGWINCH);
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void local_winsize(uint32_t *rows, uint32_t *cols)
{
    struct winsize ws;

    if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
        *rows = ws.ws_row;
        *cols = ws.ws_col;
    } else {
        *rows = PTY_ROWS_DEFAULT;
        *cols = PTY_COLS_DEFAULT;
    }
}

/* Sends one message from the input thread (half-closing after it when
 * `close`) and waits for its completion. Returns 0, or -EPIPE once the
 * stream is gone or the call is over. */
static int console_send(struct console *con, const Workspace__V1__StartRequest *msg, bool close)
{
    int r;

    pthread_mutex_lock(&con->mu);
    if (con->finished) {
        r = -EPIPE;
        goto out;
    }
    con->send_completed = false;
    r = wsc_call_start_send(con->call, &msg->base, close);
    if (r < 0)
        goto out;
    while (!con->send_completed && !con->finished)
        pthread_cond_wait(&con->cv, &con->mu);
out:
    pthread_mutex_unlock(&con->mu);
    return r;
}

/* Detaches once Started named the process (its id is what to re-attach
 * to); before that the pump does it when Started arrives. */
static void request_detach(struct console *con)
{
    pthread_mutex_lock(&con->mu);
    con->detach_requested = true;
    if (con->id[0] && !con->detached) {
        con->detached = true;
        wsc_call_cancel(con->call);
    }
    pthread_mutex_unlock(&con->mu);
}

/* Kills the remote tree through the stream (see the top of the file). */
static void kill_remote(struct console *con)
{
    Workspace__V1__StartRequest m = WORKSPACE__V1__START_REQUEST__INIT;

    m.msg_case = WORKSPACE__V1__START_REQUEST__MSG_SIGNAL;
    m.signal = SIGKILL;
    if (console_send(con, &m, false) < 0)
        wsc_call_cancel(con->call);
}

/* A signal read from the signalfd. */
static void console_signal(struct console *con, int signo)
{
    if (signo == SIGWINCH) {
        Workspace__V1__StartRequest m = WORKSPACE__V1__START_REQUEST__INIT;
        Workspace__V1__PtySize size = WORKSPACE__V1__PTY_SIZE__INIT;
        if (con->pty) {
            local_winsize(&size.rows, &size.cols);
            m.msg_case = WORKSPACE__V1__START_REQUEST__MSG_RESIZE;
            m.resize = &size;
            (void)console_send(con, &m, false);
        }
        return;
    }
    if (con->detachable && !con->interrupted) {
        /* The exit record follows the kill; a second signal does not
         * wait for it. */
        con->interrupted = (sig_atomic_t)signo;
        kill_remote(con);
        return;
    }
    /* Cancelling the stream is what ends the remote tree: the server
     * kills a non-background process whose Start stream goes away. */
    if (!con->interrupted)
        con->interrupted = (sig_atomic_t)signo;
    wsc_call_cancel(con->call);
}

static void *input_thread(void *arg)
{
    struct console *con = arg;
    uint8_t *buf = malloc(STDIN_CHUNK_BYTES);
    uint8_t *typed = malloc(STDIN_CHUNK_BYTES + WSC_DETACH_KEYS_MAX);
    /* --background -i keeps the command's stdin open for a later attach
     * -i: wsctl's own stdin, and its EOF, are not for it. */
    bool stdin_open = con->forward_stdin && !con->background;

    if (!buf || !typed)
        goto out;
    for (;;) {
        struct pollfd fds[3] = {
            {.fd = con->stop_pipe[0], .events = POLLIN},
            {.fd = con->sigfd, .events = POLLIN},
            {.fd = stdin_open ? STDIN_FILENO : -1, .events = POLLIN},
        };
        if (poll(fds, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (fds[0].revents) {
            char b = STOP_BYTE;
            if (read(con->stop_pipe[0], &b, 1) == 1 && b == KILL_BYTE) {
                kill_remote(con);
                continue;
            }
            break;
        }
        if (fds[1].revents) {
            struct signalfd_siginfo si;
            if (read(con->sigfd, &si, sizeof(si)) == sizeof(si))
                console_signal(con, (int)si.ssi_signo);
        }
        if (stdin_open && fds[2].revents) {
            Workspace__V1__StartRequest m = WORKSPACE__V1__START_REQUEST__INIT;
            ssize_t n = read(STDIN_FILENO, buf, STDIN_CHUNK_BYTES);
            size_t len = n > 0 ? (size_t)n : 0;
            const uint8_t *data = buf;

            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (n > 0 && con->pty && con->keys.n) {
                bool detach = wsc_detach_feed(&con->keys, buf, len, typed, &len);
                data = typed;
                if (detach) {
                    /* What came before the keys still goes; nothing
                     * after them is read. */
                    stdin_open = false;
                    if (len) {
                        m.msg_case = WORKSPACE__V1__START_REQUEST__MSG_STDIN;
                        m.stdin.data = (uint8_t *)data;
                        m.stdin.len = len;
                        (void)console_send(con, &m, false);
                    }
                    request_detach(con);
                    continue;
                }
                if (len == 0)
                    continue;
            }
            if (n > 0) {
                m.msg_case = WORKSPACE__V1__START_REQUEST__MSG_STDIN;
                m.stdin.data = (uint8_t *)data;
                m.stdin.len = len;
            } else {
                m.msg_case = WORKSPACE__V1__START_REQUEST__MSG_CLOSE_STDIN;
                m.close_stdin = true;
                stdin_open = false;
            }
            /* After close_stdin only a terminal has more to send (its
             * resizes): half-close, so that a front proxy sees the request
             * end before the response does (HAProxy 2.6 resets a stream whose
             * response ends first, and the exit status would be lost). */
            if (console_send(con, &m, !stdin_open && !con->pty) < 0)
                stdin_open = false;
        }
    }
out:
    free(typed);
    free(buf);
    return NULL;
}

/* The exit status wsctl passes on for a finished command, with a line on
 * stderr when the end was not the command's own doing. */
static int exit_status(const Workspace__V1__Exited *ex)
{
    switch (ex->cause) {
    case WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_EXITED:
        return ex->exit_code & 0xff;
    case WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_SIGNALED:
        return 128 + (ex->signal & 0x7f);
    case WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_TIMEOUT:
        fprintf(stderr,
                "wsctl: TIMEOUT: the command ran past its time limit (%" PRIu64
                " ms) and was killed\n",
                ex->wall_time_ms);
        return WSC_EXIT_TIMEOUT;
    case WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_OOM:
        fprintf(stderr, "wsctl: OOM: the command was killed for lack of memory\n");
        return 128 + SIGKILL;
    case WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_CANCELLED:
        fprintf(stderr, "wsctl: CANCELLED: the command was cancelled\n");
        return WSC_EXIT_SIGINT;
    case WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_EVICTED:
        fprintf(stderr, "wsctl: WORKSPACE_EVICTED: the workspace was closed under the command\n");
        return WSC_EXIT_FAIL;
    default:
        return WSC_EXIT_FAIL;
    }
}

/* Writes one event where it belongs. Keeps the exit record. */
static int handle_event(bool json, Workspace__V1__ProcessEvent *ev, bool *have_exit, int *exit_code)
{
    const Workspace__V1__OutputChunk *chunk = NULL;
    int fd = STDOUT_FILENO;

    if (json && wsc_json_emit(wsc_json_message(&ev->base)) < 0)
        return -EIO;
    switch (ev->event_case) {
    case WORKSPACE__V1__PROCESS_EVENT__EVENT_STDOUT:
        chunk = ev->stdout;
        break;
    case WORKSPACE__V1__PROCESS_EVENT__EVENT_STDERR:
        chunk = ev->stderr;
        fd = STDERR_FILENO;
        break;
    case WORKSPACE__V1__PROCESS_EVENT__EVENT_PTY:
        chunk = ev->pty;
        break;
    case WORKSPACE__V1__PROCESS_EVENT__EVENT_GAP:
        if (!json)
            fprintf(stderr,
                    "wsctl: GAP: %" PRIu64 " bytes of output at offset %" PRIu64
                    " were no longer buffered\n",
                    ev->gap->bytes_dropped, ev->gap->offset);
        break;
    case WORKSPACE__V1__PROCESS_EVENT__EVENT_EXITED:
        *have_exit = true;
        if (json) {
            /* The record is already on stdout; no extra prose. */
            *exit_code = ev->exited->cause == WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_EXITED
                             ? ev->exited->exit_code & 0xff
                         : ev->exited->cause == WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_SIGNALED
                             ? 128 + (ev->exited->signal & 0x7f)
                             : exit_status(ev->exited);
        } else {
            *exit_code = exit_status(ev->exited);
        }
        break;
    default:
        break;
    }
    if (chunk && !json)
        return write_all(fd, chunk->data.data, chunk->data.len);
    return 0;
}

static void copy_ref(char *dst, const char *src)
{
    size_t n = strnlen(src, PROC_REF_MAX - 1);

    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* The process started: note how to re-attach to it, and leave now when
 * that was asked for. Ending the stream of a background process leaves
 * it running. */
static void started(struct console *con, bool json, const Workspace__V1__Started *st)
{
    pthread_mutex_lock(&con->mu);
    copy_ref(con->id, st->id);
    copy_ref(con->tag, st->tag);
    if (!con->detached && (con->background || con->detach_requested)) {
        /* --background prints the id for a later attach. */
        if (con->background && !json)
            printf("%s\n", st->id);
        con->detached = true;
        wsc_call_cancel(con->call);
    }
    pthread_mutex_unlock(&con->mu);
}

/* Pumps the stream until the status arrives; returns the exit status. */
static int pump(struct console *con, bool json)
{
    bool have_exit = false, output_ok = true, detached;
    int exit_code = WSC_EXIT_FAIL, r;

    /* A refused receive means the call is over; the status follows. */
    (void)wsc_call_start_recv(con->call);
    while (!wsc_call_done(con->call) || wsc_call_recv_pending(con->call)) {
        enum wsc_event ev;
        bool ok;

        r = wsc_call_next(con->call, -1, &ev, &ok);
        if (r < 0)
            break;
        if (r == 0)
            continue;
        if (ev == WSC_EV_SENT) {
            pthread_mutex_lock(&con->mu);
            con->send_completed = true;
            pthread_cond_broadcast(&con->cv);
            pthread_mutex_unlock(&con->mu);
        } else if (ev == WSC_EV_RECEIVED) {
            Workspace__V1__ProcessEvent *pe = NULL;

            if (ok && wsc_call_take(con->call, &workspace__v1__process_event__descriptor,
                                    (ProtobufCMessage **)&pe) == 1) {
                if (output_ok && handle_event(json, pe, &have_exit, &exit_code) < 0) {
                    /* Our reader went away: end the command too. */
                    output_ok = false;
                    if (con->detachable)
                        (void)!write(con->stop_pipe[1], (char[]){KILL_BYTE}, 1);
                    else
                        wsc_call_cancel(con->call);
                }
                if (pe->event_case == WORKSPACE__V1__PROCESS_EVENT__EVENT_STARTED)
                    started(con, json, pe->started);
                workspace__v1__process_event__free_unpacked(pe, NULL);
                (void)wsc_call_start_recv(con->call);
            }
        } else if (ev == WSC_EV_STATUS) {
            pthread_mutex_lock(&con->mu);
            con->finished = true;
            pthread_cond_broadcast(&con->cv);
            pthread_mutex_unlock(&con->mu);
        }
    }
    pthread_mutex_lock(&con->mu);
    con->finished = true;
    pthread_cond_broadcast(&con->cv);
    detached = con->detached;
    pthread_mutex_unlock(&con->mu);

    if (con->interrupted)
        return 128 + con->interrupted;
    if (detached && !have_exit)
        return WSC_EXIT_OK;
    if (have_exit)
        return exit_code;
    if (wsc_call_error(con->call)->code != GRPC_STATUS_OK)
        return wsc_report(wsc_call_error(con->call));
    fprintf(stderr, "wsctl: the stream ended without an exit record\n");
    return WSC_EXIT_FAIL;
}

/* Puts the local terminal in raw mode for -t: every key, Ctrl-C, Ctrl-Z
 * and Ctrl-\ included, becomes a byte for the remote terminal. true with
 * the old settings in *saved when it did. */
static bool make_raw(struct termios *saved)
{
    struct termios t;

    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, saved) != 0)
        return false;
    t = *saved;
    cfmakeraw(&t);
    return tcsetattr(STDIN_FILENO, TCSADRAIN, &t) == 0;
}

/* The line that says how to come back, once the terminal is cooked
 * again. */
static int print_detached(const char *ws, const char *id, const char *tag)
{
    const char *ref = tag[0] ? tag : id;

    fprintf(stderr,
            "wsctl: detached from %s, which keeps running; re-attach with: wsctl attach %s %s "
            "-i -t\n",
            ref, ws, ref);
    return WSC_EXIT_OK;
}

int wsc_cmd_exec(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"interactive", no_argument, NULL, 'i'},       {"tty", no_argument, NULL, 't'},
        {"timeout", required_argument, NULL, 'T'},     {"tag", required_argument, NULL, 'g'},
        {"cwd", required_argument, NULL, 'C'},         {"env", required_argument, NULL, 'e'},
        {"background", no_argument, NULL, 'b'},        {"secret", required_argument, NULL, 's'},
        {"detach-keys", required_argument, NULL, 'D'}, {NULL, 0, NULL, 0},
    };
    Workspace__V1__StartRequest req = WORKSPACE__V1__START_REQUEST__INIT;
    Workspace__V1__StartProcess start = WORKSPACE__V1__START_PROCESS__INIT;
    Workspace__V1__ProcessConfig proc = WORKSPACE__V1__PROCESS_CONFIG__INIT;
    Workspace__V1__PtySize size = WORKSPACE__V1__PTY_SIZE__INIT;
    Workspace__V1__ProcessConfig__EnvEntry env[ENV_MAX];
    Workspace__V1__ProcessConfig__EnvEntry *envp[ENV_MAX];
    char *secrets[SECRET_MAX];
    const char *detach_keys = DETACH_KEYS_DEFAULT;
    struct console con = {.sigfd = -1, .stop_pipe = {-1, -1}};
    struct termios saved;
    bool raw = false, thread_started = false, tty = false, detached = false;
    pthread_t thread;
    sigset_t set;
    int opt, r, ret = WSC_EXIT_FAIL;

    /* GNU getopt permutes, so options may come before or after WS; the
     * remote argv follows "--" and keeps its own options. */
    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "itT:e:C:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'i':
            con.forward_stdin = true;
            break;
        case 't':
            tty = true;
            break;
        case 'T':
            if (wsc_parse_duration_ms(optarg, &proc.timeout_ms) < 0)
                return wsc_usage_error("exec: bad --timeout '%s' (e.g. 30s, 500ms, 2m)", optarg);
            break;
        case 's':
            if (proc.n_secrets == SECRET_MAX)
                return wsc_usage_error("exec: more than %d --secret", SECRET_MAX);
            secrets[proc.n_secrets++] = optarg;
            proc.secrets = secrets;
            break;
        case 'D':
            detach_keys = optarg;
            break;
        case 'g':
            proc.tag = optarg;
            break;
        case 'C':
            proc.cwd = optarg;
            break;
        case 'b':
            proc.background = true;
            con.background = true;
            break;
        case 'e': {
            char *eq = strchr(optarg, '=');
            if (!eq || proc.n_env == ENV_MAX)
                return wsc_usage_error("exec: bad or too many -e NAME=VALUE");
            workspace__v1__process_config__env_entry__init(&env[proc.n_env]);
            *eq = '\0';
            env[proc.n_env].key = optarg;
            env[proc.n_env].value = eq + 1;
            envp[proc.n_env] = &env[proc.n_env];
            proc.n_env++;
            proc.env = envp;
            break;
        }
        default:
            return wsc_usage_error("exec: unknown option or missing value (is \"--\" missing "
                                   "before the command?)");
        }
    }
    if (argc - optind < 2)
        return wsc_usage_error("usage: wsctl exec WS [-i] [-t] [--timeout D] [--tag T] "
                               "[--secret NAME]... -- argv...");
    start.workspace_id = argv[optind++];
    proc.argv = argv + optind;
    proc.n_argv = (size_t)(argc - optind);
    if (wsc_detach_parse(detach_keys, &con.keys) < 0)
        return wsc_usage_error("exec: bad --detach-keys '%s' (e.g. ctrl-p,ctrl-q)", detach_keys);
    if (tty) {
        con.pty = true;
        con.forward_stdin = true;
        local_winsize(&size.rows, &size.cols);
        proc.pty = &size;
        /* A detach must leave the process running: only a background
         * process outlives its stream. */
        if (con.keys.n && !con.background) {
            con.detachable = true;
            proc.background = true;
        }
    }
    proc.stdin = con.forward_stdin;
    start.process = &proc;
    req.msg_case = WORKSPACE__V1__START_REQUEST__MSG_START;
    req.start = &start;

    wsc_exec_signals(&set);
    con.sigfd = signalfd(-1, &set, SFD_CLOEXEC);
    if (con.sigfd < 0 || pipe2(con.stop_pipe, O_CLOEXEC) < 0) {
        ret = wsc_report_errno("exec", -errno);
        goto out;
    }
    pthread_mutex_init(&con.mu, NULL);
    pthread_cond_init(&con.cv, NULL);

    r = wsc_call_new(ctx->cl, "/workspace.v1.Exec/Start", &con.call);
    if (r < 0) {
        ret = wsc_report_errno("exec", r);
        goto out_sync;
    }
    if (con.pty)
        raw = make_raw(&saved);
    /* A refused first message shows up as the call's status below. With
     * no stdin and no terminal it is the only message: half-close with it
     * (see input_thread). Ctrl-C cancels the call, which needs no send. */
    (void)wsc_call_send(con.call, &req.base, !con.forward_stdin);
    if (pthread_create(&thread, NULL, input_thread, &con) == 0)
        thread_started = true;
    ret = pump(&con, ctx->json);
    if (thread_started) {
        (void)!write(con.stop_pipe[1], "x", 1);
        pthread_join(thread, NULL);
    }
    /* Whatever the input thread left in flight completes now. */
    (void)wsc_call_status(con.call);
    wsc_call_free(con.call);
    detached = con.detach_requested && con.detached && ret == WSC_EXIT_OK;
out_sync:
    pthread_cond_destroy(&con.cv);
    pthread_mutex_destroy(&con.mu);
out:
    if (raw)
        tcsetattr(STDIN_FILENO, TCSADRAIN, &saved);
    if (detached)
        (void)print_detached(start.workspace_id, con.id, con.tag);
    if (con.sigfd >= 0)
        close(con.sigfd);
    if (con.stop_pipe[0] >= 0)
        close(con.stop_pipe[0]);
    if (con.stop_pipe[1] >= 0)
        close(con.stop_pipe[1]);
    return ret;
}

/* "p_" + 16 lowercase hex is a process id; anything else is a tag. */
static bool looks_like_id(const char *s)
{
    if (strncmp(s, "p_", 2) != 0 || strlen(s) != 18)
        return false;
    for (const char *p = s + 2; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

/* An attach console: the main thread reads the Attach stream, the input
 * thread owns everything else (stdin, signals, the sibling client). */
struct attach {
    struct wsc_call *call;
    /* The input thread's calls (SendInput, CloseInput, Resize). */
    struct wsc_client *sib;
    const char *ws, *id, *tag;
    bool forward_stdin;
    bool pty;
    struct wsc_detach keys;
    /* The stdin offset of the next byte to send (input thread only). */
    uint64_t offset;
    int sigfd;
    int stop_pipe[2];
    /* Written by the input thread before it cancels the call; read by the
     * main thread after joining it. */
    int interrupted;
    bool detached;
    bool input_failed;
    struct wsc_error input_err;
};

static bool retryable(const struct wsc_error *e, bool *ret_full)
{
    *ret_full = e->code == GRPC_STATUS_RESOURCE_EXHAUSTED && strcmp(e->reason, "LIMIT") == 0;
    if (*ret_full || e->code == GRPC_STATUS_UNAVAILABLE)
        return true;
    for (size_t i = 0; i < e->n_meta; i++)
        if (strcmp(e->meta_key[i], "transient") == 0 && strcmp(e->meta_value[i], "true") == 0)
            return true;
    return false;
}

static void attach_resize(struct attach *at, uint32_t rows, uint32_t cols, struct wsc_error *err,
                          int *ret_r)
{
    Workspace__V1__ResizeRequest req = WORKSPACE__V1__RESIZE_REQUEST__INIT;
    Workspace__V1__PtySize size = WORKSPACE__V1__PTY_SIZE__INIT;
    Workspace__V1__ResizeResponse *resp = NULL;

    req.workspace_id = (char *)at->ws;
    req.id = (char *)at->id;
    req.tag = (char *)at->tag;
    size.rows = rows;
    size.cols = cols;
    req.size = &size;
    *ret_r =
        wsc_unary(at->sib, "/workspace.v1.Exec/Resize", &req.base,
                  &workspace__v1__resize_response__descriptor, (ProtobufCMessage **)&resp, err);
    if (*ret_r == 0)
        workspace__v1__resize_response__free_unpacked(resp, NULL);
}

/* A signal read from the signalfd. Returns true when it ends the
 * attach. */
static bool attach_signal(struct attach *at, int signo)
{
    if (signo == SIGWINCH) {
        struct wsc_error err;
        uint32_t rows, cols;
        int r;
        if (at->pty) {
            local_winsize(&rows, &cols);
            attach_resize(at, rows, cols, &err, &r);
        }
        return false;
    }
    /* Ending an Attach stream ends no process. */
    at->interrupted = signo;
    wsc_call_cancel(at->call);
    return true;
}

/* Waits `ms` before a retry, or less when wsctl is told to stop (the stop
 * pipe, an ending signal): then -ECANCELED. */
static int attach_pause(struct attach *at, int ms)
{
    struct pollfd fds[2] = {
        {.fd = at->stop_pipe[0], .events = POLLIN},
        {.fd = at->sigfd, .events = POLLIN},
    };
    struct signalfd_siginfo si;

    for (;;) {
        int n = poll(fds, 2, ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return 0;
        if (fds[0].revents)
            return -ECANCELED;
        if (read(at->sigfd, &si, sizeof(si)) == sizeof(si) && attach_signal(at, (int)si.ssi_signo))
            return -ECANCELED;
    }
}

/* Sends `len` bytes that start at stdin offset at->offset. Every attempt
 * names that offset, so the server skips what an earlier attempt already
 * delivered. 0, -ECANCELED, or -EREMOTEIO with at->input_err. */
static int send_input(struct attach *at, const uint8_t *data, size_t len)
{
    int pause_ms = BACKOFF_MIN_MS, attempts = 0;

    while (len > 0) {
        Workspace__V1__SendInputRequest req = WORKSPACE__V1__SEND_INPUT_REQUEST__INIT;
        Workspace__V1__SendInputResponse *resp = NULL;
        bool full;
        int r;

        req.workspace_id = (char *)at->ws;
        req.id = (char *)at->id;
        req.tag = (char *)at->tag;
        req.data.data = (uint8_t *)data;
        req.data.len = len;
        req.offset = at->offset;
        r = wsc_unary(at->sib, "/workspace.v1.Exec/SendInput", &req.base,
                      &workspace__v1__send_input_response__descriptor, (ProtobufCMessage **)&resp,
                      &at->input_err);
        if (r == 0) {
            /* The process took everything before resp->offset: ours, and
             * whatever another writer sent meanwhile. */
            uint64_t took = resp->offset > at->offset ? resp->offset - at->offset : 0;
            workspace__v1__send_input_response__free_unpacked(resp, NULL);
            if (took > len)
                took = len;
            at->offset += took;
            data += took;
            len -= took;
            if (took > 0) {
                attempts = 0;
                pause_ms = BACKOFF_MIN_MS;
                continue;
            }
            /* An OK that took nothing: try again, but not forever. */
            if (++attempts >= INPUT_ATTEMPTS) {
                at->input_err = (struct wsc_error){.code = GRPC_STATUS_INTERNAL};
                snprintf(at->input_err.message, sizeof(at->input_err.message),
                         "SendInput: the process took none of the bytes at offset %" PRIu64,
                         at->offset);
                return -EREMOTEIO;
            }
            if (attach_pause(at, pause_ms) < 0)
                return -ECANCELED;
            continue;
        }
        if (r != -EREMOTEIO) {
            at->input_err = (struct wsc_error){.code = GRPC_STATUS_INTERNAL};
            snprintf(at->input_err.message, sizeof(at->input_err.message), "SendInput: %s",
                     strerror(-r));
            return -EREMOTEIO;
        }
        if (!retryable(&at->input_err, &full) || (!full && ++attempts >= INPUT_ATTEMPTS))
            return -EREMOTEIO;
        if (attach_pause(at, pause_ms) < 0)
            return -ECANCELED;
        pause_ms = pause_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : pause_ms * 2;
    }
    return 0;
}

static int close_input(struct attach *at)
{
    Workspace__V1__CloseInputRequest req = WORKSPACE__V1__CLOSE_INPUT_REQUEST__INIT;
    Workspace__V1__CloseInputResponse *resp = NULL;
    bool full;

    req.workspace_id = (char *)at->ws;
    req.id = (char *)at->id;
    req.tag = (char *)at->tag;
    for (int attempt = 1;; attempt++) {
        int r = wsc_unary(at->sib, "/workspace.v1.Exec/CloseInput", &req.base,
                          &workspace__v1__close_input_response__descriptor,
                          (ProtobufCMessage **)&resp, &at->input_err);
        if (r == 0) {
            workspace__v1__close_input_response__free_unpacked(resp, NULL);
            return 0;
        }
        if (r != -EREMOTEIO || !retryable(&at->input_err, &full) || attempt == INPUT_ATTEMPTS)
            return r;
        if (attach_pause(at, BACKOFF_MIN_MS << attempt) < 0)
            return -ECANCELED;
    }
}

static void *attach_input_thread(void *arg)
{
    struct attach *at = arg;
    uint8_t *buf = malloc(STDIN_CHUNK_BYTES);
    uint8_t *typed = malloc(STDIN_CHUNK_BYTES + WSC_DETACH_KEYS_MAX);
    bool stdin_open = at->forward_stdin;

    if (!buf || !typed)
        goto out;
    for (;;) {
        struct pollfd fds[3] = {
            {.fd = at->stop_pipe[0], .events = POLLIN},
            {.fd = at->sigfd, .events = POLLIN},
            {.fd = stdin_open ? STDIN_FILENO : -1, .events = POLLIN},
        };
        struct signalfd_siginfo si;
        ssize_t n;
        size_t len;
        bool detach = false;
        int r = 0;

        if (poll(fds, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (fds[0].revents)
            break;
        if (fds[1].revents && read(at->sigfd, &si, sizeof(si)) == sizeof(si) &&
            attach_signal(at, (int)si.ssi_signo))
            break;
        if (!stdin_open || !fds[2].revents)
            continue;
        n = read(STDIN_FILENO, buf, STDIN_CHUNK_BYTES);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) {
            stdin_open = false;
            r = close_input(at);
        } else if (at->pty && at->keys.n) {
            detach = wsc_detach_feed(&at->keys, buf, (size_t)n, typed, &len);
            r = len ? send_input(at, typed, len) : 0;
        } else {
            r = send_input(at, buf, (size_t)n);
        }
        if (r == -ECANCELED)
            break;
        if (r < 0) {
            at->input_failed = true;
            wsc_call_cancel(at->call);
            break;
        }
        if (detach) {
            at->detached = true;
            wsc_call_cancel(at->call);
            break;
        }
    }
out:
    free(typed);
    free(buf);
    return NULL;
}

/* What attach -i and -t need before the stream: the stdin offset the
 * process is at, and (-t) a redraw. 0, or an exit status after the error
 * line. */
static int attach_prepare(struct attach *at)
{
    Workspace__V1__ListProcessesRequest req = WORKSPACE__V1__LIST_PROCESSES_REQUEST__INIT;
    Workspace__V1__ListProcessesResponse *resp = NULL;
    const Workspace__V1__ProcessInfo *p = NULL;
    struct wsc_error err;
    bool running = false;
    int r;

    req.workspace_id = (char *)at->ws;
    r = wsc_unary(at->sib, "/workspace.v1.Exec/ListProcesses", &req.base,
                  &workspace__v1__list_processes_response__descriptor, (ProtobufCMessage **)&resp,
                  &err);
    if (r == -EREMOTEIO)
        return wsc_report(&err);
    if (r < 0)
        return wsc_report_errno("attach", r);
    for (size_t i = 0; i < resp->n_processes && !p; i++)
        if ((at->id[0] && strcmp(resp->processes[i]->id, at->id) == 0) ||
            (at->tag[0] && strcmp(resp->processes[i]->tag, at->tag) == 0))
            p = resp->processes[i];
    if (p) {
        at->offset = p->stdin_offset;
        running = p->running;
    }
    workspace__v1__list_processes_response__free_unpacked(resp, NULL);
    /* An unknown or finished process: the stream says what there is. */
    if (at->pty && running) {
        uint32_t rows, cols;
        local_winsize(&rows, &cols);
        /* A terminal set to its own size again signals nobody: go through
         * another size, so a full-screen program gets SIGWINCH and
         * redraws. */
        attach_resize(at, rows > 1 ? rows - 1 : rows + 1, cols, &err, &r);
        if (r == 0)
            attach_resize(at, rows, cols, &err, &r);
        if (r == -EREMOTEIO)
            return wsc_report(&err);
        if (r < 0)
            return wsc_report_errno("attach: resize", r);
    }
    return 0;
}

int wsc_cmd_attach(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"offset", required_argument, NULL, 'o'},
        {"interactive", no_argument, NULL, 'i'},
        {"tty", no_argument, NULL, 't'},
        {"detach-keys", required_argument, NULL, 'D'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__AttachRequest req = WORKSPACE__V1__ATTACH_REQUEST__INIT;
    struct attach at = {.sigfd = -1, .stop_pipe = {-1, -1}, .id = "", .tag = ""};
    const char *detach_keys = DETACH_KEYS_DEFAULT;
    struct termios saved;
    bool have_exit = false, raw = false, thread_started = false;
    pthread_t thread;
    sigset_t set;
    int exit_code = WSC_EXIT_FAIL, opt, r, ret = WSC_EXIT_FAIL;
    char *end;

    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "it", longopts, NULL)) != -1) {
        switch (opt) {
        case 'o':
            errno = 0;
            req.offset = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end)
                return wsc_usage_error("attach: bad --offset '%s'", optarg);
            break;
        case 'i':
            at.forward_stdin = true;
            break;
        case 't':
            at.pty = true;
            at.forward_stdin = true;
            break;
        case 'D':
            detach_keys = optarg;
            break;
        default:
            return wsc_usage_error("attach: unknown option or missing value");
        }
    }
    if (argc - optind != 2)
        return wsc_usage_error("usage: wsctl attach WS TAG|ID [--offset N] [-i] [-t]");
    if (wsc_detach_parse(detach_keys, &at.keys) < 0)
        return wsc_usage_error("attach: bad --detach-keys '%s' (e.g. ctrl-p,ctrl-q)", detach_keys);
    at.ws = req.workspace_id = argv[optind];
    if (looks_like_id(argv[optind + 1]))
        at.id = req.id = argv[optind + 1];
    else
        at.tag = req.tag = argv[optind + 1];

    wsc_exec_signals(&set);
    at.sigfd = signalfd(-1, &set, SFD_CLOEXEC);
    if (at.sigfd < 0 || pipe2(at.stop_pipe, O_CLOEXEC) < 0) {
        ret = wsc_report_errno("attach", -errno);
        goto out;
    }
    r = wsc_client_sibling(ctx->cl, &at.sib);
    if (r < 0) {
        ret = wsc_report_errno("attach", r);
        goto out;
    }
    if (at.forward_stdin) {
        ret = attach_prepare(&at);
        if (ret)
            goto out;
        ret = WSC_EXIT_FAIL;
    }
    r = wsc_call_new(ctx->cl, "/workspace.v1.Exec/Attach", &at.call);
    if (r < 0) {
        ret = wsc_report_errno("attach", r);
        goto out;
    }
    if (at.pty)
        raw = make_raw(&saved);
    (void)wsc_call_send(at.call, &req.base, true);
    if (pthread_create(&thread, NULL, attach_input_thread, &at) == 0)
        thread_started = true;
    for (;;) {
        Workspace__V1__ProcessEvent *ev = NULL;

        r = wsc_call_recv(at.call, &workspace__v1__process_event__descriptor,
                          (ProtobufCMessage **)&ev);
        if (r <= 0)
            break;
        r = handle_event(ctx->json, ev, &have_exit, &exit_code);
        workspace__v1__process_event__free_unpacked(ev, NULL);
        if (r < 0) {
            wsc_call_cancel(at.call);
            break;
        }
    }
    if (thread_started) {
        (void)!write(at.stop_pipe[1], (char[]){STOP_BYTE}, 1);
        pthread_join(thread, NULL);
    }
    r = wsc_call_status(at.call);
    if (raw) {
        tcsetattr(STDIN_FILENO, TCSADRAIN, &saved);
        raw = false;
    }
    if (at.interrupted)
        ret = 128 + at.interrupted;
    else if (have_exit)
        ret = exit_code;
    else if (at.detached)
        ret = print_detached(at.ws, at.id, at.tag);
    else if (at.input_failed)
        ret = wsc_report(&at.input_err);
    else if (r < 0)
        ret = wsc_report(wsc_call_error(at.call));
    else
        ret = WSC_EXIT_OK;
    wsc_call_free(at.call);
out:
    if (raw)
        tcsetattr(STDIN_FILENO, TCSADRAIN, &saved);
    wsc_client_free(at.sib);
    if (at.sigfd >= 0)
        close(at.sigfd);
    if (at.stop_pipe[0] >= 0)
        close(at.stop_pipe[0]);
    if (at.stop_pipe[1] >= 0)
        close(at.stop_pipe[1]);
    return ret;
}

int wsc_cmd_ps(struct wsc_ctx *ctx, int argc, char **argv)
{
    Workspace__V1__ListProcessesRequest req = WORKSPACE__V1__LIST_PROCESSES_REQUEST__INIT;
    Workspace__V1__ListProcessesResponse *resp = NULL;
    struct wsc_error err;
    int r;

    optind = 0;
    opterr = 0;
    if (getopt_long(argc, argv, "", (const struct option[]){{NULL, 0, NULL, 0}}, NULL) != -1 ||
        argc - optind != 1)
        return wsc_usage_error("usage: wsctl ps WS");
    req.workspace_id = argv[optind];
    r = wsc_unary(ctx->cl, "/workspace.v1.Exec/ListProcesses", &req.base,
                  &workspace__v1__list_processes_response__descriptor, (ProtobufCMessage **)&resp,
                  &err);
    if (r == -EREMOTEIO)
        return wsc_report(&err);
    if (r < 0)
        return wsc_report_errno("ps", r);
    if (ctx->json) {
        r = wsc_json_emit(wsc_json_message(&resp->base)) < 0;
    } else {
        printf("%-18s %-20s %8s %-12s %s\n", "ID", "TAG", "PID", "STATE", "COMMAND");
        for (size_t i = 0; i < resp->n_processes; i++) {
            const Workspace__V1__ProcessInfo *p = resp->processes[i];
            char state[32];

            if (p->running)
                snprintf(state, sizeof(state), "running");
            else if (p->exited && p->exited->cause == WORKSPACE__V1__EXIT_CAUSE__EXIT_CAUSE_EXITED)
                snprintf(state, sizeof(state), "exited(%d)", p->exited->exit_code);
            else if (p->exited && p->exited->signal)
                snprintf(state, sizeof(state), "killed(%d)", p->exited->signal);
            else
                snprintf(state, sizeof(state), "ended");
            printf("%-18s %-20s %8" PRId64 " %-12s", p->id, p->tag[0] ? p->tag : "-", p->pid,
                   state);
            for (size_t k = 0; k < p->n_argv; k++)
                printf(" %s", p->argv[k]);
            printf("\n");
        }
    }
    workspace__v1__list_processes_response__free_unpacked(resp, NULL);
    return r;
}

/* Signal by number or by name, with or without the SIG prefix. */
static int parse_signal(const char *s, int32_t *ret_sig)
{
    static const struct {
        const char *name;
        int sig;
    } names[] = {
        {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
        {"TERM", SIGTERM}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"STOP", SIGSTOP},
        {"CONT", SIGCONT}, {"ALRM", SIGALRM}, {"PIPE", SIGPIPE}, {"WINCH", SIGWINCH},
    };
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (!errno && end != s && !*end && v > 0 && v < 65) {
        *ret_sig = (int32_t)v;
        return 0;
    }
    if (strncasecmp(s, "SIG", 3) == 0)
        s += 3;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(s, names[i].name) == 0) {
            *ret_sig = names[i].sig;
            return 0;
        }
    }
    return -EINVAL;
}

int wsc_cmd_kill(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"signal", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__SendSignalRequest req = WORKSPACE__V1__SEND_SIGNAL_REQUEST__INIT;
    Workspace__V1__SendSignalResponse *resp = NULL;
    struct wsc_error err;
    int opt, r;

    req.signal = SIGTERM;
    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "s:", longopts, NULL)) != -1) {
        if (opt != 's' || parse_signal(optarg, &req.signal) < 0)
            return wsc_usage_error("kill: bad option or signal");
    }
    if (argc - optind != 2)
        return wsc_usage_error("usage: wsctl kill WS TAG|ID [-s SIG]");
    req.workspace_id = argv[optind];
    if (looks_like_id(argv[optind + 1]))
        req.id = argv[optind + 1];
    else
        req.tag = argv[optind + 1];
    r = wsc_unary(ctx->cl, "/workspace.v1.Exec/SendSignal", &req.base,
                  &workspace__v1__send_signal_response__descriptor, (ProtobufCMessage **)&resp,
                  &err);
    if (r == -EREMOTEIO)
        return wsc_report(&err);
    if (r < 0)
        return wsc_report_errno("kill", r);
    if (ctx->json)
        r = wsc_json_emit(json_object()) < 0;
    workspace__v1__send_signal_response__free_unpacked(resp, NULL);
    return r;
}
