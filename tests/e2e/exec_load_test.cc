// Exec end to end, under load: 100 MiB through one Start stream byte for
// byte, a slow reader that must not grow the server's memory, 200 streaming
// commands at once, and 5,000 commands without fd, thread or zombie growth.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;
using wstest::ArgvProcess;
using wstest::EventLog;
using wstest::Server;

namespace
{

using Clock = std::chrono::steady_clock;

bool Sanitized()
{
    const char *s = getenv("WORKSPACED_SANITIZED");
    return s && *s && strcmp(s, "0") != 0;
}

std::string Hex(const unsigned char *md, unsigned int len)
{
    static const char hex[] = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; i++) {
        out.push_back(hex[md[i] >> 4]);
        out.push_back(hex[md[i] & 15]);
    }
    return out;
}

// Incremental SHA-256.
class Sha256
{
  public:
    Sha256() : ctx_(EVP_MD_CTX_new())
    {
        EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr);
    }
    ~Sha256()
    {
        EVP_MD_CTX_free(ctx_);
    }
    void Update(const std::string &s)
    {
        EVP_DigestUpdate(ctx_, s.data(), s.size());
    }
    std::string Final()
    {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        EVP_DigestFinal_ex(ctx_, md, &len);
        return Hex(md, len);
    }

  private:
    EVP_MD_CTX *ctx_;
};

std::string SeqOutput(int a, int b)
{
    std::string s;
    for (int i = a; i <= b; i++)
        s += std::to_string(i) + "\n";
    return s;
}

// The server's environment additions. Under ASan, freed memory waits in a
// quarantine (256 MiB by default) before reuse, so RSS would measure the
// allocation churn of streaming rather than what the server holds: keep
// the quarantine small for the memory bound to mean the same thing. (The
// harness appends to the test's environment, so an ASAN_OPTIONS set there,
// e.g. with --test_env, takes precedence.)
std::vector<std::string> ServerEnv()
{
    if (!Sanitized())
        return {};
    return {"ASAN_OPTIONS=quarantine_size_mb=1:thread_local_quarantine_size_kb=64"};
}

class ExecLoadTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        srv_ = std::make_unique<Server>(std::vector<std::string>{}, "", ServerEnv());
        wsstub_ = srv_->workspaces();
        exec_ = srv_->exec();
        ws_ =
            wstest::OpenShell(wsstub_.get(), {"sh", "yes", "head", "cat", "seq", "true", "sleep"});
    }

    std::unique_ptr<Server> srv_;
    std::unique_ptr<Workspaces::Stub> wsstub_;
    std::unique_ptr<Exec::Stub> exec_;
    wstest::Ws ws_;
};

TEST_F(ExecLoadTest, HundredMiBArriveByteExact)
{
    const uint64_t kTotal = 100ull << 20;
    const std::string pattern = "0123456789abcdef\n";
    // What `yes 0123456789abcdef | head -c 100M` writes.
    Sha256 want;
    {
        std::string block;
        while (block.size() < (1u << 20))
            block += pattern;
        block.resize((1u << 20) / pattern.size() * pattern.size()); // whole patterns
        uint64_t left = kTotal;
        while (left > 0) {
            uint64_t n = std::min<uint64_t>(left, block.size());
            want.Update(block.substr(0, n));
            left -= n;
        }
    }

    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(600));
    auto rw = wstest::StartStream(
        exec_.get(), &ctx, ws_.id,
        ArgvProcess({"sh", "-c", "yes 0123456789abcdef | head -c " + std::to_string(kTotal)}));
    Sha256 got;
    uint64_t received = 0;
    int chunks = 0;
    std::string problem;
    bool started = false, exited = false;
    Exited exit;
    ProcessEvent ev;
    while (rw->Read(&ev)) {
        if (exited && problem.empty())
            problem = "event after exited";
        switch (ev.event_case()) {
        case ProcessEvent::kStarted:
            started = true;
            break;
        case ProcessEvent::kStdout:
            if (ev.stdout().offset() != received && problem.empty())
                problem = "chunk at offset " + std::to_string(ev.stdout().offset()) +
                          ", expected " + std::to_string(received);
            got.Update(ev.stdout().data());
            received += ev.stdout().data().size();
            chunks++;
            break;
        case ProcessEvent::kExited:
            exited = true;
            exit = ev.exited();
            break;
        default:
            if (problem.empty())
                problem = "unexpected event " + std::to_string(ev.event_case());
        }
    }
    grpc::Status s = rw->Finish();
    ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
    EXPECT_TRUE(problem.empty()) << problem;
    EXPECT_TRUE(started);
    EXPECT_EQ(received, kTotal);
    EXPECT_EQ(got.Final(), want.Final()) << "the bytes differ (" << chunks << " chunks)";
    ASSERT_TRUE(exited);
    EXPECT_EQ(exit.cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(exit.exit_code(), 0);
    EXPECT_EQ(exit.stdout().bytes_total(), kTotal);
    EXPECT_EQ(exit.stdout().bytes_delivered(), kTotal);
    EXPECT_FALSE(exit.stdout().truncated());
    EXPECT_EQ(exit.stderr().bytes_total(), 0u);
}

