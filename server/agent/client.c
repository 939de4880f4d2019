#include "server/agent/client.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/agent/wire.h"
#include "server/base/fd.h"
#include "server/base/io.h"
#include "server/base/time.h"
#include "server/posix/spawn.h"

/* What the agent sends is small (no frame of its carries more than a
 * message): a frame beyond this is a broken agent. */
#define IN_BUF_BYTES (64 * 1024)

enum cmd_state { CMD_NEW, CMD_STARTING, CMD_RUNNING, CMD_DONE };

struct cmd {
    struct ws_agent *a; /* a reference */
    uint32_t stream;
    enum cmd_state state;
    bool started;           /* STARTED came (it may have ended since) */
    int start_err;          /* the agent's FAILED answer to the START */
    struct ws_child *child; /* NULL outside start..free */
    enum ws_cause cause;    /* for the exited hook */
    uint8_t *frame;         /* the START, built at wrap */
    size_t frame_len;
    struct cmd *next;
};

struct ws_agent {
    atomic_int refs;
    struct ws_pump *pump;
    int fd;
    pid_t pid;
    struct ws_pump_watch w;
    uint8_t *in_buf;
    struct ws_wire_in in;

    pthread_mutex_t wlock; /* writes to fd, whole frames at a time */
    pthread_mutex_t lock;  /* everything below */
    pthread_cond_t cond;
    uint32_t next_stream;
    struct cmd *cmds;
    bool dead;
    bool freed; /* the owner let go: no `lost` call */
    /* `lost` is running, on this thread: the owner's free waits for it
     * (unless it frees from inside it). */
    bool in_lost;
    pthread_t lost_thread;
    char why[WS_AGENT_WHY_MAX];
    void (*lost)(void *arg, const char *why);
    void *arg;
};

static void agent_free_now(void *arg)
{
    struct ws_agent *a = arg;

    ws_close_fd(&a->fd);
    free(a->in_buf);
    pthread_cond_destroy(&a->cond);
    pthread_mutex_destroy(&a->lock);
    pthread_mutex_destroy(&a->wlock);
    free(a);
}

/* The last reference frees through the pump: a read event may be in the
 * batch it is dispatching. */
static void agent_unref(struct ws_agent *a)
{
    if (a && atomic_fetch_sub(&a->refs, 1) == 1) {
        if (ws_pump_post(a->pump, agent_free_now, a) < 0)
            agent_free_now(a); /* the watch is gone by now: nothing runs */
    }
}

/* Ends every command still running with cause EVICTED and fails a start
 * waiting; lock held. Returns whether this call made it dead. */
static bool lose_locked(struct ws_agent *a, const char *why)
{
    if (a->dead)
        return false;
    a->dead = true;
    snprintf(a->why, sizeof(a->why), "%s", why);
    for (struct cmd *c = a->cmds; c; c = c->next) {
        if (c->state == CMD_STARTING) {
            c->start_err = ECONNRESET;
            c->state = CMD_DONE;
        } else if (c->state == CMD_RUNNING) {
            struct ws_child_exit e = {.signaled = true, .signal = SIGKILL};
            c->cause = WS_CAUSE_EVICTED;
            c->state = CMD_DONE;
            if (c->child)
                ws_child_detached_exit(c->child, &e);
        }
    }
    pthread_cond_broadcast(&a->cond);
    /* The agent sees the end and kills its box's processes. */
    (void)shutdown(a->fd, SHUT_RDWR);
    return true;
}

/* Loses the agent, and tells the owner (once). */
static void lose(struct ws_agent *a, const char *why)
{
    pthread_mutex_lock(&a->lock);
    bool now = lose_locked(a, why);
    bool tell = now && !a->freed && a->lost;
    if (tell) {
        a->in_lost = true;
        a->lost_thread = pthread_self();
    }
    pthread_mutex_unlock(&a->lock);
    ws_pump_watch_del(a->pump, &a->w);
    if (!tell)
        return;
    a->lost(a->arg, why);
    pthread_mutex_lock(&a->lock);
    a->in_lost = false;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->lock);
}

/* Sends one whole frame, with fds attached to its first byte. 0 or
 * -errno (a send timed out, or the channel broke). */
