// Work budgets of the generic file operations (server/vfs/ops.h): what a
// hostile tree, file or pattern can make one request do, and how a cancel
// or a deadline stops it.
//
// Three file systems: the memory vfs behind a decorator that counts reads
// and runs hooks at chosen moments (a replace "by a command" between the
// hash and the commit), a synthetic one whose huge directories cost no
// memory of their own (so the walk's own memory can be measured), and the
// posix vfs for a sparse file.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "server/base/errors.h"
#include "server/base/time.h"
#include "server/posix/fs.h"
#include "server/providers/memory.h"
#include "server/vfs/ops.h"
#include "server/vfs/vfs.h"
#include "server/work/pool.h"
}

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#if defined(__SANITIZE_ADDRESS__)
extern "C" size_t __sanitizer_get_current_allocated_bytes(void);
#endif

namespace
{

const char kEmptySha[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

int64_t ThreadCpuNs()
{
    return ws_clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

// Bytes the program has allocated and not freed, as the allocator in use
// counts them (glibc's mmapped chunks included).
size_t Allocated()
{
#if defined(__SANITIZE_ADDRESS__)
    return __sanitizer_get_current_allocated_bytes();
#else
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
#endif
}

std::string Meta(const ws_diag &d, const std::string &key)
{
    for (int i = 0; i < d.n_meta; i++)
        if (key == d.key[i])
            return d.value[i];
    return "<none>";
}

// ---- a decorator over any vfs: counts and hooks ----
//
// Files opened by path are remembered, so a hook can run when one of them
// has been read to its end (the moment between an if_match hash, or an
// edit's read, and the commit).

struct Deco {
    ws_vfs base;
    ws_vfs *inner;
};

const ws_vfs_ops *g_in;
std::atomic<uint64_t> g_pread_bytes{0};
std::atomic<uint64_t> g_opens{0}; // open_read by path
std::mutex g_mu;
std::map<ws_vfs_file *, std::string> g_paths;
// Called (outside g_mu) when pread hits the end of a file opened by path.
std::function<void(const std::string &)> g_on_eof;
// Called after every pread, with the bytes read from that file so far.
std::function<void(uint64_t)> g_on_pread;
std::map<ws_vfs_file *, uint64_t> g_read_so_far;
// Reports every mtime as 0: a clock too coarse to tell two writes apart.
bool g_freeze_mtime = false;

ws_vfs *In(ws_vfs *fs)
{
    return reinterpret_cast<Deco *>(fs)->inner;
}

int DStat(ws_vfs *fs, const char *path, ws_stat *st)
{
    int r = g_in->stat(In(fs), path, st);
    if (r == 0 && g_freeze_mtime)
        st->mtime_ns = 0;
    return r;
}
int DOpendir(ws_vfs *fs, const char *path, ws_vfs_dir **ret)
{
    return g_in->opendir(In(fs), path, ret);
}
int DOpendirAt(ws_vfs_dir *dir, const char *name, ws_vfs_dir **ret)
{
    return g_in->opendir_at(dir, name, ret);
}
int DReaddir(ws_vfs_dir *dir, ws_dirent *e)
{
    return g_in->readdir(dir, e);
}
int DStatAt(ws_vfs_dir *dir, const char *name, ws_stat *st)
{
    int r = g_in->stat_at(dir, name, st);
    if (r == 0 && g_freeze_mtime)
        st->mtime_ns = 0;
    return r;
}
void DClosedir(ws_vfs_dir *dir)
{
    g_in->closedir(dir);
}
int DOpenRead(ws_vfs *fs, const char *path, ws_vfs_file **f, ws_stat *st)
{
    int r = g_in->open_read(In(fs), path, f, st);
    if (r < 0)
        return r;
    if (g_freeze_mtime)
        st->mtime_ns = 0;
    g_opens++;
    std::lock_guard<std::mutex> l(g_mu);
    g_paths[*f] = path;
    return r;
}
int DOpenReadAt(ws_vfs_dir *dir, const char *name, ws_vfs_file **f, ws_stat *st)
{
    return g_in->open_read_at(dir, name, f, st);
}
ssize_t DPread(ws_vfs_file *f, void *buf, size_t len, uint64_t off)
{
    ssize_t n = g_in->pread(f, buf, len, off);
    std::string path;
    uint64_t so_far = 0;
    if (n > 0)
        g_pread_bytes += (uint64_t)n;
    {
        std::lock_guard<std::mutex> l(g_mu);
        auto it = g_paths.find(f);
        if (it != g_paths.end())
            path = it->second;
        so_far = g_read_so_far[f] += n > 0 ? (uint64_t)n : 0;
    }
    if (n > 0 && g_on_pread)
        g_on_pread(so_far);
    if (n == 0 && !path.empty() && g_on_eof)
        g_on_eof(path);
    return n;
}
void DClose(ws_vfs_file *f)
{
    {
        std::lock_guard<std::mutex> l(g_mu);
        g_paths.erase(f);
        g_read_so_far.erase(f);
    }
    g_in->close(f);
}
int DWriteBegin(ws_vfs *fs, const char *path, const ws_write_opts *o, ws_vfs_writer **w)
{
    return g_in->write_begin(In(fs), path, o, w);
}
int DWrite(ws_vfs_writer *w, const void *buf, size_t len)
{
    return g_in->write(w, buf, len);
}
int DWriteCommit(ws_vfs_writer *w, ws_stat *st)
{
    return g_in->write_commit(w, st);
}
void DWriteAbort(ws_vfs_writer *w)
{
    g_in->write_abort(w);
}
int DMkdir(ws_vfs *fs, const char *path, bool parents, uint32_t mode)
{
    return g_in->mkdir(In(fs), path, parents, mode);
}
int DRemove(ws_vfs *fs, const char *path, bool recursive, uint64_t *removed)
{
    return g_in->remove(In(fs), path, recursive, removed);
}
int DMove(ws_vfs *fs, const char *from, const char *to, bool replace)
{
    return g_in->move(In(fs), from, to, replace);
}
void DDestroy(ws_vfs *)
{
}

const ws_vfs_ops kDecoOps = {
    DStat,
    DOpendir,
    DOpendirAt,
    DReaddir,
    DStatAt,
    DClosedir,
    DOpenRead,
    DOpenReadAt,
    DPread,
    DClose,
    DWriteBegin,
    DWrite,
    DWriteCommit,
    DWriteAbort,
    DMkdir,
    DRemove,
    DMove,
    DDestroy,
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

// ---- a synthetic tree: huge directories that hold nothing ----
//
// "." holds `files` empty regular files and `dirs` directories "dNNNNN",
// each holding `per_dir` empty files. File names are "fNNNNNNN" followed by
// `pad` bytes of 'x', so the names a walk keeps are what its memory holds.

struct SynthConfig {
    unsigned files = 0;
    unsigned dirs = 0;
    unsigned per_dir = 0;
    unsigned pad = 0;
};

SynthConfig g_synth;
std::atomic<uint64_t> g_names_read{0};
// Called after each name readdir returns, with the count so far.
std::function<void(uint64_t)> g_on_name;
// Sampled every 512 names read: the most the program had allocated.
std::atomic<size_t> g_peak{0};

struct SynthDir {
    bool top;
    unsigned n, idx;
    char name[512];
};

struct SynthFile {
    int unused;
};

std::string FileName(unsigned i)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "f%07u", i);
    return buf + std::string(g_synth.pad, 'x');
}

int SStat(ws_vfs *, const char *path, ws_stat *st)
{
    *st = {};
    st->type = strcmp(path, ".") == 0 || path[0] == 'd' ? WS_FT_DIRECTORY : WS_FT_REGULAR;
    st->nlink = 1;
    return 0;
}
int OpenSynth(bool top, ws_vfs_dir **ret)
{
    auto *d = new SynthDir{};
    d->top = top;
    d->n = top ? g_synth.files + g_synth.dirs : g_synth.per_dir;
    *ret = reinterpret_cast<ws_vfs_dir *>(d);
    return 0;
}
int SOpendir(ws_vfs *, const char *path, ws_vfs_dir **ret)
{
    if (strcmp(path, ".") != 0)
        return -ENOENT;
    return OpenSynth(true, ret);
}
int SOpendirAt(ws_vfs_dir *dir, const char *name, ws_vfs_dir **ret)
{
    if (!reinterpret_cast<SynthDir *>(dir)->top || name[0] != 'd')
        return -ENOTDIR;
    return OpenSynth(false, ret);
}
int SReaddir(ws_vfs_dir *dir, ws_dirent *e)
{
    auto *d = reinterpret_cast<SynthDir *>(dir);
    if (d->idx >= d->n)
        return 0;
    // Highest first: a real directory lists in no useful order.
    unsigned i = d->n - 1 - d->idx++;
    bool is_dir = d->top && i >= g_synth.files;
    std::string name;
    if (is_dir) {
        char buf[16];
        snprintf(buf, sizeof(buf), "d%05u", i - g_synth.files);
        name = buf;
    } else {
        name = FileName(i);
    }
    snprintf(d->name, sizeof(d->name), "%s", name.c_str());
    e->name = d->name;
    e->name_len = strlen(d->name);
    e->type = is_dir ? WS_FT_DIRECTORY : WS_FT_REGULAR;
    uint64_t n = ++g_names_read;
    if (n % 512 == 0) {
        size_t now = Allocated(), peak = g_peak;
        while (now > peak && !g_peak.compare_exchange_weak(peak, now))
            ;
    }
    if (g_on_name)
        g_on_name(n);
    return 1;
}
int SStatAt(ws_vfs_dir *, const char *name, ws_stat *st)
{
    return SStat(nullptr, name, st);
}
void SClosedir(ws_vfs_dir *dir)
{
    delete reinterpret_cast<SynthDir *>(dir);
}
int SOpenRead(ws_vfs *, const char *path, ws_vfs_file **f, ws_stat *st)
{
    if (path[0] == 'd' || strcmp(path, ".") == 0)
        return -EISDIR;
    *f = reinterpret_cast<ws_vfs_file *>(new SynthFile{});
    *st = {};
    st->type = WS_FT_REGULAR;
    st->nlink = 1;
    return 0;
}
int SOpenReadAt(ws_vfs_dir *, const char *name, ws_vfs_file **f, ws_stat *st)
{
    return SOpenRead(nullptr, name, f, st);
}
ssize_t SPread(ws_vfs_file *, void *, size_t, uint64_t)
{
    return 0;
}
void SClose(ws_vfs_file *f)
{
    delete reinterpret_cast<SynthFile *>(f);
}
int SWriteBegin(ws_vfs *, const char *, const ws_write_opts *, ws_vfs_writer **)
{
    return -EROFS;
}
int SWrite(ws_vfs_writer *, const void *, size_t)
{
    return -EROFS;
}
int SWriteCommit(ws_vfs_writer *, ws_stat *)
{
    return -EROFS;
}
void SWriteAbort(ws_vfs_writer *)
{
}
int SMkdir(ws_vfs *, const char *, bool, uint32_t)
{
    return -EROFS;
}
int SRemove(ws_vfs *, const char *, bool, uint64_t *)
{
    return -EROFS;
}
int SMove(ws_vfs *, const char *, const char *, bool)
{
    return -EROFS;
}
void SDestroy(ws_vfs *)
{
}

const ws_vfs_ops kSynthOps = {
    SStat,
    SOpendir,
    SOpendirAt,
    SReaddir,
    SStatAt,
    SClosedir,
    SOpenRead,
    SOpenReadAt,
    SPread,
    SClose,
    SWriteBegin,
    SWrite,
    SWriteCommit,
    SWriteAbort,
    SMkdir,
    SRemove,
    SMove,
    SDestroy,
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

// ---- collectors ----

struct Collected {
    uint64_t n = 0;
    std::vector<std::string> paths; // the first few only
    std::function<void(uint64_t)> on_entry;
};

int CollectEntry(void *ud, const ws_entry *e)
{
    auto *c = static_cast<Collected *>(ud);
    if (c->paths.size() < 4)
        c->paths.emplace_back(e->path, e->path_len);
    c->n++;
    if (c->on_entry)
        c->on_entry(c->n);
    return 0;
}

struct Matches {
    uint64_t n = 0;
    std::function<void(uint64_t)> on_match;
};

int CollectMatch(void *ud, const ws_grep_match *)
{
    auto *m = static_cast<Matches *>(ud);
    m->n++;
    if (m->on_match)
        m->on_match(m->n);
    return 0;
}

// ---- fixtures ----

class Budget : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        ASSERT_EQ(ws_memfs_new(&mem_), 0);
        g_in = mem_->ops;
        deco_.base.ops = &kDecoOps;
        deco_.inner = mem_;
        ASSERT_EQ(ws_fsops_new(&deco_.base, &ops_), 0);
        g_pread_bytes = 0;
        g_opens = 0;
        g_on_eof = nullptr;
        g_on_pread = nullptr;
        g_freeze_mtime = false;
    }
    void TearDown() override
    {
        g_on_eof = nullptr;
        g_on_pread = nullptr;
        g_freeze_mtime = false;
        ws_fsops_free(ops_);
        mem_->ops->destroy(mem_);
    }

    int Write(const std::string &path, const std::string &data, const char *if_match = nullptr,
              uint64_t max_size = 0, const ws_budget *budget = nullptr, ws_diag *d = nullptr,
              ws_fsops *ops = nullptr)
    {
        ws_write_request req = {};
        req.path = path.c_str();
        req.opts.create_parents = true;
        req.opts.max_size = max_size;
        req.if_match = if_match;
        ws_write_session *s = nullptr;
        int r = ws_write_begin(ops ? ops : ops_, &req, d, &s);
        if (r < 0)
            return r;
        r = ws_write_append(s, data.data(), data.size(), d);
        if (r < 0) {
            ws_write_abort(s);
            return r;
        }
        ws_write_result res;
        return ws_write_commit_within(s, budget, d, &res);
    }

    // A replace that does not go through the generic layer, as a command
    // in the workspace makes one.
    void ReplaceBehindTheBack(const std::string &path, const std::string &data)
    {
        ws_write_opts o = {};
        ws_vfs_writer *w = nullptr;
        ASSERT_EQ(g_in->write_begin(mem_, path.c_str(), &o, &w), 0);
        ASSERT_EQ(g_in->write(w, data.data(), data.size()), 0);
        ws_stat st;
        ASSERT_EQ(g_in->write_commit(w, &st), 0);
    }

    // A write through the same ws_fsops from another thread, waited for
    // with a bound: were the commit lock held by the caller, it would wait
    // for the lock instead of finishing, and the bound turns that into a
    // test failure rather than a hang.
    bool WriteFromAnotherThread(const std::string &path, const std::string &data)
    {
        auto done = std::async(std::launch::async, [=] { return Write(path, data); });
        if (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
            // Let it finish once the caller lets go of the lock.
            std::thread([f = std::move(done)]() mutable { f.wait(); }).detach();
            return false;
        }
        return done.get() == 0;
    }

    std::string Read(const std::string &path)
    {
        ws_vfs_file *f = nullptr;
        ws_stat st;
        if (g_in->open_read(mem_, path.c_str(), &f, &st) < 0)
            return "<missing>";
        std::string out(st.size, '\0');
        ssize_t n = g_in->pread(f, &out[0], out.size(), 0);
        g_in->close(f);
        out.resize(n > 0 ? (size_t)n : 0);
        return out;
    }

    std::string Sha(const std::string &path)
    {
        char hex[WS_SHA256_HEX_LEN + 1];
        EXPECT_EQ(ws_sha256_file(mem_, path.c_str(), hex), 0);
        return hex;
    }

    int Edit(const std::string &path, const std::string &from, const std::string &to, bool all,
             const char *if_match, const ws_budget *budget = nullptr, ws_diag *d = nullptr,
             uint64_t max_size = 0)
    {
        ws_edit_request req = {};
        req.path = path.c_str();
        req.old_text = from.data();
        req.old_len = from.size();
        req.new_text = to.data();
        req.new_len = to.size();
        req.replace_all = all;
        req.if_match = if_match;
        req.max_size = max_size;
        req.budget = budget;
        ws_edit_result res;
        return ws_edit(ops_, &req, d, &res);
    }

    // Runs a whole grep; the last ws_grep_next result in *rc.
    Matches Grep(const std::string &pattern, const ws_budget *budget, ws_grep_summary *sum, int *rc,
                 std::function<void(uint64_t)> on_match = nullptr, unsigned batch = 0,
                 const char *path = "")
    {
        Matches m;
        m.on_match = std::move(on_match);
        ws_grep_request req = {};
        req.path = path;
        req.pattern = pattern.c_str();
        req.max_matches = WS_GREP_MAX_MATCHES;
        req.budget = budget;
        ws_grep *g = nullptr;
        *rc = ws_grep_start(ops_, &req, nullptr, &g);
        if (*rc < 0)
            return m;
        while ((*rc = ws_grep_next(g, batch, CollectMatch, &m)) == 1) {
        }
        if (sum)
            ws_grep_get_summary(g, sum);
        ws_grep_free(g);
        return m;
    }

    ws_vfs *mem_ = nullptr;
    Deco deco_ = {};
    ws_fsops *ops_ = nullptr;
};

// ---- grep's CPU budget ----

// Each line "aaa…ab" (28 a's) costs `(a|aa)+$` about ten milliseconds of
// backtracking, just under the per-line PCRE2 limit, so no line ends the
// file's scan: 100,000 of them are a quarter of an hour of work for one
// request. With a budget the request stops once its CPU time is spent,
// within about one line's cost.
TEST_F(Budget, GrepCatastrophicLinesStopAtTheCpuBudget)
{
    const std::string line = std::string(28, 'a') + "b\n";
    std::string body;
    for (int i = 0; i < 100000; i++)
        body += line;
    ASSERT_EQ(Write("cat.txt", body), 0);

    const int64_t kBudget = 200 * WS_NSEC_PER_MSEC;
    // The deadline is only a backstop, so that a search the CPU budget
    // failed to stop ends the test instead of running for minutes.
    ws_work_ctl ctl = {false, ws_mono_ms() + 15000};
    ws_budget b = {};
    b.ctl = &ctl;
    b.cpu_budget_ns = kBudget;

    ws_grep_summary sum = {};
    int rc = 0;
    int64_t cpu0 = ThreadCpuNs();
    Matches m = Grep("(a|aa)+$", &b, &sum, &rc);
    int64_t used = ThreadCpuNs() - cpu0;

    EXPECT_EQ(rc, 0) << "-ETIMEDOUT means only the backstop deadline stopped it";
    EXPECT_EQ(m.n, 0u);
    EXPECT_TRUE(sum.truncated);
    EXPECT_EQ(sum.truncated_reason, WS_TRUNC_TIME_BUDGET);
    EXPECT_STREQ(ws_trunc_reason_name(sum.truncated_reason), "time_budget");
    EXPECT_EQ(sum.limited_files, 0u) << "no line may reach the per-line limit in this test";
    EXPECT_GE(used, kBudget) << "stopped before its budget was spent";
    // One line's PCRE2 limit is about ten milliseconds; half a second is
    // generous for a loaded or sanitized run.
    EXPECT_LT(used, kBudget + 500 * WS_NSEC_PER_MSEC);
}

// PCRE2's limit holds per start position: a line of 2,000 start positions
// that each cost some milliseconds is seconds of one pcre2_match call,
// unless a call tries only some of them.
TEST_F(Budget, GrepLongLineOfExpensiveStartsStopsAtTheCpuBudget)
{
    uint32_t jit = 0;
    if (pcre2_config(PCRE2_CONFIG_JIT, &jit) < 0 || !jit)
        GTEST_SKIP() << "PCRE2 has no JIT here: each start position costs far more";
    const std::string line = std::string(2000, 'a') + "b\n";
    std::string body;
    for (int i = 0; i < 20; i++)
        body += line;
    ASSERT_EQ(Write("long.txt", body), 0);

    const int64_t kBudget = 200 * WS_NSEC_PER_MSEC;
    ws_work_ctl ctl = {false, ws_mono_ms() + 15000};
    ws_budget b = {};
    b.ctl = &ctl;
    b.cpu_budget_ns = kBudget;
    ws_grep_summary sum = {};
    int rc = 0;
    int64_t cpu0 = ThreadCpuNs();
    Grep("(?:a|aa){1,18}$", &b, &sum, &rc);
    int64_t used = ThreadCpuNs() - cpu0;
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(sum.truncated_reason, WS_TRUNC_TIME_BUDGET);
    EXPECT_EQ(sum.limited_files, 0u) << "no start position may reach the limit in this test";
    EXPECT_GE(used, kBudget);
    EXPECT_LT(used, kBudget + 500 * WS_NSEC_PER_MSEC);
}

// The budget is over the whole request: calls of a few milliseconds each,
// on different threads (as a worker pool runs them), add up to it.
TEST_F(Budget, GrepCpuBudgetSpansCallsAndThreads)
{
    const std::string slow = std::string(26, 'a') + "b\n";
    std::string body;
    for (int i = 0; i < 20000; i++)
        body += slow + "hit\n";
    ASSERT_EQ(Write("mixed.txt", body), 0);

    const int64_t kBudget = 100 * WS_NSEC_PER_MSEC;
    ws_work_ctl ctl = {false, ws_mono_ms() + 15000};
    ws_budget b = {};
    b.ctl = &ctl;
    b.cpu_budget_ns = kBudget;
    ws_grep_request req = {};
    req.path = "";
    req.pattern = "(a|aa)+$|hit";
    req.max_matches = WS_GREP_MAX_MATCHES;
    req.budget = &b;
    ws_grep *g = nullptr;
    ASSERT_EQ(ws_grep_start(ops_, &req, nullptr, &g), 0);

    Matches m;
    int rc = 1, calls = 0;
    int64_t used = 0;
    while (rc == 1) {
        // One call per thread, each reporting one match.
        std::thread t([&] {
            int64_t c0 = ThreadCpuNs();
            rc = ws_grep_next(g, 1, CollectMatch, &m);
            used += ThreadCpuNs() - c0;
        });
        t.join();
        calls++;
    }
    ws_grep_summary sum = {};
    ws_grep_get_summary(g, &sum);
    ws_grep_free(g);

    EXPECT_EQ(rc, 0);
    EXPECT_EQ(sum.truncated_reason, WS_TRUNC_TIME_BUDGET);
    EXPECT_GT(calls, 5) << "each call should be far below the budget";
    EXPECT_LT(m.n, 20000u);
    EXPECT_GE(used, kBudget);
    EXPECT_LT(used, kBudget + 500 * WS_NSEC_PER_MSEC);
}

// Under a budget each pcre2_match call tries a bounded number of start
// positions and a whole-chunk call has a lower limit per start position;
// what a search finds must not change.
TEST_F(Budget, GrepFindsTheSameUnderABudget)
{
    const char *pieces[] = {
        "foo ", "bar ", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xff", "\x80", "ab",
        "x",    "y",    " ",        "ba",           "aaaaaaaaaaaa"};
    unsigned seed = 7;
    std::string body;
    for (int line = 0; line < 6000; line++) {
        int n = rand_r(&seed) % 120;
        for (int i = 0; i < n; i++)
            body += pieces[rand_r(&seed) % (sizeof(pieces) / sizeof(pieces[0]))];
        body += "\n";
    }
    ASSERT_GT(body.size(), 256u << 10) << "more than one chunk";
    ASSERT_EQ(Write("t/text.txt", body), 0);
    // One line longer than a chunk, matched in windows of its own.
    std::string long_line;
    while (long_line.size() < (300u << 10))
        long_line += "\xe4\xb8\xad foo x";
    ASSERT_EQ(Write("t/long.txt", "start\n" + long_line + "bar\nend\n"), 0);

    ws_work_ctl ctl = {};
    ws_budget b = {};
    b.ctl = &ctl;
    b.cpu_budget_ns = 600 * WS_NSEC_PER_SEC;
    for (const char *pattern :
         {"foo", "\\bbar\\b", "\xc3\xa9+", "\xe4\xb8\xad.", "^x", "y$", "(?<=a)b", "a(?=b)",
          "[^\\x00-\\x7f]{2}", "\\w{5,}$", "foo.*bar", "^$", "x*", "(a|aa)+$", "\\Gab"}) {
        struct Line {
            std::string path;
            uint64_t line;
            bool operator==(const Line &o) const
            {
                return path == o.path && line == o.line;
            }
        };
        std::vector<Line> runs[2];
        ws_grep_summary sums[2] = {};
        for (int with = 0; with < 2; with++) {
            ws_grep_request req = {};
            req.path = "t";
            req.pattern = pattern;
            req.max_matches = WS_GREP_MAX_MATCHES;
            req.budget = with ? &b : nullptr;
            ws_grep *g = nullptr;
            ASSERT_EQ(ws_grep_start(ops_, &req, nullptr, &g), 0) << pattern;
            auto collect = [](void *ud, const ws_grep_match *m) {
                static_cast<std::vector<Line> *>(ud)->push_back(
                    {std::string(m->path, m->path_len), m->line_number});
                return 0;
            };
            int rc;
            while ((rc = ws_grep_next(g, 100, collect, &runs[with])) == 1) {
            }
            EXPECT_EQ(rc, 0) << pattern;
            ws_grep_get_summary(g, &sums[with]);
            ws_grep_free(g);
        }
        EXPECT_GT(runs[0].size(), 0u) << pattern;
        EXPECT_TRUE(runs[0] == runs[1]) << pattern << ": " << runs[0].size()
                                        << " lines without a budget, " << runs[1].size() << " with";
        EXPECT_EQ(sums[0].files_scanned, sums[1].files_scanned) << pattern;
        EXPECT_EQ(sums[0].limited_files, sums[1].limited_files) << pattern;
        EXPECT_FALSE(sums[1].truncated) << pattern;
    }
}

// A cancel from the caller's own callback is seen when the next call
// starts, before any more work.
TEST_F(Budget, GrepStopsAtTheCallAfterACancel)
{
    std::string body;
    for (int i = 0; i < 10000; i++)
        body += "match me\n";
    ASSERT_EQ(Write("a/f.txt", body), 0);

    ws_work_ctl ctl = {};
    ws_budget b = {};
    b.ctl = &ctl;
    uint64_t at_cancel = 0;
    ws_grep_summary sum = {};
    int rc = 0;
    Matches m = Grep(
        "match", &b, &sum, &rc,
        [&](uint64_t n) {
            if (n == 100) {
                ws_work_ctl_cancel(&ctl);
                at_cancel = n;
            }
        },
        1);
    EXPECT_EQ(rc, -ECANCELED);
    EXPECT_EQ(at_cancel, 100u);
    EXPECT_EQ(m.n, at_cancel) << "lines matched after the cancel";
}

// A cancel from another thread stops a search whose every line is
// expensive (minutes of work without it).
TEST_F(Budget, GrepCatastrophicLinesStopAtACancelFromAnotherThread)
{
    const std::string line = std::string(28, 'a') + "b\n";
    std::string body;
    for (int i = 0; i < 100000; i++)
        body += line;
    ASSERT_EQ(Write("cat.txt", body), 0);

    // The deadline is only a backstop: -ETIMEDOUT means the cancel was
    // not seen.
    ws_work_ctl ctl = {false, ws_mono_ms() + 15000};
    ws_budget b = {};
    b.ctl = &ctl;
    std::atomic<bool> reading{false};
    g_on_pread = [&](uint64_t) { reading = true; };
    std::thread canceller([&] {
        while (!reading)
            std::this_thread::yield();
        ws_work_ctl_cancel(&ctl);
    });
    int rc = 0;
    Matches m = Grep("(a|aa)+$", &b, nullptr, &rc);
    canceller.join();
    g_on_pread = nullptr;
    EXPECT_EQ(rc, -ECANCELED);
    EXPECT_EQ(m.n, 0u);
}

TEST_F(Budget, GrepCancelIsTheAnswerToEveryLaterCall)
{
    ASSERT_EQ(Write("f.txt", "x\n"), 0);
    ws_work_ctl ctl = {};
    ws_budget b = {};
    b.ctl = &ctl;
    ws_grep_request req = {};
    req.path = "f.txt";
    req.pattern = "x";
    req.budget = &b;
    ws_grep *g = nullptr;
    ASSERT_EQ(ws_grep_start(ops_, &req, nullptr, &g), 0);
    ws_work_ctl_cancel(&ctl);
    Matches m;
    EXPECT_EQ(ws_grep_next(g, 0, CollectMatch, &m), -ECANCELED);
    EXPECT_EQ(ws_grep_next(g, 0, CollectMatch, &m), -ECANCELED);
    EXPECT_EQ(m.n, 0u);
    ws_grep_free(g);
}

TEST_F(Budget, ExpiredDeadlineIsTimedOut)
{
    ASSERT_EQ(Write("d/f.txt", "hello\n"), 0);
    ws_work_ctl ctl = {false, ws_mono_ms() - 1};
    ws_budget b = {};
    b.ctl = &ctl;

    Collected c;
    bool t = false;
    EXPECT_EQ(ws_list_within(ops_, ".", 3, 0, &b, CollectEntry, &c, &t, nullptr), -ETIMEDOUT);
    EXPECT_EQ(ws_glob_within(ops_, "", "**", 0, &b, CollectEntry, &c, &t, nullptr), -ETIMEDOUT);
    EXPECT_EQ(c.n, 0u);

    int rc = 0;
    Grep("hello", &b, nullptr, &rc);
    EXPECT_EQ(rc, -ETIMEDOUT) << "a walk's grep";
    Grep("hello", &b, nullptr, &rc, nullptr, 0, "d/f.txt");
    EXPECT_EQ(rc, -ETIMEDOUT) << "one file's grep";

    ws_diag d = {};
    EXPECT_EQ(Write("d/f.txt", "x", Sha("d/f.txt").c_str(), 0, &b, &d), -ETIMEDOUT);
    EXPECT_EQ(Edit("d/f.txt", "hello", "bye", false, Sha("d/f.txt").c_str(), &b), -ETIMEDOUT);
    EXPECT_EQ(Edit("d/f.txt", "hello", "bye", false, nullptr, &b), -ETIMEDOUT);
    EXPECT_EQ(Read("d/f.txt"), "hello\n");

    // The same operations without a budget still work.
    EXPECT_EQ(ws_list_within(ops_, ".", 3, 0, nullptr, CollectEntry, &c, &t, nullptr), 0);
    EXPECT_EQ(Write("d/f.txt", "x", Sha("d/f.txt").c_str()), 0);
}

// ---- walks over huge directories ----

class Walks : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        synth_.ops = &kSynthOps;
        ASSERT_EQ(ws_fsops_new(&synth_, &ops_), 0);
        g_synth = {};
        g_names_read = 0;
        g_on_name = nullptr;
        g_peak = 0;
    }
    void TearDown() override
    {
        g_on_name = nullptr;
        ws_fsops_free(ops_);
    }

    // The most memory the walk added while it read names.
    size_t PeakGrowth(size_t before)
    {
        size_t peak = g_peak;
        return peak > before ? peak - before : 0;
    }

    ws_vfs synth_ = {};
    ws_fsops *ops_ = nullptr;
};

