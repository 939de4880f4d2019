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
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;

namespace fs = std::filesystem;

namespace
{

// ---- the corpus format (copied from tests/unit/posix/fs_test.cc) ----

const std::set<std::string> &ErrorNames()
{
    static const std::set<std::string> names = {
        "OK",          "ENOENT",       "EXDEV",       "ELOOP",        "ENOTDIR",
        "EISDIR",      "EEXIST",       "ENOTEMPTY",   "ENAMETOOLONG", "EINVAL",
        "EBUSY",       "EFBIG",        "EAGAIN",      "ESTALE",       "WS_ESYMLINK_LEAF",
        "WS_ESPECIAL", "WS_EHARDLINK", "WS_EBADPATH", "WS_ELIMIT",
    };
    return names;
}

struct CorpusCase {
    std::string file; // base name
    std::string path;
    std::map<std::string, std::string> expect; // op -> error name
    std::set<std::string> requires_;
};

const std::vector<std::string> kOps = {"stat",     "open_read", "opendir", "write",
                                       "write_p",  "mkdir",     "mkdir_p", "remove",
                                       "remove_r", "move_from", "move_to"};

// Decodes \\, \n, \t, \xHH and \r{N:text} (text repeated N times).
bool Unescape(const std::string &in, std::string *out, std::string *err)
{
    out->clear();
    for (size_t i = 0; i < in.size(); i++) {
        if (in[i] != '\\') {
            out->push_back(in[i]);
            continue;
        }
        if (++i == in.size()) {
            *err = "dangling backslash";
            return false;
        }
        switch (in[i]) {
        case '\\':
            out->push_back('\\');
            break;
        case 'n':
            out->push_back('\n');
            break;
        case 't':
            out->push_back('\t');
            break;
        case 'x':
            if (i + 2 >= in.size()) {
                *err = "short \\x";
                return false;
            }
            out->push_back((char)std::stoi(in.substr(i + 1, 2), nullptr, 16));
            i += 2;
            break;
        case 'r': {
            size_t close = in.find('}', i);
            size_t colon = in.find(':', i);
            if (i + 1 >= in.size() || in[i + 1] != '{' || close == std::string::npos ||
                colon == std::string::npos || colon > close) {
                *err = "bad \\r{N:text}";
                return false;
            }
            int n = std::stoi(in.substr(i + 2, colon - i - 2));
            std::string unit = in.substr(colon + 1, close - colon - 1);
            for (int k = 0; k < n; k++)
                *out += unit;
            i = close;
            break;
        }
        default:
            *err = std::string("unknown escape \\") + in[i];
            return false;
        }
    }
    return true;
}

std::string CorpusDir()
{
    const char *srcdir = getenv("TEST_SRCDIR");
    const char *ws = getenv("TEST_WORKSPACE");
    if (!srcdir || !ws)
        return "";
    return std::string(srcdir) + "/" + ws + "/tests/corpus/paths";
}

std::vector<std::string> CorpusFiles()
{
    std::vector<std::string> files;
    std::error_code ec;
    for (const auto &e : fs::directory_iterator(CorpusDir(), ec))
        if (e.path().extension() == ".case")
            files.push_back(e.path().filename().string());
    std::sort(files.begin(), files.end());
    return files;
}

bool ParseCase(const std::string &file, CorpusCase *c, std::string *err)
{
    std::ifstream in(CorpusDir() + "/" + file);
    if (!in) {
        *err = "cannot open";
        return false;
    }
    c->file = file;
    bool have_path = false;
    std::string all, line;
    int lineno = 0;
    while (std::getline(in, line)) {
        lineno++;
        if (line.empty() || line[0] == '#')
            continue;
        size_t colon = line.find(':');
        if (colon == std::string::npos) {
            *err = "line " + std::to_string(lineno) + ": no ':'";
            return false;
        }
        std::string key = line.substr(0, colon);
        std::string value = line.substr(colon + 1);
        if (key == "path") {
            // Exactly one space after the colon is syntax; the rest is the path.
            if (!value.empty() && value[0] == ' ')
                value.erase(0, 1);
            if (!Unescape(value, &c->path, err)) {
                *err = "line " + std::to_string(lineno) + ": " + *err;
                return false;
            }
            have_path = true;
            continue;
        }
        value.erase(0, value.find_first_not_of(" \t"));
        value.erase(value.find_last_not_of(" \t") + 1);
        if (key == "requires") {
            c->requires_.insert(value);
            continue;
        }
        if (!ErrorNames().count(value)) {
            *err = "line " + std::to_string(lineno) + ": unknown result " + value;
            return false;
        }
        if (key == "all") {
            all = value;
            continue;
        }
        if (std::find(kOps.begin(), kOps.end(), key) == kOps.end()) {
            *err = "line " + std::to_string(lineno) + ": unknown op " + key;
            return false;
        }
        c->expect[key] = value;
    }
    if (!have_path) {
        *err = "no path";
        return false;
    }
    if (!all.empty())
        for (const auto &op : kOps)
            c->expect.emplace(op, all);
    if (c->expect.empty()) {
        *err = "no expectations";
        return false;
    }
    return true;
}

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
bool DifferenceApplies(const RpcDifference &d, const CorpusCase &c, const std::string &op)
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

// ---- host-side helpers (copied from tests/unit/posix/fs_test.cc) ----

std::string ReadAll(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void WriteAll(const std::string &path, const std::string &content, mode_t mode = 0644)
{
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0 || write(fd, content.data(), content.size()) != (ssize_t)content.size() ||
        fchmod(fd, mode) != 0)
        abort();
    close(fd);
}

// Everything observable about a tree, without following symlinks (names,
// types, modes, sizes, mtimes, contents, link targets).
std::string TreeSignature(const std::string &root)
{
    std::map<std::string, std::string> entries;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
        const std::string p = it->path().string();
        struct stat st;
        if (lstat(p.c_str(), &st) != 0) {
            entries[p] = "vanished";
            continue;
        }
        std::ostringstream d;
        d << std::oct << st.st_mode << std::dec << " " << st.st_size << " " << st.st_mtim.tv_sec
          << "." << st.st_mtim.tv_nsec;
        if (S_ISREG(st.st_mode))
            d << " content=" << ReadAll(p);
        else if (S_ISLNK(st.st_mode))
            d << " -> " << fs::read_symlink(p, ec).string();
        entries[p] = d.str();
    }
    struct stat st;
    lstat(root.c_str(), &st);
    std::string sig = "root mtime " + std::to_string(st.st_mtim.tv_nsec) + "\n";
    for (const auto &[p, d] : entries)
        sig += p + ": " + d + "\n";
    return sig;
}

