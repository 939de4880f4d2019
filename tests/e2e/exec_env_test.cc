// A workspace's environment and secrets in its commands, end to end: every
// command gets the env given at Open, under its own env; a secret reaches
// only a command that names it (and wins over a same-named entry of the
// command's env); an unknown secret name is refused before anything runs;
// a workspace whose secrets the server lost in a restart runs nothing
// until SetSecrets gives them again. And no secret value is ever in the
// server's log, its state directory (audit log included), Describe or an
// error message.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;
using wstest::ArgvProcess;
using wstest::Server;

namespace
{

const char kSecret[] = "s3cr3t-7f2c9a41d0e84b65";
const char kOtherSecret[] = "other-5b1e77c0aa93";
const std::vector<std::string> kAllowed = {"env", "sh", "true", "cat"};

std::chrono::system_clock::time_point Deadline(int s = 60)
{
    return std::chrono::system_clock::now() + std::chrono::seconds(s);
}

grpc::Status OpenWith(Workspaces::Stub *stub, const std::string &provider,
                      const std::map<std::string, std::string> &env,
                      const std::map<std::string, std::string> &secrets, std::string *ret_id)
{
    OpenRequest req;
    if (provider == "local-bash")
        req.mutable_local_bash();
    else
        req.mutable_local_sandbox()->set_exec_mode(wstest::TestExecMode());
    req.mutable_capabilities()->mutable_fs();
    ShellCapability *shell = req.mutable_capabilities()->mutable_shell();
    for (const auto &c : kAllowed)
        shell->add_allowed_commands(c);
    for (const auto &[k, v] : env)
        (*req.mutable_env())[k] = v;
    for (const auto &[k, v] : secrets)
        (*req.mutable_secrets())[k] = v;
    OpenResponse resp;
    ClientContext ctx;
    ctx.set_deadline(Deadline(120));
    grpc::Status s = stub->Open(&ctx, req, &resp);
    if (s.ok())
        *ret_id = resp.workspace().id();
    return s;
}

// `env`'s output as a map (one NAME=VALUE per line).
std::map<std::string, std::string> EnvOf(const std::string &out)
{
    std::map<std::string, std::string> m;
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
        size_t eq = line.find('=');
        if (eq != std::string::npos)
            m[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return m;
}

// Runs `env` with `own` env and `secrets` named; fails the test unless it
// ran.
std::map<std::string, std::string> RunEnv(Exec::Stub *ex, const std::string &ws,
                                          const std::map<std::string, std::string> &own = {},
                                          const std::vector<std::string> &secrets = {})
{
    ProcessConfig pc = ArgvProcess({"env"});
    for (const auto &[k, v] : own)
        (*pc.mutable_env())[k] = v;
    for (const auto &n : secrets)
        pc.add_secrets(n);
    RunResponse resp;
    grpc::Status s = wstest::RunProcess(ex, ws, pc, &resp);
    EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
    EXPECT_EQ(resp.exited().exit_code(), 0) << resp.stderr();
    return EnvOf(resp.stdout());
}

grpc::Status RunNaming(Exec::Stub *ex, const std::string &ws,
                       const std::vector<std::string> &secrets)
{
    ProcessConfig pc = ArgvProcess({"true"});
    for (const auto &n : secrets)
        pc.add_secrets(n);
    RunResponse resp;
    return wstest::RunProcess(ex, ws, pc, &resp);
}

size_t ProcessCount(Exec::Stub *ex, const std::string &ws)
{
    ListProcessesRequest req;
    req.set_workspace_id(ws);
    ListProcessesResponse resp;
    ClientContext ctx;
    ctx.set_deadline(Deadline());
    grpc::Status s = ex->ListProcesses(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.processes_size();
}

// Files under `dir` whose bytes contain `needle`.
std::vector<std::string> FilesHolding(const std::string &dir, const std::string &needle)
{
    std::vector<std::string> hits;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(
             dir, std::filesystem::directory_options::skip_permission_denied, ec);
         it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        if (ec)
            break;
        if (!it->is_regular_file(ec) || it->is_symlink(ec))
            continue;
        std::ifstream f(it->path(), std::ios::binary);
        std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        if (data.find(needle) != std::string::npos)
            hits.push_back(it->path().string());
    }
    return hits;
}

class ExecEnvTest : public ::testing::TestWithParam<std::string>
{
  protected:
    void SetUp() override
    {
        srv_ = std::make_unique<Server>();
        ws_ = srv_->workspaces();
        ex_ = srv_->exec();
    }

    std::unique_ptr<Server> srv_;
    std::unique_ptr<Workspaces::Stub> ws_;
    std::unique_ptr<Exec::Stub> ex_;
};

// Names a command on the host may be given (local-bash keeps to an
// allowlist); the sandbox takes any name off the denylist.
std::string Name(const std::string &provider, const std::string &sandbox_name,
                 const std::string &host_name)
{
    return provider == "local-bash" ? host_name : sandbox_name;
}

TEST_P(ExecEnvTest, WorkspaceEnvReachesEveryCommandUnderItsOwn)
{
    const std::string p = GetParam();
    const std::string foo = Name(p, "FOO", "TZ"), shared = Name(p, "SHARED", "LC_PAPER");
    std::string id;
    grpc::Status s = OpenWith(ws_.get(), p, {{foo, "bar"}, {shared, "ws"}}, {}, &id);
    ASSERT_TRUE(s.ok()) << s.error_message();

    auto env = RunEnv(ex_.get(), id);
    EXPECT_EQ(env[foo], "bar");
    EXPECT_EQ(env[shared], "ws");
    // The command's own value wins; the rest of the workspace's stays.
    env = RunEnv(ex_.get(), id, {{shared, "cmd"}});
    EXPECT_EQ(env[shared], "cmd");
    EXPECT_EQ(env[foo], "bar");
    // Start too, not only Run.
    ClientContext ctx;
    ctx.set_deadline(Deadline(120));
    auto rw = wstest::StartStream(ex_.get(), &ctx, id, ArgvProcess({"env"}));
    wstest::EventLog log;
    wstest::ReadEvents(rw.get(), &log);
    ASSERT_TRUE(rw->Finish().ok());
    EXPECT_EQ(EnvOf(log.out.data)[foo], "bar");
}

// Close to the workspace's 32 KiB of values, and a command with close to
// its own 64 KiB: the guard's limits hold each part, not the sum. In the
// sandbox (the host's allowlist has too few names to fill either).
TEST(ExecEnvLimits, WorkspaceEnvAndACommandsFullEnvFitTogether)
{
    Server srv;
    auto ws = srv.workspaces();
    auto ex = srv.exec();
    std::map<std::string, std::string> wenv;
    for (int i = 0; i < 30; i++)
        wenv["WS_VAR_" + std::to_string(i)] = std::string(1000, 'w');
    std::string id;
    grpc::Status s = OpenWith(ws.get(), "local-sandbox", wenv, {}, &id);
    ASSERT_TRUE(s.ok()) << s.error_message();
    std::map<std::string, std::string> own;
    for (int i = 0; i < 60; i++)
        own["CMD_VAR_" + std::to_string(i)] = std::string(1000, 'c');
    auto env = RunEnv(ex.get(), id, own);
    EXPECT_EQ(env["WS_VAR_29"], std::string(1000, 'w'));
    EXPECT_EQ(env["CMD_VAR_59"], std::string(1000, 'c'));
    // The command's own limit is unchanged: "BIG=" + value + NUL one byte
    // past 64 KiB is refused.
    ProcessConfig pc = ArgvProcess({"true"});
    (*pc.mutable_env())["BIG"] = std::string(64 * 1024 - 4, 'x');
    RunResponse resp;
    EXPECT_WS_ERROR(wstest::RunProcess(ex.get(), id, pc, &resp), StatusCode::PERMISSION_DENIED,
                    "ARG_LIMIT");
}

TEST_P(ExecEnvTest, SecretsReachOnlyCommandsThatNameThem)
{
    const std::string p = GetParam();
    const std::string tok = Name(p, "API_TOKEN", "LC_TELEPHONE");
    const std::string other = Name(p, "OTHER_SECRET", "LC_MEASUREMENT");
    std::string id;
    grpc::Status s =
        OpenWith(ws_.get(), p, {{"LANG", "C.UTF-8"}}, {{tok, kSecret}, {other, kOtherSecret}}, &id);
    ASSERT_TRUE(s.ok()) << s.error_message();

    auto env = RunEnv(ex_.get(), id);
    EXPECT_EQ(env.count(tok), 0u) << "a secret reached a command that did not name it";
    EXPECT_EQ(env.count(other), 0u);
    env = RunEnv(ex_.get(), id, {}, {tok});
    EXPECT_EQ(env[tok], kSecret);
    EXPECT_EQ(env.count(other), 0u) << "a secret reached a command that named another";
    // Named twice is once; named with a same-named entry of the command's
    // own env: the secret wins.
    env = RunEnv(ex_.get(), id, {{tok, "from-the-command"}}, {tok, tok, other});
    EXPECT_EQ(env[tok], kSecret);
    EXPECT_EQ(env[other], kOtherSecret);

    // An unknown name: refused, nothing started.
    size_t before = ProcessCount(ex_.get(), id);
    s = RunNaming(ex_.get(), id, {tok, "NO_SUCH_SECRET"});
    EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED");
    wstest::Error e = wstest::Decode(s);
    EXPECT_EQ(e.metadata["field"], "secrets");
    EXPECT_EQ(e.metadata["name"], "NO_SUCH_SECRET");
    EXPECT_EQ(e.message.find(kSecret), std::string::npos);
    EXPECT_EQ(ProcessCount(ex_.get(), id), before) << "a refused command was started";

    // No value anywhere the server writes, nor in Describe.
    DescribeRequest dreq;
    dreq.set_workspace_id(id);
    DescribeResponse dresp;
    ClientContext ctx;
    ctx.set_deadline(Deadline());
    ASSERT_TRUE(ws_->Describe(&ctx, dreq, &dresp).ok());
    EXPECT_EQ(dresp.DebugString().find(kSecret), std::string::npos);
    EXPECT_EQ(FilesHolding(srv_->state_dir(), kSecret), std::vector<std::string>());
    EXPECT_EQ(wstest::ReadHostFile(srv_->stderr_path()).find(kSecret), std::string::npos)
        << "the server's log holds a secret";
}

TEST_P(ExecEnvTest, LostSecretsRefuseEveryCommandUntilGivenAgain)
{
    const std::string p = GetParam();
    const std::string tok = Name(p, "API_TOKEN", "LC_TELEPHONE");
    std::string id, state;
    {
        Server first;
        state = first.state_dir();
        auto ws = first.workspaces();
        grpc::Status s = OpenWith(ws.get(), p, {}, {{tok, kSecret}}, &id);
        ASSERT_TRUE(s.ok()) << s.error_message();
    }
    Server second({}, state);
    auto ws = second.workspaces();
    auto ex = second.exec();
    // Every command, also one that names no secret.
    for (const auto &names : {std::vector<std::string>{}, std::vector<std::string>{tok}}) {
        grpc::Status s = RunNaming(ex.get(), id, names);
        EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "SECRETS_MISSING");
        EXPECT_EQ(wstest::Decode(s).metadata["names"], tok) << s.error_message();
    }
    EXPECT_EQ(ProcessCount(ex.get(), id), 0u) << "a refused command was started";

    SetSecretsRequest req;
    req.set_workspace_id(id);
    (*req.mutable_secrets())[tok] = kSecret;
    SetSecretsResponse resp;
    ClientContext ctx;
    ctx.set_deadline(Deadline());
    grpc::Status s = ws->SetSecrets(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_FALSE(resp.secrets_missing());
    EXPECT_TRUE(RunNaming(ex.get(), id, {}).ok());
    auto env = RunEnv(ex.get(), id, {}, {tok});
    EXPECT_EQ(env[tok], kSecret);
    EXPECT_EQ(FilesHolding(state, kSecret), std::vector<std::string>());
}

INSTANTIATE_TEST_SUITE_P(Providers, ExecEnvTest, ::testing::Values("local-bash", "local-sandbox"),
                         [](const ::testing::TestParamInfo<std::string> &i) {
                             return i.param == "local-bash" ? "LocalBash" : "LocalSandbox";
                         });

} // namespace
