// The registry's attach runs with no registry lock held: a runtime attach
// that blocks (a hook that waits until the test lets it go) leaves every
// other call answered at once. Calls that would need the workspace being
// attached, or would close it, get -EAGAIN and change nothing; Describe,
// List and other workspaces go on. Also: a Resolve that makes the runtime
// again, a failed attach, and storage that vanishes during an attach.
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/registry/registry.h"
}

namespace
{

// How long a call may take before the test calls it blocked. Nothing here
// waits on anything slow, so only a call stuck behind the held attach
// comes near it.
constexpr auto kBlocked = std::chrono::seconds(10);

// A fresh state directory under /tmp, searchable by others as one must
// be when the registry gives workspaces uids of their own (the test's own
// temporary directory is under /root, 0700); removed at exit.
std::string TempDir()
{
    static std::vector<std::string> made;
    char tmpl[] = "/tmp/wsatt.XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    EXPECT_EQ(chmod(tmpl, 0711), 0);
    if (made.empty())
        atexit([] {
            for (const auto &d : made) {
                std::error_code ec;
                std::filesystem::remove_all(d, ec);
            }
        });
    made.push_back(tmpl);
    return tmpl;
}

// A runtime whose attach of one workspace (`held_id`, attaches of the
// given freshness) waits until Release(); every other attach returns at
// once. Counts attaches and detaches.
class Runtime
{
  public:
    Runtime()
    {
        rt_.attach = Attach;
        rt_.detach = Detach;
        rt_.ud = this;
    }
    const ws_registry_runtime *hooks() const
    {
        return &rt_;
    }
    void Hold(const std::string &id, bool fresh)
    {
        std::lock_guard<std::mutex> g(mu_);
        held_id_ = id;
        held_fresh_ = fresh;
        arrived_ = released_ = false;
    }
    bool WaitArrived()
    {
        std::unique_lock<std::mutex> g(mu_);
        return cv_.wait_for(g, kBlocked, [this] { return arrived_; });
    }
    void Release()
    {
        std::lock_guard<std::mutex> g(mu_);
        released_ = true;
        cv_.notify_all();
    }
    // What the next attach of any workspace returns (once).
    void FailNext(int err)
    {
        std::lock_guard<std::mutex> g(mu_);
        fail_next_ = err;
    }
    int attaches() const
    {
        std::lock_guard<std::mutex> g(mu_);
        return attaches_;
    }
    int detaches() const
    {
        std::lock_guard<std::mutex> g(mu_);
        return detaches_;
    }

  private:
    static int Attach(void *ud, ws_workspace *ws, const char *dir, bool fresh, ws_diag *d)
    {
        auto *self = static_cast<Runtime *>(ud);
        std::unique_lock<std::mutex> g(self->mu_);
        self->attaches_++;
        if (self->fail_next_) {
            int err = self->fail_next_;
            self->fail_next_ = 0;
            ws_diag_set(d, "the test's runtime failed");
            return err;
        }
        if (self->held_id_ != ws_workspace_id(ws) || self->held_fresh_ != fresh)
            return 0;
        self->arrived_ = true;
        self->cv_.notify_all();
        self->cv_.wait(g, [self] { return self->released_; });
        return 0;
    }
    static int Detach(void *ud, ws_workspace *ws, ws_diag *d)
    {
        auto *self = static_cast<Runtime *>(ud);
        std::lock_guard<std::mutex> g(self->mu_);
        self->detaches_++;
        return 0;
    }

