package crossplane

// global-auth-url: the ConfigMap's external authentication protects every
// Ingress location without its own auth-url, but an Ingress with
// enable-global-auth: "false". The row runs on a controller of its own, so
// the other rows stay unprotected.
var _ = register(Row{
	Name:      "global-auth-url, and an Ingress opting out",
	ConfigMap: map[string]string{"global-auth-url": "{{authURL}}"},
	Manifests: `{{service "a" "global" "demo"}}` +
		ingress("global", "global.test", "global", root) +
		ingress("global-optout", "optout.test", "global", root, "enable-global-auth", "false"),
	Requests: []Request{
		{Name: "no session: 401", Host: "global.test", Path: "/",
			Want: Want{Status: 401, Header: map[string]string{"WWW-Authenticate": `Bearer realm="oauth2-proxy"`}}},
		{Name: "signed in", Host: "global.test", Path: "/x?y=1", Header: map[string]string{"Cookie": "_oauth2_proxy=alice"},
			Want: Want{Status: 200, Backend: "a", URI: "/x?y=1"}},
		{Name: "forbidden", Host: "global.test", Path: "/", Header: map[string]string{"Cookie": "_oauth2_proxy=mallory"}, Want: Want{Status: 403}},
		{Name: "enable-global-auth false: served without a session", Host: "optout.test", Path: "/", Want: Want{Status: 200, Backend: "a"}},
	},
})
