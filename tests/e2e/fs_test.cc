// FileSystem RPCs end to end, over the memory and local-bash providers,
// plus hostile paths planted on disk for the host-directory provider.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;
using wstest::Server;

namespace
{

class FsTest : public ::testing::TestWithParam<std::string>
{
  protected:
    void SetUp() override
    {
        srv_ = std::make_unique<Server>();
        wsstub_ = srv_->workspaces();
        fs_ = srv_->fs();
        ws_ = wstest::Open(wsstub_.get(), GetParam(), 1 << 20);
    }
    grpc::Status Stat(const std::string &path, StatResponse *resp = nullptr)
    {
        ClientContext ctx;
        StatRequest req;
        StatResponse local;
        req.set_workspace_id(ws_.id);
        req.set_path(path);
        return fs_->Stat(&ctx, req, resp ? resp : &local);
    }
    grpc::Status Mkdir(const std::string &path, bool parents)
    {
        ClientContext ctx;
        MakeDirRequest req;
        MakeDirResponse resp;
        req.set_workspace_id(ws_.id);
        req.set_path(path);
        req.set_parents(parents);
        return fs_->MakeDir(&ctx, req, &resp);
    }
    grpc::Status Remove(const std::string &path, bool recursive, uint64_t *removed = nullptr)
    {
        ClientContext ctx;
        RemoveRequest req;
        RemoveResponse resp;
        req.set_workspace_id(ws_.id);
        req.set_path(path);
        req.set_recursive(recursive);
        auto s = fs_->Remove(&ctx, req, &resp);
        if (removed)
            *removed = resp.removed();
        return s;
    }
    grpc::Status Move(const std::string &from, const std::string &to, bool replace)
    {
        ClientContext ctx;
        MoveRequest req;
        MoveResponse resp;
        req.set_workspace_id(ws_.id);
        req.set_from_path(from);
        req.set_to_path(to);
        req.set_replace(replace);
        return fs_->Move(&ctx, req, &resp);
    }
    grpc::Status Edit(const std::string &path, const std::string &o, const std::string &n, bool all,
                      EditFileResponse *resp)
    {
        ClientContext ctx;
        EditFileRequest req;
        req.set_workspace_id(ws_.id);
        req.set_path(path);
        req.set_old_text(o);
        req.set_new_text(n);
        req.set_replace_all(all);
        return fs_->EditFile(&ctx, req, resp);
    }
    std::string Content(const std::string &path)
    {
        std::string out;
        EXPECT_TRUE(wstest::Read(fs_.get(), ws_.id, path, &out).ok()) << path;
        return out;
    }

    std::unique_ptr<Server> srv_;
    std::unique_ptr<Workspaces::Stub> wsstub_;
    std::unique_ptr<FileSystem::Stub> fs_;
    wstest::Ws ws_;
};

TEST_P(FsTest, WriteReadRoundTripWithOffsetsAndInfo)
{
    std::string data;
    for (int i = 0; i < 300000; i++)
        data.push_back(static_cast<char>(i * 7));
    WriteFileResponse wr;
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "bin.dat", data, &wr).ok());
    EXPECT_EQ(wr.bytes_written(), data.size());
    EXPECT_EQ(wr.sha256().size(), 64u);
    EXPECT_EQ(Content("bin.dat"), data);
    std::string part;
    ASSERT_TRUE(wstest::Read(fs_.get(), ws_.id, "bin.dat", &part, 1000, 5000).ok());
    EXPECT_EQ(part, data.substr(1000, 5000));
    ASSERT_TRUE(wstest::Read(fs_.get(), ws_.id, "bin.dat", &part, data.size() + 10).ok());
    EXPECT_EQ(part, "");
    // The first message carries the file's info, even for an empty file.
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "empty", "").ok());
    ClientContext ctx;
    ReadFileRequest req;
    req.set_workspace_id(ws_.id);
    req.set_path("empty");
    auto r = fs_->ReadFile(&ctx, req);
    ReadFileResponse m;
    ASSERT_TRUE(r->Read(&m));
    EXPECT_EQ(m.info().type(), FILE_TYPE_REGULAR);
    EXPECT_EQ(m.info().size(), 0u);
    EXPECT_FALSE(r->Read(&m));
    EXPECT_TRUE(r->Finish().ok());
}

TEST_P(FsTest, WriteNeedsParentsUnlessAsked)
{
    EXPECT_WS_ERROR(wstest::Write(fs_.get(), ws_.id, "a/b/c.txt", "x"), StatusCode::NOT_FOUND,
                    "NO_SUCH_FILE");
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "a/b/c.txt", "x", nullptr, true).ok());
    EXPECT_EQ(Content("a/b/c.txt"), "x");
}

