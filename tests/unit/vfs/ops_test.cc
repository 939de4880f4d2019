// The generic file operations (server/vfs/ops.h) run over the memory vfs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern "C" {
#include "server/base/errors.h"
#include "server/providers/memory.h"
#include "server/vfs/ops.h"
#include "server/vfs/vfs.h"
}

namespace
{

const char kHelloSha[] = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
const char kEmptySha[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::string Meta(const ws_diag &d, const std::string &key)
{
    for (int i = 0; i < d.n_meta; i++)
        if (key == d.key[i])
            return d.value[i];
    return "<none>";
}

// ---- a test vfs decorating the memory tree ----
//
// * Entries named "link*" show as symlinks, refused by open and opendir as
//   a real implementation does: the memory tree cannot hold symlinks, and
//   the walks must be seen never to follow one.
// * readdir returns each directory's names in reverse order: a real
//   directory lists in no particular order (the memory tree happens to be
//   sorted), so the walks must sort for themselves.
// * An optional delay before each commit widens race windows.

const ws_vfs_ops *g_inner_ops;
std::atomic<int> g_commit_delay_us{0};

bool IsLink(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    return strncmp(name, "link", 4) == 0;
}

struct TestFs {
    ws_vfs base;
    ws_vfs *inner;
};

struct TestDir {
    ws_vfs_dir *inner;
    std::vector<std::pair<std::string, ws_ftype>> ents;
    size_t idx = 0;
};

ws_vfs *Inner(ws_vfs *fs)
{
    return reinterpret_cast<TestFs *>(fs)->inner;
}

TestDir *Dir(ws_vfs_dir *d)
{
    return reinterpret_cast<TestDir *>(d);
}

int WrapDir(ws_vfs_dir *inner, ws_vfs_dir **ret)
{
    int r;
    auto *d = new TestDir{inner, {}};
    ws_dirent e;
    while ((r = g_inner_ops->readdir(inner, &e)) > 0)
        d->ents.emplace_back(std::string(e.name, e.name_len),
                             strncmp(e.name, "link", 4) == 0 ? WS_FT_SYMLINK : e.type);
    std::reverse(d->ents.begin(), d->ents.end());
    *ret = reinterpret_cast<ws_vfs_dir *>(d);
    return 0;
}

int TStat(ws_vfs *fs, const char *path, ws_stat *st)
{
    int r = g_inner_ops->stat(Inner(fs), path, st);
    if (r == 0 && IsLink(path))
        st->type = WS_FT_SYMLINK;
    return r;
}

int TOpendir(ws_vfs *fs, const char *path, ws_vfs_dir **ret)
{
    ws_vfs_dir *inner = nullptr;
    if (IsLink(path))
        return -WS_ESYMLINK_LEAF;
    int r = g_inner_ops->opendir(Inner(fs), path, &inner);
    return r < 0 ? r : WrapDir(inner, ret);
}

int TOpendirAt(ws_vfs_dir *dir, const char *name, ws_vfs_dir **ret)
{
    ws_vfs_dir *inner = nullptr;
    if (IsLink(name))
        return -ENOTDIR;
    int r = g_inner_ops->opendir_at(Dir(dir)->inner, name, &inner);
    return r < 0 ? r : WrapDir(inner, ret);
}

int TReaddir(ws_vfs_dir *dir, ws_dirent *e)
{
    TestDir *d = Dir(dir);
    if (d->idx >= d->ents.size())
        return 0;
    const auto &ent = d->ents[d->idx++];
    e->name = ent.first.c_str();
    e->name_len = ent.first.size();
    e->type = ent.second;
    return 1;
}

int TStatAt(ws_vfs_dir *dir, const char *name, ws_stat *st)
{
    int r = g_inner_ops->stat_at(Dir(dir)->inner, name, st);
    if (r == 0 && IsLink(name))
        st->type = WS_FT_SYMLINK;
    return r;
}

void TClosedir(ws_vfs_dir *dir)
{
    if (!dir)
        return;
    g_inner_ops->closedir(Dir(dir)->inner);
    delete Dir(dir);
}

int TOpenRead(ws_vfs *fs, const char *path, ws_vfs_file **f, ws_stat *st)
{
    if (IsLink(path))
        return -WS_ESYMLINK_LEAF;
    return g_inner_ops->open_read(Inner(fs), path, f, st);
}

int TOpenReadAt(ws_vfs_dir *dir, const char *name, ws_vfs_file **f, ws_stat *st)
{
    if (IsLink(name))
        return -WS_ESYMLINK_LEAF;
    return g_inner_ops->open_read_at(Dir(dir)->inner, name, f, st);
}

ssize_t TPread(ws_vfs_file *f, void *buf, size_t len, uint64_t off)
{
    return g_inner_ops->pread(f, buf, len, off);
}

void TClose(ws_vfs_file *f)
{
    g_inner_ops->close(f);
}

int TWriteBegin(ws_vfs *fs, const char *path, const ws_write_opts *o, ws_vfs_writer **w)
{
    return g_inner_ops->write_begin(Inner(fs), path, o, w);
}

int TWrite(ws_vfs_writer *w, const void *buf, size_t len)
{
    return g_inner_ops->write(w, buf, len);
}

int TWriteCommit(ws_vfs_writer *w, ws_stat *st)
{
    if (g_commit_delay_us)
        std::this_thread::sleep_for(std::chrono::microseconds(g_commit_delay_us));
    return g_inner_ops->write_commit(w, st);
}

void TWriteAbort(ws_vfs_writer *w)
{
    g_inner_ops->write_abort(w);
}

int TMkdir(ws_vfs *fs, const char *path, bool parents, uint32_t mode)
{
    return g_inner_ops->mkdir(Inner(fs), path, parents, mode);
}

int TRemove(ws_vfs *fs, const char *path, bool recursive, uint64_t *removed)
{
    return g_inner_ops->remove(Inner(fs), path, recursive, removed);
}

int TMove(ws_vfs *fs, const char *from, const char *to, bool replace)
{
    return g_inner_ops->move(Inner(fs), from, to, replace);
}

void TDestroy(ws_vfs *)
{
}

const ws_vfs_ops kTestOps = {
    TStat,
    TOpendir,
    TOpendirAt,
    TReaddir,
    TStatAt,
    TClosedir,
    TOpenRead,
    TOpenReadAt,
    TPread,
    TClose,
    TWriteBegin,
    TWrite,
    TWriteCommit,
    TWriteAbort,
    TMkdir,
    TRemove,
    TMove,
    TDestroy,
    // The tree and watch entries: none.
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

// ---- fixture ----

struct Entry {
    std::string path;
    ws_ftype type;
};

struct Match {
    std::string path;
    uint64_t line;
    std::string text;
    bool truncated;
    bool operator==(const Match &o) const
    {
        return path == o.path && line == o.line && text == o.text && truncated == o.truncated;
    }
};

std::ostream &operator<<(std::ostream &os, const Match &m)
{
    return os << m.path << ":" << m.line << ":" << m.text.substr(0, 40)
              << (m.truncated ? "[cut]" : "");
}

int CollectEntry(void *ud, const ws_entry *e)
{
    static_cast<std::vector<Entry> *>(ud)->push_back(
        {std::string(e->path, e->path_len), e->st.type});
    return 0;
}

int CollectMatch(void *ud, const ws_grep_match *m)
{
    static_cast<std::vector<Match> *>(ud)->push_back(
        {std::string(m->path, m->path_len), m->line_number, std::string(m->line, m->line_len),
         m->line_truncated});
    return 0;
}

std::vector<std::string> Paths(const std::vector<Entry> &v)
{
    std::vector<std::string> out;
    for (const auto &e : v)
        out.push_back(e.path);
    return out;
}

class Ops : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        ASSERT_EQ(ws_memfs_new(&fs_), 0);
        g_inner_ops = fs_->ops;
        test_fs_.base.ops = &kTestOps;
        test_fs_.inner = fs_;
        ASSERT_EQ(ws_fsops_new(&test_fs_.base, &ops_), 0);
    }
    void TearDown() override
    {
        ws_fsops_free(ops_);
        fs_->ops->destroy(fs_);
    }

    int Write(const std::string &path, const std::string &data, const char *if_match = nullptr,
              uint64_t max_size = 0, ws_write_result *res = nullptr, ws_diag *d = nullptr)
    {
        ws_write_request req = {};
        req.path = path.c_str();
        req.opts.create_parents = true;
        req.opts.max_size = max_size;
        req.if_match = if_match;
        ws_write_session *s = nullptr;
        int r = ws_write_begin(ops_, &req, d, &s);
        if (r < 0)
            return r;
        r = ws_write_append(s, data.data(), data.size(), d);
        if (r < 0) {
            ws_write_abort(s);
            return r;
        }
        ws_write_result tmp;
        return ws_write_commit(s, d, res ? res : &tmp);
    }

    std::string Read(const std::string &path)
    {
        ws_vfs_file *f = nullptr;
        ws_stat st;
        if (fs_->ops->open_read(fs_, path.c_str(), &f, &st) < 0)
            return "<missing>";
        std::string out(st.size, '\0');
        ssize_t n = fs_->ops->pread(f, &out[0], out.size(), 0);
        fs_->ops->close(f);
        out.resize(n > 0 ? (size_t)n : 0);
        return out;
    }

    std::string Sha(const std::string &path)
    {
        char hex[WS_SHA256_HEX_LEN + 1];
        EXPECT_EQ(ws_sha256_file(fs_, path.c_str(), hex), 0);
        return hex;
    }

    int Edit(const std::string &path, const std::string &from, const std::string &to,
             bool all = false, uint64_t max_size = 0, const char *if_match = nullptr,
             ws_edit_result *res = nullptr, ws_diag *d = nullptr)
    {
        ws_edit_request req = {};
        req.path = path.c_str();
        req.old_text = from.data();
        req.old_len = from.size();
        req.new_text = to.data();
        req.new_len = to.size();
        req.replace_all = all;
        req.max_size = max_size;
        req.if_match = if_match;
        ws_edit_result tmp;
        return ws_edit(ops_, &req, d, res ? res : &tmp);
    }

    std::vector<Entry> List(const std::string &path, unsigned depth, unsigned max = 0,
                            bool *truncated = nullptr, int *rc = nullptr)
    {
        std::vector<Entry> v;
        bool t = false;
        int r = ws_list(ops_, path.c_str(), depth, max, CollectEntry, &v, &t);
        if (rc)
            *rc = r;
        else
            EXPECT_EQ(r, 0);
        if (truncated)
            *truncated = t;
        return v;
    }

    std::vector<std::string> Glob(const std::string &pattern, const std::string &base = "",
                                  unsigned max = 0, bool *truncated = nullptr, int *rc = nullptr)
    {
        std::vector<Entry> v;
        bool t = false;
        int r = ws_glob(ops_, base.c_str(), pattern.c_str(), max, CollectEntry, &v, &t);
        if (rc)
            *rc = r;
        else
            EXPECT_EQ(r, 0) << pattern;
        if (truncated)
            *truncated = t;
        return Paths(v);
    }

    // Runs a whole grep; *sum gets the summary.
    std::vector<Match> Grep(ws_grep_request req, struct ws_grep_summary *sum = nullptr,
                            unsigned batch = 0, int *rc = nullptr, ws_diag *d = nullptr)
    {
        std::vector<Match> v;
        ws_grep *g = nullptr;
        int r = ws_grep_start(ops_, &req, d, &g);
        if (rc)
            *rc = r;
        else
            EXPECT_EQ(r, 0);
        if (r < 0)
            return v;
        int calls = 0;
        while ((r = ws_grep_next(g, batch, CollectMatch, &v)) == 1) {
            calls++;
            EXPECT_LT(calls, 1000000);
        }
        EXPECT_EQ(r, 0);
        if (sum)
            ws_grep_get_summary(g, sum);
        ws_grep_free(g);
        return v;
    }

    std::vector<Match> GrepSimple(const char *pattern, struct ws_grep_summary *sum = nullptr)
    {
        ws_grep_request req = {};
        req.pattern = pattern;
        return Grep(req, sum);
    }

    ws_vfs *fs_ = nullptr;
    ws_fsops *ops_ = nullptr;
    TestFs test_fs_ = {};
};

// ---- transient names ----

TEST(TransientName, Cases)
{
    auto t = [](const char *s, const char *prefix = nullptr) {
        return ws_vfs_transient_name(s, strlen(s), prefix);
    };
    EXPECT_TRUE(t(".ws-tmp-0123456789abcdef"));
    EXPECT_TRUE(t(".ws-stage-0123456789abcdef"));
    EXPECT_TRUE(t(".ws-trash-0123456789abcdef"));
    EXPECT_TRUE(t(".workspaced-restore-0123456789abcdef"));
    EXPECT_TRUE(t(".workspaced-replaced-0123456789abcdef"));
    EXPECT_TRUE(t(".ws-tmp-0123456789abcdef", WS_VFS_TMP_PREFIX));
    EXPECT_FALSE(t(".ws-stage-0123456789abcdef", WS_VFS_TMP_PREFIX));
    EXPECT_FALSE(t(".ws-tmp-0123456789abcde")) << "15 digits";
    EXPECT_FALSE(t(".ws-tmp-0123456789abcdef0")) << "17 digits";
    EXPECT_FALSE(t(".ws-tmp-0123456789ABCDEF")) << "upper case is not ours";
    EXPECT_FALSE(t(".ws-stage-mine"));
    EXPECT_FALSE(t("ws-tmp-0123456789abcdef"));
    EXPECT_FALSE(t(""));
}

// ---- check_path ----

TEST(CheckPath, Cases)
{
    EXPECT_EQ(ws_vfs_check_path(nullptr), -WS_EBADPATH);
    EXPECT_EQ(ws_vfs_check_path(""), -WS_EBADPATH);
    EXPECT_EQ(ws_vfs_check_path("/etc/passwd"), -EXDEV);
    EXPECT_EQ(ws_vfs_check_path("."), 0);
    EXPECT_EQ(ws_vfs_check_path("a/../b"), 0);
    EXPECT_EQ(ws_vfs_check_path("a/b/../../c"), 0);
    EXPECT_EQ(ws_vfs_check_path(".."), -EXDEV);
    EXPECT_EQ(ws_vfs_check_path("./.."), -EXDEV);
    EXPECT_EQ(ws_vfs_check_path("a/../.."), -EXDEV);
    EXPECT_EQ(ws_vfs_check_path("a/../../a"), -EXDEV) << "climbing out and back is an escape";
    EXPECT_EQ(ws_vfs_check_path("a/./b/.."), 0);
    EXPECT_EQ(ws_vfs_check_path("..a/b"), 0) << "'..a' is a name";
    EXPECT_EQ(ws_vfs_check_path("a/b/c.txt"), 0);
    EXPECT_EQ(ws_vfs_check_path(std::string(WS_VFS_NAME_MAX, 'n').c_str()), 0);
    EXPECT_EQ(ws_vfs_check_path(("a/" + std::string(WS_VFS_NAME_MAX + 1, 'n') + "/b").c_str()),
              -WS_EBADPATH);
    std::string longest;
    while (longest.size() < WS_VFS_PATH_MAX)
        longest += "abcdefg/";
    longest.resize(WS_VFS_PATH_MAX);
    EXPECT_EQ(ws_vfs_check_path(longest.c_str()), 0);
    EXPECT_EQ(ws_vfs_check_path((longest + "x").c_str()), -WS_EBADPATH);
}

// ---- writes ----

TEST_F(Ops, WriteReportsShaAndSize)
{
    ws_write_result res = {};
    ASSERT_EQ(Write("d/hello.txt", "hello", nullptr, 0, &res), 0);
    EXPECT_STREQ(res.sha256, kHelloSha);
    EXPECT_EQ(res.bytes_written, 5u);
    EXPECT_EQ(res.st.size, 5u);
    EXPECT_EQ(res.st.type, WS_FT_REGULAR);
    EXPECT_EQ(Sha("d/hello.txt"), kHelloSha);
    ASSERT_EQ(Write("empty", "", nullptr, 0, &res), 0);
    EXPECT_STREQ(res.sha256, kEmptySha);
    char hex[WS_SHA256_HEX_LEN + 1];
    EXPECT_EQ(ws_sha256_file(fs_, "missing", hex), -ENOENT);
    EXPECT_EQ(ws_sha256_file(fs_, "d", hex), -EISDIR);
}

TEST_F(Ops, WriteSessionChecksPathAndChunks)
{
    ws_write_request req = {};
    ws_write_session *s = nullptr;
    req.path = "/abs";
    EXPECT_EQ(ws_write_begin(ops_, &req, nullptr, &s), -EXDEV);
    req.path = "";
    EXPECT_EQ(ws_write_begin(ops_, &req, nullptr, &s), -WS_EBADPATH);
    EXPECT_EQ(s, nullptr);
    req.path = "chunks";
    ASSERT_EQ(ws_write_begin(ops_, &req, nullptr, &s), 0);
    ASSERT_EQ(ws_write_append(s, "he", 2, nullptr), 0);
    ASSERT_EQ(ws_write_append(s, "", 0, nullptr), 0);
    ASSERT_EQ(ws_write_append(s, "llo", 3, nullptr), 0);
    ws_write_result res;
    ASSERT_EQ(ws_write_commit(s, nullptr, &res), 0);
    EXPECT_STREQ(res.sha256, kHelloSha);
    EXPECT_EQ(Read("chunks"), "hello");
    // Abort leaves nothing.
    req.path = "aborted";
    ASSERT_EQ(ws_write_begin(ops_, &req, nullptr, &s), 0);
    ASSERT_EQ(ws_write_append(s, "x", 1, nullptr), 0);
    ws_write_abort(s);
    ws_write_abort(nullptr);
    EXPECT_EQ(Read("aborted"), "<missing>");
}

TEST_F(Ops, IfMatchAcceptsCurrentAndRefusesStale)
{
    ws_write_result v1, v2;
    ASSERT_EQ(Write("f", "one", nullptr, 0, &v1), 0);
    ASSERT_EQ(Write("f", "two", v1.sha256, 0, &v2), 0);
    EXPECT_EQ(Read("f"), "two");

    ws_diag d = {};
    EXPECT_EQ(Write("f", "three", v1.sha256, 0, nullptr, &d), -WS_ECONFLICT);
    EXPECT_EQ(Meta(d, "actual_sha256"), v2.sha256);
    EXPECT_EQ(Read("f"), "two");

    // Uppercase hex is the same hash.
    std::string upper = v2.sha256;
    for (auto &c : upper)
        c = (char)toupper(c);
    EXPECT_EQ(Write("f", "four", upper.c_str()), 0);
    EXPECT_EQ(Read("f"), "four");

    d = {};
    EXPECT_EQ(Write("f", "x", "nothex", 0, nullptr, &d), -WS_EMALFORMED);
    EXPECT_EQ(Meta(d, "field"), "if_match");
    EXPECT_EQ(Read("f"), "four");
    // Empty if_match: no check.
    EXPECT_EQ(Write("f", "five", ""), 0);
}

TEST_F(Ops, IfMatchOnMissingFileConflictsWithEmptyActual)
{
    ws_diag d = {};
    EXPECT_EQ(Write("nothere", "x", kHelloSha, 0, nullptr, &d), -WS_ECONFLICT);
    EXPECT_EQ(Meta(d, "actual_sha256"), "");
    EXPECT_EQ(Read("nothere"), "<missing>");
}

TEST_F(Ops, SizeCapKeepsOldContent)
{
    ASSERT_EQ(Write("f", "original"), 0);
    ws_write_request req = {};
    req.path = "f";
    req.opts.max_size = 10;
    ws_write_session *s = nullptr;
    ASSERT_EQ(ws_write_begin(ops_, &req, nullptr, &s), 0);
    ASSERT_EQ(ws_write_append(s, "123456", 6, nullptr), 0);
    ws_diag d = {};
    EXPECT_EQ(ws_write_append(s, "78901", 5, &d), -EFBIG);
    EXPECT_EQ(Meta(d, "limit"), "10");
    EXPECT_EQ(ws_write_append(s, "7", 1, nullptr), -EINVAL) << "a failed session stays failed";
    ws_write_result res = {};
    EXPECT_EQ(ws_write_commit(s, nullptr, &res), -EINVAL);
    EXPECT_EQ(Read("f"), "original");
    // Exactly at the cap is fine.
    EXPECT_EQ(Write("f", "1234567890", nullptr, 10), 0);
    EXPECT_EQ(Write("f", "12345678901", nullptr, 10), -EFBIG);
    EXPECT_EQ(Read("f"), "1234567890");
}

// Conditional read-modify-write loops from several threads: every
// increment must land exactly once, which only holds if the if_match
// check and the commit are atomic (a slow commit makes a race likely).
TEST_F(Ops, ConcurrentConditionalWritesLoseNoUpdate)
{
    ASSERT_EQ(Write("counter", "0"), 0);
    g_commit_delay_us = 300;
    const int kThreads = 4, kIncrements = 25;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++) {
        threads.emplace_back([&] {
            for (int i = 0; i < kIncrements;) {
                std::string cur = Read("counter");
                char sha[WS_SHA256_HEX_LEN + 1];
                if (ws_sha256_file(fs_, "counter", sha) < 0)
                    continue;
                if (Read("counter") != cur)
                    continue; // changed between read and hash
                int r = Write("counter", std::to_string(std::stoi(cur) + 1), sha);
                if (r == 0)
                    i++;
                else
                    ASSERT_EQ(r, -WS_ECONFLICT);
            }
        });
    }
    for (auto &t : threads)
        t.join();
    g_commit_delay_us = 0;
    EXPECT_EQ(Read("counter"), std::to_string(kThreads * kIncrements));
}

