// The fake Docker daemon against two clients: plain libcurl (as the
// server's _ping probe talks to a daemon) and the server's own Engine API
// client (server/docker: paths built by api.c, sent by http.c, answers
// parsed by api.c), so what the fake answers is what the server accepts.
#include "tests/testutil/fake_dockerd.h"

#include <curl/curl.h>
#include <gtest/gtest.h>
#include <jansson.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

extern "C" {
#include "server/docker/api.h"
#include "server/docker/http.h"
#include "server/events/pump.h"
}

namespace
{

using testutil::FakeDockerd;

struct Reply {
    long status = 0;
    std::string body;
    long connects = -1; // new connections this transfer made
    CURLcode rc = CURLE_OK;
};

size_t Collect(char *p, size_t size, size_t n, void *ud)
{
    static_cast<std::string *>(ud)->append(p, size * n);
    return size * n;
}

// Feeds a request body in two pieces, so curl sends it chunked.
struct Upload {
    std::string data;
    size_t off = 0;
    static size_t Read(char *buf, size_t size, size_t n, void *ud)
    {
        auto *u = static_cast<Upload *>(ud);
        size_t take = std::min(size * n, std::min<size_t>(u->data.size() - u->off, 100));
        memcpy(buf, u->data.data() + u->off, take);
        u->off += take;
        return take;
    }
};

// One request with libcurl. `easy` is reused when given (keep-alive), else
// a handle of its own.
Reply Curl(const FakeDockerd &fake, const std::string &method, const std::string &path,
           const std::string &body = "", bool chunked = false, CURL *easy = nullptr)
{
    Reply r;
    CURL *c = easy ? easy : curl_easy_init();
    curl_easy_reset(c);
    struct curl_slist *h = curl_slist_append(nullptr, "Content-Type: application/json");
    Upload up{body};
    if (chunked)
        h = curl_slist_append(h, "Transfer-Encoding: chunked");
    std::string url = "http://localhost" + path;
    curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, fake.socket_path().c_str());
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    if (chunked) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, Upload::Read);
        curl_easy_setopt(c, CURLOPT_READDATA, &up);
    } else if (method == "POST") {
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)body.size());
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    } else if (method != "GET") {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r.body);
    r.rc = curl_easy_perform(c);
    if (r.rc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
        curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &r.connects);
    }
    curl_slist_free_all(h);
    if (!easy)
        curl_easy_cleanup(c);
    return r;
}

struct Json {
    json_t *root;
    explicit Json(const std::string &s) : root(json_loads(s.c_str(), 0, nullptr))
    {
    }
    ~Json()
    {
        json_decref(root);
    }
    json_t *at(const char *a, const char *b = nullptr) const
    {
        json_t *v = json_object_get(root, a);
        return b ? json_object_get(v, b) : v;
    }
};

// A hardened container as the server asks for it, and its create body.
struct Spec {
    const char *keepalive[3] = {"/.workspaced-init", "keepalive", nullptr};
    ws_docker_container_spec spec{};
    std::string body;
    Spec()
    {
        spec.image = "busybox:fake";
        spec.workspace_dir = "/srv/state/workspaces/w_1";
        spec.user = "1000:1000";
        spec.server_id = "0123456789abcdef";
        spec.workspace_id = "w_1";
        spec.memory_bytes = 256LL << 20;
        spec.nano_cpus = 500000000;
        spec.pids_limit = 100;
        spec.init_path = "/opt/workspaced/workspaced-docker-init";
        spec.keepalive = keepalive;
        char *json = nullptr;
        EXPECT_EQ(0, ws_docker_create_body(&spec, &json));
        body = json ? json : "";
        free(json);
    }
};

