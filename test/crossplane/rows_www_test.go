package crossplane

import "regexp"

// reLocationPort is a Location's port: the data planes listen on ports
// picked per run, so answers compare it as "<port>".
var reLocationPort = regexp.MustCompile(`^([a-z]+://[^/:]+):[0-9]+`)

// from-to-www-redirect: a server for the other name redirects to the
// Ingress's host, as ingress-nginx's redirect servers.
var _ = register(Row{
	Name: "from-to-www-redirect",
	Manifests: `{{service "a" "www" "demo"}}` +
		ingress("wwwapex", "wwwapex.test", "www", root, "from-to-www-redirect", "true") +
		ingress("wwwsub", "www.wwwsub.test", "www", root, "from-to-www-redirect", "true") +
		ingress("wwwtaken", "wwwtaken.test", "www", root, "from-to-www-redirect", "true") +
		ingress("wwwtaken2", "www.wwwtaken.test", "www", root),
	Requests: []Request{
		{Name: "www. to the host, port and path kept, a trailing slash dropped", Host: "www.wwwapex.test", Path: "/a/b/",
			Want: Want{Status: 308, Header: map[string]string{"Location": "http://wwwapex.test:<port>/a/b"}}},
		{Name: "the query kept", Host: "www.wwwapex.test", Path: "/a?x=1",
			Want: Want{Status: 308, Header: map[string]string{"Location": "http://wwwapex.test:<port>/a?x=1"}}},
		{Name: "the root", Host: "www.wwwapex.test", Path: "/",
			Want: Want{Status: 308, Header: map[string]string{"Location": "http://wwwapex.test:<port>"}}},
		{Name: "the host itself is served", Host: "wwwapex.test", Path: "/", Want: Want{Status: 200, Backend: "a"}},
		{Name: "the host without www. to www.", Host: "wwwsub.test", Path: "/x",
			Want: Want{Status: 308, Header: map[string]string{"Location": "http://www.wwwsub.test:<port>/x"}}},
		// An Ingress serves www.wwwtaken.test: no redirect server for it.
		{Name: "a name an Ingress serves is not redirected", Host: "www.wwwtaken.test", Path: "/", Want: Want{Status: 200, Backend: "a"}},
	},
})
