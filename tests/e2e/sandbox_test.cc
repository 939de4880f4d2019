// Local-sandbox end to end: the real server, real bubblewrap, the real
// sandbox init and a real client prove the boundary holds. The escape probe
// (tests/sandbox/escape_probe.c) runs inside a command and tries every known
// way out; the other tests check what a sandboxed command can write, how its
// exit is reported, that signals reach the command and not the sandbox, that
// every abort kills everything inside, that a missing backend fails closed,
// and that hostile bind paths are refused.
//
// The probe is copied into a fresh directory under the host's /tmp that the
// server searches first (--exec-path) and that each workspace binds
// read-only. Not under TEST_TMPDIR: that lives in /root/.cache, and binding
// it would make /root show up inside the sandbox.
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
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
const char kInitRunfile[] = "server/sandbox/workspaced-sandbox-init";
const int kSurvivorWaitMs = 10000;

// Every check escape_probe makes, in the order it prints them (README.md).
const std::vector<std::string> kAllChecks = {
    "extra_fds",    "write_outside",  "read_planted", "read_home",     "proc_host",
    "tcp_loopback", "unix_socket",    "interfaces",   "ptrace_parent", "unshare_user",
    "mount",        "tiocsti",        "af_packet",    "af_alg",        "af_vsock",
    "x32_syscall",  "i386_syscall",   "capabilities", "no_new_privs",  "seccomp_mode",
    "io_uring",     "kernel_keyring",
};

