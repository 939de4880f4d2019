// Whole trees against a real server: uploadTree / downloadTree round trips
// (memory and local-bash) with a symlink kept as a link, a hostile archive
// refused by the server (BadArchive) and by the client's extraction
// (UnsafeArchive), a FIFO listed as skipped, watch events, snapshots:
// restore, fork, list and delete, and open's fromPath shadowing a host
// directory the server allows (SourcePathDenied for any other).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { status as GrpcStatus } from '@grpc/grpc-js';

import { BadArchive, Client, connect, NoSuchSnapshot, SourcePathDenied, UnsafeArchive, Workspace } from '../src';
import { extractTar } from '../src/tar';
import { CAPS, Server, startServer } from './server';

let srv: Server;
let client: Client;
const opened: Workspace[] = [];

before(async () => {
  srv = await startServer();
  client = connect({ address: srv.address });
});
after(async () => {
  try {
    for (const ws of opened) await ws.close();
  } finally {
    client?.close();
    await srv?.stop();
  }
});

async function open(provider: 'memory' | 'local-bash', opts: { fromSnapshot?: string } = {}): Promise<Workspace> {
  const ws = await client.open(provider, provider === 'memory' ? { fs: {} } : CAPS, opts);
  opened.push(ws);
  return ws;
}

const tmp = (name: string) => fs.mkdtempSync(path.join(process.env.TEST_TMPDIR ?? os.tmpdir(), `${name}-`));

/** One raw ustar header block (built here by hand, independent of the client's writer). */
function rawHeader(name: string, type: string, size: number): Buffer {
  const b = Buffer.alloc(512);
  b.write(name, 0, 100);
  b.write('0000644\0', 100);
  b.write('0000000\0', 108);
  b.write('0000000\0', 116);
  b.write(size.toString(8).padStart(11, '0') + '\0', 124);
  b.write('00000000000\0', 136);
  b.fill(' ', 148, 156);
  b.write(type, 156);
  b.write('ustar\0' + '00', 257);
  let sum = 0;
  for (const x of b) sum += x;
  b.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
  return b;
}

function hostileTar(): Buffer {
  const body = Buffer.from('evil\n');
  return Buffer.concat([rawHeader('../evil', '0', body.length), body, Buffer.alloc(512 - body.length), Buffer.alloc(1024)]);
}

function makeTree(): string {
  const dir = tmp('tree-src');
  fs.mkdirSync(path.join(dir, 'sub', 'deep'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'top.txt'), 'top\n');
  fs.writeFileSync(path.join(dir, 'sub', 'deep', 'b.bin'), Buffer.from([0, 1, 2, 255]));
  fs.chmodSync(path.join(dir, 'sub', 'deep', 'b.bin'), 0o640);
  fs.symlinkSync('deep/b.bin', path.join(dir, 'sub', 'link'));
  // A name over the ustar header's 100 bytes: carried by a pax header.
  fs.writeFileSync(path.join(dir, 'n'.repeat(120)), 'long\n');
  return dir;
}

