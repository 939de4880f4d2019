// The server process: flags, listen policy, state directory, providers,
// health, Exec placeholder, drain on SIGTERM, crash safety.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include "tests/e2e/harness.h"
#include "tests/testutil/process.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;
using wstest::Server;

namespace
{

TEST(Server, RefusesNonLoopbackWithoutAuth)
{
    for (const char *addr : {"0.0.0.0:0", "[::]:0", "10.1.2.3:0", "example.com:0", "127.evil:0"}) {
        std::string err;
        std::string state = wstest::MakeTempDir("nl");
        int st = wstest::RunServerToExit({"--listen", addr, "--state-dir", state}, &err);
        ASSERT_TRUE(WIFEXITED(st)) << addr;
        EXPECT_EQ(WEXITSTATUS(st), 2) << addr;
        EXPECT_NE(err.find("refusing to listen"), std::string::npos) << err;
    }
}

TEST(Server, BadFlagsExitWithUsage)
{
    std::string err;
    int st = wstest::RunServerToExit({"--listen", "127.0.0.1:0"}, &err);
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 2);
    EXPECT_NE(err.find("--state-dir is required"), std::string::npos);
    st = wstest::RunServerToExit(
        {"--state-dir", wstest::MakeTempDir("bad") + "/s", "--max-workspaces", "-1"}, &err);
    ASSERT_TRUE(WIFEXITED(st)) << "status " << st << ": " << err;
    EXPECT_EQ(WEXITSTATUS(st), 2);
}

