// The Docker HTTP client: against the real daemon at /var/run/docker.sock
// (the suite's setup starts it; these tests fail, never skip, without it)
// and against a fake HTTP server on a unix socket for exact bytes.
#include <gtest/gtest.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "server/docker/http.h"
#include "server/events/pump.h"
}

namespace
{

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const char kDockerSock[] = "/var/run/docker.sock";

// An asynchronous call's observations, filled in on the pump thread.
struct Recorder {
    std::mutex mu;
    std::condition_variable cv;
    std::string body;
    int body_calls = 0;
    int done_calls = 0;
    int err = 1;
    long status = -1;
    // on_body returns WS_DOCKER_HTTP_PAUSE on its first call when set.
    bool pause_first = false;
    int pauses = 0;

    static int OnBody(void *arg, const char *data, size_t len)
    {
        auto *r = static_cast<Recorder *>(arg);
        std::lock_guard<std::mutex> g(r->mu);
        r->body_calls++;
        if (r->pause_first && r->pauses == 0) {
            r->pauses++;
            r->cv.notify_all();
            return WS_DOCKER_HTTP_PAUSE;
        }
        r->body.append(data, len);
        r->cv.notify_all();
        return 0;
    }
    static void OnDone(void *arg, int err, long status)
    {
        auto *r = static_cast<Recorder *>(arg);
        std::lock_guard<std::mutex> g(r->mu);
        r->done_calls++;
        r->err = err;
        r->status = status;
        r->cv.notify_all();
    }
    bool WaitDone(milliseconds t)
    {
        std::unique_lock<std::mutex> l(mu);
        return cv.wait_for(l, t, [&] { return done_calls > 0; });
    }
    ws_docker_http_request Request(ws_docker_http_method m, const char *path)
    {
        ws_docker_http_request req{};
        req.method = m;
        req.path = path;
        req.on_body = OnBody;
        req.on_done = OnDone;
        req.arg = this;
        return req;
    }
};

ws_docker_http_request Get(const char *path)
{
    ws_docker_http_request req{};
    req.method = WS_DOCKER_HTTP_GET;
    req.path = path;
    return req;
}

std::string Now(int delta_s)
{
    return std::to_string((long)time(nullptr) + delta_s);
}

bool DaemonReachable(std::string *why)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, kDockerSock);
    bool ok = connect(fd, (sockaddr *)&sa, sizeof(sa)) == 0;
    if (!ok)
        *why = std::string("connect(") + kDockerSock + "): " + strerror(errno);
    close(fd);
    return ok;
}

class Base : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        ASSERT_EQ(0, ws_pump_new(&pump_));
    }
    void TearDown() override
    {
        ws_docker_http_free(h_);
        ws_pump_free(pump_);
    }
    void NewClient(const char *unix_path, unsigned calls_max = 0)
    {
        ws_docker_http_config cfg;
        ws_docker_http_config_default(&cfg);
        snprintf(cfg.unix_path, sizeof(cfg.unix_path), "%s", unix_path);
        cfg.calls_max = calls_max;
        ASSERT_EQ(0, ws_docker_http_new(pump_, &cfg, &h_));
    }
    ws_pump *pump_ = nullptr;
    ws_docker_http *h_ = nullptr;
};

class DockerHttp : public Base
{
  protected:
    void SetUp() override
    {
        Base::SetUp();
        std::string why;
        if (!DaemonReachable(&why))
            FAIL() << "the Docker daemon is not reachable (" << why
                   << "); start it with: bash tests/fixtures/dockerd.sh";
        NewClient(kDockerSock);
    }
};

TEST_F(DockerHttp, Ping)
{
    char *body = nullptr;
    size_t len = 0;
    long status = 0;
    auto req = Get("/_ping");
    ASSERT_EQ(0, ws_docker_http_call_sync(h_, &req, &body, &len, &status, 0));
    EXPECT_EQ(200, status);
    EXPECT_EQ(2u, len);
    EXPECT_STREQ("OK", body);
    free(body);
}

TEST_F(DockerHttp, VersionParses)
{
    char *body = nullptr;
    size_t len = 0;
    long status = 0;
    auto req = Get("/version");
    ASSERT_EQ(0, ws_docker_http_call_sync(h_, &req, &body, &len, &status, 0));
    EXPECT_EQ(200, status);
    json_error_t jerr;
    json_t *doc = json_loadb(body, len, 0, &jerr);
    ASSERT_NE(nullptr, doc) << jerr.text;
    json_t *v = json_object_get(doc, "ApiVersion");
    ASSERT_TRUE(json_is_string(v));
    EXPECT_GT(strlen(json_string_value(v)), 0u);
    json_decref(doc);
    free(body);
}

TEST_F(DockerHttp, NotFoundIsAStatusNotAnError)
{
    long status = 0;
    auto req = Get("/no-such-endpoint");
    ASSERT_EQ(0, ws_docker_http_call_sync(h_, &req, nullptr, nullptr, &status, 0));
    EXPECT_EQ(404, status);
}

