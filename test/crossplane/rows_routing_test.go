package crossplane

import (
	"fmt"
	"sort"
	"strings"
)

// ingress writes an Ingress of class switchyard in namespace demo routing
// host's paths ("/p" Prefix, "=/p" Exact) to Service svc port http, with
// the nginx.ingress.kubernetes.io/ annotations given as key, value pairs.
func ingress(name, host, svc string, paths []string, ann ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: %s\n  namespace: demo\n", name)
	if len(ann) > 0 {
		b.WriteString("  annotations:\n")
		m := map[string]string{}
		for i := 0; i+1 < len(ann); i += 2 {
			m[ann[i]] = ann[i+1]
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "    nginx.ingress.kubernetes.io/%s: %q\n", k, m[k])
		}
	}
	fmt.Fprintf(&b, "spec:\n  ingressClassName: switchyard\n  rules:\n  - host: %s\n    http:\n      paths:\n", host)
	for _, p := range paths {
		pt := "Prefix"
		if strings.HasPrefix(p, "=") {
			p, pt = p[1:], "Exact"
		}
		fmt.Fprintf(&b, "      - {path: %q, pathType: %s, backend: {service: {name: %s, port: {name: http}}}}\n", p, pt, svc)
	}
	return b.String()
}

var root = []string{"/"}

