#!/usr/bin/env bash
# Switchyard's L4 paths (`switchyard controller` itself, the product
# binary, and package tcpproxy alone: SNI passthrough, TCP service, both
# with PROXY protocol) against HAProxy (mode tcp, req.ssl_sni) and
# nginx's stream module (ssl_preread), a direct connection and a bare
# io.Copy forwarder (the floor of any process hop), in the same interleaved
# rounds on the same backend (issue 23; issue 7 before it): connection setup
# added p50/p99, 1-byte RTT added, 1 MiB and 1 GiB throughput, CPU per
# connection and per GiB of each proxy process. Each run is measured pinned
# (every proxy on CPU 1 with one thread of work, client and backend on
# CPU 0) and unpinned. See the comment of test/bench/tcpproxy/main.go and
# docs/benchmarks/tcpproxy.md.
#
# Installs haproxy, nginx and libnginx-mod-stream with apt-get when they are
# missing (root), and fails if it cannot. Needs a C compiler (cc) for
# test/bench/cforward.
#
# Prints each run's tables, then the summary over runs: per class, metric
# and mode, Switchyard ÷ the better of HAProxy and nginx, median [range].
#
# Usage: test/bench/tcpproxy.sh [rounds] [runs] [big-rounds] [bench flags...]
#   e.g. -variant 'switchyard passthrough, goroutines:TCPB_EVENT_LOOPS=0'
#   adds the passthrough path with a goroutine per connection; -variant-tcp
#   does the same for a TCP service path
#   OUT=file.txt   also writes the whole output there, and the runs'
#                  comparisons to file.json (for -role summarize)
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib/product.sh
rounds="${1:-300}"
runs="${2:-3}"
big="${3:-2}"
extra=("${@:4}")
if ! command -v haproxy >/dev/null || ! command -v nginx >/dev/null || [ ! -e /usr/lib/nginx/modules/ngx_stream_module.so ]; then
	echo "# installing haproxy nginx libnginx-mod-stream" >&2
	# Keep the packages' services from starting: the bench runs its own.
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
	trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	DEBIAN_FRONTEND=noninteractive apt-get install -y haproxy nginx libnginx-mod-stream >&2 || {
		echo "tcpproxy.sh: cannot install haproxy/nginx/libnginx-mod-stream; the comparison needs them" >&2
		exit 1
	}
	rm -f /usr/sbin/policy-rc.d
	trap - EXIT
fi
command -v haproxy >/dev/null && command -v nginx >/dev/null && [ -e /usr/lib/nginx/modules/ngx_stream_module.so ] || {
	echo "tcpproxy.sh: haproxy, nginx or the nginx stream module is missing" >&2
	exit 1
}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
bin="$tmp/tcpproxy-bench"
go build -o "$bin" ./test/bench/tcpproxy
# The product binary: its paths are measured beside the bench's own
# tcpproxy children.
bench_build_product "$tmp/switchyard"
extra=(-switchyard "$tmp/switchyard" "${extra[@]}")
# The bench's raw epoll forwarder in C (test/bench/cforward): a relay
# without a Go runtime, beside the Go one.
cc -O2 -Wall -o "$tmp/cforward" test/bench/cforward/forward.c
extra=(-cforward "$tmp/cforward" "${extra[@]}")
{
	echo "# $(date -u +%FT%TZ) $(nproc) cores, $(go version | cut -d' ' -f3), $(git rev-parse --short HEAD), $rounds rounds + $big × 1 GiB per path per run, $runs runs"
	echo "# $(haproxy -v | head -1); $(nginx -v 2>&1)"
	echo "# up: $(uptime)"
	for i in $(seq "$runs"); do
		taskset -c 0 "$bin" -pin -rounds "$rounds" -big-rounds "$big" -label "run $i" -json "$tmp/runs.json" "${extra[@]}"
		"$bin" -rounds "$rounds" -big-rounds "$big" -label "run $i" -json "$tmp/runs.json" "${extra[@]}"
	done
	echo
	echo "# up: $(uptime)"
	echo
	echo "## Summary: $runs runs"
	echo
	"$bin" -role summarize "$tmp/runs.json"
} | tee "${OUT:-/dev/null}"
if [ -n "${OUT:-}" ]; then
	cp "$tmp/runs.json" "${OUT%.txt}.json"
fi
