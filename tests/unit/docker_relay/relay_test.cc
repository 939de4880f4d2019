// workspaced-docker-relay, run as the server runs it: a process with pipes
// (or a PTY) as fds 0, 1, 2 and a status pipe. Against the real daemon at
// /var/run/docker.sock (these tests fail, never skip, without it) with a
// busybox container per test, and against a fake daemon on a unix socket
// for exact bytes: frames split anyhow, malformed streams, refusals, the
// resize and inspect requests.
#include <gtest/gtest.h>

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace
{

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

const char *g_relay; // the binary, from argv[1]
const char *g_init;  // the in-container init, from argv[2]

const char kDockerSock[] = "/var/run/docker.sock";
const char kImage[] = "workspaced-test:busybox";
const char kExecId[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

// Anything that hangs is a failure, not a wait: a relay that never ends is
// killed after this and the test fails.
constexpr auto kHang = seconds(120);

std::string Record(const std::string &status)
{
    return "\x1b_wsinit;" + status + "\x1b\\";
}

// The record as the init writes it when it was given a nonce.
std::string NonceRecord(const std::string &nonce, const std::string &status)
{
    return Record(nonce + ";" + status);
}

const char kNonce[] = "0123456789abcdef0123456789abcdef";
const char kOtherNonce[] = "fedcba9876543210fedcba9876543210";

// Shell code that writes the record to stderr in one write, as the init does.
std::string ShRecord(const std::string &status)
{
    return "printf '\\033_wsinit;" + status + "\\033\\\\' >&2";
}

std::string Frame(int stream, const std::string &payload)
{
    std::string f(8, '\0');
    uint32_t n = (uint32_t)payload.size();
    f[0] = (char)stream;
    f[4] = (char)(n >> 24);
    f[5] = (char)(n >> 16);
    f[6] = (char)(n >> 8);
    f[7] = (char)n;
    return f + payload;
}

std::string RandomHex(size_t bytes)
{
    std::string s;
    unsigned char b;
    FILE *f = fopen("/dev/urandom", "re");
    for (size_t i = 0; i < bytes && f && fread(&b, 1, 1, f) == 1; i++) {
        static const char hex[] = "0123456789abcdef";
        s += hex[b >> 4];
        s += hex[b & 15];
    }
    if (f)
        fclose(f);
    return s;
}

std::string RandomBytes(size_t n)
{
    std::string s(n, '\0');
    FILE *f = fopen("/dev/urandom", "re");
    EXPECT_NE(nullptr, f);
    if (f) {
        EXPECT_EQ(n, fread(&s[0], 1, n, f));
        fclose(f);
    }
    return s;
}

// --- Running the relay -------------------------------------------------------

struct Result {
    int code = -1; // exit status, or -1 when it did not exit normally
    int sig = 0;
    std::string out, err, status;
};

// The relay's end of things, as the server would set them up.
struct Spawn {
    bool stdin_pipe = false; // else /dev/null
    int tty_slave = -1;      // fds 0, 1, 2 (and the controlling terminal)
    bool close_fd1 = false;  // spawn with fd 1 closed
    bool no_status_fd = false;
};

class Relay
{
  public:
    // Every relay a test starts is waited for by Finish, which checks how
    // it ended; one that never was is a test that did not look.
    ~Relay()
    {
        if (pid_ > 0) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
            if (!::testing::Test::HasFailure())
                ADD_FAILURE() << "a relay was started but never finished";
        }
        for (int fd : {in_, out_, err_, status_})
            if (fd >= 0)
                close(fd);
    }

    void Start(const std::vector<std::string> &args, const Spawn &sp = Spawn())
    {
        int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, st[2] = {-1, -1};
        int fd0, fd1, fd2;

        ASSERT_EQ(0, pipe2(st, O_CLOEXEC));
        if (sp.tty_slave >= 0) {
            fd0 = fd1 = fd2 = sp.tty_slave;
        } else {
            if (sp.stdin_pipe) {
                ASSERT_EQ(0, pipe2(in, O_CLOEXEC));
                fd0 = in[0];
            } else {
                fd0 = in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
                ASSERT_GE(fd0, 0);
            }
            ASSERT_EQ(0, pipe2(out, O_CLOEXEC));
            ASSERT_EQ(0, pipe2(err, O_CLOEXEC));
            fd1 = sp.close_fd1 ? -1 : out[1];
            fd2 = err[1];
        }
        std::vector<std::string> all{g_relay};
        all.insert(all.end(), args.begin(), args.end());
        std::vector<char *> argv;
        for (auto &a : all)
            argv.push_back(const_cast<char *>(a.c_str()));
        argv.push_back(nullptr);
        int src[4] = {fd0, fd1, fd2, sp.no_status_fd ? -1 : st[1]};
        bool ctty = sp.tty_slave >= 0;

        pid_ = fork();
        ASSERT_GE(pid_, 0);
        if (pid_ == 0) {
            int hi[4];
            for (int i = 0; i < 4; i++)
                hi[i] = src[i] < 0 ? -1 : fcntl(src[i], F_DUPFD_CLOEXEC, 20);
            if (ctty) {
                setsid();
                ioctl(src[0], TIOCSCTTY, 0);
            }
            for (int i = 0; i < 4; i++) {
                if (hi[i] >= 0)
                    dup2(hi[i], i);
                else
                    close(i);
            }
            // The test ignores SIGPIPE, and an ignored signal stays ignored
            // across exec: give the relay what the server's spawn gives it.
            signal(SIGPIPE, SIG_DFL);
            execv(argv[0], argv.data());
            _exit(126);
        }
        close(st[1]);
        status_ = st[0];
        if (sp.tty_slave < 0) {
            close(in[0]);
            close(out[1]);
            close(err[1]);
            in_ = in[1];
            out_ = out[0];
            err_ = err[0];
            if (in_ >= 0)
                fcntl(in_, F_SETFL, O_NONBLOCK);
        }
    }

    // For a TTY run: the master to read the output from (not closed here).
    void ReadFrom(int master)
    {
        out_ = dup(master);
    }

    // The stdin pipe's write end, now the caller's.
    int TakeStdin()
    {
        int fd = in_;
        in_ = -1;
        return fd;
    }

    pid_t pid() const
    {
        return pid_;
    }
    int out_fd() const
    {
        return out_;
    }
    void CloseOut()
    {
        close(out_);
        out_ = -1;
    }

    // Feeds input (then closes stdin), reads every fd to its end, waits.
    // on_out sees the output as it comes (and may act on it).
    Result Finish(const std::string &input = "",
                  const std::function<void(std::string &)> &on_out = nullptr)
    {
        Result res;
        size_t off = 0;
        auto deadline = Clock::now() + kHang;

        if (in_ >= 0 && input.empty()) {
            close(in_);
            in_ = -1;
        }
        while (out_ >= 0 || err_ >= 0 || status_ >= 0 || in_ >= 0) {
            pollfd p[4];
            int *fds[4] = {&out_, &err_, &status_, &in_};
            std::string *dst[3] = {&res.out, &res.err, &res.status};
            for (int i = 0; i < 4; i++)
                p[i] = pollfd{*fds[i], (short)(i < 3 ? POLLIN : POLLOUT), 0};
            if (poll(p, 4, 1000) < 0 && errno != EINTR) {
                ADD_FAILURE() << "poll: " << strerror(errno);
                break;
            }
            if (Clock::now() > deadline) {
                ADD_FAILURE() << "the relay hangs; output so far: " << res.out.size()
                              << " bytes, stderr: " << res.err;
                kill(pid_, SIGKILL);
                break;
            }
            for (int i = 0; i < 3; i++) {
                if (*fds[i] < 0 || !p[i].revents)
                    continue;
                char buf[65536];
                ssize_t n = read(*fds[i], buf, sizeof(buf));
                if (n > 0) {
                    dst[i]->append(buf, (size_t)n);
                    if (i == 0 && on_out)
                        on_out(res.out);
                } else if (n == 0 || errno != EINTR) {
                    // 0, or EIO from a PTY master whose slave is gone.
                    close(*fds[i]);
                    *fds[i] = -1;
                }
            }
            if (in_ >= 0 && p[3].revents) {
                ssize_t n = write(in_, input.data() + off, input.size() - off);
                if (n > 0)
                    off += (size_t)n;
                if ((n < 0 && errno != EAGAIN && errno != EINTR) || off == input.size()) {
                    close(in_);
                    in_ = -1;
                }
            }
        }
        int ws = 0;
        EXPECT_EQ(pid_, waitpid(pid_, &ws, 0));
        pid_ = -1;
        if (WIFEXITED(ws))
            res.code = WEXITSTATUS(ws);
        else if (WIFSIGNALED(ws))
            res.sig = WTERMSIG(ws);
        // Whatever the test expects of the exit code, the relay ends by
        // exiting, never of a signal (a crash, an abort, SIGPIPE), and no
        // sanitizer reports anything on its stderr: its exit code alone may
        // hide that (ASan's own exit code is one the relay can also give).
        EXPECT_EQ(0, res.sig) << "the relay was killed by signal " << res.sig << " ("
                              << strsignal(res.sig) << "); stderr:\n"
                              << res.err;
        EXPECT_EQ(std::string::npos, res.err.find("Sanitizer")) << res.err;
        EXPECT_EQ(std::string::npos, res.err.find("runtime error:")) << res.err;
        return res;
    }

  private:
    pid_t pid_ = -1;
    int in_ = -1, out_ = -1, err_ = -1, status_ = -1;
};

// Peak resident memory of a process, in KiB (VmHWM), or -1.
long PeakKiB(pid_t pid)
{
    std::string path = "/proc/" + std::to_string(pid) + "/status";
    FILE *f = fopen(path.c_str(), "re");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %ld kB", &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

// --- Talking to the real daemon ----------------------------------------------

size_t Append(char *data, size_t size, size_t nmemb, void *arg)
{
    static_cast<std::string *>(arg)->append(data, size * nmemb);
    return size * nmemb;
}

struct Resp {
    long status = 0;
    std::string body;
};

Resp Docker(const char *method, const std::string &path, const std::string &body = "")
{
    Resp r;
    CURL *e = curl_easy_init();
    curl_slist *h = curl_slist_append(nullptr, "Content-Type: application/json");
    std::string url = "http://localhost" + path;
    curl_easy_setopt(e, CURLOPT_URL, url.c_str());
    curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, kDockerSock);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, 60L);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)body.size());
        curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, body.c_str());
    }
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, Append);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &r.body);
    CURLcode rc = curl_easy_perform(e);
    EXPECT_EQ(CURLE_OK, rc) << method << " " << path << ": " << curl_easy_strerror(rc);
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    return r;
}

