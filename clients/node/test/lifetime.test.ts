// Workspace lifetimes, labels, names, env and secrets, idempotent Open,
// List filters and pages, the unary stdin/terminal calls (SendInput,
// CloseInput, Resize) and the re-resolve on eviction, against a real
// server (nothing is mocked).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, afterEach, before, describe, test } from 'node:test';

import {
  AlreadyExists,
  Capabilities,
  Client,
  connect,
  EvictionRetry,
  InputGap,
  Malformed,
  newRequestId,
  NoPty,
  NoSuchProcess,
  RequestIdReused,
  SecretsMissing,
  StdinClosed,
  Workspace,
  WorkspaceEvicted,
  WorkspaceFailed,
} from '../src';
import { ALLOWED, CAPS, Server, startServer } from './server';

const TTY_CAPS: Capabilities = { fs: {}, shell: { allowedCommands: [...ALLOWED, 'stty'] } };

/** How long a test waits for what the server does on its own (an expiry): a bound only a broken server reaches. */
const PATIENCE_MS = 60_000;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function waitFor<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + PATIENCE_MS;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await sleep(100);
  }
}

let srv: Server;
let client: Client;
const events: EvictionRetry[] = [];
const opened: Workspace[] = [];

before(async () => {
  srv = await startServer();
  client = connect({ address: srv.address, onEvictionRetry: (e) => events.push(e) });
});
after(async () => {
  client?.close();
  await srv?.stop();
});
afterEach(async () => {
  events.length = 0;
  for (const ws of opened.splice(0)) await ws.close().catch(() => undefined);
});

async function open(...args: Parameters<Client['open']>): Promise<Workspace> {
  const ws = await client.open(...args);
  opened.push(ws);
  return ws;
}

/**
 * Restarts the server and waits until the client's channel is connected
 * again (its first call after the restart may otherwise meet the old,
 * broken connection: UNAVAILABLE).
 */
async function restart(): Promise<void> {
  await srv.restart();
  await waitFor('the client to reconnect', async () =>
    client.health('', { deadlineMs: 5000 }).then(
      (s) => (s === 'SERVING' ? true : undefined),
      (e) => {
        if (e.codeName !== 'UNAVAILABLE') throw e;
        return undefined;
      },
    ),
  );
}

/** Removes a local-bash workspace's directory behind the server's back: its next call is WORKSPACE_EVICTED. */
function evictStorage(ws: Workspace): void {
  const dir = path.join(srv.stateDir, 'workspaces', ws.id);
  assert.ok(fs.statSync(dir).isDirectory(), dir);
  fs.rmSync(dir, { recursive: true, force: true });
}

