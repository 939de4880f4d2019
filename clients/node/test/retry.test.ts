// Open's retry policy: exponential backoff with jitter on transient
// failures, none on permanent ones. The sleep is injected (the only stand-in
// in these tests) so the schedule is checked without real waiting; the
// failures themselves come from real sockets and a real server.
import assert from 'node:assert/strict';
import * as net from 'node:net';
import { describe, test } from 'node:test';
import { status as GrpcStatus } from '@grpc/grpc-js';

import { backoffDelayMs, CapabilityMissing, connect, DEFAULT_RETRY_POLICY, WorkspacedError } from '../src';
import { CAPS, droppingPort, Server, startServer } from './server';

/**
 * A port nothing listens on (bound, read, released), for a server to be
 * started on later. Another process may take it before the server does.
 */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

// The channel's own reconnect backoff must not outlast the test's retries.
const fastReconnect = { 'grpc.initial_reconnect_backoff_ms': 50, 'grpc.max_reconnect_backoff_ms': 100 };

/** Thrown out of the retry's sleep when the port was taken before the server bound it. */
class PortTaken extends Error {}

/**
 * Open against `port` while nothing listens there, a server coming up on
 * it during the second backoff: the open must succeed, every delay
 * following the policy. Returns the server's bind failure when the port
 * was taken meanwhile (the test is then to be run again), else "".
 */
async function comesUpBetweenAttempts(port: number): Promise<string> {
  const c = connect({ address: `127.0.0.1:${port}`, channelOptions: fastReconnect });
  const sleeps: number[] = [];
  let srv: Server | undefined;
  try {
    const ws = await c.open('local-bash', CAPS, {
      retry: {
        maxAttempts: 20,
        random: () => 0.5,
        sleep: async (ms) => {
          sleeps.push(ms);
          // Bring the server up during the second backoff; afterwards give
          // the channel a moment (real time) to reconnect.
          if (sleeps.length === 2) {
            try {
              srv = await startServer({ port });
            } catch (e) {
              if (/rpc\.bind_failed/.test(String(e))) throw new PortTaken(String(e));
              throw e;
            }
          }
          if (srv) await new Promise((r) => setTimeout(r, 150));
        },
      },
    });
    assert.match(ws.id, /^ws_/);
    assert.ok(sleeps.length >= 2, `expected at least 2 retries, saw ${sleeps.length}`);
    // Every delay follows the policy: 0.5 * min(5000, 200 * 2^n).
    assert.deepEqual(sleeps, sleeps.map((_, n) => 0.5 * Math.min(5000, 200 * 2 ** n)));
    await ws.close();
    return '';
  } catch (e) {
    if (e instanceof PortTaken) return e.message;
    throw e;
  } finally {
    c.close();
    await srv?.stop();
  }
}

describe('open retry', () => {
  test('backoff grows by the multiplier, is capped, and is jittered', () => {
    const p = { ...DEFAULT_RETRY_POLICY };
    assert.deepEqual([0, 1, 2, 3, 4, 5].map((i) => backoffDelayMs(p, i, () => 1)), [200, 400, 800, 1600, 3200, 5000]);
    assert.deepEqual([0, 1, 2].map((i) => backoffDelayMs(p, i, () => 0.5)), [100, 200, 400]);
    assert.equal(backoffDelayMs(p, 0, () => 0), 0);
  });

  test('gives up after maxAttempts on UNAVAILABLE, sleeping the schedule', async () => {
    const dead = await droppingPort();
    const c = connect({ address: `127.0.0.1:${dead.port}`, channelOptions: fastReconnect });
    const sleeps: number[] = [];
    const retried: number[] = [];
    try {
      await assert.rejects(
        c.open('local-bash', CAPS, {
          retry: {
            initialBackoffMs: 1000,
            multiplier: 3,
            maxBackoffMs: 5000,
            random: () => 0.5,
            sleep: async (ms) => void sleeps.push(ms),
            onRetry: (err) => retried.push(err.code),
          },
        }),
        (e: unknown) => e instanceof WorkspacedError && e.code === GrpcStatus.UNAVAILABLE && e.reason === '',
      );
      // 4 attempts: 3 backoffs of 0.5 * min(5000, 1000 * 3^n).
      assert.deepEqual(sleeps, [500, 1500, 2500]);
      assert.deepEqual(retried, [GrpcStatus.UNAVAILABLE, GrpcStatus.UNAVAILABLE, GrpcStatus.UNAVAILABLE]);
    } finally {
      c.close();
      await dead.close();
    }
  });

  test('maxAttempts 1 disables retries', async () => {
    const dead = await droppingPort();
    const c = connect({ address: `127.0.0.1:${dead.port}` });
    const sleeps: number[] = [];
    try {
      await assert.rejects(c.open('local-bash', CAPS, { retry: { maxAttempts: 1, sleep: async (ms) => void sleeps.push(ms) } }));
      assert.deepEqual(sleeps, []);
    } finally {
      c.close();
      await dead.close();
    }
  });

  test('succeeds once the server comes up between attempts', async () => {
    // The server must come up on the very port the client dials, so that
    // port is found free, released, and bound again by the server. Another
    // process may take it in between: the server then fails to bind, and
    // the scenario starts again on another port (a few times at most).
    for (let attempt = 1; ; attempt++) {
      const port = await freePort();
      const taken = await comesUpBetweenAttempts(port);
      if (!taken) return;
      if (attempt === 3) assert.fail(`the server could not bind a free port 3 times running: ${taken}`);
    }
  });

  test('a permanent error is thrown at once, never retried', async () => {
    const srv = await startServer();
    const c = connect({ address: srv.address });
    const sleeps: number[] = [];
    try {
      await assert.rejects(
        c.open('memory', CAPS, { retry: { maxAttempts: 5, sleep: async (ms) => void sleeps.push(ms) } }),
        CapabilityMissing,
      );
      assert.deepEqual(sleeps, []);
    } finally {
      c.close();
      await srv.stop();
    }
  });
});
