// Unit tests of the operator's policy: parsing every key, inheritance from
// [policy] into [policy.TENANT], the [peers] map, and the Open checks with
// their exact rule and item.
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/policy/policy.h"
#include "server/providers/provider.h"
}

namespace
{

// A directory under /tmp, removed when the test ends: the test's own
// temporary directory may lie under /root, which is never a bind root, and
// be too deep for a socket's path.
std::string TempDir()
{
    static struct Dirs {
        std::vector<std::string> v;
        ~Dirs()
        {
            for (const auto &d : v)
                (void)system(("rm -rf '" + d + "'").c_str());
        }
    } dirs;
    char tmpl[] = "/tmp/wspolXXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    char *real = realpath(tmpl, nullptr);
    std::string out = real ? real : "";
    free(real);
    if (!out.empty())
        dirs.v.push_back(out);
    return out;
}

struct Set {
    ws_policy_set *s = nullptr;
    Set()
    {
        EXPECT_EQ(ws_policy_set_new(&s), 0);
    }
    ~Set()
    {
        ws_policy_set_unref(s);
    }
    // "" when accepted, else why.
    std::string Key(const char *tenant, const char *key, const std::string &value)
    {
        char why[256] = "";
        return ws_policy_set_key(s, tenant, key, value.c_str(), why, sizeof(why)) == 0 ? "" : why;
    }
};

std::string Meta(const ws_diag &d, const std::string &key)
{
    for (int i = 0; i < d.n_meta; i++)
        if (key == d.key[i])
            return d.value[i];
    return "<none>";
}

// An Open request with owned sub-messages.
struct Req {
    Workspace__V1__OpenRequest req = WORKSPACE__V1__OPEN_REQUEST__INIT;
    Workspace__V1__LocalSandboxConfig sb = WORKSPACE__V1__LOCAL_SANDBOX_CONFIG__INIT;
    Workspace__V1__DockerConfig dk = WORKSPACE__V1__DOCKER_CONFIG__INIT;
    Workspace__V1__LocalBashConfig lb = WORKSPACE__V1__LOCAL_BASH_CONFIG__INIT;
    Workspace__V1__MemoryConfig mem = WORKSPACE__V1__MEMORY_CONFIG__INIT;
    Workspace__V1__Capabilities caps = WORKSPACE__V1__CAPABILITIES__INIT;
    Workspace__V1__ShellCapability shell = WORKSPACE__V1__SHELL_CAPABILITY__INIT;
    std::vector<char *> ro, env, cmds;
    std::vector<std::string> store;

