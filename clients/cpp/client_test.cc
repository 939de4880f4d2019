// The C++ client end to end: every test talks to the real workspaced binary
// over a unix socket, except the TLS tests, whose point is TCP (and whose
// servers therefore authenticate callers). The only stand-in is the retry
// test's injected sleep, which makes backoff delays observable without
// waiting for them.

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <system_error>
#include <thread>

#include <gtest/gtest.h>

#include "workspaced.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "tests/testutil/process.h"

extern char **environ;

namespace
{

using namespace std::chrono_literals;
namespace pb = workspace::v1;

const std::vector<std::string> kAllowed = {"sh", "cat",  "echo", "sleep",
                                           "wc", "head", "true", "false"};

std::string TmpDir()
{
    const char *t = getenv("TEST_TMPDIR");
    std::string tmpl = std::string(t ? t : "/tmp") + "/wsdXXXXXX";
    // Searchable by others: workspace uids reach their directories under
    // the state directory made here.
    if (!mkdtemp(&tmpl[0]) || chmod(tmpl.c_str(), 0711) != 0)
        abort();
    return tmpl;
}

// Runs `argv` with stdout and stderr to a pipe; returns the exit status and
// the output.
int RunToExit(const std::vector<std::string> &args, std::string *output)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    std::vector<std::string> copy = args;
    std::vector<char *> argv;
    for (auto &a : copy)
        argv.push_back(&a[0]);
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_adddup2(&fa, p[1], 2);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (rc != 0) {
        close(p[0]);
        return -1;
    }
    char buf[4096];
    ssize_t n;
    while ((n = read(p[0], buf, sizeof(buf))) > 0)
        output->append(buf, static_cast<size_t>(n));
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

std::string ReadHostFile(const std::string &path)
{
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Spawns `args` with stdout to a pipe and stderr to `stderr_path`, and
// waits for a stdout line starting with `prefix`; returns the rest of that
// line. Aborts when the child does not get there: nothing can run without it.
std::string SpawnUntilLine(const std::vector<std::string> &args, const std::string &stderr_path,
                           const std::string &prefix, pid_t *pid)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        abort();
    std::vector<std::string> copy = args;
    std::vector<char *> argv;
    for (auto &a : copy)
        argv.push_back(&a[0]);
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    int rc = posix_spawn(pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (rc != 0) {
        fprintf(stderr, "spawn %s: %s\n", argv[0], strerror(rc));
        abort();
    }
    std::string line;
    if (!testutil::ReadLine(p[0], &line, 20000) || line.compare(0, prefix.size(), prefix) != 0) {
        fprintf(stderr, "%s did not start: '%s'; its stderr:\n%s\n", args[0].c_str(), line.c_str(),
                ReadHostFile(stderr_path).c_str());
        abort();
    }
    close(p[0]);
    return line.substr(prefix.size());
}

// A directory for unix sockets. A socket's path must fit in sun_path (108
// bytes), which Bazel's TEST_TMPDIR is too deep for, so it is a short one
// under /tmp; the Server that uses it removes it.
std::string SocketDir()
{
    char tmpl[] = "/tmp/wsd-sockXXXXXX";
    if (!mkdtemp(tmpl))
        abort();
    return tmpl;
}

// Where a test server listens: a unix socket unless the test is about TCP
// (TLS, tokens). The server refuses a TCP listener that does not
// authenticate its callers, so a TCP server needs --tokens-file or
// --tls-client-ca among its flags.
enum class Listen { Unix, Tcp };

// The real server, started once for the suite from the test's runfiles
// (the TLS and front tests start their own, with `extra` flags). It must
// exit 0 when it is stopped: the destructor fails the test (or, for the
// suite's server, the suite) otherwise.
class Server
{
  public:
    explicit Server(const std::vector<std::string> &extra = {}, Listen listen = Listen::Unix)
    {
        std::string dir = TmpDir();
        stderr_path_ = dir + "/server.stderr";
        std::string addr = "127.0.0.1:0";
        if (listen == Listen::Unix) {
            socket_dir_ = SocketDir();
            addr = "unix:" + socket_dir_ + "/ws.sock";
        }
        std::vector<std::string> args = {"server/workspaced", "--listen", addr, "--state-dir",
                                         dir + "/state"};
        // Every test server opens local-bash workspaces, which the default
        // policy leaves out.
        args.insert(args.end(), {"--policy-providers", "memory,local-bash,local-sandbox,docker"});
        args.insert(args.end(), extra.begin(), extra.end());
        address_ = SpawnUntilLine(args, stderr_path_, "workspaced listening on ", &pid_);
        state_dir_ = dir + "/state";
    }
    ~Server()
    {
        std::string problem = testutil::StopCleanly(pid_, "workspaced", stderr_path_);
        if (!problem.empty())
            ADD_FAILURE() << problem;
        if (!socket_dir_.empty()) {
            unlink((socket_dir_ + "/ws.sock").c_str());
            rmdir(socket_dir_.c_str());
        }
    }
    const std::string &address() const
    {
        return address_;
    }
    // A local-bash workspace's files are in state_dir()/workspaces/ID.
    const std::string &state_dir() const
    {
        return state_dir_;
    }

  private:
    pid_t pid_ = -1;
    std::string address_, stderr_path_, socket_dir_, state_dir_;
};

Server *server;

class ServerEnv : public ::testing::Environment
{
  public:
    void SetUp() override
    {
        server = new Server();
    }
    void TearDown() override
    {
        delete server;
        server = nullptr;
    }
};

const auto *const env = ::testing::AddGlobalTestEnvironment(new ServerEnv);

workspaced::Client Connect()
{
    return workspaced::Client::Connect(server->address());
}

workspaced::Workspace OpenShell(workspaced::Client &c)
{
    return c.Open(workspaced::LocalBash(), workspaced::Capabilities().WithFs().WithShell(kAllowed));
}

std::string RandomBytes(size_t n, unsigned seed)
{
    std::mt19937 rng(seed);
    std::string s(n, '\0');
    for (auto &ch : s)
        ch = static_cast<char>(rng());
    return s;
}

// Drains a process's pulled output into one string per stream.
void Drain(workspaced::Process &p, std::string *out, std::string *err = nullptr)
{
    while (auto o = p.Next()) {
        ASSERT_FALSE(o->gap) << "unexpected gap at " << o->offset;
        if (o->stream == workspaced::Stream::Stderr) {
            if (err)
                err->append(o->data);
        } else {
            out->append(o->data);
        }
    }
}

// ---------------------------------------------------------------- files

TEST(Files, WriteThenReadBack)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    auto w = ws.WriteFile("a.txt", "hello\n");
    EXPECT_EQ(w.bytes_written(), 6u);
    EXPECT_EQ(w.sha256().size(), 64u);
    EXPECT_EQ(ws.ReadFile("a.txt"), "hello\n");
    EXPECT_EQ(ws.ReadFile("a.txt", 1, 3), "ell");
    auto st = ws.Stat("a.txt");
    EXPECT_EQ(st.size(), 6u);
    EXPECT_EQ(st.type(), pb::FILE_TYPE_REGULAR);
    // An empty write commits too (finish on the header alone).
    ws.WriteFile("empty", "");
    EXPECT_EQ(ws.Stat("empty").size(), 0u);
}

TEST(Files, MultiMiBStreamIsByteExact)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    // Not a multiple of any chunk size, so the last partial chunk counts.
    const std::string data = RandomBytes((5 << 20) + 12345, 7);
    std::istringstream in(data);
    workspaced::WriteOptions opts;
    opts.chunk_size = 300 * 1024;
    auto w = ws.WriteFile("big.bin", in, opts);
    EXPECT_EQ(w.bytes_written(), data.size());

    // Streamed read: many chunks, none over the server's 256 KiB, in order.
    std::string got;
    int chunks = 0;
    auto info = ws.ReadFile("big.bin", [&](std::string_view chunk) {
        EXPECT_LE(chunk.size(), 256u * 1024);
        got.append(chunk.data(), chunk.size());
        chunks++;
    });
    EXPECT_EQ(info.size(), data.size());
    EXPECT_GT(chunks, 10);
    EXPECT_TRUE(got == data) << "streamed read differs";

    std::ostringstream out;
    ws.ReadFile("big.bin", out);
    EXPECT_TRUE(out.str() == data) << "ostream read differs";
}

TEST(Files, FailedStreamingWriteKeepsOldContent)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    ws.WriteFile("keep.txt", "old");
    int calls = 0;
    // The source dies after one chunk: the write must be cancelled, not
    // committed half-done by a half-close.
    EXPECT_THROW(ws.WriteFile("keep.txt",
                              [&](std::string *chunk) -> bool {
                                  if (calls++ == 0) {
                                      *chunk = std::string(100000, 'x');
                                      return true;
                                  }
                                  throw std::runtime_error("source failed");
                              }),
                 std::runtime_error);
    EXPECT_EQ(ws.ReadFile("keep.txt"), "old");
}

TEST(Files, Helpers)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    ws.MakeDir("src/lib", true);
    workspaced::WriteOptions parents;
    parents.create_parents = true;
    ws.WriteFile("src/lib/one.c", "int one;\nint two;\n", parents);
    ws.WriteFile("src/main.c", "int main;\n");

    auto ls = ws.ListDir("src", 2);
    std::vector<std::string> paths;
    for (const auto &e : ls.entries())
        paths.push_back(e.path());
    EXPECT_EQ(paths, (std::vector<std::string>{"src/lib", "src/lib/one.c", "src/main.c"}));

    auto g = ws.Glob("**/*.c");
    ASSERT_EQ(g.matches_size(), 2);
    EXPECT_EQ(g.matches(0).path(), "src/lib/one.c");

    auto matches = ws.Grep("int (one|main)");
    ASSERT_EQ(matches.size(), 2u);
    EXPECT_EQ(matches[0].path(), "src/lib/one.c");
    EXPECT_EQ(matches[0].line_number(), 1u);
    EXPECT_EQ(matches[0].line(), "int one;");

    auto e = ws.EditFile("src/main.c", "main", "start");
    EXPECT_EQ(e.replacements(), 1u);
    EXPECT_EQ(ws.ReadFile("src/main.c"), "int start;\n");
    EXPECT_THROW(ws.EditFile("src/main.c", "absent", "x"), workspaced::NoMatch);
    // if_match is checked against the current hash: a stale one conflicts.
    workspaced::WriteOptions stale;
    stale.if_match = std::string(64, '0');
    try {
        ws.WriteFile("src/main.c", "new", stale);
        FAIL() << "stale if_match accepted";
    } catch (const workspaced::Conflict &err) {
        EXPECT_EQ(err.metadata().at("actual_sha256"), e.sha256());
    }

    ws.Move("src/main.c", "src/start.c");
    EXPECT_THROW(ws.Stat("src/main.c"), workspaced::NoSuchFile);
    EXPECT_THROW(ws.Remove("src"), workspaced::NotEmpty);
    EXPECT_EQ(ws.Remove("src", true), 4u);
    EXPECT_THROW(ws.Stat("src"), workspaced::NoSuchFile);
}

// ---------------------------------------------------------------- exec

TEST(Exec, OutputArrivesBeforeExit)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    // The command cannot go past `read` before the test writes a line, so
    // holding output back until exit would leave Next() waiting for "a"
    // for ever (the test's deadline): no timing involved.
    workspaced::ExecOptions opts;
    opts.stdin_open = true;
    opts.tag = "held";
    auto p = ws.Exec({"sh", "-c", "echo a; read line; echo b"}, opts);
    EXPECT_FALSE(p.id().empty());
    EXPECT_GT(p.pid(), 0);
    auto first = p.Next();
    ASSERT_TRUE(first);
    EXPECT_EQ(first->data, "a\n");
    bool running = false;
    for (const auto &info : ws.Ps())
        if (info.tag() == "held")
            running = info.running();
    EXPECT_TRUE(running) << "the command ended before its stdin was written";
    // The line is all `read` needs: the command may end (and its stream
    // close for writing) as soon as it arrives, so nothing more is sent.
    ASSERT_TRUE(p.WriteStdin("go\n"));
    std::string rest;
    Drain(p, &rest);
    auto r = p.Wait();
    EXPECT_EQ(rest, "b\n");
    EXPECT_TRUE(r.success());
    EXPECT_EQ(r.exited.stdout().bytes_total(), 4u);
}