TEST_P(FsTest, IfMatchConflict)
{
    WriteFileResponse wr;
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "f", "one", &wr).ok());
    std::string sha = wr.sha256();
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "f", "two", &wr, false, sha).ok());
    auto s = wstest::Write(fs_.get(), ws_.id, "f", "three", nullptr, false, sha);
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "CONFLICT");
    EXPECT_EQ(wstest::Decode(s).metadata["actual_sha256"], wr.sha256());
    EXPECT_EQ(Content("f"), "two");
}

TEST_P(FsTest, SizeCapKeepsOldContent)
{
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "f", "small").ok());
    auto s = wstest::Write(fs_.get(), ws_.id, "f", std::string((1 << 20) + 1, 'z'));
    EXPECT_WS_ERROR(s, StatusCode::RESOURCE_EXHAUSTED, "SIZE_CAP");
    EXPECT_EQ(Content("f"), "small");
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "g", std::string(1 << 20, 'z')).ok());
}

// A write the client cancels halfway leaves the old content and no
// temporary file.
TEST_P(FsTest, CancelledWriteKeepsOldContent)
{
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "doc", "old").ok());
    {
        ClientContext ctx;
        WriteFileResponse resp;
        auto w = fs_->WriteFile(&ctx, &resp);
        WriteFileRequest h;
        h.mutable_header()->set_workspace_id(ws_.id);
        h.mutable_header()->set_path("doc");
        ASSERT_TRUE(w->Write(h));
        WriteFileRequest d;
        d.set_data(std::string(64 * 1024, 'N'));
        ASSERT_TRUE(w->Write(d));
        ASSERT_TRUE(w->Write(d));
        ctx.TryCancel();
        EXPECT_EQ(w->Finish().error_code(), StatusCode::CANCELLED);
    }
    EXPECT_EQ(Content("doc"), "old");
    ClientContext ctx;
    ListDirRequest req;
    ListDirResponse resp;
    req.set_workspace_id(ws_.id);
    req.set_path(".");
    ASSERT_TRUE(fs_->ListDir(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.entries_size(), 1);
    EXPECT_EQ(resp.entries(0).path(), "doc");
    if (GetParam() == "local-bash") {
        EXPECT_EQ(wstest::Snapshot(srv_->workspace_dir(ws_.id)).size(), 1u);
    }
}

// A write whose deadline passes halfway commits nothing either: the
// server's own deadline ends the stream the way a half-close does, and the
// client is told DEADLINE_EXCEEDED, so neither the old content nor an empty
// file may be replaced behind its back.
TEST_P(FsTest, WritePastItsDeadlineKeepsOldContent)
{
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "doc", "old").ok());
    for (const char *path : {"doc", "fresh", "doc", "fresh"}) {
        bool with_data = path[0] == 'd';
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
        WriteFileResponse resp;
        auto w = fs_->WriteFile(&ctx, &resp);
        WriteFileRequest h;
        h.mutable_header()->set_workspace_id(ws_.id);
        h.mutable_header()->set_path(path);
        ASSERT_TRUE(w->Write(h));
        if (with_data) {
            WriteFileRequest d;
            d.set_data("partial");
            ASSERT_TRUE(w->Write(d));
        }
        // The client stalls past the deadline without half-closing.
        std::this_thread::sleep_for(std::chrono::milliseconds(800));
        EXPECT_EQ(w->Finish().error_code(), StatusCode::DEADLINE_EXCEEDED) << path;
    }
    // The server has seen the end of both streams by now; give a commit
    // that should not happen the time to show.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(Content("doc"), "old");
    ClientContext ctx;
    StatRequest sreq;
    StatResponse sresp;
    sreq.set_workspace_id(ws_.id);
    sreq.set_path("fresh");
    EXPECT_WS_ERROR(fs_->Stat(&ctx, sreq, &sresp), StatusCode::NOT_FOUND, "NO_SUCH_FILE");
}

// With require_finish, a half-close without `finish` commits nothing: it is
// refused naming the field, and the old content stays. This is what makes
// a client's cancel safe whatever order the end of its stream and the
// reset reach the server in.
TEST_P(FsTest, RequireFinishRefusesAHalfClose)
{
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "doc", "old").ok());
    for (const char *path : {"doc", "fresh"}) {
        ClientContext ctx;
        WriteFileResponse resp;
        auto w = fs_->WriteFile(&ctx, &resp);
        WriteFileRequest h;
        h.mutable_header()->set_workspace_id(ws_.id);
        h.mutable_header()->set_path(path);
        h.mutable_header()->set_require_finish(true);
        ASSERT_TRUE(w->Write(h));
        WriteFileRequest d;
        d.set_data("new content");
        ASSERT_TRUE(w->Write(d));
        ASSERT_TRUE(w->WritesDone());
        auto s = w->Finish();
        EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED");
        EXPECT_EQ(wstest::Decode(s).metadata["field"], "finish") << path;
    }
    EXPECT_EQ(Content("doc"), "old");
    ClientContext ctx;
    StatRequest sreq;
    StatResponse sresp;
    sreq.set_workspace_id(ws_.id);
    sreq.set_path("fresh");
    EXPECT_WS_ERROR(fs_->Stat(&ctx, sreq, &sresp), StatusCode::NOT_FOUND, "NO_SUCH_FILE");

    // The same stream with `finish` commits.
    ClientContext fctx;
    WriteFileResponse fresp;
    auto w = fs_->WriteFile(&fctx, &fresp);
    WriteFileRequest h;
    h.mutable_header()->set_workspace_id(ws_.id);
    h.mutable_header()->set_path("doc");
    h.mutable_header()->set_require_finish(true);
    ASSERT_TRUE(w->Write(h));
    WriteFileRequest d;
    d.set_data("new content");
    d.set_finish(true);
    ASSERT_TRUE(w->Write(d));
    ASSERT_TRUE(w->WritesDone());
    ASSERT_TRUE(w->Finish().ok());
    EXPECT_EQ(Content("doc"), "new content");
}

