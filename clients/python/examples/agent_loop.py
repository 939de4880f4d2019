#!/usr/bin/env python3
"""The small agent-tool loop: the calls an agent's tools make, in order.

Opens a local-bash workspace, writes a script into it (the agent's "write
file" tool), runs it with its output streamed as it arrives (the "shell"
tool: an agent shows progress and can stop a command early), reads the file
the command produced (the "read file" tool), and closes the workspace.

    python3 agent_loop.py [ADDRESS]

ADDRESS is unix:/ABSOLUTE/PATH or host:port; without one, $WORKSPACED_ADDR,
else the server's default socket, unix:/run/workspaced/workspaced.sock.
local-bash runs commands as the server's own user with no isolation, so the
server opens it only when the operator's policy lists it (for instance
`--policy-providers memory,local-bash,local-sandbox,docker`); agents that are
not trusted belong in local-sandbox or docker.
"""

import sys

import workspaced

SCRIPT = b"""\
echo "step 1: counting lines"
wc -l < notes.txt > count.txt
echo "step 2: done"
"""


def main():
    if len(sys.argv) > 2:
        sys.exit("usage: agent_loop.py [ADDRESS]")
    # None: connect() takes $WORKSPACED_ADDR, else the default socket.
    address = sys.argv[1] if len(sys.argv) > 1 else None

    capabilities = {
        "fs": {},
        "shell": {"allowed_commands": ["sh", "echo", "wc"], "max_duration_ms": 60000},
    }
    with workspaced.connect(address) as client:
        with client.open("local-bash", capabilities) as ws:
            print("opened workspace", ws.id)

            ws.write_file("notes.txt", b"write tests\nship it\nrelax\n")
            ws.write_file("task.sh", SCRIPT)
            print("wrote notes.txt and task.sh")

            proc = ws.exec(["sh", "task.sh"], timeout=30)
            for event in proc:
                if isinstance(event, workspaced.Output):
                    # Print each chunk the moment it arrives.
                    sys.stdout.write("[%s] %s" % (event.stream, event.data.decode(errors="replace")))
                    sys.stdout.flush()
                elif isinstance(event, workspaced.Gap):
                    print("[%s] ... %d bytes lost ..." % (event.stream, event.bytes_dropped))
            result = proc.wait()
            print("exit: cause=%s code=%d wall=%dms" % (result.cause.name, result.exit_code, result.wall_time_ms))

            count = ws.read_file("count.txt").decode().strip()
            print("count.txt says:", count)
        print("workspace closed")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
