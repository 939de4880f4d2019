// Open's retry policy: exponential backoff with jitter on transient
// failures, none on permanent ones. The sleep is injected (the only stand-in
// in these tests) so the schedule is checked without real waiting; the
// failures themselves come from real sockets and a real server.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { status as GrpcStatus } from '@grpc/grpc-js';

import { backoffDelayMs, CapabilityMissing, connect, DEFAULT_RETRY_POLICY, WorkspacedError } from '../src';
import { CAPS, droppingPort, Server, socketDir, startServer } from './server';

// The channel's own reconnect backoff must not outlast the test's retries.
const fastReconnect = { 'grpc.initial_reconnect_backoff_ms': 50, 'grpc.max_reconnect_backoff_ms': 100 };

/**
 * Open against a unix socket nothing listens on yet, a server coming up
 * there during the second backoff: the open must succeed, every delay
 * following the policy. The socket lives in a directory of its own, so no
 * other process can take the address before the server binds it.
 */
async function comesUpBetweenAttempts(): Promise<void> {
  const dir = socketDir();
  const socket = path.join(dir, 'ws.sock');
  const c = connect({ address: `unix:${socket}`, channelOptions: fastReconnect });
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
          if (sleeps.length === 2) srv = await startServer({ socket });
          if (srv) await new Promise((r) => setTimeout(r, 150));
        },
      },
    });
    assert.match(ws.id, /^ws_/);
    assert.ok(sleeps.length >= 2, `expected at least 2 retries, saw ${sleeps.length}`);
    // Every delay follows the policy: 0.5 * min(5000, 200 * 2^n).
    assert.deepEqual(sleeps, sleeps.map((_, n) => 0.5 * Math.min(5000, 200 * 2 ** n)));
    await ws.close();
  } finally {
    c.close();
    try {
      await srv?.stop();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
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

  test('succeeds once the server comes up between attempts', comesUpBetweenAttempts);

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
