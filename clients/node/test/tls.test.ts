// The client over TCP against the real server: TLS, mutual TLS and bearer
// tokens (the server serves TCP only with authentication). Certificates and the tokens file come from the fixture shared by
// the clients' suites ($WORKSPACED_TEST_PKI, clients/testdata/pki.sh).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { status as GrpcStatus } from '@grpc/grpc-js';

import { Client, connect, isTransient, NoSuchWorkspace, tlsFiles, Unauthenticated, WorkspacedError } from '../src';
import { CAPS, Server, startServer } from './server';

const ALICE = 'tok-alice-0123456789';
const BOB = 'tok-bob-9876543210';

function makePki(): string {
  const script = process.env.WORKSPACED_TEST_PKI;
  if (!script) throw new Error('WORKSPACED_TEST_PKI is not set: point it at clients/testdata/pki.sh');
  const dir = fs.mkdtempSync(path.join(process.env.TEST_TMPDIR ?? os.tmpdir(), 'pki-'));
  execFileSync(script, [dir], { stdio: 'inherit' });
  return dir;
}

const pki = makePki();
const p = (f: string) => path.join(pki, f);
const serverTls = ['--tokens-file', p('tokens'), '--tls-cert', p('server.pem'), '--tls-key', p('server.key')];

/** The connection failure every client surfaces: UNAVAILABLE, no reason, transient. */
async function rejectsUnavailable(promise: Promise<unknown>): Promise<void> {
  await assert.rejects(promise, (e: unknown) => {
    assert.ok(e instanceof WorkspacedError, `got ${String(e)}`);
    assert.equal(e.code, GrpcStatus.UNAVAILABLE, e.message);
    assert.equal(e.reason, '');
    assert.ok(isTransient(e));
    return true;
  });
}

async function rejectsUnauthenticated(promise: Promise<unknown>): Promise<void> {
  await assert.rejects(promise, (e: unknown) => {
    assert.ok(e instanceof Unauthenticated, `got ${String(e)}`);
    assert.equal(e.code, GrpcStatus.UNAUTHENTICATED);
    assert.equal(e.message, 'unauthenticated');
    assert.ok(!isTransient(e));
    return true;
  });
}

describe('TLS with bearer tokens', () => {
  let srv: Server;
  const clients: Client[] = [];
  // token '' sends none (rather than $WORKSPACED_TOKEN).
  const dial = (token: string, ca = 'ca.pem', serverName?: string) => {
    const c = connect({ address: srv.address, token, tls: tlsFiles({ ca: p(ca), serverName }) });
    clients.push(c);
    return c;
  };
  before(async () => {
    srv = await startServer({ port: 0, args: serverTls });
  });
  after(async () => {
    for (const c of clients) c.close();
    await srv?.stop();
  });

  test('open, write, exec, read, close with the right CA and token', async () => {
    const c = dial(ALICE);
    const ws = await c.open('local-bash', CAPS);
    await ws.writeFile('notes.txt', 'over tls\n');
    const proc = ws.exec(['sh', '-c', 'cat notes.txt; echo done']);
    const out = await proc.collect();
    assert.equal(out.stdout.toString(), 'over tls\ndone\n');
    assert.equal(out.exited.exitCode, 0);
    assert.equal(await ws.readText('notes.txt'), 'over tls\n');
    assert.equal(await ws.close(), false);
    assert.ok(!(await c.list()).some((w) => w.id === ws.id));
  });

  test('a wrong token or none is Unauthenticated, and open does not retry it', async () => {
    for (const token of ['tok-mallory', ALICE + 'x', '']) {
      const c = dial(token);
      await rejectsUnauthenticated(c.list());
      let attempts = 0;
      await rejectsUnauthenticated(c.open('memory', undefined, { retry: { onRetry: () => attempts++ } }));
      assert.equal(attempts, 0);
    }
  });

  test('the wrong CA, a wrong server name or plaintext fail the connection', async () => {
    await rejectsUnavailable(dial(ALICE, 'otherca.pem').list());
    await rejectsUnavailable(dial(ALICE, 'otherca.pem').open('memory', undefined, { retry: { maxAttempts: 1 } }));
    await rejectsUnavailable(dial(ALICE, 'ca.pem', 'wrong.test').list());
    const plain = connect({ address: srv.address, token: ALICE });
    clients.push(plain);
    await rejectsUnavailable(plain.list());
    // The name the certificate does carry, instead of the address's host.
    assert.equal(await dial(ALICE, 'ca.pem', 'workspaced.test').health(), 'SERVING');
  });

  test('tlsFiles reads the files at once', () => {
    assert.throws(() => tlsFiles({ ca: p('missing.pem') }), /ENOENT/);
    assert.throws(() => tlsFiles({ ca: p('tokens') }), /not a PEM file/);
    assert.throws(() => tlsFiles({ cert: p('alice.pem') }), TypeError);
  });
});