// A plain half-close (no `finish`) commits too: the stream was not
// cancelled.
TEST_P(FsTest, HalfCloseWithoutFinishCommits)
{
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "doc", "old").ok());
    ClientContext ctx;
    WriteFileResponse resp;
    auto w = fs_->WriteFile(&ctx, &resp);
    WriteFileRequest h;
    h.mutable_header()->set_workspace_id(ws_.id);
    h.mutable_header()->set_path("doc");
    ASSERT_TRUE(w->Write(h));
    WriteFileRequest d;
    d.set_data("new ");
    ASSERT_TRUE(w->Write(d));
    d.set_data("content");
    ASSERT_TRUE(w->Write(d));
    w->WritesDone();
    ASSERT_TRUE(w->Finish().ok());
    EXPECT_EQ(resp.bytes_written(), 11u);
    EXPECT_EQ(Content("doc"), "new content");
}

TEST_P(FsTest, WriteProtocolViolationsAreMalformed)
{
    ClientContext ctx;
    WriteFileResponse resp;
    auto w = fs_->WriteFile(&ctx, &resp);
    WriteFileRequest d;
    d.set_data("no header first");
    w->Write(d);
    w->WritesDone();
    EXPECT_WS_ERROR(w->Finish(), StatusCode::INVALID_ARGUMENT, "MALFORMED");
}

TEST_P(FsTest, EditRules)
{
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "e.txt", "foo bar foo").ok());
    EditFileResponse er;
    auto s = Edit("e.txt", "foo", "baz", false, &er);
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "MULTIPLE_MATCHES");
    EXPECT_EQ(wstest::Decode(s).metadata["matches"], "2");
    s = Edit("e.txt", "nothere", "baz", false, &er);
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "NO_MATCH");
    EXPECT_EQ(wstest::Decode(s).metadata["matches"], "0");
    EXPECT_EQ(Content("e.txt"), "foo bar foo");
    ASSERT_TRUE(Edit("e.txt", "bar", "qux", false, &er).ok());
    EXPECT_EQ(er.replacements(), 1u);
    EXPECT_EQ(Content("e.txt"), "foo qux foo");
    ASSERT_TRUE(Edit("e.txt", "foo", "X", true, &er).ok());
    EXPECT_EQ(er.replacements(), 2u);
    EXPECT_EQ(Content("e.txt"), "X qux X");
    EXPECT_WS_ERROR(Edit("e.txt", "", "y", false, &er), StatusCode::INVALID_ARGUMENT, "MALFORMED");
}

