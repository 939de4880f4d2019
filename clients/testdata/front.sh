#!/usr/bin/env bash
# front.sh DIR NODE_ADDR...
#
# A real HAProxy in front of workspaced nodes on loopback, routing the way
# server/deploy/haproxy.cfg does across a network: a call without
# `x-workspace-node` (Open, ListProviders, Health) goes to any node, round
# robin, and the response names the node that answered in
# `x-workspace-node`; a call with `x-workspace-node: node-K` goes to node K
# only; a name that is no node is refused with HTTP 503 (gRPC UNAVAILABLE).
# Plaintext HTTP/2 on both sides (the nodes are on loopback).
#
# The nodes are named node-1, node-2, ... in the order given. Writes
# DIR/haproxy.cfg, prints "front listening on 127.0.0.1:PORT" once the port
# accepts connections, and stays in the foreground as HAProxy; SIGTERM or
# SIGKILL stops it. Round robin (not least-connections) so that a client
# that forgets to pin a workspace is caught at once: its next call lands
# on another node and gets NO_SUCH_WORKSPACE.
set -euo pipefail

dir=${1:?usage: front.sh DIR NODE_ADDR...}
shift
[ "$#" -ge 1 ] || { echo "front.sh: no node addresses" >&2; exit 2; }
haproxy=/usr/sbin/haproxy
[ -x "$haproxy" ] || { echo "front.sh: $haproxy is missing (bash bazel/setup.sh installs it)" >&2; exit 1; }

# A free port: bound by the kernel, released, then taken by HAProxy.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

mkdir -p "$dir"
cfg="$dir/haproxy.cfg"
{
  cat <<EOF
global
  log stderr format raw local0 warning
  maxconn 1000

defaults
  mode http
  log global
  timeout connect 2s
  timeout client 1h
  timeout server 1h

frontend agents
  bind 127.0.0.1:$port proto h2
EOF
  names=""
  for i in $(seq 1 "$#"); do names="$names node-$i"; done
  cat <<EOF
  acl pinned req.hdr(x-workspace-node) -m found
  acl known_node req.hdr(x-workspace-node) -m str$names
  # A name that is no node gets a gRPC UNAVAILABLE of its own (a
  # trailers-only response) instead of going where it would be
  # NO_SUCH_WORKSPACE. HTTP 503, not 200: HAProxy drops a content-type
  # header on a reply without a body, and grpc-go then ignores grpc-status
  # and maps the HTTP status (200 would be UNKNOWN, 503 is UNAVAILABLE).
  http-request return status 503 hdr grpc-status 14 hdr grpc-message "no such node behind this front" if pinned !known_node
EOF
  for i in $(seq 1 "$#"); do
    echo "  use_backend node-$i if { req.hdr(x-workspace-node) -m str node-$i }"
  done
  cat <<EOF
  default_backend any

backend any
  balance roundrobin
  http-response set-header x-workspace-node %[srv_name]
EOF
  i=1
  for addr in "$@"; do
    echo "  server node-$i $addr proto h2 check"
    i=$((i + 1))
  done
  i=1
  for addr in "$@"; do
    printf '\nbackend node-%d\n  server node-%d %s proto h2\n' "$i" "$i" "$addr"
    i=$((i + 1))
  done
} >"$cfg"

"$haproxy" -c -q -f "$cfg" >&2

# Dies with this script, however it ends.
setpriv --pdeathsig KILL -- "$haproxy" -db -f "$cfg" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null; wait "$pid"' TERM INT
for _ in $(seq 1 200); do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "front.sh: haproxy exited" >&2
    exit 1
  fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "front listening on 127.0.0.1:$port"
    wait "$pid"
    exit $?
  fi
  sleep 0.05
done
echo "front.sh: haproxy did not listen on 127.0.0.1:$port" >&2
kill -KILL "$pid"
exit 1
