package tcpproxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
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

const defaultTestTimeout = 10 * time.Second

// selfSigned makes a certificate for name.
func selfSigned(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// listen serves handle on a loopback port until the test ends.
func listen(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	return listenOn(t, "127.0.0.1", handle)
}

// listenOn serves handle on a free port of ip until the test ends.
func listenOn(t *testing.T, ip string, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if outOfResources(err) {
					// TestAcceptOutOfDescriptors: the backend waits too.
					time.Sleep(10 * time.Millisecond)
					continue
				}
				return
			}
			go handle(c)
		}
	}()
	return ln.Addr().String()
}

func registry(t *testing.T, backends ...balancer.Backend) *balancer.Registry {
	t.Helper()
	r := balancer.NewRegistry(balancer.Config{})
	if err := r.Sync(backends); err != nil {
		t.Fatal(err)
	}
	return r
}

func endpoint(addr string) balancer.Endpoint {
	h, p, _ := net.SplitHostPort(addr)
	return balancer.Endpoint{Address: h, Port: balancer.PortString(p)}
}

func TestSNIPassthroughAndFallback(t *testing.T) {
	// A real TLS backend answering with its own certificate.
	backendCert := selfSigned(t, "pass.example.com")
	tlsBackend := listen(t, func(c net.Conn) {
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{backendCert}})
		defer tc.Close()
		line, _ := bufio.NewReader(tc).ReadString('\n')
		_, _ = io.WriteString(tc, "backend got "+line)
	})
	// The local HTTPS data plane: reads the PROXY v2 header and reports it.
	fallback := listen(t, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		h, err := proxyproto.Read(br)
		if err != nil {
			_, _ = io.WriteString(c, "no proxy header: "+err.Error())
			return
		}
		rest, _ := br.Peek(5)
		_, _ = io.WriteString(c, "fallback from "+h.Source.Addr().String()+" first bytes "+strconv.Itoa(int(rest[0])))
	})
	reg := registry(t, balancer.Backend{Name: "pass", Endpoints: []balancer.Endpoint{endpoint(tlsBackend)}})
	p, err := newProxy(Config{Picker: reg, HTTPSFallback: fallback})
	if err != nil {
		t.Fatal(err)
	}
	p.Update(RoutesFrom(&model.Configuration{PassthroughBackends: []model.PassthroughBackend{{Hostname: "pass.example.com", Backend: "pass"}, {Hostname: "*.wild.example.com", Backend: "pass"}}}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.ServeSNI(ctx, ln) }()

	pool := x509.NewCertPool()
	leaf, _ := x509.ParseCertificate(backendCert.Certificate[0])
	pool.AddCert(leaf)
	for _, sni := range []string{"pass.example.com", "a.wild.example.com"} {
		conf := &tls.Config{ServerName: sni, RootCAs: pool}
		if sni != "pass.example.com" {
			conf.InsecureSkipVerify = true // the backend's cert names pass.example.com only
		}
		c, err := tls.Dial("tcp", ln.Addr().String(), conf)
		if err != nil {
			t.Fatalf("%s: TLS through passthrough: %v", sni, err)
		}
		if cn := c.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "pass.example.com" {
			t.Errorf("%s: client saw certificate %q; want the backend's", sni, cn)
		}
		_, _ = io.WriteString(c, "hello\n")
		got, _ := io.ReadAll(c)
		if string(got) != "backend got hello\n" {
			t.Errorf("%s: got %q", sni, got)
		}
		c.Close()
	}

	// Another SNI reaches the fallback with the client's address and the
	// untouched ClientHello (first byte 22, a TLS handshake record).
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = raw.Write(clientHello(t, "other.example.com"))
	got, _ := io.ReadAll(raw)
	if !strings.HasPrefix(string(got), "fallback from 127.0.0.1 first bytes 22") {
		t.Errorf("fallback answered %q", got)
	}
	raw.Close()

	// Not TLS at all: the fallback too.
	plain, _ := net.Dial("tcp", ln.Addr().String())
	_, _ = io.WriteString(plain, "GET / HTTP/1.0\r\n\r\n")
	got, _ = io.ReadAll(plain)
	if !strings.HasPrefix(string(got), "fallback from 127.0.0.1") {
		t.Errorf("plain text answered %q", got)
	}

	// With no passthrough host left, a passthrough SNI reaches the
	// fallback too (without the hello being awaited), hello intact.
	p.Update(RoutesFrom(&model.Configuration{}))
	raw, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = raw.Write(clientHello(t, "pass.example.com"))
	got, _ = io.ReadAll(raw)
	if !strings.HasPrefix(string(got), "fallback from 127.0.0.1 first bytes 22") {
		t.Errorf("without passthrough hosts, fallback answered %q", got)
	}
	raw.Close()
}

