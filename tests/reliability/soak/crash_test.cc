// Crash consistency: the real server is SIGKILLed at a random point of a
// scripted workload (Opens in every provider, WriteFile, WriteArchive,
// Snapshot, commands, background commands, Close), then started again on
// the same state directory. After each restart:
//   - it starts (no stale lock or socket stops it);
//   - nothing of the killed server is left: no process it started (the
//     test is the subreaper of everything the server leaves behind), no
//     cgroup it made, no container labelled as its own once the start's
//     cleanup ran, no transient entry (.ws-tmp-*, .ws-stage-*, ...)
//     anywhere in the state directory;
//   - every workspace it lists resolves with its files intact (each file's
//     content is the one its last acknowledged write gave it, or, for the
//     write the kill interrupted, the old or the new one whole; no other
//     file, no transient entry through the API), or answers NOT_FOUND
//     WORKSPACE_EVICTED; every workspace closed before the kill is gone.
// The seed is printed; WS_CRASH_SEED=N replays a run's workload. The
// bounded run is in the suite; WS_SOAK_FULL=1 runs 100 iterations.
#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"
#include "tests/reliability/soak/probe.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;
using soak::Backend;
using wstest::Server;

namespace
{

const std::vector<std::string> kAllowed = {"sh", "printf", "sleep", "cat", "true"};
// A file's "content" when it does not exist.
const char kAbsent[] = "\x01(absent)";
const char *const kTransient[] = {".ws-tmp-", ".ws-stage-", ".ws-trash-", ".workspaced-restore-",
                                  ".workspaced-replaced-"};

std::chrono::system_clock::time_point Deadline(int s = 60)
{
    return std::chrono::system_clock::now() + std::chrono::seconds(s);
}

bool IsTransient(const std::string &name)
{
    for (const char *p : kTransient)
        if (name.compare(0, strlen(p), p) == 0)
            return true;
    return false;
}

// Transient entries anywhere under `dir` (paths relative to it).
void FindTransient(const std::string &dir, const std::string &rel, std::vector<std::string> *out)
{
    DIR *d = opendir(dir.c_str());
    if (!d)
        return;
    while (struct dirent *de = readdir(d)) {
        std::string n = de->d_name;
        if (n == "." || n == "..")
            continue;
        if (IsTransient(n))
            out->push_back(rel + n);
        if (de->d_type == DT_DIR)
            FindTransient(dir + "/" + n, rel + n + "/", out);
    }
    closedir(d);
}

// Live children of this process other than `except`; zombies among them
// are reaped on the way.
std::vector<pid_t> Orphans(pid_t except)
{
    std::vector<pid_t> out;
    pid_t self = getpid();
    DIR *d = opendir("/proc");
    while (struct dirent *de = d ? readdir(d) : nullptr) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        pid_t pid = atoi(de->d_name);
        if (pid == except)
            continue;
        std::string s = wstest::ReadHostFile(std::string("/proc/") + de->d_name + "/stat");
        size_t close = s.rfind(')');
        if (close == std::string::npos || close + 2 >= s.size())
            continue;
        std::istringstream f(s.substr(close + 2));
        char state = 0;
        long ppid = 0;
        if (!(f >> state >> ppid) || ppid != self)
            continue;
        if (state == 'Z')
            waitpid(pid, nullptr, WNOHANG);
        else
            out.push_back(pid);
    }
    if (d)
        closedir(d);
    return out;
}

std::string Cmdline(pid_t pid)
{
    std::string c = wstest::ReadHostFile("/proc/" + std::to_string(pid) + "/cmdline");
    for (auto &ch : c)
        if (ch == '\0')
            ch = ' ';
    return c;
}

struct WsModel {
    std::string id, token;
    Backend backend;
    // Each file's acceptable contents (kAbsent: missing).
    std::map<std::string, std::set<std::string>> files;
};

struct Model {
    std::map<std::string, WsModel> live;
    std::set<std::string> closed;
    std::set<std::string> snapshots;
    int evicted = 0, resolved = 0, adopted = 0;
};

class CrashTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        // Whatever the killed server leaves running is reparented here,
        // not to init: the orphan check sees it.
        ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
        state_ = wstest::MakeStateDir();
        marker_ = wstest::UniqueSleep();
    }

    std::string Content(std::mt19937_64 &rng, size_t n)
    {
        std::string s(n, 'x');
        for (auto &c : s)
            c = 'a' + rng() % 26;
        return s;
    }

    // The workload, until the server dies under it (an RPC that fails for
    // anything but a refusal ends it) or `stop`.
    void Workload(Server *srv, Model *m, uint64_t seed, std::atomic<bool> *stop, int *ops)
    {
        std::mt19937_64 rng(seed);
        auto ws = srv->workspaces();
        auto fs = srv->fs();
        auto ex = srv->exec();
        const std::vector<Backend> backends = soak::ExecBackends();
        auto dead = [](const grpc::Status &s) {
            return s.error_code() == StatusCode::UNAVAILABLE ||
                   s.error_code() == StatusCode::DEADLINE_EXCEEDED ||
                   s.error_code() == StatusCode::CANCELLED ||
                   s.error_code() == StatusCode::UNKNOWN || s.error_code() == StatusCode::INTERNAL;
        };
        while (!*stop) {
            (*ops)++;
            int r = rng() % 100;
            std::vector<std::string> ids;
            for (const auto &kv : m->live)
                ids.push_back(kv.first);
            if (ids.size() < 2 || (r < 12 && ids.size() < 6)) {
                int docker = 0;
                for (const auto &kv : m->live)
                    docker += kv.second.backend.provider == "docker";
                Backend b = rng() % 6 == 0 ? Backend{"memory", "memory", EXEC_MODE_DEFAULT}
                                           : backends[rng() % backends.size()];
                if (b.provider == "docker" && docker >= 2)
                    b = backends[0];
                wstest::Ws w;
                grpc::Status s = soak::OpenBackend(ws.get(), b, kAllowed, &w);
                if (!s.ok()) {
                    EXPECT_TRUE(dead(s)) << b.name << " Open: " << s.error_message();
                    return;
                }
                m->live[w.id] = WsModel{w.id, w.token, b, {}};
                continue;
            }
            WsModel &w = m->live[ids[rng() % ids.size()]];
            bool shell = w.backend.provider != "memory";
            if (r < 50) {
                std::string path =
                    "d" + std::to_string(rng() % 3) + "/f" + std::to_string(rng() % 4) + ".txt";
                size_t n = rng() % 4 == 0 ? 1 << 20 : rng() % (64 << 10);
                std::string data = Content(rng, n);
                auto &ok = w.files[path];
                if (ok.empty())
                    ok.insert(kAbsent);
                ok.insert(data);
                grpc::Status s = wstest::Write(fs.get(), w.id, path, data, nullptr, true);
                if (!s.ok()) {
                    EXPECT_TRUE(dead(s)) << "WriteFile: " << s.error_message();
                    return;
                }
                ok = {data};
            } else if (r < 62) {
                std::vector<std::pair<std::string, std::string>> files;
                std::string top = "arc" + std::to_string(rng() % 3);
                for (int i = 0, k = 1 + rng() % 4; i < k; i++)
                    files.push_back({top + "/a" + std::to_string(i) + ".txt",
                                     Content(rng, rng() % (128 << 10))});
                for (const auto &[p, d] : files) {
                    auto &ok = w.files[p];
                    if (ok.empty())
                        ok.insert(kAbsent);
                    ok.insert(d);
                }
                std::string tar = soak::Tar(files);
                ClientContext ctx;
                ctx.set_deadline(Deadline());
                WriteArchiveResponse resp;
                auto wr = fs->WriteArchive(&ctx, &resp);
                WriteArchiveRequest h;
                h.mutable_header()->set_workspace_id(w.id);
                h.mutable_header()->set_path(".");
                h.mutable_header()->set_overwrite(ARCHIVE_OVERWRITE_MERGE);
                if (wr->Write(h)) {
                    WriteArchiveRequest d;
                    d.set_data(tar);
                    d.set_finish(true);
                    wr->Write(d);
                }
                wr->WritesDone();
                grpc::Status s = wr->Finish();
                if (!s.ok()) {
                    EXPECT_TRUE(dead(s)) << "WriteArchive: " << s.error_message();
                    return;
                }
                for (const auto &[p, d] : files)
                    w.files[p] = {d};
            } else if (r < 70) {
                SnapshotRequest req;
                req.set_workspace_id(w.id);
                SnapshotResponse resp;
                ClientContext ctx;
                ctx.set_deadline(Deadline());
                grpc::Status s = ws->Snapshot(&ctx, req, &resp);
                if (!s.ok()) {
                    EXPECT_TRUE(dead(s)) << "Snapshot: " << s.error_message();
                    return;
                }
                m->snapshots.insert(resp.snapshot().id());
            } else if (r < 85 && shell) {
                std::string path = "e" + std::to_string(rng() % 3) + ".txt";
                std::string data = Content(rng, 1 + rng() % 2000);
                auto &ok = w.files[path];
                if (ok.empty())
                    ok.insert(kAbsent);
                ok.insert(data);
                RunResponse resp;
                grpc::Status s =
                    wstest::RunProcess(ex.get(), w.id,
                                       wstest::ArgvProcess({"sh", "-c", "printf %s \"$1\" > \"$2\"",
                                                            "sh", data, path}),
                                       &resp, "", 60);
                if (!s.ok()) {
                    EXPECT_TRUE(dead(s)) << w.backend.name << " Run: " << s.error_message();
                    return;
                }
                EXPECT_EQ(resp.exited().exit_code(), 0) << w.backend.name << resp.stderr();
                // Written by the shell, not the server: whole once the command
                // exited, and a SIGKILL of the server loses nothing the
                // kernel has.
                ok = {data};
            } else if (r < 92 && shell) {
                // A background command the kill must not leave behind.
                ProcessConfig pc = wstest::ArgvProcess({"sleep", marker_});
                pc.set_background(true);
                ClientContext ctx;
                ctx.set_deadline(Deadline());
                auto rw = wstest::StartStream(ex.get(), &ctx, w.id, pc);
                wstest::EventLog log;
                bool started = wstest::ReadEvents(
                    rw.get(), &log, [](const wstest::EventLog &l) { return l.started; });
                ctx.TryCancel();
                grpc::Status s = rw->Finish();
                if (!started) {
                    EXPECT_TRUE(dead(s)) << w.backend.name << " Start: " << s.error_message();
                    return;
                }
            } else if (r >= 92) {
                std::string id = w.id;
                grpc::Status s = soak::CloseWs(ws.get(), id);
                if (!s.ok()) {
                    EXPECT_TRUE(dead(s)) << "Close: " << s.error_message();
                    return;
                }
                m->live.erase(id);
                m->closed.insert(id);
            }
        }
    }

    // Everything after a restart; `dead_pids` are the servers killed so far.
    void Check(Server *srv, Model *m, const std::vector<pid_t> &dead_pids, int iteration)
    {
        SCOPED_TRACE("after restart " + std::to_string(iteration));
        const std::string server_id = soak::ServerId(state_);
        // Nothing of the killed servers runs on.
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        std::vector<pid_t> orphans = Orphans(srv->pid());
        int marked = wstest::CountProcsWithMarker(marker_);
        while ((!orphans.empty() || marked) && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            orphans = Orphans(srv->pid());
            marked = wstest::CountProcsWithMarker(marker_);
        }
        std::string names;
        for (pid_t p : orphans)
            names += std::to_string(p) + " '" + Cmdline(p) + "'; ";
        EXPECT_TRUE(orphans.empty()) << "processes of the killed server left: " << names;
        EXPECT_EQ(marked, 0) << "background commands of the killed server left";
        for (pid_t p : orphans)
            kill(p, SIGKILL);
        for (pid_t p : dead_pids)
            EXPECT_EQ(soak::CountCgroupsOf(p), 0) << "cgroups of the killed server " << p;
        int containers = soak::CountContainersOf(server_id);
        deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (containers != 0 && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            containers = soak::CountContainersOf(server_id);
        }
        EXPECT_EQ(containers, 0) << "containers of the killed server left after the restart";
        auto ws = srv->workspaces();
        auto fs = srv->fs();
        std::set<std::string> listed;
        ListRequest lr;
        lr.set_page_size(1000);
        ListResponse lresp;
        ClientContext lctx;
        lctx.set_deadline(Deadline());
        grpc::Status s = ws->List(&lctx, lr, &lresp);
        ASSERT_TRUE(s.ok()) << s.error_message();
        for (const auto &w : lresp.workspaces())
            listed.insert(w.id());
        for (const auto &id : m->closed)
            EXPECT_EQ(listed.count(id), 0u) << "closed workspace " << id << " listed";
        // A workspace whose Open the kill interrupted: listed, unknown here.
        for (const auto &id : listed)
            if (!m->live.count(id) && !m->closed.count(id)) {
                m->live[id] = WsModel{id, "", {"unknown", "", EXEC_MODE_DEFAULT}, {}};
                m->adopted++;
            }
        std::vector<std::string> gone;
        for (auto &[id, w] : m->live) {
            SCOPED_TRACE(w.backend.name + " workspace " + id);
            if (!w.token.empty()) {
                ResolveRequest rq;
                rq.mutable_ref()->set_token(w.token);
                ResolveResponse rr;
                ClientContext ctx;
                ctx.set_deadline(Deadline(120));
                s = ws->Resolve(&ctx, rq, &rr);
            } else {
                DescribeRequest dq;
                dq.set_workspace_id(id);
                DescribeResponse dr;
                ClientContext ctx;
                ctx.set_deadline(Deadline(120));
                s = ws->Describe(&ctx, dq, &dr);
            }
            if (!s.ok()) {
                EXPECT_TRUE(wstest::IsError(s, StatusCode::NOT_FOUND, "WORKSPACE_EVICTED"));
                EXPECT_EQ(listed.count(id), 0u) << "listed, yet evicted";
                gone.push_back(id);
                continue;
            }
            m->resolved++;
            // The files, whole.
            for (auto &[path, ok] : w.files) {
                std::string got;
                grpc::Status r = wstest::Read(fs.get(), id, path, &got);
                if (r.error_code() == StatusCode::NOT_FOUND)
                    got = kAbsent;
                else
                    EXPECT_TRUE(r.ok()) << path << ": " << r.error_message();
                EXPECT_TRUE(ok.count(got))
                    << path << ": " << got.size()
                    << " bytes that no write gave it (allowed: " << ok.size() << " versions)";
                ok = {got};
            }
            // Nothing else, and nothing transient, through the API.
            ListDirRequest dq;
            dq.set_workspace_id(id);
            dq.set_path(".");
            dq.set_depth(64);
            ListDirResponse dr;
            ClientContext dctx;
            dctx.set_deadline(Deadline());
            s = fs->ListDir(&dctx, dq, &dr);
            ASSERT_TRUE(s.ok()) << s.error_message();
            for (const auto &e : dr.entries()) {
                std::string base = e.path().substr(e.path().rfind('/') + 1);
                EXPECT_FALSE(IsTransient(base)) << "visible: " << e.path();
                if (e.type() == FILE_TYPE_REGULAR) {
                    EXPECT_TRUE(w.files.count(e.path())) << "a file no write made: " << e.path();
                }
            }
        }
        for (const auto &id : gone) {
            m->live.erase(id);
            m->evicted++;
        }
        // On disk too, once every workspace was taken back (a workspace is
        // swept when its first call attaches it, before that call sees it;
        // until then a leftover lies in a tree no call reads).
        std::vector<std::string> transient;
        FindTransient(state_, "", &transient);
        EXPECT_TRUE(transient.empty())
            << "transient entries in the state directory once every workspace was taken back: "
            << ::testing::PrintToString(transient);
        // Snapshots acknowledged before a kill are kept.
        ListSnapshotsRequest sq;
        sq.set_page_size(1000);
        ListSnapshotsResponse sr;
        ClientContext sctx;
        sctx.set_deadline(Deadline());
        s = ws->ListSnapshots(&sctx, sq, &sr);
        ASSERT_TRUE(s.ok()) << s.error_message();
        std::set<std::string> snaps;
        for (const auto &sn : sr.snapshots())
            snaps.insert(sn.id());
        for (const auto &id : m->snapshots)
            EXPECT_EQ(snaps.count(id), 1u) << "snapshot " << id << " lost";
    }

    std::string state_, marker_;
};

