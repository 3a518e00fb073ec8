package proxy

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// logFormat is the access log's format (model.LogFormat) made ready to
// append: segments with their header names in the forms each front end
// looks them up by.
type logFormat struct {
	segs   []logSeg
	escape model.LogEscape
	// respHeader: the format reads $bytes_sent, which needs the
	// response head's length.
	respHeader bool
	// upstreamInfo: the format is ingress-nginx's default with the default
	// escaping, which appendUpstreamInfo writes without walking segs.
	upstreamInfo bool
}

type logSeg struct {
	lit []byte
	v   model.LogVar
	// field is the header of $http_<name> and $sent_http_<name>
	// ("x-request-id"); canon is it as net/http keys its maps.
	field []byte
	canon string
	// known is a field the exchange holds already ($http_referer,
	// $http_user_agent): no lookup.
	known knownField
}

type knownField uint8

const (
	fieldOther knownField = iota
	fieldReferer
	fieldUserAgent
)

// The values that never change while the process runs.
var (
	fieldXFF           = []byte("X-Forwarded-For")
	fieldAuthorization = []byte("Authorization")
	logPid             = strconv.AppendInt(nil, int64(os.Getpid()), 10)
	logHostname        = func() []byte { h, _ := os.Hostname(); return []byte(h) }()
)

// defaultLogFormat is ingress-nginx's upstreaminfo format.
var defaultLogFormat = newLogFormat(model.LogFormat{})

// newLogFormat prepares f; no segments means the default format.
func newLogFormat(f model.LogFormat) *logFormat {
	segs := f.Segments
	if segs == nil {
		segs = model.DefaultLogFormat
	}
	lf := &logFormat{escape: f.Escape, upstreamInfo: f.Escape == model.EscapeDefault && slices.Equal(segs, model.DefaultLogFormat)}
	for _, s := range segs {
		ls := logSeg{v: s.Var}
		switch s.Var {
		case model.LogNone:
			ls.lit = []byte(s.Literal)
		case model.LogHTTP, model.LogSentHTTP:
			ls.canon = http.CanonicalHeaderKey(s.FieldName())
			// fasthttp finds a field fastest by its canonical name.
			ls.field = []byte(ls.canon)
			if s.Var == model.LogHTTP && s.Header == "referer" {
				ls.known = fieldReferer
			} else if s.Var == model.LogHTTP && s.Header == "user_agent" {
				ls.known = fieldUserAgent
			}
		case model.LogBytesSent:
			lf.respHeader = true
		}
		lf.segs = append(lf.segs, ls)
	}
	return lf
}

// logReq is what the access log reads of one request beyond the
// exchange: the front end's request and response (one of h1 or h2 set).
type logReq struct {
	h1 *fasthttp.RequestCtx
	// h2 is the HTTP/2 request and h2resp its response's fields.
	h2     *http.Request
	h2resp http.Header
	end    time.Time
}

// appendLog appends one line of f for the request to b, without the
// newline. Only variable values are escaped, as nginx's log_format.
func (f *logFormat) appendLog(b []byte, x *exchange, o *outcome, r *logReq, took time.Duration) []byte {
	if f.upstreamInfo {
		return appendUpstreamInfo(b, x, o, r, took)
	}
	return f.appendSegments(b, x, o, r, took)
}

