// Exec end to end, abort: every way a command can be ended (timeout,
// client cancel, deadline, a client process killed mid-stream, workspace
// Close, server shutdown, its first process exiting) ends its whole process
// tree, including descendants that left the process group (setsid, double
// fork) and ones that ignore SIGTERM. Survivors are looked for in /proc by
// a unique sleep duration in their argv. Everything runs under both
// containment mechanisms: the per-command cgroup v1 freezer (the server's
// default where the host has one; the "cgroup" variant is skipped, with the
// reason, where it has not) and the subreaper fallback
// (--process-containment=subreaper).
//
// This binary has its own main(): started with --exec-client-helper it is
// a client process that starts a command and blocks, for the test to kill.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

extern char **environ;

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;
using wstest::ArgvProcess;
using wstest::EscapingTree;
using wstest::EventLog;
using wstest::PeakWatcher;
using wstest::Server;

namespace
{

using Clock = std::chrono::steady_clock;

const char kHelperFlag[] = "--exec-client-helper";
const char kHelperSleepEnv[] = "WS_HELPER_SLEEP";

double SecondsSince(Clock::time_point t)
{
    return std::chrono::duration<double>(Clock::now() - t).count();
}

const int kSurvivorWaitMs = 10000;

// A relay between a client and the server's unix socket that can go
// silent: after
// Blackhole() it neither forwards nor closes anything, as when the client's
// host vanished (no FIN, no RST). Only the server's keepalive can notice.
class BlackholeProxy
{
  public:
    // `target` is "unix:PATH"; the relay listens next to it.
    explicit BlackholeProxy(const std::string &target)
        : target_(Addr(target.substr(strlen("unix:")))),
          path_(target.substr(strlen("unix:")) + ".proxy")
    {
        listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un a = Addr(path_);
        if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0 ||
            listen(listen_fd_, 8) != 0)
            ADD_FAILURE() << "proxy listen: " << strerror(errno);
        address_ = "unix:" + path_;
        thread_ = std::thread([this] { Run(); });
    }
    ~BlackholeProxy()
    {
        stop_ = true;
        thread_.join();
        for (int fd : fds_)
            close(fd);
        close(listen_fd_);
        unlink(path_.c_str());
    }
    const std::string &address() const
    {
        return address_;
    }
    void Blackhole()
    {
        silent_ = true;
    }

  private:
    static sockaddr_un Addr(const std::string &path)
    {
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
        return a;
    }

    // One thread relays every connection with poll(); silent, it only
    // sleeps (the sockets stay open, nothing is read or written).
    void Run()
    {
        std::vector<std::pair<int, int>> pairs;
        char buf[65536];
        while (!stop_) {
            if (silent_) {
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
                continue;
            }
            std::vector<pollfd> p{{listen_fd_, POLLIN, 0}};
            for (auto &pr : pairs) {
                p.push_back({pr.first, POLLIN, 0});
                p.push_back({pr.second, POLLIN, 0});
            }
            if (poll(p.data(), p.size(), 20) <= 0)
                continue;
            if (p[0].revents & POLLIN) {
                int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
                int u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (c >= 0 && u >= 0 &&
                    connect(u, reinterpret_cast<const sockaddr *>(&target_), sizeof(target_)) ==
                        0) {
                    pairs.emplace_back(c, u);
                    fds_.push_back(c);
                    fds_.push_back(u);
                } else {
                    ADD_FAILURE() << "proxy connect: " << strerror(errno);
                }
            }
            for (size_t i = 1; i < p.size() && !silent_; i++) {
                if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                const auto &pr = pairs[(i - 1) / 2];
                int to = p[i].fd == pr.first ? pr.second : pr.first;
                ssize_t n = read(p[i].fd, buf, sizeof(buf));
                for (ssize_t off = 0; n > 0 && off < n;) {
                    ssize_t w = write(to, buf + off, static_cast<size_t>(n - off));
                    if (w <= 0)
                        break;
                    off += w;
                }
            }
        }
    }

    sockaddr_un target_;
    std::string path_;
    int listen_fd_ = -1;
    std::string address_;
    std::vector<int> fds_;
    std::atomic<bool> stop_{false}, silent_{false};
    std::thread thread_;
};

