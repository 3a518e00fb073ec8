package crossplane

// proxy-ssl-*: TLS to HTTPS upstreams, against real TLS backends whose
// certificates name backend.internal only (tlsBackendSpecs).
var _ = register(
	Row{
		Name: "proxy-ssl-verify against the Secret's CA",
		Manifests: `{{service "tls" "up" "demo"}}{{upstreamCASecret "up-ca"}}{{strangerCASecret "up-stranger"}}` +
			ingress("upnoverify", "upnoverify.test", "up", root, "backend-protocol", "HTTPS") +
			ingress("upverify", "upverify.test", "up", root, "backend-protocol", "HTTPS",
				"proxy-ssl-secret", "demo/up-ca", "proxy-ssl-verify", "on", "proxy-ssl-name", "backend.internal") +
			ingress("upsni", "upsni.test", "up", root, "backend-protocol", "HTTPS",
				"proxy-ssl-secret", "up-ca", "proxy-ssl-verify", "on", "proxy-ssl-name", "backend.internal", "proxy-ssl-server-name", "on") +
			ingress("updefaultname", "updefaultname.test", "up", root, "backend-protocol", "HTTPS",
				"proxy-ssl-secret", "up-ca", "proxy-ssl-verify", "on") +
			ingress("upstranger", "upstranger.test", "up", root, "backend-protocol", "HTTPS",
				"proxy-ssl-secret", "up-stranger", "proxy-ssl-verify", "on", "proxy-ssl-name", "backend.internal") +
			ingress("upstrangeroff", "upstrangeroff.test", "up", root, "backend-protocol", "HTTPS",
				"proxy-ssl-secret", "up-stranger", "proxy-ssl-verify", "off", "proxy-ssl-name", "backend.internal"),
		Requests: []Request{
			// ingress-nginx's defaults: no verification, no SNI.
			{Name: "no proxy-ssl-*: not verified, no SNI", Host: "upnoverify.test", Path: "/",
				Want: Want{Status: 200, Backend: "tls", Sent: map[string]string{"X-Tls-Sni": "", "X-Tls-Client-Cn": ""}}},
			{Name: "verified for proxy-ssl-name", Host: "upverify.test", Path: "/",
				Want: Want{Status: 200, Backend: "tls", Sent: map[string]string{"X-Tls-Sni": ""}}},
			{Name: "proxy-ssl-server-name sends the name", Host: "upsni.test", Path: "/",
				Want: Want{Status: 200, Backend: "tls", Sent: map[string]string{"X-Tls-Sni": "backend.internal"}}},
			// Without proxy-ssl-name nginx checks $proxy_host, which
			// ingress-nginx's proxy_pass makes upstream_balancer.
			{Name: "without proxy-ssl-name the name checked is upstream_balancer", Host: "updefaultname.test", Path: "/",
				Want: Want{Status: 502}},
			{Name: "a certificate of another CA: 502", Host: "upstranger.test", Path: "/", Want: Want{Status: 502}},
			{Name: "the same with proxy-ssl-verify off", Host: "upstrangeroff.test", Path: "/", Want: Want{Status: 200, Backend: "tls"}},
		},
	},
	Row{
		Name: "proxy-ssl-secret's client certificate, and proxy-ssl-verify-depth",
		Manifests: `{{service "tls" "upc" "demo"}}{{service "tlsdeep" "updeep" "demo"}}{{upstreamClientSecret "up-client"}}{{upstreamCASecret "up-ca2"}}` +
			ingress("upclient", "upclient.test", "upc", root, "backend-protocol", "HTTPS",
				"proxy-ssl-secret", "up-client", "proxy-ssl-verify", "on", "proxy-ssl-name", "backend.internal",
				"proxy-ssl-protocols", "TLSv1.3") +
			ingress("updeep0", "updeep0.test", "updeep", root, "backend-protocol", "HTTPS",
				"proxy-ssl-secret", "up-ca2", "proxy-ssl-verify", "on", "proxy-ssl-name", "backend.internal", "proxy-ssl-verify-depth", "0") +
			ingress("updeep1", "updeep1.test", "updeep", root, "backend-protocol", "HTTPS",
				"proxy-ssl-secret", "up-ca2", "proxy-ssl-verify", "on", "proxy-ssl-name", "backend.internal"),
		Requests: []Request{
			{Name: "tls.crt and tls.key are sent", Host: "upclient.test", Path: "/",
				Want: Want{Status: 200, Backend: "tls", Sent: map[string]string{"X-Tls-Client-Cn": "switchyard"}}},
			// OpenSSL's verify depth: the upstream is level 0, its
			// intermediate level 1, the trusted root level 2.
			{Name: "an intermediate above depth 0: 502", Host: "updeep0.test", Path: "/", Want: Want{Status: 502}},
			{Name: "the default depth 1 allows it", Host: "updeep1.test", Path: "/", Want: Want{Status: 200, Backend: "tlsdeep"}},
		},
	},
	Row{
		Name: "proxy-ssl-* fail closed",
		Manifests: `{{service "tls" "upbad" "demo"}}{{upstreamCASecret "up-ca3"}}` +
			ingress("upmissing", "upmissing.test", "upbad", root, "backend-protocol", "HTTPS",
				"proxy-ssl-secret", "no-such-secret", "proxy-ssl-verify", "on") +
			ingress("upverifytrue", "upverifytrue.test", "upbad", root, "backend-protocol", "HTTPS",
				"proxy-ssl-secret", "up-ca3", "proxy-ssl-verify", "true"),
		Requests: []Request{
			// ingress-nginx denies the locations of a missing Secret.
			{Name: "a missing Secret", Host: "upmissing.test", Path: "/", Want: Want{Status: 503}},
			// ingress-nginx would turn verification off; Switchyard never
			// serves unverified what a user asked to verify.
			{Name: "proxy-ssl-verify: true is not on", Host: "upverifytrue.test", Path: "/", Want: Want{Status: 503}},
		},
	},
)
