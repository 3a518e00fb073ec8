package main

import (
	"context"
	"net"
	"syscall"
	"testing"
)

// Client connections have no TCP keep-alive probes, as nginx's default
// listen; Go's net.Listen would turn them on.
func TestClientListenNoKeepAlive(t *testing.T) {
	ln, err := listenClients(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for _, c := range []struct {
		name string
		ln   net.Listener
		want int
	}{{"listenClients", ln, 0}, {"net.Listen (Go's default, for contrast)", plain, 1}} {
		d, err := net.Dial("tcp", c.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		accepted, err := c.ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		rc, err := accepted.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		v := -1
		var gerr error
		if err := rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) }); err != nil || gerr != nil {
			t.Fatal(err, gerr)
		}
		if (v != 0) != (c.want != 0) {
			t.Errorf("%s: accepted connection SO_KEEPALIVE = %d; want %d", c.name, v, c.want)
		}
		_ = accepted.Close()
		_ = d.Close()
	}
}
