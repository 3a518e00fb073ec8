package proxy

import (
	"bytes"
	"errors"
	"net"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/valyala/fasthttp"
)

// Reading an HTTP/1.1 request head as nginx does
// (docs/migrating-from-ingress-nginx.md, "Request heads"). fasthttp wants CRLF line ends and takes any head that
// fits its read buffer; nginx also takes bare LF line ends ("GET /
// HTTP/1.1\nHost: x\n\n" is served), and keeps a head in
// client_header_buffer_size, then in up to large_client_header_buffers
// larger buffers, a line never split between two: a request line that
// fits in none gets 414, a header line that fits in none, or a head
// that fills them all, gets 400 "Request Header Or Cookie Too Large"
// (ngx_http_alloc_large_header_buffer). lfHead sees the head's bytes as
// they are read, before fasthttp: it turns a bare LF into CRLF and packs
// the lines into nginx's buffers to find nginx's verdict, which the
// handler (or fasthttp's error handler, for a head over the read buffer)
// answers.

// headLimits are nginx's request head buffers.
type headLimits struct {
	small, largeNum, largeSize int
}

// nginx's defaults: client_header_buffer_size 1k,
// large_client_header_buffers 4 8k.
const (
	defaultHeaderBuffer = 1 << 10
	defaultLargeNum     = 4
	defaultLargeSize    = 8 << 10
)

func headLimitsOf(g *model.Global) headLimits {
	l := headLimits{small: defaultHeaderBuffer, largeNum: defaultLargeNum, largeSize: defaultLargeSize}
	if g.ClientHeaderBufferSize > 0 {
		l.small = g.ClientHeaderBufferSize
	}
	if g.LargeClientHeaderBuffers > 0 && g.LargeClientHeaderBufferSize > 0 {
		l.largeNum, l.largeSize = g.LargeClientHeaderBuffers, g.LargeClientHeaderBufferSize
	}
	return l
}

// defaultHeadBuffer is fasthttp's read buffer by default: nginx's default
// head capacity, so every head nginx takes fits.
const defaultHeadBuffer = defaultHeaderBuffer + defaultLargeNum*defaultLargeSize

// lfHead follows one request head through the reads of its connection.
// Its zero value passes bytes through; begin starts a head.
type lfHead struct {
	on      bool // within a head
	started bool // a byte of the request line has come
	prevCR  bool // the last byte read was CR
	lim     headLimits
	// lineLen is the current line's length so far (its CR included);
	// used is what the lines before it take of the current buffer, of
	// capacity bufCap; large counts the large buffers taken.
	lineLen, used, bufCap, large int
	// lines counts the lines ended, leading empty ones included.
	lines int
	// verdict is nginx's answer for the head: 0 (it fits), 414 or 400.
	verdict int
}

func (h *lfHead) begin(lim headLimits) {
	*h = lfHead{on: true, lim: lim, bufCap: lim.small}
}

// read reads from c into b, rewriting the head's bare LFs to CRLF: at
// most half of b is read, into its end, and copied down, a bare LF taking
// two bytes, so they always fit and are never overtaken.
func (h *lfHead) read(c net.Conn, b []byte) (int, error) {
	if len(b) < 2 {
		// fasthttp reads a new connection's first byte alone
		// (ReduceMemoryUsage): it is counted, and an LF there, before
		// any request line, needs no CR.
		n, err := c.Read(b)
		if n == 1 && h.on {
			if b[0] == '\n' {
				h.endLine()
			} else {
				h.grow(1)
				h.prevCR = b[0] == '\r'
				h.started = h.started || !h.prevCR
			}
		}
		return n, err
	}
	from := len(b) - len(b)/2
	n, err := c.Read(b[from:])
	in := b[from : from+n]
	o := 0
	for len(in) > 0 && h.on {
		i := bytes.IndexByte(in, '\n')
		seg := in
		if i >= 0 {
			seg = in[:i]
		}
		o += copy(b[o:], seg)
		if len(seg) > 0 {
			h.grow(len(seg))
			h.prevCR = seg[len(seg)-1] == '\r'
			if !h.started && (len(seg) > 1 || !h.prevCR) {
				h.started = true
			}
		}
		if i < 0 {
			in = nil
			break
		}
		if !h.prevCR {
			b[o] = '\r' // not counted: nginx keeps the bare LF
			o++
		}
		b[o] = '\n'
		o++
		h.endLine()
		in = in[i+1:]
	}
	o += copy(b[o:], in)
	return o, err
}

// grow adds n bytes to the current line, moving it to a large buffer when
// the current one is full, as nginx does.
func (h *lfHead) grow(n int) {
	h.lineLen += n
	for h.verdict == 0 && h.used+h.lineLen+1 > h.bufCap {
		// The line and its LF do not fit what is left: nginx copies
		// the line to a new large buffer.
		if h.large == h.lim.largeNum || h.lineLen+1 > h.lim.largeSize {
			h.verdict = fasthttp.StatusBadRequest
			if h.lines == 0 || !h.started {
				h.verdict = fasthttp.StatusRequestURITooLong
			}
			return
		}
		h.large++
		h.used, h.bufCap = 0, h.lim.largeSize
	}
}

// endLine ends a line at its LF; an empty line after the request line
// ends the head.
func (h *lfHead) endLine() {
	empty := h.lineLen == 0 || (h.lineLen == 1 && h.prevCR)
	h.used += h.lineLen + 1
	h.lineLen = 0
	h.prevCR = false
	if !h.started {
		return // nginx skips empty lines before the request line
	}
	if empty {
		h.on = false
		return
	}
	h.lines++
}

// headVerdict is nginx's answer for the head of the request on c, 0 when
// it takes it.
func headVerdict(c net.Conn) int {
	switch x := c.(type) {
	case *h1Conn:
		return x.head.verdict
	case *h1TLSConn:
		return x.head.verdict
	}
	return 0
}

// refuseHead answers a head nginx would not take, as nginx does, and
// closes the connection.
func refuseHead(ctx *fasthttp.RequestCtx, status int) {
	if status == fasthttp.StatusRequestURITooLong {
		ctx.Error("414 Request-URI Too Large", status)
	} else {
		ctx.Error("400 Request Header Or Cookie Too Large", fasthttp.StatusBadRequest)
	}
	ctx.SetConnectionClose()
}

// fastError answers a request fasthttp could not read: a head over its
// read buffer as nginx's buffers would have, the rest as fasthttp does.
func fastError(ctx *fasthttp.RequestCtx, err error) {
	if v := headVerdict(ctx.Conn()); v != 0 {
		refuseHead(ctx, v)
		return
	}
	var ne net.Error
	switch {
	case errors.As(err, new(*fasthttp.ErrSmallBuffer)):
		refuseHead(ctx, fasthttp.StatusBadRequest)
	case errors.As(err, &ne) && ne.Timeout():
		ctx.Error("408 Request Time-out", fasthttp.StatusRequestTimeout)
	default:
		ctx.Error("400 Bad Request", fasthttp.StatusBadRequest)
	}
	ctx.SetConnectionClose()
}
