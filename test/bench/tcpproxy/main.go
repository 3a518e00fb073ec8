// Command tcpproxy measures SSL passthrough through package tcpproxy against
// a direct connection to the same TLS backend, in the same run: throughput
// of 1 MiB transfers and the added connection-setup (TLS handshake) latency.
// Direct and proxied samples are interleaved so machine load hits both alike.
// It prints ratios; test/bench/tcpproxy.sh runs it.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"slices"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/tcpproxy"
)

const sni = "bench.example.com"

func main() {
	rounds := flag.Int("rounds", 200, "interleaved samples per path")
	size := flag.Int("size", 1<<20, "bytes per transfer")
	flag.Parse()
	if err := run(*rounds, *size); err != nil {
		log.Fatal(err)
	}
}

func run(rounds, size int) error {
	cert, err := selfSigned()
	if err != nil {
		return err
	}
	payload := make([]byte, size)
	// The TLS backend on 127.0.0.2: after the handshake it reads one byte;
	// 'd' asks for the payload, anything else closes.
	bln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return fmt.Errorf("listen backend: %w", err)
	}
	defer bln.Close()
	go serveBackend(bln, cert, payload)

	reg := balancer.NewRegistry(balancer.Config{})
	h, p, _ := net.SplitHostPort(bln.Addr().String())
	if err := reg.Sync([]balancer.Backend{{Name: "bench", Endpoints: []balancer.Endpoint{{Address: h, Port: balancer.PortString(p)}}}}); err != nil {
		return fmt.Errorf("sync balancer: %w", err)
	}
	px, err := tcpproxy.New(tcpproxy.Config{Picker: reg})
	if err != nil {
		return err
	}
	px.Update(tcpproxy.RoutesFrom(&model.Configuration{PassthroughBackends: []model.PassthroughBackend{{Hostname: sni, Backend: "bench"}}}))
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen proxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = px.ServeSNI(ctx, pln) }()

	pool := x509.NewCertPool()
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	pool.AddCert(leaf)
	conf := &tls.Config{ServerName: sni, RootCAs: pool, ClientSessionCache: nil}
	paths := []struct {
		name string
		addr string
	}{{"direct", bln.Addr().String()}, {"passthrough", pln.Addr().String()}}

	setup := map[string][]time.Duration{}
	xfer := map[string][]time.Duration{}
	for i := 0; i < rounds+10; i++ {
		for _, pth := range paths {
			s, x, err := sample(pth.addr, conf, size)
			if err != nil {
				return fmt.Errorf("%s: %w", pth.name, err)
			}
			if i >= 10 { // warm-up
				setup[pth.name] = append(setup[pth.name], s)
				xfer[pth.name] = append(xfer[pth.name], x)
			}
		}
	}
	med := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	sd, sp := med(setup["direct"]), med(setup["passthrough"])
	xd, xp := med(xfer["direct"]), med(xfer["passthrough"])
	mibps := func(d time.Duration) float64 { return float64(size) / (1 << 20) / d.Seconds() }
	fmt.Printf("rounds=%d size=%d\n", rounds, size)
	fmt.Printf("setup p50: direct %v passthrough %v added %v (target <= 100us)\n", sd, sp, sp-sd)
	fmt.Printf("transfer p50: direct %v (%.0f MiB/s) passthrough %v (%.0f MiB/s)\n", xd, mibps(xd), xp, mibps(xp))
	fmt.Printf("throughput ratio passthrough/direct: %.2f (target >= 0.90)\n", float64(xd)/float64(xp))
	return nil
}

// sample dials addr, completes the TLS handshake (setup) and then downloads
// size bytes (transfer, from request to last byte).
func sample(addr string, conf *tls.Config, size int) (setup, transfer time.Duration, err error) {
	start := time.Now()
	c, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		return 0, 0, fmt.Errorf("handshake: %w", err)
	}
	defer c.Close()
	setup = time.Since(start)
	start = time.Now()
	if _, err := c.Write([]byte{'d'}); err != nil {
		return 0, 0, fmt.Errorf("request: %w", err)
	}
	n, err := io.Copy(io.Discard, c)
	if err != nil || n != int64(size) {
		return 0, 0, fmt.Errorf("download: got %d bytes: %v", n, err)
	}
	return setup, time.Since(start), nil
}

func serveBackend(ln net.Listener, cert tls.Certificate, payload []byte) {
	conf := &tls.Config{Certificates: []tls.Certificate{cert}}
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			tc := tls.Server(c, conf)
			defer tc.Close()
			b := make([]byte, 1)
			if _, err := io.ReadFull(tc, b); err != nil || b[0] != 'd' {
				return
			}
			_, _ = tc.Write(payload)
		}()
	}
}

func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: sni}, DNSNames: []string{sni},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("create certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
