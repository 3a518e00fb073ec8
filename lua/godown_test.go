package lua_test

import (
	"encoding/json"
	"testing"
)

// TestShimCanaryGoDown: a canary by weight keeps its share while the Go side
// is down, in a worker none of whose requests went to it before (issue 16:
// with the sidecar down the shim applies the last tables it has). Before,
// such a worker knew nothing of the canary and kept every request on the
// primary (0 of 60 in test/bench/shimreal; ingress-nginx 13-17). A
// backend no worker ever asked about gets 503 while Go is down.
func TestShimCanaryGoDown(t *testing.T) {
	main, canary := startBackend(t, "127.0.0.2"), startBackend(t, "127.0.0.3")
	e := newEnv(t, 1)
	body, err := json.Marshal([]map[string]any{
		wire("default-dmain-80", addrs(main), map[string]any{"alternativeBackends": []string{"default-dcanary-80"}}),
		wire("default-dcanary-80", addrs(canary), map[string]any{"noServer": true, "trafficShapingPolicy": map[string]any{
			"weight": 30, "weightTotal": 0, "header": "", "headerValue": "", "headerPattern": "", "cookie": "canary"}}),
		wire("default-dother-80", addrs(main), nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	if code, b := e.post(t, "/configuration/backends", body); code != 201 {
		t.Fatalf("POST /configuration/backends = %d %q; want 201", code, b)
	}
	// Only requests the cookie keeps on the primary while Go is up.
	for range 20 {
		if code, who, _ := e.get(t, "/pattern/?b=default-dmain-80", "Cookie", "canary=never"); code != 200 || who != main.addr {
			t.Fatalf("canary=never: %d from %q; want %s", code, who, main.addr)
		}
	}
	_ = e.goProc.Stop()
	const n = 300
	toCanary := 0
	for range n {
		code, who, resp := e.get(t, "/pattern/?b=default-dmain-80")
		switch {
		case code == 200 && who == canary.addr && resp.Header.Get("X-Alternative") == "default-dcanary-80":
			toCanary++
		case code == 200 && who == main.addr && resp.Header.Get("X-Alternative") == "":
		default:
			t.Fatalf("Go down: %d from %q, X-Alternative %q", code, who, resp.Header.Get("X-Alternative"))
		}
	}
	t.Logf("Go down: %d of %d requests to the weight-30 canary", toCanary, n)
	// Binomial(300, 0.3): mean 90, sd 7.9; 50-130 is beyond 5 sd.
	if toCanary < 50 || toCanary > 130 {
		t.Errorf("Go down: %d of %d requests to the weight-30 canary; want about 90", toCanary, n)
	}
	// A backend no worker asked Go about before it went down: nothing is
	// known of it (its peers came only from Go), so 503, as for an
	// unknown backend (docs/compatibility.md).
	if code, _, _ := e.get(t, "/pattern/?b=default-dother-80"); code != 503 {
		t.Errorf("Go down, a backend never asked about: %d; want 503", code)
	}
}
