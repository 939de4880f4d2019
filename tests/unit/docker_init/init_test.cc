// Tests for server/progs/docker_init.c, the wrapper every Docker-provider command
// runs under. The static binary is run directly on the host (it needs no
// container: a subreaper, /proc and signals are all it uses), with its stdout
// and stderr on pipes, and every property is checked from the exit record,
// the exit code, the output or /proc as seen from here.
#include <elf.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace
{

using Clock = std::chrono::steady_clock;

const char kInitRunfile[] = "server/progs/workspaced-docker-init";
const char kProbeRunfile[] = "tests/unit/docker_init/init-probe";
// Long enough for any noisy machine; a test only waits this long when the
// feature under test is broken (something was left running).
const int kFinishWaitMs = 60000;

std::string Record(const std::string &status)
{
    return "\x1b_wsinit;" + status + "\x1b\\";
}

// The record of an init that was given a nonce.
std::string NonceRecord(const std::string &nonce, const std::string &status)
{
    return Record(nonce + ";" + status);
}

bool EndsWith(const std::string &s, const std::string &suffix)
{
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

size_t Count(const std::string &s, const std::string &what)
{
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
        n++;
    return n;
}

long ElapsedMs(Clock::time_point t0)
{
    return (long)std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

// Resolved once, from the runfiles directory the test starts in (a test
// may change directory later).
std::string InitPath()
{
    static const std::string path = [] {
        char real[PATH_MAX];
        return std::string(realpath(kInitRunfile, real) ? real : kInitRunfile);
    }();
    return path;
}

// A fresh ID per run, so that concurrent tests (and leftovers of a crashed
// one) never answer to each other's `signal`.
std::string NewId()
{
    unsigned char raw[8];
    std::ifstream urandom("/dev/urandom", std::ios::binary);
    urandom.read(reinterpret_cast<char *>(raw), sizeof(raw));
    EXPECT_TRUE(urandom.good());
    static const char hex[] = "0123456789abcdef";
    std::string id = "p_";
    for (unsigned char c : raw) {
        id += hex[c >> 4];
        id += hex[c & 15];
    }
    return id;
}

std::string TempPath(const std::string &name)
{
    const char *base = getenv("TEST_TMPDIR");
    return std::string(base ? base : "/tmp") + "/" + name;
}

// `sleep N.SUFFIX`, N telling a test's sleeps apart and SUFFIX this test
// process (its pid and a random part) from any other running now or
// earlier: a check by pid and command line never takes another run's
// sleep for one of its own (nor kills it).
std::string Sleep(int n)
{
    static const std::string suffix = [] {
        unsigned char raw[4];
        std::ifstream urandom("/dev/urandom", std::ios::binary);
        urandom.read(reinterpret_cast<char *>(raw), sizeof(raw));
        unsigned long r = (unsigned long)raw[0] << 24 | raw[1] << 16 | raw[2] << 8 | raw[3];
        char buf[32];
        snprintf(buf, sizeof(buf), "%07d%010lu", (int)getpid(), r);
        return std::string(buf);
    }();
    return "sleep " + std::to_string(n) + "." + suffix;
}

// /proc/PID/cmdline with NULs as spaces, "" when there is no such process.
std::string Cmdline(pid_t pid)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (char &c : s)
        if (c == '\0')
            c = ' ';
    if (!s.empty() && s.back() == ' ')
        s.pop_back();
    return s;
}

// Fields of /proc/PID/stat after the comm: [0] is field 3 (state), [1] is
// field 4 (ppid), [3] is field 6 (session). Empty when the process is gone.
std::vector<std::string> StatFields(pid_t pid)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<std::string> out;
    size_t close = s.rfind(')');
    if (close == std::string::npos)
        return out;
    std::istringstream in(s.substr(close + 1));
    for (std::string field; in >> field;)
        out.push_back(field);
    return out;
}

// True when the sleeper is gone: no process with that pid runs `cmdline`.
// One that is still there is killed, so a failing test leaves nothing behind.
bool Gone(pid_t pid, const std::string &cmdline)
{
    if (pid <= 0)
        return false;
    if (Cmdline(pid) != cmdline)
        return true;
    (void)kill(pid, SIGKILL);
    return false;
}

// Whether `pid` is blocked in sigwait (rt_sigtimedwait), from
// /proc/PID/syscall. (Its signal mask does not tell: while the call waits,
// the kernel unblocks the signals it waits for.)
bool InSigwait(pid_t pid, std::string *ret_seen = nullptr)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/syscall");
    std::string nr;
    bool read = static_cast<bool>(f >> nr);
    if (ret_seen)
        *ret_seen = read ? nr : "nothing readable";
    return read && nr == std::to_string(SYS_rt_sigtimedwait);
}

// True when `pid` is running `cmdline` and is not a zombie.
bool Alive(pid_t pid, const std::string &cmdline)
{
    std::vector<std::string> st = StatFields(pid);
    return !st.empty() && st[0] != "Z" && Cmdline(pid) == cmdline;
}

struct Result {
    int status = -1; // wait status of init; -1 when it did not end in time
    std::string out, err;
    long elapsed_ms = 0;
};

// A running init, its stdout and stderr read through pipes.
class Init
{
  public:
    Init() = default;
    Init(const Init &) = delete;
    Init &operator=(const Init &) = delete;
    // Every init a test starts is waited for by Finish (or Exited), which
    // is where its exit is checked; one that never was is a test that did
    // not look.
    ~Init()
    {
        if (pid_ > 0) {
            (void)kill(pid_, SIGKILL);
            (void)waitpid(pid_, nullptr, 0);
            if (!::testing::Test::HasFailure())
                ADD_FAILURE() << "an init was started but never waited for";
        }
        CloseFds();
    }