describe('mutual TLS', () => {
  let srv: Server;
  const clients: Client[] = [];
  const dial = (client: string | undefined, token = '') => {
    const c = connect({
      address: srv.address,
      token,
      tls: tlsFiles({ ca: p('ca.pem'), cert: client && p(`${client}.pem`), key: client && p(`${client}.key`) }),
    });
    clients.push(c);
    return c;
  };
  before(async () => {
    srv = await startServer({ port: 0, args: [...serverTls, '--tls-client-ca', p('ca.pem')] });
  });
  after(async () => {
    for (const c of clients) c.close();
    await srv?.stop();
  });

  test("the certificate's CN is the tenant; another tenant's token cannot see its workspace", async () => {
    const alice = dial('alice');
    const ws = await alice.open('local-bash', CAPS);
    try {
      await ws.writeFile('mine.txt', "alice's\n");
      const r = await ws.run(['cat', 'mine.txt']);
      assert.equal(r.stdout.toString(), "alice's\n");
      assert.ok((await alice.list()).some((w) => w.id === ws.id));

      // Bob's token decides over alice's certificate.
      const bob = dial('alice', BOB);
      assert.deepEqual(await bob.list(), []);
      await assert.rejects(bob.resolve(ws.ref!), NoSuchWorkspace);
      assert.equal((await alice.resolve(ws.ref!)).id, ws.id);
    } finally {
      await ws.close();
    }
  });

  test('no client certificate, or an untrusted one, fails the handshake', async () => {
    await rejectsUnavailable(dial(undefined).list());
    await rejectsUnavailable(dial(undefined, ALICE).list());
    await rejectsUnavailable(dial('stranger').list());
  });
});

describe('bearer tokens over plaintext loopback TCP', () => {
  let srv: Server;
  const clients: Client[] = [];
  const dial = (token: string) => {
    const c = connect({ address: srv.address, token });
    clients.push(c);
    return c;
  };
  before(async () => {
    srv = await startServer({ port: 0, args: ['--tokens-file', p('tokens')] });
  });
  after(async () => {
    for (const c of clients) c.close();
    await srv?.stop();
  });

  test('the token rides on a channel without TLS; each tenant sees its own workspaces', async () => {
    const alice = dial(ALICE);
    const ws = await alice.open('local-bash', CAPS);
    try {
      assert.equal((await ws.run(['echo', 'plain'])).stdout.toString(), 'plain\n');
      assert.ok((await alice.list()).some((w) => w.id === ws.id));
      assert.ok(!(await dial(BOB).list()).some((w) => w.id === ws.id));
    } finally {
      await ws.close();
    }
  });

  test('no token or a wrong one is Unauthenticated', async () => {
    await rejectsUnauthenticated(dial('').list());
    await rejectsUnauthenticated(dial('tok-mallory').open('memory', undefined, { retry: { maxAttempts: 1 } }));
  });
});
