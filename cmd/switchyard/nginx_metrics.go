package main

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// nginxRequestMetrics are ingress-nginx's request metrics for
// --data-plane=nginx, fed by the Lua shim's aggregated 0x06 frames: the
// request counter and the duration histogram per label set. The shim builds
// label values from the configuration and fixed sets only; the number of
// label sets is capped all the same.
type nginxRequestMetrics struct {
	mu      sync.Mutex
	sets    map[string]*requestAgg
	dropped uint64
}

type requestAgg struct {
	labels  []string
	count   uint64
	sum     float64  // seconds
	buckets []uint64 // per bucket, not cumulative; the last is +Inf
}

// maxLabelSets bounds the label sets kept (a generous multiple of what a
// large configuration produces).
const maxLabelSets = 50000

var (
	nginxRequestLabels = []string{"host", "status", "method", "path", "namespace", "ingress", "service", "canary"}
	descNginxRequests  = prometheus.NewDesc("nginx_ingress_controller_requests", "The total number of client requests.", nginxRequestLabels, nil)
	descNginxDuration  = prometheus.NewDesc("nginx_ingress_controller_request_duration_seconds", "The request processing time in seconds.", nginxRequestLabels, nil)
)

func newNginxRequestMetrics() *nginxRequestMetrics {
	return &nginxRequestMetrics{sets: map[string]*requestAgg{}}
}

// add is picksock.Config.Requests.
func (m *nginxRequestMetrics) add(labels []byte, count uint32, sumUS uint64, buckets []uint32) {
	if len(buckets) != len(prometheus.DefBuckets)+1 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.sets[string(labels)]
	if a == nil {
		parts := strings.Split(string(labels), "\t")
		if len(parts) != len(nginxRequestLabels) || len(m.sets) >= maxLabelSets {
			m.dropped++
			return
		}
		a = &requestAgg{labels: parts, buckets: make([]uint64, len(buckets))}
		m.sets[string(labels)] = a
	}
	a.count += uint64(count)
	a.sum += float64(sumUS) / 1e6
	for i, b := range buckets {
		a.buckets[i] += uint64(b)
	}
}

func (m *nginxRequestMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- descNginxRequests
	ch <- descNginxDuration
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
}
