// Command tcpproxy measures Switchyard's L4 paths (package tcpproxy: SSL
// passthrough routed by SNI, TCP services, PROXY protocol) against the L4
// proxies users would run instead, HAProxy (mode tcp, req.ssl_sni) and
// nginx's stream module (ssl_preread), and against a direct connection to
// the same TLS backend, all in the same run (issues 7 and 23). A plain
// accept-dial-io.Copy forwarder is measured alongside as the floor of any
// extra process hop; -epoll-raw and -cforward add a bare event-loop relay,
// in Go on raw system calls and the same in C (test/bench/cforward), the
// floor of an event-loop design with and without a Go runtime.
// test/bench/tcpproxy.sh runs it and prints the tables.
//
// Method:
//   - client (this process), backend, and every proxy are separate processes
//     (Switchyard's tcpproxy paths and the forwarder are this binary
//     re-executed with -role; with -switchyard, `switchyard controller`
//     itself, the product binary in manifests mode, serves one more path per
//     class from a process of its own; HAProxy and nginx are the Debian
//     packages' binaries with a generated configuration), one proxy process
//     per path, so every path
//     has the same client and backend and differs only by the hop in
//     between, and each proxy's CPU time is its own;
//   - each round takes one sample of every path in a fresh random order, so
//     load from other processes on the machine hits all paths alike; the
//     first -warmup rounds are dropped;
//   - a sample is one connection: TCP connect + TLS handshake (setup), one
//     byte there and back (RTT, what the hop adds on an established
//     connection), then one request byte and -size bytes back (transfer);
//     after the connection rounds, -big-rounds rounds of one connection per
//     path that downloads -big bytes (1 GiB);
//   - -handshake short (the default) resumes a TLS 1.3 session with X25519,
//     so the handshake is short and the same on every path and what the hop
//     adds is not buried under the handshake's own crypto; -handshake full
//     is a full handshake with Go's defaults;
//   - figures are medians (setup also p99): added = quantile(path) -
//     quantile(direct); throughput ratio = median(direct transfer) /
//     median(path transfer);
//   - CPU of each proxy is the sum of /proc/<pid>/task/*/schedstat run time
//     over the proxy's processes (nginx: master and workers), read before
//     and after each phase: per connection over the connection rounds, per
//     GiB over the 1 GiB rounds;
//   - -pin runs every proxy under taskset -c 1 with one thread of work
//     (GOMAXPROCS=1, HAProxy nbthread 1, nginx worker_processes 1); the
//     caller runs this process (client, backend) under taskset -c 0.
//     Unpinned, each proxy gets 2 (Go's default on 2 CPUs, nbthread 2,
//     worker_processes 2);
//   - PROXY protocol paths send the header to a second backend listener
//     that parses and strips it before the TLS handshake: Switchyard's SNI
//     listener sending an unrouted host to its HTTPS fallback with PROXY v2
//     and a TCP service with EncodeProxyProtocol (v1, as ingress-nginx),
//     HAProxy send-proxy-v2 / send-proxy, nginx proxy_protocol on (v1,
//     the only version nginx sends).
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/tcpproxy"
	"github.com/switchyard-proxy/switchyard/tcpproxy/proxyproto"
)

const sni = "bench.example.com"

