package proxy

import (
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Connections wait in a poller of the proxy's own, which wakes them in the
// order their bytes came, as nginx serves its events.
//
// Go's poller hands the goroutines of one epoll_wait to the scheduler
// last-in, first-out (each is pushed onto the head of a list): of 64
// keep-alive clients whose requests came during one busy stretch, the
// first to send is served last. On one CPU at 64 connections that put the
// product's p99 at 1.14–1.20× nginx's while its median was below nginx's
// (docs/benchmarks/product.md, "The interleaved load, and where the
// 64-connection tail comes from").
//
// So an accepted client connection, and a connection dialled to a peer,
// is taken out of Go's poller: its descriptor is registered,
// edge-triggered, in the poller's own epoll set, and that set's descriptor
// is in Go's poller, readable while any connection has an event. One
// goroutine (the dispatcher) waits on it, collects the ready connections
// with a zero-timeout epoll_wait, and wakes each one's waiting reader or
// writer through a channel holding one token. A woken goroutine takes the
// scheduler's "run next" slot and pushes the one woken before it to the
// tail of the run queue, so the first connection of a batch is woken last
// and the batch runs first to last. The dispatcher then waits for Go's
// poller to report the set again, which it does once the run queue has
// run dry, rather than looking at once: what a look at once found would
// take the run-next slot ahead of the batch.
//
// A connection's reads and writes are raw system calls (rawconn_linux.go
// says why); deadlines are timers that wake the waiter; Close wakes the
// waiters and closes the descriptor when the last call using it has
// returned, so a number reused by the next accept is never read by a call
// that began on the old one.

// pollBatch is how many events one epoll_wait collects.
const pollBatch = 256

// Slots: a connection's index in the poller's table, in chunks allocated
// as connections come (at most pollChunks × pollChunkSize at once).
const (
	pollChunkSize = 1024
	pollChunks    = 4096
)

type pollChunk [pollChunkSize]atomic.Pointer[pollConn]

// poller is the epoll set of the proxy's client connections.
type poller struct {
	epfd int
	file *os.File        // epfd, kept from its finalizer
	rc   syscall.RawConn // epfd in Go's poller

	mu     sync.Mutex // guards free and used
	free   []uint32
	used   uint32
	chunks [pollChunks]atomic.Pointer[pollChunk]
	gen    atomic.Uint32

	events [pollBatch]unix.EpollEvent // the dispatcher's
}

var (
	clientPollerOnce sync.Once
	clientPoller     *poller
)

// sharedPoller is the process's poller, started on first use and kept
// for the life of the process; nil if it cannot be made (then connections
// stay in Go's poller).
func sharedPoller() *poller {
	clientPollerOnce.Do(func() {
		p, err := newPoller()
		if err != nil {
			return
		}
		clientPoller = p
		go p.dispatch()
	})
	return clientPoller
}

func newPoller() (*poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	// Non-blocking, so os.NewFile puts it in Go's poller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		_ = unix.Close(epfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(epfd), "switchyard-client-poller")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &poller{epfd: epfd, file: f, rc: rc}, nil
}

// dispatch waits for events and wakes the connections they are for.
func (p *poller) dispatch() {
	waited := true
	for {
		n := 0
		err := p.rc.Read(func(uintptr) bool {
			// Right after a batch, wait for Go's poller (above) unless
			// events are in already: Read has just cleared the report
			// of any Go's poller made meanwhile, and a set in Go's
			// poller is edge-triggered.
			if !waited {
				waited = true
				if !p.pending() {
					return false
				}
			}
			for {
				r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(p.epfd),
					uintptr(unsafe.Pointer(&p.events[0])), pollBatch, 0, 0, 0)
				switch {
				case e == syscall.EINTR:
					continue
				case e != 0 || r == 0:
					return false
				}
				n = int(r)
				return true
			}
		})
		if err != nil {
			return
		}
		waited = n == pollBatch
		// The first event is woken last, so it runs first (above).
		for i := 1; i < n; i++ {
			p.wake(&p.events[i])
		}
		p.wake(&p.events[0])
	}
}

// pending reports whether the set has events (a look that takes none).
func (p *poller) pending() bool {
	pfd := unix.PollFd{Fd: int32(p.epfd), Events: unix.POLLIN}
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1,
			uintptr(unsafe.Pointer(&zeroTimespec)), 0, 0, 0)
		if e != syscall.EINTR {
			return e != 0 || r > 0 // on an error, look
		}
	}
}