TEST(Exec, CallbackSeesBothStreams)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    std::mutex mu;
    std::string out, err;
    workspaced::ExecOptions opts;
    opts.on_output = [&](const workspaced::Output &o) {
        std::lock_guard<std::mutex> lock(mu);
        (o.stream == workspaced::Stream::Stderr ? err : out) += o.data;
    };
    auto p = ws.Exec({"sh", "-c", "echo to-out; echo to-err >&2; exit 3"}, opts);
    auto r = p.Wait();
    EXPECT_EQ(r.cause(), pb::EXIT_CAUSE_EXITED);
    EXPECT_EQ(r.exit_code(), 3);
    EXPECT_FALSE(r.success());
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(out, "to-out\n");
    EXPECT_EQ(err, "to-err\n");
    // The pull API yields nothing when a callback consumes the output.
    EXPECT_FALSE(p.Next());
}

TEST(Exec, StdinRoundTrip)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    workspaced::ExecOptions opts;
    opts.stdin_open = true;
    auto p = ws.Exec({"cat"}, opts);
    ASSERT_TRUE(p.WriteStdin("ping\n"));
    // cat echoes while stdin is still open: a true round trip.
    auto echoed = p.Next();
    ASSERT_TRUE(echoed);
    EXPECT_EQ(echoed->data, "ping\n");
    ASSERT_TRUE(p.WriteStdin("pong\n"));
    ASSERT_TRUE(p.CloseStdin());
    std::string rest;
    Drain(p, &rest);
    auto r = p.Wait();
    EXPECT_EQ(rest, "pong\n");
    EXPECT_TRUE(r.success());
    EXPECT_EQ(r.exited.stdout().bytes_total(), 10u);
}

TEST(Exec, CancelEndsWithCauseCancelled)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    auto p = ws.Exec({"sleep", "30"});
    auto t0 = std::chrono::steady_clock::now();
    p.Cancel();
    auto r = p.Wait();
    EXPECT_EQ(r.cause(), pb::EXIT_CAUSE_CANCELLED);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 15s);
}

TEST(Exec, SignalEndsWithCauseSignaled)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    auto p = ws.Exec({"sleep", "30"});
    ASSERT_TRUE(p.Signal(SIGTERM));
    auto r = p.Wait();
    EXPECT_EQ(r.cause(), pb::EXIT_CAUSE_SIGNALED);
    EXPECT_EQ(r.signal(), SIGTERM);
}

TEST(Exec, TimeoutEndsWithCauseTimeout)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    workspaced::ExecOptions opts;
    opts.timeout = 300ms;
    auto p = ws.Exec({"sleep", "30"}, opts);
    auto r = p.Wait();
    EXPECT_EQ(r.cause(), pb::EXIT_CAUSE_TIMEOUT);
    EXPECT_LT(r.exited.wall_time_ms(), 10000u);

    auto run = ws.Run({"sleep", "30"}, opts);
    EXPECT_EQ(run.result.cause(), pb::EXIT_CAUSE_TIMEOUT);
}

TEST(Exec, RunCollectsOutputAndStdin)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    auto r = ws.Run({"sh", "-c", "echo out; echo err >&2; exit 2"});
    EXPECT_EQ(r.out, "out\n");
    EXPECT_EQ(r.err, "err\n");
    EXPECT_EQ(r.result.exit_code(), 2);
    EXPECT_FALSE(r.process_id.empty());

    auto cat = ws.Run({"wc", "-c"}, {}, "twelve bytes");
    EXPECT_EQ(cat.out.substr(0, 2), "12");
    // A command string is tokenized by the server's guard, not a shell.
    auto s = ws.Run("echo hello world");
    EXPECT_EQ(s.out, "hello world\n");
}

TEST(Exec, AttachByTagReplays)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    workspaced::ExecOptions opts;
    opts.tag = "replay-me";
    auto p = ws.Exec({"sh", "-c", "echo one; echo two"}, opts);
    EXPECT_EQ(p.tag(), "replay-me");
    std::string id = p.id();
    ASSERT_TRUE(p.Wait().success());

    auto a = ws.Attach("replay-me");
    EXPECT_EQ(a.id(), id);
    std::string all;
    Drain(a, &all);
    EXPECT_EQ(all, "one\ntwo\n");
    EXPECT_TRUE(a.Wait().success());
    // Read-only: an attached handle has no stdin.
    EXPECT_FALSE(a.WriteStdin("x"));

    // From an offset, and by id.
    auto b = ws.Attach(id, 4);
    std::string tail;
    Drain(b, &tail);
    EXPECT_EQ(tail, "two\n");

    bool listed = false;
    for (const auto &info : ws.Ps())
        if (info.id() == id) {
            listed = true;
            EXPECT_EQ(info.tag(), "replay-me");
            EXPECT_FALSE(info.running());
        }
    EXPECT_TRUE(listed);
}

TEST(Exec, AttachSurfacesGaps)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    workspaced::ExecOptions opts;
    opts.tag = "gappy";
    // A small replay ring and more output than it holds: an Attach from 0
    // must report the lost head as a gap, not skip it silently.
    opts.max_output_bytes = 4096;
    auto p = ws.Exec({"head", "-c", "100000", "/dev/zero"}, opts);
    ASSERT_TRUE(p.Wait().success());
    auto a = ws.Attach("gappy");
    uint64_t dropped = 0, data = 0;
    bool gap_first = false;
    int n = 0;
    while (auto o = a.Next()) {
        if (n++ == 0)
            gap_first = o->gap;
        if (o->gap)
            dropped += o->bytes_dropped;
        else
            data += o->data.size();
    }
    EXPECT_TRUE(gap_first);
    EXPECT_GT(dropped, 0u);
    EXPECT_EQ(dropped + data, 100000u);
}

TEST(Exec, KillByTag)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    workspaced::ExecOptions opts;
    opts.tag = "victim";
    auto p = ws.Exec({"sleep", "30"}, opts);
    ws.Kill("victim");
    auto r = p.Wait();
    EXPECT_EQ(r.cause(), pb::EXIT_CAUSE_SIGNALED);
    EXPECT_EQ(r.signal(), SIGKILL);
    EXPECT_THROW(ws.Kill("nobody"), workspaced::NoSuchProcess);
}

// ---------------------------------------------------------------- errors

TEST(Errors, TypedFromTheServer)
{
    auto c = Connect();
    auto ws = OpenShell(c);

    EXPECT_THROW(ws.ReadFile("../x"), workspaced::PathEscape);
    EXPECT_THROW(ws.ReadFile("missing"), workspaced::NoSuchFile);
    EXPECT_THROW(ws.Exec({"ls"}), workspaced::CommandNotAllowed);
    try {
        ws.Run({"ls", "-l"});
        FAIL() << "ls allowed";
    } catch (const workspaced::CommandNotAllowed &e) {
        EXPECT_EQ(e.code(), grpc::StatusCode::PERMISSION_DENIED);
        EXPECT_EQ(e.reason(), "COMMAND_NOT_ALLOWED");
        EXPECT_EQ(e.metadata().at("token"), "ls");
        EXPECT_FALSE(e.transient());
    }
    // Every typed error is also catchable as the base type.
    try {
        ws.Stat("/etc/passwd");
        FAIL() << "absolute path accepted";
    } catch (const workspaced::Error &e) {
        EXPECT_EQ(e.reason(), "PATH_ESCAPE");
        EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT);
    }
}

TEST(Errors, WriteRefusals)
{
    auto c = Connect();
    auto ws = c.Open(workspaced::LocalBash(), workspaced::Capabilities().WithFs(10));
    EXPECT_THROW(ws.WriteFile("../x", "data"), workspaced::PathEscape);
    ws.WriteFile("capped", "0123456789");
    try {
        ws.WriteFile("capped", std::string(11, 'x'));
        FAIL() << "write over the size cap accepted";
    } catch (const workspaced::SizeCap &e) {
        EXPECT_EQ(e.code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    }
    // Refused writes leave the old content.
    EXPECT_EQ(ws.ReadFile("capped"), "0123456789");
    workspaced::WriteOptions absent;
    absent.if_absent = true;
    EXPECT_THROW(ws.WriteFile("capped", "y", absent), workspaced::Exists);
}

TEST(Errors, CapabilityMissing)
{
    auto c = Connect();
    try {
        c.Open(workspaced::Memory(), workspaced::Capabilities().WithFs().WithShell({"sh"}));
        FAIL() << "memory workspace with shell opened";
    } catch (const workspaced::CapabilityMissing &e) {
        EXPECT_EQ(e.code(), grpc::StatusCode::FAILED_PRECONDITION);
        EXPECT_EQ(e.metadata().at("capability"), "shell");
    }
    // Using an undeclared capability fails the same way.
    auto ws = c.Open(workspaced::Memory());
    EXPECT_THROW(ws.Run({"true"}), workspaced::CapabilityMissing);
}

// The operator's policy and the server's provider switch: a later
// --policy-providers replaces the suite's, so local-bash is left out.
TEST(Errors, PolicyDeniedAndProviderDisabled)
{
    Server srv(
        {"--policy-providers", "memory,local-sandbox,docker", "--providers", "memory,local-bash"});
    auto c = workspaced::Client::Connect(srv.address());
    try {
        c.Open(workspaced::LocalBash(), workspaced::Capabilities().WithFs().WithShell({"sh"}));
        FAIL() << "local-bash opened outside the policy";
    } catch (const workspaced::PolicyDenied &e) {
        EXPECT_EQ(e.code(), grpc::StatusCode::PERMISSION_DENIED);
        EXPECT_EQ(e.reason(), "POLICY");
        EXPECT_EQ(e.metadata().at("rule"), "providers");
        EXPECT_EQ(e.metadata().at("provider"), "local-bash");
    }
    try {
        c.Open(workspaced::LocalSandbox());
        FAIL() << "a provider the server does not enable opened";
    } catch (const workspaced::ProviderDisabled &e) {
        EXPECT_EQ(e.code(), grpc::StatusCode::FAILED_PRECONDITION);
        EXPECT_EQ(e.metadata().at("provider"), "local-sandbox");
    }
}

TEST(Errors, BadRefAndEvicted)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    pb::WorkspaceRef ref = ws.ref();
    EXPECT_EQ(c.Resolve(ref).Release().token(), ref.token());

    pb::WorkspaceRef tampered = ref;
    std::string &tok = *tampered.mutable_token();
    tok[tok.size() / 2] ^= 1;
    EXPECT_THROW(c.Resolve(tampered), workspaced::BadRef);

    ws.Close();
    EXPECT_THROW(c.Resolve(ref), workspaced::WorkspaceEvicted);
    EXPECT_THROW(ws.ReadFile("a"), workspaced::NoSuchWorkspace);
    // The streaming calls decode their trailers the same way.
    EXPECT_THROW(ws.WriteFile("a", "x"), workspaced::NoSuchWorkspace);
    EXPECT_THROW(ws.Exec({"true"}), workspaced::NoSuchWorkspace);
}

