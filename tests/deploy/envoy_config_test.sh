#!/usr/bin/env bash
# server/deploy/envoy.yaml parsed with Debian's python3-yaml and
# cross-checked (see envoy_config_check.py); Envoy itself is not run.
set -euo pipefail
exec /usr/bin/python3 tests/deploy/envoy_config_check.py server/deploy/envoy.yaml
