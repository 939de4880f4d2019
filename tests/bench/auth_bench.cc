// Authentication, scale and tenant-isolation benchmark, in one run:
//
//   auth_bench --server PATH/TO/workspaced [options]   (--help lists them)
//
//   * auth:  what TLS + bearer tokens (and mTLS) add to a warm call.
//            Servers side by side on loopback: plaintext without
//            authentication (the baseline), plaintext + tokens (the token
//            check alone), TLS + tokens, and TLS with a client certificate.
//            One warm channel each; ReadFile of 4 KiB and Run of `true`
//            (local-bash) take turns across the servers call by call, and
//            p50/p90/p99 and the added latency at p50 are reported. Goal:
//            TLS + tokens under 10% added at p50. Then, apart from the
//            goal, a new connection + one ReadFile on each (the handshake).
//   * scale: 1,000 workspaces across 10 tenants on one server (Open
//            latency, first and last hundred, server RSS before and after,
//            RSS per workspace, List per tenant, then Close of them all and
//            the RSS left).
//   * abuse: tenant A's ReadFile of 4 KiB alone, then while tenant B, on
//            connections of its own, holds streams it never reads
//            (ReadFile of a large file, Start of `yes`) and floods the
//            server with calls it cancels at once; then alone again.
//            Reported as A's latency under abuse over A's latency alone.
//
// Exit status: 0 when every part ran and every check passed (goals missed
// are reported, not failures), 1 otherwise.
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "workspace/v1/exec.grpc.pb.h"
#include "workspace/v1/filesystem.grpc.pb.h"
#include "workspace/v1/workspaces.grpc.pb.h"

extern char **environ;

namespace
{

namespace v1 = workspace::v1;
using Clock = std::chrono::steady_clock;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;
// The goal stated for authentication: TLS + tokens add under 10% at p50.
constexpr double kGoalAddedPct = 10.0;
// WriteFile chunk for the large file tenant B reads.
constexpr size_t kChunk = kMiB;

struct Options {
    std::string server;
    std::string tmp;
    int iters = 2000;
    int warmup = 200;
    bool mtls = true;
    int workspaces = 1000;
    int tenants = 10;
    int list_rounds = 5;
    int abuse_iters = 2000;
    int abuse_seconds = 20;
    int held_conns = 2;
    int held_reads = 96;
    int held_starts = 16;
    int flood_threads = 2;
    int big_mib = 64;
    bool keep = false;
    std::string only = "auth,scale,abuse";
};

// Every server the run started, killed by Die so that a failed run leaves
// none behind.
std::mutex g_pids_mu;
std::vector<pid_t> g_pids;
// The run's temporary directory, removed by Die as well.
std::string g_base;

void RemoveTree(const std::string &path);

[[noreturn]] void Die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void Die(const char *fmt, ...)
{
    va_list ap;
    {
        std::lock_guard<std::mutex> lk(g_pids_mu);
        for (pid_t p : g_pids) {
            kill(p, SIGKILL);
            waitpid(p, nullptr, 0);
        }
    }
    if (!g_base.empty())
        RemoveTree(g_base);
    va_start(ap, fmt);
    fputs("auth_bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

std::string Fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Fmt(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return buf;
}

double Seconds(Clock::time_point a, Clock::time_point b)
{
    return std::chrono::duration<double>(b - a).count();
}

double Nanos(Clock::time_point a, Clock::time_point b)
{
    return std::chrono::duration<double, std::nano>(b - a).count();
}

int RemoveEntry(const char *path, const struct stat *, int, struct FTW *)
{
    return remove(path);
}

void RemoveTree(const std::string &path)
{
    nftw(path.c_str(), RemoveEntry, 64, FTW_DEPTH | FTW_PHYS);
}

// A failed measurement: the part is reported as FAILED and the run goes on
// with the next part.
struct BenchError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] void Fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void Fail(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    throw BenchError(buf);
}

const char *CodeName(grpc::StatusCode c)
{
    static const char *names[] = {"OK",
                                  "CANCELLED",
                                  "UNKNOWN",
                                  "INVALID_ARGUMENT",
                                  "DEADLINE_EXCEEDED",
                                  "NOT_FOUND",
                                  "ALREADY_EXISTS",
                                  "PERMISSION_DENIED",
                                  "RESOURCE_EXHAUSTED",
                                  "FAILED_PRECONDITION",
                                  "ABORTED",
                                  "OUT_OF_RANGE",
                                  "UNIMPLEMENTED",
                                  "INTERNAL",
                                  "UNAVAILABLE",
                                  "DATA_LOSS",
                                  "UNAUTHENTICATED"};
    int i = (int)c;
    return i >= 0 && i < (int)(sizeof(names) / sizeof(names[0])) ? names[i] : "?";
}

// The ErrorInfo reason of a failed call, "" when there is none.
std::string Reason(const grpc::Status &s)
{
    google::rpc::Status st;
    if (s.error_details().empty() || !st.ParseFromString(s.error_details()))
        return "";
    for (const auto &d : st.details()) {
        google::rpc::ErrorInfo info;
        if (d.UnpackTo(&info))
            return info.reason();
    }
    return "";
}

void Check(const grpc::Status &s, const char *what)
{
    if (s.ok())
        return;
    std::string reason = Reason(s);
    Fail("%s: %s%s%s: %s", what, CodeName(s.error_code()), reason.empty() ? "" : " ",
         reason.c_str(), s.error_message().c_str());
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

void WriteHostFile(const std::string &path, const std::string &text)
{
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f.good())
        Die("write %s failed", path.c_str());
}

std::string ReadHostFile(const std::string &path)
{
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    if (!f.good())
        Die("read %s failed", path.c_str());
    return ss.str();
}

// Runs `argv` in `dir` with its output discarded; dies unless it exits 0.
void RunTool(const std::string &dir, const std::vector<std::string> &argv)
{
    std::vector<std::string> copy = argv;
    std::vector<char *> args;
    for (auto &a : copy)
        args.push_back(a.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addchdir_np(&fa, dir.c_str());
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        Die("spawn %s: %s", args[0], strerror(rc));
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            Die("waitpid: %s", strerror(errno));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::string line;
        for (const auto &a : argv)
            line += a + " ";
        Die("%s: status %d", line.c_str(), status);
    }
}

// A CA, a server certificate for 127.0.0.1 and a client certificate whose
// CN is the tenant `client`, made by the openssl command in `dir`.
void MakePki(const std::string &dir, const std::string &client)
{
    const std::vector<std::string> ec = {"-newkey", "ec", "-pkeyopt",
                                         "ec_paramgen_curve:prime256v1", "-nodes"};
    auto with = [&](std::vector<std::string> v) {
        v.insert(v.begin() + 2, ec.begin(), ec.end());
        return v;
    };
    RunTool(dir, with({"openssl", "req", "-x509", "-keyout", "ca.key", "-out", "ca.pem", "-subj",
                       "/CN=bench-ca", "-days", "2"}));
    auto leaf = [&](const std::string &name, const std::string &cn, const std::string &ext) {
        RunTool(dir, with({"openssl", "req", "-keyout", name + ".key", "-out", name + ".csr",
                           "-subj", "/CN=" + cn}));
        std::vector<std::string> sign = {
            "openssl", "x509",   "-req",   "-in",        name + ".csr",
            "-CA",     "ca.pem", "-CAkey", "ca.key",     "-CAcreateserial",
            "-days",   "2",      "-out",   name + ".pem"};
        if (!ext.empty()) {
            WriteHostFile(dir + "/" + name + ".ext", ext + "\n");
            sign.push_back("-extfile");
            sign.push_back(name + ".ext");
        }
        RunTool(dir, sign);
    };
    leaf("server", "localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost");
    leaf(client, client, "");
}

// ---- the server ----

// A channel with a connection of its own (channels never share one here:
// each stands for one client).
std::shared_ptr<grpc::Channel> NewChannelTo(const std::string &address,
                                            std::shared_ptr<grpc::ChannelCredentials> creds)
{
    static std::atomic<int> serial{0};
    grpc::ChannelArguments ca;
    ca.SetMaxReceiveMessageSize(-1);
    ca.SetMaxSendMessageSize(8 << 20);
    ca.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    ca.SetInt("auth_bench.channel", ++serial);
    return grpc::CreateCustomChannel(address, creds ? creds : grpc::InsecureChannelCredentials(),
                                     ca);
}

// One workspaced, started as the other benches and the e2e harness do
// (stdout is read for the listening line, stderr goes to a file).
class Server
{
  public:
    Server(const std::string &binary, const std::string &state_dir,
           const std::vector<std::string> &extra)
    {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
            Die("pipe: %s", strerror(errno));
        err_path_ = state_dir + ".stderr";
        // TCP needs authentication: a side without any is served on a unix
        // socket (the server's default), the others on loopback TCP. The
        // operator's policy must allow local-bash, which is off by default.
        bool auth = false;
        for (const auto &a : extra)
            auth = auth || a == "--tokens-file" || a == "--tls-client-ca";
        std::vector<std::string> argv = {binary,
                                         "--listen",
                                         auth ? "127.0.0.1:0" : "unix:" + state_dir + ".sock",
                                         "--state-dir",
                                         state_dir,
                                         "--policy-providers",
                                         "memory,local-bash,local-sandbox,docker"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        std::vector<char *> args;
        for (auto &a : argv)
            args.push_back(a.data());
        args.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, p[1], 1);
        posix_spawn_file_actions_addopen(&fa, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                         0600);
        int rc = posix_spawn(&pid_, binary.c_str(), &fa, nullptr, args.data(), environ);
        posix_spawn_file_actions_destroy(&fa);
        close(p[1]);
        if (rc != 0)
            Die("spawn %s: %s", binary.c_str(), strerror(rc));
        {
            std::lock_guard<std::mutex> lk(g_pids_mu);
            g_pids.push_back(pid_);
        }
        std::string line;
        bool ok = ReadLine(p[0], &line, 20000);
        close(p[0]);
        const std::string prefix = "workspaced listening on ";
        if (!ok || line.compare(0, prefix.size(), prefix) != 0) {
            Stop();
            Die("workspaced did not start (see %s)", err_path_.c_str());
        }
        address_ = line.substr(prefix.size());
    }
    ~Server()
    {
        Stop();
    }
    void Stop()
    {
        if (pid_ <= 0)
            return;
        {
            std::lock_guard<std::mutex> lk(g_pids_mu);
            g_pids.erase(std::remove(g_pids.begin(), g_pids.end(), pid_), g_pids.end());
        }
        kill(pid_, SIGTERM);
        int status;
        for (int i = 0; i < 1000; i++) {
            if (waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        pid_ = -1;
    }
    pid_t pid() const
    {
        return pid_;
    }
    const std::string &address() const
    {
        return address_;
    }
    std::shared_ptr<grpc::Channel>
    NewChannel(std::shared_ptr<grpc::ChannelCredentials> creds = nullptr) const
    {
        return NewChannelTo(address_, std::move(creds));
    }

  private:
    static bool ReadLine(int fd, std::string *line, int timeout_ms)
    {
        auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
        for (;;) {
            auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0)
                return false;
            struct pollfd pfd = {fd, POLLIN, 0};
            if (poll(&pfd, 1, (int)left.count()) <= 0)
                continue;
            char c;
            if (read(fd, &c, 1) != 1)
                return false;
            if (c == '\n')
                return true;
            line->push_back(c);
        }
    }

    pid_t pid_ = -1;
    std::string address_;
    std::string err_path_;
};

// ---- /proc readings ----

// A "Vm..." field of /proc/PID/status in bytes, -1 when unreadable.
long long ProcStatusBytes(pid_t pid, const char *field)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char line[256];
    long long kb = -1;
    size_t flen = strlen(field);
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
            kb = strtoll(line + flen + 1, nullptr, 10);
            break;
        }
    }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

// utime + stime of `pid` in clock ticks, all threads included.
unsigned long long CpuTicks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    return ut + st;
}

