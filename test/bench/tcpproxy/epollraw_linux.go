package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// serveEpollRawForward is serveEpollForward without the Go runtime in the
// loop's way (issue 23: a single-threaded C event loop adds ~200 µs of
// setup unpinned where a Go process, even one on a raw epoll loop, added
// ~380): every system call of the loop, the blocking epoll_wait included,
// is a raw one, so the runtime never sees the thread leave for the kernel
// (no entersyscall, no sysmon handing the P away), and the sockets are
// edge-triggered and registered once, as nginx registers them, so a relayed
// chunk costs a read and a write and no epoll_ctl. Buffers are reused from
// a free list. A bench role, not product code.
func serveEpollRawForward(ctx context.Context, target string) (string, error) {
	to, err := netip.ParseAddrPort(target)
	if err != nil {
		return "", fmt.Errorf("target: %w", err)
	}
	lfd, ep, addr, err := epollListener()
	if err != nil {
		return "", err
	}
	l := &rawLoop{ep: ep, lfd: lfd, goWait: os.Getenv("TCPB_EPOLL_WAIT") == "syscall"}
	l.to.Family = unix.AF_INET
	port := to.Port()
	l.to.Port = port<<8 | port>>8 // network byte order
	l.to.Addr = to.Addr().As4()
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, lfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(lfd)}); err != nil {
		return "", fmt.Errorf("epoll_ctl listener: %w", err)
	}
	go l.run()
	context.AfterFunc(ctx, func() { _ = unix.Close(lfd) })
	return addr, nil
}

type rawLoop struct {
	ep, lfd int
	to      unix.RawSockaddrInet4
	// goWait blocks in unix.EpollWait (a system call the runtime sees)
	// after a raw look finds nothing, as serveEpollForward does.
	goWait bool
	ends   []*rawEnd // by file descriptor
	free   [][]byte
}

// rawEnd is one socket of a relayed pair; buf[off:n] is what it read that
// its peer has not taken yet.
type rawEnd struct {
	fd         int
	peer       *rawEnd
	buf        []byte
	off, n     int
	connecting bool
	eof        bool
}

func rawCall(trap, a1, a2, a3 uintptr) (int, syscall.Errno) {
	r, _, e := syscall.RawSyscall(trap, a1, a2, a3)
	return int(r), e
}

func (l *rawLoop) run() {
	if os.Getenv("TCPB_RAW_NOLOCK") == "" {
		runtime.LockOSThread()
	}
	events := make([]unix.EpollEvent, 128)
	spin, _ := time.ParseDuration(os.Getenv("TCPB_RAW_SPIN"))
	var lastEvent time.Time
	for {
		timeout := ^uintptr(0) // -1: block in the kernel
		if l.goWait || (spin > 0 && time.Since(lastEvent) < spin) {
			timeout = 0
		}
		r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(l.ep), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), timeout, 0, 0)
		if l.goWait && e == 0 && r == 0 {
			n, err := unix.EpollWait(l.ep, events, -1)
			if err != nil {
				e = err.(syscall.Errno)
			}
			r = uintptr(max(n, 0))
		}
		if e == syscall.EINTR {
			// A signal (the runtime's preemption among them): let the
			// runtime act on it before blocking again.
			runtime.Gosched()
			continue
		}
		if e != 0 {
			return
		}
		if r > 0 && spin > 0 {
			lastEvent = time.Now()
		}
		for _, ev := range events[:int(r)] {
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

func (l *rawLoop) buffer() []byte {
	if n := len(l.free); n > 0 {
		b := l.free[n-1]
		l.free = l.free[:n-1]
		return b
	}
	return make([]byte, 16<<10)
}

func (l *rawLoop) track(e *rawEnd) {
	for len(l.ends) <= e.fd {
		l.ends = append(l.ends, nil)
	}
	l.ends[e.fd] = e
}

func (l *rawLoop) add(fd int) {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd)}
	_, _, _ = syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(l.ep), unix.EPOLL_CTL_ADD, uintptr(fd), uintptr(unsafe.Pointer(&ev)), 0, 0)
}