// 150,000 names of 208 bytes are over 30 MB when all are held (to sort
// them); with dir_names_max 10,000 the walk holds a bounded number and
// reports the smallest ones, truncated for the budget.
TEST_F(Walks, HugeDirectoryHoldsAtMostDirNamesMax)
{
    g_synth.files = 150000;
    g_synth.pad = 200;
    const size_t kBound = 16u << 20;

    ws_budget b = {};
    b.dir_names_max = 10000;
    b.max_entries = WS_BUDGET_DEFAULT_MAX_ENTRIES;
    Collected c;
    bool t = false;
    auto reason = WS_TRUNC_NONE;
    size_t before = Allocated();
    ASSERT_EQ(
        ws_glob_within(ops_, "", "f*", WS_LIST_MAX_ENTRIES, &b, CollectEntry, &c, &t, &reason), 0);
    size_t growth = PeakGrowth(before);
    EXPECT_EQ(g_names_read, 150000u) << "every name is read, few are held";
    EXPECT_EQ(c.n, 10000u);
    ASSERT_FALSE(c.paths.empty());
    EXPECT_EQ(c.paths[0], FileName(0)) << "the smallest names are the ones kept";
    EXPECT_TRUE(t);
    EXPECT_EQ(reason, WS_TRUNC_ENTRIES_BUDGET);
    EXPECT_STREQ(ws_trunc_reason_name(reason), "entries_budget");
    EXPECT_LT(growth, kBound) << "bytes held while reading the directory";

    // The measure sees the difference: without the bound every name is
    // held, and the request's own limit is what truncates.
    g_names_read = 0;
    g_peak = 0;
    b.dir_names_max = 0;
    c = Collected();
    before = Allocated();
    ASSERT_EQ(
        ws_glob_within(ops_, "", "f*", WS_LIST_MAX_ENTRIES, &b, CollectEntry, &c, &t, &reason), 0);
    EXPECT_GT(PeakGrowth(before), kBound) << "the probe does not see the names held";
    EXPECT_EQ(c.n, (uint64_t)WS_LIST_MAX_ENTRIES);
    EXPECT_EQ(reason, WS_TRUNC_MAX_RESULTS);
}

