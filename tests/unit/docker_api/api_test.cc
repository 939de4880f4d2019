// The Docker Engine API layer without a daemon: every document built here is
// parsed back and compared member by member (hostile values must land in
// exactly the member they were given for and change nothing else), every
// identifier that reaches a URL is checked against traversal and query
// tricks, and every parser is fed both the daemon's real shapes and garbage.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <jansson.h>

extern "C" {
#include "server/docker/api.h"
}

namespace
{

const char kWsId[] = "ws_0123456789abcdef0123456789abcdef";
const char kId[] = "3f4e1c2b5a6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9012345678abcdef";

// Owns a jansson document.
struct Json {
    json_t *j = nullptr;
    explicit Json(json_t *v) : j(v)
    {
    }
    Json(const Json &) = delete;
    Json &operator=(const Json &) = delete;
    ~Json()
    {
        json_decref(j);
    }
};

json_t *Load(const std::string &s)
{
    json_error_t e;
    json_t *j = json_loadb(s.data(), s.size(), JSON_REJECT_DUPLICATES, &e);
    EXPECT_NE(j, nullptr) << e.text << " in " << s;
    return j;
}

std::string Dump(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    std::string out(s);
    free(s);
    return out;
}

std::set<std::string> Keys(json_t *obj)
{
    std::set<std::string> keys;
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        keys.insert(k);
    }
    return keys;
}

std::vector<std::string> Strings(json_t *arr)
{
    std::vector<std::string> out;
    EXPECT_TRUE(json_is_array(arr));
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        EXPECT_TRUE(json_is_string(v));
        out.push_back(json_string_value(v));
    }
    return out;
}

std::string Str(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    EXPECT_TRUE(json_is_string(v)) << key;
    return v ? json_string_value(v) : "";
}

json_int_t Int(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    EXPECT_TRUE(json_is_integer(v)) << key;
    return json_integer_value(v);
}

bool True(json_t *obj, const char *key)
{
    return json_is_true(json_object_get(obj, key));
}

bool False(json_t *obj, const char *key)
{
    return json_is_false(json_object_get(obj, key));
}

ws_docker_container_spec Spec()
{
    ws_docker_container_spec s{};
    s.image = "workspaced-test:busybox";
    s.workspace_dir = "/var/lib/workspaced/workspaces/ws_0123456789abcdef0123456789abcdef";
    s.user = "1000:1000";
    s.server_id = "srv1";
    s.workspace_id = kWsId;
    return s;
}

// Builds the create body and returns it parsed (nullptr on error).
json_t *Create(const ws_docker_container_spec &s)
{
    char *out = nullptr;
    int err = ws_docker_create_body(&s, &out);
    EXPECT_EQ(err, 0);
    if (err)
        return nullptr;
    json_t *j = Load(out);
    free(out);
    return j;
}

int CreateErr(const ws_docker_container_spec &s)
{
    char *sentinel = reinterpret_cast<char *>(0x1);
    char *out = sentinel;
    int err = ws_docker_create_body(&s, &out);
    if (err < 0) {
        EXPECT_EQ(out, sentinel) << "ret_json written on failure";
    } else
        free(out);
    return err;
}

const std::set<std::string> kTopKeys = {"Image",  "User",       "WorkingDir", "Cmd",
                                        "Labels", "HostConfig", "Entrypoint"};
const std::set<std::string> kHostKeys = {
    "Mounts",  "CapDrop",   "SecurityOpt", "ReadonlyRootfs", "Tmpfs",     "NetworkMode",
    "IpcMode", "PidsLimit", "Init",        "RestartPolicy",  "LogConfig",
};

// Every hardening member of a create body, as the default spec asks.
void ExpectHardened(json_t *root, const ws_docker_container_spec &s)
{
    json_t *hc = json_object_get(root, "HostConfig");
    ASSERT_TRUE(json_is_object(hc));
    EXPECT_EQ(Strings(json_object_get(hc, "CapDrop")), std::vector<std::string>{"ALL"});
    std::vector<std::string> cap_add;
    for (size_t i = 0; s.cap_add && s.cap_add[i]; i++)
        cap_add.push_back(s.cap_add[i]);
    if (cap_add.empty())
        EXPECT_EQ(json_object_get(hc, "CapAdd"), nullptr);
    else
        EXPECT_EQ(Strings(json_object_get(hc, "CapAdd")), cap_add);
    if (s.runtime && s.runtime[0])
        EXPECT_EQ(Str(hc, "Runtime"), s.runtime);
    else
        EXPECT_EQ(json_object_get(hc, "Runtime"), nullptr);
    EXPECT_EQ(json_object_get(hc, "Privileged"), nullptr);
    EXPECT_EQ(Strings(json_object_get(hc, "SecurityOpt")),
              std::vector<std::string>{"no-new-privileges"});
    EXPECT_TRUE(True(hc, "ReadonlyRootfs"));
    EXPECT_EQ(json_is_true(json_object_get(hc, "Init")), !s.keepalive_is_pid1);
    EXPECT_EQ(Str(hc, "NetworkMode"), s.network_allow ? "bridge" : "none");
    EXPECT_EQ(Str(hc, "IpcMode"), "private");
    EXPECT_EQ(Int(hc, "PidsLimit"), s.pids_limit ? s.pids_limit : WS_DOCKER_PIDS_DEFAULT);
    json_t *tmpfs = json_object_get(hc, "Tmpfs");
    ASSERT_TRUE(json_is_object(tmpfs));
    EXPECT_EQ(Keys(tmpfs), std::set<std::string>{"/tmp"});
    std::string u = s.tmp_user && s.tmp_user[0] ? s.tmp_user : s.user;
    std::string expect_tmp =
        "rw,exec,nosuid,nodev,size=" +
        std::to_string(s.tmp_bytes ? s.tmp_bytes : WS_DOCKER_TMP_BYTES_DEFAULT) +
        ",mode=1777,uid=" + u.substr(0, u.find(':')) + ",gid=" + u.substr(u.find(':') + 1);
    EXPECT_EQ(Str(tmpfs, "/tmp"), expect_tmp);
    json_t *mounts = json_object_get(hc, "Mounts");
    ASSERT_EQ(json_array_size(mounts), 1u);
    json_t *m = json_array_get(mounts, 0);
    EXPECT_EQ(Keys(m), (std::set<std::string>{"Type", "Source", "Target", "ReadOnly"}));
    EXPECT_EQ(Str(m, "Type"), "bind");
    EXPECT_EQ(Str(m, "Source"), s.workspace_dir);
    EXPECT_EQ(Str(m, "Target"), "/workspace");
    EXPECT_TRUE(False(m, "ReadOnly"));
    json_t *rp = json_object_get(hc, "RestartPolicy");
    EXPECT_EQ(Keys(rp), std::set<std::string>{"Name"});
    EXPECT_EQ(Str(rp, "Name"), "no");
    json_t *log = json_object_get(hc, "LogConfig");
    EXPECT_EQ(Str(log, "Type"), "local");
    json_t *lc = json_object_get(log, "Config");
    EXPECT_EQ(Keys(lc), (std::set<std::string>{"max-size", "max-file", "compress"}));
    EXPECT_EQ(Str(lc, "max-size"), "1m");
    EXPECT_EQ(Str(lc, "max-file"), "1");
    EXPECT_EQ(Str(lc, "compress"), "false");
    if (s.memory_bytes) {
        EXPECT_EQ(Int(hc, "Memory"), s.memory_bytes);
        EXPECT_EQ(Int(hc, "MemorySwap"), s.memory_bytes);
    } else {
        EXPECT_EQ(json_object_get(hc, "Memory"), nullptr);
        EXPECT_EQ(json_object_get(hc, "MemorySwap"), nullptr);
    }
    if (s.nano_cpus) {
        EXPECT_EQ(Int(hc, "NanoCpus"), s.nano_cpus);
    } else {
        EXPECT_EQ(json_object_get(hc, "NanoCpus"), nullptr);
    }
    std::set<std::string> host_keys = kHostKeys;
    if (s.memory_bytes) {
        host_keys.insert("Memory");
        host_keys.insert("MemorySwap");
    }
    if (s.nano_cpus)
        host_keys.insert("NanoCpus");
    if (!cap_add.empty())
        host_keys.insert("CapAdd");
    if (s.runtime && s.runtime[0])
        host_keys.insert("Runtime");
    EXPECT_EQ(Keys(hc), host_keys);

    EXPECT_EQ(Keys(root), kTopKeys);
    EXPECT_EQ(Str(root, "Image"), s.image);
    EXPECT_EQ(Str(root, "User"), s.user);
    EXPECT_EQ(Str(root, "WorkingDir"), "/workspace");
    EXPECT_EQ(Strings(json_object_get(root, "Cmd")), std::vector<std::string>{});
    json_t *labels = json_object_get(root, "Labels");
    EXPECT_EQ(Keys(labels),
              (std::set<std::string>{"dev.workspaced.server", "dev.workspaced.workspace"}));
    EXPECT_EQ(Str(labels, "dev.workspaced.server"), s.server_id);
    EXPECT_EQ(Str(labels, "dev.workspaced.workspace"), s.workspace_id);
}

TEST(DockerCreate, DefaultSpecIsFullyHardened)
{
    auto s = Spec();
    Json j(Create(s));
    ASSERT_NE(j.j, nullptr);
    ExpectHardened(j.j, s);
    EXPECT_EQ(Strings(json_object_get(j.j, "Entrypoint")),
              (std::vector<std::string>{"sleep", "infinity"}));
}

TEST(DockerCreate, LimitsAndNetwork)
{
    auto s = Spec();
    s.memory_bytes = 512LL << 20;
    s.nano_cpus = 1500000000;
    s.pids_limit = 64;
    s.tmp_bytes = 8LL << 20;
    s.network_allow = true;
    s.user = "0:0";
    const char *keepalive[] = {"/.workspaced/keepalive", nullptr};
    s.keepalive = keepalive;
    Json j(Create(s));
    ASSERT_NE(j.j, nullptr);
    ExpectHardened(j.j, s);
    EXPECT_EQ(Strings(json_object_get(j.j, "Entrypoint")),
              std::vector<std::string>{"/.workspaced/keepalive"});
}

TEST(DockerCreate, InvalidSpecFieldsAreRefused)
{
    std::vector<std::function<void(ws_docker_container_spec &)>> bad = {
        [](auto &s) { s.image = nullptr; },
        [](auto &s) { s.image = ""; },
        [](auto &s) { s.image = "Busybox"; },
        [](auto &s) { s.image = "busybox\",\"Privileged\":true,\"x\":\""; },
        [](auto &s) { s.user = nullptr; },
        [](auto &s) { s.user = ""; },
        [](auto &s) { s.user = "root"; },
        [](auto &s) { s.user = "1000"; },
        [](auto &s) { s.user = "1000:1000:1000"; },
        [](auto &s) { s.user = "-1:0"; },
        [](auto &s) { s.user = "4294967295:0"; },
        [](auto &s) { s.user = "0:4294967295"; },
        [](auto &s) { s.user = "12345678901:0"; },
        [](auto &s) { s.user = " 1:1"; },
        [](auto &s) { s.user = "1:1\n"; },
        [](auto &s) { s.server_id = nullptr; },
        [](auto &s) { s.server_id = ""; },
        [](auto &s) { s.server_id = "a/b"; },
        [](auto &s) { s.server_id = "-x"; },
        [](auto &s) { s.server_id = "x\"y"; },
        [](auto &s) { s.workspace_id = "ws 1"; },
        [](auto &s) {
            static std::string big(WS_DOCKER_LABEL_ID_MAX + 1, 'a');
            s.workspace_id = big.c_str();
        },
        [](auto &s) { s.workspace_dir = nullptr; },
        [](auto &s) { s.workspace_dir = ""; },
        [](auto &s) { s.workspace_dir = "/"; },
        [](auto &s) { s.workspace_dir = "relative/dir"; },
        [](auto &s) { s.workspace_dir = "/a/../b"; },
        [](auto &s) { s.workspace_dir = "/a/./b"; },
        [](auto &s) { s.workspace_dir = "/a//b"; },
        [](auto &s) { s.workspace_dir = "/a/b/"; },
        [](auto &s) { s.workspace_dir = "/a/\xff\xfe"; },
        [](auto &s) {
            static std::string big = "/" + std::string(WS_DOCKER_HOST_PATH_MAX, 'a');
            s.workspace_dir = big.c_str();
        },
        [](auto &s) { s.memory_bytes = -1; },
        [](auto &s) { s.memory_bytes = WS_DOCKER_MEMORY_MIN - 1; },
        [](auto &s) { s.nano_cpus = -1; },
        [](auto &s) { s.nano_cpus = WS_DOCKER_NANO_CPUS_MIN - 1; },
        [](auto &s) { s.pids_limit = -1; },
        [](auto &s) { s.pids_limit = WS_DOCKER_PIDS_MAX + 1; },
        [](auto &s) { s.tmp_bytes = -1; },
        [](auto &s) { s.tmp_bytes = WS_DOCKER_TMP_BYTES_MIN - 1; },
        [](auto &s) { s.tmp_bytes = WS_DOCKER_TMP_BYTES_MAX + 1; },
        [](auto &s) {
            static const char *empty[] = {nullptr};
            s.keepalive = empty;
        },
        [](auto &s) {
            static const char *blank[] = {"", nullptr};
            s.keepalive = blank;
        },
        [](auto &s) {
            static const char *many[WS_DOCKER_KEEPALIVE_ARGS_MAX + 2] = {};
            for (int i = 0; i <= WS_DOCKER_KEEPALIVE_ARGS_MAX; i++)
                many[i] = "x";
            s.keepalive = many;
        },
    };
    for (size_t i = 0; i < bad.size(); i++) {
        auto s = Spec();
        bad[i](s);
        EXPECT_EQ(CreateErr(s), -EINVAL) << "case " << i;
    }
}

