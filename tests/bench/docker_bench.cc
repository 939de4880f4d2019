// Docker provider benchmark: workspaced's Open, Run and Start in a docker
// workspace against the same Engine API calls made directly by the bench
// over the daemon's socket, and against dockerode (tests/bench/dockerode),
// in the same run, as ratios.
//
//   docker_bench --server PATH/TO/workspaced [options]   (--help lists them)
//
// It starts its own server on a loopback port with a fresh state directory
// and prints one table:
//   * open:   Open of a docker workspace (timed; Close untimed) vs create +
//             start of a container with the very body the server sends
//             (built by the server's own ws_docker_create_body), vs the
//             server's whole call sequence made directly, vs dockerode's
//             createContainer + start of the same body;
//   * run:    Run of /bin/true vs exec create + attached exec start read to
//             EOF + exec inspect, vs the server's own exec (through its
//             in-container init, no inspect) made directly, vs the same
//             through the server's relay spawned by the bench, vs
//             dockerode's exec + start (hijack) + inspect; plus the relay's
//             start alone and an empty Health.Check, to say where a
//             difference comes from;
//   * stream: Start of `/bin/head -c N /dev/zero` vs the same exec read
//             directly (frames demultiplexed, payload counted), vs
//             dockerode (docker-modem's demuxStream into counting streams).
// The sides take turns in blocks, so noise lands on all of them alike.
// Exit status: 0 when every measurement ran and every check passed (goals
// missed are reported, not failures), 1 otherwise. A part that cannot run
// is reported as FAILED and the other parts still run; without node or
// dockerode's modules the dockerode rows say why they are missing.
#include <curl/curl.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
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
#include <jansson.h>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "workspace/v1/exec.grpc.pb.h"
#include "workspace/v1/workspaces.grpc.pb.h"

extern "C" {
#include "server/docker/api.h"
}

extern char **environ;

namespace
{

namespace v1 = workspace::v1;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMiB = 1024 * 1024;
constexpr const char *kDefaultSocket = "/var/run/docker.sock";
constexpr const char *kDefaultImage = "workspaced-test:busybox";
// The server's in-container init and host-side relay, where it finds them
// (beside itself, in progs/), and the variables that override that
// (server/providers/docker.h).
constexpr const char *kInitName = "workspaced-docker-init";
constexpr const char *kInitEnv = "WORKSPACED_DOCKER_INIT";
constexpr const char *kRelayName = "workspaced-docker-relay";
constexpr const char *kRelayEnv = "WORKSPACED_DOCKER_RELAY";
// What the server's guard gives a docker command (the e2e suite checks
// these): its PATH, HOME and LANG, and the names it removes from the
// environment the exec inherits (the daemon's, and the image's less those
// it sets; the test image's only variable is PATH).
const char *const kExecEnv[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                "HOME=/workspace", "LANG=C.UTF-8", nullptr};
const char *const kExecUnset[] = {"HOSTNAME", "TERM", nullptr};
// The init's backstop for a command: the default shell.max_duration_ms
// (one hour) plus the provider's 30 s margin, as the server passes it.
constexpr const char *kBackstopMs = "3630000";
// The init's exit record for `exited 0`, the last bytes of stderr.
constexpr const char kRecordOk[] = "\x1b_wsinit;exited 0\x1b\\";
// One read from the daemon's socket on the direct side.
constexpr size_t kReadBuf = 256 * 1024;
// The response head of an attached exec start (dockerd's is ~100 bytes).
constexpr size_t kHeadMax = 16 * 1024;
// The goals stated for the docker provider.
constexpr double kGoalOpenVsDirect = 1.10;  // Open median within 10% of direct
constexpr double kGoalRunVsDirect = 1.10;   // Run median within 10% of direct
constexpr double kGoalStreamVsDirect = 0.9; // streaming at >= 90% of the direct rate
// The in-box agent's goals: Run /bin/true under 2 ms at the median, at
// least 20x faster than the Engine API's exec and within 1 ms of
// local-bash; under gVisor within 2x of local-bash; streaming within 15% of
// local-bash; Open no more than 10% slower than per-command.
constexpr double kGoalAgentRunMs = 2.0;
constexpr double kGoalAgentVsDirect = 20.0;
constexpr double kGoalAgentOverBashMs = 1.0;
constexpr double kGoalAgentGvisorVsBash = 2.0;
constexpr double kGoalAgentStreamVsBash = 0.85;
constexpr double kGoalAgentOpen = 1.10;
// The agent part's streams: GNU coreutils' head, like the host's.
constexpr const char *kStreamImage = "workspaced-test:debian12-py";

struct Options {
    std::string server;
    std::string tmp;
    std::string socket = kDefaultSocket;
    std::string image = kDefaultImage;
    std::string dockerode; // the directory of bench.js; "" = no dockerode side
    std::string node = "node";
    int opens = 30;
    int open_warmup = 2;
    int open_block = 5;
    int runs = 100;
    int run_warmup = 10;
    int run_block = 20;
    int stream_mib = 200;
    int stream_runs = 3;
    int server_threads = 0; // 0: the server's default
    int agent_runs = 300;   // timed Runs of each side in the agent part
    int agent_stream_mib = 1024;
    int agent_opens = 10;
    int agent_concurrency = 100;
    bool keep = false;
    // Parts to run: any of "open", "run", "stream", "runtimes", "agent",
    // comma-separated.
    std::string only = "open,run,stream,runtimes,agent";
};

// Killed (or cleaned up) by Die, so that a failed run leaves nothing behind.
pid_t g_server_pid = -1;
pid_t g_node_pid = -1;
std::string g_base;
std::function<void()> g_remove_containers;

void RemoveTree(const std::string &path);

[[noreturn]] void Die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void Die(const char *fmt, ...)
{
    va_list ap;
    for (pid_t *p : {&g_server_pid, &g_node_pid}) {
        if (*p > 0) {
            kill(*p, SIGKILL);
            waitpid(*p, nullptr, 0);
            *p = -1;
        }
    }
    if (g_remove_containers)
        g_remove_containers();
    if (!g_base.empty())
        RemoveTree(g_base);
    va_start(ap, fmt);
    fputs("docker_bench: ", stderr);
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

// A failed measurement (an RPC or API error, a wrong answer): the part is
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

// ---- the direct side: the Engine API over the daemon's socket ----

// Demultiplexes a non-TTY exec stream: 8-byte headers [STREAM 0 0 0
// SIZE(be32)], then SIZE bytes of payload. Counts each stream's payload
// and keeps the first and the last bytes of stderr for the checks.
class Demux
{
  public:
    void Feed(const uint8_t *p, size_t n)
    {
        while (n > 0 && !bad_) {
            if (left_ == 0) {
                size_t k = std::min(n, sizeof(hdr_) - have_);
                memcpy(hdr_ + have_, p, k);
                have_ += k;
                p += k;
                n -= k;
                if (have_ < sizeof(hdr_))
                    break;
                have_ = 0;
                stream_ = hdr_[0];
                left_ = (uint64_t)hdr_[4] << 24 | (uint64_t)hdr_[5] << 16 | (uint64_t)hdr_[6] << 8 |
                        (uint64_t)hdr_[7];
                if (stream_ < 1 || stream_ > 3 || hdr_[1] || hdr_[2] || hdr_[3])
                    bad_ = true;
                continue;
            }
            size_t k = (size_t)std::min<uint64_t>(left_, n);
            bytes_[stream_] += k;
            if (stream_ != 1)
                Keep(p, k);
            p += k;
            n -= k;
            left_ -= k;
        }
    }
    bool bad() const
    {
        return bad_;
    }
    bool complete() const
    {
        return !bad_ && have_ == 0 && left_ == 0;
    }
    uint64_t out() const
    {
        return bytes_[1];
    }
    uint64_t err() const
    {
        return bytes_[2] + bytes_[3];
    }
    const std::string &err_head() const
    {
        return head_;
    }
    const std::string &err_tail() const
    {
        return tail_;
    }

  private:
    void Keep(const uint8_t *p, size_t n)
    {
        if (head_.size() < 256)
            head_.append((const char *)p, std::min(n, 256 - head_.size()));
        tail_.append((const char *)p, n);
        if (tail_.size() > 64)
            tail_.erase(0, tail_.size() - 64);
    }

    uint8_t hdr_[8] = {};
    size_t have_ = 0;
    uint64_t left_ = 0;
    int stream_ = 0;
    uint64_t bytes_[4] = {};
    bool bad_ = false;
    std::string head_, tail_;
};

size_t Collect(char *p, size_t size, size_t n, void *ud)
{
    static_cast<std::string *>(ud)->append(p, size * n);
    return size * n;
}

// The daemon, asked directly: plain calls through one libcurl handle (one
// kept-alive connection, as a client library keeps one), and the attached
// exec start on a connection of its own written by hand, as the docker CLI
// does it (POST with Connection: Upgrade, Upgrade: tcp; the raw stream
// follows the response head).
class Engine
{
  public:
    struct Reply {
        long status = 0;
        std::string body;
    };

    explicit Engine(const std::string &socket) : socket_(socket)
    {
        curl_ = curl_easy_init();
        if (!curl_)
            Die("curl_easy_init failed");
        headers_ = curl_slist_append(nullptr, "Content-Type: application/json");
        // curl's Expect: 100-continue would cost a round trip per large
        // POST; the server's client turns it off too.
        headers_ = curl_slist_append(headers_, "Expect:");
        buf_.resize(kReadBuf);
    }
    ~Engine()
    {
        curl_slist_free_all(headers_);
        curl_easy_cleanup(curl_);
    }
    Engine(const Engine &) = delete;
    Engine &operator=(const Engine &) = delete;

    // Negotiates the version as the server does (min of ours and the
    // daemon's); every later path is prefixed with it.
    std::string Negotiate()
    {
        Reply r = Call("GET", WS_DOCKER_PATH_VERSION);
        struct ws_docker_version dv;
        if (r.status != 200 || ws_docker_parse_version(r.body.data(), r.body.size(), &dv) < 0)
            Fail("GET /version: HTTP %ld", r.status);
        if (ws_docker_negotiate(&dv, &version_) < 0)
            Fail("the daemon's API %u.%u is not supported", dv.api.major, dv.api.minor);
        prefix_ = Fmt("/v%u.%u", version_.major, version_.minor);
        return prefix_.substr(2);
    }
    struct ws_docker_api_version version() const
    {
        return version_;
    }
    const std::string &prefix() const
    {
        return prefix_;
    }

    // One plain call; `path` is used as given (versioned by the caller).
    Reply Call(const char *method, const std::string &path, const std::string *body = nullptr)
    {
        Reply r;
        std::string url = "http://docker" + path;
        curl_easy_reset(curl_);
        curl_easy_setopt(curl_, CURLOPT_UNIX_SOCKET_PATH, socket_.c_str());
        curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
        curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(curl_, CURLOPT_TIMEOUT, 120L);
        curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers_);
        curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, Collect);
        curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &r.body);
        if (!strcmp(method, "POST")) {
            curl_easy_setopt(curl_, CURLOPT_POST, 1L);
            curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body ? body->c_str() : "");
            curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE, body ? (long)body->size() : 0L);
        } else if (strcmp(method, "GET") != 0) {
            curl_easy_setopt(curl_, CURLOPT_CUSTOMREQUEST, method);
        }
        CURLcode cc = curl_easy_perform(curl_);
        if (cc != CURLE_OK)
            Fail("%s %s: %s", method, path.c_str(), curl_easy_strerror(cc));
        curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &r.status);
        return r;
    }

    // A versioned call that must answer `want`; the body otherwise names
    // the daemon's message.
    Reply Expect(const char *method, const std::string &path, long want,
                 const std::string *body = nullptr)
    {
        Reply r = Call(method, prefix_ + path, body);
        if (r.status != want && !(want == 204 && r.status == 304))
            Fail("%s %s: HTTP %ld: %.300s", method, path.c_str(), r.status, r.body.c_str());
        return r;
    }

    // Creates an exec in `container` with the document `body`; its id.
    std::string ExecCreate(const std::string &container, const std::string &body)
    {
        Reply r = Expect("POST", "/containers/" + container + "/exec", 201, &body);
        struct ws_docker_created c;
        if (ws_docker_parse_created(r.body.data(), r.body.size(), &c) < 0)
            Fail("exec create: no Id in %.200s", r.body.c_str());
        return c.id;
    }

    struct ws_docker_exec_state ExecInspect(const std::string &id)
    {
        Reply r = Expect("GET", "/exec/" + id + "/json", 200);
        struct ws_docker_exec_state st;
        if (ws_docker_parse_exec_inspect(r.body.data(), r.body.size(), &st) < 0)
            Fail("exec inspect: not understood: %.200s", r.body.c_str());
        return st;
    }

    // POST /exec/{id}/start attached, on a new connection, and the stream
    // read to EOF through the demultiplexer.
    void ExecStartAttached(const std::string &id, Demux *d)
    {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            Fail("socket: %s", strerror(errno));
        struct sockaddr_un a = {};
        a.sun_family = AF_UNIX;
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", socket_.c_str());
        std::string err;
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
            err = Fmt("connect %s: %s", socket_.c_str(), strerror(errno));
        static const char body[] = "{\"Detach\":false,\"Tty\":false}";
        std::string req = "POST " + prefix_ + "/exec/" + id +
                          "/start HTTP/1.1\r\n"
                          "Host: docker\r\n"
                          "Content-Type: application/json\r\n"
                          "Connection: Upgrade\r\n"
                          "Upgrade: tcp\r\n" +
                          Fmt("Content-Length: %zu\r\n\r\n", sizeof(body) - 1) + body;
        for (size_t off = 0; err.empty() && off < req.size();) {
            ssize_t n = write(fd, req.data() + off, req.size() - off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                err = Fmt("write: %s", strerror(errno));
            else
                off += (size_t)n;
        }
        // The response head, then whatever followed it in the same reads.
        size_t have = 0, head_end = 0;
        while (err.empty() && head_end == 0) {
            ssize_t n = read(fd, buf_.data() + have, buf_.size() - have);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                err = n == 0 ? "EOF before the response head" : Fmt("read: %s", strerror(errno));
                break;
            }
            have += (size_t)n;
            const char *b = buf_.data();
            for (size_t i = 3; i < have; i++)
                if (b[i - 3] == '\r' && b[i - 2] == '\n' && b[i - 1] == '\r' && b[i] == '\n') {
                    head_end = i + 1;
                    break;
                }
            if (head_end == 0 && have >= kHeadMax)
                err = "response head too long";
        }
        if (err.empty()) {
            int status = 0;
            if (sscanf(buf_.data(), "HTTP/1.%*d %d", &status) != 1 ||
                (status != 101 && status != 200))
                err = Fmt("exec start: %.*s", (int)std::min<size_t>(have, 300), buf_.data());
        }
        if (err.empty()) {
            d->Feed((const uint8_t *)buf_.data() + head_end, have - head_end);
            for (;;) {
                ssize_t n = read(fd, buf_.data(), buf_.size());
                if (n < 0 && errno == EINTR)
                    continue;
                if (n < 0)
                    err = Fmt("read: %s", strerror(errno));
                if (n <= 0)
                    break;
                d->Feed((const uint8_t *)buf_.data(), (size_t)n);
            }
        }
        close(fd);
        if (!err.empty())
            Fail("%s", err.c_str());
        if (!d->complete())
            Fail("exec start: the stream is not a sequence of whole frames");
    }

  private:
    std::string socket_;
    CURL *curl_ = nullptr;
    struct curl_slist *headers_ = nullptr;
    struct ws_docker_api_version version_ = {1, 41};
    std::string prefix_ = "/v1.41";
    std::vector<char> buf_;
};