// What the server concludes from an inspect document: its parse of the
// hardening and state, and whether the hardening is what was asked for.
void ExpectServerAccepts(const std::string &inspect, const Spec &s, bool running)
{
    ws_docker_hardening h;
    ws_docker_state st;
    ASSERT_EQ(0, ws_docker_parse_hardening(inspect.data(), inspect.size(), &h)) << inspect;
    ASSERT_EQ(0, ws_docker_parse_state(inspect.data(), inspect.size(), &st)) << inspect;
    const char *bad = ws_docker_hardening_mismatch(&h, &s.spec);
    EXPECT_EQ(nullptr, bad) << bad << " in " << inspect;
    EXPECT_EQ(running, st.running);
    EXPECT_FALSE(st.oom_killed);
    EXPECT_TRUE(h.workspace_rw);
    EXPECT_TRUE(h.init_ro);
    EXPECT_EQ(0u, h.n_other_mounts);
    EXPECT_STREQ("1000:1000", h.user);
}

TEST(FakeDockerd, PingAndVersionWithAndWithoutPrefix)
{
    FakeDockerd fake;
    EXPECT_EQ("unix://" + fake.socket_path(), fake.Host());
    Reply ping = Curl(fake, "GET", "/_ping");
    ASSERT_EQ(CURLE_OK, ping.rc) << curl_easy_strerror(ping.rc);
    EXPECT_EQ(200, ping.status);
    EXPECT_EQ("OK", ping.body);
    for (const char *path : {"/version", "/v1.43/version", "/v1.41/version"}) {
        Reply v = Curl(fake, "GET", path);
        EXPECT_EQ(200, v.status) << path;
        ws_docker_version dv;
        ASSERT_EQ(0, ws_docker_parse_version(v.body.data(), v.body.size(), &dv)) << v.body;
        EXPECT_EQ(1u, dv.api.major);
        EXPECT_EQ(43u, dv.api.minor);
    }
    EXPECT_EQ(1, fake.Requests("GET /_ping"));
    EXPECT_EQ(1, fake.Requests("GET /version"));
    EXPECT_EQ(3, fake.Requests("GET /v"));
    EXPECT_EQ(0, fake.Unhandled());
}

TEST(FakeDockerd, ReconcileFindsNothing)
{
    FakeDockerd fake;
    char path[WS_DOCKER_PATH_MAX];
    ASSERT_GT(ws_docker_path_list_by_label({1, 43}, WS_DOCKER_LABEL_SERVER, "0123456789abcdef",
                                           path, sizeof(path)),
              0);
    Reply r = Curl(fake, "GET", path);
    EXPECT_EQ(200, r.status);
    char **ids = nullptr;
    ASSERT_EQ(0, ws_docker_parse_container_ids(r.body.data(), r.body.size(), &ids)) << r.body;
    EXPECT_EQ(nullptr, ids[0]);
    ws_docker_names_free(ids);
    EXPECT_EQ(0, fake.Unhandled());
}

