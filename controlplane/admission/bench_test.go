package admission

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard-proxy/switchyard/controlplane/builder"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
)

// listerStore reads client-go indexers and listers the way
// controlplane.Controller.AdmissionInput reads the informer caches (the
// Ingress index on builder.HostPathKeys; Services, Secrets and ConfigMaps
// of the namespaces involved), so the benchmark pays for the snapshot a
// review takes.
type listerStore struct {
	ingresses cache.Indexer
	classes   networkinglisters.IngressClassLister
	services  corelisters.ServiceLister
	secrets   corelisters.SecretLister
	cms       corelisters.ConfigMapLister
}

const hostPathIndex = "host-path"

func (s *listerStore) AdmissionInput(candidate *networkingv1.Ingress) (builder.Input, error) {
	var in builder.Input
	var err error
	all := labels.Everything()
	seen := map[string]bool{}
	namespaces := map[string]bool{candidate.Namespace: true}
	for _, key := range builder.HostPathKeys(candidate) {
		objs, err := s.ingresses.ByIndex(hostPathIndex, key)
		if err != nil {
			return in, err
		}
		for _, o := range objs {
			ing := o.(*networkingv1.Ingress)
			if k := ing.Namespace + "/" + ing.Name; !seen[k] {
				seen[k] = true
				in.Ingresses = append(in.Ingresses, ing)
				namespaces[ing.Namespace] = true
			}
		}
	}
	if in.IngressClasses, err = s.classes.List(all); err != nil {
		return in, err
	}
	for ns := range namespaces {
		svcs, err := s.services.Services(ns).List(all)
		if err != nil {
			return in, err
		}
		in.Services = append(in.Services, svcs...)
		secrets, err := s.secrets.Secrets(ns).List(all)
		if err != nil {
			return in, err
		}
		in.Secrets = append(in.Secrets, secrets...)
		cms, err := s.cms.ConfigMaps(ns).List(all)
		if err != nil {
			return in, err
		}
		in.ConfigMaps = append(in.ConfigMaps, cms...)
	}
	return in, nil
}

func (s *listerStore) BuildOptions() builder.Options { return builder.Options{} }

// syntheticStore holds n Ingresses (host h<i>.example, paths /p0 and /p1
// to two Services, two annotations each, as builder's BenchmarkBuild), their
// 2n Services, n Opaque Secrets (a TLS Secret per Ingress is common) and
// the IngressClass, in indexers.
func syntheticStore(t testing.TB, n int) (s *listerStore, in builder.Input) {
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	ings, classes, svcs, secrets, cms := idx(), idx(), idx(), idx(), idx()
	if err := ings.AddIndexers(cache.Indexers{hostPathIndex: func(obj any) ([]string, error) {
		return builder.HostPathKeys(obj.(*networkingv1.Ingress)), nil
	}}); err != nil {
		t.Fatal(err)
	}
	add := func(i cache.Indexer, obj any) {
		if err := i.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	add(classes, &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "switchyard"},
		Spec: networkingv1.IngressClassSpec{Controller: builder.DefaultControllerClass}})
	for i := range n {
		ns := fmt.Sprintf("ns%d", i%100)
		ing := ingress(ns, fmt.Sprintf("ing%d", i), i, map[string]string{ann + "proxy-body-size": "8m", ann + "load-balance": "ewma"},
			fmt.Sprintf("h%d.example/p0", i), fmt.Sprintf("h%d.example/p1", i))
		for j := range 2 {
			svc := fmt.Sprintf("svc%d-%d", i, j)
			ing.Spec.Rules[j].HTTP.Paths[0].Backend.Service.Name = svc
			add(svcs, service(ns, svc))
		}
		add(ings, ing)
		add(secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("s%d", i)}, Data: map[string][]byte{"auth": []byte("x")}})
	}
	s = &listerStore{ingresses: ings, classes: networkinglisters.NewIngressClassLister(classes),
		services: corelisters.NewServiceLister(svcs), secrets: corelisters.NewSecretLister(secrets), cms: corelisters.NewConfigMapLister(cms)}
	for _, o := range ings.List() {
		in.Ingresses = append(in.Ingresses, o.(*networkingv1.Ingress))
	}
	for _, o := range svcs.List() {
		in.Services = append(in.Services, o.(*corev1.Service))
	}
	for _, o := range secrets.List() {
		in.Secrets = append(in.Secrets, o.(*corev1.Secret))
	}
	in.IngressClasses = []*networkingv1.IngressClass{classes.List()[0].(*networkingv1.IngressClass)}
	return s, in
}

