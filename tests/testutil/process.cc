#include "tests/testutil/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <thread>

namespace testutil
{

std::string ReadFile(const std::string &path)
{
    std::string out;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        out.append(buf, (size_t)n);
    close(fd);
    return out;
}

bool ReadLine(int fd, std::string *line, int timeout_ms)
{
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    line->clear();
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now())
                        .count();
        if (left <= 0)
            return false;
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, (int)left) <= 0)
            continue;
        char c;
        if (read(fd, &c, 1) != 1)
            return false;
        if (c == '\n')
            return true;
        line->push_back(c);
    }
}

std::string DescribeStatus(int status)
{
    if (WIFEXITED(status))
        return "exit status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
               strsignal(WTERMSIG(status)) + ")";
    return "wait status " + std::to_string(status);
}

std::string StopCleanly(pid_t pid, const std::string &what, const std::string &stderr_path,
                        std::chrono::seconds limit)
{
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid)
        return what + " ended before the suite stopped it (" + DescribeStatus(status) +
               "); its stderr:\n" + ReadFile(stderr_path);
    kill(pid, SIGTERM);
    // A drain is bounded by the server's grace periods; never hang the
    // suite on one that is not.
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (waitpid(pid, &status, WNOHANG) != pid) {
        if (std::chrono::steady_clock::now() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return what + " did not exit within " + std::to_string(limit.count()) +
                   " s of SIGTERM; its stderr:\n" + ReadFile(stderr_path);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return "";
    return what + " did not exit cleanly after SIGTERM (" + DescribeStatus(status) +
           "); its stderr:\n" + ReadFile(stderr_path);
}

std::string UniqueSleepArg()
{
    static std::atomic<unsigned> n{0};
    static const unsigned long long salt = [] {
        std::random_device rd;
        return ((unsigned long long)rd() << 32 | rd()) % 1000000000ULL;
    }();
    char buf[64];
    snprintf(buf, sizeof(buf), "1000.%07d%09llu%05u", (int)getpid(), salt, n++ % 100000);
    return buf;
}

std::vector<std::string> ProcArgv(pid_t pid)
{
    std::string cmd = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
    std::vector<std::string> args;
    for (size_t i = 0; i < cmd.size();) {
        size_t z = cmd.find('\0', i);
        if (z == std::string::npos)
            z = cmd.size();
        args.push_back(cmd.substr(i, z - i));
        i = z + 1;
    }
    return args;
}

std::vector<pid_t> AllPids()
{
    std::vector<pid_t> out;
    DIR *d = opendir("/proc");
    if (!d)
        return out;
    while (struct dirent *de = readdir(d)) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (!*end && pid > 0)
            out.push_back((pid_t)pid);
    }
    closedir(d);
    return out;
}

std::vector<pid_t> PidsWithArg(const std::string &arg)
{
    std::vector<pid_t> out;
    for (pid_t pid : AllPids()) {
        bool has = false;
        for (const std::string &a : ProcArgv(pid))
            has = has || a == arg;
        if (!has)
            continue;
        // The state follows the last ')' of the command name in stat.
        std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
        size_t rp = stat.rfind(')');
        if (rp != std::string::npos && rp + 2 < stat.size() && stat[rp + 2] != 'Z')
            out.push_back(pid);
    }
    return out;
}

} // namespace testutil