describe('trees', () => {
  for (const provider of ['memory', 'local-bash'] as const) {
    test(`uploadTree then downloadTree round trip (${provider}), symlink kept`, async () => {
      const ws = await open(provider);
      const src = makeTree();
      const up = await ws.uploadTree(src, 'proj', { format: provider === 'memory' ? 'tar.gz' : 'tar' });
      assert.equal(up.files, 3);
      assert.equal(up.symlinks, 1);
      assert.equal(up.directories >= 2, true);
      assert.equal(await ws.readText('proj/top.txt'), 'top\n');
      assert.equal((await ws.stat('proj/sub/link')).type, 'FILE_TYPE_SYMLINK');

      const dest = tmp('tree-dst');
      const down = await ws.downloadTree('proj', dest);
      assert.equal(down.files, 3);
      assert.equal(down.symlinks, 1);
      assert.equal(fs.readFileSync(path.join(dest, 'top.txt'), 'utf8'), 'top\n');
      assert.deepEqual([...fs.readFileSync(path.join(dest, 'sub', 'deep', 'b.bin'))], [0, 1, 2, 255]);
      assert.equal(fs.statSync(path.join(dest, 'sub', 'deep', 'b.bin')).mode & 0o777, 0o640);
      assert.equal(fs.lstatSync(path.join(dest, 'sub', 'link')).isSymbolicLink(), true);
      assert.equal(fs.readlinkSync(path.join(dest, 'sub', 'link')), 'deep/b.bin');
      assert.equal(fs.readFileSync(path.join(dest, 'n'.repeat(120)), 'utf8'), 'long\n');
    });
  }

  test('writeArchive of a hostile tar is BadArchive dotdot, nothing written', async () => {
    const ws = await open('memory');
    await assert.rejects(ws.writeArchive('dst', hostileTar()), (e: unknown) => {
      assert.ok(e instanceof BadArchive, String(e));
      assert.equal(e.problem, 'dotdot');
      assert.equal(e.entry, '../evil');
      return true;
    });
    const names = (await ws.listDir('.')).entries.map((e) => e.path);
    assert.deepEqual(names, []);
  });

  test('the client refuses to extract a hostile tar outside its directory', async () => {
    const base = tmp('extract');
    const dest = path.join(base, 'dest');
    async function* src() {
      yield hostileTar();
    }
    await assert.rejects(extractTar(src(), dest), (e: unknown) => e instanceof UnsafeArchive && e.problem === 'dotdot');
    assert.equal(fs.existsSync(path.join(base, 'evil')), false);
    // A symlink out, then a file through it: refused before anything leaves.
    async function* through() {
      const link = rawHeader('out', '2', 0);
      link.write('/tmp', 157);
      let sum = 0;
      link.fill(' ', 148, 156);
      for (const x of link) sum += x;
      link.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
      yield link;
    }
    await assert.rejects(extractTar(through(), dest), (e: unknown) => e instanceof UnsafeArchive && e.problem === 'link_outside');
    // A link whose own text stays inside but walks through another link
    // that leads up: c -> x/.. in d/, then d/x -> .. (the root).
    const linkBlock = (name: string, target: string) => {
      const b = rawHeader(name, '2', 0);
      b.write(target, 157);
      b.fill(' ', 148, 156);
      let sum = 0;
      for (const x of b) sum += x;
      b.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
      return b;
    };
    async function* chain() {
      yield Buffer.concat([rawHeader('d/', '5', 0), linkBlock('d/c', 'x/..'), linkBlock('d/x', '..'), Buffer.alloc(1024)]);
    }
    const dest2 = path.join(base, 'dest2');
    await assert.rejects(extractTar(chain(), dest2), (e: unknown) => e instanceof UnsafeArchive && e.problem === 'link_outside');
    assert.equal(fs.existsSync(path.join(dest2, 'd', 'c')), false);
  });

  test('readArchive lists a FIFO as skipped "special" (local-bash)', async () => {
    const ws = await open('local-bash');
    await ws.writeFile('a.txt', 'a');
    execFileSync('mkfifo', [path.join(srv.stateDir, 'workspaces', ws.id, 'pipe')]);
    const archive = ws.readArchive('.');
    const bytes = await archive.toBuffer();
    assert.ok(bytes.length >= 1536);
    assert.equal(archive.trailer?.files, 1);
    assert.deepEqual(
      archive.trailer?.skipped.map((s) => [s.path, s.reason]),
      [['pipe', 'special']],
    );
  });

  test('watch: ready first, then created for a write', async () => {
    const ws = await open('memory');
    const w = ws.watch('.', { recursive: true, deadlineMs: 30_000 });
    const seen: string[] = [];
    for await (const ev of w) {
      seen.push(`${ev.type}:${ev.path}`);
      if (ev.type === 'ready') {
        assert.equal(seen.length, 1);
        await ws.writeFile('new.txt', 'x');
      } else if (ev.path === 'new.txt') {
        assert.equal(ev.type, 'created', seen.join(' '));
        assert.equal(ev.fileType, 'regular');
        w.cancel();
      }
    }
    assert.equal(seen[0], 'ready:');
    assert.ok(seen.includes('created:new.txt'), seen.join(' '));
  });

  test('snapshot, change, restore; fork; list; delete', async () => {
    const ws = await open('local-bash');
    await ws.writeFile('f.txt', 'old');
    const snap = await ws.snapshot('node-snap', { kind: 'test' });
    assert.match(snap.id, /^snap-/);
    assert.equal(snap.files, 1);
    await ws.writeFile('f.txt', 'new');
    await ws.writeFile('g.txt', 'later');
    const restored = await ws.restore(snap.id);
    assert.equal(restored.snapshot.id, snap.id);
    assert.equal(await ws.readText('f.txt'), 'old');
    await assert.rejects(ws.stat('g.txt'));

    const fork = await open('memory', { fromSnapshot: snap.id });
    assert.equal(await fork.readText('f.txt'), 'old');

    const page = await client.listSnapshots({ labelSelector: 'kind=test' });
    assert.deepEqual(page.map((s) => s.id), [snap.id]);
    const all: string[] = [];
    for await (const s of client.listAllSnapshots({ workspaceId: ws.id, pageSize: 1 })) all.push(s.id);
    assert.deepEqual(all, [snap.id]);

    assert.equal(typeof (await client.deleteSnapshot(snap.id)), 'number');
    await assert.rejects(client.deleteSnapshot(snap.id), NoSuchSnapshot);
    await assert.rejects(client.open('memory', { fs: {} }, { fromSnapshot: snap.id }), NoSuchSnapshot);
  });
});

