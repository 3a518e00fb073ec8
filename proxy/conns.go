package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/valyala/fasthttp"
)

// Client connection management, as nginx does it
// (docs/migrating-from-ingress-nginx.md, "Client connections"): at most
// connSettings.maxConns client connections are open on all ports together
// (max-worker-connections × worker processes). A connection waiting for a
// request, one that has not sent a byte yet or a keep-alive one between
// requests, or an HTTP/2 one without streams, is idle: nginx calls it
// reusable and, when its worker_connections run out, closes the oldest
// such connections (ngx_drain_connections) to take the new one. When every
// open connection has a request in flight, a new connection is held
// unserved (the next ones wait in the listen backlog) until one closes or
// goes idle, as nginx stops accepting; nobody is answered 503. Requests in
// flight are bounded separately: one per HTTP/1.1 connection,
// h2MaxStreams per HTTP/2 connection. Idle connections are also closed
// after client-header-timeout (never sent a byte) or keep-alive (between
// requests), and connections whose request head has not come whole within
// client-header-timeout, by a reaper that looks once per reapEvery.
//
// Per request the tracking costs two atomic stores (the connection goes
// active on its first byte, idle when its response is written); the lock
// is taken per connection (accept, close) and by the reaper and the
// evictor, never per request.

// connSettings are the connection settings of the Configuration in use.
type connSettings struct {
	maxConns int
	// keepAlive is keep-alive (0: keep-alive disabled); keepAliveRequests
	// is keep-alive-requests.
	keepAlive         time.Duration
	keepAliveRequests uint64
	// headerTimeout is client-header-timeout: how long a request head may
	// take to come whole (a new connection's, from its accept).
	headerTimeout time.Duration
	// head holds nginx's request head buffers.
	head headLimits
}

// Defaults of the ConfigMap keys (ingress-nginx's).
const (
	defaultKeepAlive         = 75 * time.Second
	defaultKeepAliveRequests = 1000
	defaultMaxWorkerConns    = 16384
	defaultHeaderTimeout     = 60 * time.Second
	// maxKeepAlive bounds keep-alive: fasthttp's and the HTTP/2 server's
	// own idle timeouts, fixed when they are made, are set to it and the
	// reaper closes idle connections at the configured time.
	maxKeepAlive = time.Hour
	// reapEvery is how often the reaper looks for idle connections past
	// their timeout: they close up to that much late.
	reapEvery = 250 * time.Millisecond
	// h2MaxStreams bounds the requests in flight on one HTTP/2 connection
	// (nginx's http2_max_concurrent_streams default).
	h2MaxStreams = 128
	// fastConcurrency is fasthttp's Concurrency: more than any cap the
	// tracker enforces, so fasthttp never answers 503 itself.
	fastConcurrency = 1 << 30
)

// settingsOf reads the connection settings of g; pc's non-zero MaxConns
// replaces max-worker-connections × workers.
func settingsOf(g *model.Global, pc *Config) *connSettings {
	s := &connSettings{
		keepAlive:         defaultKeepAlive,
		keepAliveRequests: defaultKeepAliveRequests,
		headerTimeout:     defaultHeaderTimeout,
		head:              headLimitsOf(g),
	}
	if g.KeepAliveSeconds > 0 {
		s.keepAlive = min(time.Duration(g.KeepAliveSeconds)*time.Second, maxKeepAlive)
	}
	if g.DisableKeepAlive {
		s.keepAlive = 0
	}
	if g.KeepAliveRequests > 0 {
		s.keepAliveRequests = uint64(g.KeepAliveRequests)
	}
	if g.ClientHeaderTimeoutSeconds > 0 {
		s.headerTimeout = time.Duration(g.ClientHeaderTimeoutSeconds) * time.Second
	}
	perWorker := g.MaxWorkerConnections
	if perWorker <= 0 {
		perWorker = defaultMaxWorkerConns
	}
	workers := g.WorkerProcesses
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0) // worker-processes auto
	}
	s.maxConns = min(perWorker*workers, fastConcurrency/2)
	if pc.MaxConns > 0 {
		s.maxConns = pc.MaxConns
	}
	if pc.IdleTimeout > 0 && !g.DisableKeepAlive {
		s.keepAlive = min(pc.IdleTimeout, maxKeepAlive)
	}
	return s
}

