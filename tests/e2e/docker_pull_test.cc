// Image pulls of the docker provider against a hostile registry: a server
// in this test at 127.0.0.1:PORT (a registry the daemon speaks to without
// TLS verification, being on loopback) that accepts connections and never
// answers. An image named 127.0.0.1:PORT/stall:latest makes the real
// dockerd connect to it when, and only when, the server pulls. Checked:
// the Open waits for the pull no longer than its deadline and says so, the
// pull holds neither an RPC thread nor another tenant's share of the pool,
// nothing of the Open is left behind, and without the operator's pull
// policy nothing reaches the registry at all.
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <curl/curl.h>
#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;
using Clock = std::chrono::steady_clock;

namespace
{

const char *const kTokenA = "tok-pull-a-0123456789";
const char *const kTokenB = "tok-pull-b-9876543210";
// The client deadline of a pulling Open, and how much later than it the
// Open may return (the answer's way back, the clean-up, a loaded machine).
const auto kDeadline = std::chrono::seconds(3);
const auto kSlack = std::chrono::seconds(2);
// Calls that must never hang the test.
const auto kCallTimeout = std::chrono::seconds(60);

std::string TokensFile()
{
    std::string path = wstest::MakeTempDir("tokens") + "/tokens";
    wstest::WriteHostFile(path, "a " + wstest::Sha256Hex(kTokenA) + "\nb " +
                                    wstest::Sha256Hex(kTokenB) + "\n");
    return path;
}

// A registry that never answers: it accepts every connection on
// 127.0.0.1:<port> and holds it, reading nothing, until it is destroyed.
class SilentRegistry
{
  public:
    SilentRegistry()
    {
        fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof(a);
        if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr *>(&a), sizeof(a)) < 0 ||
            listen(fd_, 64) < 0 || getsockname(fd_, reinterpret_cast<sockaddr *>(&a), &len) < 0)
            ADD_FAILURE() << "cannot listen on 127.0.0.1: " << strerror(errno);
        port_ = std::to_string(ntohs(a.sin_port));
        stop_ = eventfd(0, EFD_CLOEXEC);
        thread_ = std::thread([this] { Serve(); });
    }
    ~SilentRegistry()
    {
        uint64_t one = 1;
        (void)!write(stop_, &one, sizeof(one));
        thread_.join();
        for (int c : held_)
            close(c);
        close(fd_);
        close(stop_);
    }
    std::string image() const
    {
        return "127.0.0.1:" + port_ + "/stall:latest";
    }
    // Connections accepted so far, counting those still in the listen
    // queue.
    int Accepted()
    {
        std::lock_guard<std::mutex> g(lock_);
        Drain();
        return static_cast<int>(held_.size());
    }
    // Polls until at least n were accepted or timeout passes.
    int WaitAccepted(int n, std::chrono::milliseconds timeout)
    {
        auto until = Clock::now() + timeout;
        int got;
        while ((got = Accepted()) < n && Clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return got;
    }

  private:
    void Drain()
    {
        int c;
        while ((c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0)
            held_.push_back(c);
    }
    void Serve()
    {
        pollfd p[2] = {{fd_, POLLIN, 0}, {stop_, POLLIN, 0}};
        while (poll(p, 2, -1) >= 0 && !(p[1].revents & POLLIN)) {
            std::lock_guard<std::mutex> g(lock_);
            Drain();
        }
    }

    int fd_ = -1, stop_ = -1;
    std::string port_;
    std::mutex lock_;
    std::vector<int> held_;
    std::thread thread_;
};

size_t Collect(char *p, size_t size, size_t n, void *ud)
{
    static_cast<std::string *>(ud)->append(p, size * n);
    return size * n;
}

// How many containers (all states) the daemon has with this server's
// label, asked of the daemon itself.
int ContainersOfServer(const std::string &state_dir)
{
    std::string id = wstest::ReadHostFile(state_dir + "/server-id");
    std::string filter = "{\"label\":[\"dev.workspaced.server=" + id + "\"]}";
    std::string body;
    CURL *c = curl_easy_init();
    char *enc = curl_easy_escape(c, filter.c_str(), 0);
    std::string url = std::string("http://docker/containers/json?all=true&filters=") + enc;
    curl_free(enc);
    curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, "/var/run/docker.sock");
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    EXPECT_TRUE(rc == CURLE_OK && status == 200) << "the daemon did not list containers: " << body;
    // One object per container, each with its "Id".
    int n = 0;
    for (size_t at = body.find("\"Id\""); at != std::string::npos; at = body.find("\"Id\"", at + 1))
        n++;
    return id.size() == 16 ? n : -1;
}

// Entries of the server's workspace directory.
int WorkspaceDirs(const std::string &state_dir)
{
    DIR *d = opendir((state_dir + "/workspaces").c_str());
    int n = 0;
    if (!d)
        return -1;
    while (dirent *e = readdir(d))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

// A docker Open of `image` (if-not-present) with this deadline.
grpc::Status OpenImage(Workspaces::Stub *stub, const std::string &image,
                       std::chrono::milliseconds deadline)
{
    OpenRequest req;
    req.mutable_docker()->set_image(image);
    req.mutable_capabilities()->mutable_fs();
    OpenResponse resp;
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    return stub->Open(&ctx, req, &resp);
}

class DockerPullTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        curl_global_init(CURL_GLOBAL_DEFAULT);
    }
};

