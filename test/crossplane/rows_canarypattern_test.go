package crossplane

// canary-by-header-pattern, as ingress-nginx's balancer.lua matches it
// (ngx.re.match: unanchored, case-sensitive): a header value the pattern
// matches routes to the canary, any other value falls through to the
// weight (0 here: the main), and so does a request without the header. On
// the nginx plane the shim matches it in the worker (issue 16).
var _ = register(Row{
	Name: "canary by header pattern",
	Manifests: `{{service "a" "patmain" "demo"}}{{service "b" "patcanary" "demo"}}` + ingress("patmain", "patcanary.test", "patmain", root) +
		ingress("patcanary", "patcanary.test", "patcanary", root, "canary", "true", "canary-by-header", "X-Canary",
			"canary-by-header-pattern", "^(on|yes)$"),
	Requests: []Request{
		{Name: "on", Host: "patcanary.test", Path: "/", Header: map[string]string{"X-Canary": "on"}, Want: Want{Status: 200, Backend: "b"}},
		{Name: "yes", Host: "patcanary.test", Path: "/", Header: map[string]string{"X-Canary": "yes"}, Want: Want{Status: 200, Backend: "b"}},
		{Name: "anchored: not a prefix", Host: "patcanary.test", Path: "/", Header: map[string]string{"X-Canary": "yes please"}, Want: Want{Status: 200, Backend: "a"}},
		{Name: "case-sensitive", Host: "patcanary.test", Path: "/", Header: map[string]string{"X-Canary": "ON"}, Want: Want{Status: 200, Backend: "a"}},
		{Name: "always is only a value here", Host: "patcanary.test", Path: "/", Header: map[string]string{"X-Canary": "always"}, Want: Want{Status: 200, Backend: "a"}},
		{Name: "no header", Host: "patcanary.test", Path: "/", Want: Want{Status: 200, Backend: "a"}},
	},
}, Row{
	Name: "canary by an unanchored header pattern",
	Manifests: `{{service "a" "upatmain" "demo"}}{{service "b" "upatcanary" "demo"}}` + ingress("upatmain", "upatcanary.test", "upatmain", root) +
		ingress("upatcanary", "upatcanary.test", "upatcanary", root, "canary", "true", "canary-by-header", "X-Canary",
			"canary-by-header-pattern", "beta"),
	Requests: []Request{
		{Name: "inside the value", Host: "upatcanary.test", Path: "/", Header: map[string]string{"X-Canary": "xbetax"}, Want: Want{Status: 200, Backend: "b"}},
		{Name: "no match", Host: "upatcanary.test", Path: "/", Header: map[string]string{"X-Canary": "BETA"}, Want: Want{Status: 200, Backend: "a"}},
	},
})
