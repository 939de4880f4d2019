/* The worker pool; see pool.h.
 *
 * Locks: each lane has one mutex for all of its state (tenants, queues,
 * counters); no function holds two lane locks at once, and none calls a
 * job's run or skipped with a lock held. shutdown_lock only orders
 * ws_pool_shutdown callers and is taken before any lane lock.
 *
 * Scheduling: a lane keeps the tenants that have queued jobs on its
 * `active` list, ordered by when each last started a job (a counter, not a
 * clock), least recent first. A thread looking for work takes the first
 * job of the first tenant on that list that is under its running cap, and
 * moves that tenant to the end. A tenant whose queue ran empty while a job
 * of its own still runs comes back at its place in that order, so one that
 * keeps submitting a job at a time cannot overtake one that waits; a
 * tenant with nothing queued or running is forgotten and comes back first,
 * like a newcomer, ahead of tenants that have been served all along.
 *
 * Wake-ups: a job becomes startable only when it is submitted (submit
 * signals one idle thread) or when a job of its tenant returns (the thread
 * that ran it looks for work again at once), so no thread ever polls.
 */
#include "server/work/pool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

struct job {
    struct ws_pool_job job;
    struct tenant *tenant; /* NULL once out of its tenant's queue */
    int64_t queued_ns;
    int err; /* why skipped is called, once the job is taken to skip */
    struct job *next;
};

struct tenant {
    char key[WS_POOL_TENANT_MAX + 1];
    unsigned running;
    unsigned queued;
    /* The lane's serve counter when this tenant last started a job. */
    uint64_t served;
    struct job *head; /* FIFO of queued jobs */
    struct job *tail;
    struct tenant *next; /* every tenant with queued or running jobs */
    /* The active list: tenants with queued jobs, by `served`. */
    bool active;
    struct tenant *prev_active;
    struct tenant *next_active;
};

struct lane {
    char name[WS_POOL_NAME_MAX + 1];
    unsigned per_tenant_running;
    unsigned per_tenant_queued;
    int nice;
    pthread_t *threads;
    unsigned n_started;

    pthread_mutex_t lock;
    pthread_cond_t wake;    /* a job was queued, or stopping was set */
    pthread_cond_t drained; /* stopping and running reached 0 */
    bool stopping;
    uint64_t serve_seq;
    struct tenant *tenants;
    struct tenant *active_head;
    struct tenant *active_tail;
    struct ws_pool_stats stats;
};

struct ws_pool {
    pthread_mutex_t shutdown_lock;
    bool shut_down;
    size_t n_lanes;
    struct lane lanes[WS_POOL_LANES_MAX];
};

/* The running job's ctl on each thread (ws_work_ctl_current). */
static _Thread_local const struct ws_work_ctl *current_ctl;

const struct ws_work_ctl *ws_work_ctl_current(void)
{
    return current_ctl;
}

/* Runs job with its ctl as the thread's current one; an inline job keeps
 * the ctl of a job it runs inside, when the submitter is itself one, for
 * after it returns. */
static void run_job(const struct ws_pool_job *job)
{
    const struct ws_work_ctl *outer = current_ctl;

    current_ctl = job->ctl;
    job->run(job->ctl, job->arg);
    current_ctl = outer;
}

static struct tenant *tenant_find(struct lane *l, const char *key)
{
    for (struct tenant *t = l->tenants; t; t = t->next)
        if (strcmp(t->key, key) == 0)
            return t;
    return NULL;
}

/* The tenant's record, made when it has none (lane lock held). */
static struct tenant *tenant_get(struct lane *l, const char *key)
{
    struct tenant *t = tenant_find(l, key);

    if (t)
        return t;
    t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    snprintf(t->key, sizeof(t->key), "%s", key);
    t->next = l->tenants;
    l->tenants = t;
    l->stats.tenants++;
    return t;
}

/* Forgets a tenant with nothing queued or running: the list of tenants
 * stays as long as the number of tenants with work, whoever has ever
 * submitted (lane lock held). */
