package h2srv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2" //nolint:staticcheck // SA1019: the reference client and framer
	"golang.org/x/net/http2/hpack"
)

// serveH2 serves s on a loopback listener until the test ends and
// returns its address and the number of connections accepted so far.
func serveH2(t testing.TB, s *Server) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var conns atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			wg.Go(func() { s.ServeConn(ctx, c) })
		}
	})
	t.Cleanup(func() {
		cancel()
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String(), &conns
}

// h2cClient is net/http's client speaking HTTP/2 in cleartext (prior
// knowledge).
func h2cClient(t testing.TB) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func TestServeRequests(t *testing.T) {
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hello":
			w.Header().Set("X-Method", r.Method)
			w.Header().Set("X-Host", r.Host)
			w.Header().Set("X-Cookie", r.Header.Get("Cookie"))
			w.Header().Set("X-Proto", r.Proto)
			w.Header().Set("X-Query", r.URL.RawQuery)
			w.Header().Set("X-Local", fmt.Sprint(r.Context().Value(http.LocalAddrContextKey) != nil))
			_, _ = io.WriteString(w, "hello "+r.RemoteAddr[:9])
		case "/echo":
			w.Header().Set("X-Length", fmt.Sprint(r.ContentLength))
			_, _ = io.Copy(w, r.Body)
		case "/big":
			chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
			for range 48 {
				_, _ = w.Write(chunk)
			}
		case "/trailers":
			w.Header().Set("Trailer", "X-Declared")
			_, _ = io.WriteString(w, "body")
			w.Header().Set("X-Declared", "d")
			w.Header().Set(http.TrailerPrefix+"X-Undeclared", "u")
		case "/status":
			w.WriteHeader(http.StatusNoContent)
		case "/abort":
			_, _ = io.WriteString(w, strings.Repeat("x", 100))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
	})}
	addr, _ := serveH2(t, s)
	c := h2cClient(t)

	req, _ := http.NewRequest("GET", "http://"+addr+"/hello?q=1", nil)
	req.Host = "example.test"
	req.Header.Add("Cookie", "a=1")
	req.AddCookie(&http.Cookie{Name: "b", Value: "2"})
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	want := map[string]string{"X-Method": "GET", "X-Host": "example.test", "X-Cookie": "a=1; b=2", "X-Proto": "HTTP/2.0",
		"X-Query": "q=1", "X-Local": "true", "Content-Length": "15"}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s: %q; want %q", k, got, v)
		}
	}
	if resp.StatusCode != 200 || string(body) != "hello 127.0.0.1" || resp.Header.Get("Date") == "" {
		t.Errorf("got %d %q, Date %q; want 200 \"hello 127.0.0.1\" with a Date", resp.StatusCode, body, resp.Header.Get("Date"))
	}

	// Request and response bodies past every window, both ways at once.
	big := bytes.Repeat([]byte("abcdefgh"), 5<<20/8)
	resp, err = c.Post("http://"+addr+"/echo", "application/octet-stream", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || !bytes.Equal(got, big) || resp.Header.Get("X-Length") != fmt.Sprint(len(big)) {
		t.Errorf("echo of %d bytes: got %d bytes (equal %v), X-Length %s, err %v", len(big), len(got), bytes.Equal(got, big), resp.Header.Get("X-Length"), err)
	}
	resp, err = c.Get("http://" + addr + "/big")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err != nil || n != 48*64<<10 {
		t.Errorf("big: %d bytes, %v; want %d", n, err, 48*64<<10)
	}

	resp, err = c.Get("http://" + addr + "/trailers")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.Trailer.Get("X-Declared") != "d" || resp.Trailer.Get("X-Undeclared") != "u" {
		t.Errorf("trailers %v; want X-Declared d and X-Undeclared u", resp.Trailer)
	}

	resp, err = c.Get("http://" + addr + "/status")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 204 || resp.Header.Get("Content-Length") != "" {
		t.Errorf("got %d, Content-Length %q; want 204 without", resp.StatusCode, resp.Header.Get("Content-Length"))
	}

	resp, err = c.Get("http://" + addr + "/abort")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "INTERNAL_ERROR") {
		t.Errorf("aborted answer: %v; want the stream reset with INTERNAL_ERROR", err)
	}
}

// Many streams at once on one connection, each answered whole.
func TestServeConcurrentStreams(t *testing.T) {
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond)
		_, _ = io.WriteString(w, r.URL.Path)
	})}
	addr, conns := serveH2(t, s)
	c := h2cClient(t)
	resp, err := c.Get("http://" + addr + "/warm") // the connection, first
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	var wg sync.WaitGroup
	for i := range 100 { // under MaxConcurrentStreams
		wg.Go(func() {
			resp, err := c.Get(fmt.Sprintf("http://%s/%d", addr, i))
			if err != nil {
				t.Error(err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if string(body) != fmt.Sprintf("/%d", i) {
				t.Errorf("stream %d: %q", i, body)
			}
		})
	}
	wg.Wait()
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections; want 1", n)
	}
}

