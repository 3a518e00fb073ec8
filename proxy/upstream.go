package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// The HTTP/1.1 upstream transport: keep-alive pools per peer, one request
// written and one response head read per attempt, and the response body
// either read whole (small, with a Content-Length) or handed to the front
// end as a stream that returns the connection to its pool when the client
// has it all. fasthttp's HostClient did this before; its streamed bodies
// cost four allocations per request and it does not say whether an attempt
// connected, which nginx's $upstream_connect_time (and ingress-nginx's
// upstream latency metric) needs.

// Defaults of the upstream pools (nginx: upstream-keepalive-connections 320
// per worker, upstream-keepalive-timeout 60s).
const (
	maxIdlePerPeer   = 320
	upstreamIdleTime = 60 * time.Second
	// maxChunkLine bounds a chunk-size line (hex size, extensions, CRLF).
	maxChunkLine = 4096
	// maxInterim bounds the 1xx responses read before the final one.
	maxInterim = 8
)

// errUpstreamClosed: the peer closed a connection before the first byte of
// a response (fasthttp's ErrConnectionClosed, which retryable knows).
var errUpstreamClosed = fasthttp.ErrConnectionClosed

// errBadChunk: the upstream's chunked body is malformed.
var errBadChunk = errors.New("proxy: malformed chunked body from upstream")

// peerPool holds the idle keep-alive connections to one peer.
type peerPool struct {
	addr string
	tls  bool
	// upTLS is the location's proxy-ssl-* (nil: no verification, no SNI,
	// no client certificate); errLog reports failed handshakes.
	upTLS  *upstreamTLS
	errLog func(string)

	// stripes are the pool's per-P parts (stripes.go): a connection goes
	// back to the stripe of the P that used it last, and is taken from
	// there first, so a request finds the connection, its buffers and its
	// socket in the cache of the CPU it runs on. A stripe with nothing
	// idle takes from the others before a new connection is dialled.
	stripes []poolStripe
}

// poolStripe is one stripe of a peerPool.
type poolStripe struct {
	mu   sync.Mutex
	idle []*upConn // most recently used last
	// active counts the connections taken from the pool less those given
	// back through this stripe (the sum over stripes is those out);
	// lastUsed is when one was last taken here (monoNow): together they
	// say when the pool can be forgotten.
	active   int
	lastUsed time.Duration
	_        [64]byte
}

// newPeerPool is an empty pool of connections to addr.
func newPeerPool(addr string, tls bool, upTLS *upstreamTLS, errLog func(string)) *peerPool {
	return &peerPool{addr: addr, tls: tls, upTLS: upTLS, errLog: errLog, stripes: make([]poolStripe, stripeCount())}
}

// maxIdleStripe bounds a stripe's idle connections: maxIdlePerPeer over
// the pool.
func (pp *peerPool) maxIdleStripe() int {
	return (maxIdlePerPeer + len(pp.stripes) - 1) / len(pp.stripes)
}

// takeIdle takes the most recently used idle connection of stripe s that
// has not been idle for upstreamIdleTime, closing those that have. With
// taking set, it also counts a connection taken from the pool there.
func (pp *peerPool) takeIdle(s int, now time.Duration, taking bool) *upConn {
	st := &pp.stripes[s]
	st.mu.Lock()
	defer st.mu.Unlock()
	if taking {
		st.active++
		st.lastUsed = now
	}
	for len(st.idle) > 0 {
		c := st.idle[len(st.idle)-1]
		st.idle[len(st.idle)-1] = nil
		st.idle = st.idle[:len(st.idle)-1]
		if now-c.idleSince < upstreamIdleTime {
			return c
		}
		_ = c.tc.Conn.Close()
	}
	return nil
}

// upConn is one upstream connection with its buffers.
type upConn struct {
	tc   timeoutConn
	br   *bufio.Reader
	bw   *bufio.Writer
	pool *peerPool
	// idleSince is when it went back to the pool (monoNow).
	idleSince time.Duration
}

