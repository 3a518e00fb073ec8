// Package model is the plain-data Configuration the control plane builds and
// every sink consumes: servers, locations, backends (in ingress-nginx's wire
// form, from package balancer), TCP/UDP services, certificates and the errors
// found while building.
//
// In: nothing; it is built by package controlplane. Out: read by nginxcompat,
// proxy, tcpproxy and cmd. It imports only package balancer (for the backend
// wire types) and never client-go: data-plane packages depend on it.
package model
