// No tenant can stall another. Tenant A runs each kind of slow work the
// server has (a Grep over catastrophic lines, a Glob over 150,000 entries,
// WriteFile with if_match on large files, more pending work than its queue
// holds, a long Grep it then cancels) while tenant B measures the p99 of
// its Stat calls, which must stay within 3 times its unloaded p99 (20 ms
// at least), and B's ListProviders is answered. The slow work runs on the
// server's worker pool, off the RPC threads; with that pool inline (its
// lanes at 0 threads) A's work holds the RPC threads and B's p99 grows
// past the bound.
//
// Under the sanitizers (WORKSPACED_SANITIZED) only the functional halves
// are asserted: the statuses, the quota refusal, the cancelled work
// stopping.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::StatusCode;
using namespace workspace::v1;
using Clock = std::chrono::steady_clock;

namespace
{

const char *const kTokenA = "tok-stall-a-0123456789";
const char *const kTokenB = "tok-stall-b-9876543210";

// B's Stat calls per measurement, and the most time one may take.
const int kStatCalls = 300;
const auto kMeasureBudget = std::chrono::seconds(8);
// The bound: 3 times the unloaded p99, never below this.
const double kFloorMs = 20;

// Slow lines for the catastrophic pattern: `(a|aa)+$` tries exponentially
// many splits of the a's before the 'b' makes each fail (~2 ms a line with
// PCRE2's JIT, under its per-line limit), each followed by a line that
// matches, so a search reports a batch of matches every ~256 slow lines
// (and a cancel is seen between batches).
const int kSlowA = 24;
const int kGrepPairs = 20000;
const char *const kPattern = "(a|aa)+$";
const int kTreeEntries = 150000;
const off_t kBigFile = 512ll << 20;
// A file whose hash keeps A's one FS slot busy for seconds.
const off_t kHugeFile = 4ll << 30;

bool Sanitized()
{
    return getenv("WORKSPACED_SANITIZED") != nullptr;
}

std::string TokensFile()
{
    std::string path = wstest::MakeTempDir("tokens") + "/tokens";
    wstest::WriteHostFile(path, "a " + wstest::Sha256Hex(kTokenA) + "\nb " +
                                    wstest::Sha256Hex(kTokenB) + "\n");
    return path;
}

std::chrono::system_clock::time_point In(int seconds)
{
    return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

double Ms(Clock::duration d)
{
    return std::chrono::duration<double, std::milli>(d).count();
}

// CPU time (ms) of the threads of `pid` whose name starts with `prefix`
// ("" for the whole process), and how many there are.
double CpuMs(pid_t pid, const std::string &prefix, int *n_threads = nullptr)
{
    const double tick_ms = 1000.0 / sysconf(_SC_CLK_TCK);
    std::string dir = "/proc/" + std::to_string(pid) + "/task";
    double total = 0;
    int n = 0;
    DIR *d = opendir(dir.c_str());
    if (!d)
        return -1;
    while (struct dirent *e = readdir(d)) {
        if (e->d_name[0] == '.')
            continue;
        std::string task = dir + "/" + e->d_name;
        std::ifstream comm(task + "/comm");
        std::string name;
        std::getline(comm, name);
        if (name.compare(0, prefix.size(), prefix) != 0)
            continue;
        std::ifstream statf(task + "/stat");
        std::string stat((std::istreambuf_iterator<char>(statf)), std::istreambuf_iterator<char>());
        size_t close = stat.rfind(')');
        if (close == std::string::npos)
            continue;
        // After "(comm) ": state is field 3, utime 14, stime 15.
        std::vector<std::string> f;
        size_t at = close + 2;
        while (at < stat.size() && f.size() < 13) {
            size_t sp = stat.find(' ', at);
            f.push_back(stat.substr(at, sp - at));
            at = sp == std::string::npos ? stat.size() : sp + 1;
        }
        if (f.size() < 13)
            continue;
        total += (std::stod(f[11]) + std::stod(f[12])) * tick_ms;
        n++;
    }
    closedir(d);
    if (n_threads)
        *n_threads = n;
    return total;
}

// Waits (at most 30 s) until the server has used `ms` more CPU time than
// it had at `from`: the attack is under way.
void WaitBusy(pid_t pid, double from, double ms, const std::string &what)
{
    auto end = Clock::now() + std::chrono::seconds(30);
    while (CpuMs(pid, "") < from + ms) {
        ASSERT_LT(Clock::now(), end) << what << ": the server never got busy";
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

struct Latency {
    double p99_ms = 0;
    size_t n = 0;
};

// B's Stat latency: kStatCalls calls, or fewer when they take longer than
// kMeasureBudget in all. Every call must succeed.
Latency MeasureStat(FileSystem::Stub *fs, const std::string &id)
{
    std::vector<double> ms;
    auto end = Clock::now() + kMeasureBudget;
    for (int i = 0; i < kStatCalls && (i < 5 || Clock::now() < end); i++) {
        StatRequest req;
        req.set_workspace_id(id);
        req.set_path("f");
        StatResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(In(30));
        auto t0 = Clock::now();
        grpc::Status st = fs->Stat(&ctx, req, &resp);
        ms.push_back(Ms(Clock::now() - t0));
        EXPECT_TRUE(st.ok()) << "B's Stat: " << st.error_message();
    }
    std::sort(ms.begin(), ms.end());
    size_t k = (ms.size() * 99 + 99) / 100; // ceil(0.99 n)
    return Latency{ms[k ? k - 1 : 0], ms.size()};
}

// Runs `one` over and over on `threads` threads until Stop(), each call
// with its own context (Stop cancels the ones in flight), and keeps every
// status.
class Attack
{
  public:
    using Call = std::function<grpc::Status(grpc::ClientContext *)>;

    Attack(int threads, Call one) : one_(std::move(one)), ctx_(threads, nullptr)
    {
        for (int i = 0; i < threads; i++)
            threads_.emplace_back([this, i] { Loop(i); });
    }
    ~Attack()
    {
        Stop();
    }
    void Stop()
    {
        stop_ = true;
        {
            std::lock_guard<std::mutex> g(mu_);
            for (auto *c : ctx_)
                if (c)
                    c->TryCancel();
        }
        for (auto &t : threads_)
            if (t.joinable())
                t.join();
    }
    std::vector<grpc::Status> statuses()
    {
        std::lock_guard<std::mutex> g(mu_);
        return statuses_;
    }
    // Waits (at most `timeout`) until `n` calls have ended; whether they
    // did.
    bool WaitEnded(size_t n, std::chrono::seconds timeout)
    {
        auto end = Clock::now() + timeout;
        while (statuses().size() < n && Clock::now() < end)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return statuses().size() >= n;
    }

  private:
    void Loop(int i)
    {
        while (!stop_) {
            grpc::ClientContext ctx;
            ctx.set_deadline(In(120));
            {
                std::lock_guard<std::mutex> g(mu_);
                if (stop_)
                    return;
                ctx_[i] = &ctx;
            }
            grpc::Status st = one_(&ctx);
            std::lock_guard<std::mutex> g(mu_);
            ctx_[i] = nullptr;
            statuses_.push_back(st);
        }
    }

    Call one_;
    std::atomic<bool> stop_{false};
    std::mutex mu_;
    std::vector<grpc::ClientContext *> ctx_;
    std::vector<grpc::Status> statuses_;
    std::vector<std::thread> threads_;
};

// Every status of an attack is one of `allowed` (CANCELLED: stopped).
void ExpectStatuses(const std::vector<grpc::Status> &all, const std::vector<StatusCode> &allowed,
                    const std::string &what)
{
    for (const auto &st : all) {
        bool ok = st.error_code() == StatusCode::CANCELLED ||
                  std::find(allowed.begin(), allowed.end(), st.error_code()) != allowed.end();
        EXPECT_TRUE(ok) << what << ": A's call ended " << st.error_code() << " "
                        << st.error_message();
    }
}

// Reads a Grep stream to its end.
grpc::Status GrepAll(FileSystem::Stub *fs, grpc::ClientContext *ctx, const GrepRequest &req)
{
    auto reader = fs->Grep(ctx, req);
    GrepResponse resp;
    while (reader->Read(&resp))
        ;
    return reader->Finish();
}

class StallTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        // Two RPC threads and two FS threads whatever the machine: A's
        // attacks outnumber the RPC threads, and A runs one FS job at a
        // time, four more waiting.
        srv_ = std::make_unique<wstest::Server>(std::vector<std::string>{
            "--tokens-file", TokensFile(), "--threads", "2", "--work-fs-threads", "2",
            "--work-daemon-threads", "4", "--work-tenant-running", "1", "--work-tenant-queued", "4",
            "--max-file-size", std::to_string(kHugeFile * 2)});
        auto cha = srv_->Channel(kTokenA), chb = srv_->Channel(kTokenB);
        ws_a_ = Workspaces::NewStub(cha);
        fs_a_ = FileSystem::NewStub(cha);
        ws_b_ = Workspaces::NewStub(chb);
        fs_b_ = FileSystem::NewStub(chb);
        pv_b_ = Providers::NewStub(chb);

        a_ = wstest::Open(ws_a_.get(), "local-bash", kHugeFile * 2);
        b_ = wstest::Open(ws_b_.get(), "memory");
        ASSERT_TRUE(wstest::Write(fs_b_.get(), b_.id, "f", "b's file").ok());
        ASSERT_TRUE(wstest::Write(fs_b_.get(), b_.id, "small/x", "x", nullptr, true).ok());
        dir_a_ = srv_->workspace_dir(a_.id);
    }

    // A's catastrophic files, written straight into its workspace: in
    // grep/ slow lines each followed by a match (a search sends a batch
    // every 256 slow lines), in silent/ slow lines only (a search's first
    // batch comes after all of them, tens of seconds of work).
    void MakeGrepFiles()
    {
        const std::string slow = std::string(kSlowA, 'a') + "b\n";
        std::string pairs, lines;
        for (int i = 0; i < kGrepPairs; i++) {
            pairs += slow + "aa\n";
            lines += slow;
        }
        mkdir((dir_a_ + "/grep").c_str(), 0755);
        mkdir((dir_a_ + "/silent").c_str(), 0755);
        wstest::WriteHostFile(dir_a_ + "/grep/slow.txt", pairs);
        wstest::WriteHostFile(dir_a_ + "/silent/slow.txt", lines);
    }

    GrepRequest SlowGrep(const std::string &path = "grep") const
    {
        GrepRequest req;
        req.set_workspace_id(a_.id);
        req.set_path(path);
        req.set_pattern(kPattern);
        req.set_max_matches(100000);
        return req;
    }

    // Whether, within a few seconds, the FS threads' CPU time stops
    // growing for half a second: no work of theirs runs on.
    bool FsIdle()
    {
        auto end = Clock::now() + std::chrono::seconds(Sanitized() ? 15 : 5);
        while (Clock::now() < end) {
            double before = CpuMs(srv_->pid(), "ws-fs-");
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
            if (CpuMs(srv_->pid(), "ws-fs-") - before < 50)
                return true;
        }
        return false;
    }

    GlobRequest SmallGlob(const std::string &id) const
    {
        GlobRequest req;
        req.set_workspace_id(id);
        req.set_path("small");
        req.set_pattern("*");
        return req;
    }

    // Measures B's Stat p99 while `start()`'s attack runs (it returns the
    // attack; at least `busy_ms` of server CPU shows it under way), and
    // checks the bound, measuring the unloaded baseline again once when
    // the first try misses it. Before the attack stops, `ended` of its
    // calls must have run to their end.
    void ExpectNotStalled(const std::string &what,
                          const std::function<std::unique_ptr<Attack>()> &start, double busy_ms,
                          size_t ended = 0)
    {
        for (int attempt = 0; attempt < 2; attempt++) {
            double cpu0 = CpuMs(srv_->pid(), "");
            std::unique_ptr<Attack> attack = start();
            WaitBusy(srv_->pid(), cpu0, busy_ms, what);
            Latency under = MeasureStat(fs_b_.get(), b_.id);
            // The form: another tenant's ListProviders is answered
            // while the attack runs.
            ListProvidersRequest lreq;
            ListProvidersResponse lresp;
            grpc::ClientContext lctx;
            lctx.set_deadline(In(10));
            grpc::Status lst = pv_b_->ListProviders(&lctx, lreq, &lresp);
            EXPECT_TRUE(lst.ok()) << what << ": B's ListProviders " << lst.error_message();
            EXPECT_TRUE(attack->WaitEnded(ended, std::chrono::seconds(Sanitized() ? 120 : 60)))
                << what << ": fewer than " << ended << " of A's calls ended";
            attack->Stop();
            attack_statuses_ = attack->statuses();
            double bound = std::max(kFloorMs, 3 * baseline_.p99_ms);
            std::printf("%s: B's Stat p99 %.2f ms over %zu calls (unloaded %.2f ms, bound %.2f)\n",
                        what.c_str(), under.p99_ms, under.n, baseline_.p99_ms, bound);
            if (Sanitized() || under.p99_ms <= bound)
                return;
            if (attempt == 0) {
                baseline_ = MeasureStat(fs_b_.get(), b_.id);
                continue;
            }
            ADD_FAILURE() << what << ": B's Stat p99 " << under.p99_ms << " ms over " << under.n
                          << " calls, above " << bound << " ms (3 x the unloaded p99 "
                          << baseline_.p99_ms << " ms, at least " << kFloorMs << " ms)";
        }
    }

    std::unique_ptr<wstest::Server> srv_;
    std::unique_ptr<Workspaces::Stub> ws_a_, ws_b_;
    std::unique_ptr<FileSystem::Stub> fs_a_, fs_b_;
    std::unique_ptr<Providers::Stub> pv_b_;
    wstest::Ws a_, b_;
    std::string dir_a_;
    Latency baseline_;
    std::vector<grpc::Status> attack_statuses_;
};

TEST_F(StallTest, NoTenantStallsAnother)
{
    MakeGrepFiles();
    // A tree of 150,000 entries, one directory holding them all.
    std::string tree = dir_a_ + "/tree";
    ASSERT_EQ(mkdir(tree.c_str(), 0755), 0);
    for (int i = 0; i < kTreeEntries; i++) {
        int fd = open((tree + "/e" + std::to_string(i)).c_str(),
                      O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        ASSERT_GE(fd, 0) << i;
        close(fd);
    }
    // Two large files (sparse: reading them costs only the hashing).
    ASSERT_EQ(mkdir((dir_a_ + "/big").c_str(), 0755), 0);
    for (const char *name : {"/big/1", "/big/2", "/big/huge"}) {
        int fd = open((dir_a_ + name).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(ftruncate(fd, std::string(name) == "/big/huge" ? kHugeFile : kBigFile), 0);
        close(fd);
    }

    baseline_ = MeasureStat(fs_b_.get(), b_.id);
    std::printf("unloaded: B's Stat p99 %.2f ms over %zu calls\n", baseline_.p99_ms, baseline_.n);

    // (1) Grep over catastrophic lines, three at once.
    ExpectNotStalled(
        "catastrophic Grep",
        [&] {
            return std::make_unique<Attack>(
                3, [&](grpc::ClientContext *ctx) { return GrepAll(fs_a_.get(), ctx, SlowGrep()); });
        },
        300);
    ExpectStatuses(attack_statuses_, {StatusCode::OK}, "catastrophic Grep");

    // (2) Glob over the whole tree: nothing matches, every entry is looked
    // at.
    ExpectNotStalled(
        "Glob over 150,000 entries",
        [&] {
            return std::make_unique<Attack>(3, [&](grpc::ClientContext *ctx) {
                GlobRequest req;
                req.set_workspace_id(a_.id);
                req.set_path("tree");
                req.set_pattern("**/*.none");
                GlobResponse resp;
                return fs_a_->Glob(ctx, req, &resp);
            });
        },
        300, 1);
    ExpectStatuses(attack_statuses_, {StatusCode::OK}, "Glob");

    // (3) WriteFile with an if_match that does not match: the whole old
    // content is hashed before the write is refused.
    std::atomic<int> turn{0};
    ExpectNotStalled(
        "WriteFile with if_match on 512 MiB files",
        [&] {
            return std::make_unique<Attack>(3, [&](grpc::ClientContext *ctx) {
                WriteFileResponse resp;
                auto w = fs_a_->WriteFile(ctx, &resp);
                WriteFileRequest h;
                h.mutable_header()->set_workspace_id(a_.id);
                h.mutable_header()->set_path(turn++ % 2 ? "big/1" : "big/2");
                h.mutable_header()->set_if_match(std::string(64, '0'));
                h.set_finish(true);
                w->WriteLast(h, grpc::WriteOptions());
                return w->Finish();
            });
        },
        300, 2);
    // CONFLICT, or SIZE_CAP once files above the size cap are refused
    // unread.
    ExpectStatuses(attack_statuses_,
                   {StatusCode::FAILED_PRECONDITION, StatusCode::RESOURCE_EXHAUSTED},
                   "WriteFile if_match");
    bool conflict = false;
    for (const auto &st : attack_statuses_)
        conflict = conflict || wstest::Decode(st).reason == "CONFLICT";
    EXPECT_TRUE(conflict) << "no if_match write was refused CONFLICT";

    // (4) A asks for more work than its queue holds: one Grep runs, four
    // wait, the rest are refused at once; B's own work goes on.
    {
        const int n = 12;
        std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
        std::vector<grpc::Status> sts(n);
        std::atomic<int> ended{0};
        std::vector<std::thread> ts;
        for (int i = 0; i < n; i++)
            ctxs.push_back(std::make_unique<grpc::ClientContext>());
        for (int i = 0; i < n; i++)
            ts.emplace_back([&, i] {
                sts[i] = GrepAll(fs_a_.get(), ctxs[i].get(), SlowGrep());
                ended++;
            });
        auto end = Clock::now() + std::chrono::seconds(30);
        while (ended < n - 1 - 4 && Clock::now() < end)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        EXPECT_GE(ended.load(), n - 1 - 4) << "A's surplus Greps were not refused";
        // B runs FS work of its own meanwhile, and its Stat is not held up.
        GlobResponse gresp;
        grpc::ClientContext gctx;
        gctx.set_deadline(In(10));
        grpc::Status gst = fs_b_->Glob(&gctx, SmallGlob(b_.id), &gresp);
        EXPECT_TRUE(gst.ok()) << "B's Glob: " << gst.error_message();
        EXPECT_EQ(gresp.matches_size(), 1);
        Latency under = MeasureStat(fs_b_.get(), b_.id);
        double bound = std::max(kFloorMs, 3 * baseline_.p99_ms);
        std::printf("queue full: B's Stat p99 %.2f ms over %zu calls (bound %.2f)\n", under.p99_ms,
                    under.n, bound);
        EXPECT_TRUE(Sanitized() || under.p99_ms <= bound)
            << "with A's queue full, B's Stat p99 " << under.p99_ms << " ms";
        for (auto &c : ctxs)
            c->TryCancel();
        for (auto &t : ts)
            t.join();
        int quota = 0;
        for (const auto &st : sts) {
            if (st.error_code() == StatusCode::CANCELLED)
                continue;
            wstest::Error e = wstest::Decode(st);
            EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
            EXPECT_EQ(e.reason, "QUOTA");
            EXPECT_EQ(e.metadata["quota"], "tenant_pending_work");
            EXPECT_EQ(e.metadata["limit"], "4");
            quota++;
        }
        EXPECT_GE(quota, n - 1 - 4);
    }

    // (5) A cancels its long Grep: it stops at its next batch, the FS
    // threads go idle.
    {
        grpc::ClientContext c1;
        auto r1 = fs_a_->Grep(&c1, SlowGrep());
        GrepResponse resp;
        ASSERT_TRUE(r1->Read(&resp)) << "A's long Grep sent nothing";
        Latency under = MeasureStat(fs_b_.get(), b_.id);
        double bound = std::max(kFloorMs, 3 * baseline_.p99_ms);
        std::printf("long Grep: B's Stat p99 %.2f ms over %zu calls (bound %.2f)\n", under.p99_ms,
                    under.n, bound);
        EXPECT_TRUE(Sanitized() || under.p99_ms <= bound)
            << "during A's long Grep, B's Stat p99 " << under.p99_ms << " ms";
        c1.TryCancel();
        while (r1->Read(&resp))
            ;
        EXPECT_EQ(r1->Finish().error_code(), StatusCode::CANCELLED);
        int threads = 0;
        ASSERT_GE(CpuMs(srv_->pid(), "ws-fs-", &threads), 0);
        ASSERT_EQ(threads, 2) << "the server has no FS lane of its own";
        EXPECT_TRUE(FsIdle()) << "the FS threads kept working after A cancelled its Grep";
    }

    // (6) Work A cancels while it waits never runs: with A's one FS slot
    // taken by a long hash, four Greps wait (a fifth is refused, which
    // shows the four are queued), each of which would keep an FS thread
    // busy for tens of seconds; A cancels them, and once the hash is done
    // the FS threads are idle and A's next FS call is served at once.
    {
        std::atomic<bool> hashed{false};
        grpc::Status hash_st;
        double cpu0 = CpuMs(srv_->pid(), "ws-fs-");
        std::thread hash([&] {
            grpc::ClientContext ctx;
            ctx.set_deadline(In(120));
            WriteFileResponse resp;
            auto w = fs_a_->WriteFile(&ctx, &resp);
            WriteFileRequest h;
            h.mutable_header()->set_workspace_id(a_.id);
            h.mutable_header()->set_path("big/huge");
            h.mutable_header()->set_if_match(std::string(64, '0'));
            h.set_finish(true);
            w->WriteLast(h, grpc::WriteOptions());
            hash_st = w->Finish();
            hashed = true;
        });
        auto end = Clock::now() + std::chrono::seconds(30);
        while (CpuMs(srv_->pid(), "ws-fs-") < cpu0 + 100 && !hashed && Clock::now() < end)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        const int n = 5;
        std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
        std::vector<grpc::Status> sts(n);
        std::vector<std::atomic<bool>> done(n);
        std::vector<std::thread> ts;
        for (int i = 0; i < n; i++) {
            ctxs.push_back(std::make_unique<grpc::ClientContext>());
            ctxs.back()->set_deadline(In(120));
        }
        for (int i = 0; i < n; i++)
            ts.emplace_back([&, i] {
                sts[i] = GrepAll(fs_a_.get(), ctxs[i].get(), SlowGrep("silent"));
                done[i] = true;
            });
        int refused = -1;
        while (refused < 0 && Clock::now() < end) {
            for (int i = 0; i < n; i++)
                if (done[i])
                    refused = i;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        EXPECT_FALSE(hashed) << "the hash ended before the Greps queued: make big/huge larger";
        ASSERT_GE(refused, 0) << "A's fifth waiting Grep was not refused";
        for (auto &c : ctxs)
            c->TryCancel();
        for (auto &t : ts)
            t.join();
        hash.join();
        EXPECT_WS_ERROR(sts[refused], StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
        for (int i = 0; i < n; i++) {
            if (i == refused)
                continue;
            EXPECT_EQ(sts[i].error_code(), StatusCode::CANCELLED) << sts[i].error_message();
        }
        EXPECT_WS_ERROR(hash_st, StatusCode::FAILED_PRECONDITION, "CONFLICT");
        EXPECT_TRUE(FsIdle()) << "cancelled Greps ran after all";

        ASSERT_TRUE(wstest::Write(fs_a_.get(), a_.id, "small/y", "y", nullptr, true).ok());
        GlobResponse gresp;
        grpc::ClientContext gctx;
        gctx.set_deadline(In(5));
        auto t0 = Clock::now();
        grpc::Status gst = fs_a_->Glob(&gctx, SmallGlob(a_.id), &gresp);
        EXPECT_TRUE(gst.ok()) << "A's Glob after the cancel: " << gst.error_message();
        std::printf("A's Glob after the cancel: %.1f ms\n", Ms(Clock::now() - t0));
    }
}

} // namespace
