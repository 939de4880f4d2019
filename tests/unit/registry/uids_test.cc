// The uid allocator and the range check, against account files written per
// test, and ws_uids_kill_all against real processes of a fresh uid.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>

extern "C" {
#include "server/base/errors.h"
#include "server/registry/uids.h"
}

namespace
{

std::string TempFile(const std::string &text)
{
    char path[] = "/tmp/wsuids.XXXXXX";
    int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(write(fd, text.data(), text.size()), (ssize_t)text.size());
    close(fd);
    return path;
}

const char *kPasswd = "root:x:0:0:root:/root:/bin/sh\n"
                      "alice:x:1000:1000::/home/alice:/bin/sh\n"
                      "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n"
                      "svc:x:600010:600010::/:/bin/false\n";
const char *kGroup = "root:x:0:\nalice:x:1000:\nnogroup:x:65534:\nbuild:x:700005:\n";

struct Files {
    std::string passwd = TempFile(kPasswd), group = TempFile(kGroup);
    ~Files()
    {
        unlink(passwd.c_str());
        unlink(group.c_str());
    }
};

int Check(const Files &f, uid_t first, uid_t last, std::string *why,
          std::initializer_list<uid_t> taken = {})
{
    struct ws_uid_range r = {first, last};
    char buf[256] = "";
    std::vector<uid_t> t(taken);
    int ret = ws_uids_check_range(&r, f.passwd.c_str(), f.group.c_str(), t.data(), t.size(), buf,
                                  sizeof(buf));
    *why = buf;
    return ret;
}

TEST(Uids, ParseRange)
{
    struct ws_uid_range r;
    const char *why = nullptr;

    ASSERT_EQ(ws_uids_parse_range("524288-589823", &r, &why), 0);
    EXPECT_EQ(r.first, 524288u);
    EXPECT_EQ(r.last, 589823u);
    for (const char *bad : {"", "524288", "524288-", "-5", "5-4", "7-7", "1-x", "1 - 5",
                            "99999999999-99999999999", "+1-5"}) {
        why = nullptr;
        EXPECT_EQ(ws_uids_parse_range(bad, &r, &why), -EINVAL) << bad;
        EXPECT_NE(why, nullptr) << bad;
    }
}

TEST(Uids, RangeMustBeNobodysIds)
{
    Files f;
    std::string why;

    EXPECT_EQ(Check(f, 524288, 589823, &why), 0) << why;
    EXPECT_EQ(Check(f, 0, 10, &why), -EINVAL);
    EXPECT_EQ(why, "includes the reserved id 0");
    EXPECT_EQ(Check(f, 65000, 66000, &why), -EINVAL);
    EXPECT_EQ(why, "includes the reserved id 65534");
    EXPECT_EQ(Check(f, 999, 1001, &why), -EINVAL);
    EXPECT_EQ(why, "includes the account alice (uid 1000, gid 1000)");
    EXPECT_EQ(Check(f, 600000, 600020, &why), -EINVAL);
    EXPECT_EQ(why, "includes the account svc (uid 600010, gid 600010)");
    EXPECT_EQ(Check(f, 700000, 700010, &why), -EINVAL);
    EXPECT_EQ(why, "includes the group build (gid 700005)");
    EXPECT_EQ(Check(f, 524288, 589823, &why, {1000, 530000}), -EINVAL);
    EXPECT_EQ(why, "includes uid 530000, a peer's ([peers])");

    struct ws_uid_range r = {524288, 589823};
    char buf[128];
    EXPECT_EQ(ws_uids_check_range(&r, "/nonexistent/passwd", f.group.c_str(), nullptr, 0, buf,
                                  sizeof(buf)),
              -ENOENT);
}

bool NoProcesses(uid_t)
{
    return false;
}
uid_t busy_uid;
bool OneBusy(uid_t uid)
{
    return uid == busy_uid;
}

TEST(Uids, AllocatesRoundRobinNeverTheHelper)
{
    struct ws_uid_range range = {1000000, 1000004}; // helper + 4
    struct ws_uids *u;
    uid_t a, b, c, d, e;

    ASSERT_EQ(ws_uids_new(&range, NoProcesses, &u), 0);
    EXPECT_EQ(ws_uids_helper(u), 1000000u);
    EXPECT_FALSE(ws_uids_in_range(u, 1000000));
    ASSERT_EQ(ws_uids_alloc(u, &a), 0);
    ASSERT_EQ(ws_uids_alloc(u, &b), 0);
    EXPECT_EQ(a, 1000001u);
    EXPECT_EQ(b, 1000002u);
    ws_uids_release(u, a);
    // A released uid comes back only after the rest of the range.
    ASSERT_EQ(ws_uids_alloc(u, &c), 0);
    ASSERT_EQ(ws_uids_alloc(u, &d), 0);
    EXPECT_EQ(c, 1000003u);
    EXPECT_EQ(d, 1000004u);
    ASSERT_EQ(ws_uids_alloc(u, &e), 0);
    EXPECT_EQ(e, a);
    EXPECT_EQ(ws_uids_alloc(u, &e), -WS_EQUOTA);
    EXPECT_EQ(ws_uids_taken(u), 4u);
    ws_uids_free(u);
}

TEST(Uids, ClaimedRecordsMoveTheCursorAndCannotBeShared)
{
    struct ws_uid_range range = {2000000, 2000100};
    struct ws_uids *u;
    uid_t a;

    ASSERT_EQ(ws_uids_new(&range, NoProcesses, &u), 0);
    EXPECT_EQ(ws_uids_claim(u, 2000040), 0);
    EXPECT_EQ(ws_uids_claim(u, 2000007), 0);
    EXPECT_EQ(ws_uids_claim(u, 2000007), -EEXIST);
    EXPECT_EQ(ws_uids_claim(u, 2000000), -EINVAL); // the helper
    EXPECT_EQ(ws_uids_claim(u, 0), -EINVAL);
    EXPECT_EQ(ws_uids_claim(u, 2000101), -EINVAL);
    ASSERT_EQ(ws_uids_alloc(u, &a), 0);
    EXPECT_EQ(a, 2000041u);
    ws_uids_free(u);
}

TEST(Uids, SkipsAUidThatStillHasProcesses)
{
    struct ws_uid_range range = {3000000, 3000003};
    struct ws_uids *u;
    uid_t a;

    busy_uid = 3000001;
    ASSERT_EQ(ws_uids_new(&range, OneBusy, &u), 0);
    ASSERT_EQ(ws_uids_alloc(u, &a), 0);
    EXPECT_EQ(a, 3000002u);
    ws_uids_free(u);
}

// A child that becomes `uid` and leaves a process tree behind: a setsid
// grandchild that double-forks, so nothing of it is the test's child.
pid_t SpawnTreeAs(uid_t uid)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (syscall(SYS_setgroups, 0, nullptr) < 0 || syscall(SYS_setresgid, uid, uid, uid) < 0 ||
            syscall(SYS_setresuid, uid, uid, uid) < 0)
            _exit(1);
        if (fork() == 0) {
            setsid();
            if (fork() == 0)
                execl("/bin/sleep", "sleep", "600", (char *)nullptr);
            execl("/bin/sleep", "sleep", "600", (char *)nullptr);
        }
        execl("/bin/sleep", "sleep", "600", (char *)nullptr);
        _exit(127);
    }
    return pid;
}

