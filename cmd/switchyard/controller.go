package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/cmd/switchyard/internal/statuspage"
	"github.com/switchyard-proxy/switchyard/controlplane"
	"github.com/switchyard-proxy/switchyard/controlplane/builder"
	"github.com/switchyard-proxy/switchyard/controlplane/manifests"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/proxy"
	"github.com/switchyard-proxy/switchyard/tcpproxy"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// runController runs the controller until SIGINT or SIGTERM.
func runController(args []string, stdout, stderr io.Writer) int {
	opts, err := parseControllerFlags(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "switchyard controller: %v\n", err)
		return 2
	}
	if opts.Version {
		fmt.Fprintln(stdout, versionString())
		return 0
	}
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx := afterGrace(sigCtx, stop, time.Duration(opts.ShutdownGraceSeconds)*time.Second)
	// The Go plane's access log goes to standard output, as ingress-nginx's
	// nginx sends its access log there.
	opts.AccessLog = stdout
	if err := serveController(ctx, opts, nil); err != nil {
		fmt.Fprintf(stderr, "switchyard controller: %v\n", err)
		return 1
	}
	return 0
}

// afterGrace returns a context that ends grace after signalled does (the
// controller keeps serving meanwhile, as ingress-nginx's
// --shutdown-grace-period), or at once when grace is zero. stop, called
// when the grace starts, restores the default handling of the signals, so
// a second one ends the process at once.
func afterGrace(signalled context.Context, stop func(), grace time.Duration) context.Context {
	if grace <= 0 {
		return signalled
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-signalled.Done()
		stop()
		klog.InfoS("shutting down after the grace period", "shutdown-grace-period", grace)
		time.Sleep(grace)
		cancel()
	}()
	return ctx
}

// listening receives the addresses the controller bound, for tests and the
// quickstart banner.
type listening struct {
	HTTP, HTTPS, Status string
}

