// The registry's workspace uids: allocated at Open and recorded, claimed
// again by the next registry on the same state directory, given back at
// Close after every process of the uid was ended, refused with QUOTA when
// the range is used up; a record from before uids gets one at its first
// attach, with its tree given to it without following a symlink out; and
// the start-up checks (range, mode, directories above the workspace root).
//
// Needs real root (no-sandbox): a registry decides whether it may use the
// range from its own uid and user namespace, and these tests need it on.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/policy/policy.h"
#include "server/registry/registry.h"
}

namespace fs = std::filesystem;

namespace
{

// A small range, well away from the default one and from any account: the
// helper's uid and three workspace uids.
constexpr uid_t kFirst = 612000, kLast = 612003;

// A fresh directory under /tmp, searchable by others as a state directory
// with workspace uids must be (the test's own temporary directory is under
// /root, 0700). Removed with the fixture.
std::string StateDir()
{
    char tmpl[] = "/tmp/wsreguids.XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    EXPECT_EQ(chmod(tmpl, 0711), 0);
    return tmpl;
}

std::string WhyNot()
{
    if (geteuid() != 0)
        return "the test does not run as root";
    std::ifstream map("/proc/self/uid_map");
    unsigned long inside, outside, count;
    while (map >> inside >> outside >> count)
        if (inside <= kFirst && kLast - inside < count)
            return "";
    return "this user namespace does not map the test's uid range";
}

ws_policy_set *AllProviders()
{
    ws_policy_set *set = nullptr;
    char why[256];
    EXPECT_EQ(ws_policy_set_new(&set), 0);
    EXPECT_EQ(ws_policy_set_key(set, nullptr, "providers", "memory,local-bash,local-sandbox,docker",
                                why, sizeof(why)),
              0)
        << why;
    EXPECT_EQ(ws_policy_set_finish(set), 0);
    return set;
}

std::string Meta(const ws_diag &d, const std::string &key)
{
    for (int i = 0; i < d.n_meta; i++)
        if (key == d.key[i])
            return d.value[i];
    return "<none>";
}

struct stat Lstat(const std::string &path)
{
    struct stat st = {};
    EXPECT_EQ(lstat(path.c_str(), &st), 0) << path << ": " << strerror(errno);
    return st;
}

class RegistryUids : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        std::string why = WhyNot();
        if (!why.empty())
            GTEST_SKIP() << "workspace uids cannot be used here: " << why;
        dir_ = StateDir();
        policy_ = AllProviders();
        cfg_.state_dir = dir_.c_str();
        cfg_.policy = policy_;
        cfg_.uids_mode = WS_UIDS_ON;
        cfg_.uid_range = {kFirst, kLast};
        cfg_.say = Say;
        cfg_.say_ud = this;
        workspace__v1__local_bash_config__init(&lb_);
        req_.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_BASH;
        req_.local_bash = &lb_;
    }

    void TearDown() override
    {
        for (ws_workspace *w : held_)
            ws_workspace_unref(w);
        ws_registry_free(reg_);
        ws_policy_set_unref(policy_);
        if (!dir_.empty()) {
            std::error_code ec;
            fs::remove_all(dir_, ec);
        }
    }

    static void Say(void *ud, bool error, const char *message)
    {
        auto *t = static_cast<RegistryUids *>(ud);
        (error ? t->errors_ : t->notices_) += std::string(message) + "\n";
    }

    int Start()
    {
        ws_registry_free(reg_);
        reg_ = nullptr;
        return ws_registry_new(&cfg_, &reg_);
    }

    // Opens a local-bash workspace; returns its id ("" on failure, with
    // the diag in last_).
    std::string Open()
    {
        ws_workspace *w = nullptr;
        last_ = {};
        last_err_ = ws_registry_open(reg_, nullptr, &req_, &last_, &w);
        if (last_err_ < 0)
            return "";
        held_.push_back(w);
        return ws_workspace_id(w);
    }

    // The workspace's uid after a call that attaches it (0: none).
    uid_t UidOf(const std::string &id)
    {
        ws_workspace *w = nullptr;
        ws_diag d = {};
        EXPECT_EQ(ws_registry_get(reg_, nullptr, id.c_str(), WS_CAP_FS, &d, &w), 0) << d.message;
        if (!w)
            return 0;
        uid_t uid = 0;
        gid_t gid = 0;
        bool has = ws_workspace_uid(w, &uid, &gid);
        EXPECT_EQ(has ? gid : 0u, uid);
        // The record says the same.
        EXPECT_EQ(ws_workspace_record(w)->uid, uid);
        EXPECT_EQ(ws_workspace_record(w)->gid, uid);
        ws_workspace_unref(w);
        return has ? uid : 0;
    }

    void Close(const std::string &id)
    {
        // Drop our references first: Close removes the table's.
        bool already = false;
        EXPECT_EQ(ws_registry_close(reg_, nullptr, id.c_str(), &already), 0);
        EXPECT_FALSE(already);
    }

    std::string WsDir(const std::string &id)
    {
        return dir_ + "/workspaces/" + id;
    }

    std::string dir_;
    ws_policy_set *policy_ = nullptr;
    ws_registry_config cfg_ = {};
    ws_registry *reg_ = nullptr;
    Workspace__V1__LocalBashConfig lb_;
    Workspace__V1__OpenRequest req_ = WORKSPACE__V1__OPEN_REQUEST__INIT;
    std::vector<ws_workspace *> held_;
    ws_diag last_ = {};
    int last_err_ = 0;
    std::string errors_, notices_;
};

