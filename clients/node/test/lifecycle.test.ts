// Workspace lifecycle: providers, list, describe, resolve, idempotent
// close, and `await using` / Symbol.asyncDispose.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Client, connect, NoSuchWorkspace, Workspace } from '../src';
import { CAPS, Server, startServer } from './server';

let srv: Server;
let client: Client;

before(async () => {
  srv = await startServer();
  client = connect({ address: srv.address });
});
// stop() rejects (and so fails this file) unless the server exits 0.
after(async () => {
  client?.close();
  await srv?.stop();
});

describe('lifecycle', () => {
  test('providers lists all four kinds; health is SERVING', async () => {
    const ps = await client.providers();
    assert.deepEqual(ps.map((p) => p.kind), ['memory', 'local-bash', 'local-sandbox', 'docker']);
    const bash = ps.find((p) => p.kind === 'local-bash')!;
    assert.equal(bash.available, true);
    assert.deepEqual(bash.capabilities, ['fs', 'shell']);
    assert.equal(await client.health(), 'SERVING');
  });

  test('open, describe, list, resolve', async () => {
    const ws = await client.open('local-bash', CAPS);
    try {
      assert.match(ws.id, /^ws_[0-9a-f]{32}$/);
      assert.equal(ws.provider, 'local-bash');
      assert.deepEqual(ws.capabilities?.shell?.allowedCommands, CAPS.shell!.allowedCommands);
      const d = await ws.describe();
      assert.equal(d.id, ws.id);
      assert.equal(d.state, 'STATE_OPEN');
      assert.ok(d.operations.includes('ReadFile'));
      const listed = await client.list();
      assert.ok(listed.some((w) => w.id === ws.id && w.state === 'STATE_OPEN'));

      await ws.writeFile('kept.txt', 'still here');
      const again = await client.resolve(ws.ref);
      assert.equal(again.id, ws.id);
      assert.equal(await again.readText('kept.txt'), 'still here');
    } finally {
      await ws.close();
    }
  });

  test('close is idempotent, locally and on the server', async () => {
    const ws = await client.open('memory', { fs: {} });
    const twin = await client.resolve(ws.ref); // a second handle on the same workspace
    assert.equal(await ws.close(), false);
    assert.equal(await ws.close(), true); // no round trip, no error
    assert.equal(await twin.close(), true); // the server answers already_closed
    await assert.rejects(ws.stat('.'), NoSuchWorkspace);
  });

  test('await using closes the workspace at the end of the block', async () => {
    let captured: Workspace | undefined;
    {
      await using ws = await client.open('local-bash', CAPS);
      captured = ws;
      await ws.writeFile('f', 'x');
      assert.equal((await client.list()).find((w) => w.id === ws.id)?.state, 'STATE_OPEN');
    }
    await assert.rejects(captured!.stat('f'), NoSuchWorkspace);
    assert.equal((await client.list()).find((w) => w.id === captured!.id)?.state ?? 'STATE_CLOSED', 'STATE_CLOSED');
  });

  test('await using closes the workspace when the block throws', async () => {
    let captured: Workspace | undefined;
    await assert.rejects(
      (async () => {
        await using ws = await client.open('local-bash', CAPS);
        captured = ws;
        await ws.readFile('does-not-exist'); // throws NoSuchFile out of the block
      })(),
      { name: 'NoSuchFile' },
    );
    await assert.rejects(captured!.stat('.'), NoSuchWorkspace);
  });

  test('Symbol.asyncDispose called directly closes too', async () => {
    const ws = await client.open('local-bash', CAPS);
    await ws[Symbol.asyncDispose]();
    await assert.rejects(ws.stat('.'), NoSuchWorkspace);
    await ws[Symbol.asyncDispose](); // again: still fine
  });
});
