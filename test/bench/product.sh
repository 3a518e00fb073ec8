#!/usr/bin/env bash
# The product against nginx (issue 17, items 1 and 3): `switchyard
# controller --data-plane=go` in manifests mode (one Ingress, host
# bench.local, TLS from a kubernetes.io/tls Secret, three backends), with
# its defaults: ingress-nginx's request metrics on the status port and the
# upstreaminfo access log on standard output, redirected to a file as a
# container log would be. Beside it, in the same run:
#   ingress  Debian's nginx configured as ingress-nginx v1.15.1's template
#            and defaults configure it (log_format upstreaminfo, access_log
#            to a file, no buffer; upstream keep-alive 320 / 10000 / 60s;
#            worker_connections 16384; its proxy headers, proxy_buffering
#            off, TLS session cache shared:SSL:10m, tickets off; HSTS on
#            HTTPS), without its Lua (balancer_by_lua, the monitor's log
#            phase): a plain round-robin upstream block;
#   plain    the same nginx without access log: the ceiling.
# Sections (each round runs the three once, the order rotating per round):
#   pinned    proxies on CPU 1 (nginx 1 worker, GOMAXPROCS=1), wrk and the
#             backends (test/bench/proxy backend) on CPU 0; HTTP/1.1
#             keep-alive, wrk at 8 and 64 connections;
#   unpinned  everything on both cores (nginx 2 workers, GOMAXPROCS=2);
#   h2        pinned; HTTPS with HTTP/2 to the client (h2load): 64 streams
#             over 8 connections, and 64 connections of one stream;
#   tls       pinned; new TLS connections per second, session resumption
#             on (test/bench/product tlsconns: one request per connection,
#             reports the resumed fraction).
# Each run reports rps, p99 (wrk; h2load's per-request log), the proxy's
# CPU per request (utime+stime of its processes, /proc/PID/stat) and its
# CPU use in % of one core. The summary gives, per cell, medians over the
# rounds and the median [range] of the per-round ratios product ÷ ingress
# and product ÷ plain. At the end of each phase the script scrapes the
# product's /metrics and fails unless nginx_ingress_controller_requests
# is non-zero and the access log grew.
# TURNS=SLICE (e.g. 250ms) runs the HTTP/1.1 cells with the interleaved
# load (test/bench/product turns, package test/bench/internal/turns) in
# wrk's place: one load process gives the three proxies the load in turns
# of SLICE, in passes forward and back, new connections per turn, so the
# host's stalls fall on all three; a round is [seconds] of load on each.
# The same GET / with Host bench.local; p99 from the load's own histogram
# (1 % buckets), and per proxy a comment line with the p50, p90, p99
# and p99.9 of all rounds pooled; per round and proxy a "# shared" line
# gives the CPU per request the load process and the backends spent
# during that proxy's turns.
# AA=1 puts a second nginx configured as ingress-nginx configures it in the
# product's place (HTTP/1.1 phases only): what the ratios read when
# nothing differs. H1_ONLY=1 leaves the HTTP/2 and TLS phase out.
# Needs root (apt-get for missing tools), wrk, nginx, h2load
# (nghttp2-client), openssl, curl, taskset.
# Usage: [REV=<commit>] [TURNS=250ms] [AA=1] [H1_ONLY=1] test/bench/product.sh [seconds] [rounds]
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib/product.sh
# PRODUCT_ARGS adds controller flags (e.g. --http2-server=x/net).
read -r -a product_args <<<"${PRODUCT_ARGS:-}"
secs="${1:-5}"
rounds="${2:-5}"
tmp="$(mktemp -d)"
chmod 755 "$tmp" # nginx's workers run as nobody
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

bench_need wrk wrk
bench_need nginx nginx
bench_need h2load nghttp2-client
bench_need openssl openssl
bench_need curl curl
bench_need taskset util-linux

