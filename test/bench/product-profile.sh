#!/usr/bin/env bash
# Profiles the product (issue 17): `switchyard controller --data-plane=go`
# in manifests mode, with its request metrics and access log on, as
# product.sh runs it (one Ingress, three backends), under a bounded wrk
# load; takes Go's CPU profile from its /debug/pprof (--profiling, on by
# default) and counts its CPU time, context switches and the requests.
#
#   test/bench/product-profile.sh [SECONDS] [CONNS] [PINNED]
#   H2=STREAMS test/bench/product-profile.sh [SECONDS] [CONNS] [PINNED]
#
# With H2 set the load is h2load over HTTPS with HTTP/2 to the client,
# STREAMS concurrent streams per connection (product.sh's h2 section: its
# self-signed certificate and keep-alive-requests 1000000, so no
# connection ends after 1000 requests).
#
# PINNED 1 (default): the product on CPU 1 with GOMAXPROCS=1, wrk and the
# backends on CPU 0; 0: nothing pinned, GOMAXPROCS=2. Prints pprof's top
# functions (flat and cumulative), the allocations per request and where
# they are made, and leaves the profiles and the binary in
# OUT (default a temporary directory), so `go tool pprof OUT/switchyard
# OUT/cpu.pprof` reads it further. Ports 18480-18486, apart from
# product.sh's.
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib/product.sh
# PRODUCT_ARGS adds controller flags (e.g. --http2-server=x/net).
read -r -a product_args <<<"${PRODUCT_ARGS:-}"
secs="${1:-10}"
conns="${2:-64}"
pinned="${3:-1}"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

bench_build_product "$out/switchyard"
go build -o "$out/pbench" ./test/bench/proxy
port=18481 http=18480 https=18483 status=18484 prof=18485
mkdir -p "$out/manifests"
bench_app_manifests "$out/manifests/bench.yaml" $port 127.0.0.2 127.0.0.3 127.0.0.4
h2="${H2:-}"
bench_app_load "$out/manifests/bench.yaml" "$out"

on1=() on0=() maxprocs=2
if [ "$pinned" = 1 ]; then
	on1=(taskset -c 1) on0=(taskset -c 0) maxprocs=1
fi
"${on0[@]}" "$out/pbench" backend -listen "127.0.0.2:$port,127.0.0.3:$port,127.0.0.4:$port" &
pids+=($!)
GOMAXPROCS=$maxprocs "${on1[@]}" "$out/switchyard" controller --data-plane=go --manifests "$out/manifests" "${cm[@]}" "${product_args[@]}" \
	--http-port $http --https-port $https --status-port $status --listen-address 127.0.0.1 \
	--profiler-port $prof >"$out/access.log" 2>"$out/stderr" &
pid=$!
pids+=($pid)
bench_wait_200 $http bench.local || true
# load SECONDS: the load for SECONDS, its summary line on standard output.
load() {
	if [ -n "$h2" ]; then
		echo "h2load: $(bench_h2load $https "$conns" "$h2" "$1" "${on0[@]}") requests/s"
	else
		"${on0[@]}" wrk -t2 -c"$conns" -d"${1}s" --latency -H 'Host: bench.local' "http://127.0.0.1:$http/" |
			awk '/Requests\/sec/ { print "wrk: " $0 }'
	fi
}
load 1 >/dev/null

reqs() { curl -sf "http://127.0.0.1:$status/metrics" | awk '/^nginx_ingress_controller_requests[{ ]/ { s += $NF } END { printf "%.0f", s }'; }
ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
switches() { cat /proc/"$pid"/task/*/status | awk '/ctxt_switches/ { s += $2 } END { print s }'; }
r0=$(reqs) t0=$(ticks) s0=$(switches)
curl -sf -o "$out/cpu.pprof" "http://127.0.0.1:$prof/debug/pprof/profile?seconds=$secs" &
cpid=$!
curl -sf -o "$out/allocs.pprof" "http://127.0.0.1:$prof/debug/pprof/allocs?seconds=$secs" &
apid=$!
load "$secs" >"$out/load.txt"
wait "$cpid" "$apid"
r1=$(reqs) t1=$(ticks) s1=$(switches)
hz=$(getconf CLK_TCK)
n=$((r1 - r0))
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- proxy cmd || echo ', with changes')${PRODUCT_ARGS:+ with $PRODUCT_ARGS}, ${secs}s, $conns conns${h2:+, HTTP/2 $h2 streams each}, pinned $pinned, load: $(cut -d' ' -f1-3 /proc/loadavg)"
sed 's/^/# /' "$out/load.txt"
awk -v n="$n" -v t="$((t1 - t0))" -v hz="$hz" -v s="$((s1 - s0))" -v secs="$secs" 'BEGIN {
	printf "# %d requests counted by the metrics; product CPU %.1f us/request (%.0f %% of a core), %.3f context switches/request\n",
		n, t / hz * 1e6 / n, 100 * t / hz / secs, s / n }'
echo "# access log: $(wc -l <"$out/access.log") lines"
allocs=$(go tool pprof -raw -sample_index=alloc_objects "$out/switchyard" "$out/allocs.pprof" 2>/dev/null |
	awk '/^Samples:/ { on = 1; next } on && /^ *[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+:/ { s += $1 } /^Locations/ { on = 0 } END { print s + 0 }')
awk -v a="$allocs" -v n="$n" 'BEGIN { printf "# allocations: %.1f per request (heap profile, sampled)\n", a / n }'
go tool pprof -top -nodecount=45 "$out/switchyard" "$out/cpu.pprof" 2>/dev/null | sed -n '1,55p'
echo "# cumulative:"
go tool pprof -top -cum -nodecount=60 "$out/switchyard" "$out/cpu.pprof" 2>/dev/null | sed -n '6,70p'
echo "# allocations by function:"
go tool pprof -top -sample_index=alloc_objects -nodecount=25 "$out/switchyard" "$out/allocs.pprof" 2>/dev/null | sed -n '6,32p'
echo "# profiles: $out/cpu.pprof $out/allocs.pprof"
