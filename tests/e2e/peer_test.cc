// Who may call the server, end to end against the real binary: on its
// unix socket the caller's uid names the tenant ([peers]; root and the
// server's own uid are `default`; any other uid is refused), over TCP a
// token or a client certificate is required, loopback included, and the
// development switch --insecure-loopback is refused to root.
//
// Clients of other uids are this binary run again ("--client ..."): forked,
// its groups and ids dropped, then exec'd, so the uid the server sees is
// the client's own.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/create_channel_posix.h>
#include <gtest/gtest.h>

#include "tests/e2e/harness.h"
#include "tests/testutil/process.h"

using grpc::StatusCode;
using namespace workspace::v1;

namespace
{

// uids no account on the machine has: one the test maps to a tenant, one
// it leaves unmapped.
const uid_t kMapped = 4243;
const uid_t kUnmapped = 4242;
const char *const kAliceToken = "tok-peer-alice-0123456789";

// ---- the client side, run as "--client ADDR ACTION [--token T] [--bind P]" ----

// Prints "code=N message=M" and, for a good List, one "ws=ID" per
// workspace; for a good Open, "ws=ID" of the new one.
int ClientMain(int argc, char **argv)
{
    std::string addr = argv[2], action = argv[3], token, bind_path;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (std::string(argv[i]) == "--token")
            token = argv[i + 1];
        else if (std::string(argv[i]) == "--bind")
            bind_path = argv[i + 1];
    }
    std::shared_ptr<grpc::Channel> ch;
    if (!bind_path.empty()) {
        // The client's own socket bound to a path of its choosing before
        // it connects: that path is what gRPC would name the peer by.
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = {};
        sa.sun_family = AF_UNIX;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", bind_path.c_str());
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            printf("bind failed: %s\n", strerror(errno));
            return 3;
        }
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", addr.c_str() + strlen("unix:"));
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            printf("connect failed: %s\n", strerror(errno));
            return 3;
        }
        ch = grpc::CreateInsecureChannelFromFd("peer", fd);
    } else {
        ch = grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
    }
    auto stub = Workspaces::NewStub(ch);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!token.empty())
        ctx.AddMetadata("authorization", "Bearer " + token);
    grpc::Status st;
    std::vector<std::string> ids;
    if (action == "open") {
        OpenRequest req;
        req.mutable_memory();
        req.mutable_capabilities()->mutable_fs();
        OpenResponse resp;
        st = stub->Open(&ctx, req, &resp);
        if (st.ok())
            ids.push_back(resp.workspace().id());
    } else {
        ListResponse resp;
        st = stub->List(&ctx, ListRequest(), &resp);
        for (const auto &w : resp.workspaces())
            ids.push_back(w.id());
    }
    printf("code=%d message=%s\n", (int)st.error_code(), st.error_message().c_str());
    for (const auto &id : ids)
        printf("ws=%s\n", id.c_str());
    fflush(stdout);
    return 0;
}

// ---- the test side ----

// What one client run printed.
struct Reply {
    int code = -1;
    std::string message;
    std::set<std::string> ids;
    std::string raw;
};

// A directory under /tmp that processes of other uids can reach (the
// test's own temporary directory is under root's home), with a copy of
// this binary in it for them to run. Removed at the end.
class Shared
{
  public:
    Shared()
    {
        char tmpl[] = "/tmp/wspeer.XXXXXX";
        if (!mkdtemp(tmpl))
            return;
        dir_ = tmpl;
        chmod(dir_.c_str(), 0755);
        self_ = dir_ + "/client";
        wstest::WriteHostFile(self_, wstest::ReadHostFile(wstest::SelfExe()));
        chmod(self_.c_str(), 0755);
    }
    ~Shared()
    {
        if (!dir_.empty()) {
            std::string rm = "rm -rf '" + dir_ + "'";
            (void)system(rm.c_str());
        }
    }
    const std::string &dir() const
    {
        return dir_;
    }

