// The registry's lifecycle parts on their own: label, name and selector
// forms; the request-id table; the secret store's memory.
#include <string.h>

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

extern "C" {
#include "server/registry/labels.h"
#include "server/registry/requests.h"
#include "server/registry/secrets.h"
}

namespace
{

int Check(std::initializer_list<std::pair<const char *, const char *>> pairs,
          struct ws_diag *d = nullptr)
{
    std::vector<ws_label> v;
    for (auto &p : pairs)
        v.push_back({p.first, p.second});
    return ws_labels_check(v.data(), v.size(), d);
}

TEST(Labels, KeysAndValues)
{
    EXPECT_EQ(Check({{"app", "web"}}), 0);
    EXPECT_EQ(Check({{"example.com/app", ""}}), 0);
    EXPECT_EQ(Check({{"a-b.c_d", "A.b-C_9"}}), 0);
    EXPECT_EQ(Check({{std::string(63, 'k').c_str(), std::string(63, 'v').c_str()}}), 0);
    std::string prefix = std::string(63, 'p') + "." + std::string(63, 'q') + "." +
                         std::string(63, 'r') + "." + std::string(61, 's');
    ASSERT_EQ(prefix.size(), 253u);
    EXPECT_EQ(Check({{(prefix + "/k").c_str(), "v"}}), 0);
    EXPECT_EQ(Check({{(prefix + "x/k").c_str(), "v"}}), -WS_EMALFORMED);

    struct ws_diag d = {};
    EXPECT_EQ(Check({{"ok", "v"}, {"-bad", "v"}}, &d), -WS_EMALFORMED);
    EXPECT_STREQ(d.key[0], "field");
    EXPECT_STREQ(d.value[0], "labels");
    EXPECT_STREQ(d.key[1], "label");
    EXPECT_STREQ(d.value[1], "-bad");
    for (const char *bad :
         {"", "a/", "/a", "a//b", "A.com/x", "a..b/x", "-a.com/x", "x y", "é", "a/b/c"})
        EXPECT_EQ(Check({{bad, "v"}}), -WS_EMALFORMED) << bad;
    for (const char *bad : {"-v", "v-", "v v", "v/w", "ü"})
        EXPECT_EQ(Check({{"k", bad}}), -WS_EMALFORMED) << bad;
    EXPECT_EQ(Check({{std::string(64, 'k').c_str(), "v"}}), -WS_EMALFORMED);
    EXPECT_EQ(Check({{"k", std::string(64, 'v').c_str()}}), -WS_EMALFORMED);
    EXPECT_EQ(Check({{"k", "1"}, {"k", "2"}}), -WS_EMALFORMED);
    EXPECT_EQ(ws_labels_check(nullptr, WS_LABELS_MAX + 1, nullptr), -WS_EMALFORMED);
}

TEST(Names, Form)
{
    for (const std::string &ok :
         std::vector<std::string>{"a", "build-1", "0", std::string(63, 'n')})
        EXPECT_EQ(ws_name_check(ok.c_str(), nullptr), 0) << ok;
    for (const char *bad : {"", "-a", "a-", "A", "a_b", "a.b", "a b"})
        EXPECT_EQ(ws_name_check(bad, nullptr), -WS_EMALFORMED) << bad;
    EXPECT_EQ(ws_name_check(std::string(64, 'n').c_str(), nullptr), -WS_EMALFORMED);
}

bool Match(const char *selector, std::initializer_list<std::pair<const char *, const char *>> l)
{
    struct ws_selector sel = {};
    EXPECT_EQ(ws_selector_parse(selector, &sel, nullptr), 0) << selector;
    std::vector<ws_label> v;
    for (auto &p : l)
        v.push_back({p.first, p.second});
    bool m = ws_selector_match(&sel, v.data(), v.size());
    ws_selector_free(&sel);
    return m;
}

TEST(Selectors, Terms)
{
    EXPECT_TRUE(Match("", {}));
    EXPECT_TRUE(Match("", {{"a", "b"}}));
    EXPECT_TRUE(Match("env=prod", {{"env", "prod"}}));
    EXPECT_TRUE(Match("env==prod", {{"env", "prod"}}));
    EXPECT_FALSE(Match("env=prod", {{"env", "dev"}}));
    EXPECT_FALSE(Match("env=prod", {}));
    EXPECT_TRUE(Match("env!=prod", {}));
    EXPECT_TRUE(Match("env!=prod", {{"env", "dev"}}));
    EXPECT_FALSE(Match("env!=prod", {{"env", "prod"}}));
    EXPECT_TRUE(Match("env", {{"env", ""}}));
    EXPECT_FALSE(Match("env", {}));
    EXPECT_TRUE(Match("!env", {}));
    EXPECT_FALSE(Match("!env", {{"env", "x"}}));
    EXPECT_TRUE(Match("env=", {{"env", ""}}));
    EXPECT_FALSE(Match("env=", {{"env", "x"}}));
    EXPECT_TRUE(Match(" a = 1 , example.com/b != 2 ,!c", {{"a", "1"}, {"example.com/b", "3"}}));
    EXPECT_FALSE(Match("a=1,b", {{"a", "1"}}));
}

TEST(Selectors, Refused)
{
    for (const char *bad :
         {",", "a,", ",a", "a,,b", "=x", "!", "!=x", "a b", "a=b c", "a=-b", "a!b", "!a=b"}) {
        struct ws_selector sel = {};
        struct ws_diag d = {};
        EXPECT_EQ(ws_selector_parse(bad, &sel, &d), -WS_EMALFORMED) << bad;
        EXPECT_STREQ(d.value[0], "label_selector") << bad;
        EXPECT_EQ(sel.n, 0u);
    }
    std::string many;
    for (int i = 0; i <= WS_SELECTOR_TERMS_MAX; i++)
        many += (i ? ",k" : "k") + std::to_string(i);
    struct ws_selector sel = {};
    EXPECT_EQ(ws_selector_parse(many.c_str(), &sel, nullptr), -WS_EMALFORMED);
    std::string huge(WS_SELECTOR_BYTES_MAX + 1, 'a');
    EXPECT_EQ(ws_selector_parse(huge.c_str(), &sel, nullptr), -WS_EMALFORMED);
}

TEST(Requests, WindowPerTenant)
{
    struct ws_requests *q = nullptr;
    ASSERT_EQ(ws_requests_new(&q), 0);
    uint8_t h1[WS_REQUEST_HASH_LEN] = {1}, h2[WS_REQUEST_HASH_LEN] = {2};
    char id[WS_REQUEST_WS_ID_MAX];
    enum ws_request_seen seen;

    ASSERT_EQ(ws_requests_begin(q, "alice", "r1", h1, 1000, id, &seen), 0);
    EXPECT_EQ(seen, WS_REQUEST_NEW);
    ASSERT_EQ(ws_requests_begin(q, "alice", "r1", h1, 1001, id, &seen), 0);
    EXPECT_EQ(seen, WS_REQUEST_PENDING);
    ASSERT_EQ(ws_requests_begin(q, "bob", "r1", h1, 1001, id, &seen), 0);
    EXPECT_EQ(seen, WS_REQUEST_NEW);
    ws_requests_finish(q, "alice", "r1", "ws_a");
    ASSERT_EQ(ws_requests_begin(q, "alice", "r1", h1, 2000, id, &seen), 0);
    EXPECT_EQ(seen, WS_REQUEST_DONE);
    EXPECT_STREQ(id, "ws_a");
    ASSERT_EQ(ws_requests_begin(q, "alice", "r1", h2, 2000, id, &seen), 0);
    EXPECT_EQ(seen, WS_REQUEST_MISMATCH);
    // Past the window it is new again.
    ASSERT_EQ(ws_requests_begin(q, "alice", "r1", h1, 1000 + WS_REQUESTS_WINDOW_MS + 1, id, &seen),
              0);
    EXPECT_EQ(seen, WS_REQUEST_NEW);
    // A failed Open forgets its id.
    ws_requests_finish(q, "bob", "r1", nullptr);
    ASSERT_EQ(ws_requests_begin(q, "bob", "r1", h1, 3000, id, &seen), 0);
    EXPECT_EQ(seen, WS_REQUEST_NEW);
    ws_requests_free(q);
}

TEST(Requests, FullTableForgetsTheOldest)
{
    struct ws_requests *q = nullptr;
    ASSERT_EQ(ws_requests_new(&q), 0);
    uint8_t h[WS_REQUEST_HASH_LEN] = {7};
    char id[WS_REQUEST_WS_ID_MAX];
    enum ws_request_seen seen;
    for (int i = 0; i <= WS_REQUESTS_MAX; i++) {
        std::string rid = "r" + std::to_string(i);
        ASSERT_EQ(ws_requests_begin(q, "t", rid.c_str(), h, 10, id, &seen), 0);
        ws_requests_finish(q, "t", rid.c_str(), "ws_x");
    }
    ASSERT_EQ(ws_requests_begin(q, "t", "r0", h, 10, id, &seen), 0);
    EXPECT_EQ(seen, WS_REQUEST_NEW);
    ASSERT_EQ(ws_requests_begin(q, "t", "r2", h, 10, id, &seen), 0);
    EXPECT_EQ(seen, WS_REQUEST_DONE);
    ws_requests_free(q);
}

// The VmFlags of the mapping that holds addr.
std::string VmFlagsOf(const void *addr)
{
    std::ifstream in("/proc/self/smaps");
    std::string line;
    bool inside = false;
    uintptr_t a = (uintptr_t)addr;
    while (std::getline(in, line)) {
        unsigned long lo, hi;
        if (sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > 8) {
            inside = a >= lo && a < hi;
            continue;
        }
        if (inside && line.rfind("VmFlags:", 0) == 0)
            return line + " ";
    }
    return "";
}

TEST(Secrets, PagesOutOfCoreDumpsAndMerged)
{
    struct ws_secret pairs[] = {{"A", "alpha"}, {"B", "beta"}};
    struct ws_secrets *s = nullptr;
    ASSERT_EQ(ws_secrets_new(pairs, 2, &s), 0);
    EXPECT_EQ(ws_secrets_count(s), 2u);
    EXPECT_STREQ(ws_secrets_get(s, "A"), "alpha");
    EXPECT_EQ(ws_secrets_get(s, "C"), nullptr);
    size_t len = 0;
    const void *mem = ws_secrets_memory(s, &len);
    std::string flags = VmFlagsOf(mem);
    EXPECT_NE(flags.find(" dd "), std::string::npos) << flags;
    // Excluded from a fork's child too.
    EXPECT_NE(flags.find(" dc "), std::string::npos) << flags;

    struct ws_secret more[] = {{"B", "bravo"}, {"C", nullptr}};
    struct ws_secrets *m = nullptr;
    ASSERT_EQ(ws_secrets_merge(s, more, 2, &m), 0);
    EXPECT_EQ(ws_secrets_count(m), 3u);
    EXPECT_STREQ(ws_secrets_get(m, "A"), "alpha");
    EXPECT_STREQ(ws_secrets_get(m, "B"), "bravo");
    EXPECT_STREQ(ws_secrets_get(m, "C"), "");
    ws_secrets_free(s);
    ws_secrets_free(m);
    // Freed: the mapping is gone.
    EXPECT_EQ(VmFlagsOf(mem), "");
    struct ws_secrets *empty = nullptr;
    ASSERT_EQ(ws_secrets_new(nullptr, 0, &empty), 0);
    EXPECT_EQ(ws_secrets_count(empty), 0u);
    ws_secrets_free(empty);
    ws_secrets_free(nullptr);
}

} // namespace
