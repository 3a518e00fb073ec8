package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// BenchmarkProxyHTTP1 proxies GET requests from a fasthttp client through
// an in-memory listener to a fasthttp backend on loopback, with and without
// the access log (to io.Discard). allocs/op counts the whole process
// (client, proxy and backend); fasthttp's client and server allocate
// nothing in steady state, so it is the proxy's figure.
func BenchmarkProxyHTTP1(b *testing.B) {
	b.Run("accesslog=off", func(b *testing.B) { benchProxy(b, Config{}) })
	// Every response body streamed (as for a limit-connections or
	// limit-rate route): under load this found upBody put back in its
	// pool twice (TestUpBodyClosedOnce).
	b.Run("bodies-streamed", func(b *testing.B) { benchProxy(b, Config{BodyBufferBytes: 1}) })
	b.Run("accesslog=on", func(b *testing.B) { benchProxy(b, Config{AccessLog: io.Discard}) })
	b.Run("metrics=on", func(b *testing.B) { benchProxy(b, Config{Registerer: prometheus.NewRegistry()}) })
	// As the product runs (cmd/switchyard/controller.go): ingress-nginx's
	// request metrics and the default access log through a LogWriter.
	b.Run("metrics,accesslog=LogWriter", func(b *testing.B) {
		w := NewLogWriter(io.Discard, 0)
		b.Cleanup(func() { _ = w.Close() })
		benchProxy(b, Config{Registerer: prometheus.NewRegistry(), AccessLog: w})
	})
	// A custom log-format-upstream reading most variables, JSON-escaped.
	b.Run("accesslog=custom", func(b *testing.B) {
		benchProxyWith(b, Config{AccessLog: io.Discard}, func(cfg *model.Configuration) {
			cfg.Global.AccessLogFormat = benchLogFormat(b)
		})
	})
	// A limit-rps route (high enough never to refuse) with the access log
	// and metrics on: what issue 19 asks stay at 0 allocations.
	b.Run("limit-rps,accesslog,metrics", func(b *testing.B) {
		benchProxyWith(b, Config{AccessLog: io.Discard, Registerer: prometheus.NewRegistry()}, func(cfg *model.Configuration) {
			for i := range cfg.Servers {
				for j := range cfg.Servers[i].Locations {
					cfg.Servers[i].Locations[j].RateLimit = &model.RateLimit{Zone: "bench", RPS: 1 << 30, BurstMultiplier: 5}
				}
			}
		})
	})
	// limit-connections (high enough never to refuse): each request is
	// counted and its body streamed, so the count lasts until it is
	// written.
	b.Run("limit-connections,accesslog,metrics", func(b *testing.B) {
		benchProxyWith(b, Config{AccessLog: io.Discard, Registerer: prometheus.NewRegistry()}, func(cfg *model.Configuration) {
			for i := range cfg.Servers {
				for j := range cfg.Servers[i].Locations {
					cfg.Servers[i].Locations[j].RateLimit = &model.RateLimit{Zone: "bench", Connections: 1 << 20, BurstMultiplier: 5}
				}
			}
		})
	})
}

// benchConfig runs a fasthttp backend answering a short body and serves
// it at bench.example.com.
func benchConfig(b *testing.B) *model.Configuration {
	beLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	body := []byte("hello from the backend")
	be := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBody(body) }}
	go func() { _ = be.Serve(beLn) }()
	b.Cleanup(func() { _ = be.Shutdown() })
	return oneHost("bench.example.com", beLn.Addr().String())
}

func benchProxy(b *testing.B, pc Config) { benchProxyWith(b, pc, nil) }

// benchProxyWith is benchProxy with the configuration edited by edit first.
func benchProxyWith(b *testing.B, pc Config, edit func(*model.Configuration)) {
	cfg := benchConfig(b)
	if edit != nil {
		edit(cfg)
	}
	reg := balancer.NewRegistry(balancer.Config{})
	if err := reg.Apply(cfg.Backends); err != nil {
		b.Fatal(err)
	}
	pc.Picker = reg
	p, err := New(pc)
	if err != nil {
		b.Fatal(err)
	}
	p.Update(cfg)
	ln := fasthttputil.NewInmemoryListener()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, ln) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("serve: %v", err)
		}
	})

	c := &fasthttp.HostClient{Addr: "bench.example.com", Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://bench.example.com/item")
		for pb.Next() {
			if err := c.Do(req, resp); err != nil {
				b.Fatal(err)
			}
			if resp.StatusCode() != 200 {
				b.Fatalf("got status %d; want 200: %s", resp.StatusCode(), resp.Body())
			}
		}
	})
}

// BenchmarkProxyHTTP2 proxies GET requests from a net/http HTTP/2 client
// over TLS (one connection, parallel streams) to the same fasthttp backend
// as BenchmarkProxyHTTP1. allocs/op includes the client's and the HTTP/2
// server's.
func BenchmarkProxyHTTP2(b *testing.B) {
	p, _ := newProxy(b, benchConfig(b), Config{})
	url := "https://" + serve(b, p.ServeTLS) + "/item"
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true} //nolint:gosec // fake certificate
	b.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Host = "bench.example.com"
			resp, err := c.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
				b.Fatalf("got %s %d; want HTTP/2 200", resp.Proto, resp.StatusCode)
			}
		}
	})
}
