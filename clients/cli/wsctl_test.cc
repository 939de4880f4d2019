// End to end: drives the real wsctl binary against a real workspaced, the
// way a person at a shell (or a script) would, including a pseudo-terminal
// session for exec -t. The servers listen on unix sockets, except the TLS
// tests' servers, whose point is TCP and which authenticate their callers.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include "tests/testutil/process.h"

extern char **environ;

namespace
{

std::string Runfile(const std::string &rel)
{
    const char *srcdir = getenv("TEST_SRCDIR");
    return std::string(srcdir ? srcdir : ".") + "/workspaced/" + rel;
}

std::string TempDir()
{
    const char *t = getenv("TEST_TMPDIR");
    std::string tmpl = std::string(t ? t : "/tmp") + "/wsctlXXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data()))
        abort();
    return buf.data();
}

std::string ReadFile(const std::string &path)
{
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// A loopback address where nothing listens, for as long as the test
// process runs: the socket is bound but never listens, so a connection to
// it is refused, and no other process can take the port meanwhile (a port
// merely found free could be).
std::string DeadAddress()
{
    static std::string addr = [] {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {};
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof(sa);
        if (fd < 0 || bind(fd, reinterpret_cast<struct sockaddr *>(&sa), sizeof(sa)) != 0 ||
            getsockname(fd, reinterpret_cast<struct sockaddr *>(&sa), &len) != 0)
            abort();
        return "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
    }();
    return addr;
}

struct Result {
    // Exit status, or 128 + signal when wsctl itself died of one.
    int code = -1;
    std::string out, err;
};

struct RunOpts {
    std::string stdin_data;
    std::string stdin_path;
    std::string stdout_path;
    // Replaces the environment's WORKSPACED_ADDR (empty: unset).
    std::vector<std::string> env;
    bool use_addr_flag = true;
};

// A directory for unix sockets. A socket's path must fit in sun_path (108
// bytes), which Bazel's TEST_TMPDIR is too deep for, so it is a short one
// under /tmp; the Server that uses it removes it.
std::string SocketDir()
{
    char tmpl[] = "/tmp/wsctl-sockXXXXXX";
    if (!mkdtemp(tmpl))
        abort();
    return tmpl;
}

// Where a test server listens: a unix socket unless the test is about TCP
// (TLS, tokens). The server refuses a TCP listener that does not
// authenticate its callers, so a TCP server needs --tokens-file or
// --tls-client-ca among its flags.
enum class Listen { Unix, Tcp };

class Server
{
  public:
    // Listens on a unix socket of its own, or on 127.0.0.1:0; `extra` adds
    // flags (TLS, tokens).
    explicit Server(const std::vector<std::string> &extra = {}, Listen listen = Listen::Unix)
    {
        state_ = TempDir();
        std::string listen_addr = "127.0.0.1:0";
        if (listen == Listen::Unix) {
            socket_dir_ = SocketDir();
            listen_addr = "unix:" + socket_dir_ + "/ws.sock";
        }
        int out[2];
        if (pipe(out) < 0)
            abort();
        std::string bin = Runfile("server/workspaced");
        errpath_ = state_ + ".stderr";
        const std::string &errpath = errpath_;
        std::vector<std::string> args = {bin, "--listen", listen_addr, "--state-dir", state_};
        // Every test server opens local-bash workspaces, which the default
        // policy leaves out.
        args.insert(args.end(), {"--policy-providers", "memory,local-bash,local-sandbox,docker"});
        args.insert(args.end(), extra.begin(), extra.end());
        std::vector<char *> argv;
        for (auto &a : args)
            argv.push_back(&a[0]);
        argv.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, out[1], 1);
        posix_spawn_file_actions_addopen(&fa, 2, errpath.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                         0644);
        posix_spawn_file_actions_addclose(&fa, out[0]);
        if (posix_spawn(&pid_, bin.c_str(), &fa, nullptr, argv.data(), environ) != 0)
            abort();
        posix_spawn_file_actions_destroy(&fa);
        close(out[1]);
        std::string line;
        char ch;
        struct pollfd p = {out[0], POLLIN, 0};
        while (poll(&p, 1, 20000) > 0 && read(out[0], &ch, 1) == 1 && ch != '\n')
            line.push_back(ch);
        close(out[0]);
        const std::string prefix = "workspaced listening on ";
        if (line.compare(0, prefix.size(), prefix) != 0) {
            fprintf(stderr, "server did not start: %s\n", ReadFile(errpath).c_str());
            abort();
        }
        addr_ = line.substr(prefix.size());
    }
    // The server must drain and exit 0 when it is stopped; otherwise the
    // test (or, for the suite's server, the suite) fails.
    ~Server()
    {
        std::string problem = testutil::StopCleanly(pid_, "workspaced", errpath_);
        if (!problem.empty())
            ADD_FAILURE() << problem;
        if (!socket_dir_.empty()) {
            unlink((socket_dir_ + "/ws.sock").c_str());
            rmdir(socket_dir_.c_str());
        }
    }
    const std::string &addr() const
    {
        return addr_;
    }

  private:
    pid_t pid_ = -1;
    std::string state_, addr_, errpath_, socket_dir_;
};

Server *server;

// Runs wsctl with `args`, feeding stdin and collecting stdout and stderr.
Result Wsctl(std::vector<std::string> args, const RunOpts &o = RunOpts())
{
    std::string bin = Runfile("clients/cli/wsctl");
    std::vector<std::string> full = {bin};
    if (o.use_addr_flag) {
        full.push_back("--addr");
        full.push_back(server->addr());
    }
    full.insert(full.end(), args.begin(), args.end());
    std::vector<char *> argv;
    for (auto &a : full)
        argv.push_back(&a[0]);
    argv.push_back(nullptr);

    std::vector<std::string> envs;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "WORKSPACED_", 11) != 0)
            envs.push_back(*e);
    envs.insert(envs.end(), o.env.begin(), o.env.end());
    std::vector<char *> envp;
    for (auto &e : envs)
        envp.push_back(&e[0]);
    envp.push_back(nullptr);

    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)
        abort();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (!o.stdin_path.empty())
        posix_spawn_file_actions_addopen(&fa, 0, o.stdin_path.c_str(), O_RDONLY, 0);
    else
        posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    if (!o.stdout_path.empty())
        posix_spawn_file_actions_addopen(&fa, 1, o.stdout_path.c_str(),
                                         O_WRONLY | O_CREAT | O_TRUNC, 0644);
    else
        posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    pid_t pid;
    if (posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv.data(), envp.data()) != 0)
        abort();
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    close(err[1]);

    Result r;
    size_t fed = 0;
    int in_fd = in[1];
    if (o.stdin_data.empty()) {
        close(in_fd);
        in_fd = -1;
    } else {
        fcntl(in_fd, F_SETFL, O_NONBLOCK);
    }
    signal(SIGPIPE, SIG_IGN);
    int open_fds = 2;
    while (open_fds > 0 || in_fd >= 0) {
        struct pollfd p[3] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {in_fd, POLLOUT, 0}};
        if (poll(p, 3, -1) < 0)
            break;
        char buf[65536];
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !p[i].revents)
                continue;
            ssize_t n = read(p[i].fd, buf, sizeof(buf));
            if (n > 0) {
                (i == 0 ? r.out : r.err).append(buf, n);
            } else {
                close(p[i].fd);
                (i == 0 ? out[0] : err[0]) = -1;
                open_fds--;
            }
        }
        if (in_fd >= 0 && p[2].revents) {
            ssize_t n = write(in_fd, o.stdin_data.data() + fed, o.stdin_data.size() - fed);
            if (n > 0)
                fed += n;
            if (n < 0 || fed == o.stdin_data.size()) {
                close(in_fd);
                in_fd = -1;
            }
        }
        if (open_fds == 0 && in_fd >= 0) {
            close(in_fd);
            in_fd = -1;
        }
    }
    int status;
    waitpid(pid, &status, 0);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

std::string Trim(std::string s)
{
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r'))
        s.pop_back();
    return s;
}

const char *kAllow = "sh,cat,echo,sleep,wc,head,true,false";

// The one host directory the suite's server lets Open copy from
// (--source-path-allow), canonical.
const std::string &SourceRoot()
{
    static std::string root = [] {
        std::string d = TempDir();
        char real[PATH_MAX];
        if (!realpath(d.c_str(), real))
            abort();
        return std::string(real);
    }();
    return root;
}

// `sh -c cmd` on this host; its stdout.
std::string Host(const std::string &cmd)
{
    std::string out;
    FILE *p = popen(cmd.c_str(), "r");
    if (!p)
        return out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
        out.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << cmd;
    return out;
}

std::string OpenWorkspace()
{
    Result r = Wsctl({"open", "--provider", "local-bash", "--allow", kAllow});
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.compare(0, 3, "ws_"), 0) << r.out;
    return Trim(r.out);
}

class WsctlTest : public ::testing::Test
{
  protected:
    static void SetUpTestSuite()
    {
        server = new Server({"--source-path-allow", SourceRoot()});
    }
    static void TearDownTestSuite()
    {
        delete server;
        server = nullptr;
    }
    void SetUp() override
    {
        ws_ = OpenWorkspace();
    }
    void TearDown() override
    {
        Wsctl({"close", ws_});
    }
    std::string ws_;
};

TEST_F(WsctlTest, JsonOpenHasIdAndRefThatResolves)
{
    Result r = Wsctl({"--json", "open", "--provider", "local-bash", "--allow", "sh"});
    ASSERT_EQ(r.code, 0) << r.err;
    // A flat object: pick the two fields out without a JSON library.
    auto field = [&](const std::string &name) {
        size_t at = r.out.find("\"" + name + "\":\"");
        EXPECT_NE(at, std::string::npos) << r.out;
        if (at == std::string::npos)
            return std::string();
        at += name.size() + 4;
        return r.out.substr(at, r.out.find('"', at) - at);
    };
    std::string id = field("id"), ref = field("ref");
    EXPECT_EQ(id.compare(0, 3, "ws_"), 0);
    EXPECT_FALSE(ref.empty());
    Result res = Wsctl({"resolve", ref});
    EXPECT_EQ(res.code, 0) << res.err;
    EXPECT_EQ(Trim(res.out), id);
    EXPECT_EQ(Wsctl({"close", id}).code, 0);
}

TEST_F(WsctlTest, PutCatHundredMebibytesByteExact)
{
    std::string dir = TempDir();
    std::string src = dir + "/big.in", dst = dir + "/big.out";
    {
        std::string data(100u << 20, '\0');
        uint64_t x = 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; i < data.size(); i += 8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            memcpy(&data[i], &x, 8);
        }
        std::ofstream(src, std::ios::binary) << data;
    }
    Result put = Wsctl({"put", ws_, "big.bin", src});
    ASSERT_EQ(put.code, 0) << put.err;
    RunOpts o;
    o.stdout_path = dst;
    Result cat = Wsctl({"cat", ws_, "big.bin"}, o);
    ASSERT_EQ(cat.code, 0) << cat.err;
    EXPECT_TRUE(ReadFile(src) == ReadFile(dst)) << "cat differs from put";

    // And from stdin, through the pipe.
    RunOpts in;
    in.stdin_path = src;
    ASSERT_EQ(Wsctl({"put", ws_, "big2.bin"}, in).code, 0);
    Result st = Wsctl({"stat", ws_, "big2.bin"});
    EXPECT_NE(st.out.find("size:  104857600"), std::string::npos) << st.out;
}