// Open allocates a uid of the range (never the helper's), records it and
// gives the directory to it; the range used up is QUOTA workspace_uids;
// a new registry claims the recorded uids (a new Open gets none of them)
// and Close gives one back.
TEST_F(RegistryUids, AllocatedRecordedClaimedAndReleased)
{
    ASSERT_EQ(Start(), 0) << errors_;
    EXPECT_TRUE(ws_registry_uids_on(reg_));
    EXPECT_EQ(ws_registry_helper_uid(reg_), kFirst);
    std::vector<std::string> ids;
    std::vector<uid_t> uids;
    for (int i = 0; i < 3; i++) {
        ids.push_back(Open());
        ASSERT_FALSE(ids.back().empty()) << last_.message;
        uids.push_back(UidOf(ids.back()));
        EXPECT_GT(uids.back(), kFirst);
        EXPECT_LE(uids.back(), kLast);
        struct stat st = Lstat(WsDir(ids.back()));
        EXPECT_EQ(st.st_uid, uids.back());
        EXPECT_EQ(st.st_gid, uids.back());
        EXPECT_EQ(st.st_mode & 07777, 0700u);
    }
    EXPECT_NE(uids[0], uids[1]);
    EXPECT_NE(uids[1], uids[2]);
    EXPECT_NE(uids[0], uids[2]);
    EXPECT_EQ(Lstat(dir_ + "/workspaces").st_mode & 07777, 0711u);

    // Every uid taken: refused, and nothing left behind.
    EXPECT_EQ(Open(), "");
    EXPECT_EQ(last_err_, -WS_EQUOTA);
    EXPECT_EQ(Meta(last_, "quota"), "workspace_uids");
    EXPECT_EQ(Meta(last_, "limit"), "3");
    EXPECT_EQ(ws_registry_live(reg_), 3);

    // A memory workspace needs none.
    Workspace__V1__MemoryConfig mem;
    workspace__v1__memory_config__init(&mem);
    Workspace__V1__OpenRequest mreq = WORKSPACE__V1__OPEN_REQUEST__INIT;
    mreq.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_MEMORY;
    mreq.memory = &mem;
    ws_workspace *m = nullptr;
    ws_diag d = {};
    ASSERT_EQ(ws_registry_open(reg_, nullptr, &mreq, &d, &m), 0) << d.message;
    uid_t mu = 0;
    gid_t mg = 0;
    EXPECT_FALSE(ws_workspace_uid(m, &mu, &mg));
    EXPECT_EQ(ws_workspace_record(m)->uid, 0u);
    ws_workspace_unref(m);

    // Restart: the records' uids are claimed, so the range is still full
    // before any of them is used again, and each gets its own back (in
    // another order than they were handed out).
    for (ws_workspace *w : held_)
        ws_workspace_unref(w);
    held_.clear();
    ASSERT_EQ(Start(), 0) << errors_;
    EXPECT_EQ(Open(), "");
    EXPECT_EQ(last_err_, -WS_EQUOTA);
    for (size_t i = ids.size(); i-- > 0;)
        EXPECT_EQ(UidOf(ids[i]), uids[i]) << ids[i];

    // Close gives the uid back: the next Open gets it.
    Close(ids[1]);
    std::string again = Open();
    ASSERT_FALSE(again.empty()) << last_.message;
    EXPECT_EQ(UidOf(again), uids[1]);
    EXPECT_EQ(Lstat(WsDir(again)).st_uid, uids[1]);
}

