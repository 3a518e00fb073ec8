package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// connsHost is oneHost with the connection settings of g.
func connsHost(host, peer string, g model.Global) *model.Configuration {
	cfg := oneHost(host, peer)
	cfg.Global = g
	return cfg
}

// capOf caps open connections at n (one worker process).
func capOf(n int) model.Global {
	return model.Global{MaxWorkerConnections: n, WorkerProcesses: 1}
}

// keepAliveRequest sends one keep-alive GET on c and reads its answer.
func keepAliveRequest(t *testing.T, c net.Conn, br *bufio.Reader, host string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

// closedByPeer reports whether the proxy closed c: reads get EOF or a
// reset before the deadline (what the proxy sent before, an HTTP/2
// server's SETTINGS, is read and dropped).
func closedByPeer(c net.Conn, within time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestIdleConnectionsGiveWay: with the open-connection cap at 200 and 200
// idle connections open (100 that never sent a byte, 100 kept alive after
// a request), a new client is served, and the oldest idle connection is
// the one closed for it (nginx's ngx_drain_connections). Before the
// tracker, fasthttp's Concurrency answered the new client 503.
func TestIdleConnectionsGiveWay(t *testing.T) {
	const limit = 200
	var be seenBackend
	peer := be.start(t)
	for _, tc := range []struct {
		name string
		cfg  *model.Configuration
		pc   Config
	}{
		{"max-worker-connections", connsHost("idle.test", peer, capOf(limit)), Config{}},
		{"Config.MaxConns", oneHost("idle.test", peer), Config{MaxConns: limit}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newProxy(t, tc.cfg, tc.pc)
			idleGiveWay(t, p, serve(t, p.Serve), limit)
		})
	}
}

// idleGiveWay opens limit idle connections to addr, then checks that new
// clients are served and the oldest idle connection was closed for them.
func idleGiveWay(t *testing.T, p *Proxy, addr string, limit int) {
	t.Helper()

	var silent, kept []net.Conn
	for range limit / 2 {
		silent = append(silent, dialTest(t, addr))
	}
	for i := range limit / 2 {
		c := dialTest(t, addr)
		if resp := keepAliveRequest(t, c, bufio.NewReader(c), "idle.test"); resp.StatusCode != 200 {
			t.Fatalf("keep-alive connection %d: got %d; want 200", i, resp.StatusCode)
		}
		kept = append(kept, c)
	}
	if got := p.tracker.open.Load(); got != int64(limit) {
		t.Fatalf("got %d open connections; want %d", got, limit)
	}
	for i := range 3 {
		c := dialTest(t, addr)
		if resp := keepAliveRequest(t, c, bufio.NewReader(c), "idle.test"); resp.StatusCode != 200 {
			t.Fatalf("new client %d: got %d; want 200", i, resp.StatusCode)
		}
	}
	if !closedByPeer(silent[0], defaultTestTimeout) {
		t.Error("the oldest idle connection is still open; want it closed for the new client")
	}
	if closedByPeer(kept[len(kept)-1], 50*time.Millisecond) {
		t.Error("the newest idle connection was closed; want the oldest closed first")
	}
	if got := p.tracker.open.Load(); got > int64(limit) {
		t.Errorf("got %d open connections; want at most %d", got, limit)
	}
}

// TestBusyConnectionsMakeNewOnesWait: when every open connection has a
// request in flight, a new connection is not refused and not answered
// 503: it waits (in the listen backlog) until a request ends, then is
// served.
func TestBusyConnectionsMakeNewOnesWait(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	cfg := connsHost("busy.test", strings.TrimPrefix(slow.URL, "http://"), capOf(2))
	p, _ := newProxy(t, cfg, Config{})
	addr := serve(t, p.Serve)

	var busy []net.Conn
	for range 2 {
		c := dialTest(t, addr)
		if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: busy.test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		busy = append(busy, c)
	}
	// Both requests are in flight once the proxy holds two active ones.
	waitFor(t, func() bool { return p.countState(connActive) == 2 })
	c := dialTest(t, addr)
	if _, err := io.WriteString(c, "GET /fast HTTP/1.1\r\nHost: busy.test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	br := bufio.NewReader(c)
	if b, err := br.Peek(1); err == nil || !isTimeout(err) {
		t.Fatalf("while both connections are busy the new one got %q, %v; want no answer yet", b, err)
	}
	close(release)
	_ = c.SetReadDeadline(time.Now().Add(defaultTestTimeout))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("after the slow requests ended: %v", err)
	}
	if resp.StatusCode != 200 {
		t.Errorf("got %d; want 200", resp.StatusCode)
	}
	for i, bc := range busy {
		resp, err := http.ReadResponse(bufio.NewReader(bc), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("slow request %d: got %v, %v; want 200", i, resp, err)
		}
	}
}

// countState counts the open connections in state s.
func (p *Proxy) countState(s uint32) int {
	t := p.tracker
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.conns {
		if c.state.Load() == s {
			n++
		}
	}
	return n
}

// TestIdleTLSConnectionsGiveWay: on the TLS port the cap holds for
// HTTP/1.1 and HTTP/2 together, and idle connections of both (an
// HTTP/2 one without streams, a TLS one that never sent a request, a
// TCP one that never started its handshake) give way to a new client.
func TestIdleTLSConnectionsGiveWay(t *testing.T) {
	const limit = 30
	a := backend(t, "a")
	cfg := connsHost("m.test", a, capOf(limit))
	p, _ := newProxy(t, cfg, Config{})
	addr := serve(t, p.ServeTLS)
	handshake := func(proto string) *tls.Conn {
		tc := tls.Client(dialTest(t, addr), &tls.Config{ServerName: "m.test", InsecureSkipVerify: true, NextProtos: []string{proto}}) //nolint:gosec // fake certificate
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		return tc
	}
	var idle []net.Conn
	for i := range limit {
		switch i % 3 {
		case 0:
			idle = append(idle, dialTest(t, addr))
		case 1:
			idle = append(idle, handshake("http/1.1"))
		case 2:
			tc := handshake("h2")
			// An HTTP/2 connection with its preface and settings sent,
			// and no stream.
			if _, err := io.WriteString(tc, http2.ClientPreface); err != nil {
				t.Fatal(err)
			}
			if err := http2.NewFramer(tc, tc).WriteSettings(); err != nil {
				t.Fatal(err)
			}
			idle = append(idle, tc)
		}
	}
	for _, proto := range []string{"h2", "http/1.1"} {
		client := h2Client(t)
		if proto == "http/1.1" {
			client = &http.Client{Timeout: defaultTestTimeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // fake certificate
		}
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/", nil)
		req.Host = "m.test"
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s client with %d idle connections open: %v", proto, limit, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 200 || resp.Proto != map[string]string{"h2": "HTTP/2.0", "http/1.1": "HTTP/1.1"}[proto] {
			t.Errorf("%s: got %s %d; want 200", proto, resp.Proto, resp.StatusCode)
		}
		client.CloseIdleConnections()
	}
	if !closedByPeer(idle[0], defaultTestTimeout) {
		t.Error("the oldest idle connection is still open; want it closed first")
	}
}

// TestKeepAliveSettings: keep-alive, keep-alive-requests and
// client-header-timeout come from the Configuration and change with it.
func TestKeepAliveSettings(t *testing.T) {
	var be seenBackend
	peer := be.start(t)
	cfg := connsHost("ka.test", peer, model.Global{KeepAliveRequests: 2, KeepAliveSeconds: 1, ClientHeaderTimeoutSeconds: 1})
	p, reg := newProxy(t, cfg, Config{})
	update := func(cfg *model.Configuration) {
		if err := reg.Apply(cfg.Backends); err != nil {
			t.Fatal(err)
		}
		p.Update(cfg)
	}
	addr := serve(t, p.Serve)

	t.Run("keep-alive-requests", func(t *testing.T) {
		c := dialTest(t, addr)
		br := bufio.NewReader(c)
		if resp := keepAliveRequest(t, c, br, "ka.test"); resp.Close {
			t.Fatal("the first response closes the connection; want keep-alive")
		}
		if resp := keepAliveRequest(t, c, br, "ka.test"); !resp.Close {
			t.Error("the second response keeps the connection; want Connection: close (keep-alive-requests 2)")
		}
		if !closedByPeer(c, defaultTestTimeout) {
			t.Error("the connection is still open after keep-alive-requests")
		}
	})
	t.Run("keep-alive", func(t *testing.T) {
		c := dialTest(t, addr)
		keepAliveRequest(t, c, bufio.NewReader(c), "ka.test")
		start := time.Now()
		if !closedByPeer(c, 3*time.Second) {
			t.Fatal("an idle keep-alive connection is open after 3s; want it closed after keep-alive (1s)")
		}
		if took := time.Since(start); took < 900*time.Millisecond {
			t.Errorf("closed after %v; want keep-alive (1s) first", took)
		}
	})
	t.Run("client-header-timeout", func(t *testing.T) {
		c := dialTest(t, addr)
		start := time.Now()
		if !closedByPeer(c, 3*time.Second) {
			t.Fatal("a silent connection is open after 3s; want it closed after client-header-timeout (1s)")
		}
		if took := time.Since(start); took < 900*time.Millisecond {
			t.Errorf("closed after %v; want client-header-timeout (1s) first", took)
		}
	})
	t.Run("client-header-timeout, head cut short", func(t *testing.T) {
		for _, raw := range []string{"GET / HTTP/1.1\r\nHost: ka", "GET / HTTP/1.1\r\nHost: ka.test\r\n\r\nGET / HTTP/1.1\r\nHo"} {
			c := dialTest(t, addr)
			start := time.Now()
			if _, err := io.WriteString(c, raw); err != nil {
				t.Fatal(err)
			}
			if !closedByPeer(c, 3*time.Second) {
				t.Fatalf("%q: the connection is open after 3s; want it closed after client-header-timeout (1s)", raw)
			}
			if took := time.Since(start); took < 900*time.Millisecond {
				t.Errorf("%q: closed after %v; want client-header-timeout (1s) first", raw, took)
			}
		}
	})
	t.Run("requests slower than client-header-timeout", func(t *testing.T) {
		// Once its head is whole a request is not timed by
		// client-header-timeout, pipelined or not.
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-time.After(1500 * time.Millisecond)
			_, _ = io.WriteString(w, "slow")
		}))
		t.Cleanup(slow.Close)
		update(connsHost("ka.test", strings.TrimPrefix(slow.URL, "http://"), model.Global{ClientHeaderTimeoutSeconds: 1}))
		defer update(cfg)
		c := dialTest(t, addr)
		if _, err := io.WriteString(c, "GET /1 HTTP/1.1\r\nHost: ka.test\r\n\r\nGET /2 HTTP/1.1\r\nHost: ka.test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		for i := range 2 {
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("request %d: got %v, %v; want 200", i+1, resp, err)
			}
			if b, _ := io.ReadAll(resp.Body); string(b) != "slow" {
				t.Fatalf("request %d: got body %q; want the slow upstream's", i+1, b)
			}
		}
	})
	t.Run("keep-alive 0", func(t *testing.T) {
		update(connsHost("ka.test", peer, model.Global{DisableKeepAlive: true}))
		c := dialTest(t, addr)
		if resp := keepAliveRequest(t, c, bufio.NewReader(c), "ka.test"); !resp.Close {
			t.Error("the response keeps the connection; want Connection: close with keep-alive 0")
		}
	})
}

