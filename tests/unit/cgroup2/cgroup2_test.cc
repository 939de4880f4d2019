// Tests for server/posix/cgroup2.c with real processes in real cgroups of
// the host's cgroup v2 hierarchy (on a hybrid host its unified mount).
// Processes are moved into a command leaf by a cgroup.procs write; what
// survives is checked by pidfd, never by a pid that may have been reused.
//
// They need root and a writable cgroup2 mount, and skip, saying so,
// without them. Most work below a private base, <mount>/wstest2.<pid>;
// the ones that check what the server itself does (the default base, the
// caps) use the default. The caps are checked against what the group's own
// cgroup.controllers offers, read here: a cap whose controller is offered
// must be in force with the value read back, one that is not must be
// reported missing. The tests that run a fork or memory bomb against a cap
// skip where the controller is not offered (a hybrid host gives cgroup v2
// none of pids, memory, cpu); tests/cgroup2/vm.sh runs them on a v2 kernel.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <linux/magic.h>

extern "C" {
#include "server/posix/cgroup2.h"
}

#include "tests/testutil/process.h"

namespace
{

using testutil::ReadFile;

// How long anything the kernel does promptly may take here, at most: a
// bound for waits, never a measure.
constexpr int kBoundMs = 10000;

std::string Trim(std::string s)
{
    while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
        s.pop_back();
    return s;
}

bool Exists(const std::string &path)
{
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

// Writes s in one write(); returns 0 or errno.
int WriteFile(const std::string &path, const std::string &s)
{
    int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    int r = write(fd, s.data(), s.size()) == (ssize_t)s.size() ? 0 : errno;
    close(fd);
    return r;
}

// The first cgroup2 mount point in /proc/self/mountinfo, "" when none.
std::string Cgroup2Mount()
{
    std::istringstream in(ReadFile("/proc/self/mountinfo"));
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream f(line);
        std::vector<std::string> fields;
        for (std::string w; f >> w;)
            fields.push_back(w);
        auto dash = std::find(fields.begin(), fields.end(), "-");
        if (dash != fields.end() && fields.end() - dash >= 2 && fields.size() >= 5 &&
            dash[1] == "cgroup2")
            return fields[4];
    }
    return "";
}

// Why these tests cannot run here ("" when they can).
std::string SkipReason()
{
    if (geteuid() != 0)
        return "needs root: the tests make cgroups and move processes between them";
    std::string m = Cgroup2Mount();
    if (m.empty())
        return "no cgroup2 file system is mounted here";
    struct statvfs sv;
    if (statvfs(m.c_str(), &sv) == 0 && (sv.f_flag & ST_RDONLY))
        return "the cgroup2 mount " + m + " is read-only here";
    return "";
}

// The "0::" line's path in /proc/<pid>/cgroup ("self" for this process).
std::string V2Path(const std::string &pid)
{
    std::istringstream in(ReadFile("/proc/" + pid + "/cgroup"));
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("0::", 0) == 0)
            return line.substr(3);
    return "";
}

std::vector<pid_t> Procs(const std::string &cgroup)
{
    std::vector<pid_t> out;
    std::istringstream in(ReadFile(cgroup + "/cgroup.procs"));
    for (pid_t p; in >> p;)
        out.push_back(p);
    return out;
}

bool Has(const std::vector<pid_t> &v, pid_t p)
{
    return std::find(v.begin(), v.end(), p) != v.end();
}

