package proxy

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"iter"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/digestauth"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/valyala/fasthttp"
)

// Picker is what the proxy needs of the balancer; *balancer.Registry
// implements it.
type Picker interface {
	Pick(backend string, req balancer.Request, a *balancer.Attempt) (*balancer.Pick, error)
	Done(p *balancer.Pick, info balancer.DoneInfo)
}

var _ Picker = (*balancer.Registry)(nil)

// Config configures a Proxy. Zero values are usable except Picker.
type Config struct {
	// Picker chooses peers. Required.
	Picker Picker
	// MaxConns, when not zero, caps the open client connections in place
	// of the Configuration's max-worker-connections × worker processes
	// (conns.go).
	MaxConns int
	// ReadTimeout bounds reading a client request (slow-loris defence);
	// zero means 60s.
	ReadTimeout time.Duration
	// IdleTimeout, when not zero, closes idle keep-alive client
	// connections after it in place of the Configuration's keep-alive
	// (75s by default, nginx keepalive_timeout).
	IdleTimeout time.Duration
	// MaxHeaderBytes is the read buffer a request head must fit in; zero
	// means 33 KiB, nginx's default head capacity (headread.go): the
	// Configuration's client-header-buffer-size and
	// large-client-header-buffers decide which heads are taken, up to it.
	MaxHeaderBytes int
	// BodyBufferBytes is how much of a request body is read before the
	// request goes upstream: a body that fits is sent whole and may be
	// retried on another peer; a longer or chunked one is streamed and is
	// never buffered whole. Zero means 64 KiB. The body limit is the
	// location's proxy-body-size.
	BodyBufferBytes int
	// BodyTempDir holds, in unlinked files, the part of a request body read
	// whole (proxy-request-buffering, on by default) beyond what is kept in
	// memory: BodyBufferBytes or the location's client-body-buffer-size,
	// whichever is larger. Made 0700 on first use. Zero means
	// "switchyard-client-body" in os.TempDir().
	BodyTempDir string
	// Registerer receives the request metrics (ingress-nginx's names); nil
	// means no metrics.
	Registerer prometheus.Registerer
	// AccessLog receives one line per request in ingress-nginx's default
	// log format (log_format upstreaminfo); nil means no access log. It is
	// written from many goroutines at once, one Write per line, so it must
	// be safe for concurrent use (an *os.File is).
	AccessLog io.Writer
	// ErrorLog receives a line when a TLS handshake with an upstream fails
	// (a failed proxy-ssl-verify, say) or an upstream sends a head larger
	// than proxy-buffer-size, at most one a second; nil: none.
	ErrorLog func(msg string)
	// MetricsPerHost labels request metrics with the server name
	// (--metrics-per-host); the label is empty otherwise.
	MetricsPerHost bool
	// MirrorConcurrency bounds the copies of requests for mirror-target
	// in flight (mirror.go); one more is dropped and counted. Zero means
	// 128.
	MirrorConcurrency int
	// H2C makes Serve also accept cleartext HTTP/2 with prior knowledge
	// (RFC 9113 §3.3), e.g. gRPC clients without TLS; ingress-nginx serves
	// gRPC over TLS only. False: the plain port speaks HTTP/1.1 only.
	H2C bool
	// XNetHTTP2 serves HTTP/2 clients with golang.org/x/net/http2's server
	// instead of the proxy's own (proxy/h2srv), which costs 0.59× the CPU
	// per request and holds two thirds of the memory per idle connection
	// (docs/benchmarks/product.md). False: proxy/h2srv.
	XNetHTTP2 bool
	// LimitZones, when not nil, holds every limit_req (limit-rps,
	// limit-rpm) and limit_conn (limit-connections) zone in memory shared
	// with the other worker processes that map it, so that a client's
	// requests count in one zone whichever process serves them, as in
	// nginx's shared zones (shmzone.go). A zone it has no slot for
	// refuses its requests, and Update says so through ErrorLog. Close it
	// only after the Proxy is done. Nil: the zones live in this process.
	LimitZones *LimitZones
	// Digest answers auth-type: digest where the nonces and failure counts
	// live elsewhere (the controller, for its worker processes, as nginx's
	// workers share the module's zone); nil: a Verifier of the proxy's
	// own.
	Digest DigestChecker
}

// Proxy is the HTTP data plane: HTTP/1.1 on both ports, HTTP/2 on the TLS
// port.
type Proxy struct {
	cfg     Config
	routes  atomic.Pointer[table]
	server  *fasthttp.Server
	metrics *metrics // nil without a Registerer
	certs   *certStore

	mu    sync.Mutex // guards pools writes; reads are lock-free
	pools atomic.Pointer[map[clientKey]*peerPool]
	// janitor closes idle upstream connections; the first Serve starts it.
	janitor sync.Once
	h2      h2Transports // HTTP/2 upstreams
	auth    *authClient  // external authentication
	// limits holds the rate limit zones across Configurations, as
	// nginx's limit_req zones survive reloads.
	limits rateLimits
	// digest holds the nonces of auth-type: digest across Configurations,
	// as nginx's shared memory zone survives reloads.
	digest DigestChecker
	// conns holds the connection settings of the Configuration in use;
	// tracker counts and tracks the client connections of every port.
	conns   atomic.Pointer[connSettings]
	tracker *connTracker
	// reaper closes idle client connections past their timeouts; the
	// first Serve starts it.
	reaper sync.Once
	// mirrors sends the copies of mirror-target.
	mirrors *mirrorer
	// spoolDir holds request bodies larger than memory takes.
	spoolDir spoolDir
}

