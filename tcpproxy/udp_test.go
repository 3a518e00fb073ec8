package tcpproxy

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
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

// freeUDPPort returns a UDP port on 127.0.0.1 that was free a moment ago.
func freeUDPPort(t *testing.T) int {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc.Close() }()
	return pc.LocalAddr().(*net.UDPAddr).Port
}

// udpAsk sends msg on c and returns the reply.
func udpAsk(t *testing.T, c net.Conn, msg string) string {
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

// TestSyncUDP: a --udp-services-configmap service through Proxy.SyncUDP.
// Sessions keep their peer while its endpoint is removed and while routes
// are updated; new sessions follow the change; removing the port frees it.
func TestSyncUDP(t *testing.T) {
	addrs := map[string]string{"a": udpEcho(t, "127.0.0.2", "a"), "b": udpEcho(t, "127.0.0.3", "b")}
	backend := func(names ...string) []balancer.Backend {
		be := balancer.Backend{Name: "udp-ns-dns-53"}
		for _, n := range names {
			be.Endpoints = append(be.Endpoints, endpoint(addrs[n]))
		}
		return []balancer.Backend{be, {Name: "udp-ns-other-53", Endpoints: []balancer.Endpoint{endpoint(addrs["b"])}}}
	}
	reg := balancer.NewRegistry(balancer.Config{})
	if err := reg.Sync(backend("a", "b")); err != nil {
		t.Fatal(err)
	}
	prom := prometheus.NewRegistry()
	p, err := newProxy(Config{Picker: reg, Registerer: prom})
	if err != nil {
		t.Fatal(err)
	}
	port := freeUDPPort(t)
	svc := model.L4Service{Port: port, Backend: "udp-ns-dns-53"}
	p.Update(RoutesFrom(&model.Configuration{UDPServices: []model.L4Service{svc}}))
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := p.SyncUDP(ctx, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("udp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	live := dial()
	got := udpAsk(t, live, "one")
	drained := got[:1]
	kept := map[string]string{"a": "b", "b": "a"}[drained]
	if err := reg.Sync(backend(kept)); err != nil {
		t.Fatal(err)
	}
	// Sync again with unchanged routes: the port stays open, sessions live.
	if err := p.SyncUDP(ctx, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if got := udpAsk(t, live, "two"); got != drained+": two" {
		t.Errorf("established session after removing its endpoint: %q; want %q", got, drained+": two")
	}
	for i := range 3 {
		if got := udpAsk(t, dial(), "new"); got != kept+": new" {
			t.Errorf("new session %d: %q; want %q", i, got, kept+": new")
		}
	}
	// Point the port at another backend: new sessions use it, the
	// established one keeps its peer.
	svc.Backend = "udp-ns-other-53"
	p.Update(RoutesFrom(&model.Configuration{UDPServices: []model.L4Service{svc}}))
	if err := p.SyncUDP(ctx, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if got := udpAsk(t, dial(), "moved"); got != "b: moved" {
		t.Errorf("new session after the backend changed: %q; want %q", got, "b: moved")
	}
	if got := udpAsk(t, live, "three"); got != drained+": three" {
		t.Errorf("established session after the backend changed: %q; want %q", got, drained+": three")
	}
	// Removing the service closes its port.
	p.Update(RoutesFrom(&model.Configuration{}))
	if err := p.SyncUDP(ctx, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(defaultTestTimeout)
	for {
		pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			_ = pc.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("port of the removed UDP service still bound: %v", err)
		}
		runtime.Gosched()
	}
	p.Wait() // every session counted once it ended
	conns := gathered(t, prom)
	if got, want := conns["switchyard_tcpproxy_connections_total{service=udp-ns-dns-53}"], 4.0; got != want {
		t.Errorf("udp-ns-dns-53 sessions: got %v; want %v", got, want)
	}
	if got, want := conns["switchyard_tcpproxy_connections_total{service=udp-ns-other-53}"], 1.0; got != want {
		t.Errorf("udp-ns-other-53 sessions: got %v; want %v", got, want)
	}
	// live sent "one", "two", "three" (11 bytes) and got them back with
	// a 3-byte prefix each; three sessions sent "new" (3 bytes).
	if got, want := conns["switchyard_tcpproxy_bytes_total{direction=upstream,service=udp-ns-dns-53}"], 11.0+3*3; got != want {
		t.Errorf("udp-ns-dns-53 upstream bytes: got %v; want %v", got, want)
	}
	if got, want := conns["switchyard_tcpproxy_bytes_total{direction=downstream,service=udp-ns-dns-53}"], 11.0+3*3+6*3; got != want {
		t.Errorf("udp-ns-dns-53 downstream bytes: got %v; want %v", got, want)
	}
}

// TestUDPSessionIdleTimeout: a session with no datagram for IdleTimeout
// ends (and is counted); the same client address then starts a new one.
func TestUDPSessionIdleTimeout(t *testing.T) {
	a := udpEcho(t, "127.0.0.2", "a")
	reg := registry(t, balancer.Backend{Name: "udp-ns-dns-53", Endpoints: []balancer.Endpoint{endpoint(a)}})
	prom := prometheus.NewRegistry()
	p, err := newProxy(Config{Picker: reg, Registerer: prom, IdleTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	port := freeUDPPort(t)
	p.Update(RoutesFrom(&model.Configuration{UDPServices: []model.L4Service{{Port: port, Backend: "udp-ns-dns-53"}}}))
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := p.SyncUDP(ctx, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("udp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sessions := func() float64 {
		return gathered(t, prom)["switchyard_tcpproxy_connections_total{service=udp-ns-dns-53}"]
	}
	if got := udpAsk(t, c, "x"); got != "a: x" {
		t.Fatalf("first datagram: %q", got)
	}
	p.Wait() // returns once the idle session has ended
	if n := sessions(); n != 1 {
		t.Errorf("sessions after idling out: %v; want 1", n)
	}
	if got := udpAsk(t, c, "y"); got != "a: y" {
		t.Fatalf("datagram after the session idled out: %q", got)
	}
	p.Wait()
	if n := sessions(); n != 2 {
		t.Errorf("sessions after the second idled out: %v; want 2", n)
	}
}

// TestUDPDeadPeerRetried: with one of three peers dead (its port closed: the
// kernel answers ICMP port unreachable, as for a killed endpoint), every
// new session gets its answer: a peer that refuses a session's first
// datagram is replaced by the next pick and the datagram sent again, within
// udpTries, and the refusal counts as a failure of that peer.
func TestUDPDeadPeerRetried(t *testing.T) {
	a, b := udpEcho(t, "127.0.0.2", "a"), udpEcho(t, "127.0.0.3", "b")
	deadPC, err := net.ListenPacket("udp", "127.0.0.4:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := deadPC.LocalAddr().String()
	_ = deadPC.Close()
	reg := registry(t, balancer.Backend{Name: "udp-ns-dns-53", Endpoints: []balancer.Endpoint{endpoint(a), endpoint(b), endpoint(dead)}})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	go func() { _ = ServeUDP(ctx, pc, UDPConfig{Picker: reg, Backend: "udp-ns-dns-53"}) }()

	seen := map[string]int{}
	for i := range 30 {
		c, err := net.Dial("udp", pc.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		got := udpAsk(t, c, fmt.Sprint(i))
		seen[got[:1]]++
		_ = c.Close()
	}
	if seen["a"]+seen["b"] != 30 || seen["a"] == 0 || seen["b"] == 0 {
		t.Errorf("30 new sessions answered by %v; want all, by both living peers", seen)
	}
	var failures uint64
	for _, be := range reg.Backends() {
		for _, ep := range be.Endpoints {
			if ep.Address == dead {
				failures = ep.Failures
			}
		}
	}
	if failures == 0 {
		t.Errorf("the dead peer's refusals were not counted as failures")
	}
}
