// Exec end to end, functional: Run, Start, Attach, ListProcesses and
// SendSignal against the real server binary over a local-bash workspace,
// through the generated C++ client. Abort semantics and survivors are in
// exec_abort_test.cc, the shell guard in exec_guard_test.cc, volume and
// leaks in exec_load_test.cc.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;
using wstest::ArgvProcess;
using wstest::CommandProcess;
using wstest::EventLog;
using wstest::Server;

namespace
{

const std::vector<std::string> kAllowed = {
    "sh",  "cat", "head", "echo", "printf", "sleep",     "true", "false", "yes",   "seq",     "env",
    "pwd", "ls",  "dd",   "kill", "wc",     "sha256sum", "tty",  "stty",  "touch", "python3",
};

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t)
{
    return std::chrono::duration<double>(Clock::now() - t).count();
}

// `seq a b` as coreutils prints it.
std::string SeqOutput(int a, int b)
{
    std::string s;
    for (int i = a; i <= b; i++)
        s += std::to_string(i) + "\n";
    return s;
}

std::string RealPath(const std::string &p)
{
    char *r = realpath(p.c_str(), nullptr);
    std::string s = r ? r : p;
    free(r);
    return s;
}

// Whether a JSON object on one line has "key": value, with `value` as it
// is spelled in JSON ("\"command\"", "7"); blanks around ':' allowed.
bool JsonHas(const std::string &line, const std::string &key, const std::string &value)
{
    const std::string quoted = "\"" + key + "\"";
    for (size_t at = line.find(quoted); at != std::string::npos; at = line.find(quoted, at + 1)) {
        size_t i = line.find_first_not_of(" \t", at + quoted.size());
        if (i == std::string::npos || line[i] != ':')
            continue;
        i = line.find_first_not_of(" \t", i + 1);
        if (i == std::string::npos || line.compare(i, value.size(), value) != 0)
            continue;
        size_t end = i + value.size();
        if (end == line.size() || line[end] == ',' || line[end] == '}' || line[end] == ' ')
            return true;
    }
    return false;
}

class ExecTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        srv_ = std::make_unique<Server>();
        wsstub_ = srv_->workspaces();
        exec_ = srv_->exec();
        fs_ = srv_->fs();
        ws_ = wstest::OpenShell(wsstub_.get(), kAllowed);
    }

    grpc::Status Run(const ProcessConfig &p, RunResponse *resp, const std::string &stdin_data = "")
    {
        return wstest::RunProcess(exec_.get(), ws_.id, p, resp, stdin_data);
    }

    // Runs `p` and expects success; returns the response.
    RunResponse RunOk(const ProcessConfig &p, const std::string &stdin_data = "")
    {
        RunResponse r;
        grpc::Status s = Run(p, &r, stdin_data);
        EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
        return r;
    }

    // A whole Start stream: the start message, optional client messages
    // written as soon as `started` arrives, then every event to the end.
    grpc::Status StartAll(const ProcessConfig &p, EventLog *log,
                          const std::vector<StartRequest> &after_started = {}, int deadline_s = 120)
    {
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(deadline_s));
        auto rw = wstest::StartStream(exec_.get(), &ctx, ws_.id, p);
        if (!after_started.empty()) {
            if (wstest::ReadEvents(rw.get(), log, [](const EventLog &l) { return l.started; }))
                for (const auto &m : after_started)
                    rw->Write(m);
        }
        wstest::ReadEvents(rw.get(), log);
        return rw->Finish();
    }

    grpc::Status ListProcs(ListProcessesResponse *resp, const std::string &ws_id = "")
    {
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        ListProcessesRequest req;
        req.set_workspace_id(ws_id.empty() ? ws_.id : ws_id);
        return exec_->ListProcesses(&ctx, req, resp);
    }

    // The listed process with this id (or tag), or nullptr.
    const ProcessInfo *Find(const ListProcessesResponse &resp, const std::string &id,
                            const std::string &tag = "")
    {
        for (const auto &p : resp.processes())
            if ((!id.empty() && p.id() == id) || (!tag.empty() && p.tag() == tag))
                return &p;
        return nullptr;
    }

    // Polls ListProcesses until the process is no longer running.
    ProcessInfo WaitFinished(const std::string &id, int timeout_s = 30)
    {
        auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
        ProcessInfo last;
        do {
            ListProcessesResponse resp;
            grpc::Status s = ListProcs(&resp);
            EXPECT_TRUE(s.ok()) << s.error_message();
            const ProcessInfo *p = Find(resp, id);
            if (p) {
                last = *p;
                if (!p->running())
                    return last;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        } while (Clock::now() < deadline);
        ADD_FAILURE() << "process " << id << " still running after " << timeout_s << " s";
        return last;
    }

    grpc::Status Signal(const std::string &id, const std::string &tag, int sig,
                        const std::string &ws_id = "")
    {
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        SendSignalRequest req;
        SendSignalResponse resp;
        req.set_workspace_id(ws_id.empty() ? ws_.id : ws_id);
        req.set_id(id);
        req.set_tag(tag);
        req.set_signal(sig);
        return exec_->SendSignal(&ctx, req, &resp);
    }

    // A whole Attach stream.
    grpc::Status AttachAll(const std::string &id, const std::string &tag, uint64_t offset,
                           EventLog *log,
                           const std::function<bool(const EventLog &)> &until = nullptr,
                           const std::function<void()> &then = nullptr)
    {
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
        AttachRequest req;
        req.set_workspace_id(ws_.id);
        req.set_id(id);
        req.set_tag(tag);
        req.set_offset(offset);
        auto r = exec_->Attach(&ctx, req);
        if (until && wstest::ReadEvents(r.get(), log, until) && then)
            then();
        wstest::ReadEvents(r.get(), log);
        return r->Finish();
    }

    static StartRequest StdinMsg(const std::string &data)
    {
        StartRequest m;
        m.set_stdin(data);
        return m;
    }
    static StartRequest CloseStdinMsg()
    {
        StartRequest m;
        m.set_close_stdin(true);
        return m;
    }
    static StartRequest SignalMsg(int sig)
    {
        StartRequest m;
        m.set_signal(sig);
        return m;
    }

    std::unique_ptr<Server> srv_;
    std::unique_ptr<Workspaces::Stub> wsstub_;
    std::unique_ptr<Exec::Stub> exec_;
    std::unique_ptr<FileSystem::Stub> fs_;
    wstest::Ws ws_;
};

// ---- Run ----

TEST_F(ExecTest, RunReturnsOutputAndExactAccounting)
{
    RunResponse r = RunOk(ArgvProcess({"echo", "hello"}));
    EXPECT_EQ(r.stdout(), "hello\n");
    EXPECT_EQ(r.stderr(), "");
    EXPECT_FALSE(r.process_id().empty());
    const Exited &e = r.exited();
    EXPECT_EQ(e.cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(e.exit_code(), 0);
    EXPECT_EQ(e.signal(), 0);
    EXPECT_EQ(e.stdout().bytes_total(), 6u);
    EXPECT_EQ(e.stdout().bytes_delivered(), 6u);
    EXPECT_FALSE(e.stdout().truncated());
    EXPECT_EQ(e.stdout().head_bytes() + e.stdout().tail_bytes(), 6u);
    EXPECT_EQ(e.stderr().bytes_total(), 0u);
    EXPECT_FALSE(e.stderr().truncated());
}

TEST_F(ExecTest, RunCommandStringIsTokenizedByTheGuard)
{
    // Quotes and escapes are the guard's tokenizer, not a shell's: the
    // single-quoted '|' and '\n' reach printf literally.
    RunResponse r = RunOk(CommandProcess("printf '%s|%s\\n' \"a b\" c\\ d"));
    EXPECT_EQ(r.stdout(), "a b|c d\n");
    EXPECT_EQ(r.exited().exit_code(), 0);
    // argv is passed verbatim: nothing is expanded.
    r = RunOk(ArgvProcess({"echo", "$HOME", "*", "~", "a;b"}));
    EXPECT_EQ(r.stdout(), "$HOME * ~ a;b\n");
}

TEST_F(ExecTest, RunExitCodes)
{
    struct {
        std::vector<std::string> argv;
        int code;
    } cases[] = {
        {{"true"}, 0},
        {{"false"}, 1},
        {{"sh", "-c", "exit 3"}, 3},
        {{"sh", "-c", "exit 255"}, 255},
    };
    for (const auto &c : cases) {
        RunResponse r = RunOk(ArgvProcess(c.argv));
        EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED) << c.argv.back();
        EXPECT_EQ(r.exited().exit_code(), c.code) << c.argv.back();
        EXPECT_EQ(r.exited().signal(), 0) << c.argv.back();
    }
}

TEST_F(ExecTest, RunReportsTheSignalThatEndedTheCommand)
{
    for (int sig : {9, 15, 11}) {
        RunResponse r = RunOk(ArgvProcess({"sh", "-c", "kill -" + std::to_string(sig) + " $$"}));
        EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_SIGNALED) << sig;
        EXPECT_EQ(r.exited().signal(), sig);
    }
}

TEST_F(ExecTest, RunKeepsStdoutAndStderrApart)
{
    RunResponse r = RunOk(
        ArgvProcess({"sh", "-c", "echo out1; echo err1 >&2; echo out2; echo err2 >&2; exit 4"}));
    EXPECT_EQ(r.stdout(), "out1\nout2\n");
    EXPECT_EQ(r.stderr(), "err1\nerr2\n");
    EXPECT_EQ(r.exited().exit_code(), 4);
    EXPECT_EQ(r.exited().stdout().bytes_total(), 10u);
    EXPECT_EQ(r.exited().stderr().bytes_total(), 10u);
}

