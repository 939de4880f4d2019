#!/usr/bin/env bash
# Lists every test that skipped itself in the test logs of the last
# `bazel test`, with the reason it gave, so a skip is seen in the suite's
# output and never passes for a run:
#
#   SKIPPED //tests/unit/seccomp:seccomp_test Seccomp.KernelI386Refused: no i386 ...
#
# Usage: skips.sh TESTLOGS_DIR [STAMP]: bazel-testlogs after the phase; with
# STAMP, only logs written after that file (a log left from an earlier run of
# a test that did not run this time says nothing about this run).
# Reads googletest's, Python unittest's (-v) and TAP's (node --test) skip lines.
set -uo pipefail

dir=${1:?usage: skips.sh TESTLOGS_DIR [STAMP]}
newer=()
[ -n "${2:-}" ] && newer=(-newer "$2")
[ -d "$dir" ] || exit 0
dir=$(cd -P "$dir" && pwd)

find "$dir" -name test.log "${newer[@]}" -print0 | sort -z | while IFS= read -r -d '' log; do
  rel=${log#"$dir"/}
  rel=${rel%/test.log}
  target="//${rel%/*}:${rel##*/}"
  awk -v target="$target" '
    # googletest: "file:line: Skipped", the reason on the following lines,
    # then "[  SKIPPED ] Suite.Name (N ms)".
    /: Skipped$/ { reason = ""; inskip = 1; next }
    /^\[  SKIPPED \] [^ ]+ \(/ {
      printf "SKIPPED %s %s: %s\n", target, $4, (reason == "" ? "(no reason given)" : reason)
      reason = ""; inskip = 0; next
    }
    /^\[ *(RUN|OK|FAILED) *\]/ { inskip = 0 }
    inskip { reason = (reason == "" ? $0 : reason " " $0); next }
    # Python unittest -v: "test_x (mod.Class.test_x) ... skipped '"'"'why'"'"'"
    / \.\.\. skipped / {
      name = $1; sub(/^[^ ]+ \(/, "", $0); why = $0
      sub(/^.* \.\.\. skipped /, "", why)
      printf "SKIPPED %s %s: %s\n", target, name, why; next
    }
    # TAP: "ok N - name # SKIP why"
    /^ *ok [0-9]+ .*# SKIP/ {
      line = $0; sub(/^ *ok [0-9]+ (- )?/, "", line)
      why = line; sub(/^.*# SKIP */, "", why); sub(/ *# SKIP.*$/, "", line)
      printf "SKIPPED %s %s: %s\n", target, line, (why == "" ? "(no reason given)" : why)
    }
  ' "$log"
done
