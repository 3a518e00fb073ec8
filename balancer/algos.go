package balancer

import (
	"math"
	"math/bits"
	"sort"
	"sync"
	"sync/atomic"
)

func sortStrings(s []string) { sort.Strings(s) }

// roundRobin is resty.roundrobin with every weight 1 (spec §4.1): a cyclic
// rotation from a random start. The cursor lives in the backend's state, so a
// sync that does not change the node set keeps the position.
type roundRobin struct {
	cursor *rrCursor
	// order is the rotation: b.peers indices in address order, so a payload
	// listing the same endpoints in another order keeps the permutation (Lua
	// keeps its node table when the node map is unchanged).
	order []int
	n     uint64
	// m is Lemire's fastmod constant for n: c % n without a division.
	m uint64
	// picks are Pick's results by slot, for its fast path (backend.rr);
	// returning a copy is cheaper than filling in the fields.
	picks []Pick
}

func newRoundRobin(cursor *rrCursor, order []int) *roundRobin {
	n := len(order)
	return &roundRobin{cursor: cursor, order: order, n: uint64(n), m: ^uint64(0)/uint64(n) + 1}
}

// slot is the rotation slot of cursor value c: uint32(c) mod n.
func (rr *roundRobin) slot(c uint64) int {
	hi, _ := bits.Mul64(rr.m*uint64(uint32(c)), rr.n)
	return int(hi)
}

// A retry (a later pick with the same Attempt) takes the next peer in the
// rotation after the request's previous one without moving the shared
// cursor, so asking for k candidates up front (the nginx shim) costs other
// requests nothing and spreads first attempts exactly like k single picks.
// A first pick here (Candidates, a canary's backend) is not left counted by
// the cursor: the caller counts it explicitly, or not at all.
func (rr *roundRobin) pick(_ *Registry, b *backend, _ Request, a *Attempt) (int, string, float64, error) {
	if rr.n == 1 {
		return 0, "", -1, nil
	}
	if a.ntried == 0 {
		c := rr.cursor.pos.Add(1)
		a.rrBase = uint64(uint32(c))
		i := rr.order[rr.slot(c)]
		if c&rrClosed == 0 {
			b.peers[i].st.inFlight.Add(-1)
		}
		return i, "", -1, nil
	}
	return rr.order[rr.slot(a.rrBase+uint64(a.ntried))], "", -1, nil
}

// rrClosed is the bit of rrCursor.pos that marks a closed cursor.
const rrClosed = 1 << 63

// rrCursor is the shared position of one rotation (one node set of one
// backend). Its advances are also the in-flight counts of Pick's first
// picks: position c went to slot uint32(c) mod n, so the positions taken
// since start say how many first picks each slot's endpoint received, and
// Pick needs no second atomic add for the endpoint's count. An endpoint's
// in-flight count is its explicit count (retries, Done's decrements, the
// corrections of other first picks) plus its slot's first picks, less the
// positions Lease handed out for that slot. When no published balancer uses
// the cursor any more, Sync closes it (close): the derived counts move into
// the explicit ones, and picks still made through it count explicitly.
type rrCursor struct {
	// atomic
	pos atomic.Uint64 // the last position taken; rrClosed once closed
	_   [56]byte      // every pick writes pos: alone on its cache line

	// immutable
	start uint64           // pos when created
	eps   []*endpointState // by slot

	mu sync.Mutex // guards leased; serializes Lease with the readers of pos
	// leased counts the positions Lease took: leasedAll for every slot,
	// plus the prefix sums of leasedDiff (n+1 entries) for slot s.
	leasedAll  uint64
	leasedDiff []int64
}

func newRRCursor(start uint64, eps []*endpointState) *rrCursor {
	c := &rrCursor{start: start, eps: eps, leasedDiff: make([]int64, len(eps)+1)}
	c.pos.Store(start)
	return c
}

// lease takes count positions and returns the last one, not counting them as
// picks.
func (c *rrCursor) lease(count uint32) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	end := c.pos.Add(uint64(count))
	if end&rrClosed != 0 {
		return end // picks through a closed cursor are counted explicitly
	}
	// Positions end-count+1 .. end, in runs of consecutive uint32 values.
	n := uint64(len(c.eps))
	for p := end - uint64(count) + 1; p <= end; {
		runEnd := min(end, p|0xffffffff)
		length := runEnd - p + 1
		c.leasedAll += length / n
		a, r := uint64(uint32(p))%n, length%n
		if a+r <= n {
			c.leasedDiff[a]++
			c.leasedDiff[a+r]--
		} else { // wraps: every slot but [a+r-n, a)
			c.leasedAll++
			c.leasedDiff[a+r-n]--
			c.leasedDiff[a]++
		}
		p = runEnd + 1
	}
	return end
}

// firstPicks calls f with each slot, its endpoint and the number of its first
// picks through c, less the leased positions. It reports false, calling
// nothing, when c is closed.
func (c *rrCursor) firstPicks(f func(slot int, st *endpointState, picks int64)) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.firstPicksLocked(c.pos.Load(), f)
}

