#!/usr/bin/env node
// Generates the TypeScript message and service types from the API protos
// with proto-loader-gen-types. The flags here must match LOADER_OPTIONS in
// src/proto.ts (camelCase fields, 64-bit integers as numbers, enums as
// their names, defaults filled in, virtual oneof fields), or the types
// would describe objects the runtime never produces.
//
// Usage: node scripts/gen.mjs [--proto-dir DIR] [--out DIR]
//   proto dir: --proto-dir, else $WORKSPACED_PROTO_DIR, else ../../proto
//   out dir:   --out, else ./gen (both relative to this package)
import { spawnSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const pkgDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
function flag(name) {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}

const protoDir = path.resolve(
  flag('--proto-dir') ?? process.env.WORKSPACED_PROTO_DIR ?? path.join(pkgDir, '..', '..', 'proto'),
);
const outDir = path.resolve(pkgDir, flag('--out') ?? 'gen');

// The API surface clients see (the server-private protos are left out).
const protos = [
  'workspace/v1/common.proto',
  'workspace/v1/providers.proto',
  'workspace/v1/workspaces.proto',
  'workspace/v1/filesystem.proto',
  'workspace/v1/exec.proto',
  'google/rpc/status.proto',
  'google/rpc/error_details.proto',
  'grpc/health/v1/health.proto',
];
for (const p of protos) {
  if (!existsSync(path.join(protoDir, p))) {
    console.error(`gen: ${p} not found under ${protoDir} (set --proto-dir or WORKSPACED_PROTO_DIR)`);
    process.exit(1);
  }
}

// google/protobuf/any.proto: protobufjs bundles the well-known types, so a
// system include dir is optional; it is added when present.
const includeDirs = [protoDir];
for (const dir of ['/usr/include', '/usr/local/include']) {
  if (existsSync(path.join(dir, 'google/protobuf/any.proto'))) includeDirs.push(dir);
}

const require = createRequire(import.meta.url);
const genBin = path.join(path.dirname(require.resolve('@grpc/proto-loader/package.json')), 'build/bin/proto-loader-gen-types.js');

rmSync(outDir, { recursive: true, force: true });
const res = spawnSync(
  process.execPath,
  [
    genBin,
    '--longs=Number',
    '--enums=String',
    '--defaults',
    '--oneofs',
    '--grpcLib=@grpc/grpc-js',
    ...includeDirs.flatMap((d) => ['-I', d]),
    '-O',
    outDir,
    ...protos,
  ],
  { stdio: 'inherit' },
);
if (res.status !== 0) {
  console.error(`gen: proto-loader-gen-types failed (status ${res.status})`);
  process.exit(1);
}
console.log(`gen: types for ${protos.length} protos in ${path.relative(process.cwd(), outDir) || '.'}`);
