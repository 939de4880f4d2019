// Observability end to end: /metrics scraped over HTTP after a known
// sequence of calls and compared exactly, the metrics listener's loopback
// rule, every stderr line a JSON object with the fixed keys, and the
// transport limits keeping one client's idle streams from starving
// another.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <chrono>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <jansson.h>

#include "harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;
using Clock = std::chrono::steady_clock;

namespace
{

// The metrics port the server logged (event "metrics.listen").
int MetricsPort(const wstest::Server &srv)
{
    std::istringstream err(wstest::ReadHostFile(srv.stderr_path()));
    std::string line;
    while (std::getline(err, line)) {
        if (line.find("\"event\":\"metrics.listen\"") == std::string::npos)
            continue;
        size_t at = line.find("\"port\":");
        if (at != std::string::npos)
            return std::stoi(line.substr(at + 7));
    }
    return -1;
}

// GET `path` from 127.0.0.1:port over HTTP/1.0; status code and body.
int HttpGet(int port, const std::string &path, std::string *body)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, req.data(), req.size()) != (ssize_t)req.size()) {
        close(fd);
        return -1;
    }
    std::string resp;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        resp.append(buf, n);
    close(fd);
    size_t sp = resp.find(' ');
    size_t hdr_end = resp.find("\r\n\r\n");
    if (sp == std::string::npos || hdr_end == std::string::npos)
        return -1;
    *body = resp.substr(hdr_end + 4);
    return std::stoi(resp.substr(sp + 1, 3));
}

// The Prometheus text format, parsed: series text ("name{l=\"v\"}" exactly
// as written) to value. Comment lines are checked for shape; a sample line
// must be "series value".
struct Scrape {
    std::map<std::string, double> v;
    std::vector<std::string> problems;

    double get(const std::string &series) const
    {
        auto it = v.find(series);
        return it == v.end() ? -1 : it->second;
    }
    // Sum of every series of family `name` whose labels contain `part`.
    double sum(const std::string &name, const std::string &part = "") const
    {
        double s = 0;
        for (const auto &[k, val] : v)
            if (k.compare(0, name.size() + 1, name + "{") == 0 && k.find(part) != std::string::npos)
                s += val;
        return s;
    }
};

Scrape Parse(const std::string &text)
{
    Scrape s;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty())
            continue;
        if (line[0] == '#') {
            if (line.rfind("# HELP workspaced_", 0) != 0 &&
                line.rfind("# TYPE workspaced_", 0) != 0)
                s.problems.push_back("bad comment: " + line);
            continue;
        }
        size_t sp = line.rfind(' ');
        if (sp == std::string::npos || line.rfind("workspaced_", 0) != 0) {
            s.problems.push_back("bad sample: " + line);
            continue;
        }
        std::string key = line.substr(0, sp);
        char *end = nullptr;
        std::string num = line.substr(sp + 1);
        double val = strtod(num.c_str(), &end);
        if (!end || *end || num.empty())
            s.problems.push_back("bad value: " + line);
        if (s.v.count(key))
            s.problems.push_back("duplicate series: " + key);
        s.v[key] = val;
    }
    return s;
}

// Histogram `name`: buckets never decrease, +Inf equals _count; returns
// _count (or -1 and a failure).
double CheckHistogram(const Scrape &s, const std::string &name)
{
    static const char *const les[] = {"0.001", "0.005", "0.01", "0.025", "0.05",
                                      "0.1",   "0.25",  "0.5",  "1",     "2.5",
                                      "5",     "10",    "30",   "60",    "+Inf"};
    double prev = 0;
    for (const char *le : les) {
        double b = s.get(name + "_bucket{le=\"" + le + "\"}");
        EXPECT_GE(b, prev) << name << " le=" << le;
        prev = b;
    }
    double count = s.get(name + "_count");
    EXPECT_EQ(prev, count) << name << ": +Inf bucket differs from _count";
    EXPECT_GE(s.get(name + "_sum"), 0) << name;
    return count;
}

Scrape ScrapeOk(int port)
{
    std::string body;
    int code = HttpGet(port, "/metrics", &body);
    EXPECT_EQ(code, 200) << body;
    Scrape s = Parse(body);
    EXPECT_TRUE(s.problems.empty()) << s.problems.front();
    return s;
}

grpc::Status Close(Workspaces::Stub *stub, const std::string &id)
{
    ClientContext ctx;
    CloseRequest req;
    CloseResponse resp;
    req.set_workspace_id(id);
    return stub->Close(&ctx, req, &resp);
}

} // namespace

