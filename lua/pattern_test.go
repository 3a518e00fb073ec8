package lua_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// headerPatterns are canary-by-header-pattern values, each read by nginx's
// PCRE in the shim and by RE2 in Go's Registry. pcre, when set, is what
// ingress-nginx's ngx.re.match answers where Go's Registry cannot say
// (a pattern RE2 refuses); otherwise Go's answer is the expected one.
var headerPatterns = []struct {
	pattern string
	pcre    func(v string) bool
}{
	{pattern: "^(on|yes)$"},
	{pattern: "^y"},
	{pattern: "beta"},
	{pattern: "(?i)^canary$"},
	{pattern: "(?i)BETA|gamma"},
	{pattern: `^v[0-9]+\.[0-9]+$`},
	{pattern: `\d{3}`},
	{pattern: `^[a-f0-9]{4,}$`},
	{pattern: `^\w+-\w+$`},
	{pattern: "a.c"},
	{pattern: "x*"},
	{pattern: "^(?:a|b)+c?$"},
	{pattern: "[[:upper:]]"},
	{pattern: `\bno\b`},
	{pattern: "colou?r"},
	{pattern: "^[^,]+,[^,]+$"},
	{pattern: "^.{5,}$"},
	{pattern: `\Aab`},
	{pattern: `yes\z`},
	{pattern: `\s`},
	// RE2 reads this on UTF-8 runes, PCRE (as nginx runs it, without
	// the u option) on bytes: a one-rune value of two bytes matches in Go
	// only, and ingress-nginx keeps it on the primary.
	{pattern: "^.$", pcre: func(v string) bool { return len(v) == 1 }},
	// RE2 refuses these; ingress-nginx reads them with PCRE.
	{pattern: "^(?!no)", pcre: func(v string) bool { return !strings.HasPrefix(v, "no") }},
	{pattern: `^(a)\1`, pcre: func(v string) bool { return strings.HasPrefix(v, "aa") }},
	// Neither compiles it: ingress-nginx logs the error and keeps the
	// primary.
	{pattern: "(a", pcre: func(string) bool { return false }},
}

// headerValues are the X-Canary values sent: words the patterns name, and
// random strings over their alphabet (no leading or trailing blank, which
// nginx would strip).
func headerValues() []string {
	// First, so that each backend's first request (asked of Go while the
	// worker has no lease yet) carries one: a value PCRE reads otherwise
	// than RE2.
	vs := []string{"\u00e9", "na\u00efve", "on", "yes", "off", "no", "nope", "y", "beta", "xbetax", "BETA", "Gamma", "canary", "CANARY",
		"v1.2", "v12.0", "v1.2.3", "123", "12a3", "cafe", "CAFE", "abc", "a-b", "a-b-c", "aab", "ab", "bac", "color",
		"colour", "a,b", "a,b,c", "hello", "hi", "no way", "snow", "a1", "yes no", "not yes", "xyes"}
	rng := rand.New(rand.NewPCG(16, 16))
	const alphabet = "abcoenysABCxv0123.-, "
	for range 80 {
		n := 1 + rng.IntN(8)
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if v := strings.TrimSpace(string(b)); v != "" {
			vs = append(vs, v)
		}
	}
	return vs
}

// TestShimHeaderPattern: a canary by header pattern is decided in the nginx
// worker, with no round trip to Go (issue 16), and as ingress-nginx decides
// it: each pattern, matched with nginx's PCRE, routes every generated header
// value as Go's Registry routes it (RE2), and as ingress-nginx's PCRE does for
// the patterns RE2 refuses; the same with the Go side stopped.
func TestShimHeaderPattern(t *testing.T) {
	main, canary := startBackend(t, "127.0.0.2"), startBackend(t, "127.0.0.3")
	e := newEnv(t, 1)
	var list []map[string]any
	for i, p := range headerPatterns {
		m, c := fmt.Sprintf("default-pat%d-80", i), fmt.Sprintf("default-pat%d-canary-80", i)
		list = append(list,
			wire(m, addrs(main), map[string]any{"alternativeBackends": []string{c}}),
			wire(c, addrs(canary), map[string]any{"noServer": true, "trafficShapingPolicy": map[string]any{
				"weight": 0, "weightTotal": 0, "header": "X-Canary", "headerValue": "", "headerPattern": p.pattern, "cookie": ""}}))
	}
	body, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	if code, b := e.post(t, "/configuration/backends", body); code != 201 {
		t.Fatalf("POST /configuration/backends = %d %q; want 201", code, b)
	}
	bs, err := balancer.DecodeBackends(body)
	if err != nil {
		t.Fatal(err)
	}
	reg := balancer.NewRegistry(balancer.Config{})
	_ = reg.Sync(bs) // reports the patterns RE2 refuses; the others apply
	values := headerValues()

	// want is whether a request with X-Canary v to pattern i goes to the
	// canary.
	want := func(t *testing.T, i int, v string) bool {
		t.Helper()
		if f := headerPatterns[i].pcre; f != nil {
			return f(v)
		}
		_, alt, err := reg.RouteFor(fmt.Sprintf("default-pat%d-80", i), balancer.VarsFunc(func(n string) ([]byte, bool) {
			if n == "http_x_canary" {
				return []byte(v), true
			}
			return nil, false
		}))
		if err != nil {
			t.Fatal(err)
		}
		return alt
	}
	check := func(t *testing.T, vs []string) (int, int) {
		t.Helper()
		toCanary, n := 0, 0
		for i := range headerPatterns {
			m, c := fmt.Sprintf("default-pat%d-80", i), fmt.Sprintf("default-pat%d-canary-80", i)
			for _, v := range vs {
				code, who, resp := e.get(t, "/pattern/?b="+m, "X-Canary", v)
				w := want(t, i, v)
				wantWho, wantAlt := main.addr, ""
				if w {
					wantWho, wantAlt = canary.addr, c
					toCanary++
				}
				if code != 200 || who != wantWho || resp.Header.Get("X-Alternative") != wantAlt {
					t.Fatalf("pattern %q, X-Canary %q: %d from %q, X-Alternative %q; want %s (canary: %v)",
						headerPatterns[i].pattern, v, code, who, resp.Header.Get("X-Alternative"), wantWho, w)
				}
				n++
			}
		}
		return toCanary, n
	}

	t.Run("Go up: decided in the worker, as Go and ingress-nginx decide", func(t *testing.T) {
		picks, routes := e.frames(t, "pick"), e.frames(t, "route")
		toCanary, n := check(t, values)
		picks, routes = e.frames(t, "pick")-picks, e.frames(t, "route")-routes
		t.Logf("%d requests, %d to the canary, over %d patterns: %v asked Go for a pick, %v for a route", n, toCanary, len(headerPatterns), picks, routes)
		if toCanary < n/10 || toCanary > n*9/10 {
			t.Errorf("%d of %d requests went to the canary; the inputs should exercise both sides", toCanary, n)
		}
		// A routed round-robin backend's first requests ask Go until a
		// lease of its rotation served one (pick.lua own_pick).
		if routes != 0 || picks > float64(4*len(headerPatterns)) {
			t.Errorf("%v route and %v pick frames for %d requests; want no round trip per request", routes, picks, n)
		}
	})

	t.Run("Go down: the same decisions", func(t *testing.T) {
		_ = e.goProc.Stop()
		check(t, values[:40])
	})
}
