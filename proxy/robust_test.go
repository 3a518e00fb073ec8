package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// seenBackend is a real upstream that records the request lines it gets.
type seenBackend struct {
	mu   sync.Mutex
	seen []string
}

func (s *seenBackend) start(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.seen = append(s.seen, r.Method+" "+r.URL.RequestURI())
		s.mu.Unlock()
		_, _ = io.WriteString(w, "ok "+strings.Repeat("x", int(n%2)))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func (s *seenBackend) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// rawExchange writes raw bytes to addr, half-closes, and reads until the
// proxy closes the connection or the deadline passes. It returns the bytes
// read and whether the connection ended (answered or closed) in time.
func rawExchange(t testing.TB, addr string, raw []byte) (string, bool) {
	t.Helper()
	c := dialTest(t, addr)
	_, _ = c.Write(raw) // the proxy may close before taking it all
	_ = c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() {
		return string(b), false
	}
	return string(b), true
}

// firstStatus is the status line's code of a raw response, "" if none.
func firstStatus(resp string) string {
	line, _, _ := strings.Cut(resp, "\r\n")
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
		return ""
	}
	return f[1]
}

// TestRequestSmuggling: requests whose framing is ambiguous are refused
// with 400 and the connection closed (as nginx since 1.21.1, RFC 9112
// §6.3); nothing of them reaches the upstream, and no second request can
// be smuggled behind them.
func TestRequestSmuggling(t *testing.T) {
	var be seenBackend
	addr := be.start(t)
	cfg := oneHost("s.test", addr)
	p, _ := newProxy(t, cfg, Config{})
	proxyAddr := serve(t, p.Serve)
	const smuggled = "GET /smuggled HTTP/1.1\r\nHost: s.test\r\n\r\n"
	for _, tc := range []struct {
		name, raw string
	}{
		{"CL then TE", "POST /a HTTP/1.1\r\nHost: s.test\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"TE then CL", "POST /a HTTP/1.1\r\nHost: s.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n" + smuggled},
		{"two Content-Length", "POST /a HTTP/1.1\r\nHost: s.test\r\nContent-Length: 0\r\nContent-Length: 44\r\n\r\n" + smuggled},
		{"Content-Length list", "POST /a HTTP/1.1\r\nHost: s.test\r\nContent-Length: 0, 44\r\n\r\n" + smuggled},
		{"signed Content-Length", "POST /a HTTP/1.1\r\nHost: s.test\r\nContent-Length: +44\r\n\r\n" + smuggled},
		{"unknown coding", "POST /a HTTP/1.1\r\nHost: s.test\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"coding list", "POST /a HTTP/1.1\r\nHost: s.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"two Transfer-Encoding", "POST /a HTTP/1.1\r\nHost: s.test\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"TE in HTTP/1.0", "POST /a HTTP/1.0\r\nHost: s.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"space before colon", "POST /a HTTP/1.1\r\nHost: s.test\r\nTransfer-Encoding : chunked\r\nContent-Length: 0\r\n\r\n" + smuggled},
		{"two Host", "GET /a HTTP/1.1\r\nHost: s.test\r\nHost: other.test\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(be.requests())
			resp, ok := rawExchange(t, proxyAddr, []byte(tc.raw))
			if !ok {
				t.Fatalf("no answer and no close within %v; got %q", defaultTestTimeout, resp)
			}
			if got := firstStatus(resp); got != "400" {
				t.Errorf("got status %q (%q); want 400", got, resp)
			}
			if n := strings.Count(resp, "HTTP/1.1 "); n > 1 {
				t.Errorf("got %d responses on one connection; want 1: %q", n, resp)
			}
			if got := be.requests()[before:]; len(got) != 0 {
				t.Errorf("the upstream got %q; want nothing", got)
			}
		})
	}
	// A well-framed request on the same proxy still passes.
	resp, ok := rawExchange(t, proxyAddr, []byte("POST /ok HTTP/1.1\r\nHost: s.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n1\r\nx\r\n0\r\n\r\n"))
	if !ok || firstStatus(resp) != "200" {
		t.Errorf("chunked request: got %q; want 200", resp)
	}
}