TEST_F(DockerHttp, ManyConcurrentSyncCalls)
{
    constexpr int kThreads = 5, kPerThread = 10;
    std::atomic<int> ok{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; t++)
        ts.emplace_back([&] {
            for (int i = 0; i < kPerThread; i++) {
                char *body = nullptr;
                size_t len = 0;
                long status = 0;
                auto req = Get(i % 2 ? "/_ping" : "/version");
                if (ws_docker_http_call_sync(h_, &req, &body, &len, &status, 0) == 0 &&
                    status == 200 && len > 0)
                    ok++;
                free(body);
            }
        });
    for (auto &t : ts)
        t.join();
    EXPECT_EQ(kThreads * kPerThread, ok.load());
}

TEST_F(DockerHttp, StreamingEventsWindow)
{
    Recorder r;
    std::string path = "/events?since=" + Now(-600) + "&until=" + Now(1);
    auto req = r.Request(WS_DOCKER_HTTP_GET, path.c_str());
    ASSERT_EQ(0, ws_docker_http_start(h_, &req, nullptr));
    ASSERT_TRUE(r.WaitDone(milliseconds(10000)));
    EXPECT_EQ(0, r.err);
    EXPECT_EQ(200, r.status);
    // Newline-delimited JSON, possibly empty when nothing happened.
    size_t pos = 0;
    while (pos < r.body.size()) {
        size_t nl = r.body.find('\n', pos);
        if (nl == std::string::npos)
            nl = r.body.size();
        if (nl > pos) {
            json_error_t jerr;
            json_t *ev = json_loadb(r.body.data() + pos, nl - pos, 0, &jerr);
            EXPECT_NE(nullptr, ev) << jerr.text;
            json_decref(ev);
        }
        pos = nl + 1;
    }
}

TEST_F(DockerHttp, StreamingContainersList)
{
    Recorder r;
    auto req = r.Request(WS_DOCKER_HTTP_GET, "/containers/json?all=1");
    ASSERT_EQ(0, ws_docker_http_start(h_, &req, nullptr));
    ASSERT_TRUE(r.WaitDone(milliseconds(10000)));
    EXPECT_EQ(0, r.err);
    EXPECT_EQ(200, r.status);
    EXPECT_GE(r.body_calls, 1);
    json_t *doc = json_loadb(r.body.data(), r.body.size(), 0, nullptr);
    EXPECT_TRUE(json_is_array(doc));
    json_decref(doc);
}

TEST_F(DockerHttp, CancelEndlessStream)
{
    Recorder r;
    ws_docker_http_call *call = nullptr;
    auto req = r.Request(WS_DOCKER_HTTP_GET, "/events");
    req.timeout_ms = WS_DOCKER_HTTP_NO_TIMEOUT;
    ASSERT_EQ(0, ws_docker_http_start(h_, &req, &call));
    std::this_thread::sleep_for(milliseconds(300));
    {
        std::lock_guard<std::mutex> g(r.mu);
        EXPECT_EQ(0, r.done_calls) << "GET /events without until ended by itself";
    }
    // /events without `until` never ends by itself: only the cancel ends it.
    ASSERT_EQ(0, ws_docker_http_cancel(call));
    ASSERT_TRUE(r.WaitDone(milliseconds(30000)));
    EXPECT_EQ(-ECANCELED, r.err);
    // A second cancel after the end changes nothing.
    EXPECT_EQ(0, ws_docker_http_cancel(call));
    std::this_thread::sleep_for(milliseconds(100));
    {
        std::lock_guard<std::mutex> g(r.mu);
        EXPECT_EQ(1, r.done_calls);
    }
    ws_docker_http_call_unref(call);
}

TEST_F(DockerHttp, TotalTimeout)
{
    Recorder r;
    auto req = r.Request(WS_DOCKER_HTTP_GET, "/events");
    req.timeout_ms = 500;
    auto t0 = Clock::now();
    ASSERT_EQ(0, ws_docker_http_start(h_, &req, nullptr));
    // /events without `until` never ends by itself: only the timeout ends it.
    ASSERT_TRUE(r.WaitDone(milliseconds(30000)));
    auto took = Clock::now() - t0;
    EXPECT_EQ(-ETIMEDOUT, r.err);
    EXPECT_EQ(200, r.status); // the headers had arrived
    EXPECT_GE(took, milliseconds(450));
}

