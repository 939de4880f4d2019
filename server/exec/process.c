/* Commands: spawn, output streams, subscribers, ending; see process.h. */
#include "server/exec/process.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <termios.h>
#include <sys/uio.h>
#include <unistd.h>

#include "server/base/io.h"
#include "server/base/macros.h"
#include "server/base/time.h"
#include "server/events/ring.h"
#include "server/posix/spawn.h"

/* Pipe buffer asked for the output pipes: fewer wakeups when the child
 * writes fast (capped by /proc/sys/fs/pipe-max-size; failure is fine). */
#define PIPE_BUFFER_BYTES (1024 * 1024)

enum phase {
    PHASE_RUNNING = 0,
    /* SIGTERM sent; SIGKILL at phase_deadline. */
    PHASE_TERMINATING,
    /* SIGKILL sent; waiting for the tree to empty and EOF. */
    PHASE_KILLED,
    PHASE_DONE,
};

struct stream {
    struct ws_proc *p;
    enum ws_stream which;
    bool present;
    bool eof;
    bool paused;
    int fd; /* borrowed from the child; -1 once at EOF */
    struct ws_pump_watch w;
    struct ws_ring *ring;
    struct ws_capture *cap;
    uint64_t total;
};

/* Bytes queued for stdin. cb (may be NULL) runs once they are written,
 * or with -EPIPE when they cannot be. */
struct in_chunk {
    struct in_chunk *next;
    size_t len;
    size_t off;
    ws_proc_write_fn cb;
    void *arg;
    uint8_t data[];
};

struct done_cb {
    ws_proc_done_fn fn;
    void *arg;
    struct done_cb *next;
};

struct ws_sub {
    atomic_int refs;
    struct ws_proc *p;
    uint64_t off[WS_STREAM_COUNT];
    uint64_t delivered[WS_STREAM_COUNT];
    /* Bytes handed out by the last DATA event and not yet taken: they
     * stay protected from the pump until ws_sub_taken (or the next
     * ws_sub_next). */
    size_t lent;
    enum ws_stream lent_stream;
    bool started_sent;
    bool exited_sent;
    bool waiting;
    bool closed;
    unsigned rr; /* next stream to serve first */
    void (*notify)(void *arg);
    void (*release)(void *arg);
    void *arg;
    struct ws_sub *next;
};

struct ws_proc {
    atomic_int refs;
    char id[WS_PROC_ID_LEN + 1];
    char tag[WS_PROC_TAG_MAX + 1];
    char **argv;
    char *cwd;
    bool background;
    int64_t started_unix_ms;
    int64_t started_mono_ms;
    uint64_t timeout_ms;
    int grace_ms;
    struct ws_pump *pump;
    struct ws_tree *tree;
    struct ws_child *child;
    pid_t pid;
    struct ws_proc_wrapper wrapper; /* .signal NULL: none */

    pthread_mutex_t lock; /* everything below */
    enum phase phase;
    enum ws_cause kill_cause;
    int64_t timeout_at;     /* monotonic ms; 0: none */
    int64_t phase_deadline; /* TERMINATING: SIGKILL; KILLED: give up */
    bool leader_done;
    enum ws_cause exit_cause; /* the wrapper's word on the cause; NONE: none */
    struct ws_child_exit leader;
    struct stream streams[WS_STREAM_COUNT];
    struct ws_pump_watch pidfd_w;
    struct ws_pump_watch timer_w;
    int timer_fd;
    /* stdin: one queue fed by the Start stream and by SendInput, written
     * by the pump in order. */
    int stdin_fd;  /* borrowed; -1 when closed or absent */
    int pty_in_fd; /* owned duplicate of the PTY master for stdin */
    bool is_pty;
    bool has_stdin; /* started with a stdin pipe or a terminal */
    unsigned pty_rows, pty_cols;
    struct ws_pump_watch stdin_w;
    struct in_chunk *in_head;
    struct in_chunk **in_tail;
    size_t in_queued;   /* bytes queued and not yet written */
    uint64_t in_taken;  /* the stdin offset: bytes accepted so far */
    bool in_cb_pending; /* a chunk with a callback is queued */
    /* No more input is taken (CloseInput, close_stdin): the pipe closes,
     * or the terminal gets its EOF character, once the queue is written. */
    bool in_closed;
    bool in_close_after;
    struct ws_sub *subs;
    /* Subscribers attached (read without the lock: ws_proc_subscribers). */
    atomic_int n_subs;
    struct done_cb *done_cbs;
    /* Every done callback has run: a later one runs at once. Not the same
     * as PHASE_DONE, which comes first: until the callbacks of the spawn
     * (the exec layer's audit record) have run, a late one waits its
     * turn, so no reply can overtake them. */
    bool done_cbs_ran;
    struct ws_proc_result result;
};

const char *ws_cause_name(enum ws_cause c)
{
    static const char *const names[] = {
        [WS_CAUSE_NONE] = "NONE",         [WS_CAUSE_EXITED] = "EXITED",
        [WS_CAUSE_SIGNALED] = "SIGNALED", [WS_CAUSE_TIMEOUT] = "TIMEOUT",
        [WS_CAUSE_OOM] = "OOM",           [WS_CAUSE_CANCELLED] = "CANCELLED",
        [WS_CAUSE_EVICTED] = "EVICTED",   [WS_CAUSE_EXPIRED] = "EXPIRED",
    };
    return (unsigned)c < WS_ELEMENTSOF(names) ? names[c] : "NONE";
}

/* ---- the stdin queue ---- */

/* Takes every queued chunk off p; lock held (or p unshared). The caller
 * drops them with in_drop or in_free once unlocked. */
static struct in_chunk *in_take(struct ws_proc *p)
{
    struct in_chunk *list = p->in_head;

    p->in_head = NULL;
    p->in_tail = &p->in_head;
    p->in_queued = 0;
    p->in_cb_pending = false;
    return list;
}

static void in_free(struct in_chunk *list)
{
    while (list) {
        struct in_chunk *next = list->next;
        free(list);
        list = next;
    }
}

