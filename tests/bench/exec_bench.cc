// Exec RPC benchmark: workspaced's Run and Start against the same commands
// spawned directly by the bench process, in the same run, as ratios.
//
//   exec_bench --server PATH/TO/workspaced [options]   (--help lists them)
//
// It starts its own server on a loopback port with a fresh state directory,
// opens one local-bash workspace (capabilities fs, and shell allowing `true`
// and `head`), and prints one table:
//   * run:        Run of `true` vs posix_spawn+waitpid of /bin/true
//                 (latency p50/p99, interleaved in blocks; then each call
//                 alone after an idle pause);
//   * stream:     Start of `head -c N /dev/zero` vs the same command piped
//                 into this process (throughput, server CPU per GiB);
//   * concurrent: C threads each doing Runs of `true` at once vs C threads
//                 each doing posix_spawn+waitpid (commands/s, latency).
// Exit status: 0 when every measurement ran and every check passed (goals
// missed are reported, not failures), 1 otherwise. A part whose RPCs fail
// (for example UNIMPLEMENTED) is reported as FAILED and the other parts
// still run.
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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "workspace/v1/exec.grpc.pb.h"
#include "workspace/v1/workspaces.grpc.pb.h"

extern char **environ;

namespace
{

namespace v1 = workspace::v1;
using Clock = std::chrono::steady_clock;

constexpr size_t kMiB = 1024 * 1024;
constexpr uint64_t kGiB = 1024ull * 1024 * 1024;
// Interleaving block: each side runs this many iterations in turn, so that
// noise from the rest of the machine lands on both sides alike.
constexpr int kBlock = 50;
// The raw pipe reader's buffer.
constexpr size_t kReadBuf = kMiB;
// The binary the raw baselines spawn (the server resolves `true` in its own
// fixed PATH; on this system /bin is /usr/bin).
constexpr const char *kTrue = "/bin/true";
constexpr const char *kHead = "/usr/bin/head";
// The goals stated for the exec layer.
constexpr double kGoalRunDeltaUs = 1000.0; // Run p50 within 1 ms of raw spawn
constexpr double kGoalStreamBps = 1e9;     // streamed output >= 1 GB/s
constexpr double kGoalStreamVsPipe = 0.5;  // and >= half the raw pipe rate

struct Options {
    std::string server;
    std::string tmp;
    int iters = 2000;
    int warmup = 200;
    int idle_iters = 100;
    int idle_ms = 50;
    int stream_mib = 1024;
    int stream_runs = 3;
    int stream_ring_kib = 0; // 0: the server's default
    int conc = 100;
    int conc_each = 20;
    int conc_rounds = 2;
    int channels = 1;
    int server_threads = 0; // 0: the server's default
    bool keep = false;
    // Parts to run: any of "run", "stream", "concurrent", comma-separated.
    std::string only = "run,uids,stream,concurrent";
};

// The server under test, killed by Die so that a failed run leaves no
// server behind.
pid_t g_server_pid = -1;
// The run's temporary directory, removed by Die as well.
std::string g_base;

void RemoveTree(const std::string &path);

[[noreturn]] void Die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void Die(const char *fmt, ...)
{
    va_list ap;
    if (g_server_pid > 0) {
        kill(g_server_pid, SIGKILL);
        waitpid(g_server_pid, nullptr, 0);
    }
    if (!g_base.empty())
        RemoveTree(g_base);
    va_start(ap, fmt);
    fputs("exec_bench: ", stderr);
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

// A failed measurement (an RPC error or a wrong answer): the part is
// reported as FAILED and the run goes on with the next part.
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

std::chrono::system_clock::time_point In(int seconds)
{
    return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

// ---- raw baselines: processes spawned by the bench itself ----

// posix_spawn + waitpid of /bin/true, nothing else (the child shares the
// bench's stdio; true writes nothing).
void RawTrue()
{
    static char arg0[] = "true";
    char *argv[] = {arg0, nullptr};
    pid_t pid;
    int rc = posix_spawn(&pid, kTrue, nullptr, nullptr, argv, environ);
    if (rc != 0)
        Die("spawn %s: %s", kTrue, strerror(rc));
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            Die("waitpid: %s", strerror(errno));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        Die("%s: status %d", kTrue, status);
}

void ReadToEof(int fd, char *buf, size_t cap, uint64_t *total)
{
    for (;;) {
        ssize_t n = read(fd, buf, cap);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            Die("read: %s", strerror(errno));
        if (n == 0)
            return;
        if (total)
            *total += (uint64_t)n;
    }
}

// What a server must do at least for one command, done in-process: a new
// session, stdin from /dev/null, stdout and stderr on two pipes read to
// EOF, then wait4 (which also returns the rusage the server reports).
void RawTrueLikeServer()
{
    static char arg0[] = "true";
    char *argv[] = {arg0, nullptr};
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)
        Die("pipe: %s", strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
    pid_t pid;
    int rc = posix_spawn(&pid, kTrue, &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(out[1]);
    close(err[1]);
    if (rc != 0)
        Die("spawn %s: %s", kTrue, strerror(rc));
    char buf[4096];
    ReadToEof(out[0], buf, sizeof(buf), nullptr);
    ReadToEof(err[0], buf, sizeof(buf), nullptr);
    close(out[0]);
    close(err[0]);
    int status;
    struct rusage ru;
    while (wait4(pid, &status, 0, &ru) < 0) {
        if (errno != EINTR)
            Die("wait4: %s", strerror(errno));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        Die("%s: status %d", kTrue, status);
}

// `head -c LEN /dev/zero` piped into this process and read with `buf`
// (read() in a loop); returns the bytes read.
uint64_t RawStream(uint64_t len, char *buf, size_t cap)
{
    std::string count = std::to_string(len);
    std::string a0 = "head", a1 = "-c", a3 = "/dev/zero";
    char *argv[] = {a0.data(), a1.data(), count.data(), a3.data(), nullptr};
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        Die("pipe: %s", strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    pid_t pid;
    int rc = posix_spawn(&pid, kHead, &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (rc != 0)
        Die("spawn %s: %s", kHead, strerror(rc));
    uint64_t got = 0;
    ReadToEof(p[0], buf, cap, &got);
    close(p[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            Die("waitpid: %s", strerror(errno));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        Die("head: status %d", status);
    return got;
}

// ---- the server ----

// The server under test, started as fs_bench and the e2e harness do
// (stdout is read for the listening line, stderr goes to a file).
class Server
{
  public:
    Server(const std::string &binary, const std::string &state_dir, int threads,
           const std::vector<std::string> &extra = {})
    {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
            Die("pipe: %s", strerror(errno));
        err_path_ = state_dir + ".stderr";
        // A unix socket: a TCP listener needs authentication, and the
        // operator's policy must allow local-bash, which is off by default.
        std::vector<std::string> argv = {
            binary,    "--listen",           "unix:" + state_dir + ".sock",           "--state-dir",
            state_dir, "--policy-providers", "memory,local-bash,local-sandbox,docker"};
        if (threads > 0) {
            argv.push_back("--threads");
            argv.push_back(std::to_string(threads));
        }
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
        g_server_pid = pid_;
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
        g_server_pid = -1;
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
    // A channel of its own (its own TCP connection) when `own` is set;
    // otherwise channels with equal arguments share one connection.
    std::shared_ptr<grpc::Channel> NewChannel(int own) const
    {
        grpc::ChannelArguments ca;
        ca.SetMaxReceiveMessageSize(-1);
        ca.SetMaxSendMessageSize(8 << 20);
        if (own > 0) {
            ca.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
            ca.SetInt("exec_bench.channel", own);
        }
        return grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), ca);
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

// VmRSS or VmHWM of `pid` in bytes, -1 when unreadable.
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

// Resets VmHWM to the current RSS (best effort: false when refused).
bool ResetPeak(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/clear_refs", (int)pid);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool ok = write(fd, "5", 1) == 1;
    close(fd);
    return ok;
}

// utime + stime of `pid` in clock ticks (fields 14 and 15 of
// /proc/PID/stat), all threads included.
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

double TicksToSeconds(unsigned long long t)
{
    return (double)t / (double)sysconf(_SC_CLK_TCK);
}

// CPU seconds (user + system) of this process so far.
double SelfCpuSeconds()
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
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
    double p50_us = 0, p99_us = 0;
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
    l.p99_us = at(0.99);
    return l;
}

// Runs every function `warmup` times, then `iters` times each, taking turns
// in blocks of kBlock; returns one latency distribution per function.
std::vector<Lat> Measure(const std::vector<std::function<void()>> &fns, int warmup, int iters)
{
    for (const auto &f : fns)
        for (int i = 0; i < warmup; i++)
            f();
    std::vector<std::vector<double>> ns(fns.size());
    for (int done = 0; done < iters; done += kBlock) {
        int n = std::min(kBlock, iters - done);
        for (size_t k = 0; k < fns.size(); k++) {
            for (int i = 0; i < n; i++) {
                auto t0 = Clock::now();
                fns[k]();
                ns[k].push_back(Nanos(t0, Clock::now()));
            }
        }
    }
    std::vector<Lat> out;
    for (auto &v : ns)
        out.push_back(Percentiles(std::move(v)));
    return out;
}

double Median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
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

std::string Rate(double bytes, double s)
{
    double bps = bytes / s;
    return Fmt("%.0f MB/s (%.2f GB/s)", bps / 1e6, bps / 1e9);
}

// Ratio of the workspaced time to the baseline time: how many times slower.
std::string Ratio(double ws, double base)
{
    return base > 0 ? Fmt("%.2fx", ws / base) : "-";
}

std::string Goal(bool met, const std::string &what)
{
    return (met ? "MET (" : "MISSED (") + what + ")";
}

std::string Size(uint64_t bytes)
{
    if (bytes % kGiB == 0)
        return Fmt("%llu GiB", (unsigned long long)(bytes / kGiB));
    return Fmt("%llu MiB", (unsigned long long)(bytes / kMiB));
}

void PrintTable()
{
    Row head = {"operation", "workspaced", "baseline", "baseline result", "ws/base time", "goal"};
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
        fprintf(stderr, "exec_bench: %s: FAILED: %s\n", name, ex.what());
        g_rows.push_back({Fmt("%s: FAILED", name), ex.what(), "-", "-", "-", "-"});
        g_failed = true;
    }
}

// ---- RPC helpers ----

std::string OpenWorkspace(v1::Workspaces::Stub *stub)
{
    v1::OpenRequest req;
    req.mutable_local_bash();
    // fs as well: the server asks for both capabilities before a command
    // runs in the workspace directory (and agents declare both anyway).
    req.mutable_capabilities()->mutable_fs();
    auto *shell = req.mutable_capabilities()->mutable_shell();
    shell->add_allowed_commands("true");
    shell->add_allowed_commands("head");
    v1::OpenResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(60));
    grpc::Status s = stub->Open(&ctx, req, &resp);
    if (!s.ok())
        Die("Open (local-bash, fs, shell [true, head]): %s %s: %s", CodeName(s.error_code()),
            Reason(s).c_str(), s.error_message().c_str());
    return resp.workspace().id();
}

void CloseWorkspace(v1::Workspaces::Stub *stub, const std::string &id)
{
    v1::CloseRequest req;
    req.set_workspace_id(id);
    v1::CloseResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(60));
    grpc::Status s = stub->Close(&ctx, req, &resp);
    if (!s.ok())
        fprintf(stderr, "exec_bench: Close: %s %s\n", CodeName(s.error_code()),
                s.error_message().c_str());
}

// One Run of `true` (argv form); fails unless it exited 0 with no output.
void RpcRunTrue(v1::Exec::Stub *exec, const v1::RunRequest &req)
{
    grpc::ClientContext ctx;
    ctx.set_deadline(In(60));
    v1::RunResponse resp;
    Check(exec->Run(&ctx, req, &resp), "Run true");
    const v1::Exited &x = resp.exited();
    if (x.cause() != v1::EXIT_CAUSE_EXITED || x.exit_code() != 0)
        Fail("Run true: cause %s, exit code %d, signal %d", v1::ExitCause_Name(x.cause()).c_str(),
             x.exit_code(), x.signal());
    if (!resp.stdout().empty() || !resp.stderr().empty())
        Fail("Run true: %zu bytes of stdout, %zu of stderr", resp.stdout().size(),
             resp.stderr().size());
}

v1::RunRequest TrueRequest(const std::string &id)
{
    v1::RunRequest req;
    req.set_workspace_id(id);
    req.mutable_process()->add_argv("true");
    return req;
}

struct StreamResult {
    uint64_t stdout_bytes = 0, stderr_bytes = 0, events = 0;
    v1::Exited exited;
};

// Start `head -c LEN /dev/zero` and read the stream to its end, counting
// the bytes of the stdout chunks (whose offsets must be contiguous).
StreamResult RpcStream(v1::Exec::Stub *exec, const std::string &id, uint64_t len,
                       uint64_t max_output_bytes)
{
    StreamResult r;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(600));
    auto s = exec->Start(&ctx);
    auto fail = [&](const std::string &msg) {
        ctx.TryCancel();
        s->Finish();
        throw BenchError(msg);
    };
    v1::StartRequest req;
    auto *start = req.mutable_start();
    start->set_workspace_id(id);
    auto *p = start->mutable_process();
    p->add_argv("head");
    p->add_argv("-c");
    p->add_argv(std::to_string(len));
    p->add_argv("/dev/zero");
    p->set_max_output_bytes(max_output_bytes);
    if (!s->Write(req)) {
        // The server ended the call at once: its status says why.
        Check(s->Finish(), "Start");
        Fail("Start: the stream closed with OK before any event");
    }
    v1::ProcessEvent ev;
    bool started = false, exited = false;
    while (!exited && s->Read(&ev)) {
        switch (ev.event_case()) {
        case v1::ProcessEvent::kStarted:
            started = true;
            break;
        case v1::ProcessEvent::kStdout:
            if (ev.stdout().offset() != r.stdout_bytes)
                fail(Fmt("Start: stdout chunk at offset %llu, expected %llu",
                         (unsigned long long)ev.stdout().offset(),
                         (unsigned long long)r.stdout_bytes));
            r.stdout_bytes += ev.stdout().data().size();
            r.events++;
            break;
        case v1::ProcessEvent::kStderr:
            r.stderr_bytes += ev.stderr().data().size();
            break;
        case v1::ProcessEvent::kGap:
            fail(Fmt("Start: gap of %llu bytes at offset %llu",
                     (unsigned long long)ev.gap().bytes_dropped(),
                     (unsigned long long)ev.gap().offset()));
            break;
        case v1::ProcessEvent::kExited:
            r.exited = ev.exited();
            exited = true;
            break;
        default:
            fail(Fmt("Start: unexpected event %d", (int)ev.event_case()));
        }
    }
    // Half-close only after `exited`: the end of the request stream must
    // not be taken for a cancel. Then the server ends the call.
    s->WritesDone();
    while (s->Read(&ev)) {
    }
    Check(s->Finish(), "Start");
    if (!started)
        Fail("Start: no `started` event");
    if (!exited)
        Fail("Start: the stream ended without `exited`");
    return r;
}

// ---- the benchmarks ----

struct Env {
    const Options &opt;
    Server &server;
    std::string state_dir;
    std::shared_ptr<grpc::Channel> channel;
    v1::Exec::Stub *exec;
    std::string ws_id;
};

void BenchRun(Env &e)
{
    auto health = grpc::health::v1::Health::NewStub(e.channel);
    auto health_check = [&] {
        grpc::ClientContext ctx;
        ctx.set_deadline(In(60));
        grpc::health::v1::HealthCheckRequest req;
        grpc::health::v1::HealthCheckResponse resp;
        Check(health->Check(&ctx, req, &resp), "Health.Check");
    };
    v1::RunRequest req = TrueRequest(e.ws_id);
    auto rpc_run = [&] { RpcRunTrue(e.exec, req); };
    // One call first, so that an unimplemented or refused Run fails fast.
    rpc_run();
    std::vector<Lat> l =
        Measure({rpc_run, RawTrue, RawTrueLikeServer, health_check}, e.opt.warmup, e.opt.iters);
    const Lat &run = l[0], &raw = l[1], &like = l[2], &hc = l[3];
    g_rows.push_back({"Health.Check p50 (gRPC floor)", Us(hc.p50_us), "-", "-", "-", "-"});
    g_rows.push_back({"Health.Check p99 (gRPC floor)", Us(hc.p99_us), "-", "-", "-", "-"});
    double delta = run.p50_us - raw.p50_us;
    g_rows.push_back(
        {"Run true p50", Us(run.p50_us), "posix_spawn+waitpid /bin/true", Us(raw.p50_us),
         Ratio(run.p50_us, raw.p50_us),
         Goal(delta <= kGoalRunDeltaUs, Fmt("%+.2f ms, goal <= +1 ms", delta / 1000))});
    g_rows.push_back({"Run true p99", Us(run.p99_us), "posix_spawn+waitpid /bin/true",
                      Us(raw.p99_us), Ratio(run.p99_us, raw.p99_us),
                      Fmt("(%+.2f ms)", (run.p99_us - raw.p99_us) / 1000)});
    const char *like_name = "posix_spawn(setsid, /dev/null, 2 pipes)+read EOF+wait4";
    g_rows.push_back({"Run true p50", Us(run.p50_us), like_name, Us(like.p50_us),
                      Ratio(run.p50_us, like.p50_us),
                      Fmt("(%+.2f ms)", (run.p50_us - like.p50_us) / 1000)});
    g_rows.push_back({"Run true p99", Us(run.p99_us), like_name, Us(like.p99_us),
                      Ratio(run.p99_us, like.p99_us),
                      Fmt("(%+.2f ms)", (run.p99_us - like.p99_us) / 1000)});
    g_rows.push_back({"Run true p50 minus gRPC floor p50", Us(run.p50_us - hc.p50_us),
                      "posix_spawn+waitpid /bin/true", Us(raw.p50_us),
                      Ratio(run.p50_us - hc.p50_us, raw.p50_us), "-"});

    // The same one at a time after an idle pause, as an agent issues
    // commands: whatever the kernel or the server lets go cold between
    // calls (caches, CPU idle states, lazily synchronised kernel state) is
    // paid on every call. Each side is timed alone after the pause, the
    // order alternating.
    if (e.opt.idle_iters <= 0)
        return;
    std::vector<double> ws_ns, raw_ns;
    auto pause = std::chrono::milliseconds(e.opt.idle_ms);
    for (int i = 0; i < e.opt.idle_iters; i++) {
        for (int side = 0; side < 2; side++) {
            bool ws_side = (side == 0) == (i % 2 == 0);
            std::this_thread::sleep_for(pause);
            auto a = Clock::now();
            if (ws_side)
                rpc_run();
            else
                RawTrue();
            (ws_side ? ws_ns : raw_ns).push_back(Nanos(a, Clock::now()));
        }
    }
    Lat iw = Percentiles(ws_ns), ir = Percentiles(raw_ns);
    std::string op = Fmt("Run true after %d ms idle", e.opt.idle_ms);
    std::string base = Fmt("posix_spawn+waitpid after %d ms idle", e.opt.idle_ms);
    double idelta = iw.p50_us - ir.p50_us;
    g_rows.push_back(
        {op + " p50", Us(iw.p50_us), base, Us(ir.p50_us), Ratio(iw.p50_us, ir.p50_us),
         Goal(idelta <= kGoalRunDeltaUs, Fmt("%+.2f ms, goal <= +1 ms", idelta / 1000))});
    g_rows.push_back({op + " p99", Us(iw.p99_us), base, Us(ir.p99_us), Ratio(iw.p99_us, ir.p99_us),
                      Fmt("(%+.2f ms)", (iw.p99_us - ir.p99_us) / 1000)});
}

// Run of `true` in local-bash as the workspace's own uid (the clone3
// spawn that switches identity) against the same on a second server that
// runs commands as its own uid (workspace uids off, --allow-root-commands:
// the spawn before the switch), the two servers measured in turns.
void BenchUids(Env &e, const std::string &state_dir)
{
    struct stat st;
    std::string dir = e.state_dir + "/workspaces/" + e.ws_id;
    if (stat(dir.c_str(), &st) != 0 || st.st_uid == 0)
        Fail("the server under test gave %s no uid of its own: workspace uids are off",
             dir.c_str());
    Server off(e.opt.server, state_dir, e.opt.server_threads,
               {"--workspace-uids", "off", "--allow-root-commands"});
    auto channel = off.NewChannel(0);
    auto workspaces = v1::Workspaces::NewStub(channel);
    auto exec = v1::Exec::NewStub(channel);
    std::string id = OpenWorkspace(workspaces.get());
    v1::RunRequest on_req = TrueRequest(e.ws_id), off_req = TrueRequest(id);
    auto run_on = [&] { RpcRunTrue(e.exec, on_req); };
    auto run_off = [&] { RpcRunTrue(exec.get(), off_req); };
    run_on();
    run_off();
    std::vector<Lat> l = Measure({run_on, run_off}, e.opt.warmup, e.opt.iters);
    const Lat &on = l[0], &was = l[1];
    const char *base = "Run true as the server's uid (uids off)";
    g_rows.push_back({"Run true p50 as the workspace's uid", Us(on.p50_us), base, Us(was.p50_us),
                      Ratio(on.p50_us, was.p50_us),
                      Goal(on.p50_us <= was.p50_us * 1.05, "goal: within 5%")});
    g_rows.push_back({"Run true p99 as the workspace's uid", Us(on.p99_us), base, Us(was.p99_us),
                      Ratio(on.p99_us, was.p99_us),
                      Fmt("(%+.2f ms)", (on.p99_us - was.p99_us) / 1000)});
    CloseWorkspace(workspaces.get(), id);
}

void BenchStream(Env &e)
{
    uint64_t len = (uint64_t)e.opt.stream_mib * kMiB;
    std::string label = Size(len);
    pid_t pid = e.server.pid();
    std::vector<char> buf(kReadBuf);
    // ProcessConfig.max_output_bytes (the replay ring): 0 is the server's
    // default.
    uint64_t ring = (uint64_t)e.opt.stream_ring_kib * 1024;

    // Warm-up: a small stream each way (page tables, the head binary).
    StreamResult w = RpcStream(e.exec, e.ws_id, 4 * kMiB, ring);
    if (w.stdout_bytes != 4 * kMiB)
        Fail("Start warm-up: %llu of %zu bytes", (unsigned long long)w.stdout_bytes, 4 * kMiB);
    RawStream(4 * kMiB, buf.data(), buf.size());

    std::vector<double> ws_t, raw_t;
    unsigned long long server_ticks = 0;
    double client_cpu = 0, raw_cpu = 0;
    uint64_t events = 0;
    bool counts_ok = true;
    std::string counts;
    long long rss_before = ProcStatusBytes(pid, "VmRSS");
    bool hwm_ok = ResetPeak(pid);
    long long sampled = 0;
    {
        RssSampler sampler(pid);
        for (int i = 0; i < e.opt.stream_runs; i++) {
            // Alternate which side goes first, against drift.
            for (int side = 0; side < 2; side++) {
                bool ws_side = (side == 0) == (i % 2 == 0);
                if (ws_side) {
                    unsigned long long t0 = CpuTicks(pid);
                    double c0 = SelfCpuSeconds();
                    auto a = Clock::now();
                    StreamResult r = RpcStream(e.exec, e.ws_id, len, ring);
                    ws_t.push_back(Seconds(a, Clock::now()));
                    server_ticks += CpuTicks(pid) - t0;
                    client_cpu += SelfCpuSeconds() - c0;
                    events += r.events;
                    const v1::Exited &x = r.exited;
                    bool ok = r.stdout_bytes == len && x.stdout().bytes_total() == len &&
                              x.stdout().bytes_delivered() == len && !x.stdout().truncated() &&
                              r.stderr_bytes == 0 && x.cause() == v1::EXIT_CAUSE_EXITED &&
                              x.exit_code() == 0;
                    if (!ok) {
                        counts_ok = false;
                        fprintf(stderr,
                                "exec_bench: Start run %d: %llu bytes in stdout events, "
                                "exited.stdout bytes_total %llu delivered %llu truncated %d, "
                                "stderr %llu, cause %s, exit code %d\n",
                                i, (unsigned long long)r.stdout_bytes,
                                (unsigned long long)x.stdout().bytes_total(),
                                (unsigned long long)x.stdout().bytes_delivered(),
                                (int)x.stdout().truncated(), (unsigned long long)r.stderr_bytes,
                                v1::ExitCause_Name(x.cause()).c_str(), x.exit_code());
                    }
                    counts =
                        Fmt("events %llu B, bytes_total %llu B", (unsigned long long)r.stdout_bytes,
                            (unsigned long long)x.stdout().bytes_total());
                } else {
                    double c0 = SelfCpuSeconds();
                    auto a = Clock::now();
                    uint64_t got = RawStream(len, buf.data(), buf.size());
                    raw_t.push_back(Seconds(a, Clock::now()));
                    raw_cpu += SelfCpuSeconds() - c0;
                    if (got != len)
                        Die("head | reader: %llu of %llu bytes", (unsigned long long)got,
                            (unsigned long long)len);
                }
            }
        }
        sampled = sampler.peak();
    }
    long long hwm = ProcStatusBytes(pid, "VmHWM");
    double ws = Median(ws_t), raw = Median(raw_t);
    double ws_bps = (double)len / ws, raw_bps = (double)len / raw;
    std::string op =
        Fmt("Start head -c %s /dev/zero (median of %d)", label.c_str(), e.opt.stream_runs);
    if (ring)
        op += Fmt(" [max_output_bytes %llu KiB]", (unsigned long long)(ring / 1024));
    const char *base_name = "head -c N /dev/zero | bench read(1 MiB)";
    g_rows.push_back({op, Rate((double)len, ws), base_name, Rate((double)len, raw), Ratio(ws, raw),
                      Goal(ws_bps >= kGoalStreamBps, ">= 1 GB/s")});
    g_rows.push_back({op, Rate((double)len, ws), base_name, Rate((double)len, raw), Ratio(ws, raw),
                      Goal(ws_bps >= kGoalStreamVsPipe * raw_bps,
                           Fmt(">= half the pipe: %.0f%%", 100 * ws_bps / raw_bps))});
    if (!counts_ok)
        g_failed = true;
    g_rows.push_back({"Start byte counts (last run)", counts, "expected",
                      Fmt("%llu B", (unsigned long long)len), "-",
                      counts_ok ? "ok (all runs)" : "WRONG (see stderr)"});
    double runs = (double)e.opt.stream_runs;
    double gib = (double)len / (double)kGiB * runs;
    g_rows.push_back({"Start stdout events per run",
                      Fmt("%.0f (avg %.1f KiB)", (double)events / runs,
                          events ? (double)len * runs / (double)events / 1024 : 0.0),
                      "-", "-", "-", "-"});
    double server_cpu = TicksToSeconds(server_ticks);
    g_rows.push_back({"CPU per streamed GiB",
                      Fmt("server %.2f s (%.0f ticks), client %.2f s", server_cpu / gib,
                          (double)server_ticks / gib, client_cpu / gib),
                      "pipe reader (bench) CPU per GiB", Fmt("%.2f s", raw_cpu / gib),
                      Ratio(server_cpu / gib, raw_cpu / gib), "-"});
    double wall = 0;
    for (double x : ws_t)
        wall += x;
    g_rows.push_back({"server CPU / wall while streaming", Fmt("%.0f%%", 100 * server_cpu / wall),
                      "-", "-", "-", "-"});
    auto mib = [](long long b) { return Fmt("%.1f MiB", (double)b / kMiB); };
    g_rows.push_back({"server RSS before streaming", mib(rss_before), "-", "-", "-", "-"});
    g_rows.push_back(
        {hwm_ok ? "server peak RSS while streaming (VmHWM)" : "server peak RSS (VmHWM, not reset)",
         mib(hwm), "peak VmRSS sampled every 1 ms", mib(sampled), "-", "-"});
}

// `threads` threads, each doing `each` calls of fn(thread index) after a
// common start; returns the wall time and fills `ns` with every latency.
// Stops early and throws the first BenchError any thread met.
double Concurrent(int threads, int each, const std::function<void(int)> &fn,
                  std::vector<double> *ns)
{
    std::mutex mu;
    std::condition_variable cv;
    bool go = false;
    int ready = 0;
    std::string error;
    std::atomic<bool> stop{false};
    std::vector<std::vector<double>> per(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; t++) {
        pool.emplace_back([&, t] {
            {
                std::unique_lock<std::mutex> lk(mu);
                ready++;
                cv.notify_all();
                cv.wait(lk, [&] { return go; });
            }
            per[t].reserve(each);
            for (int i = 0; i < each && !stop; i++) {
                auto a = Clock::now();
                try {
                    fn(t);
                } catch (const BenchError &ex) {
                    std::lock_guard<std::mutex> lk(mu);
                    if (error.empty())
                        error = ex.what();
                    stop = true;
                    return;
                }
                per[t].push_back(Nanos(a, Clock::now()));
            }
        });
    }
    Clock::time_point t0;
    {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return ready == threads; });
        go = true;
        t0 = Clock::now();
        cv.notify_all();
    }
    for (auto &th : pool)
        th.join();
    double wall = Seconds(t0, Clock::now());
    if (!error.empty())
        throw BenchError(error);
    for (auto &v : per)
        ns->insert(ns->end(), v.begin(), v.end());
    return wall;
}

void BenchConcurrent(Env &e)
{
    int c = e.opt.conc, each = e.opt.conc_each;
    int nch = std::max(1, e.opt.channels);
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    std::vector<std::unique_ptr<v1::Exec::Stub>> stubs;
    for (int i = 0; i < nch; i++) {
        channels.push_back(nch == 1 ? e.channel : e.server.NewChannel(i + 1));
        stubs.push_back(v1::Exec::NewStub(channels.back()));
    }
    v1::RunRequest req = TrueRequest(e.ws_id);
    auto rpc = [&](int t) { RpcRunTrue(stubs[(size_t)t % stubs.size()].get(), req); };
    auto raw = [](int) { RawTrue(); };

    // Warm-up round: connections up, threads and the server's pools warm.
    std::vector<double> scratch;
    Concurrent(c, 2, rpc, &scratch);
    Concurrent(c, 2, raw, &scratch);

    std::vector<double> ws_ns, raw_ns;
    double ws_wall = 0, raw_wall = 0;
    unsigned long long ticks = 0;
    double client_cpu = 0;
    pid_t pid = e.server.pid();
    for (int r = 0; r < e.opt.conc_rounds; r++) {
        for (int side = 0; side < 2; side++) {
            if ((side == 0) == (r % 2 == 0)) {
                unsigned long long t0 = CpuTicks(pid);
                double c0 = SelfCpuSeconds();
                ws_wall += Concurrent(c, each, rpc, &ws_ns);
                ticks += CpuTicks(pid) - t0;
                client_cpu += SelfCpuSeconds() - c0;
            } else {
                raw_wall += Concurrent(c, each, raw, &raw_ns);
            }
        }
    }
    double cmds = (double)c * each * e.opt.conc_rounds;
    double ws_rate = cmds / ws_wall, raw_rate = cmds / raw_wall;
    Lat ws = Percentiles(ws_ns), rl = Percentiles(raw_ns);
    std::string op = Fmt("%d concurrent Run true", c);
    std::string base = Fmt("%d threads posix_spawn+waitpid", c);
    std::string shape = Fmt("%d x %d x %d rounds, %d channel%s", c, each, e.opt.conc_rounds, nch,
                            nch == 1 ? "" : "s");
    g_rows.push_back({op + ": commands/s", Fmt("%.0f /s", ws_rate), base, Fmt("%.0f /s", raw_rate),
                      Ratio(raw_rate, ws_rate), shape});
    g_rows.push_back({op + ": latency p50", Us(ws.p50_us), base, Us(rl.p50_us),
                      Ratio(ws.p50_us, rl.p50_us), "-"});
    g_rows.push_back({op + ": latency p99", Us(ws.p99_us), base, Us(rl.p99_us),
                      Ratio(ws.p99_us, rl.p99_us), "-"});
    g_rows.push_back({op + ": CPU per Run",
                      Fmt("server %s, client %s", Us(TicksToSeconds(ticks) / cmds * 1e6).c_str(),
                          Us(client_cpu / cmds * 1e6).c_str()),
                      "-", "-", "-", "-"});
}

void Usage(FILE *f)
{
    fprintf(
        f,
        "usage: exec_bench --server PATH [options]\n"
        "  --server PATH        the workspaced binary (required)\n"
        "  --server-threads N   pass --threads N to the server [its default]\n"
        "  --tmp DIR            where the server's state directory goes [$TMPDIR or /tmp]\n"
        "  --iters N            timed Runs of true (and of each baseline) [2000]\n"
        "  --warmup N           untimed iterations of each before [200]\n"
        "  --idle-iters N       Runs (and raw spawns) timed one at a time after a pause;\n"
        "                       0: none [100]\n"
        "  --idle-ms N          the pause [50]\n"
        "  --stream-mib N       bytes streamed by head -c, in MiB [1024]\n"
        "  --stream-runs N      streams of each side (median reported) [3]\n"
        "  --stream-ring-kib N  Start's max_output_bytes (replay ring) in KiB;\n"
        "                       0: the server's default [0]\n"
        "  --concurrency N      threads running Runs at once [100]\n"
        "  --conc-each N        Runs per thread per round [20]\n"
        "  --conc-rounds N      rounds of each side, alternated [2]\n"
        "  --channels N         gRPC channels (connections) the threads share [1]\n"
        "  --only LIST          parts to run, comma-separated: run,uids,stream,concurrent [all]\n"
        "  --keep               keep the state directory\n");
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
            {"--idle-iters", &o.idle_iters, 0, 1000000},
            {"--idle-ms", &o.idle_ms, 1, 10000},
            {"--stream-mib", &o.stream_mib, 5, 65536},
            {"--stream-runs", &o.stream_runs, 1, 1000},
            {"--stream-ring-kib", &o.stream_ring_kib, 0, 1024 * 1024},
            {"--concurrency", &o.conc, 1, 1000},
            {"--conc-each", &o.conc_each, 1, 100000},
            {"--conc-rounds", &o.conc_rounds, 1, 1000},
            {"--channels", &o.channels, 1, 1000},
            {"--server-threads", &o.server_threads, 1, 1024},
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

    std::string tmpl = opt.tmp + "/exec_bench.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    // Searchable by others: workspace uids reach their directories under
    // the state directory made here.
    if (!mkdtemp(buf.data()) || chmod(buf.data(), 0711) != 0)
        Die("mkdtemp %s: %s", tmpl.c_str(), strerror(errno));
    std::string base = buf.data();
    if (!opt.keep)
        g_base = base;
    std::string state = base + "/state";

    struct utsname u;
    uname(&u);
    auto start = Clock::now();
    {
        Server server(opt.server, state, opt.server_threads);
        auto channel = server.NewChannel(0);
        auto workspaces = v1::Workspaces::NewStub(channel);
        auto exec = v1::Exec::NewStub(channel);
        Env e{opt, server, state, channel, exec.get(), ""};
        e.ws_id = OpenWorkspace(workspaces.get());

        printf("exec_bench: %ld CPUs, Linux %s, server pid %d, Run iters %d (+%d warm-up), "
               "%d after %d ms idle, stream %d MiB x %d, concurrency %d x %d x %d rounds, "
               "%d channel(s)\n",
               sysconf(_SC_NPROCESSORS_ONLN), u.release, (int)server.pid(), opt.iters, opt.warmup,
               opt.idle_iters, opt.idle_ms, opt.stream_mib, opt.stream_runs, opt.conc,
               opt.conc_each, opt.conc_rounds, opt.channels);
        fflush(stdout);

        auto wanted = [&](const char *part) {
            std::string list = "," + opt.only + ",";
            return list.find(std::string(",") + part + ",") != std::string::npos;
        };
        if (wanted("run")) {
            Part("Run true", [&] { BenchRun(e); });
            fprintf(stderr, "exec_bench: Run latencies done at %.1f s\n",
                    Seconds(start, Clock::now()));
        }
        if (wanted("uids")) {
            Part("workspace uids", [&] { BenchUids(e, base + "/state-uids-off"); });
            fprintf(stderr, "exec_bench: uid switch done at %.1f s\n",
                    Seconds(start, Clock::now()));
        }
        if (wanted("stream")) {
            Part("Start stream", [&] { BenchStream(e); });
            fprintf(stderr, "exec_bench: streaming done at %.1f s\n", Seconds(start, Clock::now()));
        }
        if (wanted("concurrent")) {
            Part("concurrent Run", [&] { BenchConcurrent(e); });
            fprintf(stderr, "exec_bench: concurrent Runs done at %.1f s\n",
                    Seconds(start, Clock::now()));
        }

        // Finished commands the server still holds resources for show up
        // here (the workspace is still open).
        g_rows.push_back({"server open fds at the end", std::to_string(CountFds(server.pid())), "-",
                          "-", "-", "-"});
        CloseWorkspace(workspaces.get(), e.ws_id);
    }
    printf("\n");
    PrintTable();
    printf("\nws/base time: workspaced time over baseline time (for throughput, baseline rate "
           "over workspaced rate); 1 GB/s = 1e9 B/s; (+x ms): workspaced minus baseline. "
           "Total %.1f s.\n",
           Seconds(start, Clock::now()));
    if (!opt.keep)
        RemoveTree(base);
    else
        printf("state kept in %s\n", base.c_str());
    return g_failed ? 1 : 0;
}
