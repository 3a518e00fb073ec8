//go:build !unix

package h2srv

import "time"

// processCPU is not measured here.
func processCPU() time.Duration { return 0 }
