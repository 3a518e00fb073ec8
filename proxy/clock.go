package proxy

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// The per-request clock and deadlines. On these VMs time.Now costs about
// 50 ns (two vDSO clock reads) and net.Conn.SetReadDeadline(time.Now().Add(d))
// about 175 ns (three more reads plus a timer update): with fasthttp's two
// read deadlines per request, one deadline per upstream write and read, and
// the timings, a proxied request spent over a microsecond on the clock.
//
// Hot paths read the monotonic clock once (monoNow, one vDSO read), and
// deadlines are kept exact without re-arming the kernel timer per call: the
// deadline asked for is remembered, the armed one is moved only when it
// would fire late (it is later than asked) or lags far behind, and a read or
// write that times out before the deadline asked for re-arms it and goes on
// (an early wake-up, at most once per lag). A timeout therefore fires when
// it was asked to, never early, as nginx's do.

// epoch anchors monoNow; it carries a monotonic reading.
var epoch = time.Now()

// monoNow is the monotonic time since epoch.
func monoNow() time.Duration { return time.Since(epoch) }

// monoTime is the time.Time of a monoNow value, for net.Conn deadlines
// (compared through its monotonic reading).
func monoTime(d time.Duration) time.Time { return epoch.Add(d) }

// needArm reports whether the kernel deadline armed (0: none) must be moved
// to want: it would fire after want, or more than lag before it.
func needArm(armed, want, lag time.Duration) bool {
	return armed == 0 || armed > want || want-armed > lag
}

// isDeadline reports whether err is a deadline's.
func isDeadline(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// lazyDeadlineConn is a client connection whose SetReadDeadline and
// SetWriteDeadline only remember the deadline when the armed one is no later
// and lags by at most lag; Read and Write carry on past an early timeout.
// fasthttp moves the read deadline twice per request (idle timeout, then
// read timeout); with lag at least the longer of the two, the kernel timer
// is re-armed about once per timeout per connection instead. A cleared
// deadline is always applied. Deadlines may be set while another goroutine
// reads or writes (the HTTP/2 server does), so they are kept in atomics, on
// the monoNow clock (0: none).
type lazyDeadlineConn struct {
	net.Conn
	lag                   time.Duration
	readWant, readArmed   atomic.Int64
	writeWant, writeArmed atomic.Int64
}

// monoOf is t on the monoNow clock; 0 for the zero time (none).
func monoOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	if d := int64(t.Sub(epoch)); d != 0 {
		return d
	}
	return 1
}

// lazySet reports whether the armed deadline must change to want.
func lazySet(armed, want int64, lag time.Duration) bool {
	if want == 0 || armed == 0 {
		return want != armed
	}
	d := want - armed
	return d < 0 || d > int64(lag)
}

func (c *lazyDeadlineConn) SetReadDeadline(t time.Time) error {
	w := monoOf(t)
	c.readWant.Store(w)
	if !lazySet(c.readArmed.Load(), w, c.lag) {
		return nil
	}
	c.readArmed.Store(w)
	return c.Conn.SetReadDeadline(t)
}

func (c *lazyDeadlineConn) SetWriteDeadline(t time.Time) error {
	w := monoOf(t)
	c.writeWant.Store(w)
	if !lazySet(c.writeArmed.Load(), w, c.lag) {
		return nil
	}
	c.writeArmed.Store(w)
	return c.Conn.SetWriteDeadline(t)
}

func (c *lazyDeadlineConn) SetDeadline(t time.Time) error {
	w := monoOf(t)
	c.readWant.Store(w)
	c.readArmed.Store(w)
	c.writeWant.Store(w)
	c.writeArmed.Store(w)
	return c.Conn.SetDeadline(t)
}

// early reports whether a deadline error came before want (0: none): the
// armed deadline woke the caller early.
func early(err error, want int64) bool {
	return err != nil && want != 0 && isDeadline(err) && int64(monoNow()) < want
}

func (c *lazyDeadlineConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		want := c.readWant.Load()
		if !early(err, want) {
			return n, err
		}
		c.readArmed.Store(want)
		if err := c.Conn.SetReadDeadline(monoTime(time.Duration(want))); err != nil {
			return n, err
		}
		if n > 0 {
			return n, nil
		}
	}
}

func (c *lazyDeadlineConn) Write(b []byte) (int, error) {
	written := 0
	for {
		n, err := c.Conn.Write(b[written:])
		written += n
		want := c.writeWant.Load()
		if !early(err, want) {
			return written, err
		}
		c.writeArmed.Store(want)
		if err := c.Conn.SetWriteDeadline(monoTime(time.Duration(want))); err != nil {
			return written, err
		}
	}
}

// CloseWrite half-closes the connection (closeWrite after an upgrade).
func (c *lazyDeadlineConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// lazyDeadlineListener wraps accepted connections in lazyDeadlineConn.
type lazyDeadlineListener struct {
	net.Listener
	lag time.Duration
}

func (l lazyDeadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &lazyDeadlineConn{Conn: c, lag: l.lag}, nil
}
