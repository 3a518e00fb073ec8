package builder

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// slicesOf returns a lookup of in's slices by namespace and service.
func slicesOf(in Input) func(ns, svc string) []*discoveryv1.EndpointSlice {
	by := map[string][]*discoveryv1.EndpointSlice{}
	for _, es := range in.EndpointSlices {
		k := es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]
		by[k] = append(by[k], es)
	}
	return func(ns, svc string) []*discoveryv1.EndpointSlice { return by[ns+"/"+svc] }
}

// TestRefreshEqualsBuild: for random changes of EndpointSlices only (an
// endpoint replaced, added, made unready, a slice removed or added, a port
// renamed), Refresh of the previous Configuration equals a full Build of
// the changed input, for Ingress backends, the default backend, a
// tcp-services backend, a service-upstream one (never refreshed) and an
// unused canary's.
func TestRefreshEqualsBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ready, notReady := true, false
	for round := range 60 {
		in := syntheticInput(12)
		opt := Options{DefaultBackendService: "ns0/svc0-0"}
		in.TCPServices = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ingress", Name: "tcp"}, Data: map[string]string{"9000": "ns1/svc1-0:80"}}
		in.Ingresses[2].Annotations[annotationPrefix+"service-upstream"] = "true"
		in.Services[4].Spec.ClusterIP = "10.96.0.4" // ing2's two Services
		in.Services[5].Spec.ClusterIP = "10.96.0.5"
		prev, idx := BuildIndexed(in, opt)
		if len(prev.Errors) != 0 {
			t.Fatalf("errors: %v", prev.Errors)
		}
		// Change the slices of a few Services.
		next := in
		next.EndpointSlices = append([]*discoveryv1.EndpointSlice(nil), in.EndpointSlices...)
		changed := map[string]bool{}
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(next.EndpointSlices))
			es := next.EndpointSlices[i].DeepCopy()
			changed[es.Namespace+"/"+es.Labels[discoveryv1.LabelServiceName]] = true
			op := rng.IntN(6)
			if len(es.Endpoints) == 0 && (op == 0 || op == 2) {
				op = 1 // emptied earlier this round
			}
			switch op {
			case 0:
				es.Endpoints[rng.IntN(len(es.Endpoints))].Addresses = []string{fmt.Sprintf("10.250.%d.%d", round, rng.IntN(250))}
			case 1:
				es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.251.%d.1", round)}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
			case 2:
				es.Endpoints[0].Conditions.Ready = &notReady
			case 3:
				es.Endpoints = nil
			case 4:
				es.Ports = []discoveryv1.EndpointPort{{Name: ptr("other"), Port: ptr(int32(9090))}}
			case 5:
				extra := es.DeepCopy()
				extra.Name += "-2"
				extra.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.252.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}
				next.EndpointSlices = append(next.EndpointSlices, extra)
			}
			next.EndpointSlices[i] = es
		}
		var keys []string
		for k := range changed {
			keys = append(keys, k)
		}
		got, backends, ok := idx.RefreshChanged(prev, keys, slicesOf(next))
		if !ok {
			t.Fatalf("round %d: Refresh refused a plain endpoint change", round)
		}
		want := Build(next, opt)
		if diff := cmp.Diff(want, got, cmp.Comparer((*model.Regexp).Equal), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round %d, changed %v: Refresh differs from Build (-build +refresh):\n%s", round, keys, diff)
		}
		// The indices are those of the backends that differ, and only
		// those: a sink applying them alone gets the full build.
		var differ []int
		for i := range prev.Backends {
			if !prev.Backends[i].Equal(got.Backends[i]) {
				differ = append(differ, i)
			}
		}
		if fmt.Sprint(backends) != fmt.Sprint(differ) {
			t.Errorf("round %d: RefreshChanged names backends %v; %v differ", round, backends, differ)
		}
	}
}

// TestRefreshUnchangedAndRefused: a change that moves no endpoint returns
// the same Configuration; an invalid address (which a build reports) makes
// Refresh refuse, so the caller builds in full.
func TestRefreshUnchangedAndRefused(t *testing.T) {
	in := syntheticInput(3)
	prev, idx := BuildIndexed(in, Options{})
	if got, ok := idx.Refresh(prev, []string{"ns0/svc0-0", "ns9/none"}, slicesOf(in)); !ok || got != prev {
		t.Errorf("an unchanged slice: ok %v, same %v; want true, true", ok, got == prev)
	}
	bad := in
	bad.EndpointSlices = append([]*discoveryv1.EndpointSlice(nil), in.EndpointSlices...)
	es := bad.EndpointSlices[0].DeepCopy()
	es.Endpoints[0].Addresses = []string{"fd00::1"} // not IPv4
	bad.EndpointSlices[0] = es
	if _, ok := idx.Refresh(prev, []string{"ns0/svc0-0"}, slicesOf(bad)); ok {
		t.Error("Refresh accepted an address a build reports as invalid")
	}
}

// BenchmarkRefresh is an endpoint change of one Service among n Ingresses
// (2n Services): Refresh against a full Build, the work it replaces.
func BenchmarkRefresh(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		in := syntheticInput(n)
		prev, idx := BuildIndexed(in, Options{})
		next := in
		next.EndpointSlices = append([]*discoveryv1.EndpointSlice(nil), in.EndpointSlices...)
		es := next.EndpointSlices[n/2].DeepCopy()
		es.Endpoints[0].Addresses = []string{"10.253.0.1"}
		next.EndpointSlices[n/2] = es
		key := es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]
		lookup := slicesOf(next)
		b.Run(fmt.Sprintf("ingresses=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := idx.Refresh(prev, []string{key}, lookup); !ok {
					b.Fatal("refused")
				}
			}
		})
	}
}
