package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/valyala/fasthttp"
)

// HTTP/2 upstreams: backend-protocol GRPC and H2C speak cleartext HTTP/2
// (prior knowledge) to the peer, GRPCS HTTP/2 over TLS without verifying
// the certificate, as ingress-nginx's grpc_pass with grpc_ssl_verify off.
// Bodies stream both ways and trailers come back, so gRPC unary and
// streaming calls pass through.

// h2Key names an HTTP/2 transport; each pools its connections per peer.
type h2Key struct {
	tls     bool
	connect time.Duration
}

// h2Transports holds the HTTP/2 transports, created on first use.
type h2Transports struct {
	mu sync.Mutex
	// guarded by mu
	m map[h2Key]http.RoundTripper
}

func (ts *h2Transports) get(loc *model.Location) http.RoundTripper {
	key := h2Key{tls: loc.BackendProtocol == model.ProtocolGRPCS, connect: timeoutsOf(loc).connect}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t := ts.m[key]; t != nil {
		return t
	}
	t := newH2Transport(key)
	if ts.m == nil {
		ts.m = map[h2Key]http.RoundTripper{}
	}
	ts.m[key] = t
	return t
}

// newH2Transport is an x/net/http2 Transport: cleartext with prior
// knowledge (AllowHTTP and a plain dialer), or TLS without verifying the
// peer. See h2Server for the SA1019 exemption.
//
//nolint:staticcheck // SA1019: x/net/http2 on purpose
func newH2Transport(key h2Key) http.RoundTripper {
	d := &net.Dialer{Timeout: key.connect}
	t := &http2.Transport{
		AllowHTTP:       !key.tls,
		ReadIdleTimeout: 30 * time.Second, // ping a silent connection
		PingTimeout:     15 * time.Second,
		IdleConnTimeout: 60 * time.Second,
	}
	if key.tls {
		t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}} //nolint:gosec // nginx's grpc_ssl_verify off
		t.DialTLSContext = func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
			c, err := dialRaw(ctx, d, network, addr)
			if err != nil {
				return nil, err
			}
			// As tls.Dialer: the name is the address's host (an IP
			// address is not sent as SNI).
			if cfg.ServerName == "" {
				host, _, _ := net.SplitHostPort(addr)
				cfg = cfg.Clone()
				cfg.ServerName = host
			}
			tc := tls.Client(c, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				_ = c.Close()
				return nil, err
			}
			return tc, nil
		}
	} else {
		t.DialTLSContext = func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return dialRaw(ctx, d, network, addr)
		}
	}
	return t
}

// dialRaw dials addr, its reads and writes raw system calls (rawconn_linux.go).
func dialRaw(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return withRawSyscalls(c), nil
}

// h2Try is one attempt over HTTP/2. out is the request without a peer;
// each attempt sends a copy addressed to its peer. The response of the
// successful attempt is left in resp; closing its body ends the stream.
type h2Try struct {
	p    *Proxy
	ctx  context.Context // the client request's
	out  *http.Request
	lim  *limitReader
	resp *http.Response
}

// try's connect time is 0: x/net's Transport dials inside RoundTrip and
// keeps one connection per peer, so almost every attempt reuses one.
func (t *h2Try) try(pick *balancer.Pick, loc *model.Location, _ time.Duration) (int, time.Duration, error) {
	peer := pick.Peer
	read := timeoutsOf(loc).read
	ctx, cancel := context.WithCancelCause(t.ctx)
	// proxy-read-timeout (grpc_read_timeout): the response head, then each
	// read of the body, must come within it.
	timer := time.AfterFunc(read, func() { cancel(os.ErrDeadlineExceeded) })
	u := *t.out.URL
	u.Host = peer
	req := t.out.WithContext(ctx)
	req.URL = &u
	resp, err := t.p.h2.get(loc).RoundTrip(req)
	if err != nil || t.lim.over || t.lim.clientErr != nil {
		timer.Stop()
		if resp != nil {
			_ = resp.Body.Close()
		}
		cause := context.Cause(ctx)
		cancel(nil)
		switch {
		case t.lim.over:
			return 0, 0, errBodyTooLarge
		case t.lim.clientErr != nil:
			return 0, 0, t.lim.clientFailed()
		case cause == os.ErrDeadlineExceeded:
			return 0, 0, fmt.Errorf("h2 upstream %s: %w", peer, cause)
		}
		return 0, 0, fmt.Errorf("h2 upstream %s: %w", peer, err)
	}
	timer.Reset(read)
	resp.Body = &idleBody{body: resp.Body, timer: timer, read: read, cancel: cancel}
	t.resp = resp
	return resp.StatusCode, 0, nil
}

