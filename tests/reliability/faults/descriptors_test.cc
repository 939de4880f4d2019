// The real server out of file descriptors: its RLIMIT_NOFILE lowered while
// it runs (prlimit(2) on its pid, as `prlimit --pid PID --nofile=N:N`
// does) to just what it holds, then to a few more, so that every step that
// takes a descriptor meets EMFILE in turn: a file API call's openat2, a
// command's home, pipes, pidfd and spawn, a new connection's accept. Each
// call ends RESOURCE_EXHAUSTED / NO_DESCRIPTORS (metadata errno=EMFILE),
// never another error or a crash; a connection that cannot be accepted is
// closed at once (UNAVAILABLE to its client) without the server spinning;
// and once the limit is back every call, and a new connection, works again
// and the server holds as many descriptors as before.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
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

// Sets the soft RLIMIT_NOFILE of `pid` (what open, pipe and accept
// check). The hard limit stays: lowering it could not be undone by a
// caller without CAP_SYS_RESOURCE in the initial user namespace, as in a
// container.
void SetNofile(pid_t pid, rlim_t n)
{
    struct rlimit r = {};
    ASSERT_EQ(prlimit(pid, RLIMIT_NOFILE, nullptr, &r), 0) << strerror(errno);
    r.rlim_cur = n;
    ASSERT_EQ(prlimit(pid, RLIMIT_NOFILE, &r, nullptr), 0) << strerror(errno);
}

struct rlimit GetNofile(pid_t pid)
{
    struct rlimit r = {};
    EXPECT_EQ(prlimit(pid, RLIMIT_NOFILE, nullptr, &r), 0) << strerror(errno);
    return r;
}

// The lowest descriptor number the process does not hold: under a limit
// of that, it can open nothing (a new descriptor takes the lowest free
// number, and must be below the limit).
int LowestFree(pid_t pid)
{
    std::set<int> held;
    std::string cmd = "ls /proc/" + std::to_string(pid) + "/fd";
    FILE *f = popen(cmd.c_str(), "r");
    int n;
    while (f && fscanf(f, "%d", &n) == 1)
        held.insert(n);
    if (f)
        pclose(f);
    int lowest = 0;
    while (held.count(lowest))
        lowest++;
    return lowest;
}

// The process's user plus system CPU time, in clock ticks.
long CpuTicks(pid_t pid)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t close_paren = s.rfind(')');
    std::istringstream rest(s.substr(close_paren + 2));
    std::string field;
    long utime = 0, stime = 0;
    // Fields 3.. after the command: utime is field 14, stime 15.
    for (int i = 3; i <= 15 && rest >> field; i++) {
        if (i == 14)
            utime = std::stol(field);
        if (i == 15)
            stime = std::stol(field);
    }
    return utime + stime;
}

grpc::Status StatFile(FileSystem::Stub *fs, const std::string &id, const std::string &path)
{
    StatRequest req;
    req.set_workspace_id(id);
    req.set_path(path);
    StatResponse resp;
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return fs->Stat(&ctx, req, &resp);
}

grpc::Status Echo(Exec::Stub *ex, const std::string &id, RunResponse *rr)
{
    return wstest::RunProcess(ex, id, wstest::ArgvProcess({"echo", "fd"}), rr, "", 30);
}

// The call either worked or was refused for want of descriptors: nothing
// else (no INTERNAL, no WORKSPACE_FAILED, no hang).
::testing::AssertionResult OkOrNoDescriptors(const grpc::Status &s)
{
    if (s.ok())
        return ::testing::AssertionSuccess();
    wstest::Error e = wstest::Decode(s);
    if (e.code == StatusCode::RESOURCE_EXHAUSTED && e.reason == "NO_DESCRIPTORS" &&
        (e.metadata["errno"] == "EMFILE"))
        return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "code " << e.code << " reason " << e.reason << " errno "
                                         << e.metadata["errno"] << ": " << e.message;
}

