#include "tests/e2e/harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <openssl/evp.h>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

extern char **environ;

namespace wstest
{

namespace
{

const char *kBinary = "server/workspaced";

std::string TestTmp()
{
    const char *t = getenv("TEST_TMPDIR");
    return t ? t : "/tmp";
}

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

// Reads one line with a timeout; false on EOF/timeout.
bool ReadLine(int fd, std::string *line, int timeout_ms)
{
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    line->clear();
    for (;;) {
        int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        deadline - std::chrono::steady_clock::now())
                                        .count());
        if (left <= 0)
            return false;
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, left) <= 0)
            continue;
        char c;
        ssize_t n = read(fd, &c, 1);
        if (n <= 0)
            return false;
        if (c == '\n')
            return true;
        line->push_back(c);
    }
}

} // namespace

std::string MakeTempDir(const std::string &prefix)
{
    std::string tmpl = TestTmp() + "/" + prefix + "XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data()))
        throw std::runtime_error("mkdtemp");
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

Server::Server(std::vector<std::string> args, std::string state_dir, std::vector<std::string> env)
    : state_dir_(state_dir.empty() ? MakeTempDir("state") : state_dir)
{
    bool has_listen = false;
    for (const auto &a : args)
        if (a == "--listen")
            has_listen = true;
    std::vector<std::string> full = {"--state-dir", state_dir_};
    if (!has_listen) {
        full.push_back("--listen");
        full.push_back("127.0.0.1:0");
    }
    full.insert(full.end(), args.begin(), args.end());
    stderr_path_ = state_dir_ + ".stderr";
    int out = -1;
    pid_ = Spawn(full, env, stderr_path_, &out);
    std::string line;
    bool ok = ReadLine(out, &line, 20000);
    close(out);
    const std::string prefix = "workspaced listening on ";
    if (!ok || line.compare(0, prefix.size(), prefix) != 0) {
        Kill();
        throw std::runtime_error("workspaced did not start: " + ReadHostFile(stderr_path_));
    }
    address_ = line.substr(prefix.size());
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

Ws Open(workspace::v1::Workspaces::Stub *stub, const std::string &provider, uint64_t max_file_size)
{
    workspace::v1::OpenRequest req;
    if (provider == "memory")
        req.mutable_memory();
    else if (provider == "local-bash")
        req.mutable_local_bash();
    else if (provider == "local-sandbox")
        req.mutable_local_sandbox();
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