    // Starts `init ARGS...` with stdin on /dev/null and no core dumps,
    // `env` ("NAME=value") added to the environment, and the capabilities
    // in `drop` taken out of the bounding set first (so that init, started
    // as root, lacks them).
    bool Start(const std::vector<std::string> &args, const std::vector<std::string> &env = {},
               const std::vector<int> &drop = {})
    {
        int out[2], err[2];
        if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)
            return false;
        std::string path = InitPath();
        std::vector<char *> argv;
        argv.push_back(const_cast<char *>(path.c_str()));
        for (const auto &a : args)
            argv.push_back(const_cast<char *>(a.c_str()));
        argv.push_back(nullptr);
        t0_ = Clock::now();
        pid_ = fork();
        if (pid_ < 0)
            return false;
        if (pid_ == 0) {
            struct rlimit no_core = {0, 0};
            int null = open("/dev/null", O_RDONLY);
            if (null < 0 || dup2(null, 0) < 0 || dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0)
                _exit(120);
            (void)setrlimit(RLIMIT_CORE, &no_core);
            for (const auto &e : env)
                if (putenv(const_cast<char *>(e.c_str())) != 0)
                    _exit(122);
            for (int cap : drop)
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0)
                    _exit(123);
            execv(argv[0], argv.data());
            _exit(121);
        }
        close(out[1]);
        close(err[1]);
        out_ = out[0];
        err_ = err[0];
        return true;
    }

    pid_t pid() const
    {
        return pid_;
    }

    // Reads stdout until it holds `lines` complete lines (or EOF / the
    // deadline); returns them.
    std::vector<std::string> ReadLines(size_t lines)
    {
        auto give_up = Clock::now() + std::chrono::milliseconds(kFinishWaitMs);
        while (Count(out_buf_, "\n") < lines && out_ >= 0 && Clock::now() < give_up)
            Pump(100);
        std::vector<std::string> v;
        std::istringstream in(out_buf_);
        for (std::string l; v.size() < lines && std::getline(in, l);)
            v.push_back(l);
        return v;
    }

    // Reads both pipes to EOF and reaps init, both within kFinishWaitMs.
    Result Finish()
    {
        Result r;
        auto give_up = Clock::now() + std::chrono::milliseconds(kFinishWaitMs);
        while ((out_ >= 0 || err_ >= 0) && Clock::now() < give_up)
            Pump(100);
        while (Clock::now() < give_up) {
            pid_t w = waitpid(pid_, &r.status, WNOHANG);
            if (w == pid_) {
                pid_ = -1;
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        if (pid_ > 0)
            r.status = -1;
        r.elapsed_ms = ElapsedMs(t0_);
        r.out = out_buf_;
        r.err = err_buf_;
        return r;
    }

    // Nonzero once init has exited (and then reaps it).
    bool Exited()
    {
        int status;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            return true;
        }
        return false;
    }

  private:
    void Pump(int timeout_ms)
    {
        struct pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
        if (poll(fds, 2, timeout_ms) <= 0)
            return;
        char buf[65536];
        for (int i = 0; i < 2; i++) {
            int *fd = i == 0 ? &out_ : &err_;
            std::string *sink = i == 0 ? &out_buf_ : &err_buf_;
            if (*fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t n = read(*fd, buf, sizeof(buf));
            if (n > 0) {
                sink->append(buf, (size_t)n);
            } else if (n == 0 || errno != EINTR) {
                close(*fd);
                *fd = -1;
            }
        }
    }

    void CloseFds()
    {
        if (out_ >= 0)
            close(out_);
        if (err_ >= 0)
            close(err_);
        out_ = err_ = -1;
    }

    pid_t pid_ = -1;
    int out_ = -1, err_ = -1;
    std::string out_buf_, err_buf_;
    Clock::time_point t0_;
};

Result RunInit(const std::vector<std::string> &args, const std::vector<std::string> &env = {},
               const std::vector<int> &drop = {})
{
    Init init;
    if (!init.Start(args, env, drop))
        return Result{};
    return init.Finish();
}

// `init run ID TIMEOUT /bin/sh -c SCRIPT`.
std::vector<std::string> Shell(const std::string &id, const std::string &script,
                               const std::string &timeout_ms = "0")
{
    return {"run", id, timeout_ms, "/bin/sh", "-c", script};
}

int ExitCode(const Result &r)
{
    return r.status >= 0 && WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1;
}

pid_t ToPid(const std::string &s)
{
    return (pid_t)atoi(s.c_str());
}

// ---- exit records ----

TEST(DockerInitTest, ExitCodesPassThroughAndTheRecordIsTheLastBytes)
{
    for (int code : {0, 3, 255}) {
        Result r = RunInit(Shell(NewId(), "echo out; echo err >&2; exit " + std::to_string(code)));
        EXPECT_EQ(ExitCode(r), code);
        EXPECT_EQ(r.out, "out\n");
        EXPECT_EQ(r.err, "err\n" + Record("exited " + std::to_string(code)));
    }
}

TEST(DockerInitTest, CommandKilledByASignalIsReportedSignaled)
{
    Result r = RunInit(Shell(NewId(), "kill -USR1 $$"));
    EXPECT_EQ(ExitCode(r), 128 + SIGUSR1);
    EXPECT_EQ(r.err, Record("signaled " + std::to_string(SIGUSR1)));
}

TEST(DockerInitTest, ArgumentsReachTheProgramUnchanged)
{
    Result r = RunInit(
        {"run", NewId(), "0", "/bin/sh", "-c", "printf '[%s]' \"$@\"", "zero", "a b", "", "--x"});
    EXPECT_EQ(ExitCode(r), 0);
    EXPECT_EQ(r.out, "[a b][][--x]");
    EXPECT_EQ(r.err, Record("exited 0"));
}

// Decided: a PROGRAM that cannot be executed still gets an exit record
// (exited 127 for ENOENT, 126 otherwise), after a one-line message.
TEST(DockerInitTest, MissingProgramIsExited127WithAMessage)
{
    Result r = RunInit({"run", NewId(), "0", "/nonexistent/workspaced-program", "arg"});
    EXPECT_EQ(ExitCode(r), 127);
    EXPECT_EQ(r.out, "");
    const std::string rec = Record("exited 127");
    ASSERT_TRUE(EndsWith(r.err, rec)) << r.err;
    std::string message = r.err.substr(0, r.err.size() - rec.size());
    EXPECT_EQ(message.rfind("workspaced-docker-init: cannot execute "
                            "/nonexistent/workspaced-program: ",
                            0),
              0u)
        << message;
    EXPECT_EQ(Count(message, "\n"), 1u) << message;
    EXPECT_TRUE(EndsWith(message, "\n")) << message;
}

TEST(DockerInitTest, UnexecutableProgramIsExited126WithAMessage)
{
    Result r = RunInit({"run", NewId(), "0", "/"}); // a directory: EACCES, even for root
    EXPECT_EQ(ExitCode(r), 126);
    const std::string rec = Record("exited 126");
    ASSERT_TRUE(EndsWith(r.err, rec)) << r.err;
    EXPECT_EQ(r.err.rfind("workspaced-docker-init: cannot execute /: ", 0), 0u) << r.err;
}

// The command's own 127 is not an exec failure: no message.
// --cwd: the command starts there; a directory that is not there is like
// a program that is not (127, one line, the record); a relative one is
// misuse.
TEST(DockerInitTest, TheCommandStartsInItsCwd)
{
    Result r = RunInit({"run", "--cwd", "/tmp", NewId(), "0", "/bin/pwd"});
    EXPECT_EQ(ExitCode(r), 0);
    EXPECT_EQ(r.out, "/tmp\n");
    EXPECT_EQ(r.err, Record("exited 0"));
    r = RunInit({"run", "--cwd", "/nonexistent-workspaced-dir", NewId(), "0", "/bin/pwd"});
    EXPECT_EQ(ExitCode(r), 127);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "workspaced-docker-init: cannot enter the working directory (--cwd) of "
                     "/bin/pwd: No such file or directory\n" +
                         Record("exited 127"));
    r = RunInit({"run", "--cwd", "tmp", NewId(), "0", "/bin/pwd"});
    EXPECT_EQ(ExitCode(r), 127);
    EXPECT_EQ(r.err, "workspaced-docker-init: --cwd wants an absolute path\n");
}

TEST(DockerInitTest, CommandExiting127GetsNoExecMessage)
{
    Result r = RunInit(Shell(NewId(), "exit 127"));
    EXPECT_EQ(ExitCode(r), 127);
    EXPECT_EQ(r.err, Record("exited 127"));
}