// After MaxRequests streams the connection goes away gracefully: the
// client opens another and no request fails.
func TestServeMaxRequests(t *testing.T) {
	var mu sync.Mutex
	perConn := map[string]int{}
	s := &Server{MaxRequests: 3, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		perConn[r.RemoteAddr]++
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	})}
	addr, _ := serveH2(t, s)
	c := h2cClient(t)
	for i := range 7 {
		resp, err := c.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		_, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(perConn) < 3 {
		t.Errorf("requests per connection %v; want 7 over at least 3 connections", perConn)
	}
	for conn, n := range perConn {
		if n > 3 {
			t.Errorf("%s served %d requests; want at most 3", conn, n)
		}
	}
}

// The end of ServeConn's context lets a request in flight finish.
func TestServeGracefulShutdown(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		_, _ = io.WriteString(w, "finished")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err == nil {
			s.ServeConn(ctx, c)
		}
		close(served)
	}()
	c := h2cClient(t)
	type result struct {
		body string
		err  error
	}
	done := make(chan result)
	go func() {
		resp, err := c.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			done <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		done <- result{string(b), err}
	}()
	<-started
	cancel()
	time.Sleep(50 * time.Millisecond) // the GOAWAY reaches the client
	close(release)
	if r := <-done; r.err != nil || r.body != "finished" {
		t.Errorf("in flight at shutdown: %q, %v; want finished", r.body, r.err)
	}
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Error("ServeConn still running 5 s after its last stream ended")
	}
}

// rawClient speaks frames to the server directly.
type rawClient struct {
	t   *testing.T
	nc  net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

func newRawClient(t *testing.T, addr string) *rawClient {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	rc := &rawClient{t: t, nc: nc, fr: http2.NewFramer(nc, nc)}
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	rc.enc = hpack.NewEncoder(&rc.buf)
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return rc
}

// headers sends a HEADERS frame of fields (name, value, ...).
func (rc *rawClient) headers(id uint32, end bool, fields ...string) {
	rc.buf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = rc.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.buf.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		rc.t.Fatal(err)
	}
}

// until reads frames until match accepts one, or the connection ends
// (nil).
func (rc *rawClient) until(match func(http2.Frame) bool) http2.Frame {
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			rc.t.Logf("reading: %v", err)
			return nil
		}
		if match(f) {
			return f
		}
	}
}

var get = []string{":method", "GET", ":scheme", "http", ":authority", "a.test", ":path", "/"}

// Malformed requests get the errors RFC 9113 names, and the connection
// goes on after a stream error.
func TestServeProtocolErrors(t *testing.T) {
	s := &Server{MaxHeaderBytes: 4096, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-r.Context().Done() // an upstream that has not answered yet
			return
		}
		_, _ = io.WriteString(w, "ok")
	})}
	addr, _ := serveH2(t, s)
	resetOf := func(id uint32) func(http2.Frame) bool {
		return func(f http2.Frame) bool { r, ok := f.(*http2.RSTStreamFrame); return ok && r.StreamID == id }
	}
	for _, tc := range []struct {
		name   string
		fields []string
	}{
		{"connection-specific field", append(get[:8:8], "connection", "keep-alive")},
		{"te other than trailers", append(get[:8:8], "te", "gzip")},
		{"no :path", get[:6]},
		{"unknown pseudo-field", append(get[:8:8], ":foo", "x")},
		{":protocol", append(get[:8:8], ":protocol", "websocket")},
		{"relative path", []string{":method", "GET", ":scheme", "http", ":authority", "a.test", ":path", "x"}},
		{"host differs from :authority", append(get[:8:8], "host", "b.test")},
		{"userinfo in :authority", []string{":method", "GET", ":scheme", "http", ":authority", "u@a.test", ":path", "/"}},
		{"two content-lengths", append(get[:8:8], "content-length", "1", "content-length", "2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newRawClient(t, addr)
			rc.headers(1, false, tc.fields...)
			f := rc.until(resetOf(1))
			if f == nil || f.(*http2.RSTStreamFrame).ErrCode != http2.ErrCodeProtocol {
				t.Fatalf("got %v; want RST_STREAM PROTOCOL_ERROR", f)
			}
			rc.headers(3, true, get...) // the connection still serves
			if f := rc.until(func(f http2.Frame) bool { h, ok := f.(*http2.MetaHeadersFrame); return ok && h.StreamID == 3 }); f == nil {
				t.Fatal("no answer on the connection after the stream error")
			}
		})
	}
	t.Run("header list too long", func(t *testing.T) {
		rc := newRawClient(t, addr)
		big := strings.Repeat("b", 2000)
		rc.headers(1, true, append(get[:8:8], "x-a", big, "x-b", big, "x-c", big)...)
		f := rc.until(func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok })
		if f == nil || f.(*http2.MetaHeadersFrame).PseudoValue("status") != "431" {
			t.Fatalf("got %v; want a 431 head", f)
		}
	})
	for _, tc := range []struct {
		name string
		send func(rc *rawClient)
		code http2.ErrCode
	}{
		{"even stream id", func(rc *rawClient) { rc.headers(2, true, get...) }, http2.ErrCodeProtocol},
		{"DATA on an idle stream", func(rc *rawClient) { _ = rc.fr.WriteData(5, true, []byte("x")) }, http2.ErrCodeProtocol},
		{"stream id going back", func(rc *rawClient) { rc.headers(5, true, get...); rc.headers(3, true, get...) }, http2.ErrCodeProtocol},
		{"connection window overflow", func(rc *rawClient) { _ = rc.fr.WriteWindowUpdate(0, 1<<31-1) }, http2.ErrCodeFlowControl},
		{"rapid reset", func(rc *rawClient) {
			for id := uint32(1); id < 2*(resetBudget+10); id += 2 {
				rc.headers(id, true, append(get[:6:6], ":path", "/slow")...)
				_ = rc.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}
		}, http2.ErrCodeEnhanceYourCalm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newRawClient(t, addr)
			tc.send(rc)
			f := rc.until(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
			if f == nil || f.(*http2.GoAwayFrame).ErrCode != tc.code {
				t.Fatalf("got %v; want GOAWAY %v", f, tc.code)
			}
		})
	}
}

