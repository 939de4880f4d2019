// The operator's policy against the real binary: each thing a caller could
// once ask for itself (local-bash, host binds of /proc or /run, the server's
// environment through pass_env, network, any command, any image, user or
// pull) is refused with PERMISSION_DENIED POLICY and the exact rule and
// item unless the operator allows it, per tenant; the policy is reloaded on
// SIGHUP (a bad file keeps the old one), --check-config reports a bad
// policy line, and Describe and ListProviders show the caller's policy.
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "tests/e2e/harness.h"

using grpc::StatusCode;
using namespace workspace::v1;

namespace
{

const std::string kAll = "memory,local-bash,local-sandbox,docker";

std::string WriteConf(const std::string &text)
{
    std::string path = wstest::MakeTempDir("conf") + "/workspaced.conf";
    wstest::WriteHostFile(path, text);
    return path;
}

std::string RealPath(const std::string &p)
{
    char buf[PATH_MAX];
    return realpath(p.c_str(), buf) ? buf : p;
}

grpc::Status DoOpen(Workspaces::Stub *stub, const OpenRequest &req, OpenResponse *resp = nullptr)
{
    OpenResponse local;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return stub->Open(&ctx, req, resp ? resp : &local);
}

OpenRequest Bash(const std::vector<std::string> &commands = {},
                 const std::vector<std::string> &pass_env = {})
{
    OpenRequest req;
    req.mutable_local_bash();
    req.mutable_capabilities()->mutable_fs();
    if (!commands.empty() || !pass_env.empty()) {
        auto *sh = req.mutable_capabilities()->mutable_shell();
        for (const auto &c : commands)
            sh->add_allowed_commands(c);
        for (const auto &e : pass_env)
            sh->add_pass_env(e);
    }
    return req;
}

OpenRequest Sandbox(const std::vector<std::string> &ro, const std::vector<std::string> &rw = {})
{
    OpenRequest req;
    auto *sb = req.mutable_local_sandbox();
    for (const auto &p : ro)
        sb->add_read_only_paths(p);
    for (const auto &p : rw)
        sb->add_read_write_paths(p);
    return req;
}

OpenRequest Docker(const std::string &image, const std::string &user = "", int pull = 0)
{
    OpenRequest req;
    auto *d = req.mutable_docker();
    d->set_image(image);
    d->set_user(user);
    d->set_pull_policy(static_cast<PullPolicy>(pull));
    return req;
}

// The call was refused by policy rule `rule`, naming `item_key` = `item`,
// with a message that names the rule and the item.
::testing::AssertionResult Refused(const grpc::Status &s, const std::string &rule,
                                   const std::string &item_key, const std::string &item)
{
    wstest::Error e = wstest::Decode(s);
    if (e.code != StatusCode::PERMISSION_DENIED || e.reason != "POLICY" ||
        e.metadata["rule"] != rule || e.metadata[item_key] != item ||
        e.message.find(rule) == std::string::npos || e.message.find(item) == std::string::npos)
        return ::testing::AssertionFailure()
               << "want PERMISSION_DENIED POLICY rule=" << rule << " " << item_key << "=" << item
               << ", got code " << e.code << " reason '" << e.reason << "' rule '"
               << e.metadata["rule"] << "' " << item_key << " '" << e.metadata[item_key]
               << "' message '" << e.message << "'";
    return ::testing::AssertionSuccess();
}

bool NotPolicy(const grpc::Status &s)
{
    return wstest::Decode(s).reason != "POLICY";
}

ListProvidersResponse List(const std::shared_ptr<grpc::Channel> &ch)
{
    ListProvidersResponse resp;
    grpc::ClientContext ctx;
    ListProvidersRequest req;
    EXPECT_TRUE(Providers::NewStub(ch)->ListProviders(&ctx, req, &resp).ok());
    return resp;
}

const ProviderInfo *Provider(const ListProvidersResponse &r, const std::string &kind)
{
    for (const auto &p : r.providers())
        if (p.kind() == kind)
            return &p;
    return nullptr;
}

std::vector<std::string> Strings(const google::protobuf::RepeatedPtrField<std::string> &f)
{
    return std::vector<std::string>(f.begin(), f.end());
}

int Count(const std::string &haystack, const std::string &needle)
{
    int n = 0;
    for (size_t at = haystack.find(needle); at != std::string::npos;
         at = haystack.find(needle, at + 1))
        n++;
    return n;
}

// Polls the server's log until `event` was logged more than `before` times.
bool WaitLogged(const wstest::Server &srv, const std::string &event, int before)
{
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
        if (Count(wstest::ReadHostFile(srv.stderr_path()), event) > before)
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
}

// ---- providers ----

// With no policy configured local-bash (no isolation) is not opened, for
// anyone; the other providers stay available.
TEST(PolicyTest, DefaultPolicyRefusesLocalBash)
{
    wstest::Server srv({"--config", WriteConf("[policy]\n")});
    auto ws = srv.workspaces();
    EXPECT_TRUE(Refused(DoOpen(ws.get(), Bash({"sh"})), "providers", "provider", "local-bash"));
    OpenRequest mem;
    mem.mutable_memory();
    EXPECT_TRUE(DoOpen(ws.get(), mem).ok());

    ListProvidersResponse r = List(srv.channel());
    const ProviderInfo *bash = Provider(r, "local-bash");
    ASSERT_NE(bash, nullptr);
    EXPECT_FALSE(bash->available());
    EXPECT_EQ(bash->reason(), "POLICY: not allowed for this tenant");
    EXPECT_EQ(Provider(r, "memory")->reason(), "");
    EXPECT_EQ(r.policy().tenant(), "default");
    EXPECT_EQ(Strings(r.policy().providers()),
              (std::vector<std::string>{"memory", "local-sandbox", "docker"}));
    EXPECT_FALSE(r.policy().network());
    EXPECT_TRUE(r.policy().bind_roots().empty());
    EXPECT_TRUE(r.policy().pass_env().empty());
    EXPECT_FALSE(r.policy().commands_ceiling());
    EXPECT_EQ(Strings(r.policy().docker_images()), std::vector<std::string>{"*"});
    EXPECT_FALSE(r.policy().docker_pull());
    EXPECT_TRUE(r.policy().docker_users().empty());
}

// A provider the server does not enable stays PROVIDER_DISABLED, whatever
// the policy says; the policy's providers are shown within the enabled ones.
TEST(PolicyTest, ServerWideDisabledStaysProviderDisabled)
{
    wstest::Server srv({"--providers", "memory,local-sandbox", "--policy-providers", kAll});
    auto ws = srv.workspaces();
    grpc::Status s = DoOpen(ws.get(), Bash());
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "PROVIDER_DISABLED");
    ListProvidersResponse r = List(srv.channel());
    EXPECT_EQ(Provider(r, "local-bash")->reason(), "PROVIDER_DISABLED: not enabled on this server");
    EXPECT_EQ(Strings(r.policy().providers()),
              (std::vector<std::string>{"memory", "local-sandbox"}));
}

