package cputime

import (
	"testing"
	"time"
)

// A busy loop shows up in the process's CPU time.
func TestProcess(t *testing.T) {
	before, ok := Process()
	if !ok {
		t.Fatal("no CPU time for this process")
	}
	start := time.Now()
	x := 0
	for time.Since(start) < 30*time.Millisecond {
		x++
	}
	after, _ := Process()
	if x == 0 || after-before < 15*time.Millisecond {
		t.Errorf("a 30 ms busy loop read %v of CPU", after-before)
	}
}
