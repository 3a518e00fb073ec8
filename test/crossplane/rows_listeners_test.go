package crossplane

import (
	"net/netip"
	"strings"

	"github.com/switchyard-proxy/switchyard/tcpproxy/proxyproto"
)

// ppV1 is a PROXY v1 header from the client src (203.0.113.x) that
// connected to port dport.
func ppV1(src, dport string) string {
	return "PROXY TCP4 " + src + " 192.0.2.10 40000 " + dport + "\r\n"
}

// ppV2 is the same as a PROXY v2 header.
func ppV2(src string, dport uint16) string {
	return string(proxyproto.AppendV2(nil, netip.AddrPortFrom(netip.MustParseAddr(src), 40000),
		netip.AddrPortFrom(netip.MustParseAddr("192.0.2.10"), dport)))
}

var _ = register(
	// use-proxy-protocol (ingress-nginx: listen ... proxy_protocol on the
	// HTTP and HTTPS ports, real_ip_header proxy_protocol, set_real_ip_from
	// proxy-real-ip-cidr, X-Forwarded-Port from $proxy_protocol_server_port).
	// The suite's ConfigMap also has enable-real-ip, which does not make
	// X-Forwarded-For read: the PROXY header's source is the client's
	// address when the connection comes from TrustedProxy, the only range
	// of proxy-real-ip-cidr; from elsewhere the connection's own.
	Row{
		Name:      "use-proxy-protocol",
		ConfigMap: map[string]string{"use-proxy-protocol": "true"},
		Manifests: `{{service "a" "pp" "demo"}}{{tlsSecret "pp-tls" "pp.test"}}` +
			ingressTLS(ingress("pp", "pp.test", "pp", root, "ssl-redirect", "false"), "pp.test", "pp-tls") +
			ingress("pp-allow", "pp-allow.test", "pp", root, "whitelist-source-range", "203.0.113.0/24"),
		Requests: []Request{
			{Name: "v1 from the trusted proxy", From: TrustedProxy, ProxyHeader: ppV1("203.0.113.7", "8080"), Host: "pp.test", Path: "/",
				Want: Want{Status: 200, Backend: "a", Sent: map[string]string{"X-Forwarded-For": "203.0.113.7", "X-Real-IP": "203.0.113.7", "X-Forwarded-Port": "8080"}}},
			{Name: "v2 over TLS from the trusted proxy", From: TrustedProxy, ProxyHeader: ppV2("203.0.113.8", 8443), Host: "pp.test", Path: "/", HTTPS: true,
				Want: Want{Status: 200, Backend: "a", Sent: map[string]string{"X-Forwarded-For": "203.0.113.8", "X-Real-IP": "203.0.113.8",
					"X-Forwarded-Port": "8443", "X-Forwarded-Proto": "https"}}},
			{Name: "v1 from an untrusted peer: its own address", ProxyHeader: ppV1("203.0.113.7", "8080"), Host: "pp.test", Path: "/",
				Want: Want{Status: 200, Backend: "a", Sent: map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Real-IP": "127.0.0.1", "X-Forwarded-Port": "8080"}}},
			{Name: "a client's X-Forwarded-For is not read", From: TrustedProxy, ProxyHeader: ppV1("203.0.113.7", "80"), Host: "pp.test", Path: "/",
				Header: map[string]string{"X-Forwarded-For": "198.51.100.7"},
				Want:   Want{Status: 200, Backend: "a", Sent: map[string]string{"X-Forwarded-For": "203.0.113.7", "X-Real-IP": "203.0.113.7"}}},
			{Name: "PROXY UNKNOWN: the connection's address", From: TrustedProxy, ProxyHeader: "PROXY UNKNOWN\r\n", Host: "pp.test", Path: "/",
				Want: Want{Status: 200, Backend: "a", Sent: map[string]string{"X-Forwarded-For": TrustedProxy, "X-Real-IP": TrustedProxy}}},
			{Name: "allow list: the PROXY source allowed", From: TrustedProxy, ProxyHeader: ppV1("203.0.113.7", "80"), Host: "pp-allow.test", Path: "/",
				Want: Want{Status: 200, Backend: "a"}},
			{Name: "allow list: the PROXY source denied", From: TrustedProxy, ProxyHeader: ppV1("198.51.100.9", "80"), Host: "pp-allow.test", Path: "/",
				Want: Want{Status: 403}},
			{Name: "allow list: an untrusted peer's header is not believed", ProxyHeader: ppV1("203.0.113.7", "80"), Host: "pp-allow.test", Path: "/",
				Want: Want{Status: 403}},
			{Name: "no header: closed", Host: "pp.test", Path: "/", Want: Want{Closed: true}},
			{Name: "no header over TLS: closed", Host: "pp.test", Path: "/", HTTPS: true, Want: Want{Closed: true}},
			{Name: "a malformed header: closed", ProxyHeader: "PROXY TCP4 203.0.113.7 192.0.2.10 40000\r\n", Host: "pp.test", Path: "/",
				Want: Want{Closed: true}},
		},
	},
	// proxy-http-version: the request line the backend gets (the echo
	// backend reports its protocol).
	Row{
		Name: "proxy-http-version",
		Manifests: `{{service "a" "httpver" "demo"}}` +
			ingress("httpver10", "httpver10.test", "httpver", root, "proxy-http-version", "1.0") +
			ingress("httpver11", "httpver11.test", "httpver", root, "proxy-http-version", "1.1") +
			ingress("httpverbad", "httpverbad.test", "httpver", root, "proxy-http-version", "2.0"),
		Requests: []Request{
			{Name: "1.0", Host: "httpver10.test", Path: "/", Want: Want{Status: 200, Backend: "a", Proto: "HTTP/1.0"}},
			{Name: "1.0 with a body", Method: "POST", Host: "httpver10.test", Path: "/", Body: "hello",
				Want: Want{Status: 200, Backend: "a", Proto: "HTTP/1.0", BodyLen: 5}},
			{Name: "1.1", Host: "httpver11.test", Path: "/", Want: Want{Status: 200, Backend: "a", Proto: "HTTP/1.1"}},
			{Name: "an invalid value: 1.1 kept", Host: "httpverbad.test", Path: "/", Want: Want{Status: 200, Backend: "a", Proto: "HTTP/1.1"}},
		},
	},
	// What goes upstream as Connection, with either protocol: nothing.
	// ingress-nginx clears the field ($connection_upgrade is empty without
	// Upgrade while upstream-keepalive-connections is on, its default).
	Row{
		Name: "proxy-http-version: no Connection field upstream",
		Manifests: `{{service "a" "httpverconn" "demo"}}` +
			ingress("httpverconn10", "httpverconn10.test", "httpverconn", root, "proxy-http-version", "1.0") +
			ingress("httpverconn11", "httpverconn11.test", "httpverconn", root),
		Requests: []Request{
			{Name: "1.0", Host: "httpverconn10.test", Path: "/", Want: Want{Status: 200, Backend: "a", Proto: "HTTP/1.0", Sent: map[string]string{"Connection": ""}}},
			{Name: "1.1", Host: "httpverconn11.test", Path: "/", Want: Want{Status: 200, Backend: "a", Proto: "HTTP/1.1", Sent: map[string]string{"Connection": ""}}},
		},
	},
	// client-header-buffer-size and large-client-header-buffers from the
	// ConfigMap (nginx's client_header_buffer_size and
	// large_client_header_buffers): with 4 16k, a 12 KB header line is
	// taken (the default 8k would refuse it) and a 20 KB one gets nginx's
	// 400 "Request Header Or Cookie Too Large".
	Row{
		Name:      "large-client-header-buffers",
		ConfigMap: map[string]string{"client-header-buffer-size": "2k", "large-client-header-buffers": "4 16k"},
		Manifests: `{{service "a" "bighead" "demo"}}` + ingress("bighead", "bighead.test", "bighead", root),
		Requests: []Request{
			{Name: "small", Host: "bighead.test", Path: "/", Want: Want{Status: 200, Backend: "a"}},
			{Name: "a 12 KB header line", Host: "bighead.test", Path: "/", Header: map[string]string{"X-Big": strings.Repeat("b", 12<<10)},
				Want: Want{Status: 200, Backend: "a"}},
			{Name: "a 20 KB header line", Host: "bighead.test", Path: "/", Header: map[string]string{"X-Big": strings.Repeat("b", 20<<10)},
				Want: Want{Status: 400}},
			{Name: "a 20 KB request line", Host: "bighead.test", Path: "/" + strings.Repeat("p", 20<<10), Want: Want{Status: 414}},
		},
	},
)