// get returns an idle connection (reused true) or dials a new one,
// reporting how long the connection took to establish (TCP and TLS, 0 when
// reused), as nginx's $upstream_connect_time. now is the present
// (monoNow), read by the caller.
func (pp *peerPool) get(t timeouts, now time.Duration) (c *upConn, connect time.Duration, reused bool, err error) {
	s := stripeOf(len(pp.stripes))
	c = pp.takeIdle(s, now, true)
	for i := 1; c == nil && i < len(pp.stripes); i++ {
		c = pp.takeIdle((s+i)%len(pp.stripes), now, false)
	}
	if c != nil {
		c.tc.read, c.tc.write, c.tc.now = t.read, t.send, now
		return c, 0, true, nil
	}
	conn, err := pp.dial(t.connect)
	if err != nil {
		st := &pp.stripes[s]
		st.mu.Lock()
		st.active--
		st.mu.Unlock()
		return nil, monoNow() - now, false, err
	}
	connected := monoNow()
	c = &upConn{tc: timeoutConn{Conn: conn, read: t.read, write: t.send, now: connected}, pool: pp}
	c.br = bufio.NewReaderSize(&c.tc, 4096)
	c.bw = bufio.NewWriterSize(&c.tc, 4096)
	return c, connected - now, false, nil
}

// dial connects to the peer within timeout, with TLS for backend-protocol
// HTTPS: as the location's proxy-ssl-* say (upstreamTLS), else with no
// verification and no SNI (nginx's proxy_ssl_verify off and
// proxy_ssl_server_name off, ingress-nginx's defaults).
func (pp *peerPool) dial(timeout time.Duration) (net.Conn, error) {
	if pp.upTLS != nil && pp.upTLS.err != nil {
		logUpstream(pp.errLog, pp.addr, pp.upTLS.err)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: pp.upTLS.err}
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.Dial("tcp", pp.addr)
	if err != nil {
		return nil, err
	}
	conn = withRawSyscalls(conn)
	if !pp.tls {
		return conn, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conf := insecureUpstream
	if pp.upTLS != nil {
		conf = pp.upTLS.conf
	}
	tc := tls.Client(conn, conf)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		logUpstream(pp.errLog, pp.addr, fmt.Errorf("TLS handshake failed: %w", err))
		// A failed handshake is a failed connect: another peer may be
		// tried whatever the request (nothing reached the application).
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("tls handshake: %w", err)}
	}
	return tc, nil
}

// insecureUpstream is ingress-nginx's default for HTTPS upstreams:
// proxy_ssl_verify off, no SNI, sessions resumed.
var insecureUpstream = &tls.Config{InsecureSkipVerify: true, ClientSessionCache: tls.NewLRUClientSessionCache(1024)} //nolint:gosec // nginx's proxy_ssl_verify off

// put returns c to its pool, or closes it when the pool is full.
func (c *upConn) put() {
	pp := c.pool
	// The response was read last: its read's clock reading is recent
	// enough for an idle time counted in seconds.
	c.idleSince = c.tc.readAt
	if c.idleSince == 0 {
		c.idleSince = monoNow()
	}
	st := &pp.stripes[stripeOf(len(pp.stripes))]
	st.mu.Lock()
	st.active--
	if len(st.idle) < pp.maxIdleStripe() {
		st.idle = append(st.idle, c)
		st.mu.Unlock()
		return
	}
	st.mu.Unlock()
	_ = c.tc.Conn.Close()
}

// close closes c, which was out of its pool.
func (c *upConn) close() {
	_ = c.tc.Conn.Close()
	st := &c.pool.stripes[stripeOf(len(c.pool.stripes))]
	st.mu.Lock()
	st.active--
	st.mu.Unlock()
}

// forgettable: nothing of pp is open and it has not been used for
// upstreamIdleTime.
func (pp *peerPool) forgettable(now time.Duration) bool {
	active := 0
	for i := range pp.stripes {
		st := &pp.stripes[i]
		st.mu.Lock()
		idle, lastUsed := len(st.idle), st.lastUsed
		active += st.active
		st.mu.Unlock()
		if idle != 0 || now-lastUsed < upstreamIdleTime {
			return false
		}
	}
	return active == 0
}

