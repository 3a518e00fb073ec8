package balancer

import (
	"fmt"
	"math"
	"testing"
)

// chiSquareCritical returns the chi-square critical value for df degrees of
// freedom at alpha = 1e-6, via the Wilson–Hilferty approximation (z = 4.753).
func chiSquareCritical(df int) float64 {
	const z = 4.753424
	k := float64(df)
	x := 1 - 2/(9*k) + z*math.Sqrt(2/(9*k))
	return k * x * x * x
}

// chiSquare checks observed counts against expected proportions.
func chiSquare(t *testing.T, what string, observed map[string]int, expected map[string]float64, n int) {
	t.Helper()
	var stat float64
	for k, p := range expected {
		e := p * float64(n)
		d := float64(observed[k]) - e
		stat += d * d / e
	}
	for k := range observed {
		if _, ok := expected[k]; !ok {
			t.Fatalf("%s: unexpected outcome %q", what, k)
		}
	}
	if crit := chiSquareCritical(len(expected) - 1); stat > crit {
		t.Errorf("%s: chi-square %.1f > critical %.1f (alpha 1e-6): %v", what, stat, crit, observed)
	}
}

func TestDistributions(t *testing.T) {
	const n = 60000
	addrs := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80"}
	uniform := map[string]float64{}
	for _, a := range addrs {
		uniform[a] = 1.0 / float64(len(addrs))
	}
	tests := []struct {
		name string
		b    Backend
		req  func(i int) vars
		want func(r *Registry) map[string]float64
	}{
		{"round_robin", Backend{}, nil, nil},
		{"ewma with equal scores", Backend{LoadBalance: "ewma"}, nil, nil},
		{"least_request", Backend{LoadBalance: "least_request"}, nil, nil},
		{"sticky_persistent new sessions", Backend{SessionAffinity: SessionAffinityConfig{Name: "cookie", Mode: "persistent"}}, nil, nil},
		{"chash over distinct keys follows ring shares", Backend{UpstreamHashBy: UpstreamHashByConfig{HashBy: strp("$request_uri")}},
			func(i int) vars { return vars{"request_uri": fmt.Sprintf("/k/%d", i)} }, ringShares},
		{"sticky_balanced new sessions follow ring shares", Backend{SessionAffinity: SessionAffinityConfig{Name: "cookie"}}, nil, ringShares},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRegistry(Config{Rand: seqRand(42), Now: fixedClock(1700000000)})
			b := tt.b
			b.Name = "d"
			b.Endpoints = eps(addrs...)
			mustSync(t, r, b)
			got := map[string]int{}
			for i := range n {
				req := vars{}
				if tt.req != nil {
					req = tt.req(i)
				}
				var a Attempt
				p, err := r.Pick("d", req, &a)
				if err != nil {
					t.Fatal(err)
				}
				r.Done(p, DoneInfo{})
				got[p.Peer]++
			}
			want := uniform
			if tt.want != nil {
				want = tt.want(r)
			}
			chiSquare(t, tt.name, got, want, n)
		})
	}
}

// ringShares is each node's share of the 2^32 key space on backend d's ring.
func ringShares(r *Registry) map[string]float64 {
	b := r.snap.Load().get("d")
	var rg *ring
	var toPeer []int
	switch a := b.algo.(type) {
	case *chash:
		rg, toPeer = &a.ring, a.ringToPeer
	case *sticky:
		rg, toPeer = &a.ring, a.ringToPeer
	}
	shares := map[string]float64{}
	prev := uint64(0)
	for i, h := range rg.hashes {
		// keys in (prev, h] map to point i
		shares[b.peers[toPeer[rg.owners[i]]].addr] += float64(uint64(h)-prev) / (1 << 32)
		prev = uint64(h)
	}
	shares[b.peers[toPeer[rg.owners[0]]].addr] += float64((1<<32)-prev) / (1 << 32)
	return shares
}

// Canary weight: P(canary) = weight / total.
func TestCanaryWeightDistribution(t *testing.T) {
	const n = 50000
	for _, tc := range []struct{ weight, total int }{{20, 100}, {1, 3}, {333, 1000}} {
		r := NewRegistry(Config{Rand: seqRand(uint64(tc.weight))})
		mustSync(t, r,
			Backend{Name: "p", Endpoints: eps("10.0.0.1:80"), AlternativeBackends: []string{"c"}},
			Backend{Name: "c", Endpoints: eps("10.0.0.2:80"), TrafficShapingPolicy: TrafficShapingPolicy{Weight: tc.weight, WeightTotal: tc.total}})
		got := map[string]int{}
		for range n {
			var a Attempt
			p, _ := r.Pick("p", vars{}, &a)
			got[p.Backend]++
		}
		total := max(tc.total, 100)
		pc := float64(tc.weight) / float64(total)
		chiSquare(t, fmt.Sprintf("weight %d/%d", tc.weight, tc.total), got, map[string]float64{"c": pc, "p": 1 - pc}, n)
	}
}
