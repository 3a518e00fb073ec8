package proxy

import (
	"net/netip"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// benchLogFormatText is a custom log-format-upstream reading most of the
// variables the Go plane writes, as a JSON object.
const benchLogFormatText = `{"time": "$time_iso8601", "msec": $msec, "remote_addr": "$remote_addr", "user": "$remote_user", ` +
	`"request": "$request", "status": $status, "bytes_sent": $bytes_sent, "body": $body_bytes_sent, "host": "$host", ` +
	`"method": "$request_method", "uri": "$uri", "args": "$args", "scheme": "$scheme", "proto": "$server_protocol", ` +
	`"ua": "$http_user_agent", "id": "$req_id", "xff": "$proxy_add_x_forwarded_for", "ns": "$namespace", ` +
	`"ingress": "$ingress_name", "svc": "$service_name", "port": "$service_port", "upstream": "$proxy_upstream_name", ` +
	`"peer": "$upstream_addr", "ustatus": "$upstream_status", "utime": "$upstream_response_time", ` +
	`"ct": "$sent_http_content_type", "conn": $connection, "reqs": $connection_requests}`

func benchLogFormat(b *testing.B) model.LogFormat {
	segs, err := model.ParseLogFormat(benchLogFormatText)
	if err != nil {
		b.Fatal(err)
	}
	return model.LogFormat{Segments: segs, Escape: model.EscapeJSON}
}

// BenchmarkLogLine is one access log line's formatting, in the default
// format and in a custom one (benchLogFormatText, escape=json).
func BenchmarkLogLine(b *testing.B) {
	loc := &model.Location{Path: "/", Backend: "bench-app-80", Service: "app", ServicePort: "80",
		Ingress: model.ObjectRef{Namespace: "bench", Name: "app"}}
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/item?q=1")
	ctx.Request.SetHost("app.bench")
	ctx.Request.Header.SetUserAgent(`wrk "quoted"`)
	ctx.Request.Header.Set("Referer", "http://ref.example/")
	ctx.Response.Header.SetContentType("text/plain")
	x := exchange{method: []byte("GET"), requestURI: []byte("/item?q=1"), proto: []byte("HTTP/1.1"),
		referer: []byte("http://ref.example/"), userAgent: []byte(`wrk "quoted"`), requestID: []byte("0123456789abcdef0123456789abcdef"),
		status: 200, bodySent: 22, respHeader: 120, reqLength: 120, remote: netip.MustParseAddr("127.0.0.1")}
	o := outcome{server: "app.bench", loc: loc, upstream: 180 * time.Microsecond, header: 170 * time.Microsecond,
		peer: "127.0.0.2:18381", upstreamStatus: 200, upstreamLength: 22}
	lr := logReq{h1: &ctx, end: time.Now()}
	for _, f := range []struct {
		name string
		f    *logFormat
	}{{"default", defaultLogFormat}, {"custom", newLogFormat(benchLogFormat(b))}} {
		b.Run(f.name, func(b *testing.B) {
			buf := make([]byte, 0, 2048)
			b.ReportAllocs()
			for b.Loop() {
				buf = f.f.appendLog(buf[:0], &x, &o, &lr, 250*time.Microsecond)
			}
			b.SetBytes(int64(len(buf)))
		})
	}
}