// Decoding is exercised on statuses built the way the server builds them,
// for the cases a live server cannot be made to produce on demand.
grpc::Status MakeStatus(grpc::StatusCode code, const std::string &domain, const std::string &reason,
                        std::map<std::string, std::string> md = {})
{
    google::rpc::ErrorInfo info;
    info.set_domain(domain);
    info.set_reason(reason);
    for (const auto &kv : md)
        (*info.mutable_metadata())[kv.first] = kv.second;
    google::rpc::Status st;
    st.set_code(code);
    st.set_message("msg");
    st.add_details()->PackFrom(info);
    return grpc::Status(code, "msg", st.SerializeAsString());
}

TEST(Errors, Decoding)
{
    try {
        workspaced::ThrowStatus(MakeStatus(grpc::StatusCode::UNAVAILABLE, "workspaced",
                                           "WORKSPACE_FAILED", {{"transient", "true"}}));
    } catch (const workspaced::WorkspaceFailed &e) {
        EXPECT_TRUE(e.transient());
        EXPECT_EQ(e.message(), "msg");
    }
    try {
        workspaced::ThrowStatus(MakeStatus(grpc::StatusCode::FAILED_PRECONDITION, "workspaced",
                                           "WORKSPACE_FAILED", {{"transient", "false"}}));
    } catch (const workspaced::WorkspaceFailed &e) {
        EXPECT_FALSE(e.transient());
    }
    // An unknown reason: the base type, reason kept.
    try {
        workspaced::ThrowStatus(
            MakeStatus(grpc::StatusCode::INTERNAL, "workspaced", "SOMETHING_NEW"));
    } catch (const workspaced::Error &e) {
        EXPECT_EQ(typeid(e), typeid(workspaced::Error));
        EXPECT_EQ(e.reason(), "SOMETHING_NEW");
    }
    // A reason from a foreign domain is not trusted.
    try {
        workspaced::ThrowStatus(
            MakeStatus(grpc::StatusCode::INVALID_ARGUMENT, "elsewhere", "PATH_ESCAPE"));
    } catch (const workspaced::Error &e) {
        EXPECT_EQ(typeid(e), typeid(workspaced::Error));
        EXPECT_EQ(e.reason(), "");
    }
    // No details: the base type with the gRPC code; UNAVAILABLE is transient.
    try {
        workspaced::ThrowStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down"));
    } catch (const workspaced::Error &e) {
        EXPECT_EQ(typeid(e), typeid(workspaced::Error));
        EXPECT_EQ(e.code(), grpc::StatusCode::UNAVAILABLE);
        EXPECT_TRUE(e.transient());
    }
    EXPECT_THROW(workspaced::ThrowStatus(MakeStatus(grpc::StatusCode::UNAUTHENTICATED, "workspaced",
                                                    "UNAUTHENTICATED")),
                 workspaced::Unauthenticated);
    EXPECT_NO_THROW(workspaced::ThrowIfError(grpc::Status::OK));
}

// ---------------------------------------------------------------- wire

// n as a protobuf base-128 varint.
std::string Varint(uint64_t n)
{
    std::string out;
    for (; n >= 0x80; n >>= 7)
        out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    out.push_back(static_cast<char>(n));
    return out;
}

// One field on the wire: its tag, then (for length-delimited fields) the
// length, then the payload.
std::string Field(uint64_t number, int wire_type, const std::string &payload)
{
    std::string out = Varint(number << 3 | static_cast<uint64_t>(wire_type));
    if (wire_type == 2)
        out += Varint(payload.size());
    return out + payload;
}

// The fields for per-workspace users, runtimes, caps and truncation
// reasons, at the numbers the protos give them: what the builders make is
// checked byte for byte, what the client reads is decoded from hand-made
// bytes, so a renumbered field or a builder that drops one fails here.
TEST(Wire, NewFieldsAtTheirNumbers)
{
    EXPECT_EQ(workspaced::Docker("busybox", "runsc").SerializeAsString(),
              Field(1, 2, "busybox") + Field(8, 2, "runsc"));
    EXPECT_EQ(workspaced::Docker("busybox").SerializeAsString(), Field(1, 2, "busybox"));

    auto bash = workspaced::LocalBash();
    bash.set_pids_limit(64);
    bash.set_memory_mb(512);
    bash.set_cpus(1.5);
    // A double goes on the wire as its 8 bytes, little-endian.
    double cpus = 1.5;
    uint64_t bits;
    memcpy(&bits, &cpus, sizeof(bits));
    std::string cpus_le;
    for (int i = 0; i < 8; i++)
        cpus_le.push_back(static_cast<char>(bits >> (8 * i)));
    EXPECT_EQ(bash.SerializeAsString(),
              Field(1, 0, Varint(64)) + Field(2, 0, Varint(512)) + Field(3, 1, cpus_le));

    pb::DescribeResponse d;
    ASSERT_TRUE(d.ParseFromString(Field(17, 0, Varint(524289)) + Field(18, 0, Varint(524290)) +
                                  Field(15, 2, Field(23, 2, "runsc"))));
    EXPECT_EQ(d.uid(), 524289u);
    EXPECT_EQ(d.gid(), 524290u);
    EXPECT_EQ(d.container().runtime(), "runsc");

    pb::ProviderInfo p;
    ASSERT_TRUE(p.ParseFromString(
        Field(1, 2, "docker") + Field(7, 2, Field(1, 2, "runc") + Field(2, 0, Varint(1))) +
        Field(7, 2, Field(1, 2, "runsc") + Field(3, 2, "not registered")) +
        Field(8, 2, "cgroup-v2")));
    ASSERT_EQ(p.runtimes_size(), 2);
    EXPECT_EQ(p.runtimes(0).name(), "runc");
    EXPECT_TRUE(p.runtimes(0).usable());
    EXPECT_EQ(p.runtimes(1).name(), "runsc");
    EXPECT_FALSE(p.runtimes(1).usable());
    EXPECT_EQ(p.runtimes(1).reason(), "not registered");
    EXPECT_EQ(p.limits_mechanism(), "cgroup-v2");

    std::string cut = Field(2, 0, Varint(1)) + Field(3, 2, "entries_budget");
    pb::ListDirResponse l;
    pb::GlobResponse g;
    ASSERT_TRUE(l.ParseFromString(cut));
    ASSERT_TRUE(g.ParseFromString(cut));
    EXPECT_EQ(l.truncated_reason(), "entries_budget");
    EXPECT_EQ(g.truncated_reason(), "entries_budget");
    pb::GrepSummary sum;
    ASSERT_TRUE(sum.ParseFromString(Field(5, 0, Varint(1)) + Field(6, 2, "time_budget")));
    EXPECT_EQ(sum.truncated_reason(), "time_budget");
}

// ---------------------------------------------------------------- retry

workspaced::RetryPolicy Recording(std::vector<int64_t> *sleeps)
{
    workspaced::RetryPolicy p;
    p.sleep = [sleeps](std::chrono::milliseconds d) { sleeps->push_back(d.count()); };
    p.random = [] { return 0.5; };
    return p;
}

TEST(Retry, BackoffGrowsWithJitterAndCap)
{
    std::vector<int64_t> sleeps;
    auto p = Recording(&sleeps);
    p.max_attempts = 6;
    p.max_backoff = 1000ms;
    int calls = 0;
    auto transient = MakeStatus(grpc::StatusCode::UNAVAILABLE, "workspaced", "WORKSPACE_FAILED",
                                {{"transient", "true"}});
    int v = p.Do([&] {
        if (++calls < 5)
            workspaced::ThrowStatus(transient);
        return 42;
    });
    EXPECT_EQ(v, 42);
    EXPECT_EQ(calls, 5);
    // 200, 400, 800, then capped at 1000; each less 10 % (jitter 0.2 * 0.5).
    EXPECT_EQ(sleeps, (std::vector<int64_t>{180, 360, 720, 900}));

    // Attempts run out: the last error comes back after max_attempts - 1
    // sleeps.
    sleeps.clear();
    calls = 0;
    p.max_attempts = 3;
    EXPECT_THROW(p.Do([&]() -> int {
        calls++;
        workspaced::ThrowStatus(transient);
    }),
                 workspaced::WorkspaceFailed);
    EXPECT_EQ(calls, 3);
    EXPECT_EQ(sleeps.size(), 2u);
}

TEST(Retry, NonTransientIsNotRetried)
{
    std::vector<int64_t> sleeps;
    auto p = Recording(&sleeps);
    int calls = 0;
    EXPECT_THROW(p.Do([&]() -> int {
        calls++;
        workspaced::ThrowStatus(MakeStatus(grpc::StatusCode::FAILED_PRECONDITION, "workspaced",
                                           "WORKSPACE_FAILED", {{"transient", "false"}}));
    }),
                 workspaced::WorkspaceFailed);
    EXPECT_EQ(calls, 1);
    EXPECT_TRUE(sleeps.empty());

    // max_attempts = 1 disables retries even for transient errors.
    auto none = workspaced::RetryPolicy::None();
    calls = 0;
    EXPECT_THROW(none.Do([&]() -> int {
        calls++;
        workspaced::ThrowStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down"));
    }),
                 workspaced::Error);
    EXPECT_EQ(calls, 1);
}

TEST(Retry, OpenRetriesAnUnreachableServer)
{
    // A port nobody listens on: every attempt fails UNAVAILABLE. The
    // socket stays bound (never listening) until the test ends, so no
    // other process can start listening there meanwhile; a connection to
    // it is refused.
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    struct sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    ASSERT_EQ(bind(fd, reinterpret_cast<struct sockaddr *>(&sa), sizeof(sa)), 0);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<struct sockaddr *>(&sa), &len), 0);
    struct CloseAtEnd {
        int fd;
        ~CloseAtEnd()
        {
            close(fd);
        }
    } hold{fd};
    auto c = workspaced::Client::Connect("127.0.0.1:" + std::to_string(ntohs(sa.sin_port)));

    std::vector<int64_t> sleeps;
    auto p = Recording(&sleeps);
    try {
        c.Open(workspaced::LocalBash(), workspaced::Capabilities().WithFs(), p);
        FAIL() << "opened on a dead port";
    } catch (const workspaced::Error &e) {
        EXPECT_EQ(e.code(), grpc::StatusCode::UNAVAILABLE);
    }
    EXPECT_EQ(sleeps, (std::vector<int64_t>{180, 360, 720}));

    // The real server on the same code path opens at the first attempt.
    sleeps.clear();
    auto live = Connect();
    auto ws = live.Open(workspaced::LocalBash(), workspaced::Capabilities().WithFs(), p);
    EXPECT_TRUE(sleeps.empty());
}

namespace
{

// ---------------------------------------------------------------- lifecycle

bool Listed(workspaced::Client &c, const std::string &id, pb::WorkspaceState *state)
{
    for (const auto &s : c.List())
        if (s.id() == id) {
            *state = s.state();
            return true;
        }
    return false;
}

TEST(Lifecycle, CloseIsIdempotent)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    EXPECT_EQ(ws.Describe().state(), pb::STATE_OPEN);
    EXPECT_FALSE(ws.Close());
    EXPECT_TRUE(ws.Close());
    EXPECT_THROW(ws.Describe(), workspaced::NoSuchWorkspace);
}

TEST(Lifecycle, DestructorCloses)
{
    auto c = Connect();
    pb::WorkspaceRef ref;
    std::string id;
    {
        auto ws = OpenShell(c);
        ref = ws.ref();
        id = ws.id();
        pb::WorkspaceState state;
        ASSERT_TRUE(Listed(c, id, &state));
        EXPECT_EQ(state, pb::STATE_OPEN);
    }
    pb::WorkspaceState state = pb::STATE_UNSPECIFIED;
    EXPECT_TRUE(!Listed(c, id, &state) || state == pb::STATE_CLOSED) << state;
    EXPECT_THROW(c.Resolve(ref), workspaced::WorkspaceEvicted);
}

