// Local-sandbox end to end: the real server, real bubblewrap, the real
// sandbox init and a real client prove the boundary holds. The escape probe
// (tests/sandbox/escape_probe.c) runs inside a command and tries every known
// way out; each of its checks has a control run, the same probe in a
// local-bash workspace of the same server, which must see the operation
// succeed, or skips naming what this host lacks (then the sandbox's refusal
// proves nothing here). The other tests check what a sandboxed command can
// write, how its exit is reported, that signals reach the command and not the
// sandbox, that every abort kills everything inside, that a missing backend
// fails closed, and that hostile bind paths are refused.
//
// The probe is copied into a fresh directory under the host's /tmp that the
// server searches first (--exec-path) and that each workspace binds
// read-only. Not under TEST_TMPDIR: that lives in /root/.cache, and binding
// it would make /root show up inside the sandbox.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;
using wstest::ArgvProcess;
using wstest::EscapingTree;
using wstest::EventLog;
using wstest::PeakWatcher;
using wstest::Server;

namespace
{

using Clock = std::chrono::steady_clock;

const char kProbeRunfile[] = "tests/sandbox/escape_probe";
const char kInitRunfile[] = "server/progs/workspaced-sandbox-init";
const char kAgentRunfile[] = "server/progs/workspaced-agent";
const char kAgentInitRunfile[] = "server/progs/workspaced-docker-init";
const int kSurvivorWaitMs = 10000;

// Every check escape_probe makes, in the order it prints them (README.md).
const std::vector<std::string> kAllChecks = {
    "extra_fds",    "write_outside",  "read_planted", "read_home",     "proc_host",
    "tcp_loopback", "unix_socket",    "interfaces",   "ptrace_parent", "unshare_user",
    "mount",        "tiocsti",        "af_packet",    "af_alg",        "af_vsock",
    "x32_syscall",  "i386_syscall",   "capabilities", "no_new_privs",  "seccomp_mode",
    "io_uring",     "kernel_keyring",
};

// Where a docker daemon listens; a sandboxed command must reach neither.
const std::vector<std::string> kDockerSockets = {"/var/run/docker.sock", "/run/docker.sock"};

// Whether the suite runs its sandboxes in agent mode (WS_TEST_EXEC_MODE).
bool Agent()
{
    return wstest::AgentMode();
}

// Processes naming a workspace's directory while it is open and idle: none
// per command, the box's bubblewrap in agent mode (it lives until Close).
int IdleBoxProcs()
{
    return Agent() ? 1 : 0;
}

const std::vector<std::string> kAllowed = {
    "escape_probe", "sh",  "sleep", "cat", "id", "setsid", "echo", "ls", "true",
    "kill",         "pwd", "touch", "ln",  "rm", "mkdir",  "head", "wc", "python3",
};

std::string RealPath(const std::string &p)
{
    char *r = realpath(p.c_str(), nullptr);
    std::string s = r ? r : "";
    free(r);
    return s;
}

std::string Unique()
{
    static std::atomic<unsigned> counter{0};
    return std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" +
           std::to_string(Clock::now().time_since_epoch().count() % 1000000007LL);
}

bool Exists(const std::string &path)
{
    struct stat st;
    return lstat(path.c_str(), &st) == 0;
}

std::vector<std::string> ListDir(const std::string &dir)
{
    std::vector<std::string> out;
    DIR *d = opendir(dir.c_str());
    if (!d)
        return out;
    while (struct dirent *de = readdir(d))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            out.push_back(de->d_name);
    closedir(d);
    return out;
}

// Names in `dir` starting with `prefix`.
std::set<std::string> NamesWithPrefix(const std::string &dir, const std::string &prefix)
{
    std::set<std::string> out;
    for (const auto &n : ListDir(dir))
        if (n.compare(0, prefix.size(), prefix) == 0)
            out.insert(n);
    return out;
}

std::set<std::string> Lines(const std::string &s)
{
    std::set<std::string> out;
    std::istringstream in(s);
    std::string line;
    while (std::getline(in, line))
        out.insert(line);
    return out;
}

std::string Join(const std::set<std::string> &s)
{
    std::string out;
    for (const auto &x : s)
        out += (out.empty() ? "" : " ") + x;
    return out;
}

void RemoveTree(const std::string &path)
{
    nftw(
        path.c_str(),
        [](const char *p, const struct stat *, int, struct FTW *) { return remove(p), 0; }, 16,
        FTW_DEPTH | FTW_PHYS);
}

// Where HostTempDir makes its directories: the host's /tmp, or once the
// fixture made one, its bind root there (the only directory the server's
// policy lets a workspace bind from).
std::string g_host_tmp = "/tmp";

// A fresh canonical directory under g_host_tmp, removed by the fixture.
std::string HostTempDir(const std::string &prefix, std::vector<std::string> *cleanup)
{
    std::string tmpl = g_host_tmp + "/" + prefix + "XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    // Open to every uid: a sandbox's commands run as their workspace's
    // own uid, with that uid's permissions on what is bound in.
    if (!mkdtemp(buf.data()) || chmod(buf.data(), 0777) != 0)
        throw std::runtime_error("mkdtemp " + tmpl + ": " + strerror(errno));
    std::string dir = RealPath(buf.data());
    cleanup->push_back(dir);
    return dir;
}

// Copies a host file, with this mode.
void CopyFile(const std::string &from, const std::string &to, mode_t mode)
{
    std::string data = wstest::ReadHostFile(from);
    ASSERT_FALSE(data.empty()) << "cannot read " << from;
    wstest::WriteHostFile(to, data);
    ASSERT_EQ(chmod(to.c_str(), mode), 0) << to;
}

// The state directory's snapshot without the given workspace's files and
// its audit log (which the server itself appends to when a command ends;
// audit_test shows a command cannot touch it): what a command of that
// workspace must never change.
std::map<std::string, std::string> StateOutside(const std::string &state, const std::string &id)
{
    auto all = wstest::Snapshot(state);
    const std::string mine = "workspaces/" + id + "/";
    const std::string log = "audit/" + id + ".jsonl";
    std::map<std::string, std::string> out;
    for (const auto &kv : all)
        if (kv.first.compare(0, mine.size(), mine) != 0 && kv.first != log)
            out.insert(kv);
    return out;
}

std::string Describe(const std::map<std::string, std::string> &a,
                     const std::map<std::string, std::string> &b)
{
    std::string s;
    for (const auto &kv : a)
        if (!b.count(kv.first) || b.at(kv.first) != kv.second)
            s += " changed-or-gone:" + kv.first;
    for (const auto &kv : b)
        if (!a.count(kv.first))
            s += " new:" + kv.first;
    return s;
}

// ---- the probe's output ----

struct ProbeCheck {
    std::string result;     // blocked, succeeded, mixed or not-tried
    bool blocked = false;   // every attempt was refused
    bool succeeded = false; // every attempt did what it tried
    std::string detail;
};

// One line exactly as the probe prints it:
// {"check":"NAME","result":"RESULT","detail":"..."} with \" \\ and \u00XX
// escapes in the detail. False for anything else.
bool ParseProbeLine(const std::string &line, std::string *ret_name, ProbeCheck *ret)
{
    static const std::string kHead = "{\"check\":\"", kResult = "\",\"result\":\"",
                             kDetail = "\",\"detail\":\"";
    static const std::set<std::string> kResults = {"blocked", "succeeded", "mixed", "not-tried"};
    if (line.compare(0, kHead.size(), kHead) != 0)
        return false;
    size_t i = kHead.size();
    size_t end = line.find('"', i);
    if (end == std::string::npos)
        return false;
    std::string name = line.substr(i, end - i);
    i = end;
    if (line.compare(i, kResult.size(), kResult) != 0)
        return false;
    i += kResult.size();
    end = line.find('"', i);
    if (end == std::string::npos)
        return false;
    ProbeCheck c;
    c.result = line.substr(i, end - i);
    if (!kResults.count(c.result))
        return false;
    c.blocked = c.result == "blocked";
    c.succeeded = c.result == "succeeded";
    i = end;
    if (line.compare(i, kDetail.size(), kDetail) != 0)
        return false;
    i += kDetail.size();
    for (;;) {
        if (i >= line.size())
            return false;
        char ch = line[i++];
        if (ch == '"')
            break;
        if (ch != '\\') {
            c.detail += ch;
            continue;
        }
        if (i >= line.size())
            return false;
        char e = line[i++];
        if (e == '"' || e == '\\') {
            c.detail += e;
        } else if (e == 'u' && i + 4 <= line.size()) {
            c.detail += static_cast<char>(std::stoi(line.substr(i, 4), nullptr, 16));
            i += 4;
        } else {
            return false;
        }
    }
    if (line.substr(i) != "}")
        return false;
    *ret_name = name;
    *ret = c;
    return true;
}

// Every line of the probe's stdout, in order; bad lines go to `problems`.
std::vector<std::pair<std::string, ProbeCheck>> ParseProbe(const std::string &out,
                                                           std::string *problems)
{
    std::vector<std::pair<std::string, ProbeCheck>> v;
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
        std::string name;
        ProbeCheck c;
        if (ParseProbeLine(line, &name, &c))
            v.emplace_back(name, c);
        else
            *problems += "unparseable line: " + line + "\n";
    }
    if (!out.empty() && out.back() != '\n')
        *problems += "output does not end in a newline\n";
    return v;
}

// ---- host-side fixtures ----

