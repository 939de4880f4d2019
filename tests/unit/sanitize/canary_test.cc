// The sanitizer build must stop a process at the first undefined behaviour
// or memory error, exactly as it is configured for every test (.bazelrc's
// asan config). Without -fno-sanitize-recover, UBSan prints "runtime error"
// and carries on, and every test in that phase passes whatever it prints:
// this test fails then. In the regular build the same binary must run to
// the end, which shows the test knows which build it is in.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern char **environ;

namespace
{

struct Result {
    int status = -1;
    std::string out;
};

// Runs the canary with `args`, stdout and stderr into one pipe; without
// UBSAN_OPTIONS in its environment when `no_options`, so that what stops it
// is the build itself (servers and helpers may run with environments of
// their own).
Result RunCanary(std::vector<std::string> args, bool no_options = false)
{
    std::vector<char *> env;
    for (char **e = environ; *e != nullptr; e++)
        if (!no_options || strncmp(*e, "UBSAN_OPTIONS=", 14) != 0)
            env.push_back(*e);
    env.push_back(nullptr);
    Result r;
    args.insert(args.begin(), "tests/unit/sanitize/canary");
    std::vector<char *> argv;
    for (auto &a : args)
        argv.push_back(&a[0]);
    argv.push_back(nullptr);
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return r;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_adddup2(&fa, p[1], 2);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), env.data());
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (rc != 0) {
        close(p[0]);
        r.out = "posix_spawn: " + std::string(strerror(rc));
        return r;
    }
    char buf[4096];
    ssize_t n;
    while ((n = read(p[0], buf, sizeof(buf))) > 0)
        r.out.append(buf, (size_t)n);
    close(p[0]);
    waitpid(pid, &r.status, 0);
    return r;
}

bool Sanitized()
{
    return getenv("WORKSPACED_SANITIZED") != nullptr;
}

TEST(Sanitizers, SignedOverflowStopsTheProcess)
{
    for (bool no_options : {false, true}) {
        SCOPED_TRACE(no_options ? "without UBSAN_OPTIONS" : "with the test's UBSAN_OPTIONS");
        Result r = RunCanary({"overflow", "1"}, no_options);
        if (!Sanitized()) {
            EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.out;
            EXPECT_EQ(r.out.rfind("survived ", 0), 0u) << r.out;
            continue;
        }
        EXPECT_NE(r.out.find("runtime error: signed integer overflow"), std::string::npos) << r.out;
        EXPECT_EQ(r.out.find("survived"), std::string::npos)
            << "undefined behaviour was reported and the process carried on: " << r.out;
        EXPECT_FALSE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.out;
    }
}

TEST(Sanitizers, HeapOverflowStopsTheProcess)
{
    if (!Sanitized()) {
        // Without ASan the read past the block is itself undefined: the
        // canary is not run, and the overflow case above already shows
        // which build this is.
        Result r = RunCanary({"heap", "0"});
        EXPECT_EQ(r.out, "survived 7\n");
        return;
    }
    Result r = RunCanary({"heap", "8"});
    EXPECT_NE(r.out.find("AddressSanitizer: heap-buffer-overflow"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("survived"), std::string::npos) << r.out;
    EXPECT_FALSE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.out;
}

} // namespace