TEST_F(ExecTest, RunFeedsStdinDataThenClosesIt)
{
    std::string data;
    for (int i = 0; i < 300 * 1024; i++)
        data.push_back(static_cast<char>((i * 131) ^ (i >> 8)));
    RunResponse r = RunOk(ArgvProcess({"cat"}), data);
    EXPECT_EQ(r.stdout().size(), data.size());
    EXPECT_TRUE(r.stdout() == data) << "cat did not echo stdin byte for byte";
    EXPECT_EQ(r.exited().exit_code(), 0);

    // 1 MiB is the cap, reached exactly.
    r = RunOk(ArgvProcess({"wc", "-c"}), std::string(1 << 20, 'x'));
    EXPECT_EQ(r.stdout(), "1048576\n");
    RunResponse over;
    grpc::Status s = Run(ArgvProcess({"wc", "-c"}), &over, std::string((1 << 20) + 1, 'x'));
    EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT)
        << wstest::Decode(s).reason << " " << s.error_message();
}

TEST_F(ExecTest, RunWithoutStdinReadsEofAtOnce)
{
    auto t0 = Clock::now();
    RunResponse r = RunOk(ArgvProcess({"cat"}));
    EXPECT_EQ(r.stdout(), "");
    EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(r.exited().exit_code(), 0);
    r = RunOk(ArgvProcess({"sh", "-c", "read x; echo rc=$?"}));
    EXPECT_EQ(r.stdout(), "rc=1\n");
    EXPECT_LT(SecondsSince(t0), 30) << "a command reading stdin hung";
}

TEST_F(ExecTest, RunTimeoutKeepsOutputProducedBeforeIt)
{
    ProcessConfig p = ArgvProcess({"sh", "-c", "echo before; echo err-before >&2; sleep 100"});
    p.set_timeout_ms(500);
    auto t0 = Clock::now();
    RunResponse r = RunOk(p);
    EXPECT_LT(SecondsSince(t0), 30);
    EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_TIMEOUT);
    EXPECT_EQ(r.stdout(), "before\n");
    EXPECT_EQ(r.stderr(), "err-before\n");
    EXPECT_EQ(r.exited().stdout().bytes_total(), 7u);
}

TEST_F(ExecTest, WorkspaceMaxDurationCapsEveryTimeout)
{
    wstest::Ws capped = wstest::OpenShell(wsstub_.get(), {"sleep"}, {}, 1000);
    for (uint64_t timeout : {0ull, 3600ull * 1000}) {
        ProcessConfig p = ArgvProcess({"sleep", "100"});
        p.set_timeout_ms(timeout);
        RunResponse r;
        auto t0 = Clock::now();
        grpc::Status s = wstest::RunProcess(exec_.get(), capped.id, p, &r);
        ASSERT_TRUE(s.ok()) << s.error_message();
        EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_TIMEOUT) << "timeout_ms " << timeout;
        EXPECT_LT(SecondsSince(t0), 30);
    }
}

TEST_F(ExecTest, RunKeepsHeadAndTailWithExactCounts)
{
    std::string full = SeqOutput(1, 200000);
    ProcessConfig p = ArgvProcess({"seq", "1", "200000"});
    p.set_max_output_bytes(1000);
    RunResponse r = RunOk(p);
    const StreamStats &st = r.exited().stdout();
    EXPECT_EQ(st.bytes_total(), full.size());
    EXPECT_TRUE(st.truncated());
    EXPECT_EQ(st.head_bytes(), 500u);
    EXPECT_EQ(st.tail_bytes(), 500u);
    EXPECT_EQ(st.bytes_delivered(), r.stdout().size());
    ASSERT_EQ(r.stdout().size(), st.head_bytes() + st.tail_bytes());
    EXPECT_EQ(r.stdout(),
              full.substr(0, st.head_bytes()) + full.substr(full.size() - st.tail_bytes()));
    EXPECT_EQ(r.exited().exit_code(), 0);

    // The same on stderr, independently of stdout.
    p = ArgvProcess({"sh", "-c", "seq 1 200000 >&2; echo small"});
    p.set_max_output_bytes(1000);
    r = RunOk(p);
    EXPECT_EQ(r.stdout(), "small\n");
    EXPECT_FALSE(r.exited().stdout().truncated());
    const StreamStats &se = r.exited().stderr();
    EXPECT_EQ(se.bytes_total(), full.size());
    EXPECT_TRUE(se.truncated());
    ASSERT_EQ(r.stderr().size(), se.head_bytes() + se.tail_bytes());
    EXPECT_EQ(r.stderr(),
              full.substr(0, se.head_bytes()) + full.substr(full.size() - se.tail_bytes()));
}

TEST_F(ExecTest, RunOutputCapDefaultAndCeiling)
{
    std::string full = SeqOutput(1, 600000); // ~4.5 MB
    RunResponse r = RunOk(ArgvProcess({"seq", "1", "600000"}));
    EXPECT_EQ(r.stdout().size(), 1u << 20) << "default max_output_bytes is 1 MiB";
    EXPECT_EQ(r.exited().stdout().bytes_total(), full.size());
    EXPECT_TRUE(r.exited().stdout().truncated());
    ASSERT_EQ(r.stdout().size(),
              r.exited().stdout().head_bytes() + r.exited().stdout().tail_bytes());
    EXPECT_TRUE(r.stdout() == full.substr(0, r.exited().stdout().head_bytes()) +
                                  full.substr(full.size() - r.exited().stdout().tail_bytes()));

    ProcessConfig p = ArgvProcess({"seq", "1", "600000"});
    p.set_max_output_bytes(2u << 20);
    r = RunOk(p);
    EXPECT_EQ(r.stdout().size(), 2u << 20);
    EXPECT_EQ(r.exited().stdout().bytes_total(), full.size());

    p.set_max_output_bytes((2u << 20) + 1);
    grpc::Status s = Run(p, &r);
    EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "LIMIT");
}

TEST_F(ExecTest, RunRefusesBackground)
{
    ProcessConfig p = ArgvProcess({"true"});
    p.set_background(true);
    RunResponse r;
    EXPECT_WS_ERROR(Run(p, &r), StatusCode::INVALID_ARGUMENT, "MALFORMED");
}

TEST_F(ExecTest, RunInCwdInsideTheWorkspace)
{
    {
        ClientContext ctx;
        MakeDirRequest req;
        MakeDirResponse resp;
        req.set_workspace_id(ws_.id);
        req.set_path("sub/dir");
        req.set_parents(true);
        ASSERT_TRUE(fs_->MakeDir(&ctx, req, &resp).ok());
    }
    ProcessConfig p = ArgvProcess({"touch", "made-here"});
    p.set_cwd("sub/dir");
    RunResponse r = RunOk(p);
    EXPECT_EQ(r.exited().exit_code(), 0);
    ClientContext ctx;
    StatRequest sreq;
    StatResponse sresp;
    sreq.set_workspace_id(ws_.id);
    sreq.set_path("sub/dir/made-here");
    EXPECT_TRUE(fs_->Stat(&ctx, sreq, &sresp).ok()) << "touch did not run in the cwd";

    p = ArgvProcess({"pwd", "-P"});
    p.set_cwd("sub/dir");
    r = RunOk(p);
    EXPECT_EQ(r.stdout(), RealPath(srv_->workspace_dir(ws_.id)) + "/sub/dir\n");
    // Empty cwd is the root.
    r = RunOk(ArgvProcess({"pwd", "-P"}));
    EXPECT_EQ(r.stdout(), RealPath(srv_->workspace_dir(ws_.id)) + "\n");

    p.set_cwd("missing");
    EXPECT_WS_ERROR(Run(p, &r), StatusCode::NOT_FOUND, "NO_SUCH_FILE");
}

