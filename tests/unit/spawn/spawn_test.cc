// Tests for server/posix/spawn.c: every property is checked on a real child
// process (/bin/sh, /bin/cat, /bin/sleep, /usr/bin/env, ...), from its
// output or from /proc/<pid>/ as seen by this process.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/posix/spawn.h"
}

namespace
{

using Clock = std::chrono::steady_clock;

long ElapsedMs(Clock::time_point t0)
{
    return (long)std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

// A temp directory opened as the children's working directory.
class SpawnTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        const char *base = getenv("TEST_TMPDIR");
        std::string tmpl = std::string(base ? base : "/tmp") + "/spawnXXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        ASSERT_NE(mkdtemp(buf.data()), nullptr);
        dir_ = buf.data();
        char real[PATH_MAX];
        ASSERT_NE(realpath(dir_.c_str(), real), nullptr);
        real_dir_ = real;
        dir_fd_ = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(dir_fd_, 0);
    }
    void TearDown() override
    {
        if (dir_fd_ >= 0)
            close(dir_fd_);
        std::string cmd = "rm -rf '" + dir_ + "'";
        (void)system(cmd.c_str());
        // Nothing a test spawned may be left unreaped.
        EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
        EXPECT_EQ(errno, ECHILD);
    }

    struct Spec {
        std::vector<std::string> argv;
        std::vector<std::string> env = {"PATH=/usr/bin:/bin"};
        bool stdin_pipe = false;
        bool pty = false;
        unsigned rows = 0, cols = 0;
        bool pty_noctty = false;
        std::vector<int> keep = {}; // the child's 3, 4, ...
        bool output_null = false;
    };

    int Spawn(const Spec &s, ws_child **ret)
    {
        std::vector<const char *> argv, envp;
        for (auto &a : s.argv)
            argv.push_back(a.c_str());
        argv.push_back(nullptr);
        for (auto &e : s.env)
            envp.push_back(e.c_str());
        envp.push_back(nullptr);
        ws_spawn_opts o = {};
        o.argv = argv.data();
        o.envp = envp.data();
        o.cwd_fd = dir_fd_;
        o.stdin_mode = s.stdin_pipe ? WS_SPAWN_STDIN_PIPE : WS_SPAWN_STDIN_NULL;
        o.pty = s.pty;
        o.pty_rows = s.rows;
        o.pty_cols = s.cols;
        o.pty_noctty = s.pty_noctty;
        o.keep_fds = s.keep.empty() ? nullptr : s.keep.data();
        o.n_keep_fds = s.keep.size();
        o.output_null = s.output_null;
        return ws_spawn(&o, ret);
    }

    ws_child *MustSpawn(const Spec &s)
    {
        ws_child *c = nullptr;
        int r = Spawn(s, &c);
        EXPECT_EQ(r, 0) << strerror(-r);
        return c;
    }

    std::string dir_, real_dir_;
    int dir_fd_ = -1;
};

// Reads a non-blocking fd until EOF (or EIO, a PTY master whose slave is
// gone) or the timeout.
std::string ReadAll(int fd, int timeout_ms = 10000)
{
    std::string out;
    auto t0 = Clock::now();
    for (;;) {
        char buf[4096];
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n > 0) {
            out.append(buf, (size_t)n);
            continue;
        }
        if (n == 0 || (n < 0 && errno == EIO))
            return out;
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            ADD_FAILURE() << "read: " << strerror(errno);
            return out;
        }
        long left = timeout_ms - ElapsedMs(t0);
        if (left <= 0) {
            ADD_FAILURE() << "timed out reading, got so far: " << out;
            return out;
        }
        struct pollfd p = {fd, POLLIN, 0};
        poll(&p, 1, (int)left);
    }
}

// Waits (pidfd) for the leader to exit and reaps it.
ws_child_exit WaitExit(ws_child *c, int timeout_ms = 10000)
{
    struct pollfd p = {ws_child_pidfd(c), POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, timeout_ms), 1) << "child did not exit";
    ws_child_exit e = {};
    EXPECT_EQ(ws_child_try_reap(c, &e), 0);
    return e;
}

// Every process (zombies included) whose process group is `pgid`.
std::vector<pid_t> GroupMembers(pid_t pgid)
{
    std::vector<pid_t> out;
    DIR *d = opendir("/proc");
    if (!d)
        return out;
    while (struct dirent *de = readdir(d)) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        std::ifstream f(std::string("/proc/") + de->d_name + "/stat");
        std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        size_t rp = stat.rfind(')');
        if (rp == std::string::npos)
            continue;
        std::istringstream rest(stat.substr(rp + 1));
        std::string state;
        long ppid = 0, pgrp = 0;
        rest >> state >> ppid >> pgrp;
        if (pgrp == pgid)
            out.push_back((pid_t)pid);
    }
    closedir(d);
    return out;
}

