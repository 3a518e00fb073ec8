package balancer

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Spec §8.1: resty.chash vectors from the real Lua/C code.
func TestCHashVectors(t *testing.T) {
	r := NewRegistry(Config{Rand: seqRand(1)})
	mustSync(t, r, Backend{Name: "b", Endpoints: eps("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"),
		UpstreamHashBy: UpstreamHashByConfig{HashBy: strp("$request_uri")}})
	tests := []struct{ key, want string }{
		{"/foo", "10.0.0.3:8080"},
		{"/bar", "10.0.0.2:8080"},
		{"/", "10.0.0.1:8080"},
		{"", "10.0.0.1:8080"},
	}
	for _, tt := range tests {
		var a Attempt
		p, err := r.Pick("b", vars{"request_uri": tt.key}, &a)
		if err != nil || p.Peer != tt.want {
			t.Errorf("key %q: got %q, %v; want %q", tt.key, p.Peer, err, tt.want)
		}
		// Retries hit the same peer (spec §5).
		a.LastFailure = FailureFailed
		if p2, _ := r.Pick("b", vars{"request_uri": tt.key}, &a); p2.Peer != tt.want {
			t.Errorf("key %q retry: got %q; want the same %q", tt.key, p2.Peer, tt.want)
		}
	}
}

// Spec §8.1 ring internals for the single node 10.0.0.1:8080.
func TestRingInternals(t *testing.T) {
	rg := newRing([]string{"10.0.0.1:8080"})
	if len(rg.hashes) != 160 {
		t.Fatalf("points = %d; want 160", len(rg.hashes))
	}
	want := []uint32{1390174, 28035454, 47384165}
	for i, w := range want {
		if rg.hashes[i] != w {
			t.Errorf("smallest point %d = %d; want %d", i, rg.hashes[i], w)
		}
	}
	// Bounds as in ringhash tests: a key above every point wraps to index 0.
	if got := rg.find(rg.hashes[159] + 1); got != 0 {
		t.Errorf("wrap: got owner %d", got)
	}
}

// Spec §8.3 backend_key vectors.
func TestBackendKeyVectors(t *testing.T) {
	for name, want := range map[string]string{
		"default-echo-80":                 "df61074cff0dc933beb37e1d8124ac6f",
		"access-router-production-web-80": "3ec0ac2d8dd2cda20a93dee13e737231",
		"default-http-svc-80":             "5a881deec44117eee2efd3540198e203",
	} {
		if got := BackendKey(name); got != want {
			t.Errorf("BackendKey(%q) = %s; want %s", name, got, want)
		}
	}
}

func stickyBackend(mode string, mod func(*CookieSessionAffinity)) Backend {
	ca := CookieSessionAffinity{Name: "INGRESSCOOKIE", Expires: "172800", MaxAge: "172800", SameSite: "None",
		Locations: map[string][]string{"echo.example.com": {"/"}}}
	if mod != nil {
		mod(&ca)
	}
	return Backend{Name: "default-echo-80", Endpoints: eps("10.0.0.3:8080"),
		SessionAffinity: SessionAffinityConfig{Name: "cookie", Mode: mode, CookieSessionAffinity: ca}}
}

