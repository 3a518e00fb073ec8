package balancer

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Round-robin in-flight counts are derived from the cursor (rrCursor); every
// path that moves the cursor or changes the balancer must leave Backends()
// showing exactly the picks not yet Done: first picks, retries, Candidates
// and CandidatePicks (not counted), Lease (not counted), PickAfter, a Sync
// keeping the node set, a Sync changing it (the cursor is closed and folded),
// a switch to least_request (which reads the counts) and back, and picks
// through a balancer of an older snapshot.
func TestRoundRobinInFlight(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	r := NewRegistry(Config{Rand: seqRand(5)})
	pool := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80"}
	set := pool[:3]
	algo := ""
	sync := func() {
		mustSync(t, r, Backend{Name: "rr", LoadBalance: algo, Endpoints: eps(set...)})
	}
	sync()
	want := map[string]int64{}
	type open struct {
		p Pick
		a *Attempt
	}
	var live []open
	check := func(step int, op string) {
		t.Helper()
		got := map[string]int64{}
		for _, bs := range r.Backends() {
			for _, e := range bs.Endpoints {
				if e.InFlight != 0 {
					got[e.Address] = e.InFlight
				}
			}
		}
		exp := map[string]int64{}
		for _, addr := range set {
			if want[addr] != 0 {
				exp[addr] = want[addr]
			}
		}
		if diff := cmp.Diff(exp, got); diff != "" {
			t.Fatalf("step %d (%s): in flight (-want +got):\n%s", step, op, diff)
		}
	}
	prev := r.snap.Load()
	for step := range 3000 {
		var op string
		if k := rng.IntN(100); k < 5 {
			prev = r.snap.Load()
		}
		switch k := rng.IntN(100); {
		case k < 5:
			// A pick that loaded an older snapshot just before a Sync
			// replaced it: its cursor may be closed.
			op = "pick through an older snapshot"
			if b := prev.get("rr"); b == nil || b.rr == nil {
				continue // not Pick's round-robin fast path
			}
			now := r.snap.Load()
			r.snap.Store(prev)
			a := new(Attempt)
			p, err := r.Pick("rr", vars{}, a)
			r.snap.Store(now)
			if err != nil {
				t.Fatal(err)
			}
			cur := r.snap.Load().get("rr")
			if i, ok := cur.byAddr[p.Peer]; !ok || cur.peers[i].st != p.st {
				r.Done(p, DoneInfo{}) // a removed endpoint: its count went with it
				continue
			}
			want[p.Peer]++
			live = append(live, open{*p, a})
		case k < 40:
			op = "pick"
			a := new(Attempt)
			p, err := r.Pick("rr", vars{}, a)
			if err != nil {
				t.Fatal(err)
			}
			want[p.Peer]++
			live = append(live, open{*p, a})
		case k < 50 && len(live) > 0:
			op = "retry"
			o := live[rng.IntN(len(live))]
			o.a.LastFailure = FailureFailed
			p, err := r.Pick("rr", vars{}, o.a)
			if err != nil {
				t.Fatal(err)
			}
			want[p.Peer]++
			live = append(live, open{*p, o.a})
		case k < 75 && len(live) > 0:
			op = "done"
			i := rng.IntN(len(live))
			r.Done(&live[i].p, DoneInfo{})
			want[live[i].p.Peer]--
			live = append(live[:i], live[i+1:]...)
		case k < 80:
			op = "candidates"
			var a Attempt
			dst := make([]string, 1+rng.IntN(4))
			if _, _, err := r.Candidates("rr", vars{}, &a, dst); err != nil {
				t.Fatal(err)
			}
		case k < 83:
			op = "candidate picks"
			var a Attempt
			if _, err := r.CandidatePicks("rr", vars{}, &a, make([]Pick, 2)); err != nil {
				t.Fatal(err)
			}
		case k < 88:
			op = "lease"
			_, _, _ = r.Lease("rr", 1+rng.IntN(700))
		case k < 90:
			op = "pick after"
			a := new(Attempt)
			p, err := r.PickAfter("rr", vars{}, a, []string{set[0]})
			if err != nil {
				t.Fatal(err)
			}
			want[p.Peer]++
			live = append(live, open{*p, a})
		case k < 93:
			op = "sync, same node set"
			sync()
		case k < 96:
			op = "sync, node set changed"
			// Only grow and shrink at the end of the pool, keeping the
			// endpoints of live picks (a removed endpoint's count goes
			// with it).
			set = pool[:3+rng.IntN(3)]
			for addr, n := range want {
				if n != 0 && !contains(set, addr) {
					set = pool[:5]
				}
			}
			sync()
		default:
			op = "switch algorithm"
			if algo == "" {
				algo = "least_request"
			} else {
				algo = ""
			}
			sync()
		}
		check(step, op)
	}
	for _, o := range live {
		r.Done(&o.p, DoneInfo{})
		want[o.p.Peer]--
	}
	check(-1, "all done")
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// The derived first-pick counts of a cursor equal a direct count of the
// positions taken, across the wrap of the 32-bit rotation position, with
// leases (not counted) in between; closing moves them into the explicit
// counts exactly once, and picks after that count explicitly.
func TestRRCursorCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range 200 {
		n := 2 + rng.IntN(9)
		eps := make([]*endpointState, n)
		for i := range eps {
			eps[i] = &endpointState{}
		}
		start := uint64(1<<32 - 1 - rng.IntN(3000))
		if round%3 == 0 {
			start = uint64(rng.IntN(n))
		}
		c := newRRCursor(start, eps)
		want := make([]int64, n)
		for range 20 {
			if rng.IntN(2) == 0 {
				k := rng.IntN(400)
				for range k {
					p := c.pos.Add(1)
					want[int(uint64(uint32(p))%uint64(n))]++
				}
			} else {
				c.lease(uint32(1 + rng.IntN(1000)))
			}
		}
		got := make([]int64, n)
		if !c.firstPicks(func(s int, st *endpointState, picks int64) {
			if st != eps[s] {
				t.Fatalf("slot %d: wrong endpoint", s)
			}
			got[s] = picks
		}) {
			t.Fatal("open cursor reported closed")
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("round %d (n %d, start %d): first picks (-want +got):\n%s", round, n, start, diff)
		}
		c.close()
		c.close() // a second close adds nothing
		if c.firstPicks(func(int, *endpointState, int64) {}) {
			t.Fatal("closed cursor reported open")
		}
		for s, st := range eps {
			if st.inFlight.Load() != want[s] {
				t.Fatalf("round %d: slot %d folded %d; want %d", round, s, st.inFlight.Load(), want[s])
			}
		}
	}
}

// TestRelease: an attempt ended by Release (the client broke its request,
// which says nothing of the peer) gives back its in-flight count and
// changes nothing else: no request or failure counted, no ewma sample.
func TestRelease(t *testing.T) {
	for _, algo := range []string{"round_robin", "ewma", "least_request", "peak_ewma"} {
		t.Run(algo, func(t *testing.T) {
			r := NewRegistry(Config{})
			mustSync(t, r, Backend{Name: "b", LoadBalance: algo, Endpoints: eps("10.0.0.1:80", "10.0.0.2:80")})
			var a Attempt
			p, err := r.Pick("b", nil, &a)
			if err != nil {
				t.Fatal(err)
			}
			pick := *p
			r.Release(&pick)
			for _, bs := range r.Backends() {
				for _, e := range bs.Endpoints {
					if e.InFlight != 0 || e.Requests != 0 || e.Failures != 0 || e.EWMA != -1 {
						t.Errorf("%s after Release: %+v; want nothing in flight, counted or scored", e.Address, e)
					}
				}
			}
		})
	}
}