TEST(Uids, KillAllEndsEveryProcessOfTheUidAndNoOther)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root (CAP_SETUID) to run processes as another uid";
    const uid_t victim = 3100007, bystander = 3100008;

    ASSERT_FALSE(ws_uids_has_processes(victim));
    pid_t v = SpawnTreeAs(victim);
    pid_t b = SpawnTreeAs(bystander);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!(ws_uids_has_processes(victim) && ws_uids_has_processes(bystander)) &&
           std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(ws_uids_has_processes(victim));
    ASSERT_TRUE(ws_uids_has_processes(bystander));

    EXPECT_EQ(ws_uids_kill_all(victim), 0);
    EXPECT_FALSE(ws_uids_has_processes(victim));
    EXPECT_TRUE(ws_uids_has_processes(bystander));
    int status;
    ASSERT_EQ(waitpid(v, &status, 0), v);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    EXPECT_EQ(ws_uids_kill_all(bystander), 0);
    ASSERT_EQ(waitpid(b, &status, 0), b);
    EXPECT_FALSE(ws_uids_has_processes(bystander));
    EXPECT_EQ(ws_uids_kill_all(0), -EINVAL);
    EXPECT_EQ(ws_uids_kill_all((uid_t)-1), -EINVAL);
}

// Whether the server may use a range here is read from its user
// namespace's id maps: every uid and gid of the range must be mapped (one
// extent or several). A namespace that maps uid 0 alone is refused, naming
// the first id it lacks and the map.
TEST(Uids, UsableOnlyWhereTheNamespaceMapsTheRange)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "the check asks for root first";
    struct ws_uid_range r = {612000, 612099};
    auto Usable = [&](const std::string &uid_map, const std::string &gid_map, std::string *why) {
        std::string u = TempFile(uid_map), g = TempFile(gid_map);
        char buf[512] = "";
        int ret = ws_uids_usable(&r, u.c_str(), g.c_str(), buf, sizeof(buf));
        unlink(u.c_str());
        unlink(g.c_str());
        *why = buf;
        return ret;
    };
    const std::string all = "         0          0 4294967295\n";
    std::string why;
    EXPECT_EQ(Usable(all, all, &why), 0) << why;
    // Two extents that together cover it.
    EXPECT_EQ(Usable("0 0 612050\n612050 700000 50\n", all, &why), 0) << why;
    // Bazel's linux-sandbox: uid 0 alone.
    EXPECT_EQ(Usable("0 0 1\n", all, &why), -EPERM);
    EXPECT_NE(why.find("does not map uid 612000"), std::string::npos) << why;
    // A hole in the middle, and the gid map.
    EXPECT_EQ(Usable("0 0 612050\n612051 612051 1000\n", all, &why), -EPERM);
    EXPECT_NE(why.find("does not map uid 612050"), std::string::npos) << why;
    EXPECT_EQ(Usable(all, "0 0 612099\n", &why), -EPERM);
    EXPECT_NE(why.find("does not map gid 612099"), std::string::npos) << why;
    // The real maps of this process.
    char buf[512] = "";
    int real = ws_uids_usable(&r, nullptr, nullptr, buf, sizeof(buf));
    EXPECT_TRUE(real == 0 || real == -EPERM) << buf;
}