TEST_P(FsTest, ListDirGlobGrep)
{
    ASSERT_TRUE(
        wstest::Write(fs_.get(), ws_.id, "src/main.c", "int main() { return 0; }\n", nullptr, true)
            .ok());
    ASSERT_TRUE(
        wstest::Write(fs_.get(), ws_.id, "src/lib/util.c", "// TODO fix\nint x;\n", nullptr, true)
            .ok());
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "README.md", "todo: docs\n").ok());
    {
        ClientContext ctx;
        ListDirRequest req;
        ListDirResponse resp;
        req.set_workspace_id(ws_.id);
        req.set_path(".");
        req.set_depth(3);
        ASSERT_TRUE(fs_->ListDir(&ctx, req, &resp).ok());
        std::vector<std::string> paths;
        for (const auto &e : resp.entries())
            paths.push_back(e.path());
        EXPECT_EQ(paths, (std::vector<std::string>{"README.md", "src", "src/lib", "src/lib/util.c",
                                                   "src/main.c"}));
        EXPECT_FALSE(resp.truncated());
        ClientContext c2;
        req.set_max_entries(2);
        ASSERT_TRUE(fs_->ListDir(&c2, req, &resp).ok());
        EXPECT_EQ(resp.entries_size(), 2);
        EXPECT_TRUE(resp.truncated());
        ClientContext c3;
        req.set_depth(65);
        EXPECT_WS_ERROR(fs_->ListDir(&c3, req, &resp), StatusCode::INVALID_ARGUMENT, "LIMIT");
    }
    {
        ClientContext ctx;
        GlobRequest req;
        GlobResponse resp;
        req.set_workspace_id(ws_.id);
        req.set_pattern("**/*.c");
        ASSERT_TRUE(fs_->Glob(&ctx, req, &resp).ok());
        std::set<std::string> got;
        for (const auto &e : resp.matches())
            got.insert(e.path());
        EXPECT_EQ(got, (std::set<std::string>{"src/main.c", "src/lib/util.c"}));
        ClientContext c2;
        req.set_pattern(std::string(5000, '*'));
        EXPECT_WS_ERROR(fs_->Glob(&c2, req, &resp), StatusCode::INVALID_ARGUMENT, "BAD_PATTERN");
    }
    {
        ClientContext ctx;
        GrepRequest req;
        req.set_workspace_id(ws_.id);
        req.set_pattern("todo");
        req.set_ignore_case(true);
        auto r = fs_->Grep(&ctx, req);
        GrepResponse m;
        std::set<std::string> hits;
        uint64_t summary_matches = 0;
        while (r->Read(&m)) {
            for (const auto &g : m.matches())
                hits.insert(g.path() + ":" + std::to_string(g.line_number()));
            if (m.has_summary())
                summary_matches = m.summary().matches();
        }
        ASSERT_TRUE(r->Finish().ok());
        EXPECT_EQ(hits, (std::set<std::string>{"README.md:1", "src/lib/util.c:1"}));
        EXPECT_EQ(summary_matches, 2u);
        ClientContext c2;
        req.set_pattern("(unclosed");
        auto r2 = fs_->Grep(&c2, req);
        while (r2->Read(&m)) {
        }
        auto s = r2->Finish();
        EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "BAD_PATTERN");
        EXPECT_FALSE(wstest::Decode(s).metadata["offset"].empty());
    }
}

TEST_P(FsTest, MkdirRemoveMove)
{
    ASSERT_TRUE(Mkdir("d/e/f", true).ok());
    EXPECT_WS_ERROR(Mkdir("d", false), StatusCode::ALREADY_EXISTS, "EXISTS");
    EXPECT_TRUE(Mkdir("d", true).ok());
    EXPECT_WS_ERROR(Mkdir("x/y", false), StatusCode::NOT_FOUND, "NO_SUCH_FILE");
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "d/e/f/file", "1").ok());
    EXPECT_WS_ERROR(Remove("d", false), StatusCode::FAILED_PRECONDITION, "NOT_EMPTY");
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "a", "A").ok());
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "b", "B").ok());
    EXPECT_WS_ERROR(Move("a", "b", false), StatusCode::ALREADY_EXISTS, "EXISTS");
    EXPECT_EQ(Content("b"), "B");
    ASSERT_TRUE(Move("a", "b", true).ok());
    EXPECT_EQ(Content("b"), "A");
    EXPECT_WS_ERROR(Stat("a"), StatusCode::NOT_FOUND, "NO_SUCH_FILE");
    uint64_t removed = 0;
    ASSERT_TRUE(Remove("d", true, &removed).ok());
    EXPECT_EQ(removed, 4u);
    EXPECT_WS_ERROR(Stat("d"), StatusCode::NOT_FOUND, "NO_SUCH_FILE");
    EXPECT_WS_ERROR(Remove(".", true), StatusCode::INVALID_ARGUMENT, "PATH_ESCAPE");
    EXPECT_WS_ERROR(Move(".", "z", false), StatusCode::INVALID_ARGUMENT, "PATH_ESCAPE");
}

TEST_P(FsTest, EscapingPathsAreRefused)
{
    for (const char *p :
         {"..", "../x", "a/../../x", "/etc/passwd", "/", "./../x", "a/b/../../../x"}) {
        EXPECT_WS_ERROR(Stat(p), StatusCode::INVALID_ARGUMENT, "PATH_ESCAPE") << p;
        EXPECT_WS_ERROR(wstest::Write(fs_.get(), ws_.id, p, "x"), StatusCode::INVALID_ARGUMENT,
                        "PATH_ESCAPE")
            << p;
    }
    EXPECT_WS_ERROR(Stat(""), StatusCode::INVALID_ARGUMENT, "BAD_PATH");
    EXPECT_WS_ERROR(Stat(std::string(5000, 'a')), StatusCode::INVALID_ARGUMENT, "BAD_PATH");
    EXPECT_WS_ERROR(Stat(std::string(256, 'a')), StatusCode::INVALID_ARGUMENT, "BAD_PATH");
    // "~" is just a name here: no home expansion.
    EXPECT_WS_ERROR(Stat("~"), StatusCode::NOT_FOUND, "NO_SUCH_FILE");
    EXPECT_WS_ERROR(Stat("~/x"), StatusCode::NOT_FOUND, "NO_SUCH_FILE");
}

