package proxy

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// arrivalBackend answers each request with how its body came (its
// Content-Length and Transfer-Encoding, the body's length and sha256) and
// counts the heads it has seen, as soon as it sees them.
func arrivalBackend(t *testing.T) (addr string, heads *atomic.Int32) {
	t.Helper()
	heads = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		heads.Add(1)
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "cl=%s te=%s n=%d sha=%s", r.Header.Get("Content-Length"), strings.Join(r.TransferEncoding, ","), n, hex.EncodeToString(h.Sum(nil)))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), heads
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestRequestBuffering: with proxy-request-buffering on (the default) the
// upstream sees nothing of a request until its whole body has come, and
// gets it with a Content-Length although the client chunked it; off, the
// request goes upstream at once, chunked. Bodies are larger than what the
// proxy reads before the handler (64 KiB), one also larger than memory
// takes (a temporary file).
func TestRequestBuffering(t *testing.T) {
	be, heads := arrivalBackend(t)
	on := loc("/", model.PathTypePrefix, "b")
	off := loc("/", model.PathTypePrefix, "b")
	off.Proxy.NoRequestBuffering = true
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "b", Endpoints: endpoints(be)}},
		Servers: []model.Server{
			{Hostname: "on.example.com", Locations: []model.Location{on}},
			{Hostname: "off.example.com", Locations: []model.Location{off}},
		},
	}
	dir := t.TempDir()
	p, _ := newProxy(t, cfg, Config{BodyTempDir: dir})
	addr := serve(t, p.Serve)

	for _, tc := range []struct {
		host      string
		size      int
		early     bool // the upstream sees the head before the body ends
		wantCL    bool
		wantChunk bool
	}{
		{"on.example.com", 200 << 10, false, true, false},
		{"on.example.com", 3 << 20, false, true, false},
		{"off.example.com", 200 << 10, true, false, true},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.host, tc.size), func(t *testing.T) {
			body := make([]byte, tc.size)
			for i := range body {
				body[i] = byte(i * 7)
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			before := heads.Load()
			half := tc.size / 2
			fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n", tc.host, half)
			if _, err := c.Write(body[:half]); err != nil {
				t.Fatal(err)
			}
			_, _ = io.WriteString(c, "\r\n")
			// Streamed, the upstream sees the head at once; buffered, not
			// while the body is unfinished.
			wait := 300 * time.Millisecond
			if tc.early {
				wait = 5 * time.Second
			}
			for end := time.Now().Add(wait); heads.Load() == before && time.Now().Before(end); {
				time.Sleep(5 * time.Millisecond)
			}
			if got := heads.Load() != before; got != tc.early {
				t.Fatalf("upstream saw the request before the body ended: %v, want %v", got, tc.early)
			}
			fmt.Fprintf(c, "%x\r\n", tc.size-half)
			if _, err := c.Write(body[half:]); err != nil {
				t.Fatal(err)
			}
			_, _ = io.WriteString(c, "\r\n0\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := fmt.Sprintf("n=%d sha=%s", tc.size, sha(body))
			if resp.StatusCode != 200 || !strings.HasSuffix(string(got), want) {
				t.Fatalf("got %d %q, want 200 ...%q", resp.StatusCode, got, want)
			}
			if hasCL := strings.HasPrefix(string(got), "cl="+strconv.Itoa(tc.size)); hasCL != tc.wantCL {
				t.Errorf("upstream got %q: Content-Length %v, want %v", got, hasCL, tc.wantCL)
			}
			if chunked := strings.Contains(string(got), "te=chunked"); chunked != tc.wantChunk {
				t.Errorf("upstream got %q: chunked %v, want %v", got, chunked, tc.wantChunk)
			}
		})
	}
	// Files are unlinked as soon as they are open.
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("temporary directory holds %v (%v), want nothing", ents, err)
	}
}

// TestSpooledBodyRetried: a body held in a temporary file is sent whole
// again to the next peer when the first fails after taking the request (an
// idempotent PUT, as nginx's proxy_next_upstream error passes it on).
func TestSpooledBodyRetried(t *testing.T) {
	dead := deadAfterHead(t)
	be, _ := arrivalBackend(t)
	l := loc("/", model.PathTypePrefix, "b")
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "b", Endpoints: endpoints(dead, be)}},
		Servers:  []model.Server{{Hostname: "retry.example.com", Locations: []model.Location{l}}},
	}
	p, _ := newProxy(t, cfg, Config{BodyTempDir: t.TempDir()})
	addr := serve(t, p.Serve)
	body := make([]byte, 1<<20)
	for i := range body {
		body[i] = byte(i)
	}
	want := fmt.Sprintf("cl=%d te= n=%d sha=%s", len(body), len(body), sha(body))
	// Round robin: whichever peer comes first, two requests meet the dead
	// one at least once.
	for i := range 2 {
		req, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/x", io.NopCloser(strings.NewReader(string(body))))
		req.Host = "retry.example.com"
		req.ContentLength = -1
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != want {
			t.Fatalf("request %d: got %d %q, want 200 %q", i, resp.StatusCode, got, want)
		}
	}
}