describe('open', () => {
  test('takes a lifetime, labels, a name, env and secrets', async () => {
    // Environment names are free in a sandbox; on the host (local-bash)
    // only an allowlist may be set.
    const ws = await open('local-sandbox', CAPS, {
      lifetime: { ttlMs: 600_000, idleTimeoutMs: 300_000 },
      labels: { team: 'search', 'example.com/run': 'r-1' },
      name: 'open-options',
      env: { GREETING: 'hello' },
      secrets: { API_KEY: 's3cret', DB_PASSWORD: 'hunter2' },
    });
    assert.equal(ws.name, 'open-options');
    assert.deepEqual(ws.labels, { team: 'search', 'example.com/run': 'r-1' });
    assert.deepEqual(ws.lifetime, { ttlMs: 600_000, idleTimeoutMs: 300_000 });
    const now = Date.now();
    assert.ok(ws.expiresAt instanceof Date);
    assert.ok(ws.expiresAt.getTime() > now && ws.expiresAt.getTime() <= now + 305_000, String(ws.expiresAt));

    const d = await ws.describe();
    assert.equal(d.name, 'open-options');
    assert.deepEqual(d.labels, ws.labels);
    assert.deepEqual([d.lifetime?.ttlMs, d.lifetime?.idleTimeoutMs], [600_000, 300_000]);
    assert.equal(d.expiresAtUnixMs, ws.expiresAt!.getTime());
    assert.ok(d.lastActivityAtUnixMs > 0);
    assert.deepEqual(d.env, { GREETING: 'hello' });
    assert.deepEqual([...d.secretNames].sort(), ['API_KEY', 'DB_PASSWORD']);
    assert.equal(d.secretsMissing, false);
    assert.ok(!JSON.stringify(d).includes('s3cret'));
  });

  test("without a lifetime the server's defaults apply", async () => {
    // No ttl of its own; the server's default idle timeout (a day).
    const ws = await open('memory', { fs: {} });
    assert.deepEqual(ws.lifetime, { ttlMs: 0, idleTimeoutMs: 86_400_000 });
    assert.ok(ws.expiresAt instanceof Date);
    assert.deepEqual([ws.name, ws.labels], ['', {}]);
    await assert.rejects(client.open('memory', { fs: {} }, { secrets: { K: 'v' } }), Malformed); // no commands, no secrets
  });

  test('the same requestId returns the same workspace; another request with it is refused', async () => {
    const requestId = newRequestId();
    const first = await open('memory', { fs: {} }, { labels: { k: 'v' }, requestId });
    const again = await client.open('memory', { fs: {} }, { labels: { k: 'v' }, requestId });
    assert.equal(again.id, first.id);
    const err = await client.open('memory', { fs: {} }, { labels: { k: 'other' }, requestId }).catch((e) => e);
    assert.ok(err instanceof RequestIdReused, String(err));
    assert.equal(err.workspaceId, first.id);
    assert.equal(err.metadata.request_id, requestId);
    assert.notEqual(newRequestId(), newRequestId());
    await assert.rejects(client.open('memory', undefined, { requestId: 'not allowed' }), TypeError);
  });

  test('a name is unique among open workspaces', async () => {
    const ws = await open('memory', { fs: {} }, { name: 'only-one' });
    const err = await client.open('memory', { fs: {} }, { name: 'only-one' }).catch((e) => e);
    assert.ok(err instanceof AlreadyExists, String(err));
    assert.equal(err.metadata.workspace_id, ws.id);
    await assert.rejects(client.open('memory', { fs: {} }, { name: 'Not_A_Name' }), Malformed);
    await ws.close();
    await open('memory', { fs: {} }, { name: 'only-one' });
  });
});

describe('list', () => {
  test('filters by labels and name, in pages', async () => {
    const a = await Promise.all([1, 2, 3].map(() => open('memory', { fs: {} }, { labels: { suite: 'list', team: 'a' } })));
    const b = await open('memory', { fs: {} }, { labels: { suite: 'list', team: 'b' }, name: 'list-b' });
    const other = await open('memory', { fs: {} });
    const idsA = a.map((w) => w.id).sort();

    assert.deepEqual((await client.list({ labelSelector: 'suite=list,team=a' })).map((w) => w.id), idsA);
    assert.deepEqual((await client.list({ labelSelector: 'suite=list,team!=a' })).map((w) => w.id), [b.id]);
    assert.ok(!(await client.list({ labelSelector: 'suite' })).some((w) => w.id === other.id));
    assert.ok((await client.list({ labelSelector: '!suite' })).some((w) => w.id === other.id));
    const named = await client.list({ name: 'list-b' });
    assert.deepEqual(named.map((w) => [w.id, w.name, w.labels]), [[b.id, 'list-b', b.labels]]);

    const first = await client.list({ labelSelector: 'suite=list', pageSize: 2 });
    assert.equal(first.length, 2);
    assert.ok(first.nextPageToken);
    const second = await client.list({ labelSelector: 'suite=list', pageSize: 2, pageToken: first.nextPageToken });
    assert.equal(second.nextPageToken, '');
    const all = [...idsA, b.id].sort();
    assert.deepEqual([...first, ...second].map((w) => w.id), all);

    const walked: string[] = [];
    for await (const w of client.listAll({ labelSelector: 'suite=list', pageSize: 1 })) walked.push(w.id);
    assert.deepEqual(walked, all);
    await assert.rejects(client.list({ labelSelector: '=x' }), Malformed);
  });
});