INSTANTIATE_TEST_SUITE_P(Providers, FsTest, ::testing::Values("memory", "local-bash"),
                         [](const auto &param_info) {
                             return param_info.param == "memory" ? std::string("memory")
                                                                 : std::string("local_bash");
                         });

// ---- hostile trees planted on the host side of a local-bash workspace ----

class HostileTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        // Beside the state directory: a hard link needs one mount.
        outside_ = wstest::MakeHostTempDir("wsoutside");
        wstest::WriteHostFile(outside_ + "/secret", "top secret");
        srv_ = std::make_unique<Server>();
        wsstub_ = srv_->workspaces();
        fs_ = srv_->fs();
        ws_ = wstest::Open(wsstub_.get(), "local-bash");
        dir_ = srv_->workspace_dir(ws_.id);
        before_ = wstest::Snapshot(outside_);
    }
    void TearDown() override
    {
        EXPECT_EQ(wstest::Snapshot(outside_), before_) << "something outside the workspace changed";
        EXPECT_EQ(wstest::ReadHostFile(outside_ + "/secret"), "top secret");
    }
    grpc::Status Stat(const std::string &path)
    {
        ClientContext ctx;
        StatRequest req;
        StatResponse resp;
        req.set_workspace_id(ws_.id);
        req.set_path(path);
        return fs_->Stat(&ctx, req, &resp);
    }
    grpc::Status ReadP(const std::string &path)
    {
        std::string out;
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        ReadFileRequest req;
        req.set_workspace_id(ws_.id);
        req.set_path(path);
        auto r = fs_->ReadFile(&ctx, req);
        ReadFileResponse m;
        while (r->Read(&m))
            out += m.data();
        auto s = r->Finish();
        EXPECT_EQ(out.find("top secret"), std::string::npos);
        return s;
    }
    std::string outside_, dir_;
    std::map<std::string, std::string> before_;
    std::unique_ptr<Server> srv_;
    std::unique_ptr<Workspaces::Stub> wsstub_;
    std::unique_ptr<FileSystem::Stub> fs_;
    wstest::Ws ws_;
};

TEST_F(HostileTest, SymlinkLeafIsRefusedForReadAndWrite)
{
    ASSERT_EQ(symlink((outside_ + "/secret").c_str(), (dir_ + "/abs").c_str()), 0);
    ASSERT_EQ(symlink("../../../../../../../../../../../../etc/passwd", (dir_ + "/rel").c_str()),
              0);
    wstest::WriteHostFile(dir_ + "/inside", "fine");
    ASSERT_EQ(symlink("inside", (dir_ + "/innerlink").c_str()), 0);
    for (const char *p : {"abs", "rel", "innerlink"}) {
        EXPECT_WS_ERROR(ReadP(p), StatusCode::INVALID_ARGUMENT, "SYMLINK_LEAF") << p;
        EXPECT_WS_ERROR(wstest::Write(fs_.get(), ws_.id, p, "pwned"), StatusCode::INVALID_ARGUMENT,
                        "SYMLINK_LEAF")
            << p;
    }
    // Stat reports the link itself, never its target.
    EXPECT_TRUE(Stat("abs").ok());
}

TEST_F(HostileTest, SymlinkMiddleComponentsPointingOut)
{
    ASSERT_EQ(symlink(outside_.c_str(), (dir_ + "/out").c_str()), 0);
    ASSERT_EQ(symlink("/proc/self/root", (dir_ + "/proc").c_str()), 0);
    ASSERT_EQ(symlink("/", (dir_ + "/root").c_str()), 0);
    for (const char *p : {"out/secret", "proc/etc/passwd", "root/etc/passwd", "out/new"}) {
        EXPECT_WS_ERROR(ReadP(p), StatusCode::INVALID_ARGUMENT, "PATH_ESCAPE") << p;
        EXPECT_WS_ERROR(wstest::Write(fs_.get(), ws_.id, p, "pwned"), StatusCode::INVALID_ARGUMENT,
                        "PATH_ESCAPE")
            << p;
        EXPECT_WS_ERROR(Stat(p), StatusCode::INVALID_ARGUMENT, "PATH_ESCAPE") << p;
    }
    // A trailing slash never makes the server follow a leaf symlink: the leaf
    // is a symlink, not a directory.
    EXPECT_WS_ERROR(Stat("out/"), StatusCode::FAILED_PRECONDITION, "NOT_DIRECTORY");
    EXPECT_WS_ERROR(ReadP("out/"), StatusCode::INVALID_ARGUMENT, "SYMLINK_LEAF");
    // Recursive remove removes the links, never their targets.
    ClientContext ctx;
    RemoveRequest rm;
    RemoveResponse rr;
    rm.set_workspace_id(ws_.id);
    rm.set_path("out");
    rm.set_recursive(true);
    EXPECT_TRUE(fs_->Remove(&ctx, rm, &rr).ok());
}

