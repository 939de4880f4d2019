// Several workspaced nodes on a private network, as an operator runs them
// behind a mesh: each node is the real server in a network namespace of
// its own (with its own state directory, so its own refs key), the test is
// the client in another namespace, and a bridge in a router namespace
// links them. Everything crosses a real (virtual) network over TLS with
// bearer tokens. The suite shows what holds across nodes: authentication,
// tenant isolation on every node, refs bound to the node that signed them
// (and what a shared key changes), a node SIGKILLed mid-command leaving no
// survivors while the others keep serving, the drain on SIGTERM as a load
// balancer's health check sees it, a stopped node's state directory
// serving its workspaces from another address, and the nodes behind a real
// nginx running server/deploy/nginx.conf itself (the nodes sit at the
// file's addresses; only its certificate and runtime paths are replaced):
// routing by `x-workspace-node`, and a draining or killed node.
//
// main() builds the network before any thread exists, then moves the
// process into the client namespace, so every socket gRPC opens later is
// the client's. The network is always torn down: at the end, by a guardian
// process if the test dies, and by the next run (leftovers whose run is
// gone) if both die. Failing to build it fails the test, with the reason.
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "tests/deploy/netns.h"
#include "tests/deploy/node.h"
#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using namespace workspace::v1;
using wsdeploy::Node;
using wstest::ArgvProcess;
using wstest::EventLog;