// Two tenants of one tokens file, two policies: each gets its own answer
// and sees its own policy.
TEST(PolicyTest, PerTenantPolicies)
{
    const std::string alice_token = "tok-policy-alice-0123456789";
    const std::string bob_token = "tok-policy-bob-0123456789";
    std::string tokens = wstest::MakeTempDir("tokens") + "/tokens";
    wstest::WriteHostFile(tokens, "alice " + wstest::Sha256Hex(alice_token) + "\nbob " +
                                      wstest::Sha256Hex(bob_token) + "\n");
    std::string conf = WriteConf("[auth]\ntokens-file = " + tokens +
                                 "\n[policy]\ncommands = ls\n"
                                 "[policy.alice]\nproviders = memory, local-bash\n"
                                 "pass-env = LANG\n");
    wstest::Server srv({"--config", conf});
    auto alice = Workspaces::NewStub(srv.Channel(alice_token));
    auto bob = Workspaces::NewStub(srv.Channel(bob_token));

    EXPECT_TRUE(DoOpen(alice.get(), Bash({"ls"}, {"LANG"})).ok());
    EXPECT_TRUE(Refused(DoOpen(bob.get(), Bash({"ls"})), "providers", "provider", "local-bash"));
    // alice inherits the default's command ceiling.
    EXPECT_TRUE(Refused(DoOpen(alice.get(), Bash({"ls", "sh"})), "commands", "command", "sh"));
    // bob may open local-sandbox, alice may not.
    OpenRequest sb = Sandbox({});
    EXPECT_TRUE(Refused(DoOpen(alice.get(), sb), "providers", "provider", "local-sandbox"));
    EXPECT_TRUE(NotPolicy(DoOpen(bob.get(), sb)));

    ListProvidersResponse ra = List(srv.Channel(alice_token));
    ListProvidersResponse rb = List(srv.Channel(bob_token));
    EXPECT_EQ(ra.policy().tenant(), "alice");
    EXPECT_EQ(rb.policy().tenant(), "bob");
    EXPECT_EQ(Strings(ra.policy().providers()), (std::vector<std::string>{"memory", "local-bash"}));
    EXPECT_EQ(Strings(rb.policy().providers()),
              (std::vector<std::string>{"memory", "local-sandbox", "docker"}));
    EXPECT_EQ(Strings(ra.policy().pass_env()), std::vector<std::string>{"LANG"});
    EXPECT_TRUE(rb.policy().pass_env().empty());
    EXPECT_TRUE(ra.policy().commands_ceiling());
    EXPECT_EQ(Strings(ra.policy().commands()), std::vector<std::string>{"ls"});
    EXPECT_TRUE(Provider(ra, "local-bash")->available());
    EXPECT_EQ(Provider(rb, "local-bash")->reason(), "POLICY: not allowed for this tenant");
    EXPECT_EQ(Provider(ra, "local-sandbox")->reason(), "POLICY: not allowed for this tenant");
}

