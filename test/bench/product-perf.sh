#!/usr/bin/env bash
# Where each proxy's CPU per request goes, kernel or user space (issue 17):
# the product (`switchyard controller --data-plane=go`, manifests mode,
# metrics and the access log on, as product.sh runs it) and nginx as
# ingress-nginx configures it (product.sh's "ingress"), one after the
# other, each pinned to CPU 1 (GOMAXPROCS=1, one worker) with the load
# and the backends on CPU 0. Under SECONDS of load each, `perf record -e
# cpu-clock` samples CPU 1; prints each proxy's requests, its CPU per
# request split into the kernel's and each user-space object's, and its
# system calls per request (strace -c -f over a second, shorter load).
# Installs what it needs (apt-get, as root).
#
#   test/bench/product-perf.sh [SECONDS] [CONNS] [H2_STREAMS]
#
# H2_STREAMS 0 (default): HTTP/1.1, wrk -t2 -cCONNS; otherwise HTTPS with
# HTTP/2 to the client, h2load -cCONNS -mH2_STREAMS. Ports 18580-18593.
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib/product.sh
# PRODUCT_ARGS adds controller flags (e.g. --http2-server=x/net).
read -r -a product_args <<<"${PRODUCT_ARGS:-}"
secs="${1:-5}" conns="${2:-8}" streams="${3:-0}"
tmp="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
bench_need perf linux-perf
bench_need strace strace
bench_need wrk wrk
bench_need h2load nghttp2-client
bench_need nginx nginx
bench_need openssl openssl
bench_need curl curl

bench_build_product "$tmp/switchyard"
go build -o "$tmp/pbench" ./test/bench/proxy
bport=18581 sy_http=18580 sy_https=18583 ng_http=18590 ng_https=18593
mkdir "$tmp/manifests"
bench_app_manifests "$tmp/manifests/bench.yaml" $bport 127.0.0.2 127.0.0.3 127.0.0.4
bench_app_tls "$tmp/manifests/bench.yaml" "$tmp"
bench_ingress_nginx_conf "$tmp/ingress" $ng_http $ng_https 1 on 1000000 $bport "$tmp"

taskset -c 0 "$tmp/pbench" backend -listen "127.0.0.2:$bport,127.0.0.3:$bport,127.0.0.4:$bport" &
pids+=($!)
GOMAXPROCS=1 taskset -c 1 "$tmp/switchyard" controller --data-plane=go --manifests "$tmp/manifests" --configmap bench/h2 "${product_args[@]}" \
	--http-port $sy_http --https-port $sy_https --status-port 18584 --listen-address 127.0.0.1 \
	>"$tmp/product.access.log" 2>"$tmp/product.stderr" &
product=$!
pids+=($product)
taskset -c 1 nginx -c "$tmp/ingress/nginx.conf" -p "$tmp/ingress" &
pids+=($!)
bench_wait_200 $sy_http bench.local || { echo "product-perf.sh: the product does not serve" >&2; exit 1; }
bench_wait_200 $ng_http bench.local || { echo "product-perf.sh: nginx does not serve" >&2; exit 1; }
ngworker=$(pgrep -f "nginx: worker process" -P "$(cat "$tmp/ingress/nginx.pid")")

# load HTTP_PORT HTTPS_PORT SECONDS: prints the requests served.
load() {
	local rps
	if [ "$streams" = 0 ]; then
		rps=$(taskset -c 0 wrk -t2 -c"$conns" -d"${3}s" -H 'Host: bench.local' "http://127.0.0.1:$1/" | awk '/Requests\/sec/ { print $2 }')
	else
		rps=$(bench_h2load "$2" "$conns" "$streams" "$3" taskset -c 0)
	fi
	awk -v r="$rps" -v s="$3" 'BEGIN { printf "%.0f\n", r * s }'
}

echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- proxy cmd || echo ', with changes')${PRODUCT_ARGS:+ with $PRODUCT_ARGS}, ${secs}s each, $conns conns$([ "$streams" = 0 ] || echo ", HTTP/2 $streams streams each"), load: $(cut -d' ' -f1-3 /proc/loadavg)"
for name in product ingress; do
	hp=$sy_http sp=$sy_https pid=$product
	[ $name = ingress ] && hp=$ng_http sp=$ng_https pid=$ngworker
	load $hp $sp 1 >/dev/null
	perf record -q -e cpu-clock -C 1 -o "$tmp/$name.perf" -- sleep "$secs" 2>/dev/null &
	rec=$!
	n=$(load $hp $sp "$secs")
	wait $rec
	echo "## $name: $n requests in ${secs}s; CPU 1 per request by object (µs):"
	perf report -i "$tmp/$name.perf" --no-children --sort dso --stdio -g none 2>/dev/null |
		awk -v n="$n" '/^# Event count/ { total = $NF } /%/ { p = $1; sub("%", "", p); printf "   %7.1f  %s\n", total * p / 100 / 1e3 / n, $2 }' | head -8
	timeout 3 strace -q -c -f -p "$pid" -o "$tmp/$name.strace" 2>/dev/null &
	st=$!
	sleep 0.3 # strace attaches
	n=$(load $hp $sp 2)
	wait $st || true
	echo "## $name: system calls per request (strace, ${n} requests; strace slows the proxy):"
	awk -v n="$n" '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ && $NF != "total" { printf "   %7.2f  %s\n", $4 / n, $NF }' "$tmp/$name.strace" | sort -rn | head -8
done
