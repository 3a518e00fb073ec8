// Package proxy is the pure-Go HTTP data plane: fasthttp for HTTP/1.1,
// golang.org/x/net/http2 for HTTP/2, h2c and gRPC. It routes by the same
// host and path rules nginx gets, and asks package balancer for a peer on
// every attempt.
//
// In: model.Configuration snapshots, client connections. Out: proxied
// requests, metrics, access logs. Never imports client-go.
package proxy
