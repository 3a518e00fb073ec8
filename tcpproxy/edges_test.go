package tcpproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/tcpproxy/proxyproto"
)

// The edges of a connection's life, on both paths (TestMain): what the
// event loops do themselves (timeouts, the PROXY policy, half-close, a
// bulk transfer past a loop's per-wake budget) and what they hand to the
// goroutine path (a hello only crypto/tls decides).

// reportingFallback is an HTTPS fallback that answers with the PROXY v2
// source it was given and the bytes that followed, until the client's
// write side ends or 300 ms pass without a byte.
func reportingFallback(t *testing.T) string {
	return listen(t, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		h, err := proxyproto.Read(br)
		if err != nil {
			_, _ = io.WriteString(c, "no proxy header")
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		rest, _ := io.ReadAll(br)
		_, _ = io.WriteString(c, "fallback from "+h.Source.Addr().String()+" got "+strconv.Quote(string(rest)))
	})
}

// sniProxy serves ServeSNI on a new listener until the test ends.
func sniProxy(t *testing.T, cfg Config, routes *Routes) (*Proxy, string) {
	t.Helper()
	p, err := newProxy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Update(routes)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.ServeSNI(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return p, ln.Addr().String()
}

// exchange sends b on a new connection to addr, half-closes, and returns
// all it reads back.
func exchange(t *testing.T, addr string, b []byte) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(defaultTestTimeout))
	_, _ = c.Write(b)
	_ = c.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(c)
	return string(got)
}

func TestSNIProxyProtocolPolicy(t *testing.T) {
	fallback := reportingFallback(t)
	backend := listen(t, func(c net.Conn) {
		defer c.Close()
		_, _ = io.WriteString(c, "backend")
	})
	reg := registry(t, balancer.Backend{Name: "pass", Endpoints: []balancer.Endpoint{endpoint(backend)}})
	routes := RoutesFrom(&model.Configuration{PassthroughBackends: []model.PassthroughBackend{{Hostname: "pass.example.com", Backend: "pass"}}})
	p, addr := sniProxy(t, Config{Picker: reg, HTTPSFallback: fallback}, routes)
	hdr := string(proxyproto.AppendV1(nil, netip.MustParseAddrPort("203.0.113.7:4000"), netip.MustParseAddrPort("192.0.2.1:443")))
	other := string(clientHello(t, "other.example.com"))
	for _, tc := range []struct {
		name   string
		policy proxyproto.Policy
		send   string
		want   string // prefix of the answer; "" for a closed connection
	}{
		{"off: the header is the client's bytes", proxyproto.Policy{}, hdr, `fallback from 127.0.0.1 got "PROXY TCP4`},
		{"trusted source", proxyproto.Policy{On: true, Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, hdr + other, "fallback from 203.0.113.7 got \"\\x16"},
		{"untrusted source keeps its own", proxyproto.Policy{On: true, Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, hdr + other, "fallback from 127.0.0.1 got \"\\x16"},
		{"a header, then a passthrough host", proxyproto.Policy{On: true}, hdr + string(clientHello(t, "pass.example.com")), "backend"},
		{"required and missing", proxyproto.Policy{On: true}, other, ""},
		{"optional and missing", proxyproto.Policy{On: true, Optional: true}, other, "fallback from 127.0.0.1 got \"\\x16"},
		{"malformed", proxyproto.Policy{On: true, Optional: true}, "PROXY TCP4 nonsense\r\n" + other, ""},
	} {
		p.SetSNIProxyProtocol(tc.policy)
		got := exchange(t, addr, []byte(tc.send))
		if tc.want == "" && got != "" || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: answered %.60q; want %q…", tc.name, got, tc.want)
		}
	}
}

// A client that sends less than a hello within HelloTimeout goes to the
// fallback with what it sent, as readClientHello gives up on it.
func TestHelloTimeoutGoesToFallback(t *testing.T) {
	fallback := reportingFallback(t)
	reg := registry(t)
	routes := RoutesFrom(&model.Configuration{PassthroughBackends: []model.PassthroughBackend{{Hostname: "pass.example.com", Backend: "pass"}}})
	_, addr := sniProxy(t, Config{Picker: reg, HTTPSFallback: fallback, HelloTimeout: 100 * time.Millisecond}, routes)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(defaultTestTimeout))
	_, _ = c.Write([]byte{22, 3})
	got, _ := io.ReadAll(c)
	if want := `fallback from 127.0.0.1 got "\x16\x03"`; string(got) != want {
		t.Errorf("answered %q; want %q", got, want)
	}
}