TEST(DockerInitTest, MisuseExits127WithOneLineAndNoRecord)
{
    const std::string id = NewId();
    const std::vector<std::vector<std::string>> cases = {
        {},
        {"bogus"},
        {"run"},
        {"run", id, "0"},
        {"run", "p_0123456789ABCDEF", "0", "/bin/true"},
        {"run", "p_0123456789abcde", "0", "/bin/true"},
        {"run", "p_0123456789abcdef0", "0", "/bin/true"},
        {"run", "q_0123456789abcdef", "0", "/bin/true"},
        {"run", "p-0123456789abcdef", "0", "/bin/true"},
        {"run", "", "0", "/bin/true"},
        {"run", id, "", "/bin/true"},
        {"run", id, "-1", "/bin/true"},
        {"run", id, "+5", "/bin/true"},
        {"run", id, " 5", "/bin/true"},
        {"run", id, "5 ", "/bin/true"},
        {"run", id, "1e3", "/bin/true"},
        {"run", id, "0x10", "/bin/true"},
        {"run", id, "1099511627777", "/bin/true"}, // 2^40 + 1
        {"run", id, "99999999999999999999999", "/bin/true"},
        {"run", id, "0", "bin/true"},
        {"run", id, "0", "./true"},
        {"run", id, "0", ""},
        {"signal"},
        {"signal", id},
        {"signal", id, "0"},
        {"signal", id, "65"},
        {"signal", id, "-9"},
        {"signal", id, "TERM"},
        {"signal", id, "9", "extra"},
        {"signal", "p_0123456789abcdeg", "9"},
        {"run", "--nproc", "0", id, "0", "/bin/true"},
        {"run", "--nproc", "4194305", id, "0", "/bin/true"},
        {"run", "--nproc", "x", id, "0", "/bin/true"},
        {"run", "--nproc"},
        {"run", "--nproc", "5", "--nproc", "5", id, "0", "/bin/true"},
    };
    for (const auto &args : cases) {
        std::string shown;
        for (const auto &a : args)
            shown += "[" + a + "]";
        Result r = RunInit(args);
        EXPECT_EQ(ExitCode(r), 127) << shown;
        EXPECT_EQ(r.out, "") << shown;
        EXPECT_EQ(r.err.rfind("workspaced-docker-init: ", 0), 0u) << shown << r.err;
        EXPECT_EQ(Count(r.err, "\n"), 1u) << shown << r.err;
        EXPECT_TRUE(EndsWith(r.err, "\n")) << shown << r.err;
        EXPECT_EQ(Count(r.err, "\x1b_wsinit;"), 0u) << shown << r.err;
    }
}

// --nproc N: the command runs with RLIMIT_NPROC N, soft and hard (how a
// pids cap holds where the host's pids cgroup does not count the box's
// processes).
TEST(DockerInitTest, NprocIsTheCommandsProcessLimit)
{
    Result r = RunInit({"run", "--nproc", "77", NewId(), "0", "/bin/sh", "-c",
                        "grep 'Max processes' /proc/self/limits"});
    EXPECT_EQ(ExitCode(r), 0) << r.err;
    std::istringstream f(r.out);
    std::string w1, w2, soft, hard;
    f >> w1 >> w2 >> soft >> hard;
    EXPECT_EQ(soft, "77") << r.out;
    EXPECT_EQ(hard, "77") << r.out;
    EXPECT_EQ(r.err, Record("exited 0"));
}

TEST(DockerInitTest, LargestTimeoutIsAccepted)
{
    Result r = RunInit(Shell(NewId(), "exit 2", "1099511627776")); // 2^40
    EXPECT_EQ(ExitCode(r), 2);
    EXPECT_EQ(r.err, Record("exited 2"));
}

// ---- the tree dies with the command ----

TEST(DockerInitTest, BackgroundChildIsKilledWhenTheCommandExits)
{
    // The sleeper keeps stdout open: Finish would wait for it if it lived.
    Result r = RunInit(Shell(NewId(), Sleep(1001) + " & echo $!; exit 3"));
    EXPECT_EQ(ExitCode(r), 3);
    EXPECT_EQ(r.err, Record("exited 3"));
    pid_t sleeper = ToPid(r.out);
    ASSERT_GT(sleeper, 0) << r.out;
    EXPECT_TRUE(Gone(sleeper, Sleep(1001)));
}

TEST(DockerInitTest, SetsidAndDoubleForkEscapeesAreKilled)
{
    const std::string id = NewId();
    const std::string flag = TempPath("escapees-" + id);
    // Both escapees print their pid, then drop every fd the command had, so
    // nothing but init's kill can end them. The command exits once told to.
    Init init;
    ASSERT_TRUE(init.Start(Shell(id, "a=$( (setsid sh -c 'echo $$; exec " + Sleep(1002) +
                                         " </dev/null >/dev/null 2>&1' &) ); "
                                         "b=$( (sh -c 'echo $$; exec " +
                                         Sleep(1003) +
                                         " </dev/null >/dev/null 2>&1' &) ); "
                                         "echo $a $b; while [ ! -e " +
                                         flag + " ]; do sleep 0.05; done; exit 0")));
    std::vector<std::string> line = init.ReadLines(1);
    ASSERT_EQ(line.size(), 1u);
    pid_t a = 0, b = 0;
    ASSERT_EQ(sscanf(line[0].c_str(), "%d %d", &a, &b), 2) << line[0];

    // Re-parented to init (not Docker's pid 1, not the host's), one of them in
    // a session of its own.
    auto t0 = Clock::now();
    while ((StatFields(a).size() < 4 || StatFields(a)[1] != std::to_string(init.pid()) ||
            StatFields(b).size() < 4 || StatFields(b)[1] != std::to_string(init.pid())) &&
           ElapsedMs(t0) < kFinishWaitMs)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(Alive(a, Sleep(1002)));
    EXPECT_TRUE(Alive(b, Sleep(1003)));
    ASSERT_GE(StatFields(a).size(), 4u);
    EXPECT_EQ(StatFields(a)[1], std::to_string(init.pid()));
    EXPECT_EQ(StatFields(a)[3], std::to_string(a)) << "not in a session of its own";
    ASSERT_GE(StatFields(b).size(), 4u);
    EXPECT_EQ(StatFields(b)[1], std::to_string(init.pid()));

    std::ofstream(flag).put('x');
    Result r = init.Finish();
    unlink(flag.c_str());
    EXPECT_EQ(ExitCode(r), 0);
    EXPECT_EQ(r.err, Record("exited 0"));
    EXPECT_TRUE(Gone(a, Sleep(1002)));
    EXPECT_TRUE(Gone(b, Sleep(1003)));
}

// A descendant writing to stderr as fast as it can is dead before the record
// goes out, so the record is still the last thing on the stream.
TEST(DockerInitTest, RecordComesAfterEverythingANoisyOrphanWrote)
{
    Result r = RunInit(Shell(NewId(), "(while :; do echo noise >&2; done) & sleep 0.3; exit 6"));
    EXPECT_EQ(ExitCode(r), 6);
    EXPECT_GT(Count(r.err, "noise\n"), 0u);
    EXPECT_TRUE(EndsWith(r.err, Record("exited 6")))
        << r.err.substr(r.err.size() > 200 ? r.err.size() - 200 : 0);
    EXPECT_EQ(Count(r.err, "\x1b_wsinit;"), 1u);
}

// ---- timeout ----

TEST(DockerInitTest, TimeoutKillsTheWholeTreeAndReportsSignaled9)
{
    // The shell ignores TERM: only a SIGKILL ends it.
    Result r = RunInit(
        Shell(NewId(), "trap '' TERM; " + Sleep(1004) + " & echo $!; " + Sleep(1005), "500"));
    EXPECT_EQ(ExitCode(r), 128 + SIGKILL);
    EXPECT_EQ(r.err, Record("signaled 9"));
    EXPECT_GE(r.elapsed_ms, 450);
    pid_t sleeper = ToPid(r.out);
    ASSERT_GT(sleeper, 0) << r.out;
    EXPECT_TRUE(Gone(sleeper, Sleep(1004)));
}

