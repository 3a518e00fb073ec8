#!/usr/bin/env bash
# Two builds of the product head to head (issue 17): `switchyard controller
# --data-plane=go` from REV_A and from REV_B (a commit, or "." for the
# working tree), manifests mode with metrics and the access log on (as
# product.sh runs it), pinned to CPU 1 with GOMAXPROCS=1, the backends and
# wrk on CPU 0; alternating wrk -t2 -cCONNS runs of SECONDS each, ROUNDS
# rounds. Per run: rps and the product's CPU time per request (user +
# system from /proc, requests from its own nginx_ingress_controller_requests).
# Prints the per-round B÷A ratios and their medians: on a loaded machine
# the CPU per request ratio is the figure that holds.
#
#   test/bench/product-ab.sh REV_A REV_B [SECONDS] [ROUNDS] [CONNS]
#   H2=STREAMS test/bench/product-ab.sh REV_A REV_B [SECONDS] [ROUNDS] [CONNS]
#
# With H2 set the load is h2load over HTTPS with HTTP/2 to the client,
# CONNS connections of STREAMS concurrent streams (product.sh's h2 section).
# UNPINNED=1 pins nothing and runs the product with GOMAXPROCS=2 (product.sh's
# unpinned section) instead.
# BIN_A and BIN_B take a binary built elsewhere (e.g. with another Go
# toolchain) in place of building REV_A or REV_B; the REV is then a label.
# A_ARGS and B_ARGS add controller flags to A's and B's command line, e.g.
# B_ARGS=--http2-server=x/net with the same REV twice.
# THREADS=1 also prints, per run, what the product's threads did per
# request (/proc/PID/task): all threads' context switches, and the CPU
# time and wake-ups of the runtime's monitor (sysmon: the thread found in
# nanosleep(2) most often, sampled 20 times during the load) and of the
# other threads.
#
# TURNS=SLICE (HTTP/1.1 only) replaces the alternating wrk runs with the
# interleaved load of product.sh's TURNS (test/bench/product turns): A and
# B take the load in turns of SLICE, and per round it prints rps, p99 and
# CPU per request (the process's, per request the load counted) of each,
# then the medians of the per-round ratios B/A and each build's p99 over
# all rounds.
#
# Ports 18480-18496, apart from product.sh's.
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib/product.sh
reva="$1" revb="$2"
secs="${3:-5}" rounds="${4:-5}" conns="${5:-64}"
tmp="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

build() { # build REV NAME
	local bin="BIN_${2^^}"
	if [ -n "${!bin:-}" ]; then
		cp "${!bin}" "$tmp/$2"
	elif [ "$1" = . ]; then
		bench_build_product "$tmp/$2"
	else
		mkdir "$tmp/src-$2"
		git archive "$1" | tar -x -C "$tmp/src-$2"
		bench_build_product "$tmp/$2" "$tmp/src-$2"
	fi
}
build "$reva" a
build "$revb" b
describe() { # describe REV BIN: what was built, for the header line
	if [ -n "$2" ]; then
		echo "$1 (binary $2)"
	else
		echo "$1 ($(git rev-parse --short "$([ "$1" = . ] && echo HEAD || echo "$1")"))"
	fi
}
go build -o "$tmp/pbench" ./test/bench/proxy
[ -z "${TURNS:-}" ] || go build -o "$tmp/turns" ./test/bench/product
port=18481
mkdir "$tmp/manifests"
bench_app_manifests "$tmp/manifests/bench.yaml" $port 127.0.0.2 127.0.0.3 127.0.0.4
h2="${H2:-}"
on1=(taskset -c 1) on0=(taskset -c 0) maxprocs=1 pinning=pinned
if [ "${UNPINNED:-}" = 1 ]; then
	on1=() on0=() maxprocs=2 pinning="unpinned, GOMAXPROCS=2"