// ---- binds ----

// Every path the host must keep to itself is refused for both kinds of
// bind, even under a listed root where one can be listed (the root holds
// the server's state directory, its workspace root and a socket); a
// directory under the root is accepted. The root is made under /tmp: the
// test's own temporary directory may lie under /root, which is never a
// root.
TEST(PolicyTest, ForbiddenBindsAreRefusedEvenUnderARoot)
{
    char tmpl[] = "/tmp/wspolicyXXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    // Workspace uids reach their directories under the state directory.
    ASSERT_EQ(chmod(tmpl, 0711), 0);
    const std::string root = RealPath(tmpl);
    struct Cleanup {
        std::string dir;
        ~Cleanup()
        {
            std::string cmd = "rm -rf '" + dir + "'";
            EXPECT_EQ(system(cmd.c_str()), 0);
        }
    } cleanup{root};
    const std::string state = root + "/state";
    const std::string good = root + "/good";
    const std::string sock = root + "/s.sock";
    ASSERT_EQ(mkdir(state.c_str(), 0700), 0);
    ASSERT_EQ(mkdir(good.c_str(), 0755), 0);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un sa = {};
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock.c_str());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)), 0);

    wstest::Server srv({"--policy-providers", kAll, "--policy-bind-roots", root}, state);
    auto ws = srv.workspaces();
    const std::vector<std::string> forbidden = {
        "/",    "/proc", "/proc/1",  "/sys",  "/sys/kernel", "/dev", "/dev/null",
        "/run", "/etc",  "/etc/ssl", "/boot", "/root",       state,  state + "/workspaces",
        sock,
    };
    for (const auto &path : forbidden) {
        struct stat pst;
        if (lstat(path.c_str(), &pst) != 0)
            continue; // a host without /boot, say: nothing to bind
        EXPECT_TRUE(Refused(DoOpen(ws.get(), Sandbox({path})), "bind-roots", "path", path))
            << "read_only_paths " << path;
        EXPECT_TRUE(Refused(DoOpen(ws.get(), Sandbox({}, {path})), "bind-roots", "path", path))
            << "read_write_paths " << path;
        // Behind an accepted one too.
        EXPECT_TRUE(Refused(DoOpen(ws.get(), Sandbox({good, path})), "bind-roots", "path", path))
            << "second read_only_paths " << path;
    }
    // Outside every root.
    EXPECT_TRUE(Refused(DoOpen(ws.get(), Sandbox({"/usr"})), "bind-roots", "path", "/usr"));
    EXPECT_TRUE(wstest::Snapshot(state + "/workspaces").empty());
    close(fd);

    // Under the root: past the policy (the sandbox itself may be missing on
    // this host, which is not the policy's answer).
    OpenResponse ro_resp;
    grpc::Status ro = DoOpen(ws.get(), Sandbox({good}, {}), &ro_resp);
    EXPECT_TRUE(NotPolicy(ro)) << ro.error_message();
    grpc::Status rw = DoOpen(ws.get(), Sandbox({}, {good}));
    EXPECT_TRUE(NotPolicy(rw)) << rw.error_message();
    ListProvidersResponse r = List(srv.channel());
    EXPECT_EQ(Strings(r.policy().bind_roots()), std::vector<std::string>{root});
    if (!Provider(r, "local-sandbox")->available())
        GTEST_SKIP() << "local-sandbox is not available here ("
                     << Provider(r, "local-sandbox")->reason()
                     << "): the accepted binds were not opened";
    ASSERT_TRUE(ro.ok()) << ro.error_message();
    EXPECT_TRUE(rw.ok()) << rw.error_message();
    // Describe says where the bind is inside: under /mnt, never over the
    // sandbox's own directories.
    DescribeRequest dreq;
    dreq.set_workspace_id(ro_resp.workspace().id());
    DescribeResponse d;
    grpc::ClientContext ctx;
    ASSERT_TRUE(ws->Describe(&ctx, dreq, &d).ok());
    bool found = false;
    for (const auto &b : d.sandbox().binds())
        if (b.source() == good) {
            found = true;
            EXPECT_EQ(b.target(), "/mnt" + good);
            EXPECT_TRUE(b.read_only());
        }
    EXPECT_TRUE(found) << d.sandbox().DebugString();
}

