// Loading the API protos at run time.
//
// The wrapper loads the .proto files with @grpc/proto-loader (service stubs)
// and protobufjs (google.rpc.Status / ErrorInfo for error details) rather than
// shipping generated JavaScript: the generated code under gen/ is TypeScript
// types only, so the .proto files stay the single source of truth. The
// published package carries a copy of them (proto/, made by
// scripts/build.mjs).
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import * as protobuf from 'protobufjs';

import type { ProtoGrpcType as ExecProto } from '../gen/exec';
import type { ProtoGrpcType as FileSystemProto } from '../gen/filesystem';
import type { ProtoGrpcType as HealthProto } from '../gen/health';
import type { ProtoGrpcType as ProvidersProto } from '../gen/providers';
import type { ProtoGrpcType as WorkspacesProto } from '../gen/workspaces';
import type { ErrorInfo__Output } from '../gen/google/rpc/ErrorInfo';

/** The protos a client needs, relative to the proto dir. */
export const API_PROTOS = [
  'workspace/v1/common.proto',
  'workspace/v1/providers.proto',
  'workspace/v1/workspaces.proto',
  'workspace/v1/filesystem.proto',
  'workspace/v1/exec.proto',
  'google/rpc/status.proto',
  'google/rpc/error_details.proto',
  'grpc/health/v1/health.proto',
];

/**
 * Conversion options shared by the loader and by scripts/gen.mjs: the
 * generated types are only correct while both agree. 64-bit integers become
 * JavaScript numbers (byte counts and milliseconds stay far below 2^53);
 * enums are their names ("EXIT_CAUSE_TIMEOUT"); absent fields get their
 * defaults; a oneof's set member is named by a virtual field.
 */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: false,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
};

/**
 * Finds the directory holding workspace/v1/*.proto: an explicit one, then
 * $WORKSPACED_PROTO_DIR, then the copy the package ships (proto/ next to
 * dist/, put there by `npm run build`), then the repository's proto/
 * (dist/src/ -> clients/node/ -> proto/) in a source checkout.
 */
export function resolveProtoDir(explicit?: string): string {
  const candidates = [
    explicit,
    process.env.WORKSPACED_PROTO_DIR,
    path.resolve(__dirname, '..', '..', 'proto'),
    path.resolve(__dirname, '..', '..', '..', '..', 'proto'),
  ].filter((d): d is string => !!d);
  for (const dir of candidates) {
    if (fs.existsSync(path.join(dir, 'workspace', 'v1', 'common.proto'))) return path.resolve(dir);
  }
  throw new Error(
    `workspaced: cannot find the API protos (tried ${candidates.join(', ')}); ` +
      'pass protoDir to connect() or set WORKSPACED_PROTO_DIR',
  );
}

function includeDirs(protoDir: string): string[] {
  // google/protobuf/any.proto is bundled with protobufjs; a system copy is
  // used when there is one so that both agree with the server's build.
  const dirs = [protoDir];
  for (const d of ['/usr/include', '/usr/local/include']) {
    if (fs.existsSync(path.join(d, 'google', 'protobuf', 'any.proto'))) dirs.push(d);
  }
  return dirs;
}

export type Services = ProvidersProto & WorkspacesProto & FileSystemProto & ExecProto & HealthProto;

export interface Loaded {
  services: Services;
  decodeStatus(buf: Buffer): DecodedStatus;
}

export interface DecodedStatus {
  code: number;
  message: string;
  errorInfo?: ErrorInfo__Output;
}

const cache = new Map<string, Loaded>();

/** Loads (once per proto dir) the service definitions and the Status decoder. */
export function load(protoDir: string): Loaded {
  const hit = cache.get(protoDir);
  if (hit) return hit;
  const dirs = includeDirs(protoDir);
  const def = protoLoader.loadSync(API_PROTOS, { ...LOADER_OPTIONS, includeDirs: dirs });
  const services = grpc.loadPackageDefinition(def) as unknown as Services;

  // protobufjs directly for the trailer: proto-loader only exposes
  // (de)serializers for RPC messages, and Status is not one.
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => {
    for (const d of dirs) {
      const p = path.join(d, target);
      if (fs.existsSync(p)) return p;
    }
    return target; // protobufjs falls back to its bundled well-known types
  };
  root.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto'], { keepCase: false });
  const Status = root.lookupType('google.rpc.Status');
  const ErrorInfo = root.lookupType('google.rpc.ErrorInfo');
  const toObj = { longs: Number, enums: String, defaults: true } as const;

  const decodeStatus = (buf: Buffer): DecodedStatus => {
    const st = Status.toObject(Status.decode(buf), toObj) as {
      code: number;
      message: string;
      details: { typeUrl?: string; type_url?: string; value: Uint8Array }[];
    };
    const out: DecodedStatus = { code: st.code, message: st.message };
    for (const any of st.details ?? []) {
      // protobufjs's bundled any.proto keeps the snake_case field name even
      // when the rest is camelCased; accept either spelling.
      const typeUrl = any.typeUrl ?? any.type_url ?? '';
      // type.googleapis.com/google.rpc.ErrorInfo: match the full name after
      // the last '/', as the Any spec says.
      if (typeUrl.slice(typeUrl.lastIndexOf('/') + 1) === 'google.rpc.ErrorInfo') {
        out.errorInfo = ErrorInfo.toObject(ErrorInfo.decode(any.value), toObj) as ErrorInfo__Output;
        break;
      }
    }
    return out;
  };

  const loaded = { services, decodeStatus };
  cache.set(protoDir, loaded);
  return loaded;
}
