package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/builder"
	"github.com/switchyard-proxy/switchyard/controlplane/builder/synthetic"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// staticSource is an ingressSource whose Configuration a test sets.
type staticSource struct {
	cfg atomic.Pointer[model.Configuration]
}

func (s *staticSource) Current() *model.Configuration { return s.cfg.Load() }
func (s *staticSource) IsLeader() bool                { return true }

// discardWriter is an http.ResponseWriter that drops the body.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

var _ io.Writer = (*discardWriter)(nil)

// scrapeFixture is a controller's /metrics at n Ingresses of the shape
// test/k8s.Stage creates (one Service, one endpoint each), and a way to
// make one endpoint change as the controller does (Refresh, then the
// balancer).
type scrapeFixture struct {
	handler http.Handler
	src     *staticSource
	reg     *balancer.Registry
	idx     *builder.EndpointIndex
	slices  map[string][]*discoveryv1.EndpointSlice
	n, turn int
}

func newScrapeFixture(tb testing.TB, n int) *scrapeFixture {
	in := synthetic.Input(synthetic.Shape{Ingresses: n})
	cfg, idx := builder.BuildIndexed(in, builder.Options{})
	if len(cfg.Errors) > 0 {
		tb.Fatalf("errors: %v", cfg.Errors)
	}
	reg := balancer.NewRegistry(balancer.Config{})
	if err := reg.Apply(cfg.Backends); err != nil {
		tb.Fatal(err)
	}
	m := newControllerMetrics(controllerMetricsConfig{Balancer: reg, ControllerClass: "k8s.io/ingress-nginx", ElectionID: "ingress-controller-leader", SyncMetrics: true})
	src := &staticSource{}
	src.cfg.Store(cfg)
	m.ingress.attach(src)
	f := &scrapeFixture{handler: m.handler, src: src, reg: reg, idx: idx,
		slices: map[string][]*discoveryv1.EndpointSlice{}, n: n}
	for _, es := range in.EndpointSlices {
		k := es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]
		f.slices[k] = append(f.slices[k], es)
	}
	return f
}

// change moves the endpoint of one Service, as an EndpointSlice update
// does, through Refresh and the balancer.
func (f *scrapeFixture) change(tb testing.TB) {
	f.turn++
	i := (f.turn * 7919) % f.n
	ns, svc := synthetic.Namespace(i), synthetic.Service(i, 0)
	f.slices[ns+"/"+svc] = []*discoveryv1.EndpointSlice{synthetic.Slice(ns, svc, fmt.Sprintf("10.254.%d.%d", f.turn/250%250, f.turn%250+1))}
	next, ok := f.idx.Refresh(f.src.Current(), []string{ns + "/" + svc}, func(ns, svc string) []*discoveryv1.EndpointSlice {
		return f.slices[ns+"/"+svc]
	})
	if !ok {
		tb.Fatal("refresh refused")
	}
	if err := f.reg.Apply(next.Backends); err != nil {
		tb.Fatal(err)
	}
	f.src.cfg.Store(next)
}

func (f *scrapeFixture) scrape() {
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	f.handler.ServeHTTP(&discardWriter{h: http.Header{}}, req)
}

// BenchmarkScrape is one /metrics scrape of the controller's own metrics
// (configuration, certificates, orphans, balancer endpoints, Go runtime)
// at n Ingresses: "steady" scrapes the same Configuration again,
// "changed" scrapes after an endpoint change (a new Configuration, as a
// busy cluster gives every scrape; the change itself is not timed).
func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{10000, 50000} {
		var f *scrapeFixture // shared by the two, made when one runs
		fixture := func(b *testing.B) *scrapeFixture {
			if f == nil {
				f = newScrapeFixture(b, n)
				f.scrape()
			}
			return f
		}
		b.Run(fmt.Sprintf("ingresses=%d/steady", n), func(b *testing.B) {
			f := fixture(b)
			b.ReportAllocs()
			for b.Loop() {
				f.scrape()
			}
		})
		b.Run(fmt.Sprintf("ingresses=%d/changed", n), func(b *testing.B) {
			f := fixture(b)
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				f.change(b)
				b.StartTimer()
				f.scrape()
			}
		})
	}
}
