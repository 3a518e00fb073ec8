// Package harness is the process-level plumbing of Switchyard's end-to-end
// tests: a private network namespace for a whole test binary, child
// processes that never outlive their test, free ports, and deadline-bound
// waits on readiness signals.
//
// Network namespace. A package that needs TEST-NET-1 addresses (valid
// EndpointSlice addresses that still reach local servers) calls Main from its
// TestMain:
//
//	func TestMain(m *testing.M) { harness.Main(m) }
//
// Main re-executes the test binary once under `unshare --net --pid --fork
// --mount-proc` (detected through $SWITCHYARD_NETNS), brings lo up and puts
// 192.0.2.1-192.0.2.40/32 on it, then runs the tests. Those addresses exist
// only inside the namespace. Because the test binary is PID 1 of its own PID
// namespace, the kernel kills every process it started when it exits, even
// after a panic or a `go test -timeout`. When the namespace cannot be made,
// Main fails the binary under CI=true, and elsewhere runs the tests outside
// it after a loud message (tests needing it call RequireNetNS).
//
// Processes. StartProcess runs a command in its own process group with
// stdout and stderr captured to a file in t.TempDir(), and stops the group
// (SIGTERM, then SIGKILL after a grace period) at t.Cleanup, so also when the
// test fails or times out within its own deadline. Launch is the same without
// a *testing.T, for TestMain. Main reports processes still running after the
// tests (a goleak for processes).
//
// Flows in: commands, IPs. Flows out: *Process, ports, errors.
// Imports only the standard library; it must never import the project's
// production packages or client-go (test/k8s builds on it).
package harness