var _ = register(
	Row{
		Name: "host and path routing",
		Manifests: `{{service "a" "route-a" "demo"}}{{service "b" "route-b" "demo"}}` +
			ingress("route-a", "route.test", "route-a", []string{"/", "=/exact"}) + ingress("route-b", "route.test", "route-b", []string{"/api"}),
		Requests: []Request{
			{Name: "prefix", Host: "route.test", Path: "/api/v1?x=1", Want: Want{Status: 200, Backend: "b", URI: "/api/v1?x=1"}},
			{Name: "prefix is element-wise", Host: "route.test", Path: "/apix", Want: Want{Status: 200, Backend: "a"}},
			{Name: "exact", Host: "route.test", Path: "/exact", Want: Want{Status: 200, Backend: "a"}},
			{Name: "unknown host: default backend", Host: "nobody.test", Path: "/", Want: Want{Status: 404}},
		},
	},
	Row{
		// ingress-nginx: an Ingress's spec.defaultBackend serves the "/"
		// of the hosts it names, not only the catch-all server.
		Name: "an Ingress default backend serves its hosts' other paths",
		Manifests: `{{service "a" "hostdef-api" "demo"}}{{service "b" "hostdef-rest" "demo"}}` +
			"---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: hostdef, namespace: demo}\nspec:\n" +
			"  ingressClassName: switchyard\n  defaultBackend: {service: {name: hostdef-rest, port: {name: http}}}\n" +
			"  rules:\n  - host: hostdef.test\n    http:\n      paths:\n      - {path: /api, pathType: Prefix, backend: {service: {name: hostdef-api, port: {name: http}}}}\n",
		Requests: []Request{
			{Name: "the rule's path", Host: "hostdef.test", Path: "/api/x", Want: Want{Status: 200, Backend: "a"}},
			{Name: "another path", Host: "hostdef.test", Path: "/other", Want: Want{Status: 200, Backend: "b"}},
			{Name: "another host: the built-in 404", Host: "elsewhere.test", Path: "/other", Want: Want{Status: 404}},
		},
	},
	Row{
		// The API server refuses such an address; --manifests does not.
		// Skipped (with an Event on the slice), the rest of the Service
		// and every other Ingress keep serving.
		Name: "an invalid EndpointSlice address is skipped",
		Manifests: `{{service "a" "badaddr" "demo"}}{{slice "b" "badaddr" "demo" "127.0.0.1;X"}}{{service "b" "goodaddr" "demo"}}` +
			ingress("badaddr", "badaddr.test", "badaddr", root) + ingress("goodaddr", "goodaddr.test", "goodaddr", root),
		Requests: []Request{
			{Name: "the Service's valid endpoint", Host: "badaddr.test", Path: "/", Want: Want{Status: 200, Backend: "a"}},
			{Name: "again", Host: "badaddr.test", Path: "/", Want: Want{Status: 200, Backend: "a"}},
			{Name: "another Ingress", Host: "goodaddr.test", Path: "/", Want: Want{Status: 200, Backend: "b"}},
		},
	},
	Row{
		Name: "forwarded fields",
		Manifests: `{{service "a" "fwd" "demo"}}` + ingress("fwd", "fwd.test", "fwd", root,
			"upstream-vhost", "internal.example", "x-forwarded-prefix", "/pre"),
		Requests: []Request{{Name: "fields", Host: "fwd.test", Path: "/p", From: "127.0.0.7", Header: map[string]string{"X-Request-ID": "rid-7"},
			Want: Want{Status: 200, Backend: "a", Host: "internal.example", Sent: map[string]string{
				"X-Forwarded-For": "127.0.0.7", "X-Real-Ip": "127.0.0.7", "X-Forwarded-Proto": "http",
				"X-Forwarded-Host": "fwd.test", "X-Forwarded-Prefix": "/pre", "X-Request-Id": "rid-7"}}},
			{Name: "the client's X-Forwarded-For is replaced (use-forwarded-headers off)", Host: "fwd.test", Path: "/p", From: "127.0.0.7",
				Header: map[string]string{"X-Forwarded-For": "203.0.113.9", "X-Real-IP": "203.0.113.9"},
				Want:   Want{Status: 200, Backend: "a", Sent: map[string]string{"X-Forwarded-For": "127.0.0.7", "X-Real-Ip": "127.0.0.7"}}},
		},
	},
	Row{
		Name: "upstream-vhost with a port, and one out of range",
		Manifests: `{{service "a" "vhost" "demo"}}` +
			ingress("vhostport", "vhostport.test", "vhost", root, "upstream-vhost", "internal.example:8080") +
			ingress("vhostbad", "vhostbad.test", "vhost", root, "upstream-vhost", "internal.example:99999"),
		Requests: []Request{
			{Name: "the port is sent", Host: "vhostport.test", Path: "/", Want: Want{Status: 200, Backend: "a", Host: "internal.example:8080"}},
			// Rejected once, by the builder, for both planes: the
			// annotation is reported and the client's Host goes upstream
			// (the nginx plane used to drop the whole location).
			{Name: "an invalid port: the annotation is dropped", Host: "vhostbad.test", Path: "/", Want: Want{Status: 200, Backend: "a", Host: "vhostbad.test"}},
		},
	},
	Row{
		// proxy-buffer-size: the most an upstream's response head may
		// take, nginx's "upstream sent too big header" (502) beyond.
		Name: "proxy-buffer-size",
		Manifests: `{{service "a" "bufsize" "demo"}}` + ingress("bufdefault", "bufdefault.test", "bufsize", root) +
			ingress("buf16k", "buf16k.test", "bufsize", root, "proxy-buffer-size", "16k"),
		Requests: []Request{
			{Name: "a 2 KB head by default", Host: "bufdefault.test", Path: "/", Header: map[string]string{"X-Answer-Header-Bytes": "2000"},
				Want: Want{Status: 200, Backend: "a"}},
			{Name: "a 6 KB head over the default 4k: 502", Host: "bufdefault.test", Path: "/", Header: map[string]string{"X-Answer-Header-Bytes": "6000"},
				Want: Want{Status: 502}},
			{Name: "an 8 KB head with 16k", Host: "buf16k.test", Path: "/", Header: map[string]string{"X-Answer-Header-Bytes": "8000"},
				Want: Want{Status: 200, Backend: "a"}},
			{Name: "a 20 KB head over 16k: 502", Host: "buf16k.test", Path: "/", Header: map[string]string{"X-Answer-Header-Bytes": "20000"},
				Want: Want{Status: 502}},
			// The connection grown for 16k is the default location's
			// again: 4k still holds there.
			{Name: "the default again after 16k", Host: "bufdefault.test", Path: "/", Header: map[string]string{"X-Answer-Header-Bytes": "6000"},
				Want: Want{Status: 502}},
		},
	},
	Row{
		// service-upstream: the cluster IP (here backend b's address and
		// port, as kube-proxy would route it) instead of the endpoints
		// (backend a).
		Name: "service-upstream",
		Manifests: ingress("svcup", "svcup.test", "svcup", root, "service-upstream", "true") +
			ingress("svcupoff", "svcupoff.test", "svcupoff", root) +
			ingress("svcupheadless", "svcupheadless.test", "svcupheadless", root, "service-upstream", "true") + `
---
apiVersion: v1
kind: Service
metadata: {name: svcup, namespace: demo}
spec:
  clusterIP: {{backend "b"}}
  ports:
  - {name: http, port: {{port "b"}}, targetPort: {{port "a"}}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: svcup-1
  namespace: demo
  labels: {kubernetes.io/service-name: svcup}
addressType: IPv4
ports:
- {name: http, port: {{port "a"}}, protocol: TCP}
endpoints:
- addresses: ["{{backend "a"}}"]
  conditions: {ready: true}
` + `{{service "a" "svcupheadless" "demo"}}{{service "a" "svcupoff" "demo"}}`,
		Requests: []Request{
			{Name: "the cluster IP", Host: "svcup.test", Path: "/", Want: Want{Status: 200, Backend: "b"}},
			{Name: "without: the endpoints", Host: "svcupoff.test", Path: "/", Want: Want{Status: 200, Backend: "a"}},
			// No cluster IP (headless): the endpoints, with an Event.
			{Name: "a headless Service keeps its endpoints", Host: "svcupheadless.test", Path: "/", Want: Want{Status: 200, Backend: "a"}},
		},
	},
	Row{
		Name: "redirects",
		Manifests: `{{service "a" "redir" "demo"}}` +
			ingress("moved", "moved.test", "redir", root, "permanent-redirect", "https://new.example.com/") +
			ingress("moved308", "moved308.test", "redir", root, "permanent-redirect", "https://new.example.com/x", "permanent-redirect-code", "308") +
			ingress("temp", "temp.test", "redir", root, "temporal-redirect", "https://tmp.example.com/x") +
			ingress("temp307", "temp307.test", "redir", root, "temporal-redirect", "https://tmp.example.com/y", "temporal-redirect-code", "307") +
			ingress("tempbad", "tempbad.test", "redir", root, "temporal-redirect", "https://tmp.example.com/z", "temporal-redirect-code", "308") +
			ingress("bothredir", "bothredir.test", "redir", root, "permanent-redirect", "https://new.example.com/",
				"temporal-redirect", "https://tmp.example.com/w"),
		Requests: []Request{
			{Name: "temporal-redirect-code", Host: "temp307.test", Path: "/", Want: Want{Status: 307, Header: map[string]string{"Location": "https://tmp.example.com/y"}}},
			// 300-307 only, as ingress-nginx: 308 is reported, 302 kept.
			{Name: "temporal-redirect-code out of range", Host: "tempbad.test", Path: "/", Want: Want{Status: 302, Header: map[string]string{"Location": "https://tmp.example.com/z"}}},
			// ingress-nginx's redirect parser reads temporal-redirect first.
			{Name: "temporal-redirect beside permanent-redirect wins", Host: "bothredir.test", Path: "/", Want: Want{Status: 302, Header: map[string]string{"Location": "https://tmp.example.com/w"}}},
			{Name: "permanent", Host: "moved.test", Path: "/a?b=c", Want: Want{Status: 301, Header: map[string]string{"Location": "https://new.example.com/"}}},
			{Name: "permanent-redirect-code", Host: "moved308.test", Path: "/a", Want: Want{Status: 308, Header: map[string]string{"Location": "https://new.example.com/x"}}},
			{Name: "temporal", Host: "temp.test", Path: "/a", Want: Want{Status: 302, Header: map[string]string{"Location": "https://tmp.example.com/x"}}},
		},
	},
	Row{
		Name:      "app-root",
		Manifests: `{{service "a" "approot" "demo"}}` + ingress("approot", "approot.test", "approot", root, "app-root", "/app"),
		Requests: []Request{
			// ingress-nginx: if ($uri = /) { return 302 $scheme://$http_host<app-root>; }
			{Name: "root", Host: "approot.test", Path: "/", Want: Want{Status: 302, Header: map[string]string{"Location": "http://approot.test/app"}}},
			{Name: "under the app root", Host: "approot.test", Path: "/app", Want: Want{Status: 200, Backend: "a", URI: "/app"}},
			{Name: "another path", Host: "approot.test", Path: "/other", Want: Want{Status: 200, Backend: "a", URI: "/other"}},
		},
	},
	Row{
		Name: "ssl-redirect and force-ssl-redirect",
		Manifests: `{{service "a" "sslr" "demo"}}{{tlsSecret "sslr-tls" "sslr.test"}}{{tlsSecret "nosslr-tls" "nosslr.test"}}` +
			ingressTLS(ingress("sslr", "sslr.test", "sslr", root), "sslr.test", "sslr-tls") +
			ingressTLS(ingress("nosslr", "nosslr.test", "sslr", root, "ssl-redirect", "false"), "nosslr.test", "nosslr-tls") +
			ingress("force", "force.test", "sslr", root, "force-ssl-redirect", "true"),
		Requests: []Request{
			// ssl-redirect is on by default for a host with TLS (308,
			// http-redirect-code); lua_ingress.lua drops a trailing slash
			// unless preserve-trailing-slash.
			{Name: "a TLS host redirects", Host: "sslr.test", Path: "/a/b?c=d", Want: Want{Status: 308, Header: map[string]string{"Location": "https://sslr.test/a/b?c=d"}}},
			{Name: "https serves", Host: "sslr.test", Path: "/a", HTTPS: true,
				Want: Want{Status: 200, Backend: "a", Sent: map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "sslr.test"}}},
			{Name: "ssl-redirect false", Host: "nosslr.test", Path: "/a", Want: Want{Status: 200, Backend: "a"}},
			{Name: "force-ssl-redirect without TLS", Host: "force.test", Path: "/x?y=1", Want: Want{Status: 308, Header: map[string]string{"Location": "https://force.test/x?y=1"}}},
		},
	},
	Row{
		Name:      "ssl-redirect drops a trailing slash",
		Manifests: `{{service "a" "slash" "demo"}}` + ingress("slash", "slash.test", "slash", root, "force-ssl-redirect", "true"),
		Requests: []Request{
			// lua_ingress.lua: "do not append a trailing slash on redirects
			// unless enabled by annotations" (preserve-trailing-slash).
			{Name: "root", Host: "slash.test", Path: "/", Want: Want{Status: 308, Header: map[string]string{"Location": "https://slash.test"}}},
			{Name: "a directory", Host: "slash.test", Path: "/d/", Want: Want{Status: 308, Header: map[string]string{"Location": "https://slash.test/d"}}},
			// Only the request URI's last byte counts: a query keeps it.
			{Name: "a directory with a query", Host: "slash.test", Path: "/d/?q=1", Want: Want{Status: 308, Header: map[string]string{"Location": "https://slash.test/d/?q=1"}}},
		},
	},
	Row{
		Name: "ssl-redirect with preserve-trailing-slash",
		Manifests: `{{service "a" "keepslash" "demo"}}` +
			ingress("keepslash", "keepslash.test", "keepslash", root, "force-ssl-redirect", "true", "preserve-trailing-slash", "true"),
		Requests: []Request{
			{Name: "a directory", Host: "keepslash.test", Path: "/d/", Want: Want{Status: 308, Header: map[string]string{"Location": "https://keepslash.test/d/"}}},
		},
	},
	Row{
		Name: "rewrite-target with captures",
		Manifests: `{{service "a" "rw" "demo"}}` + strings.Replace(ingress("rw", "rw.test", "rw", []string{"/api(/|$)(.*)"},
			"rewrite-target", "/$2", "use-regex", "true"), "pathType: Prefix", "pathType: ImplementationSpecific", 1),
		Requests: []Request{{Host: "rw.test", Path: "/api/users?q=1", Want: Want{Status: 200, Backend: "a", URI: "/users?q=1"}}},
	},
	Row{
		Name:      "proxy-body-size",
		Manifests: `{{service "a" "small" "demo"}}` + ingress("small", "small.test", "small", root, "proxy-body-size", "10"),
		Requests: []Request{
			{Name: "within the limit", Method: "POST", Host: "small.test", Path: "/", Body: "0123456789", Want: Want{Status: 200, Backend: "a"}},
			{Name: "over the limit", Method: "POST", Host: "small.test", Path: "/", Body: "0123456789a", Want: Want{Status: 413}},
		},
	},
	Row{
		Name: "canary by header",
		Manifests: `{{service "a" "main" "demo"}}{{service "b" "canary" "demo"}}` + ingress("main", "canary.test", "main", root) +
			ingress("canary", "canary.test", "canary", root, "canary", "true", "canary-by-header", "X-Canary"),
		Requests: []Request{
			{Name: "always", Host: "canary.test", Path: "/", Header: map[string]string{"X-Canary": "always"}, Want: Want{Status: 200, Backend: "b"}},
			{Name: "never", Host: "canary.test", Path: "/", Header: map[string]string{"X-Canary": "never"}, Want: Want{Status: 200, Backend: "a"}},
			{Name: "another value: weight 0", Host: "canary.test", Path: "/", Header: map[string]string{"X-Canary": "maybe"}, Want: Want{Status: 200, Backend: "a"}},
			{Name: "no header", Host: "canary.test", Path: "/", Want: Want{Status: 200, Backend: "a"}},
		},
	},
	Row{
		// ingress-nginx refuses such a canary Ingress whole; before, the
		// header alone routed "always" to the canary, without its pattern.
		Name: "a canary with an invalid header pattern is not used",
		Manifests: `{{service "a" "badcanary" "demo"}}{{service "b" "badcanary-c" "demo"}}` + ingress("badcanary", "badcanary.test", "badcanary", root) +
			ingress("badcanary-c", "badcanary.test", "badcanary-c", root, "canary", "true", "canary-by-header", "X-Canary",
				"canary-by-header-pattern", "(unclosed", "canary-weight", "100"),
		Requests: []Request{
			{Name: "always", Host: "badcanary.test", Path: "/", Header: map[string]string{"X-Canary": "always"}, Want: Want{Status: 200, Backend: "a"}},
			{Name: "weight 100 does not apply either", Host: "badcanary.test", Path: "/", Want: Want{Status: 200, Backend: "a"}},
		},
	},
	Row{
		Name:      "a refused snippet: the rest of the Ingress serves",
		Manifests: `{{service "a" "snip" "demo"}}` + ingress("snip", "snip.test", "snip", root, "configuration-snippet", "return 200 'x';"),
		Requests:  []Request{{Host: "snip.test", Path: "/", Want: Want{Status: 200, Backend: "a"}}},
	},
)
