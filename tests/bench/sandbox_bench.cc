// local-sandbox benchmark: workspaced's Run and Start in a local-sandbox
// workspace against the very same bubblewrap command line spawned directly
// by the bench process, and against local-bash, in the same run, as ratios.
//
//   sandbox_bench --server PATH/TO/workspaced [options]   (--help lists them)
//
// It starts its own server on a loopback port with a fresh state directory,
// opens a local-sandbox workspace in each exec mode (per-command: a
// bubblewrap per command; agent: one box per workspace, commands through
// its agent) and one local-bash workspace (capabilities fs, and shell
// allowing `true` and `head`), and prints one table:
//   * run:    Run of `true` in the local-sandbox workspace vs, in the bench
//             process, the bwrap command line the server builds for it
//             (ws_sandbox_wrap, linked from the server's own library, then
//             ws_spawn and wait) vs posix_spawn+waitpid of /bin/true; plus
//             Run of `true` in the local-bash workspace and an empty
//             Health.Check (latency p50/p99, interleaved in blocks);
//             Run of `true` in agent mode against all of those;
//   * stream: Start of `head -c N /dev/zero` in the local-sandbox workspace
//             (both modes) vs the same in the local-bash workspace
//             (throughput);
//   * agent:  the first command after Open in agent mode (which starts the
//             box) vs per-command mode, and 100 concurrent commands in one
//             box, each with its exact output.
// Exit status: 0 when every measurement ran and every check passed (goals
// missed are reported, not failures), 1 otherwise. A part that cannot run
// (the local-sandbox Open refused because bwrap cannot run here, an RPC
// error, a wrong answer) is reported as FAILED and the other part still
// runs.
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
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
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

extern "C" {
#include "server/posix/spawn.h"
#include "server/providers/probe.h"
#include "server/providers/sandbox.h"
}

extern char **environ;

namespace
{

namespace v1 = workspace::v1;
using Clock = std::chrono::steady_clock;

constexpr size_t kMiB = 1024 * 1024;
constexpr uint64_t kGiB = 1024ull * 1024 * 1024;
// Interleaving block: each side runs this many iterations in turn, so that
// noise from the rest of the machine lands on all sides alike.
constexpr int kBlock = 50;
// The raw baseline's binary (on this system /bin is /usr/bin).
constexpr const char *kTrue = "/bin/true";
// What the server's guard resolves `true` to with its default PATH, and so
// the command the direct sandbox runs.
constexpr const char *kSandboxTrue = "/usr/bin/true";
// The environment the server gives a local-sandbox command (the guard's
// PATH, HOME and LANG with the server's defaults and no pass_env).
const char *const kSandboxEnv[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace",
                                   "LANG=C.UTF-8", nullptr};
// The goals stated for the local-sandbox provider.
constexpr double kGoalRunDeltaUs = 1000.0; // Run p50 within 1 ms of direct bwrap
constexpr double kGoalStreamVsBash = 0.9;  // streamed output within 10% of local-bash
// The goals of agent mode: Run p50 under 2 ms and within 1 ms of
// local-bash, streaming within 15% of local-bash.
constexpr double kGoalAgentRunUs = 2000.0;
constexpr double kGoalAgentVsBashUs = 1000.0;
constexpr double kGoalAgentStreamVsBash = 0.85;
constexpr int kConcurrent = 100;
// Reference figures measured earlier on this hardware (not re-measured):
// a direct `bwrap --unshare-all ... /bin/true`, and Anthropic's
// sandbox-runtime per command through its library and through its CLI.
constexpr double kRefBwrapUs = 3900.0;
constexpr double kRefSrtLibUs = 36000.0;
constexpr double kRefSrtCliUs = 300000.0;

struct Options {
    std::string server;
    std::string tmp;
    int iters = 1000;
    int warmup = 100;
    int stream_mib = 1024;
    int stream_runs = 3;
    int server_threads = 0; // 0: the server's default
    // A fifth side: the direct bwrap with the server's default caps (a
    // cgroup v1 group the spawning thread enters and leaves), as the
    // server does for a workspace.
    bool direct_limits = false;
    bool keep = false;
    // Parts to run: any of "run", "stream", "agent", comma-separated.
    std::string only = "run,stream,agent";
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
    fputs("sandbox_bench: ", stderr);
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

// ---- baselines: processes spawned by the bench itself ----

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

// Reads a non-blocking pipe until it would block; false at EOF. Counts the
// bytes into *total.
bool DrainNonBlocking(int fd, uint64_t *total)
{
    char buf[4096];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n > 0) {
            *total += (uint64_t)n;
            continue;
        }
        if (n == 0)
            return false;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN)
            return true;
        Fail("read: %s", strerror(errno));
    }
}

