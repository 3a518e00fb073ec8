package main

import (
	"slices"
	"testing"
	"time"
)

// wrk runs as the flags ask: paced through wrk.lua's environment,
// under SCHED_FIFO when isolated, both when both are asked.
func TestWrkCommand(t *testing.T) {
	for _, tc := range []struct {
		isolate bool
		pace    time.Duration
		want    []string
	}{
		{false, 0, []string{"wrk"}},
		{true, 0, []string{"chrt", "-f", "10", "wrk"}},
		{false, 2 * time.Millisecond, []string{"env", "SHIMREAL_PACE_MS=2", "wrk"}},
		{true, time.Millisecond, []string{"chrt", "-f", "10", "env", "SHIMREAL_PACE_MS=1", "wrk"}},
	} {
		if got := wrkCommand(tc.isolate, tc.pace); !slices.Equal(got, tc.want) {
			t.Errorf("wrkCommand(%v, %s) = %q, want %q", tc.isolate, tc.pace, got, tc.want)
		}
	}
}
