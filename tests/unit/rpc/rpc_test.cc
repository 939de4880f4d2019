// The RPC core end to end: tests/unit/rpc/test_server (C, on
// //server/rpc:core) started as a subprocess, driven by a grpc++ client over
// a real loopback socket. argv[1] is the server binary.
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>
#include <gtest/gtest.h>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "grpc/health/v1/health.pb.h"

extern "C" {
#include "server/base/errors.h"
}

extern char **environ;

namespace
{

using HReq = grpc::health::v1::HealthCheckRequest;
using HResp = grpc::health::v1::HealthCheckResponse;
using Clock = std::chrono::steady_clock;
using grpc::internal::RpcMethod;

std::string g_server_path;

// How long a wait may take before it is a failure. Generous: only a broken
// server or test ever waits this long, a slow machine never does.
constexpr int kWaitMs = 30000;

long MsSince(Clock::time_point t0)
{
    return (long)std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

bool WaitFor(const std::function<bool()> &f, int timeout_ms)
{
    auto t0 = Clock::now();
    while (MsSince(t0) < timeout_ms) {
        if (f())
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return f();
}

// How a child ended, from its wait status (-1: it had to be killed).
std::string DescribeStatus(int status)
{
    if (status == -1)
        return "did not exit in time (killed)";
    if (WIFEXITED(status))
        return "exited " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
               strsignal(WTERMSIG(status)) + ")";
    return "wait status " + std::to_string(status);
}

// The test server as a child process; its stdout is a pipe to us, its
// stderr a file (where a sanitizer's report goes). A server still running
// when this is destroyed is sent SIGTERM and must drain and exit 0 like any
// other: whatever path a test took, no unclean exit goes unseen.
class ServerProcess
{
  public:
    ~ServerProcess()
    {
        if (pid_ > 0) {
            int status = Terminate(kWaitMs, nullptr, nullptr);
            EXPECT_TRUE(CleanExit(status)) << "(stopped at the end of the test)";
        }
        if (out_ >= 0)
            close(out_);
        if (!err_path_.empty())
            unlink(err_path_.c_str());
    }

    // Starts the server and reads "PORT <n>": "" once it serves, else why
    // not (with what it wrote to stderr).
    std::string Start(const std::vector<std::string> &extra)
    {
        std::vector<std::string> args = {g_server_path};
        args.insert(args.end(), extra.begin(), extra.end());
        std::vector<char *> argv;
        for (auto &a : args)
            argv.push_back(const_cast<char *>(a.c_str()));
        argv.push_back(nullptr);

        static std::atomic<int> n{0};
        const char *tmp = getenv("TEST_TMPDIR");
        err_path_ = std::string(tmp ? tmp : "/tmp") + "/test_server." + std::to_string(getpid()) +
                    "." + std::to_string(n++) + ".stderr";
        int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (err < 0)
            return err_path_ + ": " + strerror(errno);
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) < 0) {
            close(err);
            return std::string("pipe2: ") + strerror(errno);
        }
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
        posix_spawn_file_actions_adddup2(&fa, err, 2);
        int e = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&fa);
        close(fds[1]);
        close(err);
        out_ = fds[0];
        if (e != 0) {
            pid_ = -1;
            return std::string("posix_spawn ") + argv[0] + ": " + strerror(e);
        }
        std::string line = ReadLine(kWaitMs);
        if (line.rfind("PORT ", 0) != 0)
            return "no PORT line (got '" + line + "'); stderr: " + Stderr();
        port_ = std::stoi(line.substr(5));
        return "";
    }

    // One line of the server's stdout, "" on timeout or EOF.
    std::string ReadLine(int timeout_ms)
    {
        auto t0 = Clock::now();
        for (;;) {
            size_t nl = buf_.find('\n');
            if (nl != std::string::npos) {
                std::string line = buf_.substr(0, nl);
                buf_.erase(0, nl + 1);
                return line;
            }
            long left = timeout_ms - MsSince(t0);
            if (left <= 0)
                return "";
            struct pollfd p = {out_, POLLIN, 0};
            if (poll(&p, 1, (int)left) <= 0)
                return "";
            char tmp[512];
            ssize_t n = read(out_, tmp, sizeof(tmp));
            if (n <= 0)
                return "";
            buf_.append(tmp, (size_t)n);
        }
    }