var zeroTimespec unix.Timespec

const (
	pollReadable = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR
	pollWritable = unix.EPOLLOUT | unix.EPOLLHUP | unix.EPOLLERR
)

func (p *poller) wake(ev *unix.EpollEvent) {
	c := p.lookup(uint32(ev.Fd))
	if c == nil || c.gen != uint32(ev.Pad) {
		return // closed since; the slot may be another's now
	}
	if ev.Events&pollWritable != 0 {
		c.w.wake()
	}
	if ev.Events&pollReadable != 0 {
		c.r.wake()
	}
}

func (p *poller) lookup(slot uint32) *pollConn {
	ch := p.chunks[slot/pollChunkSize].Load()
	if ch == nil {
		return nil
	}
	return ch[slot%pollChunkSize].Load()
}

// add gives c a slot and registers its descriptor for events.
func (p *poller) add(c *pollConn, events uint32) error {
	p.mu.Lock()
	var slot uint32
	if n := len(p.free); n > 0 {
		slot = p.free[n-1]
		p.free = p.free[:n-1]
	} else {
		if p.used == pollChunks*pollChunkSize {
			p.mu.Unlock()
			return os.NewSyscallError("epoll_ctl", syscall.ENOSPC)
		}
		slot = p.used
		p.used++
		if slot%pollChunkSize == 0 && p.chunks[slot/pollChunkSize].Load() == nil {
			p.chunks[slot/pollChunkSize].Store(new(pollChunk))
		}
	}
	p.mu.Unlock()
	c.slot, c.gen = slot, p.gen.Add(1)
	p.chunks[slot/pollChunkSize].Load()[slot%pollChunkSize].Store(c)
	ev := unix.EpollEvent{
		Events: events,
		Fd:     int32(slot),
		Pad:    int32(c.gen),
	}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		p.release(slot)
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

func (p *poller) release(slot uint32) {
	p.chunks[slot/pollChunkSize].Load()[slot%pollChunkSize].Store(nil)
	p.mu.Lock()
	p.free = append(p.free, slot)
	p.mu.Unlock()
}

// pollConn is a TCP connection in the poller: accepted, or dialled and
// adopted.
type pollConn struct {
	fd        int
	p         *poller
	slot, gen uint32
	laddr     *net.TCPAddr
	raddr     *net.TCPAddr
	state     atomic.Uint64 // pollClosed | calls in progress
	r, w      pollWaiter
}

// pollWaiter is one direction of a connection: its lock (one Read, or
// one Write, at a time, as net.Conn's), the token the dispatcher, the
// deadline's timer or Close leaves, and the deadline.
type pollWaiter struct {
	mu  sync.Mutex
	tok chan struct{}
	dl  pollDeadline
}

const pollClosed = 1 << 62

func (w *pollWaiter) wake() {
	select {
	case w.tok <- struct{}{}:
	default:
	}
}

// pollDeadline is a net.Conn deadline: expired is set by its timer, or at
// once for a time already past.
type pollDeadline struct {
	expired atomic.Bool
	mu      sync.Mutex
	at      time.Time
	timer   *time.Timer
}

func (d *pollDeadline) set(t time.Time, w *pollWaiter) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at = t
	if t.IsZero() {
		d.expired.Store(false)
		if d.timer != nil {
			d.timer.Stop()
		}
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		if d.timer != nil {
			d.timer.Stop()
		}
		d.expired.Store(true)
		w.wake()
		return
	}
	d.expired.Store(false)
	if d.timer == nil {
		d.timer = time.AfterFunc(wait, func() { d.fire(w) })
	} else {
		d.timer.Reset(wait)
	}
}

// fire is the timer's: a timer set for an earlier deadline, firing as a
// later one is set, finds the time not yet come and does nothing.
func (d *pollDeadline) fire(w *pollWaiter) {
	d.mu.Lock()
	due := !d.at.IsZero() && !time.Now().Before(d.at)
	if due {
		d.expired.Store(true)
	}
	d.mu.Unlock()
	if due {
		w.wake()
	}
}

func (d *pollDeadline) stop() {
	d.mu.Lock()
	if d.timer != nil {
		d.timer.Stop()
	}
	d.mu.Unlock()
}

// pollListener accepts a TCP listener's connections into a poller. Its
// descriptor is in the poller's set as well as in Go's (where the
// listener keeps it): a waiting Accept sleeps on the entry's token.
type pollListener struct {
	p      *poller
	ln     net.Listener
	rc     syscall.RawConn
	entry  pollConn // only its read waiter and slot are used
	closed atomic.Bool
}

