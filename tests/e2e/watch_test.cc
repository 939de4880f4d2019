// FileSystem.Watch end to end: the real server, real clients, changes made
// through the API, by the host and by commands in every kind of box.
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

namespace
{

using namespace workspace::v1;
using Clock = std::chrono::steady_clock;
using wstest::Server;

// How long a test waits for an event it expects before it fails (never a
// measurement: the wait ends as soon as the event comes).
constexpr auto kWait = std::chrono::seconds(20);

std::string Show(const WatchEvent &e)
{
    std::string s = WatchEventType_Name(e.type()) + " " + e.path();
    if (!e.from_path().empty())
        s += " <- " + e.from_path();
    return s;
}

// One Watch call read on a thread of its own; the test waits for events.
class Watch
{
  public:
    // A channel without BDP probing and with a small window, so a client
    // that stops reading holds the server's sends back soon.
    static std::shared_ptr<grpc::Channel> SmallWindowChannel(Server &srv)
    {
        grpc::ChannelArguments args;
        args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
        args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 * 1024);
        return grpc::CreateCustomChannel(srv.address(), grpc::InsecureChannelCredentials(), args);
    }

    Watch(std::shared_ptr<grpc::Channel> ch, const WatchRequest &req)
        : stub_(FileSystem::NewStub(ch))
    {
        ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
        reader_ = stub_->Watch(&ctx_, req);
        thread_ = std::thread([this] { Loop(); });
    }
    ~Watch()
    {
        Cancel();
    }

    void Cancel()
    {
        if (!thread_.joinable())
            return;
        Resume();
        ctx_.TryCancel();
        thread_.join();
    }

    // The reader stops taking messages (the server's sends back up).
    void Pause()
    {
        std::lock_guard<std::mutex> g(mu_);
        paused_ = true;
    }
    void Resume()
    {
        std::lock_guard<std::mutex> g(mu_);
        paused_ = false;
        cv_.notify_all();
    }

    // Waits until an event at index >= from satisfies pred; returns its
    // index, or -1 when the stream ended or the wait ran out.
    int WaitFor(const std::function<bool(const WatchEvent &)> &pred, size_t from = 0)
    {
        std::unique_lock<std::mutex> g(mu_);
        auto deadline = Clock::now() + kWait;
        for (;;) {
            for (size_t i = from; i < events_.size(); i++)
                if (pred(events_[i]))
                    return (int)i;
            from = events_.size();
            if (done_ || cv_.wait_until(g, deadline) == std::cv_status::timeout) {
                for (size_t i = from; i < events_.size(); i++)
                    if (pred(events_[i]))
                        return (int)i;
                return -1;
            }
        }
    }
    int WaitEvent(WatchEventType type, const std::string &path, size_t from = 0)
    {
        return WaitFor([&](const WatchEvent &e) { return e.type() == type && e.path() == path; },
                       from);
    }
    bool WaitReady()
    {
        int i = WaitFor([](const WatchEvent &e) { return true; });
        return i == 0 && Events()[0].type() == WATCH_EVENT_READY;
    }

    // Waits for the end of the stream; its status.
    grpc::Status Finish()
    {
        std::unique_lock<std::mutex> g(mu_);
        if (!cv_.wait_until(g, Clock::now() + kWait, [this] { return done_; })) {
            g.unlock();
            ADD_FAILURE() << "the stream did not end";
            ctx_.TryCancel();
            g.lock();
            cv_.wait(g, [this] { return done_; });
        }
        return status_;
    }
    bool Done()
    {
        std::lock_guard<std::mutex> g(mu_);
        return done_;
    }

    std::vector<WatchEvent> Events()
    {
        std::lock_guard<std::mutex> g(mu_);
        return std::vector<WatchEvent>(events_.begin(), events_.end());
    }
    std::string Dump()
    {
        std::string s;
        for (const auto &e : Events())
            s += "  " + Show(e) + "\n";
        return s.size() > 4000 ? s.substr(0, 2000) + "  ...\n" + s.substr(s.size() - 1500) : s;
    }

