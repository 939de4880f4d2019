// The real in-box agent (wsagent) with the real docker init as its reaper,
// driven over a socketpair exactly as the server drives it, on the host:
// commands with their streams and exact exit records, signals, timeouts,
// escapees that die with their command, 100 commands at once, a terminal,
// the one-time secret, every malformed frame ending the agent with its
// reason, the end of the channel ending everything, and (as root) a command
// of another uid that can neither signal, trace nor read the agent.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/agent/wire.h"
}

namespace
{

using Clock = std::chrono::steady_clock;

const char kAgentRunfile[] = "server/progs/workspaced-agent";
const char kInitRunfile[] = "server/progs/workspaced-docker-init";
const char kProbeRunfile[] = "tests/unit/docker_init/init-probe";

std::string Real(const char *runfile)
{
    char real[PATH_MAX];
    return realpath(runfile, real) ? real : runfile;
}

std::string TempDir()
{
    const char *base = getenv("TEST_TMPDIR");
    std::string t = std::string(base ? base : "/tmp") + "/agentXXXXXX";
    std::vector<char> buf(t.begin(), t.end());
    buf.push_back('\0');
    EXPECT_NE(mkdtemp(buf.data()), nullptr);
    return buf.data();
}

// A marker no other run shares, for finding a test's own sleeps.
std::string Marker()
{
    std::random_device rd;
    return std::to_string(1000 + rd() % 9000) + "." + std::to_string(getpid()) +
           std::to_string(rd() % 100000);
}

// A /proc file of a process that may be exiting: what could be read ("" when
// it is gone), never an exception.
std::string ReadProcFile(const std::string &path)
{
    std::string s;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return s;
    char b[4096];
    ssize_t n;
    while ((n = read(fd, b, sizeof(b))) > 0)
        s.append(b, (size_t)n);
    close(fd);
    return s;
}

// Processes whose command line holds marker.
int CountProcs(const std::string &marker)
{
    int n = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    for (dirent *e; (e = readdir(d)) != nullptr;) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        if (ReadProcFile(std::string("/proc/") + e->d_name + "/cmdline").find(marker) !=
            std::string::npos)
            n++;
    }
    closedir(d);
    return n;
}