// A process of the workspace's uid that outlived its commands (one that
// left their process tree) is killed at Close.
TEST_F(RegistryUids, CloseEndsEveryProcessOfTheUid)
{
    ASSERT_EQ(Start(), 0) << errors_;
    std::string id = Open();
    ASSERT_FALSE(id.empty()) << last_.message;
    uid_t uid = UidOf(id);
    ASSERT_GT(uid, kFirst);

    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (syscall(SYS_setgroups, 0, nullptr) != 0 || syscall(SYS_setresgid, uid, uid, uid) != 0 ||
            syscall(SYS_setresuid, uid, uid, uid) != 0)
            _exit(1);
        (void)!write(ready[1], "x", 1);
        for (;;)
            pause();
    }
    close(ready[1]);
    char c;
    ASSERT_EQ(read(ready[0], &c, 1), 1) << "the child could not become the workspace's uid";
    close(ready[0]);

    Close(id);
    // Close returns once the uid has no process left.
    int status = 0;
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
    }
    ASSERT_EQ(got, pid) << "the uid's process outlived the Close";
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

// A workspace from before workspace uids (its record has uid 0, its files
// are root's) gets a uid at its first attach: recorded, kept by the next
// registry, and its whole tree given to it, except what stands for
// something outside: a symlink is changed itself, never its target, and a
// second link to a file outside is left alone.
TEST_F(RegistryUids, OldRecordGetsAUidAndItsTreeWithoutFollowingSymlinks)
{
    cfg_.uids_mode = WS_UIDS_OFF;
    cfg_.allow_root_commands = true;
    ASSERT_EQ(Start(), 0) << errors_;
    EXPECT_FALSE(ws_registry_uids_on(reg_));
    std::string id = Open();
    ASSERT_FALSE(id.empty()) << last_.message;
    EXPECT_EQ(UidOf(id), 0u);
    for (ws_workspace *w : held_)
        ws_workspace_unref(w);
    held_.clear();
    ws_registry_free(reg_);
    reg_ = nullptr;

    // What its commands (root's, then) left in it, and a target outside.
    std::string ws = WsDir(id), outside = dir_ + "/outside";
    ASSERT_EQ(mkdir(outside.c_str(), 0755), 0);
    std::ofstream(outside + "/secret") << "host";
    std::ofstream(outside + "/linked") << "host";
    ASSERT_EQ(mkdir((ws + "/sub").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((ws + "/sub/deeper").c_str(), 0755), 0);
    std::ofstream(ws + "/sub/deeper/file") << "mine";
    ASSERT_EQ(symlink((outside + "/secret").c_str(), (ws + "/to_secret").c_str()), 0);
    ASSERT_EQ(symlink(outside.c_str(), (ws + "/sub/to_outside").c_str()), 0);
    ASSERT_EQ(link((outside + "/linked").c_str(), (ws + "/hardlink").c_str()), 0);

    cfg_.uids_mode = WS_UIDS_ON;
    ASSERT_EQ(Start(), 0) << errors_;
    uid_t uid = UidOf(id);
    ASSERT_GT(uid, kFirst);
    ASSERT_LE(uid, kLast);
    for (const char *rel :
         {"", "/sub", "/sub/deeper", "/sub/deeper/file", "/to_secret", "/sub/to_outside"}) {
        struct stat st = Lstat(ws + rel);
        EXPECT_EQ(st.st_uid, uid) << rel;
        EXPECT_EQ(st.st_gid, uid) << rel;
    }
    EXPECT_EQ(Lstat(ws + "/hardlink").st_uid, 0u);
    for (const char *rel : {"", "/secret", "/linked"})
        EXPECT_EQ(Lstat(outside + rel).st_uid, 0u) << "outside" << rel;

    // Recorded: the next registry claims that same uid.
    for (ws_workspace *w : held_)
        ws_workspace_unref(w);
    held_.clear();
    ASSERT_EQ(Start(), 0) << errors_;
    EXPECT_EQ(UidOf(id), uid);
}

// The range is checked before anything is touched; mode on is refused
// where uids cannot work (here: a range with uid 0 in it is refused in any
// mode but off).
TEST_F(RegistryUids, ARangeThatHoldsAnAccountIsRefused)
{
    cfg_.uid_range = {0, 10};
    EXPECT_EQ(Start(), -EINVAL);
    EXPECT_NE(errors_.find("includes the reserved id 0"), std::string::npos) << errors_;
    EXPECT_EQ(fs::directory_iterator(dir_), fs::directory_iterator()) << "the state was touched";
    errors_.clear();
    cfg_.uids_mode = WS_UIDS_AUTO;
    EXPECT_EQ(Start(), -EINVAL);
    EXPECT_NE(errors_.find("includes the reserved id 0"), std::string::npos) << errors_;
    errors_.clear();
    cfg_.uid_range = {kFirst, kLast};
    cfg_.peer_uids = &kLast;
    cfg_.n_peer_uids = 1;
    EXPECT_EQ(Start(), -EINVAL);
    EXPECT_NE(errors_.find("a peer's"), std::string::npos) << errors_;
    // Off, a server that runs as root refuses to start unless the
    // operator accepts that commands run as root.
    cfg_.uids_mode = WS_UIDS_OFF;
    errors_.clear();
    EXPECT_EQ(Start(), -EPERM);
    EXPECT_EQ(errors_, "workspace uids are off ([uids] mode = off) and the server runs as root, so "
                       "every command would run as root: turn them on, or say "
                       "allow-root-commands = true (--allow-root-commands) to accept that\n");
    cfg_.allow_root_commands = true;
    EXPECT_EQ(Start(), 0) << errors_;
    EXPECT_FALSE(ws_registry_uids_on(reg_));
}

// A state directory below a directory others cannot search (a 0700 home)
// is refused with the directory named, in mode on and in auto; off keeps
// today's private modes.
TEST_F(RegistryUids, UnsearchableDirectoryAboveIsRefused)
{
    std::string priv = dir_ + "/private";
    ASSERT_EQ(mkdir(priv.c_str(), 0700), 0);
    std::string state = priv + "/state";
    ASSERT_EQ(mkdir(state.c_str(), 0700), 0);
    cfg_.state_dir = state.c_str();
    for (ws_uids_mode mode : {WS_UIDS_ON, WS_UIDS_AUTO}) {
        cfg_.uids_mode = mode;
        errors_.clear();
        EXPECT_EQ(Start(), -EACCES) << mode;
        EXPECT_NE(errors_.find("'" + priv + "' is not (mode 0700)"), std::string::npos) << errors_;
    }
    cfg_.uids_mode = WS_UIDS_OFF;
    cfg_.allow_root_commands = true;
    ASSERT_EQ(Start(), 0) << errors_;
    EXPECT_EQ(Lstat(state + "/workspaces").st_mode & 07777, 0700u);
    // Searchable: on, and the state directory opened to search (0711).
    ws_registry_free(reg_);
    reg_ = nullptr;
    ASSERT_EQ(chmod(priv.c_str(), 0711), 0);
    cfg_.uids_mode = WS_UIDS_ON;
    ASSERT_EQ(Start(), 0) << errors_;
    EXPECT_EQ(Lstat(state).st_mode & 07777, 0711u);
    EXPECT_EQ(Lstat(state + "/workspaces").st_mode & 07777, 0711u);
}

} // namespace
