package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/test/harness"
)

// headerBackend answers with the request's method, URI and the fields a
// test asks about, one "name=value" per line.
func headerBackend(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s\n", r.Method, r.URL.RequestURI())
		for _, k := range []string{"X-Auth-Request-User", "X-Auth-Request-Email", "X-Auth-Request-Groups", "X-Request-Id", "Cookie"} {
			fmt.Fprintf(w, "%s=%s\n", k, strings.Join(r.Header.Values(k), "|"))
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func lit(s string) model.URLPart { return model.URLPart{Literal: s} }

// External authentication against a service speaking oauth2-proxy's
// contract: what the service is sent, and each of its answers.
func TestExternalAuth(t *testing.T) {
	auth := harness.StartAuthServer(t, "127.0.0.1", []string{"alice"}, []string{"mallory"})
	be := headerBackend(t)
	authURL := model.URLTemplate{lit("http://" + auth.Addr + "/oauth2/auth")}
	host := model.URLTemplate{lit("127.0.0.1")}
	plain := loc("/", model.PathTypePrefix, "be")
	plain.ExternalAuth = &model.ExternalAuth{URL: authURL, Host: host, ResponseHeaders: []string{"X-Auth-Request-User", "X-Auth-Request-Email", "X-Auth-Request-Groups"}}
	signin := loc("/", model.PathTypePrefix, "be")
	signin.ExternalAuth = &model.ExternalAuth{URL: authURL, Host: host,
		SigninURL: model.URLTemplate{lit("https://"), {Var: model.VarHost}, lit("/oauth2/start?rd="), {Var: model.VarEscapedRequestURI}}}
	always := loc("/", model.PathTypePrefix, "be")
	always.ExternalAuth = &model.ExternalAuth{URL: authURL, Host: host, AlwaysSetCookie: true, Method: "POST", RequestRedirect: "/back"}
	dead := loc("/", model.PathTypePrefix, "be")
	dead.ExternalAuth = &model.ExternalAuth{URL: model.URLTemplate{lit("http://" + deadAddr(t) + "/")}, Host: host}
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "be", Endpoints: endpoints(be)}},
		Servers: []model.Server{
			{Hostname: "plain.test", Locations: []model.Location{plain}},
			{Hostname: "signin.test", Locations: []model.Location{signin}},
			{Hostname: "always.test", Locations: []model.Location{always}},
			{Hostname: "dead.test", Locations: []model.Location{dead}},
		},
	}
	base, _ := start(t, cfg)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, host, path string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader("secret body"))
		req.Host = host
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp, b.String()
	}

	// Signed in: through, the service's fields replace the client's.
	resp, body := do("POST", "plain.test", "/app?q=1", map[string]string{"Cookie": "_oauth2_proxy=alice",
		"X-Auth-Request-User": "root", "X-Request-ID": "rid-1", "Upgrade": "h2c"})
	if resp.StatusCode != 200 || !strings.Contains(body, "X-Auth-Request-User=alice\n") || !strings.Contains(body, "X-Auth-Request-Email=alice@example.com\n") ||
		!strings.Contains(body, "X-Request-Id=rid-1\n") || !strings.Contains(body, "POST /app?q=1\n") {
		t.Errorf("signed in: %d\n%s", resp.StatusCode, body)
	}
	if got := resp.Header.Values("Set-Cookie"); len(got) != 1 || !strings.HasPrefix(got[0], "_oauth2_proxy=alice;") {
		t.Errorf("signed in: Set-Cookie %q; want the service's refreshed session", got)
	}
	sent := auth.Last()
	for k, want := range map[string]string{
		"X-Original-Url": "http://plain.test/app?q=1", "X-Original-Method": "POST", "X-Sent-From": "nginx-ingress-controller",
		"X-Real-Ip": "127.0.0.1", "X-Forwarded-For": "127.0.0.1", "X-Auth-Request-Redirect": "/app?q=1", "X-Request-Id": "rid-1",
		"Cookie": "_oauth2_proxy=alice", "Content-Length": "", "Upgrade": "", "X-Forwarded-Proto": "", "X-Original-Uri": "",
	} {
		if got := sent.Header.Get(k); got != want {
			t.Errorf("the service got %s: %q; want %q", k, got, want)
		}
	}
	if sent.Method != "GET" || sent.Host != "127.0.0.1" || sent.URL.RequestURI() != "/oauth2/auth" || sent.ContentLength > 0 {
		t.Errorf("the service got %s %s Host %s, %d body bytes; want GET /oauth2/auth, Host 127.0.0.1, no body", sent.Method, sent.URL.RequestURI(), sent.Host, sent.ContentLength)
	}

	// A spoofed field the service did not send is removed; no request ID
	// from the client: the service and the upstream get the same one.
	resp, body = do("GET", "plain.test", "/", map[string]string{"Cookie": "_oauth2_proxy=alice", "X-Auth-Request-Groups": "admins"})
	rid := auth.Last().Header.Get("X-Request-Id")
	if resp.StatusCode != 200 || len(rid) != 32 || !strings.Contains(body, "X-Request-Id="+rid+"\n") || !strings.Contains(body, "X-Auth-Request-Groups=\n") {
		t.Errorf("made request ID: service %q, upstream:\n%s", rid, body)
	}

	for _, tc := range []struct {
		name, host, path, cookie string
		status                   int
		location, www, setCookie string
	}{
		{"no session", "plain.test", "/", "", 401, "", `Bearer realm="oauth2-proxy"`, ""},
		{"no session, signin", "signin.test", "/a b?x=1&y=é", "", 302, "https://signin.test/oauth2/start?rd=%2Fa%2520b%3Fx%3D1%26y%3D%25C3%25A9", `Bearer realm="oauth2-proxy"`, "_oauth2_proxy_csrf=x1; Path=/; HttpOnly"},
		{"refused", "plain.test", "/", "mallory", 403, "", "", ""},
		{"service error", "plain.test", "/", "broken", 500, "", "", ""},
		{"always-set-cookie on a 401", "always.test", "/", "", 401, "", `Bearer realm="oauth2-proxy"`, "_oauth2_proxy_csrf=x1; Path=/; HttpOnly"},
		{"service unreachable", "dead.test", "/", "alice", 500, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tc.cookie != "" {
				hdr["Cookie"] = "_oauth2_proxy=" + tc.cookie
			}
			req, _ := http.NewRequest("GET", base+"/", nil)
			req.URL.Opaque = tc.path
			if strings.ContainsAny(tc.path, " é") {
				req.URL.Opaque = strings.NewReplacer(" ", "%20", "é", "%C3%A9").Replace(tc.path)
			}
			req.Host = tc.host
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status || resp.Header.Get("Location") != tc.location ||
				resp.Header.Get("WWW-Authenticate") != tc.www || resp.Header.Get("Set-Cookie") != tc.setCookie {
				t.Errorf("%d Location %q WWW-Authenticate %q Set-Cookie %q; want %d %q %q %q", resp.StatusCode, resp.Header.Get("Location"),
					resp.Header.Get("WWW-Authenticate"), resp.Header.Get("Set-Cookie"), tc.status, tc.location, tc.www, tc.setCookie)
			}
		})
	}
	// Without a cache, one round trip to the service per request, no more.
	before := len(auth.Seen())
	for range 10 {
		if resp, _ := do("GET", "plain.test", "/", map[string]string{"Cookie": "_oauth2_proxy=alice"}); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if n := len(auth.Seen()) - before; n != 10 {
		t.Errorf("10 requests asked the service %d times", n)
	}
	// auth-method: the service is asked with it, and told the URI and scheme.
	do("GET", "always.test", "/x", map[string]string{"Cookie": "_oauth2_proxy=alice"})
	if s := auth.Last(); s.Method != "POST" || s.Header.Get("X-Original-Uri") != "/x" || s.Header.Get("X-Scheme") != "http" ||
		s.Header.Get("X-Auth-Request-Redirect") != "/back" {
		t.Errorf("auth-method: %s X-Original-URI %q X-Scheme %q X-Auth-Request-Redirect %q", s.Method,
			s.Header.Get("X-Original-Uri"), s.Header.Get("X-Scheme"), s.Header.Get("X-Auth-Request-Redirect"))
	}
}

