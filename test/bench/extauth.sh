#!/usr/bin/env bash
# External authentication on the Go data plane (issue 15): the product
# binary (`switchyard controller`, request metrics on) with three hosts on
# the same backends: plain (no auth), cached (auth-url with auth-cache-key
# $cookie__oauth2_proxy, the decision kept) and uncached (auth-url, one
# round trip to the service per request). The controller is pinned to
# CPU 1 with GOMAXPROCS=1; wrk, the backends and the auth service
# (test/bench/proxy auth) to CPU 0. wrk -c64, the three hosts alternated
# per round. Prints rps and p99 per round, then the medians of the
# per-round ratios to plain, with their range.
# Usage: test/bench/extauth.sh [seconds] [rounds]
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib/product.sh
secs="${1:-5}"
rounds="${2:-5}"
tmp="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/pbench" ./test/bench/proxy
bench_build_product "$tmp/switchyard"
taskset -c 0 "$tmp/pbench" backend -listen "127.0.0.2:18281,127.0.0.3:18281" &
pids+=($!)
taskset -c 0 "$tmp/pbench" auth -listen 127.0.0.4:18282 &
pids+=($!)

mkdir "$tmp/manifests"
bench_app_manifests "$tmp/manifests/bench.yaml" 18281 127.0.0.2 127.0.0.3
for host in plain cached uncached; do
	case $host in
	cached) ann='{nginx.ingress.kubernetes.io/auth-url: "http://127.0.0.4:18282/oauth2/auth", nginx.ingress.kubernetes.io/auth-cache-key: "$cookie__oauth2_proxy", nginx.ingress.kubernetes.io/auth-response-headers: X-Auth-Request-User}' ;;
	uncached) ann='{nginx.ingress.kubernetes.io/auth-url: "http://127.0.0.4:18282/oauth2/auth", nginx.ingress.kubernetes.io/auth-response-headers: X-Auth-Request-User}' ;;
	*) ann='{}' ;;
	esac
	bench_app_ingress "$tmp/manifests/bench.yaml" $host $host.bench "$ann"
done
GOMAXPROCS=1 taskset -c 1 "$tmp/switchyard" controller --manifests "$tmp/manifests" --http-port 18280 --https-port 18283 \
	--status-port 18284 --listen-address 127.0.0.1 2>"$tmp/controller.log" &
pids+=($!)
ready=""
for _ in $(seq 100); do
	if [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Host: cached.bench' -H 'Cookie: _oauth2_proxy=alice' http://127.0.0.1:18280/)" = 200 ]; then
		ready=1
		break
	fi
	sleep 0.1
done
[ -n "$ready" ] || { echo "switchyard did not serve cached.bench" >&2; tail "$tmp/controller.log" >&2; exit 1; }

# run <host>: prints "rps p99_us"
run() {
	taskset -c 0 wrk -t2 -c64 -d"${secs}s" --latency -H "Host: $1.bench" -H 'Cookie: _oauth2_proxy=alice' http://127.0.0.1:18280/ |
		awk 'function us(v) { if (v ~ /us$/) return v+0; if (v ~ /ms$/) return v*1000; if (v ~ /s$/) return v*1000000; return v }
			/Requests\/sec/ { rps = $2 } $1 == "99%" { p99 = us($2) }
			/Non-2xx|Socket errors/ { print "# wrk: " $0 > "/dev/stderr" }
			END { printf "%.0f %.0f\n", rps, p99 }'
}

echo "# $(date -u +%FT%TZ), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg), ${secs}s per run, $rounds rounds, wrk -c64"
echo "round plain_rps cached_rps uncached_rps plain_p99_us cached_p99_us uncached_p99_us"
for r in $(seq "$rounds"); do
	read -r prps pp99 < <(run plain)
	read -r crps cp99 < <(run cached)
	read -r urps up99 < <(run uncached)
	echo "$r $prps $crps $urps $pp99 $cp99 $up99"
done | tee "$tmp/rounds"
awk 'function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	{ n++; c[n] = $3 / $2; u[n] = $4 / $2; cp[n] = $6 / $5 }
	END {
		lo = hi = c[1]; ulo = uhi = u[1]
		for (i = 1; i <= n; i++) { if (c[i] < lo) lo = c[i]; if (c[i] > hi) hi = c[i]; if (u[i] < ulo) ulo = u[i]; if (u[i] > uhi) uhi = u[i] }
		printf "cached/plain rps: median %.3f (%.3f-%.3f); p99 median %.2fx\n", med(c, n), lo, hi, med(cp, n)
		printf "uncached/plain rps: median %.3f (%.3f-%.3f)\n", med(u, n), ulo, uhi
	}' "$tmp/rounds"