static int send_frame(struct ws_agent *a, const uint8_t *buf, size_t len, const int *fds,
                      size_t n_fds)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(3 * sizeof(int))];
    } ctl;
    size_t done = 0;
    int err = 0;

    if (n_fds > 3)
        return -EINVAL;
    pthread_mutex_lock(&a->wlock);
    while (done < len) {
        struct iovec iov = {.iov_base = (void *)(buf + done), .iov_len = len - done};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
        if (done == 0 && n_fds) {
            memset(&ctl, 0, sizeof(ctl));
            m.msg_control = ctl.buf;
            m.msg_controllen = CMSG_SPACE(n_fds * sizeof(int));
            struct cmsghdr *h = CMSG_FIRSTHDR(&m);
            h->cmsg_level = SOL_SOCKET;
            h->cmsg_type = SCM_RIGHTS;
            h->cmsg_len = CMSG_LEN(n_fds * sizeof(int));
            memcpy(CMSG_DATA(h), fds, n_fds * sizeof(int));
        }
        ssize_t w = WS_RETRY_EINTR(sendmsg(a->fd, &m, MSG_NOSIGNAL));
        if (w < 0) {
            err = errno == EAGAIN ? -ETIMEDOUT : -errno;
            break;
        }
        done += (size_t)w;
    }
    pthread_mutex_unlock(&a->wlock);
    return err;
}

static struct cmd *find(struct ws_agent *a, uint32_t stream)
{
    for (struct cmd *c = a->cmds; c; c = c->next)
        if (c->stream == stream)
            return c;
    return NULL;
}

/* A number field of f, or def when absent; -EPROTO when malformed. */
static int field_u64(const struct ws_wire_frame *f, uint16_t tag, uint64_t def, uint64_t *ret)
{
    size_t pos = 0;
    struct ws_wire_field fl;
    int r;

    *ret = def;
    while ((r = ws_wire_next_field(f, &pos, &fl)) > 0)
        if (fl.tag == tag && ws_wire_u64(&fl, ret) < 0)
            return -EPROTO;
    return r;
}

int ws_agent_parse_exit(const uint8_t *payload, size_t len, struct ws_agent_exit *ret)
{
    uint64_t status, code, signo, core, oom, user, sys, rss;

    if (len > WS_WIRE_PAYLOAD_MAX)
        return -EPROTO;
    const struct ws_wire_frame f = {
        .type = WS_WIRE_EXITED,
        .len = (uint32_t)len,
        .payload = payload,
    };
    if (ws_wire_check(&f) < 0 || field_u64(&f, WS_WIRE_T_STATUS, 2, &status) < 0 ||
        field_u64(&f, WS_WIRE_T_CODE, 0, &code) < 0 ||
        field_u64(&f, WS_WIRE_T_SIGNO, 0, &signo) < 0 ||
        field_u64(&f, WS_WIRE_T_CORE, 0, &core) < 0 || field_u64(&f, WS_WIRE_T_OOM, 0, &oom) < 0 ||
        field_u64(&f, WS_WIRE_T_USER_MS, 0, &user) < 0 ||
        field_u64(&f, WS_WIRE_T_SYS_MS, 0, &sys) < 0 ||
        field_u64(&f, WS_WIRE_T_MAXRSS_KIB, 0, &rss) < 0 || status > 1 || code > 255 ||
        (status == 1 && (signo == 0 || signo >= NSIG)))
        return -EPROTO;
    bool signaled = status == 1;
    *ret = (struct ws_agent_exit){
        .exit =
            {
                .signaled = signaled,
                .exit_code = signaled ? 0 : (int)code,
                .signal = signaled ? (int)signo : 0,
                .core_dumped = core != 0,
                .user_ms = user,
                .sys_ms = sys,
                .max_rss_kib = rss,
            },
        .oom_killed = oom && signaled && signo == SIGKILL,
    };
    return 0;
}

static void field_message(const struct ws_wire_frame *f, char *buf, size_t size)
{
    size_t pos = 0;
    struct ws_wire_field fl;

    buf[0] = '\0';
    while (ws_wire_next_field(f, &pos, &fl) > 0)
        if (fl.tag == WS_WIRE_T_MESSAGE) {
            /* Printable ASCII only: it goes into logs and statuses. */
            size_t n = 0;
            for (uint32_t i = 0; i < fl.len && n + 1 < size; i++)
                buf[n++] = fl.data[i] >= 0x20 && fl.data[i] < 0x7f ? (char)fl.data[i] : '?';
            buf[n] = '\0';
        }
}

