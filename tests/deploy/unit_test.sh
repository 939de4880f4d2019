#!/usr/bin/env bash
# server/deploy/workspaced.service against the server it starts. First
# systemd's own verdict on the file. Then the real server, started as the
# unit starts it: root within the unit's capability bounding set, with
# no_new_privs, the unit's umask and oom_score_adj, workspace uids on, from
# the install layout the unit names (the sandbox init next to the server).
# Through the real wsctl, a local-bash and a local-sandbox workspace (and
# one with a network, and one in agent mode) must work with their files and
# commands as the workspace's uid: a capability
# the unit leaves out that the server needs fails here. A control start
# without CAP_KILL then shows the server's own check is in force under
# these conditions. Last, what the server relies on that no start here can show:
# Delegate's controllers, the state directory's mode, the uid lease
# directory, root.
#
# usage: unit_test.sh UNIT SERVER SANDBOX_INIT WSCTL AGENT AGENT_INIT
set -euo pipefail

unit=$1
server=$2
sandbox_init=$3
wsctl=$4
agent=$5
agent_init=$6

if [ "$(id -u)" != 0 ]; then
  echo "unit_test: SKIPPED: the unit's server runs as root; this test runs as uid $(id -u)"
  exit 0
fi

tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/unit.XXXXXX")
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
  echo "unit_test: FAILED: $*" >&2
  [ -f "$tmp/log" ] && tail -20 "$tmp/log" >&2
  exit 1
}

# wsctl, whose failure (said on stderr) fails the test.
wsc() {
  "$wsctl" "$@" 2>"$tmp/err" || fail "wsctl $*: $(cat "$tmp/err")"
}

# The values of every active KEY= line, space-separated.
values() {
  sed -n "s/^$1=//p" "$unit" | tr '\n' ' ' | sed 's/ *$//'
}

# ---- systemd's verdict, with the built server where the unit installs it:
# any word from systemd-analyze is a finding (it reports a bad value as a
# warning and still exits 0).
command -v systemd-analyze >/dev/null ||
  fail "systemd-analyze is missing (Debian package systemd, which bazel/setup.sh installs)"
mkdir "$tmp/verify"
sed "s#/usr/local/lib/workspaced/workspaced#$(realpath "$server")#g" "$unit" \
  >"$tmp/verify/workspaced.service"
if ! systemd-analyze verify --man=no "$tmp/verify/workspaced.service" >"$tmp/verify/out" 2>&1 ||
  [ -s "$tmp/verify/out" ]; then
  fail "systemd-analyze verify: $(cat "$tmp/verify/out")"
fi