    // Waits up to timeout_ms for the server to end by itself; its wait
    // status, or -1 (and it is killed) when it did not.
    int WaitExit(int timeout_ms)
    {
        auto t0 = Clock::now();
        int status = -1;
        while (pid_ > 0) {
            pid_t r = waitpid(pid_, &status, WNOHANG);
            if (r == pid_) {
                pid_ = -1;
                return status;
            }
            if (MsSince(t0) >= timeout_ms) {
                kill(pid_, SIGKILL);
                while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR)
                    ;
                pid_ = -1;
                return -1;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return -1;
    }

    // Sends SIGTERM and waits up to timeout_ms for the exit; returns the
    // wait status, or -1 when it had to be killed. *last gets the final
    // stdout line.
    int Terminate(int timeout_ms, std::string *last, long *elapsed_ms)
    {
        auto t0 = Clock::now();
        kill(pid_, SIGTERM);
        std::string line = ReadLine(timeout_ms);
        if (last)
            *last = line;
        int status = WaitExit((int)std::max(0L, timeout_ms - MsSince(t0)));
        if (elapsed_ms)
            *elapsed_ms = MsSince(t0);
        return status;
    }

    // Whether `status` is a clean exit (0); if not, the failure says how it
    // ended and what the server wrote to stderr.
    ::testing::AssertionResult CleanExit(int status) const
    {
        if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
            return ::testing::AssertionSuccess();
        return ::testing::AssertionFailure()
               << "the test server " << DescribeStatus(status) << "; stderr:\n"
               << Stderr();
    }

    std::string Stderr() const
    {
        std::string out;
        int fd = open(err_path_.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return out;
        char tmp[4096];
        ssize_t n;
        while ((n = read(fd, tmp, sizeof(tmp))) > 0)
            out.append(tmp, (size_t)n);
        close(fd);
        return out;
    }

    int port() const
    {
        return port_;
    }

  private:
    pid_t pid_ = -1;
    int out_ = -1;
    int port_ = 0;
    std::string buf_;
    std::string err_path_;
};

std::shared_ptr<grpc::Channel> Connect(const std::string &target)
{
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(16 * 1024 * 1024);
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

template <class Req, class Resp>
grpc::Status Unary(grpc::Channel *ch, const char *method, const Req &req, Resp *resp,
                   grpc::ClientContext *ctx)
{
    RpcMethod m(method, RpcMethod::NORMAL_RPC);
    return grpc::internal::BlockingUnaryCall<Req, Resp, grpc::protobuf::MessageLite,
                                             grpc::protobuf::MessageLite>(ch, m, ctx, req, resp);
}

grpc::Status RawUnary(grpc::Channel *ch, const char *method, const std::string &bytes,
                      grpc::ClientContext *ctx)
{
    RpcMethod m(method, RpcMethod::NORMAL_RPC);
    grpc::Slice slice(bytes.data(), bytes.size());
    grpc::ByteBuffer req(&slice, 1), resp;
    return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(ch, m, ctx, req,
                                                                                 &resp);
}

HReq Req(const std::string &s)
{
    HReq r;
    r.set_service(s);
    return r;
}

// Protobuf wire encoding by hand, for bytes a real client would refuse to
// produce (invalid UTF-8 in a string field).
std::string Varint(uint64_t v)
{
    std::string out;
    do {
        uint8_t b = v & 0x7f;
        v >>= 7;
        out.push_back((char)(v ? b | 0x80 : b));
    } while (v);
    return out;
}

std::string LenField(int id, const std::string &bytes)
{
    return Varint((uint64_t)id << 3 | 2) + Varint(bytes.size()) + bytes;
}

// grpc-status-details-bin, parsed.
struct Details {
    bool present = false;
    google::rpc::Status status;
    google::rpc::ErrorInfo info;
    std::map<std::string, std::string> meta;
};

Details GetDetails(const grpc::ClientContext &ctx)
{
    Details d;
    auto md = ctx.GetServerTrailingMetadata();
    auto it = md.find("grpc-status-details-bin");
    if (it == md.end())
        return d;
    if (!d.status.ParseFromArray(it->second.data(), (int)it->second.size()))
        return d;
    if (d.status.details_size() != 1 ||
        d.status.details(0).type_url() != "type.googleapis.com/google.rpc.ErrorInfo" ||
        !d.info.ParseFromString(d.status.details(0).value()))
        return d;
    for (const auto &kv : d.info.metadata())
        d.meta[kv.first] = kv.second;
    d.present = true;
    return d;
}

class Rpc : public ::testing::Test
{
  protected:
    static void SetUpTestSuite()
    {
        server_ = new ServerProcess();
        ASSERT_EQ(server_->Start({"--listen", "127.0.0.1:0", "--grace-ms", "2000"}), "");
        channel_ = Connect("127.0.0.1:" + std::to_string(server_->port()));
    }

    static void TearDownTestSuite()
    {
        channel_.reset();
        std::string last;
        int status = server_->Terminate(kWaitMs, &last, nullptr);
        EXPECT_TRUE(server_->CleanExit(status));
        EXPECT_EQ(last.rfind("live_calls=0 ", 0), 0u) << last;
        // Every call whose handler started was destroyed.
        long started = -1, destroyed = -2;
        sscanf(last.c_str(), "live_calls=%*d started=%ld destroyed=%ld", &started, &destroyed);
        EXPECT_EQ(started, destroyed) << last;
        delete server_;
        server_ = nullptr;
    }

    void SetUp() override
    {
        ASSERT_TRUE(server_ && server_->port() > 0) << "the suite's server did not start";
    }

    static long Stat(const char *name)
    {
        grpc::ClientContext ctx;
        HResp resp;
        grpc::Status st = Unary(channel_.get(), "/test.Echo/Stats", Req(name), &resp, &ctx);
        EXPECT_TRUE(st.ok()) << st.error_message();
        return (long)resp.status();
    }

    static ServerProcess *server_;
    static std::shared_ptr<grpc::Channel> channel_;
};

ServerProcess *Rpc::server_;
std::shared_ptr<grpc::Channel> Rpc::channel_;

TEST_F(Rpc, UnaryEcho)
{
    for (const std::string s : {"hello", "", "unicode: \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"}) {
        grpc::ClientContext ctx;
        HReq resp;
        grpc::Status st = Unary(channel_.get(), "/test.Echo/Unary", Req(s), &resp, &ctx);
        ASSERT_TRUE(st.ok()) << st.error_message();
        EXPECT_EQ(resp.service(), s);
    }
}

TEST_F(Rpc, ServerStreamInOrder)
{
    grpc::ClientContext ctx;
    RpcMethod m("/test.Echo/ServerStream", RpcMethod::SERVER_STREAMING);
    std::unique_ptr<grpc::ClientReader<HReq>> r(
        grpc::internal::ClientReaderFactory<HReq>::Create(channel_.get(), m, &ctx, Req("1000")));
    HReq msg;
    int n = 0;
    while (r->Read(&msg)) {
        EXPECT_EQ(std::stoi(msg.service()), n);
        n++;
    }
    grpc::Status st = r->Finish();
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(n, 1000);
}

// Big messages and a slow reader: the handler sends the next message only
// from on_sent, which waits on HTTP/2 flow control.
TEST_F(Rpc, ServerStreamBackpressure)
{
    grpc::ClientContext ctx;
    RpcMethod m("/test.Echo/ServerStream", RpcMethod::SERVER_STREAMING);
    std::unique_ptr<grpc::ClientReader<HReq>> r(grpc::internal::ClientReaderFactory<HReq>::Create(
        channel_.get(), m, &ctx, Req("48:262144")));
    HReq msg;
    int n = 0;
    while (r->Read(&msg)) {
        EXPECT_EQ(msg.service().size(), 262144u);
        EXPECT_EQ(std::stoi(msg.service()), n);
        if (n < 10)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        n++;
    }
    grpc::Status st = r->Finish();
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(n, 48);
}

TEST_F(Rpc, ServerStreamClientCancels)
{
    long c0 = Stat("cancelled"), d0 = Stat("destroyed");
    {
        grpc::ClientContext ctx;
        RpcMethod m("/test.Echo/ServerStream", RpcMethod::SERVER_STREAMING);
        std::unique_ptr<grpc::ClientReader<HReq>> r(
            grpc::internal::ClientReaderFactory<HReq>::Create(channel_.get(), m, &ctx,
                                                              Req("1000000:1024")));
        HReq msg;
        for (int i = 0; i < 5; i++)
            ASSERT_TRUE(r->Read(&msg));
        ctx.TryCancel();
        while (r->Read(&msg))
            ;
        EXPECT_EQ(r->Finish().error_code(), grpc::StatusCode::CANCELLED);
    }
    EXPECT_TRUE(WaitFor([&] { return Stat("cancelled") > c0; }, kWaitMs));
    EXPECT_TRUE(WaitFor([&] { return Stat("destroyed") > d0; }, kWaitMs));
}

TEST_F(Rpc, ClientStreamSum)
{
    grpc::ClientContext ctx;
    HResp resp;
    RpcMethod m("/test.Echo/ClientStream", RpcMethod::CLIENT_STREAMING);
    std::unique_ptr<grpc::ClientWriter<HReq>> w(
        grpc::internal::ClientWriterFactory<HReq>::Create(channel_.get(), m, &ctx, &resp));
    for (int i = 1; i <= 100; i++)
        ASSERT_TRUE(w->Write(Req(std::to_string(i))));
    ASSERT_TRUE(w->WritesDone());
    grpc::Status st = w->Finish();
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ((int)resp.status(), 5050);
}

TEST_F(Rpc, ClientStreamEmpty)
{
    grpc::ClientContext ctx;
    HResp resp;
    RpcMethod m("/test.Echo/ClientStream", RpcMethod::CLIENT_STREAMING);
    std::unique_ptr<grpc::ClientWriter<HReq>> w(
        grpc::internal::ClientWriterFactory<HReq>::Create(channel_.get(), m, &ctx, &resp));
    ASSERT_TRUE(w->WritesDone());
    grpc::Status st = w->Finish();
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ((int)resp.status(), 0);
}

// A bad message in the middle of a stream ends the call MALFORMED and the
// handler hears on_cancel.
TEST_F(Rpc, ClientStreamMalformedMessage)
{
    long c0 = Stat("cancelled");
    grpc::ClientContext ctx;
    grpc::ByteBuffer resp;
    RpcMethod m("/test.Echo/ClientStream", RpcMethod::CLIENT_STREAMING);
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> w(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel_.get(), m, &ctx,
                                                                      &resp));
    std::string good = LenField(1, "5"), bad = LenField(1, "\xc0\x80");
    grpc::Slice s1(good.data(), good.size()), s2(bad.data(), bad.size());
    grpc::ByteBuffer b1(&s1, 1), b2(&s2, 1);
    w->Write(b1);
    w->Write(b2);
    w->WritesDone();
    grpc::Status st = w->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    Details d = GetDetails(ctx);
    ASSERT_TRUE(d.present);
    EXPECT_EQ(d.info.reason(), "MALFORMED");
    EXPECT_EQ(d.meta["field"], "service");
    EXPECT_TRUE(WaitFor([&] { return Stat("cancelled") > c0; }, kWaitMs));
}

TEST_F(Rpc, BidiPingPong)
{
    grpc::ClientContext ctx;
    RpcMethod m("/test.Echo/Bidi", RpcMethod::BIDI_STREAMING);
    std::unique_ptr<grpc::ClientReaderWriter<HReq, HReq>> rw(
        grpc::internal::ClientReaderWriterFactory<HReq, HReq>::Create(channel_.get(), m, &ctx));
    for (int i = 0; i < 50; i++) {
        std::string s = "ping " + std::to_string(i);
        ASSERT_TRUE(rw->Write(Req(s)));
        HReq back;
        ASSERT_TRUE(rw->Read(&back));
        EXPECT_EQ(back.service(), s);
    }
    ASSERT_TRUE(rw->WritesDone());
    HReq extra;
    EXPECT_FALSE(rw->Read(&extra));
    grpc::Status st = rw->Finish();
    ASSERT_TRUE(st.ok()) << st.error_message();
}

TEST_F(Rpc, FailCarriesErrorInfo)
{
    grpc::ClientContext ctx;
    HReq resp;
    grpc::Status st =
        Unary(channel_.get(), "/test.Echo/Fail", Req(std::to_string(ENOENT)), &resp, &ctx);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(st.error_message(), "no such file or directory");
    Details d = GetDetails(ctx);
    ASSERT_TRUE(d.present);
    EXPECT_EQ(d.status.code(), (int)grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(d.status.message(), "no such file or directory");
    EXPECT_EQ(d.info.reason(), "NO_SUCH_FILE");
    EXPECT_EQ(d.info.domain(), "workspaced");
    EXPECT_EQ(d.meta["k"], "v");
    // grpc++ hands the same bytes to Status::error_details().
    google::rpc::Status again;
    ASSERT_TRUE(again.ParseFromString(st.error_details()));
    EXPECT_EQ(again.code(), d.status.code());
}

TEST_F(Rpc, FailWithMessage)
{
    grpc::ClientContext ctx;
    HReq resp;
    grpc::Status st = Unary(channel_.get(), "/test.Echo/Fail",
                            Req(std::to_string(WS_ECONFLICT) + ":hash mismatch"), &resp, &ctx);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(st.error_message(), "hash mismatch");
    Details d = GetDetails(ctx);
    ASSERT_TRUE(d.present);
    EXPECT_EQ(d.info.reason(), "CONFLICT");
    EXPECT_EQ(d.status.message(), "hash mismatch");
}

TEST_F(Rpc, ErrorTableOverTheWire)
{
    struct {
        std::string arg;
        grpc::StatusCode code;
        const char *reason;
    } cases[] = {
        {std::to_string(EXDEV), grpc::StatusCode::INVALID_ARGUMENT, "PATH_ESCAPE"},
        {std::to_string(WS_ESYMLINK_LEAF), grpc::StatusCode::INVALID_ARGUMENT, "SYMLINK_LEAF"},
        {std::to_string(EFBIG), grpc::StatusCode::RESOURCE_EXHAUSTED, "SIZE_CAP"},
        {std::to_string(WS_ENOWORKSPACE), grpc::StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE"},
        {std::to_string(WS_EEVICTED), grpc::StatusCode::NOT_FOUND, "WORKSPACE_EVICTED"},
        {std::to_string(WS_ECAPABILITY), grpc::StatusCode::FAILED_PRECONDITION,
         "CAPABILITY_MISSING"},
        {std::to_string(EEXIST), grpc::StatusCode::ALREADY_EXISTS, "EXISTS"},
        {std::to_string(EACCES), grpc::StatusCode::PERMISSION_DENIED, "ACCESS_DENIED"},
        {std::to_string(ECANCELED), grpc::StatusCode::CANCELLED, "CANCELLED"},
        {std::to_string(ETIMEDOUT), grpc::StatusCode::DEADLINE_EXCEEDED, "DEADLINE"},
        {std::to_string(ENOSYS), grpc::StatusCode::UNIMPLEMENTED, "UNIMPLEMENTED"},
        {std::to_string(EIO), grpc::StatusCode::INTERNAL, "INTERNAL"},
        {std::to_string(WS_EFAILED), grpc::StatusCode::FAILED_PRECONDITION, "WORKSPACE_FAILED"},
        {std::to_string(WS_EFAILED) + ":t", grpc::StatusCode::UNAVAILABLE, "WORKSPACE_FAILED"},
    };
    for (const auto &c : cases) {
        grpc::ClientContext ctx;
        HReq resp;
        grpc::Status st = Unary(channel_.get(), "/test.Echo/Fail", Req(c.arg), &resp, &ctx);
        EXPECT_EQ(st.error_code(), c.code) << c.arg;
        Details d = GetDetails(ctx);
        ASSERT_TRUE(d.present) << c.arg;
        EXPECT_EQ(d.info.reason(), c.reason) << c.arg;
        EXPECT_EQ(d.info.domain(), "workspaced") << c.arg;
        EXPECT_EQ(d.status.code(), (int)c.code) << c.arg;
        EXPECT_EQ(d.meta["k"], "v") << c.arg;
        EXPECT_FALSE(st.error_message().empty()) << c.arg;
        if (c.arg.rfind(std::to_string(WS_EFAILED), 0) == 0) {
            EXPECT_EQ(d.meta["transient"],
                      c.code == grpc::StatusCode::UNAVAILABLE ? "true" : "false");
        }
        if (c.code == grpc::StatusCode::INTERNAL) {
            EXPECT_EQ(d.meta["errno"], "EIO");
            EXPECT_EQ(st.error_message(), "internal error");
        }
    }
}

TEST_F(Rpc, ClientCancelRunsOnCancel)
{
    long s0 = Stat("slow_started"), c0 = Stat("cancelled"), d0 = Stat("destroyed");
    grpc::ClientContext ctx;
    grpc::Status st;
    std::thread t([&] {
        HReq resp;
        st = Unary(channel_.get(), "/test.Echo/Slow", Req("x"), &resp, &ctx);
    });
    ASSERT_TRUE(WaitFor([&] { return Stat("slow_started") > s0; }, kWaitMs));
    ctx.TryCancel();
    t.join();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_TRUE(WaitFor([&] { return Stat("cancelled") > c0; }, kWaitMs));
    EXPECT_TRUE(WaitFor([&] { return Stat("destroyed") > d0; }, kWaitMs));
}

TEST_F(Rpc, ClientDeadlineRunsOnCancel)
{
    long c0 = Stat("cancelled"), d0 = Stat("destroyed");
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    HReq resp;
    auto t0 = Clock::now();
    grpc::Status st = Unary(channel_.get(), "/test.Echo/Slow", Req("x"), &resp, &ctx);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    // Ended by the deadline, not by the handler (it never ends by itself).
    EXPECT_LT(MsSince(t0), kWaitMs);
    EXPECT_TRUE(WaitFor([&] { return Stat("cancelled") > c0; }, kWaitMs));
    EXPECT_TRUE(WaitFor([&] { return Stat("destroyed") > d0; }, kWaitMs));
}

TEST_F(Rpc, DeadlineRemaining)
{
    {
        grpc::ClientContext ctx;
        HResp resp;
        ASSERT_TRUE(Unary(channel_.get(), "/test.Echo/Stats", Req("deadline"), &resp, &ctx).ok());
        EXPECT_EQ((int)resp.status(), -2); // no deadline: INT64_MAX
    }
    {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        HResp resp;
        ASSERT_TRUE(Unary(channel_.get(), "/test.Echo/Stats", Req("deadline"), &resp, &ctx).ok());
        EXPECT_GT((int)resp.status(), 5000);
        EXPECT_LE((int)resp.status(), 11000); // grpc-timeout is rounded up
    }
}

void ExpectMalformed(grpc::Channel *ch, const char *method, const std::string &bytes,
                     const std::string &field)
{
    grpc::ClientContext ctx;
    grpc::Status st = RawUnary(ch, method, bytes, &ctx);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    Details d = GetDetails(ctx);
    ASSERT_TRUE(d.present) << field;
    EXPECT_EQ(d.info.reason(), "MALFORMED");
    EXPECT_EQ(d.info.domain(), "workspaced");
    if (field.empty())
        EXPECT_EQ(d.meta.count("field"), 0u);
    else
        EXPECT_EQ(d.meta["field"], field);
}

TEST_F(Rpc, InvalidUtf8AndNulRejected)
{
    ExpectMalformed(channel_.get(), "/test.Echo/Unary", LenField(1, "\xff\xfe"), "service");
    ExpectMalformed(channel_.get(), "/test.Echo/Unary", LenField(1, std::string("a\0b", 3)),
                    "service");
    ExpectMalformed(channel_.get(), "/test.Echo/Unary", LenField(1, "\xed\xa0\x80"), "service");
    ExpectMalformed(channel_.get(), "/test.Echo/Unary", LenField(1, "\xc0\xaf"), "service");
    // Undecodable bytes: a length running past the end.
    ExpectMalformed(channel_.get(), "/test.Echo/Unary",
                    "\x0a\x05"
                    "ab",
                    "");
    // Valid raw bytes still work.
    grpc::ClientContext ctx;
    EXPECT_TRUE(RawUnary(channel_.get(), "/test.Echo/Unary", LenField(1, "ok"), &ctx).ok());
}

TEST_F(Rpc, NestedStringsChecked)
{
    // google.rpc.ErrorInfo: metadata is a map, i.e. repeated entries {1: key, 2: value}.
    std::string entry_bad = LenField(1, "k") + LenField(2, "v\xff");
    ExpectMalformed(channel_.get(), "/test.Echo/Info",
                    LenField(1, "R") + LenField(3, LenField(1, "a") + LenField(2, "b")) +
                        LenField(3, entry_bad),
                    "metadata.value");
    ExpectMalformed(channel_.get(), "/test.Echo/Info",
                    LenField(3, LenField(1, std::string("k\0", 2))), "metadata.key");
    // google.rpc.Status: details are Any {1: type_url, 2: value (bytes)}.
    ExpectMalformed(channel_.get(), "/test.Echo/Nested", LenField(3, LenField(1, "type\x80")),
                    "details.type_url");

    // Bytes fields may hold anything.
    grpc::ClientContext ctx;
    grpc::Status st =
        RawUnary(channel_.get(), "/test.Echo/Nested",
                 LenField(3, LenField(1, "t") + LenField(2, std::string("\xff\0", 2))), &ctx);
    EXPECT_TRUE(st.ok()) << st.error_message();
}

TEST_F(Rpc, MissingRequestRejected)
{
    for (const char *method : {"/test.Echo/Unary", "/test.Echo/ServerStream"}) {
        grpc::ClientContext ctx;
        grpc::ByteBuffer resp;
        RpcMethod m(method, RpcMethod::CLIENT_STREAMING);
        std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> w(
            grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel_.get(), m, &ctx,
                                                                          &resp));
        w->WritesDone();
        grpc::Status st = w->Finish();
        EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
        Details d = GetDetails(ctx);
        ASSERT_TRUE(d.present);
        EXPECT_EQ(d.info.reason(), "MALFORMED");
    }
}

TEST_F(Rpc, UnknownMethodUnimplemented)
{
    for (const char *method : {"/test.Echo/Nope", "/other.Service/Method"}) {
        grpc::ClientContext ctx;
        // Answered, not left to the deadline: the code would be
        // DEADLINE_EXCEEDED.
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(kWaitMs));
        HReq resp;
        grpc::Status st = Unary(channel_.get(), method, Req("x"), &resp, &ctx);
        EXPECT_EQ(st.error_code(), grpc::StatusCode::UNIMPLEMENTED) << method;
        Details d = GetDetails(ctx);
        ASSERT_TRUE(d.present);
        EXPECT_EQ(d.info.reason(), "UNIMPLEMENTED");
    }
}

TEST_F(Rpc, OversizedRequestRejected)
{
    grpc::ClientContext ctx;
    HReq resp;
    grpc::Status st = Unary(channel_.get(), "/test.Echo/Unary",
                            Req(std::string(5 * 1024 * 1024, 'x')), &resp, &ctx);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    // Just under the ceiling still passes.
    grpc::ClientContext ctx2;
    std::string big(4 * 1024 * 1024, 'y');
    st = Unary(channel_.get(), "/test.Echo/Unary", Req(big), &resp, &ctx2);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.service().size(), big.size());
}

TEST_F(Rpc, OversizedResponseIsSizeCap)
{
    grpc::ClientContext ctx;
    HReq resp;
    grpc::Status st =
        Unary(channel_.get(), "/test.Echo/Big", Req(std::to_string(5 * 1024 * 1024)), &resp, &ctx);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    Details d = GetDetails(ctx);
    ASSERT_TRUE(d.present);
    EXPECT_EQ(d.info.reason(), "SIZE_CAP");
}

// ws_call_fail while a send is in flight: the status follows the send.
TEST_F(Rpc, FailQueuedBehindSend)
{
    grpc::ClientContext ctx;
    RpcMethod m("/test.Echo/FailAfterSend", RpcMethod::SERVER_STREAMING);
    std::unique_ptr<grpc::ClientReader<HReq>> r(
        grpc::internal::ClientReaderFactory<HReq>::Create(channel_.get(), m, &ctx, Req("")));
    HReq msg;
    ASSERT_TRUE(r->Read(&msg));
    EXPECT_EQ(msg.service(), "first");
    EXPECT_FALSE(r->Read(&msg));
    grpc::Status st = r->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    Details d = GetDetails(ctx);
    ASSERT_TRUE(d.present);
    EXPECT_EQ(d.info.reason(), "CONFLICT"); // the second send got -EBUSY
    EXPECT_EQ(d.meta["step"], "after-send");
}

TEST_F(Rpc, ConcurrentCalls)
{
    std::atomic<int> ok{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; t++) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < 25; i++) {
                grpc::ClientContext ctx;
                HReq resp;
                std::string s = std::to_string(t * 1000 + i);
                const char *method = i % 5 == 0 ? "/test.Echo/Delayed" : "/test.Echo/Unary";
                grpc::Status st =
                    Unary(channel_.get(), method, Req(i % 5 == 0 ? "20" : s), &resp, &ctx);
                if (st.ok() && resp.service() == (i % 5 == 0 ? "20" : s))
                    ok++;
            }
        });
    }
    for (auto &th : threads)
        th.join();
    EXPECT_EQ(ok.load(), 8 * 25);
}

