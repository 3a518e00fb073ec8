package proxy

import (
	"net"
	"time"
)

// The per-request clock. On these VMs time.Now costs about 50 ns (two vDSO
// clock reads) and net.Conn.SetReadDeadline(time.Now().Add(d)) about 175 ns
// (three more reads plus a timer update): with fasthttp's two deadlines, one
// per upstream write and read, and the timings, a proxied request spent
// over a microsecond on the clock. Hot paths read the monotonic clock once
// (monoNow, one vDSO read) and re-arm a deadline only when the one already
// armed has fallen more than a sixteenth of its timeout behind, as nginx
// reads its clock once per event loop turn.

// epoch anchors monoNow; it carries a monotonic reading.
var epoch = time.Now()

// monoNow is the monotonic time since epoch.
func monoNow() time.Duration { return time.Since(epoch) }

// monoTime is the wall-clock-free time.Time of a monoNow value, for
// net.Conn deadlines (compared through its monotonic reading).
func monoTime(d time.Duration) time.Time { return epoch.Add(d) }

// rearm reports whether a deadline armed at armed (a monoNow value, 0 for
// none) must be moved to want: when want is earlier, or later by more than
// slack. Skipping leaves a deadline at most slack early.
func rearm(armed, want, slack time.Duration) bool {
	return armed == 0 || want < armed || want-armed > slack
}

// lazyDeadlineConn is a client connection whose SetReadDeadline and
// SetWriteDeadline skip the update when the deadline asked for lies less
// than slack after the one already armed (fasthttp moves the read deadline
// twice per request). An earlier deadline, or none, is always applied.
// Each deadline is set by one goroutine at a time (fasthttp's connection
// handler), as net.Conn deadlines are used.
type lazyDeadlineConn struct {
	net.Conn
	slack                 time.Duration
	readArmed, writeArmed time.Time // zero: none armed
}

func (c *lazyDeadlineConn) SetReadDeadline(t time.Time) error {
	if skipDeadline(c.readArmed, t, c.slack) {
		return nil
	}
	c.readArmed = t
	return c.Conn.SetReadDeadline(t)
}

func (c *lazyDeadlineConn) SetWriteDeadline(t time.Time) error {
	if skipDeadline(c.writeArmed, t, c.slack) {
		return nil
	}
	c.writeArmed = t
	return c.Conn.SetWriteDeadline(t)
}

func (c *lazyDeadlineConn) SetDeadline(t time.Time) error {
	c.readArmed, c.writeArmed = t, t
	return c.Conn.SetDeadline(t)
}

// CloseWrite half-closes the connection (closeWrite after an upgrade).
func (c *lazyDeadlineConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// skipDeadline: want can stay armed as armed (both set, want no earlier and
// less than slack later).
func skipDeadline(armed, want time.Time, slack time.Duration) bool {
	if armed.IsZero() || want.IsZero() {
		return armed.IsZero() && want.IsZero()
	}
	d := want.Sub(armed)
	return d >= 0 && d <= slack
}

// lazyDeadlineListener wraps accepted connections in lazyDeadlineConn.
type lazyDeadlineListener struct {
	net.Listener
	slack time.Duration
}

func (l lazyDeadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &lazyDeadlineConn{Conn: c, slack: l.slack}, nil
}
