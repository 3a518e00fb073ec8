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
	byService map[string][]endpointSource // by namespace/name
}

// endpointSource is how one backend's endpoints were read.
type endpointSource struct {
	backend string
	// svc is the Service as the build saw it: a Service change makes the
	// caller build again, so it is still current when Refresh runs.
	svc   *corev1.Service
	port  corev1.ServicePort
	proto corev1.Protocol
}

// fillEndpoints sets be's endpoints from the slices of svc's port sp, and
// records where they came from.
func (b *builder) fillEndpoints(be *model.Backend, svc *corev1.Service, sp corev1.ServicePort, proto corev1.Protocol) {
	be.Endpoints = b.endpoints(svc, sp, proto)
	b.index.record(be.Name, svc, sp, proto)
}

// record notes that backend's endpoints come from the slices of svc's port
// sp; nothing outside BuildIndexed (x nil) or for an ExternalName, whose
// endpoint does not come from slices.
func (x *EndpointIndex) record(backend string, svc *corev1.Service, sp corev1.ServicePort, proto corev1.Protocol) {
	if x == nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return
	}
	key := svc.Namespace + "/" + svc.Name
	x.byService[key] = append(x.byService[key], endpointSource{backend: backend, svc: svc, port: sp, proto: proto})
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
		srcs := x.byService[key]
		if len(srcs) == 0 {
			continue
		}
		svc := srcs[0].svc
		b := &builder{cfg: &model.Configuration{}, slices: map[string][]*discoveryv1.EndpointSlice{key: slicesOf(svc.Namespace, svc.Name)}}
		for _, src := range srcs {
			eps := b.endpoints(src.svc, src.port, src.proto)
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
