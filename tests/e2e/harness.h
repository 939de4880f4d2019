// Starts the real workspaced binary on a unix socket (or a TCP address)
// and gives tests gRPC stubs and decoded error details.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "grpc/health/v1/health.grpc.pb.h"
#include "workspace/v1/exec.grpc.pb.h"
#include "workspace/v1/filesystem.grpc.pb.h"
#include "workspace/v1/providers.grpc.pb.h"
#include "workspace/v1/workspaces.grpc.pb.h"

namespace wstest
{

// A fresh directory, mode 0711, in a directory of this process's under
// /tmp that is removed with everything in it when the process exits. Not
// under the test's temporary directory (under /root, 0700): a server that
// runs as root refuses a state directory that its workspaces' uids cannot
// reach, and tests make state directories here and below.
std::string MakeTempDir(const std::string &prefix);

// A fresh state directory for a server: /tmp/wsstate.XXXXXX, mode 0711,
// removed with everything in it when this process exits. Not under the
// test's temporary directory: that lives under /root (0700), and a server
// that runs as root gives each workspace a uid of its own, which must be
// able to reach the workspace's directory by path.
std::string MakeStateDir();
// Same, /tmp/<prefix>.XXXXXX: for what must share a mount with the state
// directory (a hard link into a workspace).
std::string MakeHostTempDir(const std::string &prefix);

// Every regular file under `dir` with its content hash, for "nothing outside
// changed" checks.
std::map<std::string, std::string> Snapshot(const std::string &dir);

void WriteHostFile(const std::string &path, const std::string &content);
// Lowercase hex SHA-256, as the server reports it.
std::string Sha256Hex(const std::string &data);
std::string ReadHostFile(const std::string &path);

class Server
{
  public:
    // Starts workspaced with --state-dir `state_dir` (a new one when empty),
    // --listen unix:<a new temporary directory>/ws.sock unless `args` has a
    // --listen, --policy-providers memory,local-bash,local-sandbox,docker
    // unless `args` has --policy-providers or --config, plus `args`.
    explicit Server(std::vector<std::string> args = {}, std::string state_dir = "",
                    std::vector<std::string> env = {});
    ~Server();

    // SIGTERM (or `sig`), then the exit status as from waitpid.
    int Stop(int sig = SIGTERM);
    // SIGKILL, no drain.
    void Kill();
    bool running() const
    {
        return pid_ > 0;
    }

    // The address clients dial: "unix:/PATH", or "HOST:PORT" for a TCP
    // --listen (a wildcard address as loopback).
    const std::string &address() const
    {
        return address_;
    }
    const std::string &state_dir() const
    {
        return state_dir_;
    }
    const std::string &stderr_path() const
    {
        return stderr_path_;
    }
    std::string workspace_dir(const std::string &id) const
    {
        return state_dir_ + "/workspaces/" + id;
    }
    pid_t pid() const
    {
        return pid_;
    }

    std::shared_ptr<grpc::Channel> channel();
    std::unique_ptr<workspace::v1::Workspaces::Stub> workspaces();
    std::unique_ptr<workspace::v1::FileSystem::Stub> fs();
    std::unique_ptr<workspace::v1::Providers::Stub> providers();
    std::unique_ptr<workspace::v1::Exec::Stub> exec();
    std::unique_ptr<grpc::health::v1::Health::Stub> health();

    // A new channel of its own that sends `token` as "authorization: Bearer
    // TOKEN" on every call ("" sends none), over `creds` (insecure when
    // null).
    std::shared_ptr<grpc::Channel>
    Channel(const std::string &token, std::shared_ptr<grpc::ChannelCredentials> creds = nullptr);