/* Frees chunks, telling each one's callback how it went (0: written,
 * -EPIPE: dropped); unlocked. */
static void in_drop(struct in_chunk *list, int err)
{
    while (list) {
        struct in_chunk *next = list->next;
        if (list->cb)
            list->cb(list->arg, err);
        free(list);
        list = next;
    }
}

/* Queues len bytes (copied) at the stdin offset in_taken; lock held. */
static int in_push(struct ws_proc *p, const void *data, size_t len, ws_proc_write_fn cb, void *arg)
{
    struct in_chunk *c = malloc(sizeof(*c) + len);

    if (!c)
        return -ENOMEM;
    if (len)
        memcpy(c->data, data, len);
    c->len = len;
    c->off = 0;
    c->cb = cb;
    c->arg = arg;
    c->next = NULL;
    *p->in_tail = c;
    p->in_tail = &c->next;
    p->in_queued += len;
    p->in_taken += len;
    if (cb)
        p->in_cb_pending = true;
    ws_pump_watch_set_out(p->pump, &p->stdin_w, true);
    return 0;
}

/* The input is over and everything queued is written: the pipe closes, a
 * terminal gets its EOF character; lock held. */
static void in_finish_close(struct ws_proc *p)
{
    p->in_close_after = false;
    if (p->stdin_fd < 0)
        return;
    if (p->is_pty) {
        char eof = CEOF;
        (void)!write(p->stdin_fd, &eof, 1);
    } else {
        ws_pump_watch_del(p->pump, &p->stdin_w);
        ws_child_close_stdin(p->child);
        p->stdin_fd = -1;
    }
}

/* ---- references ---- */

static void proc_free(struct ws_proc *p)
{
    for (int i = 0; i < WS_STREAM_COUNT; i++) {
        ws_ring_free(p->streams[i].ring);
        ws_capture_free(p->streams[i].cap);
    }
    if (p->timer_fd >= 0)
        close(p->timer_fd);
    if (p->pty_in_fd >= 0)
        close(p->pty_in_fd);
    /* The wrapper first: an agent's connection stops reaching the child
     * before it goes. */
    if (p->wrapper.free)
        p->wrapper.free(p->wrapper.arg);
    ws_child_free(p->child);
    ws_tree_free(p->tree);
    if (p->argv)
        for (char **a = p->argv; *a; a++)
            free(*a);
    free(p->argv);
    free(p->cwd);
    in_free(in_take(p));
    while (p->done_cbs) {
        struct done_cb *d = p->done_cbs;
        p->done_cbs = d->next;
        free(d);
    }
    pthread_mutex_destroy(&p->lock);
    free(p);
}

void ws_proc_ref(struct ws_proc *p)
{
    atomic_fetch_add(&p->refs, 1);
}

static void proc_free_posted(void *arg)
{
    proc_free(arg);
}

/* The last reference is dropped through the pump: an event for one of the
 * command's watches may sit in the batch the pump is dispatching, and the
 * batch must end before the memory goes. If the post fails the command is
 * leaked rather than freed under the pump. */
void ws_proc_unref(struct ws_proc *p)
{
    if (p && atomic_fetch_sub(&p->refs, 1) == 1)
        (void)ws_pump_post(p->pump, proc_free_posted, p);
}

/* ---- timer ---- */

/* Arms the timer for the earliest pending deadline; lock held. */
static void arm_timer(struct ws_proc *p)
{
    int64_t at = 0;

    if (p->phase == PHASE_DONE)
        at = 0;
    else if (p->phase == PHASE_RUNNING)
        at = p->timeout_at;
    else
        at = p->phase_deadline;
    /* While ending, the tree's emptiness is polled. */
    if (p->phase == PHASE_TERMINATING || p->phase == PHASE_KILLED) {
        int64_t tick = ws_mono_ms() + WS_PROC_POLL_MS;
        if (!at || tick < at)
            at = tick;
    }
    struct itimerspec its = {0};
    if (at) {
        int64_t d = at - ws_mono_ms();
        if (d < 1)
            d = 1;
        its.it_value.tv_sec = d / 1000;
        its.it_value.tv_nsec = (d % 1000) * 1000000;
    }
    timerfd_settime(p->timer_fd, 0, &its, NULL);
}

/* ---- ending ---- */

struct notify_list {
    struct ws_sub *subs[64];
    size_t n;
    bool overflow;
};

/* Collects waiting subscribers (with a reference each) to notify once the
 * lock is dropped; lock held. */
static void collect_waiting(struct ws_proc *p, struct notify_list *nl)
{
    for (struct ws_sub *s = p->subs; s; s = s->next) {
        if (!s->waiting || s->closed)
            continue;
        if (nl->n == sizeof(nl->subs) / sizeof(nl->subs[0])) {
            nl->overflow = true;
            break;
        }
        s->waiting = false;
        atomic_fetch_add(&s->refs, 1);
        nl->subs[nl->n++] = s;
    }
}

static void sub_unref(struct ws_sub *s);

static void run_notify(struct ws_proc *p, struct notify_list *nl)
{
    for (;;) {
        for (size_t i = 0; i < nl->n; i++) {
            nl->subs[i]->notify(nl->subs[i]->arg);
            sub_unref(nl->subs[i]);
        }
        if (!nl->overflow)
            return;
        nl->n = 0;
        nl->overflow = false;
        pthread_mutex_lock(&p->lock);
        collect_waiting(p, nl);
        pthread_mutex_unlock(&p->lock);
    }
}

static bool all_eof(const struct ws_proc *p)
{
    for (int i = 0; i < WS_STREAM_COUNT; i++)
        if (p->streams[i].present && !p->streams[i].eof)
            return false;
    return true;
}

static void close_stream(struct ws_proc *p, struct stream *st)
{
    if (st->eof)
        return;
    ws_pump_watch_del(p->pump, &st->w);
    st->eof = true;
    st->fd = -1; /* the child owns the fd; closed with it */
}