var one = int32(1)

func setNoDelay(fd int) {
	_, _, _ = syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, uintptr(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY, uintptr(unsafe.Pointer(&one)), 4, 0)
}

// accept takes every pending connection and starts its upstream connect;
// false when the listener is gone.
func (l *rawLoop) accept() bool {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_ACCEPT4, uintptr(l.lfd), 0, 0, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		cfd := int(r)
		if e == syscall.EAGAIN {
			return true
		}
		if e != 0 {
			return e != syscall.EBADF && e != syscall.EINVAL
		}
		ufd, e := rawCall(syscall.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if e != 0 {
			_, _ = rawCall(syscall.SYS_CLOSE, uintptr(cfd), 0, 0)
			continue
		}
		setNoDelay(cfd)
		setNoDelay(ufd)
		c := &rawEnd{fd: cfd, buf: l.buffer()}
		u := &rawEnd{fd: ufd, buf: l.buffer(), peer: c, connecting: true}
		c.peer = u
		l.track(c)
		l.track(u)
		_, e = rawCall(syscall.SYS_CONNECT, uintptr(ufd), uintptr(unsafe.Pointer(&l.to)), unsafe.Sizeof(l.to))
		if e != 0 && e != syscall.EINPROGRESS {
			l.closePair(c)
			continue
		}
		u.connecting = e != 0
		l.add(cfd)
		l.add(ufd)
	}
}

func (l *rawLoop) ready(e *rawEnd, ev uint32) {
	if e.connecting {
		if ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) == 0 {
			return
		}
		var soErr int32
		size := uint32(4)
		_, _, errno := syscall.RawSyscall6(syscall.SYS_GETSOCKOPT, uintptr(e.fd), unix.SOL_SOCKET, unix.SO_ERROR, uintptr(unsafe.Pointer(&soErr)), uintptr(unsafe.Pointer(&size)), 0)
		if errno != 0 || soErr != 0 {
			l.closePair(e)
			return
		}
		e.connecting = false
	}
	if e.peer.connecting {
		return // the client's bytes wait in the kernel until the upstream is there
	}
	// Edge-triggered: move what can move, both ways, until each read or
	// write would block.
	if l.relay(e) && e.peer != nil {
		l.relay(e.peer)
	}
}

// relay moves e's bytes to its peer: what is pending first, then what e
// reads, until e would block, the peer would block, or e ends; false when
// the pair was closed.
func (l *rawLoop) relay(e *rawEnd) bool {
	for {
		for e.off < e.n {
			n, errno := rawCall(syscall.SYS_WRITE, uintptr(e.peer.fd), uintptr(unsafe.Pointer(&e.buf[e.off])), uintptr(e.n-e.off))
			if errno == syscall.EAGAIN {
				return true // the peer's EPOLLOUT edge brings us back
			}
			if errno != 0 {
				l.closePair(e)
				return false
			}
			e.off += n
		}
		if e.eof {
			return true
		}
		n, errno := rawCall(syscall.SYS_READ, uintptr(e.fd), uintptr(unsafe.Pointer(&e.buf[0])), uintptr(len(e.buf)))
		if errno == syscall.EAGAIN {
			return true
		}
		if errno != 0 {
			l.closePair(e)
			return false
		}
		if n == 0 {
			e.eof = true
			_, _ = rawCall(syscall.SYS_SHUTDOWN, uintptr(e.peer.fd), unix.SHUT_WR, 0)
			if e.peer.eof {
				l.closePair(e)
				return false
			}
			return true
		}
		e.off, e.n = 0, n
	}
}

func (l *rawLoop) closePair(e *rawEnd) {
	for _, x := range [2]*rawEnd{e, e.peer} {
		if x.fd < len(l.ends) && l.ends[x.fd] == x {
			l.ends[x.fd] = nil
			_, _ = rawCall(syscall.SYS_CLOSE, uintptr(x.fd), 0, 0)
			l.free = append(l.free, x.buf)
			x.buf = nil
		}
	}
}
