// Package balancer is Switchyard's in-process load balancer: ingress-nginx's
// Lua algorithms (round_robin, ewma, chash, chashsubset, sticky_balanced,
// sticky_persistent) and canary routing, in Go, plus least_request and
// peak_ewma.
//
// In: the controller's typed backends (model.Backend, through Apply), or the
// payload ingress-nginx POSTs to /configuration/backends in its wire form
// (Backend, through Sync, which converts and checks each one), and per
// request a Request view and per-attempt state. Out: a peer ("ip:port"), the
// backend actually used, an optional Set-Cookie.
//
// It is a leaf: from this module it imports only the typed snapshot
// (controlplane/model), and nothing from k8s.io (enforced by depguard in
// .golangci.yml).
package balancer