::testing::AssertionResult IsNoDescriptors(const grpc::Status &s)
{
    ::testing::AssertionResult r =
        wstest::IsError(s, StatusCode::RESOURCE_EXHAUSTED, "NO_DESCRIPTORS");
    if (!r)
        return r;
    wstest::Error e = wstest::Decode(s);
    if (e.metadata["errno"] != "EMFILE")
        return ::testing::AssertionFailure() << "errno metadata " << e.metadata["errno"];
    return ::testing::AssertionSuccess();
}

// A health check on a channel of its own (a new connection, so a new
// accept), within `seconds`.
grpc::Status HealthOnNewChannel(const wstest::Server &srv, int seconds)
{
    grpc::ChannelArguments args;
    // A channel of its own, not one shared from gRPC's subchannel pool.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto ch = grpc::CreateCustomChannel(srv.address(), grpc::InsecureChannelCredentials(), args);
    auto h = grpc::health::v1::Health::NewStub(ch);
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
    return h->Check(&ctx, req, &resp);
}

// A raw connection to the server's unix socket left waiting in its
// backlog: while accept fails the listener stays readable.
int PendingConnection(const wstest::Server &srv)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa = {};
    sa.sun_family = AF_UNIX;
    std::string path = srv.address().substr(strlen("unix:"));
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path.c_str());
    EXPECT_EQ(connect(fd, (sockaddr *)&sa, sizeof(sa)), 0) << strerror(errno);
    return fd;
}

// The value of the unlabelled series `name` on the server's /metrics (its
// --metrics-listen port is in its log), or -1.
double Metric(const wstest::Server &srv, const std::string &name)
{
    std::istringstream log(wstest::ReadHostFile(srv.stderr_path()));
    std::string line;
    int port = -1;
    while (std::getline(log, line)) {
        size_t at = line.find("\"port\":");
        if (line.find("\"event\":\"metrics.listen\"") != std::string::npos &&
            at != std::string::npos)
            port = std::stoi(line.substr(at + 7));
    }
    if (port < 0)
        return -1;
    std::string cmd =
        "curl -fsS --max-time 10 http://127.0.0.1:" + std::to_string(port) + "/metrics";
    FILE *f = popen(cmd.c_str(), "r");
    if (!f)
        return -1;
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        text.append(buf, n);
    pclose(f);
    std::istringstream in(text);
    while (std::getline(in, line))
        if (line.compare(0, name.size() + 1, name + " ") == 0)
            return std::stod(line.substr(name.size() + 1));
    return -1;
}