/* One frame from the agent; lock held. NULL, or what is wrong with it. */
static const char *take_frame(struct ws_agent *a, const struct ws_wire_frame *f, char *why,
                              size_t why_size)
{
    if (ws_wire_check(f) < 0)
        return "a field runs past its frame";
    if (f->type == WS_WIRE_FAILED && f->stream == 0) {
        char msg[160];
        field_message(f, msg, sizeof(msg));
        snprintf(why, why_size, "the agent gave up: %s", msg[0] ? msg : "(no reason)");
        return why;
    }
    struct cmd *c = f->stream ? find(a, f->stream) : NULL;
    switch (f->type) {
    case WS_WIRE_STARTED: {
        uint64_t pid;
        if (!c || c->state != CMD_STARTING)
            return "a STARTED for a stream that is not starting";
        if (field_u64(f, WS_WIRE_T_PID, 0, &pid) < 0 || pid == 0 || pid > INT32_MAX)
            return "a STARTED without a pid";
        c->state = CMD_RUNNING;
        c->started = true;
        if (c->child)
            ws_child_detached_started(c->child, (pid_t)pid);
        pthread_cond_broadcast(&a->cond);
        return NULL;
    }
    case WS_WIRE_EXITED: {
        struct ws_agent_exit x;
        if (!c || c->state != CMD_RUNNING)
            return "an EXITED for a stream that is not running";
        if (ws_agent_parse_exit(f->payload, f->len, &x) < 0)
            return "an EXITED without a valid status";
        c->cause = x.oom_killed ? WS_CAUSE_OOM : WS_CAUSE_NONE;
        c->state = CMD_DONE;
        if (c->child)
            ws_child_detached_exit(c->child, &x.exit);
        return NULL;
    }
    case WS_WIRE_FAILED: {
        uint64_t err;
        if (!c || (c->state != CMD_STARTING && c->state != CMD_RUNNING))
            return "a FAILED for a stream that is not in use";
        if (field_u64(f, WS_WIRE_T_ERRNO, 0, &err) < 0)
            return "a FAILED with a malformed errno";
        if (c->state == CMD_STARTING) {
            c->start_err = err > 0 && err < 4096 ? (int)err : EIO;
            c->state = CMD_DONE;
            pthread_cond_broadcast(&a->cond);
            return NULL;
        }
        /* Its reaper died without a record: the agent killed what it
         * left; the command's own fate is unknown. */
        struct ws_child_exit e = {.signaled = true, .signal = SIGKILL};
        c->state = CMD_DONE;
        if (c->child)
            ws_child_detached_exit(c->child, &e);
        return NULL;
    }
    default:
        return "a frame the agent may not send now";
    }
}

static void on_readable(void *arg, uint32_t events)
{
    struct ws_agent *a = arg;
    char why[WS_AGENT_WHY_MAX];
    const char *bad = NULL;

    (void)events;
    size_t room;
    uint8_t *at = ws_wire_in_space(&a->in, &room);
    if (room == 0) {
        lose(a, "the agent sent a frame longer than it may");
        return;
    }
    ssize_t n = WS_RETRY_EINTR(recv(a->fd, at, room, MSG_DONTWAIT));
    if (n < 0 && errno == EAGAIN)
        return;
    if (n <= 0) {
        snprintf(why, sizeof(why), "the agent's channel %s",
                 n == 0 ? "ended (the agent exited or was killed)" : "failed");
        lose(a, why);
        return;
    }
    ws_wire_in_added(&a->in, (size_t)n);
    pthread_mutex_lock(&a->lock);
    struct ws_wire_frame f;
    int r;
    while (!bad && (r = ws_wire_next(&a->in, &f)) > 0)
        bad = take_frame(a, &f, why, sizeof(why));
    if (!bad && r < 0)
        bad = r == -EMSGSIZE ? "a frame longer than the protocol allows"
                             : "a frame header of another version, type or flags";
    pthread_mutex_unlock(&a->lock);
    if (bad) {
        /* Its own reason (FAILED on stream 0) as it is; a violation's, said
         * to be one (those are short constants). */
        char msg[WS_AGENT_WHY_MAX + 32];
        if (bad == why)
            snprintf(msg, sizeof(msg), "%s", why);
        else
            snprintf(msg, sizeof(msg), "the agent broke the protocol: %.*s",
                     (int)(WS_AGENT_WHY_MAX - 32), bad);
        lose(a, msg);
    }
}

