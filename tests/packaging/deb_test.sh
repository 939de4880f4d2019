#!/usr/bin/env bash
# The server's Debian package (packaging/deb/build.sh), end to end on this
# machine: built from this build's binaries; its metadata and contents
# checked (every file, the version, Depends covering every shared library
# the binaries load); installed with apt-get, which resolves the
# dependencies from Debian; the installed server started by systemd where
# systemd runs, else as the installed unit would start it (its
# ExecStartPre= and ExecStart= lines, runtime directory, capability bounding
# set, umask, no_new_privs); the installed wsctl used against it as root
# (a memory workspace, a local-sandbox one, which needs the sandbox init
# next to the server, and one in agent mode, which needs the agent), and
# the socket reached by a member of the group workspaced; then stopped and
# purged, after which nothing of the package may be left: no process,
# user, group, file, directory or socket.
#
# The package's paths are the ones a developer's own server uses by default
# (bazel/serve.sh: /var/lib/workspaced, /run/workspaced): the test refuses
# to start, naming what is there, rather than take them over. Whatever
# happens, it stops what it started and purges what it installed.
#
# usage: deb_test.sh (from Bazel: the runfiles hold the inputs at their
# repository paths)
# shellcheck disable=SC2015 # "A && B || fail": fail exits, so C never runs after B
set -euo pipefail

tree=${TEST_SRCDIR:?}/${TEST_WORKSPACE:?}
version=$(tr -d '[:space:]' <"$tree/VERSION")
unit=/lib/systemd/system/workspaced.service
conf=/etc/workspaced/workspaced.conf
sock=/run/workspaced/workspaced.sock
lib=/usr/lib/workspaced
helpers=(workspaced-sandbox-init workspaced-docker-init workspaced-docker-relay workspaced-agent)
apt=(apt-get -y -q -o DPkg::Lock::Timeout=120)
export DEBIAN_FRONTEND=noninteractive

tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/deb.XXXXXX")
owned=0
pid=
systemd=0
[ -d /run/systemd/system ] && systemd=1

fail() {
  echo "deb_test: FAILED: $*" >&2
  if [ -f "$tmp/log" ]; then
    echo "--- server log" >&2
    tail -30 "$tmp/log" >&2
  fi
  if [ "$systemd" = 1 ] && [ "$owned" = 1 ]; then
    journalctl -u workspaced --no-pager -n 30 >&2 || true
  fi
  exit 1
}

installed() {
  dpkg-query -W -f='${db:Status-Status}' workspaced 2>/dev/null | grep -qv '^not-installed$'
}

cleanup() {
  local st=$?
  if [ "$owned" = 1 ]; then
    if [ -n "$pid" ]; then
      kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
    if [ "$systemd" = 1 ]; then
      systemctl stop workspaced.service >/dev/null 2>&1 || true
    fi
    if installed; then
      dpkg --purge workspaced >/dev/null 2>&1 ||
        echo "deb_test: cleanup: dpkg --purge workspaced failed" >&2
    fi
    # None of these existed before the test (checked below): whatever a
    # failed purge left goes, so the next run starts clean.
    rm -rf /etc/workspaced /var/lib/workspaced /run/workspaced "$lib"
    getent passwd workspaced >/dev/null && userdel workspaced 2>/dev/null
    getent group workspaced >/dev/null && groupdel workspaced 2>/dev/null
  fi
  rm -rf "$tmp"
  exit "$st"
}
trap cleanup EXIT

# ---- preconditions: root, the tools, and none of the package's paths in
# use.
[ "$(id -u)" = 0 ] || fail "installs a package: must run as root, not uid $(id -u)"
for tool in dpkg-deb dpkg-shlibdeps apt-get setpriv runuser systemd-analyze readelf; do
  command -v "$tool" >/dev/null ||
    fail "$tool is missing (Debian packages dpkg-dev, util-linux, systemd, binutils: bazel/setup.sh)"
done
installed && fail "the package workspaced is installed here already: this test installs and purges it" \
  "(apt-get purge workspaced first)"
