// Package balancer is Switchyard's in-process load balancer: ingress-nginx's
// Lua algorithms (round_robin, ewma, chash, chashsubset, sticky_balanced,
// sticky_persistent) and canary routing, in Go, plus least_request and
// peak_ewma.
//
// In: the backends payload ingress-nginx POSTs to /configuration/backends
// (Backend), and per request a Request view and per-attempt state. Out: a
// peer ("ip:port"), the backend actually used, an optional Set-Cookie.
//
// It is a leaf: it imports nothing from k8s.io and nothing else from this
// module (enforced by depguard in .golangci.yml).
package balancer
