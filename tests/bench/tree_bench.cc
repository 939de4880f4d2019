// Whole trees: ReadArchive, WriteArchive, Snapshot and fork against tar
// and cp on the same tree, side by side in one run (tests/bench/README.md).
//
//   tree_bench --server PATH [--files N] [--mib N] [--runs N] [--tmp DIR]
//
// The tree is N files (default 10,000) in 100 directories, M MiB in all
// (default 200), of random content. Every figure is the median of --runs
// runs (default 3) of each side; the page cache is warm for both sides.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "workspace/v1/filesystem.grpc.pb.h"
#include "workspace/v1/workspaces.grpc.pb.h"

namespace v1 = workspace::v1;
using Clock = std::chrono::steady_clock;

extern char **environ;

namespace
{

[[noreturn]] void Die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tree_bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

double Since(Clock::time_point t0)
{
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double Median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Runs `sh -c cmd`; its wall time in seconds.
double Sh(const std::string &cmd)
{
    auto t0 = Clock::now();
    int st = system(cmd.c_str());
    double s = Since(t0);
    if (st != 0)
        Die("'%s' failed", cmd.c_str());
    return s;
}

class Server
{
  public:
    Server(const std::string &bin, const std::string &state)
    {
        int p[2];
        if (pipe(p) < 0)
            Die("pipe");
        std::vector<std::string> argv = {
            bin,         "--listen",           "unix:" + state + ".sock", "--state-dir",
            state,       "--policy-providers", "memory,local-bash",       "--max-file-size",
            "1073741824"};
        std::vector<char *> args;
        for (auto &a : argv)
            args.push_back(a.data());
        args.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, p[1], 1);
        posix_spawn_file_actions_addopen(&fa, 2, (state + ".stderr").c_str(),
                                         O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (posix_spawn(&pid_, bin.c_str(), &fa, nullptr, args.data(), environ) != 0)
            Die("spawn %s", bin.c_str());
        posix_spawn_file_actions_destroy(&fa);
        close(p[1]);
        std::string line;
        char c;
        struct pollfd pfd = {p[0], POLLIN, 0};
        while (poll(&pfd, 1, 20000) > 0 && read(p[0], &c, 1) == 1 && c != '\n')
            line.push_back(c);
        close(p[0]);
        const std::string prefix = "workspaced listening on ";
        if (line.compare(0, prefix.size(), prefix) != 0)
            Die("the server did not start (see %s.stderr)", state.c_str());
        grpc::ChannelArguments ca;
        ca.SetMaxReceiveMessageSize(16 << 20);
        ca.SetMaxSendMessageSize(16 << 20);
        channel_ = grpc::CreateCustomChannel(line.substr(prefix.size()),
                                             grpc::InsecureChannelCredentials(), ca);
    }
    ~Server()
    {
        kill(pid_, SIGTERM);
        int st;
        waitpid(pid_, &st, 0);
    }
    std::shared_ptr<grpc::Channel> channel_;

  private:
    pid_t pid_ = -1;
};

struct Bench {
    std::unique_ptr<v1::Workspaces::Stub> ws;
    std::unique_ptr<v1::FileSystem::Stub> fs;
    std::string state;
};

std::string OpenLocal(Bench &b, const std::string &from_snapshot = "")
{
    v1::OpenRequest req;
    req.mutable_local_bash();
    req.mutable_capabilities()->mutable_fs()->set_max_file_size_bytes(1 << 30);
    req.set_from_snapshot(from_snapshot);
    v1::OpenResponse resp;
    grpc::ClientContext ctx;
    auto s = b.ws->Open(&ctx, req, &resp);
    if (!s.ok())
        Die("Open: %s", s.error_message().c_str());
    return resp.workspace().id();
}

void Close(Bench &b, const std::string &id)
{
    v1::CloseRequest req;
    v1::CloseResponse resp;
    grpc::ClientContext ctx;
    req.set_workspace_id(id);
    (void)b.ws->Close(&ctx, req, &resp);
}

void WriteArchive(Bench &b, const std::string &id, const std::string &path, const std::string &data)
{
    grpc::ClientContext ctx;
    v1::WriteArchiveResponse resp;
    auto w = b.fs->WriteArchive(&ctx, &resp);
    v1::WriteArchiveRequest h;
    h.mutable_header()->set_workspace_id(id);
    h.mutable_header()->set_path(path);
    h.mutable_header()->set_require_finish(true);
    w->Write(h);
    const size_t chunk = 1 << 20;
    for (size_t off = 0; off < data.size(); off += chunk) {
        v1::WriteArchiveRequest d;
        d.set_data(data.substr(off, chunk));
        d.set_finish(off + chunk >= data.size());
        if (!w->Write(d))
            break;
    }
    w->WritesDone();
    auto s = w->Finish();
    if (!s.ok())
        Die("WriteArchive: %s", s.error_message().c_str());
}

uint64_t ReadArchive(Bench &b, const std::string &id, const std::string &path)
{
    grpc::ClientContext ctx;
    v1::ReadArchiveRequest req;
    req.set_workspace_id(id);
    req.set_path(path);
    auto r = b.fs->ReadArchive(&ctx, req);
    v1::ReadArchiveResponse m;
    uint64_t n = 0;
    while (r->Read(&m))
        n += m.data().size();
    auto s = r->Finish();
    if (!s.ok())
        Die("ReadArchive: %s", s.error_message().c_str());
    return n;
}

v1::Snapshot Snapshot(Bench &b, const std::string &id)
{
    v1::SnapshotRequest req;
    v1::SnapshotResponse resp;
    grpc::ClientContext ctx;
    req.set_workspace_id(id);
    auto s = b.ws->Snapshot(&ctx, req, &resp);
    if (!s.ok())
        Die("Snapshot: %s", s.error_message().c_str());
    return resp.snapshot();
}

void DeleteSnapshot(Bench &b, const std::string &id)
{
    v1::DeleteSnapshotRequest req;
    v1::DeleteSnapshotResponse resp;
    grpc::ClientContext ctx;
    req.set_snapshot_id(id);
    auto s = b.ws->DeleteSnapshot(&ctx, req, &resp);
    if (!s.ok())
        Die("DeleteSnapshot: %s", s.error_message().c_str());
}

std::string Slurp(const std::string &path)
{
    FILE *f = fopen(path.c_str(), "rb");
    if (!f)
        Die("open %s", path.c_str());
    std::string s;
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        s.append(buf, n);
    fclose(f);
    return s;
}

void Row(const char *what, double ours, const char *base_name, double base)
{
    printf("| %-44s | %8.3f s | %-38s | %8.3f s | %5.2f |\n", what, ours, base_name, base,
           ours / base);
}

} // namespace

int main(int argc, char **argv)
{
    std::string server_bin, tmp = "/tmp";
    int files = 10000, mib = 200, runs = 3;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto next = [&]() {
            if (i + 1 >= argc)
                Die("%s needs a value", a.c_str());
            return std::string(argv[++i]);
        };
        if (a == "--server")
            server_bin = next();
        else if (a == "--files")
            files = atoi(next().c_str());
        else if (a == "--mib")
            mib = atoi(next().c_str());
        else if (a == "--runs")
            runs = atoi(next().c_str());
        else if (a == "--tmp")
            tmp = next();
        else
            Die("unknown argument %s", a.c_str());
    }
    if (server_bin.empty() || files < 100 || mib < 1 || runs < 1)
        Die("usage: tree_bench --server PATH [--files N>=100] [--mib N] [--runs N] [--tmp DIR]");
    signal(SIGPIPE, SIG_IGN);

