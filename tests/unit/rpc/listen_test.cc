// The listener rules, the unix socket's modes, and the caller's uid as the
// peer string of a connection on the guarded unix listener: real sockets,
// the real accept4 and getpeername of the RPC core, and, as root, a client
// process of another uid.
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/rpc/conncap.h"
#include "server/rpc/listen.h"
}

namespace
{

std::string TempDir()
{
    // Under /tmp, not the test's own directory: a client of another uid
    // must be able to reach it.
    char tmpl[] = "/tmp/wslisten.XXXXXX";
    if (!mkdtemp(tmpl))
        return "";
    chmod(tmpl, 0755);
    return tmpl;
}

void RemoveTree(const std::string &dir)
{
    std::string rm = "rm -rf '" + dir + "'";
    (void)system(rm.c_str());
}

TEST(ListenCheck, TcpNeedsAuthenticationLoopbackIncluded)
{
    char why[512];
    for (const char *addr : {"127.0.0.1:0", "[::1]:7878", "localhost:1", "127.1.2.3:9"}) {
        why[0] = '\0';
        EXPECT_EQ(ws_listen_check(addr, false, false, false, 1000, why, sizeof(why)), -1) << addr;
        EXPECT_NE(std::string(why).find("refusing to listen on '" + std::string(addr) +
                                        "' without authentication"),
                  std::string::npos)
            << why;
        EXPECT_EQ(ws_listen_check(addr, true, false, false, 1000, why, sizeof(why)), 0) << addr;
        EXPECT_EQ(ws_listen_check(addr, false, true, false, 1000, why, sizeof(why)), 0) << addr;
        // The development switch covers loopback, as any uid but root.
        EXPECT_EQ(ws_listen_check(addr, false, false, true, 1000, why, sizeof(why)), 0) << addr;
    }
    for (const char *addr : {"0.0.0.0:0", "10.0.0.1:7878", "[::]:1", "example.com:1"}) {
        EXPECT_EQ(ws_listen_check(addr, false, false, false, 1000, why, sizeof(why)), -1) << addr;
        EXPECT_EQ(ws_listen_check(addr, false, false, true, 1000, why, sizeof(why)), -1) << addr;
        EXPECT_NE(std::string(why).find("loopback addresses only"), std::string::npos) << why;
        EXPECT_EQ(ws_listen_check(addr, true, false, false, 1000, why, sizeof(why)), 0) << addr;
    }
    EXPECT_EQ(ws_listen_check("unix:/run/x.sock", false, false, false, 1000, why, sizeof(why)), 0);
    EXPECT_EQ(ws_listen_check("unix:/run/x.sock", false, false, false, 0, why, sizeof(why)), 0);
}

TEST(ListenCheck, InsecureLoopbackIsRefusedToRoot)
{
    char why[512] = "";
    EXPECT_EQ(ws_listen_check("127.0.0.1:0", false, false, true, 0, why, sizeof(why)), -1);
    EXPECT_NE(std::string(why).find("refusing --insecure-loopback as root"), std::string::npos)
        << why;
    // Whatever else is configured: the switch itself is what is refused.
    EXPECT_EQ(ws_listen_check("127.0.0.1:0", true, false, true, 0, why, sizeof(why)), -1);
    EXPECT_EQ(ws_listen_check("unix:/x", false, false, true, 0, why, sizeof(why)), -1);
}

TEST(ListenCheck, WhatCountsAsLoopbackAndUnix)
{
    EXPECT_TRUE(ws_listen_is_loopback("127.0.0.1:1"));
    EXPECT_TRUE(ws_listen_is_loopback("[::1]:1"));
    EXPECT_TRUE(ws_listen_is_loopback("localhost:1"));
    EXPECT_FALSE(ws_listen_is_loopback("128.0.0.1:1"));
    EXPECT_FALSE(ws_listen_is_loopback("[::ffff:127.0.0.1]:1"));
    EXPECT_FALSE(ws_listen_is_loopback("localhost.example.com:1"));
    EXPECT_FALSE(ws_listen_is_loopback("unix:/x"));
    EXPECT_TRUE(ws_listen_is_unix("unix:/x"));
    EXPECT_FALSE(ws_listen_is_unix("unix:"));
    EXPECT_FALSE(ws_listen_is_unix("127.0.0.1:1"));
}

// A group other than the process's own, to see the socket given to it.
bool OtherGroup(std::string *name, gid_t *gid)
{
    for (gid_t g : {65534u, 1u, 2u, 3u}) {
        struct group *gr = getgrgid(g);
        if (gr && g != getegid()) {
            *name = gr->gr_name;
            *gid = g;
            return true;
        }
    }
    return false;
}

TEST(ListenModes, DirectoryMadeAndSocketGivenModesAndGroup)
{
    std::string base = TempDir();
    ASSERT_FALSE(base.empty());
    std::string name;
    gid_t gid = 0;
    bool other = geteuid() == 0 && OtherGroup(&name, &gid);
    const char *group = other ? name.c_str() : "no-such-group-for-this-test";

    // The umask of the server (077) must not decide the modes.
    mode_t old = umask(077);
    std::string dir = base + "/run", path = dir + "/ws.sock";
    char why[512] = "";
    ASSERT_EQ(ws_listen_prepare_unix(path.c_str(), group, why, sizeof(why)), 0) << why;
    struct stat st;
    ASSERT_EQ(stat(dir.c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0750u);
    EXPECT_EQ(st.st_gid, other ? gid : getegid());

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {};
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path.c_str());
    ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0) << strerror(errno);
    umask(old);
    ASSERT_EQ(lstat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0700u) << "the umask no longer applies to bind: a weak test";
    ASSERT_EQ(ws_listen_secure_unix(path.c_str(), group, why, sizeof(why)), 0) << why;
    ASSERT_EQ(lstat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0660u);
    EXPECT_EQ(st.st_gid, other ? gid : getegid());
    close(fd);

