package turns

import (
	"math"
	"strings"
	"testing"
)

// A quantile is the bucket of the ceil(q·n)-th request, within the 1 %
// bucket width, and String's form reads back.
func TestHist(t *testing.T) {
	h := Hist{}
	h[Bucket(300)] += 990
	h[Bucket(5000)] += 10
	near := func(got, want float64) bool { return math.Abs(got-want) <= 0.01*want }
	if q := h.Quantile(0.99); !near(q, 0.3) {
		t.Errorf("p99 = %v ms; want 0.3", q)
	}
	if q := h.Quantile(0.995); !near(q, 5) {
		t.Errorf("p99.5 = %v ms; want 5", q)
	}
	if n := h.Count(); n != 1000 {
		t.Errorf("count %v, want 1000", n)
	}
	again, err := ParseHist(strings.Fields(h.String()))
	if err != nil || again.String() != h.String() {
		t.Errorf("round trip: %v %v", again, err)
	}
	for _, bad := range []string{"12", "x:1", "3:-1", "3:NaN"} {
		if _, err := ParseHist([]string{bad}); err == nil {
			t.Errorf("%q was read", bad)
		}
	}
	if (Hist{}).Quantile(0.99) != 0 {
		t.Error("an empty histogram has a quantile")
	}
}
