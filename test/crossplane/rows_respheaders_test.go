package crossplane

// add-headers and custom-headers: response fields from ConfigMaps, on the
// statuses nginx's add_header acts on; proxy-set-headers: request fields
// to the upstream.
var _ = register(Row{
	Name: "add-headers, custom-headers and proxy-set-headers",
	ConfigMap: map[string]string{"global-allowed-response-headers": "X-Frame-Options, X-Custom, X-Global", "add-headers": "demo/global-hdrs",
		"proxy-set-headers": "demo/set-hdrs"},
	Manifests: `{{service "a" "hdrs" "demo"}}{{service "down" "hdrsdown" "demo"}}` +
		ingress("hdrs", "hdrs.test", "hdrs", root, "custom-headers", "hdrs") +
		ingress("hdrsplain", "hdrsplain.test", "hdrs", root) +
		ingress("hdrsdown", "hdrsdown.test", "hdrsdown", root, "custom-headers", "demo/hdrs") +
		ingress("hdrsnotallowed", "hdrsnotallowed.test", "hdrs", root, "custom-headers", "hdrs-bad") +
		ingress("hdrsvar", "hdrsvar.test", "hdrs", root, "custom-headers", "hdrs-var") +
		ingress("hdrsmissing", "hdrsmissing.test", "hdrs", root, "custom-headers", "no-such-map") + `
---
apiVersion: v1
kind: ConfigMap
metadata: {name: global-hdrs, namespace: demo}
data:
  X-Global: on every answer
---
apiVersion: v1
kind: ConfigMap
metadata: {name: hdrs, namespace: demo}
data:
  X-Custom: custom "value"
  X-Frame-Options: DENY
  X-Global: custom wins
---
apiVersion: v1
kind: ConfigMap
metadata: {name: set-hdrs, namespace: demo}
data:
  X-Tenant: blue "team"
  X-Drop: ""
---
apiVersion: v1
kind: ConfigMap
metadata: {name: hdrs-bad, namespace: demo}
data:
  X-Not-Allowed: "1"
---
apiVersion: v1
kind: ConfigMap
metadata: {name: hdrs-var, namespace: demo}
data:
  X-Custom: $host
`,
	Requests: []Request{
		{Name: "custom-headers over add-headers", Host: "hdrs.test", Path: "/",
			Want: Want{Status: 200, Backend: "a", Header: map[string]string{"X-Custom": `custom "value"`, "X-Frame-Options": "DENY", "X-Global": "custom wins"}}},
		// proxy_set_header: the client's field replaced, an empty value
		// removes it.
		{Name: "proxy-set-headers", Host: "hdrsplain.test", Path: "/", Header: map[string]string{"X-Tenant": "red", "X-Drop": "x"},
			Want: Want{Status: 200, Backend: "a", Sent: map[string]string{"X-Tenant": `blue "team"`, "X-Drop": ""}}},
		{Name: "add-headers alone", Host: "hdrsplain.test", Path: "/",
			Want: Want{Status: 200, Backend: "a", Header: map[string]string{"X-Global": "on every answer", "X-Custom": ""}}},
		// add_header's statuses: a 503 from the upstream gets none.
		{Name: "not on a 503", Host: "hdrsdown.test", Path: "/",
			Want: Want{Status: 503, Backend: "down", Header: map[string]string{"X-Custom": "", "X-Global": ""}}},
		// ingress-nginx denies the location of a field that
		// global-allowed-response-headers does not list, and of a missing
		// ConfigMap; a '$' (an nginx variable there) too, here.
		{Name: "a name not allowed: 503", Host: "hdrsnotallowed.test", Path: "/", Want: Want{Status: 503}},
		{Name: "an nginx variable: 503", Host: "hdrsvar.test", Path: "/", Want: Want{Status: 503}},
		{Name: "a missing ConfigMap: 503", Host: "hdrsmissing.test", Path: "/", Want: Want{Status: 503}},
	},
})
