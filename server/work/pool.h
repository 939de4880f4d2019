/* A bounded worker pool that keeps slow work (tree walks, hashing, regex
 * searches, calls to a container daemon) off the threads that serve RPCs,
 * and keeps one tenant from taking all of it.
 *
 * A pool has named lanes, fixed at creation; each lane has its own threads
 * and queues, so work of one kind never waits behind work of another. In a
 * lane every tenant has a FIFO of its own; a tenant runs at most
 * `per_tenant_running` jobs at once and holds at most `per_tenant_queued`
 * waiting ones. A free thread serves the tenant that was served least
 * recently among those with a job it may start, so a tenant with one job
 * waits at most for the next free thread however many jobs another tenant
 * has queued.
 *
 * A lane of 0 threads is inline: ws_pool_submit runs the job on the
 * caller's thread before returning, with no queue and no per-tenant caps
 * (the behaviour from before the pool, kept as a baseline).
 *
 * Jobs: ws_pool_submit copies the job description. When it returns 0,
 * exactly one of the job's `run` and `skipped` is called, exactly once, on
 * a pool thread or on the caller's own thread before submit returns (inline
 * lanes, and a job whose ctl is already stopped). When it returns an error,
 * neither is ever called. `run` is not called for a job whose ctl was
 * cancelled or whose deadline passed while it was queued, nor for one still
 * queued when the pool shuts down: `skipped` gets the reason instead, so
 * the submitter can finish its call with it. ws_pool_cancel reports a
 * queued job at once; a ctl that stops by itself (its flag set directly,
 * its deadline passing) is noticed when the job reaches the head of its
 * tenant's queue. A started job is never interrupted: it reads its ctl
 * (ws_work_ctl_check) and stops by itself.
 *
 * Ownership: the pool owns its threads and the copies of job descriptions.
 * The submitter owns `arg` and the ctl, both of which must stay valid until
 * `run` or `skipped` has returned.
 *
 * Thread safety: every function may be called from any thread at once,
 * including from inside `run` and `skipped` (which are called with no lock
 * of the pool held), except ws_pool_shutdown and ws_pool_free, which wait
 * for running jobs and so must not be called from a job.
 *
 * Returns: int functions return >= 0 or a negated errno.
 */
#ifndef WS_WORK_POOL_H
#define WS_WORK_POOL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/base/errors.h"
#include "server/base/time.h"

/* Lanes in one pool. */
#define WS_POOL_LANES_MAX 8
/* Threads in one lane. */
#define WS_POOL_THREADS_MAX 256
/* Longest lane name, bytes (also names its threads, "ws-<name>-<n>"). */
#define WS_POOL_NAME_MAX 16
/* Longest tenant key, bytes. */
#define WS_POOL_TENANT_MAX 128
/* per_tenant_queued when a lane's config leaves it 0. */
#define WS_POOL_DEFAULT_TENANT_QUEUED 64
/* Most a lane's nice value may be raised by (the kernel's range ends at
 * 19 anyway). */
#define WS_POOL_NICE_MAX 19

/* How a job learns that its caller no longer wants the result. Owned by the
 * submitter (typically inside the call it serves); the pool and the running
 * job only read it.
 *
 * `cancelled` is written by ws_work_ctl_cancel (or ws_pool_cancel) from any
 * thread and read by ws_work_ctl_check; it is a plain bool accessed with
 * atomic builtins so that the header stays usable from C++, where C11's
 * atomic_bool does not exist. `deadline_mono_ms` is a time on ws_mono_ms's
 * clock, 0 for none; set it before submitting and leave it alone after. */
struct ws_work_ctl {
    bool cancelled;
    int64_t deadline_mono_ms;
};

/* Marks the work as unwanted. A queued job then never runs (see
 * ws_pool_cancel to be told at once); a running job sees it at its next
 * ws_work_ctl_check. */
static inline void ws_work_ctl_cancel(struct ws_work_ctl *ctl)
{
    __atomic_store_n(&ctl->cancelled, true, __ATOMIC_RELEASE);
}

/* Whether the work should stop: 0 to carry on, -ETIMEDOUT once the
 * deadline has passed, else -ECANCELED once cancelled. The deadline wins
 * when both hold, because a call past its deadline is cancelled by gRPC
 * too, and DEADLINE_EXCEEDED is the truer status. NULL never stops. */
static inline int ws_work_ctl_check(const struct ws_work_ctl *ctl)
{
    if (!ctl)
        return 0;
    if (ctl->deadline_mono_ms > 0 && ws_mono_ms() >= ctl->deadline_mono_ms)
        return -ETIMEDOUT;
    if (__atomic_load_n(&ctl->cancelled, __ATOMIC_ACQUIRE))
        return -ECANCELED;
    return 0;
}

/* The ctl of the job whose run is on this thread now (a pool thread's, or
 * the submitter's for an inline lane), NULL outside a run or for a job
 * submitted without one. It lets work far below the job, such as a
 * provider's wait on its daemon, bound itself by the caller's deadline and
 * notice its cancel, without every layer in between passing the ctl on.
 * Valid until that run returns. */