// listen registers ln's descriptor in p.
func (p *poller) listen(ln *net.TCPListener) (*pollListener, error) {
	rc, err := ln.SyscallConn()
	if err != nil {
		return nil, err
	}
	l := &pollListener{p: p, ln: ln, rc: rc}
	l.entry.p = p
	l.entry.r.tok = make(chan struct{}, 1)
	var aerr error
	if err := rc.Control(func(fd uintptr) {
		l.entry.fd = int(fd)
		aerr = p.add(&l.entry, unix.EPOLLIN|unix.EPOLLET)
	}); err != nil {
		return nil, err
	}
	if aerr != nil {
		return nil, aerr
	}
	return l, nil
}

// close ends a waiting Accept; the listener's own Close closes the
// descriptor, which leaves the poller's set with it.
func (l *pollListener) close() {
	if l.closed.Swap(true) {
		return
	}
	l.entry.r.wake()
	l.p.release(l.entry.slot)
}

// accept accepts the next connection into the poller.
func (l *pollListener) accept() (net.Conn, error) {
	for {
		if l.closed.Load() {
			return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.ln.Addr(), Err: net.ErrClosed}
		}
		var fd int
		var sa syscall.Sockaddr
		var aerr error
		// Control holds the descriptor open while it runs: a listener
		// closed meanwhile fails it instead of a reused number being
		// accepted from.
		if err := l.rc.Control(func(lfd uintptr) {
			for {
				fd, sa, aerr = syscall.Accept4(int(lfd), syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
				if aerr != syscall.EINTR && aerr != syscall.ECONNABORTED {
					return
				}
			}
		}); err != nil {
			return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.ln.Addr(), Err: net.ErrClosed}
		}
		switch aerr {
		case nil:
		case syscall.EAGAIN:
			<-l.entry.r.tok
			continue
		default:
			return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.ln.Addr(), Err: os.NewSyscallError("accept4", aerr)}
		}
		// Another Accept may be waiting for a connection come with this
		// one in the same event.
		l.entry.r.wake()
		c, err := l.p.conn(fd, sa)
		if err != nil {
			return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.ln.Addr(), Err: err}
		}
		return c, nil
	}
}

// conn registers an accepted descriptor.
func (p *poller) conn(fd int, sa syscall.Sockaddr) (*pollConn, error) {
	var laddr *net.TCPAddr
	if lsa, err := syscall.Getsockname(fd); err == nil {
		laddr = tcpAddrOf(lsa)
	}
	// As Go sets on every TCP connection.
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	c, err := p.register(fd, laddr, tcpAddrOf(sa))
	if err != nil {
		_ = syscall.Close(fd)
	}
	return c, err
}

// register makes a connection of a connected descriptor.
func (p *poller) register(fd int, laddr, raddr *net.TCPAddr) (*pollConn, error) {
	c := &pollConn{fd: fd, p: p, laddr: laddr, raddr: raddr}
	c.r.tok = make(chan struct{}, 1)
	c.w.tok = make(chan struct{}, 1)
	if err := p.add(c, unix.EPOLLIN|unix.EPOLLOUT|unix.EPOLLRDHUP|unix.EPOLLET); err != nil {
		return nil, err
	}
	return c, nil
}

func tcpAddrOf(sa syscall.Sockaddr) *net.TCPAddr {
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(append([]byte(nil), a.Addr[:]...)).To16(), Port: a.Port}
	case *syscall.SockaddrInet6:
		zone := ""
		if a.ZoneId != 0 {
			if ifi, err := net.InterfaceByIndex(int(a.ZoneId)); err == nil {
				zone = ifi.Name
			} else {
				zone = strconv.Itoa(int(a.ZoneId))
			}
		}
		return &net.TCPAddr{IP: append(net.IP(nil), a.Addr[:]...), Port: a.Port, Zone: zone}
	}
	return &net.TCPAddr{}
}