static void fill_result(struct ws_proc *p)
{
    struct ws_proc_result *r = &p->result;

    r->cause = p->kill_cause;
    if (p->leader_done) {
        if (!r->cause && p->exit_cause)
            r->cause = p->exit_cause;
        else if (!r->cause)
            r->cause = p->leader.signaled ? WS_CAUSE_SIGNALED : WS_CAUSE_EXITED;
        r->exit_code = p->leader.exit_code;
        r->signal = p->leader.signal;
        r->user_ms = p->leader.user_ms;
        r->sys_ms = p->leader.sys_ms;
        r->max_rss_bytes = p->leader.max_rss_kib * 1024;
    } else if (!r->cause) {
        r->cause = WS_CAUSE_CANCELLED;
    }
    r->wall_ms = (uint64_t)(ws_mono_ms() - p->started_mono_ms);
    for (int i = 0; i < WS_STREAM_COUNT; i++) {
        struct stream *st = &p->streams[i];
        struct ws_proc_stream_stats *ss = &r->streams[i];

        ss->present = st->present;
        ss->total = st->total;
        if (st->cap) {
            struct ws_capture_view v;
            ws_capture_get_view(st->cap, &v);
            ss->head = v.head_len;
            ss->tail = v.tail_len;
            ss->truncated = v.truncated;
        }
    }
}

/* Finishes the command when everything has ended; lock held. Returns true
 * when it just became done (the caller runs the done callbacks). */
static bool check_done(struct ws_proc *p)
{
    if (p->phase == PHASE_DONE || !p->leader_done)
        return false;
    /* Give up on a pipe only when it is not being drained: a paused
     * stream (a slow reader) still has bytes the command wrote. */
    bool paused = false;
    for (int i = 0; i < WS_STREAM_COUNT; i++)
        if (p->streams[i].present && !p->streams[i].eof && p->streams[i].paused)
            paused = true;
    bool settled = p->phase == PHASE_KILLED && !paused && ws_mono_ms() >= p->phase_deadline;
    if (!all_eof(p) && !settled)
        return false;
    if (!settled && ws_tree_count(p->tree) > 0)
        return false;
    for (int i = 0; i < WS_STREAM_COUNT; i++)
        if (p->streams[i].present)
            close_stream(p, &p->streams[i]);
    ws_pump_watch_del(p->pump, &p->timer_w);
    ws_pump_watch_del(p->pump, &p->stdin_w);
    fill_result(p);
    p->phase = PHASE_DONE;
    return true;
}

static void run_done(struct ws_proc *p)
{
    struct done_cb *list;
    struct in_chunk *in_list;
    struct notify_list nl = {.n = 0};
    struct ws_tree *tree;

    pthread_mutex_lock(&p->lock);
    /* The tree is empty: give its cgroup back now rather than when the
     * finished command is forgotten. */
    tree = p->tree;
    p->tree = NULL;
    /* Likewise the child's pipes, pidfd and timer: a finished command kept
     * for replay holds memory only. */
    struct ws_child *child = p->child;
    p->child = NULL;
    p->stdin_fd = -1;
    int timer_fd = p->timer_fd;
    p->timer_fd = -1;
    int pty_in_fd = p->pty_in_fd;
    p->pty_in_fd = -1;
    /* And the wrapper's (a sandbox's pipes and its workspace group
     * reference): no hook runs after the command is done. */
    struct ws_proc_wrapper wrapper = p->wrapper;
    memset(&p->wrapper, 0, sizeof(p->wrapper));
    /* Stdin queued and not written can no longer be. */
    in_list = in_take(p);
    collect_waiting(p, &nl);
    pthread_mutex_unlock(&p->lock);
    in_drop(in_list, -EPIPE);
    /* The done callbacks before the subscribers are told: a client that
     * saw the command end finds it recorded (audit) and out of the
     * running count. One registered while these run (a Run call that
     * came in just now) joins the end of the list. */
    for (;;) {
        pthread_mutex_lock(&p->lock);
        list = p->done_cbs;
        p->done_cbs = NULL;
        if (!list)
            p->done_cbs_ran = true;
        pthread_mutex_unlock(&p->lock);
        if (!list)
            break;
        while (list) {
            struct done_cb *next = list->next;
            list->fn(list->arg, p);
            free(list);
            list = next;
        }
    }
    run_notify(p, &nl);
    /* After the callbacks, off the reply's path. p is still valid: its
     * last reference is dropped through the pump, after this batch. The
     * wrapper before the child, as in proc_free. */
    if (wrapper.free)
        wrapper.free(wrapper.arg);
    ws_child_free(child);
    if (timer_fd >= 0)
        close(timer_fd);
    if (pty_in_fd >= 0)
        close(pty_in_fd);
    ws_tree_free(tree);
}

static void maybe_resume(struct ws_proc *p, struct stream *st);

/* Signals the command's processes; lock held. */
static void signal_tree(struct ws_proc *p, int sig)
{
    if (p->wrapper.signal)
        (void)p->wrapper.signal(p->wrapper.arg, p->tree, p->pid, sig);
    else
        (void)ws_tree_signal(p->tree, sig);
}

/* Starts ending the tree; lock held. release_held: streams held for a
 * first subscriber drain into the ring now (an explicit kill: that
 * subscriber may never come). Internal ends (what the first process left
 * behind, a timeout) keep holding them: the subscriber is on its way, and
 * output read without it would overwrite the start of the ring (the
 * 1 MiB pipe lets a command write everything and exit before that). */
static void begin_kill(struct ws_proc *p, bool graceful, bool release_held)
{
    if (p->phase == PHASE_DONE)
        return;
    if (release_held)
        for (int i = 0; i < WS_STREAM_COUNT; i++)
            if (p->streams[i].present)
                maybe_resume(p, &p->streams[i]);
    if (p->phase == PHASE_KILLED)
        return;
    if (graceful && p->phase == PHASE_RUNNING && p->grace_ms > 0) {
        /* The tree covers the leader's group too (and sends SIGCONT after,
         * so stopped members act on it): one delivery per process. */
        signal_tree(p, SIGTERM);
        p->phase = PHASE_TERMINATING;
        p->phase_deadline = ws_mono_ms() + p->grace_ms;
    } else {
        if (p->wrapper.kill)
            p->wrapper.kill(p->wrapper.arg);
        ws_tree_kill(p->tree);
        ws_child_signal(p->child, SIGKILL);
        p->phase = PHASE_KILLED;
        p->phase_deadline = ws_mono_ms() + WS_PROC_SETTLE_MS;
    }
    arm_timer(p);
}

