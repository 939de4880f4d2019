// The audit log end to end: commands and FileSystem writes against the real
// server produce exactly the expected records in order, the chain verifies,
// and a log edited, cut or shortened on disk is reported by ReadAudit and
// by `wsctl audit` at the exact first bad seq with the reason.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <jansson.h>

#include "tests/e2e/harness.h"

extern char **environ;

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;

namespace
{

std::string Runfile(const std::string &rel)
{
    const char *srcdir = getenv("TEST_SRCDIR");
    return std::string(srcdir ? srcdir : ".") + "/workspaced/" + rel;
}

struct Json {
    json_t *j = nullptr;
    explicit Json(const std::string &s) : j(json_loads(s.c_str(), 0, nullptr))
    {
    }
    ~Json()
    {
        json_decref(j);
    }
    std::string str(const char *k) const
    {
        const char *v = json_string_value(json_object_get(j, k));
        return v ? v : "<missing>";
    }
    long long num(const char *k) const
    {
        json_t *v = json_object_get(j, k);
        return json_is_integer(v) ? json_integer_value(v) : -999;
    }
    bool has(const char *k) const
    {
        return json_object_get(j, k) != nullptr;
    }
    std::vector<std::string> strs(const char *k) const
    {
        std::vector<std::string> out;
        json_t *a = json_object_get(j, k);
        for (size_t i = 0; i < json_array_size(a); i++)
            out.push_back(json_string_value(json_array_get(a, i)));
        return out;
    }
};

grpc::Status ReadAudit(Workspaces::Stub *stub, const std::string &id, ReadAuditResponse *resp,
                       uint64_t from = 0, uint32_t max = 0)
{
    ReadAuditRequest req;
    req.set_workspace_id(id);
    req.set_from_seq(from);
    req.set_max_records(max);
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub->ReadAudit(&ctx, req, resp);
}

struct CliRun {
    int status = -1;
    std::string out, err;
};

// Runs wsctl to completion with stdout and stderr in files.
CliRun Wsctl(const std::string &addr, const std::vector<std::string> &args)
{
    std::string dir = wstest::MakeTempDir("wsctl");
    std::string out = dir + "/out", err = dir + "/err";
    std::vector<std::string> full = {Runfile("clients/cli/wsctl"), "--addr", addr};
    full.insert(full.end(), args.begin(), args.end());
    std::vector<char *> argv;
    for (auto &a : full)
        argv.push_back(&a[0]);
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    CliRun r;
    if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0)
        return r;
    posix_spawn_file_actions_destroy(&fa);
    int st;
    waitpid(pid, &st, 0);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.out = wstest::ReadHostFile(out);
    r.err = wstest::ReadHostFile(err);
    return r;
}

std::vector<std::string> Lines(const std::string &s)
{
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);)
        out.push_back(l);
    return out;
}

class AuditTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        server_ = std::make_unique<wstest::Server>();
        ws_ = server_->workspaces();
        fs_ = server_->fs();
        exec_ = server_->exec();
    }

    std::string LogPath(const std::string &id)
    {
        return server_->state_dir() + "/audit/" + id + ".jsonl";
    }

    // A workspace with `n` records: WriteFile of "content-<i>" to f<i>.
    wstest::Ws WithWrites(int n)
    {
        wstest::Ws w = wstest::Open(ws_.get(), "local-bash");
        for (int i = 1; i <= n; i++)
            EXPECT_TRUE(wstest::Write(fs_.get(), w.id, "f" + std::to_string(i),
                                      "content-" + std::to_string(i))
                            .ok());
        return w;
    }

    void ExpectVerdict(const std::string &id, AuditProblem problem, uint64_t bad_seq,
                       const std::string &detail, uint64_t records)
    {
        ReadAuditResponse resp;
        ASSERT_TRUE(ReadAudit(ws_.get(), id, &resp).ok());
        EXPECT_FALSE(resp.verification().ok());
        EXPECT_EQ(resp.verification().problem(), problem);
        EXPECT_EQ(resp.verification().bad_seq(), bad_seq);
        EXPECT_EQ(resp.verification().detail(), detail);
        EXPECT_EQ(resp.verification().verified_records(), records);
        EXPECT_EQ(resp.records_size(), (int)records);

        CliRun r = Wsctl(server_->address(), {"audit", id});
        EXPECT_EQ(r.status, 3) << r.err;
        EXPECT_EQ(r.err, "audit: " + AuditProblem_Name(problem).substr(14) + " at seq " +
                             std::to_string(bad_seq) + ": " + detail + "\n");
        EXPECT_EQ(Lines(r.out).size(), records);

        r = Wsctl(server_->address(), {"audit", id, "--json"});
        EXPECT_EQ(r.status, 3) << r.err;
        Json j(r.out);
        json_t *v = json_object_get(j.j, "verification");
        ASSERT_TRUE(v) << r.out;
        EXPECT_TRUE(json_is_false(json_object_get(v, "ok")));
        EXPECT_STREQ(json_string_value(json_object_get(v, "problem")),
                     AuditProblem_Name(problem).substr(14).c_str());
        EXPECT_EQ(json_integer_value(json_object_get(v, "bad_seq")), (long long)bad_seq);
        EXPECT_EQ(json_array_size(json_object_get(j.j, "records")), records);
    }

    std::unique_ptr<wstest::Server> server_;
    std::unique_ptr<Workspaces::Stub> ws_;
    std::unique_ptr<FileSystem::Stub> fs_;
    std::unique_ptr<Exec::Stub> exec_;
};

