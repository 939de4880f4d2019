#!/usr/bin/env bash
# Builds and tests the Go client.
#
# Generated code is never committed: this script runs protoc over the API
# protos, assembles a throwaway GOPATH (generated stubs + the wrapper +
# the example), checks formatting, and runs go vet and go test against a
# real server. It uses only Debian's Go packages (GOPATH mode, no module
# proxy): golang-go, golang-google-grpc-dev, golang-google-genproto-dev,
# golang-github-golang-protobuf-1-3-dev, protobuf-compiler,
# protoc-gen-go-1-3, protoc-gen-go-grpc.
#
# Usage: build.sh [go test flags...]      e.g. build.sh -run TestExec -v
#
# Standalone, the server binary comes from $WORKSPACED_BIN (default: the
# Bazel output bazel-bin/server/workspaced). Under `bazel test` (TEST_SRCDIR
# set) everything comes from the runfiles.
set -euo pipefail

if [[ -n "${TEST_SRCDIR:-}" ]]; then
    root="$TEST_SRCDIR/workspaced"
    work="$TEST_TMPDIR/go"
    rm -rf "$work"
    export WORKSPACED_BIN="${WORKSPACED_BIN:-$root/server/workspaced}"
    export WORKSPACED_TEST_PKI="${WORKSPACED_TEST_PKI:-$root/clients/testdata/pki.sh}"
    export WORKSPACED_TEST_FRONT="${WORKSPACED_TEST_FRONT:-$root/clients/testdata/front.sh}"
else
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    export WORKSPACED_BIN="${WORKSPACED_BIN:-$root/bazel-bin/server/workspaced}"
    export WORKSPACED_TEST_PKI="${WORKSPACED_TEST_PKI:-$root/clients/testdata/pki.sh}"
    export WORKSPACED_TEST_FRONT="${WORKSPACED_TEST_FRONT:-$root/clients/testdata/front.sh}"
fi

for tool in go gofmt protoc protoc-gen-go protoc-gen-go-grpc; do
    command -v "$tool" >/dev/null || { echo "build.sh: $tool not found (see the package list at the top)" >&2; exit 1; }
done

# The Go import path mirrors the repository layout.
pkg=workspaced/clients/go
src="$work/gopath/src/$pkg"
gen_pkg="$pkg/gen/workspace/v1"
mkdir -p "$src/gen/workspace/v1" "$src/workspaced" "$src/examples/agentloop" "$work/protoc-out"

# The protos declare no go_package, so each file is mapped to the import
# path here. Both plugins are given the package name workspace_v1, the one
# protoc-gen-go 1.3 derives from the proto package. google.rpc and
# grpc.health are not generated: the Debian packages already carry them
# (errdetails, grpc_health_v1), and generating them again would register
# the same message names twice.
protos=(common providers workspaces filesystem exec)
map=""
files=()
for p in "${protos[@]}"; do
    map="$map,Mworkspace/v1/$p.proto=$gen_pkg;workspace_v1"
    files+=("$root/proto/workspace/v1/$p.proto")
done
map="${map#,}"
protoc -I"$root/proto" -I/usr/include \
    --go_out="$map:$work/protoc-out" \
    --go-grpc_out="$map:$work/protoc-out" \
    "${files[@]}"
# protoc-gen-go 1.3 writes beside the proto path, protoc-gen-go-grpc under
# the import path: gather both into the package directory.
find "$work/protoc-out" -name '*.go' -exec mv {} "$src/gen/workspace/v1/" \;
[[ $(find "$src/gen/workspace/v1" -name '*.pb.go' | wc -l) -eq 9 ]] ||
    { echo "build.sh: protoc did not produce the 9 expected files" >&2; exit 1; }

cp -L "$root/clients/go/workspaced/"*.go "$src/workspaced/"
cp -L "$root/clients/go/examples/agentloop/"*.go "$src/examples/agentloop/"

export GO111MODULE=off
export GOPATH="$work/gopath:/usr/share/gocode"
export GOFLAGS=
# A stable cache keeps reruns fast; fall back to the work dir if the home
# directory is not writable (e.g. a sandboxed test).
cache="${WORKSPACED_GOCACHE:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/workspaced-go}"
if ! mkdir -p "$cache" 2>/dev/null || [[ ! -w "$cache" ]]; then
    cache="$work/gocache"
    mkdir -p "$cache"
fi
export GOCACHE="$cache"

cd "$src"
unformatted="$(gofmt -l workspaced examples)"
if [[ -n "$unformatted" ]]; then
    echo "build.sh: not gofmt'd:" >&2
    echo "$unformatted" >&2
    exit 1
fi
go vet ./workspaced/ ./examples/...
go build ./...

if [[ ! -x "$WORKSPACED_BIN" ]]; then
    echo "build.sh: no server binary at $WORKSPACED_BIN (set WORKSPACED_BIN)" >&2
    exit 1
fi
# go test prints the final "ok"/"FAIL" line and exits non-zero on failure.
go test -count=1 "$@" ./workspaced/
