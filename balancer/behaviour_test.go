package balancer

import (
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// §3.4: implementation precedence (busted: "load-balance: ewma with affinity
// persistent gives sticky_persistent").
func TestImplementationPrecedence(t *testing.T) {
	tests := []struct {
		name string
		b    Backend
		want string
	}{
		{"default", Backend{}, "round_robin"},
		{"ewma", Backend{LoadBalance: "ewma"}, "ewma"},
		{"unknown falls back", Backend{LoadBalance: "nope"}, "round_robin"},
		{"ewma with affinity persistent", Backend{LoadBalance: "ewma", SessionAffinity: SessionAffinityConfig{Name: "cookie", Mode: "persistent"}}, "sticky_persistent"},
		{"affinity empty mode is balanced", Backend{SessionAffinity: SessionAffinityConfig{Name: "cookie"}}, "sticky_balanced"},
		{"affinity beats hash-by", Backend{SessionAffinity: SessionAffinityConfig{Name: "cookie"}, UpstreamHashBy: UpstreamHashByConfig{HashBy: strp("$x")}}, "sticky_balanced"},
		{"hash-by beats load-balance", Backend{LoadBalance: "ewma", UpstreamHashBy: UpstreamHashByConfig{HashBy: strp("$x")}}, "chash"},
		{"empty hash-by still selects chash", Backend{UpstreamHashBy: UpstreamHashByConfig{HashBy: strp("")}}, "chash"},
		{"subset", Backend{UpstreamHashBy: UpstreamHashByConfig{HashBy: strp("$x"), HashBySubset: true}}, "chashsubset"},
		{"least_request", Backend{LoadBalance: "least_request"}, "least_request"},
		{"peak_ewma", Backend{LoadBalance: "peak_ewma"}, "peak_ewma"},
	}
	for _, tt := range tests {
		tt.b.Name = "b"
		m, err := tt.b.Model()
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := string(m.Implementation()); got != tt.want {
			t.Errorf("%s: got %s; want %s", tt.name, got, tt.want)
		}
	}
}

// §4.1 property 1: n consecutive picks visit every node once; property 3: a
// no-op sync keeps the position.
func TestRoundRobin(t *testing.T) {
	r := NewRegistry(Config{Rand: seqRand(3)})
	b := Backend{Name: "rr", Endpoints: eps("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80")}
	mustSync(t, r, b)
	window := func() []string {
		var got []string
		for range 4 {
			var a Attempt
			p, err := r.Pick("rr", vars{}, &a)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, p.Peer)
		}
		return got
	}
	first := window()
	seen := map[string]bool{}
	for _, p := range first {
		seen[p] = true
	}
	if len(seen) != 4 {
		t.Fatalf("window %v does not visit each node once", first)
	}
	var next Attempt
	before, _ := r.Pick("rr", vars{}, &next)
	// Same node set in another order: position kept.
	b2 := b
	b2.Endpoints = eps("10.0.0.4:80", "10.0.0.3:80", "10.0.0.2:80", "10.0.0.1:80")
	b2.TrafficShapingPolicy.Weight = 5
	mustSync(t, r, b2)
	var after Attempt
	p, _ := r.Pick("rr", vars{}, &after)
	// The rotation continues in the same permutation: the node after the
	// last one picked, whatever the payload order.
	rotation := append(first, first...)
	want := rotation[indexOf(first, before.Peer)+1]
	if p.Peer != want {
		t.Errorf("after no-op sync got %s; want %s (rotation continued in the same order %v)", p.Peer, want, first)
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// §4.2: the decay formula, the score, P2C over untried peers, slow start.
func TestEWMA(t *testing.T) {
	now := 1700000000.0
	r := NewRegistry(Config{Rand: seqRand(5), Now: func() time.Time { return time.Unix(0, int64(now*1e9)) }})
	b := Backend{Name: "e", LoadBalance: "ewma", Endpoints: eps("10.0.0.1:80", "10.0.0.2:80")}
	mustSync(t, r, b)

	// First sample with no stat: ewma = rtt (w ≈ 0 since last = 0).
	r.Feedback("e", "10.0.0.1:80", DoneInfo{ConnectTime: 10 * time.Millisecond, ResponseTime: 90 * time.Millisecond})
	if got, _ := r.EWMA("e", "10.0.0.1:80"); math.Abs(got-0.1) > 1e-9 {
		t.Fatalf("first ewma = %v; want 0.1 (connect + response)", got)
	}
	// 5 s later a 0.3 s sample: ewma' = 0.1·w + 0.3·(1−w), w = e^(−0.5).
	now += 5
	r.Feedback("e", "10.0.0.1:80", DoneInfo{ResponseTime: 300 * time.Millisecond})
	w := math.Exp(-0.5)
	if got, _ := r.EWMA("e", "10.0.0.1:80"); math.Abs(got-(0.1*w+0.3*(1-w))) > 1e-9 {
		t.Errorf("decayed ewma = %v; want %v", got, 0.1*w+0.3*(1-w))
	}
	// The score is the stored ewma decayed to now; the peer with no stat
	// scores 0 and wins both P2C draws.
	for range 20 {
		var a Attempt
		p, err := r.Pick("e", vars{}, &a)
		if err != nil {
			t.Fatal(err)
		}
		if p.Peer != "10.0.0.2:80" || p.EWMAScore != 0 {
			t.Fatalf("got %s score %v; want the unscored 10.0.0.2:80 with 0", p.Peer, p.EWMAScore)
		}
		// A retry excludes the tried peer.
		a.LastFailure = FailureFailed
		p2, _ := r.Pick("e", vars{}, &a)
		if p2.Peer != "10.0.0.1:80" {
			t.Fatalf("retry got %s; want the untried 10.0.0.1:80", p2.Peer)
		}
	}
	// Slow start: an added endpoint gets the mean stored EWMA of the peers with
	// stats.
	stored, _ := r.EWMA("e", "10.0.0.1:80")
	b.Endpoints = eps("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80")
	mustSync(t, r, b)
	if got, ok := r.EWMA("e", "10.0.0.3:80"); !ok || math.Abs(got-stored) > 1e-12 {
		t.Errorf("slow start ewma = %v, %v; want %v", got, ok, stored)
	}
	// Stats survive a rebuild and are dropped with the endpoint.
	if got, _ := r.EWMA("e", "10.0.0.1:80"); got != stored {
		t.Errorf("ewma after rebuild = %v; want %v", got, stored)
	}
	b.Endpoints = eps("10.0.0.2:80", "10.0.0.3:80")
	mustSync(t, r, b)
	r.SetEWMA("e", "10.0.0.3:80", 0.5, now)
	b.Endpoints = eps("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80")
	mustSync(t, r, b)
	// The re-added endpoint's old stats were deleted with it: it is seeded
	// with the mean of the peers that have stats (only 10.0.0.3, 0.5).
	if got, _ := r.EWMA("e", "10.0.0.1:80"); got != 0.5 {
		t.Errorf("re-added endpoint ewma = %v; want 0.5 (old stats deleted, slow start)", got)
	}
}

// §4.2 step 3: when every peer has been tried, ewma picks among all of them
// again ("all endpoints have been retried").
func TestEWMAAllTried(t *testing.T) {
	r := NewRegistry(Config{Rand: seqRand(31), Now: fixedClock(1700000000)})
	mustSync(t, r, Backend{Name: "e", LoadBalance: "ewma", Endpoints: eps("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80")})
	seen := map[string]bool{}
	var a Attempt
	for try := range 9 {
		p, err := r.Pick("e", vars{}, &a)
		if err != nil {
			t.Fatalf("try %d: %v", try, err)
		}
		if try < 3 && seen[p.Peer] {
			t.Fatalf("try %d repeated %s before every peer was tried", try, p.Peer)
		}
		seen[p.Peer] = true
		a.LastFailure = FailureFailed
	}
	if len(seen) != 3 {
		t.Errorf("tried %v; want all three", seen)
	}
}

// Fix of spec §4.2: two backends sharing an ip:port keep separate stats.
func TestEWMAStatsPerBackend(t *testing.T) {
	r := NewRegistry(Config{Now: fixedClock(1700000000)})
	mustSync(t, r,
		Backend{Name: "a", LoadBalance: "ewma", Endpoints: eps("10.0.0.1:80", "10.0.0.2:80")},
		Backend{Name: "b", LoadBalance: "ewma", Endpoints: eps("10.0.0.1:80", "10.0.0.2:80")})
	r.Feedback("a", "10.0.0.1:80", DoneInfo{ResponseTime: time.Second})
	if _, ok := r.EWMA("b", "10.0.0.1:80"); ok {
		t.Error("backend b sees backend a's sample")
	}
}

// A failed attempt counts as a sample of failurePenalty, so a peer that
// refuses connections is ranked behind the peers that answer instead of
// keeping the best score there is (TestShimDecisions in lua/).
func TestEWMAFailedAttemptIsPenalised(t *testing.T) {
	r := NewRegistry(Config{Rand: seqRand(3), Now: fixedClock(1700000000)})
	mustSync(t, r, Backend{Name: "e", LoadBalance: "ewma", Endpoints: eps("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80")})
	r.Feedback("e", "10.0.0.1:80", DoneInfo{Failed: true})
	r.Feedback("e", "10.0.0.2:80", DoneInfo{ResponseTime: time.Millisecond})
	r.Feedback("e", "10.0.0.3:80", DoneInfo{ResponseTime: 2 * time.Millisecond})
	if got, _ := r.EWMA("e", "10.0.0.1:80"); got != failurePenalty {
		t.Errorf("ewma after one failure = %v; want %v", got, failurePenalty)
	}
	counts := map[string]int{}
	for range 300 {
		var a Attempt
		p, err := r.Pick("e", vars{}, &a)
		if err != nil {
			t.Fatal(err)
		}
		counts[p.Peer]++
	}
	// The failed peer loses every pair; the slower live peer wins its pairs
	// with it (a third of them).
	if counts["10.0.0.1:80"] != 0 || counts["10.0.0.3:80"] < 50 {
		t.Errorf("picks %v; want none for the failed peer and about 100 for 10.0.0.3:80", counts)
	}
}

func TestPeakEWMAReactsAtOnce(t *testing.T) {
	r := NewRegistry(Config{Now: fixedClock(1700000000)})
	mustSync(t, r, Backend{Name: "p", LoadBalance: "peak_ewma", Endpoints: eps("10.0.0.1:80", "10.0.0.2:80")})
	r.Feedback("p", "10.0.0.1:80", DoneInfo{ResponseTime: 10 * time.Millisecond})
	r.Feedback("p", "10.0.0.1:80", DoneInfo{ResponseTime: 2 * time.Second})
	if got, _ := r.EWMA("p", "10.0.0.1:80"); got != 2 {
		t.Errorf("peak ewma = %v; want 2 (a slow response raises it at once)", got)
	}
}

// peak_ewma cold start: peers without a latency sample are not free once
// they have requests in flight, so new requests go to the idle one.
func TestPeakEWMAColdStart(t *testing.T) {
	r := NewRegistry(Config{Rand: seqRand(29), Now: fixedClock(1700000000)})
	mustSync(t, r, Backend{Name: "p", LoadBalance: "peak_ewma", Endpoints: eps("10.0.0.1:80", "10.0.0.2:80")})
	var a Attempt
	busy, err := r.Pick("p", vars{}, &a) // stays in flight
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		var b Attempt
		p, _ := r.Pick("p", vars{}, &b)
		if p.Peer == busy.Peer {
			t.Fatalf("picked the unscored peer with a request in flight (%s)", p.Peer)
		}
		r.Done(p, DoneInfo{Failed: true}) // no latency sample
	}
}

// In-flight counts: least_request prefers the idle peer.
func TestLeastRequest(t *testing.T) {
	r := NewRegistry(Config{Rand: seqRand(9)})
	mustSync(t, r, Backend{Name: "l", LoadBalance: "least_request", Endpoints: eps("10.0.0.1:80", "10.0.0.2:80")})
	var a Attempt
	busy, _ := r.Pick("l", vars{}, &a) // stays in flight
	for range 50 {
		var b Attempt
		p, _ := r.Pick("l", vars{}, &b)
		if p.Peer == busy.Peer {
			t.Fatalf("picked the busy peer %s", p.Peer)
		}
		r.Done(p, DoneInfo{})
	}
	r.Done(busy, DoneInfo{})
	for _, bs := range r.Backends() {
		for _, e := range bs.Endpoints {
			if e.InFlight != 0 {
				t.Errorf("%s in flight %d after Done", e.Address, e.InFlight)
			}
		}
	}
}

// §4.4: subsets in JSON order with padding; picks stay in the subset.
func TestCHashSubset(t *testing.T) {
	r := NewRegistry(Config{Rand: seqRand(11)})
	addrs := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80", "10.0.0.6:80", "10.0.0.7:80"}
	mustSync(t, r, Backend{Name: "s", Endpoints: eps(addrs...),
		UpstreamHashBy: UpstreamHashByConfig{HashBy: strp("$request_uri"), HashBySubset: true, HashBySubsetSize: 3}})
	b := r.snap.Load().get("s")
	cs := b.algo.(*chashSubset)
	if len(cs.subsets) != 3 {
		t.Fatalf("sets = %d; want 3", len(cs.subsets))
	}
	var set3 []string
	for _, i := range cs.subsets[2] {
		set3 = append(set3, b.peers[i].addr)
	}
	if strings.Join(set3, ",") != "10.0.0.7:80,10.0.0.1:80,10.0.0.2:80" {
		t.Errorf("set3 = %v; want e7, e1, e2", set3)
	}
	want := cs.subsets[cs.ring.find(crc32Of("/k"))]
	for range 50 {
		var a Attempt
		p, _ := r.Pick("s", vars{"request_uri": "/k"}, &a)
		if !containsPeer(b, want, p.Peer) {
			t.Fatalf("pick %s outside the key's subset", p.Peer)
		}
	}
}

func containsPeer(b *backend, set []int, addr string) bool {
	for _, i := range set {
		if b.peers[i].addr == addr {
			return true
		}
	}
	return false
}

// §4.5 and §5: sticky lookup, retries with and without change_on_failure.
func TestStickyRetries(t *testing.T) {
	for _, mode := range []string{"balanced", "persistent"} {
		t.Run(mode, func(t *testing.T) {
			r := NewRegistry(Config{Rand: seqRand(13), Now: fixedClock(1700000000)})
			b := Backend{Name: "st", Endpoints: eps("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"),
				SessionAffinity: SessionAffinityConfig{Name: "cookie", Mode: mode, CookieSessionAffinity: CookieSessionAffinity{
					Name: "route", Locations: map[string][]string{"h": {"/"}}}}}
			mustSync(t, r, b)
			req := vars{"host": "h", "server_name": "h", "location_path": "/"}
			var a Attempt
			p, _ := r.Pick("st", req, &a)
			if p.SetCookie == "" {
				t.Fatal("first pick set no cookie")
			}
			cookie := strings.SplitN(p.SetCookie, ";", 2)[0]
			withCookie := vars{"host": "h", "server_name": "h", "location_path": "/", "http_cookie": "x=1; " + cookie}
			for range 10 {
				var a2 Attempt
				p2, _ := r.Pick("st", withCookie, &a2)
				if p2.Peer != p.Peer || p2.SetCookie != "" {
					t.Fatalf("cookie not honoured: got %s (cookie %q); want %s", p2.Peer, p2.SetCookie, p.Peer)
				}
				// Without change_on_failure a retry goes to the same peer.
				a2.LastFailure = FailureFailed
				if p3, _ := r.Pick("st", withCookie, &a2); p3.Peer != p.Peer {
					t.Fatalf("retry moved to %s without change_on_failure", p3.Peer)
				}
			}
			b.SessionAffinity.CookieSessionAffinity.ChangeOnFailure = true
			mustSync(t, r, b)
			var a3 Attempt
			if _, err := r.Pick("st", withCookie, &a3); err != nil {
				t.Fatal(err)
			}
			a3.LastFailure = FailureFailed
			p4, _ := r.Pick("st", withCookie, &a3)
			if p4.Peer == p.Peer || p4.SetCookie == "" {
				t.Errorf("change_on_failure retry got %s cookie %q; want another peer and a new cookie", p4.Peer, p4.SetCookie)
			}
		})
	}
}

// Candidates and CandidatePicks list the peers successive failed attempts
// would get: ewma's are distinct, sticky's each carry their own cookie.
func TestCandidates(t *testing.T) {
	r := NewRegistry(Config{Rand: seqRand(37), Now: fixedClock(1700000000)})
	mustSync(t, r,
		Backend{Name: "e", LoadBalance: "ewma", Endpoints: eps("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80")},
		Backend{Name: "s", Endpoints: eps("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"), SessionAffinity: SessionAffinityConfig{
			Name: "cookie", Mode: "persistent", CookieSessionAffinity: CookieSessionAffinity{Name: "route", Locations: map[string][]string{"h": {"/"}}}}})
	var a Attempt
	var dst [3]string
	n, first, err := r.Candidates("e", vars{}, &a, dst[:])
	if err != nil || n != 3 || first.Peer != dst[0] {
		t.Fatalf("Candidates = %d, %+v, %v", n, first, err)
	}
	if dst[0] == dst[1] || dst[1] == dst[2] || dst[0] == dst[2] {
		t.Errorf("ewma candidates repeat a peer: %v", dst)
	}
	var b Attempt
	var picks [3]Pick
	req := vars{"host": "h", "server_name": "h", "location_path": "/"}
	n, err = r.CandidatePicks("s", req, &b, picks[:])
	if err != nil || n != 3 {
		t.Fatalf("CandidatePicks = %d, %v", n, err)
	}
	for i, p := range picks {
		want := "route=" + md5hex("s"+p.Peer) + "|" + BackendKey("s") + "; Path=/; HttpOnly"
		if p.SetCookie != want {
			t.Errorf("candidate %d (%s) cookie %q; want %q", i, p.Peer, p.SetCookie, want)
		}
	}
	var c Attempt
	if _, err := r.CandidatePicks("nope", req, &c, picks[:]); !errors.Is(err, ErrUnknownBackend) {
		t.Errorf("unknown backend: %v", err)
	}
}

// Round-robin candidates walk the rotation from the request's own start and
// leave the shared cursor to the next request: k requests asking for k
// candidates each still start on k different peers (the shim asks for 3).
func TestRoundRobinCandidatesKeepRotation(t *testing.T) {
	r := NewRegistry(Config{Rand: seqRand(5), Now: fixedClock(1700000000)})
	mustSync(t, r, Backend{Name: "rr", Endpoints: eps("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80")})
	firsts := map[string]int{}
	for i := 0; i < 300; i++ {
		var a Attempt
		var dst [3]string
		n, _, err := r.Candidates("rr", vars{}, &a, dst[:])
		if err != nil || n != 3 {
			t.Fatalf("Candidates = %d, %v", n, err)
		}
		if dst[0] == dst[1] || dst[1] == dst[2] || dst[0] == dst[2] {
			t.Fatalf("request %d: candidates repeat a peer: %v", i, dst)
		}
		firsts[dst[0]]++
	}
	for _, ep := range []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"} {
		if firsts[ep] != 100 {
			t.Errorf("first attempts %v; want 100 on each peer", firsts)
			break
		}
	}
	// A lease of 6 positions names the same peers 6 picks would, and moves
	// the shared rotation by 6.
	var a Attempt
	next, _ := r.Pick("rr", vars{}, &a)
	start, n, err := r.Lease("rr", 6)
	if err != nil || n != 3 {
		t.Fatalf("Lease = %d, %d, %v", start, n, err)
	}
	peers := r.Peers("rr")
	if want := peers[start%uint32(n)]; next.Peer != want {
		t.Errorf("the pick before the lease got %s; position start is %s", next.Peer, want)
	}
	var after Attempt
	p, _ := r.Pick("rr", vars{}, &after)
	if want := peers[(start+7)%uint32(n)]; p.Peer != want {
		t.Errorf("the pick after a lease of 6 got %s; want %s (position start+7)", p.Peer, want)
	}
	r.Count("rr", peers[0], 5, 2)
	r.Count("rr", "10.9.9.9:80", 1, 1) // unknown: ignored
	for _, b := range r.Backends() {
		for _, ep := range b.Endpoints {
			if ep.Address == peers[0] && (ep.Requests != 5 || ep.Failures != 2) {
				t.Errorf("after Count: %+v; want 5 requests, 2 failures", ep)
			}
		}
	}
	if r.Scored("rr") {
		t.Errorf("round robin is not scored")
	}
	if _, _, err := r.Lease("nope", 4); !errors.Is(err, ErrUnknownBackend) {
		t.Errorf("Lease of an unknown backend: %v", err)
	}
	got := r.Peers("rr")
	if len(got) != 3 || got[0] != "10.0.0.1:80" || got[2] != "10.0.0.3:80" {
		t.Errorf("Peers = %v", got)
	}
	if r.Peers("nope") != nil {
		t.Errorf("Peers of an unknown backend is not nil")
	}
}

