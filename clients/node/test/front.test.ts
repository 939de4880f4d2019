// The client behind a real front proxy over two real nodes: nginx from the
// fixture shared by the clients' suites ($WORKSPACED_TEST_FRONT,
// clients/testdata/front.sh), round robin for calls without
// `x-workspace-node`, the named node for calls with it. A workspace lives
// on one node, so every call about it must be pinned; an unpinned call
// lands on the other node every second time and fails NO_SUCH_WORKSPACE.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import * as grpc from '@grpc/grpc-js';

import { Client, connect, ExitResult, isTransient, Process, Workspace, WorkspacedError, WriteOptions } from '../src';
import { CAPS, droppingPort, Front, Server, startFront, startServer, stopAll } from './server';

const NODES = ['node-1', 'node-2'];

async function writeThroughFront(ws: Workspace, path: string, data: string, opts: WriteOptions = {}): Promise<void> {
  await ws.writeFile(path, data, opts);
  assert.equal(await ws.readText(path), data, `${path}: not written`);
}

/** Stdout and exit of an Exec.Start stream. */
async function finishThroughFront(_ws: Workspace, proc: Process): Promise<{ stdout: string; exited: ExitResult }> {
  let stdout = '';
  for await (const ev of proc) if (ev.type === 'stdout') stdout += ev.data.toString();
  return { stdout, exited: await proc.wait() };
}

