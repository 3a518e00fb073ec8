package balancer

import (
	"math"
	"math/bits"
	"sort"
	"sync/atomic"
)

func sortStrings(s []string) { sort.Strings(s) }

// roundRobin is resty.roundrobin with every weight 1 (spec §4.1): a cyclic
// rotation from a random start. The cursor lives in the backend's state, so a
// sync that does not change the node set keeps the position.
type roundRobin struct {
	cursor *atomic.Uint32
	// order is the rotation: b.peers indices in address order, so a payload
	// listing the same endpoints in another order keeps the permutation (Lua
	// keeps its node table when the node map is unchanged).
	order []int
	n     uint64
	// m is Lemire's fastmod constant for n: c % n without a division.
	m uint64
}

func newRoundRobin(cursor *atomic.Uint32, order []int) *roundRobin {
	n := len(order)
	return &roundRobin{cursor: cursor, order: order, n: uint64(n), m: ^uint64(0)/uint64(n) + 1}
}

// A retry (a later pick with the same Attempt) takes the next peer in the
// rotation after the request's previous one without moving the shared
// cursor, so asking for k candidates up front (the nginx shim) costs other
// requests nothing and spreads first attempts exactly like k single picks.
func (rr *roundRobin) pick(_ *Registry, _ *backend, _ Request, a *Attempt) (int, string, float64, error) {
	if rr.n == 1 {
		return 0, "", -1, nil
	}
	var c uint64
	if a.ntried == 0 {
		c = uint64(rr.cursor.Add(1))
		a.rrBase = c
	} else {
		c = uint64(uint32(a.rrBase + uint64(a.ntried)))
	}
	hi, _ := bits.Mul64(rr.m*c, rr.n)
	return rr.order[hi], "", -1, nil
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
	now := r.nowSeconds()
	cost := func(i int) float64 {
		st := b.peers[i].st
		s := st.score(now)
		if b.peak {
			pending := float64(st.inFlight.Load())
			if s == 0 && pending > 0 {
				// Finagle's cold-start rule: a peer with no latency yet
				// but requests in flight is not free.
				return peakPenalty + pending
			}
			s *= pending + 1
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
