// Tests for server/posix/tree.c with real processes. Commands are started
// the way the server starts them (ws_spawn between ws_tree_enter and
// ws_tree_leave, then ws_tree_set_leader), and what survives is checked from
// /proc. Every sleep a test starts carries an argument unique to that test
// (sleep 1000.<pid><random><n>), so a /proc scan finds exactly its processes.
//
// The cgroup tests need root and a cgroup v1 freezer mount. On a host whose
// cgroups are v2 only there is no such mount by design (the server uses the
// subreaper there, which the other tests cover): they skip, saying so.
// Anywhere else they fail without them. They work below a private root,
// /sys/fs/cgroup/freezer/wstest.<pid>, except the one that checks the
// default root.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <linux/magic.h>

extern "C" {
#include "server/posix/spawn.h"
#include "server/posix/tree.h"
}

#include "tests/testutil/process.h"

namespace
{

using Clock = std::chrono::steady_clock;

const std::string kFreezer = "/sys/fs/cgroup/freezer";

long ElapsedMs(Clock::time_point t0)
{
    return (long)std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

void SleepMs(int ms)
{
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

bool WaitFor(const std::function<bool()> &pred, int timeout_ms = 5000)
{
    auto t0 = Clock::now();
    for (;;) {
        if (pred())
            return true;
        if (ElapsedMs(t0) >= timeout_ms)
            return false;
        SleepMs(2);
    }
}

// Plain read(), not std::ifstream: a /proc file of a process that exits
// meanwhile fails with ESRCH, which std::ifstream turns into an exception.
using testutil::ReadFile;

bool Exists(const std::string &path)
{
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

// Mount points of the cgroup file systems in /proc/self/mountinfo: those of
// type `fstype` ("cgroup" is v1, "cgroup2" v2) whose super options pass
// `want` (a v1 hierarchy's controllers are among them).
std::vector<std::string> CgroupMounts(const std::string &fstype,
                                      const std::function<bool(const std::string &)> &want)
{
    std::vector<std::string> out;
    std::istringstream in(ReadFile("/proc/self/mountinfo"));
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream f(line);
        std::vector<std::string> fields;
        for (std::string w; f >> w;)
            fields.push_back(w);
        auto dash = std::find(fields.begin(), fields.end(), "-");
        if (dash == fields.end() || fields.end() - dash < 4 || fields.size() < 5)
            continue;
        if (dash[1] == fstype && want("," + dash[3] + ","))
            out.push_back(fields[4]);
    }
    return out;
}

// Why the cgroup tests cannot run here at all ("" when they can): a host
// whose cgroups are v2 only (/sys/fs/cgroup itself is cgroup2) and that has
// no v1 freezer mounted.
std::string NoFreezerByDesign()
{
    struct statfs sf;
    bool v2_only = statfs("/sys/fs/cgroup", &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC;
    bool freezer = !CgroupMounts("cgroup", [](const std::string &o) {
                        return o.find(",freezer,") != std::string::npos;
                    }).empty();
    if (v2_only && !freezer)
        return "a cgroup v2 host: no cgroup v1 freezer hierarchy exists here (the server uses "
               "the subreaper, which the Subreaper tests cover)";
    return "";
}

// Writes s to a cgroupfs file in one write(); returns 0 or errno.
int WriteFile(const std::string &path, const std::string &s)
{
    int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    int r = write(fd, s.data(), s.size()) == (ssize_t)s.size() ? 0 : errno;
    close(fd);
    return r;
}

// The freezer line's path in a /proc/.../cgroup file.
std::string FreezerPath(const std::string &file)
{
    std::istringstream in(ReadFile(file));
    std::string line;
    while (std::getline(in, line)) {
        size_t a = line.find(':');
        size_t b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos)
            continue;
        std::string ctl = "," + line.substr(a + 1, b - a - 1) + ",";
        if (ctl.find(",freezer,") != std::string::npos)
            return line.substr(b + 1);
    }
    return "";
}

std::string ThreadFreezer()
{
    return FreezerPath("/proc/thread-self/cgroup");
}

std::string PidFreezer(pid_t pid)
{
    return FreezerPath("/proc/" + std::to_string(pid) + "/cgroup");
}

struct ProcStat {
    char state = 0;
    pid_t ppid = 0, pgrp = 0, sid = 0;
};

bool ReadStat(pid_t pid, ProcStat *ret)
{
    std::string s = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    size_t rp = s.rfind(')');
    if (rp == std::string::npos)
        return false;
    std::istringstream rest(s.substr(rp + 1));
    std::string state;
    rest >> state >> ret->ppid >> ret->pgrp >> ret->sid;
    ret->state = state.empty() ? 0 : state[0];
    return !state.empty();
}

using testutil::AllPids;

// Live (non-zombie) processes running `sleep <marker>`. Only sleep itself:
// `setsid sleep <marker>` has the marker too until setsid execs sleep.
std::vector<pid_t> Marked(const std::string &marker)
{
    std::vector<pid_t> out;
    for (pid_t pid : testutil::PidsWithArg(marker)) {
        std::vector<std::string> args = testutil::ProcArgv(pid);
        if (args.size() == 2 && args[1] == marker &&
            (args[0] == "sleep" || args[0] == "/bin/sleep" || args[0] == "/usr/bin/sleep"))
            out.push_back(pid);
    }
    return out;
}

// This process's zombie children.
std::vector<pid_t> ZombieChildren()
{
    std::vector<pid_t> out;
    for (pid_t pid : AllPids()) {
        ProcStat st;
        if (ReadStat(pid, &st) && st.ppid == getpid() && st.state == 'Z')
            out.push_back(pid);
    }
    return out;
}

char StateOf(pid_t pid)
{
    ProcStat st;
    return ReadStat(pid, &st) ? st.state : 0;
}

// The signals pending for a process (SigPnd and ShdPnd: for its thread and
// for all of it), from /proc.
unsigned long long PendingSignals(pid_t pid)
{
    std::istringstream in(ReadFile("/proc/" + std::to_string(pid) + "/status"));
    unsigned long long out = 0;
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("SigPnd:", 0) == 0 || line.rfind("ShdPnd:", 0) == 0)
            out |= strtoull(line.c_str() + 7, nullptr, 16);
    return out;
}

// Leaves the session and double-forks, the ways a command escapes its
// process group: a background sleep in the group, a setsid'd child, a
// setsid'd grandchild whose parents are gone, and the foreground sleep.
std::string Escapees(const std::string &m)
{
    return "sleep " + m + " & setsid sleep " + m + " & (setsid sh -c \"sleep " + m +
           " &\" &) ; sleep " + m;
}

std::string ReadAll(int fd, int timeout_ms = 5000)
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
        if (n == 0)
            return out;
        if (errno != EAGAIN && errno != EINTR)
            return out;
        long left = timeout_ms - ElapsedMs(t0);
        if (left <= 0)
            return out;
        struct pollfd p = {fd, POLLIN, 0};
        poll(&p, 1, (int)left);
    }
}

