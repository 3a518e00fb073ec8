#!/usr/bin/env bash
# The Go data plane (package proxy) against Debian's nginx with a plain
# upstream block (issue 6), same run, same three loopback backends (a tiny
# fasthttp static server on 127.0.0.2-4). nginx has a plain upstream block
# (no Lua) and sets the request headers ingress-nginx's template sets (as
# nginxcompat renders them and as the Go proxy sends them: X-Request-ID,
# X-Real-IP, X-Forwarded-For/-Host/-Port/-Proto/-Scheme, X-Scheme), so both
# send the backends the same request. Each proxy gets the same CPU
# budget: pinned to CPU 1 (nginx: 1 worker; Go: GOMAXPROCS=1), wrk and the
# backends pinned to CPU 0. wrk at 8 and 64 connections, keep-alive, the two
# proxies alternated per round. Reports rps, p50, p99 and the ratio Go/nginx,
# then, per round at 64 connections, the CPU each of nginx's worker, the Go
# proxy and the floor (test/bench/proxy floor) spends per request, and how
# busy both CPUs were.
# Usage: test/bench/proxy.sh [seconds] [rounds]
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=test/bench/lib/proxy-nginx.sh
. test/bench/lib/proxy-nginx.sh
secs="${1:-10}"
rounds="${2:-2}"
tmp="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/pbench" ./test/bench/proxy
backends="127.0.0.2:18181,127.0.0.3:18181,127.0.0.4:18181"
taskset -c 0 "$tmp/pbench" backend -listen "$backends" &
pids+=($!)

bench_nginx_conf "$tmp/nginx" 18180 18181
taskset -c 1 /usr/sbin/nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" &
pids+=($!)
ngpid=$!
GOMAXPROCS=1 taskset -c 1 "$tmp/pbench" proxy -listen 127.0.0.1:18190 -backends "$backends" -host bench.local &
pids+=($!)
gopid=$!
# The floor: bytes passed through by a goroutine per connection (see
# test/bench/proxy), for the CPU table below.
GOMAXPROCS=1 taskset -c 1 "$tmp/pbench" floor -listen 127.0.0.1:18191 -backends "$backends" &
pids+=($!)
floorpid=$!

bench_wait_ports 18180 18190 18191

# run <port> <conns>: prints "rps p50_us p99_us"
run() {
	taskset -c 0 wrk -t2 -c"$2" -d"${secs}s" --latency -H 'Host: bench.local' "http://127.0.0.1:$1/" |
		awk 'function us(v) { if (v ~ /us$/) return v+0; if (v ~ /ms$/) return v*1000; if (v ~ /s$/) return v*1000000; return v }
			/Requests\/sec/ { rps = $2 } $1 == "50%" { p50 = us($2) } $1 == "99%" { p99 = us($2) }
			/Non-2xx|Socket errors/ { print "# wrk: " $0 > "/dev/stderr" }
			END { printf "%.0f %.0f %.0f\n", rps, p50, p99 }'
}

echo "# $(date -u +%FT%TZ), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg), ${secs}s per run, $rounds rounds"
printf '| conns | round | nginx rps | nginx p50 | nginx p99 | Go rps | Go p50 | Go p99 | rps Go/nginx | p99 Go/nginx |\n'
printf '|---|---|---|---|---|---|---|---|---|---|\n'
for c in 8 64; do
	for r in $(seq "$rounds"); do
		read -r nr n50 n99 < <(run 18180 "$c")
		read -r gr g50 g99 < <(run 18190 "$c")
		awk -v c="$c" -v r="$r" -v nr="$nr" -v n50="$n50" -v n99="$n99" -v gr="$gr" -v g50="$g50" -v g99="$g99" 'BEGIN {
			printf "| %d | %d | %d | %d us | %d us | %d | %d us | %d us | %.2fx | %.2fx |\n", c, r, nr, n50, n99, gr, g50, g99, gr/nr, g99/n99 }'
	done
done

# cpurun <port> <pid>: one 64-connection run; prints "rps user_us sys_us
# cpu0_busy cpu1_busy": the serving process's user and system CPU per
# request (/proc/<pid>/stat, clock ticks) and each CPU's busy share
# (/proc/stat) over the run.
cpurun() {
	local t0 c0 t1 c1 n
	t0=$(awk '{print $14, $15}' "/proc/$2/stat")
	c0=$(grep -E '^cpu[01] ' /proc/stat)
	n=$(taskset -c 0 wrk -t2 -c64 -d"${secs}s" -H 'Host: bench.local' "http://127.0.0.1:$1/" | awk '/requests in/ { print $1 }')
	t1=$(awk '{print $14, $15}' "/proc/$2/stat")
	c1=$(grep -E '^cpu[01] ' /proc/stat)
	awk -v n="$n" -v secs="$secs" -v hz="$(getconf CLK_TCK)" -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" 'BEGIN {
		split(t0, a, " "); split(t1, b, " ")
		printf "%d %.2f %.2f", n / secs, (b[1] - a[1]) * 1e6 / hz / n, (b[2] - a[2]) * 1e6 / hz / n
		split(c0, x, "\n"); split(c1, y, "\n")
		for (i = 1; i <= 2; i++) {
			split(x[i], p, " "); split(y[i], q, " ")
			tot = 0; idle = 0
			for (j = 2; j <= length(p); j++) { d = q[j] - p[j]; tot += d; if (j == 5 || j == 6) idle += d }
			printf " %.1f", 100 * (tot - idle) / tot
		}
		printf "\n" }'
}

ngworker=$(pgrep -P "$ngpid" | head -1)
echo
echo "CPU per request at 64 connections (user and system, microseconds) and CPU busy (%):"
printf '| round | proxy | rps | user us/req | system us/req | CPU 0 busy | CPU 1 busy |\n'
printf '|---|---|---|---|---|---|---|\n'
for r in $(seq "$rounds"); do
	for v in "nginx 18180 $ngworker" "go 18190 $gopid" "floor 18191 $floorpid"; do
		read -r name port pid <<<"$v"
		read -r rps u sy b0 b1 < <(cpurun "$port" "$pid")
		printf '| %d | %s | %d | %s | %s | %s | %s |\n' "$r" "$name" "$rps" "$u" "$sy" "$b0" "$b1"
	done
done
