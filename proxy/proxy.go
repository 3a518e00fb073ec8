package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/valyala/fasthttp"
)

// Picker is what the proxy needs of the balancer; *balancer.Registry
// implements it.
type Picker interface {
	Pick(backend string, req balancer.Request, a *balancer.Attempt) (balancer.Pick, error)
	Done(p balancer.Pick, info balancer.DoneInfo)
}

var _ Picker = (*balancer.Registry)(nil)

// Config configures a Proxy. Zero values are usable except Picker.
type Config struct {
	// Picker chooses peers. Required.
	Picker Picker
	// MaxConns caps concurrent client connections; zero means 10000.
	MaxConns int
	// ReadTimeout bounds reading a client request (slow-loris defence);
	// zero means 60s.
	ReadTimeout time.Duration
	// IdleTimeout closes idle keep-alive client connections; zero means 75s
	// (nginx keepalive_timeout).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds request headers; zero means 16 KiB.
	MaxHeaderBytes int
	// BodyBufferBytes is how much of a request body is read before the
	// request goes upstream: a body that fits is sent whole and may be
	// retried on another peer; a longer or chunked one is streamed and is
	// never buffered whole. Zero means 64 KiB. The body limit is the
	// location's proxy-body-size.
	BodyBufferBytes int
	// Registerer receives the request metrics (ingress-nginx's names); nil
	// means no metrics.
	Registerer prometheus.Registerer
	// AccessLog receives one line per request in ingress-nginx's default
	// log format (log_format upstreaminfo); nil means no access log. It is
	// written from many goroutines at once, one Write per line, so it must
	// be safe for concurrent use (an *os.File is).
	AccessLog io.Writer
	// MetricsPerHost labels request metrics with the server name
	// (--metrics-per-host); the label is empty otherwise.
	MetricsPerHost bool
}

// Proxy is the HTTP/1.1 data plane.
type Proxy struct {
	cfg     Config
	routes  atomic.Pointer[table]
	server  *fasthttp.Server
	metrics *metrics // nil without a Registerer
	certs   *certStore

	mu      sync.Mutex // guards clients writes; reads are lock-free
	clients atomic.Pointer[map[clientKey]*fasthttp.HostClient]
}

// New returns a Proxy serving nothing until Update.
func New(cfg Config) (*Proxy, error) {
	if cfg.Picker == nil {
		return nil, errors.New("proxy: Config.Picker is required")
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 10000
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 60 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 75 * time.Second
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = 16 << 10
	}
	if cfg.BodyBufferBytes <= 0 {
		cfg.BodyBufferBytes = 64 << 10
	}
	certs, err := newCertStore()
	if err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, certs: certs}
	if cfg.Registerer != nil {
		m, err := newMetrics(cfg.Registerer, cfg.MetricsPerHost)
		if err != nil {
			return nil, err
		}
		p.metrics = m
	}
	p.routes.Store(newTable(&model.Configuration{}))
	empty := map[clientKey]*fasthttp.HostClient{}
	p.clients.Store(&empty)
	p.server = &fasthttp.Server{
		Handler:                       p.ServeHTTP,
		Name:                          "switchyard",
		Concurrency:                   cfg.MaxConns,
		ReadTimeout:                   cfg.ReadTimeout,
		IdleTimeout:                   cfg.IdleTimeout,
		ReadBufferSize:                cfg.MaxHeaderBytes,
		MaxRequestBodySize:            cfg.BodyBufferBytes,
		StreamRequestBody:             true,
		DisablePreParseMultipartForm:  true,
		DisableHeaderNamesNormalizing: false,
		NoDefaultServerHeader:         true,
		NoDefaultDate:                 false,
		CloseOnShutdown:               true,
	}
	return p, nil
}

// Update swaps in the routes of cfg. Requests in flight finish on the routes
// they started with.
func (p *Proxy) Update(cfg *model.Configuration) {
	p.certs.update(cfg)
	p.routes.Store(newTable(cfg))
}

// Serve accepts connections on ln until ctx ends, then drains: in-flight
// requests finish, idle connections close.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- p.server.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return p.server.Shutdown()
	}
}

// ServeTLS is Serve for HTTPS: TLS is terminated with the certificate the
// Configuration gives the SNI name (exact, then wildcard, then the default
// certificate, else a self-signed fake), swapped by Update without
// restarting the listener.
func (p *Proxy) ServeTLS(ctx context.Context, ln net.Listener) error {
	return p.Serve(ctx, p.tlsListener(ln))
}

