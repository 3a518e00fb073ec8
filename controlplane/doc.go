// Package controlplane watches Kubernetes (Ingress, IngressClass,
// EndpointSlice, Service, Secret, ConfigMap) through client-go informers,
// coalesces events into one rate-limited sync loop, builds a
// model.Configuration with a pure builder, and hands it to the sinks.
//
// In: a Kubernetes API (or a directory of manifests). Out: model.Configuration
// values passed to Sink implementations, Events and Ingress status. Only this
// package tree and cmd import client-go.
package controlplane