static void tenant_put(struct lane *l, struct tenant *t)
{
    if (t->running || t->queued)
        return;
    for (struct tenant **pp = &l->tenants; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    l->stats.tenants--;
    free(t);
}

static void active_remove(struct lane *l, struct tenant *t)
{
    if (!t->active)
        return;
    if (t->prev_active)
        t->prev_active->next_active = t->next_active;
    else
        l->active_head = t->next_active;
    if (t->next_active)
        t->next_active->prev_active = t->prev_active;
    else
        l->active_tail = t->prev_active;
    t->prev_active = t->next_active = NULL;
    t->active = false;
}

/* Puts t on the active list at its place by `served`, behind the tenants
 * served as long ago or longer (lane lock held). */
static void active_insert(struct lane *l, struct tenant *t)
{
    struct tenant *after = l->active_tail;

    while (after && after->served > t->served)
        after = after->prev_active;
    t->prev_active = after;
    t->next_active = after ? after->next_active : l->active_head;
    if (t->next_active)
        t->next_active->prev_active = t;
    else
        l->active_tail = t;
    if (after)
        after->next_active = t;
    else
        l->active_head = t;
    t->active = true;
}

static void queue_push(struct lane *l, struct tenant *t, struct job *j)
{
    j->tenant = t;
    j->next = NULL;
    if (t->tail)
        t->tail->next = j;
    else
        t->head = j;
    t->tail = j;
    t->queued++;
    l->stats.queued++;
    if (!t->active)
        active_insert(l, t);
}

/* Takes j, which follows prev (NULL: j is the head), out of t's queue;
 * t leaves the active list when its queue empties (lane lock held). */
static void queue_unlink(struct lane *l, struct tenant *t, struct job *prev, struct job *j)
{
    if (prev)
        prev->next = j->next;
    else
        t->head = j->next;
    if (t->tail == j)
        t->tail = prev;
    j->next = NULL;
    j->tenant = NULL;
    t->queued--;
    l->stats.queued--;
    if (!t->queued)
        active_remove(l, t);
}

/* Counts a job that left its queue without running because of `err` and
 * puts it on *list, for finish_skipped (lane lock held). */
static void skip(struct lane *l, struct job *j, int err, struct job **list)
{
    if (err == -ETIMEDOUT)
        l->stats.expired++;
    else if (err == -ECANCELED)
        l->stats.cancelled++;
    else
        l->stats.dropped++;
    j->err = err;
    j->next = *list;
    *list = j;
}

/* Moves the jobs at the head of t's queue whose ctl has stopped onto
 * *dead (their skipped to be called with no lock held). Returns true when
 * t was freed (nothing left queued or running). Lane lock held. */
static bool skim_stopped(struct lane *l, struct tenant *t, struct job **dead)
{
    struct job *j;
    int err;

    while ((j = t->head) && (err = ws_work_ctl_check(j->job.ctl)) < 0) {
        queue_unlink(l, t, NULL, j);
        skip(l, j, err, dead);
    }
    if (t->running || t->queued)
        return false;
    tenant_put(l, t);
    return true;
}

/* The next job to start in the lane, taken out of its queue and counted as
 * running, or NULL. Queued jobs met on the way whose ctl has stopped go to
 * *dead. Lane lock held. */
static struct job *pick(struct lane *l, struct job **dead)
{
    struct tenant *t, *next;

    for (t = l->active_head; t; t = next) {
        next = t->next_active;
        if (skim_stopped(l, t, dead) || !t->head || t->running >= l->per_tenant_running)
            continue;
        struct job *j = t->head;
        queue_unlink(l, t, NULL, j);
        j->tenant = t;
        t->running++;
        t->served = ++l->serve_seq;
        if (t->queued) {
            active_remove(l, t);
            active_insert(l, t);
        }
        l->stats.running++;
        l->stats.wait_ns += (uint64_t)(ws_mono_ns() - j->queued_ns);
        return j;
    }
    return NULL;
}

/* Calls skipped for each job of a list made by skip(), with the reason
 * it was counted under, and frees them. No lock held. */
static void finish_skipped(struct job *list)
{
    while (list) {
        struct job *next = list->next;

        list->job.skipped(list->job.arg, list->err);
        free(list);
        list = next;
    }
}

/* Accounts for a job whose run returned (lane lock held). */
static void job_returned(struct lane *l, struct tenant *t)
{
    l->stats.running--;
    l->stats.done++;
    if (t) {
        t->running--;
        tenant_put(l, t);
    }
    if (l->stopping && !l->stats.running)
        pthread_cond_broadcast(&l->drained);
}

/* Lowers the calling thread's priority by l->nice. setpriority with
 * PRIO_PROCESS and a thread id acts on that one thread on Linux; raising
 * a nice value needs no privilege, and if it is refused anyway the thread
 * merely competes with the RPC threads as before. */
static void lower_priority(const struct lane *l)
{
    id_t tid = (id_t)gettid();
    int prio;

    if (l->nice <= 0)
        return;
    errno = 0;
    prio = getpriority(PRIO_PROCESS, tid);
    if (prio == -1 && errno)
        return;
    prio += l->nice;
    (void)setpriority(PRIO_PROCESS, tid, prio > WS_POOL_NICE_MAX ? WS_POOL_NICE_MAX : prio);
}

static void *worker_main(void *arg)
{
    struct lane *l = arg;

    lower_priority(l);
    pthread_mutex_lock(&l->lock);
    for (;;) {
        struct job *dead = NULL;
        struct job *j = pick(l, &dead);

        if (!j && !dead) {
            /* shutdown empties the queues under the lock it sets
             * stopping with, and submit refuses from then on: nothing is
             * left to start. */
            if (l->stopping)
                break;
            l->stats.threads_idle++;
            pthread_cond_wait(&l->wake, &l->lock);
            l->stats.threads_idle--;
            continue;
        }
        pthread_mutex_unlock(&l->lock);
        finish_skipped(dead);
        if (j)
            run_job(&j->job);
        pthread_mutex_lock(&l->lock);
        if (j) {
            job_returned(l, j->tenant);
            free(j);
        }
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

/* Stops l's threads (already started ones) and waits for them; the queues
 * must be empty. */
static void lane_join(struct lane *l)
{
    pthread_mutex_lock(&l->lock);
    l->stopping = true;
    pthread_cond_broadcast(&l->wake);
    pthread_mutex_unlock(&l->lock);
    for (unsigned k = 0; k < l->n_started; k++)
        pthread_join(l->threads[k], NULL);
    l->n_started = 0;
}

static void lane_destroy(struct lane *l)
{
    free(l->threads);
    l->threads = NULL;
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->wake);
    pthread_cond_destroy(&l->drained);
}

static int check_config(const struct ws_pool_lane_config *lanes, size_t n_lanes)
{
    if (!lanes || n_lanes == 0 || n_lanes > WS_POOL_LANES_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n_lanes; i++) {
        const struct ws_pool_lane_config *c = &lanes[i];

        if (!c->name || !c->name[0] || strlen(c->name) > WS_POOL_NAME_MAX)
            return -EINVAL;
        if (c->threads > WS_POOL_THREADS_MAX || c->nice < 0 || c->nice > WS_POOL_NICE_MAX)
            return -EINVAL;
        for (size_t k = 0; k < i; k++)
            if (strcmp(lanes[k].name, c->name) == 0)
                return -EINVAL;
    }
    return 0;
}

static int lane_start(struct lane *l, const struct ws_pool_lane_config *c)
{
    snprintf(l->name, sizeof(l->name), "%s", c->name);
    l->per_tenant_running = c->per_tenant_running ? c->per_tenant_running : c->threads;
    l->per_tenant_queued =
        c->per_tenant_queued ? c->per_tenant_queued : WS_POOL_DEFAULT_TENANT_QUEUED;
    l->nice = c->nice;
    l->stats.threads = c->threads;
    if (!c->threads)
        return 0;
    l->threads = calloc(c->threads, sizeof(*l->threads));
    if (!l->threads)
        return -ENOMEM;
    for (unsigned k = 0; k < c->threads; k++) {
        char tname[16];
        int e = pthread_create(&l->threads[k], NULL, worker_main, l);

        if (e)
            return -e;
        l->n_started++;
        snprintf(tname, sizeof(tname), "ws-%s-%u", l->name, k);
        pthread_setname_np(l->threads[k], tname);
    }
    return 0;
}

int ws_pool_new(const struct ws_pool_lane_config *lanes, size_t n_lanes, struct ws_pool **ret)
{
    struct ws_pool *p;
    pthread_condattr_t cattr;
    int err;

    err = check_config(lanes, n_lanes);
    if (err < 0 || !ret)
        return err < 0 ? err : -EINVAL;
    p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    pthread_mutex_init(&p->shutdown_lock, NULL);
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    p->n_lanes = n_lanes;
    for (size_t i = 0; i < n_lanes; i++) {
        pthread_mutex_init(&p->lanes[i].lock, NULL);
        pthread_cond_init(&p->lanes[i].wake, &cattr);
        pthread_cond_init(&p->lanes[i].drained, &cattr);
    }
    pthread_condattr_destroy(&cattr);
    for (size_t i = 0; i < n_lanes && err == 0; i++)
        err = lane_start(&p->lanes[i], &lanes[i]);
    if (err < 0) {
        /* Nothing can have been submitted yet: the threads started so far
         * are idle. */
        for (size_t i = 0; i < n_lanes; i++) {
            lane_join(&p->lanes[i]);
            lane_destroy(&p->lanes[i]);
        }
        pthread_mutex_destroy(&p->shutdown_lock);
        free(p);
        return err;
    }
    *ret = p;
    return 0;
}

void ws_pool_shutdown(struct ws_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->shutdown_lock);
    if (p->shut_down) {
        pthread_mutex_unlock(&p->shutdown_lock);
        return;
    }
    for (size_t i = 0; i < p->n_lanes; i++) {
        struct lane *l = &p->lanes[i];
        struct job *dropped = NULL;

        pthread_mutex_lock(&l->lock);
        l->stopping = true;
        while (l->active_head) {
            struct tenant *t = l->active_head;

            while (t->head) {
                struct job *j = t->head;

                queue_unlink(l, t, NULL, j);
                skip(l, j, -ESHUTDOWN, &dropped);
            }
            tenant_put(l, t);
        }
        pthread_cond_broadcast(&l->wake);
        pthread_mutex_unlock(&l->lock);
        finish_skipped(dropped);
    }
    for (size_t i = 0; i < p->n_lanes; i++) {
        struct lane *l = &p->lanes[i];

        /* Inline jobs run on their callers' threads: wait for them here,
         * as the join below waits for the lane's own. */
        pthread_mutex_lock(&l->lock);
        while (l->stats.running)
            pthread_cond_wait(&l->drained, &l->lock);
        pthread_mutex_unlock(&l->lock);
        lane_join(l);
    }
    p->shut_down = true;
    pthread_mutex_unlock(&p->shutdown_lock);
}

void ws_pool_free(struct ws_pool *p)
{
    if (!p)
        return;
    ws_pool_shutdown(p);
    for (size_t i = 0; i < p->n_lanes; i++)
        lane_destroy(&p->lanes[i]);
    pthread_mutex_destroy(&p->shutdown_lock);
    free(p);
}

int ws_pool_lane(const struct ws_pool *p, const char *name)
{
    if (!p || !name)
        return -ENOENT;
    for (size_t i = 0; i < p->n_lanes; i++)
        if (strcmp(p->lanes[i].name, name) == 0)
            return (int)i;
    return -ENOENT;
}

/* Runs a job on the caller's thread (an inline lane). */
static int submit_inline(struct lane *l, const struct ws_pool_job *job)
{
    pthread_mutex_lock(&l->lock);
    if (l->stopping) {
        pthread_mutex_unlock(&l->lock);
        return -ESHUTDOWN;
    }
    l->stats.submitted++;
    l->stats.running++;
    pthread_mutex_unlock(&l->lock);
    run_job(job);
    pthread_mutex_lock(&l->lock);
    job_returned(l, NULL);
    pthread_mutex_unlock(&l->lock);
    return 0;
}

int ws_pool_submit(struct ws_pool *p, unsigned lane, const struct ws_pool_job *job,
                   struct ws_diag *d)
{
    struct lane *l;
    struct tenant *t;
    struct job *j;
    const char *key;
    int err;

    if (!p || lane >= p->n_lanes || !job || !job->run || !job->skipped)
        return -EINVAL;
    key = job->tenant ? job->tenant : "";
    if (strlen(key) > WS_POOL_TENANT_MAX)
        return -EINVAL;
    l = &p->lanes[lane];

    err = ws_work_ctl_check(job->ctl);
    if (err < 0) {
        pthread_mutex_lock(&l->lock);
        if (l->stopping) {
            pthread_mutex_unlock(&l->lock);
            return -ESHUTDOWN;
        }
        l->stats.submitted++;
        if (err == -ETIMEDOUT)
            l->stats.expired++;
        else
            l->stats.cancelled++;
        pthread_mutex_unlock(&l->lock);
        job->skipped(job->arg, err);
        return 0;
    }
    if (!l->stats.threads)
        return submit_inline(l, job);

    j = calloc(1, sizeof(*j));
    if (!j)
        return -ENOMEM;
    j->job = *job;
    j->job.tenant = NULL; /* the key lives in the tenant record */
    pthread_mutex_lock(&l->lock);
    err = -ESHUTDOWN;
    if (l->stopping)
        goto unlock_fail;
    t = tenant_get(l, key);
    err = -ENOMEM;
    if (!t)
        goto unlock_fail;
    if (t->queued >= l->per_tenant_queued) {
        l->stats.refused++;
        ws_diag_set(d, "too much pending work for this tenant (limit %u queued jobs)",
                    l->per_tenant_queued);
        ws_diag_meta(d, "quota", "%s", "tenant_pending_work");
        ws_diag_meta(d, "limit", "%u", l->per_tenant_queued);
        err = -WS_EQUOTA;
        goto unlock_fail;
    }
    j->queued_ns = ws_mono_ns();
    queue_push(l, t, j);
    l->stats.submitted++;
    pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->lock);
    return 0;

unlock_fail:
    pthread_mutex_unlock(&l->lock);
    free(j);
    return err;
}