// §3.6: the canary rules, in order.
func TestCanaryRouting(t *testing.T) {
	primary := Backend{Name: "p", Endpoints: eps("10.0.0.1:80"), AlternativeBackends: []string{"c"}}
	canary := func(p TrafficShapingPolicy) Backend {
		return Backend{Name: "c", NoServer: true, Endpoints: eps("10.0.0.9:80"), TrafficShapingPolicy: p}
	}
	tests := []struct {
		name   string
		policy TrafficShapingPolicy
		req    vars
		want   string
	}{
		{"header always", TrafficShapingPolicy{Header: "X-Canary"}, vars{"http_x_canary": "always"}, "c"},
		{"header never beats weight 100", TrafficShapingPolicy{Header: "X-Canary", Weight: 100}, vars{"http_x_canary": "never"}, "p"},
		{"header other falls through to weight 0", TrafficShapingPolicy{Header: "X-Canary"}, vars{"http_x_canary": "maybe"}, "p"},
		{"header value match", TrafficShapingPolicy{Header: "X-Canary", HeaderValue: "v2"}, vars{"http_x_canary": "v2"}, "c"},
		{"header value: always is not special", TrafficShapingPolicy{Header: "X-Canary", HeaderValue: "v2"}, vars{"http_x_canary": "always"}, "p"},
		{"header pattern unanchored", TrafficShapingPolicy{Header: "X-Canary", HeaderPattern: "beta"}, vars{"http_x_canary": "xbetax"}, "c"},
		{"header pattern case-sensitive", TrafficShapingPolicy{Header: "X-Canary", HeaderPattern: "beta"}, vars{"http_x_canary": "BETA"}, "p"},
		{"cookie always", TrafficShapingPolicy{Cookie: "canary"}, vars{"cookie_canary": "always"}, "c"},
		{"cookie never beats weight", TrafficShapingPolicy{Cookie: "canary", Weight: 100}, vars{"cookie_canary": "never"}, "p"},
		{"header beats cookie", TrafficShapingPolicy{Header: "X-Canary", Cookie: "canary"}, vars{"http_x_canary": "never", "cookie_canary": "always"}, "p"},
		{"weight 100", TrafficShapingPolicy{Weight: 100}, vars{}, "c"},
		{"weight total below 100 ignored", TrafficShapingPolicy{Weight: 50, WeightTotal: 50}, vars{}, "mixed"},
		{"weight total 1000, weight 1000", TrafficShapingPolicy{Weight: 1000, WeightTotal: 1000}, vars{}, "c"},
		{"weight 0", TrafficShapingPolicy{}, vars{}, "p"},
		{"dashes in header name", TrafficShapingPolicy{Header: "My-Canary-Flag"}, vars{"http_my_canary_flag": "always"}, "c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRegistry(Config{Rand: seqRand(17)})
			mustSync(t, r, primary, canary(tt.policy))
			seen := map[string]int{}
			for range 200 {
				var a Attempt
				p, err := r.Pick("p", tt.req, &a)
				if err != nil {
					t.Fatal(err)
				}
				seen[p.Backend]++
				if (p.Backend == "c") != p.Alternative {
					t.Fatalf("Alternative = %v for backend %s", p.Alternative, p.Backend)
				}
			}
			switch tt.want {
			case "mixed":
				if seen["c"] == 0 || seen["p"] == 0 {
					t.Errorf("got %v; want both backends", seen)
				}
			default:
				if seen[tt.want] != 200 {
					t.Errorf("got %v; want all on %s", seen, tt.want)
				}
			}
		})
	}
}

