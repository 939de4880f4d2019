#!/usr/bin/env bash
# The long versions of the reliability suites, whose figures
# tests/reliability/README.md records (the test suite runs the bounded
# ones). Each part prints its own table; run them on a quiet machine.
#
#   bash tests/reliability/run.sh [PART...]
#
# PART is any of: fuzz (every fuzz target for an hour: eleven hours),
# soak (10,000 commands over 100 workspaces, 1,000 open/close and
# 1,000 attach/detach cycles: about 12 minutes), crash (100 kill -9
# iterations), transport (every attack at full size: about 5 minutes),
# tsan (the ThreadSanitizer suite). No PART: all of them.
# FUZZ_SECONDS overrides the hour per fuzz target.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(soak crash transport tsan fuzz)
status=0

for part in "${parts[@]}"; do
  echo "== $part ($(date -u +%FT%TZ))"
  case "$part" in
    fuzz)
      bazel build --config=fuzz //tests/fuzz/... &&
        bash tests/fuzz/run.sh --seconds "${FUZZ_SECONDS:-3600}"
      ;;
    soak | crash)
      bazel test "//tests/reliability/soak:${part}_test" --nocache_test_results \
        --test_env=WS_SOAK_FULL=1 --test_timeout=7200 --test_output=all
      ;;
    transport)
      bazel build //server:workspaced //tests/reliability/transport:stubs &&
        bash tests/reliability/transport/run.sh --full
      ;;
    tsan)
      bazel test --config=tsan --nocache_test_results //tests/tsan:suite
      ;;
    *)
      echo "unknown part: $part (fuzz, soak, crash, transport, tsan)" >&2
      exit 2
      ;;
  esac
  rc=$?
  echo "== $part: $([ $rc -eq 0 ] && echo passed || echo "FAILED ($rc)")"
  [ $rc -eq 0 ] || status=1
done
exit $status
