#!/usr/bin/env bash
# Builds workspaced and a benchmark with -c opt, then runs the benchmark
# against that server binary (see tests/bench/README.md).
#
#   bash tests/bench/run.sh [fs] [--quick] [fs_bench options...]
#   bash tests/bench/run.sh exec [--quick] [exec_bench options...]
#   bash tests/bench/run.sh sandbox [--quick] [sandbox_bench options...]
#   bash tests/bench/run.sh docker [--quick] [docker_bench options...]
#   bash tests/bench/run.sh auth [--quick] [auth_bench options...]
#   bash tests/bench/run.sh tree [--quick] [tree_bench options...]
#   bash tests/bench/run.sh all [--quick]
#
# The first argument picks the benchmark: `fs` (the default, so a plain
# `run.sh` runs the FileSystem benchmark as before), `exec` (the Exec
# benchmark), `sandbox` (local-sandbox against direct bwrap and local-bash),
# `docker` (the docker provider against the Engine API called directly and
# against dockerode), `auth` (TLS + tokens against plaintext, 1,000
# workspaces over 10 tenants, one tenant's latency while another abuses
# the server) or `all` (fs_bench, exec_bench, sandbox_bench, docker_bench,
# then auth_bench, each with its own servers; only --quick is accepted
# then).
# --quick is a smoke run:
#   fs:      fewer iterations, a 32 MiB stream, a 1,000-file grep tree;
#   exec:    200 Runs (20 after an idle pause), a 64 MiB stream, 20
#            concurrent Runs;
#   sandbox: 100 Runs of each side, a 64 MiB stream of each side;
#   docker:  5 Opens, 20 Runs and one 16 MiB stream of each side;
#   auth:    200 rounds per server, 200 workspaces, 300 calls per abuse
#            phase (at most 5 s each), a 16 MiB file for the held reads.
# `docker` needs the Docker daemon and the test image (it runs
# tests/fixtures/dockerd.sh and tests/fixtures/image/build.sh, which do
# nothing when both are there) and, for its dockerode side, node and npm:
# it runs `npm ci` in tests/bench/dockerode when node_modules is missing
# (without npm that side is reported as not measured).
# Any other argument goes to the benchmark binary (--help lists them).
# BENCH_OUTPUT_BASE=DIR builds in a private Bazel output base.
set -euo pipefail
cd "$(dirname "$0")/../.."

bazel_cmd=(bazel)
if [[ -n "${BENCH_OUTPUT_BASE:-}" ]]; then
    bazel_cmd+=("--output_base=$BENCH_OUTPUT_BASE")
fi

mode=fs
case "${1:-}" in
fs | exec | sandbox | docker | auth | tree | all)
    mode="$1"
    shift
    ;;
esac

quick=0
rest=()
for a in "$@"; do
    if [[ "$a" == --quick ]]; then
        quick=1
    else
        rest+=("$a")
    fi