void ws_proc_kill(struct ws_proc *p, enum ws_cause cause, bool graceful)
{
    pthread_mutex_lock(&p->lock);
    if (p->phase == PHASE_RUNNING && !p->leader_done && !p->kill_cause)
        p->kill_cause = cause;
    if (!graceful || p->phase == PHASE_RUNNING)
        begin_kill(p, graceful, true);
    pthread_mutex_unlock(&p->lock);
}

int ws_proc_signal(struct ws_proc *p, int sig)
{
    int r = 0;

    if (sig <= 0 || sig >= NSIG)
        return -EINVAL;
    pthread_mutex_lock(&p->lock);
    if (p->phase == PHASE_DONE) {
        r = -ESRCH;
    } else if (sig == SIGKILL) {
        if (!p->leader_done && !p->kill_cause)
            p->kill_cause = WS_CAUSE_SIGNALED;
        begin_kill(p, false, true);
    } else {
        signal_tree(p, sig);
    }
    pthread_mutex_unlock(&p->lock);
    return r;
}

/* ---- pump callbacks ---- */

/* Bytes stream st may read now without overwriting what an attached
 * subscriber has not taken; lock held. */
static size_t stream_room(struct ws_proc *p, struct stream *st)
{
    uint64_t end = ws_ring_end(st->ring);
    uint64_t lag = 0;

    for (struct ws_sub *s = p->subs; s; s = s->next) {
        if (s->closed)
            continue;
        if (s->off[st->which] < end && end - s->off[st->which] > lag)
            lag = end - s->off[st->which];
    }
    size_t ring_cap = ws_ring_capacity(st->ring);
    if (lag >= ring_cap)
        return 0;
    size_t room = ring_cap - (size_t)lag;
    return room < WS_PROC_READ_MAX ? room : WS_PROC_READ_MAX;
}

static void on_stream(void *arg, uint32_t events)
{
    struct stream *st = arg;
    struct ws_proc *p = st->p;
    struct notify_list nl = {.n = 0};
    bool done = false;

    (void)events;
    pthread_mutex_lock(&p->lock);
    /* Paused: an event fetched in the same batch as the pause (the watch
     * is out of the epoll set from then on). */
    if (st->eof || st->paused) {
        pthread_mutex_unlock(&p->lock);
        return;
    }
    size_t room = stream_room(p, st);
    if (room == 0) {
        st->paused = true;
        ws_pump_watch_set(p->pump, &st->w, false);
        pthread_mutex_unlock(&p->lock);
        return;
    }
    /* Straight into the ring: room never covers bytes a subscriber has
     * not taken, and without subscribers the oldest bytes are fair game. */
    struct iovec iov[2];
    int niov = (int)ws_ring_reserve(st->ring, room, iov);
    ssize_t n = readv(st->fd, iov, niov);
    if (n > 0) {
        if (st->cap) {
            size_t first = (size_t)n < iov[0].iov_len ? (size_t)n : iov[0].iov_len;
            ws_capture_append(st->cap, iov[0].iov_base, first);
            if ((size_t)n > first)
                ws_capture_append(st->cap, iov[1].iov_base, (size_t)n - first);
        }
        ws_ring_commit(st->ring, (size_t)n);
        st->total += (uint64_t)n;
        /* Still draining what the tree wrote: not the time to give up. */
        if (p->phase == PHASE_KILLED && p->leader_done)
            p->phase_deadline = ws_mono_ms() + WS_PROC_SETTLE_MS;
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        /* EOF; a PTY master reads EIO once the last slave fd closed. */
        close_stream(p, st);
        done = check_done(p);
    }
    collect_waiting(p, &nl);
    pthread_mutex_unlock(&p->lock);
    run_notify(p, &nl);
    if (done)
        run_done(p);
}

static void on_pidfd(void *arg, uint32_t events)
{
    struct ws_proc *p = arg;
    bool done = false;

    (void)events;
    pthread_mutex_lock(&p->lock);
    if (!p->leader_done && ws_child_try_reap(p->child, &p->leader) == 0) {
        p->leader_done = true;
        if (p->wrapper.exited)
            p->wrapper.exited(p->wrapper.arg, &p->leader, &p->exit_cause);
        ws_pump_watch_del(p->pump, &p->pidfd_w);
        /* Nothing outlives its command: what the first process left
         * running is ended too. */
        if (p->phase == PHASE_RUNNING && ws_tree_count(p->tree) > 0)
            begin_kill(p, true, false);
        else if (p->phase == PHASE_RUNNING && !all_eof(p)) {
            /* The tree is gone but a pipe is still open: its write end
             * went to a process outside the tree. Give it the settle
             * time, then stop waiting. */
            p->phase = PHASE_KILLED;
            p->phase_deadline = ws_mono_ms() + p->grace_ms;
            arm_timer(p);
        }
        done = check_done(p);
    }
    pthread_mutex_unlock(&p->lock);
    if (done)
        run_done(p);
}