TEST_F(Walks, MaxEntriesStopsReadingAndSaysSo)
{
    g_synth.files = 150000;
    ws_budget b = {};
    b.max_entries = 1000;

    Collected c;
    bool t = false;
    auto reason = WS_TRUNC_NONE;
    ASSERT_EQ(
        ws_glob_within(ops_, "", "**", WS_LIST_MAX_ENTRIES, &b, CollectEntry, &c, &t, &reason), 0);
    EXPECT_LE(g_names_read, 1001u) << "names read past the budget";
    EXPECT_EQ(c.n, 1000u) << "what was read is still reported";
    EXPECT_TRUE(t);
    EXPECT_EQ(reason, WS_TRUNC_ENTRIES_BUDGET);

    g_names_read = 0;
    c = Collected();
    ASSERT_EQ(ws_list_within(ops_, ".", 1, WS_LIST_MAX_ENTRIES, &b, CollectEntry, &c, &t, &reason),
              0);
    EXPECT_LE(g_names_read, 1001u);
    EXPECT_EQ(c.n, 1000u);
    EXPECT_EQ(reason, WS_TRUNC_ENTRIES_BUDGET);

    // Grep's file walk too.
    g_names_read = 0;
    ws_grep_request req = {};
    req.path = "";
    req.pattern = "x";
    req.budget = &b;
    ws_grep *g = nullptr;
    ASSERT_EQ(ws_grep_start(ops_, &req, nullptr, &g), 0);
    Matches m;
    int rc;
    while ((rc = ws_grep_next(g, 0, CollectMatch, &m)) == 1) {
    }
    EXPECT_EQ(rc, 0);
    ws_grep_summary sum = {};
    ws_grep_get_summary(g, &sum);
    ws_grep_free(g);
    EXPECT_LE(g_names_read, 1001u);
    EXPECT_EQ(sum.files_scanned, 1000u) << "the files among the names read";
    EXPECT_TRUE(sum.truncated);
    EXPECT_EQ(sum.truncated_reason, WS_TRUNC_ENTRIES_BUDGET);

    // A walk that fits its budget is not truncated.
    g_synth.files = 999;
    c = Collected();
    ASSERT_EQ(ws_glob_within(ops_, "", "**", 0, &b, CollectEntry, &c, &t, &reason), 0);
    EXPECT_EQ(c.n, 999u);
    EXPECT_FALSE(t);
    EXPECT_EQ(reason, WS_TRUNC_NONE);
}

