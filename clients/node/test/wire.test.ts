// The fields for per-workspace users, runtimes, caps and truncation
// reasons, at the numbers the protos give them, through the client's own
// loader: what open() sends is checked byte for byte, what the client reads
// is decoded from hand-made bytes, so a renumbered field or a config the
// client drops fails here. No server.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { openRequest } from '../src/client';
import { load, resolveProtoDir } from '../src/proto';

/** n as a protobuf base-128 varint. */
function varint(n: number): Buffer {
  const out: number[] = [];
  while (n >= 0x80) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return Buffer.from(out);
}

/** One field on the wire: tag, then (length-delimited) length, then payload. */
function field(num: number, wireType: number, payload: Buffer | string): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload) : payload;
  const parts = [varint(num * 8 + wireType)];
  if (wireType === 2) parts.push(varint(body.length));
  parts.push(body);
  return Buffer.concat(parts);
}

const cat = (...parts: Buffer[]) => Buffer.concat(parts);

describe('new fields on the wire', () => {
  const v1 = load(resolveProtoDir()).services.workspace.v1;
  const Open = v1.Workspaces.service.Open;

  test('open sends the docker runtime and the local-bash caps', () => {
    const docker = Open.requestSerialize(openRequest({ docker: { image: 'busybox', runtime: 'runsc' } }));
    assert.deepEqual(docker, field(4, 2, cat(field(1, 2, 'busybox'), field(8, 2, 'runsc'))));

    const cpus = Buffer.alloc(8);
    cpus.writeDoubleLE(1.5);
    const bash = Open.requestSerialize(openRequest({ localBash: { pidsLimit: 64, memoryMb: 512, cpus: 1.5 } }));
    assert.deepEqual(bash, field(2, 2, cat(field(1, 0, varint(64)), field(2, 0, varint(512)), field(3, 1, cpus))));
    // The kind name alone asks for no caps.
    assert.deepEqual(Open.requestSerialize(openRequest('local-bash')), field(2, 2, ''));
  });

  test('open sends the lifetime, labels, name, env, secrets and request id at their numbers', () => {
    const req = openRequest('memory', undefined, {
      lifetime: { ttlMs: 1500, idleTimeoutMs: 60_000 },
      labels: { a: 'b' },
      name: 'n',
      env: { E: 'e' },
      secrets: { S: 's' },
      requestId: 'r-1',
    });
    const entry = (k: string, v: string) => cat(field(1, 2, k), field(2, 2, v));
    assert.deepEqual(
      Open.requestSerialize(req),
      cat(
        field(1, 2, ''),
        field(6, 2, cat(field(1, 0, varint(1500)), field(2, 0, varint(60_000)))),
        field(7, 2, entry('a', 'b')),
        field(8, 2, 'n'),
        field(9, 2, 'r-1'),
        field(10, 2, entry('E', 'e')),
        field(11, 2, entry('S', 's')),
      ),
    );
    assert.throws(() => openRequest('memory', undefined, { requestId: 'a b' }), TypeError);
  });

  test('describe, providers and listings decode', () => {
    const d = v1.Workspaces.service.Describe.responseDeserialize(
      cat(field(17, 0, varint(524289)), field(18, 0, varint(524290)), field(15, 2, field(23, 2, 'runsc'))),
    );
    assert.equal(d.uid, 524289);
    assert.equal(d.gid, 524290);
    assert.equal(d.container?.runtime, 'runsc');

    const ps = v1.Providers.service.ListProviders.responseDeserialize(
      field(
        1,
        2,
        cat(
          field(1, 2, 'docker'),
          field(7, 2, cat(field(1, 2, 'runc'), field(2, 0, varint(1)))),
          field(7, 2, cat(field(1, 2, 'runsc'), field(3, 2, 'not registered'))),
          field(8, 2, 'cgroup-v2'),
        ),
      ),
    );
    const p = ps.providers[0];
    assert.deepEqual(
      p.runtimes.map((r) => [r.name, r.usable, r.reason]),
      [
        ['runc', true, ''],
        ['runsc', false, 'not registered'],
      ],
    );
    assert.equal(p.limitsMechanism, 'cgroup-v2');

    const cut = cat(field(2, 0, varint(1)), field(3, 2, 'entries_budget'));
    assert.equal(v1.FileSystem.service.ListDir.responseDeserialize(cut).truncatedReason, 'entries_budget');
    assert.equal(v1.FileSystem.service.Glob.responseDeserialize(cut).truncatedReason, 'entries_budget');
    const grep = v1.FileSystem.service.Grep.responseDeserialize(
      field(2, 2, cat(field(5, 0, varint(1)), field(6, 2, 'time_budget'))),
    );
    assert.equal(grep.summary?.truncatedReason, 'time_budget');
  });
});