static void on_timer(void *arg, uint32_t events)
{
    struct ws_proc *p = arg;
    uint64_t ticks;
    bool done = false;

    (void)events;
    (void)!read(p->timer_fd, &ticks, sizeof(ticks));
    pthread_mutex_lock(&p->lock);
    int64_t now = ws_mono_ms();
    switch (p->phase) {
    case PHASE_RUNNING:
        if (p->timeout_at && now >= p->timeout_at) {
            if (!p->leader_done && !p->kill_cause)
                p->kill_cause = WS_CAUSE_TIMEOUT;
            begin_kill(p, true, false);
        }
        break;
    case PHASE_TERMINATING:
        if (now >= p->phase_deadline)
            begin_kill(p, false, false);
        else if (p->leader_done && ws_tree_count(p->tree) == 0 && !all_eof(p)) {
            /* Tree gone, pipe still open elsewhere: settle as above. */
            p->phase = PHASE_KILLED;
            p->phase_deadline = now + p->grace_ms;
        }
        break;
    case PHASE_KILLED:
        /* Keep killing: a process stopped or forking at the first kill. */
        if (ws_tree_count(p->tree) > 0)
            ws_tree_kill(p->tree);
        break;
    default:
        break;
    }
    done = check_done(p);
    if (!done)
        arm_timer(p);
    pthread_mutex_unlock(&p->lock);
    if (done)
        run_done(p);
}

static void on_stdin(void *arg, uint32_t events)
{
    struct ws_proc *p = arg;
    struct in_chunk *written = NULL, **written_tail = &written;
    struct in_chunk *dropped = NULL;

    (void)events;
    pthread_mutex_lock(&p->lock);
    while (p->in_head && p->stdin_fd >= 0) {
        struct in_chunk *c = p->in_head;

        if (c->off < c->len) {
            ssize_t n = WS_RETRY_EINTR(write(p->stdin_fd, c->data + c->off, c->len - c->off));
            if (n > 0) {
                c->off += (size_t)n;
                p->in_queued -= (size_t)n;
                continue;
            }
            if (n < 0 && errno == EAGAIN)
                break;
            /* EPIPE: the command closed its stdin; the rest is dropped. */
            dropped = in_take(p);
            p->in_closed = true;
            if (!p->is_pty) {
                ws_pump_watch_del(p->pump, &p->stdin_w);
                ws_child_close_stdin(p->child);
                p->stdin_fd = -1;
            }
            break;
        }
        p->in_head = c->next;
        if (!p->in_head)
            p->in_tail = &p->in_head;
        if (c->cb)
            p->in_cb_pending = false;
        c->next = NULL;
        *written_tail = c;
        written_tail = &c->next;
    }
    if (!p->in_head && p->stdin_fd >= 0) {
        ws_pump_watch_set_out(p->pump, &p->stdin_w, false);
        if (p->in_close_after)
            in_finish_close(p);
    }
    pthread_mutex_unlock(&p->lock);
    in_drop(written, 0);
    in_drop(dropped, -EPIPE);
}

/* ---- spawn ---- */

static char **dup_argv(const char *const *argv)
{
    size_t n = 0;
    while (argv[n])
        n++;
    char **out = calloc(n + 1, sizeof(*out));
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        out[i] = strdup(argv[i]);
        if (!out[i]) {
            for (size_t j = 0; j < i; j++)
                free(out[j]);
            free(out);
            return NULL;
        }
    }
    return out;
}

static void make_id(char *buf)
{
    uint8_t r[8];
    static const char hex[] = "0123456789abcdef";

    if (getrandom(r, sizeof(r), 0) != sizeof(r)) {
        /* getrandom on Linux does not fail for 8 bytes once seeded; a
         * counter keeps ids unique regardless. */
        static atomic_ulong ctr;
        unsigned long v = atomic_fetch_add(&ctr, 1) ^ (unsigned long)ws_mono_ms();
        memcpy(r, &v, sizeof(r));
    }
    buf[0] = 'p';
    buf[1] = '_';
    for (int i = 0; i < 8; i++) {
        buf[2 + 2 * i] = hex[r[i] >> 4];
        buf[3 + 2 * i] = hex[r[i] & 15];
    }
    buf[WS_PROC_ID_LEN] = 0;
}

static int setup_stream(struct ws_proc *p, enum ws_stream which, int fd, size_t ring_bytes,
                        size_t capture_bytes)
{
    struct stream *st = &p->streams[which];
    int err;

    st->p = p;
    st->which = which;
    st->present = true;
    st->fd = fd;
    err = ws_ring_new(ring_bytes, &st->ring);
    if (err < 0)
        return err;
    if (capture_bytes) {
        size_t head = capture_bytes / 2;
        err = ws_capture_new(head, capture_bytes - head, &st->cap);
        if (err < 0)
            return err;
    }
    if (which != WS_STREAM_PTY)
        (void)fcntl(fd, F_SETPIPE_SZ, PIPE_BUFFER_BYTES);
    st->w = (struct ws_pump_watch){.fd = fd, .cb = on_stream, .arg = st};
    return 0;
}

int ws_proc_spawn(const struct ws_proc_env *env, const struct ws_proc_config *cfg,
                  struct ws_proc **ret)
{
    struct ws_proc *p = calloc(1, sizeof(*p));
    int err = -ENOMEM;

    if (!p) {
        if (cfg->wrapper && cfg->wrapper->free)
            cfg->wrapper->free(cfg->wrapper->arg);
        return -ENOMEM;
    }
    atomic_init(&p->refs, 1);
    pthread_mutex_init(&p->lock, NULL);
    p->timer_fd = -1;
    p->stdin_fd = -1;
    p->pty_in_fd = -1;
    p->in_tail = &p->in_head;
    p->pump = env->pump;
    p->grace_ms = env->grace_ms;
    p->background = cfg->background;
    p->timeout_ms = cfg->timeout_ms;
    make_id(p->id);
    if (cfg->tag)
        snprintf(p->tag, sizeof(p->tag), "%s", cfg->tag);
    p->argv = dup_argv(cfg->argv);
    p->cwd = strdup(cfg->cwd && cfg->cwd[0] ? cfg->cwd : ".");
    if (!p->argv || !p->cwd)
        goto fail;
    p->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (p->timer_fd < 0) {
        err = -errno;
        goto fail;
    }
    const struct ws_proc_wrapper *w = cfg->wrapper;
    /* Started elsewhere: no tree of the server's holds it. */
    bool remote = w && w->start;
    if (!remote) {
        err = ws_tree_new(env->trees, &p->tree);
        if (err < 0)
            goto fail;
    }