// glibc's <sys/pidfd.h> declares pidfd_open without C linkage for C++.
int PidfdOpen(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

bool HasWord(const std::string &list, const std::string &w)
{
    std::istringstream in(list);
    for (std::string x; in >> x;)
        if (x == w)
            return true;
    return false;
}

// Whether the process behind pidfd ended within kBoundMs (a pidfd polls
// readable once its process has exited, reaped or not).
bool EndsInTime(int pidfd)
{
    struct pollfd p = {pidfd, POLLIN, 0};
    return poll(&p, 1, kBoundMs) == 1;
}

// Kills whatever is in the cgroup at path and below and removes it all,
// deepest first: the tests' own cleanup, independent of the module.
void RemoveCgroupTree(const std::string &path)
{
    if (!Exists(path))
        return;
    (void)WriteFile(path + "/cgroup.kill", "1");
    DIR *d = opendir(path.c_str());
    if (d) {
        std::vector<std::string> subs;
        while (struct dirent *de = readdir(d))
            if (de->d_type == DT_DIR && strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                subs.push_back(path + "/" + de->d_name);
        closedir(d);
        for (const std::string &s : subs)
            RemoveCgroupTree(s);
    }
    auto t0 = std::chrono::steady_clock::now();
    while (rmdir(path.c_str()) < 0 && errno == EBUSY &&
           std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(kBoundMs))
        usleep(2000);
}

// Removes the private bases of earlier runs that died before their
// cleanup (a timeout, a crash): wstest2.<pid> whose pid is gone.
void RemoveStaleBases(const std::string &mount)
{
    DIR *d = opendir(mount.c_str());
    if (!d)
        return;
    std::vector<std::string> stale;
    while (struct dirent *de = readdir(d)) {
        std::string n = de->d_name;
        if (n.rfind("wstest2.", 0) != 0)
            continue;
        pid_t pid = (pid_t)atoi(n.c_str() + 8);
        if (pid > 0 && kill(pid, 0) < 0 && errno == ESRCH)
            stale.push_back(mount + "/" + n);
    }
    closedir(d);
    for (const std::string &s : stale)
        RemoveCgroupTree(s);
}

// A child that waits for a byte on its go pipe and then runs fn; fn's
// return value is its exit status.
struct Child {
    pid_t pid = -1;
    int go = -1;    // write end: one byte lets it run, closing it too
    int pidfd = -1; // opened right after fork: the child cannot be reaped yet

    void Go()
    {
        if (go >= 0) {
            (void)!write(go, "g", 1);
            close(go);
            go = -1;
        }
    }

    // Kills and reaps it if it is still there; the status when it was reaped.
    int Reap()
    {
        int status = -1;
        if (pid > 0) {
            kill(pid, SIGKILL);
            if (waitpid(pid, &status, 0) != pid)
                status = -1;
            pid = -1;
        }
        if (go >= 0)
            close(go);
        go = -1;
        if (pidfd >= 0)
            close(pidfd);
        pidfd = -1;
        return status;
    }
};

template <typename F> Child StartChild(F fn)
{
    Child c;
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return c;
    c.pid = fork();
    if (c.pid == 0) {
        close(p[1]);
        char b;
        (void)!read(p[0], &b, 1);
        close(p[0]);
        _exit(fn());
    }
    close(p[0]);
    c.go = p[1];
    if (c.pid > 0)
        c.pidfd = PidfdOpen(c.pid);
    return c;
}

// Reaps a child that must end by itself within kBoundMs; its wait status
// or -1.
int WaitChild(Child *c)
{
    int status = -1;
    if (c->pidfd >= 0 && EndsInTime(c->pidfd) && waitpid(c->pid, &status, 0) == c->pid)
        c->pid = -1;
    c->Reap();
    return status;
}

class Cgroup2Test : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        std::string why = SkipReason();
        if (!why.empty())
            GTEST_SKIP() << why;
        mount_ = Cgroup2Mount();
        RemoveStaleBases(mount_);
        base_ = mount_ + "/wstest2." + std::to_string(getpid());
        ASSERT_TRUE(mkdir(base_.c_str(), 0755) == 0 || errno == EEXIST)
            << base_ << ": " << strerror(errno);
    }

    void NewHost(bool use_private_base, bool no_kill_file = false)
    {
        ws_cgroup2_config cfg = {};
        cfg.root = use_private_base ? base_.c_str() : nullptr;
        cfg.no_kill_file = no_kill_file;
        int r = ws_cgroup2_host_new(&cfg, &host_);
        ASSERT_EQ(r, 0) << strerror(-r);
        ASSERT_STREQ(ws_cgroup2_host_mechanism(host_), "cgroup-v2");
    }

    void NewGroup(const char *id, const ws_cgroup2_caps *caps = nullptr)
    {
        int r = ws_cgroup2_group_new(host_, id, caps, &group_);
        ASSERT_EQ(r, 0) << strerror(-r);
    }

    void NewLeaf()
    {
        int r = ws_cgroup2_leaf_new(group_, &leaf_);
        ASSERT_EQ(r, 0) << strerror(-r);
    }

    void TearDown() override
    {
        for (Child &c : children_)
            c.Reap();
        ws_cgroup2_leaf_free(leaf_);
        ws_cgroup2_group_free(group_);
        ws_cgroup2_host_free(host_);
        if (!base_.empty())
            RemoveCgroupTree(base_);
    }

    std::string mount_, base_;
    ws_cgroup2_host *host_ = nullptr;
    ws_cgroup2_group *group_ = nullptr;
    ws_cgroup2_leaf *leaf_ = nullptr;
    std::vector<Child> children_;
};