// A hello spread over two records is not decided by sniOfRecord: crypto/tls
// reads it (the event loop hands the connection over, with the bytes it
// read) and it reaches its passthrough host whole.
func TestUndecidedHelloStillRouted(t *testing.T) {
	backend := listen(t, func(c net.Conn) {
		defer c.Close()
		got, _ := io.ReadAll(c)
		_, _ = io.WriteString(c, "backend got "+strconv.Itoa(len(got)))
	})
	reg := registry(t, balancer.Backend{Name: "pass", Endpoints: []balancer.Endpoint{endpoint(backend)}})
	routes := RoutesFrom(&model.Configuration{PassthroughBackends: []model.PassthroughBackend{{Hostname: "pass.example.com", Backend: "pass"}}})
	_, addr := sniProxy(t, Config{Picker: reg, HTTPSFallback: reportingFallback(t)}, routes)
	msg := clientHello(t, "pass.example.com")[recordHeaderLen:]
	record := func(b []byte) []byte {
		return append([]byte{recordTypeHandshake, 3, 1, byte(len(b) >> 8), byte(len(b))}, b...)
	}
	hello := append(record(msg[:40]), record(msg[40:])...)
	if _, _, decided := sniOfRecord(hello[:recordHeaderLen+40]); decided {
		t.Fatal("sniOfRecord decides a hello over two records; the hand-over is not exercised")
	}
	if got := exchange(t, addr, hello); got != "backend got "+strconv.Itoa(len(hello)) {
		t.Errorf("answered %q; want the backend", got)
	}
}

// tcpService serves one TCP service to backend addrs until the test ends.
func tcpService(t *testing.T, cfg Config, svc model.L4Service, addrs ...string) string {
	t.Helper()
	_, addr := tcpServiceProxy(t, cfg, svc, addrs...)
	return addr
}

// tcpServiceProxy is tcpService that also returns the Proxy.
func tcpServiceProxy(t *testing.T, cfg Config, svc model.L4Service, addrs ...string) (*Proxy, string) {
	t.Helper()
	var eps []balancer.Endpoint
	for _, a := range addrs {
		eps = append(eps, endpoint(a))
	}
	cfg.Picker = registry(t, balancer.Backend{Name: svc.Backend, Endpoints: eps})
	p, err := newProxy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	svc.Port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p.Update(RoutesFrom(&model.Configuration{TCPServices: []model.L4Service{svc}}))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		p.Wait()
	})
	if err := p.SyncTCP(ctx, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	return p, "127.0.0.1:" + strconv.Itoa(svc.Port)
}

// Each direction ends on its own: the client's end of stream reaches the
// backend, whose answer still comes back.
func TestHalfClose(t *testing.T) {
	backend := listen(t, func(c net.Conn) {
		defer c.Close()
		got, _ := io.ReadAll(c)
		_, _ = io.WriteString(c, "read "+strconv.Itoa(len(got))+" bytes to the end")
	})
	addr := tcpService(t, Config{}, model.L4Service{Backend: "half"}, backend)
	if got := exchange(t, addr, []byte("twelve bytes")); got != "read 12 bytes to the end" {
		t.Errorf("answered %q", got)
	}
}

