package proxy

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// metrics are the request metrics, with ingress-nginx's names, labels and
// buckets. Label values come from the configuration (server name, Ingress
// path, backend names) or small fixed sets (status code, method), never
// from raw request data, so cardinality is bounded by the configuration.
//
// A request adds to atomic counters of its series only (no lock, no
// allocation, no Prometheus observer): the counter and histograms are
// folded into Prometheus metrics when /metrics is scraped (Collect). The
// deprecated upstream latency summary stays a Prometheus summary, as its
// quantiles need the samples.
type metrics struct {
	perHost bool
	latency *prometheus.SummaryVec

	// all holds every series ever made, for Collect: series outlive the
	// configuration that made them, as Prometheus vectors' children do.
	mu  sync.Mutex
	all map[labelValues]*series // guarded by mu

	// cache resolves a request's series without a lock: copy on write,
	// emptied by reset (its keys are a configuration's locations) and
	// when full.
	cache atomic.Pointer[map[seriesKey]*series]
}

// The request metrics' names and labels, as ingress-nginx exports them.
var (
	requestLabels = []string{"host", "status", "method", "path", "namespace", "ingress", "service", "canary"}

	descRequests = prometheus.NewDesc("nginx_ingress_controller_requests",
		"The total number of client requests.", requestLabels, nil)
	descDuration = prometheus.NewDesc("nginx_ingress_controller_request_duration_seconds",
		"The request processing time in seconds.", requestLabels, nil)
	descRespSize = prometheus.NewDesc("nginx_ingress_controller_response_size",
		"The response length (including headers) in bytes.", requestLabels, nil)
	descReqSize = prometheus.NewDesc("nginx_ingress_controller_request_size",
		"The request length (including headers) in bytes.", requestLabels, nil)
	descUpstream = prometheus.NewDesc("nginx_ingress_controller_response_duration_seconds",
		"The time spent receiving the response from the upstream servers, in seconds.", requestLabels, nil)
	descConnect = prometheus.NewDesc("nginx_ingress_controller_connect_duration_seconds",
		"The time spent establishing a connection with the upstream server, in seconds.", requestLabels, nil)
	descHeader = prometheus.NewDesc("nginx_ingress_controller_header_duration_seconds",
		"The time spent receiving the first header from the upstream server, in seconds.", requestLabels, nil)

	// durationBuckets are Prometheus' default buckets (ingress-nginx's
	// for the time histograms) in nanoseconds; sizeBuckets are
	// ingress-nginx's for the size histograms, 64 bytes times powers of 4.
	durationBuckets = scaledBuckets(prometheus.DefBuckets, 1e9)
	sizeBuckets     = scaledBuckets(prometheus.ExponentialBuckets(64, 4, 10), 1)
)

// upstreamLatencyLabels are those of ingress-nginx's
// ingress_upstream_latency_seconds.
var upstreamLatencyLabels = []string{"ingress", "namespace", "service", "canary"}

// maxSeries bounds the series cache; past it the cache starts over.
const maxSeries = 10000

func newMetrics(reg prometheus.Registerer, perHost bool) (*metrics, error) {
	m := &metrics{
		perHost: perHost,
		all:     map[labelValues]*series{},
		// As ingress-nginx: observed with $upstream_connect_time (here: of
		// the last attempt), the quantiles of its defObjectives.
		latency: prometheus.NewSummaryVec(prometheus.SummaryOpts{Namespace: "nginx_ingress_controller", Name: "ingress_upstream_latency_seconds",
			Help:       "DEPRECATED Upstream service latency per Ingress",
			Objectives: map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001}}, upstreamLatencyLabels),
	}
	for _, c := range []prometheus.Collector{m, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("proxy: register metrics: %w", err)
		}
	}
	m.reset()
	return m, nil
}

// seriesKey names a label set: the location (path, namespace, ingress,
// service come from it), the server name, status, method and canary; and
// whether the request went upstream (only then do the upstream series
// exist).
type seriesKey struct {
	loc                  *model.Location
	host, method, canary string
	status               int
	proxied              bool
}

// labelValues are a series' label values, in requestLabels' order.
type labelValues [8]string

// series are the metrics of one label set. The request count is the
// duration histogram's.
type series struct {
	labels                      labelValues
	duration, respSize, reqSize histogram
	// upstream is set (once, under metrics.mu) by the first request that
	// went upstream: requests answered by the proxy itself have no
	// upstream series, as in ingress-nginx.
	upstream atomic.Pointer[upstreamSeries]
}

// upstreamSeries are the upstream timings of one label set.
type upstreamSeries struct {
	response, connect, header histogram
	latency                   prometheus.Observer
}

// histogram is a fixed-bucket histogram of integer values (nanoseconds or
// bytes), updated with atomics only.
type histogram struct {
	bounds []int64         // upper bounds, inclusive, ascending
	counts []atomic.Uint64 // per bucket; the last is +Inf
	sum    atomic.Int64
}

