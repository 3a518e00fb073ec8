package proxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// backend is a real upstream on loopback that names itself and echoes what
// it received.
func backend(t *testing.T, name string) (addr string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", name)
		fmt.Fprintf(w, "%s %s %s xff=%s xrip=%s proto=%s host=%s rid=%t conn=%q te=%q xs=%s",
			name, r.Method, r.URL.RequestURI(), r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Real-Ip"),
			r.Header.Get("X-Forwarded-Proto"), r.Host, r.Header.Get("X-Request-Id") != "", r.Header.Get("X-Custom-Hop"), r.Header.Get("Te"), r.Header.Get("X-Scheme"))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func endpoints(addrs ...string) []model.Endpoint {
	var out []model.Endpoint
	for _, a := range addrs {
		h, p, _ := net.SplitHostPort(a)
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			panic(err)
		}
		out = append(out, model.Endpoint{Address: h, Port: uint16(n)})
	}
	return out
}

// loc returns a Location with settings of its own; a copy of it shares
// them (Clone gives a copy its own).
func loc(path string, pt model.PathType, backend string) model.Location {
	return model.Location{Path: path, PathType: pt, Backend: backend,
		LocationSettings: &model.LocationSettings{Proxy: model.Proxy{NextUpstreamTries: 3, ReadTimeoutSeconds: 5, ConnectTimeoutSeconds: 1}}}
}

// start runs a Proxy with cfg on loopback and returns its base URL.
func start(t *testing.T, cfg *model.Configuration) (string, *balancer.Registry) {
	t.Helper()
	p, reg := newProxy(t, cfg, Config{})
	return "http://" + serve(t, p.Serve), reg
}

// newProxy makes a Proxy with pc (its Picker a Registry synced with cfg's
// backends) serving cfg.
func newProxy(t testing.TB, cfg *model.Configuration, pc Config) (*Proxy, *balancer.Registry) {
	t.Helper()
	reg := balancer.NewRegistry(balancer.Config{})
	if err := reg.Apply(cfg.Backends); err != nil {
		t.Fatal(err)
	}
	pc.Picker = reg
	if os.Getenv("SWITCHYARD_TEST_XNET_HTTP2") == "1" {
		pc.XNetHTTP2 = true // the suite again on x/net/http2's server
	}
	p, err := New(pc)
	if err != nil {
		t.Fatal(err)
	}
	p.Update(cfg)
	return p, reg
}

// serve runs fn (Serve or ServeTLS) on a loopback listener until the test
// ends and returns the listener's address.
func serve(t testing.TB, fn func(context.Context, net.Listener) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func get(t *testing.T, url, host string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestRoutingAndHeaders(t *testing.T) {
	a, b := backend(t, "a"), backend(t, "b")
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "a", Endpoints: endpoints(a)}, {Name: "b", Endpoints: endpoints(b)}, {Name: "empty"}},
		Servers: []model.Server{
			{Hostname: "_", Locations: []model.Location{{Path: "/", PathType: model.PathTypePrefix, Backend: model.DefaultBackendName, IsDefaultBackend: true}}},
			{Hostname: "shop.example.com", Locations: []model.Location{
				loc("/", model.PathTypePrefix, "a"), loc("/api", model.PathTypePrefix, "b"), loc("/exact", model.PathTypeExact, "b"),
				loc("/none", model.PathTypePrefix, "empty")}},
			{Hostname: "*.example.com", Locations: []model.Location{loc("/", model.PathTypePrefix, "b")}},
		},
	}
	base, _ := start(t, cfg)
	tests := []struct {
		host, path string
		status     int
		body       string
	}{
		{"shop.example.com", "/", 200, "a GET /"},
		{"SHOP.example.com:80", "/x", 200, "a GET /x"},
		{"shop.example.com", "/api", 200, "b GET /api"},
		{"shop.example.com", "/api/v1?q=1", 200, "b GET /api/v1?q=1"},
		{"shop.example.com", "/apix", 200, "a GET /apix"}, // Prefix is element-wise
		{"shop.example.com", "/exact", 200, "b GET /exact"},
		{"shop.example.com", "/exact/more", 200, "a GET /exact/more"},
		{"any.example.com", "/", 200, "b GET /"},
		{"unknown.test", "/", 404, "default backend - 404"},
		{"shop.example.com", "/none", 503, "503 Service Temporarily Unavailable"},
	}
	for _, tt := range tests {
		resp, body := get(t, base+tt.path, tt.host, nil)
		if resp.StatusCode != tt.status || !strings.HasPrefix(body, tt.body) {
			t.Errorf("%s%s: %d %q; want %d %q", tt.host, tt.path, resp.StatusCode, body, tt.status, tt.body)
		}
	}
	// Without use-forwarded-headers and compute-full-forwarded-for, the
	// client's X-Forwarded-For is replaced, as ingress-nginx's default.
	_, body := get(t, base+"/", "shop.example.com", map[string]string{"X-Forwarded-For": "203.0.113.9", "Connection": "X-Custom-Hop", "X-Custom-Hop": "x"})
	for _, want := range []string{"xff=127.0.0.1 ", "xrip=127.0.0.1", "proto=http", "host=shop.example.com", "rid=true", `conn=""`, "xs=http"} {
		if !strings.Contains(body, want) {
			t.Errorf("upstream saw %q; want %q", body, want)
		}
	}
	// httputil's TestReverseProxy: "Te: trailers" survives hop-by-hop
	// removal (RFC 9110 §7.6.1 lets trailers through); other Te values do not.
	for te, want := range map[string]string{"trailers": `te="trailers"`, "gzip, trailers": `te="trailers"`, "gzip": `te=""`} {
		_, body := get(t, base+"/", "shop.example.com", map[string]string{"Te": te})
		if !strings.Contains(body, want) {
			t.Errorf("Te: %s: upstream saw %q; want %q", te, body, want)
		}
	}
}

