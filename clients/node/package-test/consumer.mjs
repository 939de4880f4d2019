// A program that uses the installed package the way a user's would: by
// name, with plain node, against a running server. Run by
// package-test/run.sh after `npm install <tarball>` into an empty directory.
//
//   node consumer.mjs ADDRESS EXPECTED_VERSION
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import * as path from 'node:path';

import {
  CallAborted,
  Cancelled,
  connect,
  NoSuchFile,
  PathEscape,
  resolveProtoDir,
  VERSION,
  WorkspacedError,
} from '@workspaced/client';

const [address, expectedVersion] = process.argv.slice(2);
assert.ok(address && expectedVersion, 'usage: consumer.mjs ADDRESS EXPECTED_VERSION');

// CommonJS consumers get the same module; the version is the package's.
const require = createRequire(import.meta.url);
const cjs = require('@workspaced/client');
assert.equal(cjs.connect, connect);
assert.equal(VERSION, expectedVersion);
assert.equal(require('@workspaced/client/package.json').version, expectedVersion);

// The protos the client loads are the copy inside the installed package.
const pkgDir = path.dirname(require.resolve('@workspaced/client/package.json'));
assert.equal(resolveProtoDir(), path.join(pkgDir, 'proto'));

const client = connect({ address, deadlineMs: 30_000 });
try {
  assert.equal(await client.serverVersion(), expectedVersion, 'the server reports the same release');

  const ws = await client.open('memory', { fs: {} });
  try {
    // A round trip through the server.
    const text = 'written through the installed package\n';
    const w = await ws.writeFile('notes/a.txt', text, { createParents: true });
    assert.equal(w.bytesWritten, Buffer.byteLength(text));
    assert.equal((await ws.readFile('notes/a.txt')).toString(), text);

    // Typed errors.
    await assert.rejects(ws.readFile('../outside'), (e) => {
      assert.ok(e instanceof PathEscape, `${e?.constructor?.name}: ${e?.message}`);
      assert.ok(e instanceof WorkspacedError);
      assert.equal(e.reason, 'PATH_ESCAPE');
      assert.equal(e.codeName, 'INVALID_ARGUMENT');
      return true;
    });
    await assert.rejects(ws.stat('missing.txt'), NoSuchFile);

    // AbortSignal: aborted before the call, and in the middle of an upload
    // (which then commits nothing).
    const why = new Error('caller gave up');
    await assert.rejects(ws.readFile('notes/a.txt', { signal: AbortSignal.abort(why) }), (e) => {
      assert.ok(e instanceof CallAborted, `${e?.constructor?.name}: ${e?.message}`);
      assert.ok(e instanceof Cancelled);
      assert.equal(e.cause, why);
      return true;
    });
    const ac = new AbortController();
    let release;
    const released = new Promise((r) => (release = r));
    const source = (async function* () {
      yield 'first chunk\n';
      ac.abort();
      await released;
      yield 'second chunk\n';
    })();
    await assert.rejects(ws.writeFile('notes/aborted.txt', source, { signal: ac.signal }), CallAborted);
    release();
    await assert.rejects(ws.stat('notes/aborted.txt'), NoSuchFile);
  } finally {
    assert.equal(await ws.close(), false);
  }
} finally {
  client.close();
}
console.log(`consumer: @workspaced/client ${VERSION} ok`);