TEST_F(HostileTest, SymlinkLoops)
{
    ASSERT_EQ(symlink("loop", (dir_ + "/loop").c_str()), 0);
    ASSERT_EQ(symlink("b", (dir_ + "/a").c_str()), 0);
    ASSERT_EQ(symlink("a", (dir_ + "/b").c_str()), 0);
    EXPECT_WS_ERROR(ReadP("loop"), StatusCode::INVALID_ARGUMENT, "SYMLINK_LEAF");
    EXPECT_WS_ERROR(ReadP("loop/x"), StatusCode::INVALID_ARGUMENT, "SYMLINK_LOOP");
    EXPECT_WS_ERROR(ReadP("a/x"), StatusCode::INVALID_ARGUMENT, "SYMLINK_LOOP");
}

TEST_F(HostileTest, FifosSocketsAndDevicesNeverBlock)
{
    ASSERT_EQ(mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {};
    sa.sun_family = AF_UNIX;
    // sun_path is short: bind by a relative name from inside the directory.
    char cwd[4096];
    ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
    ASSERT_EQ(chdir(dir_.c_str()), 0);
    memcpy(sa.sun_path, "sock", 5);
    int bound = bind(s, reinterpret_cast<struct sockaddr *>(&sa), sizeof(sa));
    ASSERT_EQ(chdir(cwd), 0);
    ASSERT_EQ(bound, 0);
    auto t0 = std::chrono::steady_clock::now();
    for (const char *p : {"fifo", "sock"}) {
        EXPECT_WS_ERROR(ReadP(p), StatusCode::FAILED_PRECONDITION, "SPECIAL_FILE") << p;
        EXPECT_WS_ERROR(wstest::Write(fs_.get(), ws_.id, p, "x"), StatusCode::FAILED_PRECONDITION,
                        "SPECIAL_FILE")
            << p;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
    close(s);
}

TEST_F(HostileTest, HardLinkToOutsideFileIsNotWritten)
{
    ASSERT_EQ(link((outside_ + "/secret").c_str(), (dir_ + "/hl").c_str()), 0);
    EXPECT_WS_ERROR(wstest::Write(fs_.get(), ws_.id, "hl", "pwned"),
                    StatusCode::FAILED_PRECONDITION, "HARDLINK");
    ClientContext ctx;
    EditFileRequest req;
    EditFileResponse resp;
    req.set_workspace_id(ws_.id);
    req.set_path("hl");
    req.set_old_text("top");
    req.set_new_text("pwned");
    EXPECT_WS_ERROR(fs_->EditFile(&ctx, req, &resp), StatusCode::FAILED_PRECONDITION, "HARDLINK");
}

TEST_F(HostileTest, WalksNeverFollowSymlinksOut)
{
    ASSERT_EQ(symlink(outside_.c_str(), (dir_ + "/out").c_str()), 0);
    wstest::WriteHostFile(dir_ + "/mine.txt", "top secret is a phrase in here too\n");
    ClientContext ctx;
    GrepRequest req;
    req.set_workspace_id(ws_.id);
    req.set_pattern("secret");
    auto r = fs_->Grep(&ctx, req);
    GrepResponse m;
    std::set<std::string> files;
    while (r->Read(&m))
        for (const auto &g : m.matches())
            files.insert(g.path());
    ASSERT_TRUE(r->Finish().ok());
    EXPECT_EQ(files, (std::set<std::string>{"mine.txt"}));
    ClientContext c2;
    GlobRequest gr;
    GlobResponse gresp;
    gr.set_workspace_id(ws_.id);
    gr.set_pattern("**/secret");
    ASSERT_TRUE(fs_->Glob(&c2, gr, &gresp).ok());
    EXPECT_EQ(gresp.matches_size(), 0);
}

TEST_F(HostileTest, NonUtf8NamesTravelAsBytes)
{
    std::string name = "bad\xff\xfe.txt";
    wstest::WriteHostFile(dir_ + "/" + name, "x");
    ClientContext ctx;
    ListDirRequest req;
    ListDirResponse resp;
    req.set_workspace_id(ws_.id);
    req.set_path(".");
    ASSERT_TRUE(fs_->ListDir(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.entries_size(), 1);
    EXPECT_EQ(resp.entries(0).path(), "");
    EXPECT_EQ(resp.entries(0).path_bytes(), name);
}

// A thread swaps a real directory with a symlink to the outside directory
// (RENAME_EXCHANGE) as fast as it can while every fs RPC goes through that
// path: no call may ever reach outside the workspace. Swaps are counted
// around each call, so a run in which the swapper never raced the calls
// fails instead of proving nothing.
TEST_F(HostileTest, RenameExchangeRaceNeverEscapes)
{
    std::string real = dir_ + "/d";
    std::string link = dir_ + "/swap";
    ASSERT_EQ(mkdir(real.c_str(), 0755), 0);
    wstest::WriteHostFile(real + "/secret", "inside");
    ASSERT_EQ(symlink(outside_.c_str(), link.c_str()), 0);
    // Two swaps put everything back: probe that this kernel and file system
    // can exchange at all.
    for (int i = 0; i < 2; i++) {
        if (syscall(SYS_renameat2, AT_FDCWD, real.c_str(), AT_FDCWD, link.c_str(),
                    RENAME_EXCHANGE) != 0) {
            int e = errno;
            ASSERT_TRUE(i == 0 && (e == ENOSYS || e == EINVAL)) << strerror(e);
            GTEST_SKIP() << "renameat2(RENAME_EXCHANGE) is not supported here (" << strerror(e)
                         << "): the swap this race needs cannot be made";
        }
    }
    std::atomic<bool> stop{false};
    std::atomic<long> swaps{0}, failed{0};
    std::thread swapper([&] {
        while (!stop) {
            if (syscall(SYS_renameat2, AT_FDCWD, real.c_str(), AT_FDCWD, link.c_str(),
                        RENAME_EXCHANGE) == 0)
                swaps++;
            else
                failed++;
        }
    });
    // The calls start once the swapper is running.
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
         swaps == 0 && std::chrono::steady_clock::now() < until;)
        std::this_thread::yield();
    ASSERT_GT(swaps.load(), 0) << "the swapper never swapped";
    // Calls during which at least one swap landed.
    int raced = 0, calls = 0;
    const std::set<std::string> allowed = {
        "",       "PATH_ESCAPE", "NO_SUCH_FILE", "SYMLINK_LEAF", "NOT_DIRECTORY",
        "EXISTS", "NOT_EMPTY",   "SYMLINK_LOOP", "IS_DIRECTORY"};
    auto check = [&](const grpc::Status &s, const char *what) {
        auto e = wstest::Decode(s);
        EXPECT_TRUE(allowed.count(e.reason)) << what << ": " << e.reason << " " << e.message;
    };
    // Runs one call and counts it as raced when a swap landed meanwhile.
    auto during = [&](const std::function<void()> &call) {
        long before = swaps;
        call();
        calls++;
        raced += swaps != before;
    };
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(4);
    int rounds = 0;
    while (std::chrono::steady_clock::now() < deadline) {
        during([&] { check(Stat("d/secret"), "stat"); });
        during([&] { check(ReadP("d/secret"), "read"); });
        during([&] { check(wstest::Write(fs_.get(), ws_.id, "d/new", "w"), "write"); });
        during([&] {
            ClientContext ctx;
            MakeDirRequest req;
            MakeDirResponse resp;
            req.set_workspace_id(ws_.id);
            req.set_path("d/sub");
            req.set_parents(true);
            check(fs_->MakeDir(&ctx, req, &resp), "mkdir");
        });
        during([&] {
            ClientContext ctx;
            MoveRequest req;
            MoveResponse resp;
            req.set_workspace_id(ws_.id);
            req.set_from_path("d/new");
            req.set_to_path("d/moved");
            req.set_replace(true);
            check(fs_->Move(&ctx, req, &resp), "move");
        });
        during([&] {
            ClientContext ctx;
            RemoveRequest req;
            RemoveResponse resp;
            req.set_workspace_id(ws_.id);
            req.set_path("d/moved");
            check(fs_->Remove(&ctx, req, &resp), "remove");
        });
        during([&] {
            ClientContext ctx;
            ListDirRequest req;
            ListDirResponse resp;
            req.set_workspace_id(ws_.id);
            req.set_path("d");
            check(fs_->ListDir(&ctx, req, &resp), "listdir");
            for (const auto &e : resp.entries())
                EXPECT_NE(e.path(), "d/secret.outside");
        });
        during([&] {
            ClientContext ctx;
            EditFileRequest req;
            EditFileResponse resp;
            req.set_workspace_id(ws_.id);
            req.set_path("d/secret");
            req.set_old_text("top secret");
            req.set_new_text("pwned");
            auto s = fs_->EditFile(&ctx, req, &resp);
            auto e = wstest::Decode(s);
            EXPECT_TRUE(allowed.count(e.reason) || e.reason == "NO_MATCH") << e.reason;
        });
        rounds++;
    }
    stop = true;
    swapper.join();
    EXPECT_GT(rounds, 10);
    RecordProperty("calls", calls);
    RecordProperty("raced_calls", raced);
    RecordProperty("swaps", std::to_string(swaps.load()));
    EXPECT_EQ(failed.load(), 0) << "swaps that failed (" << swaps.load() << " landed)";
    // Most calls should see swaps land while they run; a few are enough to
    // show the swapper raced the calls rather than ran before or after them.
    EXPECT_GE(raced, 20) << "only " << raced << " of " << calls
                         << " calls had a swap land while they ran (" << swaps.load()
                         << " swaps): the race never happened";
}

} // namespace

namespace
{

// A memory workspace lives in the server's own memory: it is bounded, and
// the bound is a clean RESOURCE_EXHAUSTED that loses nothing.
TEST(MemoryProvider, HoldsAtMostItsBudget)
{
    Server srv({"--memory-workspace-bytes", "1000000"});
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto w = wstest::Open(ws.get(), "memory");
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "a", std::string(600000, 'a')).ok());
    auto s = wstest::Write(fs.get(), w.id, "b", std::string(600000, 'b'));
    EXPECT_WS_ERROR(s, StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
    std::string got;
    ASSERT_TRUE(wstest::Read(fs.get(), w.id, "a", &got).ok());
    EXPECT_EQ(got.size(), 600000u);
    EXPECT_WS_ERROR(wstest::Read(fs.get(), w.id, "b", &got), StatusCode::NOT_FOUND, "NO_SUCH_FILE");
    // Another memory workspace has its own budget.
    auto w2 = wstest::Open(ws.get(), "memory");
    EXPECT_TRUE(wstest::Write(fs.get(), w2.id, "b", std::string(600000, 'b')).ok());
}

} // namespace