TEST(DockerInitTest, ZeroTimeoutMeansNoBound)
{
    Result r = RunInit(Shell(NewId(), "sleep 1; exit 5", "0"));
    EXPECT_EQ(ExitCode(r), 5);
    EXPECT_EQ(r.err, Record("exited 5"));
}

// ---- signals sent to init ----

TEST(DockerInitTest, TermSentToInitIsForwardedToTheCommand)
{
    Init init;
    ASSERT_TRUE(init.Start(
        Shell(NewId(), "trap 'echo trapped; exit 7' TERM; echo ready; while :; do sleep 1; done")));
    ASSERT_EQ(init.ReadLines(1), std::vector<std::string>{"ready"});
    ASSERT_EQ(kill(init.pid(), SIGTERM), 0);
    Result r = init.Finish();
    EXPECT_EQ(ExitCode(r), 7);
    EXPECT_EQ(r.out, "ready\ntrapped\n");
    // dash may say "Terminated" about the sleep the TERM reached as well.
    EXPECT_TRUE(EndsWith(r.err, Record("exited 7"))) << r.err;
    EXPECT_EQ(Count(r.err, "\x1b_wsinit;"), 1u) << r.err;
}

// Every forwarded signal rescans the tree: the second one must find it too.
TEST(DockerInitTest, EverySignalSentToInitIsForwarded)
{
    Init init;
    ASSERT_TRUE(init.Start(Shell(NewId(), "n=0; trap 'n=$((n+1)); echo usr1 $n' USR1; echo ready; "
                                          "while [ $n -lt 2 ]; do sleep 0.05; done; exit 9")));
    ASSERT_EQ(init.ReadLines(1), std::vector<std::string>{"ready"});
    ASSERT_EQ(kill(init.pid(), SIGUSR1), 0);
    ASSERT_EQ(init.ReadLines(2), (std::vector<std::string>{"ready", "usr1 1"}));
    ASSERT_EQ(kill(init.pid(), SIGUSR1), 0);
    Result r = init.Finish();
    EXPECT_EQ(ExitCode(r), 9);
    EXPECT_EQ(r.out, "ready\nusr1 1\nusr1 2\n");
    EXPECT_TRUE(EndsWith(r.err, Record("exited 9"))) << r.err;
}

// Forwarding reaches every descendant, a setsid() escapee included; the
// command itself ignores the signal (only once the escapee is started: SIG_IGN
// is inherited) and waits for the escapee to die of it.
TEST(DockerInitTest, ForwardedSignalReachesAnEscapee)
{
    Init init;
    ASSERT_TRUE(init.Start(Shell(
        NewId(), "e=$( (setsid sh -c 'echo $$; exec " + Sleep(1006) +
                     " </dev/null >/dev/null 2>&1' &) ); "
                     "trap '' USR1; echo ready; while kill -0 $e 2>/dev/null; do sleep 0.05; done; "
                     "echo escapee-gone; exit 8")));
    ASSERT_EQ(init.ReadLines(1), std::vector<std::string>{"ready"});
    ASSERT_EQ(kill(init.pid(), SIGUSR1), 0);
    Result r = init.Finish();
    EXPECT_EQ(ExitCode(r), 8);
    EXPECT_EQ(r.out, "ready\nescapee-gone\n");
    EXPECT_EQ(r.err, Record("exited 8"));
}

// ---- signal mode ----

TEST(DockerInitTest, SignalModeTermReachesEveryProcessOfTheCommand)
{
    const std::string id = NewId();
    Init init;
    // The shell ignores TERM only after starting the sleepers, so they die of
    // TERM (143), not of init's final SIGKILL (137), and the shell reports it.
    ASSERT_TRUE(
        init.Start(Shell(id, Sleep(1007) + " & a=$!; " + Sleep(1008) +
                                 " & b=$!; trap '' TERM; "
                                 "echo ready; wait $a; echo a=$?; wait $b; echo b=$?; exit 4")));
    ASSERT_EQ(init.ReadLines(1), std::vector<std::string>{"ready"});
    Result s = RunInit({"signal", id, "15"});
    EXPECT_EQ(ExitCode(s), 0);
    EXPECT_EQ(s.out + s.err, "");
    Result r = init.Finish();
    EXPECT_EQ(ExitCode(r), 4);
    EXPECT_EQ(r.out, "ready\na=143\nb=143\n");
    // dash may say "Terminated" about the sleepers.
    EXPECT_TRUE(EndsWith(r.err, Record("exited 4"))) << r.err;
    EXPECT_EQ(Count(r.err, "\x1b_wsinit;"), 1u) << r.err;
}

TEST(DockerInitTest, SignalModeTermThenKillEndsATermIgnoringTree)
{
    const std::string id = NewId();
    Init init;
    ASSERT_TRUE(init.Start(Shell(id, "trap '' TERM; " + Sleep(1009) + " & echo $!; wait")));
    std::vector<std::string> line = init.ReadLines(1);
    ASSERT_EQ(line.size(), 1u);
    pid_t sleeper = ToPid(line[0]);
    ASSERT_GT(sleeper, 0);

    Result term = RunInit({"signal", id, "15"});
    EXPECT_EQ(ExitCode(term), 0);
    EXPECT_EQ(term.err, "");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_FALSE(init.Exited()) << "TERM was ignored: the command must still run";
    EXPECT_TRUE(Alive(sleeper, Sleep(1009)));

    Result kill9 = RunInit({"signal", id, "9"});
    EXPECT_EQ(ExitCode(kill9), 0);
    EXPECT_EQ(kill9.err, "");
    // `signal ID 9` returns only once nothing of the tree is left alive: at
    // most a zombie waiting for init to reap it.
    std::vector<std::string> st = StatFields(sleeper);
    EXPECT_TRUE(st.empty() || st[0] == "Z" || Cmdline(sleeper) != Sleep(1009))
        << "state " << (st.empty() ? "" : st[0]);

    Result r = init.Finish();
    EXPECT_EQ(ExitCode(r), 128 + SIGKILL);
    EXPECT_EQ(r.err, Record("signaled 9"));
    EXPECT_TRUE(Gone(sleeper, Sleep(1009)));
}

TEST(DockerInitTest, SignalModeOnlyReachesItsOwnId)
{
    const std::string id_a = NewId(), id_b = NewId();
    Init a, b;
    ASSERT_TRUE(a.Start(Shell(id_a, "echo ready; exec " + Sleep(1010))));
    ASSERT_TRUE(b.Start(Shell(id_b, "echo ready; exec " + Sleep(1011))));
    ASSERT_EQ(a.ReadLines(1), std::vector<std::string>{"ready"});
    ASSERT_EQ(b.ReadLines(1), std::vector<std::string>{"ready"});

    EXPECT_EQ(ExitCode(RunInit({"signal", id_a, "9"})), 0);
    Result ra = a.Finish();
    EXPECT_EQ(ra.err, Record("signaled 9"));
    EXPECT_FALSE(b.Exited());

    EXPECT_EQ(ExitCode(RunInit({"signal", id_b, "15"})), 0);
    Result rb = b.Finish();
    EXPECT_EQ(rb.err, Record("signaled 15"));
}

