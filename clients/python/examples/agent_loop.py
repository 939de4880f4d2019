#!/usr/bin/env python3
"""The small agent-tool loop: the calls an agent's tools make, in order.

Opens a workspace, writes a file into it (the agent's "write file" tool),
runs commands with their output streamed as it arrives (the "shell" tool:
an agent shows progress and can stop a command early), reads the file a
command produced (the "read file" tool), and closes the workspace.

    python3 agent_loop.py [ADDRESS]

ADDRESS is unix:/ABSOLUTE/PATH or host:port; without one, $WORKSPACED_ADDR,
else the server's default socket, unix:/run/workspaced/workspaced.sock.

Commands run in local-sandbox (bubblewrap namespaces and seccomp) when the
server says it is usable; otherwise the example falls back to a memory
workspace with files only, where the agent does the counting itself.
"""

import sys

import workspaced

NOTES = b"write tests\nship it\nrelax\n"

# The only programs the agent may start: each one named. Never a shell
# (sh, bash, ...): a shell runs any command line it is given, so once it is
# allowed the server's shell guard constrains nothing, and in a local-bash
# workspace (no isolation, the server's host) that is arbitrary code on the
# host. That is also why this example does not use local-bash at all.
SHELL = {"allowed_commands": ["wc", "sort"], "max_duration_ms": 60000}


def sandbox_usable(client):
    """Whether ListProviders says local-sandbox can be opened (bubblewrap
    usable on the server, and allowed for this caller); else why not."""
    for p in client.providers():
        if p.kind == "local-sandbox":
            return p.available, p.reason
    return False, "the server does not know local-sandbox"


def run_streamed(ws, argv):
    """The "shell" tool: starts argv, prints each output chunk the moment it
    arrives, and returns how the command ended."""
    proc = ws.exec(argv, command_timeout=30)
    for event in proc:
        if isinstance(event, workspaced.Output):
            sys.stdout.write("[%s] %s" % (event.stream, event.data.decode(errors="replace")))
            sys.stdout.flush()
        elif isinstance(event, workspaced.Gap):
            print("[%s] ... %d bytes lost ..." % (event.stream, event.bytes_dropped))
    result = proc.wait()
    print("exit: cause=%s code=%d wall=%dms" % (result.cause.name, result.exit_code, result.wall_time_ms))
    return result


def main():
    if len(sys.argv) > 2:
        sys.exit("usage: agent_loop.py [ADDRESS]")
    # None: connect() takes $WORKSPACED_ADDR, else the default socket.
    address = sys.argv[1] if len(sys.argv) > 1 else None

    ok = True
    with workspaced.connect(address) as client:
        usable, why = sandbox_usable(client)
        if usable:
            ws = client.open("local-sandbox", {"fs": {}, "shell": SHELL})
        else:
            print("local-sandbox is not usable (%s): files only" % why)
            ws = client.open("memory", {"fs": {}})
        with ws:
            print("opened workspace %s (%s)" % (ws.id, ws.provider))

            ws.write_file("notes.txt", NOTES)
            print("wrote notes.txt")

            if usable:
                ok = run_streamed(ws, ["wc", "-l", "notes.txt"]).ok
                ok = run_streamed(ws, ["sort", "-o", "sorted.txt", "notes.txt"]).ok and ok
            else:
                # No commands in a memory workspace: the agent sorts the
                # file itself and writes the result back.
                lines = sorted(ws.read_file("notes.txt").decode().splitlines(keepends=True))
                ws.write_file("sorted.txt", "".join(lines))

            print("sorted.txt says:", ", ".join(ws.read_file("sorted.txt").decode().splitlines()))
        print("workspace closed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