// What the server does for one local-sandbox command, minus gRPC and its
// bookkeeping, done in-process with the server's own code: the sandbox's
// command line and fds from ws_sandbox_wrap (so the bwrap options, the
// seccomp program, init and the status pipe are exactly the server's),
// ws_spawn with them (stdin /dev/null, stdout and stderr on pipes, its own
// session, fds 3-5 kept), then both pipes drained to EOF, the leader
// reaped, and the command's own exit read from init's status line.
class DirectSandbox
{
  public:
    DirectSandbox(const std::string &dir, bool limits) : dir_(dir), limits_(limits)
    {
        // Its own /etc snapshot next to the workspace, as the server makes
        // one in its state directory: the same single /etc bind.
        int r = ws_sandbox_new((dir + "-sandbox").c_str(), &sb_);
        if (r < 0)
            Die("ws_sandbox_new: %s", strerror(-r));
        dir_fd_ = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir_fd_ < 0)
            Die("open %s: %s", dir.c_str(), strerror(errno));
    }
    ~DirectSandbox()
    {
        if (limits_)
            ws_sandbox_forget(sb_, kGroupId);
        ws_sandbox_free(sb_);
        close(dir_fd_);
    }

    // bwrap's command line for `true`, for the report.
    std::vector<std::string> CommandLine()
    {
        struct ws_proc_wrapper w = {};
        std::vector<std::string> out;
        int r = Wrap(&w);
        if (r < 0)
            Fail("ws_sandbox_wrap: %s", strerror(-r));
        for (const char *const *a = w.argv; *a; a++)
            out.push_back(*a);
        ws_sandbox_spawned(&w);
        ws_sandbox_discard(&w);
        return out;
    }

    // One sandboxed run of `true`; fails unless it exited 0 with no output.
    void RunTrue()
    {
        struct ws_proc_wrapper w = {};
        int r = Wrap(&w);
        if (r < 0)
            Fail("ws_sandbox_wrap: %s", strerror(-r));
        struct ws_spawn_opts o = {};
        o.argv = w.argv;
        o.envp = kSandboxEnv;
        o.cwd_fd = dir_fd_;
        o.stdin_mode = WS_SPAWN_STDIN_NULL;
        o.pty_noctty = w.pty_noctty;
        o.keep_fds = w.keep_fds;
        o.n_keep_fds = w.n_keep_fds;
        struct ws_child *c = nullptr;
        r = w.enter ? w.enter(w.arg) : 0;
        if (r == 0) {
            r = ws_spawn(&o, &c);
            if (w.leave)
                w.leave(w.arg);
        }
        ws_sandbox_spawned(&w);
        if (r < 0) {
            ws_sandbox_discard(&w);
            Fail("spawn of bwrap: %s", strerror(-r));
        }

        // Both pipes to EOF and the leader's exit, whichever comes first
        // (bwrap's status is read only once the pipes are drained).
        uint64_t out_bytes = 0, err_bytes = 0;
        bool out_open = true, err_open = true, exited = false;
        std::string error;
        while (error.empty() && (out_open || err_open || !exited)) {
            struct pollfd p[3];
            int n = 0, io = -1, ie = -1, ip = -1;
            if (out_open) {
                io = n;
                p[n++] = {ws_child_stdout_fd(c), POLLIN, 0};
            }
            if (err_open) {
                ie = n;
                p[n++] = {ws_child_stderr_fd(c), POLLIN, 0};
            }
            if (!exited) {
                ip = n;
                p[n++] = {ws_child_pidfd(c), POLLIN, 0};
            }
            int pr = poll(p, (nfds_t)n, 60000);
            if (pr == 0)
                error = "no exit after 60 s";
            if (pr < 0 && errno != EINTR)
                error = Fmt("poll: %s", strerror(errno));
            if (pr <= 0)
                continue;
            try {
                if (io >= 0 && p[io].revents)
                    out_open = DrainNonBlocking(p[io].fd, &out_bytes);
                if (ie >= 0 && p[ie].revents)
                    err_open = DrainNonBlocking(p[ie].fd, &err_bytes);
            } catch (const BenchError &ex) {
                error = ex.what();
            }
            if (ip >= 0 && p[ip].revents)
                exited = true;
        }
        struct ws_child_exit ex = {};
        enum ws_cause cause = WS_CAUSE_NONE;
        if (error.empty()) {
            r = ws_child_try_reap(c, &ex);
            if (r < 0)
                error = Fmt("reap of bwrap: %s", strerror(-r));
            else if (w.exited)
                w.exited(w.arg, &ex, &cause);
        }
        ws_sandbox_discard(&w);
        ws_child_free(c);
        if (!error.empty())
            Fail("direct bwrap: %s", error.c_str());
        if (ex.signaled || ex.exit_code != 0)
            Fail("direct bwrap true: exit code %d, signal %d", ex.exit_code, ex.signal);
        if (out_bytes || err_bytes)
            Fail("direct bwrap true: %llu bytes of stdout, %llu of stderr (bwrap or init "
                 "complained?)",
                 (unsigned long long)out_bytes, (unsigned long long)err_bytes);
    }

  private:
    static constexpr const char *kGroupId = "sandbox_bench";

    int Wrap(struct ws_proc_wrapper *w)
    {
        static const char *const argv[] = {kSandboxTrue, nullptr};
        struct ws_sandbox_spec spec = {};
        // No workspace id: no resource group, unless asked for.
        if (limits_) {
            spec.workspace_id = kGroupId;
            // The server's defaults for a workspace without caps
            // (services.c): 512 processes, 2048 MiB.
            spec.limits.pids_max = 512;
            spec.limits.memory_bytes = 2048ull << 20;
        }
        spec.workspace_dir = dir_.c_str();
        spec.cwd = ".";
        spec.argv = argv;
        return ws_sandbox_wrap(sb_, &spec, w);
    }

    struct ws_sandbox *sb_ = nullptr;
    std::string dir_;
    int dir_fd_ = -1;
    bool limits_;
};