func TestBalancingThroughTheProxy(t *testing.T) {
	a, b := backend(t, "a"), backend(t, "b")
	cfg := &model.Configuration{
		Backends: []*model.Backend{
			{Name: "rr", Endpoints: endpoints(a, b), Alternatives: []string{"canary"}},
			{Name: "canary", Endpoints: endpoints(b), Canary: model.Canary{Header: "X-Canary"}},
			{Name: "sticky", Endpoints: endpoints(a, b), Affinity: &model.CookieAffinity{
				Name: "INGRESSCOOKIE", Locations: map[string][]string{"sticky.test": {"/"}}}},
			{Name: "retry", Endpoints: endpoints(deadAddr(t), a), Algorithm: model.EWMA},
		},
		Servers: []model.Server{
			{Hostname: "rr.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "rr")}},
			{Hostname: "sticky.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "sticky")}},
			{Hostname: "retry.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "retry")}},
		},
	}
	base, _ := start(t, cfg)

	seen := map[string]int{}
	for range 20 {
		resp, _ := get(t, base+"/", "rr.test", nil)
		seen[resp.Header.Get("X-Backend")]++
	}
	if seen["a"] != 10 || seen["b"] != 10 {
		t.Errorf("round robin gave %v; want 10/10", seen)
	}
	for range 5 {
		if resp, _ := get(t, base+"/", "rr.test", map[string]string{"X-Canary": "always"}); resp.Header.Get("X-Backend") != "b" {
			t.Fatalf("canary header went to %s", resp.Header.Get("X-Backend"))
		}
	}

	resp, _ := get(t, base+"/", "sticky.test", nil)
	cookie := resp.Header.Get("Set-Cookie")
	if !strings.HasPrefix(cookie, "INGRESSCOOKIE=") || !strings.Contains(cookie, "; Path=/; HttpOnly") {
		t.Fatalf("Set-Cookie = %q", cookie)
	}
	first := resp.Header.Get("X-Backend")
	for range 10 {
		r, _ := get(t, base+"/", "sticky.test", map[string]string{"Cookie": strings.SplitN(cookie, ";", 2)[0]})
		if r.Header.Get("X-Backend") != first || r.Header.Get("Set-Cookie") != "" {
			t.Fatalf("sticky request went to %s (cookie %q); want %s", r.Header.Get("X-Backend"), r.Header.Get("Set-Cookie"), first)
		}
	}

	for range 10 {
		r, body := get(t, base+"/", "retry.test", nil)
		if r.StatusCode != 200 || !strings.HasPrefix(body, "a ") {
			t.Fatalf("retry: %d %q; want 200 from a", r.StatusCode, body)
		}
	}
}

func TestRouteSwapUnderLoad(t *testing.T) {
	a, b := backend(t, "a"), backend(t, "b")
	cfgA := &model.Configuration{
		Backends: []*model.Backend{{Name: "x", Endpoints: endpoints(a)}},
		Servers:  []model.Server{{Hostname: "swap.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "x")}}},
	}
	base, reg := start(t, cfgA)
	p := &model.Configuration{Backends: []*model.Backend{{Name: "x", Endpoints: endpoints(b)}}, Servers: cfgA.Servers}
	errs := make(chan error, 1)
	go func() {
		for i := range 50 {
			c := cfgA
			if i%2 == 1 {
				c = p
			}
			if err := reg.Apply(c.Backends); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	for range 200 {
		if resp, _ := get(t, base+"/", "swap.test", nil); resp.StatusCode != 200 {
			t.Fatalf("status %d during swaps", resp.StatusCode)
		}
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// whitelist- and denylist-source-range, a denied (fail-closed) location,
// permanent-redirect and app-root, as ingress-nginx writes them into
// nginx.conf.
func TestAccessAndRedirects(t *testing.T) {
	a := backend(t, "a")
	allowLoopback := loc("/", model.PathTypePrefix, "a")
	allowLoopback.AllowSourceRanges = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	denyLoopback := loc("/", model.PathTypePrefix, "a")
	denyLoopback.AllowSourceRanges = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32")}
	redirect := loc("/", model.PathTypePrefix, "a")
	redirect.Redirect = model.Redirect{URL: "https://new.example.com/landing", Code: 308}
	appRoot := loc("/", model.PathTypePrefix, "a")
	appRoot.Rewrite.AppRoot = "/app"
	// denylist-source-range: checked before the allow list.
	blocked := loc("/", model.PathTypePrefix, "a")
	blocked.DenySourceRanges = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	blocked.AllowSourceRanges = allowLoopback.AllowSourceRanges
	otherBlocked := loc("/", model.PathTypePrefix, "a")
	otherBlocked.DenySourceRanges = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	// A denied location answers 503 before anything else, redirects included.
	failClosed := loc("/", model.PathTypePrefix, "a")
	failClosed.Denied = &model.Denial{Field: "nginx.ingress.kubernetes.io/auth-url", Reason: "not supported"}
	failClosed.Redirect = redirect.Redirect
	failClosed.AllowSourceRanges = denyLoopback.AllowSourceRanges
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "a", Endpoints: endpoints(a)}},
		Servers: []model.Server{
			{Hostname: "blocked.test", Locations: []model.Location{blocked}},
			{Hostname: "other-blocked.test", Locations: []model.Location{otherBlocked}},
			{Hostname: "closed.test", Locations: []model.Location{failClosed}},
			{Hostname: "allowed.test", Locations: []model.Location{allowLoopback}},
			{Hostname: "denied.test", Locations: []model.Location{denyLoopback}},
			{Hostname: "moved.test", Locations: []model.Location{redirect}},
			{Hostname: "root.test", Locations: []model.Location{appRoot}},
		},
	}
	base, _ := start(t, cfg)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		host, path string
		status     int
		location   string
	}{
		{"allowed.test", "/", 200, ""},
		{"denied.test", "/", 403, ""},
		{"blocked.test", "/", 403, ""},
		{"other-blocked.test", "/", 200, ""},
		{"closed.test", "/", 503, ""},
		{"moved.test", "/any/path", 308, "https://new.example.com/landing"},
		{"root.test", "/", 302, "http://root.test/app"},
		{"root.test", "/app", 200, ""},
	} {
		req, _ := http.NewRequest(http.MethodGet, base+tc.path, nil)
		req.Host = tc.host
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Location") != tc.location {
			t.Errorf("%s%s: %d Location %q; want %d %q", tc.host, tc.path, resp.StatusCode, resp.Header.Get("Location"), tc.status, tc.location)
		}
	}
}

// rewrite-target replaces the whole URI with the target, captures expanded,
// as nginx's rewrite; CORS answers preflights and decorates responses.
func TestRewriteAndCORS(t *testing.T) {
	a := backend(t, "a")
	rewrite := loc("/api(/|$)(.*)", model.PathTypeImplementationSpecific, "a")
	rewrite.Regex, rewrite.Rewrite.Target = true, "/$2"
	plain := loc("/old", model.PathTypePrefix, "a")
	plain.Rewrite.Target = "/new"
	rewrite.SetPathRegexp()
	plain.SetPathRegexp()
	cors := loc("/", model.PathTypePrefix, "a")
	cors.CORS = model.CORS{Enabled: true, AllowOrigin: []string{"https://app.example.com", "https://*.example.org"},
		AllowMethods: "GET, POST", AllowHeaders: "Content-Type", AllowCredentials: true, MaxAgeSeconds: 600}
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "a", Endpoints: endpoints(a)}},
		Servers: []model.Server{
			{Hostname: "rw.test", Locations: []model.Location{rewrite, plain}},
			{Hostname: "cors.test", Locations: []model.Location{cors}},
		},
	}
	base, _ := start(t, cfg)
	for path, want := range map[string]string{
		"/api/users/7?x=1": "a GET /users/7?x=1",
		"/api":             "a GET /?",
		"/API/v2":          "a GET /v2",
		"/old/thing":       "a GET /new",
	} {
		_, body := get(t, base+path, "rw.test", nil)
		if !strings.HasPrefix(body, strings.TrimSuffix(want, "?")) {
			t.Errorf("%s: upstream saw %q; want %q", path, body, want)
		}
	}

	req, _ := http.NewRequest(http.MethodOptions, base+"/", nil)
	req.Host = "cors.test"
	req.Header.Set("Origin", "https://a.example.org")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "https://a.example.org" ||
		resp.Header.Get("Access-Control-Max-Age") != "600" || resp.Header.Get("Access-Control-Allow-Credentials") != "true" {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	resp, body := get(t, base+"/", "cors.test", map[string]string{"Origin": "https://app.example.com"})
	if !strings.HasPrefix(body, "a GET /") || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Errorf("CORS response: %q %v", body, resp.Header)
	}
	resp, _ = get(t, base+"/", "cors.test", map[string]string{"Origin": "https://evil.example.net"})
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("an origin not allowed got CORS headers: %v", resp.Header)
	}
}