    explicit Req(const std::string &provider)
    {
        if (provider == "memory") {
            req.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_MEMORY;
            req.memory = &mem;
        } else if (provider == "local-bash") {
            req.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_BASH;
            req.local_bash = &lb;
        } else if (provider == "local-sandbox") {
            req.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_SANDBOX;
            req.local_sandbox = &sb;
        } else {
            req.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_DOCKER;
            req.docker = &dk;
            dk.image = const_cast<char *>("busybox:1");
        }
        store.reserve(64);
    }
    void Binds(const std::vector<std::string> &paths)
    {
        for (const auto &p : paths) {
            store.push_back(p);
            ro.push_back(store.back().data());
        }
        sb.read_only_paths = ro.data();
        sb.n_read_only_paths = ro.size();
    }
    void Shell(const std::vector<std::string> &commands, const std::vector<std::string> &pass)
    {
        for (const auto &c : commands) {
            store.push_back(c);
            cmds.push_back(store.back().data());
        }
        for (const auto &e : pass) {
            store.push_back(e);
            env.push_back(store.back().data());
        }
        shell.allowed_commands = cmds.data();
        shell.n_allowed_commands = cmds.size();
        shell.pass_env = env.data();
        shell.n_pass_env = env.size();
        caps.shell = &shell;
        req.capabilities = &caps;
    }
};

int Check(const ws_policy_set *s, const char *tenant, const Req &r, ws_diag *d,
          const std::vector<std::string> &own = {})
{
    std::vector<const char *> o;
    for (const auto &x : own)
        o.push_back(x.c_str());
    const char *image =
        r.req.provider_case == WORKSPACE__V1__OPEN_REQUEST__PROVIDER_DOCKER ? r.dk.image : nullptr;
    return ws_policy_check_open(ws_policy_for(s, tenant), &r.req, image, o.data(), o.size(), d);
}

TEST(Policy, DefaultsAreSafe)
{
    Set set;
    ASSERT_EQ(ws_policy_set_finish(set.s), 0);
    const ws_policy *p = ws_policy_for(set.s, "anyone");
    EXPECT_EQ(p->providers, 1u << WS_PROVIDER_MEMORY | 1u << WS_PROVIDER_LOCAL_SANDBOX |
                                1u << WS_PROVIDER_DOCKER);
    EXPECT_FALSE(p->network);
    EXPECT_EQ(p->bind_roots.n, 0u);
    EXPECT_EQ(p->pass_env.n, 0u);
    EXPECT_FALSE(p->commands_ceiling);
    ASSERT_EQ(p->docker_images.n, 1u);
    EXPECT_STREQ(p->docker_images.v[0], "*");
    EXPECT_FALSE(p->docker_pull);
    EXPECT_EQ(p->docker_users.n, 0u);
    EXPECT_EQ(p->address_space_mb, 0u);

    ws_diag d = {};
    Req bash("local-bash");
    EXPECT_EQ(Check(set.s, "default", bash, &d), -WS_EPOLICY);
    EXPECT_EQ(Meta(d, "rule"), "providers");
    EXPECT_EQ(Meta(d, "provider"), "local-bash");
    EXPECT_NE(std::string(d.message).find("providers"), std::string::npos) << d.message;
    d = {};
    Req mem("memory");
    EXPECT_EQ(Check(set.s, "default", mem, &d), 0) << d.message;
}

TEST(Policy, ValuesAreCheckedAtParse)
{
    Set set;
    const std::string dir = TempDir();
    struct {
        const char *key;
        std::string value;
        const char *why; // a part of the reason
    } bad[] = {
        {"providers", "memory,ssh", "not a comma-separated list"},
        {"providers", "memory,,docker", "empty entry"},
        {"network", "yes", "not true or false"},
        {"docker-pull", "1", "not true or false"},
        {"bind-roots", "relative", "not an absolute path"},
        {"bind-roots", "/", "cannot be a bind root"},
        {"bind-roots", "/proc", "never bound"},
        {"bind-roots", "/etc/ssl", "under /etc"},
        {"bind-roots", "/run/user", "under /run"},
        {"bind-roots", dir + "/", "not canonical"},
        {"bind-roots", dir + "/../" + dir.substr(dir.rfind('/') + 1), "not canonical"},
        {"bind-roots", dir + "/missing", "No such file"},
        {"pass-env", "A-B", "not an environment variable name"},
        {"pass-env", "1A", "not an environment variable name"},
        {"commands", "bin/ls", "neither a command name nor an absolute path"},
        {"commands", "ls -l", "blank"},
        {"docker-images", "busy[box", "without its ']'"},
        {"docker-users", "0:1000", "never allowed"},
        {"docker-users", "1000:0", "never allowed"},
        {"docker-users", "root", "not uid:gid"},
        {"docker-users", "1000:1000:1", "not uid:gid"},
        {"address-space-mb", "-1", "not a number of MiB"},
        {"address-space-mb", "1G", "not a number of MiB"},
        {"address-space-mb", "", "not a number of MiB"},
        {"address-space-mb", "16777217", "not a number of MiB from 0 to 16777216"},
        {"unknown-key", "x", "unknown key"},
    };
    for (const auto &b : bad) {
        std::string why = set.Key(nullptr, b.key, b.value);
        EXPECT_NE(why.find(b.why), std::string::npos)
            << b.key << " = " << b.value << ": got '" << why << "'";
    }
    EXPECT_NE(set.Key("bad tenant", "network", "true"), "");
    EXPECT_EQ(set.Key(nullptr, "bind-roots", dir), "");
    EXPECT_EQ(set.Key(nullptr, "providers", " memory , docker "), "");
    EXPECT_EQ(set.Key(nullptr, "docker-users", "1000:1000, 1001:1001"), "");
    EXPECT_EQ(set.Key(nullptr, "docker-images", "none"), "");
    ASSERT_EQ(ws_policy_set_finish(set.s), 0);
    const ws_policy *p = ws_policy_for(set.s, nullptr);
    EXPECT_EQ(p->providers, 1u << WS_PROVIDER_MEMORY | 1u << WS_PROVIDER_DOCKER);
    EXPECT_EQ(p->docker_users.n, 2u);
    EXPECT_EQ(p->docker_images.n, 0u);
}

TEST(Policy, TenantsInheritUnsetKeysFromTheDefault)
{
    Set set;
    ASSERT_EQ(set.Key(nullptr, "network", "true"), "");
    ASSERT_EQ(set.Key(nullptr, "pass-env", "LANG"), "");
    ASSERT_EQ(set.Key(nullptr, "commands", "ls,cat"), "");
    ASSERT_EQ(set.Key("alice", "providers", "memory,local-bash"), "");
    ASSERT_EQ(set.Key("bob", "network", "false"), "");
    ASSERT_EQ(set.Key("bob", "pass-env", "none"), "");
    ASSERT_EQ(ws_policy_set_finish(set.s), 0);

    const ws_policy *alice = ws_policy_for(set.s, "alice");
    EXPECT_EQ(alice->providers, 1u << WS_PROVIDER_MEMORY | 1u << WS_PROVIDER_LOCAL_BASH);
    EXPECT_TRUE(alice->network);
    ASSERT_EQ(alice->pass_env.n, 1u);
    EXPECT_TRUE(alice->commands_ceiling);
    EXPECT_EQ(alice->commands.n, 2u);
    const ws_policy *bob = ws_policy_for(set.s, "bob");
    EXPECT_FALSE(bob->network);
    EXPECT_EQ(bob->pass_env.n, 0u);
    EXPECT_EQ(bob->providers, ws_policy_for(set.s, nullptr)->providers);
    // A tenant without a section gets the default.
    EXPECT_EQ(ws_policy_for(set.s, "carol"), ws_policy_for(set.s, nullptr));

    ws_diag d = {};
    Req bash("local-bash");
    EXPECT_EQ(Check(set.s, "alice", bash, &d), 0) << d.message;
    d = {};
    EXPECT_EQ(Check(set.s, "bob", bash, &d), -WS_EPOLICY);
    EXPECT_EQ(Meta(d, "rule"), "providers");
}

TEST(Policy, BindsNeedARootAndNeverReachTheHostsOwnTrees)
{
    Set set;
    std::string root = TempDir();
    const std::string state = TempDir();
    ASSERT_EQ(mkdir((root + "/data").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((state + "/workspaces").c_str(), 0755), 0);
    // A socket inside an allowed root.
    const std::string sock = root + "/s.sock";
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa = {};
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock.c_str());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)), 0);
    ASSERT_EQ(set.Key(nullptr, "bind-roots", root + "," + state), "");
    ASSERT_EQ(ws_policy_set_finish(set.s), 0);
    const std::vector<std::string> own = {state, state + "/workspaces"};

    for (const std::string &path : std::vector<std::string>{
             "/", "/proc", "/proc/1", "/sys", "/dev", "/dev/null", "/run", "/etc", "/etc/passwd",
             "/boot", "/root", state, state + "/workspaces", sock, "/tmp"}) {
        ws_diag d = {};
        Req r("local-sandbox");
        r.Binds({path});
        EXPECT_EQ(Check(set.s, "default", r, &d, own), -WS_EPOLICY) << path;
        EXPECT_EQ(Meta(d, "rule"), "bind-roots") << path;
        EXPECT_EQ(Meta(d, "path"), path);
        EXPECT_NE(std::string(d.message).find("bind-roots"), std::string::npos) << d.message;
    }
    for (const std::string &path : std::vector<std::string>{root, root + "/data"}) {
        ws_diag d = {};
        Req r("local-sandbox");
        r.Binds({path});
        EXPECT_EQ(Check(set.s, "default", r, &d, own), 0) << path << ": " << d.message;
    }
    close(fd);
    unlink(sock.c_str());
    rmdir((root + "/data").c_str());
    rmdir(root.c_str());
}

