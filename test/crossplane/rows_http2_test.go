package crossplane

// HTTP/2 clients on the HTTPS port (ALPN h2; ingress-nginx's use-http2,
// on by default): routing, the fields the backend gets, bodies, access
// and size limits, canaries and the HTTPS answer's fields must be what an
// HTTP/1.1 client gets. The backend is spoken to over HTTP/1.1 by both
// planes. On the Go plane these go through its own HTTP/2 server
// (--http2-server=switchyard, the default).
var _ = register(Row{
	Name: "HTTP/2 clients",
	Manifests: `{{service "a" "h2" "demo"}}{{service "b" "h2b" "demo"}}{{service "b" "h2canary" "demo"}}{{tlsSecret "h2-tls" "h2.test"}}` +
		ingressTLS(ingress("h2", "h2.test", "h2", root), "h2.test", "h2-tls") +
		ingressTLS(ingress("h2b", "h2.test", "h2b", []string{"/b"}), "h2.test", "h2-tls") +
		ingress("h2deny", "h2deny.test", "h2", root, "whitelist-source-range", "10.0.0.0/8") +
		ingress("h2small", "h2small.test", "h2", root, "proxy-body-size", "10") +
		ingress("h2main", "h2canary.test", "h2", root) +
		ingress("h2canary", "h2canary.test", "h2canary", root, "canary", "true", "canary-by-header", "X-Canary"),
	Requests: []Request{
		{Name: "routed, forwarded fields, HTTP/1.1 upstream", Host: "h2.test", Path: "/", HTTP2: true, From: "127.0.0.7",
			Header: map[string]string{"X-Request-ID": "h2-rid-1"},
			Want: Want{Status: 200, Backend: "a", Proto: "HTTP/1.1", Host: "h2.test",
				Header: map[string]string{"Strict-Transport-Security": "max-age=31536000; includeSubDomains"},
				Sent: map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "h2.test", "X-Forwarded-For": "127.0.0.7",
					"X-Real-Ip": "127.0.0.7", "X-Request-Id": "h2-rid-1"}}},
		{Name: "the longer path to the other backend, query kept", Host: "h2.test", Path: "/b/x?q=1", HTTP2: true,
			Want: Want{Status: 200, Backend: "b", URI: "/b/x?q=1"}},
		{Name: "a body with its length", Method: "POST", Host: "h2.test", Path: "/", HTTP2: true, Body: bodyOf(100 << 10),
			Want: Want{Status: 200, Backend: "a", BodyLen: 100 << 10, Sent: map[string]string{"Content-Length": "102400"}}},
		{Name: "an unknown host: the default backend", Host: "nobody.test", Path: "/", HTTP2: true, Want: Want{Status: 404}},
		{Name: "not in the allow list", Host: "h2deny.test", Path: "/", HTTP2: true, Want: Want{Status: 403}},
		{Name: "over proxy-body-size", Method: "POST", Host: "h2small.test", Path: "/", HTTP2: true, Body: "0123456789a", Want: Want{Status: 413}},
		{Name: "within proxy-body-size", Method: "POST", Host: "h2small.test", Path: "/", HTTP2: true, Body: "0123456789", Want: Want{Status: 200, Backend: "a"}},
		{Name: "canary by header", Host: "h2canary.test", Path: "/", HTTP2: true, Header: map[string]string{"X-Canary": "always"},
			Want: Want{Status: 200, Backend: "b"}},
		{Name: "canary by header: never", Host: "h2canary.test", Path: "/", HTTP2: true, Header: map[string]string{"X-Canary": "never"},
			Want: Want{Status: 200, Backend: "a"}},
	},
})

// HTTPS to a server without spec.tls: ingress-nginx serves every server
// on its HTTPS port, with its fake certificate where no Secret gives one
// (here neither plane has --default-ssl-certificate), and sends
// Strict-Transport-Security only for a server with a certificate of its
// own. The nginx plane gave such servers no HTTPS listener until the
// HTTP/2 rows above found it: their requests reached the first TLS server
// nginx listed.
var _ = register(Row{
	Name: "HTTPS to a server without spec.tls",
	Manifests: `{{service "a" "notls" "demo"}}` +
		ingress("notls", "notls.test", "notls", root) +
		ingress("notls-deny", "notls-deny.test", "notls", root, "whitelist-source-range", "10.0.0.0/8"),
	Requests: []Request{
		{Name: "HTTP/1.1: served, no HSTS", Host: "notls.test", Path: "/", HTTPS: true,
			Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Strict-Transport-Security": ""},
				Sent: map[string]string{"X-Forwarded-Proto": "https"}}},
		{Name: "HTTP/2: served, no HSTS", Host: "notls.test", Path: "/", HTTP2: true,
			Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Strict-Transport-Security": ""}}},
		{Name: "its allow list applies", Host: "notls-deny.test", Path: "/", HTTPS: true, Want: Want{Status: 403}},
		{Name: "an unknown host: the default backend", Host: "unknown-notls.test", Path: "/", HTTPS: true, Want: Want{Status: 404}},
	},
})