// ---- edit ----

TEST_F(Ops, EditReplacesExactlyOnce)
{
    ASSERT_EQ(Write("f", "alpha beta gamma"), 0);
    ws_edit_result res = {};
    ASSERT_EQ(Edit("f", "beta", "BETA!", false, 0, nullptr, &res), 0);
    EXPECT_EQ(res.replacements, 1u);
    EXPECT_EQ(Read("f"), "alpha BETA! gamma");
    EXPECT_EQ(res.sha256, Sha("f"));
    EXPECT_EQ(res.st.size, 17u);
}

TEST_F(Ops, EditNoMatchAndMultipleMatchesKeepContent)
{
    ASSERT_EQ(Write("f", "x y x y x"), 0);
    ws_diag d = {};
    EXPECT_EQ(Edit("f", "z", "q", false, 0, nullptr, nullptr, &d), -WS_ENOMATCH);
    EXPECT_EQ(Meta(d, "matches"), "0");
    d = {};
    EXPECT_EQ(Edit("f", "x", "q", false, 0, nullptr, nullptr, &d), -WS_EMULTIMATCH);
    EXPECT_EQ(Meta(d, "matches"), "3");
    EXPECT_EQ(Read("f"), "x y x y x");
    d = {};
    EXPECT_EQ(Edit("f", "z", "q", true, 0, nullptr, nullptr, &d), -WS_ENOMATCH)
        << "replace_all still needs one match";
}