// One version, the repository's VERSION file: `--version` prints it and
// exits 0 without starting anything (no --state-dir needed).
TEST(Server, VersionIsTheVersionFile)
{
    std::string want = wstest::ReadHostFile("VERSION");
    ASSERT_FALSE(want.empty());
    want = want.substr(0, want.find('\n'));
    FILE *p = popen("server/workspaced --version 2>&1", "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[256];
    while (fgets(buf, sizeof(buf), p))
        out += buf;
    int st = pclose(p);
    ASSERT_TRUE(WIFEXITED(st)) << st;
    EXPECT_EQ(WEXITSTATUS(st), 0);
    EXPECT_EQ(out, "workspaced " + want + "\n");
}

// The same version on the wire: ListProviders and Describe say which
// server answered.
TEST(Server, ServerInfoCarriesTheVersion)
{
    std::string want = wstest::ReadHostFile("VERSION");
    want = want.substr(0, want.find('\n'));
    Server srv(std::vector<std::string>{});
    auto p = srv.providers();
    ClientContext pctx;
    ListProvidersResponse lp;
    ASSERT_TRUE(p->ListProviders(&pctx, ListProvidersRequest(), &lp).ok());
    ASSERT_TRUE(lp.has_server());
    EXPECT_EQ(lp.server().version(), want);

    auto ws = srv.workspaces();
    wstest::Ws w = wstest::Open(ws.get(), "memory");
    ClientContext dctx;
    DescribeRequest dreq;
    dreq.set_workspace_id(w.id);
    DescribeResponse d;
    ASSERT_TRUE(ws->Describe(&dctx, dreq, &d).ok());
    ASSERT_TRUE(d.has_server());
    EXPECT_EQ(d.server().version(), want);
}

TEST(Server, CreatesStateDirPrivate)
{
    std::string parent = wstest::MakeTempDir("sd");
    std::string state = parent + "/nested-state";
    Server srv(std::vector<std::string>({}), state);
    struct stat st;
    ASSERT_EQ(stat(state.c_str(), &st), 0);
    // Workspace uids (on: the tests run as root) must reach their own
    // directories through it: others may search it, never list it or
    // read what is in it.
    EXPECT_EQ(st.st_mode & 0777, 0711u);
    ASSERT_EQ(stat((state + "/workspaces").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0711u);
    ASSERT_EQ(stat((state + "/records").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    ASSERT_EQ(stat((state + "/ref.key").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ(st.st_size, 32);
}

// Two servers on one state directory would hand out the same ids and sweep
// each other's workspaces: the second is refused before it touches
// anything, and the directory is usable again once the first is gone.
TEST(Server, OneStateDirectoryServesOneServerAtATime)
{
    Server a(std::vector<std::string>{});
    auto ws = a.workspaces();
    auto fs = a.fs();
    wstest::Ws w = wstest::Open(ws.get(), "local-bash");
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "kept", "data").ok());
    auto before = wstest::Snapshot(a.state_dir());

    std::string err;
    int st =
        wstest::RunServerToExit(std::vector<std::string>({"--state-dir", a.state_dir()}), &err);
    ASSERT_TRUE(WIFEXITED(st)) << err;
    EXPECT_NE(WEXITSTATUS(st), 0);
    EXPECT_NE(err.find("is in use by another workspaced"), std::string::npos) << err;
    EXPECT_EQ(wstest::Snapshot(a.state_dir()), before) << "the refused server changed the state";
    EXPECT_EQ(wstest::ReadHostFile(a.state_dir() + "/lock"), std::to_string(a.pid()) + "\n");

    // The first server is unaffected.
    std::string out;
    ASSERT_TRUE(wstest::Read(fs.get(), w.id, "kept", &out).ok());
    EXPECT_EQ(out, "data");

    // However it ended, the lock ends with it: a SIGKILLed server's
    // directory starts again at once, with the workspace.
    a.Kill();
    Server b(std::vector<std::string>({}), a.state_dir());
    auto bfs = b.fs();
    out.clear();
    ASSERT_TRUE(wstest::Read(bfs.get(), w.id, "kept", &out).ok());
    EXPECT_EQ(out, "data");
}

// A process of nobody's that tries what a command of the server's own uid
// could try against `pid`: read its environment, list its descriptors and
// open its memory. Returns the errno of each ("ok" for none), as
// "environ=... fd=... mem=...".
std::string ProbeProcAs(uid_t uid, gid_t gid, pid_t pid)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return "pipe failed";
    std::string base = "/proc/" + std::to_string(pid);
    std::string environ_path = base + "/environ", fd_path = base + "/fd", mem_path = base + "/mem";
    pid_t child = fork();
    if (child == 0) {
        char out[256] = "";
        if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
            _exit(3);
        const char *paths[] = {environ_path.c_str(), fd_path.c_str(), mem_path.c_str()};
        const char *names[] = {"environ", "fd", "mem"};
        size_t len = 0;
        for (int i = 0; i < 3; i++) {
            int fd = open(paths[i], (i == 1 ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
            int e = fd < 0 ? errno : 0;
            if (fd >= 0)
                close(fd);
            len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%s=%s", i ? " " : "", names[i],
                                    e ? strerrorname_np(e) : "ok");
        }
        if (write(p[1], out, len) != (ssize_t)len)
            _exit(4);
        _exit(0);
    }
    close(p[1]);
    std::string got;
    char buf[256];
    ssize_t n;
    while ((n = read(p[0], buf, sizeof(buf))) > 0)
        got.append(buf, (size_t)n);
    close(p[0]);
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return "probe failed: " + testutil::DescribeStatus(status);
    return got;
}

// Spawns `argv` as uid:gid with stdout to a pipe and stderr to `err_path`.
pid_t SpawnAs(uid_t uid, gid_t gid, const std::vector<std::string> &args,
              const std::string &err_path, int *ret_stdout)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    std::vector<std::string> copy = args;
    std::vector<char *> argv;
    for (auto &a : copy)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_t pid = fork();
    if (pid == 0) {
        if (dup2(p[1], 1) < 0 || dup2(err, 2) < 0 || setgroups(0, nullptr) != 0 ||
            setgid(gid) != 0 || setuid(uid) != 0)
            _exit(127);
        execv(argv[0], argv.data());
        _exit(127);
    }
    close(p[1]);
    close(err);
    *ret_stdout = p[0];
    return pid;
}

// The server holds secrets (the ref key, tokens, TLS keys) and a root fd
// of every workspace; a local-bash command runs as the server's uid. No
// process of that uid may read its environment, list its descriptors or
// open its memory. Root would pass every /proc check, so the server runs
// as nobody here, with a control: a plain process of nobody's is readable
// by the same probe.
TEST(Server, ProcessesOfItsUidCannotReachIntoIt)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root to run the server as another uid";
    const uid_t uid = 65534;
    const gid_t gid = 65534;
    char tmpl[] = "/tmp/wsdumpable.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    std::string dir = tmpl;
    // nobody must reach the binary: the runfiles are under root's home.
    std::string bin = dir + "/workspaced";
    wstest::WriteHostFile(bin, wstest::ReadHostFile("server/workspaced"));
    ASSERT_EQ(chmod(bin.c_str(), 0755), 0);
    ASSERT_EQ(chown(dir.c_str(), uid, gid), 0);
    ASSERT_EQ(chmod(dir.c_str(), 0755), 0);

    int out = -1;
    std::string err_path = dir + "/stderr";
    pid_t srv =
        SpawnAs(uid, gid, {bin, "--state-dir", dir + "/state", "--listen", "unix:" + dir + "/sock"},
                err_path, &out);
    ASSERT_GT(srv, 0);
    std::string line;
    bool up = testutil::ReadLine(out, &line, 20000);
    close(out);
    ASSERT_TRUE(up && line.rfind("workspaced listening on ", 0) == 0)
        << line << testutil::ReadFile(err_path);

    int sout = -1;
    pid_t plain = SpawnAs(uid, gid, {"/bin/sleep", testutil::UniqueSleepArg()}, "/dev/null", &sout);
    ASSERT_GT(plain, 0);
    close(sout);
    // The control: the probe works against a process that allows it (the
    // sleep has exec'd once it is readable).
    std::string control;
    for (int i = 0;
         i < 200 && (control = ProbeProcAs(uid, gid, plain)) != "environ=ok fd=ok mem=ok"; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(control, "environ=ok fd=ok mem=ok");
    kill(plain, SIGKILL);
    waitpid(plain, nullptr, 0);

    EXPECT_EQ(ProbeProcAs(uid, gid, srv), "environ=EACCES fd=EACCES mem=EACCES");

    EXPECT_EQ(testutil::StopCleanly(srv, "workspaced (as nobody)", err_path), "");
    std::string rm = "rm -rf " + dir;
    EXPECT_EQ(system(rm.c_str()), 0);
}

TEST(Server, ListensOnUnixSocket)
{
    // sun_path is short: the socket goes under /tmp.
    std::string sock = "/tmp/workspaced-test-" + std::to_string(getpid()) + ".sock";
    unlink(sock.c_str());
    Server srv(std::vector<std::string>({"--listen", "unix:" + sock}));
    EXPECT_EQ(srv.address(), "unix:" + sock);
    auto ws = srv.workspaces();
    auto w = wstest::Open(ws.get(), "memory");
    EXPECT_FALSE(w.id.empty());
    // A socket left by a killed server does not block the next start.
    srv.Kill();
    struct stat st;
    ASSERT_EQ(lstat(sock.c_str(), &st), 0);
    Server again(std::vector<std::string>({"--listen", "unix:" + sock}));
    auto ws2 = again.workspaces();
    EXPECT_FALSE(wstest::Open(ws2.get(), "memory").id.empty());
    // While that one runs, a second server on the same socket fails to start
    // and leaves the live socket alone.
    std::string err;
    int status = wstest::RunServerToExit(
        {"--listen", "unix:" + sock, "--state-dir", wstest::MakeTempDir("second")}, &err);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 1);
    EXPECT_NE(err.find("another server is listening there"), std::string::npos) << err;
    EXPECT_FALSE(wstest::Open(ws2.get(), "memory").id.empty());
}

// A start that fails says why and exits 1, whether it fails at its first
// step or at its last, with the RPC server already serving: what was built
// is torn down again (in the sanitizer build a leak or a double free would
// be reported on stderr).
TEST(Server, FailedStartExitsCleanly)
{
    std::string dir = wstest::MakeTempDir("failstart");
    // sun_path is short: the socket goes under /tmp.
    std::string sock = "/tmp/workspaced-failstart-" + std::to_string(getpid()) + ".sock";
    std::string err;
    wstest::WriteHostFile(dir + "/file", "");
    int st =
        wstest::RunServerToExit({"--listen", "unix:" + sock, "--state-dir", dir + "/file"}, &err);
    ASSERT_TRUE(WIFEXITED(st)) << "status " << st << ": " << err;
    EXPECT_EQ(WEXITSTATUS(st), 1) << err;
    EXPECT_NE(err.find("cannot create the state directory"), std::string::npos) << err;
    EXPECT_EQ(err.find("Sanitizer"), std::string::npos) << err;

    // The exec layer fails (where the commands' homes go is a file) once
    // the sandbox, the Docker runtime and the audit log are made.
    ASSERT_EQ(mkdir((dir + "/homes-file").c_str(), 0700), 0);
    wstest::WriteHostFile(dir + "/homes-file/homes", "");
    st = wstest::RunServerToExit({"--listen", "unix:" + sock, "--state-dir", dir + "/homes-file"},
                                 &err);
    ASSERT_TRUE(WIFEXITED(st)) << "status " << st << ": " << err;
    EXPECT_EQ(WEXITSTATUS(st), 1) << err;
    EXPECT_NE(err.find("cannot start the exec layer"), std::string::npos) << err;
    EXPECT_EQ(err.find("Sanitizer"), std::string::npos) << err;

    // The metrics listener is the last part made: its port is taken.
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    struct sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    ASSERT_EQ(bind(fd, reinterpret_cast<struct sockaddr *>(&sa), sizeof(sa)), 0);
    ASSERT_EQ(listen(fd, 1), 0);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<struct sockaddr *>(&sa), &len), 0);
    std::string taken = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
    st = wstest::RunServerToExit(
        {"--listen", "unix:" + sock, "--state-dir", dir + "/state", "--metrics-listen", taken},
        &err);
    close(fd);
    unlink(sock.c_str());
    ASSERT_TRUE(WIFEXITED(st)) << "status " << st << ": " << err;
    EXPECT_EQ(WEXITSTATUS(st), 1) << err;
    EXPECT_NE(err.find("cannot serve metrics on '" + taken + "'"), std::string::npos) << err;
    EXPECT_EQ(err.find("Sanitizer"), std::string::npos) << err;
}

