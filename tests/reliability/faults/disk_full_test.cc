// A full disk under the real server: its state directory (records,
// workspaces, snapshots, audit log) on a small tmpfs that the test fills.
// Every call that needs space ends RESOURCE_EXHAUSTED / NO_SPACE, the
// content it would have replaced is intact (bytes and hash), the server
// keeps serving and succeeds again once space is freed, and a server
// restarted on the same directory sees nothing half-written.
//
// The audit log on a full disk: the call it records stands (its change was
// made, and saying otherwise would invite a retry of a done change), the
// record is dropped whole (never a torn line), the server logs
// "audit.failed" and counts workspaced_audit_records_lost_total{event}, and
// the chain verifies once space is back.
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

using grpc::ClientContext;
using grpc::StatusCode;
using namespace workspace::v1;

namespace
{

// A tmpfs of `size` mounted on a fresh directory, unmounted (lazily, should
// a process still hold it) when it goes.
class SmallFs
{
  public:
    explicit SmallFs(const std::string &size, const std::string &at = "")
    {
        dir_ = at.empty() ? wstest::MakeTempDir("wsfull") : at;
        std::string opts = "size=" + size + ",mode=0711";
        mounted_ = mount("tmpfs", dir_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) == 0;
        if (!mounted_) {
            ADD_FAILURE() << "mount tmpfs on " << dir_ << ": " << strerror(errno)
                          << " (the test runs as root, outside any sandbox)";
        }
    }
    ~SmallFs()
    {
        if (mounted_ && umount(dir_.c_str()) < 0) {
            EXPECT_EQ(umount2(dir_.c_str(), MNT_DETACH), 0) << strerror(errno);
        }
    }
    const std::string &dir() const
    {
        return dir_;
    }
    bool mounted() const
    {
        return mounted_;
    }
    // Writes a filler file until the file system refuses a single byte.
    void Fill()
    {
        filler_ = dir_ + "/filler." + std::to_string(n_fill_++);
        int fd = open(filler_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ASSERT_GE(fd, 0) << strerror(errno);
        std::string chunk(64 * 1024, 'f');
        for (size_t want = chunk.size(); want > 0; want /= 2)
            while (write(fd, chunk.data(), want) == (ssize_t)want) {
            }
        EXPECT_EQ(write(fd, "x", 1), -1);
        EXPECT_EQ(errno, ENOSPC);
        close(fd);
        fillers_.push_back(filler_);
    }
    // Removes every filler: the space is back.
    void Free()
    {
        for (const auto &f : fillers_)
            EXPECT_EQ(unlink(f.c_str()), 0) << f << ": " << strerror(errno);
        fillers_.clear();
    }
    uint64_t FreeBytes() const
    {
        struct statfs st;
        if (statfs(dir_.c_str(), &st) < 0)
            return ~0ull;
        return (uint64_t)st.f_bavail * st.f_bsize;
    }

  private:
    std::string dir_;
    std::string filler_;
    std::vector<std::string> fillers_;
    int n_fill_ = 0;
    bool mounted_ = false;
};

// Every path under `dir` whose name says it is a half-done write: the
// server's transient names (.ws-tmp-*, .ws-stage-*, .ws-trash-*) and a
// record's temporary (*.tmp).
std::vector<std::string> *g_found;
int Collect(const char *path, const struct stat *, int, struct FTW *ftw)
{
    std::string name = path + ftw->base;
    if (name.rfind(".ws-tmp-", 0) == 0 || name.rfind(".ws-stage-", 0) == 0 ||
        name.rfind(".ws-trash-", 0) == 0 ||
        (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0))
        g_found->push_back(path);
    return 0;
}
std::vector<std::string> HalfWritten(const std::string &dir)
{
    std::vector<std::string> found;
    g_found = &found;
    nftw(dir.c_str(), Collect, 32, FTW_PHYS);
    g_found = nullptr;
    return found;
}

std::string Joined(const std::vector<std::string> &v)
{
    std::string s;
    for (const auto &x : v)
        s += x + "\n";
    return s;
}

grpc::Status Edit(FileSystem::Stub *fs, const std::string &id, const std::string &path,
                  const std::string &from, const std::string &to, EditFileResponse *resp)
{
    EditFileRequest req;
    req.set_workspace_id(id);
    req.set_path(path);
    req.set_old_text(from);
    req.set_new_text(to);
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return fs->EditFile(&ctx, req, resp);
}

// A tar (POSIX ustar) of regular files, built here: name -> content.
std::string Tar(const std::vector<std::pair<std::string, std::string>> &files)
{
    std::string out;
    for (const auto &[name, data] : files) {
        char h[512] = {};
        snprintf(h, 100, "%s", name.c_str());
        snprintf(h + 100, 8, "%07o", 0644);
        snprintf(h + 108, 8, "%07o", 0);
        snprintf(h + 116, 8, "%07o", 0);
        snprintf(h + 124, 12, "%011o", (unsigned)data.size());
        snprintf(h + 136, 12, "%011o", 0);
        h[156] = '0';
        memcpy(h + 257, "ustar", 6);
        memcpy(h + 263, "00", 2);
        memset(h + 148, ' ', 8);
        unsigned sum = 0;
        for (int i = 0; i < 512; i++)
            sum += (unsigned char)h[i];
        snprintf(h + 148, 8, "%06o", sum);
        out.append(h, 512);
        out += data;
        out.append((512 - data.size() % 512) % 512, '\0');
    }
    out.append(1024, '\0');
    return out;
}

grpc::Status WriteArchive(FileSystem::Stub *fs, const std::string &id, const std::string &path,
                          const std::string &tar)
{
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    WriteArchiveResponse resp;
    auto w = fs->WriteArchive(&ctx, &resp);
    WriteArchiveRequest h;
    h.mutable_header()->set_workspace_id(id);
    h.mutable_header()->set_path(path);
    h.mutable_header()->set_format(ARCHIVE_FORMAT_TAR);
    h.mutable_header()->set_create_parents(true);
    h.mutable_header()->set_require_finish(true);
    if (w->Write(h)) {
        WriteArchiveRequest d;
        d.set_data(tar);
        d.set_finish(true);
        w->Write(d);
    }
    w->WritesDone();
    return w->Finish();
}

grpc::Status TakeSnapshot(Workspaces::Stub *ws, const std::string &id, const std::string &name,
                          SnapshotResponse *resp)
{
    SnapshotRequest req;
    req.set_workspace_id(id);
    req.set_name(name);
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return ws->Snapshot(&ctx, req, resp);
}

std::vector<std::string> SnapshotIds(Workspaces::Stub *ws)
{
    ListSnapshotsRequest req;
    ListSnapshotsResponse resp;
    ClientContext ctx;
    grpc::Status s = ws->ListSnapshots(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<std::string> ids;
    for (const auto &snap : resp.snapshots())
        ids.push_back(snap.id());
    return ids;
}

grpc::Status OpenBash(Workspaces::Stub *ws, OpenResponse *resp)
{
    OpenRequest req;
    req.mutable_local_bash();
    req.mutable_capabilities()->mutable_fs();
    req.mutable_capabilities()->mutable_shell()->add_allowed_commands("echo");
    ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return ws->Open(&ctx, req, resp);
}

std::string ReadOk(FileSystem::Stub *fs, const std::string &id, const std::string &path)
{
    std::string out;
    grpc::Status s = wstest::Read(fs, id, path, &out);
    EXPECT_TRUE(s.ok()) << path << ": " << s.error_message();
    return out;
}

#define EXPECT_NO_SPACE(status)                                                                    \
    EXPECT_WS_ERROR((status), StatusCode::RESOURCE_EXHAUSTED, "NO_SPACE")

TEST(DiskFull, EveryWriteIsNoSpaceNothingIsLostAndRestartSeesNothingHalfWritten)
{
    SmallFs small("16m");
    ASSERT_TRUE(small.mounted());
    const std::string state = small.dir();
    const std::string old_text = "old line one\nold line two\n" + std::string(20000, 'o') + "\n";
    std::string old_hash, ws_id, snap_before;
    {
        wstest::Server srv({}, state);
        auto ws = srv.workspaces();
        auto fs = srv.fs();
        OpenResponse opened;
        ASSERT_TRUE(OpenBash(ws.get(), &opened).ok());
        ws_id = opened.workspace().id();
        WriteFileResponse wr;
        ASSERT_TRUE(wstest::Write(fs.get(), ws_id, "keep.txt", old_text, &wr).ok());
        old_hash = wr.sha256();
        ASSERT_EQ(old_hash, wstest::Sha256Hex(old_text));
        ASSERT_TRUE(WriteArchive(fs.get(), ws_id, "tree", Tar({{"a.txt", "tree a\n"}})).ok());
        SnapshotResponse sr;
        grpc::Status ss = TakeSnapshot(ws.get(), ws_id, "before", &sr);
        ASSERT_TRUE(ss.ok()) << ss.error_message();
        snap_before = sr.snapshot().id();

        small.Fill();
        ASSERT_LT(small.FreeBytes(), 4096u);

        // WriteFile over an existing file: refused, the old bytes stay.
        std::string big(256 * 1024, 'n');
        EXPECT_NO_SPACE(wstest::Write(fs.get(), ws_id, "keep.txt", big));
        EXPECT_NO_SPACE(wstest::Write(fs.get(), ws_id, "new.txt", big));
        // A small one too: the first page is already too much.
        EXPECT_NO_SPACE(wstest::Write(fs.get(), ws_id, "keep.txt", "tiny\n"));
        // EditFile: the rewritten file cannot be made.
        EditFileResponse er;
        EXPECT_NO_SPACE(Edit(fs.get(), ws_id, "keep.txt", "old line one", "NEW line one", &er));
        // WriteArchive, into a new directory and over the existing tree.
        EXPECT_NO_SPACE(
            WriteArchive(fs.get(), ws_id, "tree2", Tar({{"b.txt", std::string(100000, 'b')}})));
        // Snapshot: the copy of the workspace cannot be stored.
        grpc::Status snap_full = TakeSnapshot(ws.get(), ws_id, "during", &sr);
        EXPECT_NO_SPACE(snap_full);
        // Open: the new workspace's record cannot be saved.
        OpenResponse refused;
        EXPECT_NO_SPACE(OpenBash(ws.get(), &refused));

        // Nothing changed: bytes, hash (if_match on it), no half file.
        EXPECT_EQ(ReadOk(fs.get(), ws_id, "keep.txt"), old_text);
        EXPECT_EQ(ReadOk(fs.get(), ws_id, "tree/a.txt"), "tree a\n");
        std::string none;
        EXPECT_WS_ERROR(wstest::Read(fs.get(), ws_id, "new.txt", &none), StatusCode::NOT_FOUND,
                        "NO_SUCH_FILE");
        EXPECT_WS_ERROR(wstest::Read(fs.get(), ws_id, "tree2/b.txt", &none), StatusCode::NOT_FOUND,
                        "NO_SUCH_FILE");
        EXPECT_EQ(Joined(HalfWritten(state)), "");
        EXPECT_EQ(SnapshotIds(ws.get()), std::vector<std::string>{snap_before});
        // Still serving calls that need no space.
        RunResponse rr;
        auto ex = srv.exec();
        grpc::Status rs =
            wstest::RunProcess(ex.get(), ws_id, wstest::ArgvProcess({"echo", "alive"}), &rr);
        EXPECT_TRUE(rs.ok()) << rs.error_message();
        EXPECT_EQ(rr.stdout(), "alive\n");

        // Space back: the same calls succeed, the hash proven by if_match.
        small.Free();
        grpc::Status again = wstest::Write(fs.get(), ws_id, "keep.txt", old_text + "more\n",
                                           nullptr, false, old_hash);
        EXPECT_TRUE(again.ok()) << again.error_message();
        EXPECT_TRUE(Edit(fs.get(), ws_id, "keep.txt", "more\n", "", &er).ok());
        EXPECT_EQ(er.sha256(), old_hash);
        EXPECT_TRUE(WriteArchive(fs.get(), ws_id, "tree2", Tar({{"b.txt", "b\n"}})).ok());
        SnapshotResponse after;
        EXPECT_TRUE(TakeSnapshot(ws.get(), ws_id, "after", &after).ok());
        EXPECT_TRUE(OpenBash(ws.get(), &refused).ok());

        // Full again, then a restart on the full directory: a failed
        // write leaves nothing for the next server to find.
        small.Fill();
        EXPECT_NO_SPACE(wstest::Write(fs.get(), ws_id, "keep.txt", big));
        EXPECT_NO_SPACE(TakeSnapshot(ws.get(), ws_id, "last", &sr));
        EXPECT_EQ(srv.Stop(), 0) << wstest::ReadHostFile(srv.stderr_path());
    }
    small.Free();
    EXPECT_EQ(Joined(HalfWritten(state)), "");
    wstest::Server srv({}, state);
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    EXPECT_EQ(ReadOk(fs.get(), ws_id, "keep.txt"), old_text);
    EXPECT_EQ(ReadOk(fs.get(), ws_id, "tree/a.txt"), "tree a\n");
    EXPECT_EQ(ReadOk(fs.get(), ws_id, "tree2/b.txt"), "b\n");
    std::vector<std::string> snaps = SnapshotIds(ws.get());
    EXPECT_EQ(snaps.size(), 2u) << Joined(snaps);
    EXPECT_EQ(std::count(snaps.begin(), snaps.end(), snap_before), 1) << Joined(snaps);
    // Each listed snapshot restores into a fresh workspace with its files.
    for (const auto &snap : snaps) {
        OpenRequest req;
        req.mutable_local_bash();
        req.mutable_capabilities()->mutable_fs();
        req.set_from_snapshot(snap);
        OpenResponse resp;
        ClientContext ctx;
        grpc::Status s = ws->Open(&ctx, req, &resp);
        ASSERT_TRUE(s.ok()) << snap << ": " << s.error_message();
        EXPECT_EQ(ReadOk(fs.get(), resp.workspace().id(), "keep.txt"), old_text);
    }
    EXPECT_EQ(srv.Stop(), 0);
}

// A snapshot whose objects are all stored already writes only its
// manifest; one much larger than stdio's buffer fails in a flush made
// inside a line's write, long before the commit's own flush, and that
// failure is NO_SPACE too, not an internal error.
TEST(DiskFull, ALargeManifestOnAFullDiskIsNoSpace)
{
    SmallFs small("16m");
    ASSERT_TRUE(small.mounted());
    wstest::Server srv({}, small.dir());
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    OpenResponse opened;
    ASSERT_TRUE(OpenBash(ws.get(), &opened).ok());
    const std::string id = opened.workspace().id();
    // 400 entries with 100-byte names, one content: a manifest of about
    // 70 KB and a single object.
    std::vector<std::pair<std::string, std::string>> entries;
    for (int i = 0; i < 400; i++) {
        std::string name = "f" + std::to_string(i) + "_";
        entries.push_back({name + std::string(100 - name.size(), 'm'), "same\n"});
    }
    ASSERT_TRUE(WriteArchive(fs.get(), id, "many", Tar(entries)).ok());
    SnapshotResponse first;
    grpc::Status s = TakeSnapshot(ws.get(), id, "first", &first);
    ASSERT_TRUE(s.ok()) << s.error_message();

    small.Fill();
    SnapshotResponse second;
    EXPECT_NO_SPACE(TakeSnapshot(ws.get(), id, "second", &second));
    EXPECT_EQ(SnapshotIds(ws.get()), std::vector<std::string>{first.snapshot().id()});
    EXPECT_EQ(Joined(HalfWritten(small.dir())), "");

    small.Free();
    s = TakeSnapshot(ws.get(), id, "second", &second);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(srv.Stop(), 0) << wstest::ReadHostFile(srv.stderr_path());
}

// ---- the audit log on a full disk ----

int MetricsPort(const wstest::Server &srv)
{
    std::istringstream err(wstest::ReadHostFile(srv.stderr_path()));
    std::string line;
    while (std::getline(err, line)) {
        if (line.find("\"event\":\"metrics.listen\"") == std::string::npos)
            continue;
        size_t at = line.find("\"port\":");
        if (at != std::string::npos)
            return std::stoi(line.substr(at + 7));
    }
    return -1;
}

// GET /metrics; the body ("" on failure).
std::string Metrics(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return "";
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string resp;
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (connect(fd, (sockaddr *)&sa, sizeof(sa)) == 0 &&
        write(fd, req.data(), req.size()) == (ssize_t)req.size()) {
        char buf[4096];
        ssize_t n;
        while ((n = read(fd, buf, sizeof(buf))) > 0)
            resp.append(buf, n);
    }
    close(fd);
    size_t end = resp.find("\r\n\r\n");
    return end == std::string::npos ? "" : resp.substr(end + 4);
}

// The value of one series line ("name{labels} value"); -1 when absent.
double Series(const std::string &text, const std::string &series)
{
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(series + " ", 0) == 0)
            return std::stod(line.substr(series.size() + 1));
    return -1;
}

ReadAuditResponse ReadAudit(Workspaces::Stub *ws, const std::string &id)
{
    ReadAuditRequest req;
    req.set_workspace_id(id);
    ReadAuditResponse resp;
    ClientContext ctx;
    grpc::Status s = ws->ReadAudit(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
}

TEST(DiskFull, AuditLogOnAFullDiskDropsWholeRecordsCountsThemAndKeepsTheChain)
{
    // The workspaces on the host's disk, the audit log alone on the small
    // file system (STATE/audit is its mount point).
    const std::string state = wstest::MakeStateDir();
    const std::string audit = state + "/audit";
    ASSERT_EQ(mkdir(audit.c_str(), 0700), 0) << strerror(errno);
    SmallFs small("1m", audit);
    ASSERT_TRUE(small.mounted());
    ASSERT_EQ(chmod(audit.c_str(), 0700), 0);

    wstest::Server srv({"--metrics-listen", "127.0.0.1:0"}, state);
    int port = MetricsPort(srv);
    ASSERT_GT(port, 0) << wstest::ReadHostFile(srv.stderr_path());
    auto ws = srv.workspaces();
    auto fs = srv.fs();
    auto ex = srv.exec();
    OpenResponse opened;
    ASSERT_TRUE(OpenBash(ws.get(), &opened).ok());
    const std::string id = opened.workspace().id();
    ASSERT_TRUE(wstest::Write(fs.get(), id, "a.txt", "one\n").ok());
    ReadAuditResponse before = ReadAudit(ws.get(), id);
    ASSERT_TRUE(before.verification().ok());
    ASSERT_EQ(before.records_size(), 1);
    const std::string log = audit + "/" + id + ".jsonl";

    small.Fill();
    // The log's last page may still have room for a few records: write
    // until one is lost, so that from here on none can be appended.
    std::string text;
    double lost_writes = 0;
    for (int i = 0; i < 64 && lost_writes < 1; i++) {
        ASSERT_TRUE(wstest::Write(fs.get(), id, "pad.txt", std::to_string(i)).ok());
        text = Metrics(port);
        lost_writes = Series(text, "workspaced_audit_records_lost_total{event=\"write\"}");
    }
    ASSERT_EQ(lost_writes, 1) << text;
    const std::string log_full = wstest::ReadHostFile(log);
    const uint64_t appended = ReadAudit(ws.get(), id).records_size();

    // The calls stand: the change is made and reported as made.
    WriteFileResponse wr;
    grpc::Status w = wstest::Write(fs.get(), id, "a.txt", "two\n", &wr);
    EXPECT_TRUE(w.ok()) << w.error_message();
    EditFileResponse er;
    EXPECT_TRUE(Edit(fs.get(), id, "a.txt", "two", "three", &er).ok());
    RunResponse rr;
    EXPECT_TRUE(
        wstest::RunProcess(ex.get(), id, wstest::ArgvProcess({"echo", "unaudited"}), &rr).ok());
    EXPECT_EQ(ReadOk(fs.get(), id, "a.txt"), "three\n");
    // No record, not even part of one, reached the log.
    EXPECT_EQ(wstest::ReadHostFile(log), log_full);
    EXPECT_EQ(log_full.back(), '\n');
    // The operator is told: a log line per lost record, and a counter.
    for (int i = 0; i < 100; i++) {
        text = Metrics(port);
        if (Series(text, "workspaced_audit_records_lost_total{event=\"command\"}") >= 1)
            break;
        usleep(50 * 1000);
    }
    EXPECT_EQ(Series(text, "workspaced_audit_records_lost_total{event=\"write\"}"), 2) << text;
    EXPECT_EQ(Series(text, "workspaced_audit_records_lost_total{event=\"edit\"}"), 1) << text;
    EXPECT_EQ(Series(text, "workspaced_audit_records_lost_total{event=\"command\"}"), 1) << text;
    std::string err = wstest::ReadHostFile(srv.stderr_path());
    EXPECT_NE(err.find("\"event\":\"audit.failed\""), std::string::npos) << err;
    ReadAuditResponse during = ReadAudit(ws.get(), id);
    EXPECT_TRUE(during.verification().ok()) << during.verification().detail();
    EXPECT_EQ(during.records_size(), appended);

    // Space back: the next record follows the last one written.
    small.Free();
    ASSERT_TRUE(wstest::Write(fs.get(), id, "a.txt", "four\n").ok());
    ReadAuditResponse after = ReadAudit(ws.get(), id);
    EXPECT_TRUE(after.verification().ok()) << after.verification().detail();
    ASSERT_EQ(after.records_size(), appended + 1);
    EXPECT_EQ(after.records(appended).seq(), appended + 1);
    EXPECT_EQ(after.records(appended).event(), "write");
    EXPECT_EQ(srv.Stop(), 0);
}

} // namespace