std::string JsonString(const std::string &body, const char *key)
{
    json_error_t err;
    json_t *doc = json_loads(body.c_str(), 0, &err);
    std::string v;
    if (doc && json_is_string(json_object_get(doc, key)))
        v = json_string_value(json_object_get(doc, key));
    json_decref(doc);
    return v;
}

bool DaemonReachable(std::string *why)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", kDockerSock);
    bool ok = connect(fd, (sockaddr *)&sa, sizeof(sa)) == 0;
    if (!ok)
        *why = std::string("connect(") + kDockerSock + "): " + strerror(errno);
    close(fd);
    return ok;
}

class RealDaemon : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        std::string why;
        if (!DaemonReachable(&why))
            FAIL() << "the Docker daemon is not reachable (" << why
                   << "); start it with: bash tests/fixtures/dockerd.sh";
        Resp v = Docker("GET", "/version");
        ASSERT_EQ(200, v.status) << v.body;
        api_ = JsonString(v.body, "ApiVersion");
        ASSERT_FALSE(api_.empty());
        Resp img = Docker("GET", std::string("/v") + api_ + "/images/" + kImage + "/json");
        ASSERT_EQ(200, img.status)
            << kImage << " is missing; build it with: bash tests/fixtures/image/build.sh";
        std::string name = "workspaced-relaytest-" + RandomHex(8);
        json_t *doc = ContainerDoc();
        ASSERT_NE(nullptr, doc);
        char *s = json_dumps(doc, JSON_COMPACT);
        Resp c = Docker("POST", V("/containers/create?name=" + name), s);
        free(s);
        json_decref(doc);
        ASSERT_EQ(201, c.status) << c.body;
        container_ = JsonString(c.body, "Id");
        ASSERT_FALSE(container_.empty());
        Resp st = Docker("POST", V("/containers/" + container_ + "/start"));
        ASSERT_EQ(204, st.status) << st.body;
    }
    void TearDown() override
    {
        if (!container_.empty()) {
            Resp r = Docker("DELETE", V("/containers/" + container_ + "?force=true"));
            EXPECT_EQ(204, r.status) << r.body;
        }
    }
    // The body of the container's create.
    virtual json_t *ContainerDoc()
    {
        return json_pack("{s:s, s:[ss], s:{s:s}}", "Image", kImage, "Entrypoint", "sleep",
                         "infinity", "HostConfig", "NetworkMode", "none");
    }
    std::string V(const std::string &path)
    {
        return "/v" + api_ + path;
    }
    // An exec of `sh -c script`, created as the server would (not started).
    std::string Exec(const std::string &script, bool tty = false, bool in = false)
    {
        json_t *doc = json_pack("{s:[sss], s:b, s:b, s:b, s:b, s:s}", "Cmd", "sh", "-c",
                                script.c_str(), "AttachStdout", 1, "AttachStderr", 1, "AttachStdin",
                                in, "Tty", tty, "WorkingDir", "/");
        char *s = json_dumps(doc, JSON_COMPACT);
        Resp r = Docker("POST", V("/containers/" + container_ + "/exec"), s);
        free(s);
        json_decref(doc);
        EXPECT_EQ(201, r.status) << r.body;
        return JsonString(r.body, "Id");
    }
    std::vector<std::string> Args(const std::string &exec_id, std::vector<std::string> flags = {})
    {
        std::vector<std::string> a{"--host", std::string("unix://") + kDockerSock, "--api", api_};
        a.insert(a.end(), flags.begin(), flags.end());
        a.insert(a.end(), {"--status-fd", "3", exec_id});
        return a;
    }
    bool ExecRunning(const std::string &exec_id)
    {
        Resp r = Docker("GET", V("/exec/" + exec_id + "/json"));
        json_t *doc = json_loads(r.body.c_str(), 0, nullptr);
        bool running = doc && json_is_true(json_object_get(doc, "Running"));
        json_decref(doc);
        return running;
    }

    std::string api_;
    std::string container_;
};

TEST_F(RealDaemon, StdoutAndStderrSeparateByteExactAndTheRecordBecomesTheStatusLine)
{
    std::string id =
        Exec("echo out; printf 'x\\000\\377y'; echo err >&2; " + ShRecord("exited 3") + "; exit 3");
    Relay r;
    r.Start(Args(id));
    Result res = r.Finish();
    EXPECT_EQ(3, res.code);
    EXPECT_EQ(std::string("out\nx\0\377y", 8), res.out);
    EXPECT_EQ("err\n", res.err);
    EXPECT_EQ("exited 3\n", res.status);
}

TEST_F(RealDaemon, AnEarlierLookalikePassesThroughUnchanged)
{
    // On stderr followed by more output, and on stdout (not the record's
    // stream) at the very end: both are the command's output.
    std::string id =
        Exec(ShRecord("exited 9") + "; echo after >&2; printf '\\033_wsinit;exited 1\\033\\\\'; " +
             ShRecord("exited 0"));
    Relay r;
    r.Start(Args(id));
    Result res = r.Finish();
    EXPECT_EQ(0, res.code);
    EXPECT_EQ(Record("exited 1"), res.out);
    EXPECT_EQ(Record("exited 9") + "after\n", res.err);
    EXPECT_EQ("exited 0\n", res.status);
}

TEST_F(RealDaemon, ARecordSplitAcrossFramesIsRecognised)
{
    // Two writes with a pause between make two frames.
    std::string id = Exec("echo x >&2; printf '\\033_wsin' >&2; sleep 0.3; "
                          "printf 'it;signaled 9 oom\\033\\\\' >&2");
    Relay r;
    r.Start(Args(id));
    Result res = r.Finish();
    EXPECT_EQ(128 + 9, res.code);
    EXPECT_EQ("x\n", res.err);
    EXPECT_EQ("signaled 9 oom\n", res.status);
}