namespace
{

const char kAlice[] = "tok-alice-multinode-0123456789";
const char kBob[] = "tok-bob-multinode-9876543210";
const char kPort[] = "7443";
const char kFrontPort[] = "8443";
const char kNodeHeader[] = "x-workspace-node";

wsdeploy::Network *g_net = nullptr;

bool Sanitized()
{
    const char *s = getenv("WORKSPACED_SANITIZED");
    return s && *s && strcmp(s, "0") != 0;
}

// Waits scaled for the sanitizer build, which runs everything a few times
// slower.
int Ms(int ms)
{
    return Sanitized() ? ms * 3 : ms;
}

std::chrono::system_clock::time_point In(int seconds)
{
    return std::chrono::system_clock::now() +
           std::chrono::seconds(Sanitized() ? seconds * 3 : seconds);
}

int Sh(const std::string &dir, const std::string &cmd)
{
    int st = std::system(("cd '" + dir + "' && " + cmd + " >/dev/null 2>&1").c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// ---- the nodes and their credentials ----

// The credentials are the suite's; the nodes and the front are each
// test's own (see Multinode::SetUp).
struct Cluster {
    std::string pki;
    std::string ca_pem;
    std::string tokens;
    std::unique_ptr<Node> node1, node2, node3;
    pid_t front = -1; // nginx, in this (the client's) namespace
    std::string front_dir;
};

Cluster *g_cluster = nullptr;
bool g_pki_ready = false; // the suite's credentials were made

// A CA and one server certificate naming every node's address.
std::string MakePki(const std::string &dir)
{
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    if (Sh(dir, "command -v openssl") != 0)
        return "openssl is not installed (the test's certificates are made with it)";
    std::string san = "subjectAltName=DNS:workspaced";
    for (const char *h : {"node1", "node2", "node3"})
        san += ",IP:" + g_net->host(h).address;
    wstest::WriteHostFile(dir + "/server.ext", san + "\n");
    wstest::WriteHostFile(dir + "/front.ext",
                          "subjectAltName=DNS:front,IP:" + g_net->host("client").address + "\n");
    if (Sh(dir, "openssl req -x509 " + ec + " -keyout ca.key -out ca.pem -subj /CN=ca -days 2") !=
            0 ||
        Sh(dir, "openssl req " + ec + " -keyout server.key -out server.csr -subj /CN=workspaced") !=
            0 ||
        Sh(dir, "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
                "-days 2 -out server.pem -extfile server.ext") != 0 ||
        Sh(dir, "openssl req " + ec + " -keyout front.key -out front.csr -subj /CN=front") != 0 ||
        Sh(dir, "openssl x509 -req -in front.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
                "-days 2 -out front.pem -extfile front.ext") != 0 ||
        Sh(dir, "{ cat front.pem front.key > front-with-key.pem; }") != 0)
        return "openssl failed";
    return "";
}

std::unique_ptr<Node> MakeNode(const std::string &host, const std::string &state,
                               std::vector<std::string> extra = {})
{
    const Cluster &c = *g_cluster;
    std::vector<std::string> args = {"--tokens-file", c.tokens, "--tls-cert", c.pki + "/server.pem",
                                     "--tls-key", c.pki + "/server.key", "--drain-grace-ms",
                                     "60000",
                                     // The workflow runs commands on the host: the operator
                                     // allows local-bash (off by default).
                                     "--policy-providers", "memory,local-bash,local-sandbox"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<Node>(host, g_net->host(host).name,
                                  g_net->host(host).address + ":" + kPort, state, args);
}

// A channel to `node` over TLS (checked against the test's CA) sending
// `token` as "authorization: Bearer TOKEN" ("" sends none).
std::shared_ptr<grpc::Channel> Dial(const Node &node, const std::string &token)
{
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = g_cluster->ca_pem;
    std::shared_ptr<grpc::ChannelCredentials> creds = grpc::SslCredentials(o);
    if (!token.empty())
        creds = grpc::CompositeChannelCredentials(creds, grpc::AccessTokenCredentials(token));
    grpc::ChannelArguments args;
    // A channel of its own per call site: a connection shared with a node
    // killed earlier would fail the first call.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(node.target(), creds, args);
}

// The same node in plaintext, the token sent by hand.
std::shared_ptr<grpc::Channel> DialPlaintext(const Node &node)
{
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(node.target(), grpc::InsecureChannelCredentials(), args);
}

// What Node::Drain and Node::CleanExit say, as an assertion: "" is a clean
// exit, anything else how the node ended and its stderr, shown as it is.
::testing::AssertionResult Clean(const std::string &why)
{
    if (why.empty())
        return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << why;
}

// ---- the nginx front ----

const std::vector<std::string> kAllowed = {"sh", "sleep", "setsid", "cat", "echo", "wc"};

// server/deploy/nginx.conf with the operator's placeholders replaced: the
// certificate paths and nginx's runtime directory. The node addresses are
// the file's own (the test network is 10.0.0.0/24).
std::string FrontConfig(std::string *ret_why)
{
    std::string cfg = wstest::ReadHostFile("server/deploy/nginx.conf");
    const Cluster &c = *g_cluster;
    const std::vector<std::pair<std::string, std::string>> subst = {
        {"/etc/workspaced/front/front.pem", c.pki + "/front.pem"},
        {"/etc/workspaced/front/front.key", c.pki + "/front.key"},
        {"/etc/workspaced/front/nodes-ca.pem", c.pki + "/ca.pem"},
        {"/run/workspaced-front/", c.front_dir + "/"},
    };
    for (const auto &sub : subst) {
        size_t n = 0;
        for (size_t at = cfg.find(sub.first); at != std::string::npos;
             at = cfg.find(sub.first, at + sub.second.size())) {
            cfg.replace(at, sub.first.size(), sub.second);
            n++;
        }
        if (n == 0) {
            *ret_why = "nginx.conf no longer names " + sub.first;
            return "";
        }
    }
    for (const char *h : {"node1", "node2", "node3"}) {
        std::string want = "server " + g_net->host(h).address + ":" + kPort;
        if (cfg.find(want) == std::string::npos) {
            *ret_why = "nginx.conf has no '" + want + "'";
            return "";
        }
    }
    return cfg;
}

// Whether address:port accepts TCP connections (from the client's
// namespace).
bool Accepts(const std::string &address, const char *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(atoi(port)));
    inet_pton(AF_INET, address.c_str(), &sa.sin_addr);
    bool ok = connect(fd, reinterpret_cast<struct sockaddr *>(&sa), sizeof(sa)) == 0;
    close(fd);
    return ok;
}

bool FrontListening()
{
    return Accepts(g_net->host("client").address, kFrontPort);
}

// Starts nginx on the file in this process's (the client's) namespace, in
// the foreground as one process, and waits until it listens. It dies with
// the test (PDEATHSIG) and with the client namespace (the guardian). ""
// or why not.
std::string StartFront()
{
    Cluster &c = *g_cluster;
    c.front_dir = wstest::MakeTempDir("front");
    std::string why;
    std::string cfg = FrontConfig(&why);
    if (!why.empty())
        return why;
    const std::string cfg_path = c.front_dir + "/nginx.conf";
    wstest::WriteHostFile(cfg_path, cfg);
    const std::string err_path = c.front_dir + "/stderr";
    const std::string nginx = "/usr/sbin/nginx";
    if (access(nginx.c_str(), X_OK) != 0)
        return nginx + " is missing (the front is nginx): " + strerror(errno);
    std::string check_out;
    if (wsdeploy::RunCommand({nginx, "-t", "-q", "-e", "stderr", "-c", cfg_path}, &check_out) != 0)
        return "nginx -t refuses the configuration: " + check_out;
    int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (err_fd < 0)
        return "cannot open " + err_path;
    std::vector<std::string> argv = {
        nginx, "-e", "stderr", "-c", cfg_path, "-g", "daemon off; master_process off;"};
    std::vector<char *> cargv;
    for (auto &a : argv)
        cargv.push_back(a.data());
    cargv.push_back(nullptr);
    char *cenv[] = {nullptr};
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(126);
        dup2(err_fd, 1);
        dup2(err_fd, 2);
        execve(cargv[0], cargv.data(), cenv);
        _exit(127);
    }
    close(err_fd);
    if (pid < 0)
        return "fork failed";
    c.front = pid;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(Sanitized() ? 90 : 30);
    while (std::chrono::steady_clock::now() < deadline) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            c.front = -1;
            return "nginx exited: " + wstest::ReadHostFile(err_path);
        }
        if (FrontListening())
            return "";
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return "nginx did not listen: " + wstest::ReadHostFile(err_path);
}

void StopFront()
{
    Cluster &c = *g_cluster;
    if (c.front <= 0)
        return;
    kill(c.front, SIGTERM);
    int st;
    while (waitpid(c.front, &st, 0) < 0 && errno == EINTR)
        ;
    c.front = -1;
}

// Adds `x-workspace-node: NODE` to every call of a channel.
class NodePin : public grpc::MetadataCredentialsPlugin
{
  public:
    explicit NodePin(std::string node) : node_(std::move(node))
    {
    }
    bool IsBlocking() const override
    {
        return false;
    }
    grpc::Status GetMetadata(grpc::string_ref, grpc::string_ref, const grpc::AuthContext &,
                             std::multimap<grpc::string, grpc::string> *md) override
    {
        md->insert({kNodeHeader, node_});
        return grpc::Status::OK;
    }

