package k8s

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestStage stages 40 Ingresses (120 objects) on the shared API server with
// 8 workers and checks the count Stage reports and what the API server
// holds; a second Stage into the same namespace must fail its creates
// (AlreadyExists on a first attempt is not retried) rather than report
// success.
func TestStage(t *testing.T) {
	c := Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Stage(ctx, c.AdminConfig(), StageOptions{Namespace: ns, Ingresses: 40, Workers: 8, EndpointIP: harness.TestIP(40)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Objects != 120 || res.Failed != 0 {
		t.Errorf("Stage: %d objects, %d failed; want 120, 0", res.Objects, res.Failed)
	}
	admin, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	ing, err := admin.NetworkingV1().Ingresses(ns).Get(ctx, StageName(39), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ing.Spec.Rules[0].Host; got != StageHost(39) {
		t.Errorf("host of %s: %q; want %q", StageName(39), got, StageHost(39))
	}
	if _, err := Stage(ctx, c.AdminConfig(), StageOptions{Namespace: ns, Ingresses: 2}); err == nil {
		t.Error("Stage over existing objects: no error; want AlreadyExists failures")
	}
}

// stageIngresses is $SWITCHYARD_STAGE_INGRESSES, or def.
func stageIngresses(b *testing.B, def int) int {
	v := os.Getenv("SWITCHYARD_STAGE_INGRESSES")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("SWITCHYARD_STAGE_INGRESSES=%q: want a positive integer", v)
	}
	return n
}

// requireBenchPrereqs fails (never skips) a benchmark that was asked for
// but cannot run: the binaries, the network namespace, and -benchtime 1x.
func requireBenchPrereqs(b *testing.B) {
	b.Helper()
	if err := checkBinaries(); err != nil {
		b.Fatal(err)
	}
	if !harness.InNetNS() {
		b.Fatal("not inside the test network namespace (unshare --net failed; see the harness message above)")
	}
	if b.N != 1 {
		b.Fatalf("b.N = %d: run with -benchtime 1x (each run stages a cluster)", b.N)
	}
}

// BenchmarkStage stages $SWITCHYARD_STAGE_INGRESSES Ingresses (default
// 10000, i.e. 30,000 objects) on a private API server and reports the time
// and the failures, which must be 0:
//
//	go test -count=1 -timeout 60m -run '^$' -bench Stage -benchtime 1x ./test/k8s/
func BenchmarkStage(b *testing.B) {
	requireBenchPrereqs(b)
	n := stageIngresses(b, 10000)
	c := Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	b.ResetTimer()
	res, err := Stage(ctx, c.AdminConfig(), StageOptions{Namespace: "stage", Ingresses: n, EndpointIP: harness.TestIP(40)})
	b.StopTimer()
	b.Logf("staged %d Ingresses: %d objects created, %d failed, %d retries in %v (%.0f objects/s); count check %v",
		n, res.Objects, res.Failed, res.Retries, res.Elapsed.Round(time.Millisecond),
		float64(res.Objects)/res.Elapsed.Seconds(), res.CountElapsed.Round(time.Millisecond))
	b.ReportMetric(res.Elapsed.Seconds(), "stage-s")
	b.ReportMetric(float64(res.Failed), "failed")
	b.ReportMetric(float64(res.Retries), "retries")
	if err != nil {
		b.Fatal(err)
	}
}
