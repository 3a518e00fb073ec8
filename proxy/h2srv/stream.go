package h2srv

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2" //nolint:staticcheck // SA1019: see doc.go
)

// stream is one request and its answer.
type stream struct {
	c    *conn
	id   uint32
	ctx  *streamContext // &sctx: the request's context, cancelled by closeStream
	body *bodyPipe      // nil without a request body

	// under c.mu
	sendWindow int64
	answered   bool // the answer's last frame is queued
	// recvUnsent is the stream's receive window taken and not given back;
	// recvOwed the part of it read and owed back.
	recvUnsent, recvOwed int

	// serve's goroutine only
	remoteClosed bool  // END_STREAM received
	declared     int64 // the request's content-length, -1 if none
	received     int64
	trailer      http.Header // the declared trailers, filled when they come

	// What a request needs besides, allocated with its stream: one
	// allocation rather than one each. None is ever reused (a handler may
	// keep any of them past its return), so none needs to be reset.
	sctx    streamContext
	rw      responseWriter
	req     http.Request
	url     url.URL
	values  [8]string       // the request header's values (newRequest)
	bodyBuf [smallBody]byte // a small answer's body (responseWriter.buf)
}

// smallBody is the answer body a stream holds without an allocation of
// its own.
const smallBody = 256

// processHeaders opens a stream (or takes a request's trailers) and
// starts its handler.
func (c *conn) processHeaders(f *headerBlock) error {
	id := f.streamID
	if id%2 != 1 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.mu.Lock()
	st := c.streams[id]
	open, goingAway := len(c.streams), c.goingAway
	c.mu.Unlock()
	if st != nil {
		return c.processTrailers(st, f)
	}
	if id <= c.maxStreamID {
		return http2.ConnectionError(http2.ErrCodeProtocol) // a closed stream's id, or one skipped (RFC 9113 §5.1.1)
	}
	c.maxStreamID = id
	if goingAway {
		c.writeControl(func(fr *http2.Framer) error { return fr.WriteRSTStream(id, http2.ErrCodeRefusedStream) })
		return nil
	}
	if uint32(open) >= c.srv.maxStreams() {
		c.writeControl(func(fr *http2.Framer) error { return fr.WriteRSTStream(id, http2.ErrCodeRefusedStream) })
		return nil
	}
	if f.hasPriority && f.streamDep == id {
		// A stream that depends on itself (RFC 9113 §5.3.1).
		c.writeControl(func(fr *http2.Framer) error { return fr.WriteRSTStream(id, http2.ErrCodeProtocol) })
		return nil
	}
	req, st, code := c.newRequest(f)
	if code != 0 {
		c.writeControl(func(fr *http2.Framer) error { return fr.WriteRSTStream(id, code) })
		return nil
	}
	c.mu.Lock()
	st.sendWindow = c.peerInitialWindow
	c.streams[id] = st
	c.lastOpened = id
	open = len(c.streams)
	c.mu.Unlock()
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	if c.srv.StreamsChanged != nil {
		c.srv.StreamsChanged(c.nc, open)
	}
	c.opened++
	if c.srv.MaxRequests > 0 && c.opened >= c.srv.MaxRequests {
		c.goAway(http2.ErrCodeNo)
	}
	rw := &st.rw
	*rw = responseWriter{st: st, header: make(http.Header), head: req.Method == http.MethodHead, buf: st.bodyBuf[:0]}
	handler := c.srv.Handler
	if f.truncated {
		handler = http.HandlerFunc(headerTooLarge)
	}
	c.srv.run(job{c: c, st: st, rw: rw, req: req, h: handler})
	return nil
}

// headerTooLarge answers a request whose header list was over
// MaxHeaderBytes.
func headerTooLarge(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "431 Request Header Fields Too Large", http.StatusRequestHeaderFieldsTooLarge)
}

// processTrailers takes the trailing header block of a request body
// (RFC 9113 §8.1): it must end the stream and hold no pseudo-field.
func (c *conn) processTrailers(st *stream, f *headerBlock) error {
	if st.remoteClosed {
		// Half-closed (remote): the client ended its side (RFC 9113 §5.1).
		// A connection error, as for a stream already closed: whether the
		// answer had ended yet is a race the client cannot see.
		return http2.ConnectionError(http2.ErrCodeStreamClosed)
	}
	if !f.endStream || len(f.pseudoFields()) > 0 {
		c.resetStream(st.id, http2.ErrCodeProtocol)
		return nil
	}
	st.remoteClosed = true
	if st.declared >= 0 && st.received != st.declared {
		c.resetStream(st.id, http2.ErrCodeProtocol)
		return nil
	}
	var fields http.Header
	if st.trailer != nil {
		fields = make(http.Header)
		for _, hf := range f.regularFields() {
			key := textproto.CanonicalMIMEHeaderKey(hf.Name)
			if _, declared := st.trailer[key]; declared {
				fields[key] = append(fields[key], hf.Value)
			}
		}
	}
	if st.body != nil {
		st.body.end(io.EOF, st.trailer, fields)
	}
	return nil
}