// Until at least `want` processes (exactly, with exact) hold marker.
bool WaitProcs(const std::string &marker, int want, int timeout_ms = 10000, bool exact = true)
{
    auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (int n; (n = CountProcs(marker)) != want && (exact || n < want);) {
        if (Clock::now() > end)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
}

struct Msg {
    uint8_t type = 0;
    uint32_t stream = 0;
    std::map<uint16_t, uint64_t> num;
    std::map<uint16_t, std::string> str;
};

using Fields = std::function<void(ws_wire_out *)>;

std::vector<uint8_t> Frame(ws_wire_type type, uint32_t stream, const Fields &fields = nullptr)
{
    std::vector<uint8_t> buf(WS_WIRE_FRAME_MAX);
    ws_wire_out o;
    ws_wire_begin(&o, buf.data(), buf.size(), type, stream);
    if (fields)
        fields(&o);
    long n = ws_wire_end(&o);
    EXPECT_GT(n, 0);
    buf.resize(n > 0 ? (size_t)n : 0);
    return buf;
}

struct Command {
    std::vector<std::string> argv;
    std::vector<std::string> env = {"PATH=/usr/bin:/bin"};
    std::string cwd = "/";
    uint64_t timeout_ms = 0;
    uint64_t uid = 0, gid = 0;
};

std::vector<uint8_t> StartFrame(uint32_t stream, const Command &c, bool pty = false)
{
    return Frame(WS_WIRE_START, stream, [&](ws_wire_out *o) {
        for (const auto &a : c.argv)
            ws_wire_put_str(o, WS_WIRE_T_ARGV, a.c_str());
        for (const auto &e : c.env)
            ws_wire_put_str(o, WS_WIRE_T_ENV, e.c_str());
        ws_wire_put_str(o, WS_WIRE_T_CWD, c.cwd.c_str());
        ws_wire_put_u64(o, WS_WIRE_T_TIMEOUT_MS, c.timeout_ms);
        if (pty)
            ws_wire_put_u64(o, WS_WIRE_T_PTY, 1);
        if (c.uid) {
            ws_wire_put_u64(o, WS_WIRE_T_UID, c.uid);
            ws_wire_put_u64(o, WS_WIRE_T_GID, c.gid);
        }
    });
}

// One agent on the far end of a socketpair.
class Agent
{
  public:
    Agent(const std::string &agent, const std::string &init,
          const std::vector<std::string> &extra = {}, const std::vector<std::string> &env = {})
    {
        int sv[2];
        EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        int err[2];
        EXPECT_EQ(pipe2(err, O_CLOEXEC), 0);
        pid_ = fork();
        if (pid_ == 0) {
            dup2(sv[1], 3);
            dup2(err[1], 2);
            std::vector<std::string> args = {agent, "--init", init, "--channel-fd", "3"};
            args.insert(args.end(), extra.begin(), extra.end());
            std::vector<char *> argv, envp;
            for (auto &a : args)
                argv.push_back(const_cast<char *>(a.c_str()));
            argv.push_back(nullptr);
            for (auto &e : env)
                envp.push_back(const_cast<char *>(e.c_str()));
            envp.push_back(nullptr);
            execve(agent.c_str(), argv.data(), envp.data());
            _exit(126);
        }
        close(sv[1]);
        close(err[1]);
        sock_ = sv[0];
        err_ = err[0];
        ws_wire_in_init(&in_, buf_.data(), buf_.size());
    }
    ~Agent()
    {
        if (sock_ >= 0)
            close(sock_);
        if (pid_ > 0 && !exited_) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        close(err_);
    }
    pid_t pid() const
    {
        return pid_;
    }

    void Send(const std::vector<uint8_t> &bytes, const std::vector<int> &fds = {})
    {
        iovec iov = {const_cast<uint8_t *>(bytes.data()), bytes.size()};
        msghdr m = {};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        std::vector<char> ctl(CMSG_SPACE(sizeof(int) * (fds.empty() ? 1 : fds.size())));
        if (!fds.empty()) {
            m.msg_control = ctl.data();
            m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
            cmsghdr *h = CMSG_FIRSTHDR(&m);
            h->cmsg_level = SOL_SOCKET;
            h->cmsg_type = SCM_RIGHTS;
            h->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
            memcpy(CMSG_DATA(h), fds.data(), sizeof(int) * fds.size());
        }
        ASSERT_EQ(sendmsg(sock_, &m, MSG_NOSIGNAL), (ssize_t)bytes.size()) << strerror(errno);
    }

    // The next frame, or false (timeout or end).
    bool Recv(Msg *m, int timeout_ms = 15000)
    {
        auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
        for (;;) {
            ws_wire_frame f;
            int r = ws_wire_next(&in_, &f);
            if (r < 0)
                return false;
            if (r == 1) {
                *m = Msg();
                m->type = f.type;
                m->stream = f.stream;
                size_t pos = 0;
                ws_wire_field fl;
                while (ws_wire_next_field(&f, &pos, &fl) == 1) {
                    uint64_t v;
                    if (ws_wire_u64(&fl, &v) == 0)
                        m->num[fl.tag] = v;
                    m->str[fl.tag] = std::string((const char *)fl.data, fl.len);
                }
                return true;
            }
            int left =
                (int)std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now())
                    .count();
            if (left <= 0)
                return false;
            pollfd p = {sock_, POLLIN, 0};
            if (poll(&p, 1, left) <= 0)
                return false;
            size_t room;
            uint8_t *at = ws_wire_in_space(&in_, &room);
            ssize_t n = read(sock_, at, room);
            if (n <= 0)
                return false;
            ws_wire_in_added(&in_, (size_t)n);
        }
    }

    // Until the frame of this type on this stream, keeping the others.
    bool Expect(uint8_t type, uint32_t stream, Msg *m, int timeout_ms = 15000)
    {
        for (auto it = kept_.begin(); it != kept_.end(); ++it)
            if (it->type == type && it->stream == stream) {
                *m = *it;
                kept_.erase(it);
                return true;
            }
        Msg x;
        while (Recv(&x, timeout_ms)) {
            if (x.type == type && x.stream == stream) {
                *m = x;
                return true;
            }
            kept_.push_back(x);
        }
        return false;
    }

    void Hello()
    {
        Msg m;
        ASSERT_TRUE(Recv(&m));
        ASSERT_EQ(m.type, WS_WIRE_HELLO);
        hello_ = m;
        Send(Frame(WS_WIRE_HELLO, 0,
                   [](ws_wire_out *o) { ws_wire_put_u64(o, WS_WIRE_T_VERSION, WS_WIRE_VERSION); }));
    }
    const Msg &hello() const
    {
        return hello_;
    }

    // The agent's exit status, or -1 when it has not exited in time.
    int Wait(int timeout_ms = 10000)
    {
        auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
        int st;
        while (Clock::now() < end) {
            pid_t r = waitpid(pid_, &st, WNOHANG);
            if (r == pid_) {
                exited_ = true;
                return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        return -1;
    }
    void CloseChannel()
    {
        close(sock_);
        sock_ = -1;
    }
    std::string Stderr()
    {
        std::string s;
        char b[4096];
        fcntl(err_, F_SETFL, O_NONBLOCK);
        ssize_t n;
        while ((n = read(err_, b, sizeof(b))) > 0)
            s.append(b, (size_t)n);
        return s;
    }

  private:
    pid_t pid_ = -1;
    int sock_ = -1;
    int err_ = -1;
    bool exited_ = false;
    std::vector<uint8_t> buf_ = std::vector<uint8_t>(WS_WIRE_FRAME_MAX);
    ws_wire_in in_;
    std::vector<Msg> kept_;
    Msg hello_;
};

// A command's three descriptors as the server makes them: /dev/null for
// stdin, and pipes whose read ends the test keeps.
struct Streams {
    int in = -1, out_r = -1, out_w = -1, err_r = -1, err_w = -1;
    Streams()
    {
        in = open("/dev/null", O_RDONLY | O_CLOEXEC);
        int p[2];
        EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
        out_r = p[0];
        out_w = p[1];
        EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
        err_r = p[0];
        err_w = p[1];
    }
    ~Streams()
    {
        for (int fd : {in, out_r, out_w, err_r, err_w})
            if (fd >= 0)
                close(fd);
    }
    std::vector<int> Fds() const
    {
        return {in, out_w, err_w};
    }
    // After the send: the command's ends are the agent's now.
    void Sent()
    {
        close(in);
        close(out_w);
        close(err_w);
        in = out_w = err_w = -1;
    }
    static std::string ReadAll(int fd, int timeout_ms = 15000)
    {
        std::string s;
        auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
        char b[65536];
        for (;;) {
            pollfd p = {fd, POLLIN, 0};
            int left =
                (int)std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now())
                    .count();
            if (left <= 0 || poll(&p, 1, left) <= 0)
                return s + "<timeout>";
            ssize_t n = read(fd, b, sizeof(b));
            if (n <= 0)
                return s;
            s.append(b, (size_t)n);
        }
    }
    std::string Out()
    {
        return ReadAll(out_r);
    }
    std::string Err()
    {
        return ReadAll(err_r);
    }
};

class AgentTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        agent_ = Real(kAgentRunfile);
        init_ = Real(kInitRunfile);
    }
    // Starts c on stream and returns its STARTED.
    Msg Start(Agent &a, uint32_t stream, const Command &c, Streams &s)
    {
        a.Send(StartFrame(stream, c), s.Fds());
        s.Sent();
        Msg m;
        EXPECT_TRUE(a.Expect(WS_WIRE_STARTED, stream, &m)) << "no STARTED for " << stream;
        return m;
    }
    std::string agent_, init_;
};

