// FileSystem.ReadArchive and WriteArchive end to end, for every provider
// with storage: round trips against GNU tar, the listing of what the
// server writes against GNU tar's own, the overwrite policies, cancelled
// and unfinished uploads, the tenant's byte quota, and the hostile-archive
// corpus (tests/corpus/archives/make.py), each case with its exact answer
// and nothing changed inside or outside the workspace.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
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

const char kImage[] = "workspaced-test:busybox";

std::string Sh(const std::string &cmd)
{
    std::string out;
    FILE *p = popen(cmd.c_str(), "r");
    if (!p)
        return out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
        out.append(buf, n);
    int st = pclose(p);
    EXPECT_EQ(st, 0) << cmd << "\n" << out;
    return out;
}

std::string Quote(const std::string &s)
{
    std::string q = "'";
    for (char c : s)
        q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// The corpus, made once per test binary.
const std::string &CorpusDir()
{
    static std::string dir = [] {
        std::string d = wstest::MakeTempDir("archives");
        Sh("python3 tests/corpus/archives/make.py " + Quote(d));
        return d;
    }();
    return dir;
}

struct Case {
    std::string file, format, code, reason;
    std::map<std::string, std::string> meta;
};

std::vector<Case> Cases()
{
    std::vector<Case> out;
    std::ifstream in(CorpusDir() + "/cases.tsv");
    std::string line;
    while (std::getline(in, line)) {
        std::vector<std::string> f;
        std::stringstream ss(line);
        std::string col;
        while (std::getline(ss, col, '\t'))
            f.push_back(col);
        while (f.size() < 5)
            f.push_back("");
        Case c{f[0], f[1], f[2], f[3], {}};
        std::stringstream ms(f[4]);
        std::string kv;
        while (std::getline(ms, kv, ';')) {
            auto eq = kv.find('=');
            if (eq != std::string::npos)
                c.meta[kv.substr(0, eq)] = kv.substr(eq + 1);
        }
        out.push_back(c);
    }
    return out;
}

StatusCode CodeOf(const std::string &name)
{
    if (name == "OK")
        return StatusCode::OK;
    if (name == "INVALID_ARGUMENT")
        return StatusCode::INVALID_ARGUMENT;
    if (name == "RESOURCE_EXHAUSTED")
        return StatusCode::RESOURCE_EXHAUSTED;
    ADD_FAILURE() << "unknown code " << name;
    return StatusCode::UNKNOWN;
}

class ArchiveTest : public ::testing::TestWithParam<std::string>
{
  protected:
    void SetUp() override
    {
        StartServer({});
    }
    void TearDown() override
    {
        if (wsstub_ && !ws_.id.empty()) {
            ClientContext ctx;
            CloseRequest req;
            CloseResponse resp;
            req.set_workspace_id(ws_.id);
            (void)wsstub_->Close(&ctx, req, &resp);
        }
    }
    void StartServer(const std::vector<std::string> &args, uint64_t max_file = 512u << 20)
    {
        srv_ = std::make_unique<Server>(args);
        wsstub_ = srv_->workspaces();
        fs_ = srv_->fs();
        if (GetParam() == "docker") {
            OpenRequest req;
            req.mutable_docker()->set_image(kImage);
            req.mutable_capabilities()->mutable_fs()->set_max_file_size_bytes(max_file);
            OpenResponse resp;
            ClientContext ctx;
            auto s = wsstub_->Open(&ctx, req, &resp);
            ASSERT_TRUE(s.ok()) << "docker Open (tests/fixtures/dockerd.sh and "
                                   "tests/fixtures/image/build.sh must have run): "
                                << s.error_message();
            ws_ = {resp.workspace().id(), resp.workspace().ref().token()};
        } else {
            ws_ = wstest::Open(wsstub_.get(), GetParam(), max_file);
        }
    }
    bool OnHost() const
    {
        return GetParam() != "memory";
    }

    grpc::Status WriteArchive(const std::string &path, const std::string &data,
                              ArchiveFormat format = ARCHIVE_FORMAT_TAR,
                              ArchiveOverwrite ow = ARCHIVE_OVERWRITE_NONE,
                              WriteArchiveResponse *resp = nullptr, bool finish = true,
                              bool require_finish = true, size_t chunk = 1 << 20)
    {
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
        WriteArchiveResponse local;
        auto w = fs_->WriteArchive(&ctx, resp ? resp : &local);
        WriteArchiveRequest h;
        h.mutable_header()->set_workspace_id(ws_.id);
        h.mutable_header()->set_path(path);
        h.mutable_header()->set_format(format);
        h.mutable_header()->set_overwrite(ow);
        h.mutable_header()->set_require_finish(require_finish);
        if (w->Write(h)) {
            for (size_t off = 0; off < data.size(); off += chunk) {
                WriteArchiveRequest d;
                d.set_data(data.substr(off, chunk));
                d.set_finish(finish && off + chunk >= data.size());
                if (!w->Write(d))
                    break;
            }
            if (data.empty() && finish) {
                WriteArchiveRequest d;
                d.set_finish(true);
                w->Write(d);
            }
        }
        w->WritesDone();
        return w->Finish();
    }
    grpc::Status ReadArchive(const std::string &path, std::string *out,
                             ArchiveFormat format = ARCHIVE_FORMAT_TAR,
                             ArchiveTrailer *trailer = nullptr,
                             const std::vector<std::string> &include = {},
                             const std::vector<std::string> &exclude = {})
    {
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
        ReadArchiveRequest req;
        req.set_workspace_id(ws_.id);
        req.set_path(path);
        req.set_format(format);
        for (const auto &g : include)
            req.add_include(g);
        for (const auto &g : exclude)
            req.add_exclude(g);
        auto r = fs_->ReadArchive(&ctx, req);
        ReadArchiveResponse m;
        out->clear();
        bool got_trailer = false;
        while (r->Read(&m)) {
            EXPECT_FALSE(got_trailer) << "a message after the trailer";
            out->append(m.data());
            if (m.has_trailer()) {
                got_trailer = true;
                if (trailer)
                    *trailer = m.trailer();
            }
        }
        auto s = r->Finish();
        if (s.ok()) {
            EXPECT_TRUE(got_trailer) << "no trailer";
        }
        return s;
    }
    // Every path in the workspace (recursive), with type and size.
    std::set<std::string> Tree()
    {
        ClientContext ctx;
        ListDirRequest req;
        ListDirResponse resp;
        req.set_workspace_id(ws_.id);
        req.set_path(".");
        req.set_depth(64);
        auto s = fs_->ListDir(&ctx, req, &resp);
        EXPECT_TRUE(s.ok()) << s.error_message();
        std::set<std::string> out;
        for (const auto &e : resp.entries())
            out.insert(e.path() + " " + std::to_string(e.type()) + " " +
                       std::to_string(e.type() == FILE_TYPE_REGULAR ? e.size() : 0));
        return out;
    }
    std::string Content(const std::string &path)
    {
        std::string out;
        EXPECT_TRUE(wstest::Read(fs_.get(), ws_.id, path, &out).ok()) << path;
        return out;
    }
    uint32_t Mode(const std::string &path)
    {
        ClientContext ctx;
        StatRequest req;
        StatResponse resp;
        req.set_workspace_id(ws_.id);
        req.set_path(path);
        auto s = fs_->Stat(&ctx, req, &resp);
        EXPECT_TRUE(s.ok()) << path << ": " << s.error_message();
        return resp.info().mode();
    }

    std::unique_ptr<Server> srv_;
    std::unique_ptr<Workspaces::Stub> wsstub_;
    std::unique_ptr<FileSystem::Stub> fs_;
    wstest::Ws ws_;
};

// The hostile corpus, globs and refusals: one run per kind of storage (the
// memory tree, a host directory of the server's user, and one owned by a
// box's user under docker); local-sandbox keeps its files in a host
// directory exactly as local-bash does.
class ArchiveCorpusTest : public ArchiveTest
{
};

// The tenant's byte quota: the same accounting for every provider on disk.
class ArchiveQuotaTest : public ArchiveTest
{
};

// A tree on the host with every kind of entry an archive carries.
std::string MakeSourceTree()
{
    std::string src = wstest::MakeTempDir("archsrc");
    Sh("set -e; cd " + Quote(src) +
       "; mkdir -p a/b/c empty deep && chmod 0750 a/b"
       "; printf 'hello\\n' > a/hello.txt; : > a/empty.txt"
       "; printf '#!/bin/sh\\necho hi\\n' > a/run.sh && chmod 0755 a/run.sh"
       "; printf 'secret' > a/b/private && chmod 0600 a/b/private"
       "; head -c 3145728 /dev/urandom > a/b/c/big.bin"
       "; ln -s ../hello.txt a/b/rel-link; ln -s /etc/passwd abs-link"
       "; printf 'linked' > a/orig && ln a/orig a/b/hard"
       "; n=$(printf 'n%.0s' $(seq 150)); printf long > \"deep/$n\""
       "; printf utf > 'h\xc3\xa9llo.txt'");
    return src;
}

// What a tree holds, for comparing two: type, mode, size, name and link
// target of every entry, then the content hash of every file.
std::string Describe(const std::string &dir)
{
    return Sh("cd " + Quote(dir) +
              " && find . -mindepth 1 -printf '%y %m %s %P %l\\n' | sort"
              " && find . -type f -print0 | sort -z | xargs -0 -r sha256sum");
}

std::string FileBytes(const std::string &path)
{
    return wstest::ReadHostFile(path);
}

TEST_P(ArchiveTest, RoundTripKeepsEveryKindOfEntry)
{
    std::string src = MakeSourceTree();
    for (auto fmt : {ARCHIVE_FORMAT_TAR, ARCHIVE_FORMAT_TAR_GZIP}) {
        SCOPED_TRACE(fmt);
        std::string tmp = wstest::MakeTempDir("archtmp");
        std::string in = tmp + "/in.tar";
        Sh("tar --format=pax -C " + Quote(src) + (fmt ? " -czf " : " -cf ") + Quote(in) + " .");
        std::string dst = fmt ? "dst-gz" : "dst";
        WriteArchiveResponse wr;
        auto s = WriteArchive(dst, FileBytes(in), fmt, ARCHIVE_OVERWRITE_NONE, &wr);
        ASSERT_TRUE(s.ok()) << s.error_message();
        EXPECT_EQ(wr.trailer().files(), 8u);
        EXPECT_EQ(wr.trailer().hardlinks(), 1u);
        EXPECT_EQ(wr.trailer().symlinks(), 2u);
        EXPECT_EQ(Content(dst + "/a/hello.txt"), "hello\n");
        EXPECT_EQ(Mode(dst + "/a/run.sh") & 07777, 0755u);
        EXPECT_EQ(Mode(dst + "/a/b") & 07777, 0750u);
        EXPECT_EQ(Mode(dst + "/a/b/private") & 07777, 0600u);

        std::string out;
        ArchiveTrailer tr;
        s = ReadArchive(dst, &out, fmt, &tr);
        ASSERT_TRUE(s.ok()) << s.error_message();
        // The hard link came in as a copy (no link reaches outside), so
        // it goes out as a file.
        EXPECT_EQ(tr.files(), 9u);
        EXPECT_EQ(tr.symlinks(), 2u);
        EXPECT_EQ(tr.skipped_size(), 0);
        std::string back = tmp + "/back";
        Sh("mkdir " + Quote(back));
        {
            std::ofstream f(tmp + "/out.tar", std::ios::binary);
            f << out;
        }
        Sh("tar -C " + Quote(back) + (fmt ? " -xzpf " : " -xpf ") + Quote(tmp + "/out.tar"));
        // Both sides have the link as two names: compare without links.
        std::string want = Describe(src), got = Describe(back);
        EXPECT_EQ(got, want);
    }
}

TEST_P(ArchiveCorpusTest, CorpusCasesGetTheirExactAnswer)
{
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "keep.txt", "kept").ok());
    std::set<std::string> before = Tree();
    auto outside_before = wstest::Snapshot(srv_->state_dir());
    for (const Case &c : Cases()) {
        SCOPED_TRACE(c.file);
        WriteArchiveResponse wr;
        auto s = WriteArchive("dst", FileBytes(CorpusDir() + "/" + c.file),
                              c.format == "tgz" ? ARCHIVE_FORMAT_TAR_GZIP : ARCHIVE_FORMAT_TAR,
                              ARCHIVE_OVERWRITE_NONE, &wr);
        StatusCode want = CodeOf(c.code);
        if (want == StatusCode::OK) {
            ASSERT_TRUE(s.ok()) << s.error_message();
            if (c.file == "setuid_stripped.tar") {
                EXPECT_EQ(Mode("dst/suid") & 07777, 0755u);
                EXPECT_EQ(Mode("dst/sgid") & 07777, 0755u);
                std::set<std::string> stripped;
                for (const auto &k : wr.trailer().skipped())
                    if (k.reason() == "setuid")
                        stripped.insert(k.path());
                EXPECT_EQ(stripped, (std::set<std::string>{"suid", "sgid"}));
            } else {
                EXPECT_EQ(Content("dst/a/b.txt"), "b");
            }
            ClientContext ctx;
            RemoveRequest rm;
            RemoveResponse rr;
            rm.set_workspace_id(ws_.id);
            rm.set_path("dst");
            rm.set_recursive(true);
            ASSERT_TRUE(fs_->Remove(&ctx, rm, &rr).ok());
        } else {
            EXPECT_WS_ERROR(s, want, c.reason);
            auto e = wstest::Decode(s);
            for (const auto &kv : c.meta)
                EXPECT_EQ(e.metadata[kv.first], kv.second) << kv.first << " " << s.error_message();
        }
        // Nothing of a refused archive stays: no target, no staging.
        EXPECT_EQ(Tree(), before);
    }
    EXPECT_FALSE(access("/tmp/evil", F_OK) == 0) << "a write escaped to /tmp/evil";
    // Outside the workspace, the state directory holds what it held (the
    // workspace's own directory aside, already compared through the API).
    auto outside = wstest::Snapshot(srv_->state_dir());
    for (auto it = outside.begin(); it != outside.end();)
        it = it->first.find("/workspaces/") != std::string::npos ? outside.erase(it) : ++it;
    for (auto it = outside_before.begin(); it != outside_before.end();)
        it = it->first.find("/workspaces/") != std::string::npos ? outside_before.erase(it) : ++it;
    EXPECT_EQ(outside.size(), outside_before.size());
}