// hopHeaders are removed when proxying (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// outcome is what one request did, for the metrics.
type outcome struct {
	server   string
	loc      *model.Location
	canary   string
	upstream time.Duration
	// The last attempt's peer, its status and response length, for the
	// access log.
	peer           string
	upstreamStatus int
	upstreamLength int
}

// ServeHTTP handles one request and records its metrics.
func (p *Proxy) ServeHTTP(ctx *fasthttp.RequestCtx) {
	var o outcome
	start := time.Now()
	p.handle(ctx, &o)
	took := time.Since(start)
	if p.metrics != nil {
		p.metrics.observe(ctx, &o, took)
	}
	if p.cfg.AccessLog != nil {
		p.accessLog(ctx, &o, start, took)
	}
}

func (p *Proxy) handle(ctx *fasthttp.RequestCtx, o *outcome) {
	host := hostOnly(ctx.Host())
	tbl := p.routes.Load()
	vh, rt := tbl.lookup(host, ctx.Path())
	if rt != nil && !rt.loc.IsDefaultBackend {
		o.server, o.loc = vh.name, &rt.loc
	}
	if rt == nil || rt.loc.IsDefaultBackend {
		defaultBackend(ctx)
		return
	}
	loc := &rt.loc
	if ip, ok := netip.AddrFromSlice(ctx.RemoteIP()); !ok || !rt.allowed(ip) {
		// whitelist-source-range: nginx "deny all" after the allow list.
		ctx.Error("403 Forbidden", fasthttp.StatusForbidden)
		return
	}
	if !ctx.IsTLS() && (loc.Rewrite.ForceSSLRedirect || (loc.Rewrite.SSLRedirect && vh.tls)) {
		// ssl-redirect / force-ssl-redirect (lua_ingress.rewrite): to
		// https://<host without port><request_uri>, http-redirect-code.
		uri := string(ctx.RequestURI())
		if !loc.Rewrite.PreserveTrailingSlash {
			uri = strings.TrimSuffix(uri, "/") // one trailing slash, as lua_ingress
		}
		ctx.Response.Header.Set("Location", "https://"+string(host)+uri)
		ctx.SetStatusCode(tbl.redirectCode)
		return
	}
	if loc.Redirect.URL != "" {
		// permanent-redirect / temporal-redirect: nginx "return <code> <url>",
		// the URL as written and the code as configured (300-308).
		ctx.Response.Header.Set("Location", loc.Redirect.URL)
		ctx.SetStatusCode(loc.Redirect.Code)
		return
	}
	if loc.Rewrite.AppRoot != "" && string(ctx.Path()) == "/" {
		// app-root: ingress-nginx answers "/" with a 302 to
		// $scheme://$http_host<app-root>.
		ctx.Redirect(loc.Rewrite.AppRoot, fasthttp.StatusFound)
		return
	}
	if limit := loc.Proxy.BodySizeBytes; limit > 0 && int64(ctx.Request.Header.ContentLength()) > limit {
		// proxy-body-size: a declared length over the limit is refused
		// before anything goes upstream (nginx client_max_body_size).
		refuseBody(ctx)
		return
	}
	st := statePool.Get().(*reqState)
	defer st.release()
	st.view = requestView{ctx: ctx, host: host, server: vh.name, location: loc.Path}
	view := &st.view
	if loc.CORS.Enabled && string(ctx.Method()) == "OPTIONS" && setCORS(ctx, &loc.CORS) {
		return // a preflight is answered here, as ingress-nginx does
	}
	upgrade := upgradeProtocol(&ctx.Request.Header)
	st.buf = p.prepare(ctx, loc, st.buf)
	if rt.rewrite != nil {
		if path, ok := rt.rewritten(ctx.Path()); ok {
			ctx.Request.URI().SetPathBytes(path)
		}
	}
	if upgrade != "" {
		p.upgrade(ctx, loc, view, upgrade, o)
		return
	}

	// The upstream request shares the client request's headers and URI and
	// reads its body: whole when it fitted in BodyBufferBytes, else as a
	// stream through a proxy-body-size limit.
	out := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(out)
	ctx.Request.Header.CopyTo(&out.Header)
	ctx.Request.URI().CopyTo(out.URI())
	out.UseHostHeader = true
	lim := &st.lim
	cl := ctx.Request.Header.ContentLength()
	body := ctx.RequestBodyStream()
	buffered := body == nil || (cl >= 0 && cl <= p.cfg.BodyBufferBytes)
	switch {
	case buffered:
		out.SetBodyRaw(ctx.Request.Body())
	default:
		*lim = limitReader{r: body, left: loc.Proxy.BodySizeBytes}
		if lim.left <= 0 {
			lim.left = -1
		}
		out.SetBodyStream(lim, cl)
	}

	tries := loc.Proxy.NextUpstreamTries
	if tries <= 0 {
		tries = 3
	}
	replayable := buffered && isReplayable(ctx)
	a := &st.attempt
	for attempt := 1; ; attempt++ {
		pick, err := p.cfg.Picker.Pick(loc.Backend, view, a)
		if err != nil {
			if errors.Is(err, balancer.ErrUnknownBackend) {
				ctx.Error("503 Service Temporarily Unavailable", fasthttp.StatusServiceUnavailable)
			} else {
				ctx.Error("502 Bad Gateway", fasthttp.StatusBadGateway)
			}
			return
		}
		start := time.Now()
		err = p.client(pick.Peer, loc).Do(out, &ctx.Response)
		elapsed := time.Since(start)
		o.upstream += elapsed
		if pick.Alternative {
			o.canary = pick.Backend
		}
		o.peer = pick.Peer
		if err == nil && !lim.over {
			o.upstreamStatus, o.upstreamLength = ctx.Response.StatusCode(), ctx.Response.Header.ContentLength()
			p.cfg.Picker.Done(pick, balancer.DoneInfo{ResponseTime: elapsed, HeaderTime: elapsed, Status: ctx.Response.StatusCode()})
			removeConnectionTokens(ctx.Response.Header.Peek("Connection"), ctx.Response.Header.Del)
			for _, h := range hopHeaders {
				if h != "Trailer" { // announces trailers the body stream carries
					ctx.Response.Header.Del(h)
				}
			}
			if pick.SetCookie != "" {
				ctx.Response.Header.Add("Set-Cookie", pick.SetCookie)
			}
			if loc.CORS.Enabled {
				setCORS(ctx, &loc.CORS)
			}
			return
		}
		p.cfg.Picker.Done(pick, balancer.DoneInfo{ResponseTime: elapsed, Failed: !lim.over})
		ctx.Response.Reset()
		if lim.over {
			// proxy-body-size while streaming: the chunked body went over
			// the limit; the upstream got a broken body, the client a 413.
			refuseBody(ctx)
			return
		}
		if attempt >= tries || !(replayable || isDialError(err)) || !retryable(err) {
			if isTimeout(err) {
				ctx.Error("504 Gateway Time-out", fasthttp.StatusGatewayTimeout)
			} else {
				ctx.Error("502 Bad Gateway", fasthttp.StatusBadGateway)
			}
			return
		}
		a.LastFailure = balancer.FailureFailed
	}
}

