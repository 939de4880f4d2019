// local-sandbox and local-bash caps end to end: a workspace's commands
// share caps on processes, memory and CPU, through cgroup v1 controllers or
// the server's cgroup v2 subtree (tests/cgroup2/vm.sh runs this test on a
// cgroup v2 only kernel). A fork bomb stops at the cap while another
// workspace keeps working; an allocation over the memory cap is killed
// (reported as OOM by local-sandbox); out-of-range caps are refused;
// Describe says what is in force, and the host's cgroup files agree. What
// the host can enforce is probed, not assumed: Describe must name exactly
// that, an Open asking for more is refused naming the cap, and a test of a
// cap the host cannot enforce is skipped with the reason.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;
using wstest::ArgvProcess;
using wstest::Server;

namespace
{

using Clock = std::chrono::steady_clock;

std::string ReadSmall(const std::string &path)
{
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// The mechanism the server picks (server/posix/limits.h) and the caps it
// enforces with it: cgroup v1 where its controllers hold every cap, else
// the cgroup v2 subtree where that offers more. The v2 subtree offers a
// controller only when this process (in whose cgroup the server starts)
// sits at the hierarchy's root: anywhere else this process shares the
// server's cgroup, and v2 lets a cgroup hand controllers down only while
// no process sits in it.
struct HostCaps {
    std::string mechanism; // "" when no cap can be enforced
    std::vector<std::string> caps;
};

const HostCaps &Host()
{
    static const HostCaps host = [] {
        const auto &cg = wstest::ProbeCgroups();
        HostCaps v1{"cgroup-v1", {}}, v2{"cgroup-v2", {}};
        for (const char *cap : {"pids", "memory", "cpu"})
            if (cg.v1_own_dir.count(cap))
                v1.caps.push_back(cap);
        bool at_root = ReadSmall("/proc/self/cgroup").find("0::/\n") != std::string::npos;
        if (cg.v2 && at_root) {
            std::istringstream offered(ReadSmall(cg.v2_own_dir + "/cgroup.controllers"));
            std::vector<std::string> words;
            for (std::string w; offered >> w;)
                words.push_back(w);
            for (const char *cap : {"pids", "memory", "cpu"})
                if (std::find(words.begin(), words.end(), cap) != words.end())
                    v2.caps.push_back(cap);
        }
        HostCaps h = v1.caps.size() < 3 && v2.caps.size() > v1.caps.size() ? v2 : v1;
        if (h.caps.empty())
            h.mechanism = "";
        return h;
    }();
    return host;
}

// The group directory of workspace `id` for cap `ctl`, searched below this
// process's own cgroup (in that controller's v1 hierarchy, or the v2 one),
// where the server (its child) makes its groups; "" when there is none.
std::string FindGroup(const std::string &ctl, const std::string &id)
{
    const auto &cg = wstest::ProbeCgroups();
    bool v2 = Host().mechanism == "cgroup-v2";
    const std::string name = v2 ? "ws-" + id : id;
    if (v2 ? cg.v2_own_dir.empty() : !cg.v1_own_dir.count(ctl))
        return "";
    std::vector<std::string> stack{v2 ? cg.v2_own_dir : cg.v1_own_dir.at(ctl)};
    while (!stack.empty()) {
        std::string dir = stack.back();
        stack.pop_back();
        DIR *d = opendir(dir.c_str());
        if (!d)
            continue;
        while (dirent *e = readdir(d)) {
            if (e->d_type != DT_DIR || e->d_name[0] == '.')
                continue;
            std::string sub = dir + "/" + e->d_name;
            if (std::string(e->d_name) == name) {
                closedir(d);
                return sub;
            }
            stack.push_back(sub);
        }
        closedir(d);
    }
    return "";
}

// Of the caps "pids", "memory" and "cpu" in `asked` (in that order), those
// this host can enforce.
std::vector<std::string> Enforceable(const std::vector<std::string> &asked)
{
    std::vector<std::string> out;
    for (const auto &cap : asked)
        if (std::find(Host().caps.begin(), Host().caps.end(), cap) != Host().caps.end())
            out.push_back(cap);
    return out;
}

// What the cap file of group directory g says, in v1's or v2's words.
std::string CapFile(const std::string &g, const std::string &cap)
{
    bool v2 = Host().mechanism == "cgroup-v2";
    if (cap == "pids")
        return ReadSmall(g + "/pids.max");
    if (cap == "memory")
        return ReadSmall(g + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
    if (v2)
        return ReadSmall(g + "/cpu.max");
    return ReadSmall(g + "/cpu.cfs_quota_us") + ReadSmall(g + "/cpu.cfs_period_us");
}

// Why a test of `cap` cannot run here.
std::string NoCap(const std::string &cap)
{
    return "this host cannot enforce a " + cap +
           " cap (the server enforces one through a writable cgroup v1 " + cap +
           " hierarchy, or a cgroup v2 subtree whose root offers the controller; it has " +
           wstest::ProbeCgroups().Describe() + ")";
}

class SandboxLimitsTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        // Every local-sandbox command runs in a user namespace of its own:
        // a host that disables them has no local-sandbox at all.
        std::string max_userns = wstest::ReadHostFile("/proc/sys/user/max_user_namespaces");
        if (!max_userns.empty() && std::atol(max_userns.c_str()) == 0)
            GTEST_SKIP() << "user namespaces are disabled on this host "
                            "(user.max_user_namespaces = 0): no local-sandbox workspace can run";
        srv_ = std::make_unique<Server>();
        ws_ = srv_->workspaces();
        exec_ = srv_->exec();
        ClientContext ctx;
        ListProvidersResponse lp;
        ASSERT_TRUE(srv_->providers()->ListProviders(&ctx, ListProvidersRequest(), &lp).ok());
        for (const auto &p : lp.providers()) {
            if (p.kind() == "local-sandbox") {
                ASSERT_TRUE(p.available())
                    << "local-sandbox is unavailable on this host: " << p.reason();
            }
        }
    }

    // Whether the host enforces every cap in `caps`.
    bool HostEnforces(const std::vector<std::string> &caps)
    {
        return Enforceable(caps) == caps;
    }

    grpc::Status Open(const LocalSandboxConfig &cfg, std::string *id)
    {
        OpenRequest req;
        *req.mutable_local_sandbox() = cfg;
        if (!cfg.exec_mode())
            req.mutable_local_sandbox()->set_exec_mode(wstest::TestExecMode());
        req.mutable_capabilities()->mutable_fs();
        auto *sh = req.mutable_capabilities()->mutable_shell();
        for (const char *c : {"sh", "sleep", "true", "echo", "python3", "cat"})
            sh->add_allowed_commands(c);
        OpenResponse resp;
        ClientContext ctx;
        grpc::Status s = ws_->Open(&ctx, req, &resp);
        if (s.ok())
            *id = resp.workspace().id();
        return s;
    }

    // Opens cfg, whose caps (asked for, or defaults) are `caps`. Where the
    // host cannot enforce them all, the Open must be refused, naming the
    // first it cannot: then false, and the test has nothing more to check.
    bool OpenIfEnforceable(const LocalSandboxConfig &cfg, const std::vector<std::string> &caps,
                           std::string *id)
    {
        grpc::Status s = Open(cfg, id);
        std::vector<std::string> have = Enforceable(caps);
        if (have == caps) {
            EXPECT_TRUE(s.ok()) << s.error_message();
            return s.ok();
        }
        std::string missing;
        for (const auto &c : caps)
            if (missing.empty() && std::find(have.begin(), have.end(), c) == have.end())
                missing = c;
        wstest::Error e = wstest::Decode(s);
        EXPECT_EQ(e.code, grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
        EXPECT_EQ(e.reason, "WORKSPACE_FAILED");
        EXPECT_EQ(e.metadata["cap"], missing) << wstest::ProbeCgroups().Describe();
        return false;
    }

    DescribeResponse Describe(const std::string &id)
    {
        DescribeRequest req;
        req.set_workspace_id(id);
        DescribeResponse resp;
        ClientContext ctx;
        EXPECT_TRUE(ws_->Describe(&ctx, req, &resp).ok());
        return resp;
    }

    std::unique_ptr<Server> srv_;
    std::unique_ptr<Workspaces::Stub> ws_;
    std::unique_ptr<Exec::Stub> exec_;
};

TEST_F(SandboxLimitsTest, DescribeReportsCapsAndTheHostAgrees)
{
    LocalSandboxConfig cfg;
    cfg.set_pids_limit(100);
    cfg.set_memory_mb(128);
    cfg.set_cpus(0.5);
    std::string id;
    if (!OpenIfEnforceable(cfg, {"pids", "memory", "cpu"}, &id))
        return; // refused as it must be: a cap this host cannot enforce
    auto d = Describe(id);
    ASSERT_TRUE(d.has_sandbox());
    EXPECT_EQ(d.sandbox().backend(), "bubblewrap");
    EXPECT_FALSE(d.sandbox().version().empty());
    EXPECT_TRUE(d.sandbox().available());
    EXPECT_TRUE(d.sandbox().seccomp());
    EXPECT_NE(d.sandbox().seccomp_policy().find("x86_64"), std::string::npos);
    std::vector<std::string> ns(d.sandbox().namespaces().begin(), d.sandbox().namespaces().end());
    EXPECT_NE(std::find(ns.begin(), ns.end(), "net"), ns.end()) << "network is off by default";
    EXPECT_NE(std::find(ns.begin(), ns.end(), "user"), ns.end());
    const auto &l = d.sandbox().limits();
    EXPECT_EQ(l.pids_max(), 100u);
    EXPECT_EQ(l.memory_bytes(), 128ull << 20);
    EXPECT_DOUBLE_EQ(l.cpus(), 0.5);
    // Exactly what this host can enforce.
    const std::vector<std::string> want = Enforceable({"pids", "memory", "cpu"});
    EXPECT_EQ(l.mechanism(), want.empty() ? "" : Host().mechanism)
        << wstest::ProbeCgroups().Describe();
    std::vector<std::string> en(l.enforced().begin(), l.enforced().end());
    EXPECT_EQ(en, want) << wstest::ProbeCgroups().Describe();

    // The group exists once a command ran; its files say the same.
    RunResponse r;
    ASSERT_TRUE(wstest::RunProcess(exec_.get(), id, ArgvProcess({"true"}), &r).ok());
    for (const auto &cap : want) {
        std::string g = FindGroup(cap, id);
        ASSERT_FALSE(g.empty()) << "no " << cap << " group for " << id;
        if (cap == "pids")
            EXPECT_EQ(CapFile(g, cap), "100\n");
        else if (cap == "memory")
            EXPECT_EQ(CapFile(g, cap), std::to_string(128ull << 20) + "\n");
        else
            EXPECT_EQ(CapFile(g, cap),
                      Host().mechanism == "cgroup-v2" ? "50000 100000\n" : "50000\n100000\n");
    }

    // Closing the workspace removes its groups.
    ClientContext ctx;
    CloseRequest creq;
    creq.set_workspace_id(id);
    CloseResponse cresp;
    ASSERT_TRUE(ws_->Close(&ctx, creq, &cresp).ok());
    for (const auto &cap : want) {
        auto deadline = Clock::now() + std::chrono::seconds(10);
        while (!FindGroup(cap, id).empty() && Clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        EXPECT_TRUE(FindGroup(cap, id).empty()) << cap;
    }
}

TEST_F(SandboxLimitsTest, DefaultsApply)
{
    std::string id;
    if (!OpenIfEnforceable(LocalSandboxConfig(), {"pids", "memory"}, &id))
        return; // refused as it must be: a default this host cannot enforce
    DescribeResponse d = Describe(id);
    const auto &l = d.sandbox().limits();
    EXPECT_EQ(l.pids_max(), 512u);
    EXPECT_EQ(l.memory_bytes(), 2048ull << 20);
    EXPECT_EQ(l.cpus(), 0);
    std::vector<std::string> en(l.enforced().begin(), l.enforced().end());
    EXPECT_EQ(en, Enforceable({"pids", "memory"})) << wstest::ProbeCgroups().Describe();
}

// A fork bomb in one workspace stops at its cap; a second workspace, opened
// by the same server, keeps running commands while the bomb holds it.
TEST_F(SandboxLimitsTest, ForkBombIsContained)
{
    if (!HostEnforces({"pids"}))
        GTEST_SKIP() << NoCap("pids");
    LocalSandboxConfig cfg;
    cfg.set_pids_limit(40);
    std::string bomb, other;
    ASSERT_TRUE(Open(cfg, &bomb).ok());
    ASSERT_TRUE(Open(LocalSandboxConfig(), &other).ok());

    std::string marker = wstest::UniqueSleep();
    // Each shell forks a sleep and two more shells until fork fails (and
    // the shells give up); then the top shell becomes a sleep too (exec
    // needs no fork), so the command runs, with what the bomb left, until
    // it is killed.
    ProcessConfig p = ArgvProcess({"sh", "-c",
                                   "b() { sleep " + marker +
                                       " & b & b; }; b 2>/dev/null & wait; "
                                       "exec sleep " +
                                       marker});
    p.set_timeout_ms(120000);
    p.set_tag("bomb");
    std::atomic<bool> bomb_done{false};
    std::thread bomber([&] {
        RunResponse r;
        grpc::Status s = wstest::RunProcess(exec_.get(), bomb, p, &r);
        bomb_done = true;
        EXPECT_TRUE(s.ok()) << s.error_message();
        EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_SIGNALED) << r.exited().DebugString();
    });
    // The bomb reached its cap: the kernel refused a fork for it
    // (pids.events counts those).
    std::string g;
    int peak = 0;
    bool refused = false;
    for (auto deadline = Clock::now() + std::chrono::seconds(60);
         Clock::now() < deadline && !refused;
         std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
        if (g.empty())
            g = FindGroup("pids", bomb);
        if (g.empty())
            continue;
        peak = std::max(peak, std::atoi(ReadSmall(g + "/pids.current").c_str()));
        std::string events = ReadSmall(g + "/pids.events");
        refused = events.rfind("max ", 0) == 0 && events != "max 0\n";
    }
    EXPECT_FALSE(g.empty()) << "no pids group for the bomb's workspace";
    EXPECT_TRUE(refused) << "no fork was refused: the bomb never reached its cap";

    // Meanwhile the other workspace is served as usual.
    for (int i = 0; i < 5; i++) {
        RunResponse r;
        grpc::Status s = wstest::RunProcess(exec_.get(), other, ArgvProcess({"echo", "alive"}), &r);
        EXPECT_TRUE(s.ok()) << s.error_message();
        EXPECT_EQ(r.stdout(), "alive\n");
    }
    EXPECT_FALSE(bomb_done) << "the bomb was over before the other workspace was served";

    {
        ClientContext ctx;
        SendSignalRequest req;
        SendSignalResponse resp;
        req.set_workspace_id(bomb);
        req.set_tag("bomb");
        req.set_signal(SIGKILL);
        grpc::Status s = exec_->SendSignal(&ctx, req, &resp);
        EXPECT_TRUE(s.ok()) << s.error_message();
    }
    bomber.join();
    // Kernels that keep it (cgroup v1 pids.peak is recent) say exactly how
    // high the bomb went; elsewhere the samples above are a lower bound.
    if (!g.empty() && access((g + "/pids.peak").c_str(), R_OK) == 0) {
        peak = std::max(peak, std::atoi(ReadSmall(g + "/pids.peak").c_str()));
        EXPECT_GE(peak, 30) << "the bomb never came near its cap";
    }
    EXPECT_LE(peak, 40);
    EXPECT_EQ(wstest::WaitProcsAtMost(marker, 0, 10000), 0) << "bomb survivors";
}

TEST_F(SandboxLimitsTest, OverTheMemoryCapIsOom)
{
    if (!HostEnforces({"memory"}))
        GTEST_SKIP() << NoCap("memory");
    LocalSandboxConfig cfg;
    cfg.set_memory_mb(64);
    std::string id;
    ASSERT_TRUE(Open(cfg, &id).ok());
    RunResponse r;
    ProcessConfig p = ArgvProcess(
        {"python3", "-c", "x = bytearray(256 * 1024 * 1024); x[::4096] = b'y' * len(x[::4096])"});
    p.set_timeout_ms(60000);
    ASSERT_TRUE(wstest::RunProcess(exec_.get(), id, p, &r).ok());
    EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_OOM) << r.stderr();
    EXPECT_EQ(r.exited().signal(), 9);

    // Under the cap the same workspace runs normally.
    ProcessConfig small =
        ArgvProcess({"python3", "-c", "x = bytearray(8 * 1024 * 1024); print(len(x))"});
    ASSERT_TRUE(wstest::RunProcess(exec_.get(), id, small, &r).ok());
    EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(r.stdout(), "8388608\n");
}

int CountFds(pid_t pid)
{
    int n = 0;
    DIR *d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
    if (!d)
        return -1;
    while (dirent *e = readdir(d))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

// Finished commands are kept for replay (64 per workspace) but hold no fd
// of their sandbox (its status and info pipes, seccomp memfd, bind fds).
TEST_F(SandboxLimitsTest, FinishedCommandsHoldNoFds)
{
    std::string id;
    ASSERT_TRUE(Open(LocalSandboxConfig(), &id).ok());
    RunResponse r;
    ASSERT_TRUE(wstest::RunProcess(exec_.get(), id, ArgvProcess({"true"}), &r).ok());
    int before = CountFds(srv_->pid());
    ASSERT_GT(before, 0);
    for (int i = 0; i < 80; i++) {
        ASSERT_TRUE(wstest::RunProcess(exec_.get(), id, ArgvProcess({"true"}), &r).ok());
        ASSERT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED);
    }
    // The last command's fds may still be closing: wait (bounded) for the
    // count to come back down.
    int after = CountFds(srv_->pid());
    for (auto deadline = Clock::now() + std::chrono::seconds(10);
         after > before + 2 && Clock::now() < deadline; after = CountFds(srv_->pid()))
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_LE(after, before + 2) << "fds grew with finished commands";
}

TEST_F(SandboxLimitsTest, OutOfRangeCapsAreRefused)
{
    struct {
        const char *field;
        LocalSandboxConfig cfg;
    } cases[6];
    cases[0].field = "pids_limit";
    cases[0].cfg.set_pids_limit(3);
    cases[1].field = "pids_limit";
    cases[1].cfg.set_pids_limit(1u << 30);
    cases[2].field = "memory_mb";
    cases[2].cfg.set_memory_mb(1);
    cases[3].field = "cpus";
    cases[3].cfg.set_cpus(-1);
    cases[4].field = "cpus";
    cases[4].cfg.set_cpus(1e9);
    cases[5].field = "cpus";
    cases[5].cfg.set_cpus(0.001);
    for (auto &c : cases) {
        std::string id;
        grpc::Status s = Open(c.cfg, &id);
        EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "LIMIT") << c.field;
        EXPECT_EQ(wstest::Decode(s).metadata["field"], c.field);
    }
    // Nothing was created for them.
    EXPECT_TRUE(wstest::Snapshot(srv_->state_dir() + "/workspaces").empty());
}

