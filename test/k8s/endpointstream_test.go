package k8s

import (
	"context"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// ecTarget is where one change of the stream phase moves the measured
// slice's one endpoint: an address and port no other change uses, whose
// server answers body.
type ecTarget struct {
	ip   string
	port int32
	body string
}

// streamSettings are the stream phase's: $SWITCHYARD_EC_STREAM_CHANGES
// (default 100) changes at $SWITCHYARD_EC_STREAM_RATE per second (default
// 20, issue 22's rate).
func streamSettings(b *testing.B) (changes int, rate float64) {
	changes, rate = 100, 20
	if v := os.Getenv("SWITCHYARD_EC_STREAM_CHANGES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			b.Fatalf("SWITCHYARD_EC_STREAM_CHANGES=%q: want a non-negative integer", v)
		}
		changes = n
	}
	if v := os.Getenv("SWITCHYARD_EC_STREAM_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 || r > 1000 {
			b.Fatalf("SWITCHYARD_EC_STREAM_RATE=%q: want changes per second in (0, 1000]", v)
		}
		rate = r
	}
	return changes, rate
}

// startStreamTargets serves one target per change of the stream phase,
// spread over ips, each on a port of its own and answering "ip:port", so a
// response names the change whose endpoint set served it.
func startStreamTargets(b *testing.B, ips []string, n int) []ecTarget {
	var out []ecTarget
	for k := range n {
		ip := ips[k%len(ips)]
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			b.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		body := net.JoinHostPort(ip, strconv.Itoa(port))
		serveMarker(b, ln, body)
		out = append(out, ecTarget{ip: ip, port: int32(port), body: body})
	}
	return out
}

// stream is the phase under a steady stream of changes: with the two
// clients requesting back to back, change k moves the slice's one endpoint
// to targets[k], rate changes a second, with no quiet spell between them.
// For each change it measures the delay from just before its Update call to
// the first response, to a request sent after that, from its endpoint set
// or a newer one (a change the controller folded into the next is served
// when the next is). Any response to a request sent more than
// endpointChangeBound after the API server acknowledged change k's write
// (its Update call returned) from an endpoint set older than k's is stale; both stale responses and errors fail the benchmark. At the
// end the slice is moved back to the lone-change phase's backend.
func (e *ecRun) stream(targets []ecTarget, rate float64) {
	b := e.b
	if len(targets) == 0 {
		return
	}
	home := e.cur.DeepCopy() // the lone-change phase's endpoint and port
	index := map[string]int{e.ips[e.at]: -1}
	for k, t := range targets {
		index[t.body] = k
	}

	ctx, stop := context.WithCancel(e.ctx)
	e.mu.Lock()
	e.log, e.got = e.log[:0], nil
	e.mu.Unlock()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); e.client(ctx) }()
	}
	syncs0, sum0 := e.syncMetric()
	pause(e.ctx, 200*time.Millisecond)        // traffic flowing before the first write
	writes := make([]time.Time, len(targets)) // just before each Update call
	acks := make([]time.Time, len(targets))   // when it returned
	var callMax time.Duration
	every := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for k, t := range targets {
		pause(e.ctx, time.Until(start.Add(time.Duration(k)*every)))
		e.cur.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(t.port), Protocol: home.Ports[0].Protocol}}
		e.cur.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{t.ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}
		writes[k] = time.Now()
		upd, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Update(e.ctx, e.cur, metav1.UpdateOptions{})
		if err != nil {
			b.Fatalf("stream change %d: update the slice to %s: %v", k, t.body, err)
		}
		acks[k] = time.Now()
		callMax = max(callMax, acks[k].Sub(writes[k]))
		e.cur = upd
	}
	elapsed := time.Since(start)
	pause(e.ctx, time.Second) // the last changes land
	stop()
	wg.Wait()
	syncs1, sum1 := e.syncMetric()

	e.mu.Lock()
	log := slices.Clone(e.log)
	e.mu.Unlock()

	delays := make([]float64, len(targets))
	for k := range delays {
		first := time.Duration(-1)
		for _, r := range log {
			if i, ok := index[r.body]; ok && i >= k && !r.sent.Before(writes[k]) {
				if d := r.recv.Sub(writes[k]); first < 0 || d < first {
					first = d
				}
			}
		}
		if first < 0 {
			b.Fatalf("stream change %d (to %s): never served; last output:\n%s", k, targets[k].body, e.ctrl.Tail(3000))
		}
		delays[k] = float64(first) / float64(time.Millisecond)
	}
	var stale, errs int
	for _, r := range log {
		i, ok := index[r.body]
		if !ok {
			errs++
			if errs <= 5 {
				b.Logf("stream: error or unknown answer to a request sent %v into the stream: %q", r.sent.Sub(start).Round(time.Millisecond), r.body)
			}
			continue
		}
		// The newest change the API server acknowledged at least the
		// bound before the request was sent: its set or a newer one must
		// answer (nothing can route by an object before it is stored).
		due := sort.Search(len(acks), func(k int) bool { return acks[k].Add(endpointChangeBound).After(r.sent) }) - 1
		if due >= 0 && i < due {
			stale++
			if stale <= 5 {
				b.Logf("stream: stale response from change %d's endpoint to a request sent %v after change %d's write was acknowledged",
					i, r.sent.Sub(acks[due]).Round(time.Millisecond), due)
			}
		}
	}
	b.ReportMetric(quantile(slices.Clone(delays), 0.50), "stream-p50-ms")
	b.ReportMetric(quantile(slices.Clone(delays), 0.99), "stream-p99-ms")
	b.ReportMetric(slices.Max(delays), "stream-max-ms")
	b.ReportMetric(float64(stale), "stream-stale-after-bound")
	b.ReportMetric(float64(errs), "stream-errors")
	b.ReportMetric((syncs1-syncs0)/float64(len(targets)), "stream-syncs/change")
	b.Logf("stream: %d changes in %v (%.1f/s; slowest Update call %v), %d responses: first request from the new set p50 %.2f ms p99 %.2f ms max %.2f ms; stale after %v %d; errors %d; %.0f syncs (%.2f ms each)",
		len(targets), elapsed.Round(time.Millisecond), float64(len(targets))/elapsed.Seconds(), callMax.Round(time.Millisecond), len(log),
		quantile(slices.Clone(delays), 0.5), quantile(slices.Clone(delays), 0.99), slices.Max(delays), endpointChangeBound, stale, errs,
		syncs1-syncs0, 1000*(sum1-sum0)/max(1, syncs1-syncs0))
	if stale != 0 || errs != 0 {
		b.Errorf("stream: %d stale responses after the bound, %d errors; want 0", stale, errs)
	}

	// Back to the lone-change phase's backend, for the next sub-benchmark.
	e.cur.Ports, e.cur.Endpoints = home.Ports, home.Endpoints
	upd, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Update(e.ctx, e.cur, metav1.UpdateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	e.cur = upd
	harness.WaitFor(b, time.Minute, "traffic back to "+e.ips[e.at], e.ctrl, func(ctx context.Context) (bool, error) {
		return e.get(ctx, http.DefaultClient) == e.ips[e.at], nil
	})
}