TEST(DockerCreate, LimitsAtTheirBoundsAreAccepted)
{
    auto s = Spec();
    s.memory_bytes = WS_DOCKER_MEMORY_MIN;
    s.nano_cpus = WS_DOCKER_NANO_CPUS_MIN;
    s.pids_limit = WS_DOCKER_PIDS_MAX;
    s.tmp_bytes = WS_DOCKER_TMP_BYTES_MAX;
    s.user = "4294967294:4294967294";
    Json j(Create(s));
    ASSERT_NE(j.j, nullptr);
    ExpectHardened(j.j, s);
    s.pids_limit = 1;
    s.tmp_bytes = WS_DOCKER_TMP_BYTES_MIN;
    Json k(Create(s));
    ASSERT_NE(k.j, nullptr);
    ExpectHardened(k.j, s);
}

// The container of a workspace whose commands run as their own uid: root
// in the container only so that the init can split identities, KILL,
// SETGID and SETUID given back for that, /tmp owned by the command's uid,
// and a runtime named.
const char *const kInitCaps[] = {"KILL", "SETGID", "SETUID", nullptr};

ws_docker_container_spec SplitSpec()
{
    auto s = Spec();
    s.user = "0:0";
    s.tmp_user = "524288:524288";
    s.cap_add = kInitCaps;
    s.runtime = "runsc";
    return s;
}

TEST(DockerCreate, CapAddRuntimeAndTmpOwner)
{
    auto s = SplitSpec();
    Json j(Create(s));
    ASSERT_NE(j.j, nullptr);
    ExpectHardened(j.j, s);
    json_t *hc = json_object_get(j.j, "HostConfig");
    EXPECT_EQ(Strings(json_object_get(hc, "CapAdd")),
              (std::vector<std::string>{"KILL", "SETGID", "SETUID"}));
    EXPECT_EQ(Str(hc, "Runtime"), "runsc");
    EXPECT_EQ(Str(j.j, "User"), "0:0");
    EXPECT_EQ(Str(json_object_get(hc, "Tmpfs"), "/tmp"),
              "rw,exec,nosuid,nodev,size=67108864,mode=1777,uid=524288,gid=524288");
    EXPECT_EQ(Strings(json_object_get(hc, "SecurityOpt")),
              std::vector<std::string>{"no-new-privileges"});

    // Empty lists and names are the same as none: no member at all.
    const char *none[] = {nullptr};
    s.cap_add = none;
    s.runtime = "";
    s.tmp_user = "";
    Json k(Create(s));
    ASSERT_NE(k.j, nullptr);
    ExpectHardened(k.j, s);
    hc = json_object_get(k.j, "HostConfig");
    EXPECT_EQ(json_object_get(hc, "CapAdd"), nullptr);
    EXPECT_EQ(json_object_get(hc, "Runtime"), nullptr);
    EXPECT_EQ(Str(json_object_get(hc, "Tmpfs"), "/tmp"),
              "rw,exec,nosuid,nodev,size=67108864,mode=1777,uid=0,gid=0");
}

TEST(DockerCreate, BadCapAddRuntimeAndTmpOwnerAreRefused)
{
    static const char *const all[] = {"ALL", nullptr};
    static const char *const prefixed[] = {"CAP_KILL", nullptr};
    static const char *const lower[] = {"kill", nullptr};
    static const char *const twice[] = {"KILL", "SETUID", "KILL", nullptr};
    static const char *const empty_name[] = {"", nullptr};
    static const char *const digit_first[] = {"1KILL", nullptr};
    static const char *const hostile[] = {"KILL\",\"SYS_ADMIN", nullptr};
    static const char *const spaced[] = {"KILL ", nullptr};
    static const std::string long_name(WS_DOCKER_CAP_NAME_MAX, 'K');
    static const char *const too_long[] = {long_name.c_str(), nullptr};
    static const char *const too_many[] = {"A", "B", "C", "D", "E", "F", "G", "H", "I", nullptr};
    static const std::string long_runtime(WS_DOCKER_RUNTIME_MAX, 'r');
    std::vector<std::function<void(ws_docker_container_spec &)>> bad = {
        [](auto &s) { s.cap_add = all; },
        [](auto &s) { s.cap_add = prefixed; },
        [](auto &s) { s.cap_add = lower; },
        [](auto &s) { s.cap_add = twice; },
        [](auto &s) { s.cap_add = empty_name; },
        [](auto &s) { s.cap_add = digit_first; },
        [](auto &s) { s.cap_add = hostile; },
        [](auto &s) { s.cap_add = spaced; },
        [](auto &s) { s.cap_add = too_long; },
        [](auto &s) { s.cap_add = too_many; },
        [](auto &s) { s.runtime = "run sc"; },
        [](auto &s) { s.runtime = "../runc"; },
        [](auto &s) { s.runtime = "-runc"; },
        [](auto &s) { s.runtime = "runc\""; },
        [](auto &s) { s.runtime = long_runtime.c_str(); },
        [](auto &s) { s.tmp_user = "root"; },
        [](auto &s) { s.tmp_user = "1000"; },
        [](auto &s) { s.tmp_user = "4294967295:0"; },
    };
    for (size_t i = 0; i < bad.size(); i++) {
        auto s = SplitSpec();
        bad[i](s);
        EXPECT_EQ(CreateErr(s), -EINVAL) << "case " << i;
    }
    // At the bounds: eight names, the longest name and runtime, dots and
    // dashes in a runtime.
    static const char *const eight[] = {"A", "B", "C", "D", "E", "F", "G", "H", nullptr};
    static const std::string longest_name(WS_DOCKER_CAP_NAME_MAX - 1, 'K');
    static const char *const longest[] = {longest_name.c_str(), nullptr};
    static const std::string longest_runtime(WS_DOCKER_RUNTIME_MAX - 1, 'r');
    for (auto f : std::vector<std::function<void(ws_docker_container_spec &)>>{
             [](auto &s) { s.cap_add = eight; },
             [](auto &s) { s.cap_add = longest; },
             [](auto &s) { s.runtime = longest_runtime.c_str(); },
             [](auto &s) { s.runtime = "io.containerd.runc.v2"; },
             [](auto &s) { s.runtime = "my_runtime-2"; },
         }) {
        auto s = SplitSpec();
        f(s);
        Json j(Create(s));
        ASSERT_NE(j.j, nullptr);
        ExpectHardened(j.j, s);
    }
}

// Values that try to end their string and open members of their own.
const char *const kHostile[] = {
    "\",\"HostConfig\":{\"Privileged\":true},\"x\":\"",
    "\"}],\"Privileged\":true,\"CapAdd\":[\"ALL\"],\"Mounts\":[{\"Source\":\"/",
    "back\\slash\\\"",
    "line\r\nPrivileged: true\r\n",
    "tab\tbell\a\x1b[31mescape\x7f",
    "unicode \xc3\xa9\xe2\x80\xae\xf0\x9f\x90\xb3 \xe2\x80\xa8",
    "\\u0022,\\\"Privileged\\\":true",
    "{\"Privileged\":true}",
    "$(reboot) `id` ; rm -rf / && echo",
};

TEST(DockerCreate, HostileWorkspacePathStaysOneString)
{
    for (const char *h : kHostile) {
        std::string dir = std::string("/srv/") + h;
        // A '/' inside the value would make a different (still canonical or
        // not) path; only ask for the cases that stay canonical.
        auto s = Spec();
        s.workspace_dir = dir.c_str();
        char *out = nullptr;
        int err = ws_docker_create_body(&s, &out);
        if (err == -EINVAL) {
            EXPECT_NE(std::string(h).find('/'), std::string::npos) << h;
            continue;
        }
        ASSERT_EQ(err, 0) << h;
        Json j(Load(out));
        free(out);
        ASSERT_NE(j.j, nullptr);
        ExpectHardened(j.j, s);
    }
}

TEST(DockerCreate, HostileUserLabelsAndImageAreRefused)
{
    for (const char *h : kHostile) {
        auto s = Spec();
        s.user = h;
        EXPECT_EQ(CreateErr(s), -EINVAL) << h;
        s = Spec();
        s.server_id = h;
        EXPECT_EQ(CreateErr(s), -EINVAL) << h;
        s = Spec();
        s.workspace_id = h;
        EXPECT_EQ(CreateErr(s), -EINVAL) << h;
        s = Spec();
        std::string img = std::string("busybox:") + h;
        s.image = img.c_str();
        EXPECT_EQ(CreateErr(s), -EINVAL) << h;
    }
}

TEST(DockerCreate, HostileKeepaliveStaysInEntrypoint)
{
    for (const char *h : kHostile) {
        auto s = Spec();
        const char *keepalive[] = {"sleep", h, nullptr};
        s.keepalive = keepalive;
        Json j(Create(s));
        ASSERT_NE(j.j, nullptr);
        ExpectHardened(j.j, s);
        EXPECT_EQ(Strings(json_object_get(j.j, "Entrypoint")),
                  (std::vector<std::string>{"sleep", h}));
    }
}

TEST(DockerCreate, ContainerName)
{
    char buf[WS_DOCKER_NAME_MAX + 1];
    memset(buf, 'Z', sizeof(buf));
    ASSERT_GT(ws_docker_container_name("srv1", kWsId, buf, sizeof(buf)), 0);
    EXPECT_STREQ(buf, "workspaced-srv1-ws_0123456789abcdef0123456789abcdef");
    EXPECT_TRUE(ws_docker_name_valid(buf));

    std::string longest_a(WS_DOCKER_LABEL_ID_MAX, 'a'), longest_b(WS_DOCKER_LABEL_ID_MAX, 'b');
    int n = ws_docker_container_name(longest_a.c_str(), longest_b.c_str(), buf, sizeof(buf));
    ASSERT_GT(n, 0);
    EXPECT_TRUE(ws_docker_name_valid(buf));

    char small[8];
    memset(small, 'Z', sizeof(small));
    EXPECT_EQ(ws_docker_container_name("srv1", kWsId, small, sizeof(small)), -ENOBUFS);
    EXPECT_EQ(small[0], 'Z');
    EXPECT_EQ(ws_docker_container_name("a/b", kWsId, buf, sizeof(buf)), -EINVAL);
    EXPECT_EQ(ws_docker_container_name("srv1", "../x", buf, sizeof(buf)), -EINVAL);
    EXPECT_EQ(ws_docker_container_name("srv1", "", buf, sizeof(buf)), -EINVAL);
}

// --- exec ---------------------------------------------------------------------

json_t *Exec(const ws_docker_exec_spec &s)
{
    char *out = nullptr;
    int err = ws_docker_exec_body(&s, &out);
    EXPECT_EQ(err, 0);
    if (err)
        return nullptr;
    json_t *j = Load(out);
    free(out);
    return j;
}

int ExecErr(const ws_docker_exec_spec &s)
{
    char *sentinel = reinterpret_cast<char *>(0x1);
    char *out = sentinel;
    int err = ws_docker_exec_body(&s, &out);
    if (err < 0) {
        EXPECT_EQ(out, sentinel) << "ret_json written on failure";
    } else
        free(out);
    return err;
}

void ExpectExecShape(json_t *j, bool with_user)
{
    std::set<std::string> keys = {"AttachStdin", "AttachStdout", "AttachStderr", "Tty",
                                  "WorkingDir",  "Cmd",          "Env"};
    if (with_user)
        keys.insert("User");
    EXPECT_EQ(Keys(j), keys);
    EXPECT_EQ(json_object_get(j, "Privileged"), nullptr);
    EXPECT_EQ(json_object_get(j, "DetachKeys"), nullptr);
    EXPECT_TRUE(True(j, "AttachStdout"));
    EXPECT_TRUE(True(j, "AttachStderr"));
}

