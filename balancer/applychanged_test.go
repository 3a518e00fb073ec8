package balancer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// applyChangedPayload is 40 backends of every algorithm and two canary
// pairs, each with a few endpoints; with external, backend 30 is an
// ExternalName.
func applyChangedPayload(external bool) []*model.Backend {
	var out []*model.Backend
	for i := range 40 {
		b := model.Backend{Name: fmt.Sprintf("ns-svc%02d-80", i), HasService: true}
		switch i % 8 {
		case 1:
			b.Algorithm = model.EWMA
		case 2:
			b.HashBy = &model.HashBy{Key: "$request_uri"}
		case 3:
			b.HashBy = &model.HashBy{Key: "$http_x_user", Subset: true, SubsetSize: 2}
		case 4:
			b.Affinity = &model.CookieAffinity{Name: "route"}
		case 5:
			b.Algorithm = model.LeastRequest
		case 6:
			b.Algorithm = model.PeakEWMA
		}
		for k := range 3 {
			b.Endpoints = append(b.Endpoints, model.Endpoint{Address: fmt.Sprintf("10.0.%d.%d", i, k+1), Port: 8080})
		}
		out = append(out, &b)
	}
	// Canaries: 10 -> 11 (header), 20 -> 21 (weight).
	out[10].Alternatives = []string{out[11].Name}
	out[11].NoServer, out[11].Canary = true, model.Canary{Header: "X-Canary"}
	out[20].Alternatives = []string{out[21].Name}
	out[21].NoServer, out[21].Canary = true, model.Canary{Weight: 30}
	if external {
		out[30].ExternalName, out[30].Endpoints = "ext.example", []model.Endpoint{{Address: "ext.example", Port: 80}}
	}
	return out
}

// snapshotView is what a generation serves, per backend.
func snapshotView(r *Registry) map[string]string {
	out := map[string]string{}
	for name, b := range r.snap.Load().all() {
		var peers []string
		for _, p := range b.peers {
			peers = append(peers, p.addr)
		}
		out[name] = fmt.Sprintf("%s peers=%v alts=%v vars=%v policy=%+v", b.algoName, peers, b.alternatives, b.needVars, b.policy)
	}
	return out
}

// TestApplyChangedEqualsApply: over random endpoint changes (moved,
// added, emptied, restored), on plain backends, canaries and their
// primaries and an ExternalName, ApplyChanged serves what Apply serves;
// without an ExternalName (resolved again by every Apply), a change of
// plain backends replaces their balancers alone.
func TestApplyChangedEqualsApply(t *testing.T) {
	for _, external := range []bool{false, true} {
		t.Run(fmt.Sprintf("externalname=%v", external), func(t *testing.T) { testApplyChanged(t, external) })
	}
}