// appendUpstreamInfo appends the line of ingress-nginx's default format
// (model.DefaultLogFormatText) with the default escaping, as
// appendSegments does for its segments (TestUpstreamInfoLine and
// FuzzUpstreamInfoLine hold the two to the same bytes), without the
// dispatch per segment: most proxies log in this format, a line per
// request.
func appendUpstreamInfo(b []byte, x *exchange, o *outcome, r *logReq, took time.Duration) []byte {
	const esc = model.EscapeDefault
	if x.remote.IsValid() {
		b = appendNginxAddr(b, x.remote)
	}
	b = append(b, " - "...)
	var dec [192]byte
	if v, found := basicUser(r, dec[:]); found {
		b = appendLogEscaped(b, v, esc)
	} else {
		b = append(b, '-')
	}
	b = append(b, " ["...)
	b = append(b, logTimeText(&lastLogTime, r.end, "02/Jan/2006:15:04:05 -0700")...)
	b = append(b, "] \""...)
	b = appendLogEscaped(b, x.method, esc)
	b = append(b, ' ')
	b = appendLogEscaped(b, x.requestURI, esc)
	b = append(b, ' ')
	b = appendLogEscaped(b, x.proto, esc)
	b = append(b, "\" "...)
	b = strconv.AppendInt(b, int64(x.status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(x.bodySent), 10)
	b = append(b, " \""...)
	b = appendLogField(b, x.referer)
	b = append(b, "\" \""...)
	b = appendLogField(b, x.userAgent)
	b = append(b, "\" "...)
	b = strconv.AppendInt(b, int64(x.reqLength), 10)
	b = append(b, ' ')
	b = appendMillis(b, took)
	b = append(b, " ["...)
	if o.loc != nil {
		b = appendLogEscaped(b, o.loc.Backend, esc)
	}
	b = append(b, "] ["...)
	b = appendLogEscaped(b, o.canary, esc)
	b = append(b, "] "...)
	if o.peer == "" {
		b = append(b, "- - - -"...)
	} else {
		b = appendLogEscaped(b, o.peer, esc)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(max(o.upstreamLength, 0)), 10)
		b = append(b, ' ')
		b = appendMillis(b, o.upstream)
		b = append(b, ' ')
		if o.upstreamStatus == 0 {
			b = append(b, '-')
		} else {
			b = strconv.AppendInt(b, int64(o.upstreamStatus), 10)
		}
	}
	b = append(b, ' ')
	return appendLogField(b, x.requestID)
}

// appendLogField appends v escaped by default, "-" when empty.
func appendLogField(b, v []byte) []byte {
	if len(v) == 0 {
		return append(b, '-')
	}
	return appendLogEscaped(b, v, model.EscapeDefault)
}

