// Tests for server/posix/fs.c, the confined host file system.
//
// Every test works in a fresh temp directory holding the workspace root
// `ws/` and a sibling `outside/` that the workspace must never touch: after
// each operation the outside tree's signature (names, types, modes, sizes,
// contents, mtimes, symlink targets) must be unchanged and no new entry may
// appear next to `ws/`. Hostile paths are data: tests/corpus/paths/*.case
// (format in tests/corpus/paths/README.md; parser and fixture in
// tests/corpus/corpus.h).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/base/errors.h"
#include "server/posix/fs.h"
#include "server/vfs/vfs.h"
}

#include "tests/corpus/corpus.h"

namespace fs = std::filesystem;

namespace
{

// The corpus format, its fixture and the host-side checks: tests/corpus.
using wscorpus::CaseName;
using wscorpus::CorpusCase;
using wscorpus::CorpusDir;
using wscorpus::CorpusFiles;
using wscorpus::ListNames;
using wscorpus::Ops;
using wscorpus::ParseCase;
using wscorpus::ReadAll;
using wscorpus::TempFiles;
using wscorpus::TreeSignature;

// Every test must finish well inside this; a blocking open on a FIFO would
// otherwise hang until Bazel's timeout. SIGALRM's default action kills us.
constexpr unsigned kWatchdogSeconds = 45;

// The errno value of each result name a case may give (wscorpus::ResultNames()).
const std::map<std::string, int> &ErrorNames()
{
    static const std::map<std::string, int> names = {
        {"OK", 0},
        {"ENOENT", -ENOENT},
        {"EXDEV", -EXDEV},
        {"ELOOP", -ELOOP},
        {"ENOTDIR", -ENOTDIR},
        {"EISDIR", -EISDIR},
        {"EEXIST", -EEXIST},
        {"ENOTEMPTY", -ENOTEMPTY},
        {"ENAMETOOLONG", -ENAMETOOLONG},
        {"EINVAL", -EINVAL},
        {"EBUSY", -EBUSY},
        {"EFBIG", -EFBIG},
        {"EAGAIN", -EAGAIN},
        {"ESTALE", -ESTALE},
        {"WS_ESYMLINK_LEAF", -WS_ESYMLINK_LEAF},
        {"WS_ESPECIAL", -WS_ESPECIAL},
        {"WS_EHARDLINK", -WS_EHARDLINK},
        {"WS_EBADPATH", -WS_EBADPATH},
        {"WS_ELIMIT", -WS_ELIMIT},
    };
    return names;
}

std::string ErrName(long r)
{
    for (const auto &[name, value] : ErrorNames())
        if (value == r)
            return name;
    return "errno " + std::to_string(-r) + " (" + strerror((int)-r) + ")";
}

void WriteAll(const std::string &path, const std::string &content, mode_t mode = 0644)
{
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    ASSERT_GE(fd, 0) << path << ": " << strerror(errno);
    ASSERT_EQ(write(fd, content.data(), content.size()), (ssize_t)content.size());
    ASSERT_EQ(fchmod(fd, mode), 0);
    close(fd);
}

std::string TestTmp()
{
    const char *t = getenv("TEST_TMPDIR");
    return t && *t ? t : "/tmp";
}

// The standard tree the corpus is written against (see the corpus README).
struct Sandbox {
    std::string base, ws, outside;
    bool have_chardev = false;
    struct ws_vfs *vfs = nullptr;

    explicit Sandbox(unsigned flags = 0)
    {
        std::string tmpl = TestTmp() + "/posixfs.XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        if (!mkdtemp(buf.data()))
            abort();
        base = buf.data();
        ws = base + "/ws";
        outside = base + "/outside";
        have_chardev = wscorpus::BuildFixture(ws, outside);
        int r = ws_posixfs_open_with(AT_FDCWD, ws.c_str(), flags, &vfs);
        if (r != 0) {
            fprintf(stderr, "ws_posixfs_open: %d\n", r);
            abort();
        }
    }

    ~Sandbox()
    {
        if (vfs)
            vfs->ops->destroy(vfs);
        std::error_code ec;
        fs::remove_all(base, ec);
    }

    std::string Read(const std::string &rel)
    {
        return ReadAll(ws + "/" + rel);
    }
};

class PosixFs : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        alarm(kWatchdogSeconds);
        sb_ = std::make_unique<Sandbox>();
        vfs_ = sb_->vfs;
        ops_ = vfs_->ops;
        outside_sig_ = TreeSignature(sb_->outside);
        base_names_ = ListNames(sb_->base);
    }

    void TearDown() override
    {
        EXPECT_EQ(TreeSignature(sb_->outside), outside_sig_) << "the outside tree changed";
        EXPECT_EQ(ListNames(sb_->base), base_names_) << "something appeared next to ws/";
        EXPECT_TRUE(TempFiles(sb_->ws).empty()) << TempFiles(sb_->ws)[0];
        sb_.reset();
        alarm(0);
    }

    int Write(const std::string &path, const std::string &data, struct ws_write_opts o = {},
              struct ws_stat *st = nullptr)
    {
        struct ws_vfs_writer *w = nullptr;
        int r = ops_->write_begin(vfs_, path.c_str(), &o, &w);
        if (r < 0)
            return r;
        r = ops_->write(w, data.data(), data.size());
        if (r < 0) {
            ops_->write_abort(w);
            return r;
        }
        struct ws_stat dummy;
        return ops_->write_commit(w, st ? st : &dummy);
    }

    // Reads a whole file through the vfs; returns the error or 0.
    int Read(const std::string &path, std::string *out)
    {
        struct ws_vfs_file *f = nullptr;
        struct ws_stat st;
        int r = ops_->open_read(vfs_, path.c_str(), &f, &st);
        if (r < 0)
            return r;
        out->clear();
        char buf[4096];
        ssize_t n;
        while ((n = ops_->pread(f, buf, sizeof(buf), out->size())) > 0)
            out->append(buf, (size_t)n);
        ops_->close(f);
        return n < 0 ? (int)n : 0;
    }

    std::unique_ptr<Sandbox> sb_;
    struct ws_vfs *vfs_ = nullptr;
    const struct ws_vfs_ops *ops_ = nullptr;
    std::string outside_sig_;
    std::set<std::string> base_names_;
};

