package proxyproto

import (
	"bufio"
	"container/list"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Policy says what a Listener does with the connections it accepts. The
// zero Policy hands them on as they are.
type Policy struct {
	// On: every connection must open with a PROXY header (version 1 or 2);
	// one that does not, or whose header is malformed, is closed without
	// an answer, as nginx's "listen ... proxy_protocol" closes it.
	On bool
	// Optional (with On): a connection whose first byte cannot start a
	// PROXY header is handed on with its own addresses instead of being
	// closed, as ingress-nginx's SSL passthrough router takes it. A
	// malformed header still closes it.
	Optional bool
	// Trusted are the ranges (nginx's set_real_ip_from) a connection must
	// come from for the header's source to become its RemoteAddr; from
	// anywhere else it keeps its own. IPv4 ranges match IPv4-mapped IPv6
	// addresses. The header's destination becomes LocalAddr either way
	// (nginx's $proxy_protocol_server_port does not depend on trust).
	Trusted []netip.Prefix
	// Timeout bounds the wait for the header; zero means 5s.
	Timeout time.Duration
	// MaxPending bounds the connections whose header is awaited; zero
	// means 16384. One more closes the one waiting longest, as nginx
	// closes its oldest idle connections when worker_connections are all
	// taken, so clients that send nothing cannot keep others out.
	MaxPending int
}

// Trusts reports whether a header from a may set the connection's source
// address.
func (p *Policy) Trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, r := range p.Trusted {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

// Listener reads a PROXY header at the start of each accepted connection,
// per its Policy, which SetPolicy may change at any time (it applies to
// connections accepted afterwards). Each header is read on the
// connection's own goroutine under a read deadline, so a client slow to
// send one holds up no other; Accept hands connections on in the order
// their headers were read.
type Listener struct {
	// immutable
	ln    net.Listener
	conns chan accepted
	done  chan struct{}

	// atomic
	policy atomic.Pointer[Policy]

	mu      sync.Mutex // guards pending
	pending list.List  // of net.Conn awaiting their header, oldest first

	closeOnce sync.Once
}

// accepted is a connection ready for Accept, or the listener's error.
type accepted struct {
	c   net.Conn
	err error
}

// NewListener starts accepting on ln with policy p.
func NewListener(ln net.Listener, p Policy) *Listener {
	l := &Listener{ln: ln, conns: make(chan accepted), done: make(chan struct{})}
	l.SetPolicy(p)
	go l.acceptLoop()
	return l
}

// SetPolicy replaces the policy for connections accepted from now on.
func (l *Listener) SetPolicy(p Policy) {
	if p.Timeout <= 0 {
		p.Timeout = 5 * time.Second
	}
	if p.MaxPending <= 0 {
		p.MaxPending = 16384
	}
	l.policy.Store(&p)
}

// acceptLoop accepts until ln fails with anything but a timeout; errors
// are handed to Accept as ln gave them.
func (l *Listener) acceptLoop() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			select {
			case l.conns <- accepted{err: err}:
			case <-l.done:
			}
			return
		}
		p := l.policy.Load()
		if !p.On {
			l.handOn(c)
			continue
		}
		go l.readHeader(c, p, l.await(c, p.MaxPending))
	}
}

// await counts c among the pending connections, first closing the oldest
// when max are pending already.
func (l *Listener) await(c net.Conn, max int) *list.Element {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.pending.Len() >= max {
		oldest := l.pending.Front()
		l.pending.Remove(oldest)
		_ = oldest.Value.(net.Conn).Close() // its readHeader fails and returns
		oldest.Value = nil
	}
	return l.pending.PushBack(c)
}

// settled takes e's connection off the pending ones, unless await did.
func (l *Listener) settled(e *list.Element) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.Value != nil {
		l.pending.Remove(e)
		e.Value = nil
	}
}

func (l *Listener) handOn(c net.Conn) {
	select {
	case l.conns <- accepted{c: c}:
	case <-l.done:
		_ = c.Close()
	}
}