TEST_F(DockerHttp, PauseAndResume)
{
    Recorder r;
    r.pause_first = true;
    ws_docker_http_call *call = nullptr;
    auto req = r.Request(WS_DOCKER_HTTP_GET, "/info");
    ASSERT_EQ(0, ws_docker_http_start(h_, &req, &call));
    {
        std::unique_lock<std::mutex> l(r.mu);
        ASSERT_TRUE(r.cv.wait_for(l, milliseconds(5000), [&] { return r.pauses == 1; }));
    }
    std::this_thread::sleep_for(milliseconds(300));
    {
        std::lock_guard<std::mutex> g(r.mu);
        EXPECT_EQ(1, r.body_calls) << "bytes delivered while paused";
        EXPECT_EQ(0, r.done_calls);
        EXPECT_TRUE(r.body.empty());
    }
    ASSERT_EQ(0, ws_docker_http_resume(call));
    ASSERT_TRUE(r.WaitDone(milliseconds(5000)));
    EXPECT_EQ(0, r.err);
    EXPECT_EQ(200, r.status);
    // The refused bytes came again: the whole document is there.
    json_t *doc = json_loadb(r.body.data(), r.body.size(), 0, nullptr);
    ASSERT_TRUE(json_is_object(doc)) << r.body;
    EXPECT_TRUE(json_is_string(json_object_get(doc, "ID")));
    json_decref(doc);
    ws_docker_http_call_unref(call);
}

// A second watch on the same pump is served while calls are in flight.
struct PipeWatch {
    int fds[2] = {-1, -1};
    ws_pump_watch w{};
    std::atomic<int> seen{0};
    static void Cb(void *arg, uint32_t)
    {
        auto *p = static_cast<PipeWatch *>(arg);
        char c;
        while (read(p->fds[0], &c, 1) == 1)
            p->seen++;
    }
};

TEST_F(DockerHttp, PumpKeepsServingOtherWatches)
{
    PipeWatch pw;
    ASSERT_EQ(0, pipe2(pw.fds, O_CLOEXEC | O_NONBLOCK));
    pw.w.fd = pw.fds[0];
    pw.w.cb = PipeWatch::Cb;
    pw.w.arg = &pw;
    ASSERT_EQ(0, ws_pump_watch_add(pump_, &pw.w, true));

    Recorder stream;
    ws_docker_http_call *call = nullptr;
    auto req = stream.Request(WS_DOCKER_HTTP_GET, "/events");
    req.timeout_ms = WS_DOCKER_HTTP_NO_TIMEOUT;
    ASSERT_EQ(0, ws_docker_http_start(h_, &req, &call));
    std::atomic<bool> stop{false};
    std::thread syncs([&] {
        while (!stop) {
            auto r2 = Get("/_ping");
            long st = 0;
            ws_docker_http_call_sync(h_, &r2, nullptr, nullptr, &st, 0);
        }
    });
    for (int i = 1; i <= 20; i++) {
        ASSERT_EQ(1, write(pw.fds[1], "x", 1));
        auto t0 = Clock::now();
        while (pw.seen.load() < i && Clock::now() - t0 < milliseconds(10000))
            std::this_thread::sleep_for(milliseconds(1));
        ASSERT_EQ(i, pw.seen.load()) << "the pump did not serve the pipe within 10 s";
        std::this_thread::sleep_for(milliseconds(20));
    }
    stop = true;
    syncs.join();
    ASSERT_EQ(0, ws_docker_http_cancel(call));
    ASSERT_TRUE(stream.WaitDone(milliseconds(2000)));
    EXPECT_EQ(-ECANCELED, stream.err);
    ws_docker_http_call_unref(call);
    ws_pump_watch_del(pump_, &pw.w);
    close(pw.fds[0]);
    close(pw.fds[1]);
}

TEST_F(DockerHttp, SyncOnPumpThreadIsRefused)
{
    struct Ctx {
        ws_docker_http *h;
        std::atomic<int> r{1};
    } ctx{h_};
    ASSERT_EQ(0, ws_pump_post(
                     pump_,
                     [](void *arg) {
                         auto *c = static_cast<Ctx *>(arg);
                         auto req = Get("/_ping");
                         c->r = ws_docker_http_call_sync(c->h, &req, nullptr, nullptr, nullptr, 0);
                     },
                     &ctx));
    auto t0 = Clock::now();
    while (ctx.r.load() == 1 && Clock::now() - t0 < milliseconds(30000))
        std::this_thread::sleep_for(milliseconds(5));
    EXPECT_EQ(-EDEADLK, ctx.r.load());
}

TEST_F(DockerHttp, CallsMaxIsEnforced)
{
    ws_docker_http_free(h_);
    h_ = nullptr;
    NewClient(kDockerSock, 2);
    Recorder a, b, c;
    ws_docker_http_call *ca = nullptr, *cb = nullptr;
    auto ra = a.Request(WS_DOCKER_HTTP_GET, "/events");
    ra.timeout_ms = WS_DOCKER_HTTP_NO_TIMEOUT;
    auto rb = b.Request(WS_DOCKER_HTTP_GET, "/events");
    rb.timeout_ms = WS_DOCKER_HTTP_NO_TIMEOUT;
    auto rc = c.Request(WS_DOCKER_HTTP_GET, "/_ping");
    ASSERT_EQ(0, ws_docker_http_start(h_, &ra, &ca));
    ASSERT_EQ(0, ws_docker_http_start(h_, &rb, &cb));
    EXPECT_EQ(-EBUSY, ws_docker_http_start(h_, &rc, nullptr));
    ASSERT_EQ(0, ws_docker_http_cancel(ca));
    ASSERT_TRUE(a.WaitDone(milliseconds(2000)));
    // A slot is free again.
    ASSERT_EQ(0, ws_docker_http_start(h_, &rc, nullptr));
    ASSERT_TRUE(c.WaitDone(milliseconds(5000)));
    EXPECT_EQ(0, c.err);
    EXPECT_EQ(200, c.status);
    ASSERT_EQ(0, ws_docker_http_cancel(cb));
    ASSERT_TRUE(b.WaitDone(milliseconds(2000)));
    EXPECT_EQ(1, c.done_calls);
    ws_docker_http_call_unref(ca);
    ws_docker_http_call_unref(cb);
}