TEST(DockerExec, Body)
{
    const char *argv[] = {"make", "-C", "sub dir", "test", nullptr};
    const char *envp[] = {"PATH=/usr/bin:/bin", "HOME=/workspace", "EMPTY=", nullptr};
    ws_docker_exec_spec s{};
    s.argv = argv;
    s.envp = envp;
    s.cwd = "/workspace/src/lib";
    s.user = "1000:100";
    s.tty = true;
    s.attach_stdin = true;
    Json j(Exec(s));
    ASSERT_NE(j.j, nullptr);
    ExpectExecShape(j.j, true);
    EXPECT_EQ(Strings(json_object_get(j.j, "Cmd")),
              (std::vector<std::string>{"make", "-C", "sub dir", "test"}));
    EXPECT_EQ(Strings(json_object_get(j.j, "Env")),
              (std::vector<std::string>{"PATH=/usr/bin:/bin", "HOME=/workspace", "EMPTY="}));
    EXPECT_EQ(Str(j.j, "WorkingDir"), "/workspace/src/lib");
    EXPECT_EQ(Str(j.j, "User"), "1000:100");
    EXPECT_TRUE(True(j.j, "Tty"));
    EXPECT_TRUE(True(j.j, "AttachStdin"));
}

// The init is exec'd as root in a container whose commands are not.
TEST(DockerExec, TheInitRunsAsRoot)
{
    const char *argv[] = {
        "/.workspaced-init",  "run", "--uid", "524288", "--gid", "524288", "--helper", "524287",
        "p_0123456789abcdef", "0",   "true",  nullptr};
    const char *envp[] = {"WSINIT_NONCE=0123456789abcdef0123456789abcdef", nullptr};
    ws_docker_exec_spec s{};
    s.argv = argv;
    s.envp = envp;
    s.user = "0:0";
    Json j(Exec(s));
    ASSERT_NE(j.j, nullptr);
    ExpectExecShape(j.j, true);
    EXPECT_EQ(Str(j.j, "User"), "0:0");
    EXPECT_EQ(Strings(json_object_get(j.j, "Env")),
              std::vector<std::string>{"WSINIT_NONCE=0123456789abcdef0123456789abcdef"});
}

TEST(DockerExec, Defaults)
{
    const char *argv[] = {"true", nullptr};
    ws_docker_exec_spec s{};
    s.argv = argv;
    Json j(Exec(s));
    ASSERT_NE(j.j, nullptr);
    ExpectExecShape(j.j, false);
    EXPECT_EQ(Str(j.j, "WorkingDir"), "/workspace");
    EXPECT_EQ(Strings(json_object_get(j.j, "Env")), std::vector<std::string>{});
    EXPECT_TRUE(False(j.j, "Tty"));
    EXPECT_TRUE(False(j.j, "AttachStdin"));
    s.user = "";
    Json k(Exec(s));
    ASSERT_NE(k.j, nullptr);
    ExpectExecShape(k.j, false);
}

TEST(DockerExec, HostileArgvAndEnvStayInTheirStrings)
{
    for (const char *h : kHostile) {
        std::string env = std::string("X=") + h;
        const char *argv[] = {h, "--", h, nullptr};
        const char *envp[] = {env.c_str(), nullptr};
        ws_docker_exec_spec s{};
        s.argv = argv;
        s.envp = envp;
        s.user = "1:2";
        Json j(Exec(s));
        ASSERT_NE(j.j, nullptr) << h;
        ExpectExecShape(j.j, true);
        EXPECT_EQ(Strings(json_object_get(j.j, "Cmd")), (std::vector<std::string>{h, "--", h}));
        EXPECT_EQ(Strings(json_object_get(j.j, "Env")), std::vector<std::string>{env});
        EXPECT_EQ(Str(j.j, "User"), "1:2");
        EXPECT_EQ(Str(j.j, "WorkingDir"), "/workspace");
    }
}

TEST(DockerExec, EmbeddedNulEndsTheCString)
{
    // The API takes C strings: whatever follows a NUL is not part of the
    // value and never reaches the document. (Length-carrying input with a
    // NUL is refused upstream, at the wire.)
    static const char smuggled[] = "a\0\",\"Privileged\":true,\"x\":\"";
    const char *argv[] = {smuggled, nullptr};
    ws_docker_exec_spec s{};
    s.argv = argv;
    char *out = nullptr;
    ASSERT_EQ(ws_docker_exec_body(&s, &out), 0);
    std::string body(out);
    free(out);
    EXPECT_EQ(body.find("Privileged"), std::string::npos);
    Json j(Load(body));
    EXPECT_EQ(Strings(json_object_get(j.j, "Cmd")), std::vector<std::string>{"a"});
}

TEST(DockerExec, InvalidInputIsRefused)
{
    const char *ok_argv[] = {"ls", nullptr};
    std::vector<std::function<void(ws_docker_exec_spec &)>> bad = {
        [](auto &s) { s.argv = nullptr; },
        [](auto &s) {
            static const char *v[] = {nullptr};
            s.argv = v;
        },
        [](auto &s) {
            static const char *v[] = {"", "x", nullptr};
            s.argv = v;
        },
        [](auto &s) {
            static const char *v[] = {"ls", "\xc3\x28", nullptr};
            s.argv = v;
        },
        [](auto &s) {
            static const char *v[] = {"ls", "\xed\xa0\x80", nullptr}; // a surrogate
            s.argv = v;
        },
        [](auto &s) {
            static const char *v[] = {"ls", "\xc0\xaf", nullptr}; // overlong '/'
            s.argv = v;
        },
        [](auto &s) {
            static const char *e[] = {"NOEQUALS", nullptr};
            s.envp = e;
        },
        [](auto &s) {
            static const char *e[] = {"=value", nullptr};
            s.envp = e;
        },
        [](auto &s) {
            static const char *e[] = {"X=\xff", nullptr};
            s.envp = e;
        },
        [](auto &s) { s.cwd = ""; },
        [](auto &s) { s.cwd = "/"; },
        [](auto &s) { s.cwd = "/etc"; },
        [](auto &s) { s.cwd = "/workspacex"; },
        [](auto &s) { s.cwd = "/workspace/"; },
        [](auto &s) { s.cwd = "/workspace/../etc"; },
        [](auto &s) { s.cwd = "/workspace/a/../../etc"; },
        [](auto &s) { s.cwd = "/workspace/./a"; },
        [](auto &s) { s.cwd = "/workspace//a"; },
        [](auto &s) { s.cwd = "workspace"; },
        [](auto &s) { s.cwd = "/workspace/\xff"; },
        [](auto &s) { s.user = "root"; },
        [](auto &s) { s.user = "0"; },
        [](auto &s) { s.user = "1:2\r\n"; },
        [](auto &s) { s.user = "1:2\",\"Privileged\":true,\"x\":\""; },
    };
    for (size_t i = 0; i < bad.size(); i++) {
        ws_docker_exec_spec s{};
        s.argv = ok_argv;
        bad[i](s);
        EXPECT_EQ(ExecErr(s), -EINVAL) << "case " << i;
    }
}

TEST(DockerExec, LimitsAreHit)
{
    // Argument count.
    std::vector<const char *> argv(WS_DOCKER_ARGS_MAX + 1, "a");
    argv.push_back(nullptr);
    ws_docker_exec_spec s{};
    s.argv = argv.data();
    EXPECT_EQ(ExecErr(s), -EINVAL);
    argv.erase(argv.begin()); // exactly WS_DOCKER_ARGS_MAX
    s.argv = argv.data();
    EXPECT_EQ(ExecErr(s), 0);

    // Argument bytes (with their NULs).
    std::string big(WS_DOCKER_ARGV_BYTES_MAX - 3, 'x'); // "ls\0" + big + "\0" = max + 1
    const char *big_argv[] = {"ls", big.c_str(), nullptr};
    s.argv = big_argv;
    EXPECT_EQ(ExecErr(s), -EINVAL);
    big.pop_back();
    big_argv[1] = big.c_str();
    EXPECT_EQ(ExecErr(s), 0);

    // Environment count and bytes.
    const char *ls[] = {"ls", nullptr};
    s.argv = ls;
    std::vector<const char *> envp(WS_DOCKER_ENV_MAX + 1, "A=1");
    envp.push_back(nullptr);
    s.envp = envp.data();
    EXPECT_EQ(ExecErr(s), -EINVAL);
    envp.erase(envp.begin());
    s.envp = envp.data();
    EXPECT_EQ(ExecErr(s), 0);
    std::string env = "A=" + std::string(WS_DOCKER_ENV_BYTES_MAX - 2, 'v'); // +NUL = max + 1
    const char *env1[] = {env.c_str(), nullptr};
    s.envp = env1;
    EXPECT_EQ(ExecErr(s), -EINVAL);
    env.pop_back();
    env1[0] = env.c_str();
    EXPECT_EQ(ExecErr(s), 0);

    // Working directory length.
    std::string cwd = "/workspace/" + std::string(WS_DOCKER_CWD_MAX, 'd');
    s.envp = nullptr;
    s.cwd = cwd.c_str();
    EXPECT_EQ(ExecErr(s), -EINVAL);
}

TEST(DockerExec, StartBody)
{
    char *out = nullptr;
    ASSERT_EQ(ws_docker_exec_start_body(true, &out), 0);
    EXPECT_STREQ(out, "{\"Detach\":false,\"Tty\":true}");
    free(out);
    ASSERT_EQ(ws_docker_exec_start_body(false, &out), 0);
    EXPECT_STREQ(out, "{\"Detach\":false,\"Tty\":false}");
    free(out);
}

// --- identifiers and paths ----------------------------------------------------

const char *const kBadRefs[] = {
    "",
    "a", // too short for a name
    "../etc",
    "..",
    ".hidden",
    "a/../../b",
    "a/b",
    "/abs",
    "%2e%2e",
    "a%2fb",
    "a?x=1",
    "a#frag",
    "a b",
    "a\tb",
    "a\r\nHost: evil",
    "a\\b",
    "a;b",
    "a&b",
    "a=b",
    "a+b",
    "a:b",
    "a@b",
    "-rm",
    "_x",
    "caf\xc3\xa9",
    "abcdef",     // hex only: an id prefix, not a name
    "0123456789", // hex only
    "3f4e1c2b5a6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9012345678abcde", // 63 hex
};

TEST(DockerIds, FullIds)
{
    EXPECT_TRUE(ws_docker_id_valid(kId));
    EXPECT_FALSE(ws_docker_id_valid(nullptr));
    EXPECT_FALSE(ws_docker_id_valid(""));
    std::string s(kId);
    EXPECT_FALSE(ws_docker_id_valid((s + "0").c_str()));
    EXPECT_FALSE(ws_docker_id_valid(s.substr(0, 63).c_str()));
    for (size_t i = 0; i < s.size(); i++) {
        for (char c : {'A', 'g', '/', '.', '%', '?', '#', ' ', '\n'}) {
            std::string t = s;
            t[i] = c;
            ASSERT_FALSE(ws_docker_id_valid(t.c_str())) << t;
        }
    }
}

TEST(DockerIds, Names)
{
    for (const char *ok :
         {"workspaced-srv1-ws_0123", "my.container", "a_b-c.d", "xy", "Zx", "x0123456789abcdef"})
        EXPECT_TRUE(ws_docker_name_valid(ok)) << ok;
    for (const char *bad : kBadRefs)
        EXPECT_FALSE(ws_docker_name_valid(bad)) << bad;
    EXPECT_FALSE(ws_docker_name_valid(nullptr));
    std::string longest = "w" + std::string(WS_DOCKER_NAME_MAX - 1, 'x');
    EXPECT_TRUE(ws_docker_name_valid(longest.c_str()));
    EXPECT_FALSE(ws_docker_name_valid((longest + "x").c_str()));
    // Ids are lowercase; the same digits in uppercase are only a name (the
    // daemon's id prefix lookup is case-sensitive, so it cannot be misread).
    std::string upper(kId);
    for (char &c : upper)
        c = (char)toupper((unsigned char)c);
    EXPECT_FALSE(ws_docker_id_valid(upper.c_str()));
    EXPECT_TRUE(ws_docker_name_valid(upper.c_str()));
    EXPECT_TRUE(ws_docker_container_ref_valid(kId));
    EXPECT_TRUE(ws_docker_container_ref_valid("workspaced-a-b"));
    for (const char *bad : kBadRefs)
        EXPECT_FALSE(ws_docker_container_ref_valid(bad)) << bad;
}

const ws_docker_api_version k152 = {1, 52};

