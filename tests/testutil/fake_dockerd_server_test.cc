// The real server against the fake Docker daemon: a Docker workspace opens,
// answers file calls, describes its container and closes, with every call
// the server makes one the fake knows. Then the same across a restart with
// the image inspect held, which is how a test keeps a Docker attach in
// progress for as long as it needs.
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"
#include "tests/testutil/fake_dockerd.h"

namespace
{

using grpc::ClientContext;
using namespace workspace::v1;
using testutil::FakeDockerd;
using wstest::Server;

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
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status s = stub->Open(&ctx, req, &resp);
    if (s.ok())
        *ret_id = resp.workspace().id();
    return s;
}

grpc::Status Stat(FileSystem::Stub *fs, const std::string &id, const std::string &path,
                  StatResponse *resp)
{
    StatRequest req;
    req.set_workspace_id(id);
    req.set_path(path);
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return fs->Stat(&ctx, req, resp);
}

grpc::Status Describe(Workspaces::Stub *stub, const std::string &id, DescribeResponse *resp)
{
    DescribeRequest req;
    req.set_workspace_id(id);
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub->Describe(&ctx, req, resp);
}

grpc::Status Close(Workspaces::Stub *stub, const std::string &id)
{
    CloseRequest req;
    req.set_workspace_id(id);
    CloseResponse resp;
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub->Close(&ctx, req, &resp);
}

class FakeDockerdServer : public ::testing::Test
{
  protected:
    std::vector<std::string> Args() const
    {
        return {"--docker-host", fake_.Host(), "--providers", "memory,local-bash,docker"};
    }
    // Describe's container section is the fake's one container, running and
    // hardened as the server asked.
    void ExpectContainer(Workspaces::Stub *stub, const std::string &id)
    {
        DescribeResponse d;
        grpc::Status s = Describe(stub, id, &d);
        ASSERT_TRUE(s.ok()) << s.error_message();
        EXPECT_EQ(STATE_OPEN, d.state());
        EXPECT_EQ("container", d.isolation());
        ASSERT_TRUE(d.has_container());
        std::vector<std::string> ids = fake_.Containers();
        ASSERT_EQ(1u, ids.size());
        EXPECT_EQ(ids[0], d.container().id());
        EXPECT_TRUE(d.container().daemon_reachable());
        EXPECT_EQ("1.43", d.container().api_version());
        EXPECT_TRUE(d.container().running());
        EXPECT_TRUE(d.container().cap_drop_all());
        EXPECT_TRUE(d.container().no_new_privileges());
        EXPECT_TRUE(d.container().read_only_rootfs());
        EXPECT_EQ("none", d.container().network_mode());
        EXPECT_EQ(std::to_string(getuid()) + ":" + std::to_string(getgid()), d.container().user());
        EXPECT_EQ(0u, d.container().other_mounts());
    }

    FakeDockerd fake_;
};

TEST_F(FakeDockerdServer, OpenStatDescribeClose)
{
    Server srv(Args());
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    std::string id;
    grpc::Status s = OpenDocker(ws.get(), &id);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(1, fake_.Requests("POST /v1.43/containers/create?name="));
    EXPECT_EQ(1, fake_.Requests("POST /v1.43/containers/" + fake_.Containers().at(0) + "/start"));

    ASSERT_TRUE(wstest::Write(fs.get(), id, "hello.txt", "hello").ok());
    StatResponse st;
    s = Stat(fs.get(), id, "hello.txt", &st);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(5u, st.info().size());
    s = Stat(fs.get(), id, ".", &st);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(FILE_TYPE_DIRECTORY, st.info().type());

    ExpectContainer(ws.get(), id);

    EXPECT_EQ(0, fake_.Requests("DELETE /"));
    s = Close(ws.get(), id);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(1, fake_.Requests("DELETE /"));
    EXPECT_TRUE(fake_.Containers().empty());
    EXPECT_GE(fake_.Requests("GET /_ping"), 1);
    EXPECT_EQ(0, fake_.Unhandled());
}

TEST_F(FakeDockerdServer, HeldAttachAfterRestart)
{
    std::string id, state_dir;
    {
        Server first(Args());
        state_dir = first.state_dir();
        auto ws = first.workspaces();
        grpc::Status s = OpenDocker(ws.get(), &id);
        ASSERT_TRUE(s.ok()) << s.error_message();
        ASSERT_TRUE(wstest::Write(first.fs().get(), id, "kept.txt", "kept").ok());
    }
    // The first server left its container (a restart finds it by name); the
    // second one attaches the workspace again on its first use, and waits in
    // the image inspect for as long as the fake holds it.
    fake_.HoldImageInspect(true);
    Server second(Args(), state_dir);
    auto ws = second.workspaces();
    auto fs = second.fs();
    StatResponse st;
    grpc::Status held;
    std::thread t([&] { held = Stat(fs.get(), id, "kept.txt", &st); });
    bool arrived = fake_.WaitImageInspectArrived(10000);
    fake_.Release();
    t.join();
    ASSERT_TRUE(arrived) << "the restarted server never asked for the image";
    ASSERT_TRUE(held.ok()) << held.error_message();
    EXPECT_EQ(4u, st.info().size());

    ExpectContainer(ws.get(), id);
    grpc::Status s = Close(ws.get(), id);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(1, fake_.Requests("DELETE /"));
    EXPECT_TRUE(fake_.Containers().empty());
    EXPECT_EQ(0, fake_.Unhandled());
}

} // namespace