TEST_F(Walks, ListOwnLimitIsMaxResults)
{
    g_synth.files = 5000;
    ws_budget b = {};
    b.dir_names_max = 100;
    Collected c;
    bool t = false;
    auto reason = WS_TRUNC_NONE;
    ASSERT_EQ(ws_list_within(ops_, ".", 1, 50, &b, CollectEntry, &c, &t, &reason), 0);
    EXPECT_EQ(c.n, 50u);
    EXPECT_EQ(reason, WS_TRUNC_MAX_RESULTS) << "the request's limit binds first";
    c = Collected();
    ASSERT_EQ(ws_list_within(ops_, ".", 1, 1000, &b, CollectEntry, &c, &t, &reason), 0);
    EXPECT_EQ(c.n, 100u);
    EXPECT_EQ(reason, WS_TRUNC_ENTRIES_BUDGET) << "dir_names_max binds first";
}

// A cancel while a directory is being read.
TEST_F(Walks, CancelStopsReadingWithin256Names)
{
    g_synth.files = 150000;
    ws_work_ctl ctl = {};
    ws_budget b = {};
    b.ctl = &ctl;
    uint64_t at_cancel = 0;
    g_on_name = [&](uint64_t n) {
        if (n == 5000) {
            ws_work_ctl_cancel(&ctl);
            at_cancel = n;
        }
    };
    Collected c;
    bool t = false;
    EXPECT_EQ(ws_glob_within(ops_, "", "**", 0, &b, CollectEntry, &c, &t, nullptr), -ECANCELED);
    EXPECT_EQ(at_cancel, 5000u);
    EXPECT_LE(g_names_read - at_cancel, 256u) << "names read after the cancel";
    EXPECT_EQ(c.n, 0u);
}

