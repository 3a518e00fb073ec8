package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// countingBackend is a real upstream on loopback address ip that counts
// the requests whose head it got, by path.
type countingBackend struct {
	mu    sync.Mutex
	heads map[string]int
}

func (b *countingBackend) count(path string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.heads[path]
}

func (b *countingBackend) start(t *testing.T, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Skipf("no %s on this host: %v", ip, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		if b.heads == nil {
			b.heads = map[string]int{}
		}
		b.heads[r.URL.Path]++
		b.mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().String()
}

// TestClientBodyErrors: a request body the client breaks (a malformed
// chunk, a body cut short, a client gone mid-body) is the client's
// fault: the client gets 400, as nginx answers "client sent invalid
// chunked body" and "client prematurely closed connection", the access
// log says 400, and the peers are not charged: no failure counted
// (switchyard_balancer_endpoint_failures_total), nothing left in flight,
// no retry on the next peer. The body is streamed upstream, so the error
// surfaces while writing it there; it used to be taken for the upstream's
// (502, one failure per request).
func TestClientBodyErrors(t *testing.T) {
	var b1, b2 countingBackend
	peers := []string{b1.start(t, "127.0.0.2"), b2.start(t, "127.0.0.3")}
	cfg := &model.Configuration{
		// ewma: a broken body must not become a latency sample either.
		Backends: []*model.Backend{{Name: "be", Algorithm: model.EWMA, Endpoints: endpoints(peers...)}},
		Servers:  []model.Server{{Hostname: "body.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "be")}}},
	}
	var log lockedBuffer
	p, reg := newProxy(t, cfg, Config{AccessLog: &log})
	addr := serve(t, p.Serve)
	// Each case has its own path ("/up" replaced by the case's), so the
	// peers' counts tell the cases apart.
	const chunked = "POST /up HTTP/1.1\r\nHost: body.test\r\nTransfer-Encoding: chunked\r\n\r\n"
	const smuggled = "GET /next HTTP/1.1\r\nHost: body.test\r\n\r\n"
	long := "POST /up HTTP/1.1\r\nHost: body.test\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 70000)
	for _, tc := range []struct {
		name, raw string
		// gone: the client closes the connection outright; nothing can
		// be read back, the access log tells.
		gone bool
	}{
		{name: "bad chunk size", raw: chunked + "3\r\nabc\r\nzz\r\nabc\r\n0\r\n\r\n" + smuggled},
		{name: "no CRLF after chunk data", raw: chunked + "3\r\nabcXX0\r\n\r\n" + smuggled},
		{name: "chunk cut short", raw: chunked + "5\r\nab"},
		{name: "no last chunk", raw: chunked + "3\r\nabc\r\n"},
		{name: "Content-Length body cut short", raw: long},
		{name: "client gone mid-body", raw: long, gone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/" + strings.ReplaceAll(tc.name, " ", "-")
			tc.raw = strings.Replace(tc.raw, "/up", path, 1)
			lines := logLines(&log)
			if tc.gone {
				c := dialTest(t, addr)
				if _, err := io.WriteString(c, tc.raw); err != nil {
					t.Fatal(err)
				}
				_ = c.Close()
			} else {
				resp, ok := rawExchange(t, addr, []byte(tc.raw))
				if !ok || firstStatus(resp) != "400" {
					t.Errorf("got %.120q; want 400", resp)
				}
				if n := strings.Count(resp, "HTTP/1.1 "); n != 1 {
					t.Errorf("got %d responses; want 1 (the rest of a broken body is no request): %q", n, resp)
				}
			}
			waitFor(t, func() bool { return logLines(&log) > lines })
			all := log.lines()
			last := all[len(all)-1]
			if !strings.Contains(last, `HTTP/1.1" 400 `) {
				t.Errorf("access log: got %q; want status 400", last)
			}
			if got := b1.count(path) + b2.count(path); got > 1 {
				t.Errorf("the peers got %d requests; want at most 1 (no retry)", got)
			}
			for _, bs := range reg.Backends() {
				for _, e := range bs.Endpoints {
					if e.Failures != 0 || e.InFlight != 0 || e.Requests != 0 || e.EWMA != -1 {
						t.Errorf("endpoint %s: %d failures, %d in flight, %d requests, ewma %v; want nothing counted or scored",
							e.Address, e.Failures, e.InFlight, e.Requests, e.EWMA)
					}
				}
			}
		})
	}
	// A whole chunked body still passes.
	resp, ok := rawExchange(t, addr, []byte(chunked+"3\r\nabc\r\n0\r\n\r\n"))
	if !ok || firstStatus(resp) != "200" {
		t.Errorf("whole chunked body: got %q; want 200", resp)
	}
}

// waitFor polls cond until it holds, failing the test after
// defaultTestTimeout.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(defaultTestTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("condition not met within %v", defaultTestTimeout)
		case <-tick.C:
		}
	}
}

