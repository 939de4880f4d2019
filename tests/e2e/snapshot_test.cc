// Snapshots, restore, fork and shadow workspaces end to end, against the
// real server: exact content back after a restore (hashes, modes,
// symlinks as links), dedup in the store and what a delete reclaims,
// forks into every provider with storage, snapshots across a restart and
// between tenants, Restore while a command runs, the byte quota and the
// snapshot cap, from_path and its refusals, and snapshots taken while
// WriteFile calls run. The docker fork needs the daemon and the test
// image (tests/fixtures): it fails, never skips, without them.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;

namespace
{

std::chrono::system_clock::time_point Deadline(int s = 60)
{
    return std::chrono::system_clock::now() + std::chrono::seconds(s);
}

grpc::Status TakeSnapshot(Workspaces::Stub *stub, const std::string &id, Snapshot *out,
                          const std::string &name = "",
                          const std::map<std::string, std::string> &labels = {})
{
    SnapshotRequest req;
    req.set_workspace_id(id);
    req.set_name(name);
    for (const auto &kv : labels)
        (*req.mutable_labels())[kv.first] = kv.second;
    SnapshotResponse resp;
    ClientContext ctx;
    ctx.set_deadline(Deadline());
    grpc::Status s = stub->Snapshot(&ctx, req, &resp);
    if (out)
        *out = resp.snapshot();
    return s;
}

grpc::Status Restore(Workspaces::Stub *stub, const std::string &id, const std::string &snap,
                     bool force, RestoreResponse *out = nullptr)
{
    RestoreRequest req;
    req.set_workspace_id(id);
    req.set_snapshot_id(snap);
    req.set_force(force);
    RestoreResponse resp;
    ClientContext ctx;
    ctx.set_deadline(Deadline(90));
    grpc::Status s = stub->Restore(&ctx, req, &resp);
    if (out)
        *out = resp;
    return s;
}

grpc::Status DeleteSnapshot(Workspaces::Stub *stub, const std::string &snap,
                            uint64_t *reclaimed = nullptr)
{
    DeleteSnapshotRequest req;
    req.set_snapshot_id(snap);
    DeleteSnapshotResponse resp;
    ClientContext ctx;
    ctx.set_deadline(Deadline());
    grpc::Status s = stub->DeleteSnapshot(&ctx, req, &resp);
    if (reclaimed)
        *reclaimed = resp.reclaimed_bytes();
    return s;
}

std::vector<Snapshot> ListAll(Workspaces::Stub *stub, const std::string &selector = "",
                              uint32_t page_size = 0)
{
    std::vector<Snapshot> all;
    std::string token;
    for (int pages = 0; pages < 100; pages++) {
        ListSnapshotsRequest req;
        req.set_label_selector(selector);
        req.set_page_size(page_size);
        req.set_page_token(token);
        ListSnapshotsResponse resp;
        ClientContext ctx;
        ctx.set_deadline(Deadline());
        grpc::Status s = stub->ListSnapshots(&ctx, req, &resp);
        EXPECT_TRUE(s.ok()) << s.error_message();
        for (const auto &sn : resp.snapshots())
            all.push_back(sn);
        token = resp.next_page_token();
        if (token.empty())
            break;
    }
    return all;
}

// Opens a workspace of `provider` (memory, local-bash, local-sandbox,
// docker) with fs and, where it has one, a shell allowing `commands`;
// from_snapshot / from_path when given.
grpc::Status OpenWs(Workspaces::Stub *stub, const std::string &provider, std::string *id,
                    const std::string &from_snapshot = "", const std::string &from_path = "",
                    const std::vector<std::string> &commands = {})
{
    OpenRequest req;
    if (provider == "memory")
        req.mutable_memory();
    else if (provider == "local-bash")
        req.mutable_local_bash();
    else if (provider == "local-sandbox")
        req.mutable_local_sandbox()->set_exec_mode(wstest::TestExecMode());
    else if (provider == "docker") {
        req.mutable_docker()->set_image("workspaced-test:busybox");
        req.mutable_docker()->set_pull_policy(PULL_NEVER);
    }
    req.mutable_capabilities()->mutable_fs();
    if (!commands.empty()) {
        ShellCapability *sh = req.mutable_capabilities()->mutable_shell();
        for (const auto &c : commands)
            sh->add_allowed_commands(c);
    }
    req.set_from_snapshot(from_snapshot);
    req.set_from_path(from_path);
    OpenResponse resp;
    ClientContext ctx;
    ctx.set_deadline(Deadline(120));
    grpc::Status s = stub->Open(&ctx, req, &resp);
    if (id)
        *id = resp.workspace().id();
    return s;
}

std::string MustOpen(Workspaces::Stub *stub, const std::string &provider,
                     const std::string &from_snapshot = "", const std::string &from_path = "",
                     const std::vector<std::string> &commands = {})
{
    std::string id;
    grpc::Status s = OpenWs(stub, provider, &id, from_snapshot, from_path, commands);
    EXPECT_TRUE(s.ok()) << provider << ": " << s.error_message();
    return id;
}

std::string MustRead(FileSystem::Stub *fs, const std::string &id, const std::string &path)
{
    std::string out;
    grpc::Status s = wstest::Read(fs, id, path, &out);
    EXPECT_TRUE(s.ok()) << path << ": " << s.error_message();
    return out;
}

// A host tree as "path -> what it is": files by mode and content hash,
// symlinks by target, directories by mode. Nothing is followed.
void Describe(const std::string &root, const std::string &rel,
              std::map<std::string, std::string> *out)
{
    std::string dir = rel.empty() ? root : root + "/" + rel;
    DIR *d = opendir(dir.c_str());
    ASSERT_NE(d, nullptr) << dir;
    while (struct dirent *e = readdir(d)) {
        std::string name = e->d_name;
        if (name == "." || name == "..")
            continue;
        std::string r = rel.empty() ? name : rel + "/" + name;
        std::string full = root + "/" + r;
        struct stat st;
        ASSERT_EQ(lstat(full.c_str(), &st), 0) << full;
        char mode[16];
        snprintf(mode, sizeof(mode), "%o", (unsigned)(st.st_mode & 07777));
        if (S_ISLNK(st.st_mode)) {
            char buf[4096];
            ssize_t n = readlink(full.c_str(), buf, sizeof(buf));
            (*out)[r] = "L " + std::string(buf, n > 0 ? (size_t)n : 0);
        } else if (S_ISDIR(st.st_mode)) {
            (*out)[r] = std::string("D ") + mode;
            Describe(root, r, out);
        } else if (S_ISREG(st.st_mode)) {
            (*out)[r] =
                std::string("F ") + mode + " " + wstest::Sha256Hex(wstest::ReadHostFile(full));
        } else {
            (*out)[r] = "special";
        }
    }
    closedir(d);
}

std::map<std::string, std::string> DescribeTree(const std::string &root)
{
    std::map<std::string, std::string> out;
    Describe(root, "", &out);
    return out;
}

// Regular files in the store's objects.
int StoreObjects(const std::string &state_dir)
{
    std::map<std::string, std::string> t = DescribeTree(state_dir + "/snapshots/objects");
    int n = 0;
    for (const auto &kv : t)
        n += kv.second[0] == 'F';
    return n;
}

void Sh(const std::string &what, int rc)
{
    ASSERT_EQ(rc, 0) << what;
}

// A tree with a bit of everything, made on the host in an on-disk
// workspace's directory (symlinks have no FileSystem call).
void Plant(const std::string &dir)
{
    wstest::WriteHostFile(dir + "/a.txt", "alpha\n");
    Sh("mkdir", mkdir((dir + "/dir").c_str(), 0755));
    Sh("mkdir", mkdir((dir + "/dir/sub").c_str(), 0700));
    Sh("mkdir", mkdir((dir + "/empty").c_str(), 0555));
    std::string bin;
    for (int i = 0; i < 300000; i++)
        bin.push_back((char)(i * 7 + i / 13));
    wstest::WriteHostFile(dir + "/dir/b.bin", bin);
    wstest::WriteHostFile(dir + "/dir/sub/c.sh", "#!/bin/sh\necho c\n");
    Sh("chmod", chmod((dir + "/dir/sub/c.sh").c_str(), 0750));
    Sh("symlink", symlink("dir/b.bin", (dir + "/link").c_str()));
    Sh("symlink", symlink("/etc/passwd", (dir + "/abs").c_str()));
}

TEST(Snapshot, RestoreGivesBackExactContent)
{
    wstest::Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    std::string id = MustOpen(ws.get(), "local-bash");
    std::string dir = srv.workspace_dir(id);
    Plant(dir);
    auto before = DescribeTree(dir);

    Snapshot sn;
    grpc::Status s = TakeSnapshot(ws.get(), id, &sn, "first", {{"team", "a"}});
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(sn.id().rfind("snap-", 0), 0u);
    EXPECT_EQ(sn.id().size(), 31u);
    EXPECT_EQ(sn.files(), 3u);
    EXPECT_EQ(sn.directories(), 3u);
    EXPECT_EQ(sn.symlinks(), 2u);
    EXPECT_EQ(sn.bytes(), 6u + 300000u + 17u);
    EXPECT_EQ(sn.new_bytes(), sn.bytes());
    EXPECT_EQ(sn.workspace_id(), id);
    EXPECT_EQ(sn.provider(), "local-bash");
    EXPECT_EQ(sn.name(), "first");

    // Changes through the API and behind it.
    ASSERT_TRUE(wstest::Write(fs.get(), id, "a.txt", "changed").ok());
    ASSERT_TRUE(wstest::Write(fs.get(), id, "new/file", "x", nullptr, true).ok());
    Sh("unlink", unlink((dir + "/dir/sub/c.sh").c_str()));
    Sh("unlink", unlink((dir + "/link").c_str()));
    Sh("symlink", symlink("elsewhere", (dir + "/link").c_str()));
    Sh("chmod", chmod((dir + "/dir").c_str(), 0700));
    ASSERT_NE(DescribeTree(dir), before);

    RestoreResponse rr;
    s = Restore(ws.get(), id, sn.id(), false, &rr);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(rr.snapshot().id(), sn.id());
    EXPECT_EQ(rr.processes_ended(), 0u);
    EXPECT_EQ(DescribeTree(dir), before);
    EXPECT_EQ(MustRead(fs.get(), id, "a.txt"), "alpha\n");

    // A snapshot of another tenant's or an unknown id.
    EXPECT_WS_ERROR(Restore(ws.get(), id, "snap-aaaaaaaaaaaaaaaaaaaaaaaaaa", false),
                    StatusCode::NOT_FOUND, "NO_SUCH_SNAPSHOT");
}

// Rewrites `path` with `content` (same size as before) and sets its mtime
// back to what it was: only the ctime tells the change.
void RewriteKeepingMtime(const std::string &path, const std::string &content)
{
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0) << path;
    ASSERT_EQ((size_t)st.st_size, content.size()) << path;
    wstest::WriteHostFile(path, content);
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    ASSERT_EQ(st.st_mtim.tv_nsec, times[1].tv_nsec);
}

