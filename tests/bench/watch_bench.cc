// FileSystem.Watch latency: from a change to its event on the stream.
//
//   watch_bench --server PATH/TO/workspaced [--iters N] [--coalesce-ms MS]
//
// Starts its own server on a unix socket with a fresh state directory,
// opens a memory and a local-bash workspace, watches each (recursive), and
// for every iteration makes one new file and waits for its `created`
// event: through WriteFile (memory and local-bash) and by a plain host
// write into the local-bash workspace's directory (inotify), timed from
// the start of the write. Prints p50,
// p99 and max per case. The coalescing window is part of the latency (an
// event leaves the server when its window closes): the default run uses
// 1 ms and 10 ms (the API's default).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "workspace/v1/filesystem.grpc.pb.h"
#include "workspace/v1/workspaces.grpc.pb.h"

extern char **environ;

namespace
{

namespace v1 = workspace::v1;
using Clock = std::chrono::steady_clock;

// The server under test, killed by Die so that a failed run leaves none.
pid_t g_server_pid = -1;

[[noreturn]] void Die(const std::string &why)
{
    if (g_server_pid > 0)
        kill(g_server_pid, SIGKILL);
    fprintf(stderr, "watch_bench: %s\n", why.c_str());
    exit(1);
}

// Events of one Watch stream, by path, with their arrival times.
class Stream
{
  public:
    Stream(std::shared_ptr<grpc::Channel> ch, const std::string &id, uint32_t coalesce_ms)
        : stub_(v1::FileSystem::NewStub(ch))
    {
        v1::WatchRequest req;
        req.set_workspace_id(id);
        req.set_path(".");
        req.set_recursive(true);
        req.set_coalesce_ms(coalesce_ms);
        reader_ = stub_->Watch(&ctx_, req);
        v1::WatchEvent ev;
        if (!reader_->Read(&ev) || ev.type() != v1::WATCH_EVENT_READY)
            Die("no READY: " + reader_->Finish().error_message());
        thread_ = std::thread([this] {
            v1::WatchEvent e;
            while (reader_->Read(&e)) {
                std::lock_guard<std::mutex> g(mu_);
                if (e.type() == v1::WATCH_EVENT_CREATED && !seen_.count(e.path()))
                    seen_[e.path()] = Clock::now();
                if (e.type() == v1::WATCH_EVENT_OVERFLOW)
                    overflows_++;
                cv_.notify_all();
            }
        });
    }
    ~Stream()
    {
        ctx_.TryCancel();
        thread_.join();
    }
    // When `path` was reported created (waits up to 10 s).
    Clock::time_point Wait(const std::string &path)
    {
        std::unique_lock<std::mutex> g(mu_);
        if (!cv_.wait_for(g, std::chrono::seconds(10), [&] { return seen_.count(path) > 0; }))
            Die("no event for " + path);
        return seen_[path];
    }
    int overflows()
    {
        std::lock_guard<std::mutex> g(mu_);
        return overflows_;
    }

  private:
    std::unique_ptr<v1::FileSystem::Stub> stub_;
    grpc::ClientContext ctx_;
    std::unique_ptr<grpc::ClientReader<v1::WatchEvent>> reader_;
    std::thread thread_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::string, Clock::time_point> seen_;
    int overflows_ = 0;
};

std::string OpenWs(v1::Workspaces::Stub *stub, const std::string &provider)
{
    v1::OpenRequest req;
    if (provider == "memory")
        req.mutable_memory();
    else
        req.mutable_local_bash();
    req.mutable_capabilities()->mutable_fs();
    v1::OpenResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = stub->Open(&ctx, req, &resp);
    if (!s.ok())
        Die("Open " + provider + ": " + s.error_message());
    return resp.workspace().id();
}

void ApiWrite(v1::FileSystem::Stub *fs, const std::string &id, const std::string &path)
{
    grpc::ClientContext ctx;
    v1::WriteFileResponse resp;
    auto w = fs->WriteFile(&ctx, &resp);
    v1::WriteFileRequest h;
    h.mutable_header()->set_workspace_id(id);
    h.mutable_header()->set_path(path);
    v1::WriteFileRequest d;
    d.set_data("x");
    d.set_finish(true);
    w->Write(h);
    w->Write(d);
    w->WritesDone();
    grpc::Status s = w->Finish();
    if (!s.ok())
        Die("WriteFile: " + s.error_message());
}

void HostWrite(const std::string &path)
{
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, "x", 1) != 1)
        Die("host write " + path + ": " + strerror(errno));
    close(fd);
}

