#!/usr/bin/env bash
# The cost of a rate limit and the access log on the Go plane (issue 19's
# benchmark): two `switchyard controller --data-plane=go` processes of the
# same build, in manifests mode with the defaults (request metrics on the
# status port, the upstreaminfo access log on standard output redirected to
# a file), one Ingress over three backends. "plain": the Ingress has
# enable-access-log: "false" (BASE=log keeps its log on); "limited": its
# Ingress logs and has limit-rps: "1000000" (a limit no client reaches
# here, so every request takes the limiter's path and is served). wrk -t2 -c64 in alternating rounds, the products
# pinned to CPU 1 (GOMAXPROCS=1), wrk and the backends to CPU 0. Prints per
# round rps and CPU per request of each, and the median [range] of the
# per-round ratios limited / unlimited. Needs root (apt-get), wrk, curl,
# taskset.
# Usage: [REV=<commit>] [BASE=nolog|log] test/bench/ratelimit.sh [seconds] [rounds]
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib/product.sh
secs="${1:-5}"
rounds="${2:-7}"
tmp="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
for c in wrk curl taskset; do
	command -v "$c" >/dev/null || apt-get install -y "$([ "$c" = taskset ] && echo util-linux || echo "$c")" >/dev/null 2>&1 || true
	command -v "$c" >/dev/null || { echo "ratelimit.sh: $c is missing" >&2; exit 1; }
done
if [ -n "${REV:-}" ]; then
	mkdir "$tmp/src"
	git archive "$REV" | tar -x -C "$tmp/src"
	(cd "$tmp/src" && go build -o "$tmp/pbench" ./test/bench/proxy)
	bench_build_product "$tmp/switchyard" "$tmp/src"
	measured="commit $(git rev-parse --short "$REV")"
else
	go build -o "$tmp/pbench" ./test/bench/proxy
	bench_build_product "$tmp/switchyard"
	measured="working tree at $(git rev-parse --short HEAD)"
fi
bport=18481
declare -A http=([plain]=18480 [limited]=18490) status=([plain]=18484 [limited]=18494) pid=()

# manifests NAME ANNOTATIONS: the one-Ingress manifests of product NAME.
manifests() {
	mkdir -p "$tmp/$1"
	bench_app_manifests "$tmp/$1/bench.yaml" $bport 127.0.0.2 127.0.0.3 127.0.0.4
	bench_app_ingress "$tmp/$1/bench.yaml" app bench.local "{$2}"
}
if [ "${BASE:-nolog}" = log ]; then
	manifests plain ""
else
	manifests plain 'nginx.ingress.kubernetes.io/enable-access-log: "false"'
fi
manifests limited 'nginx.ingress.kubernetes.io/limit-rps: "1000000"'

taskset -c 0 "$tmp/pbench" backend -listen "127.0.0.2:$bport,127.0.0.3:$bport,127.0.0.4:$bport" &
pids+=($!)
for p in plain limited; do
	GOMAXPROCS=1 taskset -c 1 "$tmp/switchyard" controller --data-plane=go --manifests "$tmp/$p" \
		--http-port "${http[$p]}" --https-port $((http[$p] + 3)) --status-port "${status[$p]}" --listen-address 127.0.0.1 \
		--profiling=false >"$tmp/$p.access.log" 2>"$tmp/$p.stderr" &
	pids+=($!)
	pid[$p]=$!
done
for p in plain limited; do
	for _ in $(seq 100); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Host: bench.local' "http://127.0.0.1:${http[$p]}/")" = 200 ] && continue 2
		sleep 0.1 # the controller is starting
	done
	echo "ratelimit.sh: $p did not serve" >&2
	tail -5 "$tmp/$p.stderr" >&2
	exit 1
done
hz=$(getconf CLK_TCK)
ticks() { awk '{ print $14 + $15 }' "/proc/${pid[$1]}/stat"; }
# run NAME: "rps cpu_us_per_req" of one wrk run.
run() {
	local t0 out rps n
	t0=$(ticks "$1")
	out=$(taskset -c 0 wrk -t2 -c64 -d"${secs}s" -H 'Host: bench.local' "http://127.0.0.1:${http[$1]}/")
	if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
		echo "ratelimit.sh: $1 answered errors:" >&2
		grep -E 'Non-2xx|Socket errors' <<<"$out" >&2
		exit 1
	fi
	read -r rps n < <(awk '/Requests\/sec/ { r = $2 } /requests in/ { n = $1 } END { print r, n }' <<<"$out")
	awk -v t0="$t0" -v t1="$(ticks "$1")" -v n="$n" -v hz="$hz" -v r="$rps" 'BEGIN { printf "%.0f %.1f\n", r, (t1 - t0) / hz * 1e6 / n }'
}
for p in plain limited; do taskset -c 0 wrk -t2 -c64 -d1s -H 'Host: bench.local' "http://127.0.0.1:${http[$p]}/" >/dev/null; done
echo "# $measured; $(go version | cut -d' ' -f3); ${secs}s x $rounds rounds, wrk -t2 -c64, plain's access log ${BASE:-nolog}; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# round  plain_rps plain_us/req  limited_rps limited_us/req  ratio"
ratios=() cpus=()
for r in $(seq "$rounds"); do
	if [ $((r % 2)) = 1 ]; then
		read -r prps pcpu < <(run plain)
		read -r lrps lcpu < <(run limited)
	else
		read -r lrps lcpu < <(run limited)
		read -r prps pcpu < <(run plain)
	fi
	ratio=$(awk -v a="$lrps" -v b="$prps" 'BEGIN { printf "%.3f", a / b }')
	ratios+=("$ratio")
	cpus+=("$(awk -v a="$lcpu" -v b="$pcpu" 'BEGIN { printf "%.3f", a / b }')")
	echo "  $r  $prps $pcpu  $lrps $lcpu  $ratio"
done
# median WHAT VALUES...: the median [range] of the values.
median() {
	local what="$1"
	shift
	printf '%s\n' "$@" | sort -n | awk -v w="$what" '{ v[NR] = $1 } END { printf "# %s: median %.3f [%.3f, %.3f] over %d rounds\n", w, (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[1], v[NR], NR }'
}
median "limited / plain rps" "${ratios[@]}"
median "limited / plain CPU per request" "${cpus[@]}"
for p in plain limited; do
	reqs=$(curl -sf "http://127.0.0.1:${status[$p]}/metrics" | awk '/^nginx_ingress_controller_requests[{ ]/ { s += $NF } END { printf "%.0f", s }')
	lines=$(wc -l <"$tmp/$p.access.log")
	echo "# $p: nginx_ingress_controller_requests $reqs, access log $lines lines"
	[ "${reqs:-0}" -gt 0 ] || { echo "ratelimit.sh: $p had no request metrics" >&2; exit 1; }
	if [ "$p" = limited ] && [ "$lines" -le 0 ]; then
		echo "ratelimit.sh: limited wrote no access log" >&2
		exit 1
	fi
done