int ws_pool_cancel(struct ws_pool *p, struct ws_work_ctl *ctl)
{
    int n = 0, err;

    if (!p || !ctl)
        return 0;
    ws_work_ctl_cancel(ctl);
    for (size_t i = 0; i < p->n_lanes; i++) {
        struct lane *l = &p->lanes[i];
        struct job *taken = NULL;
        struct tenant *t, *next_t;

        pthread_mutex_lock(&l->lock);
        for (t = l->active_head; t; t = next_t) {
            struct job *prev = NULL, *j, *next_j;

            next_t = t->next_active;
            for (j = t->head; j; j = next_j) {
                next_j = j->next;
                if (j->job.ctl != ctl) {
                    prev = j;
                    continue;
                }
                queue_unlink(l, t, prev, j);
                err = ws_work_ctl_check(ctl);
                skip(l, j, err < 0 ? err : -ECANCELED, &taken);
                n++;
            }
            tenant_put(l, t);
        }
        pthread_mutex_unlock(&l->lock);
        finish_skipped(taken);
    }
    return n;
}

int ws_pool_read_stats(struct ws_pool *p, unsigned lane, struct ws_pool_stats *ret)
{
    struct lane *l;

    if (!p || lane >= p->n_lanes || !ret)
        return -EINVAL;
    l = &p->lanes[lane];
    pthread_mutex_lock(&l->lock);
    *ret = l->stats;
    pthread_mutex_unlock(&l->lock);
    return 0;
}