// A listening unix socket on the host that counts connections.
class UnixListener
{
  public:
    explicit UnixListener(const std::string &path) : path_(path)
    {
        // Bound through its directory's fd: the path may not fit sun_path.
        size_t slash = path.rfind('/');
        dir_fd_ = open(path.substr(0, slash).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
        fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        snprintf(a.sun_path, sizeof(a.sun_path), "/proc/self/fd/%d/%s", dir_fd_,
                 path.substr(slash + 1).c_str());
        if (dir_fd_ < 0 || fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0 ||
            listen(fd_, 16) != 0)
            ADD_FAILURE() << "listen on " << path << ": " << strerror(errno);
    }
    ~UnixListener()
    {
        close(fd_);
        close(dir_fd_);
        unlink(path_.c_str());
    }
    const std::string &path() const
    {
        return path_;
    }
    // Connections accepted now (each one a sandbox escape).
    int Accepted()
    {
        int n = 0;
        for (int c; (c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0; n++)
            close(c);
        return n;
    }

  private:
    std::string path_;
    int dir_fd_ = -1;
    int fd_ = -1;
};

// A TCP listener on the host at ip (port chosen by the kernel) that answers
// every connection with a small HTTP response and counts them.
class TcpListener
{
  public:
    explicit TcpListener(const std::string &ip) : ip_(ip)
    {
        sockaddr_in a{};
        socklen_t len = sizeof(a);
        a.sin_family = AF_INET;
        fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd_ < 0 || inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1 ||
            bind(fd_, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0 || listen(fd_, 16) != 0 ||
            getsockname(fd_, reinterpret_cast<sockaddr *>(&a), &len) != 0 ||
            pipe2(stop_, O_CLOEXEC) != 0) {
            ADD_FAILURE() << "listen on " << ip << ": " << strerror(errno);
            return;
        }
        port_ = std::to_string(ntohs(a.sin_port));
        thread_ = std::thread([this] { Serve(); });
    }
    ~TcpListener()
    {
        if (thread_.joinable()) {
            (void)!write(stop_[1], "x", 1);
            thread_.join();
        }
        close(fd_);
        close(stop_[0]);
        close(stop_[1]);
    }
    const std::string &port() const
    {
        return port_;
    }
    std::string addr() const
    {
        return ip_ + ":" + port_;
    }
    int accepted() const
    {
        return accepted_.load();
    }
    static constexpr const char *kBody = "hello from the host";

  private:
    void Serve()
    {
        for (;;) {
            pollfd p[2] = {{fd_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
            if (poll(p, 2, -1) < 0 && errno != EINTR)
                return;
            if (p[1].revents)
                return;
            if (!(p[0].revents & POLLIN))
                continue;
            int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (c < 0)
                continue;
            accepted_++;
            // The request (if one comes soon), then the answer and EOF.
            char buf[4096];
            pollfd in = {c, POLLIN, 0};
            if (poll(&in, 1, 2000) > 0)
                (void)!read(c, buf, sizeof(buf));
            std::string resp =
                "HTTP/1.0 200 OK\r\nContent-Length: " + std::to_string(strlen(kBody)) +
                "\r\nConnection: close\r\n\r\n" + kBody;
            (void)!write(c, resp.data(), resp.size());
            close(c);
        }
    }

    std::string ip_, port_;
    int fd_ = -1;
    int stop_[2] = {-1, -1};
    std::atomic<int> accepted_{0};
    std::thread thread_;
};

// The host's first IPv4 address that is neither loopback nor inside the
// user-mode network's own 10.0.2.0/24; "" when it has none.
std::string HostGlobalIPv4()
{
    ifaddrs *all = nullptr;
    std::string found;
    if (getifaddrs(&all) != 0)
        return "";
    for (ifaddrs *i = all; i && found.empty(); i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
            (i->ifa_flags & IFF_LOOPBACK))
            continue;
        uint32_t a = ntohl(reinterpret_cast<sockaddr_in *>(i->ifa_addr)->sin_addr.s_addr);
        if ((a >> 24) == 127 || (a & 0xffffff00u) == 0x0a000200u)
            continue;
        char buf[INET_ADDRSTRLEN];
        if (inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in *>(i->ifa_addr)->sin_addr, buf,
                      sizeof(buf)))
            found = buf;
    }
    freeifaddrs(all);
    return found;
}

// Runs `script` with /bin/sh on the host (a control), up to 60 s; its stdout,
// and its exit code in *rc (-1: did not end normally).
std::string HostSh(const std::string &script, int *rc)
{
    std::string out;
    FILE *f = popen(("timeout 60 sh -c '" + script + "'").c_str(), "r");
    *rc = -1;
    if (!f)
        return out;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;)
        out.append(buf, n);
    int st = pclose(f);
    if (st != -1 && WIFEXITED(st))
        *rc = WEXITSTATUS(st);
    return out;
}

// A gRPC call (Health/Check, an empty request in its 5-byte frame) spoken
// over HTTP/2 cleartext with nothing but sh, printf and curl, to each of
// `targets` (host:port): one line per target, "TARGET HTTP_CODE rc=CURL_EXIT".
// The call carries `token`, so a server that is reached reads the whole
// request and answers HTTP 200 with curl exiting 0. (Without one the server
// may refuse before curl has sent its body, and curl then reports a stream
// error with no HTTP code: reached, yet looking like "not reached".)
// No single quotes: it runs under sh -c '...' on the host too.
std::string H2cScript(const std::vector<std::string> &targets, const std::string &token)
{
    std::string s = "for t in";
    for (const auto &t : targets)
        s += " " + t;
    s += "; do printf \"\\0\\0\\0\\0\\0\" | curl -s --connect-timeout 5 -m 10 "
         "--http2-prior-knowledge -o /dev/null -w \"$t %{http_code} \" "
         "-H \"authorization: Bearer " +
         token +
         "\" "
         "-H \"content-type: application/grpc\" -H \"te: trailers\" --data-binary @- "
         "http://$t/grpc.health.v1.Health/Check; echo rc=$?; done";
    return s;
}

// HTTP GET of TcpListener's answer from `target`: "BODY rc=CURL_EXIT".
std::string GetScript(const std::string &target)
{
    return "curl -s --connect-timeout 5 -m 10 http://" + target + "/; echo \" rc=$?\"";
}

// Removes a host file when it goes out of scope.
struct ScopedUnlink {
    std::string path;
    ~ScopedUnlink()
    {
        unlink(path.c_str());
    }
};

struct SandboxOptions {
    bool network = false;
    std::vector<std::string> rw;
    std::vector<std::string> ro;
    bool probe_dir = true; // bind the probe's directory read-only
    std::vector<std::string> allowed = kAllowed;
};

grpc::Status OpenSandbox(Workspaces::Stub *stub, const SandboxOptions &o,
                         const std::string &probe_dir, wstest::Ws *ret)
{
    OpenRequest req;
    LocalSandboxConfig *sb = req.mutable_local_sandbox();
    sb->set_exec_mode(wstest::TestExecMode());
    if (o.network)
        sb->set_network(NETWORK_ALLOW);
    for (const auto &p : o.rw)
        sb->add_read_write_paths(p);
    if (o.probe_dir && !probe_dir.empty())
        sb->add_read_only_paths(probe_dir);
    for (const auto &p : o.ro)
        sb->add_read_only_paths(p);
    req.mutable_capabilities()->mutable_fs();
    ShellCapability *shell = req.mutable_capabilities()->mutable_shell();
    for (const auto &c : o.allowed)
        shell->add_allowed_commands(c);
    OpenResponse resp;
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    grpc::Status s = stub->Open(&ctx, req, &resp);
    if (s.ok() && ret)
        *ret = wstest::Ws{resp.workspace().id(), resp.workspace().ref().token()};
    return s;
}

ProviderInfo SandboxProvider(Server &srv)
{
    auto p = srv.providers();
    ClientContext ctx;
    ListProvidersResponse resp;
    EXPECT_TRUE(p->ListProviders(&ctx, ListProvidersRequest(), &resp).ok());
    for (const auto &info : resp.providers())
        if (info.kind() == "local-sandbox")
            return info;
    ADD_FAILURE() << "no local-sandbox provider listed";
    return ProviderInfo();
}

class SandboxTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        // Every directory a workspace binds is made under one root, which the
        // server's policy lists; the root itself is removed first at the end.
        g_host_tmp = "/tmp";
        bind_root_ = HostTempDir("ws-sbx-root", &cleanup_);
        g_host_tmp = bind_root_;
        loopback_ = std::make_unique<TcpListener>("127.0.0.1");
        probe_dir_ = HostTempDir("ws-sbx-bin", &cleanup_);
        probe_ = probe_dir_ + "/escape_probe";
        CopyFile(kProbeRunfile, probe_, 0755);
        exec_path_ = probe_dir_ + ":/usr/bin:/bin";
        StartServer();
    }

    void TearDown() override
    {
        if (srv_ && srv_->running()) {
            // Whatever the test did, the server reaped every bwrap it ran.
            wstest::ProcStats st = wstest::StatsOf(srv_->pid());
            auto deadline = Clock::now() + std::chrono::seconds(10);
            while (st.zombies > 0 && Clock::now() < deadline) {
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
                st = wstest::StatsOf(srv_->pid());
            }
            EXPECT_EQ(st.zombies, 0) << "the server left zombie children";
        }
        srv_.reset();
        loopback_.reset();
        for (const auto &d : cleanup_)
            RemoveTree(d);
        g_host_tmp = "/tmp";
    }

    // The flags every server of these tests gets: the operator's policy
    // that allows what the tests open (local-bash for the controls, network,
    // binds from the bind root).
    std::vector<std::string> PolicyArgs() const
    {
        return {"--policy-providers", "memory,local-bash,local-sandbox,docker", "--policy-network",
                "--policy-bind-roots", bind_root_};
    }

    void StartServer()
    {
        std::vector<std::string> args = {"--exec-path", exec_path_};
        for (const auto &a : PolicyArgs())
            args.push_back(a);
        args.insert(args.end(), extra_args_.begin(), extra_args_.end());
        srv_ = std::make_unique<Server>(args);
        wsstub_ = srv_->workspaces();
        exec_ = srv_->exec();
        fs_ = srv_->fs();
        state_ = RealPath(srv_->state_dir());
        ASSERT_FALSE(state_.empty());
    }

    wstest::Ws OpenOk(const SandboxOptions &o = SandboxOptions())
    {
        wstest::Ws ws;
        grpc::Status s = OpenSandbox(wsstub_.get(), o, probe_dir_, &ws);
        EXPECT_TRUE(s.ok()) << "Open(local-sandbox): " << s.error_code() << " "
                            << s.error_message();
        return ws;
    }

    // The workspace's host directory, canonical (as bwrap is given it).
    std::string WsDir(const wstest::Ws &ws) const
    {
        return state_ + "/workspaces/" + ws.id;
    }

    // A host TCP listener on loopback: what a sandbox must not reach.
    std::string Port() const
    {
        return loopback_->port();
    }

    grpc::Status Run(const wstest::Ws &ws, const ProcessConfig &p, RunResponse *r)
    {
        return wstest::RunProcess(exec_.get(), ws.id, p, r);
    }

    RunResponse RunOk(const wstest::Ws &ws, const ProcessConfig &p)
    {
        RunResponse r;
        grpc::Status s = Run(ws, p, &r);
        EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
        return r;
    }

    RunResponse Sh(const wstest::Ws &ws, const std::string &script)
    {
        return RunOk(ws, ArgvProcess({"sh", "-c", script}));
    }

    // The probe's checks from one run, with its exit and output checked.
    std::vector<std::pair<std::string, ProbeCheck>> Probe(const wstest::Ws &ws,
                                                          const std::vector<std::string> &args)
    {
        std::vector<std::string> argv = {"escape_probe"};
        argv.insert(argv.end(), args.begin(), args.end());
        RunResponse r = RunOk(ws, ArgvProcess(argv));
        EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED) << r.stderr();
        EXPECT_EQ(r.exited().exit_code(), 0) << r.stderr();
        EXPECT_EQ(r.stderr(), "");
        std::string problems;
        auto checks = ParseProbe(r.stdout(), &problems);
        EXPECT_EQ(problems, "") << r.stdout();
        return checks;
    }

    ProbeCheck ProbeOnly(const wstest::Ws &ws, const std::string &check,
                         const std::vector<std::string> &args = {})
    {
        std::vector<std::string> a = {"--only", check};
        a.insert(a.end(), args.begin(), args.end());
        auto checks = Probe(ws, a);
        EXPECT_EQ(checks.size(), 1u);
        if (checks.size() != 1)
            return ProbeCheck();
        EXPECT_EQ(checks[0].first, check);
        return checks[0].second;
    }

    grpc::Status ListProcs(const wstest::Ws &ws, ListProcessesResponse *resp)
    {
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        ListProcessesRequest req;
        req.set_workspace_id(ws.id);
        return exec_->ListProcesses(&ctx, req, resp);
    }

    ProcessInfo WaitFinished(const wstest::Ws &ws, const std::string &id)
    {
        auto deadline = Clock::now() + std::chrono::seconds(30);
        ProcessInfo last;
        do {
            ListProcessesResponse resp;
            EXPECT_TRUE(ListProcs(ws, &resp).ok());
            for (const auto &p : resp.processes())
                if (p.id() == id) {
                    last = p;
                    if (!p.running())
                        return last;
                }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        } while (Clock::now() < deadline);
        ADD_FAILURE() << "process " << id << " did not finish";
        return last;
    }

    grpc::Status Signal(const wstest::Ws &ws, const std::string &id, int sig)
    {
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        SendSignalRequest req;
        SendSignalResponse resp;
        req.set_workspace_id(ws.id);
        req.set_id(id);
        req.set_signal(sig);
        return exec_->SendSignal(&ctx, req, &resp);
    }

    grpc::Status Close(const wstest::Ws &ws)
    {
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        CloseRequest req;
        CloseResponse resp;
        req.set_workspace_id(ws.id);
        return wsstub_->Close(&ctx, req, &resp);
    }

    // Starts `p` and reads until `started` and `until` (if any).
    std::unique_ptr<wstest::StartStreamRW>
    StartUntil(ClientContext *ctx, const wstest::Ws &ws, const ProcessConfig &p, EventLog *log,
               const std::function<bool(const EventLog &)> &until = nullptr)
    {
        auto rw = wstest::StartStream(exec_.get(), ctx, ws.id, p);
        bool open = wstest::ReadEvents(
            rw.get(), log, [&](const EventLog &l) { return l.started && (!until || until(l)); });
        EXPECT_TRUE(open) << "the stream ended before it got there: " << log->out.data << "|"
                          << log->err.data << "|" << log->pty.data;
        return rw;
    }

    std::vector<std::string> cleanup_;
    std::string bind_root_, probe_dir_, probe_, exec_path_, state_;
    // More flags for the server (a fixture's own).
    std::vector<std::string> extra_args_;
    std::unique_ptr<TcpListener> loopback_;
    std::unique_ptr<Server> srv_;
    std::unique_ptr<Workspaces::Stub> wsstub_;
    std::unique_ptr<Exec::Stub> exec_;
    std::unique_ptr<FileSystem::Stub> fs_;
};

// ---- 1. the probe ----

// Every check must come back "blocked". That alone is evidence of the sandbox
// only where the same attempt succeeds without it: ProbeControlTest below
// shows that per check, and where it skips, naming what this host lacks, the
// check's "blocked" here proves nothing on this host.
TEST_F(SandboxTest, EveryEscapeIsBlocked)
{
    wstest::Ws ws = OpenOk();
    const std::string u = Unique();
    const std::string planted_state = state_ + "/planted";
    const std::string secret_state = "state-secret-" + u;
    wstest::WriteHostFile(planted_state, secret_state);
    ScopedUnlink planted_home{"/root/.ws-sandbox-test-planted-" + u};
    const std::string secret_home = "home-secret-" + u;
    wstest::WriteHostFile(planted_home.path, secret_home);
    ASSERT_EQ(wstest::ReadHostFile(planted_home.path), secret_home);
    // A socket in the host's /tmp and one in the server's state directory.
    UnixListener tmp_sock(HostTempDir("ws-sbx-sock", &cleanup_) + "/host.sock");
    UnixListener state_sock(state_ + "/host.sock");

    const auto state_before = StateOutside(state_, ws.id);
    const auto probe_dir_before = wstest::Snapshot(probe_dir_);
    const auto tmp_before = NamesWithPrefix("/tmp", "escape_probe.");

    std::vector<std::string> args = {"--planted", planted_state,   "--planted", planted_home.path,
                                     "--unix",    tmp_sock.path(), "--unix",    state_sock.path(),
                                     "--port",    Port()};
    for (const auto &p : kDockerSockets)
        args.insert(args.end(), {"--unix", p});
    auto checks = Probe(ws, args);
    std::vector<std::string> names;
    for (const auto &c : checks)
        names.push_back(c.first);
    EXPECT_EQ(names, kAllChecks);
    std::map<std::string, ProbeCheck> by;
    for (const auto &c : checks) {
        EXPECT_TRUE(c.second.blocked)
            << c.first << " NOT blocked (" << c.second.result << "): " << c.second.detail;
        by[c.first] = c.second;
    }
    // The exact values where they are fixed by the sandbox's shape.
    EXPECT_EQ(by["extra_fds"].detail, "");
    EXPECT_EQ(by["read_home"].detail, "/root:ENOENT /home:ENOENT");
    EXPECT_EQ(by["interfaces"].detail, "lo");
    EXPECT_EQ(by["capabilities"].detail, "0000000000000000");
    EXPECT_EQ(by["no_new_privs"].detail, "1");
    EXPECT_EQ(by["seccomp_mode"].detail, "2");
    // The seccomp filter answers these itself, whatever the kernel has:
    // a kernel without AF_ALG, AF_VSOCK or the x32 ABI would say
    // EAFNOSUPPORT or ENOSYS (where their controls skip), so EPERM shows
    // that the filter, not the kernel, refused them.
    EXPECT_EQ(by["af_packet"].detail, "socket:EPERM");
    EXPECT_EQ(by["af_alg"].detail, "socket:EPERM");
    EXPECT_EQ(by["af_vsock"].detail, "socket:EPERM");
    EXPECT_EQ(by["x32_syscall"].detail, "EPERM");
    // Only init and the probe in the pid namespace, init as pid 1 running the
    // command given (the probe from its bound directory, under /mnt); in
    // agent mode the box's agent as pid 1, the command's reaper and the
    // probe.
    EXPECT_EQ(by["proc_host"].detail.rfind(Agent() ? "pids=3 max=3 pid1=/.workspaced-agent --init "
                                                     "/.workspaced-agent-init --channel-fd "
                                                   : "pids=2 max=2 pid1=/.workspaced-init 5 /mnt" +
                                                         probe_,
                                           0),
              0u)
        << by["proc_host"].detail;
    EXPECT_EQ(by["read_planted"].detail,
              planted_state + ":ENOENT " + planted_home.path + ":ENOENT");

    // Nothing happened on the host.
    for (const std::string &dir : {std::string("/"), std::string("/usr"), std::string("/etc"),
                                   state_ + "/workspaces", WsDir(ws), state_})
        EXPECT_EQ(Join(NamesWithPrefix(dir, ".escape_probe.")), "") << "created in " << dir;
    EXPECT_EQ(NamesWithPrefix("/tmp", "escape_probe."), tmp_before)
        << "the probe's mount point landed in the host's /tmp";
    EXPECT_EQ(tmp_sock.Accepted(), 0) << "a host unix socket was reached";
    EXPECT_EQ(state_sock.Accepted(), 0) << "a unix socket in the state dir was reached";
    EXPECT_EQ(wstest::ReadHostFile(planted_state), secret_state);
    EXPECT_EQ(wstest::ReadHostFile(planted_home.path), secret_home);
    auto state_after = StateOutside(state_, ws.id);
    EXPECT_EQ(state_after, state_before) << Describe(state_before, state_after);
    EXPECT_EQ(wstest::Snapshot(probe_dir_), probe_dir_before);
    EXPECT_TRUE(ListDir(WsDir(ws)).empty()) << "the probe left files in the workspace";
    unlink(planted_state.c_str());
}

