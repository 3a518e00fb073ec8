package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/valyala/fasthttp"
)

// h2Client speaks HTTP/2 over TLS (ALPN h2) to the proxy, not following
// redirects.
func h2Client(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true} //nolint:gosec // the proxy's fake certificate
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// h2Do sends a request with host as :authority and returns the response
// and its body.
func h2Do(t *testing.T, c *http.Client, method, url, host string, body io.Reader, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, body)
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp, string(b)
}

// h2Proxy serves cfg on a TLS listener and returns its base URL.
func h2Proxy(t *testing.T, cfg *model.Configuration, pc Config) string {
	t.Helper()
	p, _ := newProxy(t, cfg, pc)
	return "https://" + serve(t, p.ServeTLS)
}

// TestHTTP2FrontEnd: a client that offers h2 gets HTTP/2 with the same
// handling as HTTP/1.1: routing, forwarded headers, hop-by-hop removal,
// redirects, whitelist, CORS, 413, canary and sticky picks, retries.
func TestHTTP2FrontEnd(t *testing.T) {
	a, b := backend(t, "a"), backend(t, "b")
	denied := loc("/", model.PathTypePrefix, "a")
	denied.AllowSourceRanges = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	moved := loc("/", model.PathTypePrefix, "a")
	moved.Redirect = model.Redirect{URL: "https://new.example.com/", Code: 301}
	root := loc("/", model.PathTypePrefix, "a")
	root.Rewrite.AppRoot = "/app"
	small := loc("/", model.PathTypePrefix, "a")
	small.Proxy.BodySizeBytes = 10
	cors := loc("/", model.PathTypePrefix, "a")
	cors.CORS = model.CORS{Enabled: true, AllowOrigin: []string{"https://app.example.com"}, AllowMethods: "GET", AllowHeaders: "X-A", MaxAgeSeconds: 60}
	rewrite := loc("/api(/|$)(.*)", model.PathTypeImplementationSpecific, "b")
	rewrite.Regex, rewrite.Rewrite.Target = true, "/$2"
	rewrite.SetPathRegexp()
	cfg := &model.Configuration{
		Backends: []*model.Backend{
			{Name: "a", Endpoints: endpoints(a)}, {Name: "b", Endpoints: endpoints(b)},
			{Name: "rr", Endpoints: endpoints(a), Alternatives: []string{"canary"}},
			{Name: "canary", Endpoints: endpoints(b), Canary: model.Canary{Header: "X-Canary"}},
			{Name: "retry", Endpoints: endpoints(deadAddr(t), a), Algorithm: model.EWMA},
			{Name: "empty"},
		},
		Servers: []model.Server{
			{Hostname: "_", Locations: []model.Location{{Path: "/", PathType: model.PathTypePrefix, Backend: model.DefaultBackendName, IsDefaultBackend: true}}},
			{Hostname: "h2.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "a"), rewrite, loc("/none", model.PathTypePrefix, "empty")}},
			{Hostname: "denied.test", Locations: []model.Location{denied}},
			{Hostname: "moved.test", Locations: []model.Location{moved}},
			{Hostname: "root.test", Locations: []model.Location{root}},
			{Hostname: "small.test", Locations: []model.Location{small}},
			{Hostname: "cors.test", Locations: []model.Location{cors}},
			{Hostname: "canary.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "rr")}},
			{Hostname: "retry.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "retry")}},
		},
	}
	// The client's X-Forwarded-For is extended ("xff appended").
	cfg.Global.UseForwardedHeaders, cfg.Global.ComputeFullForwardedFor = true, true
	base := h2Proxy(t, cfg, Config{})
	c := h2Client(t)
	for _, tc := range []struct {
		name, method, host, path string
		body                     string
		hdr                      map[string]string
		status                   int
		bodyPrefix, contains     string
		wantHeader               map[string]string
	}{
		{name: "routed", method: "GET", host: "h2.test", path: "/x?q=1", status: 200, bodyPrefix: "a GET /x?q=1 xff=127.0.0.1 xrip=127.0.0.1 proto=https host=h2.test rid=true",
			wantHeader: map[string]string{"X-Backend": "a"}},
		{name: "xff appended (use-forwarded-headers, compute-full-forwarded-for)", method: "GET", host: "h2.test", path: "/", hdr: map[string]string{"X-Forwarded-For": "203.0.113.9"}, status: 200, bodyPrefix: "a GET / xff=203.0.113.9, 127.0.0.1"},
		{name: "te trailers kept", method: "GET", host: "h2.test", path: "/", hdr: map[string]string{"Te": "trailers"}, status: 200, bodyPrefix: "a GET /", contains: `te="trailers"`},
		{name: "rewrite-target", method: "GET", host: "h2.test", path: "/api/users/7", status: 200, bodyPrefix: "b GET /users/7"},
		{name: "no endpoints", method: "GET", host: "h2.test", path: "/none", status: 503, bodyPrefix: "503 Service Temporarily Unavailable"},
		{name: "default backend", method: "GET", host: "unknown.test", path: "/", status: 404, bodyPrefix: "default backend - 404"},
		{name: "whitelist", method: "GET", host: "denied.test", path: "/", status: 403, bodyPrefix: "403 Forbidden"},
		{name: "permanent-redirect", method: "GET", host: "moved.test", path: "/x", status: 301, wantHeader: map[string]string{"Location": "https://new.example.com/"}},
		{name: "app-root", method: "GET", host: "root.test", path: "/", status: 302, wantHeader: map[string]string{"Location": "https://root.test/app"}},
		{name: "body over proxy-body-size", method: "POST", host: "small.test", path: "/", body: strings.Repeat("x", 11), status: 413, bodyPrefix: "413 Request Entity Too Large"},
		{name: "body at proxy-body-size", method: "POST", host: "small.test", path: "/", body: strings.Repeat("x", 10), status: 200, bodyPrefix: "a POST /"},
		{name: "cors preflight", method: "OPTIONS", host: "cors.test", path: "/", hdr: map[string]string{"Origin": "https://app.example.com"}, status: 204,
			wantHeader: map[string]string{"Access-Control-Allow-Origin": "https://app.example.com", "Access-Control-Max-Age": "60"}},
		{name: "cors response", method: "GET", host: "cors.test", path: "/", hdr: map[string]string{"Origin": "https://app.example.com"}, status: 200, bodyPrefix: "a GET /",
			wantHeader: map[string]string{"Access-Control-Allow-Origin": "https://app.example.com"}},
		{name: "canary by header", method: "GET", host: "canary.test", path: "/", hdr: map[string]string{"X-Canary": "always"}, status: 200, wantHeader: map[string]string{"X-Backend": "b"}},
		{name: "retry past a dead peer", method: "GET", host: "retry.test", path: "/", status: 200, bodyPrefix: "a GET /"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			resp, got := h2Do(t, c, tc.method, base+tc.path, tc.host, body, tc.hdr)
			if resp.ProtoMajor != 2 {
				t.Fatalf("got %s; want HTTP/2", resp.Proto)
			}
			if resp.StatusCode != tc.status || !strings.HasPrefix(got, tc.bodyPrefix) || !strings.Contains(got, tc.contains) {
				t.Errorf("got %d %q; want %d %q...", resp.StatusCode, got, tc.status, tc.bodyPrefix)
			}
			for k, v := range tc.wantHeader {
				if g := resp.Header.Get(k); g != v {
					t.Errorf("header %s: got %q; want %q", k, g, v)
				}
			}
		})
	}
}

// TestHTTP2Sticky: the sticky cookie is set over HTTP/2 and pins later
// requests to its peer.
func TestHTTP2Sticky(t *testing.T) {
	a, b := backend(t, "a"), backend(t, "b")
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "sticky", Endpoints: endpoints(a, b), Affinity: &model.CookieAffinity{
			Name: "INGRESSCOOKIE", Locations: map[string][]string{"sticky.test": {"/"}}}}},
		Servers: []model.Server{{Hostname: "sticky.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "sticky")}}},
	}
	base := h2Proxy(t, cfg, Config{})
	c := h2Client(t)
	resp, _ := h2Do(t, c, "GET", base+"/", "sticky.test", nil, nil)
	cookie := resp.Header.Get("Set-Cookie")
	if resp.ProtoMajor != 2 || !strings.HasPrefix(cookie, "INGRESSCOOKIE=") || !strings.HasSuffix(cookie, "; Path=/; Secure; HttpOnly") {
		t.Fatalf("got %s Set-Cookie %q; want HTTP/2 and the sticky cookie (Secure over https)", resp.Proto, cookie)
	}
	first := resp.Header.Get("X-Backend")
	for range 10 {
		r, _ := h2Do(t, c, "GET", base+"/", "sticky.test", nil, map[string]string{"Cookie": strings.SplitN(cookie, ";", 2)[0]})
		if r.Header.Get("X-Backend") != first || r.Header.Get("Set-Cookie") != "" {
			t.Fatalf("sticky request went to %s (Set-Cookie %q); want %s", r.Header.Get("X-Backend"), r.Header.Get("Set-Cookie"), first)
		}
	}
}

// TestHTTP2Streaming: bodies stream both ways over HTTP/2: a chunked 3 MiB
// upload, a 3 MiB download, and an event stream flushed as the backend
// writes it (the backend waits for the client to read the first event).
func TestHTTP2Streaming(t *testing.T) {
	const n = 3 << 20
	be := bodyBackend(t)
	gotFirst := make(chan struct{})
	sse := compatBackend(t, sseHandler(gotFirst))
	l := loc("/", model.PathTypePrefix, "big")
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "big", Endpoints: endpoints(be)}, {Name: "sse", Endpoints: endpoints(sse)}},
		Servers:  []model.Server{{Hostname: "big.test", Locations: []model.Location{l}}, {Hostname: "sse.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "sse")}}},
	}
	base := h2Proxy(t, cfg, Config{})
	c := h2Client(t)

	resp, body := h2Do(t, c, "POST", base+"/up", "big.test", io.NopCloser(io.LimitReader(zeros{}, n)), nil)
	if want := fmt.Sprintf("got %d", n); resp.ProtoMajor != 2 || resp.StatusCode != 200 || body != want {
		t.Errorf("upload: got %s %d %q; want HTTP/2 200 %q", resp.Proto, resp.StatusCode, body, want)
	}
	resp, body = h2Do(t, c, "GET", fmt.Sprintf("%s/down?n=%d", base, n), "big.test", nil, nil)
	if resp.StatusCode != 200 || len(body) != n {
		t.Errorf("download: got %d, %d bytes; want 200, %d", resp.StatusCode, len(body), n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/events", nil)
	req.Host = "sse.test"
	sresp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	readEvents(t, sresp.Body, gotFirst)
}

// compatBackend is a real upstream running h and returns its address.
func compatBackend(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestHTTP2ALPN: a client offering only http/1.1 on the TLS port gets
// HTTP/1.1 (through fasthttp); one offering h2 gets HTTP/2.
func TestHTTP2ALPN(t *testing.T) {
	a := backend(t, "a")
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "a", Endpoints: endpoints(a)}},
		Servers:  []model.Server{{Hostname: "alpn.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "a")}}},
	}
	base := h2Proxy(t, cfg, Config{})
	for _, tc := range []struct {
		name      string
		protos    []string
		wantProto string
	}{
		{"h2 and http/1.1 offered", []string{"h2", "http/1.1"}, "HTTP/2.0"},
		{"http/1.1 only", []string{"http/1.1"}, "HTTP/1.1"},
		{"no ALPN", nil, "HTTP/1.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: tc.protos}, ForceAttemptHTTP2: len(tc.protos) > 1} //nolint:gosec // fake certificate
			if len(tc.protos) < 2 {
				tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // no h2
			}
			defer tr.CloseIdleConnections()
			resp, body := h2Do(t, &http.Client{Transport: tr}, "GET", base+"/p", "alpn.test", nil, nil)
			if resp.Proto != tc.wantProto || !strings.HasPrefix(body, "a GET /p") || !strings.Contains(body, "proto=https") {
				t.Errorf("got %s %q; want %s from a with proto=https", resp.Proto, body, tc.wantProto)
			}
		})
	}
}

// TestHTTP2MetricsAndAccessLog: HTTP/2 requests are counted and logged as
// HTTP/1.1 ones are, the protocol shown as nginx shows it.
func TestHTTP2MetricsAndAccessLog(t *testing.T) {
	cfg, a := shopConfig(t)
	promReg := prometheus.NewRegistry()
	var log lockedBuffer
	base := h2Proxy(t, cfg, Config{Registerer: promReg, AccessLog: &log})
	c := h2Client(t)
	for range 2 {
		h2Do(t, c, "GET", base+"/shop/cart?id=1", "m.test", nil, map[string]string{"User-Agent": "h2client", "X-Request-ID": "rid-7"})
	}
	// Without the client's X-Request-ID, $req_id is the one made for the
	// upstream.
	h2Do(t, c, "GET", base+"/shop/cart?id=1", "m.test", nil, map[string]string{"User-Agent": "h2client"})
	want := `
# HELP nginx_ingress_controller_requests The total number of client requests.
# TYPE nginx_ingress_controller_requests counter
nginx_ingress_controller_requests{canary="",host="",ingress="shop",method="GET",namespace="prod",path="/shop",service="web",status="200"} 3
`
	if err := testutil.GatherAndCompare(promReg, strings.NewReader(want), "nginx_ingress_controller_requests"); err != nil {
		t.Error(err)
	}
	lines := log.lines()
	line := func(id string) *regexp.Regexp {
		return regexp.MustCompile(`^127\.0\.0\.1 - - \[[^]]+\] "GET /shop/cart\?id=1 HTTP/2\.0" 200 \d+ "-" "h2client" \d+ \d+\.\d{3} \[a\] \[\] ` + regexp.QuoteMeta(a) + ` \d+ \d+\.\d{3} 200 ` + id + `$`)
	}
	res := []*regexp.Regexp{line("rid-7"), line("rid-7"), line("[0-9a-f]{32}")}
	var bad []string
	for i, l := range lines {
		if i >= len(res) || !res[i].MatchString(l) {
			bad = append(bad, l)
		}
	}
	if diff := cmp.Diff([]string(nil), bad); len(lines) != len(res) || diff != "" {
		t.Errorf("got %d lines, these not matching %v:\n%s", len(lines), res, diff)
	}
}

// TestHTTP2UpstreamTrailersAndAbort: an HTTP/1.1 upstream's trailers reach
// the HTTP/2 client (httputil TestReverseProxy trailers), and a body that
// breaks off is not taken for a complete answer (ErrAbortHandler: the
// stream is reset).
func TestHTTP2UpstreamTrailersAndAbort(t *testing.T) {
	trailers, aborted := compatBackend(t, trailerHandler), compatBackend(t, abortingHandler(true))
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "t", Endpoints: endpoints(trailers)}, {Name: "a", Endpoints: endpoints(aborted)}},
		Servers: []model.Server{
			{Hostname: "trailers.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "t")}},
			{Hostname: "aborted.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "a")}},
		},
	}
	base := h2Proxy(t, cfg, Config{})
	c := h2Client(t)
	resp, body := h2Do(t, c, "GET", base+"/", "trailers.test", nil, nil)
	if got := resp.Trailer.Get("X-Trailer"); resp.ProtoMajor != 2 || body != "body" || got != "tail" {
		t.Errorf("got %s %q trailer %q; want HTTP/2 %q trailer %q", resp.Proto, body, got, "body", "tail")
	}

	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
	req.Host = "aborted.test"
	aresp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer aresp.Body.Close()
	if b, err := io.ReadAll(aresp.Body); err == nil {
		t.Errorf("read %d bytes and a clean end; want an error for the aborted body", len(b))
	}
}