# REV=<commit> builds the product and the backends from that commit (git
# archive), not from the working tree, which others may be editing.
if [ -n "${REV:-}" ]; then
	mkdir "$tmp/src"
	git archive "$REV" | tar -x -C "$tmp/src"
	(cd "$tmp/src" && go build -o "$tmp/pbench" ./test/bench/proxy)
	bench_build_product "$tmp/switchyard" "$tmp/src"
	measured="commit $(git rev-parse --short "$REV")"
else
	go build -o "$tmp/pbench" ./test/bench/proxy
	bench_build_product "$tmp/switchyard"
	measured="working tree at $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- proxy cmd controlplane balancer tcpproxy go.mod || echo ', with uncommitted changes')"
fi
go build -o "$tmp/tlsclient" ./test/bench/product

backend_port=18381
sy_http=18380 sy_https=18383 sy_status=18384
ng_http=18390 ng_https=18393
pl_http=18400 pl_https=18403

ports=("127.0.0.2:$backend_port" "127.0.0.1:$sy_http" "127.0.0.1:$sy_https" "127.0.0.1:$sy_status"
	"127.0.0.1:$ng_http" "127.0.0.1:$ng_https" "127.0.0.1:$pl_http" "127.0.0.1:$pl_https")
# ports_free: waits up to 10 s for nothing to listen on the ports, and
# fails naming the holder: a process left there would be measured instead.
ports_free() {
	local a
	for a in "${ports[@]}"; do
		for _ in $(seq 100); do
			ss -Hltn "src $a" | grep -q . || continue 2
			sleep 0.1 # waiting for a process that is exiting; nothing to wait on
		done
		echo "product.sh: $a is in use: $(ss -Hltnp "src $a")" >&2
		pgrep -a -f 'pbench|switchyard|nginx' >&2 || true
		exit 1
	done
}
ports_free


mkdir "$tmp/manifests"
bench_app_manifests "$tmp/manifests/bench.yaml" $backend_port 127.0.0.2 127.0.0.3 127.0.0.4
# The Secret, the Ingress with spec.tls (HTTP/1.1 is measured on the plain
# port: no redirect to HTTPS) and the ConfigMap bench/h2: h2load opens its
# connections once and does not open new ones after the GOAWAY nginx and
# the product send after keep-alive-requests (1000) requests, so the h2
# phase raises it to 1000000 on all three (that ConfigMap,
# keepalive_requests in nginx); the HTTP/1.1 phases keep ingress-nginx's
# 1000 (wrk reconnects).
bench_app_tls "$tmp/manifests/bench.yaml" "$tmp"

# Per phase: the processes, their pids (for CPU), the client's CPU prefix.
phase_pids=()
declare -A procs
client=()
phase=""

# wait_ready NAME HTTP_PORT HTTPS_PORT: waits until NAME answers 200 on
# both ports, over HTTPS with HTTP/2 and the script's certificate.
wait_ready() {
	local name="$1" http="$2" https="$3" code v
	for _ in $(seq 100); do
		code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Host: bench.local' "http://127.0.0.1:$http/" || true)
		v=$(curl -s -o /dev/null -w '%{http_code} %{http_version}' --http2 --cacert "$tmp/tls.crt" \
			--resolve "bench.local:$https:127.0.0.1" "https://bench.local:$https/" || true)
		if [ "$code" = 200 ] && [ "$v" = "200 2" ]; then
			return
		fi
		sleep 0.1 # polling the listener; there is nothing to wait on
	done
	echo "product.sh: $name did not serve bench.local (http $code, https '$v')" >&2
	tail -5 "$tmp/$name"* >&2 2>/dev/null || true
	exit 1
}