// ---- the controls ----

// A sysctl's value without its newline; "" when this kernel has no such knob.
std::string Sysctl(const std::string &name)
{
    std::string v = wstest::ReadHostFile("/proc/sys/" + name);
    while (!v.empty() && (v.back() == '\n' || v.back() == ' '))
        v.pop_back();
    return v;
}

// A field of /proc/PID/status ("Name:\tvalue"); "" when absent.
std::string StatusField(const std::string &status_path, const std::string &field)
{
    std::istringstream in(wstest::ReadHostFile(status_path));
    std::string line;
    while (std::getline(in, line))
        if (line.compare(0, field.size() + 1, field + ":") == 0) {
            size_t at = line.find_first_not_of(" \t", field.size() + 1);
            return at == std::string::npos ? "" : line.substr(at);
        }
    return "";
}

// The lines of a file that contain `needle`.
std::set<std::string> LinesContaining(const std::string &path, const std::string &needle)
{
    std::set<std::string> out;
    for (const auto &l : Lines(wstest::ReadHostFile(path)))
        if (l.find(needle) != std::string::npos)
            out.insert(l);
    return out;
}

// The interfaces of this host's network namespace other than lo.
std::set<std::string> HostInterfaces()
{
    std::set<std::string> out;
    for (const auto &l : Lines(wstest::ReadHostFile("/proc/net/dev"))) {
        size_t colon = l.find(':');
        if (colon == std::string::npos)
            continue;
        size_t start = l.find_first_not_of(' ');
        std::string name = l.substr(start, colon - start);
        if (name != "lo")
            out.insert(name);
    }
    return out;
}

// connect(2) to a unix socket from this process: 0 or the errno.
int ConnectUnix(const std::string &path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
    int err = connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0 ? 0 : errno;
    close(fd);
    return err;
}

// One control run of a check: the probe in a local-bash workspace.
struct ControlCase {
    std::string name; // the test's name: the check's, or the check's and a variant
    std::string check;
};

// gtest names a failed case by this rather than by its bytes.
void PrintTo(const ControlCase &c, std::ostream *os)
{
    *os << c.name;
}

const std::vector<ControlCase> kControls = {
    {"extra_fds", "extra_fds"},       {"write_outside", "write_outside"},
    {"read_planted", "read_planted"}, {"read_home", "read_home"},
    {"proc_host", "proc_host"},       {"tcp_loopback", "tcp_loopback"},
    {"unix_socket", "unix_socket"},   {"unix_socket_docker", "unix_socket"},
    {"interfaces", "interfaces"},     {"ptrace_parent", "ptrace_parent"},
    {"unshare_user", "unshare_user"}, {"mount", "mount"},
    {"tiocsti", "tiocsti"},           {"tiocsti_pty", "tiocsti"},
    {"af_packet", "af_packet"},       {"af_alg", "af_alg"},
    {"af_vsock", "af_vsock"},         {"x32_syscall", "x32_syscall"},
    {"i386_syscall", "i386_syscall"}, {"capabilities", "capabilities"},
    {"no_new_privs", "no_new_privs"}, {"seccomp_mode", "seccomp_mode"},
    {"io_uring", "io_uring"},         {"kernel_keyring", "kernel_keyring"},
};

// How one control is run and what it must show.
struct ControlRun {
    std::vector<std::string> args; // after --only CHECK
    // A sh -c script that runs the probe, instead of running it directly.
    std::string script;
    bool pty = false;
    // The detail the probe must print, exactly; or, when empty, a prefix
    // and a suffix it must have.
    std::string detail, detail_prefix, detail_suffix;
    // Refusals the host itself gives, by the probe's exact detail, with
    // what they mean: seen outside the sandbox, they skip the control.
    std::map<std::string, std::string> host_refusals;
    // More checks once the probe has run.
    std::function<void()> after;
};

// What a control run leaves on the host: the probe must undo all of it.
struct HostTraces {
    std::set<std::string> files;   // .escape_probe.* where write_outside creates
    std::set<std::string> tmp;     // mount points mkdtemp'd in /tmp
    std::set<std::string> mounts;  // mountinfo lines naming the probe
    std::set<std::string> keys;    // keys the probe added, while not yet collected
    std::set<std::string> tracers; // server threads with a tracer
    bool operator==(const HostTraces &o) const
    {
        return files == o.files && tmp == o.tmp && mounts == o.mounts && keys == o.keys &&
               tracers == o.tracers;
    }
};

std::ostream &operator<<(std::ostream &os, const HostTraces &t)
{
    return os << "files=[" << Join(t.files) << "] tmp=[" << Join(t.tmp) << "] mounts=["
              << Join(t.mounts) << "] keys=[" << Join(t.keys) << "] tracers=[" << Join(t.tracers)
              << "]";
}

// Every check's control: the same probe binary, run the same way by the same
// server, in a local-bash workspace (no kernel isolation). It must see the
// operation succeed; otherwise the sandbox's "blocked" could come from the
// host (a kernel without the feature, a sysctl, a missing path, a misread
// errno) and prove nothing. Where this host cannot do the operation, or the
// control needs privileges the command lacks, the control is skipped with
// the reason, while the sandbox's assertion (EveryEscapeIsBlocked) still
// runs.
class ProbeControlTest : public SandboxTest, public ::testing::WithParamInterface<ControlCase>
{
  protected:
    // The controls run as the server's uid, as local-bash commands did
    // before workspaces had uids of their own: a workspace's uid has no
    // capability and no_new_privs, so a control that needs what root has
    // would otherwise prove nothing. The sandbox under test is the same.
    void SetUp() override
    {
        extra_args_ = {"--workspace-uids", "off", "--allow-root-commands"};
        SandboxTest::SetUp();
    }

    void TearDown() override
    {
        listeners_.clear();
        for (const auto &p : planted_)
            unlink(p.c_str());
        SandboxTest::TearDown();
    }

    // The uid local-bash commands run as.
    long CommandUid(const wstest::Ws &ws)
    {
        RunResponse r = RunOk(ws, ArgvProcess({"id", "-u"}));
        EXPECT_EQ(r.exited().exit_code(), 0) << r.stderr();
        try {
            return std::stol(r.stdout());
        } catch (const std::exception &) {
            ADD_FAILURE() << "id -u: " << r.stdout();
            return -1;
        }
    }

    // "" when commands run as root, else why the control needs it.
    std::string NeedsRoot(const std::string &why) const
    {
        if (uid_ == 0)
            return "";
        return "needs root (local-bash commands run as uid " + std::to_string(uid_) +
               " here): " + why;
    }

    std::string Plant(const std::string &path)
    {
        planted_.push_back(path);
        wstest::WriteHostFile(path, "planted");
        EXPECT_EQ(wstest::ReadHostFile(path), "planted") << "cannot plant " << path;
        return path;
    }

    HostTraces Traces(const wstest::Ws &ws) const
    {
        HostTraces t;
        for (const std::string &dir : {std::string("/"), std::string("/usr"), std::string("/etc"),
                                       state_, state_ + "/workspaces", WsDir(ws)})
            for (const auto &n : NamesWithPrefix(dir, ".escape_probe."))
                t.files.insert(dir + "/" + n);
        t.tmp = NamesWithPrefix("/tmp", "escape_probe.");
        t.mounts = LinesContaining("/proc/self/mountinfo", "escape_probe");
        t.keys = LinesContaining("/proc/keys", "escape_probe");
        const std::string task = "/proc/" + std::to_string(srv_->pid()) + "/task";
        for (const auto &tid : ListDir(task)) {
            std::string tracer = StatusField(task + "/" + tid + "/status", "TracerPid");
            if (!tracer.empty() && tracer != "0")
                t.tracers.insert(tid + "<-" + tracer);
        }
        return t;
    }

