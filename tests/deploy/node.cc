#include "tests/deploy/node.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

extern char **environ;

namespace wsdeploy
{

namespace
{

const char kBinary[] = "server/workspaced";

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string &path)
{
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

} // namespace

Node::Node(std::string label, std::string netns, std::string listen, std::string state_dir,
           std::vector<std::string> args)
    : label_(std::move(label)), netns_(std::move(netns)), listen_(std::move(listen)),
      state_dir_(std::move(state_dir)), args_(std::move(args)), stderr_path_(state_dir_ + ".stderr")
{
}

Node::~Node()
{
    if (pid_ > 0) {
        std::string why = Drain();
        if (!why.empty())
            ADD_FAILURE() << why << " (stopped when its test ended)";
    }
}

std::string Node::Drain(int timeout_ms)
{
    return CleanExit(Stop(SIGTERM, timeout_ms));
}

std::string Node::CleanExit(int status) const
{
    if (status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return "";
    std::string how;
    if (status == -2)
        how = "did not exit in time and was killed";
    else if (status < 0)
        how = "is still running";
    else if (WIFEXITED(status))
        how = "exited " + std::to_string(WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        how = "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
              strsignal(WTERMSIG(status)) + ")";
    else
        how = "ended with wait status " + std::to_string(status);
    return label_ + " " + how + "; its stderr:\n" + Stderr();
}

std::string Node::Stderr() const
{
    return ReadFile(stderr_path_);
}

std::string Node::Start()
{
    char bin[PATH_MAX];
    if (!realpath(kBinary, bin))
        return std::string("cannot find ") + kBinary + ": " + strerror(errno);
    std::vector<std::string> argv = {bin, "--listen", listen_, "--state-dir", state_dir_};
    argv.insert(argv.end(), args_.begin(), args_.end());
    std::vector<char *> cargv;
    for (auto &a : argv)
        cargv.push_back(a.data());
    cargv.push_back(nullptr);

    // Everything the child needs is made here: between fork and exec a
    // multithreaded process may only make system calls.
    std::string ns_path = "/run/netns/" + netns_;
    int ns_fd = open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns_fd < 0)
        return "open " + ns_path + ": " + strerror(errno);
    int err_fd = open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    int out[2];
    if (err_fd < 0 || pipe2(out, O_CLOEXEC) != 0) {
        close(ns_fd);
        if (err_fd >= 0)
            close(err_fd);
        return std::string("stderr file or pipe: ") + strerror(errno);
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        // The server dies with the test (its thread that forked it, the
        // main thread, lives as long as the test does).
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(126);
        if (setns(ns_fd, CLONE_NEWNET) != 0)
            _exit(125);
        dup2(out[1], 1);
        dup2(err_fd, 2);
        execve(cargv[0], cargv.data(), environ);
        _exit(127);
    }
    close(ns_fd);
    close(err_fd);
    close(out[1]);
    if (pid < 0) {
        close(out[0]);
        return std::string("fork: ") + strerror(errno);
    }
    pid_ = pid;
    status_ = -1;

    // Wait for "workspaced listening on ADDR" (slow under the sanitizers).
    std::string line;
    auto deadline = Clock::now() + std::chrono::seconds(90);
    bool got = false;
    while (!got && Clock::now() < deadline) {
        struct pollfd p = {out[0], POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        char c;
        ssize_t n = read(out[0], &c, 1);
        if (n <= 0)
            break;
        if (c == '\n')
            got = line.rfind("workspaced listening on ", 0) == 0;
        else
            line.push_back(c);
        if (c == '\n' && !got)
            line.clear();
    }
    close(out[0]);
    if (!got) {
        int st = Stop(SIGKILL, 1000);
        return label_ + " did not start (status " + std::to_string(st) + "): " + Stderr();
    }
    if (line != "workspaced listening on " + listen_) {
        Stop(SIGKILL, 1000);
        return label_ + " says '" + line + "', expected to listen on " + listen_;
    }
    return "";
}

bool Node::Alive()
{
    if (pid_ <= 0)
        return false;
    int st;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = st;
        pid_ = -1;
        return false;
    }
    return true;
}

int Node::WaitExit(int timeout_ms)
{
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        if (!Alive())
            return status_;
        if (Clock::now() >= deadline)
            return -1;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

int Node::Stop(int sig, int timeout_ms)
{
    if (pid_ <= 0)
        return status_;
    kill(pid_, sig);
    int st = WaitExit(timeout_ms);
    if (st != -1)
        return st;
    kill(pid_, SIGKILL);
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR)
        ;
    pid_ = -1;
    status_ = st;
    return -2;
}

void Node::Kill()
{
    if (pid_ <= 0)
        return;
    kill(pid_, SIGKILL);
    int st;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR)
        ;
    pid_ = -1;
    status_ = st;
}

} // namespace wsdeploy
