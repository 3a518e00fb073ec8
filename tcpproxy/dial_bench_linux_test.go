package tcpproxy

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// BenchmarkDial is the cost of the upstream dial a passthrough connection
// waits for (issue 23: passthrough setup adds ~100 µs over nginx's): Go's
// net.Dialer, the proxy's dial, and the bare socket and non-blocking
// connect syscalls nginx makes (without waiting for completion), to a
// loopback listener.
func BenchmarkDial(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	addr := ln.Addr().(*net.TCPAddr)
	b.Run("net.Dialer", func(b *testing.B) {
		d := upstreamDialer(5 * time.Second)
		for b.Loop() {
			c, err := d.Dial("tcp", addr.String())
			if err != nil {
				b.Fatal(err)
			}
			_ = c.Close()
		}
	})
	b.Run("dial", func(b *testing.B) {
		d := upstreamDialer(5 * time.Second)
		for b.Loop() {
			c, err := dial(&d, addr.String(), 5*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			_ = c.Close()
		}
	})
	b.Run("socket+connect", func(b *testing.B) {
		sa := &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: addr.Port}
		for b.Loop() {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			if err := syscall.Connect(fd, sa); err != nil && err != syscall.EINPROGRESS {
				b.Fatal(err)
			}
			_ = syscall.Close(fd)
		}
	})
}