// The child's environment is exactly the base (HOME and the XDG dirs the
// command's own, git locked down), the operator's pass_env (minus the
// denylist) and the client's allowlisted variables; the audit log records
// the command but never an environment value.
TEST(ExecEnv, EnvironmentIsExactlyBasePassEnvAndClient)
{
    Server srv({"--policy-pass-env", "WS_E2E_PASSED,WS_E2E_UNSET,GCONV_PATH"}, "",
               {"WS_E2E_PASSED=from-host", "WS_E2E_NOT_PASSED=hidden",
                "GCONV_PATH=/nonexistent-gconv", "XDG_CONFIG_HOME=/server/config",
                "TAR_OPTIONS=--server-own"});
    auto wsstub = srv.workspaces();
    auto exec = srv.exec();
    // GCONV_PATH is on the denylist: naming it in pass_env does not let it
    // through. WS_E2E_UNSET is passed but not set on the host.
    wstest::Ws ws = wstest::OpenShell(wsstub.get(), {"env", "sh"},
                                      {"WS_E2E_PASSED", "WS_E2E_UNSET", "GCONV_PATH"});
    ProcessConfig p = ArgvProcess({"env"});
    (*p.mutable_env())["TZ"] = "UTC";
    (*p.mutable_env())["CI"] = "hunter2-marker";
    RunResponse r;
    grpc::Status s = wstest::RunProcess(exec.get(), ws.id, p, &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(r.exited().exit_code(), 0);

    std::multiset<std::string> got;
    std::istringstream lines(r.stdout());
    std::string line, home, run;
    while (std::getline(lines, line)) {
        if (line.compare(0, 5, "HOME=") == 0)
            home = line.substr(5);
        if (line.compare(0, 16, "XDG_RUNTIME_DIR=") == 0)
            run = line.substr(16);
        got.insert(line);
    }
    ASSERT_FALSE(home.empty()) << r.stdout();
    ASSERT_FALSE(run.empty()) << r.stdout();
    // HOME is a directory of the command's own, outside the workspace and
    // the state directory (where the workspaces are).
    EXPECT_EQ(home[0], '/');
    EXPECT_NE(RealPath(home), RealPath(srv.workspace_dir(ws.id)));
    EXPECT_NE(home.rfind(srv.state_dir() + "/workspaces", 0), 0u) << home;
    EXPECT_NE(run, home);
    std::multiset<std::string> want = {
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "HOME=" + home,
        "LANG=C.UTF-8",
        "XDG_CONFIG_HOME=" + home + "/.config",
        "XDG_CACHE_HOME=" + home + "/.cache",
        "XDG_DATA_HOME=" + home + "/.local/share",
        "XDG_STATE_HOME=" + home + "/.local/state",
        "XDG_RUNTIME_DIR=" + run,
        "GIT_CONFIG_NOSYSTEM=1",
        "GIT_CONFIG_GLOBAL=/dev/null",
        "GIT_PAGER=cat",
        "GIT_EDITOR=:",
        "GIT_SEQUENCE_EDITOR=:",
        "GIT_ASKPASS=",
        "GIT_PROXY_COMMAND=",
        "GIT_CONFIG_COUNT=11",
        "GIT_CONFIG_KEY_0=core.fsmonitor",
        "GIT_CONFIG_VALUE_0=false",
        "GIT_CONFIG_KEY_1=core.hooksPath",
        "GIT_CONFIG_VALUE_1=/dev/null",
        "GIT_CONFIG_KEY_2=core.sshCommand",
        "GIT_CONFIG_VALUE_2=ssh",
        "GIT_CONFIG_KEY_3=credential.helper",
        "GIT_CONFIG_VALUE_3=",
        "GIT_CONFIG_KEY_4=gpg.format",
        "GIT_CONFIG_VALUE_4=openpgp",
        "GIT_CONFIG_KEY_5=gpg.program",
        "GIT_CONFIG_VALUE_5=gpg",
        "GIT_CONFIG_KEY_6=commit.gpgSign",
        "GIT_CONFIG_VALUE_6=false",
        "GIT_CONFIG_KEY_7=tag.gpgSign",
        "GIT_CONFIG_VALUE_7=false",
        "GIT_CONFIG_KEY_8=log.showSignature",
        "GIT_CONFIG_VALUE_8=false",
        "GIT_CONFIG_KEY_9=protocol.ext.allow",
        "GIT_CONFIG_VALUE_9=never",
        "GIT_CONFIG_KEY_10=safe.bareRepository",
        "GIT_CONFIG_VALUE_10=explicit",
        "WS_E2E_PASSED=from-host",
        "TZ=UTC",
        "CI=hunter2-marker",
    };
    EXPECT_EQ(got, want) << r.stdout();
    EXPECT_EQ(r.stdout().find("hidden"), std::string::npos);
    EXPECT_EQ(r.stdout().find("GCONV_PATH"), std::string::npos);
    EXPECT_EQ(r.stdout().find("/server/config"), std::string::npos);
    EXPECT_EQ(r.stdout().find("--server-own"), std::string::npos);

    // The client may set LANG; it replaces the base value.
    p = ArgvProcess({"env"});
    (*p.mutable_env())["LANG"] = "C";
    ASSERT_TRUE(wstest::RunProcess(exec.get(), ws.id, p, &r).ok());
    EXPECT_NE(r.stdout().find("\nLANG=C\n"), std::string::npos) << r.stdout();
    EXPECT_EQ(r.stdout().find("LANG=C.UTF-8"), std::string::npos) << r.stdout();

    // A name off the allowlist is refused, named, and nothing runs.
    p = ArgvProcess({"sh", "-c", "exit 9"});
    (*p.mutable_env())["CLIENT_VAR"] = "client value";
    s = wstest::RunProcess(exec.get(), ws.id, p, &r);
    EXPECT_WS_ERROR(s, StatusCode::PERMISSION_DENIED, "ENV_DENIED");
    EXPECT_EQ(wstest::Decode(s).metadata["token"], "CLIENT_VAR");

    // A command ending with a known exit code, to find its audit line.
    p = ArgvProcess({"sh", "-c", "exit 7"});
    (*p.mutable_env())["CI"] = "hunter2-marker";
    ASSERT_TRUE(wstest::RunProcess(exec.get(), ws.id, p, &r).ok());
    ASSERT_EQ(r.exited().exit_code(), 7);

    // Audit: one JSON line per finished command on the server's stderr.
    std::vector<std::string> audit;
    auto deadline = Clock::now() + std::chrono::seconds(10);
    do {
        audit.clear();
        std::istringstream err(wstest::ReadHostFile(srv.stderr_path()));
        while (std::getline(err, line))
            if (JsonHas(line, "event", "\"command\"") && line.find(ws.id) != std::string::npos)
                audit.push_back(line);
        if (audit.size() >= 3)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (Clock::now() < deadline);
    ASSERT_EQ(audit.size(), 3u) << wstest::ReadHostFile(srv.stderr_path());
    bool found = false;
    for (const auto &a : audit)
        if (JsonHas(a, "exit_code", "7") && a.find("exit 7") != std::string::npos)
            found = true;
    EXPECT_TRUE(found) << "no audit line with the argv and exit_code 7: " << audit.back();
    EXPECT_EQ(wstest::ReadHostFile(srv.stderr_path()).find("hunter2-marker"), std::string::npos)
        << "an environment value reached the server's log";
}

// ---- local-bash narrowed: planted config does not turn an allowed
// command into another one ----

bool Exists(const std::string &path)
{
    struct stat st;
    return lstat(path.c_str(), &st) == 0;
}

// Whether `prog` is an executable in the server's PATH.
bool OnPath(const std::string &prog)
{
    for (const char *dir : {"/usr/local/bin/", "/usr/bin/", "/bin/"})
        if (access((dir + prog).c_str(), X_OK) == 0)
            return true;
    return false;
}

// Runs argv on the host directly (not through the server) with `env` added
// to this test's environment; returns the exit status (-1: not run).
int HostRun(const std::vector<std::string> &argv, const std::vector<std::string> &env,
            const std::string &cwd)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (chdir(cwd.c_str()) < 0)
            _exit(126);
        for (const auto &e : env)
            putenv(strdup(e.c_str()));
        std::vector<char *> args;
        for (const auto &a : argv)
            args.push_back(const_cast<char *>(a.c_str()));
        args.push_back(nullptr);
        int fd = open("/dev/null", O_RDWR);
        dup2(fd, 1);
        dup2(fd, 2);
        execvp(args[0], args.data());
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

class ExecHost : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        srv_ = std::make_unique<Server>();
        wsstub_ = srv_->workspaces();
        exec_ = srv_->exec();
        fs_ = srv_->fs();
        outside_ = wstest::MakeTempDir("outside");
        // Writable by the workspace's uid too: a plant that ran as the
        // command must be able to leave its marker, or "no marker" proves
        // nothing.
        EXPECT_EQ(chmod(outside_.c_str(), 01777), 0);
    }

    RunResponse RunOk(const wstest::Ws &ws, const ProcessConfig &p)
    {
        RunResponse r;
        grpc::Status s = wstest::RunProcess(exec_.get(), ws.id, p, &r);
        EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
        return r;
    }

    std::unique_ptr<Server> srv_;
    std::unique_ptr<Workspaces::Stub> wsstub_;
    std::unique_ptr<Exec::Stub> exec_;
    std::unique_ptr<FileSystem::Stub> fs_;
    std::string outside_;
};

// HOME and XDG_RUNTIME_DIR are empty 0700 directories made for the command,
// not the workspace, a new pair per command, gone once it has ended.
TEST_F(ExecHost, HomeIsAnEmptyDirectoryOfTheCommandsOwn)
{
    wstest::Ws ws = wstest::OpenShell(wsstub_.get(), {"sh"});
    const std::string script =
        "printf '%s\\n' \"$HOME\" \"$XDG_RUNTIME_DIR\"; "
        "ls -A \"$HOME\" \"$XDG_RUNTIME_DIR\"; "
        "stat -c %a \"$HOME\" \"$XDG_RUNTIME_DIR\"; "
        "echo made > \"$HOME/file\"; test -d \"$XDG_CONFIG_HOME\" || echo noconfig";
    RunResponse r = RunOk(ws, ArgvProcess({"sh", "-c", script}));
    ASSERT_EQ(r.exited().exit_code(), 0) << r.stderr();
    std::istringstream lines(r.stdout());
    std::vector<std::string> out;
    for (std::string l; std::getline(lines, l);)
        out.push_back(l);
    // HOME, the runtime dir, the two (empty) listings with their headers
    // and a blank line between them, the two modes, "noconfig".
    ASSERT_EQ(out.size(), 8u) << r.stdout();
    const std::string home = out[0], run = out[1];
    EXPECT_EQ(out[2], home + ":");
    EXPECT_EQ(out[3], "");
    EXPECT_EQ(out[4], run + ":");
    EXPECT_EQ(out[5], "700");
    EXPECT_EQ(out[6], "700");
    EXPECT_EQ(out[7], "noconfig");
    const std::string wsdir = RealPath(srv_->workspace_dir(ws.id));
    EXPECT_NE(RealPath(home).rfind(wsdir, 0), 0u) << home << " is in the workspace";
    EXPECT_NE(RealPath(run).rfind(wsdir, 0), 0u) << run << " is in the workspace";
    // Gone by the time the client saw the command end.
    EXPECT_FALSE(Exists(home)) << home;
    EXPECT_FALSE(Exists(run)) << run;

    RunResponse again = RunOk(ws, ArgvProcess({"sh", "-c", "printf '%s' \"$HOME\""}));
    EXPECT_NE(again.stdout(), home);
    EXPECT_FALSE(again.stdout().empty());
}