TEST(Lifecycle, MoveTransfersOwnershipAndReleaseKeepsOpen)
{
    auto c = Connect();
    std::vector<workspaced::Workspace> kept;
    std::string id;
    {
        auto ws = OpenShell(c);
        id = ws.id();
        kept.push_back(std::move(ws));
        // The moved-from handle's destructor must not close it.
    }
    EXPECT_EQ(kept[0].Describe().state(), pb::STATE_OPEN);

    pb::WorkspaceRef ref = kept[0].Release();
    kept.clear();
    // Released: still open, and Resolve hands back an owning handle.
    auto again = c.Resolve(ref);
    EXPECT_EQ(again.id(), id);
    EXPECT_EQ(again.Describe().state(), pb::STATE_OPEN);
}

TEST(Client, ProvidersAndList)
{
    auto c = Connect();
    auto providers = c.Providers();
    ASSERT_EQ(providers.size(), 4u);
    EXPECT_EQ(providers[0].kind(), "memory");
    EXPECT_EQ(providers[1].kind(), "local-bash");
    EXPECT_TRUE(providers[1].available());
    auto ws = c.Open(workspaced::Memory());
    EXPECT_EQ(ws.provider(), "memory");
    pb::WorkspaceState state;
    EXPECT_TRUE(Listed(c, ws.id(), &state));
}

TEST(Client, AddressFromEnvironment)
{
    setenv("WORKSPACED_ADDR", server->address().c_str(), 1);
    auto c = workspaced::Client::Connect();
    unsetenv("WORKSPACED_ADDR");
    EXPECT_EQ(c.address(), server->address());
    EXPECT_EQ(c.Providers().size(), 4u);
}

// The suite's server listens on a unix socket: the address it printed, and
// the same path in gRPC's URI spelling, both reach it. A path where nothing
// listens fails like a dead port: UNAVAILABLE, transient.
TEST(Client, UnixSocketAddress)
{
    const std::string &addr = server->address();
    ASSERT_EQ(addr.compare(0, 6, "unix:/"), 0) << addr;
    for (const std::string &a : {addr, "unix://" + addr.substr(5)}) {
        SCOPED_TRACE(a);
        auto c = workspaced::Client::Connect(a);
        EXPECT_EQ(c.address(), a);
        auto ws = OpenShell(c);
        EXPECT_EQ(ws.Run({"echo", "over", "unix"}).out, "over unix\n");
        EXPECT_FALSE(ws.Close());
    }

    std::string dir = SocketDir();
    auto dead = workspaced::Client::Connect("unix:" + dir + "/none.sock");
    try {
        dead.List();
        ADD_FAILURE() << "listed through a socket nobody listens on";
    } catch (const workspaced::Error &e) {
        EXPECT_EQ(e.code(), grpc::StatusCode::UNAVAILABLE) << e.what();
        EXPECT_TRUE(e.transient()) << e.what();
        EXPECT_NE(std::string(e.what()).find(dir + "/none.sock"), std::string::npos) << e.what();
    }
    rmdir(dir.c_str());
}

// No address and no WORKSPACED_ADDR: the server's default listener. The
// variable comes before the default, an explicit address before both.
TEST(Client, DefaultAddressIsTheServersUnixSocket)
{
    const char *was = getenv("WORKSPACED_ADDR");
    const std::string saved = was ? was : "";
    unsetenv("WORKSPACED_ADDR");
    EXPECT_EQ(workspaced::Client::Connect().address(), "unix:/run/workspaced/workspaced.sock");
    setenv("WORKSPACED_ADDR", "unix:/elsewhere/ws.sock", 1);
    EXPECT_EQ(workspaced::Client::Connect().address(), "unix:/elsewhere/ws.sock");
    EXPECT_EQ(workspaced::Client::Connect(server->address()).address(), server->address());
    if (was)
        setenv("WORKSPACED_ADDR", saved.c_str(), 1);
    else
        unsetenv("WORKSPACED_ADDR");
}

// ---------------------------------------------------------------- example

// The example runs commands only in local-sandbox, and keeps to files in a
// memory workspace when the server cannot offer it: never sh on local-bash.
TEST(Example, AgentLoopRuns)
{
    bool sandbox = false;
    auto c = Connect();
    for (const auto &p : c.Providers())
        if (p.kind() == "local-sandbox")
            sandbox = p.available();
    std::string out;
    setenv("AGENT_API_TOKEN", "abcdefgh", 1);
    int status = RunToExit({"clients/cpp/agent_loop", server->address()}, &out);
    unsetenv("AGENT_API_TOKEN");
    EXPECT_NE(out.find("labelled app=agent-loop: 1 workspace(s), idle timeout 120 s\n"),
              std::string::npos)
        << out;
    ASSERT_TRUE(WIFEXITED(status)) << out;
    EXPECT_EQ(WEXITSTATUS(status), 0) << out;
    EXPECT_NE(out.find(std::string("workspaced C++ client ") + workspaced::kVersion + "\n"),
              std::string::npos)
        << out;
    EXPECT_EQ(out.find("local-bash"), std::string::npos) << out;
    size_t closed = out.find("closed\n");
    ASSERT_NE(closed, std::string::npos) << out;
    if (!sandbox) {
        EXPECT_NE(out.find(" on memory\n"), std::string::npos) << out;
        size_t files = out.find("files only\nwrite tests\nship it\n");
        ASSERT_NE(files, std::string::npos) << out;
        EXPECT_LT(files, closed);
        EXPECT_EQ(out.find("exit "), std::string::npos) << out;
        return;
    }
    EXPECT_NE(out.find(" on local-sandbox\n"), std::string::npos) << out;
    // The command's output, streamed, then the file it wrote, then close.
    size_t streamed = out.find("write tests\nship it\ntoken: 8 bytes\n");
    size_t exit_line = out.find("exit 0 after ");
    size_t lines = out.find("lines: 2\n");
    ASSERT_NE(streamed, std::string::npos) << out;
    ASSERT_NE(exit_line, std::string::npos) << out;
    ASSERT_NE(lines, std::string::npos) << out;
    EXPECT_LT(streamed, exit_line);
    EXPECT_LT(exit_line, lines);
    EXPECT_LT(lines, closed);
}

// ---------------------------------------------------------------- TLS

// The fixture shared by the clients' suites makes the certificates and the
// tokens file; its tokens are fixed.
const char *const kAliceToken = "tok-alice-0123456789";
const char *const kBobToken = "tok-bob-9876543210";

std::string MakePki()
{
    std::string dir = TmpDir();
    std::string out;
    int status = RunToExit({"clients/testdata/pki.sh", dir}, &out);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "pki.sh: %s\n", out.c_str());
        abort();
    }
    return dir;
}

std::vector<std::string> TlsServerFlags(const std::string &pki, bool mutual)
{
    std::vector<std::string> f = {"--tokens-file",     pki + "/tokens", "--tls-cert",
                                  pki + "/server.pem", "--tls-key",     pki + "/server.key"};
    if (mutual) {
        f.push_back("--tls-client-ca");
        f.push_back(pki + "/ca.pem");
    }
    return f;
}

// A client with the CA file `ca`, client certificate `client` ("": none),
// `token` ("": none) and server name ("": the host).
workspaced::Client DialTls(const Server &srv, const std::string &pki, const std::string &ca,
                           const std::string &client, const std::string &token,
                           const std::string &server_name = "")
{
    workspaced::ConnectOptions o;
    o.token = token;
    o.tls = workspaced::TlsOptions::FromFiles(
        pki + "/" + ca, client.empty() ? "" : pki + "/" + client + ".pem",
        client.empty() ? "" : pki + "/" + client + ".key", server_name);
    return workspaced::Client::Connect(srv.address(), o);
}

// The connection never came up: UNAVAILABLE, no reason, transient.
template <typename F>::testing::AssertionResult Unavailable(F &&call)
{
    try {
        call();
    } catch (const workspaced::Error &e) {
        if (typeid(e) == typeid(workspaced::Error) && e.code() == grpc::StatusCode::UNAVAILABLE &&
            e.reason().empty() && e.transient())
            return ::testing::AssertionSuccess();
        return ::testing::AssertionFailure()
               << "code " << e.code() << " reason '" << e.reason() << "': " << e.what();
    }
    return ::testing::AssertionFailure() << "no error";
}

template <typename F>::testing::AssertionResult Unauthenticated(F &&call)
{
    try {
        call();
    } catch (const workspaced::Unauthenticated &e) {
        if (e.code() == grpc::StatusCode::UNAUTHENTICATED && e.message() == "unauthenticated" &&
            !e.transient())
            return ::testing::AssertionSuccess();
        return ::testing::AssertionFailure() << "code " << e.code() << ": " << e.what();
    } catch (const workspaced::Error &e) {
        return ::testing::AssertionFailure()
               << "not Unauthenticated: code " << e.code() << ": " << e.what();
    }
    return ::testing::AssertionFailure() << "no error";
}

TEST(Tls, TokenOverTlsRunsTheWholeCycle)
{
    std::string pki = MakePki();
    Server srv(TlsServerFlags(pki, false), Listen::Tcp);
    auto alice = DialTls(srv, pki, "ca.pem", "", kAliceToken);
    std::string id;
    {
        auto ws = OpenShell(alice);
        id = ws.id();
        ws.WriteFile("notes.txt", "over tls\n");
        auto r = ws.Run({"sh", "-c", "cat notes.txt; echo done"});
        EXPECT_EQ(r.out, "over tls\ndone\n");
        EXPECT_TRUE(r.result.success());
        EXPECT_EQ(ws.ReadFile("notes.txt"), "over tls\n");
        EXPECT_FALSE(ws.Close());
    }
    for (const auto &w : alice.List())
        EXPECT_NE(w.id(), id);

    // A wrong token and none: Unauthenticated, and Open does not retry it.
    for (const std::string tok : {"tok-mallory", "tok-alice-0123456789x", ""}) {
        SCOPED_TRACE(tok);
        auto c = DialTls(srv, pki, "ca.pem", "", tok);
        EXPECT_TRUE(Unauthenticated([&] { c.List(); }));
        std::vector<int64_t> sleeps;
        EXPECT_TRUE(Unauthenticated([&] { c.Open(workspaced::Memory(), {}, Recording(&sleeps)); }));
        EXPECT_TRUE(sleeps.empty());
    }

    // The wrong CA, a name the certificate does not carry, plaintext.
    auto wrong_ca = DialTls(srv, pki, "otherca.pem", "", kAliceToken);
    EXPECT_TRUE(Unavailable([&] { wrong_ca.List(); }));
    EXPECT_TRUE(Unavailable(
        [&] { wrong_ca.Open(workspaced::Memory(), {}, workspaced::RetryPolicy::None()); }));
    auto wrong_name = DialTls(srv, pki, "ca.pem", "", kAliceToken, "wrong.test");
    EXPECT_TRUE(Unavailable([&] { wrong_name.List(); }));
    workspaced::ConnectOptions plain;
    plain.token = kAliceToken;
    auto plaintext = workspaced::Client::Connect(srv.address(), plain);
    EXPECT_TRUE(Unavailable([&] { plaintext.List(); }));
    // The name the certificate does carry, instead of the address's host.
    EXPECT_EQ(DialTls(srv, pki, "ca.pem", "", kAliceToken, "workspaced.test").Providers().size(),
              4u);
}