  private:
    std::string node_;
};

// A channel to the front over TLS with `token`, pinned to `node` ("": not
// pinned).
std::shared_ptr<grpc::Channel> DialFront(const std::string &token, const std::string &node = "")
{
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = g_cluster->ca_pem;
    std::shared_ptr<grpc::ChannelCredentials> creds = grpc::SslCredentials(o);
    std::shared_ptr<grpc::CallCredentials> call = grpc::AccessTokenCredentials(token);
    if (!node.empty())
        call = grpc::CompositeCallCredentials(
            call, grpc::MetadataCredentialsFromPlugin(std::make_unique<NodePin>(node)));
    creds = grpc::CompositeChannelCredentials(creds, call);
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(g_net->host("client").address + ":" + kFrontPort, creds, args);
}

// Open through the front; the node the response names in *ret_node.
grpc::Status OpenViaFront(const std::shared_ptr<grpc::Channel> &ch, wstest::Ws *ret,
                          std::string *ret_node)
{
    OpenRequest req;
    req.mutable_local_bash();
    req.mutable_capabilities()->mutable_fs();
    for (const auto &cmd : kAllowed)
        req.mutable_capabilities()->mutable_shell()->add_allowed_commands(cmd);
    OpenResponse resp;
    ClientContext ctx;
    ctx.set_deadline(In(60));
    grpc::Status s = Workspaces::NewStub(ch)->Open(&ctx, req, &resp);
    if (!s.ok())
        return s;
    *ret = wstest::Ws{resp.workspace().id(), resp.workspace().ref().token()};
    ret_node->clear();
    auto md = ctx.GetServerInitialMetadata();
    auto it = md.find(kNodeHeader);
    if (it != md.end())
        ret_node->assign(it->second.data(), it->second.size());
    return s;
}

// ---- calls ----

grpc::Status OpenWs(const std::shared_ptr<grpc::Channel> &ch, const std::string &provider,
                    wstest::Ws *ret)
{
    OpenRequest req;
    if (provider == "local-sandbox")
        req.mutable_local_sandbox();
    else
        req.mutable_local_bash();
    req.mutable_capabilities()->mutable_fs();
    for (const auto &c : kAllowed)
        req.mutable_capabilities()->mutable_shell()->add_allowed_commands(c);
    OpenResponse resp;
    ClientContext ctx;
    ctx.set_deadline(In(60));
    grpc::Status s = Workspaces::NewStub(ch)->Open(&ctx, req, &resp);
    if (s.ok())
        *ret = wstest::Ws{resp.workspace().id(), resp.workspace().ref().token()};
    return s;
}

grpc::Status Describe(const std::shared_ptr<grpc::Channel> &ch, const std::string &id)
{
    ClientContext ctx;
    ctx.set_deadline(In(30));
    DescribeRequest r;
    r.set_workspace_id(id);
    DescribeResponse o;
    return Workspaces::NewStub(ch)->Describe(&ctx, r, &o);
}

grpc::Status Resolve(const std::shared_ptr<grpc::Channel> &ch, const std::string &token,
                     std::string *ret_id = nullptr)
{
    ClientContext ctx;
    ctx.set_deadline(In(30));
    ResolveRequest r;
    r.mutable_ref()->set_token(token);
    ResolveResponse o;
    grpc::Status s = Workspaces::NewStub(ch)->Resolve(&ctx, r, &o);
    if (ret_id)
        *ret_id = o.workspace().id();
    return s;
}

grpc::Status ListProviders(const std::shared_ptr<grpc::Channel> &ch)
{
    ClientContext ctx;
    ctx.set_deadline(In(30));
    ListProvidersResponse o;
    return Providers::NewStub(ch)->ListProviders(&ctx, ListProvidersRequest(), &o);
}

grpc::Status Check(const std::shared_ptr<grpc::Channel> &ch, HealthCheckResponse *ret)
{
    ClientContext ctx;
    ctx.set_deadline(In(10));
    return Health::NewStub(ch)->Check(&ctx, HealthCheckRequest(), ret);
}

::testing::AssertionResult Serving(const std::shared_ptr<grpc::Channel> &ch)
{
    HealthCheckResponse r;
    grpc::Status s = Check(ch, &r);
    if (s.ok() && r.status() == HealthCheckResponse::SERVING)
        return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "health: code " << s.error_code() << " '"
                                         << s.error_message() << "' status " << r.status();
}

// A `cat` with stdin open on a Start stream: a call that stays in flight
// until the client ends it, and answers every line it is sent.
struct Echo {
    ClientContext ctx;
    std::unique_ptr<wstest::StartStreamRW> rw;
    EventLog log;

    grpc::Status Begin(Exec::Stub *exec, const std::string &id)
    {
        ctx.set_deadline(In(300));
        ProcessConfig p = ArgvProcess({"cat"});
        p.set_stdin(true);
        rw = wstest::StartStream(exec, &ctx, id, p);
        if (!wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) { return l.started; }))
            return rw->Finish();
        return grpc::Status::OK;
    }
    // Sends `line` and waits for cat to repeat it; whether it did.
    bool RoundTrip(const std::string &line)
    {
        StartRequest in;
        in.set_stdin(line);
        if (!rw->Write(in))
            return false;
        size_t want = log.out.data.size() + line.size();
        wstest::ReadEvents(rw.get(), &log,
                           [&](const EventLog &l) { return l.out.data.size() >= want; });
        return log.out.data.size() >= want &&
               log.out.data.compare(log.out.data.size() - line.size(), line.size(), line) == 0;
    }
    // Closes stdin: cat exits 0 and the call ends OK.
    grpc::Status End()
    {
        StartRequest in;
        in.set_close_stdin(true);
        rw->Write(in);
        rw->WritesDone();
        wstest::ReadEvents(rw.get(), &log);
        return rw->Finish();
    }
};

