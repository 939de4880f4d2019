#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine (as root): installs what
# is missing, starts dockerd, builds the test image, runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

bash bazel/setup.sh
bash tests/fixtures/dockerd.sh
bash tests/fixtures/image/build.sh
bazel test //... "$@"
