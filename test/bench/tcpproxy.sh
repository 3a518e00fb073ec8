#!/usr/bin/env bash
# SSL passthrough through package tcpproxy versus a direct connection to the
# same TLS backend, measured in one run with interleaved samples (issue 7):
# throughput of 1 MiB transfers (target >= 0.9x) and added connection-setup
# latency, TLS handshake p50 (target <= 100 us). Then the package's Go
# benchmarks. Usage: test/bench/tcpproxy.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-300}"
echo "# load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
go run ./test/bench/tcpproxy -rounds "$rounds" -size 1048576
go test -run '^$' -bench 'Benchmark' -benchmem -count 1 ./tcpproxy/