describe('extend and secrets', () => {
  test('extend moves the expiry', async () => {
    const ws = await open('memory', { fs: {} }, { lifetime: { ttlMs: 60_000 } });
    const before = ws.expiresAt!.getTime();
    const l = await ws.extend({ ttlMs: 3_600_000 });
    assert.equal(l.ttlMs, 3_600_000);
    assert.ok(ws.expiresAt!.getTime() > before);
    assert.equal((await ws.describe()).lifetime?.ttlMs, 3_600_000);
    await ws.extend({ idleTimeoutMs: 600_000 });
    assert.equal(ws.lifetime.idleTimeoutMs, 600_000);
    await assert.rejects(ws.extend({}), TypeError);
  });

  test('a command gets only the secrets it names', async () => {
    const ws = await open('local-sandbox', CAPS, { env: { GREETING: 'hello' }, secrets: { API_KEY: 's3cret', OTHER: 'x' } });
    const show = ['sh', '-c', 'echo "$GREETING ${API_KEY:-none} ${OTHER:-none}"'];
    assert.equal((await ws.run(show)).stdout.toString(), 'hello none none\n');
    assert.equal((await ws.run(show, { secrets: ['API_KEY'] })).stdout.toString(), 'hello s3cret none\n');
    assert.equal((await ws.exec(show, { secrets: ['API_KEY', 'OTHER'] }).collect()).stdout.toString(), 'hello s3cret x\n');
    assert.equal((await ws.run(show, { env: { GREETING: 'hi' } })).stdout.toString(), 'hi none none\n');
    const err = await ws.run(show, { secrets: ['NOT_A_SECRET'] }).catch((e) => e);
    assert.ok(err instanceof Malformed, String(err));
    assert.equal(err.metadata.name, 'NOT_A_SECRET');
  });

  test('setSecrets merges or replaces', async () => {
    const ws = await open('local-sandbox', CAPS, { secrets: { A: '1' } });
    let s = await ws.setSecrets({ B: '2' });
    assert.deepEqual([...s.secretNames].sort(), ['A', 'B']);
    assert.equal(s.secretsMissing, false);
    assert.equal((await ws.run(['sh', '-c', 'echo "$A$B"'], { secrets: ['A', 'B'] })).stdout.toString(), '12\n');
    s = await ws.setSecrets({ C: '3' }, { replace: true });
    assert.deepEqual(s.secretNames, ['C']);
  });

  test('after a restart secrets are missing until given again; the workspace itself is re-attached', async () => {
    const ws = await open('local-sandbox', CAPS, { secrets: { API_KEY: 's3cret' }, labels: { kept: 'yes' } });
    await ws.writeFile('kept.txt', 'kept\n');
    await restart();
    const d = await ws.describe();
    assert.equal(d.secretsMissing, true);
    assert.deepEqual(d.secretNames, ['API_KEY']);
    assert.deepEqual(d.labels, { kept: 'yes' });
    const err = await ws.run(['true']).catch((e) => e);
    assert.ok(err instanceof SecretsMissing, String(err));
    assert.deepEqual(err.names, ['API_KEY']);
    assert.equal((await ws.setSecrets({ API_KEY: 's3cret' })).secretsMissing, false);
    assert.equal((await ws.run(['sh', '-c', 'echo $API_KEY'], { secrets: ['API_KEY'] })).stdout.toString(), 's3cret\n');
    assert.equal(await ws.readText('kept.txt'), 'kept\n');
    // The server re-attached it by itself: nothing was evicted.
    assert.deepEqual(events, []);
  });
});