// serveController wires control plane, balancer and data plane and serves
// until ctx ends. If ready is not nil it receives the bound addresses once
// the first configuration is served.
func serveController(ctx context.Context, opts controllerOptions, ready chan<- listening) error {
	klogFlags(opts.Verbosity)
	nginxMode := opts.DataPlane == "nginx"
	if !nginxMode {
		applyGoIdleSpin(opts.GoIdleSpin)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	client, runSource, err := clusterClient(opts)
	if err != nil {
		return err
	}
	reg := balancer.NewRegistry(balancer.Config{})
	// With nginx, the reload metrics (ingress-nginx's success and
	// config_last_reload_successful) count real reloads and come from
	// nginxcompat; with the Go proxy they count syncs.
	mcfg := controllerMetricsConfig{Balancer: reg, SyncMetrics: !nginxMode, ControllerClass: opts.ControllerClass,
		ElectionID: opts.ElectionID, ProcessPIDs: selfPIDs}
	// With --go-workers, the nginx_process_* metrics count the workers too,
	// as ingress-nginx's count nginx's master and workers.
	var workersRef atomic.Pointer[goWorkers]
	if !nginxMode {
		mcfg.ProcessPIDs = func() []int {
			pids := selfPIDs()
			if w := workersRef.Load(); w != nil {
				pids = append(pids, w.pids()...)
			}
			return pids
		}
	}
	if !nginxMode && opts.GoIdleSpin > 0 {
		mcfg.IdleSpinStats = runtimeIdleSpinStats
	}
	if nginxMode {
		mcfg.ProcessPIDs = nginxPIDs(filepath.Join(opts.NginxDir, "nginx.pid"))
		mcfg.NginxStatusURL = "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.NginxStatusPort)) + "/nginx_status"
	}
	metrics := newControllerMetrics(mcfg)
	errc := make(chan error, 8)
	var ngx *nginxPlane
	if nginxMode {
		ngx, err = newNginxPlane(opts, reg, metrics.registerer, errc)
		if err != nil {
			return err
		}
		defer ngx.close()
	}
	// --go-workers: the Go plane's HTTP and HTTPS in worker processes
	// (workers.go), which send their own request metrics and access log.
	var workers *goWorkers
	if nginxMode && opts.GoWorkers != 1 {
		klog.InfoS("--go-workers has no effect with --data-plane=nginx: nginx's worker-processes (ConfigMap) sets its workers", "go-workers", opts.GoWorkers)
	}
	if n := opts.goWorkers(); !nginxMode && n > 1 {
		httpsAddr := net.JoinHostPort(opts.ListenAddress, strconv.Itoa(opts.HTTPSPort))
		if opts.EnableSSLPassthrough {
			// Behind the SNI router, on loopback (serveBehindSNI).
			httpsAddr = "127.0.0.1:0"
		}
		workers, err = newGoWorkers(workersConfig{N: n,
			HTTPAddr: net.JoinHostPort(opts.ListenAddress, strconv.Itoa(opts.HTTPPort)), HTTPSAddr: httpsAddr,
			AccessLog: opts.AccessLog,
			Opts: workerOptions{controllerCls: opts.ControllerClass, metricsPerHost: opts.MetricsPerHost,
				http2Server: opts.HTTP2Server, behindSNI: opts.EnableSSLPassthrough, verbosity: opts.Verbosity}})
		if err != nil {
			return err
		}
		// Sockets, shared memory and the digest socket, whether or not
		// the workers ever start.
		defer workers.close()
		workersRef.Store(workers)
		metrics.registry.MustRegister(workers)
		if testHookGoWorkers != nil {
			testHookGoWorkers(workers)
		}
	}
	// With nginx the request metrics come from the shim (nginx_metrics.go).
	pxMetrics := metrics.registerer
	if nginxMode || workers != nil {
		pxMetrics = nil
	}
	pxCfg := proxy.Config{Picker: reg, Registerer: pxMetrics, MetricsPerHost: opts.MetricsPerHost,
		ErrorLog: func(msg string) { klog.Warning(msg) }, XNetHTTP2: opts.HTTP2Server == "x/net"}
	if opts.AccessLog != nil && !nginxMode && workers == nil {
		// Buffered, so a slow reader of standard output never holds a
		// request; lines that do not fit are dropped and counted.
		logw := proxy.NewLogWriter(opts.AccessLog, 0)
		defer func() { _ = logw.Close() }()
		pxCfg.AccessLog = logw
		if err := registerAccessLogDropped(metrics.registry, logw); err != nil {
			return err
		}
	}
	px, err := proxy.New(pxCfg)
	if err != nil {
		return err
	}
	// The L4 data plane: TCP services always, SSL passthrough on the HTTPS
	// port with --enable-ssl-passthrough.
	l4cfg := tcpproxy.Config{Picker: reg, Registerer: metrics.registerer, EventLoops: opts.L4EventLoops, BusyPoll: opts.L4BusyPoll, LoopProcs: idleSpinReserve}
	switch {
	case opts.EnableSSLPassthrough && nginxMode:
		l4cfg.HTTPSFallback = passthroughFallback(opts)
	case opts.EnableSSLPassthrough && workers != nil:
		_, l4cfg.HTTPSFallback = workers.addrs()
	case opts.EnableSSLPassthrough:
		// TLS that is not passed through reaches the Go proxy on a loopback
		// listener, behind a PROXY v2 header carrying the client address
		// (ingress-nginx's port 442 with proxy_protocol).
		if l4cfg.HTTPSFallback, err = serveBehindSNI(ctx, px.ServeTLS, errc); err != nil {
			return err
		}
	}
	l4, err := tcpproxy.New(l4cfg)
	if err != nil {
		return err
	}
	history := &statuspage.History{}
	// use-proxy-protocol: the client listeners read PROXY headers.
	pp := &proxyProtocolListeners{router: l4.SetSNIProxyProtocol}
	ctrl, err := controlplane.New(controlplane.Config{
		Client: client,
		Build: builder.Options{
			ControllerClass: opts.ControllerClass, IngressClass: opts.IngressClass,
			WatchNamespace: opts.WatchNamespace, DefaultBackendService: opts.DefaultBackendService,
			DefaultSSLCertificate: opts.DefaultSSLCertificate,
			IngressClassByName:    opts.IngressClassByName, WatchIngressWithoutClass: opts.WatchIngressWithoutClass,
		},
		ConfigMap:            opts.ConfigMap,
		SyncRateLimit:        opts.SyncRateLimit,
		TCPServicesConfigMap: opts.TCPServicesConfigMap, UDPServicesConfigMap: opts.UDPServicesConfigMap,
		PublishService: opts.PublishService, PublishStatusAddress: opts.PublishStatusAddress,
		// The Lease lives in the pod's namespace, as ingress-nginx's does.
		ElectionID: opts.ElectionID, ElectionNamespace: os.Getenv("POD_NAMESPACE"),
		LeaseDuration: opts.ElectionTTL, RenewDeadline: opts.ElectionTTL / 2, RetryPeriod: opts.ElectionTTL / 4,
		ResyncPeriod: opts.SyncPeriod,
		Sinks: []controlplane.Sink{controlplane.SinkFunc(func(_ context.Context, cfg *model.Configuration, ch controlplane.Change) error {
			// Balancers first, so routes never name a backend the balancer
			// does not know yet. Per-backend errors were already reported by
			// the builder; the registry keeps serving the rest.
			switch {
			case ngx != nil:
				// nginxcompat syncs the balancer before it renders: the
				// shim never asks for a backend Go does not know.
				if err := ngx.update(ctx, cfg, ch); err != nil {
					klog.ErrorS(err, "nginx configuration not applied; the running one keeps serving")
					return err
				}
			case workers != nil:
				// The balancers here serve TCP services and SSL
				// passthrough; the workers' serve HTTP.
				if err := reg.ApplyChanged(cfg.Backends, ch.Backends); err != nil {
					klog.ErrorS(err, "some backends were not applied")
				}
				if err := workers.update(cfg, ch); err != nil {
					klog.ErrorS(err, "configuration not sent to the go workers; they keep serving the one before")
					return err
				}
			default:
				applyGoPlane(reg, px, cfg, ch)
			}
			if !ch.BackendsOnly() {
				// Settings, passthrough hosts and L4 services are not
				// backends: unchanged by a backends-only change.
				pp.update(&cfg.Global)
				l4.Update(tcpproxy.RoutesFrom(cfg))
			}
			if err := l4.SyncTCP(ctx, opts.ListenAddress); err != nil {
				klog.ErrorS(err, "some TCP services could not listen")
			}
			if err := l4.SyncUDP(ctx, opts.ListenAddress); err != nil {
				klog.ErrorS(err, "some UDP services could not listen")
			}
			return nil
		})},
		OnSync: func(e controlplane.SyncEvent) {
			metrics.observeSync(e)
			reason := "endpoints or backends changed"
			if e.Change.Reload {
				reason = "servers or locations changed"
			}
			ev := statuspage.Event{Time: e.Time, Kind: "sync", Duration: e.Duration, Reason: fmt.Sprintf("version %d: %s", e.Version, reason)}
			if e.Err != nil {
				ev.Err = e.Err.Error()
			}
			history.Record(ev)
		},
	})
	if err != nil {
		return err
	}
	metrics.ingress.attach(ctrl)
	if opts.ValidatingWebhook != "" {
		if err := serveWebhook(ctx, opts, ctrl, metrics.registerer, errc); err != nil {
			return err
		}
	}

	statusLn, err := net.Listen("tcp", net.JoinHostPort(opts.StatusAddress, strconv.Itoa(opts.StatusPort)))
	if err != nil {
		return fmt.Errorf("listen for status: %w", err)
	}
	dataPlane := ngx.readiness()
	if workers != nil {
		dataPlane = workers.ready
	}
	statusSrv := &http.Server{Handler: statusMux(ctrl, reg, history, metrics, dataPlane), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := statusSrv.Serve(statusLn); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	if addr := profilerAddr(opts); addr != "" {
		go serveProfiler(ctx, addr)
	}
	go func() { errc <- runSource(ctx) }()
	go func() { errc <- ctrl.Run(ctx) }()
	// The ports are bound at once (a port in use fails the start), but
	// connections are accepted only once the first configuration is
	// served: before it the Go plane answered 404 for every host (test/chaos
	// counted 41 per restart), and the SNI router had no nginx behind it.
	// They wait in the listen backlog meanwhile.
	// readsProxy: the listener reads PROXY headers under
	// use-proxy-protocol (the data planes' own; the SNI router reads its
	// own, pp.router).
	afterReady := func(ln net.Listener, serve func(context.Context, net.Listener) error, readsProxy bool) {
		go func() {
			select {
			case <-ctrl.Ready():
				if readsProxy {
					// Wrapped only now, so no connection is taken
					// before the first configuration says whether it
					// opens with a header.
					ln = pp.wrap(ln)
				}
				errc <- serve(ctx, ln)
			case <-ctx.Done():
				ln.Close()
			}
		}()
	}
	if nginxMode {
		httpAddr := net.JoinHostPort(opts.ListenAddress, strconv.Itoa(opts.HTTPPort))
		httpsAddr := net.JoinHostPort(opts.ListenAddress, strconv.Itoa(opts.HTTPSPort))
		if opts.EnableSSLPassthrough {
			httpsLn, err := listenClients(ctx, httpsAddr)
			if err != nil {
				return fmt.Errorf("listen for HTTPS (SNI router): %w", err)
			}
			// nginx reads the headers of its own listeners; the SNI
			// router reads its own (pp.router).
			afterReady(httpsLn, l4.ServeSNI, false)
		}
		klog.InfoS("switchyard started with nginx", "http", httpAddr, "https", httpsAddr, "status", statusLn.Addr().String(), "version", versionString())
		return waitServing(ctx, cancel, ctrl.Ready(), errc, ready, listening{HTTP: httpAddr, HTTPS: httpsAddr, Status: statusLn.Addr().String()}, statusSrv)
	}

	if workers != nil {
		return serveWorkers(ctx, cancel, opts, workers, errc, ready, statusLn, statusSrv, afterReady, l4.ServeSNI)
	}
	httpLn, err := listenClients(ctx, net.JoinHostPort(opts.ListenAddress, strconv.Itoa(opts.HTTPPort)))
	if err != nil {
		return fmt.Errorf("listen for HTTP: %w", err)
	}
	httpsLn, err := listenClients(ctx, net.JoinHostPort(opts.ListenAddress, strconv.Itoa(opts.HTTPSPort)))
	if err != nil {
		httpLn.Close()
		return fmt.Errorf("listen for HTTPS: %w", err)
	}
	if opts.EnableSSLPassthrough {
		// The HTTPS port routes by SNI; TLS that is not passed through goes
		// to the Go proxy behind it (serveBehindSNI). The router reads
		// PROXY headers itself (pp.router).
		afterReady(httpsLn, l4.ServeSNI, false)
	} else {
		afterReady(httpsLn, px.ServeTLS, true)
	}
	afterReady(httpLn, px.Serve, true)
	klog.InfoS("switchyard started", "http", httpLn.Addr().String(), "https", httpsLn.Addr().String(), "status", statusLn.Addr().String(), "version", versionString())
	return waitServing(ctx, cancel, ctrl.Ready(), errc, ready, listening{HTTP: httpLn.Addr().String(), HTTPS: httpsLn.Addr().String(), Status: statusLn.Addr().String()}, statusSrv)
}

// serveWorkers is the end of serveController with --go-workers: the
// workers serve HTTP and HTTPS (the SNI router here, with SSL
// passthrough) until ctx ends, and have stopped when it returns.
func serveWorkers(ctx context.Context, cancel context.CancelFunc, opts controllerOptions, workers *goWorkers,
	errc chan error, ready chan<- listening, statusLn net.Listener, statusSrv *http.Server,
	afterReady func(net.Listener, func(context.Context, net.Listener) error, bool), serveSNI func(context.Context, net.Listener) error) error {
	httpAddr, httpsAddr := workers.addrs()
	if opts.EnableSSLPassthrough {
		httpsLn, err := listenClients(ctx, net.JoinHostPort(opts.ListenAddress, strconv.Itoa(opts.HTTPSPort)))
		if err != nil {
			return fmt.Errorf("listen for HTTPS (SNI router): %w", err)
		}
		afterReady(httpsLn, serveSNI, false)
		httpsAddr = httpsLn.Addr().String()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		workers.run(ctx)
	}()
	defer func() { <-done }()
	klog.InfoS("switchyard started with go workers", "workers", len(workers.procs), "http", httpAddr, "https", httpsAddr, "status", statusLn.Addr().String(), "version", versionString())
	// Ready once every worker serves the first configuration.
	return waitServing(ctx, cancel, workers.serving, errc, ready, listening{HTTP: httpAddr, HTTPS: httpsAddr, Status: statusLn.Addr().String()}, statusSrv)
}

// applyGoPlane hands a configuration to the Go plane's balancers, then its
// routes (so routes never name a backend the balancer does not know); an
// endpoint change names the backends it changed, and the balancer builds
// those alone. Per-backend errors were already reported by the builder.
func applyGoPlane(reg *balancer.Registry, px *proxy.Proxy, cfg *model.Configuration, ch controlplane.Change) {
	if err := reg.ApplyChanged(cfg.Backends, ch.Backends); err != nil {
		klog.ErrorS(err, "some backends were not applied")
	}
	if ch.BackendsOnly() {
		px.UpdateBackends(cfg)
	} else {
		px.Update(cfg)
	}
}

// registerAccessLogDropped exports the count of access log lines logw
// dropped.
func registerAccessLogDropped(reg prometheus.Registerer, logw *proxy.LogWriter) error {
	if err := reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "switchyard_access_log_dropped_lines_total",
		Help: "Access log lines dropped because standard output did not keep up (the Go data plane).",
	}, func() float64 { return float64(logw.Dropped()) })); err != nil {
		return fmt.Errorf("register access log metrics: %w", err)
	}
	return nil
}