// Waits until the group has at least n members.
bool WaitGroupSize(pid_t pgid, size_t n, int timeout_ms = 5000)
{
    auto t0 = Clock::now();
    while (ElapsedMs(t0) < timeout_ms) {
        if (GroupMembers(pgid).size() >= n)
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
}

std::string StatusField(pid_t pid, const std::string &key)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind(key + ":", 0) == 0) {
            std::string v = line.substr(key.size() + 1);
            v.erase(0, v.find_first_not_of(" \t"));
            return v;
        }
    return "";
}

std::set<std::string> FdNames(const std::string &dir)
{
    std::set<std::string> out;
    DIR *d = opendir(dir.c_str());
    if (!d)
        return out;
    while (struct dirent *de = readdir(d))
        if (de->d_name[0] != '.')
            out.insert(de->d_name);
    closedir(d);
    return out;
}

size_t CountOwnFds()
{
    // opendir's own fd is in the listing; it is there both times.
    return FdNames("/proc/self/fd").size();
}

bool IsNonblockCloexec(int fd)
{
    int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
    return fl >= 0 && fdfl >= 0 && (fl & O_NONBLOCK) && (fdfl & FD_CLOEXEC);
}

TEST_F(SpawnTest, StdoutAndStderrAreSeparatePipes)
{
    ws_child *c = MustSpawn({{"/bin/sh", "-c", "echo out; echo err >&2; echo out2; exit 3"}});
    ASSERT_NE(c, nullptr);
    EXPECT_GE(ws_child_stdout_fd(c), 0);
    EXPECT_GE(ws_child_stderr_fd(c), 0);
    EXPECT_EQ(ws_child_stdin_fd(c), -1);
    EXPECT_EQ(ws_child_pty_fd(c), -1);
    EXPECT_TRUE(IsNonblockCloexec(ws_child_stdout_fd(c)));
    EXPECT_TRUE(IsNonblockCloexec(ws_child_stderr_fd(c)));
    EXPECT_TRUE(fcntl(ws_child_pidfd(c), F_GETFD) & FD_CLOEXEC);
    EXPECT_EQ(ReadAll(ws_child_stdout_fd(c)), "out\nout2\n");
    EXPECT_EQ(ReadAll(ws_child_stderr_fd(c)), "err\n");
    ws_child_exit e = WaitExit(c);
    EXPECT_FALSE(e.signaled);
    EXPECT_EQ(e.exit_code, 3);
    EXPECT_GT(e.max_rss_kib, 0u);
    ws_child_free(c);
}

// output_null: both go to /dev/null, the parent has no ends, and a child
// that writes far more than a pipe holds never blocks on them.
TEST_F(SpawnTest, OutputNullDiscardsWithoutBlocking)
{
    Spec s;
    s.argv = {"/bin/sh", "-c",
              "test \"$(readlink /proc/$$/fd/1)\" = /dev/null || exit 1; "
              "test \"$(readlink /proc/$$/fd/2)\" = /dev/null || exit 2; "
              "head -c 1000000 /dev/zero; head -c 1000000 /dev/zero >&2; exit 3"};
    s.output_null = true;
    ws_child *c = MustSpawn(s);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(ws_child_stdout_fd(c), -1);
    EXPECT_EQ(ws_child_stderr_fd(c), -1);
    ws_child_exit e = WaitExit(c);
    EXPECT_FALSE(e.signaled);
    EXPECT_EQ(e.exit_code, 3);
    ws_child_free(c);

    s.pty = true;
    ws_child *p = nullptr;
    EXPECT_EQ(Spawn(s, &p), -EINVAL);
    EXPECT_EQ(p, nullptr);
}

TEST_F(SpawnTest, EnvironmentIsExactlyEnvp)
{
    setenv("WS_SPAWN_TEST_LEAK", "must-not-appear", 1);
    ws_child *c = MustSpawn({{"/usr/bin/env"}, {"A=1", "B=two words", "EMPTY="}});
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(ReadAll(ws_child_stdout_fd(c)), "A=1\nB=two words\nEMPTY=\n");
    EXPECT_EQ(WaitExit(c).exit_code, 0);
    ws_child_free(c);

    c = MustSpawn({{"/usr/bin/env"}, {}});
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(ReadAll(ws_child_stdout_fd(c)), "");
    ws_child_free(c);
    unsetenv("WS_SPAWN_TEST_LEAK");
}

TEST_F(SpawnTest, WorkingDirectoryIsTheDirFd)
{
    char own[PATH_MAX];
    ASSERT_NE(getcwd(own, sizeof(own)), nullptr);
    ASSERT_NE(real_dir_, own);
    ws_child *c = MustSpawn({{"/bin/pwd", "-P"}});
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(ReadAll(ws_child_stdout_fd(c)), real_dir_ + "\n");
    ws_child_free(c);
}