func TestTCPServices(t *testing.T) {
	echo := func(name string) string {
		return listen(t, func(c net.Conn) {
			defer c.Close()
			br := bufio.NewReader(c)
			prefix := ""
			if b, _ := br.Peek(1); len(b) == 1 && b[0] == 'P' {
				h, err := proxyproto.Read(br)
				if err != nil {
					return
				}
				prefix = "[from " + h.Source.Addr().String() + "] "
			}
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				_, _ = io.WriteString(c, prefix+name+": "+line)
			}
		})
	}
	a, b := echo("a"), echo("b")
	dead := func() string {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}()
	reg := registry(t,
		balancer.Backend{Name: "tcp-ns-echo-7", Endpoints: []balancer.Endpoint{endpoint(a), endpoint(b)}},
		balancer.Backend{Name: "tcp-ns-retry-7", Endpoints: []balancer.Endpoint{endpoint(dead), endpoint(a)}, LoadBalance: "ewma"},
	)
	p, _ := newProxy(Config{Picker: reg})
	ports := [3]int{}
	for i := range ports {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	cfg := &model.Configuration{TCPServices: []model.L4Service{
		{Port: ports[0], Backend: "tcp-ns-echo-7"},
		{Port: ports[1], Backend: "tcp-ns-retry-7"},
		{Port: ports[2], Backend: "tcp-ns-echo-7", DecodeProxyProtocol: true, EncodeProxyProtocol: true},
	}}
	p.Update(RoutesFrom(cfg))
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := p.SyncTCP(ctx, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	talk := func(port int, preamble, line string) (net.Conn, string) {
		t.Helper()
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, preamble+line+"\n")
		got, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatalf("port %d: %v", port, err)
		}
		return c, strings.TrimSpace(got)
	}
	seen := map[string]int{}
	for range 4 {
		c, got := talk(ports[0], "", "ping")
		seen[got]++
		c.Close()
	}
	if seen["a: ping"] != 2 || seen["b: ping"] != 2 {
		t.Errorf("round robin over TCP: %v", seen)
	}
	for range 3 {
		c, got := talk(ports[1], "", "x")
		if got != "a: x" {
			t.Errorf("retry after connect failure answered %q", got)
		}
		c.Close()
	}
	hdr := string(proxyproto.AppendV1(nil, netip.MustParseAddrPort("203.0.113.7:4000"), netip.MustParseAddrPort("127.0.0.1:1")))
	c, got := talk(ports[2], hdr, "hi")
	if !strings.HasPrefix(got, "[from 203.0.113.7] ") {
		t.Errorf("PROXY decode+encode: upstream saw %q", got)
	}
	c.Close()
	bad, _ := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(ports[2]))
	_, _ = io.WriteString(bad, "PROXY TCP4 nonsense\r\n")
	if n, _ := bad.Read(make([]byte, 10)); n != 0 {
		t.Error("a malformed PROXY header did not close the connection")
	}
	bad.Close()

	// An established connection survives removing its service and its
	// endpoints; new connections to the removed port are refused.
	live, got := talk(ports[0], "", "before")
	_ = got
	p.Update(RoutesFrom(&model.Configuration{}))
	if err := p.SyncTCP(ctx, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if err := reg.Sync(nil); err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(live, "after\n")
	if line, err := bufio.NewReader(live).ReadString('\n'); err != nil || !strings.HasSuffix(strings.TrimSpace(line), ": after") {
		t.Errorf("established connection after the swap: %q, %v", line, err)
	}
	live.Close()
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(ports[0]), time.Second); err == nil {
		c.Close()
		t.Error("a removed TCP service still accepts connections")
	}
}

// clientHello returns the bytes of a real TLS ClientHello for sni.
func clientHello(t *testing.T, sni string) []byte {
	t.Helper()
	client, server := net.Pipe()
	go func() {
		_ = tls.Client(client, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	}()
	br := bufio.NewReader(server)
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(br, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatal(err)
	}
	server.Close()
	client.Close()
	return append(hdr, body...)
}

// FuzzClientHello: any bytes are either a hello or not; never a panic, and
// the bytes stay buffered for replay.
func FuzzClientHello(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00})
	f.Add(clientHello(&testing.T{}, "seed.example.com"))
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(strings.NewReader(string(in)), maxHello)
		_, _ = readClientHello(br)
		rest, _ := io.ReadAll(br)
		if string(rest) != string(in) {
			t.Fatal("peeking consumed bytes")
		}
	})
}