TEST(DockerPaths, Container)
{
    char buf[WS_DOCKER_PATH_MAX];
    struct {
        ws_docker_container_op op;
        const char *path, *method;
    } cases[] = {
        {WS_DOCKER_CONTAINER_INSPECT, "/v1.52/containers/workspaced-a-b/json", "GET"},
        {WS_DOCKER_CONTAINER_START, "/v1.52/containers/workspaced-a-b/start", "POST"},
        {WS_DOCKER_CONTAINER_KILL, "/v1.52/containers/workspaced-a-b/kill", "POST"},
        {WS_DOCKER_CONTAINER_EXEC, "/v1.52/containers/workspaced-a-b/exec", "POST"},
        {WS_DOCKER_CONTAINER_REMOVE, "/v1.52/containers/workspaced-a-b?force=true&v=true",
         "DELETE"},
    };
    for (auto &c : cases) {
        int n = ws_docker_path_container(k152, "workspaced-a-b", c.op, buf, sizeof(buf));
        EXPECT_EQ(n, (int)strlen(c.path));
        EXPECT_STREQ(buf, c.path);
        EXPECT_STREQ(ws_docker_container_op_method(c.op), c.method);
    }
    ASSERT_GT(ws_docker_path_container({1, 9}, kId, WS_DOCKER_CONTAINER_INSPECT, buf, sizeof(buf)),
              0);
    EXPECT_EQ(std::string(buf), std::string("/v1.9/containers/") + kId + "/json");
}

TEST(DockerPaths, HostileRefsNeverBecomePaths)
{
    char buf[WS_DOCKER_PATH_MAX];
    for (const char *bad : kBadRefs) {
        memset(buf, 'Z', sizeof(buf));
        EXPECT_EQ(
            ws_docker_path_container(k152, bad, WS_DOCKER_CONTAINER_INSPECT, buf, sizeof(buf)),
            -EINVAL)
            << bad;
        EXPECT_EQ(ws_docker_path_exec(k152, bad, WS_DOCKER_EXEC_START, buf, sizeof(buf)), -EINVAL)
            << bad;
        EXPECT_EQ(ws_docker_path_create(k152, bad, buf, sizeof(buf)), -EINVAL) << bad;
        EXPECT_EQ(buf[0], 'Z');
    }
    EXPECT_EQ(ws_docker_path_container(k152, nullptr, WS_DOCKER_CONTAINER_START, buf, sizeof(buf)),
              -EINVAL);
    // Exec ids are full ids only, never names.
    EXPECT_EQ(ws_docker_path_exec(k152, "workspaced-a-b", WS_DOCKER_EXEC_START, buf, sizeof(buf)),
              -EINVAL);
    // Unknown operations and versions that do not print.
    EXPECT_EQ(ws_docker_path_container(k152, kId, (ws_docker_container_op)99, buf, sizeof(buf)),
              -EINVAL);
    EXPECT_EQ(ws_docker_path_exec(k152, kId, (ws_docker_exec_op)99, buf, sizeof(buf)), -EINVAL);
    EXPECT_EQ(
        ws_docker_path_container({1, 100000}, kId, WS_DOCKER_CONTAINER_START, buf, sizeof(buf)),
        -EINVAL);
}

