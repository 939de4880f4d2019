#!/usr/bin/env bash
# The project's mechanical style rules, checked on every tracked file (run
# by tests/run.sh before the build, and by hand: bash tests/style/check.sh):
#  - every C and C++ file is formatted by clang-format with .clang-format;
#  - the server and wsctl call none of strcpy, strcat, sprintf, vsprintf,
#    gets: each writes without a bound (snprintf, memcpy with a checked
#    length, or the fs helpers instead);
#  - the RPC layer and the registry never name a provider: what differs
#    between providers is in their ops tables (server/providers/);
#  - clocks, element counts and EINTR retries go through server/base.
# Exits 1 naming each file and line that breaks a rule.
set -uo pipefail
cd "$(dirname "$0")/../.."

command -v clang-format >/dev/null || {
  echo "style: clang-format is missing (Debian package clang-format, which bazel/setup.sh installs)" >&2
  exit 1
}
status=0
mapfile -t sources < <(git ls-files '*.c' '*.h' '*.cc' | grep -v '^bazel/local/')
if [ "${#sources[@]}" -eq 0 ]; then
  echo "style: no C or C++ files found (not a git checkout?)" >&2
  exit 1
fi
for f in "${sources[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "style: $f is not clang-formatted (clang-format -i $f)" >&2
    status=1
  fi
done
# A call is the name followed by '(' (comments saying "gets a" do not match).
if git grep -nE '(^|[^A-Za-z0-9_])(strcpy|strcat|sprintf|vsprintf|gets)[[:space:]]*\(' \
     -- 'server/*.c' 'server/*.h' 'clients/cli/*.c' 'clients/cli/*.h' >&2; then
  echo "style: unbounded string calls above (use snprintf, or memcpy with a checked length)" >&2
  status=1
fi
if git grep -nE 'WS_PROVIDER_[A-Z]|[Dd]ocker|[Ss]andbox' -- 'server/rpc/*' >&2; then
  echo "style: the RPC layer names a provider above (add an entry to struct ws_provider_ops)" >&2
  status=1
fi
if git grep -nE 'WS_PROVIDER_(MEMORY|LOCAL_BASH|LOCAL_SANDBOX|DOCKER)|switch \(p->kind\)' \
     -- 'server/registry/*' >&2; then
  echo "style: the registry names a provider kind above (use its ops table)" >&2
  status=1
fi
# The two clock reads left outside base/time.h: /proc's stat ticks count
# from boot (tree.c), and fs.c's entropy fallback mixes in the time.
if git grep -n 'clock_gettime' -- 'server/*' ':!server/base/time.h' |
     grep -v 'server/posix/tree.c:.*CLOCK_BOOTTIME\|server/posix/fs.c:' >&2; then
  echo "style: a clock read above (use ws_mono_* for durations, ws_wall_* for timestamps)" >&2
  status=1
fi
if git grep -nE 'sizeof\(([A-Za-z_][A-Za-z0-9_]*)\) / sizeof\(\1\[0\]\)' -- 'server/*' >&2; then
  echo "style: an element count above (use WS_ELEMENTSOF)" >&2
  status=1
fi
[ "$status" -eq 0 ] && echo "style: ${#sources[@]} files formatted, no unbounded string calls, provider names only in server/providers, one clock"
exit "$status"