TEST_F(AgentTest, HelloCarriesTheVersionAndPid)
{
    Agent a(agent_, init_);
    a.Hello();
    EXPECT_EQ(a.hello().num.at(WS_WIRE_T_VERSION), (uint64_t)WS_WIRE_VERSION);
    EXPECT_EQ(a.hello().num.at(WS_WIRE_T_PID), (uint64_t)a.pid());
    EXPECT_EQ(a.hello().str.count(WS_WIRE_T_SECRET), 0u);
}

TEST_F(AgentTest, RunsACommandWithItsStreamsAndRecord)
{
    Agent a(agent_, init_);
    a.Hello();
    Streams s;
    Command c;
    c.argv = {"/bin/sh", "-c", "echo out; echo err >&2; pwd; echo $FOO; exit 3"};
    c.env = {"PATH=/usr/bin:/bin", "FOO=bar"};
    c.cwd = TempDir();
    Msg started = Start(a, 5, c, s);
    EXPECT_GT(started.num[WS_WIRE_T_PID], 0u);
    EXPECT_EQ(s.Out(), "out\n" + c.cwd + "\nbar\n");
    EXPECT_EQ(s.Err(), "err\n");
    Msg m;
    ASSERT_TRUE(a.Expect(WS_WIRE_EXITED, 5, &m));
    EXPECT_EQ(m.num[WS_WIRE_T_STATUS], 0u);
    EXPECT_EQ(m.num[WS_WIRE_T_CODE], 3u);
    EXPECT_EQ(m.num[WS_WIRE_T_TIMED_OUT], 0u);
    EXPECT_GT(m.num[WS_WIRE_T_MAXRSS_KIB], 0u);
    EXPECT_EQ(m.num.count(WS_WIRE_T_USER_MS), 1u);
}

