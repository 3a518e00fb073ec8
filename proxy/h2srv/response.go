package h2srv

import (
	"fmt"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2" //nolint:staticcheck // SA1019: see doc.go
	"golang.org/x/net/http2/hpack"
)

// bodyBuffer is how much of a response body is held before its first
// frame is written: an answer that fits goes out with its head in one
// write, with a Content-Length if the handler set none.
const bodyBuffer = 16 << 10

// responseWriter is a stream's http.ResponseWriter (and http.Flusher).
// The head is encoded when the first body bytes leave, or when the
// handler returns: the fields are those of Header() then, the status the
// one WriteHeader recorded.
type responseWriter struct {
	st          *stream
	header      http.Header
	status      int
	wroteHeader bool // WriteHeader called (or implied)
	sentHeader  bool // the head is queued
	head        bool // a HEAD request: the body is not sent
	buf         []byte
}

func (w *responseWriter) Header() http.Header { return w.header }

func (w *responseWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// An interim answer (103 Early Hints): its own head, now.
		w.st.c.writeInterimHead(w.st, code, w.header)
		return
	}
	w.wroteHeader, w.status = true, code
}

// bodyAllowed reports whether the status lets the answer carry a body.
func (w *responseWriter) bodyAllowed() bool {
	return w.status != http.StatusNoContent && w.status != http.StatusNotModified
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.bodyAllowed() {
		return 0, http.ErrBodyNotAllowed
	}
	if w.head {
		return len(p), nil
	}
	if err := w.st.ctx.Err(); err != nil {
		return 0, err
	}
	if len(w.buf)+len(p) <= bodyBuffer {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	if err := w.send(false); err != nil {
		return 0, err
	}
	if err := w.st.c.writeData(w.st, p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush sends the head and what is buffered, and writes them out.
func (w *responseWriter) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.send(false) == nil {
		_ = w.st.c.flush()
	}
}

// send queues the head if it is not yet, then the buffered body; end
// ends the stream with the last of them.
func (w *responseWriter) send(end bool) error {
	c, st := w.st.c, w.st
	if !w.sentHeader {
		w.sentHeader = true
		// The length of a whole answer goes into the head, not into the
		// handler's map: no []string for it (the handler has returned and
		// does not see the map again).
		length := -1
		if end && !w.head && w.bodyAllowed() && len(w.header["Content-Length"]) == 0 {
			length = len(w.buf)
		}
		h := w.header
		if decl := w.declaredTrailers(); decl != nil {
			if decl["Content-Length"] {
				length = -1 // declared a trailer: not in the head
			}
			h = make(http.Header, len(w.header))
			for k, v := range w.header {
				if !decl[k] {
					h[k] = v
				}
			}
		}
		if err := c.writeHead(st, w.status, h, length, end && len(w.buf) == 0, true); err != nil {
			return err
		}
		if end && len(w.buf) == 0 {
			return nil
		}
	}
	if len(w.buf) == 0 && !end {
		return nil
	}
	err := c.writeData(st, w.buf, end)
	w.buf = w.buf[:0]
	return err
}

// finish ends the answer when the handler returns: the head if not yet
// sent, the rest of the body, the trailers, then the stream.
func (w *responseWriter) finish() {
	c, st := w.st.c, w.st
	if !c.streamOpen(st) {
		return // reset, or the connection ended: nothing more goes out
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.header.Get("Connection") == "close" {
		// The handler asks for the connection's end (keep-alive-requests
		// reached): the GOAWAY goes before the answer, as x/net/http2
		// sends it.
		c.goAway(http2.ErrCodeNo)
	}
	trailers := w.trailers()
	if err := w.send(len(trailers) == 0); err == nil && len(trailers) > 0 {
		_ = c.writeFields(st, trailers) // a failed write has ended the connection
	}
	c.mu.Lock()
	st.answered = true
	c.mu.Unlock()
	_ = c.flush()
	if !st.remoteClosedByHandler() {
		// The client is still sending a body nobody reads: stop it
		// (RFC 9113 §8.1).
		c.writeControl(func(f *http2.Framer) error { return f.WriteRSTStream(st.id, http2.ErrCodeNo) })
	}
	c.closeStream(st, errStreamReset)
}

// trailers are the fields the handler set under http.TrailerPrefix, and
// those it declared in a Trailer field, after the body.
func (w *responseWriter) trailers() []hpack.HeaderField {
	var out []hpack.HeaderField
	for k, vv := range w.header {
		name, prefixed := strings.CutPrefix(k, http.TrailerPrefix)
		if !prefixed {
			continue
		}
		for _, v := range vv {
			out = append(out, hpack.HeaderField{Name: strings.ToLower(name), Value: v})
		}
	}
	for name := range w.declaredTrailers() {
		for _, v := range w.header[name] {
			out = append(out, hpack.HeaderField{Name: strings.ToLower(name), Value: v})
		}
	}
	return out
}

// declaredTrailers are the names the Trailer field announces: their
// values go after the body, not in the head.
func (w *responseWriter) declaredTrailers() map[string]bool {
	decl := w.header["Trailer"]
	if len(decl) == 0 {
		return nil
	}
	names := make(map[string]bool)
	for _, d := range decl {
		for _, name := range strings.Split(d, ",") {
			if name = strings.TrimSpace(name); name != "" {
				names[http.CanonicalHeaderKey(name)] = true
			}
		}
	}
	return names
}

// remoteClosedByHandler reports whether the client ended its side; read
// under the body's lock since the reading goroutine sets it.
func (st *stream) remoteClosedByHandler() bool {
	if st.body == nil {
		return true
	}
	st.body.mu.Lock()
	defer st.body.mu.Unlock()
	return st.body.err != nil
}

// noHeadFields are fields an HTTP/2 head must not carry (RFC 9113
// §8.2.2); a handler's are dropped.
func noHeadField(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "Trailer":
		return true
	}
	return strings.HasPrefix(k, http.TrailerPrefix)
}

// writeHead queues a head: the status, h's fields, a content-length of
// length unless it is negative, and a Date if h has none, when withDate.
func (c *conn) writeHead(st *stream, status int, h http.Header, length int, end, withDate bool) error {
	if !c.streamOpen(st) {
		return errStreamReset
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.waitPending(); err != nil {
		return err
	}
	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(status)})
	for k, vv := range h {
		if noHeadField(k) || !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		name := lowerName(k)
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				continue
			}
			_ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: v})
		}
	}
	if length >= 0 {
		_ = c.henc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(length)})
	}
	if _, ok := h["Date"]; withDate && !ok {
		_ = c.henc.WriteField(hpack.HeaderField{Name: "date", Value: httpDate()})
	}
	return c.writeBlock(st.id, end)
}