TEST_F(SandboxLimitsTest, TooManyBindsAreRefused)
{
    LocalSandboxConfig cfg;
    for (int i = 0; i < 33; i++)
        cfg.add_read_only_paths("/usr");
    std::string id;
    grpc::Status s = Open(cfg, &id);
    EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "LIMIT");
    EXPECT_EQ(wstest::Decode(s).metadata["field"], "read_only_paths");
}

// ---- local-bash: the same caps, through the same kind of group ----------

class LocalBashLimitsTest : public SandboxLimitsTest
{
  protected:
    grpc::Status OpenBash(const LocalBashConfig &cfg, std::string *id)
    {
        OpenRequest req;
        *req.mutable_local_bash() = cfg;
        req.mutable_capabilities()->mutable_fs();
        auto *sh = req.mutable_capabilities()->mutable_shell();
        for (const char *c : {"sh", "sleep", "true", "echo", "python3", "perl"})
            sh->add_allowed_commands(c);
        OpenResponse resp;
        ClientContext ctx;
        grpc::Status s = ws_->Open(&ctx, req, &resp);
        if (s.ok())
            *id = resp.workspace().id();
        return s;
    }
};

// memory and cpu hold through the workspace's group, whose files say so;
// where the host cannot hold one the Open is refused naming it.
TEST_F(LocalBashLimitsTest, CapsHoldOrTheOpenIsRefused)
{
    LocalBashConfig cfg;
    cfg.set_memory_mb(128);
    cfg.set_cpus(0.5);
    std::string id;
    grpc::Status s = OpenBash(cfg, &id);
    std::vector<std::string> have = Enforceable({"memory", "cpu"});
    if (have.size() < 2) {
        wstest::Error e = wstest::Decode(s);
        EXPECT_EQ(e.code, grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
        EXPECT_EQ(e.reason, "WORKSPACE_FAILED");
        EXPECT_EQ(e.metadata["cap"], have.empty() || have[0] != "memory" ? "memory" : "cpu");
        return;
    }
    ASSERT_TRUE(s.ok()) << s.error_message();
    RunResponse r;
    ASSERT_TRUE(wstest::RunProcess(exec_.get(), id, ArgvProcess({"true"}), &r).ok());
    ASSERT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED);
    std::string g = FindGroup("memory", id);
    ASSERT_FALSE(g.empty()) << "no memory group for " << id;
    EXPECT_EQ(CapFile(g, "memory"), std::to_string(128ull << 20) + "\n");
    g = FindGroup("cpu", id);
    ASSERT_FALSE(g.empty()) << "no cpu group for " << id;
    EXPECT_EQ(CapFile(g, "cpu"),
              Host().mechanism == "cgroup-v2" ? "50000 100000\n" : "50000\n100000\n");

    // A command runs inside it (its own /proc/self/cgroup names the group).
    ASSERT_TRUE(wstest::RunProcess(
                    exec_.get(), id,
                    ArgvProcess({"python3", "-c", "print(open('/proc/self/cgroup').read())"}), &r)
                    .ok());
    std::string leaf = Host().mechanism == "cgroup-v2" ? "/ws-" + id + "\n" : "/" + id + "\n";
    EXPECT_NE(r.stdout().find(leaf), std::string::npos) << r.stdout();

    ClientContext ctx;
    CloseRequest creq;
    creq.set_workspace_id(id);
    CloseResponse cresp;
    ASSERT_TRUE(ws_->Close(&ctx, creq, &cresp).ok());
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!FindGroup("memory", id).empty() && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(FindGroup("memory", id).empty()) << "Close left the group";
}

