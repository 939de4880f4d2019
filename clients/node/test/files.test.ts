// File operations against a real server: whole and streamed reads and
// writes (a multi-MiB file byte for byte), and the other helpers.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { after, before, describe, test } from 'node:test';

import { Client, connect, Workspace } from '../src';
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

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

describe('files', () => {
  test('write then read a small file, text and bytes', async () => {
    const res = await ws.writeFile('hello.txt', 'hello, workspace\n');
    assert.equal(res.bytesWritten, 17);
    assert.equal(res.sha256, sha256(Buffer.from('hello, workspace\n')));
    assert.equal(res.info.size, 17);
    assert.equal(await ws.readText('hello.txt'), 'hello, workspace\n');
    // A range read.
    assert.equal((await ws.readFile('hello.txt', { offset: 7, length: 9 })).toString(), 'workspace');
  });

  test('empty file round trip', async () => {
    const res = await ws.writeFile('empty', Buffer.alloc(0));
    assert.equal(res.bytesWritten, 0);
    assert.equal((await ws.readFile('empty')).length, 0);
    assert.equal((await ws.stat('empty')).size, 0);
  });

  test('a multi-MiB file streamed both ways is byte-exact', async () => {
    const data = randomBytes(5 * 1024 * 1024 + 12345);
    // Source: a Readable of odd-sized pieces, so the client must re-chunk.
    async function* pieces() {
      for (let off = 0; off < data.length; off += 77777) yield data.subarray(off, off + 77777);
    }
    const res = await ws.writeFile('big/blob.bin', Readable.from(pieces()), { createParents: true });
    assert.equal(res.bytesWritten, data.length);
    assert.equal(res.sha256, sha256(data));

    // Read back as a Node stream; several chunks must arrive (256 KiB max each).
    const parts: Buffer[] = [];
    for await (const chunk of ws.readFileStream('big/blob.bin')) parts.push(chunk as Buffer);
    assert.ok(parts.length >= 20, `expected many chunks, got ${parts.length}`);
    assert.ok(parts.every((p) => p.length <= 256 * 1024));
    const back = Buffer.concat(parts);
    assert.equal(back.length, data.length);
    assert.ok(back.equals(data), 'streamed read differs from what was written');

    // And the whole-file form, plus the command side's view of its size.
    assert.ok((await ws.readFile('big/blob.bin')).equals(data));
    const wc = await ws.run(['wc', '-c', 'big/blob.bin']);
    assert.equal(wc.stdout.toString().trim().split(/\s+/)[0], String(data.length));
  });

  test('stat, makeDir, listDir, move, glob, remove', async () => {
    await ws.makeDir('tree/a/b', { parents: true });
    await ws.writeFile('tree/a/one.txt', '1');
    await ws.writeFile('tree/a/b/two.txt', '22');
    const st = await ws.stat('tree/a/b/two.txt');
    assert.equal(st.type, 'FILE_TYPE_REGULAR');
    assert.equal(st.size, 2);
    assert.equal((await ws.stat('tree/a')).type, 'FILE_TYPE_DIRECTORY');

    const listing = await ws.listDir('tree', { depth: 3 });
    assert.deepEqual(
      listing.entries.map((e) => e.path),
      ['tree/a', 'tree/a/b', 'tree/a/b/two.txt', 'tree/a/one.txt'],
    );
    assert.equal(listing.truncated, false);
    assert.equal(listing.truncatedReason, '');
    // The server says why a listing was cut short once it knows (its own
    // limit here); one that predates reasons leaves it empty.
    const cutList = await ws.listDir('tree', { depth: 3, maxEntries: 1 });
    const cutGlob = await ws.glob('tree/**', { maxResults: 1 });
    assert.equal(cutList.entries.length, 1);
    assert.equal(cutGlob.matches.length, 1);
    for (const cut of [cutList, cutGlob]) {
      assert.equal(cut.truncated, true);
      assert.ok(['', 'max_results'].includes(cut.truncatedReason), cut.truncatedReason);
    }

    await ws.move('tree/a/one.txt', 'tree/uno.txt');
    assert.equal(await ws.readText('tree/uno.txt'), '1');

    const g = await ws.glob('tree/**/*.txt');
    assert.deepEqual(g.matches.map((m) => m.path).sort(), ['tree/a/b/two.txt', 'tree/uno.txt']);

    const removed = await ws.remove('tree', { recursive: true });
    assert.equal(removed, 5); // tree, a, b, two.txt, uno.txt
    await assert.rejects(ws.stat('tree'), { name: 'NoSuchFile' });
  });

  test('grep streams matches and a summary', async () => {
    await ws.writeFile('src/a.py', 'import os\nTODO: one\nprint(1)\n', { createParents: true });
    await ws.writeFile('src/b.py', 'todo: two\n');
    await ws.writeFile('src/c.txt', 'TODO: not included\n');
    const results = ws.grep('todo', { path: 'src', include: '**/*.py', ignoreCase: true });
    const seen: string[] = [];
    for await (const m of results) seen.push(`${m.path}:${m.lineNumber}:${m.line.toString()}`);
    assert.deepEqual(seen.sort(), ['src/a.py:2:TODO: one', 'src/b.py:1:todo: two']);
    assert.equal(results.summary?.matches, 2);
  });

  test('editFile replaces once, and refuses a stale ifMatch', async () => {
    const w = await ws.writeFile('edit.txt', 'alpha beta gamma\n');
    const r = await ws.editFile('edit.txt', 'beta', 'BETA', { ifMatch: w.sha256 });
    assert.equal(r.replacements, 1);
    assert.equal(await ws.readText('edit.txt'), 'alpha BETA gamma\n');
    // w.sha256 is now stale.
    await assert.rejects(ws.editFile('edit.txt', 'alpha', 'x', { ifMatch: w.sha256 }), { name: 'Conflict', reason: 'CONFLICT' });
    await assert.rejects(ws.editFile('edit.txt', 'nope', 'x'), { name: 'NoMatch' });
  });
});