TEST(DockerInitTest, SignalModeWithoutARunningInitExits3)
{
    Result r = RunInit({"signal", NewId(), "15"});
    EXPECT_EQ(ExitCode(r), 3);
    EXPECT_EQ(r.out + r.err, "");

    // An ID whose command has ended is no longer found either.
    const std::string id = NewId();
    EXPECT_EQ(ExitCode(RunInit(Shell(id, "exit 0"))), 0);
    EXPECT_EQ(ExitCode(RunInit({"signal", id, "15"})), 3);
}

// ---- terminal ----

// As under `docker exec -t`: init leads the session of the terminal on fds
// 0-2. The command gets a session of its own with the terminal as its
// controlling terminal and its group in the foreground, and the SIGHUP the
// kernel sends when init gives the terminal up is not forwarded to it.
TEST(DockerInitTest, TerminalBecomesTheCommandsControllingTerminal)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    ASSERT_GE(master, 0);
    ASSERT_EQ(grantpt(master), 0);
    ASSERT_EQ(unlockpt(master), 0);
    std::string slave = ptsname(master);
    std::string path = InitPath();
    std::vector<std::string> args = {
        path,
        "run",
        NewId(),
        "0",
        "/bin/sh",
        "-c",
        "sleep 0.5; set -- $(cat /proc/$$/stat); echo \"ids $1 $5 $6 $8 tty=$7\""};
    std::vector<char *> argv;
    for (auto &a : args)
        argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);

    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        // A session leader opening a terminal without O_NOCTTY acquires it.
        if (setsid() < 0)
            _exit(120);
        int fd = open(slave.c_str(), O_RDWR);
        if (fd < 0 || dup2(fd, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(121);
        if (fd > 2)
            close(fd);
        execv(argv[0], argv.data());
        _exit(122);
    }
    std::string out;
    auto give_up = Clock::now() + std::chrono::milliseconds(kFinishWaitMs);
    while (Clock::now() < give_up) {
        struct pollfd p = {master, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        char buf[4096];
        ssize_t n = read(master, buf, sizeof(buf));
        if (n > 0)
            out.append(buf, (size_t)n);
        else if (n == 0 || errno != EINTR)
            break; // EIO: every slave fd is closed
    }
    close(master);
    int status = -1;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << " " << out;
    EXPECT_TRUE(EndsWith(out, Record("exited 0"))) << out;

    unsigned long p = 0, pgrp = 0, sid = 0, tpgid = 0;
    long tty = 0;
    size_t at = out.find("ids ");
    ASSERT_NE(at, std::string::npos) << out;
    ASSERT_EQ(
        sscanf(out.c_str() + at, "ids %lu %lu %lu %lu tty=%ld", &p, &pgrp, &sid, &tpgid, &tty), 5)
        << out;
    EXPECT_EQ(pgrp, p);
    EXPECT_EQ(sid, p);
    EXPECT_EQ(tpgid, p) << "the command's group is not the terminal's foreground";
    EXPECT_NE(tty, 0) << "the command has no controlling terminal";
}

// ---- the binary ----

// It runs inside arbitrary images: no dynamic loader, no shared libraries.
TEST(DockerInitTest, BinaryIsStatic)
{
    std::ifstream f(kInitRunfile, std::ios::binary);
    std::string elf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ASSERT_GE(elf.size(), sizeof(Elf64_Ehdr));
    Elf64_Ehdr eh;
    memcpy(&eh, elf.data(), sizeof(eh));
    ASSERT_EQ(memcmp(eh.e_ident, ELFMAG, SELFMAG), 0);
    ASSERT_EQ(eh.e_ident[EI_CLASS], ELFCLASS64);
    ASSERT_EQ(eh.e_phentsize, sizeof(Elf64_Phdr));
    ASSERT_LE(eh.e_phoff + (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr), elf.size());
    int loads = 0;
    for (int i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, elf.data() + eh.e_phoff + i * sizeof(ph), sizeof(ph));
        EXPECT_NE(ph.p_type, (Elf64_Word)PT_INTERP) << "the binary asks for a dynamic loader";
        if (ph.p_type == PT_LOAD)
            loads++;
    }
    EXPECT_GT(loads, 0);
    struct stat st;
    ASSERT_EQ(stat(kInitRunfile, &st), 0);
    EXPECT_TRUE(st.st_mode & S_IXUSR);
}

// A name is looked up in PATH like execvp, but never in a relative or empty
// entry: those would be the command's cwd (the workspace).
TEST(DockerInitTest, NamesAreFoundInPathButNeverInTheCwd)
{
    std::string dir = TempPath("pathdir");
    ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
    std::string planted = dir + "/planted-tool";
    {
        int fd = open(planted.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0755);
        ASSERT_GE(fd, 0);
        std::string script = "#!/bin/sh\necho planted-ran\n";
        ASSERT_EQ(write(fd, script.data(), script.size()), (ssize_t)script.size());
        close(fd);
    }
    (void)InitPath();
    const char *old = getenv("PATH");
    std::string saved = old ? old : "";
    char cwd[4096];
    ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);

    setenv("PATH", ("/nonexistent:" + dir + ":/bin").c_str(), 1);
    Result found = RunInit({"run", NewId(), "0", "planted-tool"});
    // Relative and empty entries: the same file, reachable only through
    // the cwd, is not run.
    ASSERT_EQ(chdir(dir.c_str()), 0);
    setenv("PATH", ".::pathdir", 1);
    Result cwd_only = RunInit({"run", NewId(), "0", "planted-tool"});
    ASSERT_EQ(chdir(cwd), 0);
    setenv("PATH", "/bin", 1);
    Result missing = RunInit({"run", NewId(), "0", "no-such-tool-anywhere"});
    setenv("PATH", saved.c_str(), 1);
    unlink(planted.c_str());
    rmdir(dir.c_str());

    EXPECT_EQ(ExitCode(found), 0) << found.err;
    EXPECT_EQ(found.out, "planted-ran\n");
    EXPECT_EQ(ExitCode(cwd_only), 127) << cwd_only.out;
    EXPECT_EQ(cwd_only.out, "");
    EXPECT_TRUE(EndsWith(cwd_only.err, Record("exited 127"))) << cwd_only.err;
    EXPECT_EQ(ExitCode(missing), 127);
    EXPECT_NE(missing.err.find("cannot execute no-such-tool-anywhere"), std::string::npos)
        << missing.err;
}

// The container's main process waits, whatever else happens, until it is
// asked to stop.
TEST(DockerInitTest, KeepaliveWaitsUntilTermAndExitsZero)
{
    Init init;
    ASSERT_TRUE(init.Start({"keepalive"}));
    // Signals are sent once it waits for them in sigwait: before that a
    // TERM would end it by the default action.
    auto t0 = Clock::now();
    while (!InSigwait(init.pid()) && ElapsedMs(t0) < kFinishWaitMs)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::string seen;
    ASSERT_TRUE(InSigwait(init.pid(), &seen))
        << "keepalive never waited for a signal (/proc/PID/syscall: " << seen << ")";
    // SIGCHLD does not end it.
    ASSERT_EQ(kill(init.pid(), SIGCHLD), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    int status = 0;
    EXPECT_EQ(waitpid(init.pid(), &status, WNOHANG), 0) << "keepalive ended by itself";
    ASSERT_EQ(kill(init.pid(), SIGTERM), 0);
    Result r = init.Finish();
    EXPECT_EQ(ExitCode(r), 0);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "");
    Result misuse = RunInit({"keepalive", "extra"});
    EXPECT_EQ(ExitCode(misuse), 127);
}

