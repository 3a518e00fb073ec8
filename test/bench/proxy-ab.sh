#!/usr/bin/env bash
# Two builds of the Go proxy (package proxy) head to head, with nginx as the
# reference, in short interleaved rounds: on this shared VM the speed moves
# by tens of percent over minutes, so builds measured minutes apart cannot
# be compared, while rounds a few seconds apart can. Same setup as
# test/bench/proxy.sh (three fasthttp backends and wrk pinned to CPU 0;
# nginx with 1 worker and each Go proxy with GOMAXPROCS=1 pinned to CPU 1),
# wrk at 64 connections (CONNS=n for another number). Per round and proxy
# it prints rps and the serving
# process's CPU (user + system) per request; then the medians, and the
# median per-round ratios B/A and B/nginx.
# Usage: test/bench/proxy-ab.sh REV_A REV_B [seconds] [rounds]
#   REV_A, REV_B: git revisions (a commit, a branch, HEAD; "." is the work tree)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=test/bench/lib/proxy-nginx.sh
. test/bench/lib/proxy-nginx.sh
[ $# -ge 2 ] || { echo "usage: $0 REV_A REV_B [seconds] [rounds]" >&2; exit 2; }
reva="$1" revb="$2" secs="${3:-3}" rounds="${4:-10}" conns="${CONNS:-64}"
tmp="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	git worktree remove --force "$tmp/src" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# build <rev> <out>: builds test/bench/proxy as of rev.
build() {
	if [ "$1" = . ]; then
		go build -o "$2" ./test/bench/proxy
		return
	fi
	git worktree add -q --detach "$tmp/src" "$1"
	(cd "$tmp/src" && go build -o "$2" ./test/bench/proxy)
	git worktree remove --force "$tmp/src"
}
build "$reva" "$tmp/a"
build "$revb" "$tmp/b"

backends="127.0.0.2:18281,127.0.0.3:18281,127.0.0.4:18281"
taskset -c 0 "$tmp/a" backend -listen "$backends" &
pids+=($!)
bench_nginx_conf "$tmp/nginx" 18280 18281
taskset -c 1 /usr/sbin/nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" &
pids+=($!)
ngpid=$!
GOMAXPROCS=1 taskset -c 1 "$tmp/a" proxy -listen 127.0.0.1:18290 -backends "$backends" -host bench.local &
pids+=($!)
apid=$!
GOMAXPROCS=1 taskset -c 1 "$tmp/b" proxy -listen 127.0.0.1:18291 -backends "$backends" -host bench.local &
pids+=($!)
bpid=$!
bench_wait_ports 18280 18290 18291
ngworker=$(pgrep -P "$ngpid" | head -1)

# one <port> <pid>: prints "rps cpu_us_per_request" of one wrk run.
one() {
	local t0 t1 n
	t0=$(awk '{print $14 + $15}' "/proc/$2/stat")
	n=$(taskset -c 0 wrk -t2 -c"$conns" -d"${secs}s" -H 'Host: bench.local' "http://127.0.0.1:$1/" | awk '/requests in/ { print $1 }')
	t1=$(awk '{print $14 + $15}' "/proc/$2/stat")
	awk -v n="$n" -v s="$secs" -v t0="$t0" -v t1="$t1" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%d %.2f\n", n / s, (t1 - t0) * 1e6 / hz / n }'
}

echo "# $(date -u +%FT%TZ), A=$reva ($(git rev-parse --short "$reva" 2>/dev/null || echo worktree)), B=$revb ($(git rev-parse --short "$revb" 2>/dev/null || echo worktree)), ${secs}s per run, $rounds rounds, $conns connections"
printf '| round | nginx rps | nginx us/req | A rps | A us/req | B rps | B us/req | B/A rps | B/nginx rps |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
out="$tmp/rounds"
for r in $(seq "$rounds"); do
	read -r nr nc < <(one 18280 "$ngworker")
	read -r ar ac < <(one 18290 "$apid")
	read -r br bc < <(one 18291 "$bpid")
	echo "$nr $nc $ar $ac $br $bc" >>"$out"
	awk -v r="$r" -v nr="$nr" -v nc="$nc" -v ar="$ar" -v ac="$ac" -v br="$br" -v bc="$bc" 'BEGIN {
		printf "| %d | %d | %s | %d | %s | %d | %s | %.3f | %.3f |\n", r, nr, nc, ar, ac, br, bc, br / ar, br / nr }'
done
# median <awk expression over $1..$6>
median() { awk "{ print $1 }" "$out" | sort -g | awk '{ v[NR] = $1 } END { printf "%.3f", (v[int((NR + 1) / 2)] + v[int(NR / 2) + 1]) / 2 }'; }
echo
echo "medians: nginx $(median '$1') rps $(median '$2') us/req; A $(median '$3') rps $(median '$4') us/req; B $(median '$5') rps $(median '$6') us/req"
echo "median per-round ratios: B/A rps $(median '$5/$3'), B/A us/req $(median '$6/$4'), B/nginx rps $(median '$5/$1'), A/nginx rps $(median '$3/$1')"