// Each test has three nodes on fresh state directories and an nginx front
// of its own, whatever an earlier test did to its nodes (killed, drained,
// moved) or to its front (nodes it saw fail): the tests run in any order
// and alone. Every node still running at the end drains and must exit 0.
class Multinode : public ::testing::Test
{
  protected:
    static void SetUpTestSuite()
    {
        g_cluster = new Cluster;
        Cluster &c = *g_cluster;
        c.pki = wstest::MakeTempDir("pki");
        std::string why = MakePki(c.pki);
        ASSERT_EQ(why, "");
        c.ca_pem = wstest::ReadHostFile(c.pki + "/ca.pem");
        c.tokens = c.pki + "/tokens";
        wstest::WriteHostFile(c.tokens, "alice " + wstest::Sha256Hex(kAlice) + "\nbob " +
                                            wstest::Sha256Hex(kBob) + "\n");
        g_pki_ready = true;
    }

    static void TearDownTestSuite()
    {
        delete g_cluster;
        g_cluster = nullptr;
        g_pki_ready = false;
    }

    void SetUp() override
    {
        ASSERT_TRUE(g_pki_ready) << "the suite's certificates were not made (see its set-up)";
        Cluster &c = *g_cluster;
        // node1 and node2 each make their own refs key; node3 starts with
        // a copy of node1's (same bytes, mode 0600), as an operator shares
        // it.
        c.node1 = MakeNode("node1", wstest::MakeTempDir("state1"));
        ASSERT_EQ(c.node1->Start(), "");
        c.node2 = MakeNode("node2", wstest::MakeTempDir("state2"));
        ASSERT_EQ(c.node2->Start(), "");
        std::string state3 = wstest::MakeTempDir("state3");
        std::string key = wstest::ReadHostFile(c.node1->state_dir() + "/ref.key");
        ASSERT_EQ(key.size(), 32u) << "the refs key is not where the README says";
        int fd = open((state3 + "/ref.key").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(write(fd, key.data(), key.size()), static_cast<ssize_t>(key.size()));
        close(fd);
        c.node3 = MakeNode("node3", state3);
        ASSERT_EQ(c.node3->Start(), "");
        std::string why_front = StartFront();
        ASSERT_EQ(why_front, "");
    }

    void TearDown() override
    {
        if (!g_cluster)
            return;
        StopFront();
        // Every node still up drains and exits cleanly: under the
        // sanitizer build this is where leaks and shutdown crashes show.
        // One a test killed on purpose is no longer running.
        for (auto *n : {&g_cluster->node1, &g_cluster->node2, &g_cluster->node3}) {
            if (*n && (*n)->Alive()) {
                EXPECT_TRUE(Clean((*n)->Drain(Ms(60000))));
            }
            n->reset();
        }
    }

    Node &N1()
    {
        return *g_cluster->node1;
    }
    Node &N2()
    {
        return *g_cluster->node2;
    }
    Node &N3()
    {
        return *g_cluster->node3;
    }
};

// ---- 1. across the network: TLS, tokens, the whole workflow on each node ----

TEST_F(Multinode, EachNodeServesOpenWriteExecReadOverTlsWithTokens)
{
    for (Node *n : {&N1(), &N2(), &N3()}) {
        SCOPED_TRACE(n->label());
        auto ch = Dial(*n, kAlice);
        wstest::Ws ws;
        grpc::Status s = OpenWs(ch, "local-sandbox", &ws);
        ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
        auto fs = FileSystem::NewStub(ch);
        const std::string text = "written on " + n->label() + "\nsecond line\n";
        ASSERT_TRUE(wstest::Write(fs.get(), ws.id, "notes/hello.txt", text, nullptr, true).ok());
        RunResponse r;
        s = wstest::RunProcess(Exec::NewStub(ch).get(), ws.id,
                               ArgvProcess({"sh", "-c",
                                            "cat notes/hello.txt; wc -l < notes/hello.txt "
                                            "> notes/count.txt"}),
                               &r, "", Ms(60000) / 1000);
        ASSERT_TRUE(s.ok()) << s.error_message();
        EXPECT_EQ(r.exited().cause(), EXIT_CAUSE_EXITED) << r.stderr();
        EXPECT_EQ(r.exited().exit_code(), 0) << r.stderr();
        EXPECT_EQ(r.stdout(), text);
        std::string back;
        ASSERT_TRUE(wstest::Read(fs.get(), ws.id, "notes/count.txt", &back).ok());
        EXPECT_EQ(back, "2\n");
        // The workspace lives on this node: its directory is in this
        // node's state directory and nowhere else.
        for (Node *other : {&N1(), &N2(), &N3()}) {
            struct stat st;
            bool here = stat((other->state_dir() + "/workspaces/" + ws.id).c_str(), &st) == 0;
            EXPECT_EQ(here, other == n) << other->label();
        }
        EXPECT_TRUE(Serving(ch));
    }
}

TEST_F(Multinode, AMissingOrWrongTokenIsUnauthenticatedOnEveryNode)
{
    for (Node *n : {&N1(), &N2(), &N3()}) {
        SCOPED_TRACE(n->label());
        for (const char *token : {"", "tok-mallory", "tok-alice-multinode-012345678"}) {
            auto ch = Dial(*n, token);
            grpc::Status s = ListProviders(ch);
            EXPECT_EQ(s.error_code(), StatusCode::UNAUTHENTICATED) << "'" << token << "'";
            EXPECT_EQ(s.error_message(), "unauthenticated");
            EXPECT_TRUE(s.error_details().empty());
            wstest::Ws ws;
            EXPECT_EQ(OpenWs(ch, "local-bash", &ws).error_code(), StatusCode::UNAUTHENTICATED);
            // The health service too: a load balancer's checks need a token.
            HealthCheckResponse h;
            EXPECT_EQ(Check(ch, &h).error_code(), StatusCode::UNAUTHENTICATED);
        }
        EXPECT_TRUE(ListProviders(Dial(*n, kBob)).ok());
    }
}

TEST_F(Multinode, PlaintextToATlsNodeDoesNotGetThrough)
{
    for (Node *n : {&N1(), &N2(), &N3()}) {
        SCOPED_TRACE(n->label());
        ClientContext ctx;
        ctx.set_deadline(In(10));
        ctx.AddMetadata("authorization", std::string("Bearer ") + kAlice);
        ListProvidersResponse o;
        grpc::Status s =
            Providers::NewStub(DialPlaintext(*n))->ListProviders(&ctx, ListProvidersRequest(), &o);
        EXPECT_EQ(s.error_code(), StatusCode::UNAVAILABLE) << s.error_message();
    }
}

// ---- 2. tenants and refs across nodes ----

TEST_F(Multinode, AnotherTenantReachesNoWorkspaceOnAnyNode)
{
    auto alice1 = Dial(N1(), kAlice);
    wstest::Ws a;
    ASSERT_TRUE(OpenWs(alice1, "local-bash", &a).ok());
    ASSERT_TRUE(
        wstest::Write(FileSystem::NewStub(alice1).get(), a.id, "secret.txt", "alice's").ok());

    for (Node *n : {&N1(), &N2(), &N3()}) {
        SCOPED_TRACE(n->label());
        auto bob = Dial(*n, kBob);
        EXPECT_WS_ERROR(Describe(bob, a.id), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        std::string out;
        EXPECT_WS_ERROR(wstest::Read(FileSystem::NewStub(bob).get(), a.id, "secret.txt", &out),
                        StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        EXPECT_EQ(out, "");
        EXPECT_WS_ERROR(wstest::Write(FileSystem::NewStub(bob).get(), a.id, "secret.txt", "bob"),
                        StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        RunResponse r;
        EXPECT_WS_ERROR(wstest::RunProcess(Exec::NewStub(bob).get(), a.id,
                                           ArgvProcess({"cat", "secret.txt"}), &r),
                        StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        ClientContext c;
        CloseRequest cr;
        cr.set_workspace_id(a.id);
        CloseResponse co;
        EXPECT_WS_ERROR(Workspaces::NewStub(bob)->Close(&c, cr, &co), StatusCode::NOT_FOUND,
                        "NO_SUCH_WORKSPACE");
        ClientContext lc;
        ListResponse l;
        ASSERT_TRUE(Workspaces::NewStub(bob)->List(&lc, ListRequest(), &l).ok());
        for (const auto &w : l.workspaces())
            EXPECT_NE(w.id(), a.id);
    }
    // Alice's ref in bob's hands: on the node that signed it and on the
    // node sharing its key, the tenant inside the ref is not bob's, which
    // is answered like an unknown id; on node2 the ref does not verify at
    // all.
    EXPECT_WS_ERROR(Resolve(Dial(N1(), kBob), a.token), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    EXPECT_WS_ERROR(Resolve(Dial(N3(), kBob), a.token), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    EXPECT_WS_ERROR(Resolve(Dial(N2(), kBob), a.token), StatusCode::INVALID_ARGUMENT, "BAD_REF");

    // Nothing bob did reached it.
    std::string out;
    ASSERT_TRUE(wstest::Read(FileSystem::NewStub(alice1).get(), a.id, "secret.txt", &out).ok());
    EXPECT_EQ(out, "alice's");
}

TEST_F(Multinode, ARefIsGoodOnlyOnTheNodeThatHoldsItsWorkspace)
{
    auto alice1 = Dial(N1(), kAlice), alice2 = Dial(N2(), kAlice), alice3 = Dial(N3(), kAlice);
    wstest::Ws a1, a2;
    ASSERT_TRUE(OpenWs(alice1, "local-bash", &a1).ok());
    ASSERT_TRUE(OpenWs(alice2, "local-bash", &a2).ok());

    std::string id;
    ASSERT_TRUE(Resolve(alice1, a1.token, &id).ok());
    EXPECT_EQ(id, a1.id);
    // Another node, another key: the MAC does not verify, either way.
    EXPECT_WS_ERROR(Resolve(alice2, a1.token), StatusCode::INVALID_ARGUMENT, "BAD_REF");
    EXPECT_WS_ERROR(Resolve(alice1, a2.token), StatusCode::INVALID_ARGUMENT, "BAD_REF");
    // node3 shares node1's key: the ref verifies, but node3 has no such
    // workspace (workspaces are per node), so the client is told to open a
    // new one... or, knowing better, to go back to node1.
    EXPECT_WS_ERROR(Resolve(alice3, a1.token), StatusCode::NOT_FOUND, "WORKSPACE_EVICTED");
    EXPECT_WS_ERROR(Resolve(alice3, a2.token), StatusCode::INVALID_ARGUMENT, "BAD_REF");
    // The messages the README quotes.
    EXPECT_EQ(Resolve(alice2, a1.token).error_message(),
              "the ref does not verify (tampered, truncated or from another server)");
    EXPECT_EQ(Resolve(alice3, a1.token).error_message(), "the workspace no longer exists");
    // The id alone is unknown anywhere but home.
    EXPECT_WS_ERROR(Describe(alice2, a1.id), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    EXPECT_WS_ERROR(Describe(alice3, a1.id), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    EXPECT_TRUE(Describe(alice1, a1.id).ok());
}

// ---- 2b. behind the nginx front (server/deploy/nginx.conf) ----

TEST_F(Multinode, TheFrontNamesTheNodeOfEachOpenAndPinnedCallsReachIt)
{
    auto front = DialFront(kAlice);
    std::set<std::string> seen;
    wstest::Ws ws;
    std::string node;
    for (int i = 0; i < 9; i++) {
        wstest::Ws w;
        std::string n;
        grpc::Status s = OpenViaFront(front, &w, &n);
        ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
        ASSERT_TRUE(n == "node-1" || n == "node-2" || n == "node-3") << "'" << n << "'";
        // The node named is the one that holds the workspace.
        Node &holder = n == "node-1" ? N1() : n == "node-2" ? N2() : N3();
        struct stat st;
        EXPECT_EQ(stat((holder.state_dir() + "/workspaces/" + w.id).c_str(), &st), 0)
            << w.id << " is not on " << n;
        seen.insert(n);
        ws = w;
        node = n;
    }
    EXPECT_GE(seen.size(), 2u) << "every Open went to the same node";

    // Files, a command, an exec stream, Describe and Resolve, pinned, many
    // times over.
    auto pinned = DialFront(kAlice, node);
    auto fs = FileSystem::NewStub(pinned);
    auto exec = Exec::NewStub(pinned);
    Echo echo;
    ASSERT_TRUE(echo.Begin(exec.get(), ws.id).ok());
    for (int i = 0; i < 8; i++) {
        SCOPED_TRACE("round " + std::to_string(i));
        const std::string text = "round " + std::to_string(i) + " via the front\n";
        grpc::Status s = wstest::Write(fs.get(), ws.id, "front.txt", text);
        ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
        std::string back;
        ASSERT_TRUE(wstest::Read(fs.get(), ws.id, "front.txt", &back).ok());
        EXPECT_EQ(back, text);
        RunResponse r;
        s = wstest::RunProcess(exec.get(), ws.id, ArgvProcess({"cat", "front.txt"}), &r, "",
                               Ms(60000) / 1000);
        ASSERT_TRUE(s.ok()) << s.error_message();
        EXPECT_EQ(r.stdout(), text);
        EXPECT_TRUE(echo.RoundTrip("line " + std::to_string(i) + "\n"));
        EXPECT_TRUE(Describe(pinned, ws.id).ok());
        std::string id;
        EXPECT_TRUE(Resolve(pinned, ws.token, &id).ok());
        EXPECT_EQ(id, ws.id);
    }
    grpc::Status es = echo.End();
    EXPECT_TRUE(es.ok()) << es.error_code() << " " << es.error_message();
    EXPECT_TRUE(echo.log.exited);

    // Unpinned, a call about the workspace lands on a node that never
    // heard of it.
    int not_found = 0;
    for (int i = 0; i < 9; i++) {
        grpc::Status s = Describe(front, ws.id);
        if (!s.ok()) {
            EXPECT_WS_ERROR(s, StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
            not_found++;
        }
    }
    EXPECT_GE(not_found, 1) << "every unpinned call reached " << node;

    // A node that is not behind the front.
    grpc::Status nine = Describe(DialFront(kAlice, "node-9"), ws.id);
    EXPECT_EQ(nine.error_code(), StatusCode::UNAVAILABLE) << nine.error_message();
    EXPECT_EQ(nine.error_message(), "no such node behind this front");

    // The front authenticates nobody: the node refuses a stranger.
    wstest::Ws none;
    std::string n;
    EXPECT_EQ(OpenViaFront(DialFront("tok-mallory"), &none, &n).error_code(),
              StatusCode::UNAUTHENTICATED);
    EXPECT_WS_ERROR(Describe(DialFront(kBob, node), ws.id), StatusCode::NOT_FOUND,
                    "NO_SUCH_WORKSPACE");

    ClientContext cc;
    cc.set_deadline(In(30));
    CloseRequest cr;
    cr.set_workspace_id(ws.id);
    CloseResponse co;
    grpc::Status cs = Workspaces::NewStub(pinned)->Close(&cc, cr, &co);
    EXPECT_TRUE(cs.ok()) << cs.error_message();
    EXPECT_WS_ERROR(Describe(pinned, ws.id), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
}

// ---- 3. a node dies mid-command ----

TEST_F(Multinode, ANodeKilledMidCommandLeavesNoSurvivorsAndTheOthersKeepServing)
{
    ASSERT_TRUE(N2().Alive()) << "node2 is not running";
    auto alice1 = Dial(N1(), kAlice), alice2 = Dial(N2(), kAlice);

    // A call in flight on node1 across node2's death.
    wstest::Ws w1;
    ASSERT_TRUE(OpenWs(alice1, "local-bash", &w1).ok());
    auto exec1 = Exec::NewStub(alice1);
    Echo echo;
    ASSERT_TRUE(echo.Begin(exec1.get(), w1.id).ok());
    ASSERT_TRUE(echo.RoundTrip("before\n"));

    // On node2, a sandboxed tree of sleeps (one escaping with setsid)
    // marked with a token unique to this run.
    wstest::Ws w2;
    grpc::Status s = OpenWs(alice2, "local-sandbox", &w2);
    ASSERT_TRUE(s.ok()) << s.error_message();
    const std::string marker = wstest::UniqueSleep();
    char *real = realpath(N2().state_dir().c_str(), nullptr);
    ASSERT_NE(real, nullptr);
    const std::string ws_dir = std::string(real) + "/workspaces/" + w2.id;
    free(real);
    auto exec2 = Exec::NewStub(alice2);
    ClientContext ctx;
    ctx.set_deadline(In(120));
    auto rw = wstest::StartStream(exec2.get(), &ctx, w2.id,
                                  ArgvProcess({"sh", "-c", wstest::EscapingTree(marker)}));
    EventLog log;
    ASSERT_TRUE(wstest::ReadEvents(rw.get(), &log, [](const EventLog &l) { return l.started; }))
        << rw->Finish().error_message();
    EXPECT_GE(wstest::WaitProcsAtLeast(marker, 3, Ms(20000)), 3) << "the tree never ran";

    N2().Kill();

    // The stream ends UNAVAILABLE: the connection is gone, no status came.
    wstest::ReadEvents(rw.get(), &log);
    EXPECT_FALSE(log.exited);
    grpc::Status end = rw->Finish();
    EXPECT_EQ(end.error_code(), StatusCode::UNAVAILABLE) << end.error_message();
    // Nothing of the command is left: bubblewrap's --die-with-parent took
    // the sandbox down with the server.
    EXPECT_EQ(wstest::WaitProcsAtMost(marker, 0, Ms(10000)), 0) << "survivors of node2's death";
    EXPECT_EQ(wstest::WaitProcsAtMost(ws_dir, 0, Ms(10000)), 0)
        << "a bwrap or sandbox init outlived node2";
    // node2 answers nothing now.
    EXPECT_EQ(ListProviders(Dial(N2(), kAlice)).error_code(), StatusCode::UNAVAILABLE);

    // node1's call is still in flight and answering; node1 and node3 take
    // new work.
    EXPECT_TRUE(echo.RoundTrip("after\n"));
    grpc::Status es = echo.End();
    EXPECT_TRUE(es.ok()) << es.error_message();
    ASSERT_TRUE(echo.log.exited);
    EXPECT_EQ(echo.log.exit.cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(echo.log.out.data, "before\nafter\n");
    for (Node *n : {&N1(), &N3()}) {
        SCOPED_TRACE(n->label());
        auto ch = Dial(*n, kAlice);
        EXPECT_TRUE(Serving(ch));
        wstest::Ws w;
        ASSERT_TRUE(OpenWs(ch, "local-sandbox", &w).ok());
        RunResponse r;
        ASSERT_TRUE(
            wstest::RunProcess(Exec::NewStub(ch).get(), w.id, ArgvProcess({"echo", "alive"}), &r)
                .ok());
        EXPECT_EQ(r.stdout(), "alive\n");
    }
}

// ---- 4. draining on SIGTERM, and a state directory moving nodes ----

TEST_F(Multinode, HealthTurnsNotServingWhileANodeDrainsThenTheNodeExits)
{
    ASSERT_TRUE(N1().Alive()) << "node1 is not running";
    auto alice = Dial(N1(), kAlice);
    wstest::Ws w;
    ASSERT_TRUE(OpenWs(alice, "local-bash", &w).ok());
    ASSERT_TRUE(
        wstest::Write(FileSystem::NewStub(alice).get(), w.id, "kept.txt", "survives a move").ok());

    // A load balancer's view: a Watch on the health service.
    auto health = Health::NewStub(alice);
    ClientContext wctx;
    wctx.set_deadline(In(120));
    auto watch = health->Watch(&wctx, HealthCheckRequest());
    HealthCheckResponse hr;
    ASSERT_TRUE(watch->Read(&hr));
    EXPECT_EQ(hr.status(), HealthCheckResponse::SERVING);

    // The call that keeps the drain open.
    auto exec = Exec::NewStub(alice);
    Echo echo;
    ASSERT_TRUE(echo.Begin(exec.get(), w.id).ok());
    ASSERT_TRUE(echo.RoundTrip("before\n"));

    ASSERT_EQ(kill(N1().pid(), SIGTERM), 0);
    ASSERT_TRUE(watch->Read(&hr)) << "the Watch ended without a word";
    EXPECT_EQ(hr.status(), HealthCheckResponse::NOT_SERVING);
    EXPECT_FALSE(watch->Read(&hr)) << "the Watch went on after NOT_SERVING";
    grpc::Status ws = watch->Finish();
    EXPECT_TRUE(ws.ok()) << ws.error_code() << " " << ws.error_message();

    // A new check is not told SERVING: the port closes right after the
    // health service turns, so a fresh connection finds nobody listening
    // (or, inside that instant, is answered NOT_SERVING, or has its call
    // cancelled by the server that is shutting down: a connection accepted
    // just before the port closed).
    HealthCheckResponse fresh;
    grpc::Status cs = Check(Dial(N1(), kAlice), &fresh);
    EXPECT_TRUE((!cs.ok() && (cs.error_code() == StatusCode::UNAVAILABLE ||
                              cs.error_code() == StatusCode::CANCELLED)) ||
                (cs.ok() && fresh.status() == HealthCheckResponse::NOT_SERVING))
        << cs.error_code() << " " << cs.error_message() << " status " << fresh.status();

    // The in-flight call is still served, and holds the node up.
    EXPECT_TRUE(N1().Alive()) << "node1 did not wait for its in-flight call";
    EXPECT_TRUE(echo.RoundTrip("during the drain\n"));
    EXPECT_TRUE(N1().Alive());
    grpc::Status es = echo.End();
    EXPECT_TRUE(es.ok()) << es.error_message();
    ASSERT_TRUE(echo.log.exited);
    EXPECT_EQ(echo.log.exit.cause(), EXIT_CAUSE_EXITED);
    EXPECT_EQ(echo.log.out.data, "before\nduring the drain\n");

    // With the last call gone the drain ends well before its 60 s grace.
    int st = N1().WaitExit(Ms(45000));
    ASSERT_NE(st, -1) << "node1 still running after its last call ended: " << N1().Stderr();
    EXPECT_TRUE(Clean(N1().CleanExit(st)));

    // node1's state directory, served by a node at another address (in
    // node2's namespace; node2 is stopped first): the
    // workspace, its files and its ref carry over, because the records,
    // the directories and the key all moved together.
    EXPECT_TRUE(Clean(N2().Drain(Ms(60000))));
    auto moved = MakeNode("node2", N1().state_dir());
    ASSERT_EQ(moved->Start(), "");
    auto alice_moved = Dial(*moved, kAlice);
    std::string id;
    grpc::Status rs = Resolve(alice_moved, w.token, &id);
    ASSERT_TRUE(rs.ok()) << rs.error_code() << " " << rs.error_message();
    EXPECT_EQ(id, w.id);
    std::string out;
    ASSERT_TRUE(wstest::Read(FileSystem::NewStub(alice_moved).get(), w.id, "kept.txt", &out).ok());
    EXPECT_EQ(out, "survives a move");
    // Still bob's to never see.
    EXPECT_WS_ERROR(Resolve(Dial(*moved, kBob), w.token), StatusCode::NOT_FOUND,
                    "NO_SUCH_WORKSPACE");
    EXPECT_TRUE(Clean(moved->Drain(Ms(60000))));
}

// ---- 5. the front with a node draining and a node killed ----

// Polls `ok` until it holds or `seconds` pass; whether it held.
bool Eventually(int seconds, const std::function<bool()> &ok)
{
    auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(Ms(seconds * 1000) / 1000);
    for (;;) {
        if (ok())
            return true;
        if (std::chrono::steady_clock::now() >= deadline)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

TEST_F(Multinode, TheFrontTakesADrainingNodeOutAndAKilledNodeIsUnavailable)
{
    // A workspace on node-2 and one on node-3, opened through the front.
    auto front = DialFront(kAlice);
    std::map<std::string, wstest::Ws> on;
    for (int i = 0; i < 30 && (!on.count("node-2") || !on.count("node-3")); i++) {
        wstest::Ws w;
        std::string n;
        grpc::Status s = OpenViaFront(front, &w, &n);
        ASSERT_TRUE(s.ok()) << s.error_message();
        on.emplace(n, w);
    }
    ASSERT_TRUE(on.count("node-2") && on.count("node-3"));

    // node-1 drains: its port closes at once, the front sends an Open it
    // cannot connect there on to another node, and Opens keep succeeding
    // on the others, every one of them.
    ASSERT_EQ(kill(N1().pid(), SIGTERM), 0);
    ASSERT_TRUE(Eventually(30, [] { return !Accepts(g_net->host("node1").address, kPort); }));
    for (int i = 0; i < 9; i++) {
        wstest::Ws w;
        std::string n;
        grpc::Status s = OpenViaFront(front, &w, &n);
        ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
        EXPECT_TRUE(n == "node-2" || n == "node-3") << n;
    }
    int st = N1().WaitExit(Ms(45000));
    EXPECT_TRUE(Clean(N1().CleanExit(st)));

    // node-2 is killed: calls pinned to it are UNAVAILABLE, node-3's
    // workspace keeps working, and Opens go to node-3.
    N2().Kill();
    auto to2 = DialFront(kAlice, "node-2"), to3 = DialFront(kAlice, "node-3");
    grpc::Status s2 = Describe(to2, on["node-2"].id);
    EXPECT_EQ(s2.error_code(), StatusCode::UNAVAILABLE) << s2.error_message();
    std::string out;
    EXPECT_EQ(wstest::Read(FileSystem::NewStub(to2).get(), on["node-2"].id, "x", &out).error_code(),
              StatusCode::UNAVAILABLE);
    for (int i = 0; i < 5; i++) {
        const std::string text = "still here " + std::to_string(i);
        ASSERT_TRUE(
            wstest::Write(FileSystem::NewStub(to3).get(), on["node-3"].id, "alive.txt", text).ok());
        RunResponse r;
        ASSERT_TRUE(wstest::RunProcess(Exec::NewStub(to3).get(), on["node-3"].id,
                                       ArgvProcess({"cat", "alive.txt"}), &r)
                        .ok());
        EXPECT_EQ(r.stdout(), text);
    }
    for (int i = 0; i < 6; i++) {
        wstest::Ws w;
        std::string n;
        grpc::Status s = OpenViaFront(front, &w, &n);
        ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
        EXPECT_EQ(n, "node-3");
    }
}

} // namespace

int main(int argc, char **argv)
{
    // Before anything else, while this is the only thread: every thread
    // made later (gRPC's included) inherits the namespace entered below.
    int threads = wsdeploy::ThreadCount();
    if (threads != 1) {
        fprintf(stderr,
                "multinode_test: FAILED: %d threads before main; cannot move them all "
                "into the client's network namespace\n",
                threads);
        return 1;
    }
    if (geteuid() != 0) {
        fprintf(stderr, "multinode_test: FAILED: network namespaces need root (euid %d)\n",
                (int)geteuid());
        return 1;
    }
    int stale = wsdeploy::RemoveLeftovers();
    if (stale > 0)
        fprintf(stderr, "multinode_test: removed %d namespace(s) left by earlier runs\n", stale);

    wsdeploy::Network net({"client", "node1", "node2", "node3"});
    g_net = &net;
    net.StartGuardian();
    std::string why = net.Build();
    if (!why.empty()) {
        fprintf(stderr, "multinode_test: FAILED: cannot build the test network: %s\n", why.c_str());
        return 1;
    }
    why = wsdeploy::EnterNamespace(net.host("client").name);
    if (!why.empty()) {
        fprintf(stderr, "multinode_test: FAILED: cannot enter the client namespace: %s\n",
                why.c_str());
        return 1;
    }
    ::testing::InitGoogleTest(&argc, argv);
    int rc = RUN_ALL_TESTS();
    net.Destroy();
    net.DismissGuardian();
    g_net = nullptr;
    return rc;
}