// With no bind root at all (the default) every bind is refused, by that
// rule: the directory is made under /tmp, since the test's own temporary
// directory may lie under /root (refused by another rule) and be longer
// than the metadata keeps.
TEST(PolicyTest, NoBindRootsMeansNoBinds)
{
    char tmpl[] = "/tmp/wsnobindXXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string good = RealPath(tmpl);
    struct Cleanup {
        std::string dir;
        ~Cleanup()
        {
            rmdir(dir.c_str());
        }
    } cleanup{good};
    wstest::Server srv;
    auto ws = srv.workspaces();
    EXPECT_TRUE(Refused(DoOpen(ws.get(), Sandbox({good})), "bind-roots", "path", good));
    EXPECT_TRUE(NotPolicy(DoOpen(ws.get(), Sandbox({}))));
}

// ---- environment, network, commands ----

TEST(PolicyTest, PassEnvOutsideTheListIsRefused)
{
    wstest::Server open_srv({}, "", {"WS_POLICY_SECRET=s3cret"});
    auto ws = open_srv.workspaces();
    EXPECT_TRUE(Refused(DoOpen(ws.get(), Bash({"env"}, {"WS_POLICY_SECRET"})), "pass-env", "name",
                        "WS_POLICY_SECRET"));
    EXPECT_TRUE(Refused(DoOpen(ws.get(), Bash({"env"}, {"PWD"})), "pass-env", "name", "PWD"));

    wstest::Server srv({"--policy-providers", kAll, "--policy-pass-env", "LANG, WS_POLICY_OK"}, "",
                       {"WS_POLICY_SECRET=s3cret"});
    auto ws2 = srv.workspaces();
    EXPECT_TRUE(DoOpen(ws2.get(), Bash({"env"}, {"LANG", "WS_POLICY_OK"})).ok());
    EXPECT_TRUE(Refused(DoOpen(ws2.get(), Bash({"env"}, {"LANG", "WS_POLICY_SECRET"})), "pass-env",
                        "name", "WS_POLICY_SECRET"));
}

TEST(PolicyTest, NetworkIsRefusedUnlessAllowed)
{
    OpenRequest sb = Sandbox({});
    sb.mutable_local_sandbox()->set_network(NETWORK_ALLOW);
    OpenRequest dk = Docker("busybox:1");
    dk.mutable_docker()->set_network(NETWORK_ALLOW);
    {
        wstest::Server srv;
        auto ws = srv.workspaces();
        EXPECT_TRUE(Refused(DoOpen(ws.get(), sb), "network", "provider", "local-sandbox"));
        EXPECT_TRUE(Refused(DoOpen(ws.get(), dk), "network", "provider", "docker"));
        EXPECT_FALSE(List(srv.channel()).policy().network());
    }
    wstest::Server srv({"--policy-providers", kAll, "--policy-network"});
    auto ws = srv.workspaces();
    grpc::Status s = DoOpen(ws.get(), sb);
    EXPECT_TRUE(NotPolicy(s)) << s.error_message();
    EXPECT_TRUE(List(srv.channel()).policy().network());
}

