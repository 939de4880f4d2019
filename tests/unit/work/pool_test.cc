// The worker pool: per-tenant caps, round-robin between tenants, jobs that
// never run once their caller is gone, shutdown, inline lanes and the
// counters. Jobs block on gates the test opens, so every ordering asserted
// here is forced, not hoped for; every wait is bounded and fails loudly.
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/work/pool.h"
}

namespace
{

// How long any wait may take before the test fails: far beyond what the
// awaited event needs, even under ASan on a loaded machine.
constexpr std::chrono::seconds kWait(20);

// Closed until Open(); Pass() blocks while closed.
class Gate
{
  public:
    void Open()
    {
        std::lock_guard<std::mutex> g(mu_);
        open_ = true;
        cv_.notify_all();
    }
    // False when the gate stayed closed for kWait.
    bool Pass()
    {
        std::unique_lock<std::mutex> g(mu_);
        return cv_.wait_for(g, kWait, [this] { return open_; });
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool open_ = false;
};

// Permits handed out one at a time; Take() blocks until one is free.
class Permits
{
  public:
    void Release()
    {
        std::lock_guard<std::mutex> g(mu_);
        n_++;
        cv_.notify_one();
    }
    // Every Take() from now on passes.
    void OpenAll()
    {
        std::lock_guard<std::mutex> g(mu_);
        open_ = true;
        cv_.notify_all();
    }
    // False when no permit came within kWait.
    bool Take()
    {
        std::unique_lock<std::mutex> g(mu_);
        if (!cv_.wait_for(g, kWait, [this] { return open_ || n_ > 0; }))
            return false;
        if (!open_)
            n_--;
        return true;
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    int n_ = 0;
    bool open_ = false;
};

// A count the test can wait on.
class Counter
{
  public:
    void Add()
    {
        std::lock_guard<std::mutex> g(mu_);
        n_++;
        cv_.notify_all();
    }
    int Get()
    {
        std::lock_guard<std::mutex> g(mu_);
        return n_;
    }
    // False when the count did not reach n within kWait.
    bool WaitFor(int n)
    {
        std::unique_lock<std::mutex> g(mu_);
        return cv_.wait_for(g, kWait, [&] { return n_ >= n; });
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    int n_ = 0;
};

// One job and what happened to it.
struct Job {
    std::function<void(const ws_work_ctl *)> body;
    Counter *finished = nullptr; // counts run and skipped alike
    std::atomic<int> runs{0};
    std::atomic<int> skips{0};
    std::atomic<int> skip_err{0};
    std::thread::id thread;
};

void RunJob(const ws_work_ctl *ctl, void *arg)
{
    Job *j = static_cast<Job *>(arg);
    j->thread = std::this_thread::get_id();
    j->runs++;
    if (j->body)
        j->body(ctl);
    if (j->finished)
        j->finished->Add();
}

void SkipJob(void *arg, int err)
{
    Job *j = static_cast<Job *>(arg);
    j->thread = std::this_thread::get_id();
    j->skip_err = err;
    j->skips++;
    if (j->finished)
        j->finished->Add();
}

int Submit(ws_pool *p, unsigned lane, const char *tenant, Job *j, ws_work_ctl *ctl = nullptr,
           ws_diag *d = nullptr)
{
    ws_pool_job job = {};
    job.run = RunJob;
    job.skipped = SkipJob;
    job.arg = j;
    job.tenant = tenant;
    job.ctl = ctl;
    return ws_pool_submit(p, lane, &job, d);
}

ws_pool_stats Stats(ws_pool *p, unsigned lane = 0)
{
    ws_pool_stats s = {};
    EXPECT_EQ(ws_pool_read_stats(p, lane, &s), 0);
    return s;
}

// Every accepted job is in exactly one place.
void ExpectBalanced(const ws_pool_stats &s)
{
    EXPECT_EQ(s.submitted, s.queued + s.running + s.done + s.cancelled + s.expired + s.dropped)
        << "queued " << s.queued << " running " << s.running << " done " << s.done << " cancelled "
        << s.cancelled << " expired " << s.expired << " dropped " << s.dropped;
}

// Polls the lane's counters until pred holds; false after kWait. The
// counters change under the pool's lock with no event to wait on, hence
// the poll.
bool StatsReach(ws_pool *p, unsigned lane, const std::function<bool(const ws_pool_stats &)> &pred)
{
    auto deadline = std::chrono::steady_clock::now() + kWait;
    for (;;) {
        ws_pool_stats s = Stats(p, lane);
        if (pred(s))
            return true;
        if (std::chrono::steady_clock::now() > deadline)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

ws_pool *NewPool(unsigned threads, unsigned per_tenant_running = 0, unsigned per_tenant_queued = 0,
                 int nice = 0)
{
    ws_pool_lane_config c = {};
    c.name = "fs";
    c.threads = threads;
    c.per_tenant_running = per_tenant_running;
    c.per_tenant_queued = per_tenant_queued;
    c.nice = nice;
    ws_pool *p = nullptr;
    EXPECT_EQ(ws_pool_new(&c, 1, &p), 0);
    return p;
}

// Waits until every job of the tenant queued before now has left the
// queue (a marker job of the same tenant starts only after them: FIFO),
// and, when nothing else was submitted, until the lane is idle again (the
// pool counts a job done just after its run returns).
void Flush(ws_pool *p, const char *tenant)
{
    Counter done;
    Job marker;
    marker.finished = &done;
    ASSERT_EQ(Submit(p, 0, tenant, &marker), 0);
    ASSERT_TRUE(done.WaitFor(1)) << "the marker job never finished";
    ASSERT_EQ(marker.runs.load(), 1);
    ASSERT_TRUE(StatsReach(p, 0, [](const ws_pool_stats &s) {
        return s.running == 0 && s.queued == 0;
    })) << "the lane did not go idle";
}

TEST(Pool, RejectsBadConfigs)
{
    ws_pool *p = nullptr;
    ws_pool_lane_config c[2] = {};
    c[0].name = "fs";
    c[1].name = "fs";
    EXPECT_EQ(ws_pool_new(c, 0, &p), -EINVAL);
    EXPECT_EQ(ws_pool_new(c, 2, &p), -EINVAL) << "two lanes with one name";
    c[1].name = "";
    EXPECT_EQ(ws_pool_new(c, 2, &p), -EINVAL);
    c[1].name = "a-name-longer-than-16";
    EXPECT_EQ(ws_pool_new(c, 2, &p), -EINVAL);
    c[1].name = "daemon";
    c[1].threads = WS_POOL_THREADS_MAX + 1;
    EXPECT_EQ(ws_pool_new(c, 2, &p), -EINVAL);
    c[1].threads = 1;
    c[1].nice = -1;
    EXPECT_EQ(ws_pool_new(c, 2, &p), -EINVAL);
    c[1].nice = 0;
    ASSERT_EQ(ws_pool_new(c, 2, &p), 0);
    EXPECT_EQ(ws_pool_lane(p, "fs"), 0);
    EXPECT_EQ(ws_pool_lane(p, "daemon"), 1);
    EXPECT_EQ(ws_pool_lane(p, "other"), -ENOENT);

    Job j;
    EXPECT_EQ(Submit(p, 2, "a", &j), -EINVAL) << "no such lane";
    std::string long_tenant(WS_POOL_TENANT_MAX + 1, 't');
    EXPECT_EQ(Submit(p, 0, long_tenant.c_str(), &j), -EINVAL);
    ws_pool_job no_skip = {};
    no_skip.run = RunJob;
    no_skip.arg = &j;
    EXPECT_EQ(ws_pool_submit(p, 0, &no_skip, nullptr), -EINVAL);
    ws_pool_free(p);
    EXPECT_EQ(j.runs.load() + j.skips.load(), 0) << "a refused submit called the job";
}

// A tenant never has more than per_tenant_running jobs running, even with
// threads idle and its queue full; another tenant gets those threads.
TEST(Pool, HoldsTheRunningCapPerTenant)
{
    constexpr unsigned kThreads = 4, kCap = 2, kJobsA = 10, kJobsB = 2;
    ws_pool *p = NewPool(kThreads, kCap);
    ASSERT_NE(p, nullptr);
    Gate gate;
    Counter finished;
    Counter started_a, started_b;
    std::atomic<int> running_a{0}, max_a{0}, running_b{0}, max_b{0};
    auto body = [&gate](std::atomic<int> *running, std::atomic<int> *max, Counter *started) {
        return [&gate, running, max, started](const ws_work_ctl *) {
            int now = ++*running;
            int seen = max->load();
            while (now > seen && !max->compare_exchange_weak(seen, now))
                ;
            started->Add();
            EXPECT_TRUE(gate.Pass()) << "the gate never opened";
            --*running;
        };
    };
    std::deque<Job> jobs(kJobsA + kJobsB);
    for (unsigned i = 0; i < kJobsA; i++) {
        jobs[i].body = body(&running_a, &max_a, &started_a);
        jobs[i].finished = &finished;
        ASSERT_EQ(Submit(p, 0, "tenant-a", &jobs[i]), 0);
    }
    ASSERT_TRUE(started_a.WaitFor(kCap));
    // Two threads stay idle while A has 8 jobs queued: the cap, not a lack
    // of threads, is what holds A back.
    EXPECT_TRUE(StatsReach(p, 0,
                           [&](const ws_pool_stats &s) {
                               return s.running == kCap && s.queued == kJobsA - kCap &&
                                      s.threads_idle == kThreads - kCap;
                           }))
        << "running " << Stats(p).running << " idle " << Stats(p).threads_idle;
    EXPECT_EQ(running_a.load(), (int)kCap);
    EXPECT_EQ(Stats(p).tenants, 1u);

    for (unsigned i = kJobsA; i < kJobsA + kJobsB; i++) {
        jobs[i].body = body(&running_b, &max_b, &started_b);
        jobs[i].finished = &finished;
        ASSERT_EQ(Submit(p, 0, "tenant-b", &jobs[i]), 0);
    }
    EXPECT_TRUE(started_b.WaitFor(kJobsB)) << "B's jobs did not start on the idle threads";
    EXPECT_TRUE(StatsReach(p, 0, [&](const ws_pool_stats &s) {
        return s.running == kCap + kJobsB && s.threads_idle == 0;
    }));
    EXPECT_EQ(running_b.load(), (int)kJobsB);
    ExpectBalanced(Stats(p));

    gate.Open();
    ASSERT_TRUE(finished.WaitFor(kJobsA + kJobsB));
    EXPECT_EQ(max_a.load(), (int)kCap);
    EXPECT_LE(max_b.load(), (int)kCap);
    for (auto &j : jobs)
        EXPECT_EQ(j.runs.load(), 1);
    // The last job's accounting happens just after its run returns.
    EXPECT_TRUE(StatsReach(p, 0, [](const ws_pool_stats &s) { return s.running == 0; }));
    ws_pool_stats s = Stats(p);
    EXPECT_EQ(s.done, kJobsA + kJobsB);
    EXPECT_EQ(s.tenants, 0u) << "a tenant with no work left is still tracked";
    ExpectBalanced(s);
    ws_pool_free(p);
}

// Tenant A queues 1000 jobs, then B submits one: B's job starts before
// more than `threads` of A's later jobs do, not after A's backlog. A's jobs
// leave one at a time, each on a permit the test hands out only once the
// previous one's thread has started its next job, so the order of starts
// is the order in which the pool chose them, whatever the OS scheduler
// does to the threads meanwhile.
TEST(Pool, ServesTenantsRoundRobin)
{
    constexpr unsigned kThreads = 3, kJobsA = 1000;
    ws_pool *p = NewPool(kThreads, 0, kJobsA);
    ASSERT_NE(p, nullptr);
    Permits permits;
    Counter started, finished;
    std::atomic<int> seq{0};
    std::vector<int> start_a(kJobsA, -1);
    std::deque<Job> a(kJobsA);
    for (unsigned i = 0; i < kJobsA; i++) {
        a[i].body = [&, i](const ws_work_ctl *) {
            start_a[i] = seq++;
            started.Add();
            EXPECT_TRUE(permits.Take()) << "no permit came";
        };
        a[i].finished = &finished;
        ASSERT_EQ(Submit(p, 0, "tenant-a", &a[i]), 0);
    }
    ASSERT_TRUE(started.WaitFor(kThreads));
    EXPECT_EQ(Stats(p).queued, kJobsA - kThreads);
    int submitted_at = seq.load();
    EXPECT_EQ(submitted_at, (int)kThreads);

    std::atomic<int> start_b{-1};
    Job b;
    b.body = [&](const ws_work_ctl *) {
        start_b = seq++;
        started.Add();
    };
    b.finished = &finished;
    ASSERT_EQ(Submit(p, 0, "tenant-b", &b), 0);
    // One A job leaves per step, its thread starts exactly one job (A's or
    // B's), and the step ends when that start is seen.
    for (unsigned step = 0; start_b < 0 && step < kJobsA; step++) {
        int before = started.Get();
        permits.Release();
        ASSERT_TRUE(started.WaitFor(before + 1)) << "no job started at step " << step;
    }
    permits.OpenAll();
    ASSERT_TRUE(finished.WaitFor(kJobsA + 1));
    ASSERT_GE(start_b.load(), submitted_at);
    int a_before_b = 0;
    for (int s : start_a)
        if (s >= submitted_at && s < start_b)
            a_before_b++;
    EXPECT_LE(a_before_b, (int)kThreads)
        << "B's one job waited for " << a_before_b << " of A's queued jobs";
    ws_pool_free(p);
}

// The tenant's queue holds per_tenant_queued jobs; the next is refused
// with a quota error the RPC layer turns into RESOURCE_EXHAUSTED, and other
// tenants are not affected.
TEST(Pool, RefusesPastTheQueuedCap)
{
    constexpr unsigned kQueued = 3;
    ws_pool *p = NewPool(1, 0, kQueued);
    ASSERT_NE(p, nullptr);
    Gate gate;
    Counter finished;
    std::deque<Job> jobs(kQueued + 3);
    jobs[0].body = [&](const ws_work_ctl *) { EXPECT_TRUE(gate.Pass()); };
    for (auto &j : jobs)
        j.finished = &finished;
    ASSERT_EQ(Submit(p, 0, "tenant-a", &jobs[0]), 0);
    ASSERT_TRUE(StatsReach(p, 0, [](const ws_pool_stats &s) { return s.running == 1; }));
    for (unsigned i = 1; i <= kQueued; i++)
        ASSERT_EQ(Submit(p, 0, "tenant-a", &jobs[i]), 0);

    ws_diag d = {};
    EXPECT_EQ(Submit(p, 0, "tenant-a", &jobs[kQueued + 1], nullptr, &d), -WS_EQUOTA);
    ASSERT_EQ(d.n_meta, 2);
    EXPECT_STREQ(d.key[0], "quota");
    EXPECT_STREQ(d.value[0], "tenant_pending_work");
    EXPECT_STREQ(d.key[1], "limit");
    EXPECT_STREQ(d.value[1], "3");
    EXPECT_NE(std::string(d.message).find("pending work"), std::string::npos) << d.message;
    EXPECT_EQ(Stats(p).refused, 1u);
    // Another tenant has a queue of its own.
    EXPECT_EQ(Submit(p, 0, "tenant-b", &jobs[kQueued + 2]), 0);
    ExpectBalanced(Stats(p));

    gate.Open();
    ASSERT_TRUE(finished.WaitFor(kQueued + 2));
    EXPECT_EQ(jobs[kQueued + 1].runs.load() + jobs[kQueued + 1].skips.load(), 0)
        << "a refused job was called";
    // Room again once the queue drained.
    Flush(p, "tenant-a");
    ws_pool_free(p);
}

// A job cancelled while queued never runs; its skipped is called once,
// at once when cancelled through the pool.
TEST(Pool, CancelWhileQueuedCallsOnlyTheSkippedPath)
{
    ws_pool *p = NewPool(1);
    ASSERT_NE(p, nullptr);
    Gate gate;
    Job blocker, cancelled, flagged;
    blocker.body = [&](const ws_work_ctl *) { EXPECT_TRUE(gate.Pass()); };
    ws_work_ctl ctl = {}, flag_ctl = {};
    ASSERT_EQ(Submit(p, 0, "a", &blocker), 0);
    ASSERT_TRUE(StatsReach(p, 0, [](const ws_pool_stats &s) { return s.running == 1; }));
    ASSERT_EQ(Submit(p, 0, "a", &cancelled, &ctl), 0);
    ASSERT_EQ(Submit(p, 0, "a", &flagged, &flag_ctl), 0);

    // Through the pool: out of the queue and told now, on this thread.
    EXPECT_EQ(ws_pool_cancel(p, &ctl), 1);
    EXPECT_EQ(cancelled.skips.load(), 1);
    EXPECT_EQ(cancelled.skip_err.load(), -ECANCELED);
    EXPECT_EQ(cancelled.thread, std::this_thread::get_id());
    EXPECT_EQ(ws_pool_cancel(p, &ctl), 0) << "a second cancel found the job again";
    // Through the flag alone: found when its turn comes.
    ws_work_ctl_cancel(&flag_ctl);
    EXPECT_EQ(flagged.skips.load(), 0);
    EXPECT_EQ(Stats(p).queued, 1u);

    gate.Open();
    Flush(p, "a");
    EXPECT_EQ(cancelled.runs.load(), 0);
    EXPECT_EQ(cancelled.skips.load(), 1);
    EXPECT_EQ(flagged.runs.load(), 0);
    EXPECT_EQ(flagged.skips.load(), 1);
    EXPECT_EQ(flagged.skip_err.load(), -ECANCELED);
    ws_pool_stats s = Stats(p);
    EXPECT_EQ(s.cancelled, 2u);
    EXPECT_EQ(s.done, 2u); // the blocker and the marker
    ExpectBalanced(s);
    ws_pool_free(p);
}

// A running job is not interrupted: it sees the cancel through its ctl,
// and ws_pool_cancel finds nothing queued.
TEST(Pool, RunningJobSeesTheCancel)
{
    ws_pool *p = NewPool(1);
    ASSERT_NE(p, nullptr);
    Counter started, finished;
    std::atomic<int> seen{0};
    ws_work_ctl ctl = {};
    Job j;
    j.finished = &finished;
    j.body = [&](const ws_work_ctl *c) {
        EXPECT_EQ(c, &ctl);
        started.Add();
        auto deadline = std::chrono::steady_clock::now() + kWait;
        while (ws_work_ctl_check(c) == 0 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        seen = ws_work_ctl_check(c);
    };
    ASSERT_EQ(Submit(p, 0, "a", &j, &ctl), 0);
    ASSERT_TRUE(started.WaitFor(1));
    EXPECT_EQ(ws_pool_cancel(p, &ctl), 0);
    ASSERT_TRUE(finished.WaitFor(1));
    EXPECT_EQ(seen.load(), -ECANCELED);
    EXPECT_EQ(j.runs.load(), 1);
    EXPECT_EQ(j.skips.load(), 0);
    ws_pool_free(p);
}

// A job whose deadline passes while it waits never runs: skipped gets
// -ETIMEDOUT. One submitted past its deadline is skipped before submit
// returns.
TEST(Pool, DeadlinePassedWhileQueuedNeverRuns)
{
    ws_pool *p = NewPool(1);
    ASSERT_NE(p, nullptr);
    Gate gate;
    Job blocker, late, dead_on_arrival;
    blocker.body = [&](const ws_work_ctl *) { EXPECT_TRUE(gate.Pass()); };
    ASSERT_EQ(Submit(p, 0, "a", &blocker), 0);
    ASSERT_TRUE(StatsReach(p, 0, [](const ws_pool_stats &s) { return s.running == 1; }));
    ws_work_ctl ctl = {};
    ctl.deadline_mono_ms = ws_mono_ms() + 20;
    ASSERT_EQ(Submit(p, 0, "a", &late, &ctl), 0);
    EXPECT_EQ(Stats(p).queued, 1u);
    // What is awaited here is the clock itself.
    auto deadline = std::chrono::steady_clock::now() + kWait;
    while (ws_mono_ms() <= ctl.deadline_mono_ms && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_GT(ws_mono_ms(), ctl.deadline_mono_ms);

    gate.Open();
    Flush(p, "a");
    EXPECT_EQ(late.runs.load(), 0);
    EXPECT_EQ(late.skips.load(), 1);
    EXPECT_EQ(late.skip_err.load(), -ETIMEDOUT);

    ws_work_ctl past = {};
    past.deadline_mono_ms = ws_mono_ms() - 1;
    ASSERT_EQ(Submit(p, 0, "a", &dead_on_arrival, &past), 0);
    EXPECT_EQ(dead_on_arrival.skips.load(), 1) << "not skipped before submit returned";
    EXPECT_EQ(dead_on_arrival.skip_err.load(), -ETIMEDOUT);
    EXPECT_EQ(dead_on_arrival.thread, std::this_thread::get_id());
    EXPECT_EQ(dead_on_arrival.runs.load(), 0);
    ws_pool_stats s = Stats(p);
    EXPECT_EQ(s.expired, 2u);
    ExpectBalanced(s);
    ws_pool_free(p);
}

// Shutdown: queued jobs get skipped(-ESHUTDOWN) at once, running ones
// finish, submit is refused, and shutdown returns only after them.
TEST(Pool, ShutdownFinishesRunningAndSkipsQueued)
{
    constexpr unsigned kThreads = 2, kQueued = 6;
    ws_pool *p = NewPool(kThreads);
    ASSERT_NE(p, nullptr);
    Gate gate;
    Counter skipped;
    std::deque<Job> running(kThreads), queued(kQueued);
    for (auto &j : running) {
        j.body = [&](const ws_work_ctl *) { EXPECT_TRUE(gate.Pass()); };
        ASSERT_EQ(Submit(p, 0, "a", &j), 0);
    }
    ASSERT_TRUE(StatsReach(p, 0, [&](const ws_pool_stats &s) { return s.running == kThreads; }));
    for (unsigned i = 0; i < kQueued; i++) {
        queued[i].finished = &skipped;
        ASSERT_EQ(Submit(p, 0, i % 2 ? "a" : "b", &queued[i]), 0);
    }

    std::atomic<bool> returned{false};
    std::thread stopper([&] {
        ws_pool_shutdown(p);
        returned = true;
    });
    ASSERT_TRUE(skipped.WaitFor(kQueued)) << "queued jobs were not skipped";
    for (auto &j : queued) {
        EXPECT_EQ(j.runs.load(), 0);
        EXPECT_EQ(j.skips.load(), 1);
        EXPECT_EQ(j.skip_err.load(), -ESHUTDOWN);
    }
    Job refused;
    EXPECT_EQ(Submit(p, 0, "a", &refused), -ESHUTDOWN);
    // The running jobs are still inside their run, held by the gate, so
    // shutdown cannot have returned.
    EXPECT_FALSE(returned.load());
    EXPECT_EQ(Stats(p).running, kThreads);

    gate.Open();
    stopper.join();
    EXPECT_TRUE(returned.load());
    for (auto &j : running)
        EXPECT_EQ(j.runs.load(), 1);
    ws_pool_stats s = Stats(p);
    EXPECT_EQ(s.dropped, kQueued);
    EXPECT_EQ(s.done, kThreads);
    EXPECT_EQ(s.tenants, 0u);
    ExpectBalanced(s);
    ws_pool_shutdown(p); // a second call does nothing
    ws_pool_free(p);
    EXPECT_EQ(refused.runs.load() + refused.skips.load(), 0);
}

// threads = 0: the job runs on the submitter's thread before submit
// returns, as before the pool existed.
TEST(Pool, InlineLaneRunsOnTheCallersThread)
{
    ws_pool *p = NewPool(0);
    ASSERT_NE(p, nullptr);
    Job j, stopped;
    ASSERT_EQ(Submit(p, 0, "a", &j), 0);
    EXPECT_EQ(j.runs.load(), 1);
    EXPECT_EQ(j.thread, std::this_thread::get_id());
    ws_work_ctl ctl = {};
    ws_work_ctl_cancel(&ctl);
    ASSERT_EQ(Submit(p, 0, "a", &stopped, &ctl), 0);
    EXPECT_EQ(stopped.runs.load(), 0);
    EXPECT_EQ(stopped.skips.load(), 1);
    EXPECT_EQ(stopped.skip_err.load(), -ECANCELED);
    EXPECT_EQ(stopped.thread, std::this_thread::get_id());
    ws_pool_stats s = Stats(p);
    EXPECT_EQ(s.threads, 0u);
    EXPECT_EQ(s.submitted, 2u);
    EXPECT_EQ(s.done, 1u);
    EXPECT_EQ(s.cancelled, 1u);
    ExpectBalanced(s);
    ws_pool_shutdown(p);
    Job after;
    EXPECT_EQ(Submit(p, 0, "a", &after), -ESHUTDOWN);
    ws_pool_free(p);
}

// ws_work_ctl_current() is the running job's ctl on a pool thread and on
// the submitter's thread for an inline lane, NULL outside a run, and the
// outer job's again after a nested inline run returns.
TEST(Pool, CurrentCtlIsTheRunningJobs)
{
    EXPECT_EQ(ws_work_ctl_current(), nullptr);
    ws_pool *threaded = NewPool(1);
    ws_pool *inline_lane = NewPool(0);
    ASSERT_NE(threaded, nullptr);
    ASSERT_NE(inline_lane, nullptr);

    ws_work_ctl outer = {}, inner = {};
    std::atomic<const ws_work_ctl *> seen_threaded{nullptr};
    Counter finished;
    Job j;
    j.finished = &finished;
    j.body = [&](const ws_work_ctl *) { seen_threaded = ws_work_ctl_current(); };
    ASSERT_EQ(Submit(threaded, 0, "a", &j, &outer), 0);
    ASSERT_TRUE(finished.WaitFor(1));
    EXPECT_EQ(seen_threaded.load(), &outer);

    const ws_work_ctl *in_outer = nullptr, *in_inner = nullptr, *after_inner = nullptr;
    Job nested, o;
    nested.body = [&](const ws_work_ctl *) { in_inner = ws_work_ctl_current(); };
    o.body = [&](const ws_work_ctl *) {
        in_outer = ws_work_ctl_current();
        EXPECT_EQ(Submit(inline_lane, 0, "a", &nested, &inner), 0);
        after_inner = ws_work_ctl_current();
    };
    ASSERT_EQ(Submit(inline_lane, 0, "a", &o, &outer), 0);
    EXPECT_EQ(in_outer, &outer);
    EXPECT_EQ(in_inner, &inner);
    EXPECT_EQ(after_inner, &outer);
    EXPECT_EQ(ws_work_ctl_current(), nullptr);

    ws_pool_free(threaded);
    ws_pool_free(inline_lane);
}

// A lane with nice = 10 runs its jobs 10 nice levels below the thread that
// made the pool, so the RPC threads preempt them.
TEST(Pool, NiceLaneLowersItsThreadsPriority)
{
    errno = 0;
    int base = getpriority(PRIO_PROCESS, (id_t)gettid());
    ASSERT_EQ(errno, 0);
    ws_pool *p = NewPool(1, 0, 0, 10);
    ASSERT_NE(p, nullptr);
    Counter finished;
    std::atomic<int> prio{-100};
    Job j;
    j.finished = &finished;
    j.body = [&](const ws_work_ctl *) { prio = getpriority(PRIO_PROCESS, (id_t)gettid()); };
    ASSERT_EQ(Submit(p, 0, "a", &j), 0);
    ASSERT_TRUE(finished.WaitFor(1));
    EXPECT_EQ(prio.load(), std::min(base + 10, WS_POOL_NICE_MAX));
    ws_pool_free(p);
}

// Many submitters, two lanes, tenants and cancels racing with dispatch:
// every job is run or skipped exactly once and the counters add up at every
// point they are read.
TEST(Pool, StatsAddUpUnderConcurrentUse)
{
    ws_pool_lane_config c[2] = {};
    c[0].name = "fs";
    c[0].threads = 2;
    c[0].per_tenant_running = 1;
    c[0].per_tenant_queued = 1000;
    c[1].name = "daemon";
    c[1].threads = 3;
    c[1].per_tenant_queued = 1000;
    ws_pool *p = nullptr;
    ASSERT_EQ(ws_pool_new(c, 2, &p), 0);

    constexpr int kSubmitters = 4, kPerSubmitter = 250;
    constexpr int kJobs = kSubmitters * kPerSubmitter;
    Counter finished;
    std::deque<Job> jobs(kJobs);
    std::deque<ws_work_ctl> ctls(kJobs);
    std::atomic<int> submitted{0};
    const char *tenants[] = {"a", "b", "c"};
    std::atomic<bool> stop_reader{false};
    std::thread reader([&] {
        while (!stop_reader) {
            ExpectBalanced(Stats(p, 0));
            ExpectBalanced(Stats(p, 1));
            std::this_thread::yield();
        }
    });
    std::vector<std::thread> submitters;
    for (int s = 0; s < kSubmitters; s++)
        submitters.emplace_back([&, s] {
            for (int i = s * kPerSubmitter; i < (s + 1) * kPerSubmitter; i++) {
                jobs[i].finished = &finished;
                if (i % 5 == 0)
                    jobs[i].body = [](const ws_work_ctl *) { std::this_thread::yield(); };
                EXPECT_EQ(Submit(p, i % 2, tenants[i % 3], &jobs[i], &ctls[i]), 0);
                submitted++;
                if (i % 3 == 0)
                    ws_pool_cancel(p, &ctls[i]);
            }
        });
    for (auto &t : submitters)
        t.join();
    ASSERT_TRUE(finished.WaitFor(kJobs)) << finished.Get() << " of " << kJobs << " finished";
    stop_reader = true;
    reader.join();
    EXPECT_TRUE(StatsReach(p, 0, [](const ws_pool_stats &s) { return s.running == 0; }));
    EXPECT_TRUE(StatsReach(p, 1, [](const ws_pool_stats &s) { return s.running == 0; }));

    uint64_t runs = 0, skips = 0;
    for (auto &j : jobs) {
        EXPECT_EQ(j.runs.load() + j.skips.load(), 1);
        runs += j.runs.load();
        skips += j.skips.load();
        if (j.skips.load()) {
            EXPECT_EQ(j.skip_err.load(), -ECANCELED);
        }
    }
    ws_pool_stats s0 = Stats(p, 0), s1 = Stats(p, 1);
    ExpectBalanced(s0);
    ExpectBalanced(s1);
    EXPECT_EQ(s0.submitted + s1.submitted, (uint64_t)kJobs);
    EXPECT_EQ(s0.done + s1.done, runs);
    EXPECT_EQ(s0.cancelled + s1.cancelled, skips);
    EXPECT_EQ(s0.queued + s1.queued, 0u);
    EXPECT_EQ(s0.tenants + s1.tenants, 0u);
    EXPECT_GT(skips, 0u);
    EXPECT_GT(runs, 0u);
    ws_pool_free(p);
}

// Queue wait is the time started jobs spent queued.
TEST(Pool, CountsQueueWait)
{
    ws_pool *p = NewPool(1);
    ASSERT_NE(p, nullptr);
    Gate gate;
    Job blocker, waiter;
    blocker.body = [&](const ws_work_ctl *) { EXPECT_TRUE(gate.Pass()); };
    ASSERT_EQ(Submit(p, 0, "a", &blocker), 0);
    ASSERT_TRUE(StatsReach(p, 0, [](const ws_pool_stats &s) { return s.running == 1; }));
    ASSERT_EQ(Submit(p, 0, "a", &waiter), 0);
    // Read after submit, so at or after the time the job was queued.
    int64_t before = ws_mono_ns();
    // The clock has to move for the wait to be measurable.
    while (ws_mono_ns() - before < 2 * WS_NSEC_PER_MSEC)
        std::this_thread::yield();
    uint64_t waited_before = Stats(p).wait_ns;
    gate.Open();
    Flush(p, "a");
    EXPECT_GE(Stats(p).wait_ns - waited_before, (uint64_t)(2 * WS_NSEC_PER_MSEC));
    ws_pool_free(p);
}

} // namespace