TEST_F(Ops, EditReplaceAllIsNonOverlapping)
{
    ASSERT_EQ(Write("f", "aaaaa"), 0);
    ws_edit_result res = {};
    ASSERT_EQ(Edit("f", "aa", "b", true, 0, nullptr, &res), 0);
    EXPECT_EQ(res.replacements, 2u);
    EXPECT_EQ(Read("f"), "bba");
    ws_diag d = {};
    ASSERT_EQ(Write("g", "aaa"), 0);
    EXPECT_EQ(Edit("g", "aa", "b", false, 0, nullptr, nullptr, &d), 0)
        << "'aa' occurs once without overlap in 'aaa'";
    EXPECT_EQ(Read("g"), "ba");
    // Deleting with an empty new_text.
    ASSERT_EQ(Write("h", "a-b-c"), 0);
    ASSERT_EQ(Edit("h", "-", "", true), 0);
    EXPECT_EQ(Read("h"), "abc");
}

TEST_F(Ops, EditRefusesEmptyOldTextAndMissingFile)
{
    ASSERT_EQ(Write("f", "abc"), 0);
    ws_diag d = {};
    EXPECT_EQ(Edit("f", "", "x", false, 0, nullptr, nullptr, &d), -WS_EMALFORMED);
    EXPECT_EQ(Meta(d, "field"), "old_text");
    EXPECT_EQ(Edit("missing", "a", "b"), -ENOENT);
    EXPECT_EQ(Edit(".", "a", "b"), -EISDIR);
    EXPECT_EQ(Edit("../f", "a", "b"), -EXDEV);
    EXPECT_EQ(Read("f"), "abc");
}