// New returns a Proxy serving nothing until Update.
func New(cfg Config) (*Proxy, error) {
	if cfg.Picker == nil {
		return nil, errors.New("proxy: Config.Picker is required")
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 60 * time.Second
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = defaultHeadBuffer
	}
	if cfg.BodyBufferBytes <= 0 {
		cfg.BodyBufferBytes = 64 << 10
	}
	certs, err := newCertStore()
	if err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, certs: certs, auth: newAuthClient(), digest: cfg.Digest,
		mirrors: newMirrorer(&cfg), spoolDir: spoolDir{path: cmp.Or(cfg.BodyTempDir, defaultSpoolDir())}}
	if cfg.Registerer != nil {
		m, err := newMetrics(cfg.Registerer, cfg.MetricsPerHost)
		if err != nil {
			return nil, err
		}
		p.metrics = m
		if err := p.mirrors.register(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	p.limits.shm = cfg.LimitZones
	if p.digest == nil {
		p.digest = localDigest{digestauth.NewVerifier(digestauth.VerifierConfig{})}
	}
	p.routes.Store(newTable(&model.Configuration{}, &p.limits))
	p.conns.Store(settingsOf(&model.Global{}, &cfg))
	p.tracker = newConnTracker(&p.conns)
	empty := map[clientKey]*peerPool{}
	p.pools.Store(&empty)
	p.server = &fasthttp.Server{
		Handler: p.ServeHTTP,
		Name:    "switchyard",
		// Open connections are capped by the tracker (conns.go), which
		// closes idle ones first; fasthttp's own cap would answer 503.
		Concurrency: fastConcurrency,
		ConnState:   fastConnState,
		ReadTimeout: cfg.ReadTimeout,
		// The reaper closes idle connections at keep-alive; this is
		// fasthttp's backstop.
		IdleTimeout:    maxKeepAlive,
		ReadBufferSize: cfg.MaxHeaderBytes,
		// A connection that has not sent its first byte holds no read
		// buffer, nor a request context: idle ones cost little.
		ReduceMemoryUsage:             true,
		ErrorHandler:                  fastError,
		Logger:                        discardLogger{},
		MaxRequestBodySize:            cfg.BodyBufferBytes,
		StreamRequestBody:             true,
		DisablePreParseMultipartForm:  true,
		DisableHeaderNamesNormalizing: false,
		NoDefaultServerHeader:         true,
		// A proxied response without a Content-Type goes out without one,
		// as nginx sends it; the proxy's own answers set theirs.
		NoDefaultContentType: true,
		NoDefaultDate:        false,
		CloseOnShutdown:      true,
	}
	return p, nil
}

// Update swaps in the routes of cfg. Requests in flight finish on the routes
// they started with.
func (p *Proxy) Update(cfg *model.Configuration) {
	p.conns.Store(settingsOf(&cfg.Global, &p.cfg))
	p.certs.update(cfg)
	p.auth.setTimeouts(cfg.Global.Proxy)
	t := newTable(cfg, &p.limits)
	p.routes.Store(t)
	if t.limitErr != nil && p.cfg.ErrorLog != nil {
		// One line: errors.Join puts each zone's on a line of its own.
		p.cfg.ErrorLog("limits: " + strings.ReplaceAll(t.limitErr.Error(), "\n", "; "))
	}
	if p.metrics != nil {
		p.metrics.reset() // its keys are the old table's locations
	}
}

// UpdateBackends is Update for a Configuration whose backends alone changed
// since the last Update: the routes stay unless the default backend moved
// between the built-in default server and a Service.
func (p *Proxy) UpdateBackends(cfg *model.Configuration) {
	if t := p.routes.Load(); t == nil || t.builtinDefault != builtinDefault(cfg) {
		p.Update(cfg)
	}
}

// Serve accepts connections on ln until ctx ends, then drains: in-flight
// requests finish, idle connections close.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	p.startJanitor(ctx)
	if p.cfg.H2C {
		return p.serveH2C(ctx, ln)
	}
	// fasthttp moves the read deadline twice per request; the kernel timer
	// is re-armed about once per timeout instead (clock.go).
	tl := p.track(ctx, ln)
	errc := make(chan error, 1)
	go func() { errc <- p.server.Serve(h1Listener{trackingListener: tl, lag: p.clientLag()}) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return p.server.Shutdown()
	}
}

// clientLag is how far a client connection's armed deadline may lag the
// one asked for (an early wake-up that re-arms, never an early timeout):
// the longer of ReadTimeout and fasthttp's idle backstop, so fasthttp's
// alternation between the two does not re-arm the timer per request.
func (p *Proxy) clientLag() time.Duration {
	return max(p.cfg.ReadTimeout, maxKeepAlive)
}

// track wraps ln in the connection tracker and starts, once, the reaper
// of idle connections, until ctx ends.
func (p *Proxy) track(ctx context.Context, ln net.Listener) *trackingListener {
	p.reaper.Do(func() { go p.tracker.runReaper(ctx.Done()) })
	return p.tracker.listener(ln)
}

// discardLogger drops fasthttp's log lines: a client's broken request is
// not ours to log (nginx logs it at info level, off by default).
type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

// startJanitor starts, once, the goroutine that closes upstream
// connections idle for upstreamIdleTime, until ctx ends; then it closes
// every idle one.
func (p *Proxy) startJanitor(ctx context.Context) {
	p.janitor.Do(func() {
		go func() {
			tick := time.NewTicker(upstreamIdleTime / 4)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					p.closeIdlePools(true)
					return
				case <-tick.C:
					p.closeIdlePools(false)
				}
			}
		}()
	})
}

// hopHeaders are removed when proxying (RFC 9110 §7.6.1).
var hopHeaders = [...]string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// Bits of sentHeaders' mask: hopHeaders by index, then two more.
const (
	hopConnection     = 0
	hopTe             = 5
	sentXForwardedFor = len(hopHeaders)
	sentXRequestID    = len(hopHeaders) + 1
)

