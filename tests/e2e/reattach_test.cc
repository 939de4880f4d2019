// Interactive reattach end to end: a command started with stdin (or a
// terminal) on one connection is fed, closed and resized from another with
// the unary Exec.SendInput, CloseInput and Resize, and read back through
// Attach. Offsets make a retried SendInput deliver nothing twice; bytes
// sent on the Start stream count in the same offsets; ListProcesses shows
// the stdin's state and the terminal's size. Each test runs against every
// provider with a shell: local-bash, local-sandbox in both exec modes, and
// (the reattach_docker_test target, WS_TEST_REATTACH_DOCKER=1) docker in
// both exec modes, against the real daemon. Then, on local-bash in both
// targets: another tenant reaches none of it, and a command of a workspace
// whose ttl ran out ends with cause EXPIRED.
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;
using wstest::ArgvProcess;
using wstest::EventLog;
using wstest::Server;

namespace
{

using Clock = std::chrono::steady_clock;

const char kDockerImage[] = "workspaced-test:busybox";
const std::vector<std::string> kAllowed = {"sh", "cat", "sleep", "stty", "env", "true"};

struct Backend {
    std::string name;
    std::string provider;
    ExecMode mode;
};

// For test failure messages (gtest would print the bytes).
void PrintTo(const Backend &b, std::ostream *os)
{
    *os << b.name;
}

bool DockerRun()
{
    const char *d = getenv("WS_TEST_REATTACH_DOCKER");
    return d && std::string(d) == "1";
}

std::vector<Backend> Backends()
{
    if (DockerRun())
        return {{"DockerAgent", "docker", EXEC_MODE_AGENT},
                {"DockerPerCommand", "docker", EXEC_MODE_PER_COMMAND}};
    return {{"LocalBash", "local-bash", EXEC_MODE_DEFAULT},
            {"SandboxAgent", "local-sandbox", EXEC_MODE_AGENT},
            {"SandboxPerCommand", "local-sandbox", EXEC_MODE_PER_COMMAND}};
}

std::chrono::system_clock::time_point Deadline(int s = 60)
{
    return std::chrono::system_clock::now() + std::chrono::seconds(s);
}

grpc::Status OpenIn(Workspaces::Stub *stub, const Backend &b, std::string *ret_id)
{
    OpenRequest req;
    if (b.provider == "local-bash") {
        req.mutable_local_bash();
    } else if (b.provider == "local-sandbox") {
        req.mutable_local_sandbox()->set_exec_mode(b.mode);
    } else {
        DockerConfig *dc = req.mutable_docker();
        dc->set_image(kDockerImage);
        dc->set_exec_mode(b.mode);
    }
    req.mutable_capabilities()->mutable_fs();
    ShellCapability *shell = req.mutable_capabilities()->mutable_shell();
    for (const auto &c : kAllowed)
        shell->add_allowed_commands(c);
    OpenResponse resp;
    ClientContext ctx;
    ctx.set_deadline(Deadline(120));
    grpc::Status s = stub->Open(&ctx, req, &resp);
    if (s.ok())
        *ret_id = resp.workspace().id();
    return s;
}

// The unary calls, by tag (or id when `id` is set).
struct Proc {
    std::string ws;
    std::string tag;
    std::string id;
};

grpc::Status SendInput(Exec::Stub *ex, const Proc &p, const std::string &data, uint64_t offset,
                       SendInputResponse *resp, bool append = false)
{
    SendInputRequest req;
    req.set_workspace_id(p.ws);
    req.set_tag(p.id.empty() ? p.tag : "");
    req.set_id(p.id);
    req.set_data(data);
    req.set_offset(offset);
    req.set_append(append);
    ClientContext ctx;
    ctx.set_deadline(Deadline());
    return ex->SendInput(&ctx, req, resp);
}

grpc::Status CloseInput(Exec::Stub *ex, const Proc &p, CloseInputResponse *resp)
{
    CloseInputRequest req;
    req.set_workspace_id(p.ws);
    req.set_tag(p.id.empty() ? p.tag : "");
    req.set_id(p.id);
    ClientContext ctx;
    ctx.set_deadline(Deadline());
    return ex->CloseInput(&ctx, req, resp);
}

grpc::Status Resize(Exec::Stub *ex, const Proc &p, uint32_t rows, uint32_t cols)
{
    ResizeRequest req;
    req.set_workspace_id(p.ws);
    req.set_tag(p.id.empty() ? p.tag : "");
    req.set_id(p.id);
    req.mutable_size()->set_rows(rows);
    req.mutable_size()->set_cols(cols);
    ResizeResponse resp;
    ClientContext ctx;
    ctx.set_deadline(Deadline());
    return ex->Resize(&ctx, req, &resp);
}

grpc::Status Kill(Exec::Stub *ex, const Proc &p)
{
    SendSignalRequest req;
    req.set_workspace_id(p.ws);
    req.set_tag(p.tag);
    req.set_signal(SIGKILL);
    SendSignalResponse resp;
    ClientContext ctx;
    ctx.set_deadline(Deadline());
    return ex->SendSignal(&ctx, req, &resp);
}

// The listed process with this tag; fails the test when it is missing.
ProcessInfo Listed(Exec::Stub *ex, const std::string &ws, const std::string &tag)
{
    ListProcessesRequest req;
    req.set_workspace_id(ws);
    ListProcessesResponse resp;
    ClientContext ctx;
    ctx.set_deadline(Deadline());
    grpc::Status s = ex->ListProcesses(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    for (const auto &p : resp.processes())
        if (p.tag() == tag)
            return p;
    ADD_FAILURE() << "no process tagged " << tag << " listed";
    return ProcessInfo();
}

// Starts `pc` as a background process on its own call and stream, runs
// `while_attached` once `started` has come (and, when `until` is given,
// once `until(log)` holds), then cancels the stream: the process runs on.
// Returns the events read.
EventLog StartAndDrop(Exec::Stub *ex, const std::string &ws, const ProcessConfig &pc,
                      const std::function<void(wstest::StartStreamRW *)> &while_attached = nullptr,
                      const std::function<bool(const EventLog &)> &until = nullptr)
{
    ClientContext ctx;
    ctx.set_deadline(Deadline(120));
    auto rw = wstest::StartStream(ex, &ctx, ws, pc);
    EventLog log;
    EXPECT_TRUE(wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) { return l.started; }))
        << wstest::Problems(log);
    if (while_attached)
        while_attached(rw.get());
    if (until) {
        EXPECT_TRUE(wstest::ReadEvents(rw.get(), &log, until)) << wstest::Problems(log);
    }
    ctx.TryCancel();
    (void)rw->Finish();
    return log;
}