TEST_F(RealDaemon, WithoutARecordTheExitCodeComesFromInspect)
{
    std::string id = Exec("echo hi; echo oops >&2; exit 7");
    Relay r;
    r.Start(Args(id));
    Result res = r.Finish();
    EXPECT_EQ(7, res.code);
    EXPECT_EQ("hi\n", res.out);
    EXPECT_EQ(0u, res.err.find("oops\n"
                               "workspaced-docker-relay: no exit record came from the container"))
        << res.err;
    EXPECT_EQ("", res.status);
}

TEST_F(RealDaemon, AnUnfinishedRecordAtTheEndIsOutput)
{
    std::string id = Exec("printf '\\033_wsinit;exited 4' >&2; exit 4");
    Relay r;
    r.Start(Args(id));
    Result res = r.Finish();
    EXPECT_EQ(4, res.code);
    EXPECT_EQ(0u, res.err.find("\x1b_wsinit;exited 4"
                               "workspaced-docker-relay: no exit record"))
        << res.err;
    EXPECT_EQ("", res.status);
}

TEST_F(RealDaemon, StdinIsForwardedAndItsEndReachesTheProcess)
{
    std::string input = RandomBytes(1024 * 1024);
    // cat ends only when its stdin does: the half-close got through.
    std::string id = Exec("cat; " + ShRecord("exited 0"), false, true);
    Relay r;
    r.Start(Args(id, {"--stdin"}), Spawn{.stdin_pipe = true});
    Result res = r.Finish(input);
    EXPECT_EQ(0, res.code) << res.err;
    EXPECT_EQ(input.size(), res.out.size());
    EXPECT_TRUE(input == res.out);
    EXPECT_EQ("", res.err);
    EXPECT_EQ("exited 0\n", res.status);
}

TEST_F(RealDaemon, WithoutStdinFd0IsNeverRead)
{
    std::string id = Exec("echo done; " + ShRecord("exited 0"));
    Relay r;
    r.Start(Args(id), Spawn{.stdin_pipe = true});
    int in = r.TakeStdin();
    ASSERT_EQ(4, write(in, "data", 4));
    Result res = r.Finish();
    EXPECT_EQ(0, res.code);
    EXPECT_EQ("done\n", res.out);
    EXPECT_EQ("exited 0\n", res.status);
    // Still in the pipe after the relay is gone.
    int queued = -1;
    EXPECT_EQ(0, ioctl(in, FIONREAD, &queued));
    EXPECT_EQ(4, queued);
    close(in);
}

TEST_F(RealDaemon, ALargeStreamIsHeldBackByASlowReaderInBoundedMemory)
{
    constexpr size_t kSize = 64u * 1024 * 1024;
    // The relay's peak memory while its reader reads nothing (about 11 MiB,
    // 17 MiB with ASan); a relay that buffered would read the whole 64 MiB
    // from the daemon.
    const long kPeakMaxKiB = 32 * 1024;
    std::string id =
        Exec("head -c " + std::to_string(kSize) + " /dev/zero; " + ShRecord("exited 0"));
    Relay r;
    r.Start(Args(id));

    // Wait until the relay has filled its stdout pipe, then give it a
    // while to misbehave: the producer must still be blocked, the relay's
    // memory still small.
    int cap = fcntl(r.out_fd(), F_GETPIPE_SZ);
    ASSERT_GT(cap, 0);
    auto deadline = Clock::now() + kHang;
    int queued = 0;
    // Half: a pipe's pages need not all be full for a writer to block.
    while (ioctl(r.out_fd(), FIONREAD, &queued) == 0 && queued < cap / 2) {
        ASSERT_LT(Clock::now(), deadline) << "the relay never filled its stdout pipe";
        std::this_thread::sleep_for(milliseconds(20));
    }
    long peak = 0;
    for (int i = 0; i < 20; i++) {
        std::this_thread::sleep_for(milliseconds(100));
        peak = PeakKiB(r.pid());
        if (peak > kPeakMaxKiB || !ExecRunning(id))
            break;
    }
    EXPECT_TRUE(ExecRunning(id)) << "the whole stream left the container with nobody reading";
    RecordProperty("relay_peak_kib", (int)peak);
    EXPECT_GT(peak, 0);
    EXPECT_LT(peak, kPeakMaxKiB);

    size_t total = 0, nonzero = 0;
    Result res = r.Finish("", [&](std::string &out) {
        for (char c : out)
            nonzero += c != '\0';
        total += out.size();
        // Keep the test's own memory flat too.
        out.clear();
    });
    EXPECT_EQ(0, res.code) << res.err;
    EXPECT_EQ(kSize, total);
    EXPECT_EQ(0u, nonzero);
    EXPECT_EQ("", res.err);
    EXPECT_EQ("exited 0\n", res.status);
}

TEST_F(RealDaemon, AReaderThatGoesAwayDoesNotStopTheDrainNorTheRecord)
{
    // 16 MiB is far more than the pipes and sockets between hold: if the
    // relay stopped reading when its reader left, the command would never
    // end and neither would the relay.
    std::string id = Exec("head -c 16777216 /dev/zero; echo tail >&2; " + ShRecord("exited 0"));
    Relay r;
    r.Start(Args(id));
    r.CloseOut();
    Result res = r.Finish();
    EXPECT_EQ(0, res.sig);
    EXPECT_EQ(0, res.code) << res.err;
    EXPECT_EQ("tail\n", res.err);
    EXPECT_EQ("exited 0\n", res.status);
}

TEST_F(RealDaemon, TtyOutputIsRawAndTheRecordIsParsed)
{
    int master = -1, slave = -1;
    ASSERT_EQ(0, openpty(&master, &slave, nullptr, nullptr, nullptr));
    // The container's terminal turns "\n" into "\r\n"; were the relay's
    // terminal not raw, it would do so again ("\r\r\n").
    std::string id = Exec("printf 'hello\\nworld'; printf '\\033_wsinit;exited 5\\033\\\\'", true);
    Relay r;
    r.Start(Args(id, {"--tty"}), Spawn{.tty_slave = slave});
    close(slave);
    r.ReadFrom(master);
    Result res = r.Finish();
    close(master);
    EXPECT_EQ(5, res.code) << res.out;
    EXPECT_EQ("hello\r\nworld", res.out);
    EXPECT_EQ("exited 5\n", res.status);
}

TEST_F(RealDaemon, TtySizeIsSetAtStartAndOnEveryChange)
{
    int master = -1, slave = -1;
    winsize ws{};
    ws.ws_row = 40;
    ws.ws_col = 100;
    ASSERT_EQ(0, openpty(&master, &slave, nullptr, nullptr, &ws));
    // Polls for the expected size (bounded), so the test does not depend on
    // when the resize lands.
    auto wait_for = [](const char *want) {
        return std::string("i=0; while [ $i -lt 200 ] && [ \"$(stty size 2>/dev/null)\" != \"") +
               want + "\" ]; do sleep 0.05; i=$((i+1)); done; ";
    };
    std::string id = Exec(wait_for("40 100") + "echo \"A $(stty size)\"; " + wait_for("50 120") +
                              "echo \"B $(stty size)\"; printf '\\033_wsinit;exited 0\\033\\\\'",
                          true);
    Relay r;
    r.Start(Args(id, {"--tty"}), Spawn{.tty_slave = slave});
    close(slave);
    r.ReadFrom(master);
    bool resized = false;
    Result res = r.Finish("", [&](std::string &out) {
        if (!resized && out.find("A 40 100\r\n") != std::string::npos) {
            // The relay's controlling terminal: the kernel sends it SIGWINCH.
            winsize w2{};
            w2.ws_row = 50;
            w2.ws_col = 120;
            ioctl(master, TIOCSWINSZ, &w2);
            resized = true;
        }
    });
    close(master);
    EXPECT_TRUE(resized);
    EXPECT_EQ("A 40 100\r\nB 50 120\r\n", res.out);
    EXPECT_EQ("exited 0\n", res.status);
    EXPECT_EQ(0, res.code);
}