TEST(FakeDockerd, InspectEchoesTheCreateBody)
{
    FakeDockerd fake;
    Spec s;
    const std::string name = "workspaced-0123456789abcdef-w_1";
    Reply c = Curl(fake, "POST", "/v1.43/containers/create?name=" + name, s.body);
    ASSERT_EQ(201, c.status) << c.body;
    ws_docker_created created;
    ASSERT_EQ(0, ws_docker_parse_created(c.body.data(), c.body.size(), &created)) << c.body;
    EXPECT_EQ(std::vector<std::string>{created.id}, fake.Containers());

    // Created, not started: the server would see a stopped container.
    Reply before = Curl(fake, "GET", "/v1.43/containers/" + name + "/json");
    ASSERT_EQ(200, before.status);
    ExpectServerAccepts(before.body, s, false);

    EXPECT_EQ(204,
              Curl(fake, "POST", std::string("/v1.43/containers/") + created.id + "/start").status);
    // By id and by name, as the server asks after the start and in Describe.
    for (const std::string &ref : {std::string(created.id), name}) {
        Reply r = Curl(fake, "GET", "/v1.43/containers/" + ref + "/json");
        ASSERT_EQ(200, r.status) << ref;
        ExpectServerAccepts(r.body, s, true);
        ws_docker_created again;
        ASSERT_EQ(0, ws_docker_parse_created(r.body.data(), r.body.size(), &again));
        EXPECT_STREQ(created.id, again.id);

        Json sent(s.body), got(r.body);
        ASSERT_NE(nullptr, got.root);
        EXPECT_TRUE(json_equal(sent.at("HostConfig"), got.at("HostConfig")));
        EXPECT_EQ(nullptr, got.at("Config", "HostConfig"));
        EXPECT_TRUE(json_equal(sent.at("Labels"), got.at("Config", "Labels")));
        EXPECT_TRUE(json_equal(sent.at("Entrypoint"), got.at("Config", "Entrypoint")));
        EXPECT_STREQ("/workspace", json_string_value(got.at("Config", "WorkingDir")));
        EXPECT_STREQ(("/" + name).c_str(), json_string_value(got.at("Name")));
        json_t *mounts = got.at("Mounts");
        ASSERT_EQ(2u, json_array_size(mounts));
        json_t *ws = json_array_get(mounts, 0);
        EXPECT_STREQ("bind", json_string_value(json_object_get(ws, "Type")));
        EXPECT_STREQ(s.spec.workspace_dir, json_string_value(json_object_get(ws, "Source")));
        EXPECT_STREQ("/workspace", json_string_value(json_object_get(ws, "Destination")));
        EXPECT_TRUE(json_is_true(json_object_get(ws, "RW")));
        EXPECT_TRUE(json_is_false(json_object_get(json_array_get(mounts, 1), "RW")));
    }

    Reply del = Curl(fake, "DELETE", "/v1.43/containers/" + name + "?force=true&v=true");
    EXPECT_EQ(204, del.status);
    EXPECT_TRUE(fake.Containers().empty());
    Reply gone = Curl(fake, "GET", "/v1.43/containers/" + name + "/json");
    EXPECT_EQ(404, gone.status);
    char msg[WS_DOCKER_MESSAGE_MAX];
    ASSERT_GT(ws_docker_parse_error(gone.body.data(), gone.body.size(), msg, sizeof(msg)), 0);
    EXPECT_EQ("No such container: " + name, std::string(msg));
    EXPECT_EQ(1, fake.Requests("DELETE /"));
    EXPECT_EQ(1, fake.Requests("POST /v1.43/containers/create?name=" + name));
    // A missing container is dockerd's own answer, not a call the fake lacks.
    EXPECT_EQ(0, fake.Unhandled());
}

TEST(FakeDockerd, ChunkedBodyAndKeepAlive)
{
    FakeDockerd fake;
    Spec s;
    CURL *easy = curl_easy_init();
    Reply c = Curl(fake, "POST", "/v1.43/containers/create?name=ws-chunked", s.body, true, easy);
    ASSERT_EQ(CURLE_OK, c.rc) << curl_easy_strerror(c.rc);
    ASSERT_EQ(201, c.status) << c.body;
    EXPECT_EQ(1, c.connects);
    ws_docker_created created;
    ASSERT_EQ(0, ws_docker_parse_created(c.body.data(), c.body.size(), &created)) << c.body;
    // The same connection serves the next request.
    Reply r = Curl(fake, "GET", std::string("/v1.43/containers/") + created.id + "/json", "", false,
                   easy);
    EXPECT_EQ(200, r.status);
    EXPECT_EQ(0, r.connects);
    curl_easy_cleanup(easy);
    Json sent(s.body), got(r.body);
    EXPECT_TRUE(json_equal(sent.at("HostConfig"), got.at("HostConfig"))) << r.body;
    EXPECT_EQ(0, fake.Unhandled());
}