TEST_F(Ops, EditSizeCap)
{
    ASSERT_EQ(Write("f", "0123456789"), 0);
    ws_diag d = {};
    EXPECT_EQ(Edit("f", "5", "55", false, 10, nullptr, nullptr, &d), -EFBIG);
    EXPECT_EQ(Meta(d, "limit"), "10");
    EXPECT_EQ(Read("f"), "0123456789");
    EXPECT_EQ(Edit("f", "5", "X", false, 10), 0) << "same size fits";
    EXPECT_EQ(Edit("f", "X", "5", false, 5), -EFBIG) << "the file itself is over the cap";
    EXPECT_EQ(Read("f"), "01234X6789");
}

TEST_F(Ops, EditHonoursIfMatchAndKeepsMode)
{
    ws_write_request req = {};
    req.path = "f";
    req.opts.mode = 0600;
    ws_write_session *s = nullptr;
    ASSERT_EQ(ws_write_begin(ops_, &req, nullptr, &s), 0);
    ASSERT_EQ(ws_write_append(s, "hello", 5, nullptr), 0);
    ws_write_result wr;
    ASSERT_EQ(ws_write_commit(s, nullptr, &wr), 0);

    ws_diag d = {};
    EXPECT_EQ(Edit("f", "h", "j", false, 0, kEmptySha, nullptr, &d), -WS_ECONFLICT);
    EXPECT_EQ(Meta(d, "actual_sha256"), kHelloSha);
    EXPECT_EQ(Read("f"), "hello");
    d = {};
    EXPECT_EQ(Edit("nothere", "h", "j", false, 0, kHelloSha, nullptr, &d), -WS_ECONFLICT);
    EXPECT_EQ(Meta(d, "actual_sha256"), "");
    ws_edit_result res = {};
    ASSERT_EQ(Edit("f", "h", "j", false, 0, kHelloSha, &res), 0);
    EXPECT_EQ(Read("f"), "jello");
    EXPECT_EQ(res.st.mode, 0600u);
}

TEST_F(Ops, ConcurrentEditsAreSerialized)
{
    ASSERT_EQ(Write("f", "END"), 0);
    g_commit_delay_us = 200;
    const int kThreads = 4, kEdits = 25;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++) {
        threads.emplace_back([&] {
            for (int i = 0; i < kEdits; i++)
                ASSERT_EQ(Edit("f", "END", "aEND"), 0);
        });
    }
    for (auto &t : threads)
        t.join();
    g_commit_delay_us = 0;
    EXPECT_EQ(Read("f"), std::string(kThreads * kEdits, 'a') + "END");
}

