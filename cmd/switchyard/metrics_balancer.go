package main

import (
	"slices"
	"strings"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// balancerMetrics exports per-endpoint balancer state at scrape time:
// four families with a series per endpoint, written in the text format
// (metrics_text.go) from one balancer.Registry.Backends per scrape. It
// keeps nothing between scrapes.
type balancerMetrics struct {
	reg *balancer.Registry
}

var balancerLabelNames = []string{"backend", "endpoint"}

// textFamilies returns the balancer's families, sorted by name.
func (m *balancerMetrics) textFamilies() []textFamily {
	family := func(name, typ, help string, value func(e *balancer.EndpointStatus) (float64, bool)) textFamily {
		return textFamily{name: name, help: help, typ: typ, labels: balancerLabelNames,
			write: func(w *textWriter, s *textScrape) { writeEndpoints(w, s, value) }}
	}
	return []textFamily{
		family("switchyard_balancer_endpoint_ewma_seconds", "gauge", "Decayed EWMA latency score per endpoint (ewma, peak_ewma).",
			func(e *balancer.EndpointStatus) (float64, bool) { return e.EWMA, e.EWMA >= 0 }),
		family("switchyard_balancer_endpoint_failures_total", "counter", "Failed attempts per endpoint.",
			func(e *balancer.EndpointStatus) (float64, bool) { return float64(e.Failures), true }),
		family("switchyard_balancer_endpoint_in_flight", "gauge", "Requests in flight per endpoint.",
			func(e *balancer.EndpointStatus) (float64, bool) { return float64(e.InFlight), true }),
		family("switchyard_balancer_endpoint_requests_total", "counter", "Attempts completed per endpoint.",
			func(e *balancer.EndpointStatus) (float64, bool) { return float64(e.Requests), true }),
	}
}

// backends returns the balancer state of the scrape, endpoints sorted by
// address within each backend (Backends sorts the backends by name): the
// order of the registry, which sorts series by their label values.
func (s *textScrape) balancer() []balancer.BackendStatus {
	if !s.backendsTaken {
		s.backendsTaken = true
		s.backends = s.h.balancer.reg.Backends()
		for i := range s.backends {
			if eps := s.backends[i].Endpoints; len(eps) > 1 {
				slices.SortFunc(eps, func(a, b balancer.EndpointStatus) int { return strings.Compare(a.Address, b.Address) })
			}
		}
	}
	return s.backends
}

// writeEndpoints writes a series per endpoint that value has a value for:
// {backend, controller labels, endpoint}.
func writeEndpoints(w *textWriter, s *textScrape, value func(e *balancer.EndpointStatus) (float64, bool)) {
	backends := s.balancer()
	for i := range backends {
		b := &backends[i]
		for j := range b.Endpoints {
			e := &b.Endpoints[j]
			v, ok := value(e)
			if !ok {
				continue
			}
			line := w.begin()
			line = append(line, '{')
			line = appendLabel(line, "backend", b.Name)
			line = s.h.constAfter(line)
			line = append(line, ',')
			line = appendLabel(line, "endpoint", e.Address)
			line = append(line, '}')
			w.end(appendValue(line, v))
		}
	}
}
