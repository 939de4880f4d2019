// The tsan config must stop a process at its first data race, exactly as
// it is configured for every test (.bazelrc's tsan config), and a process
// started without TSAN_OPTIONS (a server with an environment of its own)
// must still fail. In any other build the same binary runs to the end,
// which shows the test knows which build it is in.
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

// Runs the canary, stdout and stderr into one pipe; without TSAN_OPTIONS
// in its environment when `no_options`.
Result RunCanary(bool no_options)
{
    std::vector<char *> env;
    for (char **e = environ; *e != nullptr; e++)
        if (!no_options || strncmp(*e, "TSAN_OPTIONS=", 13) != 0)
            env.push_back(*e);
    env.push_back(nullptr);
    Result r;
    std::string path = "tests/tsan/canary";
    char *argv[] = {path.data(), nullptr};
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return r;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_adddup2(&fa, p[1], 2);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv, env.data());
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

#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitized = true;
#else
constexpr bool kThreadSanitized = false;
#endif

TEST(ThreadSanitizer, DataRaceFailsTheProcess)
{
    for (bool no_options : {false, true}) {
        SCOPED_TRACE(no_options ? "without TSAN_OPTIONS" : "with the test's TSAN_OPTIONS");
        Result r = RunCanary(no_options);
        if (!kThreadSanitized) {
            EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.out;
            EXPECT_EQ(r.out.rfind("survived ", 0), 0u) << r.out;
            continue;
        }
        EXPECT_NE(r.out.find("WARNING: ThreadSanitizer: data race"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("canary.c"), std::string::npos) << r.out;
        EXPECT_FALSE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.out;
        // halt_on_error: stopped at the report, before the end of main.
        if (!no_options) {
            EXPECT_EQ(r.out.find("survived"), std::string::npos) << r.out;
        }
    }
}

} // namespace
