// Package builder is the pure translation from Kubernetes objects to a
// model.Configuration: which Ingresses are ours (IsOurs, ingress class
// resolution as ingress-nginx does it), the nginx.ingress.kubernetes.io/
// annotations (names, defaults and value grammar of ingress-nginx, validated
// strictly; snippets refused), servers and locations from the rules (path
// types, wildcard hosts, the catch-all server, oldest-Ingress precedence,
// ingress-nginx's location order), backends named and shaped exactly as
// ingress-nginx POSTs them to /configuration/backends (endpoints from
// EndpointSlices, upstream settings from the oldest Ingress, session affinity
// and cookie locations, canaries merged as alternative backends), TLS
// certificates from Secrets, tcp/udp-services, the controller ConfigMap into
// model.Global, and every problem found, as model.ObjectError values.
//
// In: an Input snapshot of the informer caches and Options (the controller
// flags). Out: a *model.Configuration, sorted everywhere so equal inputs give
// equal (cmp.Equal, byte-identical JSON) outputs. An invalid value never
// stops the build: that annotation, path, rule, Secret or ConfigMap entry is
// left out (or its default kept) and reported in Configuration.Errors.
//
// It performs no I/O and keeps no state. It must never import client-go
// (informers, clients, recorders), net/http, or any data plane package
// directly; it depends only on k8s.io/api types, balancer (wire types) and
// controlplane/model.
package builder
