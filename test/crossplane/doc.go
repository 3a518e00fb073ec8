// Package crossplane is the cross-plane behaviour suite: one table of
// scenarios (manifests, then requests with the answer each must get: status,
// response fields, which backend was reached and what it received), run
// through the real `switchyard` binary on --data-plane=go and on
// --data-plane=nginx, every row asserting its expected answer on each plane,
// and the two planes' answers compared with each other.
//
// The binary is built once per test run (TestMain); one controller per plane
// serves every row from one --manifests directory, each row on its own host
// names. Backends are echo servers on distinct loopback addresses
// (127.0.0.2, 127.0.0.3, ...) that answer 200 with a JSON account of the
// request they got.
//
// Adding a row: in a rows_<topic>.go file,
//
//	var _ = register(Row{Name: "...", Manifests: `...`, Requests: []Request{...}})
//
// Manifests are text/template: {{backend "a"}} and {{port "a"}} give echo
// backend a's address and port, {{service "a" "svc-name" "ns"}} writes the
// Service and EndpointSlice pointing at it, {{authURL}} is an authentication
// service speaking oauth2-proxy's contract (test/harness.AuthServer, users
// "alice"; "mallory" forbidden). A row that one plane cannot serve lists the
// other in Planes, with the reason in PlaneNote; README.md lists them.
//
// Flows in: the repository's binary, Debian's nginx, rows. Flows out: test
// results. Missing nginx, Lua or root fails the suite (test/setup.sh
// installs what it needs); it never skips.
package crossplane
