// Typed errors decoded from the real server's grpc-status-details-bin.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { status as GrpcStatus } from '@grpc/grpc-js';

import {
  BadRef,
  CapabilityMissing,
  Client,
  CommandNotAllowed,
  Conflict,
  connect,
  EnvDenied,
  Metachar,
  NoSuchFile,
  NoSuchWorkspace,
  PathEscape,
  PolicyDenied,
  ProviderDisabled,
  SizeCap,
  WorkspaceEvicted,
  Workspace,
  WorkspacedError,
  WorkspaceFailed,
} from '../src';
import { CAPS, Server, startServer } from './server';

let srv: Server;
let client: Client;
let ws: Workspace;

before(async () => {
  // An unreachable Docker daemon, so the docker provider fails the same way
  // whatever the host has.
  srv = await startServer({ env: { DOCKER_HOST: 'unix:///nonexistent/docker.sock' } });
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

/** Asserts `p` rejects with exactly class `cls` and the given reason / code. */
async function rejectsWith<T extends WorkspacedError>(
  p: Promise<unknown>,
  cls: new (...a: never[]) => T,
  reason: string,
  code: number,
): Promise<T> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${(e as Error)?.constructor?.name}: ${(e as Error)?.message}`);
    assert.ok(e instanceof WorkspacedError);
    assert.equal(e.constructor, cls);
    assert.equal(e.reason, reason);
    assert.equal(e.code, code);
    assert.equal(e.domain, 'workspaced');
    return e as T;
  }
  assert.fail(`expected ${cls.name}, but the call succeeded`);
}

describe('typed errors', () => {
  test('PathEscape for ../x on read, write and stat', async () => {
    await rejectsWith(ws.readFile('../x'), PathEscape, 'PATH_ESCAPE', GrpcStatus.INVALID_ARGUMENT);
    await rejectsWith(ws.writeFile('../x', 'data'), PathEscape, 'PATH_ESCAPE', GrpcStatus.INVALID_ARGUMENT);
    await rejectsWith(ws.stat('a/../../x'), PathEscape, 'PATH_ESCAPE', GrpcStatus.INVALID_ARGUMENT);
  });

  test('NoSuchFile', async () => {
    await rejectsWith(ws.readFile('missing.txt'), NoSuchFile, 'NO_SUCH_FILE', GrpcStatus.NOT_FOUND);
  });

  test('CommandNotAllowed on exec and run, with the offending token', async () => {
    const e = await rejectsWith(ws.exec(['rm', '-rf', '.']).wait(), CommandNotAllowed, 'COMMAND_NOT_ALLOWED', GrpcStatus.PERMISSION_DENIED);
    assert.equal(e.token, 'rm');
    await rejectsWith(ws.run(['rm', 'x']), CommandNotAllowed, 'COMMAND_NOT_ALLOWED', GrpcStatus.PERMISSION_DENIED);
    // The started promise of a refused command rejects the same way.
    await assert.rejects(ws.exec(['rm']).started, CommandNotAllowed);
  });

  test('Metachar and EnvDenied from the shell guard', async () => {
    await rejectsWith(ws.run('echo a; echo b'), Metachar, 'METACHAR', GrpcStatus.PERMISSION_DENIED);
    await rejectsWith(ws.run(['true'], { env: { LD_PRELOAD: '/x.so' } }), EnvDenied, 'ENV_DENIED', GrpcStatus.PERMISSION_DENIED);
  });

  test('CapabilityMissing: shell on the memory provider', async () => {
    const e = await rejectsWith(
      client.open('memory', CAPS, { retry: { maxAttempts: 1 } }),
      CapabilityMissing,
      'CAPABILITY_MISSING',
      GrpcStatus.FAILED_PRECONDITION,
    );
    assert.equal(e.capability, 'shell');
    // And exec on a workspace that did not declare shell.
    const fsOnly = await client.open('local-bash', { fs: {} });
    try {
      await rejectsWith(fsOnly.run(['true']), CapabilityMissing, 'CAPABILITY_MISSING', GrpcStatus.FAILED_PRECONDITION);
    } finally {
      await fsOnly.close();
    }
  });

  test('SizeCap keeps the old content; Conflict carries the actual hash', async () => {
    const small = await client.open('local-bash', { fs: { maxFileSizeBytes: 1024 } });
    try {
      const w = await small.writeFile('f', 'old');
      await rejectsWith(small.writeFile('f', Buffer.alloc(4096, 1)), SizeCap, 'SIZE_CAP', GrpcStatus.RESOURCE_EXHAUSTED);
      assert.equal(await small.readText('f'), 'old');
      const c = await rejectsWith(small.writeFile('f', 'new', { ifMatch: '0'.repeat(64) }), Conflict, 'CONFLICT', GrpcStatus.FAILED_PRECONDITION);
      assert.equal(c.actualSha256, w.sha256);
    } finally {
      await small.close();
    }
  });

  test('NoSuchWorkspace after close; WorkspaceEvicted on resolve of its ref', async () => {
    const tmp = await client.open('local-bash', CAPS);
    await tmp.writeFile('x', 'x');
    await tmp.close();
    await rejectsWith(tmp.stat('x'), NoSuchWorkspace, 'NO_SUCH_WORKSPACE', GrpcStatus.NOT_FOUND);
    await rejectsWith(client.resolve(tmp.ref), WorkspaceEvicted, 'WORKSPACE_EVICTED', GrpcStatus.NOT_FOUND);
  });

  test('BadRef for a tampered ref; the intact ref resolves', async () => {
    const again = await client.resolve(ws.refString);
    assert.equal(again.id, ws.id);
    const token = Buffer.from(ws.ref.token);
    token[token.length - 1] ^= 0x01;
    await rejectsWith(client.resolve({ token }), BadRef, 'BAD_REF', GrpcStatus.INVALID_ARGUMENT);
  });

  test('WorkspaceFailed with transient from metadata (docker without a daemon)', async () => {
    let attempts = 0;
    try {
      await client.open({ docker: { image: 'alpine' } }, { fs: {} }, {
        retry: { sleep: async () => void attempts++, random: () => 0 },
      });
      assert.fail('docker opened without a daemon');
    } catch (e) {
      assert.ok(e instanceof WorkspaceFailed, `got ${(e as Error).constructor.name}`);
      assert.equal(e.reason, 'WORKSPACE_FAILED');
      assert.ok(e.metadata.transient === 'true' || e.metadata.transient === 'false');
      assert.equal(e.transient, e.metadata.transient === 'true');
      // Retried exactly when the server called it transient.
      assert.equal(attempts, e.transient ? 3 : 0);
    }
  });

  test('ProviderDisabled names a provider the server does not enable', async () => {
    const memoryOnly = await startServer({ args: ['--providers', 'memory'] });
    const c = connect({ address: memoryOnly.address });
    try {
      const e = await rejectsWith(
        c.open('local-bash', CAPS, { retry: { maxAttempts: 1 } }),
        ProviderDisabled,
        'PROVIDER_DISABLED',
        GrpcStatus.FAILED_PRECONDITION,
      );
      assert.equal(e.provider, 'local-bash');
      // The same server opens what it does enable.
      const m = await c.open('memory', { fs: {} });
      assert.equal(m.provider, 'memory');
      await m.close();
    } finally {
      c.close();
      await memoryOnly.stop();
    }
  });

  test("PolicyDenied names the rule: local-bash outside the operator's default policy", async () => {
    const byDefault = await startServer({ policy: [] });
    const c = connect({ address: byDefault.address });
    try {
      let attempts = 0;
      const e = await rejectsWith(
        c.open('local-bash', CAPS, { retry: { onRetry: () => attempts++ } }),
        PolicyDenied,
        'POLICY',
        GrpcStatus.PERMISSION_DENIED,
      );
      assert.equal(e.rule, 'providers');
      assert.equal(e.metadata.provider, 'local-bash');
      assert.equal(attempts, 0, 'a policy refusal is not retried');
      // The policy the server reports is the one it applied.
      const policy = await c.policy();
      assert.ok(!policy.providers.includes('local-bash'), `providers ${policy.providers}`);
      assert.ok(policy.providers.includes('memory'), `providers ${policy.providers}`);
      // The same caller opens what the default policy allows.
      const m = await c.open('memory', { fs: {} });
      assert.equal(m.provider, 'memory');
      await m.close();
    } finally {
      c.close();
      await byDefault.stop();
    }
  });

  test('no status details: the base class with reason "" and the gRPC code', async () => {
    // Nothing listens on port 1: the call fails in the channel, with no
    // server and so no ErrorInfo.
    const dead = connect({ address: '127.0.0.1:1' });
    try {
      const e = await rejectsWithBase(dead.providers());
      assert.equal(e.code, GrpcStatus.UNAVAILABLE);
      assert.equal(e.reason, '');
    } finally {
      dead.close();
    }
  });
});

async function rejectsWithBase(p: Promise<unknown>): Promise<WorkspacedError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof WorkspacedError);
    assert.equal(e.constructor, WorkspacedError);
    return e;
  }
  assert.fail('expected a failure');
}