func main() {
	o := options{}
	flag.IntVar(&o.rounds, "rounds", 300, "interleaved connection samples per path")
	flag.IntVar(&o.warmup, "warmup", 20, "rounds dropped before measuring")
	flag.IntVar(&o.size, "size", 1<<20, "bytes per transfer of the connection rounds")
	flag.Int64Var(&o.big, "big", 1<<30, "bytes per transfer of the big rounds")
	flag.IntVar(&o.bigRounds, "big-rounds", 2, "interleaved big transfers per path; 0 skips them")
	flag.IntVar(&o.parallel, "parallel", 1, "connections of a big transfer, at once: each moves -big ÷ this many bytes (concurrent load on each proxy)")
	flag.StringVar(&o.handshake, "handshake", "short", "short (TLS 1.3 resumption, X25519) or full (Go defaults, verified certificate)")
	flag.IntVar(&o.procs, "procs", 0, "GOMAXPROCS of client and backend; 0 is Go's default")
	flag.BoolVar(&o.pin, "pin", false, "run every proxy under taskset -c 1 with one thread of work (run this process under taskset -c 0)")
	flag.BoolVar(&o.peers, "peers", true, "measure HAProxy and nginx stream too")
	flag.BoolVar(&o.pp, "proxy-protocol", true, "measure the PROXY protocol paths too")
	flag.BoolVar(&o.epoll, "epoll", false, "also measure a bare forwarder on a raw epoll loop (one locked thread, no netpoller): the floor of an event-loop design")
	flag.BoolVar(&o.epollRaw, "epoll-raw", false, "also measure an edge-triggered epoll forwarder on raw system calls only (the runtime never sees the thread block), and the same loop blocking in Go's epoll_wait")
	flag.StringVar(&o.cforward, "cforward", "", "also measure this build of test/bench/cforward (the raw epoll forwarder in C: what a relay costs without a Go runtime)")
	flag.StringVar(&o.label, "label", "", "label of this run in the output")
	flag.StringVar(&o.product, "switchyard", "", "also measure `switchyard controller` itself (this switchyard binary in manifests mode, one process per path): passthrough, tcp, and with -proxy-protocol tcp+PROXY v1")
	flag.StringVar(&o.jsonOut, "json", "", "append this run's comparisons to this file (JSON lines) for -role summarize")
	flag.Func("variant", "name:K=V,...: one more Switchyard passthrough path, a proxy child with this environment; an element without '=' is "+
		"another build of this tool to run it from, e.g. one made before a change (repeatable)", func(v string) error {
		vr := parseVariant(v)
		vr.mode = "sni"
		o.variants = append(o.variants, vr)
		return nil
	})
	flag.Func("variant-tcp", "name:K=V,...: as -variant, one more Switchyard TCP service path (repeatable)", func(v string) error {
		vr := parseVariant(v)
		vr.mode = "tcp"
		o.variants = append(o.variants, vr)
		return nil
	})
	flag.Func("epoll-raw-variant", "name:K=V,...: one more epoll raw forwarder row, as -variant (TCPB_RAW_NOLOCK=1: no LockOSThread; TCPB_RAW_SPIN=20us: poll that long before blocking), to find what a Go process adds to the relay (repeatable)", func(v string) error {
		o.rawVariants = append(o.rawVariants, parseVariant(v))
		return nil
	})
	role := flag.String("role", "bench", "bench, summarize (of -json files), or a child: backend, proxy, forward")
	mode := flag.String("mode", "sni", "proxy: sni, tcp, sni-pp2 (HTTPS fallback with PROXY v2) or tcp-pp1 (TCP service with PROXY v1)")
	target := flag.String("target", "", "proxy and forward: the backend address")
	ppTarget := flag.String("pp-target", "", "proxy: the backend address that expects a PROXY header")
	dir := flag.String("dir", "", "backend: directory holding cert.pem and key.pem")
	cpuprofile := flag.String("cpuprofile", "", "proxy: write a CPU profile here; bench: pass it on to the Switchyard passthrough proxy")
	flag.Parse()
	o.cpuprofile = *cpuprofile
	if o.parallel < 1 {
		log.Fatalf("-parallel %d: want at least 1", o.parallel)
	}
	if o.handshake != "short" && o.handshake != "full" {
		log.Fatalf("-handshake %q: want short or full", o.handshake)
	}
	var err error
	switch *role {
	case "backend":
		err = child(func(ctx context.Context) (string, error) { return serveBackend(ctx, *dir, o.size, o.big) }, "")
	case "proxy":
		err = child(func(ctx context.Context) (string, error) { return serveSwitchyard(ctx, *mode, *target, *ppTarget) }, *cpuprofile)
	case "forward":
		err = child(func(ctx context.Context) (string, error) { return serveForward(ctx, *target) }, "")
	case "epoll-forward":
		err = child(func(ctx context.Context) (string, error) { return serveEpollForward(ctx, *target) }, "")
	case "epoll-raw-forward":
		err = child(func(ctx context.Context) (string, error) { return serveEpollRawForward(ctx, *target) }, "")
	case "summarize":
		err = summarize(flag.Args())
	default:
		err = run(o)
	}
	if err != nil {
		log.Fatal(err)
	}
}

type options struct {
	rounds, warmup, size, bigRounds int
	parallel                        int
	big                             int64
	handshake                       string
	procs                           int
	pin, peers, pp, epoll, epollRaw bool
	label, cpuprofile, jsonOut      string
	variants                        []variant // -variant and -variant-tcp
	product                         string    // switchyard binary for the product's paths; "": none
	cforward                        string    // test/bench/cforward binary; "": none
	rawVariants                     []variant
}

// parseVariant reads -variant's name:K=V,...,BUILD.
func parseVariant(v string) variant {
	name, spec, _ := strings.Cut(v, ":")
	vr := variant{name: name}
	for _, e := range strings.Split(spec, ",") {
		if strings.Contains(e, "=") {
			vr.env = append(vr.env, e)
		} else if e != "" {
			vr.bin = e
		}
	}
	return vr
}

// variant is a Switchyard passthrough child started with extra environment
// or from another build, to compare settings or changes in the same run.
type variant struct {
	name string
	env  []string
	bin  string // "" is this binary
	mode string // -variant's proxy child: sni or tcp (-mode)
}

// child serves until stdin closes (the parent is done) or SIGTERM; serve
// starts serving and returns the address, which is printed on stdout.
func child(serve func(context.Context) (string, error), cpuprofile string) error {
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop() }()
	addr, err := serve(ctx)
	if err != nil {
		return err
	}
	fmt.Println(addr)
	<-ctx.Done()
	return nil
}

