// One workspaced node of a deployment test: the real server binary started
// inside a network namespace (the child joins it with setns(2) before
// exec, so only its network differs: the mounts, cgroups and /proc it sees
// are the machine's), listening on that namespace's address.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace wsdeploy
{

class Node
{
  public:
    // `netns` is the namespace's name, `listen` the host:port to serve on
    // there; `args` go after --listen and --state-dir.
    Node(std::string label, std::string netns, std::string listen, std::string state_dir,
         std::vector<std::string> args);
    // A node still running is drained (SIGTERM) and must exit 0; when it
    // does not, the current test fails with how it ended and its stderr.
    ~Node();

    // Starts the server and waits for its "listening" line. "" on
    // success, else why not (with the server's stderr).
    std::string Start();
    // Sends `sig` and waits for the exit (at most `timeout_ms`, then
    // SIGKILL); the status as from waitpid, -2 when it had to be killed.
    int Stop(int sig = SIGTERM, int timeout_ms = 60000);
    // SIGTERM, and the exit checked: "" when the node drained and exited
    // 0 within `timeout_ms`, else how it ended and its stderr.
    std::string Drain(int timeout_ms = 60000);
    // "" when `status` (as from Stop or WaitExit) is a clean exit (0), else
    // how the node ended and its stderr.
    std::string CleanExit(int status) const;
    // SIGKILL and reap: no drain, no cleanup of any kind (and no check of
    // how it ended: the test chose this end).
    void Kill();
    // Whether the process is still running (reaps it when it has ended).
    bool Alive();
    // Waits up to `timeout_ms` for the process to end by itself; its
    // status, or -1 if it is still running.
    int WaitExit(int timeout_ms);

    pid_t pid() const
    {
        return pid_;
    }
    const std::string &label() const
    {
        return label_;
    }
    const std::string &target() const
    {
        return listen_;
    }
    const std::string &state_dir() const
    {
        return state_dir_;
    }
    std::string Stderr() const;

  private:
    std::string label_, netns_, listen_, state_dir_;
    std::vector<std::string> args_;
    std::string stderr_path_;
    pid_t pid_ = -1;
    int status_ = -1;
};

} // namespace wsdeploy