// writeFields queues trailers, ending the stream.
func (c *conn) writeFields(st *stream, fields []hpack.HeaderField) error {
	if !c.streamOpen(st) {
		return errStreamReset
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.waitPending(); err != nil {
		return err
	}
	c.hbuf.Reset()
	for _, f := range fields {
		if httpguts.ValidHeaderFieldName(f.Name) && httpguts.ValidHeaderFieldValue(f.Value) {
			_ = c.henc.WriteField(f)
		}
	}
	return c.writeBlock(st.id, true)
}

// writeBlock frames hbuf as HEADERS and CONTINUATION frames no larger
// than the client allows. Called with wmu held.
func (c *conn) writeBlock(id uint32, end bool) error {
	c.mu.Lock()
	max := c.peerMaxFrame
	c.mu.Unlock()
	block := c.hbuf.Bytes()
	first := block
	if len(first) > max {
		first = first[:max]
	}
	block = block[len(first):]
	if err := c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: end, EndHeaders: len(block) == 0}); err != nil {
		return err
	}
	for len(block) > 0 {
		frag := block
		if len(frag) > max {
			frag = frag[:max]
		}
		block = block[len(frag):]
		if err := c.wfr.WriteContinuation(id, len(block) == 0, frag); err != nil {
			return err
		}
	}
	return c.werr
}

// writeInterimHead queues an interim head (100 Continue, 103 Early
// Hints) with h's fields and writes it out; a failed write has ended the
// connection.
func (c *conn) writeInterimHead(st *stream, status int, h http.Header) {
	if c.writeHead(st, status, h, -1, false, false) == nil {
		_ = c.flush()
	}
}