class ReattachTest : public ::testing::TestWithParam<Backend>
{
  protected:
    void SetUp() override
    {
        srv_ = std::make_unique<Server>();
        ws_ = srv_->workspaces();
        // The first connection starts commands; a second one, a channel of
        // its own, reattaches to them.
        ex1_ = srv_->exec();
        ex2_ = Exec::NewStub(srv_->Channel(""));
        grpc::Status s = OpenIn(ws_.get(), GetParam(), &id_);
        ASSERT_TRUE(s.ok()) << GetParam().provider << ": " << s.error_message();
    }
    void TearDown() override
    {
        if (id_.empty())
            return;
        CloseRequest req;
        req.set_workspace_id(id_);
        CloseResponse resp;
        ClientContext ctx;
        ctx.set_deadline(Deadline(120));
        (void)ws_->Close(&ctx, req, &resp);
    }

    bool Docker() const
    {
        return GetParam().provider == "docker";
    }
    // stty as the box has it (the busybox image has the applet only).
    std::string Stty() const
    {
        return Docker() ? "busybox stty" : "stty";
    }

    // An Attach by tag from `offset` on the second connection, read until
    // `until` holds (then `then` runs) and on to the end.
    grpc::Status AttachAll(const std::string &tag, uint64_t offset, EventLog *log,
                           const std::function<bool(const EventLog &)> &until = nullptr,
                           const std::function<void()> &then = nullptr)
    {
        AttachRequest req;
        req.set_workspace_id(id_);
        req.set_tag(tag);
        req.set_offset(offset);
        ClientContext ctx;
        ctx.set_deadline(Deadline(120));
        auto r = ex2_->Attach(&ctx, req);
        if (until) {
            bool open = wstest::ReadEvents(r.get(), log, until);
            EXPECT_TRUE(open) << "the stream ended before the condition held: "
                              << wstest::Problems(*log) << " stdout '" << log->out.data << "' pty '"
                              << log->pty.data << "'";
            if (open && then)
                then();
        }
        wstest::ReadEvents(r.get(), log);
        return r->Finish();
    }