TEST(Tls, FromFilesRefusesWhatItCannotRead)
{
    std::string pki = MakePki();
    try {
        workspaced::TlsOptions::FromFiles(pki + "/missing.pem");
        ADD_FAILURE() << "no error";
    } catch (const std::system_error &e) {
        EXPECT_EQ(e.code().value(), ENOENT);
        EXPECT_NE(std::string(e.what()).find(pki + "/missing.pem"), std::string::npos) << e.what();
    }
    // Not PEM, or a directory: never silently "no CA" (the system roots).
    EXPECT_THROW(workspaced::TlsOptions::FromFiles(pki + "/tokens"), std::invalid_argument);
    EXPECT_THROW(workspaced::TlsOptions::FromFiles(pki), std::exception);
    // Half a key pair.
    EXPECT_THROW(workspaced::TlsOptions::FromFiles(pki + "/ca.pem", pki + "/alice.pem"),
                 std::invalid_argument);
    auto o = workspaced::TlsOptions::FromFiles(pki + "/ca.pem", pki + "/alice.pem",
                                               pki + "/alice.key", "workspaced.test");
    EXPECT_NE(o.root_certs.find("-----BEGIN CERTIFICATE-----"), std::string::npos);
    EXPECT_NE(o.private_key.find("PRIVATE KEY-----"), std::string::npos);
    EXPECT_EQ(o.server_name_override, "workspaced.test");
}

TEST(Tls, MutualTlsNamesTheTenantByCertificate)
{
    std::string pki = MakePki();
    Server srv(TlsServerFlags(pki, true), Listen::Tcp);
    auto alice = DialTls(srv, pki, "ca.pem", "alice", "");
    auto ws = OpenShell(alice);
    ws.WriteFile("mine.txt", "alice's\n");
    EXPECT_EQ(ws.Run({"cat", "mine.txt"}).out, "alice's\n");

    // Bob's token decides over alice's certificate: nothing of alice's.
    auto bob = DialTls(srv, pki, "ca.pem", "alice", kBobToken);
    EXPECT_TRUE(bob.List().empty());
    EXPECT_THROW(bob.Resolve(ws.ref()), workspaced::NoSuchWorkspace);
    EXPECT_EQ(alice.Resolve(ws.ref()).ReadFile("mine.txt"), "alice's\n");

    // No client certificate, or one from a CA the server does not trust.
    auto none = DialTls(srv, pki, "ca.pem", "", "");
    EXPECT_TRUE(Unavailable([&] { none.List(); }));
    auto token_only = DialTls(srv, pki, "ca.pem", "", kAliceToken);
    EXPECT_TRUE(Unavailable([&] { token_only.List(); }));
    auto stranger = DialTls(srv, pki, "ca.pem", "stranger", "");
    EXPECT_TRUE(Unavailable([&] { stranger.List(); }));
}

// ---------------------------------------------------------------- front

// The shared fixture clients/testdata/front.sh: a real nginx before the
// given nodes, round robin for calls without x-workspace-node, naming them
// node-1, node-2, ... in order, and routing a call that names one there.
class Front
{
  public:
    explicit Front(const std::vector<std::string> &nodes)
    {
        std::string dir = TmpDir();
        stderr_path_ = dir + ".stderr";
        std::vector<std::string> args = {"clients/testdata/front.sh", dir};
        args.insert(args.end(), nodes.begin(), nodes.end());
        address_ = SpawnUntilLine(args, stderr_path_, "front listening on ", &pid_);
    }
    // front.sh exits with nginx's status: 0 only for a clean shutdown.
    ~Front()
    {
        std::string problem =
            testutil::StopCleanly(pid_, "the front (front.sh, nginx)", stderr_path_);
        if (!problem.empty())
            ADD_FAILURE() << problem;
    }
    const std::string &address() const
    {
        return address_;
    }

  private:
    pid_t pid_ = -1;
    std::string address_, stderr_path_;
};

// Two nodes of their own and a front before them. The nodes listen on unix
// sockets (nginx passes calls to them as to any upstream); the front's TCP
// port is what the client meets, as across a network.
struct TwoNodes {
    Server a, b;
    Front front{{a.address(), b.address()}};
};

workspaced::Workspace OpenOnFront(workspaced::Client &c)
{
    auto ws = OpenShell(c);
    EXPECT_TRUE(ws.node() == "node-1" || ws.node() == "node-2") << "node '" << ws.node() << "'";
    return ws;
}

// Drives every kind of call about ws: unary and streaming file calls, Run,
// an Exec stream fed on stdin, Attach, Kill, a cancelled Exec (whose Wait
// polls ListProcesses), Describe. Round robin sends every call that is not
// pinned to the other node half of the time, so a few rounds of this fail
// at once without pinning.
void UseWorkspace(workspaced::Workspace &ws, int round)
{
    SCOPED_TRACE("round " + std::to_string(round) + " on '" + ws.node() + "'");
    workspaced::WriteOptions wo;
    wo.create_parents = true;
    ws.WriteFile("dir/f.txt", "hello\n", wo);
    EXPECT_EQ(ws.ReadFile("dir/f.txt"), "hello\n");
    EXPECT_EQ(ws.Stat("dir/f.txt").size(), 6u);
    EXPECT_EQ(ws.ListDir("dir").entries_size(), 1);
    EXPECT_EQ(ws.Glob("**/*.txt").matches_size(), 1);
    EXPECT_EQ(ws.EditFile("dir/f.txt", "hello", "bye").replacements(), 1u);
    EXPECT_EQ(ws.Grep("bye").size(), 1u);
    ws.Move("dir/f.txt", "g.txt", true);
    ws.MakeDir("d2", true);
    EXPECT_EQ(ws.Remove("d2"), 1u);
    EXPECT_EQ(ws.Run({"cat", "g.txt"}).out, "bye\n");

    // Every stdin message follows the stream's headers to the node.
    workspaced::ExecOptions in;
    in.stdin_open = true;
    auto cat = ws.Exec({"cat"}, in);
    EXPECT_TRUE(cat.WriteStdin("one\n"));
    EXPECT_TRUE(cat.WriteStdin("two\n"));
    EXPECT_TRUE(cat.CloseStdin());
    std::string out;
    Drain(cat, &out);
    EXPECT_EQ(out, "one\ntwo\n");
    EXPECT_TRUE(cat.Wait().success());

    // A background process found again by tag, then killed by tag.
    workspaced::ExecOptions bg;
    bg.tag = "bg-" + std::to_string(round);
    bg.background = true;
    {
        auto p = ws.Exec({"sh", "-c", "echo up; sleep 30"}, bg);
    }
    auto a = ws.Attach(bg.tag);
    ws.Kill(bg.tag);
    EXPECT_EQ(a.Wait().cause(), pb::EXIT_CAUSE_SIGNALED);

    // Wait after Cancel reads the exit record from ListProcesses.
    auto s = ws.Exec({"sleep", "30"});
    s.Cancel();
    EXPECT_EQ(s.Wait().cause(), pb::EXIT_CAUSE_CANCELLED);

    EXPECT_EQ(ws.Describe().state(), pb::STATE_OPEN);
    EXPECT_EQ(ws.Remove("g.txt"), 1u);
}

// Through a front that balances two nodes, a workspace is pinned to the
// node that opened it, and every call about it gets there.
TEST(Front, PinsEveryCallToTheWorkspacesNode)
{
    TwoNodes nodes;
    auto c = workspaced::Client::Connect(nodes.front.address());
    // Round robin puts two Opens in a row on different nodes.
    auto a = OpenOnFront(c);
    auto b = OpenOnFront(c);
    EXPECT_NE(a.node(), b.node()) << "the front does not balance";
    for (int round = 0; round < 3; round++) {
        UseWorkspace(a, round);
        UseWorkspace(b, round);
    }
    EXPECT_FALSE(a.Close());
    EXPECT_FALSE(b.Close());
}

// The negative control: the same call without the header, made on the raw
// stub, lands on the node that does not hold the workspace at least once.
TEST(Front, UnpinnedCallMissesTheWorkspace)
{
    TwoNodes nodes;
    auto c = workspaced::Client::Connect(nodes.front.address());
    auto ws = OpenOnFront(c);
    auto stub = pb::FileSystem::NewStub(
        grpc::CreateChannel(nodes.front.address(), grpc::InsecureChannelCredentials()));
    int misses = 0;
    for (int i = 0; i < 4; i++) {
        grpc::ClientContext ctx;
        pb::StatRequest req;
        req.set_workspace_id(ws.id());
        req.set_path(".");
        pb::StatResponse resp;
        grpc::Status st = stub->Stat(&ctx, req, &resp);
        if (st.error_code() == grpc::StatusCode::NOT_FOUND)
            misses++;
        else
            EXPECT_TRUE(st.ok()) << st.error_message();
    }
    EXPECT_GT(misses, 0) << "4 unpinned calls all reached the workspace's node";
    EXPECT_NO_THROW(ws.Stat("."));
}

// A saved ref resolves on the node it names; a node the front does not
// know is a transient UNAVAILABLE.
TEST(Front, ResolveOnNode)
{
    TwoNodes nodes;
    auto c = workspaced::Client::Connect(nodes.front.address());
    auto ws = OpenOnFront(c);
    ws.WriteFile("kept", "kept\n");

    auto again = c.Resolve(ws.ref(), ws.node());
    EXPECT_EQ(again.id(), ws.id());
    EXPECT_EQ(again.node(), ws.node());
    for (int i = 0; i < 4; i++)
        EXPECT_EQ(again.ReadFile("kept"), "kept\n");
    again.Release();

    try {
        c.Resolve(ws.ref(), "node-9");
        ADD_FAILURE() << "Resolve on node-9 succeeded";
    } catch (const workspaced::Error &e) {
        EXPECT_EQ(e.code(), grpc::StatusCode::UNAVAILABLE) << e.what();
        EXPECT_TRUE(e.transient()) << e.what();
    }
}

// A retried Open is pinned to the node of the attempt that succeeded: the
// front's node-1 accepts connections (so the front's health check keeps it
// in rotation) and closes them at once, so the first attempt fails there
// (UNAVAILABLE, transient) and the retry lands on node-2.
TEST(Front, RetriedOpenPinsTheNodeThatAnswered)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    ASSERT_EQ(bind(fd, reinterpret_cast<struct sockaddr *>(&sa), sizeof(sa)), 0);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<struct sockaddr *>(&sa), &len), 0);
    ASSERT_EQ(listen(fd, 16), 0);
    // Ends when shutdown() makes accept() fail.
    std::thread closer([fd] {
        int conn;
        while ((conn = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC)) >= 0)
            close(conn);
    });
    {
        Server live;
        Front front({"127.0.0.1:" + std::to_string(ntohs(sa.sin_port)), live.address()});
        auto c = workspaced::Client::Connect(front.address());
        // The front itself may route around the closing node, so the
        // first Open is not always retried: try a few, each must be pinned
        // to node-2, and one at least must have been retried. (No ASSERT
        // here: the closer thread must be joined.)
        std::vector<workspaced::Workspace> opened;
        bool retried = false;
        for (int i = 0; i < 3 && !retried; i++) {
            std::vector<int64_t> sleeps;
            opened.push_back(c.Open(workspaced::LocalBash(),
                                    workspaced::Capabilities().WithFs().WithShell(kAllowed),
                                    Recording(&sleeps)));
            EXPECT_EQ(opened.back().node(), "node-2");
            retried = !sleeps.empty();
        }
        EXPECT_TRUE(retried) << "no Open was retried: the front never sent an attempt to node-1";
        UseWorkspace(opened.back(), 0);
        EXPECT_FALSE(opened.back().Close());
    }
    shutdown(fd, SHUT_RDWR);
    closer.join();
    close(fd);
}

// Connected to one node directly there is no header either way, and the
// client behaves as it always did.
TEST(Front, DirectHasNoNode)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    EXPECT_EQ(ws.node(), "");
    UseWorkspace(ws, 0);
    auto again = c.Resolve(ws.ref());
    EXPECT_EQ(again.node(), "");
    again.Release();
    EXPECT_FALSE(ws.Close());
}

} // namespace

// ---------------------------------------------------------------- lifecycle

// Watches a client's calls: counts them by method, keeps the request id of
// every Open, and loses the answers of the next `lose` successful Opens, as
// a connection that breaks after the server answered would.
struct CallWatch {
    std::mutex mu;
    std::map<std::string, int> calls;
    std::vector<std::string> request_ids;
    int lose = 0;
    std::vector<std::string> lost;