// BenchmarkReview measures one admission review through the handler
// (decode, store snapshot, builder.ReviewIngress, encode) with n Ingresses
// in the store, for a new Ingress taking a path of an existing one (denied:
// both builds run) and for a new host (admitted). p50-ns and p99-ns are the
// percentiles of the single reviews. The fullbuild rows time what a
// webhook building the whole store per review would pay: builder.Build of
// the store plus the candidate.
//
//	go test -run '^$' -bench 'BenchmarkReview/(conflict|new-host)' -benchtime 2000x -count 2 ./controlplane/admission/
//
// 2-core VM shared with other builds (load average 9-10), 10k Ingresses
// and 10k Secrets: p50 0.07-0.2 ms, p99 5-9 ms, mean 0.26-0.66 ms,
// 77-129 kB and 0.7-1.2 k allocations per review. fullbuild/ingresses=10000
// is ~0.6 s per review (-benchtime 5x), which is why reviews build only the
// Ingresses sharing a host and path with the candidate.
func BenchmarkReview(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		s, in := syntheticStore(b, n)
		h, err := NewHandler(Config{Store: s})
		if err != nil {
			b.Fatal(err)
		}
		conflict := ingress("ns7", "taker", n+1, nil, "h7.example/p0")
		conflict.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name = "svc7-0"
		fresh := ingress("ns7", "fresh", n+1, map[string]string{ann + "proxy-body-size": "8m"}, "fresh.example/")
		fresh.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name = "svc7-0"
		for _, c := range []struct {
			name    string
			ing     *networkingv1.Ingress
			allowed bool
		}{{"conflict", conflict, false}, {"new-host", fresh, true}} {
			body := reviewBody(b, admissionv1.Create, c.ing, "ns7")
			b.Run(fmt.Sprintf("%s/ingresses=%d", c.name, n), func(b *testing.B) {
				if resp := post(b, h, body); resp.Allowed != c.allowed {
					b.Fatalf("allowed = %v; want %v (%+v)", resp.Allowed, c.allowed, resp.Result)
				}
				var lat []time.Duration
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					start := time.Now()
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body)))
					lat = append(lat, time.Since(start))
					if rec.Code != http.StatusOK {
						b.Fatal(rec.Code)
					}
				}
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
				b.ReportMetric(float64(lat[(len(lat)*99)/100].Nanoseconds()), "p99-ns")
			})
		}
		b.Run(fmt.Sprintf("fullbuild/ingresses=%d", n), func(b *testing.B) {
			full := in
			full.Ingresses = append(slices.Clone(in.Ingresses), conflict)
			b.ReportAllocs()
			for b.Loop() {
				builder.Build(full, builder.Options{})
			}
		})
	}
}

// TestIndexedStoreSameVerdict: a review over the store as the controller
// reads it for the webhook (only the Ingresses sharing a host and path,
// found through the index, and no EndpointSlices) denies exactly what a
// review over the whole store denies, with the same messages.
func TestIndexedStoreSameVerdict(t *testing.T) {
	s, full := syntheticStore(t, 300)
	canary := ingress("ns3", "canary", 400, map[string]string{ann + "canary": "true", ann + "canary-weight": "5"}, "h3.example/p0")
	canary.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name = "svc3-1"
	owner := ingress("ns5", "ing5", 5, map[string]string{ann + "proxy-body-size": "8m"}, "h5.example/p0", "h9.example/p1")
	owner.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name = "svc5-0"
	withDefault := ingress("ns8", "default", 400, nil)
	withDefault.Spec.DefaultBackend = &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
		Name: "svc8-0", Port: networkingv1.ServiceBackendPort{Number: 80}}}
	for _, c := range []*networkingv1.Ingress{
		ingress("ns7", "newer", 400, nil, "h7.example/p0"),
		ingress("ns7", "older", -1, nil, "h7.example/p1", "h8.example/p0"),
		ingress("ns7", "snippet", 400, map[string]string{ann + "server-snippet": "x"}, "fresh.example/"),
		ingress("ns7", "fresh", 400, map[string]string{ann + "limit-rps": "many"}, "fresh.example/"),
		canary, owner, withDefault,
	} {
		t.Run(c.Name, func(t *testing.T) {
			part, err := s.AdmissionInput(c)
			if err != nil {
				t.Fatal(err)
			}
			got := builder.ReviewIngress(part, builder.Options{}, c)
			want := builder.ReviewIngress(full, builder.Options{}, c)
			if denies := c.Name != "canary" && c.Name != "default"; denies != (len(want.Denied) > 0) {
				t.Errorf("whole store: denied %v; want denied: %v", want.Denied, denies)
			}
			if diff := cmp.Diff(want.Denied, got.Denied); diff != "" {
				t.Errorf("denied (-whole store +indexed):\n%s", diff)
			}
			if got.Scanned >= want.Scanned {
				t.Errorf("the indexed review read %d Ingresses, the whole store has %d", got.Scanned, want.Scanned)
			}
		})
	}
}