TEST_P(ArchiveTest, OverwritePolicies)
{
    std::string tmp = wstest::MakeTempDir("archow");
    Sh("set -e; cd " + Quote(tmp) +
       "; mkdir one two; printf 1 > one/f; printf new > one/shared; mkdir one/sub;"
       " printf s > one/sub/x; printf 2 > two/sub"
       "; tar -C one -cf one.tar . && tar -C two -cf two.tar .");
    std::string one = FileBytes(tmp + "/one.tar"), two = FileBytes(tmp + "/two.tar");
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "d/old", "old", nullptr, true).ok());
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "d/shared", "was").ok());

    // NONE: an existing path is refused before anything is read.
    EXPECT_WS_ERROR(WriteArchive("d", one), StatusCode::ALREADY_EXISTS, "EXISTS");
    EXPECT_EQ(Content("d/old"), "old");
    // MERGE: the archive's names go in, the rest stays.
    ASSERT_TRUE(WriteArchive("d", one, ARCHIVE_FORMAT_TAR, ARCHIVE_OVERWRITE_MERGE).ok());
    EXPECT_EQ(Content("d/old"), "old");
    EXPECT_EQ(Content("d/shared"), "new");
    EXPECT_EQ(Content("d/sub/x"), "s");
    // MERGE of a file where the workspace has a directory: refused whole.
    auto s = WriteArchive("d", two, ARCHIVE_FORMAT_TAR, ARCHIVE_OVERWRITE_MERGE);
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "IS_DIRECTORY");
    EXPECT_EQ(Content("d/sub/x"), "s");
    // REPLACE: the new tree as a whole.
    ASSERT_TRUE(WriteArchive("d", one, ARCHIVE_FORMAT_TAR, ARCHIVE_OVERWRITE_REPLACE).ok());
    std::string ignored;
    EXPECT_WS_ERROR(wstest::Read(fs_.get(), ws_.id, "d/old", &ignored), StatusCode::NOT_FOUND,
                    "NO_SUCH_FILE");
    EXPECT_EQ(Content("d/f"), "1");
    // The root: merged into, never replaced.
    s = WriteArchive(".", two, ARCHIVE_FORMAT_TAR, ARCHIVE_OVERWRITE_MERGE);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(Content("sub"), "2");
    EXPECT_WS_ERROR(WriteArchive(".", one, ARCHIVE_FORMAT_TAR, ARCHIVE_OVERWRITE_REPLACE),
                    StatusCode::INVALID_ARGUMENT, "PATH_ESCAPE");
    for (const auto &e : Tree())
        EXPECT_EQ(e.find(".ws-"), std::string::npos) << e;
}