TEST_F(WsctlTest, FileCommands)
{
    RunOpts o;
    o.stdin_data = "hello world\nsecond line\n";
    ASSERT_EQ(Wsctl({"put", ws_, "a.txt"}, o).code, 0);
    EXPECT_EQ(Wsctl({"cat", ws_, "a.txt"}).out, o.stdin_data);

    ASSERT_EQ(Wsctl({"mkdir", ws_, "d/e/f", "-p"}).code, 0);
    Result no_p = Wsctl({"mkdir", ws_, "x/y"});
    EXPECT_NE(no_p.code, 0);
    EXPECT_NE(no_p.err.find("wsctl: NO_SUCH_FILE"), std::string::npos) << no_p.err;

    ASSERT_EQ(Wsctl({"mv", ws_, "a.txt", "d/e/b.txt"}).code, 0);
    Result ls = Wsctl({"ls", ws_, ".", "--depth", "4"});
    ASSERT_EQ(ls.code, 0) << ls.err;
    EXPECT_NE(ls.out.find("d/e/b.txt"), std::string::npos) << ls.out;
    EXPECT_EQ(ls.out.find("a.txt\n"), std::string::npos) << ls.out;
    Result lsj = Wsctl({"--json", "ls", ws_, "d", "--depth", "3"});
    EXPECT_NE(lsj.out.find("\"entries\":["), std::string::npos) << lsj.out;

    Result st = Wsctl({"stat", ws_, "d/e/b.txt"});
    EXPECT_NE(st.out.find("type:  REGULAR"), std::string::npos) << st.out;
    EXPECT_NE(st.out.find("size:  24"), std::string::npos) << st.out;
    Result stj = Wsctl({"--json", "stat", ws_, "d"});
    EXPECT_NE(stj.out.find("\"type\":\"FILE_TYPE_DIRECTORY\""), std::string::npos) << stj.out;

    Result glob = Wsctl({"glob", ws_, "**/*.txt"});
    EXPECT_EQ(glob.out, "d/e/b.txt\n");
    Result grep = Wsctl({"grep", ws_, "sec.nd"});
    EXPECT_EQ(grep.code, 0) << grep.err;
    EXPECT_EQ(grep.out, "d/e/b.txt:2:second line\n");
    EXPECT_EQ(Wsctl({"grep", ws_, "nothing-here"}).code, 1);

    Result rm_dir = Wsctl({"rm", ws_, "d"});
    EXPECT_NE(rm_dir.err.find("wsctl: NOT_EMPTY"), std::string::npos) << rm_dir.err;
    ASSERT_EQ(Wsctl({"rm", ws_, "d", "-r"}).code, 0);
    Result gone = Wsctl({"stat", ws_, "d"});
    EXPECT_EQ(gone.code, 1);
    EXPECT_NE(gone.err.find("wsctl: NO_SUCH_FILE"), std::string::npos) << gone.err;
}

TEST_F(WsctlTest, TypedErrorLines)
{
    Result esc = Wsctl({"cat", ws_, "../x"});
    EXPECT_NE(esc.code, 0);
    EXPECT_EQ(esc.err.compare(0, 20, "wsctl: PATH_ESCAPE: "), 0) << esc.err;
    EXPECT_EQ(std::count(esc.err.begin(), esc.err.end(), '\n'), 1) << esc.err;

    Result deny = Wsctl({"exec", ws_, "--", "ls"});
    EXPECT_NE(deny.code, 0);
    EXPECT_NE(deny.err.find("wsctl: COMMAND_NOT_ALLOWED: "), std::string::npos) << deny.err;

    Result nows = Wsctl({"ls", "ws_00000000000000000000000000000000"});
    EXPECT_NE(nows.err.find("wsctl: NO_SUCH_WORKSPACE: "), std::string::npos) << nows.err;

    EXPECT_EQ(Wsctl({"frobnicate"}).code, 2);
    EXPECT_EQ(Wsctl({"cat", ws_}).code, 2);
}

TEST_F(WsctlTest, CloseTwiceIsFine)
{
    std::string id = OpenWorkspace();
    EXPECT_EQ(Wsctl({"close", id}).code, 0);
    Result again = Wsctl({"--json", "close", id});
    EXPECT_EQ(again.code, 0) << again.err;
    EXPECT_NE(again.out.find("\"already_closed\":true"), std::string::npos) << again.out;
}

TEST_F(WsctlTest, AddressFromEnvironment)
{
    RunOpts o;
    o.use_addr_flag = false;
    o.env = {"WORKSPACED_ADDR=" + server->addr()};
    Result r = Wsctl({"providers"}, o);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("local-bash"), std::string::npos);

    // An address where no server listens: a clean error line.
    RunOpts none;
    none.use_addr_flag = false;
    none.env = {"WORKSPACED_ADDR=" + DeadAddress()};
    Result bad = Wsctl({"providers"}, none);
    EXPECT_EQ(bad.code, 1);
    EXPECT_NE(bad.err.find("wsctl: UNAVAILABLE"), std::string::npos) << bad.err;
}

// The suite's server listens on a unix socket: the address it printed, and
// the same path in gRPC's URI spelling, both reach it, by flag or by
// variable. A path where nothing listens is the usual one-line UNAVAILABLE.
TEST_F(WsctlTest, UnixSocketAddress)
{
    const std::string addr = server->addr();
    ASSERT_EQ(addr.compare(0, 6, "unix:/"), 0) << addr;
    for (const std::string &a : {addr, "unix://" + addr.substr(5)}) {
        SCOPED_TRACE(a);
        RunOpts o;
        o.use_addr_flag = false;
        Result ex = Wsctl({"--addr", a, "exec", ws_, "--", "echo", "over", "unix"}, o);
        EXPECT_EQ(ex.code, 0) << ex.err;
        EXPECT_EQ(ex.out, "over unix\n");
        o.env = {"WORKSPACED_ADDR=" + a};
        Result d = Wsctl({"describe", ws_}, o);
        EXPECT_EQ(d.code, 0) << d.err;
        EXPECT_NE(d.out.find(ws_), std::string::npos) << d.out;
    }

    std::string dir = SocketDir();
    RunOpts o;
    o.use_addr_flag = false;
    Result dead = Wsctl({"--addr", "unix:" + dir + "/none.sock", "providers"}, o);
    rmdir(dir.c_str());
    EXPECT_EQ(dead.code, 1);
    EXPECT_EQ(dead.err.compare(0, 20, "wsctl: UNAVAILABLE: "), 0) << dead.err;
    EXPECT_NE(dead.err.find(dir + "/none.sock"), std::string::npos) << dead.err;
}

// Without --addr and WORKSPACED_ADDR, wsctl dials the server's default
// listener, a unix socket; --addr comes before the variable.
TEST_F(WsctlTest, DefaultAddressIsTheServersUnixSocket)
{
    const std::string def = "unix:/run/workspaced/workspaced.sock";
    RunOpts o;
    o.use_addr_flag = false;
    Result help = Wsctl({"--help"}, o);
    EXPECT_EQ(help.code, 0);
    EXPECT_NE(help.out.find("(else " + def + ")"), std::string::npos) << help.out;
    // The release, the repository's VERSION, as the server's is.
    std::string version = ReadFile("VERSION");
    ASSERT_FALSE(version.empty());
    Result v = Wsctl({"--version"}, o);
    EXPECT_EQ(v.code, 0);
    EXPECT_EQ(v.out, "wsctl " + version);

    // The flag wins over a variable naming a dead address.
    o.env = {"WORKSPACED_ADDR=" + DeadAddress()};
    Result flag = Wsctl({"--addr", server->addr(), "describe", ws_}, o);
    EXPECT_EQ(flag.code, 0) << flag.err;

    // gRPC names the address it failed to reach; a server really listening
    // there would answer instead, and then the test cannot tell.
    struct stat st;
    if (lstat("/run/workspaced/workspaced.sock", &st) == 0)
        GTEST_SKIP() << "something exists at the default socket path on this machine";
    o.env.clear();
    Result none = Wsctl({"providers"}, o);
    EXPECT_EQ(none.code, 1);
    EXPECT_NE(none.err.find("wsctl: UNAVAILABLE: "), std::string::npos) << none.err;
    EXPECT_NE(none.err.find(def), std::string::npos) << none.err;
}

TEST_F(WsctlTest, ExecExitCodesAndStreams)
{
    EXPECT_EQ(Wsctl({"exec", ws_, "--", "sh", "-c", "exit 7"}).code, 7);
    EXPECT_EQ(Wsctl({"exec", ws_, "--", "true"}).code, 0);
    EXPECT_EQ(Wsctl({"exec", ws_, "--", "sh", "-c", "kill -KILL $$"}).code, 128 + SIGKILL);
    EXPECT_EQ(Wsctl({"exec", ws_, "--", "sh", "-c", "kill -TERM $$"}).code, 128 + SIGTERM);

    Result r = Wsctl({"exec", ws_, "--", "sh", "-c", "echo to-out; echo to-err >&2; exit 3"});
    EXPECT_EQ(r.code, 3);
    EXPECT_EQ(r.out, "to-out\n");
    EXPECT_EQ(r.err, "to-err\n");

    Result j = Wsctl({"--json", "exec", ws_, "--", "echo", "x"});
    EXPECT_EQ(j.code, 0);
    EXPECT_NE(j.out.find("\"started\":"), std::string::npos) << j.out;
    EXPECT_NE(j.out.find("\"cause\":\"EXIT_CAUSE_EXITED\""), std::string::npos) << j.out;
}

TEST_F(WsctlTest, ExecForwardsStdin)
{
    RunOpts o;
    o.stdin_data = std::string(3 << 20, 'z') + "end\n";
    Result r = Wsctl({"exec", ws_, "-i", "--", "cat"}, o);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(r.out == o.stdin_data) << r.out.size();

    // Without -i the command reads /dev/null.
    Result none = Wsctl({"exec", ws_, "--", "wc", "-c"}, o);
    EXPECT_EQ(Trim(none.out), "0");
}

TEST_F(WsctlTest, ExecTimeout)
{
    auto t0 = std::chrono::steady_clock::now();
    Result r = Wsctl({"exec", ws_, "--timeout", "500ms", "--", "sleep", "30"});
    auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(r.code, 124);
    EXPECT_NE(r.err.find("wsctl: TIMEOUT"), std::string::npos) << r.err;
    EXPECT_LT(took, std::chrono::seconds(15));
}

