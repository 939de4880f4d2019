#!/usr/bin/env bash
# Test fixture shared by the clients' suites: makes, with the openssl
# command, everything a TLS, mTLS and bearer-token server and its clients
# need, in the directory given (created if missing).
#
#   ca.pem/.key        the CA the tests trust
#   otherca.pem/.key   a CA nobody trusts (the "wrong CA")
#   server.pem/.key    signed by ca, for 127.0.0.1, localhost and
#                      workspaced.test (to exercise a server name override)
#   alice.pem/.key     client certificates signed by ca, CN = the tenant
#   bob.pem/.key
#   stranger.pem/.key  CN=alice, but signed by otherca
#   tokens             the server's --tokens-file: alice and bob
#
# The tokens are fixed so that every suite can name them:
#   alice: tok-alice-0123456789    bob: tok-bob-9876543210
#
# Usage: pki.sh DIR
set -euo pipefail

dir="${1:?usage: pki.sh DIR}"
command -v openssl >/dev/null ||
    { echo "pki.sh: the openssl command is missing (Debian package openssl)" >&2; exit 1; }
mkdir -p "$dir"
cd "$dir"

ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

ca() {
    openssl req -x509 "${ec[@]}" -keyout "$1.key" -out "$1.pem" -subj "/CN=$1" -days 2 2>/dev/null
}

# leaf NAME CN CA [EXTENSION]
leaf() {
    openssl req "${ec[@]}" -keyout "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
    local ext=()
    if [[ -n "${4:-}" ]]; then
        printf '%s\n' "$4" >"$1.ext"
        ext=(-extfile "$1.ext")
    fi
    openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 2 \
        -out "$1.pem" "${ext[@]}" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}

ca ca
ca otherca
leaf server localhost ca "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:workspaced.test"
leaf alice alice ca
leaf bob bob ca
leaf stranger alice otherca

hash() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
{
    echo "# tenant sha256(token)"
    echo "alice $(hash tok-alice-0123456789)"
    echo "bob $(hash tok-bob-9876543210)"
} >tokens
