// Package crossplane is the cross-plane behaviour suite: one table of
// scenarios (manifests, then requests with the answer each must get: status,
// response fields, which backend was reached and what it received), run
// through the real `switchyard` binary on --data-plane=go and on
// --data-plane=nginx, every row asserting ingress-nginx's answer on each
// plane, then the two planes' answers compared with each other; and on the
// Go plane with two worker processes (--go-workers=2), whose answers must
// equal the single process's.
//
// TestMain runs the binary's tests inside test/harness's network namespace
// (harness.Main: processes die with it, and one left running fails the
// binary) and builds `switchyard` there once. One controller per plane
// serves every row from one --manifests directory, each row on its own host
// names; the suite waits until each row's first request leaves the
// catch-all's 404 (nginx reloads) before asking. Backends are echo servers
// on distinct loopback addresses (a 127.0.0.2, b .3, c .4) answering 200
// with a JSON account of the request they got (method, URI, Host, fields,
// body length); "down" (127.0.0.20) answers 503 the same way.
//
// Adding a row: in a file rows_<topic>_test.go of your own,
//
//	var _ = register(Row{Name: "...", Manifests: `...`, Requests: []Request{...}})
//
// Manifests are text/template: {{backend "a"}} and {{port "a"}} give echo
// backend a's address and port, {{service "a" "svc-name" "ns"}} writes the
// Service and EndpointSlice pointing at it, {{tlsSecret "name" "host"}} a
// self-signed kubernetes.io/tls Secret, {{caSecret "name"}} the suite's
// client CA, {{authURL}} an authentication service speaking oauth2-proxy's
// contract (test/harness.AuthServer, users "alice"; "mallory" forbidden),
// {{mirror}} the host:port of a mirror target recording what it gets
// (Want.Mirror, rows_mirror_test.go);
// the ingress() helper writes an Ingress with annotations. Request.From
// picks the client's loopback source address, HTTPS and ClientCert a TLS
// request with SNI = Host.
//
// A row that one plane cannot serve lists the other in Planes, with the
// reason in PlaneNote. A row one plane serves differently from
// ingress-nginx keeps ingress-nginx's answer and names that plane in
// KnownDrift with a one-line reason: its mismatches are logged, not
// failed, until the plane is fixed. README.md lists both.
//
// Flows in: the repository's binary, Debian's nginx, rows. Flows out: test
// results. Imports test/harness only, never the production packages. Missing
// nginx, Lua or root fails the suite (test/setup.sh installs what it needs);
// it never skips.
package crossplane
