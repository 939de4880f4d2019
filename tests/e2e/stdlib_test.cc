// A workload nobody here wrote, run where it matters who a command is:
// Python's own test suites for tarfile, shutil, os, posix and subprocess,
// inside a local-sandbox workspace and inside a docker workspace on a real
// Debian image (tests/fixtures/debian/build.sh). As a root without
// capabilities (the sandbox's uid before workspaces had uids of their own)
// tarfile takes root-only paths, tries chown and fails: 16 of test_tarfile's
// tests failed there. With the workspace's own uid inside, they pass as on
// the host.
//
// Needs Debian's libpython3.11-testsuite on the host (bazel/setup.sh installs
// it) and the image; fails, never skips, without them.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using namespace workspace::v1;

namespace
{

const char kImage[] = "workspaced-test:debian12-py";
const std::vector<std::string> kSuites = {"test_tarfile", "test_shutil", "test_os", "test_posix",
                                          "test_subprocess"};

// Runs the suites with regrtest in workspace `id`: its summary, which must
// name every suite as passed.
void RunSuites(wstest::Server &srv, const std::string &id)
{
    // -W: the output of a failing test is shown, with its tracebacks.
    std::vector<std::string> argv = {"python3", "-m", "test", "-W", "--timeout", "600"};
    argv.insert(argv.end(), kSuites.begin(), kSuites.end());
    ProcessConfig pc = wstest::ArgvProcess(argv);
    pc.set_timeout_ms(20 * 60 * 1000);
    pc.set_max_output_bytes(2 << 20);
    RunResponse r;
    auto ex = srv.exec();
    grpc::Status s = wstest::RunProcess(ex.get(), id, pc, &r, "", 25 * 60);
    ASSERT_TRUE(s.ok()) << s.error_message();
    const std::string &out = r.stdout();
    EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(r.exited().exit_code(), 0)
        << out.substr(out.size() > 6000 ? out.size() - 6000 : 0) << r.stderr();
    EXPECT_NE(out.find("Tests result: SUCCESS"), std::string::npos)
        << out.substr(out.size() > 6000 ? out.size() - 6000 : 0);
    EXPECT_NE(out.find("All " + std::to_string(kSuites.size()) + " tests OK."), std::string::npos)
        << out.substr(out.size() > 6000 ? out.size() - 6000 : 0);
    // The uid the suites ran as: the workspace's, not root.
    RunResponse id_r;
    ASSERT_TRUE(wstest::RunProcess(ex.get(), id,
                                   wstest::ArgvProcess({"python3", "-c",
                                                        "import os; "
                                                        "print(os.geteuid())"}),
                                   &id_r)
                    .ok());
    EXPECT_NE(id_r.stdout(), "0\n");
    EXPECT_NE(id_r.stdout(), "");
}

TEST(Stdlib, PythonSuitesPassInLocalSandbox)
{
    struct stat st;
    ASSERT_EQ(stat("/usr/lib/python3.11/test/test_tarfile.py", &st), 0)
        << "Python's test suite is missing: apt-get install libpython3.11-testsuite";
    wstest::Server srv;
    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_local_sandbox();
    req.mutable_capabilities()->mutable_fs();
    req.mutable_capabilities()->mutable_shell()->add_allowed_commands("python3");
    OpenResponse resp;
    ClientContext ctx;
    ASSERT_TRUE(ws->Open(&ctx, req, &resp).ok());
    RunSuites(srv, resp.workspace().id());
}

TEST(Stdlib, PythonSuitesPassInADockerWorkspaceOnDebian)
{
    wstest::Server srv;
    auto ws = srv.workspaces();
    OpenRequest req;
    req.mutable_docker()->set_image(kImage);
    req.mutable_docker()->set_pull_policy(PULL_NEVER);
    req.mutable_docker()->set_memory_mb(2048);
    req.mutable_capabilities()->mutable_fs();
    req.mutable_capabilities()->mutable_shell()->add_allowed_commands("python3");
    OpenResponse resp;
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    grpc::Status s = ws->Open(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message() << " (the image " << kImage
                        << " is built by tests/fixtures/debian/build.sh)";
    RunSuites(srv, resp.workspace().id());
    // Closed, so that its container does not outlive the test.
    CloseRequest creq;
    creq.set_workspace_id(resp.workspace().id());
    CloseResponse cresp;
    ClientContext cctx;
    cctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    EXPECT_TRUE(ws->Close(&cctx, creq, &cresp).ok());
}

} // namespace