// Waits (pidfd) for the leader to exit and reaps it.
ws_child_exit WaitExit(ws_child *c, int timeout_ms = 5000)
{
    struct pollfd p = {ws_child_pidfd(c), POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, timeout_ms), 1) << "leader did not exit";
    ws_child_exit e = {};
    EXPECT_EQ(ws_child_try_reap(c, &e), 0);
    return e;
}

// Numeric subdirectories of dir: the trees' cgroups under a host's.
std::set<std::string> NumericDirs(const std::string &dir)
{
    std::set<std::string> out;
    DIR *d = opendir(dir.c_str());
    if (!d)
        return out;
    while (struct dirent *de = readdir(d))
        if (de->d_type == DT_DIR && de->d_name[0] >= '0' && de->d_name[0] <= '9')
            out.insert(de->d_name);
    closedir(d);
    return out;
}

int GetSubreaper()
{
    int v = -1;
    EXPECT_EQ(prctl(PR_GET_CHILD_SUBREAPER, (unsigned long)&v, 0, 0, 0), 0);
    return v;
}

enum class Mode { kCgroup, kSubreaper };

// A host in the given mode; commands run in / with a minimal PATH.
class TreeTestBase : public ::testing::Test
{
  protected:
    void SetUpHost(Mode mode)
    {
        dir_fd_ = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(dir_fd_, 0);
        mode_ = mode;
        if (mode == Mode::kCgroup) {
            std::string why = NoFreezerByDesign();
            if (!why.empty())
                GTEST_SKIP() << why;
            root_ = kFreezer + "/wstest." + std::to_string(getpid());
            ASSERT_TRUE(mkdir(root_.c_str(), 0755) == 0 || errno == EEXIST)
                << root_ << ": " << strerror(errno) << " (the tests need root and a cgroup v1 "
                << "freezer at " << kFreezer << ")";
        }
        NewHost();
    }

    void NewHost()
    {
        ws_tree_host_config cfg = {};
        cfg.mode = mode_ == Mode::kCgroup ? WS_TREE_AUTO : WS_TREE_FORCE_SUBREAPER;
        cfg.cgroup_root = mode_ == Mode::kCgroup ? root_.c_str() : nullptr;
        int r = ws_tree_host_new(&cfg, &host_);
        ASSERT_EQ(r, 0) << strerror(-r);
        const char *want = mode_ == Mode::kCgroup ? "cgroup-v1-freezer" : "subreaper";
        ASSERT_STREQ(ws_tree_host_mechanism(host_), want)
            << "fell back: " << strerror(-ws_tree_host_fallback_error(host_));
    }

    void TearDown() override
    {
        ws_tree_host_free(host_);
        host_ = nullptr;
        if (dir_fd_ >= 0)
            close(dir_fd_);
        if (!root_.empty()) {
            EXPECT_FALSE(Exists(HostDir())) << "host cgroup left behind";
            rmdir((root_ + "/workspaced").c_str());
            EXPECT_EQ(rmdir(root_.c_str()), 0) << strerror(errno);
        }
        // Nothing a test started may be left unreaped: leaders are reaped
        // by ws_child_free, adopted orphans (subreaper) by the tree.
        errno = 0;
        EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
        EXPECT_EQ(errno, ECHILD);
    }

    std::string HostDir() const
    {
        return root_ + "/workspaced/" + std::to_string(getpid());
    }

    ws_tree *NewTree()
    {
        ws_tree *t = nullptr;
        int r = ws_tree_new(host_, &t);
        EXPECT_EQ(r, 0) << strerror(-r);
        return t;
    }

    ws_child *SpawnArgv(const std::vector<std::string> &args)
    {
        std::vector<const char *> argv;
        for (auto &a : args)
            argv.push_back(a.c_str());
        argv.push_back(nullptr);
        const char *envp[] = {"PATH=/usr/bin:/bin", nullptr};
        ws_spawn_opts o = {};
        o.argv = argv.data();
        o.envp = envp;
        o.cwd_fd = dir_fd_;
        ws_child *c = nullptr;
        int r = ws_spawn(&o, &c);
        EXPECT_EQ(r, 0) << strerror(-r);
        return c;
    }

    // /bin/sh -c script as the tree's command, the way the server runs one.
    ws_child *Spawn(ws_tree *t, const std::string &script)
    {
        int r = ws_tree_enter(t);
        EXPECT_EQ(r, 0) << strerror(-r);
        ws_child *c = SpawnArgv({"/bin/sh", "-c", script});
        EXPECT_EQ(ws_tree_leave(t), 0);
        if (c)
            ws_tree_set_leader(t, ws_child_pid(c));
        return c;
    }

    Mode mode_ = Mode::kCgroup;
    std::string root_;
    ws_tree_host *host_ = nullptr;
    int dir_fd_ = -1;
};

// Behaviour both mechanisms must have.
class TreeTest : public TreeTestBase, public ::testing::WithParamInterface<Mode>
{
  protected:
    void SetUp() override
    {
        SetUpHost(GetParam());
    }
};

class CgroupTest : public TreeTestBase
{
  protected:
    void SetUp() override
    {
        SetUpHost(Mode::kCgroup);
    }
};