    // Runs the client as uid:uid with the supplementary group `group`
    // (the socket's, so its modes let it connect).
    Reply RunAs(uid_t uid, gid_t group, const std::vector<std::string> &args)
    {
        std::vector<std::string> full = {self_, "--client"};
        full.insert(full.end(), args.begin(), args.end());
        std::vector<char *> argv;
        for (auto &a : full)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        int p[2];
        Reply r;
        if (pipe2(p, O_CLOEXEC) != 0)
            return r;
        pid_t pid = fork();
        if (pid == 0) {
            gid_t groups[1] = {group};
            if (dup2(p[1], 1) < 0 || setgroups(1, groups) != 0 || setgid(uid) != 0 ||
                setuid(uid) != 0)
                _exit(126);
            execv(argv[0], argv.data());
            _exit(127);
        }
        close(p[1]);
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        char buf[4096];
        for (;;) {
            struct pollfd pfd = {p[0], POLLIN, 0};
            int left = (int)std::chrono::duration_cast<std::chrono::milliseconds>(
                           deadline - std::chrono::steady_clock::now())
                           .count();
            if (left <= 0 || poll(&pfd, 1, left) <= 0)
                break;
            ssize_t n = read(p[0], buf, sizeof(buf));
            if (n <= 0)
                break;
            r.raw.append(buf, (size_t)n);
        }
        close(p[0]);
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        size_t at = 0;
        while (at < r.raw.size()) {
            size_t nl = r.raw.find('\n', at);
            std::string line = r.raw.substr(at, nl == std::string::npos ? nl : nl - at);
            at = nl == std::string::npos ? r.raw.size() : nl + 1;
            int code;
            char msg[256] = "";
            if (sscanf(line.c_str(), "code=%d message=%255[^\n]", &code, msg) >= 1) {
                r.code = code;
                r.message = msg;
            } else if (line.rfind("ws=", 0) == 0) {
                r.ids.insert(line.substr(3));
            }
        }
        return r;
    }

  private:
    std::string dir_;
    std::string self_;
};

// Spawns `args` as uid:gid (no supplementary groups) with stdout to a
// pipe and stderr to `err_path`.
pid_t SpawnAs(uid_t uid, gid_t gid, const std::vector<std::string> &args,
              const std::string &err_path, int *ret_stdout)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    std::vector<std::string> copy = args;
    std::vector<char *> argv;
    for (auto &a : copy)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_t pid = fork();
    if (pid == 0) {
        if (dup2(p[1], 1) < 0 || dup2(err, 2) < 0 || setgroups(0, nullptr) != 0 ||
            setgid(gid) != 0 || setuid(uid) != 0)
            _exit(127);
        execv(argv[0], argv.data());
        _exit(127);
    }
    close(p[1]);
    close(err);
    *ret_stdout = p[0];
    return pid;
}

