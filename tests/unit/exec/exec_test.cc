// Tests for server/exec/exec.c: process tables, tags and quotas, Close,
// and the bound on closed workspaces' tombstones.
#include <fcntl.h>
#include <unistd.h>

#include <string>
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

} // namespace