TEST(PolicyTest, CommandsCeiling)
{
    wstest::Server srv({"--policy-providers", kAll, "--policy-commands", "ls, /bin/cat"});
    auto ws = srv.workspaces();
    EXPECT_TRUE(DoOpen(ws.get(), Bash({"ls", "/bin/cat"})).ok());
    EXPECT_TRUE(DoOpen(ws.get(), Bash({})).ok());
    EXPECT_TRUE(Refused(DoOpen(ws.get(), Bash({"ls", "sh"})), "commands", "command", "sh"));
    // Compared as given: the name is not the path.
    EXPECT_TRUE(Refused(DoOpen(ws.get(), Bash({"cat"})), "commands", "command", "cat"));
    ListProvidersResponse r = List(srv.channel());
    EXPECT_TRUE(r.policy().commands_ceiling());
    EXPECT_EQ(Strings(r.policy().commands()), (std::vector<std::string>{"ls", "/bin/cat"}));
}

// ---- local-bash: the address space the policy allows ----

// The soft and hard RLIMIT_AS of a command in the workspace, as the
// command itself reads them from /proc/self/limits ("unlimited" or bytes).
std::string AddressSpaceOf(Exec::Stub *exec, const std::string &id)
{
    RunResponse r;
    grpc::Status s = wstest::RunProcess(
        exec, id, wstest::ArgvProcess({"grep", "^Max address space", "/proc/self/limits"}), &r);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::istringstream in(r.stdout());
    std::string w1, w2, w3, soft, hard;
    in >> w1 >> w2 >> w3 >> soft >> hard;
    return soft + " " + hard;
}

// The operator's address-space-mb is the ceiling and the default of
// local-bash's RLIMIT_AS: a request asking more is refused, one asking
// less gets what it asked, one asking none gets the policy's; the value is
// in the record (Describe) and an allocation over it fails inside the
// command, not on the host.
TEST(PolicyTest, LocalBashAddressSpace)
{
    wstest::Server srv({"--policy-providers", kAll, "--policy-address-space-mb", "512"});
    auto ws = srv.workspaces();
    auto exec = srv.exec();
    ListProvidersResponse lp = List(srv.channel());
    EXPECT_EQ(lp.policy().address_space_mb(), 512u);

    OpenRequest more = Bash({"grep", "python3"});
    more.mutable_local_bash()->set_address_space_mb(513);
    EXPECT_TRUE(Refused(DoOpen(ws.get(), more), "address-space-mb", "address_space_mb", "513"));

    OpenResponse def, less;
    ASSERT_TRUE(DoOpen(ws.get(), Bash({"grep", "python3"}), &def).ok());
    OpenRequest lreq = Bash({"grep", "python3"});
    lreq.mutable_local_bash()->set_address_space_mb(300);
    ASSERT_TRUE(DoOpen(ws.get(), lreq, &less).ok());
    const std::string d = def.workspace().id(), l = less.workspace().id();

    EXPECT_EQ(AddressSpaceOf(exec.get(), d),
              std::to_string(512ull << 20) + " " + std::to_string(512ull << 20));
    EXPECT_EQ(AddressSpaceOf(exec.get(), l),
              std::to_string(300ull << 20) + " " + std::to_string(300ull << 20));
    for (const auto &[id, mb] : {std::pair{d, 512u}, std::pair{l, 300u}}) {
        DescribeRequest req;
        DescribeResponse resp;
        grpc::ClientContext ctx;
        req.set_workspace_id(id);
        ASSERT_TRUE(ws->Describe(&ctx, req, &resp).ok());
        EXPECT_EQ(resp.local_bash().address_space_mb(), mb) << id;
    }
    // 600 MiB at once is over either cap: Python's MemoryError, inside the
    // command; 64 MiB is not.
    RunResponse r;
    ASSERT_TRUE(wstest::RunProcess(
                    exec.get(), d,
                    wstest::ArgvProcess({"python3", "-c",
                                         "b = bytearray(64 << 20)\n"
                                         "try:\n    bytearray(600 << 20)\nexcept MemoryError:\n"
                                         "    print('refused')\nelse:\n    print('allocated')"}),
                    &r)
                    .ok());
    EXPECT_EQ(r.stdout(), "refused\n") << r.stderr();

    // Without the key there is no cap, and a request may ask any.
    wstest::Server open({"--policy-providers", kAll});
    auto ws2 = open.workspaces();
    auto exec2 = open.exec();
    OpenResponse none, big;
    ASSERT_TRUE(DoOpen(ws2.get(), Bash({"grep"}), &none).ok());
    EXPECT_EQ(AddressSpaceOf(exec2.get(), none.workspace().id()), "unlimited unlimited");
    OpenRequest breq = Bash({"grep"});
    breq.mutable_local_bash()->set_address_space_mb(4096);
    ASSERT_TRUE(DoOpen(ws2.get(), breq, &big).ok());
    EXPECT_EQ(AddressSpaceOf(exec2.get(), big.workspace().id()),
              std::to_string(4096ull << 20) + " " + std::to_string(4096ull << 20));
}