    ws_registry_runtime rt_ = {};
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::string held_id_;
    bool held_fresh_ = false;
    bool arrived_ = false, released_ = false;
    int fail_next_ = 0;
    int attaches_ = 0, detaches_ = 0;
};

// Runs `f` on its own thread and returns its result; a call still running
// after kBlocked is a failure, and the held attach is released so that it
// can end.
template <typename F> auto Prompt(Runtime *rt, const char *what, F f) -> decltype(f())
{
    auto fut = std::async(std::launch::async, f);
    if (fut.wait_for(kBlocked) == std::future_status::timeout) {
        ADD_FAILURE() << what << " waited for the held attach";
        rt->Release();
    }
    return fut.get();
}

ws_state StateOf(ws_workspace *ws)
{
    ws_workspace_info info;
    ws_workspace_describe(ws, &info);
    return info.state;
}

class AttachLock : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        dir_ = TempDir();
        char why[256];
        ASSERT_EQ(ws_policy_set_new(&policy_), 0);
        ASSERT_EQ(
            ws_policy_set_key(policy_, nullptr, "providers", "memory,local-bash", why, sizeof(why)),
            0)
            << why;
        ASSERT_EQ(ws_policy_set_finish(policy_), 0);
        cfg_.state_dir = dir_.c_str();
        cfg_.policy = policy_;
        ASSERT_EQ(ws_registry_new(&cfg_, &reg_), 0);
        ws_registry_set_runtime(reg_, rt_.hooks());
    }
    void TearDown() override
    {
        rt_.Release();
        ws_registry_free(reg_);
        ws_policy_set_unref(policy_);
    }

    // Opens a local-bash workspace; its id, and its ref in *ret_token.
    std::string Open(std::vector<uint8_t> *ret_token = nullptr)
    {
        Workspace__V1__OpenRequest req = WORKSPACE__V1__OPEN_REQUEST__INIT;
        Workspace__V1__LocalBashConfig lb = WORKSPACE__V1__LOCAL_BASH_CONFIG__INIT;
        req.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_BASH;
        req.local_bash = &lb;
        ws_diag d = {};
        ws_workspace *ws = nullptr;
        EXPECT_EQ(ws_registry_open(reg_, nullptr, &req, &d, &ws), 0) << d.message;
        if (!ws)
            return "";
        std::string id = ws_workspace_id(ws);
        if (ret_token) {
            const uint8_t *t;
            size_t n;
            ws_workspace_token(ws, &t, &n);
            ret_token->assign(t, t + n);
        }
        ws_workspace_unref(ws);
        return id;
    }
    // A new registry on the same state directory: every workspace is
    // CONFIGURED again, and its next use attaches it.
    void Restart()
    {
        ws_registry_free(reg_);
        reg_ = nullptr;
        ASSERT_EQ(ws_registry_new(&cfg_, &reg_), 0);
        ws_registry_set_runtime(reg_, rt_.hooks());
    }
    int Get(const std::string &id, ws_diag *d)
    {
        ws_workspace *ws = nullptr;
        int err = ws_registry_get(reg_, nullptr, id.c_str(), 0, d, &ws);
        ws_workspace_unref(ws);
        return err;
    }
    int Resolve(const std::vector<uint8_t> &token, ws_diag *d)
    {
        ws_workspace *ws = nullptr;
        int err = ws_registry_resolve(reg_, nullptr, token.data(), token.size(), d, &ws);
        ws_workspace_unref(ws);
        return err;
    }
    int Close(const std::string &id, ws_diag *d)
    {
        bool already = false;
        return ws_registry_close_diag(reg_, nullptr, id.c_str(), d, &already);
    }
    // The state Describe reports (through ws_registry_peek).
    ws_state Peek(const std::string &id)
    {
        ws_workspace *ws = nullptr;
        EXPECT_EQ(ws_registry_peek(reg_, nullptr, id.c_str(), &ws), 0);
        if (!ws)
            return ws_state(0);
        ws_state st = StateOf(ws);
        ws_workspace_unref(ws);
        return st;
    }
    std::string WorkspaceDir(const std::string &id) const
    {
        return dir_ + "/workspaces/" + id;
    }

    std::string dir_;
    ws_policy_set *policy_ = nullptr;
    ws_registry_config cfg_ = {};
    ws_registry *reg_ = nullptr;
    Runtime rt_;
};

TEST_F(AttachLock, FirstUseAfterRestartAttachesWithoutLocks)
{
    std::string a = Open(), b = Open();
    Restart();
    rt_.Hold(a, true);
    std::future<int> held = std::async(std::launch::async, [&] {
        ws_diag d = {};
        return Get(a, &d);
    });
    ASSERT_TRUE(rt_.WaitArrived());

    // The workspace being attached: OPENING to Describe and List, -EAGAIN
    // (with its reason) to a call that needs it and to Close.
    EXPECT_EQ(WS_STATE_OPENING, Prompt(&rt_, "Describe", [&] { return Peek(a); }));
    std::vector<std::pair<std::string, ws_state>> listed;
    Prompt(&rt_, "List", [&] {
        ws_registry_list(
            reg_, nullptr,
            [](void *ud, ws_workspace *ws) {
                static_cast<decltype(listed) *>(ud)->emplace_back(ws_workspace_id(ws), StateOf(ws));
            },
            &listed);
        return 0;
    });
    EXPECT_EQ(2u, listed.size());
    for (const auto &l : listed)
        EXPECT_EQ(l.first == a ? WS_STATE_OPENING : WS_STATE_CONFIGURED, l.second) << l.first;
    ws_diag d = {};
    EXPECT_EQ(-EAGAIN, Prompt(&rt_, "a second Get", [&] { return Get(a, &d); }));
    EXPECT_STREQ("the workspace is being attached; retry", d.message);
    d = {};
    EXPECT_EQ(-EAGAIN, Prompt(&rt_, "Close", [&] { return Close(a, &d); }));
    EXPECT_STREQ("the workspace is being attached; retry", d.message);
    EXPECT_EQ(2, ws_registry_live(reg_)) << "a refused Close uncounted the workspace";

    // Other workspaces go on: attached, opened, closed.
    d = {};
    EXPECT_EQ(0, Prompt(&rt_, "Get(b)", [&] { return Get(b, &d); })) << d.message;
    std::string c = Prompt(&rt_, "Open", [&] { return Open(); });
    d = {};
    EXPECT_EQ(0, Prompt(&rt_, "Close(c)", [&] { return Close(c, &d); })) << d.message;

    // Released, the attaching call succeeds and the workspace is OPEN; the
    // Close refused before now works.
    rt_.Release();
    EXPECT_EQ(0, held.get());
    EXPECT_EQ(WS_STATE_OPEN, Peek(a));
    d = {};
    EXPECT_EQ(0, Close(a, &d)) << d.message;
    d = {};
    EXPECT_EQ(-WS_ENOWORKSPACE, Get(a, &d));
}