// shopConfig serves m.test/shop from a real backend a (its address
// returned), for Ingress prod/shop and Service web.
func shopConfig(t *testing.T) (*model.Configuration, string) {
	t.Helper()
	a := backend(t, "a")
	l := loc("/shop", model.PathTypePrefix, "a")
	l.Ingress = model.ObjectRef{Kind: "Ingress", Namespace: "prod", Name: "shop"}
	l.Service = "web"
	return &model.Configuration{
		Backends: []*model.Backend{{Name: "a", Endpoints: endpoints(a)}},
		Servers:  []model.Server{{Hostname: "m.test", Locations: []model.Location{l}}},
	}, a
}

// The request metrics carry ingress-nginx's names and configuration-derived
// labels.
func TestRequestMetrics(t *testing.T) {
	cfg, _ := shopConfig(t)
	promReg := prometheus.NewRegistry()
	p, _ := newProxy(t, cfg, Config{Registerer: promReg, MetricsPerHost: true})
	base := "http://" + serve(t, p.Serve)
	for range 3 {
		get(t, base+"/shop/cart", "m.test", nil)
	}
	get(t, base+"/elsewhere?id=123", "random-host.test", nil)
	want := `
# HELP nginx_ingress_controller_requests The total number of client requests.
# TYPE nginx_ingress_controller_requests counter
nginx_ingress_controller_requests{canary="",host="",ingress="",method="GET",namespace="",path="",service="",status="404"} 1
nginx_ingress_controller_requests{canary="",host="m.test",ingress="shop",method="GET",namespace="prod",path="/shop",service="web",status="200"} 3
`
	if err := testutil.GatherAndCompare(promReg, strings.NewReader(want), "nginx_ingress_controller_requests"); err != nil {
		t.Error(err)
	}
	for _, name := range []string{"response_duration_seconds", "connect_duration_seconds", "header_duration_seconds", "ingress_upstream_latency_seconds"} {
		if n := testutil.CollectAndCount(promReg, "nginx_ingress_controller_"+name); n != 1 {
			t.Errorf("%s series = %d; want 1 (only the proxied requests)", name, n)
		}
	}
	// ingress-nginx's upstream latency summary (Flagger reads it): the
	// connect time of each proxied request, by Ingress; the first request
	// connected, the other two reused the kept-alive connection.
	mfs, err := promReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "nginx_ingress_controller_ingress_upstream_latency_seconds" {
			continue
		}
		m := mf.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		s := m.GetSummary()
		if fmt.Sprint(labels) != "map[canary: ingress:shop namespace:prod service:web]" || s.GetSampleCount() != 3 || s.GetSampleSum() <= 0 || len(s.GetQuantile()) != 3 {
			t.Errorf("upstream latency summary %v count=%d sum=%g quantiles=%d; want ingress shop/prod, service web, 3 samples, sum > 0, 3 quantiles",
				labels, s.GetSampleCount(), s.GetSampleSum(), len(s.GetQuantile()))
		}
	}
}