describe('expiry', () => {
  test('an expired workspace throws WorkspaceEvicted, cause expired, after one Resolve per call', async () => {
    const ws = await open('local-bash', CAPS, { lifetime: { ttlMs: 2000 } });
    const proc = ws.exec(['sleep', '120']);
    assert.equal((await proc.wait()).cause, 'EXIT_CAUSE_EXPIRED');
    const err = await waitFor('the workspace to expire', async () => {
      const e = await ws.stat('.').then(() => undefined, (x) => x);
      return e instanceof WorkspaceEvicted ? e : undefined;
    });
    assert.equal(err.codeName, 'NOT_FOUND');
    assert.equal(err.evictionCause, 'expired');
    const last = events[events.length - 1];
    assert.equal(last.workspaceId, ws.id);
    assert.equal(last.recovered, false);
    assert.equal(last.error, err);
    assert.ok(last.resolveError instanceof WorkspaceEvicted);
    assert.equal((last.resolveError as WorkspaceEvicted).evictionCause, 'expired');

    events.length = 0;
    for (const call of [() => ws.readFile('x'), () => ws.describe(), () => ws.run(['true']), () => ws.exec(['true']).wait()]) {
      const e = await (call() as Promise<unknown>).catch((x) => x);
      assert.ok(e instanceof WorkspaceEvicted, String(e));
      assert.equal(e.evictionCause, 'expired');
    }
    assert.deepEqual(events.map((e) => e.recovered), [false, false, false, false]);
    const r = await client.resolve(ws.ref).catch((e) => e);
    assert.ok(r instanceof WorkspaceEvicted && r.evictionCause === 'expired', String(r));
  });

  test('an idle workspace expires', async () => {
    const ws = await open('memory', { fs: {} }, { lifetime: { idleTimeoutMs: 1000 } });
    await waitFor('the idle workspace to expire', async () => {
      for await (const w of client.listAll()) if (w.id === ws.id) return undefined;
      return true;
    });
    const e = await ws.describe().catch((x) => x);
    assert.ok(e instanceof WorkspaceEvicted && e.evictionCause === 'expired', String(e));
  });
});

