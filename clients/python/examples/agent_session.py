#!/usr/bin/env python3
"""An agent session with a bounded life: a lifetime, labels and a secret.

Opens a workspace that cleans itself up (it expires 15 minutes after Open,
or after 5 idle minutes, even if this process dies before closing it),
labelled so that a supervisor can find the session's workspaces, with an
API token held as a secret: the server keeps it in memory only, and a
command gets it only when it names it. The open is idempotent: a retry
after a lost answer returns the same workspace. Then it finds the
workspace by label, runs a command that needs the token, extends the
lifetime because the agent is not done, and closes the workspace.

    python3 agent_session.py [ADDRESS]

ADDRESS as for agent_loop.py. The token comes from $AGENT_API_TOKEN (a
demo value when unset); it is never printed.
"""

import os
import sys
import uuid

import workspaced

# Programs the agent may start; never a shell (see agent_loop.py).
SHELL = {"allowed_commands": ["printenv", "wc"], "max_duration_ms": 60000}


def main():
    if len(sys.argv) > 2:
        sys.exit("usage: agent_session.py [ADDRESS]")
    address = sys.argv[1] if len(sys.argv) > 1 else None
    token = os.environ.get("AGENT_API_TOKEN", "demo-token-not-a-real-one")
    session = "s-" + uuid.uuid4().hex[:12]

    with workspaced.connect(address) as client:
        sandbox = any(p.kind == "local-sandbox" and p.available for p in client.providers())
        provider, caps = ("local-sandbox", {"fs": {}, "shell": SHELL}) if sandbox else ("memory", {"fs": {}})
        ws = client.open(
            provider,
            caps,
            ttl=15 * 60,
            idle_timeout=5 * 60,
            labels={"app": "agent-session", "session": session},
            # Secrets are for commands: a files-only workspace takes none.
            secrets={"API_TOKEN": token} if sandbox else None,
        )
        with ws:
            print("opened %s (%s), expires at %s" % (ws.id, ws.provider, ws.expires_at.isoformat(timespec="seconds")))

            # What a supervisor does: find the session's workspaces by label.
            found = [w.id for w in client.iter_workspaces(label_selector="app=agent-session,session=" + session)]
            print("found by label:", "yes" if found == [ws.id] else "no")

            ws.write_file("task.txt", b"call the API\nsummarize\n")
            if sandbox:
                # Only a command that names the secret gets it.
                without = ws.run(["printenv", "API_TOKEN"])
                print("without the secret: exit %d" % without.exited.exit_code)
                used = ws.run(["printenv", "API_TOKEN"], secrets=["API_TOKEN"])
                seen = used.stdout.rstrip(b"\n")
                print("with the secret: the command saw %d bytes, the right token: %s" % (len(seen), seen == token.encode()))
            else:
                print("no local-sandbox on this server: files only")

            # Not done yet: another 15 minutes from now.
            lifetime = ws.extend(ttl=15 * 60)
            d = ws.describe()
            print("extended: ttl %ds, secrets %s" % (lifetime.ttl, ",".join(d.secret_names) or "none"))
        print("workspace closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