// ---- the corpus ----

int RunOp(struct ws_vfs *vfs, const std::string &op, const std::string &path)
{
    const struct ws_vfs_ops *o = vfs->ops;
    const char *p = path.c_str();
    if (op == "stat") {
        struct ws_stat st;
        return o->stat(vfs, p, &st);
    }
    if (op == "open_read") {
        struct ws_vfs_file *f;
        struct ws_stat st;
        int r = o->open_read(vfs, p, &f, &st);
        if (r == 0) {
            char buf[64];
            ssize_t n = o->pread(f, buf, sizeof(buf), 0);
            o->close(f);
            if (n < 0)
                return (int)n;
        }
        return r;
    }
    if (op == "opendir") {
        struct ws_vfs_dir *d;
        int r = o->opendir(vfs, p, &d);
        if (r == 0) {
            struct ws_dirent e;
            while ((r = o->readdir(d, &e)) > 0) {
            }
            o->closedir(d);
        }
        return r;
    }
    if (op == "write" || op == "write_p") {
        struct ws_write_opts opts = {};
        opts.create_parents = op == "write_p";
        struct ws_vfs_writer *w;
        int r = o->write_begin(vfs, p, &opts, &w);
        if (r < 0)
            return r;
        r = o->write(w, "data", 4);
        if (r < 0) {
            o->write_abort(w);
            return r;
        }
        struct ws_stat st;
        return o->write_commit(w, &st);
    }
    if (op == "mkdir" || op == "mkdir_p")
        return o->mkdir(vfs, p, op == "mkdir_p", 0755);
    if (op == "remove" || op == "remove_r") {
        uint64_t n;
        return o->remove(vfs, p, op == "remove_r", &n);
    }
    if (op == "move_from")
        return o->move(vfs, p, "moved_here", false);
    if (op == "move_to")
        return o->move(vfs, "file", p, false);
    return -1000;
}

class Corpus : public ::testing::TestWithParam<std::string>
{
};

TEST(CorpusFiles, Present)
{
    EXPECT_GE(CorpusFiles().size(), 40u) << "corpus not found in " << CorpusDir();
}

TEST_P(Corpus, Case)
{
    alarm(kWatchdogSeconds);
    CorpusCase c;
    std::string err;
    ASSERT_TRUE(ParseCase(GetParam(), &c, &err)) << GetParam() << ": " << err;

    // One tree per case, rebuilt whenever an operation changed it.
    std::unique_ptr<Sandbox> sb;
    std::string outside_sig, ws_sig;
    std::set<std::string> base_names;
    for (const auto &[op, want] : c.expect) {
        if (!sb) {
            sb = std::make_unique<Sandbox>();
            if (c.requires_.count("chardev") && !sb->have_chardev) {
                // As root (how the suite runs) the device must be made: a
                // missing case is a failure, not a skip.
                if (geteuid() == 0)
                    FAIL() << "cannot mknod a device node as root";
                GTEST_SKIP() << "cannot mknod here (not root)";
            }
            outside_sig = TreeSignature(sb->outside);
            ws_sig = TreeSignature(sb->ws);
            base_names = ListNames(sb->base);
        }

        int r = RunOp(sb->vfs, op, c.path);
        std::string what = GetParam() + ": " + op + "(\"" + c.path.substr(0, 80) + "\")";
        EXPECT_EQ(ErrName(r), want) << what;
        EXPECT_EQ(TreeSignature(sb->outside), outside_sig) << what;
        EXPECT_EQ(ListNames(sb->base), base_names) << what;
        EXPECT_TRUE(TempFiles(sb->ws).empty()) << what;
        if (TreeSignature(sb->ws) != ws_sig) {
            // A refused operation changes nothing; only mkdir -p and
            // create_parents may leave directories made before the failure.
            EXPECT_TRUE(r == 0 || op == "mkdir_p" || op == "write_p")
                << what << " failed but changed the workspace";
            sb.reset();
        }
    }
    alarm(0);
}

INSTANTIATE_TEST_SUITE_P(Paths, Corpus, ::testing::ValuesIn(CorpusFiles()), CaseName);

// ---- reading ----

TEST_F(PosixFs, StatFields)
{
    ASSERT_EQ(chmod((sb_->ws + "/file").c_str(), 02640), 0);
    struct ws_stat st;
    ASSERT_EQ(ops_->stat(vfs_, "file", &st), 0);
    EXPECT_EQ(st.type, WS_FT_REGULAR);
    EXPECT_EQ(st.size, 5u);
    EXPECT_EQ(st.mode, 02640u);
    EXPECT_EQ(st.nlink, 1u);
    struct stat host;
    ASSERT_EQ(lstat((sb_->ws + "/file").c_str(), &host), 0);
    EXPECT_EQ(st.mtime_ns, (int64_t)host.st_mtim.tv_sec * 1000000000 + host.st_mtim.tv_nsec);

    ASSERT_EQ(ops_->stat(vfs_, "abs_out", &st), 0);
    EXPECT_EQ(st.type, WS_FT_SYMLINK);
    ASSERT_EQ(ops_->stat(vfs_, "dir", &st), 0);
    EXPECT_EQ(st.type, WS_FT_DIRECTORY);
    ASSERT_EQ(ops_->stat(vfs_, "fifo", &st), 0);
    EXPECT_EQ(st.type, WS_FT_OTHER);
    ASSERT_EQ(ops_->stat(vfs_, "hardlink_out", &st), 0);
    EXPECT_EQ(st.nlink, 2u);
    ASSERT_EQ(ops_->stat(vfs_, ".", &st), 0);
    EXPECT_EQ(st.type, WS_FT_DIRECTORY);
}

