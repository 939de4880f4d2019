#!/usr/bin/env bash
# image.sh [--wsctl WSCTL] TAG SERVER HELPER...
#
# An image of workspaced built without a registry: the binaries this
# machine built (the server and its helpers, which it looks for next to
# itself), every shared library they and bubblewrap load, taken from this
# machine, and busybox for the commands of `local-bash` workspaces, put
# into a root file system and loaded with `docker import`. It is what
# server/deploy/Containerfile makes (same paths, user, volume, port and
# entrypoint) for machines with no registry to pull debian:12 from; the
# Containerfile remains the recipe for a reproducible build.
#
#   bazel build //server:workspaced //clients/cli:wsctl
#   bash server/deploy/image.sh --wsctl bazel-bin/clients/cli/wsctl \
#     workspaced:local bazel-bin/server/workspaced \
#     bazel-bin/server/progs/workspaced-sandbox-init \
#     bazel-bin/server/progs/workspaced-docker-init \
#     bazel-bin/server/progs/workspaced-docker-relay \
#     bazel-bin/server/progs/workspaced-agent
#
# The image runs as uid 10001 (`workspaced`) with the state on the volume
# /var/lib/workspaced and the configuration in /etc/workspaced (the example
# with `listen = 0.0.0.0:7878`: mount a configuration with a tokens file,
# as for the Containerfile's image). With --wsctl the console is at
# /usr/local/bin/wsctl, on the image's PATH, as in the Containerfile's.
# //tests/deploy:image_test builds it, runs it and talks to it, from the
# host and from inside.
set -euo pipefail

wsctl=
if [ "${1:-}" = --wsctl ]; then
  wsctl=${2:?usage: image.sh [--wsctl WSCTL] TAG SERVER HELPER...}
  shift 2
fi
tag=${1:?usage: image.sh [--wsctl WSCTL] TAG SERVER HELPER...}
shift
[ "$#" -ge 1 ] || { echo "image.sh: no server binary" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for tool in docker ldd /usr/bin/bwrap /bin/busybox; do
  command -v "$tool" >/dev/null || { echo "image.sh: $tool is missing" >&2; exit 1; }
done
# ldd fails on a static executable: busybox must be one (busybox-static).
if ldd /bin/busybox >/dev/null 2>&1; then
  echo "image.sh: /bin/busybox is not static (install busybox-static)" >&2
  exit 1
fi

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
lib=/usr/local/lib/workspaced

# Copies a file to the same path under the root, following links.
put() {
  mkdir -p "$root$(dirname "$2")"
  cp -L "$1" "$root$2"
}

mkdir -p "$root$lib"
for b in "$@"; do
  put "$b" "$lib/$(basename "$b")"
  chmod 0755 "$root$lib/$(basename "$b")"
done
put /usr/bin/bwrap /usr/bin/bwrap
bins=("$@" /usr/bin/bwrap)
if [ -n "$wsctl" ]; then
  put "$wsctl" /usr/local/bin/wsctl
  chmod 0755 "$root/usr/local/bin/wsctl"
  bins+=("$wsctl")
fi
# Every library the dynamic ones load (static helpers have none), and the
# loader itself, at the paths they were resolved to here.
for b in "${bins[@]}"; do
  { ldd "$b" 2>/dev/null || true; } | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
done | sort -u | while read -r so; do
  put "$so" "$so"
done

# A shell and the usual tools for local-bash commands. Hard links, not
# symbolic ones: the server runs the canonical path of a command with that
# path as argv[0], and busybox picks the tool by the name it is run as.
mkdir -p "$root/bin"
cp /bin/busybox "$root/bin/busybox"
for tool in sh cat echo sleep kill yes head tail id env ls true false printf wc grep sed \
            mkdir rm cp mv touch pwd seq sort uniq tr cut test find xargs basename dirname; do
  ln "$root/bin/busybox" "$root/bin/$tool"
done

mkdir -p "$root/etc/workspaced" "$root/var/lib/workspaced" "$root/tmp" "$root/proc" "$root/dev"
chmod 1777 "$root/tmp"
chown 10001:10001 "$root/var/lib/workspaced"
chmod 0700 "$root/var/lib/workspaced"
printf 'root:x:0:0:root:/root:/bin/sh\nworkspaced:x:10001:10001::/var/lib/workspaced:/bin/false\n' \
  >"$root/etc/passwd"
printf 'root:x:0:\nworkspaced:x:10001:\n' >"$root/etc/group"
# The image's own settings over the example's, as in the Containerfile.
sed "s|^listen = unix:/run/workspaced/workspaced.sock$|listen = 0.0.0.0:7878|" "$here/workspaced.conf.example" \
  >"$root/etc/workspaced/workspaced.conf"
grep -q "^listen = 0.0.0.0:7878$" "$root/etc/workspaced/workspaced.conf"

tar -C "$root" --numeric-owner -c . |
  docker import \
    -c 'USER 10001:10001' \
    -c 'ENV PATH=/usr/local/bin:/bin:/usr/bin' \
    -c 'VOLUME /var/lib/workspaced' \
    -c 'EXPOSE 7878' \
    -c "ENTRYPOINT [\"$lib/workspaced\", \"--config\", \"/etc/workspaced/workspaced.conf\"]" \
    - "$tag" >/dev/null
echo "built $tag" >&2
