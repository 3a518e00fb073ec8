#!/usr/bin/env bash
# Where the two cores go when nothing is pinned (issue 17): the product
# (`switchyard controller --data-plane=go`, manifests mode, metrics and the
# access log on, GOMAXPROCS=2) and nginx as ingress-nginx configures it (2
# workers), with wrk -t2 and the backends (test/bench/proxy backend) on the
# same two cores, in alternating rounds. Per run: rps; CPU per request of
# the proxy, of the backends and of everything else (wrk, the kernel's
# softirqs charged elsewhere, other processes), from /proc/<pid>/stat and
# /proc/stat; the share of the machine left idle; the proxy's and the
# backends' context switches per request (/proc/<pid>/task/*/status).
#
#   test/bench/product-unpinned.sh [SECONDS] [ROUNDS] [CONNS]
#
# SYBIN_B=<binary> adds a second product binary as a third variant "B"
# (with PGMP_B, its GOMAXPROCS, default 2). Ports 18780-18804.
# PRODUCT_ARGS adds controller flags to the product (e.g. --go-workers=2),
# PRODUCT_ARGS_B to B.
#
# Around every round, test/bench/cacheprobe measures for 30 ms how long a
# cache line takes to cross between the two CPUs and back (about 60 ns in
# most spells on the project's machines, about 330 ns in others, when the
# two vCPUs share no cache). A round whose probes before and after both
# read over 150 ns ran "far", both under "near", else "mixed"; the medians
# are printed per proxy and spell as well as over all rounds.
#
# PERF_SCHED=1 also records the scheduler (`perf sched record -a`) for one
# second from the second second of every run, and prints per run: how
# often a CPU went idle and for how long, which task last ran before it
# did and which first ran after (from `perf sched timehist`).
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib/product.sh
secs="${1:-5}" rounds="${2:-3}" conns="${3:-64}"
read -r -a product_args <<<"${PRODUCT_ARGS:-}"
read -r -a product_args_b <<<"${PRODUCT_ARGS_B:-}"
bench_scratch
chmod 755 "$tmp" # nginx's workers run as nobody
bench_need wrk wrk
bench_need nginx nginx
bench_need openssl openssl
bench_need curl curl
go build -o "$tmp/pbench" ./test/bench/proxy
go build -o "$tmp/cacheprobe" ./test/bench/cacheprobe
bench_build_product "$tmp/switchyard"
mkdir "$tmp/manifests"
bench_app_manifests "$tmp/manifests/bench.yaml" 18781 127.0.0.2 127.0.0.3 127.0.0.4
bench_app_ingress "$tmp/manifests/bench.yaml" app bench.local '{}'
"$tmp/pbench" backend -listen "127.0.0.2:18781,127.0.0.3:18781,127.0.0.4:18781" &
bpid=$!
pids+=($bpid)
declare -A pid port
GOMAXPROCS=2 "$tmp/switchyard" controller --data-plane=go --manifests "$tmp/manifests" --http-port 18780 --https-port 18783 \
	--status-port 18784 --listen-address 127.0.0.1 --profiler-port 18785 "${product_args[@]}" >"$tmp/access.log" 2>"$tmp/stderr" &
pid[product]=$! port[product]=18780
pids+=($!)
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=bench.local -keyout "$tmp/tls.key" -out "$tmp/tls.crt" 2>/dev/null
bench_ingress_nginx_conf "$tmp/ingress" 18790 18793 2 on 1000 18781 "$tmp"
nginx -p "$tmp/ingress" -c "$tmp/ingress/nginx.conf" &
pid[ingress]=$! port[ingress]=18790
pids+=($!)
names=(product ingress)
if [ -n "${SYBIN_B:-}" ]; then
	mkdir "$tmp/manifests-b"
	cp "$tmp/manifests/bench.yaml" "$tmp/manifests-b/"
	GOMAXPROCS="${PGMP_B:-2}" "$SYBIN_B" controller --data-plane=go --manifests "$tmp/manifests-b" --http-port 18800 --https-port 18803 \
		--status-port 18804 --listen-address 127.0.0.1 --profiler-port 18805 "${product_args_b[@]}" >"$tmp/access-b.log" 2>"$tmp/stderr-b" &
	pid[B]=$! port[B]=18800
	pids+=($!)
	names=(product B ingress)
fi
for n in "${names[@]}"; do
	bench_wait_200 "${port[$n]}" bench.local || { echo "product-unpinned.sh: $n did not answer" >&2; exit 1; }
	wrk -t2 -c"$conns" -d1s -H 'Host: bench.local' "http://127.0.0.1:${port[$n]}/" >/dev/null
done

ticks() { bench_ticks "$1"; } # user+system ticks of PID and its children
switches() { # switches PID: context switches of PID's and its children's threads
	local c
	# shellcheck disable=SC2046 # one path a word
	cat /proc/"$1"/task/*/status $(for c in $(pgrep -P "$1"); do echo /proc/"$c"/task/*/status; done) 2>/dev/null |
		awk '/_ctxt_switches/ { s += $2 } END { print s }'
}
machine() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $5 + $6 }' /proc/stat; } # busy, idle ticks

