package proxy

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// A route's series slots (routeSeries) hand each request its own label
// set's series, however the label sets of one route share and take over
// slots, from many goroutines at once: every count lands on its series.
func TestRequestMetricsRouteSlots(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, true)
	if err != nil {
		t.Fatal(err)
	}
	rts := []*route{
		{loc: model.Location{Path: "/a", Service: "web", Ingress: model.ObjectRef{Namespace: "ns", Name: "ing"}}},
		{loc: model.Location{Path: "/b", Service: "web", Ingress: model.ObjectRef{Namespace: "ns", Name: "ing"}}},
	}
	type req struct {
		rt             int
		method, canary string
		status         int
		server         string
		proxied        bool
	}
	// Statuses and methods chosen so several share a slot.
	var reqs []req
	for _, st := range []int{200, 208, 216, 404, 503} {
		for _, me := range []string{"GET", "PUT", "POST", "BREW"} {
			for _, ca := range []string{"", "canary-web"} {
				reqs = append(reqs, req{rt: (st + len(me)) % 2, method: me, canary: ca, status: st, server: "h.test", proxied: st != 404})
			}
		}
	}
	// The same labels without a route (no location): the map alone.
	reqs = append(reqs, req{rt: -1, method: "GET", status: 404})
	const rounds = 50
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range rounds * len(reqs) {
				r := reqs[(i*7+g)%len(reqs)]
				o := outcome{server: r.server, canary: r.canary}
				if r.rt >= 0 {
					o.rt = rts[r.rt]
					o.loc = &o.rt.loc
				}
				if r.proxied {
					o.upstream, o.header = 3*time.Millisecond, 2*time.Millisecond
				}
				x := exchange{method: []byte(r.method), status: r.status, reqLength: 100, respHeader: 50, bodySent: 10}
				m.observe(&x, &o, 4*time.Millisecond, time.Hour)
			}
		})
	}
	wg.Wait()
	var want strings.Builder
	want.WriteString("# HELP nginx_ingress_controller_requests The total number of client requests.\n# TYPE nginx_ingress_controller_requests counter\n")
	var lines []string
	for _, r := range reqs {
		method := methodLabel([]byte(r.method))
		if r.rt < 0 {
			lines = append(lines, fmt.Sprintf(`nginx_ingress_controller_requests{canary="",host="",ingress="",method="%s",namespace="",path="",service="",status="%d"} %d`, method, r.status, 4*rounds))
			continue
		}
		lines = append(lines, fmt.Sprintf(`nginx_ingress_controller_requests{canary="%s",host="%s",ingress="ing",method="%s",namespace="ns",path="%s",service="web",status="%d"} %d`,
			r.canary, r.server, method, rts[r.rt].loc.Path, r.status, 4*rounds))
	}
	for _, l := range lines {
		want.WriteString(l + "\n")
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want.String()), "nginx_ingress_controller_requests"); err != nil {
		t.Error(err)
	}
	// Every proxied label set has its upstream series with every request.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "nginx_ingress_controller_response_duration_seconds" {
			continue
		}
		n := 0
		for _, mm := range mf.GetMetric() {
			n++
			if c := mm.GetHistogram().GetSampleCount(); c != 4*rounds {
				t.Errorf("%v: %d upstream samples; want %d", mm.GetLabel(), c, 4*rounds)
			}
		}
		if n != 32 {
			t.Errorf("%d upstream series; want 32 (the label sets with status other than 404)", n)
		}
	}
}

// The upstream latency window's counters are exact when many goroutines
// observe at once, connect times of zero (the atomic path) and others, and
// across a turn of the window's slots.
func TestUpstreamLatencyWindowConcurrent(t *testing.T) {
	w := newLatencyWindow([4]string{"ing", "ns", "svc", ""}, 3)
	const per = 2000
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range per {
				d := time.Duration(0)
				if i%4 == 0 {
					d = time.Duration(g+1) * time.Millisecond
				}
				// Half way, the clock moves into the next slot.
				now := time.Hour
				if i >= per/2 {
					now += latencySlotWidth
				}
				w.observe(g%3, d, now) // stripes shared and not
			}
		})
	}
	wg.Wait()
	var m dto.Metric
	if err := w.metric(time.Hour + latencySlotWidth).Write(&m); err != nil {
		t.Fatal(err)
	}
	s := m.GetSummary()
	if s.GetSampleCount() != 4*per {
		t.Errorf("count %d; want %d", s.GetSampleCount(), 4*per)
	}
	wantSum := (1 + 2 + 3 + 4) * time.Millisecond * per / 4
	if got := s.GetSampleSum(); got < wantSum.Seconds()*0.999999 || got > wantSum.Seconds()*1.000001 {
		t.Errorf("sum %v; want %v", got, wantSum.Seconds())
	}
	// Three in four are zero, so the median is zero and the 0.99 quantile
	// one of the others.
	for _, q := range s.GetQuantile() {
		switch q.GetQuantile() {
		case 0.5:
			if q.GetValue() != 0 {
				t.Errorf("median %v; want 0", q.GetValue())
			}
		case 0.99:
			if q.GetValue() < 0.0029 || q.GetValue() > 0.0042 {
				t.Errorf("0.99 quantile %v; want about 4 ms", q.GetValue())
			}
		}
	}
}
