package builder

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/switchyard-proxy/switchyard/internal/cputime"
)

// syntheticInput builds n Ingresses, each with its own host, two Prefix
// paths to two Services, and five ready endpoints per Service.
func syntheticInput(n int) Input {
	class := "switchyard"
	in := Input{IngressClasses: []*networkingv1.IngressClass{{
		ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec:       networkingv1.IngressClassSpec{Controller: DefaultControllerClass},
	}}}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ready := true
	pt := networkingv1.PathTypePrefix
	for i := range n {
		ns := fmt.Sprintf("ns%d", i%100)
		var paths []networkingv1.HTTPIngressPath
		for j := range 2 {
			svc := fmt.Sprintf("svc%d-%d", i, j)
			in.Services = append(in.Services, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
					Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080),
				}}},
			})
			es := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-abcde",
					Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
			}
			for k := range 5 {
				es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
					Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", i/250%250, i%250, j*10+k+1)},
					Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				})
			}
			in.EndpointSlices = append(in.EndpointSlices, es)
			paths = append(paths, networkingv1.HTTPIngressPath{
				Path: fmt.Sprintf("/p%d", j), PathType: &pt,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
					Name: svc, Port: networkingv1.ServiceBackendPort{Name: "http"}}},
			})
		}
		in.Ingresses = append(in.Ingresses, &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("ing%d", i),
				CreationTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Second)),
				Annotations: map[string]string{
					annotationPrefix + "proxy-body-size": "8m",
					annotationPrefix + "load-balance":    "ewma",
				}},
			Spec: networkingv1.IngressSpec{IngressClassName: &class, Rules: []networkingv1.IngressRule{{
				Host: fmt.Sprintf("h%d.example.com", i),
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: paths}},
			}}},
		})
	}
	return in
}

// The synthetic input builds what it should: one server per Ingress plus the
// catch-all, two backends per Ingress plus the default, five endpoints each.
func TestSyntheticInput(t *testing.T) {
	cfg := Build(syntheticInput(50), Options{})
	if len(cfg.Errors) != 0 {
		t.Fatalf("errors: %v", cfg.Errors)
	}
	if got := len(cfg.Servers); got != 51 {
		t.Errorf("servers = %d, want 51", got)
	}
	if got := len(cfg.Backends); got != 101 {
		t.Errorf("backends = %d, want 101", got)
	}
	for _, be := range cfg.Backends {
		if be.Name != "upstream-default-backend" && len(be.Endpoints) != 5 {
			t.Errorf("%s: %d endpoints, want 5", be.Name, len(be.Endpoints))
		}
	}
}

// BenchmarkBuild measures one full build over synthetic listers. Besides
// time and allocations it reports the live heap right after a build
// (HeapAlloc-B, input included), the bytes allocated per build, and the
// CPU time of the process per build (cpu-ns/op, the GC's included), which
// other load on a shared machine inflates less than sec/op.
func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{1000, 10000, 50000} {
		b.Run(fmt.Sprintf("ingresses=%d", n), func(b *testing.B) { benchBuild(b, syntheticInput(n)) })
	}
}

// BenchmarkBuildDistinctSettings is BenchmarkBuild at 50k Ingresses where
// no two Ingresses can share LocationSettings: each sets upstream-vhost to
// a name of its own.
func BenchmarkBuildDistinctSettings(b *testing.B) {
	in := syntheticInput(50000)
	for i, ing := range in.Ingresses {
		ing.Annotations[annotationPrefix+"upstream-vhost"] = fmt.Sprintf("h%d.internal", i)
	}
	b.Run("ingresses=50000", func(b *testing.B) { benchBuild(b, in) })
}

func benchBuild(b *testing.B, in Input) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	inputHeap := ms.HeapAlloc
	before := ms.TotalAlloc
	var peak uint64
	var cfg any
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	for b.Loop() {
		cfg = Build(in, Options{})
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc)
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(peak), "peakHeapAlloc-B")
	b.ReportMetric(float64(inputHeap), "inputHeap-B")
	b.ReportMetric(float64(ms.TotalAlloc-before)/float64(b.N), "TotalAlloc-B/op")
	runtime.KeepAlive(cfg)
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	d, ok := cputime.Process()
	if !ok {
		b.Fatal("getrusage failed")
	}
	return d
}