TEST(DockerPaths, ExecCreateAndImages)
{
    char buf[WS_DOCKER_PATH_MAX];
    std::string id(kId);

    ASSERT_GT(ws_docker_path_exec(k152, kId, WS_DOCKER_EXEC_START, buf, sizeof(buf)), 0);
    EXPECT_EQ(std::string(buf), "/v1.52/exec/" + id + "/start");
    EXPECT_STREQ(ws_docker_exec_op_method(WS_DOCKER_EXEC_START), "POST");
    ASSERT_GT(ws_docker_path_exec(k152, kId, WS_DOCKER_EXEC_INSPECT, buf, sizeof(buf)), 0);
    EXPECT_EQ(std::string(buf), "/v1.52/exec/" + id + "/json");
    EXPECT_STREQ(ws_docker_exec_op_method(WS_DOCKER_EXEC_INSPECT), "GET");

    ASSERT_GT(ws_docker_path_exec_resize(k152, kId, 24, 80, buf, sizeof(buf)), 0);
    EXPECT_EQ(std::string(buf), "/v1.52/exec/" + id + "/resize?h=24&w=80");
    EXPECT_EQ(ws_docker_path_exec_resize(k152, kId, 0, 80, buf, sizeof(buf)), -EINVAL);
    EXPECT_EQ(ws_docker_path_exec_resize(k152, kId, 24, 65536, buf, sizeof(buf)), -EINVAL);

    ASSERT_GT(ws_docker_path_create(k152, "workspaced-s-w", buf, sizeof(buf)), 0);
    EXPECT_STREQ(buf, "/v1.52/containers/create?name=workspaced-s-w");

    ASSERT_GT(ws_docker_path_image_inspect(k152, "registry.example.com:5000/team/app:1.2", buf,
                                           sizeof(buf)),
              0);
    EXPECT_STREQ(buf, "/v1.52/images/registry.example.com:5000/team/app:1.2/json");

    struct {
        const char *image, *path;
    } pulls[] = {
        {"busybox", "/v1.52/images/create?fromImage=busybox&tag=latest"},
        {"busybox:1.36", "/v1.52/images/create?fromImage=busybox&tag=1.36"},
        {"localhost:5000/app", "/v1.52/images/create?fromImage=localhost:5000/app&tag=latest"},
        {"localhost:5000/app:v2", "/v1.52/images/create?fromImage=localhost:5000/app&tag=v2"},
        {"app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
         "/v1.52/images/create?fromImage=app&tag=sha256:"
         "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
        {"app:v1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
         "/v1.52/images/create?fromImage=app&tag=sha256:"
         "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
    };
    for (auto &p : pulls) {
        ASSERT_GT(ws_docker_path_image_pull(k152, p.image, buf, sizeof(buf)), 0) << p.image;
        EXPECT_STREQ(buf, p.path);
    }
    EXPECT_EQ(ws_docker_path_image_pull(k152, "a?b", buf, sizeof(buf)), -EINVAL);
    EXPECT_EQ(ws_docker_path_image_inspect(k152, "../../containers/x", buf, sizeof(buf)), -EINVAL);
}

TEST(DockerPaths, LongestFitsAndSmallBuffersAreRefused)
{
    char buf[WS_DOCKER_PATH_MAX];
    // The longest image reference the grammar admits.
    std::string name = "r/" + std::string(WS_DOCKER_IMAGE_NAME_MAX - 2, 'a');
    std::string img =
        name + ":" + std::string(WS_DOCKER_TAG_MAX, 't') + "@sha512:" + std::string(128, 'f');
    ASSERT_TRUE(ws_docker_image_valid(img.c_str()));
    struct ws_docker_api_version widest = {WS_DOCKER_VERSION_PART_MAX, WS_DOCKER_VERSION_PART_MAX};
    EXPECT_GT(ws_docker_path_image_pull(widest, img.c_str(), buf, sizeof(buf)), 0);
    EXPECT_GT(ws_docker_path_image_inspect(widest, img.c_str(), buf, sizeof(buf)), 0);

    char small[16];
    memset(small, 'Z', sizeof(small));
    EXPECT_EQ(
        ws_docker_path_container(k152, kId, WS_DOCKER_CONTAINER_INSPECT, small, sizeof(small)),
        -ENOBUFS);
    EXPECT_EQ(small[0], 'Z');
    // Exactly enough: the path and its NUL.
    const char *expect = "/v1.52/containers/xy/json";
    char exact[26];
    ASSERT_EQ(strlen(expect) + 1, sizeof(exact));
    EXPECT_EQ(
        ws_docker_path_container(k152, "xy", WS_DOCKER_CONTAINER_INSPECT, exact, sizeof(exact)),
        (int)strlen(expect));
    EXPECT_EQ(
        ws_docker_path_container(k152, "xy", WS_DOCKER_CONTAINER_INSPECT, exact, sizeof(exact) - 1),
        -ENOBUFS);
}

TEST(DockerImages, Grammar)
{
    for (const char *ok : {
             "busybox",
             "busybox:latest",
             "library/busybox:1.36.1-musl",
             "docker.io/library/busybox",
             "ghcr.io/org/team/app:v1.2.3_rc-1",
             "localhost/app",
             "localhost:5000/app",
             "Registry.Example.COM:443/app",
             "127.0.0.1:5000/a/b/c",
             "a__b",
             "a.b",
             "a_b",
             "a---b",
             "a-b.c_d__e",
             "workspaced-test:busybox",
             "app:TAG_upper.ok-1",
             "app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
             "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
         })
        EXPECT_TRUE(ws_docker_image_valid(ok)) << ok;
    std::string max_tag = "app:" + std::string(WS_DOCKER_TAG_MAX, 't');
    EXPECT_TRUE(ws_docker_image_valid(max_tag.c_str()));
    std::string max_name(WS_DOCKER_IMAGE_NAME_MAX, 'a');
    EXPECT_TRUE(ws_docker_image_valid(max_name.c_str()));

    for (const char *bad : {
             "",
             "Busybox",
             "busybox:",
             ":latest",
             "busybox:-tag",
             "busybox:.tag",
             "busybox@",
             "busybox@sha256:abc",
             "busybox@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
             "busybox@md5:0123456789abcdef0123456789abcdef",
             "busybox:latest:extra",
             "a/../b",
             "../b",
             "./b",
             "a/./b",
             "a//b",
             "a/",
             "/a",
             "a..b",
             "a._b",
             "a___b",
             "a-",
             "-a",
             "_a",
             ".a",
             "a%2fb",
             "%2e%2e/a",
             "a?b",
             "a#b",
             "a b",
             "a\tb",
             "a\r\nb",
             "a\\b",
             "a\"b",
             "caf\xc3\xa9",
             "host:port/a",
             "host:123456/a",
             "-host.com/a",
             "[::1]:5000/a",
             "app:v1@sha256:",
         })
        EXPECT_FALSE(ws_docker_image_valid(bad)) << bad;
    EXPECT_FALSE(ws_docker_image_valid(nullptr));
    EXPECT_FALSE(ws_docker_image_valid((max_tag + "t").c_str()));
    EXPECT_FALSE(ws_docker_image_valid((max_name + "a").c_str()));
}

TEST(DockerUser, ValidAndFormat)
{
    for (const char *ok : {"0:0", "1000:1000", "4294967294:4294967294", "007:007"})
        EXPECT_TRUE(ws_docker_user_valid(ok)) << ok;
    for (const char *bad :
         {"", ":", "1:", ":1", "root", "root:root", "1000", "1:2:3", "+1:1", "-1:1", "1:-1",
          "4294967295:1", "1:4294967295", "99999999999:1", " 1:1", "1:1 ", "1:1\n", "0x1:1"})
        EXPECT_FALSE(ws_docker_user_valid(bad)) << bad;
    EXPECT_FALSE(ws_docker_user_valid(nullptr));

    char buf[WS_DOCKER_USER_MAX];
    ASSERT_EQ(ws_docker_user_format(1000, 100, buf, sizeof(buf)), 0);
    EXPECT_STREQ(buf, "1000:100");
    ASSERT_EQ(ws_docker_user_format(4294967294u, 4294967294u, buf, sizeof(buf)), 0);
    EXPECT_STREQ(buf, "4294967294:4294967294");
    EXPECT_TRUE(ws_docker_user_valid(buf));
    EXPECT_EQ(ws_docker_user_format((uid_t)-1, 0, buf, sizeof(buf)), -EINVAL);
    EXPECT_EQ(ws_docker_user_format(0, (gid_t)-1, buf, sizeof(buf)), -EINVAL);
    char small[4] = "ZZZ";
    EXPECT_EQ(ws_docker_user_format(1000, 1000, small, sizeof(small)), -ENOBUFS);
    EXPECT_STREQ(small, "ZZZ");
}

// What a client may name, a command may run as, or may own /tmp: valid and
// neither id 0.
TEST(DockerUser, UnprivilegedRefusesUidOrGidZero)
{
    for (const char *ok : {"1:1", "1000:1000", "4294967294:4294967294", "007:007", "1:100"})
        EXPECT_TRUE(ws_docker_user_unprivileged(ok)) << ok;
    for (const char *bad : {"0:0", "0:1000", "1000:0", "00:1", "1:000", "", "root:root", "-1:1",
                            "4294967295:1", "1:1 "})
        EXPECT_FALSE(ws_docker_user_unprivileged(bad)) << bad;
    EXPECT_FALSE(ws_docker_user_unprivileged(nullptr));
}

TEST(DockerUser, Parse)
{
    uid_t uid = 77;
    gid_t gid = 77;
    ASSERT_EQ(ws_docker_user_parse("524288:524289", &uid, &gid), 0);
    EXPECT_EQ(uid, 524288u);
    EXPECT_EQ(gid, 524289u);
    ASSERT_EQ(ws_docker_user_parse("0:0", &uid, &gid), 0);
    EXPECT_EQ(uid, 0u);
    EXPECT_EQ(gid, 0u);
    ASSERT_EQ(ws_docker_user_parse("4294967294:007", &uid, &gid), 0);
    EXPECT_EQ(uid, 4294967294u);
    EXPECT_EQ(gid, 7u);
    uid = 77;
    gid = 77;
    for (const char *bad : {"", ":", "1:", ":1", "1", "1:2:3", "4294967295:1", "1:-1", "a:b"})
        EXPECT_EQ(ws_docker_user_parse(bad, &uid, &gid), -EINVAL) << bad;
    EXPECT_EQ(ws_docker_user_parse(nullptr, &uid, &gid), -EINVAL);
    EXPECT_EQ(uid, 77u) << "written on failure";
    EXPECT_EQ(gid, 77u) << "written on failure";
}

// --- versions -----------------------------------------------------------------

TEST(DockerVersion, ParseAndOrder)
{
    ws_docker_api_version v{77, 77};
    ASSERT_EQ(ws_docker_api_version_parse("1.41", &v), 0);
    EXPECT_EQ(v.major, 1u);
    EXPECT_EQ(v.minor, 41u);
    ASSERT_EQ(ws_docker_api_version_parse("1.9", &v), 0);
    EXPECT_EQ(v.minor, 9u);
    for (const char *bad : {"", "1", "1.", ".1", "1.41.0", "v1.41", "1.41 ", " 1.41", "1,41",
                            "1.-1", "-1.41", "1.4a", "1.99999", "99999.1", "1.+2", "１.41"}) {
        ws_docker_api_version before{77, 77};
        EXPECT_EQ(ws_docker_api_version_parse(bad, &before), -EINVAL) << bad;
        EXPECT_EQ(before.major, 77u) << "written on failure";
    }
    EXPECT_EQ(ws_docker_api_version_parse(nullptr, &v), -EINVAL);

    // Numeric, not lexical: "1.9" sorts before "1.10".
    EXPECT_LT(ws_docker_api_version_cmp({1, 9}, {1, 10}), 0);
    EXPECT_GT(ws_docker_api_version_cmp({1, 10}, {1, 9}), 0);
    EXPECT_EQ(ws_docker_api_version_cmp({1, 41}, {1, 41}), 0);
    EXPECT_GT(ws_docker_api_version_cmp({2, 0}, {1, 99}), 0);
}

ws_docker_version ParseVersion(const std::string &json, int expect_err = 0)
{
    ws_docker_version v{{77, 77}, {77, 77}};
    EXPECT_EQ(ws_docker_parse_version(json.data(), json.size(), &v), expect_err) << json;
    if (expect_err) {
        EXPECT_EQ(v.api.major, 77u) << "written on failure";
    }
    return v;
}

TEST(DockerVersion, ParseDocument)
{
    // Docker 20.10 (API 1.41), as this machine's daemon answers.
    auto v = ParseVersion(
        R"({"Platform":{"Name":""},"Components":[{"Name":"Engine","Version":"20.10.24+dfsg1",)"
        R"("Details":{"ApiVersion":"1.41","MinAPIVersion":"1.12"}}],"Version":"20.10.24+dfsg1",)"
        R"("ApiVersion":"1.41","MinAPIVersion":"1.12","GitCommit":"5d6db84","Os":"linux"})");
    EXPECT_EQ(v.api.minor, 41u);
    EXPECT_EQ(v.min.minor, 12u);
    // MinAPIVersion is optional (daemons before 1.25, some proxies).
    v = ParseVersion(R"({"ApiVersion":"1.43"})");
    EXPECT_EQ(v.api.minor, 43u);
    EXPECT_EQ(v.min.major, 0u);
    EXPECT_EQ(v.min.minor, 0u);
    v = ParseVersion(R"({"ApiVersion":"1.43","MinAPIVersion":null})");
    EXPECT_EQ(v.min.major, 0u);

    for (const char *bad : {
             "",
             "null",
             "[]",
             "\"1.41\"",
             "{}",
             "{\"ApiVersion\":null}",
             "{\"ApiVersion\":1.41}",
             "{\"ApiVersion\":\"\"}",
             "{\"ApiVersion\":\"1.41.0\"}",
             "{\"ApiVersion\":\"latest\"}",
             "{\"ApiVersion\":\"1.41\",\"MinAPIVersion\":\"x\"}",
             "{\"ApiVersion\":\"1.41\",\"MinAPIVersion\":12}",
             "{\"ApiVersion\":\"1.41\",\"ApiVersion\":\"1.52\"}",
             "{\"ApiVersion\":\"1.41\"",
             "<html>502 Bad Gateway</html>",
             "{\"ApiVersion\":\"1.41\"} trailing",
             "{\"ApiVersion\":\"1.4\\u00001\"}",
         })
        ParseVersion(bad, -EPROTO);
    EXPECT_EQ(ws_docker_parse_version(nullptr, 0, nullptr), -EPROTO);
    std::string huge(WS_DOCKER_RESPONSE_MAX + 1, ' ');
    ParseVersion(huge, -EMSGSIZE);
}

TEST(DockerVersion, Negotiate)
{
    struct {
        ws_docker_version daemon;
        int err;
        ws_docker_api_version expect;
    } cases[] = {
        {{{1, 41}, {1, 12}}, 0, {1, 41}}, // Docker 20.10: speak its newest
        {{{1, 43}, {1, 12}}, 0, {1, 43}},
        {{{1, 52}, {1, 44}}, 0, {1, 52}}, // Docker 29.0
        {{{1, 56}, {1, 44}}, 0, {1, 52}}, // newer: ours
        {{{2, 0}, {1, 24}}, 0, {1, 52}},
        {{{1, 43}, {0, 0}}, 0, {1, 43}},                // no MinAPIVersion
        {{{1, 40}, {1, 12}}, -EPROTONOSUPPORT, {0, 0}}, // too old for us
        {{{1, 9}, {1, 0}}, -EPROTONOSUPPORT, {0, 0}},
        {{{1, 60}, {1, 53}}, -EPROTONOSUPPORT, {0, 0}}, // dropped our version
        {{{1, 52}, {1, 52}}, 0, {1, 52}},
        {{{1, 41}, {1, 41}}, 0, {1, 41}},
        {{{1, 41}, {1, 42}}, -EPROTONOSUPPORT, {0, 0}}, // inconsistent daemon
    };
    for (auto &c : cases) {
        ws_docker_api_version v{77, 77};
        EXPECT_EQ(ws_docker_negotiate(&c.daemon, &v), c.err)
            << c.daemon.api.major << "." << c.daemon.api.minor;
        if (c.err == 0) {
            EXPECT_EQ(v.major, c.expect.major);
            EXPECT_EQ(v.minor, c.expect.minor);
        } else {
            EXPECT_EQ(v.major, 77u);
        }
    }
}

// --- responses ----------------------------------------------------------------

// A container inspect document modeled on what Docker 20.10 returns for a
// container created from ws_docker_create_body (trimmed of nothing we read).
const char kInspect[] = R"({
  "Id": "9e2d4b1a0c8f7e6d5c4b3a29180706f5e4d3c2b1a09f8e7d6c5b4a3928170605",
  "Created": "2026-01-02T03:04:05.123456789Z",
  "Path": "sleep",
  "Args": ["infinity"],
  "State": {"Status": "running", "Running": true, "Paused": false, "Restarting": false,
            "OOMKilled": false, "Dead": false, "Pid": 4242, "ExitCode": 0, "Error": "",
            "StartedAt": "2026-01-02T03:04:05.5Z", "FinishedAt": "0001-01-01T00:00:00Z"},
  "Image": "sha256:d6b2e201bd7225734eabd48ed2416faf73c46ebbd6f7c1d98bfbbbc875d7ea8a",
  "Name": "/workspaced-srv1-ws_0123456789abcdef0123456789abcdef",
  "RestartCount": 0,
  "Driver": "overlay2",
  "Platform": "linux",
  "ExecIDs": null,
  "HostConfig": {
    "Binds": null,
    "ContainerIDFile": "",
    "LogConfig": {"Type": "local", "Config": {"compress": "false", "max-file": "1", "max-size": "1m"}},
    "NetworkMode": "none",
    "PortBindings": null,
    "RestartPolicy": {"Name": "no", "MaximumRetryCount": 0},
    "AutoRemove": false,
    "VolumeDriver": "",
    "VolumesFrom": null,
    "CapAdd": null,
    "CapDrop": ["ALL"],
    "CgroupnsMode": "host",
    "Dns": null,
    "IpcMode": "private",
    "OomScoreAdj": 0,
    "PidMode": "",
    "Privileged": false,
    "PublishAllPorts": false,
    "ReadonlyRootfs": true,
    "SecurityOpt": ["no-new-privileges"],
    "Tmpfs": {"/tmp": "rw,exec,nosuid,nodev,size=67108864,mode=1777,uid=1000,gid=1000"},
    "UTSMode": "",
    "UsernsMode": "",
    "ShmSize": 67108864,
    "Runtime": "runc",
    "ConsoleSize": [0, 0],
    "CpuShares": 0,
    "Memory": 536870912,
    "NanoCpus": 1500000000,
    "CgroupParent": "",
    "Devices": null,
    "KernelMemory": 0,
    "MemoryReservation": 0,
    "MemorySwap": 536870912,
    "MemorySwappiness": null,
    "OomKillDisable": false,
    "PidsLimit": 512,
    "Ulimits": null,
    "Mounts": [{"Type": "bind", "Source": "/var/lib/workspaced/workspaces/ws_0123456789abcdef0123456789abcdef", "Target": "/workspace"}],
    "MaskedPaths": ["/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/sys/firmware"],
    "ReadonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
    "Init": true
  },
  "GraphDriver": {"Data": {"MergedDir": "/var/lib/docker/overlay2/0a1b/merged"}, "Name": "overlay2"},
  "Mounts": [{"Type": "bind", "Source": "/var/lib/workspaced/workspaces/ws_0123456789abcdef0123456789abcdef",
              "Destination": "/workspace", "Mode": "", "RW": true, "Propagation": "rprivate"}],
  "Config": {
    "Hostname": "9e2d4b1a0c8f", "Domainname": "", "User": "1000:1000",
    "AttachStdin": false, "AttachStdout": false, "AttachStderr": false, "Tty": false,
    "OpenStdin": false, "StdinOnce": false, "Env": ["PATH=/bin"], "Cmd": [],
    "Image": "workspaced-test:busybox", "Volumes": null, "WorkingDir": "/workspace",
    "Entrypoint": ["sleep", "infinity"], "OnBuild": null,
    "Labels": {"dev.workspaced.server": "srv1",
               "dev.workspaced.workspace": "ws_0123456789abcdef0123456789abcdef"}
  },
  "NetworkSettings": {"Bridge": "", "SandboxID": "3e65", "Networks": {"none": {"NetworkID": "1511"}}}
})";

ws_docker_container_spec InspectSpec()
{
    auto s = Spec();
    s.memory_bytes = 536870912;
    s.nano_cpus = 1500000000;
    return s;
}

ws_docker_hardening Hardening(const std::string &json, int expect_err = 0)
{
    ws_docker_hardening h;
    memset(&h, 0x5a, sizeof(h));
    EXPECT_EQ(ws_docker_parse_hardening(json.data(), json.size(), &h), expect_err) << json;
    return h;
}

TEST(DockerHardening, ReadBackFromInspect)
{
    auto h = Hardening(kInspect);
    EXPECT_TRUE(h.cap_drop_all);
    EXPECT_EQ(h.n_cap_add, 0u);
    EXPECT_FALSE(h.privileged);
    EXPECT_TRUE(h.no_new_privileges);
    EXPECT_TRUE(h.readonly_rootfs);
    EXPECT_TRUE(h.init);
    EXPECT_STREQ(h.network_mode, "none");
    EXPECT_STREQ(h.ipc_mode, "private");
    EXPECT_STREQ(h.log_type, "local");
    EXPECT_STREQ(h.user, "1000:1000");
    EXPECT_EQ(h.pids_limit, 512);
    EXPECT_EQ(h.memory, 536870912);
    EXPECT_EQ(h.memory_swap, 536870912);
    EXPECT_EQ(h.nano_cpus, 1500000000);
    EXPECT_STREQ(h.tmp_options, "rw,exec,nosuid,nodev,size=67108864,mode=1777,uid=1000,gid=1000");
    EXPECT_EQ(h.tmp_bytes, 67108864);
    EXPECT_TRUE(h.workspace_rw);
    EXPECT_EQ(h.n_other_mounts, 0u);
    EXPECT_STREQ(h.server_id, "srv1");
    EXPECT_STREQ(h.workspace_id, kWsId);
    EXPECT_STREQ(h.runtime, "runc");

    auto s = InspectSpec();
    EXPECT_EQ(ws_docker_hardening_mismatch(&h, &s), nullptr);
}

// Edits the fixture at a path of object keys; a null value removes it.
std::string Edit(const std::vector<std::string> &path, json_t *value)
{
    Json doc(Load(kInspect));
    json_t *obj = doc.j;
    for (size_t i = 0; i + 1 < path.size(); i++)
        obj = json_object_get(obj, path[i].c_str());
    EXPECT_TRUE(json_is_object(obj));
    if (value)
        json_object_set_new(obj, path.back().c_str(), value);
    else
        json_object_del(obj, path.back().c_str());
    return Dump(doc.j);
}