TEST(ObservabilityTest, MetricsCountAKnownSequenceExactly)
{
    wstest::Server srv(std::vector<std::string>({"--metrics-listen", "127.0.0.1:0"}));
    int port = MetricsPort(srv);
    ASSERT_GT(port, 0) << wstest::ReadHostFile(srv.stderr_path());

    // Before anything: every counter at zero, no tenant in the gauges
    // (a tenant appears with its first workspace).
    Scrape s0 = ScrapeOk(port);
    EXPECT_EQ(s0.get("workspaced_commands_started_total"), 0);
    EXPECT_EQ(s0.get("workspaced_active_workspaces{tenant=\"default\"}"), -1);
    EXPECT_EQ(s0.get("workspaced_active_commands{tenant=\"default\"}"), -1);
    EXPECT_EQ(s0.sum("workspaced_rejections_total"), 0);
    // The release, from VERSION, as build information.
    std::string version = wstest::ReadHostFile("VERSION");
    version = version.substr(0, version.find('\n'));
    EXPECT_EQ(s0.get("workspaced_build_info{version=\"" + version + "\"}"), 1);

    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto exec = srv.exec();

    // N = 4 opens: three memory, one local-bash. M = 2 closes.
    std::vector<wstest::Ws> mem;
    for (int i = 0; i < 3; i++)
        mem.push_back(wstest::Open(ws.get(), "memory"));
    wstest::Ws sh = wstest::OpenShell(ws.get(), {"echo", "sh", "sleep"});
    ASSERT_TRUE(Close(ws.get(), mem[0].id).ok());
    ASSERT_TRUE(Close(ws.get(), mem[1].id).ok());

    // One path escape, one guard rejection.
    std::string out;
    EXPECT_WS_ERROR(wstest::Read(fs.get(), mem[2].id, "../outside", &out),
                    StatusCode::INVALID_ARGUMENT, "PATH_ESCAPE");
    RunResponse r;
    EXPECT_WS_ERROR(wstest::RunProcess(exec.get(), sh.id, wstest::ArgvProcess({"cat", "x"}), &r),
                    StatusCode::PERMISSION_DENIED, "COMMAND_NOT_ALLOWED");

    // K = 3 commands: two exit, one times out.
    ASSERT_TRUE(
        wstest::RunProcess(exec.get(), sh.id, wstest::ArgvProcess({"echo", "hi"}), &r).ok());
    ASSERT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED);
    ASSERT_TRUE(wstest::RunProcess(exec.get(), sh.id,
                                   wstest::ArgvProcess({"sh", "-c", "echo oops >&2; exit 3"}), &r)
                    .ok());
    ASSERT_EQ(r.exited().exit_code(), 3);
    ProcessConfig slow = wstest::ArgvProcess({"sleep", "30"});
    slow.set_timeout_ms(300);
    ASSERT_TRUE(wstest::RunProcess(exec.get(), sh.id, slow, &r).ok());
    ASSERT_EQ(r.exited().cause(), EXIT_CAUSE_TIMEOUT);

    // A command's end is recorded on the exec layer's thread, which may
    // trail the Run reply: wait (bounded) for the third.
    Scrape s;
    auto deadline = Clock::now() + std::chrono::seconds(10);
    do {
        s = ScrapeOk(port);
        if (s.sum("workspaced_commands_ended_total") >= 3)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (Clock::now() < deadline);

    EXPECT_EQ(s.get("workspaced_workspace_opens_total{provider=\"memory\",status=\"ok\"}"), 3);
    EXPECT_EQ(s.get("workspaced_workspace_opens_total{provider=\"local-bash\",status=\"ok\"}"), 1);
    EXPECT_EQ(s.sum("workspaced_workspace_opens_total"), 4);
    EXPECT_EQ(s.get("workspaced_workspace_closes_total{provider=\"memory\",status=\"ok\"}"), 2);
    EXPECT_EQ(s.sum("workspaced_workspace_closes_total"), 2);
    EXPECT_EQ(s.sum("workspaced_workspace_evictions_total"), 0);
    EXPECT_EQ(CheckHistogram(s, "workspaced_workspace_open_seconds"), 4);

    EXPECT_EQ(s.get("workspaced_rejections_total{reason=\"PATH_ESCAPE\"}"), 1);
    EXPECT_EQ(s.get("workspaced_rejections_total{reason=\"COMMAND_NOT_ALLOWED\"}"), 1);
    EXPECT_EQ(s.sum("workspaced_rejections_total"), 2);

    EXPECT_EQ(s.get("workspaced_commands_started_total"), 3);
    EXPECT_EQ(s.get("workspaced_commands_ended_total{cause=\"EXITED\"}"), 2);
    EXPECT_EQ(s.get("workspaced_commands_ended_total{cause=\"TIMEOUT\"}"), 1);
    EXPECT_EQ(s.sum("workspaced_commands_ended_total"), 3);
    EXPECT_EQ(CheckHistogram(s, "workspaced_command_seconds"), 3);
    EXPECT_EQ(s.get("workspaced_stream_bytes_total{stream=\"stdout\"}"), 3); // "hi\n"
    EXPECT_EQ(s.get("workspaced_stream_bytes_total{stream=\"stderr\"}"), 5); // "oops\n"
    EXPECT_EQ(s.get("workspaced_stream_bytes_total{stream=\"pty\"}"), 0);

    EXPECT_EQ(s.get("workspaced_active_workspaces{tenant=\"default\"}"), 2);
    EXPECT_EQ(s.get("workspaced_active_commands{tenant=\"default\"}"), 0);

    // Anything but GET /metrics is refused.
    std::string body;
    EXPECT_EQ(HttpGet(port, "/", &body), 404);
    EXPECT_EQ(HttpGet(port, "/metrics/../secret", &body), 404);
}

