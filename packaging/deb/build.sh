#!/usr/bin/env bash
# build.sh OUTDIR
#
# Builds OUTDIR/workspaced_VERSION_ARCH.deb, the server as a Debian package:
#
#   /usr/lib/workspaced/workspaced         the server, with its helpers next
#   /usr/lib/workspaced/workspaced-*       to it, where it looks for them
#   /usr/sbin/workspaced                   a link to the server
#   /usr/bin/wsctl                         the command-line client
#   /lib/systemd/system/workspaced.service server/deploy/workspaced.service
#                                          with the package's paths
#   /etc/workspaced/workspaced.conf        server/deploy/workspaced.conf.example
#                                          (a conffile)
#   /usr/share/workspaced/workspace.protoset  the API's descriptor set
#                                          (//proto:workspace_protoset), for grpcurl
#   /usr/share/doc/workspaced/copyright    LICENSE
#   /usr/share/doc/workspaced/changelog.gz CHANGELOG.md
#
# The version is the root VERSION file's. Depends: is what dpkg-shlibdeps
# finds for the shared libraries the binaries load, on this machine's
# Debian; the maintainer scripts (postinst, prerm, postrm here) make the
# group and user workspaced and the state directory, enable the unit and
# start it where systemd runs, and on purge remove the state, the
# configuration and the user.
#
# By default the binaries come from `bazel build` in the checkout that
# holds this script. With WORKSPACED_DEB_TREE=DIR, nothing is built: every
# input is taken from DIR at its path in the repository (a test's runfiles,
# say): server/workspaced, server/progs/workspaced-*, clients/cli/wsctl,
# VERSION, LICENSE, CHANGELOG.md, server/deploy/workspaced.service,
# server/deploy/workspaced.conf.example and proto/workspace.protoset.
# WORKSPACED_DEB_MAINTAINER overrides the Maintainer field.
#
# Needs dpkg-dev (dpkg-shlibdeps) and binutils (strip), both pulled in by
# build-essential.
set -euo pipefail

out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
maintainer=${WORKSPACED_DEB_MAINTAINER:-workspaced developers <workspaced@localhost>}

die() {
  echo "build.sh: $*" >&2
  exit 1
}

for tool in dpkg-deb dpkg-shlibdeps dpkg strip readelf gzip; do
  command -v "$tool" >/dev/null ||
    die "$tool is missing (Debian packages dpkg-dev and binutils, which bazel/setup.sh installs)"
done

helpers=(workspaced-sandbox-init workspaced-docker-init workspaced-docker-relay workspaced-agent)

if [ -n "${WORKSPACED_DEB_TREE:-}" ]; then
  src=$(cd "$WORKSPACED_DEB_TREE" && pwd)
  bin=$src
