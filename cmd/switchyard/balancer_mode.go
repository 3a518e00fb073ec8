package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/balancer/picksock"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/nginxcompat"
	"k8s.io/klog/v2"
)

// runBalancer is the drop-in mode beside an existing ingress-nginx: it serves
// the ingress-nginx /configuration API (which ingress-nginx's controller
// POSTs backends to, through nginx) and the pick socket the Lua shim asks,
// both on unix sockets, and nothing else.
func runBalancer(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("switchyard balancer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configSocket := fs.String("configuration-socket", "/var/run/switchyard/configuration.sock", "unix socket serving the ingress-nginx /configuration API")
	pickSocket := fs.String("pick-socket", "/var/run/switchyard/pick.sock", "unix socket the Lua shim asks for peers")
	gid := fs.Int("socket-gid", -1, "group that owns both sockets (nginx workers' group); -1 keeps the process's")
	state := fs.String("state-file", "/var/run/switchyard/backends.json", "where the last accepted backends payload is kept, so a restarted balancer serves at once; empty disables")
	streamAddr := fs.String("stream-address", "", "serve ingress-nginx's TCP/UDP stream configuration socket (spec 1.6; ingress-nginx uses 127.0.0.1:10247) on this loopback address; empty disables (ingress-nginx's own stream Lua keeps it)")
	pprofAddr := fs.String("pprof-address", "", "serve Go's /debug/pprof on this loopback address (host:port); empty disables")
	metricsAddr := fs.String("metrics-address", "", "serve /metrics on this address (host:port): ingress-nginx's request metrics from the Lua shim, when its request_metrics option is on; empty disables")
	v := fs.Int("v", 0, "log verbosity")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *pprofAddr != "" {
		ln, err := listenLoopback(*pprofAddr)
		if err != nil {
			fmt.Fprintf(stderr, "switchyard balancer: --pprof-address: %v\n", err)
			return 2
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		go func() { _ = (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(ln) }()
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "switchyard balancer: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	klogFlags(*v)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *streamAddr != "" {
		ln, err := listenLoopback(*streamAddr)
		if err != nil {
			fmt.Fprintf(stderr, "switchyard balancer: --stream-address: %v\n", err)
			return 2
		}
		// Stream backends live in a registry of their own: a stream payload
		// replaces all of them and must not touch the HTTP backends.
		streams := balancer.NewRegistry(balancer.Config{})
		go func() {
			err := nginxcompat.ServeStream(ctx, ln, nginxcompat.StreamConfig{Backends: streams, OnError: func(err error) {
				klog.InfoS("stream configuration refused", "error", err)
			}})
			if err != nil {
				klog.ErrorS(err, "stream configuration socket")
			}
		}()
	}
	if err := serveBalancer(ctx, balancerSockets{config: *configSocket, pick: *pickSocket, gid: *gid, state: *state, metrics: *metricsAddr}, nil); err != nil {
		fmt.Fprintf(stderr, "switchyard balancer: %v\n", err)
		return 1
	}
	return 0
}

// listenLoopback listens on addr, which must name a loopback IP: debug
// endpoints are never exposed beyond the node.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("%q is not a loopback address", addr)
	}
	return net.Listen("tcp", addr)
}

// balancerSockets are the paths balancer mode serves on.
type balancerSockets struct {
	config, pick string
	gid          int
	// state is the file keeping the last accepted backends; "" for none.
	state string
	// metrics is the address serving /metrics; "" for none.
	metrics string
}

// persistingSyncer writes every accepted backends payload to a file after
// applying it: ingress-nginx's controller POSTs only on change, so without it
// a restarted balancer would answer 503 until the next change.
type persistingSyncer struct {
	reg  *balancer.Registry
	path string
	// picks, if set, pushes the new generation to the shims before the
	// POST is answered.
	picks *picksock.Server
}

// Apply applies typed backends (wire form, written to the state file).
func (p persistingSyncer) Apply(backends []*model.Backend) error {
	return p.Sync(balancer.WireBackends(backends))
}

// Sync applies a wire-form payload, then writes it to the state file.
func (p persistingSyncer) Sync(backends []balancer.Backend) error {
	err := p.reg.Sync(backends)
	if p.picks != nil {
		p.picks.Push()
	}
	if p.path == "" {
		return err
	}
	data, merr := json.Marshal(backends)
	if merr != nil {
		klog.ErrorS(merr, "encode backends for the state file")
		return err
	}
	if werr := writeFileAtomic(p.path, data, 0o600); werr != nil {
		klog.ErrorS(werr, "write the state file", "path", p.path)
	}
	return err
}

// restoreState applies the backends kept in path, if any.
func restoreState(reg *balancer.Registry, path string) {
	if path == "" {
		return
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		klog.ErrorS(err, "read the state file", "path", path)
		return
	}
	backends, err := balancer.DecodeBackends(data)
	if err != nil {
		klog.ErrorS(err, "the state file holds no valid backends; ignored", "path", path)
		return
	}
	if err := reg.Sync(backends); err != nil {
		klog.ErrorS(err, "some backends of the state file were refused", "path", path)
	}
	klog.InfoS("backends restored from the state file", "path", path, "backends", len(backends))
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// serveBalancer serves until ctx ends; ready, if set, is closed once both
// sockets accept connections.
func serveBalancer(ctx context.Context, socks balancerSockets, ready chan<- struct{}) error {
	configSocket, pickSocket, gid := socks.config, socks.pick, socks.gid
	reg := balancer.NewRegistry(balancer.Config{})
	restoreState(reg, socks.state)
	// The request metrics reach the server through requests, set (before
	// the server serves) once the metrics server, which exports the
	// server's frame counts, is up.
	var requests func(*picksock.RequestMetrics)
	picks := picksock.NewServer(picksock.Config{Picker: reg, GID: gid, Chown: gid >= 0, Requests: func(m *picksock.RequestMetrics) {
		if requests != nil {
			requests(m)
		}
	}})
	if socks.metrics != "" {
		m, stop, err := serveNginxMetrics(socks.metrics, newPickFrames(picks))
		if err != nil {
			return fmt.Errorf("metrics address: %w", err)
		}
		defer stop()
		requests = m.add
	}
	api, err := nginxcompat.NewConfigurationAPI(nginxcompat.APIConfig{Backends: persistingSyncer{reg: reg, path: socks.state, picks: picks}, OnError: func(path string, status int, err error) {
		klog.InfoS("configuration request refused", "path", path, "status", status, "error", err)
	}})
	if err != nil {
		return err
	}
	apiLn, err := nginxcompat.ListenUnix(configSocket, 0o660, gid)
	if err != nil {
		return fmt.Errorf("configuration socket: %w", err)
	}
	pickLn, err := picks.Listen(pickSocket)
	if err != nil {
		apiLn.Close()
		return fmt.Errorf("pick socket: %w", err)
	}
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() {
		if err := srv.Serve(apiLn); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	go func() {
		if err := picks.Serve(pickLn); err != nil && !errors.Is(err, net.ErrClosed) {
			errc <- err
		}
	}()
	klog.InfoS("switchyard balancer started", "configuration", configSocket, "pick", pickSocket)
	if ready != nil {
		close(ready)
	}
	var first error
	select {
	case <-ctx.Done():
	case first = <-errc:
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	_ = picks.Close()
	// The pick socket was bound under a temporary name and renamed into
	// place, so closing the listener does not unlink it.
	if err := os.Remove(pickSocket); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.ErrorS(err, "remove pick socket")
	}
	return first
}