// pemCert makes a PEM certificate+key for names, as a kubernetes.io/tls
// Secret holds them.
func pemCert(t *testing.T, names ...string) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})) + string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
}

// HTTPS: the certificate by SNI (exact, wildcard, fake for unknown names),
// swapped by Update on the running listener; ssl-redirect on plain HTTP.
func TestTLSAndSSLRedirect(t *testing.T) {
	a := backend(t, "a")
	l := loc("/", model.PathTypePrefix, "a")
	l.Rewrite.SSLRedirect = true
	cfg := &model.Configuration{
		Backends:     []*model.Backend{{Name: "a", Endpoints: endpoints(a)}},
		Certificates: map[string]model.Certificate{"uid-shop": {UID: "uid-shop", PEM: pemCert(t, "shop.example.com")}, "uid-wild": {UID: "uid-wild", PEM: pemCert(t, "*.example.org")}},
		Servers: []model.Server{
			{Hostname: "shop.example.com", TLS: &model.ServerTLS{CertificateUID: "uid-shop"}, Locations: []model.Location{l}},
			{Hostname: "*.example.org", TLS: &model.ServerTLS{CertificateUID: "uid-wild"}, Locations: []model.Location{l}},
			{Hostname: "plain.test", Locations: []model.Location{l}},
		},
	}
	p, _ := newProxy(t, cfg, Config{})
	httpAddr, tlsAddr := serve(t, p.Serve), serve(t, p.ServeTLS)
	httpsGet := func(sni string) (string, string) {
		t.Helper()
		tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: sni, InsecureSkipVerify: true}}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodGet, "https://"+tlsAddr+"/x", nil)
		req.Host = sni
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.TLS.PeerCertificates[0].Subject.CommonName, string(b)
	}
	for sni, wantCN := range map[string]string{"shop.example.com": "shop.example.com", "a.example.org": "*.example.org", "unknown.test": "Switchyard Fake Certificate"} {
		cn, body := httpsGet(sni)
		if cn != wantCN {
			t.Errorf("SNI %s: certificate %q; want %q", sni, cn, wantCN)
		}
		if sni != "unknown.test" && !strings.HasPrefix(body, "a GET /x") {
			t.Errorf("SNI %s: body %q", sni, body)
		}
	}
	// A new certificate is served without restarting the listener.
	cfg.Certificates["uid-shop"] = model.Certificate{UID: "uid-shop", PEM: pemCert(t, "shop.example.com", "renewed.example.com")}
	p.Update(cfg)
	tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: "shop.example.com", InsecureSkipVerify: true}}
	resp, err := (&http.Client{Transport: tr}).Get("https://" + tlsAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	tr.CloseIdleConnections()
	if names := resp.TLS.PeerCertificates[0].DNSNames; len(names) != 2 {
		t.Errorf("after Update the old certificate is still served: %v", names)
	}

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct{ host, path, status, location string }{
		{"shop.example.com", "/cart/?id=1", "308", "https://shop.example.com/cart/?id=1"},
		{"shop.example.com", "/cart/", "308", "https://shop.example.com/cart"},
		{"plain.test", "/", "200", ""},
	} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+httpAddr+tc.path, nil)
		req.Host = tc.host
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if strconv.Itoa(resp.StatusCode) != tc.status || resp.Header.Get("Location") != tc.location {
			t.Errorf("http://%s%s: %d %q; want %s %q", tc.host, tc.path, resp.StatusCode, resp.Header.Get("Location"), tc.status, tc.location)
		}
	}
}