// ---- the nonce ----

const char kNonce[] = "0123456789abcdef0123456789abcdef";
const char kOtherNonce[] = "fedcba9876543210fedcba9876543210";

std::string NonceEnv(const std::string &nonce = kNonce)
{
    return "WSINIT_NONCE=" + nonce;
}

// Shell code that writes a record to stderr in one write, as init does.
std::string ShRecord(const std::string &body)
{
    return "printf '\\033_wsinit;" + body + "\\033\\\\' >&2";
}

// Given a nonce, init writes it into its record, and the command never sees
// it: its lookalikes, with no nonce or a guessed one, are output before the
// real record.
TEST(DockerInitTest, TheNonceIsInTheRecordAndNotInTheCommandsEnvironment)
{
    Result r = RunInit(Shell(NewId(), ShRecord("exited 0") + "; " +
                                          ShRecord(std::string(kOtherNonce) + ";exited 0") +
                                          "; echo \"[${WSINIT_NONCE-unset}]\"; env | "
                                          "grep -c " +
                                          kNonce + "; exit 3"),
                       {NonceEnv()});
    EXPECT_EQ(ExitCode(r), 3);
    EXPECT_EQ(r.out, "[unset]\n0\n");
    EXPECT_EQ(r.err, Record("exited 0") + NonceRecord(kOtherNonce, "exited 0") +
                         NonceRecord(kNonce, "exited 3"));
}

TEST(DockerInitTest, TheNonceIsInEveryKindOfRecord)
{
    Result r = RunInit(Shell(NewId(), "kill -USR1 $$"), {NonceEnv()});
    EXPECT_EQ(ExitCode(r), 128 + SIGUSR1);
    EXPECT_EQ(r.err, NonceRecord(kNonce, "signaled " + std::to_string(SIGUSR1)));
    r = RunInit({"run", NewId(), "0", "/nonexistent/workspaced-program"}, {NonceEnv()});
    EXPECT_EQ(ExitCode(r), 127);
    EXPECT_TRUE(EndsWith(r.err, NonceRecord(kNonce, "exited 127"))) << r.err;
}

// /proc/PID/environ shows the memory the environment started in, whatever
// unsetenv() does: init overwrites the value there too.
TEST(DockerInitTest, TheNonceIsScrubbedFromInitsOwnEnviron)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root: init is not dumpable, so only root reads its environ";
    Init init;
    ASSERT_TRUE(init.Start(Shell(NewId(), "echo ready; exec " + Sleep(1101)), {NonceEnv()}));
    ASSERT_EQ(init.ReadLines(1), std::vector<std::string>{"ready"});
    std::ifstream f("/proc/" + std::to_string(init.pid()) + "/environ", std::ios::binary);
    std::string environ((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_NE(environ.find("WSINIT_NONCE="), std::string::npos) << "read the wrong environ?";
    EXPECT_EQ(environ.find(kNonce), std::string::npos);
    ASSERT_EQ(kill(init.pid(), SIGTERM), 0);
    Result r = init.Finish();
    EXPECT_TRUE(EndsWith(r.err, NonceRecord(kNonce, "signaled 15"))) << r.err;
}

TEST(DockerInitTest, AMalformedNonceIsMisuse)
{
    for (const std::string &bad : std::vector<std::string>{
             "", "0123456789abcdef", std::string(kNonce) + "0", "0123456789ABCDEF0123456789abcdef",
             "0123456789abcdef;123456789abcdef", "0123456789abcdeg0123456789abcdef"}) {
        Result r = RunInit(Shell(NewId(), "echo ran"), {NonceEnv(bad)});
        EXPECT_EQ(ExitCode(r), 127) << bad;
        EXPECT_EQ(r.out, "") << bad;
        EXPECT_EQ(r.err.find("workspaced-docker-init: bad WSINIT_NONCE"), 0u) << r.err;
        EXPECT_EQ(Count(r.err, "\x1b_wsinit;"), 0u) << r.err;
    }
}

// ---- identities: the command as U:G, init as H with CAP_KILL alone ----

const uid_t kUid = 61701;
const gid_t kGid = 61702;
const uid_t kHelper = 61703;

std::vector<std::string> Ids()
{
    return {"--uid",    std::to_string(kUid),   "--gid", std::to_string(kGid),
            "--helper", std::to_string(kHelper)};
}

// `init run --uid --gid --helper ID 0 ARGV...`.
std::vector<std::string> RunAs(const std::string &id, const std::vector<std::string> &argv)
{
    std::vector<std::string> a = {"run"};
    for (const auto &x : Ids())
        a.push_back(x);
    a.push_back(id);
    a.push_back("0");
    a.insert(a.end(), argv.begin(), argv.end());
    return a;
}

// A line of a /proc/PID/status text, its value's fields joined by single
// spaces ("Uid:\t1\t1\t1\t1" gives "1 1 1 1"); "" when absent.
std::string StatusValue(const std::string &status, const std::string &key)
{
    std::istringstream in(status);
    for (std::string line; std::getline(in, line);) {
        if (line.compare(0, key.size() + 1, key + ":") != 0)
            continue;
        std::istringstream fields(line.substr(key.size() + 1));
        std::string out;
        for (std::string f; fields >> f;)
            out += (out.empty() ? "" : " ") + f;
        return out;
    }
    return "";
}

std::string ProcStatus(pid_t pid)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string Four(unsigned long v)
{
    std::string s = std::to_string(v);
    return s + " " + s + " " + s + " " + s;
}

// CAP_KILL alone, as /proc/PID/status prints a capability set.
const char kCapKillOnly[] = "0000000000000020";
const char kNoCaps[] = "0000000000000000";

// Root, and a copy of the probe in a directory of /tmp the test's uids can
// walk: the build tree is under a 0700 home.
class DockerInitIdentityTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root: init takes other uids only when started as root (the "
                            "Docker provider execs it as 0:0); running as uid "
                         << geteuid();
        (void)InitPath();
        char tmpl[] = "/tmp/ws-docker-init-XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        ASSERT_EQ(chmod(dir_.c_str(), 0711), 0);
        probe_ = dir_ + "/init-probe";
        std::ifstream in(kProbeRunfile, std::ios::binary);
        std::ofstream out(probe_, std::ios::binary);
        out << in.rdbuf();
        out.close();
        ASSERT_TRUE(in.good() && out.good()) << "cannot copy " << kProbeRunfile;
        ASSERT_EQ(chmod(probe_.c_str(), 0755), 0);
    }
    void TearDown() override
    {
        if (!probe_.empty())
            unlink(probe_.c_str());
        if (!dir_.empty())
            rmdir(dir_.c_str());
    }

    std::string dir_, probe_;
};

