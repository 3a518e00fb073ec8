// Package proxy is the pure-Go HTTP data plane: fasthttp for HTTP/1.1 on
// both ports, proxy/h2srv for HTTP/2 on the TLS port (ALPN h2) and h2c
// (golang.org/x/net/http2's server with Config.XNetHTTP2), and
// golang.org/x/net/http2's client for h2c, gRPC and gRPCS upstreams. It routes by the same host and
// path rules nginx gets, and asks package balancer for a peer on every
// attempt. Both front ends share one request handling (front.go): routing,
// location checks, forwarded headers, picks and retries, custom-http-errors,
// metrics and the access log.
//
// In: model.Configuration snapshots, client connections. Out: proxied
// requests, copies of them to mirror targets (mirror.go), metrics, access
// logs. Never imports client-go.
package proxy
