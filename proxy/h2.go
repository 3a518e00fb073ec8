package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/proxy/h2srv"
	"github.com/valyala/fasthttp"
)

// The HTTP/2 front end: on the TLS port, ALPN "h2" connections are served
// by proxy/h2srv (golang.org/x/net/http2's server with Config.XNetHTTP2)
// through serveH2, the rest (http/1.1 or no ALPN) by fasthttp, both with the routes, picks, retries and headers of
// front.go.

// ServeTLS is Serve for HTTPS: TLS is terminated with the certificate the
// Configuration gives the SNI name (exact, then wildcard, then the default
// certificate, else a self-signed fake), swapped by Update without
// restarting the listener. Clients that offer h2 get HTTP/2, others
// HTTP/1.1.
func (p *Proxy) ServeTLS(ctx context.Context, ln net.Listener) error {
	p.startJanitor(ctx)
	cfg := p.certs.tlsConfig()
	cfg.NextProtos = []string{http2.NextProtoTLS, "http/1.1"}
	hs, err := p.h2Server(nil)
	if err != nil {
		return err
	}
	return p.serveSplit(ctx, ln, hs, func(c net.Conn) (net.Conn, bool, error) {
		// Under TLS, as on the plain port, client deadlines are re-armed
		// lazily (fasthttp and the HTTP/2 server move them per request).
		tc := tls.Server(&lazyDeadlineConn{Conn: c, lag: p.clientLag()}, cfg)
		hctx, cancel := context.WithTimeout(ctx, p.cfg.ReadTimeout)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			return nil, false, fmt.Errorf("tls handshake: %w", err)
		}
		return tc, tc.ConnectionState().NegotiatedProtocol == http2.NextProtoTLS, nil
	})
}

// serveH2C is Serve with Config.H2C: a connection that opens with the
// HTTP/2 preface (prior knowledge, RFC 9113 §3.3) is served as cleartext
// HTTP/2, any other by fasthttp.
func (p *Proxy) serveH2C(ctx context.Context, ln net.Listener) error {
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	hs, err := p.h2Server(protos)
	if err != nil {
		return err
	}
	return p.serveSplit(ctx, ln, hs, func(c net.Conn) (net.Conn, bool, error) {
		return peekPreface(c, p.cfg.ReadTimeout)
	})
}

// classifier prepares an accepted connection (a TLS handshake, a peek)
// and says whether it speaks HTTP/2.
type classifier func(net.Conn) (conn net.Conn, h2 bool, err error)

// serveSplit accepts connections on ln until ctx ends, classifies each on
// its own goroutine and hands it to fasthttp or, for HTTP/2, to hs; then
// drains both: fasthttp finishes its requests, HTTP/2 connections get a
// GOAWAY and end when their streams have.
func (p *Proxy) serveSplit(ctx context.Context, ln net.Listener, hs *http.Server, classify classifier) error {
	// One cap of open connections for both front ends, idle ones closed
	// first (conns.go).
	tl := p.track(ctx, ln)
	ln = tl
	h1, h2 := newConnQueue(ln.Addr()), newConnQueue(ln.Addr())
	var served sync.WaitGroup
	served.Go(func() { _ = p.server.Serve(h1) })
	// own serves HTTP/2 with proxy/h2srv (unless Config.XNetHTTP2) until
	// its context ends: each connection then goes away gracefully.
	own, stopOwn := context.WithCancel(context.Background())
	defer stopOwn()
	if p.cfg.XNetHTTP2 {
		served.Go(func() { _ = hs.Serve(h2) })
	} else {
		served.Go(func() { p.serveOwnH2(own, h2, &served) })
	}
	accepted := make(chan error, 1)
	go func() { accepted <- acceptSplit(ln, classify, h1, h2) }()
	var acceptErr error
	select {
	case acceptErr = <-accepted:
	case <-ctx.Done():
		_ = ln.Close()
		closed := <-accepted // the listener's close error, expected here
		_ = closed
	}
	err := p.server.Shutdown()
	if herr := hs.Shutdown(context.Background()); err == nil {
		err = herr
	}
	stopOwn()
	_, _ = h1.Close(), h2.Close()
	served.Wait()
	if acceptErr != nil {
		return acceptErr
	}
	return err
}

