#!/usr/bin/env bash
# Installs what is missing, builds workspaced and runs it in the foreground
# on loopback. Environment: WORKSPACED_LISTEN (default 127.0.0.1:7878),
# WORKSPACED_STATE_DIR (default /var/lib/workspaced).
set -euo pipefail
cd "$(dirname "$0")/.."

bash bazel/setup.sh
bash tests/fixtures/dockerd.sh || echo "serve: no Docker daemon; the docker provider will report unavailable" >&2
bazel build //server:workspaced
exec ./bazel-bin/server/workspaced \
  --listen "${WORKSPACED_LISTEN:-127.0.0.1:7878}" \
  --state-dir "${WORKSPACED_STATE_DIR:-/var/lib/workspaced}"