TEST_F(RealDaemon, ARefusedExecExits125WithTheDaemonsMessage)
{
    Relay r;
    r.Start(Args(kExecId));
    Result res = r.Finish();
    EXPECT_EQ(125, res.code);
    EXPECT_EQ(0u, res.err.find("workspaced-docker-relay: the daemon refused the exec: "))
        << res.err;
    EXPECT_NE(std::string::npos, res.err.find(kExecId)) << res.err;
    EXPECT_EQ('\n', res.err.back());
    EXPECT_EQ(1, std::count(res.err.begin(), res.err.end(), '\n'));
    EXPECT_EQ("", res.out);
    EXPECT_EQ("", res.status);
}

// The init and the relay together, in a container as the Docker provider
// hardens it for commands of their own uid: user root only so that the
// init, exec'd as 0:0, gets back KILL, SETGID and SETUID (Docker gives an
// exec those only when the container's user is root and no-new-privileges
// is set) and splits into the command's uid and its own; the keepalive runs
// as the helper uid with nothing.
class HardenedDaemon : public RealDaemon
{
  protected:
    json_t *ContainerDoc() override
    {
        char real[PATH_MAX];
        if (!realpath(g_init, real))
            return nullptr;
        return json_pack("{s:s, s:s, s:[ssss], s:{s:s, s:[s], s:[sss], s:[s], s:b, s:[{s:s, s:s, "
                         "s:s, s:b}]}}",
                         "Image", kImage, "User", "0:0", "Entrypoint", kInitTarget, "keepalive",
                         "--helper", kHelper, "HostConfig", "NetworkMode", "none", "CapDrop", "ALL",
                         "CapAdd", "KILL", "SETGID", "SETUID", "SecurityOpt", "no-new-privileges",
                         "Init", 1, "Mounts", "Type", "bind", "Source", real, "Target", kInitTarget,
                         "ReadOnly", 1);
    }
    // An exec of the init running `sh -c script` as kUser, given kNonce.
    std::string InitExec(const std::string &script)
    {
        json_t *doc = json_pack("{s:[sssssssssssss], s:[s], s:s, s:b, s:b, s:b, s:b, s:s}", "Cmd",
                                kInitTarget, "run", "--uid", kUser, "--gid", kUser, "--helper",
                                kHelper, "p_0123456789abcdef", "0", "sh", "-c", script.c_str(),
                                "Env", (std::string("WSINIT_NONCE=") + kNonce).c_str(), "User",
                                "0:0", "AttachStdout", 1, "AttachStderr", 1, "AttachStdin", 0,
                                "Tty", 0, "WorkingDir", "/");
        char *s = json_dumps(doc, JSON_COMPACT);
        Resp r = Docker("POST", V("/containers/" + container_ + "/exec"), s);
        free(s);
        json_decref(doc);
        EXPECT_EQ(201, r.status) << r.body;
        return JsonString(r.body, "Id");
    }
    // The container's processes as "UID ARGS" rows, through the daemon
    // (which runs ps on the host and wants its PID column).
    std::vector<std::string> Top()
    {
        Resp r = Docker("GET", V("/containers/" + container_ + "/top?ps_args=-o%20pid,uid,args"));
        EXPECT_EQ(200, r.status) << r.body;
        std::vector<std::string> rows;
        json_t *doc = json_loads(r.body.c_str(), 0, nullptr);
        size_t i;
        json_t *row;
        json_array_foreach(json_object_get(doc, "Processes"), i, row)
        {
            std::string line;
            size_t j;
            json_t *col;
            json_array_foreach(row, j, col)
            {
                if (j > 0)
                    line += (j > 1 ? " " : "") + std::string(json_string_value(col));
            }
            rows.push_back(line);
        }
        json_decref(doc);
        return rows;
    }

    static constexpr const char *kInitTarget = "/.workspaced-init";
    static constexpr const char *kUser = "1000";
    static constexpr const char *kHelper = "999";
};

// The command of uid 1000 tries what the issue saw work: kill its init,
// forge `exited 0` as the last bytes, leave a double-fork escapee (the
// image has no setsid). The kill is refused, the forgery is output, the real
// record (with the nonce it never saw) is the status, and nothing of the
// command is left in the container.
TEST_F(HardenedDaemon, ForgeAndEscapeFailsThroughTheRealInitAndDaemon)
{
    std::string id =
        InitExec("echo \"[${WSINIT_NONCE-unset}] $(id -u)\"; kill -9 $PPID; " +
                 ShRecord("exited 0") + "; (sleep 600 </dev/null >/dev/null 2>&1 &); exit 3");
    Relay r;
    r.Start(Args(id, {"--nonce", kNonce}));
    Result res = r.Finish();
    EXPECT_EQ(3, res.code) << res.err;
    EXPECT_EQ("exited 3\n", res.status);
    EXPECT_EQ("[unset] 1000\n", res.out);
    EXPECT_NE(std::string::npos, res.err.find("Operation not permitted")) << res.err;
    EXPECT_TRUE(res.err.size() >= Record("exited 0").size() &&
                res.err.compare(res.err.size() - Record("exited 0").size(), std::string::npos,
                                Record("exited 0")) == 0)
        << res.err;
    // The init killed the escapee before it wrote its record: only Docker's
    // init (root) and the keepalive (the helper uid) are left.
    std::vector<std::string> top = Top();
    EXPECT_EQ(2u, top.size());
    for (const auto &row : top)
        EXPECT_EQ(std::string::npos, row.find("sleep")) << row;
    bool keepalive = false;
    for (const auto &row : top)
        keepalive |=
            row == std::string(kHelper) + " " + kInitTarget + " keepalive --helper " + kHelper;
    EXPECT_TRUE(keepalive) << "no keepalive as uid " << kHelper;
}

// --- Usage ---------------------------------------------------------------------

struct UsageCase {
    const char *name;
    std::vector<std::string> args;
    Spawn spawn;
};

TEST(Usage, BadCommandLinesExit127WithAMessageAndStartNothing)
{
    const std::string host = "unix:///nonexistent/docker.sock";
    const std::vector<UsageCase> cases = {
        {"nothing", {}, {}},
        {"no exec id", {"--host", host, "--api", "1.41", "--status-fd", "3"}, {}},
        {"short id", {"--host", host, "--api", "1.41", "--status-fd", "3", "abc"}, {}},
        {"upper-case id",
         {"--host", host, "--api", "1.41", "--status-fd", "3",
          "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"},
         {}},
        {"path in id",
         {"--host", host, "--api", "1.41", "--status-fd", "3",
          "../../../../containers/json?0123456789abcdef0123456789abcdef0123"},
         {}},
        {"two ids", {"--host", host, "--api", "1.41", "--status-fd", "3", kExecId, kExecId}, {}},
        {"no host", {"--api", "1.41", "--status-fd", "3", kExecId}, {}},
        {"empty host", {"--host", "", "--api", "1.41", "--status-fd", "3", kExecId}, {}},
        {"ssh host", {"--host", "ssh://me@box", "--api", "1.41", "--status-fd", "3", kExecId}, {}},
        {"relative unix path",
         {"--host", "unix://docker.sock", "--api", "1.41", "--status-fd", "3", kExecId},
         {}},
        {"tls without certs",
         {"--host", "tcp://127.0.0.1:2376", "--tls-verify", "--api", "1.41", "--status-fd", "3",
          kExecId},
         {}},
        {"certs without tls",
         {"--host", "tcp://127.0.0.1:2376", "--cert-path", "/tmp", "--api", "1.41", "--status-fd",
          "3", kExecId},
         {}},
        {"no api", {"--host", host, "--status-fd", "3", kExecId}, {}},
        {"bad api", {"--host", host, "--api", "1", "--status-fd", "3", kExecId}, {}},
        {"api with junk", {"--host", host, "--api", "1.41x", "--status-fd", "3", kExecId}, {}},
        {"no status fd", {"--host", host, "--api", "1.41", kExecId}, {}},
        {"status fd 2", {"--host", host, "--api", "1.41", "--status-fd", "2", kExecId}, {}},
        {"status fd junk", {"--host", host, "--api", "1.41", "--status-fd", "3x", kExecId}, {}},
        {"status fd huge",
         {"--host", host, "--api", "1.41", "--status-fd", "99999999999999999999", kExecId},
         {}},
        {"status fd closed",
         {"--host", host, "--api", "1.41", "--status-fd", "3", kExecId},
         {.no_status_fd = true}},
        {"unknown option",
         {"--host", host, "--api", "1.41", "--status-fd", "3", "--detach", kExecId},
         {}},
        {"option twice",
         {"--host", host, "--host", host, "--api", "1.41", "--status-fd", "3", kExecId},
         {}},
        {"missing value", {"--host", host, "--api", "1.41", "--status-fd"}, {}},
        {"operand before options",
         {kExecId, "--host", host, "--api", "1.41", "--status-fd", "3"},
         {}},
        {"tty without a terminal",
         {"--host", host, "--api", "1.41", "--tty", "--status-fd", "3", kExecId},
         {}},
        {"empty nonce",
         {"--host", host, "--api", "1.41", "--nonce", "", "--status-fd", "3", kExecId},
         {}},
        {"short nonce",
         {"--host", host, "--api", "1.41", "--nonce", std::string(kNonce).substr(1), "--status-fd",
          "3", kExecId},
         {}},
        {"long nonce",
         {"--host", host, "--api", "1.41", "--nonce", std::string(kNonce) + "0", "--status-fd", "3",
          kExecId},
         {}},
        {"upper-case nonce",
         {"--host", host, "--api", "1.41", "--nonce", "0123456789ABCDEF0123456789abcdef",
          "--status-fd", "3", kExecId},
         {}},
        {"nonce with a separator",
         {"--host", host, "--api", "1.41", "--nonce", "0123456789abcdef;123456789abcdef",
          "--status-fd", "3", kExecId},
         {}},
        {"nonce twice",
         {"--host", host, "--api", "1.41", "--nonce", kNonce, "--nonce", kNonce, "--status-fd", "3",
          kExecId},
         {}},
    };
    for (const auto &c : cases) {
        Relay r;
        r.Start(c.args, c.spawn);
        Result res = r.Finish();
        EXPECT_EQ(127, res.code) << c.name << ": " << res.err;
        EXPECT_EQ(0u, res.err.find("workspaced-docker-relay: ")) << c.name << ": " << res.err;
        EXPECT_EQ("", res.out) << c.name;
        EXPECT_EQ("", res.status) << c.name;
    }
}