// closeIdle closes the connections idle for longer than upstreamIdleTime
// (all of them if all is true), for the janitor and Shutdown.
func (pp *peerPool) closeIdle(now time.Duration, all bool) {
	for i := range pp.stripes {
		st := &pp.stripes[i]
		st.mu.Lock()
		keep := st.idle[:0]
		for _, c := range st.idle {
			if all || now-c.idleSince >= upstreamIdleTime {
				_ = c.tc.Conn.Close()
				continue
			}
			keep = append(keep, c)
		}
		clear(st.idle[len(keep):])
		st.idle = keep
		st.mu.Unlock()
	}
}

// roundTrip sends out over a connection of pp and reads the response head
// into resp. A body of at most smallBody bytes with a Content-Length is read
// whole; any other body becomes resp's body stream, which owns the
// connection until fasthttp (or the HTTP/2 front end) has read and closed
// it. replayable says out may be written again: a reused connection that
// the peer had closed is then replaced by a new one, once, as nginx and
// fasthttp do. connect is the connect time of the connection used.
func roundTrip(pp *peerPool, t timeouts, now time.Duration, out *outbound, resp *fasthttp.Response, smallBody int, replayable bool, headMax int) (connect time.Duration, err error) {
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			now = monoNow()
		}
		c, took, reused, err := pp.get(t, now)
		connect = took
		if err != nil {
			return connect, err
		}
		err = writeRequest(c, out)
		if err == nil {
			// The response cannot be there yet: reading now costs a read(2)
			// that fails with EAGAIN and a park in the netpoller. Other
			// connections' goroutines run first; by the time this one runs
			// again the response has usually arrived and is read at once
			// (failed reads per proxied request at 64 connections: 1.03
			// without the yield, 0.42 with it; docs/benchmarks/proxy.md).
			// With nothing else runnable the yield returns at once.
			runtime.Gosched()
			// Wait for the first byte apart from parsing, to tell a closed
			// keep-alive connection from a broken response.
			_, err = c.br.Peek(1)
			if err != nil && !isTimeout(err) {
				err = errUpstreamClosed
			}
		}
		if err != nil {
			c.close()
			if reused && replayable && attempt == 0 && !isTimeout(err) {
				continue
			}
			return connect, err
		}
		return connect, readResponse(c, out, resp, smallBody, headMax)
	}
}

// outbound is a request as roundTrip sends it: a fasthttp request, or a
// head and a body already in wire form (req nil).
type outbound struct {
	req        *fasthttp.Request
	head, body []byte
	// spool, when set, holds the body past body in a temporary file
	// (proxy-request-buffering); body is its memory part.
	spool *bodySpool
	// headMethod: the wire form's method is HEAD (its response has no body).
	headMethod bool
}

func (o *outbound) isHead() bool {
	if o.req != nil {
		return o.req.Header.IsHead()
	}
	return o.headMethod
}

// closes reports whether the request asks the upstream to close the
// connection (a wire-form head never does).
func (o *outbound) closes() bool { return o.req != nil && o.req.Header.ConnectionClose() }

// bodyLen is the length of the body sent.
func (o *outbound) bodyLen() int {
	if o.spool != nil {
		return int(o.spool.size)
	}
	return len(o.body)
}

func writeRequest(c *upConn, out *outbound) error {
	if out.req != nil {
		if out.spool != nil {
			// Each attempt sends the body from its start.
			out.spool.rewind()
			out.req.SetBodyStream(out.spool, out.bodyLen())
		}
		if err := out.req.Write(c.bw); err != nil {
			return err
		}
	} else {
		if _, err := c.bw.Write(out.head); err != nil {
			return err
		}
		if _, err := c.bw.Write(out.body); err != nil {
			return err
		}
		if out.spool != nil {
			if err := out.spool.writeFileTo(c.bw); err != nil {
				return err
			}
		}
	}
	return c.bw.Flush()
}

