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
	lag         time.Duration
	read, write lazyDeadline
}

// lazyDeadline is one direction's deadline: the one asked for and the one
// armed, on the monoNow clock (0: none).
type lazyDeadline struct{ want, armed atomic.Int64 }

// set records t and reports whether the kernel deadline must be set to it.
func (d *lazyDeadline) set(t time.Time, lag time.Duration) bool {
	return d.arm(monoOf(t), lag)
}

// arm records w (the monoNow clock; 0: none) as the deadline asked for and
// reports whether the kernel deadline must be moved to it.
func (d *lazyDeadline) arm(w int64, lag time.Duration) bool {
	d.want.Store(w)
	if !lazySet(d.armed.Load(), w, lag) {
		return false
	}
	d.armed.Store(w)
	return true
}

// early reports whether err is a deadline's that came before the one
// asked for (the armed deadline woke the caller early), and if so the
// deadline to arm before trying again.
func (d *lazyDeadline) early(err error) (time.Time, bool) {
	w := d.want.Load()
	if err == nil || w == 0 || !isDeadline(err) || int64(monoNow()) >= w {
		return time.Time{}, false
	}
	d.armed.Store(w)
	return monoTime(time.Duration(w)), true
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
	if !c.read.set(t, c.lag) {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *lazyDeadlineConn) SetWriteDeadline(t time.Time) error {
	if !c.write.set(t, c.lag) {
		return nil
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *lazyDeadlineConn) SetDeadline(t time.Time) error {
	w := monoOf(t)
	for _, d := range []*lazyDeadline{&c.read, &c.write} {
		d.want.Store(w)
		d.armed.Store(w)
	}
	return c.Conn.SetDeadline(t)
}

func (c *lazyDeadlineConn) Read(b []byte) (int, error) { return c.read.readFrom(c.Conn, b) }

func (c *lazyDeadlineConn) Write(b []byte) (int, error) { return c.write.writeTo(c.Conn, b) }

// readFrom reads from c, whose read deadline d keeps: a read woken early by
// the armed deadline re-arms the one asked for and reads on.
func (d *lazyDeadline) readFrom(c net.Conn, b []byte) (int, error) {
	for {
		n, err := c.Read(b)
		t, ok := d.early(err)
		if !ok {
			return n, err
		}
		if err := c.SetReadDeadline(t); err != nil || n > 0 {
			return n, err
		}
	}
}

// writeTo writes b to c, whose write deadline d keeps: a write woken early
// re-arms the one asked for and writes the rest.
func (d *lazyDeadline) writeTo(c net.Conn, b []byte) (int, error) {
	written := 0
	for {
		n, err := c.Write(b[written:])
		written += n
		t, ok := d.early(err)
		if !ok {
			return written, err
		}
		if err := c.SetWriteDeadline(t); err != nil {
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