    // An existing directory is the operator's: left as it is.
    std::string mine = base + "/mine";
    ASSERT_EQ(mkdir(mine.c_str(), 0711), 0);
    ASSERT_EQ(chmod(mine.c_str(), 0711), 0);
    ASSERT_EQ(ws_listen_prepare_unix((mine + "/ws.sock").c_str(), group, why, sizeof(why)), 0);
    ASSERT_EQ(stat(mine.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0711u);
    // Only the last component is made.
    EXPECT_LT(ws_listen_prepare_unix((base + "/a/b/ws.sock").c_str(), group, why, sizeof(why)), 0);
    EXPECT_NE(std::string(why).find("cannot make the socket's directory"), std::string::npos)
        << why;
    // What is there must be a socket.
    ASSERT_EQ(mkdir((base + "/notsock").c_str(), 0700), 0);
    EXPECT_EQ(ws_listen_secure_unix((base + "/notsock").c_str(), group, why, sizeof(why)),
              -ENOTSOCK);
    if (!other)
        std::cout << "[ note ] the group was not changed: not root, or no other group\n";
    RemoveTree(base);
}

// A listening unix socket at `path`, guarded by the connection bound.
int Listen(const std::string &path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {};
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path.c_str());
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 8) < 0)
        return -1;
    chmod(path.c_str(), 0666);
    return fd;
}

// Connects to `path`, first binding the client's own socket to `bound`
// when not empty.
int Connect(const std::string &path, const std::string &bound)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {};
    sa.sun_family = AF_UNIX;
    if (!bound.empty()) {
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", bound.c_str());
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            close(fd);
            return -1;
        }
    }
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path.c_str());
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

// The peer string gRPC builds for accepted connection c: "unix:" and the
// path getpeername gives (gRPC 1.51 asks getpeername, not accept4).
std::string PeerOf(int c)
{
    struct sockaddr_storage ss = {};
    socklen_t len = sizeof(ss);
    if (getpeername(c, (struct sockaddr *)&ss, &len) < 0 || ss.ss_family != AF_UNIX)
        return "";
    return std::string("unix:") + ((struct sockaddr_un *)&ss)->sun_path;
}

