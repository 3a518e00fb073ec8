#!/usr/bin/env bash
# Builds helm from the Go module proxy into the cache outside the checkout,
# once (test/k8s renders deploy/helm with it and dry-runs the result).
#
# Usage: test/tools/build-helm.sh [CACHE_DIR]
# Progress goes to stderr; stdout is the helm binary's path.
set -euo pipefail

HELM_VERSION=v3.21.4
CACHE_DIR=${1:-${SWITCHYARD_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/switchyard}}
BIN="$CACHE_DIR/tools/helm-$HELM_VERSION"

mkdir -p "$CACHE_DIR/tools"
exec 9>"$CACHE_DIR/tools/.helm.lock"
flock 9
if [[ -x "$BIN" ]]; then
	echo "build-helm: helm $HELM_VERSION cached at $BIN" >&2
else
	echo "build-helm: building helm $HELM_VERSION into $BIN (a cold build takes a few minutes)" >&2
	start=$SECONDS
	gobin=$(mktemp -d "$CACHE_DIR/tools/helm-build.XXXXXX")
	trap 'rm -rf "$gobin"' EXIT
	GOBIN=$gobin CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
	mv "$gobin/helm" "$BIN"
	echo "build-helm: helm built in $((SECONDS - start)) s" >&2
fi
echo "$BIN"
