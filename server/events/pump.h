/* The pump: one thread running one epoll loop for every command's I/O.
 *
 * Users register file descriptors (child pipes, a PTY master, pidfds,
 * timerfds, and later sockets of container streams) with a callback; the
 * pump calls it on its own thread when the fd is ready. Level-triggered, so
 * a callback that leaves data unread is called again, and a user that
 * stops reading (backpressure) switches the fd's interest off with
 * ws_pump_watch_set() and on again later, from any thread.
 *
 * EPOLLHUP and EPOLLERR are reported as readable so the callback's read
 * sees EOF or the error (redis' ae does the same).
 *
 * Lifetime: a struct ws_pump_watch is owned by its user. ws_pump_watch_del()
 * may be called from any thread; once it returns, the callback is not
 * called again (a dispatch already running on the pump thread may still be
 * finishing when del is called from another thread: users free the watch
 * and what the callback touches only from the pump thread, or through
 * ws_pump_post(), which runs after the current batch of events).
 *
 * Thread safety: everything may be called from any thread, except
 * ws_pump_free (not from the pump thread itself).
 *
 * Returns: int functions return >= 0 or a negated errno.
 */
#ifndef WS_POSIX_PUMP_H
#define WS_POSIX_PUMP_H

#include <stdbool.h>
#include <stdint.h>

/* Events handled per epoll_wait. */
#define WS_PUMP_BATCH 64

struct ws_pump;

typedef void (*ws_pump_cb)(void *arg, uint32_t events);
typedef void (*ws_pump_fn)(void *arg);

struct ws_pump_watch {
    int fd;
    ws_pump_cb cb;
    void *arg;
    /* Internal: registered, read and write interest, and whether the fd
     * is in the epoll set (pump's lock). */
    bool added;
    bool on;
    bool out;
    bool armed;
};

/* Starts the pump thread. Returns 0, -ENOMEM, -EMFILE... */
int ws_pump_new(struct ws_pump **ret);
/* Stops and joins the thread; posted functions not yet run are run first.
 * Accepts NULL. Watches still registered are left to their users. */
void ws_pump_free(struct ws_pump *p);

/* Registers w (fd, cb, arg filled in) with read interest on (`on`) or
 * off. A watch with no interest at all is kept out of the epoll set, so
 * not even a hang-up or an error is reported for it (epoll reports those
 * whatever the mask): a paused pipe whose writer exited stays quiet until
 * interest comes back, and then reports its hang-up at once. Returns 0,
 * -EEXIST, -EBADF... */
int ws_pump_watch_add(struct ws_pump *p, struct ws_pump_watch *w, bool on);
/* Switches read interest on or off. */
int ws_pump_watch_set(struct ws_pump *p, struct ws_pump_watch *w, bool on);
/* Same for write interest (EPOLLOUT instead of EPOLLIN). */
int ws_pump_watch_set_out(struct ws_pump *p, struct ws_pump_watch *w, bool on);
/* Unregisters; the fd stays open (the user closes it). Accepts a watch
 * that was never added. */
void ws_pump_watch_del(struct ws_pump *p, struct ws_pump_watch *w);

/* Runs fn(arg) on the pump thread after the current batch of events.
 * Returns 0 or -ENOMEM (fn is then not called). */
int ws_pump_post(struct ws_pump *p, ws_pump_fn fn, void *arg);

/* Whether the caller is the pump thread. */
bool ws_pump_on_thread(const struct ws_pump *p);

#endif