// ---- docker: refused before the daemon is asked anything ----

TEST(PolicyTest, DockerImagesUsersAndPulls)
{
    wstest::Server srv({"--policy-providers", kAll, "--policy-docker-images", "busybox:*,alpine",
                        "--policy-docker-users", "1000:1000",
                        // No daemon is reached: a refusal must come first.
                        "--docker-host", "unix:///nonexistent/docker.sock"});
    auto ws = srv.workspaces();
    EXPECT_TRUE(
        Refused(DoOpen(ws.get(), Docker("alpine:3")), "docker-images", "image", "alpine:3"));
    EXPECT_TRUE(Refused(DoOpen(ws.get(), Docker("evil/busybox:1")), "docker-images", "image",
                        "evil/busybox:1"));
    // Root is refused before any policy: no command ever runs as root.
    wstest::Error root = wstest::Decode(DoOpen(ws.get(), Docker("busybox:1", "0:0")));
    EXPECT_EQ(root.code, StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(root.reason, "MALFORMED");
    EXPECT_EQ(root.message, "docker.user must not have uid or gid 0: commands never run as root");
    EXPECT_TRUE(Refused(DoOpen(ws.get(), Docker("busybox:1", "1001:1001")), "docker-users", "user",
                        "1001:1001"));
    // A pull policy beyond the two that need no registry when the image is
    // present.
    EXPECT_TRUE(
        Refused(DoOpen(ws.get(), Docker("busybox:1", "", 2)), "docker-pull", "image", "busybox:1"));
    // Allowed ones go on to the (absent) daemon.
    for (const auto &req : {Docker("busybox:1"), Docker("alpine", "1000:1000", 1)}) {
        grpc::Status s = DoOpen(ws.get(), req);
        EXPECT_FALSE(s.ok());
        EXPECT_TRUE(NotPolicy(s)) << s.error_message();
    }
    ListProvidersResponse r = List(srv.channel());
    EXPECT_EQ(Strings(r.policy().docker_images()),
              (std::vector<std::string>{"busybox:*", "alpine"}));
    EXPECT_EQ(Strings(r.policy().docker_users()), std::vector<std::string>{"1000:1000"});
    EXPECT_FALSE(r.policy().docker_pull());
}

// With pulls off an image that is not there fails without a pull, saying
// so. Needs the daemon (the suite's setup starts it).
TEST(PolicyTest, MissingImageWithPullsOffSaysSo)
{
    wstest::Server srv;
    ListProvidersResponse r = List(srv.channel());
    if (!Provider(r, "docker")->available())
        GTEST_SKIP() << "no usable Docker daemon: " << Provider(r, "docker")->reason();
    grpc::Status s =
        DoOpen(srv.workspaces().get(), Docker("workspaced-policy-test-absent:never-there"));
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "WORKSPACE_FAILED");
    EXPECT_NE(s.error_message().find("pulls are off by policy"), std::string::npos)
        << s.error_message();
    EXPECT_EQ(wstest::Decode(s).metadata["rule"], "docker-pull");
}

// ---- reload ----