// ---- host-wide leases ----

std::string LeaseDir()
{
    char path[] = "/tmp/wslease.XXXXXX";
    EXPECT_NE(mkdtemp(path), nullptr);
    return path;
}

struct LeaseFree {
    void operator()(ws_uids_lease *l) const
    {
        ws_uids_lease_free(l);
    }
};
using Lease = std::unique_ptr<ws_uids_lease, LeaseFree>;

// Takes a lease; the range it got, or {0, 0} and the error in *err.
ws_uid_range Take(const std::string &dir, ws_uid_range range, bool exact, Lease *out,
                  int *err = nullptr, std::string *why = nullptr,
                  const ws_uid_range *prefer = nullptr)
{
    ws_uids_lease *l = nullptr;
    char buf[512] = "";
    int r = ws_uids_lease_take(dir.c_str(), &range, exact, prefer, &l, buf, sizeof(buf));
    if (err)
        *err = r;
    if (why)
        *why = buf;
    if (r < 0)
        return {0, 0};
    out->reset(l);
    return range;
}

// Servers on one host never share a uid: without an operator's range each
// takes its own slot of the default one, in order; an exact range that
// overlaps a held one is refused, naming it; a disjoint one is taken.
TEST(UidLeases, EachServerGetsASlotOfItsOwn)
{
    std::string dir = LeaseDir();
    const ws_uid_range def = {WS_UIDS_DEFAULT_FIRST, WS_UIDS_DEFAULT_LAST};
    Lease a, b, c, d;
    ws_uid_range ra = Take(dir, def, false, &a);
    ws_uid_range rb = Take(dir, def, false, &b);
    EXPECT_EQ(ra.first, WS_UIDS_DEFAULT_FIRST);
    EXPECT_EQ(ra.last, WS_UIDS_DEFAULT_FIRST + WS_UIDS_SLOT - 1);
    EXPECT_EQ(rb.first, WS_UIDS_DEFAULT_FIRST + WS_UIDS_SLOT);
    EXPECT_EQ(rb.last, WS_UIDS_DEFAULT_FIRST + 2 * WS_UIDS_SLOT - 1);

    int err = 0;
    std::string why;
    ws_uid_range over = {WS_UIDS_DEFAULT_FIRST + 100, WS_UIDS_DEFAULT_FIRST + 200};
    EXPECT_EQ(Take(dir, over, true, &c, &err, &why).first, 0u);
    EXPECT_EQ(err, -EBUSY);
    EXPECT_EQ(why, "overlaps the range 524288-526335 that another workspaced (pid " +
                       std::to_string(getpid()) +
                       ") holds on this host; give each server a range of its own");
    ws_uid_range apart = {700000, 700100};
    ws_uid_range rc = Take(dir, apart, true, &c, &err);
    EXPECT_EQ(err, 0);
    EXPECT_EQ(rc.first, 700000u);
    EXPECT_EQ(rc.last, 700100u);
    // A slot-sized default range with both slots... of a small range: the
    // whole range is one slot, and a second taker finds none.
    ws_uid_range small = {800000, 800009};
    Lease e;
    EXPECT_EQ(Take(dir, small, false, &d).last, 800009u);
    EXPECT_EQ(Take(dir, small, false, &e, &err, &why).first, 0u);
    EXPECT_EQ(err, -EBUSY);
    EXPECT_EQ(why, "has no slot of 2048 uids that another workspaced on this host does not hold "
                   "already (4 do)");
}