TEST(Server, ListProvidersReportsAllFourLive)
{
    Server srv(std::vector<std::string>{});
    auto p = srv.providers();
    ClientContext ctx;
    ListProvidersRequest req;
    ListProvidersResponse resp;
    ASSERT_TRUE(p->ListProviders(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.providers_size(), 4);
    EXPECT_EQ(resp.providers(0).kind(), "memory");
    EXPECT_EQ(resp.providers(1).kind(), "local-bash");
    EXPECT_EQ(resp.providers(2).kind(), "local-sandbox");
    EXPECT_EQ(resp.providers(3).kind(), "docker");
    EXPECT_TRUE(resp.providers(0).available());
    EXPECT_TRUE(resp.providers(1).available());
    // The test setup installs bubblewrap and starts dockerd: both must be
    // usable here, or the suite fails loudly rather than skipping.
    EXPECT_TRUE(resp.providers(2).available()) << resp.providers(2).reason();
    EXPECT_TRUE(resp.providers(3).available()) << resp.providers(3).reason();
    EXPECT_EQ(resp.providers(2).isolation(), "namespaces+seccomp");
    EXPECT_EQ(resp.providers(3).isolation(), "container");
}

TEST(Server, DockerUnreachableFailsClosedAndTransient)
{
    Server srv(std::vector<std::string>({}), "", {"DOCKER_HOST=unix:///nonexistent/docker.sock"});
    auto p = srv.providers();
    ClientContext ctx;
    ListProvidersResponse resp;
    ASSERT_TRUE(p->ListProviders(&ctx, ListProvidersRequest(), &resp).ok());
    EXPECT_FALSE(resp.providers(3).available());
    EXPECT_NE(resp.providers(3).reason().find("not reachable"), std::string::npos);
    EXPECT_EQ(resp.providers(3).reason().find("/nonexistent"), std::string::npos);

    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_docker()->set_image("busybox:latest");
    OpenResponse or_;
    ClientContext c2;
    auto s = ws->Open(&c2, req, &or_);
    EXPECT_WS_ERROR(s, StatusCode::UNAVAILABLE, "WORKSPACE_FAILED");
    EXPECT_EQ(wstest::Decode(s).metadata["transient"], "true");
    // Nothing was created for the failed open.
    auto snap = wstest::Snapshot(srv.state_dir() + "/workspaces");
    EXPECT_TRUE(snap.empty());
}

TEST(Server, DockerImageIsRequired)
{
    Server srv(std::vector<std::string>{});
    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_docker();
    OpenResponse resp;
    ClientContext ctx;
    auto s = ws->Open(&ctx, req, &resp);
    EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED");
    EXPECT_EQ(wstest::Decode(s).metadata["field"], "image");
}

TEST(Server, HealthServingThenNotServingOnDrain)
{
    Server srv(std::vector<std::string>{});
    auto h = srv.health();
    ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(h->Check(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
    ClientContext c2;
    req.set_service("no.such.Service");
    auto nf = h->Check(&c2, req, &resp);
    EXPECT_WS_ERROR(nf, StatusCode::NOT_FOUND, "NO_SUCH_SERVICE");
    // Every service the server serves has a health, reflection included.
    for (const char *svc :
         {"workspace.v1.Providers", "workspace.v1.Workspaces", "workspace.v1.FileSystem",
          "workspace.v1.Exec", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
          "grpc.reflection.v1alpha.ServerReflection"}) {
        ClientContext c3;
        req.set_service(svc);
        ASSERT_TRUE(h->Check(&c3, req, &resp).ok()) << svc;
        EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING) << svc;
    }

    ClientContext wctx;
    req.set_service("");
    auto reader = h->Watch(&wctx, req);
    ASSERT_TRUE(reader->Read(&resp));
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
    kill(srv.pid(), SIGTERM);
    ASSERT_TRUE(reader->Read(&resp));
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
    EXPECT_FALSE(reader->Read(&resp));
    reader->Finish();
    int st = srv.Stop();
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST(Server, InvalidUtf8AndNulInStringsAreMalformed)
{
    Server srv(std::vector<std::string>{});
    auto ws = srv.workspaces();
    auto w = wstest::Open(ws.get(), "memory");
    // Build a StatRequest by hand so the path can carry bytes the C++
    // library would refuse to serialize.
    auto raw = [&](const std::string &path) {
        std::string body;
        body.push_back(0x0a);
        body.push_back(static_cast<char>(w.id.size()));
        body += w.id;
        body.push_back(0x12);
        body.push_back(static_cast<char>(path.size()));
        body += path;
        grpc::GenericStub gs(srv.channel());
        ClientContext ctx;
        grpc::ByteBuffer req_buf, resp_buf;
        grpc::Slice slice(body);
        req_buf = grpc::ByteBuffer(&slice, 1);
        grpc::CompletionQueue cq;
        grpc::Status status;
        auto call = gs.PrepareUnaryCall(&ctx, "/workspace.v1.FileSystem/Stat", req_buf, &cq);
        call->StartCall();
        call->Finish(&resp_buf, &status, reinterpret_cast<void *>(1));
        void *tag;
        bool ok;
        cq.Next(&tag, &ok);
        return status;
    };
    auto s = raw(std::string("a\0/../../etc/passwd", 19));
    EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED");
    EXPECT_EQ(wstest::Decode(s).metadata["field"], "path");
    s = raw("caf\xc3");
    EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED");
}

// SIGTERM while a long ReadFile stream is in flight: the stream ends (it
// finishes or is cancelled), the process exits 0 promptly. `pause` lets
// keepalive pings go back and forth first.
void DrainWithStalledReader(const std::vector<std::string> &args, std::chrono::milliseconds pause)
{
    Server srv(args);
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto w = wstest::Open(ws.get(), "memory");
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "big", std::string(8 << 20, 'x')).ok());
    ClientContext ctx;
    ReadFileRequest req;
    req.set_workspace_id(w.id);
    req.set_path("big");
    auto r = fs->ReadFile(&ctx, req);
    ReadFileResponse m;
    ASSERT_TRUE(r->Read(&m)); // the stream is live; we stop reading
    std::this_thread::sleep_for(pause);
    auto t0 = std::chrono::steady_clock::now();
    kill(srv.pid(), SIGTERM);
    std::thread drain([&] {
        while (r->Read(&m)) {
        }
    });
    int st = srv.Stop();
    drain.join();
    auto s = r->Finish();
    EXPECT_TRUE(s.ok() || s.error_code() == StatusCode::CANCELLED ||
                s.error_code() == StatusCode::UNAVAILABLE)
        << s.error_message();
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 0);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10))
        << wstest::ReadHostFile(srv.stderr_path());
}