// Connection states.
const (
	connNew       uint32 = iota // no request byte yet: idle
	connKeepAlive               // between requests: idle
	connHead                    // a request head coming (HTTP/1.1)
	connActive                  // a request in flight (or an upgraded connection)
	connClosing                 // chosen by the evictor or the reaper
)

// connTracker counts and tracks the open client connections of a Proxy,
// all ports together.
type connTracker struct {
	settings *atomic.Pointer[connSettings]

	// atomic
	open atomic.Int64
	// starved is set while an Accept waits for a connection to close or
	// go idle; wake then gets a token (buffer 1).
	starved atomic.Bool
	wake    chan struct{}

	mu    sync.Mutex // guards conns and each conn's idx
	conns []*trackedConn
}

func newConnTracker(s *atomic.Pointer[connSettings]) *connTracker {
	return &connTracker{settings: s, wake: make(chan struct{}, 1)}
}

// signal hands a waiting Accept a token.
func (t *connTracker) signal() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// trackedConn is an accepted client connection as the tracker sees it.
type trackedConn struct {
	net.Conn
	t *connTracker
	// h2 is set before the connection is handed to the HTTP/2 server: its
	// reads then say nothing of its state, its streams do.
	h2 atomic.Bool

	// atomic
	state atomic.Uint32
	// since is when the connection went idle (monoNow).
	since  atomic.Int64
	closed atomic.Bool

	idx int // guarded by t.mu
	// requests counts an HTTP/2 connection's requests (keep-alive-requests).
	requests atomic.Uint64
}

// trackedKey holds a connection's trackedConn in its requests' contexts
// (the HTTP/2 server's ConnContext).
type trackedKey struct{}

// withTracked is the HTTP/2 server's ConnContext.
func withTracked(ctx context.Context, c net.Conn) context.Context {
	if tc := trackedOf(c); tc != nil {
		return context.WithValue(ctx, trackedKey{}, tc)
	}
	return ctx
}

// h2LastRequest reports whether an HTTP/2 request is its connection's
// last: keep-alive 0, or keep-alive-requests reached. Its response then
// carries Connection: close, which the HTTP/2 server turns into a GOAWAY,
// as nginx ends a connection after keepalive_requests.
func h2LastRequest(ctx context.Context, s *connSettings) bool {
	tc, _ := ctx.Value(trackedKey{}).(*trackedConn)
	if tc == nil {
		return false
	}
	return s.keepAlive == 0 || tc.requests.Add(1) >= s.keepAliveRequests
}

// Read marks an HTTP/1.1 connection's head coming when a byte of a
// request comes. A head must be whole within client-header-timeout (the
// reaper's): counted from the accept for the first request, as nginx's
// post_accept_timeout, from its first byte for the next ones.
func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		if s := c.state.Load(); s <= connKeepAlive && !c.h2.Load() {
			if s == connKeepAlive {
				c.since.Store(int64(monoNow()))
			}
			c.state.CompareAndSwap(s, connHead)
		}
	}
	return n, err
}

// headDone marks a connection whose request head has come whole active.
func (c *trackedConn) headDone() { c.state.CompareAndSwap(connHead, connActive) }

// idle marks the connection idle (connNew or connKeepAlive) from now.
func (c *trackedConn) idle(state uint32) {
	c.since.Store(int64(monoNow()))
	if c.state.Load() == connClosing {
		return
	}
	c.state.Store(state)
	if c.t.starved.Load() {
		c.t.signal()
	}
}

// active marks the connection active unless it is being closed.
func (c *trackedConn) active() {
	if s := c.state.Load(); s != connClosing {
		c.state.CompareAndSwap(s, connActive)
	}
}

// Close closes the connection and frees its place, once.
func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.Swap(true) {
		return err
	}
	t := c.t
	t.mu.Lock()
	last := len(t.conns) - 1
	t.conns[c.idx] = t.conns[last]
	t.conns[c.idx].idx = c.idx
	t.conns[last] = nil
	t.conns = t.conns[:last]
	t.mu.Unlock()
	t.open.Add(-1)
	t.signal()
	return err
}

