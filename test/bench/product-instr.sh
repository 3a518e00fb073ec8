#!/usr/bin/env bash
# Instructions per proxied request (issue 17): BenchmarkProxyHTTP1's
# variants under valgrind's callgrind, which counts instructions exactly
# (perf counters are not available on every VM, and wall-clock figures
# move with the machine's load; instruction counts do not).
#
#   test/bench/product-instr.sh [VARIANT...]
#
# Per variant it runs the benchmark twice, with N1 and N2 requests
# (-test.benchtime Nx, GOMAXPROCS=1; no asynchronous preemption, whose
# signals callgrind trips over, no RDTSCP, which it cannot run), and prints (Ir(N2) - Ir(N1)) / (N2 -
# N1): the instructions of one request through the whole process (the
# fasthttp client, the proxy, the fasthttp backend, the runtime), the
# set-up cancelling out. The client and backend are the same for every
# variant, so differences between variants and between builds are the
# proxy's. It then lists the inclusive instructions per request of the
# proxy's accounting functions from the N2 run.
#
# Environment: N1, N2 (default 5000, 25000), OUT (default a temporary
# directory; the callgrind files stay there), TEST (a prebuilt
# proxy.test, default built from the working tree).
set -euo pipefail
cd "$(dirname "$0")/../.."
n1="${N1:-5000}"
n2="${N2:-25000}"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
command -v valgrind >/dev/null || { echo "product-instr.sh: valgrind is missing (apt-get install valgrind)" >&2; exit 1; }
test="${TEST:-}"
if [ -z "$test" ]; then
	test="$out/proxy.test"
	go test -c -o "$test" ./proxy/
fi
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=("accesslog=off" "metrics=on" "accesslog=on" "metrics,accesslog=LogWriter")

# ir N VARIANT: total instructions of a run of N requests.
ir() {
	local f="$out/cg.$(tr -c 'a-zA-Z0-9\n' _ <<<"$2").$1"
	GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$f" "$test" -test.run '^$' \
		-test.bench "BenchmarkProxyHTTP1/$2\$" -test.benchtime "${1}x" -test.cpu 1 >"$f.log" 2>&1
	grep -q '^PASS' "$f.log" || { echo "product-instr.sh: $2 N=$1 failed:" >&2; tail -20 "$f.log" >&2; exit 1; }
	awk '/^summary:/ { print $2 }' "$f"
}

echo "# $(date -u +%FT%TZ), $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- proxy || echo ', proxy/ changed'), N1=$n1 N2=$n2, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| variant | instructions per request |"
echo "|---|---|"
for v in "${variants[@]}"; do
	a=$(ir "$n1" "$v")
	b=$(ir "$n2" "$v")
	printf '| %s | %d |\n' "$v" $(((b - a) / (n2 - n1)))
done
echo
echo "Inclusive instructions per request in the N2 runs (callgrind_annotate --inclusive=yes):"
for v in "${variants[@]}"; do
	f="$out/cg.$(tr -c 'a-zA-Z0-9\n' _ <<<"$v").$n2"
	echo "## $v"
	callgrind_annotate --inclusive=yes --threshold=100 "$f" 2>/dev/null |
		awk -v n="$n2" '/proxy\.\(\*Proxy\)\.ServeHTTP$|proxy\.\(\*metrics\)\.observe|proxy\.\(\*Proxy\)\.accessLog|proxy\.\(\*logFormat\)\.appendLog|proxy\.\(\*LogWriter\)\.Write|ResponseHeader\)\.Header$|proxy\.\(\*Proxy\)\.handle$|proxy\.\(\*Proxy\)\.route|proxy\.\(\*Proxy\)\.forward|runtime\.mcall$|runtime\.findRunnable|internal\/poll\.\(\*FD\)\.(Read|Write)$/ {
			gsub(/,/, "", $1); printf "  %8.0f  %s\n", $1 / n, $NF }'
done
echo "# callgrind files in $out"
