package tcpproxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// dial connects to an upstream "ip:port" the way nginx's stream module
// does: a non-blocking socket and connect(2), then at most one wait for
// the socket to become writable. On loopback and fast links the connect
// has completed by the time connect(2) returns, and the connection is
// handed back without parking the goroutine.
//
// Issue 23: net.Dialer took 116 µs p50 per upstream dial inside the pinned
// passthrough proxy (name resolution of the literal, a deadline context and
// its timers, the park until the poller reports the socket writable,
// getsockopt, getpeername, getsockname, TCP_NODELAY), of which connect(2)
// itself was 36 µs; this takes 72 µs, and passthrough setup waits for it
// after the ClientHello (docs/benchmarks/tcpproxy.md).
//
// The connection has TCP_NODELAY and no TCP keep-alive, as upstreamDialer's.
// An address that is not an IP literal (an HTTPS fallback given by name) goes
// through fallback.
func dial(fallback *net.Dialer, addr string, timeout time.Duration) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fallback.Dial("tcp", addr)
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	var (
		family int
		sa     syscall.Sockaddr
	)
	if ap.Addr().Is4() {
		family, sa = syscall.AF_INET, &syscall.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	} else {
		family, sa = syscall.AF_INET6, &syscall.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, syscall.IPPROTO_TCP)
	if err != nil {
		return nil, fmt.Errorf("dial %s: socket: %w", addr, err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("dial %s: TCP_NODELAY: %w", addr, err)
	}
	switch err := syscall.Connect(fd, sa); err {
	case nil, syscall.EINPROGRESS, syscall.EINTR:
	default:
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("dial %s: connect: %w", addr, err)
	}
	// A non-blocking socket: os.NewFile registers it with the runtime's
	// poller, so reads, writes and deadlines park goroutines as net.Conn's
	// do. From here f owns fd.
	f := os.NewFile(uintptr(fd), addr)
	c := &upstreamConn{File: f, remote: net.TCPAddrFromAddrPort(ap)}
	if err := c.awaitConnect(timeout); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("dial %s: connect: %w", addr, err)
	}
	return c, nil
}

// awaitConnect returns once the connect started on c has completed, failed,
// or outlasted timeout (zero: no bound).
func (c *upstreamConn) awaitConnect(timeout time.Duration) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var connectErr error
	check := func(fd uintptr) bool {
		if _, err := syscall.Getpeername(int(fd)); err == nil {
			return true
		}
		errno, err := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_ERROR)
		switch {
		case err != nil:
			connectErr = err
		case errno != 0:
			connectErr = syscall.Errno(errno)
		default:
			return false // still in progress: wait until writable
		}
		return true
	}
	// The usual case: connected already, no deadline (timer) needed.
	done := false
	if err := rc.Control(func(fd uintptr) { done = check(fd) }); err != nil {
		return err
	}
	if !done {
		if timeout > 0 {
			if err := c.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
				return err
			}
		}
		if err := rc.Write(check); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("timed out after %v: %w", timeout, err)
			}
			return err
		}
		if timeout > 0 {
			_ = c.SetWriteDeadline(time.Time{})
		}
	}
	return connectErr
}

// upstreamConn is an upstream TCP connection made by dial: an *os.File on
// the poller with net.Conn's addresses and half-close.
type upstreamConn struct {
	*os.File
	remote *net.TCPAddr
}

var _ closeWriter = (*upstreamConn)(nil)

func (c *upstreamConn) RemoteAddr() net.Addr { return c.remote }

// LocalAddr asks the kernel; nothing on the connection's path needs it.
func (c *upstreamConn) LocalAddr() net.Addr {
	var local net.Addr = &net.TCPAddr{}
	rc, err := c.SyscallConn()
	if err != nil {
		return local
	}
	_ = rc.Control(func(fd uintptr) {
		switch sa, _ := syscall.Getsockname(int(fd)); sa := sa.(type) {
		case *syscall.SockaddrInet4:
			local = &net.TCPAddr{IP: sa.Addr[:], Port: sa.Port}
		case *syscall.SockaddrInet6:
			local = &net.TCPAddr{IP: sa.Addr[:], Port: sa.Port}
		}
	})
	return local
}

// CloseWrite shuts down the sending side, as (*net.TCPConn).CloseWrite.
func (c *upstreamConn) CloseWrite() error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.Shutdown(int(fd), syscall.SHUT_WR) }); err != nil {
		return err
	}
	return serr
}