// A cancel while the names already read are being reported: in one huge
// directory (read whole before the first is reported) and in a tree.
TEST_F(Walks, CancelStopsReportingWithin256Entries)
{
    for (int layout = 0; layout < 2; layout++) {
        g_synth = {};
        if (layout == 0) {
            g_synth.files = 150000;
        } else {
            g_synth.dirs = 1000;
            g_synth.per_dir = 100;
        }
        for (int kind = 0; kind < 2; kind++) {
            ws_work_ctl ctl = {};
            ws_budget b = {};
            b.ctl = &ctl;
            Collected c;
            uint64_t at_cancel = 0;
            c.on_entry = [&](uint64_t n) {
                if (n == 3000) {
                    ws_work_ctl_cancel(&ctl);
                    at_cancel = n;
                }
            };
            bool t = false;
            int r = kind == 0 ? ws_glob_within(ops_, "", "**", WS_LIST_MAX_ENTRIES, &b,
                                               CollectEntry, &c, &t, nullptr)
                              : ws_list_within(ops_, ".", 2, WS_LIST_MAX_ENTRIES, &b, CollectEntry,
                                               &c, &t, nullptr);
            const char *what = kind == 0 ? "glob" : "list";
            EXPECT_EQ(r, -ECANCELED) << what << " layout " << layout;
            EXPECT_EQ(at_cancel, 3000u);
            EXPECT_LE(c.n - at_cancel, 256u)
                << what << " layout " << layout << ": entries reported after the cancel";
        }
    }
}

