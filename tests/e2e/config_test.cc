// workspaced --config and --check-config against the real binary: a good
// file's settings are in force (listen address, tokens, limits, providers),
// a flag overrides the file, every kind of bad file (an unauthenticated TCP
// listener and bad policy and peer lines included) exits 2 with the exact
// line naming the key and the line (and the server refuses to start with
// it), and the deployment files in server/deploy stay valid, the example's
// policy included.
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "tests/e2e/harness.h"

extern char **environ;

using grpc::StatusCode;
using namespace workspace::v1;

namespace
{

const char *kBinary = "server/workspaced";

std::string Runfile(const std::string &rel)
{
    const char *srcdir = getenv("TEST_SRCDIR");
    return std::string(srcdir ? srcdir : ".") + "/workspaced/" + rel;
}

std::string WriteConf(const std::string &text)
{
    std::string path = wstest::MakeTempDir("conf") + "/workspaced.conf";
    wstest::WriteHostFile(path, text);
    return path;
}

bool Exited2(int status)
{
    return WIFEXITED(status) && WEXITSTATUS(status) == 2;
}

// A fresh directory under /tmp, removed with everything in it when the
// object goes: a unix socket path must fit 107 bytes, which the test's own
// temporary directory may not leave room for, and a policy bind root may
// not lie under /root, where that directory may be.
struct ShortDir {
    std::string path;
    ShortDir()
    {
        char tmpl[] = "/tmp/wsconfXXXXXX";
        if (!mkdtemp(tmpl))
            throw std::runtime_error("mkdtemp /tmp");
        char real[PATH_MAX];
        path = realpath(tmpl, real) ? real : tmpl;
    }
    ~ShortDir()
    {
        std::string cmd = "rm -rf '" + path + "'";
        EXPECT_EQ(system(cmd.c_str()), 0);
    }
};

// Starts the server with exactly `args` (no --listen or --state-dir added),
// returns its first stdout line ("workspaced listening on ...") or, when
// there is none, "stderr: " and what it printed there; then stops it.
std::string FirstLine(const std::vector<std::string> &args)
{
    std::vector<std::string> full = {kBinary};
    full.insert(full.end(), args.begin(), args.end());
    std::vector<char *> argv;
    for (auto &a : full)
        argv.push_back(&a[0]);
    argv.push_back(nullptr);
    int out[2];
    if (pipe2(out, O_CLOEXEC) < 0)
        return "pipe failed";
    std::string err_path = wstest::MakeTempDir("err") + "/stderr";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    int rc = posix_spawn(&pid, kBinary, &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    if (rc != 0) {
        close(out[0]);
        return "spawn failed";
    }
    std::string line;
    char ch;
    struct pollfd p = {out[0], POLLIN, 0};
    while (poll(&p, 1, 20000) > 0 && read(out[0], &ch, 1) == 1 && ch != '\n')
        line.push_back(ch);
    close(out[0]);
    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    return line.empty() ? "stderr: " + wstest::ReadHostFile(err_path) : line;
}

grpc::Status OpenProvider(Workspaces::Stub *ws, const std::string &provider,
                          OpenResponse *resp = nullptr, const std::string &image = "")
{
    OpenRequest req;
    if (provider == "memory")
        req.mutable_memory();
    else if (provider == "local-bash")
        req.mutable_local_bash();
    else if (provider == "local-sandbox")
        req.mutable_local_sandbox();
    else if (provider == "docker") {
        req.mutable_docker()->set_image(image);
        req.mutable_docker()->set_pull_policy(PULL_NEVER);
    }
    req.mutable_capabilities()->mutable_fs();
    OpenResponse local;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return ws->Open(&ctx, req, resp ? resp : &local);
}

TEST(ConfigTest, FileSettingsAreInForceAndFlagsOverrideThem)
{
    std::string dir = wstest::MakeTempDir("good");
    // A TCP listener, loopback included, is served only with authentication.
    std::string tokens = dir + "/tokens";
    wstest::WriteHostFile(tokens, "alice " + wstest::Sha256Hex("tok-config-listen-0123") + "\n");
    // Blanks around keys and values, comments of both kinds, CRLF endings.
    std::string conf = WriteConf("# a comment\r\n"
                                 "; another\r\n"
                                 "\r\n"
                                 "[server]\r\n"
                                 "listen = 127.0.0.2:0\r\n"
                                 "  state-dir   =   " +
                                 dir +
                                 "/state  \r\n"
                                 "threads = 2\t\r\n"
                                 "[ limits ]\r\n"
                                 "max-workspaces = 1   \r\n"
                                 "[exec]\r\n"
                                 "path = /usr/bin:/bin\r\n"
                                 "[auth]\r\n"
                                 "tokens-file = " +
                                 tokens + "\r\n");
    std::string err;
    EXPECT_EQ(wstest::RunServerToExit({"--check-config", conf}, &err), 0) << err;

    // The line names the host as configured, then the port bound.
    auto host = [](const std::string &line) { return line.substr(0, line.rfind(':') + 1); };
    EXPECT_EQ(host(FirstLine({"--config", conf})), "workspaced listening on 127.0.0.2:");
    EXPECT_EQ(host(FirstLine({"--config", conf, "--listen", "127.0.0.3:0"})),
              "workspaced listening on 127.0.0.3:");
    // The flag may come first: the file is still read before the flags.
    EXPECT_EQ(host(FirstLine({"--listen", "127.0.0.3:0", "--config", conf})),
              "workspaced listening on 127.0.0.3:");
    // A unix socket given as a flag replaces the file's TCP address.
    {
        ShortDir sock_dir;
        const std::string sock = sock_dir.path + "/ws.sock";
        EXPECT_EQ(FirstLine({"--config", conf, "--listen", "unix:" + sock}),
                  "workspaced listening on unix:" + sock);
    }
    // state-dir came from the file (with its blanks trimmed).
    struct stat st;
    EXPECT_EQ(stat((dir + "/state/ref.key").c_str(), &st), 0);

    // A limit from the file is enforced (the harness's unix socket in
    // place of the file's address) ...
    {
        wstest::Server srv({"--config", conf});
        auto ws = srv.workspaces();
        EXPECT_TRUE(OpenProvider(ws.get(), "memory").ok());
        grpc::Status s = OpenProvider(ws.get(), "memory");
        EXPECT_WS_ERROR(s, StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
        EXPECT_EQ(wstest::Decode(s).metadata["limit"], "1");
    }
    // ... and a flag overrides it.
    {
        wstest::Server srv({"--config", conf, "--max-workspaces", "2"});
        auto ws = srv.workspaces();
        EXPECT_TRUE(OpenProvider(ws.get(), "memory").ok());
        EXPECT_TRUE(OpenProvider(ws.get(), "memory").ok());
        EXPECT_WS_ERROR(OpenProvider(ws.get(), "memory"), StatusCode::RESOURCE_EXHAUSTED, "QUOTA");
    }
}

// Threads of process `pid` whose name starts with `prefix`.
int ThreadsNamed(pid_t pid, const std::string &prefix)
{
    std::string dir = "/proc/" + std::to_string(pid) + "/task";
    int n = 0;
    DIR *d = opendir(dir.c_str());
    if (!d)
        return -1;
    while (struct dirent *e = readdir(d)) {
        std::ifstream comm(dir + "/" + e->d_name + "/comm");
        std::string name;
        if (e->d_name[0] != '.' && std::getline(comm, name) &&
            name.compare(0, prefix.size(), prefix) == 0)
            n++;
    }
    closedir(d);
    return n;
}

// [work] sizes the worker pool's lanes (their threads are named after
// them), a flag overrides it, and a lane of 0 threads still serves its
// calls, on the RPC threads.
TEST(ConfigTest, WorkSettingsSizeThePool)
{
    std::string conf = WriteConf("[work]\nfs-threads = 3\ndaemon-threads = 2\ntenant-running = "
                                 "1\ntenant-queued = 8\n");
    std::string err;
    EXPECT_EQ(wstest::RunServerToExit({"--check-config", conf, "--state-dir", "/x"}, &err), 0)
        << err;
    {
        wstest::Server srv({"--config", conf});
        EXPECT_EQ(ThreadsNamed(srv.pid(), "ws-fs-"), 3);
        EXPECT_EQ(ThreadsNamed(srv.pid(), "ws-daemon-"), 2);
    }
    wstest::Server srv({"--config", conf, "--work-fs-threads", "0", "--work-daemon-threads", "0"});
    EXPECT_EQ(ThreadsNamed(srv.pid(), "ws-fs-"), 0);
    EXPECT_EQ(ThreadsNamed(srv.pid(), "ws-daemon-"), 0);
    auto ws = srv.workspaces();
    OpenResponse opened;
    ASSERT_TRUE(OpenProvider(ws.get(), "memory", &opened).ok());
    auto fs = srv.fs();
    ListDirRequest req;
    req.set_workspace_id(opened.workspace().id());
    ListDirResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    EXPECT_TRUE(fs->ListDir(&ctx, req, &resp).ok());
}

TEST(ConfigTest, TokensFileFromTheFileIsEnforced)
{
    const std::string token = "tok-config-0123456789";
    std::string tokens = wstest::MakeTempDir("tokens") + "/tokens";
    wstest::WriteHostFile(tokens, "alice " + wstest::Sha256Hex(token) + "\n");
    std::string conf = WriteConf("[auth]\ntokens-file = " + tokens + "\n");
    // Over TCP: on a unix socket the caller's uid may name a tenant too.
    wstest::Server srv({"--config", conf, "--listen", "127.0.0.1:0"});

    auto none = Providers::NewStub(srv.Channel(""));
    ListProvidersRequest req;
    ListProvidersResponse resp;
    {
        grpc::ClientContext ctx;
        EXPECT_EQ(none->ListProviders(&ctx, req, &resp).error_code(), StatusCode::UNAUTHENTICATED);
    }
    auto alice = Providers::NewStub(srv.Channel(token));
    {
        grpc::ClientContext ctx;
        grpc::Status s = alice->ListProviders(&ctx, req, &resp);
        EXPECT_TRUE(s.ok()) << s.error_message();
    }
}

TEST(ConfigTest, DisabledProviderIsRefusedAndListedUnavailable)
{
    // The policy allows every provider: what is refused is the server's.
    std::string conf = WriteConf("[providers]\nenabled = memory\n[policy]\nproviders = memory, "
                                 "local-bash, local-sandbox, docker\n");
    {
        wstest::Server srv({"--config", conf});
        auto ws = srv.workspaces();
        EXPECT_TRUE(OpenProvider(ws.get(), "memory").ok());
        for (const char *p : {"local-bash", "local-sandbox"}) {
            grpc::Status s = OpenProvider(ws.get(), p);
            EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "PROVIDER_DISABLED") << p;
            EXPECT_EQ(wstest::Decode(s).metadata["provider"], p);
        }
        grpc::Status s = OpenProvider(ws.get(), "docker", nullptr, "busybox:1");
        EXPECT_WS_ERROR(s, StatusCode::FAILED_PRECONDITION, "PROVIDER_DISABLED");
        EXPECT_EQ(wstest::Decode(s).metadata["provider"], "docker");

        ListProvidersRequest req;
        ListProvidersResponse resp;
        grpc::ClientContext ctx;
        ASSERT_TRUE(srv.providers()->ListProviders(&ctx, req, &resp).ok());
        ASSERT_EQ(resp.providers_size(), 4);
        for (const auto &p : resp.providers()) {
            if (p.kind() == "memory") {
                EXPECT_TRUE(p.available());
                continue;
            }
            EXPECT_FALSE(p.available()) << p.kind();
            EXPECT_EQ(p.reason(), "PROVIDER_DISABLED: not enabled on this server") << p.kind();
        }
    }
    // The flag overrides the file: now only local-bash.
    {
        wstest::Server srv({"--config", conf, "--providers", " local-bash "});
        auto ws = srv.workspaces();
        EXPECT_WS_ERROR(OpenProvider(ws.get(), "memory"), StatusCode::FAILED_PRECONDITION,
                        "PROVIDER_DISABLED");
        OpenResponse resp;
        ASSERT_TRUE(OpenProvider(ws.get(), "local-bash", &resp).ok());
        CloseRequest creq;
        creq.set_workspace_id(resp.workspace().id());
        CloseResponse cresp;
        grpc::ClientContext ctx;
        EXPECT_TRUE(ws->Close(&ctx, creq, &cresp).ok());
    }
}

TEST(ConfigTest, DockerDefaultImageFillsAnOpenThatNamesNone)
{
    // Without a default, an image is required.
    {
        wstest::Server srv;
        auto ws = srv.workspaces();
        grpc::Status s = OpenProvider(ws.get(), "docker");
        EXPECT_WS_ERROR(s, StatusCode::INVALID_ARGUMENT, "MALFORMED");
        EXPECT_EQ(wstest::Decode(s).metadata["field"], "image");
    }
    // With one, the Open goes on to the backend: an absent image under
    // pull policy never (or no daemon at all) fails closed, never as a
    // malformed request.
    std::string conf = WriteConf("[docker]\ndefault-image = workspaced-config-test-absent:1\n");
    wstest::Server srv({"--config", conf});
    auto ws = srv.workspaces();
    OpenResponse resp;
    grpc::Status s = OpenProvider(ws.get(), "docker", &resp);
    ASSERT_FALSE(s.ok());
    wstest::Error e = wstest::Decode(s);
    EXPECT_EQ(e.reason, "WORKSPACE_FAILED") << e.message;
    EXPECT_TRUE(e.code == StatusCode::FAILED_PRECONDITION || e.code == StatusCode::UNAVAILABLE);
}

struct Bad {
    const char *name;
    std::string text;
    std::string why; // after "config: FILE:"
};

TEST(ConfigTest, BadFilesExit2NamingKeyAndLine)
{
    std::vector<Bad> table = {
        {"unknown key", "[server]\nlisten = 127.0.0.1:1\nlisten-port = 9\n",
         "3: key \"server.listen-port\": unknown key"},
        {"key of another section", "[limits]\nthreads = 2\n",
         "2: key \"limits.threads\": unknown key"},
        {"bad number", "# limits\n[limits]\nmax-workspaces = lots\n",
         "3: key \"limits.max-workspaces\": not a number in 1..1000000"},
        {"number out of range", "[limits]\nmax-workspaces = 1000001\n",
         "2: key \"limits.max-workspaces\": not a number in 1..1000000"},
        {"zero below a least of one", "[limits]\nmax-workspaces = 0\n",
         "2: key \"limits.max-workspaces\": not a number in 1..1000000"},
        {"zero streams", "[transport]\nmax-streams-per-connection = 0\n",
         "2: key \"transport.max-streams-per-connection\": not a number in 1..100000"},
        {"keepalive between zero and its least", "[server]\nkeepalive-ms = 99\n",
         "2: key \"server.keepalive-ms\": not 0 or a number of ms in 100..3600000"},
        {"negative number", "[server]\nthreads = -1\n",
         "2: key \"server.threads\": not a number in 0..256 (0: one per CPU)"},
        {"trailing comment is part of the value", "[server]\ndrain-grace-ms = 5 # ms\n",
         "2: key \"server.drain-grace-ms\": not a number of ms in 0..3600000"},
        {"duplicate key", "[server]\nthreads = 2\n\n[limits]\n[server]\nthreads = 3\n",
         "6: key \"server.threads\": duplicate, first set on line 2"},
        {"empty value", "[server]\nlisten =\n", "2: key \"server.listen\": empty value"},
        {"empty value with blanks", "[exec]\npath =    \r\n", "2: key \"exec.path\": empty value"},
        {"missing equals sign", "[server]\nlisten 127.0.0.1:1\n",
         "2: key \"server.listen\": no '=' (expected key = value)"},
        {"not a key at all", "[server]\n= 5\n", "2: \"= 5\": expected key = value"},
        {"bad key name", "[server]\nLis ten = 1\n", "2: \"Lis ten = 1\": expected key = value"},
        {"unknown section", "[server]\nthreads = 1\n[srever]\n",
         "3: section \"srever\": unknown section"},
        {"unterminated section", "[server\n", "1: \"[server\": a section header is [name]"},
        {"empty section", "[]\n", "1: \"[]\": a section header is [name]"},
        {"escape bytes in a section name", "[\x1b[31mred]\n",
         "1: section \"?[31mred\": unknown section"},
        {"key before any section", "threads = 1\n", "1: key \"threads\": outside any [section]"},
        {"double-quoted value", "[server]\nstate-dir = \"/var/lib/workspaced\"\n",
         "2: key \"server.state-dir\": quotes are not part of the syntax; write the value bare"},
        {"single-quoted value", "[exec]\nprocess-containment = 'auto'\n",
         "2: key \"exec.process-containment\": quotes are not part of the syntax; write the "
         "value bare"},
        {"NUL byte", std::string("[server]\nthreads = 1\0 2\n", 24), "2: NUL byte in the line"},
        {"overlong line", "[server]\n# " + std::string(9000, 'x') + "\n",
         "2: line longer than 8192 bytes"},
        {"overlong value", "[exec]\npath = /" + std::string(8200, 'x') + "\n",
         "2: line longer than 8192 bytes"},
        {"listen port out of range", "[server]\nlisten = 127.0.0.1:99999\n",
         "2: key \"server.listen\": not HOST:PORT with a port in 0..65535, or unix:PATH"},
        {"listen without a port", "[server]\nlisten = 127.0.0.1\n",
         "2: key \"server.listen\": not HOST:PORT with a port in 0..65535, or unix:PATH"},
        {"listen port not a number", "[server]\nlisten = [::1]:+80\n",
         "2: key \"server.listen\": not HOST:PORT with a port in 0..65535, or unix:PATH"},
        {"bad containment", "[exec]\nprocess-containment = cgroup\n",
         "2: key \"exec.process-containment\": not auto or subreaper"},
        {"relative exec path", "[exec]\npath = bin:/usr/bin\n",
         "2: key \"exec.path\": not a colon-separated list of absolute directories"},
        {"keepalive below its minimum", "[server]\nkeepalive-ms = 10\n",
         "2: key \"server.keepalive-ms\": not 0 or a number of ms in 100..3600000"},
        {"switch that is not true or false", "[tls]\nallow-plaintext = yes\n",
         "2: key \"tls.allow-plaintext\": not true or false"},
        {"unknown provider", "[providers]\nenabled = memory, podman\n",
         "2: key \"providers.enabled\": not a comma-separated list of memory, local-bash, "
         "local-sandbox, docker"},
        {"no provider", "[providers]\nenabled = ,\n",
         "2: key \"providers.enabled\": not a comma-separated list of memory, local-bash, "
         "local-sandbox, docker"},
        {"relative bwrap", "[local-sandbox]\nbwrap = bwrap\n",
         "2: key \"local-sandbox.bwrap\": not an absolute path"},
        {"bad docker host", "[docker]\nhost = ssh://build@example\n",
         "2: key \"docker.host\": not unix:///PATH or tcp://HOST[:PORT]"},
        {"bad default image", "[docker]\ndefault-image = Not An Image\n",
         "2: key \"docker.default-image\": not a valid image reference"},
        {"message size out of range", "[transport]\nmax-message-bytes = 1024\n",
         "2: key \"transport.max-message-bytes\": not a number of bytes in 65536..67108864"},
        {"more work threads than a lane holds", "[work]\nfs-threads = 257\n",
         "2: key \"work.fs-threads\": not a number in 0..256 (0: inline, on the RPC threads)"},
        {"negative daemon threads", "[work]\ndaemon-threads = -1\n",
         "2: key \"work.daemon-threads\": not a number in 0..256 (0: inline, on the RPC "
         "threads)"},
        {"tenant running that is not a number", "[work]\ntenant-running = all\n",
         "2: key \"work.tenant-running\": not a number in 0..256 (0: the lane's default)"},
        {"tenant queue out of range", "[work]\ntenant-queued = 100001\n",
         "2: key \"work.tenant-queued\": not a number in 0..100000 (0: the default)"},
        {"work key in another section", "[server]\nfs-threads = 2\n",
         "2: key \"server.fs-threads\": unknown key"},
        // Rules between settings, reported on the line of the key.
        {"tls cert without key", "[server]\n[tls]\ncert = /etc/ws/cert.pem\n",
         "3: key \"tls.cert\": tls.cert and tls.key go together"},
        {"client ca without cert", "[tls]\nclient-ca = /etc/ws/ca.pem\n",
         "2: key \"tls.client-ca\": needs tls.cert and tls.key"},
        // Loopback is no boundary: every local user and every box sharing
        // the host's network reaches it.
        {"loopback listen without authentication", "[server]\nlisten = 127.0.0.1:7878\n",
         "2: key \"server.listen\": refusing to listen on '127.0.0.1:7878' without "
         "authentication: any local user or box sharing the host's network could reach it; give "
         "--tokens-file or --tls-client-ca, listen on a unix: socket (the default), or for "
         "development only, as a user other than root, --insecure-loopback"},
        {"IPv6 loopback listen without authentication",
         "[server]\nlisten = [::1]:0\ninsecure-loopback = false\n",
         "2: key \"server.listen\": refusing to listen on '[::1]:0' without authentication: any "
         "local user or box sharing the host's network could reach it; give --tokens-file or "
         "--tls-client-ca, listen on a unix: socket (the default), or for development only, as a "
         "user other than root, --insecure-loopback"},
        {"public listen without authentication", "[server]\nlisten = 0.0.0.0:7878\n",
         "2: key \"server.listen\": refusing to listen on '0.0.0.0:7878' without "
         "authentication: give --tokens-file or --tls-client-ca (unix: sockets need none; "
         "--insecure-loopback covers loopback addresses only)"},
        {"public listen in plaintext",
         "[server]\nlisten = 0.0.0.0:7878\n[auth]\ntokens-file = /etc/ws/tokens\n",
         "2: key \"server.listen\": not a loopback address or unix: socket, and neither TLS "
         "(tls.cert, tls.key) nor tls.allow-plaintext = true is configured"},
        {"public metrics", "[metrics]\nlisten = 0.0.0.0:9464\nallow-remote = false\n",
         "2: key \"metrics.listen\": not a loopback address (127.0.0.1, [::1], localhost) and "
         "metrics.allow-remote is not true"},
        // The policy sections, checked like every other (the cases of
        // policy_test.cc are not repeated here).
        {"unknown policy provider", "[policy]\nproviders = memory, podman\n",
         "2: key \"policy.providers\": not a comma-separated list of memory, local-bash, "
         "local-sandbox, docker"},
        {"relative bind root", "[policy]\nnetwork = false\nbind-roots = srv\n",
         "3: key \"policy.bind-roots\": \"srv\" is not an absolute path"},
        {"bind root that is not canonical", "[policy]\nbind-roots = /tmp/\n",
         "2: key \"policy.bind-roots\": \"/tmp/\" is not canonical (a symlink, '.', '..', '//' "
         "or a trailing '/')"},
        {"bad image pattern", "[policy]\ndocker-images = busybox:[1\n",
         "2: key \"policy.docker-images\": \"busybox:[1\": a '[' without its ']'"},
        {"docker user without a gid", "[policy]\ndocker-users = 1000\n",
         "2: key \"policy.docker-users\": \"1000\" is not uid:gid (decimal numbers)"},
        {"command with a blank", "[policy]\ncommands = ls, rm -rf\n",
         "2: key \"policy.commands\": an entry with a blank or a byte that is not printable "
         "ASCII"},
        {"tenant switch that is not true or false",
         "[policy]\nnetwork = false\n[policy.bob]\ndocker-pull = yes\n",
         "4: key \"policy.bob.docker-pull\": not true or false"},
        {"empty entry in a tenant's list", "[policy.alice]\nproviders = memory,,docker\n",
         "2: key \"policy.alice.providers\": an empty entry in the comma-separated list"},
        {"duplicate key in a tenant's section",
         "[policy.alice]\nnetwork = true\n[policy]\n[policy.alice]\nnetwork = false\n",
         "5: key \"policy.alice.network\": duplicate, first set on line 2"},
        {"tenant section without a name", "[policy.]\nnetwork = true\n",
         "1: section \"policy.\": the name after the '.' must be 1-64 of A-Z a-z 0-9 . _ -"},
        {"peer that is not a uid", "[peers]\nalice = 1000\n",
         "2: key \"peers.alice\": not a decimal uid"},
        {"negative peer uid", "[peers]\n1000 = alice\n-1 = bob\n",
         "3: key \"peers.-1\": not a decimal uid"},
        {"peer uid beyond 32 bits", "[peers]\n4294967296 = alice\n",
         "2: key \"peers.4294967296\": not a decimal uid"},
        {"peer that is not a tenant name", "[peers]\n1000 = no way\n",
         "2: key \"peers.1000\": not a tenant name ([A-Za-z0-9._-], 1-64 characters)"},
        {"peer mapped twice", "[peers]\n1000 = alice\n01000 = bob\n",
         "3: key \"peers.01000\": uid 1000 is mapped twice"},
        {"duplicate peer", "[peers]\n1000 = alice\n\n1000 = bob\n",
         "4: key \"peers.1000\": duplicate, first set on line 2"},
    };
    // Development's unauthenticated loopback listener, never for a root
    // server: as another user it is accepted.
    const std::string insecure = "[server]\nlisten = 127.0.0.1:7878\ninsecure-loopback = true\n";
    if (geteuid() == 0) {
        table.push_back({"insecure-loopback as root", insecure,
                         "3: key \"server.insecure-loopback\": refusing --insecure-loopback as "
                         "root: every local user, and every box that shares the host's network, "
                         "could run commands as root through it; run the server as an "
                         "unprivileged user, or use a unix: socket or --tokens-file"});
        table.push_back({"insecure-loopback as root on a unix socket",
                         "[server]\ninsecure-loopback = true\nlisten = unix:/tmp/ws.sock\n",
                         "2: key \"server.insecure-loopback\": refusing --insecure-loopback as "
                         "root: every local user, and every box that shares the host's network, "
                         "could run commands as root through it; run the server as an "
                         "unprivileged user, or use a unix: socket or --tokens-file"});
    } else {
        std::string err;
        EXPECT_EQ(wstest::RunServerToExit(
                      {"--check-config", WriteConf(insecure), "--state-dir", "/nonexistent"}, &err),
                  0)
            << err;
    }
    for (const auto &b : table) {
        std::string conf = WriteConf(b.text);
        std::string err;
        int st =
            wstest::RunServerToExit({"--check-config", conf, "--state-dir", "/nonexistent"}, &err);
        EXPECT_TRUE(Exited2(st)) << b.name << ": status " << st;
        EXPECT_EQ(err, "config: " + conf + ":" + b.why + "\n") << b.name;
        // Starting with it fails the same way, before anything is created.
        std::string state = wstest::MakeTempDir("st") + "/state";
        st = wstest::RunServerToExit({"--config", conf, "--state-dir", state}, &err);
        EXPECT_TRUE(Exited2(st)) << b.name << ": status " << st;
        EXPECT_EQ(err, "config: " + conf + ":" + b.why + "\n") << b.name;
        EXPECT_NE(access(state.c_str(), F_OK), 0) << b.name;
    }
}

TEST(ConfigTest, FlagsAndFileShareChecksAndRules)
{
    std::string err;
    // A flag refused with the same reason its key gets.
    int st =
        wstest::RunServerToExit({"--state-dir", "/nonexistent", "--max-workspaces", "lots"}, &err);
    EXPECT_TRUE(Exited2(st));
    EXPECT_EQ(err, "workspaced: invalid value 'lots' for --max-workspaces: not a number in "
                   "1..1000000\n");
    // gRPC would keep the low 16 bits of the port: 99999 would bind 34463.
    for (const char *addr : {"127.0.0.1:99999", "[::1]:65536", "localhost:", "127.0.0.1:0x50"}) {
        st = wstest::RunServerToExit({"--state-dir", "/nonexistent", "--listen", addr}, &err);
        EXPECT_TRUE(Exited2(st)) << addr;
        EXPECT_EQ(err, std::string("workspaced: invalid value '") + addr +
                           "' for --listen: not HOST:PORT with a port in 0..65535, or unix:PATH\n");
    }
    st =
        wstest::RunServerToExit({"--state-dir", "/nonexistent", "--work-fs-threads", "1000"}, &err);
    EXPECT_TRUE(Exited2(st));
    EXPECT_EQ(err, "workspaced: invalid value '1000' for --work-fs-threads: not a number in 0..256 "
                   "(0: inline, on the RPC threads)\n");
    st = wstest::RunServerToExit({"--state-dir", "/nonexistent", "--work-tenant-queued", "-4"},
                                 &err);
    EXPECT_TRUE(Exited2(st));
    EXPECT_EQ(err, "workspaced: invalid value '-4' for --work-tenant-queued: not a number in "
                   "0..100000 (0: the default)\n");
    st = wstest::RunServerToExit({"--state-dir", "/nonexistent", "--providers", "podman"}, &err);
    EXPECT_TRUE(Exited2(st));
    EXPECT_EQ(err, "workspaced: invalid value 'podman' for --providers: not a comma-separated list "
                   "of memory, local-bash, local-sandbox, docker\n");

    // A flag can mend what the file breaks: the public listen address of
    // the file replaced by a unix socket ...
    std::string pub = WriteConf("[server]\nlisten = 0.0.0.0:7878\nstate-dir = /nonexistent\n");
    EXPECT_TRUE(Exited2(wstest::RunServerToExit({"--check-config", pub}, &err)));
    EXPECT_EQ(wstest::RunServerToExit(
                  {"--check-config", pub, "--listen", "unix:/nonexistent/ws.sock"}, &err),
              0)
        << err;
    // ... and the file's unauthenticated loopback address given tokens.
    std::string lo = WriteConf("[server]\nlisten = 127.0.0.1:7878\nstate-dir = /nonexistent\n");
    EXPECT_TRUE(Exited2(wstest::RunServerToExit({"--check-config", lo}, &err)));
    EXPECT_EQ(
        wstest::RunServerToExit({"--check-config", lo, "--tokens-file", "/nonexistent/t"}, &err), 0)
        << err;
    // And break what the file has right: the blame is the flag's.
    std::string tls = WriteConf("[server]\nstate-dir = /nonexistent\n[tls]\ncert = /a\nkey = /b\n");
    EXPECT_EQ(wstest::RunServerToExit({"--check-config", tls}, &err), 0) << err;
    st = wstest::RunServerToExit({"--check-config", tls, "--listen", "0.0.0.0:7878"}, &err);
    EXPECT_TRUE(Exited2(st));
    EXPECT_EQ(err, "workspaced: refusing to listen on '0.0.0.0:7878' without authentication: give "
                   "--tokens-file or --tls-client-ca (unix: sockets need none; --insecure-loopback "
                   "covers loopback addresses only)\n");
    // A loopback address is no exception any more.
    st = wstest::RunServerToExit({"--check-config", tls, "--listen", "127.0.0.1:0"}, &err);
    EXPECT_TRUE(Exited2(st));
    EXPECT_EQ(err, "workspaced: refusing to listen on '127.0.0.1:0' without authentication: any "
                   "local user or box sharing the host's network could reach it; give "
                   "--tokens-file or --tls-client-ca, listen on a unix: socket (the default), or "
                   "for development only, as a user other than root, --insecure-loopback\n");
    if (geteuid() == 0) {
        // The switch that allows it is the flag's fault as root, whatever
        // the address.
        for (const char *addr : {"127.0.0.1:0", "unix:/nonexistent/ws.sock"}) {
            st = wstest::RunServerToExit(
                {"--check-config", tls, "--listen", addr, "--insecure-loopback"}, &err);
            EXPECT_TRUE(Exited2(st)) << addr;
            EXPECT_EQ(err, "workspaced: refusing --insecure-loopback as root: every local user, "
                           "and every box that shares the host's network, could run commands as "
                           "root through it; run the server as an unprivileged user, or use a "
                           "unix: socket or --tokens-file\n")
                << addr;
        }
    }

    // The state directory is required, here or as a flag.
    std::string none = WriteConf("[server]\nthreads = 1\n");
    st = wstest::RunServerToExit({"--check-config", none}, &err);
    EXPECT_TRUE(Exited2(st));
    EXPECT_EQ(err, "config: " + none +
                       ": key \"server.state-dir\": required (here or as --state-dir)\n");
    EXPECT_EQ(wstest::RunServerToExit({"--check-config", none, "--state-dir", "/x"}, &err), 0)
        << err;

    // One configuration at most.
    st = wstest::RunServerToExit({"--config", none, "--check-config", none}, &err);
    EXPECT_TRUE(Exited2(st));
    EXPECT_EQ(err, "workspaced: one --config or --check-config at most\n");
}

TEST(ConfigTest, CheckConfigPrintsOneOkLineAndCreatesNothing)
{
    std::string state = wstest::MakeTempDir("ok") + "/state";
    std::string conf = WriteConf("[server]\nstate-dir = " + state + "\n");
    std::string out_path = wstest::MakeTempDir("out") + "/stdout";
    std::string cmd = std::string(kBinary) + " --check-config " + conf + " >" + out_path;
    int st = system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    EXPECT_EQ(wstest::ReadHostFile(out_path), "config: " + conf + ": ok\n");
    EXPECT_NE(access(state.c_str(), F_OK), 0);
}

TEST(ConfigTest, UnreadableFile)
{
    std::string missing = wstest::MakeTempDir("none") + "/nope.conf";
    std::string err;
    int st = wstest::RunServerToExit({"--check-config", missing}, &err);
    EXPECT_TRUE(Exited2(st));
    EXPECT_EQ(err, "config: " + missing + ": No such file or directory\n");
    std::string dir = wstest::MakeTempDir("dir");
    st = wstest::RunServerToExit({"--check-config", dir}, &err);
    EXPECT_TRUE(Exited2(st));
    EXPECT_EQ(err, "config: " + dir + ": not a regular file\n");
    // A FIFO would block a plain open until someone writes to it.
    std::string fifo = wstest::MakeTempDir("fifo") + "/conf";
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    st = wstest::RunServerToExit({"--check-config", fifo}, &err);
    EXPECT_TRUE(Exited2(st)) << "status " << st;
    EXPECT_EQ(err, "config: " + fifo + ": not a regular file\n");
    std::string big = WriteConf(std::string(1024 * 1024 + 1, '#'));
    st = wstest::RunServerToExit({"--check-config", big}, &err);
    EXPECT_TRUE(Exited2(st));
    EXPECT_EQ(err, "config: " + big + ": larger than 1048576 bytes\n");
    // Starting with it is refused the same way.
    st = wstest::RunServerToExit({"--config", missing, "--state-dir", "/nonexistent"}, &err);
    EXPECT_TRUE(Exited2(st));
    EXPECT_EQ(err, "config: " + missing + ": No such file or directory\n");
}

// Every flag the server has, from its --help.
std::set<std::string> HelpFlags()
{
    std::string out_path = wstest::MakeTempDir("help") + "/help";
    std::string cmd = std::string(kBinary) + " --help >" + out_path;
    EXPECT_EQ(system(cmd.c_str()), 0);
    std::string help = wstest::ReadHostFile(out_path);
    std::set<std::string> flags;
    // Every "--name" token: two dashes, then lowercase letters and dashes.
    for (size_t at = help.find("--"); at != std::string::npos; at = help.find("--", at + 2)) {
        size_t end = at + 2;
        while (end < help.size() && (islower((unsigned char)help[end]) || help[end] == '-'))
            end++;
        if (end > at + 2)
            flags.insert(help.substr(at, end - at));
    }
    return flags;
}

TEST(ConfigTest, ExampleFileValidatesAndNamesEveryFlag)
{
    std::string example = Runfile("server/deploy/workspaced.conf.example");
    std::string err;
    EXPECT_EQ(wstest::RunServerToExit({"--check-config", example}, &err), 0) << err;

    std::string text = wstest::ReadHostFile(example);
    std::set<std::string> flags = HelpFlags();
    EXPECT_GT(flags.size(), 25u);
    for (const auto &f : flags) {
        if (f == "--config" || f == "--check-config" || f == "--version")
            continue;
        // "Flag: --listen." or "Flags: --tls-cert, --tls-key."
        EXPECT_TRUE(text.find(f + ".") != std::string::npos ||
                    text.find(f + ",") != std::string::npos)
            << f << " is not documented in workspaced.conf.example";
    }
}

std::vector<std::string> Strings(const google::protobuf::RepeatedPtrField<std::string> &f)
{
    return std::vector<std::string>(f.begin(), f.end());
}

// Whether `line` is a commented-out setting, "# [section]" or
// "# key = value", rather than prose; the setting goes to *setting.
bool CommentedSetting(const std::string &line, std::string *setting)
{
    if (line.compare(0, 2, "# ") != 0)
        return false;
    std::string rest = line.substr(2);
    auto name_char = [](char c, bool dot) {
        return islower((unsigned char)c) || isdigit((unsigned char)c) || c == '-' ||
               (dot && (c == '.' || c == '_'));
    };
    size_t n = 0;
    if (rest.size() > 2 && rest[0] == '[' && rest.back() == ']') {
        for (n = 1; n + 1 < rest.size() && name_char(rest[n], true); n++)
            ;
        if (n + 1 != rest.size())
            return false;
    } else {
        while (n < rest.size() && name_char(rest[n], false))
            n++;
        if (n == 0 || rest.compare(n, 3, " = ") != 0 || rest.size() == n + 3)
            return false;
    }
    *setting = rest;
    return true;
}

// The example's [policy] values are the documented defaults, and the
// server started with the example holds them; its commented-out policy
// lines ([policy.TENANT], [peers], lists) validate once uncommented.
TEST(ConfigTest, ExamplePolicyValidatesAndIsInForce)
{
    const std::string example =
        wstest::ReadHostFile(Runfile("server/deploy/workspaced.conf.example"));
    size_t policy_at = example.find("\n[policy]\n");
    ASSERT_NE(policy_at, std::string::npos) << "the example has no [policy] section";

    {
        // The harness's state directory and unix socket replace the
        // example's, which belong to an installed server.
        wstest::Server srv({"--config", Runfile("server/deploy/workspaced.conf.example")});
        ListProvidersRequest req;
        ListProvidersResponse r;
        grpc::ClientContext ctx;
        ASSERT_TRUE(srv.providers()->ListProviders(&ctx, req, &r).ok());
        EXPECT_EQ(r.policy().tenant(), "default");
        EXPECT_EQ(Strings(r.policy().providers()),
                  (std::vector<std::string>{"memory", "local-sandbox", "docker"}));
        EXPECT_FALSE(r.policy().network());
        EXPECT_TRUE(r.policy().bind_roots().empty());
        EXPECT_TRUE(r.policy().pass_env().empty());
        EXPECT_FALSE(r.policy().commands_ceiling());
        EXPECT_EQ(Strings(r.policy().docker_images()), std::vector<std::string>{"*"});
        EXPECT_FALSE(r.policy().docker_pull());
        EXPECT_TRUE(r.policy().docker_users().empty());
        bool bash_listed = false;
        for (const auto &p : r.providers())
            if (p.kind() == "local-bash") {
                bash_listed = true;
                EXPECT_FALSE(p.available());
                EXPECT_EQ(p.reason(), "POLICY: not allowed for this tenant");
            }
        EXPECT_TRUE(bash_listed);
    }

    // Uncomment every "# key = value" and "# [section]" line from [policy]
    // on. Bind roots must be existing directories outside the host's own
    // ones: each example root is made under a fresh directory in /tmp and
    // the line points there.
    ShortDir roots;
    std::istringstream in(example.substr(policy_at + 1));
    std::string out = example.substr(0, policy_at + 1), line;
    int uncommented = 0, bind_lines = 0;
    while (std::getline(in, line)) {
        if (CommentedSetting(line, &line)) {
            uncommented++;
            if (line.compare(0, 13, "bind-roots = ") == 0) {
                std::string list, item;
                std::istringstream items(line.substr(13));
                while (std::getline(items, item, ',')) {
                    item.erase(0, item.find_first_not_of(' '));
                    item.erase(item.find_last_not_of(' ') + 1);
                    std::string dir = roots.path + item;
                    std::string cmd = "mkdir -p '" + dir + "'";
                    EXPECT_EQ(system(cmd.c_str()), 0);
                    list += (list.empty() ? "" : ", ") + dir;
                }
                line = "bind-roots = " + list;
                bind_lines++;
            }
        }
        out += line + "\n";
    }
    // bind-roots and commands of [policy], the [policy.TENANT] header and
    // its three keys, [peers] and its line: a rewrite of the example's
    // comments must not make this check vacuous.
    EXPECT_GE(uncommented, 8) << out;
    EXPECT_GE(bind_lines, 1) << out;
    EXPECT_NE(out.find("\n[peers]\n"), std::string::npos) << out;
    EXPECT_NE(out.find("\n[policy."), std::string::npos) << out;
    std::string conf = WriteConf(out);
    std::string err;
    EXPECT_EQ(wstest::RunServerToExit({"--check-config", conf}, &err), 0) << err;
}

// The unit's Exec lines, without the "Exec...=" and with the program
// replaced by the built one and the installed configuration by the
// example.
std::vector<std::string> UnitCommand(const std::string &unit, const std::string &key)
{
    std::istringstream in(unit);
    std::string line;
    while (std::getline(in, line)) {
        if (line.compare(0, key.size() + 1, key + "=") != 0)
            continue;
        std::istringstream words(line.substr(key.size() + 1));
        std::vector<std::string> argv;
        std::string w;
        while (words >> w)
            argv.push_back(w == "/etc/workspaced/workspaced.conf"
                               ? Runfile("server/deploy/workspaced.conf.example")
                               : w);
        return argv;
    }
    return {};
}

TEST(ConfigTest, UnitAndContainerfileUseValidFlags)
{
    std::string unit = wstest::ReadHostFile(Runfile("server/deploy/workspaced.service"));
    std::string err;

    std::vector<std::string> pre = UnitCommand(unit, "ExecStartPre");
    ASSERT_GE(pre.size(), 3u);
    EXPECT_EQ(pre[0], "/usr/local/lib/workspaced/workspaced");
    EXPECT_EQ(pre[1], "--check-config");
    EXPECT_EQ(wstest::RunServerToExit(std::vector<std::string>(pre.begin() + 1, pre.end()), &err),
              0)
        << err;

    // ExecStart's arguments, checked instead of run.
    std::vector<std::string> start = UnitCommand(unit, "ExecStart");
    ASSERT_GE(start.size(), 3u);
    EXPECT_EQ(start[0], pre[0]);
    std::vector<std::string> args(start.begin() + 1, start.end());
    bool had_config = false;
    for (auto &a : args)
        if (a == "--config") {
            a = "--check-config";
            had_config = true;
        }
    EXPECT_TRUE(had_config);
    EXPECT_EQ(wstest::RunServerToExit(args, &err), 0) << err;

    // SIGHUP re-reads the tokens file; the state directory systemd makes is
    // the one the example configures and the only one written.
    EXPECT_NE(unit.find("\nExecReload=/bin/kill -HUP $MAINPID\n"), std::string::npos);
    EXPECT_NE(unit.find("\nStateDirectory=workspaced\n"), std::string::npos);
    EXPECT_NE(unit.find("\nReadWritePaths=/var/lib/workspaced\n"), std::string::npos);
    EXPECT_NE(wstest::ReadHostFile(Runfile("server/deploy/workspaced.conf.example"))
                  .find("\nstate-dir = /var/lib/workspaced\n"),
              std::string::npos);

    // The container's ENTRYPOINT, and the example line its recipe rewrites.
    std::string cf = wstest::ReadHostFile(Runfile("server/deploy/Containerfile"));
    size_t at = cf.find("\nENTRYPOINT [");
    ASSERT_NE(at, std::string::npos);
    std::string list = cf.substr(at + 13, cf.find(']', at) - (at + 13));
    std::vector<std::string> entry;
    for (size_t q = list.find('"'); q != std::string::npos; q = list.find('"', q + 1)) {
        size_t close = list.find('"', q + 1);
        if (close == std::string::npos)
            break;
        entry.push_back(list.substr(q + 1, close - q - 1));
        q = close;
    }
    ASSERT_EQ(entry.size(), 3u);
    EXPECT_EQ(entry[0], "/usr/local/lib/workspaced/workspaced");
    EXPECT_EQ(entry[1], "--config");
    EXPECT_EQ(entry[2], "/etc/workspaced/workspaced.conf");
    EXPECT_NE(wstest::ReadHostFile(Runfile("server/deploy/workspaced.conf.example"))
                  .find("\nlisten = unix:/run/workspaced/workspaced.sock\n"),
              std::string::npos);

    // systemd's own verdict. bazel/setup.sh installs it: without it the
    // unit file would go unchecked on one machine and checked on the next.
    if (access("/usr/bin/systemd-analyze", X_OK) != 0) {
        ADD_FAILURE() << "/usr/bin/systemd-analyze is missing (Debian package systemd, which "
                         "bazel/setup.sh installs): the unit file cannot be verified";
    } else {
        std::string dir = wstest::MakeTempDir("unit");
        std::string copy = dir + "/workspaced.service";
        wstest::WriteHostFile(copy, unit);
        std::string out = dir + "/out";
        std::string cmd = "/usr/bin/systemd-analyze verify --man=no " + copy + " >" + out + " 2>&1";
        int st = system(cmd.c_str());
        std::string said = wstest::ReadHostFile(out);
        // The binary is not installed here: that is the only complaint
        // allowed.
        std::istringstream lines(said);
        std::string l;
        while (std::getline(lines, l)) {
            if (l.empty() || l.find("/usr/local/lib/workspaced/workspaced") != std::string::npos ||
                l.find("Failed to prepare filename") != std::string::npos ||
                l.find("not executable") != std::string::npos)
                continue;
            ADD_FAILURE() << "systemd-analyze verify: " << l << " (exit " << st << ")";
        }
    }
}

} // namespace