TEST(Policy, ShellNetworkAndDockerRules)
{
    Set set;
    ASSERT_EQ(set.Key(nullptr, "providers", "memory,local-bash,local-sandbox,docker"), "");
    ASSERT_EQ(set.Key(nullptr, "pass-env", "LANG"), "");
    ASSERT_EQ(set.Key(nullptr, "commands", "ls,/bin/cat"), "");
    ASSERT_EQ(set.Key(nullptr, "docker-images", "busybox:*,alpine"), "");
    ASSERT_EQ(set.Key(nullptr, "docker-users", "1000:1000"), "");
    ASSERT_EQ(ws_policy_set_finish(set.s), 0);

    struct Case {
        std::vector<std::string> commands, env;
        const char *rule, *item_key, *item;
    } cases[] = {
        {{"ls", "/bin/cat"}, {"LANG"}, nullptr, nullptr, nullptr},
        {{"ls", "cat"}, {}, "commands", "command", "cat"},
        {{"ls", "sh"}, {}, "commands", "command", "sh"},
        {{"ls"}, {"LANG", "AWS_SECRET_ACCESS_KEY"}, "pass-env", "name", "AWS_SECRET_ACCESS_KEY"},
    };
    for (const auto &c : cases) {
        ws_diag d = {};
        Req r("local-bash");
        r.Shell(c.commands, c.env);
        int err = Check(set.s, "default", r, &d);
        if (!c.rule) {
            EXPECT_EQ(err, 0) << d.message;
            continue;
        }
        EXPECT_EQ(err, -WS_EPOLICY) << c.item;
        EXPECT_EQ(Meta(d, "rule"), c.rule);
        EXPECT_EQ(Meta(d, c.item_key), c.item);
    }

    ws_diag d = {};
    Req sb("local-sandbox");
    sb.sb.network = WORKSPACE__V1__NETWORK__NETWORK_ALLOW;
    EXPECT_EQ(Check(set.s, "default", sb, &d), -WS_EPOLICY);
    EXPECT_EQ(Meta(d, "rule"), "network");

    d = {};
    Req dk("docker");
    dk.dk.network = WORKSPACE__V1__NETWORK__NETWORK_ALLOW;
    EXPECT_EQ(Check(set.s, "default", dk, &d), -WS_EPOLICY);
    EXPECT_EQ(Meta(d, "rule"), "network");

    struct DockerCase {
        const char *image, *user;
        int pull;
        const char *rule, *item_key, *item;
    } dcases[] = {
        {"busybox:1", "", 0, nullptr, nullptr, nullptr},
        {"alpine", "1000:1000", 1, nullptr, nullptr, nullptr},
        {"alpine:3", "", 0, "docker-images", "image", "alpine:3"},
        {"evil/busybox:1", "", 0, "docker-images", "image", "evil/busybox:1"},
        {"busybox:1", "1001:1001", 0, "docker-users", "user", "1001:1001"},
        {"busybox:1", "0:0", 0, "docker-users", "user", "0:0"},
        {"busybox:1", "", 2, "docker-pull", "image", "busybox:1"},
    };
    for (const auto &c : dcases) {
        ws_diag dd = {};
        Req r("docker");
        r.dk.image = const_cast<char *>(c.image);
        r.dk.user = const_cast<char *>(c.user);
        r.dk.pull_policy = static_cast<Workspace__V1__PullPolicy>(c.pull);
        int err = Check(set.s, "default", r, &dd);
        if (!c.rule) {
            EXPECT_EQ(err, 0) << c.image << ": " << dd.message;
            continue;
        }
        EXPECT_EQ(err, -WS_EPOLICY) << c.image << " " << c.user;
        EXPECT_EQ(Meta(dd, "rule"), c.rule);
        EXPECT_EQ(Meta(dd, c.item_key), c.item);
    }
}

