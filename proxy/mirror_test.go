package proxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// mirrored is what a mirror target received.
type mirrored struct {
	Method, URI, Host, Body string
	// Fields are the request fields the test asks about ("" absent).
	Fields map[string]string
}

// mirrorTarget is a real mirror target on loopback recording every
// request it gets; its answers are 200 with a body, or take hold to come.
type mirrorTarget struct {
	addr string
	got  chan mirrored
	hold time.Duration
}

var mirrorFields = []string{"X-Trace", "Te", "Keep-Alive", "Upgrade", "X-Forwarded-For", "Content-Length"}

func startMirrorTarget(t *testing.T, ip string, hold time.Duration) *mirrorTarget {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	m := &mirrorTarget{addr: ln.Addr().String(), got: make(chan mirrored, 64), hold: hold}
	srv := &http.Server{ReadHeaderTimeout: defaultTestTimeout, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec := mirrored{Method: r.Method, URI: r.RequestURI, Host: r.Host, Body: string(b), Fields: map[string]string{}}
		for _, f := range mirrorFields {
			rec.Fields[f] = r.Header.Get(f)
		}
		m.got <- rec
		if m.hold > 0 {
			select {
			case <-time.After(m.hold):
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, strings.Repeat("mirror answer ", 1000))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return m
}

// next waits for the next request the target gets.
func (m *mirrorTarget) next(t *testing.T) mirrored {
	t.Helper()
	select {
	case r := <-m.got:
		return r
	case <-time.After(defaultTestTimeout):
		t.Fatal("the mirror target got no request")
	}
	return mirrored{}
}

// none checks that the target gets nothing within a short while.
func (m *mirrorTarget) none(t *testing.T) {
	t.Helper()
	select {
	case r := <-m.got:
		t.Errorf("the mirror target got %+v; want nothing", r)
	case <-time.After(300 * time.Millisecond):
	}
}

// mirrorConfig serves host mirror.test: "/" with mi, "/plain" without.
func mirrorConfig(backendAddr string, mi *model.Mirror) *model.Configuration {
	withMirror := loc("/", model.PathTypePrefix, "be")
	withMirror.Mirror = mi
	rewritten := loc("/rw", model.PathTypePrefix, "be")
	rewritten.Mirror, rewritten.Rewrite.Target = mi, "/other"
	denied := loc("/denied", model.PathTypePrefix, "be")
	denied.Mirror, denied.AllowSourceRanges = mi, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	return &model.Configuration{
		Backends: []*model.Backend{{Name: "be", Endpoints: endpoints(backendAddr)}},
		Servers: []model.Server{{Hostname: "mirror.test", Locations: []model.Location{
			rewritten, denied, loc("/plain", model.PathTypePrefix, "be"), withMirror}}},
	}
}

func mirrorOf(addr string, uri model.URLTemplate, body bool) *model.Mirror {
	return &model.Mirror{Source: "/_mirror-uid", Scheme: "http", HostPort: addr, Host: "shadow.example", URI: uri, RequestBody: body}
}

// TestMirror: the copy has the client's method, the URI the target's
// template makes with nginx's values ($request_uri as sent, before
// rewrite-target; $args; "/_mirror-<uid>" where nginx's subrequest has its
// own URI), the mirror's Host, the client's fields less those nginx's
// proxy module drops, and the body when mirror-request-body is on; a
// location without mirror, and a request refused before upstream, send
// none. What the main request gets is unchanged.
func TestMirror(t *testing.T) {
	be := backend(t, "main")
	target := startMirrorTarget(t, "127.0.0.1", 0)
	reqURI := model.URLTemplate{{Var: model.VarRequestURI}}
	all := model.URLTemplate{{Literal: "/m/_mirror-uid?"}, {Var: model.VarArgs}, {Literal: "&h="}, {Var: model.VarHost},
		{Literal: "&s="}, {Var: model.VarScheme}, {Var: model.VarIsArgs}}
	for _, tt := range []struct {
		name   string
		uri    model.URLTemplate
		body   bool
		method string
		path   string
		send   string
		want   *mirrored
	}{
		{"request_uri", reqURI, true, "GET", "/a/x%20y?q=1&r=2", "",
			&mirrored{Method: "GET", URI: "/a/x%20y?q=1&r=2", Host: "shadow.example"}},
		{"variables", all, true, "GET", "/a?q=1", "",
			&mirrored{Method: "GET", URI: "/m/_mirror-uid?q=1&h=mirror.test&s=http?", Host: "shadow.example"}},
		{"literal path", model.URLTemplate{{Literal: "/copy"}, {Var: model.VarIsArgs}, {Var: model.VarArgs}}, true, "GET", "/a", "",
			&mirrored{Method: "GET", URI: "/copy", Host: "shadow.example"}},
		{"post body", reqURI, true, "POST", "/p", "hello mirror",
			&mirrored{Method: "POST", URI: "/p", Host: "shadow.example", Body: "hello mirror"}},
		{"post body off", reqURI, false, "PUT", "/p", "hello mirror",
			&mirrored{Method: "PUT", URI: "/p", Host: "shadow.example"}},
		{"rewrite-target", reqURI, true, "GET", "/rw/x?y=1", "",
			&mirrored{Method: "GET", URI: "/rw/x?y=1", Host: "shadow.example"}},
		{"no mirror", reqURI, true, "GET", "/plain", "", nil},
		{"refused", reqURI, true, "GET", "/denied", "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base, _ := start(t, mirrorConfig(be, mirrorOf(target.addr, tt.uri, tt.body)))
			var body io.Reader
			if tt.send != "" {
				body = strings.NewReader(tt.send)
			}
			req, _ := http.NewRequest(tt.method, base+tt.path, body)
			req.Host = "Mirror.Test"
			req.Header.Set("X-Trace", "t1")
			req.Header.Set("Te", "trailers")
			req.Header.Set("Keep-Alive", "timeout=5")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if tt.want == nil {
				target.none(t)
				return
			}
			if resp.StatusCode != 200 || !strings.HasPrefix(string(b), "main "+tt.method) {
				t.Fatalf("main answer %d %q; want 200 from main", resp.StatusCode, b)
			}
			got := target.next(t)
			want := *tt.want
			want.Fields = map[string]string{"X-Trace": "t1", "Te": "", "Keep-Alive": "", "Upgrade": "", "X-Forwarded-For": "", "Content-Length": ""}
			if want.Body != "" {
				want.Fields["Content-Length"] = "12"
			}
			if tt.send != "" && !tt.body {
				want.Fields["Content-Length"] = "0"
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the mirror got (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMirrorHTTP2: a request over HTTP/2 is mirrored too, with its body.
func TestMirrorHTTP2(t *testing.T) {
	be := backend(t, "main")
	target := startMirrorTarget(t, "127.0.0.1", 0)
	base := h2Proxy(t, mirrorConfig(be, mirrorOf(target.addr, model.URLTemplate{{Var: model.VarRequestURI}}, true)), Config{})
	c := h2Client(t)
	resp, _ := h2Do(t, c, "POST", base+"/h2?x=1", "mirror.test", strings.NewReader("over h2"), map[string]string{"X-Trace": "t2"})
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("main answer %s %d; want HTTP/2 200", resp.Proto, resp.StatusCode)
	}
	got := target.next(t)
	want := mirrored{Method: "POST", URI: "/h2?x=1", Host: "shadow.example", Body: "over h2",
		Fields: map[string]string{"X-Trace": "t2", "Te": "", "Keep-Alive": "", "Upgrade": "", "X-Forwarded-For": "", "Content-Length": "7"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the mirror got (-want +got):\n%s", diff)
	}
	resp, _ = h2Do(t, c, "GET", base+"/h2get", "mirror.test", nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("main answer %d; want 200", resp.StatusCode)
	}
	if got := target.next(t); got.Method != "GET" || got.URI != "/h2get" {
		t.Errorf("the mirror got %+v; want GET /h2get", got)
	}
}

// TestMirrorNeverHoldsTheClient: a mirror that takes seconds to answer, one
// that accepts and never answers, and one where nothing listens leave the
// main answers as fast as without a mirror, on one keep-alive connection
// (nginx would hold it: docs/compatibility.md); failures are counted.
func TestMirrorNeverHoldsTheClient(t *testing.T) {
	be := backend(t, "main")
	slow := startMirrorTarget(t, "127.0.0.1", 3*time.Second)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		silent.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	for _, tt := range []struct{ name, addr string }{
		{"slow", slow.addr}, {"silent", silent.Addr().String()}, {"dead", deadAddr(t)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			mi := mirrorOf(tt.addr, model.URLTemplate{{Var: model.VarRequestURI}}, true)
			var logMu sync.Mutex
			var lines []string
			errLog := func(msg string) {
				logMu.Lock()
				lines = append(lines, msg)
				logMu.Unlock()
			}
			p, _ := newProxy(t, mirrorConfig(be, mi), Config{Registerer: reg, ErrorLog: errLog})
			base := "http://" + serve(t, p.Serve)
			c := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
			defer c.CloseIdleConnections()
			for i := 0; i < 5; i++ {
				began := time.Now()
				req, _ := http.NewRequest("POST", base+"/x", strings.NewReader("body"))
				req.Host = "mirror.test"
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if took := time.Since(began); took > time.Second || resp.StatusCode != 200 || !strings.HasPrefix(string(b), "main POST") {
					t.Fatalf("request %d: %d %q in %v; want main's 200 well within a second", i, resp.StatusCode, b, took)
				}
			}
			if tt.name == "dead" {
				waitCount(t, reg, "error", 5)
				// Five failures within a second or two: one line a second.
				logMu.Lock()
				defer logMu.Unlock()
				if len(lines) == 0 || len(lines) > 2 || !strings.HasPrefix(lines[0], "mirror http://"+tt.addr+": ") {
					t.Errorf("error log %q; want one or two lines naming the mirror", lines)
				}
			}
		})
	}
}

// waitCount waits until switchyard_mirror_requests_total{result} is n.
func waitCount(t *testing.T, reg *prometheus.Registry, result string, n float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	for {
		got := mirrorCount(t, reg, result)
		if got == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("switchyard_mirror_requests_total{result=%q} = %v; want %v", result, got, n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func mirrorCount(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_mirror_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// TestMirrorBounded: with MirrorConcurrency copies held by a slow mirror,
// the next copies are dropped and counted, the main requests all served;
// once the mirror answers, copies go again.
func TestMirrorBounded(t *testing.T) {
	be := backend(t, "main")
	release := make(chan struct{})
	arrived := make(chan string, 16)
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	msrv := &http.Server{ReadHeaderTimeout: defaultTestTimeout, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.RequestURI
		<-release
	})}
	go func() { _ = msrv.Serve(mln) }()
	t.Cleanup(func() { _ = msrv.Close() })
	reg := prometheus.NewRegistry()
	mi := mirrorOf(mln.Addr().String(), model.URLTemplate{{Var: model.VarRequestURI}}, true)
	p, _ := newProxy(t, mirrorConfig(be, mi), Config{Registerer: reg, MirrorConcurrency: 2})
	base := "http://" + serve(t, p.Serve)
	do := func(path string) {
		t.Helper()
		resp, b := get(t, base+path, "mirror.test", nil)
		if resp.StatusCode != 200 || !strings.HasPrefix(b, "main GET") {
			t.Fatalf("%s: %d %q; want main's 200", path, resp.StatusCode, b)
		}
	}
	do("/1")
	do("/2")
	for i := 0; i < 2; i++ {
		select {
		case <-arrived:
		case <-time.After(defaultTestTimeout):
			t.Fatal("the mirror did not get the first two copies")
		}
	}
	for i := 0; i < 3; i++ {
		do("/over")
	}
	if n := mirrorCount(t, reg, "dropped"); n != 3 {
		t.Errorf("dropped %v; want 3", n)
	}
	close(release)
	waitCount(t, reg, "sent", 2)
	do("/again")
	select {
	case u := <-arrived:
		if u != "/again" {
			t.Errorf("the mirror got %q; want /again", u)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("no copy after the mirror answered")
	}
	waitCount(t, reg, "sent", 3)
	if n := testutil.CollectAndCount(reg, "switchyard_mirror_requests_total"); n != len(mirrorResultNames) {
		t.Errorf("%d series; want %d", n, len(mirrorResultNames))
	}
}

// TestMirrorStreamedBody: a body too long to hold (over BodyBufferBytes) goes
// upstream whole but is not mirrored, counted as body_streamed; with
// mirror-request-body off the copy goes without it.
func TestMirrorStreamedBody(t *testing.T) {
	be := backend(t, "main")
	target := startMirrorTarget(t, "127.0.0.1", 0)
	for _, body := range []bool{true, false} {
		reg := prometheus.NewRegistry()
		mi := mirrorOf(target.addr, model.URLTemplate{{Var: model.VarRequestURI}}, body)
		p, _ := newProxy(t, mirrorConfig(be, mi), Config{Registerer: reg, BodyBufferBytes: 1024})
		base := "http://" + serve(t, p.Serve)
		req, _ := http.NewRequest("POST", base+"/big", bytes.NewReader(bytes.Repeat([]byte("b"), 4096)))
		req.Host = "mirror.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("main answer %d; want 200", resp.StatusCode)
		}
		if body {
			target.none(t)
			if n := mirrorCount(t, reg, "body_streamed"); n != 1 {
				t.Errorf("body_streamed %v; want 1", n)
			}
			continue
		}
		if got := target.next(t); got.URI != "/big" || got.Body != "" || got.Fields["Content-Length"] != "0" {
			t.Errorf("the mirror got %+v; want /big without a body, Content-Length 0", got)
		}
	}
}

// TestMirrorHTTPS: an https target is reached over TLS, its certificate not
// verified (nginx's proxy_ssl_verify off), with the port the target names.
func TestMirrorHTTPS(t *testing.T) {
	be := backend(t, "main")
	got := make(chan string, 4)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.RequestURI + " " + r.Host + " tls=" + strconv.FormatBool(r.TLS != nil)
	}))
	t.Cleanup(srv.Close)
	mi := mirrorOf(strings.TrimPrefix(srv.URL, "https://"), model.URLTemplate{{Var: model.VarRequestURI}}, true)
	mi.Scheme = "https"
	base, _ := start(t, mirrorConfig(be, mi))
	resp, _ := get(t, base+"/s?x=1", "mirror.test", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("main answer %d; want 200", resp.StatusCode)
	}
	select {
	case g := <-got:
		if want := "GET /s?x=1 shadow.example tls=true"; g != want {
			t.Errorf("the mirror got %q; want %q", g, want)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("the https mirror got nothing")
	}
}

// BenchmarkProxyMirror is BenchmarkProxyHTTP1's request with every request
// mirrored to a fasthttp target on loopback: what a copy costs the request
// path (the copy's own sending runs beside it).
func BenchmarkProxyMirror(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("mirror") }}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown() })
	mi := mirrorOf(ln.Addr().String(), model.URLTemplate{{Var: model.VarRequestURI}}, true)
	benchProxyWith(b, Config{}, func(cfg *model.Configuration) {
		for i := range cfg.Servers {
			for j := range cfg.Servers[i].Locations {
				cfg.Servers[i].Locations[j].Mirror = mi
			}
		}
	})
}
