//go:build unix

package h2srv

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used (user and system): a
// benchmark's cost that other load on the machine disturbs less than the
// wall clock's.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
