package balancer

import (
	"hash/crc32"
	"math/bits"
	"runtime"
	"slices"
	"strconv"
	"sync"
)

// pointsPerNode is resty.chash CONSISTENT_POINTS for weight 1.
const pointsPerNode = 160

// ring is resty.chash's continuum: points sorted ascending by hash, equal
// hashes in insertion order (node order, then point index), looked up by lower
// bound (spec §4.3).
type ring struct {
	hashes []uint32
	owners []int32
}

// newRing builds the ring over node ids in the given order.
func newRing(ids []string) ring {
	var sc ringScratch
	return sc.build(ids, nil)
}

// ringScratch is scratch space reused by the ring builds of one goroutine.
type ringScratch struct {
	hashes []uint32 // points in insertion order
	packed []uint64 // points as hash<<32 | owner, by top byte of the hash
	count  []int32  // bucket counts, then bucket ends
}

// build returns the ring over ids in the given order; owners[i] is the owner
// index stored for ids[i] (nil: i). Owners must ascend, so that insertion
// order is owner order.
//
// The points are uniformly distributed 32-bit hashes. A stable counting
// scatter by the top byte splits them into 256 runs; each run, a few
// kilobytes, is finished in cache by a second stable counting scatter on the
// next bits into the ring, leaving about one point per bucket, so that one
// insertion sort over the run (also stable) finishes it. Equal hashes keep
// insertion order (node order, then point index), as resty.chash's
// chash_point_sort does.
func (sc *ringScratch) build(ids []string, owners []int32) ring {
	n := len(ids) * pointsPerNode
	if cap(sc.hashes) < n {
		sc.hashes = make([]uint32, n)
		sc.packed = make([]uint64, n)
	}
	pts, packed := sc.hashes[:n], sc.packed[:n]
	genPoints(ids, pts)

	// Rings of fewer than 4096 points are one run.
	skip, top := uint(0), uint(32) // top: shift of a hash to its run
	var runs [257]int32            // run starts by top byte, then the end
	if n >= 1<<12 {
		skip, top = 8, 24
		for _, h := range pts {
			runs[h>>24+1]++
		}
		for d := 1; d <= 256; d++ {
			runs[d] += runs[d-1]
		}
	} else {
		for d := 1; d <= 256; d++ {
			runs[d] = int32(n) // one run
		}
	}
	next := runs
	k := 0
	for i := range ids {
		o := uint64(i)
		if owners != nil {
			o = uint64(uint32(owners[i]))
		}
		for _, h := range pts[k : k+pointsPerNode] {
			d := uint64(h) >> (top & 63)
			packed[next[d]] = uint64(h)<<32 | o
			next[d]++
		}
		k += pointsPerNode
	}

	rg := ring{hashes: make([]uint32, n), owners: make([]int32, n)}
	lo := int32(0)
	for d := 1; d <= 256; d++ {
		hi := runs[d]
		if hi > lo {
			sc.finishRun(packed[lo:hi], skip, rg.hashes[lo:hi], rg.owners[lo:hi])
		}
		lo = hi
	}
	return rg
}

// finishRun sorts run (packed points in insertion order whose top skip bits
// of the hash are equal) stably by hash into hs and os: a counting scatter on
// the next bits, then an insertion sort.
func (sc *ringScratch) finishRun(run []uint64, skip uint, hs []uint32, os []int32) {
	m := len(run)
	b := uint(min(bits.Len(uint(m)), 16)) // about one point per bucket
	shift := (64 - skip - b) & 63         // bucket = the b hash bits below the skipped ones
	mask := uint64(1)<<b - 1
	nb := 1 << b
	if cap(sc.count) < nb {
		sc.count = make([]int32, nb)
	}
	count := sc.count[:nb]
	clear(count)
	for _, p := range run {
		count[p>>shift&mask]++
	}
	sum := int32(0)
	for d, c := range count {
		count[d] = sum // start of bucket d
		sum += c
	}
	for _, p := range run {
		d := p >> shift & mask
		pos := count[d]
		count[d] = pos + 1 // ends as the start of bucket d+1
		hs[pos], os[pos] = uint32(p>>32), int32(uint32(p))
	}
	// Points are out of order only within a bucket, and a bucket holds
	// about one: one insertion sort (stable) over the run finishes it.
	for i := 1; i < len(hs); i++ {
		h := hs[i]
		if hs[i-1] <= h {
			continue
		}
		o := os[i]
		j := i
		for ; j > 0 && hs[j-1] > h; j-- {
			hs[j], os[j] = hs[j-1], os[j-1]
		}
		hs[j], os[j] = h, o
	}
}