// deadAfterHead is a peer that reads a request's head and some body and
// closes the connection without an answer.
func deadAfterHead(t *testing.T) string {
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
				buf := make([]byte, 4096)
				_, _ = c.Read(buf)
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// TestSpoolFileFailure: a body that needs a temporary file where none can
// be made is a 500, as nginx answers when its client_body_temp_path
// fails, and the upstream never sees it.
func TestSpoolFileFailure(t *testing.T) {
	be, heads := arrivalBackend(t)
	l := loc("/", model.PathTypePrefix, "b")
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "b", Endpoints: endpoints(be)}},
		Servers:  []model.Server{{Hostname: "full.example.com", Locations: []model.Location{l}}},
	}
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var logged atomic.Int32
	p, _ := newProxy(t, cfg, Config{BodyTempDir: filepath.Join(blocker, "sub"), ErrorLog: func(string) { logged.Add(1) }})
	addr := serve(t, p.Serve)
	// The client sends the first 128 KiB of its body, pauses (the file
	// has failed by then), and sends the rest before it reads: the proxy
	// must read and drop the rest before it closes, or the client's second
	// write meets a reset instead of the 500 being read.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "POST /x HTTP/1.1\r\nHost: full.example.com\r\nContent-Length: %d\r\n\r\n%s", 300<<10, strings.Repeat("x", 128<<10)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := c.Write([]byte(strings.Repeat("x", 172<<10))); err != nil {
		t.Fatalf("send the rest of the body: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 500 || heads.Load() != 0 {
		t.Fatalf("got %d with %d requests upstream, want 500 and none", resp.StatusCode, heads.Load())
	}
	// Small bodies need no file and still pass.
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/x", strings.NewReader("small"))
	req.Host = "full.example.com"
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("small body: got %d, want 200", resp.StatusCode)
	}
}

// TestSpoolClientAbort: a client that goes away mid-body never reaches the
// upstream with buffering on.
func TestSpoolClientAbort(t *testing.T) {
	be, heads := arrivalBackend(t)
	l := loc("/", model.PathTypePrefix, "b")
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "b", Endpoints: endpoints(be)}},
		Servers:  []model.Server{{Hostname: "abort.example.com", Locations: []model.Location{l}}},
	}
	p, _ := newProxy(t, cfg, Config{BodyTempDir: t.TempDir()})
	addr := serve(t, p.Serve)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /x HTTP/1.1\r\nHost: abort.example.com\r\nContent-Length: %d\r\n\r\n", 1<<20)
	_, _ = c.Write(make([]byte, 300<<10))
	c.Close()
	time.Sleep(300 * time.Millisecond)
	if n := heads.Load(); n != 0 {
		t.Fatalf("upstream saw %d requests, want none", n)
	}
}

// TestRequestBufferingHTTP2: the same from an HTTP/2 client, whose body has
// no length: on, the upstream sees the request only when the stream's body
// has ended, then with its length, through a temporary file past memory;
// off, at once.
func TestRequestBufferingHTTP2(t *testing.T) {
	be, heads := arrivalBackend(t)
	on := loc("/", model.PathTypePrefix, "b")
	off := loc("/", model.PathTypePrefix, "b")
	off.Proxy.NoRequestBuffering = true
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "b", Endpoints: endpoints(be)}},
		Servers: []model.Server{
			{Hostname: "on.example.com", Locations: []model.Location{on}},
			{Hostname: "off.example.com", Locations: []model.Location{off}},
		},
	}
	base := h2Proxy(t, cfg, Config{BodyTempDir: t.TempDir()})
	c := h2Client(t)
	for _, tc := range []struct {
		host   string
		size   int
		early  bool
		wantCL bool
	}{
		{"on.example.com", 200 << 10, false, true},
		{"on.example.com", 2 << 20, false, true},
		{"off.example.com", 200 << 10, true, false},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.host, tc.size), func(t *testing.T) {
			body := make([]byte, tc.size)
			for i := range body {
				body[i] = byte(i * 13)
			}
			pr, pw := io.Pipe()
			before := heads.Load()
			type result struct {
				status int
				text   string
			}
			done := make(chan result, 1)
			go func() {
				resp, text := h2Do(t, c, http.MethodPost, base+"/up", tc.host, pr, nil)
				done <- result{resp.StatusCode, text}
			}()
			if _, err := pw.Write(body[:tc.size/2]); err != nil {
				t.Fatal(err)
			}
			wait := 300 * time.Millisecond
			if tc.early {
				wait = 5 * time.Second
			}
			for end := time.Now().Add(wait); heads.Load() == before && time.Now().Before(end); {
				time.Sleep(5 * time.Millisecond)
			}
			if got := heads.Load() != before; got != tc.early {
				t.Errorf("upstream saw the request before the body ended: %v, want %v", got, tc.early)
			}
			if _, err := pw.Write(body[tc.size/2:]); err != nil {
				t.Fatal(err)
			}
			_ = pw.Close()
			r := <-done
			want := fmt.Sprintf("n=%d sha=%s", tc.size, sha(body))
			if r.status != 200 || !strings.HasSuffix(r.text, want) {
				t.Fatalf("got %d %q, want 200 ...%q", r.status, r.text, want)
			}
			if hasCL := strings.HasPrefix(r.text, "cl="+strconv.Itoa(tc.size)); hasCL != tc.wantCL {
				t.Errorf("upstream got %q: Content-Length %v, want %v", r.text, hasCL, tc.wantCL)
			}
		})
	}
}