// ---- list ----

class ListTest : public Ops
{
  protected:
    void SetUp() override
    {
        Ops::SetUp();
        for (const char *p : {"a/x", "a/b/y", "c", ".hidden", "B/z"})
            ASSERT_EQ(Write(p, "data"), 0);
    }
};

TEST_F(ListTest, OneLevelSortedByBytes)
{
    std::vector<std::string> want = {".hidden", "B", "a", "c"};
    EXPECT_EQ(Paths(List(".", 1)), want);
    EXPECT_EQ(Paths(List(".", 0)), want);
    auto v = List(".", 1);
    EXPECT_EQ(v[1].type, WS_FT_DIRECTORY);
    EXPECT_EQ(v[3].type, WS_FT_REGULAR);
}

TEST_F(ListTest, PreOrderWithDepth)
{
    EXPECT_EQ(Paths(List(".", 2)),
              (std::vector<std::string>{".hidden", "B", "B/z", "a", "a/b", "a/x", "c"}));
    EXPECT_EQ(Paths(List(".", 3)),
              (std::vector<std::string>{".hidden", "B", "B/z", "a", "a/b", "a/b/y", "a/x", "c"}));
    EXPECT_EQ(Paths(List("a", 2)), (std::vector<std::string>{"a/b", "a/b/y", "a/x"}));
    // "." and empty components go; ".." stays, since only the resolver
    // knows where it leads after a symlink.
    EXPECT_EQ(Paths(List("./a/../a/", 1)), (std::vector<std::string>{"a/../a/b", "a/../a/x"}));
}

TEST_F(ListTest, TruncationIsExact)
{
    bool t = false;
    EXPECT_EQ(Paths(List(".", 3, 3, &t)), (std::vector<std::string>{".hidden", "B", "B/z"}));
    EXPECT_TRUE(t);
    EXPECT_EQ(List(".", 3, 8, &t).size(), 8u);
    EXPECT_FALSE(t) << "exactly max_entries entries is not truncated";
    EXPECT_EQ(List(".", 3, 7, &t).size(), 7u);
    EXPECT_TRUE(t);
}

TEST_F(ListTest, LimitsAndErrors)
{
    int rc = 0;
    List(".", WS_LIST_DEPTH_MAX + 1, 0, nullptr, &rc);
    EXPECT_EQ(rc, -WS_ELIMIT);
    List(".", 1, WS_LIST_MAX_ENTRIES + 1, nullptr, &rc);
    EXPECT_EQ(rc, -WS_ELIMIT);
    List(".", WS_LIST_DEPTH_MAX, WS_LIST_MAX_ENTRIES, nullptr, &rc);
    EXPECT_EQ(rc, 0);
    List("c", 1, 0, nullptr, &rc);
    EXPECT_EQ(rc, -ENOTDIR);
    List("nothere", 1, 0, nullptr, &rc);
    EXPECT_EQ(rc, -ENOENT);
    List("..", 1, 0, nullptr, &rc);
    EXPECT_EQ(rc, -EXDEV);
    List("", 1, 0, nullptr, &rc);
    EXPECT_EQ(rc, -WS_EBADPATH);
    // A callback error stops the walk and comes back.
    int calls = 0;
    auto stop = [](void *ud, const ws_entry *) {
        ++*static_cast<int *>(ud);
        return -ECANCELED;
    };
    EXPECT_EQ(ws_list(ops_, ".", 3, 0, stop, &calls, nullptr), -ECANCELED);
    EXPECT_EQ(calls, 1);
}

// The walk keeps only as many names per directory as it could still
// report; the result must be the same as with everything kept.
TEST_F(Ops, ListOfLargeDirectoriesKeepsTheSmallestNames)
{
    for (int i = 99; i >= 0; i--) {
        char name[32];
        snprintf(name, sizeof(name), "f%02d", i);
        ASSERT_EQ(Write(name, ""), 0);
        snprintf(name, sizeof(name), "d/g%02d", i);
        ASSERT_EQ(Write(name, ""), 0);
    }
    bool t = false;
    auto v = Paths(List(".", 2, 12, &t));
    std::vector<std::string> want = {"d"};
    for (int i = 0; i < 11; i++) {
        char name[32];
        snprintf(name, sizeof(name), "d/g%02d", i);
        want.push_back(name);
    }
    EXPECT_EQ(v, want);
    EXPECT_TRUE(t);
    v = Paths(List(".", 1, 30, &t));
    ASSERT_EQ(v.size(), 30u);
    EXPECT_EQ(v[0], "d");
    EXPECT_EQ(v[1], "f00");
    EXPECT_EQ(v[29], "f28");
    EXPECT_TRUE(t);
    EXPECT_EQ(List(".", 2, 0, &t).size(), 201u);
    EXPECT_FALSE(t);
}

TEST_F(Ops, ListDeepTreeStopsAtDepthLimit)
{
    std::string p;
    for (int i = 0; i < 80; i++)
        p += i ? "/d" : "d";
    ASSERT_EQ(fs_->ops->mkdir(fs_, p.c_str(), true, 0), 0);
    EXPECT_EQ(List(".", WS_LIST_DEPTH_MAX).size(), (size_t)WS_LIST_DEPTH_MAX);
}

TEST_F(Ops, ListNeverDescendsSymlinks)
{
    ASSERT_EQ(Write("linkdir/secret", "s"), 0);
    ASSERT_EQ(Write("real/file", "f"), 0);
    auto v = List(".", 5);
    EXPECT_EQ(Paths(v), (std::vector<std::string>{"linkdir", "real", "real/file"}));
    EXPECT_EQ(v[0].type, WS_FT_SYMLINK);
    int rc = 0;
    List("linkdir", 1, 0, nullptr, &rc);
    EXPECT_EQ(rc, -WS_ESYMLINK_LEAF);
}

// ---- glob ----

class GlobTest : public Ops
{
  protected:
    void SetUp() override
    {
        Ops::SetUp();
        for (const char *p : {"src/a.c", "src/b.h", "src/sub/c.c", "src/sub/deep/d.c", "top.c",
                              "notes.txt", ".hidden.txt", ".git/config", ".git/x.c", "ab", "ac",
                              "abc", "b1", "docs/readme.txt", "src/.dot/e.c"})
            ASSERT_EQ(Write(p, "x"), 0);
    }
};

TEST_F(GlobTest, DoubleStarAnyDepth)
{
    EXPECT_EQ(Glob("**/*.c"),
              (std::vector<std::string>{"src/a.c", "src/sub/c.c", "src/sub/deep/d.c", "top.c"}));
    EXPECT_EQ(Glob("src/**/*.c"),
              (std::vector<std::string>{"src/a.c", "src/sub/c.c", "src/sub/deep/d.c"}));
    EXPECT_EQ(Glob("**/deep/*"), (std::vector<std::string>{"src/sub/deep/d.c"}));
}

