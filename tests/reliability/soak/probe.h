// What the soak and crash tests look at around the real server: its
// descriptors, threads, memory, child processes, the cgroups it made and
// the Docker containers labelled as its own, plus the workspace Opens of
// every provider that runs commands.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tests/e2e/harness.h"

namespace soak
{

// WS_SOAK_FULL=1: the full scale, run by hand.
bool FullScale();
// WORKSPACED_SANITIZED=1: the ASan/UBSan build (--config=asan).
bool Sanitized();

// A provider and exec mode that runs commands.
struct Backend {
    std::string name;
    std::string provider; // local-bash, local-sandbox, docker
    workspace::v1::ExecMode mode;
};
// Every one: local-bash, local-sandbox and docker in both exec modes.
std::vector<Backend> ExecBackends();

const char kDockerImage[] = "workspaced-test:busybox";

// Opens a workspace of `b` (memory when b.provider is "memory") with fs and
// a shell allowing `allowed`; the status of the Open.
grpc::Status OpenBackend(workspace::v1::Workspaces::Stub *stub, const Backend &b,
                         const std::vector<std::string> &allowed, wstest::Ws *ret);
grpc::Status CloseWs(workspace::v1::Workspaces::Stub *stub, const std::string &id);

// Directories (each counted, with every directory below it) the server with
// pid `pid` made in any mounted cgroup hierarchy: <root>/workspaced/<pid>
// (command trees, cgroup v2 hosts) and <own cgroup>/workspaced-<pid> (v1
// limits).
int CountCgroupsOf(pid_t pid);
// Containers (any state) labelled dev.workspaced.server=<server_id>, as the
// daemon lists them; -1 when the daemon does not answer.
int CountContainersOf(const std::string &server_id);
// The server's id (its state directory's server-id).
std::string ServerId(const std::string &state_dir);
// Live processes below `pid` (children, grandchildren...; zombies not
// counted).
int CountDescendants(pid_t pid);

struct Sample {
    int fds = -1;
    int threads = -1;
    long rss_kb = -1;
    int zombies = -1;
    int descendants = -1;
    int cgroups = -1;
    int containers = -1;
    int marked = -1; // live processes anywhere whose cmdline holds the marker
    // What the descriptors point at (socket:[N] as "socket", anon_inode
    // kinds, paths) and the threads' names, each with its count: a failure
    // message names what was left.
    std::map<std::string, int> fd_kinds, thread_names;
};
// The kinds whose counts differ, "kind before->after; ...".
std::string Diff(const std::map<std::string, int> &before, const std::map<std::string, int> &after);
Sample Take(const wstest::Server &srv, const std::string &server_id, const std::string &marker);

// A markdown table: metric | before | after | allowed.
std::string Table(const Sample &before, const Sample &after, long rss_bound_kb);

// A POSIX ustar archive of regular files (names under 100 bytes).
std::string Tar(const std::vector<std::pair<std::string, std::string>> &files);

} // namespace soak
