// Tests for server/exec/process.c over a real pump thread, real children
// and the host's process-tree containment: capture, backpressure, replay
// gaps, ending and causes.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/exec/process.h"
}

#include "tests/testutil/process.h"

namespace
{

using Clock = std::chrono::steady_clock;

// Polls `pred` every few milliseconds until it holds or `ms` pass.
template <class Pred> bool WaitUntil(Pred pred, int ms = 30000)
{
    auto deadline = Clock::now() + std::chrono::milliseconds(ms);
    while (!pred()) {
        if (Clock::now() >= deadline)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
}

// A pidfd for `pid` (-1 when it has already been reaped): once the process
// has exited it reads as ready, whoever reaps it, and it never refers to a
// later process that reuses the pid.
int PidFd(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

// Whether the process behind `pidfd` has exited (-1: long since reaped).
bool Exited(int pidfd)
{
    struct pollfd p = {pidfd, POLLIN, 0};
    return pidfd < 0 || poll(&p, 1, 0) == 1;
}

class ProcTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        ASSERT_EQ(ws_pump_new(&pump_), 0);
        struct ws_tree_host_config tc = {};
        ASSERT_EQ(ws_tree_host_new(&tc, &trees_), 0);
        env_ = {pump_, trees_, 300};
        cwd_ = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(cwd_, 0);
    }
    void TearDown() override
    {
        ws_pump_free(pump_);
        ws_tree_host_free(trees_);
        close(cwd_);
    }

    struct ws_proc *Spawn(std::vector<const char *> argv, size_t ring, size_t capture,
                          uint64_t timeout_ms = 0, const struct ws_proc_wrapper *wrapper = nullptr,
                          bool pty = false)
    {
        argv.push_back(nullptr);
        const char *envp[] = {"PATH=/usr/bin:/bin", nullptr};
        struct ws_proc_config cfg = {};
        cfg.argv = argv.data();
        cfg.envp = envp;
        cfg.cwd_fd = cwd_;
        cfg.cwd = ".";
        cfg.timeout_ms = timeout_ms;
        cfg.ring_bytes = ring;
        cfg.capture_bytes = capture;
        cfg.wrapper = wrapper;
        cfg.pty = pty;
        cfg.wait_for_subscriber = wait_for_subscriber_;
        struct ws_proc *p = nullptr;
        EXPECT_EQ(ws_proc_spawn(&env_, &cfg, &p), 0);
        return p;
    }

    // Waits for the command to end (done callback), up to `ms`.
    bool WaitDone(struct ws_proc *p, int ms, struct ws_proc_result *r)
    {
        auto deadline = Clock::now() + std::chrono::milliseconds(ms);
        while (Clock::now() < deadline) {
            if (ws_proc_get_result(p, r))
                return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        return false;
    }

    struct ws_pump *pump_ = nullptr;
    struct ws_tree_host *trees_ = nullptr;
    struct ws_proc_env env_ = {};
    int cwd_ = -1;
    bool wait_for_subscriber_ = false;
};

// A subscriber driven from the test thread.
struct Reader {
    std::mutex mu;
    std::condition_variable cv;
    bool notified = false;

    static void Notify(void *arg)
    {
        auto *r = static_cast<Reader *>(arg);
        std::lock_guard<std::mutex> l(r->mu);
        r->notified = true;
        r->cv.notify_all();
    }
    static void Release(void *)
    {
    }

    // Next event, waiting up to `ms` for one.
    bool Next(struct ws_sub *s, std::vector<char> &buf, struct ws_sub_event *ev, int ms = 5000)
    {
        auto deadline = Clock::now() + std::chrono::milliseconds(ms);
        for (;;) {
            ws_sub_next(s, buf.size(), ev);
            if (ev->kind == WS_SUB_DATA)
                memcpy(buf.data(), ev->data, ev->len);
            if (ev->kind != WS_SUB_NONE)
                return true;
            std::unique_lock<std::mutex> l(mu);
            if (!cv.wait_until(l, deadline, [&] { return notified; }))
                return false;
            notified = false;
        }
    }
};

TEST_F(ProcTest, CaptureKeepsHeadAndTailWithExactCounts)
{
    // 26 letters, 1000 times: the capture keeps 8 + 8 bytes.
    struct ws_proc *p = Spawn({"/bin/sh", "-c",
                               "i=0; while [ $i -lt 1000 ]; do printf abcdefghijklmnopqrstuvwxyz; "
                               "i=$((i+1)); done"},
                              4096, 16);
    ASSERT_NE(p, nullptr);
    struct ws_proc_result r;
    ASSERT_TRUE(WaitDone(p, 20000, &r));
    EXPECT_EQ(r.cause, WS_CAUSE_EXITED);
    EXPECT_EQ(r.streams[WS_STREAM_STDOUT].total, 26000u);
    EXPECT_EQ(r.streams[WS_STREAM_STDOUT].head, 8u);
    EXPECT_EQ(r.streams[WS_STREAM_STDOUT].tail, 8u);
    EXPECT_TRUE(r.streams[WS_STREAM_STDOUT].truncated);
    char buf[16];
    ASSERT_EQ(ws_proc_capture(p, WS_STREAM_STDOUT, buf, sizeof(buf)), 16u);
    EXPECT_EQ(std::string(buf, 16), "abcdefghstuvwxyz");
    ws_proc_unref(p);
}

TEST_F(ProcTest, SlowSubscriberHoldsThePipeAndLosesNothing)
{
    // The subscriber comes just after the spawn, as a Start stream's does:
    // without waiting for it, a busy machine lets the pump fill the ring
    // first and the subscriber is rightly a late one.
    const size_t ring = 64 * 1024;
    wait_for_subscriber_ = true;
    struct ws_proc *p = Spawn({"/usr/bin/head", "-c", "33554432", "/dev/zero"}, ring, 0);
    ASSERT_NE(p, nullptr);
    Reader rd;
    struct ws_sub *s = nullptr;
    ASSERT_EQ(ws_sub_new(p, 0, Reader::Notify, Reader::Release, &rd, &s), 0);
    std::vector<char> buf(WS_PROC_CHUNK_MAX);
    struct ws_sub_event ev;
    ASSERT_TRUE(rd.Next(s, buf, &ev));
    ASSERT_EQ(ev.kind, WS_SUB_STARTED);
    // Nobody reads for a while: the child must be blocked, not finished,
    // with at most the ring (plus nothing else) taken from the pipe.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    struct ws_proc_result r;
    EXPECT_FALSE(ws_proc_get_result(p, &r));
    uint64_t got = 0, next_off = 0;
    bool exited = false;
    while (!exited) {
        ASSERT_TRUE(rd.Next(s, buf, &ev, 20000));
        if (ev.kind == WS_SUB_DATA) {
            ASSERT_EQ(ev.offset, next_off);
            next_off += ev.len;
            got += ev.len;
            for (size_t i = 0; i < ev.len; i++)
                ASSERT_EQ(buf[i], 0);
        } else {
            ASSERT_NE(ev.kind, WS_SUB_GAP) << "a live subscriber must never see a gap";
            exited = ev.kind == WS_SUB_EXITED;
        }
    }
    EXPECT_EQ(got, 33554432u);
    EXPECT_EQ(ev.result.streams[WS_STREAM_STDOUT].total, 33554432u);
    EXPECT_EQ(ev.delivered[WS_STREAM_STDOUT], 33554432u);
    ws_sub_close(s);
    ws_proc_unref(p);
}

TEST_F(ProcTest, OutputWaitsForTheFirstSubscriber)
{
    // A Start stream subscribes just after the spawn; whatever the command
    // wrote in between (here far more than the ring) must wait for it.
    std::vector<const char *> argv = {"/usr/bin/head", "-c", "2097152", "/dev/zero", nullptr};
    const char *envp[] = {nullptr};
    struct ws_proc_config cfg = {};
    cfg.argv = argv.data();
    cfg.envp = envp;
    cfg.cwd_fd = cwd_;
    cfg.ring_bytes = 64 * 1024;
    cfg.wait_for_subscriber = true;
    struct ws_proc *p = nullptr;
    ASSERT_EQ(ws_proc_spawn(&env_, &cfg, &p), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    struct ws_proc_result r;
    EXPECT_FALSE(ws_proc_get_result(p, &r)) << "nothing may be read without a subscriber";
    Reader rd;
    struct ws_sub *s = nullptr;
    ASSERT_EQ(ws_sub_new(p, 0, Reader::Notify, Reader::Release, &rd, &s), 0);
    std::vector<char> buf(WS_PROC_CHUNK_MAX);
    struct ws_sub_event ev;
    uint64_t got = 0;
    do {
        ASSERT_TRUE(rd.Next(s, buf, &ev, 20000));
        ASSERT_NE(ev.kind, WS_SUB_GAP);
        if (ev.kind == WS_SUB_DATA) {
            EXPECT_EQ(ev.offset, got);
            got += ev.len;
        }
    } while (ev.kind != WS_SUB_EXITED);
    EXPECT_EQ(got, 2097152u);
    ws_sub_close(s);
    ws_proc_unref(p);

    // Killed before anyone subscribed: it still ends (the pipe drains).
    cfg.argv = argv.data();
    ASSERT_EQ(ws_proc_spawn(&env_, &cfg, &p), 0);
    ws_proc_kill(p, WS_CAUSE_CANCELLED, false);
    ASSERT_TRUE(WaitDone(p, 10000, &r));
    EXPECT_EQ(r.cause, WS_CAUSE_CANCELLED);
    ws_proc_unref(p);
}

// The first process writes everything into its (1 MiB) pipe and exits
// before the subscriber comes, leaving a child behind: ending that child
// must not drain the held output past the ring (it used to: the
// subscriber then saw a gap instead of the first half).
TEST_F(ProcTest, LeftoversEndingDoNotReleaseHeldOutput)
{
    // head starts only once the test has seen the sleep run (the flag), so
    // that "the sleep was ended" below is about a sleep that really ran.
    const std::string m = testutil::UniqueSleepArg();
    const char *tmp = getenv("TEST_TMPDIR");
    const std::string flag = std::string(tmp ? tmp : "/tmp") + "/leftovers." + m;
    const std::string script = "sleep " + m + " & while [ ! -e " + flag +
                               " ]; do sleep 0.01; done; exec head -c 1048576 /dev/zero";
    std::vector<const char *> argv = {"/bin/sh", "-c", script.c_str(), nullptr};
    const char *envp[] = {nullptr};
    struct ws_proc_config cfg = {};
    cfg.argv = argv.data();
    cfg.envp = envp;
    cfg.cwd_fd = cwd_;
    cfg.ring_bytes = 64 * 1024;
    cfg.wait_for_subscriber = true;
    struct ws_proc *p = nullptr;
    ASSERT_EQ(ws_proc_spawn(&env_, &cfg, &p), 0);
    int leader = PidFd(ws_proc_pid(p));
    // The subscriber comes only once head has written all of it and exited
    // and the sleep it left has been ended: the case under test.
    EXPECT_TRUE(WaitUntil([&] { return !testutil::PidsWithArg(m).empty(); }))
        << "the sleep never ran";
    int fd = open(flag.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << flag << ": " << strerror(errno);
    close(fd);
    EXPECT_TRUE(WaitUntil([&] { return Exited(leader) && testutil::PidsWithArg(m).empty(); }))
        << "head did not exit or the sleep was not ended";
    if (leader >= 0)
        close(leader);
    unlink(flag.c_str());
    Reader rd;
    struct ws_sub *s = nullptr;
    ASSERT_EQ(ws_sub_new(p, 0, Reader::Notify, Reader::Release, &rd, &s), 0);
    std::vector<char> buf(WS_PROC_CHUNK_MAX);
    struct ws_sub_event ev;
    uint64_t got = 0;
    do {
        ASSERT_TRUE(rd.Next(s, buf, &ev, 20000));
        ASSERT_NE(ev.kind, WS_SUB_GAP) << "dropped " << ev.dropped << " at " << ev.offset;
        if (ev.kind == WS_SUB_DATA) {
            EXPECT_EQ(ev.offset, got);
            got += ev.len;
        }
    } while (ev.kind != WS_SUB_EXITED);
    EXPECT_EQ(got, 1048576u) << "cause " << ws_cause_name(ev.result.cause) << " total "
                             << ev.result.streams[WS_STREAM_STDOUT].total << " code "
                             << ev.result.exit_code << " signal " << ev.result.signal;
    EXPECT_EQ(ev.result.cause, WS_CAUSE_EXITED);
    EXPECT_EQ(ev.result.exit_code, 0);
    ws_sub_close(s);
    ws_proc_unref(p);
}

double CpuSeconds()
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// A slow subscriber holds a stream paused while its writer has exited
// (the rest of the output waits in the pipe): the pump must sleep, not
// spin on the pipe's hang-up (epoll reports it whatever the mask). This
// process hosts the pump thread; the test thread only sleeps meanwhile.
TEST_F(ProcTest, PausedStreamOfAnExitedCommandCostsNoCpu)
{
    wait_for_subscriber_ = true;
    struct ws_proc *p = Spawn({"/usr/bin/head", "-c", "262144", "/dev/zero"}, 4096, 0);
    ASSERT_NE(p, nullptr);
    int leader = PidFd(ws_proc_pid(p));
    Reader rd;
    struct ws_sub *s = nullptr;
    ASSERT_EQ(ws_sub_new(p, 0, Reader::Notify, Reader::Release, &rd, &s), 0);
    std::vector<char> buf(WS_PROC_CHUNK_MAX);
    struct ws_sub_event ev;
    ASSERT_TRUE(rd.Next(s, buf, &ev));
    ASSERT_EQ(ev.kind, WS_SUB_STARTED);
    ASSERT_TRUE(rd.Next(s, buf, &ev));
    ASSERT_EQ(ev.kind, WS_SUB_DATA);
    uint64_t got = ev.len;
    // head writes the rest into its pipe and exits while we hold this.
    EXPECT_TRUE(WaitUntil([&] { return Exited(leader); })) << "head never exited";
    if (leader >= 0)
        close(leader);
    double cpu0 = CpuSeconds();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    double spent = CpuSeconds() - cpu0;
    EXPECT_LT(spent, 0.3) << "the pump spun while the stream was paused";
    do {
        ASSERT_TRUE(rd.Next(s, buf, &ev, 20000));
        ASSERT_NE(ev.kind, WS_SUB_GAP);
        if (ev.kind == WS_SUB_DATA)
            got += ev.len;
    } while (ev.kind != WS_SUB_EXITED);
    EXPECT_EQ(got, 262144u);
    EXPECT_EQ(ev.result.cause, WS_CAUSE_EXITED);
    ws_sub_close(s);
    ws_proc_unref(p);
}

TEST_F(ProcTest, LateSubscriberGetsAnExactGap)
{
    struct ws_proc *p = Spawn({"/usr/bin/head", "-c", "100000", "/dev/zero"}, 4096, 0);
    ASSERT_NE(p, nullptr);
    struct ws_proc_result r;
    ASSERT_TRUE(WaitDone(p, 10000, &r));
    Reader rd;
    struct ws_sub *s = nullptr;
    ASSERT_EQ(ws_sub_new(p, 0, Reader::Notify, Reader::Release, &rd, &s), 0);
    std::vector<char> buf(WS_PROC_CHUNK_MAX);
    struct ws_sub_event ev;
    ASSERT_TRUE(rd.Next(s, buf, &ev));
    EXPECT_EQ(ev.kind, WS_SUB_STARTED);
    ASSERT_TRUE(rd.Next(s, buf, &ev));
    ASSERT_EQ(ev.kind, WS_SUB_GAP);
    EXPECT_EQ(ev.stream, WS_STREAM_STDOUT);
    EXPECT_EQ(ev.offset, 0u);
    EXPECT_EQ(ev.dropped, 100000u - 4096u);
    // The rest of the ring, possibly in two pieces where it wraps.
    uint64_t next = 100000u - 4096u;
    for (;;) {
        ASSERT_TRUE(rd.Next(s, buf, &ev));
        if (ev.kind != WS_SUB_DATA)
            break;
        EXPECT_EQ(ev.offset, next);
        next += ev.len;
    }
    EXPECT_EQ(next, 100000u);
    EXPECT_EQ(ev.kind, WS_SUB_EXITED);
    EXPECT_EQ(ev.delivered[WS_STREAM_STDOUT], 4096u);
    // From the middle of what is held: no gap.
    struct ws_sub *s2 = nullptr;
    ASSERT_EQ(ws_sub_new(p, 99000, Reader::Notify, Reader::Release, &rd, &s2), 0);
    ASSERT_TRUE(rd.Next(s2, buf, &ev));
    ASSERT_TRUE(rd.Next(s2, buf, &ev));
    ASSERT_EQ(ev.kind, WS_SUB_DATA);
    EXPECT_EQ(ev.offset, 99000u);
    EXPECT_EQ(ev.len, 1000u);
    ws_sub_close(s2);
    ws_sub_close(s);
    ws_proc_unref(p);
}

TEST_F(ProcTest, TimeoutKillsATermIgnoringTreeAndKeepsOutput)
{
    const std::string m = testutil::UniqueSleepArg();
    const std::string script = "trap '' TERM; echo before; sleep " + m + " & sleep " + m;
    struct ws_proc *p = Spawn({"/bin/sh", "-c", script.c_str()}, 4096, 4096, 200);
    ASSERT_NE(p, nullptr);
    struct ws_proc_result r;
    ASSERT_TRUE(WaitDone(p, 15000, &r));
    EXPECT_EQ(r.cause, WS_CAUSE_TIMEOUT);
    EXPECT_EQ(r.signal, SIGKILL); // TERM was ignored: the grace ran out
    char buf[64];
    size_t n = ws_proc_capture(p, WS_STREAM_STDOUT, buf, sizeof(buf));
    EXPECT_EQ(std::string(buf, n), "before\n");
    // Done means the tree is gone: nothing of it may be left at this point.
    EXPECT_TRUE(testutil::PidsWithArg(m).empty()) << "a sleep survived";
    ws_proc_unref(p);
}

TEST_F(ProcTest, WhatTheLeaderLeftRunningIsEnded)
{
    const std::string m = testutil::UniqueSleepArg();
    const std::string script = "setsid sleep " + m + " & echo hi; exit 7";
    auto t0 = Clock::now();
    struct ws_proc *p = Spawn({"/bin/sh", "-c", script.c_str()}, 4096, 4096);
    ASSERT_NE(p, nullptr);
    struct ws_proc_result r;
    ASSERT_TRUE(WaitDone(p, 15000, &r));
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
    EXPECT_EQ(r.cause, WS_CAUSE_EXITED);
    EXPECT_EQ(r.exit_code, 7);
    EXPECT_TRUE(testutil::PidsWithArg(m).empty()) << "a sleep survived";
    ws_proc_unref(p);
}

TEST_F(ProcTest, FirstCauseWinsAndSignalKillIsSignaled)
{
    const std::string m = testutil::UniqueSleepArg();
    struct ws_proc *p = Spawn({"/bin/sleep", m.c_str()}, 4096, 0);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(ws_proc_signal(p, SIGKILL), 0);
    ws_proc_kill(p, WS_CAUSE_EVICTED, false);
    struct ws_proc_result r;
    ASSERT_TRUE(WaitDone(p, 10000, &r));
    EXPECT_EQ(r.cause, WS_CAUSE_SIGNALED);
    EXPECT_EQ(r.signal, SIGKILL);
    EXPECT_EQ(ws_proc_signal(p, SIGTERM), -ESRCH);
    ws_proc_unref(p);
}

// ---- wrapper ----

// What a wrapper's hooks saw. It outlives the process: free runs on the
// pump thread once the command is done.
struct WrapLog {
    std::mutex mu;
    std::vector<std::pair<pid_t, int>> signals; // (leader, sig)
    std::vector<int> signal_returns;
    std::vector<int> exit_codes; // as the wrapper itself ended
    int rewrite_to = -1;         // >= 0: the exit code the hook reports
    bool report_oom = false;
    int enter_error = 0;
    std::atomic<int> enters{0}, leaves{0}, spawneds{0}, frees{0};
};

// The arg a process takes; on the heap, so that ASan reports a free that
// never comes as a leak and a second one as a double free.
struct WrapArg {
    WrapLog *log;
};

int WrapSignal(void *arg, struct ws_tree *tree, pid_t leader, int sig)
{
    WrapLog *log = static_cast<WrapArg *>(arg)->log;
    int r = ws_tree_signal_except(tree, sig, &leader, 1);
    std::lock_guard<std::mutex> l(log->mu);
    log->signals.push_back({leader, sig});
    log->signal_returns.push_back(r);
    return r;
}

void WrapExited(void *arg, struct ws_child_exit *e, enum ws_cause *ret_cause)
{
    WrapLog *log = static_cast<WrapArg *>(arg)->log;
    std::lock_guard<std::mutex> l(log->mu);
    log->exit_codes.push_back(e->signaled ? -e->signal : e->exit_code);
    if (log->rewrite_to >= 0) {
        e->signaled = false;
        e->signal = 0;
        e->exit_code = log->rewrite_to;
    }
    if (log->report_oom)
        *ret_cause = WS_CAUSE_OOM;
}

int WrapEnter(void *arg)
{
    WrapLog *log = static_cast<WrapArg *>(arg)->log;
    log->enters++;
    return log->enter_error;
}

void WrapLeave(void *arg)
{
    static_cast<WrapArg *>(arg)->log->leaves++;
}

void WrapSpawned(void *arg)
{
    static_cast<WrapArg *>(arg)->log->spawneds++;
}

void WrapFree(void *arg)
{
    auto *a = static_cast<WrapArg *>(arg);
    a->log->frees++;
    delete a;
}

struct ws_proc_wrapper MakeWrapper(WrapLog *log, const char *const *argv)
{
    struct ws_proc_wrapper w = {};
    w.argv = argv;
    w.signal = WrapSignal;
    w.exited = WrapExited;
    w.enter = WrapEnter;
    w.leave = WrapLeave;
    w.spawned = WrapSpawned;
    w.free = WrapFree;
    w.arg = new WrapArg{log};
    return w;
}

bool WaitFrees(WrapLog *log, int want, int ms = 5000)
{
    auto deadline = Clock::now() + std::chrono::milliseconds(ms);
    while (log->frees.load() < want && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return log->frees.load() == want;
}

// Live children of `parent` whose command name is `comm`, from /proc.
std::vector<pid_t> ChildrenNamed(pid_t parent, const std::string &comm)
{
    std::vector<pid_t> out;
    for (pid_t pid : testutil::AllPids()) {
        std::string dir = "/proc/" + std::to_string(pid);
        std::string stat = testutil::ReadFile(dir + "/stat");
        size_t rp = stat.rfind(')');
        if (rp == std::string::npos)
            continue;
        std::istringstream rest(stat.substr(rp + 1));
        std::string state;
        long ppid = 0;
        rest >> state >> ppid;
        if (ppid == parent && state != "Z" && testutil::ReadFile(dir + "/comm") == comm + "\n")
            out.push_back(pid);
    }
    return out;
}

TEST_F(ProcTest, WrapperRunsInTheCommandsPlaceAndRewritesItsExit)
{
    WrapLog log;
    log.rewrite_to = 42;
    // The wrapper runs a command of its own (exit 5), not cfg->argv (exit 3).
    const char *wargv[] = {"/bin/sh", "-c",   "echo wrapped; exec \"$@\"", "wrap", "/bin/sh", "-c",
                           "exit 5",  nullptr};
    struct ws_proc_wrapper w = MakeWrapper(&log, wargv);
    struct ws_proc *p = Spawn({"/bin/sh", "-c", "echo command; exit 3"}, 4096, 4096, 0, &w);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(log.enters.load(), 1);
    EXPECT_EQ(log.leaves.load(), 1);
    EXPECT_EQ(log.spawneds.load(), 1);

    // Listings show the command, not the wrapper.
    const char *const *argv = ws_proc_argv(p);
    ASSERT_NE(argv, nullptr);
    ASSERT_STREQ(argv[0], "/bin/sh");
    ASSERT_STREQ(argv[1], "-c");
    ASSERT_STREQ(argv[2], "echo command; exit 3");
    EXPECT_EQ(argv[3], nullptr);

    struct ws_proc_result r;
    ASSERT_TRUE(WaitDone(p, 10000, &r));
    EXPECT_EQ(r.cause, WS_CAUSE_EXITED);
    EXPECT_EQ(r.exit_code, 42);
    EXPECT_EQ(r.signal, 0);
    char buf[64];
    size_t n = ws_proc_capture(p, WS_STREAM_STDOUT, buf, sizeof(buf));
    EXPECT_EQ(std::string(buf, n), "wrapped\n");
    {
        std::lock_guard<std::mutex> l(log.mu);
        EXPECT_EQ(log.exit_codes, std::vector<int>{5});
        EXPECT_TRUE(log.signals.empty());
    }

    // The arg is released once the command is done (a finished command
    // kept for replay holds no fd of its wrapper), exactly once, even
    // though the process itself is still referenced.
    EXPECT_TRUE(WaitFrees(&log, 1)) << log.frees.load();
    ws_proc_unref(p);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(log.frees.load(), 1);
}

TEST_F(ProcTest, WrapperExitHookReportsOom)
{
    WrapLog log;
    log.report_oom = true;
    const char *wargv[] = {"/bin/sh", "-c", "exit 137", nullptr};
    struct ws_proc_wrapper w = MakeWrapper(&log, wargv);
    struct ws_proc *p = Spawn({"/bin/true"}, 4096, 0, 0, &w);
    ASSERT_NE(p, nullptr);
    struct ws_proc_result r;
    ASSERT_TRUE(WaitDone(p, 10000, &r));
    EXPECT_EQ(r.cause, WS_CAUSE_OOM);
    EXPECT_EQ(r.exit_code, 137);
    ws_proc_unref(p);
    EXPECT_TRUE(WaitFrees(&log, 1));
}

TEST_F(ProcTest, WrapperSignalHookReplacesTheTreeSignal)
{
    WrapLog log;
    // The wrapper waits for the command (a sleep) and reports 7 after it;
    // had the leader got SIGUSR1 itself, it would have died of it.
    const std::string m = testutil::UniqueSleepArg();
    const std::string wscript = "/bin/sleep " + m + "; exit 7";
    const char *wargv[] = {"/bin/sh", "-c", wscript.c_str(), nullptr};
    struct ws_proc_wrapper w = MakeWrapper(&log, wargv);
    struct ws_proc *p = Spawn({"/bin/sleep", m.c_str()}, 4096, 0, 0, &w);
    ASSERT_NE(p, nullptr);
    pid_t leader = ws_proc_pid(p);
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while (ChildrenNamed(leader, "sleep").empty() && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(ChildrenNamed(leader, "sleep").size(), 1u);

    EXPECT_EQ(ws_proc_signal(p, SIGUSR1), 0);
    struct ws_proc_result r;
    ASSERT_TRUE(WaitDone(p, 10000, &r));
    EXPECT_EQ(r.cause, WS_CAUSE_EXITED);
    EXPECT_EQ(r.exit_code, 7);
    {
        std::lock_guard<std::mutex> l(log.mu);
        ASSERT_EQ(log.signals.size(), 1u);
        EXPECT_EQ(log.signals[0].first, leader);
        EXPECT_EQ(log.signals[0].second, SIGUSR1);
        EXPECT_EQ(log.signal_returns, std::vector<int>{1}); // the sleep alone
        EXPECT_EQ(log.exit_codes, std::vector<int>{7});
    }
    ws_proc_unref(p);
    EXPECT_TRUE(WaitFrees(&log, 1));

    // A graceful kill's SIGTERM goes through the hook too.
    WrapLog log2;
    struct ws_proc_wrapper w2 = MakeWrapper(&log2, wargv);
    p = Spawn({"/bin/sleep", m.c_str()}, 4096, 0, 0, &w2);
    ASSERT_NE(p, nullptr);
    leader = ws_proc_pid(p);
    deadline = Clock::now() + std::chrono::seconds(5);
    while (ChildrenNamed(leader, "sleep").empty() && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(ChildrenNamed(leader, "sleep").size(), 1u);
    ws_proc_kill(p, WS_CAUSE_CANCELLED, true);
    ASSERT_TRUE(WaitDone(p, 10000, &r));
    EXPECT_EQ(r.cause, WS_CAUSE_CANCELLED);
    {
        std::lock_guard<std::mutex> l(log2.mu);
        ASSERT_GE(log2.signals.size(), 1u);
        EXPECT_EQ(log2.signals[0].first, leader);
        EXPECT_EQ(log2.signals[0].second, SIGTERM);
    }
    EXPECT_TRUE(testutil::PidsWithArg(m).empty()) << "a sleep survived";
    ws_proc_unref(p);
    EXPECT_TRUE(WaitFrees(&log2, 1));
}

TEST_F(ProcTest, WrapperArgIsFreedOnceWhenTheSpawnFails)
{
    WrapLog log;
    const char *missing[] = {"/nonexistent/wrapper", nullptr};
    struct ws_proc_wrapper w = MakeWrapper(&log, missing);
    const char *argv[] = {"/bin/true", nullptr};
    const char *envp[] = {nullptr};
    struct ws_proc_config cfg = {};
    cfg.argv = argv;
    cfg.envp = envp;
    cfg.cwd_fd = cwd_;
    cfg.ring_bytes = 4096;
    cfg.wrapper = &w;
    struct ws_proc *p = nullptr;
    EXPECT_EQ(ws_proc_spawn(&env_, &cfg, &p), -ENOENT);
    EXPECT_EQ(p, nullptr);
    EXPECT_EQ(log.frees.load(), 1); // at once, on this thread
    EXPECT_EQ(log.enters.load(), 1);
    EXPECT_EQ(log.leaves.load(), 1);
    EXPECT_EQ(log.spawneds.load(), 1); // after a failed spawn too

    // Refused by the spawn itself: more kept fds than allowed.
    const char *sh[] = {"/bin/sh", "-c", "exit 0", nullptr};
    int many[WS_SPAWN_KEEP_FDS_MAX + 1] = {0, 0, 0, 0, 0};
    w = MakeWrapper(&log, sh);
    w.keep_fds = many;
    w.n_keep_fds = WS_SPAWN_KEEP_FDS_MAX + 1;
    EXPECT_EQ(ws_proc_spawn(&env_, &cfg, &p), -EINVAL);
    EXPECT_EQ(log.frees.load(), 2);

    // The wrapper's own enter hook fails: no leave, nothing started.
    log.enter_error = -EPERM;
    w = MakeWrapper(&log, sh);
    EXPECT_EQ(ws_proc_spawn(&env_, &cfg, &p), -EPERM);
    EXPECT_EQ(p, nullptr);
    EXPECT_EQ(log.frees.load(), 3);
    EXPECT_EQ(log.enters.load(), 3);
    EXPECT_EQ(log.leaves.load(), 2);
    EXPECT_EQ(log.spawneds.load(), 2); // no spawn was tried

    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(log.frees.load(), 3);
}

TEST_F(ProcTest, WrapperGetsKeptFdsAndTheUncontrolledPty)
{
    int pipe_fds[2];
    ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK), 0);
    WrapLog log;
    const char *wargv[] = {"/bin/sh", "-c",        "echo kept >&3; ls /proc/self/fd; exec \"$@\"",
                           "wrap",    "/bin/true", nullptr};
    struct ws_proc_wrapper w = MakeWrapper(&log, wargv);
    w.keep_fds = &pipe_fds[1];
    w.n_keep_fds = 1;
    struct ws_proc *p = Spawn({"/bin/true"}, 4096, 4096, 0, &w);
    close(pipe_fds[1]);
    ASSERT_NE(p, nullptr);
    struct ws_proc_result r;
    ASSERT_TRUE(WaitDone(p, 10000, &r));
    EXPECT_EQ(r.exit_code, 0);
    char buf[64];
    size_t n = ws_proc_capture(p, WS_STREAM_STDOUT, buf, sizeof(buf));
    // ls's own directory fd is 4: nothing but the kept fd besides 0-2.
    EXPECT_EQ(std::string(buf, n), "0\n1\n2\n3\n4\n");
    ssize_t k = read(pipe_fds[0], buf, sizeof(buf));
    EXPECT_EQ(std::string(buf, k > 0 ? (size_t)k : 0), "kept\n");
    close(pipe_fds[0]);
    ws_proc_unref(p);
    EXPECT_TRUE(WaitFrees(&log, 1));

    // pty_noctty: the terminal is the wrapper's stdio but not its
    // controlling terminal (the wrapper hands that to the command).
    WrapLog log2;
    const char *tty_argv[] = {"/bin/sh", "-c", "{ echo x >/dev/tty; } 2>/dev/null || echo no-ctty",
                              nullptr};
    struct ws_proc_wrapper w2 = MakeWrapper(&log2, tty_argv);
    w2.pty_noctty = true;
    p = Spawn({"/bin/true"}, 4096, 4096, 0, &w2, true);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(WaitDone(p, 10000, &r));
    n = ws_proc_capture(p, WS_STREAM_PTY, buf, sizeof(buf));
    EXPECT_EQ(std::string(buf, n), "no-ctty\r\n");
    ws_proc_unref(p);
    EXPECT_TRUE(WaitFrees(&log2, 1));
}

} // namespace