TEST(Server, DrainsInFlightCallsOnSigterm)
{
    DrainWithStalledReader({"--drain-grace-ms", "500"}, std::chrono::milliseconds(0));
}

// Keepalive pings exchanged on a connection whose stream is stalled must
// not hold the drain up (a GOAWAY ping paced behind them did, once).
TEST(Server, DrainsPromptlyAfterKeepalivePings)
{
    DrainWithStalledReader({"--drain-grace-ms", "500", "--keepalive-ms", "400"},
                           std::chrono::milliseconds(2000));
}

TEST(Server, KeepaliveFlagIsValidated)
{
    for (const char *bad : {"-1", "abc", "50", "99"}) {
        std::string err;
        std::string state = wstest::MakeTempDir("ka");
        int st = wstest::RunServerToExit(
            {"--listen", "127.0.0.1:0", "--state-dir", state, "--keepalive-ms", bad}, &err);
        ASSERT_TRUE(WIFEXITED(st)) << bad;
        EXPECT_EQ(WEXITSTATUS(st), 2) << bad;
        EXPECT_NE(err.find("invalid value"), std::string::npos) << err;
    }
}

// Whether process `pid` comes to hold open, within 30 s, a file in `dir`
// (named there, or an unnamed temporary file made in it) of at least
// `size` bytes.
bool WaitHoldsFileOfSize(pid_t pid, const std::string &dir, off_t size)
{
    char *canon = realpath(dir.c_str(), nullptr);
    if (!canon)
        return false;
    const std::string prefix = std::string(canon) + "/";
    free(canon);
    const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
         std::chrono::steady_clock::now() < until;
         std::this_thread::sleep_for(std::chrono::milliseconds(10))) {
        DIR *d = opendir(fds.c_str());
        if (!d)
            return false;
        bool found = false;
        while (struct dirent *de = readdir(d)) {
            std::string fd = fds + "/" + de->d_name;
            char target[4096];
            ssize_t n = readlink(fd.c_str(), target, sizeof(target));
            struct stat st;
            if (n > 0 && std::string(target, n).compare(0, prefix.size(), prefix) == 0 &&
                stat(fd.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= size)
                found = true;
        }
        closedir(d);
        if (found)
            return true;
    }
    return false;
}