// The gauges are per tenant: each tenant's open workspaces and running
// commands, exactly, as they rise and fall; a tenant with nothing left
// stays at 0.
TEST(ObservabilityTest, GaugesArePerTenant)
{
    const std::string alice = "tok-alice-gauges", bob = "tok-bob-gauges";
    std::string tokens = wstest::MakeTempDir("tokens") + "/tokens";
    wstest::WriteHostFile(tokens, "alice " + wstest::Sha256Hex(alice) + "\nbob " +
                                      wstest::Sha256Hex(bob) + "\n");
    wstest::Server srv(
        std::vector<std::string>({"--tokens-file", tokens, "--metrics-listen", "127.0.0.1:0"}));
    int port = MetricsPort(srv);
    ASSERT_GT(port, 0) << wstest::ReadHostFile(srv.stderr_path());
    auto alice_ws = Workspaces::NewStub(srv.Channel(alice));
    auto alice_exec = Exec::NewStub(srv.Channel(alice));
    auto bob_ws = Workspaces::NewStub(srv.Channel(bob));

    const std::string m = wstest::UniqueSleep();
    wstest::Ws a1 = wstest::OpenShell(alice_ws.get(), {"sleep"});
    wstest::Ws a2 = wstest::Open(alice_ws.get(), "memory");
    wstest::Ws b1 = wstest::Open(bob_ws.get(), "memory");
    // Two background commands of alice's, left running without a stream.
    for (const char *tag : {"one", "two"}) {
        ProcessConfig bg = wstest::ArgvProcess({"sleep", m});
        bg.set_background(true);
        bg.set_tag(tag);
        grpc::ClientContext ctx;
        auto rw = wstest::StartStream(alice_exec.get(), &ctx, a1.id, bg);
        wstest::EventLog log;
        ASSERT_TRUE(wstest::ReadEvents(rw.get(), &log, [](const wstest::EventLog &l) {
            return l.started;
        })) << wstest::Problems(log);
        ctx.TryCancel();
        rw->Finish();
    }
    Scrape s = ScrapeOk(port);
    EXPECT_EQ(s.get("workspaced_active_workspaces{tenant=\"alice\"}"), 2);
    EXPECT_EQ(s.get("workspaced_active_workspaces{tenant=\"bob\"}"), 1);
    EXPECT_EQ(s.get("workspaced_active_commands{tenant=\"alice\"}"), 2);
    EXPECT_EQ(s.get("workspaced_active_commands{tenant=\"bob\"}"), 0);
    EXPECT_EQ(s.sum("workspaced_active_workspaces"), 3);
    EXPECT_EQ(s.sum("workspaced_active_commands"), 2);

    // Closing alice's shell workspace ends its commands; bob closes his.
    ASSERT_TRUE(Close(alice_ws.get(), a1.id).ok());
    ASSERT_TRUE(Close(bob_ws.get(), b1.id).ok());
    auto deadline = Clock::now() + std::chrono::seconds(10);
    do {
        s = ScrapeOk(port);
        if (s.sum("workspaced_active_commands") == 0)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (Clock::now() < deadline);
    EXPECT_EQ(s.get("workspaced_active_workspaces{tenant=\"alice\"}"), 1);
    EXPECT_EQ(s.get("workspaced_active_workspaces{tenant=\"bob\"}"), 0);
    EXPECT_EQ(s.get("workspaced_active_commands{tenant=\"alice\"}"), 0);
    EXPECT_EQ(s.get("workspaced_active_commands{tenant=\"bob\"}"), 0);
    EXPECT_EQ(s.get("workspaced_active_workspaces{tenant=\"default\"}"), -1);
}

// A workspace whose directory vanished is counted once as an eviction,
// and the calls that find it so as WORKSPACE_EVICTED rejections.
TEST(ObservabilityTest, EvictionIsCountedByProvider)
{
    wstest::Server srv(std::vector<std::string>({"--metrics-listen", "127.0.0.1:0"}));
    int port = MetricsPort(srv);
    ASSERT_GT(port, 0) << wstest::ReadHostFile(srv.stderr_path());
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    wstest::Ws w = wstest::Open(ws.get(), "local-bash");
    wstest::Ws keep = wstest::Open(ws.get(), "local-bash");
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "f", "x").ok());
    EXPECT_EQ(ScrapeOk(port).get("workspaced_active_workspaces{tenant=\"default\"}"), 2);
    std::string dir = srv.workspace_dir(w.id);
    ASSERT_EQ(system(("rm -rf '" + dir + "'").c_str()), 0);
    std::string out;
    EXPECT_WS_ERROR(wstest::Read(fs.get(), w.id, "f", &out), StatusCode::NOT_FOUND,
                    "WORKSPACE_EVICTED");
    EXPECT_WS_ERROR(wstest::Read(fs.get(), w.id, "f", &out), StatusCode::NOT_FOUND,
                    "WORKSPACE_EVICTED");
    Scrape s = ScrapeOk(port);
    EXPECT_EQ(s.get("workspaced_workspace_evictions_total{provider=\"local-bash\"}"), 1);
    EXPECT_EQ(s.sum("workspaced_workspace_evictions_total"), 1);
    EXPECT_EQ(s.get("workspaced_rejections_total{reason=\"WORKSPACE_EVICTED\"}"), 2);
    EXPECT_EQ(s.sum("workspaced_rejections_total"), 2);
    EXPECT_EQ(s.get("workspaced_active_workspaces{tenant=\"default\"}"), 1);
}

