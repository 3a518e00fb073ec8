package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/valyala/fasthttp"
)

// oneHost serves host's "/" (Prefix) from a backend of the given peers.
func oneHost(host string, peers ...string) *model.Configuration {
	return &model.Configuration{
		Backends: []*model.Backend{{Name: "be", Endpoints: endpoints(peers...)}},
		Servers:  []model.Server{{Hostname: host, Locations: []model.Location{loc("/", model.PathTypePrefix, "be")}}},
	}
}

// uriPicker records the $request_uri each Pick saw.
type uriPicker struct {
	*balancer.Registry

	mu   sync.Mutex
	uris []string
}

func (p *uriPicker) Pick(backend string, req balancer.Request, a *balancer.Attempt) (*balancer.Pick, error) {
	uri, _ := req.Var("request_uri")
	p.mu.Lock()
	p.uris = append(p.uris, string(uri))
	p.mu.Unlock()
	return p.Registry.Pick(backend, req, a)
}

func (p *uriPicker) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.uris...)
}

// TestRewriteKeepsClientRequest: the client's own request is written
// upstream (its body buffered), and writing it rewrites its request line;
// a retry's Pick and the access log still see the request-target the
// client sent, while each upstream attempt gets the rewritten one. The
// backend has a refusing peer and a live one, round robin: of two
// requests, one is retried.
func TestRewriteKeepsClientRequest(t *testing.T) {
	var be seenBackend
	live := be.start(t)
	rw := loc("/api(/|$)(.*)", model.PathTypeImplementationSpecific, "be")
	rw.Regex, rw.Rewrite.Target = true, "/$2"
	rw.SetPathRegexp()
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "be", Endpoints: endpoints(deadAddr(t), live)}},
		Servers:  []model.Server{{Hostname: "rw.test", Locations: []model.Location{rw}}},
	}
	reg := balancer.NewRegistry(balancer.Config{})
	if err := reg.Apply(cfg.Backends); err != nil {
		t.Fatal(err)
	}
	picker := &uriPicker{Registry: reg}
	var log lockedBuffer
	p, err := New(Config{Picker: picker, AccessLog: &log})
	if err != nil {
		t.Fatal(err)
	}
	p.Update(cfg)
	addr := serve(t, p.Serve)

	for range 2 {
		resp, ok := rawExchange(t, addr, []byte("PUT /api/users/7?x=1 HTTP/1.1\r\nHost: rw.test\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"))
		if !ok || firstStatus(resp) != "200" {
			t.Fatalf("got %q; want 200", resp)
		}
	}
	if got, want := be.requests(), []string{"PUT /users/7?x=1", "PUT /users/7?x=1"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("upstream got %q; want %q", got, want)
	}
	got := picker.seen()
	if len(got) != 3 {
		t.Errorf("%d picks; want 3 (one request retried)", len(got))
	}
	for _, u := range got {
		if u != "/api/users/7?x=1" {
			t.Errorf("Pick saw $request_uri %q; want the client's", got)
			break
		}
	}
	lines := log.lines()
	for _, l := range lines {
		if !regexp.MustCompile(` "PUT /api/users/7\?x=1 HTTP/1\.1" 200 `).MatchString(l) {
			t.Errorf("access log line %q; want the client's request line", l)
		}
	}
	if len(lines) != 2 {
		t.Errorf("access log %q; want 2 lines", lines)
	}
}

// TestRequestBodyNotDelivered: a body of known length longer than what
// fasthttp reads before the handler (8 KiB) that the client stops sending
// is answered 408 (stalled past ReadTimeout) or 400 (connection half
// closed), and nothing reaches the upstream: before, the upstream got the
// read error's text as the body.
func TestRequestBodyNotDelivered(t *testing.T) {
	var be seenBackend
	addr := be.start(t)
	cfg := oneHost("b.test", addr)
	p, _ := newProxy(t, cfg, Config{ReadTimeout: 300 * time.Millisecond})
	proxyAddr := serve(t, p.Serve)
	head := "POST /upload HTTP/1.1\r\nHost: b.test\r\nContent-Length: 20000\r\n\r\n"
	part := strings.Repeat("x", 10000)

	t.Run("stalled", func(t *testing.T) {
		c := dialTest(t, proxyAddr)
		if _, err := io.WriteString(c, head+part); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		b, _ := io.ReadAll(c) // the proxy answers, then closes
		if got := firstStatus(string(b)); got != "408" {
			t.Errorf("got %q; want 408", b)
		}
		if took := time.Since(start); took < 250*time.Millisecond {
			t.Errorf("answered after %v; want the read timeout (300ms) first", took)
		}
	})
	t.Run("half closed", func(t *testing.T) {
		resp, ok := rawExchange(t, proxyAddr, []byte(head+part))
		if !ok || firstStatus(resp) != "400" {
			t.Errorf("got %q; want 400", resp)
		}
	})
	if got := be.requests(); len(got) != 0 {
		t.Errorf("the upstream got %q; want nothing", got)
	}
	// The whole body still passes.
	resp, ok := rawExchange(t, proxyAddr, []byte(head+part+part))
	if !ok || firstStatus(resp) != "200" || !strings.Contains(resp, "ok ") {
		t.Errorf("whole body: got %q; want 200", resp)
	}
	if got := be.requests(); len(got) != 1 || got[0] != "POST /upload" {
		t.Errorf("upstream got %q; want one POST /upload", got)
	}
}

