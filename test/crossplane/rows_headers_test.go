package crossplane

// Response fields and error pages: CORS and custom-http-errors.
var _ = register(
	Row{
		Name: "enable-cors",
		Manifests: `{{service "a" "cors" "demo"}}` +
			ingress("cors", "cors.test", "cors", root, "enable-cors", "true", "cors-allow-origin", "https://web.example") +
			ingress("corsany", "corsany.test", "cors", root, "enable-cors", "true"),
		Requests: []Request{
			// ingress-nginx's CORS template: a preflight from an allowed
			// origin gets 204 with the CORS fields and never reaches the
			// upstream.
			{Name: "preflight", Method: "OPTIONS", Host: "cors.test", Path: "/api",
				Header: map[string]string{"Origin": "https://web.example", "Access-Control-Request-Method": "PUT"},
				Want: Want{Status: 204, Header: map[string]string{
					"Access-Control-Allow-Origin":      "https://web.example",
					"Access-Control-Allow-Credentials": "true",
					"Access-Control-Allow-Methods":     "GET, PUT, POST, DELETE, PATCH, OPTIONS",
					"Access-Control-Allow-Headers":     "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization",
					"Access-Control-Max-Age":           "1728000",
				}}},
			{Name: "allowed origin", Host: "cors.test", Path: "/api", Header: map[string]string{"Origin": "https://web.example"},
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{
					"Access-Control-Allow-Origin":      "https://web.example",
					"Access-Control-Allow-Credentials": "true",
				}}},
			{Name: "default origin *", Host: "corsany.test", Path: "/", Header: map[string]string{"Origin": "https://any.example"},
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Access-Control-Allow-Origin": "*"}}},
		},
	},
	Row{
		Name:      "enable-cors: the preflight's Content-Type",
		Manifests: `{{service "a" "corsct" "demo"}}` + ingress("corsct", "corsct.test", "corsct", root, "enable-cors", "true"),
		Requests: []Request{
			// The CORS template's "more_set_headers 'Content-Type: text/plain
			// charset=UTF-8'", without the semicolon.
			{Host: "corsct.test", Path: "/", Method: "OPTIONS", Header: map[string]string{"Origin": "https://web.example", "Access-Control-Request-Method": "PUT"},
				Want: Want{Status: 204, Header: map[string]string{"Content-Type": "text/plain charset=UTF-8"}}},
		},
	},
	Row{
		Name:      "enable-cors: an origin not allowed",
		Manifests: `{{service "a" "corsno" "demo"}}` + ingress("corsno", "corsno.test", "corsno", root, "enable-cors", "true", "cors-allow-origin", "https://web.example"),
		Requests: []Request{
			// buildCorsOriginRegex: $cors is set only when $http_origin
			// matches, so other origins get no CORS fields and their
			// OPTIONS goes upstream.
			{Name: "no CORS fields", Host: "corsno.test", Path: "/", Header: map[string]string{"Origin": "https://evil.example"},
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Access-Control-Allow-Origin": "", "Access-Control-Allow-Credentials": ""}}},
			{Name: "its preflight reaches the upstream", Method: "OPTIONS", Host: "corsno.test", Path: "/",
				Header: map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "PUT"},
				Want:   Want{Status: 200, Backend: "a", Header: map[string]string{"Access-Control-Allow-Origin": ""}}},
		},
	},
	Row{
		Name: "enable-cors: several origins and a wildcard",
		Manifests: `{{service "a" "corsmany" "demo"}}` + ingress("corsmany", "corsmany.test", "corsmany", root, "enable-cors", "true",
			"cors-allow-origin", "https://one.example, https://*.two.example:8443"),
		Requests: []Request{
			// buildCorsOriginRegex: any listed origin is sent back; "*."
			// stands for one label; port and scheme must match.
			{Name: "the second origin", Host: "corsmany.test", Path: "/", Header: map[string]string{"Origin": "https://one.example"},
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Access-Control-Allow-Origin": "https://one.example"}}},
			{Name: "a subdomain of the wildcard", Host: "corsmany.test", Path: "/", Header: map[string]string{"Origin": "https://a-1.two.example:8443"},
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Access-Control-Allow-Origin": "https://a-1.two.example:8443"}}},
			{Name: "its preflight", Method: "OPTIONS", Host: "corsmany.test", Path: "/",
				Header: map[string]string{"Origin": "https://a.two.example:8443", "Access-Control-Request-Method": "PUT"},
				Want:   Want{Status: 204, Header: map[string]string{"Access-Control-Allow-Origin": "https://a.two.example:8443"}}},
			{Name: "two labels", Host: "corsmany.test", Path: "/", Header: map[string]string{"Origin": "https://a.b.two.example:8443"},
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Access-Control-Allow-Origin": ""}}},
			{Name: "no label", Host: "corsmany.test", Path: "/", Header: map[string]string{"Origin": "https://two.example:8443"},
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Access-Control-Allow-Origin": ""}}},
			{Name: "another port", Host: "corsmany.test", Path: "/", Header: map[string]string{"Origin": "https://a.two.example"},
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Access-Control-Allow-Origin": ""}}},
			{Name: "another scheme", Host: "corsmany.test", Path: "/", Header: map[string]string{"Origin": "http://one.example"},
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Access-Control-Allow-Origin": ""}}},
			{Name: "an allowed origin with more after it", Host: "corsmany.test", Path: "/", Header: map[string]string{"Origin": "https://one.example.evil.test"},
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Access-Control-Allow-Origin": ""}}},
			{Name: "a dot is not any character", Host: "corsmany.test", Path: "/", Header: map[string]string{"Origin": "https://onexexample"},
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Access-Control-Allow-Origin": ""}}},
			{Name: "without an Origin", Host: "corsmany.test", Path: "/",
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Access-Control-Allow-Origin": ""}}},
		},
	},
	Row{
		Name:      "enable-cors: * without an Origin",
		Manifests: `{{service "a" "corsnoorigin" "demo"}}` + ingress("corsnoorigin", "corsnoorigin.test", "corsnoorigin", root, "enable-cors", "true"),
		Requests: []Request{
			// buildCorsOriginRegex for "*": $cors is "true" for every
			// request, whatever its Origin, even none.
			{Name: "fields", Host: "corsnoorigin.test", Path: "/",
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Access-Control-Allow-Origin": "*"}}},
			{Name: "preflight", Method: "OPTIONS", Host: "corsnoorigin.test", Path: "/",
				Want: Want{Status: 204, Header: map[string]string{"Access-Control-Allow-Origin": "*"}}},
		},
	},
	Row{
		Name: "enable-cors: an origin in another case",
		Manifests: `{{service "a" "corscase" "demo"}}` + ingress("corscase", "corscase.test", "corscase", root, "enable-cors", "true",
			"cors-allow-origin", "https://web.example"),
		Requests: []Request{
			// buildCorsOriginRegex's "~*" matches without regard to case,
			// and sends the Origin back as sent.
			{Host: "corscase.test", Path: "/", Header: map[string]string{"Origin": "https://WEB.example"},
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Access-Control-Allow-Origin": "https://WEB.example"}}},
		},
	},
	Row{
		Name: "enable-cors: Max-Age on every answer",
		Manifests: `{{service "a" "corsage" "demo"}}` + ingress("corsage", "corsage.test", "corsage", root, "enable-cors", "true",
			"cors-allow-origin", "https://web.example", "cors-max-age", "600", "cors-expose-headers", "X-Total"),
		Requests: []Request{
			// The CORS template sends the same fields, Max-Age included, on
			// a preflight and on any other answer to an allowed Origin.
			{Host: "corsage.test", Path: "/", Header: map[string]string{"Origin": "https://web.example"},
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Access-Control-Max-Age": "600",
					"Access-Control-Allow-Methods": "GET, PUT, POST, DELETE, PATCH, OPTIONS", "Access-Control-Expose-Headers": "X-Total"}}},
		},
	},
	Row{
		Name: "hsts on an HTTPS answer, enable-cors and digest too",
		Manifests: `{{service "a" "hsts" "demo"}}{{tlsSecret "hsts-tls" "hsts.test"}}{{tlsSecret "hstscors-tls" "hstscors.test"}}` +
			ingressTLS(ingress("hsts", "hsts.test", "hsts", root), "hsts.test", "hsts-tls") +
			ingressTLS(ingress("hstscors", "hstscors.test", "hsts", root, "enable-cors", "true", "cors-allow-origin", "https://web.example"),
				"hstscors.test", "hstscors-tls") +
			`{{tlsSecret "hstsdigest-tls" "hstsdigest.test"}}` +
			ingressTLS(ingress("hstsdigest", "hstsdigest.test", "hsts", root, "auth-type", "digest", "auth-secret", "hstsdigest-users",
				"auth-realm", "Staff only"), "hstsdigest.test", "hstsdigest-tls") + `
---
apiVersion: v1
kind: Secret
metadata: {name: hstsdigest-users, namespace: demo}
stringData:
  auth: |
    alice:Staff only:` + md5Hex("alice:Staff only:s3cret") + `
`,
		Requests: []Request{
			// The ConfigMap's hsts defaults (on, a year, includeSubDomains),
			// as lua_ingress.lua's header phase sends them over HTTPS, on
			// a location with CORS fields as on any other.
			{Name: "plain", Host: "hsts.test", Path: "/", HTTPS: true,
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Strict-Transport-Security": "max-age=31536000; includeSubDomains"}}},
			{Name: "CORS", Host: "hstscors.test", Path: "/", HTTPS: true, Header: map[string]string{"Origin": "https://web.example"},
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Strict-Transport-Security": "max-age=31536000; includeSubDomains",
					"Access-Control-Allow-Origin": "https://web.example"}}},
			{Name: "CORS preflight", Method: "OPTIONS", Host: "hstscors.test", Path: "/", HTTPS: true,
				Header: map[string]string{"Origin": "https://web.example", "Access-Control-Request-Method": "PUT"},
				Want:   Want{Status: 204, Header: map[string]string{"Strict-Transport-Security": "max-age=31536000; includeSubDomains"}}},
			{Name: "digest authentication's challenge", Host: "hstsdigest.test", Path: "/", HTTPS: true,
				Want: Want{Status: 401, Header: map[string]string{"Strict-Transport-Security": "max-age=31536000; includeSubDomains"}}},
		},
	},
	Row{
		Name:      "hsts-max-age 0 and hsts-preload from the ConfigMap",
		ConfigMap: map[string]string{"hsts-max-age": "0", "hsts-preload": "true", "hsts-include-subdomains": "false"},
		Manifests: `{{service "a" "hstscm" "demo"}}{{tlsSecret "hstscm-tls" "hstscm.test"}}` +
			ingressTLS(ingress("hstscm", "hstscm.test", "hstscm", root), "hstscm.test", "hstscm-tls"),
		Requests: []Request{
			// 0 is a value (forget this host), not "unset": the builder
			// reads it once and both planes send the one header it makes.
			{Name: "HTTPS", Host: "hstscm.test", Path: "/", HTTPS: true,
				Want: Want{Status: 200, Backend: "a", Header: map[string]string{"Strict-Transport-Security": "max-age=0; preload"}}},
			{Name: "plain HTTP gets none", Host: "hstscm.test", Path: "/",
				Want: Want{Status: 308, Header: map[string]string{"Strict-Transport-Security": ""}}},
		},
	},
	Row{
		Name: "custom-http-errors",
		Manifests: `{{service "down" "flaky" "demo"}}{{service "c" "errpage" "demo"}}` +
			ingress("errors", "errors.test", "flaky", root, "custom-http-errors", "503", "default-backend", "errpage") +
			ingress("errors-default", "errorsdefault.test", "flaky", root, "custom-http-errors", "502,503") +
			ingress("errors-other", "errorsother.test", "flaky", root, "custom-http-errors", "404", "default-backend", "errpage"),
		Requests: []Request{
			// error_page 503 = @custom_...: the error backend is asked
			// GET / with the code and the original request in X-* fields,
			// and its answer, status included, goes to the client.
			{Name: "the default-backend Service answers", Host: "errors.test", Path: "/page", Header: map[string]string{"Accept": "text/html"},
				Want: Want{Status: 200, Backend: "c", URI: "/", Host: "errors.test", Sent: map[string]string{
					"X-Code": "503", "X-Format": "text/html", "X-Original-Uri": "/page", "X-Namespace": "demo",
					"X-Ingress-Name": "errors", "X-Service-Name": "flaky"}}},
			{Name: "without default-backend: the built-in default backend", Host: "errorsdefault.test", Path: "/", Want: Want{Status: 404}},
			{Name: "a code not listed passes", Host: "errorsother.test", Path: "/", Want: Want{Status: 503, Backend: "down"}},
		},
	},
	Row{
		Name: "custom-http-errors: the error backend gets the query",
		Manifests: `{{service "down" "flakyq" "demo"}}{{service "c" "errpageq" "demo"}}` +
			ingress("errorsq", "errorsq.test", "flakyq", root, "custom-http-errors", "503", "default-backend", "errpageq"),
		Requests: []Request{
			// @custom_...'s "rewrite (.*) / break;" keeps $args, so
			// proxy_pass sends /?<query>.
			{Host: "errorsq.test", Path: "/page?x=1", Want: Want{Status: 200, Backend: "c", URI: "/?x=1", Sent: map[string]string{"X-Original-Uri": "/page?x=1"}}},
		},
	},
)