// testHookGoWorkers, when set, receives the workers of --go-workers.
var testHookGoWorkers func(*goWorkers)

// clientListen listens for clients as nginx's "listen" does by default:
// no TCP keep-alive probes on accepted connections (Go turns them on,
// which costs four setsockopt calls per connection); idle clients are
// closed by the keep-alive timeout instead.
var clientListen = net.ListenConfig{KeepAlive: -1}

// listenClients binds a data plane port (HTTP, HTTPS or the SNI router).
func listenClients(ctx context.Context, addr string) (net.Listener, error) {
	return clientListen.Listen(ctx, "tcp", addr)
}

// waitServing reports the bound addresses once served is closed (the first
// configuration is served), then waits for the end of ctx or the first error.
func waitServing(ctx context.Context, cancel context.CancelFunc, served <-chan struct{}, errc <-chan error, ready chan<- listening, addrs listening, statusSrv *http.Server) error {
	select {
	case <-served:
		if ready != nil {
			ready <- addrs
		}
	case err := <-errc:
		cancel()
		return err
	case <-ctx.Done():
	}
	var first error
	select {
	case first = <-errc:
	case <-ctx.Done():
	}
	cancel()
	shutdown, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	_ = statusSrv.Shutdown(shutdown)
	return first
}

// restConfig is the API server's client configuration as ingress-nginx
// builds it: --apiserver-host over --kubeconfig's server (either over the
// in-cluster one), and --certificate-authority as the server's CA.
func restConfig(opts controllerOptions) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags(opts.APIServerHost, opts.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	if opts.CertificateAuthority != "" {
		cfg.TLSClientConfig = rest.TLSClientConfig{CAFile: opts.CertificateAuthority}
	}
	cfg.UserAgent = "switchyard/" + version
	return cfg, nil
}

