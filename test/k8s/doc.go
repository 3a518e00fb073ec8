// Package k8s runs a real etcd and kube-apiserver for Switchyard's
// end-to-end tests, with generated certificates and three identities:
//
//   - admin, in system:masters (AdminConfig);
//   - the controller, user "switchyard-controller", bound by the harness to
//     exactly the ClusterRole(s) and Role(s) in deploy/base/rbac.yaml
//     (ControllerConfig), so the controller's RBAC is exercised for real;
//   - nobody, authenticated but bound to nothing (UnprivilegedConfig).
//
// The binaries (kube-apiserver v1.33.13, etcd v3.5.21) are built once by
// test/setup.sh (test/tools/build-k8s.sh) into a cache outside the checkout;
// BinDir finds them through $SWITCHYARD_K8S_BIN or the same default path.
// Without them a test fails under CI=true and skips loudly elsewhere.
//
// One cluster per test binary is the fast way (3-4 s to start, ~300 MB):
//
//	func TestMain(m *testing.M) { k8s.Main(m) }   // netns + one cluster
//	func TestX(t *testing.T) {
//		c := k8s.Shared(t)
//		ns := c.Namespace(t)                      // a fresh namespace per test
//		...
//	}
//
// Main runs the binary inside harness's network namespace (TEST-NET-1
// addresses on lo, so EndpointSlices can point at local servers) and stops
// the cluster after the tests. Start(t) runs a private cluster for one test
// instead and stops it at t.Cleanup. Every process runs in its own process
// group and is killed when its test (or the binary) ends, also on failure or
// timeout; all ports come from the kernel. There is no kube-controller-manager:
// deleted namespaces stay Terminating, so tests use fresh namespaces instead
// of reusing names, and create selector-less Services with their own
// EndpointSlices.
//
// Stage creates N Ingresses with their Services and EndpointSlices at scale
// (bounded parallelism, raised client rate limit, retries with backoff, a
// final count check). BenchmarkStage and BenchmarkEndpointChangeToFirstRequest
// (issue 22; docs/benchmarks/controlplane.md) use it; they are benchmarks
// so that `go test ./...` never runs them, and they fail rather than skip
// when a prerequisite is missing.
//
// Flows in: nothing but the binaries and deploy/base/rbac.yaml. Flows out:
// *rest.Config values. Imports client-go and test/harness; production
// packages must never import it.
package k8s
