#!/usr/bin/env bash
# Runs the Python tour from README.md, as written, against a real server:
# the README's example must keep working, and the server must then drain and
# exit cleanly on SIGTERM.
set -euo pipefail

readme=README.md
server=server/workspaced
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/readme.XXXXXX")
# Workspace uids reach their directories under the state directory.
chmod 711 "$tmp"
# The socket's own directory: a unix socket's path has at most 107 bytes,
# and the test's temporary directory can be longer.
sock=$(mktemp -d /tmp/readme-sock.XXXXXX)
pid=
trap '[ -z "$pid" ] || { kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }; rm -rf "$sock"' EXIT

"$server" --listen "unix:$sock/ws.sock" --state-dir "$tmp/state" >"$tmp/out" 2>"$tmp/err" &
pid=$!
# Polled until the server says where it listens, or 30 s pass.
for _ in $(seq 1 300); do
  grep -q "listening on" "$tmp/out" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
addr=$(sed -n 's/^workspaced listening on //p' "$tmp/out")
[ -n "$addr" ] || { cat "$tmp/err"; echo "server did not start"; exit 1; }

# The stub generation line and the Python program, exactly as in the README
# (only the output directory and the address differ).
mkdir -p "$tmp/client"
(cd proto && protoc -I. -I/usr/include --python_out="$tmp/client" --grpc_out="$tmp/client" \
  --plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin \
  $(ls workspace/v1/*.proto google/rpc/*.proto))
sed -n "/^PYTHONPATH=.*python3 - <<'PY'$/,/^PY$/p" "$readme" | sed '1d;$d' \
  | sed "s|unix:/run/workspaced/workspaced.sock|$addr|" > "$tmp/tour.py"
[ -s "$tmp/tour.py" ] || { echo "no Python tour found in the README"; exit 1; }

out=$(PYTHONPATH="$tmp/client" /usr/bin/python3 "$tmp/tour.py")
echo "$out"
grep -q "write tests" <<<"$out" || { echo "FAIL: the file did not round-trip"; exit 1; }
grep -q "StatusCode.INVALID_ARGUMENT" <<<"$out" || { echo "FAIL: the escape was not refused"; exit 1; }
grep -qF "b'2 notes/plan.md\\n' EXIT_CAUSE_EXITED" <<<"$out" || { echo "FAIL: Run did not count the lines"; exit 1; }
grep -qF "stdout b'one\\n'" <<<"$out" || { echo "FAIL: Start did not stream the first line"; exit 1; }
grep -q "^EXIT_CAUSE_TIMEOUT" <<<"$out" || { echo "FAIL: the timeout did not end the command"; exit 1; }
grep -q "two" <<<"$out" && { echo "FAIL: the command outlived its timeout"; exit 1; }

# SIGTERM drains; the exit status is 0, within 30 s (polled, then killed).
kill -TERM "$pid"
for _ in $(seq 1 300); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
  cat "$tmp/err"
  echo "FAIL: the server did not exit within 30 s of SIGTERM"
  exit 1
fi
status=0
wait "$pid" || status=$?
pid=
if [ "$status" -ne 0 ]; then
  cat "$tmp/err"
  echo "FAIL: the server exited with status $status after SIGTERM"
  exit 1
fi
echo "README tour OK"