TEST(Usage, AClosedStdoutIsRefusedBeforeAnythingCouldTakeItsPlace)
{
    Relay r;
    r.Start(
        {"--host", "unix:///nonexistent/docker.sock", "--api", "1.41", "--status-fd", "3", kExecId},
        Spawn{.close_fd1 = true});
    Result res = r.Finish();
    EXPECT_EQ(127, res.code);
    EXPECT_NE(std::string::npos, res.err.find("fd 1 is not open")) << res.err;
}

TEST(Usage, AnUnreachableDaemonExits125)
{
    Relay r;
    r.Start({"--host", "unix:///nonexistent/docker.sock", "--api", "1.41", "--status-fd", "3",
             kExecId});
    Result res = r.Finish();
    EXPECT_EQ(125, res.code);
    EXPECT_EQ(0u, res.err.find("workspaced-docker-relay: cannot connect to the daemon")) << res.err;
    EXPECT_EQ("", res.status);
}

// Exec streams over TLS are not implemented: refused, never attempted in
// the clear. A listening socket shows that nothing was even sent.
TEST(Usage, ATlsDaemonIsRefusedWithoutAConnection)
{
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(lfd, 0);
    struct sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(0, bind(lfd, (struct sockaddr *)&sa, sizeof(sa)));
    ASSERT_EQ(0, listen(lfd, 4));
    socklen_t sl = sizeof(sa);
    ASSERT_EQ(0, getsockname(lfd, (struct sockaddr *)&sa, &sl));
    std::string host = "tcp://127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
    Relay r;
    r.Start({"--host", host.c_str(), "--tls-verify", "--cert-path", "/nonexistent", "--api", "1.41",
             "--status-fd", "3", kExecId});
    Result res = r.Finish();
    EXPECT_EQ(125, res.code);
    EXPECT_NE(std::string::npos, res.err.find("TLS")) << res.err;
    EXPECT_EQ("", res.status);
    struct pollfd p = {lfd, POLLIN, 0};
    EXPECT_EQ(0, poll(&p, 1, 0)) << "the relay connected anyway";
    close(lfd);
}

// --- A fake daemon, for exact bytes --------------------------------------------

class FakeDaemon
{
  public:
    struct Request {
        std::string method, target, raw;
    };
    // Runs on the connection that started the exec, after its request was
    // read; the connection is closed when it returns.
    using StartFn = std::function<void(FakeDaemon &, int fd)>;

    explicit FakeDaemon(StartFn start) : start_(std::move(start))
    {
        char dir[] = "/tmp/relay-fake-XXXXXX";
        EXPECT_NE(nullptr, mkdtemp(dir));
        dir_ = dir;
        path_ = dir_ + "/docker.sock";
        lfd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path_.c_str());
        if (bind(lfd_, (sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd_, 16) < 0)
            ADD_FAILURE() << "fake daemon: " << strerror(errno);
        EXPECT_EQ(0, pipe2(wake_, O_CLOEXEC));
        accept_ = std::thread([this] { AcceptLoop(); });
    }
    ~FakeDaemon()
    {
        if (write(wake_[1], "x", 1) < 0) {
        }
        accept_.join();
        for (auto &t : conns_)
            t.join();
        close(lfd_);
        close(wake_[0]);
        close(wake_[1]);
        unlink(path_.c_str());
        rmdir(dir_.c_str());
    }
    std::string Host() const
    {
        return "unix://" + path_;
    }
    // Inspect answers, in order; the last one repeats.
    void Inspect(std::vector<std::string> bodies)
    {
        std::lock_guard<std::mutex> g(mu_);
        inspect_ = std::deque<std::string>(bodies.begin(), bodies.end());
    }
    std::vector<Request> Requests()
    {
        std::lock_guard<std::mutex> g(mu_);
        return requests_;
    }
    // Waits (bounded) for a request whose target contains `part`.
    bool WaitFor(const std::string &part)
    {
        std::unique_lock<std::mutex> l(mu_);
        return cv_.wait_for(l, kHang, [&] {
            for (auto &r : requests_)
                if (r.target.find(part) != std::string::npos)
                    return true;
            return false;
        });
    }

    static void Send(int fd, const std::string &bytes)
    {
        size_t off = 0;
        while (off < bytes.size()) {
            ssize_t n = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
            if (n <= 0)
                return;
            off += (size_t)n;
        }
    }
    static std::string Upgrade()
    {
        return "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
               "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n";
    }