// genPoints writes the points of every id into dst in insertion order: for
// each node the 160 point hashes p0 = CRC32(id ‖ LE32(0)), p_j = CRC32(id ‖
// LE32(p_{j-1})) (spec §4.3). Each point depends on the previous one, so four
// nodes are stepped together to overlap their table lookups.
func genPoints(ids []string, dst []uint32) {
	i := 0
	for ; i+4 <= len(ids); i += 4 {
		b0, b1 := crc32.ChecksumIEEE([]byte(ids[i])), crc32.ChecksumIEEE([]byte(ids[i+1]))
		b2, b3 := crc32.ChecksumIEEE([]byte(ids[i+2])), crc32.ChecksumIEEE([]byte(ids[i+3]))
		d := dst[i*pointsPerNode : (i+4)*pointsPerNode]
		d0, d1 := d[:pointsPerNode], d[pointsPerNode:2*pointsPerNode]
		d2, d3 := d[2*pointsPerNode:3*pointsPerNode], d[3*pointsPerNode:]
		var p0, p1, p2, p3 uint32
		for j := range pointsPerNode {
			p0, p1 = crcUpdateLE32(b0, p0), crcUpdateLE32(b1, p1)
			p2, p3 = crcUpdateLE32(b2, p2), crcUpdateLE32(b3, p3)
			d0[j], d1[j], d2[j], d3[j] = p0, p1, p2, p3
		}
	}
	for ; i < len(ids); i++ {
		b := crc32.ChecksumIEEE([]byte(ids[i]))
		d := dst[i*pointsPerNode : (i+1)*pointsPerNode]
		p := uint32(0)
		for j := range d {
			p = crcUpdateLE32(b, p)
			d[j] = p
		}
	}
}

// rebuildRing returns the ring over ids (sorted ascending, no duplicates),
// reusing prev, the ring over prevIDs (also sorted), when most nodes are the
// same: the surviving points keep their order, the new nodes' points are
// sorted on their own, and the two runs are merged by (hash, owner). As owner
// indices follow id order in both, the result equals newRing(ids) exactly; it
// costs O(points) instead of a full CRC and sort (a pod replaced in a large
// backend).
func (sc *ringScratch) rebuildRing(prev ring, prevIDs, ids []string) ring {
	if len(prevIDs) == 0 || len(ids) == 0 {
		return sc.build(ids, nil)
	}
	remap := make([]int32, len(prevIDs))
	var added []int32
	i, j := 0, 0
	for i < len(prevIDs) || j < len(ids) {
		switch {
		case j == len(ids) || i < len(prevIDs) && prevIDs[i] < ids[j]:
			remap[i] = -1
			i++
		case i == len(prevIDs) || ids[j] < prevIDs[i]:
			added = append(added, int32(j))
			j++
		default:
			remap[i] = int32(j)
			i++
			j++
		}
	}
	if 2*len(added) > len(ids) {
		return sc.build(ids, nil)
	}
	addedIDs := make([]string, len(added))
	for k, o := range added {
		addedIDs[k] = ids[o]
	}
	fresh := sc.build(addedIDs, added)
	return mergeRing(prev, remap, fresh, len(ids)*pointsPerNode)
}