TEST_P(ArchiveTest, CancelledOrUnfinishedUploadsChangeNothing)
{
    std::string tmp = wstest::MakeTempDir("archcancel");
    Sh("set -e; cd " + Quote(tmp) +
       "; mkdir t; for i in 1 2 3 4 5 6 7 8; do head -c 1048576 /dev/urandom > t/f$i; done"
       "; tar -C t -cf t.tar .");
    std::string data = FileBytes(tmp + "/t.tar");
    std::set<std::string> before = Tree();

    // require_finish: a half-close without finish commits nothing.
    auto s = WriteArchive("dst", data, ARCHIVE_FORMAT_TAR, ARCHIVE_OVERWRITE_NONE, nullptr,
                          /*finish=*/false, /*require_finish=*/true);
    EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED");
    EXPECT_EQ(wstest::Decode(s).metadata["field"], "finish");

    // A cancel in the middle of the stream.
    {
        ClientContext ctx;
        WriteArchiveResponse resp;
        auto w = fs_->WriteArchive(&ctx, &resp);
        WriteArchiveRequest h;
        h.mutable_header()->set_workspace_id(ws_.id);
        h.mutable_header()->set_path("dst");
        h.mutable_header()->set_require_finish(true);
        ASSERT_TRUE(w->Write(h));
        WriteArchiveRequest d;
        d.set_data(data.substr(0, data.size() / 2));
        ASSERT_TRUE(w->Write(d));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        ctx.TryCancel();
        EXPECT_EQ(w->Finish().error_code(), StatusCode::CANCELLED);
    }
    // The extractor stops and removes its staging directory shortly after.
    std::set<std::string> now;
    for (int i = 0; i < 100; i++) {
        now = Tree();
        if (now == before)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(now, before);
    // And the same upload, finished, goes in.
    ASSERT_TRUE(WriteArchive("dst", data).ok());
    EXPECT_EQ(Content("dst/f3").size(), 1048576u);
}

TEST_P(ArchiveCorpusTest, ReadArchiveOfAFileGlobsAndRefusals)
{
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "src/a.c", "int a;", nullptr, true).ok());
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "src/b.o", "obj").ok());
    ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "src/gen/c.c", "int c;", nullptr, true).ok());
    std::string tmp = wstest::MakeTempDir("archread");
    auto list = [&](const std::string &bytes) {
        {
            std::ofstream f(tmp + "/x.tar", std::ios::binary);
            f << bytes;
        }
        return Sh("tar -tf " + Quote(tmp + "/x.tar") + " | sort");
    };
    std::string out;
    ASSERT_TRUE(ReadArchive("src/a.c", &out).ok());
    EXPECT_EQ(list(out), "a.c\n");
    ASSERT_TRUE(ReadArchive("src", &out, ARCHIVE_FORMAT_TAR, nullptr, {"**/*.c"}).ok());
    EXPECT_EQ(list(out), "a.c\ngen/c.c\n");
    ASSERT_TRUE(ReadArchive("src", &out, ARCHIVE_FORMAT_TAR, nullptr, {}, {"gen"}).ok());
    EXPECT_EQ(list(out), "a.c\nb.o\n");
    EXPECT_WS_ERROR(ReadArchive("nope", &out), StatusCode::NOT_FOUND, "NO_SUCH_FILE");
    EXPECT_WS_ERROR(ReadArchive("src", &out, ARCHIVE_FORMAT_TAR, nullptr, {"[a"}),
                    StatusCode::INVALID_ARGUMENT, "BAD_PATTERN");
    EXPECT_WS_ERROR(ReadArchive("../x", &out), StatusCode::INVALID_ARGUMENT, "PATH_ESCAPE");
    // A pattern that is a printf format is reported, never interpreted.
    EXPECT_WS_ERROR(ReadArchive("src", &out, ARCHIVE_FORMAT_TAR, nullptr, {"[%s%s%s%n%p"}),
                    StatusCode::INVALID_ARGUMENT, "BAD_PATTERN");
}