// serveSwitchyard runs one of tcpproxy's L4 paths as the product does (a
// real balancer.Registry, round robin, metrics registered) with target (or
// ppTarget for the PROXY protocol modes) as the only endpoint.
func serveSwitchyard(ctx context.Context, mode, target, ppTarget string) (string, error) {
	upstream := target
	if strings.HasSuffix(mode, "-pp1") || strings.HasSuffix(mode, "-pp2") {
		upstream = ppTarget
	}
	reg := balancer.NewRegistry(balancer.Config{})
	h, p, _ := net.SplitHostPort(upstream)
	if err := reg.Sync([]balancer.Backend{{Name: "bench", Endpoints: []balancer.Endpoint{{Address: h, Port: balancer.PortString(p)}}}}); err != nil {
		return "", fmt.Errorf("sync balancer: %w", err)
	}
	// The product's default (--l4-event-loops 1); TCPB_EVENT_LOOPS=0, e.g.
	// in a -variant, measures the goroutine per connection.
	loops := 1
	if v := os.Getenv("TCPB_EVENT_LOOPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return "", fmt.Errorf("TCPB_EVENT_LOOPS=%q: want a number of loops, 0 for none", v)
		}
		loops = n
	}
	busyPoll := tcpproxy.DefaultBusyPoll // the product's default
	if v := os.Getenv("TCPB_BUSY_POLL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return "", fmt.Errorf("TCPB_BUSY_POLL=%q: want a duration", v)
		}
		busyPoll = d
	}
	cfg := tcpproxy.Config{Picker: reg, Registerer: prometheus.NewRegistry(), EventLoops: loops, BusyPoll: busyPoll}
	if mode == "sni-pp2" {
		cfg.HTTPSFallback = ppTarget
	}
	px, err := tcpproxy.New(cfg)
	if err != nil {
		return "", err
	}
	switch mode {
	case "sni", "sni-pp2":
		host := sni
		if mode == "sni-pp2" {
			// Another host is passed through, so the hello is awaited and
			// read; sni itself is not, so it goes to the HTTPS fallback
			// behind a PROXY v2 header.
			host = "other.example.com"
		}
		px.Update(tcpproxy.RoutesFrom(&model.Configuration{PassthroughBackends: []model.PassthroughBackend{{Hostname: host, Backend: "bench"}}}))
		// As cmd/switchyard listens for clients: no TCP keep-alive on
		// accepted connections (Go's default costs four setsockopt calls
		// per accept; nginx's listen sets none).
		ln, err := (&net.ListenConfig{KeepAlive: -1}).Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("listen: %w", err)
		}
		go func() {
			if err := px.ServeSNI(ctx, ln); err != nil {
				log.Print(err)
			}
		}()
		return ln.Addr().String(), nil
	case "tcp", "tcp-pp1":
		port, err := freePort()
		if err != nil {
			return "", err
		}
		px.Update(tcpproxy.RoutesFrom(&model.Configuration{TCPServices: []model.L4Service{{
			Port: port, Backend: "bench", EncodeProxyProtocol: mode == "tcp-pp1"}}}))
		if err := px.SyncTCP(ctx, "127.0.0.1"); err != nil {
			return "", err
		}
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
	}
	return "", fmt.Errorf("-mode %q: want sni, tcp, sni-pp2 or tcp-pp1", mode)
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// serveForward is the reference: the least a Go L4 proxy can do (accept,
// dial, io.Copy both ways, no SNI peek, no balancer).
func serveForward(ctx context.Context, target string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen: %w", err)
	}
	context.AfterFunc(ctx, func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go forward(c.(*net.TCPConn), target)
		}
	}()
	return ln.Addr().String(), nil
}

func forward(c *net.TCPConn, target string) {
	defer func() { _ = c.Close() }()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(c, up)
		_ = c.CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(up, c)
	_ = up.(*net.TCPConn).CloseWrite()
	<-done
}

// serveBackend is the TLS server, on two listeners: the second expects a
// PROXY header (v1 or v2) before the handshake and strips it. After the
// handshake it reads commands of one byte: 'p' is answered with 'p', 'd'
// with size bytes and 'g' with big bytes, each then ending the connection;
// anything else closes. It returns "addr ppaddr".
func serveBackend(ctx context.Context, dir string, size int, big int64) (string, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		return "", fmt.Errorf("load certificate: %w", err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}}
	payload := make([]byte, size)
	chunk := make([]byte, 1<<20)
	var addrs []string
	for _, pp := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			return "", fmt.Errorf("listen: %w", err)
		}
		context.AfterFunc(ctx, func() { _ = ln.Close() })
		addrs = append(addrs, ln.Addr().String())
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go serveBackendConn(c, conf, pp, payload, chunk, big)
			}
		}()
	}
	return strings.Join(addrs, " "), nil
}

func serveBackendConn(c net.Conn, conf *tls.Config, pp bool, payload, chunk []byte, big int64) {
	if pp {
		br := bufio.NewReader(c)
		h, err := proxyproto.Read(br)
		if err != nil || h.Local || !h.Source.IsValid() {
			log.Printf("backend: PROXY header: %+v, %v", h, err)
			_ = c.Close()
			return
		}
		c = &bufferedConn{Conn: c, r: br}
	}
	tc := tls.Server(c, conf)
	defer tc.Close()
	b := make([]byte, 1)
	for {
		if _, err := io.ReadFull(tc, b); err != nil {
			return
		}
		switch b[0] {
		case 'p':
			if _, err := tc.Write(b); err != nil {
				return
			}
		case 'd':
			_, _ = tc.Write(payload)
			return
		case 'g':
			for left := big; left > 0; {
				n := min(left, int64(len(chunk)))
				if _, err := tc.Write(chunk[:n]); err != nil {
					return
				}
				left -= n
			}
			return
		default:
			return
		}
	}
}