TEST_F(ExecLoadTest, SlowReaderKeepsServerMemoryBounded)
{
    // Warm up the paths a stream uses, so the baseline includes them.
    for (int i = 0; i < 3; i++) {
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
        auto rw = wstest::StartStream(exec_.get(), &ctx, ws_.id,
                                      ArgvProcess({"head", "-c", "8388608", "/dev/zero"}));
        EventLog log;
        wstest::ReadEvents(rw.get(), &log);
        ASSERT_TRUE(rw->Finish().ok());
        ASSERT_EQ(log.out.data.size(), 8u << 20);
    }
    // The baseline once the warm-up's commands are reaped and the server's
    // RSS has stopped moving.
    const long rss0 = wstest::WaitStatsSettled(srv_->pid(), 1000, 20000, 1024).rss_kb;
    ASSERT_GT(rss0, 0);

    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    auto rw = wstest::StartStream(exec_.get(), &ctx, ws_.id, ArgvProcess({"cat", "/dev/zero"}));
    EventLog log;
    ProcessEvent ev;
    long rss_max = rss0;
    bool zeros = true;
    auto end = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < end && rw->Read(&ev)) {
        wstest::LogEvent(ev, &log);
        if (ev.has_stdout()) {
            zeros = zeros && ev.stdout().data().find_first_not_of('\0') == std::string::npos;
            // Keep only the count, not the bytes.
            log.out.data.clear();
        }
        long rss = wstest::StatsOf(srv_->pid()).rss_kb;
        if (rss > rss_max)
            rss_max = rss;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::string id = log.start.id();
    uint64_t received = log.out.next;
    ctx.TryCancel();
    rw->Finish();

    EXPECT_TRUE(log.problems.empty()) << wstest::Problems(log);
    EXPECT_TRUE(log.gaps.empty()) << "a live subscriber must not lose bytes";
    EXPECT_TRUE(zeros);
    EXPECT_GE(log.out.chunks, 50) << "the reader got too little to prove anything";
    RecordProperty("rss_growth_kb", std::to_string(rss_max - rss0));
    EXPECT_LT(rss_max - rss0, 32 * 1024)
        << "server RSS grew from " << rss0 << " kB to " << rss_max << " kB";

    // Backpressure, not dropping: cat wrote little more than was read.
    auto deadline = Clock::now() + std::chrono::seconds(30);
    ProcessInfo info;
    bool found = false;
    do {
        ClientContext lctx;
        ListProcessesRequest req;
        ListProcessesResponse resp;
        req.set_workspace_id(ws_.id);
        ASSERT_TRUE(exec_->ListProcesses(&lctx, req, &resp).ok());
        for (const auto &p : resp.processes())
            if (p.id() == id && !p.running()) {
                info = p;
                found = true;
            }
        if (!found)
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (!found && Clock::now() < deadline);
    ASSERT_TRUE(found) << "cat did not end after the cancel";
    EXPECT_EQ(info.exited().cause(), EXIT_CAUSE_CANCELLED);
    EXPECT_LT(info.exited().stdout().bytes_total(), received + (64u << 20))
        << "the server kept reading the pipe for a reader that did not keep up (received "
        << received << ")";
}

TEST_F(ExecLoadTest, TwoHundredConcurrentStreamsCompleteExactly)
{
    const int kStreams = 200;
    const std::string seq_out = SeqOutput(1, 150000);
    std::mutex mu;
    std::condition_variable cv;
    int started = 0;
    std::vector<std::string> failures(kStreams);
    std::vector<std::thread> threads;
    for (int i = 0; i < kStreams; i++) {
        threads.emplace_back([&, i] {
            bool zero = i % 2 == 0;
            ClientContext ctx;
            ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(600));
            auto rw = wstest::StartStream(exec_.get(), &ctx, ws_.id,
                                          zero ? ArgvProcess({"head", "-c", "1048576", "/dev/zero"})
                                               : ArgvProcess({"seq", "1", "150000"}));
            EventLog log;
            bool open =
                wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) { return l.started; });
            {
                // All 200 are running before anyone reads output.
                std::unique_lock<std::mutex> lock(mu);
                if (open)
                    started++;
                cv.notify_all();
                cv.wait_for(lock, std::chrono::seconds(180), [&] { return started >= kStreams; });
            }
            if (open)
                wstest::ReadEvents(rw.get(), &log);
            grpc::Status s = rw->Finish();
            std::string &f = failures[i];
            const uint64_t want = zero ? (1u << 20) : seq_out.size();
            if (!s.ok())
                f = "status " + std::to_string(s.error_code()) + " " + s.error_message();
            else if (!log.problems.empty())
                f = wstest::Problems(log);
            else if (!log.exited)
                f = "no exited";
            else if (log.out.data.size() != want || log.out.next != want)
                f = std::string(zero ? "head -c 1048576 /dev/zero" : "seq 1 150000") + ": got " +
                    std::to_string(log.out.data.size()) + " of " + std::to_string(want) +
                    " bytes in " + std::to_string(log.out.chunks) + " chunks, then exited " +
                    log.exit.ShortDebugString();
            else if (zero ? log.out.data.find_first_not_of('\0') != std::string::npos
                          : log.out.data != seq_out)
                f = "content differs";
            else if (log.exit.stdout().bytes_total() != want || log.exit.exit_code() != 0)
                f = "exited says " + log.exit.ShortDebugString();
        });
    }
    for (auto &t : threads)
        t.join();
    EXPECT_EQ(started, kStreams) << "not every stream got started";
    int failed = 0;
    for (int i = 0; i < kStreams; i++)
        if (!failures[i].empty()) {
            if (failed++ < 10)
                ADD_FAILURE() << "stream " << i << ": " << failures[i];
        }
    EXPECT_EQ(failed, 0);
}

