#!/usr/bin/env bash
# front.sh DIR NODE_ADDR...
#
# A real nginx in front of workspaced nodes on this machine, each at
# HOST:PORT (loopback TCP) or unix:/ABSOLUTE/PATH (a unix socket), routing
# the way server/deploy/nginx.conf does across a network: a call without
# `x-workspace-node` (Open, ListProviders, Health) goes to any node, round
# robin, and the response names the node that answered in
# `x-workspace-node`; a call with `x-workspace-node: node-K` goes to node K
# only; a name that is no node gets a gRPC UNAVAILABLE from the front
# itself. Plaintext HTTP/2 on both sides (the nodes are on this machine). A
# node that cannot be reached is UNAVAILABLE (HTTP 502) to the client
# every time: the front neither retries elsewhere nor takes the node out.
#
# The nodes are named node-1, node-2, ... in the order given. Writes
# DIR/nginx.conf, prints "front listening on 127.0.0.1:PORT" once the port
# accepts connections, and stays in the foreground; SIGTERM stops it, and
# nginx dies with this script however it ends. The script's exit status is
# nginx's: 0 after a SIGTERM only when nginx shut down cleanly, so a suite
# that checks it sees a crashed front. Round robin (not least
# connections) so that a client that forgets to pin a workspace is caught
# at once: its next call lands on another node and gets NO_SUCH_WORKSPACE.
set -euo pipefail

dir=${1:?usage: front.sh DIR NODE_ADDR...}
shift
[ "$#" -ge 1 ] || { echo "front.sh: no node addresses" >&2; exit 2; }
for addr in "$@"; do
  case $addr in
    unix:/*) ;;
    unix:*) echo "front.sh: $addr: a unix socket is unix:/ABSOLUTE/PATH" >&2; exit 2 ;;
  esac
done
nginx=/usr/sbin/nginx
[ -x "$nginx" ] || { echo "front.sh: $nginx is missing (bash bazel/setup.sh installs it)" >&2; exit 1; }
for tool in python3 setpriv; do
  command -v "$tool" >/dev/null || { echo "front.sh: $tool is missing (bash bazel/setup.sh installs it)" >&2; exit 1; }
done

mkdir -p "$dir/tmp"
cfg="$dir/nginx.conf"

# regex TEXT: TEXT with the characters special to PCRE escaped, to match
# it literally in an nginx map.
regex() {
  printf '%s' "$1" | sed 's/[][\\.^$*+?(){}|]/\\&/g'
}

# write_config PORT NODE_ADDR...: DIR/nginx.conf for a front on PORT.
# nginx names a unix socket unix:/PATH in upstreams and in $upstream_addr,
# as the nodes' addresses do.
write_config() {
  local port=$1
  shift
  {
  cat <<EOF
worker_processes 1;
daemon off;
master_process off;
error_log stderr warn;
pid $dir/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  # The node a call names: "" (none), a node, or "unknown".
  map \$http_x_workspace_node \$pinned {
    default unknown;
    "" "";
EOF
  i=1
  for addr in "$@"; do
    echo "    node-$i node-$i;"
    i=$((i + 1))
  done
  cat <<EOF
  }
  # The node that answered a call sent to any node: the last address
  # tried (nginx moves a call it could not send on to the next node, and
  # lists every node it tried).
  map \$upstream_addr \$answered {
    default "";
EOF
  i=1
  for addr in "$@"; do
    echo "    \"~(^|\\s)$(regex "$addr")\$\" node-$i;"
    i=$((i + 1))
  done
  echo "  }"
  echo "  upstream any {"
  for addr in "$@"; do
    echo "    server $addr max_fails=0;"
  done
  echo "  }"
  i=1
  for addr in "$@"; do
    echo "  upstream node-$i { server $addr; }"
    i=$((i + 1))
  done
  cat <<EOF
  server {
    listen 127.0.0.1:$port http2;
    client_max_body_size 0;
    client_body_timeout 1h;
    grpc_read_timeout 1h;
    grpc_send_timeout 1h;
    default_type application/grpc;
    location / {
      if (\$pinned = unknown) {
        add_header grpc-status 14 always;
        add_header grpc-message "no such node behind this front" always;
        return 200;
      }
      if (\$pinned) {
        grpc_pass grpc://\$pinned;
      }
      add_header x-workspace-node \$answered always;
      grpc_pass grpc://any;
      # Unlike server/deploy/nginx.conf, a node that fails is neither
      # skipped for a while nor retried here: the failure reaches the
      # client every time round robin picks that node, so the clients'
      # own retries are what the tests exercise.
      grpc_next_upstream off;
    }
  }
}
EOF
  } >"$cfg"
}

# nginx's stderr goes to a file, complete once nginx has exited, where a
# failed bind is recognised; it is copied to ours when the front ends.
log="$dir/nginx.stderr"
pid=
# end STATUS: stops nginx if it runs, shows its stderr, exits with STATUS
# or, when nginx was running, with nginx's own status.
end() {
  local status=$1
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    status=0
    wait "$pid" || status=$?
    pid=
  fi
  cat "$log" >&2 2>/dev/null || true
  exit "$status"
}
trap 'end 143' TERM
trap 'end 130' INT

# nginx cannot listen on port 0, so the port is one the kernel picked as
# free, released and then bound by nginx. Another process may take it in
# between: nginx then fails with "Address already in use", and the front
# starts again on another port (a few times, saying so).
for attempt in 1 2 3 4 5; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  write_config "$port" "$@"
  "$nginx" -q -t -e stderr -c "$cfg" -p "$dir" >&2
  rm -f "$dir/nginx.pid"
  # Dies with this script, however it ends.
  setpriv --pdeathsig KILL -- "$nginx" -e stderr -c "$cfg" -p "$dir" 2>"$log" &
  pid=$!
  # nginx writes its pid file once it listens on the port.
  for _ in $(seq 1 400); do
    if ! kill -0 "$pid" 2>/dev/null; then
      break
    fi
    if [ "$(cat "$dir/nginx.pid" 2>/dev/null)" = "$pid" ] &&
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "front listening on 127.0.0.1:$port"
      # nginx's status, whether it ends on its own or by end() on SIGTERM.
      status=0
      wait "$pid" || status=$?
      pid=
      end "$status"
    fi
    sleep 0.05
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "front.sh: nginx did not listen on 127.0.0.1:$port within 20 s" >&2
    kill -KILL "$pid"
    wait "$pid" || true
    pid=
    end 1
  fi
  wait "$pid" || true
  pid=
  if ! grep -q "Address already in use" "$log"; then
    echo "front.sh: nginx exited before listening on 127.0.0.1:$port" >&2
    end 1
  fi
  cat "$log" >&2
  echo "front.sh: port $port was taken before nginx bound it (attempt $attempt); trying another" >&2
done
echo "front.sh: no free port for nginx after $attempt attempts" >&2
exit 1
