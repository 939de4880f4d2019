// Tests for server/base/{io,time,macros}.h. The signal tests interrupt a
// thread that is known to be asleep in the system call under test (read
// from /proc/self/task/<tid>/syscall), with a handler installed without
// SA_RESTART, so the kernel really returns EINTR or a short count there;
// a control test shows the bare call does fail that way.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/base/io.h"
#include "server/base/macros.h"
#include "server/base/time.h"
#include "tests/unit/base/elementsof_c.h"
}

namespace
{

constexpr int kWaitMs = 10000; // bound on every wait for a condition

std::atomic<int> g_signals{0};
std::atomic<int64_t> g_signal_at_ns{0};

void OnSignal(int)
{
    g_signals.fetch_add(1);
    g_signal_at_ns.store(ws_mono_ns());
}

// SIGUSR1 with a handler and no SA_RESTART: a blocking call it interrupts
// fails with EINTR (or returns what it moved so far).
class SignalTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = OnSignal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = 0;
        ASSERT_EQ(sigaction(SIGUSR1, &sa, &old_), 0);
        // A failed test closes the pipe under a blocked writer (below).
        signal(SIGPIPE, SIG_IGN);
        g_signals = 0;
        g_signal_at_ns = 0;
        ASSERT_EQ(pipe2(p_, O_CLOEXEC), 0);
    }
    void TearDown() override
    {
        Stop();
        sigaction(SIGUSR1, &old_, nullptr);
        signal(SIGPIPE, SIG_DFL);
    }

    // Closing both ends wakes a thread a failed test left blocked in read
    // (EOF) or write (EPIPE), so it can be joined.
    void Stop()
    {
        for (int &fd : p_)
            if (fd >= 0)
                close(fd), fd = -1;
        if (t_.joinable())
            t_.join();
    }
    // Declared after the variables the thread uses, so that a failed
    // assertion stops the thread before they go out of scope.
    struct StopOnExit {
        SignalTest *test;
        ~StopOnExit()
        {
            test->Stop();
        }
    };

    // True once thread `tid` sleeps inside system call `nr`. The kernel
    // shows the number only while the thread is blocked ("running" else).
    static bool BlockedIn(pid_t tid, long nr)
    {
        std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/syscall");
        std::string first;
        f >> first;
        return first == std::to_string(nr);
    }
    static bool WaitBlockedIn(pid_t tid, long nr, long nr2 = -1)
    {
        for (int i = 0; i < kWaitMs; i++) {
            if (BlockedIn(tid, nr) || (nr2 >= 0 && BlockedIn(tid, nr2)))
                return true;
            usleep(1000);
        }
        return false;
    }
    static bool WaitSignals(int n)
    {
        for (int i = 0; i < kWaitMs && g_signals.load() < n; i++)
            usleep(1000);
        return g_signals.load() >= n;
    }
    // Bytes waiting in the pipe.
    int Queued() const
    {
        int n = -1;
        EXPECT_EQ(ioctl(p_[0], FIONREAD, &n), 0);
        return n;
    }
    bool WaitQueued(int want) const
    {
        for (int i = 0; i < kWaitMs; i++) {
            if (Queued() == want)
                return true;
            usleep(1000);
        }
        return false;
    }

    struct sigaction old_;
    int p_[2] = {-1, -1};
    std::thread t_;
};

pid_t Tid()
{
    return (pid_t)syscall(SYS_gettid);
}

TEST(ReadAll, StopsAtEndOfFile)
{
    int p[2];
    ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
    ASSERT_EQ(write(p[1], "abcde", 5), 5);
    close(p[1]);
    char buf[12];
    EXPECT_EQ(ws_read_all(p[0], buf, sizeof(buf)), 5);
    EXPECT_EQ(std::string(buf, 5), "abcde");
    EXPECT_EQ(ws_read_all(p[0], buf, sizeof(buf)), 0);
    close(p[0]);
}

