// Authentication, TLS and tenant isolation end to end: bearer tokens on
// every RPC, the tokens file and its reload, the listening rules, TLS and
// mTLS with certificates made here by the openssl command, and one
// tenant's workspaces invisible to another.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::StatusCode;
using namespace workspace::v1;

namespace
{

const char *const kAlice = "tok-alice-0123456789";
const char *const kBob = "tok-bob-9876543210";
const char *const kCarol = "tok-carol-5555";

std::string TokensFile(const std::vector<std::pair<std::string, std::string>> &entries)
{
    std::string path = wstest::MakeTempDir("tokens") + "/tokens";
    std::string text = "# tenant sha256(token)\n\n";
    for (const auto &e : entries)
        text += e.first + " " + wstest::Sha256Hex(e.second) + "\n";
    wstest::WriteHostFile(path, text);
    return path;
}

// Every method of every service, called with an empty request through the
// generic stub: what matters is the status, which for a refused call comes
// before any request is looked at.
const std::vector<std::string> kMethods = {
    "/workspace.v1.Workspaces/Open",
    "/workspace.v1.Workspaces/Resolve",
    "/workspace.v1.Workspaces/Close",
    "/workspace.v1.Workspaces/Describe",
    "/workspace.v1.Workspaces/List",
    "/workspace.v1.FileSystem/ReadFile",
    "/workspace.v1.FileSystem/WriteFile",
    "/workspace.v1.FileSystem/EditFile",
    "/workspace.v1.FileSystem/ListDir",
    "/workspace.v1.FileSystem/Glob",
    "/workspace.v1.FileSystem/Grep",
    "/workspace.v1.FileSystem/Stat",
    "/workspace.v1.FileSystem/MakeDir",
    "/workspace.v1.FileSystem/Remove",
    "/workspace.v1.FileSystem/Move",
    "/workspace.v1.Exec/Run",
    "/workspace.v1.Exec/Start",
    "/workspace.v1.Exec/Attach",
    "/workspace.v1.Exec/ListProcesses",
    "/workspace.v1.Exec/SendSignal",
    "/workspace.v1.Providers/ListProviders",
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/workspace.v1.Nope/Unknown",
};

grpc::Status CallRaw(const std::shared_ptr<grpc::Channel> &ch, const std::string &method,
                     int deadline_s = 10)
{
    grpc::GenericStub stub(ch);
    grpc::CompletionQueue cq;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(deadline_s));
    grpc::ByteBuffer req, resp;
    grpc::Slice empty("", 0);
    req = grpc::ByteBuffer(&empty, 1);
    auto call = stub.PrepareUnaryCall(&ctx, method, req, &cq);
    call->StartCall();
    grpc::Status st;
    call->Finish(&resp, &st, reinterpret_cast<void *>(1));
    void *tag;
    bool ok;
    cq.Next(&tag, &ok);
    cq.Shutdown();
    while (cq.Next(&tag, &ok))
        ;
    return st;
}

// Exactly the one refusal: code, message, and no detail at all.
::testing::AssertionResult IsUnauthenticated(const grpc::Status &st)
{
    if (st.error_code() == StatusCode::UNAUTHENTICATED && st.error_message() == "unauthenticated" &&
        st.error_details().empty())
        return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "got code " << st.error_code() << " message '" << st.error_message() << "' details "
           << st.error_details().size() << " bytes";
}

TEST(Auth, EveryRpcRefusesMissingWrongAndMalformedTokensAlike)
{
    wstest::Server srv(
        std::vector<std::string>({"--tokens-file", TokensFile({{"alice", kAlice}})}));
    const std::vector<std::pair<std::string, std::shared_ptr<grpc::Channel>>> bad = {
        {"none", srv.Channel("")},
        {"unknown", srv.Channel("tok-mallory")},
        {"alice's with a byte more", srv.Channel(std::string(kAlice) + "x")},
        {"empty", srv.Channel(" ")},
    };
    auto good = srv.Channel(kAlice);
    for (const auto &m : kMethods) {
        for (const auto &b : bad)
            EXPECT_TRUE(IsUnauthenticated(CallRaw(b.second, m))) << m << " with " << b.first;
        // Health/Watch streams on: a let-in call may run into its deadline.
        grpc::Status ok = CallRaw(good, m, 1);
        EXPECT_NE(ok.error_code(), StatusCode::UNAUTHENTICATED) << m << ": " << ok.error_message();
    }
    // The default channel sends no token at all.
    ListProvidersRequest req;
    ListProvidersResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(IsUnauthenticated(srv.providers()->ListProviders(&ctx, req, &resp)));
}

TEST(Auth, AWrongSchemeOrTwoTokensAreRefused)
{
    wstest::Server srv(
        std::vector<std::string>({"--tokens-file", TokensFile({{"alice", kAlice}})}));
    auto ch = srv.Channel("");
    auto stub = Providers::NewStub(ch);
    for (const auto &v : std::vector<std::vector<std::string>>{
             {std::string("Basic ") + kAlice},
             {kAlice},
             {std::string("Bearer ") + kAlice, std::string("Bearer ") + kAlice},
         }) {
        grpc::ClientContext ctx;
        for (const auto &h : v)
            ctx.AddMetadata("authorization", h);
        ListProvidersResponse resp;
        EXPECT_TRUE(IsUnauthenticated(stub->ListProviders(&ctx, ListProvidersRequest(), &resp)))
            << v[0];
    }
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", std::string("bearer ") + kAlice);
    ListProvidersResponse resp;
    EXPECT_TRUE(stub->ListProviders(&ctx, ListProvidersRequest(), &resp).ok());
}

