// Unit tests of the provider tables and the set: every table is whole and
// agrees with itself, each provider's Open check answers with the errors
// the clients see, the records and command environments are what the
// server has always used, and a set whose making fails half-way frees what
// was made.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/exec/process.h"
#include "server/providers/docker.h"
#include "server/providers/local_sandbox_ops.h"
#include "server/providers/probe.h"
#include "server/providers/provider.h"
}

namespace
{

std::string TempDir()
{
    std::string t =
        std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/provXXXXXX";
    std::vector<char> buf(t.begin(), t.end());
    buf.push_back('\0');
    EXPECT_NE(mkdtemp(buf.data()), nullptr);
    // Bind paths are checked canonical: no symlink on the way to it.
    char *canon = realpath(buf.data(), nullptr);
    std::string out = canon ? canon : buf.data();
    free(canon);
    return out;
}

std::vector<std::string> Entries(const std::string &dir)
{
    std::vector<std::string> out;
    DIR *d = opendir(dir.c_str());
    if (!d)
        return out;
    while (struct dirent *e = readdir(d))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            out.push_back(e->d_name);
    closedir(d);
    return out;
}

std::string Meta(const struct ws_diag &d, const char *key)
{
    for (int i = 0; i < d.n_meta; i++)
        if (strcmp(d.key[i], key) == 0)
            return d.value[i];
    return "";
}

const struct ws_provider_ops *Ops(enum ws_provider_kind k)
{
    return ws_providers_get(nullptr, k)->ops;
}

// An environment variable set for one scope, restored after.
class ScopedEnv
{
  public:
    ScopedEnv(const char *name, const char *value) : name_(name)
    {
        const char *old = getenv(name);
        had_ = old != nullptr;
        if (had_)
            old_ = old;
        setenv(name, value, 1);
    }
    ~ScopedEnv()
    {
        if (had_)
            setenv(name_, old_.c_str(), 1);
        else
            unsetenv(name_);
    }

  private:
    const char *name_;
    bool had_;
    std::string old_;
};

// Open requests of each provider, with their configs alongside.
struct Requests {
    Workspace__V1__MemoryConfig memory = WORKSPACE__V1__MEMORY_CONFIG__INIT;
    Workspace__V1__LocalBashConfig bash = WORKSPACE__V1__LOCAL_BASH_CONFIG__INIT;
    Workspace__V1__LocalSandboxConfig sandbox = WORKSPACE__V1__LOCAL_SANDBOX_CONFIG__INIT;
    Workspace__V1__DockerConfig docker = WORKSPACE__V1__DOCKER_CONFIG__INIT;