TEST_F(SpawnTest, OnlyFdsZeroToTwoReachTheChild)
{
    // Non-CLOEXEC fds on purpose: only closefrom(3) keeps them out.
    int extra = open("/dev/null", O_RDONLY);
    int p[2];
    ASSERT_GE(extra, 0);
    ASSERT_EQ(pipe(p), 0);
    int high = fcntl(extra, F_DUPFD, 200);
    ASSERT_GE(high, 200);

    ws_child *c = MustSpawn({{"/bin/sleep", "100"}});
    ASSERT_NE(c, nullptr);
    pid_t pid = ws_child_pid(c);
    // posix_spawn returns after the exec: this is the fd table sleep got.
    std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    EXPECT_EQ(FdNames(dir), (std::set<std::string>{"0", "1", "2"}));
    char target[PATH_MAX] = {};
    ASSERT_GT(readlink((dir + "/0").c_str(), target, sizeof(target) - 1), 0);
    EXPECT_STREQ(target, "/dev/null");

    // The same, as the child itself sees it through a shell.
    ws_child *c2 = MustSpawn({{"/bin/sh", "-c", "ls /proc/self/fd"}});
    ASSERT_NE(c2, nullptr);
    // ls lists its own directory fd (3) too; nothing else may be there.
    EXPECT_EQ(ReadAll(ws_child_stdout_fd(c2)), "0\n1\n2\n3\n");
    ws_child_free(c2);

    EXPECT_EQ(ws_child_kill_tree(c, 0), 0);
    ws_child_free(c);
    close(extra);
    close(high);
    close(p[0]);
    close(p[1]);
}

TEST_F(SpawnTest, StdinIsDevNullByDefault)
{
    ws_child *c = MustSpawn({{"/bin/cat"}});
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(ReadAll(ws_child_stdout_fd(c), 5000), "");
    ws_child_exit e = WaitExit(c, 5000);
    EXPECT_FALSE(e.signaled);
    EXPECT_EQ(e.exit_code, 0);
    EXPECT_EQ(ws_child_close_stdin(c), -EBADF);
    ws_child_free(c);
}

TEST_F(SpawnTest, StdinPipeWhenAsked)
{
    Spec s{{"/bin/cat"}};
    s.stdin_pipe = true;
    ws_child *c = MustSpawn(s);
    ASSERT_NE(c, nullptr);
    int in = ws_child_stdin_fd(c);
    ASSERT_GE(in, 0);
    EXPECT_TRUE(IsNonblockCloexec(in));
    const char msg[] = "hello through a pipe\n";
    ASSERT_EQ(write(in, msg, sizeof(msg) - 1), (ssize_t)sizeof(msg) - 1);
    // cat is still running: it has not seen EOF yet.
    ws_child_exit e;
    EXPECT_EQ(ws_child_try_reap(c, &e), -EAGAIN);
    EXPECT_EQ(ws_child_close_stdin(c), 0);
    EXPECT_EQ(ws_child_stdin_fd(c), -1);
    EXPECT_EQ(ws_child_close_stdin(c), 0);
    EXPECT_EQ(ReadAll(ws_child_stdout_fd(c)), msg);
    EXPECT_EQ(WaitExit(c).exit_code, 0);
    ws_child_free(c);
}

TEST_F(SpawnTest, SignalMaskAndDispositionsAreReset)
{
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &block, &old), 0);
    struct sigaction ign = {}, old_int, old_pipe;
    ign.sa_handler = SIG_IGN;
    ASSERT_EQ(sigaction(SIGINT, &ign, &old_int), 0);
    ASSERT_EQ(sigaction(SIGPIPE, &ign, &old_pipe), 0);
    // The test process really has them blocked / ignored.
    EXPECT_NE(StatusField(getpid(), "SigIgn"), "0000000000000000");

    ws_child *c = MustSpawn({{"/bin/sleep", "100"}});

    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGPIPE, &old_pipe, nullptr);
    ASSERT_NE(c, nullptr);

    pid_t pid = ws_child_pid(c);
    EXPECT_EQ(StatusField(pid, "SigBlk"), "0000000000000000");
    EXPECT_EQ(StatusField(pid, "SigIgn"), "0000000000000000");
    // And so SIGTERM alone ends it.
    EXPECT_EQ(ws_child_signal(c, SIGTERM), 0);
    ws_child_exit e = WaitExit(c, 5000);
    EXPECT_TRUE(e.signaled);
    EXPECT_EQ(e.signal, SIGTERM);
    ws_child_free(c);
}

TEST_F(SpawnTest, ChildLeadsItsOwnSessionAndGroup)
{
    ws_child *c = MustSpawn({{"/bin/sleep", "100"}});
    ASSERT_NE(c, nullptr);
    pid_t pid = ws_child_pid(c);
    EXPECT_EQ(getsid(pid), pid);
    EXPECT_EQ(getpgid(pid), pid);
    EXPECT_NE(getsid(0), pid);
    // No PTY asked: no controlling terminal (tty_nr field 7 is 0).
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::istringstream rest(stat.substr(stat.rfind(')') + 1));
    std::string state;
    long ppid, pgrp, sid, tty_nr;
    rest >> state >> ppid >> pgrp >> sid >> tty_nr;
    EXPECT_EQ(ppid, getpid());
    EXPECT_EQ(sid, pid);
    EXPECT_EQ(tty_nr, 0);
    ws_child_free(c);
}