wstest::Ws OpenMemory(const std::shared_ptr<grpc::Channel> &ch)
{
    auto stub = Workspaces::NewStub(ch);
    return wstest::Open(stub.get(), "memory");
}

TEST(Auth, AnotherTenantsWorkspaceIsNotFoundOnEveryRpc)
{
    wstest::Server srv(std::vector<std::string>(
        {"--tokens-file", TokensFile({{"alice", kAlice}, {"bob", kBob}})}));
    auto alice = srv.Channel(kAlice), bob = srv.Channel(kBob);
    auto aws = Workspaces::NewStub(alice);
    wstest::Ws a = wstest::OpenShell(aws.get(), {"sleep", "true"});
    auto afs = FileSystem::NewStub(alice);
    ASSERT_TRUE(wstest::Write(afs.get(), a.id, "f.txt", "alice's").ok());

    auto ws = Workspaces::NewStub(bob);
    auto fs = FileSystem::NewStub(bob);
    auto ex = Exec::NewStub(bob);
    // Bob's answer for alice's id must be the answer for an id nobody has.
    const std::string nobody = "ws_0123456789abcdef0123456789abcdef";
    for (const std::string &id : std::vector<std::string>{a.id, nobody}) {
        SCOPED_TRACE(id);
        {
            grpc::ClientContext c;
            DescribeRequest r;
            r.set_workspace_id(id);
            DescribeResponse o;
            EXPECT_WS_ERROR(ws->Describe(&c, r, &o), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        }
        {
            grpc::ClientContext c;
            CloseRequest r;
            r.set_workspace_id(id);
            CloseResponse o;
            EXPECT_WS_ERROR(ws->Close(&c, r, &o), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        }
        std::string out;
        EXPECT_WS_ERROR(wstest::Read(fs.get(), id, "f.txt", &out), StatusCode::NOT_FOUND,
                        "NO_SUCH_WORKSPACE");
        EXPECT_WS_ERROR(wstest::Write(fs.get(), id, "g.txt", "bob"), StatusCode::NOT_FOUND,
                        "NO_SUCH_WORKSPACE");
        {
            grpc::ClientContext c;
            EditFileRequest r;
            r.set_workspace_id(id);
            r.set_path("f.txt");
            r.set_old_text("alice");
            r.set_new_text("bob");
            EditFileResponse o;
            EXPECT_WS_ERROR(fs->EditFile(&c, r, &o), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        }
        {
            grpc::ClientContext c;
            ListDirRequest r;
            r.set_workspace_id(id);
            ListDirResponse o;
            EXPECT_WS_ERROR(fs->ListDir(&c, r, &o), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        }
        {
            grpc::ClientContext c;
            GlobRequest r;
            r.set_workspace_id(id);
            r.set_pattern("*");
            GlobResponse o;
            EXPECT_WS_ERROR(fs->Glob(&c, r, &o), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        }
        {
            grpc::ClientContext c;
            GrepRequest r;
            r.set_workspace_id(id);
            r.set_pattern("alice");
            auto rd = fs->Grep(&c, r);
            GrepResponse o;
            while (rd->Read(&o))
                ADD_FAILURE() << "Grep returned a match to another tenant";
            EXPECT_WS_ERROR(rd->Finish(), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        }
        {
            grpc::ClientContext c;
            StatRequest r;
            r.set_workspace_id(id);
            r.set_path("f.txt");
            StatResponse o;
            EXPECT_WS_ERROR(fs->Stat(&c, r, &o), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        }
        {
            grpc::ClientContext c;
            MakeDirRequest r;
            r.set_workspace_id(id);
            r.set_path("d");
            MakeDirResponse o;
            EXPECT_WS_ERROR(fs->MakeDir(&c, r, &o), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        }
        {
            grpc::ClientContext c;
            RemoveRequest r;
            r.set_workspace_id(id);
            r.set_path("f.txt");
            RemoveResponse o;
            EXPECT_WS_ERROR(fs->Remove(&c, r, &o), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        }
        {
            grpc::ClientContext c;
            MoveRequest r;
            r.set_workspace_id(id);
            r.set_from_path("f.txt");
            r.set_to_path("g.txt");
            MoveResponse o;
            EXPECT_WS_ERROR(fs->Move(&c, r, &o), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        }
        {
            RunResponse o;
            EXPECT_WS_ERROR(wstest::RunProcess(ex.get(), id, wstest::ArgvProcess({"true"}), &o),
                            StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        }
        {
            grpc::ClientContext c;
            c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
            auto st = wstest::StartStream(ex.get(), &c, id, wstest::ArgvProcess({"true"}));
            st->WritesDone();
            ProcessEvent ev;
            while (st->Read(&ev))
                ADD_FAILURE() << "Start ran a command in another tenant's workspace";
            EXPECT_WS_ERROR(st->Finish(), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        }
        {
            grpc::ClientContext c;
            AttachRequest r;
            r.set_workspace_id(id);
            r.set_tag("x");
            auto rd = ex->Attach(&c, r);
            ProcessEvent ev;
            while (rd->Read(&ev))
                ADD_FAILURE() << "Attach to another tenant's workspace";
            EXPECT_WS_ERROR(rd->Finish(), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        }
        {
            grpc::ClientContext c;
            ListProcessesRequest r;
            r.set_workspace_id(id);
            ListProcessesResponse o;
            EXPECT_WS_ERROR(ex->ListProcesses(&c, r, &o), StatusCode::NOT_FOUND,
                            "NO_SUCH_WORKSPACE");
        }
        {
            grpc::ClientContext c;
            SendSignalRequest r;
            r.set_workspace_id(id);
            r.set_tag("x");
            r.set_signal(9);
            SendSignalResponse o;
            EXPECT_WS_ERROR(ex->SendSignal(&c, r, &o), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
        }
    }
    // Nothing bob did reached alice's workspace, which is still open.
    std::string out;
    ASSERT_TRUE(wstest::Read(afs.get(), a.id, "f.txt", &out).ok());
    EXPECT_EQ(out, "alice's");
    RunResponse rr;
    ASSERT_TRUE(
        wstest::RunProcess(Exec::NewStub(alice).get(), a.id, wstest::ArgvProcess({"true"}), &rr)
            .ok());
}

TEST(Auth, RefsAreBoundToTheirTenantAndListShowsOnlyYourOwn)
{
    std::string tokens = TokensFile({{"alice", kAlice}, {"bob", kBob}});
    std::string state = wstest::MakeTempDir("state");
    wstest::Ws a, b;
    {
        wstest::Server srv(std::vector<std::string>({"--tokens-file", tokens}), state);
        a = wstest::Open(Workspaces::NewStub(srv.Channel(kAlice)).get(), "local-bash");
        b = wstest::Open(Workspaces::NewStub(srv.Channel(kBob)).get(), "local-bash");
    }
    // After a restart the owners come from the records in the state dir.
    wstest::Server srv(std::vector<std::string>({"--tokens-file", tokens}), state);
    auto alice = Workspaces::NewStub(srv.Channel(kAlice));
    auto bob = Workspaces::NewStub(srv.Channel(kBob));
    auto resolve = [](Workspaces::Stub *s, const std::string &token, ResolveResponse *o) {
        grpc::ClientContext c;
        ResolveRequest r;
        r.mutable_ref()->set_token(token);
        return s->Resolve(&c, r, o);
    };
    ResolveResponse o;
    EXPECT_WS_ERROR(resolve(bob.get(), a.token, &o), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    EXPECT_WS_ERROR(resolve(alice.get(), b.token, &o), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    // Editing the tenant inside the ref breaks its MAC.
    std::string edited = a.token;
    size_t at = edited.find("alice");
    ASSERT_NE(at, std::string::npos);
    edited.replace(at, 5, std::string("bobbb"));
    EXPECT_WS_ERROR(resolve(bob.get(), edited, &o), StatusCode::INVALID_ARGUMENT, "BAD_REF");
    ASSERT_TRUE(resolve(alice.get(), a.token, &o).ok());
    EXPECT_EQ(o.workspace().id(), a.id);

    for (auto &p : std::vector<std::pair<Workspaces::Stub *, std::string>>{{alice.get(), a.id},
                                                                           {bob.get(), b.id}}) {
        grpc::ClientContext c;
        ListResponse l;
        ASSERT_TRUE(p.first->List(&c, ListRequest(), &l).ok());
        ASSERT_EQ(l.workspaces_size(), 1);
        EXPECT_EQ(l.workspaces(0).id(), p.second);
    }
    // A closed workspace's id is unknown to the other tenant, not "already
    // closed".
    {
        grpc::ClientContext c;
        CloseRequest r;
        r.set_workspace_id(a.id);
        CloseResponse cr;
        ASSERT_TRUE(alice->Close(&c, r, &cr).ok());
    }
    {
        grpc::ClientContext c;
        CloseRequest r;
        r.set_workspace_id(a.id);
        CloseResponse cr;
        EXPECT_WS_ERROR(bob->Close(&c, r, &cr), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    }
    {
        grpc::ClientContext c;
        CloseRequest r;
        r.set_workspace_id(a.id);
        CloseResponse cr;
        ASSERT_TRUE(alice->Close(&c, r, &cr).ok());
        EXPECT_TRUE(cr.already_closed());
    }
}

bool WaitFor(const std::function<bool()> &cond)
{
    for (int i = 0; i < 500; i++) {
        if (cond())
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
}

bool Authenticates(const std::shared_ptr<grpc::Channel> &ch)
{
    return CallRaw(ch, "/workspace.v1.Providers/ListProviders").ok();
}

TEST(Auth, SighupReloadsTheTokensAndABadFileKeepsTheOldOnes)
{
    std::string tokens = TokensFile({{"alice", kAlice}, {"bob", kBob}});
    wstest::Server srv(std::vector<std::string>({"--tokens-file", tokens}));
    auto alice = srv.Channel(kAlice), carol = srv.Channel(kCarol);
    ASSERT_TRUE(Authenticates(alice));
    EXPECT_TRUE(IsUnauthenticated(CallRaw(carol, "/workspace.v1.Workspaces/List")));

    // Add carol, remove alice.
    wstest::WriteHostFile(tokens, "bob " + wstest::Sha256Hex(kBob) + "\ncarol " +
                                      wstest::Sha256Hex(kCarol) + "\n");
    kill(srv.pid(), SIGHUP);
    EXPECT_TRUE(WaitFor([&] { return Authenticates(carol); }));
    EXPECT_TRUE(IsUnauthenticated(CallRaw(alice, "/workspace.v1.Workspaces/List")));
    EXPECT_TRUE(Authenticates(srv.Channel(kBob)));

    // A broken file: the table stays, the log says which line.
    wstest::WriteHostFile(tokens, "carol " + wstest::Sha256Hex(kCarol) + "\nalice nothex\n");
    kill(srv.pid(), SIGHUP);
    EXPECT_TRUE(WaitFor([&] {
        return wstest::ReadHostFile(srv.stderr_path()).find("line 2") != std::string::npos;
    })) << wstest::ReadHostFile(srv.stderr_path());
    EXPECT_TRUE(Authenticates(carol));
    EXPECT_TRUE(IsUnauthenticated(CallRaw(alice, "/workspace.v1.Workspaces/List")));
}

TEST(Auth, AMalformedTokensFileFailsTheStartWithItsLineNumber)
{
    std::string dir = wstest::MakeTempDir("badtokens");
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"# ok\nalice " + wstest::Sha256Hex("a") + "\nbob\n", "line 3"},
        {"al/ice " + wstest::Sha256Hex("a") + "\n", "line 1"},
        {std::string(65, 'a') + " " + wstest::Sha256Hex("a") + "\n", "line 1"},
        {"alice " + wstest::Sha256Hex("a").substr(1) + "\n", "line 1"},
        {"alice " + wstest::Sha256Hex("a") + " extra\n", "line 1"},
        {"\nalice ABCDEF" + wstest::Sha256Hex("a").substr(6) + "\n", "line 2"},
        {"alice " + wstest::Sha256Hex("a") + "\nbob " + wstest::Sha256Hex("a") + "\n", "line 2"},
    };
    for (const auto &c : cases) {
        std::string path = dir + "/t";
        wstest::WriteHostFile(path, c.first);
        std::string err;
        int st = wstest::RunServerToExit(
            {"--state-dir", dir + "/s", "--listen", "127.0.0.1:0", "--tokens-file", path}, &err);
        // A refusal, not a crash (nor a hang, which RunServerToExit ends).
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0) << c.first << " -> status " << st;
        EXPECT_NE(err.find(c.second), std::string::npos) << c.first << " -> " << err;
    }
    std::string err;
    int st = wstest::RunServerToExit(
        {"--state-dir", dir + "/s", "--listen", "127.0.0.1:0", "--tokens-file", dir + "/missing"},
        &err);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0) << "status " << st;
    EXPECT_NE(err.find("missing"), std::string::npos) << err;
}

TEST(Auth, ListeningRules)
{
    std::string dir = wstest::MakeTempDir("listen");
    std::string err;
    int st = wstest::RunServerToExit({"--state-dir", dir + "/s", "--listen", "0.0.0.0:0"}, &err);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    EXPECT_NE(err.find("without authentication"), std::string::npos) << err;
    // Authentication but no TLS: only with --allow-plaintext.
    std::string tokens = TokensFile({{"alice", kAlice}});
    st = wstest::RunServerToExit(
        {"--state-dir", dir + "/s", "--listen", "0.0.0.0:0", "--tokens-file", tokens}, &err);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    EXPECT_NE(err.find("plaintext"), std::string::npos) << err;

    wstest::Server srv(std::vector<std::string>(
        {"--listen", "0.0.0.0:0", "--tokens-file", tokens, "--allow-plaintext"}));
    EXPECT_NE(wstest::ReadHostFile(srv.stderr_path()).find("warning"), std::string::npos);
    EXPECT_TRUE(Authenticates(srv.Channel(kAlice)));
    EXPECT_TRUE(IsUnauthenticated(CallRaw(srv.Channel(""), "/workspace.v1.Workspaces/List")));
}

// On the unix socket without a tokens file the caller's uid decides: root
// (this test) is the default tenant, one tenant for every root client.
TEST(Auth, UnixSocketWithoutTokensIsTheCallersUidsTenant)
{
    wstest::Server srv(std::vector<std::string>{});
    ASSERT_EQ(srv.address().rfind("unix:", 0), 0u) << srv.address();
    wstest::Ws a = OpenMemory(srv.Channel(""));
    // Any token is ignored: there is nothing to check it against.
    auto other = Workspaces::NewStub(srv.Channel("whatever"));
    grpc::ClientContext c;
    ListResponse l;
    ASSERT_TRUE(other->List(&c, ListRequest(), &l).ok());
    ASSERT_EQ(l.workspaces_size(), 1);
    EXPECT_EQ(l.workspaces(0).id(), a.id);
}

// ---- TLS ----

int Sh(const std::string &cmd)
{
    int st = std::system(("cd '" + cmd.substr(0, cmd.find('\n')) + "' && " +
                          cmd.substr(cmd.find('\n') + 1) + " >/dev/null 2>&1")
                             .c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

struct Pki {
    std::string dir;
    std::string Path(const std::string &f) const
    {
        return dir + "/" + f;
    }
    std::string Read(const std::string &f) const
    {
        return wstest::ReadHostFile(Path(f));
    }
};

// A CA, a server certificate for 127.0.0.1, client certificates: alice and
// bob from the CA, an expired one, one from another CA, one whose CN is not
// a tenant name.
Pki MakePki()
{
    Pki p{wstest::MakeTempDir("pki")};
    EXPECT_EQ(std::system("command -v openssl >/dev/null 2>&1"), 0)
        << "the openssl command (Debian package openssl) makes this test's certificates and is "
           "not installed";
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    auto ca = [&](const std::string &name) {
        EXPECT_EQ(Sh(p.dir + "\nopenssl req -x509 " + ec + " -keyout " + name + ".key -out " +
                     name + ".pem -subj /CN=" + name + " -days 2"),
                  0);
    };
    auto leaf = [&](const std::string &name, const std::string &cn, const std::string &ca_name,
                    const std::string &days, const std::string &ext) {
        EXPECT_EQ(Sh(p.dir + "\nopenssl req " + ec + " -keyout " + name + ".key -out " + name +
                     ".csr -subj '/CN=" + cn + "'"),
                  0);
        std::string extfile;
        if (!ext.empty()) {
            wstest::WriteHostFile(p.Path(name + ".ext"), ext + "\n");
            extfile = " -extfile " + name + ".ext";
        }
        EXPECT_EQ(Sh(p.dir + "\nopenssl x509 -req -in " + name + ".csr -CA " + ca_name +
                     ".pem -CAkey " + ca_name + ".key -CAcreateserial -days " + days + " -out " +
                     name + ".pem" + extfile),
                  0);
    };
    ca("ca");
    ca("otherca");
    leaf("server", "localhost", "ca", "2", "subjectAltName=IP:127.0.0.1,DNS:localhost");
    leaf("alice", "alice", "ca", "2", "");
    leaf("bob", "bob", "ca", "2", "");
    leaf("expired", "alice", "ca", "-1", "");
    leaf("stranger", "alice", "otherca", "2", "");
    leaf("badcn", "not a tenant!", "ca", "2", "");
    return p;
}

std::shared_ptr<grpc::ChannelCredentials> Tls(const Pki &p, const std::string &client = "")
{
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = p.Read("ca.pem");
    if (!client.empty()) {
        o.pem_private_key = p.Read(client + ".key");
        o.pem_cert_chain = p.Read(client + ".pem");
    }
    return grpc::SslCredentials(o);
}

TEST(Tls, ServerTlsWithTokens)
{
    Pki p = MakePki();
    wstest::Server srv(std::vector<std::string>(
        {"--listen", "0.0.0.0:0", "--tokens-file", TokensFile({{"alice", kAlice}}), "--tls-cert",
         p.Path("server.pem"), "--tls-key", p.Path("server.key")}));
    EXPECT_EQ(wstest::ReadHostFile(srv.stderr_path()).find("plaintext"), std::string::npos);
    EXPECT_TRUE(Authenticates(srv.Channel(kAlice, Tls(p))));
    EXPECT_TRUE(
        IsUnauthenticated(CallRaw(srv.Channel("", Tls(p)), "/workspace.v1.Workspaces/List")));
    // A plaintext client does not get through a TLS port at all.
    grpc::Status st = CallRaw(srv.Channel(kAlice), "/workspace.v1.Workspaces/List");
    EXPECT_EQ(st.error_code(), StatusCode::UNAVAILABLE) << st.error_message();
    // Nor does one that does not trust the server's CA.
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = p.Read("otherca.pem");
    st = CallRaw(srv.Channel(kAlice, grpc::SslCredentials(o)), "/workspace.v1.Workspaces/List");
    EXPECT_EQ(st.error_code(), StatusCode::UNAVAILABLE) << st.error_message();
}

TEST(Tls, MutualTlsNamesTheTenantByCertificate)
{
    Pki p = MakePki();
    std::string tokens = TokensFile({{"carol", kCarol}});
    wstest::Server srv(std::vector<std::string>(
        {"--listen", "0.0.0.0:0", "--tls-cert", p.Path("server.pem"), "--tls-key",
         p.Path("server.key"), "--tls-client-ca", p.Path("ca.pem"), "--tokens-file", tokens}));
    auto alice = srv.Channel("", Tls(p, "alice"));
    auto bob = srv.Channel("", Tls(p, "bob"));
    wstest::Ws a = OpenMemory(alice);
    {
        grpc::ClientContext c;
        ListResponse l;
        ASSERT_TRUE(Workspaces::NewStub(bob)->List(&c, ListRequest(), &l).ok());
        EXPECT_EQ(l.workspaces_size(), 0);
    }
    {
        grpc::ClientContext c;
        ListResponse l;
        ASSERT_TRUE(Workspaces::NewStub(alice)->List(&c, ListRequest(), &l).ok());
        ASSERT_EQ(l.workspaces_size(), 1);
        EXPECT_EQ(l.workspaces(0).id(), a.id);
    }
    {
        grpc::ClientContext c;
        DescribeRequest r;
        r.set_workspace_id(a.id);
        DescribeResponse o;
        EXPECT_WS_ERROR(Workspaces::NewStub(bob)->Describe(&c, r, &o), StatusCode::NOT_FOUND,
                        "NO_SUCH_WORKSPACE");
    }
    // A token, when sent, decides over the certificate: alice's certificate
    // with carol's token is carol, with a wrong token is refused.
    {
        grpc::ClientContext c;
        ListResponse l;
        ASSERT_TRUE(Workspaces::NewStub(srv.Channel(kCarol, Tls(p, "alice")))
                        ->List(&c, ListRequest(), &l)
                        .ok());
        EXPECT_EQ(l.workspaces_size(), 0);
    }
    EXPECT_TRUE(IsUnauthenticated(
        CallRaw(srv.Channel("tok-wrong", Tls(p, "alice")), "/workspace.v1.Workspaces/List")));
    // A certificate whose CN is no tenant name authenticates nobody.
    EXPECT_TRUE(IsUnauthenticated(
        CallRaw(srv.Channel("", Tls(p, "badcn")), "/workspace.v1.Workspaces/List")));
    // No certificate, an expired one, or one from another CA: the handshake
    // fails, whatever token comes with it.
    for (const char *c : {"", "expired", "stranger"}) {
        grpc::Status st = CallRaw(srv.Channel(kCarol, Tls(p, c)), "/workspace.v1.Workspaces/List");
        EXPECT_EQ(st.error_code(), StatusCode::UNAVAILABLE) << c << ": " << st.error_message();
    }
}

TEST(Tls, MutualTlsAloneAllowsANonLoopbackAddress)
{
    Pki p = MakePki();
    wstest::Server srv(std::vector<std::string>(
        {"--listen", "0.0.0.0:0", "--tls-cert", p.Path("server.pem"), "--tls-key",
         p.Path("server.key"), "--tls-client-ca", p.Path("ca.pem")}));
    EXPECT_TRUE(Authenticates(srv.Channel("", Tls(p, "alice"))));
    // Without a tokens file a token cannot name anyone.
    EXPECT_TRUE(IsUnauthenticated(
        CallRaw(srv.Channel(kAlice, Tls(p, "alice")), "/workspace.v1.Workspaces/List")));
}

TEST(Tls, BadFlagsAndFilesFailTheStart)
{
    Pki p = MakePki();
    std::string dir = wstest::MakeTempDir("tlsflags");
    std::string err;
    int st = wstest::RunServerToExit(
        std::vector<std::string>({"--state-dir", dir + "/s", "--tls-cert", p.Path("server.pem")}),
        &err);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    EXPECT_NE(err.find("--tls-key"), std::string::npos) << err;
    st = wstest::RunServerToExit(
        std::vector<std::string>({"--state-dir", dir + "/s", "--tls-cert", p.Path("server.pem"),
                                  "--tls-key", p.Path("nokey.key")}),
        &err);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    EXPECT_NE(err.find("nokey.key"), std::string::npos) << err;
}

} // namespace

namespace
{

grpc::Status OpenOn(const std::shared_ptr<grpc::Channel> &ch, std::string *id = nullptr)
{
    grpc::ClientContext c;
    OpenRequest r;
    r.mutable_memory();
    OpenResponse o;
    grpc::Status st = Workspaces::NewStub(ch)->Open(&c, r, &o);
    if (id)
        *id = o.workspace().id();
    return st;
}

::testing::AssertionResult IsQuota(const grpc::Status &st, const std::string &quota)
{
    wstest::Error e = wstest::Decode(st);
    if (e.code == StatusCode::RESOURCE_EXHAUSTED && e.reason == "QUOTA" &&
        e.metadata["quota"] == quota)
        return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "code " << e.code << " reason " << e.reason
                                         << " quota '" << e.metadata["quota"] << "'";
}

TEST(Quota, OpenWorkspacesPerTenant)
{
    wstest::Server srv(
        std::vector<std::string>({"--tokens-file", TokensFile({{"alice", kAlice}, {"bob", kBob}}),
                                  "--tenant-max-workspaces", "2"}));
    auto alice = srv.Channel(kAlice), bob = srv.Channel(kBob);
    std::string first;
    ASSERT_TRUE(OpenOn(alice, &first).ok());
    ASSERT_TRUE(OpenOn(alice).ok());
    EXPECT_TRUE(IsQuota(OpenOn(alice), "tenant_open_workspaces"));
    // Another tenant has its own count.
    EXPECT_TRUE(OpenOn(bob).ok());
    // Closing one frees its place.
    grpc::ClientContext c;
    CloseRequest r;
    r.set_workspace_id(first);
    CloseResponse o;
    ASSERT_TRUE(Workspaces::NewStub(alice)->Close(&c, r, &o).ok());
    EXPECT_TRUE(OpenOn(alice).ok());
    EXPECT_TRUE(IsQuota(OpenOn(alice), "tenant_open_workspaces"));
}

TEST(Quota, OpensPerMinutePerTenant)
{
    wstest::Server srv(
        std::vector<std::string>({"--tokens-file", TokensFile({{"alice", kAlice}, {"bob", kBob}}),
                                  "--tenant-opens-per-minute", "3"}));
    auto alice = srv.Channel(kAlice), bob = srv.Channel(kBob);
    for (int i = 0; i < 3; i++) {
        std::string id;
        ASSERT_TRUE(OpenOn(alice, &id).ok()) << i;
        grpc::ClientContext c;
        CloseRequest r;
        r.set_workspace_id(id);
        CloseResponse o;
        ASSERT_TRUE(Workspaces::NewStub(alice)->Close(&c, r, &o).ok());
    }
    // Closing gives no Open back: the quota counts Opens, not workspaces.
    EXPECT_TRUE(IsQuota(OpenOn(alice), "tenant_opens_per_minute"));
    EXPECT_TRUE(OpenOn(bob).ok());
}

TEST(Quota, BadValuesAreRefused)
{
    std::string dir = wstest::MakeTempDir("quotaflags");
    for (const char *flag : {"--tenant-max-workspaces", "--tenant-opens-per-minute",
                             "--tenant-max-commands", "--tenant-max-bytes"}) {
        for (const char *value : {"-1", "", "12x", "99999999999999999999"}) {
            std::string err;
            int st = wstest::RunServerToExit({"--state-dir", dir + "/s", flag, value}, &err);
            EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << flag << " " << value;
            EXPECT_NE(err.find("invalid value"), std::string::npos) << err;
        }
    }
}

bool HostFileExists(const std::string &path)
{
    return access(path.c_str(), F_OK) == 0;
}

grpc::Status RunOn(const std::shared_ptr<grpc::Channel> &ch, const std::string &id,
                   const std::vector<std::string> &argv, RunResponse *resp = nullptr)
{
    RunResponse r;
    return wstest::RunProcess(Exec::NewStub(ch).get(), id, wstest::ArgvProcess(argv),
                              resp ? resp : &r);
}

int ProcessCount(const std::shared_ptr<grpc::Channel> &ch, const std::string &id)
{
    grpc::ClientContext c;
    ListProcessesRequest r;
    r.set_workspace_id(id);
    ListProcessesResponse o;
    EXPECT_TRUE(Exec::NewStub(ch)->ListProcesses(&c, r, &o).ok());
    return o.processes_size();
}

TEST(Quota, RunningCommandsPerTenant)
{
    wstest::Server srv(
        std::vector<std::string>({"--tokens-file", TokensFile({{"alice", kAlice}, {"bob", kBob}}),
                                  "--tenant-max-commands", "2"}));
    auto alice = srv.Channel(kAlice), bob = srv.Channel(kBob);
    auto alice_ws = Workspaces::NewStub(alice);
    auto alice_exec = Exec::NewStub(alice);
    const std::vector<std::string> allowed = {"sleep", "touch"};
    wstest::Ws a1 = wstest::OpenShell(alice_ws.get(), allowed);
    wstest::Ws a2 = wstest::OpenShell(alice_ws.get(), allowed);
    wstest::Ws b1 = wstest::OpenShell(Workspaces::NewStub(bob).get(), allowed);
    const std::string m = wstest::UniqueSleep();

    // One background command, left running without a stream, and one
    // with its stream open, in two different workspaces of alice's.
    ProcessConfig bg = wstest::ArgvProcess({"sleep", m});
    bg.set_background(true);
    bg.set_tag("bg");
    {
        grpc::ClientContext ctx;
        auto rw = wstest::StartStream(alice_exec.get(), &ctx, a1.id, bg);
        wstest::EventLog log;
        ASSERT_TRUE(wstest::ReadEvents(rw.get(), &log, [](const wstest::EventLog &l) {
            return l.started;
        })) << wstest::Problems(log);
        ctx.TryCancel();
        rw->Finish();
    }
    grpc::ClientContext fg_ctx;
    auto fg =
        wstest::StartStream(alice_exec.get(), &fg_ctx, a2.id, wstest::ArgvProcess({"sleep", m}));
    wstest::EventLog fg_log;
    ASSERT_TRUE(wstest::ReadEvents(fg.get(), &fg_log, [](const wstest::EventLog &l) {
        return l.started;
    })) << wstest::Problems(fg_log);
    ASSERT_GE(wstest::WaitProcsAtLeast(m, 2, 30000), 2);

    // A third, by Run or by Start, in either workspace: refused, and
    // nothing started.
    grpc::Status st = RunOn(alice, a1.id, {"touch", "ran"});
    EXPECT_TRUE(IsQuota(st, "tenant_running_commands"));
    wstest::Error e = wstest::Decode(st);
    EXPECT_EQ(e.metadata["limit"], "2");
    EXPECT_FALSE(HostFileExists(srv.workspace_dir(a1.id) + "/ran"));
    {
        grpc::ClientContext ctx;
        auto rw = wstest::StartStream(alice_exec.get(), &ctx, a2.id,
                                      wstest::ArgvProcess({"touch", "started"}));
        wstest::EventLog log;
        EXPECT_FALSE(wstest::ReadEvents(rw.get(), &log));
        EXPECT_FALSE(log.started);
        EXPECT_TRUE(IsQuota(rw->Finish(), "tenant_running_commands"));
    }
    EXPECT_FALSE(HostFileExists(srv.workspace_dir(a2.id) + "/started"));
    EXPECT_EQ(ProcessCount(alice, a1.id), 1);
    EXPECT_EQ(ProcessCount(alice, a2.id), 1);

    // Another tenant is served meanwhile.
    EXPECT_TRUE(RunOn(bob, b1.id, {"touch", "ran"}).ok());
    EXPECT_TRUE(HostFileExists(srv.workspace_dir(b1.id) + "/ran"));

    // A command that ends gives its place back: the exited event comes
    // after the place is free.
    {
        grpc::ClientContext ctx;
        SendSignalRequest r;
        r.set_workspace_id(a2.id);
        r.set_id(fg_log.start.id());
        r.set_signal(SIGKILL);
        SendSignalResponse o;
        ASSERT_TRUE(alice_exec->SendSignal(&ctx, r, &o).ok());
    }
    wstest::ReadEvents(fg.get(), &fg_log);
    ASSERT_TRUE(fg_log.exited) << wstest::Problems(fg_log);
    fg->Finish();
    EXPECT_TRUE(RunOn(alice, a1.id, {"touch", "ran"}).ok());
    EXPECT_TRUE(HostFileExists(srv.workspace_dir(a1.id) + "/ran"));

    // The background one still holds its place: with one more running
    // the tenant is full again.
    grpc::ClientContext fg2_ctx;
    auto fg2 =
        wstest::StartStream(alice_exec.get(), &fg2_ctx, a1.id, wstest::ArgvProcess({"sleep", m}));
    wstest::EventLog fg2_log;
    ASSERT_TRUE(wstest::ReadEvents(fg2.get(), &fg2_log, [](const wstest::EventLog &l) {
        return l.started;
    })) << wstest::Problems(fg2_log);
    EXPECT_TRUE(IsQuota(RunOn(alice, a2.id, {"touch", "again"}), "tenant_running_commands"));
    EXPECT_FALSE(HostFileExists(srv.workspace_dir(a2.id) + "/again"));
    fg2_ctx.TryCancel();
    fg2->Finish();
}

// Writes `n` bytes of `c` to path through `ch`.
grpc::Status WriteOn(const std::shared_ptr<grpc::Channel> &ch, const std::string &id,
                     const std::string &path, size_t n, char c = 'x')
{
    return wstest::Write(FileSystem::NewStub(ch).get(), id, path, std::string(n, c));
}

grpc::Status RemoveOn(const std::shared_ptr<grpc::Channel> &ch, const std::string &id,
                      const std::string &path)
{
    grpc::ClientContext c;
    RemoveRequest r;
    r.set_workspace_id(id);
    r.set_path(path);
    r.set_recursive(true);
    RemoveResponse o;
    return FileSystem::NewStub(ch)->Remove(&c, r, &o);
}

TEST(Quota, BytesPerTenant)
{
    wstest::Server srv(
        std::vector<std::string>({"--tokens-file", TokensFile({{"alice", kAlice}, {"bob", kBob}}),
                                  "--tenant-max-bytes", "1000000"}));
    auto alice = srv.Channel(kAlice), bob = srv.Channel(kBob);
    wstest::Ws disk = wstest::OpenShell(Workspaces::NewStub(alice).get(), {"sh", "true"});
    wstest::Ws mem = OpenMemory(alice);
    wstest::Ws other = OpenMemory(bob);

    // Both of alice's workspaces count, the memory one too.
    ASSERT_TRUE(WriteOn(alice, disk.id, "a", 400000, 'a').ok());
    ASSERT_TRUE(WriteOn(alice, mem.id, "m", 400000).ok());
    grpc::Status st = WriteOn(alice, disk.id, "b", 300000);
    EXPECT_TRUE(IsQuota(st, "tenant_bytes"));
    wstest::Error e = wstest::Decode(st);
    EXPECT_EQ(e.metadata["limit"], "1000000");
    EXPECT_EQ(e.metadata["used"], "800000");
    EXPECT_FALSE(HostFileExists(srv.workspace_dir(disk.id) + "/b"));
    // A refused overwrite leaves the old content.
    EXPECT_TRUE(IsQuota(WriteOn(alice, disk.id, "a", 700000, 'z'), "tenant_bytes"));
    std::string content;
    ASSERT_TRUE(wstest::Read(FileSystem::NewStub(alice).get(), disk.id, "a", &content).ok());
    EXPECT_EQ(content, std::string(400000, 'a'));
    // Up to the limit exactly is fine; another tenant has its own.
    EXPECT_TRUE(WriteOn(alice, disk.id, "b", 200000).ok());
    EXPECT_TRUE(IsQuota(WriteOn(alice, mem.id, "one", 1), "tenant_bytes"));
    EXPECT_TRUE(WriteOn(bob, other.id, "m", 900000).ok());
    // Shrinking is always allowed.
    EXPECT_TRUE(WriteOn(alice, disk.id, "a", 100000, 'a').ok());

    // A command that writes past the quota: the next write and command
    // are refused, in every workspace of the tenant.
    RunResponse run;
    ASSERT_TRUE(RunOn(alice, disk.id, {"sh", "-c", "head -c 600000 /dev/zero > big"}, &run).ok());
    ASSERT_EQ(run.exited().exit_code(), 0) << run.stderr();
    EXPECT_TRUE(IsQuota(WriteOn(alice, mem.id, "one", 1), "tenant_bytes"));
    e = wstest::Decode(WriteOn(alice, disk.id, "one", 1));
    EXPECT_EQ(e.reason, "QUOTA");
    EXPECT_EQ(e.metadata["used"], "1300000");
    EXPECT_TRUE(IsQuota(RunOn(alice, disk.id, {"sh", "-c", "echo x > ran"}), "tenant_bytes"));
    EXPECT_FALSE(HostFileExists(srv.workspace_dir(disk.id) + "/ran"));
    {
        grpc::ClientContext c;
        MakeDirRequest r;
        r.set_workspace_id(disk.id);
        r.set_path("d");
        MakeDirResponse o;
        EXPECT_TRUE(IsQuota(FileSystem::NewStub(alice)->MakeDir(&c, r, &o), "tenant_bytes"));
    }
    // Still over, a shrinking overwrite goes through; bob is served.
    EXPECT_TRUE(WriteOn(alice, disk.id, "a", 50000, 'a').ok());
    EXPECT_TRUE(WriteOn(bob, other.id, "m", 1000).ok());

    // Removing the file recovers.
    ASSERT_TRUE(RemoveOn(alice, disk.id, "big").ok());
    EXPECT_TRUE(WriteOn(alice, mem.id, "one", 1).ok());
    EXPECT_TRUE(RunOn(alice, disk.id, {"sh", "-c", "echo x > ran"}).ok());
    EXPECT_TRUE(HostFileExists(srv.workspace_dir(disk.id) + "/ran"));
    // 50000 + 200000 + 400000 + 1 + 2 bytes held: 349997 left.
    EXPECT_TRUE(IsQuota(WriteOn(alice, disk.id, "c", 349998), "tenant_bytes"));
    EXPECT_TRUE(WriteOn(alice, disk.id, "c", 349997).ok());
}

TEST(Quota, BytesOfAWorkspaceTooDeepToMeasureCountAsFull)
{
    wstest::Server srv(std::vector<std::string>(
        {"--tokens-file", TokensFile({{"alice", kAlice}}), "--tenant-max-bytes", "1000000"}));
    auto alice = srv.Channel(kAlice);
    wstest::Ws ws = wstest::OpenShell(Workspaces::NewStub(alice).get(), {"mkdir"});
    std::string deep = "d";
    for (int i = 0; i < 70; i++)
        deep += "/d";
    RunResponse run;
    ASSERT_TRUE(RunOn(alice, ws.id, {"mkdir", "-p", deep}, &run).ok());
    ASSERT_EQ(run.exited().exit_code(), 0) << run.stderr();
    // What lies below the walk's last level could be any size.
    EXPECT_TRUE(IsQuota(WriteOn(alice, ws.id, "one", 1), "tenant_bytes"));
    ASSERT_TRUE(RemoveOn(alice, ws.id, "d").ok());
    EXPECT_TRUE(WriteOn(alice, ws.id, "one", 1).ok());
}

} // namespace
