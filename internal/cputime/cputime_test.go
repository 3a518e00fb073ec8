package cputime

import (
	"testing"
	"time"
)

// A busy loop shows up in the process's CPU time: it runs until 10 ms of
// CPU time have passed, and fails only if they never do.
func TestProcess(t *testing.T) {
	before, ok := Process()
	if !ok {
		t.Fatal("no CPU time for this process")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		now, _ := Process()
		if now-before >= 10*time.Millisecond {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s of busy loop read %v of CPU", now-before)
		}
	}
}
