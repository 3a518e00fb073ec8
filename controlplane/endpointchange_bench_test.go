package controlplane

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/builder/synthetic"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/internal/cputime"
)

// endpointChangeFixture is a Controller over n Ingresses of test/k8s.Stage's
// shape (one namespace; one Service, one slice and one endpoint per
// Ingress) whose informer caches are filled directly, and a sink doing
// what the Go data plane's sink does with a backends-only change: the
// balancer (cmd/switchyard/controller.go).
type endpointChangeFixture struct {
	c     *Controller
	reg   *balancer.Registry
	cfg   *model.Configuration
	n     int
	turn  int
	sinks int
}

func newEndpointChangeFixture(tb testing.TB, n int) *endpointChangeFixture {
	f := &endpointChangeFixture{n: n, reg: balancer.NewRegistry(balancer.Config{})}
	c, err := New(Config{Client: fake.NewClientset(), Sinks: []Sink{SinkFunc(func(_ context.Context, cfg *model.Configuration, ch Change) error {
		f.sinks++
		if err := f.reg.ApplyChanged(cfg.Backends, ch.Backends); err != nil {
			tb.Error(err)
		}
		return nil
	})}})
	if err != nil {
		tb.Fatal(err)
	}
	f.c = c
	in := synthetic.Input(synthetic.Shape{Ingresses: n, Namespaces: 1})
	fac := c.factory
	add := func(inf cache.SharedIndexInformer, obj any) {
		if err := inf.GetIndexer().Add(obj); err != nil {
			tb.Fatal(err)
		}
	}
	for _, o := range in.IngressClasses {
		add(fac.Networking().V1().IngressClasses().Informer(), o)
	}
	for _, o := range in.Services {
		add(fac.Core().V1().Services().Informer(), o)
	}
	for _, o := range in.EndpointSlices {
		add(fac.Discovery().V1().EndpointSlices().Informer(), o)
	}
	for _, o := range in.Ingresses {
		add(fac.Networking().V1().Ingresses().Informer(), o)
	}
	f.c.needFull()
	if f.cfg, err = c.sync(context.Background(), nil); err != nil {
		tb.Fatal(err)
	}
	if got := len(f.cfg.Backends); got != n+1 {
		tb.Fatalf("%d backends, want %d", got, n+1)
	}
	return f
}

// change moves the endpoint of one Service: the informer's store is
// updated and its handler called, then the sync loop's sync runs.
func (f *endpointChangeFixture) change(tb testing.TB) {
	f.turn++
	i := (f.turn * 7919) % f.n
	ns, svc := "ns0", synthetic.Service(i, 0)
	es := synthetic.Slice(ns, svc, fmt.Sprintf("10.254.%d.%d", f.turn/250%250, f.turn%250+1))
	es.ResourceVersion = fmt.Sprint(f.turn + 1)
	inf := f.c.factory.Discovery().V1().EndpointSlices().Informer()
	old, _, _ := inf.GetIndexer().Get(es)
	if err := inf.GetIndexer().Update(es); err != nil {
		tb.Fatal(err)
	}
	f.c.changedSlices(old, es)
	sinks := f.sinks
	next, err := f.c.sync(context.Background(), f.cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if f.sinks != sinks+1 || next == f.cfg {
		tb.Fatal("the change did not reach the sink")
	}
	f.cfg = next
}

// BenchmarkEndpointChange is the controller's work for one EndpointSlice
// change at n Ingresses: the event handler, the sync (Refresh, no build)
// and the Go plane's balancer. CPU-ns/op is the process's CPU time per
// change (user + system, all threads, so the garbage collection the change
// causes is included); heap-B is the live heap after the last change.
func BenchmarkEndpointChange(b *testing.B) {
	for _, n := range []int{10000, 50000} {
		b.Run(fmt.Sprintf("ingresses=%d", n), func(b *testing.B) {
			f := newEndpointChangeFixture(b, n)
			runtime.GC()
			refreshed := f.c.Refreshed()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for b.Loop() {
				f.change(b)
			}
			cpu := cpuTime() - cpu0
			b.StopTimer()
			if got := f.c.Refreshed() - refreshed; got != uint64(b.N) {
				b.Fatalf("%d of %d changes refreshed", got, b.N)
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "CPU-ns/op")
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapAlloc), "heap-B")
		})
	}
}

// cpuTime is the CPU time the process has used.
func cpuTime() time.Duration {
	d, ok := cputime.Process()
	if !ok {
		panic("getrusage failed")
	}
	return d
}