TEST_F(GlobTest, TrailingDoubleStarIncludesTheDirectory)
{
    EXPECT_EQ(Glob("src/**"),
              (std::vector<std::string>{"src", "src/a.c", "src/b.h", "src/sub", "src/sub/c.c",
                                        "src/sub/deep", "src/sub/deep/d.c"}));
}

TEST_F(GlobTest, StarStaysInOneComponent)
{
    EXPECT_EQ(Glob("*.txt"), (std::vector<std::string>{"notes.txt"}));
    EXPECT_EQ(Glob("*/*.txt"), (std::vector<std::string>{"docs/readme.txt"}));
    EXPECT_EQ(Glob("*.c", "src"), (std::vector<std::string>{"src/a.c"}));
    EXPECT_EQ(Glob("sub/*.c", "./src/"), (std::vector<std::string>{"src/sub/c.c"}));
}

TEST_F(GlobTest, DotfilesNeedALiteralDot)
{
    EXPECT_EQ(Glob(".*"), (std::vector<std::string>{".git", ".hidden.txt"}));
    EXPECT_EQ(Glob(".git/*"), (std::vector<std::string>{".git/config", ".git/x.c"}));
    EXPECT_EQ(Glob("?hidden.txt"), (std::vector<std::string>{}));
    EXPECT_EQ(Glob("[.]hidden.txt"), (std::vector<std::string>{}));
    EXPECT_EQ(Glob("src/.*/*.c"), (std::vector<std::string>{"src/.dot/e.c"}));
}

TEST_F(GlobTest, CharacterClassesAndQuestionMark)
{
    EXPECT_EQ(Glob("[ab]?"), (std::vector<std::string>{"ab", "ac", "b1"}));
    EXPECT_EQ(Glob("[!a]?"), (std::vector<std::string>{"b1"}));
    EXPECT_EQ(Glob("a[[:alpha:]]"), (std::vector<std::string>{"ab", "ac"}));
    EXPECT_EQ(Glob("ab\\c"), (std::vector<std::string>{"abc"}));
}

TEST_F(GlobTest, BadPatterns)
{
    int rc = 0;
    for (std::string p : {"[ab", "a/[b/c]", "abc\\", "/abs", "", "src/../x", "./"}) {
        Glob(p, "", 0, nullptr, &rc);
        EXPECT_EQ(rc, -WS_EBADPATTERN) << "'" << p << "'";
    }
    Glob(std::string(WS_GLOB_PATTERN_MAX + 1, 'a'), "", 0, nullptr, &rc);
    EXPECT_EQ(rc, -WS_EBADPATTERN);
    Glob(std::string(WS_GLOB_PATTERN_MAX, '*'), "", 0, nullptr, &rc);
    EXPECT_EQ(rc, 0);
    Glob("*", "", WS_LIST_MAX_ENTRIES + 1, nullptr, &rc);
    EXPECT_EQ(rc, -WS_ELIMIT);
    Glob("*", "../x", 0, nullptr, &rc);
    EXPECT_EQ(rc, -EXDEV);
    Glob("*", "notes.txt", 0, nullptr, &rc);
    EXPECT_EQ(rc, -ENOTDIR);
}

TEST_F(GlobTest, MaxResultsTruncates)
{
    bool t = false;
    EXPECT_EQ(Glob("**/*.c", "", 2, &t), (std::vector<std::string>{"src/a.c", "src/sub/c.c"}));
    EXPECT_TRUE(t);
    EXPECT_EQ(Glob("**/*.c", "", 4, &t).size(), 4u);
    EXPECT_FALSE(t);
}

TEST_F(Ops, GlobMatchesSymlinksByNameOnly)
{
    ASSERT_EQ(Write("linkdir/secret.c", "s"), 0);
    ASSERT_EQ(Write("linkfile.c", "s"), 0);
    ASSERT_EQ(Write("real/ok.c", "s"), 0);
    std::vector<Entry> v;
    bool t = true;
    ASSERT_EQ(ws_glob(ops_, ".", "**/*.c", 0, CollectEntry, &v, &t), 0);
    EXPECT_EQ(Paths(v), (std::vector<std::string>{"linkfile.c", "real/ok.c"}));
    EXPECT_EQ(v[0].type, WS_FT_SYMLINK);
    v.clear();
    ASSERT_EQ(ws_glob(ops_, ".", "link*", 0, CollectEntry, &v, &t), 0);
    EXPECT_EQ(Paths(v), (std::vector<std::string>{"linkdir", "linkfile.c"}));
}

TEST(GlobMatch, Cases)
{
    EXPECT_EQ(ws_glob_match("**/*.c", "a/b/c.c"), 1);
    EXPECT_EQ(ws_glob_match("**/*.c", "c.c"), 1);
    EXPECT_EQ(ws_glob_match("**/*.c", "a/.b/c.c"), 0);
    EXPECT_EQ(ws_glob_match("*.c", "a/b.c"), 0);
    EXPECT_EQ(ws_glob_match("a/**", "a"), 1);
    EXPECT_EQ(ws_glob_match("a/**", "a/b/c"), 1);
    EXPECT_EQ(ws_glob_match("a/**/b", "a/b"), 1);
    EXPECT_EQ(ws_glob_match("a/**/b", "a/x/y/b"), 1);
    EXPECT_EQ(ws_glob_match("a/**/**/b", "a/x/b"), 1);
    EXPECT_EQ(ws_glob_match("**", ".x"), 0);
    EXPECT_EQ(ws_glob_match("x?z", "x/z"), 0);
    EXPECT_EQ(ws_glob_match("[ab]", "b"), 1);
    EXPECT_EQ(ws_glob_match("[ab", "a"), -WS_EBADPATTERN);
}

// ---- grep ----

class GrepTest : public Ops
{
  protected:
    void SetUp() override
    {
        Ops::SetUp();
        ASSERT_EQ(Write("a.txt", "hello\nworld\nhello world\n"), 0);
        ASSERT_EQ(Write("sub/b.txt", "nothing\nHELLO there\n"), 0);
        ASSERT_EQ(Write("sub/c.md", "hello markdown"), 0);
    }
};

TEST_F(GrepTest, MatchesWithLineNumbers)
{
    struct ws_grep_summary sum = {};
    auto v = GrepSimple("hello", &sum);
    EXPECT_EQ(v, (std::vector<Match>{{"a.txt", 1, "hello", false},
                                     {"a.txt", 3, "hello world", false},
                                     {"sub/c.md", 1, "hello markdown", false}}));
    EXPECT_EQ(sum.files_scanned, 3u);
    EXPECT_EQ(sum.matches, 3u);
    EXPECT_FALSE(sum.truncated);
    EXPECT_EQ(sum.limited_files, 0u);
}