func testApplyChanged(t *testing.T, external bool) {
	resolve := func(context.Context, string) ([]string, error) { return []string{"192.0.2.7"}, nil }
	full := NewRegistry(Config{Resolve: resolve, Rand: func() uint64 { return 1 }})
	delta := NewRegistry(Config{Resolve: resolve, Rand: func() uint64 { return 1 }})
	cur := applyChangedPayload(external)
	if err := full.Apply(cur); err != nil {
		t.Fatal(err)
	}
	if err := delta.ApplyChanged(cur, nil); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	plainDeltas := 0
	for round := range 80 {
		next := slices.Clone(cur)
		var changed []int
		plain := true
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(next))
			if slices.Contains(changed, i) {
				continue
			}
			changed = append(changed, i)
			if i == 10 || i == 11 || i == 20 || i == 21 || external {
				plain = false
			}
			eps := slices.Clone(next[i].Endpoints)
			switch rng.IntN(4) {
			case 0:
				eps = nil
			case 1:
				eps = append(eps, model.Endpoint{Address: fmt.Sprintf("10.1.%d.%d", i, round+1), Port: 8080})
			case 2:
				if len(eps) > 0 {
					eps[0].Address = fmt.Sprintf("10.2.%d.%d", i, round+1)
				}
			case 3:
				eps = slices.Clone(applyChangedPayload(external)[i].Endpoints)
			}
			nb := *next[i] // cur's Backend is not written: a Configuration's never are
			nb.Endpoints = eps
			next[i] = &nb
		}
		before := delta.snap.Load()
		deltaVersion, fullVersion := delta.Version(), full.Version()
		if err := full.Apply(next); err != nil {
			t.Fatalf("round %d: Apply: %v", round, err)
		}
		if err := delta.ApplyChanged(next, changed); err != nil {
			t.Fatalf("round %d: ApplyChanged: %v", round, err)
		}
		if got, want := snapshotView(delta), snapshotView(full); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("round %d (changed %v): ApplyChanged serves\n%v\nApply serves\n%v", round, changed, got, want)
		}
		if d, f := delta.Version()-deltaVersion, full.Version()-fullVersion; d != f {
			t.Errorf("round %d: ApplyChanged moved the version by %d, Apply by %d", round, d, f)
		}
		after := delta.snap.Load()
		if plain {
			plainDeltas++
			for i := range next {
				name := next[i].Name
				if slices.Contains(changed, i) || before.get(name) == nil {
					continue
				}
				if after.get(name) != before.get(name) {
					t.Errorf("round %d: %s was not changed but its balancer was replaced", round, name)
				}
			}
		}
		cur = next
	}
	if !external && plainDeltas < 20 {
		t.Fatalf("only %d rounds changed plain backends alone", plainDeltas)
	}
	// A payload of another length is applied in full.
	short := cur[:len(cur)-1]
	if err := delta.ApplyChanged(short, []int{0}); err != nil {
		t.Fatal(err)
	}
	if delta.snap.Load().get(cur[len(cur)-1].Name) != nil {
		t.Errorf("backend %s left out of the payload still served", cur[len(cur)-1].Name)
	}
}

// TestApplyChangedFoldsOverlay: over more changed backends than
// maxOverlay, ApplyChanged folds its overlay into the shared map (Issue
// 22) and still serves what Apply serves.
func TestApplyChangedFoldsOverlay(t *testing.T) {
	const n = maxOverlay + 44
	cur := make([]*model.Backend, n)
	for i := range cur {
		cur[i] = &model.Backend{Name: fmt.Sprintf("ns-svc%03d-80", i), HasService: true,
			Endpoints: []model.Endpoint{{Address: fmt.Sprintf("10.0.%d.%d", i/200, i%200+1), Port: 8080}}}
	}
	full, delta := NewRegistry(Config{}), NewRegistry(Config{})
	if err := full.Apply(cur); err != nil {
		t.Fatal(err)
	}
	if err := delta.ApplyChanged(cur, nil); err != nil {
		t.Fatal(err)
	}
	folds := 0
	for round := range 2 * n {
		i := round * 7 % n
		next := slices.Clone(cur)
		be := *next[i]
		be.Endpoints = nil
		if round%3 != 0 {
			be.Endpoints = []model.Endpoint{{Address: fmt.Sprintf("10.1.%d.%d", round/200, round%200+1), Port: 8080}}
		}
		next[i] = &be
		before := len(delta.snap.Load().overlay)
		if err := full.Apply(next); err != nil {
			t.Fatal(err)
		}
		if err := delta.ApplyChanged(next, []int{i}); err != nil {
			t.Fatal(err)
		}
		if len(delta.snap.Load().overlay) < before {
			folds++
		}
		if got, want := snapshotView(delta), snapshotView(full); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("round %d (changed %d): ApplyChanged serves\n%v\nApply serves\n%v", round, i, got, want)
		}
		cur = next
	}
	if folds == 0 {
		t.Fatal("the overlay was never folded")
	}
}