// While a background command runs its home is there; when it ends, it goes.
TEST_F(ExecHost, BackgroundCommandKeepsItsHomeUntilItEnds)
{
    wstest::Ws ws = wstest::OpenShell(wsstub_.get(), {"sh"});
    ProcessConfig p =
        ArgvProcess({"sh", "-c", "printf '%s' \"$HOME\" > home.txt; exec sleep 1000.6161"});
    p.set_background(true);
    p.set_tag("bg");
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto rw = wstest::StartStream(exec_.get(), &ctx, ws.id, p);
    EventLog log;
    ASSERT_TRUE(wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) { return l.started; }));
    std::string home;
    auto deadline = Clock::now() + std::chrono::seconds(30);
    while (home.empty() && Clock::now() < deadline) {
        home = wstest::ReadHostFile(srv_->workspace_dir(ws.id) + "/home.txt");
        if (home.empty())
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_FALSE(home.empty());
    EXPECT_TRUE(Exists(home));
    ClientContext sctx;
    SendSignalRequest req;
    SendSignalResponse resp;
    req.set_workspace_id(ws.id);
    req.set_tag("bg");
    req.set_signal(SIGKILL);
    ASSERT_TRUE(exec_->SendSignal(&sctx, req, &resp).ok());
    wstest::ReadEvents(rw.get(), &log);
    rw->Finish();
    EXPECT_TRUE(log.exited) << wstest::Problems(log);
    EXPECT_FALSE(Exists(home)) << home;
}

// A ~/.gitconfig written into the workspace (which was HOME) made an
// allowed `git status` run its core.fsmonitor command.
TEST_F(ExecHost, PlantedGitconfigDoesNotRun)
{
    if (!OnPath("git"))
        GTEST_SKIP() << "git is not installed on this host";
    wstest::Ws ws = wstest::OpenShell(wsstub_.get(), {"git"});
    ASSERT_EQ(RunOk(ws, ArgvProcess({"git", "init", "-q"})).exited().exit_code(), 0);
    const std::string marker = outside_ + "/gitconfig-ran";
    const std::string plant = "[core]\n\tfsmonitor = \"touch " + marker + ";:\"\n";
    ASSERT_TRUE(wstest::Write(fs_.get(), ws.id, ".gitconfig", plant).ok());
    const std::string wsdir = srv_->workspace_dir(ws.id);
    // The plant works where HOME is the workspace: run by hand here (as
    // root, over the workspace uid's directory, which git then reads only
    // when told it is safe).
    HostRun({"git", "-c", "safe.directory=*", "status"}, {"HOME=" + wsdir}, wsdir);
    ASSERT_TRUE(Exists(marker)) << "the planted fsmonitor did not run even outside the server";
    ASSERT_EQ(unlink(marker.c_str()), 0);

    RunResponse r = RunOk(ws, ArgvProcess({"git", "status"}));
    EXPECT_EQ(r.exited().exit_code(), 0) << r.stderr();
    EXPECT_FALSE(Exists(marker)) << "the planted ~/.gitconfig ran its fsmonitor";
}

// The same command in the repository's own config, which git reads
// whatever HOME is: the command-line scope override wins over it.
TEST_F(ExecHost, PlantedRepositoryConfigDoesNotRun)
{
    if (!OnPath("git"))
        GTEST_SKIP() << "git is not installed on this host";
    wstest::Ws ws = wstest::OpenShell(wsstub_.get(), {"git"});
    ASSERT_EQ(RunOk(ws, ArgvProcess({"git", "init", "-q"})).exited().exit_code(), 0);
    const std::string marker = outside_ + "/repo-config-ran";
    const std::string hook_marker = outside_ + "/hook-ran";
    const std::string plant = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n"
                              "\tbare = false\n\tfsmonitor = \"touch " +
                              marker + ";:\"\n\tpager = \"touch " + marker + ";cat\"\n";
    ASSERT_TRUE(wstest::Write(fs_.get(), ws.id, ".git/config", plant).ok());
    // A hook too: .git/hooks is the repository's, written like any file.
    WriteFileResponse wr;
    ASSERT_TRUE(wstest::Write(fs_.get(), ws.id, ".git/hooks/pre-commit",
                              "#!/bin/sh\ntouch " + hook_marker + "\n", &wr)
                    .ok());
    ASSERT_EQ(chmod((srv_->workspace_dir(ws.id) + "/.git/hooks/pre-commit").c_str(), 0755), 0);
    const std::string wsdir = srv_->workspace_dir(ws.id);
    HostRun({"git", "-c", "safe.directory=*", "status"}, {}, wsdir);
    ASSERT_TRUE(Exists(marker)) << "the planted fsmonitor did not run even outside the server";
    ASSERT_EQ(unlink(marker.c_str()), 0);

    RunResponse r = RunOk(ws, ArgvProcess({"git", "status"}));
    EXPECT_EQ(r.exited().exit_code(), 0) << r.stderr();
    EXPECT_FALSE(Exists(marker)) << "the repository's core.fsmonitor ran";
    // A commit runs no hook.
    ASSERT_TRUE(wstest::Write(fs_.get(), ws.id, "f.txt", "x").ok());
    ASSERT_EQ(RunOk(ws, ArgvProcess({"git", "add", "f.txt"})).exited().exit_code(), 0);
    r = RunOk(ws, ArgvProcess({"git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                               "-m", "x"}));
    EXPECT_EQ(r.exited().exit_code(), 0) << r.stderr();
    // A terminal makes git start its pager: not the planted one.
    ProcessConfig p = ArgvProcess({"git", "log", "--oneline", "-1"});
    p.mutable_pty()->set_rows(24);
    p.mutable_pty()->set_cols(80);
    r = RunOk(ws, p);
    EXPECT_EQ(r.exited().exit_code(), 0) << r.stdout();
    EXPECT_NE(r.stdout().find(" x"), std::string::npos) << r.stdout();
    EXPECT_FALSE(Exists(hook_marker)) << "the planted pre-commit hook ran";
    EXPECT_FALSE(Exists(marker));
}

// TAR_OPTIONS=--checkpoint-action=exec=... made an allowed tar run any
// command: the name is refused, named, and nothing runs.
TEST_F(ExecHost, TarOptionsIsRefused)
{
    if (!OnPath("tar"))
        GTEST_SKIP() << "tar is not installed on this host";
    wstest::Ws ws = wstest::OpenShell(wsstub_.get(), {"tar"});
    ASSERT_TRUE(wstest::Write(fs_.get(), ws.id, "f.txt", "data").ok());
    const std::string marker = outside_ + "/tar-ran";
    // tar splits TAR_OPTIONS at blanks: the command is a script of one word.
    const std::string script = outside_ + "/mark.sh";
    wstest::WriteHostFile(script, "#!/bin/sh\ntouch " + marker + "\n");
    ASSERT_EQ(chmod(script.c_str(), 0755), 0);
    const std::string opts = "--checkpoint=1 --checkpoint-action=exec=" + script;
    const std::string wsdir = srv_->workspace_dir(ws.id);
    // The variable does run a command with this tar.
    HostRun({"tar", "-cf", "/dev/null", "f.txt"}, {"TAR_OPTIONS=" + opts}, wsdir);
    ASSERT_TRUE(Exists(marker)) << "TAR_OPTIONS did not run its command even outside the server";
    ASSERT_EQ(unlink(marker.c_str()), 0);

    ProcessConfig p = ArgvProcess({"tar", "-cf", "out.tar", "f.txt"});
    (*p.mutable_env())["TAR_OPTIONS"] = opts;
    RunResponse r;
    grpc::Status s = wstest::RunProcess(exec_.get(), ws.id, p, &r);
    EXPECT_WS_ERROR(s, StatusCode::PERMISSION_DENIED, "ENV_DENIED");
    EXPECT_EQ(wstest::Decode(s).metadata["token"], "TAR_OPTIONS");
    EXPECT_FALSE(Exists(marker));
    EXPECT_FALSE(Exists(wsdir + "/out.tar")) << "tar ran";
}

// Variables on the allowlist go through to the command.
TEST_F(ExecHost, AllowlistedVariablesPass)
{
    wstest::Ws ws = wstest::OpenShell(wsstub_.get(), {"sh"});
    ProcessConfig p =
        ArgvProcess({"sh", "-c", "printf '%s|%s|%s' \"$TZ\" \"$COLUMNS\" \"$LC_ALL\""});
    (*p.mutable_env())["TZ"] = "Europe/Berlin";
    (*p.mutable_env())["COLUMNS"] = "132";
    (*p.mutable_env())["LC_ALL"] = "C";
    RunResponse r = RunOk(ws, p);
    EXPECT_EQ(r.stdout(), "Europe/Berlin|132|C");
    // And a value of the wrong form is refused, naming the variable.
    p = ArgvProcess({"sh", "-c", "true"});
    (*p.mutable_env())["TZ"] = ":" + srv_->workspace_dir(ws.id) + "/zone";
    grpc::Status s = wstest::RunProcess(exec_.get(), ws.id, p, &r);
    EXPECT_WS_ERROR(s, StatusCode::PERMISSION_DENIED, "ENV_DENIED");
    EXPECT_EQ(wstest::Decode(s).metadata["token"], "TZ");
}

TEST_F(ExecTest, RunWithPtyGivesATerminal)
{
    ProcessConfig p = ArgvProcess({"tty"});
    p.mutable_pty()->set_rows(24);
    p.mutable_pty()->set_cols(80);
    RunResponse r = RunOk(p);
    EXPECT_EQ(r.stdout().compare(0, 9, "/dev/pts/"), 0) << r.stdout();
    EXPECT_EQ(r.exited().exit_code(), 0);
    // Without one, stdin is not a terminal.
    r = RunOk(ArgvProcess({"tty"}));
    EXPECT_EQ(r.stdout(), "not a tty\n");
}

// ---- Start ----

TEST_F(ExecTest, StartStreamsEachStreamInOrderWithContiguousOffsets)
{
    const char *script = "i=0; while [ $i -lt 3000 ]; do echo out$i; echo err$i >&2; "
                         "i=$((i+1)); done; exit 5";
    std::string want_out, want_err;
    for (int i = 0; i < 3000; i++) {
        want_out += "out" + std::to_string(i) + "\n";
        want_err += "err" + std::to_string(i) + "\n";
    }
    ProcessConfig p = ArgvProcess({"sh", "-c", script});
    p.set_tag("ordered");
    EventLog log;
    grpc::Status s = StartAll(p, &log);
    ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
    EXPECT_TRUE(log.problems.empty()) << wstest::Problems(log);
    ASSERT_TRUE(log.started);
    EXPECT_GT(log.start.pid(), 0);
    EXPECT_FALSE(log.start.id().empty());
    EXPECT_EQ(log.start.tag(), "ordered");
    EXPECT_EQ(log.out.first, 0u);
    EXPECT_EQ(log.err.first, 0u);
    EXPECT_TRUE(log.out.data == want_out) << "stdout differs";
    EXPECT_TRUE(log.err.data == want_err) << "stderr differs";
    EXPECT_FALSE(log.pty.any);
    EXPECT_TRUE(log.gaps.empty());
    ASSERT_TRUE(log.exited) << "no exited event";
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(log.exit.exit_code(), 5);
    EXPECT_EQ(log.exit.stdout().bytes_total(), want_out.size());
    EXPECT_EQ(log.exit.stdout().bytes_delivered(), want_out.size());
    EXPECT_FALSE(log.exit.stdout().truncated());
    EXPECT_EQ(log.exit.stderr().bytes_total(), want_err.size());
    EXPECT_EQ(log.exit.stderr().bytes_delivered(), want_err.size());
}

// A large stream of random bytes arrives exactly as written, whatever the
// threads that send messages and complete them do meanwhile (a send that
// completed before its sender's bookkeeping once let the pump overwrite
// the next message's bytes in the ring before they were serialized).
TEST_F(ExecTest, StartStreamsRandomBytesExactly)
{
    std::string data(64 << 20, '\0');
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i + 8 <= data.size(); i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(&data[i], &x, 8);
    }
    wstest::WriteHostFile(srv_->workspace_dir(ws_.id) + "/random.bin", data);
    for (int round = 0; round < 3; round++) {
        EventLog log;
        grpc::Status s =
            StartAll(ArgvProcess({"dd", "if=random.bin", "bs=4096", "status=none"}), &log);
        ASSERT_TRUE(s.ok()) << s.error_message();
        EXPECT_TRUE(log.problems.empty()) << wstest::Problems(log);
        EXPECT_TRUE(log.gaps.empty());
        ASSERT_EQ(log.out.data.size(), data.size());
        size_t diff = 0;
        while (diff < data.size() && log.out.data[diff] == data[diff])
            diff++;
        EXPECT_EQ(diff, data.size()) << "round " << round << ": first difference at " << diff;
    }
}

// Waits until process `pid` has exited (gone, or a zombie not reaped yet)
// or sleeps writing to a full pipe: the kernel function it sleeps in
// (wchan: pipe_write, anon_pipe_write), or where that is hidden, the
// syscall it is in.
bool WaitWroteAllItCan(pid_t pid, int timeout_ms)
{
    const std::string proc = "/proc/" + std::to_string(pid);
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    do {
        std::string stat = wstest::ReadHostFile(proc + "/stat");
        size_t close = stat.rfind(')');
        if (close == std::string::npos || close + 2 >= stat.size())
            return true; // gone
        char state = stat[close + 2];
        if (state == 'Z' || state == 'X')
            return true;
        if (state == 'S') {
            std::string wchan = wstest::ReadHostFile(proc + "/wchan");
            std::string sys = wstest::ReadHostFile(proc + "/syscall");
            if (wchan.find("pipe_write") != std::string::npos ||
                (!sys.empty() && strtol(sys.c_str(), nullptr, 10) == SYS_write))
                return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } while (Clock::now() < deadline);
    return false;
}

// A command can finish while its output still sits in the pipe, unread
// because the client reads slowly: that output is still delivered, and
// counted.
TEST_F(ExecTest, OutputLeftInThePipeWhenTheCommandExitsIsDelivered)
{
    const std::string seq = SeqOutput(1, 150000);
    struct {
        std::vector<std::string> argv;
        std::string want;
        int pause_ms; // between events after the first pause: a reader
                      // that stays slow while the rest drains
    } cases[] = {
        {{"head", "-c", "1048576", "/dev/zero"}, std::string(1 << 20, '\0'), 0},
        {{"seq", "1", "150000"}, seq, 0},
        {{"seq", "1", "150000"}, seq, 150},
    };
    // A client that buffers little: a 64 KiB window that does not grow, so
    // what it has not read stays in the server (and the pipe).
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 * 1024);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(8 << 20);
    auto slow = Exec::NewStub(
        grpc::CreateCustomChannel(srv_->address(), grpc::InsecureChannelCredentials(), args));
    for (const auto &c : cases) {
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        ProcessConfig p = ArgvProcess(c.argv);
        p.set_max_output_bytes(64 * 1024);
        auto rw = wstest::StartStream(slow.get(), &ctx, ws_.id, p);
        EventLog log;
        ASSERT_TRUE(
            wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) { return l.started; }));
        // The command writes everything it can (and exits, or blocks on the
        // full pipe) before the reader goes on.
        EXPECT_TRUE(WaitWroteAllItCan(static_cast<pid_t>(log.start.pid()), 30000))
            << c.argv[0] << " neither exited nor blocked writing to its pipe";
        wstest::ReadEvents(rw.get(), &log, [&](const EventLog &) {
            std::this_thread::sleep_for(std::chrono::milliseconds(c.pause_ms));
            return false;
        });
        ASSERT_TRUE(rw->Finish().ok()) << c.argv[0];
        EXPECT_TRUE(log.problems.empty()) << wstest::Problems(log);
        EXPECT_EQ(log.out.data.size(), c.want.size()) << c.argv[0] << " pause " << c.pause_ms;
        EXPECT_TRUE(log.out.data == c.want) << c.argv[0];
        ASSERT_TRUE(log.exited);
        EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EXITED);
        EXPECT_EQ(log.exit.exit_code(), 0);
        EXPECT_EQ(log.exit.stdout().bytes_total(), c.want.size())
            << c.argv[0] << ": bytes the command wrote";
    }
}

