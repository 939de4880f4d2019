// Per-tenant quotas end to end: with authentication on every quota the
// operator left alone has a default, an explicit 0 turns one off, and
// without authentication there is none. For each quota one tenant
// exhausts it and gets the exact refusal while another tenant is not
// touched: open workspaces, what memory workspaces hold (entries
// counted), streams held open, and the output kept of finished commands
// (pushed out past the tenant's bytes, freed after its time).
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::StatusCode;
using namespace workspace::v1;

namespace
{

const char *const kAlice = "tok-alice-quota-0123";
const char *const kBob = "tok-bob-quota-4567";

std::string TokensFile()
{
    std::string path = wstest::MakeTempDir("tokens") + "/tokens";
    wstest::WriteHostFile(path, "alice " + wstest::Sha256Hex(kAlice) + "\nbob " +
                                    wstest::Sha256Hex(kBob) + "\n");
    return path;
}

std::vector<std::string> Args(std::vector<std::string> more, bool auth = true)
{
    std::vector<std::string> a;
    if (auth)
        a = {"--tokens-file", TokensFile()};
    a.insert(a.end(), more.begin(), more.end());
    return a;
}

grpc::Status OpenMemory(Workspaces::Stub *stub, std::string *id = nullptr)
{
    OpenRequest req;
    req.mutable_memory();
    req.mutable_capabilities()->mutable_fs();
    OpenResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status s = stub->Open(&ctx, req, &resp);
    if (id)
        *id = resp.workspace().id();
    return s;
}

grpc::Status MakeDir(FileSystem::Stub *fs, const std::string &id, const std::string &path)
{
    MakeDirRequest req;
    req.set_workspace_id(id);
    req.set_path(path);
    MakeDirResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return fs->MakeDir(&ctx, req, &resp);
}

grpc::Status Remove(FileSystem::Stub *fs, const std::string &id, const std::string &path)
{
    RemoveRequest req;
    req.set_workspace_id(id);
    req.set_path(path);
    req.set_recursive(true);
    RemoveResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return fs->Remove(&ctx, req, &resp);
}

// The refusal every quota gives: RESOURCE_EXHAUSTED, reason QUOTA, and
// the quota and its limit in the metadata.
void ExpectQuota(const grpc::Status &s, const std::string &quota, const std::string &limit)
{
    EXPECT_WS_ERROR(s, StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
    wstest::Error e = wstest::Decode(s);
    EXPECT_EQ(e.metadata["quota"], quota) << s.error_message();
    EXPECT_EQ(e.metadata["limit"], limit) << s.error_message();
}

TEST(TenantQuota, AuthOnGivesDefaultWorkspaceQuota)
{
    wstest::Server srv(Args({}));
    auto alice = Workspaces::NewStub(srv.Channel(kAlice));
    auto bob = Workspaces::NewStub(srv.Channel(kBob));
    for (int i = 0; i < 64; i++)
        ASSERT_TRUE(OpenMemory(alice.get()).ok()) << "workspace " << i;
    ExpectQuota(OpenMemory(alice.get()), "tenant_open_workspaces", "64");
    EXPECT_TRUE(OpenMemory(bob.get()).ok()) << "another tenant has its own count";
}

TEST(TenantQuota, NoneWithoutAuthOrWhenTurnedOff)
{
    {
        // A unix socket without [peers]: one tenant, no per-tenant quota.
        wstest::Server srv(Args({}, false));
        auto ws = srv.workspaces();
        for (int i = 0; i < 70; i++)
            ASSERT_TRUE(OpenMemory(ws.get()).ok()) << "workspace " << i;
    }
    {
        wstest::Server srv(Args({"--tenant-max-workspaces", "0"}));
        auto alice = Workspaces::NewStub(srv.Channel(kAlice));
        for (int i = 0; i < 70; i++)
            ASSERT_TRUE(OpenMemory(alice.get()).ok()) << "workspace " << i;
    }
}

TEST(TenantQuota, MemoryWorkspacesCountEntriesAndBytesPerTenant)
{
    wstest::Server srv(Args({"--tenant-memory-bytes", "65536"}));
    auto alice_ws = Workspaces::NewStub(srv.Channel(kAlice));
    auto alice = FileSystem::NewStub(srv.Channel(kAlice));
    auto bob_ws = Workspaces::NewStub(srv.Channel(kBob));
    auto bob = FileSystem::NewStub(srv.Channel(kBob));
    std::string a1, b1, b2;
    ASSERT_TRUE(OpenMemory(alice_ws.get(), &a1).ok());
    ASSERT_TRUE(OpenMemory(bob_ws.get(), &b1).ok());
    ASSERT_TRUE(OpenMemory(bob_ws.get(), &b2).ok());

    // Empty directories hold no bytes of content: only their entries
    // spend the quota, 256 bytes and the name each.
    int made = 0;
    grpc::Status s;
    for (; made < 1000; made++) {
        char name[16];
        snprintf(name, sizeof(name), "d%03d", made);
        s = MakeDir(alice.get(), a1, name);
        if (!s.ok())
            break;
    }
    ExpectQuota(s, "tenant_memory_bytes", "65536");
    EXPECT_LE(made, 65536 / 260) << "entries are counted";
    EXPECT_GE(made, 65536 / 260 - 2) << "and nothing else is";

    // Bob is untouched by Alice, and his quota spans his workspaces.
    ASSERT_TRUE(wstest::Write(bob.get(), b1, "big", std::string(40000, 'b')).ok());
    ExpectQuota(wstest::Write(bob.get(), b2, "big", std::string(40000, 'b')), "tenant_memory_bytes",
                "65536");
    EXPECT_TRUE(wstest::Write(bob.get(), b2, "small", std::string(1000, 'b')).ok());

    // What Alice removes is hers again.
    ASSERT_TRUE(Remove(alice.get(), a1, "d000").ok());
    EXPECT_TRUE(MakeDir(alice.get(), a1, "again").ok());
}

// Opens Health.Watch and waits for its first answer: the stream is then
// held open by the server.
struct Watch {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<grpc::health::v1::HealthCheckResponse>> reader;
    bool opened = false;
    grpc::Status status;

    explicit Watch(grpc::health::v1::Health::Stub *stub)
    {
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        grpc::health::v1::HealthCheckRequest req;
        reader = stub->Watch(&ctx, req);
        grpc::health::v1::HealthCheckResponse resp;
        opened = reader->Read(&resp);
        if (!opened)
            status = reader->Finish();
    }
    ~Watch()
    {
        if (opened) {
            ctx.TryCancel();
            reader->Finish();
        }
    }
};

TEST(TenantQuota, StreamsPerTenantAcrossConnections)
{
    wstest::Server srv(Args({"--tenant-max-streams", "3"}));
    // Two connections of Alice's: the quota is the tenant's, not one
    // connection's.
    auto a1 = grpc::health::v1::Health::NewStub(srv.Channel(kAlice));
    auto a2 = grpc::health::v1::Health::NewStub(srv.Channel(kAlice));
    auto bob = grpc::health::v1::Health::NewStub(srv.Channel(kBob));
    std::vector<std::unique_ptr<Watch>> held;
    held.push_back(std::make_unique<Watch>(a1.get()));
    held.push_back(std::make_unique<Watch>(a2.get()));
    held.push_back(std::make_unique<Watch>(a1.get()));
    for (const auto &w : held)
        ASSERT_TRUE(w->opened) << w->status.error_message();

    Watch over(a2.get());
    ASSERT_FALSE(over.opened);
    ExpectQuota(over.status, "tenant_streams", "3");

    Watch other(bob.get());
    EXPECT_TRUE(other.opened) << "another tenant's streams: " << other.status.error_message();

    // A stream Alice ends gives its place back.
    held.pop_back();
    bool reopened = false;
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
         !reopened && std::chrono::steady_clock::now() < end;) {
        auto w = std::make_unique<Watch>(a2.get());
        reopened = w->opened;
        if (reopened)
            held.push_back(std::move(w));
        else
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(reopened);
}

// Runs `echo` and returns the process id; every Run keeps two 64 KiB rings
// and two 1000-byte captures once it ended.
std::string RunEcho(Exec::Stub *exec, const std::string &ws_id)
{
    ProcessConfig p = wstest::ArgvProcess({"/bin/echo", "hello"});
    p.set_max_output_bytes(1000);
    RunResponse resp;
    grpc::Status s = wstest::RunProcess(exec, ws_id, p, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.process_id();
}

grpc::Status Attach(Exec::Stub *exec, const std::string &ws_id, const std::string &id)
{
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    AttachRequest req;
    req.set_workspace_id(ws_id);
    req.set_id(id);
    auto r = exec->Attach(&ctx, req);
    ProcessEvent ev;
    while (r->Read(&ev))
        ;
    return r->Finish();
}

void ExpectFreed(const grpc::Status &s)
{
    EXPECT_WS_ERROR(s, StatusCode::NOT_FOUND, "NO_SUCH_PROCESS");
    EXPECT_NE(s.error_message().find("output was freed"), std::string::npos) << s.error_message();
}

constexpr long kRunRetained = 2 * (64 * 1024 + 1000);

TEST(TenantQuota, RetainedOutputOldestFreedFirstPerTenant)
{
    wstest::Server srv(
        Args({"--tenant-retained-output-bytes", std::to_string(2 * kRunRetained + 1000)}));
    auto alice_ws = Workspaces::NewStub(srv.Channel(kAlice));
    auto alice = Exec::NewStub(srv.Channel(kAlice));
    auto bob_ws = Workspaces::NewStub(srv.Channel(kBob));
    auto bob = Exec::NewStub(srv.Channel(kBob));
    wstest::Ws a = wstest::OpenShell(alice_ws.get(), {"/bin/echo"});
    wstest::Ws b = wstest::OpenShell(bob_ws.get(), {"/bin/echo"});

    std::string bob_first = RunEcho(bob.get(), b.id);
    std::string first = RunEcho(alice.get(), a.id);
    std::string second = RunEcho(alice.get(), a.id);
    EXPECT_TRUE(Attach(alice.get(), a.id, first).ok()) << "two fit";
    std::string third = RunEcho(alice.get(), a.id);

    ExpectFreed(Attach(alice.get(), a.id, first));
    EXPECT_TRUE(Attach(alice.get(), a.id, second).ok());
    EXPECT_TRUE(Attach(alice.get(), a.id, third).ok());
    EXPECT_TRUE(Attach(bob.get(), b.id, bob_first).ok()) << "Bob's output is his own";

    // An id never seen is still just unknown.
    grpc::Status unknown = Attach(alice.get(), a.id, "p_0000000000000000");
    EXPECT_WS_ERROR(unknown, StatusCode::NOT_FOUND, "NO_SUCH_PROCESS");
    EXPECT_EQ(unknown.error_message().find("freed"), std::string::npos);
}

TEST(TenantQuota, FinishedOutputFreedAfterTtl)
{
    wstest::Server srv(Args({"--finished-output-ttl-ms", "300"}));
    auto alice_ws = Workspaces::NewStub(srv.Channel(kAlice));
    auto alice = Exec::NewStub(srv.Channel(kAlice));
    wstest::Ws a = wstest::OpenShell(alice_ws.get(), {"/bin/echo"});
    std::string id = RunEcho(alice.get(), a.id);

    grpc::Status s;
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
         std::chrono::steady_clock::now() < end;) {
        s = Attach(alice.get(), a.id, id);
        if (!s.ok())
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ExpectFreed(s);
    ListProcessesRequest req;
    req.set_workspace_id(a.id);
    ListProcessesResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(alice->ListProcesses(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.processes_size(), 0);
}

} // namespace
