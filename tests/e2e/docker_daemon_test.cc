// The Docker provider when the daemon goes away: Open fails closed with
// UNAVAILABLE and transient=true (never runs without the container), and
// works again once the daemon is back. Stops the real dockerd, so this
// suite runs alone (tag "exclusive") and restarts the daemon with the
// suite's own fixture whatever happens.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;

namespace
{

const char kFixture[] = "tests/fixtures/dockerd.sh";

bool Ping()
{
    return system("curl -fsS --max-time 2 --unix-socket /var/run/docker.sock "
                  "http://localhost/_ping >/dev/null 2>&1") == 0;
}

pid_t DockerdPid()
{
    std::ifstream f("/var/run/docker.pid");
    pid_t pid = 0;
    f >> pid;
    return pid;
}

grpc::Status OpenDocker(Workspaces::Stub *stub, OpenResponse *resp)
{
    OpenRequest req;
    req.mutable_docker()->set_image("workspaced-test:busybox");
    req.mutable_capabilities()->mutable_fs();
    req.mutable_capabilities()->mutable_shell()->add_allowed_commands("echo");
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return stub->Open(&ctx, req, resp);
}

struct RestartDaemon {
    ~RestartDaemon()
    {
        if (!Ping()) {
            EXPECT_EQ(system((std::string("bash ") + kFixture).c_str()), 0);
        }
    }
};

TEST(DockerDaemon, StoppedDaemonIsUnavailableTransientAndRecovers)
{
    ASSERT_TRUE(Ping()) << "the Docker daemon must be running: this test never skips";
    wstest::Server srv;
    auto ws = srv.workspaces();
    OpenResponse before;
    ASSERT_TRUE(OpenDocker(ws.get(), &before).ok());

    RestartDaemon restart;
    pid_t pid = DockerdPid();
    ASSERT_GT(pid, 0);
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    for (int i = 0; i < 300 && (Ping() || kill(pid, 0) == 0); i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_FALSE(Ping()) << "dockerd did not stop";

    OpenResponse resp;
    grpc::Status s = OpenDocker(ws.get(), &resp);
    EXPECT_WS_ERROR(s, StatusCode::UNAVAILABLE, "WORKSPACE_FAILED");
    wstest::Error e = wstest::Decode(s);
    EXPECT_EQ(e.metadata["transient"], "true");
    // Listed as unavailable, with the reason.
    auto pr = srv.providers();
    ClientContext pctx;
    ListProvidersResponse lp;
    ASSERT_TRUE(pr->ListProviders(&pctx, ListProvidersRequest(), &lp).ok());
    for (const auto &p : lp.providers())
        if (p.kind() == "docker") {
            EXPECT_FALSE(p.available());
            EXPECT_NE(p.reason(), "");
        }
    // And the workspace opened before cannot run a command without its
    // container: no fallback to the host.
    RunResponse rr;
    auto ex = srv.exec();
    grpc::Status rs = wstest::RunProcess(ex.get(), before.workspace().id(),
                                         wstest::ArgvProcess({"echo", "hi"}), &rr);
    EXPECT_FALSE(rs.ok());

    // Describe says so, read now rather than remembered.
    {
        DescribeRequest dr;
        dr.set_workspace_id(before.workspace().id());
        DescribeResponse d;
        ClientContext dctx;
        ASSERT_TRUE(ws->Describe(&dctx, dr, &d).ok());
        ASSERT_TRUE(d.has_container());
        EXPECT_FALSE(d.container().daemon_reachable());
        EXPECT_EQ(d.container().id(), "");
    }
    // Close cannot remove the container now: it fails, transient, and
    // leaves the workspace as it was, to be closed again later.
    {
        CloseRequest cr;
        cr.set_workspace_id(before.workspace().id());
        CloseResponse c;
        ClientContext cctx;
        cctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        grpc::Status cs = ws->Close(&cctx, cr, &c);
        EXPECT_WS_ERROR(cs, StatusCode::UNAVAILABLE, "WORKSPACE_FAILED");
        EXPECT_EQ(access(srv.workspace_dir(before.workspace().id()).c_str(), F_OK), 0)
            << "the files went although the Close failed";
    }

    ASSERT_EQ(system((std::string("bash ") + kFixture).c_str()), 0);
    ASSERT_TRUE(Ping());
    s = OpenDocker(ws.get(), &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    RunResponse ok;
    ASSERT_TRUE(wstest::RunProcess(ex.get(), resp.workspace().id(),
                                   wstest::ArgvProcess({"echo", "back"}), &ok)
                    .ok());
    EXPECT_EQ(ok.stdout(), "back\n");
    for (const auto &id : {before.workspace().id(), resp.workspace().id()}) {
        CloseRequest cr;
        cr.set_workspace_id(id);
        CloseResponse c;
        ClientContext cctx;
        grpc::Status cs = ws->Close(&cctx, cr, &c);
        EXPECT_TRUE(cs.ok()) << cs.error_message();
        EXPECT_FALSE(c.already_closed());
        EXPECT_NE(access(srv.workspace_dir(id).c_str(), F_OK), 0);
    }
    // The retried Close removed the container the failed one could not.
    std::string cmd =
        "docker ps -aq --filter label=dev.workspaced.workspace=" + before.workspace().id();
    FILE *f = popen(cmd.c_str(), "r");
    ASSERT_NE(f, nullptr);
    char buf[256] = "";
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    EXPECT_EQ(pclose(f), 0);
    EXPECT_EQ(std::string(buf, n), "") << "the container is still there";
}

} // namespace
