#!/usr/bin/env bash
# Runs transport_attack.py with Debian's python3 against the server Bazel
# built: under `bazel test` (the bounded version), or by hand from the
# repository root after `bazel build //server:workspaced
# //tests/reliability/transport:stubs`, with its flags (--full, --only).
set -euo pipefail

if [ -n "${TEST_SRCDIR:-}" ]; then
  root="$TEST_SRCDIR/${TEST_WORKSPACE:-workspaced}"
else
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)/bazel-bin"
fi
here="$root/tests/reliability/transport"
server="$root/server/workspaced"
script="$(dirname "${BASH_SOURCE[0]}")/transport_attack.py"
[ -f "$here/transport_attack.py" ] && script="$here/transport_attack.py"

# Debian's python3 has python3-h2 (hpack) and python3-grpcio; another
# python earlier on PATH may not.
python=/usr/bin/python3
[ -x "$python" ] || { echo "transport_test: $python is missing (Debian package python3)" >&2; exit 1; }
"$python" -c 'import h2, hpack, grpc, google.protobuf' 2>/dev/null ||
  { echo "transport_test: $python cannot import h2, hpack, grpc and google.protobuf" \
         "(Debian packages python3-h2, python3-grpcio, python3-protobuf)" >&2; exit 1; }
[ -x "$server" ] || { echo "transport_test: no server at $server (bazel build //server:workspaced)" >&2; exit 1; }
[ -f "$here/wspb/health_pb2_grpc.py" ] ||
  { echo "transport_test: no generated stubs in $here/wspb (bazel build //tests/reliability/transport:stubs)" >&2; exit 1; }

export PYTHONPATH="$here"
export PYTHONDONTWRITEBYTECODE=1
exec "$python" "$script" --server "$server" "$@"
