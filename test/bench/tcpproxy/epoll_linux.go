package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// serveEpollForward is the floor of an event-loop design (issue 23's
// question: is the setup Switchyard adds over nginx and HAProxy the Go
// netpoller's wake-ups?): one goroutine, locked to its thread, runs an
// epoll loop that accepts, connects without blocking and relays both ways,
// as nginx's stream module does, with no goroutine per connection and no
// netpoller. Plain TCP forwarding only (no SNI, no balancer), like
// serveForward; a bench role, not product code.
func serveEpollForward(ctx context.Context, target string) (string, error) {
	to, err := netip.ParseAddrPort(target)
	if err != nil {
		return "", fmt.Errorf("target: %w", err)
	}
	lfd, ep, addr, err := epollListener()
	if err != nil {
		return "", err
	}
	l := &epLoop{ep: ep, lfd: lfd, to: &unix.SockaddrInet4{Addr: to.Addr().As4(), Port: int(to.Port())}}
	if err := l.ctl(unix.EPOLL_CTL_ADD, lfd, unix.EPOLLIN); err != nil {
		return "", err
	}
	go l.run()
	context.AfterFunc(ctx, func() { _ = unix.Close(lfd) })
	return addr, nil
}

// epollListener is the forwarders' listening socket on 127.0.0.1 (non-
// blocking, any port) and an epoll instance, with the address to dial.
func epollListener() (lfd, ep int, addr string, err error) {
	lfd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, 0, "", fmt.Errorf("socket: %w", err)
	}
	_ = unix.SetsockoptInt(lfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return 0, 0, "", fmt.Errorf("bind: %w", err)
	}
	if err := unix.Listen(lfd, 1024); err != nil {
		return 0, 0, "", fmt.Errorf("listen: %w", err)
	}
	sa, err := unix.Getsockname(lfd)
	if err != nil {
		return 0, 0, "", fmt.Errorf("getsockname: %w", err)
	}
	ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return 0, 0, "", fmt.Errorf("epoll_create1: %w", err)
	}
	return lfd, ep, net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port)), nil
}

type epLoop struct {
	ep, lfd int
	to      unix.Sockaddr
	// ends is indexed by file descriptor.
	ends []*epEnd
}

// epEnd is one socket of a relayed pair: what it read and its peer has not
// taken yet waits in buf[off:n], and the socket is not read meanwhile.
type epEnd struct {
	fd         int
	peer       *epEnd
	buf        []byte
	off, n     int
	connecting bool
	eof        bool // read its end; its peer's write side was shut
	sentEOF    bool
}

func (l *epLoop) ctl(op, fd int, events uint32) error {
	if err := unix.EpollCtl(l.ep, op, fd, &unix.EpollEvent{Events: events, Fd: int32(fd)}); err != nil {
		return fmt.Errorf("epoll_ctl %d fd %d: %w", op, fd, err)
	}
	return nil
}

func (l *epLoop) run() {
	runtime.LockOSThread()
	events := make([]unix.EpollEvent, 128)
	for {
		// A non-blocking look first, without leaving the P; block in the
		// kernel only when nothing is ready.
		r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(l.ep), uintptrOf(events), uintptr(len(events)), 0, 0, 0)
		n := int(r)
		if e != 0 {
			n = 0
		}
		if n == 0 {
			var err error
			n, err = unix.EpollWait(l.ep, events, -1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return
			}
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == l.lfd {
				if !l.accept() {
					return
				}
				continue
			}
			if fd < len(l.ends) && l.ends[fd] != nil {
				l.ready(l.ends[fd], ev.Events)
			}
		}
	}
}

func (l *epLoop) track(e *epEnd) {
	for len(l.ends) <= e.fd {
		l.ends = append(l.ends, nil)
	}
	l.ends[e.fd] = e
}