// What the server does at start on this host: the process's own cgroup
// decides the base; the host directory is a cgroup2 cgroup named after the
// pid, and it is gone after free.
TEST_F(Cgroup2Test, SetupMakesTheSubtree)
{
    std::string own = V2Path("self");
    ASSERT_FALSE(own.empty()) << "no 0:: line in /proc/self/cgroup";
    NewHost(false);
    std::string path = ws_cgroup2_host_path(host_);
    std::string pid = std::to_string(getpid());
    if (own == "/") {
        EXPECT_EQ(path, mount_ + "/workspaced/" + pid);
        EXPECT_EQ(V2Path("self"), "/") << "the process moved although it is in the root";
    } else {
        // Started below the root: the process now sits in <own>/server.
        EXPECT_EQ(V2Path("self"), own + "/server");
    }
    struct statfs sf;
    ASSERT_EQ(statfs(path.c_str(), &sf), 0) << path << ": " << strerror(errno);
    EXPECT_EQ(sf.f_type, (decltype(sf.f_type))CGROUP2_SUPER_MAGIC);

    // What the host says a group can have is what its directory hands on.
    std::string handed = ReadFile(path + "/cgroup.subtree_control");
    unsigned want = (HasWord(handed, "pids") ? (unsigned)WS_CGROUP2_PIDS : 0u) |
                    (HasWord(handed, "memory") ? (unsigned)WS_CGROUP2_MEMORY : 0u) |
                    (HasWord(handed, "cpu") ? (unsigned)WS_CGROUP2_CPU : 0u);
    EXPECT_EQ(ws_cgroup2_host_available(host_), want) << "subtree_control: " << handed;

    // One host per process.
    ws_cgroup2_host *second = nullptr;
    EXPECT_EQ(ws_cgroup2_host_new(nullptr, &second), -EBUSY);

    NewGroup("abc-123_X");
    NewLeaf();
    EXPECT_EQ(std::string(ws_cgroup2_leaf_path(leaf_)), path + "/ws-abc-123_X/c1");
    EXPECT_TRUE(Exists(ws_cgroup2_leaf_path(leaf_)));
    struct stat st;
    ASSERT_EQ(fstat(ws_cgroup2_leaf_fd(leaf_), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(ws_cgroup2_leaf_populated(leaf_), 0);
    EXPECT_EQ(ws_cgroup2_leaf_count(leaf_), 0);

    ws_cgroup2_leaf_free(leaf_);
    leaf_ = nullptr;
    EXPECT_FALSE(Exists(path + "/ws-abc-123_X/c1"));
    ws_cgroup2_group_free(group_);
    group_ = nullptr;
    EXPECT_FALSE(Exists(path + "/ws-abc-123_X"));
    ws_cgroup2_host_free(host_);
    host_ = nullptr;
    EXPECT_FALSE(Exists(path)) << "the host's directory outlived the host";
}

TEST_F(Cgroup2Test, GroupNamesAreChecked)
{
    NewHost(true);
    ws_cgroup2_group *g = nullptr;
    EXPECT_EQ(ws_cgroup2_group_new(host_, "", nullptr, &g), -EINVAL);
    EXPECT_EQ(ws_cgroup2_group_new(host_, "../x", nullptr, &g), -EINVAL);
    EXPECT_EQ(ws_cgroup2_group_new(host_, "a/b", nullptr, &g), -EINVAL);
    EXPECT_EQ(ws_cgroup2_group_new(host_, std::string(65, 'a').c_str(), nullptr, &g), -EINVAL);
    NewGroup(std::string(64, 'a').c_str());
    EXPECT_EQ(ws_cgroup2_group_new(host_, std::string(64, 'a').c_str(), nullptr, &g), -EEXIST);
    EXPECT_EQ(g, nullptr);
}

// A server started in a cgroup of its own below the root (systemd's
// Delegate=yes) moves into <own>/server, once: a second host of the same
// process uses <own> again. Run in a child placed in such a cgroup.
TEST_F(Cgroup2Test, OwnCgroupBelowTheRootMovesIntoServer)
{
    std::string own_dir = base_ + "/own";
    ASSERT_EQ(mkdir(own_dir.c_str(), 0755), 0) << strerror(errno);
    // Exit statuses say which check failed.
    Child c = StartChild([&]() -> int {
        std::string own = V2Path("self");
        std::string me = std::to_string(getpid());
        for (int round = 0; round < 2; round++) {
            ws_cgroup2_host *h = nullptr;
            if (ws_cgroup2_host_new(nullptr, &h) != 0)
                return 10 + round;
            if (V2Path("self") != own + "/server")
                return 20 + round;
            if (std::string(ws_cgroup2_host_path(h)) != own_dir + "/workspaced/" + me)
                return 30 + round;
            if (!Exists(own_dir + "/workspaced/" + me))
                return 40 + round;
            ws_cgroup2_host_free(h);
            if (Exists(own_dir + "/workspaced/" + me))
                return 50 + round;
        }
        return 0;
    });
    children_.push_back(c);
    Child &ch = children_.back();
    ASSERT_GT(ch.pid, 0);
    ASSERT_EQ(WriteFile(own_dir + "/cgroup.procs", std::to_string(ch.pid)), 0);
    std::string own_rel = V2Path(std::to_string(ch.pid));
    ASSERT_FALSE(own_rel.empty());
    ch.Go();
    int status = WaitChild(&ch);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << testutil::DescribeStatus(status)
        << " (10s: setup failed, 20s: not in <own>/server, 30s: wrong host path, 40s: no host "
           "directory, 50s: host directory left; +1: on the second host)";
    EXPECT_TRUE(Exists(own_dir + "/server"));
}

enum class Kill { kKillFile, kFreeze };

std::string KillName(const ::testing::TestParamInfo<Kill> &i)
{
    return i.param == Kill::kKillFile ? "CgroupKill" : "FreezeFallback";
}

class Cgroup2KillTest : public Cgroup2Test, public ::testing::WithParamInterface<Kill>
{
  protected:
    void SetUp() override
    {
        Cgroup2Test::SetUp();
        if (IsSkipped() || HasFatalFailure())
            return;
        if (GetParam() == Kill::kKillFile && !Exists(base_ + "/cgroup.kill"))
            GTEST_SKIP() << "this kernel has no cgroup.kill (Linux 5.14+)";
    }
};

INSTANTIATE_TEST_SUITE_P(Ways, Cgroup2KillTest, ::testing::Values(Kill::kKillFile, Kill::kFreeze),
                         KillName);

// A command that leaves its session and double-forks: the escapee is
// neither in the command's session nor its child, yet the leaf holds it and
// one kill ends both; the leaf's cgroup.events announces the emptiness
// through POLLPRI.
TEST_P(Cgroup2KillTest, KillEndsASetsidDoubleForkEscapee)
{
    NewHost(true, GetParam() == Kill::kFreeze);
    NewGroup("k");
    NewLeaf();
    int report[2];
    ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
    Child c = StartChild([&]() -> int {
        pid_t g = fork();
        if (g == 0) {
            setsid();
            if (fork() == 0) {
                std::string line = "escapee " + std::to_string(getpid()) + "\n";
                (void)!write(report[1], line.data(), line.size());
                for (;;)
                    pause();
            }
            _exit(0);
        }
        // Its middle process gone, the command holds two processes.
        waitpid(g, nullptr, 0);
        (void)!write(report[1], "reaped\n", 7);
        for (;;)
            pause();
    });
    children_.push_back(c);
    Child &ch = children_.back();
    ASSERT_GT(ch.pid, 0);
    close(report[1]);
    ASSERT_EQ(ws_cgroup2_leaf_add(leaf_, ch.pid), 0);
    ch.Go();
    pid_t esc = 0;
    bool reaped = false;
    for (std::string line; (!esc || !reaped) && testutil::ReadLine(report[0], &line, kBoundMs);) {
        if (line.rfind("escapee ", 0) == 0)
            esc = (pid_t)atoi(line.c_str() + 8);
        reaped = reaped || line == "reaped";
    }
    close(report[0]);
    ASSERT_GT(esc, 0) << "the escapee never reported";
    ASSERT_TRUE(reaped) << "the command never reaped its middle process";
    int esc_fd = PidfdOpen(esc);
    ASSERT_GE(esc_fd, 0) << strerror(errno);

    // It escaped: another session, not the child's child.
    EXPECT_NE(getsid(esc), getsid(ch.pid));
    std::string leaf = ws_cgroup2_leaf_path(leaf_);
    std::vector<pid_t> in = Procs(leaf);
    EXPECT_TRUE(Has(in, ch.pid) && Has(in, esc)) << "not both in " << leaf;
    EXPECT_EQ(ws_cgroup2_leaf_count(leaf_), 2);
    EXPECT_EQ(ws_cgroup2_leaf_signal(leaf_, 0, nullptr, 0), 2);
    EXPECT_EQ(ws_cgroup2_leaf_signal(leaf_, 0, &esc, 1), 1);
    EXPECT_EQ(ws_cgroup2_leaf_wait_empty(leaf_, 20), -ETIMEDOUT);
    // Reading re-arms POLLPRI: only a change after this read wakes poll.
    ASSERT_EQ(ws_cgroup2_leaf_populated(leaf_), 1);

    ASSERT_EQ(ws_cgroup2_leaf_kill(leaf_), 0);
    struct pollfd p = {ws_cgroup2_leaf_events_fd(leaf_), POLLPRI, 0};
    ASSERT_EQ(poll(&p, 1, kBoundMs), 1) << "no POLLPRI from cgroup.events after the kill";
    EXPECT_TRUE(p.revents & POLLPRI);
    EXPECT_EQ(ws_cgroup2_leaf_wait_empty(leaf_, kBoundMs), 0);
    EXPECT_EQ(ws_cgroup2_leaf_populated(leaf_), 0);
    EXPECT_TRUE(EndsInTime(esc_fd)) << "the escapee " << esc << " survived";
    close(esc_fd);
    EXPECT_TRUE(EndsInTime(ch.pidfd)) << "the command " << ch.pid << " survived";
    int status = ch.Reap();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << testutil::DescribeStatus(status);
    EXPECT_EQ(ws_cgroup2_leaf_count(leaf_), 0);

    ws_cgroup2_leaf_free(leaf_);
    leaf_ = nullptr;
    EXPECT_FALSE(Exists(leaf));
}

// What a server that died left behind: B/workspaced/<dead pid>, nested,
// with a live process deep inside. The next setup kills it and removes the
// directories; a live pid's directory and other names stay.
TEST_P(Cgroup2KillTest, SetupSweepsAStaleSubtree)
{
    // A pid that is free: a child's, once it is reaped.
    Child dead = StartChild([] { return 0; });
    ASSERT_GT(dead.pid, 0);
    pid_t dead_pid = dead.pid;
    dead.Go();
    ASSERT_EQ(WaitChild(&dead), 0);
    ASSERT_EQ(kill(dead_pid, 0), -1);
    ASSERT_EQ(errno, ESRCH);

    std::string hosts = base_ + "/workspaced";
    std::string stale = hosts + "/" + std::to_string(dead_pid);
    std::string deep = stale + "/ws-x/c1";
    for (const std::string &d : {hosts, stale, stale + "/ws-x", deep})
        ASSERT_EQ(mkdir(d.c_str(), 0755), 0) << d << ": " << strerror(errno);
    std::string live = hosts + "/1"; // pid 1 is alive
    std::string other = hosts + "/not-a-pid";
    ASSERT_EQ(mkdir(live.c_str(), 0755), 0);
    ASSERT_EQ(mkdir(other.c_str(), 0755), 0);

    Child c = StartChild([] {
        for (;;)
            pause();
        return 0;
    });
    children_.push_back(c);
    Child &ch = children_.back();
    ASSERT_GT(ch.pid, 0);
    ASSERT_EQ(WriteFile(deep + "/cgroup.procs", std::to_string(ch.pid)), 0);
    ch.Go();
    ASSERT_TRUE(Has(Procs(deep), ch.pid));

    NewHost(true, GetParam() == Kill::kFreeze);
    EXPECT_TRUE(EndsInTime(ch.pidfd)) << "the process in the stale subtree survived setup";
    int status = ch.Reap();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << testutil::DescribeStatus(status);
    EXPECT_FALSE(Exists(stale)) << "the stale subtree is still there";
    EXPECT_TRUE(Exists(live)) << "a live pid's directory was swept";
    EXPECT_TRUE(Exists(other));
    EXPECT_TRUE(Exists(hosts + "/" + std::to_string(getpid())));
}

// A command that ends by itself empties the leaf; wait_empty sees it.
TEST_F(Cgroup2Test, WaitEmptySeesACommandEndByItself)
{
    NewHost(true);
    NewGroup("w");
    NewLeaf();
    Child c = StartChild([] { return 7; });
    children_.push_back(c);
    Child &ch = children_.back();
    ASSERT_GT(ch.pid, 0);
    ASSERT_EQ(ws_cgroup2_leaf_add(leaf_, ch.pid), 0);
    EXPECT_EQ(ws_cgroup2_leaf_populated(leaf_), 1);
    EXPECT_EQ(ws_cgroup2_leaf_wait_empty(leaf_, 20), -ETIMEDOUT);
    ch.Go();
    // Empty as soon as it exits, before it is reaped.
    EXPECT_EQ(ws_cgroup2_leaf_wait_empty(leaf_, kBoundMs), 0);
    EXPECT_EQ(ws_cgroup2_leaf_count(leaf_), 0);
    int status = WaitChild(&ch);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7) << testutil::DescribeStatus(status);
}

struct CapCase {
    const char *controller;
    unsigned bit;
    const char *file;
    const char *value; // as the kernel reads it back
};

// Each cap is in force exactly when the group's cgroup.controllers offers
// its controller; otherwise it is reported missing, never enforced. With
// the default base, as the server runs.
TEST_F(Cgroup2Test, CapsAreEnforcedOnlyWhereTheirControllerIs)
{
    NewHost(false);
    ws_cgroup2_caps caps = {};
    caps.pids_max = 64;
    caps.memory_bytes = 256ull << 20;
    caps.cpu_millis = 500;
    NewGroup("caps", &caps);
    std::string dir = std::string(ws_cgroup2_host_path(host_)) + "/ws-caps";
    std::string offered = ReadFile(dir + "/cgroup.controllers");
    unsigned enforced = ws_cgroup2_group_enforced(group_);
    unsigned missing = ws_cgroup2_group_missing(group_);
    const CapCase cases[] = {
        {"pids", WS_CGROUP2_PIDS, "pids.max", "64"},
        {"memory", WS_CGROUP2_MEMORY, "memory.max", "268435456"},
        {"cpu", WS_CGROUP2_CPU, "cpu.max", "50000 100000"},
    };
    for (const CapCase &k : cases) {
        if (HasWord(offered, k.controller)) {
            EXPECT_TRUE(enforced & k.bit) << k.controller << " is offered but not enforced";
            EXPECT_FALSE(missing & k.bit) << k.controller;
            EXPECT_EQ(Trim(ReadFile(dir + "/" + k.file)), k.value) << k.file;
        } else {
            EXPECT_FALSE(enforced & k.bit)
                << k.controller << " reported enforced without its controller (offered: \""
                << Trim(offered) << "\")";
            EXPECT_TRUE(missing & k.bit) << k.controller << " not reported missing";
            EXPECT_FALSE(Exists(dir + "/" + k.file));
        }
    }
    if (HasWord(offered, "memory") && Exists(dir + "/memory.swap.max")) {
        EXPECT_EQ(Trim(ReadFile(dir + "/memory.swap.max")), "0");
    }
    EXPECT_EQ(enforced | missing, WS_CGROUP2_PIDS | WS_CGROUP2_MEMORY | WS_CGROUP2_CPU);
    uint64_t ooms = 99;
    EXPECT_EQ(ws_cgroup2_group_oom_kills(group_, &ooms), 0);
    EXPECT_EQ(ooms, 0u);
    std::cout << "[ info     ] group controllers here: \"" << Trim(offered) << "\", enforced "
              << enforced << ", missing " << missing << "\n";

    // Nothing asked, nothing missing.
    ws_cgroup2_group *none = nullptr;
    ASSERT_EQ(ws_cgroup2_group_new(host_, "none", nullptr, &none), 0);
    EXPECT_EQ(ws_cgroup2_group_enforced(none), 0u);
    EXPECT_EQ(ws_cgroup2_group_missing(none), 0u);
    ws_cgroup2_group_free(none);
}

// The cap in force, not just written: where the pids controller is
// offered, a fork loop in a leaf stops at pids.max.
TEST_F(Cgroup2Test, PidsCapStopsAForkLoop)
{
    NewHost(false);
    ws_cgroup2_caps caps = {};
    caps.pids_max = 8;
    NewGroup("pids", &caps);
    if (!(ws_cgroup2_group_enforced(group_) & WS_CGROUP2_PIDS))
        GTEST_SKIP() << "the pids controller is not offered to a group here (its "
                        "cgroup.controllers: \""
                     << Trim(ReadFile(std::string(ws_cgroup2_host_path(host_)) +
                                      "/ws-pids/cgroup.controllers"))
                     << "\")";
    NewLeaf();
    int report[2];
    ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
    Child c = StartChild([&]() -> int {
        int made = 0, err = 0;
        for (int i = 0; i < 32; i++) {
            pid_t p = fork();
            if (p == 0) {
                for (;;)
                    pause();
            }
            if (p < 0) {
                err = errno;
                break;
            }
            made++;
        }
        std::string line = std::to_string(made) + " " + std::to_string(err) + "\n";
        (void)!write(report[1], line.data(), line.size());
        for (;;)
            pause();
    });
    children_.push_back(c);
    Child &ch = children_.back();
    ASSERT_GT(ch.pid, 0);
    close(report[1]);
    ASSERT_EQ(ws_cgroup2_leaf_add(leaf_, ch.pid), 0);
    ch.Go();
    std::string line;
    bool got = testutil::ReadLine(report[0], &line, kBoundMs);
    close(report[0]);
    ASSERT_TRUE(got);
    int made = -1, err = -1;
    std::istringstream(line) >> made >> err;
    EXPECT_EQ(made, 7) << "pids.max 8 counts the loop itself";
    EXPECT_EQ(err, EAGAIN) << strerror(err);
    ASSERT_EQ(ws_cgroup2_leaf_kill(leaf_), 0);
    EXPECT_EQ(ws_cgroup2_leaf_wait_empty(leaf_, kBoundMs), 0);
}

// Where the memory controller is offered, a process that touches more
// than memory.max is OOM-killed, and the group counts it.
TEST_F(Cgroup2Test, MemoryCapKillsAndCountsTheOom)
{
    NewHost(false);
    ws_cgroup2_caps caps = {};
    caps.memory_bytes = 32ull << 20;
    NewGroup("mem", &caps);
    if (!(ws_cgroup2_group_enforced(group_) & WS_CGROUP2_MEMORY))
        GTEST_SKIP() << "the memory controller is not offered to a group here (its "
                        "cgroup.controllers: \""
                     << Trim(ReadFile(std::string(ws_cgroup2_host_path(host_)) +
                                      "/ws-mem/cgroup.controllers"))
                     << "\")";
    NewLeaf();
    Child c = StartChild([] {
        size_t n = 256u << 20;
        char *p =
            (char *)mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return 2;
        for (size_t i = 0; i < n; i += 4096)
            p[i] = 1;
        return 3; // the cap did not hold
    });
    children_.push_back(c);
    Child &ch = children_.back();
    ASSERT_GT(ch.pid, 0);
    ASSERT_EQ(ws_cgroup2_leaf_add(leaf_, ch.pid), 0);
    ch.Go();
    int status = WaitChild(&ch);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << testutil::DescribeStatus(status);
    uint64_t ooms = 0;
    ASSERT_EQ(ws_cgroup2_group_oom_kills(group_, &ooms), 0);
    EXPECT_GE(ooms, 1u);
}

} // namespace
