package proxy

import (
	"runtime"
	"sync/atomic"
	_ "unsafe" // for go:linkname
)

// Stripes: per-P copies of what every request writes (the request
// metrics, the access log's buffer, the upstream pools), so that requests
// served on different CPUs do not write the same cache lines. On two CPUs
// whose caches are far apart (a virtual machine's vCPUs on different core
// complexes, where a cache line takes 300 ns to cross instead of 60), one
// line written by every request on both CPUs costs each request a
// transfer; the request metrics alone wrote a dozen. A reader (a scrape,
// the log's drain, the pools' janitor) sums or visits every stripe.
// docs/benchmarks/product.md, "Two CPUs far apart".

// maxStripes bounds the copies: each histogram costs a cache line or two
// per stripe and series.
const maxStripes = 4

// stripeCount is how many stripes a counter made now gets: one per P, at
// most maxStripes. GOMAXPROCS may change later; stripeOf folds any P into
// the stripes there are.
func stripeCount() int {
	return min(max(runtime.GOMAXPROCS(0), 1), maxStripes)
}

// stripeOf is the stripe, of n, of the P the calling goroutine runs on. The
// goroutine may move to another P right after; the stripe is only where it
// writes, never what it reads.
func stripeOf(n int) int {
	p := procPin()
	procUnpin()
	return p % n
}

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// lineWords is how many uint64s fill a cache line.
const lineWords = 8

// stripedCounter is a counter with one cell per stripe, each on its own
// cache line.
type stripedCounter struct {
	cells []atomic.Uint64 // stripe s is cells[s*lineWords]
}

func newStripedCounter(stripes int) stripedCounter {
	return stripedCounter{cells: make([]atomic.Uint64, stripes*lineWords)}
}

// add adds v (two's complement for a negative int64) to stripe s.
func (c *stripedCounter) add(s int, v uint64) { c.cells[s*lineWords].Add(v) }

// load is the sum of every stripe.
func (c *stripedCounter) load() uint64 {
	var n uint64
	for i := 0; i < len(c.cells); i += lineWords {
		n += c.cells[i].Load()
	}
	return n
}

// reset zeroes every stripe.
func (c *stripedCounter) reset() {
	for i := 0; i < len(c.cells); i += lineWords {
		c.cells[i].Store(0)
	}
}