// address-space-mb is a ceiling for local-bash only, inherited like any
// key, and 0 means none.
TEST(Policy, AddressSpaceIsACeilingForLocalBash)
{
    Set set;
    ASSERT_EQ(set.Key(nullptr, "providers", "memory,local-bash"), "");
    ASSERT_EQ(set.Key(nullptr, "address-space-mb", "1024"), "");
    ASSERT_EQ(set.Key("alice", "address-space-mb", "0"), "");
    ASSERT_EQ(set.Key("bob", "network", "true"), "");
    ASSERT_EQ(ws_policy_set_finish(set.s), 0);
    EXPECT_EQ(ws_policy_for(set.s, nullptr)->address_space_mb, 1024u);
    EXPECT_EQ(ws_policy_for(set.s, "alice")->address_space_mb, 0u);
    EXPECT_EQ(ws_policy_for(set.s, "bob")->address_space_mb, 1024u);

    struct {
        const char *tenant;
        uint32_t asked;
        bool ok;
    } cases[] = {
        {"bob", 0, true},         {"bob", 1024, true},       {"bob", 1025, false},
        {"bob", 4u << 20, false}, {"alice", 4u << 20, true}, {"alice", 0, true},
    };
    for (const auto &c : cases) {
        ws_diag d = {};
        Req bash("local-bash");
        bash.lb.address_space_mb = c.asked;
        int err = Check(set.s, c.tenant, bash, &d);
        if (c.ok) {
            EXPECT_EQ(err, 0) << c.tenant << " " << c.asked << ": " << d.message;
            continue;
        }
        EXPECT_EQ(err, -WS_EPOLICY) << c.tenant << " " << c.asked;
        EXPECT_EQ(Meta(d, "rule"), "address-space-mb");
        EXPECT_EQ(Meta(d, "address_space_mb"), std::to_string(c.asked));
        EXPECT_EQ(Meta(d, "limit"), "1024");
    }
}

TEST(Policy, PeersMapUidsToTenants)
{
    Set set;
    char why[256];
    EXPECT_EQ(ws_policy_set_peer(set.s, "1000", "alice", why, sizeof(why)), 0);
    EXPECT_EQ(ws_policy_set_peer(set.s, "0", "ops", why, sizeof(why)), 0);
    EXPECT_EQ(ws_policy_set_peer(set.s, "1000", "bob", why, sizeof(why)), -1);
    EXPECT_EQ(ws_policy_set_peer(set.s, "x", "bob", why, sizeof(why)), -1);
    EXPECT_EQ(ws_policy_set_peer(set.s, "1001", "no such", why, sizeof(why)), -1);
    ASSERT_EQ(ws_policy_set_finish(set.s), 0);
    char t[WS_POLICY_TENANT_MAX + 1];
    ASSERT_TRUE(ws_policy_peer_tenant(set.s, 1000, t));
    EXPECT_STREQ(t, "alice");
    ASSERT_TRUE(ws_policy_peer_tenant(set.s, 0, t));
    EXPECT_STREQ(t, "ops");
    EXPECT_FALSE(ws_policy_peer_tenant(set.s, 1001, t));
}

} // namespace
