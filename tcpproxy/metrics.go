package tcpproxy

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Error reasons counted in switchyard_tcpproxy_errors_total.
const (
	reasonNoPeer        = "no_peer"        // the balancer had no endpoint
	reasonConnect       = "connect"        // every tried endpoint refused or timed out
	reasonProxyProtocol = "proxy_protocol" // a malformed PROXY header from the client
)

// fallbackService labels connections sent to the local HTTPS data plane.
const fallbackService = "https-fallback"

// metrics are the per-service counters; labels are the balancer backend
// name (or fallbackService).
type metrics struct {
	conns  *prometheus.CounterVec // service
	bytes  *prometheus.CounterVec // service, direction (upstream|downstream)
	errors *prometheus.CounterVec // service, reason
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_tcpproxy_connections_total",
			Help: "L4 connections handled, by service (balancer backend).",
		}, []string{"service"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_tcpproxy_bytes_total",
			Help: "Bytes copied, by service and direction (upstream: client to peer).",
		}, []string{"service", "direction"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_tcpproxy_errors_total",
			Help: "L4 connections that failed, by service and reason.",
		}, []string{"service", "reason"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.conns, m.bytes, m.errors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register tcpproxy metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) done(service string, up, down int64) {
	m.conns.WithLabelValues(service).Inc()
	m.bytes.WithLabelValues(service, "upstream").Add(float64(up))
	m.bytes.WithLabelValues(service, "downstream").Add(float64(down))
}

func (m *metrics) fail(service, reason string) {
	m.conns.WithLabelValues(service).Inc()
	m.errors.WithLabelValues(service, reason).Inc()
}