class ExecAbortTest : public ::testing::TestWithParam<std::string>
{
  protected:
    void SetUp() override
    {
        std::vector<std::string> args;
        if (GetParam() == "subreaper")
            args = {"--process-containment=subreaper"};
        srv_ = std::make_unique<Server>(std::vector<std::string>(args));
        wsstub_ = srv_->workspaces();
        exec_ = srv_->exec();
        ws_ = wstest::OpenShell(wsstub_.get(), {"sh", "sleep", "setsid", "echo", "true"});
        // Every test of a variant runs under the mechanism it is named
        // after, or is skipped: a "cgroup" run that fell back to the
        // subreaper would prove nothing about cgroups.
        std::string got = Containment(ws_.id);
        ASSERT_EQ(got, ExpectedContainment()) << wstest::ProbeCgroups().Describe();
        if (GetParam() == "cgroup" && got != "cgroup-v1-freezer")
            GTEST_SKIP() << "no cgroup containment on this host, which has "
                         << wstest::ProbeCgroups().Describe()
                         << ": the server's cgroup containment needs a writable cgroup v1 "
                            "freezer hierarchy at /sys/fs/cgroup/freezer, so it fell back to "
                            "the subreaper, which the subreaper variant covers";
    }

    // What Describe says of a workspace's process containment.
    std::string Containment(const std::string &id)
    {
        ClientContext ctx;
        DescribeRequest req;
        DescribeResponse resp;
        req.set_workspace_id(id);
        grpc::Status s = wsstub_->Describe(&ctx, req, &resp);
        EXPECT_TRUE(s.ok()) << s.error_message();
        return resp.process_containment();
    }

    // The name the server must report: forced, or what the host offers
    // (the server's cgroup containment is cgroup v1 freezer only; on a
    // cgroup v2 host it falls back to the subreaper).
    std::string ExpectedContainment() const
    {
        if (GetParam() == "subreaper" || !wstest::ProbeCgroups().v1_freezer)
            return "subreaper";
        return "cgroup-v1-freezer";
    }

    // Every live process carrying `marker` is in this server's freezer
    // cgroup under cgroup containment, and in none of the server's under
    // the subreaper: the mechanism the variant names is the one that ran.
    void ExpectContained(const std::string &marker)
    {
        const std::string ours = "/workspaced/" + std::to_string(srv_->pid()) + "/";
        int checked = 0;
        for (pid_t pid : wstest::PidsWithMarker(marker)) {
            std::string file = wstest::ReadHostFile("/proc/" + std::to_string(pid) + "/cgroup");
            if (file.empty())
                continue; // gone meanwhile
            // The "N:controllers:path" line whose controllers include the
            // freezer ("" on a host without one).
            std::string freezer;
            std::istringstream in(file);
            for (std::string line; std::getline(in, line);) {
                size_t c1 = line.find(':');
                size_t c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
                if (c2 == std::string::npos)
                    continue;
                std::istringstream ctls(line.substr(c1 + 1, c2 - c1 - 1));
                for (std::string ctl; std::getline(ctls, ctl, ',');)
                    if (ctl == "freezer")
                        freezer = line.substr(c2 + 1);
            }
            checked++;
            if (GetParam() == "cgroup") {
                EXPECT_NE(freezer.find(ours), std::string::npos)
                    << "pid " << pid << " is in freezer cgroup '" << freezer << "', not under "
                    << ours;
            } else {
                EXPECT_EQ(freezer.find("/workspaced/"), std::string::npos)
                    << "pid " << pid << " is in freezer cgroup '" << freezer
                    << "' under the subreaper";
            }
        }
        EXPECT_GT(checked, 0) << "no process with the marker to check";
    }

    void TearDown() override
    {
        if (!srv_ || !srv_->running())
            return;
        // Whatever the test did, the server reaps what it started.
        wstest::ProcStats st = srv_->pid() > 0 ? wstest::StatsOf(srv_->pid()) : wstest::ProcStats{};
        auto deadline = Clock::now() + std::chrono::seconds(10);
        while (st.zombies > 0 && Clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            st = wstest::StatsOf(srv_->pid());
        }
        EXPECT_EQ(st.zombies, 0) << "the server left zombie children";
    }