TEST_F(AttachLock, FailedAttachLeavesItForTheNextCall)
{
    std::string a = Open();
    Restart();
    rt_.FailNext(-WS_EFAILED);
    ws_diag d = {};
    EXPECT_EQ(-WS_EFAILED, Get(a, &d));
    EXPECT_STREQ("the test's runtime failed", d.message);
    EXPECT_EQ(WS_STATE_CONFIGURED, Peek(a));
    d = {};
    EXPECT_EQ(0, Get(a, &d)) << d.message;
    EXPECT_EQ(WS_STATE_OPEN, Peek(a));
    EXPECT_EQ(0, rt_.detaches());
}

TEST_F(AttachLock, StorageGoneDuringFirstAttachIsEvicted)
{
    std::string a = Open();
    Restart();
    rt_.Hold(a, true);
    std::future<int> held = std::async(std::launch::async, [&] {
        ws_diag d = {};
        return Get(a, &d);
    });
    ASSERT_TRUE(rt_.WaitArrived());
    std::filesystem::remove_all(WorkspaceDir(a));
    rt_.Release();
    EXPECT_EQ(-WS_EEVICTED, held.get());
    EXPECT_EQ(WS_STATE_EVICTED, Peek(a));
    EXPECT_EQ(0, ws_registry_live(reg_));
    EXPECT_EQ(1, rt_.detaches());
    ws_diag d = {};
    EXPECT_EQ(-WS_EEVICTED, Get(a, &d));
}

TEST_F(AttachLock, ResolveRemakesTheRuntimeWhileFileCallsGoOn)
{
    std::vector<uint8_t> token;
    std::string a = Open(&token);
    ws_diag d = {};
    rt_.Hold(a, false);
    std::future<int> held = std::async(std::launch::async, [&] {
        ws_diag rd = {};
        return Resolve(token, &rd);
    });
    ASSERT_TRUE(rt_.WaitArrived());

    // Still OPEN: calls that use it go on; a second Resolve and a Close
    // wait their turn with -EAGAIN.
    EXPECT_EQ(WS_STATE_OPEN, Prompt(&rt_, "Describe", [&] { return Peek(a); }));
    EXPECT_EQ(0, Prompt(&rt_, "Get", [&] { return Get(a, &d); })) << d.message;
    d = {};
    EXPECT_EQ(-EAGAIN, Prompt(&rt_, "a second Resolve", [&] { return Resolve(token, &d); }));
    d = {};
    EXPECT_EQ(-EAGAIN, Prompt(&rt_, "Close", [&] { return Close(a, &d); }));

    // Its storage vanishes meanwhile: a call finds it gone, but nothing is
    // detached beside the attach in flight; the Resolve marks it evicted.
    std::filesystem::remove_all(WorkspaceDir(a));
    d = {};
    EXPECT_EQ(-WS_EEVICTED, Prompt(&rt_, "Get", [&] { return Get(a, &d); }));
    EXPECT_EQ(0, rt_.detaches());
    rt_.Release();
    EXPECT_EQ(-WS_EEVICTED, held.get());
    EXPECT_EQ(WS_STATE_EVICTED, Peek(a));
    EXPECT_EQ(1, rt_.detaches());
    EXPECT_EQ(0, ws_registry_live(reg_));
}

} // namespace