/* Reads the agent's HELLO, blocking up to the deadline. */
static int read_hello(struct ws_agent *a, const char *secret, char *why, size_t why_size)
{
    int64_t deadline = ws_mono_ms() + WS_AGENT_HELLO_MS;
    struct ws_wire_frame f;
    int r;

    while ((r = ws_wire_next(&a->in, &f)) == 0) {
        int64_t left = deadline - ws_mono_ms();
        struct pollfd p = {.fd = a->fd, .events = POLLIN};
        if (left <= 0 || WS_RETRY_EINTR(poll(&p, 1, (int)left)) <= 0) {
            snprintf(why, why_size, "the agent did not say HELLO within %d ms", WS_AGENT_HELLO_MS);
            return -ETIMEDOUT;
        }
        size_t room;
        uint8_t *at = ws_wire_in_space(&a->in, &room);
        ssize_t n = WS_RETRY_EINTR(recv(a->fd, at, room, MSG_DONTWAIT));
        if (n < 0 && errno == EAGAIN)
            continue;
        if (n <= 0) {
            snprintf(why, why_size, "the agent's channel ended before its HELLO");
            return -ECONNRESET;
        }
        ws_wire_in_added(&a->in, (size_t)n);
    }
    uint64_t version, pid;
    if (r < 0 || f.type != WS_WIRE_HELLO || f.stream != 0 || ws_wire_check(&f) < 0 ||
        field_u64(&f, WS_WIRE_T_VERSION, 0, &version) < 0 || version != WS_WIRE_VERSION ||
        field_u64(&f, WS_WIRE_T_PID, 0, &pid) < 0 || pid == 0 || pid > INT32_MAX) {
        snprintf(why, why_size, "the agent's first frame is not a HELLO of version %d",
                 WS_WIRE_VERSION);
        return -EPROTO;
    }
    a->pid = (pid_t)pid;
    /* The secret, compared in constant time. */
    char got[WS_WIRE_SECRET_HEX + 1] = "";
    size_t pos = 0;
    struct ws_wire_field fl;
    while (ws_wire_next_field(&f, &pos, &fl) > 0)
        if (fl.tag == WS_WIRE_T_SECRET && fl.len == WS_WIRE_SECRET_HEX)
            memcpy(got, fl.data, WS_WIRE_SECRET_HEX);
    if (secret) {
        unsigned char diff = strlen(secret) != WS_WIRE_SECRET_HEX;
        for (size_t i = 0; i < WS_WIRE_SECRET_HEX && !diff; i++)
            diff |= (unsigned char)(got[i] ^ secret[i]);
        if (diff || !got[0]) {
            snprintf(why, why_size, "the peer did not present the agent's secret");
            return -EPERM;
        }
    }
    /* Frames after the HELLO stay in the buffer for the pump. */
    return 0;
}

