#!/usr/bin/env bash
# WS_ELEMENTSOF must refuse a pointer when the program is compiled: the same
# compiler and flags as the build, first on an array (which must compile, so
# a broken setup cannot pass as a refusal), then on a pointer parameter and
# on a decayed array, each of which must fail with the macro's own message.
set -uo pipefail
cc="${CC:-gcc}"
flags=(-std=gnu17 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
  -D_GNU_SOURCE -iquote . -fsyntax-only)
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
status=0

compile() { # name, body
  printf '#include "server/base/macros.h"\n%s\n' "$2" >"$tmp/$1.c"
  "$cc" "${flags[@]}" "$tmp/$1.c" >"$tmp/$1.log" 2>&1
}

if ! compile array 'size_t f(void); size_t f(void) { static const int a[3]; return WS_ELEMENTSOF(a) + (size_t)a[0]; }'; then
  echo "FAIL: an array does not compile:" >&2
  cat "$tmp/array.log" >&2
  status=1
fi
for case in param decayed; do
  case "$case" in
  param) body='size_t f(int a[4]); size_t f(int a[4]) { return WS_ELEMENTSOF(a); }' ;;
  decayed) body='size_t f(void); size_t f(void) { static int a[4]; int *p = a; return WS_ELEMENTSOF(p); }' ;;
  esac
  if compile "$case" "$body"; then
    echo "FAIL: WS_ELEMENTSOF accepted a pointer ($case)" >&2
    status=1
  elif ! grep -q 'WS_ELEMENTSOF needs an array, not a pointer' "$tmp/$case.log"; then
    echo "FAIL: $case failed, but not with the macro's message:" >&2
    cat "$tmp/$case.log" >&2
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "PASS: arrays compile, pointers are refused"
exit "$status"
