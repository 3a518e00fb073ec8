package main

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// balancerCollector exports per-endpoint balancer state at scrape time.
// Like ingressCollector it carries the controller labels itself and keeps
// each endpoint's label pairs between scrapes (metrics_cache.go): a scrape
// allocates the values, not the labels.
type balancerCollector struct {
	// immutable
	reg                                *balancer.Registry
	requests, failures, inFlight, ewma *prometheus.Desc
	constPairs                         []*dto.LabelPair

	// guarded by mu
	mu     sync.Mutex
	pairs  map[endpointKey]*endpointPairs
	scrape uint64
}

type endpointKey struct{ backend, endpoint string }

// endpointPairs are one endpoint's label pairs and the last scrape that
// saw it.
type endpointPairs struct {
	labels []*dto.LabelPair
	seen   uint64
}

var balancerLabelNames = []string{"backend", "endpoint"}

func newBalancerCollector(reg *balancer.Registry, labels prometheus.Labels) *balancerCollector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, balancerLabelNames, labels)
	}
	return &balancerCollector{
		reg:        reg,
		requests:   desc("switchyard_balancer_endpoint_requests_total", "Attempts completed per endpoint."),
		failures:   desc("switchyard_balancer_endpoint_failures_total", "Failed attempts per endpoint."),
		inFlight:   desc("switchyard_balancer_endpoint_in_flight", "Requests in flight per endpoint."),
		ewma:       desc("switchyard_balancer_endpoint_ewma_seconds", "Decayed EWMA latency score per endpoint (ewma, peak_ewma)."),
		constPairs: labelPairs(labels),
		pairs:      map[endpointKey]*endpointPairs{},
	}
}

func (c *balancerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.failures
	ch <- c.inFlight
	ch <- c.ewma
}

func (c *balancerCollector) Collect(ch chan<- prometheus.Metric) {
	backends := c.reg.Backends()
	n := 0
	for _, b := range backends {
		n += len(b.Endpoints)
	}
	series := make([]fastSeries, 0, 4*n)
	c.mu.Lock()
	c.scrape++
	for _, b := range backends {
		for _, e := range b.Endpoints {
			k := endpointKey{b.Name, e.Address}
			p := c.pairs[k]
			if p == nil {
				p = &endpointPairs{labels: withLabels(c.constPairs, balancerLabelNames, b.Name, e.Address)}
				c.pairs[k] = p
			}
			p.seen = c.scrape
			series = append(series, fastSeries{}, fastSeries{}, fastSeries{})
			s := series[len(series)-3:]
			s[0].set(c.requests, p.labels, true, float64(e.Requests))
			s[1].set(c.failures, p.labels, true, float64(e.Failures))
			s[2].set(c.inFlight, p.labels, false, float64(e.InFlight))
			if e.EWMA >= 0 {
				series = append(series, fastSeries{})
				series[len(series)-1].set(c.ewma, p.labels, false, e.EWMA)
			}
		}
	}
	if len(c.pairs) > 2*n+64 {
		for k, p := range c.pairs {
			if p.seen != c.scrape {
				delete(c.pairs, k)
			}
		}
	}
	c.mu.Unlock()
	for i := range series {
		ch <- &series[i]
	}
}
