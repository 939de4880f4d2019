// Workspace lifecycle end to end against the real server: lifetimes (ttl,
// idle timeout, the operator's caps, Extend, expiry across a restart),
// names and labels with List's selectors and pages, idempotent Open by
// request_id, and a workspace's env and secrets (never on disk, in the
// audit log or the server's log; missing after a restart until
// SetSecrets). Every part also checks that another tenant sees nothing.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::StatusCode;
using namespace workspace::v1;

namespace
{

const char *const kAlice = "tok-alice-life-0123";
const char *const kBob = "tok-bob-life-4567";

std::string TokensFile()
{
    std::string path = wstest::MakeTempDir("tokens") + "/tokens";
    wstest::WriteHostFile(path, "alice " + wstest::Sha256Hex(kAlice) + "\nbob " +
                                    wstest::Sha256Hex(kBob) + "\n");
    return path;
}

template <typename T> void Deadline(grpc::ClientContext *ctx, T seconds)
{
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

int64_t NowMs()
{
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

grpc::Status OpenWith(Workspaces::Stub *stub, const OpenRequest &req, OpenResponse *resp)
{
    grpc::ClientContext ctx;
    Deadline(&ctx, 60);
    return stub->Open(&ctx, req, resp);
}

OpenRequest MemoryReq()
{
    OpenRequest req;
    req.mutable_memory();
    req.mutable_capabilities()->mutable_fs();
    return req;
}

OpenRequest BashReq(const std::vector<std::string> &allowed)
{
    OpenRequest req;
    req.mutable_local_bash();
    req.mutable_capabilities()->mutable_fs();
    for (const auto &c : allowed)
        req.mutable_capabilities()->mutable_shell()->add_allowed_commands(c);
    return req;
}

OpenRequest SandboxReq(const std::vector<std::string> &allowed)
{
    OpenRequest req;
    req.mutable_local_sandbox()->set_exec_mode(wstest::TestExecMode());
    req.mutable_capabilities()->mutable_fs();
    for (const auto &c : allowed)
        req.mutable_capabilities()->mutable_shell()->add_allowed_commands(c);
    return req;
}

grpc::Status Describe(Workspaces::Stub *stub, const std::string &id, DescribeResponse *resp)
{
    DescribeRequest req;
    req.set_workspace_id(id);
    grpc::ClientContext ctx;
    Deadline(&ctx, 30);
    return stub->Describe(&ctx, req, resp);
}

grpc::Status Resolve(Workspaces::Stub *stub, const std::string &token, ResolveResponse *resp)
{
    ResolveRequest req;
    req.mutable_ref()->set_token(token);
    grpc::ClientContext ctx;
    Deadline(&ctx, 30);
    return stub->Resolve(&ctx, req, resp);
}

grpc::Status Close(Workspaces::Stub *stub, const std::string &id)
{
    CloseRequest req;
    req.set_workspace_id(id);
    CloseResponse resp;
    grpc::ClientContext ctx;
    Deadline(&ctx, 60);
    return stub->Close(&ctx, req, &resp);
}

grpc::Status List(Workspaces::Stub *stub, const ListRequest &req, ListResponse *resp)
{
    grpc::ClientContext ctx;
    Deadline(&ctx, 30);
    return stub->List(&ctx, req, resp);
}

grpc::Status Extend(Workspaces::Stub *stub, const std::string &id, uint64_t ttl, uint64_t idle,
                    ExtendResponse *resp)
{
    ExtendRequest req;
    req.set_workspace_id(id);
    req.mutable_lifetime()->set_ttl_ms(ttl);
    req.mutable_lifetime()->set_idle_timeout_ms(idle);
    grpc::ClientContext ctx;
    Deadline(&ctx, 30);
    return stub->Extend(&ctx, req, resp);
}

grpc::Status List(Workspaces::Stub *stub, const ListRequest &req, ListResponse *resp);

// Waits (up to `seconds`) until List no longer shows id (List is not
// activity on it, a Describe would be), then returns what Describe says.
grpc::Status WaitGone(Workspaces::Stub *stub, const std::string &id, int seconds = 20)
{
    for (int i = 0; i < seconds * 10; i++) {
        ListResponse l;
        if (!List(stub, ListRequest(), &l).ok())
            break;
        bool listed = false;
        for (const auto &w : l.workspaces())
            listed = listed || w.id() == id;
        if (!listed)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    DescribeResponse d;
    return Describe(stub, id, &d);
}

// Waits (up to 20 s) until a path is gone: a Close removes the storage
// after the id stops answering.
bool WaitNoPath(const std::string &path)
{
    struct stat st;
    for (int i = 0; i < 200; i++) {
        if (stat(path.c_str(), &st) != 0)
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
}

std::vector<std::string> Ids(const ListResponse &resp)
{
    std::vector<std::string> ids;
    for (const auto &w : resp.workspaces())
        ids.push_back(w.id());
    return ids;
}

// Whether `needle` occurs in any file under `dir` (recursively).
bool FoundUnder(const std::string &dir, const std::string &needle)
{
    for (const auto &[path, hash] : wstest::Snapshot(dir)) {
        (void)hash;
        std::string data;
        try {
            data = wstest::ReadHostFile(dir + "/" + path);
        } catch (...) {
            continue;
        }
        if (data.find(needle) != std::string::npos)
            return true;
    }
    return false;
}

// Mappings of process pid its kernel leaves out of core dumps.
int DontDumpMappings(pid_t pid)
{
    std::ifstream in("/proc/" + std::to_string(pid) + "/smaps");
    std::string line;
    int n = 0;
    while (std::getline(in, line))
        if (line.rfind("VmFlags:", 0) == 0 && (line + " ").find(" dd ") != std::string::npos)
            n++;
    return n;
}

// ---- lifetimes ----

TEST(Lifetime, TtlExpiryClosesLikeCloseAndSaysWhy)
{
    wstest::Server server;
    auto stub = server.workspaces();
    auto fs = server.fs();
    OpenRequest req = BashReq({"sleep"});
    req.mutable_lifetime()->set_ttl_ms(2500);
    OpenResponse open;
    int64_t before = NowMs();
    ASSERT_TRUE(OpenWith(stub.get(), req, &open).ok());
    const Workspace &w = open.workspace();
    EXPECT_EQ(w.lifetime().ttl_ms(), 2500u);
    EXPECT_GE(w.expires_at_unix_ms(), before + 2500);
    EXPECT_LE(w.expires_at_unix_ms(), NowMs() + 2500);
    // The default idle timeout (a day) applies to a workspace that asks none.
    EXPECT_EQ(w.lifetime().idle_timeout_ms(), 24ull * 3600 * 1000);
    ASSERT_TRUE(wstest::Write(fs.get(), w.id(), "keep.txt", "x").ok());
    std::string dir = server.workspace_dir(w.id());
    struct stat st;
    ASSERT_EQ(stat(dir.c_str(), &st), 0);

    // A command running when it expires ends with cause EXPIRED.
    grpc::ClientContext ctx;
    Deadline(&ctx, 60);
    auto stream = wstest::StartStream(server.exec().get(), &ctx, w.id(),
                                      wstest::ArgvProcess({"sleep", "60"}));
    wstest::EventLog log;
    wstest::ReadEvents(stream.get(), &log);
    ASSERT_TRUE(log.exited) << wstest::Problems(log);
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EXPIRED);

    grpc::Status gone = WaitGone(stub.get(), w.id());
    EXPECT_WS_ERROR(gone, StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    EXPECT_EQ(wstest::Decode(gone).metadata["cause"], "expired");
    ResolveResponse res;
    grpc::Status rs = Resolve(stub.get(), w.ref().token(), &res);
    EXPECT_WS_ERROR(rs, StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    EXPECT_EQ(wstest::Decode(rs).metadata["cause"], "expired");
    // Storage removed, the id answers like an expired one for file calls.
    EXPECT_TRUE(WaitNoPath(dir));
    std::string data;
    grpc::Status rd = wstest::Read(fs.get(), w.id(), "keep.txt", &data);
    EXPECT_WS_ERROR(rd, StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    // The audit log ends with the expiry, after the command's record.
    ReadAuditRequest areq;
    areq.set_workspace_id(w.id());
    ReadAuditResponse aresp;
    grpc::ClientContext actx;
    Deadline(&actx, 30);
    ASSERT_TRUE(stub->ReadAudit(&actx, areq, &aresp).ok());
    ASSERT_GE(aresp.records_size(), 2);
    EXPECT_EQ(aresp.records(aresp.records_size() - 1).event(), "expire");
    EXPECT_EQ(aresp.records(aresp.records_size() - 2).event(), "command");
    EXPECT_NE(aresp.records(aresp.records_size() - 2).json().find("\"cause\":\"EXPIRED\""),
              std::string::npos)
        << aresp.records(aresp.records_size() - 2).json();
    // Close of an expired id is a repeated Close.
    EXPECT_TRUE(Close(stub.get(), w.id()).ok());
}

TEST(Lifetime, ARunningCommandKeepsAnIdleWorkspaceAlive)
{
    wstest::Server server;
    auto stub = server.workspaces();
    OpenRequest req = BashReq({"sleep"});
    req.mutable_lifetime()->set_idle_timeout_ms(1500);
    OpenResponse open;
    ASSERT_TRUE(OpenWith(stub.get(), req, &open).ok());
    const std::string id = open.workspace().id();
    EXPECT_EQ(open.workspace().lifetime().idle_timeout_ms(), 1500u);

    // A command of 5 s, three idle timeouts long: the workspace lives on
    // while it runs, and the command ends by itself.
    RunResponse run;
    ASSERT_TRUE(
        wstest::RunProcess(server.exec().get(), id, wstest::ArgvProcess({"sleep", "5"}), &run)
            .ok());
    EXPECT_EQ(run.exited().cause(), EXIT_CAUSE_EXITED);
    // Then, idle, it expires.
    grpc::Status gone = WaitGone(stub.get(), id);
    EXPECT_WS_ERROR(gone, StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    EXPECT_EQ(wstest::Decode(gone).metadata["cause"], "expired");
}

// A client watching a workspace is using it: an open Watch stream keeps
// an idle workspace alive, and once it ends the workspace expires.
TEST(Lifetime, AWatchKeepsAnIdleWorkspaceAlive)
{
    wstest::Server server;
    auto stub = server.workspaces();
    OpenRequest req = MemoryReq();
    req.mutable_lifetime()->set_idle_timeout_ms(1500);
    OpenResponse open;
    ASSERT_TRUE(OpenWith(stub.get(), req, &open).ok());
    const std::string id = open.workspace().id();
    auto fs = server.fs();
    {
        grpc::ClientContext ctx;
        WatchRequest wr;
        wr.set_workspace_id(id);
        wr.set_path(".");
        wr.set_recursive(true);
        auto reader = fs->Watch(&ctx, wr);
        WatchEvent ev;
        ASSERT_TRUE(reader->Read(&ev));
        ASSERT_EQ(ev.type(), WATCH_EVENT_READY);
        // Three idle timeouts with nothing but the watch.
        std::this_thread::sleep_for(std::chrono::milliseconds(4500));
        ctx.TryCancel();
        while (reader->Read(&ev)) {
        }
        reader->Finish();
    }
    // Still there after the watch (one call is activity too).
    DescribeRequest dr;
    dr.set_workspace_id(id);
    DescribeResponse dresp;
    grpc::ClientContext dctx;
    grpc::Status described = stub->Describe(&dctx, dr, &dresp);
    EXPECT_TRUE(described.ok()) << "the watched workspace expired: " << described.error_message();
    // Then, idle, it expires.
    grpc::Status gone = WaitGone(stub.get(), id);
    EXPECT_WS_ERROR(gone, StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    EXPECT_EQ(wstest::Decode(gone).metadata["cause"], "expired");
}

TEST(Lifetime, CallsAreActivity)
{
    wstest::Server server;
    auto stub = server.workspaces();
    OpenRequest req = MemoryReq();
    req.mutable_lifetime()->set_idle_timeout_ms(2000);
    OpenResponse open;
    ASSERT_TRUE(OpenWith(stub.get(), req, &open).ok());
    const std::string id = open.workspace().id();
    // Calls every 500 ms for 5 s: never idle for 2 s.
    for (int i = 0; i < 10; i++) {
        DescribeResponse d;
        ASSERT_TRUE(Describe(stub.get(), id, &d).ok()) << "call " << i;
        EXPECT_GT(d.last_activity_at_unix_ms(), 0);
        EXPECT_GE(d.expires_at_unix_ms(), d.last_activity_at_unix_ms() + 2000);
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    grpc::Status gone = WaitGone(stub.get(), id);
    EXPECT_WS_ERROR(gone, StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
}

TEST(Lifetime, TheOperatorCapsAndDefaults)
{
    wstest::Server server({"--max-lifetime-ms", "60000", "--default-idle-timeout-ms", "0"});
    auto stub = server.workspaces();
    OpenRequest req = MemoryReq();
    req.mutable_lifetime()->set_ttl_ms(120000);
    OpenResponse open;
    grpc::Status s = OpenWith(stub.get(), req, &open);
    EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "LIMIT");
    EXPECT_EQ(wstest::Decode(s).metadata["field"], "lifetime.ttl_ms");
    EXPECT_EQ(wstest::Decode(s).metadata["limit"], "60000");

    int64_t before = NowMs();
    ASSERT_TRUE(OpenWith(stub.get(), MemoryReq(), &open).ok());
    const std::string id = open.workspace().id();
    EXPECT_EQ(open.workspace().lifetime().ttl_ms(), 60000u);
    EXPECT_EQ(open.workspace().lifetime().idle_timeout_ms(), 0u); // 0 disables the default
    EXPECT_GE(open.workspace().expires_at_unix_ms(), before + 60000);

    // Extend within the cap moves the expiry; past it is refused.
    ExtendResponse ext;
    ASSERT_TRUE(Extend(stub.get(), id, 30000, 0, &ext).ok());
    EXPECT_LE(ext.expires_at_unix_ms(), NowMs() + 30000);
    EXPECT_EQ(ext.lifetime().ttl_ms(), 30000u);
    s = Extend(stub.get(), id, 120000, 0, &ext);
    EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "LIMIT");
    EXPECT_EQ(wstest::Decode(s).metadata["field"], "lifetime.ttl_ms");
    s = Extend(stub.get(), id, 0, 0, &ext);
    EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED");
    ASSERT_TRUE(Extend(stub.get(), id, 0, 5000, &ext).ok());
    EXPECT_EQ(ext.lifetime().idle_timeout_ms(), 5000u);
    DescribeResponse d;
    ASSERT_TRUE(Describe(stub.get(), id, &d).ok());
    EXPECT_EQ(d.lifetime().idle_timeout_ms(), 5000u);
    EXPECT_EQ(d.lifetime().ttl_ms(), 30000u);
    // The idle timeout now comes first, counted from the Describe.
    EXPECT_GE(d.expires_at_unix_ms(), ext.expires_at_unix_ms());
    EXPECT_LE(d.expires_at_unix_ms(), NowMs() + 5000);
}

TEST(Lifetime, ExpiryIsKeptAcrossARestart)
{
    std::string state = wstest::MakeStateDir();
    std::string short_id, long_id;
    int64_t long_expiry = 0;
    {
        wstest::Server server({}, state);
        auto stub = server.workspaces();
        OpenRequest req = BashReq({});
        req.mutable_lifetime()->set_ttl_ms(2000);
        OpenResponse open;
        ASSERT_TRUE(OpenWith(stub.get(), req, &open).ok());
        short_id = open.workspace().id();
        req.mutable_lifetime()->set_ttl_ms(3600 * 1000);
        ASSERT_TRUE(OpenWith(stub.get(), req, &open).ok());
        long_id = open.workspace().id();
        long_expiry = open.workspace().expires_at_unix_ms();
        ASSERT_EQ(server.Stop(), 0);
    }
    // Down for longer than the short one's ttl.
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    wstest::Server server({}, state);
    auto stub = server.workspaces();
    grpc::Status gone = WaitGone(stub.get(), short_id, 10);
    EXPECT_WS_ERROR(gone, StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    EXPECT_TRUE(WaitNoPath(server.workspace_dir(short_id)));
    DescribeResponse d;
    ASSERT_TRUE(Describe(stub.get(), long_id, &d).ok());
    // The ttl is absolute: the same expiry after the restart (the idle
    // timeout of a day is later).
    EXPECT_EQ(d.expires_at_unix_ms(), long_expiry);
}

// Expiry of a docker workspace takes its container with it, and its
// command (in the container) ends as EXPIRED.
TEST(Lifetime, ADockerWorkspaceExpiresWithItsContainer)
{
    wstest::Server server;
    auto stub = server.workspaces();
    OpenRequest req;
    req.mutable_docker()->set_image("workspaced-test:busybox");
    req.mutable_docker()->set_exec_mode(wstest::TestExecMode());
    req.mutable_capabilities()->mutable_fs();
    req.mutable_capabilities()->mutable_shell()->add_allowed_commands("sleep");
    req.mutable_lifetime()->set_ttl_ms(4000);
    OpenResponse open;
    grpc::Status s = OpenWith(stub.get(), req, &open);
    ASSERT_TRUE(s.ok()) << s.error_message()
                        << " (needs dockerd and the image workspaced-test:busybox: "
                           "tests/fixtures/dockerd.sh, tests/fixtures/image/build.sh)";
    const std::string id = open.workspace().id();
    auto containers = [&id]() {
        std::string cmd = "docker ps -aq --filter label=dev.workspaced.workspace=" + id;
        FILE *p = popen(cmd.c_str(), "r");
        std::string out;
        char buf[256];
        while (p && fgets(buf, sizeof(buf), p))
            out += buf;
        if (p)
            pclose(p);
        return out;
    };
    EXPECT_FALSE(containers().empty()) << "no container labelled with the workspace";
    grpc::ClientContext ctx;
    Deadline(&ctx, 120);
    auto stream =
        wstest::StartStream(server.exec().get(), &ctx, id, wstest::ArgvProcess({"sleep", "100"}));
    wstest::EventLog log;
    wstest::ReadEvents(stream.get(), &log);
    ASSERT_TRUE(log.exited) << wstest::Problems(log);
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EXPIRED);
    grpc::Status gone = WaitGone(stub.get(), id, 60);
    EXPECT_WS_ERROR(gone, StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    EXPECT_TRUE(WaitNoPath(server.workspace_dir(id)));
    for (int i = 0; i < 200 && !containers().empty(); i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(containers().empty()) << "the container outlived its workspace";
}

// ---- names and labels ----

TEST(Names, UniquePerTenantAndFreedByClose)
{
    wstest::Server server({"--tokens-file", TokensFile()});
    auto alice = Workspaces::NewStub(server.Channel(kAlice));
    auto bob = Workspaces::NewStub(server.Channel(kBob));
    OpenRequest req = MemoryReq();
    req.set_name("build-1");
    OpenResponse first, again;
    ASSERT_TRUE(OpenWith(alice.get(), req, &first).ok());
    EXPECT_EQ(first.workspace().name(), "build-1");
    grpc::Status s = OpenWith(alice.get(), req, &again);
    EXPECT_WS_ERROR(s, StatusCode::ALREADY_EXISTS, "EXISTS");
    EXPECT_EQ(wstest::Decode(s).metadata["workspace_id"], first.workspace().id());
    EXPECT_EQ(wstest::Decode(s).metadata["name"], "build-1");
    // Another tenant's names are its own.
    OpenResponse other;
    ASSERT_TRUE(OpenWith(bob.get(), req, &other).ok());
    // Bob cannot see, extend or re-arm Alice's workspace: unknown to him.
    DescribeResponse d;
    EXPECT_WS_ERROR(Describe(bob.get(), first.workspace().id(), &d), StatusCode::NOT_FOUND,
                    "NO_SUCH_WORKSPACE");
    ExtendResponse ext;
    EXPECT_WS_ERROR(Extend(bob.get(), first.workspace().id(), 1000, 0, &ext), StatusCode::NOT_FOUND,
                    "NO_SUCH_WORKSPACE");
    ListRequest byname;
    byname.set_name("build-1");
    ListResponse l;
    ASSERT_TRUE(List(bob.get(), byname, &l).ok());
    EXPECT_EQ(Ids(l), std::vector<std::string>{other.workspace().id()});
    ASSERT_TRUE(Close(alice.get(), first.workspace().id()).ok());
    ASSERT_TRUE(OpenWith(alice.get(), req, &again).ok());
    EXPECT_NE(again.workspace().id(), first.workspace().id());

    for (const char *bad : {"Build", "-a", "a-", "a_b", "a.b", ""}) {
        if (!bad[0])
            continue;
        req.set_name(bad);
        s = OpenWith(alice.get(), req, &again);
        EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED") << bad;
        EXPECT_EQ(wstest::Decode(s).metadata["field"], "name") << bad;
    }
    req.set_name(std::string(64, 'a'));
    EXPECT_WS_ERROR(OpenWith(alice.get(), req, &again), StatusCode::INVALID_ARGUMENT, "MALFORMED");
}

TEST(Labels, ValidatedLikeKubernetes)
{
    wstest::Server server;
    auto stub = server.workspaces();
    OpenResponse open;
    for (const char *bad_key : {"", "-x", "x-", "a/b/c", "Example.com/x", "a b", "é"}) {
        OpenRequest req = MemoryReq();
        (*req.mutable_labels())[bad_key] = "v";
        grpc::Status s = OpenWith(stub.get(), req, &open);
        EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED") << bad_key;
        EXPECT_EQ(wstest::Decode(s).metadata["field"], "labels") << bad_key;
        EXPECT_EQ(wstest::Decode(s).metadata["label"], bad_key);
    }
    OpenRequest req = MemoryReq();
    (*req.mutable_labels())["team"] = std::string(64, 'v');
    EXPECT_WS_ERROR(OpenWith(stub.get(), req, &open), StatusCode::INVALID_ARGUMENT, "MALFORMED");
    req = MemoryReq();
    (*req.mutable_labels())[std::string(64, 'k')] = "v";
    EXPECT_WS_ERROR(OpenWith(stub.get(), req, &open), StatusCode::INVALID_ARGUMENT, "MALFORMED");
    req = MemoryReq();
    for (int i = 0; i < 65; i++)
        (*req.mutable_labels())["k" + std::to_string(i)] = "v";
    EXPECT_WS_ERROR(OpenWith(stub.get(), req, &open), StatusCode::INVALID_ARGUMENT, "MALFORMED");

    req = MemoryReq();
    (*req.mutable_labels())["example.com/team"] = "infra_1.a";
    (*req.mutable_labels())["empty"] = "";
    ASSERT_TRUE(OpenWith(stub.get(), req, &open).ok());
    EXPECT_EQ(open.workspace().labels().at("example.com/team"), "infra_1.a");
    DescribeResponse d;
    ASSERT_TRUE(Describe(stub.get(), open.workspace().id(), &d).ok());
    EXPECT_EQ(d.labels().at("empty"), "");
    EXPECT_EQ(d.labels().size(), 2u);
}

TEST(List, SelectorsNamesPagesAndTenants)
{
    wstest::Server server({"--tokens-file", TokensFile()});
    auto alice = Workspaces::NewStub(server.Channel(kAlice));
    auto bob = Workspaces::NewStub(server.Channel(kBob));
    std::vector<std::string> prod, dev;
    for (int i = 0; i < 5; i++) {
        OpenRequest req = MemoryReq();
        (*req.mutable_labels())["env"] = i < 3 ? "prod" : "dev";
        if (i == 0)
            (*req.mutable_labels())["pinned"] = "yes";
        if (i == 4)
            req.set_name("the-dev-one");
        OpenResponse open;
        ASSERT_TRUE(OpenWith(alice.get(), req, &open).ok());
        (i < 3 ? prod : dev).push_back(open.workspace().id());
    }
    // Bob has one labelled like Alice's: never listed for her.
    OpenRequest breq = MemoryReq();
    (*breq.mutable_labels())["env"] = "prod";
    OpenResponse bopen;
    ASSERT_TRUE(OpenWith(bob.get(), breq, &bopen).ok());

    auto sorted = [](std::vector<std::string> v) {
        std::sort(v.begin(), v.end());
        return v;
    };
    ListRequest lreq;
    ListResponse lresp;
    lreq.set_label_selector("env=prod");
    ASSERT_TRUE(List(alice.get(), lreq, &lresp).ok());
    EXPECT_EQ(Ids(lresp), sorted(prod));
    EXPECT_TRUE(lresp.next_page_token().empty());
    lreq.set_label_selector("env!=prod");
    ASSERT_TRUE(List(alice.get(), lreq, &lresp).ok());
    EXPECT_EQ(Ids(lresp), sorted(dev));
    lreq.set_label_selector("pinned");
    ASSERT_TRUE(List(alice.get(), lreq, &lresp).ok());
    EXPECT_EQ(Ids(lresp), std::vector<std::string>{prod[0]});
    EXPECT_EQ(lresp.workspaces(0).labels().at("pinned"), "yes");
    lreq.set_label_selector("env==prod, !pinned");
    ASSERT_TRUE(List(alice.get(), lreq, &lresp).ok());
    EXPECT_EQ(Ids(lresp), sorted({prod[1], prod[2]}));
    lreq.set_label_selector("");
    lreq.set_name("the-dev-one");
    ASSERT_TRUE(List(alice.get(), lreq, &lresp).ok());
    ASSERT_EQ(lresp.workspaces_size(), 1);
    EXPECT_EQ(lresp.workspaces(0).id(), dev[1]);
    EXPECT_EQ(lresp.workspaces(0).name(), "the-dev-one");
    lreq.set_name("");
    lreq.set_label_selector("env=prod");
    ASSERT_TRUE(List(bob.get(), lreq, &lresp).ok());
    EXPECT_EQ(Ids(lresp), std::vector<std::string>{bopen.workspace().id()});

    // Pages of 2 over Alice's 5: 2, 2, 1, each id once, in id order.
    lreq = ListRequest();
    lreq.set_page_size(2);
    std::vector<std::string> seen;
    int pages = 0;
    do {
        ASSERT_TRUE(List(alice.get(), lreq, &lresp).ok());
        pages++;
        for (const auto &id : Ids(lresp))
            seen.push_back(id);
        lreq.set_page_token(lresp.next_page_token());
    } while (!lresp.next_page_token().empty() && pages < 10);
    EXPECT_EQ(pages, 3);
    std::vector<std::string> all = prod;
    all.insert(all.end(), dev.begin(), dev.end());
    EXPECT_EQ(seen, sorted(all));

    lreq = ListRequest();
    lreq.set_page_token("not-a-token");
    grpc::Status s = List(alice.get(), lreq, &lresp);
    EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED");
    EXPECT_EQ(wstest::Decode(s).metadata["field"], "page_token");
    lreq = ListRequest();
    lreq.set_page_size(1001);
    EXPECT_WS_ERROR(List(alice.get(), lreq, &lresp), StatusCode::INVALID_ARGUMENT, "LIMIT");
    for (const char *bad : {"env=", "=x", "a,,b", "env=prod,", "a b=c", "env=pr od"}) {
        lreq = ListRequest();
        lreq.set_label_selector(bad);
        s = List(alice.get(), lreq, &lresp);
        if (std::string(bad) == "env=") {
            // An empty value is a value: it selects the empty label.
            EXPECT_TRUE(s.ok()) << bad;
            continue;
        }
        EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED") << bad;
        EXPECT_EQ(wstest::Decode(s).metadata["field"], "label_selector") << bad;
    }
}

// ---- idempotent Open ----

TEST(RequestId, ARetryReturnsTheSameWorkspace)
{
    wstest::Server server({"--tokens-file", TokensFile()});
    auto alice = Workspaces::NewStub(server.Channel(kAlice));
    auto bob = Workspaces::NewStub(server.Channel(kBob));
    OpenRequest req = MemoryReq();
    req.set_request_id("req-7f3a:1");
    OpenResponse a, b, c;
    ASSERT_TRUE(OpenWith(alice.get(), req, &a).ok());
    ASSERT_TRUE(OpenWith(alice.get(), req, &b).ok());
    EXPECT_EQ(a.workspace().id(), b.workspace().id());
    ListResponse l;
    ASSERT_TRUE(List(alice.get(), ListRequest(), &l).ok());
    EXPECT_EQ(l.workspaces_size(), 1);
    // Another tenant's request ids are its own.
    ASSERT_TRUE(OpenWith(bob.get(), req, &c).ok());
    EXPECT_NE(c.workspace().id(), a.workspace().id());
    // The same id for another request is refused, naming the first.
    OpenRequest other = req;
    (*other.mutable_labels())["x"] = "y";
    grpc::Status s = OpenWith(alice.get(), other, &c);
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "REQUEST_ID_REUSED");
    EXPECT_EQ(wstest::Decode(s).metadata["workspace_id"], a.workspace().id());
    // Closed since: the retry does not open a second one.
    ASSERT_TRUE(Close(alice.get(), a.workspace().id()).ok());
    s = OpenWith(alice.get(), req, &c);
    EXPECT_WS_ERROR(s, StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    EXPECT_EQ(wstest::Decode(s).metadata["workspace_id"], a.workspace().id());
    // A failed Open leaves the id free for the retry that succeeds.
    OpenRequest bad = MemoryReq();
    bad.set_request_id("req-fails-first");
    bad.set_name("Bad Name");
    EXPECT_FALSE(OpenWith(alice.get(), bad, &c).ok());
    bad.set_name("good-name");
    // A different request now (the name): the failed one left nothing.
    EXPECT_TRUE(OpenWith(alice.get(), bad, &c).ok());
    for (const std::string &rid :
         std::vector<std::string>{"has space", "slash/no", std::string(129, 'r')}) {
        OpenRequest r = MemoryReq();
        r.set_request_id(rid);
        s = OpenWith(alice.get(), r, &c);
        EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED") << rid;
        EXPECT_EQ(wstest::Decode(s).metadata["field"], "request_id");
    }
}

// ---- env and secrets ----

TEST(Env, CheckedAtOpenLikeACommandsEnv)
{
    wstest::Server server;
    auto stub = server.workspaces();
    OpenResponse open;
    // On the host only the allowlist.
    OpenRequest req = BashReq({"printenv"});
    (*req.mutable_env())["API_URL"] = "http://x";
    grpc::Status s = OpenWith(stub.get(), req, &open);
    EXPECT_WS_ERROR(s, StatusCode::PERMISSION_DENIED, "ENV_DENIED");
    EXPECT_EQ(wstest::Decode(s).metadata["field"], "env");
    // The denylist everywhere.
    req = SandboxReq({"printenv"});
    (*req.mutable_env())["LD_PRELOAD"] = "/x.so";
    s = OpenWith(stub.get(), req, &open);
    EXPECT_WS_ERROR(s, StatusCode::PERMISSION_DENIED, "ENV_DENIED");
    req = SandboxReq({"printenv"});
    (*req.mutable_secrets())["BASH_ENV"] = "/x";
    s = OpenWith(stub.get(), req, &open);
    EXPECT_WS_ERROR(s, StatusCode::PERMISSION_DENIED, "ENV_DENIED");
    EXPECT_EQ(wstest::Decode(s).metadata["field"], "secrets");
    // No shell, no commands to give them to.
    req = MemoryReq();
    (*req.mutable_env())["TZ"] = "UTC";
    s = OpenWith(stub.get(), req, &open);
    EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED");
    EXPECT_EQ(wstest::Decode(s).metadata["field"], "env");
    // Sizes.
    req = SandboxReq({"printenv"});
    (*req.mutable_env())["BIG"] = std::string(33 * 1024, 'x');
    EXPECT_WS_ERROR(OpenWith(stub.get(), req, &open), StatusCode::INVALID_ARGUMENT, "LIMIT");
    req = SandboxReq({"printenv"});
    for (int i = 0; i < 65; i++)
        (*req.mutable_secrets())["S" + std::to_string(i)] = "v";
    EXPECT_WS_ERROR(OpenWith(stub.get(), req, &open), StatusCode::INVALID_ARGUMENT, "LIMIT");

    req = BashReq({"printenv"});
    (*req.mutable_env())["TZ"] = "UTC";
    ASSERT_TRUE(OpenWith(stub.get(), req, &open).ok());
    DescribeResponse d;
    ASSERT_TRUE(Describe(stub.get(), open.workspace().id(), &d).ok());
    EXPECT_EQ(d.env().at("TZ"), "UTC");
}

TEST(Secrets, NeverWrittenAnywhereAndGoneAfterARestart)
{
    const std::string secret = "s3cr3t-" + wstest::UniqueSleep();
    std::string state = wstest::MakeStateDir();
    std::string id, token;
    {
        wstest::Server server({}, state);
        auto stub = server.workspaces();
        int dd_before = DontDumpMappings(server.pid());
        OpenRequest req = SandboxReq({"printenv"});
        (*req.mutable_env())["GREETING"] = "hello";
        (*req.mutable_secrets())["API_TOKEN"] = secret;
        OpenResponse open;
        ASSERT_TRUE(OpenWith(stub.get(), req, &open).ok());
        id = open.workspace().id();
        token = open.workspace().ref().token();
        EXPECT_EQ(token.find(secret), std::string::npos) << "the ref holds the secret";
        DescribeResponse d;
        ASSERT_TRUE(Describe(stub.get(), id, &d).ok());
        ASSERT_EQ(d.secret_names_size(), 1);
        EXPECT_EQ(d.secret_names(0), "API_TOKEN");
        EXPECT_FALSE(d.secrets_missing());
        EXPECT_EQ(d.DebugString().find(secret), std::string::npos);
        // The secret's pages are kept out of core dumps, and the server
        // dumps no core at all.
        EXPECT_GT(DontDumpMappings(server.pid()), dd_before);
        std::string limits =
            wstest::ReadHostFile("/proc/" + std::to_string(server.pid()) + "/limits");
        std::istringstream in(limits);
        std::string line;
        bool core_zero = false;
        while (std::getline(in, line))
            if (line.rfind("Max core file size", 0) == 0)
                core_zero = line.find(" 0 ") != std::string::npos;
        EXPECT_TRUE(core_zero) << limits;
        // A bad SetSecrets names the variable, never a value.
        SetSecretsRequest sreq;
        sreq.set_workspace_id(id);
        (*sreq.mutable_secrets())["LD_PRELOAD"] = secret;
        SetSecretsResponse sresp;
        grpc::ClientContext sctx;
        Deadline(&sctx, 30);
        grpc::Status s = stub->SetSecrets(&sctx, sreq, &sresp);
        EXPECT_WS_ERROR(s, StatusCode::PERMISSION_DENIED, "ENV_DENIED");
        EXPECT_EQ(s.error_message().find(secret), std::string::npos);
        EXPECT_EQ(s.error_details().find(secret), std::string::npos);
        ASSERT_EQ(server.Stop(), 0);
        EXPECT_FALSE(FoundUnder(state, secret)) << "the secret is in the state directory";
        EXPECT_EQ(wstest::ReadHostFile(server.stderr_path()).find(secret), std::string::npos)
            << "the secret is in the server's log";
    }
    wstest::Server server({}, state);
    auto stub = server.workspaces();
    DescribeResponse d;
    ASSERT_TRUE(Describe(stub.get(), id, &d).ok());
    EXPECT_TRUE(d.secrets_missing());
    EXPECT_EQ(d.env().at("GREETING"), "hello");
    // Every command is refused until the secrets are given again.
    RunResponse run;
    grpc::Status s =
        wstest::RunProcess(server.exec().get(), id, wstest::ArgvProcess({"printenv"}), &run);
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "SECRETS_MISSING");
    EXPECT_EQ(wstest::Decode(s).metadata["names"], "API_TOKEN");
    SetSecretsRequest sreq;
    sreq.set_workspace_id(id);
    (*sreq.mutable_secrets())["API_TOKEN"] = secret;
    SetSecretsResponse sresp;
    grpc::ClientContext sctx;
    Deadline(&sctx, 30);
    ASSERT_TRUE(stub->SetSecrets(&sctx, sreq, &sresp).ok());
    EXPECT_FALSE(sresp.secrets_missing());
    ASSERT_TRUE(Describe(stub.get(), id, &d).ok());
    EXPECT_FALSE(d.secrets_missing());
    // An unknown id is refused like every call on one.
    sreq.set_workspace_id("ws_00000000000000000000000000000000");
    grpc::ClientContext uctx;
    Deadline(&uctx, 30);
    EXPECT_WS_ERROR(stub->SetSecrets(&uctx, sreq, &sresp), StatusCode::NOT_FOUND,
                    "NO_SUCH_WORKSPACE");
    int dd_open = DontDumpMappings(server.pid());
    ASSERT_TRUE(Close(stub.get(), id).ok());
    // Its secret pages are gone with it.
    EXPECT_LT(DontDumpMappings(server.pid()), dd_open);
    server.Stop();
    EXPECT_FALSE(FoundUnder(state, secret));
    EXPECT_EQ(wstest::ReadHostFile(server.stderr_path()).find(secret), std::string::npos);
}

} // namespace