TEST_F(SpawnTest, PtyIsTheControllingTerminal)
{
    Spec s{{"/bin/sh", "-c", "tty; stty size; echo via-dev-tty >/dev/tty && echo ctty-ok"}};
    s.pty = true;
    s.rows = 33;
    s.cols = 101;
    ws_child *c = MustSpawn(s);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(ws_child_stdout_fd(c), -1);
    EXPECT_EQ(ws_child_stderr_fd(c), -1);
    EXPECT_EQ(ws_child_stdin_fd(c), -1);
    int m = ws_child_pty_fd(c);
    ASSERT_GE(m, 0);
    EXPECT_TRUE(IsNonblockCloexec(m));
    EXPECT_EQ(getsid(ws_child_pid(c)), ws_child_pid(c));
    std::string out = ReadAll(m);
    EXPECT_EQ(out.rfind("/dev/pts/", 0), 0u) << out;
    EXPECT_NE(out.find("\n33 101\r\n"), std::string::npos) << out;
    EXPECT_NE(out.find("via-dev-tty\r\nctty-ok\r\n"), std::string::npos) << out;
    EXPECT_EQ(WaitExit(c).exit_code, 0);
    ws_child_free(c);
}

TEST_F(SpawnTest, PtyResizeReachesTheChild)
{
    Spec s{{"/bin/sh", "-c", "stty size; read x; stty size"}};
    s.pty = true;
    ws_child *c = MustSpawn(s);
    ASSERT_NE(c, nullptr);
    int m = ws_child_pty_fd(c);
    // Wait for the first size (the default) before resizing.
    std::string out;
    auto t0 = Clock::now();
    while (out.find("24 80\r\n") == std::string::npos && ElapsedMs(t0) < 5000) {
        char buf[256];
        ssize_t n = read(m, buf, sizeof(buf));
        if (n > 0)
            out.append(buf, (size_t)n);
        else
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_NE(out.find("24 80\r\n"), std::string::npos) << out;
    EXPECT_EQ(ws_child_resize(c, 50, 132), 0);
    EXPECT_EQ(ws_child_resize(c, 0, 132), -EINVAL);
    EXPECT_EQ(ws_child_resize(c, 50, WS_SPAWN_PTY_DIM_MAX + 1), -EINVAL);
    ASSERT_EQ(write(m, "go\n", 3), 3);
    out = ReadAll(m);
    EXPECT_NE(out.find("50 132\r\n"), std::string::npos) << out;
    EXPECT_EQ(WaitExit(c).exit_code, 0);
    ws_child_free(c);
}

TEST_F(SpawnTest, ResizeWithoutPtyIsNotATty)
{
    ws_child *c = MustSpawn({{"/bin/sleep", "100"}});
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(ws_child_resize(c, 24, 80), -ENOTTY);
    ws_child_free(c);
}

TEST_F(SpawnTest, KillTreeEndsTheWholeGroupAndReaps)
{
    ws_child *c = MustSpawn({{"/bin/sh", "-c", "sleep 100 & sleep 100 & wait"}});
    ASSERT_NE(c, nullptr);
    pid_t pid = ws_child_pid(c);
    ASSERT_TRUE(WaitGroupSize(pid, 3));
    EXPECT_EQ(ws_child_kill_tree(c, 5000), 0);
    // SIGTERM was enough (the leader's status below says so); timings are
    // not asserted, the machine may be slow.
    EXPECT_TRUE(GroupMembers(pid).empty());
    EXPECT_EQ(kill(-pid, 0), -1);
    EXPECT_EQ(errno, ESRCH);
    ws_child_exit e = {};
    EXPECT_EQ(ws_child_try_reap(c, &e), 0);
    EXPECT_TRUE(e.signaled);
    EXPECT_EQ(e.signal, SIGTERM);
    // Once the group is gone, nothing is signalled any more.
    EXPECT_EQ(ws_child_signal(c, SIGKILL), -ESRCH);
    EXPECT_EQ(ws_child_kill_tree(c, 100), 0);
    ws_child_free(c);
}

TEST_F(SpawnTest, KillTreeSigkillsWhatIgnoresSigterm)
{
    ws_child *c = MustSpawn({{"/bin/sh", "-c", "trap '' TERM; sleep 100; sleep 100"}});
    ASSERT_NE(c, nullptr);
    pid_t pid = ws_child_pid(c);
    // The sleep exists only once the trap is in place.
    ASSERT_TRUE(WaitGroupSize(pid, 2));
    const int grace = 300;
    auto t0 = Clock::now();
    EXPECT_EQ(ws_child_kill_tree(c, grace), 0);
    // The grace was honoured before SIGKILL (a lower bound only: no upper
    // bound is asserted on a noisy machine).
    EXPECT_GE(ElapsedMs(t0), grace);
    EXPECT_TRUE(GroupMembers(pid).empty());
    ws_child_exit e = {};
    EXPECT_EQ(ws_child_try_reap(c, &e), 0);
    EXPECT_TRUE(e.signaled);
    EXPECT_EQ(e.signal, SIGKILL);
    ws_child_free(c);
}

TEST_F(SpawnTest, SignalReachesTheGroupAfterTheLeaderExited)
{
    ws_child *c = MustSpawn({{"/bin/sh", "-c", "sleep 100 & echo started"}});
    ASSERT_NE(c, nullptr);
    pid_t pid = ws_child_pid(c);
    ws_child_exit e = WaitExit(c);
    EXPECT_EQ(e.exit_code, 0);
    // The leader is reaped; its background sleep lives on in the group.
    std::vector<pid_t> left = GroupMembers(pid);
    ASSERT_EQ(left.size(), 1u);
    EXPECT_EQ(ws_child_signal(c, 0), 0);
    EXPECT_EQ(ws_child_signal(c, SIGKILL), 0);
    EXPECT_EQ(ws_child_kill_tree(c, 1000), 0);
    EXPECT_TRUE(GroupMembers(pid).empty());
    EXPECT_EQ(ws_child_signal(c, 0), -ESRCH);
    ws_child_free(c);
}

TEST_F(SpawnTest, FreeKillsAGroupLeftBehind)
{
    ws_child *c = MustSpawn({{"/bin/sh", "-c", "sleep 100 & sleep 100"}});
    ASSERT_NE(c, nullptr);
    pid_t pid = ws_child_pid(c);
    ASSERT_TRUE(WaitGroupSize(pid, 3));
    ws_child_free(c);
    EXPECT_TRUE(GroupMembers(pid).empty());
    ws_child_free(nullptr);
}

TEST_F(SpawnTest, ExitCodesAndSignalsAreReported)
{
    ws_child *c = MustSpawn({{"/bin/sh", "-c", "exit 42"}});
    ASSERT_NE(c, nullptr);
    ws_child_exit e = WaitExit(c);
    EXPECT_FALSE(e.signaled);
    EXPECT_EQ(e.exit_code, 42);
    EXPECT_EQ(e.signal, 0);
    // The status is kept: a second call reports the same.
    ws_child_exit again = {};
    EXPECT_EQ(ws_child_try_reap(c, &again), 0);
    EXPECT_EQ(again.exit_code, 42);
    ws_child_free(c);

    c = MustSpawn({{"/bin/sh", "-c", "kill -USR1 $$"}});
    ASSERT_NE(c, nullptr);
    e = WaitExit(c);
    EXPECT_TRUE(e.signaled);
    EXPECT_EQ(e.signal, SIGUSR1);
    EXPECT_EQ(e.exit_code, 0);
    ws_child_free(c);

    c = MustSpawn({{"/bin/sleep", "100"}});
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(ws_child_try_reap(c, &e), -EAGAIN);
    EXPECT_EQ(ws_child_signal(c, SIGKILL), 0);
    e = WaitExit(c);
    EXPECT_TRUE(e.signaled);
    EXPECT_EQ(e.signal, SIGKILL);
    ws_child_free(c);

    // CPU time comes from wait4's rusage.
    c = MustSpawn({{"/bin/sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"}});
    ASSERT_NE(c, nullptr);
    e = WaitExit(c, 60000);
    EXPECT_EQ(e.exit_code, 0);
    EXPECT_GT(e.user_ms + e.sys_ms, 0u);
    EXPECT_GT(e.max_rss_kib, 0u);
    ws_child_free(c);
}

TEST_F(SpawnTest, ExecFailureIsTheReturnValueAndLeavesNothing)
{
    size_t fds = CountOwnFds();
    ws_child *c = nullptr;
    EXPECT_EQ(Spawn({{"/nonexistent/bin/tool"}}, &c), -ENOENT);
    EXPECT_EQ(c, nullptr);
    Spec pty{{"/nonexistent/bin/tool"}};
    pty.pty = true;
    EXPECT_EQ(Spawn(pty, &c), -ENOENT);
    Spec piped{{"/nonexistent/bin/tool"}};
    piped.stdin_pipe = true;
    EXPECT_EQ(Spawn(piped, &c), -ENOENT);

    // A file without execute bits: EACCES even for root.
    std::string noexec = dir_ + "/noexec";
    int fd = open(noexec.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "#!/bin/sh\n", 10), 10);
    close(fd);
    EXPECT_EQ(Spawn({{noexec}}, &c), -EACCES);
    EXPECT_EQ(c, nullptr);

    // Rejected before anything starts.
    EXPECT_EQ(Spawn({{"bin/sh"}}, &c), -EINVAL);
    EXPECT_EQ(Spawn({{}}, &c), -EINVAL);
    Spec big{{"/bin/true"}};
    big.pty = true;
    big.rows = WS_SPAWN_PTY_DIM_MAX + 1;
    EXPECT_EQ(Spawn(big, &c), -EINVAL);
    EXPECT_EQ(c, nullptr);

    EXPECT_EQ(CountOwnFds(), fds);
    // No zombie: the failed children were reaped by posix_spawn.
    EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
    EXPECT_EQ(errno, ECHILD);
}

