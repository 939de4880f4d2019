// Workspaces lifecycle against the real server: open, capabilities, quota,
// signed refs, close, describe, list, restart and eviction.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;
using wstest::Server;

namespace
{

grpc::Status Resolve(Workspaces::Stub *stub, const std::string &token, ResolveResponse *resp)
{
    ClientContext ctx;
    ResolveRequest req;
    req.mutable_ref()->set_token(token);
    return stub->Resolve(&ctx, req, resp);
}

grpc::Status Close(Workspaces::Stub *stub, const std::string &id, CloseResponse *resp)
{
    ClientContext ctx;
    CloseRequest req;
    req.set_workspace_id(id);
    return stub->Close(&ctx, req, resp);
}

grpc::Status Describe(Workspaces::Stub *stub, const std::string &id, DescribeResponse *resp)
{
    ClientContext ctx;
    DescribeRequest req;
    req.set_workspace_id(id);
    return stub->Describe(&ctx, req, resp);
}

grpc::Status StatPath(FileSystem::Stub *fs, const std::string &id, const std::string &path)
{
    ClientContext ctx;
    StatRequest req;
    StatResponse resp;
    req.set_workspace_id(id);
    req.set_path(path);
    return fs->Stat(&ctx, req, &resp);
}

TEST(Workspaces, OpenReturnsIdRefProviderAndCapabilities)
{
    Server srv;
    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_local_bash();
    req.mutable_capabilities()->mutable_fs()->set_max_file_size_bytes(12345);
    OpenResponse resp;
    ClientContext ctx;
    ASSERT_TRUE(ws->Open(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.workspace().provider(), "local-bash");
    EXPECT_EQ(resp.workspace().id().size(), 35u);
    EXPECT_EQ(resp.workspace().id().rfind("ws_", 0), 0u);
    EXPECT_GT(resp.workspace().ref().token().size(), 32u);
    EXPECT_EQ(resp.workspace().capabilities().fs().max_file_size_bytes(), 12345u);
    // The per-workspace directory exists with mode 0700.
    struct stat st;
    ASSERT_EQ(stat(srv.workspace_dir(resp.workspace().id()).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    // The ref never carries a host path.
    EXPECT_EQ(resp.workspace().ref().token().find(srv.state_dir()), std::string::npos);
}

TEST(Workspaces, OpenWithoutProviderIsMalformed)
{
    Server srv;
    auto ws = srv.workspaces();
    OpenRequest req;
    OpenResponse resp;
    ClientContext ctx;
    EXPECT_WS_ERROR(ws->Open(&ctx, req, &resp), StatusCode::INVALID_ARGUMENT, "MALFORMED");
}

TEST(Workspaces, ShellOnMemoryIsCapabilityMissing)
{
    Server srv;
    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_memory();
    req.mutable_capabilities()->mutable_shell()->add_allowed_commands("ls");
    OpenResponse resp;
    ClientContext ctx;
    auto s = ws->Open(&ctx, req, &resp);
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "CAPABILITY_MISSING");
    EXPECT_EQ(wstest::Decode(s).metadata["capability"], "shell");
}

TEST(Workspaces, FsCallWithoutFsCapabilityIsCapabilityMissing)
{
    Server srv;
    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_local_bash();
    req.mutable_capabilities()->mutable_shell()->add_allowed_commands("ls");
    OpenResponse resp;
    ClientContext ctx;
    ASSERT_TRUE(ws->Open(&ctx, req, &resp).ok());
    auto fs = srv.fs();
    auto s = StatPath(fs.get(), resp.workspace().id(), ".");
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "CAPABILITY_MISSING");
    EXPECT_EQ(wstest::Decode(s).metadata["capability"], "fs");
}

TEST(Workspaces, FileSizeCapAboveServerCeilingIsRefused)
{
    Server srv({"--max-file-size", "1000"});
    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_memory();
    req.mutable_capabilities()->mutable_fs()->set_max_file_size_bytes(1001);
    OpenResponse resp;
    ClientContext ctx;
    EXPECT_WS_ERROR(ws->Open(&ctx, req, &resp), StatusCode::INVALID_ARGUMENT, "LIMIT");
}

TEST(Workspaces, QuotaOnOpenWorkspaces)
{
    Server srv({"--max-workspaces", "2"});
    auto ws = srv.workspaces();
    auto a = wstest::Open(ws.get(), "memory");
    auto b = wstest::Open(ws.get(), "local-bash");
    OpenRequest req;
    req.mutable_memory();
    OpenResponse resp;
    ClientContext ctx;
    auto s = ws->Open(&ctx, req, &resp);
    EXPECT_WS_ERROR(s, StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
    EXPECT_EQ(wstest::Decode(s).metadata["quota"], "open_workspaces");
    // Closing one frees a slot.
    CloseResponse cr;
    ASSERT_TRUE(Close(ws.get(), a.id, &cr).ok());
    ClientContext ctx2;
    EXPECT_TRUE(ws->Open(&ctx2, req, &resp).ok());
}

TEST(Workspaces, ResolveGivesBackTheSameWorkspace)
{
    Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto w = wstest::Open(ws.get(), "local-bash");
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "a.txt", "hello").ok());
    ResolveResponse rr;
    ASSERT_TRUE(Resolve(ws.get(), w.token, &rr).ok());
    EXPECT_EQ(rr.workspace().id(), w.id);
    std::string got;
    ASSERT_TRUE(wstest::Read(fs.get(), rr.workspace().id(), "a.txt", &got).ok());
    EXPECT_EQ(got, "hello");
}

TEST(Workspaces, TamperedTruncatedAndForeignRefsAreInvalid)
{
    Server srv;
    Server other;
    auto ws = srv.workspaces();
    auto w = wstest::Open(ws.get(), "local-bash");
    ResolveResponse rr;
    // Every single-bit flip anywhere in the token is refused.
    for (size_t i = 0; i < w.token.size(); i += 7) {
        std::string t = w.token;
        t[i] ^= 0x01;
        EXPECT_WS_ERROR(Resolve(ws.get(), t, &rr), StatusCode::INVALID_ARGUMENT, "BAD_REF");
    }
    for (size_t n : {size_t(0), size_t(1), w.token.size() / 2, w.token.size() - 1})
        EXPECT_WS_ERROR(Resolve(ws.get(), w.token.substr(0, n), &rr), StatusCode::INVALID_ARGUMENT,
                        "BAD_REF");
    EXPECT_WS_ERROR(Resolve(ws.get(), w.token + "x", &rr), StatusCode::INVALID_ARGUMENT, "BAD_REF");
    // A ref signed by another server (another key) does not verify here.
    auto ws2 = other.workspaces();
    auto foreign = wstest::Open(ws2.get(), "local-bash");
    EXPECT_WS_ERROR(Resolve(ws.get(), foreign.token, &rr), StatusCode::INVALID_ARGUMENT, "BAD_REF");
    // Missing ref entirely.
    ClientContext ctx;
    ResolveRequest empty;
    EXPECT_WS_ERROR(ws->Resolve(&ctx, empty, &rr), StatusCode::INVALID_ARGUMENT, "MALFORMED");
}

TEST(Workspaces, CloseIsTerminalAndIdempotent)
{
    Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto w = wstest::Open(ws.get(), "local-bash");
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "f", "x").ok());
    CloseResponse cr;
    ASSERT_TRUE(Close(ws.get(), w.id, &cr).ok());
    EXPECT_FALSE(cr.already_closed());
    ASSERT_TRUE(Close(ws.get(), w.id, &cr).ok());
    EXPECT_TRUE(cr.already_closed());
    // Storage is gone; every id-scoped call is NOT_FOUND; the ref is evicted.
    struct stat st;
    EXPECT_NE(stat(srv.workspace_dir(w.id).c_str(), &st), 0);
    EXPECT_WS_ERROR(StatPath(fs.get(), w.id, "f"), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    DescribeResponse dr;
    EXPECT_WS_ERROR(Describe(ws.get(), w.id, &dr), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    ResolveResponse rr;
    EXPECT_WS_ERROR(Resolve(ws.get(), w.token, &rr), StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    // Unknown and malformed ids.
    EXPECT_WS_ERROR(Close(ws.get(), "ws_00000000000000000000000000000000", &cr),
                    StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    EXPECT_WS_ERROR(StatPath(fs.get(), "../../etc", "passwd"), StatusCode::NOT_FOUND,
                    "NO_SUCH_WORKSPACE");
}

TEST(Workspaces, DescribeAndList)
{
    Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto w = wstest::Open(ws.get(), "local-bash", 4096);
    auto m = wstest::Open(ws.get(), "memory");
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "f", "x").ok());
    DescribeResponse dr;
    ASSERT_TRUE(Describe(ws.get(), w.id, &dr).ok());
    EXPECT_EQ(dr.id(), w.id);
    EXPECT_EQ(dr.provider(), "local-bash");
    EXPECT_EQ(dr.state(), STATE_OPEN);
    EXPECT_EQ(dr.isolation(), "none");
    EXPECT_EQ(dr.limits().max_file_size_bytes(), 4096u);
    EXPECT_GT(dr.opened_at_unix_ms(), 0);
    EXPECT_GE(dr.last_success_at_unix_ms(), dr.opened_at_unix_ms());
    EXPECT_TRUE(dr.capabilities().has_fs());
    EXPECT_FALSE(dr.capabilities().has_shell());
    EXPECT_NE(std::find(dr.operations().begin(), dr.operations().end(), "WriteFile"),
              dr.operations().end());
    ASSERT_TRUE(Describe(ws.get(), m.id, &dr).ok());
    EXPECT_EQ(dr.isolation(), "process");

    ClientContext ctx;
    ListRequest lr;
    ListResponse resp;
    ASSERT_TRUE(ws->List(&ctx, lr, &resp).ok());
    std::set<std::string> ids;
    for (const auto &s : resp.workspaces())
        ids.insert(s.id());
    EXPECT_EQ(ids, (std::set<std::string>{w.id, m.id}));
}

TEST(Workspaces, RestartResumesWithFilesIntact)
{
    std::string state = wstest::MakeTempDir("restart");
    std::string token, id, mem_token;
    {
        Server srv({}, state);
        auto ws = srv.workspaces();
        auto fs = srv.fs();
        auto w = wstest::Open(ws.get(), "local-bash");
        auto m = wstest::Open(ws.get(), "memory");
        ASSERT_TRUE(wstest::Write(fs.get(), w.id, "dir/notes.md", "survives", nullptr, true).ok());
        token = w.token;
        id = w.id;
        mem_token = m.token;
        EXPECT_EQ(srv.Stop(), 0);
    }
    Server srv({}, state);
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    ResolveResponse rr;
    ASSERT_TRUE(Resolve(ws.get(), token, &rr).ok());
    EXPECT_EQ(rr.workspace().id(), id);
    std::string got;
    ASSERT_TRUE(wstest::Read(fs.get(), id, "dir/notes.md", &got).ok());
    EXPECT_EQ(got, "survives");
    // A memory workspace dies with the process.
    EXPECT_WS_ERROR(Resolve(ws.get(), mem_token, &rr), StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    // The key file is private.
    struct stat st;
    ASSERT_EQ(stat((state + "/ref.key").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(Workspaces, VanishedDirectoryIsEvicted)
{
    Server srv;
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto w = wstest::Open(ws.get(), "local-bash");
    ASSERT_TRUE(wstest::Write(fs.get(), w.id, "f", "x").ok());
    // Something outside the server (a tmp cleaner) removes the directory.
    std::string dir = srv.workspace_dir(w.id);
    ASSERT_EQ(system(("rm -rf '" + dir + "'").c_str()), 0);
    EXPECT_WS_ERROR(StatPath(fs.get(), w.id, "f"), StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    ResolveResponse rr;
    EXPECT_WS_ERROR(Resolve(ws.get(), w.token, &rr), StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    DescribeResponse dr;
    ASSERT_TRUE(Describe(ws.get(), w.id, &dr).ok());
    EXPECT_EQ(dr.state(), STATE_EVICTED);
    EXPECT_NE(dr.last_error().find("WORKSPACE_EVICTED"), std::string::npos);
}

TEST(Workspaces, VanishedDirectoryWhileDownIsEvictedAfterRestart)
{
    std::string state = wstest::MakeTempDir("evict");
    std::string token, id;
    {
        Server srv({}, state);
        auto ws = srv.workspaces();
        auto w = wstest::Open(ws.get(), "local-bash");
        token = w.token;
        id = w.id;
        EXPECT_EQ(srv.Stop(), 0) << wstest::ReadHostFile(srv.stderr_path());
        ASSERT_EQ(system(("rm -rf '" + srv.workspace_dir(id) + "'").c_str()), 0);
    }
    Server srv({}, state);
    auto ws = srv.workspaces();
    ResolveResponse rr;
    EXPECT_WS_ERROR(Resolve(ws.get(), token, &rr), StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
}

} // namespace

namespace
{

// Extra sandbox binds are checked at Open: canonical and existing, under a
// bind root of the operator's policy, and never overlapping the server's
// own state (the ref key, other workspaces) nor "/".
TEST(Workspaces, SandboxBindPathsAreChecked)
{
    Server srv({"--policy-providers", "memory,local-bash,local-sandbox,docker",
                "--policy-bind-roots", "/usr"});
    auto ws = srv.workspaces();
    std::string link = wstest::MakeTempDir("bind") + "/link";
    ASSERT_EQ(symlink("/usr", link.c_str()), 0);
    char *canon_state = realpath(srv.state_dir().c_str(), nullptr);
    std::string state = canon_state;
    free(canon_state);
    // A malformed path is the request's fault (MALFORMED, field); a
    // well-formed one the operator's policy does not allow is POLICY.
    enum Want { OK, MALFORMED, POLICY };
    struct Case {
        std::string path;
        Want want;
    } cases[] = {
        {"/usr", OK},
        {"/", POLICY},
        {"usr", MALFORMED},
        {"/usr/../etc", MALFORMED},
        {"/nonexistent/dir", MALFORMED},
        {link, MALFORMED},
        {state, POLICY},
        {state + "/workspaces", POLICY},
        {state.substr(0, state.rfind('/')), POLICY},
    };
    for (const auto &c : cases) {
        for (bool rw : {false, true}) {
            OpenRequest req;
            if (rw)
                req.mutable_local_sandbox()->add_read_write_paths(c.path);
            else
                req.mutable_local_sandbox()->add_read_only_paths(c.path);
            OpenResponse resp;
            ClientContext ctx;
            auto s = ws->Open(&ctx, req, &resp);
            if (c.want == OK) {
                EXPECT_TRUE(s.ok()) << c.path << ": " << s.error_message();
            } else if (c.want == MALFORMED) {
                EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED") << c.path;
                EXPECT_EQ(wstest::Decode(s).metadata["field"],
                          rw ? "read_write_paths" : "read_only_paths");
            } else {
                EXPECT_WS_ERROR(s, StatusCode::PERMISSION_DENIED, "POLICY") << c.path;
                EXPECT_EQ(wstest::Decode(s).metadata["rule"], "bind-roots") << c.path;
                // Metadata values are cut at 127 bytes (a deep test
                // directory's state path can be longer).
                EXPECT_EQ(wstest::Decode(s).metadata["path"], c.path.substr(0, 127));
            }
        }
    }
}

} // namespace

namespace
{

// The docker provider's storage is the same confined host directory (the
// container over it comes with the exec layer): with the daemon up, Open
// succeeds, files work, and the ref keeps the config but no container id.
TEST(Workspaces, DockerWorkspaceHasConfinedStorage)
{
    Server srv;
    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_docker()->set_image("workspaced-test:busybox");
    req.mutable_docker()->set_pull_policy(PULL_NEVER);
    req.mutable_capabilities()->mutable_fs();
    OpenResponse resp;
    ClientContext ctx;
    auto s = ws->Open(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    const auto &w = resp.workspace();
    EXPECT_EQ(w.provider(), "docker");
    auto fs = srv.fs();
    ASSERT_TRUE(wstest::Write(fs.get(), w.id(), "in/container.txt", "hi", nullptr, true).ok());
    EXPECT_EQ(wstest::ReadHostFile(srv.workspace_dir(w.id()) + "/in/container.txt"), "hi");
    EXPECT_WS_ERROR(wstest::Write(fs.get(), w.id(), "../escape", "x"), StatusCode::INVALID_ARGUMENT,
                    "PATH_ESCAPE");
    DescribeResponse dr;
    ASSERT_TRUE(Describe(ws.get(), w.id(), &dr).ok());
    EXPECT_EQ(dr.isolation(), "container");
    EXPECT_EQ(dr.network(), NETWORK_OFF);
    // Closed, so that its container goes too: a server stopped with the
    // workspace open keeps the container for the workspace's resumption,
    // and this server's state directory is not started again.
    CloseResponse cr;
    EXPECT_TRUE(Close(ws.get(), w.id(), &cr).ok());
}

} // namespace
