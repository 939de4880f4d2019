#!/usr/bin/env bash
# Installs every Debian package workspaced needs to build, run and test.
# Idempotent: refreshes the package lists at most once per run and only
# installs what is missing, so running it twice is cheap and safe.
set -euo pipefail

packages=(
  # build
  bazel-bootstrap build-essential pkg-config clang-format curl ca-certificates
  # gRPC C core, protobuf-c and protoc
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  # server libraries
  libssl-dev libcurl4-openssl-dev libseccomp-dev libjansson-dev libpcre2-dev
  libarchive-dev
  libmicrohttpd-dev
  # fuzzing (tests/fuzz): clang and its libFuzzer runtime
  clang libclang-rt-14-dev
  # transport abuse (tests/reliability): a raw HTTP/2 client (Python's h2)
  # and nghttp2's load generator
  python3-h2 nghttp2-client
  # tests; procps for pgrep and ps, systemd for systemd-analyze (the unit
  # file's check), openssl for the test certificates
  libgtest-dev googletest libgrpc++-dev python3-grpcio python3-protobuf
  procps systemd openssl
  # the Python client's wheel and sdist, built offline and installed into a
  # virtualenv that uses Debian's grpcio (clients/python/build_dist.sh)
  python3-build python3-setuptools python3-venv python3-wheel
  # the local-bash tests plant git configuration and run an allowed git
  git
  # deployment tests: network namespaces, the Envoy example's YAML
  iproute2 python3-yaml
  # the nginx front of the routing tests (HTTP/2 and gRPC proxying)
  nginx-light
  # isolation backends probed by the server
  bubblewrap docker.io busybox-static
  # user-mode networking for local-sandbox workspaces with network: their
  # network namespace is never the host's, so slirp4netns connects it to the
  # outside without the host's loopback (without it such Opens fail closed)
  slirp4netns
  # gVisor's runsc, the docker provider's stronger runtime (registered with
  # dockerd by tests/fixtures/dockerd.sh)
  runsc
  # a real Debian image for docker workspaces (tests/fixtures/debian) and
  # Python's own test suite as a workload nobody here wrote
  debootstrap libpython3.11-testsuite
  # a VM with Debian's kernel booted cgroup v2 only, where the caps are
  # tested on the hierarchy most users' hosts have (tests/cgroup2/vm.sh)
  qemu-system-x86
  # clients: Go stubs and runtime (GOPATH mode against /usr/share/gocode)
  golang-go golang-google-grpc-dev golang-google-genproto-dev
  golang-github-golang-protobuf-1-3-dev protoc-gen-go-1-3 protoc-gen-go-grpc
)
# The Node client needs node and npm; Debian's are used only where the
# machine has none of its own.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# nginx's package starts its default site on port 80; the tests run their
# own nginx and nothing here serves on 80.
if command -v service >/dev/null && [ -e /etc/init.d/nginx ] && pgrep -x nginx >/dev/null; then
  service nginx stop >/dev/null 2>&1 || true
fi

# A sandbox with network gets slirp4netns, which runs as the workspace's
# uid and opens /dev/net/tun: read-write for every user, as the udev rule
# of a stock Debian (50-udev-default.rules) makes it. A container's /dev
# may lack the node or have it 0600; the server refuses such an Open and
# says why.
if [ "$(id -u)" = 0 ]; then
  if [ ! -e /dev/net/tun ]; then
    mkdir -p /dev/net && mknod -m 0666 /dev/net/tun c 10 200 ||
      echo "setup: cannot make /dev/net/tun; sandboxes with network will be refused" >&2
  elif [ -c /dev/net/tun ] && [ "$(stat -c %a /dev/net/tun)" != 666 ]; then
    chmod 0666 /dev/net/tun
  fi
fi
