package tcpproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// helloBytes captures a real TLS ClientHello for sni.
func helloBytes(b *testing.B, sni string) []byte {
	b.Helper()
	client, server := net.Pipe()
	go func() { _ = tls.Client(client, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake() }()
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(server, hdr); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(server, body); err != nil {
		b.Fatal(err)
	}
	server.Close()
	client.Close()
	return append(hdr, body...)
}

// BenchmarkReadClientHello is the per-connection cost of finding the SNI.
func BenchmarkReadClientHello(b *testing.B) {
	hello := helloBytes(b, "bench.example.com")
	rd := bytes.NewReader(hello)
	br := bufio.NewReaderSize(rd, maxHello)
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(hello)
		br.Reset(rd)
		if sni, ok := readClientHello(br); !ok || sni != "bench.example.com" {
			b.Fatalf("got %q, %v", sni, ok)
		}
	}
}

// BenchmarkTCPService1MiB downloads 1 MiB per connection from a loopback
// server, directly and through a TCP service (the same code path as
// passthrough after the hello) with a goroutine per connection and on an
// event loop, so the sub-benchmarks give the ratios.
func BenchmarkTCPService1MiB(b *testing.B) {
	payload := make([]byte, 1<<20)
	srv, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	go func() {
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = c.Write(payload); c.Close() }()
		}
	}()
	h, port, _ := net.SplitHostPort(srv.Addr().String())
	reg := balancer.NewRegistry(balancer.Config{})
	if err := reg.Sync([]balancer.Backend{{Name: "b", Endpoints: []balancer.Endpoint{{Address: h, Port: balancer.PortString(port)}}}}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	service := func(loops int) string {
		p, err := New(Config{Picker: reg, EventLoops: loops})
		if err != nil {
			b.Fatal(err)
		}
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		svcPort := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		p.Update(RoutesFrom(&model.Configuration{TCPServices: []model.L4Service{{Port: svcPort, Backend: "b"}}}))
		if err := p.SyncTCP(ctx, "127.0.0.1"); err != nil {
			b.Fatal(err)
		}
		return "127.0.0.1:" + strconv.Itoa(svcPort)
	}
	for _, tc := range []struct{ name, addr string }{
		{"direct", srv.Addr().String()},
		{"proxied", service(0)},
		{"proxied-event-loop", service(1)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				c, err := net.Dial("tcp", tc.addr)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, c)
				c.Close()
				if err != nil || n != int64(len(payload)) {
					b.Fatalf("got %d bytes, %v", n, err)
				}
			}
		})
	}
}