// The content a snapshot holds at `path`, read back through a fork.
std::string ForkRead(Workspaces::Stub *ws, FileSystem::Stub *fs, const std::string &snap,
                     const std::string &path)
{
    std::string id = MustOpen(ws, "memory", snap);
    return MustRead(fs, id, path);
}

// A second snapshot reads only files changed since the first; a change
// that keeps size and mtime is still seen (by its ctime), and so is one in
// the same clock tick as the first snapshot's look at the file.
TEST(Snapshot, SecondSnapshotReadsOnlyWhatChanged)
{
    wstest::Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    for (const std::string provider : {"local-bash", "memory"}) {
        SCOPED_TRACE(provider);
        std::string id = MustOpen(ws.get(), provider);
        std::string big(100000, 'b');
        ASSERT_TRUE(wstest::Write(fs.get(), id, "a", std::string(5000, 'a')).ok());
        ASSERT_TRUE(wstest::Write(fs.get(), id, "d/big", big, nullptr, true).ok());
        ASSERT_TRUE(wstest::Write(fs.get(), id, "d/c", "ccc").ok());
        // Past the racy window: the first snapshot may vouch for all.
        std::this_thread::sleep_for(std::chrono::milliseconds(1300));
        Snapshot s1, s2, s3;
        ASSERT_TRUE(TakeSnapshot(ws.get(), id, &s1).ok());
        EXPECT_EQ(s1.bytes(), 105003u);
        EXPECT_EQ(s1.read_bytes(), s1.bytes());
        ASSERT_TRUE(TakeSnapshot(ws.get(), id, &s2).ok());
        EXPECT_EQ(s2.bytes(), s1.bytes());
        EXPECT_EQ(s2.read_bytes(), 0u) << "unchanged files were read again";
        EXPECT_EQ(s2.new_bytes(), 0u);

        // Changed through the API: only that file is read.
        ASSERT_TRUE(wstest::Write(fs.get(), id, "d/c", "CCC").ok());
        if (provider == "local-bash")
            RewriteKeepingMtime(srv.workspace_dir(id) + "/a", std::string(5000, 'A'));
        ASSERT_TRUE(TakeSnapshot(ws.get(), id, &s3).ok());
        EXPECT_EQ(s3.read_bytes(), provider == "local-bash" ? 5003u : 3u);
        EXPECT_EQ(ForkRead(ws.get(), fs.get(), s3.id(), "d/c"), "CCC");
        EXPECT_EQ(ForkRead(ws.get(), fs.get(), s3.id(), "a"),
                  std::string(5000, provider == "local-bash" ? 'A' : 'a'));
        EXPECT_EQ(ForkRead(ws.get(), fs.get(), s3.id(), "d/big"), big);
    }

    // Racily clean: a file snapshotted right after it was written, then
    // rewritten (same size, same mtime) at once, is read again.
    std::string id = MustOpen(ws.get(), "local-bash");
    std::string path = srv.workspace_dir(id) + "/r";
    for (int i = 0; i < 5; i++) {
        std::string before(4096, (char)('a' + i)), after(4096, (char)('A' + i));
        wstest::WriteHostFile(path, before);
        Snapshot x, y;
        ASSERT_TRUE(TakeSnapshot(ws.get(), id, &x).ok());
        RewriteKeepingMtime(path, after);
        ASSERT_TRUE(TakeSnapshot(ws.get(), id, &y).ok());
        EXPECT_EQ(y.read_bytes(), 4096u);
        EXPECT_EQ(ForkRead(ws.get(), fs.get(), y.id(), "r"), after);
    }
}

