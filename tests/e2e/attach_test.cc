// A slow Docker attach holds no registry lock: while a restarted server waits
// on the daemon to re-attach a Docker workspace, every other call is served
// at once. Calls on the workspace being attached are answered UNAVAILABLE
// RETRY (Stat, Close) or with its state OPENING (Describe, List); calls on
// other workspaces go on as usual. The daemon is a fake that holds the image
// inspect of the attach for as long as the test wants.
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"
#include "tests/testutil/fake_dockerd.h"

namespace
{

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;
using testutil::FakeDockerd;
using wstest::Server;

// Each call below must come back long before this; a call that waits on the
// held attach instead ends with DEADLINE_EXCEEDED and fails its check.
constexpr auto kCallDeadline = std::chrono::seconds(20);

void SetDeadline(ClientContext *ctx)
{
    ctx->set_deadline(std::chrono::system_clock::now() + kCallDeadline);
}

// Runs `call` and returns its status, with the time it took in *ret_ms (for
// the failure messages: how long a call waited says what it waited on).
template <typename F> grpc::Status Timed(F call, long *ret_ms)
{
    auto t0 = std::chrono::steady_clock::now();
    grpc::Status s = call();
    *ret_ms = static_cast<long>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count());
    return s;
}

std::string Took(long ms)
{
    return " (the call took " + std::to_string(ms) + " ms)";
}

grpc::Status OpenDocker(Workspaces::Stub *stub, std::string *ret_id)
{
    OpenRequest req;
    DockerConfig *dc = req.mutable_docker();
    dc->set_image("busybox:fake");
    dc->set_pull_policy(PULL_NEVER);
    // The fake daemon starts no container's agent.
    dc->set_exec_mode(EXEC_MODE_PER_COMMAND);
    req.mutable_capabilities()->mutable_fs();
    OpenResponse resp;
    ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = stub->Open(&ctx, req, &resp);
    if (s.ok())
        *ret_id = resp.workspace().id();
    return s;
}

grpc::Status OpenMemory(Workspaces::Stub *stub)
{
    OpenRequest req;
    req.mutable_memory();
    req.mutable_capabilities()->mutable_fs();
    OpenResponse resp;
    ClientContext ctx;
    SetDeadline(&ctx);
    return stub->Open(&ctx, req, &resp);
}

grpc::Status Stat(FileSystem::Stub *fs, const std::string &id, const std::string &path,
                  StatResponse *resp)
{
    StatRequest req;
    req.set_workspace_id(id);
    req.set_path(path);
    ClientContext ctx;
    SetDeadline(&ctx);
    return fs->Stat(&ctx, req, resp);
}

grpc::Status Describe(Workspaces::Stub *stub, const std::string &id, DescribeResponse *resp)
{
    DescribeRequest req;
    req.set_workspace_id(id);
    ClientContext ctx;
    SetDeadline(&ctx);
    return stub->Describe(&ctx, req, resp);
}

grpc::Status List(Workspaces::Stub *stub, ListResponse *resp)
{
    ListRequest req;
    ClientContext ctx;
    SetDeadline(&ctx);
    return stub->List(&ctx, req, resp);
}

grpc::Status Close(Workspaces::Stub *stub, const std::string &id)
{
    CloseRequest req;
    req.set_workspace_id(id);
    CloseResponse resp;
    ClientContext ctx;
    SetDeadline(&ctx);
    return stub->Close(&ctx, req, &resp);
}

// Ends the fake's hold when it goes out of scope, before the server stops:
// the server's drain would otherwise wait for the held call.
class ReleaseAtExit
{
  public:
    explicit ReleaseAtExit(FakeDockerd *fake) : fake_(fake)
    {
    }
    ~ReleaseAtExit()
    {
        fake_->Release();
    }

  private:
    FakeDockerd *fake_;
};

class AttachTest : public ::testing::Test
{
  protected:
    std::vector<std::string> Args() const
    {
        return {"--docker-host", fake_.Host(), "--providers", "memory,local-bash,docker"};
    }

    FakeDockerd fake_;
};

