#!/usr/bin/env bash
# A soak of the product's HTTP/2 front end (issue 17): `switchyard
# controller --data-plane=go` (manifests mode, metrics and access log on)
# serving HTTPS with --http2-server=SERVER, under test/bench/h2soak's mixed
# workload for DURATION: small and large GETs, echoed POSTs, streams the
# client resets, requests it abandons, connections closed after a request's
# HEADERS, connections dropped and reopened. Every answer is checked. Every
# 30 s the script samples the product's goroutines, resident memory and Go
# heap in use from its /metrics; after the load it waits 5 s and samples
# again. Fails if any answer was wrong, if the product died, or if more
# than 300 goroutines (the idle handler workers, at most 256, and
# fasthttp's) outlive the load beyond those it started with.
#
#   test/bench/h2-soak.sh [DURATION] [SERVER] [WORKERS]
#
# DURATION as Go parses it (default 10m); SERVER switchyard (default) or
# x/net; WORKERS the load's concurrent clients (default 16). Ports 18880-18884.
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib/product.sh
dur="${1:-10m}" server="${2:-switchyard}" workers="${3:-16}"
bench_scratch
bench_need openssl openssl
bench_need curl curl
bench_build_product "$tmp/switchyard"
go build -o "$tmp/h2soak" ./test/bench/h2soak
backend_port=18881 https=18883 status=18884
mkdir "$tmp/manifests"
bench_app_manifests "$tmp/manifests/bench.yaml" $backend_port 127.0.0.2 127.0.0.3 127.0.0.4
bench_app_tls "$tmp/manifests/bench.yaml" "$tmp"
"$tmp/switchyard" controller --data-plane=go --manifests "$tmp/manifests" --http2-server="$server" \
	--http-port 18880 --https-port $https --status-port $status --listen-address 127.0.0.1 \
	>"$tmp/access.log" 2>"$tmp/stderr" &
sy=$!
pids+=($sy)

sample() { # sample LABEL: a row of the product's figures
	curl -sf "http://127.0.0.1:$status/metrics" | awk -v l="$1" '
		$1 == "go_goroutines" { g = $2 } $1 == "process_resident_memory_bytes" { r = $2 }
		$1 == "go_memstats_heap_inuse_bytes" { h = $2 } /^nginx_ingress_controller_requests[{ ]/ { n += $NF }
		END { printf "| %s | %d | %.1f | %.1f | %d |\n", l, g, r / 1048576, h / 1048576, n }'
}

echo "# $(date -u +%FT%TZ), $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- proxy cmd || echo ' with uncommitted changes'), --http2-server=$server, $dur, $workers workers, load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$tmp/h2soak" -addr "127.0.0.1:$https" -sni bench.local -backends "127.0.0.2:$backend_port,127.0.0.3:$backend_port,127.0.0.4:$backend_port" \
	-c "$workers" -d "$dur" >"$tmp/soak.out" 2>&1 &
load=$!
pids+=($load)
bench_wait_200 $status localhost -o /dev/null 2>/dev/null || true
echo "| when | goroutines | RSS MiB | Go heap in use MiB | requests |"
echo "|---|---|---|---|---|"
sleep 2 # the load's first requests
start=$(curl -sf "http://127.0.0.1:$status/metrics" | awk '$1 == "go_goroutines" { print $2 }')
sample "start"
t0=$(date +%s)
while kill -0 $load 2>/dev/null; do
	sleep 30 # the sampling interval
	kill -0 $load 2>/dev/null && sample "+$(($(date +%s) - t0)) s"
done
rc=0
wait $load || rc=$?
cat "$tmp/soak.out"
kill -0 $sy 2>/dev/null || { echo "h2-soak.sh: the product died" >&2; tail -20 "$tmp/stderr" >&2; exit 1; }
sleep 5 # the connections' ends reach the product
sample "5 s after"
left=$(curl -sf "http://127.0.0.1:$status/metrics" | awk '$1 == "go_goroutines" { print $2 }')
echo "# product log lines by severity: $(cut -c1 "$tmp/stderr" | sort | uniq -c | tr '\n' ' ')"
grep '^[EW][0-9]' "$tmp/stderr" | sed 's/^[EW][0-9:. ]*[0-9]* [a-z_.]*:[0-9]*\] //' | sort | uniq -c | sort -rn | head -5 | sed 's/^/#   /' || true
[ "$rc" = 0 ] || { echo "h2-soak.sh: wrong answers (above)" >&2; exit 1; }
if [ "$left" -gt $((start + 300)) ]; then
	echo "h2-soak.sh: $left goroutines 5 s after the load, $start at its start" >&2
	exit 1
fi
