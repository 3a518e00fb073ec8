#!/bin/sh
# Writes a `go build -overlay` file that makes the Go runtime's network
# poller run the goroutines of one epoll_wait in the order epoll reported
# them, and prints its path; prints nothing (and says why on stderr) when
# the installed Go's runtime does not have the line it changes.
#
#   overlay=$(deploy/goruntime/netpoll-fifo.sh DIR)
#   go build ${overlay:+-overlay="$overlay"} ./cmd/switchyard
#
# Why: runtime/netpoll_epoll.go pushes each ready goroutine onto the head
# of a list, so a batch runs last-reported first. Of 64 keep-alive clients
# whose requests came while the proxy was busy, the first to send is then
# served last: on one CPU at 64 connections the product's p99 was
# 1.14-1.20x nginx's with its median below nginx's, and 0.84-0.91x its own with
# this change (docs/benchmarks/product.md, "The runtime's poller in order").
# The change reverses the list before netpoll returns it; nothing else in
# the runtime depends on the order. deploy/goruntime/netpoll_test.go builds
# a program with and without the overlay and checks both orders, so a Go
# release that changes the poller fails the test rather than being
# reversed back.
#
# The overlay also adds cmd/switchyard/runtime_patch_overlay.go, which
# names the change in `switchyard version` and the start-up log line.
#
# DIR receives netpoll_epoll.go, runtime_patch_overlay.go and overlay.json.
# GO (default go) is the toolchain whose runtime is patched.
set -eu
out=${1:?usage: netpoll-fifo.sh DIR}
go=${GO:-go}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
goroot=$("$go" env GOROOT)
src=$goroot/src/runtime/netpoll_epoll.go
anchor='	return toRun, delta'
if [ ! -f "$src" ]; then
	echo "netpoll-fifo.sh: $src not found; building without the overlay" >&2
	exit 0
fi
if [ "$(grep -c -x -F "$anchor" "$src")" != 1 ]; then
	echo "netpoll-fifo.sh: $src does not end netpoll with the one line it changes; building without the overlay" >&2
	exit 0
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
awk -v anchor="$anchor" '
	$0 == anchor {
		print "\t// Switchyard (deploy/goruntime/netpoll-fifo.sh): run the batch in"
		print "\t// the order epoll reported it, not last-reported first."
		print "\tvar inOrder gList"
		print "\tfor !toRun.empty() {"
		print "\t\tinOrder.push(toRun.pop())"
		print "\t}"
		print "\treturn inOrder, delta"
		next
	}
	{ print }' "$src" >"$out/netpoll_epoll.go"
cat >"$out/runtime_patch_overlay.go" <<'GO'
package main

// Added by deploy/goruntime/netpoll-fifo.sh's overlay.
func init() { runtimePatch = "netpoll-fifo" }
GO
json_escape() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'; }
printf '{"Replace":{"%s":"%s","%s":"%s"}}\n' \
	"$(json_escape "$src")" "$(json_escape "$out/netpoll_epoll.go")" \
	"$(json_escape "$repo/cmd/switchyard/runtime_patch_overlay.go")" "$(json_escape "$out/runtime_patch_overlay.go")" \
	>"$out/overlay.json"
echo "$out/overlay.json"
