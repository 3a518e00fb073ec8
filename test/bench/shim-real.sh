#!/usr/bin/env bash
# Switchyard's Lua shim versus ingress-nginx v1.15.1's own, unmodified Lua
# (issue 16, item 3). test/bench/shim.sh compares the shim with a one-line
# Lua round robin; this compares it with what it replaces: two nginx
# configurations shaped like ingress-nginx's nginx.tmpl, identical but for
# the Lua tree (ingress-nginx's rootfs/etc/nginx/lua alone, or with this
# repository's lua/ in front of it and `switchyard balancer` as the sidecar),
# the same /configuration/backends payload POSTed to both, three loopback
# backends (127.0.0.2-4), one location per case: round_robin, ewma, chash
# ($request_uri over 100 URIs), chashsubset (6 endpoints, subsets of 3),
# sticky_balanced and sticky_persistent (half the requests carry the
# affinity cookie a first request got, half carry none and get a new one),
# canary_weight (a canary backend with weight 30), canary_header (the canary
# by X-Canary equal to "yes"; wrk sends no header, "yes" and "no" in turn),
# canary_header_pattern (the same by a pattern, "on" and "off", matched in
# the nginx worker by both: ingress-nginx's balancer.lua and the shim's
# route.lua, with ngx.re.match),
# chash_canary_chash and chash_canary_chashsubset (a chash main with a chash
# canary, or a chashsubset one with subsets of 2, by weight 30). Both are
# checked to balance before anything is measured, and to agree where the
# picks are determined: the same route per header value, the same chash
# backend per URI, the same subset. nginx 1 and 2 workers x wrk -t2 at 8
# and 64 connections, rounds alternating real, shim, real, shim...; per cell
# the shim/real ratio of rps (median and range of the per-round ratios), of
# p99, and the sidecar's CPU seconds per run (/proc/<pid>/stat). wrk and the
# backends' nginx run under SCHED_FIFO (chrt), so that the fronts' latencies
# are not wrk's waits for a CPU (-- -isolate=false: all as equals), and each
# round records the time the hypervisor stole (/proc/stat) for the p99 of the
# quiet round pairs. Driver: test/bench/shimreal (main.go).
# With -- -interleave 250ms, one load process takes wrk's place: it runs the
# two fronts in turns of 250 ms (ABBA...) on connections it opens for each
# turn, so that the host's stalls fall on both, and a round is the duration
# of load on each front (test/bench/shimreal/interleave.go over the package
# test/bench/internal/turns). Its A/A reads
# every 8-connection cell within 5 % of 1.0 over 10 rounds, where wrk's did
# not resolve 10 % (docs/benchmarks.md, runs 32 and 35):
#   test/bench/shim-real.sh ... 3s 10 -- -interleave 250ms
#
# Sources (never committed; any directory outside the repository):
#   git clone --depth 1 -b controller-v1.15.1 https://github.com/kubernetes/ingress-nginx
#   git clone --depth 1 -b v0.05 https://github.com/openresty/lua-resty-balancer
#   git clone https://github.com/cloudflare/lua-resty-cookie
#     (cd lua-resty-cookie && git checkout f418d77082eaef48331302e84330488fdc810ef4)
#   git clone --depth 1 -b v0.09 https://github.com/openresty/lua-resty-lock
#   git clone --depth 1 -b v0.23 https://github.com/openresty/lua-resty-dns
# These are the versions ingress-nginx v1.15.1's image pins
# (images/nginx/rootfs/build.sh). lua-resty-dns is needed only because
# balancer.lua loads util/dns.lua. The driver builds lua-resty-balancer's
# chash.c into librestychash.so (cc -O2 -shared -fPIC) itself.
# Packages (Debian 12): nginx libnginx-mod-http-lua lua-resty-core lua-cjson
# wrk, and a C compiler. Do not install Debian's `luajit`: it removes
# libnginx-mod-http-lua. Run as root (nginx workers switch to nobody).
#
# Usage:
#   test/bench/shim-real.sh --ingress-nginx DIR --resty-balancer DIR \
#       --resty-cookie DIR --resty-lock DIR --resty-dns DIR \
#       [--rev REV] [duration] [rounds] [-- driver flags]
# Each DIR may also come from the environment: INGRESS_NGINX, RESTY_BALANCER,
# RESTY_COOKIE, RESTY_LOCK, RESTY_DNS. duration defaults to 5s, rounds to 3:
# the full matrix (11 cases x 2 x 2 x 2 configurations) takes about 30
# minutes on 2 cores. --rev REV measures the shim (lua/ and cmd/switchyard)
# as of git revision REV, from a temporary worktree, instead of the work
# tree. Driver flags after "--" shrink the matrix, e.g.
#   -- -cases round_robin,chash -workers 2 -connections 64
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib/product.sh

ingress="${INGRESS_NGINX:-}" balancer="${RESTY_BALANCER:-}" cookie="${RESTY_COOKIE:-}"
lock="${RESTY_LOCK:-}" dns="${RESTY_DNS:-}" rev=""
pos=() extra=()
while [ $# -gt 0 ]; do
	case "$1" in
	--ingress-nginx) ingress="$2"; shift 2 ;;
	--resty-balancer) balancer="$2"; shift 2 ;;
	--resty-cookie) cookie="$2"; shift 2 ;;
	--resty-lock) lock="$2"; shift 2 ;;
	--resty-dns) dns="$2"; shift 2 ;;
	--rev) rev="$2"; shift 2 ;;
	--) shift; extra=("$@"); break ;;
	-h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
	*) pos+=("$1"); shift ;;
	esac
done
dur="${pos[0]:-5s}"
rounds="${pos[1]:-3}"
for v in ingress balancer cookie lock dns; do
	if [ -z "${!v}" ]; then
		echo "shim-real.sh: missing a source directory ($v); see the header of $0" >&2
		exit 2
	fi
done
for tool in nginx wrk cc go; do
	command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || { echo "shim-real.sh: $tool is not installed" >&2; exit 2; }
done

tmp="$(mktemp -d)"
chmod 755 "$tmp"
cleanup() {
	[ -n "$rev" ] && git worktree remove --force "$tmp/src" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

if [ -n "$rev" ]; then
	commit="$(git rev-parse "$rev")"
	git worktree add -q --detach "$tmp/src" "$commit"
	src="$tmp/src"
else
	commit="$(git rev-parse HEAD)"
	if [ -n "$(git status --porcelain -- lua cmd balancer)" ]; then
		commit="$commit + uncommitted changes in lua/, cmd/ or balancer/"
	fi
	src="$PWD"
fi
bench_build_product "$tmp/switchyard" "$src"
# The shim's Lua is read by nginx workers (nobody): copy it where they can.
cp -r "$src/lua" "$tmp/lua"

go run ./test/bench/shimreal \
	-ingress-nginx "$ingress" -resty-balancer "$balancer" -resty-cookie "$cookie" \
	-resty-lock "$lock" -resty-dns "$dns" \
	-lua "$tmp/lua" -switchyard "$tmp/switchyard" -commit "$commit" \
	-duration "$dur" -rounds "$rounds" ${extra[@]+"${extra[@]}"}
