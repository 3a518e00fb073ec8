package h2srv

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2" //nolint:staticcheck // SA1019: x/net/http2's Framer and hpack are the parsers (doc.go)
	"golang.org/x/net/http2/hpack"
)

// conn is one client connection. Its reading goroutine (serve) owns the
// framer's read side, the hpack decoder and the stream table's changes;
// mu guards what handlers share with it (streams, send windows), wmu the
// write side (framer, hpack encoder, pending bytes).
type conn struct {
	srv    *Server
	nc     net.Conn
	ctx    context.Context
	cancel context.CancelFunc
	fr     *http2.Framer
	// br holds the bytes the framer reads ahead.
	br *bufReader
	// hdec, hblock and hpayload decode header blocks (readHeaders).
	hdec     *hpack.Decoder
	hblock   headerBlock
	hpayload []byte

	mu   sync.Mutex
	cond *sync.Cond // windows grew, a stream closed, the connection ended
	// streams are the open streams by id.
	streams map[uint32]*stream
	// sendWindow is the connection's send window (RFC 9113 §6.9.1).
	sendWindow int64
	// peerInitialWindow and peerMaxFrame are the client's SETTINGS.
	peerInitialWindow int64
	peerMaxFrame      int
	// recvUnsentConn is the connection's receive window taken by bytes
	// received and not yet given back with a WINDOW_UPDATE; recvOwedConn
	// the part of it read (or dropped) and owed back.
	recvUnsentConn, recvOwedConn int
	closed                       bool   // the connection ended: no frame is written any more
	goingAway                    bool   // GOAWAY sent or received: no new stream is accepted
	goAwaySent                   bool   // GOAWAY sent
	lastOpened                   uint32 // the last stream id accepted, for GOAWAY

	remoteAddr string
	tlsState   *tls.ConnectionState

	// read side only (serve's goroutine)
	maxStreamID uint32 // highest stream id opened
	opened      int    // streams opened
	resets      int    // streams the client reset before their answer, this window
	resetsSince time.Time
	idleTimer   *time.Timer

	wmu      sync.Mutex
	wcond    *sync.Cond // pending drained below maxPending, or the connection ended
	pending  []byte
	spare    []byte
	flushing bool
	werr     error
	control  int // control frames queued in pending since the last write
	henc     *hpack.Encoder
	hbuf     bytes.Buffer
	wfr      *http2.Framer // writes into pending
	queued   bool          // a worker will flush (wake)
}

func newConn(s *Server, ctx context.Context, nc net.Conn) *conn {
	// The requests' contexts end with the connection, not with ctx: the
	// end of ctx is a graceful shutdown (serve).
	ctx, cancel := context.WithCancel(context.WithValue(context.WithoutCancel(ctx), http.LocalAddrContextKey, nc.LocalAddr()))
	c := &conn{
		srv: s, nc: nc, ctx: ctx, cancel: cancel,
		streams:           make(map[uint32]*stream),
		sendWindow:        initialPeerWindow,
		peerInitialWindow: initialPeerWindow,
		peerMaxFrame:      16384,
	}
	c.remoteAddr, c.tlsState = nc.RemoteAddr().String(), tlsStateOf(nc)
	c.cond = sync.NewCond(&c.mu)
	c.wcond = sync.NewCond(&c.wmu)
	// crypto/tls buffers what it decrypts, so a TLS connection is read
	// through 1 KiB (the small frames of one record in one call; larger
	// reads pass straight through) and an idle one holds little of ours;
	// a cleartext one (h2c) through 16 KiB, one read(2) for many frames.
	size := 16 << 10
	if c.tlsState != nil {
		size = 1 << 10
	}
	c.br = &bufReader{r: nc, buf: make([]byte, size)}
	c.fr = http2.NewFramer(nil, c.br)
	// Header blocks are read and decoded by readHeaders, not by the
	// framer (ReadMetaHeaders stays nil).
	c.hdec = hpack.NewDecoder(4096, c.emitField)
	c.hdec.SetMaxStringLength(int(s.maxHeaderBytes()))
	c.fr.SetReuseFrames()
	c.fr.SetMaxReadFrameSize(maxReadFrame) // SETTINGS_MAX_FRAME_SIZE's default
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.wfr = http2.NewFramer(pendingWriter{c}, nil)
	return c
}

// serve reads and applies frames until the connection ends.
func (c *conn) serve(shutdown context.Context) {
	defer c.close()
	// Shutting down: GOAWAY, the open streams finish, then the end.
	stop := context.AfterFunc(shutdown, func() {
		c.goAway(http2.ErrCodeNo)
		c.closeIfIdle()
	})
	defer stop()
	if err := c.readPreface(); err != nil {
		return
	}
	c.writeControl(func(f *http2.Framer) error {
		if err := f.WriteSettings(
			http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.srv.maxStreams()},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
			http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.srv.maxHeaderBytes()},
			http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		); err != nil {
			return err
		}
		return f.WriteWindowUpdate(0, connWindow-initialPeerWindow)
	})
	if c.srv.IdleTimeout > 0 {
		c.idleTimer = time.AfterFunc(c.srv.IdleTimeout, c.idle)
	}
	for {
		f, hb, err := c.readFrame()
		if errors.Is(err, http2.ErrFrameTooLarge) {
			err = http2.ConnectionError(http2.ErrCodeFrameSize)
		}
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				c.resetStream(se.StreamID, se.Code)
				continue
			}
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				c.goAway(http2.ErrCode(ce))
			}
			return
		}
		if hb != nil {
			err = c.processHeaders(hb)
		} else {
			err = c.process(f)
		}
		if err != nil {
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				c.goAway(http2.ErrCode(ce))
			}
			return
		}
	}
}

