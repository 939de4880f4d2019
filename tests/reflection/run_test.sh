#!/usr/bin/env bash
# Bazel driver of //tests/reflection:reflection_test: runs
# reflection.test.mjs with `node --test` against the server built by Bazel.
set -euo pipefail

runfiles="${TEST_SRCDIR:?run under bazel test}/${TEST_WORKSPACE:-workspaced}"
pkg="$runfiles/tests/reflection"

# node_modules is not a Bazel input: it is installed into the source tree
# by `npm ci --prefix tests/reflection`. The test is unsandboxed, so the
# runfile symlink of package.json leads back to that source directory.
src_dir="$(dirname "$(readlink -f "$pkg/package.json")")"
node_modules="$src_dir/node_modules"
for need in @grpc/grpc-js @grpc/proto-loader protobufjs grpc-js-reflection-client; do
  if [ ! -f "$node_modules/$need/package.json" ]; then
    echo "reflection_test: $node_modules/$need is missing." >&2
    echo "reflection_test: install the test's dependencies first: npm ci --prefix tests/reflection" >&2
    exit 1
  fi
done
command -v node >/dev/null || { echo "reflection_test: node is not on PATH" >&2; exit 1; }

export WORKSPACED_BIN="$runfiles/server/workspaced"
export WORKSPACED_PROTO_DIR="$runfiles/proto"
export WORKSPACED_PROTOSET="$runfiles/proto/workspace.protoset"
[ -x "$WORKSPACED_BIN" ] || { echo "reflection_test: no server at $WORKSPACED_BIN" >&2; exit 1; }

# The test runs from a copy beside node_modules, which it resolves from
# its own directory.
work="${TEST_TMPDIR:?}/reflection"
rm -rf "$work"
mkdir -p "$work"
cp -L "$pkg/reflection.test.mjs" "$work/"
ln -s "$node_modules" "$work/node_modules"
node --test --test-reporter=tap "$work/reflection.test.mjs"