// The command holds its three streams and nothing else of the agent's or
// the reaper's (no channel, no record pipe).
TEST_F(AgentTest, TheCommandHoldsOnlyItsStreams)
{
    Agent a(agent_, init_);
    a.Hello();
    Streams s;
    Command c;
    c.argv = {"/bin/sh", "-c", "/bin/ls /proc/$$/fd"};
    Start(a, 1, c, s);
    EXPECT_EQ(s.Out(), "0\n1\n2\n");
    Msg m;
    ASSERT_TRUE(a.Expect(WS_WIRE_EXITED, 1, &m));
    EXPECT_EQ(m.num[WS_WIRE_T_CODE], 0u);
}

TEST_F(AgentTest, SignalReachesTheCommandAndNotTheReaper)
{
    Agent a(agent_, init_);
    a.Hello();
    Streams s;
    Command c;
    std::string marker = Marker();
    c.argv = {"/bin/sleep", marker};
    Start(a, 1, c, s);
    // The reaper and its child (the sleep, or about to be) both name it.
    ASSERT_TRUE(WaitProcs(marker, 2));
    a.Send(Frame(WS_WIRE_SIGNAL, 1,
                 [](ws_wire_out *o) { ws_wire_put_u64(o, WS_WIRE_T_SIGNO, SIGTERM); }));
    Msg m;
    ASSERT_TRUE(a.Expect(WS_WIRE_EXITED, 1, &m));
    EXPECT_EQ(m.num[WS_WIRE_T_STATUS], 1u);
    EXPECT_EQ(m.num[WS_WIRE_T_SIGNO], (uint64_t)SIGTERM);
    // A SIGNAL for a stream that is over is no error.
    a.Send(Frame(WS_WIRE_SIGNAL, 1,
                 [](ws_wire_out *o) { ws_wire_put_u64(o, WS_WIRE_T_SIGNO, SIGTERM); }));
    a.Send(Frame(WS_WIRE_SIGNAL, 99,
                 [](ws_wire_out *o) { ws_wire_put_u64(o, WS_WIRE_T_SIGNO, SIGKILL); }));
    Streams s2;
    Command ok;
    ok.argv = {"/bin/echo", "still here"};
    Start(a, 2, ok, s2);
    EXPECT_EQ(s2.Out(), "still here\n");
}

