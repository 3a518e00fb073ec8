package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
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

// runtimePatch names the change to the Go runtime this binary was built
// with (deploy/goruntime/netpoll-fifo.sh's overlay sets it), if any.
var runtimePatch string