TEST_F(SpawnTest, BadCwdFdFails)
{
    ws_child *c = nullptr;
    int saved = dir_fd_;
    dir_fd_ = -1;
    EXPECT_EQ(Spawn({{"/bin/true"}}, &c), -EBADF);
    // Open but not a directory: the child's fchdir fails, reported the same
    // way as an exec failure.
    dir_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(dir_fd_, 0);
    EXPECT_EQ(Spawn({{"/bin/true"}}, &c), -ENOTDIR);
    close(dir_fd_);
    dir_fd_ = saved;
    EXPECT_EQ(c, nullptr);
}

TEST_F(SpawnTest, ManySpawnsLeakNoFdsAndNoZombies)
{
    size_t fds = CountOwnFds();
    for (int i = 0; i < 300; i++) {
        Spec s;
        switch (i % 4) {
        case 0:
            s.argv = {"/bin/echo", "round", std::to_string(i)};
            break;
        case 1:
            s.argv = {"/bin/cat"};
            s.stdin_pipe = true;
            break;
        case 2:
            s.argv = {"/bin/echo", "pty"};
            s.pty = true;
            break;
        case 3:
            // Freed while running: free must kill and reap it.
            s.argv = {"/bin/sleep", "100"};
            break;
        }
        ws_child *c = MustSpawn(s);
        ASSERT_NE(c, nullptr);
        if (i % 4 == 0) {
            EXPECT_EQ(ReadAll(ws_child_stdout_fd(c)), "round " + std::to_string(i) + "\n");
            EXPECT_EQ(WaitExit(c).exit_code, 0);
        } else if (i % 4 == 1) {
            EXPECT_EQ(ws_child_close_stdin(c), 0);
            EXPECT_EQ(WaitExit(c).exit_code, 0);
        } else if (i % 4 == 2) {
            EXPECT_EQ(ReadAll(ws_child_pty_fd(c)), "pty\r\n");
            EXPECT_EQ(WaitExit(c).exit_code, 0);
        }
        ws_child_free(c);
    }
    EXPECT_EQ(CountOwnFds(), fds);
    EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
    EXPECT_EQ(errno, ECHILD);
}

