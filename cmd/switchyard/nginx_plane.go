package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/balancer/picksock"
	"github.com/switchyard-proxy/switchyard/controlplane"
	"github.com/switchyard-proxy/switchyard/controlplane/digestauth"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/nginxcompat"
	"k8s.io/klog/v2"
)

// nginxPlane is --data-plane=nginx: Debian's nginx serves HTTP and HTTPS
// from a rendered nginx.conf whose Lua shim asks this process's balancer over
// the pick socket. Configurations go to nginxcompat.Controller, which syncs
// the balancer and reloads nginx only when the rendered file changes.
type nginxPlane struct {
	ctrl    *nginxcompat.Controller
	picks   *picksock.Server
	pickLn  net.Listener
	api     *http.Server
	digest  *nginxcompat.DigestHandler
	digSrv  *http.Server
	runOnce sync.Once
	runDone chan struct{} // closed when Run returned; nil before it starts
	errc    chan<- error
}

// nginxWorkerGID is the group nginx workers run as on Debian (nogroup): the
// pick socket is 0660 and owned by it.
const nginxWorkerGID = 65534

func newNginxPlane(opts controllerOptions, reg *balancer.Registry, registerer prometheus.Registerer, errc chan<- error) (*nginxPlane, error) {
	dir := opts.NginxDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("nginx dir: %w", err)
	}
	pickPath := filepath.Join(dir, "pick.sock")
	gid := -1
	if os.Geteuid() == 0 {
		gid = nginxWorkerGID
	}
	reqMetrics := newNginxRequestMetrics()
	if err := registerer.Register(reqMetrics); err != nil {
		return nil, fmt.Errorf("register request metrics: %w", err)
	}
	picks := picksock.NewServer(picksock.Config{Picker: reg, GID: gid, Chown: gid >= 0, Requests: reqMetrics.add})
	if err := registerer.Register(newPickFrames(picks)); err != nil {
		return nil, fmt.Errorf("register pick socket metrics: %w", err)
	}
	pickLn, err := picks.Listen(pickPath)
	if err != nil {
		return nil, err
	}
	// ingress-nginx's /configuration API, forwarded by nginx's loopback
	// status server, as the dbg tool and health checks expect it.
	apiPath := filepath.Join(dir, "configuration.sock")
	api, err := nginxcompat.NewConfigurationAPI(nginxcompat.APIConfig{Backends: reg, OnError: func(path string, status int, err error) {
		klog.InfoS("configuration request refused", "path", path, "status", status, "error", err)
	}})
	if err != nil {
		pickLn.Close()
		return nil, err
	}
	apiLn, err := nginxcompat.ListenUnix(apiPath, 0o660, gid)
	if err != nil {
		pickLn.Close()
		return nil, fmt.Errorf("configuration socket: %w", err)
	}
	apiSrv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := apiSrv.Serve(apiLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	// auth-type: digest: nginx asks the Go verifier through auth_request.
	digestPath := filepath.Join(dir, "digest.sock")
	digest := nginxcompat.NewDigestHandler(digestauth.NewVerifier(digestauth.VerifierConfig{}))
	digestLn, err := nginxcompat.ListenUnix(digestPath, 0o660, gid)
	if err != nil {
		pickLn.Close()
		_ = apiSrv.Close()
		return nil, fmt.Errorf("digest socket: %w", err)
	}
	digSrv := &http.Server{Handler: digest, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := digSrv.Serve(digestLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	listen := func(port int) []string {
		if opts.ListenAddress == "" {
			return []string{strconv.Itoa(port)}
		}
		return []string{net.JoinHostPort(opts.ListenAddress, strconv.Itoa(port))}
	}
	httpsListen := listen(opts.HTTPSPort)
	if opts.EnableSSLPassthrough {
		// The SNI router owns the HTTPS port (ingress-nginx's layout).
		httpsListen = []string{passthroughFallback(opts)}
	}
	ctrl, err := nginxcompat.NewController(nginxcompat.ControllerConfig{
		Nginx:    opts.NginxBinary,
		ConfPath: filepath.Join(dir, "nginx.conf"),
		Render: nginxcompat.RenderConfig{
			LuaDir:      opts.LuaDir,
			CertDir:     filepath.Join(dir, "certs"),
			AuthDir:     filepath.Join(dir, "auth"),
			TempDir:     filepath.Join(dir, "tmp"),
			PIDFile:     filepath.Join(dir, "nginx.pid"),
			HTTPListen:  listen(opts.HTTPPort),
			HTTPSListen: httpsListen,
			// Behind the SNI router, nginx's TLS takes a PROXY header.
			HTTPSProxyProtocol: opts.EnableSSLPassthrough,
			StatusListen:       net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.NginxStatusPort)),
			PickSocket:         pickPath,
			APISocket:          apiPath,
			DigestSocket:       digestPath,
			// Where the builder's upstream-default-backend points when no
			// --default-backend-service is set.
			DefaultBackendListen: "127.0.0.1:8181",
			RequestMetrics:       true,
			PickTimeout:          opts.PickTimeout,
			MetricsPerHost:       opts.MetricsPerHost,
			Resolvers:            systemResolvers(),
		},
		Backends:   api,
		Registerer: registerer,
		Logf:       func(format string, args ...any) { klog.InfoS(fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		pickLn.Close()
		_ = apiSrv.Close()
		_ = digSrv.Close()
		return nil, err
	}
	p := &nginxPlane{ctrl: ctrl, picks: picks, pickLn: pickLn, api: apiSrv, digest: digest, digSrv: digSrv, errc: errc}
	go func() {
		if err := picks.Serve(pickLn); err != nil {
			errc <- err
		}
	}()
	return p, nil
}

// update hands cfg to nginx (balancer sync, render, test, reload if the file
// changed) and starts the nginx master after the first accepted file.
func (p *nginxPlane) update(ctx context.Context, cfg *model.Configuration, ch controlplane.Change) error {
	if ch.BackendsOnly() && p.runDone != nil {
		// nginx.conf does not depend on backends: the balancer alone.
		return p.ctrl.UpdateBackendsChanged(cfg, ch.Backends)
	}
	// Before the reload, so the new nginx.conf's digest locations are known.
	p.digest.Update(cfg)
	if err := p.ctrl.Update(ctx, cfg); err != nil {
		return err
	}
	p.runOnce.Do(func() {
		p.runDone = make(chan struct{})
		go func() {
			defer close(p.runDone)
			if err := p.ctrl.Run(ctx); err != nil {
				p.errc <- err
			}
		}()
	})
	// The first sync succeeds (and /readyz turns 200) only once nginx
	// serves it; a failed wait is retried by the next sync.
	select {
	case <-p.ctrl.Serving():
		return nil
	case <-p.runDone:
		return errors.New("nginx stopped before serving its first configuration")
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return errors.New("nginx is not serving its first configuration yet")
	}
}

// readiness is what /readyz asks besides the first sync: nil (nothing) for
// the Go data plane, where p is nil; with nginx, whether the master this
// process started serves the file it installed last (nginxcompat Ready).
func (p *nginxPlane) readiness() func() error {
	if p == nil {
		return nil
	}
	return p.ctrl.Ready
}

// close waits for nginx to drain and exit (its Run context must have ended)
// and then stops the pick socket, which the draining workers still use.
func (p *nginxPlane) close() {
	p.runOnce.Do(func() {}) // no Run after this
	if p.runDone != nil {
		<-p.runDone
	}
	_ = p.api.Close()
	_ = p.digSrv.Close()
	_ = p.picks.Close()
	_ = os.Remove(filepath.Join(filepath.Dir(p.pickLn.Addr().String()), "pick.sock"))
}

// passthroughFallback is where nginx takes the TLS connections the SNI router
// does not pass through (--enable-ssl-passthrough).
func passthroughFallback(opts controllerOptions) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.SSLPassthroughProxyPort))
}

// systemResolvers are /etc/resolv.conf's name servers, for host names nginx
// resolves at request time (an auth-url's); none when it cannot be read.
func systemResolvers() []netip.Addr {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	return nginxcompat.ResolvConfResolvers(b)
}