// begin counts a call in, unless the connection is closed.
func (c *pollConn) begin() bool {
	for {
		s := c.state.Load()
		if s&pollClosed != 0 {
			return false
		}
		if c.state.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

// end counts a call out; the last out of a closed connection closes its
// descriptor.
func (c *pollConn) end() {
	if c.state.Add(^uint64(0)) == pollClosed {
		c.destroy()
	}
}

func (c *pollConn) destroy() {
	c.p.release(c.slot)
	_ = syscall.Close(c.fd) // also takes it out of the epoll set
}

func (c *pollConn) closed() bool { return c.state.Load()&pollClosed != 0 }

// Read reads as net.Conn's Read: io.EOF at the end of the stream, a
// *net.OpError "read" otherwise.
func (c *pollConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if !c.begin() {
		return 0, c.opError("read", net.ErrClosed)
	}
	defer c.end()
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	for {
		if c.closed() {
			return 0, c.opError("read", net.ErrClosed)
		}
		if c.r.dl.expired.Load() {
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		}
		n, e := rawIO(syscall.SYS_READ, uintptr(c.fd), b, 0)
		switch e {
		case 0:
			if n == 0 {
				return 0, io.EOF
			}
			raceAcquireIO()
			return n, nil
		case syscall.EAGAIN:
			<-c.r.tok
		default:
			return 0, c.opError("read", os.NewSyscallError("read", e))
		}
	}
}

// Write writes all of b unless an error (a *net.OpError "write") stops it.
func (c *pollConn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if !c.begin() {
		return 0, c.opError("write", net.ErrClosed)
	}
	defer c.end()
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	raceReleaseIO(b)
	written := 0
	for written < len(b) {
		if c.closed() {
			return written, c.opError("write", net.ErrClosed)
		}
		if c.w.dl.expired.Load() {
			return written, c.opError("write", os.ErrDeadlineExceeded)
		}
		n, e := rawIO(syscall.SYS_SENDTO, uintptr(c.fd), b[written:], syscall.MSG_NOSIGNAL)
		switch e {
		case 0:
			written += n
		case syscall.EAGAIN:
			<-c.w.tok
		default:
			return written, c.opError("write", os.NewSyscallError("write", e))
		}
	}
	return written, nil
}

// Close closes the connection; calls in progress return net.ErrClosed and
// the descriptor closes when the last one has.
func (c *pollConn) Close() error {
	old := c.state.Or(pollClosed)
	if old&pollClosed != 0 {
		return c.opError("close", net.ErrClosed)
	}
	c.r.dl.stop()
	c.w.dl.stop()
	c.r.wake()
	c.w.wake()
	if old == 0 {
		c.destroy()
	}
	return nil
}

// CloseWrite shuts down the sending side.
func (c *pollConn) CloseWrite() error {
	if !c.begin() {
		return c.opError("close", net.ErrClosed)
	}
	defer c.end()
	if err := syscall.Shutdown(c.fd, syscall.SHUT_WR); err != nil {
		return c.opError("close", os.NewSyscallError("shutdown", err))
	}
	return nil
}

func (c *pollConn) LocalAddr() net.Addr {
	if c.laddr == nil {
		return nil
	}
	return c.laddr
}

func (c *pollConn) RemoteAddr() net.Addr {
	if c.raddr == nil {
		return nil
	}
	return c.raddr
}

func (c *pollConn) SetDeadline(t time.Time) error {
	if c.closed() {
		return c.opError("set", net.ErrClosed)
	}
	c.r.dl.set(t, &c.r)
	c.w.dl.set(t, &c.w)
	return nil
}

func (c *pollConn) SetReadDeadline(t time.Time) error {
	if c.closed() {
		return c.opError("set", net.ErrClosed)
	}
	c.r.dl.set(t, &c.r)
	return nil
}

func (c *pollConn) SetWriteDeadline(t time.Time) error {
	if c.closed() {
		return c.opError("set", net.ErrClosed)
	}
	c.w.dl.set(t, &c.w)
	return nil
}

func (c *pollConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// adopt moves a dialled connection into p: its descriptor is duplicated
// into p's set and the original closed, which takes it out of Go's
// poller. Anything else, or a connection that cannot be moved, is
// returned as withRawSyscalls makes it.
func (p *poller) adopt(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return withRawSyscalls(c)
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return withRawSyscalls(c)
	}
	nfd := -1
	var derr error
	if err := rc.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil || derr != nil {
		return withRawSyscalls(c)
	}
	laddr, _ := tc.LocalAddr().(*net.TCPAddr)
	raddr, _ := tc.RemoteAddr().(*net.TCPAddr)
	pc, err := p.register(nfd, laddr, raddr)
	if err != nil {
		_ = syscall.Close(nfd)
		return withRawSyscalls(c)
	}
	_ = tc.Close()
	return pc
}