// Spec §8.3: the full Set-Cookie captured from the real module, and its
// variations.
func TestStickyCookieVectors(t *testing.T) {
	const full = "INGRESSCOOKIE=5d7bb003ea5eff5dd462c931c5761887|df61074cff0dc933beb37e1d8124ac6f; Expires=Thu, 16-Nov-23 22:13:20 GMT; Max-Age=172800; Path=/; Secure; HttpOnly; SameSite=None"
	base := vars{"host": "echo.example.com", "server_name": "echo.example.com", "location_path": "/", "https": "on"}
	with := func(kv ...string) vars {
		v := vars{}
		for k, x := range base {
			v[k] = x
		}
		for i := 0; i < len(kv); i += 2 {
			v[kv[i]] = kv[i+1]
		}
		return v
	}
	tests := []struct {
		name string
		b    Backend
		req  vars
		want string
	}{
		{"persistent https", stickyBackend("persistent", nil), base, full},
		{"plain http has no Secure", stickyBackend("persistent", nil), with("https", ""), strings.Replace(full, "; Secure", "", 1)},
		{"conditional samesite none with Chrome/51", stickyBackend("persistent", func(c *CookieSessionAffinity) { c.ConditionalSameSiteNone = true }),
			with("http_user_agent", "Mozilla/5.0 Chrome/51.0.2704.103 Safari/537.36"), strings.TrimSuffix(full, "; SameSite=None")},
		{"conditional samesite none with a modern UA", stickyBackend("persistent", func(c *CookieSessionAffinity) { c.ConditionalSameSiteNone = true }),
			with("http_user_agent", "Mozilla/5.0 Chrome/120.0 Safari/537.36"), full},
		{"host not in locations", stickyBackend("persistent", nil), with("host", "other.example.com", "server_name", "other.example.com"), ""},
		{"lower-case samesite is dropped", stickyBackend("persistent", func(c *CookieSessionAffinity) { c.SameSite = "none" }), base, strings.TrimSuffix(full, "; SameSite=None")},
		{"secure forced on http", stickyBackend("persistent", func(c *CookieSessionAffinity) { c.Secure = true }), with("https", ""), full},
		{"path and domain", stickyBackend("persistent", func(c *CookieSessionAffinity) { c.Path = "/app"; c.Domain = "example.com" }), base,
			strings.Replace(full, "; Path=/", "; Domain=example.com; Path=/app", 1)},
		{"no expires no maxage", stickyBackend("persistent", func(c *CookieSessionAffinity) { c.Expires = ""; c.MaxAge = "" }), base,
			"INGRESSCOOKIE=5d7bb003ea5eff5dd462c931c5761887|df61074cff0dc933beb37e1d8124ac6f; Path=/; Secure; HttpOnly; SameSite=None"},
		{"wildcard location", stickyBackend("persistent", func(c *CookieSessionAffinity) { c.Locations = map[string][]string{"*.example.com": {"/"}} }),
			with("host", "a.example.com", "server_name", "*.example.com"), full},
		{"catch-all server", stickyBackend("persistent", func(c *CookieSessionAffinity) { c.Locations = map[string][]string{"_": {"/"}} }),
			with("host", "whatever", "server_name", "_"), full},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRegistry(Config{Rand: seqRand(7), Now: fixedClock(1700000000)})
			mustSync(t, r, tt.b)
			var a Attempt
			p, err := r.Pick(tt.b.Name, tt.req, &a)
			if err != nil {
				t.Fatal(err)
			}
			if p.Peer != "10.0.0.3:8080" {
				t.Errorf("peer = %s", p.Peer)
			}
			if p.SetCookie != tt.want {
				t.Errorf("Set-Cookie\n got %q\nwant %q", p.SetCookie, tt.want)
			}
		})
	}
}

func TestCookieTime(t *testing.T) {
	for unix, want := range map[int64]string{
		1700172800: "Thu, 16-Nov-23 22:13:20 GMT",
		2524608000: "Sat, 01-Jan-2050 00:00:00 GMT",
		0:          "Thu, 01-Jan-70 00:00:00 GMT",
	} {
		if got := CookieTime(unix); got != want {
			t.Errorf("CookieTime(%d) = %q; want %q", unix, got, want)
		}
	}
}

