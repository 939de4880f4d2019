// The hostile-path corpus (tests/corpus/paths/*.case, format in its
// README.md) run end to end: every case, every listed operation, through the
// real workspaced binary over gRPC against a local-bash workspace.
//
// tests/unit/posix:fs_test runs the same corpus against server/posix/fs.c
// directly; here the expected errno name of each (case, op) goes through the
// server's one error table (server/rpc/status.c) and the exact gRPC code and
// ErrorInfo reason must come back. The few places where the RPC layer
// legitimately answers differently from the fs module are listed, with the
// reason, in kRpcDifferences below; anything else that differs is a failure.
//
// The fixture is the corpus README's tree, built inside the workspace
// directory; `outside/` is its sibling (<state>/workspaces/outside), so the
// fixture's relative links (../outside) resolve to it exactly as in the unit
// test. After every operation nothing outside the workspace may have changed
// and a refused operation may not have changed the workspace either.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "tests/corpus/corpus.h"
#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;

namespace fs = std::filesystem;

namespace
{

// ---- errno name -> what the client sees (the table in server/rpc/status.c) ----

struct RpcResult {
    StatusCode code;
    std::string reason; // empty for OK
};

const std::map<std::string, RpcResult> &RpcTable()
{
    static const std::map<std::string, RpcResult> table = {
        {"OK", {StatusCode::OK, ""}},
        {"EXDEV", {StatusCode::INVALID_ARGUMENT, "PATH_ESCAPE"}},
        {"ELOOP", {StatusCode::INVALID_ARGUMENT, "SYMLINK_LOOP"}},
        {"WS_ESYMLINK_LEAF", {StatusCode::INVALID_ARGUMENT, "SYMLINK_LEAF"}},
        {"WS_EBADPATH", {StatusCode::INVALID_ARGUMENT, "BAD_PATH"}},
        {"ENAMETOOLONG", {StatusCode::INVALID_ARGUMENT, "BAD_PATH"}},
        {"WS_EMALFORMED", {StatusCode::INVALID_ARGUMENT, "MALFORMED"}},
        {"EINVAL", {StatusCode::INVALID_ARGUMENT, "MALFORMED"}},
        {"WS_ELIMIT", {StatusCode::INVALID_ARGUMENT, "LIMIT"}},
        {"EFBIG", {StatusCode::RESOURCE_EXHAUSTED, "SIZE_CAP"}},
        {"ENOENT", {StatusCode::NOT_FOUND, "NO_SUCH_FILE"}},
        {"WS_ESPECIAL", {StatusCode::FAILED_PRECONDITION, "SPECIAL_FILE"}},
        {"WS_EHARDLINK", {StatusCode::FAILED_PRECONDITION, "HARDLINK"}},
        {"EISDIR", {StatusCode::FAILED_PRECONDITION, "IS_DIRECTORY"}},
        {"ENOTDIR", {StatusCode::FAILED_PRECONDITION, "NOT_DIRECTORY"}},
        {"ENOTEMPTY", {StatusCode::FAILED_PRECONDITION, "NOT_EMPTY"}},
        {"EEXIST", {StatusCode::ALREADY_EXISTS, "EXISTS"}},
        // Not in the table: INTERNAL (with an "errno" metadata entry).
        {"EBUSY", {StatusCode::INTERNAL, "INTERNAL"}},
        {"EAGAIN", {StatusCode::INTERNAL, "INTERNAL"}},
        {"ESTALE", {StatusCode::INTERNAL, "INTERNAL"}},
    };
    return table;
}

// ---- where the RPC layer legitimately differs from the fs module ----

enum class Why {
    // Proto3 strings are UTF-8: server/rpc/validate.c refuses a request whose
    // path is not (INVALID_ARGUMENT, MALFORMED) before any method runs, so no
    // RPC can name such a file (ListDir returns existing ones in path_bytes).
    kNotUtf8,
    // ListDir (like Glob and Grep) takes an empty path as the root.
    kEmptyIsRoot,
    // ws_vfs_check_path (server/vfs/path.c) refuses, before any lookup, a
    // path whose ".." components climb above the root counted lexically:
    // PATH_ESCAPE whatever the names in between are. No corpus case
    // currently answers differently because of it.
    kLexicalEscape,
    // MakeDir and Move stat the new path after a success; that stat can fail
    // where the operation itself succeeded. No corpus case currently hits it.
    kStatAfterSuccess,
};

struct RpcDifference {
    const char *file; // the .case file
    const char *op;   // "*": every op the case lists
    const char *rpc;  // the error name (RpcTable) of the RPC's answer
    Why why;
};

// Checked by CorpusFiles.DifferencesTableIsCurrent: each row must change
// the expectation, and its reason must hold for the case's path.
const std::vector<RpcDifference> kRpcDifferences = {
    {"invalid_utf8.case", "*", "WS_EMALFORMED", Why::kNotUtf8},
    {"utf8_overlong_dot.case", "*", "WS_EMALFORMED", Why::kNotUtf8},
    {"empty.case", "opendir", "OK", Why::kEmptyIsRoot},
};

const RpcDifference *FindDifference(const std::string &file, const std::string &op)
{
    for (const auto &d : kRpcDifferences)
        if (file == d.file && (op == d.op || std::string(d.op) == "*"))
            return &d;
    return nullptr;
}

// ws_vfs_check_path's lexical rule, to check the table's kLexicalEscape rows.
bool ClimbsAboveRoot(const std::string &path)
{
    long depth = 0;
    std::stringstream ss(path);
    std::string comp;
    while (std::getline(ss, comp, '/')) {
        if (comp == "..") {
            if (--depth < 0)
                return true;
        } else if (!comp.empty() && comp != ".") {
            depth++;
        }
    }
    return false;
}

bool ValidUtf8(const std::string &s)
{
    size_t i = 0;
    while (i < s.size()) {
        unsigned char c = (unsigned char)s[i];
        size_t len;
        unsigned char lo = 0x80, hi = 0xbf;
        if (c == 0)
            return false;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf)
            len = 2;
        else if (c >= 0xe0 && c <= 0xef)
            len = 3;
        else if (c >= 0xf0 && c <= 0xf4)
            len = 4;
        else
            return false;
        if (i + len > s.size())
            return false;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
        else if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
        if ((unsigned char)s[i + 1] < lo || (unsigned char)s[i + 1] > hi)
            return false;
        for (size_t k = 2; k < len; k++)
            if ((unsigned char)s[i + k] < 0x80 || (unsigned char)s[i + k] > 0xbf)
                return false;
        i += len;
    }
    return true;
}