TEST_F(AttachTest, HeldDockerAttachBlocksNoOtherCall)
{
    // 1. A Docker workspace D and a local-bash workspace L, each with a file,
    // left behind by a first server.
    std::string d_id, l_id, state_dir;
    {
        Server first(Args());
        state_dir = first.state_dir();
        auto ws = first.workspaces();
        auto fs = first.fs();
        grpc::Status s = OpenDocker(ws.get(), &d_id);
        ASSERT_TRUE(s.ok()) << s.error_message();
        l_id = wstest::Open(ws.get(), "local-bash").id;
        ASSERT_TRUE(wstest::Write(fs.get(), d_id, "d.txt", "docker").ok());
        ASSERT_TRUE(wstest::Write(fs.get(), l_id, "l.txt", "local").ok());
    }

    // 2. A second server on the same state directory knows both as
    // CONFIGURED; the first call on D attaches it and waits in the daemon.
    fake_.HoldImageInspect(true);
    Server second(Args(), state_dir);
    auto ws = second.workspaces();
    auto fs = second.fs();

    // 3. The first Stat of D is held in the image inspect of its attach.
    // Whatever fails below, the hold ends first, then the thread is joined,
    // then the server stops (destruction runs in reverse).
    StatResponse held_resp;
    grpc::Status held;
    std::thread t;
    struct Join {
        std::thread *t;
        ~Join()
        {
            if (t->joinable())
                t->join();
        }
    } join{&t};
    ReleaseAtExit release(&fake_);
    t = std::thread([&] { held = Stat(fs.get(), d_id, ".", &held_resp); });
    ASSERT_TRUE(fake_.WaitImageInspectArrived(10000))
        << "the restarted server never asked the daemon for the image";

    // 4. While it is held, every other call comes back.
    long ms = 0;
    StatResponse st;
    grpc::Status s = Timed([&] { return Stat(fs.get(), l_id, "l.txt", &st); }, &ms);
    EXPECT_TRUE(s.ok()) << "Stat(L): " << s.error_message() << Took(ms);
    EXPECT_EQ(5u, st.info().size());

    DescribeResponse dl;
    s = Timed([&] { return Describe(ws.get(), l_id, &dl); }, &ms);
    EXPECT_TRUE(s.ok()) << "Describe(L): " << s.error_message() << Took(ms);
    EXPECT_EQ(STATE_OPEN, dl.state());

    ListResponse list;
    s = Timed([&] { return List(ws.get(), &list); }, &ms);
    EXPECT_TRUE(s.ok()) << "List: " << s.error_message() << Took(ms);
    bool saw_d = false, saw_l = false;
    for (const auto &w : list.workspaces()) {
        if (w.id() == d_id) {
            saw_d = true;
            EXPECT_EQ(STATE_OPENING, w.state()) << "D in List";
        } else if (w.id() == l_id) {
            saw_l = true;
            EXPECT_EQ(STATE_OPEN, w.state()) << "L in List";
        }
    }
    EXPECT_TRUE(saw_d && saw_l) << "List: " << list.DebugString();

    DescribeResponse dd;
    s = Timed([&] { return Describe(ws.get(), d_id, &dd); }, &ms);
    EXPECT_TRUE(s.ok()) << "Describe(D): " << s.error_message() << Took(ms);
    EXPECT_EQ(STATE_OPENING, dd.state());

    s = Timed([&] { return Stat(fs.get(), d_id, "d.txt", &st); }, &ms);
    EXPECT_WS_ERROR(s, StatusCode::UNAVAILABLE, "RETRY") << "second Stat(D)" << Took(ms);
    EXPECT_NE(std::string::npos, s.error_message().find("being attached")) << s.error_message();

    s = Timed([&] { return Close(ws.get(), d_id); }, &ms);
    EXPECT_WS_ERROR(s, StatusCode::UNAVAILABLE, "RETRY") << "Close(D)" << Took(ms);
    EXPECT_EQ(0, fake_.Requests("DELETE /")) << "a Close refused for now removed the container";

    s = Timed([&] { return OpenMemory(ws.get()); }, &ms);
    EXPECT_TRUE(s.ok()) << "Open(memory): " << s.error_message() << Took(ms);

    // 5. Released, the held Stat completes; D is open with the fake's
    // container, and a Close now removes it once.
    fake_.Release();
    t.join();
    ASSERT_TRUE(held.ok()) << "the held Stat(D): " << held.error_message();
    EXPECT_EQ(FILE_TYPE_DIRECTORY, held_resp.info().type());

    s = Describe(ws.get(), d_id, &dd);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(STATE_OPEN, dd.state());
    ASSERT_TRUE(dd.has_container());
    std::vector<std::string> ids = fake_.Containers();
    ASSERT_EQ(1u, ids.size());
    EXPECT_EQ(ids[0], dd.container().id());

    s = Close(ws.get(), d_id);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(1, fake_.Requests("DELETE /"));
    EXPECT_TRUE(fake_.Containers().empty());
    EXPECT_EQ(0, fake_.Unhandled());
}

} // namespace
