#!/usr/bin/env bash
# Whether the product costs the other side of the machine more per request
# than nginx does (issue 17, the pinned HTTP/1.1 cells): the product
# (`switchyard controller --data-plane=go`, manifests mode, metrics and the
# access log on), nginx as ingress-nginx configures it ("ingress") and the
# same nginx without log ("plain"), pinned as product.sh pins them: the
# proxy on CPU 1 (GOMAXPROCS=1, one worker), wrk and the backends on CPU 0.
# Rounds alternate the three. Per run it prints the rps, the CPU per
# request of wrk (its user+system time), of the backends and of the proxy
# (/proc/PID/stat), and the TCP segments the machine sent per request
# (nstat TcpOutSegs, loopback both ways): a proxy that split its answers
# or woke the client more would show there, and wrk and the backends share
# one CPU, so their cost bounds the rps as much as the proxy's.
# Installs what it needs (apt-get, as root).
#
#   test/bench/product-clientcost.sh [SECONDS] [CONNS] [ROUNDS]
#
# keep-alive-requests is 1000 on all three, ingress-nginx's default, as in
# product.sh's HTTP/1.1 cells. Ports 18680-18703.
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib/product.sh
secs="${1:-5}" conns="${2:-8}" rounds="${3:-3}"
bench_need wrk wrk
bench_need nginx nginx
bench_need nstat iproute2
bench_need taskset util-linux
bench_need openssl openssl
bench_need curl curl
[ -x /usr/bin/time ] || bench_need /usr/bin/time time
bench_scratch
chmod 755 "$tmp" # nginx's workers run as nobody

bench_build_product "$tmp/switchyard"
go build -o "$tmp/pbench" ./test/bench/proxy
bport=18681 sy_http=18680 sy_https=18683 sy_status=18684
ng_http=18690 ng_https=18693 pl_http=18700 pl_https=18703
mkdir "$tmp/manifests"
bench_app_manifests "$tmp/manifests/bench.yaml" $bport 127.0.0.2 127.0.0.3 127.0.0.4
bench_app_tls "$tmp/manifests/bench.yaml" "$tmp"
bench_ingress_nginx_conf "$tmp/ingress" $ng_http $ng_https 1 on 1000 $bport "$tmp"
bench_ingress_nginx_conf "$tmp/plain" $pl_http $pl_https 1 off 1000 $bport "$tmp"

taskset -c 0 "$tmp/pbench" backend -listen "127.0.0.2:$bport,127.0.0.3:$bport,127.0.0.4:$bport" &
backend=$!
pids+=("$backend")
GOMAXPROCS=1 taskset -c 1 "$tmp/switchyard" controller --data-plane=go --manifests "$tmp/manifests" \
	--http-port $sy_http --https-port $sy_https --status-port $sy_status --listen-address 127.0.0.1 \
	>"$tmp/product.access.log" 2>"$tmp/product.stderr" &
product=$!
pids+=("$product")
for n in ingress plain; do
	taskset -c 1 nginx -c "$tmp/$n/nginx.conf" -p "$tmp/$n" &
	pids+=($!)
done
bench_wait_200 $sy_http bench.local || { echo "product-clientcost.sh: the product does not serve" >&2; exit 1; }
bench_wait_200 $ng_http bench.local || { echo "product-clientcost.sh: nginx (ingress) does not serve" >&2; exit 1; }
bench_wait_200 $pl_http bench.local || { echo "product-clientcost.sh: nginx (plain) does not serve" >&2; exit 1; }
ingress=$(pgrep -f "nginx: worker process" -P "$(cat "$tmp/ingress/nginx.pid")")
plain=$(pgrep -f "nginx: worker process" -P "$(cat "$tmp/plain/nginx.pid")")

segs() { nstat -az TcpOutSegs | awk '$1 == "TcpOutSegs" { print $2 }'; }
hz=$(getconf CLK_TCK)
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- proxy cmd || echo ', with changes'), ${secs}s runs, $conns conns, $rounds rounds, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# round proxy rps wrk_us_per_req backends_us_per_req proxy_us_per_req segments_per_req"
for r in $(seq "$rounds"); do
	for name in product ingress plain; do
		case $name in
		product) port=$sy_http pid=$product ;;
		ingress) port=$ng_http pid=$ingress ;;
		plain) port=$pl_http pid=$plain ;;
		esac
		taskset -c 0 wrk -t2 -c"$conns" -d1s -H 'Host: bench.local' "http://127.0.0.1:$port/" >/dev/null # warm-up
		b0=$(bench_ticks "$backend") p0=$(bench_ticks "$pid") s0=$(segs)
		out=$({ /usr/bin/time -f "cpu %U %S" taskset -c 0 wrk -t2 -c"$conns" -d"${secs}s" -H 'Host: bench.local' "http://127.0.0.1:$port/"; } 2>&1)
		b1=$(bench_ticks "$backend") p1=$(bench_ticks "$pid") s1=$(segs)
		grep -q "Non-2xx\|Socket errors" <<<"$out" && { echo "product-clientcost.sh: $name answered errors:" >&2; echo "$out" >&2; exit 1; }
		awk -v r="$r" -v n="$name" -v s="$secs" -v hz="$hz" -v b=$((b1 - b0)) -v p=$((p1 - p0)) -v sg=$((s1 - s0)) '
			/Requests\/sec/ { rps = $2 } /^cpu / { w = $2 + $3 }
			END { q = rps * s; printf "run %d %s %.0f %.1f %.1f %.1f %.2f\n", r, n, rps, w * 1e6 / q, b / hz * 1e6 / q, p / hz * 1e6 / q, sg / q }' <<<"$out"
	done
done | tee "$tmp/runs"
echo "# medians over the rounds: rps, wrk, backends, proxy (µs per request), segments per request"
for name in product ingress plain; do
	awk -v n="$name" '$3 == n' "$tmp/runs" | awk -v n="$name" '
		function med(col,   i, j, t, k) { k = 0; for (i = 1; i <= NR; i++) v[++k] = a[i, col]; for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }; return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2 }
		{ for (c = 4; c <= 8; c++) a[NR, c] = $c }
		END { printf "%-8s %8.0f %6.1f %6.1f %6.1f %5.2f\n", n, med(4), med(5), med(6), med(7), med(8) }'
done