TEST(FakeDockerd, HeldImageInspectLetsOtherRequestsThrough)
{
    FakeDockerd fake;
    EXPECT_FALSE(fake.WaitImageInspectArrived(0));
    fake.HoldImageInspect(true);
    std::atomic<bool> answered{false};
    Reply held;
    std::thread t([&] {
        held = Curl(fake, "GET", "/v1.43/images/busybox:fake/json");
        answered = true;
    });
    // The thread is joined on every path: a failed ASSERT must not leave it
    // running into std::thread's destructor.
    bool arrived = fake.WaitImageInspectArrived(10000);
    if (arrived) {
        // Served while the inspect is held on another connection.
        EXPECT_EQ(200, Curl(fake, "GET", "/_ping").status);
        EXPECT_EQ(200, Curl(fake, "GET", "/v1.43/version").status);
        EXPECT_FALSE(answered);
    }
    fake.Release();
    t.join();
    ASSERT_TRUE(arrived);
    EXPECT_EQ(200, held.status);
    bool volumes = true;
    ASSERT_EQ(0, ws_docker_parse_image_volumes(held.body.data(), held.body.size(), &volumes));
    EXPECT_FALSE(volumes);
    char **env = nullptr;
    ASSERT_EQ(0, ws_docker_parse_image_env_names(held.body.data(), held.body.size(), &env));
    ASSERT_NE(nullptr, env[0]);
    EXPECT_STREQ("PATH", env[0]);
    EXPECT_EQ(nullptr, env[1]);
    ws_docker_names_free(env);
    // Released: later inspects answer at once.
    EXPECT_EQ(200, Curl(fake, "GET", "/v1.43/images/busybox:fake/json").status);
    EXPECT_EQ(2, fake.Requests("GET /v1.43/images/"));
}

TEST(FakeDockerd, DestructorReleasesAHeldRequest)
{
    Reply held;
    std::thread t;
    bool arrived;
    {
        FakeDockerd fake;
        fake.HoldImageInspect(true);
        t = std::thread([&] { held = Curl(fake, "GET", "/v1.43/images/busybox:fake/json"); });
        arrived = fake.WaitImageInspectArrived(10000);
    }
    t.join();
    ASSERT_TRUE(arrived);
    EXPECT_EQ(200, held.status);
}

TEST(FakeDockerd, UnhandledIsCounted)
{
    FakeDockerd fake;
    Reply r = Curl(fake, "POST", "/v1.43/containers/" + std::string(64, 'a') + "/exec", "{}");
    EXPECT_EQ(404, r.status);
    EXPECT_EQ("{\"message\":\"fake: not handled\"}", r.body);
    EXPECT_EQ(1, fake.Unhandled());
    EXPECT_EQ(404, Curl(fake, "GET", "/v1.43/info").status);
    EXPECT_EQ(2, fake.Unhandled());
    // A create the server would never send is counted too.
    EXPECT_EQ(400, Curl(fake, "POST", "/v1.43/containers/create", "{}").status);
    EXPECT_EQ(3, fake.Unhandled());
}

// An asynchronous call's end, as the pump thread reports it.
struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    int err = 0;
    long status = 0;
    static void Note(void *arg, int err, long status)
    {
        auto *d = static_cast<Done *>(arg);
        std::lock_guard<std::mutex> l(d->mu);
        d->done = true;
        d->err = err;
        d->status = status;
        d->cv.notify_all();
    }
};

// The server's own client: a pump, the HTTP transport over it, and the
// paths api.c builds.
class ServerClient : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        ASSERT_EQ(0, ws_pump_new(&pump_));
        ws_docker_http_config cfg;
        ASSERT_EQ(
            0, ws_docker_http_config_parse(fake_.Host().c_str(), nullptr, nullptr, nullptr, &cfg));
        ASSERT_EQ(0, ws_docker_http_new(pump_, &cfg, &http_));
    }
    void TearDown() override
    {
        ws_docker_http_free(http_);
        ws_pump_free(pump_);
    }
    Reply Call(ws_docker_http_method method, const std::string &path, const std::string &body = "")
    {
        ws_docker_http_request req{};
        req.method = method;
        req.path = path.c_str();
        req.body = body.empty() ? nullptr : body.data();
        req.body_len = body.size();
        req.timeout_ms = 30000;
        char *out = nullptr;
        size_t len = 0;
        Reply r;
        int err = ws_docker_http_call_sync(http_, &req, &out, &len, &r.status, 0);
        EXPECT_EQ(0, err) << strerror(-err);
        if (out)
            r.body.assign(out, len);
        free(out);
        return r;
    }

    FakeDockerd fake_;
    Done held_; // outlives TearDown, which may still end a call
    ws_pump *pump_ = nullptr;
    ws_docker_http *http_ = nullptr;
};

