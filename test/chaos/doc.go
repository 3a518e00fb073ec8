// Package chaos is issue 20 item 9: it kills Switchyard's processes with
// SIGKILL, one at a time, under a steady bounded load on loopback, and counts
// the requests that failed because of each fault.
//
// The set-ups, each a subtest of TestChaos: `switchyard controller
// --data-plane=go`, `switchyard controller --data-plane=nginx` (Debian's
// nginx and the lua/ shim), `switchyard balancer` as the sidecar of an nginx
// running the lua/ shim, and a TCP service and SSL passthrough (Go's
// tcpproxy on either plane). The faults are kill -9 of a backend (a child
// process), of the controller or the sidecar (restarted at once, as a
// kubelet would), of the busiest nginx worker and of the nginx master. The
// load is a few keep-alive HTTP/1.1 clients at a fixed total rate that never
// retry, so every failure the data plane lets through is counted; each
// failure is charged to the fault whose window (from the kill until the
// load has been clean for a while) it falls in. TestChaos logs a table of the figures and
// writes it to $SWITCHYARD_CHAOS_REPORT when set (docs/benchmarks.md,
// "Chaos: failed requests per fault").
//
// Flows in: the switchyard binary built from ./cmd/switchyard, nginx with
// the Lua module, lua/. Flows out: test results and the report. Test-only;
// nothing imports it. It imports test/harness and the standard library,
// never the production packages: it sees Switchyard as a user does.
package chaos