describe('re-resolve on eviction', () => {
  test('an evicted workspace whose Resolve fails throws after one Resolve', async () => {
    const ws = await open('local-bash', CAPS);
    evictStorage(ws);
    await assert.rejects(ws.stat('.'), WorkspaceEvicted);
    assert.equal(events.length, 1);
    assert.equal(events[0].recovered, false);
    assert.ok(events[0].resolveError instanceof WorkspaceEvicted);
  });

  // The server answers WORKSPACE_EVICTED only for a workspace whose Resolve
  // fails as well, so the handle of an evicted workspace is given the ref
  // of a live one: every answer here is the real server's (the eviction,
  // the Resolve, the retried call).
  test('a Resolve that succeeds retries the call once, on the resolved workspace', async () => {
    const gone = await open('local-bash', CAPS);
    const live = await open('local-bash', CAPS);
    await live.writeFile('seen.txt', 'from the live workspace\n');
    evictStorage(gone);
    gone.ref = live.ref;
    assert.equal(await gone.readText('seen.txt'), 'from the live workspace\n');
    assert.equal(gone.id, live.id);
    assert.deepEqual(events.map((e) => [e.recovered, e.resolveError, e.error.reason]), [[true, undefined, 'WORKSPACE_EVICTED']]);
    await gone.writeFile('again.txt', 'x');
    assert.equal(await live.readText('again.txt'), 'x');
    assert.equal(events.length, 1);
  });

  test('each kind of call: unary, upload, exec, attach, grep', async () => {
    const kinds: [string, (ws: Workspace) => Promise<unknown>][] = [
      ['listDir', (ws) => ws.listDir('.')],
      ['writeFile', (ws) => ws.writeFile('w.txt', 'w')],
      ['exec', async (ws) => assert.equal((await ws.exec(['echo', 'again']).collect()).stdout.toString(), 'again\n')],
      ['run', (ws) => ws.run(['true'])],
      ['grep', (ws) => ws.grep('x').toArray()],
    ];
    for (const [what, call] of kinds) {
      events.length = 0;
      const gone = await open('local-bash', CAPS);
      const live = await open('local-bash', CAPS);
      evictStorage(gone);
      gone.ref = live.ref;
      await call(gone);
      assert.deepEqual(events.map((e) => e.recovered), [true], what);
    }
    // attach to a process of the live workspace, by tag, through the evicted handle
    events.length = 0;
    const gone = await open('local-bash', CAPS);
    const live = await open('local-bash', CAPS);
    await live.exec(['echo', 'attached'], { tag: 'told' }).wait();
    evictStorage(gone);
    gone.ref = live.ref;
    assert.equal((await gone.attach({ tag: 'told' }).collect()).stdout.toString(), 'attached\n');
    assert.deepEqual(events.map((e) => e.recovered), [true]);
  });

  test('an upload from an iterable is not retried', async () => {
    const gone = await open('local-bash', CAPS);
    const live = await open('local-bash', CAPS);
    evictStorage(gone);
    gone.ref = live.ref;
    await assert.rejects(gone.writeFile('f', [Buffer.from('one chunk')]), WorkspaceEvicted);
    assert.deepEqual(events, []);
  });

  test('can be turned off, per client or per workspace', async () => {
    const off = connect({ address: srv.address, resolveOnEviction: false, onEvictionRetry: (e) => events.push(e) });
    try {
      const ws = await off.open('local-bash', CAPS);
      opened.push(ws);
      assert.equal(ws.resolveOnEviction, false);
      const live = await open('local-bash', CAPS);
      evictStorage(ws);
      ws.ref = live.ref;
      await assert.rejects(ws.stat('.'), WorkspaceEvicted);
      assert.deepEqual(events, []);
      ws.resolveOnEviction = true;
      assert.equal((await ws.stat('.')).path, '.');
      assert.equal(ws.id, live.id);
    } finally {
      off.close();
    }
  });

  test('a restart keeps a local-bash workspace usable without an eviction', async () => {
    const ws = await open('local-bash', CAPS);
    await ws.writeFile('kept.txt', 'kept\n');
    await restart();
    assert.equal(await ws.readText('kept.txt'), 'kept\n');
    assert.equal((await ws.run(['cat', 'kept.txt'])).stdout.toString(), 'kept\n');
    assert.deepEqual(events, []);
  });
});

/** The image the test suite's setup builds (tests/fixtures/image/build.sh) from Debian's busybox-static. */
const DOCKER_IMAGE = 'workspaced-test:busybox';

/** Fails the test, naming the fix, unless a Docker daemon answers and has DOCKER_IMAGE. */
function requireDockerImage(): void {
  try {
    execFileSync('docker', ['image', 'inspect', DOCKER_IMAGE], { stdio: 'pipe' });
  } catch (e) {
    const err = e as { stderr?: Buffer; message: string };
    throw new Error(
      `docker image inspect ${DOCKER_IMAGE} failed: ${err.stderr?.toString() || err.message}\n` +
        'start the daemon with bash tests/fixtures/dockerd.sh and build the image with bash tests/fixtures/image/build.sh',
    );
  }
}

/**
 * Removes the container of docker workspace `id` behind the server's back
 * (the server labels it dev.workspaced.workspace=<id>), and only that one.
 */
function removeContainer(id: string): void {
  const ids = execFileSync('docker', ['ps', '-aq', '--filter', `label=dev.workspaced.workspace=${id}`], { encoding: 'utf8' })
    .split(/\s+/)
    .filter(Boolean);
  assert.equal(ids.length, 1, `containers of ${id}: ${ids.join(' ')}`);
  execFileSync('docker', ['rm', '-f', ids[0]], { stdio: 'pipe' });
}

