#!/usr/bin/env bash
# Builds the Python client's wheel and sdist into OUTDIR, offline.
#
#   clients/python/build_dist.sh OUTDIR
#
# Stages a copy of the package, generates the protobuf and gRPC modules into
# it (gen_stubs.sh: workspaced/_pb, with imports relative to the package),
# and runs Debian's `python3 -m build --no-isolation`, which builds the sdist
# and then the wheel from that sdist. Nothing is written into the source
# tree and nothing is downloaded. Prints the paths of the two files.
#
# Needs /usr/bin/python3 with python3-build, python3-setuptools,
# python3-wheel, and protoc + grpc_python_plugin (protobuf-compiler,
# protobuf-compiler-grpc). PYTHON overrides the interpreter.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: build_dist.sh OUTDIR" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
python=${PYTHON:-/usr/bin/python3}

"$python" -c 'import build, setuptools, wheel' 2>/dev/null || {
  echo "build_dist.sh: $python cannot import build, setuptools and wheel" \
    "(Debian packages python3-build, python3-setuptools, python3-wheel)" >&2
  exit 1
}

# One version: the repository's VERSION file is the release, and the
# package says the same or is not built.
version=$(tr -d '[:space:]' <"$root/VERSION")
pkg_version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$here/workspaced/_version.py")
if [ "$version" != "$pkg_version" ]; then
  echo "build_dist.sh: VERSION says $version but workspaced/_version.py says ${pkg_version:-nothing}" >&2
  exit 1
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/workspaced"
# -L: under Bazel the sources are symlinks into the tree.
cp -L "$here"/pyproject.toml "$here"/MANIFEST.in "$here"/README.md "$stage/"
cp -L "$here"/workspaced/*.py "$here"/workspaced/py.typed "$stage/workspaced/"
[ -f "$root/LICENSE" ] || { echo "build_dist.sh: no LICENSE at the repository root" >&2; exit 1; }
cp -L "$root/LICENSE" "$stage/LICENSE"
bash "$here/gen_stubs.sh" "$root/proto" "$stage/workspaced/_pb"

log="$stage/build.log"
if ! (cd "$stage" && "$python" -m build --no-isolation --outdir "$out" .) >"$log" 2>&1; then
  cat "$log" >&2
  echo "build_dist.sh: python3 -m build failed" >&2
  exit 1
fi
for f in "$out/workspaced-$version.tar.gz" "$out/workspaced-$version-py3-none-any.whl"; do
  [ -f "$f" ] || { cat "$log" >&2; echo "build_dist.sh: $f was not built" >&2; exit 1; }
  echo "$f"
done