// The hardened container's create body, from the server's own builder, for
// a workspace directory and a label pair (the server's label keys with the
// bench's values, so that the bench can find its leftovers by label).
std::string CreateBody(const std::string &image, const std::string &dir, const std::string &init,
                       const std::string &server_label, const std::string &ws_label)
{
    std::string user = Fmt("%u:%u", (unsigned)getuid(), (unsigned)getgid());
    struct ws_docker_container_spec spec = {};
    spec.image = image.c_str();
    spec.workspace_dir = dir.c_str();
    spec.user = user.c_str();
    spec.server_id = server_label.c_str();
    spec.workspace_id = ws_label.c_str();
    // The server's default when DockerConfig.pids_limit is 0.
    spec.pids_limit = WS_DOCKER_PIDS_DEFAULT;
    spec.init_path = init.c_str();
    char *json = nullptr;
    int r = ws_docker_create_body(&spec, &json);
    if (r < 0)
        Fail("ws_docker_create_body: %s", strerror(-r));
    std::string out = json;
    free(json);
    return out;
}

// The exec body a plain client sends: the command, stdout and stderr.
std::string PlainExecBody(const std::vector<std::string> &argv)
{
    std::vector<const char *> a;
    for (const auto &s : argv)
        a.push_back(s.c_str());
    a.push_back(nullptr);
    struct ws_docker_exec_spec spec = {};
    spec.argv = a.data();
    spec.cwd = WS_DOCKER_WORKDIR;
    char *json = nullptr;
    int r = ws_docker_exec_body(&spec, &json);
    if (r < 0)
        Fail("ws_docker_exec_body: %s", strerror(-r));
    std::string out = json;
    free(json);
    return out;
}

// The exec body the server sends for `argv`: the in-container init with a
// fresh handle and the backstop, the guard's environment, the removals.
std::string ServerExecBody(const std::vector<std::string> &argv)
{
    static unsigned long long seq = 0;
    std::string handle = Fmt("p_%08x%08llx", (unsigned)getpid(), ++seq & 0xffffffffull);
    std::vector<const char *> a = {WS_DOCKER_INIT_TARGET, "run", handle.c_str(), kBackstopMs};
    for (const auto &s : argv)
        a.push_back(s.c_str());
    a.push_back(nullptr);
    struct ws_docker_exec_spec spec = {};
    spec.argv = a.data();
    spec.envp = kExecEnv;
    spec.unset = kExecUnset;
    spec.cwd = WS_DOCKER_WORKDIR;
    char *json = nullptr;
    int r = ws_docker_exec_body(&spec, &json);
    if (r < 0)
        Fail("ws_docker_exec_body: %s", strerror(-r));
    std::string out = json;
    free(json);
    return out;
}

// ---- the dockerode side: tests/bench/dockerode/bench.js, driven ----