    // Starts `p` on `ctx` and waits for `started` and for `want` processes
    // with the marker.
    std::unique_ptr<wstest::StartStreamRW> StartAndWait(ClientContext *ctx, const ProcessConfig &p,
                                                        const std::string &marker, int want,
                                                        EventLog *log,
                                                        const std::string &ws_id = "")
    {
        auto rw = wstest::StartStream(exec_.get(), ctx, ws_id.empty() ? ws_.id : ws_id, p);
        EXPECT_TRUE(wstest::ReadEvents(rw.get(), log, [](const EventLog &l) { return l.started; }))
            << "no started event";
        EXPECT_GE(wstest::WaitProcsAtLeast(marker, want, 10000), want)
            << "the command's processes never showed up";
        ExpectContained(marker);
        return rw;
    }

    ProcessInfo WaitFinished(const std::string &id)
    {
        auto deadline = Clock::now() + std::chrono::seconds(30);
        ProcessInfo last;
        do {
            ClientContext ctx;
            ListProcessesRequest req;
            ListProcessesResponse resp;
            req.set_workspace_id(ws_.id);
            EXPECT_TRUE(exec_->ListProcesses(&ctx, req, &resp).ok());
            for (const auto &p : resp.processes())
                if (p.id() == id) {
                    last = p;
                    if (!p.running())
                        return last;
                }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        } while (Clock::now() < deadline);
        ADD_FAILURE() << "process " << id << " did not finish";
        return last;
    }

    std::unique_ptr<Server> srv_;
    std::unique_ptr<Workspaces::Stub> wsstub_;
    std::unique_ptr<Exec::Stub> exec_;
    wstest::Ws ws_;
};

TEST_P(ExecAbortTest, DescribeNamesTheContainment)
{
    EXPECT_EQ(Containment(ws_.id), ExpectedContainment()) << wstest::ProbeCgroups().Describe();
    // A workspace without a shell has none.
    wstest::Ws mem = wstest::Open(wsstub_.get(), "memory");
    EXPECT_EQ(Containment(mem.id), "");
}

TEST_P(ExecAbortTest, RunTimeoutKillsTheTreeIncludingSetsid)
{
    std::string m = wstest::UniqueSleep();
    ProcessConfig p = ArgvProcess({"sh", "-c", EscapingTree(m)});
    p.set_timeout_ms(2000);
    PeakWatcher watch(m);
    RunResponse r;
    auto t0 = Clock::now();
    grpc::Status s = wstest::RunProcess(exec_.get(), ws_.id, p, &r);
    EXPECT_LT(SecondsSince(t0), 30);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_TIMEOUT);
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0) << "survivors after a timeout";
    EXPECT_GE(watch.Stop(), 4) << "the tree never ran";
}

TEST_P(ExecAbortTest, StartTimeoutKillsTheTree)
{
    std::string m = wstest::UniqueSleep();
    ProcessConfig p = ArgvProcess({"sh", "-c", "echo up; " + EscapingTree(m)});
    p.set_timeout_ms(2000);
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    EventLog log;
    auto rw = StartAndWait(&ctx, p, m, 4, &log);
    wstest::ReadEvents(rw.get(), &log);
    ASSERT_TRUE(rw->Finish().ok());
    EXPECT_EQ(log.out.data, "up\n");
    ASSERT_TRUE(log.exited);
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_TIMEOUT);
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0);
}

TEST_P(ExecAbortTest, IgnoredTermIsStillKilled)
{
    std::string m = wstest::UniqueSleep();
    // The ignored disposition is inherited by every sleep too: only the
    // SIGKILL after the grace period ends them.
    ProcessConfig p = ArgvProcess({"sh", "-c", "trap '' TERM; " + EscapingTree(m)});
    p.set_timeout_ms(1000);
    PeakWatcher watch(m);
    RunResponse r;
    auto t0 = Clock::now();
    grpc::Status s = wstest::RunProcess(exec_.get(), ws_.id, p, &r);
    EXPECT_LT(SecondsSince(t0), 30);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_TIMEOUT);
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0);
    EXPECT_GE(watch.Stop(), 4);
}

TEST_P(ExecAbortTest, DoubleForkedEscapeeIsKilled)
{
    std::string m = wstest::UniqueSleep();
    // The inner sleep is orphaned into a new session: no process group and
    // no parent link lead to it.
    ProcessConfig p =
        ArgvProcess({"sh", "-c", "(setsid sh -c \"sleep " + m + " &\" &); sleep " + m});
    p.set_timeout_ms(2000);
    PeakWatcher watch(m);
    RunResponse r;
    grpc::Status s = wstest::RunProcess(exec_.get(), ws_.id, p, &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_TIMEOUT);
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0);
    EXPECT_GE(watch.Stop(), 3);
}

