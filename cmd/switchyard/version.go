package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

	"k8s.io/klog/v2"
)

// version is set at link time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

func versionString() string {
	rev := ""
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " " + s.Value[:12]
			}
		}
	}
	patch := ""
	if runtimePatch != "" {
		patch = " +" + runtimePatch
	}
	return fmt.Sprintf("switchyard %s%s %s%s", version, rev, runtime.Version(), patch)
}

// runtimePatch names the changes to the Go runtime this binary was built
// with, joined by "+" (deploy/goruntime/overlay.sh's overlay sets it), if
// any.
var runtimePatch string

// setRuntimeIdleSpin sets the window of the runtime's idle spin in ns (0
// turns it off) and the share of the processors' time it may take in %;
// runtimeIdleSpinStats returns how many spins began, how many found work
// and the ns spent spinning; runtimeIdleSpinReserve adds to the Ps the
// L4 event loops hold, which the spin does not count as work in flight.
// All are nil when the binary's runtime has no idle spin
// (deploy/goruntime/overlay.sh's overlay sets them).
var (
	setRuntimeIdleSpin     func(window, share int64)
	runtimeIdleSpinStats   func() (spins, found, spentNS int64)
	runtimeIdleSpinReserve func(delta int64)
)

// idleSpinReserve is tcpproxy.Config.LoopProcs: it tells the runtime's
// idle spin about the Ps the L4 event loops hold.
func idleSpinReserve(delta int) {
	if runtimeIdleSpinReserve != nil {
		runtimeIdleSpinReserve(int64(delta))
	}
}

// idleSpinShare is the share of its processors' time, in %, the runtime's
// idle spin may take.
const idleSpinShare = 10

// defaultGoIdleSpin is --go-idle-spin's default. Unpinned on two CPUs at 64
// connections, 100µs served 7 % more requests with a third off the p99, for
// 3-5 % more CPU per request; at 8 connections the same requests for 8 %
// more CPU (docs/benchmarks/product.md, "An idle P that keeps looking").
const defaultGoIdleSpin = 100 * time.Microsecond

// applyGoIdleSpin sets the runtime's idle spin to window (--go-idle-spin),
// or says that this binary's runtime has none.
func applyGoIdleSpin(window time.Duration) {
	if setRuntimeIdleSpin == nil {
		if window > 0 {
			klog.InfoS("--go-idle-spin has no effect: this binary's Go runtime has no idle spin (build it with make build)", "window", window)
		}
		return
	}
	setRuntimeIdleSpin(int64(window), idleSpinShare)
}