// clusterClient returns the client to watch, and a function running whatever
// feeds it (the manifest watcher; a no-op for a real API server).
func clusterClient(opts controllerOptions) (kubernetes.Interface, func(context.Context) error, error) {
	if opts.Manifests != "" {
		src, err := manifests.Load(manifests.Config{Dir: opts.Manifests, OnError: func(path string, err error) {
			klog.ErrorS(err, "manifest skipped", "file", path)
		}})
		if src == nil {
			return nil, nil, err
		}
		if err != nil {
			klog.ErrorS(err, "some manifests were skipped")
		}
		return src.Client(), src.Run, nil
	}
	restCfg, err := restConfig(opts)
	if err != nil {
		return nil, nil, err
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return client, func(ctx context.Context) error { <-ctx.Done(); return nil }, nil
}

// statusMux serves the status port: the status page, health, readiness and
// metrics. dataPlane, when not nil, says why the data plane does not serve
// (nginx: the master we started is not up or not configured by us); /readyz
// answers 503 with it (issue 20).
func statusMux(ctrl *controlplane.Controller, reg *balancer.Registry, history *statuspage.History, m *controllerMetrics, dataPlane func() error) http.Handler {
	mux := http.NewServeMux()
	page := statuspage.New(statuspage.Config{History: history, Snapshot: func() statuspage.Snapshot {
		return snapshot(ctrl, reg)
	}})
	mux.Handle("/", page)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-ctrl.Ready():
		default:
			http.Error(w, "waiting for the first sync", http.StatusServiceUnavailable)
			return
		}
		if dataPlane != nil {
			if err := dataPlane(); err != nil {
				http.Error(w, "data plane not serving: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("/metrics", m.handler)
	registerDebugHandlers(mux, ctrl, reg)
	return mux
}

// snapshot turns the current Configuration and balancer state into what the
// status page shows.
func snapshot(ctrl *controlplane.Controller, reg *balancer.Registry) statuspage.Snapshot {
	var s statuspage.Snapshot
	select {
	case <-ctrl.Ready():
		s.Ready = true
	default:
	}
	if cfg := ctrl.Current(); cfg != nil {
		s.Version = cfg.Version
		for _, srv := range cfg.Servers {
			out := statuspage.Server{Host: srv.Hostname, TLS: srv.TLS != nil}
			for _, l := range srv.Locations {
				p := statuspage.Path{Path: l.Path, PathType: string(l.PathType), Backend: l.Backend}
				if d := l.Settings().Denied; d != nil {
					p.Denied = d.Field
				}
				if l.Ingress.Name != "" {
					// Named as the errors below, so the page lists the
					// path under its Ingress.
					p.Ingress = l.Ingress.Kind + " " + l.Ingress.Namespace + "/" + l.Ingress.Name
				}
				out.Paths = append(out.Paths, p)
			}
			s.Servers = append(s.Servers, out)
		}
		for _, e := range cfg.Errors {
			obj := e.Object.Kind + " " + e.Object.Namespace + "/" + e.Object.Name
			reason := e.Reason
			if reason == "" {
				reason = "InvalidConfiguration"
			}
			s.Errors = append(s.Errors, statuspage.ObjError{Object: obj, Reason: reason, Field: e.Field, Message: e.Message})
		}
	}
	for _, b := range reg.Backends() {
		out := statuspage.Backend{Name: b.Name, Algorithm: b.Algorithm, Alternatives: b.Alternatives}
		for _, e := range b.Endpoints {
			out.Endpoints = append(out.Endpoints, statuspage.Endpoint{Address: e.Address, Picks: e.Requests, Failures: e.Failures, InFlight: e.InFlight, EWMA: e.EWMA})
		}
		s.Backends = append(s.Backends, out)
	}
	return s
}

// controllerMetrics are the controller's Prometheus metrics, with
// ingress-nginx's names where one exists.
type controllerMetrics struct {
	// registry is gathered by /metrics; registerer wraps it with
	// ingress-nginx's controller_class, controller_namespace and
	// controller_pod labels, and everything but the Go runtime and process
	// collectors (which ingress-nginx leaves unlabelled) registers there.
	registry   *prometheus.Registry
	registerer prometheus.Registerer
	// handler serves the registry and the families written as text
	// (metrics_text.go).
	handler      *metricsHandler
	ingress      *ingressCollector
	syncs        *prometheus.CounterVec
	errors       prometheus.Counter
	lastOK       prometheus.Gauge
	lastOKTime   prometheus.Gauge
	syncDuration prometheus.Histogram
}

// controllerMetricsConfig configures newControllerMetrics.
type controllerMetricsConfig struct {
	// Balancer is exported per endpoint. Required.
	Balancer *balancer.Registry
	// SyncMetrics exports ingress-nginx's reload metrics (success, errors,
	// config_last_reload_successful and its timestamp) counting syncs; with
	// nginx, nginxcompat exports them counting real reloads.
	SyncMetrics bool
	// ControllerClass is the controller_class label (--controller-class).
	ControllerClass string
	// ElectionID names the Lease in leader_election_status.
	ElectionID string
	// ProcessPIDs lists the processes of the nginx_process_* metrics; nil
	// exports none.
	ProcessPIDs func() []int
	// NginxStatusURL is nginx's stub_status page; empty exports no
	// connection metrics.
	NginxStatusURL string
	// IdleSpinStats reads the counters of the Go runtime's idle spin
	// (--go-idle-spin); nil exports none.
	IdleSpinStats func() (spins, found, spentNS int64)
}

func newControllerMetrics(cfg controllerMetricsConfig) *controllerMetrics {
	m := &controllerMetrics{
		registry: prometheus.NewRegistry(),
		ingress:  newIngressCollector(cfg.ControllerClass, cfg.ElectionID, controllerLabels(cfg.ControllerClass)),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "nginx_ingress_controller", Name: "success",
			Help: "Cumulative number of successful configuration syncs (ingress-nginx: reload operations).",
		}, []string{"kind"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "nginx_ingress_controller", Name: "errors",
			Help: "Cumulative number of failed configuration syncs (ingress-nginx: errors during reload operations).",
		}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "nginx_ingress_controller", Name: "config_last_reload_successful",
			Help: "Whether the last configuration sync was successful.",
		}),
		lastOKTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "nginx_ingress_controller", Name: "config_last_reload_successful_timestamp_seconds",
			Help: "Timestamp of the last successful configuration sync.",
		}),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "switchyard", Name: "sync_duration_seconds",
			Help: "Time from the start of a sync to the sinks having the configuration.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	labels := controllerLabels(cfg.ControllerClass)
	m.registerer = prometheus.WrapRegistererWith(labels, m.registry)
	m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.registerer.MustRegister(m.syncDuration)
	// The ingress collector carries the controller labels itself
	// (metrics_cache.go); the families with a series per endpoint, Ingress
	// or TLS host are written by the handler (metrics_text.go), and their
	// names reserved in the registry.
	m.registry.MustRegister(m.ingress)
	bal := &balancerMetrics{reg: cfg.Balancer}
	families := slices.Concat(bal.textFamilies(), ingressTextFamilies)
	slices.SortFunc(families, func(a, b textFamily) int { return strings.Compare(a.name, b.name) })
	m.registry.MustRegister(reserve(families, labels))
	m.handler = &metricsHandler{reg: m.registry, families: families, constLabels: escapedLabels(labels), balancer: bal, ingress: m.ingress}
	if cfg.ProcessPIDs != nil {
		m.registerer.MustRegister(processCollector{pids: cfg.ProcessPIDs})
	}
	if cfg.NginxStatusURL != "" {
		m.registerer.MustRegister(newStubStatusCollector(cfg.NginxStatusURL))
	}
	if stats := cfg.IdleSpinStats; stats != nil {
		m.registerer.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "switchyard", Name: "go_idle_spins_total",
				Help: "Times a Go runtime thread that ran out of work kept looking for more (--go-idle-spin)."},
				func() float64 { n, _, _ := stats(); return float64(n) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "switchyard", Name: "go_idle_spins_found_total",
				Help: "Idle spins that found work before their window passed."},
				func() float64 { _, n, _ := stats(); return float64(n) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "switchyard", Name: "go_idle_spin_seconds_total",
				Help: "Time Go runtime threads spent in idle spins."},
				func() float64 { _, _, ns := stats(); return float64(ns) / 1e9 }),
		)
	}
	if cfg.SyncMetrics {
		m.registerer.MustRegister(m.syncs, m.errors, m.lastOK, m.lastOKTime)
	}
	return m
}

func (m *controllerMetrics) observeSync(e controlplane.SyncEvent) {
	if e.Err != nil {
		m.errors.Inc()
		m.lastOK.Set(0)
		return
	}
	kind := "dynamic"
	if e.Change.Reload {
		kind = "structural"
	}
	m.syncs.WithLabelValues(kind).Inc()
	m.lastOK.Set(1)
	m.lastOKTime.Set(float64(e.Time.Unix()))
	m.syncDuration.Observe(e.Duration.Seconds())
}