done
if [[ "$mode" == all && ${#rest[@]} -gt 0 ]]; then
    echo "run.sh: 'all' takes only --quick" >&2
    exit 2
fi

fs_args=()
exec_args=()
sandbox_args=()
docker_args=()
auth_args=()
tree_args=()
if [[ $quick == 1 ]]; then
    tree_args+=(--files 1000 --mib 20 --runs 1)
    fs_args+=(--iters 200 --warmup 20 --big-mib 32 --big-runs 1
              --grep-dirs 20 --grep-files 50 --grep-runs 1)
    exec_args+=(--iters 200 --warmup 20 --idle-iters 20 --stream-mib 64 --stream-runs 1
                --concurrency 20 --conc-each 10 --conc-rounds 1)
    sandbox_args+=(--iters 100 --warmup 10 --stream-mib 64 --stream-runs 1)
    docker_args+=(--opens 5 --open-warmup 1 --runs 20 --run-warmup 2 --run-block 10
                  --stream-mib 16 --stream-runs 1 --agent-runs 40 --agent-stream-mib 64
                  --agent-opens 2)
    auth_args+=(--iters 200 --warmup 20 --workspaces 200 --abuse-iters 300 --abuse-seconds 5
                --big-mib 16)
fi
fs_args+=("${rest[@]+"${rest[@]}"}")
exec_args+=("${rest[@]+"${rest[@]}"}")
sandbox_args+=("${rest[@]+"${rest[@]}"}")
docker_args+=("${rest[@]+"${rest[@]}"}")
auth_args+=("${rest[@]+"${rest[@]}"}")
tree_args+=("${rest[@]+"${rest[@]}"}")

targets=(//server:workspaced)
case "$mode" in
fs) targets+=(//tests/bench:fs_bench) ;;
exec) targets+=(//tests/bench:exec_bench) ;;
sandbox) targets+=(//tests/bench:sandbox_bench) ;;
docker) targets+=(//tests/bench:docker_bench) ;;
auth) targets+=(//tests/bench:auth_bench) ;;
tree) targets+=(//tests/bench:tree_bench) ;;
all)
    targets+=(//tests/bench:fs_bench //tests/bench:exec_bench //tests/bench:sandbox_bench
              //tests/bench:docker_bench //tests/bench:auth_bench)
    ;;
esac

# What docker_bench needs besides the build: the daemon, the test image,
# and dockerode's modules (pinned by the committed package-lock.json).
docker_prepare() {
    bash tests/fixtures/dockerd.sh
    bash tests/fixtures/image/build.sh
    local dir=tests/bench/dockerode
    if [[ ! -d $dir/node_modules ]]; then
        if command -v npm >/dev/null; then
            (cd "$dir" && npm ci --no-audit --no-fund)
        else
            echo "run.sh: npm not found: docker_bench runs without its dockerode side" >&2
        fi
    fi
}
docker_args=(--dockerode "$PWD/tests/bench/dockerode" "${docker_args[@]+"${docker_args[@]}"}")
if [[ $mode == docker ]]; then
    docker_prepare
elif [[ $mode == all ]] && ! docker_prepare; then
    echo "run.sh: the Docker setup failed: docker_bench will report why" >&2
fi

# No convenience symlinks: an opt build must not repoint bazel-bin under
# someone's feet; the binaries are found through `bazel info` instead.
"${bazel_cmd[@]}" build -c opt --symlink_prefix=/ "${targets[@]}"
bin="$("${bazel_cmd[@]}" info -c opt bazel-bin)"
server="$bin/server/workspaced"
case "$mode" in
fs) exec "$bin/tests/bench/fs_bench" --server "$server" "${fs_args[@]}" ;;
exec) exec "$bin/tests/bench/exec_bench" --server "$server" "${exec_args[@]}" ;;
sandbox) exec "$bin/tests/bench/sandbox_bench" --server "$server" "${sandbox_args[@]}" ;;
docker) exec "$bin/tests/bench/docker_bench" --server "$server" "${docker_args[@]}" ;;
auth) exec "$bin/tests/bench/auth_bench" --server "$server" "${auth_args[@]}" ;;
tree) exec "$bin/tests/bench/tree_bench" --server "$server" "${tree_args[@]}" ;;
all)
    rc=0
    "$bin/tests/bench/fs_bench" --server "$server" "${fs_args[@]}" || rc=1
    echo
    "$bin/tests/bench/exec_bench" --server "$server" "${exec_args[@]}" || rc=1
    echo
    "$bin/tests/bench/sandbox_bench" --server "$server" "${sandbox_args[@]}" || rc=1
    echo
    "$bin/tests/bench/docker_bench" --server "$server" "${docker_args[@]}" || rc=1
    echo
    "$bin/tests/bench/auth_bench" --server "$server" "${auth_args[@]}" || rc=1
    exit $rc
    ;;
esac