TEST_F(ExecTest, StartFirstMessageMustBeStart)
{
    auto t0 = Clock::now();
    {
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        auto rw = exec_->Start(&ctx);
        rw->Write(StdinMsg("hello"));
        rw->WritesDone();
        EventLog log;
        wstest::ReadEvents(rw.get(), &log);
        EXPECT_WS_ERROR(rw->Finish(), StatusCode::INVALID_ARGUMENT, "MALFORMED");
        EXPECT_FALSE(log.started);
    }
    EXPECT_LT(SecondsSince(t0), 20) << "a stdin-first stream hung";
    t0 = Clock::now();
    {
        // A stream that ends before any message.
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        auto rw = exec_->Start(&ctx);
        rw->WritesDone();
        EventLog log;
        wstest::ReadEvents(rw.get(), &log);
        EXPECT_WS_ERROR(rw->Finish(), StatusCode::INVALID_ARGUMENT, "MALFORMED");
    }
    EXPECT_LT(SecondsSince(t0), 20) << "a stream without messages hung";
    t0 = Clock::now();
    {
        // `start` exactly once; the refusal ends the command it started.
        std::string m = wstest::UniqueSleep();
        ProcessConfig p = ArgvProcess({"sleep", m});
        StartRequest again;
        again.mutable_start()->set_workspace_id(ws_.id);
        *again.mutable_start()->mutable_process() = p;
        EventLog log;
        EXPECT_WS_ERROR(StartAll(p, &log, {again}), StatusCode::INVALID_ARGUMENT, "MALFORMED");
        EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, 10000), 0) << "the command outlived its call";
    }
    EXPECT_LT(SecondsSince(t0), 20) << "a second start message was not refused at once";
}

TEST_F(ExecTest, StartEchoesStdinThroughCat)
{
    std::vector<std::string> chunks = {"alpha\n", "", "omega"};
    for (int i = 0; i < 200 * 1024; i++)
        chunks[1].push_back(static_cast<char>(i * 7 + (i >> 10)));
    chunks.insert(chunks.begin() + 2, std::string(1 << 20, 'M')); // the per-message cap
    std::string want;
    for (const auto &c : chunks)
        want += c;

    ProcessConfig p = ArgvProcess({"cat"});
    p.set_stdin(true);
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    auto rw = wstest::StartStream(exec_.get(), &ctx, ws_.id, p);
    // Writes on their own thread: cat's output must be read meanwhile.
    std::thread writer([&] {
        for (const auto &c : chunks)
            if (!rw->Write(StdinMsg(c)))
                return;
        rw->Write(CloseStdinMsg());
        rw->WritesDone();
    });
    EventLog log;
    wstest::ReadEvents(rw.get(), &log);
    writer.join();
    grpc::Status s = rw->Finish();
    ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
    EXPECT_TRUE(log.problems.empty()) << wstest::Problems(log);
    EXPECT_EQ(log.out.data.size(), want.size());
    EXPECT_TRUE(log.out.data == want) << "echo differs from what was sent";
    ASSERT_TRUE(log.exited);
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(log.exit.exit_code(), 0);
    EXPECT_EQ(log.exit.stdout().bytes_total(), want.size());
}

TEST_F(ExecTest, StartWithoutStdinGivesEofAndRefusesStdinChunks)
{
    // cat ends at once with no output.
    EventLog log;
    auto t0 = Clock::now();
    grpc::Status s = StartAll(ArgvProcess({"cat"}), &log);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_LT(SecondsSince(t0), 30);
    ASSERT_TRUE(log.exited);
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(log.exit.exit_code(), 0);
    EXPECT_EQ(log.out.data, "");

    // Sending stdin anyway fails the call; the command goes with it.
    std::string m = wstest::UniqueSleep();
    EventLog log2;
    s = StartAll(ArgvProcess({"sleep", m}), &log2, {StdinMsg("data")}, 60);
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "STDIN_CLOSED");
    EXPECT_TRUE(log2.started);
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, 10000), 0);
}