# start_phase NAME PINNED(1|0) KA_REQUESTS: starts the backends and the
# three proxies; KA_REQUESTS other than 1000 is set through the ConfigMap.
start_phase() {
	phase="$1"
	local pinned="$2" kareqs="$3" on1=() on0=() workers=2 maxprocs=2 cm=() p
	if [ "$pinned" = 1 ]; then
		on1=(taskset -c 1) on0=(taskset -c 0) workers=1 maxprocs=1
	fi
	[ "$kareqs" = 1000 ] || cm=(--configmap bench/h2)
	client=("${on0[@]}")
	phase_pids=()
	ports_free
	"${on0[@]}" "$tmp/pbench" backend -listen "127.0.0.2:$backend_port,127.0.0.3:$backend_port,127.0.0.4:$backend_port" &
	phase_pids+=($!)
	client_procs=$maxprocs
	if [ -n "${AA:-}" ]; then
		bench_ingress_nginx_conf "$tmp/product-$phase" $sy_http $sy_https $workers on "$kareqs" $backend_port "$tmp"
		"${on1[@]}" nginx -p "$tmp/product-$phase" -c "$tmp/product-$phase/nginx.conf" &
	else
		GOMAXPROCS=$maxprocs "${on1[@]}" "$tmp/switchyard" controller --data-plane=go --manifests "$tmp/manifests" "${cm[@]}" "${product_args[@]}" \
			--http-port $sy_http --https-port $sy_https --status-port $sy_status --listen-address 127.0.0.1 \
			>"$tmp/product-$phase.access.log" 2>"$tmp/product-$phase.stderr" &
	fi
	phase_pids+=($!)
	procs[product]=$!
	bench_ingress_nginx_conf "$tmp/ingress-$phase" $ng_http $ng_https $workers on "$kareqs" $backend_port "$tmp"
	"${on1[@]}" nginx -p "$tmp/ingress-$phase" -c "$tmp/ingress-$phase/nginx.conf" &
	phase_pids+=($!)
	procs[ingress]=$!
	bench_ingress_nginx_conf "$tmp/plain-$phase" $pl_http $pl_https $workers off "$kareqs" $backend_port "$tmp"
	"${on1[@]}" nginx -p "$tmp/plain-$phase" -c "$tmp/plain-$phase/nginx.conf" &
	phase_pids+=($!)
	procs[plain]=$!
	pids+=("${phase_pids[@]}")
	wait_ready product $sy_http $sy_https
	wait_ready ingress $ng_http $ng_https
	wait_ready plain $pl_http $pl_https
	for p in product ingress plain; do
		"${client[@]}" wrk -t2 -c64 -d1s -H 'Host: bench.local' "http://127.0.0.1:$(http_port $p)/" >/dev/null
		if [ "$kareqs" != 1000 ]; then
			# One HTTP/2 connection must carry more than 1000 requests.
			"${client[@]}" h2load -n 2000 -c 1 -m 8 --connect-to="127.0.0.1:$(https_port $p)" https://bench.local/ |
				grep -q '2000 succeeded' || { echo "product.sh: $p closed an HTTP/2 connection before 2000 requests" >&2; exit 1; }
		fi
	done
}

# stop_phase: proves the product's metrics and access log were on, then
# stops the phase's processes.
stop_phase() {
	local reqs dropped lines nglines p
	if [ -n "${AA:-}" ]; then
		echo "# phase $phase: A/A, nginx configured as ingress-nginx in the product's place"
		for p in "${phase_pids[@]}"; do kill "$p" 2>/dev/null || true; done
		for p in "${phase_pids[@]}"; do wait "$p" 2>/dev/null || true; done
		return
	fi
	reqs=$(curl -sf "http://127.0.0.1:$sy_status/metrics" | awk '/^nginx_ingress_controller_requests[{ ]/ { s += $NF } END { printf "%.0f", s }')
	dropped=$(curl -sf "http://127.0.0.1:$sy_status/metrics" | awk '/^switchyard_access_log_dropped_lines_total/ { s += $NF } END { printf "%.0f", s }')
	sleep 0.5 # lets the log writer drain its buffer to the file
	lines=$(wc -l <"$tmp/product-$phase.access.log")
	nglines=$(wc -l <"$tmp/ingress-$phase/access.log")
	echo "# phase $phase: product nginx_ingress_controller_requests $reqs, access log $lines lines ($dropped dropped); ingress nginx access log $nglines lines"
	if [ "${reqs:-0}" -le 0 ] || [ "$lines" -le 0 ]; then
		echo "product.sh: the product's request metrics or access log were off" >&2
		exit 1
	fi
	if grep -q '^E[0-9]' "$tmp/product-$phase.stderr"; then
		echo "# product errors in phase $phase:"
		grep '^E[0-9]' "$tmp/product-$phase.stderr" | sort | uniq -c | sort -rn | head -5 | sed 's/^/#   /'
	fi
	for p in "${phase_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${phase_pids[@]}"; do wait "$p" 2>/dev/null || true; done
}

