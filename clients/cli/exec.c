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
 * main() blocks the console's signals before gRPC starts its threads, so
 * they are only ever read from the signalfd. With -t the local terminal is
 * put in raw mode (Ctrl-C still raises SIGINT, so it cancels) and restored
 * on every path out of wsc_cmd_exec.
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

#include "clients/cli/output.h"
#include "workspace/v1/exec.pb-c.h"

/* Bytes of stdin per message (the server takes at most 1 MiB). */
#define STDIN_CHUNK_BYTES (64 * 1024)
/* Extra environment variables given with -e. */
#define ENV_MAX 64
/* PTY size when the local side is not a terminal. */
#define PTY_ROWS_DEFAULT 24
#define PTY_COLS_DEFAULT 80

struct console {
    struct wsc_call *call;
    bool forward_stdin;
    bool pty;
    /* --background: leave once the process started (it keeps running). */
    bool background;
    bool detached;
    int sigfd;
    /* The main thread writes a byte here to stop the input thread. */
    int stop_pipe[2];

    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Under mu: a send completed; the call is over (stop sending). */
    bool send_completed;
    bool finished;

    /* The signal that made the input thread cancel the call (0: none). */
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

static void *input_thread(void *arg)
{
    struct console *con = arg;
    uint8_t *buf = malloc(STDIN_CHUNK_BYTES);
    bool stdin_open = con->forward_stdin;

    if (!buf)
        return NULL;
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
        if (fds[0].revents)
            break;
        if (fds[1].revents) {
            struct signalfd_siginfo si;
            if (read(con->sigfd, &si, sizeof(si)) == sizeof(si)) {
                if (si.ssi_signo == SIGWINCH) {
                    Workspace__V1__StartRequest m = WORKSPACE__V1__START_REQUEST__INIT;
                    Workspace__V1__PtySize size = WORKSPACE__V1__PTY_SIZE__INIT;
                    if (con->pty) {
                        local_winsize(&size.rows, &size.cols);
                        m.msg_case = WORKSPACE__V1__START_REQUEST__MSG_RESIZE;
                        m.resize = &size;
                        (void)console_send(con, &m, false);
                    }
                } else {
                    /* Cancelling the stream is what ends the remote tree:
                     * the server kills a non-background process whose
                     * Start stream goes away. */
                    con->interrupted = (sig_atomic_t)si.ssi_signo;
                    wsc_call_cancel(con->call);
                }
            }
        }
        if (stdin_open && fds[2].revents) {
            Workspace__V1__StartRequest m = WORKSPACE__V1__START_REQUEST__INIT;
            ssize_t n = read(STDIN_FILENO, buf, STDIN_CHUNK_BYTES);

            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (n > 0) {
                m.msg_case = WORKSPACE__V1__START_REQUEST__MSG_STDIN;
                m.stdin.data = buf;
                m.stdin.len = (size_t)n;
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

/* Pumps the stream until the status arrives; returns the exit status. */
static int pump(struct console *con, bool json)
{
    bool have_exit = false, output_ok = true;
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
                    wsc_call_cancel(con->call);
                }
                if (con->background && !con->detached &&
                    pe->event_case == WORKSPACE__V1__PROCESS_EVENT__EVENT_STARTED) {
                    /* Ending the stream of a background process leaves it
                     * running; its id is how to attach to it later. */
                    if (!json)
                        printf("%s\n", pe->started->id);
                    con->detached = true;
                    wsc_call_cancel(con->call);
                }
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
    pthread_mutex_unlock(&con->mu);

    if (con->interrupted)
        return 128 + con->interrupted;
    if (con->detached && !have_exit)
        return WSC_EXIT_OK;
    if (have_exit)
        return exit_code;
    if (wsc_call_error(con->call)->code != GRPC_STATUS_OK)
        return wsc_report(wsc_call_error(con->call));
    fprintf(stderr, "wsctl: the stream ended without an exit record\n");
    return WSC_EXIT_FAIL;
}

static int parse_duration_ms(const char *s, uint64_t *ret_ms)
{
    char *end;
    double v;
    double scale = 1000.0;

    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return -EINVAL;
    if (strcmp(end, "ms") == 0)
        scale = 1.0;
    else if (strcmp(end, "s") == 0 || *end == '\0')
        scale = 1000.0;
    else if (strcmp(end, "m") == 0)
        scale = 60000.0;
    else if (strcmp(end, "h") == 0)
        scale = 3600000.0;
    else
        return -EINVAL;
    *ret_ms = (uint64_t)(v * scale);
    return 0;
}

int wsc_cmd_exec(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"interactive", no_argument, NULL, 'i'},   {"tty", no_argument, NULL, 't'},
        {"timeout", required_argument, NULL, 'T'}, {"tag", required_argument, NULL, 'g'},
        {"cwd", required_argument, NULL, 'C'},     {"env", required_argument, NULL, 'e'},
        {"background", no_argument, NULL, 'b'},    {NULL, 0, NULL, 0},
    };
    Workspace__V1__StartRequest req = WORKSPACE__V1__START_REQUEST__INIT;
    Workspace__V1__StartProcess start = WORKSPACE__V1__START_PROCESS__INIT;
    Workspace__V1__ProcessConfig proc = WORKSPACE__V1__PROCESS_CONFIG__INIT;
    Workspace__V1__PtySize size = WORKSPACE__V1__PTY_SIZE__INIT;
    Workspace__V1__ProcessConfig__EnvEntry env[ENV_MAX];
    Workspace__V1__ProcessConfig__EnvEntry *envp[ENV_MAX];
    struct console con = {.sigfd = -1, .stop_pipe = {-1, -1}};
    struct termios saved;
    bool raw = false, thread_started = false, tty = false;
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
            if (parse_duration_ms(optarg, &proc.timeout_ms) < 0)
                return wsc_usage_error("exec: bad --timeout '%s' (e.g. 30s, 500ms, 2m)", optarg);
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
        return wsc_usage_error("usage: wsctl exec WS [-i] [-t] [--timeout D] [--tag T] -- argv...");
    start.workspace_id = argv[optind++];
    proc.argv = argv + optind;
    proc.n_argv = (size_t)(argc - optind);
    if (tty) {
        con.pty = true;
        con.forward_stdin = true;
        local_winsize(&size.rows, &size.cols);
        proc.pty = &size;
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
    if (con.pty && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0) {
        struct termios t = saved;
        cfmakeraw(&t);
        /* Ctrl-C stays a local SIGINT (it cancels the command); quit and
         * suspend are turned off so they cannot leave a raw terminal
         * behind a stopped or dumped wsctl. */
        t.c_lflag |= ISIG;
        t.c_cc[VQUIT] = _POSIX_VDISABLE;
        t.c_cc[VSUSP] = _POSIX_VDISABLE;
        if (tcsetattr(STDIN_FILENO, TCSADRAIN, &t) == 0)
            raw = true;
    }
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
out_sync:
    pthread_cond_destroy(&con.cv);
    pthread_mutex_destroy(&con.mu);
out:
    if (raw)
        tcsetattr(STDIN_FILENO, TCSADRAIN, &saved);
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

int wsc_cmd_attach(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"offset", required_argument, NULL, 'o'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__AttachRequest req = WORKSPACE__V1__ATTACH_REQUEST__INIT;
    struct wsc_call *call = NULL;
    bool have_exit = false;
    int exit_code = WSC_EXIT_FAIL, opt, r, ret;
    char *end;

    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (opt != 'o')
            return wsc_usage_error("attach: unknown option or missing value");
        errno = 0;
        req.offset = strtoull(optarg, &end, 10);
        if (errno || end == optarg || *end)
            return wsc_usage_error("attach: bad --offset '%s'", optarg);
    }
    if (argc - optind != 2)
        return wsc_usage_error("usage: wsctl attach WS TAG|ID [--offset N]");
    req.workspace_id = argv[optind];
    if (looks_like_id(argv[optind + 1]))
        req.id = argv[optind + 1];
    else
        req.tag = argv[optind + 1];

    r = wsc_call_new(ctx->cl, "/workspace.v1.Exec/Attach", &call);
    if (r < 0)
        return wsc_report_errno("attach", r);
    (void)wsc_call_send(call, &req.base, true);
    for (;;) {
        Workspace__V1__ProcessEvent *ev = NULL;

        r = wsc_call_recv(call, &workspace__v1__process_event__descriptor,
                          (ProtobufCMessage **)&ev);
        if (r <= 0)
            break;
        r = handle_event(ctx->json, ev, &have_exit, &exit_code);
        workspace__v1__process_event__free_unpacked(ev, NULL);
        if (r < 0) {
            wsc_call_cancel(call);
            break;
        }
    }
    if (wsc_call_status(call) < 0 && !have_exit)
        ret = wsc_report(wsc_call_error(call));
    else
        ret = have_exit ? exit_code : WSC_EXIT_OK;
    wsc_call_free(call);
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
