// Streamed execution against a real server: output before exit, stdin,
// cancel, timeout, signals, attach replay, background processes, Run.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Client, connect, ProcessOutputEvent, Workspace } from '../src';
import { CAPS, Server, startServer } from './server';

let srv: Server;
let client: Client;
let ws: Workspace;

before(async () => {
  srv = await startServer();
  client = connect({ address: srv.address });
  ws = await client.open('local-bash', CAPS);
});
// The server is stopped whatever the close does; stop() rejects (and so
// fails this file) unless the server exits 0.
after(async () => {
  try {
    await ws?.close();
  } finally {
    client?.close();
    await srv?.stop();
  }
});

const text = (evs: ProcessOutputEvent[], stream = 'stdout') =>
  Buffer.concat(evs.filter((e) => e.type === stream).map((e) => (e as { data: Buffer }).data)).toString();

describe('exec', () => {
  test('output streams before the process exits', async () => {
    // The command cannot go past `read` before the test writes a line, so
    // output held back until the exit would never bring "a" (the test
    // would hang until its deadline): no timing involved.
    const proc = ws.exec(['sh', '-c', 'echo a; read line; echo b'], { stdin: true, tag: 'held' });
    let exited = false;
    void proc.wait().then(() => (exited = true));
    const started = await proc.started;
    assert.ok(started.pid > 0);
    assert.match(started.id, /^p_/);

    const it = proc[Symbol.asyncIterator]();
    const first = await it.next();
    assert.equal(first.done, false);
    assert.equal(first.value.type, 'stdout');
    assert.equal((first.value as { data: Buffer }).data.toString(), 'a\n');
    assert.equal(exited, false, "'a' arrived only after the exit");
    assert.equal((await ws.ps()).find((p) => p.tag === 'held')?.running, true);
    await proc.writeStdin('go\n');
    await proc.closeStdin();
    const rest: ProcessOutputEvent[] = [];
    for (let r = await it.next(); !r.done; r = await it.next()) rest.push(r.value);
    assert.equal(text(rest), 'b\n');
    const exit = await proc.wait();
    assert.equal(exit.cause, 'EXIT_CAUSE_EXITED');
    assert.equal(exit.exitCode, 0);
    assert.equal(exit.ok, true);
    assert.equal(exit.stdout?.bytesTotal, 4);
  });

  test('non-zero exit code and stderr are reported', async () => {
    const proc = ws.exec(['sh', '-c', 'echo oops >&2; exit 3']);
    const out = await proc.collect();
    assert.equal(out.stderr.toString(), 'oops\n');
    assert.equal(out.exited.cause, 'EXIT_CAUSE_EXITED');
    assert.equal(out.exited.exitCode, 3);
    assert.equal(out.exited.ok, false);
  });

  test('stdin round trip through cat', async () => {
    const proc = ws.exec(['cat'], { stdin: true });
    await proc.started;
    const it = proc[Symbol.asyncIterator]();
    await proc.writeStdin('ping\n');
    // cat echoes the first line before stdin is closed: a real round trip.
    const first = await it.next();
    assert.equal(first.done, false);
    assert.equal((first.value as { data: Buffer }).data.toString(), 'ping\n');
    await proc.writeStdin(Buffer.from('pong\n'));
    await proc.closeStdin();
    const rest: ProcessOutputEvent[] = [];
    for (let r = await it.next(); !r.done; r = await it.next()) rest.push(r.value);
    assert.equal(text(rest), 'pong\n');
    const exit = await proc.wait();
    assert.equal(exit.cause, 'EXIT_CAUSE_EXITED');
    assert.equal(exit.exitCode, 0);
    assert.equal(exit.stdout?.bytesTotal, 10);
  });

  test('cancel ends the process with cause CANCELLED and keeps earlier output', async () => {
    const proc = ws.exec(['sh', '-c', 'echo before; sleep 30; echo after']);
    const it = proc[Symbol.asyncIterator]();
    const first = await it.next();
    assert.equal((first.value as { data: Buffer }).data.toString(), 'before\n');
    const t0 = Date.now();
    proc.cancel();
    proc.cancel(); // idempotent
    const exit = await proc.wait();
    assert.ok(Date.now() - t0 < 10_000, 'cancel did not stop the command');
    assert.equal(exit.cause, 'EXIT_CAUSE_CANCELLED');
    // No duplicate replay of "before", and nothing after the kill.
    const rest: ProcessOutputEvent[] = [];
    for (let r = await it.next(); !r.done; r = await it.next()) rest.push(r.value);
    assert.equal(text(rest), '');
    const info = (await ws.ps()).find((p) => p.id === proc.info!.id);
    assert.equal(info?.running, false);
  });

  test('timeout ends the process with cause TIMEOUT', async () => {
    const t0 = Date.now();
    const proc = ws.exec(['sleep', '30'], { timeoutMs: 300 });
    const exit = await proc.wait();
    assert.equal(exit.cause, 'EXIT_CAUSE_TIMEOUT');
    assert.ok(Date.now() - t0 < 10_000);
  });

  test('signal over the stream, and kill by tag', async () => {
    const a = ws.exec(['sleep', '30']);
    await a.started;
    await a.signal('SIGTERM');
    const ea = await a.wait();
    assert.equal(ea.cause, 'EXIT_CAUSE_SIGNALED');
    assert.equal(ea.signal, 15);

    const b = ws.exec(['sleep', '30'], { tag: 'sleeper' });
    await b.started;
    await ws.kill('sleeper', 'SIGKILL');
    const eb = await b.wait();
    assert.equal(eb.cause, 'EXIT_CAUSE_SIGNALED');
    assert.equal(eb.signal, 9);
  });

  test('attach by tag replays the output from an offset', async () => {
    const proc = ws.exec(['sh', '-c', 'echo hello; echo world'], { tag: 'replay-me' });
    const first = await proc.collect();
    assert.equal(first.stdout.toString(), 'hello\nworld\n');

    const all = await ws.attach('replay-me').collect();
    assert.equal(all.stdout.toString(), 'hello\nworld\n');
    assert.equal(all.exited.cause, 'EXIT_CAUSE_EXITED');
    assert.equal(all.exited.stdout?.bytesTotal, 12);

    const tail = ws.attach({ tag: 'replay-me' }, { offset: 6 });
    const started = await tail.started;
    assert.equal(started.id, proc.info!.id);
    assert.equal(started.tag, 'replay-me');
    assert.equal((await tail.collect()).stdout.toString(), 'world\n');

    // By id as well.
    assert.equal((await ws.attach(proc.info!.id).collect()).stdout.toString(), 'hello\nworld\n');
  });

  test('a background process survives its stream and is followed by attach', async () => {
    const proc = ws.exec(['sh', '-c', 'echo start; sleep 1; echo end'], { tag: 'bg', background: true });
    const it = proc[Symbol.asyncIterator]();
    assert.equal(((await it.next()).value as { data: Buffer }).data.toString(), 'start\n');
    proc.cancel(); // ends the stream only: background processes keep running
    const exit = await proc.wait();
    assert.equal(exit.cause, 'EXIT_CAUSE_EXITED');
    const rest: ProcessOutputEvent[] = [];
    for (let r = await it.next(); !r.done; r = await it.next()) rest.push(r.value);
    assert.equal(text(rest), 'end\n');
    const ps = await ws.ps();
    const bg = ps.find((p) => p.tag === 'bg');
    assert.equal(bg?.background, true);
    assert.equal(bg?.running, false);
  });

  test('pty output arrives as pty events', async () => {
    const proc = ws.exec(['sh', '-c', 'echo on-a-tty'], { pty: { rows: 24, cols: 80 } });
    const out = await proc.collect();
    assert.match(out.pty.toString(), /on-a-tty/);
    assert.equal(out.stdout.length, 0);
    assert.equal(out.exited.cause, 'EXIT_CAUSE_EXITED');
  });

  test('run returns both streams, feeds stdin, and the exit record', async () => {
    const r = await ws.run(['sh', '-c', 'cat; echo err >&2'], { stdin: 'fed\n' });
    assert.equal(r.stdout.toString(), 'fed\n');
    assert.equal(r.stderr.toString(), 'err\n');
    assert.equal(r.exited.cause, 'EXIT_CAUSE_EXITED');
    assert.match(r.processId, /^p_/);
    // A command string is tokenized by the server's guard, not a shell.
    const s = await ws.run('echo two words');
    assert.equal(s.stdout.toString(), 'two words\n');
  });
});
