package nginxcompat

import (
	"net/netip"
	"regexp"

	"github.com/google/go-cmp/cmp"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// allowedShapes is every "ctx/.../name" the template writes, taken from the
// golden cases that switch every feature on.
var allowedShapes = sync.OnceValue(func() map[string]int {
	m := map[string]int{}
	for _, c := range []string{"annotations", "tls", "basic", "clientauth"} {
		cfg := loadCase(nil, "testdata/render/"+c+".json")
		r, err := Render(cfg, goldenRenderConfig)
		if err != nil {
			panic(err)
		}
		ds, err := parseNginxConf(string(r.Conf))
		if err != nil {
			panic(err)
		}
		shapes(ds, "", m)
	}
	return m
})

// renderParsed renders cfg and parses the file, failing the test when it
// does not parse or holds a directive the template never writes.
func renderParsed(t *testing.T, cfg *model.Configuration) (*Rendered, []*directive) {
	t.Helper()
	r, err := Render(cfg, goldenRenderConfig)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := parseNginxConf(string(r.Conf))
	if err != nil {
		t.Fatalf("rendered file does not parse: %v\n%s", err, r.Conf)
	}
	got := map[string]int{}
	shapes(ds, "", got)
	allowed := allowedShapes()
	for k := range got {
		if _, ok := allowed[k]; !ok {
			t.Fatalf("directive %s is not one the template writes\n%s", k, r.Conf)
		}
	}
	return r, ds
}

// FuzzRender renders arbitrary hosts, paths and annotation values and parses
// the output: it must parse, hold only directives the template writes, have
// exactly the servers and locations accepted, and carry each accepted value
// back unchanged as one argument.
func FuzzRender(f *testing.F) {
	f.Add("app.example.com", "/", "", "", "", "10.0.0.0/8", "default-web-80", false)
	f.Add("a;b", "/x { deny all; }", "/$1", "https://x.example.com", "h.example.com:80", "nope", "b\"c", true)
	f.Add("*.example.com", "/a\"b", "/$host", "*", "", "", "x", false)
	f.Add("x.example.com", "/p\\\"; return 200 x;#", "/ok", "", "", "", "be", true)
	f.Add("c.example.com", "/c/", "", "https://a.example,http://*.b.example:8080", "", "", "be", false)
	f.Add("c.example.com", "/c/", "", "https://a.example\" ) { return 200; } if ($x ~ \"", "", "", "be", false)
	f.Add("c.example.com", "/c/", "", "https://a.ex(ample|evil).com,*", "", "", "be", false)
	f.Fuzz(func(t *testing.T, host, path, target, origin, vhost, cidr, backend string, regex bool) {
		loc := model.Location{
			Path: path, PathType: model.PathTypePrefix, Regex: regex,
			Ingress: model.ObjectRef{Kind: "Ingress", Namespace: "ns", Name: "ing"},
			Backend: backend,
			LocationSettings: &model.LocationSettings{
				Rewrite:       model.Rewrite{Target: target, SSLRedirect: true},
				UpstreamVhost: vhost, XForwardedPrefix: path,
				CORS: model.CORS{Enabled: origin != "", AllowOrigin: strings.Split(origin, ",")},
			},
		}
		if p, err := netip.ParsePrefix(cidr); err == nil {
			loc.AllowSourceRanges = []netip.Prefix{p}
		} else if cidr != "" {
			// A prefix that is not valid: the location must fail closed.
			loc.AllowSourceRanges = []netip.Prefix{{}}
		}
		cfg := &model.Configuration{
			Servers: []model.Server{
				{Hostname: "_", Locations: []model.Location{{Path: "/", Backend: model.DefaultBackendName}}},
				{Hostname: host, Aliases: []string{host}, Locations: []model.Location{loc}},
			},
			Global: model.Global{Nginx: model.NginxSettings{SSLCiphers: target}},
		}
		if segs, err := model.ParseLogFormat(path); err == nil {
			cfg.Global.AccessLogFormat.Segments = segs
		} else {
			// Not a format the builder passes: written anyway, the
			// renderer must refuse it.
			cfg.Global.AccessLogFormat.Segments = []model.LogSegment{{Literal: path}}
		}
		r, ds := renderParsed(t, cfg)
		var servers, locations []*directive
		walk(ds, func(d, parent *directive) {
			if parent != nil && parent.Name == "http" && d.Name == "server" {
				servers = append(servers, d)
			}
			if d.Name == "location" && parent != nil && parent.Name == "server" {
				locations = append(locations, d)
			}
		})
		hostOK := validHost(host) && host != "_"
		wantServers := 2 // catch-all and status
		if hostOK {
			wantServers++
		}
		if len(servers) != wantServers {
			t.Fatalf("got %d servers; want %d (host %q)", len(servers), wantServers, host)
		}
		if !hostOK {
			return
		}
		hs := servers[1]
		for _, d := range hs.Block {
			if d.Name == "server_name" && (len(d.Args) != 1 || d.Args[0] != host) {
				t.Fatalf("server_name args %q; want [%q]", d.Args, host)
			}
		}
		var mine []*directive
		for _, d := range hs.Block {
			if d.Name == "location" {
				mine = append(mine, d)
			}
		}
		if path == "" {
			path = "/" // an Ingress path left out is "/"
		}
		wantPaths := []string{path}
		switch {
		case regex:
			wantPaths = []string{"^" + path}
		case !strings.HasSuffix(path, "/"):
			// A Prefix path p is "= p" plus "p/", as ingress-nginx writes it.
			wantPaths = []string{path, path + "/"}
		}
		if len(mine) == 0 {
			if len(r.Errors) == 0 {
				t.Fatalf("location %q left out without an error", path)
			}
			return
		}
		if len(mine) != len(wantPaths) {
			t.Fatalf("got %d locations from one path; want %d", len(mine), len(wantPaths))
		}
		failedClosed := false
		for _, e := range r.Errors {
			failedClosed = failedClosed || strings.Contains(e.Message, "fail closed")
		}
		for i, l := range mine {
			checkFuzzLocation(t, l, wantPaths[i], failedClosed, target, backend, origin)
		}
	})
}

// checkFuzzLocation checks one location FuzzRender wrote for its path.
func checkFuzzLocation(t *testing.T, l *directive, wantPath string, failedClosed bool, target, backend, origin string) {
	t.Helper()
	returns503 := false
	for _, d := range l.Block {
		returns503 = returns503 || (d.Name == "return" && len(d.Args) == 1 && d.Args[0] == "503")
	}
	if failedClosed != returns503 {
		t.Fatalf("fail closed %v but return 503 is %v", failedClosed, returns503)
	}
	if l.Args[len(l.Args)-1] != wantPath {
		t.Fatalf("location path %q; want %q", l.Args[len(l.Args)-1], wantPath)
	}
	if origin != "" && !returns503 {
		checkCORSOrigins(t, l, strings.Split(origin, ","))
	}
	for _, d := range l.Block {
		switch d.Name {
		case "rewrite":
			if len(d.Args) != 3 || d.Args[1] != target || d.Args[2] != "break" {
				t.Fatalf("rewrite args %q; want target %q", d.Args, target)
			}
		case "set":
			if len(d.Args) != 2 {
				t.Fatalf("set args %q", d.Args)
			}
			if d.Args[0] == "$proxy_upstream_name" && d.Args[1] != backend {
				t.Fatalf("upstream name %q; want %q", d.Args[1], backend)
			}
		}
		for _, a := range d.Args {
			if d.Name != "return" && d.Name != "if" && strings.Contains(a, "$") &&
				!strings.HasPrefix(a, "$") && d.Name != "rewrite" {
				t.Fatalf("%s has a variable inside a value: %q", d.Name, a)
			}
		}
	}
}

// checkCORSOrigins checks a served location's enable-cors against its
// cors-allow-origin list: only the cors_* variables are set, and an Origin
// check is written unless "*" is listed; its regex, as nginx reads it,
// matches each listed origin whole, in any case, and not with a byte more in
// front or behind.
func checkCORSOrigins(t *testing.T, l *directive, origins []string) {
	t.Helper()
	var check *directive
	anySet := false
	for _, d := range l.Block {
		if d.Name == "if" && len(d.Args) > 0 && d.Args[0] == "($http_origin" {
			if check != nil {
				t.Fatalf("two Origin checks in %q", l.Args)
			}
			check = d
		}
		if d.Name == "set" && len(d.Args) == 2 && d.Args[0] == "$cors_origin" && d.Args[1] == "*" {
			anySet = true
		}
	}
	star := false
	for _, o := range origins {
		star = star || o == "*"
	}
	if star != anySet || (check != nil) == anySet {
		t.Fatalf("origins %q: Origin check %v, \"*\" set %v", origins, check != nil, anySet)
	}
	if check == nil {
		return
	}
	if len(check.Args) != 4 || check.Args[1] != "~*" || check.Args[3] != ")" {
		t.Fatalf("if %q", check.Args)
	}
	re, err := regexp.Compile("(?i)" + check.Args[2])
	if err != nil {
		t.Fatalf("Origin regex %q: %v", check.Args[2], err)
	}
	for _, o := range origins {
		for _, v := range []string{o, strings.ToUpper(o), strings.Replace(o, "*", "x-1", 1)} {
			if strings.Contains(v, "*") {
				continue
			}
			if !re.MatchString(v) {
				t.Fatalf("Origin regex %q does not match %q", check.Args[2], v)
			}
			others := []string{"x" + v, v + "x", v + "/", "." + v}
			for i := range len(v) {
				if v[i] == '.' {
					// A dot is not any byte.
					others = append(others, v[:i]+"x"+v[i+1:])
				}
			}
			for _, more := range others {
				if re.MatchString(more) && !matchesAny(origins, more) {
					t.Fatalf("Origin regex %q matches %q", check.Args[2], more)
				}
			}
		}
	}
	for _, d := range check.Block {
		if d.Name != "set" || len(d.Args) != 2 || !strings.HasPrefix(d.Args[0], "$cors") {
			t.Fatalf("%s %q in the Origin check", d.Name, d.Args)
		}
	}
}

// matchesAny reports whether origin is one of origins, "*." standing for
// one label, case aside.
func matchesAny(origins []string, origin string) bool {
	for _, o := range origins {
		if strings.EqualFold(o, origin) {
			return true
		}
		if pre, post, ok := strings.Cut(o, "*."); ok && len(origin) > len(pre)+len(post) &&
			strings.EqualFold(origin[:len(pre)], pre) && strings.EqualFold(origin[len(origin)-len(post):], post) {
			label := origin[len(pre) : len(origin)-len(post)]
			if strings.HasSuffix(label, ".") && !strings.ContainsAny(label[:len(label)-1], ".:/") {
				return true
			}
		}
	}
	return false
}

// FuzzRenderRealIP renders arbitrary real-IP settings, as a typed model that
// skipped the builder's checks could carry them: the file must parse and
// hold only directives the template writes; an accepted header is
// real_ip_header's one argument, each range a set_real_ip_from's; a refused
// one writes no realip directive and makes the location with an allow list
// fail closed.
func FuzzRenderRealIP(f *testing.F) {
	f.Add("X-Forwarded-For", "10.0.0.0/8", true)
	f.Add("X-A;\nreturn 200", "0.0.0.0/0", false)
	f.Add("proxy_protocol", "::/0", true)
	f.Add("X-Real-IP", "", false)
	f.Fuzz(func(t *testing.T, header, cidr string, passthrough bool) {
		ri := &model.RealIP{Header: header}
		if p, err := netip.ParsePrefix(cidr); err == nil {
			ri.From = []netip.Prefix{p}
		} else if cidr != "" {
			ri.From = []netip.Prefix{{}}
		}
		loc := model.Location{Path: "/p", PathType: model.PathTypePrefix, Backend: "be",
			Ingress:          model.ObjectRef{Kind: "Ingress", Namespace: "ns", Name: "ing"},
			LocationSettings: &model.LocationSettings{AllowSourceRanges: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}}
		cfg := &model.Configuration{Servers: []model.Server{
			{Hostname: "_", Locations: []model.Location{{Path: "/", Backend: model.DefaultBackendName}}},
			{Hostname: "h.example", Locations: []model.Location{loc}},
		}, Global: model.Global{RealIP: ri}}
		rc := goldenRenderConfig
		rc.HTTPSProxyProtocol = passthrough
		r, err := Render(cfg, rc)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := parseNginxConf(string(r.Conf))
		if err != nil {
			t.Fatalf("rendered file does not parse: %v\n%s", err, r.Conf)
		}
		accepted := reRealIPHeader.MatchString(header) && len(ri.From) == 1 && ri.From[0].IsValid()
		var headers, from []string
		denied := false
		walk(ds, func(d, parent *directive) {
			switch d.Name {
			case "real_ip_header":
				headers = append(headers, d.Args...)
			case "set_real_ip_from":
				from = append(from, d.Args...)
			case "return":
				denied = denied || (len(d.Args) == 1 && d.Args[0] == "503")
			}
		})
		switch {
		case accepted:
			want := []string{header}
			if diff := cmp.Diff(want, headers); diff != "" {
				t.Fatalf("real_ip_header (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{ri.From[0].Masked().String()}, from); diff != "" {
				t.Fatalf("set_real_ip_from (-want +got):\n%s", diff)
			}
			if denied != passthrough {
				t.Fatalf("allow list denied %v with passthrough %v", denied, passthrough)
			}
		default:
			if passthrough {
				if diff := cmp.Diff([]string{"proxy_protocol"}, headers); diff != "" {
					t.Fatalf("real_ip_header (-want +got):\n%s", diff)
				}
			} else if len(headers)+len(from) > 0 {
				t.Fatalf("refused settings rendered: %q %q", headers, from)
			}
			if !denied || len(r.Errors) == 0 {
				t.Fatalf("refused settings: denied %v, errors %v", denied, r.Errors)
			}
		}
	})
}

// FuzzRenderClientAuth renders arbitrary auth-tls values, ca.crl's
// included: the file parses and holds only directives the template writes;
// the CA and CRL reach nginx only as files named by their content
// (ssl_client_certificate, ssl_crl: one argument under CertDir); a value
// the renderer refuses makes the server's locations fail closed.
func FuzzRenderClientAuth(f *testing.F) {
	f.Add("CN=(alice|bob)", "https://errors.example.com/cert", "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n")
	f.Add("x\"; return 200;", "/a b", "-----BEGIN X509 CRL-----\";\nssl_crl /etc/passwd;")
	f.Add("", "", "-----BEGIN X509 CRL-----\n-----BEGIN PRIVATE KEY-----\n")
	f.Fuzz(func(t *testing.T, matchCN, errorPage, crl string) {
		ca := &model.ClientAuth{CA: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", CRL: crl,
			Verify: model.VerifyOn, Depth: 1, ErrorPage: errorPage}
		if matchCN != "" {
			ca.MatchCN = model.NewRegexp(matchCN)
		}
		loc := model.Location{Path: "/p", PathType: model.PathTypePrefix, Backend: "be",
			Ingress: model.ObjectRef{Kind: "Ingress", Namespace: "ns", Name: "ing"}}
		cfg := &model.Configuration{Servers: []model.Server{
			{Hostname: "_", Locations: []model.Location{{Path: "/", Backend: model.DefaultBackendName}}},
			{Hostname: "h.example", TLS: &model.ServerTLS{CertificateUID: "c"}, ClientAuth: ca, Locations: []model.Location{loc}},
		}, Certificates: map[string]model.Certificate{"c": {UID: "c", PEM: "x"}}}
		r, ds := renderParsed(t, cfg)
		denied, crls := false, 0
		walk(ds, func(d, parent *directive) {
			switch d.Name {
			case "return":
				denied = denied || (len(d.Args) == 1 && d.Args[0] == "503")
			case "ssl_crl", "ssl_client_certificate":
				if len(d.Args) != 1 || !strings.HasPrefix(d.Args[0], goldenRenderConfig.withDefaults().CertDir+"/client-") {
					t.Fatalf("%s %q", d.Name, d.Args)
				}
				if d.Name == "ssl_crl" {
					crls++
					if r.ClientCAs[d.Args[0]] != crl {
						t.Fatalf("ssl_crl %s holds %q; want the CRL", d.Args[0], r.ClientCAs[d.Args[0]])
					}
				}
			}
		})
		if denied != (len(r.Errors) > 0) {
			t.Fatalf("denied %v, errors %v", denied, r.Errors)
		}
		if !denied && crl != "" && crls != 1 {
			t.Fatalf("a served CRL written %d times", crls)
		}
	})
}

// FuzzRenderAuth renders arbitrary external-authentication values, as a
// typed model that skipped the builder's checks could carry them: the file
// must parse and hold only directives the template writes; a value the
// renderer refuses makes the location fail closed (return 503, an error);
// and the auth location's variables are only the documented ones.
func FuzzRenderAuth(f *testing.F) {
	f.Add("http://10.0.0.9:4180/oauth2/auth", "https://a.example/start?rd=", "X-Auth-Request-User", "/after", "GET", true)
	f.Add("http://a\";return 200;#", "x;}", "X\"Y", "/a b", "EVIL", false)
	f.Add("http://$remote_addr/", "${host", "X-A", "", "", true)
	f.Add("http://a/${http_cookie}", "", "", "$request_body", "POST", false)
	f.Fuzz(func(t *testing.T, url, signin, header, redirect, method string, useVar bool) {
		u := model.URLTemplate{{Literal: url}}
		if useVar {
			u = append(u, model.URLPart{Var: model.VarEscapedRequestURI})
		}
		ea := &model.ExternalAuth{URL: u, Host: model.URLTemplate{{Var: model.VarHost}}, Method: method, RequestRedirect: redirect}
		if signin != "" {
			ea.SigninURL = model.URLTemplate{{Literal: signin}, {Var: model.URLVar(header)}}
		}
		if header != "" {
			// auth-proxy-set-headers: the header as a name, the redirect
			// text as its value.
			ea.ProxySetHeaders = []model.HeaderField{{Name: header, Value: redirect}}
			ea.ResponseHeaders = []string{header}
			ea.CacheKey = []model.CacheKeyPart{{Literal: header}, {Var: "cookie_" + header}}
			ea.CacheValid = []model.CacheValid{{Codes: []int{200}, Seconds: 60}}
		}
		loc := model.Location{Path: "/p", PathType: model.PathTypePrefix, Backend: "be",
			Ingress:          model.ObjectRef{Kind: "Ingress", Namespace: "ns", Name: "ing"},
			LocationSettings: &model.LocationSettings{ExternalAuth: ea}}
		cfg := &model.Configuration{Servers: []model.Server{
			{Hostname: "_", Locations: []model.Location{{Path: "/", Backend: model.DefaultBackendName}}},
			{Hostname: "h.example", Locations: []model.Location{loc}},
		}}
		r, ds := renderParsed(t, cfg)
		var mine []*directive
		walk(ds, func(d, parent *directive) {
			if d.Name == "server" {
				for _, x := range d.Block {
					if x.Name == "server_name" && len(x.Args) == 1 && x.Args[0] == "h.example" {
						mine = d.Block
					}
				}
			}
		})
		authLocations, denied, setHeader := 0, false, 0
		walk(mine, func(d, parent *directive) {
			if d.Name == "proxy_set_header" && len(d.Args) > 0 && d.Args[0] == header && header != "" {
				setHeader++
				if len(d.Args) != 2 || d.Args[1] != redirect {
					t.Fatalf("proxy_set_header %q; want [%q %q]", d.Args, header, redirect)
				}
			}
			if d.Name == "location" && len(d.Args) == 2 && d.Args[0] == "=" && strings.HasPrefix(d.Args[1], "/_external-auth-") {
				authLocations++
			}
			if d.Name == "return" && len(d.Args) == 1 && d.Args[0] == "503" {
				denied = true
			}
			for _, a := range d.Args {
				for _, v := range varsIn(a) {
					if !knownVariable(v) {
						t.Fatalf("%s %q uses $%s", d.Name, d.Args, v)
					}
				}
			}
		})
		if denied == (authLocations > 0) || denied != (len(r.Errors) > 0) {
			t.Fatalf("denied %v, %d auth locations, errors %v", denied, authLocations, r.Errors)
		}
		if header != "" && !denied && setHeader != 1 {
			t.Fatalf("auth-proxy-set-headers %q written %d times", header, setHeader)
		}
	})
}

// varsIn lists the variables an nginx argument references ($name or
// ${name}).
func varsIn(a string) []string {
	var out []string
	for i := 0; i < len(a); i++ {
		if a[i] != '$' {
			continue
		}
		j := i + 1
		brace := j < len(a) && a[j] == '{'
		if brace {
			j++
		}
		k := j
		for k < len(a) && (a[k] == '_' || a[k] >= 'a' && a[k] <= 'z' || a[k] >= 'A' && a[k] <= 'Z' || a[k] >= '0' && a[k] <= '9') {
			k++
		}
		out = append(out, a[j:k])
		i = k
	}
	return out
}

// knownVariable: the variables the template itself uses, and the auth URLs'
// documented ones.
func knownVariable(v string) bool {
	for _, u := range model.URLVars {
		if string(u) == v {
			return true
		}
	}
	switch v {
	case "tmp_cache_key", "cache_key", "req_id", "request_uri", "pass_access_scheme", "scheme", "http_host", "request_method", "remote_addr",
		"full_x_forwarded_for", "target", "auth_cookie", "upstream_http_set_cookie", "namespace", "ingress_name",
		"service_name", "proxy_upstream_name", "proxy_alternative_upstream_name", "balancer_ewma_score", "location_path",
		"best_http_host", "http_upgrade", "connection_upgrade", "pass_server_port", "literal_dollar", "escaped_request_uri", "host", "":
		return true
	}
	return strings.HasPrefix(v, "authHeader") || strings.HasPrefix(v, "upstream_http_") ||
		(strings.HasPrefix(v, "cookie_") && reCacheVar.MatchString(v))
}