TEST_F(GrepTest, IgnoreCase)
{
    ws_grep_request req = {};
    req.pattern = "HeLLo";
    req.ignore_case = true;
    auto v = Grep(req);
    ASSERT_EQ(v.size(), 4u);
    EXPECT_EQ(v[2], (Match{"sub/b.txt", 2, "HELLO there", false}));
    req.ignore_case = false;
    EXPECT_TRUE(Grep(req).empty());
}

TEST_F(GrepTest, IncludeFiltersOnTheWorkspacePath)
{
    ws_grep_request req = {};
    req.pattern = "hello";
    req.ignore_case = true;
    req.include = "**/*.txt";
    auto v = Grep(req);
    ASSERT_EQ(v.size(), 3u);
    EXPECT_EQ(v[2].path, "sub/b.txt");
    req.include = "*.txt";
    EXPECT_EQ(Grep(req).size(), 2u) << "'*' does not cross '/'";
    req.include = "sub/*.md";
    req.path = "sub";
    v = Grep(req);
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].path, "sub/c.md");
    req.include = "[bad";
    int rc = 0;
    ws_diag d = {};
    Grep(req, nullptr, 0, &rc, &d);
    EXPECT_EQ(rc, -WS_EBADPATTERN);
    EXPECT_EQ(Meta(d, "field"), "include");
}

TEST_F(GrepTest, PathCanNameOneFileOrASubtree)
{
    ws_grep_request req = {};
    req.pattern = "hello";
    req.path = "a.txt";
    struct ws_grep_summary sum = {};
    auto v = Grep(req, &sum);
    EXPECT_EQ(v.size(), 2u);
    EXPECT_EQ(sum.files_scanned, 1u);
    req.path = "sub";
    v = Grep(req);
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].path, "sub/c.md");
    int rc = 0;
    req.path = "nothere";
    Grep(req, nullptr, 0, &rc);
    EXPECT_EQ(rc, -ENOENT);
    req.path = "../x";
    Grep(req, nullptr, 0, &rc);
    EXPECT_EQ(rc, -EXDEV);
}

TEST_F(GrepTest, MaxDepth)
{
    ws_grep_request req = {};
    req.pattern = "hello";
    req.max_depth = 1;
    auto v = Grep(req);
    ASSERT_EQ(v.size(), 2u);
    EXPECT_EQ(v[1].path, "a.txt");
    req.max_depth = 2;
    EXPECT_EQ(Grep(req).size(), 3u);
}

TEST_F(GrepTest, MaxMatchesTruncates)
{
    ws_grep_request req = {};
    req.pattern = "hello";
    req.max_matches = 2;
    struct ws_grep_summary sum = {};
    auto v = Grep(req, &sum);
    EXPECT_EQ(v.size(), 2u);
    EXPECT_TRUE(sum.truncated);
    EXPECT_EQ(sum.matches, 2u);
    req.max_matches = 3;
    v = Grep(req, &sum);
    EXPECT_EQ(v.size(), 3u);
    EXPECT_FALSE(sum.truncated) << "exactly max_matches is not truncated";
}

TEST_F(GrepTest, LimitsAndBadPatterns)
{
    ws_grep_request req = {};
    int rc = 0;
    ws_diag d = {};
    req.pattern = "ab(cd";
    Grep(req, nullptr, 0, &rc, &d);
    EXPECT_EQ(rc, -WS_EBADPATTERN);
    EXPECT_EQ(Meta(d, "offset"), "5");
    std::string big(WS_GREP_PATTERN_MAX + 1, 'a');
    req.pattern = big.c_str();
    Grep(req, nullptr, 0, &rc);
    EXPECT_EQ(rc, -WS_EBADPATTERN);
    big.pop_back();
    req.pattern = big.c_str();
    Grep(req, nullptr, 0, &rc);
    EXPECT_EQ(rc, 0) << "exactly at the cap";
    req.pattern = "x";
    req.max_matches = WS_GREP_MAX_MATCHES + 1;
    Grep(req, nullptr, 0, &rc);
    EXPECT_EQ(rc, -WS_ELIMIT);
    req.max_matches = 0;
    req.max_depth = WS_LIST_DEPTH_MAX + 1;
    Grep(req, nullptr, 0, &rc);
    EXPECT_EQ(rc, -WS_ELIMIT);
}

TEST_F(Ops, GrepSkipsBinaryFiles)
{
    std::string bin = "match me\n";
    bin += std::string(1, '\0');
    ASSERT_EQ(Write("bin", bin), 0);
    std::string late(WS_GREP_BINARY_PROBE, 'x');
    late += std::string("\nmatch me\n") + '\0';
    ASSERT_EQ(Write("late", late), 0);
    struct ws_grep_summary sum = {};
    auto v = GrepSimple("match me", &sum);
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].path, "late") << "a NUL past the probe does not make a file binary";
    EXPECT_EQ(v[0].line, 2u);
    EXPECT_EQ(sum.binary_files_skipped, 1u);
    EXPECT_EQ(sum.files_scanned, 1u);
}

TEST_F(Ops, GrepIsPerLine)
{
    ASSERT_EQ(Write("f", "a\nb\nx\n\nlast"), 0);
    EXPECT_TRUE(GrepSimple("a\\sb").empty()) << "no match across lines";
    EXPECT_TRUE(GrepSimple("a\\nb").empty());
    EXPECT_TRUE(GrepSimple("[^abx\\n]").size() == 1u) << "only 'last' has other characters";
    EXPECT_EQ(GrepSimple("^$"), (std::vector<Match>{{"f", 4, "", false}}));
    EXPECT_EQ(GrepSimple("t$"), (std::vector<Match>{{"f", 5, "last", false}}));
    // Constructs that look past the line's end behave as on one line.
    ASSERT_EQ(Write("g", "foo\nbar\n"), 0);
    EXPECT_TRUE(GrepSimple("foo(?=\\s)").empty());
    EXPECT_TRUE(GrepSimple("foo(?=\\nbar)").empty());
    EXPECT_TRUE(GrepSimple("(?<=foo\\n)bar").empty());
    EXPECT_TRUE(GrepSimple("foo\\n\\Kbar").empty());
    EXPECT_EQ(GrepSimple("\\Abar").size(), 1u) << "\\A is the start of each line";
    EXPECT_EQ(GrepSimple("foo\\z").size(), 1u);
    EXPECT_EQ(GrepSimple("(*CR)foo$").size(), 1u);
    ASSERT_EQ(fs_->ops->remove(fs_, "g", false, nullptr), 0);
    // An empty pattern matches every line, and no line after the last
    // newline.
    ASSERT_EQ(Write("f", "1\n2\n"), 0);
    EXPECT_EQ(GrepSimple("").size(), 2u);
    EXPECT_EQ(GrepSimple("$").size(), 2u);
    // \B matches only at the very end (after the last newline), which is
    // not a line.
    EXPECT_TRUE(GrepSimple("\\B").empty());
}