// The kill lands while a WriteArchive is being extracted (its staging
// directory exists): after the restart the workspace is as it was, with no
// staging directory left, through the API or on disk.
TEST_F(CrashTest, AnArchiveCutByTheKillLeavesNoStagingDirectory)
{
    auto srv = std::make_unique<Server>(std::vector<std::string>{}, state_);
    auto ws = srv->workspaces();
    auto fs = srv->fs();
    wstest::Ws w;
    ASSERT_TRUE(
        soak::OpenBackend(ws.get(), {"local-bash", "local-bash", EXEC_MODE_DEFAULT}, kAllowed, &w)
            .ok());
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "keep.txt", "kept").ok());
    std::string tar = soak::Tar({{"arc/a.txt", std::string(256 << 10, 'a')}});
    {
        ClientContext ctx;
        ctx.set_deadline(Deadline());
        WriteArchiveResponse resp;
        auto wr = fs->WriteArchive(&ctx, &resp);
        WriteArchiveRequest h;
        h.mutable_header()->set_workspace_id(w.id);
        h.mutable_header()->set_path(".");
        h.mutable_header()->set_overwrite(ARCHIVE_OVERWRITE_MERGE);
        ASSERT_TRUE(wr->Write(h));
        WriteArchiveRequest d;
        // Half of the archive: the server extracts what it has and waits.
        d.set_data(tar.substr(0, tar.size() / 2));
        ASSERT_TRUE(wr->Write(d));
        std::vector<std::string> staged;
        for (int i = 0; i < 500 && staged.empty(); i++) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            FindTransient(srv->workspace_dir(w.id), "", &staged);
        }
        ASSERT_FALSE(staged.empty()) << "the server never staged the archive";
        srv->Kill();
        (void)wr->Finish();
    }
    srv = std::make_unique<Server>(std::vector<std::string>{}, state_);
    ws = srv->workspaces();
    fs = srv->fs();
    ResolveRequest rq;
    rq.mutable_ref()->set_token(w.token);
    ResolveResponse rr;
    ClientContext ctx;
    ctx.set_deadline(Deadline());
    ASSERT_TRUE(ws->Resolve(&ctx, rq, &rr).ok());
    ListDirRequest dq;
    dq.set_workspace_id(w.id);
    dq.set_path(".");
    dq.set_depth(8);
    ListDirResponse dr;
    ClientContext dctx;
    ASSERT_TRUE(fs->ListDir(&dctx, dq, &dr).ok());
    std::vector<std::string> seen;
    for (const auto &e : dr.entries())
        seen.push_back(e.path());
    EXPECT_EQ(seen, std::vector<std::string>{"keep.txt"});
    std::vector<std::string> left;
    FindTransient(state_, "", &left);
    EXPECT_TRUE(left.empty()) << ::testing::PrintToString(left);
}