TEST_F(ServerClient, OpenAndCloseSequence)
{
    Reply v = Call(WS_DOCKER_HTTP_GET, WS_DOCKER_PATH_VERSION);
    ws_docker_version dv;
    ASSERT_EQ(0, ws_docker_parse_version(v.body.data(), v.body.size(), &dv));
    ws_docker_api_version api;
    ASSERT_EQ(0, ws_docker_negotiate(&dv, &api));
    EXPECT_EQ(43u, api.minor);

    Spec s;
    char path[WS_DOCKER_PATH_MAX], name[WS_DOCKER_NAME_MAX + 1];
    ASSERT_GT(ws_docker_path_image_inspect(api, s.spec.image, path, sizeof(path)), 0);
    EXPECT_EQ(200, Call(WS_DOCKER_HTTP_GET, path).status);
    ASSERT_GT(ws_docker_container_name(s.spec.server_id, s.spec.workspace_id, name, sizeof(name)),
              0);
    ASSERT_GT(ws_docker_path_create(api, name, path, sizeof(path)), 0);
    Reply c = Call(WS_DOCKER_HTTP_POST, path, s.body);
    ASSERT_EQ(201, c.status) << c.body;
    ws_docker_created created;
    ASSERT_EQ(0, ws_docker_parse_created(c.body.data(), c.body.size(), &created));
    ASSERT_GT(
        ws_docker_path_container(api, created.id, WS_DOCKER_CONTAINER_START, path, sizeof(path)),
        0);
    EXPECT_EQ(204, Call(WS_DOCKER_HTTP_POST, path).status);
    for (const char *ref : {(const char *)created.id, (const char *)name}) {
        ASSERT_GT(
            ws_docker_path_container(api, ref, WS_DOCKER_CONTAINER_INSPECT, path, sizeof(path)), 0);
        Reply r = Call(WS_DOCKER_HTTP_GET, path);
        ASSERT_EQ(200, r.status);
        ExpectServerAccepts(r.body, s, true);
    }
    ASSERT_GT(ws_docker_path_container(api, name, WS_DOCKER_CONTAINER_REMOVE, path, sizeof(path)),
              0);
    EXPECT_EQ(204, Call(WS_DOCKER_HTTP_DELETE, path).status);
    EXPECT_EQ(
        1, fake_.Requests("DELETE /v1.43/containers/" + std::string(name) + "?force=true&v=true"));
    EXPECT_TRUE(fake_.Containers().empty());
    EXPECT_EQ(0, fake_.Unhandled());
}

// The server's client runs every transfer on one pump thread over several
// connections: a held call must not hold up the next one.
TEST_F(ServerClient, HeldCallDoesNotBlockTheNext)
{
    fake_.HoldImageInspect(true);
    Done &held = held_;
    ws_docker_http_request req{};
    req.method = WS_DOCKER_HTTP_GET;
    req.path = "/v1.43/images/busybox:fake/json";
    req.timeout_ms = 30000;
    req.on_done = Done::Note;
    req.arg = &held;
    ASSERT_EQ(0, ws_docker_http_start(http_, &req, nullptr));
    ASSERT_TRUE(fake_.WaitImageInspectArrived(10000));
    EXPECT_EQ(200, Call(WS_DOCKER_HTTP_GET, WS_DOCKER_PATH_PING).status);
    {
        std::lock_guard<std::mutex> l(held.mu);
        EXPECT_FALSE(held.done);
    }
    fake_.Release();
    std::unique_lock<std::mutex> l(held.mu);
    ASSERT_TRUE(held.cv.wait_for(l, std::chrono::seconds(30), [&] { return held.done; }));
    EXPECT_EQ(0, held.err);
    EXPECT_EQ(200, held.status);
}

} // namespace