// defaultUpstreamHead is the response head an upstream may send without
// proxy-buffer-size: ingress-nginx's 4k, the size of a connection's read
// buffer.
const defaultUpstreamHead = 4 << 10

// errTooBigHeader is nginx's "upstream sent too big header": a response
// head larger than proxy-buffer-size, a 502.
var errTooBigHeader = errors.New("upstream sent too big header while reading response header from upstream")

// readHead reads one response head of at most headMax bytes (proxy-buffer-
// size). The connection's read buffer grows for a location that allows
// more than it holds; a head over headMax is errTooBigHeader, logged.
func readHead(c *upConn, h *fasthttp.ResponseHeader, headMax int) error {
	err := h.Read(c.br)
	if err == nil {
		if c.br.Size() > headMax && len(h.Header()) > headMax {
			return c.tooBigHeader() // read on a buffer grown for another location
		}
		return nil
	}
	return readHeadFailed(c, h, headMax, err)
}

// tooBigHeader logs and returns errTooBigHeader.
func (c *upConn) tooBigHeader() error {
	logUpstream(c.pool.errLog, c.pool.addr, errTooBigHeader)
	return errTooBigHeader
}

// readHeadFailed is readHead after a failed Read: a head over the read
// buffer is read again into a larger one when headMax allows, else it is
// errTooBigHeader. Kept apart so the common path takes no allocation.
func readHeadFailed(c *upConn, h *fasthttp.ResponseHeader, headMax int, err error) error {
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) && c.br.Size() < headMax {
		// The head so far stays buffered (Read only peeks): carry it
		// into a reader of headMax bytes.
		held, _ := c.br.Peek(c.br.Buffered())
		c.br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(held)), &c.tc), headMax)
		err = h.Read(c.br)
	}
	if errors.As(err, &small) || (err == nil && len(h.Header()) > headMax) {
		return c.tooBigHeader()
	}
	return err
}

// readResponse reads the response head and sets up the body.
func readResponse(c *upConn, out *outbound, resp *fasthttp.Response, smallBody, headMax int) error {
	resp.Reset()
	h := &resp.Header
	h.DisableNormalizing()
	// No Content-Type made up for an upstream that sent none (Reset
	// cleared the server's NoDefaultContentType).
	h.SetNoDefaultContentType(true)
	if err := readHead(c, h, headMax); err != nil {
		c.close()
		return err
	}
	for n := 0; h.StatusCode() >= 100 && h.StatusCode() < 200 && h.StatusCode() != fasthttp.StatusSwitchingProtocols; n++ {
		if n >= maxInterim {
			c.close()
			return errors.New("proxy: too many interim responses from upstream")
		}
		if err := readHead(c, h, headMax); err != nil {
			c.close()
			return err
		}
	}
	keep := !h.ConnectionClose() && !out.closes()
	status := h.StatusCode()
	if out.isHead() || status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified {
		resp.SkipBody = true
		c.release(keep)
		return nil
	}
	cl := h.ContentLength()
	if cl >= 0 && cl <= smallBody {
		if err := resp.ReadBody(c.br, smallBody); err != nil {
			c.close()
			return err
		}
		c.release(keep)
		return nil
	}
	b := upBodyPool.Get().(*upBody)
	*b = upBody{c: c, header: h, left: int64(cl), keep: keep}
	switch {
	case cl == -1: // chunked
		b.chunked = true
		b.left = 0
	case cl < 0: // no length: the body ends when the peer closes
		b.keep = false
		b.left = -1
	}
	size := cl
	if size < 0 {
		size = -1
	}
	resp.SetBodyStream(b, size)
	return nil
}

// release puts c back in its pool if the exchange left it reusable.
func (c *upConn) release(keep bool) {
	if keep && c.br.Buffered() == 0 {
		c.put()
		return
	}
	c.close()
}