// #8212 (kept): a primary with no endpoints answers 503 even at weight 100; a
// canary with no endpoints leaves traffic on the primary.
func TestCanaryWithoutEndpoints(t *testing.T) {
	r := NewRegistry(Config{})
	mustSync(t, r,
		Backend{Name: "p", AlternativeBackends: []string{"c"}},
		Backend{Name: "c", Endpoints: eps("10.0.0.9:80"), TrafficShapingPolicy: TrafficShapingPolicy{Weight: 100}})
	var a Attempt
	if _, err := r.Pick("p", vars{}, &a); !errors.Is(err, ErrUnknownBackend) {
		t.Errorf("primary without endpoints: err = %v; want ErrUnknownBackend", err)
	}
	mustSync(t, r,
		Backend{Name: "p", Endpoints: eps("10.0.0.1:80"), AlternativeBackends: []string{"c"}},
		Backend{Name: "c", TrafficShapingPolicy: TrafficShapingPolicy{Weight: 100}})
	var b Attempt
	if p, _ := r.Pick("p", vars{}, &b); p.Backend != "p" {
		t.Errorf("canary without endpoints: got %s; want p", p.Backend)
	}
}

// Canary affinity: a cookie for the canary's backend_key routes to it.
func TestCanaryAffinity(t *testing.T) {
	aff := SessionAffinityConfig{Name: "cookie", CookieSessionAffinity: CookieSessionAffinity{Name: "INGRESSCOOKIE"}}
	r := NewRegistry(Config{Rand: seqRand(19)})
	mustSync(t, r,
		Backend{Name: "p", Endpoints: eps("10.0.0.1:80"), AlternativeBackends: []string{"c"}, SessionAffinity: aff},
		Backend{Name: "c", Endpoints: eps("10.0.0.9:80"), SessionAffinity: aff})
	toCanary := vars{"http_cookie": "INGRESSCOOKIE=k|" + BackendKey("c")}
	toPrimary := vars{"http_cookie": "INGRESSCOOKIE=k|" + BackendKey("p"), "http_x": "always"}
	var a, b Attempt
	if p, _ := r.Pick("p", toCanary, &a); p.Backend != "c" {
		t.Errorf("canary-affinitized request went to %s", p.Backend)
	}
	if p, _ := r.Pick("p", toPrimary, &b); p.Backend != "p" {
		t.Errorf("primary-affinitized request went to %s", p.Backend)
	}
}

