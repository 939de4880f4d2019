/* One epoll loop on its own thread; see pump.h. */
#include "server/events/pump.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct posted {
    ws_pump_fn fn;
    void *arg;
    struct posted *next;
};

struct ws_pump {
    int epfd;
    int evfd;
    pthread_t thread;
    pthread_mutex_t lock; /* posted, stop */
    struct posted *head;
    struct posted **tail;
    bool stop;
    /* The epoll registrations' interest masks change under this lock so
     * two threads toggling in and out of one watch do not lose a bit. */
    pthread_mutex_t mask_lock;
};

/* The eventfd's own marker in epoll data. */
static char wake_marker;

static void run_posted(struct ws_pump *p)
{
    struct posted *list;

    pthread_mutex_lock(&p->lock);
    list = p->head;
    p->head = NULL;
    p->tail = &p->head;
    pthread_mutex_unlock(&p->lock);
    while (list) {
        struct posted *next = list->next;
        list->fn(list->arg);
        free(list);
        list = next;
    }
}

static void *pump_main(void *arg)
{
    struct ws_pump *p = arg;
    struct epoll_event ev[WS_PUMP_BATCH];

    for (;;) {
        int n = epoll_wait(p->epfd, ev, WS_PUMP_BATCH, -1);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == &wake_marker) {
                uint64_t v;
                (void)!read(p->evfd, &v, sizeof(v));
                continue;
            }
            struct ws_pump_watch *w = ev[i].data.ptr;
            uint32_t e = ev[i].events;
            if (e & (EPOLLHUP | EPOLLERR))
                e |= EPOLLIN;
            /* A watch deleted earlier in this batch has added == false;
             * its memory is still valid (users free from the pump thread
             * or through ws_pump_post, which runs after the batch). */
            if (__atomic_load_n(&w->added, __ATOMIC_ACQUIRE))
                w->cb(w->arg, e);
        }
        run_posted(p);
        pthread_mutex_lock(&p->lock);
        bool stop = p->stop && !p->head;
        pthread_mutex_unlock(&p->lock);
        if (stop)
            break;
    }
    run_posted(p);
    return NULL;
}

static void wake(struct ws_pump *p)
{
    uint64_t one = 1;
    (void)!write(p->evfd, &one, sizeof(one));
}

int ws_pump_new(struct ws_pump **ret)
{
    struct ws_pump *p = calloc(1, sizeof(*p));
    int err;

    if (!p)
        return -ENOMEM;
    p->epfd = p->evfd = -1;
    p->tail = &p->head;
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->mask_lock, NULL);
    p->epfd = epoll_create1(EPOLL_CLOEXEC);
    p->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    err = -errno;
    if (p->epfd < 0 || p->evfd < 0)
        goto fail;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &wake_marker};
    if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->evfd, &ev) < 0) {
        err = -errno;
        goto fail;
    }
    err = -pthread_create(&p->thread, NULL, pump_main, p);
    if (err < 0)
        goto fail;
    pthread_setname_np(p->thread, "ws-pump");
    *ret = p;
    return 0;
fail:
    if (p->epfd >= 0)
        close(p->epfd);
    if (p->evfd >= 0)
        close(p->evfd);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->mask_lock);
    free(p);
    return err;
}

void ws_pump_free(struct ws_pump *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_mutex_unlock(&p->lock);
    wake(p);
    pthread_join(p->thread, NULL);
    close(p->epfd);
    close(p->evfd);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->mask_lock);
    free(p);
}

static uint32_t mask_of(const struct ws_pump_watch *w, bool in, bool out)
{
    (void)w;
    return (in ? EPOLLIN : 0) | (out ? EPOLLOUT : 0);
}

int ws_pump_watch_add(struct ws_pump *p, struct ws_pump_watch *w, bool on)
{
    struct epoll_event ev = {.events = mask_of(w, on, false), .data.ptr = w};
    int r = 0;

    if (w->added)
        return -EEXIST;
    pthread_mutex_lock(&p->mask_lock);
    w->on = on;
    w->out = false;
    if (on)
        r = epoll_ctl(p->epfd, EPOLL_CTL_ADD, w->fd, &ev) < 0 ? -errno : 0;
    else if (fcntl(w->fd, F_GETFD) < 0)
        r = -errno;
    if (r == 0) {
        w->armed = on;
        /* Atomic, as the pump thread's read: the fd may already be in
         * epoll, and its first event be looked at meanwhile (and skipped:
         * the watch is level-triggered, the next wait reports it again). */
        __atomic_store_n(&w->added, true, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&p->mask_lock);
    return r;
}

static int update(struct ws_pump *p, struct ws_pump_watch *w, int which, bool on)
{
    int r = 0;

    pthread_mutex_lock(&p->mask_lock);
    if (!w->added) {
        r = -ENOENT;
        goto out;
    }
    bool in = which == 0 ? on : w->on;
    bool out_ = which == 1 ? on : w->out;
    if (in == w->on && out_ == w->out)
        goto out;
    struct epoll_event ev = {.events = mask_of(w, in, out_), .data.ptr = w};
    bool arm = in || out_;
    int op = !arm ? EPOLL_CTL_DEL : w->armed ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if ((arm || w->armed) && epoll_ctl(p->epfd, op, w->fd, &ev) < 0) {
        r = -errno;
        goto out;
    }
    w->armed = arm;
    w->on = in;
    w->out = out_;
out:
    pthread_mutex_unlock(&p->mask_lock);
    return r;
}

int ws_pump_watch_set(struct ws_pump *p, struct ws_pump_watch *w, bool on)
{
    return update(p, w, 0, on);
}

int ws_pump_watch_set_out(struct ws_pump *p, struct ws_pump_watch *w, bool on)
{
    return update(p, w, 1, on);
}

void ws_pump_watch_del(struct ws_pump *p, struct ws_pump_watch *w)
{
    pthread_mutex_lock(&p->mask_lock);
    if (w->added) {
        if (w->armed)
            epoll_ctl(p->epfd, EPOLL_CTL_DEL, w->fd, NULL);
        w->armed = false;
        __atomic_store_n(&w->added, false, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&p->mask_lock);
}

int ws_pump_post(struct ws_pump *p, ws_pump_fn fn, void *arg)
{
    struct posted *e = malloc(sizeof(*e));

    if (!e)
        return -ENOMEM;
    e->fn = fn;
    e->arg = arg;
    e->next = NULL;
    pthread_mutex_lock(&p->lock);
    *p->tail = e;
    p->tail = &e->next;
    pthread_mutex_unlock(&p->lock);
    wake(p);
    return 0;
}

bool ws_pump_on_thread(const struct ws_pump *p)
{
    return pthread_equal(pthread_self(), p->thread);
}