// ---- the server ----

// The server under test, started as exec_bench does (stdout is read for
// the listening line, stderr goes to a file).
class Server
{
  public:
    Server(const std::string &binary, const std::string &state_dir, int threads)
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
    std::shared_ptr<grpc::Channel> NewChannel() const
    {
        grpc::ChannelArguments ca;
        ca.SetMaxReceiveMessageSize(-1);
        ca.SetMaxSendMessageSize(8 << 20);
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

// ---- CPU readings ----

// CPU time used so far, in seconds: `self` by the process (all threads),
// `children` by the children it reaped (and, through them, theirs).
struct Cpu {
    double self = 0, children = 0;
    Cpu operator-(const Cpu &o) const
    {
        return {self - o.self, children - o.children};
    }
    Cpu &operator+=(const Cpu &o)
    {
        self += o.self;
        children += o.children;
        return *this;
    }
};

// utime + stime and cutime + cstime of `pid` (fields 14-17 of
// /proc/PID/stat), clock-tick resolution.
Cpu ProcCpu(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return {};
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    long long cut = 0, cst = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld", &ut,
                     &st, &cut, &cst) != 4)
        return {};
    double tick = (double)sysconf(_SC_CLK_TCK);
    return {(double)(ut + st) / tick, (double)(cut + cst) / tick};
}

double RusageSeconds(int who)
{
    struct rusage ru;
    getrusage(who, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// This process's CPU, microsecond resolution.
Cpu SelfCpu()
{
    return {RusageSeconds(RUSAGE_SELF), RusageSeconds(RUSAGE_CHILDREN)};
}

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

// One side of an interleaved measurement: what to run, and whose CPU to
// charge to it between blocks (the server's, or the bench's).
struct Side {
    std::function<void()> fn;
    pid_t cpu_of = 0; // 0: this process
};

struct SideResult {
    Lat lat;
    Cpu cpu; // summed over the timed iterations' blocks
};

// Runs every side `warmup` times, then `iters` times each, taking turns in
// blocks of kBlock; returns each side's latency distribution and the CPU
// charged to it (read between blocks, outside the timed calls).
std::vector<SideResult> Measure(const std::vector<Side> &sides, int warmup, int iters)
{
    for (const auto &s : sides)
        for (int i = 0; i < warmup; i++)
            s.fn();
    std::vector<std::vector<double>> ns(sides.size());
    std::vector<SideResult> out(sides.size());
    for (int done = 0; done < iters; done += kBlock) {
        int n = std::min(kBlock, iters - done);
        for (size_t k = 0; k < sides.size(); k++) {
            pid_t pid = sides[k].cpu_of;
            Cpu c0 = pid ? ProcCpu(pid) : SelfCpu();
            for (int i = 0; i < n; i++) {
                auto t0 = Clock::now();
                sides[k].fn();
                ns[k].push_back(Nanos(t0, Clock::now()));
            }
            out[k].cpu += (pid ? ProcCpu(pid) : SelfCpu()) - c0;
        }
    }
    for (size_t k = 0; k < sides.size(); k++)
        out[k].lat = Percentiles(std::move(ns[k]));
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
        fprintf(stderr, "sandbox_bench: %s: FAILED: %s\n", name, ex.what());
        g_rows.push_back({Fmt("%s: FAILED", name), ex.what(), "-", "-", "-", "-"});
        g_failed = true;
    }
}

// ---- RPC helpers ----

// Opens a workspace of `provider` ("local-sandbox" or "local-bash") with
// the fs capability and shell allowing true and head; "" and *why on
// failure.
std::string OpenWorkspace(v1::Workspaces::Stub *stub, const std::string &provider, std::string *why,
                          v1::ExecMode mode = v1::EXEC_MODE_PER_COMMAND)
{
    v1::OpenRequest req;
    if (provider == "local-sandbox")
        req.mutable_local_sandbox()->set_exec_mode(mode);
    else
        req.mutable_local_bash();
    req.mutable_capabilities()->mutable_fs();
    auto *shell = req.mutable_capabilities()->mutable_shell();
    shell->add_allowed_commands("true");
    shell->add_allowed_commands("head");
    v1::OpenResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(60));
    grpc::Status s = stub->Open(&ctx, req, &resp);
    if (!s.ok()) {
        *why = Fmt("Open (%s, fs, shell [true, head]): %s %s: %s", provider.c_str(),
                   CodeName(s.error_code()), Reason(s).c_str(), s.error_message().c_str());
        return "";
    }
    return resp.workspace().id();
}

void CloseWorkspace(v1::Workspaces::Stub *stub, const std::string &id)
{
    if (id.empty())
        return;
    v1::CloseRequest req;
    req.set_workspace_id(id);
    v1::CloseResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(60));
    grpc::Status s = stub->Close(&ctx, req, &resp);
    if (!s.ok())
        fprintf(stderr, "sandbox_bench: Close: %s %s\n", CodeName(s.error_code()),
                s.error_message().c_str());
}