    // Fills `run` for control `c`; returns why the control cannot run on
    // this host, or "".
    std::string Prepare(const ControlCase &c, ControlRun *run)
    {
        const std::string u = Unique();
        const std::string unproven = ", so the sandbox refusing it proves nothing on this host";
        if (c.name == "extra_fds") {
            // The server hands local-bash commands exactly fds 0-2 as well,
            // so there is no leaked fd to find outside the sandbox: the
            // control gives the probe one through its shell and the check
            // must see it.
            run->script = "exec 7</dev/null && exec escape_probe --only extra_fds";
            run->detail = "7->/dev/null";
        } else if (c.name == "write_outside") {
            std::string root = NeedsRoot("/, /usr and /etc belong to root");
            if (!root.empty())
                return root;
            for (const char *dir : {"/", "/usr", "/etc"}) {
                struct statvfs st;
                if (statvfs(dir, &st) == 0 && (st.f_flag & ST_RDONLY))
                    return std::string(dir) + " is mounted read-only on this host" + unproven;
            }
            // ".." is the workspace's parent outside the sandbox.
            run->detail = "/:created /usr:created /etc:created ..:created";
        } else if (c.name == "read_planted") {
            std::string root =
                NeedsRoot("the files are planted in /root and in the server's state directory");
            if (!root.empty())
                return root;
            const std::string a = Plant(state_ + "/planted-" + u);
            const std::string b = Plant("/root/.ws-sandbox-test-planted-" + u);
            run->args = {"--planted", a, "--planted", b};
            run->detail = a + ":readable " + b + ":readable";
        } else if (c.name == "read_home") {
            std::string root = NeedsRoot("/root is readable by root only");
            if (!root.empty())
                return root;
            const std::string name = ".ws-sandbox-test-home-" + u;
            Plant("/root/" + name);
            run->detail_prefix = "/root:[ ";
            run->after = [this, name] {
                EXPECT_NE(last_.detail.find(" " + name + " "), std::string::npos)
                    << "the file planted in /root is not listed: " << last_.detail;
            };
        } else if (c.name == "proc_host") {
            run->detail_prefix = "pids=";
        } else if (c.name == "tcp_loopback") {
            run->args = {"--port", Port()};
            run->detail = "127.0.0.1:" + Port() + ":ok";
        } else if (c.name == "unix_socket") {
            if (uid_ != 0 && uid_ != static_cast<long>(getuid()))
                return NeedsRoot("the sockets are in directories private to uid " +
                                 std::to_string(getuid()));
            // One in a /tmp directory, one in the state directory (whose
            // path may not fit sun_path: the probe's other way in).
            listeners_.push_back(std::make_unique<UnixListener>(
                HostTempDir("ws-sbx-sock", &cleanup_) + "/host.sock"));
            listeners_.push_back(std::make_unique<UnixListener>(state_ + "/host.sock"));
            for (const auto &l : listeners_) {
                run->args.insert(run->args.end(), {"--unix", l->path()});
                run->detail += (run->detail.empty() ? "" : " ") + l->path() + ":ok";
            }
            run->after = [this] {
                for (const auto &l : listeners_)
                    EXPECT_EQ(l->Accepted(), 1) << l->path() << " was not reached";
            };
        } else if (c.name == "unix_socket_docker") {
            std::vector<std::string> present;
            for (const auto &p : kDockerSockets) {
                struct stat st;
                if (stat(p.c_str(), &st) == 0 && S_ISSOCK(st.st_mode))
                    present.push_back(p);
            }
            if (present.empty())
                return "no docker daemon socket (" + kDockerSockets[0] + ", " + kDockerSockets[1] +
                       ") on this host" + unproven;
            std::string root = NeedsRoot("the docker socket is root's and the docker group's");
            if (!root.empty())
                return root;
            for (const auto &p : present) {
                int err = ConnectUnix(p);
                if (err != 0)
                    return p + " is there but no daemon answers on it (" + strerror(err) + ")" +
                           unproven;
                run->args.insert(run->args.end(), {"--unix", p});
                run->detail += (run->detail.empty() ? "" : " ") + p + ":ok";
            }
        } else if (c.name == "interfaces") {
            if (HostInterfaces().empty())
                return "this host's network namespace has no interface but lo" + unproven;
        } else if (c.name == "ptrace_parent") {
            if (Sysctl("kernel/yama/ptrace_scope") == "3")
                return "kernel.yama.ptrace_scope=3: no process may attach to another" + unproven;
            std::string root = NeedsRoot("attaching to the server, the command's parent, takes "
                                         "CAP_SYS_PTRACE unless Yama is off and the command "
                                         "runs as the server's own user");
            if (!root.empty())
                return root;
            // The parent is the server itself.
            run->detail = "seize(ppid=" + std::to_string(srv_->pid()) + "):ok traceme:ok";
        } else if (c.name == "unshare_user") {
            if (!Exists("/proc/self/ns/user"))
                return "this kernel has no user namespaces" + unproven;
            if (Sysctl("user/max_user_namespaces") == "0")
                return "user.max_user_namespaces=0: this host makes no user namespaces" + unproven;
            // The sandboxed command is unprivileged: hosts that refuse user
            // namespaces to unprivileged processes refuse it without the
            // sandbox's help.
            if (Sysctl("kernel/unprivileged_userns_clone") == "0")
                return "kernel.unprivileged_userns_clone=0: the host refuses user namespaces "
                       "to unprivileged processes" +
                       unproven;
            if (Sysctl("kernel/apparmor_restrict_unprivileged_userns") == "1")
                return "kernel.apparmor_restrict_unprivileged_userns=1: the host refuses user "
                       "namespaces to unconfined unprivileged processes" +
                       unproven;
            run->detail = "unshare:ok clone:ok clone3:ok";
        } else if (c.name == "mount") {
            std::string root = NeedsRoot("mounting takes CAP_SYS_ADMIN");
            if (!root.empty())
                return root;
            run->detail_prefix = "mount(/tmp/escape_probe.";
            run->detail_suffix = "):ok fsopen:ok";
        } else if (c.name == "tiocsti" || c.name == "tiocsti_pty") {
            // Without legacy TIOCSTI only CAP_SYS_ADMIN may inject, which
            // the sandboxed command never has.
            const std::string legacy = Sysctl("dev/tty/legacy_tiocsti");
            if (legacy == "0")
                return "dev.tty.legacy_tiocsti=0: the host refuses TIOCSTI to processes "
                       "without CAP_SYS_ADMIN" +
                       unproven;
            run->pty = c.name == "tiocsti_pty";
            run->detail = (legacy.empty() ? "" : "legacy_tiocsti=" + legacy + " ") +
                          (run->pty ? "stdin:ok" : "own-pty:ok");
        } else if (c.name == "af_packet" || c.name == "af_alg" || c.name == "af_vsock") {
            if (c.name == "af_packet") {
                std::string root = NeedsRoot("a packet socket takes CAP_NET_RAW");
                if (!root.empty())
                    return root;
            }
            const std::string family = c.name == "af_packet" ? "AF_PACKET"
                                       : c.name == "af_alg"  ? "AF_ALG"
                                                             : "AF_VSOCK";
            run->detail = "socket:ok";
            run->host_refusals["socket:EAFNOSUPPORT"] =
                "this kernel has no " + family +
                " sockets (EAFNOSUPPORT outside the sandbox: not built, or no module)" + unproven;
        } else if (c.name == "x32_syscall") {
            run->detail_prefix = "returned ";
            run->host_refusals["ENOSYS"] =
                "this kernel has no x32 ABI (a getpid with __X32_SYSCALL_BIT is ENOSYS outside "
                "the sandbox)" +
                unproven;
        } else if (c.name == "i386_syscall") {
            run->detail_prefix = "raw ";
            run->host_refusals["killed by SIGSEGV"] =
                "this kernel has no IA-32 emulation (int $0x80 faults outside the sandbox)" +
                unproven;
        } else if (c.name == "capabilities" || c.name == "no_new_privs" ||
                   c.name == "seccomp_mode") {
            // Outside the sandbox a command has what the server has; if the
            // server itself is already confined, so is every command.
            const std::string status = "/proc/" + std::to_string(srv_->pid()) + "/status";
            if (c.name == "capabilities") {
                std::string root = NeedsRoot("another user's command has no capabilities");
                if (!root.empty())
                    return root;
                const std::string caps = StatusField(status, "CapEff");
                if (caps == "0000000000000000")
                    return "the server itself runs without capabilities" + unproven;
                run->detail = caps;
            } else if (c.name == "no_new_privs") {
                if (StatusField(status, "NoNewPrivs") != "0")
                    return "the server itself runs with no_new_privs set" + unproven;
                run->detail = "0";
            } else {
                const std::string mode = StatusField(status, "Seccomp");
                if (mode != "0")
                    return "the server itself runs in seccomp mode " + mode + unproven;
                run->detail = "0";
            }
        } else if (c.name == "io_uring") {
            const std::string disabled = Sysctl("kernel/io_uring_disabled");
            if (disabled == "2")
                return "kernel.io_uring_disabled=2: io_uring is off on this host" + unproven;
            // 1: only CAP_SYS_ADMIN and kernel.io_uring_group may make rings.
            if (disabled == "1")
                return "kernel.io_uring_disabled=1: the host refuses io_uring to unprivileged "
                       "processes" +
                       unproven;
            run->detail = (disabled.empty() ? "" : "io_uring_disabled=" + disabled + " ") +
                          "io_uring_setup:ok";
            run->host_refusals["io_uring_setup:ENOSYS"] = "this kernel has no io_uring" + unproven;
        } else if (c.name == "kernel_keyring") {
            run->detail = "add_key:ok";
            run->host_refusals["add_key:ENOSYS"] = "this kernel has no keyrings" + unproven;
        } else {
            ADD_FAILURE() << "no control for " << c.name;
        }
        return "";
    }

    // Runs the probe for `check` as `run` says; its one result.
    ProbeCheck RunProbe(const wstest::Ws &ws, const std::string &check, const ControlRun &run)
    {
        std::vector<std::string> argv = {"escape_probe", "--only", check};
        argv.insert(argv.end(), run.args.begin(), run.args.end());
        ProcessConfig p = ArgvProcess(
            run.script.empty() ? argv : std::vector<std::string>{"sh", "-c", run.script});
        if (run.pty) {
            p.mutable_pty()->set_rows(24);
            p.mutable_pty()->set_cols(80);
        }
        RunResponse r = RunOk(ws, p);
        EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED) << r.stderr();
        EXPECT_EQ(r.exited().exit_code(), 0) << r.stderr();
        EXPECT_EQ(r.stderr(), "");
        std::string out = r.stdout();
        // A PTY turns \n into \r\n; anything else (an echoed injected byte)
        // stays and fails the parse.
        if (run.pty)
            for (size_t at; (at = out.find("\r\n")) != std::string::npos;)
                out.erase(at, 1);
        std::string problems;
        auto checks = ParseProbe(out, &problems);
        EXPECT_EQ(problems, "") << r.stdout();
        if (checks.size() != 1 || checks[0].first != check) {
            ADD_FAILURE() << "not one " << check << " line: " << r.stdout();
            return ProbeCheck();
        }
        return checks[0].second;
    }

    long uid_ = -1;
    ProbeCheck last_;
    std::vector<std::string> planted_;
    std::vector<std::unique_ptr<UnixListener>> listeners_;
};

TEST_P(ProbeControlTest, OperationSucceedsWithoutTheSandbox)
{
    const ControlCase &c = GetParam();
    wstest::Ws ws = wstest::OpenShell(wsstub_.get(), {"escape_probe", "sh", "id"});
    uid_ = CommandUid(ws);
    ASSERT_GE(uid_, 0);
    ControlRun run;
    const std::string cannot = Prepare(c, &run);
    if (!cannot.empty())
        GTEST_SKIP() << "no control for " << c.name << ": " << cannot;

    const HostTraces before = Traces(ws);
    last_ = RunProbe(ws, c.check, run);
    const ProbeCheck &got = last_;

    // Whatever the result, the host is as it was: the process keyring the
    // key went to died with the probe, but keys are collected asynchronously.
    HostTraces after = Traces(ws);
    for (auto deadline = Clock::now() + std::chrono::seconds(10);
         after.keys != before.keys && Clock::now() < deadline; after = Traces(ws))
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(after, before) << "the control run left something on the host";
    EXPECT_TRUE(ListDir(WsDir(ws)).empty()) << "the probe left files in the workspace";

    auto refusal = run.host_refusals.find(got.detail);
    if (got.blocked && refusal != run.host_refusals.end())
        GTEST_SKIP() << "no control for " << c.name << ": " << refusal->second;
    EXPECT_TRUE(got.succeeded) << c.check << " did not succeed outside the sandbox (" << got.result
                               << "): " << got.detail;
    if (!run.detail.empty()) {
        EXPECT_EQ(got.detail, run.detail);
    } else {
        EXPECT_EQ(got.detail.compare(0, run.detail_prefix.size(), run.detail_prefix), 0)
            << got.detail;
        EXPECT_GE(got.detail.size(), run.detail_suffix.size()) << got.detail;
        if (got.detail.size() >= run.detail_suffix.size()) {
            EXPECT_EQ(got.detail.substr(got.detail.size() - run.detail_suffix.size()),
                      run.detail_suffix);
        }
    }
    if (run.after)
        run.after();
}

INSTANTIATE_TEST_SUITE_P(EveryCheck, ProbeControlTest, ::testing::ValuesIn(kControls),
                         [](const ::testing::TestParamInfo<ControlCase> &i) {
                             return i.param.name;
                         });

// Every check the probe makes has a control, and every control a check.
TEST(ProbeControls, CoverEveryCheck)
{
    std::set<std::string> controlled;
    for (const auto &c : kControls)
        controlled.insert(c.check);
    EXPECT_EQ(Join(controlled), Join(std::set<std::string>(kAllChecks.begin(), kAllChecks.end())));
}

// The same attempts under a PTY: TIOCSTI on the command's own terminal.
TEST_F(SandboxTest, TerminalInjectionIsBlockedUnderAPty)
{
    wstest::Ws ws = OpenOk();
    ProcessConfig p = ArgvProcess({"escape_probe", "--only", "tiocsti"});
    p.mutable_pty()->set_rows(24);
    p.mutable_pty()->set_cols(80);
    RunResponse r = RunOk(ws, p);
    EXPECT_EQ(r.exited().exit_code(), 0);
    // The PTY turns \n into \r\n.
    std::string out = r.stdout();
    for (size_t at; (at = out.find('\r')) != std::string::npos;)
        out.erase(at, 1);
    std::string name, problems;
    ProbeCheck c;
    ASSERT_TRUE(ParseProbeLine(out.substr(0, out.find('\n')), &name, &c)) << r.stdout();
    EXPECT_EQ(name, "tiocsti");
    EXPECT_TRUE(c.blocked) << c.detail;
    EXPECT_NE(c.detail.find("stdin:EPERM"), std::string::npos) << c.detail;
}

// ---- 2. network ----

// The attack this boundary exists for: a command with network speaks gRPC
// (h2c, with nothing but sh, printf and curl) to a control plane listening on
// the host's loopback, and to any other loopback service. Its network
// namespace is its own, so 127.0.0.1 is the sandbox's loopback, and the
// user-mode network's alias for the host's loopback (10.0.2.2) is disabled.
// The host-side control runs the same script and reaches both.
TEST_F(SandboxTest, NetworkAllowNeverReachesTheHostsLoopback)
{
    // A server's control plane on loopback TCP, which TCP only serves with
    // authentication; the scripts carry its token.
    const std::string tokens = HostTempDir("ws-sbx-tokens", &cleanup_) + "/tokens";
    wstest::WriteHostFile(tokens, "default " + wstest::Sha256Hex("tok-sandbox-test") + "\n");
    Server control({"--listen", "127.0.0.1:0", "--tokens-file", tokens});
    ASSERT_EQ(control.address().compare(0, 10, "127.0.0.1:"), 0) << control.address();
    const std::string cp = control.address();
    const std::string cp_port = cp.substr(cp.rfind(':') + 1);
    const std::string lo = loopback_->addr();

    int rc = -1;
    std::string host = HostSh(H2cScript({cp}, "tok-sandbox-test"), &rc);
    ASSERT_EQ(host, cp + " 200 rc=0\n") << "the control plane is not reachable from the host";
    host = HostSh(GetScript(lo), &rc);
    ASSERT_EQ(host, std::string(TcpListener::kBody) + " rc=0\n");
    ASSERT_EQ(loopback_->accepted(), 1);

    SandboxOptions allow;
    allow.network = true;
    allow.allowed.push_back("curl");
    wstest::Ws on = OpenOk(allow);
    const std::vector<std::string> targets = {cp, "10.0.2.2:" + cp_port, "localhost:" + cp_port, lo,
                                              "10.0.2.2:" + loopback_->port()};
    // The command even holds a valid token: what stops it is the network.
    RunResponse r = Sh(on, H2cScript(targets, "tok-sandbox-test"));
    EXPECT_EQ(r.exited().exit_code(), 0) << r.stderr();
    std::set<std::string> lines = Lines(r.stdout());
    EXPECT_EQ(lines.size(), targets.size()) << r.stdout() << r.stderr();
    for (const auto &t : targets) {
        bool seen = false;
        for (const auto &l : lines)
            if (l.compare(0, t.size() + 1, t + " ") == 0) {
                seen = true;
                // 000 and curl's "could not connect" (7) or connect
                // timeout (28): never an answer, nor a broken one.
                const std::string rc_word = l.substr(l.rfind(' ') + 1);
                EXPECT_EQ(l.substr(t.size() + 1, 4), "000 ") << "reached " << t << ": " << l;
                EXPECT_TRUE(rc_word == "rc=7" || rc_word == "rc=28")
                    << "reached " << t << ": " << l;
            }
        EXPECT_TRUE(seen) << t << " not tried: " << r.stdout() << r.stderr();
    }
    r = Sh(on, GetScript(lo) + "; " + GetScript("10.0.2.2:" + loopback_->port()));
    EXPECT_EQ(r.stdout().find(TcpListener::kBody), std::string::npos) << r.stdout();
    EXPECT_EQ(loopback_->accepted(), 1) << "a sandboxed command connected to the host's loopback";

    // The probe's own loopback check agrees, and the namespace is not the
    // host's: it has the user-mode network's device, not the host's.
    ProbeCheck tcp = ProbeOnly(on, "tcp_loopback", {"--port", Port()});
    EXPECT_TRUE(tcp.blocked) << tcp.detail;
    ProbeCheck ifs = ProbeOnly(on, "interfaces");
    EXPECT_EQ(ifs.detail, "lo tap0");
    EXPECT_EQ(loopback_->accepted(), 1);

    // Describe tells the truth: the network namespace is the sandbox's own.
    ClientContext ctx;
    DescribeRequest dreq;
    DescribeResponse dresp;
    dreq.set_workspace_id(on.id);
    ASSERT_TRUE(wsstub_->Describe(&ctx, dreq, &dresp).ok());
    std::string ns;
    for (const auto &n : dresp.sandbox().namespaces())
        ns += (ns.empty() ? "" : ",") + n;
    EXPECT_EQ(ns, "user,pid,ipc,uts,cgroup,mount,net");
}