// readHeader reads c's header under p and hands c on, or closes it.
func (l *Listener) readHeader(c net.Conn, p *Policy, e *list.Element) {
	pc, err := Handshake(c, p)
	l.settled(e)
	if err != nil {
		_ = c.Close()
		return
	}
	l.handOn(pc)
}

// Handshake reads the PROXY header at the start of c under p (p.On is
// assumed) and returns the connection to use from then on: it reads on
// with what followed the header and reports the header's addresses. On an
// error c is left open for the caller to close.
func Handshake(c net.Conn, p *Policy) (net.Conn, error) {
	if err := c.SetReadDeadline(time.Now().Add(p.Timeout)); err != nil {
		return nil, err
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(c)
	var h Header
	first, err := br.Peek(1)
	switch {
	case err != nil:
	case p.Optional && first[0] != 'P' && first[0] != '\r':
		// Not a header (every PROXY header starts with one of these):
		// the connection goes on as it came, its byte still buffered.
		h.Local = true
	default:
		h, err = Read(br)
	}
	if err == nil {
		err = c.SetReadDeadline(time.Time{})
	}
	if err != nil {
		putReader(br)
		return nil, err
	}
	pc := &Conn{Conn: c, r: br}
	if br.Buffered() == 0 {
		pc.r = nil
		putReader(br)
	}
	if !h.Local {
		if ap := AddrPortOf(c.RemoteAddr()); ap.IsValid() && p.Trusts(ap.Addr()) {
			pc.remote = pc.setAddr(0, h.Source)
		}
		pc.local = pc.setAddr(1, h.Destination)
	}
	return pc, nil
}

// Accept returns the next connection whose header was read.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case a := <-l.conns:
		return a.c, a.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops the listener; connections not yet accepted are closed.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.ln.Close()
}

// Addr is the listener's own address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// readers hold the first bytes of a connection while its header is read;
// one goes back to the pool as soon as what it buffered has been read.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readerSize) }}

// readerSize holds a version 1 header (at most 107 bytes) and a version 2
// one with its addresses; a version 2 header with long TLVs is read
// through it.
const readerSize = 256

func putReader(br *bufio.Reader) {
	br.Reset(nil)
	readers.Put(br)
}

// Conn is a connection whose PROXY header has been read. Reads go on
// with the bytes that followed it; RemoteAddr and LocalAddr are the
// header's source (when its peer is trusted) and destination.
type Conn struct {
	net.Conn
	// r holds bytes read past the header; nil once they have been read.
	// Only the reading goroutine touches it.
	r             *bufio.Reader
	remote, local net.Addr // nil: the connection's own
	// addrs and ips hold what remote and local point to, so a connection
	// costs one allocation for its addresses too.
	addrs [2]net.TCPAddr
	ips   [2][16]byte
}

// setAddr makes addrs[i] ap and returns it.
func (c *Conn) setAddr(i int, ap netip.AddrPort) net.Addr {
	a := ap.Addr()
	var ip net.IP
	if a.Is4() {
		b := a.As4()
		ip = append(c.ips[i][:0], b[:]...)
	} else {
		b := a.As16()
		ip = append(c.ips[i][:0], b[:]...)
	}
	c.addrs[i] = net.TCPAddr{IP: ip, Port: int(ap.Port()), Zone: a.Zone()}
	return &c.addrs[i]
}

func (c *Conn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		putReader(c.r)
		c.r = nil
	}
	return c.Conn.Read(p)
}

// RemoteAddr is the client's address: the header's source when the
// connection came from a trusted range, else the connection's own.
func (c *Conn) RemoteAddr() net.Addr {
	if c.remote != nil {
		return c.remote
	}
	return c.Conn.RemoteAddr()
}

// LocalAddr is the address the client connected to, as the header says.
func (c *Conn) LocalAddr() net.Addr {
	if c.local != nil {
		return c.local
	}
	return c.Conn.LocalAddr()
}

// PeerAddr is the address of the connection's own peer (the proxy that
// sent the header).
func (c *Conn) PeerAddr() net.Addr { return c.Conn.RemoteAddr() }

// CloseWrite half-closes the connection when it can, else closes it.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// NetConn is the connection the header was read from.
func (c *Conn) NetConn() net.Conn { return c.Conn }
