#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine. Idempotent:
# a second run installs nothing.
set -euo pipefail

need_pkgs=()
for p in nginx libnginx-mod-http-lua lua-resty-core lua-cjson wrk iproute2 util-linux chromium; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
	echo "setup: installing ${need_pkgs[*]}"
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
