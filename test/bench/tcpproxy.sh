#!/usr/bin/env bash
# SSL passthrough through package tcpproxy versus a direct connection to the
# same TLS backend, measured in one run with interleaved samples (issue 7):
# throughput of 1 MiB transfers (target >= 0.9x) and added connection-setup
# latency, TLS handshake p50 (target <= 100 us). The proxy runs in its own
# process; a plain io.Copy forwarder child is measured alongside as the floor
# of any separate-process hop. Each run is done twice: unpinned, and with
# the proxy on CPU 1 and client+backend on CPU 0 (direct path pinned alike).
# Then the package's Go benchmarks.
# Usage: test/bench/tcpproxy.sh [rounds] [runs]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-300}"
runs="${2:-3}"
bin="$(mktemp -d)/tcpproxy-bench"
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./test/bench/tcpproxy
for i in $(seq "$runs"); do
	echo "# run $i unpinned, load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
	"$bin" -rounds "$rounds" -size 1048576
	if [ "$(nproc)" -ge 2 ]; then
		echo "# run $i pinned (proxy cpu 1, client+backend cpu 0), load: $(cut -d' ' -f1-3 /proc/loadavg)"
		taskset -c 0 "$bin" -rounds "$rounds" -size 1048576 -proxy-cpu 1
	fi
done
go test -run '^$' -bench 'Benchmark' -benchmem -count 3 ./tcpproxy/