// The re-resolve fires on WORKSPACE_FAILED only when the server marks it
// resolve="true" (a box or container that ended or lost its agent): real
// failures of a real server, counted through onEvictionRetry.
describe('re-resolve on a lost backend', () => {
  test('a removed container is brought back by one Resolve, for a run and for an exec', async () => {
    requireDockerImage();
    const ws = await open({ docker: { image: DOCKER_IMAGE } }, CAPS);
    await ws.writeFile('kept.txt', 'survives\n');
    assert.equal((await ws.run(['cat', 'kept.txt'])).stdout.toString(), 'survives\n');
    removeContainer(ws.id);
    assert.equal((await ws.run(['cat', 'kept.txt'])).stdout.toString(), 'survives\n');
    assert.equal(events.length, 1);
    const [event] = events;
    assert.deepEqual([event.workspaceId, event.recovered, event.resolveError], [ws.id, true, undefined]);
    assert.ok(event.error instanceof WorkspaceFailed, String(event.error));
    assert.equal(event.error.codeName, 'FAILED_PRECONDITION');
    assert.equal(event.error.metadata.resolve, 'true');
    removeContainer(ws.id);
    assert.equal((await ws.exec(['cat', 'kept.txt']).collect()).stdout.toString(), 'survives\n');
    assert.deepEqual(events.map((e) => [e.recovered, e.error.reason]), [
      [true, 'WORKSPACE_FAILED'],
      [true, 'WORKSPACE_FAILED'],
    ]);
  });

  test('with the retry off a removed container throws WorkspaceFailed with resolve=true', async () => {
    requireDockerImage();
    const ws = await open({ docker: { image: DOCKER_IMAGE } }, CAPS);
    const off = connect({ address: srv.address, resolveOnEviction: false, onEvictionRetry: (e) => events.push(e) });
    try {
      const h = await off.resolve(ws.ref);
      removeContainer(ws.id);
      const err = await h.run(['true']).then(
        () => assert.fail('a command ran in a removed container'),
        (e) => e,
      );
      assert.ok(err instanceof WorkspaceFailed, String(err));
      assert.equal(err.codeName, 'FAILED_PRECONDITION');
      assert.equal(err.metadata.resolve, 'true');
      assert.equal(err.transient, false);
      assert.deepEqual(events, []);
    } finally {
      off.close();
    }
  });

  // A local-sandbox workspace (a fresh bubblewrap per command) whose
  // read-only bind is removed: every command then fails with
  // WORKSPACE_FAILED, not transient and without resolve="true", which a
  // Resolve does not repair; the handle makes none.
  test('a WorkspaceFailed without resolve=true is not re-resolved', async () => {
    const base = process.env.TEST_TMPDIR ?? os.tmpdir();
    const roots = fs.realpathSync(fs.mkdtempSync(path.join(base, 'binds-')));
    fs.chmodSync(roots, 0o755); // the workspace's uid must reach the bind
    const bind = path.join(roots, 'ro');
    fs.mkdirSync(bind, { mode: 0o755 });
    const own = await startServer({ args: ['--policy-bind-roots', roots] });
    const seen: EvictionRetry[] = [];
    const c = connect({ address: own.address, onEvictionRetry: (e) => seen.push(e) });
    try {
      const ws = await c.open(
        { localSandbox: { readOnlyPaths: [bind], execMode: 'EXEC_MODE_PER_COMMAND' } },
        CAPS,
      );
      assert.equal((await ws.run(['true'])).exited.cause, 'EXIT_CAUSE_EXITED');
      fs.rmdirSync(bind);
      for (const call of [() => ws.run(['true']), () => ws.exec(['true']).wait()]) {
        const err = await call().then(
          () => assert.fail('a command ran without its bind'),
          (e) => e,
        );
        assert.ok(err instanceof WorkspaceFailed, String(err));
        assert.equal(err.codeName, 'FAILED_PRECONDITION');
        assert.equal(err.metadata.transient, 'false');
        assert.equal(err.metadata.resolve, undefined);
      }
      assert.deepEqual(seen, []);
      await ws.close();
    } finally {
      c.close();
      await own.stop();
      fs.rmSync(roots, { recursive: true, force: true });
    }
  });
});

