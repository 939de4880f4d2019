// Tests for server/exec/exec.c: process tables, tags and quotas, Close,
// the bound on closed workspaces' tombstones, and commands' own homes.
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/exec/exec.h"
}

namespace
{

class ExecTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        struct ws_exec_config cfg = {};
        cfg.grace_ms = 100;
        cfg.running_per_workspace = 2;
        ASSERT_EQ(ws_exec_new(&cfg, &e_), 0);
        cwd_ = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(cwd_, 0);
    }
    void TearDown() override
    {
        ws_exec_free(e_);
        close(cwd_);
    }

    int Start(const char *ws, const char *tag, struct ws_proc **ret, struct ws_diag *d = nullptr)
    {
        const char *argv[] = {"/bin/sleep", "1000.5151", nullptr};
        const char *envp[] = {nullptr};
        struct ws_proc_config cfg = {};
        cfg.argv = argv;
        cfg.envp = envp;
        cfg.cwd_fd = cwd_;
        cfg.cwd = ".";
        cfg.tag = tag;
        cfg.ring_bytes = 4096;
        return ws_exec_start(e_, ws, &cfg, d, ret);
    }

    struct ws_exec *e_ = nullptr;
    int cwd_ = -1;
};

TEST_F(ExecTest, TagsQuotaAndCloseRefusal)
{
    struct ws_proc *a = nullptr, *b = nullptr, *c = nullptr;
    struct ws_diag d = {};
    ASSERT_EQ(Start("ws_a", "one", &a), 0);
    EXPECT_EQ(Start("ws_a", "one", &b, &d), -EEXIST);
    EXPECT_STREQ(d.key[0], "tag");
    ASSERT_EQ(Start("ws_a", "two", &b), 0);
    d = {};
    EXPECT_EQ(Start("ws_a", "three", &c, &d), -WS_EQUOTA);
    EXPECT_STREQ(d.value[0], "processes");
    // Another workspace has its own quota and tag space.
    ASSERT_EQ(Start("ws_b", "one", &c), 0);

    struct ws_proc *found = nullptr;
    ASSERT_EQ(ws_exec_find(e_, "ws_a", nullptr, "two", &found), 0);
    EXPECT_EQ(found, b);
    ws_proc_unref(found);
    EXPECT_EQ(ws_exec_find(e_, "ws_b", nullptr, "two", &found), -ESRCH);

    ws_exec_close_workspace(e_, "ws_a", WS_CAUSE_EVICTED);
    struct ws_proc_result r;
    ASSERT_TRUE(ws_proc_get_result(a, &r));
    EXPECT_EQ(r.cause, WS_CAUSE_EVICTED);
    EXPECT_EQ(ws_exec_find(e_, "ws_a", nullptr, "one", &found), -ESRCH);
    struct ws_proc *late = nullptr;
    EXPECT_EQ(Start("ws_a", "four", &late), -WS_ENOWORKSPACE);
    // ws_b is untouched.
    EXPECT_FALSE(ws_proc_get_result(c, &r));
    ws_proc_unref(a);
    ws_proc_unref(b);
    ws_proc_unref(c);
}

TEST_F(ExecTest, ClosedWorkspacesAreRememberedUpToTheLimit)
{
    const int n = WS_EXEC_TOMBSTONES_KEPT + 500;
    for (int i = 0; i < n; i++)
        ws_exec_close_workspace(e_, ("ws_closed_" + std::to_string(i)).c_str(), WS_CAUSE_EVICTED);
    EXPECT_LE(ws_exec_table_count(e_), (size_t)WS_EXEC_TOMBSTONES_KEPT);
    EXPECT_GE(ws_exec_table_count(e_), (size_t)WS_EXEC_TOMBSTONES_KEPT - 1);
    // The most recent ones still refuse commands; the oldest are forgotten.
    struct ws_proc *p = nullptr;
    EXPECT_EQ(Start(("ws_closed_" + std::to_string(n - 1)).c_str(), nullptr, &p), -WS_ENOWORKSPACE);
    // Closing the same workspace twice keeps one tombstone.
    size_t before = ws_exec_table_count(e_);
    ws_exec_close_workspace(e_, ("ws_closed_" + std::to_string(n - 1)).c_str(), WS_CAUSE_EVICTED);
    EXPECT_EQ(ws_exec_table_count(e_), before);
}

// ---- homes ----

bool Exists(const std::string &path)
{
    struct stat st;
    return lstat(path.c_str(), &st) == 0;
}

int Mode(const std::string &path)
{
    struct stat st;
    return lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? (int)(st.st_mode & 07777) : -1;
}

