package crossplane

import (
	"encoding/base64"
	"strings"
)

func basic(user, pw string) map[string]string {
	return map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pw))}
}

// Access control: nothing ingress-nginx would protect is served open.
var _ = register(
	Row{
		Name: "fail closed: an access annotation Switchyard cannot carry out",
		Manifests: `{{service "a" "closed" "demo"}}{{service "b" "open" "demo"}}` +
			ingress("closed", "closed.test", "closed", []string{"/", "/api"}, "limit-connections", "one") +
			ingress("satisfy", "satisfy.test", "closed", root, "satisfy", "any") +
			ingress("badlist", "badlist.test", "closed", root, "whitelist-source-range", "10.0.0.0/33") +
			ingress("authsnippet", "authsnippet.test", "closed", root, "auth-snippet", "return 200;") +
			ingress("open", "open.test", "open", root),
		Requests: []Request{
			{Name: "an invalid limit-connections", Host: "closed.test", Path: "/", Want: Want{Status: 503}},
			{Name: "an invalid limit-connections, another path", Host: "closed.test", Path: "/api/x", Want: Want{Status: 503}},
			{Name: "satisfy", Host: "satisfy.test", Path: "/", Want: Want{Status: 503}},
			{Name: "an invalid allow list", Host: "badlist.test", Path: "/", Want: Want{Status: 503}},
			{Name: "auth-snippet", Host: "authsnippet.test", Path: "/", Want: Want{Status: 503}},
			{Name: "other Ingresses keep serving", Host: "open.test", Path: "/", Want: Want{Status: 200, Backend: "b"}},
		},
	},
	// Rate limits: limit-rpm 1 drains one request a minute, so the
	// bursts below hold however slow the machine. Each row's first
	// request comes from an allowlisted client, as the suite repeats it
	// until the row is served.
	Row{
		Name: "rate limits (limit-rpm, burst, allow list, one zone per Ingress)",
		Manifests: `{{service "a" "limited" "demo"}}` +
			ingress("limited", "limited.test", "limited", []string{"/", "/api"},
				"limit-rpm", "1", "limit-burst-multiplier", "2", "limit-allowlist", "127.0.0.40"),
		Requests: []Request{
			{Name: "an allowlisted client", Host: "limited.test", Path: "/", From: "127.0.0.40", Want: Want{Status: 200, Backend: "a"}},
			{Name: "an allowlisted client again", Host: "limited.test", Path: "/", From: "127.0.0.40", Want: Want{Status: 200, Backend: "a"}},
			{Name: "an allowlisted client, a fourth time", Host: "limited.test", Path: "/", From: "127.0.0.40", Want: Want{Status: 200, Backend: "a"}},
			{Name: "first request", Host: "limited.test", Path: "/", From: "127.0.0.41", Want: Want{Status: 200, Backend: "a"}},
			{Name: "within the burst", Host: "limited.test", Path: "/", From: "127.0.0.41", Want: Want{Status: 200, Backend: "a"}},
			{Name: "at the burst", Host: "limited.test", Path: "/api/x", From: "127.0.0.41", Want: Want{Status: 200, Backend: "a"}},
			{Name: "over the burst", Host: "limited.test", Path: "/", From: "127.0.0.41", Want: Want{Status: 503}},
			{Name: "the Ingress's other path shares the zone", Host: "limited.test", Path: "/api/x", From: "127.0.0.41", Want: Want{Status: 503}},
			{Name: "another client has its own bucket", Host: "limited.test", Path: "/", From: "127.0.0.42", Want: Want{Status: 200, Backend: "a"}},
		},
	},
	Row{
		Name:      "rate limits answer limit-req-status-code",
		ConfigMap: map[string]string{"limit-req-status-code": "429"},
		Manifests: `{{service "a" "limited429" "demo"}}` +
			ingress("limited429", "limited429.test", "limited429", root,
				"limit-rpm", "1", "limit-burst-multiplier", "0", "limit-whitelist", "127.0.0.43"),
		Requests: []Request{
			{Name: "an allowlisted client (limit-whitelist)", Host: "limited429.test", Path: "/", From: "127.0.0.43", Want: Want{Status: 200, Backend: "a"}},
			{Name: "first request", Host: "limited429.test", Path: "/", From: "127.0.0.44", Want: Want{Status: 200, Backend: "a"}},
			{Name: "no burst", Host: "limited429.test", Path: "/", From: "127.0.0.44", Want: Want{Status: 429}},
		},
	},
	Row{
		Name: "source ranges",
		Manifests: `{{service "a" "ranges" "demo"}}` +
			ingress("allow", "allow.test", "ranges", root, "whitelist-source-range", "127.0.0.1/32, 127.0.0.8") +
			ingress("deny", "deny.test", "ranges", root, "denylist-source-range", "127.0.0.5") +
			ingress("both", "both.test", "ranges", root, "allowlist-source-range", "127.0.0.0/24", "denylist-source-range", "127.0.0.6"),
		Requests: []Request{
			{Name: "allowed", Host: "allow.test", Path: "/", Want: Want{Status: 200, Backend: "a"}},
			{Name: "allowed, bare address", Host: "allow.test", Path: "/", From: "127.0.0.8", Want: Want{Status: 200, Backend: "a"}},
			{Name: "not allowed", Host: "allow.test", Path: "/", From: "127.0.0.9", Want: Want{Status: 403}},
			{Name: "denied", Host: "deny.test", Path: "/", From: "127.0.0.5", Want: Want{Status: 403}},
			{Name: "not denied", Host: "deny.test", Path: "/", Want: Want{Status: 200, Backend: "a"}},
			{Name: "deny before allow", Host: "both.test", Path: "/", From: "127.0.0.6", Want: Want{Status: 403}},
			{Name: "allowed, not denied", Host: "both.test", Path: "/", From: "127.0.0.7", Want: Want{Status: 200, Backend: "a"}},
		},
	},
	Row{
		Name: "source ranges against the forwarded client address",
		Manifests: `{{service "a" "realip" "demo"}}` +
			ingress("realip-deny", "realip-deny.test", "realip", root, "denylist-source-range", "203.0.113.7") +
			ingress("realip-allow", "realip-allow.test", "realip", root, "whitelist-source-range", "198.51.100.0/24"),
		Requests: []Request{
			{Name: "a denied client behind the trusted proxy", Host: "realip-deny.test", Path: "/", From: TrustedProxy,
				Header: map[string]string{"X-Forwarded-For": "203.0.113.7"}, Want: Want{Status: 403}},
			{Name: "the trusted proxy's own hop is skipped", Host: "realip-deny.test", Path: "/", From: TrustedProxy,
				Header: map[string]string{"X-Forwarded-For": "203.0.113.7, " + TrustedProxy}, Want: Want{Status: 403}},
			{Name: "addresses left of the client are not read", Host: "realip-deny.test", Path: "/", From: TrustedProxy,
				Header: map[string]string{"X-Forwarded-For": "198.51.100.1, 203.0.113.7"}, Want: Want{Status: 403}},
			{Name: "another client behind the trusted proxy", Host: "realip-deny.test", Path: "/", From: TrustedProxy,
				Header: map[string]string{"X-Forwarded-For": "203.0.113.7, 198.51.100.1"},
				Want:   Want{Status: 200, Backend: "a", Sent: map[string]string{"X-Real-Ip": "198.51.100.1", "X-Forwarded-For": "198.51.100.1"}}},
			{Name: "an untrusted forwarder's field is ignored", Host: "realip-deny.test", Path: "/", From: "127.0.0.7",
				Header: map[string]string{"X-Forwarded-For": "203.0.113.7"},
				Want:   Want{Status: 200, Backend: "a", Sent: map[string]string{"X-Real-Ip": "127.0.0.7", "X-Forwarded-For": "127.0.0.7"}}},
			{Name: "an allowed client behind the trusted proxy", Host: "realip-allow.test", Path: "/", From: TrustedProxy,
				Header: map[string]string{"X-Forwarded-For": "198.51.100.4"}, Want: Want{Status: 200, Backend: "a"}},
			{Name: "the trusted proxy itself is not allowed", Host: "realip-allow.test", Path: "/", From: TrustedProxy, Want: Want{Status: 403}},
			{Name: "an allowed address from an untrusted forwarder", Host: "realip-allow.test", Path: "/", From: "127.0.0.7",
				Header: map[string]string{"X-Forwarded-For": "198.51.100.4"}, Want: Want{Status: 403}},
		},
	},
	Row{
		Name: "basic authentication",
		Manifests: `{{service "a" "basic" "demo"}}` +
			ingress("basic", "basic.test", "basic", root, "auth-type", "basic", "auth-secret", "staff", "auth-realm", "Staff only") +
			ingress("basic-missing", "nosecret.test", "basic", root, "auth-type", "basic", "auth-secret", "nothing-here") + `
---
apiVersion: v1
kind: Secret
metadata: {name: staff, namespace: demo}
stringData:
  auth: |
    # openssl passwd -apr1 -salt 3hXyQ5kD s3cret
    alice:$apr1$3hXyQ5kD$sEciFuwqpwDltMxiURchG1
`,
		Requests: []Request{
			{Name: "no credentials", Host: "basic.test", Path: "/", Want: Want{Status: 401, Header: map[string]string{"WWW-Authenticate": `Basic realm="Staff only"`}}},
			{Name: "right password", Host: "basic.test", Path: "/", Header: basic("alice", "s3cret"), Want: Want{Status: 200, Backend: "a", Sent: map[string]string{"Authorization": ""}}},
			{Name: "wrong password", Host: "basic.test", Path: "/", Header: basic("alice", "S3cret"), Want: Want{Status: 401}},
			{Name: "unknown user", Host: "basic.test", Path: "/", Header: basic("bob", "s3cret"), Want: Want{Status: 401}},
			{Name: "missing Secret: fail closed", Host: "nosecret.test", Path: "/", Header: basic("alice", "s3cret"), Want: Want{Status: 503}},
		},
	},
	Row{
		Name: "external authentication (oauth2-proxy's contract)",
		Manifests: `{{service "a" "ext" "demo"}}` +
			ingress("ext", "ext.test", "ext", root, "auth-url", "{{authURL}}",
				"auth-signin", "http://$host/oauth2/start?rd=$escaped_request_uri",
				"auth-response-headers", "X-Auth-Request-User, X-Auth-Request-Groups") +
			ingress("ext401", "ext401.test", "ext", root, "auth-url", "{{authURL}}") +
			ingress("extbad", "extbad.test", "ext", root, "auth-url", "http://$remote_addr/auth"),
		Requests: []Request{
			{Name: "signed in", Host: "ext.test", Path: "/in?x=1",
				Header: map[string]string{"Cookie": "_oauth2_proxy=alice", "X-Auth-Request-User": "root", "X-Auth-Request-Groups": "admins"},
				Want: Want{Status: 200, Backend: "a", URI: "/in?x=1", Header: map[string]string{"Set-Cookie": "_oauth2_proxy=alice; Path=/; HttpOnly; Secure"},
					Sent: map[string]string{"X-Auth-Request-User": "alice", "X-Auth-Request-Groups": "", "Cookie": "_oauth2_proxy=alice"}}},
			{Name: "no session: sign in", Host: "ext.test", Path: "/a?b=c",
				Want: Want{Status: 302, Header: map[string]string{"Location": "http://ext.test/oauth2/start?rd=%2Fa%3Fb%3Dc"}}},
			{Name: "no session: 401", Host: "ext401.test", Path: "/",
				Want: Want{Status: 401, Header: map[string]string{"WWW-Authenticate": `Bearer realm="oauth2-proxy"`}}},
			{Name: "forbidden", Host: "ext401.test", Path: "/", Header: map[string]string{"Cookie": "_oauth2_proxy=mallory"}, Want: Want{Status: 403}},
			{Name: "service error", Host: "ext401.test", Path: "/", Header: map[string]string{"Cookie": "_oauth2_proxy=broken"}, Want: Want{Status: 500}},
			{Name: "an undocumented variable: fail closed", Host: "extbad.test", Path: "/", Want: Want{Status: 503}},
		},
	},
)