// --- No daemon needed -------------------------------------------------------

class TempDir
{
  public:
    TempDir()
    {
        const char *base = getenv("TEST_TMPDIR");
        // sun_path is short: prefer /tmp when Bazel's tmpdir is deep.
        std::string tmpl = std::string(base && strlen(base) < 60 ? base : "/tmp") + "/wshttpXXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        if (mkdtemp(buf.data()))
            path_ = buf.data();
    }
    ~TempDir()
    {
        if (!path_.empty()) {
            std::string cmd = path_ + "/s";
            unlink(cmd.c_str());
            rmdir(path_.c_str());
        }
    }
    std::string Sock() const
    {
        return path_ + "/s";
    }

  private:
    std::string path_;
};

// Accepts connections on a unix socket, one per reply, records each
// request (headers and Content-Length body) and answers it with canned
// bytes, or holds the connection (never answers) until the client closes
// it.
class FakeServer
{
  public:
    struct Reply {
        std::string response;
        bool answer = true;
    };

    FakeServer(std::string response, bool answer = true)
        : FakeServer(std::vector<Reply>{{std::move(response), answer}})
    {
    }
    explicit FakeServer(std::vector<Reply> replies) : replies_(std::move(replies))
    {
        path_ = dir_.Sock();
        lfd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path_.c_str());
        if (bind(lfd_, (sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd_, 4) < 0)
            ADD_FAILURE() << "fake server: " << strerror(errno);
        if (pipe2(wake_, O_CLOEXEC) < 0)
            ADD_FAILURE() << "fake server: " << strerror(errno);
        accept_ = std::thread([this] { AcceptLoop(); });
    }
    ~FakeServer()
    {
        // Unblocks the accept loop and every held connection.
        if (write(wake_[1], "x", 1) < 0) {
        }
        accept_.join();
        {
            std::lock_guard<std::mutex> g(mu_);
            for (int fd : open_)
                shutdown(fd, SHUT_RDWR);
        }
        for (auto &t : conns_)
            t.join();
        close(lfd_);
        close(wake_[0]);
        close(wake_[1]);
    }
    const std::string &path() const
    {
        return path_;
    }
    // The first request ("" before it came).
    std::string Request()
    {
        std::lock_guard<std::mutex> g(mu_);
        return requests_.empty() ? "" : requests_[0];
    }
    size_t Requests()
    {
        std::lock_guard<std::mutex> g(mu_);
        return requests_.size();
    }
    // Waits (bounded) until `n` requests have been read in full.
    bool WaitRequests(size_t n, milliseconds t = milliseconds(30000))
    {
        std::unique_lock<std::mutex> l(mu_);
        return cv_.wait_for(l, t, [&] { return requests_.size() >= n; });
    }