TEST_P(ExecAbortTest, NothingOutlivesItsCommand)
{
    // The first process exits once the test has seen what it left behind
    // running (it waits for a file the test then writes); what it left is
    // ended too, and the call does not wait for it (the children hold the
    // output pipes open). The shell puts the marker together at run time
    // from two exported halves, so only the escaped sleep carries it whole,
    // never a shell whose script holds the halves.
    struct {
        const char *name;
        std::string script;
        std::string out;
    } cases[] = {
        {"background", "sleep $a$b & %WAIT; echo hi", "hi\n"},
        {"setsid", "setsid sleep $a$b & %WAIT; echo hi", "hi\n"},
        {"double fork", "(setsid sh -c 'sleep $a$b &' &); %WAIT; echo done", "done\n"},
    };
    int n = 0;
    for (auto &c : cases) {
        std::string m = wstest::UniqueSleep();
        std::string go = "go-" + std::to_string(n++);
        std::string script = "export a=" + m.substr(0, m.size() / 2) +
                             " b=" + m.substr(m.size() / 2) + "; " + c.script;
        script.replace(script.find("%WAIT"), 5, "while [ ! -e " + go + " ]; do sleep 0.05; done");
        RunResponse r;
        grpc::Status s;
        auto t0 = Clock::now();
        std::thread run([&] {
            s = wstest::RunProcess(exec_.get(), ws_.id, ArgvProcess({"sh", "-c", script}), &r);
        });
        int seen = wstest::WaitProcsAtLeast(m, 1, 10000);
        if (seen > 0)
            ExpectContained(m);
        // Written whatever was seen, so that the command ends either way.
        wstest::WriteHostFile(srv_->workspace_dir(ws_.id) + "/" + go, "");
        run.join();
        EXPECT_GE(seen, 1) << c.name << ": what the command left behind never ran";
        EXPECT_LT(SecondsSince(t0), 30) << c.name;
        ASSERT_TRUE(s.ok()) << c.name << ": " << s.error_message();
        EXPECT_EQ(r.stdout(), c.out) << c.name;
        EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED) << c.name;
        EXPECT_EQ(r.exited().exit_code(), 0) << c.name;
        EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0) << c.name;
    }
}

TEST_P(ExecAbortTest, ClientCancelKillsTheTree)
{
    std::string m = wstest::UniqueSleep();
    ClientContext ctx;
    EventLog log;
    auto rw =
        StartAndWait(&ctx, ArgvProcess({"sh", "-c", "echo up; " + EscapingTree(m)}), m, 4, &log);
    ASSERT_TRUE(log.started);
    ctx.TryCancel();
    wstest::ReadEvents(rw.get(), &log);
    EXPECT_EQ(rw->Finish().error_code(), StatusCode::CANCELLED);
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0);
    ProcessInfo info = WaitFinished(log.start.id());
    ASSERT_TRUE(info.has_exited());
    EXPECT_EQ(info.exited().cause(), EXIT_CAUSE_CANCELLED);
}

// A client whose host vanished mid-stream (its connection neither closed
// nor reset, every packet lost): the server's keepalive ping goes
// unanswered, the connection is dropped and the command's tree is killed
// as for a cancel.
TEST_P(ExecAbortTest, VanishedClientKillsTheTree)
{
    std::string m = wstest::UniqueSleep();
    BlackholeProxy proxy(srv_->address());
    auto exec =
        Exec::NewStub(grpc::CreateChannel(proxy.address(), grpc::InsecureChannelCredentials()));
    ClientContext ctx;
    auto rw = wstest::StartStream(exec.get(), &ctx, ws_.id,
                                  ArgvProcess({"sh", "-c", "echo up; " + EscapingTree(m)}));
    EventLog log;
    ASSERT_TRUE(wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) { return l.started; }));
    ASSERT_GE(wstest::WaitProcsAtLeast(m, 4, 10000), 4);
    auto t0 = Clock::now();
    proxy.Blackhole();
    // Two keepalive intervals (ping, then its timeout) at the default
    // 10 s, plus the kill.
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, 40000), 0) << "survivors of a vanished client";
    EXPECT_GT(SecondsSince(t0), 1.0) << "killed before the client could have been noticed gone";
    ProcessInfo info = WaitFinished(log.start.id());
    ASSERT_TRUE(info.has_exited());
    EXPECT_EQ(info.exited().cause(), EXIT_CAUSE_CANCELLED);
    ctx.TryCancel();
}