// mergeRing merges the points of prev whose owner survives (remap[old owner]
// is the new owner index, -1 for a removed node) with fresh, the ring of the
// new nodes. Equal hashes are ordered by owner index, then point order, as a
// stable sort of all points in node order would.
func mergeRing(prev ring, remap []int32, fresh ring, n int) ring {
	hashes, owners := make([]uint32, n), make([]int32, n)
	k, f := 0, 0
	next := ^uint64(0) // above every packed point: fresh is used up
	if len(fresh.hashes) > 0 {
		next = uint64(fresh.hashes[0])<<32 | uint64(uint32(fresh.owners[0]))
	}
	for p, h := range prev.hashes {
		o := remap[prev.owners[p]]
		if o < 0 {
			continue
		}
		key := uint64(h)<<32 | uint64(uint32(o))
		for next < key {
			hashes[k], owners[k] = fresh.hashes[f], fresh.owners[f]
			k++
			f++
			if f < len(fresh.hashes) {
				next = uint64(fresh.hashes[f])<<32 | uint64(uint32(fresh.owners[f]))
			} else {
				next = ^uint64(0)
			}
		}
		hashes[k], owners[k] = h, o
		k++
	}
	k += copy(hashes[k:], fresh.hashes[f:])
	copy(owners[k-(len(fresh.hashes)-f):], fresh.owners[f:])
	if k != n {
		panic("BUG: mergeRing point count")
	}
	return ring{hashes: hashes, owners: owners}
}

// crcUpdateLE32 is crc32.Update(crc, IEEETable, LE32(v)) by slicing-by-4:
// the four table lookups are independent, which matters because the ring
// build computes 160 of these per node.
func crcUpdateLE32(crc, v uint32) uint32 {
	c := ^crc ^ v
	return ^(crcSlice4[3][byte(c)] ^ crcSlice4[2][byte(c>>8)] ^ crcSlice4[1][byte(c>>16)] ^ crcSlice4[0][byte(c>>24)])
}

// crcIEEE is crc32.ChecksumIEEE by slicing-by-4. Unlike the standard
// library's, which calls through a function variable, it does not make p
// escape, so keys built in stack buffers stay there.
func crcIEEE(p []byte) uint32 {
	crc := ^uint32(0)
	for len(p) >= 4 {
		crc ^= uint32(p[0]) | uint32(p[1])<<8 | uint32(p[2])<<16 | uint32(p[3])<<24
		crc = crcSlice4[3][byte(crc)] ^ crcSlice4[2][byte(crc>>8)] ^ crcSlice4[1][byte(crc>>16)] ^ crcSlice4[0][crc>>24]
		p = p[4:]
	}
	for _, c := range p {
		crc = crcSlice4[0][byte(crc)^c] ^ crc>>8
	}
	return ^crc
}

// crcSlice4 are the slicing-by-4 tables of CRC-32/IEEE: [0] is the standard
// table, [k][i] is [k-1][i] advanced by one zero byte. Read-only after init.
var crcSlice4 = func() (t [4][256]uint32) {
	t[0] = *(*[256]uint32)(crc32.IEEETable)
	for k := 1; k < 4; k++ {
		for i := range 256 {
			p := t[k-1][i]
			t[k][i] = p>>8 ^ t[0][byte(p)]
		}
	}
	return t
}()

// find returns the owner of the first point with hash >= h, wrapping to the
// first point.
func (r *ring) find(h uint32) int {
	lo, hi := 0, len(r.hashes)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.hashes[m] < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(r.hashes) {
		lo = 0
	}
	return int(r.owners[lo])
}

// chash is balancer/chash.lua: the peer owning CRC32(key) on the ring. Retries
// use the same key and so the same peer (spec §5).
type chash struct {
	key  hashKey
	ring ring
	// ringToPeer maps ring node order (addresses sorted) to b.peers indices.
	ringToPeer []int
}

func newCHash(r *Registry, st *backendState, b *backend, key hashKey) *chash {
	c := &chash{key: key}
	c.ringToPeer = r.peerRing(st, b, &c.ring)
	return c
}

// peerRing returns the map from ring node index (addresses sorted) to b.peers
// index, and has Sync build the ring over b's peer addresses into *dst,
// reusing the ring of the previous build of this backend when most addresses
// are unchanged. Called with r.mu held; *dst is set before Sync publishes.
func (r *Registry) peerRing(st *backendState, b *backend, dst *ring) []int {
	order := sortedPeerOrder(b)
	ids := make([]string, len(order))
	for i, p := range order {
		ids[i] = b.peers[p].addr
	}
	r.rings.add(func(sc *ringScratch) {
		rg := sc.rebuildRing(st.ring, st.ringIDs, ids)
		st.ring, st.ringIDs = rg, ids
		*dst = rg
	})
	return order
}

