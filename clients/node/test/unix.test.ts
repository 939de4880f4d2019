// unix:/ABSOLUTE/PATH addresses against a real server on a unix socket:
// both spellings grpc-js reads as an absolute path reach it, the ones it
// would read as another socket are refused before any dialing, and the
// default address is the server's default socket.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { status as GrpcStatus } from '@grpc/grpc-js';

import { checkAddress, connect, DEFAULT_ADDRESS, isTransient, WorkspacedError } from '../src';
import { CAPS, Server, serverBin, socketDir, startServer } from './server';

describe('unix socket addresses', () => {
  let srv: Server;
  let socket: string;
  before(async () => {
    srv = await startServer();
    socket = srv.address.slice('unix:'.length);
  });
  after(async () => {
    await srv?.stop();
  });

  test('the server listens on a unix socket and nothing else', () => {
    assert.match(srv.address, /^unix:\//);
    assert.ok(fs.statSync(socket).isSocket(), `${socket} is not a socket`);
    assert.equal(srv.port, undefined);
  });

  for (const spelling of ['unix:PATH', 'unix://PATH']) {
    test(`${spelling}: open, write, exec, read, close`, async () => {
      const c = connect({ address: spelling.replace('PATH', socket) });
      try {
        assert.equal(await c.health(), 'SERVING');
        const ws = await c.open('local-bash', CAPS);
        await ws.writeFile('notes.txt', 'over a unix socket\n');
        const r = await ws.run(['sh', '-c', 'cat notes.txt; echo done']);
        assert.equal(r.stdout.toString(), 'over a unix socket\ndone\n');
        assert.equal(r.exited.exitCode, 0);
        assert.equal(await ws.readText('notes.txt'), 'over a unix socket\n');
        assert.ok((await c.list()).some((w) => w.id === ws.id));
        assert.equal(await ws.close(), false);
      } finally {
        c.close();
      }
    });
  }

  test("the tenant on a unix socket is the caller's: default for the server's own uid", async () => {
    // The suite runs as the server's user: root, or the user that started it.
    const c = connect({ address: srv.address });
    try {
      const policy = await c.policy();
      assert.equal(policy.tenant, 'default');
      // The flags the harness gave this server's default policy.
      assert.deepEqual([...policy.providers].sort(), ['docker', 'local-bash', 'local-sandbox', 'memory']);
      assert.equal(policy.network, false);
      assert.deepEqual(policy.passEnv, []);
    } finally {
      c.close();
    }
  });

  test('$WORKSPACED_ADDR names the socket when no address is given', async () => {
    const saved = process.env.WORKSPACED_ADDR;
    process.env.WORKSPACED_ADDR = srv.address;
    try {
      const c = connect();
      try {
        assert.equal(c.address, srv.address);
        assert.equal(await c.health(), 'SERVING');
      } finally {
        c.close();
      }
    } finally {
      if (saved === undefined) delete process.env.WORKSPACED_ADDR;
      else process.env.WORKSPACED_ADDR = saved;
    }
  });
});

test('a unix socket nothing listens on is UNAVAILABLE and transient', async () => {
  const dir = socketDir();
  const c = connect({ address: `unix:${path.join(dir, 'none.sock')}` });
  try {
    await assert.rejects(c.list(), (e: unknown) => {
      assert.ok(e instanceof WorkspacedError, String(e));
      assert.equal(e.code, GrpcStatus.UNAVAILABLE);
      assert.equal(e.reason, '');
      assert.ok(isTransient(e));
      return true;
    });
  } finally {
    c.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a unix: address without an absolute path is refused at connect', () => {
  // grpc-js would dial "ws.sock" in the current directory, and read
  // "tmp" in unix://tmp/ws.sock as a host name, dialing /ws.sock.
  for (const address of ['unix:ws.sock', 'unix:./ws.sock', 'unix://tmp/ws.sock', 'unix:', 'unix://']) {
    assert.throws(() => connect({ address }), TypeError, address);
    assert.throws(() => checkAddress(address), /unix:\/ABSOLUTE\/PATH/, address);
  }
  for (const address of ['unix:/tmp/ws.sock', 'unix:///tmp/ws.sock', '127.0.0.1:7878', 'dns:ws.example:443']) {
    assert.equal(checkAddress(address), address);
  }
});

test("the default address is the server's default listener", () => {
  const saved = process.env.WORKSPACED_ADDR;
  delete process.env.WORKSPACED_ADDR;
  try {
    const c = connect();
    assert.equal(c.address, DEFAULT_ADDRESS);
    c.close();
  } finally {
    if (saved !== undefined) process.env.WORKSPACED_ADDR = saved;
  }
  assert.equal(DEFAULT_ADDRESS, 'unix:/run/workspaced/workspaced.sock');
  // The server's usage names its default listener in brackets after --listen.
  let usage: string;
  try {
    usage = execFileSync(serverBin(), ['--help'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    // A usage printed on stderr with a non-zero status is still the usage.
    const err = e as { stdout?: string; stderr?: string };
    usage = `${err.stdout ?? ''}${err.stderr ?? ''}`;
  }
  const listen = /--listen ADDR[^[]*\[([^\]]+)\]/.exec(usage);
  assert.ok(listen, `no default of --listen in the server's usage:\n${usage}`);
  assert.equal(listen[1], DEFAULT_ADDRESS);
});