// Beyond ingress-nginx: evaluating every alternative in order.
func TestAllAlternatives(t *testing.T) {
	r := NewRegistry(Config{AllAlternatives: true, Rand: seqRand(23)})
	mustSync(t, r,
		Backend{Name: "p", Endpoints: eps("10.0.0.1:80"), AlternativeBackends: []string{"c1", "c2"}},
		Backend{Name: "c1", Endpoints: eps("10.0.0.8:80"), TrafficShapingPolicy: TrafficShapingPolicy{Header: "X-One"}},
		Backend{Name: "c2", Endpoints: eps("10.0.0.9:80"), TrafficShapingPolicy: TrafficShapingPolicy{Header: "X-Two"}})
	var a Attempt
	if p, _ := r.Pick("p", vars{"http_x_two": "always"}, &a); p.Backend != "c2" {
		t.Errorf("got %s; want c2", p.Backend)
	}
	r2 := NewRegistry(Config{Rand: seqRand(23)})
	mustSync(t, r2,
		Backend{Name: "p", Endpoints: eps("10.0.0.1:80"), AlternativeBackends: []string{"c1", "c2"}},
		Backend{Name: "c1", Endpoints: eps("10.0.0.8:80"), TrafficShapingPolicy: TrafficShapingPolicy{Header: "X-One"}},
		Backend{Name: "c2", Endpoints: eps("10.0.0.9:80"), TrafficShapingPolicy: TrafficShapingPolicy{Header: "X-Two"}})
	var b Attempt
	if p, _ := r2.Pick("p", vars{"http_x_two": "always"}, &b); p.Backend != "p" {
		t.Errorf("default mode got %s; want p (only alternativeBackends[1] is read)", p.Backend)
	}
}