// With network the sandbox reaches what the host reaches beyond its
// loopback: a listener on the host's own address, and names through DNS.
// Without network it reaches nothing.
TEST_F(SandboxTest, NetworkAllowReachesTheOutsideAndOffReachesNothing)
{
    const std::string ip = HostGlobalIPv4();
    if (ip.empty())
        GTEST_SKIP() << "this host has no IPv4 address besides loopback: nothing outside the "
                        "sandbox to reach";
    TcpListener outside(ip);
    SandboxOptions allow;
    allow.network = true;
    allow.allowed.insert(allow.allowed.end(), {"curl", "getent"});
    SandboxOptions off;
    off.allowed = allow.allowed;
    wstest::Ws on = OpenOk(allow);
    wstest::Ws none = OpenOk(off);

    RunResponse r = Sh(on, GetScript(outside.addr()));
    EXPECT_EQ(r.stdout(), std::string(TcpListener::kBody) + " rc=0\n") << r.stderr();
    EXPECT_EQ(outside.accepted(), 1);
    // Every command gets its network afresh, and loses it when it ends.
    r = Sh(on, GetScript(outside.addr()));
    EXPECT_EQ(r.stdout(), std::string(TcpListener::kBody) + " rc=0\n") << r.stderr();
    EXPECT_EQ(outside.accepted(), 2);

    r = Sh(none, GetScript(outside.addr()) + "; " + GetScript(loopback_->addr()));
    EXPECT_EQ(r.stdout().find(TcpListener::kBody), std::string::npos) << r.stdout();
    EXPECT_EQ(outside.accepted(), 2) << "a command without network reached the host";
    EXPECT_EQ(loopback_->accepted(), 0);
    ProbeCheck ifs = ProbeOnly(none, "interfaces");
    EXPECT_TRUE(ifs.blocked) << ifs.detail;
    EXPECT_EQ(ifs.detail, "lo");

    // Names: resolved through the user-mode network's forwarder, to what the
    // host's resolver says. Only where the host resolves this one by DNS.
    r = RunOk(on, ArgvProcess({"cat", "/etc/resolv.conf"}));
    EXPECT_EQ(r.stdout(), "nameserver 10.0.2.3\n");
    r = RunOk(none, ArgvProcess({"cat", "/etc/resolv.conf"}));
    EXPECT_EQ(r.stdout(), "");
    const char *name = "deb.debian.org";
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (wstest::ReadHostFile("/etc/hosts").find(name) != std::string::npos ||
        getaddrinfo(name, nullptr, &hints, &res) != 0) {
        if (res)
            freeaddrinfo(res);
        GTEST_SKIP() << "this host does not resolve " << name << " through DNS";
    }
    std::set<std::string> want;
    for (addrinfo *a = res; a; a = a->ai_next) {
        char buf[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in *>(a->ai_addr)->sin_addr, buf,
                  sizeof(buf));
        want.insert(buf);
    }
    freeaddrinfo(res);
    r = RunOk(on, ArgvProcess({"getent", "ahostsv4", name}));
    EXPECT_EQ(r.exited().exit_code(), 0) << r.stderr();
    std::set<std::string> got;
    for (const auto &l : Lines(r.stdout()))
        got.insert(l.substr(0, l.find(' ')));
    EXPECT_EQ(Join(got), Join(want));
    r = RunOk(none, ArgvProcess({"getent", "ahostsv4", name}));
    EXPECT_NE(r.exited().exit_code(), 0) << r.stdout();
}

// Every command with network gets its network, however its start races
// bubblewrap's own setup of the namespace: here the device, its address and
// the default route through the user-mode network's gateway.
TEST_F(SandboxTest, EveryCommandWithNetworkGetsIt)
{
    SandboxOptions allow;
    allow.network = true;
    allow.probe_dir = false;
    wstest::Ws on = OpenOk(allow);
    for (int i = 0; i < 20; i++) {
        RunResponse r = RunOk(on, ArgvProcess({"cat", "/proc/net/route"}));
        ASSERT_EQ(r.exited().exit_code(), 0) << "run " << i << ": " << r.stderr();
        EXPECT_EQ(r.stderr(), "") << "run " << i;
        std::set<std::string> routes;
        for (const auto &l : Lines(r.stdout())) {
            std::istringstream f(l);
            std::string iface, dest, gw;
            if (f >> iface >> dest >> gw && iface != "Iface")
                routes.insert(iface + " " + dest + " " + gw);
        }
        EXPECT_EQ(Join(routes), "tap0 00000000 0202000A tap0 0002000A 00000000") << "run " << i;
    }
}

// Without the user-mode network tool a command with network fails closed,
// WORKSPACE_FAILED naming the tool, and never runs (with the host's network
// or none); commands of workspaces without network are unaffected.
TEST_F(SandboxTest, NetworkFailsClosedWithoutTheUserModeNetwork)
{
    std::vector<std::string> args = PolicyArgs();
    Server srv(args, "", {"WORKSPACED_SLIRP4NETNS=/nonexistent/slirp4netns"});
    const std::string reason =
        "sandboxes with network need slirp4netns (user-mode networking), which is not installed";
    ProviderInfo info = SandboxProvider(srv);
    EXPECT_TRUE(info.available());
    EXPECT_EQ(info.reason(), reason);
    auto stub = srv.workspaces();
    auto exec = srv.exec();
    SandboxOptions o;
    o.probe_dir = false;
    o.network = true;
    wstest::Ws on, off;
    // The Open fails closed ...
    grpc::Status s = OpenSandbox(stub.get(), o, "", &on);
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "WORKSPACE_FAILED");
    EXPECT_EQ(s.error_message(), "local-sandbox with network unavailable: " + reason);
    o.network = false;
    ASSERT_TRUE(OpenSandbox(stub.get(), o, "", &off).ok());
    RunResponse r;
    ASSERT_TRUE(wstest::RunProcess(exec.get(), off.id, ArgvProcess({"true"}), &r).ok());
    EXPECT_EQ(r.exited().exit_code(), 0);
    EXPECT_EQ(srv.Stop(), 0);

    // ... and so does a command of a workspace opened with network while
    // the tool was there, once the server runs without it.
    const std::string state = wstest::MakeTempDir("usernet-gone") + "/state";
    {
        Server with(args, state);
        auto st = with.workspaces();
        o.network = true;
        ASSERT_TRUE(OpenSandbox(st.get(), o, "", &on).ok());
        EXPECT_EQ(with.Stop(), 0);
    }
    Server without(args, state, {"WORKSPACED_SLIRP4NETNS=/nonexistent/slirp4netns"});
    auto ex = without.exec();
    const std::string wsdir = RealPath(without.workspace_dir(on.id));
    s = wstest::RunProcess(ex.get(), on.id, ArgvProcess({"sh", "-c", "touch /workspace/ran"}), &r);
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "WORKSPACE_FAILED");
    EXPECT_EQ(s.error_message(), "the sandbox cannot be created: " + reason);
    EXPECT_FALSE(Exists(wsdir + "/ran")) << "the command ran";
}

// A bind of host path P is at /mnt + P inside, never at P: a bind cannot
// land on the sandbox's own /proc, /dev, /tmp or /workspace.
// In agent mode a box's /tmp lasts as long as the box, for its workspace's
// commands only, and a reset box (a Close, a Resolve after a failure) starts
// with an empty one.
TEST_F(SandboxTest, BoxTmpIsTheWorkspacesOwn)
{
    if (!Agent())
        GTEST_SKIP() << "per-command mode: every command has a /tmp of its own "
                        "(WorkspaceIsTheOnlyWritablePlace)";
    wstest::Ws a = OpenOk(), b = OpenOk();
    const std::string f = "/tmp/ws-box-" + Unique();
    RunResponse r = Sh(a, "echo mine > " + f);
    ASSERT_EQ(r.exited().exit_code(), 0) << r.stderr();
    r = RunOk(a, ArgvProcess({"cat", f}));
    EXPECT_EQ(r.stdout(), "mine\n");
    r = RunOk(b, ArgvProcess({"cat", f}));
    EXPECT_EQ(r.exited().exit_code(), 1) << "another workspace's box saw it";
    EXPECT_NE(r.stderr().find("No such file or directory"), std::string::npos) << r.stderr();
    EXPECT_FALSE(Exists(f)) << "the box's /tmp is the host's";
}

// The host pid of a workspace's box agent: the child of the bubblewrap
// that binds its directory; 0 when there is none.
pid_t BoxAgentPid(const std::string &ws_dir)
{
    pid_t bwrap = 0;
    for (pid_t pid : wstest::PidsWithMarker(ws_dir))
        bwrap = pid;
    if (!bwrap)
        return 0;
    for (pid_t pid : wstest::PidsWithMarker("/.workspaced-agent"))
        if (wstest::ParentPid(pid) == bwrap)
            return pid;
    return 0;
}

// What a command in a box can do to the box's agent (pid 1 there, of the
// command's own uid): nothing. Its memory, environment and descriptors
// are closed to it (the agent is not dumpable), ptrace is refused, a
// SIGKILL from inside the namespace never reaches pid 1, and a forged exit
// record on its own stdout is output like any other.
TEST_F(SandboxTest, CommandsCannotReachTheBoxAgent)
{
    if (!Agent())
        GTEST_SKIP() << "per-command mode: no agent in the sandbox";
    wstest::Ws ws = OpenOk();
    RunResponse r =
        Sh(ws, "cat /proc/1/environ; echo \"environ $?\"; ls /proc/1/fd; echo \"fd $?\"; "
               "cat /proc/1/mem; echo \"mem $?\"; kill -9 1; echo \"kill $?\"; "
               "printf '\\033_wsinit;exited 0\\033\\\\'; exit 3");
    EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(r.exited().exit_code(), 3) << "a forged record was taken for the real one";
    EXPECT_EQ(r.stdout(), "environ 1\nfd 2\nmem 1\nkill 0\n\x1b_wsinit;exited 0\x1b\\");
    EXPECT_NE(r.stderr().find("/proc/1/environ: Permission denied"), std::string::npos)
        << r.stderr();
    EXPECT_NE(r.stderr().find("cannot open directory '/proc/1/fd': Permission denied"),
              std::string::npos)
        << r.stderr();
    // ptrace of pid 1, through python's libc (no debugger in the box).
    r = RunOk(ws, ArgvProcess({"python3", "-c",
                               "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
                               "r = libc.ptrace(16, 1, 0, 0); "
                               "print(r, os.strerror(ctypes.get_errno()))"}));
    EXPECT_EQ(r.stdout(), "-1 Operation not permitted\n") << r.stderr();
    // The agent is still there, and still pid 1.
    r = RunOk(ws, ArgvProcess({"cat", "/proc/1/cmdline"}));
    EXPECT_EQ(r.stdout().substr(0, r.stdout().find('\0')), "/.workspaced-agent");
}

// The agent dying (killed from the host here: nothing inside can) is seen
// at once: the running command ends EVICTED, Describe says the workspace
// failed and why, a command is refused, and a Resolve brings up a fresh box
// over the same files.
TEST_F(SandboxTest, ALostAgentFailsTheBoxUntilResolve)
{
    if (!Agent())
        GTEST_SKIP() << "per-command mode: no agent";
    wstest::Ws ws = OpenOk();
    ASSERT_TRUE(wstest::Write(fs_.get(), ws.id, "kept.txt", "kept").ok());
    std::string m = wstest::UniqueSleep();
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    EventLog log;
    auto rw = StartUntil(&ctx, ws, ArgvProcess({"sh", "-c", "sleep " + m}), &log);
    ASSERT_GE(wstest::WaitProcsAtLeast(m, 1, 10000), 1);
    pid_t agent = BoxAgentPid(RealPath(WsDir(ws)));
    ASSERT_GT(agent, 0) << "no agent found for the box";
    ASSERT_EQ(kill(agent, SIGKILL), 0);
    wstest::ReadEvents(rw.get(), &log);
    rw->Finish();
    ASSERT_TRUE(log.exited);
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EVICTED);
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0) << "the box outlived its agent";

    const std::string why = "the agent's channel ended (the agent exited or was killed)";
    DescribeResponse d;
    {
        ClientContext c;
        DescribeRequest req;
        req.set_workspace_id(ws.id);
        ASSERT_TRUE(wsstub_->Describe(&c, req, &d).ok());
    }
    EXPECT_EQ(d.state(), STATE_FAILED);
    EXPECT_EQ(d.exec_mode(), "agent");
    EXPECT_EQ(d.last_error(), "WORKSPACE_FAILED: the workspace's box ended (" + why +
                                  "); Resolve brings up a fresh one");
    RunResponse r;
    grpc::Status s = Run(ws, ArgvProcess({"true"}), &r);
    EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "WORKSPACE_FAILED");
    EXPECT_EQ(s.error_message(), "the workspace's box ended (" + why +
                                     "); Resolve brings up a fresh one over the same files");

    {
        ClientContext c;
        ResolveRequest req;
        ResolveResponse resp;
        req.mutable_ref()->set_token(ws.token);
        ASSERT_TRUE(wsstub_->Resolve(&c, req, &resp).ok());
    }
    r = RunOk(ws, ArgvProcess({"cat", "kept.txt"}));
    EXPECT_EQ(r.stdout(), "kept");
    {
        ClientContext c;
        DescribeRequest req;
        req.set_workspace_id(ws.id);
        ASSERT_TRUE(wsstub_->Describe(&c, req, &d).ok());
    }
    EXPECT_EQ(d.state(), STATE_OPEN);
    EXPECT_GT(BoxAgentPid(RealPath(WsDir(ws))), 0);
    EXPECT_NE(BoxAgentPid(RealPath(WsDir(ws))), agent);
}

