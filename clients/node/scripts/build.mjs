#!/usr/bin/env node
// Builds what the npm package ships (run by `npm run build` and by
// `npm pack` / `npm publish` through the prepack script):
//   dist/src/*.js + .d.ts   the client, compiled (tsconfig.build.json)
//   dist/gen/**/*.d.ts      the message types the declarations refer to
//   proto/**/*.proto        the API protos, which the client loads at run time
//   LICENSE                 the repository's license
// None of it is committed (.gitignore): the protos and the license stay
// single-sourced in the repository.
//
// Usage: node scripts/build.mjs [--proto-dir DIR] [--license FILE]
//   proto dir: --proto-dir, else $WORKSPACED_PROTO_DIR, else ../../proto
//   license:   --license, else $WORKSPACED_LICENSE, else ../../LICENSE
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const pkgDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
function flag(name) {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}
function run(what, argv) {
  const res = spawnSync(process.execPath, argv, { cwd: pkgDir, stdio: 'inherit' });
  if (res.status !== 0) {
    console.error(`build: ${what} failed (status ${res.status})`);
    process.exit(1);
  }
}

const repoDir = path.join(pkgDir, '..', '..');
const protoDir = path.resolve(flag('--proto-dir') ?? process.env.WORKSPACED_PROTO_DIR ?? path.join(repoDir, 'proto'));
const license = path.resolve(flag('--license') ?? process.env.WORKSPACED_LICENSE ?? path.join(repoDir, 'LICENSE'));
if (!existsSync(license)) {
  console.error(`build: no LICENSE at ${license} (set --license or WORKSPACED_LICENSE)`);
  process.exit(1);
}

// The same list the client loads (src/proto.ts API_PROTOS) and gen.mjs
// generates types for.
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

run('gen', [path.join(pkgDir, 'scripts', 'gen.mjs'), '--proto-dir', protoDir, '--out', 'gen']);

// A clean dist/: a test build (tsconfig.json) leaves tests and examples there.
rmSync(path.join(pkgDir, 'dist'), { recursive: true, force: true });
const require = createRequire(import.meta.url);
run('tsc', [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.build.json']);

const outProto = path.join(pkgDir, 'proto');
rmSync(outProto, { recursive: true, force: true });
for (const p of protos) {
  const src = path.join(protoDir, p);
  if (!existsSync(src)) {
    console.error(`build: ${p} not found under ${protoDir}`);
    process.exit(1);
  }
  mkdirSync(path.dirname(path.join(outProto, p)), { recursive: true });
  copyFileSync(src, path.join(outProto, p));
}
copyFileSync(license, path.join(pkgDir, 'LICENSE'));
console.log(`build: dist/, ${protos.length} protos in proto/, LICENSE`);
