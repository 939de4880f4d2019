#!/usr/bin/env bash
# The server's own container image, built offline by server/deploy/image.sh
# from the binaries Bazel built, run under the real dockerd with its
# configuration and tokens mounted, and used through the real wsctl over a
# published port: authentication, the providers a container can and cannot
# offer (local-sandbox fails closed without user namespaces), a local-bash
# workspace whose commands run as the image's unprivileged user, the
# image's own wsctl (its version, and the same workspace seen from inside
# the container), and a `docker stop` that drains and exits 0.
#
# usage: image_test.sh IMAGE_SH WSCTL VERSION SERVER HELPER...
set -euo pipefail

image_sh=$1
wsctl=$2
version=$(tr -d '[:space:]' <"$3")
shift 3
tag="workspaced-image-test:$$"
name="wsd-image-test-$$"
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/image.XXXXXX")

cleanup() {
  docker rm -f "$name" >/dev/null 2>&1 || true
  docker rmi -f "$tag" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "image_test: FAILED: $*" >&2
  docker logs "$name" 2>&1 | tail -20 >&2 || true
  exit 1
}

docker info >/dev/null 2>&1 || fail "no Docker daemon (bash tests/fixtures/dockerd.sh starts one)"
bash "$image_sh" --wsctl "$wsctl" "$tag" "$@" || fail "image.sh could not build the image"

# The operator's side: a configuration and a tokens file, mounted read-only.
mkdir -p "$tmp/etc"
token=tok-image-test-alice
printf 'alice %s\n' "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" >"$tmp/etc/tokens"
cat >"$tmp/etc/workspaced.conf" <<'EOF'
[server]
listen = 0.0.0.0:7878
state-dir = /var/lib/workspaced
[auth]
tokens-file = /etc/workspaced/tokens
[tls]
allow-plaintext = true
# local-bash is off unless the operator's policy allows it.
[policy]
providers = memory, local-bash, local-sandbox
EOF
chmod 0755 "$tmp/etc"
chmod 0644 "$tmp/etc/tokens" "$tmp/etc/workspaced.conf"

docker run -d --name "$name" -p 127.0.0.1::7878 -v "$tmp/etc:/etc/workspaced:ro" "$tag" >/dev/null ||
  fail "docker run"
up=0
for _ in $(seq 1 200); do
  if docker logs "$name" 2>&1 | grep -q "workspaced listening on 0.0.0.0:7878"; then
    up=1
    break
  fi
  [ "$(docker inspect -f '{{.State.Running}}' "$name")" = true ] || fail "the container exited"
  sleep 0.1
done
[ "$up" = 1 ] || fail "the server did not listen"
port=$(docker port "$name" 7878/tcp | head -1 | sed 's/.*://')
export WORKSPACED_ADDR="127.0.0.1:$port" WORKSPACED_TOKEN="$token"

# Authentication holds inside the container too.
if WORKSPACED_TOKEN=wrong "$wsctl" providers >/dev/null 2>"$tmp/err"; then
  fail "a wrong token was let in"
fi
grep -q "UNAUTHENTICATED" "$tmp/err" || fail "wrong token: $(cat "$tmp/err")"

# What a container can offer: memory and local-bash; local-sandbox needs
# user namespaces, which Docker's default profile denies, so it is
# reported unavailable (and an Open of it would fail closed); no daemon
# socket is mounted, so no docker either.
providers=$("$wsctl" providers)
grep -Eq '^memory +available' <<<"$providers" || fail "memory: $providers"
grep -Eq '^local-bash +available' <<<"$providers" || fail "local-bash: $providers"
grep -Eq '^local-sandbox +unavailable' <<<"$providers" || fail "local-sandbox: $providers"
grep -Eq '^docker +unavailable' <<<"$providers" || fail "docker: $providers"
if "$wsctl" open --provider local-sandbox --allow sh >/dev/null 2>"$tmp/err"; then
  fail "a local-sandbox workspace opened without a sandbox"
fi

# A local-bash workspace: files in and out, commands as uid 10001 with
# busybox's tools, exit codes passed through.
ws=$("$wsctl" open --provider local-bash --allow id,sh,cat | awk '{print $1}')
[ -n "$ws" ] || fail "open"
printf 'hello from the host\n' >"$tmp/hello.txt"
"$wsctl" put "$ws" hello.txt "$tmp/hello.txt" >/dev/null || fail "put"
[ "$("$wsctl" cat "$ws" hello.txt)" = "hello from the host" ] || fail "cat"
[ "$("$wsctl" exec "$ws" -- id -u)" = 10001 ] || fail "commands do not run as 10001"
[ "$("$wsctl" exec "$ws" -- sh -c 'cat hello.txt; echo done')" = $'hello from the host\ndone' ] ||
  fail "sh -c"
set +e
"$wsctl" exec "$ws" -- sh -c 'exit 7'
st=$?
set -e
[ "$st" = 7 ] || fail "exit status $st, not 7"

# The image's own wsctl, on its PATH: the release's version, and the file
# the host put, read over the container's loopback.
inside=$(docker exec "$name" wsctl --version 2>&1) || fail "wsctl in the image: $inside"
[ "$inside" = "wsctl $version" ] || fail "wsctl --version in the image: $inside"
inside=$(docker exec -e WORKSPACED_ADDR=127.0.0.1:7878 -e WORKSPACED_TOKEN="$token" "$name" \
  wsctl cat "$ws" hello.txt 2>&1) || fail "wsctl cat in the image: $inside"
[ "$inside" = "hello from the host" ] || fail "wsctl cat in the image: $inside"

# docker stop sends SIGTERM: the server drains and exits 0.
docker stop -t 30 "$name" >/dev/null || fail "docker stop"
code=$(docker inspect -f '{{.State.ExitCode}}' "$name")
[ "$code" = 0 ] || fail "exit code $code after docker stop"
docker logs "$name" 2>&1 | grep -q '"event":"server.drain"' || fail "no drain logged"
echo "image_test: PASSED"