// setsid and double-fork escapees end with the command that made them: the
// EXITED comes only once nothing of it is left.
TEST_F(AgentTest, EscapeesDieWithTheCommand)
{
    Agent a(agent_, init_);
    a.Hello();
    Streams s;
    Command c;
    std::string marker = Marker();
    c.argv = {"/bin/sh", "-c",
              "setsid /bin/sleep " + marker + " & (/bin/sleep " + marker +
                  " &) ; /bin/sleep 0.2; exit 0"};
    Start(a, 1, c, s);
    Msg m;
    ASSERT_TRUE(a.Expect(WS_WIRE_EXITED, 1, &m));
    EXPECT_EQ(m.num[WS_WIRE_T_CODE], 0u);
    EXPECT_EQ(CountProcs(marker), 0) << "escapees outlived their command";
    EXPECT_EQ(s.Out(), "");
}

TEST_F(AgentTest, TimeoutEndsTheTree)
{
    Agent a(agent_, init_);
    a.Hello();
    Streams s;
    Command c;
    std::string marker = Marker();
    c.argv = {"/bin/sh", "-c", "/bin/sleep " + marker + " & /bin/sleep " + marker};
    c.timeout_ms = 300;
    auto t0 = Clock::now();
    Start(a, 1, c, s);
    Msg m;
    ASSERT_TRUE(a.Expect(WS_WIRE_EXITED, 1, &m));
    EXPECT_GE(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count(),
              300);
    EXPECT_EQ(m.num[WS_WIRE_T_STATUS], 1u);
    EXPECT_EQ(m.num[WS_WIRE_T_SIGNO], (uint64_t)SIGKILL);
    EXPECT_EQ(m.num[WS_WIRE_T_TIMED_OUT], 1u);
    EXPECT_EQ(CountProcs(marker), 0);
}

TEST_F(AgentTest, MissingProgramExits127WithItsReason)
{
    Agent a(agent_, init_);
    a.Hello();
    Streams s;
    Command c;
    c.argv = {"/nonexistent/program"};
    Start(a, 1, c, s);
    EXPECT_EQ(s.Err(),
              "workspaced-docker-init: cannot execute /nonexistent/program: No such file or "
              "directory\n");
    Msg m;
    ASSERT_TRUE(a.Expect(WS_WIRE_EXITED, 1, &m));
    EXPECT_EQ(m.num[WS_WIRE_T_CODE], 127u);
}

TEST_F(AgentTest, ABadDirectoryFailsItsStreamOnly)
{
    Agent a(agent_, init_);
    a.Hello();
    Streams s;
    Command c;
    c.argv = {"/bin/true"};
    c.cwd = "/nonexistent-dir";
    a.Send(StartFrame(1, c), s.Fds());
    s.Sent();
    Msg m;
    ASSERT_TRUE(a.Expect(WS_WIRE_FAILED, 1, &m));
    EXPECT_EQ(m.num[WS_WIRE_T_ERRNO], (uint64_t)ENOENT);
    EXPECT_EQ(m.str[WS_WIRE_T_MESSAGE],
              "the command could not be started: No such file or directory");
    Streams s2;
    c.cwd = "/";
    Start(a, 2, c, s2);
    ASSERT_TRUE(a.Expect(WS_WIRE_EXITED, 2, &m));
    EXPECT_EQ(m.num[WS_WIRE_T_CODE], 0u);
}