    Workspace__V1__OpenRequest Of(enum ws_provider_kind k)
    {
        Workspace__V1__OpenRequest req = WORKSPACE__V1__OPEN_REQUEST__INIT;
        switch (k) {
        case WS_PROVIDER_MEMORY:
            req.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_MEMORY;
            req.memory = &memory;
            break;
        case WS_PROVIDER_LOCAL_BASH:
            req.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_BASH;
            req.local_bash = &bash;
            break;
        case WS_PROVIDER_LOCAL_SANDBOX:
            req.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_SANDBOX;
            req.local_sandbox = &sandbox;
            break;
        default:
            req.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_DOCKER;
            req.docker = &docker;
            break;
        }
        return req;
    }
};

TEST(Table, EveryProviderIsWholeAndAgreesWithItself)
{
    std::set<int> open_cases, record_cases;

    for (int k = 0; k < WS_PROVIDER_COUNT; k++) {
        const struct ws_provider *p = ws_providers_get(nullptr, (enum ws_provider_kind)k);
        ASSERT_NE(p, nullptr);
        const struct ws_provider_ops *o = p->ops;
        ASSERT_NE(o, nullptr) << k;
        SCOPED_TRACE(o->name);
        // In kind order, named as the kinds are.
        EXPECT_EQ(o->kind, k);
        EXPECT_STREQ(o->name, ws_provider_kind_name((enum ws_provider_kind)k));
        EXPECT_EQ(ws_provider_kind_by_name(o->name), k);
        EXPECT_EQ(ws_providers_by_name(nullptr, o->name), p);
        EXPECT_EQ(ws_provider_get((enum ws_provider_kind)k), p);
        EXPECT_EQ(p->rt, nullptr);
        // A shell is declared exactly when there is a way to run commands.
        EXPECT_TRUE(o->caps & WS_CAP_FS);
        EXPECT_EQ((o->caps & WS_CAP_SHELL) != 0, o->exec_env != nullptr);
        // Entries that come in pairs.
        EXPECT_TRUE(!o->exec_wrap || o->exec_discard);
        EXPECT_TRUE(!o->describe || o->describe_free);
        EXPECT_EQ(o->rt_new != nullptr, o->rt_free != nullptr);
        EXPECT_TRUE(!o->exec_wrap || o->exec_env);
        // Required entries.
        EXPECT_NE(o->record, nullptr);
        EXPECT_NE(o->fs_open, nullptr);
        // The request and record cases are its own, and the request's
        // case picks it.
        EXPECT_TRUE(open_cases.insert(o->open_case).second);
        EXPECT_TRUE(record_cases.insert(o->record_case).second);
        Workspace__V1__OpenRequest req = WORKSPACE__V1__OPEN_REQUEST__INIT;
        req.provider_case = (Workspace__V1__OpenRequest__ProviderCase)o->open_case;
        EXPECT_EQ(ws_provider_kind_of_request(&req), k);
        EXPECT_EQ(ws_providers_of_request(nullptr, &req), p);
    }
    Workspace__V1__OpenRequest none = WORKSPACE__V1__OPEN_REQUEST__INIT;
    EXPECT_EQ(ws_providers_of_request(nullptr, &none), nullptr);
    EXPECT_EQ(ws_provider_kind_of_request(&none), -1);
    EXPECT_EQ(ws_providers_get(nullptr, WS_PROVIDER_COUNT), nullptr);
    EXPECT_EQ(ws_provider_kind_name(WS_PROVIDER_COUNT), nullptr);
    EXPECT_EQ(ws_provider_kind_by_name("bash"), -1);
    EXPECT_EQ(ws_provider_kind_by_name(nullptr), -1);
    EXPECT_EQ(ws_providers_by_name(nullptr, "bash"), nullptr);
    EXPECT_EQ(ws_providers_builtin(), ws_providers_builtin());
    EXPECT_EQ(ws_providers_get(ws_providers_builtin(), WS_PROVIDER_DOCKER),
              ws_provider_get(WS_PROVIDER_DOCKER));
}

// What rpc/services/exec.c has always used for each provider's commands.
TEST(Table, ExecEnvironments)
{
    EXPECT_EQ(Ops(WS_PROVIDER_MEMORY)->exec_env, nullptr);

    const struct ws_provider_exec_env *bash = Ops(WS_PROVIDER_LOCAL_BASH)->exec_env;
    ASSERT_NE(bash, nullptr);
    EXPECT_EQ(bash->path, nullptr);
    EXPECT_EQ(bash->home, nullptr);
    EXPECT_TRUE(bash->on_host);
    EXPECT_FALSE(bash->foreign_root);
    EXPECT_EQ(Ops(WS_PROVIDER_LOCAL_BASH)->exec_wrap, nullptr);

    const struct ws_provider_exec_env *sb = Ops(WS_PROVIDER_LOCAL_SANDBOX)->exec_env;
    ASSERT_NE(sb, nullptr);
    EXPECT_EQ(sb->path, nullptr);
    EXPECT_STREQ(sb->home, WS_SANDBOX_WORKSPACE);
    EXPECT_STREQ(sb->home, "/workspace");
    EXPECT_FALSE(sb->on_host);
    EXPECT_FALSE(sb->foreign_root);
    EXPECT_EQ(Ops(WS_PROVIDER_LOCAL_SANDBOX)->exec_discard, ws_sandbox_discard);

    const struct ws_provider_exec_env *dk = Ops(WS_PROVIDER_DOCKER)->exec_env;
    ASSERT_NE(dk, nullptr);
    EXPECT_STREQ(dk->path, WS_DOCKER_EXEC_PATH);
    EXPECT_STREQ(dk->home, WS_DOCKER_WORKDIR);
    EXPECT_FALSE(dk->on_host);
    EXPECT_TRUE(dk->foreign_root);
    EXPECT_EQ(Ops(WS_PROVIDER_DOCKER)->exec_discard, ws_docker_rt_discard);
}

struct CheckCase {
    const char *name;
    int err;
    const char *field;
    const char *message; // a prefix; "" for none
};

void ExpectCheck(const CheckCase &c, const Workspace__V1__OpenRequest *req,
                 const char *const *own = nullptr, size_t n_own = 0)
{
    SCOPED_TRACE(c.name);
    union ws_provider_scratch scratch;
    const Workspace__V1__OpenRequest *checked = nullptr;
    const struct ws_provider *p = nullptr;
    struct ws_diag d = {};
    int err = ws_providers_check(nullptr, req, own, n_own, &scratch, &d, &checked, &p);
    EXPECT_EQ(err, c.err) << d.message;
    if (c.err == 0) {
        EXPECT_EQ(checked, req);
        EXPECT_EQ(p, ws_providers_of_request(nullptr, req));
        return;
    }
    EXPECT_EQ(p, nullptr);
    EXPECT_EQ(Meta(d, "field"), c.field);
    EXPECT_EQ(std::string(d.message).rfind(c.message, 0), 0u) << d.message;
}

// The provider's check of `req` with one server directory of its own.
static int CheckOwn(const Workspace__V1__OpenRequest *req, const char *const *own,
                    struct ws_diag *d, const struct ws_provider **p)
{
    union ws_provider_scratch scratch;
    const Workspace__V1__OpenRequest *checked = nullptr;
    return ws_providers_check(nullptr, req, own, 1, &scratch, d, &checked, p);
}

TEST(Check, ExactlyOneProvider)
{
    Workspace__V1__OpenRequest req = WORKSPACE__V1__OPEN_REQUEST__INIT;
    ExpectCheck(
        {"no provider", -WS_EMALFORMED, "provider", "exactly one provider config is required"},
        &req);
}

TEST(Check, MemoryAndLocalBashHaveNothingToCheck)
{
    Requests r;
    Workspace__V1__OpenRequest mem = r.Of(WS_PROVIDER_MEMORY);
    Workspace__V1__OpenRequest bash = r.Of(WS_PROVIDER_LOCAL_BASH);
    ExpectCheck({"memory", 0, "", ""}, &mem);
    ExpectCheck({"local-bash", 0, "", ""}, &bash);
}

TEST(Check, LocalSandbox)
{
    const std::string dir = TempDir();
    const std::string good = dir + "/good";
    const std::string own = dir + "/state";
    ASSERT_EQ(mkdir(good.c_str(), 0700), 0);
    ASSERT_EQ(mkdir(own.c_str(), 0700), 0);
    ASSERT_EQ(symlink(good.c_str(), (dir + "/link").c_str()), 0);
    const std::string link = dir + "/link";
    const std::string inside_own = own + "/x";
    ASSERT_EQ(mkdir(inside_own.c_str(), 0700), 0);
    const char *owns[] = {own.c_str()};
    const char *not_canonical = "must be an existing canonical absolute path (no symlinks)";

    struct {
        std::vector<std::string> rw, ro;
        uint32_t pids, memory_mb;
        double cpus;
        CheckCase want;
    } cases[] = {
        {{good}, {good}, 0, 0, 0, {"binds", 0, "", ""}},
        {{}, {}, 8, 16, 0.01, {"lowest caps", 0, "", ""}},
        {{}, {}, 1u << 22, 1u << 22, 1024, {"highest caps", 0, "", ""}},
        {{"tmp"}, {}, 0, 0, 0, {"relative", -WS_EMALFORMED, "read_write_paths", ""}},
        {{good, link}, {}, 0, 0, 0, {"symlink", -WS_EMALFORMED, "read_write_paths", ""}},
        {{}, {good + "/"}, 0, 0, 0, {"trailing slash", -WS_EMALFORMED, "read_only_paths", ""}},
        {{}, {inside_own}, 0, 0, 0, {"own", -WS_EMALFORMED, "read_only_paths", ""}},
        {{dir}, {}, 0, 0, 0, {"contains own", -WS_EMALFORMED, "read_write_paths", ""}},
        {{}, {}, 7, 0, 0, {"pids low", -WS_ELIMIT, "pids_limit", "local_sandbox.pids_limit"}},
        {{}, {}, (1u << 22) + 1, 0, 0, {"pids high", -WS_ELIMIT, "pids_limit", ""}},
        {{}, {}, 0, 15, 0, {"memory low", -WS_ELIMIT, "memory_mb", "local_sandbox.memory_mb"}},
        {{}, {}, 0, 0, 0.001, {"cpus low", -WS_ELIMIT, "cpus", "local_sandbox.cpus"}},
        {{}, {}, 0, 0, 1025, {"cpus high", -WS_ELIMIT, "cpus", ""}},
        {{}, {}, 0, 0, -1, {"cpus negative", -WS_ELIMIT, "cpus", ""}},
        // Paths come first: both wrong, the path is named.
        {{"tmp"}, {}, 7, 0, 0, {"paths first", -WS_EMALFORMED, "read_write_paths", ""}},
    };
    for (auto &c : cases) {
        Requests r;
        std::vector<char *> rw, ro;
        for (auto &s : c.rw)
            rw.push_back(const_cast<char *>(s.c_str()));
        for (auto &s : c.ro)
            ro.push_back(const_cast<char *>(s.c_str()));
        r.sandbox.read_write_paths = rw.data();
        r.sandbox.n_read_write_paths = rw.size();
        r.sandbox.read_only_paths = ro.data();
        r.sandbox.n_read_only_paths = ro.size();
        r.sandbox.pids_limit = c.pids;
        r.sandbox.memory_mb = c.memory_mb;
        r.sandbox.cpus = c.cpus;
        Workspace__V1__OpenRequest req = r.Of(WS_PROVIDER_LOCAL_SANDBOX);
        ExpectCheck(c.want, &req, owns, 1);
    }

    // The messages name the entry.
    Requests r;
    std::string bad_path = "tmp";
    char *paths[] = {const_cast<char *>(good.c_str()), const_cast<char *>(bad_path.c_str())};
    r.sandbox.read_only_paths = paths;
    r.sandbox.n_read_only_paths = 2;
    Workspace__V1__OpenRequest req = r.Of(WS_PROVIDER_LOCAL_SANDBOX);
    struct ws_diag d = {};
    const struct ws_provider *p;
    ASSERT_EQ(CheckOwn(&req, owns, &d, &p), -WS_EMALFORMED);
    EXPECT_EQ(std::string(d.message), std::string("read_only_paths[1] ") + not_canonical);
    r.sandbox.n_read_only_paths = 0;
    char *own_path = const_cast<char *>(inside_own.c_str());
    r.sandbox.read_write_paths = &own_path;
    r.sandbox.n_read_write_paths = 1;
    d = {};
    ASSERT_EQ(CheckOwn(&req, owns, &d, &p), -WS_EMALFORMED);
    EXPECT_STREQ(d.message, "read_write_paths[0] overlaps the server's own directories");

    // One bind more than the bound.
    std::vector<char *> many(WS_SANDBOX_BINDS_MAX + 1, const_cast<char *>(good.c_str()));
    r.sandbox.read_write_paths = many.data();
    r.sandbox.n_read_write_paths = many.size();
    d = {};
    ASSERT_EQ(CheckOwn(&req, owns, &d, &p), -WS_ELIMIT);
    EXPECT_STREQ(d.message, "read_write_paths has 33 entries; at most 32");
    EXPECT_EQ(Meta(d, "field"), "read_write_paths");
    r.sandbox.n_read_write_paths = WS_SANDBOX_BINDS_MAX;
    EXPECT_EQ(CheckOwn(&req, owns, &d, &p), 0);
}

TEST(Check, Docker)
{
    struct {
        const char *image, *user;
        double cpus;
        CheckCase want;
    } cases[] = {
        {"busybox:1.36", "", 0, {"plain", 0, "", ""}},
        {"busybox:1.36", "1000:1000", 2, {"user", 0, "", ""}},
        {"",
         "",
         0,
         {"no image", -WS_EMALFORMED, "image",
          "docker.image is required (this server sets no default image)"}},
        {"Busy Box",
         "",
         0,
         {"bad image", -WS_EMALFORMED, "image", "docker.image is not a valid image reference"}},
        {"busybox",
         "root",
         0,
         {"name as user", -WS_EMALFORMED, "user", "docker.user must be \"uid:gid\""}},
        {"busybox", "", -1, {"negative cpus", -WS_EMALFORMED, "cpus", "docker.user must be"}},
        {"", "root", -1, {"image first", -WS_EMALFORMED, "image", ""}},
        // Root is never a command's user, whatever the policy says.
        {"busybox",
         "0:0",
         0,
         {"root", -WS_EMALFORMED, "user",
          "docker.user must not have uid or gid 0: commands never run as root"}},
        {"busybox", "5:0", 0, {"gid 0", -WS_EMALFORMED, "user", "docker.user must not have uid"}},
        {"busybox", "0:5", 0, {"uid 0", -WS_EMALFORMED, "user", "docker.user must not have uid"}},
        // Nor the in-container init's helper uid (the default's, here).
        {"busybox",
         "524288:1000",
         0,
         {"helper uid", -WS_EMALFORMED, "user",
          "docker.user must not have the uid or gid 524288: the server's own helper has it"}},
        {"busybox",
         "1000:524288",
         0,
         {"helper gid", -WS_EMALFORMED, "user", "docker.user must not have the uid or gid"}},
    };
    for (auto &c : cases) {
        Requests r;
        r.docker.image = const_cast<char *>(c.image);
        r.docker.user = const_cast<char *>(c.user);
        r.docker.cpus = c.cpus;
        Workspace__V1__OpenRequest req = r.Of(WS_PROVIDER_DOCKER);
        ExpectCheck(c.want, &req);
    }
}

// The helper uid is the server's (the first of its workspace uid range), not
// a fixed number.
TEST(Docker, UserIsNeverTheConfiguredHelper)
{
    struct ws_provider_config cfg = {};
    cfg.helper_uid = 700000;
    struct ws_providers *ps = nullptr;
    ASSERT_EQ(ws_providers_new(&cfg, &ps), 0);
    for (const char *user : {"700000:1000", "1000:700000", "524288:1000"}) {
        SCOPED_TRACE(user);
        Requests r;
        r.docker.image = const_cast<char *>("busybox");
        r.docker.user = const_cast<char *>(user);
        Workspace__V1__OpenRequest req = r.Of(WS_PROVIDER_DOCKER);
        union ws_provider_scratch scratch;
        const Workspace__V1__OpenRequest *checked = nullptr;
        const struct ws_provider *p = nullptr;
        struct ws_diag d = {};
        int err = ws_providers_check(ps, &req, nullptr, 0, &scratch, &d, &checked, &p);
        if (strcmp(user, "524288:1000") == 0) {
            EXPECT_EQ(err, 0) << d.message;
            continue;
        }
        EXPECT_EQ(err, -WS_EMALFORMED);
        EXPECT_EQ(Meta(d, "field"), "user");
        EXPECT_STREQ(d.message,
                     "docker.user must not have the uid or gid 700000: the server's own helper "
                     "has it");
    }
    ws_providers_free(ps);
}

TEST(Check, DockerRuntimeIsRuncOrRunsc)
{
    for (const char *ok : {"", "runc", "runsc"}) {
        Requests r;
        r.docker.image = const_cast<char *>("busybox");
        r.docker.runtime = const_cast<char *>(ok);
        Workspace__V1__OpenRequest req = r.Of(WS_PROVIDER_DOCKER);
        ExpectCheck({ok, 0, "", ""}, &req);
    }
    for (const char *bad : {"kata", "RUNC", "runc ", "io.containerd.runc.v2"}) {
        Requests r;
        r.docker.image = const_cast<char *>("busybox");
        r.docker.runtime = const_cast<char *>(bad);
        Workspace__V1__OpenRequest req = r.Of(WS_PROVIDER_DOCKER);
        ExpectCheck(
            {bad, -WS_EMALFORMED, "runtime", "docker.runtime must be \"runc\" or \"runsc\""}, &req);
    }
}

// A runtime or a cap the server cannot give refuses the Open, naming it:
// never a workspace with less isolation than was asked for.
TEST(OpenCheck, UnenforceableAsksRefuseTheOpen)
{
    const struct ws_provider_ops *bash = Ops(WS_PROVIDER_LOCAL_BASH);
    ASSERT_NE(bash->open_check, nullptr);

    struct {
        uint32_t pids, memory;
        double cpus;
        const char *cap;
    } caps[] = {{0, 0, 0, ""}, {64, 0, 0, "pids"}, {0, 128, 0, "memory"}, {0, 0, 0.5, "cpu"}};
    for (auto &c : caps) {
        SCOPED_TRACE(c.cap);
        Requests r;
        r.bash.pids_limit = c.pids;
        r.bash.memory_mb = c.memory;
        r.bash.cpus = c.cpus;
        Workspace__V1__OpenRequest req = r.Of(WS_PROVIDER_LOCAL_BASH);
        struct ws_provider_open open = {};
        open.req = &req;
        struct ws_diag d = {};
        if (!*c.cap) {
            EXPECT_EQ(bash->open_check(nullptr, &open, &d), 0);
            continue;
        }
        EXPECT_EQ(bash->open_check(nullptr, &open, &d), -WS_EFAILED);
        EXPECT_EQ(Meta(d, "cap"), c.cap);
        EXPECT_EQ(Meta(d, "transient"), "false");
        EXPECT_EQ(std::string(d.message), std::string("local-bash cannot enforce the ") + c.cap +
                                              " cap on this host (no writable cgroup "
                                              "controller for it)");
        // With a uid of its own, RLIMIT_NPROC caps the workspace's
        // processes: pids holds; memory and cpu still need a cgroup (none
        // without a runtime: sandbox_limits_test checks them with one).
        open.own_uid = true;
        struct ws_diag d2 = {};
        EXPECT_EQ(bash->open_check(nullptr, &open, &d2),
                  std::string(c.cap) == "pids" ? 0 : -WS_EFAILED);
    }

    // Docker's runtime is asked of the daemon itself, at every attach
    // (Open and Resolve alike): docker_test's runtime tests.
    EXPECT_EQ(Ops(WS_PROVIDER_DOCKER)->open_check, nullptr);
}

TEST(Docker, DefaultImageFillsAnOpenThatNamesNone)
{
    struct ws_provider_config cfg = {};
    cfg.docker_default_image = "busybox:1.36";
    struct ws_providers *ps = nullptr;
    ASSERT_EQ(ws_providers_new(&cfg, &ps), 0);

    Requests r;
    Workspace__V1__OpenRequest req = r.Of(WS_PROVIDER_DOCKER);
    union ws_provider_scratch scratch;
    const Workspace__V1__OpenRequest *checked = nullptr;
    const struct ws_provider *p = nullptr;
    struct ws_diag d = {};
    ASSERT_EQ(ws_providers_check(ps, &req, nullptr, 0, &scratch, &d, &checked, &p), 0) << d.message;
    EXPECT_EQ(p, ws_providers_get(ps, WS_PROVIDER_DOCKER));
    ASSERT_NE(checked, &req);
    EXPECT_STREQ(checked->docker->image, "busybox:1.36");
    EXPECT_EQ(checked->provider_case, WORKSPACE__V1__OPEN_REQUEST__PROVIDER_DOCKER);
    // The client's request is left as it came.
    EXPECT_STREQ(req.docker->image, "");
    EXPECT_STREQ(p->ops->policy_image(checked), "busybox:1.36");

    // An image the client names is kept.
    r.docker.image = const_cast<char *>("alpine:3");
    ASSERT_EQ(ws_providers_check(ps, &req, nullptr, 0, &scratch, &d, &checked, &p), 0);
    EXPECT_EQ(checked, &req);
    EXPECT_STREQ(checked->docker->image, "alpine:3");
    ws_providers_free(ps);

    // A default that is not an image reference makes no set.
    cfg.docker_default_image = "Busy Box";
    ps = nullptr;
    EXPECT_EQ(ws_providers_new(&cfg, &ps), -EINVAL);
    EXPECT_EQ(ps, nullptr);
}

TEST(Record, DockerFillsDefaultsAndNeverPullsWithoutPulls)
{
    Requests r;
    r.docker.image = const_cast<char *>("busybox:1.36");
    r.docker.pull_policy = WORKSPACE__V1__PULL_POLICY__PULL_IF_NOT_PRESENT;
    r.docker.network = WORKSPACE__V1__NETWORK__NETWORK_ALLOW;
    Workspace__V1__OpenRequest req = r.Of(WS_PROVIDER_DOCKER);
    const struct ws_provider_ops *o = Ops(WS_PROVIDER_DOCKER);
    union ws_provider_scratch scratch;

    struct ws_provider_open off = {};
    off.req = &req;
    off.pulls_allowed = false;
    ws_record rec = WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__INIT;
    ASSERT_EQ(o->record(&off, &rec, &scratch), 0);
    EXPECT_EQ(rec.config_case, o->record_case);
    ASSERT_NE(rec.docker, nullptr);
    EXPECT_NE(rec.docker, req.docker);
    EXPECT_EQ(rec.docker->pull_policy, WORKSPACE__V1__PULL_POLICY__PULL_NEVER);
    EXPECT_EQ(rec.docker->pids_limit, 512u);
    EXPECT_STREQ(rec.docker->image, "busybox:1.36");
    EXPECT_EQ(o->network(&rec), WORKSPACE__V1__NETWORK__NETWORK_ALLOW);
    // The request is not touched.
    EXPECT_EQ(r.docker.pull_policy, WORKSPACE__V1__PULL_POLICY__PULL_IF_NOT_PRESENT);
    EXPECT_EQ(r.docker.pids_limit, 0u);

    struct ws_provider_open on = off;
    on.pulls_allowed = true;
    r.docker.pids_limit = 64;
    rec = WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__INIT;
    ASSERT_EQ(o->record(&on, &rec, &scratch), 0);
    EXPECT_EQ(rec.docker->pull_policy, WORKSPACE__V1__PULL_POLICY__PULL_IF_NOT_PRESENT);
    EXPECT_EQ(rec.docker->pids_limit, 64u);
}

TEST(Record, EachProviderRecordsItsOwnCase)
{
    Requests r;
    r.sandbox.network = WORKSPACE__V1__NETWORK__NETWORK_ALLOW;
    r.docker.image = const_cast<char *>("busybox");
    r.docker.network = WORKSPACE__V1__NETWORK__NETWORK_ALLOW;
    for (int k = 0; k < WS_PROVIDER_COUNT; k++) {
        const struct ws_provider_ops *o = Ops((enum ws_provider_kind)k);
        SCOPED_TRACE(o->name);
        Workspace__V1__OpenRequest req = r.Of((enum ws_provider_kind)k);
        struct ws_provider_open open = {};
        open.req = &req;
        open.pulls_allowed = true;
        union ws_provider_scratch scratch;
        ws_record rec = WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__INIT;
        ASSERT_EQ(o->record(&open, &rec, &scratch), 0);
        EXPECT_EQ(rec.config_case, o->record_case);
        Workspace__V1__Network net =
            o->network ? o->network(&rec) : WORKSPACE__V1__NETWORK__NETWORK_OFF;
        EXPECT_EQ(net, k >= WS_PROVIDER_LOCAL_SANDBOX ? WORKSPACE__V1__NETWORK__NETWORK_ALLOW
                                                      : WORKSPACE__V1__NETWORK__NETWORK_OFF);
    }
    EXPECT_EQ(Ops(WS_PROVIDER_MEMORY)->network, nullptr);
    EXPECT_EQ(Ops(WS_PROVIDER_LOCAL_BASH)->network, nullptr);
    EXPECT_EQ(Ops(WS_PROVIDER_MEMORY)->policy_image, nullptr);
}

TEST(Set, HalfBuiltSetIsFreed)
{
    const std::string dir = TempDir();
    const std::string sandbox_dir = dir + "/sandbox";

    // The sandbox (kind 2) is made, then docker's runtime refuses its
    // server id: the sandbox's /etc snapshot must be gone again.
    struct ws_provider_config cfg = {};
    cfg.sandbox_dir = sandbox_dir.c_str();
    cfg.server_id = ""; // refused by the docker runtime
    struct ws_providers *ps = nullptr;
    EXPECT_EQ(ws_providers_new(&cfg, &ps), -EINVAL);
    EXPECT_EQ(ps, nullptr);
    struct stat st;
    ASSERT_EQ(stat(sandbox_dir.c_str(), &st), 0);
    EXPECT_TRUE(Entries(sandbox_dir).empty());

    // The sandbox (kind 2) cannot be made: nothing after it is tried.
    const std::string file = dir + "/file";
    int fd = open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    close(fd);
    const std::string under_file = file + "/sandbox";
    cfg.sandbox_dir = under_file.c_str();
    cfg.server_id = "abc";
    EXPECT_EQ(ws_providers_new(&cfg, &ps), -ENOTDIR);
    EXPECT_EQ(ps, nullptr);

    ws_providers_free(nullptr);
}

TEST(Set, RuntimesAreMadeAndFreed)
{
    const std::string dir = TempDir();
    const std::string sandbox_dir = dir + "/sandbox";
    struct ws_provider_config cfg = {};
    cfg.sandbox_dir = sandbox_dir.c_str();
    struct ws_providers *ps = nullptr;
    ASSERT_EQ(ws_providers_new(&cfg, &ps), 0);
    for (int k = 0; k < WS_PROVIDER_COUNT; k++) {
        const struct ws_provider *p = ws_providers_get(ps, (enum ws_provider_kind)k);
        const struct ws_provider *b = ws_provider_get((enum ws_provider_kind)k);
        EXPECT_NE(p, b);
        EXPECT_EQ(p->ops, b->ops);
        EXPECT_EQ(p->rt != nullptr, p->ops->rt_new != nullptr) << p->ops->name;
        EXPECT_EQ(ws_providers_by_name(ps, p->ops->name), p);
    }
    // The sandbox's /etc snapshot lives as long as the set.
    EXPECT_FALSE(Entries(sandbox_dir).empty());
    // Without a server id docker has no containers: reconcile finds none.
    const struct ws_provider *dk = ws_providers_get(ps, WS_PROVIDER_DOCKER);
    struct ws_diag d = {};
    EXPECT_EQ(dk->ops->reconcile(dk->rt, &d), 0);
    ws_providers_free(ps);
    EXPECT_TRUE(Entries(sandbox_dir).empty());
}

TEST(Storage, EachProviderOpensItsFileSystem)
{
    struct ws_storage_limits limits = {1 << 20};
    struct ws_vfs *fs = nullptr;
    ASSERT_EQ(ws_provider_attach_storage(ws_provider_get(WS_PROVIDER_MEMORY), -1, &limits, &fs), 0);
    ASSERT_NE(fs, nullptr);
    fs->ops->destroy(fs);

    const std::string dir = TempDir();
    int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(dfd, 0);
    for (enum ws_provider_kind k :
         {WS_PROVIDER_LOCAL_BASH, WS_PROVIDER_LOCAL_SANDBOX, WS_PROVIDER_DOCKER}) {
        const struct ws_provider *p = ws_provider_get(k);
        EXPECT_EQ(ws_provider_attach_storage(p, -1, &limits, &fs), -EBADF) << p->ops->name;
        fs = nullptr;
        ASSERT_EQ(ws_provider_attach_storage(p, dfd, &limits, &fs), 0) << p->ops->name;
        ASSERT_NE(fs, nullptr);
        fs->ops->destroy(fs);
    }
    close(dfd);
}

TEST(Probe, ProvidersWithoutABackendAreAlwaysAvailable)
{
    for (enum ws_provider_kind k : {WS_PROVIDER_MEMORY, WS_PROVIDER_LOCAL_BASH}) {
        struct ws_probe pr;
        memset(&pr, 0xff, sizeof(pr));
        ws_provider_probe(ws_provider_get(k), &pr);
        EXPECT_TRUE(pr.available);
        EXPECT_STREQ(pr.reason, "");
        EXPECT_EQ(Ops(k)->probe, nullptr);
    }
    ScopedEnv bwrap(WS_BWRAP_ENV, "/nonexistent/bwrap");
    struct ws_probe pr;
    ws_provider_probe(ws_provider_get(WS_PROVIDER_LOCAL_SANDBOX), &pr);
    EXPECT_FALSE(pr.available);
    EXPECT_STREQ(pr.reason, "bubblewrap (bwrap) is not installed");
}

// The workspace a per-workspace entry sees.
struct Workspace {
    Requests r;
    ws_record rec = WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__INIT;
    struct ws_provider_ws w = {};

