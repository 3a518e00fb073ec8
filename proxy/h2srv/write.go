package h2srv

import (
	"time"

	"golang.org/x/net/http2" //nolint:staticcheck // SA1019: see doc.go
)

// The write side. Frames are encoded into pending under wmu; whoever
// then finds no write in progress writes pending out (flush), looping
// while others queued more meanwhile. Handlers flush on their own
// goroutine; the reading goroutine never writes to the socket itself (a
// client that does not read could otherwise stop it reading): it hands
// the flush to a worker of the server's pool (wake). A connection has no
// goroutine of its own for writing, so an idle one holds only its
// reader's stack.

// writeControl queues a frame of the reading goroutine's and wakes the
// writer. Past maxControlQueued queued and unwritten, the client is not
// reading what it asks for: the connection is closed.
func (c *conn) writeControl(write func(*http2.Framer) error) {
	c.wmu.Lock()
	flood := c.queueControl(write)
	c.wmu.Unlock()
	if flood {
		_ = c.nc.Close()
	}
}

// queueControl is writeControl with wmu held; true when the client is
// flooding (the caller closes the connection once wmu is released).
func (c *conn) queueControl(write func(*http2.Framer) error) (flood bool) {
	if c.werr != nil {
		return false
	}
	if err := write(c.wfr); err != nil {
		c.werr = err
	}
	c.control++
	c.wake()
	return c.control > maxControlQueued
}

// wake has a worker flush what is pending, unless a flush is already
// queued or running (that one writes this too). Called with wmu held.
func (c *conn) wake() {
	if c.werr != nil || c.flushing || c.queued {
		return
	}
	c.queued = true
	c.srv.run(job{c: c})
}

// flushQueued is the worker's side of wake.
func (c *conn) flushQueued() {
	c.wmu.Lock()
	c.queued = false
	c.wmu.Unlock()
	if c.flush() != nil {
		_ = c.nc.Close() // the reader sees it and ends the connection
	}
}

// flush writes pending out unless another goroutine is writing it, in
// which case that one writes what was queued here too.
func (c *conn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.flushing {
		return c.werr
	}
	c.flushing = true
	for len(c.pending) > 0 && c.werr == nil {
		// The next frames go into the spare buffer while out is written.
		out := c.pending
		c.pending, c.spare = c.spare[:0], nil
		c.control = 0
		c.wmu.Unlock()
		if c.srv.WriteTimeout > 0 {
			_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.WriteTimeout))
		}
		_, err := c.nc.Write(out)
		c.wmu.Lock()
		if cap(out) <= maxKeptBuffer {
			c.spare = out[:0]
		} // else a burst's buffer: not kept for the connection's idle life
		if err != nil && c.werr == nil {
			c.werr = err
		}
		c.wcond.Broadcast()
	}
	c.flushing = false
	c.wcond.Broadcast()
	return c.werr
}

// drain writes out what is pending, waiting for a write in progress on
// another goroutine to end first: the last frames (GOAWAY) before close.
func (c *conn) drain() {
	c.wmu.Lock()
	for c.flushing {
		c.wcond.Wait()
	}
	c.wmu.Unlock()
	_ = c.flush()
}

// waitPending blocks while more than maxPending bytes wait to be
// written, so a client that does not read holds at most that much of a
// connection's answers in memory. Called with wmu held.
func (c *conn) waitPending() error {
	for len(c.pending) > maxPending && c.werr == nil {
		c.wake()
		c.wcond.Wait()
	}
	return c.werr
}

// pendingWriter is what the write framer writes into: pending.
type pendingWriter struct{ c *conn }

func (w pendingWriter) Write(p []byte) (int, error) {
	w.c.pending = append(w.c.pending, p...)
	return len(p), nil
}