// One Run of `true` (argv form); fails unless it exited 0 with no output.
void RpcRunTrue(v1::Exec::Stub *exec, const v1::RunRequest &req, const char *what)
{
    grpc::ClientContext ctx;
    ctx.set_deadline(In(60));
    v1::RunResponse resp;
    Check(exec->Run(&ctx, req, &resp), what);
    const v1::Exited &x = resp.exited();
    if (x.cause() != v1::EXIT_CAUSE_EXITED || x.exit_code() != 0)
        Fail("%s: cause %s, exit code %d, signal %d", what, v1::ExitCause_Name(x.cause()).c_str(),
             x.exit_code(), x.signal());
    if (!resp.stdout().empty() || !resp.stderr().empty())
        Fail("%s: %zu bytes of stdout, %zu of stderr (%.200s)", what, resp.stdout().size(),
             resp.stderr().size(), resp.stderr().c_str());
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
StreamResult RpcStream(v1::Exec::Stub *exec, const std::string &id, uint64_t len)
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
    std::shared_ptr<grpc::Channel> channel;
    v1::Exec::Stub *exec;
    std::string sandbox_id; // "" when the local-sandbox Open failed
    std::string sandbox_why;
    std::string bash_id;
    DirectSandbox &direct;
    DirectSandbox *direct_limits; // --direct-limits, else null
    v1::Workspaces::Stub *workspaces;
    std::string agent_id; // local-sandbox in agent mode; "" when its Open failed
    std::string agent_why;
};