TEST(DockerHardening, EveryWeakeningIsNamed)
{
    struct {
        std::vector<std::string> path;
        json_t *value;
        const char *field;
    } cases[] = {
        {{"HostConfig", "CapDrop"}, json_pack("[s]", "NET_RAW"), "HostConfig.CapDrop"},
        {{"HostConfig", "CapDrop"}, json_null(), "HostConfig.CapDrop"},
        {{"HostConfig", "CapDrop"}, nullptr, "HostConfig.CapDrop"},
        {{"HostConfig", "CapAdd"}, json_pack("[s]", "SYS_ADMIN"), "HostConfig.CapAdd"},
        {{"HostConfig", "Privileged"}, json_true(), "HostConfig.Privileged"},
        {{"HostConfig", "SecurityOpt"}, json_null(), "HostConfig.SecurityOpt"},
        {{"HostConfig", "SecurityOpt"},
         json_pack("[s,s]", "no-new-privileges", "no-new-privileges:false"),
         "HostConfig.SecurityOpt"},
        {{"HostConfig", "SecurityOpt"},
         json_pack("[s]", "no-new-privileges-x"),
         "HostConfig.SecurityOpt"},
        {{"HostConfig", "ReadonlyRootfs"}, json_false(), "HostConfig.ReadonlyRootfs"},
        {{"HostConfig", "Init"}, json_null(), "HostConfig.Init"},
        {{"HostConfig", "NetworkMode"}, json_string("host"), "HostConfig.NetworkMode"},
        {{"HostConfig", "NetworkMode"}, json_string("bridge"), "HostConfig.NetworkMode"},
        {{"HostConfig", "IpcMode"}, json_string("host"), "HostConfig.IpcMode"},
        {{"HostConfig", "LogConfig"},
         json_pack("{s:s}", "Type", "json-file"),
         "HostConfig.LogConfig.Type"},
        {{"Config", "User"}, json_string(""), "Config.User"},
        {{"Config", "User"}, json_string("0:0"), "Config.User"},
        // The daemon drops PidsLimit without the pids controller.
        {{"HostConfig", "PidsLimit"}, json_null(), "HostConfig.PidsLimit"},
        {{"HostConfig", "PidsLimit"}, json_integer(-1), "HostConfig.PidsLimit"},
        {{"HostConfig", "Memory"}, json_integer(0), "HostConfig.Memory"},
        // ... and MemorySwap without swap accounting.
        {{"HostConfig", "MemorySwap"}, json_integer(-1), "HostConfig.MemorySwap"},
        {{"HostConfig", "NanoCpus"}, json_integer(0), "HostConfig.NanoCpus"},
        {{"HostConfig", "Tmpfs"}, json_null(), "HostConfig.Tmpfs"},
        {{"HostConfig", "Tmpfs"},
         json_pack("{s:s}", "/tmp", "rw,exec,nosuid,nodev,size=67108864,mode=1777"),
         "HostConfig.Tmpfs"},
        {{"HostConfig", "Tmpfs"},
         json_pack("{s:s}", "/tmp", "rw,exec,size=67108864,mode=1777,uid=1000,gid=1000"),
         "HostConfig.Tmpfs"},
        {{"Mounts"}, json_null(), "Mounts"},
        {{"Mounts"},
         json_pack("[{s:s, s:s, s:b}]", "Type", "bind", "Destination", "/workspace", "RW", 0),
         "Mounts"},
        {{"Mounts"},
         json_pack("[{s:s, s:s, s:b}, {s:s, s:s, s:b}]", "Type", "bind", "Destination",
                   "/workspace", "RW", 1, "Type", "volume", "Destination", "/data", "RW", 1),
         "Mounts"},
        {{"Mounts"},
         json_pack("[{s:s, s:s, s:b}]", "Type", "volume", "Destination", "/workspace", "RW", 1),
         "Mounts"},
        {{"Config", "Labels"}, json_null(), "Config.Labels"},
        {{"Config", "Labels"},
         json_pack("{s:s, s:s}", "dev.workspaced.server", "other", "dev.workspaced.workspace",
                   kWsId),
         "Config.Labels"},
    };
    auto s = InspectSpec();
    for (auto &c : cases) {
        std::string doc = Edit(c.path, c.value);
        auto h = Hardening(doc);
        const char *m = ws_docker_hardening_mismatch(&h, &s);
        ASSERT_NE(m, nullptr) << doc;
        EXPECT_STREQ(m, c.field) << doc;
    }
}

TEST(DockerHardening, SpecDifferencesAreNamed)
{
    auto h = Hardening(kInspect);
    auto s = InspectSpec();
    s.network_allow = true;
    EXPECT_STREQ(ws_docker_hardening_mismatch(&h, &s), "HostConfig.NetworkMode");
    s = InspectSpec();
    s.pids_limit = 100;
    EXPECT_STREQ(ws_docker_hardening_mismatch(&h, &s), "HostConfig.PidsLimit");
    s = InspectSpec();
    s.memory_bytes = 0;
    EXPECT_STREQ(ws_docker_hardening_mismatch(&h, &s), "HostConfig.Memory");
    s = InspectSpec();
    s.tmp_bytes = 128LL << 20;
    EXPECT_STREQ(ws_docker_hardening_mismatch(&h, &s), "HostConfig.Tmpfs");
    s = InspectSpec();
    s.user = "1000:1001";
    EXPECT_STREQ(ws_docker_hardening_mismatch(&h, &s), "Config.User");
    s = InspectSpec();
    s.workspace_id = "ws_other";
    EXPECT_STREQ(ws_docker_hardening_mismatch(&h, &s), "Config.Labels");
    s = InspectSpec();
    s.image = "../x";
    EXPECT_STREQ(ws_docker_hardening_mismatch(&h, &s), "spec");
}

TEST(DockerHardening, AcceptedEquivalentForms)
{
    auto s = InspectSpec();
    for (json_t *opts :
         {json_pack("[s]", "no-new-privileges:true"), json_pack("[s]", "no-new-privileges=true"),
          json_pack("[s,s]", "seccomp=default", "no-new-privileges")}) {
        auto h = Hardening(Edit({"HostConfig", "SecurityOpt"}, opts));
        EXPECT_TRUE(h.no_new_privileges);
        EXPECT_EQ(ws_docker_hardening_mismatch(&h, &s), nullptr);
    }
    auto h = Hardening(Edit({"HostConfig", "CapDrop"}, json_pack("[s]", "all")));
    EXPECT_TRUE(h.cap_drop_all);
    h = Hardening(Edit({"HostConfig", "CapAdd"}, json_array()));
    EXPECT_EQ(h.n_cap_add, 0u);
}

// The container of SplitSpec as Docker 20.10 reads it back (the names as
// given, the runtime named).
std::string SplitInspect(json_t *cap_add, const char *runtime = "runsc")
{
    Json doc(Load(kInspect));
    json_t *hc = json_object_get(doc.j, "HostConfig");
    json_object_set_new(hc, "CapAdd", cap_add);
    json_object_set_new(hc, "Runtime", json_string(runtime));
    json_object_set_new(json_object_get(hc, "Tmpfs"), "/tmp",
                        json_string("rw,exec,nosuid,nodev,size=67108864,mode=1777,uid=524288,"
                                    "gid=524288"));
    json_object_set_new(json_object_get(doc.j, "Config"), "User", json_string("0:0"));
    return Dump(doc.j);
}

ws_docker_container_spec SplitInspectSpec()
{
    auto s = InspectSpec();
    s.user = "0:0";
    s.tmp_user = "524288:524288";
    s.cap_add = kInitCaps;
    s.runtime = "runsc";
    return s;
}

TEST(DockerHardening, CapAddAndRuntimeReadBack)
{
    auto h = Hardening(SplitInspect(json_pack("[sss]", "KILL", "SETGID", "SETUID")));
    EXPECT_EQ(h.n_cap_add, 3u);
    EXPECT_STREQ(h.cap_add[0], "KILL");
    EXPECT_STREQ(h.cap_add[1], "SETGID");
    EXPECT_STREQ(h.cap_add[2], "SETUID");
    EXPECT_STREQ(h.runtime, "runsc");
    auto s = SplitInspectSpec();
    EXPECT_EQ(ws_docker_hardening_mismatch(&h, &s), nullptr);

    // The same set in another order or as newer daemons normalize it.
    for (json_t *same : {json_pack("[sss]", "SETUID", "KILL", "SETGID"),
                         json_pack("[sss]", "CAP_KILL", "CAP_SETGID", "CAP_SETUID"),
                         json_pack("[sss]", "kill", "Cap_SetGid", "setuid")}) {
        std::string doc = SplitInspect(same);
        auto k = Hardening(doc);
        EXPECT_EQ(ws_docker_hardening_mismatch(&k, &s), nullptr) << doc;
    }
    // A spec without a runtime takes whatever the daemon chose.
    s.runtime = nullptr;
    EXPECT_EQ(ws_docker_hardening_mismatch(&h, &s), nullptr);
    s.runtime = "";
    EXPECT_EQ(ws_docker_hardening_mismatch(&h, &s), nullptr);
}

// A keepalive that is the container's pid 1: Init off in the body, and
// read back as such; Docker's init where the spec wants none (or none where
// it wants one) is named.
TEST(DockerHardening, InitIsOffExactlyWhenTheKeepaliveIsPidOne)
{
    auto s = SplitSpec();
    s.keepalive_is_pid1 = true;
    Json j(Create(s));
    ASSERT_NE(j.j, nullptr);
    ExpectHardened(j.j, s);
    json_t *hc = json_object_get(j.j, "HostConfig");
    EXPECT_TRUE(json_is_false(json_object_get(hc, "Init")));

    auto spec = SplitInspectSpec();
    Json doc(Load(SplitInspect(json_pack("[sss]", "KILL", "SETGID", "SETUID"))));
    auto with_init = Hardening(Dump(doc.j));
    json_object_set_new(json_object_get(doc.j, "HostConfig"), "Init", json_false());
    auto without = Hardening(Dump(doc.j));
    EXPECT_EQ(ws_docker_hardening_mismatch(&with_init, &spec), nullptr);
    EXPECT_STREQ(ws_docker_hardening_mismatch(&without, &spec), "HostConfig.Init");
    spec.keepalive_is_pid1 = true;
    EXPECT_EQ(ws_docker_hardening_mismatch(&without, &spec), nullptr);
    EXPECT_STREQ(ws_docker_hardening_mismatch(&with_init, &spec), "HostConfig.Init");
}

TEST(DockerHardening, AnyOtherCapAddOrRuntimeIsNamed)
{
    auto s = SplitInspectSpec();
    struct {
        std::string doc;
        const char *field;
    } cases[] = {
        {SplitInspect(json_null()), "HostConfig.CapAdd"},
        {SplitInspect(json_array()), "HostConfig.CapAdd"},
        {SplitInspect(json_pack("[ss]", "KILL", "SETUID")), "HostConfig.CapAdd"},
        {SplitInspect(json_pack("[ssss]", "KILL", "SETGID", "SETUID", "SYS_ADMIN")),
         "HostConfig.CapAdd"},
        {SplitInspect(json_pack("[sss]", "KILL", "SETGID", "SYS_ADMIN")), "HostConfig.CapAdd"},
        {SplitInspect(json_pack("[sss]", "KILL", "KILL", "SETUID")), "HostConfig.CapAdd"},
        {SplitInspect(json_pack("[sss]", "KILL", "SETGID", "ALL")), "HostConfig.CapAdd"},
        {SplitInspect(json_pack("[sss]", "KILL", "SETGID", "CAP_CAP_SETUID")), "HostConfig.CapAdd"},
        {SplitInspect(json_pack("[sss]", "KILL", "SETGID", "SETUID"), "runc"),
         "HostConfig.Runtime"},
        {SplitInspect(json_pack("[sss]", "KILL", "SETGID", "SETUID"), ""), "HostConfig.Runtime"},
        {SplitInspect(json_pack("[sss]", "KILL", "SETGID", "SETUID"), "RUNSC"),
         "HostConfig.Runtime"},
    };
    for (auto &c : cases) {
        auto h = Hardening(c.doc);
        const char *m = ws_docker_hardening_mismatch(&h, &s);
        ASSERT_NE(m, nullptr) << c.doc;
        EXPECT_STREQ(m, c.field) << c.doc;
    }
    // Nine entries: more than are kept, and more than asked for.
    std::string nine = SplitInspect(
        json_pack("[sssssssss]", "KILL", "SETGID", "SETUID", "A", "B", "C", "D", "E", "F"));
    auto h = Hardening(nine);
    EXPECT_EQ(h.n_cap_add, 9u);
    EXPECT_STREQ(ws_docker_hardening_mismatch(&h, &s), "HostConfig.CapAdd");
    // The spec without capabilities: the three read back are a weakening.
    h = Hardening(SplitInspect(json_pack("[sss]", "KILL", "SETGID", "SETUID")));
    s.cap_add = nullptr;
    EXPECT_STREQ(ws_docker_hardening_mismatch(&h, &s), "HostConfig.CapAdd");
    // The tmpfs owner is compared too.
    s = SplitInspectSpec();
    s.tmp_user = "524288:524289";
    EXPECT_STREQ(ws_docker_hardening_mismatch(&h, &s), "HostConfig.Tmpfs");
    s.tmp_user = nullptr; // then /tmp would be root's, which it is not
    EXPECT_STREQ(ws_docker_hardening_mismatch(&h, &s), "HostConfig.Tmpfs");
    s = SplitInspectSpec();
    s.cap_add = kInitCaps;
    static const char *const bad[] = {"ALL", nullptr};
    s.cap_add = bad;
    EXPECT_STREQ(ws_docker_hardening_mismatch(&h, &s), "spec");
}