TEST_P(ExecAbortTest, DeadlineKillsTheTree)
{
    std::string m = wstest::UniqueSleep();
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
    PeakWatcher watch(m);
    auto rw =
        wstest::StartStream(exec_.get(), &ctx, ws_.id, ArgvProcess({"sh", "-c", EscapingTree(m)}));
    EventLog log;
    wstest::ReadEvents(rw.get(), &log);
    EXPECT_EQ(rw->Finish().error_code(), StatusCode::DEADLINE_EXCEEDED);
    EXPECT_FALSE(log.exited);
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0);
    EXPECT_GE(watch.Stop(), 4);
    ASSERT_TRUE(log.started);
    ProcessInfo info = WaitFinished(log.start.id());
    ASSERT_TRUE(info.has_exited());
    EXPECT_EQ(info.exited().cause(), EXIT_CAUSE_CANCELLED);
}

// Reads one line from `fd` within `timeout_ms`.
bool ReadLineFrom(int fd, std::string *line, int timeout_ms)
{
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    line->clear();
    while (Clock::now() < deadline) {
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        char c;
        if (read(fd, &c, 1) != 1)
            return false;
        if (c == '\n')
            return true;
        line->push_back(c);
    }
    return false;
}

TEST_P(ExecAbortTest, KilledClientProcessKillsTheTree)
{
    std::string m = wstest::UniqueSleep();
    // This binary again, as a client that starts the command and blocks.
    // The marker goes through the environment, not argv, so the helper
    // itself is not counted as a survivor.
    std::string self = wstest::SelfExe();
    ASSERT_FALSE(self.empty());
    std::vector<std::string> args = {self, kHelperFlag, srv_->address(), ws_.id};
    std::vector<char *> argv;
    for (auto &a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> envs;
    for (char **e = environ; *e; e++)
        envs.push_back(*e);
    envs.push_back(std::string(kHelperSleepEnv) + "=" + m);
    std::vector<char *> envp;
    for (auto &e : envs)
        envp.push_back(e.data());
    envp.push_back(nullptr);

    int p[2];
    ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    pid_t pid;
    int rc = posix_spawn(&pid, self.c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    ASSERT_EQ(rc, 0) << strerror(rc);

    std::string line;
    bool got = ReadLineFrom(p[0], &line, 30000);
    close(p[0]);
    if (!got || line.compare(0, 8, "started ") != 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        FAIL() << "the helper client did not start its command: '" << line << "'";
    }
    EXPECT_GE(wstest::WaitProcsAtLeast(m, 4, 10000), 4);
    ExpectContained(m);
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the helper ended by itself: " << status;
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0)
        << "the command outlived its client";
    ProcessInfo info = WaitFinished(line.substr(8));
    ASSERT_TRUE(info.has_exited());
    EXPECT_EQ(info.exited().cause(), EXIT_CAUSE_CANCELLED);
}

TEST_P(ExecAbortTest, WorkspaceCloseKillsEverythingThenRemovesFiles)
{
    std::string m = wstest::UniqueSleep();
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    EventLog log;
    auto rw =
        StartAndWait(&ctx, ArgvProcess({"sh", "-c", "echo up; " + EscapingTree(m)}), m, 4, &log);
    // And a background one with no stream at all.
    {
        ClientContext bctx;
        ProcessConfig b = ArgvProcess({"sleep", m});
        b.set_background(true);
        EventLog blog;
        auto brw = StartAndWait(&bctx, b, m, 5, &blog);
        bctx.TryCancel();
        brw->Finish();
    }
    std::string dir = srv_->workspace_dir(ws_.id);
    struct stat st;
    ASSERT_EQ(stat(dir.c_str(), &st), 0);

    ClientContext cctx;
    CloseRequest req;
    CloseResponse resp;
    req.set_workspace_id(ws_.id);
    grpc::Status cs = wsstub_->Close(&cctx, req, &resp);
    ASSERT_TRUE(cs.ok()) << cs.error_message();

    // The open stream sees the command end, evicted.
    wstest::ReadEvents(rw.get(), &log);
    rw->Finish();
    EXPECT_TRUE(log.problems.empty()) << wstest::Problems(log);
    EXPECT_EQ(log.out.data, "up\n");
    ASSERT_TRUE(log.exited) << "no exited event on the open stream";
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EVICTED);
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0);
    EXPECT_NE(stat(dir.c_str(), &st), 0) << "the workspace's files are still there";
}