    explicit Workspace(enum ws_provider_kind k, const char *dir = "/nonexistent")
    {
        Workspace__V1__OpenRequest req = r.Of(k);
        struct ws_provider_open open = {};
        open.req = &req;
        open.pulls_allowed = true;
        union ws_provider_scratch scratch;
        EXPECT_EQ(ws_provider_get(k)->ops->record(&open, &rec, &scratch), 0);
        // The record must not point into the scratch, which ends here.
        if (k == WS_PROVIDER_DOCKER)
            rec.docker = &r.docker;
        w.id = "ws_0123456789abcdef0123456789abcdef";
        w.dir = dir;
        w.rec = &rec;
    }
};

TEST(Exec, SandboxWithoutItsBackendFailsClosed)
{
    ScopedEnv bwrap(WS_BWRAP_ENV, "/nonexistent/bwrap");
    const std::string dir = TempDir();
    struct ws_provider_config cfg = {};
    struct ws_providers *ps = nullptr;
    ASSERT_EQ(ws_providers_new(&cfg, &ps), 0);
    const struct ws_provider *p = ws_providers_get(ps, WS_PROVIDER_LOCAL_SANDBOX);
    Workspace ws(WS_PROVIDER_LOCAL_SANDBOX, dir.c_str());
    const char *argv[] = {"/bin/true", nullptr};
    const char *envp[] = {nullptr};
    struct ws_provider_cmd cmd = {};
    cmd.argv = argv;
    cmd.envp = envp;
    cmd.cwd = ".";
    struct ws_proc_wrapper wrap = {};
    struct ws_diag d = {};
    EXPECT_EQ(p->ops->exec_wrap(p->rt, &ws.w, &cmd, &wrap, &d), -WS_EFAILED);
    EXPECT_STREQ(d.message, "the sandbox cannot be created: bubblewrap (bwrap) is not installed");
    EXPECT_EQ(wrap.arg, nullptr);
    ws_providers_free(ps);
}

TEST(Exec, SandboxWithNetworkNeedsItsUserModeNetwork)
{
    ScopedEnv usernet(WS_USERNET_ENV, "/nonexistent/slirp4netns");
    const struct ws_provider_ops *o = Ops(WS_PROVIDER_LOCAL_SANDBOX);
    Requests r;
    Workspace__V1__OpenRequest req = r.Of(WS_PROVIDER_LOCAL_SANDBOX);
    struct ws_provider_open open = {};
    open.req = &req;
    struct ws_diag d = {};
    EXPECT_EQ(o->open_check(nullptr, &open, &d), 0);
    r.sandbox.network = WORKSPACE__V1__NETWORK__NETWORK_ALLOW;
    EXPECT_EQ(o->open_check(nullptr, &open, &d), -WS_EFAILED);
    EXPECT_EQ(std::string(d.message).rfind("local-sandbox with network unavailable: ", 0), 0u)
        << d.message;
    EXPECT_EQ(Meta(d, "transient"), "false");
}

TEST(Docker, WithoutARuntimeNothingRuns)
{
    struct ws_provider_config cfg = {};
    struct ws_providers *ps = nullptr;
    ASSERT_EQ(ws_providers_new(&cfg, &ps), 0);
    const struct ws_provider *p = ws_providers_get(ps, WS_PROVIDER_DOCKER);
    ASSERT_NE(p->rt, nullptr);
    Workspace ws(WS_PROVIDER_DOCKER);

    struct ws_diag d = {};
    EXPECT_EQ(p->ops->attach(p->rt, &ws.w, true, &d), -WS_EFAILED);
    EXPECT_STREQ(d.message, "docker backend unavailable: the server runs without a Docker runtime");
    EXPECT_EQ(p->ops->detach(p->rt, &ws.w, nullptr), 0);
    p->ops->forget(p->rt, ws.w.id);

    const char *argv[] = {"true", nullptr};
    const char *envp[] = {nullptr};
    struct ws_provider_cmd cmd = {};
    cmd.argv = argv;
    cmd.envp = envp;
    cmd.cwd = ".";
    struct ws_proc_wrapper wrap = {};
    d = {};
    EXPECT_EQ(p->ops->exec_wrap(p->rt, &ws.w, &cmd, &wrap, &d), -WS_EFAILED);
    EXPECT_STREQ(d.message, "docker backend unavailable: the server's Docker programs are missing");

    // ListProviders turns an answering daemon down: Open could not work.
    struct ws_probe io = {};
    io.available = true;
    char api[16] = "";
    p->ops->list_info(p->rt, &io, api, sizeof(api));
    EXPECT_FALSE(io.available);
    EXPECT_STREQ(io.reason, "the server's Docker programs (workspaced-docker-init, "
                            "workspaced-docker-relay) are missing");

    // Describe has no container to tell of.
    Workspace__V1__DescribeResponse resp = WORKSPACE__V1__DESCRIBE_RESPONSE__INIT;
    void *keep = &resp;
    EXPECT_EQ(p->ops->describe(p->rt, &ws.w, &resp, &keep), 0);
    EXPECT_EQ(keep, nullptr);
    EXPECT_EQ(resp.container, nullptr);
    p->ops->describe_free(keep);
    ws_providers_free(ps);
}

TEST(Describe, SandboxReportsBindsAndCaps)
{
    struct ws_provider_config cfg = {};
    struct ws_providers *ps = nullptr;
    ASSERT_EQ(ws_providers_new(&cfg, &ps), 0);
    const struct ws_provider *p = ws_providers_get(ps, WS_PROVIDER_LOCAL_SANDBOX);
    Workspace ws(WS_PROVIDER_LOCAL_SANDBOX);
    char *rw[] = {const_cast<char *>("/srv/data")};
    char *ro[] = {const_cast<char *>("/opt/tools"), const_cast<char *>("/usr/share")};
    ws.r.sandbox.read_write_paths = rw;
    ws.r.sandbox.n_read_write_paths = 1;
    ws.r.sandbox.read_only_paths = ro;
    ws.r.sandbox.n_read_only_paths = 2;
    ws.r.sandbox.cpus = 1.5;

    Workspace__V1__DescribeResponse resp = WORKSPACE__V1__DESCRIBE_RESPONSE__INIT;
    void *keep = nullptr;
    ASSERT_EQ(p->ops->describe(p->rt, &ws.w, &resp, &keep), 0);
    ASSERT_NE(keep, nullptr);
    const Workspace__V1__SandboxInfo *sbi = resp.sandbox;
    ASSERT_NE(sbi, nullptr);
    EXPECT_STREQ(sbi->backend, "bubblewrap");
    EXPECT_TRUE(sbi->seccomp);
    EXPECT_GT(strlen(sbi->seccomp_policy), 0u);
    EXPECT_EQ(sbi->n_namespaces, 7u);
    ASSERT_EQ(sbi->n_binds, 4u);
    EXPECT_STREQ(sbi->binds[0]->source, "");
    EXPECT_STREQ(sbi->binds[0]->target, "/workspace");
    EXPECT_STREQ(sbi->binds[1]->source, "/srv/data");
    EXPECT_STREQ(sbi->binds[1]->target, "/mnt/srv/data");
    EXPECT_FALSE(sbi->binds[1]->read_only);
    EXPECT_STREQ(sbi->binds[3]->target, "/mnt/usr/share");
    EXPECT_TRUE(sbi->binds[3]->read_only);
    ASSERT_NE(sbi->limits, nullptr);
    EXPECT_EQ(sbi->limits->pids_max, (uint32_t)WS_SANDBOX_DEFAULT_PIDS);
    EXPECT_EQ(sbi->limits->memory_bytes, (uint64_t)WS_SANDBOX_DEFAULT_MEMORY_MB << 20);
    EXPECT_DOUBLE_EQ(sbi->limits->cpus, 1.5);
    p->ops->describe_free(keep);

    // A workspace of another provider has no sandbox section.
    Workspace other(WS_PROVIDER_LOCAL_BASH);
    resp = WORKSPACE__V1__DESCRIBE_RESPONSE__INIT;
    ASSERT_EQ(p->ops->describe(p->rt, &other.w, &resp, &keep), 0);
    EXPECT_EQ(keep, nullptr);
    EXPECT_EQ(resp.sandbox, nullptr);
    ws_providers_free(ps);
}

TEST(Limits, SandboxDefaults)
{
    struct ws_limits l;
    ws_local_sandbox_limits(nullptr, &l);
    EXPECT_EQ(l.pids_max, 512u);
    EXPECT_EQ(l.memory_bytes, 2048ull << 20);
    EXPECT_EQ(l.cpu_millis, 0u);
    Workspace__V1__LocalSandboxConfig c = WORKSPACE__V1__LOCAL_SANDBOX_CONFIG__INIT;
    c.pids_limit = 64;
    c.memory_mb = 100;
    c.cpus = 0.25;
    ws_local_sandbox_limits(&c, &l);
    EXPECT_EQ(l.pids_max, 64u);
    EXPECT_EQ(l.memory_bytes, 100ull << 20);
    EXPECT_EQ(l.cpu_millis, 250u);
}

} // namespace

