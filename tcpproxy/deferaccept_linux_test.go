package tcpproxy

import (
	"context"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// deferAcceptOn reads TCP_DEFER_ACCEPT back from a duplicate of a TCP
// listener's socket (the event loops close the listener they are given).
func deferAcceptOn(t *testing.T, ln *os.File) bool {
	t.Helper()
	rc, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		v, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return v > 0
}

// Issue 7: the SNI listener defers accept to the ClientHello while a
// passthrough host exists, and not when everything goes to the fallback.
func TestDeferAcceptFollowsPassthrough(t *testing.T) {
	backend := listen(t, func(c net.Conn) {
		defer c.Close()
		_, _ = io.WriteString(c, "backend")
	})
	fallback := listen(t, func(c net.Conn) { _ = c.Close() })
	p, err := newProxy(Config{Picker: registry(t, balancer.Backend{Name: "pass", Endpoints: []balancer.Endpoint{endpoint(backend)}}), HTTPSFallback: fallback})
	if err != nil {
		t.Fatal(err)
	}
	withHost := RoutesFrom(&model.Configuration{PassthroughBackends: []model.PassthroughBackend{{Hostname: "pass.example.com", Backend: "pass"}}})
	p.Update(withHost)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sock, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	done := make(chan struct{})
	go func() { _ = p.ServeSNI(ctx, ln); close(done) }()
	defer func() { cancel(); <-done }()

	// A routed connection proves ServeSNI is accepting, so it has set the
	// option; a connected client that has sent its hello is accepted.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write(clientHello(t, "pass.example.com"))
	got, _ := io.ReadAll(c)
	c.Close()
	if string(got) != "backend" {
		t.Fatalf("got %q; want the backend's answer", got)
	}
	for _, tc := range []struct {
		name   string
		routes *Routes
		want   bool
	}{
		{"passthrough host", withHost, true},
		{"no passthrough host", RoutesFrom(&model.Configuration{}), false},
		{"passthrough host again", withHost, true},
	} {
		p.Update(tc.routes)
		if got := deferAcceptOn(t, sock); got != tc.want {
			t.Errorf("%s: TCP_DEFER_ACCEPT on = %v; want %v", tc.name, got, tc.want)
		}
	}
}