TEST(RpcServer, UnixSocket)
{
    std::string path = "/tmp/ws-rpc-test-" + std::to_string(getpid()) + ".sock";
    unlink(path.c_str());
    ServerProcess server;
    ASSERT_EQ(server.Start({"--listen", "unix:" + path}), "");
    EXPECT_EQ(server.port(), 0);
    auto ch = Connect("unix:" + path);
    grpc::ClientContext ctx;
    HReq resp;
    grpc::Status st = Unary(ch.get(), "/test.Echo/Unary", Req("over unix"), &resp, &ctx);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.service(), "over unix");
    EXPECT_TRUE(server.CleanExit(server.Terminate(kWaitMs, nullptr, nullptr)));
    unlink(path.c_str());
}

// Whether this host has an IPv6 loopback, found out without the server:
// "" when [::1] can be bound, else why not.
std::string Ipv6LoopbackMissing()
{
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return std::string("socket(AF_INET6): ") + strerror(errno);
    struct sockaddr_in6 sa = {};
    sa.sin6_family = AF_INET6;
    sa.sin6_addr = in6addr_loopback;
    std::string why;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        why = std::string("bind([::1]:0): ") + strerror(errno);
    close(fd);
    return why;
}

TEST(RpcServer, Ipv6Loopback)
{
    std::string missing = Ipv6LoopbackMissing();
    if (!missing.empty())
        GTEST_SKIP() << "this host has no IPv6 loopback (" << missing << ")";
    // [::1] works here: the server must serve on it.
    ServerProcess server;
    ASSERT_EQ(server.Start({"--listen", "[::1]:0"}), "");
    EXPECT_GT(server.port(), 0);
    auto ch = Connect("ipv6:[::1]:" + std::to_string(server.port()));
    grpc::ClientContext ctx;
    HReq resp;
    grpc::Status st = Unary(ch.get(), "/test.Echo/Unary", Req("v6"), &resp, &ctx);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.service(), "v6");
    EXPECT_TRUE(server.CleanExit(server.Terminate(kWaitMs, nullptr, nullptr)));
}