describe('behind a front over two nodes', () => {
  let servers: Server[] = [];
  let front: Front;
  let client: Client;
  const opened: Workspace[] = [];
  const open = async (...args: Parameters<Client['open']>) => {
    const ws = await client.open(...args);
    opened.push(ws);
    return ws;
  };

  before(async () => {
    servers = await Promise.all([startServer(), startServer()]);
    front = await startFront(servers.map((s) => s.address));
    client = connect({ address: front.address, token: '' });
  });
  after(async () => {
    // A failed test may leave a workspace unreachable; its server's end removes it.
    await Promise.all(opened.map((ws) => ws.close().catch(() => undefined)));
    client?.close();
    await stopAll(front, ...servers);
  });

  test('open names the node that holds the workspace', async () => {
    const seen = new Set<string>();
    for (let i = 0; i < 4; i++) {
      const ws = await open('memory', { fs: {} });
      assert.ok(ws.node && NODES.includes(ws.node), `node ${ws.node}`);
      seen.add(ws.node);
      // The named node is the one that really holds it.
      const direct = connect({ address: servers[NODES.indexOf(ws.node)].address, token: '' });
      try {
        assert.ok((await direct.list()).some((w) => w.id === ws.id));
      } finally {
        direct.close();
      }
    }
    assert.deepEqual([...seen].sort(), NODES, 'round robin should have used both nodes');
  });

  test('every call about the workspace is pinned', async () => {
    const ws = await open('local-bash', CAPS);
    assert.ok(ws.node && NODES.includes(ws.node));
    // Several rounds: round robin would send every other unpinned call to
    // the node that does not have the workspace.
    for (let i = 0; i < 3; i++) {
      const name = `dir/f${i}.txt`;
      await writeThroughFront(ws, name, `line ${i}\n`, { createParents: true });
      assert.equal((await ws.stat(name)).size, 7);
      assert.equal((await ws.editFile(name, 'line', 'LINE')).replacements, 1);
      assert.equal(await ws.readText(name), `LINE ${i}\n`);
      assert.equal((await ws.listDir('dir')).entries.length, i + 1);
      assert.equal((await ws.glob('dir/*.txt')).matches.length, i + 1);
      assert.equal((await ws.grep('LINE', { path: 'dir' }).toArray()).length, i + 1);
    }
    const chunks: Buffer[] = [];
    for await (const c of ws.readChunks('dir/f0.txt')) chunks.push(c);
    assert.equal(Buffer.concat(chunks).toString(), 'LINE 0\n');
    await ws.makeDir('sub');
    await ws.move('dir/f0.txt', 'sub/f0.txt');
    assert.equal(await ws.remove('sub', { recursive: true }), 2);

    // Streamed output and stdin over the Exec.Start stream.
    const proc = ws.exec(['sh', '-c', 'echo ready; cat'], { stdin: true });
    await proc.started;
    await proc.writeStdin('through the front\n');
    await proc.closeStdin();
    const { stdout, exited } = await finishThroughFront(ws, proc);
    assert.equal(stdout, 'ready\nthrough the front\n');
    assert.equal(exited.cause, 'EXIT_CAUSE_EXITED');

    const res = await ws.run(['wc', '-c'], { stdin: '12345' });
    assert.equal(res.stdout.toString().trim(), '5');

    // Signals on the stream, a background process, ps, attach, kill, and a
    // cancel whose wait() re-attaches.
    const sig = ws.exec(['sleep', '30'], { stdin: true });
    await sig.started;
    await sig.signal('SIGTERM');
    assert.equal((await finishThroughFront(ws, sig)).exited.cause, 'EXIT_CAUSE_SIGNALED');
    const bg = ws.exec(['sh', '-c', 'echo bg; sleep 30'], { tag: 'bg', background: true });
    await bg.started;
    assert.ok((await ws.ps()).some((p) => p.tag === 'bg' && p.running));
    const att = ws.attach({ tag: 'bg' });
    await att.started;
    await ws.kill({ tag: 'bg' }, 'SIGKILL');
    assert.equal((await att.wait()).signal, 9);
    assert.equal((await finishThroughFront(ws, bg)).exited.signal, 9);
    const cancelled = ws.exec(['sleep', '30']);
    await cancelled.started;
    cancelled.cancel();
    assert.equal((await cancelled.wait()).cause, 'EXIT_CAUSE_CANCELLED');

    assert.equal((await ws.describe()).id, ws.id);
    assert.equal(await ws.close(), false);
  });

  test('the front really balances unpinned calls', async () => {
    // The negative control: without the header, a call about the workspace
    // goes to the other node on some of a few tries.
    const ws = await open('memory', { fs: {} });
    const stat = (md: grpc.Metadata) =>
      new Promise<number>((resolve) => {
        client.transport.fs.Stat({ workspaceId: ws.id, path: '.' }, md, (err) => resolve(err ? err.code : grpc.status.OK));
      });
    const codes: number[] = [];
    for (let i = 0; i < 4; i++) codes.push(await stat(new grpc.Metadata()));
    assert.ok(codes.includes(grpc.status.NOT_FOUND), `codes ${codes}`);
    // With the header, the same bare call always finds it.
    const pinned = new grpc.Metadata();
    pinned.set('x-workspace-node', ws.node!);
    for (let i = 0; i < 4; i++) assert.equal(await stat(pinned), grpc.status.OK);
  });

  test('resolve with the node kept alongside the ref', async () => {
    const ws = await open('local-bash', CAPS);
    await writeThroughFront(ws, 'marker', 'here');
    const again = await client.resolve(ws.refString, { node: ws.node });
    assert.deepEqual([again.id, again.node], [ws.id, ws.node]);
    for (let i = 0; i < 4; i++) {
      assert.equal(await again.readText('marker'), 'here');
      assert.ok((await again.run(['true'])).exited.exitCode === 0);
    }
  });

  test('resolve on a node that is not behind the front is UNAVAILABLE', async () => {
    const ws = await open('memory', { fs: {} });
    await assert.rejects(client.resolve(ws.ref, { node: 'node-9' }), (e: unknown) => {
      assert.ok(e instanceof WorkspacedError, String(e));
      assert.equal(e.code, grpc.status.UNAVAILABLE);
      assert.equal(e.reason, '');
      assert.ok(isTransient(e));
      return true;
    });
  });
});

test('an open behind a front with a dead node lands on the live one', async () => {
  const server = await startServer();
  const dead = await droppingPort();
  const front = await startFront([server.address, `127.0.0.1:${dead.port}`]);
  const client = connect({ address: front.address, token: '' });
  try {
    // Round robin sends every other Open to the dead node: it fails
    // UNAVAILABLE and the client retries it, unpinned, onto the live one.
    for (let i = 0; i < 4; i++) {
      const ws = await client.open('memory', { fs: {} }, { retry: { maxAttempts: 6, initialBackoffMs: 10 } });
      assert.equal(ws.node, 'node-1');
      await writeThroughFront(ws, 'f', 'x');
      assert.equal(await ws.close(), false);
    }
  } finally {
    client.close();
    await dead.close();
    await stopAll(front, server);
  }
});

test('a direct connection names no node and works as before', async () => {
  const server = await startServer();
  const client = connect({ address: server.address, token: '' });
  try {
    const ws = await client.open('memory', { fs: {} });
    assert.equal(ws.node, undefined);
    await ws.writeFile('f', 'x');
    const again = await client.resolve(ws.ref);
    assert.equal(again.node, undefined);
    assert.equal(await again.readText('f'), 'x');
    assert.equal(await ws.close(), false);
  } finally {
    client.close();
    await server.stop();
  }
});