TEST_F(SandboxTest, BindsLiveUnderMnt)
{
    const std::string dir = HostTempDir("ws-sbx-mnt", &cleanup_);
    wstest::WriteHostFile(dir + "/file", "bound");
    SandboxOptions o;
    o.ro = {dir};
    wstest::Ws ws = OpenOk(o);
    RunResponse r = RunOk(ws, ArgvProcess({"cat", "/mnt" + dir + "/file"}));
    EXPECT_EQ(r.stdout(), "bound") << r.stderr();
    r = RunOk(ws, ArgvProcess({"ls", dir}));
    EXPECT_NE(r.exited().exit_code(), 0) << "the bind is at its host path: " << r.stdout();
    // A program found in a bound directory runs from its place inside.
    r = RunOk(ws, ArgvProcess({"escape_probe", "--only", "proc_host"}));
    EXPECT_EQ(r.exited().exit_code(), 0) << r.stderr();
    // /proc is the sandbox's own: its pid 1 is the sandbox's init (the
    // box's agent in agent mode).
    r = RunOk(ws, ArgvProcess({"cat", "/proc/1/cmdline"}));
    EXPECT_EQ(r.stdout().substr(0, r.stdout().find('\0')),
              Agent() ? "/.workspaced-agent" : "/.workspaced-init");
}

// ---- 3. what a command can write ----

// Every descendant of `root`, through each of its threads' children lists
// (a child is listed under the thread that made it).
std::vector<pid_t> Descendants(pid_t root)
{
    std::vector<pid_t> tree;
    std::vector<pid_t> frontier = {root};
    while (!frontier.empty()) {
        pid_t p = frontier.back();
        frontier.pop_back();
        std::istringstream kids(wstest::ReadHostFile("/proc/" + std::to_string(p) + "/task/" +
                                                     std::to_string(p) + "/children"));
        for (pid_t k; kids >> k;) {
            tree.push_back(k);
            frontier.push_back(k);
        }
        // The server's other threads' children too.
        DIR *d = opendir(("/proc/" + std::to_string(p) + "/task").c_str());
        for (struct dirent *e; d && (e = readdir(d));) {
            if (e->d_name[0] == '.' || std::to_string(p) == e->d_name)
                continue;
            std::istringstream more(wstest::ReadHostFile("/proc/" + std::to_string(p) + "/task/" +
                                                         e->d_name + "/children"));
            for (pid_t k; more >> k;) {
                tree.push_back(k);
                frontier.push_back(k);
            }
        }
        if (d)
            closedir(d);
    }
    return tree;
}

// What a review found: bwrap, spawned as the server (root), mapped the
// sandbox's uid 0 to the host's root, so a breakout landed as root, every
// workspace shared one uid, and inside tools saw a root without
// capabilities and took root-only paths that then failed. Now bwrap runs
// as the workspace's own uid, which its user namespace maps alone: the
// same uid inside and out, owning /workspace and what the command writes;
// no process of the sandbox is root on the host (read from /proc while a
// command runs); and another workspace's uid differs.
TEST_F(SandboxTest, CommandsRunAsTheWorkspacesUidInsideAndOut)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "workspace uids need a server that runs as root";
    wstest::Ws a = OpenOk();
    wstest::Ws b = OpenOk();
    struct stat sa, sb;
    ASSERT_EQ(stat(WsDir(a).c_str(), &sa), 0);
    ASSERT_EQ(stat(WsDir(b).c_str(), &sb), 0);
    ASSERT_NE(sa.st_uid, 0u) << "workspace uids are off";
    EXPECT_NE(sa.st_uid, sb.st_uid);
    const std::string uid = std::to_string(sa.st_uid);

    EXPECT_EQ(RunOk(a, ArgvProcess({"id", "-u"})).stdout(), uid + "\n");
    EXPECT_EQ(RunOk(a, ArgvProcess({"id", "-g"})).stdout(), uid + "\n");
    EXPECT_EQ(Sh(a, "stat -c %u /workspace").stdout(), uid + "\n");
    ASSERT_EQ(RunOk(a, ArgvProcess({"touch", "made-inside"})).exited().exit_code(), 0);
    struct stat sm;
    ASSERT_EQ(stat((WsDir(a) + "/made-inside").c_str(), &sm), 0);
    EXPECT_EQ(sm.st_uid, sa.st_uid);
    ASSERT_TRUE(wstest::Write(fs_.get(), a.id, "made-by-api", "x").ok());
    ASSERT_EQ(stat((WsDir(a) + "/made-by-api").c_str(), &sm), 0);
    EXPECT_EQ(sm.st_uid, sa.st_uid);

    // While a command runs: every process of the sandbox (bwrap, init,
    // the command) is the workspace's uid on the host, none root.
    std::string m = wstest::UniqueSleep();
    ProcessConfig sleeper = ArgvProcess({"sleep", m});
    sleeper.set_timeout_ms(10000);
    std::thread run([&] { (void)RunOk(a, sleeper); });
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (wstest::CountProcsWithMarker(m) == 0 && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // The server's descendants, through every thread's children list
    // (what one read shows can lag a fork under load: read again until
    // the whole box is there, or the command is over).
    std::vector<pid_t> tree;
    for (auto until = Clock::now() + std::chrono::seconds(8);
         tree.size() < 3 && Clock::now() < until;
         std::this_thread::sleep_for(std::chrono::milliseconds(50)))
        tree = Descendants(srv_->pid());
    EXPECT_GE(tree.size(), 3u) << "bwrap, init and the command";
    if (tree.size() < 3) {
        run.join();
        return;
    }
    for (pid_t p : tree) {
        std::string status = wstest::ReadHostFile("/proc/" + std::to_string(p) + "/status");
        if (status.empty())
            continue; // gone meanwhile
        EXPECT_NE(status.find("\nUid:\t" + uid + "\t" + uid + "\t" + uid + "\t" + uid + "\n"),
                  std::string::npos)
            << "pid " << p << " is not the workspace's uid:\n"
            << status;
    }
    run.join();
}

TEST_F(SandboxTest, WorkspaceIsTheOnlyWritablePlace)
{
    const std::string rw_dir = HostTempDir("ws-sbx-rw", &cleanup_);
    wstest::WriteHostFile(rw_dir + "/host-file", "from-host");
    SandboxOptions o;
    o.rw = {rw_dir};
    wstest::Ws ws = OpenOk(o);
    const auto state_before = StateOutside(state_, ws.id);
    const auto probe_dir_before = wstest::Snapshot(probe_dir_);

    // Where a command is, and what it is told.
    RunResponse r = RunOk(ws, ArgvProcess({"pwd"}));
    EXPECT_EQ(r.stdout(), "/workspace\n");
    r = Sh(ws, "echo $HOME; echo $PATH");
    EXPECT_EQ(r.stdout(), "/workspace\n" + exec_path_ + "\n");
    ASSERT_TRUE(wstest::Write(fs_.get(), ws.id, "sub/dir/keep", "", nullptr, true).ok());
    ProcessConfig in_sub = ArgvProcess({"pwd"});
    in_sub.set_cwd("sub/dir");
    r = RunOk(ws, in_sub);
    EXPECT_EQ(r.stdout(), "/workspace/sub/dir\n");

    // The workspace: written inside, read through the file RPCs, and back.
    r = Sh(ws, "echo hi > /workspace/out.txt && echo rel > rel.txt");
    EXPECT_EQ(r.exited().exit_code(), 0) << r.stderr();
    std::string got;
    ASSERT_TRUE(wstest::Read(fs_.get(), ws.id, "out.txt", &got).ok());
    EXPECT_EQ(got, "hi\n");
    ASSERT_TRUE(wstest::Read(fs_.get(), ws.id, "rel.txt", &got).ok());
    EXPECT_EQ(got, "rel\n");
    EXPECT_EQ(wstest::ReadHostFile(WsDir(ws) + "/out.txt"), "hi\n");
    ASSERT_TRUE(wstest::Write(fs_.get(), ws.id, "in.txt", "from-rpc").ok());
    r = RunOk(ws, ArgvProcess({"cat", "in.txt"}));
    EXPECT_EQ(r.stdout(), "from-rpc");

    // /tmp: writable, private to the command (in agent mode to the box:
    // the workspace's commands share it, as a container's do, and no other
    // workspace sees it).
    const std::string priv = "/tmp/ws-sbx-private-" + Unique();
    r = Sh(ws, "echo secret > " + priv + " && cat " + priv);
    EXPECT_EQ(r.stdout(), "secret\n") << r.stderr();
    EXPECT_EQ(r.exited().exit_code(), 0);
    EXPECT_FALSE(Exists(priv)) << "the sandbox's /tmp is the host's";
    r = RunOk(ws, ArgvProcess({"cat", priv}));
    if (Agent()) {
        // Another workspace's box does not see it: BoxTmpIsTheWorkspacesOwn.
        EXPECT_EQ(r.stdout(), "secret\n") << "the box's /tmp did not last: " << r.stderr();
    } else {
        EXPECT_EQ(r.exited().exit_code(), 1) << "the next command saw the previous one's /tmp";
        EXPECT_NE(r.stderr().find("No such file or directory"), std::string::npos) << r.stderr();
    }

    // A read_write_paths bind: at /mnt + its host path, both ways.
    r = Sh(ws, "cat /mnt" + rw_dir + "/host-file && echo from-sandbox > /mnt" + rw_dir + "/new");
    EXPECT_EQ(r.exited().exit_code(), 0) << r.stderr();
    EXPECT_EQ(r.stdout(), "from-host");
    EXPECT_EQ(wstest::ReadHostFile(rw_dir + "/new"), "from-sandbox\n");

    // A read_only_paths bind: readable, not writable.
    r = RunOk(ws, ArgvProcess({"ls", "/mnt" + probe_dir_}));
    EXPECT_EQ(r.stdout(), "escape_probe\n");
    r = Sh(ws, "echo x > /mnt" + probe_dir_ + "/nope");
    EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(r.exited().exit_code(), 2);
    EXPECT_NE(r.stderr().find("Read-only file system"), std::string::npos) << r.stderr();
    EXPECT_FALSE(Exists(probe_dir_ + "/nope"));

    // Everything else of the root is read-only.
    const std::string name = "ws-sbx-" + Unique();
    for (const std::string &dir : {std::string(""), std::string("/usr"), std::string("/etc"),
                                   std::string("/usr/bin"), std::string("/workspace/..")}) {
        r = Sh(ws, "echo x > " + dir + "/" + name);
        EXPECT_EQ(r.exited().exit_code(), 2) << dir;
        EXPECT_NE(r.stderr().find("Read-only file system"), std::string::npos)
            << dir << ": " << r.stderr();
    }
    for (const std::string &dir : {std::string(""), std::string("/usr"), std::string("/etc"),
                                   std::string("/usr/bin"), state_ + "/workspaces"})
        EXPECT_FALSE(Exists(dir + "/" + name)) << dir;

    // The root holds only what the sandbox gives: /usr and its neighbours,
    // a few /etc files, /proc, /dev, /tmp, the workspace, the binds' /mnt
    // and init.
    std::set<std::string> want_root = {".",    "..",  "dev", "etc",      "mnt",
                                       "proc", "tmp", "usr", "workspace"};
    if (Agent()) {
        want_root.insert(".workspaced-agent");
        want_root.insert(".workspaced-agent-init");
    } else {
        want_root.insert(".workspaced-init");
    }
    for (const char *d : {"bin", "sbin", "lib", "lib32", "lib64", "libx32"})
        if (Exists(std::string("/") + d))
            want_root.insert(d);
    r = RunOk(ws, ArgvProcess({"ls", "-a", "/"}));
    EXPECT_EQ(Join(Lines(r.stdout())), Join(want_root));
    r = RunOk(ws, ArgvProcess({"ls", "-a", "/etc"}));
    for (const char *secret : {"shadow", "gshadow", "sudoers", "ssh", "machine-id"})
        EXPECT_EQ(Lines(r.stdout()).count(secret), 0u) << "/etc/" << secret << " is visible";
    // Without network the resolver config is an empty placeholder (the
    // host's is bound over it only with network: allow), and of /etc/ssl
    // only the certificates are there, not the private keys.
    r = RunOk(ws, ArgvProcess({"wc", "-c", "/etc/resolv.conf"}));
    EXPECT_EQ(r.stdout(), "0 /etc/resolv.conf\n");
    r = RunOk(ws, ArgvProcess({"ls", "-a", "/etc/ssl"}));
    EXPECT_EQ(Lines(r.stdout()).count("private"), 0u) << r.stdout();
    EXPECT_EQ(Lines(r.stdout()).count("certs"), 1u) << r.stdout();

    auto state_after = StateOutside(state_, ws.id);
    EXPECT_EQ(state_after, state_before) << Describe(state_before, state_after);
    EXPECT_EQ(wstest::Snapshot(probe_dir_), probe_dir_before);
}

