// Workspaces lifecycle against the real server: open, capabilities, quota,
// signed refs, close, describe, list, restart and eviction.
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;
using wstest::Server;

namespace
{

grpc::Status Resolve(Workspaces::Stub *stub, const std::string &token, ResolveResponse *resp)
{
    ClientContext ctx;
    ResolveRequest req;
    req.mutable_ref()->set_token(token);
    return stub->Resolve(&ctx, req, resp);
}

grpc::Status Close(Workspaces::Stub *stub, const std::string &id, CloseResponse *resp)
{
    ClientContext ctx;
    CloseRequest req;
    req.set_workspace_id(id);
    return stub->Close(&ctx, req, resp);
}

grpc::Status Describe(Workspaces::Stub *stub, const std::string &id, DescribeResponse *resp)
{
    ClientContext ctx;
    DescribeRequest req;
    req.set_workspace_id(id);
    return stub->Describe(&ctx, req, resp);
}

grpc::Status StatPath(FileSystem::Stub *fs, const std::string &id, const std::string &path)
{
    ClientContext ctx;
    StatRequest req;
    StatResponse resp;
    req.set_workspace_id(id);
    req.set_path(path);
    return fs->Stat(&ctx, req, &resp);
}

TEST(Workspaces, OpenReturnsIdRefProviderAndCapabilities)
{
    Server srv;
    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_local_bash();
    req.mutable_capabilities()->mutable_fs()->set_max_file_size_bytes(12345);
    OpenResponse resp;
    ClientContext ctx;
    ASSERT_TRUE(ws->Open(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.workspace().provider(), "local-bash");
    EXPECT_EQ(resp.workspace().id().size(), 35u);
    EXPECT_EQ(resp.workspace().id().rfind("ws_", 0), 0u);
    EXPECT_GT(resp.workspace().ref().token().size(), 32u);
    EXPECT_EQ(resp.workspace().capabilities().fs().max_file_size_bytes(), 12345u);
    // The per-workspace directory exists with mode 0700.
    struct stat st;
    ASSERT_EQ(stat(srv.workspace_dir(resp.workspace().id()).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    // The ref never carries a host path.
    EXPECT_EQ(resp.workspace().ref().token().find(srv.state_dir()), std::string::npos);
}

TEST(Workspaces, OpenWithoutProviderIsMalformed)
{
    Server srv;
    auto ws = srv.workspaces();
    OpenRequest req;
    OpenResponse resp;
    ClientContext ctx;
    EXPECT_WS_ERROR(ws->Open(&ctx, req, &resp), StatusCode::INVALID_ARGUMENT, "MALFORMED");
}

TEST(Workspaces, ShellOnMemoryIsCapabilityMissing)
{
    Server srv;
    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_memory();
    req.mutable_capabilities()->mutable_shell()->add_allowed_commands("ls");
    OpenResponse resp;
    ClientContext ctx;
    auto s = ws->Open(&ctx, req, &resp);
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "CAPABILITY_MISSING");
    EXPECT_EQ(wstest::Decode(s).metadata["capability"], "shell");
}

TEST(Workspaces, FsCallWithoutFsCapabilityIsCapabilityMissing)
{
    Server srv;
    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_local_bash();
    req.mutable_capabilities()->mutable_shell()->add_allowed_commands("ls");
    OpenResponse resp;
    ClientContext ctx;
    ASSERT_TRUE(ws->Open(&ctx, req, &resp).ok());
    auto fs = srv.fs();
    auto s = StatPath(fs.get(), resp.workspace().id(), ".");
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "CAPABILITY_MISSING");
    EXPECT_EQ(wstest::Decode(s).metadata["capability"], "fs");
}

TEST(Workspaces, FileSizeCapAboveServerCeilingIsRefused)
{
    Server srv({"--max-file-size", "1000"});
    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_memory();
    req.mutable_capabilities()->mutable_fs()->set_max_file_size_bytes(1001);
    OpenResponse resp;
    ClientContext ctx;
    EXPECT_WS_ERROR(ws->Open(&ctx, req, &resp), StatusCode::INVALID_ARGUMENT, "LIMIT");
}

TEST(Workspaces, QuotaOnOpenWorkspaces)
{
    Server srv({"--max-workspaces", "2"});
    auto ws = srv.workspaces();
    auto a = wstest::Open(ws.get(), "memory");
    auto b = wstest::Open(ws.get(), "local-bash");
    OpenRequest req;
    req.mutable_memory();
    OpenResponse resp;
    ClientContext ctx;
    auto s = ws->Open(&ctx, req, &resp);
    EXPECT_WS_ERROR(s, StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
    EXPECT_EQ(wstest::Decode(s).metadata["quota"], "open_workspaces");
    // Closing one frees a slot.
    CloseResponse cr;
    ASSERT_TRUE(Close(ws.get(), a.id, &cr).ok());
    ClientContext ctx2;
    EXPECT_TRUE(ws->Open(&ctx2, req, &resp).ok());
}

TEST(Workspaces, ResolveGivesBackTheSameWorkspace)
{
    Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto w = wstest::Open(ws.get(), "local-bash");
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "a.txt", "hello").ok());
    ResolveResponse rr;
    ASSERT_TRUE(Resolve(ws.get(), w.token, &rr).ok());
    EXPECT_EQ(rr.workspace().id(), w.id);
    std::string got;
    ASSERT_TRUE(wstest::Read(fs.get(), rr.workspace().id(), "a.txt", &got).ok());
    EXPECT_EQ(got, "hello");
}

TEST(Workspaces, TamperedTruncatedAndForeignRefsAreInvalid)
{
    Server srv;
    Server other;
    auto ws = srv.workspaces();
    auto w = wstest::Open(ws.get(), "local-bash");
    ResolveResponse rr;
    // Every single-bit flip anywhere in the token is refused.
    for (size_t i = 0; i < w.token.size(); i += 7) {
        std::string t = w.token;
        t[i] ^= 0x01;
        EXPECT_WS_ERROR(Resolve(ws.get(), t, &rr), StatusCode::INVALID_ARGUMENT, "BAD_REF");
    }
    for (size_t n : {size_t(0), size_t(1), w.token.size() / 2, w.token.size() - 1})
        EXPECT_WS_ERROR(Resolve(ws.get(), w.token.substr(0, n), &rr), StatusCode::INVALID_ARGUMENT,
                        "BAD_REF");
    EXPECT_WS_ERROR(Resolve(ws.get(), w.token + "x", &rr), StatusCode::INVALID_ARGUMENT, "BAD_REF");
    // A ref signed by another server (another key) does not verify here.
    auto ws2 = other.workspaces();
    auto foreign = wstest::Open(ws2.get(), "local-bash");
    EXPECT_WS_ERROR(Resolve(ws.get(), foreign.token, &rr), StatusCode::INVALID_ARGUMENT, "BAD_REF");
    // Missing ref entirely.
    ClientContext ctx;
    ResolveRequest empty;
    EXPECT_WS_ERROR(ws->Resolve(&ctx, empty, &rr), StatusCode::INVALID_ARGUMENT, "MALFORMED");
}

TEST(Workspaces, CloseIsTerminalAndIdempotent)
{
    Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto w = wstest::Open(ws.get(), "local-bash");
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "f", "x").ok());
    CloseResponse cr;
    ASSERT_TRUE(Close(ws.get(), w.id, &cr).ok());
    EXPECT_FALSE(cr.already_closed());
    ASSERT_TRUE(Close(ws.get(), w.id, &cr).ok());
    EXPECT_TRUE(cr.already_closed());
    // Storage is gone; every id-scoped call is NOT_FOUND; the ref is evicted.
    struct stat st;
    EXPECT_NE(stat(srv.workspace_dir(w.id).c_str(), &st), 0);
    EXPECT_WS_ERROR(StatPath(fs.get(), w.id, "f"), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    DescribeResponse dr;
    EXPECT_WS_ERROR(Describe(ws.get(), w.id, &dr), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    ResolveResponse rr;
    EXPECT_WS_ERROR(Resolve(ws.get(), w.token, &rr), StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    // Unknown and malformed ids.
    EXPECT_WS_ERROR(Close(ws.get(), "ws_00000000000000000000000000000000", &cr),
                    StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    EXPECT_WS_ERROR(StatPath(fs.get(), "../../etc", "passwd"), StatusCode::NOT_FOUND,
                    "NO_SUCH_WORKSPACE");
}

TEST(Workspaces, DescribeAndList)
{
    Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto w = wstest::Open(ws.get(), "local-bash", 4096);
    auto m = wstest::Open(ws.get(), "memory");
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "f", "x").ok());
    DescribeResponse dr;
    ASSERT_TRUE(Describe(ws.get(), w.id, &dr).ok());
    EXPECT_EQ(dr.id(), w.id);
    EXPECT_EQ(dr.provider(), "local-bash");
    EXPECT_EQ(dr.state(), STATE_OPEN);
    EXPECT_EQ(dr.isolation(), "none");
    EXPECT_EQ(dr.limits().max_file_size_bytes(), 4096u);
    EXPECT_GT(dr.opened_at_unix_ms(), 0);
    EXPECT_GE(dr.last_success_at_unix_ms(), dr.opened_at_unix_ms());
    EXPECT_TRUE(dr.capabilities().has_fs());
    EXPECT_FALSE(dr.capabilities().has_shell());
    EXPECT_NE(std::find(dr.operations().begin(), dr.operations().end(), "WriteFile"),
              dr.operations().end());
    ASSERT_TRUE(Describe(ws.get(), m.id, &dr).ok());
    EXPECT_EQ(dr.isolation(), "process");

    ClientContext ctx;
    ListRequest lr;
    ListResponse resp;
    ASSERT_TRUE(ws->List(&ctx, lr, &resp).ok());
    std::set<std::string> ids;
    for (const auto &s : resp.workspaces())
        ids.insert(s.id());
    EXPECT_EQ(ids, (std::set<std::string>{w.id, m.id}));
}

TEST(Workspaces, RestartResumesWithFilesIntact)
{
    std::string state = wstest::MakeStateDir();
    std::string token, id, mem_token;
    {
        Server srv({}, state);
        auto ws = srv.workspaces();
        auto fs = srv.fs();
        auto w = wstest::Open(ws.get(), "local-bash");
        auto m = wstest::Open(ws.get(), "memory");
        ASSERT_TRUE(wstest::Write(fs.get(), w.id, "dir/notes.md", "survives", nullptr, true).ok());
        token = w.token;
        id = w.id;
        mem_token = m.token;
        EXPECT_EQ(srv.Stop(), 0);
    }
    Server srv({}, state);
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    ResolveResponse rr;
    ASSERT_TRUE(Resolve(ws.get(), token, &rr).ok());
    EXPECT_EQ(rr.workspace().id(), id);
    std::string got;
    ASSERT_TRUE(wstest::Read(fs.get(), id, "dir/notes.md", &got).ok());
    EXPECT_EQ(got, "survives");
    // A memory workspace dies with the process.
    EXPECT_WS_ERROR(Resolve(ws.get(), mem_token, &rr), StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    // The key file is private.
    struct stat st;
    ASSERT_EQ(stat((state + "/ref.key").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(Workspaces, VanishedDirectoryIsEvicted)
{
    Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto w = wstest::Open(ws.get(), "local-bash");
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "f", "x").ok());
    // Something outside the server (a tmp cleaner) removes the directory.
    std::string dir = srv.workspace_dir(w.id);
    ASSERT_EQ(system(("rm -rf '" + dir + "'").c_str()), 0);
    EXPECT_WS_ERROR(StatPath(fs.get(), w.id, "f"), StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    ResolveResponse rr;
    EXPECT_WS_ERROR(Resolve(ws.get(), w.token, &rr), StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    DescribeResponse dr;
    ASSERT_TRUE(Describe(ws.get(), w.id, &dr).ok());
    EXPECT_EQ(dr.state(), STATE_EVICTED);
    EXPECT_NE(dr.last_error().find("WORKSPACE_EVICTED"), std::string::npos);
}

TEST(Workspaces, VanishedDirectoryWhileDownIsEvictedAfterRestart)
{
    std::string state = wstest::MakeStateDir();
    std::string token, id;
    {
        Server srv({}, state);
        auto ws = srv.workspaces();
        auto w = wstest::Open(ws.get(), "local-bash");
        token = w.token;
        id = w.id;
        EXPECT_EQ(srv.Stop(), 0) << wstest::ReadHostFile(srv.stderr_path());
        ASSERT_EQ(system(("rm -rf '" + srv.workspace_dir(id) + "'").c_str()), 0);
    }
    Server srv({}, state);
    auto ws = srv.workspaces();
    ResolveResponse rr;
    EXPECT_WS_ERROR(Resolve(ws.get(), token, &rr), StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
}

// ---- a uid per workspace ----

// The server's default range of workspace uids; its first is the helpers'.
constexpr uid_t kUidFirst = 524288, kUidLast = 589823;

// Whether a server started by this test gives workspaces uids of their
// own: it runs as root, in a user namespace that maps the whole range (not
// Bazel's linux-sandbox, which maps uid 0 alone). Empty, or why not.
std::string WhyNoUids()
{
    if (geteuid() != 0)
        return "the test does not run as root";
    for (const char *map : {"/proc/self/uid_map", "/proc/self/gid_map"}) {
        std::istringstream in(wstest::ReadHostFile(map));
        bool covered = false;
        for (unsigned long inside, outside, count; in >> inside >> outside >> count;)
            covered = covered || (inside <= kUidFirst && kUidLast - inside < count);
        if (!covered)
            return std::string(map) + " does not map the workspace uid range";
    }
    return "";
}

#define REQUIRE_UIDS()                                                                             \
    do {                                                                                           \
        std::string why_ = WhyNoUids();                                                            \
        if (!why_.empty())                                                                         \
            GTEST_SKIP() << "workspace uids are off here: " << why_;                               \
    } while (0)

struct stat LstatOrDie(const std::string &path)
{
    struct stat st = {};
    EXPECT_EQ(lstat(path.c_str(), &st), 0) << path << ": " << strerror(errno);
    return st;
}

grpc::Status MakeDir(FileSystem::Stub *fs, const std::string &id, const std::string &path,
                     bool parents)
{
    ClientContext ctx;
    MakeDirRequest req;
    MakeDirResponse resp;
    req.set_workspace_id(id);
    req.set_path(path);
    req.set_parents(parents);
    return fs->MakeDir(&ctx, req, &resp);
}

// Each on-disk workspace gets a uid of its own from the range (never 0,
// never the helpers'), which owns its directory, and keeps it across a
// restart: the restarted server claims the recorded uids, so a new
// workspace gets neither.
TEST(WorkspaceUids, EachWorkspaceHasItsOwnUidAcrossRestarts)
{
    REQUIRE_UIDS();
    std::string state = wstest::MakeStateDir();
    std::string a, b;
    uid_t ua, ub;
    {
        Server srv({}, state);
        auto ws = srv.workspaces();
        a = wstest::Open(ws.get(), "local-bash").id;
        b = wstest::Open(ws.get(), "local-bash").id;
        struct stat sa = LstatOrDie(srv.workspace_dir(a));
        struct stat sb = LstatOrDie(srv.workspace_dir(b));
        ua = sa.st_uid;
        ub = sb.st_uid;
        for (const struct stat &st : {sa, sb}) {
            EXPECT_GT(st.st_uid, kUidFirst) << "0 and the helpers' uid are no workspace's";
            EXPECT_LE(st.st_uid, kUidLast);
            EXPECT_EQ(st.st_gid, st.st_uid);
            EXPECT_EQ(st.st_mode & 07777, 0700u);
        }
        EXPECT_NE(ua, ub);
        // Commands of those uids reach their directories by path: the
        // root can be searched, not listed.
        EXPECT_EQ(LstatOrDie(state + "/workspaces").st_mode & 07777, 0711u);
        EXPECT_TRUE(LstatOrDie(state).st_mode & S_IXOTH);
        EXPECT_EQ(srv.Stop(), 0) << wstest::ReadHostFile(srv.stderr_path());
    }
    Server srv({}, state);
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    // A new workspace, before the old ones are used again: their recorded
    // uids were claimed at start, it gets neither.
    std::string c = wstest::Open(ws.get(), "local-bash").id;
    uid_t uc = LstatOrDie(srv.workspace_dir(c)).st_uid;
    EXPECT_NE(uc, ua);
    EXPECT_NE(uc, ub);
    EXPECT_GT(uc, kUidFirst);
    EXPECT_LE(uc, kUidLast);
    // Attached again (first use after the restart, in the other order),
    // still theirs.
    ASSERT_TRUE(wstest::Write(fs.get(), b, "after", "x").ok());
    ASSERT_TRUE(wstest::Write(fs.get(), a, "after", "x").ok());
    EXPECT_EQ(LstatOrDie(srv.workspace_dir(a)).st_uid, ua);
    EXPECT_EQ(LstatOrDie(srv.workspace_dir(b)).st_uid, ub);
    EXPECT_EQ(LstatOrDie(srv.workspace_dir(a) + "/after").st_uid, ua);
    EXPECT_EQ(LstatOrDie(srv.workspace_dir(b) + "/after").st_uid, ub);
}

// What the API writes is the workspace's uid's: WriteFile (new file, new
// parents), MakeDir (with and without parents). A file that replaces one
// of another owner keeps that owner.
TEST(WorkspaceUids, FilesTheApiCreatesAreTheWorkspaceUids)
{
    REQUIRE_UIDS();
    Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    std::string id = wstest::Open(ws.get(), "local-bash").id;
    std::string dir = srv.workspace_dir(id);
    uid_t uid = LstatOrDie(dir).st_uid;
    ASSERT_GT(uid, kUidFirst);

    ASSERT_TRUE(wstest::Write(fs.get(), id, "f.txt", "data").ok());
    ASSERT_TRUE(wstest::Write(fs.get(), id, "p1/p2/g.txt", "data", nullptr, true).ok());
    ASSERT_TRUE(MakeDir(fs.get(), id, "m", false).ok());
    ASSERT_TRUE(MakeDir(fs.get(), id, "q1/q2", true).ok());
    for (const char *rel : {"f.txt", "p1", "p1/p2", "p1/p2/g.txt", "m", "q1", "q1/q2"}) {
        struct stat st = LstatOrDie(dir + "/" + rel);
        EXPECT_EQ(st.st_uid, uid) << rel;
        EXPECT_EQ(st.st_gid, uid) << rel;
    }
    // Replaced through the API: the new content keeps the old file's owner.
    wstest::WriteHostFile(dir + "/roots", "old");
    ASSERT_EQ(LstatOrDie(dir + "/roots").st_uid, 0u);
    ASSERT_TRUE(wstest::Write(fs.get(), id, "roots", "new").ok());
    EXPECT_EQ(wstest::ReadHostFile(dir + "/roots"), "new");
    EXPECT_EQ(LstatOrDie(dir + "/roots").st_uid, 0u);
    // And a file of the workspace's stays its own when replaced.
    ASSERT_TRUE(wstest::Write(fs.get(), id, "f.txt", "again").ok());
    EXPECT_EQ(LstatOrDie(dir + "/f.txt").st_uid, uid);
}

// An operator's range that overlaps one another server on the host holds
// is refused at start, naming the holder; one beside it is fine.
TEST(WorkspaceUids, AnOverlappingRangeIsRefusedAtStart)
{
    REQUIRE_UIDS();
    Server a({"--workspace-uid-range", "700000-700100"});
    std::string err;
    int st = wstest::RunServerToExit(
        {"--state-dir", wstest::MakeStateDir(), "--workspace-uid-range", "700050-700200"}, &err);
    ASSERT_TRUE(WIFEXITED(st)) << err;
    EXPECT_NE(WEXITSTATUS(st), 0);
    EXPECT_NE(err.find("the workspace uid range 700050-700200 cannot be used: it overlaps the "
                       "range 700000-700100 that another workspaced (pid " +
                       std::to_string(a.pid()) +
                       ") holds on this host; give each server a range of its own"),
              std::string::npos)
        << err;
    EXPECT_EQ(err.find("state directory"), std::string::npos) << err;
    Server b({"--workspace-uid-range", "700101-700200"});
    auto ws = b.workspaces();
    std::string id = wstest::OpenShell(ws.get(), {"sleep"}).id;
    uid_t uid = LstatOrDie(b.workspace_dir(id)).st_uid;
    EXPECT_GT(uid, 700101u);
    EXPECT_LE(uid, 700200u);
}

// local-bash's pids cap holds for the whole workspace: every command runs
// with RLIMIT_NPROC at the cap, and the kernel counts the processes of the
// workspace's uid, so neither one command's fork bomb nor many commands
// together get past it. (Without workspace uids the cap refuses the Open:
// ProvidersTest.)
TEST(WorkspaceUids, LocalBashPidsCapHoldsForTheWholeWorkspace)
{
    REQUIRE_UIDS();
    Server srv;
    auto ws = srv.workspaces();
    auto exec = srv.exec();
    OpenRequest req;
    req.mutable_local_bash()->set_pids_limit(8);
    req.mutable_capabilities()->mutable_fs();
    req.mutable_capabilities()->mutable_shell()->add_allowed_commands("python3");
    OpenResponse resp;
    {
        ClientContext ctx;
        grpc::Status st = ws->Open(&ctx, req, &resp);
        ASSERT_TRUE(st.ok()) << st.error_message();
    }
    const std::string id = resp.workspace().id();
    // Forks 20 children that sleep; prints how many forks succeeded.
    const std::string forks = "import os, time\n"
                              "n = 0\n"
                              "for i in range(20):\n"
                              "    try:\n"
                              "        pid = os.fork()\n"
                              "    except OSError:\n"
                              "        continue\n"
                              "    if pid == 0:\n"
                              "        time.sleep(2)\n"
                              "        os._exit(0)\n"
                              "    n += 1\n"
                              "print(n)\n"
                              "for i in range(n):\n"
                              "    os.wait()\n";
    auto run_forks = [&] {
        RunResponse r;
        EXPECT_TRUE(
            wstest::RunProcess(exec.get(), id, wstest::ArgvProcess({"python3", "-c", forks}), &r)
                .ok());
        EXPECT_EQ(r.exited().exit_code(), 0) << r.stderr();
        return r.stdout();
    };
    // Alone: python and 7 children make the 8.
    EXPECT_EQ(run_forks(), "7\n");
    // With another command of the workspace running, one fewer: the cap
    // is the workspace's, not each command's.
    RunResponse other;
    std::thread sleeper([&] {
        (void)wstest::RunProcess(
            exec.get(), id, wstest::ArgvProcess({"python3", "-c", "import time; time.sleep(4)"}),
            &other);
    });
    const uid_t uid = LstatOrDie(srv.workspace_dir(id)).st_uid;
    auto uid_procs = [&] {
        int n = 0;
        DIR *d = opendir("/proc");
        for (struct dirent *e; d && (e = readdir(d));) {
            struct stat st;
            if (e->d_name[0] >= '0' && e->d_name[0] <= '9' &&
                stat(("/proc/" + std::string(e->d_name)).c_str(), &st) == 0 && st.st_uid == uid)
                n++;
        }
        if (d)
            closedir(d);
        return n;
    };
    for (int i = 0; i < 200 && uid_procs() == 0; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(run_forks(), "6\n");
    sleeper.join();
}

// Two servers on one host (a test suite, the nodes of a cluster on one
// machine): each leases a slot of its own of the default range, so their
// workspaces never share a uid and one's Close, which ends every process
// of its workspace's uid, never ends the other's command; a restarted
// server gets its slot back, so its workspaces keep their uids.
TEST(WorkspaceUids, TwoServersOnOneHostNeverShareAUid)
{
    REQUIRE_UIDS();
    std::string state_a = wstest::MakeStateDir();
    uid_t ua;
    std::string a_id;
    {
        Server a({}, state_a);
        Server b;
        auto wa = a.workspaces();
        auto wb = b.workspaces();
        // The first workspace of each: the same uid, were the servers to
        // share a range.
        std::string first = wstest::OpenShell(wa.get(), {"sleep"}).id;
        wstest::Ws in_b = wstest::OpenShell(wb.get(), {"sleep"});
        a_id = wstest::OpenShell(wa.get(), {"sleep"}).id;
        ua = LstatOrDie(a.workspace_dir(first)).st_uid;
        uid_t ub = LstatOrDie(b.workspace_dir(in_b.id)).st_uid;
        ASSERT_GT(ua, kUidFirst);
        ASSERT_GT(ub, kUidFirst);
        EXPECT_NE(ua, ub);
        EXPECT_NE((ua - kUidFirst) / 2048, (ub - kUidFirst) / 2048) << "one slot, two servers";

        // b's command runs while a closes a workspace of its own.
        auto exb = b.exec();
        RunResponse r;
        grpc::Status st;
        std::thread run([&] {
            st = wstest::RunProcess(exb.get(), in_b.id, wstest::ArgvProcess({"sleep", "2"}), &r);
        });
        auto t0 = std::chrono::steady_clock::now();
        while (wstest::CountProcsWithMarker("sleep 2") == 0 &&
               std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        CloseResponse cr;
        ASSERT_TRUE(Close(wa.get(), first, &cr).ok());
        ua = LstatOrDie(a.workspace_dir(a_id)).st_uid;
        run.join();
        ASSERT_TRUE(st.ok()) << st.error_message();
        EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED);
        EXPECT_EQ(r.exited().exit_code(), 0);
        EXPECT_EQ(a.Stop(), 0);
        EXPECT_EQ(b.Stop(), 0);
    }
    // Restarted: its slot (recorded in its state directory) again.
    Server a({}, state_a);
    auto fs = a.fs();
    ASSERT_TRUE(wstest::Write(fs.get(), a_id, "again", "x").ok());
    EXPECT_EQ(LstatOrDie(a.workspace_dir(a_id) + "/again").st_uid, ua);
}

// What a review found: every local-bash command ran as the server's uid
// (root under the README), so one workspace's commands could read every
// other's files and signal its processes. Now a command runs as its
// workspace's uid with its one group, no capability, no_new_privs, and an
// oom_score_adj of 1000 (the server's own stays as it was); another
// workspace's directory is closed to it, and Describe says the uid.
TEST(WorkspaceUids, LocalBashCommandsRunAsTheWorkspacesUid)
{
    REQUIRE_UIDS();
    Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto exec = srv.exec();
    wstest::Ws a = wstest::OpenShell(ws.get(), {"id", "cat", "ls"});
    wstest::Ws b = wstest::OpenShell(ws.get(), {"id"});
    const uid_t ua = LstatOrDie(srv.workspace_dir(a.id)).st_uid;
    const uid_t ub = LstatOrDie(srv.workspace_dir(b.id)).st_uid;
    ASSERT_GT(ua, kUidFirst);
    ASSERT_NE(ua, ub);
    const std::string oom_before =
        wstest::ReadHostFile("/proc/" + std::to_string(srv.pid()) + "/oom_score_adj");
    auto run = [&](const std::string &id, const std::vector<std::string> &argv) {
        RunResponse r;
        grpc::Status st = wstest::RunProcess(exec.get(), id, wstest::ArgvProcess(argv), &r);
        EXPECT_TRUE(st.ok()) << st.error_message();
        return r;
    };

    EXPECT_EQ(run(a.id, {"id", "-u"}).stdout(), std::to_string(ua) + "\n");
    EXPECT_EQ(run(a.id, {"id", "-G"}).stdout(), std::to_string(ua) + "\n");
    EXPECT_EQ(run(b.id, {"id", "-u"}).stdout(), std::to_string(ub) + "\n");
    std::string status = run(a.id, {"cat", "/proc/self/status"}).stdout();
    EXPECT_NE(status.find("CapEff:\t0000000000000000\n"), std::string::npos) << status;
    EXPECT_NE(status.find("CapPrm:\t0000000000000000\n"), std::string::npos) << status;
    EXPECT_NE(status.find("NoNewPrivs:\t1\n"), std::string::npos) << status;
    EXPECT_EQ(run(a.id, {"cat", "/proc/self/oom_score_adj"}).stdout(), "1000\n");
    EXPECT_EQ(wstest::ReadHostFile("/proc/" + std::to_string(srv.pid()) + "/oom_score_adj"),
              oom_before);
    // The server itself is among the last the kernel would kill, where it
    // may lower its score (CAP_SYS_RESOURCE, which some hosts' root lacks:
    // it then says so and keeps its score).
    std::string server_status =
        wstest::ReadHostFile("/proc/" + std::to_string(srv.pid()) + "/status");
    size_t at = server_status.find("CapEff:\t");
    ASSERT_NE(at, std::string::npos);
    bool sys_resource = (std::stoull(server_status.substr(at + 8, 16), nullptr, 16) >> 24) & 1;
    if (sys_resource) {
        EXPECT_EQ(oom_before, "-500\n");
    } else {
        EXPECT_EQ(oom_before, "0\n");
        EXPECT_NE(wstest::ReadHostFile(srv.stderr_path())
                      .find("cannot set the server's oom_score_adj to -500: Permission denied"),
                  std::string::npos);
    }

    // b's files, by absolute path: closed to a's uid.
    ASSERT_TRUE(wstest::Write(fs.get(), b.id, "secret", "b's").ok());
    RunResponse r = run(a.id, {"cat", srv.workspace_dir(b.id) + "/secret"});
    EXPECT_NE(r.exited().exit_code(), 0);
    EXPECT_NE(r.stderr().find("Permission denied"), std::string::npos) << r.stderr();
    r = run(a.id, {"ls", srv.state_dir() + "/workspaces"});
    EXPECT_NE(r.exited().exit_code(), 0);
    EXPECT_NE(r.stderr().find("Permission denied"), std::string::npos) << r.stderr();

    ClientContext ctx;
    DescribeRequest dreq;
    DescribeResponse d;
    dreq.set_workspace_id(a.id);
    ASSERT_TRUE(ws->Describe(&ctx, dreq, &d).ok());
    EXPECT_EQ(d.uid(), ua);
    EXPECT_EQ(d.gid(), ua);
}

} // namespace

namespace
{

// Extra sandbox binds are checked at Open: canonical and existing, under a
// bind root of the operator's policy, and never overlapping the server's
// own state (the ref key, other workspaces) nor "/".
TEST(Workspaces, SandboxBindPathsAreChecked)
{
    Server srv({"--policy-providers", "memory,local-bash,local-sandbox,docker",
                "--policy-bind-roots", "/usr"});
    auto ws = srv.workspaces();
    std::string link = wstest::MakeTempDir("bind") + "/link";
    ASSERT_EQ(symlink("/usr", link.c_str()), 0);
    char *canon_state = realpath(srv.state_dir().c_str(), nullptr);
    std::string state = canon_state;
    free(canon_state);
    // A malformed path is the request's fault (MALFORMED, field); a
    // well-formed one the operator's policy does not allow is POLICY.
    enum Want { OK, MALFORMED, POLICY };
    struct Case {
        std::string path;
        Want want;
    } cases[] = {
        {"/usr", OK},
        {"/", POLICY},
        {"usr", MALFORMED},
        {"/usr/../etc", MALFORMED},
        {"/nonexistent/dir", MALFORMED},
        {link, MALFORMED},
        {state, POLICY},
        {state + "/workspaces", POLICY},
        {state.substr(0, state.rfind('/')), POLICY},
    };
    for (const auto &c : cases) {
        for (bool rw : {false, true}) {
            OpenRequest req;
            if (rw)
                req.mutable_local_sandbox()->add_read_write_paths(c.path);
            else
                req.mutable_local_sandbox()->add_read_only_paths(c.path);
            OpenResponse resp;
            ClientContext ctx;
            auto s = ws->Open(&ctx, req, &resp);
            if (c.want == OK) {
                EXPECT_TRUE(s.ok()) << c.path << ": " << s.error_message();
            } else if (c.want == MALFORMED) {
                EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED") << c.path;
                EXPECT_EQ(wstest::Decode(s).metadata["field"],
                          rw ? "read_write_paths" : "read_only_paths");
            } else {
                EXPECT_WS_ERROR(s, StatusCode::PERMISSION_DENIED, "POLICY") << c.path;
                EXPECT_EQ(wstest::Decode(s).metadata["rule"], "bind-roots") << c.path;
                // Metadata values are cut at 127 bytes (a deep test
                // directory's state path can be longer).
                EXPECT_EQ(wstest::Decode(s).metadata["path"], c.path.substr(0, 127));
            }
        }
    }
}

} // namespace

namespace
{

// The docker provider's storage is the same confined host directory (the
// container over it comes with the exec layer): with the daemon up, Open
// succeeds, files work, and the ref keeps the config but no container id.
TEST(Workspaces, DockerWorkspaceHasConfinedStorage)
{
    Server srv;
    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_docker()->set_image("workspaced-test:busybox");
    req.mutable_docker()->set_pull_policy(PULL_NEVER);
    req.mutable_capabilities()->mutable_fs();
    OpenResponse resp;
    ClientContext ctx;
    auto s = ws->Open(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    const auto &w = resp.workspace();
    EXPECT_EQ(w.provider(), "docker");
    auto fs = srv.fs();
    ASSERT_TRUE(wstest::Write(fs.get(), w.id(), "in/container.txt", "hi", nullptr, true).ok());
    EXPECT_EQ(wstest::ReadHostFile(srv.workspace_dir(w.id()) + "/in/container.txt"), "hi");
    EXPECT_WS_ERROR(wstest::Write(fs.get(), w.id(), "../escape", "x"), StatusCode::INVALID_ARGUMENT,
                    "PATH_ESCAPE");
    DescribeResponse dr;
    ASSERT_TRUE(Describe(ws.get(), w.id(), &dr).ok());
    EXPECT_EQ(dr.isolation(), "container");
    EXPECT_EQ(dr.network(), NETWORK_OFF);
    // Closed, so that its container goes too: a server stopped with the
    // workspace open keeps the container for the workspace's resumption,
    // and this server's state directory is not started again.
    CloseResponse cr;
    EXPECT_TRUE(Close(ws.get(), w.id(), &cr).ok());
}

} // namespace
