// A minimal agent turn against workspaced: pick a provider that confines
// commands, open a workspace, write a file, run a command whose output is
// printed as it arrives, read the command's result back, and close (the
// Workspace destructor would too).
//
// The workspace gets a lifetime (it expires after 10 minutes, or 2 idle
// ones, should the agent die without closing it), labels (List finds the
// agent's workspaces by them) and a secret, which only a command that names
// it gets in its environment; the server holds its value in memory only.
// The value comes from $AGENT_API_TOKEN, else a placeholder. The turn
// extends the lifetime, as an agent still at work would.
//
//   agent_loop [ADDRESS]
//
// ADDRESS is host:port or unix:/PATH; the default is $WORKSPACED_ADDR, else
// the server's unix socket, unix:/run/workspaced/workspaced.sock.
//
// Outside the repository, with the client installed (packaging/install):
//   g++ -std=c++17 agent_loop.cc $(pkg-config --cflags --libs workspaced)

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "workspaced.h"

namespace
{

// Whether the server says local-sandbox is usable now. The first example never lets `sh` loose on
// local-bash: there a command runs as the server's user with the host's file system in view, and an
// allowed `sh -c` runs anything (the allowlist checks only the first word). local-sandbox runs it
// under bubblewrap in namespaces of its own with only the workspace writable; without it the
// example stays with files in a memory workspace, which runs no commands at all.
bool SandboxAvailable(const std::vector<workspaced::pb::ProviderInfo> &all)
{
    for (const auto &p : all)
        if (p.kind() == "local-sandbox" && p.available())
            return true;
    return false;
}

} // namespace

int main(int argc, char **argv)
{
    try {
        auto client = workspaced::Client::Connect(argc > 1 ? argv[1] : "");
        std::cout << "workspaced C++ client " << workspaced::kVersion << std::endl;
        const bool sandboxed = SandboxAvailable(client.Providers());

        workspaced::OpenOptions opts;
        opts.lifetime.ttl = std::chrono::minutes(10);
        opts.lifetime.idle_timeout = std::chrono::minutes(2);
        opts.labels = {{"app", "agent-loop"}, {"example.com/owner", "docs"}};
        const char *token = getenv("AGENT_API_TOKEN");
        if (sandboxed)
            opts.secrets = {{"AGENT_API_TOKEN", token && *token ? token : "placeholder-token"}};
        workspaced::Workspace ws =
            sandboxed
                ? client.Open(workspaced::LocalSandbox(),
                              workspaced::Capabilities().WithFs().WithShell(
                                  {"sh", "cat", "wc", "echo", "sleep"}),
                              opts)
                : client.Open(workspaced::Memory(), workspaced::Capabilities().WithFs(), opts);
        std::cout << "opened " << ws.id() << " on " << ws.provider() << std::endl;
        workspaced::ListOptions mine;
        mine.label_selector = "app=agent-loop";
        std::cout
            << "labelled app=" << ws.labels().at("app") << ": " << client.List(mine).size()
            << " workspace(s), idle timeout "
            << std::chrono::duration_cast<std::chrono::seconds>(ws.lifetime().idle_timeout).count()
            << " s" << std::endl;

        workspaced::WriteOptions create;
        create.create_parents = true;
        ws.WriteFile("notes/todo.txt", "write tests\nship it\n", create);

        if (!sandboxed) {
            std::cout << "local-sandbox is not available here: files only" << std::endl;
            std::cout << ws.ReadFile("notes/todo.txt");
            ws.Close();
            std::cout << "closed" << std::endl;
            return 0;
        }

        // Output is printed by the callback on the process's reader thread,
        // chunk by chunk, before the command has finished.
        // Still at work: move the expiry on.
        ws.Extend(std::chrono::minutes(10));
        workspaced::ExecOptions exec;
        // The command names the secret, so it gets it (and shows its length).
        exec.secrets = {"AGENT_API_TOKEN"};
        exec.on_output = [](const workspaced::Output &out) {
            if (out.gap) {
                std::cout << "[" << out.bytes_dropped << " bytes lost]" << std::endl;
                return;
            }
            (out.stream == workspaced::Stream::Stderr ? std::cerr : std::cout)
                << out.data << std::flush;
        };
        workspaced::Process p =
            ws.Exec({"sh", "-c",
                     "cat notes/todo.txt; echo \"token: ${#AGENT_API_TOKEN} bytes\"; sleep 0.2; "
                     "wc -l < notes/todo.txt > notes/count.txt"},
                    exec);
        workspaced::ExitResult r = p.Wait();
        std::cout << "exit " << r.exit_code() << " after " << r.exited.wall_time_ms() << " ms"
                  << std::endl;

        std::cout << "lines: " << ws.ReadFile("notes/count.txt");
        ws.Close();
        std::cout << "closed" << std::endl;
        return r.success() ? 0 : 1;
    } catch (const workspaced::Error &e) {
        std::cerr << "agent_loop: " << e.what() << std::endl;
        return 2;
    }
}
