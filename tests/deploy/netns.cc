#include "tests/deploy/netns.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>
#include <stdexcept>

extern char **environ;

namespace wsdeploy
{

namespace
{

const char kPrefix[] = "wsdeploy-";
const char kNetnsDir[] = "/run/netns";

std::string ReadAll(int fd)
{
    std::string s;
    char buf[4096];
    ssize_t n;
    lseek(fd, 0, SEEK_SET);
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        s.append(buf, static_cast<size_t>(n));
    return s;
}

std::string Join(const std::vector<std::string> &argv)
{
    std::string s;
    for (const auto &a : argv)
        s += (s.empty() ? "" : " ") + a;
    return s;
}

// Runs `ip ARGS...`; on failure appends the command and its output to *why.
bool Ip(const std::vector<std::string> &args, std::string *why)
{
    std::vector<std::string> argv = {"ip"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string out;
    int rc = RunCommand(argv, &out);
    if (rc == 0)
        return true;
    if (why)
        *why += "`" + Join(argv) + "` exited " + std::to_string(rc) + ": " + out;
    return false;
}

// PIDs of the processes inside a namespace (`ip netns pids`).
std::vector<pid_t> PidsIn(const std::string &name)
{
    std::string out;
    std::vector<pid_t> pids;
    if (RunCommand({"ip", "netns", "pids", name}, &out) != 0)
        return pids;
    std::istringstream in(out);
    long p;
    while (in >> p)
        if (p > 1 && p != getpid())
            pids.push_back(static_cast<pid_t>(p));
    return pids;
}

} // namespace

int RunCommand(const std::vector<std::string> &argv, std::string *out)
{
    char tmpl[] = "/tmp/wsdeploy-cmd-XXXXXX";
    int fd = mkostemp(tmpl, O_CLOEXEC);
    if (fd < 0)
        return -1;
    unlink(tmpl);
    std::vector<std::string> copy = argv;
    std::vector<char *> args;
    for (auto &a : copy)
        args.push_back(a.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, 1);
    posix_spawn_file_actions_adddup2(&fa, fd, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        if (out)
            *out = std::string("cannot run ") + args[0] + ": " + strerror(rc);
        close(fd);
        return -1;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (out)
        *out = ReadAll(fd);
    close(fd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void DestroyNamespace(const std::string &name)
{
    // A namespace outlives its name while a process is inside: end them
    // first (they are this test's servers and their commands), twice in
    // case one forked meanwhile.
    for (int round = 0; round < 2; round++)
        for (pid_t p : PidsIn(name))
            kill(p, SIGKILL);
    RunCommand({"ip", "netns", "delete", name});
}

int RemoveLeftovers()
{
    int removed = 0;
    DIR *d = opendir(kNetnsDir);
    if (!d)
        return 0;
    std::vector<std::string> stale;
    while (struct dirent *de = readdir(d)) {
        std::string n = de->d_name;
        if (n.compare(0, strlen(kPrefix), kPrefix) != 0)
            continue;
        char *end = nullptr;
        long pid = strtol(n.c_str() + strlen(kPrefix), &end, 10);
        if (pid <= 0 || !end || *end != '-')
            continue;
        if (pid == getpid() || kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)
            continue; // a live run's (or ours)
        stale.push_back(n);
    }
    closedir(d);
    for (const auto &n : stale) {
        DestroyNamespace(n);
        removed++;
    }
    return removed;
}

std::string EnterNamespace(const std::string &name)
{
    std::string path = std::string(kNetnsDir) + "/" + name;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return "open " + path + ": " + strerror(errno);
    std::string why;
    if (setns(fd, CLONE_NEWNET) != 0)
        why = "setns " + path + ": " + strerror(errno);
    close(fd);
    return why;
}

int ThreadCount()
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    while (struct dirent *de = readdir(d))
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

Network::Network(const std::vector<std::string> &hosts)
    : prefix_(std::string(kPrefix) + std::to_string(getpid()) + "-"), router_(prefix_ + "router")
{
    int i = 0;
    for (const auto &h : hosts)
        hosts_.push_back({h, Host{prefix_ + h, "10.0.0." + std::to_string(10 + i++)}});
}

Network::~Network()
{
    Destroy();
    DismissGuardian();
}

std::vector<std::string> Network::names() const
{
    std::vector<std::string> v = {router_};
    for (const auto &h : hosts_)
        v.push_back(h.second.name);
    return v;
}

const Host &Network::host(const std::string &short_name) const
{
    for (const auto &h : hosts_)
        if (h.first == short_name)
            return h.second;
    throw std::runtime_error("no host " + short_name);
}

std::string Network::Build()
{
    std::string why;
    built_ = true;
    bool ok = Ip({"netns", "add", router_}, &why) &&
              Ip({"-n", router_, "link", "set", "lo", "up"}, &why) &&
              Ip({"-n", router_, "link", "add", "br0", "type", "bridge"}, &why) &&
              Ip({"-n", router_, "link", "set", "br0", "up"}, &why);
    int i = 0;
    for (const auto &h : hosts_) {
        if (!ok)
            break;
        const std::string &ns = h.second.name;
        const std::string port = "port" + std::to_string(i++);
        // The pair is made inside the router with its peer moved straight
        // into the host's namespace: no name ever appears in the machine's
        // own namespace, where parallel runs could collide.
        ok = Ip({"netns", "add", ns}, &why) && Ip({"-n", ns, "link", "set", "lo", "up"}, &why) &&
             Ip({"-n", router_, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                 "netns", ns},
                &why) &&
             Ip({"-n", router_, "link", "set", port, "master", "br0", "up"}, &why) &&
             Ip({"-n", ns, "addr", "add", h.second.address + "/24", "dev", "eth0"}, &why) &&
             Ip({"-n", ns, "link", "set", "eth0", "up"}, &why);
    }
    if (!ok) {
        Destroy();
        return why;
    }
    return "";
}

void Network::Destroy()
{
    if (!built_)
        return;
    // Hosts first: their servers go before the router takes the links.
    for (auto it = hosts_.rbegin(); it != hosts_.rend(); ++it)
        DestroyNamespace(it->second.name);
    DestroyNamespace(router_);
    built_ = false;
}

void Network::StartGuardian()
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        throw std::runtime_error("pipe");
    std::vector<std::string> all = names();
    pid_t pid = fork();
    if (pid < 0)
        throw std::runtime_error("fork");
    pid_t parent = getpid();
    if (pid == 0) {
        // Survives the test's own SIGTERM/SIGINT (a timeout) to clean up
        // after it. The test's end writes one byte: the test removed its
        // namespaces itself. End of file while the test still runs is not
        // its end (a stray close of a reused fd number in the test would
        // otherwise take the namespaces from under it): wait for the
        // test to die, then clean up.
        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, SIG_IGN);
        close(p[1]);
        char c;
        ssize_t n;
        while ((n = read(p[0], &c, 1)) < 0 && errno == EINTR)
            ;
        if (n == 1)
            _exit(0);
        while (getppid() == parent)
            usleep(100 * 1000);
        for (auto it = all.rbegin(); it != all.rend(); ++it) {
            struct stat st;
            if (stat((std::string(kNetnsDir) + "/" + *it).c_str(), &st) == 0)
                DestroyNamespace(*it);
        }
        _exit(0);
    }
    close(p[0]);
    guardian_ = pid;
    guardian_fd_ = p[1];
}

void Network::DismissGuardian()
{
    if (guardian_fd_ >= 0) {
        char done = 'd';
        (void)!write(guardian_fd_, &done, 1);
        close(guardian_fd_);
        guardian_fd_ = -1;
    }
    if (guardian_ > 0) {
        int st;
        while (waitpid(guardian_, &st, 0) < 0 && errno == EINTR)
            ;
        guardian_ = -1;
    }
}

} // namespace wsdeploy