// addFastFieldsByField is addFastFields as it was written first: three
// allocations per field. TestAddFastFields holds the shared-storage
// version to it.
func addFastFieldsByField(h http.Header, rh *fasthttp.ResponseHeader) {
	conn := rh.Peek("Connection")
	for k, v := range rh.All() {
		name := http.CanonicalHeaderKey(string(k))
		if isHopHeader(name) || nginxHides(name) || (len(conn) > 0 && tokenListHas(conn, name)) {
			continue
		}
		h.Add(name, string(v))
	}
}

// readUpstreamHead parses head as readResponse does an upstream's (names
// as sent, no Content-Type made up).
func readUpstreamHead(t testing.TB, head string) *fasthttp.ResponseHeader {
	t.Helper()
	var rh fasthttp.ResponseHeader
	rh.DisableNormalizing()
	rh.SetNoDefaultContentType(true)
	if err := rh.Read(bufio.NewReader(strings.NewReader(head))); err != nil {
		t.Fatalf("%q: %v", head, err)
	}
	return &rh
}

func TestAddFastFields(t *testing.T) {
	for _, head := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nDate: x\r\nServer: up\r\n\r\n",
		"HTTP/1.1 200 OK\r\ncontent-type: a\r\nSET-COOKIE: a=1\r\nset-cookie: b=2\r\nSet-Cookie: c=3\r\netag: \"1\"\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\nx-secret: t\r\nKeep-Alive: timeout=5\r\nX-Other: o\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-Accel-Redirect: /x\r\nX-Pad: p\r\nTrailer: grpc-status\r\nUpgrade: h2c\r\nX-Empty: \r\nx-lower-case-name: v\r\n\r\n",
		"HTTP/1.1 200 OK\r\nStrict-Transport-Security: max-age=1\r\nVary: a\r\nVary: b\r\nA-Name-Longer-Than-Thirty-Two-Bytes-Here: v\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\nProxy-Connection: x\r\n\r\n",
	} {
		rh := readUpstreamHead(t, head)
		// A field the proxy set before the upstream's (HSTS) is kept and
		// extended as net/http's Add would.
		got := http.Header{"Strict-Transport-Security": {"max-age=2"}}
		want := got.Clone()
		addFastFields(got, rh)
		addFastFieldsByField(want, rh)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%q: fields (-by field +shared):\n%s", head, diff)
		}
	}
	// The shared storage is not shared between names: appending to one
	// name's values leaves the others'.
	h := http.Header{}
	addFastFields(h, readUpstreamHead(t, "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\n\r\n"))
	h.Add("A", "3")
	if got := h.Values("B"); len(got) != 1 || got[0] != "2" {
		t.Errorf("B after adding to A: %v; want [2]", got)
	}
	if got := canonicalName([]byte("ETAG")); got != "Etag" {
		t.Errorf("canonicalName(ETAG) = %q; want Etag", got)
	}
}

// A response's fields cost two allocations, not three each.
func TestAddFastFieldsAllocations(t *testing.T) {
	rh := readUpstreamHead(t, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nCache-Control: no-store\r\nSet-Cookie: a=1\r\nEtag: \"x\"\r\nDate: d\r\nServer: s\r\n\r\n")
	h := make(http.Header, 8)
	if n := testing.AllocsPerRun(100, func() {
		clear(h)
		addFastFields(h, rh)
	}); n > 2 {
		t.Errorf("%v allocations per response; want at most 2", n)
	}
}
