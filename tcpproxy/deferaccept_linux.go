package tcpproxy

import (
	"net"
	"syscall"
	"time"
)

// setDeferAccept turns TCP_DEFER_ACCEPT on (for wait, rounded up to whole
// seconds) or off on a TCP listener; other listeners are left alone. With it
// on, the kernel completes accept only once the client's first bytes (the
// ClientHello) are in, so the accepting goroutine reads them at once instead
// of parking on an empty socket: one wake-up and one EAGAIN read fewer per
// connection (nginx "listen … deferred"). Issue 7: passthrough setup 8–150
// µs lower (mean 78) in 8 same-run comparisons under load, less proxy CPU.
func setDeferAccept(ln net.Listener, wait time.Duration) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return
	}
	secs := int((wait + time.Second - 1) / time.Second)
	_ = rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, secs)
	})
}