// writeData queues p as DATA frames as the send windows allow, waiting
// for the client's WINDOW_UPDATEs; end ends the stream with the last.
func (c *conn) writeData(st *stream, p []byte, end bool) error {
	for len(p) > 0 || end {
		n, err := c.takeWindow(st, len(p))
		if err != nil {
			return err
		}
		last := end && n == len(p)
		c.wmu.Lock()
		err = c.waitPending()
		if err == nil {
			err = c.wfr.WriteData(st.id, last, p[:n])
		}
		c.wmu.Unlock()
		if err != nil {
			return err
		}
		p = p[n:]
		if last {
			return nil // finish writes it out
		}
	}
	// Body bytes written beyond the buffer go out now, as a handler
	// streaming its answer expects; the last ones leave with finish.
	return c.flush()
}

// takeWindow takes up to want bytes (at most a frame) of the connection's
// and st's send windows, waiting until both have room; 0 for want 0.
func (c *conn) takeWindow(st *stream, want int) (int, error) {
	if want == 0 {
		if !c.streamOpen(st) {
			return 0, errStreamReset
		}
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	flushed := false
	for {
		if c.closed || c.streams[st.id] != st {
			return 0, errStreamReset
		}
		if c.sendWindow > 0 && st.sendWindow > 0 {
			break
		}
		if !flushed {
			// The client opens the window once it has what was sent
			// before: write that out first.
			flushed = true
			c.mu.Unlock()
			err := c.flush()
			c.mu.Lock()
			if err != nil {
				return 0, err
			}
			continue
		}
		c.cond.Wait() // broadcast on every window change and stream close
	}
	n := min(int64(want), c.sendWindow, st.sendWindow, int64(c.peerMaxFrame))
	c.sendWindow -= n
	st.sendWindow -= n
	return int(n), nil
}

// streamOpen reports whether st is open on a connection not closed: a
// frame for it may go out. (One that was reset just after may still; the
// client ignores frames on a stream it reset, RFC 9113 §5.4.2.)
func (c *conn) streamOpen(st *stream) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed && c.streams[st.id] == st
}

// closeIfIdle ends a connection going away once no stream is open.
func (c *conn) closeIfIdle() {
	c.mu.Lock()
	idle := c.goingAway && len(c.streams) == 0
	c.mu.Unlock()
	if idle {
		c.drain()
		c.halfClose()
	}
}

func (s *Server) logPanic(v any) {
	fmt.Fprintf(os.Stderr, "h2srv: panic serving a request: %v\n%s", v, debug.Stack())
}

// statusText is the :status value: three digits.
func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 204:
		return "204"
	case 304:
		return "304"
	case 404:
		return "404"
	}
	return strconv.Itoa(code)
}

// lowerName is a canonical field name in lower case, without an
// allocation for the common ones.
func lowerName(k string) string {
	if l, ok := lowerKeys[k]; ok {
		return l
	}
	return strings.ToLower(k)
}

var lowerKeys = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{
		"Accept-Ranges", "Access-Control-Allow-Credentials", "Access-Control-Allow-Headers",
		"Access-Control-Allow-Methods", "Access-Control-Allow-Origin", "Access-Control-Expose-Headers",
		"Age", "Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language",
		"Content-Length", "Content-Range", "Content-Security-Policy", "Content-Type", "Date", "Etag",
		"Expires", "Grpc-Message", "Grpc-Status", "Last-Modified", "Link", "Location", "Pragma",
		"Referrer-Policy", "Retry-After", "Server", "Set-Cookie", "Strict-Transport-Security", "Vary",
		"Www-Authenticate", "X-Content-Type-Options", "X-Frame-Options", "X-Request-Id", "X-Xss-Protection",
	} {
		m[k] = strings.ToLower(k)
	}
	return m
}()

// httpDate is the Date field's value, formatted once a second.
func httpDate() string {
	now := time.Now().Unix()
	if d := dateCache.Load(); d != nil && d.unix == now {
		return d.text
	}
	d := &cachedDate{unix: now, text: time.Unix(now, 0).UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.text
}

type cachedDate struct {
	unix int64
	text string
}

var dateCache atomic.Pointer[cachedDate]