var _ = register(Row{
	Name: "client certificates",
	Manifests: `{{service "a" "mtls" "demo"}}{{tlsSecret "mtls-tls" "mtls.test"}}{{tlsSecret "mtlscn-tls" "mtlscn.test"}}{{caSecret "client-ca"}}` +
		ingressTLS(ingress("mtls", "mtls.test", "mtls", root, "auth-tls-secret", "client-ca"), "mtls.test", "mtls-tls") +
		ingressTLS(ingress("mtlscn", "mtlscn.test", "mtls", root, "auth-tls-secret", "demo/client-ca",
			"auth-tls-match-cn", "CN=alice", "auth-tls-verify-client", "optional"), "mtlscn.test", "mtlscn-tls"),
	Requests: []Request{
		{Name: "the CA's certificate", Host: "mtls.test", Path: "/", HTTPS: true, ClientCert: "alice",
			Want: Want{Status: 200, Backend: "a", Sent: map[string]string{"Ssl-Client-Verify": "SUCCESS", "Ssl-Client-Subject-Dn": "CN=alice,O=Switchyard Test",
				"Ssl-Client-Issuer-Dn": "CN=Suite CA,O=Switchyard Test", "Ssl-Client-Cert": ""}}},
		{Name: "no certificate", Host: "mtls.test", Path: "/", HTTPS: true, Want: Want{Status: 400}},
		{Name: "a stranger's certificate", Host: "mtls.test", Path: "/", HTTPS: true, ClientCert: "stranger", Want: Want{Status: 400}},
		{Name: "plain HTTP: redirected", Host: "mtls.test", Path: "/x", Want: Want{Status: 308, Header: map[string]string{"Location": "https://mtls.test/x"}}},
		{Name: "match-cn", Host: "mtlscn.test", Path: "/", HTTPS: true, ClientCert: "alice", Want: Want{Status: 200, Backend: "a"}},
		{Name: "match-cn refuses bob", Host: "mtlscn.test", Path: "/", HTTPS: true, ClientCert: "bob", Want: Want{Status: 403}},
		{Name: "match-cn refuses no certificate", Host: "mtlscn.test", Path: "/", HTTPS: true, Want: Want{Status: 403}},
	},
})