// The server's own work in progress in the tree (a write's temporary, an
// upload's staging, a restore's build) is not snapshotted; a look-alike
// name is the user's.
TEST(Snapshot, LeavesOutTheServersWorkInProgress)
{
    wstest::Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    std::string id = MustOpen(ws.get(), "local-bash");
    std::string dir = srv.workspace_dir(id);
    wstest::WriteHostFile(dir + "/keep", "k");
    Sh("mkdir", mkdir((dir + "/.ws-stage-0123456789abcdef").c_str(), 0700));
    wstest::WriteHostFile(dir + "/.ws-stage-0123456789abcdef/half", "h");
    Sh("mkdir", mkdir((dir + "/d").c_str(), 0755));
    wstest::WriteHostFile(dir + "/d/.ws-tmp-00000000deadbeef", "t");
    Sh("mkdir", mkdir((dir + "/.workspaced-restore-0123456789abcdef").c_str(), 0700));
    wstest::WriteHostFile(dir + "/.ws-tmp-mine", "m");

    Snapshot sn;
    ASSERT_TRUE(TakeSnapshot(ws.get(), id, &sn).ok());
    EXPECT_EQ(sn.files(), 2u);
    EXPECT_EQ(sn.directories(), 1u);
    std::string fork = MustOpen(ws.get(), "local-bash", sn.id());
    std::map<std::string, std::string> got = DescribeTree(srv.workspace_dir(fork));
    std::vector<std::string> names;
    for (const auto &kv : got)
        names.push_back(kv.first);
    EXPECT_EQ(names, (std::vector<std::string>{".ws-tmp-mine", "d", "keep"}));
}