void BenchRun(Env &e)
{
    if (e.sandbox_id.empty())
        Fail("%s", e.sandbox_why.c_str());
    auto health = grpc::health::v1::Health::NewStub(e.channel);
    auto health_check = [&] {
        grpc::ClientContext ctx;
        ctx.set_deadline(In(60));
        grpc::health::v1::HealthCheckRequest req;
        grpc::health::v1::HealthCheckResponse resp;
        Check(health->Check(&ctx, req, &resp), "Health.Check");
    };
    if (e.agent_id.empty())
        Fail("%s", e.agent_why.c_str());
    v1::RunRequest sreq = TrueRequest(e.sandbox_id), breq = TrueRequest(e.bash_id),
                   areq = TrueRequest(e.agent_id);
    auto sandbox_run = [&] { RpcRunTrue(e.exec, sreq, "Run true (local-sandbox)"); };
    auto bash_run = [&] { RpcRunTrue(e.exec, breq, "Run true (local-bash)"); };
    auto agent_run = [&] { RpcRunTrue(e.exec, areq, "Run true (local-sandbox, agent)"); };
    // One call of each first, so that a refused Run or a bwrap that cannot
    // run here fails fast (and the agent's box is up).
    sandbox_run();
    e.direct.RunTrue();
    bash_run();
    agent_run();

    pid_t pid = e.server.pid();
    std::vector<Side> sides = {{sandbox_run, pid},  {[&] { e.direct.RunTrue(); }, 0},
                               {RawTrue, 0},        {bash_run, pid},
                               {health_check, pid}, {agent_run, pid}};
    if (e.direct_limits)
        sides.push_back({[&] { e.direct_limits->RunTrue(); }, 0});
    std::vector<SideResult> l = Measure(sides, e.opt.warmup, e.opt.iters);
    const Lat &sb = l[0].lat, &direct = l[1].lat, &raw = l[2].lat, &bash = l[3].lat, &hc = l[4].lat,
              &ag = l[5].lat;
    const char *direct_name = "direct bwrap (ws_sandbox_wrap + ws_spawn + wait)";
    const char *raw_name = "posix_spawn+waitpid /bin/true";
    const char *bash_name = "Run true (local-bash, same server)";
    g_rows.push_back({"Health.Check p50 (gRPC floor)", Us(hc.p50_us), "-", "-", "-", "-"});
    g_rows.push_back({"Health.Check p99 (gRPC floor)", Us(hc.p99_us), "-", "-", "-", "-"});
    double delta = sb.p50_us - direct.p50_us;
    g_rows.push_back(
        {"Run true (local-sandbox) p50", Us(sb.p50_us), direct_name, Us(direct.p50_us),
         Ratio(sb.p50_us, direct.p50_us),
         Goal(delta <= kGoalRunDeltaUs, Fmt("%+.2f ms, goal <= +1 ms", delta / 1000))});
    g_rows.push_back({"Run true (local-sandbox) p99", Us(sb.p99_us), direct_name, Us(direct.p99_us),
                      Ratio(sb.p99_us, direct.p99_us),
                      Fmt("(%+.2f ms)", (sb.p99_us - direct.p99_us) / 1000)});
    g_rows.push_back({"Run true (local-sandbox) p50", Us(sb.p50_us), bash_name, Us(bash.p50_us),
                      Ratio(sb.p50_us, bash.p50_us),
                      Fmt("(%+.2f ms)", (sb.p50_us - bash.p50_us) / 1000)});
    g_rows.push_back({"Run true (local-sandbox) p50", Us(sb.p50_us), raw_name, Us(raw.p50_us),
                      Ratio(sb.p50_us, raw.p50_us),
                      Fmt("(%+.2f ms)", (sb.p50_us - raw.p50_us) / 1000)});
    g_rows.push_back({"direct bwrap p50", Us(direct.p50_us), raw_name, Us(raw.p50_us),
                      Ratio(direct.p50_us, raw.p50_us),
                      Fmt("(%+.2f ms)", (direct.p50_us - raw.p50_us) / 1000)});
    g_rows.push_back({"direct bwrap p99", Us(direct.p99_us), raw_name, Us(raw.p99_us),
                      Ratio(direct.p99_us, raw.p99_us),
                      Fmt("(%+.2f ms)", (direct.p99_us - raw.p99_us) / 1000)});
    g_rows.push_back({"Run true (local-bash) p50", Us(bash.p50_us), raw_name, Us(raw.p50_us),
                      Ratio(bash.p50_us, raw.p50_us),
                      Fmt("(%+.2f ms)", (bash.p50_us - raw.p50_us) / 1000)});
    g_rows.push_back({"Run true (local-bash) p99", Us(bash.p99_us), raw_name, Us(raw.p99_us),
                      Ratio(bash.p99_us, raw.p99_us),
                      Fmt("(%+.2f ms)", (bash.p99_us - raw.p99_us) / 1000)});
    // Agent mode: against local-bash (the floor), per-command mode and the
    // direct bwrap.
    double agent_vs_bash = ag.p50_us - bash.p50_us;
    g_rows.push_back(
        {"Run true (local-sandbox, agent) p50", Us(ag.p50_us), bash_name, Us(bash.p50_us),
         Ratio(ag.p50_us, bash.p50_us),
         Goal(ag.p50_us < kGoalAgentRunUs && agent_vs_bash <= kGoalAgentVsBashUs,
              Fmt("%+.2f ms, goal < 2 ms and <= local-bash + 1 ms", agent_vs_bash / 1000))});
    g_rows.push_back({"Run true (local-sandbox, agent) p99", Us(ag.p99_us), bash_name,
                      Us(bash.p99_us), Ratio(ag.p99_us, bash.p99_us),
                      Fmt("(%+.2f ms)", (ag.p99_us - bash.p99_us) / 1000)});
    g_rows.push_back({"Run true (local-sandbox, agent) p50", Us(ag.p50_us),
                      "Run true (local-sandbox, per-command)", Us(sb.p50_us),
                      Ratio(ag.p50_us, sb.p50_us), Fmt("(%.1fx faster)", sb.p50_us / ag.p50_us)});
    g_rows.push_back({"Run true (local-sandbox, agent) p99", Us(ag.p99_us),
                      "Run true (local-sandbox, per-command)", Us(sb.p99_us),
                      Ratio(ag.p99_us, sb.p99_us), "-"});
    g_rows.push_back({"Run true (local-sandbox, agent) p50", Us(ag.p50_us), direct_name,
                      Us(direct.p50_us), Ratio(ag.p50_us, direct.p50_us),
                      Fmt("(%.1fx faster)", direct.p50_us / ag.p50_us)});
    if (e.direct_limits) {
        const Lat &dl = l[6].lat;
        const char *dl_name = "direct bwrap, server's default caps (cgroup enter/leave)";
        g_rows.push_back({"Run true (local-sandbox) p50", Us(sb.p50_us), dl_name, Us(dl.p50_us),
                          Ratio(sb.p50_us, dl.p50_us),
                          Fmt("(%+.2f ms)", (sb.p50_us - dl.p50_us) / 1000)});
        g_rows.push_back({"direct bwrap with caps p50", Us(dl.p50_us), direct_name,
                          Us(direct.p50_us), Ratio(dl.p50_us, direct.p50_us),
                          Fmt("(%+.2f ms)", (dl.p50_us - direct.p50_us) / 1000)});
    }

    // CPU per call: the server's own and that of the processes it reaped
    // (bwrap, and through it init and true) against the bench's children
    // for the direct bwrap.
    double n = (double)e.opt.iters;
    auto ms = [&](double s) { return Fmt("%.2f ms", s / n * 1000); };
    g_rows.push_back({"CPU per Run (local-sandbox)",
                      Fmt("server %s, its children %s", ms(l[0].cpu.self).c_str(),
                          ms(l[0].cpu.children).c_str()),
                      "direct bwrap: bench's children (bwrap, init, true)", ms(l[1].cpu.children),
                      Ratio(l[0].cpu.children, l[1].cpu.children), "children's ratio"});
    g_rows.push_back({"CPU per Run (local-bash)",
                      Fmt("server %s, its children %s", ms(l[3].cpu.self).c_str(),
                          ms(l[3].cpu.children).c_str()),
                      "posix_spawn: bench's children (true)", ms(l[2].cpu.children), "-", "-"});
    // The agent's box is not the server's child until it ends: the CPU of
    // its commands is not in this row.
    g_rows.push_back({"server CPU per Run (local-sandbox, agent)", ms(l[5].cpu.self), "local-bash",
                      ms(l[3].cpu.self), Ratio(l[5].cpu.self, l[3].cpu.self), "-"});

    // Figures measured earlier on this hardware, not in this run.
    g_rows.push_back({"Run true (local-sandbox) p50", Us(sb.p50_us),
                      "reference: bwrap --unshare-all ... /bin/true", Us(kRefBwrapUs),
                      Ratio(sb.p50_us, kRefBwrapUs), "(not measured here)"});
    g_rows.push_back({"Run true (local-sandbox) p50", Us(sb.p50_us),
                      "reference: sandbox-runtime, library", Us(kRefSrtLibUs),
                      Ratio(sb.p50_us, kRefSrtLibUs),
                      Fmt("(%.1fx faster; not measured here)", kRefSrtLibUs / sb.p50_us)});
    g_rows.push_back({"Run true (local-sandbox) p50", Us(sb.p50_us),
                      "reference: sandbox-runtime, CLI", Us(kRefSrtCliUs),
                      Ratio(sb.p50_us, kRefSrtCliUs),
                      Fmt("(%.0fx faster; not measured here)", kRefSrtCliUs / sb.p50_us)});
}