// CloseWrite half-closes the connection (closeWrite after an upgrade).
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// trackingListener accepts connections while fewer than maxConns are
// open, evicting idle ones to make room, and tracks them.
type trackingListener struct {
	net.Listener
	t      *connTracker
	done   chan struct{}
	closed sync.Once
}

func (t *connTracker) listener(ln net.Listener) *trackingListener {
	return &trackingListener{Listener: ln, t: t, done: make(chan struct{})}
}

func (l *trackingListener) Close() error {
	l.closed.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	// Make room only now that a connection has come, as nginx drains
	// its reusable connections for a new one; the new connection waits
	// here, unserved, while every open one is busy.
	t := l.t
	for {
		limit := int64(t.settings.Load().maxConns)
		if t.open.Load() < limit || t.evict(limit) {
			break
		}
		t.starved.Store(true)
		// A connection may have gone idle before starved was seen.
		if t.evict(limit) {
			t.starved.Store(false)
			break
		}
		select {
		case <-t.wake:
			t.starved.Store(false)
		case <-l.done:
			t.starved.Store(false)
			_ = c.Close()
			return nil, net.ErrClosed
		}
	}
	tc := &trackedConn{Conn: withRawSyscalls(c), t: t}
	tc.since.Store(int64(monoNow()))
	t.open.Add(1)
	t.mu.Lock()
	tc.idx = len(t.conns)
	t.conns = append(t.conns, tc)
	t.mu.Unlock()
	return tc, nil
}

// evict closes the oldest idle connections when limit are open, as
// ngx_drain_connections: an eighth of the idle ones, at least 1 and at
// most 32, and at least as many as are open over the limit. It reports
// whether there is room now.
func (t *connTracker) evict(limit int64) bool {
	var oldest [32]*trackedConn
	t.mu.Lock()
	over := int(int64(len(t.conns)) - limit + 1)
	idle := 0
	for _, c := range t.conns {
		if c.state.Load() <= connKeepAlive {
			idle++
		}
	}
	want := min(max(idle/8, 1, over), len(oldest))
	n := 0
	for _, c := range t.conns {
		if c.state.Load() > connKeepAlive {
			continue
		}
		since := c.since.Load()
		if n == want && since >= oldest[n-1].since.Load() {
			continue
		}
		i := min(n, want-1)
		for i > 0 && oldest[i-1].since.Load() > since {
			oldest[i] = oldest[i-1]
			i--
		}
		oldest[i] = c
		if n < want {
			n++
		}
	}
	t.mu.Unlock()
	closedAny := false
	for _, c := range oldest[:n] {
		if s := c.state.Load(); s <= connKeepAlive && c.state.CompareAndSwap(s, connClosing) {
			_ = c.Close()
			closedAny = true
		}
	}
	return closedAny && t.open.Load() < limit
}

// reap closes the idle connections past their timeout: client-header-
// timeout for those that never sent a byte, keep-alive for the others
// (and for HTTP/2 ones without streams); and those whose request head has
// not come whole within client-header-timeout.
func (t *connTracker) reap(now time.Duration, scratch []*trackedConn) []*trackedConn {
	s := t.settings.Load()
	expired := scratch[:0]
	t.mu.Lock()
	for _, c := range t.conns {
		st := c.state.Load()
		if st > connHead {
			continue
		}
		limit := s.keepAlive
		if (st == connNew || st == connHead) && !c.h2.Load() {
			limit = s.headerTimeout
		}
		if now-time.Duration(c.since.Load()) >= limit {
			expired = append(expired, c)
		}
	}
	t.mu.Unlock()
	for i, c := range expired {
		if st := c.state.Load(); st <= connHead && c.state.CompareAndSwap(st, connClosing) {
			_ = c.Close()
		}
		expired[i] = nil
	}
	return expired[:0]
}

// runReaper reaps every reapEvery until done closes.
func (t *connTracker) runReaper(done <-chan struct{}) {
	tick := time.NewTicker(reapEvery)
	defer tick.Stop()
	var scratch []*trackedConn
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			scratch = t.reap(monoNow(), scratch)
		}
	}
}