  private:
    pid_t pid_ = -1;
    std::string address_;
    std::string state_dir_;
    std::string socket_dir_;
    std::string stderr_path_;
    std::shared_ptr<grpc::Channel> channel_;
};

// Runs the binary with `args` to completion; returns the exit status and
// stderr.
int RunServerToExit(const std::vector<std::string> &args, std::string *err, int timeout_s = 10);

struct Error {
    grpc::StatusCode code = grpc::StatusCode::OK;
    std::string message;
    std::string domain;
    std::string reason;
    std::map<std::string, std::string> metadata;
};

// Decodes google.rpc.Status / ErrorInfo from the status details.
Error Decode(const grpc::Status &status);

// Convenience client calls used by many tests.
struct Ws {
    std::string id;
    std::string token;
};

// The exec mode local-sandbox and docker Opens of the tests ask for:
// WS_TEST_EXEC_MODE ("agent" or "per-command"; unset: the server's
// default). A suite built twice, once per mode, covers both.
workspace::v1::ExecMode TestExecMode();
// Whether those Opens run in agent mode (asked for, or the default).
bool AgentMode();

Ws Open(workspace::v1::Workspaces::Stub *stub, const std::string &provider,
        uint64_t max_file_size = 0);
grpc::Status Write(workspace::v1::FileSystem::Stub *fs, const std::string &id,
                   const std::string &path, const std::string &data,
                   workspace::v1::WriteFileResponse *resp = nullptr, bool create_parents = false,
                   const std::string &if_match = "", size_t chunk = 64 * 1024);
grpc::Status Read(workspace::v1::FileSystem::Stub *fs, const std::string &id,
                  const std::string &path, std::string *out, uint64_t offset = 0,
                  uint64_t length = 0);

// Whether a call failed with exactly this code and ErrorInfo reason (domain
// "workspaced"); the failure message says what came back instead.
::testing::AssertionResult IsError(const grpc::Status &status, grpc::StatusCode code,
                                   const std::string &reason);

#define EXPECT_WS_ERROR(status, want_code, want_reason)                                            \
    EXPECT_TRUE(::wstest::IsError((status), (want_code), (want_reason)))

} // namespace wstest

// ---- Exec helpers (tests/e2e/exec*_test.cc) ----

namespace wstest
{

// Opens a local-bash workspace declaring fs (server defaults) and shell with
// this policy.
Ws OpenShell(workspace::v1::Workspaces::Stub *stub,
             const std::vector<std::string> &allowed_commands,
             const std::vector<std::string> &pass_env = {}, uint64_t max_duration_ms = 0);

workspace::v1::ProcessConfig ArgvProcess(const std::vector<std::string> &argv);
workspace::v1::ProcessConfig CommandProcess(const std::string &command);

// Exec.Run with a deadline (a hung call fails the test instead of hanging it).
grpc::Status RunProcess(workspace::v1::Exec::Stub *exec, const std::string &workspace_id,
                        const workspace::v1::ProcessConfig &process,
                        workspace::v1::RunResponse *resp, const std::string &stdin_data = "",
                        int deadline_s = 120);

using StartStreamRW =
    grpc::ClientReaderWriter<workspace::v1::StartRequest, workspace::v1::ProcessEvent>;

// Opens Exec.Start on `ctx` and writes the `start` message. The caller owns
// the context's deadline (none unless set before the call).
std::unique_ptr<StartStreamRW> StartStream(workspace::v1::Exec::Stub *exec,
                                           grpc::ClientContext *ctx,
                                           const std::string &workspace_id,
                                           const workspace::v1::ProcessConfig &process);

// What one output stream delivered to one subscriber.
struct StreamLog {
    std::string data;
    bool any = false;   // a chunk or gap was seen
    uint64_t first = 0; // offset of the first chunk (or gap)
    uint64_t next = 0;  // offset just past the last byte seen
    int chunks = 0;
};

// Every event of a Start or Attach stream, with the protocol checked as it
// goes: `started` first and once, chunks contiguous per stream (a gap moves
// the expected offset), `exited` last. Violations land in `problems`.
struct EventLog {
    bool started = false;
    workspace::v1::Started start;
    StreamLog out, err, pty;
    std::vector<workspace::v1::Gap> gaps;
    bool exited = false;
    workspace::v1::Exited exit;
    int events = 0;
    std::vector<std::string> problems;
    // Order of stream events: 'o', 'e', 'p', 'g' per chunk/gap.
    std::string order;
};

// Adds one event to `log`.
void LogEvent(const workspace::v1::ProcessEvent &ev, EventLog *log);

// Reads events into `log` until the stream ends, or until `until(log)` is
// true after an event. Returns whether the stream is still open (stopped by
// `until`).
bool ReadEvents(grpc::internal::ReaderInterface<workspace::v1::ProcessEvent> *reader, EventLog *log,
                const std::function<bool(const EventLog &)> &until = nullptr);

// Joins `problems` for a failure message ("" when none).
std::string Problems(const EventLog &log);

// A token unique to this call, usable as a sleep duration ("1000.<digits>"),
// so the processes of one test can be told apart in /proc by their cmdline:
// the test process's pid, a per-process counter and random digits, each of
// fixed width, so no two runs (concurrent, earlier or later) share one and
// no token is a prefix of another.
std::string UniqueSleep();

// Live (not zombie) processes, other than this one, whose cmdline (NULs read
// as spaces) contains `marker`.
int CountProcsWithMarker(const std::string &marker);
// Their pids.
std::vector<pid_t> PidsWithMarker(const std::string &marker);
// A live process's parent, from /proc/PID/stat; 0 when it is gone.
pid_t ParentPid(pid_t pid);

// Polls until CountProcsWithMarker(marker) <= at_most (or >= at_least when
// at_least > 0) or `timeout_ms` passes; returns the last count.
int WaitProcsAtMost(const std::string &marker, int at_most, int timeout_ms);

// Three sleeps `m`: one in the shell's group, one that left it with
// setsid, and the foreground one (the shell's own argv holds `m` too).
std::string EscapingTree(const std::string &m);

// The largest CountProcsWithMarker seen while it runs: proof that the
// processes a survivor check looks for existed at all.
class PeakWatcher
{
  public:
    explicit PeakWatcher(std::string marker);
    ~PeakWatcher();
    int Stop();

