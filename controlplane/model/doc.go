// Package model is the plain-data Configuration the control plane builds and
// every sink consumes: servers, locations, backends (typed; ingress-nginx's
// wire form of a backend exists only at the edges that speak it, in package
// balancer), TCP/UDP services, certificates and the errors found while
// building.
//
// In: nothing; it is built by package controlplane. Out: read by nginxcompat,
// proxy, tcpproxy, balancer and cmd. It imports nothing from k8s.io
// (enforced by depguard in .golangci.yml): data-plane packages and the
// balancer, a leaf, depend on it.
package model
