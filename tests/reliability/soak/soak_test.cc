// Soak: many commands over many workspaces in every provider that runs
// commands (local-bash, local-sandbox and docker, each docker and sandbox
// one in both exec modes), open/close cycles in every provider (memory
// too), and attach/detach cycles on long-running commands, against the real
// server. Before and after the load the server's descriptors, threads,
// RSS, zombie children, live descendants, the cgroups it made, the Docker
// containers labelled as its own and the workload's processes are sampled:
// each must come back to its baseline. The bounded scale runs in the suite;
// WS_SOAK_FULL=1 runs the full one (10,000 commands over 100 workspaces,
// 1,000 open/close and 1,000 attach/detach cycles).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/harness.h"
#include "tests/reliability/soak/probe.h"

using grpc::ClientContext;
using namespace workspace::v1;
using soak::Backend;
using soak::Sample;
using wstest::Server;

namespace
{

const std::vector<std::string> kAllowed = {"sh", "cat", "echo", "true", "sleep"};

struct Scale {
    int commands, workspaces, open_close, attach;
};

Scale ScaleNow()
{
    if (soak::FullScale())
        return {10000, 100, 1000, 1000};
    if (soak::Sanitized())
        return {250, 10, 30, 50};
    return {500, 10, 30, 100};
}

// RSS may grow by this much over the load and stay: caches the server
// keeps, and in the sanitizer build the quarantine, which holds up to 256
// MiB of freed memory by design. A leak of even a few hundred bytes per
// command, cycle or attach at the full scale is well past it.
long RssBoundKb()
{
    if (soak::Sanitized())
        return 320 * 1024;
    // Measured: the bounded load left the server 10 MiB bigger, and the
    // full one 225 MiB, while glibc kept what the closed workspaces freed
    // in its arenas; with the server's trim after closes, 0.4 MiB.
    return soak::FullScale() ? 24 * 1024 : 4 * 1024;
}

std::chrono::system_clock::time_point Deadline(int s = 120)
{
    return std::chrono::system_clock::now() + std::chrono::seconds(s);
}

bool Same(const Sample &a, const Sample &b)
{
    return a.fds == b.fds && a.threads == b.threads && a.descendants == b.descendants &&
           a.cgroups == b.cgroups && a.containers == b.containers && b.zombies == 0 &&
           b.marked == 0;
}

class SoakTest : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        srv_ = std::make_unique<Server>();
        ws_ = srv_->workspaces();
        fs_ = srv_->fs();
        ex_ = srv_->exec();
        server_id_ = soak::ServerId(srv_->state_dir());
        ASSERT_EQ(server_id_.size(), 16u);
        ASSERT_GE(soak::CountContainersOf(server_id_), 0)
            << "the Docker daemon does not answer: tests/fixtures/dockerd.sh starts it";
        marker_ = "soak" + wstest::UniqueSleep();
    }

    wstest::Ws OpenOk(const Backend &b)
    {
        wstest::Ws w;
        grpc::Status s = soak::OpenBackend(ws_.get(), b, kAllowed, &w);
        EXPECT_TRUE(s.ok()) << b.name << ": " << s.error_message();
        return w;
    }

    // One echo through Exec.Run: "" when it printed what it was given.
    std::string Echo(const std::string &id, const std::string &what)
    {
        RunResponse r;
        grpc::Status s =
            wstest::RunProcess(ex_.get(), id, wstest::ArgvProcess({"echo", marker_, what}), &r);
        if (!s.ok())
            return "Run: " + s.error_message();
        if (r.exited().exit_code() != 0 || r.stdout() != marker_ + " " + what + "\n")
            return "exit " + std::to_string(r.exited().exit_code()) + " stdout '" + r.stdout() +
                   "' stderr '" + r.stderr() + "'";
        return "";
    }

    // Starts a background cat tagged `tag` with stdin open; its stream is
    // dropped at once (the command runs on).
    void StartCat(const std::string &id, const std::string &tag)
    {
        ProcessConfig pc = wstest::ArgvProcess({"sh", "-c", "cat; : " + marker_});
        pc.set_stdin(true);
        pc.set_background(true);
        pc.set_tag(tag);
        ClientContext ctx;
        ctx.set_deadline(Deadline());
        auto rw = wstest::StartStream(ex_.get(), &ctx, id, pc);
        wstest::EventLog log;
        EXPECT_TRUE(wstest::ReadEvents(rw.get(), &log, [](const wstest::EventLog &l) {
            return l.started;
        })) << wstest::Problems(log);
        ctx.TryCancel();
        (void)rw->Finish();
    }

    // One attach/detach cycle: feed a line with SendInput, attach from
    // `*offset`, read until the line comes back, detach. "" when it did.
    std::string AttachCycle(const std::string &id, const std::string &tag, uint64_t *offset, int n)
    {
        std::string line = "line " + std::to_string(n) + "\n";
        SendInputRequest in;
        in.set_workspace_id(id);
        in.set_tag(tag);
        in.set_data(line);
        in.set_append(true);
        SendInputResponse inr;
        ClientContext ictx;
        ictx.set_deadline(Deadline());
        grpc::Status s = ex_->SendInput(&ictx, in, &inr);
        if (!s.ok())
            return "SendInput: " + s.error_message();
        AttachRequest req;
        req.set_workspace_id(id);
        req.set_tag(tag);
        req.set_offset(*offset);
        ClientContext ctx;
        ctx.set_deadline(Deadline());
        auto r = ex_->Attach(&ctx, req);
        wstest::EventLog log;
        bool open = wstest::ReadEvents(r.get(), &log, [&](const wstest::EventLog &l) {
            return l.out.data.find(line) != std::string::npos;
        });
        ctx.TryCancel();
        (void)r->Finish();
        if (!open || !log.problems.empty())
            return "attach: " + wstest::Problems(log) + " stdout '" + log.out.data + "'";
        if (log.out.first != *offset)
            return "attach from " + std::to_string(*offset) + " began at " +
                   std::to_string(log.out.first);
        *offset = log.out.next;
        return "";
    }

    // The whole load at `sc`'s scale.
    void Load(const Scale &sc, bool timed)
    {
        const std::vector<Backend> backends = soak::ExecBackends();
        auto t0 = std::chrono::steady_clock::now();
        auto lap = [&](const char *what) {
            auto now = std::chrono::steady_clock::now();
            if (timed)
                printf("soak: %s in %.1f s\n", what,
                       std::chrono::duration<double>(now - t0).count());
            fflush(stdout);
            t0 = now;
        };
        // 1. Commands over many workspaces, from four client threads at once.
        {
            std::vector<wstest::Ws> ws;
            for (int i = 0; i < sc.workspaces; i++) {
                const Backend &b = backends[i % backends.size()];
                ws.push_back(OpenOk(b));
                ASSERT_FALSE(ws.back().id.empty()) << b.name;
            }
            std::atomic<int> next{0}, failures{0};
            std::mutex lock;
            std::string first_failure;
            std::vector<std::thread> threads;
            for (int t = 0; t < 4; t++)
                threads.emplace_back([&] {
                    for (int j; (j = next++) < sc.commands;) {
                        size_t k = j % ws.size();
                        std::string e = Echo(ws[k].id, std::to_string(j));
                        if (!e.empty()) {
                            failures++;
                            std::lock_guard<std::mutex> l(lock);
                            if (first_failure.empty())
                                first_failure = backends[k % backends.size()].name + ": " + e;
                        }
                    }
                });
            for (auto &t : threads)
                t.join();
            EXPECT_EQ(failures, 0) << "first: " << first_failure;
            for (const auto &w : ws)
                EXPECT_TRUE(soak::CloseWs(ws_.get(), w.id).ok());
            lap("commands");
        }

        // 2. Open/close cycles over every provider, memory too, each with a
        //    file written and read back.
        {
            std::vector<Backend> all = backends;
            all.push_back({"memory", "memory", EXEC_MODE_DEFAULT});
            int failures = 0;
            std::string first_failure;
            for (int i = 0; i < sc.open_close; i++) {
                const Backend &b = all[i % all.size()];
                wstest::Ws w;
                grpc::Status s = soak::OpenBackend(ws_.get(), b, kAllowed, &w);
                std::string err;
                if (!s.ok()) {
                    err = "Open: " + s.error_message();
                } else {
                    std::string data = "cycle " + std::to_string(i), got;
                    s = wstest::Write(fs_.get(), w.id, "f.txt", data);
                    if (s.ok())
                        s = wstest::Read(fs_.get(), w.id, "f.txt", &got);
                    if (!s.ok() || got != data)
                        err = "write/read: " + s.error_message() + " got '" + got + "'";
                    s = soak::CloseWs(ws_.get(), w.id);
                    if (!s.ok())
                        err += " Close: " + s.error_message();
                }
                if (!err.empty() && failures++ == 0)
                    first_failure = b.name + ": " + err;
            }
            EXPECT_EQ(failures, 0) << "first: " << first_failure;
            lap("open/close cycles");
        }

        // 3. Attach/detach cycles on a background cat in each backend.
        {
            std::vector<wstest::Ws> ws;
            std::vector<uint64_t> offsets(backends.size(), 0);
            for (const Backend &b : backends) {
                ws.push_back(OpenOk(b));
                ASSERT_FALSE(ws.back().id.empty()) << b.name;
                StartCat(ws.back().id, "soak");
            }
            int failures = 0;
            std::string first_failure;
            for (int i = 0; i < sc.attach; i++) {
                size_t k = i % ws.size();
                std::string e = AttachCycle(ws[k].id, "soak", &offsets[k], i);
                if (!e.empty() && failures++ == 0)
                    first_failure = backends[k].name + ": " + e;
            }
            EXPECT_EQ(failures, 0) << "first: " << first_failure;
            for (const auto &w : ws)
                EXPECT_TRUE(soak::CloseWs(ws_.get(), w.id).ok());
            lap("attach/detach cycles");
        }
    }

    Sample Settled(const Sample *like, int timeout_ms)
    {
        wstest::WaitStatsSettled(srv_->pid(), 1000, timeout_ms);
        auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        Sample s = soak::Take(*srv_, server_id_, marker_);
        while (like && !Same(*like, s) && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            s = soak::Take(*srv_, server_id_, marker_);
        }
        return s;
    }

    std::unique_ptr<Server> srv_;
    std::unique_ptr<Workspaces::Stub> ws_;
    std::unique_ptr<FileSystem::Stub> fs_;
    std::unique_ptr<Exec::Stub> ex_;
    std::string server_id_, marker_;
};

