package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// errBodyTooLarge ends a streamed request body that went over the
// location's proxy-body-size.
var errBodyTooLarge = errors.New("proxy: request body over proxy-body-size")

// errClientBody tags an attempt that failed because the client's request
// body broke (a malformed chunk, a body cut short, a client gone or
// stalled): the client's fault, not the upstream's. The client gets 400
// (408 when it stalled), as nginx answers a bad body ("client sent
// invalid chunked body", "client prematurely closed connection"), and the
// peer is not charged a failure, nor retried for it.
var errClientBody = errors.New("proxy: reading the client's request body")

// limitReader passes a streamed request body through until left bytes have
// gone by (left < 0: no limit), then fails and remembers it, so the
// handler answers 413 (nginx client_max_body_size on a chunked body). It
// also remembers an error reading the client's body (clientErr), and a
// body shorter than its declared length (a positive length).
type limitReader struct {
	r    io.Reader
	left int64
	over bool
	// length is the declared Content-Length, 0 when unknown (chunked);
	// got counts the bytes passed.
	length, got int64
	// conn, when set, is the HTTP/1.1 connection the body comes on: a
	// chunked body that ends where the connection did was cut short
	// (fasthttp takes an EOF before a chunk-size line for the body's end).
	conn      *h1Conn
	clientErr error
}

func (l *limitReader) Read(b []byte) (int, error) {
	n, err := l.read(b)
	l.got += int64(n)
	switch {
	case err == nil || l.over:
	case errors.Is(err, io.EOF):
		if (l.length > 0 && l.got < l.length) || (l.length == 0 && l.conn != nil && l.conn.sawEOF) {
			l.clientErr = io.ErrUnexpectedEOF
			return n, l.clientErr
		}
	case l.clientErr == nil:
		l.clientErr = err
	}
	return n, err
}

func (l *limitReader) read(b []byte) (int, error) {
	if l.left < 0 {
		return l.r.Read(b)
	}
	if l.left == 0 {
		// One byte more tells a body of exactly the limit from a longer one.
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			l.over = true
			return 0, errBodyTooLarge
		}
		return 0, err
	}
	if int64(len(b)) > l.left {
		b = b[:l.left]
	}
	n, err := l.r.Read(b)
	l.left -= int64(n)
	return n, err
}

// clientFailed is errClientBody with the client's error when the body
// broke, else nil.
func (l *limitReader) clientFailed() error {
	if l.clientErr == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", errClientBody, l.clientErr)
}

// timeouts are a location's proxy-connect/send/read-timeout.
type timeouts struct{ connect, send, read time.Duration }

func timeoutsOf(loc *model.Location) timeouts {
	sec := func(s, def int) time.Duration {
		if s <= 0 {
			s = def
		}
		return time.Duration(s) * time.Second
	}
	return timeouts{
		connect: sec(loc.Proxy.ConnectTimeoutSeconds, 5),
		send:    sec(loc.Proxy.SendTimeoutSeconds, 60),
		read:    sec(loc.Proxy.ReadTimeoutSeconds, 60),
	}
}

// timeoutConn is an upstream connection with nginx's proxy_send_timeout and
// proxy_read_timeout: each Write and Read must make progress within its
// timeout, however long a streamed body takes as a whole. fasthttp's
// whole-request deadlines are ignored. The kernel deadline is re-armed
// only when it would fire late or lags by more than a sixteenth of the
// timeout; a read or write woken before its own deadline re-arms and goes
// on (see clock.go), so the timeout is exact. The first Write on a
// connection taken from its pool counts from the attempt's start, the
// clock reading the caller already took (microseconds earlier). Reads and writes may run on
// two goroutines (an upgraded connection); each keeps its own fields.
type timeoutConn struct {
	net.Conn
	read, write time.Duration
	// rd, wr: the deadlines asked for and armed (clock.go).
	rd, wr lazyDeadline
	// now, when not 0, is the present (monoNow) for the next Write: the
	// connection was just taken from its pool, and the caller had read the
	// clock. readAt is when the last Read began (monoNow).
	now, readAt time.Duration
}

func (c *timeoutConn) Read(b []byte) (int, error) {
	now := monoNow()
	c.readAt = now
	if w := int64(now + c.read); c.rd.arm(w, c.read>>4) {
		if err := c.Conn.SetReadDeadline(monoTime(time.Duration(w))); err != nil {
			return 0, err
		}
	}
	return c.rd.readFrom(c.Conn, b)
}

func (c *timeoutConn) Write(b []byte) (int, error) {
	now := c.now
	if now == 0 {
		now = monoNow()
	} else {
		c.now = 0
	}
	if w := int64(now + c.write); c.wr.arm(w, c.write>>4) {
		if err := c.Conn.SetWriteDeadline(monoTime(time.Duration(w))); err != nil {
			return 0, err
		}
	}
	return c.wr.writeTo(c.Conn, b)
}

func (c *timeoutConn) SetDeadline(time.Time) error      { return nil }
func (c *timeoutConn) SetReadDeadline(time.Time) error  { return nil }
func (c *timeoutConn) SetWriteDeadline(time.Time) error { return nil }