// A workspace whose lifetime ran out is counted once as an expiry, and is
// not counted as open any more.
TEST(ObservabilityTest, ExpiryIsCountedByProvider)
{
    wstest::Server srv(std::vector<std::string>({"--metrics-listen", "127.0.0.1:0"}));
    int port = MetricsPort(srv);
    ASSERT_GT(port, 0) << wstest::ReadHostFile(srv.stderr_path());
    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_memory();
    req.mutable_lifetime()->set_ttl_ms(1000);
    OpenResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ASSERT_TRUE(ws->Open(&ctx, req, &resp).ok());
    wstest::Ws keep = wstest::Open(ws.get(), "memory");
    EXPECT_EQ(ScrapeOk(port).sum("workspaced_workspace_expirations_total"), 0);
    Scrape s;
    for (int i = 0; i < 200; i++) {
        s = ScrapeOk(port);
        if (s.sum("workspaced_workspace_expirations_total") > 0)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(s.get("workspaced_workspace_expirations_total{provider=\"memory\"}"), 1);
    EXPECT_EQ(s.sum("workspaced_workspace_expirations_total"), 1);
    EXPECT_EQ(s.get("workspaced_active_workspaces{tenant=\"default\"}"), 1);
    EXPECT_EQ(s.sum("workspaced_workspace_evictions_total"), 0);
}

TEST(ObservabilityTest, MetricsListenerIsLoopbackOnlyUnlessAsked)
{
    for (const char *addr : {"0.0.0.0:0", "10.1.2.3:9100", "[::]:0", "example.com:9100"}) {
        std::string err;
        std::string state = wstest::MakeTempDir("state");
        int st = wstest::RunServerToExit(
            std::vector<std::string>({"--state-dir", state, "--metrics-listen", addr}), &err);
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << addr << ": " << st;
        EXPECT_NE(err.find("refusing to serve metrics"), std::string::npos) << addr << ": " << err;
    }
    // Limits out of range are refused before anything starts.
    for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
             {"--max-streams-per-connection", "0"},
             {"--max-message-bytes", "100"},
             {"--memory-quota-bytes", "1024"},
             {"--max-send-buffer-bytes", "1048575"},
             {"--max-connections", "0"},
             {"--max-connections", "1048577"},
         }) {
        std::string err;
        std::vector<std::string> args = {"--state-dir", wstest::MakeTempDir("state")};
        args.insert(args.end(), bad.begin(), bad.end());
        int st = wstest::RunServerToExit(args, &err);
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << bad[0] << ": " << st;
        EXPECT_NE(err.find("invalid value"), std::string::npos) << err;
    }
    // [::1] is loopback: it starts.
    wstest::Server srv(std::vector<std::string>({"--metrics-listen", "[::1]:0"}));
    EXPECT_GT(MetricsPort(srv), 0) << wstest::ReadHostFile(srv.stderr_path());
}

