/* The server's clocks, one of each kind, header-only so the static
 * programs that run inside a box (built by a bare gcc) can use them too.
 *
 *   ws_mono_ns/us/ms()   the monotonic clock: every duration, deadline,
 *                        timeout and rate is measured on it, because it
 *                        never jumps when the wall clock is set;
 *   ws_wall_ns/ms()      the wall clock (Unix epoch): only for timestamps
 *                        people read or records keep (mtimes, log lines,
 *                        audit entries), never to measure how long
 *                        something took;
 *   ws_clock_ns(clock)   what those two read through; call it directly
 *                        only for a clock they do not cover;
 *   ws_sleep_ms(ms)      sleeps the whole time even when signals arrive;
 *   ws_abstime_after_ms  the absolute CLOCK_REALTIME time `ms` from now,
 *                        which pthread_cond_timedwait wants for a condition
 *                        variable made with default attributes. A condition
 *                        variable set to CLOCK_MONOTONIC with
 *                        pthread_condattr_setclock takes a deadline built
 *                        from ws_mono_ns instead.
 *
 * A clock_gettime on these clocks cannot fail on Linux, so none of these
 * report errors.
 */
#ifndef WS_BASE_TIME_H
#define WS_BASE_TIME_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

#define WS_NSEC_PER_SEC  1000000000LL
#define WS_NSEC_PER_MSEC 1000000LL
#define WS_NSEC_PER_USEC 1000LL

static inline int64_t ws_clock_ns(clockid_t clock)
{
    struct timespec ts;

    (void)clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * WS_NSEC_PER_SEC + ts.tv_nsec;
}

static inline int64_t ws_mono_ns(void)
{
    return ws_clock_ns(CLOCK_MONOTONIC);
}

static inline int64_t ws_mono_us(void)
{
    return ws_mono_ns() / WS_NSEC_PER_USEC;
}

static inline int64_t ws_mono_ms(void)
{
    return ws_mono_ns() / WS_NSEC_PER_MSEC;
}

static inline int64_t ws_wall_ns(void)
{
    return ws_clock_ns(CLOCK_REALTIME);
}

static inline int64_t ws_wall_ms(void)
{
    return ws_wall_ns() / WS_NSEC_PER_MSEC;
}

/* nanosleep writes the time still left when a signal cuts it short, so
 * going round with that remainder sleeps `ms` in total and no more. */
static inline void ws_sleep_ms(int64_t ms)
{
    struct timespec ts;

    if (ms <= 0)
        return;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * WS_NSEC_PER_MSEC;
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static inline void ws_abstime_after_ms(int64_t ms, struct timespec *ret)
{
    int64_t ns = ws_wall_ns() + (ms > 0 ? ms : 0) * WS_NSEC_PER_MSEC;

    ret->tv_sec = (time_t)(ns / WS_NSEC_PER_SEC);
    ret->tv_nsec = (long)(ns % WS_NSEC_PER_SEC);
}

#endif