  private:
    void Loop()
    {
        WatchEvent ev;
        for (;;) {
            {
                std::unique_lock<std::mutex> g(mu_);
                cv_.wait(g, [this] { return !paused_; });
            }
            if (!reader_->Read(&ev))
                break;
            std::lock_guard<std::mutex> g(mu_);
            events_.push_back(ev);
            cv_.notify_all();
        }
        grpc::Status s = reader_->Finish();
        std::lock_guard<std::mutex> g(mu_);
        status_ = s;
        done_ = true;
        cv_.notify_all();
    }

    std::unique_ptr<FileSystem::Stub> stub_;
    grpc::ClientContext ctx_;
    std::unique_ptr<grpc::ClientReader<WatchEvent>> reader_;
    std::thread thread_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<WatchEvent> events_;
    bool paused_ = false;
    bool done_ = false;
    grpc::Status status_;
};

WatchRequest Req(const std::string &id, const std::string &path = ".", bool recursive = true)
{
    WatchRequest r;
    r.set_workspace_id(id);
    r.set_path(path);
    r.set_recursive(recursive);
    return r;
}

class WatchTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        srv_ = std::make_unique<Server>();
        ws_ = srv_->workspaces();
        fs_ = srv_->fs();
        exec_ = srv_->exec();
    }

    std::unique_ptr<Watch> Start(const WatchRequest &req)
    {
        auto w = std::make_unique<Watch>(srv_->channel(), req);
        EXPECT_TRUE(w->WaitReady()) << "READY is not first:\n" << w->Dump();
        return w;
    }

    void MakeDir(const std::string &id, const std::string &path)
    {
        MakeDirRequest req;
        req.set_workspace_id(id);
        req.set_path(path);
        req.set_parents(true);
        MakeDirResponse resp;
        grpc::ClientContext ctx;
        ASSERT_TRUE(fs_->MakeDir(&ctx, req, &resp).ok());
    }
    void MoveApi(const std::string &id, const std::string &from, const std::string &to)
    {
        MoveRequest req;
        req.set_workspace_id(id);
        req.set_from_path(from);
        req.set_to_path(to);
        MoveResponse resp;
        grpc::ClientContext ctx;
        ASSERT_TRUE(fs_->Move(&ctx, req, &resp).ok());
    }
    void RemoveApi(const std::string &id, const std::string &path)
    {
        RemoveRequest req;
        req.set_workspace_id(id);
        req.set_path(path);
        req.set_recursive(true);
        RemoveResponse resp;
        grpc::ClientContext ctx;
        ASSERT_TRUE(fs_->Remove(&ctx, req, &resp).ok());
    }
    grpc::Status CloseWs(const std::string &id)
    {
        CloseRequest req;
        req.set_workspace_id(id);
        CloseResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        return ws_->Close(&ctx, req, &resp);
    }
    void Run(const std::string &id, const std::string &script)
    {
        RunResponse resp;
        grpc::Status s =
            wstest::RunProcess(exec_.get(), id, wstest::ArgvProcess({"sh", "-c", script}), &resp);
        ASSERT_TRUE(s.ok()) << s.error_message();
        ASSERT_EQ(resp.exited().exit_code(), 0) << resp.stderr();
    }

    // Changes through the API, each awaited before the next so the window
    // merges nothing.
    void ApiChangesAreReported(const std::string &id)
    {
        auto w = Start(Req(id));
        ASSERT_TRUE(wstest::Write(fs_.get(), id, "a.txt", "1").ok());
        int i = w->WaitEvent(WATCH_EVENT_CREATED, "a.txt");
        ASSERT_GT(i, 0) << w->Dump();
        EXPECT_EQ(w->Events()[i].file_type(), FILE_TYPE_REGULAR);
        ASSERT_TRUE(wstest::Write(fs_.get(), id, "a.txt", "22").ok());
        // A replace on disk is a rename over the old file: either way the
        // path was modified.
        i = w->WaitFor(
            [](const WatchEvent &e) {
                return e.path() == "a.txt" &&
                       (e.type() == WATCH_EVENT_MODIFIED || e.type() == WATCH_EVENT_MOVED ||
                        e.type() == WATCH_EVENT_CREATED);
            },
            i + 1);
        ASSERT_GT(i, 0) << w->Dump();
        MakeDir(id, "d");
        i = w->WaitEvent(WATCH_EVENT_CREATED, "d", i + 1);
        ASSERT_GT(i, 0) << w->Dump();
        EXPECT_EQ(w->Events()[i].file_type(), FILE_TYPE_DIRECTORY);
        MoveApi(id, "a.txt", "d/b.txt");
        i = w->WaitEvent(WATCH_EVENT_MOVED, "d/b.txt", i + 1);
        ASSERT_GT(i, 0) << w->Dump();
        EXPECT_EQ(w->Events()[i].from_path(), "a.txt");
        RemoveApi(id, "d");
        ASSERT_GT(w->WaitEvent(WATCH_EVENT_REMOVED, "d/b.txt", i + 1), 0) << w->Dump();
        ASSERT_GT(w->WaitEvent(WATCH_EVENT_REMOVED, "d", i + 1), 0) << w->Dump();
        for (const auto &e : w->Events())
            EXPECT_TRUE(e.type() != WATCH_EVENT_OVERFLOW && e.type() != WATCH_EVENT_GONE)
                << Show(e);
    }

    // A command in the box makes a tree; the file at its bottom is seen.
    void CommandChangesAreReported(const std::string &id)
    {
        auto w = Start(Req(id));
        Run(id, "mkdir -p a/b/c && echo x > a/b/c/f && mv a/b/c/f a/b/c/g");
        ASSERT_GT(w->WaitEvent(WATCH_EVENT_CREATED, "a"), 0) << w->Dump();
        // The move within the window of its creation: a created g, or f
        // created then moved to g.
        int i = w->WaitFor([](const WatchEvent &e) {
            return e.path() == "a/b/c/g" &&
                   (e.type() == WATCH_EVENT_CREATED || e.type() == WATCH_EVENT_MOVED);
        });
        ASSERT_GT(i, 0) << w->Dump();
    }

    std::unique_ptr<Server> srv_;
    std::unique_ptr<Workspaces::Stub> ws_;
    std::unique_ptr<FileSystem::Stub> fs_;
    std::unique_ptr<Exec::Stub> exec_;
};