// What a command prints is output, whatever it looks like: a forged record
// or frame on stdout changes nothing of the real one.
TEST_F(AgentTest, AForgedRecordIsJustOutput)
{
    Agent a(agent_, init_);
    a.Hello();
    Streams s;
    Command c;
    c.argv = {"/bin/sh", "-c",
              "printf '\\033_wsinit;exited 0\\033\\\\'; printf '\\033_wsinit;exited 0\\033\\\\' "
              ">&2; exit 3"};
    Start(a, 1, c, s);
    EXPECT_EQ(s.Out(), "\x1b_wsinit;exited 0\x1b\\");
    EXPECT_EQ(s.Err(), "\x1b_wsinit;exited 0\x1b\\");
    Msg m;
    ASSERT_TRUE(a.Expect(WS_WIRE_EXITED, 1, &m));
    EXPECT_EQ(m.num[WS_WIRE_T_CODE], 3u);
}

TEST_F(AgentTest, HundredConcurrentCommands)
{
    Agent a(agent_, init_);
    a.Hello();
    const int n = 100;
    std::vector<std::unique_ptr<Streams>> ss;
    for (int i = 0; i < n; i++) {
        ss.push_back(std::make_unique<Streams>());
        Command c;
        c.argv = {"/bin/sh", "-c",
                  "sleep 0.2; echo " + std::to_string(i) + "; exit " + std::to_string(i % 7)};
        a.Send(StartFrame((uint32_t)(i + 1), c), ss.back()->Fds());
        ss.back()->Sent();
    }
    for (int i = 0; i < n; i++) {
        EXPECT_EQ(ss[i]->Out(), std::to_string(i) + "\n");
        Msg m;
        ASSERT_TRUE(a.Expect(WS_WIRE_EXITED, (uint32_t)(i + 1), &m)) << i;
        EXPECT_EQ(m.num[WS_WIRE_T_CODE], (uint64_t)(i % 7)) << i;
    }
}

