package proxy

import (
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
}

var requestLabels = []string{"host", "status", "method", "path", "namespace", "ingress", "service", "canary"}

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
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.respSize, m.reqSize, m.upstream} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("proxy: register metrics: %w", err)
		}
	}
	return m, nil
}

// methods are the label values for request methods; others count as OTHER.
var methods = map[string]string{"GET": "GET", "HEAD": "HEAD", "POST": "POST", "PUT": "PUT", "DELETE": "DELETE",
	"PATCH": "PATCH", "OPTIONS": "OPTIONS", "CONNECT": "CONNECT", "TRACE": "TRACE"}

func (m *metrics) observe(x *exchange, o *outcome, took time.Duration) {
	method, ok := methods[string(x.method)]
	if !ok {
		method = "OTHER"
	}
	var host, path, ns, ing, svc string
	if o.loc != nil {
		path, ns, ing, svc = o.loc.Path, o.loc.Ingress.Namespace, o.loc.Ingress.Name, o.loc.Service
		if m.perHost {
			host = o.server
		}
	}
	labels := prometheus.Labels{"host": host, "status": strconv.Itoa(x.status), "method": method,
		"path": path, "namespace": ns, "ingress": ing, "service": svc, "canary": o.canary}
	m.requests.With(labels).Inc()
	m.duration.With(labels).Observe(took.Seconds())
	m.respSize.With(labels).Observe(float64(x.respHeader + x.bodySent))
	m.reqSize.With(labels).Observe(float64(x.reqLength))
	if o.upstream > 0 {
		m.upstream.With(labels).Observe(o.upstream.Seconds())
	}
}

// bodyLen is a body's size without reading a stream (Body would buffer it
// whole): the declared Content-Length, zero when chunked.
func bodyLen(stream bool, contentLength int, body func() []byte) int {
	if stream {
		return max(contentLength, 0)
	}
	return len(body())
}