TEST_F(Ops, GrepLineNumbersAcrossChunks)
{
    std::string big;
    for (int i = 1; i <= 200000; i++)
        big += "line " + std::to_string(i) + "\n";
    ASSERT_EQ(Write("big", big), 0);
    auto v = GrepSimple("^line (1|77777|131072|199999)$");
    ASSERT_EQ(v.size(), 4u);
    EXPECT_EQ(v[0].line, 1u);
    EXPECT_EQ(v[1].line, 77777u);
    EXPECT_EQ(v[1].text, "line 77777");
    EXPECT_EQ(v[2].line, 131072u);
    EXPECT_EQ(v[3].line, 199999u);
    // Every line matches: numbers must run 1..N without a gap.
    ws_grep_request req = {};
    req.pattern = "^line";
    req.max_matches = WS_GREP_MAX_MATCHES;
    v = Grep(req);
    ASSERT_EQ(v.size(), 100000u);
    for (size_t i = 0; i < v.size(); i++)
        ASSERT_EQ(v[i].line, i + 1);
}

TEST_F(Ops, GrepLongLines)
{
    std::string cut(WS_GREP_LINE_MAX + 100, 'c');
    std::string huge(300 * 1024, 'h');
    // Line 5 starts a chunk (128 KiB) and its needle straddles the end of
    // the first window.
    std::string straddle(128 * 1024 - 3, 's');
    std::string content = "first\n" + cut + "needle\n" + huge + "needle" + huge + "\n" +
                          "after needle\n" + straddle + "needle" + std::string(200000, 's') + "\n" +
                          huge + "\nend needle";
    ASSERT_EQ(Write("f", content), 0);
    auto v = GrepSimple("needle");
    ASSERT_EQ(v.size(), 5u);
    EXPECT_EQ(v[0].line, 2u);
    EXPECT_TRUE(v[0].truncated);
    EXPECT_EQ(v[0].text, std::string(WS_GREP_LINE_MAX, 'c'));
    EXPECT_EQ(v[1].line, 3u);
    EXPECT_TRUE(v[1].truncated);
    EXPECT_EQ(v[1].text, std::string(WS_GREP_LINE_MAX, 'h'));
    EXPECT_EQ(v[2], (Match{"f", 4, "after needle", false}));
    EXPECT_EQ(v[3].line, 5u) << "found across a window boundary";
    EXPECT_EQ(v[4], (Match{"f", 7, "end needle", false}));
    // Anchors inside a long line respect its real start and end (lines 3
    // and 6 start with 'h' and end with 'h').
    v = GrepSimple("^h");
    ASSERT_EQ(v.size(), 2u);
    EXPECT_EQ(v[0].line, 3u);
    EXPECT_EQ(v[1].line, 6u);
    v = GrepSimple("h$");
    ASSERT_EQ(v.size(), 2u);
    EXPECT_EQ(v[0].line, 3u);
    EXPECT_EQ(v[1].line, 6u);
    EXPECT_EQ(GrepSimple("^s").size(), 1u);
    EXPECT_TRUE(GrepSimple("^needle").empty());
    v = GrepSimple("needle$");
    ASSERT_EQ(v.size(), 3u);
    EXPECT_EQ(v[0].line, 2u);
    EXPECT_EQ(v[1].line, 4u);
    EXPECT_EQ(v[2].line, 7u);
}

TEST_F(Ops, GrepAnchorsInLaterWindowsOfALongLine)
{
    // Later windows of a long line neither start nor end the line.
    ASSERT_EQ(Write("f", "b" + std::string(400 * 1024, 'a') + "b\n"), 0);
    EXPECT_TRUE(GrepSimple("^a").empty());
    EXPECT_TRUE(GrepSimple("a$").empty());
    EXPECT_EQ(GrepSimple("ab$").size(), 1u);
    EXPECT_EQ(GrepSimple("^ba").size(), 1u);
}

TEST_F(Ops, GrepCatastrophicPatternHitsTheLimit)
{
    ASSERT_EQ(Write("evil", "ok\n" + std::string(5000, 'a') + "b\nalso aaa\n"), 0);
    ASSERT_EQ(Write("fine", "aaaa\n"), 0);
    auto start = std::chrono::steady_clock::now();
    struct ws_grep_summary sum = {};
    auto v = GrepSimple("(a+)+$", &sum);
    auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(secs, 10.0);
    EXPECT_EQ(sum.limited_files, 1u);
    EXPECT_EQ(v, (std::vector<Match>{{"fine", 1, "aaaa", false}}))
        << "the limited file stops, the search goes on";
    EXPECT_EQ(sum.files_scanned, 2u);
}

TEST_F(Ops, GrepResumesInBatches)
{
    std::string s;
    for (int i = 0; i < 50; i++)
        s += "m" + std::to_string(i) + "\n";
    ASSERT_EQ(Write("a", s), 0);
    ASSERT_EQ(Write("b/c", s), 0);
    ws_grep_request req = {};
    req.pattern = "m";
    auto all = Grep(req);
    ASSERT_EQ(all.size(), 100u);

    ws_grep *g = nullptr;
    ASSERT_EQ(ws_grep_start(ops_, &req, nullptr, &g), 0);
    std::vector<Match> v;
    int r, calls = 0;
    while ((r = ws_grep_next(g, 7, CollectMatch, &v)) == 1) {
        calls++;
        EXPECT_LE(v.size(), (size_t)calls * 7);
    }
    EXPECT_EQ(r, 0);
    EXPECT_EQ(calls, 100 / 7);
    EXPECT_EQ(v, all);
    EXPECT_EQ(ws_grep_next(g, 7, CollectMatch, &v), 0) << "done stays done";
    ws_grep_free(g);
    ws_grep_free(nullptr);
}

TEST_F(Ops, GrepHandlesUtf8AndInvalidBytes)
{
    ASSERT_EQ(Write("u", "Ärger über\n\xff\xfe plain abc\n"), 0);
    ws_grep_request req = {};
    req.pattern = "äRGER";
    req.ignore_case = true;
    auto v = Grep(req);
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].line, 1u);
    // Bytes that are not UTF-8 match nothing (as in GNU grep under a UTF-8
    // locale) but do not stop the rest of the line from matching.
    EXPECT_TRUE(GrepSimple("^..plain").empty());
    v = GrepSimple("plain abc$");
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].line, 2u);
    EXPECT_EQ(v[0].text, "\xff\xfe plain abc");
}

TEST_F(Ops, GrepNeverFollowsSymlinks)
{
    ASSERT_EQ(Write("linkdir/secret", "needle"), 0);
    ASSERT_EQ(Write("linkfile", "needle"), 0);
    ASSERT_EQ(Write("real", "needle"), 0);
    auto v = GrepSimple("needle");
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].path, "real");
    ws_grep_request req = {};
    req.pattern = "needle";
    req.path = "linkfile";
    int rc = 0;
    Grep(req, nullptr, 0, &rc);
    EXPECT_EQ(rc, -WS_ESYMLINK_LEAF);
}

} // namespace