// Polls `wsctl ps` until `pred` holds for its output (or 15 s pass).
bool WaitForPs(const std::string &ws, const std::function<bool(const std::string &)> &pred,
               std::string *last = nullptr)
{
    for (int i = 0; i < 150; i++) {
        Result ps = Wsctl({"ps", ws});
        if (last)
            *last = ps.out;
        if (ps.code == 0 && pred(ps.out))
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
}

// The ps line of the process tagged `tag`.
std::string PsLine(const std::string &ps, const std::string &tag)
{
    std::istringstream in(ps);
    std::string line;
    while (std::getline(in, line))
        if (line.find(" " + tag + " ") != std::string::npos)
            return line;
    return "";
}

TEST_F(WsctlTest, AttachPsKill)
{
    Result bg = Wsctl(
        {"exec", ws_, "--background", "--tag", "job1", "--", "sh", "-c", "echo first; sleep 1000"});
    ASSERT_EQ(bg.code, 0) << bg.err;
    EXPECT_EQ(Trim(bg.out).compare(0, 2, "p_"), 0) << bg.out;
    std::string last;
    ASSERT_TRUE(WaitForPs(
        ws_,
        [](const std::string &ps) {
            return PsLine(ps, "job1").find("running") != std::string::npos;
        },
        &last))
        << last;

    // The attach follows the live process: its replay of "first" shows it
    // is attached before the kill.
    Result attached;
    RunOpts to_file;
    to_file.stdout_path = TempDir() + "/attach.out";
    std::thread t([&] { attached = Wsctl({"attach", ws_, "job1"}, to_file); });
    bool replayed = false;
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
         !replayed && std::chrono::steady_clock::now() < until;) {
        replayed = ReadFile(to_file.stdout_path) == "first\n";
        if (!replayed)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(replayed) << "attach printed '" << ReadFile(to_file.stdout_path) << "'";
    Result k = Wsctl({"kill", ws_, "job1", "-s", "KILL"});
    EXPECT_EQ(k.code, 0) << k.err;
    t.join();
    EXPECT_EQ(ReadFile(to_file.stdout_path), "first\n");
    EXPECT_EQ(attached.code, 128 + SIGKILL) << attached.err;
    EXPECT_TRUE(WaitForPs(
        ws_,
        [](const std::string &ps) {
            return PsLine(ps, "job1").find("killed(9)") != std::string::npos;
        },
        &last))
        << last;

    // Replay from an offset, after the end.
    Result replay = Wsctl({"attach", ws_, "job1", "--offset", "2"});
    EXPECT_EQ(replay.out, "rst\n");

    Result nosuch = Wsctl({"kill", ws_, "no-such-tag"});
    EXPECT_NE(nosuch.err.find("wsctl: NO_SUCH_PROCESS"), std::string::npos) << nosuch.err;
    Result psj = Wsctl({"--json", "ps", ws_});
    EXPECT_NE(psj.out.find("\"tag\":\"job1\""), std::string::npos) << psj.out;
}

// How many host processes run exactly `argv`.
int HostProcessCount(const std::vector<std::string> &argv)
{
    std::string want;
    for (const auto &a : argv)
        want += a + std::string(1, '\0');
    DIR *d = opendir("/proc");
    int found = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        if (ReadFile(std::string("/proc/") + e->d_name + "/cmdline") == want)
            found++;
    }
    if (d)
        closedir(d);
    return found;
}

// True when some host process runs exactly `argv`.
bool HostHasProcess(const std::vector<std::string> &argv)
{
    return HostProcessCount(argv) > 0;
}

// Waits up to 15 s for `cond`.
bool WaitFor(const std::function<bool()> &cond)
{
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (!cond()) {
        if (std::chrono::steady_clock::now() > until)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return true;
}

// A plain (not --tty) `wsctl exec` sent `sig` while its remote command
// runs: wsctl cancels the call, the server ends the whole remote tree, and
// wsctl exits 128 + sig like a command the signal ended. The tree is a
// shell with a sleep in the background and one in the foreground, found
// on the host (local-bash runs them there) by a duration unique to this run.
void ExpectSignalCancelsRemoteTree(const std::string &ws, int sig)
{
    std::string bin = Runfile("clients/cli/wsctl");
    std::string addr = server->addr();
    const std::string secs = testutil::UniqueSleepArg();
    const std::string script = "sleep " + secs + " & sleep " + secs + "; wait";
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);
        dup2(devnull, 0);
        dup2(devnull, 1);
        execl(bin.c_str(), bin.c_str(), "--addr", addr.c_str(), "exec", ws.c_str(), "--tag",
              "sleeper", "--", "sh", "-c", script.c_str(), (char *)nullptr);
        _exit(127);
    }
    std::string last;
    bool running = WaitForPs(
        ws,
        [](const std::string &ps) {
            return PsLine(ps, "sleeper").find("running") != std::string::npos;
        },
        &last);
    bool both = WaitFor([&] { return HostProcessCount({"sleep", secs}) == 2; });
    if (!running || !both) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        FAIL() << "the remote tree did not start (both sleeps on the host: " << both << "); ps:\n"
               << last;
    }
    kill(pid, sig);
    int status = 0;
    bool exited = WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; });
    if (!exited) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    EXPECT_TRUE(exited) << "wsctl still ran 15 s after signal " << sig;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + sig)
        << testutil::DescribeStatus(status) << ", want exit status " << 128 + sig;
    EXPECT_TRUE(WaitForPs(
        ws,
        [](const std::string &ps) {
            std::string line = PsLine(ps, "sleeper");
            return !line.empty() && line.find("running") == std::string::npos;
        },
        &last))
        << last;
    EXPECT_TRUE(WaitFor([&] {
        return !HostHasProcess({"sleep", secs});
    })) << HostProcessCount({"sleep", secs})
        << " of the remote sleeps still run on the host";
}

TEST_F(WsctlTest, SigtermCancelsRemoteCommand)
{
    ExpectSignalCancelsRemoteTree(ws_, SIGTERM);
}

// Ctrl-C at a shell, without a terminal of wsctl's own (see
// PtySessionAndCtrlC for the --tty case).
TEST_F(WsctlTest, SigintCancelsRemoteCommand)
{
    ExpectSignalCancelsRemoteTree(ws_, SIGINT);
}

// Reads from the pty master until `want` has been seen (or `timeout`
// passes).
bool ReadUntil(int fd, const std::string &want, std::string *seen,
               std::chrono::milliseconds timeout = std::chrono::seconds(15))
{
    auto until = std::chrono::steady_clock::now() + timeout;
    while (seen->find(want) == std::string::npos) {
        if (std::chrono::steady_clock::now() > until)
            return false;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        char buf[4096];
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            return false;
        seen->append(buf, n);
    }
    return true;
}

// Reads until `want` has been seen `count` times in *seen (waiting at
// most 15 s for each piece of output).
bool ReadUntilCount(int fd, const std::string &want, int count, std::string *seen)
{
    for (;;) {
        int n = 0;
        for (size_t at = seen->find(want); at != std::string::npos; at = seen->find(want, at + 1))
            n++;
        if (n >= count)
            return true;
        struct pollfd p = {fd, POLLIN, 0};
        char buf[4096];
        if (poll(&p, 1, 15000) <= 0)
            return false;
        ssize_t got = read(fd, buf, sizeof(buf));
        if (got <= 0)
            return false;
        seen->append(buf, got);
    }
}

// Starts wsctl `args` (after --addr) on a new pseudo-terminal of size
// `wsz`; the master side in *master.
pid_t SpawnOnPty(const std::vector<std::string> &args, struct winsize wsz, int *master)
{
    std::string bin = Runfile("clients/cli/wsctl");
    std::vector<std::string> full = {bin, "--addr", server->addr()};
    full.insert(full.end(), args.begin(), args.end());
    std::vector<char *> argv;
    for (auto &a : full)
        argv.push_back(&a[0]);
    argv.push_back(nullptr);
    pid_t pid = forkpty(master, nullptr, nullptr, &wsz);
    if (pid == 0) {
        execv(bin.c_str(), argv.data());
        _exit(127);
    }
    return pid;
}

// Waits up to 15 s for `pid` to end (then kills it); true when it ended
// by itself, with its status in *status.
bool WaitExit(pid_t pid, int *status)
{
    if (WaitFor([&] { return waitpid(pid, status, WNOHANG) == pid; }))
        return true;
    kill(pid, SIGKILL);
    waitpid(pid, status, 0);
    return false;
}

bool Write(int fd, const std::string &s)
{
    return write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size());
}

// Sets the pty's size and tells wsctl, as a terminal emulator does.
void ResizePty(int master, pid_t pid, unsigned short rows, unsigned short cols)
{
    struct winsize wsz = {rows, cols, 0, 0};
    ioctl(master, TIOCSWINSZ, &wsz);
    kill(pid, SIGWINCH);
}

// Asks `stty size` until the remote terminal reports `want` ("40 120"): a
// resize travels as a message of its own.
bool RemoteSizeIs(int master, const std::string &want, std::string *seen)
{
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
         std::chrono::steady_clock::now() < until;) {
        if (!Write(master, "stty size\n"))
            return false;
        if (ReadUntil(master, "\n" + want + "\r\n", seen, std::chrono::milliseconds(500)))
            return true;
    }
    return false;
}

// The state letter (R, S, T, ...) of the host process running exactly
// `argv`, or 0 when there is none.
char HostProcessState(const std::vector<std::string> &argv)
{
    std::string want;
    for (const auto &a : argv)
        want += a + std::string(1, '\0');
    DIR *d = opendir("/proc");
    char state = 0;
    for (struct dirent *e; d && (e = readdir(d)) && !state;) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        if (ReadFile(std::string("/proc/") + e->d_name + "/cmdline") != want)
            continue;
        std::string stat = ReadFile(std::string("/proc/") + e->d_name + "/stat");
        size_t paren = stat.rfind(')');
        if (paren != std::string::npos && paren + 2 < stat.size())
            state = stat[paren + 2];
    }
    if (d)
        closedir(d);
    return state;
}

// exec -t is a console like `docker exec -it`: the local terminal is raw,
// so Ctrl-C and Ctrl-Z are bytes for the remote terminal, whose line
// discipline signals its foreground job (the shell lives on); Ctrl-P
// Ctrl-Q detaches and leaves the shell running; attach -i -t picks it up
// again, makes a full-screen program redraw and follows resizes.
TEST_F(WsctlTest, ConsoleDetachAndReattach)
{
    int master = -1;
    pid_t pid =
        SpawnOnPty({"exec", "-t", "--tag", "console", ws_, "--", "sh"}, {30, 100, 0, 0}, &master);
    ASSERT_GE(pid, 0) << "forkpty (pseudo-terminals, /dev/ptmx): " << strerror(errno);
    std::string seen;
    // Remote output is computed, so finding "42" proves the command ran
    // (the typed line itself only shows "6*7").
    ASSERT_TRUE(Write(master, "echo hi $((6*7))\n"));
    ASSERT_TRUE(ReadUntil(master, "hi 42", &seen)) << seen;

    ResizePty(master, pid, 40, 120);
    ASSERT_TRUE(RemoteSizeIs(master, "40 120", &seen)) << seen;

    // cat runs when a typed line comes back twice: the terminal's echo,
    // then cat's copy (the shell would have run it, and named "mark-81").
    seen.clear();
    ASSERT_TRUE(Write(master, "cat\nmark-$((9*9))\n"));
    ASSERT_TRUE(ReadUntilCount(master, "mark-$((9*9))", 2, &seen)) << seen;
    // The line discipline flushes what was typed with a Ctrl-C: type on
    // once the shell prompts again.
    seen.clear();
    ASSERT_TRUE(Write(master, "\x03"));
    ASSERT_TRUE(ReadUntil(master, "$ ", &seen)) << seen;
    ASSERT_TRUE(Write(master, "echo alive$((1+1))\n"));
    ASSERT_TRUE(ReadUntil(master, "alive2", &seen)) << seen;
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, WNOHANG), 0) << "Ctrl-C ended wsctl itself";

    // Ctrl-Z stops the remote foreground job (found on the host, where
    // local-bash runs it, by a duration no other run uses).
    const std::string secs = testutil::UniqueSleepArg();
    ASSERT_TRUE(Write(master, "sleep " + secs + "\n"));
    ASSERT_TRUE(WaitFor([&] { return HostHasProcess({"sleep", secs}); })) << seen;
    ASSERT_TRUE(Write(master, "\x1a"));
    EXPECT_TRUE(WaitFor([&] {
        return HostProcessState({"sleep", secs}) == 'T';
    })) << "state "
        << HostProcessState({"sleep", secs});
    ASSERT_TRUE(Write(master, "kill -9 %1\n"));
    EXPECT_TRUE(WaitFor([&] { return !HostHasProcess({"sleep", secs}); }));

    // A program that says when its terminal changes size, for the
    // re-attach below.
    ASSERT_TRUE(Write(master, "sh -c 'trap \"echo winch-$((5*5))\" WINCH; echo looping-$((2*4)); "
                              "while :; do sleep 1; done'\n"));
    ASSERT_TRUE(ReadUntil(master, "looping-8", &seen)) << seen;

    ASSERT_TRUE(Write(master, "\x10\x11"));
    const std::string hint = "wsctl attach " + ws_ + " console -i -t";
    EXPECT_TRUE(ReadUntil(master, hint, &seen)) << seen;
    ASSERT_TRUE(WaitExit(pid, &status)) << "wsctl did not leave on Ctrl-P Ctrl-Q";
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << testutil::DescribeStatus(status);
    // The local terminal is back in cooked mode.
    struct termios after;
    ASSERT_EQ(tcgetattr(master, &after), 0);
    EXPECT_TRUE(after.c_lflag & ICANON);
    EXPECT_TRUE(after.c_lflag & ECHO);
    close(master);
    std::string last;
    ASSERT_TRUE(WaitForPs(
        ws_,
        [](const std::string &ps) {
            return PsLine(ps, "console").find("running") != std::string::npos;
        },
        &last))
        << last;

    // Re-attach on a terminal of the size the remote one has: the redraw
    // still reaches the program (a resize to the same size would not).
    pid = SpawnOnPty({"attach", ws_, "console", "-i", "-t"}, {40, 120, 0, 0}, &master);
    ASSERT_GE(pid, 0);
    seen.clear();
    ASSERT_TRUE(ReadUntil(master, "winch-25", &seen)) << seen;
    // Typing works again: Ctrl-C ends the loop, the shell answers.
    seen.clear();
    ASSERT_TRUE(Write(master, "\x03"));
    ASSERT_TRUE(ReadUntil(master, "$ ", &seen)) << seen;
    ASSERT_TRUE(Write(master, "echo re$((2+3))\n"));
    ASSERT_TRUE(ReadUntil(master, "re5", &seen)) << seen;
    ResizePty(master, pid, 50, 132);
    ASSERT_TRUE(RemoteSizeIs(master, "50 132", &seen)) << seen;
    // The shell's exit status is attach's.
    ASSERT_TRUE(Write(master, "exit 3\n"));
    ASSERT_TRUE(WaitExit(pid, &status)) << seen;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << testutil::DescribeStatus(status);
    close(master);
    EXPECT_TRUE(WaitForPs(
        ws_,
        [](const std::string &ps) {
            return PsLine(ps, "console").find("exited(3)") != std::string::npos;
        },
        &last))
        << last;
}