/** Every entry under root with its type, mode and content or link target. */
function describeHost(root: string): string[] {
  const out: string[] = [];
  const walk = (rel: string) => {
    const p = path.join(root, rel);
    const st = fs.lstatSync(p);
    let line = `${rel} ${st.mode.toString(8)}`;
    if (st.isSymbolicLink()) line += ` -> ${fs.readlinkSync(p)}`;
    else if (st.isFile()) line += ` ${fs.readFileSync(p).toString('hex')}`;
    out.push(line);
    if (st.isDirectory()) for (const n of fs.readdirSync(p).sort()) walk(path.join(rel, n));
  };
  walk('.');
  return out;
}

describe('open fromPath', () => {
  // A canonical host directory the server lets open's fromPath copy, with
  // "repo" in it: a file, a subdirectory with a file and a relative symlink.
  const allowed = fs.realpathSync(tmp('source'));
  const repo = path.join(allowed, 'repo');
  const deep = Buffer.from([0, 1, 2, 255, 10]);
  fs.mkdirSync(path.join(repo, 'sub'), { recursive: true });
  fs.writeFileSync(path.join(repo, 'top.txt'), 'top\n');
  fs.writeFileSync(path.join(repo, 'sub', 'deep.bin'), deep);
  fs.symlinkSync('sub/deep.bin', path.join(repo, 'link'));
  const hostBefore = describeHost(allowed);

  let shadowSrv: Server;
  let shadow: Client;
  before(async () => {
    shadowSrv = await startServer({ args: ['--source-path-allow', allowed] });
    shadow = connect({ address: shadowSrv.address });
  });
  after(async () => {
    shadow?.close();
    await shadowSrv?.stop();
    fs.rmSync(allowed, { recursive: true, force: true });
  });

  for (const provider of ['memory', 'local-bash'] as const) {
    test(`shadows an allowed directory, the source never written (${provider})`, async () => {
      const ws = await shadow.open(provider, provider === 'memory' ? { fs: {} } : CAPS, { fromPath: repo });
      try {
        assert.equal(await ws.readText('top.txt'), 'top\n');
        assert.deepEqual(await ws.readFile('sub/deep.bin'), deep);
        assert.equal((await ws.stat('link')).type, 'FILE_TYPE_SYMLINK');
        const dest = tmp('shadow-dst');
        const down = await ws.downloadTree('.', dest);
        assert.equal(down.files, 2);
        assert.equal(down.symlinks, 1);
        assert.equal(fs.readlinkSync(path.join(dest, 'link')), 'sub/deep.bin');

        await ws.writeFile('top.txt', 'changed');
        await ws.writeFile('new.txt', 'new');
        assert.equal(await ws.readText('top.txt'), 'changed');
        assert.deepEqual(describeHost(allowed), hostBefore, 'the source is never written');
      } finally {
        await ws.close();
      }
    });
  }

  test('a fromPath outside the allowed directory is SourcePathDenied', async () => {
    for (const bad of ['/etc', `${repo}/../repo`, `${allowed}/..`, path.dirname(allowed)]) {
      await assert.rejects(shadow.open('memory', { fs: {} }, { fromPath: bad }), (e: unknown) => {
        assert.ok(e instanceof SourcePathDenied, `${bad}: ${String(e)}`);
        assert.equal(e.code, GrpcStatus.PERMISSION_DENIED);
        assert.equal(e.reason, 'SOURCE_PATH_DENIED');
        assert.equal(e.metadata.path, bad);
        return true;
      });
    }
    assert.deepEqual(describeHost(allowed), hostBefore);
  });
});