// accept takes every pending connection and starts its upstream connect;
// false when the listener is gone.
func (l *epLoop) accept() bool {
	for {
		cfd, _, err := unix.Accept4(l.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if errors.Is(err, unix.EAGAIN) {
			return true
		}
		if err != nil {
			return !errors.Is(err, unix.EBADF) && !errors.Is(err, unix.EINVAL)
		}
		ufd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			_ = unix.Close(cfd)
			continue
		}
		_ = unix.SetsockoptInt(cfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		_ = unix.SetsockoptInt(ufd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		c := &epEnd{fd: cfd, buf: make([]byte, 16<<10)}
		u := &epEnd{fd: ufd, buf: make([]byte, 16<<10), peer: c, connecting: true}
		c.peer = u
		l.track(c)
		l.track(u)
		err = unix.Connect(ufd, l.to)
		switch {
		case err == nil:
			u.connecting = false
			_ = l.ctl(unix.EPOLL_CTL_ADD, cfd, unix.EPOLLIN|unix.EPOLLRDHUP)
			_ = l.ctl(unix.EPOLL_CTL_ADD, ufd, unix.EPOLLIN|unix.EPOLLRDHUP)
		case errors.Is(err, unix.EINPROGRESS):
			// The client is read once the upstream is there.
			_ = l.ctl(unix.EPOLL_CTL_ADD, ufd, unix.EPOLLOUT)
		default:
			l.closePair(c)
		}
	}
}

func (l *epLoop) ready(e *epEnd, ev uint32) {
	if e.connecting {
		if soErr, err := unix.GetsockoptInt(e.fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soErr != 0 {
			l.closePair(e)
			return
		}
		e.connecting = false
		_ = l.ctl(unix.EPOLL_CTL_MOD, e.fd, unix.EPOLLIN|unix.EPOLLRDHUP)
		_ = l.ctl(unix.EPOLL_CTL_ADD, e.peer.fd, unix.EPOLLIN|unix.EPOLLRDHUP)
		return
	}
	if ev&unix.EPOLLOUT != 0 {
		// e can take what its peer read.
		if !l.flush(e.peer) {
			return
		}
	}
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 && e.off == e.n && !e.eof {
		l.pump(e)
	}
}

// pump reads from e and writes to its peer until e would block, the peer
// would block (then e is not read until the peer has taken it), or e ends.
func (l *epLoop) pump(e *epEnd) {
	for {
		n, err := unix.Read(e.fd, e.buf)
		if errors.Is(err, unix.EAGAIN) {
			return
		}
		if err != nil || n == 0 {
			if err != nil {
				l.closePair(e)
				return
			}
			e.eof = true
			_ = unix.Shutdown(e.peer.fd, unix.SHUT_WR)
			e.sentEOF = true
			if e.peer.eof {
				l.closePair(e)
				return
			}
			_ = l.ctl(unix.EPOLL_CTL_MOD, e.fd, 0)
			return
		}
		e.off, e.n = 0, n
		if !l.flush(e) {
			return
		}
		if e.off < e.n {
			return
		}
	}
}

// flush writes e's pending bytes to its peer; false when the pair was
// closed. When the peer would block, e stops being read and the peer is
// watched for room.
func (l *epLoop) flush(e *epEnd) bool {
	for e.off < e.n {
		n, err := unix.Write(e.peer.fd, e.buf[e.off:e.n])
		if errors.Is(err, unix.EAGAIN) {
			_ = l.ctl(unix.EPOLL_CTL_MOD, e.fd, 0)
			_ = l.ctl(unix.EPOLL_CTL_MOD, e.peer.fd, l.interest(e.peer)|unix.EPOLLOUT)
			return true
		}
		if err != nil {
			l.closePair(e)
			return false
		}
		e.off += n
	}
	// All taken: read e again, and the peer needs no room.
	if !e.eof {
		_ = l.ctl(unix.EPOLL_CTL_MOD, e.fd, unix.EPOLLIN|unix.EPOLLRDHUP)
	}
	_ = l.ctl(unix.EPOLL_CTL_MOD, e.peer.fd, l.interest(e.peer))
	return true
}

func (l *epLoop) interest(e *epEnd) uint32 {
	if e.eof || e.off < e.n {
		return 0
	}
	return unix.EPOLLIN | unix.EPOLLRDHUP
}

func (l *epLoop) closePair(e *epEnd) {
	for _, x := range []*epEnd{e, e.peer} {
		if x.fd < len(l.ends) && l.ends[x.fd] == x {
			l.ends[x.fd] = nil
			_ = unix.Close(x.fd)
		}
	}
}

func uintptrOf(events []unix.EpollEvent) uintptr { return uintptr(unsafe.Pointer(&events[0])) }