// A signal that reaches wsctl exec -t itself (not a key: those go to the
// remote terminal) ends the remote tree, although it runs in the
// background so that a detach could leave it running.
TEST_F(WsctlTest, SignalToConsoleEndsTheRemoteTree)
{
    int master = -1;
    pid_t pid =
        SpawnOnPty({"exec", "-t", "--tag", "victim", ws_, "--", "sh"}, {24, 80, 0, 0}, &master);
    ASSERT_GE(pid, 0);
    std::string seen;
    ASSERT_TRUE(Write(master, "echo up$((1+2))\n"));
    ASSERT_TRUE(ReadUntil(master, "up3", &seen)) << seen;
    kill(pid, SIGTERM);
    int status = 0;
    ASSERT_TRUE(WaitExit(pid, &status));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM)
        << testutil::DescribeStatus(status);
    close(master);
    std::string last;
    EXPECT_TRUE(WaitForPs(
        ws_,
        [](const std::string &ps) {
            std::string line = PsLine(ps, "victim");
            return !line.empty() && line.find("running") == std::string::npos;
        },
        &last))
        << last;
}

// Without -t the terminal stays cooked: Ctrl-C is wsctl's SIGINT, which
// cancels the remote command, and wsctl exits 130.
TEST_F(WsctlTest, CtrlCWithoutTtyCancels)
{
    const std::string secs = testutil::UniqueSleepArg();
    int master = -1;
    // Through sh, whose child keeps argv[0] "sleep" (the server runs a
    // command by its full path).
    pid_t pid = SpawnOnPty({"exec", ws_, "--", "sh", "-c", "sleep " + secs + "; true"},
                           {24, 80, 0, 0}, &master);
    ASSERT_GE(pid, 0);
    bool started = WaitFor([&] { return HostHasProcess({"sleep", secs}); });
    if (!started)
        kill(pid, SIGKILL);
    ASSERT_TRUE(started);
    ASSERT_TRUE(Write(master, "\x03"));
    int status = 0;
    ASSERT_TRUE(WaitExit(pid, &status));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130)
        << testutil::DescribeStatus(status);
    close(master);
    EXPECT_TRUE(WaitFor([&] { return !HostHasProcess({"sleep", secs}); }));
}

// attach -i feeds a background command's stdin through SendInput, byte
// exact across many calls, and closes it at EOF.
TEST_F(WsctlTest, AttachFeedsStdinAndClosesIt)
{
    Result bg = Wsctl({"exec", ws_, "--background", "-i", "--tag", "feeder", "--", "sh", "-c",
                       "cat > fed.bin; echo fed"});
    ASSERT_EQ(bg.code, 0) << bg.err;
    std::string data;
    for (int i = 0; data.size() < (300u << 10); i++)
        data += "line " + std::to_string(i) + "\n";
    RunOpts o;
    o.stdin_data = data;
    Result at = Wsctl({"attach", ws_, "feeder", "-i"}, o);
    EXPECT_EQ(at.code, 0) << at.err;
    EXPECT_EQ(at.out, "fed\n");
    Result cat = Wsctl({"cat", ws_, "fed.bin"});
    EXPECT_EQ(cat.code, 0) << cat.err;
    EXPECT_EQ(cat.out.size(), data.size());
    EXPECT_TRUE(cat.out == data) << "the command read other bytes than were sent";
}

TEST_F(WsctlTest, PutShowsProgressOnTerminal)
{
    std::string src = TempDir() + "/mid.in";
    std::ofstream(src, std::ios::binary) << std::string(16u << 20, 'p');
    std::string bin = Runfile("clients/cli/wsctl");
    std::string addr = server->addr();
    int master = -1;
    pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
    ASSERT_GE(pid, 0) << "forkpty (pseudo-terminals, /dev/ptmx): " << strerror(errno);
    if (pid == 0) {
        execl(bin.c_str(), bin.c_str(), "--addr", addr.c_str(), "put", ws_.c_str(), "mid.bin",
              src.c_str(), (char *)nullptr);
        _exit(127);
    }
    std::string seen;
    EXPECT_TRUE(ReadUntil(master, "100% [====================] 16.0/16.0 MiB", &seen)) << seen;
    int status;
    waitpid(pid, &status, 0);
    close(master);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    // Not on a pipe.
    Result quiet = Wsctl({"put", ws_, "mid2.bin", src});
    EXPECT_EQ(quiet.code, 0);
    EXPECT_EQ(quiet.err, "");
}

// ---------------------------------------------------------------- TLS

// The shared fixture (clients/testdata/pki.sh) makes the CA, the server's
// and the clients' certificates and the tokens file; its tokens are fixed.
const char *const kAliceToken = "tok-alice-0123456789";
const char *const kBobToken = "tok-bob-9876543210";

std::string MakePki()
{
    std::string dir = TempDir();
    std::string cmd = Runfile("clients/testdata/pki.sh") + " " + dir;
    if (system(cmd.c_str()) != 0)
        abort();
    return dir;
}

// wsctl against `srv` with `args` after --addr; `env` as in RunOpts.
Result WsctlAt(const Server &srv, std::vector<std::string> args, std::vector<std::string> env = {},
               const std::string &stdin_data = "")
{
    RunOpts o;
    o.use_addr_flag = false;
    o.env = std::move(env);
    o.stdin_data = stdin_data;
    args.insert(args.begin(), {"--addr", srv.addr()});
    return Wsctl(args, o);
}

// The one-line error of a failed connection: exit 1, "wsctl: UNAVAILABLE:
// ..." and nothing else.
::testing::AssertionResult Unavailable(const Result &r)
{
    if (r.code == 1 && r.err.compare(0, 20, "wsctl: UNAVAILABLE: ") == 0 &&
        std::count(r.err.begin(), r.err.end(), '\n') == 1 && r.err.back() == '\n' && r.out.empty())
        return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "exit " << r.code << ", stderr: " << r.err;
}

const char *const kUnauthenticated = "wsctl: UNAUTHENTICATED: unauthenticated\n";

TEST(WsctlTls, TokenOverTlsRunsTheWholeCycle)
{
    std::string pki = MakePki();
    Server srv({"--tokens-file", pki + "/tokens", "--tls-cert", pki + "/server.pem", "--tls-key",
                pki + "/server.key"},
               Listen::Tcp);
    const std::vector<std::string> tls = {"--tls-ca", pki + "/ca.pem"};
    auto with = [&](std::vector<std::string> pre, std::vector<std::string> cmd) {
        pre.insert(pre.end(), cmd.begin(), cmd.end());
        return pre;
    };
    std::vector<std::string> alice = with(tls, {"--token", kAliceToken});

    Result open =
        WsctlAt(srv, with(alice, {"open", "--provider", "local-bash", "--allow", kAllow}));
    ASSERT_EQ(open.code, 0) << open.err;
    // Loopback over TLS: no warning about the token.
    EXPECT_EQ(open.err, "");
    std::string id = Trim(open.out);
    Result put = WsctlAt(srv, with(alice, {"put", id, "notes.txt"}), {}, "over tls\n");
    ASSERT_EQ(put.code, 0) << put.err;
    Result ex = WsctlAt(srv, with(alice, {"exec", id, "--", "sh", "-c", "cat notes.txt; exit 4"}));
    EXPECT_EQ(ex.code, 4) << ex.err;
    EXPECT_EQ(ex.out, "over tls\n");
    Result cat = WsctlAt(srv, with(alice, {"cat", id, "notes.txt"}));
    EXPECT_EQ(cat.code, 0) << cat.err;
    EXPECT_EQ(cat.out, "over tls\n");

    // The same through the environment only.
    Result env = WsctlAt(
        srv, {"describe", id},
        {"WORKSPACED_TLS_CA=" + pki + "/ca.pem", std::string("WORKSPACED_TOKEN=") + kAliceToken});
    EXPECT_EQ(env.code, 0) << env.err;
    EXPECT_NE(env.out.find(id), std::string::npos) << env.out;

    // A wrong token and no token: the server's refusal, one line, exit 1.
    Result wrong = WsctlAt(srv, with(tls, {"--token", "tok-mallory", "describe", id}));
    EXPECT_EQ(wrong.code, 1);
    EXPECT_EQ(wrong.err, kUnauthenticated);
    Result none = WsctlAt(srv, with(tls, {"describe", id}));
    EXPECT_EQ(none.code, 1);
    EXPECT_EQ(none.err, kUnauthenticated);

    // A CA that did not sign the server's certificate, plaintext against a
    // TLS port, and a server name the certificate does not carry: the
    // connection fails.
    EXPECT_TRUE(Unavailable(
        WsctlAt(srv, {"--tls-ca", pki + "/otherca.pem", "--token", kAliceToken, "describe", id})));
    EXPECT_TRUE(Unavailable(WsctlAt(srv, {"--token", kAliceToken, "describe", id})));
    EXPECT_TRUE(Unavailable(
        WsctlAt(srv, with(alice, {"--tls-server-name", "wrong.test", "describe", id}))));
    // The name the certificate does carry, instead of the address's host.
    Result named =
        WsctlAt(srv, with(alice, {"--tls-server-name", "workspaced.test", "describe", id}));
    EXPECT_EQ(named.code, 0) << named.err;

    EXPECT_EQ(WsctlAt(srv, with(alice, {"close", id})).code, 0);
}