// ---- events ----

TEST_F(WatchTest, MemoryReportsApiChanges)
{
    wstest::Ws w = wstest::Open(ws_.get(), "memory");
    ApiChangesAreReported(w.id);
}

TEST_F(WatchTest, LocalBashReportsApiChanges)
{
    wstest::Ws w = wstest::Open(ws_.get(), "local-bash");
    ApiChangesAreReported(w.id);
}

TEST_F(WatchTest, LocalBashReportsHostChanges)
{
    wstest::Ws ws = wstest::Open(ws_.get(), "local-bash");
    std::string dir = srv_->workspace_dir(ws.id);
    auto w = Start(Req(ws.id));
    wstest::WriteHostFile(dir + "/h.txt", "one");
    int i = w->WaitEvent(WATCH_EVENT_CREATED, "h.txt");
    ASSERT_GT(i, 0) << w->Dump();
    EXPECT_EQ(w->Events()[i].file_type(), FILE_TYPE_REGULAR);
    {
        int fd = open((dir + "/h.txt").c_str(), O_WRONLY | O_APPEND);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(write(fd, "two", 3), 3);
        close(fd);
    }
    i = w->WaitEvent(WATCH_EVENT_MODIFIED, "h.txt", i + 1);
    ASSERT_GT(i, 0) << w->Dump();
    ASSERT_EQ(rename((dir + "/h.txt").c_str(), (dir + "/g.txt").c_str()), 0);
    i = w->WaitEvent(WATCH_EVENT_MOVED, "g.txt", i + 1);
    ASSERT_GT(i, 0) << w->Dump();
    EXPECT_EQ(w->Events()[i].from_path(), "h.txt");
    ASSERT_EQ(unlink((dir + "/g.txt").c_str()), 0);
    ASSERT_GT(w->WaitEvent(WATCH_EVENT_REMOVED, "g.txt", i + 1), 0) << w->Dump();
}

