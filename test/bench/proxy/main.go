// Command proxy is the Go side of test/bench/proxy.sh: "backend" serves a
// small static answer on each of the given addresses (the upstreams both
// nginx and the Go proxy forward to), "proxy" serves package proxy with a
// Configuration of one host, one Prefix "/" location and those backends
// (round_robin), as nginx's plain upstream block does. "floor" is the
// least any Go proxy with a goroutine per connection can do: it passes
// bodiless requests through byte for byte to its own upstream connection
// (round robin per client connection) and relays each Content-Length
// response, with no parsing beyond the head's end and no headers changed.
// Its figure against nginx bounds what package proxy can reach here.
//
// Usage:
//
//	proxy backend -listen 127.0.0.2:18081,127.0.0.3:18081
//	proxy proxy -listen 127.0.0.1:18090 -backends 127.0.0.2:18081,127.0.0.3:18081 -host bench.local
//	proxy floor -listen 127.0.0.1:18091 -backends 127.0.0.2:18081,127.0.0.3:18081
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/valyala/fasthttp"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/proxy"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: proxy backend|proxy|floor|auth [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	listen := fs.String("listen", "", "address(es) to listen on, comma-separated for backend")
	backends := fs.String("backends", "", "upstream addresses, comma-separated (proxy)")
	host := fs.String("host", "bench.local", "the Host the proxy routes (proxy)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (proxy, floor)")
	_ = fs.Parse(os.Args[2:])
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "proxy bench: cpu profile:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	var err error
	switch os.Args[1] {
	case "backend":
		err = runBackends(ctx, strings.Split(*listen, ","))
	case "proxy":
		err = runProxy(ctx, *listen, strings.Split(*backends, ","), *host)
	case "floor":
		err = runFloor(ctx, *listen, strings.Split(*backends, ","))
	case "auth":
		err = runAuth(ctx, *listen)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "proxy bench:", err)
		os.Exit(1)
	}
}

var body = []byte("hello from the backend\n")

// runAuth is an authentication service of oauth2-proxy's contract for
// test/bench/extauth.sh: 202 with X-Auth-Request-User for a request whose
// _oauth2_proxy cookie names a user, 401 otherwise; no Set-Cookie, so an
// auth-cache-key cache may keep the answer.
func runAuth(ctx context.Context, listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", listen, err)
	}
	s := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
		user := c.Request.Header.Cookie("_oauth2_proxy")
		if len(user) == 0 {
			c.SetStatusCode(fasthttp.StatusUnauthorized)
			return
		}
		c.Response.Header.SetBytesV("X-Auth-Request-User", user)
		c.SetStatusCode(fasthttp.StatusAccepted)
	}}
	context.AfterFunc(ctx, func() { _ = s.Shutdown() })
	return s.Serve(ln)
}

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
	var eps []model.Endpoint
	for _, b := range backends {
		h, p, err := net.SplitHostPort(b)
		if err != nil {
			return fmt.Errorf("backend %q: %w", b, err)
		}
		port, err := strconv.ParseUint(p, 10, 16)
		if err != nil || port == 0 {
			return fmt.Errorf("backend %q: port is not 1-65535", b)
		}
		eps = append(eps, model.Endpoint{Address: h, Port: uint16(port)})
	}
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "bench", Endpoints: eps}},
		Servers: []model.Server{{Hostname: host, Locations: []model.Location{{
			Path: "/", PathType: model.PathTypePrefix, Backend: "bench",
			LocationSettings: &model.LocationSettings{
				Proxy: model.Proxy{NextUpstreamTries: 3, ConnectTimeoutSeconds: 5, SendTimeoutSeconds: 60, ReadTimeoutSeconds: 60, BodySizeBytes: 1 << 20},
			},
		}}}},
	}
	reg := balancer.NewRegistry(balancer.Config{})
	if err := reg.Apply(cfg.Backends); err != nil {
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

func runFloor(ctx context.Context, listen string, backends []string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", listen, err)
	}
	context.AfterFunc(ctx, func() { _ = ln.Close() })
	for n := 0; ; n++ {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go floorConn(c, backends[n%len(backends)])
	}
}

// floorConn relays requests on c to one upstream connection of its own.
func floorConn(c net.Conn, backend string) {
	defer c.Close()
	up, err := net.Dial("tcp", backend)
	if err != nil {
		return
	}
	defer up.Close()
	cr, ur := bufio.NewReaderSize(c, 4096), bufio.NewReaderSize(up, 4096)
	var head, out []byte
	for {
		if head, err = readHead(cr, head[:0]); err != nil {
			return
		}
		if _, err := up.Write(head); err != nil {
			return
		}
		if out, err = readHead(ur, out[:0]); err != nil {
			return
		}
		n := contentLength(out)
		start := len(out)
		out = slices.Grow(out, n)[:start+n]
		if _, err := io.ReadFull(ur, out[start:]); err != nil {
			return
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// readHead appends to b the lines of r up to and including the empty one.
func readHead(r *bufio.Reader, b []byte) ([]byte, error) {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return b, err
		}
		b = append(b, line...)
		if len(line) <= 2 {
			return b, nil
		}
	}
}

// contentLength finds the Content-Length of a response head (0 if none).
func contentLength(head []byte) int {
	i := bytes.Index(head, []byte("Content-Length: "))
	if i < 0 {
		return 0
	}
	v := head[i+len("Content-Length: "):]
	v = v[:bytes.IndexByte(v, '\r')]
	n, _ := strconv.Atoi(string(v))
	return n
}
