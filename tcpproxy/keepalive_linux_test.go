package tcpproxy

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"
)

// keepAliveOf reads SO_KEEPALIVE of c.
func keepAliveOf(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	v := -1
	if err := rc.Control(func(fd uintptr) {
		v, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
	}); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Issue 23: upstream connections and connections accepted on TCP service
// ports carry no TCP keep-alive, as in nginx's stream module by default.
func TestNoTCPKeepAlive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	ln, err := tcpServiceListen.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := upstreamDialer(time.Second)
	up, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer accepted.Close()
	fast, err := dial(&d, ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	fastAccepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer fastAccepted.Close()
	for name, c := range map[string]net.Conn{"upstream (net.Dialer)": up, "upstream (dial)": fast, "TCP service (accepted)": accepted} {
		if got := keepAliveOf(t, c); got != 0 {
			t.Errorf("%s: SO_KEEPALIVE = %d; want 0", name, got)
		}
	}
	// Go's defaults, for contrast: the test would pass vacuously otherwise.
	plain, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if got := keepAliveOf(t, plain); got == 0 {
		t.Errorf("net.Dial: SO_KEEPALIVE = 0; want Go's default (on)")
	}
}
