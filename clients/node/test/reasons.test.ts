// One typed error class per ErrorReason: the enum in
// proto/workspace/v1/common.proto is the list of reasons the server may
// put in ErrorInfo, so the client's table must name exactly its values.
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { test } from 'node:test';
import { Metadata, status as GrpcStatus } from '@grpc/grpc-js';
import * as protobuf from 'protobufjs';

import { ERROR_CLASSES, resolveProtoDir, toWorkspacedError, WorkspacedError } from '../src';
import { load } from '../src/proto';

const protoDir = resolveProtoDir();

function reasonsInProto(): string[] {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => path.join(protoDir, target);
  root.loadSync('workspace/v1/common.proto');
  const e = root.lookupEnum('workspace.v1.ErrorReason');
  return Object.keys(e.values).filter((n) => n !== 'ERROR_REASON_UNSPECIFIED');
}

test('every ErrorReason has a typed error class, and every class a reason', () => {
  const inProto = reasonsInProto();
  // A sanity floor: an enum that failed to load would make both lists empty.
  assert.ok(inProto.length >= 40, `only ${inProto.length} reasons in the proto`);
  const inClient = Object.keys(ERROR_CLASSES);
  const missing = inProto.filter((r) => !(r in ERROR_CLASSES));
  const unknown = inClient.filter((r) => !inProto.includes(r));
  assert.deepEqual(missing, [], `reasons without a class in src/errors.ts: ${missing.join(', ')}`);
  assert.deepEqual(unknown, [], `classes naming no ErrorReason value: ${unknown.join(', ')}`);
  // Each reason its own class, never the base class.
  const classes = inProto.map((r) => ERROR_CLASSES[r]);
  assert.equal(new Set(classes).size, classes.length, 'two reasons share a class');
  for (const [reason, cls] of Object.entries(ERROR_CLASSES)) {
    assert.notEqual(cls, WorkspacedError, reason);
    assert.ok(cls.prototype instanceof WorkspacedError, reason);
  }
});

/** A grpc-js-like error whose trailer carries ErrorInfo{reason, domain}. */
function grpcError(code: number, reason: string, domain = 'workspaced'): unknown {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => path.join(protoDir, target);
  root.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto']);
  const Status = root.lookupType('google.rpc.Status');
  const ErrorInfo = root.lookupType('google.rpc.ErrorInfo');
  const info = ErrorInfo.encode(ErrorInfo.create({ reason, domain, metadata: { k: 'v' } })).finish();
  const st = Status.encode(
    Status.create({ code, message: 'm', details: [{ type_url: 'type.googleapis.com/google.rpc.ErrorInfo', value: info }] }),
  ).finish();
  const md = new Metadata();
  md.set('grpc-status-details-bin', Buffer.from(st));
  return Object.assign(new Error('x'), { code, details: 'm', metadata: md });
}

test('each reason decodes to its class; an unknown one to the base class with code and reason', () => {
  const decode = load(protoDir).decodeStatus;
  for (const reason of reasonsInProto()) {
    const e = toWorkspacedError(grpcError(GrpcStatus.FAILED_PRECONDITION, reason), decode);
    assert.equal(e.constructor, ERROR_CLASSES[reason], reason);
    assert.equal(e.reason, reason);
    assert.equal(e.metadata.k, 'v');
  }
  const e = toWorkspacedError(grpcError(GrpcStatus.FAILED_PRECONDITION, 'A_REASON_FROM_A_NEWER_SERVER'), decode);
  assert.equal(e.constructor, WorkspacedError);
  assert.equal(e.code, GrpcStatus.FAILED_PRECONDITION);
  assert.equal(e.reason, 'A_REASON_FROM_A_NEWER_SERVER');
  assert.equal(e.domain, 'workspaced');
  // Another domain's reason is not ours, even when the name matches.
  const other = toWorkspacedError(grpcError(GrpcStatus.NOT_FOUND, 'NO_SUCH_FILE', 'example.com'), decode);
  assert.equal(other.constructor, WorkspacedError);
  assert.equal(other.reason, 'NO_SUCH_FILE');
});