// A stream the client resets gets no more frames: not the answer its
// handler goes on to write, nor a reset of the server's.
func TestServeQuietAfterClientReset(t *testing.T) {
	written := make(chan error, 1)
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // the client's RST_STREAM ends it
		w.Header().Set("X-Late", "1")
		_, err := io.WriteString(w, "late")
		written <- err
	})}
	addr, _ := serveH2(t, s)
	rc := newRawClient(t, addr)
	rc.headers(1, true, get...)
	_ = rc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	if err := <-written; err == nil {
		t.Error("the handler's write after the reset succeeded; want an error")
	}
	rc.headers(3, true, append(get[:6:6], ":path", "/after")...)
	_ = rc.fr.WritePing(false, [8]byte{7})
	// Everything up to the PING's answer: nothing for stream 1.
	rc.until(func(f http2.Frame) bool {
		if f.Header().StreamID == 1 {
			t.Errorf("got %v on the reset stream", f)
		}
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck()
	})
}

// Handlers (and the reading goroutine's flushes) run on workers that
// outlive their job: requests one after another reuse them, so the idle
// pool does not grow with the requests served.
func TestServeReusesWorkers(t *testing.T) {
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})}
	addr, _ := serveH2(t, s)
	c := h2cClient(t)
	first := 0
	for i := range 20 {
		resp, err := c.Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		// The handler's worker is back once its handler returned.
		deadline := time.Now().Add(5 * time.Second)
		for s.idleCount() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		n := s.idleCount()
		switch {
		case n == 0:
			t.Fatalf("request %d: no idle worker after its handler returned", i)
		case i == 0:
			first = n
		case n > first+1:
			t.Fatalf("request %d: %d idle workers, %d after the first request: workers are not reused", i, n, first)
		}
	}
}

// A write buffer a burst grew is not kept for the connection's idle life;
// a small one is reused.
func TestFlushKeepsSmallBuffers(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	go func() { _, _ = io.Copy(io.Discard, client) }()
	c := newConn(&Server{}, context.Background(), server)
	defer c.nc.Close()
	for _, tc := range []struct {
		size int
		kept bool
	}{{100 << 10, false}, {1 << 10, true}} {
		c.wmu.Lock()
		c.pending = append(c.pending[:0], make([]byte, tc.size)...)
		c.wmu.Unlock()
		if err := c.flush(); err != nil {
			t.Fatal(err)
		}
		c.wmu.Lock()
		kept := cap(c.spare) >= tc.size
		c.wmu.Unlock()
		if kept != tc.kept {
			t.Errorf("after writing %d bytes: buffer kept %v; want %v", tc.size, kept, tc.kept)
		}
	}
}

// A SETTINGS that opens a stream's send window is acknowledged before
// any DATA the window allows: a handler waiting for the window must not
// get its frame out between the new window and the ACK. The race is the
// scheduler's, so it is run many times, each on a new connection.
func TestServeAcksSettingsBeforeUsingThem(t *testing.T) {
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "conformance")
	})}
	addr, _ := serveH2(t, s)
	isAck := func(f http2.Frame) bool {
		sf, ok := f.(*http2.SettingsFrame)
		return ok && sf.IsAck()
	}
	for i := range 300 {
		rc := newRawClient(t, addr)
		rc.until(isAck) // the ACK of the preface's SETTINGS
		_ = rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		rc.until(isAck)
		rc.headers(1, true, get...)
		// The head leaves before the handler waits for a window.
		rc.until(func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok })
		_ = rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
		f := rc.until(func(f http2.Frame) bool { _, data := f.(*http2.DataFrame); return data || isAck(f) })
		if d, ok := f.(*http2.DataFrame); ok {
			t.Fatalf("connection %d: DATA (%d bytes) before the ACK of the SETTINGS that allowed it", i, len(d.Data()))
		}
		if d, ok := rc.until(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame); !ok || len(d.Data()) != 1 {
			t.Fatalf("connection %d: want a DATA frame of 1 byte after the ACK", i)
		}
		_ = rc.nc.Close()
	}
}