echo "# $(date -u +%FT%TZ), $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- proxy cmd || echo ' with uncommitted changes'), ${secs}s x $rounds rounds, $conns conns, unpinned${PRODUCT_ARGS:+, product with $PRODUCT_ARGS}${PRODUCT_ARGS_B:+, B with $PRODUCT_ARGS_B}, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | proxy | rps | proxy CPU us/req | backends us/req | rest us/req | machine idle % | proxy switches/req | backend switches/req | cross-CPU ns before/after | spell |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for r in $(seq "$rounds"); do
	for n in "${names[@]}"; do
		p=${pid[$n]}
		t0=$(ticks "$p") b0=$(ticks $bpid) c0=$(switches "$p") bc0=$(switches $bpid)
		probe0=$("$tmp/cacheprobe")
		read -r u0 i0 < <(machine)
		rec=
		if [ -n "${PERF_SCHED:-}" ]; then
			(sleep 2 && perf sched record -a -o "$tmp/sched-$n-$r.data" -- sleep 1 >/dev/null 2>&1) &
			rec=$!
		fi
		out=$(wrk -t2 -c"$conns" -d"${secs}s" -H 'Host: bench.local' "http://127.0.0.1:${port[$n]}/")
		[ -z "$rec" ] || wait "$rec"
		t1=$(ticks "$p") b1=$(ticks $bpid) c1=$(switches "$p") bc1=$(switches $bpid)
		read -r u1 i1 < <(machine)
		probe1=$("$tmp/cacheprobe")
		awk -v p0="$probe0" -v p1="$probe1" -v r="$r" -v name="$n" -v n="$(awk '/requests in/ { print $1 }' <<<"$out")" -v rps="$(awk '/Requests\/sec/ { print $2 }' <<<"$out")" \
			-v t=$((t1 - t0)) -v b=$((b1 - b0)) -v u=$((u1 - u0)) -v i=$((i1 - i0)) -v c=$((c1 - c0)) -v bc=$((bc1 - bc0)) -v hz="$(getconf CLK_TCK)" \
			'BEGIN { spell = p0 > 150 && p1 > 150 ? "far" : p0 <= 150 && p1 <= 150 ? "near" : "mixed"
				printf "| %d | %s | %.0f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %d/%d | %s |\n", r, name, rps, t / hz * 1e6 / n, b / hz * 1e6 / n, (u - t - b) / hz * 1e6 / n, 100 * i / (u + i), c / n, bc / n, p0, p1, spell }'
	done
done | tee "$tmp/rows"
echo
echo "Medians over $rounds rounds, then over the rounds of each spell: proxy, rps, proxy CPU us/req, machine idle %"
awk -F'|' '{ gsub(/ /, "", $3); gsub(/ /, "", $12)
		for (pass = 1; pass <= 2; pass++) { k = pass == 1 ? $3 : $3 " (" $12 ")"; n[k]++; rps[k, n[k]] = $4; cpu[k, n[k]] = $5; idle[k, n[k]] = $8 } }
	function med(a, name, m,   i, j, t, v) { for (i = 1; i <= m; i++) v[i] = a[name, i] + 0; for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t } return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2 }
	END { for (k in n) printf "%s: %d rounds, %.0f rps, %.1f us/req, %.1f %% idle\n", k, n[k], med(rps, k, n[k]), med(cpu, k, n[k]), med(idle, k, n[k]) }' "$tmp/rows" | sort

if [ -n "${PERF_SCHED:-}" ]; then
	echo
	echo "Idle CPUs, per second recorded: slices, their total and lengths; the task (name: count) that ran last before and first after, at least 10 times"
	for r in $(seq "$rounds"); do
		for n in "${names[@]}"; do
			perf sched timehist -i "$tmp/sched-$n-$r.data" 2>/dev/null | awk -v name="$n" -v r="$r" '
				NR > 3 && NF >= 6 {
					cpu = $2; split($3, a, "["); task = a[1]; run = $NF
					if ($3 == "<idle>") {
						idle++; total += run
						if (run < 0.01) b[1]++; else if (run < 0.05) b[2]++; else if (run < 0.1) b[3]++; else if (run < 0.5) b[4]++; else b[5]++
						if (last[cpu] != "") before[last[cpu]]++
						afterIdle[cpu] = 1; last[cpu] = ""
					} else {
						if (afterIdle[cpu]) after[task]++
						afterIdle[cpu] = 0; last[cpu] = task
					}
				}
				function top(m,   k, s) { s = ""; for (k in m) if (m[k] >= 10) s = s " " k ":" m[k]; return s }
				END { printf "%d %s: %d idle slices, %.1f ms; <10us %d, 10-50us %d, 50-100us %d, 100-500us %d, >500us %d; before:%s; after:%s\n", r, name, idle, total, b[1], b[2], b[3], b[4], b[5], top(before), top(after) }'
		done
	done
fi