// Entries of a directory but . and ..; -1 when it cannot be read.
int Entries(const std::string &path)
{
    DIR *d = opendir(path.c_str());
    if (!d)
        return -1;
    int n = 0;
    while (struct dirent *e = readdir(d))
        if (std::string(e->d_name) != "." && std::string(e->d_name) != "..")
            n++;
    closedir(d);
    return n;
}

std::string TempDir(const char *name)
{
    const char *t = getenv("TEST_TMPDIR");
    std::string tmpl = std::string(t && t[0] ? t : "/tmp") + "/" + name + ".XXXXXX";
    char *d = mkdtemp(&tmpl[0]);
    return d ? std::string(d) : "";
}

std::string Parent(const std::string &path)
{
    return path.substr(0, path.rfind('/'));
}

class HomeTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        base_ = TempDir("homes");
        ASSERT_FALSE(base_.empty());
        root_ = base_ + "/root";
        cwd_ = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(cwd_, 0);
    }
    void TearDown() override
    {
        ws_exec_free(e_);
        close(cwd_);
        std::string cmd = "rm -rf '" + base_ + "'";
        (void)system(cmd.c_str());
    }
    int New(const char *root)
    {
        struct ws_exec_config cfg = {};
        cfg.grace_ms = 100;
        cfg.home_root = root;
        return ws_exec_new(&cfg, &e_);
    }
    // Runs `sh -c script sh HOME` with the home and waits for its end.
    struct ws_proc *RunWith(struct ws_exec_home *h, const std::string &script,
                            const char *ws = "ws")
    {
        std::string dir = ws_exec_home_dir(h);
        const char *argv[] = {"/bin/sh", "-c", script.c_str(), "sh", dir.c_str(), nullptr};
        const char *envp[] = {nullptr};
        struct ws_proc_config cfg = {};
        cfg.argv = argv;
        cfg.envp = envp;
        cfg.cwd_fd = cwd_;
        cfg.cwd = ".";
        cfg.ring_bytes = 4096;
        struct ws_proc *p = nullptr;
        int err = ws_exec_start_for(e_, "tenant", ws, &cfg, h, nullptr, &p);
        return err == 0 ? p : nullptr;
    }

    std::string base_, root_;
    struct ws_exec *e_ = nullptr;
    int cwd_ = -1;
};

// A home is two empty 0700 directories of their own under the root.
TEST_F(HomeTest, NewHomeIsEmptyAndPrivate)
{
    ASSERT_EQ(New(root_.c_str()), 0);
    EXPECT_EQ(Mode(root_), 0700);
    struct ws_exec_home *a = nullptr, *b = nullptr;
    ASSERT_EQ(ws_exec_home_new(e_, &a), 0);
    ASSERT_EQ(ws_exec_home_new(e_, &b), 0);
    std::string dir = ws_exec_home_dir(a), run = ws_exec_home_runtime_dir(a);
    char *real = realpath(root_.c_str(), nullptr);
    ASSERT_NE(real, nullptr);
    EXPECT_EQ(Parent(Parent(dir)), real);
    free(real);
    EXPECT_EQ(Parent(run), Parent(dir));
    EXPECT_NE(dir, run);
    EXPECT_NE(Parent(dir), Parent(ws_exec_home_dir(b))) << "two homes share a directory";
    for (const std::string &d : {dir, run, Parent(dir)}) {
        EXPECT_EQ(Mode(d), 0700) << d;
    }
    EXPECT_EQ(Entries(dir), 0);
    EXPECT_EQ(Entries(run), 0);
    ws_exec_home_free(a);
    EXPECT_FALSE(Exists(Parent(dir)));
    ws_exec_home_free(b);
    EXPECT_EQ(Entries(root_), 0);
    ws_exec_home_free(nullptr);
}

struct DoneCheck {
    std::string path;
    std::atomic<int> seen{-1}; // 1: the path existed when the callback ran
};