// Whether a table row's reason actually applies to (case, op).
bool DifferenceApplies(const RpcDifference &d, const wscorpus::CorpusCase &c, const std::string &op)
{
    const std::string rpc = d.rpc;
    switch (d.why) {
    case Why::kNotUtf8:
        return !ValidUtf8(c.path) && rpc == "WS_EMALFORMED";
    case Why::kEmptyIsRoot:
        return c.path.empty() && op == "opendir" && rpc == "OK";
    case Why::kLexicalEscape:
        return ClimbsAboveRoot(c.path) && rpc == "EXDEV";
    case Why::kStatAfterSuccess:
        return c.expect.at(op) == "OK" &&
               (op == "mkdir" || op == "mkdir_p" || op == "move_from" || op == "move_to");
    }
    return false;
}

// The corpus README's tree: `ws` is the workspace directory, `outside` its
// sibling. Rebuilt in place (the server keeps the workspace directory open).
struct Fixture {
    std::string ws, outside;
    bool have_chardev = false;

    void Clear()
    {
        std::error_code ec;
        for (const auto &e : fs::directory_iterator(ws))
            fs::remove_all(e.path(), ec);
        fs::remove_all(outside, ec);
    }

    void Build()
    {
        Clear();
        have_chardev = wscorpus::BuildFixture(ws, outside);
    }
};

