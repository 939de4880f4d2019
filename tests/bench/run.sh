#!/usr/bin/env bash
# Builds workspaced and the FileSystem benchmark with -c opt, then runs the
# benchmark against that server binary (see tests/bench/README.md).
#
#   bash tests/bench/run.sh [--quick] [fs_bench options...]
#
# --quick is a smoke run (a few seconds): fewer iterations, a 32 MiB stream,
# a 1,000-file grep tree. Any other argument goes to fs_bench (--help lists
# them). BENCH_OUTPUT_BASE=DIR builds in a private Bazel output base.
set -euo pipefail
cd "$(dirname "$0")/../.."

bazel_cmd=(bazel)
if [[ -n "${BENCH_OUTPUT_BASE:-}" ]]; then
    bazel_cmd+=("--output_base=$BENCH_OUTPUT_BASE")
fi

args=()
for a in "$@"; do
    if [[ "$a" == --quick ]]; then
        args+=(--iters 200 --warmup 20 --big-mib 32 --big-runs 1
               --grep-dirs 20 --grep-files 50 --grep-runs 1)
    else
        args+=("$a")
    fi
done

# No convenience symlinks: an opt build must not repoint bazel-bin under
# someone's feet; the binaries are found through `bazel info` instead.
"${bazel_cmd[@]}" build -c opt --symlink_prefix=/ //tests/bench:fs_bench //server:workspaced
bin="$("${bazel_cmd[@]}" info -c opt bazel-bin)"
exec "$bin/tests/bench/fs_bench" --server "$bin/server/workspaced" "${args[@]}"
