#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy into a cache
# directory outside the checkout, keyed by version, once; later runs reuse the
# binaries. The two throwaway modules beside this script (kube-apiserver/,
# etcd/) have their own go.mod and go.sum, so the project's go.mod never
# requires k8s.io/kubernetes.
#
# Usage: test/tools/build-k8s.sh [CACHE_DIR]
# Progress goes to stderr; stdout is the bin directory, which test/k8s finds
# by itself ($SWITCHYARD_K8S_BIN overrides it).
set -euo pipefail

K8S_VERSION=v1.33.13
ETCD_VERSION=v3.5.21
here=$(cd "$(dirname "$0")" && pwd)
CACHE_DIR=${1:-${SWITCHYARD_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/switchyard}}
BIN="$CACHE_DIR/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"

mkdir -p "$BIN"
# One build at a time (parallel setup runs wait here, then reuse the result).
exec 9>"$BIN/.lock"
flock 9

if [[ -x "$BIN/kube-apiserver" ]]; then
	echo "build-k8s: kube-apiserver $K8S_VERSION cached in $BIN" >&2
else
	ldflags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=33 -X $pkg.gitTreeState=clean"
	done
	echo "build-k8s: building kube-apiserver $K8S_VERSION into $BIN (a cold build takes 5-10 minutes)" >&2
	start=$SECONDS
	CGO_ENABLED=0 go build -C "$here/kube-apiserver" -trimpath -ldflags "$ldflags" -o "$BIN/kube-apiserver.tmp" .
	mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
	echo "build-k8s: kube-apiserver built in $((SECONDS - start)) s" >&2
fi

if [[ -x "$BIN/etcd" ]]; then
	echo "build-k8s: etcd $ETCD_VERSION cached in $BIN" >&2
else
	echo "build-k8s: building etcd $ETCD_VERSION into $BIN" >&2
	start=$SECONDS
	CGO_ENABLED=0 go build -C "$here/etcd" -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
	mv "$BIN/etcd.tmp" "$BIN/etcd"
	echo "build-k8s: etcd built in $((SECONDS - start)) s" >&2
fi
echo "$BIN"