TEST(PolicyTest, SighupReloadsThePolicyAndABadFileKeepsTheOld)
{
    std::string conf = WriteConf("[policy]\nproviders = memory\n");
    wstest::Server srv({"--config", conf});
    auto ws = srv.workspaces();
    EXPECT_TRUE(Refused(DoOpen(ws.get(), Bash()), "providers", "provider", "local-bash"));
    OpenResponse mem_resp;
    OpenRequest mem;
    mem.mutable_memory();
    ASSERT_TRUE(DoOpen(ws.get(), mem, &mem_resp).ok());

    wstest::WriteHostFile(conf, "[policy]\nproviders = local-bash\n");
    int before = Count(wstest::ReadHostFile(srv.stderr_path()), "policy.reloaded");
    ASSERT_EQ(kill(srv.pid(), SIGHUP), 0);
    ASSERT_TRUE(WaitLogged(srv, "policy.reloaded", before))
        << wstest::ReadHostFile(srv.stderr_path());
    EXPECT_TRUE(DoOpen(ws.get(), Bash()).ok());
    EXPECT_TRUE(Refused(DoOpen(ws.get(), mem), "providers", "provider", "memory"));
    // The memory workspace opened before stays usable.
    EXPECT_TRUE(wstest::Write(srv.fs().get(), mem_resp.workspace().id(), "f", "x").ok());
    EXPECT_EQ(Strings(List(srv.channel()).policy().providers()),
              std::vector<std::string>{"local-bash"});

    // A bad file: logged with its line, the policy in force stays.
    wstest::WriteHostFile(conf, "[policy]\nproviders = memory\nnetwork = perhaps\n");
    before = Count(wstest::ReadHostFile(srv.stderr_path()), "policy.reload_failed");
    ASSERT_EQ(kill(srv.pid(), SIGHUP), 0);
    ASSERT_TRUE(WaitLogged(srv, "policy.reload_failed", before));
    std::string log = wstest::ReadHostFile(srv.stderr_path());
    EXPECT_NE(log.find(":3: key \\\"policy.network\\\": not true or false"), std::string::npos)
        << log;
    EXPECT_TRUE(DoOpen(ws.get(), Bash()).ok());
    EXPECT_TRUE(Refused(DoOpen(ws.get(), mem), "providers", "provider", "memory"));
}

// The flags stay over the file after a reload, as at start.
TEST(PolicyTest, FlagsStayOverTheFileAfterAReload)
{
    std::string conf = WriteConf("[policy]\nproviders = memory\n");
    wstest::Server srv({"--config", conf, "--policy-providers", "memory,local-bash"});
    auto ws = srv.workspaces();
    EXPECT_TRUE(DoOpen(ws.get(), Bash()).ok());
    wstest::WriteHostFile(conf, "[policy]\nproviders = memory\nnetwork = true\n");
    int before = Count(wstest::ReadHostFile(srv.stderr_path()), "policy.reloaded");
    ASSERT_EQ(kill(srv.pid(), SIGHUP), 0);
    ASSERT_TRUE(WaitLogged(srv, "policy.reloaded", before));
    EXPECT_TRUE(DoOpen(ws.get(), Bash()).ok());
    EXPECT_TRUE(List(srv.channel()).policy().network());
}

// [peers] names the tenant of a caller on the unix socket by its uid (here
// the test's own, which is also the server's), and is reloaded with the
// policy.
TEST(PolicyTest, PeersNameTheTenantAndAreReloaded)
{
    const std::string uid = std::to_string(getuid());
    std::string conf = WriteConf("[peers]\n" + uid +
                                 " = alice\n[policy.alice]\nproviders = memory\n"
                                 "[policy.bob]\nproviders = memory, local-bash\n");
    wstest::Server srv({"--config", conf});
    ASSERT_EQ(srv.address().compare(0, 5, "unix:"), 0);
    ListProvidersResponse r = List(srv.channel());
    EXPECT_EQ(r.policy().tenant(), "alice");
    EXPECT_EQ(Strings(r.policy().providers()), std::vector<std::string>{"memory"});
    auto ws = srv.workspaces();
    EXPECT_TRUE(Refused(DoOpen(ws.get(), Bash()), "providers", "provider", "local-bash"));

    wstest::WriteHostFile(conf, "[peers]\n" + uid +
                                    " = bob\n[policy.alice]\nproviders = memory\n"
                                    "[policy.bob]\nproviders = memory, local-bash\n");
    int before = Count(wstest::ReadHostFile(srv.stderr_path()), "policy.reloaded");
    ASSERT_EQ(kill(srv.pid(), SIGHUP), 0);
    ASSERT_TRUE(WaitLogged(srv, "policy.reloaded", before));
    EXPECT_EQ(List(srv.channel()).policy().tenant(), "bob");
    EXPECT_TRUE(DoOpen(ws.get(), Bash()).ok());
}