    int Count(const std::string &method)
    {
        std::lock_guard<std::mutex> lock(mu);
        return calls[method];
    }
};

class WatchInterceptor : public grpc::experimental::Interceptor
{
  public:
    WatchInterceptor(CallWatch *w, bool open) : w_(w), open_(open)
    {
    }
    void Intercept(grpc::experimental::InterceptorBatchMethods *m) override
    {
        using H = grpc::experimental::InterceptionHookPoints;
        if (open_ && m->QueryInterceptionHookPoint(H::PRE_SEND_MESSAGE)) {
            const auto *req = static_cast<const pb::OpenRequest *>(m->GetSendMessage());
            std::lock_guard<std::mutex> lock(w_->mu);
            w_->request_ids.push_back(req ? req->request_id() : "<not seen>");
        }
        if (open_ && m->QueryInterceptionHookPoint(H::POST_RECV_MESSAGE)) {
            const auto *resp = static_cast<const pb::OpenResponse *>(m->GetRecvMessage());
            if (resp)
                opened_ = resp->workspace().id();
        }
        if (open_ && m->QueryInterceptionHookPoint(H::POST_RECV_STATUS)) {
            grpc::Status *st = m->GetRecvStatus();
            std::lock_guard<std::mutex> lock(w_->mu);
            if (st->ok() && w_->lose > 0) {
                w_->lose--;
                w_->lost.push_back(opened_);
                *st = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the answer was lost on the way");
            }
        }
        m->Proceed();
    }

  private:
    CallWatch *w_;
    bool open_;
    std::string opened_;
};

class WatchFactory : public grpc::experimental::ClientInterceptorFactoryInterface
{
  public:
    explicit WatchFactory(CallWatch *w) : w_(w)
    {
    }
    grpc::experimental::Interceptor *
    CreateClientInterceptor(grpc::experimental::ClientRpcInfo *info) override
    {
        std::string method = info->method();
        method = method.substr(method.rfind('/') + 1);
        {
            std::lock_guard<std::mutex> lock(w_->mu);
            w_->calls[method]++;
        }
        return new WatchInterceptor(w_, method == "Open");
    }

  private:
    CallWatch *w_;
};

workspaced::Client ConnectWatched(CallWatch *w, bool eviction_retry = true,
                                  const Server *to = nullptr)
{
    workspaced::ConnectOptions o;
    o.eviction_retry = eviction_retry;
    o.interceptors = [w] {
        std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> v;
        v.push_back(std::make_unique<WatchFactory>(w));
        return v;
    };
    return workspaced::Client::Connect((to ? to : server)->address(), o);
}

// Fails the test unless the server reports `kind` usable: env and secrets
// are for commands in a sandbox (a command on the host, local-bash, gets
// only an allowlist of variables).
void RequireUsable(workspaced::Client &c, const std::string &kind)
{
    for (const auto &p : c.Providers())
        if (p.kind() == kind && p.available())
            return;
    FAIL() << "the server reports " << kind << " unusable here: the test needs it";
}

workspaced::Capabilities SandboxShell()
{
    return workspaced::Capabilities().WithFs().WithShell(kAllowed);
}

std::string RunOk(workspaced::Workspace &ws, const std::string &script,
                  std::vector<std::string> secrets = {})
{
    workspaced::ExecOptions o;
    o.secrets = std::move(secrets);
    auto r = ws.Run({"sh", "-c", script}, o);
    EXPECT_TRUE(r.result.success()) << script << ": " << r.result.exited.DebugString() << r.err;
    return r.out;
}

// Open's lifetime, labels, name, env and secrets come back on the handle
// and in Describe, and reach commands as the contract says: env always, a
// secret only when named, its value never in Describe.
TEST(Lifecycle, OpenLifetimeLabelsNameEnvSecrets)
{
    auto c = Connect();
    RequireUsable(c, "local-sandbox");
    workspaced::OpenOptions o;
    o.lifetime.ttl = std::chrono::hours(1);
    o.lifetime.idle_timeout = std::chrono::minutes(30);
    o.labels = {{"team", "infra"}, {"example.com/tier", "web"}};
    o.name = "cpp-agent-one";
    o.env = {{"GREETING", "hello"}};
    o.secrets = {{"API_TOKEN", "s3cret-value"}};
    auto before = std::chrono::system_clock::now();
    auto ws = c.Open(workspaced::LocalSandbox(), SandboxShell(), o);
    auto after = std::chrono::system_clock::now();

    EXPECT_EQ(ws.name(), "cpp-agent-one");
    EXPECT_EQ(ws.labels(), o.labels);
    EXPECT_EQ(ws.lifetime().ttl, std::chrono::hours(1));
    EXPECT_EQ(ws.lifetime().idle_timeout, std::chrono::minutes(30));
    // The idle timeout comes first: 30 minutes after Open.
    ASSERT_TRUE(ws.expires_at());
    EXPECT_GE(*ws.expires_at() + 1ms, before + std::chrono::minutes(30));
    EXPECT_LE(*ws.expires_at(), after + std::chrono::minutes(30));

    auto d = ws.Describe();
    EXPECT_EQ(d.name(), "cpp-agent-one");
    EXPECT_EQ(d.labels().at("team"), "infra");
    EXPECT_EQ(d.env().at("GREETING"), "hello");
    ASSERT_EQ(d.secret_names_size(), 1);
    EXPECT_EQ(d.secret_names(0), "API_TOKEN");
    EXPECT_FALSE(d.secrets_missing());
    EXPECT_EQ(d.lifetime().ttl_ms(), 3600000u);
    EXPECT_NE(d.expires_at_unix_ms(), 0);
    EXPECT_GT(d.last_activity_at_unix_ms(), 0);
    EXPECT_EQ(d.DebugString().find("s3cret-value"), std::string::npos);

    EXPECT_EQ(RunOk(ws, "echo \"$GREETING:$API_TOKEN\""), "hello:\n");
    EXPECT_EQ(RunOk(ws, "echo \"$GREETING:$API_TOKEN\"", {"API_TOKEN"}), "hello:s3cret-value\n");
    workspaced::ExecOptions bad;
    bad.secrets = {"NOT_A_SECRET"};
    EXPECT_THROW(ws.Run({"true"}, bad), workspaced::Malformed);

    workspaced::OpenOptions same;
    same.name = "cpp-agent-one";
    try {
        c.Open(workspaced::Memory(), workspaced::Capabilities(), same);
        ADD_FAILURE() << "a second workspace of the same name opened";
    } catch (const workspaced::Exists &e) {
        EXPECT_EQ(e.metadata().at("workspace_id"), ws.id());
    }
}

// Open always sends a request id and keeps it across its own retries: the
// retry of an attempt whose answer was lost returns the workspace that
// attempt opened, and no second one is left.
TEST(Lifecycle, RetriedOpenKeepsTheRequestId)
{
    CallWatch w;
    w.lose = 1;
    auto c = ConnectWatched(&w);
    workspaced::OpenOptions o;
    o.retry.sleep = [](std::chrono::milliseconds) {};
    o.labels = {{"test", "retried-open"}};
    auto ws = c.Open(workspaced::Memory(), workspaced::Capabilities(), o);
    ASSERT_EQ(w.lost.size(), 1u);
    EXPECT_EQ(ws.id(), w.lost[0]);
    ASSERT_EQ(w.request_ids.size(), 2u);
    EXPECT_FALSE(w.request_ids[0].empty());
    EXPECT_EQ(w.request_ids[0], w.request_ids[1]);
    workspaced::ListOptions lo;
    lo.label_selector = "test=retried-open";
    auto list = c.List(lo);
    ASSERT_EQ(list.size(), 1u);
    EXPECT_EQ(list[0].id(), ws.id());

    auto other = c.Open(workspaced::Memory(), workspaced::Capabilities(), o);
    EXPECT_NE(other.id(), ws.id());
    ASSERT_EQ(w.request_ids.size(), 3u);
    EXPECT_NE(w.request_ids[2], w.request_ids[0]);
}

// A caller's own request id: the same request answers the same workspace,
// another request with it throws RequestIdReused naming it.
TEST(Lifecycle, SameRequestIdSameWorkspace)
{
    auto c = Connect();
    workspaced::OpenOptions o;
    o.request_id = "cpp-job-42.attempt:1";
    o.labels = {{"job", "42"}};
    auto first = c.Open(workspaced::Memory(), workspaced::Capabilities(), o);
    auto again = c.Open(workspaced::Memory(), workspaced::Capabilities(), o);
    EXPECT_EQ(again.id(), first.id());
    again.Release();
    o.labels = {{"job", "43"}};
    try {
        c.Open(workspaced::Memory(), workspaced::Capabilities(), o);
        ADD_FAILURE() << "another request with the id opened";
    } catch (const workspaced::RequestIdReused &e) {
        EXPECT_EQ(e.code(), grpc::StatusCode::FAILED_PRECONDITION);
        EXPECT_EQ(e.metadata().at("workspace_id"), first.id());
    }
}

TEST(Lifecycle, ExtendAndSetSecrets)
{
    auto c = Connect();
    RequireUsable(c, "local-sandbox");
    workspaced::OpenOptions o;
    o.lifetime.ttl = std::chrono::hours(1);
    o.secrets = {{"A", "1"}};
    auto ws = c.Open(workspaced::LocalSandbox(), SandboxShell(), o);
    auto was = ws.expires_at();
    ASSERT_TRUE(was);
    auto now = ws.Extend(std::chrono::hours(2));
    ASSERT_TRUE(now);
    EXPECT_GT(*now, *was);
    EXPECT_EQ(ws.expires_at(), now);
    EXPECT_EQ(ws.lifetime().ttl, std::chrono::hours(2));
    EXPECT_EQ(ws.Describe().lifetime().ttl_ms(), 7200000u);
    EXPECT_THROW(ws.Extend(0ms, 0ms), workspaced::Malformed);

    auto s = ws.SetSecrets({{"B", "2"}});
    std::sort(s.names.begin(), s.names.end());
    EXPECT_EQ(s.names, (std::vector<std::string>{"A", "B"}));
    EXPECT_FALSE(s.missing);
    EXPECT_EQ(RunOk(ws, "echo \"$A $B\"", {"A", "B"}), "1 2\n");
    s = ws.SetSecrets({{"C", "3"}}, true);
    EXPECT_EQ(s.names, (std::vector<std::string>{"C"}));
    workspaced::ExecOptions gone;
    gone.secrets = {"A"};
    EXPECT_THROW(ws.Run({"true"}, gone), workspaced::Malformed);
    EXPECT_EQ(RunOk(ws, "echo \"$C\"", {"C"}), "3\n");
}