namespace
{
// A connection to the server's unix socket ("unix:PATH"), or -1.
int Connect(const std::string &address)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {};
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", address.substr(strlen("unix:")).c_str());
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

// Whether the server closed fd within a few seconds (EOF or reset).
bool ClosedByPeer(int fd)
{
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char c;
    ssize_t n = read(fd, &c, 1);
    return n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE));
}

grpc::Status ListAll(const std::shared_ptr<grpc::Channel> &ch)
{
    auto stub = Providers::NewStub(ch);
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    ListProvidersRequest req;
    ListProvidersResponse resp;
    return stub->ListProviders(&ctx, req, &resp);
}
} // namespace

// --max-connections: a connection past the bound is closed as soon as it is
// accepted, before a byte is read; the ones held keep working, and a slot
// freed by a closed connection is taken by the next one. The metrics
// listener's connections do not count.
TEST(ObservabilityTest, ConnectionsPastTheBoundAreClosedOnAccept)
{
    wstest::Server srv(
        std::vector<std::string>({"--max-connections", "3", "--metrics-listen", "127.0.0.1:0"}));
    int mport = MetricsPort(srv);
    ASSERT_GT(mport, 0) << wstest::ReadHostFile(srv.stderr_path());
    Scrape s0 = ScrapeOk(mport);
    EXPECT_EQ(s0.get("workspaced_connections"), 0);
    EXPECT_EQ(s0.get("workspaced_connections_refused_total"), 0);

    // Three clients, each on its own connection: all served.
    std::vector<std::shared_ptr<grpc::Channel>> held;
    for (int i = 0; i < 3; i++) {
        held.push_back(srv.Channel(""));
        ASSERT_TRUE(ListAll(held.back()).ok()) << i;
    }
    // A fourth: UNAVAILABLE, and a raw connection is closed unread.
    auto fourth = srv.Channel("");
    grpc::Status st = ListAll(fourth);
    EXPECT_EQ(st.error_code(), StatusCode::UNAVAILABLE) << st.error_message();
    int raw = Connect(srv.address());
    ASSERT_GE(raw, 0);
    EXPECT_TRUE(ClosedByPeer(raw));
    close(raw);
    // The three held are still served; scraping (another listener) too.
    for (auto &ch : held)
        EXPECT_TRUE(ListAll(ch).ok());
    Scrape s1 = ScrapeOk(mport);
    EXPECT_EQ(s1.get("workspaced_connections"), 3);
    EXPECT_GE(s1.get("workspaced_connections_refused_total"), 2);
    std::string log = wstest::ReadHostFile(srv.stderr_path());
    EXPECT_NE(log.find("\"event\":\"transport.connections_refused\""), std::string::npos) << log;
    EXPECT_NE(log.find("\"max_connections\":3"), std::string::npos) << log;

    // One client leaves: its slot goes to the next (retried: the server
    // sees the close a moment later).
    held.pop_back();
    bool served = false;
    for (auto deadline = Clock::now() + std::chrono::seconds(10);
         !served && Clock::now() < deadline;) {
        served = ListAll(srv.Channel("")).ok();
        if (!served)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(served);
    for (auto &ch : held)
        EXPECT_TRUE(ListAll(ch).ok());
}

TEST(ObservabilityTest, EveryLogLineIsAJsonObjectWithTheFixedKeys)
{
    // debug: every call event is logged, so most code paths write lines.
    auto srv = std::make_unique<wstest::Server>(
        std::vector<std::string>(
            {"--metrics-listen", "127.0.0.1:0", "--policy-pass-env", "SECRET_TOKEN"}),
        "", std::vector<std::string>{"WS_RPC_LOG=debug"});
    auto ws = srv->workspaces();
    auto fs = srv->fs();
    auto exec = srv->exec();
    wstest::Ws sh = wstest::OpenShell(ws.get(), {"echo", "sh"}, {"SECRET_TOKEN"});
    ASSERT_TRUE(wstest::Write(fs.get(), sh.id, "f.txt", "file-contents-marker").ok());
    std::string out;
    ASSERT_TRUE(wstest::Read(fs.get(), sh.id, "f.txt", &out).ok());
    EXPECT_WS_ERROR(wstest::Read(fs.get(), sh.id, "../x\"quote", &out),
                    StatusCode::INVALID_ARGUMENT, "PATH_ESCAPE");
    // CI: a name local-bash takes from a client (its allowlist).
    ProcessConfig p = wstest::ArgvProcess({"sh", "-c", "echo \"$CI\"; exit 4"});
    (*p.mutable_env())["CI"] = "hunter2-marker";
    RunResponse r;
    ASSERT_TRUE(wstest::RunProcess(exec.get(), sh.id, p, &r).ok());
    ASSERT_EQ(r.exited().exit_code(), 4);
    ASSERT_EQ(r.stdout(), "hunter2-marker\n");
    // The audit line is written on the exec layer's thread: wait for it.
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (wstest::ReadHostFile(srv->stderr_path()).find("\"event\":\"command\"") ==
               std::string::npos &&
           Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::string path = srv->stderr_path();
    EXPECT_EQ(srv->Stop(), 0);
    srv.reset();

    std::string text = wstest::ReadHostFile(path);
    std::istringstream in(text);
    std::string line;
    int lines = 0;
    std::map<std::string, int> events;
    while (std::getline(in, line)) {
        lines++;
        json_error_t e;
        json_t *o = json_loads(line.c_str(), 0, &e);
        ASSERT_TRUE(o && json_is_object(o)) << "line " << lines << " is not JSON: " << line;
        EXPECT_EQ(json_object_size(o), 4u) << line;
        json_t *ts = json_object_get(o, "ts"), *level = json_object_get(o, "level"),
               *event = json_object_get(o, "event"), *fields = json_object_get(o, "fields");
        ASSERT_TRUE(json_is_string(ts) && json_is_string(level) && json_is_string(event) &&
                    json_is_object(fields))
            << line;
        std::string lv = json_string_value(level);
        EXPECT_TRUE(lv == "error" || lv == "info" || lv == "debug") << line;
        std::string t = json_string_value(ts);
        EXPECT_EQ(t.size(), 24u) << line; // 2026-01-02T03:04:05.678Z
        EXPECT_EQ(t.back(), 'Z') << line;
        events[json_string_value(event)]++;
        json_decref(o);
    }
    EXPECT_GT(lines, 10) << text;
    EXPECT_EQ(events["metrics.listen"], 1) << text;
    EXPECT_EQ(events["command"], 1) << text;
    EXPECT_EQ(events["server.drain"], 1) << text;
    EXPECT_GT(events["rpc.accept"], 3) << text;
    EXPECT_EQ(text.find("hunter2-marker"), std::string::npos) << "an environment value was logged";
    EXPECT_EQ(text.find("file-contents-marker"), std::string::npos) << "file contents were logged";
}

// One client opens many ReadFile streams on few connections and never
// reads them; another client's Health.Check and ReadFile are still served.
namespace
{
// ReadFile streams of `path` that their client never reads: `channels`
// connections of their own, `per` streams on each, all started at once,
// with bearer token `token` when not empty.
// WaitServed() waits for the server to be sending on some of them; Cancel()
// tears them down and says how many ended within 30 s.
class UnreadStreams
{
  public:
    UnreadStreams(const std::string &address, const std::string &ws_id, const std::string &path,
                  int channels, int per, const std::string &token = "")
        : held_(static_cast<size_t>(channels * per))
    {
        for (int c = 0; c < channels; c++) {
            grpc::ChannelArguments args;
            args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
            args.SetString("workspaced.test.channel", std::to_string(c));
            stubs_.push_back(FileSystem::NewStub(
                grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
        }
        ReadFileRequest req;
        req.set_workspace_id(ws_id);
        req.set_path(path);
        for (size_t i = 0; i < held_.size(); i++) {
            held_[i].ctx = std::make_unique<ClientContext>();
            if (!token.empty())
                held_[i].ctx->AddMetadata("authorization", "Bearer " + token);
            held_[i].reader =
                stubs_[i % stubs_.size()]->PrepareAsyncReadFile(held_[i].ctx.get(), req, &cq_);
            held_[i].reader->StartCall(Tag(i, kStart));
        }
    }
    ~UnreadStreams()
    {
        // Cancelled first, so that no operation still waits on a stalled
        // stream while the queue drains.
        for (auto &h : held_)
            h.ctx->TryCancel();
        cq_.Shutdown();
        void *tag;
        bool ok;
        while (cq_.Next(&tag, &ok))
            ;
    }
    size_t size() const
    {
        return held_.size();
    }
    // Waits until the responses of at least `n` streams have begun (their
    // initial metadata arrived: the server is sending the file, and then
    // stalls on the unread window), or 30 s pass. Returns how many have.
    size_t WaitServed(size_t n)
    {
        if (!meta_asked_) {
            for (size_t i = 0; i < held_.size(); i++)
                held_[i].reader->ReadInitialMetadata(Tag(i, kMeta));
            meta_asked_ = true;
        }
        void *tag;
        bool ok;
        auto end = std::chrono::system_clock::now() + std::chrono::seconds(30);
        while (served_ < n && cq_.AsyncNext(&tag, &ok, end) == grpc::CompletionQueue::GOT_EVENT)
            Count(tag, ok);
        return served_;
    }
    size_t Cancel()
    {
        for (auto &h : held_)
            h.ctx->TryCancel();
        void *tag;
        bool ok;
        auto end = std::chrono::system_clock::now() + std::chrono::seconds(30);
        // Finish asks for the initial metadata itself: every read of it
        // asked before must have completed (the cancel completes them).
        while (meta_asked_ && metas_done_ < held_.size() &&
               cq_.AsyncNext(&tag, &ok, end) == grpc::CompletionQueue::GOT_EVENT)
            Count(tag, ok);
        if (meta_asked_ && metas_done_ < held_.size())
            return 0;
        for (size_t i = 0; i < held_.size(); i++)
            held_[i].reader->Finish(&held_[i].status, Tag(i, kFinish));
        while (finished_ < held_.size() &&
               cq_.AsyncNext(&tag, &ok, end) == grpc::CompletionQueue::GOT_EVENT)
            Count(tag, ok);
        return finished_;
    }

  private:
    enum { kStart, kMeta, kFinish };
    static void *Tag(size_t i, int kind)
    {
        return (void *)(uintptr_t)(3 * i + kind);
    }
    void Count(void *tag, bool ok)
    {
        switch ((uintptr_t)tag % 3) {
        case kMeta:
            metas_done_++;
            served_ += ok;
            break;
        case kFinish:
            finished_++;
            break;
        }
    }
    struct Held {
        std::unique_ptr<ClientContext> ctx;
        std::unique_ptr<grpc::ClientAsyncReader<ReadFileResponse>> reader;
        grpc::Status status;
    };
    grpc::CompletionQueue cq_;
    std::vector<std::unique_ptr<FileSystem::Stub>> stubs_;
    std::vector<Held> held_;
    bool meta_asked_ = false;
    size_t metas_done_ = 0, served_ = 0, finished_ = 0;
};
} // namespace

TEST(ObservabilityTest, IdleStreamsOfOneClientDoNotStarveAnother)
{
    const int kChannels = 4, kPerChannel = 32, kMaxStreams = 8;
    wstest::Server srv(
        std::vector<std::string>({"--max-streams-per-connection", std::to_string(kMaxStreams)}));
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    wstest::Ws w = wstest::Open(ws.get(), "memory");
    std::string big(2 * 1024 * 1024, 'x');
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "big", big).ok());
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "small", "small file").ok());

    UnreadStreams stuck(srv.address(), w.id, "big", kChannels, kPerChannel);
    // The other client comes once the server is sending on as many stuck
    // streams as their connections allow at once (the rest wait for a
    // stream of their own).
    const size_t active = static_cast<size_t>(kChannels * std::min(kPerChannel, kMaxStreams));
    ASSERT_GE(stuck.WaitServed(active), active) << "the stuck streams were never served";

    // Another client, its own connection: served within a generous bound.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto other = grpc::CreateCustomChannel(srv.address(), grpc::InsecureChannelCredentials(), args);
    {
        auto health = grpc::health::v1::Health::NewStub(other);
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
        grpc::health::v1::HealthCheckRequest hreq;
        grpc::health::v1::HealthCheckResponse hresp;
        grpc::Status s = health->Check(&ctx, hreq, &hresp);
        EXPECT_TRUE(s.ok()) << s.error_message();
    }
    {
        auto ofs = FileSystem::NewStub(other);
        std::string out;
        for (int i = 0; i < 5; i++) {
            grpc::ClientContext ctx;
            ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
            ReadFileRequest r;
            r.set_workspace_id(w.id);
            r.set_path(i == 4 ? "big" : "small");
            auto rd = ofs->ReadFile(&ctx, r);
            ReadFileResponse m;
            out.clear();
            while (rd->Read(&m))
                out.append(m.data());
            grpc::Status s = rd->Finish();
            ASSERT_TRUE(s.ok()) << i << ": " << s.error_message();
            EXPECT_EQ(out.size(), i == 4 ? big.size() : 10u);
        }
    }

    // Tear the stuck streams down: cancel, collect every status.
    EXPECT_EQ(stuck.Cancel(), stuck.size());
}

