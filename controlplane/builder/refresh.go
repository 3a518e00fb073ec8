package builder

import (
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// EndpointIndex records, for each Service, the backends of one build whose
// endpoints were read from that Service's EndpointSlices. When only slices
// changed since that build, Refresh reads those backends' endpoints again
// and gives the Configuration a full build would give, at the cost of the
// backends involved instead of the whole cluster.
type EndpointIndex struct {
	// byService is the build's own map (builder.services): it also holds
	// the Services and slices the build read, which the informer caches
	// held then.
	byService map[string]*serviceEntry // by namespace/name
}

// serviceEntry is what a build knows of one namespace/name: the Service
// (nil when only EndpointSlices name it), its EndpointSlices, and the
// backends whose endpoints were read from them. A backend finds all three
// with one lookup.
type serviceEntry struct {
	// svc is the Service as the build saw it: a Service change makes the
	// caller build again, so it is still current when Refresh runs.
	svc     *corev1.Service
	slices  []*discoveryv1.EndpointSlice
	sources []endpointSource
}

// service is e's Service; nil for a nil e.
func (e *serviceEntry) service() *corev1.Service {
	if e == nil {
		return nil
	}
	return e.svc
}

// endpointSource is how one backend's endpoints were read.
type endpointSource struct {
	backend string
	// port is an element of the Service's Spec.Ports (never written),
	// not a copy: sources were ~a tenth of a build's bytes.
	port  *corev1.ServicePort
	proto corev1.Protocol
}

// fillEndpoints sets be's endpoints from the slices of e's port sp, and
// records where they came from.
func (b *builder) fillEndpoints(be *model.Backend, e *serviceEntry, sp *corev1.ServicePort, proto corev1.Protocol) {
	be.Endpoints = b.endpoints(e, *sp, proto)
	record(e, be.Name, sp, proto)
}

// record notes that backend's endpoints come from the slices of e's port
// sp; nothing for an ExternalName, whose endpoint does not come from
// slices.
func record(e *serviceEntry, backend string, sp *corev1.ServicePort, proto corev1.Protocol) {
	if e.svc.Spec.Type == corev1.ServiceTypeExternalName {
		return
	}
	e.sources = append(e.sources, endpointSource{backend: backend, port: sp, proto: proto})
}

// Refresh returns prev, the Configuration built with this index, with the
// endpoints of the backends of the Services named in changed
// (namespace/name) read again from slicesOf (which returns a Service's
// current EndpointSlices). It gives what Build would give when nothing but
// those Services' slices changed since prev was built. ok is false when it
// cannot tell (an address a build would report as invalid, in the new
// slices or among prev's errors): the caller then builds in full. When no
// endpoint changed it returns prev itself.
func (x *EndpointIndex) Refresh(prev *model.Configuration, changed []string, slicesOf func(namespace, service string) []*discoveryv1.EndpointSlice) (cfg *model.Configuration, ok bool) {
	cfg, _, ok = x.RefreshChanged(prev, changed, slicesOf)
	return cfg, ok
}

// RefreshChanged is Refresh that also returns the indices in cfg.Backends
// (which has prev's backends in prev's order) of the backends whose
// endpoints changed, in increasing order: the sinks apply those alone
// (balancer.Registry.ApplyChanged).
func (x *EndpointIndex) RefreshChanged(prev *model.Configuration, changed []string, slicesOf func(namespace, service string) []*discoveryv1.EndpointSlice) (cfg *model.Configuration, backends []int, ok bool) {
	for _, e := range prev.Errors {
		if e.Object.Kind == "EndpointSlice" {
			return nil, nil, false
		}
	}
	var next []*model.Backend // prev's pointers, copied on the first change
	for _, key := range changed {
		e := x.byService[key]
		if e == nil || len(e.sources) == 0 {
			continue
		}
		b := &builder{cfg: &model.Configuration{}}
		now := &serviceEntry{svc: e.svc, slices: slicesOf(e.svc.Namespace, e.svc.Name)}
		for _, src := range e.sources {
			eps := b.endpoints(now, *src.port, src.proto)
			if len(b.cfg.Errors) > 0 {
				return nil, nil, false
			}
			i := sort.Search(len(prev.Backends), func(i int) bool { return prev.Backends[i].Name >= src.backend })
			if i == len(prev.Backends) || prev.Backends[i].Name != src.backend {
				continue // not served (an unused canary)
			}
			if src.backend == model.DefaultBackendName && len(eps) == 0 {
				eps = []model.Endpoint{builtinDefaultEndpoint}
			}
			if slices.Equal(prev.Backends[i].Endpoints, eps) {
				continue
			}
			if next == nil {
				next = append([]*model.Backend(nil), prev.Backends...)
			}
			// prev's Backend is shared with prev (and the sinks that
			// hold it): the change gets a Backend of its own.
			nb := *next[i]
			nb.Endpoints = eps
			next[i] = &nb
			backends = append(backends, i)
		}
	}
	if next == nil {
		return prev, nil, true
	}
	slices.Sort(backends)
	backends = slices.Compact(backends)
	cfg = new(model.Configuration)
	*cfg = *prev
	cfg.Backends = next
	return cfg, backends, true
}
