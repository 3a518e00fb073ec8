package proxy

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// mirror-target (model.Mirror): a copy of each request that goes upstream is
// sent to the mirror, its answer read and dropped. Unlike nginx's mirror
// module, which holds the client's connection until the copy is answered
// (docs/compatibility.md), the copy is sent from a goroutine of its own: the
// client's request never waits for it and never sees its failure.
//
// The copy is made while the handler runs (the request's bytes are fasthttp's
// until it returns): the mirror's head in wire form, then the body. At most
// Config.MirrorConcurrency copies are in flight; one more is dropped and
// counted. A location without Mirror costs one nil check.

// defaultMirrorConcurrency bounds the copies in flight without
// Config.MirrorConcurrency.
const defaultMirrorConcurrency = 128

// mirrorResults are the outcomes of a copy, the result label of
// switchyard_mirror_requests_total.
const (
	mirrorSent    = iota // the mirror answered (any status)
	mirrorFailed         // it could not be reached or did not answer
	mirrorDropped        // MirrorConcurrency copies were in flight
	mirrorSkipped        // the body was streamed, not held: no copy
	mirrorResults
)

var mirrorResultNames = [mirrorResults]string{"sent", "error", "dropped", "body_streamed"}

// mirrorer sends the copies of one Proxy.
type mirrorer struct {
	// immutable
	slots  chan struct{} // a token per copy in flight
	errLog func(string)
	// atomic
	counts [mirrorResults]atomic.Uint64
	logAt  atomic.Int64 // Unix second of the last log line
	// httpLoc and httpsLoc stand for the mirror's location when asking
	// for a keep-alive pool: plain or TLS without verification (nginx's
	// proxy_ssl_verify off, no SNI).
	httpLoc, httpsLoc model.Location
}

func newMirrorer(cfg *Config) *mirrorer {
	n := cfg.MirrorConcurrency
	if n <= 0 {
		n = defaultMirrorConcurrency
	}
	return &mirrorer{slots: make(chan struct{}, n), errLog: cfg.ErrorLog,
		httpLoc:  model.Location{LocationSettings: &model.LocationSettings{BackendProtocol: model.ProtocolHTTP}},
		httpsLoc: model.Location{LocationSettings: &model.LocationSettings{BackendProtocol: model.ProtocolHTTPS}}}
}

// register exports the counts as switchyard_mirror_requests_total.
func (m *mirrorer) register(reg prometheus.Registerer) error {
	for i, name := range mirrorResultNames {
		c := &m.counts[i]
		f := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "switchyard_mirror_requests_total",
			Help:        "Copies of requests for mirror-target, by what became of them.",
			ConstLabels: prometheus.Labels{"result": name}}, func() float64 { return float64(c.Load()) })
		if err := reg.Register(f); err != nil {
			return err
		}
	}
	return nil
}

// mirrorRequest is what a copy is made of: the client's request as it came
// (fields as sent, the request target before rewrite-target).
type mirrorRequest struct {
	method     []byte
	requestURI []byte // $request_uri
	host       []byte // $host: lower case, no port
	tls        bool   // $scheme
	// fields calls fn with each of the client's fields.
	fields func(fn func(name, value []byte))
	// body is the client's body, held whole; streamed is true when it was
	// not held (too long or chunked).
	body     []byte
	streamed bool
}

// mirrorDropField reports whether the copy leaves out a client field: the
// Host (replaced), the body framing (the copy's own), and those nginx's
// proxy module does not pass (Connection, Keep-Alive, TE, Expect, Upgrade).
func mirrorDropField(name []byte) bool {
	switch len(name) {
	case 2:
		return equalFoldASCII(name, "te")
	case 4:
		return equalFoldASCII(name, "host")
	case 6:
		return equalFoldASCII(name, "expect")
	case 7:
		return equalFoldASCII(name, "upgrade")
	case 10:
		return equalFoldASCII(name, "connection") || equalFoldASCII(name, "keep-alive")
	case 14:
		return equalFoldASCII(name, "content-length")
	case 16:
		return equalFoldASCII(name, "proxy-connection")
	case 17:
		return equalFoldASCII(name, "transfer-encoding")
	}
	return false
}

// appendMirrorURI appends the URI the copy asks for: mi's template with
// nginx's values of the mirror's subrequest.
func appendMirrorURI(dst []byte, mi *model.Mirror, r *mirrorRequest) []byte {
	args := []byte(nil)
	for i, c := range r.requestURI {
		if c == '?' {
			args = r.requestURI[i+1:]
			break
		}
	}
	for _, p := range mi.URI {
		switch p.Var {
		case "":
			dst = append(dst, p.Literal...)
		case model.VarRequestURI:
			dst = append(dst, r.requestURI...)
		case model.VarArgs:
			dst = append(dst, args...)
		case model.VarIsArgs:
			if len(args) > 0 {
				dst = append(dst, '?')
			}
		case model.VarHost:
			dst = append(dst, r.host...)
		case model.VarScheme:
			if r.tls {
				dst = append(dst, "https"...)
			} else {
				dst = append(dst, "http"...)
			}
		}
	}
	return dst
}