// serveOwnH2 serves the HTTP/2 connections q hands over with proxy/h2srv
// until q closes, each until ctx ends (then gracefully); served counts
// them.
func (p *Proxy) serveOwnH2(ctx context.Context, q *connQueue, served *sync.WaitGroup) {
	s := &h2srv.Server{
		Handler:              http.HandlerFunc(p.serveH2),
		MaxConcurrentStreams: h2MaxStreams,
		MaxHeaderBytes:       p.cfg.MaxHeaderBytes,
		// The reaper closes connections without streams at keep-alive
		// (conns.go); this is the server's backstop.
		IdleTimeout: maxKeepAlive,
		ConnContext: withTracked,
		StreamsChanged: func(c net.Conn, open int) {
			if open > 0 {
				h2ConnState(c, http.StateActive)
			} else {
				h2ConnState(c, http.StateIdle)
			}
		},
	}
	for {
		c, err := q.Accept()
		if err != nil {
			return
		}
		served.Go(func() { s.ServeConn(ctx, c) })
	}
}

// acceptSplit accepts connections until ln closes; each is classified on
// its own goroutine (a slow client holds up no other) and queued for its
// front end, or closed when classify fails.
func acceptSplit(ln net.Listener, classify classifier, h1, h2 *connQueue) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		go dispatch(c, classify, h1, h2)
	}
}

// dispatch classifies c and queues it for its front end. Until its first
// request an HTTP/1.1 connection is idle again (its handshake or preface
// peek made it active); an HTTP/2 one is idle while it has no streams.
func dispatch(c net.Conn, classify classifier, h1, h2 *connQueue) {
	conn, isH2, err := classify(c)
	tc, _ := c.(*trackedConn)
	switch {
	case err != nil:
		_ = c.Close()
	case tc == nil && isH2:
		h2.push(conn)
	case tc == nil:
		h1.push(conn)
	case isH2:
		tc.h2.Store(true)
		tc.idle(connKeepAlive)
		h2.push(conn)
	default:
		tc.idle(connNew)
		h1.push(newH1Conn(conn, tc))
	}
}

// peekPreface reads the first bytes of c, within timeout, until they are
// the HTTP/2 client preface or cannot be; the connection returned replays
// them.
func peekPreface(c net.Conn, timeout time.Duration) (net.Conn, bool, error) {
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return nil, false, fmt.Errorf("peek preface: %w", err)
	}
	buf := make([]byte, 0, len(http2.ClientPreface))
	for len(buf) < len(http2.ClientPreface) {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if !strings.HasPrefix(http2.ClientPreface, string(buf)) {
			break // not HTTP/2: fasthttp will read what came
		}
		if err != nil {
			return nil, false, fmt.Errorf("peek preface: %w", err)
		}
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return nil, false, fmt.Errorf("peek preface: %w", err)
	}
	return &peekedConn{Conn: c, peeked: buf}, string(buf) == http2.ClientPreface, nil
}

// peekedConn replays the bytes peekPreface read before reading on.
type peekedConn struct {
	net.Conn
	peeked []byte
}