// ringBuilds runs the ring builds of one Sync while Sync goes on building the
// other backends: GOMAXPROCS-1 workers start with the first build, and Sync
// joins them in wait. Each build writes only its own backend's state.
type ringBuilds struct {
	jobs    chan func(*ringScratch)
	wg      sync.WaitGroup
	started bool
}

// newRingBuilds returns a ringBuilds for a Sync of n backends (at most one
// build each).
func newRingBuilds(n int) *ringBuilds {
	return &ringBuilds{jobs: make(chan func(*ringScratch), n)}
}

func (rb *ringBuilds) add(job func(*ringScratch)) {
	if !rb.started {
		rb.started = true
		for range runtime.GOMAXPROCS(0) - 1 {
			rb.wg.Go(func() { runRingBuilds(rb.jobs) })
		}
	}
	rb.jobs <- job // never blocks: the buffer holds a build per backend
}

// wait runs the builds no worker has taken and returns when all are done.
func (rb *ringBuilds) wait() {
	close(rb.jobs)
	runRingBuilds(rb.jobs)
	rb.wg.Wait()
}

// runRingBuilds is one ringBuilds worker.
func runRingBuilds(jobs <-chan func(*ringScratch)) {
	var sc ringScratch
	for job := range jobs {
		job(&sc)
	}
}

// sortedPeerOrder returns peer indices ordered by address, so the ring does
// not depend on endpoint order in the JSON (as in Lua, whose node table has no
// order either).
func sortedPeerOrder(b *backend) []int {
	order := make([]int, len(b.peers))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int {
		switch {
		case b.peers[x].addr < b.peers[y].addr:
			return -1
		case b.peers[x].addr > b.peers[y].addr:
			return 1
		}
		return 0
	})
	return order
}

func (c *chash) pick(_ *Registry, _ *backend, req Request, a *Attempt) (int, string, float64, error) {
	h := hashOf(c.key, req, a)
	return c.ringToPeer[c.ring.find(h)], "", -1, nil
}

// hashOf is CRC32 of the evaluated key, without allocating.
func hashOf(k hashKey, req Request, a *Attempt) uint32 {
	if v, ok := k.single(); ok {
		val, _ := req.Var(v)
		return crc32.ChecksumIEEE(val)
	}
	// The Attempt keeps the buffer: a reused Attempt (Reset) builds keys
	// without allocating; only its first composite key allocates.
	a.keyBuf = k.eval(req, a.keyBuf)
	return crc32.ChecksumIEEE(a.keyBuf)
}

// chashSubset is balancer/chashsubset.lua (spec §4.4): the key chooses a
// subset on a ring of "set1".."setN"; a uniform random member serves.
type chashSubset struct {
	key     hashKey
	ring    ring
	subsets [][]int // peer indices per set
}

func newCHashSubset(st *backendState, b *backend, key hashKey, size int) *chashSubset {
	n := len(b.peers)
	sets := (n + size - 1) / size
	c := &chashSubset{key: key, subsets: make([][]int, sets)}
	ids := make([]string, sets)
	for s := range sets {
		ids[s] = "set" + strconv.Itoa(s+1)
		members := make([]int, size)
		for m := range size {
			members[m] = (s*size + m) % n // padding repeats endpoints[1], [2], ...
		}
		c.subsets[s] = members
	}
	if len(st.subsetRing.hashes) != sets*pointsPerNode {
		st.subsetRing = newRing(ids) // depends only on the number of sets
	}
	c.ring = st.subsetRing
	return c
}

func (c *chashSubset) pick(r *Registry, _ *backend, req Request, a *Attempt) (int, string, float64, error) {
	set := c.subsets[c.ring.find(hashOf(c.key, req, a))]
	return set[r.intn(len(set))], "", -1, nil
}