TEST_F(ExecLoadTest, FiveThousandCommandsLeakNothing)
{
    const int kCommands = 5000;
    const int kThreads = 4;
    auto run_true = [&](int n, std::atomic<int> *bad) {
        for (int i = 0; i < n; i++) {
            RunResponse r;
            grpc::Status s = wstest::RunProcess(exec_.get(), ws_.id, ArgvProcess({"true"}), &r);
            if (!s.ok() || r.exited().cause() != EXIT_CAUSE_EXITED || r.exited().exit_code() != 0)
                (*bad)++;
        }
    };
    // Aborted streams too: the kill path must clean up as well.
    auto cancel_sleeps = [&](int n, std::atomic<int> *bad) {
        for (int i = 0; i < n; i++) {
            ClientContext ctx;
            auto rw =
                wstest::StartStream(exec_.get(), &ctx, ws_.id, ArgvProcess({"sleep", "1000"}));
            ProcessEvent ev;
            if (!rw->Read(&ev) || !ev.has_started())
                (*bad)++;
            ctx.TryCancel();
            rw->Finish();
        }
    };

    std::atomic<int> bad{0};
    // Warm-up: gRPC and the server create some threads and buffers lazily.
    {
        std::vector<std::thread> t;
        for (int i = 0; i < kThreads; i++)
            t.emplace_back(run_true, 25, &bad);
        for (auto &x : t)
            x.join();
        cancel_sleeps(5, &bad);
    }
    ASSERT_EQ(bad, 0);
    auto settle = [&] {
        // The cancelled commands' grace periods and reaping are over, and
        // the fd and thread counts stay put for a second.
        return wstest::WaitStatsSettled(srv_->pid(), 1000, 30000);
    };
    wstest::ProcStats before = settle();
    ASSERT_GT(before.fds, 0);
    ASSERT_GT(before.threads, 0);

    auto t0 = Clock::now();
    {
        std::vector<std::thread> t;
        for (int i = 0; i < kThreads; i++)
            t.emplace_back(run_true, kCommands / kThreads, &bad);
        t.emplace_back(cancel_sleeps, 100, &bad);
        for (auto &x : t)
            x.join();
    }
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_EQ(bad, 0) << "commands that did not run cleanly";
    wstest::ProcStats after = settle();

    EXPECT_EQ(after.children, 0) << "commands still running or unreaped";
    EXPECT_EQ(after.zombies, 0);
    EXPECT_LE(after.fds, before.fds + 4) << "fd growth after " << kCommands << " commands";
    EXPECT_LE(after.threads, before.threads + 4) << "thread growth";
    RecordProperty("seconds", std::to_string(secs));
    RecordProperty("sanitized", Sanitized() ? "1" : "0");
}

} // namespace
