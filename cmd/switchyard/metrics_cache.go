package main

import (
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"slices"
	"strings"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/klog/v2"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// A /metrics scrape at 10k Ingresses used to cost ~0.2 s of CPU in the
// controller (docs/benchmarks/controlplane.md): every series of every
// scrape was built again (label pairs, a wrapped Desc per series) and the
// whole Configuration was JSON-encoded for config_hash whenever it had
// changed, i.e. after every endpoint change. This file keeps what a
// scrape needs between scrapes: label pairs per series, the series that
// depend on the servers alone once per build, and the hash of each
// backend once per backend change.

// fastMetric is one series whose label pairs are shared between scrapes
// (sorted by name, as the registry wants them, and never modified). Write
// points the output at m's own fields, so m must not change once sent.
type fastMetric struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	value  float64
	// One of them is set, by the metric's type.
	gauge   *dto.Gauge
	counter *dto.Counter
}

func (m *fastMetric) Desc() *prometheus.Desc { return m.desc }

func (m *fastMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	out.Gauge, out.Counter = m.gauge, m.counter
	return nil
}

// fastSeries is a fastMetric with its value holders, allocated together.
type fastSeries struct {
	fastMetric
	g dto.Gauge
	c dto.Counter
}

// set makes s a gauge (or a counter) of value v.
func (s *fastSeries) set(desc *prometheus.Desc, labels []*dto.LabelPair, counter bool, v float64) {
	s.desc, s.labels, s.value = desc, labels, v
	if counter {
		s.c.Value = &s.value
		s.counter = &s.c
	} else {
		s.g.Value = &s.value
		s.gauge = &s.g
	}
}

// labelPairs returns labels as label pairs sorted by name.
func labelPairs(labels prometheus.Labels) []*dto.LabelPair {
	out := make([]*dto.LabelPair, 0, len(labels))
	for k, v := range labels {
		out = append(out, &dto.LabelPair{Name: &k, Value: &v})
	}
	sortPairs(out)
	return out
}

// withLabels returns base (sorted) plus names[i]=values[i], sorted.
func withLabels(base []*dto.LabelPair, names []string, values ...string) []*dto.LabelPair {
	out := make([]*dto.LabelPair, 0, len(base)+len(names))
	out = append(out, base...)
	for i := range names {
		out = append(out, &dto.LabelPair{Name: &names[i], Value: &values[i]})
	}
	sortPairs(out)
	return out
}

func sortPairs(p []*dto.LabelPair) {
	slices.SortFunc(p, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
}

var orphanLabelNames = []string{"namespace", "ingress", "type"}

// configShape is what the collector derives from the parts of a
// Configuration other than endpoints: the controller builds a new
// Configuration only by a full build or by builder.EndpointIndex.Refresh,
// which copies the previous one and replaces the endpoints of some
// backends, sharing everything else. A Configuration holding the same
// Servers array and as many backends as the one a shape was made from
// therefore differs from it in endpoints alone (sameShape).
type configShape struct {
	servers  *model.Server
	nServers int
	// structural is the hash of the Configuration without backends (and
	// without Version and Errors).
	structural uint64
	// backendHash[i] is the hash of Backends[i] as it was when its
	// endpoints were endpoints[i].
	backendHash []uint64
	endpoints   []endpointsRef
	certs       []prometheus.Metric
	orphans     []orphanSeries
}

// endpointsRef identifies an endpoints slice by its array and length:
// Refresh gives a changed backend a new slice, and leaves the others'.
type endpointsRef struct {
	p *model.Endpoint
	n int
}

func refOf(eps []model.Endpoint) endpointsRef { return endpointsRef{unsafe.SliceData(eps), len(eps)} }

// orphanSeries is one orphan_ingress series: its labels and, for
// no-endpoint, the backends whose lack of endpoints orphans the Ingress.
type orphanSeries struct {
	labels []*dto.LabelPair
	// fixed is the value of a no-service series (it depends on Services
	// alone); backends are the indices of the no-endpoint series'.
	fixed    float64
	backends []int
}

// configMetrics are a Configuration's series.
type configMetrics struct {
	cfg     *model.Configuration
	shape   *configShape
	hash    prometheus.Metric
	orphans []fastSeries
}

func (s *configShape) sameShape(cfg *model.Configuration) bool {
	return s != nil && len(cfg.Servers) > 0 && unsafe.SliceData(cfg.Servers) == s.servers &&
		len(cfg.Servers) == s.nServers && len(cfg.Backends) == len(s.backendHash)
}

// metricsOf returns cfg's series, computed once per Configuration and, but
// for endpoints, once per build.
func (c *ingressCollector) metricsOf(cfg *model.Configuration) *configMetrics {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current != nil && c.current.cfg == cfg {
		return c.current
	}
	if !c.shape.sameShape(cfg) {
		c.shape = c.newShape(cfg)
	}
	s := c.shape
	m := &configMetrics{cfg: cfg, shape: s}
	m.hash = prometheus.MustNewConstMetric(c.d.configHash, prometheus.GaugeValue, float64(s.hash(cfg)))
	m.orphans = make([]fastSeries, len(s.orphans))
	for i := range s.orphans {
		o := &s.orphans[i]
		v := o.fixed
		for _, bi := range o.backends {
			if len(cfg.Backends[bi].Endpoints) == 0 {
				v = 1
				break
			}
		}
		m.orphans[i].set(c.d.orphan, o.labels, false, v)
	}
	c.current = m
	return m
}

// newShape derives the shape of cfg. Called with mu held.
func (c *ingressCollector) newShape(cfg *model.Configuration) *configShape {
	s := &configShape{nServers: len(cfg.Servers), backendHash: make([]uint64, len(cfg.Backends)), endpoints: make([]endpointsRef, len(cfg.Backends))}
	if len(cfg.Servers) > 0 {
		s.servers = unsafe.SliceData(cfg.Servers)
	}
	content := *cfg
	content.Version, content.Errors, content.Backends = 0, nil, nil
	s.structural = jsonHash(&content)
	for i := range cfg.Backends {
		s.backendHash[i], s.endpoints[i] = jsonHash(cfg.Backends[i]), refOf(cfg.Backends[i].Endpoints)
	}
	s.certs = c.collectCertificates(cfg)
	s.orphans = c.orphanSeries(cfg)
	return s
}

// hash is config_hash: the content of cfg without its Version and Errors,
// so replicas serving the same objects report the same value (as
// ingress-nginx's hash of its configuration). It hashes the structural
// hash and each backend's, JSON-encoding only the backends whose endpoints
// changed since the shape last saw them.
func (s *configShape) hash(cfg *model.Configuration) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], s.structural)
	_, _ = h.Write(b[:])
	for i := range cfg.Backends {
		be := cfg.Backends[i]
		if r := refOf(be.Endpoints); r != s.endpoints[i] {
			s.backendHash[i], s.endpoints[i] = jsonHash(be), r
		}
		binary.LittleEndian.PutUint64(b[:], s.backendHash[i])
		_, _ = h.Write(b[:])
	}
	return h.Sum64()
}