// TestIdleH2CConnectionsGiveWay: with cleartext HTTP/2 (Config.H2C), an
// HTTP/2 connection without streams is idle and gives way too.
func TestIdleH2CConnectionsGiveWay(t *testing.T) {
	const limit = 10
	a := backend(t, "a")
	p, _ := newProxy(t, connsHost("c.test", a, capOf(limit)), Config{H2C: true})
	addr := serve(t, p.Serve)
	var idle []net.Conn
	for range limit {
		c := dialTest(t, addr)
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		if err := http2.NewFramer(c, c).WriteSettings(); err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	waitFor(t, func() bool { return p.countState(connKeepAlive) == limit })
	c := dialTest(t, addr)
	if resp := keepAliveRequest(t, c, bufio.NewReader(c), "c.test"); resp.StatusCode != 200 {
		t.Errorf("HTTP/1.1 client with %d idle HTTP/2 connections open: got %d; want 200", limit, resp.StatusCode)
	}
	// They went idle at about the same time (each after its preface):
	// one of them was closed.
	closed := 0
	for _, c := range idle {
		if closedByPeer(c, 50*time.Millisecond) {
			closed++
		}
	}
	if closed == 0 {
		t.Error("every idle HTTP/2 connection is still open; want one closed for the new client")
	}
}
