// A private network for a deployment test: named network namespaces (a
// router holding a bridge, and one namespace per host) linked by veth
// pairs, built and torn down with iproute2's `ip`. Every name starts with
// "wsdeploy-PID-", so parallel runs never meet and a later run can tell the
// leftovers of a crashed one (whose PID is gone) from a live run's.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace wsdeploy
{

// Runs `argv` (looked up in PATH) to completion with stdout and stderr
// captured into *out (when not null). Returns the exit code, or -1 when it
// could not run or did not exit normally.
int RunCommand(const std::vector<std::string> &argv, std::string *out = nullptr);

struct Host {
    std::string name;    // the namespace's name, e.g. "wsdeploy-123-node1"
    std::string address; // its IPv4 address on the bridge, e.g. "10.0.0.11"
};

class Network
{
  public:
    // Names for a network of `hosts` (short names, e.g. "client", "node1")
    // owned by this process; nothing is created yet. Host i gets
    // 10.0.0.(10 + i)/24: the example nodes of server/deploy/nginx.conf are
    // hosts 1 to 3. The addresses exist only inside these namespaces.
    explicit Network(const std::vector<std::string> &hosts);
    ~Network();

    // Creates the namespaces, the bridge and the links, and brings them
    // up. On failure returns what failed (the command and its output) and
    // leaves nothing behind; "" on success.
    std::string Build();

    // Ends every process still inside one of this network's namespaces
    // and deletes them. Safe to call more than once and on a network
    // never (or partly) built.
    void Destroy();

    // Every namespace name, the router's included.
    std::vector<std::string> names() const;
    const Host &host(const std::string &short_name) const;

    // Forks a guardian that destroys this network when the calling process
    // ends without doing so (a crash, an abort, a SIGKILL of the test
    // alone). Call before any thread exists. Dismiss() ends it.
    void StartGuardian();
    void DismissGuardian();

  private:
    std::string prefix_;
    std::string router_;
    std::vector<std::pair<std::string, Host>> hosts_;
    bool built_ = false;
    pid_t guardian_ = -1;
    int guardian_fd_ = -1;
};

// Deletes the namespaces (and ends the processes in them) of earlier runs
// whose process is gone; returns how many namespaces were removed.
int RemoveLeftovers();

// Ends every process inside the named namespace (SIGKILL) and deletes it.
void DestroyNamespace(const std::string &name);

// Moves the calling thread into the named network namespace; "" on
// success, else why not.
std::string EnterNamespace(const std::string &name);

// Number of threads of this process.
int ThreadCount();

} // namespace wsdeploy
