#!/usr/bin/env bash
# One product process, three client protocols in turn (issue 17): what a
# request costs the product (`switchyard controller --data-plane=go`,
# manifests mode, metrics and the access log on, as product.sh runs it)
# over plain HTTP/1.1 (wrk), HTTPS with HTTP/1.1 (wrk) and HTTPS with
# HTTP/2 (h2load), 64 requests in flight each (wrk -c64; h2load -c8 -m8),
# rounds alternating the order. The product is pinned to CPU 1 with
# GOMAXPROCS=1, the load and the backends to CPU 0. Per run: requests per
# second and the product's CPU per request (/proc, its own request count);
# then the medians.
#
#   test/bench/product-protocols.sh [SECONDS] [ROUNDS]
#
# Installs what it needs (apt-get, as root). Ports 18680-18684.
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib/product.sh
# PRODUCT_ARGS adds controller flags (e.g. --http2-server=x/net).
read -r -a product_args <<<"${PRODUCT_ARGS:-}"
secs="${1:-5}" rounds="${2:-3}"
tmp="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
bench_need wrk wrk
bench_need h2load nghttp2-client
bench_need openssl openssl
bench_need curl curl

bench_build_product "$tmp/switchyard"
go build -o "$tmp/pbench" ./test/bench/proxy
bport=18681 http=18680 https=18683 status=18684
mkdir "$tmp/manifests"
bench_app_manifests "$tmp/manifests/bench.yaml" $bport 127.0.0.2 127.0.0.3 127.0.0.4
bench_app_tls "$tmp/manifests/bench.yaml" "$tmp"
taskset -c 0 "$tmp/pbench" backend -listen "127.0.0.2:$bport,127.0.0.3:$bport,127.0.0.4:$bport" &
pids+=($!)
GOMAXPROCS=1 taskset -c 1 "$tmp/switchyard" controller --data-plane=go --manifests "$tmp/manifests" --configmap bench/h2 "${product_args[@]}" \
	--http-port $http --https-port $https --status-port $status --listen-address 127.0.0.1 \
	>"$tmp/access.log" 2>"$tmp/stderr" &
pid=$!
pids+=($pid)
bench_wait_200 $http bench.local || { echo "product-protocols.sh: the product does not serve" >&2; exit 1; }

reqs() { curl -sf "http://127.0.0.1:$status/metrics" | awk '/^nginx_ingress_controller_requests[{ ]/ { s += $NF } END { printf "%.0f", s }'; }
ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
# load PROTO SECONDS: prints the requests per second.
load() {
	case $1 in
	h1) taskset -c 0 wrk -t2 -c64 -d"${2}s" -H 'Host: bench.local' "http://127.0.0.1:$http/" | awk '/Requests\/sec/ { print $2 }' ;;
	h1tls) taskset -c 0 wrk -t2 -c64 -d"${2}s" -H 'Host: bench.local' "https://127.0.0.1:$https/" | awk '/Requests\/sec/ { print $2 }' ;;
	h2) bench_h2load $https 8 8 "$2" taskset -c 0 ;;
	esac
}
protos=(h1 h1tls h2)
for p in "${protos[@]}"; do load "$p" 1 >/dev/null; done
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- proxy cmd || echo ', with changes')${PRODUCT_ARGS:+ with $PRODUCT_ARGS}, ${secs}s x $rounds rounds, pinned, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | protocol | rps | CPU us/req |"
echo "|---|---|---|---|"
for r in $(seq "$rounds"); do
	order=("${protos[@]}")
	[ $((r % 2)) = 0 ] && order=(h2 h1tls h1)
	for p in "${order[@]}"; do
		r0=$(reqs) t0=$(ticks)
		rps=$(load "$p" "$secs")
		r1=$(reqs) t1=$(ticks)
		cpu=$(awk -v n=$((r1 - r0)) -v t=$((t1 - t0)) -v hz="$hz" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
		echo "| $r | $p | ${rps%.*} | $cpu |"
		echo "$p $rps $cpu" >>"$tmp/rows"
	done
done
echo "# end $(date -u +%FT%TZ), load: $(cut -d' ' -f1-3 /proc/loadavg)"
for p in "${protos[@]}"; do
	awk -v p="$p" 'function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
			return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
		$1 == p { n++; r[n] = $2; c[n] = $3 }
		END { printf "median %s: %.0f rps, %.1f us CPU per request\n", p, med(r, n), med(c, n) }' "$tmp/rows"
done