// trackedOf finds the trackedConn under a connection a server was given.
func trackedOf(c net.Conn) *trackedConn {
	for range 8 {
		switch x := c.(type) {
		case *trackedConn:
			return x
		case *h1Conn:
			return x.tc
		case *h1TLSConn:
			return x.tc
		case *lazyDeadlineConn:
			c = x.Conn
		case *peekedConn:
			c = x.Conn
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// fastConnState is fasthttp's ConnState hook: a connection whose response
// has been written is idle until its next request's first byte (read by
// trackedConn, or already buffered: StateActive); a hijacked (upgraded)
// one is active for good.
func fastConnState(c net.Conn, s fasthttp.ConnState) {
	var tc *trackedConn
	var h *h1Conn
	switch x := c.(type) {
	case *h1Conn:
		h, tc = x, x.tc
	case *h1TLSConn:
		h, tc = &x.h1Conn, x.tc
	default:
		return
	}
	switch s {
	case fasthttp.StateIdle:
		h.head.begin(tc.t.settings.Load().head)
		tc.idle(connKeepAlive)
	case fasthttp.StateActive:
		if tc.state.Load() == connKeepAlive {
			// A pipelined request, read with the one before: its head
			// went by unseen, and what the connection gives next is
			// its body, to pass as it is. Its head is whole when the
			// handler runs (ServeHTTP).
			tc.since.Store(int64(monoNow()))
			tc.state.CompareAndSwap(connKeepAlive, connHead)
			h.head.on = false
		}
	case fasthttp.StateHijacked:
		tc.active()
	}
}

// h2ConnState is the HTTP/2 server's ConnState hook: a connection is idle
// when it has no streams.
func h2ConnState(c net.Conn, s http.ConnState) {
	tc := trackedOf(c)
	if tc == nil {
		return
	}
	switch s {
	case http.StateIdle:
		tc.idle(connKeepAlive)
	case http.StateActive:
		tc.active()
	}
}

// h1Conn is an HTTP/1.1 client connection as fasthttp reads it: request
// heads pass through lfHead (bare LF line ends).
type h1Conn struct {
	net.Conn
	tc   *trackedConn
	head lfHead
	// sawEOF: a read met the client's end of the stream.
	sawEOF bool
}

// h1ConnOf is the h1Conn of a connection fasthttp serves, nil if none.
func h1ConnOf(c net.Conn) *h1Conn {
	switch x := c.(type) {
	case *h1Conn:
		return x
	case *h1TLSConn:
		return &x.h1Conn
	}
	return nil
}

func newH1Conn(c net.Conn, tc *trackedConn) net.Conn {
	h := h1Conn{Conn: c, tc: tc}
	h.head.begin(tc.t.settings.Load().head)
	if tlsc, ok := c.(*tls.Conn); ok {
		return &h1TLSConn{h1Conn: h, tls: tlsc}
	}
	return &h
}

func (c *h1Conn) Read(b []byte) (n int, err error) {
	if !c.head.on {
		n, err = c.Conn.Read(b)
	} else if n, err = c.head.read(c.Conn, b); !c.head.on {
		c.tc.headDone()
	}
	if err == io.EOF {
		c.sawEOF = true
	}
	return n, err
}

// CloseWrite half-closes the connection (closeWrite after an upgrade).
func (c *h1Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// h1TLSConn is an h1Conn over TLS: fasthttp finds the TLS state through
// Handshake and ConnectionState.
type h1TLSConn struct {
	h1Conn
	tls *tls.Conn
}

func (c *h1TLSConn) Handshake() error                     { return c.tls.Handshake() }
func (c *h1TLSConn) ConnectionState() tls.ConnectionState { return c.tls.ConnectionState() }
func (c *h1TLSConn) Read(b []byte) (int, error)           { return c.h1Conn.Read(b) }

// h1Listener hands fasthttp the connections of a trackingListener, with
// lazy deadlines, as h1Conns.
type h1Listener struct {
	*trackingListener
	lag time.Duration
}

func (l h1Listener) Accept() (net.Conn, error) {
	c, err := l.trackingListener.Accept()
	if err != nil {
		return nil, err
	}
	tc := c.(*trackedConn)
	return newH1Conn(&lazyDeadlineConn{Conn: tc, lag: l.lag}, tc), nil
}
