package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/switchyard-proxy/switchyard/balancer/picksock"
	"k8s.io/klog/v2"
)

// nginxRequestMetrics are ingress-nginx's request metrics for
// --data-plane=nginx, fed by the Lua shim's aggregated 0x06 frames: the
// request counter and the duration histogram per label set, and the
// upstream latency summary per ingress, namespace, service and canary. The
// shim builds label values from the configuration and fixed sets only; the
// number of label sets is capped all the same.
type nginxRequestMetrics struct {
	mu      sync.Mutex
	sets    map[string]*requestAgg
	latency map[string]*latencyAgg
	dropped uint64
	// unsampled counts connect times in a latency summary's count and sum
	// but not in its quantiles (the shim sends picksock.MaxSamples or fewer
	// per label set and flush).
	unsampled uint64
}

type requestAgg struct {
	labels  []string
	count   uint64
	sum     float64  // seconds
	buckets []uint64 // per bucket, not cumulative; the last is +Inf
	latency *latencyAgg
}

// latencyAgg is one series of the upstream latency summary. Count and sum
// are exact: the shim sends them for every request. The quantiles come from
// a real prometheus.Summary (not registered) fed with the samples the shim
// sends; its own count and sum would miss the connect times the shim left
// out of its sample.
type latencyAgg struct {
	labels []string // ingress, namespace, service, canary
	count  uint64
	sum    float64 // seconds
	est    prometheus.Summary
}

// maxLabelSets bounds the label sets kept (a generous multiple of what a
// large configuration produces).
const maxLabelSets = 50000

var (
	nginxRequestLabels = []string{"host", "status", "method", "path", "namespace", "ingress", "service", "canary"}
	descNginxRequests  = prometheus.NewDesc("nginx_ingress_controller_requests", "The total number of client requests.", nginxRequestLabels, nil)
	descNginxDuration  = prometheus.NewDesc("nginx_ingress_controller_request_duration_seconds", "The request processing time in seconds.", nginxRequestLabels, nil)

	// As ingress-nginx's collectors/socket.go (controller v1.4 to v1.11; it
	// was removed in v1.12) and this module's Go data plane: observed with
	// $upstream_connect_time, here the last attempt's where nginx lists
	// several (ingress-nginx's tonumber() skipped those requests).
	nginxLatencyLabels       = []string{"ingress", "namespace", "service", "canary"}
	descNginxUpstreamLatency = prometheus.NewDesc("nginx_ingress_controller_ingress_upstream_latency_seconds",
		"DEPRECATED Upstream service latency per Ingress", nginxLatencyLabels, nil)
	// ingress-nginx's defObjectives.
	nginxLatencyObjectives = map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001}

	descNginxUnsampled = prometheus.NewDesc("switchyard_nginx_connect_samples_dropped_total",
		"Upstream connect times counted in nginx_ingress_controller_ingress_upstream_latency_seconds' count and sum but not in its quantiles: "+
			"the Lua shim sends at most 1024 per label set and flush of each worker, a uniform sample of the rest.", nil, nil)
)

func newNginxRequestMetrics() *nginxRequestMetrics {
	return &nginxRequestMetrics{sets: map[string]*requestAgg{}, latency: map[string]*latencyAgg{}}
}

// add is picksock.Config.Requests. picksock has checked the frame's
// numbers against each other (buckets add up to the count, connect times
// are some of the requests, samples within their sum).
func (m *nginxRequestMetrics) add(r *picksock.RequestMetrics) {
	if len(r.Buckets) != len(prometheus.DefBuckets)+1 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.sets[string(r.Labels)]
	if a == nil {
		parts := strings.Split(string(r.Labels), "\t")
		if len(parts) != len(nginxRequestLabels) || len(m.sets) >= maxLabelSets {
			m.dropped++
			return
		}
		a = &requestAgg{labels: parts, buckets: make([]uint64, len(r.Buckets))}
		m.sets[string(r.Labels)] = a
	}
	a.count += uint64(r.Count)
	a.sum += float64(r.SumUS) / 1e6
	for i, b := range r.Buckets {
		a.buckets[i] += uint64(b)
	}
	c := &r.Connect
	if c.Count == 0 {
		return
	}
	l := a.latency
	if l == nil {
		l = m.latencySeries(a.labels)
		if l == nil {
			m.dropped++
			return
		}
		a.latency = l
	}
	l.count += uint64(c.Count)
	l.sum += float64(c.SumUS) / 1e6
	for _, s := range c.Samples {
		l.est.Observe(float64(s) / 1e6)
	}
	m.unsampled += uint64(c.Count) - uint64(len(c.Samples))
}