// appendSegments appends the line of any format, segment by segment.
func (f *logFormat) appendSegments(b []byte, x *exchange, o *outcome, r *logReq, took time.Duration) []byte {
	var scratch [64]byte
	for i := range f.segs {
		s := &f.segs[i]
		if s.v == model.LogNone {
			b = append(b, s.lit...)
			continue
		}
		var v []byte
		var vs string
		found := true
		num := scratch[:0]
		switch s.v {
		case model.LogRemoteAddr, model.LogTheRealIP:
			// Addresses, numbers and times hold no byte any mode escapes:
			// appended as they are.
			if x.remote.IsValid() {
				b = appendNginxAddr(b, x.remote)
			}
			continue
		case model.LogRemoteUser:
			var dec [192]byte
			v, found = basicUser(r, dec[:])
			if found {
				b = appendLogEscaped(b, v, f.escape)
				continue
			}
		case model.LogTimeLocal:
			b = append(b, logTimeText(&lastLogTime, r.end, "02/Jan/2006:15:04:05 -0700")...)
			continue
		case model.LogTimeISO8601:
			b = append(b, logTimeText(&lastISOTime, r.end, "2006-01-02T15:04:05-07:00")...)
			continue
		case model.LogMsec:
			ms := r.end.UnixMilli()
			b = strconv.AppendInt(b, ms/1000, 10)
			b = append(b, '.', byte('0'+ms%1000/100), byte('0'+ms%100/10), byte('0'+ms%10))
			continue
		case model.LogRequest:
			b = appendLogEscaped(b, x.method, f.escape)
			b = append(b, ' ')
			b = appendLogEscaped(b, x.requestURI, f.escape)
			b = append(b, ' ')
			b = appendLogEscaped(b, x.proto, f.escape)
			continue
		case model.LogStatus:
			b = strconv.AppendInt(b, int64(x.status), 10)
			continue
		case model.LogBodyBytesSent:
			b = strconv.AppendInt(b, int64(x.bodySent), 10)
			continue
		case model.LogBytesSent:
			b = strconv.AppendInt(b, int64(x.bodySent+x.respHeader), 10)
			continue
		case model.LogRequestLength:
			b = strconv.AppendInt(b, int64(x.reqLength), 10)
			continue
		case model.LogRequestTime:
			b = appendMillis(b, took)
			continue
		case model.LogProxyUpstreamName:
			if o.loc != nil {
				vs = o.loc.Backend
			}
		case model.LogProxyAlternativeUpstreamName:
			vs = o.canary
		case model.LogUpstreamAddr:
			vs, found = o.peer, o.peer != ""
		case model.LogUpstreamResponseLength, model.LogUpstreamResponseTime, model.LogUpstreamConnectTime,
			model.LogUpstreamHeaderTime, model.LogUpstreamStatus:
			if o.peer == "" {
				found = false
				break
			}
			switch s.v {
			case model.LogUpstreamResponseLength:
				b = strconv.AppendInt(b, int64(max(o.upstreamLength, 0)), 10)
			case model.LogUpstreamResponseTime:
				b = appendMillis(b, o.upstream)
			case model.LogUpstreamConnectTime:
				b = appendMillis(b, o.connect)
			case model.LogUpstreamHeaderTime:
				b = appendMillis(b, o.header)
			case model.LogUpstreamStatus:
				if o.upstreamStatus == 0 {
					// No answer from the peer: nginx writes "-" for it.
					b = append(b, '-')
				} else {
					b = strconv.AppendInt(b, int64(o.upstreamStatus), 10)
				}
			}
			continue
		case model.LogReqID:
			v, found = x.requestID, len(x.requestID) > 0
		case model.LogHost:
			b = f.appendHost(b, r, o)
			continue
		case model.LogRequestMethod:
			v = x.method
		case model.LogRequestURI:
			v = x.requestURI
		case model.LogURI, model.LogDocumentURI:
			if r.h1 != nil {
				v = r.h1.Path()
			} else {
				vs = r.h2.URL.Path
			}
		case model.LogArgs, model.LogQueryString, model.LogIsArgs:
			if r.h1 != nil {
				v = r.h1.URI().QueryString()
			} else {
				vs = r.h2.URL.RawQuery
			}
			if s.v == model.LogIsArgs {
				if len(v)+len(vs) > 0 {
					v, vs = nil, "?"
				} else {
					v, vs = nil, ""
				}
			} else {
				found = len(v)+len(vs) > 0
			}
		case model.LogScheme:
			vs = "http"
			if r.tls() {
				vs = "https"
			}
		case model.LogHTTPS:
			if r.tls() {
				vs = "on"
			}
		case model.LogServerProtocol:
			v = x.proto
		case model.LogServerName:
			vs = o.server
			if vs == "" {
				vs = "_" // the default server's name
			}
		case model.LogNamespace, model.LogIngressName, model.LogServiceName, model.LogServicePort:
			if l := o.loc; l != nil {
				switch s.v {
				case model.LogNamespace:
					vs = l.Ingress.Namespace
				case model.LogIngressName:
					vs = l.Ingress.Name
				case model.LogServiceName:
					vs = l.Service
				default:
					vs = l.ServicePort
				}
			}
		case model.LogProxyAddXForwardedFor:
			if xff := r.requestField(fieldXFF, "X-Forwarded-For"); len(xff) > 0 {
				b = appendLogEscaped(b, xff, f.escape)
				b = appendLogEscaped(b, ", ", f.escape)
			}
			if x.remote.IsValid() {
				v = appendNginxAddr(num, x.remote)
			}
		case model.LogConnection:
			if r.h1 != nil {
				v = strconv.AppendUint(num, r.h1.ConnID(), 10)
			} else {
				found = false
			}
		case model.LogConnectionRequests:
			if r.h1 != nil {
				v = strconv.AppendUint(num, r.h1.ConnRequestNum(), 10)
			} else {
				found = false
			}
		case model.LogPid:
			v = logPid
		case model.LogHostname:
			v = logHostname
		case model.LogHTTP:
			switch {
			case s.known == fieldReferer:
				v = x.referer
			case s.known == fieldUserAgent:
				v = x.userAgent
			case r.h1 != nil:
				v = r.h1.Request.Header.PeekBytes(s.field)
			default:
				if vv := r.h2.Header[s.canon]; len(vv) > 0 {
					vs = vv[0]
				}
			}
			found = len(v)+len(vs) > 0
		case model.LogSentHTTP:
			if r.h1 != nil {
				v = responseField(&r.h1.Response.Header, s.field)
			} else if vv := r.h2resp[s.canon]; len(vv) > 0 {
				vs = vv[0]
			}
			found = len(v)+len(vs) > 0
		}
		if !found {
			if f.escape == model.EscapeDefault {
				b = append(b, '-')
			}
			continue
		}
		if vs != "" {
			b = appendLogEscaped(b, vs, f.escape)
		} else {
			b = appendLogEscaped(b, v, f.escape)
		}
	}
	return b
}

