package balancer

import (
	"strings"
	"testing"
)

// TestRouteHeaderPattern: a canary by header pattern is routed by the
// shim itself (issue 16): Route carries the pattern as written, the ones
// RE2 refuses too (the shim reads them with PCRE, as ingress-nginx), and
// refuses a backend whose pattern the frame cannot carry.
func TestRouteHeaderPattern(t *testing.T) {
	long := "^(" + strings.Repeat("a", 1<<16) + ")$"
	for _, tc := range []struct {
		name, pattern string
		routed        bool
	}{
		{"RE2 reads it", "^(on|yes)$", true},
		{"RE2 refuses it", "^(?!no)", true},
		{"longer than a frame carries", long, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRegistry(Config{})
			_ = r.Sync([]Backend{
				{Name: "main", Endpoints: eps("10.0.0.1:80"), AlternativeBackends: []string{"canary"}},
				{Name: "canary", NoServer: true, Endpoints: eps("10.0.0.2:80"),
					TrafficShapingPolicy: TrafficShapingPolicy{Header: "X-Canary", HeaderPattern: tc.pattern}},
			})
			rt, ok := r.Route("main")
			if ok != tc.routed {
				t.Fatalf("Route ok = %v; want %v", ok, tc.routed)
			}
			if !ok {
				return
			}
			if rt.Header != HeaderPattern || rt.HeaderValueText != tc.pattern || rt.HeaderVar != "http_x_canary" || rt.Alternative != "canary" {
				t.Errorf("Route = header %d %q %q to %q; want header %d %q http_x_canary to canary",
					rt.Header, rt.HeaderVar, rt.HeaderValueText, rt.Alternative, HeaderPattern, tc.pattern)
			}
		})
	}
}
