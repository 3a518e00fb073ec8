package balancer

import (
	"hash/crc32"
	"slices"
	"strconv"
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

// newRing builds the ring over node ids in the given order. Points are sorted
// by an LSD radix sort on the hash, which is stable, so equal hashes keep
// insertion order (node order, then point index) as resty.chash's
// chash_point_sort does.
func newRing(ids []string) ring {
	pts := make([]uint64, len(ids)*pointsPerNode)
	k := 0
	for i := range ids {
		k += nodePoints(ids[i], int32(i), pts[k:])
	}
	return unpackRing(radixSortPoints(pts))
}

// nodePoints writes the 160 points of node id with owner index o into dst as
// hash<<32 | o, in point order: p0 = CRC32(id ‖ LE32(0)), p_j = CRC32(id ‖
// LE32(p_{j-1})) (spec §4.3).
func nodePoints(id string, o int32, dst []uint64) int {
	base := crc32.ChecksumIEEE([]byte(id))
	prev := uint32(0)
	for j := range pointsPerNode {
		prev = crcUpdateLE32(base, prev)
		dst[j] = uint64(prev)<<32 | uint64(uint32(o))
	}
	return pointsPerNode
}

// radixSortPoints sorts packed points by their upper 32 bits (the hash),
// stably, in three passes of 11 bits, and returns the sorted slice (pts or a
// buffer of the same length).
func radixSortPoints(pts []uint64) []uint64 {
	if len(pts) < 2 {
		return pts
	}
	tmp := make([]uint64, len(pts))
	src, dst := pts, tmp
	for shift := uint(32); shift < 64; shift += 11 {
		var count [2048]int
		for _, p := range src {
			count[(p>>shift)&2047]++
		}
		sum := 0
		for d := range count {
			c := count[d]
			count[d] = sum
			sum += c
		}
		for _, p := range src {
			d := (p >> shift) & 2047
			dst[count[d]] = p
			count[d]++
		}
		src, dst = dst, src
	}
	return src
}

func unpackRing(pts []uint64) ring {
	rg := ring{hashes: make([]uint32, len(pts)), owners: make([]int32, len(pts))}
	for i, p := range pts {
		rg.hashes[i], rg.owners[i] = uint32(p>>32), int32(uint32(p))
	}
	return rg
}

// rebuildRing returns the ring over ids (sorted ascending, no duplicates),
// reusing prev, the ring over prevIDs (also sorted), when most nodes are the
// same: the surviving points keep their order, the new nodes' points are
// sorted on their own, and the two runs are merged by (hash, owner). As owner
// indices follow id order in both, the result equals newRing(ids) exactly; it
// costs O(points) instead of a full CRC and sort (a pod replaced in a large
// backend).
func rebuildRing(prev ring, prevIDs, ids []string) ring {
	if len(prevIDs) == 0 || len(ids) == 0 {
		return newRing(ids)
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
		return newRing(ids)
	}
	fresh := make([]uint64, len(added)*pointsPerNode)
	k := 0
	for _, o := range added {
		k += nodePoints(ids[o], o, fresh[k:])
	}
	fresh = radixSortPoints(fresh)

	return mergeRing(prev, remap, fresh, len(ids)*pointsPerNode)
}

// mergeRing merges the points of prev whose owner survives (remap[old owner]
// is the new owner index, -1 for a removed node) with fresh, packed new points
// sorted by hash then owner. Equal hashes are ordered by owner index, then
// point order, as a stable sort of all points in node order would.
func mergeRing(prev ring, remap []int32, fresh []uint64, n int) ring {
	hashes, owners := make([]uint32, n), make([]int32, n)
	k, f := 0, 0
	next := ^uint64(0) // above every packed point: fresh is used up
	if len(fresh) > 0 {
		next = fresh[0]
	}
	for p, h := range prev.hashes {
		o := remap[prev.owners[p]]
		if o < 0 {
			continue
		}
		key := uint64(h)<<32 | uint64(uint32(o))
		for next < key {
			hashes[k], owners[k] = uint32(next>>32), int32(uint32(next))
			k++
			f++
			if f < len(fresh) {
				next = fresh[f]
			} else {
				next = ^uint64(0)
			}
		}
		hashes[k], owners[k] = h, o
		k++
	}
	for ; f < len(fresh); f++ {
		hashes[k], owners[k] = uint32(fresh[f]>>32), int32(uint32(fresh[f]))
		k++
	}
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

func newCHash(st *backendState, b *backend, key hashKey) *chash {
	rg, order := st.peerRing(b)
	return &chash{key: key, ring: rg, ringToPeer: order}
}

// peerRing returns the ring over b's peer addresses (in address order) and
// the map from ring node index to b.peers index, reusing the ring of the
// previous build of this backend when most addresses are unchanged.
func (st *backendState) peerRing(b *backend) (ring, []int) {
	order := sortedPeerOrder(b)
	ids := make([]string, len(order))
	for i, p := range order {
		ids[i] = b.peers[p].addr
	}
	rg := rebuildRing(st.ring, st.ringIDs, ids)
	st.ring, st.ringIDs = rg, ids
	return rg, order
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