TEST_F(PosixFs, OpenReadAndPread)
{
    struct ws_vfs_file *f;
    struct ws_stat st;
    ASSERT_EQ(ops_->open_read(vfs_, "dir/nested", &f, &st), 0);
    EXPECT_EQ(st.size, 6u);
    char buf[16];
    EXPECT_EQ(ops_->pread(f, buf, sizeof(buf), 2), 4);
    EXPECT_EQ(std::string(buf, 4), "sted");
    EXPECT_EQ(ops_->pread(f, buf, sizeof(buf), 6), 0);
    EXPECT_EQ(ops_->pread(f, buf, sizeof(buf), UINT64_MAX), -EINVAL);
    ops_->close(f);
    ops_->close(nullptr);

    std::string s;
    EXPECT_EQ(Read("in_dir/nested", &s), 0) << "a symlink in the middle that stays inside";
    EXPECT_EQ(s, "nested");
    EXPECT_EQ(Read("dir/up/file", &s), 0);
    EXPECT_EQ(s, "hello");
}

TEST_F(PosixFs, SpecialFilesNeverBlock)
{
    // A FIFO with no writer would block an O_RDONLY open forever, one
    // with a writer but no data would block the read: neither may happen.
    auto start = std::chrono::steady_clock::now();
    struct ws_vfs_file *f = nullptr;
    struct ws_stat st;
    struct ws_vfs_writer *w = nullptr;
    struct ws_write_opts o = {};
    for (const char *p : {"fifo", "sock"}) {
        EXPECT_EQ(ops_->open_read(vfs_, p, &f, &st), -WS_ESPECIAL) << p;
        EXPECT_EQ(ops_->write_begin(vfs_, p, &o, &w), -WS_ESPECIAL) << p;
        struct ws_vfs_dir *d = nullptr;
        EXPECT_EQ(ops_->opendir(vfs_, p, &d), -ENOTDIR) << p;
    }
    if (sb_->have_chardev) {
        EXPECT_EQ(ops_->open_read(vfs_, "chardev", &f, &st), -WS_ESPECIAL);
        EXPECT_EQ(ops_->write_begin(vfs_, "chardev", &o, &w), -WS_ESPECIAL);
    }
    struct ws_vfs_dir *root;
    ASSERT_EQ(ops_->opendir(vfs_, ".", &root), 0);
    EXPECT_EQ(ops_->open_read_at(root, "fifo", &f, &st), -WS_ESPECIAL);
    EXPECT_EQ(ops_->open_read_at(root, "sock", &f, &st), -WS_ESPECIAL);
    ops_->closedir(root);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST_F(PosixFs, DirectoryHandles)
{
    struct ws_vfs_dir *d;
    ASSERT_EQ(ops_->opendir(vfs_, ".", &d), 0);
    std::map<std::string, ws_ftype> seen;
    struct ws_dirent e;
    int r;
    while ((r = ops_->readdir(d, &e)) == 1) {
        EXPECT_EQ(e.name_len, strlen(e.name));
        seen[e.name] = e.type;
    }
    EXPECT_EQ(r, 0);
    EXPECT_EQ(seen.count("."), 0u);
    EXPECT_EQ(seen.count(".."), 0u);
    EXPECT_EQ(seen["file"], WS_FT_REGULAR);
    EXPECT_EQ(seen["dir"], WS_FT_DIRECTORY);
    EXPECT_EQ(seen["abs_out"], WS_FT_SYMLINK);
    EXPECT_EQ(seen["fifo"], WS_FT_OTHER);
    EXPECT_EQ(seen["sock"], WS_FT_OTHER);

    struct ws_vfs_dir *sub;
    ASSERT_EQ(ops_->opendir_at(d, "dir", &sub), 0);
    struct ws_stat st;
    EXPECT_EQ(ops_->stat_at(sub, "nested", &st), 0);
    EXPECT_EQ(st.size, 6u);
    EXPECT_EQ(ops_->stat_at(sub, "up", &st), 0);
    EXPECT_EQ(st.type, WS_FT_SYMLINK);
    struct ws_vfs_dir *x = nullptr;
    EXPECT_EQ(ops_->opendir_at(sub, "up", &x), -ENOTDIR) << "a symlink child is never followed";
    EXPECT_EQ(ops_->opendir_at(sub, "upup", &x), -ENOTDIR);
    EXPECT_EQ(ops_->opendir_at(sub, "nested", &x), -ENOTDIR);
    EXPECT_EQ(ops_->opendir_at(sub, "missing", &x), -ENOENT);
    struct ws_vfs_file *f = nullptr;
    EXPECT_EQ(ops_->open_read_at(sub, "nested", &f, &st), 0);
    ops_->close(f);
    f = nullptr;
    EXPECT_EQ(ops_->open_read_at(sub, "up", &f, &st), -WS_ESYMLINK_LEAF);
    EXPECT_EQ(ops_->open_read_at(sub, "sub", &f, &st), -EISDIR);
    ops_->closedir(sub);

    // Names are single components: anything else is an escape attempt.
    for (const char *bad : {"..", ".", "dir/nested", "../outside", "/etc", "abs_out/canary"}) {
        EXPECT_EQ(ops_->opendir_at(d, bad, &x), -EXDEV) << bad;
        EXPECT_EQ(ops_->stat_at(d, bad, &st), -EXDEV) << bad;
        EXPECT_EQ(ops_->open_read_at(d, bad, &f, &st), -EXDEV) << bad;
    }
    EXPECT_EQ(ops_->stat_at(d, "", &st), -WS_EBADPATH);
    EXPECT_EQ(ops_->opendir_at(d, "abs_out", &x), -ENOTDIR);
    EXPECT_EQ(ops_->open_read_at(d, "abs_out_file", &f, &st), -WS_ESYMLINK_LEAF);
    EXPECT_EQ(ops_->open_read_at(d, "hardlink_out", &f, &st), 0);
    ops_->close(f);
    EXPECT_EQ(ops_->open_read_at(d, std::string(256, 'a').c_str(), &f, &st), -ENAMETOOLONG);
    ops_->closedir(d);
    ops_->closedir(nullptr);
}

TEST_F(PosixFs, DirHandleSurvivesSwapOfChild)
{
    // The handle pins the directory: replacing its name with a symlink to
    // the outside afterwards changes nothing for the handle's lookups.
    struct ws_vfs_dir *d;
    ASSERT_EQ(ops_->opendir(vfs_, "dir", &d), 0);
    ASSERT_EQ(rename((sb_->ws + "/dir").c_str(), (sb_->ws + "/dir_moved").c_str()), 0);
    ASSERT_EQ(symlink(sb_->outside.c_str(), (sb_->ws + "/dir").c_str()), 0);
    struct ws_stat st;
    EXPECT_EQ(ops_->stat_at(d, "nested", &st), 0);
    EXPECT_EQ(ops_->stat_at(d, "canary", &st), -ENOENT);
    ops_->closedir(d);
    struct ws_vfs_dir *x = nullptr;
    EXPECT_EQ(ops_->opendir(vfs_, "dir", &x), -WS_ESYMLINK_LEAF);
    EXPECT_EQ(ops_->opendir(vfs_, "dir/sub", &x), -EXDEV);
}

// ---- writing ----

TEST_F(PosixFs, CommitReplacesAtomically)
{
    struct ws_stat st;
    ASSERT_EQ(Write("file", "new content", {}, &st), 0);
    EXPECT_EQ(sb_->Read("file"), "new content");
    EXPECT_EQ(st.size, 11u);
    EXPECT_EQ(st.type, WS_FT_REGULAR);
    EXPECT_EQ(st.nlink, 1u);

    ASSERT_EQ(Write("brand_new", "x"), 0);
    EXPECT_EQ(sb_->Read("brand_new"), "x");
}

TEST_F(PosixFs, NothingVisibleBeforeCommitAndAbortKeepsOld)
{
    struct ws_vfs_writer *w;
    struct ws_write_opts o = {};
    ASSERT_EQ(ops_->write_begin(vfs_, "file", &o, &w), 0);
    ASSERT_EQ(ops_->write(w, "replacement", 11), 0);
    EXPECT_EQ(sb_->Read("file"), "hello");
    std::set<std::string> during = ListNames(sb_->ws);
    ops_->write_abort(w);
    EXPECT_EQ(sb_->Read("file"), "hello");
    EXPECT_EQ(ListNames(sb_->ws), during);
    ops_->write_abort(nullptr);

    ASSERT_EQ(ops_->write_begin(vfs_, "not_yet", &o, &w), 0);
    ASSERT_EQ(ops_->write(w, "abc", 3), 0);
    struct ws_stat st;
    EXPECT_EQ(ops_->stat(vfs_, "not_yet", &st), -ENOENT);
    ops_->write_abort(w);
    EXPECT_EQ(ops_->stat(vfs_, "not_yet", &st), -ENOENT);
}

TEST_F(PosixFs, MaxSize)
{
    struct ws_vfs_writer *w;
    struct ws_write_opts o = {};
    o.max_size = 8;
    ASSERT_EQ(ops_->write_begin(vfs_, "file", &o, &w), 0);
    EXPECT_EQ(ops_->write(w, "12345678", 8), 0) << "exactly the cap is fine";
    EXPECT_EQ(ops_->write(w, "9", 1), -EFBIG);
    EXPECT_EQ(ops_->write(w, "", 0), -EFBIG) << "errors are sticky";
    struct ws_stat st;
    EXPECT_EQ(ops_->write_commit(w, &st), -EFBIG);
    EXPECT_EQ(sb_->Read("file"), "hello");

    ASSERT_EQ(ops_->write_begin(vfs_, "file", &o, &w), 0);
    EXPECT_EQ(ops_->write(w, "123456789", 9), -EFBIG);
    ops_->write_abort(w);
    EXPECT_EQ(sb_->Read("file"), "hello");
}

TEST_F(PosixFs, Modes)
{
    struct ws_stat st;
    ASSERT_EQ(chmod((sb_->ws + "/file").c_str(), 0600), 0);
    ASSERT_EQ(Write("file", "a"), 0);
    ASSERT_EQ(ops_->stat(vfs_, "file", &st), 0);
    EXPECT_EQ(st.mode, 0600u) << "an existing file's mode is kept";

    ws_write_opts o = {};
    o.mode = 0640;
    ASSERT_EQ(Write("file", "b", o), 0);
    ASSERT_EQ(ops_->stat(vfs_, "file", &st), 0);
    EXPECT_EQ(st.mode, 0640u);

    o.mode = 04777;
    ASSERT_EQ(Write("file", "c", o), 0);
    ASSERT_EQ(ops_->stat(vfs_, "file", &st), 0);
    EXPECT_EQ(st.mode, 0777u) << "set-id bits are never set";

    ASSERT_EQ(chmod((sb_->ws + "/file").c_str(), 06755), 0);
    ASSERT_EQ(Write("file", "d"), 0);
    ASSERT_EQ(ops_->stat(vfs_, "file", &st), 0);
    EXPECT_EQ(st.mode, 0755u);

    mode_t old = umask(077);
    ASSERT_EQ(Write("fresh", "e"), 0);
    umask(old);
    ASSERT_EQ(ops_->stat(vfs_, "fresh", &st), 0);
    EXPECT_EQ(st.mode, 0644u) << "new files are 0644 whatever the umask";
}

// opts.fresh (a staging directory's new files): made in place, never over
// anything, never through a symlink, and gone again when aborted.
TEST_F(PosixFs, FreshWritesInPlace)
{
    ws_write_opts o = {};
    o.fresh = true;
    o.mode = 0640;
    struct ws_vfs_writer *w;
    struct ws_stat st;
    EXPECT_EQ(ops_->write_begin(vfs_, "file", &o, &w), -EEXIST);
    EXPECT_EQ(sb_->Read("file"), "hello");
    ASSERT_EQ(symlink("/etc/passwd", (sb_->ws + "/link").c_str()), 0);
    EXPECT_EQ(ops_->write_begin(vfs_, "link", &o, &w), -EEXIST);

    ASSERT_EQ(ops_->write_begin(vfs_, "new", &o, &w), 0);
    ASSERT_EQ(ops_->write(w, "abc", 3), 0);
    EXPECT_EQ(ops_->stat(vfs_, "new", &st), 0) << "in place: seen at once";
    ops_->write_abort(w);
    EXPECT_EQ(ops_->stat(vfs_, "new", &st), -ENOENT) << "abort removes it";

    ASSERT_EQ(Write("new", "made", o, &st), 0);
    EXPECT_EQ(sb_->Read("new"), "made");
    EXPECT_EQ(st.size, 4u);
    EXPECT_EQ(st.mode, 0640u);

    o.max_size = 2;
    ASSERT_EQ(ops_->write_begin(vfs_, "big", &o, &w), 0);
    EXPECT_EQ(ops_->write(w, "abc", 3), -EFBIG);
    EXPECT_EQ(ops_->write_commit(w, &st), -EFBIG);
    EXPECT_EQ(ops_->stat(vfs_, "big", &st), -ENOENT) << "a failed write removes it";
}

TEST_F(PosixFs, IfAbsent)
{
    ws_write_opts o = {};
    o.if_absent = true;
    struct ws_vfs_writer *w;
    EXPECT_EQ(ops_->write_begin(vfs_, "file", &o, &w), -EEXIST);

    ASSERT_EQ(ops_->write_begin(vfs_, "late", &o, &w), 0);
    ASSERT_EQ(ops_->write(w, "mine", 4), 0);
    WriteAll(sb_->ws + "/late", "theirs");
    struct ws_stat st;
    EXPECT_EQ(ops_->write_commit(w, &st), -EEXIST);
    EXPECT_EQ(sb_->Read("late"), "theirs");

    ASSERT_EQ(Write("absent", "ok", o), 0);
    EXPECT_EQ(sb_->Read("absent"), "ok");
}

TEST_F(PosixFs, CommitRepeatsLeafChecks)
{
    struct ws_write_opts o = {};
    struct ws_vfs_writer *w;
    struct ws_stat st;
    std::string f = sb_->ws + "/file";

    // Swapped for a symlink to the outside between begin and commit.
    ASSERT_EQ(ops_->write_begin(vfs_, "file", &o, &w), 0);
    ASSERT_EQ(ops_->write(w, "evil", 4), 0);
    ASSERT_EQ(unlink(f.c_str()), 0);
    ASSERT_EQ(symlink((sb_->outside + "/canary").c_str(), f.c_str()), 0);
    EXPECT_EQ(ops_->write_commit(w, &st), -WS_ESYMLINK_LEAF);
    ASSERT_EQ(unlink(f.c_str()), 0);

    // Hard-linked to the outside meanwhile.
    ASSERT_EQ(ops_->write_begin(vfs_, "file", &o, &w), 0);
    ASSERT_EQ(link((sb_->outside + "/canary").c_str(), f.c_str()), 0);
    EXPECT_EQ(ops_->write_commit(w, &st), -WS_EHARDLINK);
    ASSERT_EQ(unlink(f.c_str()), 0);

    // Turned into a directory / a FIFO.
    ASSERT_EQ(ops_->write_begin(vfs_, "file", &o, &w), 0);
    ASSERT_EQ(mkdir(f.c_str(), 0755), 0);
    EXPECT_EQ(ops_->write_commit(w, &st), -EISDIR);
    ASSERT_EQ(rmdir(f.c_str()), 0);
    ASSERT_EQ(ops_->write_begin(vfs_, "file", &o, &w), 0);
    ASSERT_EQ(mkfifo(f.c_str(), 0644), 0);
    EXPECT_EQ(ops_->write_commit(w, &st), -WS_ESPECIAL);
}

TEST_F(PosixFs, HardLinkToOutsideRefused)
{
    EXPECT_EQ(Write("hardlink_out", "pwned"), -WS_EHARDLINK);
    EXPECT_EQ(ReadAll(sb_->outside + "/canary"), "canary\n");
    EXPECT_EQ(Write("pair_a", "x"), -WS_EHARDLINK) << "any st_nlink > 1";
    std::string s;
    EXPECT_EQ(Read("hardlink_out", &s), 0) << "reading it is reading workspace content";
}

TEST_F(PosixFs, CreateParents)
{
    ws_write_opts o = {};
    o.create_parents = true;
    ASSERT_EQ(Write("a/b/c/file", "deep", o), 0);
    EXPECT_EQ(sb_->Read("a/b/c/file"), "deep");
    struct ws_stat st;
    ASSERT_EQ(ops_->stat(vfs_, "a/b", &st), 0);
    EXPECT_EQ(st.mode, 0755u);
    ASSERT_EQ(Write("in_dir/x/y", "through an inside symlink", o), 0);
    EXPECT_EQ(sb_->Read("dir/x/y"), "through an inside symlink");
    ASSERT_EQ(Write("a/../a2/./f", "dots", o), 0);
    EXPECT_EQ(sb_->Read("a2/f"), "dots");

    EXPECT_EQ(Write("abs_out/x/y", "no", o), -EXDEV);
    EXPECT_EQ(Write("rel_out/x/y", "no", o), -EXDEV);
    EXPECT_EQ(Write("dir/upup/outside/x", "no", o), -EXDEV);
    EXPECT_EQ(Write("new/../../outside/x", "no", o), -EXDEV);
    // Like mkdir -p, directories made before the failing component stay
    // (here ws/new): they are inside the workspace.
    EXPECT_EQ(Write("dangling/x", "no", o), -ENOTDIR);
    EXPECT_EQ(Write("file/x", "no", o), -ENOTDIR);
    EXPECT_EQ(Write("fifo/x", "no", o), -ENOTDIR);
    EXPECT_EQ(Write("no_parents/x", "no"), -ENOENT);
}

TEST_F(PosixFs, NamedTempFallback)
{
    struct ws_vfs *v;
    ASSERT_EQ(ws_posixfs_open_with(AT_FDCWD, sb_->ws.c_str(), WS_POSIXFS_NO_TMPFILE, &v), 0);
    struct ws_vfs_writer *w;
    struct ws_write_opts o = {};
    ASSERT_EQ(v->ops->write_begin(v, "file", &o, &w), 0);
    ASSERT_EQ(v->ops->write(w, "fallback", 8), 0);
    EXPECT_EQ(TempFiles(sb_->ws).size(), 1u) << "the fallback temp file has a hidden name";
    struct ws_stat st;
    ASSERT_EQ(v->ops->write_commit(w, &st), 0);
    EXPECT_EQ(sb_->Read("file"), "fallback");
    EXPECT_TRUE(TempFiles(sb_->ws).empty());

    ASSERT_EQ(v->ops->write_begin(v, "file", &o, &w), 0);
    ASSERT_EQ(v->ops->write(w, "aborted", 7), 0);
    v->ops->write_abort(w);
    EXPECT_EQ(sb_->Read("file"), "fallback");
    EXPECT_TRUE(TempFiles(sb_->ws).empty());

    o.max_size = 2;
    ASSERT_EQ(v->ops->write_begin(v, "file", &o, &w), 0);
    EXPECT_EQ(v->ops->write(w, "too long", 8), -EFBIG);
    EXPECT_EQ(v->ops->write_commit(w, &st), -EFBIG);
    EXPECT_EQ(sb_->Read("file"), "fallback");
    v->ops->destroy(v);
}

// ---- mkdir, remove, move ----

TEST_F(PosixFs, Mkdir)
{
    struct ws_stat st;
    EXPECT_EQ(ops_->mkdir(vfs_, "m", false, 0700), 0);
    ASSERT_EQ(ops_->stat(vfs_, "m", &st), 0);
    EXPECT_EQ(st.type, WS_FT_DIRECTORY);
    EXPECT_EQ(st.mode & 0700, 0700u);
    EXPECT_EQ(ops_->mkdir(vfs_, "m", false, 0755), -EEXIST);
    EXPECT_EQ(ops_->mkdir(vfs_, "m", true, 0755), 0);
    EXPECT_EQ(ops_->mkdir(vfs_, "p/q/r", false, 0755), -ENOENT);
    EXPECT_EQ(ops_->mkdir(vfs_, "p/q/r", true, 0755), 0);
    EXPECT_EQ(ops_->mkdir(vfs_, "p/q/r/", true, 0755), 0);
    EXPECT_EQ(ops_->mkdir(vfs_, "p/q", true, 0755), 0);
    EXPECT_EQ(ops_->mkdir(vfs_, "p//s/./t/", true, 0755), 0);
    EXPECT_EQ(ops_->stat(vfs_, "p/s/t", &st), 0);
    EXPECT_EQ(ops_->mkdir(vfs_, "file", true, 0755), -EEXIST);
    EXPECT_EQ(ops_->mkdir(vfs_, "file/x", true, 0755), -ENOTDIR);
    EXPECT_EQ(ops_->mkdir(vfs_, "in_dir/made", false, 0755), 0);
    EXPECT_EQ(ops_->stat(vfs_, "dir/made", &st), 0);
    EXPECT_EQ(ops_->mkdir(vfs_, "abs_out/x", true, 0755), -EXDEV);
    EXPECT_EQ(ops_->mkdir(vfs_, "abs_out", true, 0755), -EEXIST) << "a symlink leaf is no dir";
}

TEST_F(PosixFs, RemoveSemantics)
{
    uint64_t n = 99;
    EXPECT_EQ(ops_->remove(vfs_, "dir", false, &n), -ENOTEMPTY);
    EXPECT_EQ(n, 99u) << "ret_removed untouched on failure";
    EXPECT_EQ(ops_->remove(vfs_, "empty", false, &n), 0);
    EXPECT_EQ(n, 1u);
    EXPECT_EQ(ops_->remove(vfs_, "file", false, &n), 0);
    EXPECT_EQ(n, 1u);
    EXPECT_EQ(ops_->remove(vfs_, "file", false, &n), -ENOENT);
    EXPECT_EQ(ops_->remove(vfs_, ".", true, &n), -EXDEV);
    EXPECT_EQ(ops_->remove(vfs_, "./", true, &n), -EXDEV);
    EXPECT_EQ(ops_->remove(vfs_, "dir/..", true, &n), -EXDEV);
    EXPECT_EQ(ops_->remove(vfs_, "dir/.", true, &n), -EINVAL);
    EXPECT_EQ(ops_->remove(vfs_, "dir/sub/..", true, &n), -EINVAL);

    // Symlinks are removed, never their targets.
    EXPECT_EQ(ops_->remove(vfs_, "abs_out", true, &n), 0);
    EXPECT_EQ(ops_->remove(vfs_, "in_dir", true, &n), 0);
    struct ws_stat st;
    EXPECT_EQ(ops_->stat(vfs_, "dir/nested", &st), 0);
    EXPECT_EQ(ops_->remove(vfs_, "hardlink_out", false, &n), 0);
    EXPECT_EQ(ReadAll(sb_->outside + "/canary"), "canary\n");
}

TEST_F(PosixFs, RecursiveRemoveNeverLeaves)
{
    std::string t = sb_->ws + "/tree";
    ASSERT_EQ(mkdir(t.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((t + "/a").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((t + "/a/b").c_str(), 0755), 0);
    WriteAll(t + "/a/b/f", "f");
    WriteAll(t + "/g", "g");
    ASSERT_EQ(symlink(sb_->outside.c_str(), (t + "/out_abs").c_str()), 0);
    ASSERT_EQ(symlink("../../outside", (t + "/a/out_rel").c_str()), 0);
    ASSERT_EQ(symlink("/", (t + "/a/b/root").c_str()), 0);
    ASSERT_EQ(link((sb_->outside + "/canary").c_str(), (t + "/hl").c_str()), 0);
    ASSERT_EQ(mkfifo((t + "/a/fifo").c_str(), 0644), 0);
    // An unreadable, unsearchable directory inside: root still removes it.
    bool root = geteuid() == 0;
    if (root) {
        ASSERT_EQ(mkdir((t + "/locked").c_str(), 0), 0);
    }

    uint64_t n = 0;
    ASSERT_EQ(ops_->remove(vfs_, "tree", true, &n), 0);
    // tree, a, b, f, g, out_abs, out_rel, root, hl, fifo, locked
    EXPECT_EQ(n, root ? 11u : 10u);
    struct ws_stat st;
    EXPECT_EQ(ops_->stat(vfs_, "tree", &st), -ENOENT);
    EXPECT_EQ(ReadAll(sb_->outside + "/canary"), "canary\n");

    ASSERT_EQ(ops_->remove(vfs_, "dir/", true, &n), 0);
    EXPECT_EQ(n, 5u); // dir, nested, up, upup, sub
    EXPECT_EQ(ops_->stat(vfs_, "file", &st), 0) << "dir/up -> .. was not followed";
}

TEST_F(PosixFs, RecursiveRemoveDepthLimit)
{
    auto chain = [](int depth) {
        std::string p;
        for (int i = 0; i < depth; i++)
            p += (i ? "/" : "") + std::string("d");
        return p;
    };
    std::string too_deep = "deep/" + chain(WS_POSIXFS_REMOVE_DEPTH_MAX + 5);
    ASSERT_EQ(ops_->mkdir(vfs_, too_deep.c_str(), true, 0755), 0);
    uint64_t n = 0;
    EXPECT_EQ(ops_->remove(vfs_, "deep", true, &n), -WS_ELIMIT);

    std::string ok = "shallow/" + chain(WS_POSIXFS_REMOVE_DEPTH_MAX - 1);
    ASSERT_EQ(ops_->mkdir(vfs_, ok.c_str(), true, 0755), 0);
    EXPECT_EQ(ops_->remove(vfs_, "shallow", true, &n), 0);
    EXPECT_EQ(n, (uint64_t)WS_POSIXFS_REMOVE_DEPTH_MAX);
    // Clean up the part the limit left behind, from the bottom.
    std::error_code ec;
    fs::remove_all(sb_->ws + "/deep", ec);
}

TEST_F(PosixFs, MoveSemantics)
{
    struct ws_stat st;
    EXPECT_EQ(ops_->move(vfs_, "file", "dir/nested", false), -EEXIST);
    EXPECT_EQ(sb_->Read("dir/nested"), "nested");
    EXPECT_EQ(ops_->move(vfs_, "file", "dir/nested", true), 0);
    EXPECT_EQ(sb_->Read("dir/nested"), "hello");
    EXPECT_EQ(ops_->stat(vfs_, "file", &st), -ENOENT);

    EXPECT_EQ(ops_->move(vfs_, "dir", "dir/sub/inside", false), -EINVAL);
    EXPECT_EQ(ops_->move(vfs_, "dir", "in_dir/sub/inside", false), -EINVAL);
    EXPECT_EQ(ops_->move(vfs_, ".", "x", false), -EXDEV);
    EXPECT_EQ(ops_->move(vfs_, "dir", ".", true), -EXDEV);
    EXPECT_EQ(ops_->move(vfs_, "dir/sub/..", "x", false), -EINVAL);
    EXPECT_EQ(ops_->move(vfs_, "dir", "abs_out/moved", false), -EXDEV);
    EXPECT_EQ(ops_->move(vfs_, "abs_out/canary", "stolen", false), -EXDEV);
    EXPECT_EQ(ops_->move(vfs_, "dir", "empty", true), 0) << "replacing an empty directory";
    ASSERT_EQ(ops_->mkdir(vfs_, "full/x", true, 0755), 0);
    EXPECT_EQ(ops_->move(vfs_, "empty", "full", true), -ENOTEMPTY);

    // A symlink moves as itself.
    EXPECT_EQ(ops_->move(vfs_, "abs_out", "renamed_link", false), 0);
    ASSERT_EQ(ops_->stat(vfs_, "renamed_link", &st), 0);
    EXPECT_EQ(st.type, WS_FT_SYMLINK);
    EXPECT_EQ(ops_->move(vfs_, "renamed_link/", "x", false), -ENOTDIR);
}

TEST_F(PosixFs, OpenErrors)
{
    struct ws_vfs *v = nullptr;
    EXPECT_EQ(ws_posixfs_open(AT_FDCWD, (sb_->ws + "/file").c_str(), &v), -ENOTDIR);
    int r = ws_posixfs_open(AT_FDCWD, (sb_->ws + "/in_dir").c_str(), &v);
    EXPECT_TRUE(r == -ELOOP || r == -ENOTDIR) << r;
    EXPECT_EQ(ws_posixfs_open(AT_FDCWD, (sb_->ws + "/missing").c_str(), &v), -ENOENT);
    EXPECT_EQ(ws_posixfs_open_with(AT_FDCWD, sb_->ws.c_str(), 1u << 7, &v), -EINVAL);
    EXPECT_EQ(v, nullptr);

    int fd = -1;
    ASSERT_EQ(ws_posixfs_open_dir_fd(vfs_, "in_dir/sub", &fd), 0);
    struct stat a, b;
    ASSERT_EQ(fstat(fd, &a), 0);
    ASSERT_EQ(stat((sb_->ws + "/dir/sub").c_str(), &b), 0);
    EXPECT_EQ(a.st_ino, b.st_ino);
    EXPECT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    close(fd);
    EXPECT_EQ(ws_posixfs_open_dir_fd(vfs_, "in_dir", &fd), -WS_ESYMLINK_LEAF);
    EXPECT_EQ(ws_posixfs_open_dir_fd(vfs_, "abs_out/sub", &fd), -EXDEV);
    struct ws_vfs_ops other = *ops_;
    struct ws_vfs fake = {&other};
    EXPECT_EQ(ws_posixfs_open_dir_fd(&fake, ".", &fd), -EINVAL);
}

TEST_F(PosixFs, NoFdLeaks)
{
    auto count_fds = [] {
        int n = 0;
        for (const auto &e : fs::directory_iterator("/proc/self/fd")) {
            (void)e;
            n++;
        }
        return n;
    };
    int before = count_fds();
    for (int i = 0; i < 3; i++) {
        for (const auto &op : Ops())
            for (const char *p : {"file", "dir", "abs_out/x", "fifo", "dir/sub/", "loop_a/x",
                                  "hardlink_out", ".", "nope/x"})
                RunOp(vfs_, op, p);
    }
    EXPECT_EQ(count_fds(), before);
}

// ---- the rename-exchange race ----

// A thread keeps swapping the real directory ws/d with a symlink ws/l that
// points outside, while every operation runs on paths through d. Whatever
// the interleaving, nothing outside may change and every result must be a
// success or one of the refusals below.
enum class Target { kAbsoluteOutside, kRelativeOutside, kHostRoot };

void ExchangeRace(Target target, std::chrono::milliseconds duration)
{
    Sandbox sb;
    std::string link_target = target == Target::kAbsoluteOutside   ? sb.outside
                              : target == Target::kRelativeOutside ? "../outside"
                                                                   : "/";
    // With "/" as the target, an escape would land in the host root.
    const std::vector<std::string> host_names = {"/w", "/m", "/p", "/g", "/f", "/canary"};
    std::map<std::string, bool> host_before;
    for (const auto &h : host_names)
        host_before[h] = access(h.c_str(), F_OK) == 0;
    struct ws_vfs *vfs = sb.vfs;
    const struct ws_vfs_ops *o = vfs->ops;
    std::string d = sb.ws + "/d";
    ASSERT_EQ(mkdir(d.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((d + "/sub").c_str(), 0755), 0);
    WriteAll(d + "/f", "inside-f\n");
    WriteAll(d + "/canary", "inside-canary\n");
    ASSERT_EQ(symlink(link_target.c_str(), (sb.ws + "/l").c_str()), 0);
    // Give every outside lookup something to hit.
    ASSERT_EQ(mkdir((sb.outside + "/m").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((sb.outside + "/p").c_str(), 0755), 0);
    WriteAll(sb.outside + "/p/q", "outside-q\n");
    WriteAll(sb.outside + "/w", "outside-w\n");
    WriteAll(sb.outside + "/g", "outside-g\n");
    std::string outside_sig = TreeSignature(sb.outside);
    std::set<std::string> base_names = ListNames(sb.base);

    int ws_fd = open(sb.ws.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(ws_fd, 0);
    std::atomic<bool> stop{false};
    std::atomic<long> swaps{0};
    std::thread swapper([&] {
        // A short, varying pause after each swap lets operations run on
        // both states and puts the swaps at every point of their lookups.
        unsigned seed = 1;
        while (!stop.load(std::memory_order_relaxed)) {
            if (renameat2(ws_fd, "d", ws_fd, "l", RENAME_EXCHANGE) == 0)
                swaps++;
            for (unsigned spin = rand_r(&seed) % 20000; spin > 0; spin--)
                if (stop.load(std::memory_order_relaxed))
                    break;
        }
    });

    const std::set<int> allowed = {0,          -ENOENT, -EXDEV,  -WS_ESYMLINK_LEAF, -EEXIST,
                                   -ENOTEMPTY, -EAGAIN, -ESTALE, -ENOTDIR};
    std::map<std::string, std::map<int, long>> results;
    auto check = [&](const char *what, int r) {
        results[what][r]++;
        EXPECT_TRUE(allowed.count(r)) << what << ": " << ErrName(r);
    };

    auto deadline = std::chrono::steady_clock::now() + duration;
    unsigned iteration = 0;
    while (std::chrono::steady_clock::now() < deadline) {
        struct ws_stat st;
        check("stat", o->stat(vfs, "d/f", &st));
        check("stat dotdot", o->stat(vfs, "d/sub/../f", &st));

        struct ws_vfs_file *f;
        int r = o->open_read(vfs, "d/canary", &f, &st);
        check("open_read", r);
        if (r == 0) {
            char buf[64] = {};
            ssize_t n = o->pread(f, buf, sizeof(buf) - 1, 0);
            EXPECT_EQ(std::string(buf, n > 0 ? (size_t)n : 0), "inside-canary\n");
            o->close(f);
        }

        // Commits fsync: fewer of them keep the loop fast on both sides.
        if (iteration++ % 8 == 0) {
            struct ws_write_opts wo = {};
            struct ws_vfs_writer *w;
            r = o->write_begin(vfs, "d/w", &wo, &w);
            check("write_begin", r);
            if (r == 0) {
                EXPECT_EQ(o->write(w, "ws\n", 3), 0);
                check("write_commit", o->write_commit(w, &st));
            }
            wo.create_parents = true;
            r = o->write_begin(vfs, "d/p/q", &wo, &w);
            check("write_begin parents", r);
            if (r == 0) {
                EXPECT_EQ(o->write(w, "ws\n", 3), 0);
                check("write_commit parents", o->write_commit(w, &st));
            }
        }

        check("mkdir", o->mkdir(vfs, "d/m", false, 0755));
        check("mkdir -p", o->mkdir(vfs, "d/m/n/o", true, 0755));
        uint64_t removed;
        check("remove -r", o->remove(vfs, "d/m", true, &removed));
        check("remove -r p", o->remove(vfs, "d/p", true, &removed));
        check("remove", o->remove(vfs, "d/w", false, &removed));
        check("move", o->move(vfs, "d/f", "d/g", false));
        check("move back", o->move(vfs, "d/g", "d/f", true));

        struct ws_vfs_dir *dir;
        r = o->opendir(vfs, "d/sub", &dir);
        check("opendir", r);
        if (r == 0) {
            struct ws_dirent e;
            while ((r = o->readdir(dir, &e)) > 0) {
            }
            check("readdir", r);
            o->closedir(dir);
        }
        if (testing::Test::HasFailure())
            break;
    }
    stop = true;
    swapper.join();
    close(ws_fd);

    EXPECT_GT(swaps.load(), 100);
    EXPECT_EQ(TreeSignature(sb.outside), outside_sig);
    EXPECT_EQ(ListNames(sb.base), base_names);
    EXPECT_TRUE(TempFiles(sb.ws).empty());
    for (const auto &h : host_names)
        EXPECT_EQ(access(h.c_str(), F_OK) == 0, host_before[h]) << h;
    // Both sides of the swap were seen.
    EXPECT_GT(results["stat"][0], 0) << "never saw the real directory";
    EXPECT_GT(results["stat"][-EXDEV], 0) << "never saw the symlink";
    for (const auto &[what, by_result] : results) {
        std::string line = what + ":";
        for (const auto &[r, count] : by_result)
            line += " " + ErrName(r) + "=" + std::to_string(count);
        printf("%s\n", line.c_str());
    }
}

TEST(PosixFsRace, ExchangeWithAbsoluteSymlinkOut)
{
    alarm(kWatchdogSeconds);
    ExchangeRace(Target::kAbsoluteOutside, std::chrono::milliseconds(1000));
    alarm(0);
}

TEST(PosixFsRace, ExchangeWithRelativeSymlinkOut)
{
    alarm(kWatchdogSeconds);
    ExchangeRace(Target::kRelativeOutside, std::chrono::milliseconds(1000));
    alarm(0);
}

TEST(PosixFsRace, ExchangeWithSymlinkToRoot)
{
    alarm(kWatchdogSeconds);
    ExchangeRace(Target::kHostRoot, std::chrono::milliseconds(1000));
    alarm(0);
}

} // namespace