namespace
{

// Conditional writes make read-modify-write safe: many clients increment
// one counter with if_match; every increment that succeeded is in the
// final value, and the losers saw CONFLICT rather than clobbering.
TEST(ConcurrentWrites, IfMatchLosesNoUpdate)
{
    Server srv;
    auto ws = srv.workspaces();
    auto w = wstest::Open(ws.get(), "local-bash");
    {
        auto fs = srv.fs();
        ASSERT_TRUE(wstest::Write(fs.get(), w.id, "counter", "0").ok());
    }
    std::atomic<int> applied{0}, conflicts{0}, other{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; t++) {
        threads.emplace_back([&] {
            auto fs = srv.fs();
            for (int i = 0; i < 25; i++) {
                std::string cur;
                ClientContext ctx;
                ReadFileRequest req;
                req.set_workspace_id(w.id);
                req.set_path("counter");
                auto r = fs->ReadFile(&ctx, req);
                ReadFileResponse m;
                while (r->Read(&m))
                    cur += m.data();
                if (!r->Finish().ok()) {
                    other++;
                    continue;
                }
                // The hash of what was read is the write's precondition.
                WriteFileResponse wr;
                auto s =
                    wstest::Write(fs.get(), w.id, "counter", std::to_string(std::stoi(cur) + 1),
                                  &wr, false, wstest::Sha256Hex(cur));
                auto e = wstest::Decode(s);
                if (s.ok())
                    applied++;
                else if (e.reason == "CONFLICT")
                    conflicts++;
                else
                    other++;
            }
        });
    }
    for (auto &t : threads)
        t.join();
    auto fs = srv.fs();
    std::string final;
    ASSERT_TRUE(wstest::Read(fs.get(), w.id, "counter", &final).ok());
    EXPECT_EQ(other.load(), 0);
    EXPECT_EQ(std::stoi(final), applied.load());
    EXPECT_EQ(applied.load() + conflicts.load(), 150);
    EXPECT_GT(conflicts.load(), 0) << "the threads never raced; the test proves nothing";
}

} // namespace