func (c *rrCursor) firstPicksLocked(end uint64, f func(slot int, st *endpointState, picks int64)) bool {
	if end&rrClosed != 0 {
		return false
	}
	n := uint64(len(c.eps))
	leased := int64(c.leasedAll)
	for s, st := range c.eps {
		leased += c.leasedDiff[s]
		taken := positionsAt(end+1, uint64(s), n) - positionsAt(c.start+1, uint64(s), n)
		f(s, st, int64(taken)-leased)
	}
	return true
}

// positionsAt counts the positions p in [0, x) with uint32(p) mod n == s.
func positionsAt(x, s, n uint64) uint64 {
	below := func(y uint64) uint64 { // p in [0, y), y <= 2^32
		k := y / n
		if s < y%n {
			k++
		}
		return k
	}
	return (x>>32)*below(1<<32) + below(x&0xffffffff)
}

// close closes c and adds each slot's first picks to its endpoint's explicit
// in-flight count. Called by Sync, with r.mu held, before it publishes
// balancers that no longer use c.
func (c *rrCursor) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	end := c.pos.Or(rrClosed)
	c.firstPicksLocked(end, func(_ int, st *endpointState, picks int64) { st.inFlight.Add(picks) })
}

// ewmaPicker is ewma.lua (spec §4.2): power of two choices over the peers not
// yet tried by this request, lower decayed EWMA wins, a tie keeps the first.
// As peak_ewma the score is the cost EWMA × (in-flight + 1).
type ewmaPicker struct{}

func (ewmaPicker) pick(r *Registry, b *backend, _ Request, a *Attempt) (int, string, float64, error) {
	n := len(b.peers)
	if n == 1 {
		return 0, "", -1, nil
	}
	var sb *scoreBatch
	if a.scoreOnce {
		sb = a.scores
	}
	var now float64
	if sb != nil {
		if sb.b != b {
			sb.reset(b, r.nowSeconds())
		}
		now = sb.now
	} else {
		now = r.nowSeconds()
	}
	cost := func(i int) float64 {
		if sb != nil {
			if c := sb.costs[i]; !math.IsNaN(c) {
				return c
			}
		}
		st := b.peers[i].st
		s := st.score(now)
		if b.peak {
			pending := float64(st.inFlight.Load())
			if s == 0 && pending > 0 {
				// Finagle's cold-start rule: a peer with no latency yet
				// but requests in flight is not free.
				s = peakPenalty + pending
			} else {
				s *= pending + 1
			}
		}
		if sb != nil {
			sb.costs[i] = s
		}
		return s
	}
	untried := n - countTried(b, a)
	var first, second int
	switch {
	case untried <= 0:
		// "all endpoints have been retried": use all peers again.
		first, second = twoDistinct(r, n)
	case untried == 1:
		i := nthUntried(b, a, 0)
		return i, "", cost(i), nil
	case a.ntried == 0:
		first, second = twoDistinct(r, n)
	default:
		f, s := twoDistinct(r, untried)
		first, second = nthUntried(b, a, f), nthUntried(b, a, s)
	}
	c1, c2 := cost(first), cost(second)
	if c2 < c1 {
		return second, "", c2, nil
	}
	return first, "", c1, nil
}

// peakPenalty is the cost of a peak_ewma peer without a latency sample that
// already has requests in flight (Finagle PeakEwma: Long.MaxValue >> 16).
const peakPenalty = float64(math.MaxInt64 >> 16)

// twoDistinct draws two distinct indices in [0, n) the way a partial
// Fisher–Yates with k = 2 does: the first uniform, the second uniform among
// the rest.
func twoDistinct(r *Registry, n int) (int, int) {
	i := r.intn(n)
	j := r.intn(n - 1)
	if j >= i {
		j++
	}
	return i, j
}

// countTried counts distinct peers of b tried by a.
func countTried(b *backend, a *Attempt) int {
	if a.ntried == 0 {
		return 0
	}
	c := 0
	for i := range b.peers {
		if a.triedPeer(i) {
			c++
		}
	}
	return c
}

// nthUntried returns the index of the k-th (0-based) peer not tried by a, in
// array order.
func nthUntried(b *backend, a *Attempt, k int) int {
	for i := range b.peers {
		if a.triedPeer(i) {
			continue
		}
		if k == 0 {
			return i
		}
		k--
	}
	panic("BUG: nthUntried out of range")
}

// leastRequest picks the peer with fewer requests in flight out of two
// distinct random ones, breaking ties at random; retries avoid tried peers
// while untried ones remain.
type leastRequest struct{}

func (leastRequest) pick(r *Registry, b *backend, _ Request, a *Attempt) (int, string, float64, error) {
	n := len(b.peers)
	if n == 1 {
		return 0, "", -1, nil
	}
	var i, j int
	if untried := n - countTried(b, a); a.ntried > 0 && untried >= 1 {
		if untried == 1 {
			return nthUntried(b, a, 0), "", -1, nil
		}
		f, s := twoDistinct(r, untried)
		i, j = nthUntried(b, a, f), nthUntried(b, a, s)
	} else {
		i, j = twoDistinct(r, n)
	}
	li, lj := b.peers[i].st.inFlight.Load(), b.peers[j].st.inFlight.Load()
	switch {
	case lj < li:
		return j, "", -1, nil
	case li < lj:
		return i, "", -1, nil
	case r.rand()&1 == 0:
		return j, "", -1, nil
	}
	return i, "", -1, nil
}