TEST(Lifecycle, ListFiltersAndPages)
{
    auto c = Connect();
    std::vector<workspaced::Workspace> open;
    for (auto [name, team] : std::vector<std::pair<std::string, std::string>>{
             {"cpp-alpha", "a"}, {"cpp-beta", "b"}, {"cpp-gamma", ""}}) {
        workspaced::OpenOptions o;
        o.name = name;
        o.labels = {{"suite", "cpp-list"}};
        if (!team.empty())
            o.labels["team"] = team;
        open.push_back(c.Open(workspaced::Memory(), workspaced::Capabilities(), o));
    }
    auto names = [&](workspaced::ListOptions o) {
        std::vector<std::string> out;
        for (const auto &w : c.List(o))
            out.push_back(w.name());
        std::sort(out.begin(), out.end());
        return out;
    };
    using V = std::vector<std::string>;
    workspaced::ListOptions o;
    o.label_selector = "suite=cpp-list";
    EXPECT_EQ(names(o), (V{"cpp-alpha", "cpp-beta", "cpp-gamma"}));
    o.label_selector = "suite=cpp-list,team=a";
    EXPECT_EQ(names(o), (V{"cpp-alpha"}));
    o.label_selector = "suite=cpp-list,team";
    EXPECT_EQ(names(o), (V{"cpp-alpha", "cpp-beta"}));
    o.label_selector = "suite=cpp-list,!team";
    EXPECT_EQ(names(o), (V{"cpp-gamma"}));
    o.label_selector = "suite=cpp-list,team!=a";
    EXPECT_EQ(names(o), (V{"cpp-beta", "cpp-gamma"}));
    o.label_selector = "";
    o.name = "cpp-beta";
    EXPECT_EQ(names(o), (V{"cpp-beta"}));
    o.name = "";
    o.label_selector = "suite=cpp-list";
    o.page_size = 1;
    EXPECT_EQ(names(o), (V{"cpp-alpha", "cpp-beta", "cpp-gamma"}));

    o.page_size = 2;
    auto first = c.ListOnePage(o);
    EXPECT_EQ(first.workspaces.size(), 2u);
    ASSERT_FALSE(first.next_page_token.empty());
    auto second = c.ListOnePage(o, first.next_page_token);
    EXPECT_EQ(second.workspaces.size(), 1u);
    EXPECT_TRUE(second.next_page_token.empty());

    o.label_selector = "=x";
    EXPECT_THROW(c.List(o), workspaced::Malformed);
    EXPECT_THROW(c.ListOnePage({}, "not-a-token"), workspaced::Malformed);
}

// A process fed, closed and resized through the unary calls from a handle
// by tag that did not start it; offsets make a repeat harmless and a gap
// is refused.
TEST(Lifecycle, ProcessHandleInput)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    workspaced::ExecOptions eo;
    eo.stdin_open = true;
    eo.tag = "feeder";
    auto p = ws.Exec({"cat"}, eo);
    auto other = c.Resolve(ws.ref());
    auto h = other.Handle("feeder");
    other.Release();
    EXPECT_FALSE(h.offset());
    EXPECT_EQ(h.SendInput("hello "), 6u);
    EXPECT_EQ(h.SendInput("world\n"), 12u);
    EXPECT_EQ(h.SendInputAt("world\n", 6), 12u);
    try {
        h.SendInputAt("x", 20);
        ADD_FAILURE() << "a gap was accepted";
    } catch (const workspaced::InputGap &e) {
        EXPECT_EQ(e.code(), grpc::StatusCode::OUT_OF_RANGE);
        EXPECT_EQ(e.metadata().at("offset"), "12");
    }
    auto procs = ws.Ps();
    ASSERT_EQ(procs.size(), 1u);
    EXPECT_TRUE(procs[0].stdin_open());
    EXPECT_EQ(procs[0].stdin_offset(), 12u);
    EXPECT_THROW(h.Resize(10, 10), workspaced::NoPty);
    EXPECT_EQ(h.CloseInput(), 12u);
    EXPECT_EQ(h.CloseInput(), 12u);
    std::string out;
    Drain(p, &out);
    EXPECT_TRUE(p.Wait().success());
    EXPECT_EQ(out, "hello world\n");

    workspaced::ExecOptions tty;
    tty.pty = std::make_pair(24u, 80u);
    auto t = ws.Exec({"sh", "-c", "read line; echo got $line"}, tty);
    auto th = t.Handle();
    ASSERT_TRUE(th.offset());
    EXPECT_EQ(*th.offset(), 0u);
    th.Resize(40, 100);
    for (const auto &pi : ws.Ps())
        if (pi.id() == t.id()) {
            EXPECT_EQ(pi.pty().rows(), 40u);
            EXPECT_EQ(pi.pty().cols(), 100u);
        }
    EXPECT_EQ(th.SendInput("yes\n"), 4u);
    std::string tout;
    Drain(t, &tout);
    EXPECT_TRUE(t.Wait().success());
    EXPECT_NE(tout.find("got yes"), std::string::npos) << tout;
}

// An expired workspace ends its commands with cause EXPIRED, and a later
// call throws WorkspaceEvicted with cause=expired after one Resolve, not a
// loop of them.
TEST(Lifecycle, ExpiredIsTypedEvicted)
{
    CallWatch w;
    auto c = ConnectWatched(&w);
    workspaced::OpenOptions o;
    o.lifetime.ttl = 1s;
    auto ws =
        c.Open(workspaced::LocalBash(), workspaced::Capabilities().WithFs().WithShell(kAllowed), o);
    auto p = ws.Exec({"sleep", "50"});
    auto r = p.Wait();
    EXPECT_TRUE(r.expired()) << r.exited.DebugString();
    int resolves = w.Count("Resolve");
    try {
        ws.Stat(".");
        ADD_FAILURE() << "Stat of an expired workspace succeeded";
    } catch (const workspaced::WorkspaceEvicted &e) {
        EXPECT_EQ(e.code(), grpc::StatusCode::NOT_FOUND);
        EXPECT_EQ(e.metadata().count("cause") ? e.metadata().at("cause") : "", "expired");
    }
    EXPECT_EQ(w.Count("Resolve") - resolves, 1);

    CallWatch w2;
    auto c2 = ConnectWatched(&w2, false);
    EXPECT_THROW(c2.Resolve(ws.ref()), workspaced::WorkspaceEvicted);
    EXPECT_EQ(w2.Count("Resolve"), 1);
}

const char *const kDockerImage = "workspaced-test:busybox";

// The container of docker workspace `id`, removed behind the server's
// back (the server labels it dev.workspaced.workspace=<id>).
void RemoveContainer(const std::string &id)
{
    std::string ids;
    int st = RunToExit(
        {"/usr/bin/env", "docker", "ps", "-aq", "--filter", "label=dev.workspaced.workspace=" + id},
        &ids);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << ids;
    while (!ids.empty() && (ids.back() == '\n' || ids.back() == ' '))
        ids.pop_back();
    ASSERT_FALSE(ids.empty()) << "no container for " << id;
    ASSERT_EQ(ids.find('\n'), std::string::npos) << ids;
    std::string out;
    st = RunToExit({"/usr/bin/env", "docker", "rm", "-f", ids}, &out);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
}

// The real case of a backend lost while the storage survives: the
// container of a docker workspace removed. Commands then fail with a
// WorkspaceFailed with metadata resolve=true until a Resolve brings a fresh
// container over the same files; the Workspace does that itself, once per
// call (a Run, then an Exec). With the retry off the failure is thrown.
TEST(Lifecycle, ReResolveAfterTheContainerIsRemoved)
{
    std::string out;
    int st = RunToExit({"/usr/bin/env", "docker", "image", "inspect", kDockerImage}, &out);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
        << kDockerImage << " is missing: start the daemon with bash tests/fixtures/dockerd.sh "
        << "and build the image with bash tests/fixtures/image/build.sh\n"
        << out;
    CallWatch w;
    auto c = ConnectWatched(&w);
    auto ws = c.Open(workspaced::Docker(kDockerImage), SandboxShell());
    ws.WriteFile("kept.txt", "survives\n");
    EXPECT_EQ(RunOk(ws, "cat kept.txt"), "survives\n");
    RemoveContainer(ws.id());
    EXPECT_EQ(RunOk(ws, "cat kept.txt"), "survives\n");
    EXPECT_EQ(w.Count("Resolve"), 1);
    RemoveContainer(ws.id());
    auto p = ws.Exec({"cat", "kept.txt"});
    std::string got;
    Drain(p, &got);
    EXPECT_TRUE(p.Wait().success());
    EXPECT_EQ(got, "survives\n");
    EXPECT_EQ(w.Count("Resolve"), 2);

    CallWatch w2;
    auto c2 = ConnectWatched(&w2, false);
    auto ws2 = c2.Resolve(ws.ref());
    RemoveContainer(ws.id());
    try {
        ws2.Run({"true"});
        ADD_FAILURE() << "a command ran in a removed container";
    } catch (const workspaced::WorkspaceFailed &e) {
        EXPECT_EQ(e.code(), grpc::StatusCode::FAILED_PRECONDITION);
        EXPECT_EQ(e.metadata().count("resolve") ? e.metadata().at("resolve") : "", "true");
        EXPECT_FALSE(e.transient());
    }
    EXPECT_EQ(w2.Count("Resolve"), 1);
    ws2.Release();
}

// A WorkspaceFailed the server does not mark resolve=true is not
// re-resolved: a Resolve would not repair it. The real case: a
// local-sandbox workspace (a fresh bubblewrap per command) whose read-only
// bind is removed, so that every command fails, not transient and without
// resolve; not one Resolve is made.
TEST(Lifecycle, AFailureAResolveDoesNotRepairIsNotReResolved)
{
    // A bind root the policy names, which the workspace's uid reaches.
    std::string roots = TmpDir();
    ASSERT_EQ(chmod(roots.c_str(), 0755), 0);
    char canonical[PATH_MAX];
    ASSERT_NE(realpath(roots.c_str(), canonical), nullptr);
    roots = canonical;
    std::string bind = roots + "/ro";
    ASSERT_EQ(mkdir(bind.c_str(), 0755), 0);
    {
        Server s({"--policy-bind-roots", roots});
        CallWatch w;
        auto c = ConnectWatched(&w, true, &s);
        RequireUsable(c, "local-sandbox");
        auto cfg = workspaced::LocalSandbox();
        cfg.add_read_only_paths(bind);
        cfg.set_exec_mode(pb::EXEC_MODE_PER_COMMAND);
        auto ws = c.Open(cfg, SandboxShell());
        EXPECT_EQ(RunOk(ws, "true"), "");
        ASSERT_EQ(rmdir(bind.c_str()), 0);
        try {
            ws.Run({"true"});
            ADD_FAILURE() << "a command ran without its bind";
        } catch (const workspaced::WorkspaceFailed &e) {
            EXPECT_EQ(e.code(), grpc::StatusCode::FAILED_PRECONDITION);
            EXPECT_EQ(e.metadata().count("transient") ? e.metadata().at("transient") : "", "false");
            EXPECT_EQ(e.metadata().count("resolve"), 0u);
        }
        EXPECT_THROW(ws.Exec({"true"}), workspaced::WorkspaceFailed);
        EXPECT_EQ(w.Count("Resolve"), 0);
    }
    rmdir(roots.c_str());
}

// ---------------------------------------------------------------- trees

// A raw ustar header block, built here by hand (independent of any tar
// the client uses), for hostile archives.
std::string RawTarHeader(const std::string &name, char type, size_t size,
                         const std::string &link = "")
{
    std::string b(512, '\0');
    memcpy(&b[0], name.data(), std::min<size_t>(name.size(), 100));
    memcpy(&b[100], "0000644", 7);
    memcpy(&b[108], "0000000", 7);
    memcpy(&b[116], "0000000", 7);
    char sz[13];
    snprintf(sz, sizeof(sz), "%011zo", size);
    memcpy(&b[124], sz, 11);
    memcpy(&b[136], "00000000000", 11);
    memset(&b[148], ' ', 8);
    b[156] = type;
    memcpy(&b[157], link.data(), std::min<size_t>(link.size(), 100));
    memcpy(&b[257],
           "ustar\0"
           "00",
           8);
    unsigned sum = 0;
    for (unsigned char ch : b)
        sum += ch;
    char ck[8];
    snprintf(ck, sizeof(ck), "%06o", sum);
    memcpy(&b[148], ck, 7);
    return b;
}

std::string HostileTar()
{
    std::string body = "evil\n";
    return RawTarHeader("../evil", '0', body.size()) + body + std::string(512 - body.size(), '\0') +
           std::string(1024, '\0');
}