// ---- kept fds and pty_noctty ----

std::string LinkOf(const std::string &path)
{
    char buf[PATH_MAX];
    ssize_t n = readlink(path.c_str(), buf, sizeof(buf));
    return n > 0 ? std::string(buf, (size_t)n) : "";
}

std::string FdLink(pid_t pid, int fd)
{
    return LinkOf("/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd));
}

// Field 7 of /proc/<pid>/stat: the controlling terminal's device, 0 for none.
long TtyNr(pid_t pid)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t rp = stat.rfind(')');
    if (rp == std::string::npos)
        return -1;
    std::istringstream rest(stat.substr(rp + 1));
    std::string state;
    long ppid, pgrp, sid, tty_nr = -1;
    rest >> state >> ppid >> pgrp >> sid >> tty_nr;
    return tty_nr;
}

// A CLOEXEC pipe for a kept fd, both ends at 100 or above (clear of the
// low numbers the tests place fds at); the read end is non-blocking.
struct KeptPipe {
    int r = -1, w = -1;
    KeptPipe()
    {
        int p[2];
        if (pipe2(p, O_CLOEXEC) != 0)
            return;
        r = fcntl(p[0], F_DUPFD_CLOEXEC, 100);
        w = fcntl(p[1], F_DUPFD_CLOEXEC, 100);
        close(p[0]);
        close(p[1]);
        if (r >= 0)
            (void)fcntl(r, F_SETFL, O_NONBLOCK);
    }
    ~KeptPipe()
    {
        CloseWrite();
        if (r >= 0)
            close(r);
    }
    // The child holds its copy: the reader sees EOF once the child is done.
    void CloseWrite()
    {
        if (w >= 0)
            close(w);
        w = -1;
    }
};