    struct ws_spawn_opts so = {
        .argv = w ? w->argv : cfg->argv,
        .keep_fds = w ? w->keep_fds : NULL,
        .n_keep_fds = w ? w->n_keep_fds : 0,
        .pty_noctty = w ? w->pty_noctty : false,
        .envp = cfg->envp,
        .cwd_fd = cfg->cwd_fd,
        .stdin_mode = cfg->stdin_pipe ? WS_SPAWN_STDIN_PIPE : WS_SPAWN_STDIN_NULL,
        .pty = cfg->pty,
        .pty_rows = cfg->pty_rows,
        .pty_cols = cfg->pty_cols,
    };
    if (cfg->run_as)
        so.run_as = *cfg->run_as;
    if (w && w->into_cgroup) {
        so.run_as.into_cgroup = true;
        so.run_as.cgroup_fd = w->cgroup_fd;
    }
    if (remote) {
        struct ws_spawn_opts ro = {
            .stdin_mode = so.stdin_mode,
            .pty = so.pty,
            .pty_rows = so.pty_rows,
            .pty_cols = so.pty_cols,
        };
        int fds[3] = {-1, -1, -1};
        size_t n = 0;
        p->started_mono_ms = ws_mono_ms();
        p->started_unix_ms = ws_wall_ms();
        err = ws_child_detached(&ro, &p->child, fds, &n);
        if (err == 0)
            err = w->start(w->arg, p->child, fds, n);
        for (size_t i = 0; i < n; i++)
            close(fds[i]);
        if (err < 0)
            goto fail;
    } else {
        err = ws_tree_enter(p->tree);
        if (err < 0)
            goto fail;
        if (w && w->enter) {
            err = w->enter(w->arg);
            if (err < 0) {
                (void)ws_tree_leave(p->tree);
                goto fail;
            }
        }
        p->started_mono_ms = ws_mono_ms();
        p->started_unix_ms = ws_wall_ms();
        err = ws_spawn(&so, &p->child);
        if (w && w->leave)
            w->leave(w->arg);
        if (w && w->spawned)
            w->spawned(w->arg);
        int leave = ws_tree_leave(p->tree);
        if (err < 0)
            goto fail;
        if (leave < 0) {
            err = leave;
            goto fail;
        }
    }
    p->pid = ws_child_pid(p->child);
    ws_tree_set_leader(p->tree, p->pid);

    if (cfg->pty) {
        p->is_pty = true;
        p->pty_rows = cfg->pty_rows ? cfg->pty_rows : WS_SPAWN_PTY_ROWS_DEFAULT;
        p->pty_cols = cfg->pty_cols ? cfg->pty_cols : WS_SPAWN_PTY_COLS_DEFAULT;
        err = setup_stream(p, WS_STREAM_PTY, ws_child_pty_fd(p->child), cfg->ring_bytes,
                           cfg->capture_bytes);
        /* epoll registers an fd number once: stdin writes go through a
         * duplicate of the master (same terminal, own registration). */
        p->pty_in_fd = fcntl(ws_child_pty_fd(p->child), F_DUPFD_CLOEXEC, 3);
        if (p->pty_in_fd < 0 && err == 0)
            err = -errno;
        p->stdin_fd = p->pty_in_fd;
    } else {
        err = setup_stream(p, WS_STREAM_STDOUT, ws_child_stdout_fd(p->child), cfg->ring_bytes,
                           cfg->capture_bytes);
        if (err == 0)
            err = setup_stream(p, WS_STREAM_STDERR, ws_child_stderr_fd(p->child), cfg->ring_bytes,
                               cfg->capture_bytes);
        p->stdin_fd = ws_child_stdin_fd(p->child);
    }
    if (err < 0)
        goto fail_kill;
    p->has_stdin = p->stdin_fd >= 0;
    p->pidfd_w = (struct ws_pump_watch){.fd = ws_child_pidfd(p->child), .cb = on_pidfd, .arg = p};
    p->timer_w = (struct ws_pump_watch){.fd = p->timer_fd, .cb = on_timer, .arg = p};
    p->stdin_w = (struct ws_pump_watch){.fd = p->stdin_fd, .cb = on_stdin, .arg = p};
    if (cfg->timeout_ms)
        p->timeout_at = p->started_mono_ms + (int64_t)cfg->timeout_ms;

    /* From here on the pump owns the I/O; registration happens under the
     * lock so no callback sees a half-built command. */
    pthread_mutex_lock(&p->lock);
    arm_timer(p);
    err = ws_pump_watch_add(p->pump, &p->timer_w, true);
    if (err == 0)
        err = ws_pump_watch_add(p->pump, &p->pidfd_w, true);
    for (int i = 0; i < WS_STREAM_COUNT && err == 0; i++)
        if (p->streams[i].present) {
            p->streams[i].paused = cfg->wait_for_subscriber;
            err = ws_pump_watch_add(p->pump, &p->streams[i].w, !cfg->wait_for_subscriber);
        }
    if (err == 0 && p->stdin_fd >= 0)
        err = ws_pump_watch_add(p->pump, &p->stdin_w, false);
    if (err < 0) {
        ws_pump_watch_del(p->pump, &p->timer_w);
        ws_pump_watch_del(p->pump, &p->pidfd_w);
        ws_pump_watch_del(p->pump, &p->stdin_w);
        for (int i = 0; i < WS_STREAM_COUNT; i++)
            ws_pump_watch_del(p->pump, &p->streams[i].w);
        pthread_mutex_unlock(&p->lock);
        goto fail_kill;
    }
    /* Under the lock still: no callback ran yet, and none sees it unset. */
    if (cfg->wrapper)
        p->wrapper = *cfg->wrapper;
    pthread_mutex_unlock(&p->lock);
    *ret = p;
    return 0;

fail_kill:
    ws_tree_kill(p->tree);
    if (cfg->wrapper && cfg->wrapper->kill)
        cfg->wrapper->kill(cfg->wrapper->arg);
fail:
    /* The wrapper first (an agent's connection lets go of the child), then
     * ws_child_free kills and reaps what is left; a tree whose spawn
     * failed is empty. */
    if (cfg->wrapper && cfg->wrapper->free)
        cfg->wrapper->free(cfg->wrapper->arg);
    proc_free(p);
    return err;
}

