package builder

import (
	"slices"
	"strings"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
	networkingv1 "k8s.io/api/networking/v1"
)

// Review is what a sync would make of one Ingress, for the validating
// admission webhook (issue 21, item 3): the errors that would keep it from
// being served as written (Denied) and the rest (Warnings), all as Build
// reports them.
type Review struct {
	// Ours is false for an Ingress of another class (or outside
	// WatchNamespace): nothing else is set, and the webhook admits it.
	Ours bool
	// Denied are the errors a sync would refuse or fail closed on: a
	// refused (snippet) or invalid annotation, an access-control annotation
	// that fails closed, an invalid host or path, a host and path another
	// Ingress serves (or would lose to this one). Empty: admit.
	Denied []model.ObjectError
	// Warnings are the candidate's other errors: unsupported annotations,
	// a Service or TLS Secret that does not exist yet, a canary no primary
	// matches. A sync serves the rest of the Ingress.
	Warnings []model.ObjectError
	// Scanned is how many Ingresses in held with candidate added or
	// replaced, and Built how many went through Build (candidate and the
	// Ingresses of this class sharing a host and path with it).
	Scanned, Built int
}

// ReviewIngress runs candidate through Build as a sync would with
// candidate added to in (replacing the Ingress of the same namespace and
// name), and reports what that sync says about it. in may hold every
// Ingress of the store or only those sharing a host and path with
// candidate (HostPathKeys; an index finds them), and may lack
// EndpointSlices, TCP and UDP services: the verdict is the same.
//
// Only the Ingresses that can change what Build says of candidate are
// built: those of this class with a rule on one of candidate's hosts and
// paths (host/path ownership and canary merging are decided per host and
// path; everything else Build reports about an Ingress depends on that
// Ingress alone, on the Services, Secrets and ConfigMaps of its namespace
// (an annotation names only its own namespace's, sameNamespace) and on
// the controller ConfigMap). EndpointSlices are left out: they only give backends their
// endpoints and never make an error on an Ingress. A second build without
// candidate finds the Ingresses that would lose a path to it. So a review
// costs two builds of a handful of Ingresses, not a build of the store
// (docs/benchmarks/builder.md: ~0.5 s at 10k Ingresses).
func ReviewIngress(in Input, opt Options, candidate *networkingv1.Ingress) Review {
	opt = opt.withDefaults()
	if !IsOurs(candidate, in.IngressClasses, opt) {
		return Review{}
	}
	keys := hostPaths(candidate, nil)
	var related []*networkingv1.Ingress
	namespaces := map[string]bool{candidate.Namespace: true}
	scanned := 1
	for _, ing := range in.Ingresses {
		if ing.Namespace == candidate.Namespace && ing.Name == candidate.Name {
			continue
		}
		scanned++
		if !sharesHostPath(ing, keys) || !IsOurs(ing, in.IngressClasses, opt) {
			continue
		}
		related = append(related, ing)
		namespaces[ing.Namespace] = true
	}
	// Services, Secrets and ConfigMaps of the namespaces involved: an
	// Ingress names only its own namespace's (sameNamespace).
	sub := Input{IngressClasses: in.IngressClasses, ConfigMap: in.ConfigMap}
	for _, s := range in.Services {
		if namespaces[s.Namespace] {
			sub.Services = append(sub.Services, s)
		}
	}
	for _, s := range in.Secrets {
		if namespaces[s.Namespace] {
			sub.Secrets = append(sub.Secrets, s)
		}
	}
	for _, cm := range in.ConfigMaps {
		if namespaces[cm.Namespace] {
			sub.ConfigMaps = append(sub.ConfigMaps, cm)
		}
	}
	r := Review{Ours: true, Scanned: scanned, Built: len(related) + 1}
	with := sub
	with.Ingresses = append(append(make([]*networkingv1.Ingress, 0, len(related)+1), related...), candidate)
	after := Build(with, opt).Errors

	a, _ := parseAnnotations(candidate.Annotations)
	for _, e := range after {
		if e.Object.Kind != "Ingress" || e.Object.Namespace != candidate.Namespace || e.Object.Name != candidate.Name {
			continue
		}
		if admissionDenies(e, a) {
			r.Denied = append(r.Denied, e)
		} else {
			r.Warnings = append(r.Warnings, e)
		}
	}
	if len(related) == 0 {
		return r
	}
	// An Ingress that serves a host and path now and would not with
	// candidate admitted: ingress-nginx's webhook refuses an overlap
	// whichever Ingress is older.
	without := sub
	without.Ingresses = related
	before := map[model.ObjectError]bool{}
	for _, e := range Build(without, opt).Errors {
		before[e] = true
	}
	for _, e := range after {
		if e.Object.Kind == "Ingress" && (e.Object.Namespace != candidate.Namespace || e.Object.Name != candidate.Name) &&
			!before[e] && isPathField(e.Field) {
			r.Denied = append(r.Denied, e)
		}
	}
	return r
}

