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
		KnownDrift: map[string]string{"go": "proxy.go answers a preflight with Content-Type text/plain; charset=utf-8"},
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
		KnownDrift: map[string]string{"nginx": "nginx.conf sends the first cors-allow-origin to every Origin and answers every OPTIONS with 204, without matching $http_origin"},
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
		KnownDrift: map[string]string{"go": "proxy/customerrors.go asks the error backend for / without the client's query"},
	},
)