// Spec §4.5: lua-resty-cookie's parser.
func TestCookieValue(t *testing.T) {
	tests := []struct {
		header, name, want string
		ok                 bool
	}{
		{"route=abc", "route", "abc", true},
		{"a=1; route=x|y; b=2", "route", "x|y", true},
		{"route=1; route=2", "route", "2", true},  // last occurrence wins
		{"Route=1", "route", "", false},           // case-sensitive
		{"foo; route=x", "route", "", false},      // merged key "foo; route"
		{"foo; route=x", "foo; route", "x", true}, // ...which is what it is
		{"  \troute=v", "route", "v", true},       // leading blanks skipped
		{"route=v w=1", "route", "v", true},       // value ends at a space
		{"route=", "route", "", true},             // empty value
		{"route", "route", "", false},             // no '='
		{"a=b=c", "a", "b=c", true},               // value runs on
		{"x=1;route=2", "route", "2", true},       // no space after ';'
	}
	for _, tt := range tests {
		got, ok := CookieValue([]byte(tt.header), tt.name)
		if string(got) != tt.want || ok != tt.ok {
			t.Errorf("CookieValue(%q, %q) = %q, %v; want %q, %v", tt.header, tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestSplitStickyValue(t *testing.T) {
	tests := []struct{ in, a, b string }{
		{"k|bk", "k", "bk"},
		{"|x", "x", ""},
		{"legacy", "legacy", ""},
		{"a||b|c", "a", "b"},
		{"", "", ""},
	}
	for _, tt := range tests {
		a, b := splitStickyValue([]byte(tt.in))
		if string(a) != tt.a || string(b) != tt.b {
			t.Errorf("split(%q) = %q, %q; want %q, %q", tt.in, a, b, tt.a, tt.b)
		}
	}
}

func TestHashKeyTemplate(t *testing.T) {
	req := vars{"request_uri": "/foo?x=1", "remote_addr": "192.168.1.1", "1": "cap", "empty": ""}
	tests := []struct{ tmpl, want string }{
		{"$request_uri", "/foo?x=1"},
		{"${remote_addr}-$http_x_user", "192.168.1.1-"},
		{"$1", "cap"},
		{`\$request_uri`, `\$request_uri`},
		{"a$", "a$"},
		{"$empty|$missing|x", "||x"},
		{"${unclosed", "${unclosed"},
		{`a\b`, "ab"},
		{"$$remote_addr", "$192.168.1.1"},
	}
	for _, tt := range tests {
		k := parseHashKey(tt.tmpl)
		if got := string(k.eval(req, nil)); got != tt.want {
			t.Errorf("eval(%q) = %q; want %q", tt.tmpl, got, tt.want)
		}
	}
}

func TestSameSiteNoneIncompatible(t *testing.T) {
	tests := []struct {
		ua   string
		want bool
	}{
		{"Mozilla/5.0 (X11) Chrome/51.0.2704.103 Safari/537.36", true},
		{"Mozilla/5.0 Chrome/66.0 Safari", true},
		{"Mozilla/5.0 Chrome/120.0 Safari", false},
		{"Mozilla/5.0 (iPhone; CPU iPhone OS 12_0 like Mac OS X)", true},
		{"Mozilla/5.0 (iPad; CPU OS 12_1 like Mac OS X)", true},
		{"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_14_0) Version/12 Safari/605", true},
		{"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_14_0) Chrome/90 Safari/605", false},
		{"curl/8.0", false},
	}
	for _, tt := range tests {
		if got := SameSiteNoneIncompatible([]byte(tt.ua)); got != tt.want {
			t.Errorf("%q: got %v; want %v", tt.ua, got, tt.want)
		}
	}
}

// The ring (bucket scatter and insertion sort) equals a stable comparison
// sort of the same points, for a few nodes and for 3,001 nodes, whose 480,160
// points include hashes shared by different nodes (ties kept in node order).
func TestRingIsStableSort(t *testing.T) {
	many := make([]string, 3001)
	for i := range many {
		many[i] = fmt.Sprintf("10.%d.%d.%d:8080", i>>16&255, i>>8&255, i&255)
	}
	for _, ids := range [][]string{
		{"10.0.0.1:80", "10.0.0.2:80", "[fd00::1]:8080", "a", "b"},
		{"a"},
		many,
	} {
		rg := newRing(ids)
		type pt struct {
			h uint32
			o int32
		}
		var pts []pt
		for i, id := range ids {
			base := crc32Of(id)
			prev := uint32(0)
			for range pointsPerNode {
				le := []byte{byte(prev), byte(prev >> 8), byte(prev >> 16), byte(prev >> 24)}
				prev = crc32Update(base, le)
				pts = append(pts, pt{prev, int32(i)})
			}
		}
		sort.SliceStable(pts, func(i, j int) bool { return pts[i].h < pts[j].h })
		if len(rg.hashes) != len(pts) || len(rg.owners) != len(pts) {
			t.Fatalf("%d nodes: %d/%d points; want %d", len(ids), len(rg.hashes), len(rg.owners), len(pts))
		}
		ties := 0
		for i, p := range pts {
			if rg.hashes[i] != p.h || rg.owners[i] != p.o {
				t.Fatalf("%d nodes: point %d = (%d, %d); want (%d, %d)", len(ids), i, rg.hashes[i], rg.owners[i], p.h, p.o)
			}
			if i > 0 && pts[i-1].h == p.h && pts[i-1].o != p.o {
				ties++
			}
		}
		if len(ids) == len(many) && ties == 0 {
			t.Errorf("%d nodes: no hash shared by two nodes; the tie order is untested", len(ids))
		}
	}
}

// Spec §4.5.1: sticky_balanced keys are "<ngx.now()+i>.<pid>.<math.random(999999)>",
// ngx.now()+i printed as Lua %.14g; with an injected clock, pid and RNG the
// cookie is exact.
func TestStickyBalancedKey(t *testing.T) {
	const r323811 = 0x52e53bbedf5cdf5f // intn(999999) = 323810, so math.random gives 323811
	aff := SessionAffinityConfig{Name: "cookie", CookieSessionAffinity: CookieSessionAffinity{
		Name: "INGRESSCOOKIE", Locations: map[string][]string{"h": {"/"}}}}
	req := vars{"host": "h", "server_name": "h", "location_path": "/"}
	bk := BackendKey("default-echo-80")
	tests := []struct {
		name  string
		now   float64
		eps   []string
		tried []string
		want  string // the cookie value; "" for ErrNoPeer
	}{
		{"whole second", 1700000000, []string{"10.0.0.1:8080"}, nil, "1700000001.4242.323811|" + bk},
		{"milliseconds", 1700000000.123, []string{"10.0.0.1:8080"}, nil, "1700000001.123.4242.323811|" + bk},
		{"the only peer already failed: 20 tries, then no peer", 1700000000, []string{"10.0.0.1:8080"}, []string{"10.0.0.1:8080"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRegistry(Config{Rand: func() uint64 { return r323811 }, Now: fixedClock(tt.now), PID: 4242})
			mustSync(t, r, Backend{Name: "default-echo-80", Endpoints: eps(tt.eps...), SessionAffinity: aff})
			var a Attempt
			p, err := r.PickAfter("default-echo-80", req, &a, tt.tried)
			if tt.want == "" {
				if !errors.Is(err, ErrNoPeer) {
					t.Fatalf("got %+v, %v; want ErrNoPeer", p, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := "INGRESSCOOKIE=" + tt.want + "; Path=/; HttpOnly"
			if p.SetCookie != want {
				t.Errorf("Set-Cookie\n got %q\nwant %q", p.SetCookie, want)
			}
		})
	}
}

// The key of a new sticky_balanced session is hashed onto the ring: the peer
// is the ring owner of CRC32(key), and a retry after that peer failed uses
// the next i (ngx.now()+2).
func TestStickyBalancedKeyPicksRingOwner(t *testing.T) {
	const r323811 = 0x52e53bbedf5cdf5f
	addrs := []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080", "10.0.0.4:8080"}
	r := NewRegistry(Config{Rand: func() uint64 { return r323811 }, Now: fixedClock(1700000000), PID: 4242})
	mustSync(t, r, Backend{Name: "b", Endpoints: eps(addrs...), SessionAffinity: SessionAffinityConfig{Name: "cookie"}})
	owner := func(key string) string {
		b := r.snap.Load().get("b")
		s := b.algo.(*sticky)
		return b.peers[s.ringToPeer[s.ring.find(crc32Of(key))]].addr
	}
	var a Attempt
	first, err := r.Pick("b", vars{}, &a)
	if err != nil {
		t.Fatal(err)
	}
	p := *first // the retry below reuses a, and with it *first
	if want := owner("1700000001.4242.323811"); p.Peer != want {
		t.Errorf("first pick %s; want the ring owner %s of the key", p.Peer, want)
	}
	// Retry with change_on_failure semantics do not apply (no cookie): the
	// failed peer is excluded, keys continue with i = 2, 3, ...
	a.LastFailure = FailureFailed
	p2, err := r.Pick("b", vars{}, &a)
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for i := 2; i <= 20; i++ {
		if o := owner(strconv.Itoa(1700000000+i) + ".4242.323811"); o != p.Peer {
			want = o
			break
		}
	}
	if p2.Peer != want {
		t.Errorf("retry %s; want %s", p2.Peer, want)
	}
}

// Edge cases of should_set_cookie and the cookie name.
func TestStickyCookieEdges(t *testing.T) {
	tests := []struct {
		name string
		ca   CookieSessionAffinity
		req  vars
		want string
	}{
		{"empty cookie name is route, as Lua's name or \"route\"", CookieSessionAffinity{Locations: map[string][]string{"h": {"/"}}},
			vars{"host": "h", "server_name": "h", "location_path": "/"}, "route="},
		{"host with a leading dot has no wildcard", CookieSessionAffinity{Name: "c", Locations: map[string][]string{"*.example.com": {"/"}}},
			vars{"host": ".example.com", "server_name": "x", "location_path": "/"}, ""},
		{"wildcard needs the same location path", CookieSessionAffinity{Name: "c", Locations: map[string][]string{"*.example.com": {"/app"}}},
			vars{"host": "a.example.com", "server_name": "x", "location_path": "/"}, ""},
		{"exact host beats wildcard", CookieSessionAffinity{Name: "c", Locations: map[string][]string{"a.example.com": {"/x"}, "*.example.com": {"/"}}},
			vars{"host": "a.example.com", "server_name": "x", "location_path": "/"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRegistry(Config{Rand: seqRand(1), Now: fixedClock(1700000000)})
			mustSync(t, r, Backend{Name: "b", Endpoints: eps("10.0.0.1:80"), SessionAffinity: SessionAffinityConfig{Name: "cookie", Mode: "persistent", CookieSessionAffinity: tt.ca}})
			var a Attempt
			p, err := r.Pick("b", tt.req, &a)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(p.SetCookie, tt.want) || (tt.want == "") != (p.SetCookie == "") {
				t.Errorf("Set-Cookie %q; want prefix %q", p.SetCookie, tt.want)
			}
		})
	}
}
