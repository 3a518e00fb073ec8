package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"k8s.io/klog/v2"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane"
	"github.com/switchyard-proxy/switchyard/proxy"
	"github.com/switchyard-proxy/switchyard/tcpproxy/proxyproto"
)

// A Go data plane worker process (--go-workers): what `switchyard
// controller` serves HTTP and HTTPS with when it runs workers, one per CPU
// with one Go processor each, as nginx runs a worker process per CPU. The
// controller starts it as `switchyard worker` (not listed among the
// subcommands: nobody runs it by hand) with these descriptors:
//
//	3: the control socket (workerproto.go), 4: the HTTP listener,
//	5: the HTTPS listener, 6: the limit zones' shared memory (with
//	--limit-zones).
//
// The listeners are the worker's own sockets in a SO_REUSEPORT group on
// each port: the kernel spreads new connections over the workers. The
// worker serves once it has applied its first configuration and stops
// (draining, as the single-process controller does) when the control
// socket closes; it ignores SIGINT and SIGTERM, which the controller
// handles for it with its grace period.
const (
	workerControlFD = 3
	workerHTTPFD    = 4
	workerHTTPSFD   = 5
	workerLimitsFD  = 6
)

// workerOptions are the flags of `switchyard worker`, which the controller
// sets from its own.
type workerOptions struct {
	index          int
	controllerCls  string
	metricsPerHost bool
	http2Server    string
	accessLog      bool
	behindSNI      bool
	limitZones     bool
	digestSocket   string
	verbosity      int
}

// args are the command line that gives a worker o.
func (o workerOptions) args() []string {
	return []string{"worker",
		fmt.Sprintf("-index=%d", o.index),
		"-controller-class=" + o.controllerCls,
		fmt.Sprintf("-metrics-per-host=%t", o.metricsPerHost),
		"-http2-server=" + o.http2Server,
		fmt.Sprintf("-access-log=%t", o.accessLog),
		fmt.Sprintf("-behind-sni=%t", o.behindSNI),
		fmt.Sprintf("-limit-zones=%t", o.limitZones),
		"-digest-socket=" + o.digestSocket,
		fmt.Sprintf("-v=%d", o.verbosity),
	}
}

func parseWorkerFlags(args []string) (workerOptions, error) {
	var o workerOptions
	fs := flag.NewFlagSet("switchyard worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&o.index, "index", 0, "the worker's number")
	fs.StringVar(&o.controllerCls, "controller-class", "", "the controller_class label")
	fs.BoolVar(&o.metricsPerHost, "metrics-per-host", true, "label request metrics with the host")
	fs.StringVar(&o.http2Server, "http2-server", "switchyard", "switchyard or x/net")
	fs.BoolVar(&o.accessLog, "access-log", false, "write the access log to standard output")
	fs.BoolVar(&o.behindSNI, "behind-sni", false, "the HTTPS listener is behind the SSL passthrough router (PROXY headers always)")
	fs.BoolVar(&o.limitZones, "limit-zones", false, "descriptor 6 is the limit zones' shared memory")
	fs.StringVar(&o.digestSocket, "digest-socket", "", "the controller's digest authentication socket; empty: the worker's own verifier")
	fs.IntVar(&o.verbosity, "v", 0, "log verbosity")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.http2Server != "switchyard" && o.http2Server != "x/net" {
		return o, fmt.Errorf("-http2-server: %q is not switchyard or x/net", o.http2Server)
	}
	return o, nil
}

func runWorker(args []string, stdout, stderr io.Writer) int {
	opts, err := parseWorkerFlags(args)
	if err != nil {
		fmt.Fprintf(stderr, "switchyard worker: %v\n", err)
		return 2
	}
	// The controller ends its workers by closing the control socket,
	// after its own grace period; a terminal's ^C reaches the whole
	// process group and must not cut that short.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	if err := serveWorker(opts, stdout); err != nil {
		fmt.Fprintf(stderr, "switchyard worker %d: %v\n", opts.index, err)
		return 1
	}
	return 0
}

// serveWorker serves until the control socket closes.
func serveWorker(opts workerOptions, stdout io.Writer) error {
	klogFlags(opts.verbosity)
	control, err := fileConn(workerControlFD, "control")
	if err != nil {
		return err
	}
	defer control.Close()
	httpLn, err := fileListener(workerHTTPFD, "http")
	if err != nil {
		return err
	}
	httpsLn, err := fileListener(workerHTTPSFD, "https")
	if err != nil {
		return err
	}

	registry := prometheus.NewRegistry()
	reg := balancer.NewRegistry(balancer.Config{})
	pxCfg := proxy.Config{Picker: reg, Registerer: prometheus.WrapRegistererWith(controllerLabels(opts.controllerCls), registry),
		MetricsPerHost: opts.metricsPerHost, XNetHTTP2: opts.http2Server == "x/net",
		ErrorLog: func(msg string) { klog.Warning(msg) }}
	if opts.digestSocket != "" {
		pxCfg.Digest = newRemoteDigest(opts.digestSocket)
	}
	if opts.limitZones {
		f := os.NewFile(workerLimitsFD, "limit-zones")
		zones, err := proxy.OpenLimitZones(f)
		_ = f.Close() // the mapping stays
		if err != nil {
			return fmt.Errorf("limit zones: %w", err)
		}
		defer func() { _ = zones.Close() }()
		pxCfg.LimitZones = zones
	}
	if opts.accessLog {
		// The workers share the controller's standard output: whole
		// lines per write, never mixed.
		logw := proxy.NewSharedLogWriter(stdout, 0)
		defer func() { _ = logw.Close() }()
		pxCfg.AccessLog = logw
		if err := registerAccessLogDropped(registry, logw); err != nil {
			return err
		}
	}
	px, err := proxy.New(pxCfg)
	if err != nil {
		return err
	}
	pp := &proxyProtocolListeners{}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var serving sync.WaitGroup
	serve := func(ln net.Listener, serve func(context.Context, net.Listener) error) {
		serving.Add(1)
		go func() {
			defer serving.Done()
			if err := serve(ctx, ln); err != nil && ctx.Err() == nil {
				klog.ErrorS(err, "worker listener failed", "worker", opts.index, "listener", ln.Addr().String())
				cancel()
			}
		}()
	}
	startServing := func() {
		serve(pp.wrap(httpLn), px.Serve)
		if opts.behindSNI {
			// The SSL passthrough router's loopback port: a PROXY
			// header opens every connection (serveBehindSNI).
			serve(proxyproto.NewListener(httpsLn, behindSNIPolicy), px.ServeTLS)
		} else {
			serve(pp.wrap(httpsLn), px.ServeTLS)
		}
	}

	w := &workerLoop{control: control, reg: reg, px: px, pp: pp, registry: registry, start: startServing}
	err = w.run(ctx)
	cancel()
	serving.Wait()
	if errors.Is(err, io.EOF) {
		return nil // the controller closed the socket: a clean stop
	}
	return err
}