TEST(PeerIdentity, TheUidComesFromTheKernelNotFromTheClientsPath)
{
    std::string dir = TempDir();
    ASSERT_FALSE(dir.empty());
    std::string path = dir + "/ws.sock";
    int lfd = Listen(path);
    ASSERT_GE(lfd, 0) << strerror(errno);
    ASSERT_EQ(ws_conncap_guard(0, path.c_str(), 64), 0);

    // A client whose own socket is bound to a path: gRPC would name the
    // peer by it; the guarded listener names it by its uid instead.
    std::string bound = dir + "/workspaced-peer-client.sock";
    int cfd = Connect(path, bound);
    ASSERT_GE(cfd, 0) << strerror(errno);
    struct sockaddr_un from = {};
    socklen_t from_len = sizeof(from);
    int c = accept4(lfd, (struct sockaddr *)&from, &from_len, SOCK_CLOEXEC);
    ASSERT_GE(c, 0) << strerror(errno);
    std::string peer = PeerOf(c);
    EXPECT_EQ(peer.find(bound), std::string::npos) << peer;
    EXPECT_EQ(peer.rfind("unix:/workspaced-peer/", 0), 0u) << peer;
    uint32_t uid = 4242;
    EXPECT_TRUE(ws_conncap_peer_uid(peer.c_str(), &uid)) << peer;
    EXPECT_EQ(uid, geteuid());
    // What accept4 returned says the same.
    EXPECT_EQ(std::string("unix:") + from.sun_path, peer);
    // A caller's buffer shorter than the address gets it cut, with the
    // full length, as from the kernel.
    char small[8];
    socklen_t small_len = sizeof(small);
    ASSERT_EQ(getpeername(c, (struct sockaddr *)small, &small_len), 0);
    EXPECT_EQ(small_len, offsetof(struct sockaddr_un, sun_path) + peer.size() - 5 + 1);

    // The same form with any other secret, or another shape, names nobody.
    std::string forged = peer;
    size_t at = strlen("unix:/workspaced-peer/");
    forged[at] = forged[at] == '0' ? '1' : '0';
    EXPECT_FALSE(ws_conncap_peer_uid(forged.c_str(), &uid)) << forged;
    std::string secret = peer.substr(0, peer.rfind('/') + 1);
    for (const std::string &bad : std::vector<std::string>{
             secret, secret + "x", secret + "01", secret + "4294967296", secret + "-1",
             secret + "0/0", secret + " 0", "unix:" + bound, "ipv4:127.0.0.1:5",
             "unix:workspaced-peer/" + peer.substr(at), "unix://workspaced-peer/" + peer.substr(at),
             std::string("unix:") + "/workspaced-peer/00000000000000000000000000000000/0", ""})
        EXPECT_FALSE(ws_conncap_peer_uid(bad.c_str(), &uid)) << bad;
    EXPECT_TRUE(ws_conncap_peer_uid((secret + "4294967295").c_str(), &uid));
    EXPECT_EQ(uid, 4294967295u);
    close(c);
    close(cfd);

    // A socket that is not a connection of the guarded listener passes
    // through untouched.
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    EXPECT_EQ(PeerOf(pair[0]), "unix:");
    close(pair[0]);
    close(pair[1]);

    if (geteuid() != 0) {
        ws_conncap_release();
        close(lfd);
        RemoveTree(dir);
        GTEST_SKIP() << "needs root to connect as another uid";
    }
    // A client of another uid, bound to a path of the forged form under a
    // directory it owns: the uid is the kernel's.
    std::string own = dir + "/own";
    ASSERT_EQ(mkdir(own.c_str(), 0755), 0);
    ASSERT_EQ(chown(own.c_str(), 4242, 4242), 0);
    int sync[2];
    ASSERT_EQ(pipe(sync), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(sync[0]);
        if (setgroups(0, nullptr) != 0 || setgid(4242) != 0 || setuid(4242) != 0)
            _exit(3);
        int fd = Connect(path, own + "/workspaced-peer/" + std::string(32, '0') + "/0");
        if (fd < 0)
            fd = Connect(path, own + "/c.sock");
        if (fd < 0)
            _exit(4);
        char b = 'x';
        if (write(sync[1], &b, 1) != 1)
            _exit(5);
        // Held open until the parent has looked.
        (void)read(fd, &b, 1);
        _exit(0);
    }
    close(sync[1]);
    char b;
    ASSERT_EQ(read(sync[0], &b, 1), 1);
    close(sync[0]);
    c = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(c, 0);
    peer = PeerOf(c);
    EXPECT_TRUE(ws_conncap_peer_uid(peer.c_str(), &uid)) << peer;
    EXPECT_EQ(uid, 4242u);
    close(c);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

    ws_conncap_release();
    close(lfd);
    RemoveTree(dir);
}

} // namespace