// §3.1 fix: one bad backend does not stop the others, and keeps its previous
// balancer.
func TestSyncIsolatesFailures(t *testing.T) {
	r := NewRegistry(Config{})
	mustSync(t, r, Backend{Name: "a", Endpoints: eps("10.0.0.1:80")})
	v := r.Version()
	err := r.Sync([]Backend{
		{Name: "a", Endpoints: []Endpoint{{Address: "10.0.0.2", Port: PortString("99999")}}},
		{Name: "b", Endpoints: eps("10.0.0.3:80")},
		{Name: "c", Endpoints: eps("10.0.0.4:80"), TrafficShapingPolicy: TrafficShapingPolicy{Header: "X", HeaderPattern: "(?<=x)"}},
	})
	if err == nil || !strings.Contains(err.Error(), `"a"`) || !strings.Contains(err.Error(), `"c"`) {
		t.Fatalf("Sync error = %v; want one naming a and c", err)
	}
	if r.Version() != v+1 {
		t.Errorf("version %d; want %d", r.Version(), v+1)
	}
	var x, y, z Attempt
	if p, _ := r.Pick("a", vars{}, &x); p.Peer != "10.0.0.1:80" {
		t.Errorf("a = %q; want its previous balancer", p.Peer)
	}
	if p, _ := r.Pick("b", vars{}, &y); p.Peer != "10.0.0.3:80" {
		t.Errorf("b = %q; want applied", p.Peer)
	}
	// c is served; its rejected pattern keeps header requests on the primary.
	if p, err := r.Pick("c", vars{"http_x": "x"}, &z); err != nil || p.Peer != "10.0.0.4:80" {
		t.Errorf("c = %q, %v", p.Peer, err)
	}
	// Removed backends disappear.
	mustSync(t, r, Backend{Name: "b", Endpoints: eps("10.0.0.3:80")})
	var w Attempt
	if _, err := r.Pick("a", vars{}, &w); !errors.Is(err, ErrUnknownBackend) {
		t.Errorf("removed backend: %v", err)
	}
}