// behindSNIPolicy reads the PROXY header tcpproxy writes on the SSL
// passthrough router's loopback port (serveBehindSNI).
var behindSNIPolicy = proxyproto.Policy{On: true, Timeout: 5 * time.Second,
	Trusted: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}}

// workerLoop applies what the controller sends and answers its scrapes.
type workerLoop struct {
	control  net.Conn
	reg      *balancer.Registry
	px       *proxy.Proxy
	pp       *proxyProtocolListeners
	registry *prometheus.Registry
	start    func()
	started  bool
}

// run reads frames until the socket closes (io.EOF) or ctx ends.
func (w *workerLoop) run(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		_ = w.control.SetReadDeadline(time.Now())
	}()
	r := bufio.NewReaderSize(w.control, 64<<10)
	var buf, out []byte
	for {
		t, p, err := readFrame(r, buf)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		buf = p[:0]
		out = out[:0]
		switch t {
		case frameKeys:
			keys, err := decodeTicketKeys(p)
			if err != nil {
				klog.ErrorS(err, "go worker: ticket keys not applied; the ones before stay")
				continue
			}
			w.px.SetSessionTicketKeys(keys)
			continue
		case frameConfig:
			// A configuration the worker cannot read whole changes
			// nothing: the one before keeps serving, and the
			// controller's readiness sees the version lag.
			wc, err := decodeWorkerConfig(p)
			if err != nil {
				klog.ErrorS(err, "go worker: configuration not applied; the one before keeps serving")
				continue
			}
			w.apply(wc)
			out = appendFrame(out, frameApplied, binary.BigEndian.AppendUint64(nil, wc.Version))
		case frameScrape:
			if len(p) != 8 {
				return fmt.Errorf("scrape frame of %d bytes", len(p))
			}
			out = w.scrape(out, binary.BigEndian.Uint64(p))
		default:
			return fmt.Errorf("unknown frame type %q", t)
		}
		if _, err := w.control.Write(out); err != nil {
			return fmt.Errorf("answer the controller: %w", err)
		}
	}
}

// apply hands wc to the balancers and the proxy as the single-process
// controller's sink does, and starts serving after the first.
func (w *workerLoop) apply(wc *workerConfig) {
	cfg, ch := wc.Config, wc.Change
	if !w.started {
		// All of the first one, whatever it changed from the one before
		// (a worker started again gets the latest configuration).
		ch = controlplane.Change{Reload: true, Dynamic: true, Certificates: true}
	}
	applyGoPlane(w.reg, w.px, cfg, ch)
	if !ch.BackendsOnly() {
		w.pp.update(&cfg.Global)
	}
	if !w.started {
		w.started = true
		w.start()
	}
}

// scrape appends a frameMetrics answering scrape number id.
func (w *workerLoop) scrape(out []byte, id uint64) []byte {
	var body bytesWriter
	body.b = binary.BigEndian.AppendUint64(body.b, id)
	mfs, err := w.registry.Gather()
	if err != nil {
		klog.ErrorS(err, "gather worker metrics")
	}
	enc := expfmt.NewEncoder(&body, expfmt.NewFormat(expfmt.TypeProtoDelim))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			klog.ErrorS(err, "encode worker metrics")
			break
		}
	}
	return appendFrame(out, frameMetrics, body.b)
}

// bytesWriter appends to b.
type bytesWriter struct{ b []byte }

func (w *bytesWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// fileConn is the connection on an inherited descriptor.
func fileConn(fd uintptr, name string) (net.Conn, error) {
	f := os.NewFile(fd, name)
	if f == nil {
		return nil, fmt.Errorf("descriptor %d (%s) is not open", fd, name)
	}
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("descriptor %d (%s): %w", fd, name, err)
	}
	return c, nil
}

// fileListener is the listener on an inherited descriptor.
func fileListener(fd uintptr, name string) (net.Listener, error) {
	f := os.NewFile(fd, name)
	if f == nil {
		return nil, fmt.Errorf("descriptor %d (%s) is not open", fd, name)
	}
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("descriptor %d (%s): %w", fd, name, err)
	}
	return ln, nil
}