    std::string tmpl = tmp + "/tree_bench.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data()) || chmod(buf.data(), 0711) != 0)
        Die("mkdtemp");
    std::string base = buf.data();

    // The tree: files in 100 directories, sizes around the mean.
    std::string src = base + "/src";
    mkdir(src.c_str(), 0755);
    std::mt19937_64 rng(42);
    uint64_t total = (uint64_t)mib << 20, mean = total / (uint64_t)files, written = 0;
    std::vector<char> data(mean * 2 + 1);
    for (auto &c : data)
        c = (char)rng();
    for (int i = 0; i < files; i++) {
        std::string dir = src + "/d" + std::to_string(i % 100);
        mkdir(dir.c_str(), 0755);
        uint64_t size = i == files - 1 ? total - written : mean / 2 + rng() % (mean + 1);
        if (size > data.size())
            size = data.size();
        FILE *f = fopen((dir + "/f" + std::to_string(i)).c_str(), "wb");
        fwrite(data.data() + (rng() % (mean / 2 + 1)) % (data.size() - size + 1), 1, size, f);
        fclose(f);
        written += size;
    }
    Sh("tar -C " + src + " -cf " + base + "/tree.tar .");
    std::string tarball = Slurp(base + "/tree.tar");
    printf("tree_bench: %d files, %.1f MiB, %d runs each, %ld CPUs\n\n", files,
           (double)written / 1048576, runs, sysconf(_SC_NPROCESSORS_ONLN));

