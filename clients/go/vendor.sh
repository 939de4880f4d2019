#!/usr/bin/env bash
# Assembles vendor/ (and vendor/modules.txt) for a Go module from Debian's
# packaged Go sources, so that the module builds in module mode with no
# network and no module proxy:
#
#     vendor.sh [-c] [MODULE_DIR]          (default: the current directory)
#     GOFLAGS=-mod=vendor go build ./...
#
# Every `require` of MODULE_DIR/go.mod is vendored (a module that uses
# workspaced.dev/go must require its requirements too, as Go wants; the
# script names any that are missing):
#   * a module replaced by a directory (`replace M => ../dir`) from that
#     directory: that is how another module uses workspaced.dev/go from a
#     source tree (run `go generate ./gen/...` there first);
#   * any other from /usr/share/gocode/src/<module path>, after checking
#     that the Debian package installed there is the version go.mod names
#     (v1.33.3 for 1.33.3-2; v0.0.0-20200413115906-b5235f65be36 for
#     0.0~git20200413.b5235f6-3). A mismatch stops the script: go.mod and
#     the vendored code must agree, and the go command does not check it.
#
# The vendored modules are symbolic links into their source unless -c is
# given, which copies them (for a vendor tree to keep or ship). Go does not
# check go.sum against vendored code, so none is needed.
set -euo pipefail

copy=false
if [[ "${1:-}" == "-c" ]]; then
    copy=true
    shift
fi
dir="$(cd "${1:-.}" && pwd)"
gocode="${DEBIAN_GOCODE:-/usr/share/gocode/src}"
[[ -f "$dir/go.mod" ]] || { echo "vendor.sh: no go.mod in $dir" >&2; exit 1; }

# requires prints the requirements and directory replacements of the
# go.mod in directory $1, from `go mod edit -print`'s canonical form, which
# awk can read: "R path version" and "P path dir".
requires() {
    (cd "$1" && go mod edit -print) | awk '
        /^require \($/ { blk = "r"; next }
        /^replace \($/ { blk = "p"; next }
        /^\)$/ { blk = ""; next }
        /^require / { print "R", $2, $3; next }
        /^replace / { if ($3 == "=>" && $4 ~ /^[.\/]/) print "P", $2, $4; next }
        blk == "r" && NF >= 2 { print "R", $1, $2 }
        blk == "p" && $2 == "=>" && $3 ~ /^[.\/]/ { print "P", $1, $3 }
    '
}
edges="$(requires "$dir")"

# debian_version prints the Go version of the Debian package that installed
# $1, or fails.
debian_version() {
    local pkg ver
    pkg="$(dpkg-query -S "$1" 2>/dev/null | head -1 | cut -d: -f1)" || return 1
    [[ -n "$pkg" ]] || return 1
    ver="$(dpkg-query -W -f '${Version}' "$pkg")"
    ver="${ver#*:}"     # epoch
    ver="${ver%-*}"     # Debian revision
    ver="${ver%+*}"     # +dfsg and the like
    echo "$pkg $ver"
}

# version_matches reports whether go.mod's version $1 is the Debian upstream
# version $2: v$2 for a release, the same date and commit for a snapshot.
version_matches() {
    local gov="$1" deb="$2"
    if [[ "$deb" =~ ^0\.0~git([0-9]{8})\.([0-9a-f]+)$ ]]; then
        [[ "$gov" =~ ^v0\.0\.0-${BASH_REMATCH[1]}[0-9]{6}-${BASH_REMATCH[2]} ]]
    else
        [[ "$gov" == "v$deb" ]]
    fi
}

# packages lists the import paths of the Go packages under module root $1
# (module path $2): every directory with a non-test .go file, except
# testdata and vendor trees.
packages() {
    (cd "$1" && find -L . \( -name testdata -o -name vendor -o -name '.*' ! -name . \) -prune -o \
        -name '*.go' ! -name '*_test.go' -printf '%h\n') | sort -u |
        sed -e 's#^\.$##' -e 's#^\./#/#' -e "s#^#$2#"
}

# Go (1.17 and later) wants every module that provides a package named in
# go.mod: a module that uses workspaced.dev/go from a source tree must
# also require what workspaced.dev/go requires. Say which lines are
# missing rather than let go fail with "should be required explicitly".
missing=""
while read -r _ path target; do
    [[ -n "$path" ]] || continue
    while read -r kind dep version; do
        [[ "$kind" == R ]] || continue
        awk -v p="$dep" '$1 == "R" && $2 == p { found = 1 } END { exit !found }' <<<"$edges" ||
            missing="$missing	$dep $version // indirect"$'\n'
    done < <(requires "$(cd "$dir" && cd "$target" && pwd)")
done < <(awk '$1 == "P"' <<<"$edges")
if [[ -n "$missing" ]]; then
    printf 'vendor.sh: %s/go.mod must also require what its replaced modules require:\nrequire (\n%s)\n' "$dir" "$missing" >&2
    exit 1
fi

rm -rf "$dir/vendor"
mkdir -p "$dir/vendor"
list="$dir/vendor/modules.txt"
: >"$list"
replaces=""
while read -r kind path version; do
    [[ "$kind" == R ]] || continue
    target="$(awk -v p="$path" '$1 == "P" && $2 == p { print $3 }' <<<"$edges")"
    if [[ -n "$target" ]]; then
        src="$(cd "$dir" && cd "$target" && pwd)"
        [[ -f "$src/go.mod" ]] || { echo "vendor.sh: $path => $target has no go.mod" >&2; exit 1; }
        echo "# $path $version => $target" >>"$list"
        replaces="$replaces# $path => $target"$'\n'
    else
        src="$gocode/$path"
        [[ -d "$src" ]] || { echo "vendor.sh: $path is not in $gocode: install its Debian package" >&2; exit 1; }
        read -r pkg deb < <(debian_version "$src") ||
            { echo "vendor.sh: no Debian package owns $src" >&2; exit 1; }
        version_matches "$version" "$deb" ||
            { echo "vendor.sh: go.mod wants $path $version, Debian's $pkg is $deb" >&2; exit 1; }
        echo "# $path $version" >>"$list"
    fi
    # The module's own go directive decides the language version its
    # packages are compiled with.
    gover="$(awk '$1 == "go" { print $2; exit }' "$src/go.mod" 2>/dev/null || true)"
    # Every requirement of go.mod, indirect or not, is "explicit".
    echo "## explicit${gover:+; go $gover}" >>"$list"
    packages "$src" "$path" >>"$list"
    mkdir -p "$(dirname "$dir/vendor/$path")"
    if $copy; then
        cp -rL "$src" "$dir/vendor/$path"
        rm -rf "$dir/vendor/$path/vendor"
    else
        ln -s "$src" "$dir/vendor/$path"
    fi
done <<<"$edges"
printf '%s' "$replaces" >>"$list"
