#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine. Idempotent:
# a second run installs nothing and says so.
set -euo pipefail

need_pkgs=()
for p in nginx libnginx-mod-http-lua lua-resty-core lua-cjson wrk iproute2 util-linux chromium; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$p")
done
# mmdebstrap, umoci and setcap build the controller image (make image,
# deploy/image/build.sh; test/image runs it).
for p in mmdebstrap umoci libcap2-bin; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
	echo "setup: installing ${need_pkgs[*]}"
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
else
	echo "setup: Debian packages present"
fi

# kube-apiserver v1.33.13 and etcd v3.5.21 for the end-to-end tests: built
# once from the Go module proxy (test/tools/) into a cache outside the
# checkout, keyed by version, and reused afterwards. test/k8s computes the
# same path; SWITCHYARD_K8S_BIN overrides it.
bin=$("$(dirname "$0")/tools/build-k8s.sh")
echo "setup: kube-apiserver and etcd in $bin (tests find them there; SWITCHYARD_K8S_BIN overrides)"

# helm, for rendering the chart under deploy/helm in the tests (built from
# the Go module proxy, cached beside the binaries above).
helm=$("$(dirname "$0")/tools/build-helm.sh")
echo "setup: helm at $helm (SWITCHYARD_HELM overrides)"

# h2spec, the HTTP/2 conformance tester, for proxy/h2srv's conformance
# test (built from the Go module proxy, cached beside the binaries above).
h2spec=$("$(dirname "$0")/tools/build-h2spec.sh")
echo "setup: h2spec at $h2spec (SWITCHYARD_H2SPEC overrides)"