var _ = register(Row{
	Name: "client certificates with a revocation list",
	Manifests: `{{service "a" "crl" "demo"}}{{tlsSecret "crl-tls" "crl.test"}}{{tlsSecret "crlopt-tls" "crlopt.test"}}{{crlSecret "crl-ca"}}` +
		ingressTLS(ingress("crl", "crl.test", "crl", root, "auth-tls-secret", "crl-ca"), "crl.test", "crl-tls") +
		ingressTLS(ingress("crlopt", "crlopt.test", "crl", root, "auth-tls-secret", "crl-ca", "auth-tls-verify-client", "optional_no_ca"), "crlopt.test", "crlopt-tls"),
	Requests: []Request{
		{Name: "a revoked certificate", Host: "crl.test", Path: "/", HTTPS: true, ClientCert: "carol", Want: Want{Status: 400}},
		{Name: "another certificate of the CA", Host: "crl.test", Path: "/", HTTPS: true, ClientCert: "dave",
			Want: Want{Status: 200, Backend: "a", Sent: map[string]string{"Ssl-Client-Verify": "SUCCESS", "Ssl-Client-Subject-Dn": "CN=dave,O=Switchyard Test"}}},
		{Name: "a revoked certificate under optional_no_ca", Host: "crlopt.test", Path: "/", HTTPS: true, ClientCert: "carol", Want: Want{Status: 400}},
		{Name: "another CA's certificate under optional_no_ca", Host: "crlopt.test", Path: "/", HTTPS: true, ClientCert: "alice", Want: Want{Status: 200, Backend: "a"}},
	},
})