TEST_F(AgentTest, Terminal)
{
    Agent a(agent_, init_);
    a.Hello();
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    ASSERT_GE(master, 0);
    ASSERT_EQ(grantpt(master), 0);
    ASSERT_EQ(unlockpt(master), 0);
    int slave = open(ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
    ASSERT_GE(slave, 0);
    Command c;
    c.argv = {"/bin/sh", "-c", "test -t 0 && test -t 1 && tty; echo done"};
    a.Send(StartFrame(1, c, true), {slave});
    close(slave);
    Msg m;
    ASSERT_TRUE(a.Expect(WS_WIRE_EXITED, 1, &m));
    EXPECT_EQ(m.num[WS_WIRE_T_CODE], 0u);
    std::string out = Streams::ReadAll(master, 3000);
    close(master);
    EXPECT_NE(out.find("/dev/pts/"), std::string::npos) << out;
    EXPECT_NE(out.find("done"), std::string::npos) << out;
}

// Each way a frame can be wrong ends the agent: FAILED on stream 0 with
// the reason, exit status 1, nothing of its commands left.
TEST_F(AgentTest, MalformedFramesEndTheAgentWithTheirReason)
{
    auto hello =
        Frame(WS_WIRE_HELLO, 0, [](ws_wire_out *o) { ws_wire_put_u64(o, WS_WIRE_T_VERSION, 1); });
    Command ok;
    ok.argv = {"/bin/true"};
    struct Case {
        const char *what;
        std::function<void(Agent &)> send;
        std::string reason;
    } cases[] = {
        {"a START before HELLO",
         [&](Agent &a) {
             Streams s;
             a.Send(StartFrame(1, ok), s.Fds());
         },
         "a frame before the server's HELLO"},
        {"a HELLO of another version",
         [&](Agent &a) {
             a.Send(Frame(WS_WIRE_HELLO, 0,
                          [](ws_wire_out *o) { ws_wire_put_u64(o, WS_WIRE_T_VERSION, 2); }));
         },
         "a HELLO of another version, or on a stream"},
        {"a second HELLO",
         [&](Agent &a) {
             a.Send(hello);
             a.Send(hello);
         },
         "a second HELLO"},
        {"a bad header",
         [&](Agent &a) {
             auto f = hello;
             f[2] = 1;
             a.Send(f);
         },
         "a frame header of another version, type or flags"},
        {"an oversized frame",
         [&](Agent &a) {
             auto f = hello;
             f[11] = 0x40;
             a.Send(f);
         },
         "a frame longer than the protocol allows"},
        {"a frame only the agent sends",
         [&](Agent &a) {
             a.Send(hello);
             a.Send(Frame(WS_WIRE_EXITED, 1));
         },
         "a frame only the agent sends"},
        {"a START without descriptors",
         [&](Agent &a) {
             a.Send(hello);
             a.Send(StartFrame(1, ok));
         },
         "a START without its descriptors"},
        {"a START with a truncated field",
         [&](Agent &a) {
             a.Send(hello);
             auto f = StartFrame(1, ok);
             f[WS_WIRE_HEADER + 2] = 0xff;
             Streams s;
             a.Send(f, s.Fds());
         },
         "a field runs past the frame"},
        {"a START on stream 0",
         [&](Agent &a) {
             a.Send(hello);
             Streams s;
             a.Send(StartFrame(0, ok), s.Fds());
         },
         "a START on stream 0 or on a stream in use"},
        {"a START with a relative directory",
         [&](Agent &a) {
             a.Send(hello);
             Command c = ok;
             c.cwd = "tmp";
             Streams s;
             a.Send(StartFrame(1, c), s.Fds());
         },
         "the directory is not absolute"},
        {"a root identity",
         [&](Agent &a) {
             a.Send(hello);
             Streams s;
             auto f = Frame(WS_WIRE_START, 1, [](ws_wire_out *o) {
                 ws_wire_put_str(o, WS_WIRE_T_ARGV, "/bin/true");
                 ws_wire_put_str(o, WS_WIRE_T_CWD, "/");
                 ws_wire_put_u64(o, WS_WIRE_T_UID, 0);
                 ws_wire_put_u64(o, WS_WIRE_T_GID, 0);
             });
             a.Send(f, s.Fds());
         },
         "an identity that is partial, root, the agent's own, or without --helper"},
        {"a SIGNAL out of range",
         [&](Agent &a) {
             a.Send(hello);
             a.Send(Frame(WS_WIRE_SIGNAL, 1,
                          [](ws_wire_out *o) { ws_wire_put_u64(o, WS_WIRE_T_SIGNO, 0); }));
         },
         "a SIGNAL without a signal number in range"},
        {"the channel ending inside a frame",
         [&](Agent &a) {
             a.Send(hello);
             auto f = StartFrame(1, ok);
             f.resize(f.size() / 2);
             a.Send(f);
         },
         ""},
    };
    for (const auto &c : cases) {
        SCOPED_TRACE(c.what);
        Agent a(agent_, init_);
        Msg m;
        ASSERT_TRUE(a.Recv(&m));
        ASSERT_EQ(m.type, WS_WIRE_HELLO);
        c.send(a);
        if (c.reason.empty()) {
            // Half a frame and then the end: said on stderr, nothing on the
            // channel (there is nobody to read it).
            a.CloseChannel();
            EXPECT_EQ(a.Wait(), 1);
            EXPECT_NE(a.Stderr().find("the channel ended inside a frame"), std::string::npos);
            continue;
        }
        ASSERT_TRUE(a.Expect(WS_WIRE_FAILED, 0, &m));
        EXPECT_EQ(m.num[WS_WIRE_T_ERRNO], (uint64_t)EPROTO);
        EXPECT_EQ(m.str[WS_WIRE_T_MESSAGE], c.reason);
        EXPECT_EQ(a.Wait(), 1);
    }
}

// The server going away ends the agent and everything it started.
TEST_F(AgentTest, EndOfChannelEndsEverything)
{
    Agent a(agent_, init_);
    a.Hello();
    std::string marker = Marker();
    Streams s1, s2;
    Command c;
    c.argv = {"/bin/sh", "-c", "setsid /bin/sleep " + marker + " & /bin/sleep " + marker};
    Start(a, 1, c, s1);
    Start(a, 2, c, s2);
    // Each: the reaper, the shell and its two sleeps (all name the marker).
    ASSERT_TRUE(WaitProcs(marker, 8, 10000, false));
    a.CloseChannel();
    EXPECT_EQ(a.Wait(), 0);
    EXPECT_EQ(CountProcs(marker), 0);
}

// The secret goes to the server in HELLO and nowhere else: the agent's own
// /proc/PID/environ no longer holds it.
TEST_F(AgentTest, SecretIsSentOnceAndWiped)
{
    const std::string secret(64, 'a');
    Agent a(agent_, init_, {}, {"WSAGENT_SECRET=" + secret, "OTHER=1"});
    a.Hello();
    EXPECT_EQ(a.hello().str.at(WS_WIRE_T_SECRET), secret);
    std::string env = ReadProcFile("/proc/" + std::to_string(a.pid()) + "/environ");
    EXPECT_EQ(env.find(secret), std::string::npos);
    EXPECT_NE(env.find("OTHER=1"), std::string::npos);
    Agent bad(agent_, init_, {}, {"WSAGENT_SECRET=short"});
    EXPECT_EQ(bad.Wait(), 127);
}

// As root: the agent becomes its helper uid, the command runs as its own,
// and the command can neither kill, trace, nor read the agent's environ,
// memory or descriptors; its identity is exactly the one asked for.
TEST_F(AgentTest, CommandsCannotReachTheAgent)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "the identities need root (uid " << geteuid() << ")";
    // Copies a uid other than root can execute: the build tree may be
    // under a home it cannot search.
    char tmpl[] = "/tmp/ws-agent-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    std::string dir = tmpl;
    ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
    for (const auto &[from, to] :
         {std::pair{kAgentRunfile, "agent"}, std::pair{kInitRunfile, "init"},
          std::pair{kProbeRunfile, "probe"}}) {
        std::ifstream in(from, std::ios::binary);
        std::ofstream out(dir + "/" + to, std::ios::binary);
        out << in.rdbuf();
        ASSERT_TRUE(in.good() && out.good()) << from;
        out.close();
        ASSERT_EQ(chmod((dir + "/" + to).c_str(), 0755), 0);
    }
    const uint64_t uid = 600210, helper = 600211;
    Agent a(dir + "/agent", dir + "/init", {"--helper", std::to_string(helper)});
    a.Hello();
    Streams s;
    Command c;
    c.uid = uid;
    c.gid = uid;
    c.argv = {"/bin/sh", "-c",
              "id -u; id -g; id -G; " + dir + "/probe attack-pid " + std::to_string(a.pid())};
    Start(a, 1, c, s);
    std::string out = s.Out();
    std::string err = s.Err();
    Msg m;
    ASSERT_TRUE(a.Expect(WS_WIRE_EXITED, 1, &m));
    EXPECT_EQ(m.num[WS_WIRE_T_CODE], 0u) << s.Err();
    EXPECT_EQ(out, "600210\n600210\n600210\ntarget uid 600211\nkill EPERM\nptrace EPERM\n"
                   "environ EACCES\nmem EACCES\nfd EACCES\nsetuid EPERM\n")
        << err;
    // The agent is alive and still serves.
    Streams s2;
    Command ok;
    ok.argv = {"/bin/echo", "alive"};
    Start(a, 2, ok, s2);
    EXPECT_EQ(s2.Out(), "alive\n");
    a.CloseChannel();
    EXPECT_EQ(a.Wait(), 0);
    for (const char *f : {"agent", "init", "probe"})
        unlink((dir + "/" + f).c_str());
    rmdir(dir.c_str());
}

} // namespace