// reqState is what one request would otherwise allocate: the balancer's
// request view, the attempt, the body limiter and a header scratch buffer.
// Pooled; nothing in it outlives the request.
type reqState struct {
	view    requestView
	attempt balancer.Attempt
	lim     limitReader
	buf     []byte
}

var statePool = sync.Pool{New: func() any { return new(reqState) }}

func (st *reqState) release() {
	*st = reqState{buf: st.buf[:0]}
	statePool.Put(st)
}

// prepare rewrites the request for the upstream: hop-by-hop headers out,
// X-Forwarded-* and X-Real-IP in, X-Request-ID kept or made. buf is
// scratch space, returned for reuse.
func (p *Proxy) prepare(ctx *fasthttp.RequestCtx, loc *model.Location, buf []byte) []byte {
	h := &ctx.Request.Header
	removeConnectionTokens(h.Peek("Connection"), h.Del)
	teTrailers := tokenListHas(h.Peek("Te"), "trailers")
	for _, name := range hopHeaders {
		h.Del(name)
	}
	if teTrailers {
		h.Set("Te", "trailers")
	}
	b := buf[:0]
	if prior := h.Peek("X-Forwarded-For"); len(prior) > 0 {
		b = append(append(b, prior...), ", "...)
	}
	ipAt := len(b)
	if ip, ok := netip.AddrFromSlice(ctx.RemoteIP()); ok {
		b = ip.Unmap().AppendTo(b)
	}
	h.SetBytesV("X-Forwarded-For", b)
	h.SetBytesV("X-Real-IP", b[ipAt:])
	proto := "http"
	if ctx.IsTLS() {
		proto = "https"
	}
	h.Set("X-Forwarded-Proto", proto)
	h.Set("X-Forwarded-Scheme", proto)
	h.SetBytesV("X-Forwarded-Host", ctx.Host())
	if ta, ok := ctx.LocalAddr().(*net.TCPAddr); ok {
		b = strconv.AppendInt(b[:0], int64(ta.Port), 10)
		h.SetBytesV("X-Forwarded-Port", b)
	}
	if len(h.Peek("X-Request-ID")) == 0 {
		var id [16]byte
		_, _ = rand.Read(id[:])
		b = hex.AppendEncode(b[:0], id[:])
		h.SetBytesV("X-Request-ID", b)
	}
	if loc.UpstreamVhost != "" {
		h.SetHost(loc.UpstreamVhost)
	}
	// The upstream is spoken to as backend-protocol says, whatever the
	// client used; fasthttp's HostClient refuses a request whose scheme
	// differs from its own.
	if loc.BackendProtocol == model.ProtocolHTTPS {
		ctx.Request.URI().SetScheme("https")
	} else {
		ctx.Request.URI().SetScheme("http")
	}
	if loc.XForwardedPrefix != "" {
		h.Set("X-Forwarded-Prefix", loc.XForwardedPrefix)
	}
	return b
}