// An address that cannot be bound: the server says why on stderr and exits
// non-zero by itself, without ever serving.
TEST(RpcServer, BindFailureReported)
{
    ServerProcess server;
    EXPECT_NE(server.Start({"--listen", "256.0.0.1:0"}), "");
    int status = server.WaitExit(kWaitMs);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << DescribeStatus(status);
    EXPECT_NE(server.Stderr().find("ws_rpc_server_"), std::string::npos) << server.Stderr();
}

// SIGTERM with an idle client connected: the drain does not wait for the
// grace period (far longer than the wait for the exit).
TEST(RpcServer, DrainIdleIsQuick)
{
    ServerProcess server;
    ASSERT_EQ(server.Start({"--listen", "127.0.0.1:0", "--grace-ms", "600000"}), "");
    auto ch = Connect("127.0.0.1:" + std::to_string(server.port()));
    grpc::ClientContext ctx;
    HReq resp;
    ASSERT_TRUE(Unary(ch.get(), "/test.Echo/Unary", Req("x"), &resp, &ctx).ok());
    std::string last;
    int status = server.Terminate(kWaitMs, &last, nullptr);
    EXPECT_TRUE(server.CleanExit(status));
    EXPECT_EQ(last.rfind("live_calls=0 ", 0), 0u) << last;
}

