#!/usr/bin/env bash
# install.sh --prefix DIR [--component client|wsctl|all]
#
# Installs what Bazel built into DIR (default /usr/local):
#   client  DIR/include/workspaced.h, DIR/include/workspaced_version.h,
#           DIR/include/workspace/v1/*.pb.h and *.grpc.pb.h (the generated
#           messages and stubs the header includes),
#           DIR/lib/libworkspaced.a (the client with the generated code,
#           position-independent; link it with `-lworkspaced`),
#           DIR/lib/pkgconfig/workspaced.pc (Requires: grpc++ protobuf).
#   wsctl   DIR/bin/wsctl, the command-line console.
#   all     both (the default).
# With DESTDIR set, files go under $DESTDIR$DIR while workspaced.pc still
# names DIR, as packagers expect.
#
# Through Bazel, which builds what is missing first:
#   bazel run //packaging/install -- --prefix "$HOME/.local"
# or after `bazel build //packaging/install`, from the checkout:
#   bash packaging/install/install.sh --prefix "$HOME/.local"
# Then, outside the repository:
#   PKG_CONFIG_PATH=$HOME/.local/lib/pkgconfig \
#     g++ -std=c++17 agent_loop.cc $(pkg-config --cflags --libs workspaced)
set -euo pipefail

usage() {
  echo "usage: install.sh [--prefix DIR] [--component client|wsctl|all]" >&2
  exit 2
}

prefix=/usr/local
component=all
while [ "$#" -gt 0 ]; do
  case $1 in
  --prefix) [ "$#" -ge 2 ] || usage; prefix=$2; shift 2 ;;
  --prefix=*) prefix=${1#--prefix=}; shift ;;
  --component) [ "$#" -ge 2 ] || usage; component=$2; shift 2 ;;
  --component=*) component=${1#--component=}; shift ;;
  -h | --help) usage ;;
  *) echo "install.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
case $component in client | wsctl | all) ;; *) usage ;; esac
[ -n "$prefix" ] || usage
# Under `bazel run` the working directory is the runfiles tree: a relative
# prefix means the directory the command was typed in.
case $prefix in
/*) ;;
*) prefix=${BUILD_WORKING_DIRECTORY:-$PWD}/$prefix ;;
esac
prefix=${prefix%/}
[ -n "$prefix" ] || prefix=/
dest=${DESTDIR:-}$prefix

# Where Bazel's outputs are: the runfiles of `bazel run` / `bazel test`, or
# a checkout's bazel-bin next to its sources.
roots=()
if [ -n "${RUNFILES_DIR:-}" ] && [ -d "$RUNFILES_DIR/workspaced" ]; then
  roots+=("$RUNFILES_DIR/workspaced")
elif [ -n "${TEST_SRCDIR:-}" ] && [ -d "$TEST_SRCDIR/workspaced" ]; then
  roots+=("$TEST_SRCDIR/workspaced")
elif [ -d "$0.runfiles/workspaced" ]; then
  roots+=("$0.runfiles/workspaced")
else
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  roots+=("$repo/bazel-bin" "$repo")
fi

# The path of the built or source file REL, or a loud failure.
input() {
  local r
  for r in "${roots[@]}"; do
    if [ -e "$r/$1" ]; then
      printf '%s\n' "$r/$1"
      return 0
    fi
  done
  echo "install.sh: $1 is missing; build it first: bazel build //packaging/install" >&2
  exit 1
}

install_client() {
  local version_file version header version_h lib common gen h n=0
  version_file=$(input VERSION)
  lib=$(input packaging/install/libworkspaced.a)
  header=$(input clients/cpp/workspaced.h)
  version_h=$(input clients/cpp/workspaced_version.h)
  common=$(input proto/workspace/v1/common.pb.h)
  gen=$(dirname "$common")
  version=$(tr -d '[:space:]' <"$version_file")
  install -d -m 0755 "$dest/include/workspace/v1" "$dest/lib/pkgconfig"
  install -m 0644 "$header" "$version_h" "$dest/include/"
  for h in "$gen"/*.pb.h; do
    install -m 0644 "$h" "$dest/include/workspace/v1/"
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] || { echo "install.sh: no generated headers in $gen" >&2; exit 1; }
  install -m 0644 "$lib" "$dest/lib/libworkspaced.a"
  # The names Debian's libgrpc++-dev and libprotobuf-dev give their .pc
  # files.
  cat >"$dest/lib/pkgconfig/workspaced.pc" <<EOF
prefix=$prefix
exec_prefix=\${prefix}
libdir=\${exec_prefix}/lib
includedir=\${prefix}/include

Name: workspaced
Description: C++ client of workspaced, confined workspaces for AI agents over gRPC
Version: $version
Requires: grpc++ protobuf
Cflags: -I\${includedir}
Libs: -L\${libdir} -lworkspaced
EOF
  chmod 0644 "$dest/lib/pkgconfig/workspaced.pc"
  echo "installed the C++ client $version into $dest (pkg-config: workspaced)" >&2
}

install_wsctl() {
  local wsctl
  wsctl=$(input clients/cli/wsctl)
  install -d -m 0755 "$dest/bin"
  install -m 0755 "$wsctl" "$dest/bin/wsctl"
  echo "installed $dest/bin/wsctl" >&2
}

case $component in
client) install_client ;;
wsctl) install_wsctl ;;
all)
  install_client
  install_wsctl
  ;;
esac
