//go:build !race

package balancer

import (
	"testing"
	"time"
)

// TestPickAllocs: every pick allocates nothing, except one that must emit a new
// sticky cookie.
func TestPickAllocs(t *testing.T) {
	addrs := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"}
	aff := func(mode string) SessionAffinityConfig {
		return SessionAffinityConfig{Name: "cookie", Mode: mode, CookieSessionAffinity: CookieSessionAffinity{Name: "route"}}
	}
	tests := []struct {
		name string
		b    Backend
		req  Request
	}{
		{"round_robin", Backend{}, vars{}},
		{"ewma", Backend{LoadBalance: "ewma"}, vars{}},
		{"peak_ewma", Backend{LoadBalance: "peak_ewma"}, vars{}},
		{"least_request", Backend{LoadBalance: "least_request"}, vars{}},
		{"chash", Backend{UpstreamHashBy: UpstreamHashByConfig{HashBy: strp("$request_uri")}}, vars{"request_uri": "/a"}},
		{"chash composite key", Backend{UpstreamHashBy: UpstreamHashByConfig{HashBy: strp("${remote_addr}-$http_x_user")}}, vars{"remote_addr": "1.2.3.4", "http_x_user": "u"}},
		{"chashsubset", Backend{UpstreamHashBy: UpstreamHashByConfig{HashBy: strp("$request_uri"), HashBySubset: true, HashBySubsetSize: 2}}, vars{"request_uri": "/a"}},
		{"sticky_balanced with cookie", Backend{SessionAffinity: aff("")}, vars{"http_cookie": "route=abc|def"}},
		{"sticky_persistent with cookie", Backend{SessionAffinity: aff("persistent")}, vars{"http_cookie": "route=" + md5hex("a10.0.0.2:80")}},
		{"canary header", Backend{AlternativeBackends: []string{"c"}}, vars{"http_x_canary": "always"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRegistry(Config{Now: func() time.Time { return time.Unix(1700000000, 0) }})
			b := tt.b
			b.Name = "a"
			b.Endpoints = eps(addrs...)
			mustSync(t, r, b, Backend{Name: "c", Endpoints: eps("10.0.0.9:80"), TrafficShapingPolicy: TrafficShapingPolicy{Header: "X-Canary"}})
			var a Attempt
			req := toB(tt.req.(vars))
			allocs := testing.AllocsPerRun(1000, func() {
				a.Reset()
				p, err := r.Pick("a", req, &a)
				if err != nil {
					t.Fatal(err)
				}
				r.Done(p, DoneInfo{ResponseTime: time.Millisecond})
			})
			if allocs != 0 {
				t.Errorf("%v allocs per pick; want 0", allocs)
			}
		})
	}
	// An Attempt declared per request stays on the caller's stack: Pick does
	// not let it escape (single-variable hash keys need no key buffer).
	for _, tt := range tests[:9] {
		if tt.name == "chash composite key" {
			continue
		}
		t.Run("fresh Attempt "+tt.name, func(t *testing.T) {
			r := NewRegistry(Config{Now: func() time.Time { return time.Unix(1700000000, 0) }})
			b := tt.b
			b.Name = "a"
			b.Endpoints = eps(addrs...)
			mustSync(t, r, b)
			req := toB(tt.req.(vars))
			allocs := testing.AllocsPerRun(1000, func() {
				var a Attempt
				p, err := r.Pick("a", req, &a)
				if err != nil {
					t.Fatal(err)
				}
				r.Done(p, DoneInfo{ResponseTime: time.Millisecond})
			})
			if allocs != 0 {
				t.Errorf("%v allocs per pick with a fresh Attempt; want 0", allocs)
			}
		})
	}
	// A pick that issues a new sticky cookie allocates the Set-Cookie string
	// and nothing else.
	for _, mode := range []string{"balanced", "persistent"} {
		t.Run("new sticky cookie "+mode, func(t *testing.T) {
			r := NewRegistry(Config{Now: func() time.Time { return time.Unix(1700000000, 0) }})
			mustSync(t, r, Backend{Name: "a", Endpoints: eps(addrs...), SessionAffinity: SessionAffinityConfig{Name: "cookie", Mode: mode,
				CookieSessionAffinity: CookieSessionAffinity{Name: "route", Expires: "3600", MaxAge: "3600", SameSite: "Lax", Locations: map[string][]string{"h": {"/"}}}}})
			req := toB(vars{"host": "h", "server_name": "h", "location_path": "/", "https": "on"})
			var a Attempt
			allocs := testing.AllocsPerRun(1000, func() {
				a.Reset()
				p, err := r.Pick("a", req, &a)
				if err != nil || p.SetCookie == "" {
					t.Fatalf("pick %+v, %v; want a new cookie", p, err)
				}
				r.Done(p, DoneInfo{})
			})
			if allocs != 1 {
				t.Errorf("%v allocs per pick with a new cookie; want 1 (the Set-Cookie string)", allocs)
			}
		})
	}
}