// A change on a workspace a snapshot has frozen waits for the snapshot,
// but not on a completion-queue thread: with one such thread, a Move that
// waits must not hold up the calls after it. The Stat sent after the Move
// still finds the file where it was: it ran while the Move waited.
TEST(Snapshot, AChangeWaitingForASnapshotHoldsUpNoOtherCall)
{
    wstest::Server srv({"--threads", "1"});
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    std::string a = MustOpen(ws.get(), "local-bash");
    ASSERT_TRUE(wstest::Write(fs.get(), a, "moveme", "m").ok());
    // A tree whose first snapshot takes a while: 3,000 files, 96 MiB.
    std::string dir = srv.workspace_dir(a);
    std::string chunk(32 * 1024, 'c');
    for (int d = 0; d < 30; d++) {
        std::string sub = dir + "/d" + std::to_string(d);
        Sh("mkdir", mkdir(sub.c_str(), 0755));
        for (int i = 0; i < 100; i++) {
            chunk[0] = (char)d;
            chunk[1] = (char)i;
            wstest::WriteHostFile(sub + "/f" + std::to_string(i), chunk);
        }
    }
    Snapshot sn;
    std::thread snap([&] {
        grpc::Status s = TakeSnapshot(ws.get(), a, &sn);
        EXPECT_TRUE(s.ok()) << s.error_message();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::thread mover([&] {
        MoveRequest req;
        req.set_workspace_id(a);
        req.set_from_path("moveme");
        req.set_to_path("moved");
        MoveResponse resp;
        ClientContext ctx;
        ctx.set_deadline(Deadline(120));
        grpc::Status s = fs->Move(&ctx, req, &resp);
        EXPECT_TRUE(s.ok()) << s.error_message();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    StatRequest req;
    req.set_workspace_id(a);
    req.set_path("moveme");
    StatResponse resp;
    ClientContext ctx;
    ctx.set_deadline(Deadline(120));
    grpc::Status stat = fs->Stat(&ctx, req, &resp);
    snap.join();
    mover.join();
    // The Move came 100 ms into the freeze and the Stat 200 ms: a
    // shorter snapshot proves nothing.
    ASSERT_GT(sn.duration_ms(), 400u) << "the snapshot was too quick to test with";
    EXPECT_TRUE(stat.ok()) << "the Stat waited behind the Move the snapshot held: "
                           << stat.error_message();
    EXPECT_EQ(MustRead(fs.get(), a, "moved"), "m");
}

TEST(Snapshot, DedupAcrossSnapshotsAndWorkspacesAndDeleteReclaimsOnlyUnshared)
{
    wstest::Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    std::string a = MustOpen(ws.get(), "local-bash");
    std::string b = MustOpen(ws.get(), "memory");
    std::string big(200000, 'z');
    for (const std::string &id : {a, b}) {
        ASSERT_TRUE(wstest::Write(fs.get(), id, "big", big).ok());
        ASSERT_TRUE(wstest::Write(fs.get(), id, "d/small", "small", nullptr, true).ok());
    }
    Snapshot a1, a2, b1, b2;
    ASSERT_TRUE(TakeSnapshot(ws.get(), a, &a1).ok());
    EXPECT_EQ(a1.bytes(), 200005u);
    EXPECT_EQ(a1.new_bytes(), 200005u);
    EXPECT_EQ(StoreObjects(srv.state_dir()), 2);
    ASSERT_TRUE(TakeSnapshot(ws.get(), a, &a2).ok());
    EXPECT_EQ(a2.new_bytes(), 0u) << "an unchanged tree adds nothing";
    ASSERT_TRUE(TakeSnapshot(ws.get(), b, &b1).ok());
    EXPECT_EQ(b1.provider(), "memory");
    EXPECT_EQ(b1.new_bytes(), 0u) << "the same content in another workspace is shared";
    ASSERT_TRUE(wstest::Write(fs.get(), b, "only-b", std::string(1234, 'b')).ok());
    ASSERT_TRUE(TakeSnapshot(ws.get(), b, &b2).ok());
    EXPECT_EQ(b2.new_bytes(), 1234u);
    EXPECT_EQ(StoreObjects(srv.state_dir()), 3);

    uint64_t reclaimed = 99;
    ASSERT_TRUE(DeleteSnapshot(ws.get(), b2.id(), &reclaimed).ok());
    EXPECT_EQ(reclaimed, 1234u) << "only what no other snapshot holds";
    EXPECT_EQ(StoreObjects(srv.state_dir()), 2);
    ASSERT_TRUE(DeleteSnapshot(ws.get(), a1.id(), &reclaimed).ok());
    EXPECT_EQ(reclaimed, 0u);
    ASSERT_TRUE(DeleteSnapshot(ws.get(), a2.id(), &reclaimed).ok());
    EXPECT_EQ(reclaimed, 0u) << "b1 still holds the same content";
    ASSERT_TRUE(DeleteSnapshot(ws.get(), b1.id(), &reclaimed).ok());
    EXPECT_EQ(reclaimed, 200005u);
    EXPECT_EQ(StoreObjects(srv.state_dir()), 0);
    EXPECT_WS_ERROR(DeleteSnapshot(ws.get(), b1.id()), StatusCode::NOT_FOUND, "NO_SUCH_SNAPSHOT");
    EXPECT_TRUE(ListAll(ws.get()).empty());
}

TEST(Snapshot, ForkIntoEveryProvider)
{
    wstest::Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    // Taken on local-bash (with symlinks), forked everywhere.
    std::string src = MustOpen(ws.get(), "local-bash");
    Plant(srv.workspace_dir(src));
    Snapshot sn;
    ASSERT_TRUE(TakeSnapshot(ws.get(), src, &sn).ok());
    auto want = DescribeTree(srv.workspace_dir(src));

    for (const std::string p : {"local-bash", "local-sandbox", "docker"}) {
        std::string id = MustOpen(ws.get(), p, sn.id());
        ASSERT_FALSE(id.empty()) << p;
        EXPECT_EQ(DescribeTree(srv.workspace_dir(id)), want) << p;
        EXPECT_EQ(MustRead(fs.get(), id, "dir/sub/c.sh"), "#!/bin/sh\necho c\n") << p;
    }
    // Memory: the content through the API, and a snapshot of it forked
    // back onto disk gives the same tree (memory kept links and modes).
    std::string mem = MustOpen(ws.get(), "memory", sn.id());
    ASSERT_FALSE(mem.empty());
    EXPECT_EQ(MustRead(fs.get(), mem, "a.txt"), "alpha\n");
    EXPECT_EQ(wstest::Sha256Hex(MustRead(fs.get(), mem, "dir/b.bin")),
              wstest::Sha256Hex(wstest::ReadHostFile(srv.workspace_dir(src) + "/dir/b.bin")));
    Snapshot from_mem;
    ASSERT_TRUE(TakeSnapshot(ws.get(), mem, &from_mem).ok());
    EXPECT_EQ(from_mem.provider(), "memory");
    EXPECT_EQ(from_mem.new_bytes(), 0u);
    std::string back = MustOpen(ws.get(), "local-bash", from_mem.id());
    EXPECT_EQ(DescribeTree(srv.workspace_dir(back)), want);

    // Both sources at once is malformed.
    std::string none;
    EXPECT_WS_ERROR(OpenWs(ws.get(), "memory", &none, sn.id(), "/tmp"),
                    StatusCode::INVALID_ARGUMENT, "MALFORMED");
}

TEST(Snapshot, SurviveRestartAndAreListed)
{
    std::string state = wstest::MakeStateDir();
    Snapshot sn;
    std::string src;
    {
        wstest::Server srv({}, state);
        auto ws = srv.workspaces();
        auto fs = srv.fs();
        src = MustOpen(ws.get(), "memory");
        ASSERT_TRUE(wstest::Write(fs.get(), src, "kept", "across restarts").ok());
        ASSERT_TRUE(TakeSnapshot(ws.get(), src, &sn, "keep", {{"env", "prod"}}).ok());
        Snapshot other;
        ASSERT_TRUE(TakeSnapshot(ws.get(), src, &other, "other", {{"env", "dev"}}).ok());
        EXPECT_WS_ERROR(TakeSnapshot(ws.get(), src, nullptr, "keep"), StatusCode::ALREADY_EXISTS,
                        "EXISTS");
        EXPECT_WS_ERROR(TakeSnapshot(ws.get(), src, nullptr, "Bad_Name"),
                        StatusCode::INVALID_ARGUMENT, "MALFORMED");
        srv.Stop();
    }
    // What a crash between an object's publish and its snapshot's commit
    // leaves: an object no snapshot names. The next start removes it and
    // nothing else (a name that is no object's is not the store's to
    // judge).
    std::string objects = state + "/snapshots/objects";
    std::string orphan_hex = wstest::Sha256Hex("never committed");
    mkdir((objects + "/" + orphan_hex.substr(0, 2)).c_str(), 0700);
    std::string orphan = objects + "/" + orphan_hex.substr(0, 2) + "/" + orphan_hex.substr(2);
    wstest::WriteHostFile(orphan, "never committed");
    std::string kept_hex = wstest::Sha256Hex("across restarts");
    std::string kept = objects + "/" + kept_hex.substr(0, 2) + "/" + kept_hex.substr(2);
    ASSERT_EQ(access(kept.c_str(), F_OK), 0) << "the store layout changed: " << kept;
    std::string stranger = objects + "/" + kept_hex.substr(0, 2) + "/not-an-object";
    wstest::WriteHostFile(stranger, "x");
    wstest::Server srv({}, state);
    EXPECT_NE(access(orphan.c_str(), F_OK), 0) << "the orphan object is still there";
    EXPECT_EQ(access(kept.c_str(), F_OK), 0);
    EXPECT_EQ(access(stranger.c_str(), F_OK), 0);
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto all = ListAll(ws.get(), "", 1);
    ASSERT_EQ(all.size(), 2u) << "paged one at a time";
    EXPECT_LT(all[0].id(), all[1].id());
    auto prod = ListAll(ws.get(), "env=prod");
    ASSERT_EQ(prod.size(), 1u);
    EXPECT_EQ(prod[0].id(), sn.id());
    EXPECT_EQ(prod[0].name(), "keep");
    EXPECT_EQ(prod[0].workspace_id(), src);
    EXPECT_EQ(prod[0].provider(), "memory");
    EXPECT_EQ(prod[0].bytes(), sn.bytes());
    EXPECT_EQ(prod[0].created_at_unix_ms(), sn.created_at_unix_ms());
    // The memory workspace died with the server; its snapshot did not.
    std::string id = MustOpen(ws.get(), "memory", sn.id());
    EXPECT_EQ(MustRead(fs.get(), id, "kept"), "across restarts");
}

const char *const kAlice = "tok-alice-snap-0123";
const char *const kBob = "tok-bob-snap-4567";

std::vector<std::string> TenantArgs(std::vector<std::string> more = {})
{
    std::string path = wstest::MakeTempDir("tokens") + "/tokens";
    wstest::WriteHostFile(path, "alice " + wstest::Sha256Hex(kAlice) + "\nbob " +
                                    wstest::Sha256Hex(kBob) + "\n");
    std::vector<std::string> a = {"--tokens-file", path};
    a.insert(a.end(), more.begin(), more.end());
    return a;
}

TEST(Snapshot, AnotherTenantsSnapshotIsUnknown)
{
    wstest::Server srv(TenantArgs());
    auto alice = Workspaces::NewStub(srv.Channel(kAlice));
    auto bob = Workspaces::NewStub(srv.Channel(kBob));
    std::string a = MustOpen(alice.get(), "memory");
    std::string b = MustOpen(bob.get(), "memory");
    Snapshot sn;
    ASSERT_TRUE(TakeSnapshot(alice.get(), a, &sn, "mine").ok());

    std::string id;
    EXPECT_WS_ERROR(OpenWs(bob.get(), "memory", &id, sn.id()), StatusCode::NOT_FOUND,
                    "NO_SUCH_SNAPSHOT");
    EXPECT_WS_ERROR(Restore(bob.get(), b, sn.id(), true), StatusCode::NOT_FOUND,
                    "NO_SUCH_SNAPSHOT");
    EXPECT_WS_ERROR(DeleteSnapshot(bob.get(), sn.id()), StatusCode::NOT_FOUND, "NO_SUCH_SNAPSHOT");
    EXPECT_TRUE(ListAll(bob.get()).empty());
    // Names are per tenant; Alice's workspace is not Bob's to snapshot.
    EXPECT_TRUE(TakeSnapshot(bob.get(), b, nullptr, "mine").ok());
    EXPECT_WS_ERROR(TakeSnapshot(bob.get(), a, nullptr), StatusCode::NOT_FOUND,
                    "NO_SUCH_WORKSPACE");
    EXPECT_EQ(ListAll(alice.get()).size(), 1u);
    EXPECT_TRUE(DeleteSnapshot(alice.get(), sn.id()).ok());
}

TEST(Snapshot, RestoreWhileACommandRunsIsBusyUnlessForced)
{
    wstest::Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto ex = srv.exec();
    std::string id = MustOpen(ws.get(), "local-bash", "", "", {"sleep"});
    ASSERT_TRUE(wstest::Write(fs.get(), id, "f", "v1").ok());
    Snapshot sn;
    ASSERT_TRUE(TakeSnapshot(ws.get(), id, &sn).ok());
    ASSERT_TRUE(wstest::Write(fs.get(), id, "f", "v2").ok());

    std::string marker = wstest::UniqueSleep();
    ClientContext ctx;
    ctx.set_deadline(Deadline(90));
    auto stream = wstest::StartStream(ex.get(), &ctx, id, wstest::ArgvProcess({"sleep", marker}));
    wstest::EventLog log;
    ASSERT_TRUE(wstest::ReadEvents(stream.get(), &log,
                                   [](const wstest::EventLog &l) { return l.started; }));

    grpc::Status s = Restore(ws.get(), id, sn.id(), false);
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "BUSY");
    EXPECT_EQ(wstest::Decode(s).metadata["processes"], "1");
    EXPECT_EQ(MustRead(fs.get(), id, "f"), "v2") << "a refused restore changes nothing";
    EXPECT_EQ(wstest::CountProcsWithMarker(marker), 1);

    RestoreResponse rr;
    s = Restore(ws.get(), id, sn.id(), true, &rr);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(rr.processes_ended(), 1u);
    EXPECT_EQ(MustRead(fs.get(), id, "f"), "v1");
    wstest::ReadEvents(stream.get(), &log);
    stream->Finish();
    ASSERT_TRUE(log.exited);
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_SIGNALED) << "ended by the restore";
    EXPECT_EQ(wstest::CountProcsWithMarker(marker), 0);
}

TEST(Snapshot, ByteQuotaCountsSnapshotsAndTheirCap)
{
    wstest::Server srv({"--tenant-max-bytes", "100000", "--max-snapshots", "2"});
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    std::string id = MustOpen(ws.get(), "memory");
    ASSERT_TRUE(wstest::Write(fs.get(), id, "f", std::string(40000, 'a')).ok());
    Snapshot sn;
    ASSERT_TRUE(TakeSnapshot(ws.get(), id, &sn).ok());
    // 40000 in the workspace and 40000 in the snapshot: 30000 more is over.
    grpc::Status s = wstest::Write(fs.get(), id, "g", std::string(30000, 'b'));
    EXPECT_WS_ERROR(s, StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
    EXPECT_EQ(wstest::Decode(s).metadata["quota"], "tenant_bytes");
    // A second snapshot of the same 40000 bytes would pass the quota too.
    s = TakeSnapshot(ws.get(), id, nullptr);
    EXPECT_WS_ERROR(s, StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
    EXPECT_EQ(wstest::Decode(s).metadata["quota"], "tenant_bytes");
    // A fork counts what it copies in.
    std::string fork;
    s = OpenWs(ws.get(), "memory", &fork, sn.id());
    EXPECT_WS_ERROR(s, StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
    EXPECT_EQ(ListAll(ws.get()).size(), 1u) << "a refused snapshot is not kept";

    uint64_t reclaimed = 0;
    ASSERT_TRUE(DeleteSnapshot(ws.get(), sn.id(), &reclaimed).ok());
    EXPECT_EQ(reclaimed, 40000u);
    EXPECT_TRUE(wstest::Write(fs.get(), id, "g", std::string(30000, 'b')).ok());

    // --max-snapshots 2.
    ASSERT_TRUE(wstest::Write(fs.get(), id, "f", "tiny").ok());
    ASSERT_TRUE(wstest::Write(fs.get(), id, "g", "tiny").ok());
    ASSERT_TRUE(TakeSnapshot(ws.get(), id, nullptr).ok());
    ASSERT_TRUE(TakeSnapshot(ws.get(), id, nullptr).ok());
    s = TakeSnapshot(ws.get(), id, nullptr);
    EXPECT_WS_ERROR(s, StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
    EXPECT_EQ(wstest::Decode(s).metadata["quota"], "snapshots");
    EXPECT_EQ(wstest::Decode(s).metadata["limit"], "2");
}

TEST(Snapshot, FromPathCopiesAnAllowedDirectoryOnly)
{
    std::string allowed = wstest::MakeTempDir("allowed");
    std::string outside = wstest::MakeTempDir("outside");
    std::string src = allowed + "/src";
    Sh("mkdir", mkdir(src.c_str(), 0755));
    Sh("mkdir", mkdir((src + "/sub").c_str(), 0750));
    wstest::WriteHostFile(src + "/top.txt", "top");
    wstest::WriteHostFile(src + "/sub/deep.txt", std::string(5000, 'd'));
    Sh("chmod", chmod((src + "/sub/deep.txt").c_str(), 0600));
    Sh("symlink", symlink("/", (src + "/root").c_str()));
    Sh("symlink", symlink("/etc/passwd", (src + "/passwd").c_str()));
    Sh("mkfifo", mkfifo((src + "/fifo").c_str(), 0644));
    Sh("symlink", symlink(src.c_str(), (allowed + "/via-link").c_str()));
    wstest::WriteHostFile(outside + "/secret", "secret");
    auto before = DescribeTree(allowed);

    wstest::Server srv({"--source-path-allow", allowed, "--tenant-max-bytes", "0"});
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    std::string id = MustOpen(ws.get(), "local-bash", "", src);
    ASSERT_FALSE(id.empty());
    auto got = DescribeTree(srv.workspace_dir(id));
    EXPECT_EQ(got["top.txt"], "F 644 " + wstest::Sha256Hex("top"));
    EXPECT_EQ(got["sub"], "D 750");
    EXPECT_EQ(got["sub/deep.txt"], "F 600 " + wstest::Sha256Hex(std::string(5000, 'd')));
    EXPECT_EQ(got["root"], "L /") << "a symlink to / is copied as a link";
    EXPECT_EQ(got["passwd"], "L /etc/passwd");
    EXPECT_EQ(got.count("fifo"), 0u) << "special files are left out";
    EXPECT_EQ(got.size(), 5u) << "nothing through the links was read";
    // Into memory too.
    std::string mem = MustOpen(ws.get(), "memory", "", src);
    EXPECT_EQ(MustRead(fs.get(), mem, "sub/deep.txt"), std::string(5000, 'd'));

    for (const std::string &bad :
         {outside, src + "/../src", allowed + "/via-link", allowed + "/via-link/sub",
          std::string("src"), src + "/", allowed + "//src", src + "/top.txt"}) {
        std::string none;
        grpc::Status s = OpenWs(ws.get(), "local-bash", &none, "", bad);
        EXPECT_WS_ERROR(s, StatusCode::PERMISSION_DENIED, "SOURCE_PATH_DENIED") << bad;
        EXPECT_EQ(wstest::Decode(s).metadata["path"], bad);
    }
    EXPECT_EQ(DescribeTree(allowed), before) << "the source is never written";
}

TEST(Snapshot, FromPathRefusedWithoutAnAllowList)
{
    std::string dir = wstest::MakeTempDir("src");
    wstest::Server srv;
    auto ws = srv.workspaces();
    std::string none;
    EXPECT_WS_ERROR(OpenWs(ws.get(), "memory", &none, "", dir), StatusCode::PERMISSION_DENIED,
                    "SOURCE_PATH_DENIED");
}

TEST(Snapshot, ConsistentWhileWriteFileCallsRun)
{
    wstest::Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    std::string id = MustOpen(ws.get(), "local-bash");
    const int kFiles = 8;
    auto content = [](int gen, int i) {
        return std::string(20000 + i * 1000, (char)('a' + gen % 26)) + std::to_string(gen);
    };
    for (int i = 0; i < kFiles; i++)
        ASSERT_TRUE(wstest::Write(fs.get(), id, "f" + std::to_string(i), content(0, i)).ok());

    std::atomic<bool> stop{false};
    std::atomic<int> writes{0};
    std::vector<std::thread> writers;
    for (int t = 0; t < 2; t++)
        writers.emplace_back([&, t] {
            auto wfs = srv.fs();
            for (int gen = 1; !stop; gen++)
                for (int i = t; i < kFiles && !stop; i += 2)
                    if (wstest::Write(wfs.get(), id, "f" + std::to_string(i), content(gen, i),
                                      nullptr, false, "", 4096)
                            .ok())
                        writes++;
        });
    std::vector<Snapshot> snaps;
    for (int k = 0; k < 5; k++) {
        Snapshot sn;
        grpc::Status s = TakeSnapshot(ws.get(), id, &sn);
        ASSERT_TRUE(s.ok()) << s.error_message();
        snaps.push_back(sn);
    }
    stop = true;
    for (auto &t : writers)
        t.join();
    EXPECT_GT(writes.load(), 0);

    for (const auto &sn : snaps) {
        std::string fork = MustOpen(ws.get(), "memory", sn.id());
        for (int i = 0; i < kFiles; i++) {
            std::string got = MustRead(fs.get(), fork, "f" + std::to_string(i));
            // A whole version: its length and its generation's letter
            // agree with its trailing number.
            size_t body = 20000 + i * 1000;
            ASSERT_GT(got.size(), body) << sn.id() << " f" << i;
            int gen = std::stoi(got.substr(body));
            EXPECT_EQ(got, content(gen, i)) << sn.id() << " f" << i;
        }
    }
}

} // namespace