// Puts a copy of src at fd number `at` in this process for the scope,
// restoring whatever the test runner had there (gtest may hold 3 or 4).
struct FdAt {
    int at, saved = -1, saved_fdfl = 0;
    bool ok = false;
    FdAt(int src, int at_, bool cloexec) : at(at_)
    {
        saved_fdfl = fcntl(at, F_GETFD);
        if (saved_fdfl >= 0)
            saved = fcntl(at, F_DUPFD_CLOEXEC, 200);
        ok = (saved_fdfl < 0 || saved >= 0) && dup3(src, at, cloexec ? O_CLOEXEC : 0) == at;
    }
    ~FdAt()
    {
        if (saved >= 0) {
            (void)dup3(saved, at, (saved_fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0);
            close(saved);
        } else {
            close(at);
        }
    }
};

TEST_F(SpawnTest, KeptFdsLandAtThreeAndFourInOrder)
{
    size_t fds = CountOwnFds();
    {
        KeptPipe a, b;
        ASSERT_GE(a.w, 0);
        ASSERT_GE(b.w, 0);
        ASSERT_NE(FdLink(getpid(), a.w), FdLink(getpid(), b.w));

        // The fd table sleep got: 0-2, then the two pipes in order.
        Spec s{{"/bin/sleep", "100"}};
        s.keep = {a.w, b.w};
        ws_child *c = MustSpawn(s);
        ASSERT_NE(c, nullptr);
        pid_t pid = ws_child_pid(c);
        EXPECT_EQ(FdNames("/proc/" + std::to_string(pid) + "/fd"),
                  (std::set<std::string>{"0", "1", "2", "3", "4"}));
        EXPECT_EQ(FdLink(pid, 3), FdLink(getpid(), a.w));
        EXPECT_EQ(FdLink(pid, 4), FdLink(getpid(), b.w));
        EXPECT_EQ(ws_child_kill_tree(c, 0), 0);
        ws_child_free(c);

        // The child writes through them; ls sees 0-4 and its own dir fd.
        s.argv = {"/bin/sh", "-c", "echo a >&3; echo b >&4; ls /proc/self/fd"};
        c = MustSpawn(s);
        ASSERT_NE(c, nullptr);
        // The parent's ends are untouched: open, still close-on-exec.
        EXPECT_EQ(fcntl(a.w, F_GETFD), FD_CLOEXEC);
        EXPECT_EQ(fcntl(b.w, F_GETFD), FD_CLOEXEC);
        a.CloseWrite();
        b.CloseWrite();
        EXPECT_EQ(ReadAll(ws_child_stdout_fd(c)), "0\n1\n2\n3\n4\n5\n");
        EXPECT_EQ(ReadAll(a.r), "a\n");
        EXPECT_EQ(ReadAll(b.r), "b\n");
        EXPECT_EQ(WaitExit(c).exit_code, 0);
        ws_child_free(c);
    }
    // The spawn's own copies of the sources are closed again.
    EXPECT_EQ(CountOwnFds(), fds);
}

TEST_F(SpawnTest, KeptFdsFromLowNumbersCrossOver)
{
    // The fixture's directory fd is likely 3 itself: out of the way.
    int moved = fcntl(dir_fd_, F_DUPFD_CLOEXEC, 100);
    ASSERT_GE(moved, 100);
    close(dir_fd_);
    dir_fd_ = moved;
    KeptPipe a, b;
    ASSERT_GE(a.w, 0);
    ASSERT_GE(b.w, 0);
    std::string a_link = FdLink(getpid(), a.w), b_link = FdLink(getpid(), b.w);
    std::string err_link = FdLink(getpid(), 2);
    ASSERT_NE(err_link, "");
    size_t fds;
    {
        // The sources sit on the very numbers they go to, swapped: a naive
        // dup2(4, 3) would clobber the source of the next one. fd 4 is not
        // close-on-exec here, to see that flags stay as they were.
        FdAt at3(a.w, 3, true), at4(b.w, 4, false);
        ASSERT_TRUE(at3.ok && at4.ok) << strerror(errno);
        a.CloseWrite();
        b.CloseWrite();
        fds = CountOwnFds();

        Spec s{{"/bin/sleep", "100"}};
        s.keep = {4, 3, 2};
        ws_child *c = MustSpawn(s);
        ASSERT_NE(c, nullptr);
        pid_t pid = ws_child_pid(c);
        EXPECT_EQ(FdNames("/proc/" + std::to_string(pid) + "/fd"),
                  (std::set<std::string>{"0", "1", "2", "3", "4", "5"}));
        EXPECT_EQ(FdLink(pid, 3), b_link);
        EXPECT_EQ(FdLink(pid, 4), a_link);
        EXPECT_EQ(FdLink(pid, 5), err_link);
        // The child's 2 is its own stderr pipe, not the test's.
        EXPECT_EQ(FdLink(pid, 2), FdLink(getpid(), ws_child_stderr_fd(c)));
        EXPECT_EQ(ws_child_kill_tree(c, 0), 0);
        ws_child_free(c);

        s.argv = {"/bin/sh", "-c", "echo three >&3; echo four >&4"};
        s.keep = {4, 3};
        c = MustSpawn(s);
        ASSERT_NE(c, nullptr);
        EXPECT_EQ(WaitExit(c).exit_code, 0);
        ws_child_free(c);

        EXPECT_EQ(fcntl(3, F_GETFD), FD_CLOEXEC);
        EXPECT_EQ(fcntl(4, F_GETFD), 0);
        EXPECT_EQ(FdLink(getpid(), 3), a_link);
        EXPECT_EQ(FdLink(getpid(), 4), b_link);
        EXPECT_EQ(CountOwnFds(), fds);
    }
    // The copies at 3 and 4 were the last write ends.
    EXPECT_EQ(ReadAll(a.r), "four\n");
    EXPECT_EQ(ReadAll(b.r), "three\n");
}

TEST_F(SpawnTest, AsManyKeptFdsAsTheLimitAndRepeats)
{
    KeptPipe a, b;
    ASSERT_GE(a.w, 0);
    ASSERT_GE(b.w, 0);
    // ls sees 0-2, every kept fd, and its own directory fd.
    Spec s{{"/bin/sh", "-c",
            "echo 3 >&3; echo 4 >&4; echo 5 >&5; echo 6 >&6; ls /proc/self/fd | wc -l >&2"}};
    for (int i = 0; i < WS_SPAWN_KEEP_FDS_MAX; i++)
        s.keep.push_back(i % 2 ? b.w : a.w);
    ws_child *c = MustSpawn(s);
    ASSERT_NE(c, nullptr);
    a.CloseWrite();
    b.CloseWrite();
    EXPECT_EQ(WaitExit(c).exit_code, 0);
    EXPECT_EQ(ReadAll(ws_child_stderr_fd(c)), std::to_string(WS_SPAWN_KEEP_FDS_MAX + 4) + "\n");
    EXPECT_EQ(ReadAll(a.r), "3\n5\n");
    EXPECT_EQ(ReadAll(b.r), "4\n6\n");
    ws_child_free(c);
}

TEST_F(SpawnTest, BadKeptFdsFailAndLeakNothing)
{
    KeptPipe a;
    ASSERT_GE(a.w, 0);
    // A number nothing in this process uses.
    int unused = fcntl(a.w, F_DUPFD_CLOEXEC, 900);
    ASSERT_GE(unused, 900);
    close(unused);
    size_t fds = CountOwnFds();
    ws_child *c = nullptr;

    Spec s{{"/bin/true"}};
    s.keep.assign(WS_SPAWN_KEEP_FDS_MAX + 1, a.w);
    EXPECT_EQ(Spawn(s, &c), -EINVAL);
    s.keep = {a.w, -1};
    EXPECT_EQ(Spawn(s, &c), -EBADF);
    s.keep = {-3};
    EXPECT_EQ(Spawn(s, &c), -EBADF);
    // Not open: found when copying it, after the first one was copied.
    s.keep = {a.w, unused};
    EXPECT_EQ(Spawn(s, &c), -EBADF);
    s.pty = true;
    EXPECT_EQ(Spawn(s, &c), -EBADF);
    s.pty = false;
    s.stdin_pipe = true;
    EXPECT_EQ(Spawn(s, &c), -EBADF);

    // A count without an array.
    const char *argv[] = {"/bin/true", nullptr};
    const char *envp[] = {nullptr};
    ws_spawn_opts o = {};
    o.argv = argv;
    o.envp = envp;
    o.cwd_fd = dir_fd_;
    o.keep_fds = nullptr;
    o.n_keep_fds = 1;
    EXPECT_EQ(ws_spawn(&o, &c), -EINVAL);
    // Nor with an array, over the limit.
    int many[WS_SPAWN_KEEP_FDS_MAX + 1] = {a.w, a.w, a.w, a.w, a.w};
    o.keep_fds = many;
    o.n_keep_fds = WS_SPAWN_KEEP_FDS_MAX + 1;
    EXPECT_EQ(ws_spawn(&o, &c), -EINVAL);
    // A count of 0 ignores the array.
    o.n_keep_fds = 0;
    ASSERT_EQ(ws_spawn(&o, &c), 0);
    EXPECT_EQ(WaitExit(c).exit_code, 0);
    ws_child_free(c);

    EXPECT_EQ(CountOwnFds(), fds);
    EXPECT_EQ(fcntl(a.w, F_GETFD), FD_CLOEXEC);
    EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
    EXPECT_EQ(errno, ECHILD);
}

TEST_F(SpawnTest, PtyNocttyLeavesTheSessionWithoutATerminal)
{
    Spec s{{"/bin/sleep", "100"}};
    s.pty = true;
    ws_child *with = MustSpawn(s);
    ASSERT_NE(with, nullptr);
    s.pty_noctty = true;
    ws_child *without = MustSpawn(s);
    ASSERT_NE(without, nullptr);

    EXPECT_NE(TtyNr(ws_child_pid(with)), 0);
    EXPECT_EQ(TtyNr(ws_child_pid(without)), 0);
    // It is still a session leader on the PTY, just without a terminal.
    pid_t pid = ws_child_pid(without);
    EXPECT_EQ(getsid(pid), pid);
    EXPECT_EQ(FdLink(pid, 0).rfind("/dev/pts/", 0), 0u) << FdLink(pid, 0);
    EXPECT_EQ(FdLink(pid, 1), FdLink(pid, 0));
    EXPECT_EQ(FdLink(pid, 2), FdLink(pid, 0));
    ws_child_free(with);
    ws_child_free(without);

    // As the child sees it: the slave is its stdio, /dev/tty is nobody's.
    s.argv = {"/bin/sh", "-c", "tty; { echo x >/dev/tty; } 2>/dev/null || echo no-ctty"};
    ws_child *c = MustSpawn(s);
    ASSERT_NE(c, nullptr);
    std::string out = ReadAll(ws_child_pty_fd(c));
    EXPECT_EQ(out.rfind("/dev/pts/", 0), 0u) << out;
    EXPECT_NE(out.find("\r\nno-ctty\r\n"), std::string::npos) << out;
    EXPECT_EQ(WaitExit(c).exit_code, 0);
    ws_child_free(c);
}

} // namespace
