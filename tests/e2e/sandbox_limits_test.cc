// local-sandbox caps end to end: a workspace's commands share caps on
// processes, memory and CPU (cgroup v1 here). A fork bomb stops at the cap
// while another workspace keeps working; an allocation over the memory cap
// is reported as OOM; out-of-range caps are refused; Describe says what is
// in force, and the host's cgroup files agree.
#include <dirent.h>
#include <unistd.h>

#include <chrono>
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

// The group directory of workspace `id` in controller `ctl`, searched
// under the cgroup mount (the server's parent group is named after it).
std::string FindGroup(const std::string &ctl, const std::string &id)
{
    std::string root = "/sys/fs/cgroup/" + ctl;
    std::vector<std::string> stack{root};
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
            if (std::string(e->d_name) == id) {
                closedir(d);
                return sub;
            }
            stack.push_back(sub);
        }
        closedir(d);
    }
    return "";
}

class SandboxLimitsTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        srv_ = std::make_unique<Server>();
        ws_ = srv_->workspaces();
        exec_ = srv_->exec();
    }

    grpc::Status Open(const LocalSandboxConfig &cfg, std::string *id)
    {
        OpenRequest req;
        *req.mutable_local_sandbox() = cfg;
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
    ASSERT_TRUE(Open(cfg, &id).ok());
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
    EXPECT_EQ(l.mechanism(), "cgroup-v1");
    std::vector<std::string> en(l.enforced().begin(), l.enforced().end());
    EXPECT_EQ(en, (std::vector<std::string>{"pids", "memory", "cpu"}));

    // The group exists once a command ran; its files say the same.
    RunResponse r;
    ASSERT_TRUE(wstest::RunProcess(exec_.get(), id, ArgvProcess({"true"}), &r).ok());
    std::string pids = FindGroup("pids", id), mem = FindGroup("memory", id),
                cpu = FindGroup("cpu", id);
    ASSERT_FALSE(pids.empty());
    ASSERT_FALSE(mem.empty());
    ASSERT_FALSE(cpu.empty());
    EXPECT_EQ(ReadSmall(pids + "/pids.max"), "100\n");
    EXPECT_EQ(ReadSmall(mem + "/memory.limit_in_bytes"), std::to_string(128ull << 20) + "\n");
    EXPECT_EQ(ReadSmall(cpu + "/cpu.cfs_quota_us"), "50000\n");
    EXPECT_EQ(ReadSmall(cpu + "/cpu.cfs_period_us"), "100000\n");

    // Closing the workspace removes its groups.
    ClientContext ctx;
    CloseRequest creq;
    creq.set_workspace_id(id);
    CloseResponse cresp;
    ASSERT_TRUE(ws_->Close(&ctx, creq, &cresp).ok());
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!FindGroup("pids", id).empty() && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(FindGroup("pids", id).empty());
    EXPECT_TRUE(FindGroup("memory", id).empty());
}

TEST_F(SandboxLimitsTest, DefaultsApply)
{
    std::string id;
    ASSERT_TRUE(Open(LocalSandboxConfig(), &id).ok());
    DescribeResponse d = Describe(id);
    const auto &l = d.sandbox().limits();
    EXPECT_EQ(l.pids_max(), 512u);
    EXPECT_EQ(l.memory_bytes(), 2048ull << 20);
    EXPECT_EQ(l.cpus(), 0);
    std::vector<std::string> en(l.enforced().begin(), l.enforced().end());
    EXPECT_EQ(en, (std::vector<std::string>{"pids", "memory"}));
}

// A fork bomb in one workspace stops at its cap; a second workspace, opened
// by the same server, keeps running commands meanwhile.
TEST_F(SandboxLimitsTest, ForkBombIsContained)
{
    LocalSandboxConfig cfg;
    cfg.set_pids_limit(40);
    std::string bomb, other;
    ASSERT_TRUE(Open(cfg, &bomb).ok());
    ASSERT_TRUE(Open(LocalSandboxConfig(), &other).ok());

    std::string marker = wstest::UniqueSleep();
    // Each shell forks two more (and a sleep) until fork fails; the top
    // shell waits for them.
    ProcessConfig p =
        ArgvProcess({"sh", "-c", "b() { sleep " + marker + " & b & b; }; b 2>/dev/null & wait"});
    p.set_timeout_ms(6000);
    std::thread bomber([&] {
        RunResponse r;
        grpc::Status s = wstest::RunProcess(exec_.get(), bomb, p, &r);
        EXPECT_TRUE(s.ok()) << s.error_message();
        // The bomb's shells give up when fork fails, or the timeout ends
        // them: either way the command ends and takes its tree along.
        EXPECT_TRUE(r.exited().cause() == EXIT_CAUSE_EXITED ||
                    r.exited().cause() == EXIT_CAUSE_TIMEOUT)
            << r.exited().cause();
    });
    // While the bomb runs, the other workspace is served as usual.
    auto until = Clock::now() + std::chrono::seconds(4);
    int served = 0;
    while (Clock::now() < until) {
        RunResponse r;
        grpc::Status s = wstest::RunProcess(exec_.get(), other, ArgvProcess({"echo", "alive"}), &r);
        ASSERT_TRUE(s.ok()) << s.error_message();
        EXPECT_EQ(r.stdout(), "alive\n");
        served++;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_GE(served, 5);
    bomber.join();
    std::string g = FindGroup("pids", bomb);
    ASSERT_FALSE(g.empty());
    int peak = std::atoi(ReadSmall(g + "/pids.peak").c_str());
    EXPECT_LE(peak, 40);
    EXPECT_GE(peak, 30) << "the bomb never reached its cap";
    std::string events = ReadSmall(g + "/pids.events");
    EXPECT_EQ(events.rfind("max ", 0), 0u) << events;
    EXPECT_NE(events, "max 0\n") << "no fork was refused";
    EXPECT_EQ(wstest::WaitProcsAtMost(marker, 0, 10000), 0) << "bomb survivors";
}

TEST_F(SandboxLimitsTest, OverTheMemoryCapIsOom)
{
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
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_LE(CountFds(srv_->pid()), before + 2) << "fds grew with finished commands";
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

} // namespace
