package main

import (
	"math"
	"strings"
	"testing"

	"github.com/switchyard-proxy/switchyard/test/bench/internal/turns"
)

// The pooled quantile is the quantile of all requests, within the 1 %
// bucket width, and survives the raw output's round trip.
func TestHistQuantile(t *testing.T) {
	// Two rounds: 990 requests at 300 µs and 10 at 5 ms; then 1000 at
	// 400 µs. Pooled, the 99th percentile request (1980th of 2000) is at
	// 400 µs; round one alone has its p99 at 300 µs, p99.5 at 5 ms.
	a, err := readWrkHist(strings.NewReader("300 990\n5000 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := readWrkHist(strings.NewReader("400 1000\n"))
	if err != nil {
		t.Fatal(err)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) <= 0.01*want }
	if q := a.Quantile(0.99); !near(q, 0.3) {
		t.Errorf("round one p99 = %v ms; want 0.3", q)
	}
	if q := a.Quantile(0.995); !near(q, 5) {
		t.Errorf("round one p99.5 = %v ms; want 5", q)
	}
	pool := turns.Hist{}
	pool.Add(a)
	pool.Add(b)
	if n := pool.Count(); n != 2000 {
		t.Fatalf("pooled %v requests; want 2000", n)
	}
	if q := pool.Quantile(0.99); !near(q, 0.4) {
		t.Errorf("pooled p99 = %v ms; want 0.4", q)
	}
	if q := pool.Quantile(0.996); !near(q, 5) {
		t.Errorf("pooled p99.6 = %v ms; want 5", q)
	}
	again, err := turns.ParseHist(strings.Fields(pool.String()))
	if err != nil || again.String() != pool.String() {
		t.Errorf("round trip: %v %v", again, err)
	}
	for _, bad := range []string{"12\n", "12 -1\n", "12 NaN\n", "x 1\n"} {
		if _, err := readWrkHist(strings.NewReader(bad)); err == nil {
			t.Errorf("%q was read", bad)
		}
	}
	if (turns.Hist{}).Quantile(0.99) != 0 {
		t.Error("an empty histogram has a quantile")
	}
}