// The HTTP/2 front end asks the service the same way: the service's fields
// replace the client's upstream, its cookie reaches the client, and a 401
// keeps the service's challenge.
func TestExternalAuthHTTP2(t *testing.T) {
	auth := harness.StartAuthServer(t, "127.0.0.1", []string{"alice"}, nil)
	be := headerBackend(t)
	l := loc("/", model.PathTypePrefix, "be")
	l.ExternalAuth = &model.ExternalAuth{URL: model.URLTemplate{lit("http://" + auth.Addr + "/oauth2/auth")},
		Host: model.URLTemplate{lit("auth.internal")}, ResponseHeaders: []string{"X-Auth-Request-User"}}
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "be", Endpoints: endpoints(be)}},
		Servers:  []model.Server{{Hostname: "h2auth.test", Locations: []model.Location{l}}},
	}
	base := h2Proxy(t, cfg, Config{})
	c := h2Client(t)
	resp, body := h2Do(t, c, "GET", base+"/in", "h2auth.test", nil, map[string]string{"Cookie": "_oauth2_proxy=alice", "X-Auth-Request-User": "root"})
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || !strings.Contains(body, "X-Auth-Request-User=alice\n") || resp.Header.Get("Set-Cookie") == "" {
		t.Errorf("signed in over HTTP/2: %s %d Set-Cookie %q\n%s", resp.Proto, resp.StatusCode, resp.Header.Get("Set-Cookie"), body)
	}
	if s := auth.Last(); s.Host != "auth.internal" || s.Header.Get("X-Original-Url") != "https://h2auth.test/in" || s.Header.Get("X-Request-Id") == "" {
		t.Errorf("the service got Host %q X-Original-URL %q X-Request-ID %q", s.Host, s.Header.Get("X-Original-Url"), s.Header.Get("X-Request-Id"))
	}
	resp, _ = h2Do(t, c, "GET", base+"/in", "h2auth.test", nil, nil)
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != `Bearer realm="oauth2-proxy"` {
		t.Errorf("no session over HTTP/2: %d WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
}

// auth-proxy-set-headers: the fields reach the service, replacing the
// client's of the same name; an empty value sends none (nginx's
// proxy_set_header).
func TestExternalAuthProxySetHeaders(t *testing.T) {
	auth := harness.StartAuthServer(t, "127.0.0.1", []string{"alice"}, nil)
	be := headerBackend(t)
	l := loc("/", model.PathTypePrefix, "be")
	l.ExternalAuth = &model.ExternalAuth{URL: model.URLTemplate{lit("http://" + auth.Addr + "/oauth2/auth")}, Host: model.URLTemplate{lit("127.0.0.1")},
		ProxySetHeaders: []model.HeaderField{{Name: "X-Empty", Value: ""}, {Name: "X-Tenant", Value: `blue "team"`}}}
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "be", Endpoints: endpoints(be)}},
		Servers:  []model.Server{{Hostname: "set.test", Locations: []model.Location{l}}},
	}
	base, _ := start(t, cfg)
	req, _ := http.NewRequest("GET", base+"/", nil)
	req.Host = "set.test"
	req.Header.Set("Cookie", "_oauth2_proxy=alice")
	req.Header.Set("X-Tenant", "red")
	req.Header.Set("X-Empty", "client")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d; want 200", resp.StatusCode)
	}
	sent := auth.Last()
	if got := sent.Header.Values("X-Tenant"); len(got) != 1 || got[0] != `blue "team"` {
		t.Errorf("the service got X-Tenant %q; want the ConfigMap's only", got)
	}
	if got, ok := sent.Header["X-Empty"]; ok {
		t.Errorf("the service got X-Empty %q; want none", got)
	}
}
