package proxy

import (
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// BenchmarkRequestAccounting is what a proxied request costs beyond
// proxying: the request metrics (ingress-nginx's histograms and summary)
// and the access log line, each alone and both, as ServeHTTP does them.
func BenchmarkRequestAccounting(b *testing.B) {
	rt := &route{loc: model.Location{Path: "/", Backend: "bench-app-80", Service: "app",
		Ingress: model.ObjectRef{Namespace: "bench", Name: "app"}}}
	loc := &rt.loc
	var resp fasthttp.Response
	resp.Header.SetContentType("text/plain")
	resp.Header.Set("Date", "Thu, 26 Nov 2026 09:00:00 GMT")
	resp.SetBody([]byte("hello from the backend"))
	x := exchange{method: []byte("GET"), requestURI: []byte("/item"), proto: []byte("HTTP/1.1"),
		userAgent: []byte("wrk"), requestID: []byte("0123456789abcdef0123456789abcdef"), status: 200,
		bodySent: 22, reqLength: 120, remote: netip.MustParseAddr("127.0.0.1")}
	o := outcome{server: "app.bench", loc: loc, rt: rt, upstream: 180 * time.Microsecond, connect: 0, header: 170 * time.Microsecond,
		peer: "127.0.0.2:18381", upstreamStatus: 200, upstreamLength: 22}
	start := time.Now()
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/item")
	ctx.Request.Header.SetUserAgent("wrk")
	lr := logReq{h1: &ctx, end: start}
	run := func(b *testing.B, cfg Config) {
		cfg.Picker = balancer.NewRegistry(balancer.Config{})
		p, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if p.metrics != nil {
				x.respHeader = len(resp.Header.Header())
				p.metrics.observe(&x, &o, 250*time.Microsecond, monoNow())
			}
			if p.cfg.AccessLog != nil {
				p.accessLog(defaultLogFormat, &x, &o, &lr, 250*time.Microsecond)
			}
		}
	}
	b.Run("metrics", func(b *testing.B) { run(b, Config{Registerer: prometheus.NewRegistry()}) })
	b.Run("accesslog", func(b *testing.B) { run(b, Config{AccessLog: io.Discard}) })
	b.Run("accesslog=LogWriter", func(b *testing.B) {
		w := NewLogWriter(io.Discard, 0)
		defer func() { _ = w.Close() }()
		run(b, Config{AccessLog: w})
	})
	b.Run("both", func(b *testing.B) {
		w := NewLogWriter(io.Discard, 0)
		defer func() { _ = w.Close() }()
		run(b, Config{Registerer: prometheus.NewRegistry(), AccessLog: w})
	})
}
