package main

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// TestApplyGoIdleSpin: --go-idle-spin reaches the runtime's setter with
// the share, when the binary's runtime has one.
func TestApplyGoIdleSpin(t *testing.T) {
	saved := setRuntimeIdleSpin
	t.Cleanup(func() { setRuntimeIdleSpin = saved })
	var gotWindow, gotShare int64 = -1, -1
	setRuntimeIdleSpin = func(window, share int64) { gotWindow, gotShare = window, share }
	applyGoIdleSpin(50 * time.Microsecond)
	if gotWindow != 50_000 || gotShare != idleSpinShare {
		t.Errorf("setter got window %d ns, share %d %%; want 50000, %d", gotWindow, gotShare, idleSpinShare)
	}
	applyGoIdleSpin(0)
	if gotWindow != 0 {
		t.Errorf("--go-idle-spin=0 set window %d; want 0", gotWindow)
	}
	setRuntimeIdleSpin = nil
	applyGoIdleSpin(time.Millisecond) // logs that it has no effect; must not panic
}

// TestIdleSpinMetrics: the runtime's idle spin counters are exported as
// switchyard_go_idle_spin* when the controller has them.
func TestIdleSpinMetrics(t *testing.T) {
	stats := func() (int64, int64, int64) { return 7, 5, 1_500_000_000 }
	m := newControllerMetrics(controllerMetricsConfig{Balancer: balancer.NewRegistry(balancer.Config{}), ControllerClass: "k8s.io/ingress-nginx", IdleSpinStats: stats})
	body := scrapeBody(t, m)
	for name, value := range map[string]string{
		"switchyard_go_idle_spins_total":        "7",
		"switchyard_go_idle_spins_found_total":  "5",
		"switchyard_go_idle_spin_seconds_total": "1.5",
	} {
		if !hasSample(body, name, value) {
			t.Errorf("metrics lack %s %s:\n%s", name, value, grepLines(body, "switchyard_go"))
		}
	}
	m = newControllerMetrics(controllerMetricsConfig{Balancer: balancer.NewRegistry(balancer.Config{}), ControllerClass: "k8s.io/ingress-nginx"})
	if body := scrapeBody(t, m); strings.Contains(body, "switchyard_go_idle_spin") {
		t.Error("metrics without the runtime's counters export switchyard_go_idle_spin*")
	}
}

func scrapeBody(t *testing.T, m *controllerMetrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d", rec.Code)
	}
	return rec.Body.String()
}

// hasSample reports whether body has a sample of name (with any labels)
// equal to value.
func hasSample(body, name, value string) bool {
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, name+"{") && strings.HasSuffix(l, "} "+value) {
			return true
		}
	}
	return false
}
