#!/usr/bin/env bash
# Memory per idle HTTP/2 connection (issue 17): the product (`switchyard
# controller --data-plane=go`, manifests mode, metrics and access log on,
# as product.sh runs it) with each HTTP/2 server (--http2-server=x/net and
# =switchyard), and nginx as ingress-nginx configures it (1 worker),
# each a fresh process per round. A client (test/bench/product h2idle)
# opens CONNS HTTPS connections with HTTP/2, makes one request on each and
# leaves them open; the script reads the server's resident memory (VmRSS,
# nginx's master and worker summed) before and with them, and, for the
# product, its Go heap and stacks in use and its goroutines from /metrics,
# with the connections open and again 3 s after the client closed them
# (goroutines back to where they started: nothing left behind).
#
#   test/bench/product-h2idle.sh [CONNS] [ROUNDS]
#
# Prints a row per run and the medians of the per-connection figures.
# Ports 18680-18693. Needs nginx, openssl, curl (installed when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib/product.sh
n="${1:-2000}" rounds="${2:-3}"
bench_scratch
chmod 755 "$tmp" # nginx's worker runs as nobody
bench_on_exit() { exec 3>&- 2>/dev/null || true; } # the client's hold
bench_need nginx nginx
bench_need openssl openssl
bench_need curl curl
ulimit -n "$((n * 2 + 1024))"

go build -o "$tmp/pbench" ./test/bench/proxy
bench_build_product "$tmp/switchyard"
go build -o "$tmp/client" ./test/bench/product
backend_port=18681 http=18680 https=18683 status=18684
mkdir "$tmp/manifests"
bench_app_manifests "$tmp/manifests/bench.yaml" $backend_port 127.0.0.2 127.0.0.3 127.0.0.4
bench_app_tls "$tmp/manifests/bench.yaml" "$tmp"
"$tmp/pbench" backend -listen "127.0.0.2:$backend_port,127.0.0.3:$backend_port,127.0.0.4:$backend_port" &
pids+=($!)

rss_kib() { # rss_kib PID: VmRSS of PID and its children, KiB
	# shellcheck disable=SC2046 # one path a word
	cat "/proc/$1/status" $(pgrep -P "$1" | sed 's|.*|/proc/&/status|') 2>/dev/null | awk '/^VmRSS:/ { s += $2 } END { print s }'
}
metric() { # metric NAME: the product's /metrics value of NAME
	curl -sf "http://127.0.0.1:$status/metrics" | awk -v m="$1" '$1 == m { print $2 }'
}
go_mem() { # heap in use + stacks in use, KiB; goroutines
	echo "$(awk -v h="$(metric go_memstats_heap_inuse_bytes)" -v s="$(metric go_memstats_stack_inuse_bytes)" 'BEGIN { printf "%.0f", (h + s) / 1024 }') $(metric go_goroutines)"
}

# one NAME: starts NAME fresh, measures, stops it; prints a row.
one() {
	local name="$1" pid base with after out gbase gwith gafter
	gbase="- -" gwith="- -" gafter="- -"
	case $name in
	x/net | switchyard)
		"$tmp/switchyard" controller --data-plane=go --manifests "$tmp/manifests" --configmap bench/h2 --http2-server="$name" \
			--http-port $http --https-port $https --status-port $status --listen-address 127.0.0.1 \
			>"$tmp/access.log" 2>"$tmp/stderr" &
		pid=$!
		;;
	ingress)
		bench_ingress_nginx_conf "$tmp/ingress" $http $https 1 on 1000000 $backend_port "$tmp"
		nginx -p "$tmp/ingress" -c "$tmp/ingress/nginx.conf" &
		pid=$!
		;;
	esac
	pids+=("$pid")
	bench_wait_200 $http bench.local || { echo "product-h2idle.sh: $name did not answer" >&2; tail -5 "$tmp/stderr" >&2; exit 1; }
	"$tmp/client" h2idle -addr "127.0.0.1:$https" -n 50 </dev/null >/dev/null # warm: TLS, the upstream pool
	sleep 1 # settles what the warm-up left
	base=$(rss_kib "$pid")
	[ "$name" = ingress ] || gbase=$(go_mem)
	mkfifo "$tmp/hold"
	"$tmp/client" h2idle -addr "127.0.0.1:$https" -n "$n" <"$tmp/hold" >"$tmp/client.out" &
	local cpid=$!
	exec 3>"$tmp/hold"
	for _ in $(seq 600); do
		grep -q '^ready' "$tmp/client.out" && break
		kill -0 "$cpid" 2>/dev/null || { echo "product-h2idle.sh: the client failed against $name" >&2; exit 1; }
		sleep 0.1 # polling the client's output
	done
	grep -q '^ready' "$tmp/client.out" || { echo "product-h2idle.sh: $name: $n connections not ready in 60 s" >&2; exit 1; }
	sleep 2 # lets the server's goroutines settle into their idle waits
	with=$(rss_kib "$pid")
	[ "$name" = ingress ] || gwith=$(go_mem)
	exec 3>&-
	wait "$cpid"
	rm "$tmp/hold"
	sleep 3 # the server sees the connections end
	after=$(rss_kib "$pid")
	[ "$name" = ingress ] || gafter=$(go_mem)
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	# shellcheck disable=SC2086 # fields
	set -- $gbase $gwith $gafter
	printf '| %s | %d | %s | %s | %.1f | %s | %s | %s | %s | %s |\n' "$name" "$n" "$base" "$with" \
		"$(awk -v a="$base" -v b="$with" -v n="$n" 'BEGIN { print (b - a) / n }')" \
		"$([ "$1" = - ] && echo - || awk -v a="$1" -v b="$3" -v n="$n" 'BEGIN { printf "%.1f", (b - a) / n }')" \
		"$2" "$4" "$6" "$after"
}

echo "# $(date -u +%FT%TZ), $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- proxy cmd || echo ' with uncommitted changes'), $n idle HTTP/2 connections, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| server | conns | RSS KiB before | RSS KiB with | RSS KiB per conn | Go heap+stack KiB per conn | goroutines before | with | 3 s after | RSS KiB after |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for r in $(seq "$rounds"); do
	for name in x/net switchyard ingress; do
		one "$name" | tee -a "$tmp/rows"
	done
done
echo
echo "Medians over $rounds rounds, KiB per idle connection: RSS / Go heap+stack"
awk -F'|' '{ gsub(/ /, "", $2); r[$2, ++k[$2]] = $6 + 0; g[$2, k[$2]] = $7 }
	function med(a, name, n,   i, j, t, v) { for (i = 1; i <= n; i++) v[i] = a[name, i]; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t } return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
	END { for (s in k) printf "%s: %.1f / %s\n", s, med(r, s, k[s]), (s == "ingress" ? "-" : sprintf("%.1f", med(g, s, k[s]))) }' "$tmp/rows"
