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
// by a four-pass LSD radix sort on the hash, which is stable, so equal hashes
// keep insertion order as resty.chash's chash_point_sort does.
func newRing(ids []string) ring {
	n := len(ids) * pointsPerNode
	hashes := make([]uint32, n)
	owners := make([]int32, n)
	k := 0
	for i, id := range ids {
		base := crc32.ChecksumIEEE([]byte(id))
		prev := uint32(0)
		for range pointsPerNode {
			prev = crcUpdateLE32(base, prev)
			hashes[k], owners[k] = prev, int32(i)
			k++
		}
	}
	tmpH := make([]uint32, n)
	tmpO := make([]int32, n)
	for shift := uint(0); shift < 32; shift += 8 {
		var count [256]int
		for _, h := range hashes {
			count[(h>>shift)&0xff]++
		}
		sum := 0
		for d := range count {
			c := count[d]
			count[d] = sum
			sum += c
		}
		for j, h := range hashes {
			d := (h >> shift) & 0xff
			tmpH[count[d]], tmpO[count[d]] = h, owners[j]
			count[d]++
		}
		hashes, tmpH = tmpH, hashes
		owners, tmpO = tmpO, owners
	}
	return ring{hashes: hashes, owners: owners}
}

// crcUpdateLE32 is crc32.Update(crc, IEEETable, LE32(v)), inlined: the ring
// build computes 160 of these per node.
func crcUpdateLE32(crc, v uint32) uint32 {
	tab := crc32.IEEETable
	crc = ^crc
	crc = tab[byte(crc)^byte(v)] ^ crc>>8
	crc = tab[byte(crc)^byte(v>>8)] ^ crc>>8
	crc = tab[byte(crc)^byte(v>>16)] ^ crc>>8
	crc = tab[byte(crc)^byte(v>>24)] ^ crc>>8
	return ^crc
}

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

func newCHash(b *backend, key hashKey) *chash {
	order := sortedPeerOrder(b)
	ids := make([]string, len(order))
	for i, p := range order {
		ids[i] = b.peers[p].addr
	}
	return &chash{key: key, ring: newRing(ids), ringToPeer: order}
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

func newCHashSubset(b *backend, key hashKey, size int) *chashSubset {
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
	c.ring = newRing(ids)
	return c
}

func (c *chashSubset) pick(r *Registry, _ *backend, req Request, a *Attempt) (int, string, float64, error) {
	set := c.subsets[c.ring.find(hashOf(c.key, req, a))]
	return set[r.intn(len(set))], "", -1, nil
}