for p in /etc/workspaced /var/lib/workspaced /run/workspaced "$lib" /usr/sbin/workspaced \
  /usr/bin/wsctl "$unit"; do
  [ -e "$p" ] || [ -L "$p" ] || continue
  fail "$p exists: this test installs the package, whose paths it is (a server run by" \
    "bazel/serve.sh uses /var/lib/workspaced and /run/workspaced too); remove it first"
done
for db in passwd group; do
  ! getent "$db" workspaced >/dev/null ||
    fail "the $db entry workspaced exists: the package makes it and its purge removes it"
done
owned=1

# ---- the package.
WORKSPACED_DEB_TREE=$tree bash "$tree/packaging/deb/build.sh" "$tmp/out" >"$tmp/build.out" 2>&1 ||
  fail "build.sh: $(cat "$tmp/build.out")"
arch=$(dpkg --print-architecture)
deb=$tmp/out/workspaced_${version}_${arch}.deb
[ -f "$deb" ] || fail "build.sh made $(ls "$tmp/out"), not $(basename "$deb")"
[ "$(tail -1 "$tmp/build.out")" = "$deb" ] || fail "build.sh did not print the package's path"

field() {
  dpkg-deb --field "$deb" "$1"
}
[ "$(field Package)" = workspaced ] || fail "Package: $(field Package)"
[ "$(field Version)" = "$version" ] || fail "Version: $(field Version), VERSION says $version"
[ "$(field Architecture)" = "$arch" ] || fail "Architecture: $(field Architecture)"
[ -n "$(field Maintainer)" ] && [ -n "$(field Description)" ] || fail "no Maintainer or Description"
[ "$(field Installed-Size)" -gt 0 ] || fail "Installed-Size: $(field Installed-Size)"
depends=", $(field Depends),"
[[ "$depends" == *", adduser,"* ]] || fail "Depends: lacks adduser (the postinst uses it): $depends"
# The package that holds a library: dpkg knows it by the path it shipped,
# which merged /usr may show under /lib or /usr/lib.
owner() {
  local real c
  real=$(realpath "$1")
  for c in "$1" "$real" "${1#/usr}" "/usr${1#/usr}" "${real#/usr}" "/usr${real#/usr}"; do
    dpkg -S "$c" 2>/dev/null | head -1 | cut -d: -f1 && return 0
  done
  return 0
}
# Every shared library the binaries load is some Debian package's: that
# package must be in Depends (with the version dpkg-shlibdeps found, when
# the library's package declares one).
for b in "$tree/server/workspaced" "$tree/clients/cli/wsctl"; do
  for so in $(LC_ALL=C readelf -d "$b" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    path=$(ldd "$b" | awk -v so="$so" '$1 == so { print $3 } $1 ~ "/" so "$" { print $1 }')
    [ -n "$path" ] || fail "$so, which $(basename "$b") loads, is not found here"
    pkg=$(owner "$path")
    [ -n "$pkg" ] || fail "no Debian package holds $path ($so)"
    [[ "$depends" == *" $pkg (>= "* || "$depends" == *" $pkg,"* ]] ||
      fail "Depends: lacks $pkg, which holds $so: $depends"
  done
done

# The files, with their modes and owners.
dpkg-deb --contents "$deb" >"$tmp/contents"
has() { # MODE PATH [-> TARGET]
  awk -v m="$1" -v p="./$2" -v t="${3:-}" '
    $1 == m && $2 == "root/root" && $6 == p && (t == "" || ($7 == "->" && $8 == t)) { ok = 1 }
    END { exit !ok }' "$tmp/contents" || fail "the package lacks $1 root/root $2 ${3:+-> $3}:
$(cat "$tmp/contents")"
}
has -rwxr-xr-x "usr/lib/workspaced/workspaced"
for h in "${helpers[@]}"; do
  has -rwxr-xr-x "usr/lib/workspaced/$h"
done
has lrwxrwxrwx usr/sbin/workspaced ../lib/workspaced/workspaced
has -rwxr-xr-x usr/bin/wsctl
has -rw-r--r-- lib/systemd/system/workspaced.service
has -rw-r--r-- etc/workspaced/workspaced.conf
has -rw-r--r-- usr/share/doc/workspaced/copyright
has -rw-r--r-- usr/share/doc/workspaced/changelog.gz
protoset=$tree/proto/workspace.protoset
[ -f "$protoset" ] || fail "$protoset (//proto:workspace_protoset) is not in the runfiles"
has -rw-r--r-- usr/share/workspaced/workspace.protoset
# Nothing else: every file is one of the above.
expected=$((8 + ${#helpers[@]}))
files=$(grep -vc '^d' "$tmp/contents")
[ "$files" = "$expected" ] || fail "$files files in the package, $expected expected:
$(cat "$tmp/contents")"
[ "$(dpkg-deb --info "$deb" conffiles)" = /etc/workspaced/workspaced.conf ] ||
  fail "conffiles: $(dpkg-deb --info "$deb" conffiles)"
for s in postinst prerm postrm; do
  dpkg-deb --info "$deb" "$s" >/dev/null || fail "no $s"
done
# The files' contents are this tree's.
dpkg-deb -x "$deb" "$tmp/x"
cmp -s "$tmp/x/usr/share/doc/workspaced/copyright" "$tree/LICENSE" || fail "copyright is not LICENSE"
zcat "$tmp/x/usr/share/doc/workspaced/changelog.gz" | cmp -s - "$tree/CHANGELOG.md" ||
  fail "changelog.gz is not CHANGELOG.md"
cmp -s "$tmp/x/etc/workspaced/workspaced.conf" "$tree/server/deploy/workspaced.conf.example" ||
  fail "workspaced.conf is not the example configuration"
cmp -s "$tmp/x/usr/share/workspaced/workspace.protoset" "$protoset" ||
  fail "workspace.protoset is not //proto:workspace_protoset's"
"$tmp/x/usr/lib/workspaced/workspaced" --version | grep -qx "workspaced $version" ||
  fail "the packaged server is not version $version"
! grep -n /usr/local "$tmp/x$unit" >&2 || fail "the packaged unit names /usr/local (above)"

# ---- install: the dependencies come from Debian's archive.
(cd "$tmp/out" && "${apt[@]}" install "./$(basename "$deb")") >"$tmp/apt.out" 2>&1 ||
  fail "apt-get install: $(tail -20 "$tmp/apt.out")"
[ "$(dpkg-query -W -f='${db:Status-Abbrev}${Version}' workspaced)" = "ii $version" ] ||
  fail "after install: $(dpkg-query -W -f='${db:Status-Abbrev}${Version}' workspaced)"
dpkg --verify workspaced >"$tmp/verify" 2>&1 || fail "dpkg --verify: $(cat "$tmp/verify")"
[ ! -s "$tmp/verify" ] || fail "dpkg --verify: $(cat "$tmp/verify")"
uid=$(getent passwd workspaced | cut -d: -f3)
gid=$(getent group workspaced | cut -d: -f3)
[ -n "$uid" ] && [ -n "$gid" ] || fail "the postinst made no user or group workspaced"
[ "$uid" -lt 1000 ] || fail "the user workspaced is not a system user (uid $uid)"
[ "$(getent passwd workspaced | cut -d: -f4)" = "$gid" ] || fail "the user's group is not workspaced"
[ "$(stat -c '%a %U %G' /var/lib/workspaced)" = "711 root root" ] ||
  fail "/var/lib/workspaced is $(stat -c '%a %U %G' /var/lib/workspaced)"
[ "$(readlink -f /usr/sbin/workspaced)" = "$lib/workspaced" ] || fail "/usr/sbin/workspaced"
/usr/sbin/workspaced --check-config "$conf" >"$tmp/check" 2>&1 || fail "$(cat "$tmp/check")"
[ "$(/usr/bin/wsctl --version)" = "wsctl $version" ] || fail "wsctl --version: $(/usr/bin/wsctl --version)"
# systemd's verdict on the installed unit, now that its binary exists.
systemd-analyze verify --man=no "$unit" >"$tmp/analyze" 2>&1 && [ ! -s "$tmp/analyze" ] ||
  fail "systemd-analyze verify $unit: $(cat "$tmp/analyze")"
# Enabled at install (deb-systemd-helper), even where systemd does not run.
[ -L /etc/systemd/system/multi-user.target.wants/workspaced.service ] ||
  fail "the unit is not enabled"

# ---- start.
values() { # every active KEY= line's value of the installed unit
  sed -n "s/^$1=//p" "$unit"
}
if [ "$systemd" = 1 ]; then
  systemctl start workspaced.service || fail "systemctl start workspaced"
  systemctl is-active --quiet workspaced.service || fail "the unit is not active"
else
  # As the unit starts it: its runtime directory, each ExecStartPre= ('+'
  # runs outside the sandbox, which is not made here), then ExecStart=
  # within the bounding set, with no_new_privs, the umask and a bare
  # environment.
  bounding=-all
  for c in $(values CapabilityBoundingSet); do
    bounding="$bounding,+$(tr '[:upper:]' '[:lower:]' <<<"${c#CAP_}")"
  done
  umask_value=$(values UMask)
  [ "$bounding" != -all ] && [ -n "$umask_value" ] || fail "no CapabilityBoundingSet= or UMask="
  [ "$(values NoNewPrivileges)" = yes ] || fail "NoNewPrivileges= is not yes"
  [ "$(values StateDirectory)" = workspaced ] || fail "StateDirectory= is not workspaced"
  chmod "$(values StateDirectoryMode)" /var/lib/workspaced
  [ "$(values RuntimeDirectory)" = workspaced ] || fail "RuntimeDirectory= is not workspaced"
  install -d -m "$(values RuntimeDirectoryMode)" /run/workspaced
  while read -r pre; do
    # Prefixes: '-' ignores a failure; '+' (no sandbox here anyway) and the
    # others change nothing for this start.
    prefix=${pre%%[!-+@:!]*}
    pre=${pre#"$prefix"}
    # shellcheck disable=SC2086 # the unit's words, unquoted as systemd splits them
    if ! env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin $pre >"$tmp/pre" 2>&1 && [[ "$prefix" != *-* ]]; then
      fail "ExecStartPre=$prefix$pre: $(cat "$tmp/pre")"
    fi
  done < <(values ExecStartPre)
  start=$(values ExecStart)
  [ -n "$start" ] || fail "no ExecStart="
  oom=$(values OOMScoreAdjust)
  (
    umask "$umask_value"
    # Lowering it takes CAP_SYS_RESOURCE, which a test environment may lack.
    echo "$oom" 2>/dev/null >/proc/self/oom_score_adj || true
    # shellcheck disable=SC2086
    exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
      setpriv --bounding-set="$bounding" --inh-caps=-all --no-new-privs -- $start
  ) >"$tmp/log" 2>&1 &
  pid=$!
fi
up=0
for _ in $(seq 1 600); do
  if [ -S "$sock" ] && /usr/bin/wsctl providers >"$tmp/providers" 2>&1; then
    up=1
    break
  fi
  if [ -n "$pid" ]; then
    kill -0 "$pid" 2>/dev/null || fail "the server exited"
  elif ! systemctl is-active --quiet workspaced.service; then
    fail "the unit stopped"
  fi
  sleep 0.1
done
[ "$up" = 1 ] || fail "no answer on $sock: $(cat "$tmp/providers")"

# ---- the installed wsctl, as root, on the package's default address.
unset WORKSPACED_ADDR WORKSPACED_TOKEN WORKSPACED_NODE
wsc() {
  /usr/bin/wsctl "$@" 2>"$tmp/err" || fail "wsctl $*: $(cat "$tmp/err")"
}
providers=$(wsc providers)
for p in memory local-sandbox; do
  grep -Eq "^$p +available" <<<"$providers" || fail "$p is not available: $providers"
done
ws=$(wsc open --provider memory)
ws=${ws%% *}
[ -n "$ws" ] || fail "open memory"
printf 'packaged\n' >"$tmp/in.txt"
wsc put "$ws" notes/in.txt "$tmp/in.txt" -p >/dev/null
[ "$(wsc cat "$ws" notes/in.txt)" = packaged ] || fail "the memory workspace's file"
wsc close "$ws" >/dev/null
# local-sandbox: bubblewrap runs the sandbox init the server found next to
# itself in /usr/lib/workspaced; in agent mode the agent is the box's pid 1.
ws=$(wsc open --provider local-sandbox --allow cat,sh)
ws=${ws%% *}
wsc put "$ws" in.txt "$tmp/in.txt" >/dev/null
[ "$(wsc exec "$ws" -- sh -c 'cat in.txt; echo boxed >out.txt')" = packaged ] ||
  fail "the sandboxed command cannot read the workspace"
[ "$(wsc cat "$ws" out.txt)" = boxed ] || fail "the sandboxed command's file"
wsc close "$ws" >/dev/null
ws=$(wsc open --provider local-sandbox --exec-mode agent --allow cat)
ws=${ws%% *}
pid1=$(wsc exec "$ws" -- cat /proc/1/cmdline | tr '\0' ' ')
[[ "$pid1" == "/.workspaced-agent "* ]] || fail "the box's pid 1 is not the agent: $pid1"
wsc close "$ws" >/dev/null

# The socket: 0660, group workspaced, in a directory that group can search.
[ "$(stat -c '%a %G' "$sock")" = "660 workspaced" ] || fail "$sock is $(stat -c '%a %G' "$sock")"
# A caller in the group reaches the server, which refuses the uid that no
# [peers] line maps; the same caller outside the group cannot connect.
nobody() { # GID: wsctl as uid 65534 with that group alone, its output in $tmp/nobody
  ! setpriv --reuid=65534 --regid="$1" --clear-groups -- /usr/bin/wsctl providers \
    >"$tmp/nobody" 2>&1 || fail "uid 65534 (gid $1), which [peers] does not map, was served"
}
nobody "$gid"
grep -Eqi 'permission.denied|unauthenticated' "$tmp/nobody" && ! grep -qi unavailable "$tmp/nobody" ||
  fail "a member of the group workspaced did not reach the server: $(cat "$tmp/nobody")"
nobody 65534
grep -qi unavailable "$tmp/nobody" ||
  fail "a caller outside the group workspaced got further than the socket: $(cat "$tmp/nobody")"

# ---- stop.
if [ "$systemd" = 1 ]; then
  systemctl stop workspaced.service || fail "systemctl stop workspaced"
else
  kill -TERM "$pid"
  st=0
  wait "$pid" || st=$?
  pid=
  [ "$st" = 0 ] || fail "the server's exit status after SIGTERM: $st"
  # systemd removes the RuntimeDirectory= at stop.
  rm -rf /run/workspaced
fi

# ---- purge: nothing of the package is left.
"${apt[@]}" purge workspaced >"$tmp/apt.out" 2>&1 || fail "apt-get purge: $(tail -20 "$tmp/apt.out")"
! installed || fail "after purge: $(dpkg-query -W -f='${db:Status-Abbrev}' workspaced)"
for p in /etc/workspaced /var/lib/workspaced /run/workspaced "$lib" /usr/sbin/workspaced \
  /usr/bin/wsctl "$unit" /usr/share/doc/workspaced /usr/share/workspaced \
  /etc/systemd/system/multi-user.target.wants/workspaced.service \
  /var/lib/systemd/deb-systemd-helper-enabled/workspaced.service.dsh-also \
  /var/lib/systemd/deb-systemd-helper-masked/workspaced.service; do
  if [ -e "$p" ] || [ -L "$p" ]; then
    fail "$p is left after purge"
  fi
done
for db in passwd group; do
  ! getent "$db" workspaced >/dev/null || fail "the $db entry workspaced is left after purge"
done
left=
for exe in /proc/[0-9]*/exe; do
  target=$(readlink "$exe" 2>/dev/null) || continue
  [[ "$target" == "$lib/"* ]] && left="$left ${exe#/proc/}"
done
[ -z "$left" ] || fail "processes of the package are left after purge:$left"
! pgrep -u "$uid" >/dev/null || fail "processes of uid $uid (workspaced) are left after purge"
owned=0
echo "deb_test: PASSED"