const std::vector<std::string> kAllowed = {
    "escape_probe", "sh",  "sleep", "cat", "id", "setsid", "echo", "ls", "true",
    "kill",         "pwd", "touch", "ln",  "rm", "mkdir",  "head", "wc",
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

// A fresh canonical directory under the host's /tmp, removed by the fixture.
std::string HostTempDir(const std::string &prefix, std::vector<std::string> *cleanup)
{
    std::string tmpl = "/tmp/" + prefix + "XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data()))
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
    bool blocked = false;
    std::string detail;
};

// One line exactly as the probe prints it:
// {"check":"NAME","blocked":true|false,"detail":"..."} with \" \\ and \u00XX
// escapes in the detail. False for anything else.
bool ParseProbeLine(const std::string &line, std::string *ret_name, ProbeCheck *ret)
{
    static const std::string kHead = "{\"check\":\"",
                             kBlocked = "\",\"blocked\":", kDetail = ",\"detail\":\"";
    if (line.compare(0, kHead.size(), kHead) != 0)
        return false;
    size_t i = kHead.size();
    size_t end = line.find('"', i);
    if (end == std::string::npos)
        return false;
    std::string name = line.substr(i, end - i);
    i = end;
    if (line.compare(i, kBlocked.size(), kBlocked) != 0)
        return false;
    i += kBlocked.size();
    ProbeCheck c;
    if (line.compare(i, 4, "true") == 0) {
        c.blocked = true;
        i += 4;
    } else if (line.compare(i, 5, "false") == 0) {
        i += 5;
    } else {
        return false;
    }
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
        for (const auto &d : cleanup_)
            RemoveTree(d);
    }

    void StartServer()
    {
        srv_ = std::make_unique<Server>(std::vector<std::string>{"--exec-path", exec_path_});
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

    std::string Port() const
    {
        return srv_->address().substr(srv_->address().rfind(':') + 1);
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
    std::string probe_dir_, probe_, exec_path_, state_;
    std::unique_ptr<Server> srv_;
    std::unique_ptr<Workspaces::Stub> wsstub_;
    std::unique_ptr<Exec::Stub> exec_;
    std::unique_ptr<FileSystem::Stub> fs_;
};

// ---- 1. the probe ----

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

    auto checks = Probe(ws, {"--planted", planted_state, "--planted", planted_home.path, "--unix",
                             tmp_sock.path(), "--unix", state_sock.path(), "--port", Port()});
    std::vector<std::string> names;
    for (const auto &c : checks)
        names.push_back(c.first);
    EXPECT_EQ(names, kAllChecks);
    std::map<std::string, ProbeCheck> by;
    for (const auto &c : checks) {
        EXPECT_TRUE(c.second.blocked) << c.first << " NOT blocked: " << c.second.detail;
        by[c.first] = c.second;
    }
    // The exact values where they are fixed by the sandbox's shape.
    EXPECT_EQ(by["extra_fds"].detail, "");
    EXPECT_EQ(by["read_home"].detail, "/root:ENOENT /home:ENOENT");
    EXPECT_EQ(by["interfaces"].detail, "lo");
    EXPECT_EQ(by["capabilities"].detail, "0000000000000000");
    EXPECT_EQ(by["no_new_privs"].detail, "1");
    EXPECT_EQ(by["seccomp_mode"].detail, "2");
    // Only init and the probe in the pid namespace, init as pid 1 running the
    // command given.
    EXPECT_EQ(by["proc_host"].detail.rfind("pids=2 max=2 pid1=/.workspaced-init 5 " + probe_, 0),
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

// The control: the same probe, the same server, but a local-bash workspace
// (no kernel isolation). The checks that only look (nothing is created, no
// process is touched) must say "not blocked", or the probe and its parser
// are blind and the test above proves nothing.
TEST_F(SandboxTest, ProbeSeesTheHostWithoutTheSandbox)
{
    wstest::Ws ws = wstest::OpenShell(wsstub_.get(), {"escape_probe"});
    struct {
        std::string check;
        std::vector<std::string> args;
    } cases[] = {
        {"proc_host", {}},    {"tcp_loopback", {"--port", Port()}},
        {"interfaces", {}},   {"capabilities", {}},
        {"seccomp_mode", {}}, {"read_home", {}},
    };
    for (const auto &c : cases) {
        ProbeCheck got = ProbeOnly(ws, c.check, c.args);
        EXPECT_FALSE(got.blocked) << c.check << ": " << got.detail;
    }
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

TEST_F(SandboxTest, NetworkAllowReachesLoopback)
{
    SandboxOptions allow;
    allow.network = true;
    wstest::Ws on = OpenOk(allow);
    wstest::Ws off = OpenOk();

    ProbeCheck tcp = ProbeOnly(on, "tcp_loopback", {"--port", Port()});
    EXPECT_FALSE(tcp.blocked) << tcp.detail;
    EXPECT_EQ(tcp.detail, "127.0.0.1:" + Port() + ":ok");
    ProbeCheck ifs = ProbeOnly(on, "interfaces");
    EXPECT_FALSE(ifs.blocked) << ifs.detail;
    EXPECT_NE(ifs.detail, "lo");

    tcp = ProbeOnly(off, "tcp_loopback", {"--port", Port()});
    EXPECT_TRUE(tcp.blocked) << tcp.detail;
    ifs = ProbeOnly(off, "interfaces");
    EXPECT_TRUE(ifs.blocked) << ifs.detail;
    EXPECT_EQ(ifs.detail, "lo");

    // Name resolution config follows the policy too.
    RunResponse r = RunOk(on, ArgvProcess({"cat", "/etc/resolv.conf"}));
    EXPECT_EQ(r.stdout(), wstest::ReadHostFile("/etc/resolv.conf"));
    r = RunOk(off, ArgvProcess({"cat", "/etc/resolv.conf"}));
    EXPECT_EQ(r.stdout(), "");
}

// ---- 3. what a command can write ----

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

    // /tmp: writable, private to the command.
    const std::string priv = "/tmp/ws-sbx-private-" + Unique();
    r = Sh(ws, "echo secret > " + priv + " && cat " + priv);
    EXPECT_EQ(r.stdout(), "secret\n") << r.stderr();
    EXPECT_EQ(r.exited().exit_code(), 0);
    EXPECT_FALSE(Exists(priv)) << "the sandbox's /tmp is the host's";
    r = RunOk(ws, ArgvProcess({"cat", priv}));
    EXPECT_EQ(r.exited().exit_code(), 1) << "the next command saw the previous one's /tmp";
    EXPECT_NE(r.stderr().find("No such file or directory"), std::string::npos) << r.stderr();

    // A read_write_paths bind: at its host path, both ways.
    r = Sh(ws, "cat " + rw_dir + "/host-file && echo from-sandbox > " + rw_dir + "/new");
    EXPECT_EQ(r.exited().exit_code(), 0) << r.stderr();
    EXPECT_EQ(r.stdout(), "from-host");
    EXPECT_EQ(wstest::ReadHostFile(rw_dir + "/new"), "from-sandbox\n");

    // A read_only_paths bind: readable, not writable.
    r = RunOk(ws, ArgvProcess({"ls", probe_dir_}));
    EXPECT_EQ(r.stdout(), "escape_probe\n");
    r = Sh(ws, "echo x > " + probe_dir_ + "/nope");
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
    // a few /etc files, /proc, /dev, /tmp, the workspace and init.
    std::set<std::string> want_root = {".",   "..",  ".workspaced-init", "dev", "etc", "proc",
                                       "tmp", "usr", "workspace"};
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
    EXPECT_EQ(wstest::WaitProcsAtMost(WsDir(ws), 0, kSurvivorWaitMs), 0) << "a bwrap is left";
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
    EXPECT_EQ(wstest::WaitProcsAtMost(dir, 0, kSurvivorWaitMs), 0);

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
    EXPECT_EQ(wstest::WaitProcsAtMost(dir, 0, kSurvivorWaitMs), 0);

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
    } gone[] = {
        {"bwrap", "/usr/bin/bwrap", "WORKSPACED_BWRAP", "bubblewrap (bwrap) is not installed"},
        {"init", kInitRunfile, "WORKSPACED_SANDBOX_INIT",
         "the sandbox init (workspaced-sandbox-init) is not installed next to the server"},
    };
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
    const std::string overlaps = "overlaps the server's own directories";
    const std::string not_canonical = "must be an existing canonical absolute path (no symlinks)";
    struct {
        std::string path;
        const std::string &why;
    } cases[] = {
        {state_, overlaps},
        {state_ + "/workspaces", overlaps},
        {parent_of_state, overlaps},
        {"/", overlaps},
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
                EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED")
                    << field << " '" << c.path << "'";
                EXPECT_EQ(s.error_message(),
                          std::string(field) + "[" + std::to_string(index) + "] " + c.why)
                    << c.path;
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
    ASSERT_EQ(mkdir((host + "/a").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((host + "/a/b").c_str(), 0755), 0);
    SandboxOptions oa;
    oa.rw = {host};
    wstest::Ws a = OpenOk(oa);
    SandboxOptions ob;
    ob.rw = {host + "/a/b"};
    wstest::Ws b = OpenOk(ob);
    ASSERT_FALSE(a.id.empty());
    ASSERT_FALSE(b.id.empty());
    RunResponse r = RunOk(b, ArgvProcess({"ls", "-a", host + "/a/b"}));
    EXPECT_EQ(r.stdout(), ".\n..\n");

    // Workspace a replaces b's bind path with a link to the state directory.
    r = Sh(a, "rm -r " + host + "/a/b && ln -s " + state_ + " " + host + "/a/b");
    ASSERT_EQ(r.exited().exit_code(), 0) << r.stderr();
    ScopedUnlink pwned{state_ + "/pwned-by-sandbox"};
    grpc::Status s =
        Run(b,
            ArgvProcess({"sh", "-c",
                         "ls -a " + host + "/a/b; echo pwned > " + host + "/a/b/pwned-by-sandbox"}),
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