// tls reports whether the request came over TLS.
func (r *logReq) tls() bool {
	if r.h1 != nil {
		return r.h1.IsTLS()
	}
	return r.h2.TLS != nil
}

// requestField is the request's first field named name (lowercase) or
// canon (net/http's form).
func (r *logReq) requestField(name []byte, canon string) []byte {
	if r.h1 != nil {
		return r.h1.Request.Header.PeekBytes(name)
	}
	if vv := r.h2.Header[canon]; len(vv) > 0 {
		return []byte(vv[0])
	}
	return nil
}

// responseField is the response's first field named name, in any case:
// the proxy keeps the upstream's field names as sent.
func responseField(h *fasthttp.ResponseHeader, name []byte) []byte {
	for k, v := range h.All() {
		if bytes.EqualFold(k, name) {
			return v
		}
	}
	return nil
}

// appendHost appends $host: the request's host, lowercase, without a
// port; the server's name when the request names none.
func (f *logFormat) appendHost(b []byte, r *logReq, o *outcome) []byte {
	var h []byte
	var hs string
	if r.h1 != nil {
		h = r.h1.Host()
	} else {
		hs = r.h2.Host
	}
	n := len(h) + len(hs)
	if n == 0 {
		if o.server == "" {
			return appendLogEscaped(b, "_", f.escape)
		}
		return appendLogEscaped(b, o.server, f.escape)
	}
	at := func(i int) byte {
		if h != nil {
			return h[i]
		}
		return hs[i]
	}
	// Drop a port (after the last ':' unless it closes an IPv6 literal).
	for i := n - 1; i >= 0; i-- {
		c := at(i)
		if c == ':' {
			n = i
			break
		}
		if c < '0' || c > '9' {
			break
		}
	}
	var lower [256]byte
	if n > len(lower) {
		n = len(lower)
	}
	for i := 0; i < n; i++ {
		c := at(i)
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	return appendLogEscaped(b, lower[:n], f.escape)
}

// basicUser is $remote_user: the user name of an Authorization: Basic
// field, decoded into dec; found is false without one (nginx's
// ngx_http_auth_basic_user: "Basic " in any case, blanks, base64, a
// ':').
func basicUser(r *logReq, dec []byte) (user []byte, found bool) {
	if r.h1 != nil && !rawMayHold(r.h1.Request.Header.RawHeaders(), "Authorization") {
		return nil, false
	}
	a := r.requestField(fieldAuthorization, "Authorization")
	if len(a) < 6 || (a[0]|0x20) != 'b' || (a[1]|0x20) != 'a' || (a[2]|0x20) != 's' || (a[3]|0x20) != 'i' || (a[4]|0x20) != 'c' || a[5] != ' ' {
		return nil, false
	}
	a = a[6:]
	for len(a) > 0 && a[0] == ' ' {
		a = a[1:]
	}
	if len(a) == 0 || base64.StdEncoding.DecodedLen(len(a)) > len(dec) {
		return nil, false
	}
	n, err := base64.StdEncoding.Decode(dec, a)
	if err != nil {
		return nil, false
	}
	for i := 0; i < n; i++ {
		if dec[i] == ':' {
			return dec[:i], true
		}
	}
	return nil, false
}

// appendLogEscaped appends v escaped as nginx's log module does: by default
// ", \ and bytes below 32 or above 126 as \xHH; escape=json as a JSON
// string's contents (bytes above 126 as they are); escape=none as is.
func appendLogEscaped[T string | []byte](b []byte, v T, mode model.LogEscape) []byte {
	const hex = "0123456789ABCDEF"
	if mode == model.EscapeNone {
		return append(b, v...)
	}
	json := mode == model.EscapeJSON
	mask := escDefault
	if json {
		mask = escJSON
	}
	done := 0 // v[:done] is appended
	for i := 0; i < len(v); i++ {
		// Eight bytes at a time while none needs escaping (most values).
		for i+8 <= len(v) && !escapesIn(load64(v, i), json) {
			i += 8
		}
		if i >= len(v) {
			break
		}
		c := v[i]
		if logEscapes[c]&mask == 0 {
			continue
		}
		b = append(b, v[done:i]...)
		done = i + 1
		switch {
		case !json:
			b = append(b, '\\', 'x', hex[c>>4], hex[c&0xf])
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
	}
	return append(b, v[done:]...)
}

// load64 is v[i:i+8] as a little-endian word.
func load64[T string | []byte](v T, i int) uint64 {
	_ = v[i+7]
	return uint64(v[i]) | uint64(v[i+1])<<8 | uint64(v[i+2])<<16 | uint64(v[i+3])<<24 |
		uint64(v[i+4])<<32 | uint64(v[i+5])<<40 | uint64(v[i+6])<<48 | uint64(v[i+7])<<56
}

// escapesIn reports whether a byte of w may need escaping: one below 0x20,
// '"' or '\\', or (not json) above 0x7e. It may report a word that needs
// none (the caller then looks byte by byte), never the reverse.
func escapesIn(w uint64, json bool) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	// hasLess(x, n): a byte of x below n (n <= 128), from the subtraction's
	// borrow into bit 7 of bytes whose bit 7 was clear.
	below := (w - ones*0x20) &^ w & highs
	quote := w ^ ones*'"'
	bslash := w ^ ones*'\\'
	zero := ((quote - ones) &^ quote) | ((bslash - ones) &^ bslash)
	m := below | zero&highs
	if !json {
		// A byte above 0x7e: adding 1 sets bit 7 of 0x7f, and bit 7 is set
		// already in bytes from 0x80.
		m |= ((w &^ highs) + ones) | w
	}
	return m&highs != 0
}

// logEscapes marks the bytes each escape mode rewrites.
var logEscapes = func() (t [256]uint8) {
	for c := range 256 {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			t[c] |= escDefault
		}
		if c < 0x20 || c == '"' || c == '\\' {
			t[c] |= escJSON
		}
	}
	return t
}()

const (
	escDefault uint8 = 1 << iota
	escJSON
)

// lastISOTime is $time_iso8601 of the most recent second, as lastLogTime.
var lastISOTime atomic.Pointer[logTime]

// logTimeText is t formatted with layout, formatting each second once
// per cache.
func logTimeText(cache *atomic.Pointer[logTime], t time.Time, layout string) []byte {
	sec := t.Unix()
	if c := cache.Load(); c != nil && c.sec == sec {
		return c.text
	}
	c := &logTime{sec: sec, text: t.AppendFormat(make([]byte, 0, 32), layout)}
	cache.Store(c)
	return c.text
}