describe('process handles', () => {
  test('sendInput to a process this handle did not start, with offsets', async () => {
    const ws = await open('local-bash', CAPS);
    const proc = ws.exec(['cat'], { stdin: true, tag: 'feed', background: true });
    await proc.started;
    proc.cancel(); // the Start stream is gone; the background process is not
    const h = ws.process({ tag: 'feed' });
    assert.equal(await h.sendInput('abc', { offset: 0 }), 3);
    assert.equal(await h.sendInput('abc', { offset: 0 }), 3); // a retry delivers nothing twice
    const gap = await h.sendInput('xyz', { offset: 10 }).catch((e) => e);
    assert.ok(gap instanceof InputGap, String(gap));
    assert.equal(gap.codeName, 'OUT_OF_RANGE');
    assert.equal(gap.expectedOffset, 3);
    assert.equal(await h.sendInput('def\n'), 7); // appended
    const info = await h.info();
    assert.equal(info.stdinOpen, true);
    assert.equal(info.stdinOffset, 7);
    assert.equal(await h.closeInput(), 7);
    assert.equal(await h.closeInput(), 7);
    await assert.rejects(h.sendInput('late'), StdinClosed);
    const { stdout, exited } = await h.attach().collect();
    assert.equal(stdout.toString(), 'abcdef\n');
    assert.equal(exited.cause, 'EXIT_CAUSE_EXITED');
  });

  test('errors: no stdin, no pty, no such process', async () => {
    const ws = await open('local-bash', CAPS);
    const proc = ws.exec(['sleep', '60'], { tag: 'no-stdin' });
    const { id } = await proc.started;
    await assert.rejects(ws.process({ tag: 'no-stdin' }).sendInput('x'), StdinClosed);
    await assert.rejects(ws.process({ id }).resize(30, 100), NoPty);
    proc.cancel();
    await assert.rejects(ws.process({ tag: 'never-started' }).sendInput('x'), NoSuchProcess);
  });

  test('resize and input through an attached handle', async () => {
    const ws = await open('local-bash', TTY_CAPS);
    const proc = ws.exec(['sh', '-c', 'read line; stty size'], { pty: { rows: 24, cols: 80 }, tag: 'tty' });
    await proc.started;
    const attached = ws.attach({ tag: 'tty' });
    await attached.resize(40, 100);
    assert.equal((await ws.process({ tag: 'tty' }).info()).pty?.rows, 40);
    await attached.sendInput('go\n');
    const { pty, exited } = await attached.collect();
    assert.ok(pty.toString().includes('40 100'), pty.toString());
    assert.equal(exited.cause, 'EXIT_CAUSE_EXITED');
    await proc.wait();
  });

  test('a started process takes unary input in the same offsets as its stream', async () => {
    const ws = await open('local-bash', CAPS);
    const proc = ws.exec(['cat'], { stdin: true });
    await proc.writeStdin('on the stream\n');
    // cat echoes it: the stream's bytes were taken before the unary call.
    const it = proc[Symbol.asyncIterator]();
    const first = (await it.next()).value;
    assert.equal(first?.type === 'stdout' && first.data.toString(), 'on the stream\n');
    assert.equal(await proc.sendInput('by SendInput\n'), 27);
    assert.equal(await proc.closeInput(), 27);
    let rest = '';
    for (let r = await it.next(); !r.done; r = await it.next()) if (r.value.type === 'stdout') rest += r.value.data.toString();
    const exited = await proc.wait();
    assert.equal(rest, 'by SendInput\n');
    assert.equal(exited.stdout?.bytesTotal, 27);
  });
});