// A lease given up, or left by a holder that died without giving it up,
// is free again; a server that names the slot it had gets it back when it
// is free, and the first free one when it is not.
TEST(UidLeases, AGoneHolderFreesItsSlotAndAPreferredSlotComesBack)
{
    std::string dir = LeaseDir();
    const ws_uid_range def = {WS_UIDS_DEFAULT_FIRST, WS_UIDS_DEFAULT_LAST};
    const ws_uid_range third = {WS_UIDS_DEFAULT_FIRST + 2 * WS_UIDS_SLOT,
                                WS_UIDS_DEFAULT_FIRST + 3 * WS_UIDS_SLOT - 1};
    // A holder that dies (SIGKILL, no cleanup) with the first slot.
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        Lease held;
        ws_uid_range r = Take(dir, def, false, &held);
        _exit(r.first == WS_UIDS_DEFAULT_FIRST ? 0 : 1);
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    struct stat sb;
    ASSERT_EQ(stat((dir + "/524288-526335").c_str(), &sb), 0) << "the dead holder left its file";

    Lease a, b, c;
    EXPECT_EQ(Take(dir, def, false, &a, nullptr, nullptr, &third).first, third.first);
    // The dead holder's slot is the first free one.
    EXPECT_EQ(Take(dir, def, false, &b).first, WS_UIDS_DEFAULT_FIRST);
    // Preferred but held: the next free one.
    EXPECT_EQ(Take(dir, def, false, &c, nullptr, nullptr, &third).first,
              WS_UIDS_DEFAULT_FIRST + WS_UIDS_SLOT);
    a.reset();
    Lease d;
    EXPECT_EQ(Take(dir, def, false, &d, nullptr, nullptr, &third).first, third.first);
}

} // namespace