// bufferedConn reads through r, which holds what followed a PROXY header.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// proc is a running proxy or backend process.
type proc struct {
	name  string
	addr  string
	cmd   *exec.Cmd
	stdin io.Closer // Go children: closing it ends them
	pids  []int     // the processes whose CPU is counted
	dir   string    // external proxies: their configuration directory
}

// command is bin args, under taskset -c 1 when pin. The process gets
// SIGTERM if this one dies first, so no proxy outlives an interrupted run.
func command(pin bool, bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	if pin {
		cmd = exec.Command("taskset", append([]string{"-c", "1", bin}, args...)...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	return cmd
}

// start runs bin ("" is this binary) with -role role, GOMAXPROCS procs (0:
// unset) and env added to the environment.
func start(pin bool, bin, role string, procs int, env []string, args ...string) (*proc, error) {
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find own binary: %w", err)
		}
		bin = self
	}
	cmd := command(pin, bin, append([]string{"-role", role}, args...)...)
	cmd.Stderr = os.Stderr
	cmd.Env = os.Environ()
	if procs > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(procs))
	}
	cmd.Env = append(cmd.Env, env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%s stdin: %w", role, err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%s stdout: %w", role, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", role, err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("read %s address: %w", role, err)
	}
	return &proc{name: role, addr: strings.TrimSpace(line), cmd: cmd, stdin: stdin, pids: []int{cmd.Process.Pid}}, nil
}

// startExternal runs an external proxy (HAProxy, nginx) in the foreground
// and waits until addr accepts connections and it has workers child
// processes.
func startExternal(name, addr, dir string, workers int, cmd *exec.Cmd) (*proc, error) {
	out, err := os.Create(filepath.Join(dir, "output"))
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, addr: addr, cmd: cmd, dir: dir, pids: []int{cmd.Process.Pid}}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, "output"))
			return nil, fmt.Errorf("%s exited: %s", name, b)
		default:
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("%s: %s not accepting after 10s", name, addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.stdin = killer{cmd: cmd, exited: exited}
	// nginx's workers are the master's children, forked after it listens;
	// they live until the end.
	for len(p.pids) < 1+workers {
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s: %d of %d worker processes after 10s", name, len(p.pids)-1, workers)
		}
		time.Sleep(20 * time.Millisecond)
		p.pids = append(p.pids[:1], childrenOf(cmd.Process.Pid)...)
	}
	return p, nil
}

// killer stops an external proxy: SIGTERM, then waits for it.
type killer struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func (k killer) Close() error {
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-k.exited:
	case <-time.After(5 * time.Second):
		_ = k.cmd.Process.Kill()
		<-k.exited
	}
	return nil
}

// stop ends the process.
func (p *proc) stop() {
	_ = p.stdin.Close()
	if p.dir == "" {
		_ = p.cmd.Wait()
	}
}

// childrenOf returns the pids whose parent is pid.
func childrenOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, n)
		}
	}
	return kids
}

// cpu is the run time of p's processes so far, all threads (schedstat: in
// nanoseconds, not sampled at clock ticks).
func (p *proc) cpu() time.Duration {
	var total time.Duration
	for _, pid := range p.pids {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, t := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
			if err != nil {
				continue
			}
			f := strings.Fields(string(b))
			if len(f) == 0 {
				continue
			}
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			total += time.Duration(ns)
		}
	}
	return total
}

// haproxyConfig is HAProxy in mode tcp for one path: class sni routes by
// req.ssl_sni after the hello (as users configure SNI routing), tcp
// forwards every connection; with pp the server line sends PROXY
// (send-proxy-v2 on the sni class, send-proxy (v1) on tcp).
func haproxyConfig(listen, target string, class string, threads int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global\n  nbthread %d\n  maxconn 4096\n\n", threads)
	b.WriteString("defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 10m\n  timeout server 10m\n\n")
	fmt.Fprintf(&b, "frontend fe\n  bind %s\n", listen)
	send := ""
	switch class {
	case classSNIPP:
		send = " send-proxy-v2"
	case classTCPPP:
		send = " send-proxy"
	}
	if class == classSNI || class == classSNIPP {
		b.WriteString("  tcp-request inspect-delay 5s\n  tcp-request content accept if { req.ssl_hello_type 1 }\n")
		fmt.Fprintf(&b, "  use_backend be if { req.ssl_sni -i %s }\n\n", sni)
	} else {
		b.WriteString("  default_backend be\n\n")
	}
	fmt.Fprintf(&b, "backend be\n  server s1 %s%s\n", target, send)
	return b.String()
}

// nginxConfig is nginx's stream module for one path: class sni routes by
// $ssl_preread_server_name through a map, tcp forwards every connection;
// with pp, proxy_protocol on (v1).
func nginxConfig(dir, listen, target, class string, workers int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\nworker_processes %d;\ndaemon off;\n", workers)
	fmt.Fprintf(&b, "pid %s/nginx.pid;\nerror_log %s/error.log;\nevents { worker_connections 4096; }\n", dir, dir)
	fmt.Fprintf(&b, "stream {\n  upstream be { server %s; }\n", target)
	if class == classSNI || class == classSNIPP {
		fmt.Fprintf(&b, "  upstream none { server 127.0.0.1:9; }\n  map $ssl_preread_server_name $up { %s be; default none; }\n", sni)
		fmt.Fprintf(&b, "  server {\n    listen %s;\n    ssl_preread on;\n    proxy_pass $up;\n", listen)
	} else {
		fmt.Fprintf(&b, "  server {\n    listen %s;\n    proxy_pass be;\n", listen)
	}
	if class == classSNIPP || class == classTCPPP {
		b.WriteString("    proxy_protocol on;\n")
	}
	b.WriteString("  }\n}\n")
	return b.String()
}