func (t *h2Try) discard() {
	if t.resp != nil {
		_ = t.resp.Body.Close()
		t.resp = nil
	}
}

// idleBody is an upstream response body whose every read must make
// progress within read; Close ends the stream.
type idleBody struct {
	body   io.ReadCloser
	timer  *time.Timer
	read   time.Duration
	cancel context.CancelCauseFunc
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.timer.Reset(b.read)
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	err := b.body.Close()
	b.cancel(nil)
	return err
}

// bodyReader is a request body as the HTTP/2 transport gets it: Close
// does not close the client's body, so a dial error can be retried.
type bodyReader struct{ r io.Reader }

func (b bodyReader) Read(p []byte) (int, error) { return b.r.Read(p) }
func (bodyReader) Close() error                 { return nil }

// fastToH2 proxies a request that arrived over HTTP/1.1 to an HTTP/2
// upstream (H2C, or GRPC/GRPCS from a client that does not speak gRPC).
// Response trailers do not reach an HTTP/1.1 client.
func (p *Proxy) fastToH2(ctx *fasthttp.RequestCtx, rt *route, f *clientFacts, view balancer.Request, a *balancer.Attempt, o *outcome) {
	loc := &rt.loc
	scheme := "http"
	if loc.BackendProtocol == model.ProtocolGRPCS {
		scheme = "https"
	}
	// Not ctx as the context: it is reused once the handler returns, and
	// the response body streams after that. The stream ends when fasthttp
	// closes the body (sent, or the client gone).
	out, err := http.NewRequestWithContext(context.Background(), string(ctx.Method()), scheme+"://upstream"+string(ctx.Request.URI().RequestURI()), nil)
	if err != nil {
		answerFast(ctx, verdict{status: fasthttp.StatusBadRequest})
		return
	}
	// The fields sent are a copy of the client's, edited for the upstream.
	sent := new(fasthttp.RequestHeader)
	ctx.Request.Header.CopyTo(sent)
	prepareHeader(sent, f, loc, nil, o)
	for k, v := range sent.All() {
		switch string(k) {
		case "Host", "Content-Length", "Transfer-Encoding", "Connection":
			continue
		}
		out.Header.Add(string(k), string(v))
	}
	out.Host = string(sent.Host())
	lim := &limitReader{left: -1}
	cl := ctx.Request.Header.ContentLength()
	// A body read once cannot be sent again (the transport consumes it).
	buffered := true
	// The transport reads the body on its own goroutine; the guard keeps
	// it from reading ctx's body once fasthttp has the request back.
	guard := &guardedBody{}
	if stream := ctx.RequestBodyStream(); stream != nil && cl != 0 {
		*lim = limitReader{r: stream, left: loc.Proxy.BodySizeBytes, length: int64(max(cl, 0)), conn: h1ConnOf(ctx.Conn())}
		if lim.left <= 0 {
			lim.left = -1
		}
		guard.r, buffered = lim, false
		out.Body, out.ContentLength = guard, int64(max(cl, -1))
	} else if body := ctx.Request.Body(); len(body) > 0 {
		guard.r = bytes.NewReader(body)
		out.Body, out.ContentLength = guard, int64(len(body))
		buffered = false
	}
	t := &h2Try{p: p, ctx: out.Context(), out: out, lim: lim}
	pick, err := p.attempts(loc.Backend, loc, view, a, o, replayOf(out.Method, buffered), t)
	if err != nil {
		guard.stop()
		answerFast(ctx, verdict{status: failureStatus(err)})
		return
	}
	resp := t.resp
	o.upstreamLength = int(resp.ContentLength)
	if rt.intercepts(resp.StatusCode) {
		_ = resp.Body.Close()
		guard.stop()
		p.customError(&ctx.Response, rt, resp.StatusCode, errorRequestOf(ctx, o.requestID(&ctx.Request.Header), o.remote), view, o)
		return
	}
	ctx.SetStatusCode(resp.StatusCode)
	h := &ctx.Response.Header
	for k, vv := range upstreamHeaders(resp.Header) {
		for _, v := range vv {
			h.Add(k, v)
		}
	}
	if pick.SetCookie != "" {
		h.Add("Set-Cookie", pick.SetCookie)
	}
	if c := o.auth.cookieFor(resp.StatusCode); c != "" {
		h.Add("Set-Cookie", c)
	}
	if i := o.auth.authInfo(); i != "" {
		h.Set("Authentication-Info", i)
	}
	if loc.CORS.Enabled {
		corsHeaders(h, &loc.CORS, string(ctx.Request.Header.Peek("Origin")), false)
	}
	// fasthttp reads the body after the handler returns, and closes it
	// when it is done, while ctx's request is still valid.
	ctx.Response.SetBodyStream(&stopOnClose{ReadCloser: resp.Body, guard: guard}, int(resp.ContentLength))
}