namespace
{

// The tun device slirp4netns opens: missing, not a device, or not open to
// the uid slirp4netns runs as is a clear reason; 0666 (udev's mode) is fine.
TEST(ProbeTun, NamesTheDeviceAndItsMode)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "making a character device takes root (CAP_MKNOD); uid " << geteuid();
    std::string dir = TempDir();
    std::string dev = dir + "/tun", file = dir + "/file";
    ws_probe p;

    ws_probe_tun((dir + "/missing").c_str(), true, &p);
    EXPECT_FALSE(p.available);
    EXPECT_EQ(std::string(p.reason),
              "sandboxes with network need " + dir + "/missing (the tun driver), which is missing");
    int fd = open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
    ASSERT_GE(fd, 0);
    close(fd);
    ws_probe_tun(file.c_str(), true, &p);
    EXPECT_FALSE(p.available);

    ASSERT_EQ(mknod(dev.c_str(), S_IFCHR | 0600, makedev(10, 200)), 0) << strerror(errno);
    ASSERT_EQ(chmod(dev.c_str(), 0600), 0);
    ws_probe_tun(dev.c_str(), true, &p);
    EXPECT_FALSE(p.available);
    EXPECT_EQ(std::string(p.reason), "sandboxes with network need " + dev +
                                         " readable and writable by every workspace's uid, which "
                                         "runs their user-mode network; it is mode 0600 (udev "
                                         "makes it 0666)");
    // The server itself (root here) may open it.
    ws_probe_tun(dev.c_str(), false, &p);
    EXPECT_TRUE(p.available) << p.reason;
    ASSERT_EQ(chmod(dev.c_str(), 0666), 0);
    ws_probe_tun(dev.c_str(), true, &p);
    EXPECT_TRUE(p.available) << p.reason;
    EXPECT_STREQ(p.reason, "");
    unlink(dev.c_str());
    unlink(file.c_str());
    rmdir(dir.c_str());
}

} // namespace