// gRPC's timer threads, as /proc shows their name (cut to 15 bytes), and
// at most how many of them a server may have: gRPC starts one more only
// while all are busy running timers.
const char kTimerThread[] = "grpc_global_tim";
const int kTimerThreadsMax = 4;

TEST_F(SoakTest, ResourcesReturnToBaselineAfterTheLoad)
{
    const Scale sc = ScaleNow();
    printf("soak scale: %d commands over %d workspaces, %d open/close cycles, %d attach/detach "
           "cycles (%s%s)\n",
           sc.commands, sc.workspaces, sc.open_close, sc.attach,
           soak::FullScale() ? "full" : "bounded", soak::Sanitized() ? ", sanitized" : "");

    // Warm-up, so the baseline holds what the server builds once and keeps
    // at this load's concurrency (its thread pools, its connections to the
    // Docker daemon, a provider's host cgroups): the same load at a tenth
    // of the scale.
    Load({std::max(sc.commands / 10, 20), std::max(sc.workspaces / 10, 5),
          std::max(sc.open_close / 10, 6), std::max(sc.attach / 10, 10)},
         false);
    ASSERT_FALSE(HasFatalFailure());
    Sample before = Settled(nullptr, 30000);
    Load(sc, true);
    ASSERT_FALSE(HasFatalFailure());

    Sample after = Settled(&before, 30000);
    const long bound = RssBoundKb();
    printf("\nsoak: the server before and after the load\n\n%s\n",
           soak::Table(before, after, bound).c_str());
    fflush(stdout);
    // Exactly: each of these is a resource held per workspace, command or
    // stream, and none is left once they are all gone. Two pools outside
    // the server's code are the exceptions, both seen in the full run: the
    // Docker client's idle connections to the daemon may be fewer after
    // (the daemon closes idle ones: one socket less), and gRPC's timer
    // threads (named grpc_global_timer) are started when every one is
    // busy and live until gRPC shuts down, so a larger load than the
    // warm-up's may leave one more. Neither grows with the load.
    EXPECT_LE(after.fds, before.fds)
        << "descriptors leaked: " << soak::Diff(before.fd_kinds, after.fd_kinds);
    EXPECT_EQ(after.fd_kinds.count("socket") ? after.fds - after.fd_kinds.at("socket") : after.fds,
              before.fd_kinds.count("socket") ? before.fds - before.fd_kinds.at("socket")
                                              : before.fds)
        << "descriptors other than sockets changed: "
        << soak::Diff(before.fd_kinds, after.fd_kinds);
    const auto timers = [](const soak::Sample &x) {
        auto it = x.thread_names.find(kTimerThread);
        return it == x.thread_names.end() ? 0 : it->second;
    };
    EXPECT_EQ(after.threads - timers(after), before.threads - timers(before))
        << "threads leaked: " << soak::Diff(before.thread_names, after.thread_names);
    EXPECT_LE(timers(after), kTimerThreadsMax)
        << "gRPC timer threads: " << soak::Diff(before.thread_names, after.thread_names);
    EXPECT_EQ(after.zombies, 0) << "unreaped children";
    EXPECT_EQ(after.descendants, before.descendants) << "processes left below the server";
    EXPECT_EQ(after.cgroups, before.cgroups) << "cgroups left";
    EXPECT_EQ(after.containers, before.containers) << "containers left";
    EXPECT_EQ(after.marked, 0) << "workload processes left";
    EXPECT_LE(after.rss_kb, before.rss_kb + bound) << "RSS grew past the bound";
}

} // namespace