// Tenant A opens three workspaces of the stalling image at once, more than
// the server's two RPC threads; A may run one daemon job at a time. Every
// Open ends DEADLINE_EXCEEDED in time, the one whose pull ran with the
// server's own answer; meanwhile tenant B is served (ListProviders on the
// daemon lane, Stat on a memory workspace); afterwards nothing of A's
// Opens exists.
TEST_F(DockerPullTest, PullOutlastingTheDeadlineEndsTheOpenInTimeAndHoldsNoOneElse)
{
    SilentRegistry registry;
    wstest::Server srv({"--tokens-file", TokensFile(), "--policy-docker-pull", "--threads", "2",
                        "--work-daemon-threads", "2", "--work-tenant-running", "1",
                        "--tenant-max-workspaces", "1"});
    auto cha = srv.Channel(kTokenA), chb = srv.Channel(kTokenB);
    auto ws_a = Workspaces::NewStub(cha);
    auto ws_b = Workspaces::NewStub(chb);
    auto fs_b = FileSystem::NewStub(chb);
    auto pv_b = Providers::NewStub(chb);
    wstest::Ws b = wstest::Open(ws_b.get(), "memory");
    ASSERT_TRUE(wstest::Write(fs_b.get(), b.id, "f", "b's file").ok());

    const int kOpens = 3;
    std::atomic<int> a_done{0};
    std::vector<grpc::Status> statuses(kOpens);
    std::vector<Clock::duration> took(kOpens);
    std::vector<std::thread> opens;
    for (int i = 0; i < kOpens; i++)
        opens.emplace_back([&, i] {
            auto t0 = Clock::now();
            statuses[i] = OpenImage(ws_a.get(), registry.image(), kDeadline);
            took[i] = Clock::now() - t0;
            a_done++;
        });

    // A pull is under way once the daemon has reached the registry.
    ASSERT_GE(registry.WaitAccepted(1, kDeadline), 1) << "the daemon never reached the registry";
    {
        ListProvidersResponse resp;
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
        grpc::Status s = pv_b->ListProviders(&ctx, ListProvidersRequest(), &resp);
        EXPECT_TRUE(s.ok()) << s.error_message();
        EXPECT_EQ(a_done.load(), 0) << "B's ListProviders was answered only after A's Opens ended";
    }
    {
        StatRequest req;
        req.set_workspace_id(b.id);
        req.set_path("f");
        StatResponse resp;
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
        grpc::Status s = fs_b->Stat(&ctx, req, &resp);
        EXPECT_TRUE(s.ok()) << s.error_message();
        EXPECT_EQ(a_done.load(), 0) << "B's Stat was answered only after A's Opens ended";
    }
    for (auto &t : opens)
        t.join();

    int answered = 0;
    for (int i = 0; i < kOpens; i++) {
        EXPECT_EQ(statuses[i].error_code(), StatusCode::DEADLINE_EXCEEDED)
            << statuses[i].error_message();
        EXPECT_LT(took[i], kDeadline + kSlack)
            << "Open " << i << " took "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took[i]).count() << " ms";
        // The server's own answer, not the client's timer: it has details.
        wstest::Error e = wstest::Decode(statuses[i]);
        if (e.reason.empty())
            continue;
        answered++;
        EXPECT_EQ(e.reason, "DEADLINE") << e.message;
        EXPECT_EQ(e.metadata["image"], registry.image()) << e.message;
        EXPECT_NE(e.message.find("deadline"), std::string::npos) << e.message;
    }
    EXPECT_GE(answered, 1) << "no Open was ended by the server before the client's deadline";

    // Nothing of A's Opens: no workspace, no directory, no container, and
    // its one workspace slot is free.
    ListResponse list;
    ClientContext lctx;
    ASSERT_TRUE(ws_a->List(&lctx, ListRequest(), &list).ok());
    EXPECT_EQ(list.workspaces_size(), 0);
    EXPECT_EQ(WorkspaceDirs(srv.state_dir()), 0);
    EXPECT_EQ(ContainersOfServer(srv.state_dir()), 0);
    wstest::Ws a = wstest::Open(ws_a.get(), "memory");
    EXPECT_FALSE(a.id.empty()) << "A's workspace slot was not given back";
    // A clean exit: no pull left running past the drain, and under the
    // sanitizers no report.
    EXPECT_EQ(srv.Stop(), 0) << wstest::ReadHostFile(srv.stderr_path());
}

// Without the operator's docker-pull policy an Open of a missing image is
// refused and the registry sees no connection at all; the same Open under
// a server that allows pulls does reach it.
TEST_F(DockerPullTest, NoPullReachesTheRegistryWithoutThePolicy)
{
    SilentRegistry registry;
    {
        wstest::Server srv;
        auto ws = srv.workspaces();
        grpc::Status s = OpenImage(ws.get(), registry.image(), kCallTimeout);
        EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "WORKSPACE_FAILED");
        EXPECT_EQ(wstest::Decode(s).metadata["rule"], "docker-pull") << s.error_message();
        EXPECT_EQ(registry.Accepted(), 0) << "the daemon was asked to pull without the policy";
        EXPECT_EQ(ContainersOfServer(srv.state_dir()), 0);
    }
    wstest::Server srv({"--policy-docker-pull"});
    auto ws = srv.workspaces();
    grpc::Status s = OpenImage(ws.get(), registry.image(), kDeadline);
    EXPECT_EQ(s.error_code(), StatusCode::DEADLINE_EXCEEDED) << s.error_message();
    EXPECT_GE(registry.Accepted(), 1) << "with pulls allowed the daemon did not reach the registry";
    EXPECT_EQ(srv.Stop(), 0) << wstest::ReadHostFile(srv.stderr_path());
}

} // namespace