// TestOversizedHeaders: request headers over MaxHeaderBytes are refused on
// both front ends: HTTP/1.1 as nginx refuses a head over its buffers (400
// "Request Header Or Cookie Too Large", headread.go), HTTP/2 with 431
// (SETTINGS_MAX_HEADER_LIST_SIZE).
func TestOversizedHeaders(t *testing.T) {
	var be seenBackend
	addr := be.start(t)
	cfg := oneHost("big.test", addr)
	p, _ := newProxy(t, cfg, Config{MaxHeaderBytes: 4 << 10})
	plain, secure := serve(t, p.Serve), serve(t, p.ServeTLS)
	big := strings.Repeat("x", 8<<10)

	resp, ok := rawExchange(t, plain, []byte("GET / HTTP/1.1\r\nHost: big.test\r\nX-Big: "+big+"\r\n\r\n"))
	if !ok || firstStatus(resp) != "400" || !strings.HasSuffix(resp, "Request Header Or Cookie Too Large") {
		t.Errorf("HTTP/1.1: got %q; want 400 Request Header Or Cookie Too Large", resp)
	}
	resp, ok = rawExchange(t, plain, []byte("GET / HTTP/1.1\r\nHost: big.test\r\nX-Small: 1\r\nConnection: close\r\n\r\n"))
	if !ok || firstStatus(resp) != "200" {
		t.Errorf("HTTP/1.1 under the limit: got %q; want 200", resp)
	}

	// HTTP/2: a header list over the limit the proxy advertises
	// (SETTINGS_MAX_HEADER_LIST_SIZE) is refused by a conforming client
	// before it is sent, else by the proxy: 431, or a connection error
	// (COMPRESSION_ERROR) for a single field over the limit.
	for _, hdr := range []map[string]string{
		{"X-Big": big},
		{"X-A": big[:3<<10], "X-B": big[:3<<10]},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+secure+"/", nil)
		req.Host = "big.test"
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		r, err := h2Client(t).Do(req)
		if err == nil {
			_ = r.Body.Close()
			if r.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("HTTP/2 with %d big headers: got %s %d; want 431 or a refusal", len(hdr), r.Proto, r.StatusCode)
			}
		}
		cancel()
	}
	if got := be.requests(); len(got) != 1 {
		t.Errorf("the upstream got %q; want only the small request", got)
	}
}

// TestTLSHandshakeTimeout: a client that connects to the TLS port and
// says nothing is disconnected after ReadTimeout.
func TestTLSHandshakeTimeout(t *testing.T) {
	p, _ := newProxy(t, &model.Configuration{}, Config{ReadTimeout: 200 * time.Millisecond})
	addr := serve(t, p.ServeTLS)
	c := dialTest(t, addr)
	if _, err := bufio.NewReader(c).ReadByte(); err != io.EOF {
		t.Errorf("got %v; want the proxy to close the silent connection (EOF)", err)
	}
	// A real handshake still works afterwards.
	tc := tls.Client(dialTest(t, addr), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // fake certificate
	if err := tc.Handshake(); err != nil {
		t.Errorf("handshake: %v", err)
	}
}

// dialTest connects to addr with defaultTestTimeout as the connection's
// deadline; the test closes it.
func dialTest(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, defaultTestTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(defaultTestTimeout))
	return c
}

// FuzzProxyRequest throws arbitrary request lines, headers and bodies at a
// running proxy over a real connection: it must never crash or hang, and
// must answer each connection with HTTP or close it; a well-formed
// request afterwards is still served.
func FuzzProxyRequest(f *testing.F) {
	for _, seed := range []struct {
		line, headers string
		body          []byte
	}{
		{"GET / HTTP/1.1", "Host: f.test", nil},
		{"POST /up?x=1 HTTP/1.1", "Host: f.test\r\nContent-Length: 3", []byte("abc")},
		{"POST / HTTP/1.1", "Host: f.test\r\nTransfer-Encoding: chunked", []byte("3\r\nabc\r\n0\r\n\r\n")},
		{"POST / HTTP/1.1", "Host: f.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked", []byte("0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: f.test\r\n\r\n")},
		{"GET / HTTP/1.1", "Host: f.test\r\nConnection: upgrade\r\nUpgrade: websocket", nil},
		{"GET http://f.test/abs HTTP/1.1", "Host: other.test", nil},
		{"OPTIONS * HTTP/1.1", "Host: f.test", nil},
		{"GET /../../etc/passwd HTTP/1.0", "", nil},
		{"PRI * HTTP/2.0", "", []byte("SM\r\n\r\n")},
	} {
		f.Add(seed.line, seed.headers, seed.body)
	}
	var be seenBackend
	addr := be.start(f)
	l := loc("/", model.PathTypePrefix, "be")
	l.Proxy.BodySizeBytes = 1 << 20
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "be", Endpoints: endpoints(addr)}},
		Servers:  []model.Server{{Hostname: "f.test", Locations: []model.Location{l}}},
	}
	p, _ := newProxy(f, cfg, Config{ReadTimeout: 2 * time.Second})
	proxyAddr := serve(f, p.Serve)
	f.Fuzz(func(t *testing.T, line, headers string, body []byte) {
		raw := append([]byte(line+"\r\n"+headers+"\r\n\r\n"), body...)
		resp, ok := rawExchange(t, proxyAddr, raw)
		if !ok {
			t.Fatalf("%q: neither answered nor closed within %v; got %q", raw, defaultTestTimeout, resp)
		}
		if resp != "" && !strings.HasPrefix(resp, "HTTP/1.") {
			t.Fatalf("%q: the proxy answered %q; want HTTP or nothing", raw, resp)
		}
		resp, ok = rawExchange(t, proxyAddr, []byte("GET /alive HTTP/1.1\r\nHost: f.test\r\nConnection: close\r\n\r\n"))
		if !ok || firstStatus(resp) != "200" {
			t.Fatalf("after %q the proxy no longer serves: %q", raw, resp)
		}
	})
}