else
  src=$(cd "$here/../.." && pwd)
  cd "$src"
  targets=(//server:workspaced //clients/cli:wsctl //server/progs:sandbox_init
    //server/progs:docker_init //server/progs:docker_relay //server/progs:wsagent
    //proto:workspace_protoset)
  bazel build "${targets[@]}"
  bin=$(bazel info bazel-bin)
fi

version=$(tr -d '[:space:]' <"$src/VERSION")
[[ "$version" =~ ^[0-9][A-Za-z0-9.+~-]*$ ]] || die "VERSION '$version' is not a Debian version"
arch=$(dpkg --print-architecture)

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# dpkg-shlibdeps reads the package's name from debian/control and expects
# the binaries under debian/PACKAGE: the smallest tree it accepts.
mkdir "$work/debian"
printf 'Source: workspaced\n\nPackage: workspaced\nArchitecture: %s\n' "$arch" >"$work/debian/control"
root=$work/debian/workspaced

# Copies FILE (links followed) to PATH in the package with MODE.
put() {
  [ -f "$1" ] || die "$1 is missing"
  install -D -m "$3" "$1" "$root$2"
}

lib=/usr/lib/workspaced
put "$bin/server/workspaced" "$lib/workspaced" 0755
for h in "${helpers[@]}"; do
  put "$bin/server/progs/$h" "$lib/$h" 0755
done
put "$bin/clients/cli/wsctl" /usr/bin/wsctl 0755
# The server finds its helpers next to /proc/self/exe, which is the link's
# target.
mkdir -p "$root/usr/sbin"
ln -s ../lib/workspaced/workspaced "$root/usr/sbin/workspaced"

# Debug information stays in the build tree (.bazelrc builds with -g).
for f in "$root$lib"/* "$root/usr/bin/wsctl"; do
  strip --strip-unneeded --remove-section=.comment --remove-section=.note "$f"
done

# The unit, with the package's paths and a header that describes the
# package instead of a manual installation (the text before the unit's
# account of why it runs as root).
unit_in=$src/server/deploy/workspaced.service
[ -f "$unit_in" ] || die "$unit_in is missing"
mkdir -p "$root/lib/systemd/system"
unit=$root/lib/systemd/system/workspaced.service
{
  cat <<'EOF'
# systemd unit for workspaced, installed by the workspaced package: the
# server in /usr/lib/workspaced with its helpers next to it
# (/usr/sbin/workspaced links to it), its configuration in
# /etc/workspaced/workspaced.conf. Members of the group workspaced may
# connect to the socket; map their uid in [peers] to let them call. Changes
# belong in a drop-in: systemctl edit workspaced
#
EOF
  awk '/^# The server runs as root/ { found = 1 } found { print } END { exit !found }' "$unit_in" ||
    die "$unit_in: no line starting '# The server runs as root' (the end of its header)"
} >"$unit"
sed -i 's#/usr/local/lib/workspaced/workspaced#/usr/sbin/workspaced#g' "$unit"
# systemd makes the RuntimeDirectory= root's (the unit has no User= or
# Group=), and the server leaves a directory it did not make as it is: the
# unit gives it to the group workspaced, which the package makes, so that
# its members reach the socket inside.
grep -q '^ExecStartPre=+-/bin/chgrp workspaced /run/workspaced$' "$unit" ||
  die "$unit_in: no ExecStartPre= giving /run/workspaced to the group workspaced"
chmod 0644 "$unit"
! grep -n '/usr/local' "$unit" >&2 || die "the unit still names /usr/local above"
grep -qx 'ExecStart=/usr/sbin/workspaced --config /etc/workspaced/workspaced.conf' "$unit" ||
  die "the unit's ExecStart= is not the package's server and configuration"

put "$src/server/deploy/workspaced.conf.example" /etc/workspaced/workspaced.conf 0644

# For grpcurl -protoset /usr/share/workspaced/workspace.protoset.
put "$bin/proto/workspace.protoset" /usr/share/workspaced/workspace.protoset 0644

put "$src/LICENSE" /usr/share/doc/workspaced/copyright 0644
[ -f "$src/CHANGELOG.md" ] || die "$src/CHANGELOG.md is missing"
gzip -9n <"$src/CHANGELOG.md" >"$root/usr/share/doc/workspaced/changelog.gz"
chmod 0644 "$root/usr/share/doc/workspaced/changelog.gz"

# Depends: for every binary that loads shared libraries (the helpers are
# static).
dynamic=()
for f in "$root$lib"/* "$root/usr/bin/wsctl"; do
  if LC_ALL=C readelf -d "$f" 2>/dev/null | grep -q '(NEEDED)'; then
    dynamic+=("${f#"$work"/}")
  fi
done
[ "${#dynamic[@]}" -gt 0 ] || die "no dynamically linked binary: nothing to compute Depends from"
shlibs=$(cd "$work" && dpkg-shlibdeps -O "${dynamic[@]}" 2>"$work/shlibdeps.err") ||
  die "dpkg-shlibdeps failed: $(cat "$work/shlibdeps.err")"
shlibs=${shlibs#shlibs:Depends=}
[ -n "$shlibs" ] || die "dpkg-shlibdeps found no dependency"

mkdir -m 0755 "$root/DEBIAN"
for s in postinst prerm postrm; do
  install -m 0755 "$here/$s" "$root/DEBIAN/$s"
done
echo /etc/workspaced/workspaced.conf >"$root/DEBIAN/conffiles"
# dpkg --verify checks these (conffiles have their own sums).
(cd "$root" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -printf '%P\n' |
  LC_ALL=C sort | xargs md5sum) >"$root/DEBIAN/md5sums"
size=$(du -s -k --apparent-size --exclude=DEBIAN "$root" | cut -f1)
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@MAINTAINER@|$maintainer|" \
  -e "s|@INSTALLED_SIZE@|$size|" -e "s|@SHLIBS@|$shlibs|" "$here/control.in" >"$root/DEBIAN/control"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"

# Every directory 0755 whatever the umask; files keep the modes set above.
find "$root" -type d -exec chmod 0755 {} +
# Reproducible timestamps from the last commit, when there is one.
if [ -z "${SOURCE_DATE_EPOCH:-}" ] && epoch=$(git -C "$src" log -1 --format=%ct 2>/dev/null); then
  export SOURCE_DATE_EPOCH=$epoch
fi
deb=$out/workspaced_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