// bench.js --serve as a child, one command line in, one reply line out.
class Node
{
  public:
    Node(const Options &o, const std::string &body_file, const std::string &api,
         const std::string &name_prefix)
    {
        std::string script = o.dockerode + "/bench.js";
        if (o.dockerode.empty()) {
            why_ = "no --dockerode DIR given";
            return;
        }
        if (access(script.c_str(), R_OK) != 0) {
            why_ = Fmt("%s: %s", script.c_str(), strerror(errno));
            return;
        }
        if (access((o.dockerode + "/node_modules/dockerode").c_str(), R_OK) != 0) {
            why_ = Fmt("no node_modules/dockerode in %s (run `npm ci` there; run.sh does)",
                       o.dockerode.c_str());
            return;
        }
        int in[2], out[2];
        if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
            Die("pipe: %s", strerror(errno));
        std::vector<std::string> argv = {o.node,
                                         script,
                                         "--serve",
                                         "--socket",
                                         o.socket,
                                         "--api",
                                         "v" + api,
                                         "--body",
                                         body_file,
                                         "--label-key",
                                         WS_DOCKER_LABEL_WORKSPACE,
                                         "--name-prefix",
                                         name_prefix};
        std::vector<char *> args;
        for (auto &a : argv)
            args.push_back(a.data());
        args.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, in[0], 0);
        posix_spawn_file_actions_adddup2(&fa, out[1], 1);
        int rc = posix_spawnp(&pid_, o.node.c_str(), &fa, nullptr, args.data(), environ);
        posix_spawn_file_actions_destroy(&fa);
        close(in[0]);
        close(out[1]);
        if (rc != 0) {
            close(in[1]);
            close(out[0]);
            pid_ = -1;
            why_ = Fmt("spawn %s: %s", o.node.c_str(), strerror(rc));
            return;
        }
        g_node_pid = pid_;
        to_ = in[1];
        from_ = out[0];
    }
    ~Node()
    {
        if (to_ >= 0)
            close(to_); // EOF: bench.js removes its container and exits
        if (from_ >= 0)
            close(from_);
        if (pid_ > 0) {
            for (int i = 0; i < 3000; i++) {
                if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
                    pid_ = -1;
                    break;
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
            if (pid_ > 0) {
                kill(pid_, SIGKILL);
                waitpid(pid_, nullptr, 0);
            }
            g_node_pid = -1;
        }
    }
    Node(const Node &) = delete;
    Node &operator=(const Node &) = delete;

    bool ok() const
    {
        return pid_ > 0;
    }
    const std::string &why() const
    {
        return why_;
    }
    pid_t pid() const
    {
        return pid_;
    }

    // Sends one command; the reply's words after "ok".
    std::vector<std::string> Ask(const std::string &cmd, int timeout_s = 600)
    {
        if (pid_ <= 0)
            Fail("dockerode: %s", why_.c_str());
        std::string line = cmd + "\n";
        if (write(to_, line.data(), line.size()) != (ssize_t)line.size())
            Fail("dockerode: write to bench.js: %s", strerror(errno));
        std::string reply;
        auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
        for (;;) {
            size_t nl = pending_.find('\n');
            if (nl != std::string::npos) {
                reply = pending_.substr(0, nl);
                pending_.erase(0, nl + 1);
                break;
            }
            auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0)
                Fail("dockerode: no answer to `%s` in %d s", cmd.c_str(), timeout_s);
            struct pollfd p = {from_, POLLIN, 0};
            if (poll(&p, 1, (int)left.count()) <= 0)
                continue;
            char buf[65536];
            ssize_t n = read(from_, buf, sizeof(buf));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                Fail("dockerode: bench.js exited (its stderr says why)");
            pending_.append(buf, (size_t)n);
        }
        std::vector<std::string> words;
        size_t i = 0;
        while (i < reply.size()) {
            size_t j = reply.find(' ', i);
            if (j == std::string::npos)
                j = reply.size();
            if (j > i)
                words.push_back(reply.substr(i, j - i));
            i = j + 1;
        }
        if (words.empty() || words[0] != "ok")
            Fail("dockerode: `%s`: %s", cmd.c_str(), reply.c_str());
        words.erase(words.begin());
        return words;
    }

    std::vector<double> AskTimes(const std::string &cmd, int n)
    {
        std::vector<std::string> w = Ask(cmd);
        if ((int)w.size() != n)
            Fail("dockerode: `%s`: %zu times, expected %d", cmd.c_str(), w.size(), n);
        std::vector<double> ns;
        for (const auto &s : w)
            ns.push_back(strtod(s.c_str(), nullptr));
        return ns;
    }

  private:
    pid_t pid_ = -1;
    int to_ = -1, from_ = -1;
    std::string pending_;
    std::string why_;
};

// ---- the server ----