// readPreface reads the client's connection preface (RFC 9113 §3.4)
// within ten seconds.
func (c *conn) readPreface() error {
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer func() { _ = c.nc.SetReadDeadline(time.Time{}) }()
	var buf [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, buf[:]); err != nil {
		return err
	}
	if string(buf[:]) != http2.ClientPreface {
		return errors.New("h2srv: bad connection preface")
	}
	return nil
}

// readFrame reads the next frame: a header block (HEADERS and its
// CONTINUATIONs, readHeaders) as hb, any other frame as f.
func (c *conn) readFrame() (f http2.Frame, hb *headerBlock, err error) {
	fh, err := c.fr.ReadFrameHeader()
	if err != nil {
		return nil, nil, err
	}
	if fh.Type == http2.FrameHeaders {
		hb, err = c.readHeaders(fh)
		return nil, hb, err
	}
	f, err = c.fr.ReadFrameForHeader(fh)
	return f, nil, err
}

// process applies one frame; an error ends the connection.
func (c *conn) process(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return c.processSettings(f)
	case *http2.DataFrame:
		return c.processData(f)
	case *http2.WindowUpdateFrame:
		return c.processWindowUpdate(f)
	case *http2.RSTStreamFrame:
		return c.processReset(f)
	case *http2.PingFrame:
		if f.StreamID != 0 {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if !f.IsAck() {
			data := f.Data
			c.writeControl(func(fr *http2.Framer) error { return fr.WritePing(true, data) })
		}
	case *http2.GoAwayFrame:
		// The client will open no more streams; those open finish.
		c.mu.Lock()
		c.goingAway = true
		c.mu.Unlock()
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			c.resetStream(f.StreamID, http2.ErrCodeProtocol)
		}
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // clients do not push
	case *http2.HeadersFrame, *http2.ContinuationFrame:
		// readHeaders takes HEADERS and joins CONTINUATION frames to
		// them (the framer's ReadFrameHeader refuses any other); one
		// here follows nothing.
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	// Unknown frame types are ignored (RFC 9113 §4.1).
	return nil
}

// processSettings applies the client's SETTINGS and queues their
// acknowledgement. The write side is held throughout, so the ACK is
// queued before any handler woken by a grown window can queue DATA
// spent from it: the client sees its SETTINGS acknowledged before the
// bytes they allowed, as from nginx and x/net/http2 (h2spec 2.2's
// 6.9.2/1 waits for the ACK, then the DATA).
func (c *conn) processSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	c.wmu.Lock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			c.mu.Lock() // after wmu, as writeBlock takes them
			defer c.mu.Unlock()
			delta := int64(s.Val) - c.peerInitialWindow
			c.peerInitialWindow = int64(s.Val)
			for _, st := range c.streams {
				st.sendWindow += delta
				if st.sendWindow > 1<<31-1 {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
			c.cond.Broadcast() // those woken wait for wmu: the ACK goes first
		case http2.SettingMaxFrameSize:
			c.mu.Lock()
			c.peerMaxFrame = int(s.Val)
			c.mu.Unlock()
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSize(min(s.Val, 4096))
		}
		return nil
	})
	if err != nil {
		c.wmu.Unlock()
		return err
	}
	flood := c.queueControl(func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
	c.wmu.Unlock()
	if flood {
		_ = c.nc.Close()
	}
	return nil
}