// rawUpstream is a real upstream that answers each request read on a
// connection with resp, byte for byte, and closes the connection after
// each answer (resp says Connection: close).
func rawUpstream(t *testing.T, resp string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if line == "\r\n" {
						_, _ = io.WriteString(c, resp)
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestResponseHopFields: the hop-by-hop fields of an upstream's response
// and those its Connection field names are dropped whatever their case
// (an upstream's field names are passed on as written), its
// Connection: close does not close the client's connection, and the other
// fields pass.
func TestResponseHopFields(t *testing.T) {
	up := rawUpstream(t, "HTTP/1.1 200 OK\r\nconnection: X-Foo, close\r\nkeep-alive: timeout=5\r\nx-foo: 1\r\nX-Bar: 2\r\n"+
		"PROXY-CONNECTION: x\r\nupgrade: h2c\r\nContent-Length: 2\r\n\r\nok")
	cfg := oneHost("h.test", up)
	p, _ := newProxy(t, cfg, Config{})
	c := dialTest(t, serve(t, p.Serve))
	br := bufio.NewReader(c)
	for i := range 2 { // the second on the same client connection
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: h.test\r\n\r\n"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" || resp.Header.Get("X-Bar") != "2" || resp.Close {
			t.Errorf("request %d: got %d %q %v close=%t; want 200 ok, X-Bar, kept alive", i, resp.StatusCode, body, resp.Header, resp.Close)
		}
		for _, h := range []string{"Connection", "Keep-Alive", "X-Foo", "Proxy-Connection", "Upgrade"} {
			if v, ok := resp.Header[h]; ok {
				t.Errorf("request %d: %s: %q passed to the client", i, h, v)
			}
		}
	}
}

func TestStripHopHeadersAllocs(t *testing.T) {
	var h fasthttp.ResponseHeader
	h.DisableNormalizing()
	if err := h.Read(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: x\r\nContent-Length: 2\r\n\r\n"))); err != nil {
		t.Fatal(err)
	}
	var scratch []byte
	if n := testing.AllocsPerRun(100, func() { scratch = stripHopHeaders(&h, true, scratch) }); n != 0 {
		t.Errorf("stripHopHeaders: %v allocs; want 0", n)
	}
}

// TestMadeRequestIDLogged: the X-Request-ID the proxy makes for a request
// that came without one is the one the access log shows.
func TestMadeRequestIDLogged(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Header.Get("X-Request-Id"))
	}))
	t.Cleanup(srv.Close)
	cfg := oneHost("id.test", strings.TrimPrefix(srv.URL, "http://"))
	var log lockedBuffer
	p, _ := newProxy(t, cfg, Config{AccessLog: &log})
	base := "http://" + serve(t, p.Serve)
	_, id := get(t, base+"/", "id.test", nil)
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
		t.Fatalf("upstream got X-Request-ID %q; want 32 hex digits", id)
	}
	if lines := log.lines(); len(lines) != 1 || !strings.HasSuffix(lines[0], " "+id) {
		t.Errorf("access log %q; want it to end with %s", lines, id)
	}
}

// varsPicker records, for each Pick, the $http_x_forwarded_for and
// $http_x_request_id it read.
type varsPicker struct {
	*balancer.Registry

	mu   sync.Mutex
	seen []string
}

func (p *varsPicker) Pick(backend string, req balancer.Request, a *balancer.Attempt) (*balancer.Pick, error) {
	xff, _ := req.Var("http_x_forwarded_for")
	id, hasID := req.Var("http_x_request_id")
	p.mu.Lock()
	p.seen = append(p.seen, string(xff)+" id="+string(id)+" "+map[bool]string{true: "set", false: "unset"}[hasID])
	p.mu.Unlock()
	return p.Registry.Pick(backend, req, a)
}