// SIGTERM while calls that finish within the grace period are in flight:
// every one completes OK, and the drain ends as soon as they have (long
// before the grace period, which is far longer than the wait for the exit).
TEST(RpcServer, DrainLetsCallsFinish)
{
    ServerProcess server;
    ASSERT_EQ(server.Start({"--listen", "127.0.0.1:0", "--grace-ms", "600000"}), "");
    auto ch = Connect("127.0.0.1:" + std::to_string(server.port()));
    auto stat = [&](const char *name) {
        grpc::ClientContext ctx;
        HResp resp;
        Unary(ch.get(), "/test.Echo/Stats", Req(name), &resp, &ctx);
        return (long)resp.status();
    };

    const int n = 6;
    std::atomic<int> ok{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < n; i++) {
        threads.emplace_back([&, i] {
            grpc::ClientContext ctx;
            HReq resp;
            std::string ms = std::to_string(200 + 50 * i);
            grpc::Status st = Unary(ch.get(), "/test.Echo/Delayed", Req(ms), &resp, &ctx);
            if (st.ok() && resp.service() == ms)
                ok++;
            else
                ADD_FAILURE() << st.error_code() << ": " << st.error_message();
        });
    }
    ASSERT_TRUE(WaitFor([&] { return stat("live") >= n + 1; }, kWaitMs));

    std::string last;
    int status = server.Terminate(kWaitMs, &last, nullptr);
    for (auto &t : threads)
        t.join();
    EXPECT_TRUE(server.CleanExit(status));
    EXPECT_EQ(ok.load(), n);
    EXPECT_EQ(last.rfind("live_calls=0 ", 0), 0u) << last;
}