TEST(WsctlTls, UnreadableOrWrongFilesAreOneLineErrors)
{
    std::string pki = MakePki();
    std::string missing = pki + "/missing.pem";
    // Nothing listens: the files are read before any connection.
    RunOpts o;
    o.use_addr_flag = false;
    auto run = [&](std::vector<std::string> args) {
        args.insert(args.begin(), {"--addr", "127.0.0.1:1"});
        return Wsctl(args, o);
    };
    Result r = run({"--tls-ca", missing, "providers"});
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err, "wsctl: --tls-ca " + missing + ": No such file or directory\n");
    o.env = {"WORKSPACED_TLS_CA=" + missing};
    r = run({"providers"});
    o.env.clear();
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err, "wsctl: WORKSPACED_TLS_CA " + missing + ": No such file or directory\n");
    r = run({"--tls-ca", pki + "/ca.pem", "--tls-cert", pki + "/alice.pem", "--tls-key", missing,
             "providers"});
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err, "wsctl: --tls-key " + missing + ": No such file or directory\n");
    // A file that is not PEM at all.
    r = run({"--tls-ca", pki + "/tokens", "providers"});
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err, "wsctl: --tls-ca " + pki + "/tokens: not a PEM file\n");
    // A directory.
    r = run({"--tls-ca", pki, "providers"});
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.compare(0, 16 + pki.size(), "wsctl: --tls-ca " + pki), 0) << r.err;
    // Over the size limit (1 MiB), however PEM it starts.
    std::string big = pki + "/big.pem";
    std::ofstream(big) << "-----BEGIN CERTIFICATE-----\n" << std::string(1u << 20, 'A');
    r = run({"--tls-ca", big, "providers"});
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err, "wsctl: --tls-ca " + big + ": larger than 1048576 bytes\n");
    // Half a key pair is a usage error.
    r = run({"--tls-cert", pki + "/alice.pem", "providers"});
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--tls-cert without --tls-key"), std::string::npos) << r.err;
}

TEST(WsctlTls, PlaintextTokenToARemoteAddressWarns)
{
    // 0.0.0.0 is no loopback name, and nothing listens on port 1 of it:
    // the warning comes before the connection fails.
    RunOpts o;
    o.use_addr_flag = false;
    Result r = Wsctl({"--addr", "0.0.0.0:1", "--token", kAliceToken, "providers"}, o);
    EXPECT_EQ(r.code, 1);
    const std::string warning =
        "wsctl: warning: the token goes to 0.0.0.0:1 in plaintext (use --tls or --tls-ca)\n";
    EXPECT_EQ(r.err.compare(0, warning.size(), warning), 0) << r.err;
    // No token, or TLS: no warning.
    r = Wsctl({"--addr", "0.0.0.0:1", "providers"}, o);
    EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
    r = Wsctl({"--addr", "0.0.0.0:1", "--tls", "--token", kAliceToken, "providers"}, o);
    EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
    // Loopback names and unix sockets do not leave the machine.
    for (const char *a : {"127.0.0.1:1", "localhost:1", "[::1]:1", "unix:/nonexistent"}) {
        r = Wsctl({"--addr", a, "--token", kAliceToken, "providers"}, o);
        EXPECT_EQ(r.code, 1) << a;
        EXPECT_EQ(r.err.find("warning"), std::string::npos) << a << ": " << r.err;
    }
    // And --help says so.
    Result help = Wsctl({"--help"}, o);
    EXPECT_EQ(help.code, 0);
    for (const char *opt : {"--tls-ca FILE", "--tls-cert FILE", "--tls-key FILE",
                            "--tls-server-name NAME", "WORKSPACED_TLS_CA", "plaintext"})
        EXPECT_NE(help.out.find(opt), std::string::npos) << opt;
}

TEST(WsctlTls, MutualTlsNamesTheTenantByCertificate)
{
    std::string pki = MakePki();
    Server srv({"--tokens-file", pki + "/tokens", "--tls-cert", pki + "/server.pem", "--tls-key",
                pki + "/server.key", "--tls-client-ca", pki + "/ca.pem"},
               Listen::Tcp);
    const std::vector<std::string> alice = {"--tls-ca",   pki + "/ca.pem",
                                            "--tls-cert", pki + "/alice.pem",
                                            "--tls-key",  pki + "/alice.key"};
    auto with = [&](std::vector<std::string> cmd) {
        std::vector<std::string> v = alice;
        v.insert(v.end(), cmd.begin(), cmd.end());
        return v;
    };
    // Alice's certificate alone, no token.
    Result open = WsctlAt(srv, with({"open", "--provider", "local-bash", "--allow", kAllow}));
    ASSERT_EQ(open.code, 0) << open.err;
    std::string id = Trim(open.out);
    Result put = WsctlAt(srv, with({"put", id, "mine.txt"}), {}, "alice's\n");
    EXPECT_EQ(put.code, 0) << put.err;
    Result ex = WsctlAt(srv, with({"exec", id, "--", "cat", "mine.txt"}));
    EXPECT_EQ(ex.code, 0) << ex.err;
    EXPECT_EQ(ex.out, "alice's\n");

    // The certificate through the environment.
    Result env = WsctlAt(srv, {"cat", id, "mine.txt"},
                         {"WORKSPACED_TLS_CA=" + pki + "/ca.pem",
                          "WORKSPACED_TLS_CERT=" + pki + "/alice.pem",
                          "WORKSPACED_TLS_KEY=" + pki + "/alice.key"});
    EXPECT_EQ(env.code, 0) << env.err;
    EXPECT_EQ(env.out, "alice's\n");

    // Bob's token decides over alice's certificate: the workspace is
    // nobody bob knows.
    Result bob = WsctlAt(srv, with({"--token", kBobToken, "cat", id, "mine.txt"}));
    EXPECT_EQ(bob.code, 1);
    EXPECT_EQ(bob.err.compare(0, 26, "wsctl: NO_SUCH_WORKSPACE: "), 0) << bob.err;
    Result bob_describe = WsctlAt(srv, with({"--token", kBobToken, "--json", "describe", id}));
    EXPECT_EQ(bob_describe.code, 1);
    EXPECT_EQ(bob_describe.out, "");

    // No client certificate, or one from a CA the server does not trust:
    // the handshake fails, token or not.
    EXPECT_TRUE(Unavailable(WsctlAt(srv, {"--tls-ca", pki + "/ca.pem", "describe", id})));
    EXPECT_TRUE(Unavailable(
        WsctlAt(srv, {"--tls-ca", pki + "/ca.pem", "--token", kAliceToken, "describe", id})));
    EXPECT_TRUE(
        Unavailable(WsctlAt(srv, {"--tls-ca", pki + "/ca.pem", "--tls-cert", pki + "/stranger.pem",
                                  "--tls-key", pki + "/stranger.key", "describe", id})));

    EXPECT_EQ(WsctlAt(srv, with({"close", id})).code, 0);
}

// ---- behind a front proxy ----
//
// The nodes listen on unix sockets (nginx passes calls to them as to any
// upstream); the front's TCP port is what wsctl meets, as across a network.

// A real nginx (clients/testdata/front.sh) in front of `nodes`, named
// node-1, node-2, ... in order; stopped (SIGTERM) when it goes.
class Front
{
  public:
    explicit Front(const std::vector<std::string> &nodes)
    {
        std::string dir = TempDir();
        std::vector<std::string> args = {"/bin/bash", Runfile("clients/testdata/front.sh"), dir};
        args.insert(args.end(), nodes.begin(), nodes.end());
        std::vector<char *> argv;
        for (auto &a : args)
            argv.push_back(&a[0]);
        argv.push_back(nullptr);
        int out[2];
        if (pipe(out) < 0)
            abort();
        errpath_ = dir + ".stderr";
        const std::string &errpath = errpath_;
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, out[1], 1);
        posix_spawn_file_actions_addopen(&fa, 2, errpath.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                         0644);
        posix_spawn_file_actions_addclose(&fa, out[0]);
        if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0)
            abort();
        posix_spawn_file_actions_destroy(&fa);
        close(out[1]);
        std::string line;
        char ch;
        struct pollfd p = {out[0], POLLIN, 0};
        while (poll(&p, 1, 20000) > 0 && read(out[0], &ch, 1) == 1 && ch != '\n')
            line.push_back(ch);
        close(out[0]);
        const std::string prefix = "front listening on ";
        if (line.compare(0, prefix.size(), prefix) != 0) {
            fprintf(stderr, "front did not start: %s\n", ReadFile(errpath).c_str());
            abort();
        }
        addr_ = line.substr(prefix.size());
    }
    // front.sh exits with nginx's status: 0 only for a clean shutdown.
    ~Front()
    {
        std::string problem = testutil::StopCleanly(pid_, "the front (front.sh, nginx)", errpath_);
        if (!problem.empty())
            ADD_FAILURE() << problem;
    }
    const std::string &addr() const
    {
        return addr_;
    }

  private:
    pid_t pid_ = -1;
    std::string addr_, errpath_;
};

// wsctl through the front with `args` after --addr; `env` as in RunOpts.
Result WsctlVia(const Front &front, std::vector<std::string> args,
                std::vector<std::string> env = {}, const std::string &stdin_data = "")
{
    RunOpts o;
    o.use_addr_flag = false;
    o.env = std::move(env);
    o.stdin_data = stdin_data;
    args.insert(args.begin(), {"--addr", front.addr()});
    return Wsctl(args, o);
}

bool IsNode(const std::string &s)
{
    return s == "node-1" || s == "node-2";
}