func newHistogram(bounds []int64) histogram {
	return histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// observe adds one value.
func (h *histogram) observe(v int64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(v)
}

// metric is h as a Prometheus histogram, with values divided by scale.
// The count is the buckets' total, so it never disagrees with them.
func (h *histogram) metric(desc *prometheus.Desc, scale float64, lv []string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.bounds))
	var n uint64
	for i, b := range h.bounds {
		n += h.counts[i].Load()
		buckets[float64(b)/scale] = n
	}
	n += h.counts[len(h.bounds)].Load()
	return prometheus.MustNewConstHistogram(desc, n, float64(h.sum.Load())/scale, buckets, lv...)
}

// scaledBuckets are bucket bounds times scale, as integers.
func scaledBuckets(bounds []float64, scale float64) []int64 {
	out := make([]int64, len(bounds))
	for i, b := range bounds {
		out[i] = int64(b*scale + 0.5)
	}
	return out
}

// Describe is part of prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descDuration, descRespSize, descReqSize, descUpstream, descConnect, descHeader} {
		ch <- d
	}
}

// Collect is part of prometheus.Collector: every series' counters as they
// are now.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	all := make([]*series, 0, len(m.all))
	for _, s := range m.all {
		all = append(all, s)
	}
	m.mu.Unlock()
	for _, s := range all {
		lv := s.labels[:]
		ch <- s.duration.metric(descDuration, 1e9, lv)
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(histogramCount(&s.duration)), lv...)
		ch <- s.respSize.metric(descRespSize, 1, lv)
		ch <- s.reqSize.metric(descReqSize, 1, lv)
		if u := s.upstream.Load(); u != nil {
			ch <- u.response.metric(descUpstream, 1e9, lv)
			ch <- u.connect.metric(descConnect, 1e9, lv)
			ch <- u.header.metric(descHeader, 1e9, lv)
		}
	}
}

// histogramCount is how many values h holds.
func histogramCount(h *histogram) uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

// reset empties the series cache (the series stay).
func (m *metrics) reset() {
	empty := map[seriesKey]*series{}
	m.cache.Store(&empty)
}

// methods are the label values for request methods; others count as OTHER.
var methods = map[string]string{"GET": "GET", "HEAD": "HEAD", "POST": "POST", "PUT": "PUT", "DELETE": "DELETE",
	"PATCH": "PATCH", "OPTIONS": "OPTIONS", "CONNECT": "CONNECT", "TRACE": "TRACE"}

func (m *metrics) observe(x *exchange, o *outcome, took time.Duration) {
	method, ok := methods[string(x.method)]
	if !ok {
		method = "OTHER"
	}
	k := seriesKey{loc: o.loc, method: method, canary: o.canary, status: x.status, proxied: o.upstream > 0}
	if m.perHost && o.loc != nil {
		k.host = o.server
	}
	s := (*m.cache.Load())[k]
	if s == nil {
		s = m.add(k)
	}
	s.duration.observe(int64(took))
	s.respSize.observe(int64(x.respHeader + x.bodySent))
	s.reqSize.observe(int64(x.reqLength))
	if k.proxied {
		u := s.upstream.Load()
		u.response.observe(int64(o.upstream))
		u.header.observe(int64(o.header))
		u.connect.observe(int64(o.connect))
		u.latency.Observe(o.connect.Seconds())
	}
}

// add finds or makes the series of k and caches it.
func (m *metrics) add(k seriesKey) *series {
	var path, ns, ing, svc string
	if k.loc != nil {
		path, ns, ing, svc = k.loc.Path, k.loc.Ingress.Namespace, k.loc.Ingress.Name, k.loc.Service
	}
	lv := labelValues{k.host, strconv.Itoa(k.status), k.method, path, ns, ing, svc, k.canary}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.all[lv]
	if s == nil {
		s = &series{labels: lv, duration: newHistogram(durationBuckets),
			respSize: newHistogram(sizeBuckets), reqSize: newHistogram(sizeBuckets)}
		m.all[lv] = s
	}
	if k.proxied && s.upstream.Load() == nil {
		s.upstream.Store(&upstreamSeries{response: newHistogram(durationBuckets), connect: newHistogram(durationBuckets),
			header: newHistogram(durationBuckets), latency: m.latency.WithLabelValues(ing, ns, svc, k.canary)})
	}
	old := *m.cache.Load()
	next := make(map[seriesKey]*series, len(old)+1)
	if len(old) < maxSeries {
		for kk, v := range old {
			next[kk] = v
		}
	}
	next[k] = s
	m.cache.Store(&next)
	return s
}

// bodyLen is a body's size without reading a stream (Body would buffer it
// whole): the declared Content-Length, zero when chunked.
func bodyLen(stream bool, contentLength int, body func() []byte) int {
	if stream {
		return max(contentLength, 0)
	}
	return len(body())
}
