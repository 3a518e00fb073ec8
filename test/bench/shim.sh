#!/usr/bin/env bash
# nginx + the Lua shim versus nginx with a plain upstream block and nginx with
# a pure-Lua round robin, same backends, same run (issue 5). wrk at 8 and 64
# connections, nginx with 1 and 2 workers; medians of ROUNDS samples.
# Usage: test/bench/shim.sh [duration] [rounds] [cpuprofile-out]
set -euo pipefail
cd "$(dirname "$0")/../.."
dur="${1:-5s}"
rounds="${2:-3}"
prof="${3:-}"
args=(-duration "$dur" -rounds "$rounds")
[ -n "$prof" ] && args+=(-cpuprofile "$prof")
go run ./test/bench/shim "${args[@]}"
echo
echo "# Go side: server cost per pick frame"
go test -run '^$' -bench PickFrame -benchmem -count 3 ./balancer/picksock