TEST(WsctlFront, OpenNamesTheNodeAndNodePinsEveryLaterCall)
{
    Server one, two;
    Front front({one.addr(), two.addr()});

    // Plain output: the id, then the node the front names.
    Result open = WsctlVia(front, {"open", "--provider", "local-bash", "--allow", kAllow});
    ASSERT_EQ(open.code, 0) << open.err;
    std::string line = Trim(open.out);
    size_t sp = line.find(' ');
    ASSERT_NE(sp, std::string::npos) << "no node after the id: " << open.out;
    const std::string id = line.substr(0, sp), node = line.substr(sp + 1);
    EXPECT_EQ(id.compare(0, 3, "ws_"), 0) << open.out;
    ASSERT_TRUE(IsNode(node)) << open.out;

    // Every call about the workspace, many times over, with --node.
    for (int i = 0; i < 6; i++) {
        SCOPED_TRACE("round " + std::to_string(i));
        const std::string text = "round " + std::to_string(i) + "\n";
        Result put = WsctlVia(front, {"--node", node, "put", id, "notes.txt"}, {}, text);
        ASSERT_EQ(put.code, 0) << put.err;
        Result cat = WsctlVia(front, {"--node", node, "cat", id, "notes.txt"});
        EXPECT_EQ(cat.code, 0) << cat.err;
        EXPECT_EQ(cat.out, text);
        Result ex = WsctlVia(front, {"--node", node, "exec", id, "--", "sh", "-c",
                                     "cat notes.txt; echo err >&2; exit 3"});
        EXPECT_EQ(ex.code, 3) << ex.err;
        EXPECT_EQ(ex.out, text);
        EXPECT_EQ(ex.err, "err\n");
        Result d = WsctlVia(front, {"--node", node, "describe", id});
        EXPECT_EQ(d.code, 0) << d.err;
        EXPECT_NE(d.out.find("id:          " + id), std::string::npos) << d.out;
    }
    // The same through the environment.
    Result env = WsctlVia(front, {"cat", id, "notes.txt"}, {"WORKSPACED_NODE=" + node});
    EXPECT_EQ(env.code, 0) << env.err;
    EXPECT_EQ(env.out, "round 5\n");

    // Without a node the front balances, and the other node has never
    // heard of the workspace.
    int not_found = 0;
    for (int i = 0; i < 6; i++) {
        Result d = WsctlVia(front, {"describe", id});
        if (d.code == 1 && d.err.compare(0, 26, "wsctl: NO_SUCH_WORKSPACE: ") == 0)
            not_found++;
        else
            EXPECT_EQ(d.code, 0) << d.err;
    }
    EXPECT_GE(not_found, 1) << "every unpinned call reached the workspace's node";

    // A node that is not behind the front: UNAVAILABLE, naming it.
    Result nine = WsctlVia(front, {"--node", "node-9", "describe", id});
    EXPECT_EQ(nine.code, 1);
    EXPECT_EQ(nine.err, "wsctl: UNAVAILABLE: no such node behind this front (node=node-9)\n");
    EXPECT_EQ(nine.out, "");
    Result nine_exec = WsctlVia(front, {"--node", "node-9", "exec", id, "--", "true"});
    EXPECT_EQ(nine_exec.code, 1);
    EXPECT_EQ(nine_exec.err.compare(0, 20, "wsctl: UNAVAILABLE: "), 0) << nine_exec.err;
    // A name no header could carry is refused before anything is sent.
    Result bad = WsctlVia(front, {"--node", "node 1", "describe", id});
    EXPECT_EQ(bad.code, 2);
    EXPECT_NE(bad.err.find("is not a node name"), std::string::npos) << bad.err;

    // --json names the node too, and a ref resolves on its node.
    Result js = WsctlVia(front, {"--json", "open", "--provider", "local-bash"});
    ASSERT_EQ(js.code, 0) << js.err;
    size_t at = js.out.find("\"node\":\"");
    ASSERT_NE(at, std::string::npos) << js.out;
    at += 8;
    const std::string jnode = js.out.substr(at, js.out.find('"', at) - at);
    EXPECT_TRUE(IsNode(jnode)) << js.out;
    at = js.out.find("\"ref\":\"");
    ASSERT_NE(at, std::string::npos) << js.out;
    at += 7;
    const std::string ref = js.out.substr(at, js.out.find('"', at) - at);
    at = js.out.find("\"id\":\"") + 6;
    const std::string jid = js.out.substr(at, js.out.find('"', at) - at);
    for (int i = 0; i < 4; i++) {
        Result res = WsctlVia(front, {"--node", jnode, "resolve", ref});
        EXPECT_EQ(res.code, 0) << res.err;
        EXPECT_EQ(Trim(res.out), jid + " " + jnode);
    }
    EXPECT_EQ(WsctlVia(front, {"--node", jnode, "close", jid}).code, 0);

    // Opening and listing providers ignore --node: they go to any node.
    Result again = WsctlVia(front, {"--node", "node-9", "open", "--provider", "local-bash"});
    EXPECT_EQ(again.code, 0) << again.err;
    EXPECT_EQ(WsctlVia(front, {"--node", "node-9", "providers"}).code, 0);

    Result closed = WsctlVia(front, {"--node", node, "close", id});
    EXPECT_EQ(closed.code, 0) << closed.err;
}

// ---------------------------------------------------------------- wire

// n as a protobuf base-128 varint.
std::string Varint(uint64_t n)
{
    std::string out;
    for (; n >= 0x80; n >>= 7)
        out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    out.push_back(static_cast<char>(n));
    return out;
}

// One field on the wire: its tag, then (for length-delimited fields) the
// length, then the payload.
std::string Field(uint64_t number, int wire_type, const std::string &payload)
{
    std::string out = Varint(number << 3 | static_cast<uint64_t>(wire_type));
    if (wire_type == 2)
        out += Varint(payload.size());
    return out + payload;
}

// A gRPC server on a unix socket that answers each method with canned
// response bytes and keeps the last request of each: where the point is
// what wsctl puts on the wire and what it makes of fields the real server
// does not fill (yet, or on this host), the answers are made by hand.
class CannedServer
{
  public:
    explicit CannedServer(std::map<std::string, std::string> replies)
        : service_(this), replies_(std::move(replies))
    {
        dir_ = SocketDir();
        addr_ = "unix:" + dir_ + "/canned.sock";
        grpc::ServerBuilder b;
        b.AddListeningPort(addr_, grpc::InsecureServerCredentials());
        b.RegisterCallbackGenericService(&service_);
        server_ = b.BuildAndStart();
        if (!server_)
            abort();
    }
    ~CannedServer()
    {
        server_->Shutdown();
        unlink((dir_ + "/canned.sock").c_str());
        rmdir(dir_.c_str());
    }
    const std::string &addr() const
    {
        return addr_;
    }
    // The last request of `method` ("/workspace.v1.Workspaces/Open"), as
    // bytes; empty when none came.
    std::string Request(const std::string &method)
    {
        std::lock_guard<std::mutex> lock(mu_);
        return requests_[method];
    }
    // Every request of `method` so far, in order.
    std::vector<std::string> Requests(const std::string &method)
    {
        std::lock_guard<std::mutex> lock(mu_);
        return all_[method];
    }
    // The next `n` calls of `method` fail UNAVAILABLE (after their request
    // is recorded), as a server that is briefly unreachable would.
    void FailNext(const std::string &method, int n)
    {
        std::lock_guard<std::mutex> lock(mu_);
        fail_[method] = n;
    }

  private:
    // One unary call: read the request, answer the canned bytes (or
    // UNIMPLEMENTED for a method without any).
    class Reactor : public grpc::ServerGenericBidiReactor
    {
      public:
        Reactor(CannedServer *s, std::string method) : s_(s), method_(std::move(method))
        {
            StartRead(&in_);
        }
        void OnReadDone(bool ok) override
        {
            if (!ok) {
                Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request"));
                return;
            }
            std::vector<grpc::Slice> slices;
            std::string req;
            if (in_.Dump(&slices).ok())
                for (const auto &sl : slices)
                    req.append(reinterpret_cast<const char *>(sl.begin()), sl.size());
            std::string reply;
            bool known, fail = false;
            {
                std::lock_guard<std::mutex> lock(s_->mu_);
                s_->requests_[method_] = req;
                s_->all_[method_].push_back(req);
                auto it = s_->replies_.find(method_);
                known = it != s_->replies_.end();
                if (known)
                    reply = it->second;
                if (s_->fail_[method_] > 0) {
                    s_->fail_[method_]--;
                    fail = true;
                }
            }
            if (fail) {
                Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "try again"));
                return;
            }
            if (!known) {
                Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, method_));
                return;
            }
            grpc::Slice slice(reply);
            out_ = grpc::ByteBuffer(&slice, 1);
            StartWriteAndFinish(&out_, grpc::WriteOptions(), grpc::Status::OK);
        }
        void OnDone() override
        {
            delete this;
        }

      private:
        CannedServer *s_;
        std::string method_;
        grpc::ByteBuffer in_, out_;
    };
    class Service : public grpc::CallbackGenericService
    {
      public:
        explicit Service(CannedServer *s) : s_(s)
        {
        }
        grpc::ServerGenericBidiReactor *
        CreateReactor(grpc::GenericCallbackServerContext *ctx) override
        {
            return new Reactor(s_, ctx->method());
        }

      private:
        CannedServer *s_;
    };

    Service service_;
    std::map<std::string, std::string> replies_;
    std::mutex mu_;
    std::map<std::string, std::string> requests_;
    std::map<std::string, std::vector<std::string>> all_;
    std::map<std::string, int> fail_;
    std::unique_ptr<grpc::Server> server_;
    std::string dir_, addr_;
};

// The fields for per-workspace users, runtimes and truncation reasons, at
// the numbers the protos give them: open --runtime puts DockerConfig.runtime
// (8) on the wire; describe prints DescribeResponse.uid (17), gid (18) and
// ContainerInfo.runtime (23), and --json carries them; ls says what cut a
// listing short (ListDirResponse.truncated_reason, 3).
TEST(WsctlWire, RuntimeGoesOutAndUserAndRuntimeComeBack)
{
    const std::string id = "ws_0123456789abcdef0123456789abcdef";
    CannedServer canned({
        {"/workspace.v1.Workspaces/Open", Field(1, 2, Field(1, 2, id) + Field(3, 2, "docker"))},
        {"/workspace.v1.Workspaces/Describe",
         Field(1, 2, id) + Field(2, 2, "docker") + Field(15, 2, Field(23, 2, "runsc")) +
             Field(17, 0, Varint(524289)) + Field(18, 0, Varint(524290))},
        {"/workspace.v1.FileSystem/ListDir", Field(1, 2, Field(1, 2, "a.txt")) +
                                                 Field(2, 0, Varint(1)) +
                                                 Field(3, 2, "entries_budget")},
    });
    RunOpts o;
    o.use_addr_flag = false;
    auto at = [&](std::vector<std::string> args) {
        args.insert(args.begin(), {"--addr", canned.addr()});
        return Wsctl(args, o);
    };

    Result opened =
        at({"open", "--provider", "docker", "--image", "busybox", "--runtime", "runsc"});
    ASSERT_EQ(opened.code, 0) << opened.err;
    EXPECT_EQ(Trim(opened.out), id);
    const std::string docker = Field(4, 2, Field(1, 2, "busybox") + Field(8, 2, "runsc"));
    EXPECT_NE(canned.Request("/workspace.v1.Workspaces/Open").find(docker), std::string::npos);

    Result d = at({"describe", id});
    ASSERT_EQ(d.code, 0) << d.err;
    EXPECT_NE(d.out.find("\nuid:         524289\n"), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("\ngid:         524290\n"), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("\nruntime:     runsc\n"), std::string::npos) << d.out;
    Result dj = at({"--json", "describe", id});
    ASSERT_EQ(dj.code, 0) << dj.err;
    EXPECT_NE(dj.out.find("\"uid\":524289"), std::string::npos) << dj.out;
    EXPECT_NE(dj.out.find("\"gid\":524290"), std::string::npos) << dj.out;
    EXPECT_NE(dj.out.find("\"runtime\":\"runsc\""), std::string::npos) << dj.out;

    Result ls = at({"ls", id});
    ASSERT_EQ(ls.code, 0) << ls.err;
    EXPECT_EQ(ls.err, "wsctl: listing truncated (entries_budget)\n");

    // The runtime is docker's: with another provider it is a usage error.
    Result bash = at({"open", "--provider", "local-bash", "--runtime", "runsc"});
    EXPECT_EQ(bash.code, 2);
    EXPECT_NE(bash.err.find("--runtime is for --provider docker"), std::string::npos) << bash.err;

    // --network asks NETWORK_ALLOW (the sandbox's config is field 3 of the
    // request, its network field 1; docker's is field 4, its image 1 and
    // its network 2); local-bash has no network.
    Result sb = at({"open", "--provider", "local-sandbox", "--network"});
    ASSERT_EQ(sb.code, 0) << sb.err;
    EXPECT_NE(
        canned.Request("/workspace.v1.Workspaces/Open").find(Field(3, 2, Field(1, 0, Varint(1)))),
        std::string::npos);
    Result dk = at({"open", "--provider", "docker", "--image", "busybox", "--network"});
    ASSERT_EQ(dk.code, 0) << dk.err;
    EXPECT_NE(canned.Request("/workspace.v1.Workspaces/Open")
                  .find(Field(4, 2, Field(1, 2, "busybox") + Field(2, 0, Varint(1)))),
              std::string::npos);
    // --exec-mode: field 7 of the sandbox's config, 9 of docker's.
    Result am = at({"open", "--provider", "local-sandbox", "--exec-mode", "agent"});
    ASSERT_EQ(am.code, 0) << am.err;
    EXPECT_NE(
        canned.Request("/workspace.v1.Workspaces/Open").find(Field(3, 2, Field(7, 0, Varint(1)))),
        std::string::npos);
    Result pm =
        at({"open", "--provider", "docker", "--image", "busybox", "--exec-mode", "per-command"});
    ASSERT_EQ(pm.code, 0) << pm.err;
    EXPECT_NE(canned.Request("/workspace.v1.Workspaces/Open")
                  .find(Field(4, 2, Field(1, 2, "busybox") + Field(9, 0, Varint(2)))),
              std::string::npos);
    Result bad = at({"open", "--provider", "local-sandbox", "--exec-mode", "fast"});
    EXPECT_EQ(bad.code, 2);
    EXPECT_NE(bad.err.find("--exec-mode is agent or per-command, not 'fast'"), std::string::npos)
        << bad.err;
    Result bm = at({"open", "--provider", "local-bash", "--exec-mode", "agent"});
    EXPECT_EQ(bm.code, 2);
    EXPECT_NE(bm.err.find("--exec-mode is for --provider local-sandbox or docker"),
              std::string::npos)
        << bm.err;
    Result bn = at({"open", "--provider", "local-bash", "--network"});
    EXPECT_EQ(bn.code, 2);
    EXPECT_NE(bn.err.find("--network is for --provider local-sandbox or docker"), std::string::npos)
        << bn.err;
}

