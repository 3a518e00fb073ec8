//go:build unix

package balancer

import "syscall"

// processCPU returns the CPU time (user and system, every thread) this
// process has used, in nanoseconds, or -1 if unknown.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