// Agent mode's own figures: the first command after Open (it starts the
// box) against per-command mode's, and 100 commands at once in one box.
void BenchAgent(Env &e)
{
    if (e.agent_id.empty())
        Fail("%s", e.agent_why.c_str());
    const int opens = std::max(5, std::min(50, e.opt.iters / 20));
    std::vector<double> first[2]; // 0: per-command, 1: agent
    for (int i = 0; i < opens; i++)
        for (int k = 0; k < 2; k++) {
            int side = (i + k) % 2;
            std::string why;
            std::string id = OpenWorkspace(e.workspaces, "local-sandbox", &why,
                                           side ? v1::EXEC_MODE_AGENT : v1::EXEC_MODE_PER_COMMAND);
            if (id.empty())
                Fail("%s", why.c_str());
            v1::RunRequest req = TrueRequest(id);
            auto a = Clock::now();
            RpcRunTrue(e.exec, req, "first Run true");
            first[side].push_back(Seconds(a, Clock::now()) * 1e6);
            CloseWorkspace(e.workspaces, id);
        }
    std::sort(first[0].begin(), first[0].end());
    std::sort(first[1].begin(), first[1].end());
    double pc = first[0][first[0].size() / 2], ag = first[1][first[1].size() / 2];
    g_rows.push_back({Fmt("first Run true after Open, agent (median of %d)", opens), Us(ag),
                      "the same, per-command", Us(pc), Ratio(ag, pc),
                      Fmt("(%+.2f ms: the box starts)", (ag - pc) / 1000)});

    // 100 at once, each `head -c i /dev/zero`: exactly i bytes each.
    std::vector<std::thread> threads;
    std::vector<uint64_t> got(kConcurrent, 0);
    std::vector<int> codes(kConcurrent, -1);
    auto a = Clock::now();
    for (int i = 0; i < kConcurrent; i++)
        threads.emplace_back([&, i] {
            try {
                StreamResult r = RpcStream(e.exec, e.agent_id, (uint64_t)i + 1);
                got[i] = r.stdout_bytes;
                codes[i] = r.exited.cause() == v1::EXIT_CAUSE_EXITED ? r.exited.exit_code() : -1;
            } catch (const BenchError &ex) {
                fprintf(stderr, "sandbox_bench: concurrent command %d: %s\n", i, ex.what());
            }
        });
    for (auto &t : threads)
        t.join();
    double wall = Seconds(a, Clock::now());
    int exact = 0;
    for (int i = 0; i < kConcurrent; i++)
        exact += got[i] == (uint64_t)i + 1 && codes[i] == 0;
    if (exact != kConcurrent)
        g_failed = true;
    g_rows.push_back({Fmt("%d concurrent commands in one box (agent)", kConcurrent),
                      Fmt("%d exact, %.0f ms wall", exact, wall * 1000), "expected",
                      Fmt("%d exact", kConcurrent), "-",
                      exact == kConcurrent ? "ok" : "WRONG (a command's output or exit)"});
}

