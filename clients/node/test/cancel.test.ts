// AbortSignal and deadlines on calls, against a real server: an aborted
// call rejects with CallAborted, a call past its deadline with
// DeadlineExceeded, and neither is the command's own run-time limit.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { status as GrpcStatus } from '@grpc/grpc-js';

import { CallAborted, Cancelled, Client, connect, DeadlineExceeded, NoSuchFile, Workspace, WorkspacedError } from '../src';
import { CAPS, droppingPort, Server, startServer } from './server';

let srv: Server;
let client: Client;
let ws: Workspace;

before(async () => {
  srv = await startServer();
  client = connect({ address: srv.address });
  ws = await client.open('local-bash', CAPS);
});
after(async () => {
  try {
    await ws?.close();
  } finally {
    client?.close();
    await srv?.stop();
  }
});

async function rejects<T extends WorkspacedError>(p: Promise<unknown>, cls: new (...a: never[]) => T): Promise<T> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${(e as Error)?.constructor?.name}: ${(e as Error)?.message}`);
    return e as T;
  }
  assert.fail(`expected ${cls.name}, but the call succeeded`);
}

/** Waits until the workspace runs a process whose command line includes `word`. */
async function running(word: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const ps = await ws.ps();
    if (ps.some((p) => p.running && p.argv.join(' ').includes(word))) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.fail(`no running process with ${word}`);
}

/** A write source that sends one chunk, then waits for `release` before ending. */
function stalledSource(release: Promise<void>, onFirst?: () => void): AsyncIterable<string> {
  return (async function* () {
    yield 'first chunk\n';
    onFirst?.();
    await release;
    yield 'second chunk\n';
  })();
}

describe('AbortSignal', () => {
  test('an already aborted signal rejects at once with CallAborted, its reason as cause', async () => {
    const why = new Error('the agent gave up');
    const e = await rejects(ws.stat('.', { signal: AbortSignal.abort(why) }), CallAborted);
    assert.equal(e.cause, why);
    assert.equal(e.code, GrpcStatus.CANCELLED);
    assert.equal(e.reason, '');
    assert.ok(e instanceof Cancelled);
    await rejects(ws.readFile('x', { signal: AbortSignal.abort() }), CallAborted);
    await rejects(client.providers({ signal: AbortSignal.abort() }), CallAborted);
    const proc = ws.exec(['true'], { signal: AbortSignal.abort() });
    await rejects(proc.started, CallAborted);
    await rejects(proc.wait(), CallAborted);
  });

  test('aborting a Run in flight rejects with CallAborted and ends the command', async () => {
    const ac = new AbortController();
    const run = ws.run(['sleep', '30'], { signal: ac.signal, tag: 'abort-run' });
    await running('sleep 30');
    ac.abort();
    await rejects(run, CallAborted);
    // The server saw the call go and ended the command.
    for (let i = 0; ; i++) {
      const p = (await ws.ps()).find((x) => x.tag === 'abort-run');
      if (!p || !p.running) break;
      assert.ok(i < 500, 'the aborted command is still running');
      await new Promise((r) => setTimeout(r, 20));
    }
  });

  test('aborting a WriteFile in flight rejects with CallAborted and commits nothing', async () => {
    const ac = new AbortController();
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const write = ws.writeFile('aborted.txt', stalledSource(released, () => ac.abort()), { signal: ac.signal });
    await rejects(write, CallAborted);
    release();
    await rejects(ws.stat('aborted.txt'), NoSuchFile);
  });

  test('aborting an exec after it started cancels it: wait() has cause EXIT_CAUSE_CANCELLED', async () => {
    const ac = new AbortController();
    const proc = ws.exec(['sleep', '30'], { signal: ac.signal });
    await proc.started;
    ac.abort();
    const exit = await proc.wait();
    assert.equal(exit.cause, 'EXIT_CAUSE_CANCELLED');
  });

  test("aborting during open()'s backoff ends the retries with CallAborted", async () => {
    const dead = await droppingPort();
    const c = connect({ address: `127.0.0.1:${dead.port}` });
    try {
      const ac = new AbortController();
      let retries = 0;
      const e = await rejects(
        c.open('memory', { fs: {} }, {
          signal: ac.signal,
          // A backoff far longer than any test: only the abort ends it.
          retry: { maxAttempts: 5, initialBackoffMs: 3_600_000, maxBackoffMs: 3_600_000, random: () => 1, onRetry: () => (retries++, ac.abort()) },
        }),
        CallAborted,
      );
      assert.equal(retries, 1);
      assert.equal(e.code, GrpcStatus.CANCELLED);
    } finally {
      c.close();
      await dead.close();
    }
  });
});

describe('deadlines', () => {
  test('a Run past its deadlineMs rejects with DeadlineExceeded; timeoutMs is the command limit', async () => {
    const e = await rejects(ws.run(['sleep', '30'], { deadlineMs: 300 }), DeadlineExceeded);
    assert.equal(e.code, GrpcStatus.DEADLINE_EXCEEDED);
    assert.equal(e.reason, '');
    // The command's own limit: the call succeeds, the command was timed out.
    const res = await ws.run(['sleep', '30'], { timeoutMs: 300 });
    assert.equal(res.exited.cause, 'EXIT_CAUSE_TIMEOUT');
  });

  test("the client's default deadline bounds a call; exec-family calls are exempt", async () => {
    const c = connect({ address: srv.address, deadlineMs: 300 });
    try {
      const w = await c.resolve(ws.refString);
      let release!: () => void;
      const released = new Promise<void>((r) => (release = r));
      // Only the deadline can end this write: its source stalls.
      await rejects(w.writeFile('late.txt', stalledSource(released)), DeadlineExceeded);
      release();
      // A command longer than the default deadline still runs to its end.
      const res = await w.run(['sleep', '1']);
      assert.equal(res.exited.cause, 'EXIT_CAUSE_EXITED');
      // deadlineMs: 0 lifts the default for one call.
      let release2!: () => void;
      const released2 = new Promise<void>((r) => (release2 = r));
      const slow = w.writeFile('on-time.txt', stalledSource(released2), { deadlineMs: 0 });
      await new Promise((r) => setTimeout(r, 600));
      release2();
      await slow;
      assert.equal(await w.readText('on-time.txt'), 'first chunk\nsecond chunk\n');
    } finally {
      c.close();
    }
  });

  // The server sees a stream ended by a deadline the way it sees a
  // half-close; it must not commit what it has so far. Several tries: the
  // race between the deadline and the half-close probe went both ways.
  test('a write past its deadline commits nothing', async () => {
    const c = connect({ address: srv.address, deadlineMs: 300 });
    try {
      const w = await c.resolve(ws.refString);
      for (let i = 0; i < 4; i++) {
        let release!: () => void;
        const released = new Promise<void>((r) => (release = r));
        await rejects(w.writeFile(`past-deadline-${i}.txt`, stalledSource(released)), DeadlineExceeded);
        release();
      }
      await new Promise((r) => setTimeout(r, 300));
      for (let i = 0; i < 4; i++) await rejects(ws.stat(`past-deadline-${i}.txt`), NoSuchFile);
    } finally {
      c.close();
    }
  });

  test('a negative deadline is a TypeError', () => {
    assert.throws(() => connect({ address: srv.address, deadlineMs: -1 }), TypeError);
    assert.throws(() => ws.exec(['true'], { deadlineMs: Number.NaN }), TypeError);
  });
});