// The command's child drops to U:G with no capability and no way back; init
// becomes H with CAP_KILL alone, and still forwards signals to the command
// (another uid: CAP_KILL is what lets it).
TEST_F(DockerInitIdentityTest, TheCommandRunsAsUAndInitAsHWithCapKillAlone)
{
    Init init;
    ASSERT_TRUE(init.Start(RunAs(NewId(), {"/bin/sh", "-c",
                                           "grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapAmb|"
                                           "NoNewPrivs):' /proc/self/status; exec " +
                                               probe_ + " wait-signal"})));
    std::vector<std::string> lines = init.ReadLines(9);
    ASSERT_EQ(lines.size(), 9u);
    ASSERT_EQ(lines[8], "ready");
    std::string child;
    for (const auto &l : lines)
        child += l + "\n";
    EXPECT_EQ(StatusValue(child, "Uid"), Four(kUid));
    EXPECT_EQ(StatusValue(child, "Gid"), Four(kGid));
    EXPECT_EQ(StatusValue(child, "Groups"), std::to_string(kGid));
    for (const char *set : {"CapInh", "CapPrm", "CapEff", "CapAmb"})
        EXPECT_EQ(StatusValue(child, set), kNoCaps) << set;
    EXPECT_EQ(StatusValue(child, "NoNewPrivs"), "1");

    // Init drops right after the fork, concurrently with the child's exec.
    std::string st = ProcStatus(init.pid());
    auto t0 = Clock::now();
    while (StatusValue(st, "Uid") != Four(kHelper) && ElapsedMs(t0) < kFinishWaitMs) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        st = ProcStatus(init.pid());
    }
    EXPECT_EQ(StatusValue(st, "Uid"), Four(kHelper));
    EXPECT_EQ(StatusValue(st, "Gid"), Four(kHelper));
    EXPECT_EQ(StatusValue(st, "Groups"), std::to_string(kHelper));
    EXPECT_EQ(StatusValue(st, "CapEff"), kCapKillOnly);
    EXPECT_EQ(StatusValue(st, "CapPrm"), kCapKillOnly);
    EXPECT_EQ(StatusValue(st, "CapInh"), kNoCaps);
    EXPECT_EQ(StatusValue(st, "CapAmb"), kNoCaps);

    ASSERT_EQ(kill(init.pid(), SIGUSR1), 0);
    Result r = init.Finish();
    EXPECT_EQ(ExitCode(r), 0) << r.err;
    EXPECT_EQ(r.out, child + "signal " + std::to_string(SIGUSR1) + " from uid " +
                         std::to_string(kHelper) + "\n");
    EXPECT_EQ(r.err, Record("exited 0"));
}

// --cwd is entered by the command as itself: a directory only its uid may
// enter works, one only root may enter is refused (init is root here, so
// an init that entered it for the command would have got in).
TEST_F(DockerInitIdentityTest, TheCommandEntersItsDirectoryAsItself)
{
    std::string mine = dir_ + "/mine", roots = dir_ + "/roots";
    ASSERT_EQ(mkdir(mine.c_str(), 0700), 0);
    ASSERT_EQ(chown(mine.c_str(), kUid, kGid), 0);
    ASSERT_EQ(mkdir(roots.c_str(), 0700), 0);
    std::vector<std::string> a = RunAs(NewId(), {"/bin/pwd"});
    a.insert(a.begin() + 1, {"--cwd", mine});
    Result r = RunInit(a);
    EXPECT_EQ(ExitCode(r), 0) << r.err;
    EXPECT_EQ(r.out, mine + "\n");
    a = RunAs(NewId(), {"/bin/pwd"});
    a.insert(a.begin() + 1, {"--cwd", roots});
    r = RunInit(a);
    EXPECT_EQ(ExitCode(r), 126);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "workspaced-docker-init: cannot enter the working directory (--cwd) of "
                     "/bin/pwd: Permission denied\n" +
                         Record("exited 126"));
    rmdir(mine.c_str());
    rmdir(roots.c_str());
}

// The attack of a command on its init: once init is H, a kill, a ptrace and
// its /proc files are all refused, and the command cannot become root
// either. Init lives on to write the real record.
TEST_F(DockerInitIdentityTest, TheCommandCanNeitherKillNorTraceNorReadInit)
{
    Result r = RunInit(RunAs(NewId(), {probe_, "attack"}));
    EXPECT_EQ(r.out, "parent uid " + std::to_string(kHelper) +
                         "\nkill EPERM\nptrace EPERM\nenviron EACCES\nmem EACCES\nsetuid EPERM\n");
    EXPECT_EQ(ExitCode(r), 0) << r.err;
    EXPECT_EQ(r.err, Record("exited 0"));
}

// What the issue saw work: the command kills init, forges `exited 0` and
// leaves a setsid() escapee behind. As another uid, with the nonce, none of
// it takes: the forgery is output, the real record follows, and the escapee
// dies with the command.
TEST_F(DockerInitIdentityTest, ForgeAndEscapeFails)
{
    Result r = RunInit(RunAs(NewId(), {"/bin/sh", "-c",
                                       "kill -9 $PPID; " + ShRecord("exited 0") +
                                           "; e=$( (setsid sh -c 'echo $$; exec " + Sleep(1102) +
                                           " </dev/null >/dev/null 2>&1' &) ); echo $e; exit 3"}),
                       {NonceEnv()});
    EXPECT_EQ(ExitCode(r), 3) << r.err;
    EXPECT_NE(r.err.find("kill: Operation not permitted"), std::string::npos) << r.err;
    EXPECT_TRUE(EndsWith(r.err, Record("exited 0") + NonceRecord(kNonce, "exited 3"))) << r.err;
    pid_t escapee = ToPid(r.out);
    ASSERT_GT(escapee, 0) << r.out;
    EXPECT_TRUE(Gone(escapee, Sleep(1102)));
}

// `signal --helper H` takes H and CAP_KILL before it signals: the command
// sees the signal come from uid H.
TEST_F(DockerInitIdentityTest, SignalModeDropsToTheHelperAndStillReachesTheCommand)
{
    const std::string id = NewId();
    Init init;
    ASSERT_TRUE(init.Start(RunAs(id, {probe_, "wait-signal"})));
    ASSERT_EQ(init.ReadLines(1), std::vector<std::string>{"ready"});
    Result s = RunInit({"signal", "--helper", std::to_string(kHelper), id, "15"});
    EXPECT_EQ(ExitCode(s), 0) << s.err;
    EXPECT_EQ(s.out + s.err, "");
    Result r = init.Finish();
    EXPECT_EQ(ExitCode(r), 0) << r.err;
    EXPECT_EQ(r.out, "ready\nsignal 15 from uid " + std::to_string(kHelper) + "\n");
    EXPECT_EQ(r.err, Record("exited 0"));
}

// Without every capability the split needs, init refuses before anything
// runs, rather than leave a command it could not kill.
TEST_F(DockerInitIdentityTest, WithoutTheCapabilitiesNothingStarts)
{
    for (int cap : {CAP_SETUID, CAP_SETGID, CAP_KILL}) {
        Result r = RunInit(RunAs(NewId(), {"/bin/sh", "-c", "echo ran"}), {}, {cap});
        EXPECT_EQ(ExitCode(r), 125) << cap;
        EXPECT_EQ(r.out, "") << cap;
        EXPECT_NE(r.err.find("need CAP_SETUID, CAP_SETGID and CAP_KILL"), std::string::npos)
            << r.err;
        EXPECT_EQ(Count(r.err, "\x1b_wsinit;"), 0u) << r.err;
    }
}