TEST_F(AuditTest, CommandsAndWritesAreRecordedInOrderAndVerify)
{
    wstest::Ws w = wstest::OpenShell(ws_.get(), {"echo", "sh"});
    RunResponse rr;
    ASSERT_TRUE(
        wstest::RunProcess(exec_.get(), w.id, wstest::ArgvProcess({"echo", "hello"}), &rr).ok());
    WriteFileResponse wr;
    const std::string content = "the content the test wrote\n";
    ASSERT_TRUE(wstest::Write(fs_.get(), w.id, "dir/a.txt", content, &wr, true).ok());
    {
        EditFileRequest req;
        req.set_workspace_id(w.id);
        req.set_path("dir/a.txt");
        req.set_old_text("content");
        req.set_new_text("text");
        EditFileResponse resp;
        ClientContext ctx;
        ASSERT_TRUE(fs_->EditFile(&ctx, req, &resp).ok());
    }
    ASSERT_TRUE(wstest::RunProcess(exec_.get(), w.id,
                                   wstest::ArgvProcess({"sh", "-c", "echo out; exit 3"}), &rr)
                    .ok());
    {
        MoveRequest req;
        req.set_workspace_id(w.id);
        req.set_from_path("dir/a.txt");
        req.set_to_path("b.txt");
        MoveResponse resp;
        ClientContext ctx;
        ASSERT_TRUE(fs_->Move(&ctx, req, &resp).ok());
    }
    {
        RemoveRequest req;
        req.set_workspace_id(w.id);
        req.set_path("b.txt");
        RemoveResponse resp;
        ClientContext ctx;
        ASSERT_TRUE(fs_->Remove(&ctx, req, &resp).ok());
    }

    ReadAuditResponse resp;
    ASSERT_TRUE(ReadAudit(ws_.get(), w.id, &resp).ok());
    EXPECT_TRUE(resp.verification().ok()) << resp.verification().detail();
    EXPECT_EQ(resp.verification().problem(), AUDIT_PROBLEM_NONE);
    EXPECT_EQ(resp.verification().bad_seq(), 0u);
    EXPECT_EQ(resp.verification().verified_records(), 6u);
    EXPECT_EQ(resp.next_seq(), 0u);
    ASSERT_EQ(resp.records_size(), 6);
    std::vector<std::string> events;
    for (int i = 0; i < 6; i++) {
        EXPECT_EQ(resp.records(i).seq(), (uint64_t)i + 1);
        events.push_back(resp.records(i).event());
    }
    EXPECT_EQ(events,
              (std::vector<std::string>{"command", "write", "edit", "command", "move", "remove"}));

    Json c1(resp.records(0).json());
    std::vector<std::string> argv = c1.strs("argv");
    ASSERT_EQ(argv.size(), 2u);
    EXPECT_EQ(argv[0].substr(argv[0].rfind('/')), "/echo");
    EXPECT_EQ(argv[1], "hello");
    EXPECT_EQ(c1.str("cause"), "EXITED");
    EXPECT_EQ(c1.num("exit_code"), 0);
    EXPECT_EQ(c1.num("signal"), 0);
    EXPECT_EQ(c1.str("cwd"), ".");
    EXPECT_EQ(c1.num("stdout_bytes"), 6);
    EXPECT_EQ(c1.num("stderr_bytes"), 0);
    EXPECT_TRUE(c1.has("duration_ms"));
    EXPECT_EQ(c1.num("seq"), 1);
    EXPECT_EQ(c1.str("prev"), std::string(64, '0'));
    EXPECT_FALSE(c1.has("argv_truncated"));

    Json wj(resp.records(1).json());
    EXPECT_EQ(wj.str("path"), "dir/a.txt");
    EXPECT_EQ(wj.num("size"), (long long)content.size());
    EXPECT_EQ(wj.str("sha256"), wstest::Sha256Hex(content));
    EXPECT_EQ(wj.str("sha256"), wr.sha256());
    // prev is the hash of the previous line's exact bytes.
    EXPECT_EQ(wj.str("prev"), wstest::Sha256Hex(resp.records(0).json()));

    Json ej(resp.records(2).json());
    EXPECT_EQ(ej.str("path"), "dir/a.txt");
    EXPECT_EQ(ej.str("sha256"), wstest::Sha256Hex("the text the test wrote\n"));
    EXPECT_EQ(ej.num("replacements"), 1);

    Json c2(resp.records(3).json());
    EXPECT_EQ(c2.strs("argv")[1], "-c");
    EXPECT_EQ(c2.strs("argv")[2], "echo out; exit 3");
    EXPECT_EQ(c2.str("cause"), "EXITED");
    EXPECT_EQ(c2.num("exit_code"), 3);
    EXPECT_EQ(c2.num("stdout_bytes"), 4);

    Json mj(resp.records(4).json());
    EXPECT_EQ(mj.str("path"), "dir/a.txt");
    EXPECT_EQ(mj.str("to_path"), "b.txt");
    Json rj(resp.records(5).json());
    EXPECT_EQ(rj.str("path"), "b.txt");
    EXPECT_EQ(rj.num("removed"), 1);

    // The file on disk is exactly these lines.
    std::string disk = wstest::ReadHostFile(LogPath(w.id));
    std::string want;
    for (const auto &r : resp.records())
        want += r.json() + "\n";
    EXPECT_EQ(disk, want);

    // wsctl prints the same lines and exits 0.
    CliRun r = Wsctl(server_->address(), {"audit", w.id});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, want);
    EXPECT_EQ(r.err, "audit: ok, 6 records verified\n");
}

