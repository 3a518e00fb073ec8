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
	return fmt.Sprintf("switchyard %s%s %s", version, rev, runtime.Version())
}