TEST_F(WatchTest, NewSubtreeIsWatchedWithoutARace)
{
    wstest::Ws ws = wstest::Open(ws_.get(), "local-bash");
    std::string dir = srv_->workspace_dir(ws.id);
    auto w = Start(Req(ws.id));
    // As fast as the host can: the file is made before the server could
    // have watched a/b/c.
    ASSERT_EQ(mkdir((dir + "/a").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((dir + "/a/b").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((dir + "/a/b/c").c_str(), 0755), 0);
    wstest::WriteHostFile(dir + "/a/b/c/f", "x");
    ASSERT_GT(w->WaitEvent(WATCH_EVENT_CREATED, "a/b/c/f"), 0) << w->Dump();
    // And the new directory is watched from now on.
    wstest::WriteHostFile(dir + "/a/b/c/later", "x");
    ASSERT_GT(w->WaitEvent(WATCH_EVENT_CREATED, "a/b/c/later"), 0) << w->Dump();
}

TEST_F(WatchTest, MemoryNonRecursiveSeesOnlyItsDirectory)
{
    wstest::Ws ws = wstest::Open(ws_.get(), "memory");
    MakeDir(ws.id, "sub/deep");
    auto w = Start(Req(ws.id, "sub", false));
    ASSERT_TRUE(wstest::Write(fs_.get(), ws.id, "sub/deep/x", "x").ok());
    ASSERT_TRUE(wstest::Write(fs_.get(), ws.id, "top", "x").ok());
    ASSERT_TRUE(wstest::Write(fs_.get(), ws.id, "sub/y", "x").ok());
    ASSERT_GT(w->WaitEvent(WATCH_EVENT_CREATED, "sub/y"), 0) << w->Dump();
    for (const auto &e : w->Events())
        EXPECT_TRUE(e.path() != "sub/deep/x" && e.path() != "top") << Show(e);
}

// ---- commands in every box ----

TEST_F(WatchTest, LocalBashCommandChanges)
{
    wstest::Ws ws = wstest::OpenShell(ws_.get(), {"sh"});
    CommandChangesAreReported(ws.id);
}

TEST_F(WatchTest, LocalSandboxCommandChanges)
{
    OpenRequest req;
    req.mutable_local_sandbox()->set_exec_mode(wstest::TestExecMode());
    req.mutable_capabilities()->mutable_fs();
    req.mutable_capabilities()->mutable_shell()->add_allowed_commands("sh");
    OpenResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    grpc::Status s = ws_->Open(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << "local-sandbox needs bubblewrap (bazel/setup.sh installs it): "
                        << s.error_message();
    CommandChangesAreReported(resp.workspace().id());
}

TEST_F(WatchTest, DockerCommandChanges)
{
    OpenRequest req;
    DockerConfig *dc = req.mutable_docker();
    dc->set_image("workspaced-test:busybox");
    dc->set_exec_mode(wstest::TestExecMode());
    req.mutable_capabilities()->mutable_fs();
    req.mutable_capabilities()->mutable_shell()->add_allowed_commands("sh");
    OpenResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    grpc::Status s = ws_->Open(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << "the docker provider needs the daemon (tests/fixtures/dockerd.sh) and "
                           "the test image (tests/fixtures/image/build.sh); these tests never "
                           "skip: "
                        << s.error_message();
    CommandChangesAreReported(resp.workspace().id());
    EXPECT_TRUE(CloseWs(resp.workspace().id()).ok());
}

// ---- bounds ----

TEST_F(WatchTest, BurstOverflowsAndTheStreamGoesOn)
{
    wstest::Ws ws = wstest::OpenShell(ws_.get(), {"sh"});
    Watch w(Watch::SmallWindowChannel(*srv_), Req(ws.id));
    ASSERT_TRUE(w.WaitReady()) << w.Dump();
    // The client stops reading while 100,000 files appear: the server's
    // queue (or the kernel's) must overflow, and say so.
    w.Pause();
    Run(ws.id, "mkdir burst && cd burst && seq 100000 | xargs touch");
    w.Resume();
    int i = w.WaitFor([](const WatchEvent &e) { return e.type() == WATCH_EVENT_OVERFLOW; });
    ASSERT_GT(i, 0) << "no OVERFLOW:\n" << w.Dump();
    size_t creates = 0;
    for (const auto &e : w.Events())
        creates += e.type() == WATCH_EVENT_CREATED;
    EXPECT_LT(creates, 100000u);
    // Still usable: a later change is reported.
    ASSERT_TRUE(wstest::Write(fs_.get(), ws.id, "after", "x").ok());
    ASSERT_GT(w.WaitEvent(WATCH_EVENT_CREATED, "after", i), 0) << w.Dump();
    EXPECT_FALSE(w.Done());
}

TEST_F(WatchTest, RenameStormNeverHangs)
{
    wstest::Ws ws = wstest::Open(ws_.get(), "local-bash");
    std::string dir = srv_->workspace_dir(ws.id);
    wstest::WriteHostFile(dir + "/r0", "x");
    auto w = Start(Req(ws.id));
    for (int n = 0; n < 1000; n++)
        ASSERT_EQ(rename((dir + "/r" + std::to_string(n)).c_str(),
                         (dir + "/r" + std::to_string(n + 1)).c_str()),
                  0);
    wstest::WriteHostFile(dir + "/sentinel", "x");
    ASSERT_GT(w->WaitEvent(WATCH_EVENT_CREATED, "sentinel"), 0) << w->Dump();
    size_t moves = 0, overflows = 0;
    for (const auto &e : w->Events()) {
        if (e.type() == WATCH_EVENT_MOVED) {
            moves++;
            EXPECT_EQ(e.path().substr(0, 1), "r");
            EXPECT_EQ(e.from_path().substr(0, 1), "r");
        }
        overflows += e.type() == WATCH_EVENT_OVERFLOW;
    }
    EXPECT_TRUE(moves == 1000 || overflows > 0) << moves << " moves\n" << w->Dump();
}

// ---- confinement ----

TEST_F(WatchTest, SymlinksAreEntriesNeverFollowed)
{
    wstest::Ws ws = wstest::Open(ws_.get(), "local-bash");
    std::string dir = srv_->workspace_dir(ws.id);
    std::string outside = wstest::MakeTempDir("ws-watch-outside");
    ASSERT_EQ(mkdir((outside + "/sub").c_str(), 0755), 0);
    // One link before the watch (the first walk must not follow it), one
    // made while it runs (nor the walk of a new entry).
    ASSERT_EQ(symlink(outside.c_str(), (dir + "/before").c_str()), 0);
    auto w = Start(Req(ws.id));
    ASSERT_EQ(symlink("/", (dir + "/root").c_str()), 0);
    int i = w->WaitEvent(WATCH_EVENT_CREATED, "root");
    ASSERT_GT(i, 0) << w->Dump();
    EXPECT_EQ(w->Events()[i].file_type(), FILE_TYPE_SYMLINK);
    ASSERT_EQ(symlink((outside + "/sub").c_str(), (dir + "/during").c_str()), 0);
    ASSERT_GT(w->WaitEvent(WATCH_EVENT_CREATED, "during"), 0) << w->Dump();
    // Changes where the links point.
    wstest::WriteHostFile(outside + "/x", "x");
    wstest::WriteHostFile(outside + "/sub/y", "y");
    ASSERT_EQ(mkdir((outside + "/newdir").c_str(), 0755), 0);
    wstest::WriteHostFile(dir + "/sentinel", "x");
    ASSERT_GT(w->WaitEvent(WATCH_EVENT_CREATED, "sentinel"), 0) << w->Dump();
    for (const auto &e : w->Events()) {
        EXPECT_TRUE(e.path().rfind("before/", 0) != 0 && e.path().rfind("during/", 0) != 0 &&
                    e.path().rfind("root/", 0) != 0 && e.path().find("newdir") == std::string::npos)
            << "reported from outside: " << Show(e);
    }
}

TEST_F(WatchTest, IncludeAndExcludeGlobs)
{
    wstest::Ws ws = wstest::Open(ws_.get(), "local-bash");
    std::string dir = srv_->workspace_dir(ws.id);
    ASSERT_EQ(mkdir((dir + "/skip").c_str(), 0755), 0);
    WatchRequest req = Req(ws.id);
    req.add_include("**/*.txt");
    req.add_exclude("skip/**");
    auto w = Start(req);
    wstest::WriteHostFile(dir + "/a.txt", "x");
    wstest::WriteHostFile(dir + "/b.log", "x");
    wstest::WriteHostFile(dir + "/skip/c.txt", "x");
    ASSERT_EQ(mkdir((dir + "/keep").c_str(), 0755), 0);
    wstest::WriteHostFile(dir + "/keep/d.txt", "x");
    ASSERT_GT(w->WaitEvent(WATCH_EVENT_CREATED, "keep/d.txt"), 0) << w->Dump();
    ASSERT_GT(w->WaitEvent(WATCH_EVENT_CREATED, "a.txt"), 0) << w->Dump();
    for (const auto &e : w->Events())
        EXPECT_TRUE(e.path() != "b.log" && e.path().rfind("skip", 0) != 0 && e.path() != "keep")
            << Show(e);

    WatchRequest bad = Req(ws.id);
    bad.add_include("[unclosed");
    Watch b(srv_->channel(), bad);
    EXPECT_WS_ERROR(b.Finish(), grpc::StatusCode::INVALID_ARGUMENT, "BAD_PATTERN");
}

// ---- errors, limits, ends ----

TEST_F(WatchTest, MissingPathAndRecursiveFile)
{
    wstest::Ws ws = wstest::Open(ws_.get(), "memory");
    ASSERT_TRUE(wstest::Write(fs_.get(), ws.id, "f", "x").ok());
    Watch missing(srv_->channel(), Req(ws.id, "nope"));
    EXPECT_WS_ERROR(missing.Finish(), grpc::StatusCode::NOT_FOUND, "NO_SUCH_FILE");
    Watch file(srv_->channel(), Req(ws.id, "f", true));
    EXPECT_WS_ERROR(file.Finish(), grpc::StatusCode::FAILED_PRECONDITION, "NOT_DIRECTORY");
    EXPECT_TRUE(missing.Events().empty());
}

TEST_F(WatchTest, SeventeenthWatchIsRefusedAndCancelReleases)
{
    wstest::Ws ws = wstest::Open(ws_.get(), "local-bash");
    std::vector<std::unique_ptr<Watch>> held;
    for (int i = 0; i < 16; i++)
        held.push_back(Start(Req(ws.id)));
    Watch extra(srv_->channel(), Req(ws.id));
    grpc::Status s = extra.Finish();
    EXPECT_WS_ERROR(s, grpc::StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
    wstest::Error e = wstest::Decode(s);
    EXPECT_EQ(e.metadata["quota"], "watches");
    EXPECT_EQ(e.metadata["limit"], "16");
    // Another workspace has its own 16.
    wstest::Ws other = wstest::Open(ws_.get(), "memory");
    Start(Req(other.id));

    for (auto &w : held)
        w->Cancel();
    held.clear();
    // The cancels reach the server on their own time: a new watch gets in
    // once they have, whatever the order of the calls.
    for (int n = 0; n < 16; n++) {
        auto deadline = Clock::now() + kWait;
        for (;;) {
            auto w = std::make_unique<Watch>(srv_->channel(), Req(ws.id));
            if (w->WaitReady()) {
                held.push_back(std::move(w));
                break;
            }
            grpc::Status st = w->Finish();
            ASSERT_TRUE(wstest::IsError(st, grpc::StatusCode::RESOURCE_EXHAUSTED, "QUOTA"))
                << st.error_message();
            ASSERT_LT(Clock::now(), deadline) << "cancelled watches were never released";
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
    EXPECT_EQ(held.size(), 16u);
}

// The host's inotify instances for the server's user (root) run out: the
// test holds every one it can get (fs.inotify.max_user_instances counts
// all processes of the user). The Watch gets a clear QUOTA naming the
// limit, memory workspaces (no inotify) still watch, and watching works
// again once the instances are back.
TEST_F(WatchTest, OutOfInotifyInstancesIsAClearQuota)
{
    wstest::Ws ws = wstest::Open(ws_.get(), "local-bash");
    wstest::Ws mem = wstest::Open(ws_.get(), "memory");
    std::vector<int> held;
    struct rlimit nofile;
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &nofile), 0);
    nofile.rlim_cur = nofile.rlim_max;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &nofile), 0);
    for (;;) {
        int fd = inotify_init1(IN_CLOEXEC);
        if (fd < 0) {
            ASSERT_EQ(errno, EMFILE) << "the user's instance limit, not our descriptors";
            break;
        }
        held.push_back(fd);
        ASSERT_LT(held.size(), 1000000u) << "no inotify instance limit on this host";
    }
    Watch refused(srv_->channel(), Req(ws.id));
    grpc::Status s = refused.Finish();
    auto in_memory = std::make_unique<Watch>(srv_->channel(), Req(mem.id));
    bool memory_ready = in_memory->WaitReady();
    for (int fd : held)
        close(fd);
    EXPECT_WS_ERROR(s, grpc::StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
    wstest::Error e = wstest::Decode(s);
    EXPECT_EQ(e.metadata["quota"], "inotify_instances");
    std::string limit = wstest::ReadHostFile("/proc/sys/fs/inotify/max_user_instances");
    EXPECT_EQ(e.metadata["limit"] + "\n", limit);
    EXPECT_TRUE(memory_ready) << "a memory workspace's watch needs no inotify";

    auto w = Start(Req(ws.id));
    wstest::WriteHostFile(srv_->workspace_dir(ws.id) + "/after", "x");
    ASSERT_GT(w->WaitEvent(WATCH_EVENT_CREATED, "after"), 0) << w->Dump();
}

TEST_F(WatchTest, RemovedDirectoryIsGone)
{
    for (const char *provider : {"memory", "local-bash"}) {
        SCOPED_TRACE(provider);
        wstest::Ws ws = wstest::Open(ws_.get(), provider);
        MakeDir(ws.id, "d/e");
        auto w = Start(Req(ws.id, "d"));
        ASSERT_TRUE(wstest::Write(fs_.get(), ws.id, "d/e/f", "x").ok());
        ASSERT_GT(w->WaitEvent(WATCH_EVENT_CREATED, "d/e/f"), 0) << w->Dump();
        RemoveApi(ws.id, "d");
        grpc::Status s = w->Finish();
        EXPECT_TRUE(s.ok()) << s.error_message();
        auto evs = w->Events();
        ASSERT_FALSE(evs.empty());
        EXPECT_EQ(evs.back().type(), WATCH_EVENT_GONE) << w->Dump();
    }
}

TEST_F(WatchTest, CloseEndsTheStream)
{
    for (const char *provider : {"memory", "local-bash"}) {
        SCOPED_TRACE(provider);
        wstest::Ws ws = wstest::Open(ws_.get(), provider);
        ASSERT_TRUE(wstest::Write(fs_.get(), ws.id, "sub/f", "x", nullptr, true).ok());
        auto root = Start(Req(ws.id));
        auto sub = Start(Req(ws.id, "sub"));
        ASSERT_TRUE(CloseWs(ws.id).ok());
        EXPECT_WS_ERROR(root->Finish(), grpc::StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        EXPECT_WS_ERROR(sub->Finish(), grpc::StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    }
    // The server is still well.
    wstest::Ws ws = wstest::Open(ws_.get(), "memory");
    Start(Req(ws.id));
}

} // namespace