TEST_F(AuditTest, SignalledCommandRecordsTheSignal)
{
    wstest::Ws w = wstest::OpenShell(ws_.get(), {"sh"});
    RunResponse rr;
    ASSERT_TRUE(
        wstest::RunProcess(exec_.get(), w.id, wstest::ArgvProcess({"sh", "-c", "kill -9 $$"}), &rr)
            .ok());
    ReadAuditResponse resp;
    ASSERT_TRUE(ReadAudit(ws_.get(), w.id, &resp).ok());
    ASSERT_EQ(resp.records_size(), 1);
    Json c(resp.records(0).json());
    EXPECT_EQ(c.str("cause"), "SIGNALED");
    EXPECT_EQ(c.num("signal"), 9);
}

TEST_F(AuditTest, LongArgvIsCutWithAMarker)
{
    wstest::Ws w = wstest::OpenShell(ws_.get(), {"echo"});
    std::vector<std::string> argv = {"echo"};
    for (int i = 0; i < 20; i++)
        argv.push_back(std::string(1000, 'a' + i));
    RunResponse rr;
    ASSERT_TRUE(wstest::RunProcess(exec_.get(), w.id, wstest::ArgvProcess(argv), &rr).ok());
    ReadAuditResponse resp;
    ASSERT_TRUE(ReadAudit(ws_.get(), w.id, &resp).ok());
    ASSERT_EQ(resp.records_size(), 1);
    EXPECT_TRUE(resp.verification().ok());
    Json c(resp.records(0).json());
    EXPECT_TRUE(json_is_true(json_object_get(c.j, "argv_truncated")));
    std::vector<std::string> kept = c.strs("argv");
    // 8 KiB of argv: the path and the first seven 1000-byte arguments.
    ASSERT_EQ(kept.size(), 9u);
    EXPECT_EQ(kept[8], std::string(1000, 'a' + 7));
    EXPECT_LE(resp.records(0).json().size(), 16384u);
}