// TestPickSeesClientFields: on every HTTP/1.1 path (body buffered, body
// streamed, a head with a Connection-named field, an upgrade) a Pick reads
// the client's fields as sent, as nginx's $http_* variables are, while the
// upstream gets them edited (X-Forwarded-For extended, an X-Request-ID
// made).
func TestPickSeesClientFields(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, r.Header.Get("X-Forwarded-For")+" id="+r.Header.Get("X-Request-Id"))
	}))
	t.Cleanup(srv.Close)
	cfg := oneHost("v.test", strings.TrimPrefix(srv.URL, "http://"))
	// The client's X-Forwarded-For is extended, not replaced.
	cfg.Global.UseForwardedHeaders, cfg.Global.ComputeFullForwardedFor = true, true
	reg := balancer.NewRegistry(balancer.Config{})
	if err := reg.Apply(cfg.Backends); err != nil {
		t.Fatal(err)
	}
	picker := &varsPicker{Registry: reg}
	p, err := New(Config{Picker: picker, BodyBufferBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	p.Update(cfg)
	addr := serve(t, p.Serve)
	const fields = "Host: v.test\r\nX-Forwarded-For: 198.51.100.1\r\nConnection: close\r\n"
	for _, tc := range []struct{ name, raw string }{
		{"buffered", "GET / HTTP/1.1\r\n" + fields + "\r\n"},
		{"streamed", "POST / HTTP/1.1\r\n" + fields + "Content-Length: 2000\r\n\r\n" + strings.Repeat("x", 2000)},
		{"connection-named field", "GET / HTTP/1.1\r\nHost: v.test\r\nX-Forwarded-For: 198.51.100.1\r\nConnection: X-Hop\r\nX-Hop: 1\r\n\r\n"},
		{"upgrade", "GET / HTTP/1.1\r\nHost: v.test\r\nX-Forwarded-For: 198.51.100.1\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(picker.seen)
			resp, ok := rawExchange(t, addr, []byte(tc.raw))
			if !ok || firstStatus(resp) != "200" {
				t.Fatalf("got %q; want 200", resp)
			}
			if !regexp.MustCompile(`198\.51\.100\.1, 127\.0\.0\.1 id=[0-9a-f]{32}$`).MatchString(resp) {
				t.Errorf("upstream got %q; want X-Forwarded-For extended and a made X-Request-ID", resp)
			}
			picker.mu.Lock()
			seen := picker.seen[before:]
			picker.mu.Unlock()
			if len(seen) != 1 || seen[0] != "198.51.100.1 id= unset" {
				t.Errorf("Pick saw %q; want the client's X-Forwarded-For and no X-Request-ID", seen)
			}
		})
	}
}

// TestUpstreamFieldsNginxHides: the upstream response fields nginx's proxy
// module hides (proxy_hide_header's defaults) do not reach the client on
// either front end: its own Date replaces the upstream's, the upstream's
// Server is not passed, nor X-Pad or X-Accel-*; and a response sent
// without a Content-Type gets none.
func TestUpstreamFieldsNginxHides(t *testing.T) {
	const oldDate = "Tue, 01 Jan 2000 00:00:00 GMT"
	up := rawUpstream(t, "HTTP/1.1 200 OK\r\nDate: "+oldDate+"\r\nserver: upstream/1.0\r\nX-Accel-Redirect: /internal\r\nX-Pad: avoid browser bug\r\n"+
		"X-Kept: 1\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	cfg := oneHost("h.test", up)
	check := func(t *testing.T, h http.Header, body string) {
		t.Helper()
		if body != "ok" || h.Get("X-Kept") != "1" {
			t.Errorf("got %q %v; want ok and X-Kept", body, h)
		}
		if d := h.Get("Date"); d == "" || d == oldDate {
			t.Errorf("Date %q; want the proxy's own", d)
		}
		if s := h.Get("Server"); s != "" && s != "switchyard" {
			t.Errorf("Server %q; want none or the proxy's", s)
		}
		for _, name := range []string{"X-Accel-Redirect", "X-Pad", "Content-Type"} {
			if v, ok := h[name]; ok {
				t.Errorf("%s: %q reached the client", name, v)
			}
		}
	}
	t.Run("HTTP/1.1", func(t *testing.T) {
		p, _ := newProxy(t, cfg, Config{})
		resp, body := get(t, "http://"+serve(t, p.Serve)+"/", "h.test", nil)
		check(t, resp.Header, body)
	})
	t.Run("HTTP/2", func(t *testing.T) {
		resp, body := h2Do(t, h2Client(t), http.MethodGet, h2Proxy(t, cfg, Config{})+"/", "h.test", nil, nil)
		if resp.ProtoMajor != 2 {
			t.Fatalf("got %s; want HTTP/2", resp.Proto)
		}
		check(t, resp.Header, body)
	})
}