  private:
    void AcceptLoop()
    {
        for (const Reply &reply : replies_) {
            pollfd p[2] = {{lfd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
            if (poll(p, 2, -1) <= 0 || p[1].revents)
                return;
            int fd = accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0)
                return;
            {
                std::lock_guard<std::mutex> g(mu_);
                open_.push_back(fd);
            }
            conns_.emplace_back([this, fd, &reply] { Serve(fd, reply); });
        }
    }
    void Serve(int fd, const Reply &reply)
    {
        std::string req;
        char buf[4096];
        size_t want = std::string::npos;
        while (req.size() < want) {
            ssize_t n = read(fd, buf, sizeof(buf));
            if (n <= 0)
                break;
            req.append(buf, (size_t)n);
            size_t end = req.find("\r\n\r\n");
            if (end != std::string::npos && want == std::string::npos) {
                size_t cl = req.find("Content-Length: ");
                size_t body = cl != std::string::npos && cl < end
                                  ? strtoul(req.c_str() + cl + 16, nullptr, 10)
                                  : 0;
                want = end + 4 + body;
            }
        }
        {
            std::lock_guard<std::mutex> g(mu_);
            requests_.push_back(req);
        }
        cv_.notify_all();
        if (reply.answer) {
            send(fd, reply.response.data(), reply.response.size(), MSG_NOSIGNAL);
        } else {
            while (read(fd, buf, sizeof(buf)) > 0) {
            }
        }
        std::lock_guard<std::mutex> g(mu_);
        open_.erase(std::find(open_.begin(), open_.end(), fd));
        close(fd);
    }
    TempDir dir_;
    std::string path_;
    std::vector<Reply> replies_;
    int lfd_ = -1;
    int wake_[2] = {-1, -1};
    std::thread accept_;
    std::vector<std::thread> conns_; // the accept thread's, joined after it
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::string> requests_;
    std::vector<int> open_;
};

class FakeHttp : public Base
{
};

TEST_F(FakeHttp, ExactRequestAndResponse)
{
    const std::string answer = "{\"Id\":\"abc\\u0000\"}\n";
    FakeServer srv("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: " +
                   std::to_string(answer.size()) + "\r\nConnection: close\r\n\r\n" + answer);
    NewClient(srv.path().c_str());
    const std::string json = "{\"Image\":\"alpine\",\"Cmd\":[\"sh\"]}";
    ws_docker_http_request req{};
    req.method = WS_DOCKER_HTTP_POST;
    req.path = "/v1.41/containers/create?name=ws-1";
    req.body = json.data();
    req.body_len = json.size();
    char *body = nullptr;
    size_t len = 0;
    long status = 0;
    ASSERT_EQ(0, ws_docker_http_call_sync(h_, &req, &body, &len, &status, 0));
    EXPECT_EQ(201, status);
    EXPECT_EQ(answer, std::string(body, len));
    free(body);
    std::string r = srv.Request();
    EXPECT_EQ(0u, r.find("POST /v1.41/containers/create?name=ws-1 HTTP/1.1\r\n")) << r;
    EXPECT_NE(std::string::npos, r.find("\r\nHost: localhost\r\n")) << r;
    EXPECT_NE(std::string::npos, r.find("\r\nContent-Type: application/json\r\n")) << r;
    EXPECT_NE(std::string::npos,
              r.find("\r\nContent-Length: " + std::to_string(json.size()) + "\r\n"))
        << r;
    EXPECT_EQ(std::string::npos, r.find("Expect:")) << r;
    EXPECT_EQ(json, r.substr(r.find("\r\n\r\n") + 4));
}

TEST_F(FakeHttp, DeleteWithoutBody)
{
    FakeServer srv("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
    NewClient(srv.path().c_str());
    ws_docker_http_request req{};
    req.method = WS_DOCKER_HTTP_DELETE;
    req.path = "/containers/x?force=1";
    char *body = nullptr;
    size_t len = 7;
    long status = 0;
    ASSERT_EQ(0, ws_docker_http_call_sync(h_, &req, &body, &len, &status, 0));
    EXPECT_EQ(204, status);
    EXPECT_EQ(0u, len);
    EXPECT_STREQ("", body);
    free(body);
    std::string r = srv.Request();
    EXPECT_EQ(0u, r.find("DELETE /containers/x?force=1 HTTP/1.1\r\n")) << r;
    EXPECT_EQ(std::string::npos, r.find("Content-Type")) << r;
}

TEST_F(FakeHttp, ChunkedBodyIsDecoded)
{
    FakeServer srv("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                   "5\r\nhello\r\n1\r\n \r\nb\r\nworld\r\nmore\r\n0\r\n\r\n");
    NewClient(srv.path().c_str());
    Recorder r;
    auto req = r.Request(WS_DOCKER_HTTP_GET, "/logs");
    ASSERT_EQ(0, ws_docker_http_start(h_, &req, nullptr));
    ASSERT_TRUE(r.WaitDone(milliseconds(5000)));
    EXPECT_EQ(0, r.err);
    EXPECT_EQ(200, r.status);
    EXPECT_EQ("hello world\r\nmore", r.body);
}

TEST_F(FakeHttp, BadChunkedEncodingIsProtocolError)
{
    FakeServer srv("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                   "zz\r\nhello\r\n0\r\n\r\n");
    NewClient(srv.path().c_str());
    auto req = Get("/x");
    EXPECT_EQ(-EPROTO, ws_docker_http_call_sync(h_, &req, nullptr, nullptr, nullptr, 0));
}

TEST_F(FakeHttp, BodyOverMaxIsRefused)
{
    std::string big(1000, 'a');
    FakeServer srv("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n" + big);
    NewClient(srv.path().c_str());
    auto req = Get("/big");
    char *body = reinterpret_cast<char *>(0x1);
    EXPECT_EQ(-EMSGSIZE, ws_docker_http_call_sync(h_, &req, &body, nullptr, nullptr, 999));
    EXPECT_EQ(reinterpret_cast<char *>(0x1), body) << "ret_body written on failure";
}

TEST_F(FakeHttp, BodyOfExactlyMaxIsAccepted)
{
    std::string big(1000, 'a');
    FakeServer srv("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                   "1f4\r\n" +
                   big.substr(0, 500) + "\r\n1f4\r\n" + big.substr(500) + "\r\n0\r\n\r\n");
    NewClient(srv.path().c_str());
    auto req = Get("/big");
    char *body = nullptr;
    size_t len = 0;
    ASSERT_EQ(0, ws_docker_http_call_sync(h_, &req, &body, &len, nullptr, 1000));
    EXPECT_EQ(big, std::string(body, len));
    free(body);
}

TEST_F(FakeHttp, NoAnswerTimesOut)
{
    FakeServer srv("", false);
    NewClient(srv.path().c_str());
    auto req = Get("/_ping");
    req.timeout_ms = 300;
    auto t0 = Clock::now();
    // The server never answers: only the timeout ends the call.
    EXPECT_EQ(-ETIMEDOUT, ws_docker_http_call_sync(h_, &req, nullptr, nullptr, nullptr, 0));
    EXPECT_GE(Clock::now() - t0, milliseconds(250));
}

TEST_F(FakeHttp, CloseWithoutAnswerIsReset)
{
    FakeServer srv("");
    NewClient(srv.path().c_str());
    auto req = Get("/_ping");
    EXPECT_EQ(-ECONNRESET, ws_docker_http_call_sync(h_, &req, nullptr, nullptr, nullptr, 0));
}

TEST_F(FakeHttp, NonexistentSocketIsENOENT)
{
    TempDir dir;
    NewClient(dir.Sock().c_str());
    auto req = Get("/_ping");
    long status = 7;
    EXPECT_EQ(-ENOENT, ws_docker_http_call_sync(h_, &req, nullptr, nullptr, &status, 0));
    EXPECT_EQ(7, status);
}

TEST_F(FakeHttp, SocketWithoutListenerIsECONNREFUSED)
{
    TempDir dir;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", dir.Sock().c_str());
    ASSERT_EQ(0, bind(fd, (sockaddr *)&sa, sizeof(sa)));
    NewClient(dir.Sock().c_str());
    auto req = Get("/_ping");
    EXPECT_EQ(-ECONNREFUSED, ws_docker_http_call_sync(h_, &req, nullptr, nullptr, nullptr, 0));
    close(fd);
}

TEST_F(FakeHttp, BadRequestsAreRefusedWithoutCallbacks)
{
    NewClient("/nonexistent/docker.sock");
    Recorder r;
    auto req = r.Request(WS_DOCKER_HTTP_GET, "no-slash");
    EXPECT_EQ(-EINVAL, ws_docker_http_start(h_, &req, nullptr));
    std::string longpath = "/" + std::string(WS_DOCKER_HTTP_PATH_MAX, 'a');
    req.path = longpath.c_str();
    EXPECT_EQ(-EINVAL, ws_docker_http_start(h_, &req, nullptr));
    req.path = "/a b";
    EXPECT_EQ(-EINVAL, ws_docker_http_start(h_, &req, nullptr));
    req.path = "/a\r\nX: y";
    EXPECT_EQ(-EINVAL, ws_docker_http_start(h_, &req, nullptr));
    std::string body(WS_DOCKER_HTTP_REQUEST_BODY_MAX + 1, ' ');
    req.path = "/containers/create";
    req.method = WS_DOCKER_HTTP_POST;
    req.body = body.data();
    req.body_len = body.size();
    EXPECT_EQ(-E2BIG, ws_docker_http_start(h_, &req, nullptr));
    auto sreq = Get("/_ping");
    sreq.timeout_ms = WS_DOCKER_HTTP_NO_TIMEOUT;
    EXPECT_EQ(-EINVAL, ws_docker_http_call_sync(h_, &sreq, nullptr, nullptr, nullptr, 0));
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_EQ(0, r.done_calls);
}

TEST_F(FakeHttp, PauseRedeliversExactBytes)
{
    FakeServer srv("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                   "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    NewClient(srv.path().c_str());
    Recorder r;
    r.pause_first = true;
    ws_docker_http_call *call = nullptr;
    auto req = r.Request(WS_DOCKER_HTTP_GET, "/logs?follow=1");
    ASSERT_EQ(0, ws_docker_http_start(h_, &req, &call));
    {
        std::unique_lock<std::mutex> l(r.mu);
        ASSERT_TRUE(r.cv.wait_for(l, milliseconds(5000), [&] { return r.pauses == 1; }));
    }
    std::this_thread::sleep_for(milliseconds(200));
    {
        std::lock_guard<std::mutex> g(r.mu);
        EXPECT_EQ(1, r.body_calls);
        EXPECT_EQ(0, r.done_calls);
    }
    ASSERT_EQ(0, ws_docker_http_resume(call));
    ASSERT_TRUE(r.WaitDone(milliseconds(5000)));
    EXPECT_EQ(0, r.err);
    EXPECT_EQ("hello world", r.body);
    // Resume after the end does nothing.
    EXPECT_EQ(0, ws_docker_http_resume(call));
    ws_docker_http_call_unref(call);
}

TEST_F(FakeHttp, OnBodyErrorAbortsTheCall)
{
    FakeServer srv("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
    NewClient(srv.path().c_str());
    struct Ctx {
        Recorder r;
        static int Body(void *, const char *, size_t)
        {
            return -EPIPE;
        }
    } ctx;
    auto req = ctx.r.Request(WS_DOCKER_HTTP_GET, "/x");
    req.on_body = Ctx::Body;
    ASSERT_EQ(0, ws_docker_http_start(h_, &req, nullptr));
    ASSERT_TRUE(ctx.r.WaitDone(milliseconds(5000)));
    EXPECT_EQ(-EPIPE, ctx.r.err);
    EXPECT_EQ(200, ctx.r.status);
}

TEST_F(FakeHttp, CancelRightAfterStart)
{
    FakeServer srv("", false);
    NewClient(srv.path().c_str());
    Recorder r;
    ws_docker_http_call *call = nullptr;
    auto req = r.Request(WS_DOCKER_HTTP_GET, "/x");
    ASSERT_EQ(0, ws_docker_http_start(h_, &req, &call));
    ASSERT_EQ(0, ws_docker_http_cancel(call));
    ASSERT_EQ(0, ws_docker_http_cancel(call));
    ASSERT_TRUE(r.WaitDone(milliseconds(30000)));
    std::this_thread::sleep_for(milliseconds(100));
    std::lock_guard<std::mutex> g(r.mu);
    EXPECT_EQ(1, r.done_calls);
    EXPECT_EQ(-ECANCELED, r.err);
    ws_docker_http_call_unref(call);
}

// on_done may start the next call (on the pump thread); free refuses new
// calls from the on_done it runs.
struct Chain {
    ws_docker_http *h = nullptr;
    Recorder second;
    int start_result = 1;
    static void Done(void *arg, int, long)
    {
        auto *c = static_cast<Chain *>(arg);
        auto req = c->second.Request(WS_DOCKER_HTTP_GET, "/_ping");
        c->start_result = ws_docker_http_start(c->h, &req, nullptr);
    }
};

TEST_F(DockerHttp, OnDoneMayStartTheNextCall)
{
    Chain chain;
    chain.h = h_;
    auto req = Get("/_ping");
    req.on_done = Chain::Done;
    req.arg = &chain;
    ASSERT_EQ(0, ws_docker_http_start(h_, &req, nullptr));
    ASSERT_TRUE(chain.second.WaitDone(milliseconds(5000)));
    EXPECT_EQ(0, chain.start_result);
    EXPECT_EQ(0, chain.second.err);
    EXPECT_EQ("OK", chain.second.body);
}

// Calls whose requests the server has read and holds: free ends them.
TEST_F(FakeHttp, FreeCancelsCallsInFlight)
{
    FakeServer srv({{"", false}, {"", false}});
    NewClient(srv.path().c_str());
    Recorder a, b;
    auto ra = a.Request(WS_DOCKER_HTTP_GET, "/events");
    ra.timeout_ms = WS_DOCKER_HTTP_NO_TIMEOUT;
    auto rb = b.Request(WS_DOCKER_HTTP_GET, "/events");
    rb.timeout_ms = WS_DOCKER_HTTP_NO_TIMEOUT;
    ws_docker_http_call *held = nullptr;
    ASSERT_EQ(0, ws_docker_http_start(h_, &ra, &held));
    ASSERT_EQ(0, ws_docker_http_start(h_, &rb, nullptr));
    ASSERT_TRUE(srv.WaitRequests(2)) << "the calls never reached the server";
    ws_docker_http_free(h_);
    h_ = nullptr;
    EXPECT_EQ(1, a.done_calls);
    EXPECT_EQ(-ECANCELED, a.err);
    EXPECT_EQ(1, b.done_calls);
    EXPECT_EQ(-ECANCELED, b.err);
    // The caller's reference outlives the client.
    ws_docker_http_call_unref(held);
}

// With one connection allowed, a second call waits for the first to end
// rather than open another.
TEST_F(FakeHttp, ConnectionsMaxQueuesCalls)
{
    FakeServer srv({{"", false},
                    {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK", true}});
    ws_docker_http_config cfg;
    ws_docker_http_config_default(&cfg);
    snprintf(cfg.unix_path, sizeof(cfg.unix_path), "%s", srv.path().c_str());
    cfg.connections_max = 1;
    ASSERT_EQ(0, ws_docker_http_new(pump_, &cfg, &h_));
    Recorder stream, ping;
    ws_docker_http_call *call = nullptr;
    auto rs = stream.Request(WS_DOCKER_HTTP_GET, "/events");
    rs.timeout_ms = WS_DOCKER_HTTP_NO_TIMEOUT;
    ASSERT_EQ(0, ws_docker_http_start(h_, &rs, &call));
    ASSERT_TRUE(srv.WaitRequests(1)) << "the first call never reached the server";
    auto rp = ping.Request(WS_DOCKER_HTTP_GET, "/_ping");
    ASSERT_EQ(0, ws_docker_http_start(h_, &rp, nullptr));
    EXPECT_FALSE(ping.WaitDone(milliseconds(300))) << "a second connection was opened";
    EXPECT_EQ(1u, srv.Requests()) << "a second connection was opened";
    ASSERT_EQ(0, ws_docker_http_cancel(call));
    ASSERT_TRUE(ping.WaitDone(milliseconds(30000)));
    EXPECT_EQ(0, ping.err);
    EXPECT_EQ("OK", ping.body);
    ASSERT_TRUE(stream.WaitDone(milliseconds(30000)));
    EXPECT_EQ(-ECANCELED, stream.err);
    ws_docker_http_call_unref(call);
}

// A call's on_done that starts another while the client is being freed is
// refused.
TEST_F(FakeHttp, StartFromOnDoneDuringFreeIsRefused)
{
    FakeServer srv("", false);
    NewClient(srv.path().c_str());
    Chain chain;
    chain.h = h_;
    auto req = Get("/events");
    req.timeout_ms = WS_DOCKER_HTTP_NO_TIMEOUT;
    req.on_done = Chain::Done;
    req.arg = &chain;
    ASSERT_EQ(0, ws_docker_http_start(h_, &req, nullptr));
    ASSERT_TRUE(srv.WaitRequests(1)) << "the call never reached the server";
    ws_docker_http_free(h_);
    h_ = nullptr;
    EXPECT_EQ(-ESHUTDOWN, chain.start_result);
    EXPECT_EQ(0, chain.second.done_calls);
}

TEST(DockerHttpConfig, Parse)
{
    ws_docker_http_config c;
    ASSERT_EQ(0, ws_docker_http_config_parse(nullptr, nullptr, nullptr, nullptr, &c));
    EXPECT_EQ(WS_DOCKER_HTTP_UNIX, c.transport);
    EXPECT_STREQ(WS_DOCKER_HTTP_DEFAULT_SOCKET, c.unix_path);

    ASSERT_EQ(0, ws_docker_http_config_parse("unix:///run/d.sock", "1", nullptr, nullptr, &c));
    EXPECT_STREQ("/run/d.sock", c.unix_path);
    EXPECT_FALSE(c.tls);

    ASSERT_EQ(0,
              ws_docker_http_config_parse("tcp://docker.example:1234", "", nullptr, nullptr, &c));
    EXPECT_EQ(WS_DOCKER_HTTP_TCP, c.transport);
    EXPECT_STREQ("docker.example", c.host);
    EXPECT_EQ(1234u, c.port);
    EXPECT_FALSE(c.tls);

    ASSERT_EQ(0, ws_docker_http_config_parse("tcp://10.0.0.1", nullptr, nullptr, nullptr, &c));
    EXPECT_EQ(2375u, c.port);

    ASSERT_EQ(0, ws_docker_http_config_parse("tcp://[::1]", "1", "/certs", nullptr, &c));
    EXPECT_STREQ("[::1]", c.host);
    EXPECT_EQ(2376u, c.port);
    EXPECT_TRUE(c.tls);
    EXPECT_STREQ("/certs/ca.pem", c.tls_ca);
    EXPECT_STREQ("/certs/cert.pem", c.tls_cert);
    EXPECT_STREQ("/certs/key.pem", c.tls_key);

    ASSERT_EQ(0, ws_docker_http_config_parse("tcp://h:2376", "1", nullptr, "/home/u", &c));
    EXPECT_STREQ("/home/u/.docker/ca.pem", c.tls_ca);

    EXPECT_EQ(-EINVAL, ws_docker_http_config_parse("tcp://h:2376", "1", nullptr, nullptr, &c));
    EXPECT_EQ(-EPROTONOSUPPORT,
              ws_docker_http_config_parse("ssh://u@h", nullptr, nullptr, nullptr, &c));
    EXPECT_EQ(-EINVAL, ws_docker_http_config_parse("h:2375", nullptr, nullptr, nullptr, &c));
    EXPECT_EQ(-EINVAL, ws_docker_http_config_parse("tcp://h:0", nullptr, nullptr, nullptr, &c));
    EXPECT_EQ(-EINVAL, ws_docker_http_config_parse("tcp://h:70000", nullptr, nullptr, nullptr, &c));
    EXPECT_EQ(-EINVAL, ws_docker_http_config_parse("tcp://h/x", nullptr, nullptr, nullptr, &c));
    EXPECT_EQ(-EINVAL, ws_docker_http_config_parse("tcp://", nullptr, nullptr, nullptr, &c));
    EXPECT_EQ(-EINVAL, ws_docker_http_config_parse("unix://rel", nullptr, nullptr, nullptr, &c));
    std::string longp = "unix:///" + std::string(WS_DOCKER_HTTP_UNIX_PATH_MAX, 'a');
    EXPECT_EQ(-ENAMETOOLONG,
              ws_docker_http_config_parse(longp.c_str(), nullptr, nullptr, nullptr, &c));
}

TEST(DockerHttpConfig, NewRejectsBadConfig)
{
    ws_pump *pump = nullptr;
    ASSERT_EQ(0, ws_pump_new(&pump));
    ws_docker_http_config c;
    ws_docker_http_config_default(&c);
    c.unix_path[0] = '\0';
    ws_docker_http *h = reinterpret_cast<ws_docker_http *>(0x1);
    EXPECT_EQ(-EINVAL, ws_docker_http_new(pump, &c, &h));
    EXPECT_EQ(reinterpret_cast<ws_docker_http *>(0x1), h);
    ws_pump_free(pump);
}

} // namespace
