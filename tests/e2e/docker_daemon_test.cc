// The Docker provider when the daemon goes away: Open fails closed with
// UNAVAILABLE and transient=true (never runs without the container), and
// works again once the daemon is back. Stops the real dockerd, so this
// suite runs alone (tag "exclusive") and restarts the daemon with the
// suite's own fixture whatever happens. Then the daemon SIGKILLed in the
// middle of an Open, a command's start, a stream and a Close: each call
// answers at once and clearly, the server serves on, and once the daemon
// is back every workspace closes and nothing is left.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;

namespace
{

const char kFixture[] = "tests/fixtures/dockerd.sh";

bool Ping()
{
    return system("curl -fsS --max-time 2 --unix-socket /var/run/docker.sock "
                  "http://localhost/_ping >/dev/null 2>&1") == 0;
}

pid_t DockerdPid()
{
    std::ifstream f("/var/run/docker.pid");
    pid_t pid = 0;
    f >> pid;
    return pid;
}

grpc::Status OpenDocker(Workspaces::Stub *stub, OpenResponse *resp)
{
    OpenRequest req;
    req.mutable_docker()->set_image("workspaced-test:busybox");
    req.mutable_capabilities()->mutable_fs();
    req.mutable_capabilities()->mutable_shell()->add_allowed_commands("echo");
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return stub->Open(&ctx, req, resp);
}

struct RestartDaemon {
    ~RestartDaemon()
    {
        if (!Ping()) {
            EXPECT_EQ(system((std::string("bash ") + kFixture).c_str()), 0);
        }
    }
};

TEST(DockerDaemon, StoppedDaemonIsUnavailableTransientAndRecovers)
{
    ASSERT_TRUE(Ping()) << "the Docker daemon must be running: this test never skips";
    wstest::Server srv;
    auto ws = srv.workspaces();
    OpenResponse before;
    ASSERT_TRUE(OpenDocker(ws.get(), &before).ok());

    RestartDaemon restart;
    pid_t pid = DockerdPid();
    ASSERT_GT(pid, 0);
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    for (int i = 0; i < 300 && (Ping() || kill(pid, 0) == 0); i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_FALSE(Ping()) << "dockerd did not stop";

    OpenResponse resp;
    grpc::Status s = OpenDocker(ws.get(), &resp);
    EXPECT_WS_ERROR(s, StatusCode::UNAVAILABLE, "WORKSPACE_FAILED");
    wstest::Error e = wstest::Decode(s);
    EXPECT_EQ(e.metadata["transient"], "true");
    // Listed as unavailable, with the reason.
    auto pr = srv.providers();
    ClientContext pctx;
    ListProvidersResponse lp;
    ASSERT_TRUE(pr->ListProviders(&pctx, ListProvidersRequest(), &lp).ok());
    for (const auto &p : lp.providers())
        if (p.kind() == "docker") {
            EXPECT_FALSE(p.available());
            EXPECT_NE(p.reason(), "");
        }
    // And the workspace opened before cannot run a command without its
    // container: no fallback to the host.
    RunResponse rr;
    auto ex = srv.exec();
    grpc::Status rs = wstest::RunProcess(ex.get(), before.workspace().id(),
                                         wstest::ArgvProcess({"echo", "hi"}), &rr);
    EXPECT_FALSE(rs.ok());

    // Describe says so, read now rather than remembered.
    {
        DescribeRequest dr;
        dr.set_workspace_id(before.workspace().id());
        DescribeResponse d;
        ClientContext dctx;
        ASSERT_TRUE(ws->Describe(&dctx, dr, &d).ok());
        ASSERT_TRUE(d.has_container());
        EXPECT_FALSE(d.container().daemon_reachable());
        EXPECT_EQ(d.container().id(), "");
    }
    // Close cannot remove the container now: it fails, transient, and
    // leaves the workspace as it was, to be closed again later.
    {
        CloseRequest cr;
        cr.set_workspace_id(before.workspace().id());
        CloseResponse c;
        ClientContext cctx;
        cctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        grpc::Status cs = ws->Close(&cctx, cr, &c);
        EXPECT_WS_ERROR(cs, StatusCode::UNAVAILABLE, "WORKSPACE_FAILED");
        EXPECT_EQ(access(srv.workspace_dir(before.workspace().id()).c_str(), F_OK), 0)
            << "the files went although the Close failed";
    }

    ASSERT_EQ(system((std::string("bash ") + kFixture).c_str()), 0);
    ASSERT_TRUE(Ping());
    s = OpenDocker(ws.get(), &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    RunResponse ok;
    ASSERT_TRUE(wstest::RunProcess(ex.get(), resp.workspace().id(),
                                   wstest::ArgvProcess({"echo", "back"}), &ok)
                    .ok());
    EXPECT_EQ(ok.stdout(), "back\n");
    for (const auto &id : {before.workspace().id(), resp.workspace().id()}) {
        CloseRequest cr;
        cr.set_workspace_id(id);
        CloseResponse c;
        ClientContext cctx;
        grpc::Status cs = ws->Close(&cctx, cr, &c);
        EXPECT_TRUE(cs.ok()) << cs.error_message();
        EXPECT_FALSE(c.already_closed());
        EXPECT_NE(access(srv.workspace_dir(id).c_str(), F_OK), 0);
    }
    // The retried Close removed the container the failed one could not.
    std::string cmd =
        "docker ps -aq --filter label=dev.workspaced.workspace=" + before.workspace().id();
    FILE *f = popen(cmd.c_str(), "r");
    ASSERT_NE(f, nullptr);
    char buf[256] = "";
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    EXPECT_EQ(pclose(f), 0);
    EXPECT_EQ(std::string(buf, n), "") << "the container is still there";
}

// ---- The daemon killed (SIGKILL) in the middle of a call ----
//
// "In the middle" is made, never hoped for: the daemon (or, for a call
// that must get past the daemon's own work first, its containerd) is
// stopped with SIGSTOP, the call is made from a thread, and the kill
// comes only once the call is seen waiting: a unix socket with bytes
// sent and not read (ss's Send-Q on a stream socket is what its peer has
// not consumed yet) from the server to dockerd, or from dockerd to
// containerd. Debian's dockerd runs containerd as its child, which dies
// with it (SIGKILL works on a stopped process), and a restart without
// live-restore kills the containers it finds running.

// A stream socket of ss's listing.
struct UnixSock {
    pid_t owner = 0;
    unsigned long inode = 0, peer = 0;
    unsigned long send_q = 0;
};

std::vector<UnixSock> UnixSockets()
{
    std::vector<UnixSock> out;
    FILE *f = popen("ss -xpH state established 2>/dev/null", "r");
    if (!f)
        return out;
    char line[4096];
    while (fgets(line, sizeof(line), f)) {
        // Netid Recv-Q Send-Q Local Inode Peer Inode users:((...,pid=N,fd=M))
        std::istringstream in(line);
        std::string netid, local, peer, users;
        unsigned long recv_q = 0;
        UnixSock s;
        if (!(in >> netid >> recv_q >> s.send_q >> local >> s.inode >> peer >> s.peer))
            continue;
        std::getline(in, users);
        size_t p = users.find("pid=");
        if (netid != "u_str" || p == std::string::npos)
            continue;
        s.owner = (pid_t)strtol(users.c_str() + p + 4, nullptr, 10);
        out.push_back(s);
    }
    pclose(f);
    return out;
}

// Whether `from` has a request out to `to` that `to` has not read: a
// socket of `from` with bytes queued whose peer is `to`'s (or not yet
// accepted: peer 0, the only listener `from` dials being `to`'s).
bool Waiting(pid_t from, pid_t to)
{
    std::vector<UnixSock> all = UnixSockets();
    std::map<unsigned long, pid_t> owner;
    for (const auto &s : all)
        owner[s.inode] = s.owner;
    for (const auto &s : all)
        if (s.owner == from && s.send_q > 0 && (s.peer == 0 || owner[s.peer] == to))
            return true;
    return false;
}

// Polls `what` for up to `timeout_ms`; true once it held on two polls in
// a row (what a stopped peer never reads stays queued).
bool Eventually(const std::function<bool()> &what, int timeout_ms = 30000)
{
    int held = 0;
    for (int waited = 0; waited < timeout_ms; waited += 50) {
        held = what() ? held + 1 : 0;
        if (held >= 2)
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
}

pid_t PidFromFile(const char *path)
{
    std::ifstream f(path);
    pid_t pid = 0;
    f >> pid;
    return pid;
}

const char kContainerdPid[] = "/var/run/docker/containerd/containerd.pid";

pid_t ContainerdPid()
{
    return PidFromFile(kContainerdPid);
}

// Alive and not a zombie.
bool Alive(pid_t pid)
{
    if (pid <= 0 || kill(pid, 0) != 0)
        return false;
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    std::getline(f, stat);
    size_t p = stat.rfind(')');
    return p != std::string::npos && p + 2 < stat.size() && stat[p + 2] != 'Z';
}

std::string Sh(const std::string &cmd)
{
    std::string out;
    FILE *f = popen(cmd.c_str(), "r");
    if (!f)
        return "popen failed";
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        out.append(buf, n);
    pclose(f);
    return out;
}

// Brings the daemon back whatever state a test left it in: stopped
// processes continued, and a daemon that does not answer started again
// by the suite's fixture. A containerd killed with its dockerd leaves its
// pid file behind, naming a process that is gone (or a zombie nobody
// reaps): the new dockerd would wait on it and give up, so it goes first.
void BringBackDaemon()
{
    pid_t d = DockerdPid(), c = ContainerdPid();
    if (c > 0)
        kill(c, SIGCONT);
    if (d > 0)
        kill(d, SIGCONT);
    if (Ping())
        return;
    if (!Alive(ContainerdPid()))
        unlink(kContainerdPid);
    EXPECT_EQ(system((std::string("bash ") + kFixture).c_str()), 0);
}

struct KilledDaemonGuard {
    ~KilledDaemonGuard()
    {
        BringBackDaemon();
    }
};

// SIGKILL to the daemon, and waits until it is gone and no longer answers.
void KillDaemon(pid_t pid)
{
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    for (int i = 0; i < 300 && Alive(pid); i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_FALSE(Alive(pid)) << "dockerd survived SIGKILL";
    ASSERT_FALSE(Ping());
}

using Clock = std::chrono::steady_clock;

long MsSince(Clock::time_point t)
{
    return (long)std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// A figures-table row for the report.
void Row(const std::string &fault, const std::string &saw, const std::string &lost)
{
    printf("| %s | %s | %s |\n", fault.c_str(), saw.c_str(), lost.c_str());
    fflush(stdout);
}

std::string Describe(const grpc::Status &s)
{
    if (s.ok())
        return "OK";
    wstest::Error e = wstest::Decode(s);
    std::string t = e.metadata.count("transient") ? " transient=" + e.metadata["transient"] : "";
    return std::to_string((int)s.error_code()) + " " + e.reason + t + " (" + s.error_message() +
           ")";
}

const int kCallDeadlineS = 60;

grpc::Status OpenMode(Workspaces::Stub *stub, ExecMode mode, OpenResponse *resp)
{
    OpenRequest req;
    req.mutable_docker()->set_image("workspaced-test:busybox");
    req.mutable_docker()->set_exec_mode(mode);
    req.mutable_capabilities()->mutable_fs();
    for (const char *c : {"echo", "sh", "sleep"})
        req.mutable_capabilities()->mutable_shell()->add_allowed_commands(c);
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(kCallDeadlineS));
    return stub->Open(&ctx, req, resp);
}

grpc::Status CloseWs(Workspaces::Stub *stub, const std::string &id)
{
    CloseRequest cr;
    cr.set_workspace_id(id);
    CloseResponse c;
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(kCallDeadlineS));
    return stub->Close(&ctx, cr, &c);
}

std::string ServerId(const wstest::Server &srv)
{
    std::string id = wstest::ReadHostFile(srv.state_dir() + "/server-id");
    while (!id.empty() && (id.back() == '\n' || id.back() == ' '))
        id.pop_back();
    return id;
}

std::string Containers(const std::string &label)
{
    return Sh("docker ps -aq --filter label=" + label);
}

// While the daemon is dead: the server still serves (health, providers,
// a memory workspace).
void ExpectServing(wstest::Server &srv)
{
    auto h = srv.health();
    grpc::health::v1::HealthCheckRequest hr;
    grpc::health::v1::HealthCheckResponse hc;
    ClientContext hctx;
    hctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status hs = h->Check(&hctx, hr, &hc);
    EXPECT_TRUE(hs.ok()) << hs.error_message();
    auto ws = srv.workspaces();
    wstest::Ws m = wstest::Open(ws.get(), "memory");
    EXPECT_NE(m.id, "");
    EXPECT_TRUE(CloseWs(ws.get(), m.id).ok());
}

// After the daemon is back: a new docker workspace opens and runs; every
// workspace of the test closes (retried while the daemon settles), and
// nothing is left: no container of this server, no workspace directory,
// no zombie child of the server.
void ExpectRecovered(wstest::Server &srv, std::vector<std::string> ids)
{
    ASSERT_TRUE(Ping());
    auto ws = srv.workspaces();
    auto ex = srv.exec();
    OpenResponse fresh;
    grpc::Status s = OpenMode(ws.get(), wstest::TestExecMode(), &fresh);
    ASSERT_TRUE(s.ok()) << Describe(s);
    RunResponse rr;
    s = wstest::RunProcess(ex.get(), fresh.workspace().id(), wstest::ArgvProcess({"echo", "back"}),
                           &rr);
    ASSERT_TRUE(s.ok()) << Describe(s);
    EXPECT_EQ(rr.stdout(), "back\n");
    ids.push_back(fresh.workspace().id());
    for (const auto &id : ids) {
        grpc::Status cs;
        for (int i = 0; i < 20; i++) {
            cs = CloseWs(ws.get(), id);
            if (cs.ok())
                break;
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
        }
        EXPECT_TRUE(cs.ok()) << id << ": " << Describe(cs);
        EXPECT_NE(access(srv.workspace_dir(id).c_str(), F_OK), 0) << id << "'s files are left";
        EXPECT_EQ(Containers("dev.workspaced.workspace=" + id), "") << id << "'s container is left";
    }
    EXPECT_EQ(Containers("dev.workspaced.server=" + ServerId(srv)), "")
        << "a container of this server is left";
    EXPECT_EQ(Sh("ls -A " + srv.state_dir() + "/workspaces 2>/dev/null"), "")
        << "a workspace directory is left";
    wstest::ProcStats st = wstest::WaitStatsSettled(srv.pid(), 500, 10000);
    EXPECT_EQ(st.zombies, 0) << "the server has zombie children";
}

TEST(DockerDaemonKilled, DuringOpenContainerStart)
{
    ASSERT_TRUE(Ping()) << "the Docker daemon must be running: this test never skips";
    KilledDaemonGuard guard;
    wstest::Server srv;
    auto ws = srv.workspaces();
    pid_t dockerd = DockerdPid(), containerd = ContainerdPid();
    ASSERT_TRUE(Alive(dockerd));
    ASSERT_TRUE(Alive(containerd)) << "no containerd of dockerd's at " << kContainerdPid;
    std::string label = "dev.workspaced.server=" + ServerId(srv);

    // With containerd stopped the daemon still creates (its own work) and
    // then waits on containerd for the start: the Open is past the create
    // with the start in flight.
    ASSERT_EQ(kill(containerd, SIGSTOP), 0);
    OpenResponse resp;
    grpc::Status s;
    Clock::time_point t0 = Clock::now(), t1;
    std::thread open([&] {
        s = OpenMode(ws.get(), wstest::TestExecMode(), &resp);
        t1 = Clock::now();
    });
    bool started = Eventually([&] {
        return Sh("docker ps -aq --filter status=created --filter label=" + label) != "" &&
               Waiting(dockerd, containerd);
    });
    EXPECT_TRUE(started) << "the Open never reached the container's start";
    Clock::time_point killed = Clock::now();
    KillDaemon(dockerd);
    open.join();
    long answer_ms =
        (long)std::chrono::duration_cast<std::chrono::milliseconds>(t1 - killed).count();
    ASSERT_TRUE(started);
    EXPECT_WS_ERROR(s, StatusCode::UNAVAILABLE, "WORKSPACE_FAILED");
    EXPECT_EQ(wstest::Decode(s).metadata["transient"], "true");
    Row("dockerd SIGKILLed during Open, container created, start in flight",
        Describe(s) + ", " + std::to_string(answer_ms) + " ms after the kill (" +
            std::to_string(MsSince(t0) / 1000) + " s in all)",
        "the Open (no workspace)");
    ExpectServing(srv);

    BringBackDaemon();
    ExpectRecovered(srv, {});
}

// Whether a docker relay of this server's runs (it starts the exec once
// the server has created it).
bool OurRelay(pid_t server)
{
    for (pid_t p : wstest::PidsWithMarker("workspaced-docker-relay"))
        for (pid_t a = wstest::ParentPid(p); a > 1; a = wstest::ParentPid(a))
            if (a == server)
                return true;
    return false;
}

class DockerDaemonKilledMode : public ::testing::TestWithParam<ExecMode>
{
};

std::string ModeName(ExecMode m)
{
    return m == EXEC_MODE_AGENT ? "agent" : "per-command";
}

// A command's start with the daemon killed under it. Per-command mode
// starts it through the daemon (an exec created, then started by the
// host relay), so containerd is stopped to hold the start inside the
// daemon; agent mode starts it through the in-box agent, so the daemon
// itself is stopped: the command must not need it.
TEST_P(DockerDaemonKilledMode, DuringExecStart)
{
    ASSERT_TRUE(Ping()) << "the Docker daemon must be running: this test never skips";
    const ExecMode mode = GetParam();
    KilledDaemonGuard guard;
    wstest::Server srv;
    auto ws = srv.workspaces();
    auto ex = srv.exec();
    OpenResponse before;
    grpc::Status s = OpenMode(ws.get(), mode, &before);
    ASSERT_TRUE(s.ok()) << Describe(s);
    const std::string id = before.workspace().id();
    pid_t dockerd = DockerdPid(), containerd = ContainerdPid();
    ASSERT_TRUE(Alive(dockerd));
    ASSERT_TRUE(Alive(containerd));

    pid_t held = mode == EXEC_MODE_AGENT ? dockerd : containerd;
    ASSERT_EQ(kill(held, SIGSTOP), 0);
    RunResponse rr;
    std::atomic<bool> done{false};
    Clock::time_point t0 = Clock::now(), t1;
    std::thread run([&] {
        s = wstest::RunProcess(ex.get(), id, wstest::ArgvProcess({"echo", "hi"}), &rr, "",
                               kCallDeadlineS);
        t1 = Clock::now();
        done = true;
    });
    bool in_flight = Eventually([&] {
        return done || Waiting(srv.pid(), dockerd) ||
               (OurRelay(srv.pid()) && Waiting(dockerd, containerd));
    });
    EXPECT_TRUE(in_flight) << "the Run neither ended nor reached the daemon";
    bool ended_before = done;
    Clock::time_point killed = Clock::now();
    KillDaemon(dockerd);
    run.join();
    long answer_ms =
        ended_before
            ? -1
            : (long)std::chrono::duration_cast<std::chrono::milliseconds>(t1 - killed).count();
    if (mode == EXEC_MODE_AGENT) {
        // The agent starts commands without the daemon.
        EXPECT_TRUE(ended_before) << "agent mode waited on the daemon to start a command";
        EXPECT_TRUE(s.ok()) << Describe(s);
        EXPECT_EQ(rr.stdout(), "hi\n");
    } else {
        // The exec was started, the command's end never learnt: the
        // container lost under it, not an exit code of the command's.
        EXPECT_FALSE(ended_before) << "per-command mode started a command without the daemon";
        EXPECT_TRUE(s.ok()) << Describe(s);
        EXPECT_EQ(rr.exited().cause(), EXIT_CAUSE_EVICTED) << rr.exited().ShortDebugString();
        EXPECT_EQ(rr.stdout(), "");
    }
    std::string saw =
        Describe(s) + " cause " + ExitCause_Name(rr.exited().cause()) + " exit_code " +
        std::to_string(rr.exited().exit_code()) +
        (ended_before ? ", " + std::to_string(MsSince(t0)) + " ms, the daemon stopped throughout"
                      : ", " + std::to_string(answer_ms) + " ms after the kill");
    Row("dockerd SIGKILLed during exec start (" + ModeName(mode) + ")", saw,
        mode == EXEC_MODE_AGENT ? "nothing: the command ran" : "the command (it never ran)");
    ExpectServing(srv);

    // With the daemon dead: agent mode still runs commands (the container
    // lives on under its shim); per-command mode cannot, and says why.
    RunResponse r2;
    grpc::Status s2 = wstest::RunProcess(ex.get(), id, wstest::ArgvProcess({"echo", "again"}), &r2,
                                         "", kCallDeadlineS);
    if (mode == EXEC_MODE_AGENT) {
        EXPECT_TRUE(s2.ok()) << Describe(s2);
        EXPECT_EQ(r2.stdout(), "again\n");
    } else {
        EXPECT_WS_ERROR(s2, StatusCode::UNAVAILABLE, "WORKSPACE_FAILED");
        EXPECT_EQ(wstest::Decode(s2).metadata["transient"], "true");
    }
    // The daemon's restart (no live-restore) kills the container: the
    // workspace's next command says so, and how to get a new one.
    BringBackDaemon();
    s2 = wstest::RunProcess(ex.get(), id, wstest::ArgvProcess({"echo", "again"}), &r2, "",
                            kCallDeadlineS);
    EXPECT_WS_ERROR(s2, StatusCode::FAILED_PRECONDITION, "WORKSPACE_FAILED");
    EXPECT_NE(s2.error_message().find("Resolve"), std::string::npos) << s2.error_message();
    ExpectRecovered(srv, {id});
}

// A command streaming its output when the daemon dies.
TEST_P(DockerDaemonKilledMode, DuringStream)
{
    ASSERT_TRUE(Ping()) << "the Docker daemon must be running: this test never skips";
    const ExecMode mode = GetParam();
    KilledDaemonGuard guard;
    wstest::Server srv;
    auto ws = srv.workspaces();
    auto ex = srv.exec();
    OpenResponse before;
    grpc::Status s = OpenMode(ws.get(), mode, &before);
    ASSERT_TRUE(s.ok()) << Describe(s);
    const std::string id = before.workspace().id();

    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(90));
    auto stream = wstest::StartStream(
        ex.get(), &ctx, id,
        wstest::ArgvProcess({"sh", "-c", "while :; do echo x; sleep 0.05; done"}));
    wstest::EventLog log;
    ASSERT_TRUE(wstest::ReadEvents(stream.get(), &log,
                                   [](const wstest::EventLog &l) { return l.out.chunks >= 3; }));
    int chunks_at_kill = log.out.chunks;
    Clock::time_point killed = Clock::now();
    KillDaemon(DockerdPid());
    // Agent mode: the command lives on without the daemon (the container
    // runs under its shim) and keeps streaming, until the daemon's restart
    // kills the container. Per-command mode: the relay's stream was the
    // daemon's, and ends with it.
    bool open = wstest::ReadEvents(stream.get(), &log, [&](const wstest::EventLog &l) {
        return l.out.chunks >= chunks_at_kill + 5;
    });
    Clock::time_point restarted = Clock::now();
    std::thread restart;
    if (mode == EXEC_MODE_AGENT) {
        EXPECT_TRUE(open) << "the stream ended with the daemon: " << log.exit.ShortDebugString();
        if (open) {
            restart = std::thread(BringBackDaemon);
            wstest::ReadEvents(stream.get(), &log);
        }
    } else {
        EXPECT_FALSE(open) << "the stream went on without the daemon";
    }
    grpc::Status fs = stream->Finish();
    long answer_ms = MsSince(mode == EXEC_MODE_AGENT ? restarted : killed);
    if (restart.joinable())
        restart.join();
    EXPECT_TRUE(fs.ok()) << Describe(fs);
    EXPECT_EQ(wstest::Problems(log), "");
    ASSERT_TRUE(log.exited) << "the stream ended without its exit";
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EVICTED) << log.exit.ShortDebugString();
    Row("dockerd SIGKILLed during a stream (" + ModeName(mode) + ")",
        Describe(fs) + ", exited cause " + ExitCause_Name(log.exit.cause()) + " exit_code " +
            std::to_string(log.exit.exit_code()) + " signal " + std::to_string(log.exit.signal()) +
            ", " + std::to_string(answer_ms) + " ms after the " +
            (mode == EXEC_MODE_AGENT
                 ? "restart began (output went on after the kill: " +
                       std::to_string(log.out.chunks - chunks_at_kill) + " chunks)"
                 : "kill"),
        mode == EXEC_MODE_AGENT ? "the command, at the daemon's restart (no live-restore)"
                                : "the command's end (it runs on until the restart)");
    ExpectServing(srv);
    BringBackDaemon();
    ExpectRecovered(srv, {id});
}

INSTANTIATE_TEST_SUITE_P(Modes, DockerDaemonKilledMode,
                         ::testing::Values(EXEC_MODE_AGENT, EXEC_MODE_PER_COMMAND),
                         [](const ::testing::TestParamInfo<ExecMode> &i) {
                             return i.param == EXEC_MODE_AGENT ? std::string("Agent")
                                                               : std::string("PerCommand");
                         });

TEST(DockerDaemonKilled, DuringClose)
{
    ASSERT_TRUE(Ping()) << "the Docker daemon must be running: this test never skips";
    KilledDaemonGuard guard;
    wstest::Server srv;
    auto ws = srv.workspaces();
    OpenResponse before;
    grpc::Status s = OpenMode(ws.get(), wstest::TestExecMode(), &before);
    ASSERT_TRUE(s.ok()) << Describe(s);
    const std::string id = before.workspace().id();
    pid_t dockerd = DockerdPid();

    ASSERT_EQ(kill(dockerd, SIGSTOP), 0);
    Clock::time_point t1;
    std::thread close([&] {
        s = CloseWs(ws.get(), id);
        t1 = Clock::now();
    });
    bool in_flight = Eventually([&] { return Waiting(srv.pid(), dockerd); });
    EXPECT_TRUE(in_flight) << "the Close never reached the daemon";
    Clock::time_point killed = Clock::now();
    KillDaemon(dockerd);
    close.join();
    long answer_ms =
        (long)std::chrono::duration_cast<std::chrono::milliseconds>(t1 - killed).count();
    ASSERT_TRUE(in_flight);
    EXPECT_WS_ERROR(s, StatusCode::UNAVAILABLE, "WORKSPACE_FAILED");
    EXPECT_EQ(wstest::Decode(s).metadata["transient"], "true");
    EXPECT_EQ(access(srv.workspace_dir(id).c_str(), F_OK), 0)
        << "the files went although the Close failed";
    Row("dockerd SIGKILLed during Close (container remove in flight)",
        Describe(s) + ", " + std::to_string(answer_ms) + " ms after the kill",
        "nothing: the workspace stays, to be closed again");
    ExpectServing(srv);
    BringBackDaemon();
    ExpectRecovered(srv, {id});
}

} // namespace
