// Package controlplane watches Kubernetes (Ingress, IngressClass,
// EndpointSlice, Service, TLS Secrets, ConfigMaps) through shared client-go
// informers (managedFields stripped), coalesces their events into one sync
// loop (a holdoff within bursts, bounded by a max holdoff), builds a
// model.Configuration with the pure controlplane/builder, classifies the
// change against the previous one (Change: dynamic-only or needs a reload,
// computed by hashing the model with and without its dynamic parts), and
// hands it to the Sinks in order. When EndpointSlices alone changed since
// the last sync, it skips the build and the hashing: the last build's
// builder.EndpointIndex refreshes the endpoints of the backends those
// slices feed (Change.BackendsOnly tells the sinks).
//
// Alongside the loop: each model.ObjectError becomes one Warning Event on its
// object (once, not once per sync); with --publish-service or
// --publish-status-address set, a Lease-based leader election runs and the
// leader alone writes Ingress status.loadBalancer, after a build, only where
// it differs.
//
// In: a kubernetes.Interface (a real API server, or a fake clientset loaded
// from manifests by controlplane/manifests). Out: model.Configuration values
// passed to Sink implementations, Events, Ingress status and a Lease. Only
// this package tree and cmd import client-go; this package must never import
// the data planes (proxy, tcpproxy, nginxcompat) or balancer internals.
package controlplane
