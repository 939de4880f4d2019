#include "tests/e2e/harness.h"

#include "tests/testutil/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <grpcpp/support/client_interceptor.h>
#include <openssl/evp.h>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

extern char **environ;

namespace wstest
{

namespace
{

const char *kBinary = "server/workspaced";

std::string HashOf(const std::string &data)
{
    return std::to_string(std::hash<std::string>{}(data)) + ":" + std::to_string(data.size());
}

void SnapshotInto(const std::string &root, const std::string &rel,
                  std::map<std::string, std::string> *out)
{
    std::string dir = rel.empty() ? root : root + "/" + rel;
    DIR *d = opendir(dir.c_str());
    if (!d)
        return;
    while (struct dirent *de = readdir(d)) {
        std::string name = de->d_name;
        if (name == "." || name == "..")
            continue;
        std::string r = rel.empty() ? name : rel + "/" + name;
        struct stat st;
        if (lstat((root + "/" + r).c_str(), &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            (*out)[r + "/"] = "dir";
            SnapshotInto(root, r, out);
        } else if (S_ISREG(st.st_mode)) {
            (*out)[r] = HashOf(ReadHostFile(root + "/" + r));
        } else if (S_ISLNK(st.st_mode)) {
            char buf[4096];
            ssize_t n = readlink((root + "/" + r).c_str(), buf, sizeof(buf));
            (*out)[r] = "link:" + std::string(buf, n > 0 ? n : 0);
        } else {
            (*out)[r] = "special";
        }
    }
    closedir(d);
}

// Spawns the server with stdout to a pipe and stderr to a file.
pid_t Spawn(const std::vector<std::string> &args, const std::vector<std::string> &env,
            const std::string &err_path, int *ret_stdout)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        throw std::runtime_error("pipe");
    std::vector<char *> argv;
    std::string bin = kBinary;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (auto &a : copy)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> envs;
    for (char **e = environ; *e; e++)
        envs.push_back(*e);
    for (const auto &e : env)
        envs.push_back(e);
    std::vector<char *> envp;
    for (auto &e : envs)
        envp.push_back(e.data());
    envp.push_back(nullptr);

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    pid_t pid;
    int rc = posix_spawn(&pid, kBinary, &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (rc != 0) {
        close(p[0]);
        throw std::runtime_error(std::string("spawn workspaced: ") + strerror(rc));
    }
    *ret_stdout = p[0];
    return pid;
}

} // namespace

namespace
{

// State directories to remove at exit, and the process that made them (a
// forked child that exits must not remove its parent's).
std::mutex g_state_dirs_lock;
std::vector<std::string> g_state_dirs;
pid_t g_state_dirs_owner = -1;

void RemoveStateDirs()
{
    std::lock_guard<std::mutex> l(g_state_dirs_lock);
    if (getpid() != g_state_dirs_owner)
        return;
    for (const auto &d : g_state_dirs) {
        std::error_code ec;
        // Symlinks inside are removed, never followed.
        std::filesystem::remove_all(d, ec);
        std::filesystem::remove(d + ".stderr", ec);
    }
    g_state_dirs.clear();
}

} // namespace

std::string MakeStateDir()
{
    return MakeHostTempDir("wsstate");
}

std::string MakeHostTempDir(const std::string &prefix)
{
    std::string path = "/tmp/" + prefix + ".XXXXXX";
    std::vector<char> tmpl(path.begin(), path.end());
    tmpl.push_back('\0');
    if (!mkdtemp(tmpl.data()) || chmod(tmpl.data(), 0711) != 0)
        throw std::runtime_error("mkdtemp " + path);
    std::lock_guard<std::mutex> l(g_state_dirs_lock);
    if (g_state_dirs_owner != getpid()) {
        g_state_dirs.clear();
        g_state_dirs_owner = getpid();
        static std::once_flag once;
        std::call_once(once, [] { atexit(RemoveStateDirs); });
    }
    g_state_dirs.push_back(tmpl.data());
    return tmpl.data();
}

std::string MakeTempDir(const std::string &prefix)
{
    // One directory of this process's under /tmp holds them all.
    static std::mutex lock;
    static std::string base;
    static pid_t base_owner = -1;
    std::string tmpl;
    {
        std::lock_guard<std::mutex> l(lock);
        if (base_owner != getpid()) {
            base = MakeHostTempDir("wstest");
            base_owner = getpid();
        }
        tmpl = base + "/" + prefix + "XXXXXX";
    }
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data()) || chmod(buf.data(), 0711) != 0)
        throw std::runtime_error("mkdtemp " + tmpl);
    return buf.data();
}