var _ = register(Row{
	Name: "auth-proxy-set-headers",
	Manifests: `{{service "a" "setheaders" "demo"}}` +
		ingress("setheaders", "setheaders.test", "setheaders", root, "auth-url", "{{authURL}}", "auth-proxy-set-headers", "auth-fields",
			"auth-response-headers", "X-Echo-X-Tenant, X-Echo-X-Empty") +
		ingress("setheaders-missing", "setheaders-missing.test", "setheaders", root, "auth-url", "{{authURL}}", "auth-proxy-set-headers", "no-such-configmap") +
		ingress("setheaders-var", "setheaders-var.test", "setheaders", root, "auth-url", "{{authURL}}", "auth-proxy-set-headers", "auth-fields-var") + `
---
apiVersion: v1
kind: ConfigMap
metadata: {name: auth-fields, namespace: demo}
data:
  X-Tenant: blue "team"
  X-Empty: ""
---
apiVersion: v1
kind: ConfigMap
metadata: {name: auth-fields-var, namespace: demo}
data:
  X-Tenant: $remote_addr
`,
	Requests: []Request{
		{Name: "the ConfigMap's fields reach the service, the client's replaced", Host: "setheaders.test", Path: "/",
			Header: map[string]string{"Cookie": "_oauth2_proxy=alice", "X-Tenant": "red", "X-Empty": "client"},
			Want:   Want{Status: 200, Backend: "a", Sent: map[string]string{"X-Echo-X-Tenant": `blue "team"`, "X-Echo-X-Empty": ""}}},
		{Name: "a missing ConfigMap: fail closed", Host: "setheaders-missing.test", Path: "/", Header: map[string]string{"Cookie": "_oauth2_proxy=alice"},
			Want: Want{Status: 503}},
		{Name: "an nginx variable in a value: fail closed", Host: "setheaders-var.test", Path: "/", Header: map[string]string{"Cookie": "_oauth2_proxy=alice"},
			Want: Want{Status: 503}},
	},
})

// ingressTLS adds a tls section for host with Secret secret to an ingress().
func ingressTLS(ing, host, secret string) string {
	return strings.Replace(ing, "spec:\n", "spec:\n  tls:\n  - {hosts: ["+host+"], secretName: "+secret+"}\n", 1)
}
