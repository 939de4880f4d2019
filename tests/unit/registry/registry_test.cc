// Unit tests of the registry: ref signing, the key file, lifecycle,
// quota, persistence across a new registry on the same state directory.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/registry/ref.h"
#include "server/registry/registry.h"
}

namespace
{

// A fresh state directory under /tmp, searchable by others as one must
// be when the registry gives workspaces uids of their own (the test's own
// temporary directory is under /root, 0700); removed at exit.
std::string TempDir()
{
    static std::vector<std::string> made;
    char tmpl[] = "/tmp/wsreg.XXXXXX";
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

Workspace__V1__OpenRequest LocalBashRequest(Workspace__V1__LocalBashConfig *cfg)
{
    Workspace__V1__OpenRequest req = WORKSPACE__V1__OPEN_REQUEST__INIT;
    workspace__v1__local_bash_config__init(cfg);
    req.provider_case = WORKSPACE__V1__OPEN_REQUEST__PROVIDER_LOCAL_BASH;
    req.local_bash = cfg;
    return req;
}

TEST(Ref, KeyIsCreatedPrivateAndStable)
{
    std::string dir = TempDir();
    int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(fd, 0);
    struct ws_ref_key a, b;
    ASSERT_EQ(ws_ref_key_load(fd, &a), 0);
    ASSERT_EQ(ws_ref_key_load(fd, &b), 0);
    EXPECT_EQ(memcmp(a.bytes, b.bytes, sizeof(a.bytes)), 0);
    struct stat st;
    ASSERT_EQ(fstatat(fd, "ref.key", &st, 0), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    // A key others could read is refused rather than trusted.
    ASSERT_EQ(fchmodat(fd, "ref.key", 0644, 0), 0);
    EXPECT_EQ(ws_ref_key_load(fd, &b), -EINVAL);
    close(fd);
}

TEST(Ref, SignVerifyAndEveryDefectIsBadRef)
{
    struct ws_ref_key key = {}, other = {};
    for (size_t i = 0; i < sizeof(key.bytes); i++) {
        key.bytes[i] = static_cast<uint8_t>(i);
        other.bytes[i] = static_cast<uint8_t>(i + 1);
    }
    Workspaced__Internal__V1__WorkspaceRecord rec =
        WORKSPACED__INTERNAL__V1__WORKSPACE_RECORD__INIT;
    rec.schema = WS_REF_SCHEMA;
    rec.id = const_cast<char *>("ws_0123456789abcdef0123456789abcdef");
    rec.provider = const_cast<char *>("local-bash");
    uint8_t *token = nullptr;
    size_t len = 0;
    ASSERT_EQ(ws_ref_sign(&key, &rec, &token, &len), 0);
    Workspaced__Internal__V1__WorkspaceRecord *got = nullptr;
    ASSERT_EQ(ws_ref_verify(&key, token, len, &got), 0);
    EXPECT_STREQ(got->id, rec.id);
    EXPECT_STREQ(got->provider, "local-bash");
    ws_ref_record_free(got);

    for (size_t i = 0; i < len; i++)
        for (int bit = 0; bit < 8; bit++) {
            std::vector<uint8_t> t(token, token + len);
            t[i] ^= static_cast<uint8_t>(1 << bit);
            ASSERT_EQ(ws_ref_verify(&key, t.data(), t.size(), &got), -WS_EBADREF)
                << i << "/" << bit;
        }
    for (size_t n = 0; n < len; n++)
        ASSERT_EQ(ws_ref_verify(&key, token, n, &got), -WS_EBADREF) << n;
    EXPECT_EQ(ws_ref_verify(&other, token, len, &got), -WS_EBADREF);
    EXPECT_EQ(ws_ref_verify(&key, nullptr, 0, &got), -WS_EBADREF);
    free(token);
}

// A finished policy set whose default allows every provider.
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

TEST(Registry, OpenCloseQuotaAndPersistence)
{
    std::string dir = TempDir();
    struct ws_registry_config cfg = {};
    cfg.state_dir = dir.c_str();
    cfg.max_workspaces = 2;
    ws_policy_set *policy = AllProviders();
    cfg.policy = policy;
    struct ws_registry *reg = nullptr;
    ASSERT_EQ(ws_registry_new(&cfg, &reg), 0);

    Workspace__V1__LocalBashConfig lb;
    auto req = LocalBashRequest(&lb);
    struct ws_diag d = {};
    struct ws_workspace *a = nullptr, *b = nullptr, *c = nullptr;
    ASSERT_EQ(ws_registry_open(reg, nullptr, &req, &d, &a), 0);
    ASSERT_EQ(ws_registry_open(reg, nullptr, &req, &d, &b), 0);
    EXPECT_EQ(ws_registry_open(reg, nullptr, &req, &d, &c), -WS_EQUOTA);
    std::string id_a = ws_workspace_id(a), id_b = ws_workspace_id(b);
    const uint8_t *tok;
    size_t tok_len;
    ws_workspace_token(b, &tok, &tok_len);
    std::vector<uint8_t> token_b(tok, tok + tok_len);
    // Default capability is fs with the server's size cap.
    ASSERT_NE(ws_workspace_capabilities(a)->fs, nullptr);
    EXPECT_EQ(ws_workspace_max_file_size(a), WS_DEFAULT_MAX_FILE_SIZE);

    bool already = true;
    ASSERT_EQ(ws_registry_close(reg, nullptr, id_a.c_str(), &already), 0);
    EXPECT_FALSE(already);
    ASSERT_EQ(ws_registry_close(reg, nullptr, id_a.c_str(), &already), 0);
    EXPECT_TRUE(already);
    struct ws_workspace *g = nullptr;
    EXPECT_EQ(ws_registry_get(reg, nullptr, id_a.c_str(), WS_CAP_FS, &d, &g), -WS_ENOWORKSPACE);
    EXPECT_EQ(ws_registry_get(reg, nullptr, "../etc", WS_CAP_FS, &d, &g), -WS_ENOWORKSPACE);
    EXPECT_EQ(ws_registry_get(reg, nullptr, id_b.c_str(), WS_CAP_SHELL, &d, &g), -WS_ECAPABILITY);
    ws_workspace_unref(a);
    ws_workspace_unref(b);
    ws_registry_free(reg);

    // A new registry on the same state directory knows b, not a.
    ASSERT_EQ(ws_registry_new(&cfg, &reg), 0);
    ASSERT_EQ(ws_registry_get(reg, nullptr, id_b.c_str(), WS_CAP_FS, &d, &g), 0);
    struct ws_workspace_info info;
    ws_workspace_describe(g, &info);
    EXPECT_EQ(info.state, WS_STATE_OPEN);
    ws_workspace_unref(g);
    ASSERT_EQ(ws_registry_resolve(reg, nullptr, token_b.data(), token_b.size(), &d, &g), 0);
    EXPECT_EQ(std::string(ws_workspace_id(g)), id_b);
    ws_workspace_unref(g);
    EXPECT_EQ(ws_registry_get(reg, nullptr, id_a.c_str(), WS_CAP_FS, &d, &g), -WS_ENOWORKSPACE);
    ws_registry_free(reg);
    ws_policy_set_unref(policy);
}

std::string Meta(const ws_diag &d, const std::string &key)
{
    for (int i = 0; i < d.n_meta; i++)
        if (key == d.key[i])
            return d.value[i];
    return "<none>";
}

// The policy is checked at Open, per tenant, against the set in force:
// swapping the set changes the next Open's answer and leaves open
// workspaces alone.
TEST(Registry, PolicyIsCheckedPerTenantAndSwappedWhole)
{
    std::string dir = TempDir();
    struct ws_registry_config cfg = {};
    cfg.state_dir = dir.c_str();
    struct ws_registry *reg = nullptr;
    // No policy given: the default one, without local-bash.
    ASSERT_EQ(ws_registry_new(&cfg, &reg), 0);
    Workspace__V1__LocalBashConfig lb;
    auto req = LocalBashRequest(&lb);
    struct ws_diag d = {};
    struct ws_workspace *ws = nullptr;
    EXPECT_EQ(ws_registry_open(reg, nullptr, &req, &d, &ws), -WS_EPOLICY);
    EXPECT_EQ(Meta(d, "rule"), "providers");
    EXPECT_EQ(Meta(d, "provider"), "local-bash");

    ws_policy_set *set = nullptr;
    char why[256];
    ASSERT_EQ(ws_policy_set_new(&set), 0);
    ASSERT_EQ(ws_policy_set_key(set, "alice", "providers", "local-bash", why, sizeof(why)), 0);
    ASSERT_EQ(ws_policy_set_finish(set), 0);
    ws_registry_set_policy(reg, set);
    ws_policy_set_unref(set);
    d = {};
    ASSERT_EQ(ws_registry_open(reg, "alice", &req, &d, &ws), 0) << d.message;
    d = {};
    struct ws_workspace *other = nullptr;
    EXPECT_EQ(ws_registry_open(reg, "bob", &req, &d, &other), -WS_EPOLICY);

    // Back to the default: alice's next Open is refused, her workspace
    // stays usable.
    ASSERT_EQ(ws_policy_set_new(&set), 0);
    ASSERT_EQ(ws_policy_set_finish(set), 0);
    ws_registry_set_policy(reg, set);
    ws_policy_set_unref(set);
    d = {};
    EXPECT_EQ(ws_registry_open(reg, "alice", &req, &d, &other), -WS_EPOLICY);
    struct ws_workspace *g = nullptr;
    EXPECT_EQ(ws_registry_get(reg, "alice", ws_workspace_id(ws), WS_CAP_FS, &d, &g), 0);
    ws_workspace_unref(g);
    ws_workspace_unref(ws);
    ws_registry_free(reg);
}

TEST(Registry, DirectoryWithoutRecordIsSweptAtStart)
{
    std::string dir = TempDir();
    struct ws_registry_config cfg = {};
    cfg.state_dir = dir.c_str();
    struct ws_registry *reg = nullptr;
    ASSERT_EQ(ws_registry_new(&cfg, &reg), 0);
    ws_registry_free(reg);
    // The remains of an interrupted Close, and an unrelated directory.
    std::string leftover = dir + "/workspaces/ws_00000000000000000000000000000001";
    ASSERT_EQ(mkdir(leftover.c_str(), 0700), 0);
    ASSERT_EQ(mkdir((leftover + "/sub").c_str(), 0700), 0);
    std::string other = dir + "/workspaces/operator-notes";
    ASSERT_EQ(mkdir(other.c_str(), 0700), 0);
    ASSERT_EQ(ws_registry_new(&cfg, &reg), 0);
    struct stat st;
    EXPECT_NE(stat(leftover.c_str(), &st), 0);
    EXPECT_EQ(stat(other.c_str(), &st), 0);
    ws_registry_free(reg);
}

} // namespace