// Killing the server in the middle of a streamed write leaves the old
// content (the new bytes never become visible).
TEST(Server, CrashMidWriteKeepsOldContent)
{
    std::string state = wstest::MakeTempDir("crash");
    Server srv(std::vector<std::string>({}), state);
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto w = wstest::Open(ws.get(), "local-bash");
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "doc.txt", "old content").ok());
    {
        ClientContext ctx;
        WriteFileResponse resp;
        auto wr = fs->WriteFile(&ctx, &resp);
        WriteFileRequest h;
        h.mutable_header()->set_workspace_id(w.id);
        h.mutable_header()->set_path("doc.txt");
        ASSERT_TRUE(wr->Write(h));
        WriteFileRequest d;
        d.set_data(std::string(1 << 20, 'N'));
        for (int i = 0; i < 4; i++)
            ASSERT_TRUE(wr->Write(d));
        // The kill lands once the server has taken every chunk in: its
        // temporary file in the workspace holds all of them.
        EXPECT_TRUE(WaitHoldsFileOfSize(srv.pid(), srv.workspace_dir(w.id), 4 << 20))
            << "the server never held the 4 MiB being written";
        srv.Kill();
        wr->WritesDone();
        EXPECT_FALSE(wr->Finish().ok());
    }
    std::string dir = srv.workspace_dir(w.id);
    EXPECT_EQ(wstest::ReadHostFile(dir + "/doc.txt"), "old content");
    // No partial temp file is left behind in the workspace.
    auto snap = wstest::Snapshot(dir);
    EXPECT_EQ(snap.size(), 1u);
    Server again(std::vector<std::string>({}), state);
    auto fs2 = again.fs();
    auto ws2 = again.workspaces();
    grpc::ClientContext rc;
    ResolveRequest rq;
    rq.mutable_ref()->set_token(w.token);
    ResolveResponse rr;
    ASSERT_TRUE(ws2->Resolve(&rc, rq, &rr).ok());
    std::string got;
    ASSERT_TRUE(wstest::Read(fs2.get(), w.id, "doc.txt", &got).ok());
    EXPECT_EQ(got, "old content");
}

} // namespace