double TicksToSeconds(unsigned long long t)
{
    return (double)t / (double)sysconf(_SC_CLK_TCK);
}

// Open file descriptors of `pid`, -1 when unreadable.
long CountFds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    long n = 0;
    while (struct dirent *de = readdir(d))
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

// Threads of `pid` (the Threads: line), -1 when unreadable.
long CountThreads(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char line[256];
    long n = -1;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "Threads:", 8) == 0) {
            n = strtol(line + 8, nullptr, 10);
            break;
        }
    }
    fclose(f);
    return n;
}

// Polls VmRSS every millisecond while alive; peak() is the largest seen.
class RssSampler
{
  public:
    explicit RssSampler(pid_t pid) : pid_(pid), thread_([this] { Run(); })
    {
    }
    ~RssSampler()
    {
        stop_ = true;
        thread_.join();
    }
    long long peak() const
    {
        return peak_;
    }

  private:
    void Run()
    {
        while (!stop_) {
            long long v = ProcStatusBytes(pid_, "VmRSS");
            if (v > peak_)
                peak_ = v;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    pid_t pid_;
    std::atomic<bool> stop_{false};
    std::atomic<long long> peak_{0};
    std::thread thread_;
};

// ---- statistics and the table ----

struct Lat {
    double p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
    size_t n = 0;
};

Lat Percentiles(std::vector<double> ns)
{
    Lat l;
    if (ns.empty())
        return l;
    std::sort(ns.begin(), ns.end());
    auto at = [&](double q) {
        size_t i = (size_t)(q * (double)(ns.size() - 1) + 0.5);
        return ns[std::min(i, ns.size() - 1)] / 1000.0;
    };
    l.p50_us = at(0.50);
    l.p90_us = at(0.90);
    l.p99_us = at(0.99);
    l.max_us = ns.back() / 1000.0;
    l.n = ns.size();
    return l;
}

struct Row {
    std::string op, ws, baseline, base, ratio, goal;
};

std::vector<Row> g_rows;
bool g_failed = false;

std::string Us(double us)
{
    return us >= 1000 ? Fmt("%.2f ms", us / 1000) : Fmt("%.1f us", us);
}

std::string Mib(long long b)
{
    return b < 0 ? "?" : Fmt("%.1f MiB", (double)b / kMiB);
}

// Ratio of the measured time to the baseline time: how many times slower.
std::string Ratio(double ws, double base)
{
    return base > 0 ? Fmt("%.2fx", ws / base) : "-";
}

std::string AddedPct(double ws, double base)
{
    return base > 0 ? Fmt("%+.1f%%", 100.0 * (ws - base) / base) : "-";
}

std::string Goal(bool met, const std::string &what)
{
    return (met ? "MET (" : "MISSED (") + what + ")";
}

void Add(const std::string &op, const std::string &ws, const std::string &baseline = "-",
         const std::string &base = "-", const std::string &ratio = "-",
         const std::string &goal = "-")
{
    g_rows.push_back({op, ws, baseline, base, ratio, goal});
}

void PrintTable()
{
    Row head = {"operation", "measured", "baseline", "baseline result", "ratio", "goal / note"};
    std::vector<Row> all = {head};
    all.insert(all.end(), g_rows.begin(), g_rows.end());
    size_t w[6] = {0};
    for (const auto &r : all) {
        const std::string *f[6] = {&r.op, &r.ws, &r.baseline, &r.base, &r.ratio, &r.goal};
        for (int i = 0; i < 6; i++)
            w[i] = std::max(w[i], f[i]->size());
    }
    for (size_t i = 0; i < all.size(); i++) {
        const Row &r = all[i];
        printf("%-*s | %-*s | %-*s | %-*s | %-*s | %s\n", (int)w[0], r.op.c_str(), (int)w[1],
               r.ws.c_str(), (int)w[2], r.baseline.c_str(), (int)w[3], r.base.c_str(), (int)w[4],
               r.ratio.c_str(), r.goal.c_str());
        if (i == 0) {
            size_t total = w[0] + w[1] + w[2] + w[3] + w[4] + w[5] + 15;
            printf("%s\n", std::string(total, '-').c_str());
        }
    }
}

// Runs one part; a BenchError becomes a FAILED row and the run goes on.
void Part(const char *name, const std::function<void()> &fn)
{
    try {
        fn();
    } catch (const BenchError &ex) {
        fprintf(stderr, "auth_bench: %s: FAILED: %s\n", name, ex.what());
        Add(Fmt("%s: FAILED", name), ex.what());
        g_failed = true;
    }
}

// ---- clients ----

// What one client is: a channel (its own connection) and the token it
// sends on every call ("" for none).
struct Client {
    std::shared_ptr<grpc::Channel> channel;
    std::string token;
    std::unique_ptr<v1::Workspaces::Stub> ws;
    std::unique_ptr<v1::FileSystem::Stub> fs;
    std::unique_ptr<v1::Exec::Stub> exec;

    Client(std::shared_ptr<grpc::Channel> ch, std::string tok)
        : channel(std::move(ch)), token(std::move(tok)), ws(v1::Workspaces::NewStub(channel)),
          fs(v1::FileSystem::NewStub(channel)), exec(v1::Exec::NewStub(channel))
    {
    }
    // A deadline and, with a token, "authorization: Bearer TOKEN": the
    // metadata is the client's share of the cost of authentication.
    void Prepare(grpc::ClientContext *ctx, int seconds = 60) const
    {
        ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
        if (!token.empty())
            ctx->AddMetadata("authorization", "Bearer " + token);
    }
};

std::string OpenWorkspace(const Client &c, bool memory, const std::vector<std::string> &shell)
{
    v1::OpenRequest req;
    if (memory)
        req.mutable_memory();
    else
        req.mutable_local_bash();
    req.mutable_capabilities()->mutable_fs();
    if (!shell.empty()) {
        auto *sh = req.mutable_capabilities()->mutable_shell();
        for (const auto &s : shell)
            sh->add_allowed_commands(s);
    }
    v1::OpenResponse resp;
    grpc::ClientContext ctx;
    c.Prepare(&ctx);
    Check(c.ws->Open(&ctx, req, &resp), memory ? "Open (memory)" : "Open (local-bash)");
    return resp.workspace().id();
}

void CloseWorkspace(const Client &c, const std::string &id)
{
    v1::CloseRequest req;
    req.set_workspace_id(id);
    v1::CloseResponse resp;
    grpc::ClientContext ctx;
    c.Prepare(&ctx);
    Check(c.ws->Close(&ctx, req, &resp), "Close");
}

// Writes `data` to `path` through WriteFile in kChunk messages.
void WriteRemote(const Client &c, const std::string &id, const std::string &path,
                 const std::string &data)
{
    grpc::ClientContext ctx;
    c.Prepare(&ctx, 600);
    v1::WriteFileResponse resp;
    auto w = c.fs->WriteFile(&ctx, &resp);
    v1::WriteFileRequest h;
    h.mutable_header()->set_workspace_id(id);
    h.mutable_header()->set_path(path);
    w->Write(h);
    for (size_t off = 0; off < data.size(); off += kChunk) {
        v1::WriteFileRequest d;
        d.set_data(data.substr(off, kChunk));
        if (off + kChunk >= data.size())
            d.set_finish(true);
        if (!w->Write(d))
            break;
    }
    w->WritesDone();
    Check(w->Finish(), "WriteFile");
    if (resp.bytes_written() != data.size())
        Fail("WriteFile wrote %llu of %zu bytes", (unsigned long long)resp.bytes_written(),
             data.size());
}

// One ReadFile of a small file; fails unless exactly `want` bytes came.
void ReadSmall(const Client &c, const v1::ReadFileRequest &req, size_t want)
{
    grpc::ClientContext ctx;
    c.Prepare(&ctx);
    auto r = c.fs->ReadFile(&ctx, req);
    v1::ReadFileResponse m;
    size_t got = 0;
    while (r->Read(&m))
        got += m.data().size();
    Check(r->Finish(), "ReadFile");
    if (got != want)
        Fail("ReadFile: %zu of %zu bytes", got, want);
}

// One Run of `true`; fails unless it exited 0.
void RunTrue(const Client &c, const v1::RunRequest &req)
{
    grpc::ClientContext ctx;
    c.Prepare(&ctx);
    v1::RunResponse resp;
    Check(c.exec->Run(&ctx, req, &resp), "Run true");
    const v1::Exited &x = resp.exited();
    if (x.cause() != v1::EXIT_CAUSE_EXITED || x.exit_code() != 0)
        Fail("Run true: cause %s, exit code %d", v1::ExitCause_Name(x.cause()).c_str(),
             x.exit_code());
}

v1::ReadFileRequest ReadRequest(const std::string &id, const std::string &path)
{
    v1::ReadFileRequest req;
    req.set_workspace_id(id);
    req.set_path(path);
    return req;
}

v1::RunRequest TrueRequest(const std::string &id)
{
    v1::RunRequest req;
    req.set_workspace_id(id);
    req.mutable_process()->add_argv("true");
    return req;
}

// Each function `warmup` times, then `iters` rounds in which every function
// runs once, the order rotating from round to round, so that noise lands
// on all of them alike. One distribution per function.
std::vector<Lat> Interleaved(const std::vector<std::function<void()>> &fns, int warmup, int iters)
{
    for (const auto &f : fns)
        for (int i = 0; i < warmup; i++)
            f();
    std::vector<std::vector<double>> ns(fns.size());
    for (auto &v : ns)
        v.reserve((size_t)iters);
    for (int r = 0; r < iters; r++) {
        for (size_t j = 0; j < fns.size(); j++) {
            size_t k = (j + (size_t)r) % fns.size();
            auto t0 = Clock::now();
            fns[k]();
            ns[k].push_back(Nanos(t0, Clock::now()));
        }
    }
    std::vector<Lat> out;
    for (auto &v : ns)
        out.push_back(Percentiles(std::move(v)));
    return out;
}

std::string P509(const Lat &l)
{
    return Fmt("%s / %s / %s", Us(l.p50_us).c_str(), Us(l.p90_us).c_str(), Us(l.p99_us).c_str());
}

struct Run {
    const Options &opt;
    std::string base; // the run's temporary directory
    std::string pki;  // certificates, when made
};

// ---- part 1: what TLS and tokens cost ----

void BenchAuth(Run &run)
{
    const Options &o = run.opt;
    const std::string token = "tok-bench-alice-0123456789abcdef";
    std::string tokens = run.base + "/auth.tokens";
    WriteHostFile(tokens, "# tenant sha256(token)\nalice " + Sha256Hex(token) + "\n");
    std::string pem = run.pki + "/server.pem", key = run.pki + "/server.key";

    // The baseline first; then a bearer token without TLS (which splits
    // the token check's share from TLS's), TLS + token, and mTLS.
    struct Side {
        std::string name;
        std::vector<std::string> flags;
        std::shared_ptr<grpc::ChannelCredentials> creds; // nullptr: plaintext
        std::string token;
        std::unique_ptr<Server> server;
        std::unique_ptr<Client> client;
        std::string ws;
    };
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = ReadHostFile(run.pki + "/ca.pem");
    grpc::SslCredentialsOptions mtls = tls;
    mtls.pem_private_key = ReadHostFile(run.pki + "/alice.key");
    mtls.pem_cert_chain = ReadHostFile(run.pki + "/alice.pem");
    std::vector<Side> sides;
    sides.push_back({"unix socket, no auth", {}, nullptr, "", nullptr, nullptr, ""});
    sides.push_back({"plaintext + bearer token",
                     {"--tokens-file", tokens},
                     nullptr,
                     token,
                     nullptr,
                     nullptr,
                     ""});
    sides.push_back({"TLS + bearer token",
                     {"--tokens-file", tokens, "--tls-cert", pem, "--tls-key", key},
                     grpc::SslCredentials(tls),
                     token,
                     nullptr,
                     nullptr,
                     ""});
    if (o.mtls)
        sides.push_back(
            {"mTLS (client cert, no token)",
             {"--tls-cert", pem, "--tls-key", key, "--tls-client-ca", run.pki + "/ca.pem"},
             grpc::SslCredentials(mtls),
             "",
             nullptr,
             nullptr,
             ""});
    for (size_t i = 0; i < sides.size(); i++) {
        Side &s = sides[i];
        s.server = std::make_unique<Server>(o.server, run.base + Fmt("/auth-%zu", i), s.flags);
        s.client = std::make_unique<Client>(s.server->NewChannel(s.creds), s.token);
    }

    const std::string data(4 * kKiB, 'a');
    std::vector<v1::ReadFileRequest> reads;
    std::vector<v1::RunRequest> runs;
    for (auto &s : sides) {
        s.ws = OpenWorkspace(*s.client, false, {"true"});
        WriteRemote(*s.client, s.ws, "f4k", data);
        reads.push_back(ReadRequest(s.ws, "f4k"));
        runs.push_back(TrueRequest(s.ws));
    }
    std::vector<std::function<void()>> rf, rt;
    for (size_t i = 0; i < sides.size(); i++) {
        const Client *c = sides[i].client.get();
        const v1::ReadFileRequest *rq = &reads[i];
        const v1::RunRequest *tq = &runs[i];
        rf.push_back([c, rq] { ReadSmall(*c, *rq, 4 * kKiB); });
        rt.push_back([c, tq] { RunTrue(*c, *tq); });
    }
    std::vector<Lat> lr = Interleaved(rf, o.warmup, o.iters);
    fprintf(stderr, "auth_bench: ReadFile across the auth servers done\n");
    std::vector<Lat> lt = Interleaved(rt, o.warmup, o.iters);
    fprintf(stderr, "auth_bench: Run across the auth servers done\n");

    auto rows = [&](const char *op, const std::vector<Lat> &l) {
        const Lat &b = l[0];
        Add(Fmt("%s p50 / p90 / p99: %s", op, sides[0].name.c_str()), P509(b));
        for (size_t i = 1; i < sides.size(); i++) {
            std::string what = Fmt("%s: %s", op, sides[i].name.c_str());
            double added = 100.0 * (l[i].p50_us - b.p50_us) / b.p50_us;
            Add(what + " p50", Us(l[i].p50_us), sides[0].name, Us(b.p50_us),
                Ratio(l[i].p50_us, b.p50_us),
                Goal(added < kGoalAddedPct,
                     Fmt("added %+.1f%% (%+.1f us), goal < 10%%", added, l[i].p50_us - b.p50_us)));
            Add(what + " p90", Us(l[i].p90_us), sides[0].name, Us(b.p90_us),
                Ratio(l[i].p90_us, b.p90_us),
                Fmt("added %s", AddedPct(l[i].p90_us, b.p90_us).c_str()));
            Add(what + " p99", Us(l[i].p99_us), sides[0].name, Us(b.p99_us),
                Ratio(l[i].p99_us, b.p99_us),
                Fmt("added %s", AddedPct(l[i].p99_us, b.p99_us).c_str()));
        }
    };
    rows("ReadFile 4 KiB (local-bash)", lr);
    rows("Run true (local-bash)", lt);

    // Not part of the goal (the channels above are warm), but what a client
    // that does not reuse its connection pays: a new channel, its
    // handshake and one ReadFile, interleaved across the servers likewise.
    std::vector<std::function<void()>> cold;
    const int cold_n = std::max(10, o.iters / 20);
    for (size_t i = 0; i < sides.size(); i++) {
        Side *s = &sides[i];
        const v1::ReadFileRequest *rq = &reads[i];
        cold.push_back([s, rq] {
            Client c(s->server->NewChannel(s->creds), s->token);
            ReadSmall(c, *rq, 4 * kKiB);
        });
    }
    std::vector<Lat> lc = Interleaved(cold, 2, cold_n);
    Add(Fmt("new connection + ReadFile 4 KiB p50 / p90 / p99: %s", sides[0].name.c_str()),
        P509(lc[0]), "-", "-", "-", Fmt("%d rounds", cold_n));
    for (size_t i = 1; i < sides.size(); i++)
        Add(Fmt("new connection + ReadFile 4 KiB: %s p50", sides[i].name.c_str()), Us(lc[i].p50_us),
            sides[0].name, Us(lc[0].p50_us), Ratio(lc[i].p50_us, lc[0].p50_us),
            Fmt("added %s (handshake; not the goal)",
                AddedPct(lc[i].p50_us, lc[0].p50_us).c_str()));

    for (auto &s : sides)
        CloseWorkspace(*s.client, s.ws);
}

// ---- part 2: 1,000 workspaces across 10 tenants ----

void BenchScale(Run &run)
{
    const Options &o = run.opt;
    std::string tokens = run.base + "/scale.tokens";
    std::string text = "# tenant sha256(token)\n";
    std::vector<std::string> toks;
    for (int t = 0; t < o.tenants; t++) {
        toks.push_back(Fmt("tok-tenant%02d-%08x", t, (unsigned)(t * 2654435761u)));
        text += Fmt("tenant%02d ", t) + Sha256Hex(toks.back()) + "\n";
    }
    WriteHostFile(tokens, text);
    int cap = o.workspaces + o.workspaces / 10 + 10;
    Server server(o.server, run.base + "/scale",
                  {"--tokens-file", tokens, "--max-workspaces", std::to_string(cap)});
    pid_t pid = server.pid();
    std::vector<std::unique_ptr<Client>> clients;
    for (int t = 0; t < o.tenants; t++)
        clients.push_back(std::make_unique<Client>(server.NewChannel(), toks[(size_t)t]));
    // Every tenant's connection up and one List answered before "before".
    for (auto &c : clients) {
        grpc::ClientContext ctx;
        c->Prepare(&ctx);
        v1::ListResponse resp;
        Check(c->ws->List(&ctx, v1::ListRequest(), &resp), "List");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    long long rss0 = ProcStatusBytes(pid, "VmRSS"), hwm0 = ProcStatusBytes(pid, "VmHWM");
    long fds0 = CountFds(pid), thr0 = CountThreads(pid);

    // Round-robin over the tenants; within each tenant local-bash and
    // memory alternate (workspace i is memory when (i / tenants) is odd).
    std::vector<std::vector<std::string>> ids((size_t)o.tenants);
    std::vector<double> all, bash, mem;
    auto t_start = Clock::now();
    for (int i = 0; i < o.workspaces; i++) {
        int t = i % o.tenants;
        bool memory = (i / o.tenants) % 2 == 1;
        auto a = Clock::now();
        ids[(size_t)t].push_back(OpenWorkspace(*clients[(size_t)t], memory, {}));
        double ns = Nanos(a, Clock::now());
        all.push_back(ns);
        (memory ? mem : bash).push_back(ns);
    }
    double open_wall = Seconds(t_start, Clock::now());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    long long rss1 = ProcStatusBytes(pid, "VmRSS"), hwm1 = ProcStatusBytes(pid, "VmHWM");
    long fds1 = CountFds(pid), thr1 = CountThreads(pid);

    Lat la = Percentiles(all), lb = Percentiles(bash), lm = Percentiles(mem);
    std::string shape =
        Fmt("%d workspaces, %d tenants, half local-bash, half memory", o.workspaces, o.tenants);
    Add("Open p50 / p90 / p99, all", P509(la), "-", "-", "-",
        Fmt("%s; %.2f s in all", shape.c_str(), open_wall));
    // By provider: the two differ by ~50x, so a percentile over the mix
    // says little; the first and last hundred show whether an Open gets
    // slower as the server fills.
    auto by_provider = [&](const char *name, const std::vector<double> &v, const Lat &l) {
        Add(Fmt("Open p50 / p90 / p99, %s", name), P509(l));
        size_t h = std::min<size_t>(100, v.size());
        Lat first = Percentiles(std::vector<double>(v.begin(), v.begin() + (long)h));
        Lat last = Percentiles(std::vector<double>(v.end() - (long)h, v.end()));
        Add(Fmt("  %s: last %zu Opens p50 / p99", name, h),
            Fmt("%s / %s", Us(last.p50_us).c_str(), Us(last.p99_us).c_str()), Fmt("first %zu", h),
            Fmt("%s / %s", Us(first.p50_us).c_str(), Us(first.p99_us).c_str()),
            Ratio(last.p50_us, first.p50_us), "(p50 ratio)");
    };
    by_provider("local-bash", bash, lb);
    by_provider("memory", mem, lm);
    Add("server VmRSS after the Opens", Mib(rss1), "before", Mib(rss0),
        Ratio((double)rss1, (double)rss0));
    Add("server VmHWM after the Opens", Mib(hwm1), "before", Mib(hwm0),
        Ratio((double)hwm1, (double)hwm0));
    Add("server RSS per open workspace",
        Fmt("%.1f KiB", (double)(rss1 - rss0) / kKiB / o.workspaces), "-", "-", "-",
        "(VmRSS after - before) / workspaces");
    Add("server fds / threads after the Opens", Fmt("%ld / %ld", fds1, thr1), "before",
        Fmt("%ld / %ld", fds0, thr0));

    // List per tenant: every tenant sees exactly its own.
    std::vector<double> list_ns;
    for (int r = 0; r < o.list_rounds; r++) {
        for (int t = 0; t < o.tenants; t++) {
            grpc::ClientContext ctx;
            clients[(size_t)t]->Prepare(&ctx);
            v1::ListResponse resp;
            auto a = Clock::now();
            Check(clients[(size_t)t]->ws->List(&ctx, v1::ListRequest(), &resp), "List");
            list_ns.push_back(Nanos(a, Clock::now()));
            if ((size_t)resp.workspaces_size() != ids[(size_t)t].size())
                Fail("List for tenant%02d: %d workspaces, expected %zu", t, resp.workspaces_size(),
                     ids[(size_t)t].size());
            std::vector<std::string> got;
            for (const auto &w : resp.workspaces())
                got.push_back(w.id());
            std::sort(got.begin(), got.end());
            std::vector<std::string> want = ids[(size_t)t];
            std::sort(want.begin(), want.end());
            if (got != want)
                Fail("List for tenant%02d: not exactly its own workspaces", t);
        }
    }
    Lat ll = Percentiles(list_ns);
    Add(Fmt("List per tenant (%zu each) p50 / p90 / p99", ids[0].size()), P509(ll), "-", "-", "-",
        Fmt("%d calls, each list checked", (int)list_ns.size()));

    // Close them all, then see what the server gives back.
    std::vector<double> close_ns;
    for (size_t k = 0; k < ids[0].size(); k++) {
        for (int t = 0; t < o.tenants; t++) {
            if (k >= ids[(size_t)t].size())
                continue;
            auto a = Clock::now();
            CloseWorkspace(*clients[(size_t)t], ids[(size_t)t][k]);
            close_ns.push_back(Nanos(a, Clock::now()));
        }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    long long rss2 = ProcStatusBytes(pid, "VmRSS");
    long fds2 = CountFds(pid);
    Add("Close p50 / p90 / p99", P509(Percentiles(close_ns)));
    Add("server VmRSS after closing all", Mib(rss2), "before the Opens", Mib(rss0),
        Fmt("%+.1f MiB", (double)(rss2 - rss0) / kMiB), Fmt("fds %ld (before %ld)", fds2, fds0));
    if (fds2 > fds0 + 8)
        Add("fds left after closing all", Fmt("%ld", fds2 - fds0), "-", "-", "-",
            "server holds fds of closed workspaces?");
}

// ---- part 3: a well-behaved tenant while another abuses the server ----
//
// Tenant B runs in a process of its own, forked before gRPC is first used,
// so that its client-side work (its gRPC threads, the data its unread
// streams receive) has its own threads and CPU accounting and is not
// charged to tenant A's client. The two talk over a pair of pipes, one
// command line and one reply line at a time.

// A stream tenant B opened and never reads.
struct Held {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReader<v1::ReadFileResponse>> read;
    std::unique_ptr<grpc::ClientReaderWriter<v1::StartRequest, v1::ProcessEvent>> start;
};

// Busy and total jiffies of the whole machine (the first line of
// /proc/stat), for the share of both CPUs a phase used.
void MachineTicks(unsigned long long *busy, unsigned long long *total)
{
    *busy = *total = 0;
    FILE *f = fopen("/proc/stat", "re");
    if (!f)
        return;
    unsigned long long v[8] = {0};
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
               &v[5], &v[6], &v[7]) == 8) {
        for (auto x : v)
            *total += x;
        *busy = *total - v[3] - v[4];
    }
    fclose(f);
}

// Which calls the flood opens and cancels.
enum Flood { kFloodNone = 0, kFloodRead = 1, kFloodStart = 2, kFloodBoth = 3 };

// Tenant B, inside the abuser process.
class Abuser
{
  public:
    Abuser(const Options &opt, std::string address, std::string token, std::string ws,
           const std::string &path)
        : opt_(opt), address_(std::move(address)), token_(std::move(token)), ws_(std::move(ws))
    {
        big_.set_workspace_id(ws_);
        big_.set_path(path);
    }
    ~Abuser()
    {
        StopFlood();
        for (auto &h : held_)
            h.ctx->TryCancel();
    }

    // Streams that are never read: ReadFile of the large file on
    // held_conns connections, Start of `yes` on one more.
    void Hold()
    {
        for (int k = 0; k < opt_.held_conns; k++) {
            conns_.push_back(std::make_unique<Client>(NewChannelTo(address_, nullptr), token_));
            for (int i = 0; i < opt_.held_reads; i++) {
                Held h;
                h.ctx = std::make_unique<grpc::ClientContext>();
                conns_.back()->Prepare(h.ctx.get(), 3600);
                h.read = conns_.back()->fs->ReadFile(h.ctx.get(), big_);
                held_.push_back(std::move(h));
            }
        }
        conns_.push_back(std::make_unique<Client>(NewChannelTo(address_, nullptr), token_));
        Client &sc = *conns_.back();
        for (int i = 0; i < opt_.held_starts; i++) {
            Held h;
            h.ctx = std::make_unique<grpc::ClientContext>();
            sc.Prepare(h.ctx.get(), 3600);
            h.start = sc.exec->Start(h.ctx.get());
            if (!h.start->Write(Yes()))
                Fail("Start yes: the stream ended at once");
            held_.push_back(std::move(h));
        }
        // Let the held streams fill their windows and the commands'
        // read-ahead.
        std::this_thread::sleep_for(std::chrono::seconds(1));
    }

    // Cancels every held stream; each must end CANCELLED, as asked.
    std::string Release()
    {
        long cancelled = 0, other = 0;
        for (auto &h : held_) {
            h.ctx->TryCancel();
            grpc::Status st = h.read ? h.read->Finish() : h.start->Finish();
            if (st.error_code() == grpc::StatusCode::CANCELLED)
                cancelled++;
            else
                other++;
        }
        held_.clear();
        conns_.clear();
        return Fmt("%ld %ld", cancelled, other);
    }

    // flood_threads threads, each on a connection of its own, open a call
    // and cancel it at once, in a loop.
    void StartFlood(int kind)
    {
        stop_ = false;
        calls_ = 0;
        outcomes_.clear();
        flood_start_ = Clock::now();
        for (int t = 0; t < opt_.flood_threads; t++) {
            fconns_.push_back(std::make_unique<Client>(NewChannelTo(address_, nullptr), token_));
            Client *c = fconns_.back().get();
            threads_.emplace_back([this, c, t, kind] { FloodLoop(c, t, kind); });
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }

    // Stops the flood; "CALLS_PER_SECOND OUTCOMES".
    std::string StopFlood()
    {
        stop_ = true;
        for (auto &th : threads_)
            th.join();
        threads_.clear();
        fconns_.clear();
        double s = Seconds(flood_start_, Clock::now());
        std::string out;
        for (auto &kv : outcomes_)
            out += Fmt("%s%s:%ld", out.empty() ? "" : ",", kv.first.c_str(), kv.second);
        return Fmt("%.0f %s", s > 0 ? (double)calls_ / s : 0.0, out.empty() ? "-" : out.c_str());
    }

  private:
    v1::StartRequest Yes() const
    {
        v1::StartRequest req;
        req.mutable_start()->set_workspace_id(ws_);
        req.mutable_start()->mutable_process()->add_argv("yes");
        return req;
    }

    void FloodLoop(Client *c, int t, int kind)
    {
        std::map<std::string, long> mine;
        for (long i = t; !stop_; i++) {
            grpc::ClientContext ctx;
            c->Prepare(&ctx, 60);
            grpc::Status st;
            bool read = kind == kFloodRead || (kind == kFloodBoth && i % 2 == 0);
            if (read) {
                auto r = c->fs->ReadFile(&ctx, big_);
                ctx.TryCancel();
                st = r->Finish();
            } else {
                auto s = c->exec->Start(&ctx);
                s->Write(Yes());
                ctx.TryCancel();
                st = s->Finish();
            }
            std::string reason = Reason(st);
            mine[std::string(CodeName(st.error_code())) + (reason.empty() ? "" : "/") + reason]++;
            calls_++;
        }
        std::lock_guard<std::mutex> lk(mu_);
        for (auto &kv : mine)
            outcomes_[kv.first] += kv.second;
    }

    const Options &opt_;
    std::string address_, token_, ws_;
    v1::ReadFileRequest big_;
    std::vector<std::unique_ptr<Client>> conns_, fconns_;
    std::vector<Held> held_;
    std::vector<std::thread> threads_;
    std::atomic<bool> stop_{false};
    std::atomic<long> calls_{0};
    std::mutex mu_;
    std::map<std::string, long> outcomes_;
    Clock::time_point flood_start_;
};

// The abuser process's loop: "setup ADDRESS TOKEN WS PATH", "hold",
// "flood KIND", "stop", "release", "quit"; each answered by one line,
// "ok [RESULT]" or "err MESSAGE".
[[noreturn]] void AbuserMain(const Options &opt, int in_fd, int out_fd)
{
    FILE *in = fdopen(in_fd, "r");
    FILE *out = fdopen(out_fd, "w");
    if (!in || !out)
        _exit(1);
    std::unique_ptr<Abuser> ab;
    char line[4096];
    while (fgets(line, sizeof(line), in)) {
        std::istringstream cmd(line);
        std::string verb, result;
        cmd >> verb;
        try {
            if (verb == "setup") {
                std::string address, token, ws, path;
                cmd >> address >> token >> ws >> path;
                ab = std::make_unique<Abuser>(opt, address, token, ws, path);
            } else if (verb == "quit") {
                break;
            } else if (!ab) {
                Fail("no setup before %s", verb.c_str());
            } else if (verb == "hold") {
                ab->Hold();
            } else if (verb == "release") {
                result = ab->Release();
            } else if (verb == "flood") {
                int kind = 0;
                cmd >> kind;
                ab->StartFlood(kind);
            } else if (verb == "stop") {
                result = ab->StopFlood();
            } else {
                Fail("unknown command %s", verb.c_str());
            }
            fprintf(out, "ok %s\n", result.c_str());
        } catch (const BenchError &ex) {
            fprintf(out, "err %s\n", ex.what());
        }
        fflush(out);
    }
    ab.reset();
    fflush(out);
    _exit(0);
}

// The bench's end of the abuser process.
class AbuserProcess
{
  public:
    // Forks the abuser; call before gRPC is first used in this process.
    explicit AbuserProcess(const Options &opt)
    {
        int down[2], up[2];
        if (pipe2(down, O_CLOEXEC) < 0 || pipe2(up, O_CLOEXEC) < 0)
            Die("pipe: %s", strerror(errno));
        fflush(stdout);
        fflush(stderr);
        pid_ = fork();
        if (pid_ < 0)
            Die("fork: %s", strerror(errno));
        if (pid_ == 0) {
            close(down[1]);
            close(up[0]);
            AbuserMain(opt, down[0], up[1]);
        }
        close(down[0]);
        close(up[1]);
        to_ = fdopen(down[1], "w");
        from_ = fdopen(up[0], "r");
        std::lock_guard<std::mutex> lk(g_pids_mu);
        g_pids.push_back(pid_);
    }
    ~AbuserProcess()
    {
        if (to_) {
            fputs("quit\n", to_);
            fclose(to_);
        }
        if (from_)
            fclose(from_);
        int status;
        waitpid(pid_, &status, 0);
        std::lock_guard<std::mutex> lk(g_pids_mu);
        g_pids.erase(std::remove(g_pids.begin(), g_pids.end(), pid_), g_pids.end());
    }
    pid_t pid() const
    {
        return pid_;
    }
    // Sends one command and returns what follows "ok "; an "err" reply (or
    // none) fails the part.
    std::string Call(const std::string &cmd)
    {
        fprintf(to_, "%s\n", cmd.c_str());
        fflush(to_);
        char line[8192];
        if (!fgets(line, sizeof(line), from_))
            Fail("abuser: no reply to %s", cmd.c_str());
        std::string r = line;
        while (!r.empty() && r.back() == '\n')
            r.pop_back();
        if (r.compare(0, 3, "ok ") != 0)
            Fail("abuser: %s: %s", cmd.c_str(), r.c_str());
        return r.substr(3);
    }

  private:
    pid_t pid_ = -1;
    FILE *to_ = nullptr;
    FILE *from_ = nullptr;
};

std::unique_ptr<AbuserProcess> g_abuser;

// What one phase of tenant A's calls saw.
struct Phase {
    std::string name;
    Lat a;
    double wall = 0;
    // Shares of one CPU (server, A's client, B's client) and of the machine.
    double server_cpu = 0, a_cpu = 0, b_cpu = 0, machine_busy = 0;
    std::string flood; // "CALLS_PER_SECOND OUTCOMES" from the abuser
    long long rss_peak = 0;
    long fds = 0, threads = 0;
};

double SelfCpuSeconds()
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// Tenant A's ReadFiles (up to abuse_iters, for at most abuse_seconds)
// while B floods with `kind` (or does nothing new).
Phase MeasureA(const Options &o, pid_t server, const std::function<void()> &a_read,
               const char *name, int kind)
{
    Phase ph;
    ph.name = name;
    if (kind != kFloodNone)
        g_abuser->Call(Fmt("flood %d", kind));
    {
        RssSampler sampler(server);
        pid_t b = g_abuser->pid();
        unsigned long long t0 = CpuTicks(server), bt0 = CpuTicks(b), mb0, mt0, mb1, mt1;
        MachineTicks(&mb0, &mt0);
        double c0 = SelfCpuSeconds();
        auto w0 = Clock::now();
        auto deadline = w0 + std::chrono::seconds(o.abuse_seconds);
        std::vector<double> ns;
        for (int i = 0; i < o.abuse_iters && Clock::now() < deadline; i++) {
            auto a = Clock::now();
            a_read();
            ns.push_back(Nanos(a, Clock::now()));
        }
        ph.wall = Seconds(w0, Clock::now());
        // The sampler's thread is in this process too, but sleeps 1 ms
        // between reads of /proc.
        ph.a_cpu = (SelfCpuSeconds() - c0) / ph.wall;
        ph.server_cpu = TicksToSeconds(CpuTicks(server) - t0) / ph.wall;
        ph.b_cpu = TicksToSeconds(CpuTicks(b) - bt0) / ph.wall;
        MachineTicks(&mb1, &mt1);
        ph.machine_busy = mt1 > mt0 ? (double)(mb1 - mb0) / (double)(mt1 - mt0) : 0;
        ph.fds = CountFds(server);
        ph.threads = CountThreads(server);
        ph.rss_peak = sampler.peak();
        ph.a = Percentiles(std::move(ns));
    }
    if (kind != kFloodNone)
        ph.flood = g_abuser->Call("stop");
    fprintf(stderr, "auth_bench: tenant A, %s: done (%zu calls)\n", name, ph.a.n);
    return ph;
}

void BenchAbuse(Run &run)
{
    const Options &o = run.opt;
    const std::string ta = "tok-tenant-a-well-behaved-0001", tb = "tok-tenant-b-abuser-0002";
    std::string tokens = run.base + "/abuse.tokens";
    WriteHostFile(tokens,
                  "# tenant sha256(token)\na " + Sha256Hex(ta) + "\nb " + Sha256Hex(tb) + "\n");
    Server server(o.server, run.base + "/abuse", {"--tokens-file", tokens});
    pid_t pid = server.pid();
    Client a(server.NewChannel(), ta);
    Client b0(server.NewChannel(), tb);
    std::string wa = OpenWorkspace(a, false, {});
    WriteRemote(a, wa, "f4k", std::string(4 * kKiB, 'a'));
    std::string wb = OpenWorkspace(b0, false, {"yes"});
    WriteRemote(b0, wb, "big", std::string((size_t)o.big_mib * kMiB, 'b'));
    g_abuser->Call("setup " + server.address() + " " + tb + " " + wb + " big");
    v1::ReadFileRequest ra = ReadRequest(wa, "f4k");
    auto a_read = [&] { ReadSmall(a, ra, 4 * kKiB); };
    for (int i = 0; i < o.warmup; i++)
        a_read();

    long long rss0 = ProcStatusBytes(pid, "VmRSS");
    long fds0 = CountFds(pid);
    std::vector<Phase> phases;
    phases.push_back(MeasureA(o, pid, a_read, "alone", kFloodNone));
    g_abuser->Call("hold");
    long long rss_held = ProcStatusBytes(pid, "VmRSS");
    phases.push_back(MeasureA(o, pid, a_read, "B holds unread streams", kFloodNone));
    phases.push_back(MeasureA(o, pid, a_read, "B holds + floods ReadFile+cancel", kFloodRead));
    phases.push_back(MeasureA(o, pid, a_read, "B holds + floods Start yes+cancel", kFloodStart));
    phases.push_back(MeasureA(o, pid, a_read, "B holds + floods both", kFloodBoth));
    std::string rel1 = g_abuser->Call("release");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    long long rss_released = ProcStatusBytes(pid, "VmRSS");
    phases.push_back(MeasureA(o, pid, a_read, "after B let go", kFloodNone));
    // A second round of held streams: a leak would add about as much again;
    // memory the allocator keeps for reuse would not.
    g_abuser->Call("hold");
    long long rss_held2 = ProcStatusBytes(pid, "VmRSS");
    std::string rel2 = g_abuser->Call("release");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    long long rss_second = ProcStatusBytes(pid, "VmRSS");
    long fds_end = CountFds(pid);

    const Phase &alone = phases[0];
    Add(Fmt("tenant A ReadFile 4 KiB p50 / p90 / p99, %s", alone.name.c_str()), P509(alone.a), "-",
        "-", "-",
        Fmt("%zu calls; CPU server %.0f%%, A %.0f%%; machine %.0f%% busy", alone.a.n,
            100 * alone.server_cpu, 100 * alone.a_cpu, 100 * alone.machine_busy));
    Add("B's abuse (a process of its own)",
        Fmt("%d conns x %d ReadFile %d MiB + 1 conn x %d Start yes, never read; "
            "%d flood threads, own conns",
            o.held_conns, o.held_reads, o.big_mib, o.held_starts, o.flood_threads));
    for (size_t i = 1; i < phases.size(); i++) {
        const Phase &p = phases[i];
        std::string what = "tenant A ReadFile 4 KiB, " + p.name;
        Add(what + " p50", Us(p.a.p50_us), "alone", Us(alone.a.p50_us),
            Ratio(p.a.p50_us, alone.a.p50_us), Fmt("%zu calls in %.1f s", p.a.n, p.wall));
        Add(what + " p99", Us(p.a.p99_us), "alone", Us(alone.a.p99_us),
            Ratio(p.a.p99_us, alone.a.p99_us),
            Fmt("p90 %s, max %s", Us(p.a.p90_us).c_str(), Us(p.a.max_us).c_str()));
        Add("  CPU: server / A's client / B's client; machine",
            Fmt("%.0f%% / %.0f%% / %.0f%%; %.0f%% busy", 100 * p.server_cpu, 100 * p.a_cpu,
                100 * p.b_cpu, 100 * p.machine_busy));
        if (!p.flood.empty()) {
            size_t sp = p.flood.find(' ');
            Add("  B flood: calls opened and cancelled", p.flood.substr(0, sp) + " /s", "-", "-",
                "-", sp == std::string::npos ? "-" : p.flood.substr(sp + 1));
        }
        Add("  server peak VmRSS (1 ms samples), fds, threads",
            Fmt("%s, %ld, %ld", Mib(p.rss_peak).c_str(), p.fds, p.threads));
    }
    Add("server VmRSS: before / B holding / after release",
        Fmt("%s / %s / %s", Mib(rss0).c_str(), Mib(rss_held).c_str(), Mib(rss_released).c_str()),
        "second hold / release", Fmt("%s / %s", Mib(rss_held2).c_str(), Mib(rss_second).c_str()),
        "-", Fmt("fds %ld at the start, %ld at the end", fds0, fds_end));
    long c1 = 0, o1 = 0, c2 = 0, o2 = 0;
    sscanf(rel1.c_str(), "%ld %ld", &c1, &o1);
    sscanf(rel2.c_str(), "%ld %ld", &c2, &o2);
    Add("B held streams cancelled (two rounds)", Fmt("%ld CANCELLED, %ld other", c1 + c2, o1 + o2));
    if (o1 + o2)
        g_failed = true;
    CloseWorkspace(a, wa);
    CloseWorkspace(b0, wb);
}

void Usage(FILE *f)
{
    fprintf(
        f, "usage: auth_bench --server PATH [options]\n"
           "  --server PATH         the workspaced binary (required)\n"
           "  --tmp DIR             where state directories and certificates go [$TMPDIR or /tmp]\n"
           "  --iters N             auth: timed rounds (one call per server each) [2000]\n"
           "  --warmup N            untimed calls on each channel first [200]\n"
           "  --no-mtls             auth: leave out the mTLS server\n"
           "  --workspaces N        scale: workspaces to open [1000]\n"
           "  --tenants N           scale: tenants they are spread over [10]\n"
           "  --list-rounds N       scale: List calls per tenant [5]\n"
           "  --abuse-iters N       abuse: tenant A's ReadFiles per phase [2000]\n"
           "  --abuse-seconds N     abuse: at most this long per phase [20]\n"
           "  --held-conns N        abuse: B's connections holding unread ReadFiles [2]\n"
           "  --held-reads N        abuse: unread ReadFiles per such connection [96]\n"
           "  --held-starts N       abuse: unread Starts of `yes` (one more connection) [16]\n"
           "  --flood-threads N     abuse: threads opening and cancelling calls [2]\n"
           "  --big-mib N           abuse: size of the file B reads [64]\n"
           "  --only LIST           parts, comma-separated: auth,scale,abuse [all]\n"
           "  --keep                keep the state directories\n");
}

int ParseInt(const char *flag, const char *s, int min, int max)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || *end || v < min || v > max)
        Die("%s needs an integer in [%d, %d]", flag, min, max);
    return (int)v;
}

Options ParseArgs(int argc, char **argv)
{
    Options o;
    const char *t = getenv("TMPDIR");
    o.tmp = t && *t ? t : "/tmp";
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
        struct {
            const char *flag;
            int *dst;
            int min, max;
        } ints[] = {
            {"--iters", &o.iters, 1, 10000000},
            {"--warmup", &o.warmup, 0, 10000000},
            {"--workspaces", &o.workspaces, 1, 100000},
            {"--tenants", &o.tenants, 1, 1000},
            {"--list-rounds", &o.list_rounds, 1, 10000},
            {"--abuse-iters", &o.abuse_iters, 1, 10000000},
            {"--abuse-seconds", &o.abuse_seconds, 1, 3600},
            {"--held-conns", &o.held_conns, 0, 100},
            {"--held-reads", &o.held_reads, 0, 100000},
            {"--held-starts", &o.held_starts, 0, 100000},
            {"--flood-threads", &o.flood_threads, 0, 64},
            {"--big-mib", &o.big_mib, 1, 4096},
        };
        bool matched = false;
        for (auto &x : ints) {
            if (a == x.flag) {
                *x.dst = ParseInt(x.flag, v, x.min, x.max);
                i++;
                matched = true;
                break;
            }
        }
        if (matched)
            continue;
        if (a == "--help") {
            Usage(stdout);
            exit(0);
        } else if (a == "--server" && v) {
            o.server = v;
            i++;
        } else if (a == "--tmp" && v) {
            o.tmp = v;
            i++;
        } else if (a == "--only" && v) {
            o.only = v;
            i++;
        } else if (a == "--no-mtls") {
            o.mtls = false;
        } else if (a == "--keep") {
            o.keep = true;
        } else {
            Usage(stderr);
            exit(2);
        }
    }
    if (o.server.empty()) {
        Usage(stderr);
        exit(2);
    }
    return o;
}

} // namespace

