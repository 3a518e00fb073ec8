package admission

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-proxy/switchyard/controlplane/builder"
)

// metrics are ingress-nginx v1.15.1's admission metrics, under its names
// and types (gauges holding the last review). admission_config_size is not
// exported: ingress-nginx renders nginx.conf for the Ingress under review
// and reports its size; Switchyard never renders an object under review
// (CVE-2025-1974), so there is no size to report.
type metrics struct {
	roundtrip, renderDuration, renderIngresses, testedDuration, testedIngresses prometheus.Gauge
	checks, checkErrors                                                         *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "nginx_ingress_controller", Name: name, Help: help})
	}
	m := &metrics{
		roundtrip: gauge("admission_roundtrip_duration",
			"Seconds the last admission review took, from reading the request to the verdict."),
		renderDuration: gauge("admission_render_duration",
			"Seconds the last admission review spent reading the controller's store view (ingress-nginx: rendering the Ingresses; nothing is rendered here)."),
		renderIngresses: gauge("admission_render_ingresses",
			"Ingresses the last admission review read from the store view (those sharing a host and path with the reviewed one, found through an index), the reviewed one included."),
		testedDuration: gauge("admission_tested_duration",
			"Seconds the last admission review spent in the builder, building the reviewed Ingress with the Ingresses sharing a host and path with it."),
		testedIngresses: gauge("admission_tested_ingresses",
			"Ingresses built by the last admission review: the reviewed one and those of this class sharing a host and path with it."),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nginx_ingress_controller", Name: "check_success",
			Help: "Cumulative number of Ingresses the admission webhook admitted."}, []string{"namespace", "ingress"}),
		checkErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nginx_ingress_controller", Name: "check_errors",
			Help: "Cumulative number of Ingresses the admission webhook denied."}, []string{"namespace", "ingress"}),
	}
	for _, c := range []prometheus.Collector{m.roundtrip, m.renderDuration, m.renderIngresses, m.testedDuration, m.testedIngresses, m.checks, m.checkErrors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("admission: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) observe(ns, name string, allowed bool, r builder.Review, render, tested, roundtrip time.Duration) {
	if allowed {
		m.checks.WithLabelValues(ns, name).Inc()
	} else {
		m.checkErrors.WithLabelValues(ns, name).Inc()
	}
	m.renderDuration.Set(render.Seconds())
	m.renderIngresses.Set(float64(r.Scanned))
	m.testedDuration.Set(tested.Seconds())
	m.testedIngresses.Set(float64(r.Built))
	m.roundtrip.Set(roundtrip.Seconds())
}
