package tcpproxy

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard-proxy/switchyard/balancer"
)

// udpEcho answers each datagram with name + ": " + datagram.
func udpEcho(t *testing.T, ip, name string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte(name+": "), buf[:n]...), from)
		}
	}()
	return pc.LocalAddr().String()
}

func TestUDPService(t *testing.T) {
	a, b := udpEcho(t, "127.0.0.2", "a"), udpEcho(t, "127.0.0.3", "b")
	reg := registry(t, balancer.Backend{Name: "udp-ns-dns-53", Endpoints: []balancer.Endpoint{endpoint(a), endpoint(b)}})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	served := make(chan error, 1)
	go func() { served <- ServeUDP(ctx, pc, UDPConfig{Picker: reg, Backend: "udp-ns-dns-53"}) }()

	ask := func(c net.Conn, msg string) string {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(defaultTestTimeout))
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 2048)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("reply to %q: %v", msg, err)
		}
		return string(buf[:n])
	}
	// Two clients: each keeps its session's peer; round robin gives them
	// different peers.
	c1, _ := net.Dial("udp", pc.LocalAddr().String())
	c2, _ := net.Dial("udp", pc.LocalAddr().String())
	defer c1.Close()
	defer c2.Close()
	got := []string{ask(c1, "1"), ask(c2, "1"), ask(c1, "2"), ask(c2, "2"), ask(c1, "3")}
	first := got[0][:1]
	other := map[string]string{"a": "b", "b": "a"}[first]
	want := []string{first + ": 1", other + ": 1", first + ": 2", other + ": 2", first + ": 3"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("UDP sessions (-want +got):\n%s", diff)
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("ServeUDP: %v", err)
	}
}