// appendMirrorRequest appends the copy in wire form: the client's method,
// the mirror's URI and Host, the client's other fields, and the body when
// RequestBody (mirror-request-body: "off" sends none, with Content-Length
// 0 when the client sent one).
func appendMirrorRequest(dst []byte, mi *model.Mirror, r *mirrorRequest) []byte {
	dst = append(dst, r.method...)
	dst = append(dst, ' ')
	dst = appendMirrorURI(dst, mi, r)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, mi.Host...)
	dst = append(dst, "\r\n"...)
	hadBody := false
	r.fields(func(name, value []byte) {
		if equalFoldASCII(name, "content-length") || equalFoldASCII(name, "transfer-encoding") {
			hadBody = true
		}
		if mirrorDropField(name) {
			return
		}
		dst = append(dst, name...)
		dst = append(dst, ": "...)
		dst = append(dst, value...)
		dst = append(dst, "\r\n"...)
	})
	body := r.body
	if !mi.RequestBody {
		body = nil
	}
	if len(body) > 0 || hadBody {
		dst = append(dst, "Content-Length: "...)
		dst = appendUint(dst, len(body))
		dst = append(dst, "\r\n"...)
	}
	dst = append(dst, "\r\n"...)
	return append(dst, body...)
}

func appendUint(dst []byte, n int) []byte {
	var tmp [20]byte
	i := len(tmp)
	for {
		i--
		tmp[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return append(dst, tmp[i:]...)
}

// mirrorWire is a copy in wire form; pooled.
type mirrorWire struct {
	b        []byte
	headLen  int
	isHead   bool
	mirror   *model.Mirror
	loc      *model.Location
	timeouts timeouts
}

var mirrorWirePool = sync.Pool{New: func() any { return new(mirrorWire) }}

// maxPooledMirror is the largest copy whose buffer goes back to the pool.
const maxPooledMirror = 64 << 10

// mirror sends a copy of r to loc's mirror, without waiting for it: the
// copy is made here, sent by a goroutine of its own.
func (p *Proxy) mirror(loc *model.Location, r *mirrorRequest) {
	m := p.mirrors
	mi := loc.Mirror
	if r.streamed && mi.RequestBody {
		// The body goes upstream as it arrives and is not kept: nginx
		// would read it whole first (docs/compatibility.md).
		m.counts[mirrorSkipped].Add(1)
		return
	}
	select {
	case m.slots <- struct{}{}:
	default:
		m.counts[mirrorDropped].Add(1)
		return
	}
	w := mirrorWirePool.Get().(*mirrorWire)
	w.b = appendMirrorRequest(w.b[:0], mi, r)
	w.headLen = len(w.b)
	if mi.RequestBody {
		w.headLen -= len(r.body)
	}
	w.isHead = string(r.method) == "HEAD"
	w.mirror = mi
	w.loc = &m.httpLoc
	if mi.Scheme == "https" {
		w.loc = &m.httpsLoc
	}
	w.timeouts = timeoutsOf(loc)
	go p.sendMirror(w)
}

// sendMirror sends one copy and reads its answer to the end (so the
// connection can be kept), then frees its slot.
func (p *Proxy) sendMirror(w *mirrorWire) {
	m := p.mirrors
	defer func() {
		<-m.slots
		if cap(w.b) <= maxPooledMirror {
			*w = mirrorWire{b: w.b[:0]}
			mirrorWirePool.Put(w)
		}
	}()
	out := outbound{head: w.b[:w.headLen], body: w.b[w.headLen:], headMethod: w.isHead}
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	addr := w.mirror.HostPort
	if strings.IndexByte(addr, ':') < 0 {
		if w.mirror.Scheme == "https" {
			addr += ":443"
		} else {
			addr += ":80"
		}
	}
	_, err := roundTrip(p.pool(addr, w.loc), w.timeouts, monoNow(), &out, resp, 0, false, 64<<10)
	if err == nil {
		if s := resp.BodyStream(); s != nil {
			_, err = io.Copy(io.Discard, s)
		}
	}
	resp.Reset() // closes a body stream: its connection goes back or is closed
	if err != nil {
		m.counts[mirrorFailed].Add(1)
		m.logFailure(w.mirror, err)
		return
	}
	m.counts[mirrorSent].Add(1)
}

// logFailure writes a failed copy to the error log, at most once a second.
func (m *mirrorer) logFailure(mi *model.Mirror, err error) {
	if m.errLog == nil {
		return
	}
	now := time.Now().Unix()
	last := m.logAt.Load()
	if now == last || !m.logAt.CompareAndSwap(last, now) {
		return
	}
	m.errLog("mirror " + mi.Scheme + "://" + mi.HostPort + ": " + strings.TrimPrefix(err.Error(), "tls: "))
}

// h2MirrorRequest describes an HTTP/2 request for a copy: client are its
// fields as sent.
func h2MirrorRequest(r *http.Request, client http.Header, body []byte, streamed bool) *mirrorRequest {
	return &mirrorRequest{method: []byte(r.Method), requestURI: []byte(r.RequestURI), host: hostOnly([]byte(r.Host)), tls: r.TLS != nil,
		body: body, streamed: streamed,
		fields: func(fn func(name, value []byte)) {
			for k, vs := range client {
				for _, v := range vs {
					fn([]byte(k), []byte(v))
				}
			}
		}}
}

// fastMirrorRequest describes the fasthttp request for a copy: requestURI
// is the target as the client sent it, body the body held whole (nil and
// streamed when it was not).
func fastMirrorRequest(ctx *fasthttp.RequestCtx, requestURI, host, body []byte, streamed bool) mirrorRequest {
	h := &ctx.Request.Header
	return mirrorRequest{method: h.Method(), requestURI: requestURI, host: host, tls: ctx.IsTLS(), body: body, streamed: streamed,
		fields: func(fn func(name, value []byte)) {
			for k, v := range h.All() {
				fn(k, v)
			}
		}}
}
