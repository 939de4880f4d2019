// A minimal agent turn against workspaced: open a local-bash workspace,
// write a file, run a command whose output is printed as it arrives, read
// the command's result back, and close (the Workspace destructor does).
//
//   agent_loop [ADDRESS]
//
// ADDRESS is host:port or unix:/PATH; the default is $WORKSPACED_ADDR, else
// the server's unix socket, unix:/run/workspaced/workspaced.sock.

#include <iostream>

#include "clients/cpp/workspaced.h"

int main(int argc, char **argv)
{
    try {
        auto client = workspaced::Client::Connect(argc > 1 ? argv[1] : "");
        workspaced::Workspace ws = client.Open(
            workspaced::LocalBash(),
            workspaced::Capabilities().WithFs().WithShell({"sh", "cat", "wc", "echo", "sleep"}));
        std::cout << "opened " << ws.id() << std::endl;

        workspaced::WriteOptions create;
        create.create_parents = true;
        ws.WriteFile("notes/todo.txt", "write tests\nship it\n", create);

        // Output is printed by the callback on the process's reader thread,
        // chunk by chunk, before the command has finished.
        workspaced::ExecOptions opts;
        opts.on_output = [](const workspaced::Output &out) {
            if (out.gap) {
                std::cout << "[" << out.bytes_dropped << " bytes lost]" << std::endl;
                return;
            }
            (out.stream == workspaced::Stream::Stderr ? std::cerr : std::cout)
                << out.data << std::flush;
        };
        workspaced::Process p = ws.Exec(
            {"sh", "-c", "cat notes/todo.txt; sleep 0.2; wc -l < notes/todo.txt > notes/count.txt"},
            opts);
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