// ---- if_match and the commit lock ----

TEST_F(Budget, IfMatchHashesOutsideTheCommitLock)
{
    ASSERT_EQ(Write("f", std::string(4 << 20, 'z')), 0);
    std::string sha = Sha("f");
    bool other_done = false;
    int hooks = 0;
    g_on_pread = [&](uint64_t so_far) {
        // Halfway through the hash, another write of the workspace must
        // be able to commit.
        if (so_far >= (2u << 20) && hooks++ == 0)
            other_done = WriteFromAnotherThread("other", "x");
    };
    EXPECT_EQ(Write("f", "new", sha.c_str()), 0);
    g_on_pread = nullptr;
    EXPECT_TRUE(other_done) << "another write waited for the hash";
    EXPECT_EQ(Read("f"), "new");
    EXPECT_EQ(Read("other"), "x");
}

// A command replaces the file after it was hashed: the commit sees the
// change, hashes again, and the new content does not match.
TEST_F(Budget, ReplaceAfterTheHashIsAConflict)
{
    ASSERT_EQ(Write("f", "one"), 0);
    std::string one = Sha("f");
    int replaced = 0;
    g_on_eof = [&](const std::string &path) {
        if (path == "f" && replaced++ == 0)
            ReplaceBehindTheBack("f", "two");
    };
    g_opens = 0;
    ws_diag d = {};
    EXPECT_EQ(Write("f", "new", one.c_str(), 0, nullptr, &d), -WS_ECONFLICT);
    g_on_eof = nullptr;
    EXPECT_EQ(Read("f"), "two") << "the replace was lost";
    EXPECT_EQ(Meta(d, "actual_sha256"), Sha("f"));
    EXPECT_EQ(g_opens, 2u) << "hashed once more after the change";
}