http_port() { case $1 in product) echo $sy_http ;; ingress) echo $ng_http ;; plain) echo $pl_http ;; esac; }
https_port() { case $1 in product) echo $sy_https ;; ingress) echo $ng_https ;; plain) echo $pl_https ;; esac; }

# ticks NAME: CPU clock ticks (user + system) spent so far by the process
# NAME and, for nginx, its workers.
ticks() { bench_ticks "${procs[$1]}"; }

hz=$(getconf CLK_TCK)
# cpu_fields NAME T0 N: "us_per_req cpu_pct" for N requests in secs.
cpu_fields() {
	awk -v t0="$2" -v t1="$(ticks "$1")" -v n="$3" -v hz="$hz" -v secs="$secs" \
		'BEGIN { d = (t1 - t0) / hz; printf "%.1f %.0f", (n > 0 ? d * 1e6 / n : 0), 100 * d / secs }'
}

# wrk_run NAME CONNS: prints "rps p99_us cpu_us_per_req cpu_pct bad -";
# bad counts non-2xx answers and socket errors.
wrk_run() {
	local t0 out rps p99 n bad
	t0=$(ticks "$1")
	out=$("${client[@]}" wrk -t2 -c"$2" -d"${secs}s" --latency -H 'Host: bench.local' "http://127.0.0.1:$(http_port "$1")/")
	read -r rps p99 n bad < <(awk 'function us(v) { if (v ~ /us$/) return v+0; if (v ~ /ms$/) return v*1000; if (v ~ /s$/) return v*1000000; return v }
		/Requests\/sec/ { rps = $2 } $1 == "99%" { p99 = us($2) } /requests in/ { n = $1 }
		/Non-2xx/ { bad += $NF } /Socket errors/ { gsub(/,/, ""); bad += $4 + $6 + $8 + $10 }
		END { printf "%.0f %.0f %d %d\n", rps, p99, n, bad }' <<<"$out")
	[ "$bad" = 0 ] || grep -E 'Non-2xx|Socket errors' <<<"$out" | sed "s/^/# $1 wrk: /" >&2 || true
	echo "$rps $p99 $(cpu_fields "$1" "$t0" "$n") $bad -"
}

# h2_run NAME CLIENTS STREAMS: h2load over HTTPS with HTTP/2; prints
# "rps p99_us cpu_us_per_req cpu_pct bad -"; p99 from h2load's request log.
h2_run() {
	local t0 out n rps bad p99 h2pid
	# A second of warm-up (connections and TLS handshakes) is left out of
	# h2load's figures and of the CPU count.
	"${client[@]}" h2load -t1 -c"$2" -m"$3" --warm-up-time=1 -D"$secs" --log-file="$tmp/h2.log" \
		--connect-to="127.0.0.1:$(https_port "$1")" https://bench.local/ >"$tmp/h2.out" &
	h2pid=$!
	sleep 1 # the warm-up
	t0=$(ticks "$1")
	wait "$h2pid"
	out=$(<"$tmp/h2.out")
	read -r n rps bad < <(awk '/^finished in/ { gsub(/,/, ""); rps = $4 }
		/^requests:/ { gsub(/,/, ""); done = $6; failed = $10 }
		/^status codes:/ { gsub(/,/, ""); other = $5 + $7 + $9 }
		END { printf "%d %.0f %d\n", done, rps, failed + other }' <<<"$out")
	[ "$bad" = 0 ] || grep -E '^(requests|status codes):' <<<"$out" | sed "s/^/# $1 h2load: /" >&2 || true
	p99=$(cut -f3 "$tmp/h2.log" | sort -n | awk '{ v[NR] = $1 } END { i = int(NR * 0.99); if (i < 1) i = 1; print v[i] + 0 }')
	echo "$rps $p99 $(cpu_fields "$1" "$t0" "$n") $bad -"
}

# tls_run NAME: new TLS connections per second, resumption on; prints
# "conns_per_s 0 cpu_us_per_conn cpu_pct bad resumed_fraction"
tls_run() {
	local t0 rate resumed non200 errs
	t0=$(ticks "$1")
	read -r rate resumed non200 errs < <("${client[@]}" "$tmp/tlsclient" tlsconns -addr "127.0.0.1:$(https_port "$1")" \
		-sni bench.local -c 32 -d "${secs}s")
	echo "$rate 0 $(cpu_fields "$1" "$t0" "$(awk -v r="$rate" -v s="$secs" 'BEGIN { printf "%d", r * s }')") $((non200 + errs)) $resumed"
}

names=(product ingress plain)
# cell LABEL COMMAND ARGS...: rounds of COMMAND NAME ARGS... for the three,
# the order rotating per round; rows to stdout and $tmp/rows.
cell() {
	local label="$1" r i name row
	shift
	for r in $(seq "$rounds"); do
		for i in 0 1 2; do
			name=${names[$(((r + i) % 3))]}
			row=$("$@" "$name")
			[ "$(wc -w <<<"$row")" = 6 ] || { echo "product.sh: $label $name: could not read the run's figures ('$row')" >&2; exit 1; }
			echo "$label $r $name $row" >>"$tmp/rows"
			# shellcheck disable=SC2086 # fields of row
			printf '| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$r" "$name" $row
		done
	done
}
# turns_cell LABEL CONNS: the rounds of one HTTP/1.1 cell with the
# interleaved load (TURNS); rows as cell writes them.
turns_cell() {
	local label="$1" conns="$2" out
	out=$(GOMAXPROCS=$client_procs "${client[@]}" "$tmp/tlsclient" turns -label "$label" -conns "$conns" -slice "$TURNS" \
		-round "${secs}s" -rounds "$rounds" -host bench.local \
		-front "product=127.0.0.1:$sy_http@${procs[product]}" -front "ingress=127.0.0.1:$ng_http@${procs[ingress]}" \
		-front "plain=127.0.0.1:$pl_http@${procs[plain]}" -shared "backends=${phase_pids[0]}") ||
		{ echo "product.sh: $label: the interleaved load failed" >&2; exit 1; }
	grep -v '^#' <<<"$out" >>"$tmp/rows"
	awk '/^#/ { print; next } { printf "| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }' <<<"$out"
}
# h1_cell LABEL CONNS: the HTTP/1.1 cell, with wrk or, under TURNS, the
# interleaved load.
h1_cell() {
	if [ -n "${TURNS:-}" ]; then
		turns_cell "$1" "$2"
	else
		cell "$1" "wrk$2"
	fi
}
# Argument order for cell: the command takes NAME last.
wrk8() { wrk_run "$1" 8; }
wrk64() { wrk_run "$1" 64; }
h2_8x8() { h2_run "$1" 8 8; }
h2_64x1() { h2_run "$1" 64 1; }

echo "# $(date -u +%FT%TZ), $measured${PRODUCT_ARGS:+ with $PRODUCT_ARGS}${TURNS:+, interleaved load in turns of $TURNS}${AA:+, A/A: a second nginx as ingress-nginx in place of the product}, $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg), ${secs}s per run, $rounds rounds"
echo "# product binary: $("$tmp/switchyard" version)"
echo "# $(nginx -v 2>&1), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2), h2load $(h2load --version | awk '{ print $2 }'), $(go version | cut -d' ' -f3)"
echo "| cell | round | proxy | rps | p99 us | CPU us/req | CPU % | bad | resumed |"
echo "|---|---|---|---|---|---|---|---|---|"
start_phase pinned 1 1000
h1_cell "h1-pinned-c8" 8
h1_cell "h1-pinned-c64" 64
stop_phase
start_phase unpinned 0 1000
h1_cell "h1-unpinned-c8" 8
h1_cell "h1-unpinned-c64" 64
stop_phase
[ -z "${AA:-}" ] || H1_ONLY=1 # the A/A measures the HTTP/1.1 cells
if [ -z "${H1_ONLY:-}" ]; then
	start_phase h2tls 1 1000000
	cell "h2-pinned-8x8" h2_8x8
	cell "h2-pinned-64x1" h2_64x1
	cell "tls-pinned-new-conns" tls_run
	stop_phase
fi
echo "# end $(date -u +%FT%TZ), load: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
echo "Medians over $rounds rounds; ratios: median [min-max] of the per-round ratios. rps: new connections/s in the tls cell; CPU: us per request (per connection in the tls cell)."
echo "| cell | product rps | ingress rps | plain rps | rps product/ingress | rps product/plain | p99 us product / ingress / plain | p99 product/ingress | CPU/req product / ingress / plain | CPU/req product/ingress | CPU/req product/plain | product resumed |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
awk 'function sort(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } }
	function med(a, n) { sort(a, n); return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	function col(c, p, f,   n, r, a) { n = 0; for (r = 1; r <= R[c]; r++) if ((c, r, p) in V) { split(V[c, r, p], x, " "); a[++n] = x[f] } return n ? med(a, n) : 0 }
	function ratio(c, p, q, f, fmt,   n, r, a, lo, hi, x, y) {
		n = 0
		for (r = 1; r <= R[c]; r++) {
			split(V[c, r, p], x, " "); split(V[c, r, q], y, " ")
			if (y[f] > 0) a[++n] = x[f] / y[f]
		}
		if (!n) return "-"
		sort(a, n); lo = a[1]; hi = a[n]
		return sprintf(fmt " [" fmt "-" fmt "]", med(a, n), lo, hi)
	}
	{ c = $1; if (!(c in R)) order[++nc] = c; if ($2 > R[c]) R[c] = $2; V[c, $2, $3] = $4 " " $5 " " $6 " " $7 " " $8 " " $9 }
	END {
		for (i = 1; i <= nc; i++) {
			c = order[i]
			p99 = col(c, "product", 2) > 0
			printf "| %s | %.0f | %.0f | %.0f | %s | %s | %s | %s | %.1f / %.1f / %.1f | %s | %s | %s |\n", c,
				col(c, "product", 1), col(c, "ingress", 1), col(c, "plain", 1),
				ratio(c, "product", "ingress", 1, "%.3f"), ratio(c, "product", "plain", 1, "%.3f"),
				p99 ? sprintf("%.0f / %.0f / %.0f", col(c, "product", 2), col(c, "ingress", 2), col(c, "plain", 2)) : "-",
				p99 ? ratio(c, "product", "ingress", 2, "%.3f") : "-",
				col(c, "product", 3), col(c, "ingress", 3), col(c, "plain", 3),
				ratio(c, "product", "ingress", 3, "%.3f"), ratio(c, "product", "plain", 3, "%.3f"),
				c ~ /^tls/ ? sprintf("%.3f (ingress %.3f, plain %.3f)", col(c, "product", 6), col(c, "ingress", 6), col(c, "plain", 6)) : "-"
		}
	}' "$tmp/rows"
awk '$8 > 0 { bad[$1 " " $3] += $8 } END { for (k in bad) printf "# non-2xx or errors: %s: %d\n", k, bad[k] }' "$tmp/rows"