// SIGTERM while calls are in flight: a call that finishes within the grace
// period completes normally; one that never would is cancelled when the
// grace runs out (its handler sees on_cancel); the process exits 0 with no
// call left.
TEST(RpcServer, DrainInFlight)
{
    ServerProcess server;
    ASSERT_EQ(server.Start({"--listen", "127.0.0.1:0", "--grace-ms", "1000"}), "");
    auto ch = Connect("127.0.0.1:" + std::to_string(server.port()));
    auto stat = [&](const char *name) {
        grpc::ClientContext ctx;
        HResp resp;
        Unary(ch.get(), "/test.Echo/Stats", Req(name), &resp, &ctx);
        return (long)resp.status();
    };

    grpc::Status slow_st, delayed_st;
    HReq delayed_resp;
    std::thread slow([&] {
        grpc::ClientContext ctx;
        HReq resp;
        slow_st = Unary(ch.get(), "/test.Echo/Slow", Req("x"), &resp, &ctx);
    });
    std::thread delayed([&] {
        grpc::ClientContext ctx;
        delayed_st = Unary(ch.get(), "/test.Echo/Delayed", Req("500"), &delayed_resp, &ctx);
    });
    ASSERT_TRUE(WaitFor([&] { return stat("slow_started") == 1 && stat("live") >= 3; }, kWaitMs));

    std::string last;
    long ms = -1;
    // The slow call never ends by itself: only the grace running out lets
    // the server exit within the wait.
    int status = server.Terminate(kWaitMs, &last, &ms);
    slow.join();
    delayed.join();

    EXPECT_TRUE(server.CleanExit(status));
    EXPECT_GE(ms, 900); // the slow call held the drain for the grace period
    EXPECT_EQ(last.rfind("live_calls=0 ", 0), 0u) << last;
    long started = -1, destroyed = -2, cancelled = -1;
    sscanf(last.c_str(), "live_calls=%*d started=%ld destroyed=%ld cancelled=%ld", &started,
           &destroyed, &cancelled);
    EXPECT_EQ(started, destroyed) << last;
    EXPECT_EQ(cancelled, 1) << last; // the slow call's on_cancel

    EXPECT_TRUE(delayed_st.ok()) << delayed_st.error_message();
    EXPECT_EQ(delayed_resp.service(), "500");
    // grpc_server_cancel_all_calls drops the connection: UNAVAILABLE.
    EXPECT_TRUE(slow_st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                slow_st.error_code() == grpc::StatusCode::CANCELLED)
        << slow_st.error_code() << ": " << slow_st.error_message();
}

} // namespace

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s TEST_SERVER\n", argv[0]);
        return 2;
    }
    g_server_path = argv[1];
    signal(SIGPIPE, SIG_IGN);
    return RUN_ALL_TESTS();
}