// The private /tmp is a tmpfs of WS_SANDBOX_TMP_BYTES (256 MiB): filling it
// is ENOSPC for the command, not the host's memory.
TEST_F(SandboxTest, PrivateTmpIsBounded)
{
    wstest::Ws ws = OpenOk();
    RunResponse r =
        Sh(ws, "head -c 300000000 /dev/zero > /tmp/big; echo rc=$?; wc -c < /tmp/big; rm /tmp/big");
    EXPECT_EQ(r.stdout(), "rc=1\n268435456\n");
    EXPECT_NE(r.stderr().find("No space left on device"), std::string::npos) << r.stderr();
    EXPECT_EQ(r.exited().exit_code(), 0);
}

// Symlinks a command makes in the workspace point into the sandbox's view;
// the server, which sees the host, must not follow them out.
TEST_F(SandboxTest, SymlinksMadeInsideLeadTheServerNowhere)
{
    wstest::Ws ws = OpenOk();
    const std::string key = wstest::ReadHostFile(state_ + "/ref.key");
    ASSERT_EQ(key.size(), 32u);
    RunResponse r = Sh(ws, "ln -s " + state_ + "/ref.key key && ln -s " + state_ +
                               " state && ln -s / root && mkdir real");
    ASSERT_EQ(r.exited().exit_code(), 0) << r.stderr();
    std::string got;
    EXPECT_WS_ERROR(wstest::Read(fs_.get(), ws.id, "key", &got), StatusCode::INVALID_ARGUMENT,
                    "SYMLINK_LEAF");
    EXPECT_WS_ERROR(wstest::Read(fs_.get(), ws.id, "state/ref.key", &got),
                    StatusCode::INVALID_ARGUMENT, "PATH_ESCAPE");
    EXPECT_WS_ERROR(wstest::Read(fs_.get(), ws.id, "root/etc/passwd", &got),
                    StatusCode::INVALID_ARGUMENT, "PATH_ESCAPE");
    EXPECT_WS_ERROR(wstest::Write(fs_.get(), ws.id, "key", "pwned"), StatusCode::INVALID_ARGUMENT,
                    "SYMLINK_LEAF");
    EXPECT_WS_ERROR(wstest::Write(fs_.get(), ws.id, "state/pwned", "pwned"),
                    StatusCode::INVALID_ARGUMENT, "PATH_ESCAPE");
    EXPECT_EQ(wstest::ReadHostFile(state_ + "/ref.key"), key);
    EXPECT_FALSE(Exists(state_ + "/pwned"));
    // A cwd through such a link is refused before anything runs.
    ProcessConfig p = ArgvProcess({"touch", "ran"});
    p.set_cwd("state");
    RunResponse rr;
    grpc::Status s = Run(ws, p, &rr);
    EXPECT_FALSE(s.ok());
    EXPECT_FALSE(Exists(state_ + "/ran"));
    EXPECT_FALSE(Exists(WsDir(ws) + "/ran"));
}

// ---- 4. the exit record ----

TEST_F(SandboxTest, ExitRecordIsTheCommands)
{
    wstest::Ws ws = OpenOk();
    struct {
        std::string script;
        ExitCause cause;
        int code;
        int sig;
    } cases[] = {
        {"exit 0", EXIT_CAUSE_EXITED, 0, 0},
        {"exit 3", EXIT_CAUSE_EXITED, 3, 0},
        {"exit 255", EXIT_CAUSE_EXITED, 255, 0},
        {"kill -TERM $$", EXIT_CAUSE_SIGNALED, 0, 15},
        {"kill -SEGV $$", EXIT_CAUSE_SIGNALED, 0, 11},
        {"kill -KILL $$", EXIT_CAUSE_SIGNALED, 0, 9},
        {"kill -USR1 $$", EXIT_CAUSE_SIGNALED, 0, 10},
    };
    std::string exit3_id;
    for (const auto &c : cases) {
        RunResponse r = Sh(ws, c.script);
        EXPECT_EQ(r.exited().cause(), c.cause) << c.script;
        EXPECT_EQ(r.exited().exit_code(), c.code) << c.script;
        EXPECT_EQ(r.exited().signal(), c.sig) << c.script;
        EXPECT_EQ(r.stderr(), "") << c.script;
        if (c.script == "exit 3")
            exit3_id = r.process_id();
    }
    // A program missing inside is the command's failure, not the sandbox's.
    RunResponse r = Sh(ws, "exec /nonexistent-" + Unique());
    EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(r.exited().exit_code(), 127) << r.stderr();

    // ListProcesses shows the command's argv, not bwrap's.
    ListProcessesResponse list;
    ASSERT_TRUE(ListProcs(ws, &list).ok());
    const ProcessInfo *info = nullptr;
    for (const auto &p : list.processes())
        if (p.id() == exit3_id)
            info = &p;
    ASSERT_NE(info, nullptr);
    std::vector<std::string> argv(info->argv().begin(), info->argv().end());
    EXPECT_EQ(argv, (std::vector<std::string>{RealPath("/usr/bin/sh"), "-c", "exit 3"}));
    ASSERT_TRUE(info->has_exited());
    EXPECT_EQ(info->exited().cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(info->exited().exit_code(), 3);
}

// init reports how the command ended on a pipe only init should hold. The
// command runs as the same user as init (pid 1 of its namespace): unless
// init is out of its reach, the command can write that pipe through
// /proc/1/fd and rewrite init itself through /proc/1/mem.
TEST_F(SandboxTest, CommandCannotForgeItsExitRecord)
{
    wstest::Ws ws = OpenOk();
    RunResponse r = Sh(ws, "echo 'exited 0' > /proc/1/fd/5; exit 3");
    EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(r.exited().exit_code(), 3) << "the command forged its exit record";
    r = Sh(ws, "echo 'signaled 9' > /proc/1/fd/5; exit 4");
    EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(r.exited().exit_code(), 4) << "the command forged its exit record";
    EXPECT_EQ(r.exited().signal(), 0);
    r = Sh(ws, "exec 3<>/proc/1/mem && echo init-memory-writable");
    EXPECT_EQ(r.stdout(), "") << "the command can write init's memory";
}

// ---- 5. signals ----

TEST_F(SandboxTest, SendSignalReachesTheCommandNotTheSandbox)
{
    wstest::Ws ws = OpenOk();
    const std::string m = wstest::UniqueSleep();
    const std::string script = "trap 'echo got; exit 7' TERM; echo ready; "
                               "while :; do sleep 0.1; done # " +
                               m;
    auto ready = [](const EventLog &l) { return l.out.data == "ready\n"; };

    // SendSignal by process id.
    {
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        EventLog log;
        auto rw = StartUntil(&ctx, ws, ArgvProcess({"sh", "-c", script}), &log, ready);
        ASSERT_TRUE(Signal(ws, log.start.id(), SIGTERM).ok());
        wstest::ReadEvents(rw.get(), &log);
        ASSERT_TRUE(rw->Finish().ok());
        EXPECT_TRUE(log.problems.empty()) << wstest::Problems(log);
        EXPECT_EQ(log.out.data, "ready\ngot\n");
        ASSERT_TRUE(log.exited);
        EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EXITED);
        EXPECT_EQ(log.exit.exit_code(), 7);
    }
    // A signal on the Start stream goes the same way.
    {
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        EventLog log;
        auto rw = StartUntil(&ctx, ws, ArgvProcess({"sh", "-c", script}), &log, ready);
        StartRequest sig;
        sig.set_signal(SIGTERM);
        ASSERT_TRUE(rw->Write(sig));
        wstest::ReadEvents(rw.get(), &log);
        ASSERT_TRUE(rw->Finish().ok());
        EXPECT_EQ(log.out.data, "ready\ngot\n");
        ASSERT_TRUE(log.exited);
        EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EXITED);
        EXPECT_EQ(log.exit.exit_code(), 7);
    }
    // SIGKILL ends it all, reported as the signal.
    {
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        EventLog log;
        auto rw = StartUntil(&ctx, ws, ArgvProcess({"sh", "-c", script}), &log, ready);
        ASSERT_TRUE(Signal(ws, log.start.id(), SIGKILL).ok());
        wstest::ReadEvents(rw.get(), &log);
        ASSERT_TRUE(rw->Finish().ok());
        EXPECT_EQ(log.out.data, "ready\n");
        ASSERT_TRUE(log.exited);
        EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_SIGNALED);
        EXPECT_EQ(log.exit.signal(), 9);
    }
    EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0);
    EXPECT_LE(wstest::WaitProcsAtMost(WsDir(ws), IdleBoxProcs(), kSurvivorWaitMs), IdleBoxProcs())
        << "a bwrap is left";
}

// ---- 6. aborts ----

TEST_F(SandboxTest, AbortKillsEverythingInTheSandbox)
{
    wstest::Ws ws = OpenOk();
    const std::string dir = WsDir(ws);

    // (a) Run timeout.
    {
        std::string m = wstest::UniqueSleep();
        ProcessConfig p = ArgvProcess({"sh", "-c", EscapingTree(m)});
        p.set_timeout_ms(1500);
        PeakWatcher watch(m);
        RunResponse r;
        auto t0 = Clock::now();
        grpc::Status s = Run(ws, p, &r);
        EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 30);
        ASSERT_TRUE(s.ok()) << s.error_message();
        EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_TIMEOUT);
        EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0) << "survivors of a timeout";
        // bwrap, init and the three sleeps (at least) carry the marker.
        EXPECT_GE(watch.Stop(), 5) << "the tree never ran";
    }
    EXPECT_LE(wstest::WaitProcsAtMost(dir, IdleBoxProcs(), kSurvivorWaitMs), IdleBoxProcs());

    // (b) Client cancel.
    {
        std::string m = wstest::UniqueSleep();
        ClientContext ctx;
        EventLog log;
        auto rw = StartUntil(&ctx, ws, ArgvProcess({"sh", "-c", EscapingTree(m)}), &log);
        EXPECT_GE(wstest::WaitProcsAtLeast(m, 5, 10000), 5);
        ctx.TryCancel();
        wstest::ReadEvents(rw.get(), &log);
        EXPECT_EQ(rw->Finish().error_code(), StatusCode::CANCELLED);
        EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0) << "survivors of a cancel";
        ProcessInfo info = WaitFinished(ws, log.start.id());
        ASSERT_TRUE(info.has_exited());
        EXPECT_EQ(info.exited().cause(), EXIT_CAUSE_CANCELLED);
    }
    EXPECT_LE(wstest::WaitProcsAtMost(dir, IdleBoxProcs(), kSurvivorWaitMs), IdleBoxProcs());

    // (c) Workspace Close, with a streamed and a background command.
    {
        std::string m = wstest::UniqueSleep();
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
        EventLog log;
        auto rw = StartUntil(&ctx, ws, ArgvProcess({"sh", "-c", EscapingTree(m)}), &log);
        {
            ClientContext bctx;
            ProcessConfig b = ArgvProcess({"sh", "-c", "trap '' TERM; " + EscapingTree(m)});
            b.set_background(true);
            EventLog blog;
            auto brw = StartUntil(&bctx, ws, b, &blog);
            bctx.TryCancel();
            brw->Finish();
        }
        EXPECT_GE(wstest::WaitProcsAtLeast(m, 10, 10000), 10);
        ASSERT_TRUE(Close(ws).ok());
        wstest::ReadEvents(rw.get(), &log);
        rw->Finish();
        ASSERT_TRUE(log.exited) << "no exited event on the open stream";
        EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EVICTED);
        EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0) << "survivors of a Close";
    }
    EXPECT_EQ(wstest::WaitProcsAtMost(dir, 0, kSurvivorWaitMs), 0);

    // (d) The server SIGKILLed mid-command: nothing of the server is left to
    // kill the tree, bwrap's --die-with-parent does.
    {
        wstest::Ws ws2 = OpenOk();
        std::string m = wstest::UniqueSleep();
        ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
        EventLog log;
        auto rw = StartUntil(&ctx, ws2, ArgvProcess({"sh", "-c", EscapingTree(m)}), &log);
        ProcessConfig b = ArgvProcess({"sh", "-c", "trap '' TERM; " + EscapingTree(m)});
        b.set_background(true);
        {
            ClientContext bctx;
            EventLog blog;
            auto brw = StartUntil(&bctx, ws2, b, &blog);
            bctx.TryCancel();
            brw->Finish();
        }
        EXPECT_GE(wstest::WaitProcsAtLeast(m, 10, 10000), 10);
        srv_->Kill();
        wstest::ReadEvents(rw.get(), &log);
        rw->Finish();
        EXPECT_EQ(wstest::WaitProcsAtMost(m, 0, kSurvivorWaitMs), 0)
            << "survivors of the server's death";
        EXPECT_EQ(wstest::WaitProcsAtMost(WsDir(ws2), 0, kSurvivorWaitMs), 0)
            << "a bwrap or init outlived the server";
    }
}

// ---- 7. PTY ----

TEST_F(SandboxTest, PtyHasAControllingTerminal)
{
    wstest::Ws ws = OpenOk();
    const std::string script =
        "read pid comm state ppid pgrp session tty tpgid rest < /proc/self/stat; "
        "echo tty=$tty fg=$([ $tpgid = $pgrp ] && echo yes || echo no)";
    ProcessConfig p = ArgvProcess({"sh", "-c", script});
    p.mutable_pty()->set_rows(24);
    p.mutable_pty()->set_cols(80);
    RunResponse r = RunOk(ws, p);
    EXPECT_EQ(r.exited().exit_code(), 0) << r.stdout();
    EXPECT_EQ(r.stdout().compare(0, 4, "tty="), 0) << r.stdout();
    EXPECT_EQ(r.stdout().find("tty=0 "), std::string::npos) << "no controlling terminal";
    EXPECT_NE(r.stdout().find(" fg=yes\r\n"), std::string::npos)
        << "the command is not the terminal's foreground group: " << r.stdout();
    // Without a PTY there is no terminal at all.
    r = RunOk(ws, ArgvProcess({"sh", "-c", script}));
    EXPECT_EQ(r.stdout(), "tty=0 fg=no\n");

    // Input through the PTY: the line discipline echoes it, cat repeats it,
    // ^D ends cat.
    ProcessConfig c = ArgvProcess({"cat"});
    c.mutable_pty()->set_rows(24);
    c.mutable_pty()->set_cols(80);
    c.set_timeout_ms(30000);
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    EventLog log;
    auto rw = StartUntil(&ctx, ws, c, &log);
    StartRequest in;
    in.set_stdin("hello\n");
    ASSERT_TRUE(rw->Write(in));
    wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) {
        return l.pty.data.find("hello\r\nhello\r\n") != std::string::npos;
    });
    EXPECT_EQ(log.pty.data, "hello\r\nhello\r\n");
    in.set_stdin("\x04");
    ASSERT_TRUE(rw->Write(in));
    wstest::ReadEvents(rw.get(), &log);
    ASSERT_TRUE(rw->Finish().ok());
    ASSERT_TRUE(log.exited);
    EXPECT_EQ(log.exit.cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(log.exit.exit_code(), 0);
}

