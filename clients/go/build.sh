#!/usr/bin/env bash
# Builds and tests the Go client.
#
# This is the GOPATH-mode build (module_test.sh is the module-mode one).
# Generated code is never committed: this script assembles a throwaway
# GOPATH in which workspaced.dev/go is a copy of the module's sources,
# runs the module's `go generate` (protoc over the API protos), checks
# formatting, and runs go vet and go test against a real server. It uses
# only Debian's Go packages (/usr/share/gocode, no module proxy): golang-go, golang-google-grpc-dev, golang-google-genproto-dev,
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

# A copy of the sources keeps the repository's layout, which the
# go:generate directive relies on (it reads ../../../../../proto); the
# GOPATH names it by the module's import path, workspaced.dev/go.
tree="$work/src"
mod="$tree/clients/go"
mkdir -p "$mod" "$tree/proto" "$work/gopath/src/workspaced.dev"
cp -rL "$root/proto/." "$tree/proto/"
cp -L "$root/VERSION" "$tree/VERSION"
export WORKSPACED_VERSION_FILE="$tree/VERSION"
(cd "$root/clients/go" && cp -L --parents gen/workspace/v1/generate.go \
    workspaced/*.go examples/agentloop/*.go "$mod/")
ln -s "$mod" "$work/gopath/src/workspaced.dev/go"
pkgs=(workspaced.dev/go/gen/workspace/v1 workspaced.dev/go/workspaced workspaced.dev/go/examples/agentloop)

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

cd "$mod"
unformatted="$(gofmt -l workspaced examples gen)"
if [[ -n "$unformatted" ]]; then
    echo "build.sh: not gofmt'd:" >&2
    echo "$unformatted" >&2
    exit 1
fi
# The same go:generate directive as in module mode writes the stubs.
go generate workspaced.dev/go/gen/workspace/v1
[[ $(find gen/workspace/v1 -name '*.pb.go' | wc -l) -eq 9 ]] ||
    { echo "build.sh: go generate did not produce the 9 expected files" >&2; exit 1; }
go vet "${pkgs[@]}"
go build "${pkgs[@]}"

if [[ ! -x "$WORKSPACED_BIN" ]]; then
    echo "build.sh: no server binary at $WORKSPACED_BIN (set WORKSPACED_BIN)" >&2
    exit 1
fi
# go test prints the final "ok"/"FAIL" line and exits non-zero on failure.
go test -count=1 "$@" workspaced.dev/go/workspaced
