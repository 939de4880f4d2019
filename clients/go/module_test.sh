#!/usr/bin/env bash
# Builds and tests the Go client as the Go module workspaced.dev/go, in
# module mode and offline: vendor.sh assembles vendor/ from Debian's
# packaged Go sources, `go generate` makes the stubs, then gofmt, go build,
# go vet and go test (the example included) run with -mod=vendor and no
# module proxy, against a real server. Last, a second module uses
# workspaced.dev/go through a `replace` directive, as a program outside
# this repository would, and is built and run.
#
# Everything happens in a copy of the sources in a temporary directory:
# neither vendor/ nor the stubs are ever written into the source tree.
#
# Usage: module_test.sh [go test flags...]     e.g. module_test.sh -run TestExec -v
#
# Standalone, the server binary comes from $WORKSPACED_BIN (default: the
# Bazel output bazel-bin/server/workspaced). Under `bazel test` (TEST_SRCDIR
# set) everything comes from the runfiles.
set -euo pipefail

if [[ -n "${TEST_SRCDIR:-}" ]]; then
    root="$TEST_SRCDIR/workspaced"
    work="$TEST_TMPDIR/gomod"
    rm -rf "$work"
    export WORKSPACED_BIN="${WORKSPACED_BIN:-$root/server/workspaced}"
else
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    export WORKSPACED_BIN="${WORKSPACED_BIN:-$root/bazel-bin/server/workspaced}"
fi
export WORKSPACED_TEST_PKI="${WORKSPACED_TEST_PKI:-$root/clients/testdata/pki.sh}"
export WORKSPACED_TEST_FRONT="${WORKSPACED_TEST_FRONT:-$root/clients/testdata/front.sh}"

for tool in go gofmt protoc protoc-gen-go protoc-gen-go-grpc dpkg-query; do
    command -v "$tool" >/dev/null || { echo "module_test.sh: $tool not found (see clients/go/README.md)" >&2; exit 1; }
done
if [[ ! -x "$WORKSPACED_BIN" ]]; then
    echo "module_test.sh: no server binary at $WORKSPACED_BIN (set WORKSPACED_BIN)" >&2
    exit 1
fi

# The copy keeps the repository's layout, which the go:generate directive
# relies on (it reads ../../../../../proto).
tree="$work/src"
mod="$tree/clients/go"
mkdir -p "$mod" "$tree/proto"
cp -rL "$root/proto/." "$tree/proto/"
cp -L "$root/VERSION" "$tree/VERSION"
export WORKSPACED_VERSION_FILE="$tree/VERSION"
(cd "$root/clients/go" && cp -L --parents go.mod vendor.sh gen/workspace/v1/generate.go \
    workspaced/*.go examples/agentloop/*.go "$mod/")

export GO111MODULE=on GOPROXY=off GOSUMDB=off GOFLAGS="-mod=vendor -trimpath"
# The module cache is not used (everything is vendored); keep go from
# writing into the home directory for it.
export GOPATH="$work/gopath" GOMODCACHE="$work/gopath/pkg/mod"
cache="${WORKSPACED_GOCACHE:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/workspaced-go}"
if ! mkdir -p "$cache" 2>/dev/null || [[ ! -w "$cache" ]]; then
    cache="$work/gocache"
    mkdir -p "$cache"
fi
export GOCACHE="$cache"

# vendor.sh refuses a go.mod whose version is not the one Debian ships.
mkdir -p "$work/stale"
sed 's/^\(\s*google.golang.org\/grpc\) v.*/\1 v1.0.0/' "$mod/go.mod" >"$work/stale/go.mod"
if bash "$mod/vendor.sh" "$work/stale" 2>"$work/stale.err" ||
    ! grep -q 'go.mod wants google.golang.org/grpc v1.0.0' "$work/stale.err"; then
    cat "$work/stale.err" >&2
    echo "module_test.sh: vendor.sh did not refuse a grpc version Debian does not ship" >&2
    exit 1
fi

cd "$mod"
bash vendor.sh
go generate ./gen/...
[[ $(find gen/workspace/v1 -name '*.pb.go' | wc -l) -eq 9 ]] ||
    { echo "module_test.sh: go generate did not produce the 9 expected files" >&2; exit 1; }
unformatted="$(gofmt -l workspaced examples gen)"
if [[ -n "$unformatted" ]]; then
    echo "module_test.sh: not gofmt'd:" >&2
    echo "$unformatted" >&2
    exit 1
fi
go build ./...
go vet ./...
# go test prints the final "ok"/"FAIL" line and exits non-zero on failure.
go test -count=1 "$@" ./...

# Another module, using this one through `replace`. Go wants its go.mod to
# require what workspaced.dev/go requires as well: vendor.sh refuses a
# go.mod without them and prints the lines to add, which are added here as
# a user would.
user="$work/user"
mkdir -p "$user"
cat >"$user/go.mod" <<'MOD'
module example.com/agent

go 1.19

require workspaced.dev/go v0.1.0

replace workspaced.dev/go => ../src/clients/go
MOD
cat >"$user/main.go" <<'SRC'
package main

import (
	"fmt"

	workspace_v1 "workspaced.dev/go/gen/workspace/v1"
	"workspaced.dev/go/workspaced"
)

func main() {
	fmt.Println(workspaced.Version, workspaced.ReasonPathEscape, workspace_v1.ErrorReason_PATH_ESCAPE)
}
SRC
cd "$user"
if bash "$mod/vendor.sh" 2>"$work/vendor.err"; then
    echo "module_test.sh: vendor.sh accepted a go.mod without workspaced.dev/go's requirements" >&2
    exit 1
fi
grep -q 'google.golang.org/grpc v1.33.3 // indirect' "$work/vendor.err" || {
    cat "$work/vendor.err" >&2
    echo "module_test.sh: vendor.sh did not name the missing requirements" >&2
    exit 1
}
sed -n '/^require ($/,/^)$/p' "$work/vendor.err" >>go.mod
bash "$mod/vendor.sh"
go build -o agent .
want="$(tr -d '[:space:]' <"$tree/VERSION") PATH_ESCAPE PATH_ESCAPE"
got="$(./agent)"
[[ "$got" == "$want" ]] || { echo "module_test.sh: the user module printed '$got', want '$want'" >&2; exit 1; }
echo "module_test.sh: a module using workspaced.dev/go through replace builds and runs: $got"