void Report(const char *name, uint32_t coalesce_ms, std::vector<double> us, int overflows)
{
    std::sort(us.begin(), us.end());
    auto at = [&](double q) { return us[std::min(us.size() - 1, (size_t)(q * us.size()))]; };
    printf("%-28s window %4u ms  n=%zu  p50 %8.0f us  p99 %8.0f us  max %8.0f us%s\n", name,
           coalesce_ms, us.size(), at(0.50), at(0.99), us.back(),
           overflows ? "  (OVERFLOW seen)" : "");
    fflush(stdout);
}

} // namespace

int main(int argc, char **argv)
{
    std::string server;
    int iters = 1000;
    std::vector<uint32_t> windows = {1, 10};
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--server" && i + 1 < argc)
            server = argv[++i];
        else if (a == "--iters" && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (a == "--coalesce-ms" && i + 1 < argc)
            windows = {(uint32_t)atoi(argv[++i])};
        else
            Die("usage: watch_bench --server PATH [--iters N] [--coalesce-ms MS]");
    }
    if (server.empty() || iters <= 0)
        Die("usage: watch_bench --server PATH [--iters N] [--coalesce-ms MS]");

    char tmpl[] = "/tmp/watch_bench.XXXXXX";
    if (!mkdtemp(tmpl))
        Die("mkdtemp");
    chmod(tmpl, 0711);
    std::string root = tmpl, state = root + "/state", sock = root + "/ws.sock";
    mkdir(state.c_str(), 0711);
    std::string listen = "unix:" + sock;
    std::vector<std::string> args = {server,
                                     "--listen",
                                     listen,
                                     "--state-dir",
                                     state,
                                     "--policy-providers",
                                     "memory,local-bash"};
    std::vector<char *> av;
    for (auto &s : args)
        av.push_back(s.data());
    av.push_back(nullptr);
    pid_t pid;
    if (posix_spawn(&pid, server.c_str(), nullptr, nullptr, av.data(), environ) != 0)
        Die("spawn " + server);
    g_server_pid = pid;
    auto ch = grpc::CreateChannel(listen, grpc::InsecureChannelCredentials());
    if (!ch->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(20))) {
        kill(pid, SIGKILL);
        Die("the server did not come up");
    }
    auto wss = v1::Workspaces::NewStub(ch);
    auto fs = v1::FileSystem::NewStub(ch);
    std::string mem = OpenWs(wss.get(), "memory");
    std::string disk = OpenWs(wss.get(), "local-bash");
    std::string disk_dir = state + "/workspaces/" + disk;

    printf("watch_bench: %d writes per case, latency from the start of the write (API: "
           "the whole WriteFile call; host: open, write, close) to the created event\n",
           iters);
    int round = 0;
    for (uint32_t window : windows) {
        round++;
        struct Case {
            const char *name;
            std::string id;
            bool host;
        } cases[] = {
            {"memory, WriteFile", mem, false},
            {"local-bash, WriteFile", disk, false},
            {"local-bash, host write", disk, true},
        };
        for (const auto &c : cases) {
            Stream st(ch, c.id, window);
            std::vector<double> us;
            for (int i = 0; i < iters; i++) {
                std::string name =
                    "r" + std::to_string(round) + (c.host ? "h" : "a") + std::to_string(i);
                auto t0 = Clock::now();
                if (c.host)
                    HostWrite(disk_dir + "/" + name);
                else
                    ApiWrite(fs.get(), c.id, name);
                auto t1 = st.Wait(name);
                us.push_back(
                    std::max(0.0, std::chrono::duration<double, std::micro>(t1 - t0).count()));
            }
            Report(c.name, window, us, st.overflows());
        }
    }
    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    char *rm[] = {(char *)"rm", (char *)"-rf", root.data(), nullptr};
    if (posix_spawn(&pid, "/bin/rm", nullptr, nullptr, rm, environ) == 0)
        waitpid(pid, &status, 0);
    return 0;
}
