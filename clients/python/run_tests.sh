#!/usr/bin/env bash
# Bazel driver of //clients/python:python_test: runs the unittest suite of
# the Python client with Debian's interpreter against the server Bazel
# built. The package sits in the runfiles as a user's checkout would after
# a build: workspaced/ with the generated modules in workspaced/_pb, so the
# directory above it is all PYTHONPATH needs.
set -euo pipefail

runfiles="${TEST_SRCDIR:?run under bazel test}/${TEST_WORKSPACE:-workspaced}"
pkg="$runfiles/clients/python"

export WORKSPACED_BIN="$runfiles/server/workspaced"
export WORKSPACED_TEST_PKI="$runfiles/clients/testdata/pki.sh"
export WORKSPACED_TEST_FRONT="$runfiles/clients/testdata/front.sh"
export WORKSPACED_VERSION_FILE="$runfiles/VERSION"
[ -x "$WORKSPACED_BIN" ] || { echo "python_test: no server at $WORKSPACED_BIN" >&2; exit 1; }
[ -f "$pkg/workspaced/_pb/exec_pb2_grpc.py" ] || { echo "python_test: generated stubs missing" >&2; exit 1; }
[ -f "$WORKSPACED_VERSION_FILE" ] || { echo "python_test: no VERSION file" >&2; exit 1; }

# Debian's python3 has python3-grpcio and python3-protobuf; another python
# earlier on PATH does not.
python=/usr/bin/python3
[ -x "$python" ] || { echo "python_test: $python is missing (Debian package python3)" >&2; exit 1; }
"$python" -c 'import grpc, google.protobuf' 2>/dev/null ||
  { echo "python_test: $python cannot import grpc and google.protobuf (Debian packages python3-grpcio, python3-protobuf)" >&2; exit 1; }
export PYTHONPATH="$pkg"
export PYTHONDONTWRITEBYTECODE=1
unset WORKSPACED_ADDR WORKSPACED_TOKEN

cd "$pkg"
# unittest prints its summary ("OK" or "FAILED (...)") last and exits
# non-zero on any failure or error; set -e passes that on.
exec "$python" -m unittest discover -v -s tests -p "test_*.py"