TEST_P(ArchiveQuotaTest, TenantByteQuotaRefusesTheWholeArchive)
{
    TearDown();
    StartServer({"--tenant-max-bytes", "1048576"});
    std::string tmp = wstest::MakeTempDir("archquota");
    Sh("set -e; cd " + Quote(tmp) +
       "; mkdir t; head -c 700000 /dev/urandom > t/a; head -c 700000 /dev/urandom > t/b"
       "; tar -C t -cf t.tar .");
    std::set<std::string> before = Tree();
    auto s = WriteArchive("dst", FileBytes(tmp + "/t.tar"));
    EXPECT_WS_ERROR(s, StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
    EXPECT_EQ(Tree(), before);
}

std::string ParamName(const ::testing::TestParamInfo<std::string> &p)
{
    std::string n = p.param;
    for (auto &c : n)
        if (c == '-')
            c = '_';
    return n;
}

INSTANTIATE_TEST_SUITE_P(Providers, ArchiveTest,
                         ::testing::Values("memory", "local-bash", "local-sandbox", "docker"),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(Storages, ArchiveCorpusTest,
                         ::testing::Values("memory", "local-bash", "docker"), ParamName);
INSTANTIATE_TEST_SUITE_P(Storages, ArchiveQuotaTest, ::testing::Values("memory", "local-bash"),
                         ParamName);

// The listing of what the server writes is GNU tar's own for the same tree
// (names, types, modes, owners, sizes, times, link targets, hard links),
// and what it cannot store is named in the trailer, never followed.
TEST(ArchiveListing, MatchesGnuTar)
{
    Server srv;
    auto wsstub = srv.workspaces();
    auto fs = srv.fs();
    wstest::Ws ws = wstest::Open(wsstub.get(), "local-bash");
    std::string dir = srv.workspace_dir(ws.id);
    Sh("set -e; cd " + Quote(dir) +
       "; mkdir -p src/lib docs && printf 'x' > src/lib/a.c && printf 'yy' > src/main.c"
       "; chmod 0750 src/lib; printf 'doc' > docs/README && ln docs/README docs/HARDLINK"
       "; ln -s / root-link; ln -s ../src docs/src-link; mkfifo pipe"
       "; touch -d '2024-01-02 03:04:05' src/main.c"
       // The server's own work in progress is left out; a look-alike
       // name is the user's and goes in.
       "; mkdir -p .ws-stage-0123456789abcdef/sub && echo half > .ws-stage-0123456789abcdef/sub/f"
       "; echo tmp > src/.ws-tmp-00000000deadbeef; mkdir .ws-stage-mine && echo m > "
       ".ws-stage-mine/f");
    std::string out;
    ArchiveTrailer tr;
    {
        ClientContext ctx;
        ReadArchiveRequest req;
        req.set_workspace_id(ws.id);
        req.set_path(".");
        auto r = fs->ReadArchive(&ctx, req);
        ReadArchiveResponse m;
        while (r->Read(&m)) {
            out.append(m.data());
            if (m.has_trailer())
                tr = m.trailer();
        }
        ASSERT_TRUE(r->Finish().ok());
    }
    std::string tmp = wstest::MakeTempDir("archlist");
    {
        std::ofstream f(tmp + "/ours.tar", std::ios::binary);
        f << out;
    }
    Sh("cd " + Quote(dir) +
       " && tar --sort=name --format=pax --owner=0 --group=0 "
       "--numeric-owner -cf " +
       Quote(tmp + "/ref.tar") + " --exclude=.ws-tmp-00000000deadbeef .ws-stage-mine docs " +
       "root-link src");
    std::string ours = Sh("tar -tvf " + Quote(tmp + "/ours.tar"));
    std::string ref = Sh("tar -tvf " + Quote(tmp + "/ref.tar"));
    EXPECT_EQ(ours, ref);
    EXPECT_EQ(tr.hardlinks(), 1u);
    EXPECT_EQ(tr.symlinks(), 2u);
    ASSERT_EQ(tr.skipped_size(), 1);
    EXPECT_EQ(tr.skipped(0).path(), "pipe");
    EXPECT_EQ(tr.skipped(0).reason(), "special");
}

// A memory workspace under the tenant memory quota goes through the
// quota's wrapper: symlinks, modes and times reach the tree, and the
// symlink counts against the quota.
TEST(ArchiveMemoryQuota, TreesPassTheQuotaWrapper)
{
    Server srv({"--tenant-memory-bytes", "67108864"});
    auto wsstub = srv.workspaces();
    auto fs = srv.fs();
    wstest::Ws ws = wstest::Open(wsstub.get(), "memory");
    std::string tmp = wstest::MakeTempDir("archmq");
    Sh("set -e; cd " + Quote(tmp) +
       "; mkdir t; printf x > t/f; chmod 0600 t/f; ln -s f t/l"
       "; tar -C t -cf t.tar .");
    ClientContext ctx;
    WriteArchiveResponse resp;
    auto w = fs->WriteArchive(&ctx, &resp);
    WriteArchiveRequest h;
    h.mutable_header()->set_workspace_id(ws.id);
    h.mutable_header()->set_path("dst");
    ASSERT_TRUE(w->Write(h));
    WriteArchiveRequest d;
    d.set_data(FileBytes(tmp + "/t.tar"));
    d.set_finish(true);
    ASSERT_TRUE(w->Write(d));
    w->WritesDone();
    auto s = w->Finish();
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.trailer().symlinks(), 1u);
    ClientContext sctx;
    StatRequest sreq;
    StatResponse sresp;
    sreq.set_workspace_id(ws.id);
    sreq.set_path("dst/l");
    ASSERT_TRUE(fs->Stat(&sctx, sreq, &sresp).ok());
    EXPECT_EQ(sresp.info().type(), FILE_TYPE_SYMLINK);
    ClientContext mctx;
    sreq.set_path("dst/f");
    ASSERT_TRUE(fs->Stat(&mctx, sreq, &sresp).ok());
    EXPECT_EQ(sresp.info().mode() & 0777, 0600u);
}

} // namespace