// The request_id of an Open (field 9): "wsctl-" and 32 hex digits, or ""
// when the request has none.
std::string RequestId(const std::string &open)
{
    const std::string head = std::string("\x4a\x26") + "wsctl-";
    size_t at = open.find(head);
    return at == std::string::npos ? "" : open.substr(at + 2, 38);
}

// Every open sends a request_id of its own, and the retries of one open
// (after UNAVAILABLE) send the same one, so the server can answer a retry
// with the workspace the first attempt opened.
TEST(WsctlWire, OpenRetriesReuseOneRequestId)
{
    const std::string id = "ws_0123456789abcdef0123456789abcdef";
    const std::string method = "/workspace.v1.Workspaces/Open";
    CannedServer canned(std::map<std::string, std::string>{
        {method, Field(1, 2, Field(1, 2, id) + Field(3, 2, "memory"))}});
    RunOpts o;
    o.use_addr_flag = false;
    canned.FailNext(method, 2);
    Result first = Wsctl({"--addr", canned.addr(), "open", "--provider", "memory"}, o);
    ASSERT_EQ(first.code, 0) << first.err;
    EXPECT_EQ(Trim(first.out), id);
    std::vector<std::string> reqs = canned.Requests(method);
    ASSERT_EQ(reqs.size(), 3u);
    const std::string rid = RequestId(reqs[0]);
    ASSERT_EQ(rid.size(), 38u) << "no request_id in the first Open";
    EXPECT_EQ(rid.find_first_not_of("0123456789abcdef", 6), std::string::npos) << rid;
    EXPECT_EQ(RequestId(reqs[1]), rid);
    EXPECT_EQ(RequestId(reqs[2]), rid);

    Result second = Wsctl({"--addr", canned.addr(), "open", "--provider", "memory"}, o);
    ASSERT_EQ(second.code, 0) << second.err;
    reqs = canned.Requests(method);
    ASSERT_EQ(reqs.size(), 4u);
    EXPECT_EQ(RequestId(reqs[3]).size(), 38u);
    EXPECT_NE(RequestId(reqs[3]), rid);
}

// The real server's describe has the user lines (their values are the
// server's to fill) and --json the fields.
TEST_F(WsctlTest, DescribeNamesTheWorkspacesUser)
{
    Result d = Wsctl({"describe", ws_});
    ASSERT_EQ(d.code, 0) << d.err;
    EXPECT_NE(d.out.find("\nuid:         "), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("\ngid:         "), std::string::npos) << d.out;
    Result dj = Wsctl({"--json", "describe", ws_});
    ASSERT_EQ(dj.code, 0) << dj.err;
    EXPECT_NE(dj.out.find("\"uid\":"), std::string::npos) << dj.out;
    EXPECT_NE(dj.out.find("\"gid\":"), std::string::npos) << dj.out;
}

// ---------------------------------------------------------------- lifecycle

// A label value no other test (or earlier run against the same server)
// uses, so a selector on it finds only this test's workspaces.
std::string UniqueValue()
{
    std::random_device rd;
    std::ostringstream o;
    o << "r" << std::hex << rd() << rd();
    return o.str();
}

// The number of lines of a table that mention `what`.
int LinesWith(const std::string &table, const std::string &what)
{
    std::istringstream in(table);
    std::string line;
    int n = 0;
    while (std::getline(in, line))
        if (line.find(what) != std::string::npos)
            n++;
    return n;
}

// The integer after "\"key\":" in a flat JSON document, or -1.
int64_t JsonInt(const std::string &json, const std::string &key)
{
    size_t at = json.find("\"" + key + "\":");
    if (at == std::string::npos)
        return -1;
    return strtoll(json.c_str() + at + key.size() + 3, nullptr, 10);
}

// open's lifetime, labels, name and env reach the server, which describe
// shows back, and the env reaches a command.
TEST_F(WsctlTest, OpenWithLifetimeLabelsNameAndEnv)
{
    const std::string name = "n-" + UniqueValue();
    Result open = Wsctl({"open", "--provider", "local-bash", "--allow", kAllow, "--ttl", "2h",
                         "--idle-timeout", "10m", "--label", "team=core", "--label", "tier=web",
                         "--name", name, "--env", "LANG=C.UTF-8"});
    ASSERT_EQ(open.code, 0) << open.err;
    const std::string id = Trim(open.out);

    Result d = Wsctl({"describe", id});
    ASSERT_EQ(d.code, 0) << d.err;
    EXPECT_NE(d.out.find("\nname:        " + name + "\n"), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("\nlabels:      team=core tier=web\n"), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("\nlifetime:    ttl=2h idle_timeout=10m\n"), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("\nenv:         LANG=C.UTF-8\n"), std::string::npos) << d.out;
    // An expiry, in the describe's own format (not "never").
    EXPECT_NE(d.out.find("\nexpires:     2"), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("\nsecrets:     -\n"), std::string::npos) << d.out;

    Result dj = Wsctl({"--json", "describe", id});
    ASSERT_EQ(dj.code, 0) << dj.err;
    EXPECT_NE(dj.out.find("\"ttl_ms\":7200000"), std::string::npos) << dj.out;
    EXPECT_NE(dj.out.find("\"idle_timeout_ms\":600000"), std::string::npos) << dj.out;
    EXPECT_NE(dj.out.find("\"team\":\"core\""), std::string::npos) << dj.out;
    EXPECT_GT(JsonInt(dj.out, "expires_at_unix_ms"), 0) << dj.out;

    Result lang = Wsctl({"exec", id, "--", "sh", "-c", "echo \"lang=$LANG\""});
    EXPECT_EQ(lang.code, 0) << lang.err;
    EXPECT_EQ(lang.out, "lang=C.UTF-8\n");

    // The name is the tenant's: a second open of it is refused.
    Result dup = Wsctl({"open", "--provider", "local-bash", "--name", name});
    EXPECT_EQ(dup.code, 1);
    EXPECT_NE(dup.err.find("wsctl: EXISTS: "), std::string::npos) << dup.err;

    // Bad forms are usage errors, before any call.
    EXPECT_EQ(Wsctl({"open", "--ttl", "soon"}).code, 2);
    EXPECT_EQ(Wsctl({"open", "--ttl", "-5m"}).code, 2);
    EXPECT_EQ(Wsctl({"open", "--label", "novalue"}).code, 2);
    EXPECT_EQ(Wsctl({"close", id}).code, 0);
}

// list -l filters by labels (one selector or several, all of which hold),
// --name by name, and every page is listed whatever the page size.
TEST_F(WsctlTest, ListFiltersByLabelsAndNameAcrossPages)
{
    const std::string run = UniqueValue();
    std::vector<std::string> ids;
    for (const char *role : {"a", "b", "b"}) {
        Result r =
            Wsctl({"open", "--provider", "memory", "--label", "run=" + run, "--label",
                   std::string("role=") + role, "--name", run + "-" + std::to_string(ids.size())});
        ASSERT_EQ(r.code, 0) << r.err;
        ids.push_back(Trim(r.out));
    }

    Result all = Wsctl({"list", "-l", "run=" + run});
    ASSERT_EQ(all.code, 0) << all.err;
    EXPECT_EQ(LinesWith(all.out, "run=" + run), 3) << all.out;
    for (const auto &id : ids)
        EXPECT_EQ(LinesWith(all.out, id), 1) << all.out;
    // The other workspaces of the suite are not in it.
    EXPECT_EQ(LinesWith(all.out, ws_), 0) << all.out;
    // The table's header, then the name and the labels of each.
    EXPECT_NE(all.out.find("NAME"), std::string::npos) << all.out;
    EXPECT_NE(all.out.find("EXPIRES"), std::string::npos) << all.out;
    EXPECT_EQ(LinesWith(all.out, run + "-1 "), 1) << all.out;
    EXPECT_EQ(LinesWith(all.out, "role=b,run=" + run), 2) << all.out;

    Result a = Wsctl({"list", "-l", "run=" + run + ",role=a"});
    EXPECT_EQ(LinesWith(a.out, "run=" + run), 1) << a.out;
    EXPECT_EQ(LinesWith(a.out, ids[0]), 1) << a.out;
    Result not_a = Wsctl({"list", "-l", "run=" + run, "-l", "role!=a"});
    EXPECT_EQ(LinesWith(not_a.out, "run=" + run), 2) << not_a.out;
    EXPECT_EQ(LinesWith(not_a.out, ids[0]), 0) << not_a.out;
    Result named = Wsctl({"list", "--name", run + "-2"});
    EXPECT_EQ(LinesWith(named.out, "run=" + run), 1) << named.out;
    EXPECT_EQ(LinesWith(named.out, ids[2]), 1) << named.out;

    // One workspace a page: wsctl follows the tokens to the end.
    Result paged = Wsctl({"list", "-l", "run=" + run, "--page-size", "1"});
    ASSERT_EQ(paged.code, 0) << paged.err;
    EXPECT_EQ(LinesWith(paged.out, "run=" + run), 3) << paged.out;
    Result pj = Wsctl({"--json", "list", "-l", "run=" + run, "--page-size", "1"});
    ASSERT_EQ(pj.code, 0) << pj.err;
    EXPECT_EQ(pj.out.compare(0, 15, "{\"workspaces\":["), 0) << pj.out;
    for (const auto &id : ids)
        EXPECT_NE(pj.out.find("\"id\":\"" + id + "\""), std::string::npos) << pj.out;
    EXPECT_NE(pj.out.find("\"name\":\"" + run + "-0\""), std::string::npos) << pj.out;
    EXPECT_NE(pj.out.find("\"run\":\"" + run + "\""), std::string::npos) << pj.out;

    Result bad = Wsctl({"list", "-l", "=oops"});
    EXPECT_EQ(bad.code, 1);
    EXPECT_NE(bad.err.find("wsctl: MALFORMED: "), std::string::npos) << bad.err;
    for (const auto &id : ids)
        EXPECT_EQ(Wsctl({"close", id}).code, 0);
}