// setCORS adds ingress-nginx's CORS headers when the request carries an
// allowed Origin, and answers an OPTIONS preflight with 204 (it returns true
// then).
func setCORS(ctx *fasthttp.RequestCtx, c *model.CORS) bool {
	origin := string(ctx.Request.Header.Peek("Origin"))
	allowed := ""
	for _, o := range c.AllowOrigin {
		if o == "*" || o == origin || (strings.Contains(o, "://*.") && wildcardOrigin(o, origin)) {
			allowed = o
			if o != "*" {
				allowed = origin
			}
			break
		}
	}
	if origin == "" || allowed == "" {
		return false
	}
	h := &ctx.Response.Header
	h.Set("Access-Control-Allow-Origin", allowed)
	if c.AllowCredentials {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	h.Set("Access-Control-Allow-Methods", c.AllowMethods)
	h.Set("Access-Control-Allow-Headers", c.AllowHeaders)
	if c.ExposeHeaders != "" {
		h.Set("Access-Control-Expose-Headers", c.ExposeHeaders)
	}
	if string(ctx.Method()) != "OPTIONS" {
		return false
	}
	h.Set("Access-Control-Max-Age", strconv.Itoa(c.MaxAgeSeconds))
	h.SetContentType("text/plain; charset=utf-8")
	h.SetContentLength(0)
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return true
}

// wildcardOrigin matches "https://*.example.com" against an Origin.
func wildcardOrigin(pattern, origin string) bool {
	scheme, rest, _ := strings.Cut(pattern, "://*.")
	o, ok := strings.CutPrefix(origin, scheme+"://")
	if !ok {
		return false
	}
	i := strings.IndexByte(o, '.')
	return i > 0 && o[i+1:] == rest
}

// removeConnectionTokens deletes the headers a Connection header names
// (RFC 9110 §7.6.1).
func removeConnectionTokens(conn []byte, del func(string)) {
	if len(conn) == 0 {
		return
	}
	for _, tok := range strings.Split(string(conn), ",") {
		if tok = strings.TrimSpace(tok); tok != "" && !strings.EqualFold(tok, "close") && !strings.EqualFold(tok, "keep-alive") {
			del(tok)
		}
	}
}

// tokenListHas reports whether a comma-separated header value lists tok
// (case-insensitive, parameters after ';' ignored). It allocates nothing.
func tokenListHas(v []byte, tok string) bool {
	for len(v) > 0 {
		t := v
		if i := bytes.IndexByte(v, ','); i >= 0 {
			t, v = v[:i], v[i+1:]
		} else {
			v = nil
		}
		if i := bytes.IndexByte(t, ';'); i >= 0 {
			t = t[:i]
		}
		if strings.EqualFold(string(bytes.TrimSpace(t)), tok) {
			return true
		}
	}
	return false
}

// clientKey names a keep-alive pool: a peer, spoken to in plain HTTP/1.1
// or over TLS.
type clientKey struct {
	addr string
	tls  bool
}

// client returns the keep-alive pool for a peer, creating it on first use.
func (p *Proxy) client(addr string, loc *model.Location) *fasthttp.HostClient {
	key := clientKey{addr: addr, tls: loc.BackendProtocol == model.ProtocolHTTPS}
	if c := (*p.clients.Load())[key]; c != nil {
		return c
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.clients.Load()
	if c := old[key]; c != nil {
		return c
	}
	t := timeoutsOf(loc)
	c := &fasthttp.HostClient{
		Addr:                          addr,
		MaxConns:                      1024,
		MaxIdleConnDuration:           60 * time.Second,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
		NoDefaultUserAgentHeader:      true,
		StreamResponseBody:            true,
		// backend-protocol HTTPS: TLS to the peer, its certificate not
		// verified and no SNI sent, as nginx's proxy_ssl_verify off and
		// proxy_ssl_server_name off (ingress-nginx's defaults).
		IsTLS:     key.tls,
		TLSConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // nginx's proxy_ssl_verify off
		Dial: func(a string) (net.Conn, error) {
			c, err := fasthttp.DialTimeout(a, t.connect)
			if err != nil {
				return nil, err
			}
			return &timeoutConn{Conn: c, read: t.read, write: t.send}, nil
		},
	}
	next := make(map[clientKey]*fasthttp.HostClient, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[key] = c
	p.clients.Store(&next)
	return c
}

// isReplayable: only requests that can be sent again (nginx
// proxy_next_upstream without non_idempotent).
func isReplayable(ctx *fasthttp.RequestCtx) bool {
	switch string(ctx.Method()) {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}

// refuseBody answers 413 and closes the connection. Like nginx's lingering
// close it first reads and drops up to lingerBytes of the unread body, so
// the client, still sending, reads the 413 instead of a connection reset.
func refuseBody(ctx *fasthttp.RequestCtx) {
	if body := ctx.RequestBodyStream(); body != nil {
		_, _ = io.CopyN(io.Discard, body, lingerBytes)
	}
	ctx.Error("413 Request Entity Too Large", fasthttp.StatusRequestEntityTooLarge)
	ctx.SetConnectionClose()
}

// lingerBytes bounds what refuseBody drains.
const lingerBytes = 1 << 20

// isDialError reports whether err happened before anything was written
// upstream, so even a streamed request may go to another peer.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.Is(err, fasthttp.ErrDialTimeout) || (errors.As(err, &op) && op.Op == "dial")
}

// isTimeout: the upstream did not make progress within its timeout (504).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// retryable: errors where nothing reached the upstream application, or the
// upstream closed before answering (proxy_next_upstream error timeout).
func retryable(err error) bool {
	var dialErr *net.OpError
	if errors.As(err, &dialErr) {
		return true
	}
	return errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, fasthttp.ErrDialTimeout) || errors.Is(err, fasthttp.ErrTimeout)
}

// defaultBackend answers as ingress-nginx's default backend.
func defaultBackend(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.SetContentType("text/plain; charset=utf-8")
	ctx.SetStatusCode(fasthttp.StatusNotFound)
	ctx.SetBodyString("default backend - 404")
}

// hostOnly lower-cases the Host header and drops the port.
func hostOnly(h []byte) []byte {
	if i := lastColon(h); i >= 0 && (len(h) == 0 || h[len(h)-1] != ']') {
		h = h[:i]
	}
	for _, c := range h {
		if c >= 'A' && c <= 'Z' {
			b := make([]byte, len(h))
			for i, c := range h {
				if c >= 'A' && c <= 'Z' {
					c += 'a' - 'A'
				}
				b[i] = c
			}
			return b
		}
	}
	return h
}

func lastColon(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		switch b[i] {
		case ':':
			return i
		case ']':
			return -1
		}
	}
	return -1
}

// requestView answers nginx variables from the fasthttp request for the
// balancer.
type requestView struct {
	ctx      *fasthttp.RequestCtx
	host     []byte
	server   string
	location string
	scratch  [64]byte
}

func (v *requestView) Var(name string) ([]byte, bool) {
	switch name {
	case "host":
		return v.host, true
	case "server_name":
		return []byte(v.server), true
	case "location_path":
		return []byte(v.location), true
	case "https":
		if v.ctx.IsTLS() {
			return []byte("on"), true
		}
		return nil, true
	case "request_uri":
		return v.ctx.RequestURI(), true
	case "uri":
		return v.ctx.Path(), true
	case "remote_addr":
		b, err := v.ctx.RemoteIP().AppendText(v.scratch[:0])
		return b, err == nil
	case "http_cookie":
		c := v.ctx.Request.Header.Peek("Cookie")
		return c, len(c) > 0
	}
	if len(name) > 5 && name[:5] == "http_" {
		h := name[5:]
		if len(h) > len(v.scratch) {
			return nil, false
		}
		b := v.scratch[:len(h)]
		for i := 0; i < len(h); i++ {
			c := h[i]
			if c == '_' {
				c = '-'
			}
			b[i] = c
		}
		val := v.ctx.Request.Header.PeekBytes(b)
		return val, val != nil
	}
	if len(name) > 7 && name[:7] == "cookie_" {
		val := v.ctx.Request.Header.Cookie(name[7:])
		return val, val != nil
	}
	return nil, false
}
