#!/usr/bin/env bash
# Bazel driver of //clients/node:node_package_test: the npm package as a
# user gets it.
#
#   1. `npm pack` a staged copy of the package (the prepack script compiles
#      it and copies the protos and LICENSE in; the source tree stays
#      untouched) and check what the tarball holds;
#   2. `npm install` the tarball into an empty directory outside the
#      repository (its dependencies from the npm cache when it has them,
#      else from the registry: --prefer-offline);
#   3. against a real server, run consumer.mjs there with plain node (it
#      imports the package by name), and compile consumer.ts with tsc
#      against the installed declarations.
set -euo pipefail

runfiles="${TEST_SRCDIR:?run under bazel test}/${TEST_WORKSPACE:-workspaced}"
pkg="$runfiles/clients/node"
tmp="${TEST_TMPDIR:?}"

fail() {
  echo "node_package_test: $*" >&2
  exit 1
}

# typescript and the client's own dependencies come from the source tree's
# node_modules (`npm ci --prefix clients/node`), as for node_test.
src_dir="$(dirname "$(readlink -f "$pkg/package.json")")"
node_modules="$src_dir/node_modules"
for need in @grpc/grpc-js @grpc/proto-loader protobufjs typescript; do
  [ -f "$node_modules/$need/package.json" ] ||
    fail "$node_modules/$need is missing; install the client's dependencies first: npm ci --prefix clients/node"
done
command -v node >/dev/null || fail "node is not on PATH"
command -v npm >/dev/null || fail "npm is not on PATH"

server="$runfiles/server/workspaced"
proto_dir="$runfiles/proto"
[ -x "$server" ] || fail "no server at $server"
version="$(tr -d '[:space:]' <"$runfiles/VERSION")"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "VERSION holds '$version'"
# The repository's LICENSE, which the package must carry.
license="$runfiles/LICENSE"
[ -f "$license" ] || fail "LICENSE is not in the runfiles"
[ -f "$license" ] || fail "no LICENSE at $license"

# npm's cache: the user's (where `npm ci` left the dependencies), unless
# npm_config_cache names another; Bazel's HOME is not the user's.
if [ -z "${npm_config_cache:-}" ]; then
  user_home="$(getent passwd "$(id -u)" | cut -d: -f6)"
  export npm_config_cache="${user_home:-$tmp}/.npm"
fi
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
unset WORKSPACED_PROTO_DIR WORKSPACED_ADDR WORKSPACED_TOKEN

# ---- 1. pack ----------------------------------------------------------------
stage="$tmp/stage"
out="$tmp/out"
rm -rf "$stage" "$out"
mkdir -p "$stage" "$out"
(cd "$pkg" && cp -RL src scripts package.json package-lock.json tsconfig.json tsconfig.build.json README.md "$stage/")
ln -s "$node_modules" "$stage/node_modules"
(cd "$stage" && WORKSPACED_PROTO_DIR="$proto_dir" WORKSPACED_LICENSE="$license" \
  npm pack --pack-destination "$out" >"$tmp/pack.out" 2>"$tmp/pack.err") ||
  fail "npm pack failed: $(cat "$tmp/pack.out" "$tmp/pack.err")"
tgz="$out/workspaced-client-$version.tgz"
[ -f "$tgz" ] || fail "npm pack made no $tgz: $(ls "$out")"