// upBody is a streamed response body. It reads through the connection's
// buffer (decoding chunked, reading trailers into the response header) and
// on Close returns the connection to its pool if the body was read to the
// end, or closes it. Pooled: the front end closes it when done, which
// fasthttp does for every body stream, also on errors and resets.
type upBody struct {
	c       *upConn
	header  *fasthttp.ResponseHeader
	left    int64 // bytes left: of the body, or of the current chunk; -1 until EOF
	chunked bool
	keep    bool
	eof     bool
	// tail paces the body and holds the request's limit-connections
	// count until Close.
	tail bodyEnd
}

func (b *upBody) end() *bodyEnd { return &b.tail }

var upBodyPool = sync.Pool{New: func() any { return new(upBody) }}

func (b *upBody) Read(p []byte) (int, error) {
	if b.tail.pace.rate == 0 {
		return b.read(p)
	}
	n, err := b.read(p[:b.tail.pace.next(len(p))])
	b.tail.pace.wrote(n)
	return n, err
}

func (b *upBody) read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.c == nil {
		return 0, io.ErrClosedPipe
	}
	if b.chunked && b.left == 0 {
		size, err := readChunkSize(b.c.br)
		if err != nil {
			return 0, err
		}
		if size == 0 {
			if err := b.header.ReadTrailer(b.c.br); err != nil && !errors.Is(err, io.EOF) {
				return 0, err
			}
			b.eof = true
			return 0, io.EOF
		}
		b.left = size
	}
	if b.left == 0 {
		b.eof = true
		return 0, io.EOF
	}
	if b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.c.br.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
	}
	switch {
	case errors.Is(err, io.EOF) && b.left < 0:
		b.eof = true // identity body: the close is its end
		return n, io.EOF
	case errors.Is(err, io.EOF):
		return n, io.ErrUnexpectedEOF
	case err != nil:
		return n, err
	}
	if b.chunked && b.left == 0 {
		if err := readCRLF(b.c.br); err != nil {
			return n, err
		}
	} else if !b.chunked && b.left == 0 {
		b.eof = true
		return n, io.EOF
	}
	return n, nil
}

// CloseWithError ends the body: the connection goes back to its pool only
// if the body was read to its end without error. upBody has no Close:
// fasthttp (v1.74) calls both Close and CloseWithError on a body that has
// both, and a second call would put b in its pool twice, so that two
// requests would share it (and one read the other's upstream connection).
func (b *upBody) CloseWithError(err error) error {
	if b.c != nil {
		b.c.release(b.keep && b.eof && err == nil)
	}
	b.tail.hold.release()
	*b = upBody{}
	upBodyPool.Put(b)
	return nil
}

// readChunkSize reads a chunk-size line: hex digits, optional extensions
// (ignored), CRLF.
func readChunkSize(br *bufio.Reader) (int64, error) {
	var size int64
	digits, read := 0, 0
	inExt := false
	for {
		c, err := br.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0, io.ErrUnexpectedEOF
			}
			return 0, err
		}
		if read++; read > maxChunkLine {
			return 0, errBadChunk
		}
		switch {
		case c == '\r':
			if c, err = br.ReadByte(); err != nil || c != '\n' || digits == 0 {
				return 0, errBadChunk
			}
			return size, nil
		case c == '\n':
			return 0, errBadChunk // bare LF: refuse, as RFC 9112 §2.2 allows
		case inExt:
		case c == ';' || c == ' ' || c == '\t':
			inExt = true
		default:
			v, ok := hexVal(c)
			if !ok || digits >= 15 {
				return 0, errBadChunk
			}
			size = size<<4 | int64(v)
			digits++
		}
	}
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func readCRLF(br *bufio.Reader) error {
	c1, err := br.ReadByte()
	if err != nil {
		return io.ErrUnexpectedEOF
	}
	c2, err := br.ReadByte()
	if err != nil {
		return io.ErrUnexpectedEOF
	}
	if c1 != '\r' || c2 != '\n' {
		return errBadChunk
	}
	return nil
}