// Path classes: what is compared with what.
const (
	classSNI   = "passthrough"
	classTCP   = "tcp"
	classSNIPP = "passthrough+PROXY"
	classTCPPP = "tcp+PROXY"
)

// Implementations.
const (
	implDirect     = "direct"
	implFloor      = "forward"
	implEpollFloor = "epoll-forward"
	implSwitchyard = "switchyard"
	implHAProxy    = "haproxy"
	implNginx      = "nginx"
)

// path is one way from the client to the backend.
type path struct {
	name, class, impl string
	proc              *proc // nil for direct
	addr              string
	got               []timings
	big               []time.Duration
	cpuConn, cpuBig   time.Duration
	conns             int
}

// timings is one sample.
type timings struct {
	connect time.Duration // TCP connect
	setup   time.Duration // TCP connect + TLS handshake
	rtt     time.Duration // one byte there and back on the established connection
	xfer    time.Duration // request byte to last byte of the transfer
}

// quantile is the q quantile of one field of ts.
func quantile(ts []timings, q float64, field func(timings) time.Duration) time.Duration {
	d := make([]time.Duration, len(ts))
	for i, t := range ts {
		d[i] = field(t)
	}
	return quantileOf(d, q)
}

func quantileOf(d []time.Duration, q float64) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

func connectOf(t timings) time.Duration { return t.connect }
func setupOf(t timings) time.Duration   { return t.setup }
func rttOf(t timings) time.Duration     { return t.rtt }
func xferOf(t timings) time.Duration    { return t.xfer }

func run(o options) error {
	if o.procs > 0 {
		runtime.GOMAXPROCS(o.procs)
	}
	dir, err := os.MkdirTemp("", "tcpproxy-bench")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	pool, err := writeCert(dir)
	if err != nil {
		return err
	}
	load0 := loadavg()
	backend, err := start(false, "", "backend", o.procs, nil, "-dir", dir, "-size", strconv.Itoa(o.size), "-big", strconv.FormatInt(o.big/int64(o.parallel), 10))
	if err != nil {
		return err
	}
	defer backend.stop()
	target, ppTarget, _ := strings.Cut(backend.addr, " ")
	threads := 2
	proxyProcs := 0
	if o.pin {
		threads, proxyProcs = 1, 1
	}

	paths := []*path{{name: "direct", impl: implDirect, addr: target}}
	defer func() {
		for _, p := range paths {
			if p.proc != nil {
				p.proc.stop()
			}
		}
	}()
	addGo := func(name, class, impl string, bin string, env []string, role string, args ...string) error {
		pr, err := start(o.pin, bin, role, proxyProcs, env, args...)
		if err != nil {
			return err
		}
		paths = append(paths, &path{name: name, class: class, impl: impl, proc: pr, addr: pr.addr})
		return nil
	}
	if err := addGo("forward", classTCP, implFloor, "", nil, "forward", "-target", target); err != nil {
		return err
	}
	if o.epoll {
		if err := addGo("epoll forward", classTCP, implEpollFloor, "", nil, "epoll-forward", "-target", target); err != nil {
			return err
		}
	}
	if o.epollRaw {
		if err := addGo("epoll raw forward", classTCP, implEpollFloor, "", nil, "epoll-raw-forward", "-target", target); err != nil {
			return err
		}
		// The same loop blocking in a system call the runtime sees
		// (entersyscall, sysmon): which of the two the gap is.
		if err := addGo("epoll raw forward, Go's wait", classTCP, implEpollFloor, "", []string{"TCPB_EPOLL_WAIT=syscall"}, "epoll-raw-forward", "-target", target); err != nil {
			return err
		}
	}
	for _, v := range o.rawVariants {
		if err := addGo(v.name, classTCP, implEpollFloor, v.bin, v.env, "epoll-raw-forward", "-target", target); err != nil {
			return err
		}
	}
	if o.cforward != "" {
		// The Go raw forwarder's relay in C: which of the two a gap to
		// nginx and HAProxy is, the relay's or the Go runtime's.
		if err := addGo("C epoll forward", classTCP, implEpollFloor, o.cforward, nil, "cforward", "-target", target); err != nil {
			return err
		}
	}
	type goPath struct{ name, class, mode string }
	goPaths := []goPath{{"switchyard passthrough", classSNI, "sni"}, {"switchyard tcp", classTCP, "tcp"}}
	if o.pp {
		goPaths = append(goPaths, goPath{"switchyard passthrough+PROXY v2", classSNIPP, "sni-pp2"}, goPath{"switchyard tcp+PROXY v1", classTCPPP, "tcp-pp1"})
	}
	for _, g := range goPaths {
		args := []string{"-mode", g.mode, "-target", target, "-pp-target", ppTarget}
		if g.mode == "sni" && o.cpuprofile != "" {
			args = append(args, "-cpuprofile", o.cpuprofile)
		}
		if err := addGo(g.name, g.class, implSwitchyard, "", nil, "proxy", args...); err != nil {
			return err
		}
	}
	conf := &tls.Config{ServerName: sni, RootCAs: pool}
	if o.handshake == "short" {
		conf.CurvePreferences = []tls.CurveID{tls.X25519}
		conf.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		conf.MinVersion = tls.VersionTLS13
	}
	if o.product != "" {
		classes := []string{classSNI, classTCP}
		if o.pp {
			classes = append(classes, classTCPPP)
		}
		for _, class := range classes {
			p, err := startProduct(o.pin, o.product, dir, class, target, ppTarget, proxyProcs, conf, o.size)
			if err != nil {
				return err
			}
			paths = append(paths, p)
		}
	}
	for _, v := range o.variants {
		if err := addGo(v.name, "variant", implSwitchyard, v.bin, v.env, "proxy", "-mode", v.mode, "-target", target); err != nil {
			return err
		}
	}
	if o.peers {
		classes := []string{classSNI, classTCP}
		if o.pp {
			classes = append(classes, classSNIPP, classTCPPP)
		}
		for _, class := range classes {
			for _, impl := range []string{implHAProxy, implNginx} {
				p, err := startPeer(o.pin, dir, impl, class, target, ppTarget, threads)
				if err != nil {
					return err
				}
				paths = append(paths, p)
			}
		}
	}

	order := slices.Clone(paths)
	resumed := 0
	cpu0 := cpus(paths)
	for i := 0; i < o.warmup+o.rounds; i++ {
		mrand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, p := range order {
			t, didResume, err := sample(p.addr, conf, 'd', int64(o.size))
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			p.conns++
			if i < o.warmup {
				continue
			}
			if didResume {
				resumed++
			}
			p.got = append(p.got, t)
		}
	}
	cpu1 := cpus(paths)
	for i := 0; i < o.bigRounds; i++ {
		mrand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, p := range order {
			xfer, err := bigTransfer(p.addr, conf, o.big, o.parallel)
			if err != nil {
				return fmt.Errorf("%s: big transfer: %w", p.name, err)
			}
			p.big = append(p.big, xfer)
		}
	}
	cpu2 := cpus(paths)
	for i, p := range paths {
		p.cpuConn = (cpu1[i] - cpu0[i]) / time.Duration(p.conns)
		p.cpuBig = cpu2[i] - cpu1[i]
	}
	if o.handshake == "short" && resumed != o.rounds*len(paths) {
		return fmt.Errorf("short handshake: %d of %d samples resumed", resumed, o.rounds*len(paths))
	}
	return report(o, paths, load0, loadavg())
}