// connHeaders are the fields an HTTP/2 request must not carry (RFC 9113
// §8.2.2).
var connHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade"}

// newRequest builds the request of a HEADERS frame as net/http's HTTP/2
// server does, or gives the stream error that refuses it.
func (c *conn) newRequest(f *headerBlock) (*http.Request, *stream, http2.ErrCode) {
	var method, scheme, authority, path, protocol string
	for _, hf := range f.pseudoFields() {
		switch hf.Name {
		case ":method":
			method = hf.Value
		case ":scheme":
			scheme = hf.Value
		case ":authority":
			authority = hf.Value
		case ":path":
			path = hf.Value
		case ":protocol":
			protocol = hf.Value
		default:
			return nil, nil, http2.ErrCodeProtocol // a response's :status
		}
	}
	isConnect := method == http.MethodConnect
	if protocol != "" || method == "" || !httpguts.ValidHeaderFieldName(method) ||
		(isConnect && (scheme != "" || path != "" || authority == "")) ||
		(!isConnect && (scheme == "" || path == "")) {
		return nil, nil, http2.ErrCodeProtocol
	}
	st := &stream{c: c, id: f.streamID, declared: -1}
	regular := f.regularFields()
	header := make(http.Header, len(regular))
	// The values share one array: the stream's, or one made for them all.
	// Each key's slice is capped at its length, so a second value (or a
	// handler's Add) copies it rather than overwrite the next key's.
	values := st.values[:0]
	if len(regular) > len(st.values) {
		values = make([]string, 0, len(regular))
	}
	for _, hf := range regular {
		key := canonicalKey(hf.Name)
		if vv, ok := header[key]; ok {
			header[key] = append(vv, hf.Value)
			continue
		}
		values = append(values, hf.Value)
		n := len(values)
		header[key] = values[n-1 : n : n]
	}
	for _, k := range connHeaders {
		if _, ok := header[k]; ok {
			return nil, nil, http2.ErrCodeProtocol
		}
	}
	if te := header["Te"]; len(te) > 1 || (len(te) == 1 && te[0] != "trailers" && te[0] != "") {
		return nil, nil, http2.ErrCodeProtocol
	}
	if cookies := header["Cookie"]; len(cookies) > 1 {
		header["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	if host := header["Host"]; len(host) > 1 || (len(host) == 1 && authority != "" && host[0] != authority) {
		return nil, nil, http2.ErrCodeProtocol
	} else if len(host) == 1 {
		authority = host[0]
		delete(header, "Host")
	}
	if (strings.IndexByte(authority, '@') >= 0 && (scheme == "http" || scheme == "https")) ||
		(authority != "" && !httpguts.ValidHostHeader(authority)) {
		return nil, nil, http2.ErrCodeProtocol
	}
	u := &st.url
	requestURI := path
	if isConnect {
		*u, requestURI = url.URL{Host: authority}, authority
	} else {
		if path[0] != '/' && path != "*" {
			return nil, nil, http2.ErrCodeProtocol
		}
		if !parseOriginPath(path, u) {
			var err error
			if u, err = url.ParseRequestURI(path); err != nil {
				return nil, nil, http2.ErrCodeProtocol
			}
		}
	}
	var trailer http.Header
	for _, v := range header["Trailer"] {
		for _, key := range strings.Split(v, ",") {
			switch key = textproto.CanonicalMIMEHeaderKey(textproto.TrimString(key)); key {
			case "Transfer-Encoding", "Trailer", "Content-Length", "":
			default:
				if trailer == nil {
					trailer = make(http.Header)
				}
				trailer[key] = nil
			}
		}
	}
	delete(header, "Trailer")
	st.trailer = trailer
	contentLength := int64(0)
	if !f.endStream {
		contentLength = -1
		if cl := header["Content-Length"]; len(cl) > 0 {
			n, err := strconv.ParseUint(cl[0], 10, 63)
			if err != nil || len(cl) > 1 {
				return nil, nil, http2.ErrCodeProtocol
			}
			contentLength, st.declared = int64(n), int64(n)
		}
	} else {
		st.remoteClosed = true
		if cl := header["Content-Length"]; len(cl) > 0 && cl[0] != "0" {
			return nil, nil, http2.ErrCodeProtocol
		}
	}
	st.sctx.conn = c.ctx
	st.ctx = &st.sctx
	req := http.Request{
		Method:        method,
		URL:           u,
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        header,
		Host:          authority,
		RequestURI:    requestURI,
		RemoteAddr:    c.remoteAddr,
		TLS:           c.tlsState,
		ContentLength: contentLength,
		Trailer:       trailer,
		Body:          http.NoBody,
	}
	if !f.endStream {
		st.body = &bodyPipe{st: st, needsContinue: expectsContinue(header)}
		st.body.cond.L = &st.body.mu
		req.Body = st.body
	}
	// WithContext is inlined and its copy only copied from: the request
	// lives in st, no second allocation.
	st.req = *req.WithContext(st.ctx)
	return &st.req, st, 0
}

// parseOriginPath is url.ParseRequestURI for the common origin-form
// path (RFC 9113 §8.3.1, RFC 3986 §3.3): characters url.URL keeps
// unescaped in a path (so RawPath stays empty) and an optional non-empty
// query without control bytes. It parses into u without an allocation and
// reports false for anything else (percent-escapes, '!', '*', an empty
// query, ...), which ParseRequestURI then parses. TestParseOriginPath and
// FuzzParseOriginPath hold it to ParseRequestURI's results.
func parseOriginPath(path string, u *url.URL) bool {
	p, q, hasQuery := strings.Cut(path, "?")
	if p == "" || p[0] != '/' || (hasQuery && q == "") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if !pathChar[p[i]] {
			return false
		}
	}
	for i := 0; i < len(q); i++ {
		if q[i] < 0x20 || q[i] == 0x7f {
			return false
		}
	}
	*u = url.URL{Path: p, RawQuery: q}
	return true
}