// The request histograms as Prometheus' own: a value equal to a bound
// counts in that bucket, buckets are cumulative, the count is the
// buckets' total and the sum is in the metric's unit, whichever stripes
// the values went to.
func TestRequestHistograms(t *testing.T) {
	h := newHistogram(durationBuckets, 3)
	for i, d := range []time.Duration{5 * time.Millisecond, 5*time.Millisecond + 1, 20 * time.Second} {
		h.observe(i, int64(d))
	}
	var m dto.Metric
	if err := h.metric(descDuration, 1e9, make([]string, len(requestLabels))).Write(&m); err != nil {
		t.Fatal(err)
	}
	hg := m.GetHistogram()
	if hg.GetSampleCount() != 3 || math.Abs(hg.GetSampleSum()-20.010000001) > 1e-9 {
		t.Errorf("count %d sum %v; want 3 and 20.010000001", hg.GetSampleCount(), hg.GetSampleSum())
	}
	want := map[float64]uint64{0.005: 1, 0.01: 2, 10: 2}
	if len(hg.GetBucket()) != len(prometheus.DefBuckets) {
		t.Fatalf("%d buckets; want Prometheus' default %d", len(hg.GetBucket()), len(prometheus.DefBuckets))
	}
	for _, b := range hg.GetBucket() {
		if n, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != n {
			t.Errorf("bucket le=%v holds %d; want %d", b.GetUpperBound(), b.GetCumulativeCount(), n)
		}
	}
}