// 32 MiB each way at once, checked byte for byte: more than a loop moves
// per wake-up, through socket buffers that fill.
func TestBulkBothWays(t *testing.T) {
	const size = 32 << 20
	backend := listen(t, func(c net.Conn) {
		defer c.Close()
		h := sha256.New()
		done := make(chan struct{})
		go func() {
			_, _ = io.Copy(h, c)
			close(done)
		}()
		_, _ = io.Copy(c, io.LimitReader(rand.NewChaCha8([32]byte{1}), size))
		_ = c.(*net.TCPConn).CloseWrite()
		<-done
	})
	addr := tcpService(t, Config{}, model.L4Service{Backend: "bulk"}, backend)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(4 * defaultTestTimeout))
	sent := make(chan error, 1)
	go func() {
		_, err := io.Copy(c, io.LimitReader(rand.NewChaCha8([32]byte{2}), size))
		_ = c.(*net.TCPConn).CloseWrite()
		sent <- err
	}()
	got := sha256.New()
	n, err := io.Copy(got, c)
	if err != nil || n != size {
		t.Fatalf("read %d bytes, %v; want %d", n, err, size)
	}
	want := sha256.New()
	_, _ = io.Copy(want, io.LimitReader(rand.NewChaCha8([32]byte{1}), size))
	if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Error("the bytes from the backend arrived changed")
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// A connection with no byte either way for IdleTimeout is closed.
func TestIdleTimeoutCloses(t *testing.T) {
	backend := listen(t, func(c net.Conn) {
		defer c.Close()
		_, _ = io.Copy(c, c)
	})
	addr := tcpService(t, Config{IdleTimeout: 200 * time.Millisecond}, model.L4Service{Backend: "idle"}, backend)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(defaultTestTimeout))
	_, _ = io.WriteString(c, "x")
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n, err := c.Read(make([]byte, 1))
	if n != 0 || err == nil {
		t.Fatalf("read %d bytes, %v; want the connection closed", n, err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("closed after %v idle; want about 200ms", d)
	}
}

// Every tried peer refusing: the client is closed, after Tries attempts.
func TestAllPeersRefuse(t *testing.T) {
	var dead []string
	for range 2 {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		dead = append(dead, ln.Addr().String())
		ln.Close()
	}
	addr := tcpService(t, Config{}, model.L4Service{Backend: "dead"}, dead...)
	if got := exchange(t, addr, []byte("hello")); got != "" {
		t.Errorf("answered %q; want the connection closed", got)
	}
}

// A loop idle for longer than parkAfter waits the runtime's way; the next
// connection is served as any other.
func TestServesAfterIdle(t *testing.T) {
	backend := listen(t, func(c net.Conn) {
		defer c.Close()
		got, _ := io.ReadAll(c)
		_, _ = c.Write(got)
	})
	addr := tcpService(t, Config{}, model.L4Service{Backend: "idle-loop"}, backend)
	for i := range 2 {
		if got := exchange(t, addr, []byte("ping")); got != "ping" {
			t.Fatalf("connection %d: answered %q", i, got)
		}
		if i == 0 {
			time.Sleep(parkAfterForTest + 200*time.Millisecond)
		}
	}
}

// TestRemovedTCPServiceFreesItsPort: once SyncTCP has removed a TCP
// service, its port is closed, so it can be bound again at once (the
// loops close their copy of the socket before SyncTCP returns).
func TestRemovedTCPServiceFreesItsPort(t *testing.T) {
	backend := listen(t, func(c net.Conn) { _ = c.Close() })
	reg := registry(t, balancer.Backend{Name: "svc", Endpoints: []balancer.Endpoint{endpoint(backend)}})
	p, err := newProxy(Config{Picker: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	for i := range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		p.Update(RoutesFrom(&model.Configuration{TCPServices: []model.L4Service{{Port: port, Backend: "svc"}}}))
		if err := p.SyncTCP(ctx, "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
		p.Update(RoutesFrom(&model.Configuration{}))
		if err := p.SyncTCP(ctx, "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
		again, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("round %d: port %d right after its service was removed: %v", i, port, err)
		}
		_ = again.Close()
	}
}
