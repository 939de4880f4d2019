#!/usr/bin/env bash
# Builds the fuzz targets (bazel build --config=fuzz, clang with ASan,
# UBSan and libFuzzer) and runs each for a while on a scratch copy of its
# committed corpus, then prints one line per target:
#
#   target  seconds  execs/s  cov  new_units  crashes
#
# cov is libFuzzer's final `cov:` (edges covered), new_units the corpus
# units it added, crashes 0 or the path of the reproducer it wrote (a
# crash, leak, timeout or out-of-memory). Exits non-zero when any target
# found one (or did not run), after printing the end of its log; its
# scratch directory is then kept. The committed corpus is only read: each
# fuzzer grows a scratch copy.
#
# Usage: tests/fuzz/run.sh [--seconds N] [target...]
#   N        seconds per target (default 30; the suite runs 20, a long
#            run 3600: an hour each, one after the other)
#   target   e.g. guard_fuzz (default: every directory of tests/fuzz/corpus)
# Extra flags for `bazel build` (e.g. --jobs=1) come from FUZZ_BAZEL_FLAGS.
set -euo pipefail

seconds=30
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="${2:?--seconds needs a number}"; shift 2 ;;
    --seconds=*) seconds="${1#--seconds=}"; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
case "$seconds" in
  ''|*[!0-9]*) echo "run.sh: --seconds takes a whole number" >&2; exit 2 ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
if [ "${#targets[@]}" -eq 0 ]; then
  for d in tests/fuzz/corpus/*/; do
    targets+=("$(basename "$d")")
  done
fi
for t in "${targets[@]}"; do
  if [ ! -d "tests/fuzz/corpus/$t" ]; then
    echo "run.sh: no corpus for target '$t' (tests/fuzz/corpus/$t)" >&2
    exit 2
  fi
done

labels=()
for t in "${targets[@]}"; do labels+=("//tests/fuzz:$t"); done
# shellcheck disable=SC2086
bazel build --config=fuzz ${FUZZ_BAZEL_FLAGS:-} "${labels[@]}" >&2
# shellcheck disable=SC2086
bin="$(bazel info --config=fuzz ${FUZZ_BAZEL_FLAGS:-} bazel-bin 2>/dev/null)/tests/fuzz"

scratch="$(mktemp -d "${TMPDIR:-/tmp}/workspaced-fuzz.XXXXXX")"
found=0
printf '%-18s %8s %10s %8s %10s %s\n' target seconds execs/s cov new_units crashes
for t in "${targets[@]}"; do
  work="$scratch/$t"
  mkdir -p "$work/corpus" "$work/artifacts" "$work/tmp"
  cp -R "tests/fuzz/corpus/$t/." "$work/corpus/"
  start=$(date +%s)
  rc=0
  TMPDIR="$work/tmp" "$bin/$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=30 \
    -rss_limit_mb=2048 -artifact_prefix="$work/artifacts/" "$work/corpus" \
    >"$work/log" 2>&1 || rc=$?
  elapsed=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::average_exec_per_sec:[[:space:]]*//p' "$work/log" | tail -n 1)
  units=$(sed -n 's/^stat::new_units_added:[[:space:]]*//p' "$work/log" | tail -n 1)
  cov=$(grep -o ' cov: [0-9]*' "$work/log" | tail -n 1 | grep -o '[0-9]*' || true)
  artifact=$(find "$work/artifacts" -type f | sort | head -n 1)
  crash=0
  if [ "$rc" -ne 0 ] || [ -n "$artifact" ]; then
    found=1
    crash="${artifact:-exit $rc, see $work/log}"
    {
      echo "run.sh: $t failed (exit $rc); the end of $work/log:"
      tail -n 60 "$work/log" | sed 's/^/  | /'
      if [ -n "$artifact" ]; then
        echo "run.sh: reproduce with: $bin/$t $artifact"
      fi
    } >&2
  fi
  printf '%-18s %8s %10s %8s %10s %s\n' "$t" "$elapsed" "${execs:-?}" "${cov:-?}" "${units:-?}" \
    "$crash"
done

if [ "$found" -ne 0 ]; then
  echo "run.sh: a target failed; logs and reproducers are in $scratch" >&2
  exit 1
fi
rm -rf "$scratch"