namespace
{

// A listing never outgrows the message limit: with long names it is cut
// (truncated) well before max_entries instead of failing the call.
TEST(Limits, ListingIsCutAtTheResponseBudget)
{
    Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto w = wstest::Open(ws.get(), "local-bash");
    std::string dir = srv.workspace_dir(w.id);
    const int files = 20000;
    for (int i = 0; i < files; i++) {
        char num[16];
        snprintf(num, sizeof(num), "%05d-", i);
        std::string name = dir + "/" + num + std::string(240, 'n');
        int fd = open(name.c_str(), O_WRONLY | O_CREAT, 0644);
        ASSERT_GE(fd, 0);
        close(fd);
    }
    ClientContext ctx;
    ListDirRequest req;
    ListDirResponse resp;
    req.set_workspace_id(w.id);
    req.set_path(".");
    req.set_max_entries(100000);
    auto s = fs->ListDir(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(resp.truncated());
    EXPECT_GT(resp.entries_size(), 1000);
    EXPECT_LT(resp.entries_size(), files);
    EXPECT_LT(resp.ByteSizeLong(), 4u << 20);
    // The same tree through Glob.
    ClientContext c2;
    GlobRequest g;
    GlobResponse gr;
    g.set_workspace_id(w.id);
    g.set_pattern("*");
    g.set_max_results(100000);
    ASSERT_TRUE(fs->Glob(&c2, g, &gr).ok());
    EXPECT_TRUE(gr.truncated());
    EXPECT_LT(gr.matches_size(), files);
}

} // namespace