// HostPathKeys are the keys of ing's hosts and paths as ReviewIngress
// matches Ingresses ("host\x00path", CatchAllHost for no host, "/" for no
// path; "/" on each rule host and on the catch-all server for
// spec.defaultBackend): an index of the store on them (cache.Indexers)
// finds the Ingresses a review must build without scanning the store.
func HostPathKeys(ing *networkingv1.Ingress) []string {
	var out []string
	forEachHostPath(ing, func(k hostPath) bool {
		out = append(out, k.host+"\x00"+k.path)
		return false
	})
	slices.Sort(out)
	return slices.Compact(out)
}

// hostPath is one host (CatchAllHost for none) and path ("/" for none) of
// an Ingress, as Build keys locations.
type hostPath struct{ host, path string }

// hostPaths adds ing's rule hosts and paths to dst (a new set when nil):
// each rule path, and "/" on every rule host and on the catch-all server
// for spec.defaultBackend.
func hostPaths(ing *networkingv1.Ingress, dst map[hostPath]bool) map[hostPath]bool {
	if dst == nil {
		dst = map[hostPath]bool{}
	}
	forEachHostPath(ing, func(k hostPath) bool { dst[k] = true; return false })
	return dst
}

// sharesHostPath reports whether ing has a host and path in keys.
func sharesHostPath(ing *networkingv1.Ingress, keys map[hostPath]bool) bool {
	return forEachHostPath(ing, func(k hostPath) bool { return keys[k] })
}

// forEachHostPath calls f for each host and path of ing until f returns
// true, and reports whether it did.
func forEachHostPath(ing *networkingv1.Ingress, f func(hostPath) bool) bool {
	def := ing.Spec.DefaultBackend != nil
	if def && f(hostPath{model.CatchAllHost, "/"}) {
		return true
	}
	for _, rule := range ing.Spec.Rules {
		host := rule.Host
		if host == "" {
			host = model.CatchAllHost
		}
		if def && f(hostPath{host, "/"}) {
			return true
		}
		if rule.HTTP == nil {
			continue
		}
		for _, p := range rule.HTTP.Paths {
			path := p.Path
			if path == "" {
				path = "/"
			}
			if f(hostPath{host, path}) {
				return true
			}
		}
	}
	return false
}

// isPathField reports whether field is an Ingress rule path,
// "spec.rules[i].http.paths[j]", the field Build names for a host and path
// served by another Ingress.
func isPathField(field string) bool {
	return strings.HasPrefix(field, "spec.rules[") && strings.Contains(field, ".http.paths[") && strings.HasSuffix(field, "]")
}

// admissionDenies says whether one of the candidate's errors keeps a sync
// from serving it as written. a is the candidate's parsed annotations.
// Missing objects (a Service, a TLS Secret) only warn: they are often
// created after the Ingress (cert-manager writes the TLS Secret after it
// sees the Ingress), as ingress-nginx's webhook admits them.
func admissionDenies(e model.ObjectError, a *annotations) bool {
	switch e.Reason {
	case model.ReasonFailedClosed:
		return true // every path answers 503 (on a canary Build reports ReasonUnsupported)
	case model.ReasonUnsupported:
		return false
	}
	f := e.Field
	switch {
	case f == annotationPrefix+"default-backend":
		// A valid Service name whose Service does not exist yet warns;
		// an invalid value is refused.
		return a.defaultBackend == ""
	case strings.HasPrefix(f, annotationPrefix):
		return true // invalid value, refused snippet, invalid canary settings
	case strings.HasSuffix(f, ".path"):
		return true // a path no data plane may be given
	case a.canary:
		return false // a canary for a host or path no primary serves
	case strings.HasPrefix(f, "spec.rules[") && strings.HasSuffix(f, "].host"):
		return true // not a lower-case DNS name
	case isPathField(f):
		return true // an older Ingress serves this host and path
	}
	return false
}
