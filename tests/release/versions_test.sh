#!/usr/bin/env bash
# One version everywhere: the VERSION file at the repository root, and every
# copy of it a package manifest or a client's source has to spell out (the
# server, wsctl, the C++ header, the .pc file and the .deb are stamped from
# VERSION by the build and checked by their own tests). A release bumps
# VERSION; this test names every file that must follow, and CHANGELOG.md
# must have a section for the version.
set -uo pipefail
root="${TEST_SRCDIR:?run under bazel test}/workspaced"
version=$(tr -d '[:space:]' <"$root/VERSION")
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$ ]] ||
  { echo "VERSION holds '$version', not MAJOR.MINOR.PATCH" >&2; exit 1; }

fail=0
check() { # FILE WHAT FOUND
  if [ "$3" = "$version" ]; then
    echo "ok   $1 ($2): $3"
  else
    echo "FAIL $1 ($2): '$3', VERSION says '$version'" >&2
    fail=1
  fi
}
py() { /usr/bin/python3 -c "$1" "$root/$2"; }

check clients/python/workspaced/_version.py __version__ \
  "$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$root/clients/python/workspaced/_version.py")"
check clients/node/package.json version \
  "$(py 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' clients/node/package.json)"
check clients/node/package-lock.json version \
  "$(py 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' clients/node/package-lock.json)"
check clients/node/package-lock.json 'packages[""].version' \
  "$(py 'import json,sys; print(json.load(open(sys.argv[1]))["packages"][""]["version"])' clients/node/package-lock.json)"
check clients/node/src/version.ts VERSION \
  "$(sed -n "s/^export const VERSION = '\(.*\)';$/\1/p" "$root/clients/node/src/version.ts")"
check clients/go/workspaced/version.go Version \
  "$(sed -n 's/^const Version = "\(.*\)"$/\1/p' "$root/clients/go/workspaced/version.go")"
check CHANGELOG.md 'a "## VERSION" section' \
  "$(sed -n "s/^## \(${version//./\\.}\)\( .*\)\?$/\1/p" "$root/CHANGELOG.md" | head -1)"
check 'workspaced --version' output "$("$root/server/workspaced" --version | sed 's/^workspaced //')"
check 'wsctl --version' output "$("$root/clients/cli/wsctl" --version | sed 's/^wsctl //')"
exit $fail