TEST_F(DockerInitIdentityTest, KeepaliveWithAHelperHasNoCapabilityAndStillStopsOnTerm)
{
    Init init;
    ASSERT_TRUE(init.Start({"keepalive", "--helper", std::to_string(kHelper)}));
    auto t0 = Clock::now();
    while (!InSigwait(init.pid()) && ElapsedMs(t0) < kFinishWaitMs)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(InSigwait(init.pid()));
    std::string st = ProcStatus(init.pid());
    EXPECT_EQ(StatusValue(st, "Uid"), Four(kHelper));
    EXPECT_EQ(StatusValue(st, "Gid"), Four(kHelper));
    for (const char *set : {"CapInh", "CapPrm", "CapEff", "CapAmb"})
        EXPECT_EQ(StatusValue(st, set), kNoCaps) << set;
    ASSERT_EQ(kill(init.pid(), SIGTERM), 0);
    Result r = init.Finish();
    EXPECT_EQ(ExitCode(r), 0);
    EXPECT_EQ(r.out + r.err, "");
}

// The host pid of the process running exactly `cmdline`, or -1.
pid_t FindProcess(const std::string &cmdline)
{
    DIR *d = opendir("/proc");
    pid_t found = -1;
    if (!d)
        return -1;
    for (struct dirent *e; found < 0 && (e = readdir(d));) {
        pid_t pid = ToPid(e->d_name);
        if (pid > 0 && Cmdline(pid) == cmdline)
            found = pid;
    }
    closedir(d);
    return found;
}

// As the container's pid 1 (no Docker init above it) keepalive is where the
// kernel sends the container's orphans: an exec whose init died leaves its
// children to it. It reaps each as it ends, though the orphan is another
// uid's, so none stays a zombie holding one of the container's pids.
TEST(DockerInitTest, KeepaliveAsPidOneReapsOrphans)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root: a pid namespace of its own; running as uid " << geteuid();
    const std::string init = InitPath(), helper = std::to_string(kHelper);
    const std::string sleeper = Sleep(2), seconds = sleeper.substr(strlen("sleep "));
    int ready[2];
    ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
    // The namespace's creator stays until its pid 1 ends, as Docker's shim
    // does.
    pid_t creator = fork();
    ASSERT_GE(creator, 0);
    if (creator == 0) {
        if (unshare(CLONE_NEWPID) < 0)
            _exit(120);
        pid_t one = fork();
        if (one == 0) {
            execl(init.c_str(), init.c_str(), "keepalive", "--helper", helper.c_str(),
                  (char *)NULL);
            _exit(121);
        }
        if (one < 0 || write(ready[1], &one, sizeof(one)) != (ssize_t)sizeof(one))
            _exit(122);
        int st = 0;
        (void)waitpid(one, &st, 0);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 123);
    }
    close(ready[1]);
    pid_t one = -1;
    ASSERT_EQ(read(ready[0], &one, sizeof(one)), (ssize_t)sizeof(one));
    close(ready[0]);
    auto t0 = Clock::now();
    while (!InSigwait(one) && ElapsedMs(t0) < kFinishWaitMs)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(InSigwait(one)) << "keepalive never waited";

    // What a `docker exec` is: a process that enters the namespace from
    // outside. Its child there leaves a sleep behind and exits.
    int ns = open(("/proc/" + std::to_string(one) + "/ns/pid").c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(ns, 0) << strerror(errno);
    pid_t exec = fork();
    ASSERT_GE(exec, 0);
    if (exec == 0) {
        if (setns(ns, CLONE_NEWPID) < 0)
            _exit(120);
        pid_t parent = fork();
        if (parent == 0) {
            pid_t orphan = fork();
            if (orphan == 0) {
                execlp("sleep", "sleep", seconds.c_str(), (char *)NULL);
                _exit(127);
            }
            _exit(orphan > 0 ? 0 : 1);
        }
        int st = 0;
        if (parent < 0 || waitpid(parent, &st, 0) != parent)
            _exit(1);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
    }
    close(ns);
    int st = 0;
    ASSERT_EQ(waitpid(exec, &st, 0), exec);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;

    pid_t orphan = -1;
    t0 = Clock::now();
    while ((orphan = FindProcess(sleeper)) < 0 && ElapsedMs(t0) < kFinishWaitMs)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_GT(orphan, 0) << "the orphan never ran";
    std::vector<std::string> fields = StatFields(orphan);
    ASSERT_GE(fields.size(), 2u);
    EXPECT_EQ(ToPid(fields[1]), one) << "the orphan's parent is not keepalive";
    // It ends by itself; then it must be gone, not a zombie.
    t0 = Clock::now();
    while (!(fields = StatFields(orphan)).empty() && ElapsedMs(t0) < kFinishWaitMs)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(fields.empty()) << "the orphan is still there, state " << fields[0]
                                << " (Z: keepalive did not reap it)";

    ASSERT_EQ(kill(one, SIGTERM), 0);
    ASSERT_EQ(waitpid(creator, &st, 0), creator);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
}

// Misuse of the options: each is refused with a message, before anything
// runs, as root or not.
TEST(DockerInitTest, BadIdentityOptionsAreMisuse)
{
    const std::string id = NewId();
    const std::vector<std::string> sh = {id, "0", "/bin/sh", "-c", "echo ran"};
    auto run = [&](std::vector<std::string> opts) {
        std::vector<std::string> a = {"run"};
        a.insert(a.end(), opts.begin(), opts.end());
        a.insert(a.end(), sh.begin(), sh.end());
        return a;
    };
    const std::vector<std::vector<std::string>> cases = {
        run({"--uid", "0", "--gid", "2", "--helper", "3"}),
        run({"--uid", "1", "--gid", "0", "--helper", "3"}),
        run({"--uid", "1", "--gid", "2", "--helper", "0"}),
        run({"--uid", "1", "--gid", "2", "--helper", "1"}),
        run({"--uid", "1"}),
        run({"--uid", "1", "--gid", "2"}),
        run({"--helper", "3"}),
        run({"--uid", "1", "--uid", "1", "--gid", "2", "--helper", "3"}),
        run({"--uid", "-1", "--gid", "2", "--helper", "3"}),
        run({"--uid", "4294967295", "--gid", "2", "--helper", "3"}),
        run({"--uid", "1x", "--gid", "2", "--helper", "3"}),
        run({"--uid", "", "--gid", "2", "--helper", "3"}),
        run({"--user", "1", "--gid", "2", "--helper", "3"}),
        {"run", "--uid", "1", "--gid", "2", "--helper"},
        {"run", "--uid", "1", "--gid", "2", "--helper", "3", id, "0"},
        {"signal", "--uid", "1", id, "15"},
        {"signal", "--helper", "0", id, "15"},
        {"signal", "--helper", "x", id, "15"},
        {"signal", "--helper", "3", id},
        {"keepalive", "--helper", "0"},
        {"keepalive", "--uid", "1"},
        {"keepalive", "--helper"},
    };
    for (const auto &c : cases) {
        std::string what;
        for (const auto &a : c)
            what += a + " ";
        Result r = RunInit(c);
        EXPECT_EQ(ExitCode(r), 127) << what;
        EXPECT_EQ(r.out, "") << what;
        EXPECT_EQ(r.err.find("workspaced-docker-init: "), 0u) << what << ": " << r.err;
        EXPECT_EQ(Count(r.err, "\x1b_wsinit;"), 0u) << what << ": " << r.err;
    }
}

} // namespace
