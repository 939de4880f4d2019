#!/usr/bin/env bash
# Bazel driver of //clients/node:node_test: generate the proto types,
# compile the client and its tests into $TEST_TMPDIR, run them with
# `node --test` against the server built by Bazel.
set -euo pipefail

runfiles="${TEST_SRCDIR:?run under bazel test}/${TEST_WORKSPACE:-workspaced}"
pkg="$runfiles/clients/node"

# node_modules is not a Bazel input: it is installed into the source tree
# by `npm ci --prefix clients/node`. The test is unsandboxed, so the
# runfile symlink of package.json leads back to that source directory.
src_dir="$(dirname "$(readlink -f "$pkg/package.json")")"
node_modules="$src_dir/node_modules"
for need in @grpc/grpc-js @grpc/proto-loader protobufjs typescript; do
  if [ ! -f "$node_modules/$need/package.json" ]; then
    echo "node_test: $node_modules/$need is missing." >&2
    echo "node_test: install the client's dependencies first: npm ci --prefix clients/node" >&2
    exit 1
  fi
done
command -v node >/dev/null || { echo "node_test: node is not on PATH" >&2; exit 1; }

export WORKSPACED_BIN="$runfiles/server/workspaced"
export WORKSPACED_PROTO_DIR="$runfiles/proto"
export WORKSPACED_TEST_PKI="$runfiles/clients/testdata/pki.sh"
export WORKSPACED_TEST_FRONT="$runfiles/clients/testdata/front.sh"
export WORKSPACED_VERSION_FILE="$runfiles/VERSION"
[ -x "$WORKSPACED_BIN" ] || { echo "node_test: no server at $WORKSPACED_BIN" >&2; exit 1; }

# A private copy of the package (sources dereferenced from the runfiles)
# with node_modules linked in: generated and compiled files land here.
work="${TEST_TMPDIR:?}/node-client"
rm -rf "$work"
mkdir -p "$work"
(cd "$pkg" && cp -RL src test examples scripts package.json tsconfig.json "$work/")
ln -s "$node_modules" "$work/node_modules"
cd "$work"

node scripts/gen.mjs --proto-dir "$WORKSPACED_PROTO_DIR" --out gen
node node_modules/typescript/bin/tsc -p tsconfig.json

# TAP output: its closing "# pass N" / "# fail N" lines land in test.log;
# node exits non-zero when any test fails.
node --test --test-reporter=tap dist/test/*.test.js