TEST_P(ExecAbortTest, BackgroundSurvivesItsStreamUntilSignalled)
{
    std::string m = wstest::UniqueSleep();
    ProcessConfig p = ArgvProcess({"sh", "-c", "setsid sleep " + m + " & sleep " + m});
    p.set_background(true);
    p.set_tag("bg");
    std::string id;
    {
        ClientContext ctx;
        EventLog log;
        auto rw = StartAndWait(&ctx, p, m, 3, &log);
        id = log.start.id();
        ctx.TryCancel();
        rw->Finish();
    }
    // A foreground command, started and dropped the same way after it,
    // is ended: once it is gone the server has had both cancels, and the
    // background command is still all there.
    std::string fg = wstest::UniqueSleep();
    {
        ClientContext ctx;
        EventLog log;
        auto rw = StartAndWait(
            &ctx, ArgvProcess({"sh", "-c", "setsid sleep " + fg + " & sleep " + fg}), fg, 3, &log);
        ctx.TryCancel();
        rw->Finish();
    }
    ASSERT_EQ(wstest::WaitProcsAtMost(fg, 0, kSurvivorWaitMs), 0)
        << "the foreground command outlived its stream";
    EXPECT_GE(wstest::CountProcsWithMarker(m), 3)
        << "the background command was ended with its stream";
    {
        ClientContext ctx;
        ListProcessesRequest req;
        ListProcessesResponse resp;
        req.set_workspace_id(ws_.id);
        ASSERT_TRUE(exec_->ListProcesses(&ctx, req, &resp).ok());
        bool running = false;
        for (const auto &proc : resp.processes())
            running = running || (proc.id() == id && proc.running());
        EXPECT_TRUE(running) << "the background command is not listed as running";
    }

    ClientContext ctx;
    SendSignalRequest req;
    SendSignalResponse resp;
    req.set_workspace_id(ws_.id);
    req.set_tag("bg");
    req.set_signal(9);
    ASSERT_TRUE(exec_->SendSignal(&ctx, req, &resp).ok());
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0)
        << "SendSignal did not reach the setsid child";
    ProcessInfo info = WaitFinished(id);
    ASSERT_TRUE(info.has_exited());
    EXPECT_EQ(info.exited().cause(), EXIT_CAUSE_SIGNALED);
    EXPECT_EQ(info.exited().signal(), 9);
}

TEST_P(ExecAbortTest, ServerShutdownKillsEverything)
{
    std::string m = wstest::UniqueSleep();
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    EventLog log;
    auto rw = StartAndWait(&ctx, ArgvProcess({"sh", "-c", EscapingTree(m)}), m, 4, &log);
    {
        ClientContext bctx;
        ProcessConfig b =
            ArgvProcess({"sh", "-c", "trap '' TERM; setsid sleep " + m + " & sleep " + m});
        b.set_background(true);
        EventLog blog;
        auto brw = StartAndWait(&bctx, b, m, 7, &blog);
        bctx.TryCancel();
        brw->Finish();
    }
    int status = srv_->Stop(SIGTERM);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "status " << status << ": " << wstest::ReadHostFile(srv_->stderr_path());
    wstest::ReadEvents(rw.get(), &log);
    rw->Finish();
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0) << "survivors of the server";
}

INSTANTIATE_TEST_SUITE_P(Containment, ExecAbortTest, ::testing::Values("cgroup", "subreaper"),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

// The helper client: starts EscapingTree(marker) in the workspace, prints
// "started <id>" once the server says so, then blocks reading events until
// it is killed.
int ClientHelperMain(int argc, char **argv)
{
    if (argc != 4 || !getenv(kHelperSleepEnv))
        return 2;
    auto channel = grpc::CreateChannel(argv[2], grpc::InsecureChannelCredentials());
    auto exec = Exec::NewStub(channel);
    ClientContext ctx;
    auto rw = wstest::StartStream(exec.get(), &ctx, argv[3],
                                  ArgvProcess({"sh", "-c", EscapingTree(getenv(kHelperSleepEnv))}));
    ProcessEvent ev;
    while (rw->Read(&ev)) {
        if (ev.has_started()) {
            std::string line = "started " + ev.started().id() + "\n";
            if (write(1, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
                return 3;
        }
    }
    return 4;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], kHelperFlag) == 0)
        return ClientHelperMain(argc, argv);
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