// extend gives a workspace a new ttl and idle timeout.
TEST_F(WsctlTest, ExtendChangesTheLifetime)
{
    Result open = Wsctl({"--json", "open", "--provider", "memory", "--ttl", "1h"});
    ASSERT_EQ(open.code, 0) << open.err;
    const int64_t before = JsonInt(open.out, "expires_at_unix_ms");
    ASSERT_GT(before, 0) << open.out;
    size_t at = open.out.find("\"id\":\"");
    ASSERT_NE(at, std::string::npos);
    const std::string id = open.out.substr(at + 6, open.out.find('"', at + 6) - at - 6);

    Result ex = Wsctl({"extend", id, "--ttl", "3h", "--idle-timeout", "4h"});
    ASSERT_EQ(ex.code, 0) << ex.err;
    EXPECT_NE(ex.out.find("lifetime: ttl=3h idle_timeout=4h\n"), std::string::npos) << ex.out;
    Result d = Wsctl({"--json", "describe", id});
    ASSERT_EQ(d.code, 0) << d.err;
    EXPECT_NE(d.out.find("\"ttl_ms\":10800000"), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("\"idle_timeout_ms\":14400000"), std::string::npos) << d.out;
    // It expires at the earlier of the two: three hours from now, later
    // than one hour from the open.
    EXPECT_GT(JsonInt(d.out, "expires_at_unix_ms"), before) << d.out;

    EXPECT_EQ(Wsctl({"extend", id}).code, 2);
    EXPECT_EQ(Wsctl({"extend", id, "--ttl", "forever"}).code, 2);
    EXPECT_EQ(Wsctl({"close", id}).code, 0);
}

// Secrets come from wsctl's environment, reach a command only when it
// names them, and are never shown: describe has their names only.
TEST_F(WsctlTest, SecretsByNameNeverByValue)
{
    const std::string value = "s3cr3t-" + UniqueValue();
    RunOpts with;
    with.env = {"WSCTL_TEST_TOKEN=" + value};
    Result open = Wsctl({"open", "--provider", "local-sandbox", "--allow", "sh,echo",
                         "--secret-from-env", "WSCTL_TEST_TOKEN"},
                        with);
    ASSERT_EQ(open.code, 0) << open.err;
    EXPECT_EQ(open.out.find(value), std::string::npos);
    const std::string id = Trim(open.out);

    for (const char *json : {"", "--json"}) {
        std::vector<std::string> args = {"describe", id};
        if (json[0])
            args.insert(args.begin(), json);
        Result d = Wsctl(args);
        ASSERT_EQ(d.code, 0) << d.err;
        EXPECT_NE(d.out.find("WSCTL_TEST_TOKEN"), std::string::npos) << d.out;
        EXPECT_EQ(d.out.find(value), std::string::npos) << d.out;
        EXPECT_EQ(d.err.find(value), std::string::npos) << d.err;
    }
    Result d = Wsctl({"describe", id});
    EXPECT_NE(d.out.find("\nsecrets:     WSCTL_TEST_TOKEN\n"), std::string::npos) << d.out;

    const std::vector<std::string> show = {"sh", "-c", "echo \"tok=$WSCTL_TEST_TOKEN\""};
    std::vector<std::string> named = {"exec", id, "--secret", "WSCTL_TEST_TOKEN", "--"};
    named.insert(named.end(), show.begin(), show.end());
    Result got = Wsctl(named);
    EXPECT_EQ(got.code, 0) << got.err;
    EXPECT_EQ(got.out, "tok=" + value + "\n");
    std::vector<std::string> unnamed = {"exec", id, "--"};
    unnamed.insert(unnamed.end(), show.begin(), show.end());
    Result none = Wsctl(unnamed);
    EXPECT_EQ(none.code, 0) << none.err;
    EXPECT_EQ(none.out, "tok=\n");

    // set-secrets replaces the value, from the environment again.
    RunOpts next;
    next.env = {"WSCTL_TEST_TOKEN=" + value + "-2"};
    Result set = Wsctl({"set-secrets", id, "--secret-from-env", "WSCTL_TEST_TOKEN"}, next);
    ASSERT_EQ(set.code, 0) << set.err;
    EXPECT_EQ(set.out, "secrets: WSCTL_TEST_TOKEN\n");
    Result again = Wsctl(named);
    EXPECT_EQ(again.out, "tok=" + value + "-2\n");

    // A variable that is not set is named, and nothing is opened.
    Result unset = Wsctl({"open", "--provider", "memory", "--label", "unset=secret",
                          "--secret-from-env", "WSCTL_TEST_UNSET_VARIABLE"});
    EXPECT_EQ(unset.code, 2);
    EXPECT_NE(unset.err.find("WSCTL_TEST_UNSET_VARIABLE"), std::string::npos) << unset.err;
    EXPECT_EQ(LinesWith(Wsctl({"list", "-l", "unset=secret"}).out, "unset=secret"), 0);
    EXPECT_EQ(Wsctl({"close", id}).code, 0);
}

// cp -r packs a local tree into WriteArchive and unpacks ReadArchive into
// a local directory: both ways give the same tree (modes, a symlink kept as
// a link), gzip too; an existing target needs --merge or --replace.
TEST_F(WsctlTest, CpRecursiveBothWays)
{
    std::string dir = TempDir();
    Host("set -e; cd '" + dir +
         "'; mkdir -p src/a/b src/empty; printf one > src/a/one.txt;"
         " printf '#!/bin/sh\n' > src/a/b/run.sh; chmod 0755 src/a/b/run.sh;"
         " ln -s ../one.txt src/a/b/link");
    auto describe = [](const std::string &d) {
        return Host("cd '" + d + "' && find . -mindepth 1 -printf '%y %m %s %P %l\\n' | sort");
    };
    for (const char *z : {"", "-z"}) {
        SCOPED_TRACE(z);
        std::string remote = std::string(ws_) + ":copy" + z;
        std::vector<std::string> up = {"cp", "-r", dir + "/src", remote};
        std::vector<std::string> down = {"cp", "-r", remote, dir + "/back" + z};
        if (*z) {
            up.insert(up.begin() + 2, z);
            down.insert(down.begin() + 2, z);
        }
        Result r = Wsctl(up);
        ASSERT_EQ(r.code, 0) << r.err;
        EXPECT_NE(r.err.find("copied 6 entries (2 files, 3 directories, 1 symlinks"),
                  std::string::npos)
            << r.err;
        EXPECT_EQ(Wsctl({"cat", ws_, std::string("copy") + z + "/a/one.txt"}).out, "one");
        r = Wsctl(down);
        ASSERT_EQ(r.code, 0) << r.err;
        EXPECT_EQ(describe(dir + "/back" + z), describe(dir + "/src"));
    }
    Result again = Wsctl({"cp", "-r", dir + "/src", ws_ + ":copy"});
    EXPECT_EQ(again.code, 1);
    EXPECT_NE(again.err.find("wsctl: EXISTS"), std::string::npos) << again.err;
    EXPECT_EQ(Wsctl({"cp", "-r", "--merge", dir + "/src", ws_ + ":copy"}).code, 0);
    Result no_r = Wsctl({"cp", dir + "/src", ws_ + ":x"});
    EXPECT_EQ(no_r.code, 2) << no_r.err;
}

// snapshot, snapshots, restore, open --from-snapshot and --from-path,
// delete-snapshot: the whole cycle through wsctl.
TEST_F(WsctlTest, SnapshotRestoreForkAndShadow)
{
    RunOpts v1;
    v1.stdin_data = "version 1";
    ASSERT_EQ(Wsctl({"put", ws_, "f.txt"}, v1).code, 0);
    Result snap = Wsctl({"snapshot", ws_, "--name", "first", "--label", "k=v"});
    ASSERT_EQ(snap.code, 0) << snap.err;
    std::string id = Trim(snap.out);
    EXPECT_EQ(id.compare(0, 5, "snap-"), 0) << id;
    RunOpts v2;
    v2.stdin_data = "version 2";
    ASSERT_EQ(Wsctl({"put", ws_, "f.txt"}, v2).code, 0);

    Result list = Wsctl({"snapshots", "--workspace", ws_});
    ASSERT_EQ(list.code, 0) << list.err;
    EXPECT_NE(list.out.find(id), std::string::npos) << list.out;
    EXPECT_NE(list.out.find("first"), std::string::npos) << list.out;
    EXPECT_NE(Wsctl({"--json", "snapshots", "-l", "k=v"}).out.find(id), std::string::npos);

    Result rs = Wsctl({"restore", ws_, id});
    ASSERT_EQ(rs.code, 0) << rs.err;
    EXPECT_EQ(Wsctl({"cat", ws_, "f.txt"}).out, "version 1");

    Result fork = Wsctl({"open", "--provider", "memory", "--from-snapshot", id});
    ASSERT_EQ(fork.code, 0) << fork.err;
    std::string forked = Trim(fork.out);
    EXPECT_EQ(Wsctl({"cat", forked, "f.txt"}).out, "version 1");
    EXPECT_EQ(Wsctl({"close", forked}).code, 0);

    ASSERT_EQ(Wsctl({"delete-snapshot", id}).code, 0);
    EXPECT_EQ(Wsctl({"snapshots", "--workspace", ws_}).out.find(id), std::string::npos);
    Result gone = Wsctl({"restore", ws_, id});
    EXPECT_EQ(gone.code, 1);
    EXPECT_NE(gone.err.find("wsctl: NO_SUCH_SNAPSHOT"), std::string::npos) << gone.err;

    // A shadow of an allowed host directory; anything else is refused.
    std::string src = SourceRoot() + "/shadow";
    Host("mkdir -p '" + src + "/d' && printf host > '" + src + "/d/h.txt'");
    Result sh = Wsctl({"open", "--provider", "local-bash", "--from-path", src});
    ASSERT_EQ(sh.code, 0) << sh.err;
    std::string shadow = Trim(sh.out);
    EXPECT_EQ(Wsctl({"cat", shadow, "d/h.txt"}).out, "host");
    EXPECT_EQ(Wsctl({"close", shadow}).code, 0);
    Result denied = Wsctl({"open", "--provider", "local-bash", "--from-path", "/etc"});
    EXPECT_EQ(denied.code, 1);
    EXPECT_NE(denied.err.find("wsctl: SOURCE_PATH_DENIED"), std::string::npos) << denied.err;
}

// watch prints one line per event, ready first.
TEST_F(WsctlTest, WatchPrintsEvents)
{
    std::string out = TempDir() + "/watch.out";
    std::string bin = Runfile("clients/cli/wsctl");
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        setenv("WORKSPACED_ADDR", server->addr().c_str(), 1);
        execl(bin.c_str(), bin.c_str(), "watch", ws_.c_str(), "-r", (char *)nullptr);
        _exit(127);
    }
    auto wait_for = [&](const std::string &text) {
        for (int i = 0; i < 200; i++) {
            if (ReadFile(out).find(text) != std::string::npos)
                return true;
            usleep(50 * 1000);
        }
        return false;
    };
    EXPECT_TRUE(wait_for("ready")) << ReadFile(out);
    RunOpts o;
    o.stdin_data = "x";
    ASSERT_EQ(Wsctl({"put", ws_, "watched.txt"}, o).code, 0);
    EXPECT_TRUE(wait_for("created watched.txt\n")) << ReadFile(out);
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
}

} // namespace
