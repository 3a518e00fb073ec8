package proxy

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestHeadLen: headLen is the length of the head fasthttp writes
// (ResponseHeader.Header), for the heads the proxy sends (issue 17).
func TestHeadLen(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(h *fasthttp.ResponseHeader)
	}{
		{"bare 200", func(*fasthttp.ResponseHeader) {}},
		{"proxied", func(h *fasthttp.ResponseHeader) {
			h.SetContentType("text/plain")
			h.SetContentLength(13)
			h.Set("X-Upstream", "a")
			h.Set("Date", "Tue, 01 Jan 2000 00:00:00 GMT") // replaced by the server's
			h.Set("Strict-Transport-Security", "max-age=31536000; includeSubDomains")
		}},
		{"chunked", func(h *fasthttp.ResponseHeader) {
			h.SetContentLength(-1)
			h.SetContentType("application/json")
		}},
		{"no content length, type", func(h *fasthttp.ResponseHeader) {
			h.SetContentLength(0)
			h.SetContentType("text/html")
		}},
		{"no content length, default type", func(h *fasthttp.ResponseHeader) {
			h.SetNoDefaultContentType(false)
			h.SetContentLength(0)
		}},
		{"default type", func(h *fasthttp.ResponseHeader) {
			h.SetNoDefaultContentType(false)
			h.SetContentLength(5)
		}},
		{"status text, protocol, close", func(h *fasthttp.ResponseHeader) {
			h.SetStatusCode(599)
			h.SetStatusMessage([]byte("Custom"))
			h.SetProtocol([]byte("HTTP/1.0"))
			h.SetContentLength(1)
			h.SetConnectionClose()
		}},
		{"unknown status", func(h *fasthttp.ResponseHeader) {
			h.SetStatusCode(799)
			h.SetContentLength(1)
		}},
		{"redirect", func(h *fasthttp.ResponseHeader) {
			h.SetStatusCode(308)
			h.Set("Location", "https://bench.local/")
			h.SetContentLength(164)
			h.SetContentType("text/html")
		}},
		{"cookies, server, encoding", func(h *fasthttp.ResponseHeader) {
			h.SetContentLength(7)
			h.SetServer("up")
			h.Set("Content-Encoding", "gzip")
			h.Add("Set-Cookie", "a=1; Path=/")
			h.Add("Set-Cookie", "b=2")
		}},
		{"trailer", func(h *fasthttp.ResponseHeader) {
			h.SetContentLength(-1)
			if err := h.SetTrailer("X-Sum"); err != nil {
				t.Fatal(err)
			}
			h.Set("X-Sum", "1")
		}},
		{"parsed upstream head", func(h *fasthttp.ResponseHeader) {
			const head = "HTTP/1.1 200 OK\r\nServer: up\r\nDate: Tue, 01 Jan 2000 00:00:00 GMT\r\n" +
				"Content-Type: text/plain\r\nContent-Length: 2\r\nX-A: b\r\nSet-Cookie: c=d\r\n\r\n"
			if err := h.Read(bufio.NewReader(strings.NewReader(head))); err != nil {
				t.Fatal(err)
			}
		}},
		{"repeated fields", func(h *fasthttp.ResponseHeader) {
			h.SetContentLength(2)
			h.Add("Vary", "Accept")
			h.Add("Vary", "Origin")
			h.Add("Date", "x")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h fasthttp.ResponseHeader
			h.SetNoDefaultContentType(true) // as New's server sets it
			tc.set(&h)
			want := len(h.Header())
			if got := headLen(&h); got != want {
				t.Errorf("headLen = %d; want %d, the length of\n%s", got, want, h.Header())
			}
		})
	}
}