// pathChar are the bytes url.URL keeps unescaped in a path.
var pathChar = func() (t [256]bool) {
	for _, ch := range []byte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~$&+,/:;=@") {
		t[ch] = true
	}
	return t
}()

// expectsContinue reports whether the request asks for 100-continue, and
// drops the field: the server answers it (bodyPipe.Read).
func expectsContinue(h http.Header) bool {
	if !httpguts.HeaderValuesContainsToken(h["Expect"], "100-continue") {
		return false
	}
	delete(h, "Expect")
	return true
}

// processData hands a DATA frame's payload to its stream's body, keeping
// both receive windows (RFC 9113 §6.9).
func (c *conn) processData(f *http2.DataFrame) error {
	n := int(f.Length)
	c.mu.Lock()
	st := c.streams[f.StreamID]
	if c.recvUnsentConn+n > connWindow {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.recvUnsentConn += n
	c.mu.Unlock()
	if st == nil || st.remoteClosed {
		// A stream that is closed, or whose body ended: its bytes go back
		// to the connection's window at once.
		c.giveBack(nil, n)
		if st == nil {
			if err := c.checkIdle(f.StreamID); err != nil {
				return err
			}
		}
		c.resetStream(f.StreamID, http2.ErrCodeStreamClosed)
		return nil
	}
	data := f.Data()
	c.mu.Lock()
	if st.recvUnsent+n > streamWindow {
		c.mu.Unlock()
		c.giveBack(nil, n)
		c.resetStream(st.id, http2.ErrCodeFlowControl)
		return nil
	}
	st.recvUnsent += n
	c.mu.Unlock()
	st.received += int64(len(data))
	if st.declared >= 0 && st.received > st.declared {
		c.resetStream(st.id, http2.ErrCodeProtocol)
		return nil
	}
	if pad := n - len(data); pad > 0 {
		c.giveBack(st, pad) // padding is never read
	}
	if st.body == nil || !st.body.write(data) {
		c.giveBack(st, len(data)) // nobody reads it
	}
	if f.StreamEnded() {
		st.remoteClosed = true
		if st.declared >= 0 && st.received != st.declared {
			c.resetStream(st.id, http2.ErrCodeProtocol)
			return nil
		}
		if st.body != nil {
			st.body.end(io.EOF, nil, nil)
		}
	}
	return nil
}

// giveBack returns n bytes a handler read (or that nobody will) to the
// connection's receive window and st's (nil: the connection's only),
// with a WINDOW_UPDATE once a quarter of a window is owed.
func (c *conn) giveBack(st *stream, n int) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	c.recvOwedConn += n
	connIncr := 0
	if c.recvOwedConn >= connWindow/4 {
		connIncr = c.recvOwedConn
		c.recvOwedConn = 0
		c.recvUnsentConn -= connIncr
	}
	streamIncr := 0
	if st != nil && c.streams[st.id] == st {
		st.recvOwed += n
		if st.recvOwed >= streamWindow/4 {
			streamIncr = st.recvOwed
			st.recvOwed = 0
			st.recvUnsent -= streamIncr
		}
	}
	c.mu.Unlock()
	if connIncr == 0 && streamIncr == 0 {
		return
	}
	c.wmu.Lock()
	if c.werr == nil {
		if connIncr > 0 {
			_ = c.wfr.WriteWindowUpdate(0, uint32(connIncr))
		}
		if streamIncr > 0 {
			_ = c.wfr.WriteWindowUpdate(st.id, uint32(streamIncr))
		}
	}
	c.wake()
	c.wmu.Unlock()
}