class SubreaperTest : public TreeTestBase
{
  protected:
    void SetUp() override
    {
        SetUpHost(Mode::kSubreaper);
    }
};

std::string ModeName(const ::testing::TestParamInfo<Mode> &info)
{
    return info.param == Mode::kCgroup ? "Cgroup" : "Subreaper";
}

INSTANTIATE_TEST_SUITE_P(Modes, TreeTest, ::testing::Values(Mode::kCgroup, Mode::kSubreaper),
                         ModeName);

// ---- both mechanisms ----

TEST_P(TreeTest, KillEndsEscapedDescendants)
{
    std::string m = testutil::UniqueSleepArg();
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    ws_child *c = Spawn(t, Escapees(m));
    ASSERT_NE(c, nullptr);
    pid_t leader = ws_child_pid(c);

    ASSERT_TRUE(WaitFor([&] { return Marked(m).size() == 4; })) << Marked(m).size();
    // The test means something only if some really left the session.
    int escaped = 0;
    for (pid_t pid : Marked(m)) {
        ProcStat st;
        if (ReadStat(pid, &st) && st.sid != leader)
            escaped++;
    }
    EXPECT_EQ(escaped, 2);
    // The leader and four sleeps, once the intermediate shells are gone.
    EXPECT_TRUE(WaitFor([&] { return ws_tree_count(t) == 5; })) << ws_tree_count(t);

    EXPECT_EQ(ws_tree_kill(t), 5);
    EXPECT_TRUE(WaitFor([&] { return Marked(m).empty(); })) << Marked(m).size() << " survived";
    EXPECT_TRUE(WaitFor([&] { return ws_tree_count(t) == 0; }));
    ws_child_exit e = WaitExit(c);
    EXPECT_TRUE(e.signaled);
    EXPECT_EQ(e.signal, SIGKILL);
    if (GetParam() == Mode::kCgroup) {
        // Never left frozen.
        auto trees = NumericDirs(HostDir());
        ASSERT_EQ(trees.size(), 1u);
        EXPECT_EQ(ReadFile(HostDir() + "/" + *trees.begin() + "/freezer.state"), "THAWED\n");
    }
    EXPECT_EQ(ws_tree_kill(t), 0);
    ws_child_free(c);
    ws_tree_free(t);
}

TEST_P(TreeTest, KillEndsWhatIgnoresSigterm)
{
    std::string m = testutil::UniqueSleepArg();
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    // The ignored disposition is inherited through fork and exec.
    ws_child *c = Spawn(t, "trap '' TERM; " + Escapees(m));
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(WaitFor([&] { return Marked(m).size() == 4 && ws_tree_count(t) == 5; }));

    EXPECT_EQ(ws_tree_signal(t, SIGTERM), 5);
    SleepMs(300);
    EXPECT_EQ(Marked(m).size(), 4u);
    EXPECT_EQ(ws_tree_count(t), 5);

    EXPECT_EQ(ws_tree_kill(t), 5);
    EXPECT_TRUE(WaitFor([&] { return Marked(m).empty() && ws_tree_count(t) == 0; }));
    EXPECT_EQ(WaitExit(c).signal, SIGKILL);
    ws_child_free(c);
    ws_tree_free(t);
}

TEST_P(TreeTest, SignalReachesEveryProcessAndWakesStoppedOnes)
{
    std::string m = testutil::UniqueSleepArg();
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    ws_child *c =
        Spawn(t, "sleep " + m + " & setsid sleep " + m + " & (setsid sleep " + m + " &) ; wait");
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(WaitFor([&] { return Marked(m).size() == 3 && ws_tree_count(t) == 4; }));

    // Stop an escapee: SIGTERM alone would stay pending in it.
    pid_t stopped = 0;
    for (pid_t pid : Marked(m)) {
        ProcStat st;
        if (ReadStat(pid, &st) && st.sid != ws_child_pid(c))
            stopped = pid;
    }
    ASSERT_GT(stopped, 0);
    ASSERT_EQ(kill(stopped, SIGSTOP), 0);
    ASSERT_TRUE(WaitFor([&] { return StateOf(stopped) == 'T'; }));

    EXPECT_EQ(ws_tree_signal(t, 0), 4); // a probe: counts, changes nothing
    EXPECT_EQ(StateOf(stopped), 'T');
    EXPECT_EQ(ws_tree_signal(t, -1), -EINVAL);
    EXPECT_EQ(ws_tree_signal(t, NSIG), -EINVAL);

    EXPECT_EQ(ws_tree_signal(t, SIGTERM), 4);
    EXPECT_TRUE(WaitFor([&] { return Marked(m).empty() && ws_tree_count(t) == 0; }))
        << Marked(m).size() << " left";
    ws_child_exit e = WaitExit(c);
    EXPECT_TRUE(e.signaled);
    EXPECT_EQ(e.signal, SIGTERM);
    ws_child_free(c);
    ws_tree_free(t);
}

TEST_P(TreeTest, CountSkipsTheZombieLeader)
{
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    ws_child *c = Spawn(t, "exit 3");
    ASSERT_NE(c, nullptr);
    struct pollfd p = {ws_child_pidfd(c), POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 5000), 1);
    // Exited, not reaped: a zombie, and not part of the count.
    ASSERT_EQ(StateOf(ws_child_pid(c)), 'Z');
    EXPECT_EQ(ws_tree_count(t), 0);
    EXPECT_EQ(ws_tree_kill(t), 0);
    EXPECT_EQ(ws_tree_signal(t, SIGTERM), 0);
    ws_child_exit e = {};
    ASSERT_EQ(ws_child_try_reap(c, &e), 0);
    EXPECT_FALSE(e.signaled);
    EXPECT_EQ(e.exit_code, 3);
    ws_child_free(c);
    ws_tree_free(t);
}

