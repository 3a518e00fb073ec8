package tcpproxy

import (
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestDial: dial's connection carries bytes both ways, names its ends, has
// TCP_NODELAY, and half-closes like a *net.TCPConn.
func TestDial(t *testing.T) {
	for _, network := range []string{"127.0.0.1", "::1"} {
		t.Run(network, func(t *testing.T) {
			ln, err := net.Listen("tcp", net.JoinHostPort(network, "0"))
			if err != nil {
				if network == "::1" {
					t.Skipf("no IPv6 loopback here: %v", err)
				}
				t.Fatal(err)
			}
			defer ln.Close()
			d := upstreamDialer(time.Second)
			c, err := dial(&d, ln.Addr().String(), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got, want := c.RemoteAddr().String(), ln.Addr().String(); got != want {
				t.Errorf("RemoteAddr = %s; want %s", got, want)
			}
			if got, want := c.LocalAddr().String(), s.RemoteAddr().String(); got != want {
				t.Errorf("LocalAddr = %s; want the server's view of the client, %s", got, want)
			}
			if _, err := c.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			if err := c.(closeWriter).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(s)
			if err != nil || string(got) != "hello" {
				t.Fatalf("server read %q, %v; want hello then EOF (half-close)", got, err)
			}
			if _, err := s.Write([]byte("back")); err != nil {
				t.Fatal(err)
			}
			_ = s.Close()
			got, err = io.ReadAll(c)
			if err != nil || string(got) != "back" {
				t.Fatalf("client read %q, %v; want back then EOF", got, err)
			}
			rc, err := c.(syscall.Conn).SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			nodelay := -1
			_ = rc.Control(func(fd uintptr) {
				nodelay, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY)
			})
			if nodelay != 1 {
				t.Errorf("TCP_NODELAY = %d; want 1", nodelay)
			}
		})
	}
}

// TestDialRefused: a port nobody listens on is an error at once, not a
// connection that fails on its first write.
func TestDialRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	d := upstreamDialer(time.Second)
	start := time.Now()
	c, err := dial(&d, addr, time.Second)
	if err == nil {
		c.Close()
		t.Fatal("dial to a closed port succeeded")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("err = %v; want ECONNREFUSED", err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("refusal took %v", took)
	}
}

// TestDialTimeout: a connect that never completes ends after the timeout.
// A listener with a backlog of 0 that never accepts makes the kernel drop
// further SYNs once its queue is full, so a later connect stays pending.
func TestDialTimeout(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Close(fd) }()
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	d := upstreamDialer(time.Second)
	const timeout = 300 * time.Millisecond
	for i := 0; i < 8; i++ {
		start := time.Now()
		c, err := dial(&d, addr, timeout)
		if err == nil {
			defer c.Close() // filled the queue; the next one should hang
			continue
		}
		took := time.Since(start)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("dial %d: err = %v; want a timeout", i, err)
		}
		if took < timeout || took > timeout+time.Second {
			t.Fatalf("dial %d timed out after %v; want about %v", i, took, timeout)
		}
		return
	}
	t.Fatal("no dial stayed pending against a full backlog")
}

// TestDialByName: an address that is not an IP literal goes through the
// net.Dialer.
func TestDialByName(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := upstreamDialer(time.Second)
	c, err := dial(&d, net.JoinHostPort("localhost", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok {
		t.Errorf("dial by name gave %T; want the net.Dialer's *net.TCPConn", c)
	}
}