// A write through the API that leaves the file looking the same (same
// size, an mtime the clock cannot tell apart) is still seen.
TEST_F(Budget, ApiWriteAfterTheHashIsSeenWhateverTheClock)
{
    ASSERT_EQ(Write("f", "one"), 0);
    std::string one = Sha("f");
    g_freeze_mtime = true;
    int replaced = 0;
    bool wrote = false;
    g_on_eof = [&](const std::string &path) {
        if (path == "f" && replaced++ == 0)
            wrote = WriteFromAnotherThread("f", "two");
    };
    ws_diag d = {};
    EXPECT_EQ(Write("f", "new", one.c_str(), 0, nullptr, &d), -WS_ECONFLICT);
    g_on_eof = nullptr;
    EXPECT_TRUE(wrote);
    EXPECT_EQ(Read("f"), "two");
    EXPECT_EQ(Meta(d, "actual_sha256"), Sha("f"));
}

// A replace with the same content: the second hash matches and the write
// goes through; a file that keeps changing is hashed twice only.
TEST_F(Budget, ReplaceWithTheSameContentIsRehashedAndCommits)
{
    ASSERT_EQ(Write("f", "one"), 0);
    std::string one = Sha("f");
    // Rewritten (with the same content) after each hash: the second
    // change is a conflict, although the content matches.
    int replaced = 0;
    g_opens = 0;
    g_on_eof = [&](const std::string &path) {
        if (path == "f" && replaced++ < 2)
            ReplaceBehindTheBack("f", "one");
    };
    ws_diag d = {};
    EXPECT_EQ(Write("f", "new", one.c_str(), 0, nullptr, &d), -WS_ECONFLICT);
    EXPECT_EQ(Meta(d, "actual_sha256"), "<none>") << "the content is not known";
    EXPECT_EQ(g_opens, 2u) << "hashed at most twice";
    EXPECT_EQ(Read("f"), "one");

    replaced = 0;
    g_opens = 0;
    g_on_eof = [&](const std::string &path) {
        if (path == "f" && replaced++ == 0)
            ReplaceBehindTheBack("f", "one");
    };
    EXPECT_EQ(Write("f", "new", one.c_str()), 0);
    g_on_eof = nullptr;
    EXPECT_EQ(g_opens, 2u);
    EXPECT_EQ(Read("f"), "new");
}