TEST_P(TreeTest, CountSeesEscapeesAfterTheLeaderIsReaped)
{
    std::string m = testutil::UniqueSleepArg();
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    ws_child *c = Spawn(t, "setsid sleep " + m + " & (setsid sleep " + m + " &) ; exit 0");
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(WaitFor([&] { return Marked(m).size() == 2; }));
    EXPECT_EQ(WaitExit(c).exit_code, 0);

    EXPECT_TRUE(WaitFor([&] { return ws_tree_count(t) == 2; })) << ws_tree_count(t);
    EXPECT_EQ(ws_tree_kill(t), 2);
    EXPECT_TRUE(WaitFor([&] { return Marked(m).empty() && ws_tree_count(t) == 0; }));
    ws_child_free(c);
    ws_tree_free(t);
}

TEST_P(TreeTest, ForkLoopIsKilledAtOnce)
{
    std::string m = testutil::UniqueSleepArg();
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    // 200 sleeps, each in its own session: bounded, and still forking
    // when the kill comes.
    ws_child *c =
        Spawn(t, "i=0; while [ $i -lt 200 ]; do setsid sleep " + m + " & i=$((i+1)); done; wait");
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(WaitFor([&] { return Marked(m).size() >= 50; }));

    auto t0 = Clock::now();
    EXPECT_GE(ws_tree_kill(t), 50);
    EXPECT_TRUE(WaitFor([&] { return Marked(m).empty() && ws_tree_count(t) == 0; }))
        << Marked(m).size() << " left";
    EXPECT_LT(ElapsedMs(t0), 3000);
    // Nothing forked behind the kill's back.
    SleepMs(300);
    EXPECT_TRUE(Marked(m).empty());
    EXPECT_EQ(ws_tree_count(t), 0);
    EXPECT_EQ(WaitExit(c).signal, SIGKILL);
    ws_child_free(c);
    ws_tree_free(t);
}

TEST_P(TreeTest, ConcurrentTreesStayApart)
{
    constexpr int kThreads = 4, kPerThread = 4;
    struct Cmd {
        ws_tree *t;
        ws_child *c;
        std::string m;
    };
    std::vector<Cmd> cmds;
    std::mutex mu;
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; i++)
        threads.emplace_back([&] {
            for (int j = 0; j < kPerThread; j++) {
                std::string m = testutil::UniqueSleepArg();
                ws_tree *t = NewTree();
                ws_child *c =
                    t ? Spawn(t, "sleep " + m + " & setsid sleep " + m + " & sleep " + m) : nullptr;
                std::lock_guard<std::mutex> g(mu);
                cmds.push_back({t, c, m});
            }
        });
    for (auto &th : threads)
        th.join();
    ASSERT_EQ(cmds.size(), (size_t)(kThreads * kPerThread));
    for (auto &cmd : cmds) {
        ASSERT_NE(cmd.c, nullptr);
        ASSERT_TRUE(WaitFor([&] { return Marked(cmd.m).size() == 3; }));
        EXPECT_TRUE(WaitFor([&] { return ws_tree_count(cmd.t) == 4; })) << ws_tree_count(cmd.t);
    }
    if (GetParam() == Mode::kCgroup) {
        // Each command's processes share one cgroup of their own.
        std::set<std::string> seen;
        for (auto &cmd : cmds) {
            std::string path = PidFreezer(ws_child_pid(cmd.c));
            EXPECT_NE(path.find("/workspaced/" + std::to_string(getpid()) + "/"), std::string::npos)
                << path;
            EXPECT_TRUE(seen.insert(path).second) << "shared cgroup " << path;
            for (pid_t pid : Marked(cmd.m))
                EXPECT_EQ(PidFreezer(pid), path);
        }
        EXPECT_EQ(ThreadFreezer(), PidFreezer(getpid()));
    }
    // Killing one leaves all the others whole, in spawn order and in
    // reverse (in subreaper mode an earlier tree's kill is the risky one).
    std::vector<bool> killed(cmds.size());
    for (size_t i = 0; i < cmds.size(); i++) {
        size_t k = i % 2 ? cmds.size() - 1 - i / 2 : i / 2;
        EXPECT_EQ(ws_tree_kill(cmds[k].t), 4);
        killed[k] = true;
        // Settled, not just signalled: in subreaper mode an escapee that is
        // still dying has been re-parented to the server and, by the orphan
        // rule, also counts for a live tree that started earlier.
        EXPECT_TRUE(
            WaitFor([&] { return Marked(cmds[k].m).empty() && ws_tree_count(cmds[k].t) == 0; }));
        for (size_t j = 0; j < cmds.size(); j++)
            if (!killed[j]) {
                EXPECT_EQ(Marked(cmds[j].m).size(), 3u) << "killing one tree hit another";
                EXPECT_EQ(ws_tree_count(cmds[j].t), 4);
            }
    }
    // Freed from several threads at once.
    threads.clear();
    for (int i = 0; i < kThreads; i++)
        threads.emplace_back([&, i] {
            for (int j = 0; j < kPerThread; j++) {
                Cmd &cmd = cmds[(size_t)(i * kPerThread + j)];
                ws_child_free(cmd.c);
                ws_tree_free(cmd.t);
            }
        });
    for (auto &th : threads)
        th.join();
}

TEST_P(TreeTest, FreeKillsWhatIsLeft)
{
    std::string m = testutil::UniqueSleepArg();
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    ws_child *c = Spawn(t, Escapees(m));
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(WaitFor([&] { return Marked(m).size() == 4; }));
    // The spawn module ends the group; the two that left it live on.
    ws_child_free(c);
    EXPECT_TRUE(WaitFor([&] { return Marked(m).size() == 2; })) << Marked(m).size();
    if (GetParam() == Mode::kCgroup) {
        EXPECT_EQ(NumericDirs(HostDir()).size(), 1u);
    }

    auto t0 = Clock::now();
    ws_tree_free(t);
    EXPECT_LT(ElapsedMs(t0), WS_TREE_FREE_WAIT_MS);
    EXPECT_TRUE(Marked(m).empty()) << Marked(m).size() << " survived the free";
    if (GetParam() == Mode::kCgroup) {
        EXPECT_TRUE(NumericDirs(HostDir()).empty());
    }
}

TEST_P(TreeTest, EmptyTree)
{
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(ws_tree_count(t), 0);
    EXPECT_EQ(ws_tree_kill(t), 0);
    EXPECT_EQ(ws_tree_signal(t, SIGTERM), 0);
    ws_tree_free(t);
    ws_tree_free(nullptr);
    ws_tree_host_reap(host_);
}