// Whether this process may make device nodes at all: root with CAP_MKNOD,
// in the initial user namespace (the kernel refuses device nodes made from
// any other). `why` says what is missing.
bool MayMakeDevices(std::string *why)
{
    if (geteuid() != 0) {
        *why = "not root";
        return false;
    }
    std::istringstream status(wstest::ReadHostFile("/proc/self/status"));
    unsigned long long eff = 0;
    for (std::string line; std::getline(status, line);)
        if (line.compare(0, 7, "CapEff:") == 0)
            eff = std::strtoull(line.c_str() + 7, nullptr, 16);
    if (!(eff & (1ULL << 27))) {
        *why = "no CAP_MKNOD in the effective capabilities";
        return false;
    }
    std::istringstream map(wstest::ReadHostFile("/proc/self/uid_map"));
    std::string inside, outside, count;
    map >> inside >> outside >> count;
    if (inside != "0" || outside != "0" || count != "4294967295") {
        *why = "in a user namespace other than the initial one";
        return false;
    }
    return true;
}

// ---- the operations over gRPC ----

std::chrono::system_clock::time_point Deadline(int seconds)
{
    return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

// What the outside tree holds; a refused read must not return any of it.
const std::vector<std::string> kOutsideBytes = {"canary", "outside-f", "inner\n"};

grpc::Status RunOp(FileSystem::Stub *stub, const std::string &id, const std::string &op,
                   const std::string &path)
{
    if (op == "stat") {
        ClientContext ctx;
        ctx.set_deadline(Deadline(10));
        StatRequest req;
        StatResponse resp;
        req.set_workspace_id(id);
        req.set_path(path);
        return stub->Stat(&ctx, req, &resp);
    }
    if (op == "open_read") {
        ClientContext ctx;
        ctx.set_deadline(Deadline(5));
        ReadFileRequest req;
        req.set_workspace_id(id);
        req.set_path(path);
        auto r = stub->ReadFile(&ctx, req);
        ReadFileResponse m;
        std::string data;
        while (r->Read(&m))
            data += m.data();
        grpc::Status s = r->Finish();
        if (!s.ok()) {
            for (const auto &secret : kOutsideBytes) {
                EXPECT_EQ(data.find(secret), std::string::npos)
                    << "a refused read returned outside bytes: " << data;
            }
        }
        return s;
    }
    if (op == "opendir") {
        ClientContext ctx;
        ctx.set_deadline(Deadline(10));
        ListDirRequest req;
        ListDirResponse resp;
        req.set_workspace_id(id);
        req.set_path(path);
        grpc::Status s = stub->ListDir(&ctx, req, &resp);
        // Names only the outside tree has: a listing never shows them.
        for (const auto &e : resp.entries()) {
            std::string name = e.path().substr(e.path().rfind('/') + 1);
            EXPECT_TRUE(name != "canary" && name != "inner" && name != "f")
                << "listed an outside entry: " << e.path();
        }
        return s;
    }
    if (op == "write" || op == "write_p") {
        ClientContext ctx;
        ctx.set_deadline(Deadline(10));
        WriteFileResponse resp;
        auto w = stub->WriteFile(&ctx, &resp);
        WriteFileRequest h;
        h.mutable_header()->set_workspace_id(id);
        h.mutable_header()->set_path(path);
        h.mutable_header()->set_create_parents(op == "write_p");
        if (w->Write(h)) {
            WriteFileRequest d;
            d.set_data("data");
            d.set_finish(true);
            w->Write(d);
        }
        w->WritesDone();
        return w->Finish();
    }
    if (op == "mkdir" || op == "mkdir_p") {
        ClientContext ctx;
        ctx.set_deadline(Deadline(10));
        MakeDirRequest req;
        MakeDirResponse resp;
        req.set_workspace_id(id);
        req.set_path(path);
        req.set_parents(op == "mkdir_p");
        return stub->MakeDir(&ctx, req, &resp);
    }
    if (op == "remove" || op == "remove_r") {
        ClientContext ctx;
        ctx.set_deadline(Deadline(10));
        RemoveRequest req;
        RemoveResponse resp;
        req.set_workspace_id(id);
        req.set_path(path);
        req.set_recursive(op == "remove_r");
        return stub->Remove(&ctx, req, &resp);
    }
    if (op == "move_from" || op == "move_to") {
        ClientContext ctx;
        ctx.set_deadline(Deadline(10));
        MoveRequest req;
        MoveResponse resp;
        req.set_workspace_id(id);
        req.set_from_path(op == "move_from" ? path : "file");
        req.set_to_path(op == "move_from" ? "moved_here" : path);
        return stub->Move(&ctx, req, &resp);
    }
    ADD_FAILURE() << "unknown op " << op;
    return grpc::Status(StatusCode::UNKNOWN, "unknown op");
}

std::string Describe(const grpc::Status &s)
{
    if (s.ok())
        return "OK";
    wstest::Error e = wstest::Decode(s);
    return "code " + std::to_string(e.code) + " reason '" + e.reason + "' (" + e.message + ")";
}

// A printable, bounded spelling of a corpus path.
std::string Printable(const std::string &path)
{
    std::string out;
    for (unsigned char ch : path.substr(0, 80)) {
        if (ch == '\n')
            out += "\\n";
        else if (ch == '\t')
            out += "\\t";
        else if (ch < 0x20 || ch >= 0x7f) {
            char buf[8];
            snprintf(buf, sizeof(buf), "\\x%02x", ch);
            out += buf;
        } else
            out += (char)ch;
    }
    if (path.size() > 80)
        out += "...(" + std::to_string(path.size()) + " bytes)";
    return out;
}

// ---- the test ----

class Corpus : public ::testing::TestWithParam<std::string>
{
  public:
    static void SetUpTestSuite()
    {
        srv_ = new wstest::Server();
    }
    static void TearDownTestSuite()
    {
        delete srv_;
        srv_ = nullptr;
    }

  protected:
    static wstest::Server *srv_;
};

wstest::Server *Corpus::srv_ = nullptr;

TEST(CorpusFiles, Present)
{
    EXPECT_GE(wscorpus::CorpusFiles().size(), 40u)
        << "corpus not found in " << wscorpus::CorpusDir();
}

// Every row of the differences table names a real (case, op), changes its
// expectation, and its stated reason holds for that case's path.
TEST(CorpusFiles, DifferencesTableIsCurrent)
{
    for (const auto &d : kRpcDifferences) {
        wscorpus::CorpusCase c;
        std::string err;
        ASSERT_TRUE(wscorpus::ParseCase(d.file, &c, &err)) << d.file << ": " << err;
        ASSERT_TRUE(RpcTable().count(d.rpc)) << d.rpc;
        ASSERT_TRUE(std::string(d.op) == "*" || c.expect.count(d.op))
            << d.file << " has no " << d.op;
        for (const auto &[op, unit_want] : c.expect) {
            if (std::string(d.op) != "*" && op != d.op)
                continue;
            EXPECT_NE(unit_want, d.rpc) << d.file << " " << op << ": not a difference";
            EXPECT_TRUE(DifferenceApplies(d, c, op))
                << d.file << " " << op << ": the stated reason does not apply";
        }
    }
}

TEST_P(Corpus, Case)
{
    wscorpus::CorpusCase c;
    std::string err;
    ASSERT_TRUE(wscorpus::ParseCase(GetParam(), &c, &err)) << GetParam() << ": " << err;
    ASSERT_NE(srv_, nullptr);

    auto wsstub = srv_->workspaces();
    auto fsstub = srv_->fs();
    wstest::Ws ws = wstest::Open(wsstub.get(), "local-bash");
    Fixture fx;
    fx.ws = srv_->workspace_dir(ws.id);
    const std::string base = fs::path(fx.ws).parent_path().string();
    fx.outside = base + "/outside";
    fx.Build();
    if (c.requires_.count("chardev") && !fx.have_chardev) {
        fx.Clear();
        // Where this process may make device nodes (how the suite runs) the
        // device must be made: a missing case is a failure, not a skip.
        std::string why;
        if (MayMakeDevices(&why))
            FAIL() << "mknod of a character device failed although this process may make "
                      "device nodes";
        GTEST_SKIP() << "this case needs a character device, and device nodes cannot be made "
                        "here: "
                     << why;
    }

    std::map<std::string, std::string> outside_snap = wstest::Snapshot(fx.outside);
    std::string outside_sig = wscorpus::TreeSignature(fx.outside);
    std::string ws_sig = wscorpus::TreeSignature(fx.ws);
    std::set<std::string> base_names = wscorpus::ListNames(base);

    for (const auto &[op, unit_want] : c.expect) {
        const RpcDifference *diff = FindDifference(c.file, op);
        const std::string want_name = diff ? diff->rpc : unit_want;
        const RpcResult &want = RpcTable().at(want_name);
        const std::string what = c.file + ": " + op + "(\"" + Printable(c.path) + "\") want " +
                                 want_name + (diff ? " (RPC difference)" : "");

        grpc::Status s = RunOp(fsstub.get(), ws.id, op, c.path);
        if (want.code == StatusCode::OK)
            EXPECT_TRUE(s.ok()) << what << ", got " << Describe(s);
        else
            EXPECT_TRUE(wstest::IsError(s, want.code, want.reason)) << what;

        EXPECT_EQ(wstest::Snapshot(fx.outside), outside_snap) << what << ": outside changed";
        EXPECT_EQ(wscorpus::TreeSignature(fx.outside), outside_sig) << what << ": outside changed";
        EXPECT_EQ(wscorpus::ListNames(base), base_names)
            << what << ": something appeared next to ws/";
        std::vector<std::string> tmp = wscorpus::TempFiles(fx.ws);
        EXPECT_TRUE(tmp.empty()) << what << ": temp file left: " << tmp[0];
        if (wscorpus::TreeSignature(fx.ws) != ws_sig) {
            // A refused operation changes nothing; only mkdir -p and
            // create_parents may leave directories made before the failure.
            // (An operation that succeeded at the fs level may still be
            // reported as failed: kStatAfterSuccess.)
            bool stat_after = diff && diff->why == Why::kStatAfterSuccess;
            EXPECT_TRUE(s.ok() || stat_after || op == "mkdir_p" || op == "write_p")
                << what << ": failed with " << Describe(s) << " but changed the workspace";
            fx.Build();
            outside_snap = wstest::Snapshot(fx.outside);
            outside_sig = wscorpus::TreeSignature(fx.outside);
            ws_sig = wscorpus::TreeSignature(fx.ws);
        }
    }

    // Closing removes the workspace tree, never what its links point at.
    {
        ClientContext ctx;
        ctx.set_deadline(Deadline(10));
        CloseRequest req;
        CloseResponse resp;
        req.set_workspace_id(ws.id);
        EXPECT_TRUE(wsstub->Close(&ctx, req, &resp).ok());
    }
    EXPECT_EQ(wstest::Snapshot(fx.outside), outside_snap) << c.file << ": Close changed outside";
    std::error_code ec;
    fs::remove_all(fx.outside, ec);
}

INSTANTIATE_TEST_SUITE_P(Paths, Corpus, ::testing::ValuesIn(wscorpus::CorpusFiles()),
                         wscorpus::CaseName);

} // namespace
