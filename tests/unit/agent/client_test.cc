// The server's end of the agent (server/agent/client.c) with the exec
// layer's processes (process.c, started elsewhere): commands through the
// real wsagent with their output, stdin, terminal, signals, kills and
// record; and, against a fake agent this test plays, every way an agent can
// break the protocol loses it with its reason, ends what ran through it with
// cause EVICTED and never hangs or crashes the server's side.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/agent/client.h"
#include "server/agent/wire.h"
#include "server/events/pump.h"
#include "server/exec/process.h"
}

namespace
{

using Clock = std::chrono::steady_clock;

const char kAgentRunfile[] = "server/progs/workspaced-agent";
const char kInitRunfile[] = "server/progs/workspaced-docker-init";

std::string Real(const char *runfile)
{
    char real[PATH_MAX];
    return realpath(runfile, real) ? real : runfile;
}

template <class Pred> bool WaitUntil(Pred pred, int ms = 20000)
{
    auto end = Clock::now() + std::chrono::milliseconds(ms);
    while (!pred()) {
        if (Clock::now() > end)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
}

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

int CountProcs(const std::string &marker)
{
    int n = 0;
    DIR *d = opendir("/proc");
    for (dirent *e; d && (e = readdir(d)) != nullptr;) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        if (ReadProcFile(std::string("/proc/") + e->d_name + "/cmdline").find(marker) !=
            std::string::npos)
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

std::vector<uint8_t> Frame(ws_wire_type type, uint32_t stream,
                           const std::function<void(ws_wire_out *)> &fields = nullptr)
{
    std::vector<uint8_t> buf(4096);
    ws_wire_out o;
    ws_wire_begin(&o, buf.data(), buf.size(), type, stream);
    if (fields)
        fields(&o);
    long n = ws_wire_end(&o);
    buf.resize(n > 0 ? (size_t)n : 0);
    return buf;
}

std::vector<uint8_t> Hello(pid_t pid = 1, const char *secret = nullptr)
{
    return Frame(WS_WIRE_HELLO, 0, [&](ws_wire_out *o) {
        ws_wire_put_u64(o, WS_WIRE_T_VERSION, WS_WIRE_VERSION);
        ws_wire_put_u64(o, WS_WIRE_T_PID, (uint64_t)pid);
        if (secret)
            ws_wire_put_str(o, WS_WIRE_T_SECRET, secret);
    });
}

class ClientTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        ASSERT_EQ(ws_pump_new(&pump_), 0);
        env_ = {pump_, nullptr, 300};
    }
    void TearDown() override
    {
        ws_agent_free(agent_);
        if (agent_pid_ > 0) {
            int st;
            WaitUntil([&] { return waitpid(agent_pid_, &st, WNOHANG) == agent_pid_; }, 10000);
        }
        ws_pump_free(pump_);
    }

    static void OnLost(void *arg, const char *why)
    {
        auto *t = static_cast<ClientTest *>(arg);
        std::lock_guard<std::mutex> g(t->mu_);
        t->lost_.push_back(why);
    }
    std::vector<std::string> Lost()
    {
        std::lock_guard<std::mutex> g(mu_);
        return lost_;
    }

    // The real agent on the far end of a socketpair.
    void StartRealAgent()
    {
        int sv[2];
        ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        std::string agent = Real(kAgentRunfile), init = Real(kInitRunfile);
        agent_pid_ = fork();
        if (agent_pid_ == 0) {
            dup2(sv[1], 3);
            const char *argv[] = {agent.c_str(),  "--init", init.c_str(),
                                  "--channel-fd", "3",      nullptr};
            char *envp[] = {nullptr};
            execve(agent.c_str(), const_cast<char **>(argv), envp);
            _exit(126);
        }
        close(sv[1]);
        ws_agent_config cfg = {pump_, sv[0], nullptr, OnLost, this};
        char why[256] = "";
        ASSERT_EQ(ws_agent_new(&cfg, &agent_, why, sizeof(why)), 0) << why;
        EXPECT_EQ(ws_agent_pid(agent_), agent_pid_);
    }

    // A fake agent: the test's end of the channel, after HELLO.
    int StartFakeAgent(const std::vector<uint8_t> &hello = Hello(), const char *secret = nullptr,
                       int *ret_err = nullptr, std::string *ret_why = nullptr)
    {
        int sv[2];
        EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        EXPECT_EQ(write(sv[1], hello.data(), hello.size()), (ssize_t)hello.size());
        ws_agent_config cfg = {pump_, sv[0], secret, OnLost, this};
        char why[256] = "";
        int err = ws_agent_new(&cfg, &agent_, why, sizeof(why));
        if (ret_err)
            *ret_err = err;
        if (ret_why)
            *ret_why = why;
        return sv[1];
    }

    struct Ran {
        ws_proc *p = nullptr;
        int err = 0;
    };
    Ran Spawn(const std::vector<std::string> &argv, bool stdin_pipe = false, bool pty = false,
              uint64_t agent_timeout = 0)
    {
        std::vector<const char *> av, ev = {"PATH=/usr/bin:/bin", nullptr};
        for (auto &a : argv)
            av.push_back(a.c_str());
        av.push_back(nullptr);
        ws_agent_command c = {};
        c.argv = av.data();
        c.envp = ev.data();
        c.cwd = "/";
        c.pty = pty;
        c.timeout_ms = agent_timeout;
        ws_proc_wrapper w;
        Ran r;
        r.err = ws_agent_wrap(agent_, &c, &w);
        if (r.err < 0)
            return r;
        int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ws_proc_config pc = {};
        pc.argv = av.data();
        pc.envp = ev.data();
        pc.cwd_fd = root;
        pc.cwd = ".";
        pc.stdin_pipe = stdin_pipe;
        pc.pty = pty;
        pc.ring_bytes = 1 << 20;
        pc.capture_bytes = 1 << 20;
        pc.wrapper = &w;
        r.err = ws_proc_spawn(&env_, &pc, &r.p);
        close(root);
        return r;
    }
    ws_proc_result Wait(ws_proc *p, int ms = 20000)
    {
        ws_proc_result r = {};
        EXPECT_TRUE(WaitUntil([&] { return ws_proc_get_result(p, &r); }, ms)) << "not done";
        return r;
    }
    std::string Captured(ws_proc *p, ws_stream s)
    {
        std::string buf(2 << 20, '\0');
        buf.resize(ws_proc_capture(p, s, buf.data(), buf.size()));
        return buf;
    }

    ws_pump *pump_ = nullptr;
    ws_proc_env env_ = {};
    ws_agent *agent_ = nullptr;
    pid_t agent_pid_ = -1;
    std::mutex mu_;
    std::vector<std::string> lost_;
};

TEST_F(ClientTest, RunsACommandThroughTheAgent)
{
    StartRealAgent();
    Ran r = Spawn({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"});
    ASSERT_EQ(r.err, 0) << strerror(-r.err) << " " << ::testing::PrintToString(Lost());
    EXPECT_GT(ws_proc_pid(r.p), 0);
    ws_proc_result res = Wait(r.p);
    EXPECT_EQ(res.cause, WS_CAUSE_EXITED);
    EXPECT_EQ(res.exit_code, 3);
    EXPECT_EQ(Captured(r.p, WS_STREAM_STDOUT), "out\n");
    EXPECT_EQ(Captured(r.p, WS_STREAM_STDERR), "err\n");
    EXPECT_EQ(res.streams[WS_STREAM_STDOUT].total, 4u);
    EXPECT_GT(res.max_rss_bytes, 0u);
    ws_proc_unref(r.p);
    EXPECT_EQ(ws_agent_running(agent_), 0u);
    EXPECT_TRUE(Lost().empty());
}

TEST_F(ClientTest, StdinTerminalSignalsAndKills)
{
    StartRealAgent();
    // stdin, written and closed through the exec layer.
    Ran cat = Spawn({"/bin/cat"}, true);
    ASSERT_EQ(cat.err, 0);
    ASSERT_EQ(ws_proc_write_stdin(cat.p, "hello\n", 6, nullptr, nullptr), 0);
    ASSERT_TRUE(WaitUntil([&] { return ws_proc_close_stdin(cat.p) == 0; }));
    ws_proc_result res = Wait(cat.p);
    EXPECT_EQ(res.exit_code, 0);
    EXPECT_EQ(Captured(cat.p, WS_STREAM_STDOUT), "hello\n");
    ws_proc_unref(cat.p);

    // A terminal, resized from here.
    Ran tty = Spawn({"/bin/sh", "-c", "sleep 0.3; stty size; tty"}, false, true);
    ASSERT_EQ(tty.err, 0);
    EXPECT_EQ(ws_proc_resize(tty.p, 33, 101), 0);
    res = Wait(tty.p);
    EXPECT_EQ(res.exit_code, 0);
    std::string out = Captured(tty.p, WS_STREAM_PTY);
    EXPECT_NE(out.find("33 101"), std::string::npos) << out;
    EXPECT_NE(out.find("/dev/pts/"), std::string::npos) << out;
    ws_proc_unref(tty.p);

    // A signal reaches the command.
    std::string marker = Marker();
    Ran sl = Spawn({"/bin/sleep", marker});
    ASSERT_EQ(sl.err, 0);
    // The reaper and the sleep (or its child about to be) both name it.
    ASSERT_TRUE(WaitUntil([&] { return CountProcs(marker) == 2; }))
        << CountProcs(marker) << " " << ws_proc_get_result(sl.p, &res);
    EXPECT_EQ(ws_proc_signal(sl.p, SIGTERM), 0);
    res = Wait(sl.p);
    EXPECT_EQ(res.cause, WS_CAUSE_SIGNALED);
    EXPECT_EQ(res.signal, SIGTERM);
    ws_proc_unref(sl.p);

    // A kill with grace ends the tree, escapees included.
    Ran tree = Spawn(
        {"/bin/sh", "-c", "trap '' TERM; setsid /bin/sleep " + marker + " & /bin/sleep " + marker});
    ASSERT_EQ(tree.err, 0);
    ASSERT_TRUE(WaitUntil([&] { return CountProcs(marker) >= 4; }));
    ws_proc_kill(tree.p, WS_CAUSE_CANCELLED, true);
    res = Wait(tree.p);
    EXPECT_EQ(res.cause, WS_CAUSE_CANCELLED);
    EXPECT_EQ(CountProcs(marker), 0);
    ws_proc_unref(tree.p);

    // The agent's backstop timeout.
    Ran bs = Spawn({"/bin/sleep", marker}, false, false, 200);
    ASSERT_EQ(bs.err, 0);
    res = Wait(bs.p);
    EXPECT_EQ(res.cause, WS_CAUSE_SIGNALED);
    EXPECT_EQ(res.signal, SIGKILL);
    ws_proc_unref(bs.p);
    EXPECT_TRUE(Lost().empty());
}

TEST_F(ClientTest, ACommandThatCannotStartFailsItsSpawn)
{
    StartRealAgent();
    std::vector<const char *> av = {"/bin/true", nullptr}, ev = {nullptr};
    ws_agent_command c = {};
    c.argv = av.data();
    c.envp = ev.data();
    c.cwd = "/nonexistent-dir";
    ws_proc_wrapper w;
    ASSERT_EQ(ws_agent_wrap(agent_, &c, &w), 0);
    int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ws_proc_config pc = {};
    pc.argv = av.data();
    pc.envp = ev.data();
    pc.cwd_fd = root;
    pc.ring_bytes = 4096;
    pc.wrapper = &w;
    ws_proc *p = nullptr;
    EXPECT_EQ(ws_proc_spawn(&env_, &pc, &p), -ENOENT);
    close(root);
    // The agent still serves.
    Ran ok = Spawn({"/bin/echo", "fine"});
    ASSERT_EQ(ok.err, 0);
    Wait(ok.p);
    EXPECT_EQ(Captured(ok.p, WS_STREAM_STDOUT), "fine\n");
    ws_proc_unref(ok.p);
}

// The agent killed from outside: its running command ends at once with
// cause EVICTED, the owner hears why, later commands are refused.
TEST_F(ClientTest, AnAgentThatDiesEvictsItsCommands)
{
    StartRealAgent();
    std::string marker = Marker();
    Ran r = Spawn({"/bin/sleep", marker});
    ASSERT_EQ(r.err, 0);
    ASSERT_TRUE(WaitUntil([&] { return CountProcs(marker) == 2; }));
    ASSERT_EQ(kill(agent_pid_, SIGKILL), 0);
    ws_proc_result res = Wait(r.p);
    EXPECT_EQ(res.cause, WS_CAUSE_EVICTED);
    ws_proc_unref(r.p);
    ASSERT_TRUE(WaitUntil([&] { return !Lost().empty(); }));
    EXPECT_EQ(Lost(), std::vector<std::string>{
                          "the agent's channel ended (the agent exited or was killed)"});
    char why[256];
    EXPECT_TRUE(ws_agent_lost(agent_, why, sizeof(why)));
    Ran after = Spawn({"/bin/true"});
    EXPECT_EQ(after.err, -ECONNRESET);
    // Outside a box nothing takes the orphans down with the agent: the
    // test does (inside one, the box's end does).
    WaitUntil([&] {
        DIR *d = opendir("/proc");
        for (dirent *e; d && (e = readdir(d)) != nullptr;) {
            if (ReadProcFile(std::string("/proc/") + e->d_name + "/cmdline").find(marker) !=
                std::string::npos)
                kill(atoi(e->d_name), SIGKILL);
        }
        if (d)
            closedir(d);
        return CountProcs(marker) == 0;
    });
}

TEST_F(ClientTest, HelloIsChecked)
{
    const std::string good(64, 'b');
    struct Case {
        const char *what;
        std::vector<uint8_t> hello;
        const char *secret; // what the server expects
        int err;
        std::string why;
    } cases[] = {
        {"another version",
         Frame(WS_WIRE_HELLO, 0,
               [](ws_wire_out *o) {
                   ws_wire_put_u64(o, WS_WIRE_T_VERSION, 2);
                   ws_wire_put_u64(o, WS_WIRE_T_PID, 1);
               }),
         nullptr, -EPROTO, "the agent's first frame is not a HELLO of version 1"},
        {"not a HELLO", Frame(WS_WIRE_STARTED, 1), nullptr, -EPROTO,
         "the agent's first frame is not a HELLO of version 1"},
        {"no pid",
         Frame(WS_WIRE_HELLO, 0, [](ws_wire_out *o) { ws_wire_put_u64(o, WS_WIRE_T_VERSION, 1); }),
         nullptr, -EPROTO, "the agent's first frame is not a HELLO of version 1"},
        {"a missing secret", Hello(), good.c_str(), -EPERM,
         "the peer did not present the agent's secret"},
        {"a wrong secret", Hello(1, std::string(64, 'a').c_str()), good.c_str(), -EPERM,
         "the peer did not present the agent's secret"},
        {"the end before HELLO",
         {},
         nullptr,
         -ECONNRESET,
         "the agent's channel ended before its HELLO"},
    };
    for (auto &c : cases) {
        SCOPED_TRACE(c.what);
        const char *secret = c.secret;
        int want = c.err;
        const std::string &why_want = c.why;
        int err = 0;
        std::string why;
        int fd;
        if (c.hello.empty()) {
            int sv[2];
            ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
            close(sv[1]);
            ws_agent_config cfg = {pump_, sv[0], nullptr, OnLost, this};
            char w[256] = "";
            err = ws_agent_new(&cfg, &agent_, w, sizeof(w));
            why = w;
            fd = -1;
        } else {
            fd = StartFakeAgent(c.hello, secret, &err, &why);
        }
        EXPECT_EQ(err, want);
        EXPECT_EQ(why, why_want);
        if (fd >= 0)
            close(fd);
        agent_ = nullptr;
    }
    // The right secret is taken.
    int err = -1;
    int fd = StartFakeAgent(Hello(1, good.c_str()), good.c_str(), &err);
    EXPECT_EQ(err, 0);
    close(fd);
}

// A fake agent breaks the protocol each way it can: the server's side loses
// it with the exact reason, a start waiting fails, a running command ends
// EVICTED, and nothing hangs.
TEST_F(ClientTest, ProtocolViolationsLoseTheAgent)
{
    struct Case {
        const char *what;
        std::vector<uint8_t> bytes; // sent once a command is running on stream 1
        std::string why;
    } cases[] = {
        {"a second HELLO", Hello(),
         "the agent broke the protocol: a frame the agent may not send now"},
        {"a START", Frame(WS_WIRE_START, 2),
         "the agent broke the protocol: a frame the agent may not send now"},
        {"EXITED for an unknown stream",
         Frame(WS_WIRE_EXITED, 9,
               [](ws_wire_out *o) {
                   ws_wire_put_u64(o, WS_WIRE_T_STATUS, 0);
                   ws_wire_put_u64(o, WS_WIRE_T_CODE, 0);
               }),
         "the agent broke the protocol: an EXITED for a stream that is not running"},
        {"STARTED twice",
         Frame(WS_WIRE_STARTED, 1, [](ws_wire_out *o) { ws_wire_put_u64(o, WS_WIRE_T_PID, 5); }),
         "the agent broke the protocol: a STARTED for a stream that is not starting"},
        {"an EXITED with no status", Frame(WS_WIRE_EXITED, 1),
         "the agent broke the protocol: an EXITED without a valid status"},
        {"an exit code out of range",
         Frame(WS_WIRE_EXITED, 1,
               [](ws_wire_out *o) {
                   ws_wire_put_u64(o, WS_WIRE_T_STATUS, 0);
                   ws_wire_put_u64(o, WS_WIRE_T_CODE, 256);
               }),
         "the agent broke the protocol: an EXITED without a valid status"},
        {"a bad header",
         {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9},
         "the agent broke the protocol: a frame header of another version, type or flags"},
        {"an oversized frame",
         {1, 5, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x10},
         "the agent broke the protocol: a frame longer than the protocol allows"},
        {"a field past its frame",
         {1, 5, 0, 0, 1, 0, 0, 0, 6, 0, 0, 0, 30, 0, 99, 0, 0, 0},
         "the agent broke the protocol: a field runs past its frame"},
        {"the agent giving up",
         Frame(WS_WIRE_FAILED, 0,
               [](ws_wire_out *o) {
                   ws_wire_put_u64(o, WS_WIRE_T_ERRNO, EPROTO);
                   ws_wire_put_str(o, WS_WIRE_T_MESSAGE, "out of \x01 sorts");
               }),
         "the agent gave up: out of ? sorts"},
        {"the end inside a frame",
         {1, 5, 0, 0, 1, 0},
         "the agent's channel ended (the agent exited or was killed)"},
    };
    for (auto &c : cases) {
        SCOPED_TRACE(c.what);
        {
            std::lock_guard<std::mutex> g(mu_);
            lost_.clear();
        }
        int err = -1;
        int fd = StartFakeAgent(Hello(), nullptr, &err);
        ASSERT_EQ(err, 0);
        // Play the agent for one START: read the server's HELLO and START,
        // answer STARTED, keep the command's descriptors.
        std::atomic<bool> started{false};
        std::vector<int> got_fds;
        std::thread fake([&] {
            std::vector<uint8_t> buf(1 << 20);
            ws_wire_in in;
            ws_wire_in_init(&in, buf.data(), buf.size());
            int frames = 0;
            while (frames < 2) {
                size_t room;
                uint8_t *at = ws_wire_in_space(&in, &room);
                union {
                    cmsghdr h;
                    char b[CMSG_SPACE(8 * sizeof(int))];
                } ctl;
                iovec iov = {at, room};
                msghdr m = {};
                m.msg_iov = &iov;
                m.msg_iovlen = 1;
                m.msg_control = ctl.b;
                m.msg_controllen = sizeof(ctl.b);
                ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
                if (n <= 0)
                    return;
                for (cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
                    for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                        int f;
                        memcpy(&f, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
                        got_fds.push_back(f);
                    }
                ws_wire_in_added(&in, (size_t)n);
                ws_wire_frame f;
                while (ws_wire_next(&in, &f) == 1)
                    frames++;
            }
            auto s = Frame(WS_WIRE_STARTED, 1,
                           [](ws_wire_out *o) { ws_wire_put_u64(o, WS_WIRE_T_PID, 42); });
            (void)!write(fd, s.data(), s.size());
            started = true;
        });
        Ran r = Spawn({"/bin/true"});
        fake.join();
        ASSERT_TRUE(started);
        ASSERT_EQ(r.err, 0);
        EXPECT_EQ(ws_proc_pid(r.p), 42);
        EXPECT_EQ(got_fds.size(), 3u);
        for (int f : got_fds)
            close(f);
        ASSERT_EQ(write(fd, c.bytes.data(), c.bytes.size()), (ssize_t)c.bytes.size());
        if (std::string(c.what) == "the end inside a frame")
            close(fd);
        ws_proc_result res = Wait(r.p);
        EXPECT_EQ(res.cause, WS_CAUSE_EVICTED);
        ws_proc_unref(r.p);
        ASSERT_TRUE(WaitUntil([&] { return !Lost().empty(); }));
        EXPECT_EQ(Lost(), std::vector<std::string>{c.why});
        if (std::string(c.what) != "the end inside a frame") {
            // The server shut the channel: the fake agent reads its end.
            char b[64];
            pollfd p = {fd, POLLIN, 0};
            EXPECT_EQ(poll(&p, 1, 5000), 1);
            while (read(fd, b, sizeof(b)) > 0)
                ;
            close(fd);
        }
        ws_agent_free(agent_);
        agent_ = nullptr;
    }
}

// An agent that never answers a START: the start gives up after its bound
// is not tested here (30 s); one that answers FAILED fails the spawn with
// its errno, and the agent stays.
TEST_F(ClientTest, AFailedStartIsTheSpawnsError)
{
    int err = -1;
    int fd = StartFakeAgent(Hello(), nullptr, &err);
    ASSERT_EQ(err, 0);
    std::thread fake([&] {
        std::vector<uint8_t> buf(1 << 20);
        size_t have = 0;
        // HELLO (12 + 14 bytes), then the START: answer once both came.
        for (;;) {
            ssize_t n = read(fd, buf.data() + have, buf.size() - have);
            if (n <= 0)
                return;
            have += (size_t)n;
            if (have > 26 + 12)
                break;
        }
        auto f = Frame(WS_WIRE_FAILED, 1, [](ws_wire_out *o) {
            ws_wire_put_u64(o, WS_WIRE_T_ERRNO, EACCES);
            ws_wire_put_str(o, WS_WIRE_T_MESSAGE, "no");
        });
        (void)!write(fd, f.data(), f.size());
    });
    Ran r = Spawn({"/bin/true"});
    fake.join();
    EXPECT_EQ(r.err, -EACCES);
    EXPECT_FALSE(ws_agent_lost(agent_, nullptr, 0));
    EXPECT_EQ(ws_agent_running(agent_), 0u);
    close(fd);
}

} // namespace