// Removed with whatever the command left in it once the command is done,
// before any done callback a client's reply waits on.
TEST_F(HomeTest, RemovedWhenTheCommandEndsBeforeDoneCallbacks)
{
    ASSERT_EQ(New(root_.c_str()), 0);
    struct ws_exec_home *h = nullptr;
    ASSERT_EQ(ws_exec_home_new(e_, &h), 0);
    std::string top = Parent(ws_exec_home_dir(h));
    std::string outside = base_ + "/outside";
    ASSERT_EQ(mkdir(outside.c_str(), 0755), 0);
    std::ofstream(outside + "/keep") << "precious";
    // The command fills its home (a deep tree, a symlink out of it) and
    // the directory around it; nothing outside may go with it.
    struct ws_proc *p =
        RunWith(h, "mkdir -p \"$1/.config/git\" \"$1/a/b/c\" && echo x > \"$1/a/b/c/f\" && "
                   "ln -s " +
                       outside + " \"$1/link\" && echo y > \"$1/../extra\" && sleep 0.2");
    ASSERT_NE(p, nullptr);
    DoneCheck check;
    check.path = top;
    ASSERT_EQ(ws_proc_on_done(
                  p,
                  [](void *arg, struct ws_proc *) {
                      auto *c = static_cast<DoneCheck *>(arg);
                      c->seen = Exists(c->path) ? 1 : 0;
                  },
                  &check),
              0);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (check.seen < 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    struct ws_proc_result r;
    ASSERT_TRUE(ws_proc_get_result(p, &r));
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(check.seen, 0) << "the home was still there for a done callback";
    EXPECT_FALSE(Exists(top));
    EXPECT_EQ(Entries(root_), 0);
    EXPECT_TRUE(Exists(outside + "/keep"));
    ws_proc_unref(p);
}

// A start that fails takes the home with it.
TEST_F(HomeTest, RefusedStartRemovesTheHome)
{
    ASSERT_EQ(New(root_.c_str()), 0);
    ws_exec_close_workspace(e_, "closed", WS_CAUSE_EVICTED);
    struct ws_exec_home *h = nullptr;
    ASSERT_EQ(ws_exec_home_new(e_, &h), 0);
    std::string top = Parent(ws_exec_home_dir(h));
    EXPECT_EQ(RunWith(h, "true", "closed"), nullptr);
    EXPECT_FALSE(Exists(top));
    // And a long tenant name (refused first thing).
    ASSERT_EQ(ws_exec_home_new(e_, &h), 0);
    top = Parent(ws_exec_home_dir(h));
    const char *argv[] = {"/bin/true", nullptr};
    const char *envp[] = {nullptr};
    struct ws_proc_config cfg = {};
    cfg.argv = argv;
    cfg.envp = envp;
    cfg.cwd_fd = cwd_;
    struct ws_proc *p = nullptr;
    EXPECT_EQ(ws_exec_start_for(e_, std::string(WS_EXEC_TENANT_MAX + 1, 't').c_str(), "ws", &cfg, h,
                                nullptr, &p),
              -EINVAL);
    EXPECT_FALSE(Exists(top));
}

// What an earlier run left in the root goes at start, without following
// a symlink out of it; the root is made private again.
TEST_F(HomeTest, LeftoversAreRemovedAtStart)
{
    std::string outside = base_ + "/outside";
    ASSERT_EQ(mkdir(outside.c_str(), 0755), 0);
    std::ofstream(outside + "/keep") << "precious";
    ASSERT_EQ(mkdir(root_.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((root_ + "/c-old").c_str(), 0700), 0);
    ASSERT_EQ(mkdir((root_ + "/c-old/home").c_str(), 0700), 0);
    std::ofstream(root_ + "/c-old/home/.gitconfig") << "[core]\n";
    ASSERT_EQ(symlink(outside.c_str(), (root_ + "/c-old/home/out").c_str()), 0);
    ASSERT_EQ(symlink(outside.c_str(), (root_ + "/link").c_str()), 0);
    ASSERT_EQ(New(root_.c_str()), 0);
    EXPECT_EQ(Entries(root_), 0);
    EXPECT_EQ(Mode(root_), 0700);
    EXPECT_TRUE(Exists(outside + "/keep"));
}

TEST_F(HomeTest, SymlinkRootIsRefused)
{
    std::string target = base_ + "/target";
    ASSERT_EQ(mkdir(target.c_str(), 0700), 0);
    ASSERT_EQ(symlink(target.c_str(), root_.c_str()), 0);
    // O_NOFOLLOW with O_DIRECTORY: the kernel says ENOTDIR (or ELOOP).
    int err = New(root_.c_str());
    EXPECT_TRUE(err == -ENOTDIR || err == -ELOOP) << err;
    EXPECT_EQ(Mode(target), 0700);
    EXPECT_EQ(Entries(target), 0);
    e_ = nullptr;
}

// Without a root the exec layer makes its own under TMPDIR and removes it.
TEST_F(HomeTest, DefaultRootIsTemporary)
{
    ASSERT_EQ(New(nullptr), 0);
    struct ws_exec_home *h = nullptr;
    ASSERT_EQ(ws_exec_home_new(e_, &h), 0);
    std::string root = Parent(Parent(ws_exec_home_dir(h)));
    EXPECT_EQ(Mode(root), 0700);
    EXPECT_NE(root.find("/workspaced-homes."), std::string::npos) << root;
    struct ws_proc *p = RunWith(h, "echo x > \"$1/f\"; sleep 1000.5151");
    ASSERT_NE(p, nullptr);
    // Freed with the command still running: it is ended, its home and the
    // root removed.
    ws_proc_unref(p);
    ws_exec_free(e_);
    e_ = nullptr;
    EXPECT_FALSE(Exists(root));
}

} // namespace