  private:
    std::string marker_;
    std::atomic<bool> stop_{false};
    std::atomic<int> peak_{0};
    std::thread thread_;
};
int WaitProcsAtLeast(const std::string &marker, int at_least, int timeout_ms);

// What /proc says about a process.
struct ProcStats {
    int fds = -1;
    int threads = -1;
    int children = 0; // processes whose ppid is this one, zombies included
    int zombies = 0;  // of those, zombies
    long rss_kb = -1;
};
ProcStats StatsOf(pid_t pid);

// Polls StatsOf(pid) until it has stopped changing for `quiet_ms`: no child
// process, the same fd and thread counts, and RSS within `rss_slack_kb`
// (not looked at when negative); or until `timeout_ms` passes. Returns the
// last stats, for a baseline or for the check that follows.
ProcStats WaitStatsSettled(pid_t pid, int quiet_ms, int timeout_ms, long rss_slack_kb = -1);

// Path of the running test binary (for re-executing it as a helper).
std::string SelfExe();

// What the host's cgroups offer this test process (and so the servers it
// starts, which inherit its cgroups), found by making and removing a probe
// cgroup rather than assumed from the kernel: hosts are cgroup v1 (or
// hybrid) or cgroup v2 only, and a container may mount cgroupfs read-only.
struct CgroupHost {
    // The cgroup v1 freezer hierarchy the server uses by default
    // (/sys/fs/cgroup/freezer) takes a new cgroup, this process's own
    // freezer cgroup is reachable through it, and its tasks file is
    // writable: what the server's "cgroup-v1-freezer" containment needs.
    bool v1_freezer = false;
    // cgroup v1 controllers ("pids", "memory", "cpu", "freezer") whose
    // hierarchy takes a new cgroup below this process's own cgroup there,
    // with the directory of that own cgroup: where the server makes its
    // local-sandbox groups.
    std::map<std::string, std::string> v1_own_dir;
    // A cgroup2 hierarchy is mounted (unified mode, or hybrid's
    // /sys/fs/cgroup/unified), with this process's cgroup there.
    bool v2 = false;
    std::string v2_own_dir;
    // /sys/fs/cgroup is itself cgroup2: no v1 hierarchy at all.
    bool v2_unified = false;
    // A child of this process's cgroup2 cgroup can be made (a delegated,
    // writable subtree).
    bool v2_delegated = false;
    // One line for skip and failure messages.
    std::string Describe() const;
};
// Probed once per process.
const CgroupHost &ProbeCgroups();

} // namespace wstest