// guardedBody is a request body the HTTP/2 transport reads on its own
// goroutine. After stop, which waits for a read in progress, reads fail:
// the body belongs to a fasthttp request that is about to be reused.
type guardedBody struct {
	mu sync.Mutex
	// guarded by mu
	r       io.Reader // nil: no body
	stopped bool
}

func (b *guardedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return 0, errBodyStopped
	}
	if b.r == nil {
		return 0, io.EOF
	}
	return b.r.Read(p)
}

// Close does not stop the body: a dial error may be retried with it.
func (*guardedBody) Close() error { return nil }

func (b *guardedBody) stop() {
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
}

// errBodyStopped ends the upstream's copy of a request whose client
// exchange is over.
var errBodyStopped = errors.New("proxy: request over, body no longer readable")

// stopOnClose is an upstream response body that, once closed (the
// stream cancelled), stops the request body's guard.
type stopOnClose struct {
	io.ReadCloser
	guard *guardedBody
	// tail paces the body and holds the request's limit-connections
	// count until Close.
	tail bodyEnd
}

func (s *stopOnClose) end() *bodyEnd { return &s.tail }

func (s *stopOnClose) Read(p []byte) (int, error) {
	if s.tail.pace.rate == 0 {
		return s.ReadCloser.Read(p)
	}
	n, err := s.ReadCloser.Read(p[:s.tail.pace.next(len(p))])
	s.tail.pace.wrote(n)
	return n, err
}

func (s *stopOnClose) Close() error {
	err := s.ReadCloser.Close()
	s.guard.stop()
	s.tail.hold.release()
	return err
}

// upstreamHeaders yields an upstream response's end-to-end headers: the
// hop-by-hop ones, those its Connection header names, those nginx hides,
// and Content-Length and Trailer (each front end frames the body itself)
// are left out.
func upstreamHeaders(h http.Header) func(yield func(string, []string) bool) {
	return func(yield func(string, []string) bool) {
		conn := h.Values("Connection")
		for k, vv := range h {
			if isHopHeader(k) || nginxHides(k) || k == "Content-Length" || connectionNames(conn, k) {
				continue
			}
			if !yield(k, vv) {
				return
			}
		}
	}
}

// isHopHeader reports whether the canonical header name k is hop-by-hop.
func isHopHeader(k string) bool {
	for _, h := range hopHeaders {
		if h == k {
			return true
		}
	}
	return false
}

// connectionNames reports whether the Connection header values name k.
func connectionNames(conn []string, k string) bool {
	for _, c := range conn {
		if tokenListHas([]byte(c), k) {
			return true
		}
	}
	return false
}