// latencySeries returns the summary series of a request label set (host,
// status, method, path, namespace, ingress, service, canary), creating it
// unless maxLabelSets series exist. Called with mu held.
func (m *nginxRequestMetrics) latencySeries(req []string) *latencyAgg {
	labels := []string{req[5], req[4], req[6], req[7]}
	key := strings.Join(labels, "\t")
	l := m.latency[key]
	if l == nil {
		if len(m.latency) >= maxLabelSets {
			return nil
		}
		l = &latencyAgg{labels: labels, est: prometheus.NewSummary(prometheus.SummaryOpts{
			Name: "estimator", Help: "quantiles of nginx_ingress_controller_ingress_upstream_latency_seconds", Objectives: nginxLatencyObjectives,
		})}
		m.latency[key] = l
	}
	return l
}

func (m *nginxRequestMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- descNginxRequests
	ch <- descNginxDuration
	ch <- descNginxUpstreamLatency
	ch <- descNginxUnsampled
}

func (m *nginxRequestMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range m.sets {
		ch <- prometheus.MustNewConstMetric(descNginxRequests, prometheus.CounterValue, float64(a.count), a.labels...)
		cum := map[float64]uint64{}
		var c uint64
		for i, le := range prometheus.DefBuckets {
			c += a.buckets[i]
			cum[le] = c
		}
		ch <- prometheus.MustNewConstHistogram(descNginxDuration, a.count, a.sum, cum, a.labels...)
	}
	for _, l := range m.latency {
		var pb dto.Metric
		if err := l.est.Write(&pb); err != nil {
			continue
		}
		q := make(map[float64]float64, len(nginxLatencyObjectives))
		for _, x := range pb.GetSummary().GetQuantile() {
			q[x.GetQuantile()] = x.GetValue()
		}
		ch <- prometheus.MustNewConstSummary(descNginxUpstreamLatency, l.count, l.sum, q, l.labels...)
	}
	ch <- prometheus.MustNewConstMetric(descNginxUnsampled, prometheus.CounterValue, float64(m.unsampled))
}

// serveNginxMetrics serves /metrics on addr with the request metrics the
// shim sends when its request_metrics option is on (`switchyard balancer
// --metrics-address`). It returns the metrics for picksock.Config.Requests
// and a function that stops the server.
func serveNginxMetrics(addr string, extra ...prometheus.Collector) (*nginxRequestMetrics, func(), error) {
	m := newNginxRequestMetrics()
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		return nil, nil, fmt.Errorf("register request metrics: %w", err)
	}
	for _, c := range extra {
		if err := reg.Register(c); err != nil {
			return nil, nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "metrics server", "address", addr)
		}
	}()
	return m, func() { _ = srv.Close() }, nil
}

// pickFrames exports the pick socket's frame counts: how often the nginx
// shim asked Go in the request path (type "pick") against the decision data
// it applied itself (leases, premade picks, hash tables).
type pickFrames struct {
	srv  *picksock.Server
	desc *prometheus.Desc
}

func newPickFrames(srv *picksock.Server) pickFrames {
	return pickFrames{srv: srv, desc: prometheus.NewDesc("switchyard_pick_socket_frames_total",
		"Frames the nginx shim sent to the pick socket, by type; \"pick\" frames are requests that waited for Go.", []string{"type"}, nil)}
}

func (p pickFrames) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

func (p pickFrames) Collect(ch chan<- prometheus.Metric) {
	for typ, name := range picksock.FrameTypes {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.CounterValue, float64(p.srv.Frames(typ)), name)
	}
}