// The server under test, started as the other benches do (stdout is read
// for the listening line, stderr goes to a file).
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
// `children` by the children it reaped.
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
// /proc/PID/stat), clock-tick resolution; zero when it cannot be read.
Cpu ProcCpu(pid_t pid)
{
    char path[64], buf[1024];
    if (pid <= 0)
        return {};
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

// The daemon's pid from its pid file; -1 when there is none.
pid_t DockerdPid()
{
    FILE *f = fopen("/var/run/docker.pid", "re");
    int pid = -1;
    if (f) {
        if (fscanf(f, "%d", &pid) != 1)
            pid = -1;
        fclose(f);
    }
    return pid;
}

// ---- statistics and the table ----

struct Stats {
    size_t n = 0;
    double median = 0, p90 = 0, p99 = 0, mean = 0; // nanoseconds
};

Stats Summarize(std::vector<double> ns)
{
    Stats s;
    s.n = ns.size();
    if (ns.empty())
        return s;
    std::sort(ns.begin(), ns.end());
    auto at = [&](double q) {
        size_t i = (size_t)(q * (double)(ns.size() - 1) + 0.5);
        return ns[std::min(i, ns.size() - 1)];
    };
    s.median = at(0.5);
    s.p90 = at(0.9);
    s.p99 = at(0.99);
    double sum = 0;
    for (double v : ns)
        sum += v;
    s.mean = sum / (double)ns.size();
    return s;
}

struct Row {
    std::string op, side, n, median, p90, mean, r_median, r_mean, goal;
    std::string p99 = ""; // the agent part's latency rows
};

std::vector<Row> g_rows;
bool g_failed = false;

std::string Ms(double ns)
{
    return ns >= 1e9 ? Fmt("%.2f s", ns / 1e9) : Fmt("%.2f ms", ns / 1e6);
}

std::string Rate(double bytes, double ns)
{
    return ns > 0 ? Fmt("%.0f MB/s", bytes / (ns / 1e9) / 1e6) : "-";
}

std::string Ratio(double ws, double base)
{
    return base > 0 ? Fmt("%.2fx", ws / base) : "-";
}

std::string Goal(bool met, const std::string &what)
{
    return (met ? "MET (" : "MISSED (") + what + ")";
}

void PrintTable()
{
    Row head = {"measurement",  "side",         "n",    "median", "p90", "mean",
                "ws/side med.", "ws/side mean", "goal", "p99"};
    std::vector<Row> all = {head};
    all.insert(all.end(), g_rows.begin(), g_rows.end());
    const int kCols = 10;
    size_t w[kCols] = {0};
    auto fields = [](const Row &r) {
        return std::vector<const std::string *>{&r.op,  &r.side, &r.n,        &r.median, &r.p90,
                                                &r.p99, &r.mean, &r.r_median, &r.r_mean, &r.goal};
    };
    for (const auto &r : all) {
        auto f = fields(r);
        for (int i = 0; i < kCols; i++)
            w[i] = std::max(w[i], f[i]->size());
    }
    for (size_t i = 0; i < all.size(); i++) {
        auto f = fields(all[i]);
        std::string line;
        for (int k = 0; k < kCols; k++) {
            std::string cell = *f[k];
            if (k + 1 < kCols)
                cell.resize(w[k], ' ');
            line += (k ? " | " : "") + cell;
        }
        printf("%s\n", line.c_str());
        if (i == 0) {
            size_t total = 3 * (kCols - 1);
            for (size_t x : w)
                total += x;
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
        fprintf(stderr, "docker_bench: %s: FAILED: %s\n", name, ex.what());
        g_rows.push_back({Fmt("%s: FAILED", name), ex.what(), "-", "-", "-", "-", "-", "-", "-"});
        g_failed = true;
    }
}

// ---- interleaved measurement ----

// One side of a measurement: `block(n)` runs n timed iterations and
// returns their times in nanoseconds; `actor` is the process whose CPU is
// charged to the side (0: this one), read between blocks.
struct Side {
    Side(std::string name_, std::function<std::vector<double>(int n)> block_, pid_t actor_,
         bool available_ = true, std::string why_ = "")
        : name(std::move(name_)), block(std::move(block_)), actor(actor_), available(available_),
          why(std::move(why_))
    {
    }
    std::string name;
    std::function<std::vector<double>(int n)> block;
    pid_t actor;
    bool available;
    std::string why; // when not available
};

struct SideResult {
    std::vector<double> ns;
    Cpu actor;          // summed over the timed blocks
    double client = 0;  // this process's own CPU over the same blocks
    double dockerd = 0; // the daemon's CPU over the same blocks
};

Cpu ActorCpu(pid_t pid)
{
    if (pid > 0)
        return ProcCpu(pid);
    return {RusageSeconds(RUSAGE_SELF), RusageSeconds(RUSAGE_CHILDREN)};
}

// Runs each available side `warmup` times, then `iters` times each, taking
// turns in blocks of `block`; the first side of each round rotates, so no
// side always follows the same one.
std::vector<SideResult> Measure(const std::vector<Side> &sides, int warmup, int iters, int block)
{
    pid_t dockerd = DockerdPid();
    std::vector<SideResult> out(sides.size());
    for (const auto &s : sides)
        if (s.available && warmup > 0)
            s.block(warmup);
    int round = 0;
    for (int done = 0; done < iters; done += block, round++) {
        int n = std::min(block, iters - done);
        for (size_t j = 0; j < sides.size(); j++) {
            size_t k = (j + (size_t)round) % sides.size();
            if (!sides[k].available)
                continue;
            Cpu c0 = ActorCpu(sides[k].actor);
            double b0 = RusageSeconds(RUSAGE_SELF);
            double d0 = ProcCpu(dockerd).self;
            std::vector<double> ns = sides[k].block(n);
            out[k].actor += ActorCpu(sides[k].actor) - c0;
            out[k].client += RusageSeconds(RUSAGE_SELF) - b0;
            out[k].dockerd += ProcCpu(dockerd).self - d0;
            out[k].ns.insert(out[k].ns.end(), ns.begin(), ns.end());
        }
    }
    return out;
}

// Times `fn` n times.
std::vector<double> Times(int n, const std::function<void()> &fn)
{
    std::vector<double> ns;
    for (int i = 0; i < n; i++) {
        auto t0 = Clock::now();
        fn();
        ns.push_back(Nanos(t0, Clock::now()));
    }
    return ns;
}

// Whose CPU a side is charged: the server's (as the workspaced side), the
// bench's own, or bench.js's.
const char *ActorName(const Side &s, const Side &ws)
{
    return s.actor == 0 ? "bench" : s.actor == ws.actor ? "server" : "node";
}

// Latency rows: the workspaced side (index 0) against each other side, and
// the CPU per operation of each.
void LatencyRows(const std::string &op, const std::vector<Side> &sides,
                 const std::vector<SideResult> &res, double goal_vs_direct)
{
    Stats ws = Summarize(res[0].ns);
    for (size_t k = 0; k < sides.size(); k++) {
        if (!sides[k].available) {
            g_rows.push_back(
                {op, sides[k].name, "-", "not measured", "-", "-", "-", "-", sides[k].why});
            continue;
        }
        Stats s = Summarize(res[k].ns);
        Row r = {op,
                 sides[k].name,
                 std::to_string(s.n),
                 Ms(s.median),
                 Ms(s.p90),
                 Ms(s.mean),
                 k ? Ratio(ws.median, s.median) : "-",
                 k ? Ratio(ws.mean, s.mean) : "-",
                 ""};
        if (k == 1)
            r.goal = Goal(ws.median <= goal_vs_direct * s.median,
                          Fmt("%+.1f%% (%+.2f ms), goal within +%.0f%%",
                              100 * (ws.median / s.median - 1), (ws.median - s.median) / 1e6,
                              100 * (goal_vs_direct - 1)));
        else if (k == sides.size() - 1 && sides[k].name.rfind("dockerode", 0) == 0)
            r.goal = Goal(ws.median < s.median,
                          Fmt("%.2fx, goal: faster than dockerode", ws.median / s.median));
        g_rows.push_back(r);
    }
    for (size_t k = 0; k < sides.size(); k++) {
        if (!sides[k].available || res[k].ns.empty())
            continue;
        double n = (double)res[k].ns.size();
        std::string who =
            k == 0 ? Fmt("server %.2f ms + relays %.2f ms; client %.2f ms",
                         res[k].actor.self / n * 1e3, res[k].actor.children / n * 1e3,
                         res[k].client / n * 1e3)
                   : Fmt("%s %.2f ms%s", ActorName(sides[k], sides[0]), res[k].actor.self / n * 1e3,
                         res[k].actor.children > 0
                             ? Fmt(" + children %.2f ms", res[k].actor.children / n * 1e3).c_str()
                             : "");
        g_rows.push_back({op + ": CPU per op", sides[k].name, "", who,
                          Fmt("dockerd %.2f ms", res[k].dockerd / n * 1e3), "", "", "", ""});
    }
}

// ---- the benchmarks ----

struct Env {
    const Options &opt;
    Server &server;
    v1::Workspaces::Stub *workspaces;
    v1::Exec::Stub *exec;
    std::shared_ptr<grpc::Channel> channel;
    Engine &engine;
    Node &node;
    std::string init;         // the init binary (host path)
    std::string relay;        // the relay binary the server runs
    std::string label;        // the bench's value of the server label
    std::string direct_dir;   // the direct containers' workspace
    std::string direct_body;  // their create body (labels: label, "d")
    std::string ws_id;        // the docker workspace for run and stream
    std::string container;    // the direct container for run and stream
    bool node_ready = false;  // the dockerode container is up
    unsigned long long n = 0; // names
};

v1::OpenRequest DockerOpenRequest(const std::string &image)
{
    v1::OpenRequest req;
    req.mutable_docker()->set_image(image);
    req.mutable_capabilities()->mutable_fs();
    auto *shell = req.mutable_capabilities()->mutable_shell();
    // Absolute paths, in the allowlist and in argv alike.
    for (const char *c : {"/bin/true", "/bin/head", "/bin/cat"})
        shell->add_allowed_commands(c);
    return req;
}

std::string OpenDocker(v1::Workspaces::Stub *stub, const v1::OpenRequest &req)
{
    v1::OpenResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(120));
    Check(stub->Open(&ctx, req, &resp), "Open (docker)");
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
    ctx.set_deadline(In(120));
    Check(stub->Close(&ctx, req, &resp), "Close");
}

// One Run; fails unless it exited 0 with no output.
void RpcRunTrue(v1::Exec::Stub *exec, const v1::RunRequest &req)
{
    grpc::ClientContext ctx;
    ctx.set_deadline(In(120));
    v1::RunResponse resp;
    Check(exec->Run(&ctx, req, &resp), "Run /bin/true");
    const v1::Exited &x = resp.exited();
    if (x.cause() != v1::EXIT_CAUSE_EXITED || x.exit_code() != 0)
        Fail("Run /bin/true: cause %s, exit code %d, signal %d",
             v1::ExitCause_Name(x.cause()).c_str(), x.exit_code(), x.signal());
    if (!resp.stdout().empty() || !resp.stderr().empty())
        Fail("Run /bin/true: %zu bytes of stdout, %zu of stderr (%.200s)", resp.stdout().size(),
             resp.stderr().size(), resp.stderr().c_str());
}

struct StreamResult {
    uint64_t stdout_bytes = 0, stderr_bytes = 0, events = 0;
    v1::Exited exited;
};

// Start `/bin/head -c LEN /dev/zero` and read the stream to its end,
// counting the bytes of the stdout chunks (whose offsets must be
// contiguous).
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
    p->add_argv("/bin/head");
    p->add_argv("-c");
    p->add_argv(std::to_string(len));
    p->add_argv("/dev/zero");
    if (!s->Write(req)) {
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
    // not be taken for a cancel.
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

// Direct: create + start of a container with the server's body under a
// name of its own; its id.
std::string DirectCreateStart(Env &e, const std::string &name)
{
    Engine::Reply r =
        e.engine.Expect("POST", "/containers/create?name=" + name, 201, &e.direct_body);
    struct ws_docker_created c;
    if (ws_docker_parse_created(r.body.data(), r.body.size(), &c) < 0)
        Fail("create: no Id in %.200s", r.body.c_str());
    e.engine.Expect("POST", std::string("/containers/") + c.id + "/start", 204);
    return c.id;
}

void DirectRemove(Env &e, const std::string &ref)
{
    Engine::Reply r =
        e.engine.Call("DELETE", e.engine.prefix() + "/containers/" + ref + "?force=true&v=true");
    if (r.status != 204 && r.status != 404)
        Fail("DELETE %s: HTTP %ld: %.200s", ref.c_str(), r.status, r.body.c_str());
}

// Direct, the server's whole sequence for an Open (server/providers/
// docker.c, ws_docker_rt_attach, and the registry's probe): /_ping, image
// inspect, DELETE of the name (404 for a new workspace), create, start,
// container inspect with the hardening read back.
std::string DirectServerOpen(Env &e, const std::string &name)
{
    Engine::Reply ping = e.engine.Call("GET", WS_DOCKER_PATH_PING);
    if (ping.status != 200)
        Fail("/_ping: HTTP %ld", ping.status);
    char path[WS_DOCKER_PATH_MAX];
    if (ws_docker_path_image_inspect(e.engine.version(), e.opt.image.c_str(), path, sizeof(path)) <
        0)
        Fail("image path");
    Engine::Reply img = e.engine.Call("GET", path);
    bool volumes = false;
    if (img.status != 200 ||
        ws_docker_parse_image_volumes(img.body.data(), img.body.size(), &volumes) < 0 || volumes)
        Fail("image inspect: HTTP %ld", img.status);
    DirectRemove(e, name);
    std::string id = DirectCreateStart(e, name);
    Engine::Reply in = e.engine.Expect("GET", "/containers/" + id + "/json", 200);
    struct ws_docker_hardening h;
    struct ws_docker_state st;
    if (ws_docker_parse_hardening(in.body.data(), in.body.size(), &h) < 0 ||
        ws_docker_parse_state(in.body.data(), in.body.size(), &st) < 0 || !st.running)
        Fail("container inspect: not running or not understood");
    return id;
}

void BenchOpen(Env &e)
{
    v1::OpenRequest req = DockerOpenRequest(e.opt.image);
    auto ws_block = [&](int n) {
        std::vector<double> ns;
        for (int i = 0; i < n; i++) {
            auto t0 = Clock::now();
            std::string id = OpenDocker(e.workspaces, req);
            ns.push_back(Nanos(t0, Clock::now()));
            CloseWorkspace(e.workspaces, id);
        }
        return ns;
    };
    auto direct_block = [&](int n) {
        std::vector<double> ns;
        for (int i = 0; i < n; i++) {
            std::string name = Fmt("%s-d%llu", e.label.c_str(), e.n++);
            auto t0 = Clock::now();
            std::string id = DirectCreateStart(e, name);
            ns.push_back(Nanos(t0, Clock::now()));
            DirectRemove(e, id);
        }
        return ns;
    };
    auto server_calls_block = [&](int n) {
        std::vector<double> ns;
        for (int i = 0; i < n; i++) {
            std::string name = Fmt("%s-s%llu", e.label.c_str(), e.n++);
            auto t0 = Clock::now();
            std::string id = DirectServerOpen(e, name);
            ns.push_back(Nanos(t0, Clock::now()));
            DirectRemove(e, id);
        }
        return ns;
    };
    std::vector<Side> sides = {
        {"workspaced Open (Close untimed)", ws_block, e.server.pid()},
        {"direct: create + start", direct_block, 0},
        {"direct: the server's calls (ping, image, delete, create, start, inspect)",
         server_calls_block, 0},
        {"dockerode: createContainer + start",
         [&](int n) { return e.node.AskTimes(Fmt("open %d", n), n); }, e.node.pid(), e.node.ok(),
         e.node.why()},
    };
    std::vector<SideResult> res = Measure(sides, e.opt.open_warmup, e.opt.opens, e.opt.open_block);
    LatencyRows("Open", sides, res, kGoalOpenVsDirect);
}

// The containers Run and Start use: a workspace, a direct container and
// dockerode's, all with the same body.
void SetUpExecTargets(Env &e)
{
    if (e.ws_id.empty())
        e.ws_id = OpenDocker(e.workspaces, DockerOpenRequest(e.opt.image));
    if (e.container.empty())
        e.container = DirectCreateStart(e, Fmt("%s-exec", e.label.c_str()));
    if (e.node.ok() && !e.node_ready) {
        e.node.Ask("setup");
        e.node_ready = true;
    }
}

void DirectRunTrue(Env &e)
{
    std::string id = e.engine.ExecCreate(e.container, PlainExecBody({"/bin/true"}));
    Demux d;
    e.engine.ExecStartAttached(id, &d);
    struct ws_docker_exec_state st = e.engine.ExecInspect(id);
    if (!st.exited || st.exit_code != 0 || d.out() || d.err())
        Fail("direct /bin/true: exited %d, code %d, %llu B of stdout, %llu B of stderr (%.200s)",
             (int)st.exited, st.exit_code, (unsigned long long)d.out(), (unsigned long long)d.err(),
             d.err_head().c_str());
}

// What the server has the daemon do for a Run: the exec through its init
// (created by the server, started by the relay), the exit record read from
// the end of stderr, no inspect.
void DirectServerRunTrue(Env &e)
{
    std::string id = e.engine.ExecCreate(e.container, ServerExecBody({"/bin/true"}));
    Demux d;
    e.engine.ExecStartAttached(id, &d);
    if (d.out() || d.err_tail() != kRecordOk)
        Fail("direct /bin/true through the init: %llu B of stdout, stderr %.200s",
             (unsigned long long)d.out(), d.err_head().c_str());
}

// Spawns the server's relay with no arguments and reaps it: it exits at
// once on the usage error, so this is what loading it costs (exec, the
// dynamic linker, its libraries' constructors), which the server pays
// once per docker command before the relay does anything.
void RelayStart(const std::string &relay)
{
    char *argv[] = {const_cast<char *>(relay.c_str()), nullptr};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawn(&pid, relay.c_str(), &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        Fail("spawn %s: %s", relay.c_str(), strerror(rc));
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            Fail("waitpid: %s", strerror(errno));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 127)
        Fail("%s without arguments: status %d (expected exit 127)", relay.c_str(), status);
}

// The server's daemon-side work for a Run with its own relay, without the
// server: the init-wrapped exec created here, then the relay spawned as the
// server spawns it (--host, --api, --status-fd 3, the exec id; stdin and
// stdout on /dev/null, which /bin/true never writes to) and its status line
// read from fd 3.
void DirectRelayRunTrue(Env &e)
{
    std::string id = e.engine.ExecCreate(e.container, ServerExecBody({"/bin/true"}));
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        Fail("pipe: %s", strerror(errno));
    // Keep the write end off fd 3, so that the dup2 below clears CLOEXEC.
    int w = fcntl(p[1], F_DUPFD_CLOEXEC, 10);
    int dup_err = errno;
    close(p[1]);
    std::string host = "unix://" + e.opt.socket;
    std::string api = e.engine.prefix().substr(2);
    std::vector<std::string> argv = {e.relay, "--host", host, "--api", api, "--status-fd", "3", id};
    std::vector<char *> args;
    for (auto &a : argv)
        args.push_back(a.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, w, 3);
    pid_t pid;
    int rc =
        w < 0 ? dup_err : posix_spawn(&pid, e.relay.c_str(), &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (w >= 0)
        close(w);
    if (rc != 0) {
        close(p[0]);
        Fail("spawn %s: %s", e.relay.c_str(), strerror(rc));
    }
    char line[64];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(p[0], line + have, sizeof(line) - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
        if (have == sizeof(line) - 1)
            break;
    }
    line[have] = '\0';
    close(p[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            Fail("waitpid: %s", strerror(errno));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || strcmp(line, "exited 0\n") != 0)
        Fail("the relay: status %d, status line \"%s\"", status, line);
}

void BenchRun(Env &e)
{
    SetUpExecTargets(e);
    v1::RunRequest req;
    req.set_workspace_id(e.ws_id);
    req.mutable_process()->add_argv("/bin/true");
    auto health = grpc::health::v1::Health::NewStub(e.channel);
    auto health_check = [&] {
        grpc::ClientContext ctx;
        ctx.set_deadline(In(60));
        grpc::health::v1::HealthCheckRequest hreq;
        grpc::health::v1::HealthCheckResponse hresp;
        Check(health->Check(&ctx, hreq, &hresp), "Health.Check");
    };
    // One of each first, so that a refused call fails fast.
    RpcRunTrue(e.exec, req);
    DirectRunTrue(e);
    DirectServerRunTrue(e);
    if (!e.relay.empty())
        DirectRelayRunTrue(e);
    std::vector<Side> sides = {
        {"workspaced Run /bin/true",
         [&](int n) { return Times(n, [&] { RpcRunTrue(e.exec, req); }); }, e.server.pid()},
        {"direct: exec create + attached start + inspect",
         [&](int n) { return Times(n, [&] { DirectRunTrue(e); }); }, 0},
        {"direct: the server's exec (through its init, no inspect)",
         [&](int n) { return Times(n, [&] { DirectServerRunTrue(e); }); }, 0},
        {"direct: the server's exec through the server's relay (spawned here)",
         [&](int n) { return Times(n, [&] { DirectRelayRunTrue(e); }); }, 0, !e.relay.empty(),
         "no relay beside the server"},
        {"Health.Check (gRPC floor)", [&](int n) { return Times(n, health_check); },
         e.server.pid()},
        {"the server's relay alone: spawn + exit (usage error)",
         [&](int n) { return Times(n, [&] { RelayStart(e.relay); }); }, 0, !e.relay.empty(),
         "no relay beside the server"},
        {"dockerode: exec + start (hijack) + inspect",
         [&](int n) { return e.node.AskTimes(Fmt("run %d", n), n); }, e.node.pid(), e.node.ok(),
         e.node.why()},
    };
    std::vector<SideResult> res = Measure(sides, e.opt.run_warmup, e.opt.runs, e.opt.run_block);
    LatencyRows("Run /bin/true", sides, res, kGoalRunVsDirect);
}

// Open (create, start, hardening read back; then Close) and Run /bin/true
// in a workspace under runsc (gVisor's user-space kernel) beside the same
// under runc, the two taking turns. The runsc rows' ratios are runsc over
// runc.
void BenchRuntimes(Env &e)
{
    v1::OpenRequest runc = DockerOpenRequest(e.opt.image), runsc = runc;
    runc.mutable_docker()->set_runtime("runc");
    runsc.mutable_docker()->set_runtime("runsc");
    auto open_close = [&](const v1::OpenRequest &rq) {
        CloseWorkspace(e.workspaces, OpenDocker(e.workspaces, rq));
    };
    std::vector<Side> opens = {
        {"workspaced Open + Close, runsc",
         [&](int n) { return Times(n, [&] { open_close(runsc); }); }, e.server.pid()},
        {"workspaced Open + Close, runc",
         [&](int n) { return Times(n, [&] { open_close(runc); }); }, e.server.pid()},
    };
    std::vector<SideResult> ro = Measure(opens, 1, std::max(3, e.opt.opens / 2), 1);
    std::string a = OpenDocker(e.workspaces, runsc), b = OpenDocker(e.workspaces, runc);
    v1::RunRequest ra, rb;
    ra.set_workspace_id(a);
    ra.mutable_process()->add_argv("/bin/true");
    rb.set_workspace_id(b);
    rb.mutable_process()->add_argv("/bin/true");
    RpcRunTrue(e.exec, ra);
    RpcRunTrue(e.exec, rb);
    std::vector<Side> runs = {
        {"workspaced Run /bin/true, runsc",
         [&](int n) { return Times(n, [&] { RpcRunTrue(e.exec, ra); }); }, e.server.pid()},
        {"workspaced Run /bin/true, runc",
         [&](int n) { return Times(n, [&] { RpcRunTrue(e.exec, rb); }); }, e.server.pid()},
    };
    std::vector<SideResult> rr =
        Measure(runs, std::max(1, e.opt.run_warmup / 4), std::max(10, e.opt.runs / 4),
                std::max(1, e.opt.run_block / 2));
    for (auto *pair : {&ro, &rr}) {
        const std::vector<Side> &sides = pair == &ro ? opens : runs;
        Stats sc = Summarize((*pair)[0].ns), c = Summarize((*pair)[1].ns);
        const char *op = pair == &ro ? "Open + Close by runtime" : "Run /bin/true by runtime";
        g_rows.push_back({op, sides[0].name, std::to_string(sc.n), Ms(sc.median), Ms(sc.p90),
                          Ms(sc.mean), Ratio(sc.median, c.median), Ratio(sc.mean, c.mean),
                          "runsc over runc"});
        g_rows.push_back({op, sides[1].name, std::to_string(c.n), Ms(c.median), Ms(c.p90),
                          Ms(c.mean), "-", "-", ""});
    }
    CloseWorkspace(e.workspaces, a);
    CloseWorkspace(e.workspaces, b);
}

// One direct stream of `head -c len /dev/zero`, checked.
void DirectStream(Env &e, uint64_t len, bool through_init)
{
    std::vector<std::string> argv = {"/bin/head", "-c", std::to_string(len), "/dev/zero"};
    std::string id =
        e.engine.ExecCreate(e.container, through_init ? ServerExecBody(argv) : PlainExecBody(argv));
    Demux d;
    e.engine.ExecStartAttached(id, &d);
    if (through_init) {
        if (d.out() != len || d.err_tail() != kRecordOk)
            Fail("direct stream through the init: %llu of %llu B, stderr %.200s",
                 (unsigned long long)d.out(), (unsigned long long)len, d.err_head().c_str());
        return;
    }
    struct ws_docker_exec_state st = e.engine.ExecInspect(id);
    if (d.out() != len || d.err() || !st.exited || st.exit_code != 0)
        Fail("direct stream: %llu of %llu B, %llu B of stderr, exit code %d",
             (unsigned long long)d.out(), (unsigned long long)len, (unsigned long long)d.err(),
             st.exit_code);
}

void BenchStream(Env &e)
{
    SetUpExecTargets(e);
    uint64_t len = (uint64_t)e.opt.stream_mib * kMiB;
    uint64_t events = 0, event_bytes = 0;
    auto ws_one = [&](uint64_t bytes) {
        StreamResult r = RpcStream(e.exec, e.ws_id, bytes);
        events += r.events;
        event_bytes += r.stdout_bytes;
        const v1::Exited &x = r.exited;
        if (r.stdout_bytes != bytes || x.stdout().bytes_total() != bytes || r.stderr_bytes != 0 ||
            x.cause() != v1::EXIT_CAUSE_EXITED || x.exit_code() != 0)
            Fail("Start: %llu of %llu B in stdout events, bytes_total %llu, %llu B of stderr, "
                 "cause %s, exit code %d",
                 (unsigned long long)r.stdout_bytes, (unsigned long long)bytes,
                 (unsigned long long)x.stdout().bytes_total(), (unsigned long long)r.stderr_bytes,
                 v1::ExitCause_Name(x.cause()).c_str(), x.exit_code());
    };
    auto node_one = [&](uint64_t bytes) {
        std::vector<std::string> w = e.node.Ask(Fmt("stream %llu", (unsigned long long)bytes));
        if (w.size() != 4 || strtoull(w[1].c_str(), nullptr, 10) != bytes || w[2] != "0" ||
            w[3] != "0")
            Fail("dockerode stream: %s of %llu B of stdout, %s B of stderr, exit code %s",
                 w.size() > 1 ? w[1].c_str() : "?", (unsigned long long)bytes,
                 w.size() > 2 ? w[2].c_str() : "?", w.size() > 3 ? w[3].c_str() : "?");
        return strtod(w[0].c_str(), nullptr);
    };
    auto timed = [&](const std::function<void(uint64_t)> &fn) {
        return [fn, len](int n) { return Times(n, [&] { fn(len); }); };
    };
    // A small stream of each side first, untimed.
    ws_one(4 * kMiB);
    DirectStream(e, 4 * kMiB, false);
    DirectStream(e, 4 * kMiB, true);
    std::vector<Side> sides = {
        {"workspaced Start", timed(ws_one), e.server.pid()},
        {"direct: attached exec start, frames demuxed",
         timed([&](uint64_t b) { DirectStream(e, b, false); }), 0},
        {"direct: the server's exec (through its init)",
         timed([&](uint64_t b) { DirectStream(e, b, true); }), 0},
        {"dockerode: exec.start + demuxStream",
         [&](int n) {
             std::vector<double> ns;
             for (int i = 0; i < n; i++)
                 ns.push_back(node_one(len));
             return ns;
         },
         e.node.pid(), e.node.ok(), e.node.why()},
    };
    if (e.node.ok())
        node_one(4 * kMiB);
    events = event_bytes = 0;
    std::vector<SideResult> res = Measure(sides, 0, e.opt.stream_runs, 1);

    std::string op = Fmt("Start head -c %llu MiB", (unsigned long long)(len / kMiB));
    Stats ws = Summarize(res[0].ns);
    double ws_rate = (double)len / ws.median;
    for (size_t k = 0; k < sides.size(); k++) {
        if (!sides[k].available) {
            g_rows.push_back(
                {op, sides[k].name, "-", "not measured", "-", "-", "-", "-", sides[k].why});
            continue;
        }
        Stats s = Summarize(res[k].ns);
        double rate = (double)len / s.median;
        Row r = {op,
                 sides[k].name,
                 std::to_string(s.n),
                 Rate((double)len, s.median) + " (" + Ms(s.median) + ")",
                 Rate((double)len, s.p90),
                 Rate((double)len, s.mean),
                 k ? Ratio(ws.median, s.median) : "-",
                 k ? Ratio(ws.mean, s.mean) : "-",
                 ""};
        if (k == 1)
            r.goal = Goal(ws_rate >= kGoalStreamVsDirect * rate,
                          Fmt("workspaced at %.0f%% of direct, goal >= %.0f%%",
                              100 * ws_rate / rate, 100 * kGoalStreamVsDirect));
        else if (k == 3)
            r.goal = Goal(ws_rate > rate, Fmt("workspaced at %.0f%% of dockerode, goal: faster",
                                              100 * ws_rate / rate));
        g_rows.push_back(r);
    }
    g_rows.push_back(
        {op + ": stdout events", "workspaced Start", "",
         Fmt("%.0f per run", (double)events / e.opt.stream_runs),
         Fmt("avg %.1f KiB", events ? (double)event_bytes / (double)events / 1024 : 0.0), "", "",
         "", ""});
    double gib = (double)len * e.opt.stream_runs / (double)(1024 * kMiB);
    for (size_t k = 0; k < sides.size(); k++) {
        if (!sides[k].available)
            continue;
        std::string who =
            k == 0 ? Fmt("server %.2f s + relays %.2f s; client %.2f s", res[k].actor.self / gib,
                         res[k].actor.children / gib, res[k].client / gib)
                   : Fmt("%s %.2f s", ActorName(sides[k], sides[0]), res[k].actor.self / gib);
        g_rows.push_back({op + ": CPU per GiB", sides[k].name, "", who,
                          Fmt("dockerd %.2f s", res[k].dockerd / gib), "", "", "", ""});
    }
}

// ---- the in-box agent ----

// A docker workspace under `runtime` whose commands start `mode`, of the
// bench's image or another.
std::string OpenDockerMode(Env &e, const char *runtime, v1::ExecMode mode,
                           const std::string &image = "")
{
    v1::OpenRequest rq = DockerOpenRequest(image.empty() ? e.opt.image : image);
    rq.mutable_docker()->set_runtime(runtime);
    rq.mutable_docker()->set_exec_mode(mode);
    return OpenDocker(e.workspaces, rq);
}

// The floor: a local-bash workspace with the same allowlist.
std::string OpenLocalBash(Env &e)
{
    v1::OpenRequest rq;
    rq.mutable_local_bash();
    rq.mutable_capabilities()->mutable_fs();
    auto *shell = rq.mutable_capabilities()->mutable_shell();
    for (const char *c : {"/bin/true", "/bin/head", "/bin/cat"})
        shell->add_allowed_commands(c);
    return OpenDocker(e.workspaces, rq);
}

v1::RunRequest TrueIn(const std::string &id)
{
    v1::RunRequest req;
    req.set_workspace_id(id);
    req.mutable_process()->add_argv("/bin/true");
    return req;
}

// One Run of `head -c n /dev/zero`; fails unless exactly n NULs came back.
void RpcRunHead(v1::Exec::Stub *exec, const std::string &id, size_t n)
{
    v1::RunRequest req;
    req.set_workspace_id(id);
    for (const std::string &a :
         {std::string("/bin/head"), std::string("-c"), std::to_string(n), std::string("/dev/zero")})
        req.mutable_process()->add_argv(a);
    grpc::ClientContext ctx;
    ctx.set_deadline(In(300));
    v1::RunResponse resp;
    Check(exec->Run(&ctx, req, &resp), "Run /bin/head");
    if (resp.exited().cause() != v1::EXIT_CAUSE_EXITED || resp.exited().exit_code() != 0 ||
        resp.stdout().size() != n || resp.stdout().find_first_not_of('\0') != std::string::npos)
        Fail("Run head -c %zu: cause %s, exit code %d, %zu bytes of stdout", n,
             v1::ExitCause_Name(resp.exited().cause()).c_str(), resp.exited().exit_code(),
             resp.stdout().size());
}

// Latency rows with p99 and the ratio of side 0 over each; goals are added
// by the caller (indices into g_rows from the returned first row).
size_t AgentLatencyRows(const std::string &op, const std::vector<Side> &sides,
                        const std::vector<SideResult> &res)
{
    size_t first = g_rows.size();
    Stats ws = Summarize(res[0].ns);
    for (size_t k = 0; k < sides.size(); k++) {
        if (!sides[k].available) {
            g_rows.push_back(
                {op, sides[k].name, "-", "not measured", "-", "-", "-", "-", sides[k].why});
            continue;
        }
        Stats s = Summarize(res[k].ns);
        Row r = {op,
                 sides[k].name,
                 std::to_string(s.n),
                 Ms(s.median),
                 Ms(s.p90),
                 Ms(s.mean),
                 k ? Ratio(ws.median, s.median) : "-",
                 k ? Ratio(ws.mean, s.mean) : "-",
                 "",
                 Ms(s.p99)};
        g_rows.push_back(r);
    }
    return first;
}

// Run /bin/true in docker agent mode against per-command mode, the Engine
// API's exec called directly, dockerode and local-bash, taking turns; the
// same under gVisor; 1 GiB streamed out of each box against local-bash;
// Open and the first command after it; 100 concurrent commands in one box.
void BenchAgent(Env &e)
{
    SetUpExecTargets(e);
    const int runs = e.opt.agent_runs, warm = std::max(5, runs / 20), block = 20;
    std::string agent = OpenDockerMode(e, "runc", v1::EXEC_MODE_AGENT);
    std::string per_cmd = OpenDockerMode(e, "runc", v1::EXEC_MODE_PER_COMMAND);
    std::string agent_sc = OpenDockerMode(e, "runsc", v1::EXEC_MODE_AGENT);
    std::string per_cmd_sc = OpenDockerMode(e, "runsc", v1::EXEC_MODE_PER_COMMAND);
    std::string bash = OpenLocalBash(e);
    v1::RunRequest ta = TrueIn(agent), tp = TrueIn(per_cmd), tas = TrueIn(agent_sc),
                   tps = TrueIn(per_cmd_sc), tb = TrueIn(bash);
    for (const auto *rq : {&ta, &tp, &tas, &tps, &tb})
        RpcRunTrue(e.exec, *rq);
    auto rpc = [&](const v1::RunRequest &rq) {
        return [&e, &rq](int n) { return Times(n, [&] { RpcRunTrue(e.exec, rq); }); };
    };

    std::vector<Side> sides = {
        {"docker agent mode (runc)", rpc(ta), e.server.pid()},
        {"docker per-command (runc)", rpc(tp), e.server.pid()},
        {"direct: exec create + attached start + inspect",
         [&](int n) { return Times(n, [&] { DirectRunTrue(e); }); }, 0},
        {"dockerode: exec + start (hijack) + inspect",
         [&](int n) { return e.node.AskTimes(Fmt("run %d", n), n); }, e.node.pid(), e.node.ok(),
         e.node.why()},
        {"local-bash (the floor)", rpc(tb), e.server.pid()},
    };
    std::vector<SideResult> res = Measure(sides, warm, runs, block);
    size_t at = AgentLatencyRows("Run /bin/true, agent", sides, res);
    Stats a = Summarize(res[0].ns), direct = Summarize(res[2].ns), floor = Summarize(res[4].ns);
    g_rows[at].goal = Goal(a.median < kGoalAgentRunMs * 1e6,
                           Fmt("p50 %.2f ms, goal under %.0f ms", a.median / 1e6, kGoalAgentRunMs));
    g_rows[at + 2].goal =
        Goal(direct.median >= kGoalAgentVsDirect * a.median,
             Fmt("%.1fx faster, goal >= %.0fx", direct.median / a.median, kGoalAgentVsDirect));
    g_rows[at + 4].goal = Goal(a.median - floor.median <= kGoalAgentOverBashMs * 1e6,
                               Fmt("%+.2f ms, goal within %.0f ms", (a.median - floor.median) / 1e6,
                                   kGoalAgentOverBashMs));

    std::vector<Side> gv = {
        {"docker agent mode (runsc)", rpc(tas), e.server.pid()},
        {"docker per-command (runsc)", rpc(tps), e.server.pid()},
        {"local-bash (the floor)", rpc(tb), e.server.pid()},
    };
    res = Measure(gv, warm, runs, block);
    at = AgentLatencyRows("Run /bin/true, agent under gVisor", gv, res);
    Stats g = Summarize(res[0].ns), gf = Summarize(res[2].ns);
    g_rows[at + 2].goal = Goal(
        g.median <= kGoalAgentGvisorVsBash * gf.median,
        Fmt("%.2fx local-bash, goal within %.0fx", g.median / gf.median, kGoalAgentGvisorVsBash));

    // Streaming: each box's head -c LEN, byte-checked, against local-bash.
    // The boxes run Debian's image, so that head is the host's own GNU
    // coreutils (busybox's head writes in 4 KiB pieces); per-command mode,
    // whose output comes through the daemon, for comparison.
    std::string deb_agent = OpenDockerMode(e, "runc", v1::EXEC_MODE_AGENT, kStreamImage),
                deb_per_cmd = OpenDockerMode(e, "runc", v1::EXEC_MODE_PER_COMMAND, kStreamImage),
                deb_agent_sc = OpenDockerMode(e, "runsc", v1::EXEC_MODE_AGENT, kStreamImage),
                deb_per_cmd_sc =
                    OpenDockerMode(e, "runsc", v1::EXEC_MODE_PER_COMMAND, kStreamImage);
    uint64_t len = (uint64_t)e.opt.agent_stream_mib * kMiB;
    auto stream = [&](const std::string &id) {
        return [&e, id, len](int n) {
            return Times(n, [&] {
                StreamResult r = RpcStream(e.exec, id, len);
                if (r.stdout_bytes != len || r.exited.cause() != v1::EXIT_CAUSE_EXITED ||
                    r.exited.exit_code() != 0)
                    Fail("stream: %llu of %llu B, cause %s", (unsigned long long)r.stdout_bytes,
                         (unsigned long long)len, v1::ExitCause_Name(r.exited.cause()).c_str());
            });
        };
    };
    std::vector<Side> ss = {
        {"docker agent mode (runc)", stream(deb_agent), e.server.pid()},
        {"docker agent mode (runsc)", stream(deb_agent_sc), e.server.pid()},
        {"docker per-command (runc)", stream(deb_per_cmd), e.server.pid()},
        {"docker per-command (runsc)", stream(deb_per_cmd_sc), e.server.pid()},
        {"local-bash (the floor)", stream(bash), e.server.pid()},
    };
    res = Measure(ss, 0, e.opt.stream_runs, 1);
    std::string op = Fmt("Start head -c %d MiB, agent", e.opt.agent_stream_mib);
    Stats fl = Summarize(res[4].ns);
    for (size_t k = 0; k < ss.size(); k++) {
        Stats s = Summarize(res[k].ns);
        Row r = {op,
                 ss[k].name,
                 std::to_string(s.n),
                 Rate((double)len, s.median) + " (" + Ms(s.median) + ")",
                 Rate((double)len, s.p90),
                 Rate((double)len, s.mean),
                 k < 4 ? Fmt("%.0f%% of local-bash", 100 * fl.median / s.median) : "-",
                 "-",
                 ""};
        if (k < 2) // the goal is agent mode's
            r.goal = Goal(fl.median >= kGoalAgentStreamVsBash * s.median,
                          Fmt("%.0f%% of local-bash's rate, goal >= %.0f%%",
                              100 * fl.median / s.median, 100 * kGoalAgentStreamVsBash));
        g_rows.push_back(r);
    }

    // Open, then the first command: each mode in turn, Close untimed.
    for (const char *runtime : {"runc", "runsc"}) {
        std::vector<double> open_ns[2], first_ns[2];
        for (int i = 0; i < e.opt.agent_opens; i++)
            for (int m = 0; m < 2; m++) {
                int k = (m + i) % 2;
                auto t0 = Clock::now();
                std::string id =
                    OpenDockerMode(e, runtime, k ? v1::EXEC_MODE_PER_COMMAND : v1::EXEC_MODE_AGENT);
                auto t1 = Clock::now();
                RpcRunTrue(e.exec, TrueIn(id));
                auto t2 = Clock::now();
                open_ns[k].push_back(Nanos(t0, t1));
                first_ns[k].push_back(Nanos(t1, t2));
                CloseWorkspace(e.workspaces, id);
            }
        Stats oa = Summarize(open_ns[0]), op_ = Summarize(open_ns[1]);
        Stats fa = Summarize(first_ns[0]), fp = Summarize(first_ns[1]);
        std::string o = Fmt("Open, agent (%s)", runtime),
                    f = Fmt("first Run after Open (%s)", runtime);
        g_rows.push_back({o, "agent mode", std::to_string(oa.n), Ms(oa.median), Ms(oa.p90),
                          Ms(oa.mean), Ratio(oa.median, op_.median), Ratio(oa.mean, op_.mean),
                          Goal(oa.median <= kGoalAgentOpen * op_.median,
                               Fmt("%+.1f%% of per-command, goal within +%.0f%%",
                                   100 * (oa.median / op_.median - 1), 100 * (kGoalAgentOpen - 1))),
                          Ms(oa.p99)});
        g_rows.push_back({o, "per-command", std::to_string(op_.n), Ms(op_.median), Ms(op_.p90),
                          Ms(op_.mean), "-", "-", "", Ms(op_.p99)});
        g_rows.push_back({f, "agent mode", std::to_string(fa.n), Ms(fa.median), Ms(fa.p90),
                          Ms(fa.mean), Ratio(fa.median, fp.median), Ratio(fa.mean, fp.mean), "",
                          Ms(fa.p99)});
        g_rows.push_back({f, "per-command", std::to_string(fp.n), Ms(fp.median), Ms(fp.p90),
                          Ms(fp.mean), "-", "-", "", Ms(fp.p99)});
    }

    // Concurrent commands in one box, each with its own exact output.
    for (const std::string *id : {&agent, &agent_sc}) {
        const int n = e.opt.agent_concurrency;
        std::vector<std::thread> th;
        std::vector<std::string> errors(n);
        auto t0 = Clock::now();
        for (int i = 0; i < n; i++)
            th.emplace_back([&, i] {
                try {
                    RpcRunHead(e.exec, *id, 1000 + (size_t)i);
                } catch (const BenchError &ex) {
                    errors[i] = ex.what();
                }
            });
        for (auto &t : th)
            t.join();
        double ns = Nanos(t0, Clock::now());
        int bad = 0;
        std::string first;
        for (const auto &er : errors)
            if (!er.empty() && bad++ == 0)
                first = er;
        g_rows.push_back({Fmt("%d concurrent Runs in one box", n),
                          id == &agent ? "docker agent mode (runc)" : "docker agent mode (runsc)",
                          std::to_string(n), Ms(ns) + " (all)", "-", Ms(ns / n) + " each", "-", "-",
                          Goal(bad == 0, bad ? Fmt("%d wrong: %s", bad, first.c_str())
                                             : "all complete with exact output")});
    }
    for (const std::string *id : {&agent, &per_cmd, &agent_sc, &per_cmd_sc, &bash, &deb_agent,
                                  &deb_per_cmd, &deb_agent_sc, &deb_per_cmd_sc})
        CloseWorkspace(e.workspaces, *id);
}

void Usage(FILE *f)
{
    fprintf(f,
            "usage: docker_bench --server PATH [options]\n"
            "  --server PATH        the workspaced binary (required); the docker init and\n"
            "                       relay are taken from beside it (docker/), unless\n"
            "                       WORKSPACED_DOCKER_INIT is set\n"
            "  --dockerode DIR      tests/bench/dockerode (bench.js and node_modules);\n"
            "                       without it there is no dockerode side\n"
            "  --node PATH          the node binary [node]\n"
            "  --socket PATH        the daemon's socket [%s]\n"
            "  --image REF          the image [%s]\n"
            "  --opens N            timed Opens of each side [30]\n"
            "  --open-warmup N      untimed Opens of each side before [2]\n"
            "  --open-block N       Opens per turn [5]\n"
            "  --runs N             timed Runs of each side [100]\n"
            "  --run-warmup N       untimed Runs of each side before [10]\n"
            "  --run-block N        Runs per turn [20]\n"
            "  --stream-mib N       bytes head -c writes, in MiB [200]\n"
            "  --stream-runs N      streams of each side (median reported) [3]\n"
            "  --server-threads N   pass --threads N to the server [its default]\n"
            "  --agent-runs N       timed Runs of each side in the agent part [300]\n"
            "  --agent-stream-mib N the agent part's stream, in MiB [1024]\n"
            "  --agent-opens N      Opens of each mode in the agent part [10]\n"
            "  --agent-concurrency N concurrent Runs in one box [100]\n"
            "  --only LIST          parts to run, comma-separated: open,run,stream,runtimes,agent\n"
            "                       [all]\n"
            "  --tmp DIR            where the state directory goes [$TMPDIR or /tmp]\n"
            "  --keep               keep the state directory\n",
            kDefaultSocket, kDefaultImage);
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
            {"--opens", &o.opens, 1, 100000},
            {"--open-warmup", &o.open_warmup, 0, 100000},
            {"--open-block", &o.open_block, 1, 100000},
            {"--runs", &o.runs, 1, 10000000},
            {"--run-warmup", &o.run_warmup, 0, 10000000},
            {"--run-block", &o.run_block, 1, 10000000},
            {"--stream-mib", &o.stream_mib, 5, 65536},
            {"--stream-runs", &o.stream_runs, 1, 1000},
            {"--server-threads", &o.server_threads, 1, 1024},
            {"--agent-runs", &o.agent_runs, 1, 10000000},
            {"--agent-stream-mib", &o.agent_stream_mib, 1, 65536},
            {"--agent-opens", &o.agent_opens, 1, 100000},
            {"--agent-concurrency", &o.agent_concurrency, 1, 1000},
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
        std::string *strs[] = {&o.server, &o.dockerode, &o.node, &o.socket,
                               &o.image,  &o.only,      &o.tmp};
        const char *names[] = {"--server", "--dockerode", "--node", "--socket",
                               "--image",  "--only",      "--tmp"};
        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
            if (a == names[k] && v) {
                *strs[k] = v;
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

std::string Absolute(const std::string &path)
{
    char *r = realpath(path.c_str(), nullptr);
    if (!r)
        Die("%s: %s", path.c_str(), strerror(errno));
    std::string out = r;
    free(r);
    return out;
}

// Makes the server and the direct side use the same init: the one
// WORKSPACED_DOCKER_INIT names, else the one the server finds beside
// itself.
std::string PinInit(const std::string &server)
{
    const char *forced = getenv(kInitEnv);
    if (forced && forced[0])
        return forced;
    std::string dir = server.substr(0, server.rfind('/') + 1);
    for (const char *rel : {"", "progs/", "server/progs/"}) {
        std::string p = dir + rel + kInitName;
        if (access(p.c_str(), X_OK) == 0) {
            setenv(kInitEnv, p.c_str(), 1);
            return p;
        }
    }
    Die("no %s beside %s (build //server:workspaced, or set %s to an absolute path)", kInitName,
        server.c_str(), kInitEnv);
}

// Force-removes every container carrying the bench's label (its own
// leftovers after a failure; the server's are removed by Close). The list
// is parsed here: ws_docker_parse_container_ids refuses every list (its
// loader accepts only a JSON object; see README).
void RemoveLabelled(Engine &engine, const std::string &label)
{
    char path[WS_DOCKER_PATH_MAX];
    if (ws_docker_path_list_by_label(engine.version(), WS_DOCKER_LABEL_SERVER, label.c_str(), path,
                                     sizeof(path)) < 0)
        return;
    try {
        Engine::Reply r = engine.Call("GET", path);
        json_t *root =
            r.status == 200 ? json_loadb(r.body.data(), r.body.size(), 0, nullptr) : nullptr;
        std::vector<std::string> ids;
        size_t i;
        json_t *v;
        json_array_foreach(root, i, v)
        {
            const char *id = json_string_value(json_object_get(v, "Id"));
            if (id && ws_docker_id_valid(id))
                ids.push_back(id);
        }
        json_decref(root);
        for (const auto &id : ids)
            engine.Call("DELETE", engine.prefix() + "/containers/" + id + "?force=true&v=true");
    } catch (const BenchError &) {
    }
}

void WriteFile(const std::string &path, const std::string &data)
{
    FILE *f = fopen(path.c_str(), "we");
    if (!f || fwrite(data.data(), 1, data.size(), f) != data.size() || fclose(f) != 0)
        Die("write %s: %s", path.c_str(), strerror(errno));
}

} // namespace

int main(int argc, char **argv)
{
    Options opt = ParseArgs(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    opt.server = Absolute(opt.server);
    if (!opt.dockerode.empty())
        opt.dockerode = Absolute(opt.dockerode);
    std::string init = PinInit(opt.server);
    // The relay the server runs: the one its variable names, else the one
    // beside it.
    const char *forced_relay = getenv(kRelayEnv);
    std::string relay =
        forced_relay && forced_relay[0]
            ? forced_relay
            : opt.server.substr(0, opt.server.rfind('/') + 1) + "progs/" + kRelayName;
    if (access(relay.c_str(), X_OK) != 0)
        relay.clear();

    std::string tmpl = opt.tmp + "/docker_bench.XXXXXX";
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
    std::string direct_dir = base + "/direct";
    std::string node_dir = base + "/dockerode";
    for (const std::string &d : {direct_dir, node_dir})
        if (mkdir(d.c_str(), 0700) < 0)
            Die("mkdir %s: %s", d.c_str(), strerror(errno));

    Engine engine(opt.socket);
    std::string api;
    try {
        api = engine.Negotiate();
    } catch (const BenchError &ex) {
        Die("the Docker daemon at %s: %s (start it with tests/fixtures/dockerd.sh)",
            opt.socket.c_str(), ex.what());
    }
    // The bench's containers carry this value of the server label.
    std::string label = Fmt("docker_bench-%d", (int)getpid());
    g_remove_containers = [&] { RemoveLabelled(engine, label); };
    Engine::Reply img = engine.Call("GET", engine.prefix() + "/images/" + opt.image + "/json");
    if (img.status != 200)
        Die("image %s: HTTP %ld (build it with tests/fixtures/image/build.sh)", opt.image.c_str(),
            img.status);

    struct utsname u;
    uname(&u);
    auto start = Clock::now();
    std::string direct_body, node_body;
    try {
        direct_body = CreateBody(opt.image, direct_dir, init, label, "d");
        node_body = CreateBody(opt.image, node_dir, init, label, "n");
    } catch (const BenchError &ex) {
        Die("%s", ex.what());
    }
    std::string body_file = base + "/dockerode-create.json";
    WriteFile(body_file, node_body);
    {
        Server server(opt.server, state, opt.server_threads);
        auto channel = server.NewChannel();
        auto workspaces = v1::Workspaces::NewStub(channel);
        auto exec = v1::Exec::NewStub(channel);
        auto node = std::make_unique<Node>(opt, body_file, api, label + "-");
        Env e{opt,   server, workspaces.get(), exec.get(),  channel, engine, *node, init,
              relay, label,  direct_dir,       direct_body, "",      "",     false, 0};
        std::string dockerode_version = "-";
        if (node->ok()) {
            FILE *f = fopen((opt.dockerode + "/node_modules/dockerode/package.json").c_str(), "re");
            char line[256];
            while (f && fgets(line, sizeof(line), f)) {
                char v[64];
                if (sscanf(line, " \"version\": \"%63[^\"]\"", v) == 1) {
                    dockerode_version = v;
                    break;
                }
            }
            if (f)
                fclose(f);
        }
        printf("docker_bench: %ld CPUs, Linux %s, server pid %d, dockerd pid %d, API %s, image "
               "%s, init %s, dockerode %s%s%s; Opens %d (+%d warm-up, blocks of %d), Runs %d (+%d, "
               "blocks of %d), stream %d MiB x %d\n",
               sysconf(_SC_NPROCESSORS_ONLN), u.release, (int)server.pid(), (int)DockerdPid(),
               api.c_str(), opt.image.c_str(), init.c_str(), dockerode_version.c_str(),
               node->ok() ? "" : ": ", node->ok() ? "" : node->why().c_str(), opt.opens,
               opt.open_warmup, opt.open_block, opt.runs, opt.run_warmup, opt.run_block,
               opt.stream_mib, opt.stream_runs);
        printf("docker_bench: create body (every side): %s\n", direct_body.c_str());
        fflush(stdout);

        auto wanted = [&](const char *part) {
            std::string list = "," + opt.only + ",";
            return list.find(std::string(",") + part + ",") != std::string::npos;
        };
        if (wanted("open")) {
            Part("Open", [&] { BenchOpen(e); });
            fprintf(stderr, "docker_bench: Open done at %.1f s\n", Seconds(start, Clock::now()));
        }
        if (wanted("run")) {
            Part("Run", [&] { BenchRun(e); });
            fprintf(stderr, "docker_bench: Run done at %.1f s\n", Seconds(start, Clock::now()));
        }
        if (wanted("stream")) {
            Part("Start stream", [&] { BenchStream(e); });
            fprintf(stderr, "docker_bench: streaming done at %.1f s\n",
                    Seconds(start, Clock::now()));
        }
        if (wanted("agent")) {
            Part("agent", [&] { BenchAgent(e); });
            fprintf(stderr, "docker_bench: the in-box agent done at %.1f s\n",
                    Seconds(start, Clock::now()));
        }
        if (wanted("runtimes")) {
            Part("runtimes", [&] { BenchRuntimes(e); });
            fprintf(stderr, "docker_bench: runsc against runc done at %.1f s\n",
                    Seconds(start, Clock::now()));
        }
        try {
            CloseWorkspace(workspaces.get(), e.ws_id);
            if (!e.container.empty())
                DirectRemove(e, e.container);
        } catch (const BenchError &ex) {
            fprintf(stderr, "docker_bench: cleanup: %s\n", ex.what());
        }
        node.reset();
    }
    RemoveLabelled(engine, label);
    g_remove_containers = nullptr;
    printf("\n");
    PrintTable();
    printf("\nws/side: workspaced's time over that side's (for streams, the side's rate over "
           "workspaced's); MB/s = 1e6 B/s; stream p90 and mean are rates at those times. Total "
           "%.1f s.\n",
           Seconds(start, Clock::now()));
    if (!opt.keep)
        RemoveTree(base);
    else
        printf("state kept in %s\n", base.c_str());
    curl_global_cleanup();
    return g_failed ? 1 : 0;
}