fi
bench_app_load "$tmp/manifests/bench.yaml" "$tmp"
"${on0[@]}" "$tmp/pbench" backend -listen "127.0.0.2:$port,127.0.0.3:$port,127.0.0.4:$port" &
pids+=($!)
declare -A pid http status
read -r -a a_args <<<"${A_ARGS:-}"
read -r -a b_args <<<"${B_ARGS:-}"
start() { # start NAME HTTP STATUS PROFILER
	local extra=("${a_args[@]}")
	[ "$1" = b ] && extra=("${b_args[@]}")
	GOMAXPROCS=$maxprocs "${on1[@]}" "$tmp/$1" controller --data-plane=go --manifests "$tmp/manifests" "${cm[@]}" "${extra[@]}" \
		--http-port "$2" --https-port $(($2 + 1)) --status-port "$3" --listen-address 127.0.0.1 \
		--profiler-port "$4" >"$tmp/$1.access.log" 2>"$tmp/$1.stderr" &
	pid[$1]=$!
	pids+=($!)
	http[$1]=$2
	status[$1]=$3
	bench_wait_200 "$2" bench.local || true
	load "$1" 1 >/dev/null
}
load() { # load NAME SECONDS: prints the requests per second
	if [ -n "$h2" ]; then
		bench_h2load $((${http[$1]} + 1)) "$conns" "$h2" "$2" "${on0[@]}"
	else
		"${on0[@]}" wrk -t2 -c"$conns" -d"${2}s" -H 'Host: bench.local' "http://127.0.0.1:${http[$1]}/" | awk '/Requests\/sec/ { print $2 }'
	fi
}
start a 18480 18484 18485
start b 18490 18494 18495
if [ -n "${TURNS:-}" ]; then
	echo "# $(date -u +%FT%TZ)${A_ARGS:+ A_ARGS=$A_ARGS}${B_ARGS:+ B_ARGS=$B_ARGS} A=$(describe "$reva" "${BIN_A:-}") B=$(describe "$revb" "${BIN_B:-}"), interleaved load in turns of $TURNS, ${secs}s x $rounds rounds, $conns conns, $pinning, load: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "# A: $("$tmp/a" version 2>/dev/null || echo '?'); B: $("$tmp/b" version 2>/dev/null || echo '?')"
	echo "# label round build rps p99_us cpu_us_per_req cpu_pct bad -"
	GOMAXPROCS=$maxprocs "${on0[@]}" "$tmp/turns" turns -label ab -conns "$conns" -slice "$TURNS" -round "${secs}s" -rounds "$rounds" \
		-front "A=127.0.0.1:${http[a]}@${pid[a]}" -front "B=127.0.0.1:${http[b]}@${pid[b]}" | tee "$tmp/turns.out"
	echo "# end $(date -u +%FT%TZ), load: $(cut -d' ' -f1-3 /proc/loadavg)"
	awk 'function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
			return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
		/^#/ { next } { v[$2, $3] = $4 " " $5 " " $6; if ($2 > n) n = $2 }
		END { for (r = 1; r <= n; r++) { split(v[r, "A"], a, " "); split(v[r, "B"], b, " "); rr[r] = b[1] / a[1]; pp[r] = b[2] / a[2]; cc[r] = b[3] / a[3] }
			printf "medians of %d rounds: rps B/A %.3f [%.3f-%.3f], p99 B/A %.3f [%.3f-%.3f], CPU per request B/A %.3f [%.3f-%.3f]\n", n,
				med(rr, n), rr[1], rr[n], med(pp, n), pp[1], pp[n], med(cc, n), cc[1], cc[n] }' "$tmp/turns.out"
	exit 0