listing="$tmp/listing"
tar tzf "$tgz" | sort >"$listing"
need=(package/package.json package/README.md package/LICENSE package/dist/src/index.js package/dist/src/index.d.ts)
for f in "$pkg"/src/*.ts; do
  b="$(basename "$f" .ts)"
  need+=("package/dist/src/$b.js" "package/dist/src/$b.d.ts")
done
# The message types the declarations import, and every proto the client loads.
need+=(package/dist/gen/workspace/v1/Workspace.d.ts package/dist/gen/exec.d.ts)
for p in workspace/v1/common.proto workspace/v1/providers.proto workspace/v1/workspaces.proto \
  workspace/v1/filesystem.proto workspace/v1/exec.proto google/rpc/status.proto \
  google/rpc/error_details.proto grpc/health/v1/health.proto; do
  need+=("package/proto/$p")
  cmp -s <(tar xzf "$tgz" -O "package/proto/$p") "$proto_dir/$p" || fail "package/proto/$p differs from proto/$p"
done
for f in "${need[@]}"; do
  grep -qxF "$f" "$listing" || fail "the tarball lacks $f; it holds:
$(cat "$listing")"
done
# Nothing of the build or the tests: no sources, maps, tests or examples.
if grep -E '^package/(src|test|examples|scripts|gen)/|\.map$|^package/dist/(test|examples)/|\.tsbuildinfo$' "$listing"; then
  fail "the tarball holds files a user does not need (above)"
fi
cmp -s <(tar xzf "$tgz" -O package/LICENSE) "$license" || fail "package/LICENSE is not the repository's LICENSE"
tar xzf "$tgz" -O package/package.json >"$out/package.json"
node -e '
  const [file, version] = process.argv.slice(1);
  const p = JSON.parse(require("fs").readFileSync(file, "utf8"));
  const want = { name: "@workspaced/client", version, license: "Apache-2.0" };
  for (const [k, v] of Object.entries(want)) if (p[k] !== v) throw new Error(`package.json ${k} is ${p[k]}, want ${v}`);
  if (p.private) throw new Error("package.json is private");
  for (const d of ["@grpc/grpc-js", "@grpc/proto-loader", "protobufjs"]) {
    if (!p.dependencies?.[d]) throw new Error(`package.json does not depend on ${d}`);
  }
  if (p.dependencies?.typescript) throw new Error("typescript is a runtime dependency");
' "$out/package.json" "$version" || fail "the packed package.json is wrong"
echo "node_package_test: packed $(wc -l <"$listing") files into $(basename "$tgz")"

# ---- 2. install into an empty directory ----------------------------------------
# npm installs into the nearest directory above that has a package.json
# or node_modules: there must be none, or the install lands there.
consumer="$tmp/consumer"
rm -rf "$consumer"
mkdir -p "$consumer"
for d in "$tmp" "$(dirname "$tmp")" "$(dirname "$(dirname "$tmp")")"; do
  [ ! -e "$d/package.json" ] && [ ! -e "$d/node_modules" ] || fail "$d has a package.json or node_modules"
done
case "$consumer/" in "$src_dir"/* | "$(dirname "$(dirname "$src_dir")")"/*)
  fail "$consumer is inside the repository" ;;
esac
(cd "$consumer" && npm install --no-audit --no-fund --prefer-offline "$tgz" >"$tmp/install.out" 2>"$tmp/install.err") ||
  fail "npm install of the tarball failed: $(cat "$tmp/install.out" "$tmp/install.err")"
installed="$consumer/node_modules/@workspaced/client"
[ -f "$installed/package.json" ] || fail "npm install put nothing at $installed"
[ ! -e "$installed/node_modules/typescript" ] && [ ! -e "$consumer/node_modules/typescript" ] ||
  fail "installing the package pulled in typescript"
cp "$pkg/package-test/consumer.mjs" "$pkg/package-test/consumer.ts" "$pkg/package-test/tsconfig.json" "$consumer/"

# A TypeScript user's compile: strict, the package's declarations checked
# too (no skipLibCheck), resolved through its "exports".
(cd "$consumer" && node "$node_modules/typescript/bin/tsc" -p tsconfig.json) ||
  fail "consumer.ts does not compile against the installed package"

# ---- 3. run against a real server ----------------------------------------------
# A unix socket path must fit in sun_path (107 bytes); Bazel's TEST_TMPDIR
# is usually deeper than that.
sock_base="$tmp"
[ "${#sock_base}" -le 80 ] || sock_base="${TMPDIR:-/tmp}"
sock_dir="$(mktemp -d "$sock_base/wsd-XXXXXX")"
state="$tmp/state"
mkdir -p "$state"
"$server" --listen "unix:$sock_dir/ws.sock" --state-dir "$state" >"$tmp/server.out" 2>"$tmp/server.err" &
server_pid=$!
stop_server() {
  if [ -n "${server_pid:-}" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$sock_dir"
}
trap stop_server EXIT
for _ in $(seq 1 300); do
  grep -q '^workspaced listening on ' "$tmp/server.out" && break
  kill -0 "$server_pid" 2>/dev/null || fail "the server exited early: $(cat "$tmp/server.err")"
  sleep 0.05
done
grep -q "^workspaced listening on unix:$sock_dir/ws.sock\$" "$tmp/server.out" ||
  fail "the server did not start: $(cat "$tmp/server.out" "$tmp/server.err")"

(cd "$consumer" && node consumer.mjs "unix:$sock_dir/ws.sock" "$version") ||
  fail "consumer.mjs failed against the installed package; server stderr:
$(cat "$tmp/server.err")"

# The server must stop cleanly after what the consumer did.
kill -TERM "$server_pid"
status=0
wait "$server_pid" || status=$?
server_pid=
[ "$status" -eq 0 ] || fail "the server exited with status $status after SIGTERM: $(cat "$tmp/server.err")"
echo "node_package_test: pass"