TEST_F(CrashTest, KillAtRandomPointsAndRestart)
{
    uint64_t seed = std::random_device{}();
    if (const char *e = getenv("WS_CRASH_SEED"))
        seed = std::strtoull(e, nullptr, 10);
    const int iterations = soak::FullScale() ? 100 : soak::Sanitized() ? 4 : 8;
    printf("crash seed: %llu (replay: WS_CRASH_SEED=%llu), %d iterations\n",
           static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed),
           iterations);
    fflush(stdout);
    std::mt19937_64 rng(seed);
    Model m;
    std::vector<pid_t> dead;
    int total_ops = 0;
    // Snapshots are only ever added (each one acknowledged must survive),
    // so the full run's hundreds of them would meet the tenant's default
    // quota of 100: the quota is not what this test is about.
    const std::vector<std::string> args = {"--max-snapshots", "100000"};
    auto srv = std::make_unique<Server>(args, state_);
    for (int it = 0; it < iterations; it++) {
        std::atomic<bool> stop{false};
        int ops = 0;
        uint64_t wseed = rng();
        int delay_ms = 100 + rng() % 2500;
        std::thread worker([&] { Workload(srv.get(), &m, wseed, &stop, &ops); });
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        dead.push_back(srv->pid());
        srv->Kill();
        stop = true;
        worker.join();
        total_ops += ops;
        // It starts again at once on the same directory.
        try {
            srv = std::make_unique<Server>(args, state_);
        } catch (const std::exception &e) {
            FAIL() << "restart " << it << " failed: " << e.what();
        }
        Check(srv.get(), &m, dead, it);
        printf("crash %d: killed after %d ms and %d operations; %zu workspaces live\n", it,
               delay_ms, ops, m.live.size());
        fflush(stdout);
        if (HasFatalFailure())
            return;
    }
    printf("\n| iterations | operations | resolved after restarts | evicted | adopted (open "
           "interrupted) | closed | snapshots |\n| --- | --- | --- | --- | --- | --- | --- |\n"
           "| %d | %d | %d | %d | %d | %zu | %zu |\n",
           iterations, total_ops, m.resolved, m.evicted, m.adopted, m.closed.size(),
           m.snapshots.size());
    // Closed, then stopped cleanly: nothing is left either (a container
    // lives until its workspace's Close, across restarts).
    {
        auto ws = srv->workspaces();
        for (const auto &kv : m.live)
            EXPECT_TRUE(soak::CloseWs(ws.get(), kv.first).ok()) << kv.first;
    }
    std::string server_id = soak::ServerId(state_);
    pid_t last = srv->pid();
    srv.reset();
    EXPECT_EQ(soak::CountCgroupsOf(last), 0);
    EXPECT_EQ(soak::CountContainersOf(server_id), 0);
    EXPECT_TRUE(Orphans(-1).empty());
}

} // namespace