fi
reqs() { curl -sf "http://127.0.0.1:${status[$1]}/metrics" | awk '/^nginx_ingress_controller_requests[{ ]/ { s += $NF } END { printf "%.0f", s }'; }
ticks() { awk '{ print $14 + $15 }' "/proc/${pid[$1]}/stat"; }
hz=$(getconf CLK_TCK)
# threads NAME: per thread "tid cpu_ticks voluntary nonvoluntary"
threads() {
	local t
	for t in /proc/"${pid[$1]}"/task/*; do
		echo "${t##*/} $(awk '{ print $14 + $15 }' "$t/stat" 2>/dev/null || echo 0) $(awk '/^voluntary_ctxt/ { v = $2 } /^nonvoluntary_ctxt/ { n = $2 } END { print v + 0, n + 0 }' "$t/status" 2>/dev/null || echo 0 0)"
	done
}
# sleepers NAME: the threads found in nanosleep(2) (35 on amd64) during the load
sleepers() {
	local i t
	for i in $(seq 20); do
		sleep "$(awk -v s="$secs" 'BEGIN { print s / 22 }')"
		for t in /proc/"${pid[$1]}"/task/*; do
			[ "$(cut -d' ' -f1 "$t/syscall" 2>/dev/null)" = 35 ] && echo "${t##*/}"
		done
	done
}
run() { # run NAME: "rps cpu_us_per_req"
	local r0 t0 r1 t1 rps sl
	r0=$(reqs "$1") t0=$(ticks "$1")
	if [ "${THREADS:-}" = 1 ]; then
		threads "$1" >"$tmp/th0"
		sleepers "$1" >"$tmp/sleepers" &
		sl=$!
	fi
	rps=$(load "$1" "$secs")
	r1=$(reqs "$1") t1=$(ticks "$1")
	if [ "${THREADS:-}" = 1 ]; then
		wait "$sl" || true
		threads "$1" >"$tmp/th1"
		sysmon=$(sort "$tmp/sleepers" | uniq -c | sort -rn | awk 'NR == 1 { print $2 }')
		join "$tmp/th0" "$tmp/th1" | awk -v name="$1" -v n=$((r1 - r0)) -v hz="$hz" -v sm="${sysmon:-none}" '
			{ cpu = ($5 - $2) / hz * 1e6 / n; sw = ($6 - $3 + $7 - $4) / n; all += sw
			  if ($1 == sm) { smc = cpu; smw = ($6 - $3) / n } else { oc += cpu; if (cpu > 0.5) busy++ } }
			END { printf "threads %s: %.3f context switches/req; sysmon %.2f us/req, %.3f wake-ups/req; other threads %.2f us/req (%d above 0.5)\n", name, all, smc, smw, oc, busy }' >>"$tmp/threadlines"
	fi
	awk -v rps="$rps" -v n=$((r1 - r0)) -v t=$((t1 - t0)) -v hz="$hz" 'BEGIN { printf "%.0f %.2f\n", rps, t / hz * 1e6 / n }'
}
echo "# $(date -u +%FT%TZ)${A_ARGS:+ A_ARGS=$A_ARGS}${B_ARGS:+ B_ARGS=$B_ARGS} A=$(describe "$reva" "${BIN_A:-}") B=$(describe "$revb" "${BIN_B:-}"), ${secs}s x $rounds rounds, $conns conns${h2:+, HTTP/2 $h2 streams each}, $pinning, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# A: $("$tmp/a" version 2>/dev/null || echo '?'); B: $("$tmp/b" version 2>/dev/null || echo '?')"
echo "| round | A rps | B rps | A CPU us/req | B CPU us/req | rps B/A | CPU/req B/A |"
echo "|---|---|---|---|---|---|---|"
for r in $(seq "$rounds"); do
	if [ $((r % 2)) = 1 ]; then
		read -r ra ca < <(run a)
		read -r rb cb < <(run b)
	else
		read -r rb cb < <(run b)
		read -r ra ca < <(run a)
	fi
	echo "$r $ra $rb $ca $cb" >>"$tmp/rows"
	awk -v r="$r" -v ra="$ra" -v rb="$rb" -v ca="$ca" -v cb="$cb" 'BEGIN { printf "| %d | %d | %d | %.2f | %.2f | %.3f | %.3f |\n", r, ra, rb, ca, cb, rb / ra, cb / ca }'
	if [ -f "$tmp/threadlines" ]; then
		sed "s/^/# round $r /" "$tmp/threadlines"
		rm "$tmp/threadlines"
	fi
done
echo "# end $(date -u +%FT%TZ), load: $(cut -d' ' -f1-3 /proc/loadavg)"
awk 'function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	{ n++; rr[n] = $3 / $2; cc[n] = $5 / $4; ca[n] = $4; cb[n] = $5 }
	END { printf "medians: rps B/A %.3f, CPU per request B/A %.3f (A %.2f us, B %.2f us)\n", med(rr, n), med(cc, n), med(ca, n), med(cb, n) }' "$tmp/rows"
