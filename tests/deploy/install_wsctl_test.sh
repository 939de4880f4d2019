#!/usr/bin/env bash
# wsctl installed on its own: install.sh's wsctl component into a fresh
# prefix puts bin/wsctl there and nothing else; the installed copy says
# the release's version and talks to the real server over its unix socket
# (the providers, then a memory workspace's file written and read back).
#
# usage: install_wsctl_test.sh INSTALL SERVER VERSION
set -euo pipefail

install_sh=$(realpath "$1")
server=$(realpath "$2")
version=$(tr -d '[:space:]' <"$3")
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/install.XXXXXX")
# Workspace uids (on when the server runs as root) must search every
# directory above the state directory.
chmod 0711 "$tmp"
pid=
cleanup() {
  if [ -n "$pid" ]; then
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "install_wsctl_test: FAILED: $*" >&2
  [ -f "$tmp/server.log" ] && tail -20 "$tmp/server.log" >&2
  exit 1
}

prefix=$tmp/prefix
"$install_sh" --prefix "$prefix" --component wsctl || fail "install.sh --component wsctl"
wsctl=$prefix/bin/wsctl
[ -x "$wsctl" ] || fail "bin/wsctl was not installed"
[ "$(cd "$prefix" && find . -type f)" = ./bin/wsctl ] ||
  fail "the wsctl component installed more: $(cd "$prefix" && find . -type f)"
[ "$("$wsctl" --version)" = "wsctl $version" ] || fail "wsctl --version: $("$wsctl" --version)"

sock=$tmp/ws.sock
"$server" --listen "unix:$sock" --state-dir "$tmp/state" >"$tmp/server.log" 2>&1 &
pid=$!
up=0
for _ in $(seq 1 300); do
  if grep -q "workspaced listening on unix:$sock" "$tmp/server.log"; then
    up=1
    break
  fi
  kill -0 "$pid" 2>/dev/null || fail "the server exited"
  sleep 0.1
done
[ "$up" = 1 ] || fail "the server did not listen"

export WORKSPACED_ADDR="unix:$sock"
unset WORKSPACED_TOKEN
providers=$("$wsctl" providers) || fail "wsctl providers"
grep -Eq '^memory +available' <<<"$providers" || fail "providers: $providers"
ws=$("$wsctl" open --provider memory | awk '{print $1}') || fail "wsctl open"
[ -n "$ws" ] || fail "open printed no id"
printf 'installed\n' >"$tmp/hello.txt"
"$wsctl" put "$ws" hello.txt "$tmp/hello.txt" >/dev/null || fail "wsctl put"
[ "$("$wsctl" cat "$ws" hello.txt)" = installed ] || fail "wsctl cat"
"$wsctl" close "$ws" >/dev/null || fail "wsctl close"

kill -TERM "$pid"
st=0
wait "$pid" || st=$?
pid=
[ "$st" = 0 ] || fail "the server exited $st on SIGTERM"
echo "install_wsctl_test: PASSED"
