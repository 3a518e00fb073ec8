#!/usr/bin/env bash
# Builds h2spec, the HTTP/2 conformance tester, from the Go module proxy
# into the cache outside the checkout, once (proxy/h2srv's conformance
# test runs it against the proxy's own HTTP/2 server).
#
# Usage: test/tools/build-h2spec.sh [CACHE_DIR]
# Progress goes to stderr; stdout is the h2spec binary's path.
set -euo pipefail

H2SPEC_VERSION=v2.2.1+incompatible
CACHE_DIR=${1:-${SWITCHYARD_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/switchyard}}
BIN="$CACHE_DIR/tools/h2spec-v2.2.1"

mkdir -p "$CACHE_DIR/tools"
exec 9>"$CACHE_DIR/tools/.h2spec.lock"
flock 9
if [[ -x "$BIN" ]]; then
	echo "build-h2spec: h2spec $H2SPEC_VERSION cached at $BIN" >&2
else
	echo "build-h2spec: building h2spec $H2SPEC_VERSION into $BIN" >&2
	gobin=$(mktemp -d "$CACHE_DIR/tools/h2spec-build.XXXXXX")
	trap 'rm -rf "$gobin"' EXIT
	GOBIN=$gobin CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "github.com/summerwind/h2spec/cmd/h2spec@$H2SPEC_VERSION"
	mv "$gobin/h2spec" "$BIN"
fi
echo "$BIN"