TEST(ReadAll, ReportsErrorsAsNegativeErrno)
{
    char buf[4];
    EXPECT_EQ(ws_read_all(-1, buf, sizeof(buf)), -EBADF);
    EXPECT_EQ(ws_write_all(-1, buf, sizeof(buf)), -EBADF);
    int p[2];
    ASSERT_EQ(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
    EXPECT_EQ(ws_read_all(p[0], buf, sizeof(buf)), -EAGAIN);
    close(p[0]);
    close(p[1]);
}

TEST(PreadAll, ReadsAndWritesAtAnOffsetLeavingTheFileOffsetAlone)
{
    const char *dir = getenv("TEST_TMPDIR");
    std::string path = std::string(dir ? dir : "/tmp") + "/preadXXXXXX";
    std::vector<char> name(path.begin(), path.end());
    name.push_back('\0');
    int fd = mkstemp(name.data());
    ASSERT_GE(fd, 0);
    unlink(name.data());

    ASSERT_EQ(ws_pwrite_all(fd, "0123456789", 10, 0), 0);
    ASSERT_EQ(ws_pwrite_all(fd, "abc", 3, 4), 0);
    EXPECT_EQ(lseek(fd, 0, SEEK_CUR), 0);
    char buf[16] = {0};
    EXPECT_EQ(ws_pread_all(fd, buf, 6, 2), 6);
    EXPECT_EQ(std::string(buf, 6), "23abc7");
    // Past the end: what there is, then 0.
    EXPECT_EQ(ws_pread_all(fd, buf, 16, 7), 3);
    EXPECT_EQ(std::string(buf, 3), "789");
    EXPECT_EQ(ws_pread_all(fd, buf, 16, 10), 0);
    EXPECT_EQ(lseek(fd, 0, SEEK_CUR), 0);
    close(fd);
}

// The control: without a retry, the same setup does fail with EINTR, so the
// tests below really go through the retry.
TEST_F(SignalTest, BareReadFailsWithEintr)
{
    std::atomic<pid_t> tid{0};
    std::atomic<ssize_t> n{0};
    std::atomic<int> err{0};
    StopOnExit stop{this};
    t_ = std::thread([&] {
        char c;
        tid = Tid();
        n = read(p_[0], &c, 1);
        err = errno;
    });
    while (tid.load() == 0)
        std::this_thread::yield();
    ASSERT_TRUE(WaitBlockedIn(tid, SYS_read));
    ASSERT_EQ(pthread_kill(t_.native_handle(), SIGUSR1), 0);
    t_.join();
    EXPECT_EQ(n.load(), -1);
    EXPECT_EQ(err.load(), EINTR);
}

TEST_F(SignalTest, ReadAllCollectsShortReads)
{
    char buf[16] = {0};
    std::atomic<ssize_t> got{-1};
    StopOnExit stop{this};
    t_ = std::thread([&] { got = ws_read_all(p_[0], buf, 12); });

    // Each piece is written only after the reader took the previous one
    // out of the pipe, so every read() inside returns less than asked.
    const char *pieces[] = {"hello", " wor", "ld!"};
    for (const char *piece : pieces) {
        ASSERT_EQ(write(p_[1], piece, strlen(piece)), (ssize_t)strlen(piece));
        ASSERT_TRUE(WaitQueued(0));
    }
    t_.join();
    EXPECT_EQ(got.load(), 12);
    EXPECT_EQ(std::string(buf, 12), "hello world!");
}

TEST_F(SignalTest, ReadAllCompletesAcrossASignal)
{
    std::atomic<pid_t> tid{0};
    std::atomic<ssize_t> got{-1};
    char buf[8] = {0};
    StopOnExit stop{this};
    t_ = std::thread([&] {
        tid = Tid();
        got = ws_read_all(p_[0], buf, 8);
    });
    while (tid.load() == 0)
        std::this_thread::yield();

    // Interrupted with nothing read: read() fails with EINTR.
    ASSERT_TRUE(WaitBlockedIn(tid, SYS_read));
    ASSERT_EQ(pthread_kill(t_.native_handle(), SIGUSR1), 0);
    ASSERT_TRUE(WaitSignals(1));
    // Back in read() after the retry; half the data, then interrupted again.
    ASSERT_TRUE(WaitBlockedIn(tid, SYS_read));
    ASSERT_EQ(write(p_[1], "1234", 4), 4);
    ASSERT_TRUE(WaitQueued(0));
    ASSERT_TRUE(WaitBlockedIn(tid, SYS_read));
    ASSERT_EQ(pthread_kill(t_.native_handle(), SIGUSR1), 0);
    ASSERT_TRUE(WaitSignals(2));
    ASSERT_TRUE(WaitBlockedIn(tid, SYS_read));
    ASSERT_EQ(write(p_[1], "5678", 4), 4);
    t_.join();
    EXPECT_EQ(got.load(), 8);
    EXPECT_EQ(std::string(buf, 8), "12345678");
}

TEST_F(SignalTest, WriteAllCompletesAcrossASignal)
{
    // A one-page pipe, filled, so the writer blocks before it moves a byte.
    int cap = fcntl(p_[1], F_SETPIPE_SZ, 4096);
    ASSERT_GT(cap, 0);
    std::string fill((size_t)cap, 'f');
    ASSERT_EQ(write(p_[1], fill.data(), fill.size()), (ssize_t)fill.size());

    std::string msg;
    for (int i = 0; msg.size() < (size_t)cap * 4; i++)
        msg += std::to_string(i) + ",";
    std::atomic<pid_t> tid{0};
    std::atomic<int> r{1};
    StopOnExit stop{this};
    t_ = std::thread([&] {
        tid = Tid();
        r = ws_write_all(p_[1], msg.data(), msg.size());
    });
    while (tid.load() == 0)
        std::this_thread::yield();

    // Interrupted before it wrote anything: write() fails with EINTR.
    ASSERT_TRUE(WaitBlockedIn(tid, SYS_write));
    ASSERT_EQ(pthread_kill(t_.native_handle(), SIGUSR1), 0);
    ASSERT_TRUE(WaitSignals(1));
    ASSERT_TRUE(WaitBlockedIn(tid, SYS_write));
    std::string out((size_t)cap, '\0');
    ASSERT_EQ(read(p_[0], out.data(), out.size()), (ssize_t)cap);
    EXPECT_EQ(out, fill);

    // Interrupted after it filled the pipe again in the same call: write()
    // returns the short count.
    ASSERT_TRUE(WaitQueued(cap));
    ASSERT_TRUE(WaitBlockedIn(tid, SYS_write));
    ASSERT_EQ(pthread_kill(t_.native_handle(), SIGUSR1), 0);
    ASSERT_TRUE(WaitSignals(2));

    std::string got;
    got.resize(msg.size());
    ASSERT_EQ(ws_read_all(p_[0], got.data(), got.size()), (ssize_t)msg.size());
    t_.join();
    EXPECT_EQ(r.load(), 0);
    EXPECT_EQ(got, msg);
}

TEST_F(SignalTest, RetryEintrRepeatsOnlyOnEintr)
{
    std::atomic<pid_t> tid{0};
    std::atomic<ssize_t> n{0};
    char c = 0;
    StopOnExit stop{this};
    t_ = std::thread([&] {
        tid = Tid();
        n = WS_RETRY_EINTR(read(p_[0], &c, 1));
    });
    while (tid.load() == 0)
        std::this_thread::yield();
    ASSERT_TRUE(WaitBlockedIn(tid, SYS_read));
    ASSERT_EQ(pthread_kill(t_.native_handle(), SIGUSR1), 0);
    ASSERT_TRUE(WaitSignals(1));
    ASSERT_TRUE(WaitBlockedIn(tid, SYS_read));
    ASSERT_EQ(write(p_[1], "x", 1), 1);
    t_.join();
    EXPECT_EQ(n.load(), 1);
    EXPECT_EQ(c, 'x');

    // Any other error comes back at once, with errno.
    errno = 0;
    EXPECT_EQ(WS_RETRY_EINTR(close(-1)), -1);
    EXPECT_EQ(errno, EBADF);
}

TEST_F(SignalTest, SleepLastsItsWholeTimeAcrossASignal)
{
    constexpr int64_t kSleepMs = 1000;
    std::atomic<pid_t> tid{0};
    std::atomic<int64_t> start{0}, end{0};
    StopOnExit stop{this};
    t_ = std::thread([&] {
        tid = Tid();
        start = ws_mono_ns();
        ws_sleep_ms(kSleepMs);
        end = ws_mono_ns();
    });
    while (tid.load() == 0)
        std::this_thread::yield();
    // glibc's nanosleep is the clock_nanosleep system call.
    ASSERT_TRUE(WaitBlockedIn(tid, SYS_clock_nanosleep, SYS_nanosleep));
    ASSERT_EQ(pthread_kill(t_.native_handle(), SIGUSR1), 0);
    t_.join();
    ASSERT_EQ(g_signals.load(), 1);
    // The signal came during the sleep, and the sleep still lasted it all.
    EXPECT_LT(g_signal_at_ns.load(), end.load());
    EXPECT_GE(end.load() - start.load(), kSleepMs * WS_NSEC_PER_MSEC);
}

TEST(Time, ClocksReadTheirKernelClocks)
{
    struct timespec ts;
    ASSERT_EQ(clock_gettime(CLOCK_MONOTONIC, &ts), 0);
    int64_t before = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    int64_t mono = ws_mono_ns();
    EXPECT_GE(mono, before);
    EXPECT_GE(ws_mono_us(), mono / 1000);
    EXPECT_GE(ws_mono_ms(), mono / 1000000);
    // Wall time is Unix time, the monotonic clock is not.
    int64_t wall_before = (int64_t)time(nullptr);
    int64_t wall_ms = ws_wall_ms();
    EXPECT_GE(wall_ms / 1000, wall_before);
    EXPECT_LE(wall_ms / 1000, (int64_t)time(nullptr));
    EXPECT_GE(ws_wall_ns() / 1000000, wall_ms);
}

TEST(Time, AbstimeIsAWallClockDeadlineForADefaultCondvar)
{
    struct timespec ts;
    int64_t now = ws_wall_ns();
    ws_abstime_after_ms(1500, &ts);
    int64_t at = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    EXPECT_GE(at, now + 1500 * WS_NSEC_PER_MSEC);
    EXPECT_LE(at, ws_wall_ns() + 1500 * WS_NSEC_PER_MSEC);
    EXPECT_GE(ts.tv_nsec, 0);
    EXPECT_LT(ts.tv_nsec, 1000000000);

    // A default condition variable times out at it, and not before.
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
    ws_abstime_after_ms(20, &ts);
    at = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    pthread_mutex_lock(&mu);
    int r;
    do
        r = pthread_cond_timedwait(&cond, &mu, &ts);
    while (r == 0);
    pthread_mutex_unlock(&mu);
    EXPECT_EQ(r, ETIMEDOUT);
    EXPECT_GE(ws_wall_ns(), at);
}

TEST(ElementsOf, CountsElementsInC)
{
    EXPECT_EQ(ws_test_elementsof_ints(), 7u);
    EXPECT_EQ(ws_test_elementsof_structs(), 3u);
    EXPECT_EQ(ws_test_elementsof_rows(), 5u);
    EXPECT_EQ(ws_test_elementsof_string(), 6u); // "hello" and its NUL
    EXPECT_EQ(ws_test_elementsof_static_bound(), 14u);
}

TEST(ElementsOf, CountsElementsInCxx)
{
    const char *names[] = {"a", "b", "c"};
    long grid[4][9];
    static_assert(WS_ELEMENTSOF(grid) == 4, "rows");
    static_assert(WS_ELEMENTSOF(grid[0]) == 9, "columns");
    EXPECT_EQ(WS_ELEMENTSOF(names), 3u);
    (void)grid;
}

} // namespace