TEST(DockerHardening, MalformedDocumentsAreRefused)
{
    struct {
        std::vector<std::string> path;
        json_t *value;
    } cases[] = {
        {{"HostConfig"}, nullptr},
        {{"HostConfig"}, json_string("x")},
        {{"Config"}, nullptr},
        {{"HostConfig", "CapDrop"}, json_string("ALL")},
        {{"HostConfig", "CapDrop"}, json_pack("[i]", 1)},
        {{"HostConfig", "CapAdd"}, json_pack("[n]")},
        {{"HostConfig", "CapAdd"},
         json_pack("[s]", std::string(WS_DOCKER_CAP_NAME_MAX, 'K').c_str())},
        {{"HostConfig", "Runtime"}, json_integer(1)},
        {{"HostConfig", "Runtime"}, json_string(std::string(WS_DOCKER_RUNTIME_MAX, 'r').c_str())},
        {{"HostConfig", "SecurityOpt"}, json_pack("[b]", 1)},
        {{"HostConfig", "Privileged"}, json_string("false")},
        {{"HostConfig", "ReadonlyRootfs"}, json_integer(1)},
        {{"HostConfig", "PidsLimit"}, json_real(512.5)},
        {{"HostConfig", "PidsLimit"}, json_string("512")},
        {{"HostConfig", "Memory"}, json_true()},
        {{"HostConfig", "NetworkMode"}, json_integer(0)},
        {{"HostConfig", "NetworkMode"}, json_string(std::string(WS_DOCKER_FIELD_MAX, 'n').c_str())},
        {{"HostConfig", "Tmpfs"}, json_pack("{s:i}", "/tmp", 1)},
        {{"HostConfig", "Tmpfs"},
         json_pack("{s:s}", "/tmp", std::string(WS_DOCKER_TMPFS_OPTIONS_MAX, 'o').c_str())},
        {{"HostConfig", "LogConfig"}, json_pack("[]")},
        {{"Mounts"}, json_pack("[s]", "/workspace")},
        {{"Mounts"}, json_pack("{}")},
        {{"Mounts"}, json_pack("[{s:i}]", "RW", 1)},
        {{"Config", "User"}, json_integer(0)},
        {{"Config", "Labels"}, json_pack("{s:i}", "dev.workspaced.server", 1)},
    };
    for (auto &c : cases) {
        std::string doc = Edit(c.path, c.value);
        ws_docker_hardening h;
        memset(&h, 0x5a, sizeof(h));
        EXPECT_EQ(ws_docker_parse_hardening(doc.data(), doc.size(), &h), -EPROTO) << doc;
        EXPECT_EQ(h.n_cap_add, 0x5a5a5a5au) << "written on failure";
    }
    Hardening("", -EPROTO);
    Hardening("[]", -EPROTO);
    Hardening("{\"HostConfig\":{},\"HostConfig\":{},\"Config\":{}}", -EPROTO);
    // Absent members read as their zero values: nothing matches.
    auto h = Hardening("{\"HostConfig\":{},\"Config\":{}}");
    EXPECT_FALSE(h.cap_drop_all);
    EXPECT_EQ(h.pids_limit, 0);
    EXPECT_EQ(h.tmp_bytes, 0);
    auto s = InspectSpec();
    EXPECT_STREQ(ws_docker_hardening_mismatch(&h, &s), "HostConfig.CapDrop");
}

TEST(DockerState, FromInspect)
{
    ws_docker_state st;
    ASSERT_EQ(ws_docker_parse_state(kInspect, strlen(kInspect), &st), 0);
    EXPECT_TRUE(st.running);
    EXPECT_FALSE(st.oom_killed);
    EXPECT_EQ(st.exit_code, 0);
    EXPECT_STREQ(st.status, "running");

    std::string exited = Edit({"State"}, json_pack("{s:s, s:b, s:b, s:i}", "Status", "exited",
                                                   "Running", 0, "OOMKilled", 1, "ExitCode", 137));
    ASSERT_EQ(ws_docker_parse_state(exited.data(), exited.size(), &st), 0);
    EXPECT_FALSE(st.running);
    EXPECT_TRUE(st.oom_killed);
    EXPECT_EQ(st.exit_code, 137);
    EXPECT_STREQ(st.status, "exited");

    for (json_t *bad : {static_cast<json_t *>(nullptr), json_string("running"),
                        json_pack("{s:s}", "Running", "yes"),
                        json_pack("{s:I}", "ExitCode", (json_int_t)1 << 40)}) {
        std::string doc = Edit({"State"}, bad);
        memset(&st, 0x5a, sizeof(st));
        EXPECT_EQ(ws_docker_parse_state(doc.data(), doc.size(), &st), -EPROTO) << doc;
        EXPECT_EQ(st.exit_code, 0x5a5a5a5a);
    }
}

TEST(DockerImage, Volumes)
{
    struct {
        const char *json;
        int err;
        bool has;
    } cases[] = {
        // Docker 20.10's image inspect of an image without VOLUME.
        {R"({"Id":"sha256:d6b2","RepoTags":["workspaced-test:busybox"],"ContainerConfig":)"
         R"({"Volumes":{"/ignored":{}}},"Config":{"Env":["PATH=/bin"],"Cmd":null,"Volumes":null,)"
         R"("WorkingDir":"","Entrypoint":null,"Labels":null},"Os":"linux"})",
         0, false},
        // API 1.52 leaves an unset Volumes out.
        {R"({"Id":"sha256:d6b2","Config":{"Env":["PATH=/bin"]}})", 0, false},
        {R"({"Id":"sha256:d6b2","Config":{"Volumes":{}}})", 0, false},
        {R"({"Id":"sha256:d6b2","Config":null})", 0, false},
        {R"({"Id":"sha256:d6b2"})", 0, false},
        // docker commit --change 'VOLUME /data', as the daemon reports it.
        {R"({"Id":"sha256:77aa","Config":{"Hostname":"607c6bf41882","Cmd":["true"],)"
         R"("Image":"workspaced-test:busybox","Volumes":{"/data":{}},"WorkingDir":""}})",
         0, true},
        {R"({"Config":{"Volumes":{"/a":{},"/b":{}}}})", 0, true},
        {R"({"Config":{"Volumes":["/data"]}})", -EPROTO, false},
        {R"({"Config":{"Volumes":"/data"}})", -EPROTO, false},
        {R"({"Config":[]})", -EPROTO, false},
        {R"({"Config":{"Volumes":{"/a":{}},"Volumes":{}}})", -EPROTO, false},
        {R"([])", -EPROTO, false},
        {R"(not json)", -EPROTO, false},
    };
    for (auto &c : cases) {
        bool has = !c.has;
        EXPECT_EQ(ws_docker_parse_image_volumes(c.json, strlen(c.json), &has), c.err) << c.json;
        if (c.err == 0) {
            EXPECT_EQ(has, c.has) << c.json;
        } else {
            EXPECT_EQ(has, !c.has) << "written on failure";
        }
    }
}

TEST(DockerExecInspect, States)
{
    struct {
        const char *json;
        int err;
        bool running, exited;
        int code, pid;
    } cases[] = {
        // Created, not started (Docker 20.10).
        {R"({"ID":"c40a","Running":false,"ExitCode":null,"ProcessConfig":{"tty":false,)"
         R"("entrypoint":"sh","arguments":["-c","x"],"privileged":false,"user":"1000:1000"},)"
         R"("OpenStdin":false,"OpenStderr":true,"OpenStdout":true,"CanRemove":false,)"
         R"("ContainerID":"9ef9","DetachKeys":"","Pid":0})",
         0, false, false, -1, 0},
        {R"({"Running":true,"ExitCode":null,"Pid":2807})", 0, true, false, -1, 2807},
        {R"({"Running":false,"ExitCode":1,"Pid":2807})", 0, false, true, 1, 2807},
        {R"({"Running":false,"ExitCode":0,"Pid":2807})", 0, false, true, 0, 2807},
        {R"({"Running":false,"ExitCode":126,"Pid":0})", 0, false, true, 126, 0},
        {R"({"Running":true,"ExitCode":0,"Pid":9})", 0, true, false, -1, 9},
        {R"({"Running":"false","ExitCode":0,"Pid":1})", -EPROTO, false, false, 0, 0},
        {R"({"Running":false,"ExitCode":"0","Pid":1})", -EPROTO, false, false, 0, 0},
        {R"({"Running":false,"ExitCode":0.5,"Pid":1})", -EPROTO, false, false, 0, 0},
        {R"({"Running":false,"ExitCode":4294967296,"Pid":1})", -EPROTO, false, false, 0, 0},
        {R"({"Running":false,"ExitCode":0,"Pid":-1})", -EPROTO, false, false, 0, 0},
        {R"({"Running":false,"ExitCode":0,"Pid":99999999999})", -EPROTO, false, false, 0, 0},
        {R"({"Running":false,"Running":true})", -EPROTO, false, false, 0, 0},
        {R"(null)", -EPROTO, false, false, 0, 0},
    };
    for (auto &c : cases) {
        ws_docker_exec_state s;
        memset(&s, 0x5a, sizeof(s));
        EXPECT_EQ(ws_docker_parse_exec_inspect(c.json, strlen(c.json), &s), c.err) << c.json;
        if (c.err) {
            EXPECT_EQ(s.pid, 0x5a5a5a5a) << "written on failure";
            continue;
        }
        EXPECT_EQ(s.running, c.running) << c.json;
        EXPECT_EQ(s.exited, c.exited) << c.json;
        EXPECT_EQ(s.exit_code, c.code) << c.json;
        EXPECT_EQ(s.pid, c.pid) << c.json;
    }
}