TEST_F(ExecTest, StartWithPtyMergesOutputIntoPtyEvents)
{
    ProcessConfig p = ArgvProcess({"sh", "-c", "tty; echo to-stderr >&2; stty size"});
    p.mutable_pty()->set_rows(24);
    p.mutable_pty()->set_cols(80);
    EventLog log;
    grpc::Status s = StartAll(p, &log);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(log.problems.empty()) << wstest::Problems(log);
    EXPECT_FALSE(log.out.any) << log.out.data;
    EXPECT_FALSE(log.err.any) << log.err.data;
    EXPECT_EQ(log.pty.data.compare(0, 9, "/dev/pts/"), 0) << log.pty.data;
    EXPECT_NE(log.pty.data.find("to-stderr"), std::string::npos) << log.pty.data;
    EXPECT_NE(log.pty.data.find("24 80"), std::string::npos) << log.pty.data;
    ASSERT_TRUE(log.exited);
    EXPECT_EQ(log.exit.exit_code(), 0);
    EXPECT_EQ(log.exit.pty().bytes_total(), log.pty.data.size());
}

TEST_F(ExecTest, StartPtyTakesStdinAndResize)
{
    // A PTY takes stdin without process.stdin; resize reaches the terminal.
    ProcessConfig p = ArgvProcess({"sh", "-c", "read x; echo got-$x; stty size"});
    p.mutable_pty()->set_rows(24);
    p.mutable_pty()->set_cols(80);
    p.set_timeout_ms(30000);
    StartRequest resize;
    resize.mutable_resize()->set_rows(30);
    resize.mutable_resize()->set_cols(100);
    EventLog log;
    grpc::Status s = StartAll(p, &log, {resize, StdinMsg("go\n")});
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_NE(log.pty.data.find("got-go"), std::string::npos) << log.pty.data;
    EXPECT_NE(log.pty.data.find("30 100"), std::string::npos) << log.pty.data;
    ASSERT_TRUE(log.exited);
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EXITED);
}

TEST_F(ExecTest, StartTimeoutKeepsOutputProducedBeforeIt)
{
    ProcessConfig p = ArgvProcess({"sh", "-c", "echo before; sleep 100"});
    p.set_timeout_ms(500);
    EventLog log;
    auto t0 = Clock::now();
    grpc::Status s = StartAll(p, &log);
    EXPECT_LT(SecondsSince(t0), 30);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(log.out.data, "before\n");
    ASSERT_TRUE(log.exited);
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_TIMEOUT);
    EXPECT_EQ(log.exit.stdout().bytes_total(), 7u);
}

TEST_F(ExecTest, StartSignalEndsTheCommand)
{
    std::string m = wstest::UniqueSleep();
    EventLog log;
    grpc::Status s = StartAll(ArgvProcess({"sleep", m}), &log, {SignalMsg(15)});
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_TRUE(log.exited);
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_SIGNALED);
    EXPECT_EQ(log.exit.signal(), 15);
}

// The shell traps TERM and waits for its child: the child ends with 143
// only if the signal reached it too (a signal to the shell alone would
// leave the second `wait` blocked until the timeout).
const char kTreeScript[] = "trap 'echo sh-got-term' TERM; sleep %s & p=$!; wait $p; wait $p; "
                           "echo sleep-status-$?";

// Waits until `sleep m` has really been exec'd: until then the shell's
// forked child still runs the shell (with its trap), and a TERM landing
// there runs the trap a second time instead of ending the sleep.
bool WaitSleepExeced(const std::string &m, int timeout_ms)
{
    const std::string want = std::string("sleep") + '\0' + m + '\0';
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    do {
        DIR *d = opendir("/proc");
        bool found = false;
        for (struct dirent *de; d && !found && (de = readdir(d));) {
            if (de->d_name[0] < '0' || de->d_name[0] > '9')
                continue;
            std::ifstream f(std::string("/proc/") + de->d_name + "/cmdline", std::ios::binary);
            std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
            found = cmd == want;
        }
        if (d)
            closedir(d);
        if (found)
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } while (std::chrono::steady_clock::now() < deadline);
    return false;
}

std::string TreeScript(const std::string &m)
{
    char buf[256];
    snprintf(buf, sizeof(buf), kTreeScript, m.c_str());
    return buf;
}

TEST_F(ExecTest, StartSignalReachesTheWholeTree)
{
    std::string m = wstest::UniqueSleep();
    ProcessConfig p = ArgvProcess({"sh", "-c", TreeScript(m)});
    p.set_timeout_ms(20000);
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto rw = wstest::StartStream(exec_.get(), &ctx, ws_.id, p);
    EventLog log;
    ASSERT_TRUE(wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) { return l.started; }));
    // sh and its sleep are both up (the trap is set before the sleep).
    ASSERT_GE(wstest::WaitProcsAtLeast(m, 2, 10000), 2);
    ASSERT_TRUE(WaitSleepExeced(m, 10000));
    rw->Write(SignalMsg(15));
    wstest::ReadEvents(rw.get(), &log);
    ASSERT_TRUE(rw->Finish().ok());
    EXPECT_EQ(log.out.data, "sh-got-term\nsleep-status-143\n");
    ASSERT_TRUE(log.exited);
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EXITED);
}

// Counts deliveries of real-time signal 40, which the kernel queues one by
// one (a shell's trap would merge them): blocked, then taken with
// sigtimedwait until none comes for a second.
const char kCountSignals[] = R"(import signal
signal.pthread_sigmask(signal.SIG_BLOCK, [40])
print("ready", flush=True)
n = 0
while True:
    si = signal.sigtimedwait([40], 1.0)
    if si is None:
        if n:
            break
        continue
    n += 1
print("count", n, flush=True)
)";

TEST_F(ExecTest, StartSignalIsDeliveredOnce)
{
    ProcessConfig p = ArgvProcess({"python3", "-c", kCountSignals});
    p.set_timeout_ms(30000);
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto rw = wstest::StartStream(exec_.get(), &ctx, ws_.id, p);
    EventLog log;
    ASSERT_TRUE(wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) {
        return l.out.data == "ready\n";
    })) << log.err.data;
    rw->Write(SignalMsg(40));
    wstest::ReadEvents(rw.get(), &log);
    ASSERT_TRUE(rw->Finish().ok());
    EXPECT_EQ(log.out.data, "ready\ncount 1\n") << "one signal sent, this many received";
    ASSERT_TRUE(log.exited);
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EXITED);
}

// ---- tags, Attach, ListProcesses, SendSignal ----