namespace
{

long PeakRssKiB(pid_t pid)
{
    std::string status = wstest::ReadHostFile("/proc/" + std::to_string(pid) + "/status");
    auto pos = status.find("VmHWM:");
    return pos == std::string::npos ? -1 : std::stol(status.substr(pos + 6));
}

// Streaming 256 MiB in and out keeps the server's memory bounded: the
// flow-control window and the chunked handlers, not the file size, decide
// what it holds.
TEST(Server, StreamingLargeFileKeepsMemoryBounded)
{
    if (getenv("WORKSPACED_SANITIZED"))
        GTEST_SKIP() << "sanitizer builds hold freed memory in quarantine; the bound is asserted "
                        "by the regular build of this suite";
    Server srv(std::vector<std::string>{});
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto w = wstest::Open(ws.get(), "local-bash");
    const size_t size = 256u << 20;
    std::string data(size, '\0');
    for (size_t i = 0; i < size; i += 4096)
        data[i] = static_cast<char>(i >> 12);
    WriteFileResponse wr;
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "big.bin", data, &wr, false, "", 1 << 20).ok());
    EXPECT_EQ(wr.bytes_written(), size);
    std::string back;
    ASSERT_TRUE(wstest::Read(fs.get(), w.id, "big.bin", &back).ok());
    EXPECT_TRUE(back == data);
    long peak = PeakRssKiB(srv.pid());
    ASSERT_GT(peak, 0);
    EXPECT_LT(peak, 64 * 1024) << "server peak RSS " << peak << " KiB";
}

} // namespace

