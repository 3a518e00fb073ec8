// Command tcpproxy measures SSL passthrough through package tcpproxy against
// a direct connection to the same TLS backend, in the same run: throughput
// of 1 MiB transfers and the added connection-setup (TLS handshake) latency.
// Direct and proxied samples are interleaved so machine load hits both alike.
// It prints ratios; test/bench/tcpproxy.sh runs it.
//
// The proxy runs in a child process (this binary with -role proxy) so it has
// its own Go runtime, as in production, instead of sharing the scheduler and
// GC of the client and backend. With -proxy-cpu N the child is pinned to CPU
// N (taskset), and the shell script pins this process (client and backend)
// to the other CPU, for both paths alike.
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
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/tcpproxy"
)

const sni = "bench.example.com"

func main() {
	rounds := flag.Int("rounds", 200, "interleaved samples per path")
	size := flag.Int("size", 1<<20, "bytes per transfer")
	role := flag.String("role", "bench", "bench, or proxy (the child process)")
	backend := flag.String("backend", "", "proxy role: the TLS backend address")
	proxyCPU := flag.String("proxy-cpu", "", "pin the proxy process to this CPU list (taskset -c)")
	cpuprofile := flag.String("cpuprofile", "", "proxy role: write a CPU profile here")
	flag.Parse()
	var err error
	switch *role {
	case "proxy":
		err = serveProxy(*backend, *cpuprofile)
	case "forward":
		err = serveForward(*backend)
	default:
		err = run(*rounds, *size, *proxyCPU, *cpuprofile)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// serveProxy is the child: tcpproxy's SNI router on 127.0.0.1 with backend
// as the passthrough target of sni. It prints its address, then serves
// until stdin closes or SIGTERM.
func serveProxy(backend, cpuprofile string) error {
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return fmt.Errorf("create profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("start profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	reg := balancer.NewRegistry(balancer.Config{})
	h, p, _ := net.SplitHostPort(backend)
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop() }()
	fmt.Println(pln.Addr().String())
	return px.ServeSNI(ctx, pln)
}

// serveForward is the reference child: the least a Go L4 proxy can do (accept,
// dial, io.Copy both ways, no SNI peek, no balancer), to separate the cost
// of the extra process and loopback hop from tcpproxy's own.
func serveForward(backend string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen forward: %w", err)
	}
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); _ = ln.Close() }()
	fmt.Println(ln.Addr().String())
	for {
		c, err := ln.Accept()
		if err != nil {
			return nil
		}
		go func() {
			defer c.Close()
			up, err := net.Dial("tcp", backend)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{})
			go func() {
				_, _ = io.Copy(c, up)
				_ = c.(*net.TCPConn).CloseWrite()
				close(done)
			}()
			_, _ = io.Copy(up, c)
			_ = up.(*net.TCPConn).CloseWrite()
			<-done
		}()
	}
}

// startProxy runs this binary with -role proxy (pinned with taskset when cpu
// is set) and returns its listen address and a function that stops it.
func startProxy(role, backend, cpu, cpuprofile string) (string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, fmt.Errorf("find own binary: %w", err)
	}
	args := []string{self, "-role", role, "-backend", backend, "-cpuprofile", cpuprofile}
	if cpu != "" {
		args = append([]string{"taskset", "-c", cpu}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, fmt.Errorf("proxy stdin: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, fmt.Errorf("proxy stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start proxy: %w", err)
	}
	line := make([]byte, 64)
	n, err := out.Read(line)
	if err != nil {
		_ = cmd.Process.Kill()
		return "", nil, fmt.Errorf("read proxy address: %w", err)
	}
	fmt.Printf("%s pid %d\n", role, cmd.Process.Pid)
	return strings.TrimSpace(string(line[:n])), func() { _ = stdin.Close(); _ = cmd.Wait() }, nil
}

func run(rounds, size int, proxyCPU, cpuprofile string) error {
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

	paddr, stopProxy, err := startProxy("proxy", bln.Addr().String(), proxyCPU, cpuprofile)
	if err != nil {
		return err
	}
	defer stopProxy()
	faddr, stopForward, err := startProxy("forward", bln.Addr().String(), proxyCPU, "")
	if err != nil {
		return err
	}
	defer stopForward()

	pool := x509.NewCertPool()
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	pool.AddCert(leaf)
	conf := &tls.Config{ServerName: sni, RootCAs: pool, ClientSessionCache: nil}
	paths := []struct {
		name string
		addr string
	}{{"direct", bln.Addr().String()}, {"passthrough", paddr}, {"forward", faddr}}

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
	sf, xf := med(setup["forward"]), med(xfer["forward"])
	mibps := func(d time.Duration) float64 { return float64(size) / (1 << 20) / d.Seconds() }
	fmt.Printf("rounds=%d size=%d proxy-cpu=%q\n", rounds, size, proxyCPU)
	fmt.Printf("setup p50: direct %v passthrough %v added %v (target <= 100us)\n", sd, sp, sp-sd)
	fmt.Printf("transfer p50: direct %v (%.0f MiB/s) passthrough %v (%.0f MiB/s)\n", xd, mibps(xd), xp, mibps(xp))
	fmt.Printf("throughput ratio passthrough/direct: %.2f (target >= 0.90)\n", float64(xd)/float64(xp))
	fmt.Printf("reference forward (plain io.Copy child): setup added %v, throughput ratio %.2f\n", sf-sd, float64(xd)/float64(xf))
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
