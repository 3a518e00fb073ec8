// Command proxy is the Go side of test/bench/proxy.sh: "backend" serves a
// small static answer on each of the given addresses (the upstreams both
// nginx and the Go proxy forward to), "proxy" serves package proxy with a
// Configuration of one host, one Prefix "/" location and those backends
// (round_robin), as nginx's plain upstream block does.
//
// Usage:
//
//	proxy backend -listen 127.0.0.2:18081,127.0.0.3:18081
//	proxy proxy -listen 127.0.0.1:18090 -backends 127.0.0.2:18081,127.0.0.3:18081 -host bench.local
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/valyala/fasthttp"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/proxy"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: proxy backend|proxy [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	listen := fs.String("listen", "", "address(es) to listen on, comma-separated for backend")
	backends := fs.String("backends", "", "upstream addresses, comma-separated (proxy)")
	host := fs.String("host", "bench.local", "the Host the proxy routes (proxy)")
	_ = fs.Parse(os.Args[2:])
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "backend":
		err = runBackends(ctx, strings.Split(*listen, ","))
	case "proxy":
		err = runProxy(ctx, *listen, strings.Split(*backends, ","), *host)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxy bench:", err)
		os.Exit(1)
	}
}

var body = []byte("hello from the backend\n")

func runBackends(ctx context.Context, addrs []string) error {
	errc := make(chan error, len(addrs))
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("listen %s: %w", a, err)
		}
		s := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
			c.SetContentType("text/plain")
			c.SetBody(body)
		}}
		go func() { errc <- s.Serve(ln) }()
		context.AfterFunc(ctx, func() { _ = s.Shutdown() })
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return nil
	}
}

func runProxy(ctx context.Context, listen string, backends []string, host string) error {
	var eps []balancer.Endpoint
	for _, b := range backends {
		h, p, err := net.SplitHostPort(b)
		if err != nil {
			return fmt.Errorf("backend %q: %w", b, err)
		}
		eps = append(eps, balancer.Endpoint{Address: h, Port: balancer.PortString(p)})
	}
	cfg := &model.Configuration{
		Backends: []balancer.Backend{{Name: "bench", Endpoints: eps}},
		Servers: []model.Server{{Hostname: host, Locations: []model.Location{{
			Path: "/", PathType: model.PathTypePrefix, Backend: "bench",
			Proxy: model.Proxy{NextUpstreamTries: 3, ConnectTimeoutSeconds: 5, SendTimeoutSeconds: 60, ReadTimeoutSeconds: 60, BodySizeBytes: 1 << 20},
		}}}},
	}
	reg := balancer.NewRegistry(balancer.Config{})
	if err := reg.Sync(cfg.Backends); err != nil {
		return fmt.Errorf("sync backends: %w", err)
	}
	p, err := proxy.New(proxy.Config{Picker: reg})
	if err != nil {
		return err
	}
	p.Update(cfg)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", listen, err)
	}
	return p.Serve(ctx, ln)
}