    std::unique_ptr<Server> srv_;
    std::unique_ptr<Workspaces::Stub> ws_;
    std::unique_ptr<Exec::Stub> ex1_, ex2_;
    std::string id_;
};

TEST_P(ReattachTest, SendInputFromAnotherConnectionWithOffsetsAndCloseInput)
{
    ProcessConfig pc = ArgvProcess({"cat"});
    pc.set_stdin(true);
    pc.set_background(true);
    pc.set_tag("cat-1");
    pc.set_timeout_ms(120000);
    // "abc" on the Start stream first, echoed before the stream goes: the
    // stdin offset counts it.
    EventLog first = StartAndDrop(
        ex1_.get(), id_, pc,
        [](wstest::StartStreamRW *rw) {
            StartRequest in;
            in.set_stdin("abc");
            rw->Write(in);
        },
        [](const EventLog &l) { return l.out.data.size() >= 3; });
    EXPECT_EQ(first.out.data, "abc");
    const Proc p{id_, "cat-1", ""};

    ProcessInfo info = Listed(ex2_.get(), id_, "cat-1");
    EXPECT_TRUE(info.running()) << "the background cat did not survive its stream";
    EXPECT_TRUE(info.stdin_open());
    EXPECT_EQ(info.stdin_offset(), 3u);
    EXPECT_FALSE(info.has_pty());

    SendInputResponse r;
    grpc::Status s = SendInput(ex2_.get(), p, "hello\n", 3, &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(r.offset(), 9u);
    // The same call again (a retry after a lost answer) adds nothing.
    s = SendInput(ex2_.get(), p, "hello\n", 3, &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(r.offset(), 9u);
    // A retry that overlaps what was taken adds only what is new.
    s = SendInput(ex2_.get(), p, "lo\nworld\n", 6, &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(r.offset(), 15u);
    // Past the offset: bytes would be missing.
    s = SendInput(ex2_.get(), p, "zzz", 16, &r);
    EXPECT_WS_ERROR(s, StatusCode::OUT_OF_RANGE, "INPUT_GAP");
    EXPECT_EQ(wstest::Decode(s).metadata["offset"], "15") << s.error_message();
    // append ignores the offset.
    s = SendInput(ex2_.get(), p, "tail\n", 0, &r, true);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(r.offset(), 20u);
    // By id as well as by tag.
    s = SendInput(ex2_.get(), Proc{id_, "", first.start.id()}, "id\n", 20, &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(r.offset(), 23u);

    info = Listed(ex2_.get(), id_, "cat-1");
    EXPECT_TRUE(info.stdin_open());
    EXPECT_EQ(info.stdin_offset(), 23u);

    const std::string want = "abchello\nworld\ntail\nid\n";
    EventLog a;
    s = AttachAll(
        "cat-1", 0, &a, [&](const EventLog &l) { return l.out.data.size() >= want.size(); },
        [&] {
            CloseInputResponse cr;
            grpc::Status c = CloseInput(ex2_.get(), p, &cr);
            EXPECT_TRUE(c.ok()) << c.error_message();
            EXPECT_EQ(cr.offset(), 23u);
        });
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(wstest::Problems(a), "");
    // Each byte exactly once, in order.
    EXPECT_EQ(a.out.data, want);
    ASSERT_TRUE(a.exited) << "cat did not end when its stdin closed";
    EXPECT_EQ(a.exit.cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(a.exit.exit_code(), 0);

    // Ended: its stdin takes nothing; CloseInput stays harmless.
    s = SendInput(ex2_.get(), p, "late\n", 23, &r);
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "STDIN_CLOSED");
    CloseInputResponse cr;
    s = CloseInput(ex2_.get(), p, &cr);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(cr.offset(), 23u);
    info = Listed(ex2_.get(), id_, "cat-1");
    EXPECT_FALSE(info.running());
    EXPECT_FALSE(info.stdin_open());
    EXPECT_EQ(info.stdin_offset(), 23u);
}

TEST_P(ReattachTest, CloseInputRefusesLaterInputWhileTheProcessRuns)
{
    // cat ends at EOF, the shell runs on, reading nothing more.
    ProcessConfig pc =
        ArgvProcess({"sh", "-c", "cat; echo cat-done; while true; do sleep 1; done"});
    pc.set_stdin(true);
    pc.set_background(true);
    pc.set_tag("held");
    pc.set_timeout_ms(120000);
    StartAndDrop(ex1_.get(), id_, pc);
    const Proc p{id_, "held", ""};

    SendInputResponse r;
    grpc::Status s = SendInput(ex2_.get(), p, "one\n", 0, &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    CloseInputResponse cr;
    s = CloseInput(ex2_.get(), p, &cr);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(cr.offset(), 4u);
    // Closing twice is fine.
    s = CloseInput(ex2_.get(), p, &cr);
    ASSERT_TRUE(s.ok()) << s.error_message();

    EventLog a;
    s = AttachAll(
        "held", 0, &a,
        [](const EventLog &l) { return l.out.data.find("cat-done\n") != std::string::npos; },
        [&] {
            ProcessInfo info = Listed(ex2_.get(), id_, "held");
            EXPECT_TRUE(info.running());
            EXPECT_FALSE(info.stdin_open());
            EXPECT_EQ(info.stdin_offset(), 4u);
            SendInputResponse late;
            EXPECT_WS_ERROR(SendInput(ex2_.get(), p, "two\n", 4, &late),
                            StatusCode::FAILED_PRECONDITION, "STDIN_CLOSED");
            EXPECT_TRUE(Kill(ex2_.get(), p).ok());
        });
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(a.out.data, "one\ncat-done\n");
}

TEST_P(ReattachTest, ProcessWithoutStdinOrTerminal)
{
    ProcessConfig pc = ArgvProcess({"sh", "-c", "while true; do sleep 1; done"});
    pc.set_background(true);
    pc.set_tag("nostdin");
    pc.set_timeout_ms(120000);
    StartAndDrop(ex1_.get(), id_, pc);
    const Proc p{id_, "nostdin", ""};

    ProcessInfo info = Listed(ex2_.get(), id_, "nostdin");
    EXPECT_TRUE(info.running());
    EXPECT_FALSE(info.stdin_open());
    EXPECT_FALSE(info.has_pty());
    SendInputResponse r;
    EXPECT_WS_ERROR(SendInput(ex2_.get(), p, "x", 0, &r), StatusCode::FAILED_PRECONDITION,
                    "STDIN_CLOSED");
    EXPECT_WS_ERROR(Resize(ex2_.get(), p, 30, 100), StatusCode::FAILED_PRECONDITION, "NO_PTY");
    CloseInputResponse cr;
    grpc::Status s = CloseInput(ex2_.get(), p, &cr);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(cr.offset(), 0u);
    // Malformed requests: no target, both targets, a size out of range.
    EXPECT_WS_ERROR(SendInput(ex2_.get(), Proc{id_, "", ""}, "x", 0, &r),
                    StatusCode::INVALID_ARGUMENT, "MALFORMED");
    SendInputRequest both;
    both.set_workspace_id(id_);
    both.set_id("p_0000000000000000");
    both.set_tag("nostdin");
    ClientContext ctx;
    ctx.set_deadline(Deadline());
    EXPECT_WS_ERROR(ex2_->SendInput(&ctx, both, &r), StatusCode::INVALID_ARGUMENT, "MALFORMED");
    EXPECT_WS_ERROR(Resize(ex2_.get(), p, 0, 100), StatusCode::INVALID_ARGUMENT, "MALFORMED");
    EXPECT_WS_ERROR(SendInput(ex2_.get(), Proc{id_, "no-such-tag", ""}, "x", 0, &r),
                    StatusCode::NOT_FOUND, "NO_SUCH_PROCESS");
    EXPECT_TRUE(Kill(ex2_.get(), p).ok());
}

TEST_P(ReattachTest, ResizeReachesTheTerminalOfAReattachedProcess)
{
    // Prints its size, then again for every line it reads, until EOF.
    const std::string stty = Stty();
    ProcessConfig pc = ArgvProcess(
        {"sh", "-c",
         "echo ready; " + stty + " size; while read x; do echo got-$x; " + stty + " size; done"});
    pc.mutable_pty()->set_rows(24);
    pc.mutable_pty()->set_cols(80);
    pc.set_background(true);
    pc.set_tag("tty");
    pc.set_timeout_ms(120000);
    // Until its first look at the size has printed (a line after "ready").
    StartAndDrop(ex1_.get(), id_, pc, nullptr, [](const EventLog &l) {
        size_t at = l.pty.data.find("ready\r\n");
        return at != std::string::npos && l.pty.data.find('\n', at + 7) != std::string::npos;
    });
    const Proc p{id_, "tty", ""};

    ProcessInfo info = Listed(ex2_.get(), id_, "tty");
    EXPECT_TRUE(info.running());
    EXPECT_TRUE(info.stdin_open()) << "a terminal takes input";
    ASSERT_TRUE(info.has_pty());
    EXPECT_EQ(info.pty().rows(), 24u);
    EXPECT_EQ(info.pty().cols(), 80u);

    grpc::Status s = Resize(ex2_.get(), p, 40, 132);
    ASSERT_TRUE(s.ok()) << s.error_message();
    info = Listed(ex2_.get(), id_, "tty");
    ASSERT_TRUE(info.has_pty());
    EXPECT_EQ(info.pty().rows(), 40u);
    EXPECT_EQ(info.pty().cols(), 132u);

    // A line per look: where the size reaches the box through a relay
    // (docker per-command) it may take a moment, so the test sends another
    // line each time the last one was answered until the new size shows,
    // instead of waiting for a time.
    EventLog a;
    int sent = 0;
    uint64_t offset = 0;
    s = AttachAll(
        "tty", 0, &a,
        [&](const EventLog &l) {
            if (l.pty.data.find("40 132") != std::string::npos || sent > 200)
                return true; // (a give-up fails the checks below)
            int answered = 0;
            for (size_t at = l.pty.data.find("got-l"); at != std::string::npos;
                 at = l.pty.data.find("got-l", at + 1))
                answered++;
            if (answered == sent) {
                SendInputResponse r;
                grpc::Status w = SendInput(ex2_.get(), p, "l\n", offset, &r);
                EXPECT_TRUE(w.ok()) << w.error_message();
                offset = r.offset();
                sent++;
            }
            return false;
        },
        [&] {
            CloseInputResponse cr;
            grpc::Status c = CloseInput(ex2_.get(), p, &cr);
            EXPECT_TRUE(c.ok()) << c.error_message();
        });
    ASSERT_TRUE(s.ok()) << s.error_message();
    // The size it started with (docker per-command sets it through the
    // relay once the exec runs, so its first look may come before).
    if (!(Docker() && GetParam().mode == EXEC_MODE_PER_COMMAND)) {
        EXPECT_NE(a.pty.data.find("24 80"), std::string::npos) << a.pty.data;
    }
    EXPECT_NE(a.pty.data.find("got-l"), std::string::npos) << a.pty.data;
    EXPECT_NE(a.pty.data.find("40 132"), std::string::npos) << a.pty.data;
    ASSERT_TRUE(a.exited) << a.pty.data;
    EXPECT_EQ(a.exit.cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(a.exit.exit_code(), 0);
}

TEST_P(ReattachTest, QueueLimitRefusesAndDropsNothing)
{
    // A command that never reads: what SendInput queues stays queued.
    ProcessConfig pc = ArgvProcess({"sh", "-c", "while true; do sleep 1; done"});
    pc.set_stdin(true);
    pc.set_background(true);
    pc.set_tag("full");
    pc.set_timeout_ms(120000);
    StartAndDrop(ex1_.get(), id_, pc);
    const Proc p{id_, "full", ""};

    SendInputResponse r;
    // Over the per-call cap.
    EXPECT_WS_ERROR(SendInput(ex2_.get(), p, std::string((1 << 20) + 1, 'x'), 0, &r),
                    StatusCode::INVALID_ARGUMENT, "LIMIT");
    // 1 MiB calls until the queue is full: the pipe takes some first.
    const std::string mib(1 << 20, 'q');
    uint64_t taken = 0;
    grpc::Status refused;
    for (int i = 0; i < 8; i++) {
        grpc::Status s = SendInput(ex2_.get(), p, mib, taken, &r);
        if (!s.ok()) {
            refused = s;
            break;
        }
        EXPECT_EQ(r.offset(), taken + mib.size());
        taken = r.offset();
    }
    EXPECT_WS_ERROR(refused, StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
    wstest::Error e = wstest::Decode(refused);
    EXPECT_EQ(e.metadata["quota"], "stdin_queued_bytes");
    EXPECT_EQ(e.metadata["limit"], std::to_string(1 << 20));
    EXPECT_GE(taken, mib.size());
    // Nothing of the refused call was taken.
    ProcessInfo info = Listed(ex2_.get(), id_, "full");
    EXPECT_EQ(info.stdin_offset(), taken);
    EXPECT_TRUE(info.stdin_open());
    // A small append still fits once... or not: either way the offset says
    // exactly what was taken.
    grpc::Status s = SendInput(ex2_.get(), p, "x", 0, &r, true);
    if (s.ok()) {
        EXPECT_EQ(r.offset(), taken + 1);
    } else {
        EXPECT_WS_ERROR(s, StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
    }
    EXPECT_TRUE(Kill(ex2_.get(), p).ok());
}

INSTANTIATE_TEST_SUITE_P(Providers, ReattachTest, ::testing::ValuesIn(Backends()),
                         [](const ::testing::TestParamInfo<Backend> &i) { return i.param.name; });

// ---- tenants ----

const char *const kAlice = "tok-alice-reattach-0123";
const char *const kBob = "tok-bob-reattach-4567";

TEST(ReattachTenants, AnotherTenantsWorkspaceOrProcessIsNotFound)
{
    std::string tokens = wstest::MakeTempDir("tokens") + "/tokens";
    wstest::WriteHostFile(tokens, "alice " + wstest::Sha256Hex(kAlice) + "\nbob " +
                                      wstest::Sha256Hex(kBob) + "\n");
    Server srv({"--tokens-file", tokens});
    auto alice_ws = Workspaces::NewStub(srv.Channel(kAlice));
    auto bob_ws = Workspaces::NewStub(srv.Channel(kBob));
    auto alice = Exec::NewStub(srv.Channel(kAlice));
    auto bob = Exec::NewStub(srv.Channel(kBob));
    const Backend lb{"LocalBash", "local-bash", EXEC_MODE_DEFAULT};
    std::string a_id, b_id;
    ASSERT_TRUE(OpenIn(alice_ws.get(), lb, &a_id).ok());
    ASSERT_TRUE(OpenIn(bob_ws.get(), lb, &b_id).ok());

    ProcessConfig pc = ArgvProcess({"cat"});
    pc.set_stdin(true);
    pc.mutable_pty()->set_rows(24);
    pc.mutable_pty()->set_cols(80);
    pc.set_background(true);
    pc.set_tag("mine");
    pc.set_timeout_ms(120000);
    EventLog started = StartAndDrop(alice.get(), a_id, pc);
    const std::string pid = started.start.id();
    ASSERT_FALSE(pid.empty());

    // Bob, naming Alice's workspace: it does not exist for him.
    SendInputResponse r;
    CloseInputResponse cr;
    const Proc in_alices{a_id, "mine", ""};
    EXPECT_EQ(SendInput(bob.get(), in_alices, "x", 0, &r).error_code(), StatusCode::NOT_FOUND);
    EXPECT_EQ(CloseInput(bob.get(), in_alices, &cr).error_code(), StatusCode::NOT_FOUND);
    EXPECT_EQ(Resize(bob.get(), in_alices, 30, 100).error_code(), StatusCode::NOT_FOUND);
    // Bob, naming Alice's process in his own workspace: no such process.
    const Proc in_his{b_id, "", pid};
    EXPECT_WS_ERROR(SendInput(bob.get(), in_his, "x", 0, &r), StatusCode::NOT_FOUND,
                    "NO_SUCH_PROCESS");
    EXPECT_WS_ERROR(CloseInput(bob.get(), in_his, &cr), StatusCode::NOT_FOUND, "NO_SUCH_PROCESS");
    EXPECT_WS_ERROR(Resize(bob.get(), in_his, 30, 100), StatusCode::NOT_FOUND, "NO_SUCH_PROCESS");

    // Nothing of Bob's reached it: its stdin is open, took nothing, and
    // its terminal kept its size.
    ProcessInfo info = Listed(alice.get(), a_id, "mine");
    EXPECT_TRUE(info.running());
    EXPECT_TRUE(info.stdin_open());
    EXPECT_EQ(info.stdin_offset(), 0u);
    EXPECT_EQ(info.pty().rows(), 24u);
    // Alice herself reaches it.
    grpc::Status s = SendInput(alice.get(), in_alices, "ok", 0, &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(r.offset(), 2u);
    EXPECT_TRUE(Kill(alice.get(), in_alices).ok());
}

// ---- expiry ----

// A workspace whose ttl runs out ends its commands with cause EXPIRED, and
// a stream attached to one sees it. The attached stream and the running
// command keep it from idling out, not from its ttl.
TEST(ReattachExpiry, ACommandOfAnExpiredWorkspaceEndsWithCauseExpired)
{
    Server srv;
    auto ws = srv.workspaces();
    auto ex = srv.exec();
    OpenRequest req;
    req.mutable_local_bash();
    req.mutable_capabilities()->mutable_fs();
    for (const auto &c : kAllowed)
        req.mutable_capabilities()->mutable_shell()->add_allowed_commands(c);
    req.mutable_lifetime()->set_ttl_ms(3000);
    OpenResponse resp;
    {
        ClientContext ctx;
        ctx.set_deadline(Deadline());
        grpc::Status s = ws->Open(&ctx, req, &resp);
        ASSERT_TRUE(s.ok()) << s.error_message();
    }
    const std::string id = resp.workspace().id();
    ProcessConfig pc = ArgvProcess({"cat"});
    pc.set_stdin(true);
    pc.set_background(true);
    pc.set_tag("until-expiry");
    StartAndDrop(ex.get(), id, pc);

    AttachRequest areq;
    areq.set_workspace_id(id);
    areq.set_tag("until-expiry");
    ClientContext ctx;
    ctx.set_deadline(Deadline(120));
    auto r = ex->Attach(&ctx, areq);
    EventLog log;
    wstest::ReadEvents(r.get(), &log);
    (void)r->Finish();
    ASSERT_TRUE(log.exited) << "the command did not end with its workspace";
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EXPIRED);
}

} // namespace