/* ---- accessors ---- */

const char *ws_proc_id(const struct ws_proc *p)
{
    return p->id;
}

const char *ws_proc_tag(const struct ws_proc *p)
{
    return p->tag;
}

pid_t ws_proc_pid(const struct ws_proc *p)
{
    return p->pid;
}

bool ws_proc_background(const struct ws_proc *p)
{
    return p->background;
}

int64_t ws_proc_started_at_ms(const struct ws_proc *p)
{
    return p->started_unix_ms;
}

const char *ws_proc_cwd(const struct ws_proc *p)
{
    return p->cwd;
}

const char *const *ws_proc_argv(const struct ws_proc *p)
{
    return (const char *const *)p->argv;
}

bool ws_proc_get_result(struct ws_proc *p, struct ws_proc_result *ret)
{
    bool done;

    pthread_mutex_lock(&p->lock);
    done = p->phase == PHASE_DONE;
    if (done && ret)
        *ret = p->result;
    pthread_mutex_unlock(&p->lock);
    return done;
}

int ws_proc_on_done(struct ws_proc *p, ws_proc_done_fn fn, void *arg)
{
    struct done_cb *d = malloc(sizeof(*d));

    if (!d)
        return -ENOMEM;
    d->fn = fn;
    d->arg = arg;
    pthread_mutex_lock(&p->lock);
    if (!p->done_cbs_ran) {
        /* In the order registered: the exec layer's own callback (table
         * bookkeeping, the audit record) is registered at the spawn, so
         * it runs before a Run call's reply goes out, also when the
         * command became done just before this call. */
        struct done_cb **tail = &p->done_cbs;
        while (*tail)
            tail = &(*tail)->next;
        d->next = NULL;
        *tail = d;
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    pthread_mutex_unlock(&p->lock);
    free(d);
    fn(arg, p);
    return 0;
}

int ws_proc_write_stdin(struct ws_proc *p, const void *data, size_t len, ws_proc_write_fn cb,
                        void *arg)
{
    int r;

    if (len > WS_PROC_STDIN_MAX)
        return -E2BIG;
    pthread_mutex_lock(&p->lock);
    if (p->stdin_fd < 0 || p->in_closed)
        r = -EBADF;
    else if (p->in_cb_pending)
        r = -EBUSY;
    else if (p->phase == PHASE_DONE)
        r = -EPIPE;
    else
        r = in_push(p, data, len, cb, arg);
    pthread_mutex_unlock(&p->lock);
    return r;
}

int ws_proc_send_input(struct ws_proc *p, const void *data, size_t len, uint64_t offset,
                       bool append, uint64_t *taken)
{
    int r = 0;

    if (len > WS_PROC_STDIN_MAX)
        return -E2BIG;
    pthread_mutex_lock(&p->lock);
    uint64_t cur = p->in_taken;
    if (append)
        offset = cur;
    if (p->phase == PHASE_DONE) {
        r = -EPIPE;
    } else if (!p->has_stdin) {
        r = -ENODEV;
    } else if (p->stdin_fd < 0 || p->in_closed) {
        r = -EBADF;
    } else if (offset > cur) {
        r = -ERANGE;
    } else if (cur - offset < len) {
        /* What the stdin took already (a retry) is skipped. */
        size_t skip = (size_t)(cur - offset);
        if (p->in_queued + (len - skip) > WS_PROC_STDIN_MAX)
            r = -ENOBUFS;
        else
            r = in_push(p, (const uint8_t *)data + skip, len - skip, NULL, NULL);
    }
    *taken = p->in_taken;
    pthread_mutex_unlock(&p->lock);
    return r;
}

int ws_proc_close_stdin(struct ws_proc *p)
{
    int r = 0;

    pthread_mutex_lock(&p->lock);
    if (!p->has_stdin) {
        r = -EBADF;
    } else if (!p->in_closed && p->stdin_fd >= 0) {
        p->in_closed = true;
        if (p->in_head)
            p->in_close_after = true;
        else
            in_finish_close(p);
    }
    pthread_mutex_unlock(&p->lock);
    return r;
}

void ws_proc_stdin_state(struct ws_proc *p, bool *ret_open, uint64_t *ret_taken)
{
    pthread_mutex_lock(&p->lock);
    *ret_open = p->has_stdin && !p->in_closed && p->stdin_fd >= 0 && p->phase != PHASE_DONE;
    *ret_taken = p->in_taken;
    pthread_mutex_unlock(&p->lock);
}

bool ws_proc_pty_size(struct ws_proc *p, unsigned *ret_rows, unsigned *ret_cols)
{
    pthread_mutex_lock(&p->lock);
    bool pty = p->is_pty;
    if (pty) {
        *ret_rows = p->pty_rows;
        *ret_cols = p->pty_cols;
    }
    pthread_mutex_unlock(&p->lock);
    return pty;
}

int ws_proc_subscribers(struct ws_proc *p)
{
    return atomic_load(&p->n_subs);
}

int ws_proc_resize(struct ws_proc *p, unsigned rows, unsigned cols)
{
    int r;

    pthread_mutex_lock(&p->lock);
    if (!p->is_pty)
        r = -ENOTTY;
    else if (p->phase == PHASE_DONE)
        r = -ESRCH;
    else
        r = ws_child_resize(p->child, rows, cols);
    if (r == 0) {
        p->pty_rows = rows;
        p->pty_cols = cols;
    }
    pthread_mutex_unlock(&p->lock);
    return r;
}

size_t ws_proc_capture(struct ws_proc *p, enum ws_stream s, void *buf, size_t max)
{
    size_t n = 0;

    pthread_mutex_lock(&p->lock);
    struct stream *st = &p->streams[s];
    if (st->present && st->cap) {
        struct ws_capture_view v;
        ws_capture_get_view(st->cap, &v);
        if (v.head_len + v.tail_len <= max) {
            memcpy(buf, v.head, v.head_len);
            ws_capture_tail(st->cap, (uint8_t *)buf + v.head_len);
            n = v.head_len + v.tail_len;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return n;
}

/* ---- subscribers ---- */

static void sub_unref(struct ws_sub *s)
{
    if (atomic_fetch_sub(&s->refs, 1) == 1) {
        struct ws_proc *p = s->p;
        if (s->release)
            s->release(s->arg);
        free(s);
        ws_proc_unref(p);
    }
}

int ws_sub_new(struct ws_proc *p, uint64_t offset, void (*notify)(void *arg),
               void (*release)(void *arg), void *arg, struct ws_sub **ret)
{
    struct ws_sub *s = calloc(1, sizeof(*s));

    if (!s)
        return -ENOMEM;
    atomic_init(&s->refs, 1);
    s->p = p;
    ws_proc_ref(p);
    for (int i = 0; i < WS_STREAM_COUNT; i++)
        s->off[i] = offset;
    s->notify = notify;
    s->release = release;
    s->arg = arg;
    pthread_mutex_lock(&p->lock);
    /* An offset past the end waits for the stream to get there. */
    s->next = p->subs;
    p->subs = s;
    atomic_fetch_add(&p->n_subs, 1);
    /* Streams held for the first subscriber start flowing now (a stream
     * paused for a slow subscriber stays paused: its room is unchanged). */
    for (int i = 0; i < WS_STREAM_COUNT; i++)
        if (p->streams[i].present)
            maybe_resume(p, &p->streams[i]);
    pthread_mutex_unlock(&p->lock);
    *ret = s;
    return 0;
}

struct ws_proc *ws_sub_proc(struct ws_sub *s)
{
    return s->p;
}

/* Resumes a paused stream once a subscriber made room; lock held. */
static void maybe_resume(struct ws_proc *p, struct stream *st)
{
    /* Hysteresis: wait for half the ring (or a full read) to be free, so a
     * fast command is not paused and resumed once per message. */
    size_t want = ws_ring_capacity(st->ring) / 2;
    if (want > WS_PROC_READ_MAX)
        want = WS_PROC_READ_MAX;
    if (st->paused && !st->eof && stream_room(p, st) >= want) {
        st->paused = false;
        ws_pump_watch_set(p->pump, &st->w, true);
        /* The settle time counts from here: while held, the pipe could not
         * be drained, so it has not been waited for. */
        if (p->phase == PHASE_KILLED && p->leader_done)
            p->phase_deadline = ws_mono_ms() + WS_PROC_SETTLE_MS;
    }
}

/* Accounts for the bytes the last DATA event lent; lock held. */
static void take_lent(struct ws_proc *p, struct ws_sub *s)
{
    if (!s->lent)
        return;
    enum ws_stream i = s->lent_stream;
    s->off[i] += s->lent;
    s->delivered[i] += s->lent;
    s->lent = 0;
    maybe_resume(p, &p->streams[i]);
}

void ws_sub_taken(struct ws_sub *s, const struct ws_sub_event *ev)
{
    pthread_mutex_lock(&s->p->lock);
    if (ev->kind == WS_SUB_DATA && s->lent && s->lent_stream == ev->stream &&
        s->off[ev->stream] == ev->offset && s->lent == ev->len)
        take_lent(s->p, s);
    pthread_mutex_unlock(&s->p->lock);
}

void ws_sub_next(struct ws_sub *s, size_t max, struct ws_sub_event *ret)
{
    struct ws_proc *p = s->p;

    memset(ret, 0, sizeof(*ret));
    pthread_mutex_lock(&p->lock);
    take_lent(p, s);
    if (s->closed || s->exited_sent)
        goto none;
    if (!s->started_sent) {
        s->started_sent = true;
        ret->kind = WS_SUB_STARTED;
        goto out;
    }
    for (unsigned k = 0; k < WS_STREAM_COUNT; k++) {
        unsigned i = (s->rr + k) % WS_STREAM_COUNT;
        struct stream *st = &p->streams[i];
        if (!st->present)
            continue;
        uint64_t start = ws_ring_start(st->ring), end = ws_ring_end(st->ring);
        if (s->off[i] < start) {
            ret->kind = WS_SUB_GAP;
            ret->stream = i;
            ret->offset = s->off[i];
            ret->dropped = start - s->off[i];
            s->off[i] = start;
            s->rr = i + 1;
            goto out;
        }
        if (s->off[i] < end) {
            ret->kind = WS_SUB_DATA;
            ret->stream = i;
            ret->offset = s->off[i];
            ret->len = ws_ring_peek(st->ring, s->off[i], max, &ret->data);
            s->lent = ret->len;
            s->lent_stream = i;
            s->rr = i + 1;
            goto out;
        }
    }
    if (p->phase == PHASE_DONE) {
        s->exited_sent = true;
        ret->kind = WS_SUB_EXITED;
        ret->result = p->result;
        memcpy(ret->delivered, s->delivered, sizeof(s->delivered));
        goto out;
    }
none:
    ret->kind = WS_SUB_NONE;
    if (!s->closed && !s->exited_sent)
        s->waiting = true;
out:
    pthread_mutex_unlock(&p->lock);
}

void ws_sub_delivered(struct ws_sub *s, uint64_t ret[WS_STREAM_COUNT])
{
    pthread_mutex_lock(&s->p->lock);
    memcpy(ret, s->delivered, sizeof(s->delivered));
    pthread_mutex_unlock(&s->p->lock);
}

void ws_sub_close(struct ws_sub *s)
{
    if (!s)
        return;
    struct ws_proc *p = s->p;
    pthread_mutex_lock(&p->lock);
    if (!s->closed)
        atomic_fetch_sub(&p->n_subs, 1);
    s->closed = true;
    s->waiting = false;
    for (struct ws_sub **pp = &p->subs; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    for (int i = 0; i < WS_STREAM_COUNT; i++)
        if (p->streams[i].present)
            maybe_resume(p, &p->streams[i]);
    pthread_mutex_unlock(&p->lock);
    sub_unref(s);
}