// The upstream latency summary as a Prometheus summary with ingress-nginx's
// objectives: count and sum of every observation, the 0.5, 0.9 and 0.99
// quantiles of the last 8-10 minutes within 3 % of the exact ones, NaN
// once the window holds nothing.
func TestUpstreamLatencyWindow(t *testing.T) {
	w := newLatencyWindow([4]string{"ing", "ns", "svc", ""}, 2)
	start := 7 * time.Hour
	var exact []time.Duration
	for i := range 1000 {
		d := time.Duration(i*i) * time.Microsecond // 0 .. ~1 s, skewed
		w.observe(i%2, d, start+time.Duration(i)*time.Millisecond)
		exact = append(exact, d)
	}
	read := func(now time.Duration) *dto.Summary {
		var m dto.Metric
		if err := w.metric(now).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetSummary()
	}
	s := read(start + 2*time.Second)
	if s.GetSampleCount() != 1000 {
		t.Fatalf("count %d; want 1000", s.GetSampleCount())
	}
	var sum time.Duration
	for _, d := range exact {
		sum += d
	}
	if math.Abs(s.GetSampleSum()-sum.Seconds()) > 1e-9 {
		t.Errorf("sum %v; want %v", s.GetSampleSum(), sum.Seconds())
	}
	for _, q := range s.GetQuantile() {
		want := exact[int(math.Ceil(q.GetQuantile()*1000))-1].Seconds()
		if got := q.GetValue(); math.Abs(got-want) > 0.032*want {
			t.Errorf("quantile %v = %v; want %v within 3 %%", q.GetQuantile(), got, want)
		}
	}
	if len(s.GetQuantile()) != 3 {
		t.Errorf("%d quantiles; want 3", len(s.GetQuantile()))
	}
	// 11 minutes later the window is empty; count and sum stay.
	s = read(start + 11*time.Minute)
	for _, q := range s.GetQuantile() {
		if !math.IsNaN(q.GetValue()) {
			t.Errorf("after the window: quantile %v = %v; want NaN", q.GetQuantile(), q.GetValue())
		}
	}
	if s.GetSampleCount() != 1000 {
		t.Errorf("after the window: count %d; want 1000", s.GetSampleCount())
	}
	// A new observation then is the only one the quantiles see.
	w.observe(1, 3*time.Millisecond, start+11*time.Minute)
	for _, q := range read(start + 11*time.Minute).GetQuantile() {
		if got := q.GetValue(); math.Abs(got-0.003) > 0.032*0.003 {
			t.Errorf("one fresh observation: quantile %v = %v; want 0.003", q.GetQuantile(), got)
		}
	}
	for _, d := range []time.Duration{0, 1, 15, 16, 17, 1000, time.Millisecond, time.Second, time.Hour} {
		if v := latencyValue(latencyBucket(d)); d > 0 && math.Abs(float64(v-d)) > 0.032*float64(d) {
			t.Errorf("bucket of %v reads %v", d, v)
		}
	}
}
