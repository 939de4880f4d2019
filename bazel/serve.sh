#!/usr/bin/env bash
# Installs what is missing, builds workspaced and runs it in the foreground
# on its unix socket (root and the server's own uid may call it; other
# local users only when the configuration maps their uid). Environment:
# WORKSPACED_LISTEN (default unix:/run/workspaced/workspaced.sock),
# WORKSPACED_STATE_DIR (default /var/lib/workspaced).
set -euo pipefail
cd "$(dirname "$0")/.."

bash bazel/setup.sh
bash tests/fixtures/dockerd.sh || echo "serve: no Docker daemon; the docker provider will report unavailable" >&2
bazel build //server:workspaced
exec ./bazel-bin/server/workspaced \
  --listen "${WORKSPACED_LISTEN:-unix:/run/workspaced/workspaced.sock}" \
  --state-dir "${WORKSPACED_STATE_DIR:-/var/lib/workspaced}"