std::set<std::string> ListNames(const std::string &dir)
{
    std::set<std::string> names;
    for (const auto &e : fs::directory_iterator(dir))
        names.insert(e.path().filename().string());
    return names;
}

std::vector<std::string> TempFiles(const std::string &root)
{
    std::vector<std::string> found;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
         it.increment(ec))
        if (it->path().filename().string().rfind(".ws-tmp-", 0) == 0)
            found.push_back(it->path().string());
    return found;
}

// The corpus README's tree: `ws` is the workspace directory, `outside` its
// sibling. Rebuilt in place (the server keeps the workspace directory open).
struct Fixture {
    std::string ws, outside;
    bool have_chardev = false;

    void Symlink(const std::string &target, const std::string &rel)
    {
        if (symlink(target.c_str(), (ws + "/" + rel).c_str()) != 0)
            abort();
    }

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
        mkdir(outside.c_str(), 0755);
        mkdir((outside + "/sub").c_str(), 0755);
        WriteAll(outside + "/canary", "canary\n");
        WriteAll(outside + "/f", "outside-f\n");
        WriteAll(outside + "/sub/inner", "inner\n");

        WriteAll(ws + "/file", "hello");
        mkdir((ws + "/dir").c_str(), 0755);
        mkdir((ws + "/dir/sub").c_str(), 0755);
        mkdir((ws + "/empty").c_str(), 0755);
        WriteAll(ws + "/dir/nested", "nested");
        Symlink("..", "dir/up");
        Symlink("../..", "dir/upup");
        Symlink(outside, "abs_out");
        Symlink(outside + "/canary", "abs_out_file");
        Symlink("../outside", "rel_out");
        Symlink("../outside/canary", "rel_out_file");
        Symlink("dir", "in_dir");
        Symlink("file", "in_file");
        Symlink("/proc/self/root", "proc_root");
        Symlink("/proc/self/cwd", "proc_cwd");
        Symlink("../../../../../../../../../../../../../../../../proc/self/root", "proc_rel");
        Symlink("loop_b", "loop_a");
        Symlink("loop_a", "loop_b");
        Symlink("self_loop", "self_loop");
        Symlink("..", "parent_link");
        Symlink(".", "dot_link");
        Symlink("nowhere", "dangling");
        if (mkfifo((ws + "/fifo").c_str(), 0644) != 0)
            abort();
        if (link((outside + "/canary").c_str(), (ws + "/hardlink_out").c_str()) != 0)
            abort();
        WriteAll(ws + "/pair_a", "pair");
        if (link((ws + "/pair_a").c_str(), (ws + "/pair_b").c_str()) != 0)
            abort();
        have_chardev = mknod((ws + "/chardev").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0;

        // sun_path is short and TEST_TMPDIR long: bind by a relative name.
        int cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = {};
        sa.sun_family = AF_UNIX;
        strcpy(sa.sun_path, "sock");
        if (cwd < 0 || s < 0 || chdir(ws.c_str()) != 0 ||
            bind(s, (struct sockaddr *)&sa, sizeof(sa)) != 0 || fchdir(cwd) != 0)
            abort();
        close(s);
        close(cwd);
    }
};

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
    EXPECT_GE(CorpusFiles().size(), 40u) << "corpus not found in " << CorpusDir();
}

