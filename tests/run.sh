#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine (as root): installs what
# is missing, starts dockerd, builds the test image, then runs every test
# twice: a regular build, and the same suite under ASan/UBSan.
set -uo pipefail
cd "$(dirname "$0")/.."

bash bazel/setup.sh || exit 1
bash tests/fixtures/dockerd.sh || exit 1
bash tests/fixtures/image/build.sh || exit 1
# The Node client's modules, pinned by its package-lock.json.
(cd clients/node && npm ci --no-audit --no-fund --loglevel=error) || exit 1

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
bazel test //... "$@" 2>&1 | tee -a "$log" || status=1
bazel test --config=asan //... "$@" 2>&1 | tee -a "$log" || status=1
# Last, outside the test runner: it stops and restarts dockerd, which must
# outlive it (see tests/e2e/BUILD.bazel).
bazel run //tests/e2e:docker_daemon_test 2>&1 | tee -a "$log"
if [ "${PIPESTATUS[0]}" -eq 0 ]; then
  echo "//tests/e2e:docker_daemon_test PASSED (bazel run)" | tee -a "$log"
else
  echo "//tests/e2e:docker_daemon_test FAILED (bazel run)" | tee -a "$log"
  status=1
fi
bash tests/fixtures/dockerd.sh || status=1

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")
echo "$passed passed, $failed failed"
if [ "$status" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$passed" -eq 0 ]; then
  exit 1
fi