TEST_F(Budget, EditSeesAReplaceAfterItsRead)
{
    // With if_match: the second read finds other content.
    ASSERT_EQ(Write("f", "one one"), 0);
    std::string sha = Sha("f");
    int replaced = 0;
    g_on_eof = [&](const std::string &path) {
        if (path == "f" && replaced++ == 0)
            ReplaceBehindTheBack("f", "one two");
    };
    ws_diag d = {};
    EXPECT_EQ(Edit("f", "one", "1", true, sha.c_str(), nullptr, &d), -WS_ECONFLICT);
    EXPECT_EQ(Read("f"), "one two");
    EXPECT_EQ(Meta(d, "actual_sha256"), Sha("f"));

    // Without: the edit starts over on the new content, nothing is lost.
    replaced = 0;
    g_on_eof = [&](const std::string &path) {
        if (path == "f" && replaced++ == 0)
            ReplaceBehindTheBack("f", "one two one");
    };
    EXPECT_EQ(Edit("f", "one", "1", true, nullptr), 0);
    EXPECT_EQ(Read("f"), "1 two 1");

    // A file that changes at every read: the third try holds the lock.
    ASSERT_EQ(Write("f", "one x"), 0);
    replaced = 0;
    g_on_eof = [&](const std::string &path) {
        if (path == "f" && replaced < 2)
            ReplaceBehindTheBack("f", "one " + std::to_string(replaced++));
    };
    EXPECT_EQ(Edit("f", "one", "1", false, nullptr), 0);
    g_on_eof = nullptr;
    EXPECT_EQ(Read("f"), "1 1");
}

// ---- a sparse file far over the cap ----

class Sparse : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        const char *tmp = getenv("TEST_TMPDIR");
        dir_ = std::string(tmp ? tmp : "/tmp") + "/sparseXXXXXX";
        ASSERT_NE(mkdtemp(&dir_[0]), nullptr);
        ASSERT_EQ(ws_posixfs_open(AT_FDCWD, dir_.c_str(), &posix_), 0);
        g_in = posix_->ops;
        deco_.base.ops = &kDecoOps;
        deco_.inner = posix_;
        ASSERT_EQ(ws_fsops_new(&deco_.base, &ops_), 0);
        g_pread_bytes = 0;
        g_on_eof = nullptr;
        g_on_pread = nullptr;
        g_freeze_mtime = false;

        std::string big = dir_ + "/big";
        int fd = open(big.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        ASSERT_GE(fd, 0);
        int r = ftruncate(fd, kBig);
        int err = errno;
        close(fd);
        if (r < 0)
            GTEST_SKIP() << "this file system cannot hold a 200 GiB sparse file: " << strerror(err);
    }
    void TearDown() override
    {
        g_on_pread = nullptr;
        ws_fsops_free(ops_);
        if (posix_)
            posix_->ops->destroy(posix_);
        unlink((dir_ + "/big").c_str());
        rmdir(dir_.c_str());
    }

    int WriteIfMatch(uint64_t max_size, const ws_budget *b, ws_diag *d)
    {
        ws_write_request req = {};
        req.path = "big";
        req.opts.max_size = max_size;
        req.if_match = kEmptySha;
        ws_write_session *s = nullptr;
        int r = ws_write_begin(ops_, &req, d, &s);
        if (r < 0)
            return r;
        r = ws_write_append(s, "x", 1, d);
        if (r < 0) {
            ws_write_abort(s);
            return r;
        }
        return ws_write_commit_within(s, b, d, nullptr);
    }

    static constexpr off_t kBig = (off_t)200 << 30;
    std::string dir_;
    ws_vfs *posix_ = nullptr;
    Deco deco_ = {};
    ws_fsops *ops_ = nullptr;
};

TEST_F(Sparse, IfMatchOverTheCapIsRefusedWithoutReading)
{
    const uint64_t kCap = 1ull << 30;
    ws_diag d = {};
    int64_t cpu0 = ThreadCpuNs();
    EXPECT_EQ(WriteIfMatch(kCap, nullptr, &d), -EFBIG);
    EXPECT_EQ(Meta(d, "limit"), std::to_string(kCap));
    EXPECT_EQ(Meta(d, "field"), "if_match");

    ws_edit_request req = {};
    req.path = "big";
    req.old_text = "a";
    req.old_len = 1;
    req.new_text = "b";
    req.new_len = 1;
    req.if_match = kEmptySha;
    req.max_size = kCap;
    ws_edit_result res;
    EXPECT_EQ(ws_edit(ops_, &req, nullptr, &res), -EFBIG);
    int64_t used = ThreadCpuNs() - cpu0;

    EXPECT_EQ(g_pread_bytes, 0u) << "bytes of the file read";
    EXPECT_LT(used, 500 * WS_NSEC_PER_MSEC);
    struct stat st;
    ASSERT_EQ(stat((dir_ + "/big").c_str(), &st), 0);
    EXPECT_EQ(st.st_size, kBig) << "the file is untouched";
}

// Without a cap, the hash still stops at a cancel within a mebibyte.
TEST_F(Sparse, HashStopsAtACancel)
{
    ws_work_ctl ctl = {};
    ws_budget b = {};
    b.ctl = &ctl;
    uint64_t at_cancel = 0;
    g_on_pread = [&](uint64_t so_far) {
        if (!at_cancel && so_far >= (8u << 20)) {
            ws_work_ctl_cancel(&ctl);
            at_cancel = so_far;
        }
    };
    EXPECT_EQ(WriteIfMatch(0, &b, nullptr), -ECANCELED);
    g_on_pread = nullptr;
    ASSERT_GT(at_cancel, 0u);
    EXPECT_LE(g_pread_bytes - at_cancel, (1u << 20) + (64u << 10)) << "bytes hashed after it";

    ws_work_ctl expired = {false, ws_mono_ms() - 1};
    b.ctl = &expired;
    g_pread_bytes = 0;
    EXPECT_EQ(WriteIfMatch(0, &b, nullptr), -ETIMEDOUT);
    EXPECT_EQ(g_pread_bytes, 0u);
}

} // namespace