TEST_P(TreeTest, OneHostPerProcess)
{
    ws_tree_host *h2 = nullptr;
    ws_tree_host_config cfg = {};
    cfg.mode = WS_TREE_FORCE_SUBREAPER;
    EXPECT_EQ(ws_tree_host_new(&cfg, &h2), -EBUSY);
    EXPECT_EQ(h2, nullptr);
}

// Live children of `parent`, from the ppids in /proc.
std::vector<pid_t> ChildrenOf(pid_t parent)
{
    std::vector<pid_t> out;
    for (pid_t pid : AllPids()) {
        ProcStat st;
        if (ReadStat(pid, &st) && st.ppid == parent && st.state != 'Z')
            out.push_back(pid);
    }
    return out;
}

std::vector<pid_t> Sorted(std::vector<pid_t> v)
{
    std::sort(v.begin(), v.end());
    return v;
}

TEST_P(TreeTest, SignalExceptSparesTheListedPids)
{
    std::string m = testutil::UniqueSleepArg();
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    ws_child *c = Spawn(t, "sleep " + m + " & sleep " + m + " & wait");
    ASSERT_NE(c, nullptr);
    pid_t leader = ws_child_pid(c);
    ASSERT_TRUE(WaitFor([&] { return Marked(m).size() == 2 && ws_tree_count(t) == 3; }));
    std::vector<pid_t> kids = Sorted(ChildrenOf(leader));
    ASSERT_EQ(kids, Sorted(Marked(m)));
    pid_t spared = kids[0];

    EXPECT_EQ(ws_tree_signal_except(t, SIGTERM, nullptr, 1), -EINVAL);
    EXPECT_EQ(ws_tree_signal_except(t, NSIG, &spared, 1), -EINVAL);
    EXPECT_EQ(ws_tree_signal_except(nullptr, SIGTERM, &spared, 1), -EINVAL);
    // Probes count what would be signalled; a pid outside the tree (this
    // process) changes nothing.
    EXPECT_EQ(ws_tree_signal_except(t, 0, nullptr, 0), 3);
    EXPECT_EQ(ws_tree_signal_except(t, 0, &spared, 1), 2);
    pid_t two[] = {spared, leader};
    EXPECT_EQ(ws_tree_signal_except(t, 0, two, 2), 1);
    pid_t self = getpid();
    EXPECT_EQ(ws_tree_signal_except(t, 0, &self, 1), 3);
    EXPECT_EQ(Marked(m).size(), 2u);
    EXPECT_EQ(ws_tree_count(t), 3);

    // Stopped, so that the SIGCONT the others get would be seen if it
    // reached the spared one too.
    ASSERT_EQ(kill(spared, SIGSTOP), 0);
    ASSERT_TRUE(WaitFor([&] { return StateOf(spared) == 'T'; }));
    EXPECT_EQ(ws_tree_signal_except(t, SIGTERM, &spared, 1), 2);
    ws_child_exit e = WaitExit(c);
    EXPECT_TRUE(e.signaled);
    EXPECT_EQ(e.signal, SIGTERM);
    EXPECT_TRUE(WaitFor([&] { return Marked(m) == std::vector<pid_t>{spared}; }))
        << Marked(m).size() << " left";
    // A SIGCONT wakes a stopped process as it is sent, and a signal sent to
    // it is pending from then on: the signals went out before
    // ws_tree_signal_except returned, so what they did is visible now.
    EXPECT_EQ(StateOf(spared), 'T');
    EXPECT_EQ(PendingSignals(spared) & (1ULL << (SIGTERM - 1)), 0u) << "SIGTERM is pending";
    // Continued, it sleeps on.
    ASSERT_EQ(kill(spared, SIGCONT), 0);
    EXPECT_EQ(Marked(m), std::vector<pid_t>{spared});
    // The killed sleep is counted until it is reaped (a subreaper reaps
    // it after its death is noticed): wait for that, not for a time.
    EXPECT_TRUE(WaitFor([&] { return ws_tree_count(t) == 1; })) << ws_tree_count(t);

    EXPECT_EQ(ws_tree_kill(t), 1);
    EXPECT_TRUE(WaitFor([&] { return Marked(m).empty() && ws_tree_count(t) == 0; }));
    ws_child_free(c);
    ws_tree_free(t);
}

// The sandbox's case: the leader (the wrapper) is spared, outlives what it
// runs and reports how that ended.
TEST_P(TreeTest, SignalExceptSparesTheLeader)
{
    std::string m = testutil::UniqueSleepArg();
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    ws_child *c = Spawn(t, "sleep " + m + " & sleep " + m + " & wait; exit 7");
    ASSERT_NE(c, nullptr);
    pid_t leader = ws_child_pid(c);
    ASSERT_TRUE(WaitFor([&] { return Marked(m).size() == 2 && ws_tree_count(t) == 3; }));
    EXPECT_EQ(Sorted(ChildrenOf(leader)), Sorted(Marked(m)));

    EXPECT_EQ(ws_tree_signal_except(t, SIGTERM, &leader, 1), 2);
    ws_child_exit e = WaitExit(c);
    EXPECT_FALSE(e.signaled);
    EXPECT_EQ(e.exit_code, 7);
    EXPECT_TRUE(WaitFor([&] { return Marked(m).empty() && ws_tree_count(t) == 0; }))
        << Marked(m).size() << " left";
    // An empty skip list is ws_tree_signal itself.
    EXPECT_EQ(ws_tree_signal_except(t, SIGTERM, nullptr, 0), 0);
    ws_child_free(c);
    ws_tree_free(t);
}

// ---- cgroup mechanism ----

TEST_F(CgroupTest, HostAndTreeDirectories)
{
    EXPECT_EQ(ws_tree_host_fallback_error(host_), 0);
    EXPECT_TRUE(Exists(HostDir() + "/freezer.state"));
    ws_tree *a = NewTree(), *b = NewTree();
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(NumericDirs(HostDir()).size(), 2u);
    ws_tree_free(a);
    EXPECT_EQ(NumericDirs(HostDir()).size(), 1u);
    ws_tree_free(b);
    ws_tree_host_free(host_);
    host_ = nullptr;
    EXPECT_FALSE(Exists(HostDir()));
    // The shared parent stays for other servers.
    EXPECT_TRUE(Exists(root_ + "/workspaced"));
}