TEST_F(AuditTest, PagesWithNextSeq)
{
    wstest::Ws w = WithWrites(5);
    ReadAuditResponse resp;
    ASSERT_TRUE(ReadAudit(ws_.get(), w.id, &resp, 0, 2).ok());
    ASSERT_EQ(resp.records_size(), 2);
    EXPECT_EQ(resp.records(1).seq(), 2u);
    EXPECT_EQ(resp.next_seq(), 3u);
    EXPECT_TRUE(resp.verification().ok());
    EXPECT_EQ(resp.verification().verified_records(), 5u);
    ASSERT_TRUE(ReadAudit(ws_.get(), w.id, &resp, 3, 0).ok());
    ASSERT_EQ(resp.records_size(), 3);
    EXPECT_EQ(resp.records(0).seq(), 3u);
    EXPECT_EQ(resp.next_seq(), 0u);
}

TEST_F(AuditTest, EditedByteInAMiddleRecordBreaksTheChainThere)
{
    wstest::Ws w = WithWrites(5);
    std::string path = LogPath(w.id);
    std::vector<std::string> lines = Lines(wstest::ReadHostFile(path));
    ASSERT_EQ(lines.size(), 5u);
    size_t at = lines[2].find("\"f3\"");
    ASSERT_NE(at, std::string::npos);
    lines[2][at + 2] = '9';
    std::string out;
    for (auto &l : lines)
        out += l + "\n";
    wstest::WriteHostFile(path, out);
    ExpectVerdict(w.id, AUDIT_PROBLEM_BROKEN_CHAIN, 3, "hash does not match the record's content",
                  2);
}

TEST_F(AuditTest, DeletedLineBreaksTheChainAtItsSeq)
{
    wstest::Ws w = WithWrites(5);
    std::string path = LogPath(w.id);
    std::vector<std::string> lines = Lines(wstest::ReadHostFile(path));
    std::string out;
    for (size_t i = 0; i < lines.size(); i++)
        if (i != 2)
            out += lines[i] + "\n";
    wstest::WriteHostFile(path, out);
    ExpectVerdict(w.id, AUDIT_PROBLEM_BROKEN_CHAIN, 3, "seq 4 where 3 was expected", 2);
}

TEST_F(AuditTest, SwappedLinesBreakTheChain)
{
    wstest::Ws w = WithWrites(5);
    std::string path = LogPath(w.id);
    std::vector<std::string> lines = Lines(wstest::ReadHostFile(path));
    std::swap(lines[3], lines[4]);
    std::string out;
    for (auto &l : lines)
        out += l + "\n";
    wstest::WriteHostFile(path, out);
    ExpectVerdict(w.id, AUDIT_PROBLEM_BROKEN_CHAIN, 4, "seq 5 where 4 was expected", 3);
}

TEST_F(AuditTest, RecomputedHashIsCaughtByTheNextRecordsPrev)
{
    wstest::Ws w = WithWrites(3);
    std::string path = LogPath(w.id);
    std::vector<std::string> lines = Lines(wstest::ReadHostFile(path));
    // A forger who rewrites record 2 and fixes its own hash still breaks
    // record 3, whose prev covers record 2's exact bytes.
    Json j(lines[1]);
    json_object_set_new(j.j, "path", json_string("forged"));
    json_object_del(j.j, "hash");
    char *body = json_dumps(j.j, JSON_COMPACT | JSON_SORT_KEYS);
    json_object_set_new(j.j, "hash", json_string(wstest::Sha256Hex(body).c_str()));
    free(body);
    char *line = json_dumps(j.j, JSON_COMPACT | JSON_SORT_KEYS);
    lines[1] = line;
    free(line);
    std::string out;
    for (auto &l : lines)
        out += l + "\n";
    wstest::WriteHostFile(path, out);
    ExpectVerdict(w.id, AUDIT_PROBLEM_BROKEN_CHAIN, 3, "prev is not the hash of the record before",
                  2);
}