int ws_agent_new(const struct ws_agent_config *cfg, struct ws_agent **ret, char *why,
                 size_t why_size)
{
    struct ws_agent *a = calloc(1, sizeof(*a));
    int err;

    if (!a) {
        close(cfg->fd);
        snprintf(why, why_size, "out of memory");
        return -ENOMEM;
    }
    atomic_init(&a->refs, 1);
    a->pump = cfg->pump;
    a->fd = cfg->fd;
    a->lost = cfg->lost;
    a->arg = cfg->arg;
    a->next_stream = 1;
    pthread_mutex_init(&a->lock, NULL);
    pthread_mutex_init(&a->wlock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->cond, &ca);
    pthread_condattr_destroy(&ca);
    a->in_buf = malloc(IN_BUF_BYTES);
    if (!a->in_buf) {
        agent_free_now(a);
        snprintf(why, why_size, "out of memory");
        return -ENOMEM;
    }
    ws_wire_in_init(&a->in, a->in_buf, IN_BUF_BYTES);
    struct timeval tv = {.tv_sec = WS_AGENT_SEND_MS / 1000,
                         .tv_usec = (WS_AGENT_SEND_MS % 1000) * 1000};
    (void)setsockopt(a->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    err = read_hello(a, cfg->secret, why, why_size);
    if (err == 0) {
        uint8_t buf[64];
        struct ws_wire_out o;
        ws_wire_begin(&o, buf, sizeof(buf), WS_WIRE_HELLO, 0);
        ws_wire_put_u64(&o, WS_WIRE_T_VERSION, WS_WIRE_VERSION);
        long n = ws_wire_end(&o);
        err = n < 0 ? (int)n : send_frame(a, buf, (size_t)n, NULL, 0);
        if (err < 0)
            snprintf(why, why_size, "cannot answer the agent's HELLO: %s", strerror(-err));
    }
    if (err == 0) {
        a->w = (struct ws_pump_watch){.fd = a->fd, .cb = on_readable, .arg = a};
        err = ws_pump_watch_add(a->pump, &a->w, true);
        if (err < 0)
            snprintf(why, why_size, "cannot watch the agent's channel: %s", strerror(-err));
    }
    if (err < 0) {
        agent_free_now(a);
        return err;
    }
    *ret = a;
    return 0;
}

void ws_agent_free(struct ws_agent *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    a->freed = true;
    (void)lose_locked(a, "the workspace let go of its agent");
    /* Once this returns the owner may free what `lost` touches. */
    while (a->in_lost && !pthread_equal(a->lost_thread, pthread_self()))
        pthread_cond_wait(&a->cond, &a->lock);
    pthread_mutex_unlock(&a->lock);
    ws_pump_watch_del(a->pump, &a->w);
    agent_unref(a);
}

pid_t ws_agent_pid(const struct ws_agent *a)
{
    return a->pid;
}

bool ws_agent_lost(struct ws_agent *a, char *why, size_t size)
{
    pthread_mutex_lock(&a->lock);
    bool dead = a->dead;
    if (dead && why)
        snprintf(why, size, "%s", a->why);
    pthread_mutex_unlock(&a->lock);
    return dead;
}

size_t ws_agent_running(struct ws_agent *a)
{
    size_t n = 0;

    pthread_mutex_lock(&a->lock);
    for (struct cmd *c = a->cmds; c; c = c->next)
        if (c->state == CMD_STARTING || c->state == CMD_RUNNING)
            n++;
    pthread_mutex_unlock(&a->lock);
    return n;
}

/* ---- one command's hooks ---- */

static int hook_start(void *arg, struct ws_child *child, const int *fds, size_t n)
{
    struct cmd *c = arg;
    struct ws_agent *a = c->a;

    if (ws_pump_on_thread(a->pump))
        return -EDEADLK;
    pthread_mutex_lock(&a->lock);
    if (a->dead) {
        pthread_mutex_unlock(&a->lock);
        return -ECONNRESET;
    }
    c->child = child;
    c->state = CMD_STARTING;
    pthread_mutex_unlock(&a->lock);

    int err = send_frame(a, c->frame, c->frame_len, fds, n);
    /* The frame holds the command's environment, secrets among it. */
    explicit_bzero(c->frame, c->frame_len);
    free(c->frame);
    c->frame = NULL;
    if (err < 0) {
        char why[WS_AGENT_WHY_MAX];
        snprintf(why, sizeof(why), "cannot send the agent a command: %s", strerror(-err));
        lose(a, why);
        return -ECONNRESET;
    }
    /* The condition variable runs on CLOCK_MONOTONIC (ws_agent_new). */
    int64_t until_ns = ws_mono_ns() + (int64_t)WS_AGENT_START_MS * WS_NSEC_PER_MSEC;
    struct timespec until = {.tv_sec = until_ns / WS_NSEC_PER_SEC,
                             .tv_nsec = until_ns % WS_NSEC_PER_SEC};
    pthread_mutex_lock(&a->lock);
    int w = 0;
    while (c->state == CMD_STARTING && w != ETIMEDOUT)
        w = pthread_cond_timedwait(&a->cond, &a->lock, &until);
    bool timed_out = c->state == CMD_STARTING;
    /* A command may have ended already (STARTED and EXITED in one read):
     * it started all the same, and its exit is in the child. */
    err = c->started ? 0 : -(c->start_err ? c->start_err : ECONNRESET);
    pthread_mutex_unlock(&a->lock);
    if (timed_out) {
        char why[WS_AGENT_WHY_MAX];
        snprintf(why, sizeof(why), "the agent did not start a command within %d ms",
                 WS_AGENT_START_MS);
        lose(a, why);
        return -ETIMEDOUT;
    }
    return err;
}

static void send_signal(struct cmd *c, int sig)
{
    uint8_t buf[64];
    struct ws_wire_out o;

    pthread_mutex_lock(&c->a->lock);
    bool live = !c->a->dead && c->state == CMD_RUNNING;
    pthread_mutex_unlock(&c->a->lock);
    if (!live)
        return;
    ws_wire_begin(&o, buf, sizeof(buf), WS_WIRE_SIGNAL, c->stream);
    ws_wire_put_u64(&o, WS_WIRE_T_SIGNO, (uint64_t)sig);
    long n = ws_wire_end(&o);
    if (n > 0 && send_frame(c->a, buf, (size_t)n, NULL, 0) < 0)
        lose(c->a, "cannot send the agent a signal");
}

static int hook_signal(void *arg, struct ws_tree *tree, pid_t leader, int sig)
{
    (void)tree;
    (void)leader;
    send_signal(arg, sig);
    return 0;
}

static void hook_kill(void *arg)
{
    send_signal(arg, SIGKILL);
}

static void hook_exited(void *arg, struct ws_child_exit *e, enum ws_cause *ret_cause)
{
    struct cmd *c = arg;

    (void)e;
    pthread_mutex_lock(&c->a->lock);
    if (c->cause)
        *ret_cause = c->cause;
    pthread_mutex_unlock(&c->a->lock);
}

static void hook_free(void *arg)
{
    struct cmd *c = arg;
    struct ws_agent *a = c->a;

    pthread_mutex_lock(&a->lock);
    for (struct cmd **pp = &a->cmds; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    c->child = NULL;
    pthread_mutex_unlock(&a->lock);
    if (c->frame)
        explicit_bzero(c->frame, c->frame_len);
    free(c->frame);
    free(c);
    agent_unref(a);
}

/* Bytes of one string field, or 0 when it cannot be one. */
static size_t str_field(const char *s)
{
    size_t n = strlen(s);
    return n == 0 || n > WS_WIRE_STRING_MAX ? 0 : WS_WIRE_FIELD_HEADER + n;
}

int ws_agent_wrap(struct ws_agent *a, const struct ws_agent_command *c, struct ws_proc_wrapper *ret)
{
    size_t len = WS_WIRE_HEADER + 7 * (WS_WIRE_FIELD_HEADER + 8);

    for (const char *const *p = c->argv; *p; p++) {
        size_t f = str_field(*p);
        if (!f)
            return -E2BIG;
        len += f;
    }
    for (const char *const *p = c->envp; *p; p++) {
        size_t f = str_field(*p);
        if (!f)
            return -E2BIG;
        len += f;
    }
    if (!str_field(c->cwd) || !c->argv[0])
        return -E2BIG;
    len += str_field(c->cwd);
    if (len > WS_WIRE_FRAME_MAX)
        return -E2BIG;

    struct cmd *cmd = calloc(1, sizeof(*cmd));
    uint8_t *frame = malloc(len);
    if (!cmd || !frame) {
        free(cmd);
        free(frame);
        return -ENOMEM;
    }
    pthread_mutex_lock(&a->lock);
    if (a->dead) {
        pthread_mutex_unlock(&a->lock);
        free(cmd);
        free(frame);
        return -ECONNRESET;
    }
    cmd->stream = a->next_stream++;
    if (a->next_stream == 0)
        a->next_stream = 1;
    cmd->a = a;
    atomic_fetch_add(&a->refs, 1);
    cmd->next = a->cmds;
    a->cmds = cmd;
    pthread_mutex_unlock(&a->lock);

    struct ws_wire_out o;
    ws_wire_begin(&o, frame, len, WS_WIRE_START, cmd->stream);
    for (const char *const *p = c->argv; *p; p++)
        ws_wire_put_str(&o, WS_WIRE_T_ARGV, *p);
    for (const char *const *p = c->envp; *p; p++)
        ws_wire_put_str(&o, WS_WIRE_T_ENV, *p);
    ws_wire_put_str(&o, WS_WIRE_T_CWD, c->cwd);
    ws_wire_put_u64(&o, WS_WIRE_T_TIMEOUT_MS, c->timeout_ms);
    if (c->pty)
        ws_wire_put_u64(&o, WS_WIRE_T_PTY, 1);
    if (c->identity) {
        ws_wire_put_u64(&o, WS_WIRE_T_UID, c->uid);
        ws_wire_put_u64(&o, WS_WIRE_T_GID, c->gid);
    }
    if (c->nproc)
        ws_wire_put_u64(&o, WS_WIRE_T_NPROC, c->nproc);
    long n = ws_wire_end(&o);
    cmd->frame = frame;
    cmd->frame_len = n > 0 ? (size_t)n : 0;
    *ret = (struct ws_proc_wrapper){
        .start = hook_start,
        .signal = hook_signal,
        .kill = hook_kill,
        .exited = hook_exited,
        .free = hook_free,
        .arg = cmd,
    };
    if (n < 0) {
        explicit_bzero(frame, len);
        hook_free(cmd);
        return -E2BIG;
    }
    return 0;
}