// A fork bomb on the host stops at the workspace's pids cap, and another
// workspace keeps running commands meanwhile.
TEST_F(LocalBashLimitsTest, ForkBombIsContained)
{
    if (!HostEnforces({"pids"}))
        GTEST_SKIP() << NoCap("pids");
    LocalBashConfig cfg;
    cfg.set_pids_limit(40);
    std::string bomb, other;
    ASSERT_TRUE(OpenBash(cfg, &bomb).ok());
    ASSERT_TRUE(OpenBash(LocalBashConfig(), &other).ok());
    std::string marker = wstest::UniqueSleep();
    // A forker that does not give up at the first refusal, unlike a shell
    // (which exits when a fork fails, so the group's count touches its cap
    // only for an instant): it forks sleeps until the kernel refuses one,
    // then becomes a sleep itself. The group then holds exactly as many
    // processes as the cap allowed, long enough to be read.
    ProcessConfig p = ArgvProcess({"perl", "-e",
                                   "for (1..1000) { my $p = fork; last unless defined $p; "
                                   "if (!$p) { exec 'sleep', $ARGV[0]; exit 0 } } "
                                   "exec 'sleep', $ARGV[0]",
                                   marker});
    p.set_timeout_ms(120000);
    p.set_tag("bomb");
    std::atomic<bool> bomb_done{false};
    std::thread bomber([&] {
        RunResponse r;
        grpc::Status s = wstest::RunProcess(exec_.get(), bomb, p, &r);
        bomb_done = true;
        EXPECT_TRUE(s.ok()) << s.error_message();
    });
    // The bomb grows to its cap (the group's count; with a uid of its own
    // RLIMIT_NPROC may refuse the fork first, at the same number) and no
    // further.
    std::string g;
    int peak = 0;
    for (auto deadline = Clock::now() + std::chrono::seconds(60);
         Clock::now() < deadline && peak < 38;
         std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
        if (g.empty())
            g = FindGroup("pids", bomb);
        if (!g.empty())
            peak = std::max(peak, std::atoi(ReadSmall(g + "/pids.current").c_str()));
    }
    ASSERT_FALSE(g.empty()) << "no pids group for the bomb's workspace";
    EXPECT_GE(peak, 38) << "the bomb never came near its cap";
    for (int i = 0; i < 5; i++) {
        RunResponse r;
        grpc::Status s = wstest::RunProcess(exec_.get(), other, ArgvProcess({"echo", "alive"}), &r);
        EXPECT_TRUE(s.ok()) << s.error_message();
        EXPECT_EQ(r.stdout(), "alive\n");
    }
    for (int i = 0; i < 20; i++)
        peak = std::max(peak, std::atoi(ReadSmall(g + "/pids.current").c_str()));
    EXPECT_LE(peak, 40);
    EXPECT_FALSE(bomb_done) << "the bomb was over before the other workspace was served";
    {
        ClientContext ctx;
        SendSignalRequest req;
        SendSignalResponse resp;
        req.set_workspace_id(bomb);
        req.set_tag("bomb");
        req.set_signal(SIGKILL);
        EXPECT_TRUE(exec_->SendSignal(&ctx, req, &resp).ok());
    }
    bomber.join();
    EXPECT_EQ(wstest::WaitProcsAtMost(marker, 0, 10000), 0) << "bomb survivors";
}

// An allocation over the memory cap is killed by the kernel; under it the
// same workspace runs normally.
TEST_F(LocalBashLimitsTest, OverTheMemoryCapIsKilled)
{
    if (!HostEnforces({"memory"}))
        GTEST_SKIP() << NoCap("memory");
    LocalBashConfig cfg;
    cfg.set_memory_mb(64);
    std::string id;
    ASSERT_TRUE(OpenBash(cfg, &id).ok());
    RunResponse r;
    ProcessConfig p = ArgvProcess(
        {"python3", "-c", "x = bytearray(256 * 1024 * 1024); x[::4096] = b'y' * len(x[::4096])"});
    p.set_timeout_ms(60000);
    ASSERT_TRUE(wstest::RunProcess(exec_.get(), id, p, &r).ok());
    EXPECT_EQ(r.exited().signal(), 9) << r.exited().DebugString() << r.stderr();

    ProcessConfig small =
        ArgvProcess({"python3", "-c", "x = bytearray(8 * 1024 * 1024); print(len(x))"});
    ASSERT_TRUE(wstest::RunProcess(exec_.get(), id, small, &r).ok());
    EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(r.stdout(), "8388608\n");
}

} // namespace