int main(int argc, char **argv)
{
    Options opt = ParseArgs(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    auto wanted = [&](const char *part) {
        std::string list = "," + opt.only + ",";
        return list.find(std::string(",") + part + ",") != std::string::npos;
    };
    // Before gRPC is first used here: the abuser's gRPC must be its own.
    if (wanted("abuse"))
        g_abuser = std::make_unique<AbuserProcess>(opt);

    std::string tmpl = opt.tmp + "/auth_bench.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    // Searchable by others: workspace uids reach their directories under
    // the state directory made here.
    if (!mkdtemp(buf.data()) || chmod(buf.data(), 0711) != 0)
        Die("mkdtemp %s: %s", tmpl.c_str(), strerror(errno));
    Run run{opt, buf.data(), ""};
    if (!opt.keep)
        g_base = run.base;

    struct utsname u;
    uname(&u);
    auto start = Clock::now();
    printf("auth_bench: %ld CPUs, Linux %s; auth %d rounds (+%d warm-up)%s; scale %d workspaces "
           "/ %d tenants; abuse %d calls per phase\n",
           sysconf(_SC_NPROCESSORS_ONLN), u.release, opt.iters, opt.warmup,
           opt.mtls ? " with mTLS" : "", opt.workspaces, opt.tenants, opt.abuse_iters);
    fflush(stdout);

    if (wanted("auth")) {
        run.pki = run.base + "/pki";
        if (mkdir(run.pki.c_str(), 0700) < 0)
            Die("mkdir %s: %s", run.pki.c_str(), strerror(errno));
        MakePki(run.pki, "alice");
        Part("auth", [&] { BenchAuth(run); });
        fprintf(stderr, "auth_bench: auth done at %.1f s\n", Seconds(start, Clock::now()));
    }
    if (wanted("scale")) {
        Part("scale", [&] { BenchScale(run); });
        fprintf(stderr, "auth_bench: scale done at %.1f s\n", Seconds(start, Clock::now()));
    }
    if (wanted("abuse")) {
        Part("abuse", [&] { BenchAbuse(run); });
        fprintf(stderr, "auth_bench: abuse done at %.1f s\n", Seconds(start, Clock::now()));
    }

    g_abuser.reset();
    printf("\n");
    PrintTable();
    printf("\nratio: measured over baseline (time); added: (measured - baseline) / baseline. "
           "p50 / p90 / p99 over the calls of one run. Total %.1f s.\n",
           Seconds(start, Clock::now()));
    if (!opt.keep)
        RemoveTree(run.base);
    else
        printf("state kept in %s\n", run.base.c_str());
    return g_failed ? 1 : 0;
}