std::string Sha256Hex(const std::string &data)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    static const char hex[] = "0123456789abcdef";
    std::string out;

    EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
    for (unsigned int i = 0; i < len; i++) {
        out.push_back(hex[md[i] >> 4]);
        out.push_back(hex[md[i] & 15]);
    }
    return out;
}

std::map<std::string, std::string> Snapshot(const std::string &dir)
{
    std::map<std::string, std::string> out;
    SnapshotInto(dir, "", &out);
    return out;
}

void WriteHostFile(const std::string &path, const std::string &content)
{
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << content;
}

std::string ReadHostFile(const std::string &path)
{
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

namespace
{

// A directory for the server's socket: a MakeTempDir one when the path
// fits a sockaddr_un (108 bytes with its NUL), else a fresh one under
// /tmp.
std::string SocketDir()
{
    std::string dir = MakeTempDir("sock");
    if (dir.size() + sizeof("/ws.sock") <= sizeof(sockaddr_un::sun_path))
        return dir;
    rmdir(dir.c_str());
    char tmpl[] = "/tmp/wssockXXXXXX";
    if (!mkdtemp(tmpl))
        throw std::runtime_error("mkdtemp /tmp");
    return tmpl;
}

} // namespace

Server::Server(std::vector<std::string> args, std::string state_dir, std::vector<std::string> env)
    : state_dir_(state_dir.empty() ? MakeStateDir() : state_dir)
{
    bool has_listen = false, has_policy = false, has_auth = false;
    for (const auto &a : args) {
        if (a == "--listen")
            has_listen = true;
        if (a == "--policy-providers" || a == "--config")
            has_policy = true;
        if (a == "--tokens-file" || a == "--tls-client-ca")
            has_auth = true;
    }
    std::vector<std::string> full = {"--state-dir", state_dir_};
    // A server that authenticates its callers is about TCP (tokens, client
    // certificates): loopback. Any other gets a unix socket, where the
    // caller's uid (root here) names the tenant: a TCP listener without
    // authentication is refused.
    if (!has_listen && has_auth) {
        full.push_back("--listen");
        full.push_back("127.0.0.1:0");
    } else if (!has_listen) {
        socket_dir_ = SocketDir();
        full.push_back("--listen");
        full.push_back("unix:" + socket_dir_ + "/ws.sock");
    }
    // The suites open every provider; the default policy leaves
    // local-bash out, and a test that checks that passes its own.
    if (!has_policy) {
        full.push_back("--policy-providers");
        full.push_back("memory,local-bash,local-sandbox,docker");
    }
    full.insert(full.end(), args.begin(), args.end());
    stderr_path_ = state_dir_ + ".stderr";
    int out = -1;
    pid_ = Spawn(full, env, stderr_path_, &out);
    std::string line;
    // Generous: a cold server in the cgroup v2 VM, emulated without KVM,
    // was seen to need more than 20 s for its first line.
    bool ok = testutil::ReadLine(out, &line, 60000);
    close(out);
    const std::string prefix = "workspaced listening on ";
    if (!ok || line.compare(0, prefix.size(), prefix) != 0) {
        Kill();
        throw std::runtime_error("workspaced did not start: " + ReadHostFile(stderr_path_));
    }
    address_ = line.substr(prefix.size());
    // A wildcard bind is reached on loopback.
    if (address_.compare(0, 8, "0.0.0.0:") == 0)
        address_ = "127.0.0.1:" + address_.substr(8);
}

Server::~Server()
{
    // Every server a test leaves running must drain and exit cleanly: under
    // the sanitizer build this is where leaks and shutdown crashes show.
    if (pid_ > 0) {
        int status = Stop();
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
            << "workspaced did not exit cleanly (status " << status
            << "): " << ReadHostFile(stderr_path_);
    }
    if (!socket_dir_.empty()) {
        unlink((socket_dir_ + "/ws.sock").c_str());
        rmdir(socket_dir_.c_str());
    }
}

int Server::Stop(int sig)
{
    if (pid_ <= 0)
        return -1;
    kill(pid_, sig);
    int status = 0;
    // A drain is bounded by the grace period; never hang a test run on it.
    for (int i = 0; i < 3000; i++) {
        pid_t r = waitpid(pid_, &status, WNOHANG);
        if (r == pid_) {
            pid_ = -1;
            return status;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return -2;
}

void Server::Kill()
{
    if (pid_ <= 0)
        return;
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
}

std::shared_ptr<grpc::Channel> Server::channel()
{
    if (!channel_) {
        grpc::ChannelArguments args;
        args.SetMaxReceiveMessageSize(8 << 20);
        args.SetMaxSendMessageSize(8 << 20);
        // Each server gets its own connection: a subchannel shared with a
        // killed predecessor on the same address would fail the first call.
        args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
        channel_ = grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args);
    }
    return channel_;
}

namespace
{
class BearerInterceptor : public grpc::experimental::Interceptor
{
  public:
    BearerInterceptor(std::string value) : value_(std::move(value))
    {
    }
    void Intercept(grpc::experimental::InterceptorBatchMethods *methods) override
    {
        if (methods->QueryInterceptionHookPoint(
                grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA))
            methods->GetSendInitialMetadata()->insert({"authorization", value_});
        methods->Proceed();
    }

  private:
    std::string value_;
};

class BearerFactory : public grpc::experimental::ClientInterceptorFactoryInterface
{
  public:
    BearerFactory(std::string token) : value_("Bearer " + std::move(token))
    {
    }
    grpc::experimental::Interceptor *
    CreateClientInterceptor(grpc::experimental::ClientRpcInfo *) override
    {
        return new BearerInterceptor(value_);
    }

  private:
    std::string value_;
};
} // namespace

std::shared_ptr<grpc::Channel> Server::Channel(const std::string &token,
                                               std::shared_ptr<grpc::ChannelCredentials> creds)
{
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(8 << 20);
    args.SetMaxSendMessageSize(8 << 20);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> f;
    if (!token.empty())
        f.push_back(std::make_unique<BearerFactory>(token));
    return grpc::experimental::CreateCustomChannelWithInterceptors(
        address_, creds ? creds : grpc::InsecureChannelCredentials(), args, std::move(f));
}

std::unique_ptr<workspace::v1::Workspaces::Stub> Server::workspaces()
{
    return workspace::v1::Workspaces::NewStub(channel());
}
std::unique_ptr<workspace::v1::FileSystem::Stub> Server::fs()
{
    return workspace::v1::FileSystem::NewStub(channel());
}
std::unique_ptr<workspace::v1::Providers::Stub> Server::providers()
{
    return workspace::v1::Providers::NewStub(channel());
}
std::unique_ptr<workspace::v1::Exec::Stub> Server::exec()
{
    return workspace::v1::Exec::NewStub(channel());
}
std::unique_ptr<grpc::health::v1::Health::Stub> Server::health()
{
    return grpc::health::v1::Health::NewStub(channel());
}

int RunServerToExit(const std::vector<std::string> &args, std::string *err, int timeout_s)
{
    std::string err_path = MakeTempDir("run") + "/stderr";
    int out = -1;
    pid_t pid = Spawn(args, {}, err_path, &out);
    int status = 0;
    bool done = false;
    for (int i = 0; i < timeout_s * 100; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            done = true;
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    close(out);
    if (err)
        *err = ReadHostFile(err_path);
    return done ? status : -1;
}

Error Decode(const grpc::Status &status)
{
    Error e;
    e.code = status.error_code();
    e.message = status.error_message();
    google::rpc::Status st;
    if (!status.error_details().empty() && st.ParseFromString(status.error_details())) {
        for (const auto &any : st.details()) {
            google::rpc::ErrorInfo info;
            if (any.UnpackTo(&info)) {
                e.reason = info.reason();
                e.domain = info.domain();
                for (const auto &kv : info.metadata())
                    e.metadata[kv.first] = kv.second;
            }
        }
    }
    return e;
}

::testing::AssertionResult IsError(const grpc::Status &status, grpc::StatusCode code,
                                   const std::string &reason)
{
    Error e = Decode(status);
    if (e.code == code && e.reason == reason && e.domain == "workspaced")
        return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "want code " << code << " reason " << reason << ", got code " << e.code << " reason '"
           << e.reason << "' domain '" << e.domain << "' message '" << e.message << "'";
}

workspace::v1::ExecMode TestExecMode()
{
    const char *m = getenv("WS_TEST_EXEC_MODE");
    if (m && std::string(m) == "agent")
        return workspace::v1::EXEC_MODE_AGENT;
    if (m && std::string(m) == "per-command")
        return workspace::v1::EXEC_MODE_PER_COMMAND;
    if (m && m[0])
        throw std::runtime_error(std::string("WS_TEST_EXEC_MODE: unknown mode ") + m);
    return workspace::v1::EXEC_MODE_DEFAULT;
}

bool AgentMode()
{
    return TestExecMode() != workspace::v1::EXEC_MODE_PER_COMMAND;
}

Ws Open(workspace::v1::Workspaces::Stub *stub, const std::string &provider, uint64_t max_file_size)
{
    workspace::v1::OpenRequest req;
    if (provider == "memory")
        req.mutable_memory();
    else if (provider == "local-bash")
        req.mutable_local_bash();
    else if (provider == "local-sandbox")
        req.mutable_local_sandbox()->set_exec_mode(TestExecMode());
    else
        throw std::runtime_error("unknown provider " + provider);
    req.mutable_capabilities()->mutable_fs()->set_max_file_size_bytes(max_file_size);
    workspace::v1::OpenResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = stub->Open(&ctx, req, &resp);
    if (!s.ok())
        throw std::runtime_error("Open failed: " + s.error_message());
    return Ws{resp.workspace().id(), resp.workspace().ref().token()};
}

grpc::Status Write(workspace::v1::FileSystem::Stub *fs, const std::string &id,
                   const std::string &path, const std::string &data,
                   workspace::v1::WriteFileResponse *resp, bool create_parents,
                   const std::string &if_match, size_t chunk)
{
    grpc::ClientContext ctx;
    workspace::v1::WriteFileResponse local;
    auto w = fs->WriteFile(&ctx, resp ? resp : &local);
    workspace::v1::WriteFileRequest h;
    h.mutable_header()->set_workspace_id(id);
    h.mutable_header()->set_path(path);
    h.mutable_header()->set_create_parents(create_parents);
    h.mutable_header()->set_if_match(if_match);
    h.set_finish(data.empty());
    if (w->Write(h)) {
        for (size_t off = 0; off < data.size(); off += chunk) {
            workspace::v1::WriteFileRequest d;
            d.set_data(data.substr(off, chunk));
            d.set_finish(off + chunk >= data.size());
            if (!w->Write(d))
                break;
        }
    }
    w->WritesDone();
    return w->Finish();
}

grpc::Status Read(workspace::v1::FileSystem::Stub *fs, const std::string &id,
                  const std::string &path, std::string *out, uint64_t offset, uint64_t length)
{
    grpc::ClientContext ctx;
    workspace::v1::ReadFileRequest req;
    req.set_workspace_id(id);
    req.set_path(path);
    req.set_offset(offset);
    req.set_length(length);
    auto r = fs->ReadFile(&ctx, req);
    workspace::v1::ReadFileResponse m;
    out->clear();
    while (r->Read(&m))
        out->append(m.data());
    return r->Finish();
}

} // namespace wstest

// ---- Exec helpers ----

namespace wstest
{

Ws OpenShell(workspace::v1::Workspaces::Stub *stub,
             const std::vector<std::string> &allowed_commands,
             const std::vector<std::string> &pass_env, uint64_t max_duration_ms)
{
    workspace::v1::OpenRequest req;
    req.mutable_local_bash();
    req.mutable_capabilities()->mutable_fs();
    auto *shell = req.mutable_capabilities()->mutable_shell();
    for (const auto &c : allowed_commands)
        shell->add_allowed_commands(c);
    for (const auto &e : pass_env)
        shell->add_pass_env(e);
    shell->set_max_duration_ms(max_duration_ms);
    workspace::v1::OpenResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    grpc::Status s = stub->Open(&ctx, req, &resp);
    if (!s.ok())
        throw std::runtime_error("Open(local-bash, shell) failed: " + s.error_message());
    return Ws{resp.workspace().id(), resp.workspace().ref().token()};
}

workspace::v1::ProcessConfig ArgvProcess(const std::vector<std::string> &argv)
{
    workspace::v1::ProcessConfig p;
    for (const auto &a : argv)
        p.add_argv(a);
    return p;
}

workspace::v1::ProcessConfig CommandProcess(const std::string &command)
{
    workspace::v1::ProcessConfig p;
    p.set_command(command);
    return p;
}

grpc::Status RunProcess(workspace::v1::Exec::Stub *exec, const std::string &workspace_id,
                        const workspace::v1::ProcessConfig &process,
                        workspace::v1::RunResponse *resp, const std::string &stdin_data,
                        int deadline_s)
{
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(deadline_s));
    workspace::v1::RunRequest req;
    req.set_workspace_id(workspace_id);
    *req.mutable_process() = process;
    req.set_stdin_data(stdin_data);
    return exec->Run(&ctx, req, resp);
}

std::unique_ptr<StartStreamRW> StartStream(workspace::v1::Exec::Stub *exec,
                                           grpc::ClientContext *ctx,
                                           const std::string &workspace_id,
                                           const workspace::v1::ProcessConfig &process)
{
    auto rw = exec->Start(ctx);
    workspace::v1::StartRequest first;
    first.mutable_start()->set_workspace_id(workspace_id);
    *first.mutable_start()->mutable_process() = process;
    // A failed write means the call already ended; Read/Finish say why.
    rw->Write(first);
    return rw;
}

namespace
{

void LogChunk(const char *name, char tag, const workspace::v1::OutputChunk &c, StreamLog *s,
              EventLog *log)
{
    if (!s->any) {
        s->any = true;
        s->first = c.offset();
        s->next = c.offset();
    }
    if (c.offset() != s->next)
        log->problems.push_back(std::string(name) + " chunk at offset " +
                                std::to_string(c.offset()) + ", expected " +
                                std::to_string(s->next));
    s->data += c.data();
    s->next = c.offset() + c.data().size();
    s->chunks++;
    log->order.push_back(tag);
}

} // namespace

void LogEvent(const workspace::v1::ProcessEvent &ev, EventLog *log)
{
    using E = workspace::v1::ProcessEvent;
    log->events++;
    if (log->exited)
        log->problems.push_back("event " + std::to_string(ev.event_case()) + " after exited");
    if (ev.event_case() != E::kStarted && !log->started)
        log->problems.push_back("event " + std::to_string(ev.event_case()) + " before started");
    switch (ev.event_case()) {
    case E::kStarted:
        if (log->started)
            log->problems.push_back("second started");
        log->started = true;
        log->start = ev.started();
        break;
    case E::kStdout:
        LogChunk("stdout", 'o', ev.stdout(), &log->out, log);
        break;
    case E::kStderr:
        LogChunk("stderr", 'e', ev.stderr(), &log->err, log);
        break;
    case E::kPty:
        LogChunk("pty", 'p', ev.pty(), &log->pty, log);
        break;
    case E::kGap: {
        const auto &g = ev.gap();
        StreamLog *s = g.stream() == workspace::v1::OUTPUT_STREAM_STDOUT   ? &log->out
                       : g.stream() == workspace::v1::OUTPUT_STREAM_STDERR ? &log->err
                       : g.stream() == workspace::v1::OUTPUT_STREAM_PTY    ? &log->pty
                                                                           : nullptr;
        if (!s) {
            log->problems.push_back("gap on stream " + std::to_string(g.stream()));
            break;
        }
        if (!s->any) {
            s->any = true;
            s->first = g.offset();
            s->next = g.offset();
        }
        if (g.offset() != s->next)
            log->problems.push_back("gap at offset " + std::to_string(g.offset()) + ", expected " +
                                    std::to_string(s->next));
        s->next = g.offset() + g.bytes_dropped();
        log->gaps.push_back(g);
        log->order.push_back('g');
        break;
    }
    case E::kExited:
        log->exited = true;
        log->exit = ev.exited();
        break;
    default:
        log->problems.push_back("empty event");
    }
}

bool ReadEvents(grpc::internal::ReaderInterface<workspace::v1::ProcessEvent> *reader, EventLog *log,
                const std::function<bool(const EventLog &)> &until)
{
    workspace::v1::ProcessEvent ev;
    while (reader->Read(&ev)) {
        LogEvent(ev, log);
        if (until && until(*log))
            return true;
    }
    return false;
}

std::string Problems(const EventLog &log)
{
    std::string s;
    for (const auto &p : log.problems)
        s += p + "; ";
    return s;
}

std::string UniqueSleep()
{
    return testutil::UniqueSleepArg();
}

namespace
{

// Fields of /proc/PID/stat after the command name: state, ppid.
bool ReadStat(const std::string &pid, char *state, long *ppid)
{
    std::string s = ReadHostFile("/proc/" + pid + "/stat");
    size_t close = s.rfind(')');
    if (close == std::string::npos || close + 2 >= s.size())
        return false;
    std::istringstream in(s.substr(close + 2));
    in >> *state >> *ppid;
    return static_cast<bool>(in);
}

template <typename F> void ForEachPid(F f)
{
    DIR *d = opendir("/proc");
    if (!d)
        return;
    while (struct dirent *de = readdir(d)) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        f(std::string(de->d_name));
    }
    closedir(d);
}

int CountEntries(const std::string &dir)
{
    DIR *d = opendir(dir.c_str());
    if (!d)
        return -1;
    int n = 0;
    while (struct dirent *de = readdir(d))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

} // namespace

std::vector<pid_t> PidsWithMarker(const std::string &marker)
{
    std::vector<pid_t> out;
    std::string self = std::to_string(getpid());
    ForEachPid([&](const std::string &pid) {
        if (pid == self)
            return;
        char state = 0;
        long ppid = 0;
        if (!ReadStat(pid, &state, &ppid) || state == 'Z' || state == 'X')
            return;
        std::string cmd = ReadHostFile("/proc/" + pid + "/cmdline");
        for (auto &c : cmd)
            if (c == '\0')
                c = ' ';
        if (cmd.find(marker) != std::string::npos)
            out.push_back(static_cast<pid_t>(std::stol(pid)));
    });
    return out;
}

pid_t ParentPid(pid_t pid)
{
    char state = 0;
    long ppid = 0;
    if (!ReadStat(std::to_string(pid), &state, &ppid) || state == 'Z' || state == 'X')
        return 0;
    return static_cast<pid_t>(ppid);
}

int CountProcsWithMarker(const std::string &marker)
{
    return static_cast<int>(PidsWithMarker(marker).size());
}

int WaitProcsAtMost(const std::string &marker, int at_most, int timeout_ms)
{
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    int n = CountProcsWithMarker(marker);
    while (n > at_most && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        n = CountProcsWithMarker(marker);
    }
    return n;
}

int WaitProcsAtLeast(const std::string &marker, int at_least, int timeout_ms)
{
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    int n = CountProcsWithMarker(marker);
    while (n < at_least && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        n = CountProcsWithMarker(marker);
    }
    return n;
}

ProcStats StatsOf(pid_t pid)
{
    ProcStats st;
    std::string p = "/proc/" + std::to_string(pid);
    st.fds = CountEntries(p + "/fd");
    st.threads = CountEntries(p + "/task");
    std::istringstream status(ReadHostFile(p + "/status"));
    std::string line;
    while (std::getline(status, line))
        if (line.compare(0, 6, "VmRSS:") == 0)
            st.rss_kb = std::strtol(line.c_str() + 6, nullptr, 10);
    ForEachPid([&](const std::string &child) {
        char state = 0;
        long ppid = 0;
        if (ReadStat(child, &state, &ppid) && ppid == pid) {
            st.children++;
            if (state == 'Z')
                st.zombies++;
        }
    });
    return st;
}

ProcStats WaitStatsSettled(pid_t pid, int quiet_ms, int timeout_ms, long rss_slack_kb)
{
    using Clock = std::chrono::steady_clock;
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    ProcStats first = StatsOf(pid), last = first;
    auto since = Clock::now();
    long rss_min = first.rss_kb, rss_max = first.rss_kb;
    while (Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        last = StatsOf(pid);
        rss_min = std::min(rss_min, last.rss_kb);
        rss_max = std::max(rss_max, last.rss_kb);
        bool same = last.children == 0 && last.fds == first.fds && last.threads == first.threads &&
                    (rss_slack_kb < 0 || rss_max - rss_min <= rss_slack_kb);
        if (!same) {
            // A change starts the quiet period again from here.
            first = last;
            rss_min = rss_max = last.rss_kb;
            since = Clock::now();
        } else if (Clock::now() - since >= std::chrono::milliseconds(quiet_ms)) {
            break;
        }
    }
    return last;
}

std::string SelfExe()
{
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    return n > 0 ? std::string(buf, n) : std::string();
}

} // namespace wstest

namespace wstest
{

std::string EscapingTree(const std::string &m)
{
    return "sleep " + m + " & setsid sleep " + m + " & sleep " + m;
}

PeakWatcher::PeakWatcher(std::string marker) : marker_(std::move(marker))
{
    thread_ = std::thread([this] {
        while (!stop_) {
            int n = CountProcsWithMarker(marker_);
            if (n > peak_)
                peak_ = n;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    });
}

PeakWatcher::~PeakWatcher()
{
    Stop();
}

int PeakWatcher::Stop()
{
    stop_ = true;
    if (thread_.joinable())
        thread_.join();
    return peak_;
}

} // namespace wstest

// ---- cgroups ----

namespace wstest
{

namespace
{

struct Mount {
    std::string root;  // the mount's root inside its hierarchy
    std::string point; // where it is mounted
    std::string type;  // "cgroup" or "cgroup2"
    std::string super; // superblock options: the v1 controllers
};

std::vector<Mount> CgroupMounts()
{
    std::vector<Mount> out;
    std::istringstream in(ReadHostFile("/proc/self/mountinfo"));
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream f(line);
        std::vector<std::string> fields;
        for (std::string x; f >> x;)
            fields.push_back(x);
        size_t dash = 0;
        while (dash < fields.size() && fields[dash] != "-")
            dash++;
        if (dash < 5 || dash + 3 >= fields.size())
            continue;
        Mount m{fields[3], fields[4], fields[dash + 1], fields[dash + 3]};
        // Escaped names (\040 for a blank) are not what the server uses.
        if (m.point.find('\\') != std::string::npos || m.root.find('\\') != std::string::npos)
            continue;
        if (m.type == "cgroup" || m.type == "cgroup2")
            out.push_back(m);
    }
    return out;
}

bool HasOption(const std::string &opts, const std::string &name)
{
    std::istringstream in(opts);
    for (std::string o; std::getline(in, o, ',');)
        if (o == name)
            return true;
    return false;
}

// This process's cgroup path in the v1 hierarchy with `controller`, or in
// the cgroup2 hierarchy when `controller` is empty.
bool OwnCgroup(const std::string &controller, std::string *ret)
{
    std::istringstream in(ReadHostFile("/proc/self/cgroup"));
    std::string line;
    while (std::getline(in, line)) {
        size_t c1 = line.find(':'), c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
        if (c2 == std::string::npos)
            continue;
        std::string ctls = line.substr(c1 + 1, c2 - c1 - 1);
        if (controller.empty() ? (line.compare(0, c1, "0") == 0 && ctls.empty())
                               : HasOption(ctls, controller)) {
            *ret = line.substr(c2 + 1);
            return true;
        }
    }
    return false;
}

// The directory of cgroup `path` (as /proc/self/cgroup shows it) through
// mount `m`, or "" when the mount does not reach it.
std::string DirOf(const Mount &m, const std::string &path)
{
    if (m.root == "/")
        return m.point + (path == "/" ? "" : path);
    if (path.compare(0, m.root.size(), m.root) != 0 ||
        (path.size() > m.root.size() && path[m.root.size()] != '/'))
        return "";
    return m.point + path.substr(m.root.size());
}

// Whether a cgroup can be made (and is then removed) in `dir`; with
// `needs`, whether the new cgroup has that file writable too.
bool CanMakeCgroupIn(const std::string &dir, const std::string &needs = "")
{
    static std::atomic<unsigned> n{0};
    std::string probe =
        dir + "/wstest-probe-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    if (mkdir(probe.c_str(), 0755) != 0)
        return false;
    bool ok = needs.empty() || access((probe + "/" + needs).c_str(), W_OK) == 0;
    rmdir(probe.c_str());
    return ok;
}

CgroupHost Probe()
{
    CgroupHost h;
    std::vector<Mount> mounts = CgroupMounts();
    for (const Mount &m : mounts) {
        if (m.type == "cgroup2") {
            std::string own;
            if (!OwnCgroup("", &own))
                continue;
            std::string dir = DirOf(m, own);
            if (dir.empty() || h.v2)
                continue;
            h.v2 = true;
            h.v2_own_dir = dir;
            if (m.point == "/sys/fs/cgroup")
                h.v2_unified = true;
            h.v2_delegated = CanMakeCgroupIn(dir);
            continue;
        }
        for (const char *ctl : {"pids", "memory", "cpu", "freezer"}) {
            std::string own;
            if (!HasOption(m.super, ctl) || !OwnCgroup(ctl, &own))
                continue;
            std::string dir = DirOf(m, own);
            if (dir.empty() || access((dir + "/tasks").c_str(), W_OK) != 0 || !CanMakeCgroupIn(dir))
                continue;
            h.v1_own_dir[ctl] = dir;
        }
    }
    // The server's containment uses <root>/workspaced/<its pid> with root
    // /sys/fs/cgroup/freezer, and moves threads back to their own freezer
    // cgroup, which must be on that same mount.
    struct statfs sfs;
    char real[PATH_MAX];
    if (realpath("/sys/fs/cgroup/freezer", real) && statfs(real, &sfs) == 0 &&
        sfs.f_type == CGROUP_SUPER_MAGIC) {
        std::string own;
        for (const Mount &m : mounts) {
            if (m.type != "cgroup" || !HasOption(m.super, "freezer") || m.point != real ||
                !OwnCgroup("freezer", &own))
                continue;
            std::string dir = DirOf(m, own);
            if (dir.empty() || access((dir + "/tasks").c_str(), W_OK) != 0)
                continue;
            std::string hosts = std::string(real) + "/workspaced";
            if (mkdir(hosts.c_str(), 0755) != 0 && errno != EEXIST)
                continue;
            h.v1_freezer = CanMakeCgroupIn(hosts, "freezer.state");
        }
    }
    return h;
}

} // namespace

std::string CgroupHost::Describe() const
{
    std::string s = v2_unified ? "cgroup v2 only (unified /sys/fs/cgroup)"
                    : v2       ? "cgroup v1 with cgroup2 at " + v2_own_dir + " (hybrid)"
                               : "cgroup v1";
    if (v2)
        s += v2_delegated ? ", cgroup2 subtree delegated and writable"
                          : ", cgroup2 subtree not writable";
    s += "; writable v1 controllers:";
    if (v1_own_dir.empty())
        s += " none";
    for (const auto &kv : v1_own_dir)
        s += " " + kv.first;
    s += v1_freezer ? "; v1 freezer usable at /sys/fs/cgroup/freezer"
                    : "; no usable v1 freezer at /sys/fs/cgroup/freezer";
    return s;
}

const CgroupHost &ProbeCgroups()
{
    static const CgroupHost h = Probe();
    return h;
}

} // namespace wstest
