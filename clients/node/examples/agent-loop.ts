// A minimal agent step against workspaced: open a local-sandbox workspace
// (bubblewrap namespaces plus seccomp, which a server offers by default: the
// provider for untrusted agents when there is no Docker), write a file, run
// a command while printing its output as it arrives, read the result back,
// and close the workspace (also on failure, through `await using`).
//
//   node dist/examples/agent-loop.js [ADDRESS]
//
// ADDRESS is unix:/ABSOLUTE/PATH or host:port; without one, $WORKSPACED_ADDR,
// else the server's default socket, unix:/run/workspaced/workspaced.sock.
import { connect, WorkspacedError } from '../src';

async function main(): Promise<void> {
  const client = connect({ address: process.argv[2] });
  try {
    await using ws = await client.open('local-sandbox', {
      fs: {},
      shell: { allowedCommands: ['sh', 'cat', 'wc', 'sleep', 'echo'], maxDurationMs: 60_000 },
    });
    console.log(`opened ${ws.id} (${ws.provider})`);

    await ws.writeFile('notes/todo.txt', 'write the client\ntest the client\nship it\n', { createParents: true });

    // argv is executed directly, never through a shell; `sh -c` is there
    // only because it is on this workspace's allowlist.
    const proc = ws.exec(['sh', '-c', 'for f in notes/*.txt; do wc -l "$f"; sleep 0.2; done; cat notes/todo.txt > notes/done.txt; echo finished']);
    for await (const ev of proc) {
      if (ev.type === 'gap') console.log(`[${ev.stream}: ${ev.bytesDropped} bytes lost]`);
      else process.stdout.write(`[${ev.type}] ${ev.data.toString()}`);
    }
    const exit = await proc.wait();
    console.log(`exit: cause=${exit.cause} code=${exit.exitCode} wall=${exit.wallTimeMs}ms`);

    const done = await ws.readText('notes/done.txt');
    console.log(`done.txt has ${done.split('\n').filter(Boolean).length} lines`);
  } finally {
    client.close();
  }
}

main().catch((err: unknown) => {
  if (err instanceof WorkspacedError) console.error(`${err.name} (${err.reason || err.codeName}): ${err.message}`);
  else console.error(err);
  process.exit(1);
});