const struct ws_work_ctl *ws_work_ctl_current(void);

struct ws_pool_lane_config {
    /* Names the lane for ws_pool_lane, stats and thread names; 1 to
     * WS_POOL_NAME_MAX bytes, unique in the pool. */
    const char *name;
    /* 0: inline. At most WS_POOL_THREADS_MAX. */
    unsigned threads;
    /* Jobs of one tenant running at once; 0 means `threads`. */
    unsigned per_tenant_running;
    /* Jobs of one tenant waiting at once; 0 means
     * WS_POOL_DEFAULT_TENANT_QUEUED. */
    unsigned per_tenant_queued;
    /* Added to each thread's nice value (0 to WS_POOL_NICE_MAX), so that
     * the RPC threads preempt this lane's CPU-bound work. Best effort: a
     * refusal leaves the thread at its inherited priority. */
    int nice;
};

struct ws_pool_job {
    /* The work. ctl is the job's ctl (may be NULL). */
    void (*run)(const struct ws_work_ctl *ctl, void *arg);
    /* Called instead of run when the job never starts: err is
     * -ECANCELED (ctl cancelled), -ETIMEDOUT (deadline passed) or
     * -ESHUTDOWN (the pool shut down first). */
    void (*skipped)(void *arg, int err);
    void *arg;
    /* Whose work this is, for the caps and the fairness; copied. NULL is
     * the same tenant as "". */
    const char *tenant;
    /* NULL: never cancelled, no deadline. */
    struct ws_work_ctl *ctl;
};

/* What a lane is doing and has done, for the metrics layer. Read in one go
 * under the lane's lock, so at every instant
 *   submitted == queued + running + done + cancelled + expired + dropped. */
struct ws_pool_stats {
    unsigned threads;      /* the lane's threads (0: inline) */
    unsigned threads_idle; /* threads waiting for a job now */
    uint64_t tenants;      /* tenants with a job queued or running now */
    uint64_t queued;       /* jobs waiting now */
    uint64_t running;      /* jobs inside run now */
    uint64_t submitted;    /* jobs accepted by ws_pool_submit */
    uint64_t refused;      /* submits refused for the tenant's queued cap */
    uint64_t done;         /* jobs whose run returned */
    uint64_t cancelled;    /* not run: ctl cancelled while queued */
    uint64_t expired;      /* not run: deadline passed while queued */
    uint64_t dropped;      /* not run: the pool shut down while queued */
    uint64_t wait_ns;      /* time the started jobs spent queued, summed */
};

struct ws_pool;

/* Starts a pool with these lanes (1 to WS_POOL_LANES_MAX; lane i of the
 * pool is lanes[i]) and all their threads. Returns 0, -EINVAL (a bad
 * config), -ENOMEM or pthread_create's error (nothing is left running). */
int ws_pool_new(const struct ws_pool_lane_config *lanes, size_t n_lanes, struct ws_pool **ret);

/* Stops accepting jobs (submit returns -ESHUTDOWN), calls `skipped` with
 * -ESHUTDOWN for every queued job (on this thread), waits for the running
 * jobs to return and joins the threads. A second call does nothing. Not
 * from a job. */
void ws_pool_shutdown(struct ws_pool *p);

/* Shuts down (as above) and frees. Accepts NULL. */
void ws_pool_free(struct ws_pool *p);

/* The index of the lane called `name`, or -ENOENT. */
int ws_pool_lane(const struct ws_pool *p, const char *name);

/* Queues job on lane `lane` (or, inline, runs it now). A job whose ctl
 * has already stopped is not queued: its skipped is called on this thread
 * before submit returns 0. Returns 0, -EINVAL (no such lane, run or
 * skipped NULL, tenant longer than WS_POOL_TENANT_MAX), -ESHUTDOWN,
 * -ENOMEM, or -WS_EQUOTA when the tenant already has per_tenant_queued
 * jobs waiting in the lane (diag: metadata quota=tenant_pending_work and
 * limit). */
int ws_pool_submit(struct ws_pool *p, unsigned lane, const struct ws_pool_job *job,
                   struct ws_diag *d);

/* Cancels ctl (ws_work_ctl_cancel) and takes every job with this ctl that
 * is still queued, in any lane, out of its queue, calling its skipped
 * (with ws_work_ctl_check's reason) on this thread before returning.
 * Returns how many were taken; a job already running is not among them and
 * sees the cancel through its ctl. The caller must hold no lock that those
 * skipped callbacks take. */
int ws_pool_cancel(struct ws_pool *p, struct ws_work_ctl *ctl);

/* Fills *ret with lane `lane`'s figures. Returns 0 or -EINVAL. */
int ws_pool_read_stats(struct ws_pool *p, unsigned lane, struct ws_pool_stats *ret);

#endif
