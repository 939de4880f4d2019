#!/usr/bin/env bash
# Bazel driver of //clients/python:python_package_test: the Python client
# as a user gets it. Builds the wheel and the sdist with build_dist.sh
# (offline), checks what the wheel holds, installs each into its own fresh
# venv outside the repository with `pip install --no-index` (grpcio and
# protobuf come from Debian through --system-site-packages), and from a
# clean directory runs the example and a smoke script (sync round trip,
# version, one asyncio call) against the real server.
set -euo pipefail

runfiles="${TEST_SRCDIR:?run under bazel test}/${TEST_WORKSPACE:-workspaced}"
pkg="$runfiles/clients/python"
server_bin="$runfiles/server/workspaced"
python=/usr/bin/python3
tmp="${TEST_TMPDIR:?run under bazel test}"

fail() { echo "python_package_test: $*" >&2; exit 1; }
[ -x "$server_bin" ] || fail "no server at $server_bin"
"$python" -c 'import venv, ensurepip' 2>/dev/null || fail "$python cannot make a venv with pip (Debian package python3-venv)"
version=$(tr -d '[:space:]' <"$runfiles/VERSION")
unset PYTHONPATH WORKSPACED_ADDR WORKSPACED_TOKEN
export PYTHONNOUSERSITE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

# -- build
dist="$tmp/dist"
bash "$pkg/build_dist.sh" "$dist" >"$tmp/build.out" || fail "build_dist.sh failed"
wheel="$dist/workspaced-$version-py3-none-any.whl"
sdist="$dist/workspaced-$version.tar.gz"
[ -f "$wheel" ] && [ -f "$sdist" ] || fail "build_dist.sh did not make $wheel and $sdist: $(cat "$tmp/build.out")"

# -- what the wheel holds: the package with its generated modules inside,
# py.typed, the version and the dependencies, and nothing at top level but
# the package.
"$python" - "$wheel" "$sdist" "$version" <<'PY'
import sys, tarfile, zipfile
wheel, sdist, version = sys.argv[1:]
names = set(zipfile.ZipFile(wheel).namelist())
stems = ["common", "providers", "workspaces", "filesystem", "exec", "status", "error_details", "health"]
want = {"workspaced/py.typed", "workspaced/_pb/__init__.py", "workspaced/aio.py", "workspaced/errors.py"}
want |= {"workspaced/_pb/%s_pb2.py" % s for s in stems} | {"workspaced/_pb/%s_pb2.pyi" % s for s in stems} | {"workspaced/_pb/%s_pb2_grpc.py" % s for s in stems}
missing = sorted(want - names)
assert not missing, "the wheel lacks %s" % missing
tops = {n.split("/")[0] for n in names}
assert tops == {"workspaced", "workspaced-%s.dist-info" % version}, "top-level entries: %s" % sorted(tops)
meta = zipfile.ZipFile(wheel).read("workspaced-%s.dist-info/METADATA" % version).decode()
lic = zipfile.ZipFile(wheel).read("workspaced-%s.dist-info/LICENSE" % version).decode()
assert "Apache License" in lic and "Version 2.0" in lic, "the wheel lacks the Apache-2.0 LICENSE"
# Older setuptools write "grpcio (>=1.51)": compare without spaces and parentheses.
lines = {l.replace(" ", "").replace("(", "").replace(")", "") for l in meta.splitlines()}
for line in ("Name:workspaced", "Version:" + version, "Requires-Dist:grpcio>=1.51", "Requires-Dist:protobuf>=3.21"):
    assert line in lines, "METADATA lacks %r:\n%s" % (line, meta)
pb = zipfile.ZipFile(wheel).read("workspaced/_pb/workspaces_pb2.py").decode()
assert "from . import common_pb2" in pb and "from workspace" not in pb, "imports not rewritten"
pyi = zipfile.ZipFile(wheel).read("workspaced/_pb/workspaces_pb2.pyi").decode()
assert "from . import common_pb2" in pyi and "from workspace" not in pyi, "type stub imports not rewritten"
src = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n}
for n in ("pyproject.toml", "workspaced/py.typed", "workspaced/_pb/exec_pb2_grpc.py"):
    assert n in src, "the sdist lacks %s" % n
print("wheel and sdist hold the package, its stubs, py.typed and version", version)
PY

# -- a real server on a unix socket (a short path: sun_path is 108 bytes)
sockdir=$(mktemp -d /tmp/wsd-pkg-XXXXXX)
state="$tmp/state"
server_log="$tmp/server.log"
banner="$tmp/server.out"
"$server_bin" --listen "unix:$sockdir/ws.sock" --state-dir "$state" >"$banner" 2>"$server_log" &
server_pid=$!
cleanup() {
  if kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"
    wait "$server_pid" || true
  fi
  rm -rf "$sockdir"
}
trap cleanup EXIT
for _ in $(seq 200); do
  grep -q "^workspaced listening on unix:$sockdir/ws.sock" "$banner" && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$server_log" >&2; fail "workspaced did not start"; }
  sleep 0.1
done
grep -q "^workspaced listening on" "$banner" || { cat "$server_log" >&2; fail "workspaced did not say it listens"; }
address="unix:$sockdir/ws.sock"

# -- install each artifact into its own venv and use it from a clean
# directory outside the repository.
try_install() { # NAME PIP_ARGS...
  local name=$1
  shift
  local venv="$tmp/venv-$name"
  "$python" -m venv --system-site-packages "$venv" || fail "$name: python3 -m venv failed"
  "$venv/bin/pip" install --no-index "$@" >"$tmp/pip-$name.log" 2>&1 ||
    { cat "$tmp/pip-$name.log" >&2; fail "$name: pip install --no-index failed"; }
  local work="$tmp/user-$name"
  mkdir -p "$work"
  cp "$pkg/examples/agent_loop.py" "$pkg/tests/package_smoke.py" "$work/"
  (
    cd "$work"
    "$venv/bin/python" package_smoke.py "$address" "$version" >smoke.out 2>&1 ||
      { cat smoke.out >&2; fail "$name: the smoke script failed"; }
    cat smoke.out
    [ "$(tail -n 1 smoke.out)" = "smoke ok" ] || fail "$name: the smoke script did not finish"
    "$venv/bin/python" agent_loop.py "$address" >example.out 2>&1 ||
      { cat example.out >&2; fail "$name: the example failed"; }
    cat example.out
    grep -qx "sorted.txt says: relax, ship it, write tests" example.out || fail "$name: the example's output is wrong"
    [ "$(tail -n 1 example.out)" = "workspace closed" ] || fail "$name: the example did not close its workspace"
  )
  echo "python_package_test: $name installed and works"
}

try_install wheel "$wheel"
# The sdist carries the generated modules; building it needs setuptools and
# wheel, which --no-build-isolation takes from Debian's packages instead of
# downloading them.
try_install sdist --no-build-isolation "$sdist"

# The server must stop cleanly after all that.
kill -TERM "$server_pid"
status=0
wait "$server_pid" || status=$?
[ "$status" -eq 0 ] || { cat "$server_log" >&2; fail "workspaced exited with status $status after SIGTERM"; }
echo "python_package_test: OK"