TEST_F(ExecTest, AttachReplaysFromZeroAndFromTheMiddleAfterADisconnect)
{
    // Part one, then wait for a file the test writes, then part two.
    const std::string script = "echo part-one-line1; echo part-one-line2; echo err-one >&2; "
                               "while [ ! -e go ]; do sleep 0.05; done; "
                               "echo part-two; echo err-two >&2";
    const std::string want_out = "part-one-line1\npart-one-line2\npart-two\n";
    const std::string want_err = "err-one\nerr-two\n";
    ProcessConfig p = ArgvProcess({"sh", "-c", script});
    p.set_background(true);
    p.set_tag("job-1");
    p.set_timeout_ms(60000);

    std::string id;
    int64_t pid = 0;
    {
        ClientContext ctx;
        auto rw = wstest::StartStream(exec_.get(), &ctx, ws_.id, p);
        EventLog log;
        ASSERT_TRUE(wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) {
            return l.out.data.size() >= 30 && l.err.data.size() >= 8;
        })) << wstest::Problems(log);
        EXPECT_EQ(log.start.tag(), "job-1");
        id = log.start.id();
        pid = log.start.pid();
        ASSERT_FALSE(id.empty());
        EXPECT_EQ(log.out.data, "part-one-line1\npart-one-line2\n");
        // Disconnect: a background process keeps running.
        ctx.TryCancel();
        rw->Finish();
    }

    ListProcessesResponse list;
    ASSERT_TRUE(ListProcs(&list).ok());
    const ProcessInfo *info = Find(list, "", "job-1");
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->id(), id);
    EXPECT_EQ(info->pid(), pid);
    EXPECT_TRUE(info->running()) << "the background process did not survive its stream";
    EXPECT_TRUE(info->background());
    ASSERT_EQ(info->argv_size(), 3);
    EXPECT_EQ(info->argv(1), "-c");
    EXPECT_EQ(info->argv(2), script);

    // While it still runs, a second subscriber attaches by id from the
    // middle of part one (on its own thread, reading to the end).
    EventLog mid;
    grpc::Status mid_status;
    std::atomic<bool> mid_replayed{false};
    std::thread mid_reader([&] {
        mid_status = AttachAll(
            id, "", 15, &mid, [](const EventLog &l) { return l.out.data.size() >= 15; },
            [&] { mid_replayed = true; });
    });
    auto wait_mid = Clock::now() + std::chrono::seconds(30);
    while (!mid_replayed && Clock::now() < wait_mid)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(mid_replayed) << "no replay from the middle while running";

    // Attach by tag from 0: the replay, then live output after the file
    // appears, then exited.
    EventLog a;
    grpc::Status s = AttachAll(
        "", "job-1", 0, &a, [](const EventLog &l) { return l.out.data.size() >= 30; },
        [&] { ASSERT_TRUE(wstest::Write(fs_.get(), ws_.id, "go", "").ok()); });
    mid_reader.join();
    ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
    ASSERT_TRUE(mid_status.ok()) << mid_status.error_message();
    EXPECT_TRUE(mid.problems.empty()) << wstest::Problems(mid);
    EXPECT_EQ(mid.out.first, 15u);
    EXPECT_EQ(mid.out.data, want_out.substr(15));
    EXPECT_TRUE(mid.gaps.empty());
    ASSERT_TRUE(mid.exited);
    EXPECT_EQ(mid.exit.cause(), EXIT_CAUSE_EXITED);
    EXPECT_TRUE(a.problems.empty()) << wstest::Problems(a);
    ASSERT_TRUE(a.started);
    EXPECT_EQ(a.start.id(), id);
    EXPECT_EQ(a.out.first, 0u);
    EXPECT_EQ(a.out.data, want_out);
    EXPECT_EQ(a.err.data, want_err);
    EXPECT_TRUE(a.gaps.empty());
    ASSERT_TRUE(a.exited);
    EXPECT_EQ(a.exit.cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(a.exit.exit_code(), 0);

    // Attach by id from the middle of a finished process.
    EventLog b;
    s = AttachAll(id, "", 8, &b);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(b.problems.empty()) << wstest::Problems(b);
    EXPECT_EQ(b.out.first, 8u);
    EXPECT_EQ(b.out.data, want_out.substr(8));
    EXPECT_EQ(b.err.data, want_err.substr(8));
    EXPECT_TRUE(b.gaps.empty());
    ASSERT_TRUE(b.exited);
    EXPECT_EQ(b.exit.cause(), EXIT_CAUSE_EXITED);

    ProcessInfo done = WaitFinished(id);
    EXPECT_FALSE(done.running());
    EXPECT_TRUE(done.has_exited());
    EXPECT_EQ(done.exited().cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(done.exited().stdout().bytes_total(), want_out.size());
}

TEST_F(ExecTest, AttachReportsAGapWhenTheRingNoLongerHoldsTheOffset)
{
    std::string full = SeqOutput(1, 100000); // 588895 bytes
    ProcessConfig p = ArgvProcess({"seq", "1", "100000"});
    p.set_background(true);
    p.set_tag("flood");
    p.set_max_output_bytes(64 * 1024);
    std::string id;
    {
        ClientContext ctx;
        auto rw = wstest::StartStream(exec_.get(), &ctx, ws_.id, p);
        EventLog log;
        ASSERT_TRUE(
            wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) { return l.started; }));
        id = log.start.id();
        ctx.TryCancel();
        rw->Finish();
    }
    ProcessInfo done = WaitFinished(id);
    ASSERT_TRUE(done.has_exited());
    EXPECT_EQ(done.exited().cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(done.exited().stdout().bytes_total(), full.size());

    EventLog a;
    ASSERT_TRUE(AttachAll("", "flood", 0, &a).ok());
    EXPECT_TRUE(a.problems.empty()) << wstest::Problems(a);
    ASSERT_EQ(a.gaps.size(), 1u);
    const Gap &g = a.gaps[0];
    EXPECT_EQ(g.stream(), OUTPUT_STREAM_STDOUT);
    EXPECT_EQ(g.offset(), 0u);
    EXPECT_GT(g.bytes_dropped(), 0u);
    EXPECT_GE(g.bytes_dropped(), full.size() - 64 * 1024) << "the ring holds more than asked";
    EXPECT_EQ(a.order[0], 'g') << "the gap must come before the chunks";
    EXPECT_EQ(a.out.next, full.size());
    EXPECT_TRUE(a.out.data == full.substr(g.bytes_dropped())) << "replay after the gap differs";
    ASSERT_TRUE(a.exited);
    EXPECT_EQ(a.exit.stdout().bytes_total(), full.size());

    // An offset the ring still holds: no gap.
    EventLog b;
    uint64_t from = full.size() - 1000;
    ASSERT_TRUE(AttachAll(id, "", from, &b).ok());
    EXPECT_TRUE(b.gaps.empty());
    EXPECT_EQ(b.out.first, from);
    EXPECT_EQ(b.out.data, full.substr(from));
    EXPECT_TRUE(b.exited);

    // The ring's ceiling.
    p.set_tag("too-big");
    p.set_max_output_bytes((1 << 20) + 1);
    EventLog c;
    EXPECT_WS_ERROR(StartAll(p, &c), StatusCode::INVALID_ARGUMENT, "LIMIT");
    EXPECT_FALSE(c.started);
}

TEST_F(ExecTest, TagsAreUniqueAndValidated)
{
    std::string m = wstest::UniqueSleep();
    ProcessConfig p = ArgvProcess({"sleep", m});
    p.set_background(true);
    p.set_tag("dup");
    std::string dup_id;
    {
        ClientContext ctx;
        auto rw = wstest::StartStream(exec_.get(), &ctx, ws_.id, p);
        EventLog log;
        ASSERT_TRUE(
            wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) { return l.started; }));
        dup_id = log.start.id();
        ctx.TryCancel();
        rw->Finish();
    }
    EventLog log;
    EXPECT_WS_ERROR(StartAll(p, &log), StatusCode::ALREADY_EXISTS, "EXISTS");
    EXPECT_FALSE(log.started);
    ProcessConfig q = ArgvProcess({"true"});
    q.set_tag("dup");
    RunResponse r;
    EXPECT_WS_ERROR(Run(q, &r), StatusCode::ALREADY_EXISTS, "EXISTS");

    for (const std::string &bad :
         std::vector<std::string>{"has space", std::string(129, 'a'), "sl/ash", "t\xc3\xa4g"}) {
        q.set_tag(bad);
        EXPECT_EQ(Run(q, &r).error_code(), StatusCode::INVALID_ARGUMENT) << bad;
    }
    q.set_tag(std::string(128, 'a'));
    EXPECT_TRUE(Run(q, &r).ok());
    q.set_tag("A.z_0-9");
    EXPECT_TRUE(Run(q, &r).ok());

    ASSERT_TRUE(Signal("", "dup", 9).ok());
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, 10000), 0);
    // Recently finished still holds the tag.
    EXPECT_FALSE(WaitFinished(dup_id).running());
    q.set_tag("dup");
    EXPECT_WS_ERROR(Run(q, &r), StatusCode::ALREADY_EXISTS, "EXISTS");
}

TEST_F(ExecTest, ListProcessesShowsRunningAndFinished)
{
    RunResponse r = RunOk(ArgvProcess({"echo", "listed"}));
    std::string m = wstest::UniqueSleep();
    ProcessConfig p = ArgvProcess({"sleep", m});
    p.set_background(true);
    p.set_tag("sleeper");
    std::string sleeper_id;
    int64_t sleeper_pid = 0;
    {
        ClientContext ctx;
        auto rw = wstest::StartStream(exec_.get(), &ctx, ws_.id, p);
        EventLog log;
        ASSERT_TRUE(
            wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) { return l.started; }));
        sleeper_id = log.start.id();
        sleeper_pid = log.start.pid();
        ctx.TryCancel();
        rw->Finish();
    }

    ListProcessesResponse list;
    ASSERT_TRUE(ListProcs(&list).ok());
    EXPECT_EQ(list.processes_size(), 2);
    const ProcessInfo *echo = Find(list, r.process_id());
    ASSERT_NE(echo, nullptr);
    EXPECT_FALSE(echo->running());
    EXPECT_FALSE(echo->background());
    ASSERT_EQ(echo->argv_size(), 2);
    EXPECT_EQ(echo->argv(1), "listed");
    ASSERT_TRUE(echo->has_exited());
    EXPECT_EQ(echo->exited().cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(echo->exited().stdout().bytes_total(), 7u);
    EXPECT_GT(echo->started_at_unix_ms(), 0);

    const ProcessInfo *sl = Find(list, sleeper_id);
    ASSERT_NE(sl, nullptr);
    EXPECT_EQ(sl->tag(), "sleeper");
    EXPECT_EQ(sl->pid(), sleeper_pid);
    EXPECT_TRUE(sl->running());
    EXPECT_TRUE(sl->background());
    EXPECT_FALSE(sl->has_exited());
    ASSERT_EQ(sl->argv_size(), 2);
    EXPECT_EQ(sl->argv(1), m);

    // Another workspace sees none of them.
    wstest::Ws other = wstest::OpenShell(wsstub_.get(), {"true"});
    ListProcessesResponse other_list;
    ASSERT_TRUE(ListProcs(&other_list, other.id).ok());
    EXPECT_EQ(other_list.processes_size(), 0);
    EXPECT_WS_ERROR(Signal(sleeper_id, "", 9, other.id), StatusCode::NOT_FOUND, "NO_SUCH_PROCESS");

    ASSERT_TRUE(Signal("", "sleeper", 9).ok());
    ProcessInfo done = WaitFinished(sleeper_id);
    ASSERT_TRUE(done.has_exited());
    EXPECT_EQ(done.exited().cause(), EXIT_CAUSE_SIGNALED);
    EXPECT_EQ(done.exited().signal(), 9);
}

TEST_F(ExecTest, SendSignalKillEndsWithSignaledAndAttachSeesIt)
{
    std::string m = wstest::UniqueSleep();
    ProcessConfig p = ArgvProcess({"sleep", m});
    p.set_background(true);
    std::string id;
    {
        ClientContext ctx;
        auto rw = wstest::StartStream(exec_.get(), &ctx, ws_.id, p);
        EventLog log;
        ASSERT_TRUE(
            wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) { return l.started; }));
        id = log.start.id();
        ctx.TryCancel();
        rw->Finish();
    }
    ASSERT_EQ(wstest::WaitProcsAtLeast(m, 1, 10000), 1);
    ASSERT_TRUE(Signal(id, "", 9).ok());
    EventLog a;
    ASSERT_TRUE(AttachAll(id, "", 0, &a).ok());
    ASSERT_TRUE(a.exited);
    EXPECT_EQ(a.exit.cause(), EXIT_CAUSE_SIGNALED);
    EXPECT_EQ(a.exit.signal(), 9);
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, 10000), 0);
}