TEST_F(CgroupTest, DefaultRootIsTheFreezerMount)
{
    ws_tree_host_free(host_);
    host_ = nullptr;
    ws_tree_host *h = nullptr;
    ASSERT_EQ(ws_tree_host_new(nullptr, &h), 0);
    ASSERT_STREQ(ws_tree_host_mechanism(h), "cgroup-v1-freezer")
        << "fell back: " << strerror(-ws_tree_host_fallback_error(h));
    std::string dir = kFreezer + "/workspaced/" + std::to_string(getpid());
    EXPECT_TRUE(Exists(dir));
    ws_tree *t = nullptr;
    ASSERT_EQ(ws_tree_new(h, &t), 0);
    ws_child *c = nullptr;
    ASSERT_EQ(ws_tree_enter(t), 0);
    std::string inside = ThreadFreezer();
    c = SpawnArgv({"/bin/sleep", testutil::UniqueSleepArg()});
    ASSERT_EQ(ws_tree_leave(t), 0);
    ASSERT_NE(c, nullptr);
    ws_tree_set_leader(t, ws_child_pid(c));
    EXPECT_EQ(inside.rfind("/workspaced/" + std::to_string(getpid()) + "/", 0), 0u) << inside;
    EXPECT_EQ(PidFreezer(ws_child_pid(c)), inside);
    EXPECT_EQ(ws_tree_kill(t), 1);
    ws_child_free(c);
    ws_tree_free(t);
    ws_tree_host_free(h);
    EXPECT_FALSE(Exists(dir));
}

TEST_F(CgroupTest, EnterMovesOnlyTheCallingThreadAndLeaveRestoresIt)
{
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    std::string before = ThreadFreezer();
    ASSERT_FALSE(before.empty());

    // Another thread, which must stay where it is.
    std::atomic<bool> stop{false};
    std::atomic<pid_t> other_tid{0};
    std::thread other([&] {
        other_tid = gettid();
        while (!stop)
            SleepMs(1);
    });
    ASSERT_TRUE(WaitFor([&] { return other_tid != 0; }));
    std::string other_file = "/proc/self/task/" + std::to_string((int)other_tid.load()) + "/cgroup";

    ASSERT_EQ(ws_tree_enter(t), 0);
    std::string inside = ThreadFreezer();
    EXPECT_NE(inside, before);
    EXPECT_NE(inside.find("/wstest." + std::to_string(getpid()) + "/workspaced/" +
                          std::to_string(getpid()) + "/"),
              std::string::npos)
        << inside;
    EXPECT_EQ(FreezerPath(other_file), before);
    // The server's own pid is listed in cgroup.procs now; it is neither
    // counted nor signalled, and freezing is refused.
    EXPECT_EQ(ws_tree_count(t), 0);
    EXPECT_EQ(ws_tree_signal(t, SIGTERM), 0);
    EXPECT_EQ(ws_tree_kill(t), -EBUSY);
    EXPECT_EQ(ws_tree_enter(t), -EBUSY);
    int from_other = 0;
    std::thread([&] { from_other = ws_tree_leave(t); }).join();
    EXPECT_EQ(from_other, -EINVAL);
    EXPECT_EQ(ThreadFreezer(), inside);

    ASSERT_EQ(ws_tree_leave(t), 0);
    EXPECT_EQ(ThreadFreezer(), before);
    EXPECT_EQ(ws_tree_leave(t), -EINVAL);
    EXPECT_EQ(ws_tree_kill(t), 0);

    stop = true;
    other.join();
    ws_tree_free(t);
}

TEST_F(CgroupTest, FreeLeavesForTheCallerStillInside)
{
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    std::string before = ThreadFreezer();
    ASSERT_EQ(ws_tree_enter(t), 0);
    ws_tree_free(t); // must not freeze this thread, and must take it out
    EXPECT_EQ(ThreadFreezer(), before);
    EXPECT_TRUE(NumericDirs(HostDir()).empty());
}

TEST_F(CgroupTest, CommandSeesItselfInTheTreeCgroup)
{
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(ws_tree_enter(t), 0);
    std::string inside = ThreadFreezer();
    ws_child *c = SpawnArgv({"/bin/sh", "-c", "grep freezer /proc/self/cgroup"});
    ASSERT_EQ(ws_tree_leave(t), 0);
    ASSERT_NE(c, nullptr);
    ws_tree_set_leader(t, ws_child_pid(c));
    std::string out = ReadAll(ws_child_stdout_fd(c));
    EXPECT_NE(out.find(":" + inside + "\n"), std::string::npos) << out;
    EXPECT_EQ(WaitExit(c).exit_code, 0);
    ws_child_free(c);
    ws_tree_free(t);
}

