// Package builder is the pure translation from Kubernetes objects to a
// model.Configuration: which Ingresses are ours (ingress class resolution),
// servers and locations from their rules, backends named and shaped exactly as
// ingress-nginx POSTs them to /configuration/backends (endpoints from
// EndpointSlices, upstream settings from the oldest Ingress, canaries merged as
// alternative backends), TLS certificates from Secrets, and every problem
// found, as model.ObjectError values.
//
// In: an Input snapshot of the informer caches and Options. Out: a
// *model.Configuration. It performs no I/O and keeps no state, so the same
// Input always builds the same Configuration.
package builder
