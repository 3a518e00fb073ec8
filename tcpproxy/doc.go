// Package tcpproxy is the L4 data plane: SSL passthrough routed by SNI, TCP
// and UDP services, and the PROXY protocol, with peers chosen by package
// balancer.
//
// In: routes derived from model.Configuration, client connections. Out: bytes
// copied to and from upstreams, metrics. Never imports client-go.
package tcpproxy
