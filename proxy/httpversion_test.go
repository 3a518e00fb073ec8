package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// lineBackend answers every request on a connection with a short HTTP/1.1
// response of protocol proto (no Connection field) naming the request line
// it got, and counts its connections. It never closes first: a proxy that
// reuses a connection after an HTTP/1.0 answer is seen doing so.
func lineBackend(t *testing.T, conns *atomic.Int32, proto string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					body := req.Method + " " + req.RequestURI + " " + req.Proto + " conn=" + req.Header.Get("Connection")
					resp := proto + " 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
					if _, err := c.Write([]byte(resp)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// proxy-http-version "1.0": the request line upstream says HTTP/1.0, for a
// buffered and a streamed body alike and whatever the client spoke; the
// fields are the same (no Connection field, as ingress-nginx clears it).
// An upstream answering HTTP/1.1 without Connection: close keeps its
// connection, as nginx keeps it (ngx_http_proxy_process_status_line marks
// only answers older than 1.1 to be closed).
func TestProxyHTTPVersion(t *testing.T) {
	var conns10, conns11, connsOld atomic.Int32
	b10, b11, bOld := lineBackend(t, &conns10, "HTTP/1.1"), lineBackend(t, &conns11, "HTTP/1.1"), lineBackend(t, &connsOld, "HTTP/1.0")
	old := loc("/", model.PathTypePrefix, "b10")
	old.Proxy.HTTP10 = true
	older := loc("/", model.PathTypePrefix, "bold")
	older.Proxy.HTTP10 = true
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "b10", Endpoints: endpoints(b10)}, {Name: "b11", Endpoints: endpoints(b11)}, {Name: "bold", Endpoints: endpoints(bOld)}},
		Servers: []model.Server{
			{Hostname: "old.test", Locations: []model.Location{old}},
			{Hostname: "new.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "b11")}},
			{Hostname: "older.test", Locations: []model.Location{older}},
		},
	}
	p, _ := newProxy(t, cfg, Config{BodyBufferBytes: 16})
	addr := serve(t, p.Serve)
	for _, tc := range []struct {
		name, host, line, body, want string
	}{
		{"1.0 buffered", "old.test", "GET /a HTTP/1.1", "", "GET /a HTTP/1.0 conn="},
		{"1.0 streamed", "old.test", "POST /b HTTP/1.1", strings.Repeat("x", 100), "POST /b HTTP/1.0 conn="},
		{"1.0 from a 1.0 client", "old.test", "GET /c HTTP/1.0", "", "GET /c HTTP/1.0 conn="},
		{"1.0 to an HTTP/1.0 server", "older.test", "GET /a HTTP/1.1", "", "GET /a HTTP/1.0 conn="},
		{"1.0 to an HTTP/1.0 server again", "older.test", "GET /b HTTP/1.1", "", "GET /b HTTP/1.0 conn="},
		{"1.1 buffered", "new.test", "GET /a HTTP/1.1", "", "GET /a HTTP/1.1 conn="},
		{"1.1 streamed from a 1.0 client", "new.test", "POST /b HTTP/1.0", strings.Repeat("x", 100), "POST /b HTTP/1.1 conn="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req := tc.line + "\r\nHost: " + tc.host + "\r\nConnection: close\r\n"
			if tc.body != "" {
				req += "Content-Length: " + strconv.Itoa(len(tc.body)) + "\r\n"
			}
			if _, err := c.Write([]byte(req + "\r\n" + tc.body)); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			_, _ = got.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || got.String() != tc.want {
				t.Errorf("got %d %q; want 200 %q", resp.StatusCode, got.String(), tc.want)
			}
		})
	}
	if n := conns10.Load(); n != 1 {
		t.Errorf("the HTTP/1.0 upstream answering HTTP/1.1 saw %d connections; want 1 (kept alive)", n)
	}
	if n := connsOld.Load(); n != 2 {
		t.Errorf("the upstream answering HTTP/1.0 saw %d connections; want 2 (one per request)", n)
	}
}
