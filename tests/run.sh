#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine (as root): installs what
# is missing, starts dockerd, builds the test image, then runs every test
# twice: a regular build, and the same suite under ASan/UBSan (where undefined
# behaviour is fatal). Every test runs every time: many depend on the machine
# (dockerd, bubblewrap, cgroups, nginx, the Node modules), so a result cached
# from an earlier run would prove nothing about this one. Each phase's time
# and every test that skipped itself, with its reason, are printed at the end.
set -uo pipefail
cd "$(dirname "$0")/.."

t0=$(date +%s)
bash bazel/setup.sh || exit 1
bash tests/fixtures/dockerd.sh || exit 1
bash tests/fixtures/image/build.sh || exit 1
# A real Debian with Python's test suite, for //tests/e2e:stdlib_test.
bash tests/fixtures/debian/build.sh || exit 1
# The Node client's modules, pinned by its package-lock.json.
(cd clients/node && npm ci --no-audit --no-fund --loglevel=error) || exit 1
# The reflection test's client (grpc-js-reflection-client), pinned likewise.
(cd tests/reflection && npm ci --no-audit --no-fund --loglevel=error) || exit 1

log=$(mktemp)
skips=$(mktemp)
stamp=$(mktemp)
trap 'rm -f "$log" "$skips" "$stamp"' EXIT
status=0
times=()
# The mechanical style rules (formatting, no unbounded string calls).
bash tests/style/check.sh 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
t1=$(date +%s)
times+=("setup $((t1 - t0)) s")

touch "$stamp"
bazel test --nocache_test_results //... "$@" 2>&1 | tee -a "$log" || status=1
bash tests/skips.sh bazel-testlogs "$stamp" | sed 's/^SKIPPED /SKIPPED (regular) /' >>"$skips"

# The caps again on a cgroup v2 only hierarchy, the one most users' hosts
# boot (this suite's hosts are v1): the regular build's binaries, which
# bazel-bin holds now, in a VM booted with Debian's kernel
# (tests/cgroup2/README.md). A VM that cannot start here fails the suite.
# The limits suite in both exec modes: agent (the default), then
# per-command.
vm_bins=(bazel-bin/tests/unit/cgroup2/cgroup2_test bazel-bin/tests/e2e/sandbox_limits_test
  WS_TEST_EXEC_MODE=per-command bazel-bin/tests/e2e/sandbox_limits_test)
bash tests/cgroup2/vm.sh "${vm_bins[@]}" 2>&1 | grep -v '^\[ *[0-9]*\.[0-9]*\]' | tee -a "$log"
if [ "${PIPESTATUS[0]}" -eq 0 ]; then
  echo "//tests/cgroup2:vm PASSED (vm.sh, cgroup v2 only)" | tee -a "$log"
else
  echo "//tests/cgroup2:vm FAILED (vm.sh, cgroup v2 only)" | tee -a "$log"
  status=1
fi
t2=$(date +%s)
times+=("regular $((t2 - t1)) s")

# The libFuzzer targets (tests/fuzz), bounded: 20 s each from the committed
# corpus (the long runs are tests/fuzz/run.sh --seconds 3600). Any crash,
# leak or timeout fails the suite with its reproducer.
bazel build --config=fuzz //tests/fuzz/... 2>&1 | tail -n 3 | tee -a "$log"
if [ "${PIPESTATUS[0]}" -eq 0 ] && bash tests/fuzz/run.sh --seconds 20 2>&1 | tee -a "$log" &&
  [ "${PIPESTATUS[0]}" -eq 0 ]; then
  echo "//tests/fuzz:bounded_run PASSED (tests/fuzz/run.sh --seconds 20)" | tee -a "$log"
else
  echo "//tests/fuzz:bounded_run FAILED (tests/fuzz/run.sh --seconds 20)" | tee -a "$log"
  status=1
fi
t2f=$(date +%s)
times+=("fuzz $((t2f - t2)) s")

# The packaging tests (tag "packaging": the wheel, the npm tarball, the
# C++ and wsctl installs, the .deb) build and install release artifacts,
# and a release is the regular build: they run in the regular phase only.
# So do the suites tagged "regular-only", which would spend the time
# budget on code that is not the server's C (the Node client's and the
# whole Go client's suites, Python's stdlib in the boxes) or on server
# paths other ASan suites already run (runsc under per-command).
# --build_tests_only: the regular phase built every target already; this
# one builds, instrumented, only what its tests run.
touch "$stamp"
bazel test --config=asan --nocache_test_results --build_tests_only \
  --test_tag_filters=-packaging,-regular-only //... "$@" 2>&1 |
  tee -a "$log" || status=1
bash tests/skips.sh bazel-testlogs "$stamp" | sed 's/^SKIPPED /SKIPPED (asan) /' >>"$skips"
t3=$(date +%s)
times+=("asan $((t3 - t2f)) s")

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
t4=$(date +%s)
times+=("docker_daemon_test $((t4 - t3)) s")

echo
if [ -s "$skips" ]; then
  echo "Skipped by the tests themselves (the reason each gave):"
  cat "$skips"
else
  echo "No test skipped itself."
fi
echo "Time: ${times[*]/%/,} total $((t4 - t0)) s" | sed 's/, total/; total/; s/,,/,/g'
# A cached result is not a run: only results of this run count.
passed=$(grep -cE '^//[^ ]+ +PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")
cached=$(grep -cE '^//[^ ]+ +\(cached\) ' "$log")
echo "$passed passed, $failed failed, $cached cached"
if [ "$status" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$passed" -eq 0 ] || [ "$cached" -ne 0 ]; then
  exit 1
fi