    Bench b;
    b.state = base + "/state";
    Server srv(server_bin, b.state);
    b.ws = v1::Workspaces::NewStub(srv.channel_);
    b.fs = v1::FileSystem::NewStub(srv.channel_);
    std::string id = OpenLocal(b);
    std::string wsdir = b.state + "/workspaces/" + id;

    // WriteArchive flushes the new tree to disk before it publishes it
    // (syncfs); `tar -x` alone does not, `tar -x` then `sync -f` does.
    std::vector<double> w_ours, w_base, w_base_sync, r_ours, r_base;
    for (int i = 0; i < runs; i++) {
        Sh("rm -rf " + wsdir + "/t " + base + "/x " + base + "/y && mkdir " + base + "/x " + base +
           "/y && sync");
        auto t0 = Clock::now();
        WriteArchive(b, id, "t", tarball);
        w_ours.push_back(Since(t0));
        Sh("sync");
        w_base.push_back(Sh("tar -C " + base + "/x -xf " + base + "/tree.tar"));
        Sh("sync");
        w_base_sync.push_back(
            Sh("tar -C " + base + "/y -xf " + base + "/tree.tar && sync -f " + base + "/y"));
    }
    for (int i = 0; i < runs; i++) {
        auto t0 = Clock::now();
        uint64_t n = ReadArchive(b, id, "t");
        r_ours.push_back(Since(t0));
        if (n < written)
            Die("ReadArchive gave %llu bytes", (unsigned long long)n);
        r_base.push_back(Sh("tar -C " + wsdir + "/t -c . | cat > /dev/null"));
    }

    std::vector<double> s1, s2, cpa, cpr, cps, fork_ours;
    uint64_t new2 = 0;
    for (int i = 0; i < runs; i++) {
        Sh("sync");
        v1::Snapshot a = Snapshot(b, id);
        s1.push_back(a.duration_ms() / 1000.0);
        auto t0 = Clock::now();
        v1::Snapshot c = Snapshot(b, id);
        s2.push_back(Since(t0));
        new2 = c.new_bytes();
        t0 = Clock::now();
        std::string forked = OpenLocal(b, a.id());
        fork_ours.push_back(Since(t0));
        Close(b, forked);
        DeleteSnapshot(b, c.id());
        DeleteSnapshot(b, a.id());
        Sh("rm -rf " + base + "/c1 " + base + "/c2 " + base + "/c3 && sync");
        cpa.push_back(Sh("cp -a " + wsdir + "/t " + base + "/c1"));
        cpr.push_back(Sh("cp -a --reflink=auto " + wsdir + "/t " + base + "/c2"));
        Sh("sync");
        // A snapshot is on disk when it returns: the fair copy is flushed.
        cps.push_back(Sh("cp -a " + wsdir + "/t " + base + "/c3 && sync -f " + base + "/c3"));
    }
    // The first snapshot's own figure is what the server measured; the
    // second's is the whole call as the client sees it.
    printf("| operation | workspaced | baseline | baseline time | ratio |\n");
    printf("|---|---|---|---|---|\n");
    Row("WriteArchive (tar, 1 MiB messages)", Median(w_ours), "tar -x from a file", Median(w_base));
    Row("WriteArchive (tar, 1 MiB messages)", Median(w_ours), "tar -x, then sync -f",
        Median(w_base_sync));
    Row("ReadArchive (tar)", Median(r_ours), "tar -c . | cat > /dev/null", Median(r_base));
    Row("Snapshot, first (store empty)", Median(s1), "cp -a", Median(cpa));
    Row("Snapshot, first (store empty)", Median(s1), "cp -a --reflink=auto", Median(cpr));
    Row("Snapshot, first (store empty)", Median(s1), "cp -a, then sync -f", Median(cps));
    Row("Snapshot, second (unchanged tree)", Median(s2), "first snapshot", Median(s1));
    Row("Fork (Open from_snapshot, local-bash)", Median(fork_ours), "cp -a", Median(cpa));
    printf("\nsecond snapshot stored %llu new bytes\n", (unsigned long long)new2);
    Close(b, id);
    Sh("rm -rf " + base);
    return 0;
}