# ---- the unit's conditions.
caps=$(values CapabilityBoundingSet)
[ -n "$caps" ] || fail "no CapabilityBoundingSet=: the server would keep all of root's capabilities"
bounding=-all
for c in $caps; do
  bounding="$bounding,+$(tr '[:upper:]' '[:lower:]' <<<"${c#CAP_}")"
done
umask_value=$(values UMask)
oom=$(values OOMScoreAdjust)
[ -n "$umask_value" ] && [ -n "$oom" ] || fail "UMask= or OOMScoreAdjust= is missing"
# The unit must not drop the server's no_new_privs: commands rely on it
# for what the server starts before they drop their own.
[ "$(values NoNewPrivileges)" = yes ] || fail "NoNewPrivileges= is not yes"

# The install layout: the sandbox init next to the server, in directories
# a workspace uid can search (bubblewrap, as that uid, binds the init).
chmod 0711 "$tmp"
mkdir -m 0755 "$tmp/lib"
cp "$server" "$tmp/lib/workspaced"
cp "$sandbox_init" "$tmp/lib/workspaced-sandbox-init"
cp "$agent" "$tmp/lib/workspaced-agent"
cp "$agent_init" "$tmp/lib/workspaced-docker-init"
chmod 0755 "$tmp/lib/workspaced" "$tmp/lib/workspaced-sandbox-init" "$tmp/lib/workspaced-agent" \
  "$tmp/lib/workspaced-docker-init"
mkdir -m "$(values StateDirectoryMode)" "$tmp/state"
mkdir -m "$(values RuntimeDirectoryMode)" "$tmp/run"
cat >"$tmp/workspaced.conf" <<EOF
[server]
listen = unix:$tmp/run/workspaced.sock
state-dir = $tmp/state
[uids]
mode = on
[policy]
providers = memory, local-bash, local-sandbox
network = true
EOF

# Runs the server as the unit would, with bounding set $1, in the
# background; its output goes to $tmp/log.
start_server() {
  (
    umask "$umask_value"
    # Lowering it takes CAP_SYS_RESOURCE, which systemd has and a test
    # environment may not: then the server keeps this shell's value.
    echo "$oom" 2>/dev/null >/proc/self/oom_score_adj ||
      echo "unit_test: oom_score_adj $oom not applied here" >&2
    exec setpriv --bounding-set="$1" --inh-caps=-all --no-new-privs -- \
      "$tmp/lib/workspaced" --config "$tmp/workspaced.conf"
  ) >"$tmp/log" 2>&1 &
  pid=$!
}

# ---- the unit's own set.
start_server "$bounding"
up=0
for _ in $(seq 1 300); do
  if grep -q "workspaced listening on unix:$tmp/run/workspaced.sock" "$tmp/log"; then
    up=1
    break
  fi
  kill -0 "$pid" 2>/dev/null || fail "the server exited"
  sleep 0.1
done
[ "$up" = 1 ] || fail "the server did not listen"
export WORKSPACED_ADDR="unix:$tmp/run/workspaced.sock"
unset WORKSPACED_TOKEN

providers=$(wsc providers)
grep -Eq '^local-bash +available' <<<"$providers" || fail "local-bash: $providers"
grep -Eq '^local-sandbox +available' <<<"$providers" || fail "local-sandbox: $providers"

# local-bash: the command runs as the workspace's uid, never root; files go
# both ways between the API (the server) and the command (that uid).
ws=$(wsc open --provider local-bash --allow id,sh,cat)
ws=${ws%% *}
[ -n "$ws" ] || fail "open local-bash"
uid=$(wsc exec "$ws" -- id -u)
[ -n "$uid" ] && [ "$uid" != 0 ] || fail "local-bash commands run as uid '$uid'"
printf 'from the api\n' >"$tmp/in.txt"
wsc put "$ws" in.txt "$tmp/in.txt" >/dev/null
[ "$(wsc exec "$ws" -- cat in.txt)" = "from the api" ] ||
  fail "the command cannot read a file the API wrote"
wsc exec "$ws" -- sh -c 'echo from the command >made.txt'
[ "$(wsc cat "$ws" made.txt)" = "from the command" ] ||
  fail "the server cannot read the command's private file"
# Replacing the command's file keeps its owner and sets its mode.
wsc put "$ws" made.txt "$tmp/in.txt" --mode 0600 >/dev/null
[ "$(wsc exec "$ws" -- sh -c 'cat made.txt; echo more >>made.txt; id -u')" = \
  $'from the api\n'"$uid" ] || fail "the replaced file is not the command's any more"
wsc close "$ws" >/dev/null

# local-sandbox: bubblewrap as the workspace's uid, a file in and out.
ws=$(wsc open --provider local-sandbox --allow cat,sh)
ws=${ws%% *}
[ -n "$ws" ] || fail "open local-sandbox"
wsc put "$ws" in.txt "$tmp/in.txt" >/dev/null
[ "$(wsc exec "$ws" -- sh -c 'cat in.txt; echo sandboxed >out.txt')" = "from the api" ] ||
  fail "the sandboxed command cannot read the workspace"
[ "$(wsc cat "$ws" out.txt)" = "sandboxed" ] || fail "the sandboxed command's file"
wsc close "$ws" >/dev/null

# local-sandbox with a network: the server attaches slirp4netns to the
# sandbox's network namespace with the unit's capabilities only (no
# CAP_SYS_PTRACE to open another uid's /proc/PID/ns, no CAP_SYS_ADMIN).
ws=$(wsc open --provider local-sandbox --network --allow cat)
ws=${ws%% *}
[ -n "$ws" ] || fail "open local-sandbox --network"
devs=$(wsc exec "$ws" -- cat /proc/net/dev)
grep -q "tap0:" <<<"$devs" || fail "the sandbox has no network device: $devs"
wsc close "$ws" >/dev/null

# local-sandbox in agent mode, with a network: one box as the workspace's
# uid, the agent its pid 1, two commands through it.
ws=$(wsc open --provider local-sandbox --exec-mode agent --network --allow cat,id)
ws=${ws%% *}
[ -n "$ws" ] || fail "open local-sandbox --exec-mode agent"
pid1=$(wsc exec "$ws" -- cat /proc/1/cmdline | tr '\0' ' ')
[[ "$pid1" == "/.workspaced-agent "* ]] || fail "the box's pid 1 is not the agent: $pid1"
auid=$(wsc exec "$ws" -- id -u)
[ -n "$auid" ] && [ "$auid" != 0 ] || fail "agent-mode commands run as uid '$auid'"
grep -q "tap0:" <<<"$(wsc exec "$ws" -- cat /proc/net/dev)" || fail "the box has no network"
wsc close "$ws" >/dev/null

# SIGTERM, as systemd stops it (KillSignal=): a drain and exit 0.
kill -TERM "$pid"
st=0
wait "$pid" || st=$?
pid=
[ "$st" = 0 ] || fail "exit status $st after SIGTERM"

# ---- control: without CAP_KILL, which the server's workspace uids need,
# it must refuse to start and say why.
without_kill=$(sed 's/,+kill//' <<<"$bounding")
[ "$without_kill" != "$bounding" ] || fail "CAP_KILL is not in the bounding set ($caps)"
start_server "$without_kill"
refused=0
for _ in $(seq 1 300); do
  if ! kill -0 "$pid" 2>/dev/null; then
    refused=1
    break
  fi
  sleep 0.1
done
[ "$refused" = 1 ] || fail "the server started without CAP_KILL"
st=0
wait "$pid" || st=$?
pid=
[ "$st" != 0 ] || fail "the server exited 0 without CAP_KILL"
grep -q "without CAP_KILL" "$tmp/log" || fail "the refusal does not name CAP_KILL"

# ---- what the server relies on beyond one start.
# Workspace uids need root: a User= other than root turns them off.
if grep -Eq '^User=' "$unit" && [ "$(values User)" != root ]; then
  fail "User=$(values User): the server's workspace uids need root"
fi
# The controllers the server's cgroup v2 subtree enables for a workspace's
# caps (pids, memory, cpu) must be delegated to it.
delegate=" $(values Delegate) "
for c in pids memory cpu; do
  [[ "$delegate" == *" $c "* ]] || fail "Delegate= does not give the server $c"
done
# Every workspace uid searches the state directory on the way to its own.
mode=$(values StateDirectoryMode)
(((8#$mode & 8#001) != 0)) || fail "StateDirectoryMode=$mode: others cannot search it"
# The leases the server takes on its uid range: made before it starts, and
# writable under ProtectSystem=strict.
leases=/run/workspaced-uids
grep -aq "$leases" "$server" || fail "the server does not keep its uid leases in $leases"
[[ " $(values ReadWritePaths) " == *" -$leases "* ]] || fail "$leases is not in ReadWritePaths="
grep -q "^ExecStartPre=+/bin/mkdir -p -m 0700 $leases\$" "$unit" || fail "$leases is not made"
# Commands get oom_score_adj 1000; the server must stay below them.
[ "$oom" -lt 0 ] || fail "OOMScoreAdjust=$oom does not keep the server above its commands"

echo "unit_test: PASSED"
