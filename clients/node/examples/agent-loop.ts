// A first agent step against workspaced, safe to copy: open a workspace,
// write a file, run a command while printing its output as it arrives,
// edit and read the result back, and close the workspace (also on failure,
// through `await using`).
//
// Where the commands run: local-sandbox (bubblewrap namespaces plus
// seccomp) when the server says it can run it here, else memory, which
// holds files and runs no commands at all. Never local-bash: it runs
// commands as the server's own user with no isolation.
//
// What may run: a list of programs that read and count, and no shell or
// other interpreter. The server's guard checks the program an argv names;
// once `sh` (or bash, python, env, xargs, ...) is on the list, `sh -c`
// runs anything, and the guard constrains nothing.
//
//   node dist/examples/agent-loop.js [ADDRESS]
//
// ADDRESS is unix:/ABSOLUTE/PATH or host:port; without one, $WORKSPACED_ADDR,
// else the server's default socket, unix:/run/workspaced/workspaced.sock.
import { Capabilities, CommandNotAllowed, connect, VERSION, WorkspacedError } from '../src';

const COMMANDS = ['cat', 'wc', 'head', 'ls'];

async function main(): Promise<void> {
  // Every call gives up after 30 s (commands have their own limit, below).
  const client = connect({ address: process.argv[2], deadlineMs: 30_000 });
  try {
    const sandbox = (await client.providers()).find((p) => p.kind === 'local-sandbox' && p.available);
    const caps: Capabilities = sandbox
      ? { fs: {}, shell: { allowedCommands: COMMANDS, maxDurationMs: 60_000 } }
      : { fs: {} };
    await using ws = await client.open(sandbox ? 'local-sandbox' : 'memory', caps);
    console.log(`opened ${ws.id} (${ws.provider}); server ${await client.serverVersion()}, client ${VERSION}`);

    await ws.writeFile('notes/todo.txt', 'write the client\ntest the client\nship it\n', { createParents: true });

    if (sandbox) {
      // argv is executed directly, never through a shell.
      const proc = ws.exec(['wc', '-l', 'notes/todo.txt'], { timeoutMs: 10_000 });
      for await (const ev of proc) {
        if (ev.type === 'gap') console.log(`[${ev.stream}: ${ev.bytesDropped} bytes lost]`);
        else process.stdout.write(`[${ev.type}] ${ev.data.toString()}`);
      }
      const exit = await proc.wait();
      console.log(`exit: cause=${exit.cause} code=${exit.exitCode} wall=${exit.wallTimeMs}ms`);

      // A shell is not on the list, so it is refused before anything runs.
      try {
        await ws.run(['sh', '-c', 'echo unconfined']);
      } catch (e) {
        if (!(e instanceof CommandNotAllowed)) throw e;
        console.log(`sh refused: ${e.reason}`);
      }
    } else {
      console.log('no local-sandbox on this server: files only');
    }

    await ws.editFile('notes/todo.txt', 'ship it', 'ship it (done)');
    const todo = (await ws.readText('notes/todo.txt')).split('\n').filter(Boolean);
    console.log(`todo.txt: ${todo.filter((l) => l.endsWith('(done)')).length} of ${todo.length} done`);
  } finally {
    client.close();
  }
}

main().catch((err: unknown) => {
  if (err instanceof WorkspacedError) console.error(`${err.name} (${err.reason || err.codeName}): ${err.message}`);
  else console.error(err);
  process.exit(1);
});
