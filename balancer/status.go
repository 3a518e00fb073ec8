package balancer

import (
	"errors"
	"math"
	"sort"
	"time"
)

// BackendStatus is a read-only view of one balancer for debug and status pages.
type BackendStatus struct {
	Name         string           `json:"name"`
	Algorithm    string           `json:"algorithm"`
	Alternatives []string         `json:"alternatives,omitempty"`
	Endpoints    []EndpointStatus `json:"endpoints"`
}

// EndpointStatus is one endpoint's live counters.
type EndpointStatus struct {
	Address string `json:"address"`
	// EWMA is the decayed score in seconds, -1 when the endpoint has none.
	EWMA     float64 `json:"ewma"`
	InFlight int64   `json:"inFlight"`
	// Requests counts attempts reported through Done or Feedback.
	Requests uint64 `json:"requests"`
	Failures uint64 `json:"failures"`
}

// Backends returns every balancer, sorted by name. It waits for a Sync in
// progress (round-robin in-flight counts are derived from cursors Sync
// closes).
func (r *Registry) Backends() []BackendStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	snap := r.snap.Load()
	now := r.nowSeconds()
	all := snap.all()
	out := make([]BackendStatus, 0, len(all))
	for _, b := range all {
		bs := BackendStatus{Name: b.name, Algorithm: b.algoName, Alternatives: b.alternatives}
		// Explicit counts first: a pick and its Done between the two reads
		// then show as in flight, never as -1.
		inFlight := make([]int64, len(b.peers))
		for i, p := range b.peers {
			inFlight[i] = p.st.inFlight.Load()
		}
		if rr, ok := b.algo.(*roundRobin); ok {
			// Slot s of the cursor is b.peers[rr.order[s]] in every build
			// sharing it (the same node set, in address order).
			rr.cursor.firstPicks(func(s int, _ *endpointState, picks int64) { inFlight[rr.order[s]] += picks })
		}
		for i, p := range b.peers {
			e := EndpointStatus{
				Address: p.addr, EWMA: -1, InFlight: inFlight[i],
				Requests: p.st.completed.Load(), Failures: p.st.failures.Load(),
			}
			if p.st.hasStat.Load() {
				e.EWMA = p.st.score(now)
			}
			bs.Endpoints = append(bs.Endpoints, e)
		}
		out = append(out, bs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// EWMA returns the stored (undecayed) EWMA of an endpoint of a backend, and
// whether it has one. For tests and debugging.
func (r *Registry) EWMA(backend, peer string) (float64, bool) {
	b := r.snap.Load().get(backend)
	if b == nil {
		return 0, false
	}
	i, ok := b.byAddr[peer]
	if !ok || !b.peers[i].st.hasStat.Load() {
		return 0, false
	}
	return math.Float64frombits(b.peers[i].st.ewma.Load()), true
}

// SetEWMA stores an EWMA and its last-touched time for an endpoint, as the
// shared dicts of a running ingress-nginx would hold them. For tests and for
// `debug pick`, which reproduces a given state.
func (r *Registry) SetEWMA(backend, peer string, ewma, lastTouched float64) bool {
	b := r.snap.Load().get(backend)
	if b == nil {
		return false
	}
	i, ok := b.byAddr[peer]
	if !ok {
		return false
	}
	st := b.peers[i].st
	st.ewma.Store(math.Float64bits(ewma))
	st.lastTouched.Store(math.Float64bits(lastTouched))
	st.hasStat.Store(true)
	return true
}

// Peers returns the endpoint addresses ("ip:port") of the named backend in
// address order, or nil when it is unknown or has none. The nginx shim keeps
// them as its fallback list for when the Go side cannot be reached. For
// round robin this is also the rotation order Lease positions index.
func (r *Registry) Peers(backend string) []string {
	b := r.snap.Load().get(backend)
	if b == nil || len(b.peers) == 0 {
		return nil
	}
	out := make([]string, len(b.peers))
	for i := range b.peers {
		out[i] = b.peers[i].addr
	}
	sort.Strings(out)
	return out
}

// ErrNotLeasable is Lease's answer for a backend whose picks depend on the
// request (every algorithm but round robin).
var ErrNotLeasable = errors.New("balancer: backend's picks cannot be leased")

// Lease reserves count consecutive positions of a round-robin backend's
// shared rotation for a caller that will use them one request at a time (the
// nginx shim, which then needs no round trip per request). Position p (for p
// in start+1 .. start+count, uint32 arithmetic) is peer Peers()[p mod n]; a
// retry of the request at p takes p+1, p+2 ..., as Pick does. The decisions
// are the balancer's: the caller only reads them off. n is the number of
// peers the positions index.
func (r *Registry) Lease(backend string, count int) (start uint32, n int, err error) {
	b := r.snap.Load().get(backend)
	if b == nil {
		return 0, 0, ErrUnknownBackend
	}
	// A backend with alternatives leases its own rotation too: the
	// positions that requests routed to it take (RouteOwn).
	rr, ok := b.algo.(*roundRobin)
	if !ok || b.sticky != nil || count <= 0 {
		return 0, 0, ErrNotLeasable
	}
	n = len(b.peers)
	if n == 1 {
		return 0, 1, nil
	}
	end := uint32(rr.cursor.lease(uint32(count)))
	return end - uint32(count), n, nil
}

// Leasable reports whether Lease would succeed for the backend.
func (r *Registry) Leasable(backend string) bool {
	b := r.snap.Load().get(backend)
	if b == nil {
		return false
	}
	_, ok := b.algo.(*roundRobin)
	return ok && len(b.alternatives) == 0
}

// Count adds completed attempts and failures of one endpoint reported in
// aggregate (the nginx shim sums them per flush for backends whose balancer
// needs no latencies). Unknown backends or addresses are ignored.
func (r *Registry) Count(backend, peer string, completed, failed uint64) {
	if _, st := r.endpoint(backend, peer); st != nil {
		st.completed.Add(completed)
		st.failures.Add(failed)
	}
}

// TimedCounts are one endpoint's attempts over a flush of the nginx shim, for
// a backend Go scores (ewma, peak_ewma).
type TimedCounts struct {
	// Completed attempts, of which Failed failed.
	Completed, Failed uint64
	// RTTSum is connect plus response time (ewma.lua's rtt) summed over
	// the Completed-Failed attempts that succeeded; RTTMax the longest.
	RTTSum, RTTMax time.Duration
}

// CountTimed adds one endpoint's attempts of a flush, as Count does, and
// moves its score by them: one sample, their mean, each failure counting
// failurePenalty (as Feedback counts one). A flush lasts about 100 ms and
// the score decays over 10 s, so applying its samples one by one would
// weigh them within about 1 % of each other; the mean moves the score as
// far. For peak_ewma, the longest attempt (or a failure) above the score
// sets it, as it would have alone. Unknown backends or addresses are
// ignored.
func (r *Registry) CountTimed(backend, peer string, c TimedCounts) {
	b, st := r.endpoint(backend, peer)
	if st == nil {
		return
	}
	st.completed.Add(c.Completed)
	st.failures.Add(c.Failed)
	if !b.scored || c.Completed == 0 {
		return
	}
	mean := (c.RTTSum.Seconds() + float64(c.Failed)*failurePenalty) / float64(c.Completed)
	longest := c.RTTMax.Seconds()
	if c.Failed > 0 {
		longest = max(longest, failurePenalty)
	}
	st.updateMany(mean, longest, r.nowSeconds(), b.peak)
}

// Scored reports whether the backend's balancer learns from latencies (ewma,
// peak_ewma): only then does the shim send per-request timings.
func (r *Registry) Scored(backend string) bool {
	b := r.snap.Load().get(backend)
	return b != nil && b.scored
}