namespace
{

ListProvidersResponse Providers(Server &srv)
{
    auto p = srv.providers();
    ClientContext ctx;
    ListProvidersResponse resp;
    EXPECT_TRUE(p->ListProviders(&ctx, ListProvidersRequest(), &resp).ok());
    return resp;
}

grpc::Status OpenSandbox(Server &srv, OpenResponse *resp)
{
    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_local_sandbox();
    req.mutable_capabilities()->mutable_fs();
    ClientContext ctx;
    return ws->Open(&ctx, req, resp);
}

// No usable bubblewrap: local-sandbox is reported unavailable with the
// reason, and Open fails closed without creating anything.
TEST(Server, LocalSandboxFailsClosedWithoutBwrap)
{
    for (const char *bwrap : {"/nonexistent/bwrap", "/bin/false"}) {
        Server srv(std::vector<std::string>({}), "", {std::string("WORKSPACED_BWRAP=") + bwrap});
        auto resp = Providers(srv);
        EXPECT_FALSE(resp.providers(2).available()) << bwrap;
        EXPECT_NE(resp.providers(2).reason().find(strcmp(bwrap, "/bin/false") == 0
                                                      ? "cannot create a sandbox"
                                                      : "not installed"),
                  std::string::npos)
            << resp.providers(2).reason();
        EXPECT_TRUE(resp.providers(1).available());
        OpenResponse or_;
        auto s = OpenSandbox(srv, &or_);
        EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "WORKSPACE_FAILED") << bwrap;
        EXPECT_EQ(wstest::Decode(s).metadata["transient"], "false");
        EXPECT_TRUE(wstest::Snapshot(srv.state_dir() + "/workspaces").empty());
    }
}

// A ref never pins a backend: after a restart on a host whose bubblewrap
// stopped working, resuming a local-sandbox workspace fails closed, and
// works again once the backend is back.
TEST(Server, LocalSandboxResumeRedetectsBackend)
{
    std::string state = wstest::MakeTempDir("sbx");
    std::string id, token;
    {
        Server srv(std::vector<std::string>({}), state);
        OpenResponse resp;
        ASSERT_TRUE(OpenSandbox(srv, &resp).ok());
        id = resp.workspace().id();
        token = resp.workspace().ref().token();
        auto fs = srv.fs();
        ASSERT_TRUE(wstest::Write(fs.get(), id, "kept.txt", "still here").ok());
    }
    {
        Server srv(std::vector<std::string>({}), state, {"WORKSPACED_BWRAP=/bin/false"});
        auto ws = srv.workspaces();
        ClientContext ctx;
        ResolveRequest req;
        req.mutable_ref()->set_token(token);
        ResolveResponse rr;
        EXPECT_WS_ERROR(ws->Resolve(&ctx, req, &rr), StatusCode::FAILED_PRECONDITION,
                        "WORKSPACE_FAILED");
        auto fs = srv.fs();
        std::string got;
        EXPECT_WS_ERROR(wstest::Read(fs.get(), id, "kept.txt", &got),
                        StatusCode::FAILED_PRECONDITION, "WORKSPACE_FAILED");
    }
    Server srv(std::vector<std::string>({}), state);
    auto ws = srv.workspaces();
    ClientContext ctx;
    ResolveRequest req;
    req.mutable_ref()->set_token(token);
    ResolveResponse rr;
    ASSERT_TRUE(ws->Resolve(&ctx, req, &rr).ok());
    auto fs = srv.fs();
    std::string got;
    ASSERT_TRUE(wstest::Read(fs.get(), id, "kept.txt", &got).ok());
    EXPECT_EQ(got, "still here");
}

} // namespace
