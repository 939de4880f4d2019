#!/usr/bin/env bash
# The C++ client as a user outside the repository gets it: install.sh's
# client component into a fresh prefix, then clients/cpp/examples/
# agent_loop.cc, copied out, built by plain g++ with nothing but
# `pkg-config --cflags --libs workspaced`, and run against the real server
# over its unix socket. Also: workspaced.pc's Version is VERSION, the
# component installs nothing else, and DESTDIR stages without changing the
# prefix the .pc names.
#
# usage: install_client_test.sh INSTALL SERVER WSCTL VERSION AGENT_LOOP_CC
set -euo pipefail

install_sh=$(realpath "$1")
server=$(realpath "$2")
wsctl=$(realpath "$3")
version=$(tr -d '[:space:]' <"$4")
example=$(realpath "$5")
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
  echo "install_client_test: FAILED: $*" >&2
  [ -f "$tmp/server.log" ] && tail -20 "$tmp/server.log" >&2
  exit 1
}

prefix=$tmp/prefix
"$install_sh" --prefix "$prefix" --component client || fail "install.sh --component client"
for f in include/workspaced.h include/workspaced_version.h include/workspace/v1/common.pb.h \
  include/workspace/v1/exec.grpc.pb.h lib/libworkspaced.a lib/pkgconfig/workspaced.pc; do
  [ -f "$prefix/$f" ] || fail "$f was not installed"
done
[ ! -e "$prefix/bin" ] || fail "the client component installed $(ls "$prefix/bin")"

# The version, as pkg-config and the .pc file itself say it.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[ "$(sed -n 's/^Version: //p' "$prefix/lib/pkgconfig/workspaced.pc")" = "$version" ] ||
  fail "workspaced.pc Version is not $version: $(cat "$prefix/lib/pkgconfig/workspaced.pc")"
[ "$(pkg-config --modversion workspaced)" = "$version" ] || fail "pkg-config --modversion"
grep -q "WORKSPACED_VERSION \"$version\"" "$prefix/include/workspaced_version.h" ||
  fail "workspaced_version.h: $(cat "$prefix/include/workspaced_version.h")"

# A packager's staged install names the final prefix.
DESTDIR=$tmp/stage "$install_sh" --prefix /usr --component client >/dev/null 2>&1 ||
  fail "DESTDIR install"
grep -qx "prefix=/usr" "$tmp/stage/usr/lib/pkgconfig/workspaced.pc" || fail "DESTDIR: prefix"

# The example, out of the repository, built as the README says. The
# sanitized suite's library needs the sanitizers' runtime linked in.
mkdir "$tmp/src"
cp "$example" "$tmp/src/agent_loop.cc"
extra=()
if [ "${WORKSPACED_SANITIZED:-}" = 1 ]; then
  extra=(-fsanitize=address,undefined)
fi
(
  cd "$tmp/src"
  # shellcheck disable=SC2046 # pkg-config's words are meant to split
  g++ -std=c++17 agent_loop.cc $(pkg-config --cflags --libs workspaced) "${extra[@]}" -o agent_loop
) || fail "g++ agent_loop.cc \$(pkg-config --cflags --libs workspaced)"

# The real server on a unix socket, with the default policy (no local-bash).
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

"$tmp/src/agent_loop" "unix:$sock" >"$tmp/out" 2>&1 || fail "agent_loop: $(cat "$tmp/out")"
out=$(cat "$tmp/out")
echo "$out"
grep -qx "workspaced C++ client $version" <<<"$out" || fail "no version line"
grep -qx "closed" <<<"$out" || fail "not closed"
# The provider the example chose is the one the server offers: commands
# only in local-sandbox, else files only in memory.
if WORKSPACED_ADDR="unix:$sock" "$wsctl" providers | grep -Eq '^local-sandbox +available'; then
  grep -Eq '^opened ws_[0-9a-f]+ on local-sandbox$' <<<"$out" || fail "not on local-sandbox"
  grep -Eq '^labelled app=agent-loop: 1 workspace\(s\), idle timeout 120 s$' <<<"$out" ||
    fail "the labels and lifetime line"
  # The command's output, then the length of the secret it named (never
  # its value).
  [ "$(sed -n '/^labelled /,/^exit /p' <<<"$out" | sed '1d;$d' | sed '$s/[0-9][0-9]*/N/')" = \
    $'write tests\nship it\ntoken: N bytes' ] || fail "the command's output"
  grep -Eq '^exit 0 after [0-9]+ ms$' <<<"$out" || fail "exit line"
  grep -qx "lines: 2" <<<"$out" || fail "the file the command wrote"
else
  grep -Eq '^opened ws_[0-9a-f]+ on memory$' <<<"$out" || fail "not on memory"
  grep -qx "local-sandbox is not available here: files only" <<<"$out" || fail "files only"
fi

kill -TERM "$pid"
st=0
wait "$pid" || st=$?
pid=
[ "$st" = 0 ] || fail "the server exited $st on SIGTERM"
echo "install_client_test: PASSED"