// ---- 8. fail closed ----

TEST_F(SandboxTest, FailsClosed)
{
    // (a) No init.
    {
        Server srv({}, "", {"WORKSPACED_SANDBOX_INIT=/nonexistent/init"});
        ProviderInfo info = SandboxProvider(srv);
        EXPECT_FALSE(info.available());
        EXPECT_EQ(info.reason(),
                  "the sandbox init (workspaced-sandbox-init) is not installed next to the server");
        auto stub = srv.workspaces();
        grpc::Status s = OpenSandbox(stub.get(), SandboxOptions(), "", nullptr);
        EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "WORKSPACE_FAILED");
        EXPECT_TRUE(wstest::Snapshot(srv.state_dir() + "/workspaces").empty());
    }
    // (b) A bwrap that cannot make namespaces here.
    {
        std::string dir = HostTempDir("ws-sbx-fakebwrap", &cleanup_);
        std::string fake = dir + "/bwrap";
        wstest::WriteHostFile(fake, "#!/bin/sh\n"
                                    "echo 'bwrap: setting up uid map: Permission denied' >&2\n"
                                    "exit 1\n");
        ASSERT_EQ(chmod(fake.c_str(), 0755), 0);
        Server srv({}, "", {"WORKSPACED_BWRAP=" + fake});
        ProviderInfo info = SandboxProvider(srv);
        EXPECT_FALSE(info.available());
        EXPECT_EQ(info.reason(), "bubblewrap cannot create a sandbox here: bwrap: setting up uid "
                                 "map: Permission denied");
        auto stub = srv.workspaces();
        grpc::Status s = OpenSandbox(stub.get(), SandboxOptions(), "", nullptr);
        EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "WORKSPACE_FAILED");
        EXPECT_TRUE(wstest::Snapshot(srv.state_dir() + "/workspaces").empty());
    }
    // (c, d) The backend (bwrap, then init) removed after Open: the command
    // does not run, unsandboxed or otherwise.
    struct {
        const char *what;
        std::string source;
        const char *env;
        std::string reason;
    } gone[] =
        {
            {"bwrap", "/usr/bin/bwrap", "WORKSPACED_BWRAP", "bubblewrap (bwrap) is not installed"},
            {"init", kInitRunfile, "WORKSPACED_SANDBOX_INIT",
             "the sandbox init (workspaced-sandbox-init) is not installed next to the server"},
        },
      agent_gone[] = {
          {"bwrap", "/usr/bin/bwrap", "WORKSPACED_BWRAP", "bubblewrap (bwrap) is not installed"},
          {"agent", kAgentRunfile, "WORKSPACED_AGENT",
           "the sandbox's agent (workspaced-agent) is not installed"},
          {"agent-init", kAgentInitRunfile, "WORKSPACED_DOCKER_INIT",
           "the agent's init (workspaced-docker-init) is not installed"},
      };
    // In agent mode a workspace's box, once made, needs none of them: its
    // commands still run inside it. A box made after one went fails closed
    // as a command's sandbox does.
    if (Agent()) {
        for (const auto &g : agent_gone) {
            std::string dir = HostTempDir("ws-sbx-backend", &cleanup_);
            std::string copy = dir + "/" + g.what;
            CopyFile(g.source, copy, 0755);
            Server srv({}, "", {std::string(g.env) + "=" + copy});
            auto stub = srv.workspaces();
            auto exec = srv.exec();
            wstest::Ws ws, fresh;
            SandboxOptions o;
            o.probe_dir = false;
            ASSERT_TRUE(OpenSandbox(stub.get(), o, "", &ws).ok()) << g.what;
            RunResponse r;
            ASSERT_TRUE(wstest::RunProcess(exec.get(), ws.id, ArgvProcess({"true"}), &r).ok());
            EXPECT_EQ(r.exited().exit_code(), 0) << g.what;
            ASSERT_EQ(unlink(copy.c_str()), 0);
            ASSERT_TRUE(
                wstest::RunProcess(exec.get(), ws.id, ArgvProcess({"cat", "/proc/1/cmdline"}), &r)
                    .ok());
            EXPECT_EQ(r.stdout().substr(0, r.stdout().find('\0')), "/.workspaced-agent")
                << g.what << ": the box's command ran outside it";
            if (std::string(g.what) == "bwrap") {
                // The provider is unavailable: no new workspace.
                EXPECT_FALSE(SandboxProvider(srv).available());
                continue;
            }
            ASSERT_TRUE(OpenSandbox(stub.get(), o, "", &fresh).ok()) << g.what;
            const std::string wsdir = RealPath(srv.workspace_dir(fresh.id));
            grpc::Status s = wstest::RunProcess(
                exec.get(), fresh.id, ArgvProcess({"sh", "-c", "touch /workspace/ran"}), &r);
            EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "WORKSPACE_FAILED") << g.what;
            EXPECT_EQ(s.error_message(), g.reason) << g.what;
            EXPECT_FALSE(Exists(wsdir + "/ran")) << g.what << ": the command ran";
        }
        return;
    }
    for (const auto &g : gone) {
        std::string dir = HostTempDir("ws-sbx-backend", &cleanup_);
        std::string copy = dir + "/" + g.what;
        CopyFile(g.source, copy, 0755);
        Server srv({}, "", {std::string(g.env) + "=" + copy});
        EXPECT_TRUE(SandboxProvider(srv).available()) << g.what;
        auto stub = srv.workspaces();
        auto exec = srv.exec();
        wstest::Ws ws;
        SandboxOptions o;
        o.probe_dir = false;
        ASSERT_TRUE(OpenSandbox(stub.get(), o, "", &ws).ok()) << g.what;
        const std::string wsdir = RealPath(srv.workspace_dir(ws.id));
        RunResponse r;
        ASSERT_TRUE(wstest::RunProcess(exec.get(), ws.id, ArgvProcess({"true"}), &r).ok());
        EXPECT_EQ(r.exited().exit_code(), 0) << g.what;

        ASSERT_EQ(unlink(copy.c_str()), 0);
        grpc::Status s = wstest::RunProcess(exec.get(), ws.id,
                                            ArgvProcess({"sh", "-c", "touch /workspace/ran"}), &r);
        EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "WORKSPACE_FAILED") << g.what;
        EXPECT_EQ(s.error_message(), "the sandbox cannot be created: " + g.reason) << g.what;
        {
            ClientContext ctx;
            ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
            auto rw = wstest::StartStream(exec.get(), &ctx, ws.id,
                                          ArgvProcess({"sh", "-c", "touch /workspace/ran"}));
            EventLog log;
            wstest::ReadEvents(rw.get(), &log);
            EXPECT_WS_ERROR(rw->Finish(), StatusCode::FAILED_PRECONDITION, "WORKSPACE_FAILED")
                << g.what;
            EXPECT_FALSE(log.started) << g.what;
        }
        EXPECT_FALSE(Exists(wsdir + "/ran")) << g.what << ": the command ran";
        EXPECT_FALSE(SandboxProvider(srv).available()) << g.what;
        EXPECT_EQ(SandboxProvider(srv).reason(), g.reason) << g.what;
    }
}

// ---- 9. hostile binds ----

TEST_F(SandboxTest, HostileBindsAreRefused)
{
    const std::string good = HostTempDir("ws-sbx-good", &cleanup_);
    const std::string target = HostTempDir("ws-sbx-target", &cleanup_);
    const std::string link = good + "/link";
    ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
    const std::string parent_of_state = state_.substr(0, state_.rfind('/'));
    // Canonical paths the operator's policy refuses (PERMISSION_DENIED
    // POLICY, rule bind-roots: which of its checks says so depends on where
    // the state directory is); malformed ones are refused before policy.
    const std::string policy = "";
    const std::string not_canonical = "must be an existing canonical absolute path (no symlinks)";
    struct {
        std::string path;
        const std::string &why;
    } cases[] = {
        {state_, policy},
        {state_ + "/workspaces", policy},
        {parent_of_state, policy},
        {"/", policy},
        {link, not_canonical},
        {link + "/", not_canonical},
        {"relative/path", not_canonical},
        {"tmp", not_canonical},
        {"", not_canonical},
        {"/nonexistent-" + Unique(), not_canonical},
        {good + "/", not_canonical},
        {good + "/.", not_canonical},
        {good + "/../" + good.substr(good.rfind('/') + 1), not_canonical},
        {"/" + good, not_canonical},
        {srv_->state_dir() + "/../" + state_.substr(state_.rfind('/') + 1), not_canonical},
    };
    for (const char *field : {"read_write_paths", "read_only_paths"}) {
        for (const auto &c : cases) {
            for (size_t index : {0, 1}) {
                SandboxOptions o;
                o.probe_dir = false;
                std::vector<std::string> paths;
                if (index == 1)
                    paths.push_back(good);
                paths.push_back(c.path);
                (strcmp(field, "read_write_paths") == 0 ? o.rw : o.ro) = paths;
                grpc::Status s = OpenSandbox(wsstub_.get(), o, "", nullptr);
                const std::string at = std::string(field) + "[" + std::to_string(index) + "] ";
                if (&c.why == &policy) {
                    EXPECT_WS_ERROR(s, StatusCode::PERMISSION_DENIED, "POLICY")
                        << field << " '" << c.path << "'";
                    EXPECT_EQ(s.error_message().rfind(
                                  "policy rule bind-roots: " + at + "\"" + c.path + "\" ", 0),
                              0u)
                        << s.error_message();
                    EXPECT_EQ(wstest::Decode(s).metadata["rule"], "bind-roots");
                    // Metadata values are capped in length: the path's start.
                    const std::string meta = wstest::Decode(s).metadata["path"];
                    EXPECT_TRUE(!meta.empty() && c.path.rfind(meta, 0) == 0) << meta;
                    continue;
                }
                EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED")
                    << field << " '" << c.path << "'";
                EXPECT_EQ(s.error_message(), at + c.why) << c.path;
                EXPECT_EQ(wstest::Decode(s).metadata["field"], field);
            }
        }
    }
    EXPECT_TRUE(wstest::Snapshot(state_ + "/workspaces").empty());
    // The good one alone is accepted, both ways.
    SandboxOptions o;
    o.rw = {good};
    o.ro = {target};
    o.probe_dir = false;
    EXPECT_TRUE(OpenSandbox(wsstub_.get(), o, "", nullptr).ok());
}

// Bind paths are bound on every command, not only checked at Open. A path
// that was a canonical directory at Open may be a symlink by the time bwrap
// binds it, and bwrap follows it: here a command of one workspace (which may
// write the bind's parent) swaps another workspace's bind for a symlink to
// the server's state directory. The second workspace's next command must not
// see the ref key and the other workspaces' files (failing closed is fine).
TEST_F(SandboxTest, BindPathsSwappedAfterOpenStayOutOfTheStateDir)
{
    const std::string host = HostTempDir("ws-sbx-swap", &cleanup_);
    // Writable by the workspaces' uids, whose commands swap them.
    ASSERT_EQ(mkdir((host + "/a").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((host + "/a/b").c_str(), 0755), 0);
    ASSERT_EQ(chmod((host + "/a").c_str(), 0777), 0);
    ASSERT_EQ(chmod((host + "/a/b").c_str(), 0777), 0);
    SandboxOptions oa;
    oa.rw = {host};
    wstest::Ws a = OpenOk(oa);
    SandboxOptions ob;
    ob.rw = {host + "/a/b"};
    wstest::Ws b = OpenOk(ob);
    ASSERT_FALSE(a.id.empty());
    ASSERT_FALSE(b.id.empty());
    RunResponse r = RunOk(b, ArgvProcess({"ls", "-a", "/mnt" + host + "/a/b"}));
    EXPECT_EQ(r.stdout(), ".\n..\n");

    // Workspace a replaces b's bind path with a link to the state directory.
    // Binds are at /mnt + their host path inside; the link's target is the
    // host's state directory, which is what bwrap would follow on the host.
    r = Sh(a, "rm -r /mnt" + host + "/a/b && ln -s " + state_ + " /mnt" + host + "/a/b");
    ASSERT_EQ(r.exited().exit_code(), 0) << r.stderr();
    ScopedUnlink pwned{state_ + "/pwned-by-sandbox"};
    grpc::Status s = Run(b,
                         ArgvProcess({"sh", "-c",
                                      "ls -a /mnt" + host + "/a/b; echo pwned > /mnt" + host +
                                          "/a/b/pwned-by-sandbox"}),
                         &r);
    // Failing closed would be fine; showing the state directory is not.
    if (s.ok()) {
        EXPECT_EQ(r.stdout().find("ref.key"), std::string::npos)
            << "the state directory is bound into the sandbox: " << r.stdout();
        EXPECT_EQ(r.stdout().find(a.id), std::string::npos)
            << "another workspace is visible: " << r.stdout();
    } else {
        EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "WORKSPACE_FAILED");
    }
    EXPECT_FALSE(Exists(pwned.path)) << "a sandboxed command wrote into the state directory";
}

} // namespace
