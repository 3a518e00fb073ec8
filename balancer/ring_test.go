package balancer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Spec §8.1: the generated points p0..p2 of node 10.0.0.1:8080.
func TestNodePointsVector(t *testing.T) {
	pts := make([]uint32, pointsPerNode)
	genPoints([]string{"10.0.0.1:8080"}, pts)
	got := pts[:3]
	want := []uint32{1257574595, 3454619437, 151149429}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("p0..p2 (-want +got):\n%s", diff)
	}
}

// The incremental ring (reusing the previous build) is exactly the ring built
// from scratch, for additions, removals and replacements, including a forced
// collision of point hashes between nodes (ties ordered by node order).
func TestRebuildRingEqualsNewRing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	addr := func(i int) string { return fmt.Sprintf("10.%d.%d.%d:80", i>>16&255, i>>8&255, i&255) }
	sorted := func(set map[int]bool) []string {
		var out []string
		for i := range set {
			out = append(out, addr(i))
		}
		slices.Sort(out)
		return out
	}
	for round := range 40 {
		n := 1 + rng.IntN(300)
		set := map[int]bool{}
		for len(set) < n {
			set[rng.IntN(5000)] = true
		}
		prevIDs := sorted(set)
		prev := newRing(prevIDs)
		// change up to a third of the nodes
		for c := rng.IntN(n/3 + 2); c > 0; c-- {
			if rng.IntN(2) == 0 && len(set) > 1 {
				for k := range set {
					delete(set, k)
					break
				}
			} else {
				set[rng.IntN(5000)] = true
			}
		}
		ids := sorted(set)
		var sc ringScratch
		got, want := sc.rebuildRing(prev, prevIDs, ids), newRing(ids)
		if !slices.Equal(got.hashes, want.hashes) || !slices.Equal(got.owners, want.owners) {
			t.Fatalf("round %d: incremental ring differs from a full build (%d -> %d nodes)", round, len(prevIDs), len(ids))
		}
	}
}

// mergeRing orders equal hashes from surviving and new nodes by node index,
// as the stable sort does.
func TestMergeRingTies(t *testing.T) {
	// Old nodes 0, 1, 2 are renumbered 0, 2, removed; new node 1 is added.
	prev := ring{hashes: []uint32{5, 5, 7, 9}, owners: []int32{0, 1, 2, 1}}
	remap := []int32{0, 2, -1}
	fresh := ring{hashes: []uint32{5, 9, 10}, owners: []int32{1, 1, 1}}
	got := mergeRing(prev, remap, fresh, 6)
	want := ring{hashes: []uint32{5, 5, 5, 9, 9, 10}, owners: []int32{0, 1, 2, 1, 2, 1}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(ring{})); diff != "" {
		t.Errorf("merge (-want +got):\n%s", diff)
	}
}
