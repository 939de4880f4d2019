// A cap that cannot be enforced refuses the Open. The server here runs in a
// mount namespace of this test's where /sys/fs/cgroup is an empty tmpfs: no
// cgroup controller at all, as in a container whose cgroups are not its
// own or on a cgroup v2 host that delegates nothing. Every local-sandbox
// Open (whose defaults cap pids and memory) is then refused, naming the
// cap, rather than opening a workspace that only reports "not enforced";
// providers without caps keep working.
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;

namespace
{

TEST(SandboxCaps, AnUnenforceableCapRefusesTheOpen)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root for a mount namespace of its own";
    // This process (and the server it starts) only: the test binary runs
    // nothing else.
    ASSERT_EQ(unshare(CLONE_NEWNS), 0) << strerror(errno);
    ASSERT_EQ(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0) << strerror(errno);
    ASSERT_EQ(mount("none", "/sys/fs/cgroup", "tmpfs", MS_NOSUID | MS_NODEV, "size=64k"), 0)
        << strerror(errno);

    wstest::Server srv;
    auto ws = srv.workspaces();
    for (int pids : {0, 64}) {
        OpenRequest req;
        if (pids)
            req.mutable_local_sandbox()->set_pids_limit(pids);
        else
            req.mutable_local_sandbox();
        req.mutable_capabilities()->mutable_fs();
        req.mutable_capabilities()->mutable_shell()->add_allowed_commands("true");
        OpenResponse resp;
        ClientContext ctx;
        wstest::Error e = wstest::Decode(ws->Open(&ctx, req, &resp));
        EXPECT_EQ(e.code, StatusCode::FAILED_PRECONDITION) << pids;
        EXPECT_EQ(e.reason, "WORKSPACE_FAILED");
        EXPECT_EQ(e.metadata["cap"], "pids");
        EXPECT_EQ(e.metadata["transient"], "false");
        EXPECT_EQ(e.message,
                  "local-sandbox cannot enforce the pids cap on this host (no writable cgroup "
                  "controller for it); a cap that cannot be enforced refuses the Open");
    }
    // Nothing was made, and a workspace without caps opens as ever.
    EXPECT_TRUE(wstest::Open(ws.get(), "memory").id.size() > 0);
}

} // namespace