// A local tree: nested files, a mode, a symlink, a name over 100 bytes.
std::string MakeLocalTree()
{
    std::string dir = TmpDir();
    EXPECT_EQ(mkdir((dir + "/sub").c_str(), 0755), 0);
    EXPECT_EQ(mkdir((dir + "/sub/deep").c_str(), 0755), 0);
    std::ofstream(dir + "/top.txt") << "top\n";
    std::ofstream(dir + "/sub/deep/b.bin", std::ios::binary) << std::string("\0\1\2\377", 4);
    EXPECT_EQ(chmod((dir + "/sub/deep/b.bin").c_str(), 0640), 0);
    EXPECT_EQ(symlink("deep/b.bin", (dir + "/sub/link").c_str()), 0);
    std::ofstream(dir + "/" + std::string(120, 'n')) << "long\n";
    return dir;
}

void RoundTrip(workspaced::Workspace &ws, pb::ArchiveFormat format)
{
    std::string src = MakeLocalTree();
    workspaced::WriteArchiveOptions wo;
    wo.format = format;
    auto up = ws.UploadTree(src, "proj", wo);
    EXPECT_EQ(up.files(), 3u);
    EXPECT_EQ(up.symlinks(), 1u);
    EXPECT_EQ(ws.ReadFile("proj/top.txt"), "top\n");
    EXPECT_EQ(ws.Stat("proj/sub/link").type(), pb::FILE_TYPE_SYMLINK);

    std::string dest = TmpDir() + "/copy";
    auto down = ws.DownloadTree("proj", dest);
    EXPECT_EQ(down.files(), 3u);
    EXPECT_EQ(down.symlinks(), 1u);
    EXPECT_EQ(ReadHostFile(dest + "/top.txt"), "top\n");
    EXPECT_EQ(ReadHostFile(dest + "/sub/deep/b.bin"), std::string("\0\1\2\377", 4));
    EXPECT_EQ(ReadHostFile(dest + "/" + std::string(120, 'n')), "long\n");
    struct stat st;
    ASSERT_EQ(stat((dest + "/sub/deep/b.bin").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0640u);
    ASSERT_EQ(lstat((dest + "/sub/link").c_str(), &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode));
    char target[64] = {0};
    ASSERT_GT(readlink((dest + "/sub/link").c_str(), target, sizeof(target) - 1), 0);
    EXPECT_STREQ(target, "deep/b.bin");
    // A directory with entries is refused: nothing there is overwritten.
    EXPECT_THROW(ws.DownloadTree("proj", dest), workspaced::UnsafeArchive);
}

TEST(Trees, UploadDownloadRoundTripMemory)
{
    auto c = Connect();
    auto ws = c.Open(workspaced::Memory(), workspaced::Capabilities().WithFs());
    RoundTrip(ws, pb::ARCHIVE_FORMAT_TAR_GZIP);
}

TEST(Trees, UploadDownloadRoundTripLocalBash)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    RoundTrip(ws, pb::ARCHIVE_FORMAT_TAR);
}

TEST(Trees, HostileArchiveIsBadArchive)
{
    auto c = Connect();
    auto ws = c.Open(workspaced::Memory(), workspaced::Capabilities().WithFs());
    try {
        ws.WriteArchive("dst", HostileTar());
        FAIL() << "a ../ member was accepted";
    } catch (const workspaced::BadArchive &e) {
        EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT);
        EXPECT_EQ(e.metadata().at("problem"), "dotdot");
        EXPECT_EQ(e.metadata().at("entry"), "../evil");
    }
    EXPECT_EQ(ws.ListDir(".").entries_size(), 0);
}

TEST(Trees, DownloadRefusesWhatWouldLeaveTheDirectory)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    // A symlink out of the tree, made on the host in the workspace.
    std::string dir = server->state_dir() + "/workspaces/" + ws.id();
    workspaced::WriteOptions parents;
    parents.create_parents = true;
    ws.WriteFile("t/a.txt", "a", parents);
    ASSERT_EQ(symlink("/etc", (dir + "/t/out").c_str()), 0);
    std::string base = TmpDir();
    try {
        ws.DownloadTree("t", base + "/copy");
        FAIL() << "a symlink to /etc was extracted";
    } catch (const workspaced::UnsafeArchive &e) {
        EXPECT_EQ(e.problem(), "link_outside");
        EXPECT_EQ(e.entry(), "out");
    }
    // Nothing was extracted.
    EXPECT_NE(access((base + "/copy/a.txt").c_str(), F_OK), 0);
}

TEST(Trees, ReadArchiveListsAFifoAsSpecial)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    ws.WriteFile("a.txt", "a");
    std::string dir = server->state_dir() + "/workspaces/" + ws.id();
    ASSERT_EQ(mkfifo((dir + "/pipe").c_str(), 0644), 0);
    std::ostringstream out;
    auto tr = ws.ReadArchive(".", out);
    EXPECT_GE(out.str().size(), 1536u);
    EXPECT_EQ(tr.files(), 1u);
    ASSERT_EQ(tr.skipped_size(), 1);
    EXPECT_EQ(tr.skipped(0).path(), "pipe");
    EXPECT_EQ(tr.skipped(0).reason(), "special");
}

TEST(Trees, WatchReportsReadyThenCreated)
{
    auto c = Connect();
    auto ws = c.Open(workspaced::Memory(), workspaced::Capabilities().WithFs());
    workspaced::WatchOptions wo;
    wo.recursive = true;
    auto w = ws.Watch(".", wo);
    auto first = w.Next();
    ASSERT_TRUE(first);
    EXPECT_EQ(first->type(), pb::WATCH_EVENT_READY);
    ws.WriteFile("new.txt", "x");
    std::optional<pb::WatchEvent> ev;
    while ((ev = w.Next()) && ev->path() != "new.txt") {
    }
    ASSERT_TRUE(ev) << "the watch ended before reporting new.txt";
    EXPECT_EQ(ev->type(), pb::WATCH_EVENT_CREATED);
    EXPECT_EQ(ev->file_type(), pb::FILE_TYPE_REGULAR);
    // Cancel ends the call: Next() returns nullopt, no error.
    w.Cancel();
    while (w.Next()) {
    }
    EXPECT_FALSE(w.Next());
}

TEST(Snapshots, RestoreForkListDelete)
{
    auto c = Connect();
    auto ws = OpenShell(c);
    ws.WriteFile("f.txt", "old");
    auto snap = ws.Snapshot("cpp-snap", {{"kind", "cpp-test"}});
    EXPECT_EQ(snap.id().rfind("snap-", 0), 0u);
    EXPECT_EQ(snap.files(), 1u);
    ws.WriteFile("f.txt", "new");
    ws.WriteFile("g.txt", "later");
    auto r = ws.Restore(snap.id());
    EXPECT_EQ(r.snapshot().id(), snap.id());
    EXPECT_EQ(ws.ReadFile("f.txt"), "old");
    EXPECT_THROW(ws.Stat("g.txt"), workspaced::Error);

    workspaced::OpenOptions fork;
    fork.from_snapshot = snap.id();
    auto forked = c.Open(workspaced::Memory(), workspaced::Capabilities().WithFs(), fork);
    EXPECT_EQ(forked.ReadFile("f.txt"), "old");

    workspaced::ListSnapshotsOptions lo;
    lo.label_selector = "kind=cpp-test";
    lo.page_size = 1;
    auto all = c.ListSnapshots(lo);
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].id(), snap.id());

    c.DeleteSnapshot(snap.id());
    EXPECT_THROW(c.DeleteSnapshot(snap.id()), workspaced::NoSuchSnapshot);
    EXPECT_THROW(c.Open(workspaced::Memory(), workspaced::Capabilities().WithFs(), fork),
                 workspaced::NoSuchSnapshot);
}

// Every entry under `root` (itself included) with its type, mode and
// content or link target: any write to the tree changes the result.
std::map<std::string, std::string> DescribeHost(const std::string &root,
                                                const std::string &rel = ".")
{
    std::map<std::string, std::string> out;
    std::string p = root + "/" + rel;
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) {
        ADD_FAILURE() << "lstat " << p << ": " << strerror(errno);
        return out;
    }
    std::string line = std::to_string(st.st_mode);
    if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlink(p.c_str(), target, sizeof(target));
        line += " -> " + std::string(target, n > 0 ? n : 0);
    } else if (S_ISREG(st.st_mode)) {
        line += " " + ReadHostFile(p);
    }
    out[rel] = line;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(p.c_str());
        if (!d) {
            ADD_FAILURE() << "opendir " << p << ": " << strerror(errno);
            return out;
        }
        std::vector<std::string> names;
        while (struct dirent *e = readdir(d))
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                names.push_back(e->d_name);
        closedir(d);
        for (const auto &n : names) {
            auto sub = DescribeHost(root, rel + "/" + n);
            out.insert(sub.begin(), sub.end());
        }
    }
    return out;
}

// Open's from_path: a directory under the server's --source-path-allow is
// copied into the new workspace (a symlink as a link) and never written;
// any other path is SourcePathDenied.
TEST(Snapshots, OpenFromPathShadowsAnAllowedDirectory)
{
    char canonical[PATH_MAX];
    ASSERT_NE(realpath(TmpDir().c_str(), canonical), nullptr);
    const std::string allowed = canonical;
    const std::string repo = allowed + "/repo";
    const std::string deep("deep\0bytes\377\n", 12);
    ASSERT_EQ(mkdir(repo.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((repo + "/sub").c_str(), 0755), 0);
    std::ofstream(repo + "/top.txt") << "top\n";
    std::ofstream(repo + "/sub/deep.bin", std::ios::binary) << deep;
    ASSERT_EQ(symlink("sub/deep.bin", (repo + "/link").c_str()), 0);
    const auto before = DescribeHost(allowed);
    ASSERT_EQ(before.size(), 6u);

    Server shadow({"--source-path-allow", allowed});
    auto c = workspaced::Client::Connect(shadow.address());
    workspaced::OpenOptions from;
    from.from_path = repo;
    for (bool memory : {true, false}) {
        SCOPED_TRACE(memory ? "memory" : "local-bash");
        auto ws = memory
                      ? c.Open(workspaced::Memory(), workspaced::Capabilities().WithFs(), from)
                      : c.Open(workspaced::LocalBash(), workspaced::Capabilities().WithFs(), from);
        EXPECT_EQ(ws.ReadFile("top.txt"), "top\n");
        EXPECT_EQ(ws.ReadFile("sub/deep.bin"), deep);
        EXPECT_EQ(ws.Stat("link").type(), pb::FILE_TYPE_SYMLINK);
        std::string dest = TmpDir() + "/copy";
        auto down = ws.DownloadTree(".", dest);
        EXPECT_EQ(down.files(), 2u);
        EXPECT_EQ(down.symlinks(), 1u);
        char target[64] = {0};
        ASSERT_GT(readlink((dest + "/link").c_str(), target, sizeof(target) - 1), 0);
        EXPECT_STREQ(target, "sub/deep.bin");

        ws.WriteFile("top.txt", "changed");
        ws.WriteFile("new.txt", "new");
        EXPECT_EQ(ws.ReadFile("top.txt"), "changed");
        EXPECT_EQ(DescribeHost(allowed), before) << "the source is never written";
    }

    char parent[PATH_MAX];
    ASSERT_NE(realpath((allowed + "/..").c_str(), parent), nullptr);
    for (const std::string &bad :
         {std::string("/etc"), repo + "/../repo", allowed + "/..", std::string(parent)}) {
        workspaced::OpenOptions outside;
        outside.from_path = bad;
        try {
            c.Open(workspaced::Memory(), workspaced::Capabilities().WithFs(), outside);
            ADD_FAILURE() << bad << " was opened";
        } catch (const workspaced::SourcePathDenied &e) {
            EXPECT_EQ(e.code(), grpc::StatusCode::PERMISSION_DENIED) << bad;
            EXPECT_EQ(e.reason(), "SOURCE_PATH_DENIED") << bad;
            EXPECT_EQ(e.metadata().at("path"), bad);
        }
    }
    EXPECT_EQ(DescribeHost(allowed), before);
}

} // namespace