TEST(DockerCreated, IdAndWarnings)
{
    std::string ok = std::string(R"({"Id":")") + kId + R"(","Warnings":[]})";
    ws_docker_created c;
    ASSERT_EQ(ws_docker_parse_created(ok.data(), ok.size(), &c), 0);
    EXPECT_STREQ(c.id, kId);
    EXPECT_EQ(c.n_warnings, 0u);
    EXPECT_STREQ(c.warning, "");

    std::string exec = std::string(R"({"Id":")") + kId + R"("})";
    ASSERT_EQ(ws_docker_parse_created(exec.data(), exec.size(), &c), 0);
    EXPECT_STREQ(c.id, kId);

    std::string warned = std::string(R"({"Id":")") + kId +
                         R"(","Warnings":["Your kernel does not support pids limit capabilities)"
                         R"( or the cgroup is not mounted. PIDs limit discarded.\n","second"]})";
    ASSERT_EQ(ws_docker_parse_created(warned.data(), warned.size(), &c), 0);
    EXPECT_EQ(c.n_warnings, 2u);
    EXPECT_STREQ(c.warning, "Your kernel does not support pids limit capabilities or the cgroup "
                            "is not mounted. PIDs limit discarded. ");

    for (std::string bad : {
             std::string(R"({"Warnings":[]})"),
             std::string(R"({"Id":null})"),
             std::string(R"({"Id":"../../etc"})"),
             std::string(R"({"Id":"abc"})"),
             std::string(R"({"Id":")") + kId + "0\"}",
             std::string(R"({"Id":")") + kId + R"(","Warnings":"x"})",
             std::string(R"({"Id":")") + kId + R"(","Warnings":[1]})",
             std::string(R"({"Id":")") + kId + R"(","Id":")" + kId + "\"}",
         }) {
        memset(&c, 0x5a, sizeof(c));
        EXPECT_EQ(ws_docker_parse_created(bad.data(), bad.size(), &c), -EPROTO) << bad;
        EXPECT_EQ(c.n_warnings, 0x5a5a5a5au);
    }
}

TEST(DockerError, Message)
{
    char buf[WS_DOCKER_MESSAGE_MAX];
    const char *conflict = R"({"message":"Conflict. The container name \"/workspaced-srv1-x\" )"
                           R"(is already in use by container \"c6fc\"."})";
    int n = ws_docker_parse_error(conflict, strlen(conflict), buf, sizeof(buf));
    EXPECT_STREQ(buf, "Conflict. The container name \"/workspaced-srv1-x\" is already in use by "
                      "container \"c6fc\".");
    EXPECT_EQ(n, (int)strlen(buf));

    // Control characters (C0, DEL, C1) become spaces; other text is kept.
    const char *ctl = "{\"message\":\"a\\r\\nb\\u001b[31mc\\u007fd\\u0085e \xc3\xa9\"}";
    ASSERT_GT(ws_docker_parse_error(ctl, strlen(ctl), buf, sizeof(buf)), 0);
    EXPECT_STREQ(buf, "a  b [31mc d e \xc3\xa9");

    // Bounded, and cut only between characters.
    std::string longmsg = "{\"message\":\"" + std::string(300, 'x') + "\"}";
    n = ws_docker_parse_error(longmsg.data(), longmsg.size(), buf, sizeof(buf));
    EXPECT_EQ(n, WS_DOCKER_MESSAGE_MAX - 1);
    EXPECT_EQ(strlen(buf), (size_t)WS_DOCKER_MESSAGE_MAX - 1);
    const char *utf = "{\"message\":\"ab\xe2\x82\xac\"}"; // "ab€"
    char small[5];
    n = ws_docker_parse_error(utf, strlen(utf), small, sizeof(small));
    EXPECT_EQ(n, 2);
    EXPECT_STREQ(small, "ab");
    char tiny[1];
    EXPECT_EQ(ws_docker_parse_error(utf, strlen(utf), tiny, sizeof(tiny)), 0);
    EXPECT_STREQ(tiny, "");

    for (const char *bad :
         {"", "{}", "{\"message\":null}", "{\"message\":1}", "[\"m\"]",
          "<html><body>502 Bad Gateway</body></html>", "{\"message\":\"a\",\"message\":\"b\"}",
          "{\"message\":\"a\\u0000b\"}"}) {
        memset(buf, 'Z', sizeof(buf));
        EXPECT_EQ(ws_docker_parse_error(bad, strlen(bad), buf, sizeof(buf)), -EPROTO) << bad;
        EXPECT_EQ(buf[0], 'Z') << "written on failure";
    }
    EXPECT_EQ(ws_docker_parse_error(conflict, strlen(conflict), buf, 0), -EINVAL);
    // Invalid UTF-8 in the body is not a document at all.
    const char *bad_utf8 = "{\"message\":\"\xff\"}";
    EXPECT_EQ(ws_docker_parse_error(bad_utf8, strlen(bad_utf8), buf, sizeof(buf)), -EPROTO);
    std::string huge = "{\"message\":\"" + std::string(WS_DOCKER_RESPONSE_MAX, 'x') + "\"}";
    EXPECT_EQ(ws_docker_parse_error(huge.data(), huge.size(), buf, sizeof(buf)), -EMSGSIZE);
}

// ---- additions: the init bind, removals, lists ----

TEST(DockerCreate, InitIsBoundReadOnlyAndReadBack)
{
    ws_docker_container_spec s = Spec();
    s.init_path = "/opt/workspaced/workspaced-docker-init";
    Json j(Create(s));
    ASSERT_NE(j.j, nullptr);
    json_t *mounts = json_object_get(json_object_get(j.j, "HostConfig"), "Mounts");
    ASSERT_EQ(json_array_size(mounts), 2u);
    json_t *m = json_array_get(mounts, 1);
    EXPECT_EQ(Str(m, "Source"), "/opt/workspaced/workspaced-docker-init");
    EXPECT_EQ(Str(m, "Target"), WS_DOCKER_INIT_TARGET);
    EXPECT_TRUE(True(m, "ReadOnly"));
    // Not canonical, relative, or not UTF-8: refused.
    for (const char *bad : {"relative/init", "/opt/../init", "/opt//init", "/opt/\xff"}) {
        s.init_path = bad;
        EXPECT_EQ(CreateErr(s), -EINVAL) << bad;
    }
}

// Agent mode: the agent and its channel directory bound read-only, the
// secret in the container's Env; both binds or neither, and the read-back
// must show exactly what was asked.
TEST(DockerCreate, TheAgentAndItsChannelAreBoundReadOnlyAndReadBack)
{
    ws_docker_container_spec s = Spec();
    const char *env[] = {"WSAGENT_SECRET=00ff", nullptr};
    s.agent_path = "/opt/workspaced/workspaced-agent";
    s.channel_dir = "/var/lib/workspaced/channels/ws_1";
    s.env = env;
    Json j(Create(s));
    ASSERT_NE(j.j, nullptr);
    json_t *mounts = json_object_get(json_object_get(j.j, "HostConfig"), "Mounts");
    ASSERT_EQ(json_array_size(mounts), 3u);
    EXPECT_EQ(Str(json_array_get(mounts, 1), "Source"), "/opt/workspaced/workspaced-agent");
    EXPECT_EQ(Str(json_array_get(mounts, 1), "Target"), WS_DOCKER_AGENT_TARGET);
    EXPECT_TRUE(True(json_array_get(mounts, 1), "ReadOnly"));
    EXPECT_EQ(Str(json_array_get(mounts, 2), "Source"), "/var/lib/workspaced/channels/ws_1");
    EXPECT_EQ(Str(json_array_get(mounts, 2), "Target"), WS_DOCKER_CHANNEL_TARGET);
    EXPECT_TRUE(True(json_array_get(mounts, 2), "ReadOnly"));
    EXPECT_EQ(Strings(json_object_get(j.j, "Env")),
              (std::vector<std::string>{"WSAGENT_SECRET=00ff"}));
    // Without agent mode: no Env member at all (the image's own).
    Json plain(Create(Spec()));
    EXPECT_EQ(json_object_get(plain.j, "Env"), nullptr);

    // One bind without the other, a path that is not canonical, and Env
    // entries that are not NAME=value or too many: refused.
    ws_docker_container_spec half = s;
    half.channel_dir = nullptr;
    EXPECT_EQ(CreateErr(half), -EINVAL);
    for (const char *bad : {"relative/agent", "/opt/../agent", "/opt/\xff"}) {
        ws_docker_container_spec b = s;
        b.agent_path = bad;
        EXPECT_EQ(CreateErr(b), -EINVAL) << bad;
        b = s;
        b.channel_dir = bad;
        EXPECT_EQ(CreateErr(b), -EINVAL) << bad;
    }
    std::string longer = "A=" + std::string(WS_DOCKER_CONTAINER_ENV_VAR_MAX, 'x');
    for (const char *bad : {"NOVALUE", "=x", "\xff=1", longer.c_str()}) {
        const char *e[] = {bad, nullptr};
        ws_docker_container_spec b = s;
        b.env = e;
        EXPECT_EQ(CreateErr(b), -EINVAL) << bad;
    }
    const char *many[] = {"A=1", "B=1", "C=1", "D=1", "E=1", nullptr};
    ws_docker_container_spec b = s;
    b.env = many;
    EXPECT_EQ(CreateErr(b), -EINVAL);

    // The read-back: both read-only binds, or the mounts do not match.
    auto spec = InspectSpec();
    spec.agent_path = s.agent_path;
    spec.channel_dir = s.channel_dir;
    auto mount = [](const char *dest, bool rw) {
        return json_pack("{s:s, s:s, s:b}", "Type", "bind", "Destination", dest, "RW", rw);
    };
    auto with = [&](std::vector<json_t *> extra) {
        json_t *a = json_array();
        json_array_append_new(a, mount("/workspace", true));
        for (json_t *m : extra)
            json_array_append_new(a, m);
        return Hardening(Edit({"Mounts"}, a));
    };
    auto good =
        with({mount(WS_DOCKER_AGENT_TARGET, false), mount(WS_DOCKER_CHANNEL_TARGET, false)});
    EXPECT_EQ(ws_docker_hardening_mismatch(&good, &spec), nullptr);
    auto rw = with({mount(WS_DOCKER_AGENT_TARGET, false), mount(WS_DOCKER_CHANNEL_TARGET, true)});
    EXPECT_STREQ(ws_docker_hardening_mismatch(&rw, &spec), "Mounts");
    auto missing = with({mount(WS_DOCKER_AGENT_TARGET, false)});
    EXPECT_STREQ(ws_docker_hardening_mismatch(&missing, &spec), "Mounts");
    // A per-command spec does not take a container with the agent's binds.
    auto per_command = InspectSpec();
    EXPECT_STREQ(ws_docker_hardening_mismatch(&good, &per_command), "Mounts");
}

TEST(DockerExec, RemovalsComeFirstAndAreBareNames)
{
    const char *argv[] = {"env", nullptr};
    const char *envp[] = {"PATH=/bin", "FOO=1", nullptr};
    const char *unset[] = {"HOSTNAME", "IMAGE_VAR", nullptr};
    ws_docker_exec_spec s{};
    s.argv = argv;
    s.envp = envp;
    s.unset = unset;
    Json j(Exec(s));
    ASSERT_NE(j.j, nullptr);
    // The daemon applies entries in order: a removal after a value would
    // take that value away.
    EXPECT_EQ(Strings(json_object_get(j.j, "Env")),
              (std::vector<std::string>{"HOSTNAME", "IMAGE_VAR", "PATH=/bin", "FOO=1"}));
    for (const char *bad : {"", "A=B", "\xff"}) {
        const char *u[] = {bad, nullptr};
        s.unset = u;
        EXPECT_EQ(ExecErr(s), -EINVAL) << bad;
    }
}

TEST(DockerImage, EnvNames)
{
    char **names = nullptr;
    std::string doc = R"({"Config":{"Env":["PATH=/bin","A=b=c","EMPTY="]}})";
    ASSERT_EQ(ws_docker_parse_image_env_names(doc.data(), doc.size(), &names), 0);
    std::vector<std::string> got;
    for (size_t i = 0; names[i]; i++)
        got.push_back(names[i]);
    ws_docker_names_free(names);
    EXPECT_EQ(got, (std::vector<std::string>{"PATH", "A", "EMPTY"}));
    doc = R"({"Config":{"Env":null}})";
    ASSERT_EQ(ws_docker_parse_image_env_names(doc.data(), doc.size(), &names), 0);
    EXPECT_EQ(names[0], nullptr);
    ws_docker_names_free(names);
    for (std::string bad : {R"({"Config":{"Env":["NOEQUALS"]}})", R"({"Config":{"Env":["=x"]}})",
                            R"({"Config":{"Env":[3]}})", R"([])"}) {
        names = reinterpret_cast<char **>(0x1);
        EXPECT_EQ(ws_docker_parse_image_env_names(bad.data(), bad.size(), &names), -EPROTO) << bad;
        EXPECT_EQ(names, reinterpret_cast<char **>(0x1));
    }
}

TEST(DockerList, ContainerIdsAndPath)
{
    std::string id(64, 'a');
    char **ids = nullptr;
    std::string doc = "[]";
    ASSERT_EQ(ws_docker_parse_container_ids(doc.data(), doc.size(), &ids), 0);
    EXPECT_EQ(ids[0], nullptr);
    ws_docker_names_free(ids);
    doc = "[{\"Id\":\"" + id + "\",\"Names\":[\"/x\"]},{\"Id\":\"" + std::string(64, 'b') + "\"}]";
    ASSERT_EQ(ws_docker_parse_container_ids(doc.data(), doc.size(), &ids), 0);
    EXPECT_EQ(std::string(ids[0]), id);
    EXPECT_EQ(std::string(ids[1]), std::string(64, 'b'));
    EXPECT_EQ(ids[2], nullptr);
    ws_docker_names_free(ids);
    // A short (prefix) id or anything not a list is not the daemon's.
    for (std::string bad :
         {std::string("[{\"Id\":\"abc\"}]"), std::string("{}"), std::string("[{\"Id\":\"../x\"}]")})
        EXPECT_EQ(ws_docker_parse_container_ids(bad.data(), bad.size(), &ids), -EPROTO) << bad;

    char buf[WS_DOCKER_PATH_MAX];
    ws_docker_api_version v{1, 41};
    ASSERT_GT(ws_docker_path_list_by_label(v, WS_DOCKER_LABEL_SERVER, "0123abcd", buf, sizeof(buf)),
              0);
    EXPECT_STREQ(buf, "/v1.41/containers/json?all=true&filters=%7B%22label%22%3A%5B%22"
                      "dev.workspaced.server%3D0123abcd%22%5D%7D");
    for (const char *bad : {"a&b", "a\"b", "", "a b", "a=b"})
        EXPECT_EQ(ws_docker_path_list_by_label(v, WS_DOCKER_LABEL_SERVER, bad, buf, sizeof(buf)),
                  -EINVAL)
            << bad;
}

} // namespace