TEST_F(ExecTest, SendSignalReachesTheWholeTree)
{
    std::string m = wstest::UniqueSleep();
    ProcessConfig p = ArgvProcess({"sh", "-c", TreeScript(m)});
    p.set_background(true);
    p.set_tag("tree");
    p.set_timeout_ms(20000);
    std::string id;
    {
        ClientContext ctx;
        auto rw = wstest::StartStream(exec_.get(), &ctx, ws_.id, p);
        EventLog log;
        ASSERT_TRUE(
            wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) { return l.started; }));
        id = log.start.id();
        ctx.TryCancel();
        rw->Finish();
    }
    ASSERT_GE(wstest::WaitProcsAtLeast(m, 2, 10000), 2);
    ASSERT_TRUE(WaitSleepExeced(m, 10000));
    ASSERT_TRUE(Signal("", "tree", 15).ok());
    EventLog a;
    ASSERT_TRUE(AttachAll(id, "", 0, &a).ok());
    EXPECT_EQ(a.out.data, "sh-got-term\nsleep-status-143\n");
    ASSERT_TRUE(a.exited);
    EXPECT_EQ(a.exit.cause(), EXIT_CAUSE_EXITED);
}

TEST_F(ExecTest, SendSignalIsDeliveredOnce)
{
    ProcessConfig p = ArgvProcess({"python3", "-c", kCountSignals});
    p.set_timeout_ms(30000);
    p.set_background(true);
    std::string id;
    {
        ClientContext ctx;
        auto rw = wstest::StartStream(exec_.get(), &ctx, ws_.id, p);
        EventLog log;
        ASSERT_TRUE(wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) {
            return l.out.data == "ready\n";
        })) << log.err.data;
        id = log.start.id();
        ctx.TryCancel();
        rw->Finish();
    }
    ASSERT_TRUE(Signal(id, "", 40).ok());
    EventLog a;
    ASSERT_TRUE(AttachAll(id, "", 0, &a).ok());
    EXPECT_EQ(a.out.data, "ready\ncount 1\n") << "one signal sent, this many received";
    ASSERT_TRUE(a.exited);
    EXPECT_EQ(a.exit.cause(), EXIT_CAUSE_EXITED);
}

TEST_F(ExecTest, SendSignalAndAttachErrors)
{
    std::string m = wstest::UniqueSleep();
    ProcessConfig p = ArgvProcess({"sleep", m});
    p.set_background(true);
    p.set_tag("target");
    std::string id;
    {
        ClientContext ctx;
        auto rw = wstest::StartStream(exec_.get(), &ctx, ws_.id, p);
        EventLog log;
        ASSERT_TRUE(
            wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) { return l.started; }));
        id = log.start.id();
        ctx.TryCancel();
        rw->Finish();
    }
    EXPECT_WS_ERROR(Signal("no-such-id", "", 15), StatusCode::NOT_FOUND, "NO_SUCH_PROCESS");
    EXPECT_WS_ERROR(Signal("", "no-such-tag", 15), StatusCode::NOT_FOUND, "NO_SUCH_PROCESS");
    EXPECT_WS_ERROR(Signal(id, "target", 15), StatusCode::INVALID_ARGUMENT, "MALFORMED");
    EXPECT_WS_ERROR(Signal("", "", 15), StatusCode::INVALID_ARGUMENT, "MALFORMED");
    for (int sig : {0, -1, 65, 1000})
        EXPECT_WS_ERROR(Signal(id, "", sig), StatusCode::INVALID_ARGUMENT, "MALFORMED") << sig;

    EventLog a;
    EXPECT_WS_ERROR(AttachAll("no-such-id", "", 0, &a), StatusCode::NOT_FOUND, "NO_SUCH_PROCESS");
    EXPECT_WS_ERROR(AttachAll("", "no-such-tag", 0, &a), StatusCode::NOT_FOUND, "NO_SUCH_PROCESS");
    EXPECT_WS_ERROR(AttachAll(id, "target", 0, &a), StatusCode::INVALID_ARGUMENT, "MALFORMED");
    EXPECT_WS_ERROR(AttachAll("", "", 0, &a), StatusCode::INVALID_ARGUMENT, "MALFORMED");
    EXPECT_FALSE(a.started);

    // None of the refusals touched the process.
    ListProcessesResponse list;
    ASSERT_TRUE(ListProcs(&list).ok());
    const ProcessInfo *info = Find(list, id);
    ASSERT_NE(info, nullptr);
    EXPECT_TRUE(info->running());
    ASSERT_TRUE(Signal(id, "", 9).ok());
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, 10000), 0);
}

TEST_F(ExecTest, ExecNeedsAShellWorkspace)
{
    const std::string unknown = "ws_" + std::string(32, '0');
    wstest::Ws mem = wstest::Open(wsstub_.get(), "memory");
    wstest::Ws fs_only = wstest::Open(wsstub_.get(), "local-bash");
    RunResponse r;
    for (const auto &id : {mem.id, fs_only.id}) {
        EXPECT_WS_ERROR(wstest::RunProcess(exec_.get(), id, ArgvProcess({"true"}), &r),
                        StatusCode::FAILED_PRECONDITION, "CAPABILITY_MISSING");
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        auto rw = wstest::StartStream(exec_.get(), &ctx, id, ArgvProcess({"true"}));
        EventLog log;
        wstest::ReadEvents(rw.get(), &log);
        EXPECT_WS_ERROR(rw->Finish(), StatusCode::FAILED_PRECONDITION, "CAPABILITY_MISSING");
        EXPECT_FALSE(log.started);
    }

    // `shell` without `fs` is enough to run commands (in the workspace's
    // directory), while the file RPCs stay closed.
    {
        ClientContext ctx;
        OpenRequest req;
        req.mutable_local_bash();
        req.mutable_capabilities()->mutable_shell()->add_allowed_commands("pwd");
        OpenResponse resp;
        ASSERT_TRUE(wsstub_->Open(&ctx, req, &resp).ok());
        const std::string id = resp.workspace().id();
        ASSERT_TRUE(wstest::RunProcess(exec_.get(), id, ArgvProcess({"pwd"}), &r).ok());
        EXPECT_EQ(r.exited().cause(), workspace::v1::EXIT_CAUSE_EXITED);
        EXPECT_EQ(r.stdout(), srv_->workspace_dir(id) + "\n");
        std::string data;
        EXPECT_WS_ERROR(wstest::Read(fs_.get(), id, "x", &data), StatusCode::FAILED_PRECONDITION,
                        "CAPABILITY_MISSING");
    }

    // Unknown and closed workspaces, on every RPC.
    wstest::Ws closed = wstest::OpenShell(wsstub_.get(), {"true"});
    {
        ClientContext ctx;
        CloseRequest req;
        CloseResponse resp;
        req.set_workspace_id(closed.id);
        ASSERT_TRUE(wsstub_->Close(&ctx, req, &resp).ok());
    }
    for (const auto &id : {unknown, closed.id, std::string("not-an-id")}) {
        EXPECT_WS_ERROR(wstest::RunProcess(exec_.get(), id, ArgvProcess({"true"}), &r),
                        StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE")
            << id;
        {
            ClientContext ctx;
            ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
            auto rw = wstest::StartStream(exec_.get(), &ctx, id, ArgvProcess({"true"}));
            EventLog log;
            wstest::ReadEvents(rw.get(), &log);
            EXPECT_WS_ERROR(rw->Finish(), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE") << id;
        }
        ListProcessesResponse list;
        EXPECT_WS_ERROR(ListProcs(&list, id), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE") << id;
        EXPECT_WS_ERROR(Signal("x", "", 9, id), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE") << id;
        {
            ClientContext ctx;
            ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
            AttachRequest req;
            req.set_workspace_id(id);
            req.set_id("x");
            auto rd = exec_->Attach(&ctx, req);
            EventLog log;
            wstest::ReadEvents(rd.get(), &log);
            EXPECT_WS_ERROR(rd->Finish(), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE") << id;
        }
    }
}

} // namespace

namespace
{

// A command cannot write a file past the workspace's file size cap, as the
// API cannot: the kernel stops the write at the cap (RLIMIT_FSIZE), in
// local-bash and in local-sandbox alike (in either exec mode: a box keeps
// the limit it was started with), and the file holds exactly the cap's
// bytes.
TEST_F(ExecTest, CommandsCannotWritePastTheFileSizeCap)
{
    for (const char *provider : {"local-bash", "local-sandbox", "local-sandbox agent"}) {
        SCOPED_TRACE(provider);
        ClientContext ctx;
        OpenRequest req;
        if (std::string(provider) == "local-bash")
            req.mutable_local_bash();
        else if (std::string(provider) == "local-sandbox")
            req.mutable_local_sandbox()->set_exec_mode(EXEC_MODE_PER_COMMAND);
        else
            req.mutable_local_sandbox()->set_exec_mode(EXEC_MODE_AGENT);
        req.mutable_capabilities()->mutable_fs()->set_max_file_size_bytes(1 << 20);
        for (const char *c : {"sh", "head", "stat"})
            req.mutable_capabilities()->mutable_shell()->add_allowed_commands(c);
        OpenResponse resp;
        ASSERT_TRUE(wsstub_->Open(&ctx, req, &resp).ok());
        const std::string id = resp.workspace().id();
        RunResponse r;
        ASSERT_TRUE(wstest::RunProcess(exec_.get(), id,
                                       ArgvProcess({"sh", "-c",
                                                    "head -c 3000000 /dev/zero > big; echo $?; "
                                                    "stat -c %s big"}),
                                       &r)
                        .ok());
        // head died of SIGXFSZ (25): the shell says 128 + 25.
        EXPECT_EQ(r.stdout(), "153\n1048576\n") << r.stderr();
        struct stat st;
        ASSERT_EQ(stat((srv_->workspace_dir(id) + "/big").c_str(), &st), 0);
        EXPECT_EQ(st.st_size, 1 << 20);

        // Under the cap, writes go through.
        ASSERT_TRUE(wstest::RunProcess(exec_.get(), id,
                                       ArgvProcess({"sh", "-c",
                                                    "head -c 1000000 /dev/zero > small; echo $?; "
                                                    "stat -c %s small"}),
                                       &r)
                        .ok());
        EXPECT_EQ(r.stdout(), "0\n1000000\n") << r.stderr();
    }
}

} // namespace