func (c *conn) processWindowUpdate(f *http2.WindowUpdateFrame) error {
	if f.StreamID == 0 {
		if f.Increment == 0 {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.sendWindow += int64(f.Increment)
		if c.sendWindow > 1<<31-1 {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.cond.Broadcast()
		return nil
	}
	c.mu.Lock()
	st := c.streams[f.StreamID]
	code := http2.ErrCodeNo
	switch {
	case st == nil:
	case f.Increment == 0:
		code = http2.ErrCodeProtocol
	default:
		st.sendWindow += int64(f.Increment)
		if st.sendWindow > 1<<31-1 {
			code = http2.ErrCodeFlowControl
		}
		c.cond.Broadcast()
	}
	c.mu.Unlock()
	if st == nil {
		return c.checkIdle(f.StreamID)
	}
	if code != http2.ErrCodeNo {
		c.resetStream(f.StreamID, code)
	}
	return nil
}

// checkIdle is the answer to a frame for a stream not open: an error if
// the stream was never opened (RFC 9113 §5.1, "idle"), nothing if it was
// and is closed. c.mu or the read side suffices: maxStreamID is serve's.
func (c *conn) checkIdle(id uint32) error {
	if id > c.maxStreamID {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	return nil
}

func (c *conn) processReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	st := c.streams[f.StreamID]
	if st == nil {
		err := c.checkIdle(f.StreamID)
		c.mu.Unlock()
		return err
	}
	answered := st.answered
	c.mu.Unlock()
	if !answered {
		now := time.Now()
		if now.Sub(c.resetsSince) > resetWindow {
			c.resets, c.resetsSince = 0, now
		}
		c.resets++
		if c.resets > resetBudget {
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
	}
	c.closeStream(st, errStreamReset)
	return nil
}

// idle ends a connection that has had no open stream for IdleTimeout.
func (c *conn) idle() {
	c.mu.Lock()
	open := len(c.streams)
	c.mu.Unlock()
	if open > 0 {
		return // a stream is open: the timer is restarted when it closes
	}
	c.goAway(http2.ErrCodeNo)
	c.drain()
	c.halfClose()
}

// halfClose ends a connection that has gone away and has no stream left,
// from any goroutine: what is queued has been written; the client is told
// the end (TLS close_notify, or TCP's FIN) while the reading goroutine
// reads on for at most lingerTime, then closes it (close). Closing at once
// with the client's bytes unread could reset the connection and lose the
// GOAWAY on its way.
func (c *conn) halfClose() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		_ = c.nc.Close()
		return
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(lingerTime))
}

// goAway queues GOAWAY with code, once: no new stream is accepted.
func (c *conn) goAway(code http2.ErrCode) {
	c.mu.Lock()
	sent := c.goAwaySent
	c.goingAway, c.goAwaySent = true, true
	last := c.lastOpened
	c.mu.Unlock()
	if !sent || code != http2.ErrCodeNo {
		c.writeControl(func(f *http2.Framer) error { return f.WriteGoAway(last, code, nil) })
	}
}

// resetStream sends RST_STREAM and closes the stream if it is open.
func (c *conn) resetStream(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	st := c.streams[id]
	c.mu.Unlock()
	if st != nil {
		c.closeStream(st, errStreamReset)
	}
	c.writeControl(func(f *http2.Framer) error { return f.WriteRSTStream(id, code) })
}

// closeStream removes st from the open streams, ends its request body and
// context with err; a handler still running sees them end.
func (c *conn) closeStream(st *stream, err error) {
	c.mu.Lock()
	if c.streams[st.id] != st {
		c.mu.Unlock()
		return
	}
	delete(c.streams, st.id)
	open := len(c.streams)
	c.cond.Broadcast()
	c.mu.Unlock()
	c.giveBack(nil, st.body.discard(err)) // nobody reads what is left
	st.ctx.cancel()
	if c.srv.StreamsChanged != nil {
		c.srv.StreamsChanged(c.nc, open)
	}
	if open == 0 && c.idleTimer != nil {
		c.idleTimer.Reset(c.srv.IdleTimeout)
	}
	// Going away and nothing left: the reader may be waiting on a client
	// that keeps the connection open.
	c.closeIfIdle()
}

// close ends the connection: every stream is cancelled, waiting handlers
// are woken, and the socket closed.
func (c *conn) close() {
	c.mu.Lock()
	c.closed = true
	streams := make([]*stream, 0, len(c.streams))
	for _, st := range c.streams {
		streams = append(streams, st)
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	for _, st := range streams {
		c.closeStream(st, errConnClosed)
	}
	c.drain()
	c.mu.Lock()
	linger := c.goAwaySent
	c.mu.Unlock()
	if linger {
		// Closing with the client's bytes unread would reset the
		// connection and could lose the GOAWAY on its way: stop writing,
		// read what still comes for a moment, then close.
		if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_ = c.nc.SetReadDeadline(time.Now().Add(lingerTime))
		_, _ = io.Copy(io.Discard, io.LimitReader(c.br, 1<<20))
	}
	c.wmu.Lock()
	if c.werr == nil {
		c.werr = errConnClosed
	}
	c.wcond.Broadcast()
	c.wmu.Unlock()
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	c.cancel()
	_ = c.nc.Close()
}

var (
	errConnClosed  = errors.New("h2srv: connection closed")
	errStreamReset = errors.New("h2srv: stream reset")
)

// bufReader is a buffered reader over the connection that the framer
// reads frames from (the preface too).
type bufReader struct {
	r   io.Reader
	buf []byte
	pos int
	end int
}

func (b *bufReader) Read(p []byte) (int, error) {
	if b.pos == b.end {
		if len(p) >= len(b.buf) {
			return b.r.Read(p)
		}
		n, err := b.r.Read(b.buf)
		b.pos, b.end = 0, n
		if n == 0 {
			return 0, err
		}
	}
	n := copy(p, b.buf[b.pos:b.end])
	b.pos += n
	return n, nil
}
