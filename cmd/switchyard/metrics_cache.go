package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// A /metrics scrape at 10k Ingresses used to cost ~0.2 s of CPU in the
// controller (docs/benchmarks/controlplane.md): every series of every
// scrape was built again and the whole Configuration was JSON-encoded for
// config_hash whenever it had changed, i.e. after every endpoint change.
// This file keeps what a scrape needs between scrapes: the series that
// depend on the servers alone, once per build, and the hash of each
// backend, once per backend change. The series keep the model's strings
// and are written as text at scrape time (metrics_text.go), so what is
// kept is small: no label pairs, no per-Configuration copy.

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
	certs       []certSeries
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
// The strings are the model's.
type orphanSeries struct {
	ns, name, typ string
	// fixed is the value of a no-service series (it depends on Services
	// alone); backends are the indices of the no-endpoint series'.
	fixed    bool
	backends []int32
}

// value is the series' value in cfg, a Configuration of the shape it
// was derived from.
func (o *orphanSeries) value(cfg *model.Configuration) float64 {
	if o.fixed {
		return 1
	}
	for _, bi := range o.backends {
		if len(cfg.Backends[bi].Endpoints) == 0 {
			return 1
		}
	}
	return 0
}

// configMetrics is what a scrape reads of a Configuration.
type configMetrics struct {
	cfg   *model.Configuration
	shape *configShape
	hash  prometheus.Metric
}

func (s *configShape) sameShape(cfg *model.Configuration) bool {
	return s != nil && len(cfg.Servers) > 0 && unsafe.SliceData(cfg.Servers) == s.servers &&
		len(cfg.Servers) == s.nServers && len(cfg.Backends) == len(s.backendHash)
}

// metricsOf returns cfg's config_hash and shape, computed once per
// Configuration and, but for endpoints, once per build.
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
	c.current = m
	return m
}

// newShape derives the shape of cfg. Called with mu held.
func (c *ingressCollector) newShape(cfg *model.Configuration) *configShape {
	s := &configShape{nServers: len(cfg.Servers), backendHash: make([]uint64, len(cfg.Backends)), endpoints: make([]endpointsRef, len(cfg.Backends))}
	if len(cfg.Servers) > 0 {
		s.servers = unsafe.SliceData(cfg.Servers)
	}
	s.structural = structuralHash(cfg)
	for i := range cfg.Backends {
		s.backendHash[i], s.endpoints[i] = jsonHash(cfg.Backends[i]), refOf(cfg.Backends[i].Endpoints)
	}
	s.certs = c.collectCertificates(cfg)
	s.orphans = orphanSeriesOf(cfg)
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

// structuralHash is the FNV-1a hash of the JSON encoding of cfg without
// its Version, Errors and Backends. The servers, certificates and
// passthrough backends are encoded one by one: encoding the whole
// Configuration at once built its JSON in one buffer (32 MB at 50k
// Ingresses, grown by doubling, then kept in encoding/json's pool) at
// every build, and took the RSS past 1 GB (issue 22).
func structuralHash(cfg *model.Configuration) uint64 {
	h := fnv.New64a()
	enc := json.NewEncoder(h)
	rest := *cfg
	rest.Version, rest.Errors, rest.Backends = 0, nil, nil
	rest.Servers, rest.Certificates, rest.PassthroughBackends = nil, nil, nil
	uids := slices.Sorted(maps.Keys(cfg.Certificates))
	// The lengths keep the boundaries between the lists.
	err := enc.Encode(&rest)
	for _, n := range []int{len(cfg.Servers), len(uids), len(cfg.PassthroughBackends)} {
		err = errors.Join(err, enc.Encode(n))
	}
	for i := range cfg.Servers {
		err = errors.Join(err, enc.Encode(&cfg.Servers[i]))
	}
	for _, uid := range uids {
		cert := cfg.Certificates[uid]
		err = errors.Join(err, enc.Encode(uid), enc.Encode(&cert))
	}
	for i := range cfg.PassthroughBackends {
		err = errors.Join(err, enc.Encode(&cfg.PassthroughBackends[i]))
	}
	if err != nil {
		klog.ErrorS(err, "hash the configuration")
		return 0
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
func orphanSeriesOf(cfg *model.Configuration) []orphanSeries {
	backends := make(map[string]int, len(cfg.Backends))
	for i := range cfg.Backends {
		backends[cfg.Backends[i].Name] = i
	}
	type key struct{ ns, name, typ string }
	byKey := map[key]int{}
	var out []orphanSeries
	get := func(k key) *orphanSeries {
		i, ok := byKey[k]
		if !ok {
			i = len(out)
			byKey[k] = i
			out = append(out, orphanSeries{ns: k.ns, name: k.name, typ: k.typ})
		}
		return &out[i]
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
				o.fixed = true
				continue
			}
			o = get(key{ns, name, orphanNoEndpoint})
			if !slices.Contains(o.backends, int32(bi)) {
				o.backends = append(o.backends, int32(bi))
			}
		}
	}
	// Label order: the controller labels, then ingress, namespace, type.
	slices.SortFunc(out, func(a, b orphanSeries) int {
		return cmpStrings(a.name, b.name, a.ns, b.ns, a.typ, b.typ)
	})
	return slices.Clip(out)
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