// Runs `args` as uid:gid to completion (killed after 20 s); the exit
// status, and stderr in *err.
int RunAsToExit(uid_t uid, gid_t gid, const std::vector<std::string> &args,
                const std::string &err_path, std::string *err)
{
    int out = -1;
    pid_t pid = SpawnAs(uid, gid, args, err_path, &out);
    if (pid < 0)
        return -1;
    close(out);
    int status = -1;
    for (int i = 0; i < 2000; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            *err = testutil::ReadFile(err_path);
            return status;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    *err = testutil::ReadFile(err_path);
    return status;
}

std::string Describe(const Reply &r)
{
    return "client printed: '" + r.raw + "'";
}

std::string TokensFile(const std::string &dir)
{
    std::string path = dir + "/tokens";
    wstest::WriteHostFile(path, "alice " + wstest::Sha256Hex(kAliceToken) + "\n");
    return path;
}

TEST(Peer, TheSocketAndItsDirectoryGetTheirModes)
{
    // Under /tmp: the test's temporary directory can be too long for a
    // socket's path.
    Shared shared;
    ASSERT_FALSE(shared.dir().empty());
    std::string dir = shared.dir();
    std::string sock = dir + "/run/ws.sock";
    wstest::Server srv({"--listen", "unix:" + sock});
    struct stat st;
    ASSERT_EQ(stat((dir + "/run").c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0750u);
    struct group *gr = getgrnam("workspaced");
    EXPECT_EQ(st.st_gid, gr ? gr->gr_gid : getegid());
    ASSERT_EQ(lstat(sock.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0660u);
    EXPECT_EQ(st.st_gid, gr ? gr->gr_gid : getegid());
}

// One server as root on a unix socket with uid kMapped = alice in
// [peers] and a tokens file naming alice too; then [peers] reloaded.
TEST(Peer, TheCallersUidNamesItsTenantOnTheUnixSocket)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root to run clients as other uids";
    Shared shared;
    ASSERT_FALSE(shared.dir().empty());
    std::string conf = shared.dir() + "/workspaced.conf";
    wstest::WriteHostFile(conf, "[peers]\n" + std::to_string(kMapped) + " = alice\n");
    std::string sock = shared.dir() + "/run/ws.sock";
    wstest::Server srv({"--listen", "unix:" + sock, "--config", conf, "--tokens-file",
                        TokensFile(wstest::MakeTempDir("tokens"))});
    struct stat st;
    ASSERT_EQ(lstat(sock.c_str(), &st), 0);
    const gid_t group = st.st_gid;
    const std::string addr = "unix:" + sock;

    // Root: the default tenant.
    Reply root_open = shared.RunAs(0, 0, {addr, "open"});
    ASSERT_EQ(root_open.code, 0) << Describe(root_open);
    ASSERT_EQ(root_open.ids.size(), 1u);

    // The mapped uid is alice: it sees its own workspace, not root's.
    Reply alice_open = shared.RunAs(kMapped, group, {addr, "open"});
    ASSERT_EQ(alice_open.code, 0) << Describe(alice_open);
    ASSERT_EQ(alice_open.ids.size(), 1u);
    Reply alice_list = shared.RunAs(kMapped, group, {addr, "list"});
    EXPECT_EQ(alice_list.code, 0) << Describe(alice_list);
    EXPECT_EQ(alice_list.ids, alice_open.ids) << Describe(alice_list);
    Reply root_list = shared.RunAs(0, 0, {addr, "list"});
    EXPECT_EQ(root_list.code, 0) << Describe(root_list);
    EXPECT_EQ(root_list.ids, root_open.ids) << Describe(root_list);

    // Any other uid is refused, exactly as a bad token is.
    Reply stranger = shared.RunAs(kUnmapped, group, {addr, "list"});
    EXPECT_EQ(stranger.code, (int)StatusCode::UNAUTHENTICATED) << Describe(stranger);
    EXPECT_EQ(stranger.message, "unauthenticated") << Describe(stranger);
    Reply stranger_open = shared.RunAs(kUnmapped, group, {addr, "open"});
    EXPECT_EQ(stranger_open.code, (int)StatusCode::UNAUTHENTICATED) << Describe(stranger_open);

    // A path the client binds its own socket to is not who it is: the
    // stranger stays refused, alice stays alice.
    std::string own = shared.dir() + "/own";
    ASSERT_EQ(mkdir(own.c_str(), 0777), 0);
    ASSERT_EQ(chmod(own.c_str(), 01777), 0);
    Reply bound_stranger =
        shared.RunAs(kUnmapped, group, {addr, "list", "--bind", own + "/stranger.sock"});
    EXPECT_EQ(bound_stranger.code, (int)StatusCode::UNAUTHENTICATED) << Describe(bound_stranger);
    Reply bound_alice = shared.RunAs(kMapped, group, {addr, "list", "--bind", own + "/alice.sock"});
    EXPECT_EQ(bound_alice.code, 0) << Describe(bound_alice);
    EXPECT_EQ(bound_alice.ids, alice_open.ids) << Describe(bound_alice);

    // A token, when sent, decides: alice's token makes the stranger alice,
    // and a wrong one is refused even from a mapped uid.
    Reply token_stranger = shared.RunAs(kUnmapped, group, {addr, "list", "--token", kAliceToken});
    EXPECT_EQ(token_stranger.code, 0) << Describe(token_stranger);
    EXPECT_EQ(token_stranger.ids, alice_open.ids) << Describe(token_stranger);
    Reply bad_token = shared.RunAs(kMapped, group, {addr, "list", "--token", "tok-wrong"});
    EXPECT_EQ(bad_token.code, (int)StatusCode::UNAUTHENTICATED) << Describe(bad_token);

    // [peers] is read again on SIGHUP: the stranger, now mapped to bob, is
    // served and sees nothing of alice's; alice's uid, no longer mapped, is
    // refused.
    wstest::WriteHostFile(conf, "[peers]\n" + std::to_string(kUnmapped) + " = bob\n");
    ASSERT_EQ(kill(srv.pid(), SIGHUP), 0);
    Reply bob;
    for (int i = 0; i < 100; i++) {
        bob = shared.RunAs(kUnmapped, group, {addr, "list"});
        if (bob.code == 0)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(bob.code, 0) << Describe(bob);
    EXPECT_TRUE(bob.ids.empty()) << Describe(bob);
    Reply unmapped_alice = shared.RunAs(kMapped, group, {addr, "list"});
    EXPECT_EQ(unmapped_alice.code, (int)StatusCode::UNAUTHENTICATED) << Describe(unmapped_alice);
}

// Without a tokens file a token is not looked at on the unix socket: the
// uid decides. The server's own uid is the default tenant too: run as
// nobody, nobody's clients are served and root's are still default.
TEST(Peer, RootAndTheServersOwnUidAreTheDefaultTenant)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root to run the server and clients as other uids";
    const uid_t nobody = 65534;
    Shared shared;
    ASSERT_FALSE(shared.dir().empty());
    ASSERT_EQ(chown(shared.dir().c_str(), nobody, nobody), 0);
    std::string bin = shared.dir() + "/workspaced";
    wstest::WriteHostFile(bin, wstest::ReadHostFile("server/workspaced"));
    ASSERT_EQ(chmod(bin.c_str(), 0755), 0);
    std::string sock = shared.dir() + "/run/ws.sock", err_path = shared.dir() + "/stderr";

    int out = -1;
    pid_t srv = SpawnAs(nobody, nobody,
                        {bin, "--state-dir", shared.dir() + "/state", "--listen", "unix:" + sock},
                        err_path, &out);
    ASSERT_GT(srv, 0);
    std::string line;
    bool up = testutil::ReadLine(out, &line, 20000);
    close(out);
    ASSERT_TRUE(up && line.rfind("workspaced listening on ", 0) == 0)
        << line << testutil::ReadFile(err_path);
    const std::string addr = "unix:" + sock;

    Reply own = shared.RunAs(nobody, nobody, {addr, "open", "--token", "ignored"});
    EXPECT_EQ(own.code, 0) << Describe(own);
    Reply root = shared.RunAs(0, 0, {addr, "list"});
    EXPECT_EQ(root.code, 0) << Describe(root);
    EXPECT_EQ(root.ids, own.ids) << Describe(root);
    Reply stranger = shared.RunAs(kUnmapped, nobody, {addr, "list"});
    EXPECT_EQ(stranger.code, (int)StatusCode::UNAUTHENTICATED) << Describe(stranger);
    EXPECT_EQ(testutil::StopCleanly(srv, "workspaced (as nobody)", err_path), "");
}

TEST(Peer, TcpLoopbackWithoutAuthenticationIsRefusedAtStart)
{
    for (const std::string addr : {"127.0.0.1:0", "[::1]:0", "localhost:0"}) {
        std::string err;
        int st = wstest::RunServerToExit(
            {"--listen", addr, "--state-dir", wstest::MakeTempDir("tcp") + "/s"}, &err);
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << addr << ": " << st << " " << err;
        EXPECT_NE(err.find("refusing to listen on '" + addr + "' without authentication"),
                  std::string::npos)
            << err;
    }
}

TEST(Peer, TcpLoopbackWithTokensRefusesACallWithoutOne)
{
    std::string tokens = TokensFile(wstest::MakeTempDir("tokens"));
    wstest::Server srv({"--listen", "127.0.0.1:0", "--tokens-file", tokens});
    ASSERT_EQ(srv.address().rfind("127.0.0.1:", 0), 0u) << srv.address();
    for (const char *token : {"", "tok-wrong"}) {
        auto stub = Workspaces::NewStub(srv.Channel(token));
        grpc::ClientContext ctx;
        ListResponse resp;
        grpc::Status st = stub->List(&ctx, ListRequest(), &resp);
        EXPECT_EQ(st.error_code(), StatusCode::UNAUTHENTICATED) << "token '" << token << "'";
        EXPECT_EQ(st.error_message(), "unauthenticated");
    }
    auto stub = Workspaces::NewStub(srv.Channel(kAliceToken));
    grpc::ClientContext ctx;
    ListResponse resp;
    EXPECT_TRUE(stub->List(&ctx, ListRequest(), &resp).ok());
}

TEST(Peer, InsecureLoopbackIsRefusedToRoot)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "runs the server as root";
    std::string err;
    int st = wstest::RunServerToExit({"--listen", "127.0.0.1:0", "--insecure-loopback",
                                      "--state-dir", wstest::MakeTempDir("insecure") + "/s"},
                                     &err);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << st << " " << err;
    EXPECT_NE(err.find("refusing --insecure-loopback as root"), std::string::npos) << err;
}

// As nobody the switch lets loopback TCP serve without a token, and the
// server says so in its log; it is still no way onto another address.
TEST(Peer, InsecureLoopbackServesAsAnotherUserAndWarns)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root to run the server as nobody";
    const uid_t nobody = 65534;
    Shared shared;
    ASSERT_FALSE(shared.dir().empty());
    ASSERT_EQ(chown(shared.dir().c_str(), nobody, nobody), 0);
    std::string bin = shared.dir() + "/workspaced";
    wstest::WriteHostFile(bin, wstest::ReadHostFile("server/workspaced"));
    ASSERT_EQ(chmod(bin.c_str(), 0755), 0);
    std::string err_path = shared.dir() + "/stderr";

    int out = -1;
    pid_t srv = SpawnAs(nobody, nobody,
                        {bin, "--state-dir", shared.dir() + "/state", "--listen", "127.0.0.1:0",
                         "--insecure-loopback"},
                        err_path, &out);
    ASSERT_GT(srv, 0);
    std::string line;
    bool up = testutil::ReadLine(out, &line, 20000);
    close(out);
    const std::string prefix = "workspaced listening on ";
    ASSERT_TRUE(up && line.rfind(prefix, 0) == 0) << line << testutil::ReadFile(err_path);
    auto stub = Workspaces::NewStub(
        grpc::CreateChannel(line.substr(prefix.size()), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ListResponse resp;
    grpc::Status st = stub->List(&ctx, ListRequest(), &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    // The warning is logged once the server serves.
    std::string log;
    for (int i = 0; i < 500; i++) {
        log = testutil::ReadFile(err_path);
        if (log.find("\"event\":\"rpc.insecure_loopback\"") != std::string::npos)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_NE(log.find("\"event\":\"rpc.insecure_loopback\""), std::string::npos) << log;
    EXPECT_NE(log.find("--insecure-loopback"), std::string::npos) << log;
    EXPECT_EQ(testutil::StopCleanly(srv, "workspaced (as nobody)", err_path), "");

    // Not an address other hosts reach.
    std::string err;
    int rc = RunAsToExit(nobody, nobody,
                         {bin, "--state-dir", shared.dir() + "/state2", "--listen", "0.0.0.0:0",
                          "--insecure-loopback", "--allow-plaintext"},
                         shared.dir() + "/stderr2", &err);
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 2) << rc << " " << err;
    EXPECT_NE(err.find("loopback addresses only"), std::string::npos) << err;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc >= 4 && std::string(argv[1]) == "--client")
        return ClientMain(argc, argv);
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
