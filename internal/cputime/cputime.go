// Package cputime reads the CPU time this process has used, for the
// benchmarks that report cpu-ns/op beside the wall clock: on a machine
// shared with other work, the process's CPU time is disturbed less than
// the time that passes. In: nothing. Out: a duration.
package cputime

import "time"

// Process is the user and system CPU time every thread of this process has
// used; ok is false where it cannot be read.
func Process() (d time.Duration, ok bool) { return process() }
