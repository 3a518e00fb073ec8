package crossplane

import "strings"

// bodyOf is a request body of n bytes.
func bodyOf(n int) string { return strings.Repeat("x", n) }

var _ = register(
	// proxy-request-buffering (nginx's proxy_request_buffering, on by
	// default): on, the whole body is read before the request goes
	// upstream, so a chunked body arrives with a Content-Length; off, it
	// goes on as it comes, chunked to an HTTP/1.1 upstream, and read whole
	// anyway for an HTTP/1.0 one, which cannot take chunks.
	// client-body-buffer-size (nginx's client_body_buffer_size: how much
	// of such a body stays in memory before the rest goes to a temporary
	// file) changes nothing a client or upstream can see: a body larger
	// than it, or than the default, arrives whole. 100 KB is over what the
	// Go plane takes before the handler (64 KiB).
	Row{
		Name: "proxy-request-buffering",
		Manifests: `{{service "a" "reqbuf" "demo"}}` +
			ingress("reqbuf-on", "reqbuf-on.test", "reqbuf", root) +
			ingress("reqbuf-off", "reqbuf-off.test", "reqbuf", root, "proxy-request-buffering", "off") +
			ingress("reqbuf-off10", "reqbuf-off10.test", "reqbuf", root, "proxy-request-buffering", "off", "proxy-http-version", "1.0") +
			ingress("reqbuf-mem", "reqbuf-mem.test", "reqbuf", root, "client-body-buffer-size", "1m") +
			ingress("reqbuf-small", "reqbuf-small.test", "reqbuf", root, "client-body-buffer-size", "1k") +
			ingress("reqbuf-bad", "reqbuf-bad.test", "reqbuf", root, "client-body-buffer-size", "lots", "proxy-request-buffering", "maybe"),
		Requests: []Request{
			{Name: "on: a chunked body goes with its length", Method: "POST", Host: "reqbuf-on.test", Path: "/", Body: bodyOf(100 << 10), Chunked: true,
				Want: Want{Status: 200, Backend: "a", BodyLen: 100 << 10, Sent: map[string]string{"Content-Length": "102400"}}},
			{Name: "on: a small chunked body too", Method: "POST", Host: "reqbuf-on.test", Path: "/", Body: "hello", Chunked: true,
				Want: Want{Status: 200, Backend: "a", BodyLen: 5, Sent: map[string]string{"Content-Length": "5"}}},
			{Name: "on: a body with its length", Method: "PUT", Host: "reqbuf-on.test", Path: "/", Body: bodyOf(300 << 10),
				Want: Want{Status: 200, Backend: "a", BodyLen: 300 << 10, Sent: map[string]string{"Content-Length": "307200"}}},
			{Name: "off: chunked on", Method: "POST", Host: "reqbuf-off.test", Path: "/", Body: bodyOf(100 << 10), Chunked: true,
				Want: Want{Status: 200, Backend: "a", BodyLen: 100 << 10, Sent: map[string]string{"Content-Length": ""}}},
			{Name: "off: a body with its length keeps it", Method: "POST", Host: "reqbuf-off.test", Path: "/", Body: bodyOf(100 << 10),
				Want: Want{Status: 200, Backend: "a", BodyLen: 100 << 10, Sent: map[string]string{"Content-Length": "102400"}}},
			{Name: "off, HTTP/1.0 upstream: read whole", Method: "POST", Host: "reqbuf-off10.test", Path: "/", Body: bodyOf(100 << 10), Chunked: true,
				Want: Want{Status: 200, Backend: "a", Proto: "HTTP/1.0", BodyLen: 100 << 10, Sent: map[string]string{"Content-Length": "102400"}}},
			{Name: "client-body-buffer-size 1m", Method: "POST", Host: "reqbuf-mem.test", Path: "/", Body: bodyOf(200 << 10), Chunked: true,
				Want: Want{Status: 200, Backend: "a", BodyLen: 200 << 10, Sent: map[string]string{"Content-Length": "204800"}}},
			{Name: "client-body-buffer-size 1k: through a file", Method: "POST", Host: "reqbuf-small.test", Path: "/", Body: bodyOf(900 << 10), Chunked: true,
				Want: Want{Status: 200, Backend: "a", BodyLen: 900 << 10, Sent: map[string]string{"Content-Length": "921600"}}},
			{Name: "invalid values: the defaults kept", Method: "POST", Host: "reqbuf-bad.test", Path: "/", Body: bodyOf(100 << 10), Chunked: true,
				Want: Want{Status: 200, Backend: "a", BodyLen: 100 << 10, Sent: map[string]string{"Content-Length": "102400"}}},
		},
	},
	// proxy-buffers-number (nginx's proxy_buffers count, with
	// proxy-buffering on): how much of an answer nginx holds in memory
	// before a temporary file; nothing a client sees. The Go plane streams
	// answers and ignores it (the migration guide says so). Rendered and
	// loaded by nginx, an answer of 1 MB arrives whole on both planes; an
	// invalid count (nginx refuses 1) keeps the default.
	Row{
		Name: "proxy-buffers-number",
		Manifests: `{{service "a" "bufnum" "demo"}}` +
			ingress("bufnum", "bufnum.test", "bufnum", root, "proxy-buffering", "on", "proxy-buffers-number", "8", "proxy-buffer-size", "8k") +
			ingress("bufnum-bad", "bufnum-bad.test", "bufnum", root, "proxy-buffering", "on", "proxy-buffers-number", "1"),
		Requests: []Request{
			{Name: "8 buffers: a 1 MB answer whole", Host: "bufnum.test", Path: "/", Header: map[string]string{"X-Answer-Pad-Bytes": "1048576"},
				Want: Want{Status: 200, Backend: "a"}},
			{Name: "an invalid count: the default kept", Host: "bufnum-bad.test", Path: "/", Header: map[string]string{"X-Answer-Pad-Bytes": "1048576"},
				Want: Want{Status: 200, Backend: "a"}},
		},
	},
)