  private:
    void AcceptLoop()
    {
        for (;;) {
            pollfd p[2] = {{lfd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
            if (poll(p, 2, -1) < 0 && errno != EINTR)
                return;
            if (p[1].revents)
                return;
            if (!p[0].revents)
                continue;
            int fd = accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0)
                continue;
            conns_.emplace_back([this, fd] { Serve(fd); });
        }
    }
    void Serve(int fd)
    {
        std::string req;
        char buf[4096];
        size_t want = std::string::npos;
        while (req.size() < want) {
            ssize_t n = recv(fd, buf, sizeof(buf), 0);
            if (n <= 0)
                break;
            req.append(buf, (size_t)n);
            size_t end = req.find("\r\n\r\n");
            if (end != std::string::npos && want == std::string::npos) {
                size_t cl = req.find("Content-Length: ");
                size_t body = cl != std::string::npos && cl < end
                                  ? strtoul(req.c_str() + cl + 16, nullptr, 10)
                                  : 0;
                want = end + 4 + body;
            }
        }
        Request r;
        r.raw = req;
        size_t sp1 = req.find(' '), sp2 = req.find(' ', sp1 + 1);
        if (sp1 != std::string::npos && sp2 != std::string::npos) {
            r.method = req.substr(0, sp1);
            r.target = req.substr(sp1 + 1, sp2 - sp1 - 1);
        }
        std::string body;
        {
            std::lock_guard<std::mutex> g(mu_);
            requests_.push_back(r);
            if (r.target.find("/json") != std::string::npos && !inspect_.empty()) {
                body = inspect_.front();
                if (inspect_.size() > 1)
                    inspect_.pop_front();
            }
        }
        cv_.notify_all();
        auto ends = [&](const char *s) {
            size_t n = strlen(s);
            return r.target.size() >= n && r.target.compare(r.target.size() - n, n, s) == 0;
        };
        if (ends("/start")) {
            start_(*this, fd);
        } else if (r.target.find("/resize?") != std::string::npos) {
            Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        } else if (ends("/json") && !body.empty()) {
            Send(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
        } else {
            std::string b = "{\"message\":\"not here\"}";
            Send(fd, "HTTP/1.1 404 Not Found\r\nContent-Length: " + std::to_string(b.size()) +
                         "\r\nConnection: close\r\n\r\n" + b);
        }
        close(fd);
    }

    StartFn start_;
    std::string dir_, path_;
    int lfd_ = -1;
    int wake_[2] = {-1, -1};
    std::thread accept_;
    std::vector<std::thread> conns_; // accept thread only, joined after it
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<Request> requests_;
    std::deque<std::string> inspect_;
};

const char kExited4[] = "{\"Running\":false,\"ExitCode\":4,\"Pid\":10}";

std::vector<std::string> FakeArgs(const FakeDaemon &d, std::vector<std::string> flags = {})
{
    std::vector<std::string> a{"--host", d.Host(), "--api", "1.41"};
    a.insert(a.end(), flags.begin(), flags.end());
    a.insert(a.end(), {"--status-fd", "3", kExecId});
    return a;
}

// A start handler that answers with `bytes` in one write and hangs up.
FakeDaemon::StartFn Answer(std::string bytes)
{
    return [bytes](FakeDaemon &, int fd) { FakeDaemon::Send(fd, bytes); };
}

TEST(Fake, TheExecStartRequestIsExactlyTheUpgrade)
{
    FakeDaemon d(Answer(FakeDaemon::Upgrade() + Frame(2, Record("exited 0"))));
    Relay r;
    r.Start(FakeArgs(d));
    Result res = r.Finish();
    EXPECT_EQ(0, res.code) << res.err;
    auto reqs = d.Requests();
    ASSERT_EQ(1u, reqs.size());
    std::string body = "{\"Detach\":false,\"Tty\":false}";
    EXPECT_EQ(std::string("POST /v1.41/exec/") + kExecId +
                  "/start HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
                  "Connection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: " +
                  std::to_string(body.size()) + "\r\n\r\n" + body,
              reqs[0].raw);
}

TEST(Fake, BytesThatCameWithTheHeadAndOneByteFramesAreTheStream)
{
    std::string stream = Frame(1, "out") + Frame(2, "e");
    for (char c : Record("signaled 9 core oom"))
        stream += Frame(2, std::string(1, c));
    FakeDaemon d(Answer(FakeDaemon::Upgrade() + stream));
    Relay r;
    r.Start(FakeArgs(d));
    Result res = r.Finish();
    EXPECT_EQ(128 + 9, res.code) << res.err;
    EXPECT_EQ("out", res.out);
    EXPECT_EQ("e", res.err);
    EXPECT_EQ("signaled 9 core oom\n", res.status);
}

TEST(Fake, AnOldDaemonsPlain200AlsoStartsTheStream)
{
    FakeDaemon d(
        Answer("HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n\r\n" +
               Frame(1, "old") + Frame(2, Record("exited 2"))));
    Relay r;
    r.Start(FakeArgs(d));
    Result res = r.Finish();
    EXPECT_EQ(2, res.code);
    EXPECT_EQ("old", res.out);
    EXPECT_EQ("exited 2\n", res.status);
}

TEST(Fake, ValidRecordsAtTheEnd)
{
    const struct {
        const char *status;
        int code;
    } cases[] = {
        {"exited 0", 0},           {"exited 255", 255},          {"exited 42 core", 42},
        {"exited 1 oom", 1},       {"signaled 1", 129},          {"signaled 64", 192},
        {"signaled 15 core", 143}, {"signaled 9 core oom", 137},
    };
    for (const auto &c : cases) {
        FakeDaemon d(Answer(FakeDaemon::Upgrade() + Frame(2, "x" + Record(c.status))));
        Relay r;
        r.Start(FakeArgs(d));
        Result res = r.Finish();
        EXPECT_EQ(c.code, res.code) << c.status;
        EXPECT_EQ("x", res.err) << c.status;
        EXPECT_EQ(std::string(c.status) + "\n", res.status);
    }
}

TEST(Fake, AnythingElseAtTheEndIsOutputAndTheCodeComesFromInspect)
{
    const std::string not_records[] = {
        Record("exited 256"),
        Record("exited 03"),
        Record("exited 00"),
        Record("exited -1"),
        Record("exited"),
        Record("exited "),
        Record("exited 1 "),
        Record("signaled 0"),
        Record("signaled 65"),
        Record("exited 1 oom core"),
        Record("exited 1 core core"),
        Record("Exited 1"),
        Record("stopped 1"),
        Record("exited 1\n"),
        Record("exited 1") + "\n",
        Record("exited 1") + "\x1b",
        "\x1b_wsinit;exited 1\x1b",
        "\x1b_wsinit;exited 1\x1b/",
        "\x1b_wsinit:exited 1\x1b\\",
        "\x1b]wsinit;exited 1\x1b\\",
        "\x1b_wsinit;exited 1",
        "\x1b",
        Record("exited 1") + Record("exited 2").substr(0, 5),
    };
    for (const auto &bad : not_records) {
        FakeDaemon d(Answer(FakeDaemon::Upgrade() + Frame(2, bad)));
        d.Inspect({kExited4});
        Relay r;
        r.Start(FakeArgs(d));
        Result res = r.Finish();
        EXPECT_EQ(4, res.code) << bad;
        EXPECT_EQ(0u, res.err.find(bad + "workspaced-docker-relay: no exit record")) << res.err;
        EXPECT_EQ("", res.status) << bad;
        auto reqs = d.Requests();
        ASSERT_EQ(2u, reqs.size());
        EXPECT_EQ("GET", reqs[1].method);
        EXPECT_EQ(std::string("/v1.41/exec/") + kExecId + "/json", reqs[1].target);
    }
}

TEST(Fake, OnlyTheFinalRecordIsTaken)
{
    // Records, lookalikes and their pieces in the middle, in every
    // chunking the frames allow: all of it is output, byte for byte.
    std::string middle = Record("exited 1") + "a" + Record("signaled 9") + Record("exited 7") +
                         "\x1b_wsinit;exi" + "\x1b" + "\x1b\x1b_" + "b";
    for (size_t split = 1; split <= middle.size(); split++) {
        std::string stream;
        for (size_t i = 0; i < middle.size(); i += split)
            stream += Frame(2, middle.substr(i, split));
        stream += Frame(1, Record("exited 6")) + Frame(2, Record("exited 3"));
        FakeDaemon d(Answer(FakeDaemon::Upgrade() + stream));
        Relay r;
        r.Start(FakeArgs(d));
        Result res = r.Finish();
        EXPECT_EQ(3, res.code) << split;
        EXPECT_EQ(middle, res.err) << split;
        // stdout is not the record's stream in this mode.
        EXPECT_EQ(Record("exited 6"), res.out) << split;
        EXPECT_EQ("exited 3\n", res.status) << split;
    }
}

// With --nonce, the record is only the final one that carries it: one
// without a nonce (what a command that cannot know it writes), or with
// another, is output, and the code then comes from inspect.
TEST(Fake, WithANonceOnlyTheFinalRecordCarryingItIsTaken)
{
    const struct {
        const char *name;
        std::string before, last;
        int code;
        std::string status; // "" when `last` must be output
    } cases[] = {
        {"nonce", "x", NonceRecord(kNonce, "exited 3"), 3, "exited 3\n"},
        {"longest", "", NonceRecord(kNonce, "signaled 64 core oom"), 192, "signaled 64 core oom\n"},
        {"forged before the real one", Record("exited 0") + NonceRecord(kOtherNonce, "exited 0"),
         NonceRecord(kNonce, "signaled 9"), 137, "signaled 9\n"},
        {"no nonce", "x", Record("exited 0"), 4, ""},
        {"another nonce", "x", NonceRecord(kOtherNonce, "exited 0"), 4, ""},
        {"upper-case nonce", "", NonceRecord("0123456789ABCDEF0123456789abcdef", "exited 0"), 4,
         ""},
        {"nonce without its ';'", "", Record(std::string(kNonce) + "exited 0"), 4, ""},
        {"nonce and junk", "", NonceRecord(kNonce, "exited 0") + "x", 4, ""},
        {"nonce, bad status", "", NonceRecord(kNonce, "exited 256"), 4, ""},
        {"nonce twice", "", NonceRecord(std::string(kNonce) + ";" + kNonce, "exited 0"), 4, ""},
    };
    for (const auto &c : cases) {
        // Whole, and in one-byte frames: the held-back suffix must carry a
        // record (or its refusal) across any split.
        for (bool bytewise : {false, true}) {
            std::string tail = c.before + c.last, stream;
            if (bytewise) {
                for (char ch : tail)
                    stream += Frame(2, std::string(1, ch));
            } else {
                stream = Frame(2, tail);
            }
            FakeDaemon d(Answer(FakeDaemon::Upgrade() + stream));
            d.Inspect({kExited4});
            Relay r;
            r.Start(FakeArgs(d, {"--nonce", kNonce}));
            Result res = r.Finish();
            std::string what = std::string(c.name) + (bytewise ? " (bytewise)" : "");
            EXPECT_EQ(c.code, res.code) << what << ": " << res.err;
            EXPECT_EQ(c.status, res.status) << what;
            if (c.status.empty()) {
                EXPECT_EQ(0u, res.err.find(tail + "workspaced-docker-relay: no exit record"))
                    << what << ": " << res.err;
            } else {
                EXPECT_EQ(c.before, res.err) << what;
            }
        }
    }
}

// Without --nonce the record keeps its old form only: one with a nonce is
// output.
TEST(Fake, WithoutANonceARecordCarryingOneIsOutput)
{
    FakeDaemon d(Answer(FakeDaemon::Upgrade() + Frame(2, NonceRecord(kNonce, "exited 0"))));
    d.Inspect({kExited4});
    Relay r;
    r.Start(FakeArgs(d));
    Result res = r.Finish();
    EXPECT_EQ(4, res.code) << res.err;
    EXPECT_EQ("", res.status);
    EXPECT_EQ(0u, res.err.find(NonceRecord(kNonce, "exited 0") +
                               "workspaced-docker-relay: no exit record"))
        << res.err;
}

TEST(Fake, InTtyModeTheNonceRecordIsOnTheOneStream)
{
    int master = -1, slave = -1;
    ASSERT_EQ(0, openpty(&master, &slave, nullptr, nullptr, nullptr));
    std::string before = Record("exited 1") + NonceRecord(kOtherNonce, "exited 1");
    FakeDaemon d(Answer(FakeDaemon::Upgrade() + before + NonceRecord(kNonce, "signaled 2")));
    Relay r;
    r.Start(FakeArgs(d, {"--tty", "--nonce", kNonce}), Spawn{.tty_slave = slave});
    close(slave);
    r.ReadFrom(master);
    Result res = r.Finish();
    close(master);
    EXPECT_EQ(130, res.code);
    EXPECT_EQ(before, res.out);
    EXPECT_EQ("signaled 2\n", res.status);
}

TEST(Fake, SteadySmallFramesLeaveInFewLargeWrites)
{
    // The daemon's usual pattern under a busy command: a 4 KiB frame every
    // 200 us. Read one by one they would reach the server as ~512 writes;
    // batched, each write carries a pause's worth (~10 frames here). The
    // reader below is faster than the relay, so each of its reads is about
    // one of the relay's writes (at most 64 KiB: 32 reads is the floor).
    const int kFrames = 512;
    const std::string chunk(4096, 'z');
    FakeDaemon d([&](FakeDaemon &, int fd) {
        FakeDaemon::Send(fd, FakeDaemon::Upgrade());
        for (int i = 0; i < kFrames; i++) {
            FakeDaemon::Send(fd, Frame(1, chunk));
            usleep(200);
        }
        FakeDaemon::Send(fd, Frame(2, Record("exited 0")));
    });
    Relay r;
    r.Start(FakeArgs(d));
    int reads = 0;
    Result res = r.Finish("", [&](std::string &) { reads++; });
    EXPECT_EQ(0, res.code);
    EXPECT_EQ((size_t)kFrames * chunk.size(), res.out.size());
    EXPECT_EQ("exited 0\n", res.status);
    EXPECT_LT(reads, kFrames / 4) << "the frames were written on one by one, not batched";
}

TEST(Fake, OutputThatComesAloneIsPassedOnWithoutWaitingForMore)
{
    // A prompt, an echo: the daemon sends one small frame and nothing more
    // until someone has seen it. Output held back for a batch that never
    // fills would hang here.
    std::mutex mu;
    std::condition_variable cv;
    size_t seen = 0;
    const int kRounds = 8;
    FakeDaemon d([&](FakeDaemon &, int fd) {
        FakeDaemon::Send(fd, FakeDaemon::Upgrade());
        for (int i = 0; i < kRounds; i++) {
            FakeDaemon::Send(fd, Frame(1, "$ "));
            std::unique_lock<std::mutex> l(mu);
            if (!cv.wait_for(l, kHang, [&] { return seen >= (size_t)(i + 1) * 2; }))
                return;
        }
        FakeDaemon::Send(fd, Frame(2, Record("exited 0")));
    });
    Relay r;
    r.Start(FakeArgs(d));
    Result res = r.Finish("", [&](std::string &out) {
        std::lock_guard<std::mutex> g(mu);
        seen = out.size();
        cv.notify_all();
    });
    EXPECT_EQ(0, res.code);
    std::string want;
    for (int i = 0; i < kRounds; i++)
        want += "$ ";
    EXPECT_EQ(want, res.out);
}

TEST(Fake, InspectIsAskedAgainWhileTheExecStillRuns)
{
    FakeDaemon d(Answer(FakeDaemon::Upgrade() + Frame(1, "x")));
    d.Inspect({"{\"Running\":true,\"ExitCode\":null,\"Pid\":10}",
               "{\"Running\":true,\"ExitCode\":null,\"Pid\":10}",
               "{\"Running\":false,\"ExitCode\":6,\"Pid\":10}"});
    Relay r;
    r.Start(FakeArgs(d));
    Result res = r.Finish();
    EXPECT_EQ(6, res.code) << res.err;
    EXPECT_EQ(4u, d.Requests().size());
}

// With --container, a stream that stays open and quiet while its container
// has stopped (a gVisor sandbox the host's OOM killer ended keeps the exec
// stream open) ends the command: OOM when the daemon says so, else an
// unknown fate (125) without a status line.
TEST(Fake, AQuietStreamWhoseContainerStoppedEndsTheCommand)
{
    const std::string container(64, 'c');
    for (bool oom : {true, false}) {
        SCOPED_TRACE(oom ? "oom" : "stopped");
        FakeDaemon d([](FakeDaemon &, int fd) {
            FakeDaemon::Send(fd, FakeDaemon::Upgrade());
            char b[256];
            pollfd p{fd, POLLIN, 0};
            while (poll(&p, 1, 30000) > 0 && recv(fd, b, sizeof(b), 0) > 0) {
            }
        });
        d.Inspect({std::string("{\"State\":{\"Running\":false,\"OOMKilled\":") +
                   (oom ? "true" : "false") + ",\"ExitCode\":137,\"Status\":\"exited\"}}"});
        Relay r;
        r.Start(FakeArgs(d, {"--container", container}));
        Result res = r.Finish();
        EXPECT_TRUE(d.WaitFor("/containers/" + container + "/json"));
        if (oom) {
            EXPECT_EQ(137, res.code) << res.err;
            EXPECT_EQ("signaled 9 oom\n", res.status) << res.err;
        } else {
            EXPECT_EQ(125, res.code) << res.err;
            EXPECT_EQ("", res.status) << res.err;
        }
    }
}

TEST(Fake, AnUnknownExitCodeIs125)
{
    FakeDaemon d(Answer(FakeDaemon::Upgrade() + Frame(1, "x")));
    d.Inspect({"{\"Running\":false,\"ExitCode\":null,\"Pid\":0}"});
    Relay r;
    r.Start(FakeArgs(d));
    Result res = r.Finish();
    EXPECT_EQ(125, res.code) << res.err;
    EXPECT_EQ("", res.status);
}

TEST(Fake, MalformedFramesExit125)
{
    const std::string streams[] = {
        Frame(7, "x"),                                             // no such stream
        Frame(0, "x"),                                             // stdin is never sent
        std::string("\x01\x01\x00\x00\x00\x00\x00\x01x", 9),       // padding not zero
        std::string("\x01\x00\x00\x00\x7f\x00\x00\x00", 8),        // 2 GiB frame
        Frame(1, "abc").substr(0, 9),                              // ends inside a payload
        Frame(2, Record("exited 0")) + std::string("\x02\x00", 2), // ends inside a header
    };
    for (const auto &s : streams) {
        FakeDaemon d(Answer(FakeDaemon::Upgrade() + s));
        d.Inspect({kExited4});
        Relay r;
        r.Start(FakeArgs(d));
        Result res = r.Finish();
        EXPECT_EQ(125, res.code) << res.err;
        EXPECT_NE(std::string::npos, res.err.find("workspaced-docker-relay: the daemon's stream"))
            << res.err;
        EXPECT_EQ("", res.status);
    }
}

TEST(Fake, RefusalsSayWhatTheDaemonSaid)
{
    const struct {
        std::string response, message;
    } cases[] = {
        {"HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: 29\r\n\r\n"
         "{\"message\":\"already running\"}\n",
         "already running"},
        {"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n"
         "a\r\n{\"message\"\r\n10;ext=1\r\n:\"no such exec\"}\r\n0\r\n\r\n",
         "no such exec"},
        {"HTTP/1.0 500 Internal Server Error\r\n\r\n{\"message\":\"until the end\"}",
         "until the end"},
        {"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\noops!", "HTTP status 500"},
        {"HTTP/1.1 400 Bad Request\r\nContent-Length: 100\r\n\r\n{\"message\":\"cut\"}",
         "HTTP status 400"},
    };
    for (const auto &c : cases) {
        FakeDaemon d(Answer(c.response));
        Relay r;
        r.Start(FakeArgs(d));
        Result res = r.Finish();
        EXPECT_EQ(125, res.code);
        EXPECT_EQ("workspaced-docker-relay: the daemon refused the exec: " + c.message + "\n",
                  res.err);
        EXPECT_EQ("", res.status);
        EXPECT_EQ(1u, d.Requests().size());
    }
}

TEST(Fake, AResponseThatIsNotHttpExits125)
{
    for (std::string resp : {std::string("SSH-2.0-OpenSSH\r\n\r\n"), std::string(20000, 'a'),
                             std::string("HTTP/1.1 101")}) {
        FakeDaemon d(Answer(resp));
        Relay r;
        r.Start(FakeArgs(d));
        Result res = r.Finish();
        EXPECT_EQ(125, res.code) << res.err;
        EXPECT_EQ(0u, res.err.find("workspaced-docker-relay: ")) << res.err;
        EXPECT_EQ("", res.status);
    }
}

TEST(Fake, StdinIsSentThenHalfClosed)
{
    std::string input = RandomBytes(300 * 1000);
    std::string got;
    bool eof = false;
    FakeDaemon d([&](FakeDaemon &, int fd) {
        FakeDaemon::Send(fd, FakeDaemon::Upgrade());
        char buf[65536];
        ssize_t n;
        while ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
            got.append(buf, (size_t)n);
        eof = n == 0;
        FakeDaemon::Send(fd, Frame(1, "got it") + Frame(2, Record("exited 0")));
    });
    Relay r;
    r.Start(FakeArgs(d, {"--stdin"}), Spawn{.stdin_pipe = true});
    Result res = r.Finish(input);
    EXPECT_EQ(0, res.code) << res.err;
    EXPECT_EQ("got it", res.out);
    EXPECT_TRUE(eof);
    EXPECT_EQ(input.size(), got.size());
    EXPECT_TRUE(input == got);
}

TEST(Fake, TtyResizesAtStartAndOnSigwinch)
{
    int master = -1, slave = -1;
    winsize ws{};
    ws.ws_row = 40;
    ws.ws_col = 100;
    ASSERT_EQ(0, openpty(&master, &slave, nullptr, nullptr, &ws));
    std::string first = std::string("/v1.41/exec/") + kExecId + "/resize?h=40&w=100";
    std::string second = std::string("/v1.41/exec/") + kExecId + "/resize?h=50&w=120";
    FakeDaemon d([&](FakeDaemon &self, int fd) {
        // A TTY stream is raw: no frame headers.
        FakeDaemon::Send(fd, FakeDaemon::Upgrade() + "ready");
        if (!self.WaitFor(first))
            return;
        FakeDaemon::Send(fd, "\x1b_wsin");
        if (!self.WaitFor(second))
            return;
        FakeDaemon::Send(fd, "it;exited 0\x1b\\");
    });
    Relay r;
    r.Start(FakeArgs(d, {"--tty"}), Spawn{.tty_slave = slave});
    close(slave);
    r.ReadFrom(master);
    bool changed = false;
    Result res = r.Finish("", [&](std::string &out) {
        if (!changed && out == "ready" && d.WaitFor(first)) {
            winsize w2{};
            w2.ws_row = 50;
            w2.ws_col = 120;
            ioctl(master, TIOCSWINSZ, &w2);
            changed = true;
        }
    });
    close(master);
    EXPECT_EQ(0, res.code);
    EXPECT_EQ("ready", res.out);
    EXPECT_EQ("exited 0\n", res.status);
    std::vector<std::string> resizes;
    for (auto &q : d.Requests())
        if (q.target.find("/resize") != std::string::npos) {
            EXPECT_EQ("POST", q.method);
            resizes.push_back(q.target);
        }
    EXPECT_EQ((std::vector<std::string>{first, second}), resizes);
    // The start body says Tty.
    EXPECT_NE(std::string::npos, d.Requests()[0].raw.find("{\"Detach\":false,\"Tty\":true}"));
}

TEST(Fake, ATerminalWithoutASizeIsNotResized)
{
    int master = -1, slave = -1;
    ASSERT_EQ(0, openpty(&master, &slave, nullptr, nullptr, nullptr));
    FakeDaemon d(Answer(FakeDaemon::Upgrade() + "hi" + Record("exited 0")));
    Relay r;
    r.Start(FakeArgs(d, {"--tty"}), Spawn{.tty_slave = slave});
    close(slave);
    r.ReadFrom(master);
    Result res = r.Finish();
    close(master);
    EXPECT_EQ(0, res.code);
    EXPECT_EQ("hi", res.out);
    EXPECT_EQ(1u, d.Requests().size());
}

TEST(Fake, InTtyModeTheRecordIsOnTheOneStream)
{
    int master = -1, slave = -1;
    ASSERT_EQ(0, openpty(&master, &slave, nullptr, nullptr, nullptr));
    // Lookalikes before the end pass through; bytes that look like frame
    // headers are just bytes.
    std::string before = Record("exited 1") + std::string("\x02\x00\x00\x00\x00\x00\x00\x01", 8);
    FakeDaemon d(Answer(FakeDaemon::Upgrade() + before + Record("signaled 2")));
    Relay r;
    r.Start(FakeArgs(d, {"--tty"}), Spawn{.tty_slave = slave});
    close(slave);
    r.ReadFrom(master);
    Result res = r.Finish();
    close(master);
    EXPECT_EQ(130, res.code);
    EXPECT_EQ(before, res.out);
    EXPECT_EQ("signaled 2\n", res.status);
}

} // namespace

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    if (argc != 3) {
        fprintf(stderr,
                "usage: %s PATH-TO-workspaced-docker-relay PATH-TO-workspaced-docker-init\n",
                argv[0]);
        return 2;
    }
    g_relay = argv[1];
    g_init = argv[2];
    // A relay that dies leaves its stdin pipe without a reader.
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = RUN_ALL_TESTS();
    curl_global_cleanup();
    return rc;
}