// equalFoldASCII reports whether b equals s, ASCII letters in either case.
func equalFoldASCII[T string | []byte](b T, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// sentHeaders scans a raw request head (the request line may lead) and
// returns a mask of the headers in it, by field name without regard to
// case: bit i for hopHeaders[i], then X-Forwarded-For and X-Request-ID.
func sentHeaders(raw []byte) uint16 {
	var mask uint16
	for name := range rawFieldNames(raw) {
		for i, h := range hopHeaders {
			if equalFoldASCII(name, h) {
				mask |= 1 << i
			}
		}
		if equalFoldASCII(name, "X-Forwarded-For") {
			mask |= 1 << sentXForwardedFor
		}
		if equalFoldASCII(name, "X-Request-ID") {
			mask |= 1 << sentXRequestID
		}
	}
	return mask
}

// outcome is what one request did, for the metrics.
type outcome struct {
	server string
	loc    *model.Location
	// rt is loc's route, whose series the metrics use (nil with loc).
	rt       *route
	canary   string
	upstream time.Duration
	// connect and header are the last attempt's connect time and time to
	// the response head ($upstream_connect_time, $upstream_header_time).
	connect, header time.Duration
	// The last attempt's peer, its status and response length, for the
	// access log.
	peer           string
	upstreamStatus int
	upstreamLength int
	// id is the X-Request-ID the proxy made for the upstream and the
	// authentication service, if the client sent none.
	id requestID
	// auth is what external authentication passes upstream and back; nil
	// without.
	auth *authPass
	// remote is the client's address ($remote_addr, after the real IP
	// settings), for the access log.
	remote netip.Addr
	// hsts is the Strict-Transport-Security value the answer gets (an
	// HTTPS request to a server with a certificate); empty without.
	hsts string
	// headers are the location's add-headers and custom-headers.
	headers []model.HeaderField
	// noLog: the request is not written to the access log
	// (enable-access-log: "false", skip-access-log-urls).
	noLog bool
	// rate is the location's limit-rate; nil without.
	rate *model.ResponseRate
	// hold is the request's limit-connections count, released when the
	// response has been written (handOver) or the tunnel closed.
	hold connHold
}

// setAuth keeps what external authentication passes, after the fields of
// the client certificate check.
func (o *outcome) setAuth(pass *authPass) {
	if o.auth != nil {
		// pass may be a cached answer's, shared: merge into a new one.
		pass = &authPass{cookie: pass.cookie, always: pass.always, info: o.auth.info,
			headers: append(append([][2]string(nil), o.auth.headers...), pass.headers...)}
	}
	o.auth = pass
}

// addUpstreamFields adds fields the upstream request carries in place of
// any the client sent under those names.
func (o *outcome) addUpstreamFields(fields [][2]string) {
	if len(fields) == 0 {
		return
	}
	if o.auth == nil {
		o.auth = &authPass{}
	}
	o.auth.headers = append(o.auth.headers, fields...)
}

// requestID is the X-Request-ID the upstream got: the client's, or the one
// the proxy made. The proxy makes one only when the client's is missing or
// empty (forwardHeaders, appendUpstreamHead, authorize), so a made one
// spares the lookup.
func (o *outcome) requestID(h *fasthttp.RequestHeader) []byte {
	if o.id.set {
		return o.id.bytes()
	}
	return h.Peek("X-Request-ID")
}

// ServeHTTP handles one request and records its metrics.
func (p *Proxy) ServeHTTP(ctx *fasthttp.RequestCtx) {
	// The outcome escapes (the HTTP/2-upstream and upgrade paths take its
	// address through interfaces), so it comes from a pool instead of the
	// heap. Nothing keeps it past this function: response bodies fasthttp
	// streams after the handler returns hold no reference to it.
	o := outcomePool.Get().(*outcome)
	defer putOutcome(o)
	// fasthttp read the clock just before calling the handler.
	start := ctx.Time()
	if h := h1ConnOf(ctx.Conn()); h != nil {
		h.tc.headDone() // fasthttp read the head whole
	}
	p.handle(ctx, o)
	if o.hold.held() || o.rate != nil {
		// limit-connections and limit-rate last until the body fasthttp
		// writes after this returns has gone.
		handOver(ctx.Response.BodyStream(), newPacer(o.rate), &o.hold)
	}
	if o.hsts != "" {
		// Every answer, the proxy's own ones too (redirects, 401, 204),
		// as ingress-nginx's header phase adds it.
		ctx.Response.Header.Set("Strict-Transport-Security", o.hsts)
	}
	if len(o.headers) > 0 && model.ResponseHeaderStatus(ctx.Response.StatusCode()) {
		// add-headers and custom-headers, over the upstream's fields,
		// on the answers nginx's add_header acts on.
		for _, h := range o.headers {
			ctx.Response.Header.Set(h.Name, h.Value)
		}
	}
	if s := p.conns.Load(); s.keepAlive == 0 || ctx.ConnRequestNum() >= s.keepAliveRequests {
		// keep-alive 0, or keep-alive-requests reached: nginx closes
		// after this response.
		ctx.Response.SetConnectionClose()
	}
	if p.metrics == nil && p.cfg.AccessLog == nil {
		return
	}
	took := time.Since(start)
	req, resp := &ctx.Request, &ctx.Response
	x := exchange{method: req.Header.Method(), requestURI: req.Header.RequestURI(), proto: req.Header.Protocol(),
		referer: req.Header.Referer(), userAgent: req.Header.UserAgent(), requestID: o.requestID(&req.Header),
		status:    resp.StatusCode(),
		bodySent:  bodyLen(resp.IsBodyStream(), resp.Header.ContentLength(), resp.Body),
		reqLength: len(req.Header.RawHeaders()) + bodyLen(req.IsBodyStream(), req.Header.ContentLength(), req.Body)}
	// $request_length counts the request line too ("GET / HTTP/1.1\r\n").
	x.reqLength += len(x.method) + len(x.requestURI) + len(x.proto) + 4
	x.remote = o.remote
	var lf *logFormat
	logged := p.cfg.AccessLog != nil && !o.noLog
	if logged {
		lf = p.logFormatOf()
	}
	if p.metrics != nil || (logged && lf.respHeader) {
		x.respHeader = headLen(&resp.Header)
	}
	if p.metrics != nil {
		p.metrics.observe(&x, o, took, start.Sub(epoch)+took)
	}
	if logged {
		lr := logReq{h1: ctx, end: start.Add(took)}
		p.accessLog(lf, &x, o, &lr, took)
	}
}

var outcomePool = sync.Pool{New: func() any { return new(outcome) }}

// putOutcome clears o and returns it to the pool.
func putOutcome(o *outcome) {
	*o = outcome{}
	outcomePool.Put(o)
}

// exchange is what the metrics and the access log read of one finished
// request, from either front end. The slices point into the request and
// are read before the handler returns.
type exchange struct {
	remote               netip.Addr
	method, requestURI   []byte
	proto                []byte
	referer, userAgent   []byte
	requestID            []byte
	status               int
	bodySent, respHeader int // response body and header bytes
	reqLength            int // request headers and body ($request_length)
}

func (p *Proxy) handle(ctx *fasthttp.RequestCtx, o *outcome) {
	if v := headVerdict(ctx.Conn()); v != 0 {
		refuseHead(ctx, v)
		return
	}
	if ctx.Request.Header.ContentLength() == -1 && hasRawHeader(ctx.Request.Header.RawHeaders(), "content-length") {
		// Request smuggling defence: fasthttp lets Transfer-Encoding win
		// over Content-Length; nginx (since 1.21.1) refuses the request and
		// so do we, closing the connection before anything behind it is
		// parsed (RFC 9112 §6.3).
		ctx.Error("400 Bad Request", fasthttp.StatusBadRequest)
		ctx.SetConnectionClose()
		return
	}
	host := hostOnly(ctx.Host())
	tbl := p.routes.Load()
	conn := remoteAddr(ctx)
	o.remote = conn
	if ri := tbl.realIP; ri != nil {
		// nginx's realip runs first, for every request of the server.
		var one [1][]byte
		values := one[:0]
		if ri.all {
			values = ctx.Request.Header.PeekAll(ri.name)
		} else if v := ctx.Request.Header.Peek(ri.name); v != nil {
			values = append(values, v)
		}
		o.remote = ri.client(conn, values)
	}
	vh, rt := tbl.lookup(host, ctx.Path())
	if rt != nil && !rt.loc.IsDefaultBackend {
		o.server, o.loc, o.rt = vh.name, &rt.loc, rt
	}
	if rt != nil {
		o.headers = rt.loc.ResponseHeaders
		o.addUpstreamFields(rt.setFields) // proxy-set-headers
		o.noLog = rt.loc.NoAccessLog
		o.rate = pacedRate(&rt.loc)
	}
	if len(tbl.skipLog) > 0 && tbl.skipLog[string(ctx.Request.Header.RequestURI())] {
		o.noLog = true
	}
	if vh != nil && vh.tls && ctx.IsTLS() {
		o.hsts = tbl.hsts
	}
	if vh != nil && vh.redirectTo != "" {
		answerFast(ctx, verdict{status: tbl.redirectCode, location: tbl.wwwRedirect(vh, ctx.IsTLS(), ctx.LocalAddr(),
			string(ctx.Request.Header.Peek("X-Forwarded-Proto")), string(ctx.Request.Header.Peek("X-Forwarded-Port")), ctx.Request.Header.RequestURI())})
		return
	}
	if vh != nil && vh.clientAuth != nil {
		// Before anything of the server's, as nginx checks the
		// certificate right after the request head.
		a := vh.clientAuth.check(ctx.TLSConnectionState(), host)
		if a.v.status != 0 {
			answerFast(ctx, a.v)
			return
		}
		o.addUpstreamFields(a.fields)
	}
	if rt == nil || rt.loc.IsDefaultBackend {
		defaultBackend(ctx)
		return
	}
	loc := &rt.loc
	f := clientFacts{tls: ctx.IsTLS(), host: ctx.Host(), remote: o.remote, conn: conn, fullForwardedFor: tbl.fullForwardedFor}
	if ta, ok := ctx.LocalAddr().(*net.TCPAddr); ok {
		f.localPort = ta.Port
	}
	if loc.BasicAuth != nil || loc.DigestAuth != nil {
		f.authorization = ctx.Request.Header.Peek("Authorization")
	}
	if v := tbl.check(vh, rt, &f, host, ctx.RequestURI(), ctx.Path(), int64(ctx.Request.Header.ContentLength()), &o.hold); v.status != 0 {
		answerFast(ctx, v)
		return
	}
	if da := loc.DigestAuth; da != nil {
		if v := p.digestCheck(da, string(ctx.Method()), string(ctx.RequestURI()), &f, o); v.status != 0 {
			answerFast(ctx, v)
			return
		}
	}
	if loc.BasicAuth != nil || loc.DigestAuth != nil {
		// ingress-nginx's proxy_set_header Authorization "": the
		// credentials stay with the proxy.
		o.addUpstreamFields(clearAuthorization)
	}
	if loc.ExternalAuth != nil && !p.authorize(ctx, loc.ExternalAuth, &f, host, o) {
		return
	}
	st := statePool.Get().(*reqState)
	defer st.release()
	st.view = requestView{ctx: ctx, viewBase: viewBase{host: host, server: vh.name, location: loc.Path, tls: f.tls, remote: f.remote}}
	view := &st.view
	if loc.CORS.Enabled && string(ctx.Method()) == "OPTIONS" && corsHeaders(&ctx.Response.Header, &loc.CORS, string(ctx.Request.Header.Peek("Origin")), true) {
		// A preflight is answered here, as ingress-nginx does.
		ctx.Response.Header.SetContentType(corsPreflightType)
		ctx.Response.Header.SetContentLength(0)
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	upgrade := upgradeProtocol(&ctx.Request.Header)
	// The target as sent, before rewrite-target: the mirror's $request_uri.
	requestURI := ctx.Request.Header.RequestURI()
	if rt.rewrite != nil {
		if path, ok := rt.rewritten(ctx.Path()); ok {
			ctx.Request.URI().SetPathBytes(path)
		}
	}
	if upgrade != "" {
		p.upgrade(ctx, loc, &f, view, upgrade, o)
		return
	}
	if h2Upstream(loc.BackendProtocol) {
		p.fastToH2(ctx, rt, &f, view, &st.attempt, o)
		return
	}

	// A body that fitted in BodyBufferBytes goes upstream as bytes and may
	// be sent again; a longer or chunked one is streamed through a
	// proxy-body-size limit.
	lim := &st.lim
	cl := ctx.Request.Header.ContentLength()
	body := ctx.RequestBodyStream()
	buffered := body == nil || (cl >= 0 && cl <= p.cfg.BodyBufferBytes)
	out := outbound{headMethod: ctx.IsHead()}
	spooled := false
	if !buffered && spoolsBody(loc, cl) {
		// proxy-request-buffering on: the rest of the body is read
		// before any peer is chosen.
		if !p.spoolBody(ctx, loc, body, cl, st) {
			return
		}
		buffered, spooled = true, true
		out.body = st.spool.mem
		if st.spool.file == nil {
			ctx.Request.SetBodyRaw(st.spool.mem)
		} else {
			// The rest is in the file; ctx.Request's spent stream is
			// not read again.
			out.spool = &st.spool
		}
	}
	if buffered {
		if !spooled {
			if body != nil && !readWholeBody(ctx, body, cl, &st.body) {
				return
			}
			out.body = ctx.Request.Body()
		}
		var extra [][2]string
		if o.auth != nil {
			extra = o.auth.headers
		}
		head, ok := appendUpstreamHead(st.head[:0], &ctx.Request.Header, ctx.Request.URI().RequestURI(), &f, loc, out.bodyLen(), &o.id, extra, &st.buf)
		st.head = head
		if ok {
			out.head = head
		}
	}
	if out.head == nil {
		// A copy of the client's request, edited by forwardHeaders: for a
		// streamed body, and for the rare head appendUpstreamHead declines.
		out.req = fasthttp.AcquireRequest()
		defer fasthttp.ReleaseRequest(out.req)
		st.buf = prepareCopy(ctx, out.req, &f, loc, st.buf, o)
		switch {
		case out.spool != nil:
			// writeRequest sets the body stream at each attempt.
		case buffered:
			out.req.SetBodyRaw(out.body)
		default:
			*lim = limitReader{r: body, left: loc.Proxy.BodySizeBytes, length: int64(max(cl, 0)), conn: h1ConnOf(ctx.Conn())}
			if lim.left <= 0 {
				lim.left = -1
			}
			out.req.SetBodyStream(lim, cl)
		}
	}
	if loc.Mirror != nil {
		// After the access checks and the body, before upstream: where
		// nginx's mirror runs (its precontent phase).
		mr := fastMirrorRequest(ctx, requestURI, host, out.body, !buffered || out.spool != nil)
		p.mirror(loc, &mr)
	}
	r := replayOf(string(ctx.Method()), buffered)
	st.try = fastTry{p: p, out: out, resp: &ctx.Response, lim: lim, replay: r}
	pick, err := p.attempts(loc.Backend, loc, view, &st.attempt, o, r, &st.try)
	if err != nil {
		answerFast(ctx, verdict{status: failureStatus(err)})
		if errors.Is(err, errClientBody) {
			// What is left of the body cannot be told from a next request.
			ctx.SetConnectionClose()
		}
		return
	}
	o.upstreamLength = ctx.Response.Header.ContentLength()
	if rt.intercepts(ctx.Response.StatusCode()) {
		// custom-http-errors: the upstream's answer is dropped unread.
		code := ctx.Response.StatusCode()
		ctx.Response.Reset()
		p.customError(&ctx.Response, rt, code, errorRequestOf(ctx, o.requestID(&ctx.Request.Header), o.remote), view, o)
		return
	}
	// Trailer stays: it announces trailers the body stream carries.
	st.buf = stripHopHeaders(&ctx.Response.Header, true, st.buf)
	if pick.SetCookie != "" {
		ctx.Response.Header.Add("Set-Cookie", pick.SetCookie)
	}
	if c := o.auth.cookieFor(ctx.Response.StatusCode()); c != "" {
		ctx.Response.Header.Add("Set-Cookie", c)
	}
	if i := o.auth.authInfo(); i != "" {
		ctx.Response.Header.Set("Authentication-Info", i)
	}
	if loc.CORS.Enabled {
		corsHeaders(&ctx.Response.Header, &loc.CORS, string(ctx.Request.Header.Peek("Origin")), false)
	}
}

// authorize runs external authentication for an HTTP/1.1 request: false
// when it answered the client itself. The X-Request-ID the service gets is
// the one the upstream will get.
func (p *Proxy) authorize(ctx *fasthttp.RequestCtx, ea *model.ExternalAuth, f *clientFacts, host []byte, o *outcome) bool {
	// The auth request may outlive this call (a shared lookup), so it
	// holds copies: pointing into f or o would move both to the heap for
	// every request, authenticated or not.
	id := ctx.Request.Header.Peek("X-Request-ID")
	if len(id) == 0 {
		o.id.make()
		id = append([]byte(nil), o.id.bytes()...)
	}
	facts := *f
	ar := authRequest{f: &facts, host: host, method: string(ctx.Method()), requestURI: string(ctx.RequestURI()), requestID: id,
		server: o.server, location: o.loc.Path + " " + string(o.loc.PathType),
		header: func(name string) string { return string(ctx.Request.Header.Peek(name)) },
		fields: func(fn func(name, value string)) {
			for k, v := range ctx.Request.Header.All() {
				fn(string(k), string(v))
			}
		}}
	v, pass := p.auth.check(doneContext{Context: context.Background(), done: ctx.Done()}, ea, &ar)
	if v.status != 0 {
		answerFast(ctx, v)
		return false
	}
	o.setAuth(pass)
	return true
}

// doneContext is a request's context for the calls the handler makes: it
// ends when the server shuts down. fasthttp's RequestCtx.Done reads a
// server field that Shutdown resets unsynchronised, a race when a derived
// context's goroutine calls it; the channel is read once, in the handler.
type doneContext struct {
	context.Context
	done <-chan struct{}
}

func (c doneContext) Done() <-chan struct{} { return c.done }

func (c doneContext) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

// remoteAddr is the client's address, unmapped; invalid when unknown.
func remoteAddr(ctx *fasthttp.RequestCtx) netip.Addr {
	ip, _ := netip.AddrFromSlice(ctx.RemoteIP())
	return ip.Unmap()
}

// answerFast writes an answer the proxy gives itself.
func answerFast(ctx *fasthttp.RequestCtx, v verdict) {
	switch {
	case v.status == fasthttp.StatusRequestEntityTooLarge:
		refuseBody(ctx)
	case v.location != "":
		ctx.Response.Header.Set("Location", v.location)
		ctx.SetStatusCode(v.status)
	case v.body != "":
		ctx.Error(v.body, v.status)
	default:
		ctx.Error(statusText(v.status), v.status) // resets the header
	}
	if v.wwwAuthenticate != "" {
		ctx.Response.Header.Set("WWW-Authenticate", v.wwwAuthenticate)
	}
	if v.setCookie != "" {
		ctx.Response.Header.Add("Set-Cookie", v.setCookie)
	}
}

// fastTry is one attempt over HTTP/1.1 (backend-protocol HTTP and HTTPS)
// through the peer's keep-alive pool.
type fastTry struct {
	p    *Proxy
	out  outbound
	resp *fasthttp.Response
	lim  *limitReader
	// replay says whether out may be sent again; a kept-alive connection
	// the peer closed is replaced only for a body-buffered idempotent
	// request.
	replay replay
}

func (t *fastTry) try(pick *balancer.Pick, loc *model.Location, start time.Duration) (int, time.Duration, error) {
	connect, err := roundTrip(t.p.pool(pick.Peer, loc), timeoutsOf(loc), start, &t.out, t.resp, wholeBody(loc, t.p.cfg.BodyBufferBytes), t.replay.body && t.replay.idempotent,
		cmp.Or(loc.Proxy.BufferSizeBytes, defaultUpstreamHead))
	if err == nil && !t.lim.over && t.lim.clientErr == nil {
		return t.resp.StatusCode(), connect, nil
	}
	t.resp.Reset()
	if cerr := t.lim.clientFailed(); cerr != nil {
		return 0, connect, cerr
	}
	if t.lim.over {
		// proxy-body-size while streaming: the chunked body went over the
		// limit; the upstream got a broken body, the client gets a 413.
		return 0, connect, errBodyTooLarge
	}
	return 0, connect, err
}

func (t *fastTry) discard() { t.resp.Reset() }

// wholeBody is the largest upstream response body read whole before it
// goes to the client: none for a location with limit-rate (paced) or
// limit-connections, whose bodies are streamed so that the pacing and the
// count last until the client has the last byte.
func wholeBody(loc *model.Location, max int) int {
	if pacedRate(loc) != nil || (loc.RateLimit != nil && loc.RateLimit.Connections > 0) {
		return 0
	}
	return max
}

// reqState is what one request would otherwise allocate: the balancer's
// request view, the attempt, the body limiter, the attempt state and a
// header scratch buffer. Pooled; nothing in it outlives the request.
type reqState struct {
	view    requestView
	attempt balancer.Attempt
	lim     limitReader
	try     fastTry
	buf     []byte
	// body holds a request body read whole by readWholeBody; the client's
	// request refers to it until the handler returns.
	body []byte
	// head is the upstream request head appendUpstreamHead builds.
	head []byte
	// spool holds a body read whole for proxy-request-buffering; its
	// memory part is body's storage.
	spool bodySpool
}

var statePool = sync.Pool{New: func() any { return new(reqState) }}

func (st *reqState) release() {
	body := st.body[:0]
	if st.spool.mem != nil || st.spool.file != nil {
		body = st.spool.release()
	}
	if cap(body) > maxPooledBody {
		body = nil
	}
	*st = reqState{buf: st.buf[:0], body: body, head: st.head[:0]}
	statePool.Put(st)
}

// maxPooledBody bounds the body storage a pooled reqState keeps: a
// client-body-buffer-size of megabytes must not stay allocated per pooled
// request.
const maxPooledBody = 1 << 20

// spoolsBody reports whether a request body that does not fit in
// BodyBufferBytes is read whole before it goes upstream: with
// proxy-request-buffering on (ingress-nginx's default), and, as nginx
// does, with it off when a chunked body goes to an HTTP/1.0 upstream,
// which cannot take chunks.
func spoolsBody(loc *model.Location, cl int) bool {
	return !loc.Proxy.NoRequestBuffering || (loc.Proxy.HTTP10 && cl < 0)
}

// spoolBody reads the rest of the client's body into st.spool, through the
// location's proxy-body-size: in memory up to the larger of BodyBufferBytes
// and client-body-buffer-size, the rest in a temporary file. A body the
// client does not deliver is answered here as readWholeBody answers it, one
// over proxy-body-size 413, and a temporary file that fails 500 (logged).
func (p *Proxy) spoolBody(ctx *fasthttp.RequestCtx, loc *model.Location, body io.Reader, cl int, st *reqState) bool {
	lim := &st.lim
	*lim = limitReader{r: body, left: loc.Proxy.BodySizeBytes, length: int64(max(cl, 0)), conn: h1ConnOf(ctx.Conn())}
	if lim.left <= 0 {
		lim.left = -1
	}
	memMax := max(p.cfg.BodyBufferBytes, loc.Proxy.ClientBodyBufferBytes)
	err := st.spool.fill(lim, st.body, memMax, &p.spoolDir)
	st.body = nil // the spool owns the storage now
	switch {
	case lim.over:
		answerFast(ctx, verdict{status: fasthttp.StatusRequestEntityTooLarge})
		return false
	case errors.Is(err, errSpoolFile):
		logUpstream(p.cfg.ErrorLog, "client", err)
		// The client may still be sending: drain as refuseBody does, so
		// it reads the 500 instead of a connection reset.
		_, _ = io.CopyN(io.Discard, lim, lingerBytes)
		ctx.Error(statusText(fasthttp.StatusInternalServerError), fasthttp.StatusInternalServerError)
		ctx.SetConnectionClose()
		return false
	case err != nil:
		answerBrokenBody(ctx, err)
		return false
	}
	return true
}

// answerBrokenBody answers a request whose body the client did not
// deliver: 408 when it stalled past ReadTimeout, 400 otherwise, and closes
// the connection (what is left of the body cannot be told from a next
// request).
func answerBrokenBody(ctx *fasthttp.RequestCtx, err error) {
	status := fasthttp.StatusBadRequest
	if isTimeout(err) {
		status = fasthttp.StatusRequestTimeout
	}
	ctx.Error(statusText(status), status)
	ctx.SetConnectionClose()
}

// readWholeBody reads the rest of a request body of known length cl
// (fasthttp has read up to 8 KiB of it before the handler) into *buf and
// makes it the request's body. A body the client does not deliver is
// answered here (answerBrokenBody); fasthttp's Request.Body would have
// sent the upstream the error's text as the body instead.
func readWholeBody(ctx *fasthttp.RequestCtx, body io.Reader, cl int, buf *[]byte) bool {
	b := slices.Grow((*buf)[:0], cl)[:cl]
	*buf = b
	if _, err := io.ReadFull(body, b); err != nil {
		answerBrokenBody(ctx, err)
		return false
	}
	ctx.Request.SetBodyRaw(b)
	return true
}

// prepareCopy makes out a copy of ctx's request (its URI after
// rewrite-target) edited for the upstream: forwardHeaders, the Host for
// upstream-vhost. The client's request is left as it came, for the
// balancer's view (nginx's $http_* are the client's fields) and the access
// log; an X-Request-ID made here is kept in id. buf is scratch space,
// returned for reuse.
func prepareCopy(ctx *fasthttp.RequestCtx, out *fasthttp.Request, f *clientFacts, loc *model.Location, buf []byte, o *outcome) []byte {
	ctx.Request.Header.CopyTo(&out.Header)
	ctx.Request.URI().CopyTo(out.URI())
	out.UseHostHeader = true
	// Not the client's protocol: nginx speaks proxy_http_version upstream.
	out.Header.SetProtocol(upstreamProtocol(loc))
	return prepareHeader(&out.Header, f, loc, buf, o)
}

// prepareHeader edits a copy of the client's header for the upstream:
// forwardHeaders (an X-Request-ID made is kept in o), the Host for
// upstream-vhost, and the fields external authentication passes.
func prepareHeader(h *fasthttp.RequestHeader, f *clientFacts, loc *model.Location, buf []byte, o *outcome) []byte {
	b := forwardHeaders(h, f, loc, buf, &o.id)
	if loc.UpstreamVhost != "" {
		h.SetHost(loc.UpstreamVhost)
	}
	o.auth.apply(h)
	return b
}

// wildcardOrigin matches "https://*.example.com" against an Origin.
func wildcardOrigin(pattern, origin string) bool {
	scheme, rest, _ := strings.Cut(pattern, "://*.")
	if len(origin) < len(scheme)+3 || !strings.EqualFold(origin[:len(scheme)+3], scheme+"://") {
		return false
	}
	o := origin[len(scheme)+3:]
	i := strings.IndexByte(o, '.')
	if i <= 0 || !strings.EqualFold(o[i+1:], rest) {
		return false
	}
	// "*" is one label of letters, digits and '-', as ingress-nginx's
	// origin regex reads it.
	for _, c := range []byte(o[:i]) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// stripHopHeaders removes from an upstream's response head the hop-by-hop
// fields (but Trailer if keepTrailer), the fields its Connection headers
// name (RFC 9110 §7.6.1) and those nginx hides (nginxHides), in whatever
// case the upstream wrote them: its
// field names are kept as sent, and fasthttp's Del matches them exactly. A
// Connection: close is the upstream connection's own and is dropped too.
// One pass finds them (most responses have none); scratch is reused for
// the names found and returned.
func stripHopHeaders(h *fasthttp.ResponseHeader, keepTrailer bool, scratch []byte) []byte {
	if h.ConnectionClose() {
		h.ResetConnectionClose()
	}
	// scratch holds the names to delete, then the Connection tokens, each
	// ended by '\n' (never in a parsed field name or value).
	names := scratch[:0]
	var tokens []byte
	server := false
	for k, v := range h.All() {
		if dropsResponseField(k, keepTrailer) {
			if equalFoldASCII(k, "Server") {
				// fasthttp keeps Server apart from the other fields
				// whatever its case: emptied below without a lookup.
				server = true
				continue
			}
			names = append(append(names, k...), '\n')
		}
		if equalFoldASCII(k, "Connection") {
			for len(v) > 0 {
				var tok []byte
				tok, v = cutByte(v, ',')
				if tok = bytes.TrimSpace(tok); len(tok) > 0 && !equalFoldASCII(tok, "close") && !equalFoldASCII(tok, "keep-alive") {
					tokens = append(append(tokens, tok...), '\n')
				}
			}
		}
	}
	if len(tokens) > 0 {
		for k := range h.All() {
			for rest := tokens; len(rest) > 0; {
				var tok []byte
				tok, rest = cutByte(rest, '\n')
				if equalFoldASCII(k, string(tok)) && !isHopField(k, keepTrailer) {
					names = append(append(names, k...), '\n')
					break
				}
			}
		}
	}
	if server {
		h.SetServerBytes(nil)
	}
	for rest := names; len(rest) > 0; {
		var name []byte
		name, rest = cutByte(rest, '\n')
		h.DelBytes(name)
	}
	return names[:0]
}

// nginxHidden are the upstream response fields nginx's proxy module does
// not pass to the client (proxy_hide_header's defaults): nginx sends its
// own Date and Server, and acts on the X-Accel ones itself.
var nginxHidden = [...]string{"Date", "Server", "X-Pad", "X-Accel-Expires", "X-Accel-Redirect", "X-Accel-Limit-Rate", "X-Accel-Buffering", "X-Accel-Charset"}

// nginxHides reports whether nginx hides an upstream response field of
// this name (any case) from the client.
func nginxHides[T string | []byte](name T) bool {
	for _, h := range nginxHidden {
		if equalFoldASCII(name, h) {
			return true
		}
	}
	return false
}

// dropsResponseField is isHopField(name, keepTrailer) || nginxHides(name)
// for a response field, by a switch on the name's length rather than 17
// comparisons (this runs for every field of every response);
// TestDropsResponseField holds it to both.
func dropsResponseField(name []byte, keepTrailer bool) bool {
	is := func(s string) bool { return equalFoldASCII(name, s) }
	switch len(name) {
	case 2:
		return is("Te")
	case 4:
		return is("Date")
	case 5:
		return is("X-Pad")
	case 6:
		return is("Server")
	case 7:
		return is("Upgrade") || (!keepTrailer && is("Trailer"))
	case 10:
		return is("Connection") || is("Keep-Alive")
	case 15:
		return is("X-Accel-Expires") || is("X-Accel-Charset")
	case 16:
		return is("Proxy-Connection") || is("X-Accel-Redirect")
	case 17:
		return is("Transfer-Encoding") || is("X-Accel-Buffering")
	case 18:
		return is("Proxy-Authenticate") || is("X-Accel-Limit-Rate")
	case 19:
		return is("Proxy-Authorization")
	}
	return false
}

// isHopField reports whether a field name is one of hopHeaders, in any
// case (Trailer not counted if keepTrailer).
func isHopField(name []byte, keepTrailer bool) bool {
	for _, h := range hopHeaders {
		if equalFoldASCII(name, h) {
			return !keepTrailer || h != "Trailer"
		}
	}
	return false
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

// hasRawHeader reports whether raw request headers have a field named
// name (lower case).
func hasRawHeader(raw []byte, name string) bool {
	for k := range rawFieldNames(raw) {
		if strings.EqualFold(string(k), name) {
			return true
		}
	}
	return false
}

// rawFieldNames yields the field name (spaces trimmed) of each line of a
// raw head that has a colon.
func rawFieldNames(raw []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for len(raw) > 0 {
			var line []byte
			line, raw = cutByte(raw, '\n')
			if k, _, ok := bytes.Cut(line, []byte(":")); ok && !yield(bytes.TrimSpace(k)) {
				return
			}
		}
	}
}

// cutByte splits v at the first sep: what comes before it, and what comes
// after (nil without a sep).
func cutByte(v []byte, sep byte) (before, after []byte) {
	if i := bytes.IndexByte(v, sep); i >= 0 {
		return v[:i], v[i+1:]
	}
	return v, nil
}

// tokenListHas reports whether a comma-separated header value lists tok
// (case-insensitive, parameters after ';' ignored). It allocates nothing.
func tokenListHas(v []byte, tok string) bool {
	for len(v) > 0 {
		var t []byte
		t, v = cutByte(v, ',')
		t, _ = cutByte(t, ';')
		if strings.EqualFold(string(bytes.TrimSpace(t)), tok) {
			return true
		}
	}
	return false
}

// clientKey names a keep-alive pool: a peer, spoken to in plain HTTP/1.1
// or over TLS, with the proxy-ssl-* settings tlsID names (upstreamTLS).
type clientKey struct {
	addr  string
	tls   bool
	tlsID string
}

// client returns the keep-alive pool for a peer, creating it on first use.
func (p *Proxy) pool(addr string, loc *model.Location) *peerPool {
	key := clientKey{addr: addr, tls: loc.BackendProtocol == model.ProtocolHTTPS}
	var ut *upstreamTLS
	if key.tls && loc.UpstreamTLS != nil {
		ut = p.routes.Load().upstreamTLS[loc.UpstreamTLS]
		if ut == nil {
			ut = newUpstreamTLS(loc.UpstreamTLS) // a request of a replaced table
		}
		key.tlsID = ut.id
	}
	if c := (*p.pools.Load())[key]; c != nil {
		return c
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.pools.Load()
	if c := old[key]; c != nil {
		return c
	}
	c := newPeerPool(addr, key.tls, ut, p.cfg.ErrorLog)
	next := make(map[clientKey]*peerPool, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[key] = c
	p.pools.Store(&next)
	return c
}

// closeIdlePools closes the upstream connections idle for longer than
// upstreamIdleTime (all if all), and forgets the pools left empty that
// were idle so long: a peer gone from every backend leaves nothing behind.
func (p *Proxy) closeIdlePools(all bool) {
	now := monoNow()
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.pools.Load()
	next := make(map[clientKey]*peerPool, len(old))
	for k, pp := range old {
		pp.closeIdle(now, all)
		if !pp.forgettable(now) {
			next[k] = pp
		}
	}
	p.pools.Store(&next)
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
func defaultBackend(ctx *fasthttp.RequestCtx) { defaultBackendResponse(&ctx.Response) }

func defaultBackendResponse(resp *fasthttp.Response) {
	resp.Header.SetContentType("text/plain; charset=utf-8")
	resp.SetStatusCode(fasthttp.StatusNotFound)
	resp.SetBodyString("default backend - 404")
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
	viewBase
	ctx *fasthttp.RequestCtx
}

func (v *requestView) Var(name string) ([]byte, bool) {
	if val, ok, handled := v.common(name); handled {
		return val, ok
	}
	switch name {
	case "request_uri":
		return v.ctx.RequestURI(), true
	case "uri":
		return v.ctx.Path(), true
	case "http_cookie":
		c := v.ctx.Request.Header.Peek("Cookie")
		return c, len(c) > 0
	}
	if key, ok := v.headerKey(name); ok {
		val := v.ctx.Request.Header.PeekBytes(key)
		return val, val != nil
	}
	if len(name) > 7 && name[:7] == "cookie_" {
		val := v.ctx.Request.Header.Cookie(name[7:])
		return val, val != nil
	}
	return nil, false
}