TEST_F(AuditTest, TruncatedLastLineIsReported)
{
    wstest::Ws w = WithWrites(4);
    std::string path = LogPath(w.id);
    std::string disk = wstest::ReadHostFile(path);
    ASSERT_EQ(truncate(path.c_str(), (off_t)disk.size() - 10), 0);
    ExpectVerdict(w.id, AUDIT_PROBLEM_TRUNCATED, 4, "the file ends inside this record", 3);

    // The next record ends the torn line first and follows it: the log
    // stays broken at the torn record, never silently repaired.
    ASSERT_TRUE(wstest::Write(fs_.get(), w.id, "after", "x").ok());
    ExpectVerdict(w.id, AUDIT_PROBLEM_MALFORMED, 4, "not a JSON object", 3);
}

// Records cut off the end at a line boundary leave a chain that verifies
// by itself; the server knows the last record it appended.
TEST_F(AuditTest, RecordsCutOffTheEndAreTruncated)
{
    wstest::Ws w = WithWrites(4);
    std::string path = LogPath(w.id);
    std::vector<std::string> lines = Lines(wstest::ReadHostFile(path));
    ASSERT_EQ(lines.size(), 4u);
    wstest::WriteHostFile(path, lines[0] + "\n" + lines[1] + "\n");
    ExpectVerdict(w.id, AUDIT_PROBLEM_TRUNCATED, 3,
                  "records 3 to 4, written by this server, are gone from the end", 2);
    // Every record gone: the same.
    wstest::WriteHostFile(path, "");
    ExpectVerdict(w.id, AUDIT_PROBLEM_TRUNCATED, 1,
                  "records 1 to 4, written by this server, are gone from the end", 0);
}

// A record chained correctly to the last one: valid on its own, but the
// server did not write it.
TEST_F(AuditTest, AForgedRecordChainedOnTheEndIsCaught)
{
    wstest::Ws w = WithWrites(2);
    std::string path = LogPath(w.id);
    std::vector<std::string> lines = Lines(wstest::ReadHostFile(path));
    Json j(lines[1]);
    json_object_set_new(j.j, "seq", json_integer(3));
    json_object_set_new(j.j, "path", json_string("forged"));
    json_object_set_new(j.j, "prev", json_string(wstest::Sha256Hex(lines[1]).c_str()));
    json_object_del(j.j, "hash");
    char *body = json_dumps(j.j, JSON_COMPACT | JSON_SORT_KEYS);
    json_object_set_new(j.j, "hash", json_string(wstest::Sha256Hex(body).c_str()));
    free(body);
    char *line = json_dumps(j.j, JSON_COMPACT | JSON_SORT_KEYS);
    std::string forged = line;
    free(line);
    wstest::WriteHostFile(path, lines[0] + "\n" + lines[1] + "\n" + forged + "\n");
    ExpectVerdict(w.id, AUDIT_PROBLEM_BROKEN_CHAIN, 3, "a record this server did not write", 2);

    // The same record instead of the last one, with the chain rebuilt:
    // caught at the record the server wrote there.
    Json k(forged);
    json_object_set_new(k.j, "seq", json_integer(2));
    json_object_set_new(k.j, "prev", json_string(wstest::Sha256Hex(lines[0]).c_str()));
    json_object_del(k.j, "hash");
    body = json_dumps(k.j, JSON_COMPACT | JSON_SORT_KEYS);
    json_object_set_new(k.j, "hash", json_string(wstest::Sha256Hex(body).c_str()));
    free(body);
    line = json_dumps(k.j, JSON_COMPACT | JSON_SORT_KEYS);
    std::string instead = line;
    free(line);
    wstest::WriteHostFile(path, lines[0] + "\n" + instead + "\n");
    ExpectVerdict(w.id, AUDIT_PROBLEM_BROKEN_CHAIN, 2, "not the record this server wrote here", 1);
}

