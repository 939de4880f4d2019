// Tests for server/exec/process.c over a real pump thread, real children
// and the host's process-tree containment: capture, backpressure, replay
// gaps, ending and causes.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/exec/process.h"
}

namespace
{

using Clock = std::chrono::steady_clock;

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
                          uint64_t timeout_ms = 0)
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
    const size_t ring = 64 * 1024;
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
    struct ws_proc *p =
        Spawn({"/bin/sh", "-c", "trap '' TERM; echo before; sleep 1000.4242 & sleep 1000.4242"},
              4096, 4096, 200);
    ASSERT_NE(p, nullptr);
    struct ws_proc_result r;
    ASSERT_TRUE(WaitDone(p, 15000, &r));
    EXPECT_EQ(r.cause, WS_CAUSE_TIMEOUT);
    EXPECT_EQ(r.signal, SIGKILL); // TERM was ignored: the grace ran out
    char buf[64];
    size_t n = ws_proc_capture(p, WS_STREAM_STDOUT, buf, sizeof(buf));
    EXPECT_EQ(std::string(buf, n), "before\n");
    EXPECT_EQ(system("pgrep -f 'sleep 1000[.]4242' >/dev/null"), 256) << "a sleep survived";
    ws_proc_unref(p);
}

TEST_F(ProcTest, WhatTheLeaderLeftRunningIsEnded)
{
    auto t0 = Clock::now();
    struct ws_proc *p =
        Spawn({"/bin/sh", "-c", "setsid sleep 1000.4343 & echo hi; exit 7"}, 4096, 4096);
    ASSERT_NE(p, nullptr);
    struct ws_proc_result r;
    ASSERT_TRUE(WaitDone(p, 15000, &r));
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
    EXPECT_EQ(r.cause, WS_CAUSE_EXITED);
    EXPECT_EQ(r.exit_code, 7);
    EXPECT_EQ(system("pgrep -f 'sleep 1000[.]4343' >/dev/null"), 256) << "a sleep survived";
    ws_proc_unref(p);
}

TEST_F(ProcTest, FirstCauseWinsAndSignalKillIsSignaled)
{
    struct ws_proc *p = Spawn({"/bin/sleep", "1000.4444"}, 4096, 0);
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

} // namespace