// ---- --check-config ----

TEST(PolicyTest, CheckConfigReportsABadPolicyLine)
{
    const std::string state = wstest::MakeTempDir("state");
    struct {
        std::string text;
        std::string want;
    } cases[] = {
        {"[policy]\nbind-roots = /proc\n",
         ":2: key \"policy.bind-roots\": \"/proc\" is /proc, which is never bound into a sandbox"},
        {"[policy]\nproviders = memory\n[policy.alice]\ndocker-users = 0:1000\n",
         ":4: key \"policy.alice.docker-users\": \"0:1000\": uid or gid 0 (root) is never "
         "allowed"},
        {"[policy.no way]\nnetwork = true\n",
         ":1: section \"policy.no way\": the name after the '.' must be 1-64 of A-Z a-z 0-9 . _ "
         "-"},
        {"[policy]\ncolour = blue\n", ":2: key \"policy.colour\": unknown key"},
        {"[policy.alice]\npass-env = A-B\n",
         ":2: key \"policy.alice.pass-env\": \"A-B\" is not an environment variable name"},
    };
    for (const auto &c : cases) {
        std::string conf = WriteConf("[server]\nstate-dir = " + state + "\n" + c.text);
        std::string err;
        int st = wstest::RunServerToExit({"--check-config", conf}, &err);
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << c.text << ": " << st;
        // The file's lines count from the [server] section's two.
        std::string want = c.want;
        size_t colon = want.find(':', 1);
        int line = std::stoi(want.substr(1, colon - 1)) + 2;
        want = ":" + std::to_string(line) + want.substr(colon);
        EXPECT_NE(err.find("config: " + conf + want), std::string::npos)
            << "want '" << want << "' in: " << err;
    }
    std::string err;
    int st = wstest::RunServerToExit(
        {"--check-config", WriteConf("[server]\nstate-dir = " + state +
                                     "\n[policy]\nproviders = memory\n[policy.alice]\n"
                                     "providers = local-bash\n[peers]\n1000 = alice\n")},
        &err);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << err;
    st = wstest::RunServerToExit({"--state-dir", state, "--policy-docker-users", "1000:0",
                                  "--check-config", WriteConf("[policy]\n")},
                                 &err);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    EXPECT_NE(err.find("invalid value '1000:0' for --policy-docker-users"), std::string::npos)
        << err;
}

// ---- Describe ----

TEST(PolicyTest, DescribeShowsTheCallersPolicy)
{
    wstest::Server srv({"--policy-providers", "memory,local-bash", "--policy-pass-env", "LANG",
                        "--policy-commands", "ls"});
    auto ws = srv.workspaces();
    OpenRequest mem;
    mem.mutable_memory();
    OpenResponse resp;
    ASSERT_TRUE(DoOpen(ws.get(), mem, &resp).ok());
    DescribeRequest req;
    req.set_workspace_id(resp.workspace().id());
    DescribeResponse d;
    grpc::ClientContext ctx;
    ASSERT_TRUE(ws->Describe(&ctx, req, &d).ok());
    EXPECT_EQ(d.policy().tenant(), "default");
    EXPECT_EQ(Strings(d.policy().providers()), (std::vector<std::string>{"memory", "local-bash"}));
    EXPECT_EQ(Strings(d.policy().pass_env()), std::vector<std::string>{"LANG"});
    EXPECT_TRUE(d.policy().commands_ceiling());
    EXPECT_EQ(Strings(d.policy().commands()), std::vector<std::string>{"ls"});
    EXPECT_FALSE(d.policy().network());
    EXPECT_FALSE(d.policy().docker_pull());
}

} // namespace