TEST_F(AuditTest, MalformedLineIsReported)
{
    wstest::Ws w = WithWrites(3);
    std::string path = LogPath(w.id);
    std::vector<std::string> lines = Lines(wstest::ReadHostFile(path));
    lines[1] = "{\"seq\":2}";
    std::string out;
    for (auto &l : lines)
        out += l + "\n";
    wstest::WriteHostFile(path, out);
    ExpectVerdict(w.id, AUDIT_PROBLEM_MALFORMED, 2,
                  "seq, ts, event, prev or hash missing or mistyped", 1);
}

TEST_F(AuditTest, OverlongLineIsMalformed)
{
    wstest::Ws w = WithWrites(2);
    std::string path = LogPath(w.id);
    std::string disk = wstest::ReadHostFile(path);
    wstest::WriteHostFile(path, disk + std::string(20000, 'x') + "\n");
    ExpectVerdict(w.id, AUDIT_PROBLEM_MALFORMED, 3, "line longer than 16384 bytes", 2);
}

TEST_F(AuditTest, UnknownWorkspaceAndEmptyLog)
{
    ReadAuditResponse resp;
    EXPECT_WS_ERROR(ReadAudit(ws_.get(), "ws_0123456789abcdef0123456789abcdef", &resp),
                    StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    EXPECT_WS_ERROR(ReadAudit(ws_.get(), "../../ref.key", &resp), StatusCode::NOT_FOUND,
                    "NO_SUCH_WORKSPACE");
    wstest::Ws w = wstest::Open(ws_.get(), "local-bash");
    ASSERT_TRUE(ReadAudit(ws_.get(), w.id, &resp).ok());
    EXPECT_TRUE(resp.verification().ok());
    EXPECT_EQ(resp.records_size(), 0);
}

TEST_F(AuditTest, LogOutlivesCloseAndRestart)
{
    std::string state = server_->state_dir();
    wstest::Ws w = WithWrites(2);
    {
        CloseRequest req;
        req.set_workspace_id(w.id);
        CloseResponse resp;
        ClientContext ctx;
        ASSERT_TRUE(ws_->Close(&ctx, req, &resp).ok());
    }
    ReadAuditResponse resp;
    ASSERT_TRUE(ReadAudit(ws_.get(), w.id, &resp).ok());
    EXPECT_EQ(resp.records_size(), 2);

    // After a restart the chain goes on from the file.
    wstest::Ws w2 = WithWrites(1);
    ASSERT_EQ(server_->Stop(), 0);
    server_ = std::make_unique<wstest::Server>(std::vector<std::string>{}, state);
    ws_ = server_->workspaces();
    fs_ = server_->fs();
    ASSERT_TRUE(wstest::Write(fs_.get(), w2.id, "again", "y").ok());
    ASSERT_TRUE(ReadAudit(ws_.get(), w2.id, &resp).ok());
    EXPECT_TRUE(resp.verification().ok()) << resp.verification().detail();
    ASSERT_EQ(resp.records_size(), 2);
    EXPECT_EQ(resp.records(1).seq(), 2u);
    // The workspace closed before the restart is nobody's now: the server
    // no longer knows whose it was, so it is an unknown workspace (the
    // file stays on disk for the operator).
    EXPECT_WS_ERROR(ReadAudit(ws_.get(), w.id, &resp), StatusCode::NOT_FOUND, "NO_SUCH_WORKSPACE");
    EXPECT_TRUE(wstest::ReadHostFile(LogPath(w.id)).size() > 0);
}

TEST(AuditTenants, AnotherTenantNeverReadsALogOpenOrClosed)
{
    const std::string alice = "tok-alice-audit", bob = "tok-bob-audit";
    std::string tokens = wstest::MakeTempDir("tokens") + "/tokens";
    wstest::WriteHostFile(tokens, "alice " + wstest::Sha256Hex(alice) + "\nbob " +
                                      wstest::Sha256Hex(bob) + "\n");
    wstest::Server srv({"--tokens-file", tokens});
    auto alice_ws = Workspaces::NewStub(srv.Channel(alice));
    auto alice_fs = FileSystem::NewStub(srv.Channel(alice));
    auto bob_ws = Workspaces::NewStub(srv.Channel(bob));
    wstest::Ws w = wstest::Open(alice_ws.get(), "local-bash");
    ASSERT_TRUE(wstest::Write(alice_fs.get(), w.id, "secret.txt", "x").ok());

    ReadAuditResponse resp;
    ASSERT_TRUE(ReadAudit(alice_ws.get(), w.id, &resp).ok());
    EXPECT_EQ(resp.records_size(), 1);
    EXPECT_WS_ERROR(ReadAudit(bob_ws.get(), w.id, &resp), StatusCode::NOT_FOUND,
                    "NO_SUCH_WORKSPACE");

    CloseRequest req;
    req.set_workspace_id(w.id);
    CloseResponse cresp;
    ClientContext ctx;
    ASSERT_TRUE(alice_ws->Close(&ctx, req, &cresp).ok());
    ASSERT_TRUE(ReadAudit(alice_ws.get(), w.id, &resp).ok());
    EXPECT_EQ(resp.records_size(), 1);
    EXPECT_WS_ERROR(ReadAudit(bob_ws.get(), w.id, &resp), StatusCode::NOT_FOUND,
                    "NO_SUCH_WORKSPACE");
}

TEST_F(AuditTest, LogIsOutOfReachOfTheWorkspace)
{
    wstest::Ws w = WithWrites(1);
    std::string path = LogPath(w.id);
    std::string before = wstest::ReadHostFile(path);
    std::string out;
    // Through FileSystem: relative escapes and absolute paths are refused.
    EXPECT_FALSE(wstest::Read(fs_.get(), w.id, "../../audit/" + w.id + ".jsonl", &out).ok());
    EXPECT_FALSE(wstest::Read(fs_.get(), w.id, path, &out).ok());
    EXPECT_FALSE(wstest::Write(fs_.get(), w.id, "../../audit/" + w.id + ".jsonl", "x").ok());
    // A symlink planted in the workspace is not followed out of it.
    std::string link = server_->workspace_dir(w.id) + "/log";
    ASSERT_EQ(symlink(path.c_str(), link.c_str()), 0);
    EXPECT_FALSE(wstest::Read(fs_.get(), w.id, "log", &out).ok());
    EXPECT_FALSE(wstest::Write(fs_.get(), w.id, "log", "forged").ok());
    // The failed calls added nothing, and the log is untouched.
    EXPECT_EQ(wstest::ReadHostFile(path), before);
}

// A command in a local-sandbox workspace sees neither the state directory
// nor the log (only the workspace and the system's read-only paths are
// bound into its sandbox).
TEST_F(AuditTest, SandboxedCommandCannotReachTheLog)
{
    OpenRequest req;
    req.mutable_local_sandbox();
    req.mutable_capabilities()->mutable_fs();
    for (const char *c : {"cat", "sh"})
        req.mutable_capabilities()->mutable_shell()->add_allowed_commands(c);
    OpenResponse oresp;
    {
        ClientContext ctx;
        grpc::Status s = ws_->Open(&ctx, req, &oresp);
        ASSERT_TRUE(s.ok()) << s.error_message();
    }
    std::string id = oresp.workspace().id();
    ASSERT_TRUE(wstest::Write(fs_.get(), id, "a", "x").ok());
    std::string path = LogPath(id);
    std::string before = wstest::ReadHostFile(path);
    RunResponse rr;
    ASSERT_TRUE(wstest::RunProcess(exec_.get(), id,
                                   wstest::ArgvProcess({"sh", "-c",
                                                        "cat '" + path +
                                                            "' || exit 7; echo "
                                                            "x >> '" +
                                                            path + "'"}),
                                   &rr)
                    .ok());
    EXPECT_EQ(rr.exited().exit_code(), 7);
    EXPECT_EQ(rr.stdout(), "");
    // The log holds what it held plus the record of that command.
    std::string after = wstest::ReadHostFile(path);
    ASSERT_GT(after.size(), before.size());
    EXPECT_EQ(after.substr(0, before.size()), before);
    ReadAuditResponse resp;
    ASSERT_TRUE(ReadAudit(ws_.get(), id, &resp).ok());
    EXPECT_TRUE(resp.verification().ok());
    ASSERT_EQ(resp.records_size(), 2);
    EXPECT_EQ(Json(resp.records(1).json()).num("exit_code"), 7);
}

} // namespace