// startPeer starts HAProxy or nginx for one class of path.
func startPeer(pin bool, dir, impl, class, target, ppTarget string, threads int) (*path, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	up := target
	if class == classSNIPP || class == classTCPPP {
		up = ppTarget
	}
	pdir := filepath.Join(dir, impl+"-"+strings.ReplaceAll(class, "+", "-"))
	if err := os.Mkdir(pdir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(pdir, impl+".conf")
	var cmd *exec.Cmd
	workers := 0
	switch impl {
	case implHAProxy:
		if err := os.WriteFile(conf, []byte(haproxyConfig(listen, up, class, threads)), 0o644); err != nil {
			return nil, err
		}
		cmd = command(pin, "haproxy", "-db", "-f", conf)
	case implNginx:
		if err := os.WriteFile(conf, []byte(nginxConfig(pdir, listen, up, class, threads)), 0o644); err != nil {
			return nil, err
		}
		workers = threads
		cmd = command(pin, "nginx", "-e", filepath.Join(pdir, "error.log"), "-p", pdir, "-c", conf)
	}
	p, err := startExternal(impl+" "+class, listen, pdir, workers, cmd)
	if err != nil {
		return nil, err
	}
	name := impl + " " + class
	switch class {
	case classSNIPP:
		name = map[string]string{implHAProxy: "haproxy passthrough+PROXY v2", implNginx: "nginx passthrough+PROXY v1"}[impl]
	case classTCPPP:
		name = impl + " tcp+PROXY v1"
	}
	return &path{name: name, class: class, impl: impl, proc: p, addr: listen}, nil
}

// cpus reads the CPU time of every path's proxy (0 for direct).
func cpus(paths []*path) []time.Duration {
	d := make([]time.Duration, len(paths))
	for i, p := range paths {
		if p.proc != nil {
			d[i] = p.proc.cpu()
		}
	}
	return d
}

// figures are one path's results; durations in microseconds.
type figures struct {
	Name, Class, Impl  string
	SetupP50, SetupP99 float64 // added to direct
	RTT                float64 // added to direct
	MiBps, BigMiBps    float64 // throughput, median transfer
	CPUConn            float64 // µs per connection
	CPUGiB             float64 // ms per GiB
}

// comparison is one metric of one class in one run: Switchyard's figure
// over the better of HAProxy's and nginx's.
type comparison struct {
	Label, Mode, Class, Metric string
	Path                       string // the Switchyard path; "" in files of older runs: the class's only one
	Switchyard, HAProxy, Nginx float64
	Ratio                      float64 // Switchyard ÷ the better peer
	LowerIsBetter              bool
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func report(o options, paths []*path, load0, load1 string) error {
	mode := "unpinned"
	if o.pin {
		mode = "pinned"
	}
	d := paths[0].got
	sd50, sd99, rd, xd := quantile(d, .5, setupOf), quantile(d, .99, setupOf), quantile(d, .5, rttOf), quantile(d, .5, xferOf)
	var bigD time.Duration
	if o.bigRounds > 0 {
		bigD = quantileOf(paths[0].big, .5)
	}
	fmt.Printf("\n### %s, %s: %d rounds (+%d warm-up), %d × %d MiB over %d connection(s) at once, %s handshake, load %s → %s\n\n",
		o.label, mode, o.rounds, o.warmup, o.bigRounds, o.big>>20, o.parallel, o.handshake, load0, load1)
	fmt.Printf("direct: setup p50 %d µs, p99 %d µs (connect p50 %d µs), 1-byte RTT p50 %d µs, %d MiB p50 %d µs, %d MiB p50 %.0f ms\n\n",
		sd50.Microseconds(), sd99.Microseconds(), quantile(d, .5, connectOf).Microseconds(), rd.Microseconds(),
		o.size>>20, xd.Microseconds(), o.big>>20, float64(bigD)/float64(time.Millisecond))
	fmt.Println("| path | setup added p50 | setup added p99 | RTT added p50 | 1 MiB MiB/s (÷ direct) | 1 GiB MiB/s (÷ direct) | CPU/conn | CPU/GiB |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	fig := map[string]figures{}
	for _, p := range paths {
		f := figures{Name: p.name, Class: p.class, Impl: p.impl,
			SetupP50: us(quantile(p.got, .5, setupOf) - sd50), SetupP99: us(quantile(p.got, .99, setupOf) - sd99),
			RTT:   us(quantile(p.got, .5, rttOf) - rd),
			MiBps: float64(o.size) / (1 << 20) / quantile(p.got, .5, xferOf).Seconds(),
		}
		bigRatio := 0.0
		if o.bigRounds > 0 {
			med := quantileOf(p.big, .5)
			f.BigMiBps = float64(o.big) / (1 << 20) / med.Seconds()
			bigRatio = float64(bigD) / float64(med)
			f.CPUGiB = float64(p.cpuBig) / float64(time.Millisecond) / (float64(o.big) * float64(len(p.big)) / (1 << 30))
		}
		f.CPUConn = us(p.cpuConn)
		fig[p.name] = f
		if p.impl == implDirect {
			continue
		}
		fmt.Printf("| %s | %+.0f µs | %+.0f µs | %+.0f µs | %.0f (%.2f×) | %.0f (%.2f×) | %.0f µs | %.0f ms |\n",
			p.name, f.SetupP50, f.SetupP99, f.RTT, f.MiBps, float64(xd)/float64(quantile(p.got, .5, xferOf)),
			f.BigMiBps, bigRatio, f.CPUConn, f.CPUGiB)
	}
	if o.bigRounds > 1 {
		// Each transfer, slowest first: a median of a few hides whether
		// a path is steady or sometimes slow.
		fmt.Printf("\n| path | each %d MiB transfer, MiB/s, slowest first |\n|---|---|\n", o.big>>20)
		for _, p := range paths {
			xs := slices.Clone(p.big)
			slices.Sort(xs)
			var b strings.Builder
			for i := len(xs) - 1; i >= 0; i-- {
				fmt.Fprintf(&b, " %.0f", float64(o.big)/(1<<20)/xs[i].Seconds())
			}
			fmt.Printf("| %s |%s |\n", p.name, b.String())
		}
	}
	if !o.peers {
		return nil
	}
	var comps []comparison
	for _, class := range []string{classSNI, classTCP, classSNIPP, classTCPPP} {
		var sys []figures
		var ha, ng figures
		peers := 0
		for _, p := range paths {
			if p.class != class {
				continue
			}
			switch p.impl {
			case implSwitchyard, implProduct:
				sys = append(sys, fig[p.name])
			case implHAProxy:
				ha, peers = fig[p.name], peers+1
			case implNginx:
				ng, peers = fig[p.name], peers+1
			}
		}
		if peers != 2 {
			continue
		}
		for _, sy := range sys {
			add := func(metric string, lower bool, get func(figures) float64) {
				c := comparison{Label: o.label, Mode: mode, Class: class, Path: sy.Name, Metric: metric, LowerIsBetter: lower,
					Switchyard: get(sy), HAProxy: get(ha), Nginx: get(ng)}
				best := max(c.HAProxy, c.Nginx)
				if lower {
					best = min(c.HAProxy, c.Nginx)
				}
				c.Ratio = c.Switchyard / best
				comps = append(comps, c)
			}
			add("setup added p50 (µs)", true, func(f figures) float64 { return f.SetupP50 })
			add("setup added p99 (µs)", true, func(f figures) float64 { return f.SetupP99 })
			add("RTT added p50 (µs)", true, func(f figures) float64 { return f.RTT })
			add("1 MiB throughput (MiB/s)", false, func(f figures) float64 { return f.MiBps })
			if o.bigRounds > 0 {
				add("1 GiB throughput (MiB/s)", false, func(f figures) float64 { return f.BigMiBps })
				add("CPU per GiB (ms)", true, func(f figures) float64 { return f.CPUGiB })
			}
			add("CPU per connection (µs)", true, func(f figures) float64 { return f.CPUConn })
		}
	}
	fmt.Println("\n| class | switchyard path | metric | switchyard | haproxy | nginx | switchyard ÷ better peer |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, c := range comps {
		fmt.Printf("| %s | %s | %s | %.0f | %.0f | %.0f | %.2f |\n", c.Class, c.Path, c.Metric, c.Switchyard, c.HAProxy, c.Nginx, c.Ratio)
	}
	if o.jsonOut == "" {
		return nil
	}
	f, err := os.OpenFile(o.jsonOut, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, c := range comps {
		if err := enc.Encode(c); err != nil {
			_ = f.Close()
			return err
		}
	}
	return f.Close()
}

// bigTransfer moves total bytes from the backend over n connections at
// once and returns the time from the first request byte to the last byte
// of the last connection.
func bigTransfer(addr string, conf *tls.Config, total int64, n int) (time.Duration, error) {
	if n <= 1 {
		t, _, err := sample(addr, conf, 'g', total)
		return t.xfer, err
	}
	start := time.Now()
	errs := make(chan error, n)
	for range n {
		go func() {
			_, _, err := sample(addr, conf, 'g', total/int64(n))
			errs <- err
		}()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return time.Since(start), first
}

// summarize prints, per mode, class and metric, the median and range over
// runs of Switchyard ÷ the better peer, and the medians of each figure.
func summarize(files []string) error {
	type key struct{ mode, class, path, metric string }
	var keys []key
	all := map[key][]comparison{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		dec := json.NewDecoder(f)
		for {
			var c comparison
			if err := dec.Decode(&c); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				_ = f.Close()
				return fmt.Errorf("%s: %w", name, err)
			}
			if c.Path == "" {
				c.Path = "switchyard " + c.Class
			}
			k := key{c.Mode, c.Class, c.Path, c.Metric}
			if _, ok := all[k]; !ok {
				keys = append(keys, k)
			}
			all[k] = append(all[k], c)
		}
		_ = f.Close()
	}
	med := func(cs []comparison, get func(comparison) float64) (m, lo, hi float64) {
		v := make([]float64, len(cs))
		for i, c := range cs {
			v[i] = get(c)
		}
		slices.Sort(v)
		n := len(v)
		m = v[n/2]
		if n%2 == 0 {
			m = (v[n/2-1] + v[n/2]) / 2
		}
		return m, v[0], v[n-1]
	}
	fmt.Println("| mode | class | switchyard path | metric | runs | switchyard ÷ better peer: median [range] | holds (≤ 1.0 / ≥ 1.0) | switchyard | haproxy | nginx (medians) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, k := range keys {
		cs := all[k]
		m, lo, hi := med(cs, func(c comparison) float64 { return c.Ratio })
		s, _, _ := med(cs, func(c comparison) float64 { return c.Switchyard })
		h, _, _ := med(cs, func(c comparison) float64 { return c.HAProxy })
		n, _, _ := med(cs, func(c comparison) float64 { return c.Nginx })
		holds := m >= 1
		if cs[0].LowerIsBetter {
			holds = m <= 1
		}
		fmt.Printf("| %s | %s | %s | %s | %d | %.2f [%.2f–%.2f] | %s | %.0f | %.0f | %.0f |\n",
			k.mode, k.class, k.path, k.metric, len(cs), m, lo, hi, map[bool]string{true: "yes", false: "no"}[holds], s, h, n)
	}
	return nil
}

// sample dials addr (connect), completes the TLS handshake (setup, connect
// included), sends one byte and waits for it to come back (rtt), then sends
// cmd and downloads size bytes (transfer, from the request byte to the
// last byte).
func sample(addr string, conf *tls.Config, cmd byte, size int64) (t timings, resumed bool, err error) {
	start := time.Now()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		return t, false, fmt.Errorf("connect: %w", err)
	}
	t.connect = time.Since(start)
	c := tls.Client(raw, conf)
	defer c.Close()
	if err := c.Handshake(); err != nil {
		return t, false, fmt.Errorf("handshake: %w", err)
	}
	t.setup = time.Since(start)
	b := []byte{'p'}
	start = time.Now()
	if _, err := c.Write(b); err != nil {
		return t, false, fmt.Errorf("ping: %w", err)
	}
	if _, err := io.ReadFull(c, b); err != nil {
		return t, false, fmt.Errorf("pong: %w", err)
	}
	t.rtt = time.Since(start)
	start = time.Now()
	if _, err := c.Write([]byte{cmd}); err != nil {
		return t, false, fmt.Errorf("request: %w", err)
	}
	n, err := io.Copy(io.Discard, c)
	if err != nil || n != size {
		return t, false, fmt.Errorf("download: got %d bytes: %w", n, errors.Join(err, io.ErrUnexpectedEOF))
	}
	t.xfer = time.Since(start)
	return t, c.ConnectionState().DidResume, nil
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// writeCert writes a self-signed certificate for sni to dir/cert.pem and
// dir/key.pem and returns a pool that trusts it.
func writeCert(dir string) (*x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: sni}, DNSNames: []string{sni},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create certificate: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return pool, nil
}