func TestDecodeBackends(t *testing.T) {
	const canary = `{"name":"default-echo-canary-80","port":80,"sslPassthrough":false,"endpoints":[{"address":"10.0.1.1","port":"8080"}],"sessionAffinityConfig":{"name":"","mode":"","cookieSessionAffinity":{"name":""}},"upstreamHashByConfig":{"upstream-hash-by":"$request_uri","upstream-hash-by-subset":true,"upstream-hash-by-subset-size":3},"noServer":true,"trafficShapingPolicy":{"weight":20,"weightTotal":100,"header":"X-Canary","headerValue":"","headerPattern":"","cookie":"canary"}}`
	bs, err := DecodeBackends([]byte("[" + canary + `,{"name":"x","port":"http","maxFails":0,"hash":"y"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(mustJSON(t, bs[0])); got != canary {
		t.Errorf("re-encode differs\n got %s\nwant %s", got, canary)
	}
	if bs[1].Port != PortString("http") || bs[1].Endpoints != nil {
		t.Errorf("second backend = %+v", bs[1])
	}
	for _, bad := range []struct{ body, want string }{
		{``, "empty body"},
		{`{}`, "JSON array"},
		{` null `, "got null"},
		{`[{"name":"ok"},{"name":"bad","port":true}]`, `backend 1 ("bad")`},
		{`[{"name":"n","endpoints":"x"}]`, `backend 0 ("n")`},
	} {
		if _, err := DecodeBackends([]byte(bad.body)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("DecodeBackends(%q) = %v; want error containing %q", bad.body, err, bad.want)
		}
	}
}

func TestIPv6AndExternalName(t *testing.T) {
	r2 := NewRegistry(Config{})
	svc := &BackendService{Spec: []byte(`{"type":"ExternalName","externalName":"192.0.2.7"}`)}
	mustSync(t, r2,
		Backend{Name: "v6", Endpoints: []Endpoint{{Address: "fd00::1", Port: PortString("8080")}}},
		Backend{Name: "ext", Service: svc, Endpoints: []Endpoint{{Address: "192.0.2.7", Port: PortString("80")}}})
	var a, b Attempt
	if p, _ := r2.Pick("v6", vars{}, &a); p.Peer != "[fd00::1]:8080" {
		t.Errorf("v6 peer = %q", p.Peer)
	}
	if p, err := r2.Pick("ext", vars{}, &b); err != nil || p.Peer != "192.0.2.7:80" {
		t.Errorf("ExternalName IP literal = %q, %v; want served (fix of #13076)", p.Peer, err)
	}
}

func TestConcurrentSyncAndPick(t *testing.T) {
	r := NewRegistry(Config{})
	algos := []Backend{
		{Name: "rr", Endpoints: eps("10.0.0.1:80", "10.0.0.2:80")},
		{Name: "ewma", LoadBalance: "ewma", Endpoints: eps("10.0.0.1:80", "10.0.0.2:80")},
		{Name: "ch", UpstreamHashBy: UpstreamHashByConfig{HashBy: strp("$request_uri")}, Endpoints: eps("10.0.0.1:80", "10.0.0.2:80")},
		{Name: "st", SessionAffinity: SessionAffinityConfig{Name: "cookie"}, Endpoints: eps("10.0.0.1:80", "10.0.0.2:80"), AlternativeBackends: []string{"rr"}},
	}
	mustSync(t, r, algos...)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := vars{"request_uri": "/x", "http_cookie": "INGRESSCOOKIE=abc"}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := algos[(g+i)%len(algos)].Name
				var a Attempt
				p, err := r.Pick(name, req, &a)
				if err == nil {
					r.Done(p, DoneInfo{ResponseTime: time.Millisecond})
					r.Feedback(name, p.Peer, DoneInfo{ResponseTime: time.Millisecond})
				}
				var dst [3]string
				a.Reset()
				_, _, _ = r.Candidates(name, req, &a, dst[:])
				_ = r.NeededVars(name)
			}
		}()
	}
	for i := range 200 {
		bs := append([]Backend(nil), algos...)
		bs[i%len(bs)].Endpoints = eps("10.0.0.3:80", "10.0.0.4:80")
		_ = r.Sync(bs)
		_ = r.Backends()
	}
	close(stop)
	wg.Wait()
}

// A flush of the shim's timed counts moves an ewma score under steady load as
// its samples would one by one (within 1 %: they fall within 100 ms of a
// 10 s decay), failures counting failurePenalty each; peak_ewma takes the
// longest sample above its score; an unscored backend only counts. (After
// an idle gap, one by one the first sample takes the gap's whole weight;
// the flush gives it to the mean of its samples.)
func TestCountTimedMovesScoreAsSamples(t *testing.T) {
	now := 1700000000.0
	clock := func() time.Time { return time.Unix(0, int64(now*1e9)) }
	one, sum := NewRegistry(Config{Now: clock}), NewRegistry(Config{Now: clock})
	for _, r := range []*Registry{one, sum} {
		mustSync(t, r, Backend{Name: "e", LoadBalance: "ewma", Endpoints: eps("10.0.0.1:80")},
			Backend{Name: "p", LoadBalance: "peak_ewma", Endpoints: eps("10.0.0.1:80")},
			Backend{Name: "rr", Endpoints: eps("10.0.0.1:80")})
		r.Feedback("e", "10.0.0.1:80", DoneInfo{ResponseTime: 50 * time.Millisecond})
		r.Feedback("p", "10.0.0.1:80", DoneInfo{ResponseTime: 50 * time.Millisecond})
	}
	for _, failures := range []int{0, 3} {
		// Both from the same score; what is compared is how far the
		// samples move it from its decay alone.
		start := now
		one.SetEWMA("e", "10.0.0.1:80", 0.05, now)
		sum.SetEWMA("e", "10.0.0.1:80", 0.05, now)
		var c TimedCounts
		for i := range 200 {
			now += 0.0005
			rtt := time.Duration(1+i%20) * time.Millisecond
			failed := i%67 == 66 && failures > 0
			one.Feedback("e", "10.0.0.1:80", DoneInfo{ResponseTime: rtt, Failed: failed})
			c.Completed++
			if failed {
				c.Failed++
				continue
			}
			c.RTTSum += rtt
			c.RTTMax = max(c.RTTMax, rtt)
		}
		sum.CountTimed("e", "10.0.0.1:80", c)
		decayed := 0.05 * math.Exp(-(now-start)/decayTime)
		want, _ := one.EWMA("e", "10.0.0.1:80")
		got, _ := sum.EWMA("e", "10.0.0.1:80")
		if math.Abs((got-decayed)-(want-decayed)) > 0.01*math.Abs(want-decayed) {
			t.Errorf("%d failures: one flush moved the score by %v; its samples one by one by %v", c.Failed, got-decayed, want-decayed)
		}
		st := sum.Backends()[0].Endpoints[0]
		if failures > 0 && st.Failures != c.Failed {
			t.Errorf("failures %d; want %d", st.Failures, c.Failed)
		}
	}
	sum.CountTimed("p", "10.0.0.1:80", TimedCounts{Completed: 3, RTTSum: 1200 * time.Millisecond, RTTMax: time.Second})
	if got, _ := sum.EWMA("p", "10.0.0.1:80"); got != 1 {
		t.Errorf("peak ewma = %v; want 1 (the longest sample, above the score, sets it)", got)
	}
	sum.CountTimed("rr", "10.0.0.1:80", TimedCounts{Completed: 5, Failed: 1, RTTSum: 4 * time.Second, RTTMax: time.Second})
	if _, ok := sum.EWMA("rr", "10.0.0.1:80"); ok {
		t.Error("round robin has a score after timed counts")
	}
}

// ScoreOnce: a batch of ewma picks made at one instant reads each peer's
// cost once and picks exactly as per-pick reads would at that instant;
// scores that move during the batch do not change its picks until the next
// batch; a configuration change in between reads the new backend's costs.
func TestScoreOnce(t *testing.T) {
	now := 1700000000.0
	clock := func() time.Time { return time.Unix(0, int64(now*1e9)) }
	peers := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"}
	b := Backend{Name: "e", LoadBalance: "ewma", Endpoints: eps(peers...)}
	batch := func(r *Registry, a *Attempt, n int) []string {
		var out []string
		for range n {
			a.Reset()
			var dst [3]Pick
			k, err := r.CandidatePicks("e", vars{}, a, dst[:])
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range dst[:k] {
				out = append(out, p.Peer)
			}
		}
		return out
	}
	regs := [2]*Registry{}
	for i := range regs {
		regs[i] = NewRegistry(Config{Rand: seqRand(7), Now: clock})
		mustSync(t, regs[i], b)
		for j, p := range peers {
			regs[i].Feedback("e", p, DoneInfo{ResponseTime: time.Duration(1+j) * time.Millisecond})
		}
	}
	var perPick, once Attempt
	once.ScoreOnce(true)
	want, got := batch(regs[0], &perPick, 200), batch(regs[1], &once, 200)
	if !slices.Equal(got, want) {
		t.Fatalf("ScoreOnce picks differ from per-pick reads at the same instant:\n%v\n%v", got, want)
	}
	// The best peer falls behind during the batch: the batch keeps its
	// costs; the next batch reads the new ones.
	regs[1].SetEWMA("e", peers[0], 5, now)
	if got := batch(regs[1], &once, 50); firstCounts(got)[peers[0]] < 20 {
		t.Errorf("within the batch the best peer lost its place: first picks %v", firstCounts(got))
	}
	once.ScoreOnce(true)
	if c := firstCounts(batch(regs[1], &once, 50)); c[peers[0]] != 0 {
		t.Errorf("a new batch still prefers the peer now scored 5 s: first picks %v", c)
	}
	// A Sync makes a new backend: its costs are read afresh.
	mustSync(t, regs[1], Backend{Name: "e", LoadBalance: "ewma", Endpoints: eps(peers[1:]...)})
	if c := firstCounts(batch(regs[1], &once, 20)); c[peers[0]] != 0 || c[peers[1]]+c[peers[2]] != 20 {
		t.Errorf("after a Sync the batch picked %v", c)
	}
}

// firstCounts counts each peer as the first of a pick's three candidates.
func firstCounts(cands []string) map[string]int {
	c := map[string]int{}
	for i := 0; i < len(cands); i += 3 {
		c[cands[i]]++
	}
	return c
}