void BenchStream(Env &e)
{
    if (e.sandbox_id.empty())
        Fail("%s", e.sandbox_why.c_str());
    uint64_t len = (uint64_t)e.opt.stream_mib * kMiB;
    pid_t pid = e.server.pid();

    if (e.agent_id.empty())
        Fail("%s", e.agent_why.c_str());
    // Warm-up: a small stream each way (page tables, the head binary).
    for (const std::string *id : {&e.sandbox_id, &e.bash_id, &e.agent_id}) {
        StreamResult w = RpcStream(e.exec, *id, 4 * kMiB);
        if (w.stdout_bytes != 4 * kMiB)
            Fail("Start warm-up: %llu of %zu bytes", (unsigned long long)w.stdout_bytes, 4 * kMiB);
    }

    // Index 0: local-sandbox, 1: local-bash, 2: local-sandbox in agent mode.
    const std::string *ids[3] = {&e.sandbox_id, &e.bash_id, &e.agent_id};
    const char *names[3] = {"local-sandbox", "local-bash", "local-sandbox, agent"};
    std::vector<double> t[3];
    Cpu cpu[3];
    uint64_t events[3] = {0, 0, 0};
    bool counts_ok = true;
    std::string counts;
    for (int i = 0; i < e.opt.stream_runs; i++) {
        // Rotate which side goes first, against drift.
        for (int k = 0; k < 3; k++) {
            int side = (i + k) % 3;
            const std::string &id = *ids[side];
            Cpu c0 = ProcCpu(pid);
            auto a = Clock::now();
            StreamResult r = RpcStream(e.exec, id, len);
            t[side].push_back(Seconds(a, Clock::now()));
            cpu[side] += ProcCpu(pid) - c0;
            events[side] += r.events;
            const v1::Exited &x = r.exited;
            bool ok = r.stdout_bytes == len && x.stdout().bytes_total() == len &&
                      x.stdout().bytes_delivered() == len && !x.stdout().truncated() &&
                      r.stderr_bytes == 0 && x.cause() == v1::EXIT_CAUSE_EXITED &&
                      x.exit_code() == 0;
            if (!ok) {
                counts_ok = false;
                fprintf(stderr,
                        "sandbox_bench: Start run %d (%s): %llu bytes in stdout events, "
                        "exited.stdout bytes_total %llu delivered %llu truncated %d, "
                        "stderr %llu, cause %s, exit code %d\n",
                        i, names[side], (unsigned long long)r.stdout_bytes,
                        (unsigned long long)x.stdout().bytes_total(),
                        (unsigned long long)x.stdout().bytes_delivered(),
                        (int)x.stdout().truncated(), (unsigned long long)r.stderr_bytes,
                        v1::ExitCause_Name(x.cause()).c_str(), x.exit_code());
            }
            if (side == 0)
                counts =
                    Fmt("events %llu B, bytes_total %llu B", (unsigned long long)r.stdout_bytes,
                        (unsigned long long)x.stdout().bytes_total());
        }
    }
    double sb = Median(t[0]), bash = Median(t[1]), ag = Median(t[2]);
    double sb_bps = (double)len / sb, bash_bps = (double)len / bash, ag_bps = (double)len / ag;
    std::string op = Fmt("Start head -c %s /dev/zero, local-sandbox (median of %d)",
                         Size(len).c_str(), e.opt.stream_runs);
    g_rows.push_back(
        {op, Rate((double)len, sb), "the same in local-bash (same server)", Rate((double)len, bash),
         Ratio(sb, bash),
         Goal(sb_bps >= kGoalStreamVsBash * bash_bps,
              Fmt("sandbox at %.0f%% of local-bash, goal >= 90%%", 100 * sb_bps / bash_bps))});
    g_rows.push_back(
        {Fmt("Start head -c %s /dev/zero, local-sandbox agent (median of %d)", Size(len).c_str(),
             e.opt.stream_runs),
         Rate((double)len, ag), "the same in local-bash (same server)", Rate((double)len, bash),
         Ratio(ag, bash),
         Goal(ag_bps >= kGoalAgentStreamVsBash * bash_bps,
              Fmt("agent at %.0f%% of local-bash, goal >= 85%%", 100 * ag_bps / bash_bps))});
    if (!counts_ok)
        g_failed = true;
    g_rows.push_back({"Start byte counts (local-sandbox, last run)", counts, "expected",
                      Fmt("%llu B", (unsigned long long)len), "-",
                      counts_ok ? "ok (all runs, both sides)" : "WRONG (see stderr)"});
    double runs = (double)e.opt.stream_runs;
    auto per_run = [&](int k) {
        return Fmt("%.0f (avg %.1f KiB)", (double)events[k] / runs,
                   events[k] ? (double)len * runs / (double)events[k] / 1024 : 0.0);
    };
    g_rows.push_back({"Start stdout events per run (local-sandbox)", per_run(0), "local-bash",
                      per_run(1), "-", "-"});
    double gib = (double)len / (double)kGiB * runs;
    g_rows.push_back({"server CPU per streamed GiB (local-sandbox)",
                      Fmt("%.2f s", cpu[0].self / gib), "local-bash",
                      Fmt("%.2f s", cpu[1].self / gib), Ratio(cpu[0].self, cpu[1].self), "-"});
    g_rows.push_back({"reaped children's CPU per GiB (local-sandbox: bwrap, init, head)",
                      Fmt("%.2f s", cpu[0].children / gib), "local-bash (head)",
                      Fmt("%.2f s", cpu[1].children / gib), Ratio(cpu[0].children, cpu[1].children),
                      "-"});
}