// Every row of the differences table names a real (case, op), changes its
// expectation, and its stated reason holds for that case's path.
TEST(CorpusFiles, DifferencesTableIsCurrent)
{
    for (const auto &d : kRpcDifferences) {
        CorpusCase c;
        std::string err;
        ASSERT_TRUE(ParseCase(d.file, &c, &err)) << d.file << ": " << err;
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
    CorpusCase c;
    std::string err;
    ASSERT_TRUE(ParseCase(GetParam(), &c, &err)) << GetParam() << ": " << err;
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
        GTEST_SKIP() << "cannot mknod here";
    }

    std::map<std::string, std::string> outside_snap = wstest::Snapshot(fx.outside);
    std::string outside_sig = TreeSignature(fx.outside);
    std::string ws_sig = TreeSignature(fx.ws);
    std::set<std::string> base_names = ListNames(base);

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
        EXPECT_EQ(TreeSignature(fx.outside), outside_sig) << what << ": outside changed";
        EXPECT_EQ(ListNames(base), base_names) << what << ": something appeared next to ws/";
        std::vector<std::string> tmp = TempFiles(fx.ws);
        EXPECT_TRUE(tmp.empty()) << what << ": temp file left: " << tmp[0];
        if (TreeSignature(fx.ws) != ws_sig) {
            // A refused operation changes nothing; only mkdir -p and
            // create_parents may leave directories made before the failure.
            // (An operation that succeeded at the fs level may still be
            // reported as failed: kStatAfterSuccess.)
            bool stat_after = diff && diff->why == Why::kStatAfterSuccess;
            EXPECT_TRUE(s.ok() || stat_after || op == "mkdir_p" || op == "write_p")
                << what << ": failed with " << Describe(s) << " but changed the workspace";
            fx.Build();
            outside_snap = wstest::Snapshot(fx.outside);
            outside_sig = TreeSignature(fx.outside);
            ws_sig = TreeSignature(fx.ws);
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

std::string CaseName(const ::testing::TestParamInfo<std::string> &info)
{
    std::string name;
    for (char ch : info.param.substr(0, info.param.size() - 5))
        name += isalnum((unsigned char)ch) ? ch : '_';
    return name;
}

INSTANTIATE_TEST_SUITE_P(Paths, Corpus, ::testing::ValuesIn(CorpusFiles()), CaseName);

} // namespace
