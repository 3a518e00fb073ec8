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

// metrics are the request metrics, with ingress-nginx's names and labels.
// Label values come from the configuration (server name, Ingress path,
// backend names) or small fixed sets (status code, method), never from raw
// request data, so cardinality is bounded by the configuration.
type metrics struct {
	perHost  bool
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	respSize *prometheus.HistogramVec
	reqSize  *prometheus.HistogramVec
	upstream *prometheus.HistogramVec
	connect  *prometheus.HistogramVec
	header   *prometheus.HistogramVec
	latency  *prometheus.SummaryVec

	// series caches the resolved metrics of each label set, so a request
	// whose labels were seen before allocates nothing: copy on write,
	// emptied by Update (locations are per configuration) and when full.
	mu     sync.Mutex
	series atomic.Pointer[map[seriesKey]*series]
}

var requestLabels = []string{"host", "status", "method", "path", "namespace", "ingress", "service", "canary"}

// upstreamLatencyLabels are those of ingress-nginx's
// ingress_upstream_latency_seconds.
var upstreamLatencyLabels = []string{"ingress", "namespace", "service", "canary"}

// maxSeries bounds the series cache; past it the cache starts over.
const maxSeries = 10000

func newMetrics(reg prometheus.Registerer, perHost bool) (*metrics, error) {
	const ns = "nginx_ingress_controller"
	m := &metrics{
		perHost: perHost,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "requests",
			Help: "The total number of client requests."}, requestLabels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "request_duration_seconds",
			Help: "The request processing time in seconds.", Buckets: prometheus.DefBuckets}, requestLabels),
		respSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "response_size",
			Help: "The response length (including headers) in bytes.", Buckets: prometheus.ExponentialBuckets(64, 4, 10)}, requestLabels),
		reqSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "request_size",
			Help: "The request length (including headers) in bytes.", Buckets: prometheus.ExponentialBuckets(64, 4, 10)}, requestLabels),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "response_duration_seconds",
			Help: "The time spent receiving the response from the upstream servers, in seconds.", Buckets: prometheus.DefBuckets}, requestLabels),
		connect: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "connect_duration_seconds",
			Help: "The time spent establishing a connection with the upstream server, in seconds.", Buckets: prometheus.DefBuckets}, requestLabels),
		header: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "header_duration_seconds",
			Help: "The time spent receiving the first header from the upstream server, in seconds.", Buckets: prometheus.DefBuckets}, requestLabels),
		// As ingress-nginx: observed with $upstream_connect_time (here: of
		// the last attempt), the quantiles of its defObjectives.
		latency: prometheus.NewSummaryVec(prometheus.SummaryOpts{Namespace: ns, Name: "ingress_upstream_latency_seconds",
			Help:       "DEPRECATED Upstream service latency per Ingress",
			Objectives: map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001}}, upstreamLatencyLabels),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.respSize, m.reqSize, m.upstream, m.connect, m.header, m.latency} {
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

// series are the metrics of one label set.
type series struct {
	requests                                           prometheus.Counter
	duration, respSize, reqSize, upstream, connect, hd prometheus.Observer
	latency                                            prometheus.Observer
}

// reset empties the series cache (the series stay registered).
func (m *metrics) reset() {
	empty := map[seriesKey]*series{}
	m.series.Store(&empty)
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
	s := (*m.series.Load())[k]
	if s == nil {
		s = m.add(k)
	}
	s.requests.Inc()
	s.duration.Observe(took.Seconds())
	s.respSize.Observe(float64(x.respHeader + x.bodySent))
	s.reqSize.Observe(float64(x.reqLength))
	if k.proxied {
		s.upstream.Observe(o.upstream.Seconds())
		s.hd.Observe(o.header.Seconds())
		s.connect.Observe(o.connect.Seconds())
		s.latency.Observe(o.connect.Seconds())
	}
}

// add resolves and caches the series of k.
func (m *metrics) add(k seriesKey) *series {
	var path, ns, ing, svc string
	if k.loc != nil {
		path, ns, ing, svc = k.loc.Path, k.loc.Ingress.Namespace, k.loc.Ingress.Name, k.loc.Service
	}
	lv := []string{k.host, strconv.Itoa(k.status), k.method, path, ns, ing, svc, k.canary}
	s := &series{
		requests: m.requests.WithLabelValues(lv...),
		duration: m.duration.WithLabelValues(lv...),
		respSize: m.respSize.WithLabelValues(lv...),
		reqSize:  m.reqSize.WithLabelValues(lv...),
	}
	if k.proxied {
		s.upstream = m.upstream.WithLabelValues(lv...)
		s.connect = m.connect.WithLabelValues(lv...)
		s.hd = m.header.WithLabelValues(lv...)
		s.latency = m.latency.WithLabelValues(ing, ns, svc, k.canary)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.series.Load()
	next := make(map[seriesKey]*series, len(old)+1)
	if len(old) < maxSeries {
		for kk, v := range old {
			next[kk] = v
		}
	}
	next[k] = s
	m.series.Store(&next)
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