// A burst of streams held unread (192 ReadFiles of a 16 MiB file, their
// windows full) grows the server by tens of MiB. Once the burst is over,
// at least 60% of what it added goes back to the kernel within seconds,
// instead of staying with the allocator for good (without the trim about
// 45% did, with it about 70%). Over loopback TCP, as the bound was
// measured there, so with a token.
TEST(ObservabilityTest, MemoryOfABurstOfHeldStreamsGoesBackAfterIt)
{
    const std::string token = "tok-burst";
    std::string tokens = wstest::MakeTempDir("tokens") + "/tokens";
    wstest::WriteHostFile(tokens, "default " + wstest::Sha256Hex(token) + "\n");
    wstest::Server srv(std::vector<std::string>({"--tokens-file", tokens}));
    auto ws = Workspaces::NewStub(srv.Channel(token));
    auto fs = FileSystem::NewStub(srv.Channel(token));
    wstest::Ws w = wstest::Open(ws.get(), "local-bash");
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "big", std::string(16 << 20, 'x')).ok());
    // The baseline once the write's own buffers have come and gone: RSS
    // steady (within 1 MiB) for a second.
    long before = wstest::WaitStatsSettled(srv.pid(), 1000, 20000, 1024).rss_kb;
    ASSERT_GT(before, 0);

    UnreadStreams held(srv.address(), w.id, "big", 4, 48, token);
    // The held streams fill their windows: wait for the server to grow.
    auto t_hold = Clock::now();
    long during = before;
    const bool sanitized = getenv("WORKSPACED_SANITIZED") != nullptr;
    for (auto deadline = Clock::now() + std::chrono::seconds(sanitized ? 5 : 20);
         Clock::now() < deadline;) {
        during = std::max(during, wstest::StatsOf(srv.pid()).rss_kb);
        if (during - before > 40 * 1024)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    // Under ASan the allocator is the sanitizer's, which keeps freed memory
    // in quarantine and is not glibc's to trim: there the burst runs (for
    // the sanitizer's checks) but its memory is not measured.
    if (!sanitized) {
        ASSERT_GT(during - before, 40 * 1024) << "the held streams did not grow the server";
    }

    ASSERT_EQ(held.Cancel(), held.size());

    long after = during;
    for (auto deadline = Clock::now() + std::chrono::seconds(sanitized ? 0 : 20);
         Clock::now() < deadline;) {
        after = wstest::StatsOf(srv.pid()).rss_kb;
        if (after - before <= (during - before) * 2 / 5)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (!sanitized) {
        EXPECT_LE(after - before, (during - before) * 2 / 5)
            << "RSS before " << before << " KiB, holding " << during << " KiB, after " << after
            << " KiB";
    }
    printf("RSS before %ld KiB, holding %ld KiB, after %ld KiB (%.1f s)\n", before, during, after,
           std::chrono::duration<double>(Clock::now() - t_hold).count());
    // And the server still serves (on a new connection: this busy client
    // may have answered the keepalive ping on its idle one too late, and
    // the server closed it).
    auto fresh = FileSystem::NewStub(srv.Channel(token));
    std::string out;
    grpc::Status st = wstest::Write(fresh.get(), w.id, "small", "still here");
    ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
    EXPECT_TRUE(wstest::Read(fresh.get(), w.id, "small", &out).ok());
    EXPECT_EQ(out, "still here");
}