TEST_F(CgroupTest, StaleHostDirectoriesAreSwept)
{
    ws_tree_host_free(host_);
    host_ = nullptr;
    std::string hosts = root_ + "/workspaced";
    ASSERT_TRUE(mkdir(hosts.c_str(), 0755) == 0 || errno == EEXIST);

    // A server that is gone: a pid above pid_max can never be alive.
    long pid_max = strtol(ReadFile("/proc/sys/kernel/pid_max").c_str(), nullptr, 10);
    ASSERT_GT(pid_max, 0);
    std::string stale = hosts + "/" + std::to_string(pid_max + 12345);
    ASSERT_EQ(mkdir(stale.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((stale + "/1").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((stale + "/1/nested").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((stale + "/2").c_str(), 0755), 0);
    // A leftover under this very pid (an earlier process had it).
    std::string own = HostDir();
    ASSERT_EQ(mkdir(own.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((own + "/7").c_str(), 0755), 0);
    // A live server (pid 1 always is): not touched.
    std::string live = hosts + "/1";
    ASSERT_EQ(mkdir(live.c_str(), 0755), 0);

    std::string m = testutil::UniqueSleepArg();
    std::vector<std::pair<ws_child *, std::string>> procs = {
        {SpawnArgv({"/bin/sleep", m}), stale + "/1"},
        {SpawnArgv({"/bin/sleep", m}), stale + "/1/nested"},
        {SpawnArgv({"/bin/sleep", m}), own + "/7"},
    };
    for (auto &p : procs) {
        ASSERT_NE(p.first, nullptr);
        ASSERT_EQ(WriteFile(p.second + "/cgroup.procs", std::to_string(ws_child_pid(p.first))), 0);
    }
    // posix_spawn returns once the exec has replaced the memory, a moment
    // before the new argv is readable in /proc.
    ASSERT_TRUE(WaitFor([&] { return Marked(m).size() == 3; }));

    NewHost();
    EXPECT_FALSE(Exists(stale));
    EXPECT_FALSE(Exists(own + "/7"));
    EXPECT_TRUE(Exists(own)); // made again, for this host
    EXPECT_TRUE(Exists(live));
    EXPECT_TRUE(Marked(m).empty());
    for (auto &p : procs) {
        ws_child_exit e = WaitExit(p.first);
        EXPECT_EQ(e.signal, SIGKILL);
        ws_child_free(p.first);
    }
    EXPECT_EQ(rmdir(live.c_str()), 0);
}

// A command running as root can make cgroups below its own; freeing the
// tree ends what is in them and removes them too.
TEST_F(CgroupTest, FreeRemovesNestedCgroups)
{
    std::string m = testutil::UniqueSleepArg();
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    ws_child *c = Spawn(t, "sleep " + m);
    ASSERT_NE(c, nullptr);
    auto trees = NumericDirs(HostDir());
    ASSERT_EQ(trees.size(), 1u);
    std::string nested = HostDir() + "/" + *trees.begin() + "/made-by-command";
    ASSERT_EQ(mkdir(nested.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((nested + "/deeper").c_str(), 0755), 0);
    ws_child *inner = SpawnArgv({"/bin/sleep", m});
    ASSERT_NE(inner, nullptr);
    ASSERT_EQ(WriteFile(nested + "/deeper/cgroup.procs", std::to_string(ws_child_pid(inner))), 0);
    ASSERT_TRUE(WaitFor([&] { return Marked(m).size() == 2; }));

    ws_child_free(c);
    ws_tree_free(t);
    EXPECT_TRUE(NumericDirs(HostDir()).empty());
    EXPECT_TRUE(Marked(m).empty());
    EXPECT_EQ(WaitExit(inner).signal, SIGKILL);
    ws_child_free(inner);
}

// Removal of a stale directory goes WS_TREE_CGROUP_DEPTH_MAX levels down and
// no further: what is deeper stays, and so does the path to it.
TEST_F(CgroupTest, SweepDepthIsBounded)
{
    ws_tree_host_free(host_);
    host_ = nullptr;
    std::string hosts = root_ + "/workspaced";
    ASSERT_TRUE(mkdir(hosts.c_str(), 0755) == 0 || errno == EEXIST);
    long pid_max = strtol(ReadFile("/proc/sys/kernel/pid_max").c_str(), nullptr, 10);
    std::vector<std::string> levels = {hosts + "/" + std::to_string(pid_max + 777)};
    for (int i = 1; i <= WS_TREE_CGROUP_DEPTH_MAX + 2; i++)
        levels.push_back(levels.back() + "/d");
    for (auto &dir : levels)
        ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;

    std::string m_shallow = testutil::UniqueSleepArg(), m_deep = testutil::UniqueSleepArg();
    ws_child *shallow = SpawnArgv({"/bin/sleep", m_shallow});
    ws_child *deep = SpawnArgv({"/bin/sleep", m_deep});
    ASSERT_NE(shallow, nullptr);
    ASSERT_NE(deep, nullptr);
    ASSERT_EQ(WriteFile(levels[1] + "/cgroup.procs", std::to_string(ws_child_pid(shallow))), 0);
    ASSERT_EQ(WriteFile(levels.back() + "/cgroup.procs", std::to_string(ws_child_pid(deep))), 0);
    ASSERT_TRUE(
        WaitFor([&] { return Marked(m_shallow).size() == 1 && Marked(m_deep).size() == 1; }));

    NewHost();
    EXPECT_EQ(WaitExit(shallow).signal, SIGKILL);
    EXPECT_EQ(Marked(m_deep).size(), 1u);
    EXPECT_TRUE(Exists(levels.back()));
    EXPECT_TRUE(Exists(levels[0]));

    ws_child_free(shallow);
    ws_child_free(deep); // kills it, then the directories can go
    for (size_t i = levels.size(); i-- > 0;)
        EXPECT_EQ(rmdir(levels[i].c_str()), 0) << levels[i] << ": " << strerror(errno);
}

TEST(TreeHostConfigTest, RejectsBadConfig)
{
    ws_tree_host *h = nullptr;
    ws_tree_host_config cfg = {};
    cfg.cgroup_root = "sys/fs/cgroup/freezer";
    EXPECT_EQ(ws_tree_host_new(&cfg, &h), -EINVAL);
    cfg.cgroup_root = nullptr;
    cfg.mode = (ws_tree_mode)7;
    EXPECT_EQ(ws_tree_host_new(&cfg, &h), -EINVAL);
    EXPECT_EQ(ws_tree_host_new(nullptr, nullptr), -EINVAL);
    EXPECT_EQ(h, nullptr);
    ws_tree_host_free(nullptr);
}

// Where no freezer can be used, AUTO falls back to the subreaper and says
// why; nothing is made outside the freezer hierarchy.
TEST(TreeHostConfigTest, FallsBackWhereThereIsNoFreezer)
{
    const char *tmp = getenv("TEST_TMPDIR");
    struct Case {
        std::string root;
        int error;
    };
    std::vector<Case> cases = {
        {tmp ? tmp : "/tmp", -ENODEV},
        {"/nonexistent/cgroup", -ENOENT},
    };
    // Cgroup file systems other than the freezer, wherever this host has
    // them (a host may have a cgroup2 mount, v1 ones, both or neither).
    auto any = [](const std::string &) { return true; };
    auto not_freezer = [](const std::string &o) {
        return o.find(",freezer,") == std::string::npos;
    };
    std::vector<std::string> v2 = CgroupMounts("cgroup2", any);
    std::vector<std::string> v1 = CgroupMounts("cgroup", not_freezer);
    if (!v2.empty())
        cases.push_back({v2[0], -ENODEV});
    if (!v1.empty())
        cases.push_back({v1[0], -ENODEV});
    RecordProperty("cgroup_mounts_tried", (int)(cases.size() - 2));
    std::vector<bool> had;
    for (auto &cs : cases)
        had.push_back(Exists(cs.root + "/workspaced"));
    ASSERT_EQ(GetSubreaper(), 0);
    for (auto &cs : cases) {
        ws_tree_host_config cfg = {};
        cfg.cgroup_root = cs.root.c_str();
        ws_tree_host *h = nullptr;
        ASSERT_EQ(ws_tree_host_new(&cfg, &h), 0) << cs.root;
        EXPECT_STREQ(ws_tree_host_mechanism(h), "subreaper") << cs.root;
        EXPECT_EQ(ws_tree_host_fallback_error(h), cs.error) << cs.root;
        EXPECT_EQ(GetSubreaper(), 1);
        ws_tree_host_free(h);
        EXPECT_EQ(GetSubreaper(), 0) << "subreaper flag not restored";
    }
    for (size_t i = 0; i < cases.size(); i++)
        EXPECT_EQ(Exists(cases[i].root + "/workspaced"), had[i]) << cases[i].root;
}

// ---- subreaper mechanism ----

TEST_F(SubreaperTest, ForcedEvenWhereTheFreezerWorks)
{
    EXPECT_EQ(ws_tree_host_fallback_error(host_), 0);
    EXPECT_EQ(GetSubreaper(), 1);
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    std::string before = ThreadFreezer();
    ASSERT_EQ(ws_tree_enter(t), 0);
    EXPECT_EQ(ThreadFreezer(), before); // enter moves nothing here
    ASSERT_EQ(ws_tree_leave(t), 0);
    ws_tree_free(t);
}

TEST_F(SubreaperTest, AdoptedZombiesAreReapedButLeadersAreNot)
{
    std::string m = testutil::UniqueSleepArg();
    ws_tree *t = NewTree();
    ASSERT_NE(t, nullptr);
    // A double-forked short sleep: adopted by this process, then a zombie.
    ws_child *c = Spawn(t, "(setsid sleep 0.2 &) ; sleep " + m);
    ASSERT_NE(c, nullptr);
    ws_tree *t2 = NewTree();
    ASSERT_NE(t2, nullptr);
    ws_child *c2 = Spawn(t2, "exit 4");
    ASSERT_NE(c2, nullptr);

    std::vector<pid_t> z;
    ASSERT_TRUE(WaitFor([&] {
        z = ZombieChildren();
        return z.size() == 2; // the orphan and t2's leader
    })) << z.size();
    ws_tree_host_reap(host_);
    z = ZombieChildren();
    ASSERT_EQ(z.size(), 1u);
    EXPECT_EQ(z[0], ws_child_pid(c2)); // a live tree's leader stays for wait4
    ws_child_exit e = {};
    ASSERT_EQ(ws_child_try_reap(c2, &e), 0);
    EXPECT_EQ(e.exit_code, 4);

    ASSERT_TRUE(WaitFor([&] { return Marked(m).size() == 1; }));
    EXPECT_EQ(ws_tree_kill(t), 2); // sh and its sleep
    EXPECT_TRUE(WaitFor([&] { return Marked(m).empty(); }));
    ws_child_free(c);
    ws_tree_free(t);
    ws_child_free(c2);
    ws_tree_free(t2);
    EXPECT_TRUE(ZombieChildren().empty());
}

TEST_F(SubreaperTest, SpawnInFlightIsNeitherReapedNorKilled)
{
    std::string m1 = testutil::UniqueSleepArg(), m2 = testutil::UniqueSleepArg();
    ws_tree *t1 = NewTree();
    ASSERT_NE(t1, nullptr);
    ws_child *c1 = Spawn(t1, "sleep " + m1);
    ASSERT_NE(c1, nullptr);
    ASSERT_TRUE(WaitFor([&] { return Marked(m1).size() == 1; }));

    // t2's leader exists but is not registered yet: it looks like an
    // orphan of t1 (a child of ours that started after t1's leader).
    ws_tree *t2 = NewTree();
    ASSERT_NE(t2, nullptr);
    ASSERT_EQ(ws_tree_enter(t2), 0);
    ws_child *c2 = SpawnArgv({"/bin/sleep", m2});
    ws_child *c3 = SpawnArgv({"/bin/sh", "-c", "exit 6"});
    ASSERT_EQ(ws_tree_leave(t2), 0);
    ASSERT_NE(c2, nullptr);
    ASSERT_NE(c3, nullptr);
    struct pollfd p = {ws_child_pidfd(c3), POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 5000), 1);

    ws_tree_host_reap(host_);
    EXPECT_EQ(StateOf(ws_child_pid(c3)), 'Z');
    EXPECT_EQ(ws_tree_kill(t1), 2); // its sh and sleep, nothing else
    EXPECT_TRUE(WaitFor([&] { return Marked(m1).empty(); }));
    EXPECT_EQ(Marked(m2).size(), 1u);

    ws_child_exit e = {};
    ASSERT_EQ(ws_child_try_reap(c3, &e), 0);
    EXPECT_EQ(e.exit_code, 6);
    ws_tree_set_leader(t2, ws_child_pid(c2));
    EXPECT_EQ(ws_tree_count(t2), 1);
    EXPECT_EQ(ws_tree_kill(t2), 1);
    EXPECT_TRUE(WaitFor([&] { return Marked(m2).empty(); }));
    ws_child_free(c1);
    ws_child_free(c2);
    ws_child_free(c3);
    ws_tree_free(t1);
    ws_tree_free(t2);
}

} // namespace