// jsonHash is the FNV-1a hash of v's JSON encoding.
func jsonHash(v any) uint64 {
	h := fnv.New64a()
	if err := json.NewEncoder(h).Encode(v); err != nil {
		klog.ErrorS(err, "hash the configuration")
		return 0
	}
	return h.Sum64()
}

// orphanSeries derives orphan_ingress for every Ingress path backed by a
// Service: no-service is 1 when the builder found no usable Service port
// for it (the Service is missing, lacks the port, or is an unusable
// ExternalName: its backend's HasService is false); no-endpoint is 1 when
// the Service was found but the backend has no endpoints. An Ingress with
// several paths is orphaned if any of them is, as ingress-nginx sets the
// gauge per path. The series are sorted by their labels, as the registry
// sorts them.
func (c *ingressCollector) orphanSeries(cfg *model.Configuration) []orphanSeries {
	backends := make(map[string]int, len(cfg.Backends))
	for i := range cfg.Backends {
		backends[cfg.Backends[i].Name] = i
	}
	type key struct{ ns, name, typ string }
	byKey := map[key]*orphanSeries{}
	var keys []key
	get := func(k key) *orphanSeries {
		o := byKey[k]
		if o == nil {
			o = &orphanSeries{}
			byKey[k] = o
			keys = append(keys, k)
		}
		return o
	}
	for i := range cfg.Servers {
		for j := range cfg.Servers[i].Locations {
			loc := &cfg.Servers[i].Locations[j]
			if loc.Ingress.Name == "" || loc.Service == "" || loc.IsDefaultBackend {
				continue
			}
			bi, ok := backends[loc.Backend]
			if !ok {
				continue
			}
			ns, name := loc.Ingress.Namespace, loc.Ingress.Name
			o := get(key{ns, name, orphanNoService})
			if !cfg.Backends[bi].HasService {
				o.fixed = 1
				continue
			}
			o = get(key{ns, name, orphanNoEndpoint})
			if !slices.Contains(o.backends, bi) {
				o.backends = append(o.backends, bi)
			}
		}
	}
	// Label order: the controller labels, then ingress, namespace, type.
	slices.SortFunc(keys, func(a, b key) int {
		return cmpStrings(a.name, b.name, a.ns, b.ns, a.typ, b.typ)
	})
	out := make([]orphanSeries, len(keys))
	for i, k := range keys {
		out[i] = *byKey[k]
		out[i].labels = withLabels(c.constPairs, orphanLabelNames, k.ns, k.name, k.typ)
	}
	return out
}

// cmpStrings compares pairs of strings in order: a1 with b1, then a2
// with b2, and so on.
func cmpStrings(pairs ...string) int {
	for i := 0; i+1 < len(pairs); i += 2 {
		if c := strings.Compare(pairs[i], pairs[i+1]); c != 0 {
			return c
		}
	}
	return 0
}