void Usage(FILE *f)
{
    fprintf(f, "usage: sandbox_bench --server PATH [options]\n"
               "  --server PATH        the workspaced binary (required); the sandbox's init is\n"
               "                       taken from beside it (progs/workspaced-sandbox-init)\n"
               "                       unless WORKSPACED_SANDBOX_INIT is set\n"
               "  --server-threads N   pass --threads N to the server [its default]\n"
               "  --tmp DIR            where the state directory goes [$TMPDIR or /tmp]\n"
               "  --iters N            timed Runs of true (and of each baseline) [1000]\n"
               "  --warmup N           untimed iterations of each before [100]\n"
               "  --stream-mib N       bytes streamed by head -c, in MiB [1024]\n"
               "  --stream-runs N      streams of each side (median reported) [3]\n"
               "  --direct-limits      also time the direct bwrap with the server's default\n"
               "                       caps (a cgroup group entered around the spawn)\n"
               "  --only LIST          parts to run, comma-separated: run,stream [all]\n"
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
            {"--stream-mib", &o.stream_mib, 5, 65536},
            {"--stream-runs", &o.stream_runs, 1, 1000},
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
        } else if (a == "--direct-limits") {
            o.direct_limits = true;
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

// Makes the server and the direct sandbox use the same init: the one
// WORKSPACED_SANDBOX_INIT names, else the one the server finds beside
// itself (the bench binary is elsewhere, so it cannot find it alone).
void PinInit(const std::string &server)
{
    const char *forced = getenv(WS_SANDBOX_INIT_ENV);
    if (forced && forced[0])
        return;
    std::string dir = server.substr(0, server.rfind('/') + 1);
    for (const char *rel : {"progs/" WS_SANDBOX_INIT_NAME, WS_SANDBOX_INIT_NAME}) {
        std::string p = dir + rel;
        if (p[0] == '/' && access(p.c_str(), X_OK) == 0) {
            setenv(WS_SANDBOX_INIT_ENV, p.c_str(), 1);
            return;
        }
    }
    Die("no %s beside %s (build //server:workspaced, or set %s to an absolute path)",
        WS_SANDBOX_INIT_NAME, server.c_str(), WS_SANDBOX_INIT_ENV);
}

std::string Absolute(const std::string &path)
{
    char *r = realpath(path.c_str(), nullptr);
    if (!r)
        Die("%s: %s", path.c_str(), strerror(errno));
    std::string out = r;
    free(r);
    return out;
}

} // namespace

int main(int argc, char **argv)
{
    Options opt = ParseArgs(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    opt.server = Absolute(opt.server);
    PinInit(opt.server);

    std::string tmpl = opt.tmp + "/sandbox_bench.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    // Searchable by others: workspace uids reach their directories under
    // the state directory made here.
    if (!mkdtemp(buf.data()) || chmod(buf.data(), 0711) != 0)
        Die("mkdtemp %s: %s", tmpl.c_str(), strerror(errno));
    std::string base = Absolute(buf.data());
    if (!opt.keep)
        g_base = base;
    std::string state = base + "/state";
    // The direct sandbox's workspace directory (bound at /workspace).
    std::string direct_dir = base + "/direct";
    if (mkdir(direct_dir.c_str(), 0700) < 0)
        Die("mkdir %s: %s", direct_dir.c_str(), strerror(errno));

    struct utsname u;
    uname(&u);
    auto start = Clock::now();
    {
        DirectSandbox direct(direct_dir, false);
        std::unique_ptr<DirectSandbox> direct_limits;
        if (opt.direct_limits)
            direct_limits = std::make_unique<DirectSandbox>(direct_dir, true);
        Server server(opt.server, state, opt.server_threads);
        auto channel = server.NewChannel();
        auto workspaces = v1::Workspaces::NewStub(channel);
        auto exec = v1::Exec::NewStub(channel);
        std::string why;
        std::string bash_id = OpenWorkspace(workspaces.get(), "local-bash", &why);
        if (bash_id.empty())
            Die("%s", why.c_str());
        Env e{opt, server,  channel, exec.get(),          "",
              "",  bash_id, direct,  direct_limits.get(), workspaces.get(),
              "",  ""};
        e.sandbox_id = OpenWorkspace(workspaces.get(), "local-sandbox", &e.sandbox_why);
        e.agent_id =
            OpenWorkspace(workspaces.get(), "local-sandbox", &e.agent_why, v1::EXEC_MODE_AGENT);

        char bwrap_version[64];
        ws_sandbox_backend_version(bwrap_version, sizeof(bwrap_version));
        const char *bwrap = ws_probe_bwrap_path();
        printf("sandbox_bench: %ld CPUs, Linux %s, server pid %d, bwrap %s (%s), init %s, "
               "Run iters %d (+%d warm-up), stream %d MiB x %d\n",
               sysconf(_SC_NPROCESSORS_ONLN), u.release, (int)server.pid(),
               bwrap_version[0] ? bwrap_version : "?", bwrap ? bwrap : "not found",
               getenv(WS_SANDBOX_INIT_ENV), opt.iters, opt.warmup, opt.stream_mib, opt.stream_runs);
        try {
            std::vector<std::string> cl = direct.CommandLine();
            std::string joined;
            for (const auto &a : cl)
                joined += (joined.empty() ? "" : " ") + a;
            printf("sandbox_bench: direct bwrap command line (%zu args, fds 3-5 kept): %s\n",
                   cl.size(), joined.c_str());
        } catch (const BenchError &ex) {
            printf("sandbox_bench: no direct bwrap command line: %s\n", ex.what());
        }
        fflush(stdout);

        auto wanted = [&](const char *part) {
            std::string list = "," + opt.only + ",";
            return list.find(std::string(",") + part + ",") != std::string::npos;
        };
        if (wanted("run")) {
            Part("Run true", [&] { BenchRun(e); });
            fprintf(stderr, "sandbox_bench: Run latencies done at %.1f s\n",
                    Seconds(start, Clock::now()));
        }
        if (wanted("stream")) {
            Part("Start stream", [&] { BenchStream(e); });
            fprintf(stderr, "sandbox_bench: streaming done at %.1f s\n",
                    Seconds(start, Clock::now()));
        }
        if (wanted("agent")) {
            Part("agent mode", [&] { BenchAgent(e); });
            fprintf(stderr, "sandbox_bench: agent figures done at %.1f s\n",
                    Seconds(start, Clock::now()));
        }
        CloseWorkspace(workspaces.get(), e.agent_id);
        CloseWorkspace(workspaces.get(), e.sandbox_id);
        CloseWorkspace(workspaces.get(), e.bash_id);
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