// logLines counts the lines of an access log.
func logLines(l *lockedBuffer) int {
	n := 0
	for _, line := range l.lines() {
		if line != "" {
			n++
		}
	}
	return n
}

// TestClientBodyErrorsAgainstNginx: nginx, proxying as ingress-nginx's
// template does (proxy_pass, HTTP/1.1 upstream, request buffering on or
// off), takes the broken bodies of TestClientBodyErrors as the proxy
// does: a malformed chunk is answered 400, and with request buffering on
// (ingress-nginx's default) a body cut short by the client (here a
// half-close) is logged 400 (nginx answers nothing: it takes the
// half-close for the client gone; the proxy answers 400 too).
// Skipped without an nginx binary.
func TestClientBodyErrorsAgainstNginx(t *testing.T) {
	bin := nginxBinary(t)
	var be countingBackend
	peer := be.start(t, "127.0.0.2")
	var goBe countingBackend
	var goLog lockedBuffer
	p, _ := newProxy(t, oneHost("body.test", goBe.start(t, "127.0.0.2")), Config{AccessLog: &goLog})
	goAddr := serve(t, p.Serve)
	const chunked = "POST /up HTTP/1.1\r\nHost: body.test\r\nTransfer-Encoding: chunked\r\n\r\n"
	long := "POST /up HTTP/1.1\r\nHost: body.test\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 70000)
	cases := []struct {
		name, raw string
		// cut: the client half-closes after raw; compared by the
		// status logged.
		cut bool
	}{
		{name: "bad chunk size", raw: chunked + "3\r\nabc\r\nzz\r\nabc\r\n0\r\n\r\n"},
		{name: "no CRLF after chunk data", raw: chunked + "3\r\nabcXX0\r\n\r\n"},
		{name: "whole chunked body", raw: chunked + "3\r\nabc\r\n0\r\n\r\n"},
		{name: "chunk cut short", raw: chunked + "5\r\nab", cut: true},
		{name: "no last chunk", raw: chunked + "3\r\nabc\r\n", cut: true},
		{name: "Content-Length body cut short", raw: long, cut: true},
	}
	for _, buffering := range []string{"on", "off"} {
		logPath := filepath.Join(t.TempDir(), "access.log")
		nginxAddr := startNginx(t, bin, `log_format st "$status";`, `access_log `+logPath+` st;
        location / {
            proxy_http_version 1.1;
            proxy_request_buffering `+buffering+`;
            proxy_pass http://`+peer+`;
        }`)
		for _, tc := range cases {
			if !tc.cut {
				want := answerOf(t, nginxAddr, tc.raw)
				if got := answerOf(t, goAddr, tc.raw); got != want {
					t.Errorf("request buffering %s, %s: got %q; nginx answers %q", buffering, tc.name, got, want)
				}
				continue
			}
			if buffering == "off" {
				// nginx then logs 400 or 499 for a body cut short,
				// as it notices the close reading the body or
				// waiting for the upstream.
				continue
			}
			nginxLines, goLines := fileLines(t, logPath), logLines(&goLog)
			_, _ = rawExchange(t, nginxAddr, []byte(tc.raw))
			_, _ = rawExchange(t, goAddr, []byte(tc.raw))
			waitFor(t, func() bool { return len(fileLines(t, logPath)) > len(nginxLines) && logLines(&goLog) > goLines })
			all := fileLines(t, logPath)
			want := all[len(all)-1]
			goAll := goLog.lines()
			if got := goAll[len(goAll)-1]; !strings.Contains(got, `HTTP/1.1" `+want+` `) {
				t.Errorf("request buffering %s, %s: logged %q; nginx logs %s", buffering, tc.name, got, want)
			}
		}
	}
}

// answerOf sends raw to addr and returns the status line answered,
// without half-closing.
func answerOf(t *testing.T, addr, raw string) string {
	t.Helper()
	c := dialTest(t, addr)
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(line)
}

// fileLines is a file's non-empty lines; none when it does not exist yet.
func fileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