// runHandler serves one request and ends its stream.
func (c *conn) runHandler(st *stream, rw *responseWriter, req *http.Request, h http.Handler) {
	defer func() {
		if v := recover(); v != nil {
			// http.ErrAbortHandler, or a handler's bug: the client must not
			// take what it got for a whole answer.
			c.resetStream(st.id, http2.ErrCodeInternal)
			_ = c.flush()
			if v != http.ErrAbortHandler { //nolint:errorlint // net/http compares it so
				c.srv.logPanic(v)
			}
		}
	}()
	h.ServeHTTP(rw, req)
	rw.finish()
}

// bodyPipe is a request body: the reading goroutine writes what DATA
// frames bring, the handler reads it.
type bodyPipe struct {
	st            *stream
	mu            sync.Mutex
	cond          sync.Cond
	buf           []byte
	off           int
	err           error // io.EOF, or why the stream ended
	closed        bool  // the handler closed the body: writes are dropped
	needsContinue bool
}

// write queues p; false if nobody will read it.
func (b *bodyPipe) write(p []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.err != nil {
		return false
	}
	if b.off > 0 && b.off == len(b.buf) {
		b.buf, b.off = b.buf[:0], 0
	}
	b.buf = append(b.buf, p...)
	b.cond.Signal()
	return true
}

// end ends the body with err (io.EOF: complete) after filling the
// request's declared trailers.
func (b *bodyPipe) end(err error, trailer, fields http.Header) {
	b.mu.Lock()
	for k, v := range fields {
		trailer[k] = v
	}
	if b.err == nil {
		b.err = err
	}
	b.cond.Broadcast()
	b.mu.Unlock()
}

// discard ends the body with err and returns the bytes left unread.
func (b *bodyPipe) discard(err error) int {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.buf) - b.off
	b.buf, b.off = nil, 0
	if b.err == nil {
		b.err = err
	}
	b.cond.Broadcast()
	return n
}

func (b *bodyPipe) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.needsContinue {
		b.needsContinue = false
		b.mu.Unlock()
		b.st.c.writeInterimHead(b.st, http.StatusContinue, nil)
		b.mu.Lock()
	}
	for b.off == len(b.buf) && b.err == nil {
		b.cond.Wait()
	}
	if b.off == len(b.buf) {
		err := b.err
		b.mu.Unlock()
		return 0, err
	}
	n := copy(p, b.buf[b.off:])
	b.off += n
	b.mu.Unlock()
	b.st.c.giveBack(b.st, n)
	return n, nil
}

// Close drops what the client sends from now on.
func (b *bodyPipe) Close() error {
	b.mu.Lock()
	n := len(b.buf) - b.off
	b.buf, b.off, b.closed = nil, 0, true
	if b.err == nil {
		b.err = http.ErrBodyReadAfterClose
	}
	b.mu.Unlock()
	b.st.c.giveBack(b.st, n)
	return nil
}

// canonicalKey is textproto.CanonicalMIMEHeaderKey for a lower-case wire
// name, without an allocation for common ones.
func canonicalKey(name string) string {
	if k, ok := commonKeys[name]; ok {
		return k
	}
	return textproto.CanonicalMIMEHeaderKey(name)
}

var commonKeys = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{
		"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control",
		"Content-Length", "Content-Type", "Cookie", "Grpc-Timeout", "Grpc-Encoding", "Grpc-Accept-Encoding",
		"If-Modified-Since", "If-None-Match", "Origin", "Pragma", "Referer", "Te", "User-Agent",
		"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip", "X-Request-Id",
		"Sec-Fetch-Dest", "Sec-Fetch-Mode", "Sec-Fetch-Site", "Upgrade-Insecure-Requests", "Priority",
	} {
		m[strings.ToLower(k)] = textproto.CanonicalMIMEHeaderKey(k)
	}
	return m
}()

// tlsStateOf is the connection's TLS state, nil over cleartext.
func tlsStateOf(c any) *tls.ConnectionState {
	if tc, ok := c.(interface{ ConnectionState() tls.ConnectionState }); ok {
		cs := tc.ConnectionState()
		return &cs
	}
	return nil
}