TEST(Descriptors, EveryStepAtEmfileIsNoDescriptorsAndTheServerRecoversWithoutLeak)
{
    wstest::Server srv(std::vector<std::string>({"--metrics-listen", "127.0.0.1:0"}));
    const pid_t pid = srv.pid();
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto ex = srv.exec();
    wstest::Ws w = wstest::OpenShell(ws.get(), {"echo"});
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "a.txt", "a\n").ok());
    // Warm up what the server makes on first use (its exec machinery,
    // worker threads), so that the baseline is the idle server's.
    RunResponse rr;
    for (int i = 0; i < 3; i++) {
        ASSERT_TRUE(Echo(ex.get(), w.id, &rr).ok());
        ASSERT_TRUE(StatFile(fs.get(), w.id, "a.txt").ok());
    }
    const struct rlimit saved = GetNofile(pid);
    const wstest::ProcStats base = wstest::WaitStatsSettled(pid, 500, 10000);
    ASSERT_GT(base.fds, 0);

    // Not one descriptor more than the server holds.
    const int ceiling = LowestFree(pid);
    SetNofile(pid, ceiling);
    EXPECT_TRUE(IsNoDescriptors(StatFile(fs.get(), w.id, "a.txt")));
    std::string data;
    EXPECT_TRUE(IsNoDescriptors(wstest::Read(fs.get(), w.id, "a.txt", &data)));
    EXPECT_TRUE(IsNoDescriptors(wstest::Write(fs.get(), w.id, "b.txt", "b\n")));
    EXPECT_TRUE(IsNoDescriptors(Echo(ex.get(), w.id, &rr)));

    // accept at EMFILE: a new connection is closed at once (its client
    // sees UNAVAILABLE and retries until its deadline), never left in the
    // backlog, and the server does not spin on the readable listener
    // meanwhile: a busy loop would burn a whole CPU for these seconds.
    int pending = PendingConnection(srv);
    const long hz = sysconf(_SC_CLK_TCK);
    const long cpu0 = CpuTicks(pid);
    const auto t0 = std::chrono::steady_clock::now();
    grpc::Status fresh = HealthOnNewChannel(srv, 3);
    std::this_thread::sleep_until(t0 + std::chrono::seconds(3));
    const long burnt = CpuTicks(pid) - cpu0;
    EXPECT_FALSE(fresh.ok());
    EXPECT_LT(burnt, hz / 2) << "the server used " << burnt << " ticks of " << hz
                             << " per second over 3 s with accept at EMFILE";
    {
        struct timeval tv = {10, 0};
        setsockopt(pending, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        char byte;
        ssize_t r = recv(pending, &byte, 1, 0);
        EXPECT_TRUE(r == 0 || (r < 0 && errno == ECONNRESET))
            << "the waiting connection was neither answered nor closed: " << r << " "
            << strerror(errno);
    }
    close(pending);
    EXPECT_NE(wstest::ReadHostFile(srv.stderr_path()).find("transport.out_of_descriptors"),
              std::string::npos);

    // A few descriptors to spare, one at a time: every step of a command
    // (pipes, pidfd, the spawn, its cgroup) and of a file call meets the
    // limit in turn, and each is refused cleanly or works.
    int refused = 0;
    for (int extra = 1; extra <= 12; extra++) {
        SetNofile(pid, ceiling + extra);
        grpc::Status s = Echo(ex.get(), w.id, &rr);
        EXPECT_TRUE(OkOrNoDescriptors(s)) << "limit +" << extra;
        refused += !s.ok();
        if (s.ok()) {
            EXPECT_EQ(rr.stdout(), "fd\n");
        }
        s = wstest::Write(fs.get(), w.id, "b.txt", "b\n");
        EXPECT_TRUE(OkOrNoDescriptors(s)) << "limit +" << extra;
        s = StatFile(fs.get(), w.id, "a.txt");
        EXPECT_TRUE(OkOrNoDescriptors(s)) << "limit +" << extra;
    }
    EXPECT_GT(refused, 0) << "no command met the limit: the sweep proves nothing";

    // The limit back: everything works again, a new connection included.
    {
        struct rlimit r = saved;
        ASSERT_EQ(prlimit(pid, RLIMIT_NOFILE, &r, nullptr), 0);
    }
    grpc::Status h = HealthOnNewChannel(srv, 30);
    EXPECT_TRUE(h.ok()) << "no new connection after EMFILE: " << h.error_message();
    // Counted apart from the connections refused by --max-connections:
    // at least the waiting one.
    EXPECT_GE(Metric(srv, "workspaced_connections_shed_total"), 1);
    EXPECT_EQ(Metric(srv, "workspaced_connections_refused_total"), 0);
    grpc::Status s = Echo(ex.get(), w.id, &rr);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(rr.stdout(), "fd\n");
    EXPECT_TRUE(StatFile(fs.get(), w.id, "a.txt").ok());
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "b.txt", "b2\n").ok());
    ASSERT_TRUE(wstest::Read(fs.get(), w.id, "b.txt", &data).ok());
    EXPECT_EQ(data, "b2\n");
    ASSERT_TRUE(wstest::Read(fs.get(), w.id, "a.txt", &data).ok());
    EXPECT_EQ(data, "a\n");

    // No descriptor leaked by a refused step.
    wstest::ProcStats after = wstest::WaitStatsSettled(pid, 1000, 15000);
    EXPECT_EQ(after.fds, base.fds) << "descriptors before " << base.fds << ", after " << after.fds;
    EXPECT_EQ(after.children, 0);
    EXPECT_EQ(srv.Stop(), 0) << wstest::ReadHostFile(srv.stderr_path());
}

} // namespace
