#!/bin/sh
# Writes the `go build -overlay` file of the release build's changes to the
# Go runtime and prints its path; prints nothing (and says why on stderr)
# when the installed Go's runtime takes none of them.
#
#   overlay=$(deploy/goruntime/overlay.sh DIR)
#   go build ${overlay:+-overlay="$overlay"} ./cmd/switchyard
#
# netpoll-fifo: runtime/netpoll_epoll.go pushes each ready goroutine onto
# the head of a list, so a batch runs last-reported first. Of 64 keep-alive
# clients whose requests came while the proxy was busy, the first to send
# is then served last: on one CPU at 64 connections the product's p99 was
# 1.14-1.20x nginx's with its median below nginx's, and 0.84-0.91x its own
# with this change (docs/benchmarks/product.md, "The runtime's poller in
# order"). The change reverses the list before netpoll returns it; nothing
# else in the runtime depends on the order.
#
# idle-spin: an M that finds nothing to run while another P runs keeps its
# P and looks again for a window before it sleeps (patches/idle_spin.go.in;
# `switchyard controller --go-idle-spin` sets the window). Unpinned on two
# CPUs at 64 connections, the stock runtime left a CPU idle for 10-100 us
# about a thousand times a second while requests were in flight
# (docs/benchmarks/product.md, "An idle P that keeps looking").
#
# Each change applies only if the installed runtime has the line it
# changes and the changed runtime compiles; deploy/goruntime's tests build
# programs with and without the overlay and check what each change does,
# so a Go release that changes the runtime fails them rather than being
# patched blindly.
#
# The overlay also adds cmd/switchyard/runtime_patch_overlay.go, which
# names the applied changes in `switchyard version` and the start-up log
# line and connects --go-idle-spin to the runtime.
#
# DIR receives the changed runtime files, runtime_patch_overlay.go and
# overlay.json. GO (default go) is the toolchain whose runtime is patched.
set -eu
out=${1:?usage: overlay.sh DIR}
go=${GO:-go}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
rt=$("$go" env GOROOT)/src/runtime
mkdir -p "$out"
out=$(cd "$out" && pwd)

json_escape() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'; }
# write_json FILE PAIR...: an overlay file replacing each ORIG=NEW pair.
write_json() {
	f=$1
	shift
	sep=
	printf '{"Replace":{' >"$f"
	for pair in "$@"; do
		printf '%s"%s":"%s"' "$sep" "$(json_escape "${pair%%=*}")" "$(json_escape "${pair#*=}")" >>"$f"
		sep=,
	done
	printf '}}\n' >>"$f"
}
# once FILE LINE: FILE has LINE exactly once.
once() { [ -f "$1" ] && [ "$(grep -c -x -F "$2" "$1")" = 1 ]; }
# compiles PAIR...: the runtime compiles with these replacements.
compiles() {
	write_json "$out/check.json" "$@"
	"$go" build -overlay="$out/check.json" runtime >"$out/check.log" 2>&1
}

pairs=
applied=

anchor='	return toRun, delta'
if once "$rt/netpoll_epoll.go" "$anchor"; then
	awk -v anchor="$anchor" '
		$0 == anchor {
			print "\t// Switchyard (deploy/goruntime/overlay.sh): run the batch in"
			print "\t// the order epoll reported it, not last-reported first."
			print "\tvar inOrder gList"
			print "\tfor !toRun.empty() {"
			print "\t\tinOrder.push(toRun.pop())"
			print "\t}"
			print "\treturn inOrder, delta"
			next
		}
		{ print }' "$rt/netpoll_epoll.go" >"$out/netpoll_epoll.go"
	if compiles "$rt/netpoll_epoll.go=$out/netpoll_epoll.go"; then
		pairs="$rt/netpoll_epoll.go=$out/netpoll_epoll.go"
		applied=netpoll-fifo
	else
		echo "overlay.sh: the runtime does not compile with netpoll-fifo ($out/check.log); building without it" >&2
	fi
else
	echo "overlay.sh: $rt/netpoll_epoll.go does not end netpoll with the one line netpoll-fifo changes; building without it" >&2
fi

anchor='	// Before we drop our P, make a snapshot of the allp slice,'
if once "$rt/proc.go" "$anchor"; then
	awk -v anchor="$anchor" -v call="$here/patches/idle_spin_call.go.in" '
		$0 == anchor { while ((getline line < call) > 0) print line }
		{ print }' "$rt/proc.go" >"$out/proc.go"
	cat "$here/patches/idle_spin.go.in" >>"$out/proc.go"
	if compiles "$rt/proc.go=$out/proc.go"; then
		pairs="$pairs${pairs:+ }$rt/proc.go=$out/proc.go"
		applied="$applied${applied:++}idle-spin"
	else
		echo "overlay.sh: the runtime does not compile with idle-spin ($out/check.log); building without it" >&2
	fi
else
	echo "overlay.sh: $rt/proc.go lacks the line idle-spin goes before; building without it" >&2
fi
rm -f "$out/check.json"

[ -n "$applied" ] || exit 0
{
	echo 'package main'
	echo
	case $applied in *idle-spin*) printf '%s\n\n' 'import _ "unsafe" // for go:linkname' ;; esac
	echo "// Added by deploy/goruntime/overlay.sh's overlay."
	echo 'func init() {'
	echo "	runtimePatch = \"$applied\""
	case $applied in *idle-spin*)
		echo '	setRuntimeIdleSpin = runtimeSetIdleSpin'
		echo '	runtimeIdleSpinStats = runtimeIdleSpinStatsFunc'
		echo '	runtimeIdleSpinReserve = runtimeIdleSpinReserveFunc'
		;;
	esac
	echo '}'
	case $applied in *idle-spin*)
		echo
		echo '//go:linkname runtimeSetIdleSpin runtime.switchyardSetIdleSpin'
		echo 'func runtimeSetIdleSpin(window, share int64)'
		echo
		echo '//go:linkname runtimeIdleSpinStatsFunc runtime.switchyardIdleSpinStats'
		echo 'func runtimeIdleSpinStatsFunc() (spins, found, spentNS int64)'
		echo
		echo '//go:linkname runtimeIdleSpinReserveFunc runtime.switchyardIdleSpinReserve'
		echo 'func runtimeIdleSpinReserveFunc(delta int64)'
		;;
	esac
} >"$out/runtime_patch_overlay.go"
# shellcheck disable=SC2086 # pairs holds space-free paths
write_json "$out/overlay.json" $pairs "$repo/cmd/switchyard/runtime_patch_overlay.go=$out/runtime_patch_overlay.go"
echo "$out/overlay.json"