func (c *peekedConn) Read(b []byte) (int, error) {
	if len(c.peeked) > 0 {
		n := copy(b, c.peeked)
		c.peeked = c.peeked[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// connQueue is a net.Listener whose connections are pushed to it (by the
// TLS handshakes) until it closes.
type connQueue struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

// push hands c to Accept, or closes it when the queue is closed.
func (q *connQueue) push(c net.Conn) {
	select {
	case q.conns <- c:
	case <-q.closed:
		_ = c.Close()
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.closed:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.closed) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }

// h2Server is the net/http server whose TLSNextProto x/net/http2 fills: it
// serves the HTTP/2 connections handed to it, over TLS or, when protos
// has UnencryptedHTTP2, in cleartext after the preface. nil protos is
// net/http's default.
//
// The brief and style guide name x/net/http2 for HTTP/2; x/net v0.62
// marks it deprecated in favour of the copy net/http bundles, hence the
// SA1019 exemptions here and in newH2Transport, the only two places that
// touch it.
//
//nolint:staticcheck // SA1019: x/net/http2 on purpose, see above
func (p *Proxy) h2Server(protos *http.Protocols) (*http.Server, error) {
	hs := &http.Server{
		Handler:           http.HandlerFunc(p.serveH2),
		ReadHeaderTimeout: p.cfg.ReadTimeout,
		// The reaper closes connections without streams at keep-alive
		// (conns.go); these are the servers' backstops.
		IdleTimeout:    maxKeepAlive,
		MaxHeaderBytes: p.cfg.MaxHeaderBytes,
		Protocols:      protos,
		ConnState:      h2ConnState,
		ConnContext:    withTracked,
		ErrorLog:       log.New(io.Discard, "", 0), // client errors are not ours to log
	}
	if err := http2.ConfigureServer(hs, &http2.Server{IdleTimeout: maxKeepAlive, MaxConcurrentStreams: h2MaxStreams}); err != nil {
		return nil, fmt.Errorf("proxy: configure http2: %w", err)
	}
	return hs, nil
}

// h2Writer records what the metrics and the access log need of a
// response written to the HTTP/2 front end.
type h2Writer struct {
	w       http.ResponseWriter
	status  int
	written int
	// headers are the location's add-headers and custom-headers, set
	// with the status when it is one nginx's add_header acts on.
	headers []model.HeaderField
	// pace is the location's limit-rate.
	pace pacer
}

// setStatus records the answer's status and adds headers for it.
func (w *h2Writer) setStatus(code int) {
	w.status = code
	if len(w.headers) > 0 && model.ResponseHeaderStatus(code) {
		h := w.w.Header()
		for _, f := range w.headers {
			h.Set(f.Name, f.Value)
		}
	}
}

func (w *h2Writer) Header() http.Header { return w.w.Header() }

func (w *h2Writer) WriteHeader(code int) {
	if w.status == 0 {
		w.setStatus(code)
	}
	w.w.WriteHeader(code)
}

func (w *h2Writer) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.setStatus(http.StatusOK)
	}
	if w.pace.rate != 0 {
		return w.pacedWrite(b)
	}
	n, err := w.w.Write(b)
	w.written += n
	return n, err
}

// pacedWrite writes b in the turns limit-rate gives, flushing each so the
// client gets it at that rate rather than when the stream's buffer fills.
func (w *h2Writer) pacedWrite(b []byte) (int, error) {
	total := 0
	for len(b) > 0 {
		k := w.pace.next(len(b))
		n, err := w.w.Write(b[:k])
		w.written += n
		total += n
		w.pace.wrote(n)
		if err != nil {
			return total, err
		}
		w.Flush()
		b = b[n:]
	}
	return total, nil
}

func (w *h2Writer) Flush() {
	if f, ok := w.w.(http.Flusher); ok {
		f.Flush()
	}
}

// answer writes an answer the proxy gives itself.
func (w *h2Writer) answer(v verdict) {
	if v.wwwAuthenticate != "" {
		w.Header().Set("WWW-Authenticate", v.wwwAuthenticate)
	}
	if v.setCookie != "" {
		w.Header().Add("Set-Cookie", v.setCookie)
	}
	if v.location != "" {
		w.Header().Set("Location", v.location)
		w.WriteHeader(v.status)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(v.status)
	if v.body != "" {
		_, _ = io.WriteString(w, v.body)
		return
	}
	_, _ = io.WriteString(w, statusText(v.status))
}

// h2State is what one HTTP/2 request would otherwise allocate: its
// outcome, the response writer's wrapper, the client's facts and the
// balancer's view. Pooled; nothing in it outlives the handler.
type h2State struct {
	o    outcome
	w    h2Writer
	f    clientFacts
	view h2View
}

var h2StatePool = sync.Pool{New: func() any { return new(h2State) }}

// serveH2 handles one HTTP/2 request and records its metrics.
func (p *Proxy) serveH2(rw http.ResponseWriter, r *http.Request) {
	st := h2StatePool.Get().(*h2State)
	defer func() {
		*st = h2State{}
		h2StatePool.Put(st)
	}()
	o, w := &st.o, &st.w
	start := time.Now()
	if h2LastRequest(r.Context(), p.conns.Load()) {
		rw.Header().Set("Connection", "close")
	}
	w.w = rw
	// limit-connections counts the stream until its handler is done
	// (the body is written inside it), also when it aborts the stream.
	defer o.hold.release()
	p.handleH2(st, r)
	took := time.Since(start)
	if p.metrics == nil && p.cfg.AccessLog == nil {
		return
	}
	// $req_id: the X-Request-ID made for the upstream, else the client's
	// (X-Request-Id is net/http's canonical spelling: a map lookup, where
	// Get would first allocate the canonical form of another).
	requestID := []byte(firstValue(r.Header["X-Request-Id"]))
	if o.id.set {
		requestID = o.id.bytes()
	}
	x := exchange{method: []byte(r.Method), requestURI: []byte(r.RequestURI), proto: []byte(r.Proto),
		referer: []byte(r.Referer()), userAgent: []byte(r.UserAgent()), requestID: requestID,
		status: w.status, bodySent: w.written, reqLength: headerBytes(r.Header) + max(int(r.ContentLength), 0)}
	x.remote = o.remote
	var lf *logFormat
	logged := p.cfg.AccessLog != nil && !o.noLog
	if logged {
		lf = p.logFormatOf()
	}
	if p.metrics != nil || (logged && lf.respHeader) {
		x.respHeader = headerBytes(w.Header())
	}
	if p.metrics != nil {
		p.metrics.observe(&x, o, took, start.Sub(epoch)+took)
	}
	if logged {
		p.accessLog(lf, &x, o, &logReq{h2: r, h2resp: w.Header(), end: start.Add(took)}, took)
	}
}

// firstValue is a field's first value, "" without one.
func firstValue(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

func (p *Proxy) handleH2(st *h2State, r *http.Request) {
	w, o := &st.w, &st.o
	host := hostOnly([]byte(r.Host))
	tbl := p.routes.Load()
	var conn netip.Addr
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		conn = ap.Addr().Unmap()
	}
	o.remote = conn
	if ri := tbl.realIP; ri != nil {
		// nginx's realip runs first, for every request of the server.
		var values [][]byte
		for _, v := range r.Header[ri.name] {
			values = append(values, []byte(v))
			if !ri.all {
				break
			}
		}
		o.remote = ri.client(conn, values)
	}
	upath := []byte(cleanPath(r.URL.Path))
	vh, rt := tbl.lookup(host, upath)
	if rt != nil && !rt.loc.IsDefaultBackend {
		o.server, o.loc, o.rt = vh.name, &rt.loc, rt
	}
	if rt != nil {
		w.headers = rt.loc.ResponseHeaders
		w.pace = newPacer(pacedRate(&rt.loc)) // limit-rate
		o.addUpstreamFields(rt.setFields)     // proxy-set-headers
		o.noLog = rt.loc.NoAccessLog
	}
	if len(tbl.skipLog) > 0 && tbl.skipLog[r.RequestURI] {
		o.noLog = true
	}
	if vh != nil && vh.tls && r.TLS != nil && tbl.hsts != "" {
		// Every answer, as ingress-nginx's header phase adds it.
		w.Header().Set("Strict-Transport-Security", tbl.hsts)
	}
	if vh != nil && vh.redirectTo != "" {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		if local == nil {
			local = &net.TCPAddr{}
		}
		w.answer(verdict{status: tbl.redirectCode, location: tbl.wwwRedirect(vh, r.TLS != nil, local,
			r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Port"), []byte(r.RequestURI))})
		return
	}
	if vh != nil && vh.clientAuth != nil {
		a := vh.clientAuth.check(r.TLS, host)
		if a.v.status != 0 {
			w.answer(a.v)
			return
		}
		o.addUpstreamFields(a.fields)
	}
	if rt == nil || rt.loc.IsDefaultBackend {
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		defaultBackendResponse(resp)
		copyFastResponse(w, resp, "")
		return
	}
	loc := &rt.loc
	f := &st.f
	*f = clientFacts{tls: r.TLS != nil, host: []byte(r.Host), remote: o.remote, conn: conn, fullForwardedFor: tbl.fullForwardedFor}
	if ta, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok {
		f.localPort = ta.Port
	}
	if loc.BasicAuth != nil || loc.DigestAuth != nil {
		f.authorization = []byte(r.Header.Get("Authorization"))
	}
	if v := tbl.check(vh, rt, f, host, []byte(r.RequestURI), upath, r.ContentLength, &o.hold); v.status != 0 {
		w.answer(v)
		return
	}
	if da := loc.DigestAuth; da != nil {
		if v := p.digestCheck(da, r.Method, r.RequestURI, f, o); v.status != 0 {
			w.answer(v)
			return
		}
	}
	if loc.BasicAuth != nil || loc.DigestAuth != nil {
		// ingress-nginx's proxy_set_header Authorization "": the
		// credentials stay with the proxy.
		o.addUpstreamFields(clearAuthorization)
	}
	if ea := loc.ExternalAuth; ea != nil {
		id := []byte(r.Header.Get("X-Request-ID"))
		if len(id) == 0 {
			o.id.make()
			id = o.id.bytes()
		}
		ar := authRequest{f: f, host: host, method: r.Method, requestURI: r.RequestURI, requestID: id,
			server: vh.name, location: loc.Path + " " + string(loc.PathType),
			header: func(name string) string { return strings.Join(r.Header.Values(name), ", ") },
			fields: func(fn func(name, value string)) {
				for k, vs := range r.Header {
					for _, v := range vs {
						fn(k, v)
					}
				}
			}}
		v, pass := p.auth.check(r.Context(), ea, &ar)
		if v.status != 0 {
			w.answer(v)
			return
		}
		o.setAuth(pass)
	}
	// The view reads the client's fields as sent (nginx's $http_*).
	view := &st.view
	*view = h2View{viewBase: viewBase{host: host, server: vh.name, location: loc.Path, tls: f.tls, remote: f.remote}, r: r, hdr: r.Header}
	if loc.CORS.Enabled && r.Method == http.MethodOptions && corsHeaders(w.Header(), &loc.CORS, r.Header.Get("Origin"), true) {
		w.Header().Set("Content-Type", corsPreflightType)
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	er := &errorRequest{method: r.Method, host: r.Host, accept: r.Header.Get("Accept"), requestURI: r.RequestURI}
	if rt.rewrite != nil {
		if p, ok := rt.rewritten(upath); ok {
			r.URL.Path, r.URL.RawPath = string(p), ""
		}
	}
	outHost := r.Host
	if loc.UpstreamVhost != "" {
		outHost = loc.UpstreamVhost
	}
	if h2Upstream(loc.BackendProtocol) {
		// r.Header becomes the upstream's; the view keeps the client's.
		view.hdr = r.Header.Clone()
		forwardHeaders(netHeader(r.Header), f, loc, nil, &o.id)
		o.auth.apply(netHeader(r.Header))
		er.requestID, er.remote = r.Header.Get("X-Request-ID"), r.Header.Get("X-Real-IP")
		p.h2ToH2(w, r, rt, view, er, outHost, o)
		return
	}
	p.h2ToFast(w, r, rt, f, view, er, outHost, o)
}

// headerBytes is the size of h written as HTTP/1.1 fields ("k: v\r\n"),
// what nginx's $request_length and $bytes_sent count of headers; HTTP/2's
// compressed size is not known to the handler.
func headerBytes(h http.Header) int {
	n := 0
	for k, vv := range h {
		for _, v := range vv {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// cleanPath normalises a request path for routing as fasthttp does for
// HTTP/1.1 ("//", "." and ".." resolved), keeping a trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// h2ToFast proxies an HTTP/2 request to an HTTP/1.1 upstream through the
// same fasthttp keep-alive pools as the HTTP/1.1 front end. The upstream's
// fields are a copy of the client's, edited as the HTTP/1.1 front end
// edits its copy (prepareHeader); r.Header stays as the client sent it.
func (p *Proxy) h2ToFast(w *h2Writer, r *http.Request, rt *route, f *clientFacts, view balancer.Request, er *errorRequest, outHost string, o *outcome) {
	loc := &rt.loc
	st := statePool.Get().(*reqState)
	defer st.release()
	out := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(out)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	out.Header.SetMethod(r.Method)
	out.SetRequestURI(r.URL.RequestURI())
	out.URI().SetScheme("http")
	if loc.BackendProtocol == model.ProtocolHTTPS {
		out.URI().SetScheme("https")
	}
	for k, vv := range r.Header {
		for _, v := range vv {
			out.Header.Add(k, v)
		}
	}
	out.Header.SetHost(outHost)
	out.UseHostHeader = true
	st.buf = prepareHeader(&out.Header, f, loc, st.buf, o)
	if loc.Proxy.HTTP10 {
		out.Header.SetProtocol(upstreamProtocol(loc))
	}
	lim := &st.lim
	*lim = limitReader{left: -1}
	cl := r.ContentLength
	buffered := true
	spool := &st.spool
	var mirrorBody []byte
	switch {
	case r.Body == nil || r.Body == http.NoBody || cl == 0:
	case cl > 0 && cl <= int64(p.cfg.BodyBufferBytes):
		body, err := io.ReadAll(io.LimitReader(r.Body, cl))
		if err != nil || int64(len(body)) != cl {
			w.answer(verdict{status: http.StatusBadRequest})
			return
		}
		out.SetBodyRaw(body)
		if loc.Mirror != nil {
			mirrorBody = body
		}
	default:
		*lim = limitReader{r: r.Body, left: loc.Proxy.BodySizeBytes, length: max(cl, 0)}
		if lim.left <= 0 {
			lim.left = -1
		}
		if !spoolsBody(loc, int(cl)) {
			out.SetBodyStream(lim, int(cl))
			buffered = false
			break
		}
		// proxy-request-buffering on: the whole body first.
		err := spool.fill(lim, nil, max(p.cfg.BodyBufferBytes, loc.Proxy.ClientBodyBufferBytes), &p.spoolDir)
		switch {
		case lim.over:
			w.answer(verdict{status: http.StatusRequestEntityTooLarge})
			return
		case errors.Is(err, errSpoolFile):
			logUpstream(p.cfg.ErrorLog, "client", err)
			w.answer(verdict{status: http.StatusInternalServerError})
			return
		case err != nil:
			w.answer(verdict{status: http.StatusBadRequest})
			return
		}
		if spool.file == nil {
			out.SetBodyRaw(spool.mem)
		}
		if loc.Mirror != nil && spool.file == nil {
			mirrorBody = spool.mem
		}
	}
	if loc.Mirror != nil {
		// The client's fields as sent are the view's (r.Header was edited
		// for the upstream).
		var client http.Header
		if hv, ok := view.(*h2View); ok {
			client = hv.hdr
		}
		p.mirror(loc, h2MirrorRequest(r, client, mirrorBody, !buffered || spool.file != nil))
	}
	rp := replayOf(r.Method, buffered)
	t := &st.try
	*t = fastTry{p: p, out: outbound{req: out}, resp: resp, lim: lim, replay: rp}
	if spool.file != nil {
		t.out.spool = spool
	}
	pick, err := p.attempts(loc.Backend, loc, view, &st.attempt, o, rp, t)
	if err != nil {
		w.answer(verdict{status: failureStatus(err)})
		return
	}
	o.upstreamLength = resp.Header.ContentLength()
	if code := resp.StatusCode(); rt.intercepts(code) {
		er.requestID, er.remote = string(out.Header.Peek("X-Request-Id")), string(out.Header.Peek("X-Real-Ip"))
		resp.Reset()
		p.customError(resp, rt, code, er, view, o)
		copyFastResponse(w, resp, "")
		return
	}
	if loc.CORS.Enabled {
		corsHeaders(w.Header(), &loc.CORS, r.Header.Get("Origin"), false)
	}
	if c := o.auth.cookieFor(resp.StatusCode()); c != "" {
		resp.Header.Add("Set-Cookie", c)
	}
	if i := o.auth.authInfo(); i != "" {
		resp.Header.Set("Authentication-Info", i)
	}
	copyFastResponse(w, resp, pick.SetCookie)
}

// copyFastResponse relays a fasthttp response to the HTTP/2 client:
// end-to-end headers, the body as it arrives (flushed after every read),
// then its trailers.
func copyFastResponse(w *h2Writer, resp *fasthttp.Response, setCookie string) {
	h := w.Header()
	addFastFields(h, &resp.Header)
	if len(resp.Header.ContentType()) == 0 {
		h["Content-Type"] = nil // none sent: net/http must not sniff one
	}
	if setCookie != "" {
		h.Add("Set-Cookie", setCookie)
	}
	w.WriteHeader(resp.StatusCode())
	if resp.IsBodyStream() {
		if err := copyFlush(w, resp.BodyStream()); err != nil {
			// The upstream's body broke off: reset the stream so the
			// client does not take it for a complete answer.
			panic(http.ErrAbortHandler)
		}
	} else {
		_, _ = w.Write(resp.Body())
	}
	for _, k := range resp.Header.PeekTrailerKeys() {
		h.Set(http.TrailerPrefix+string(k), string(resp.Header.PeekBytes(k)))
	}
}

// addFastFields adds the end-to-end fields of an upstream response to h
// under net/http's canonical names: not the hop-by-hop ones, nor those
// the Connection field names, nor those nginx's proxy module hides. The
// values share one string and one slice, and common names are interned,
// so a response costs two allocations (plus the map's growth) rather than
// three per field.
func addFastFields(h http.Header, rh *fasthttp.ResponseHeader) {
	conn := rh.Peek("Connection")
	dropped := func(k []byte) bool {
		return dropsResponseField(k, false) || (len(conn) > 0 && tokenListHas(conn, string(k)))
	}
	n, size := 0, 0
	for k, v := range rh.All() {
		if !dropped(k) {
			n, size = n+1, size+len(v)
		}
	}
	if n == 0 {
		return
	}
	var all strings.Builder
	all.Grow(size)
	for k, v := range rh.All() {
		if !dropped(k) {
			all.Write(v)
		}
	}
	values, joined := make([]string, n), all.String()
	i := 0
	for k, v := range rh.All() {
		if dropped(k) {
			continue
		}
		values[i], joined = joined[:len(v)], joined[len(v):]
		name := canonicalName(k)
		if prior, ok := h[name]; ok {
			h[name] = append(prior, values[i])
		} else {
			h[name] = values[i : i+1 : i+1]
		}
		i++
	}
}

// canonicalName is http.CanonicalHeaderKey(string(k)), without an
// allocation for the names in commonFieldNames.
func canonicalName(k []byte) string {
	var lower [32]byte
	if len(k) <= len(lower) {
		for i, c := range k {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			lower[i] = c
		}
		if name, ok := commonFieldNames[string(lower[:len(k)])]; ok {
			return name
		}
	}
	return http.CanonicalHeaderKey(string(k))
}

// commonFieldNames maps the lower-case form of response fields most
// upstreams send to net/http's canonical form.
var commonFieldNames = func() map[string]string {
	m := make(map[string]string)
	for _, n := range []string{
		"Accept-Ranges", "Access-Control-Allow-Credentials", "Access-Control-Allow-Headers",
		"Access-Control-Allow-Methods", "Access-Control-Allow-Origin", "Access-Control-Expose-Headers",
		"Age", "Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language",
		"Content-Length", "Content-Range", "Content-Security-Policy", "Content-Type", "Etag",
		"Expires", "Grpc-Message", "Grpc-Status", "Last-Modified", "Link", "Location", "Pragma",
		"Referrer-Policy", "Retry-After", "Set-Cookie", "Strict-Transport-Security", "Vary",
		"Www-Authenticate", "X-Content-Type-Options", "X-Frame-Options", "X-Request-Id", "X-Xss-Protection",
	} {
		m[strings.ToLower(n)] = http.CanonicalHeaderKey(n)
	}
	return m
}()

// copyFlush copies an upstream body to the client, flushing after every
// read so streamed responses (SSE, gRPC) are not held back.
func copyFlush(w *h2Writer, r io.Reader) error {
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	for {
		n, err := r.Read(*buf)
		if n > 0 {
			if _, werr := w.Write((*buf)[:n]); werr != nil {
				return nil // the client went away; nothing to tell it
			}
			w.Flush()
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// h2ToH2 proxies an HTTP/2 request to an HTTP/2 upstream (gRPC, h2c):
// request and response bodies stream both ways at once, and the
// upstream's trailers (grpc-status, grpc-message) follow the body.
func (p *Proxy) h2ToH2(w *h2Writer, r *http.Request, rt *route, view balancer.Request, er *errorRequest, outHost string, o *outcome) {
	loc := &rt.loc
	scheme := "http"
	if loc.BackendProtocol == model.ProtocolGRPCS {
		scheme = "https"
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = scheme, ""
	out.Host = outHost
	lim := &limitReader{left: -1}
	buffered := true
	if r.Body != nil && r.Body != http.NoBody {
		*lim = limitReader{r: r.Body, left: loc.Proxy.BodySizeBytes, length: max(r.ContentLength, 0)}
		if lim.left <= 0 {
			lim.left = -1
		}
		out.Body = bodyReader{lim}
		buffered = false
	}
	t := &h2Try{p: p, ctx: r.Context(), out: out, lim: lim}
	var a balancer.Attempt
	pick, err := p.attempts(loc.Backend, loc, view, &a, o, replayOf(r.Method, buffered), t)
	if err != nil {
		w.answer(verdict{status: failureStatus(err)})
		return
	}
	resp := t.resp
	defer resp.Body.Close()
	o.upstreamLength = int(resp.ContentLength)
	if rt.intercepts(resp.StatusCode) {
		_ = resp.Body.Close()
		fr := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(fr)
		p.customError(fr, rt, resp.StatusCode, er, view, o)
		copyFastResponse(w, fr, "")
		return
	}
	h := w.Header()
	for k, vv := range upstreamHeaders(resp.Header) {
		h[k] = append(h[k], vv...)
	}
	if _, sent := resp.Header["Content-Type"]; !sent {
		h["Content-Type"] = nil // none sent: net/http must not sniff one
	}
	if resp.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
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
		corsHeaders(h, &loc.CORS, r.Header.Get("Origin"), false)
	}
	w.WriteHeader(resp.StatusCode)
	w.Flush() // a server stream's headers go out before its first message
	if err := copyFlush(w, resp.Body); err != nil {
		panic(http.ErrAbortHandler)
	}
	for k, vv := range resp.Trailer {
		h[http.TrailerPrefix+k] = vv
	}
}

// netHeader is net/http's header map as forwardHeaders edits it.
type netHeader http.Header

func (h netHeader) Peek(key string) []byte {
	v := http.Header(h).Values(key)
	switch len(v) {
	case 0:
		return nil
	case 1:
		return []byte(v[0])
	}
	return []byte(strings.Join(v, ", "))
}

func (h netHeader) Set(key, value string)              { http.Header(h).Set(key, value) }
func (h netHeader) SetBytesV(key string, value []byte) { http.Header(h).Set(key, string(value)) }
func (h netHeader) SetCanonical(key, value []byte)     { http.Header(h).Set(string(key), string(value)) }
func (h netHeader) Del(key string)                     { http.Header(h).Del(key) }

// h2View answers nginx variables from a net/http request for the
// balancer.
type h2View struct {
	viewBase
	r   *http.Request
	hdr http.Header // the client's fields, before forwardHeaders
}

func (v *h2View) Var(name string) ([]byte, bool) {
	if val, ok, handled := v.common(name); handled {
		return val, ok
	}
	switch name {
	case "request_uri":
		return []byte(v.r.RequestURI), true
	case "uri":
		return []byte(v.r.URL.Path), true
	}
	if key, ok := v.headerKey(name); ok {
		vals := v.hdr.Values(string(key))
		if len(vals) == 0 {
			return nil, false
		}
		sep := ", "
		if bytes.EqualFold(key, []byte("cookie")) {
			sep = "; " // RFC 9113 §8.2.3: split cookie fields join with "; "
		}
		return []byte(strings.Join(vals, sep)), true
	}
	if len(name) > 7 && name[:7] == "cookie_" {
		c, err := v.r.Cookie(name[7:])
		if err != nil {
			return nil, false
		}
		return []byte(c.Value), true
	}
	return nil, false
}

var (
	_ requestHeaders   = netHeader(nil)
	_ requestHeaders   = (*fasthttp.RequestHeader)(nil)
	_ balancer.Request = (*h2View)(nil)
	_ headerSetter     = http.Header(nil)
)
