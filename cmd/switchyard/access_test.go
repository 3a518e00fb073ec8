package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
)

// TestControllerAccessControl runs the controller on both data planes with
// Ingresses that protect their paths: external authentication against a
// service speaking oauth2-proxy's contract, a deny list, and an access
// annotation Switchyard cannot carry out (503, fail closed); an Ingress
// without protection keeps serving beside them. Each request must get the
// same answer from both planes.
func TestControllerAccessControl(t *testing.T) {
	for _, plane := range []string{"go", "nginx"} {
		t.Run(plane, func(t *testing.T) { testAccessControl(t, plane) })
	}
}

func testAccessControl(t *testing.T, plane string) {
	auth := harness.StartAuthServer(t, "127.0.0.1", []string{"alice", "bob"}, []string{"mallory"})
	// The backend tells what it was sent.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "app %s %s user=%q groups=%q", r.Method, r.URL.RequestURI(), r.Header.Get("X-Auth-Request-User"), r.Header.Get("X-Auth-Request-Groups"))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	dir := quickstartDir(t, freePort(t), freePort(t))
	ann := func(kv ...string) string {
		var b []string
		for i := 0; i < len(kv); i += 2 {
			b = append(b, fmt.Sprintf("nginx.ingress.kubernetes.io/%s: %q", kv[i], kv[i+1]))
		}
		return "{" + strings.Join(b, ", ") + "}"
	}
	yaml := localBackendYAML("authed", "authed.example", port, ann(
		"auth-url", "http://"+auth.Addr+"/oauth2/auth",
		"auth-signin", "http://$host/oauth2/start?rd=$escaped_request_uri",
		"auth-response-headers", "X-Auth-Request-User, X-Auth-Request-Groups"), "") +
		localBackendYAML("challenged", "challenged.example", port, ann("auth-url", "http://"+auth.Addr+"/oauth2/auth"), "") +
		localBackendYAML("cached", "cached.example", port, ann("auth-url", "http://"+auth.Addr+"/oauth2/auth",
			"auth-cache-key", "$cookie__oauth2_proxy", "auth-cache-duration", "202 401 1m", "auth-response-headers", "X-Auth-Request-User"), "") +
		localBackendYAML("denied", "denied.example", port, ann("denylist-source-range", "127.0.0.5"), "") +
		localBackendYAML("limited", "limited.example", port, ann("limit-connections", "lots"), "") +
		localBackendYAML("open", "open.example", port, "", "") +
		localBackendYAML("basic", "basic.example", port, ann("auth-type", "basic", "auth-secret", "staff", "auth-realm", "Staff only"), "") +
		localBackendYAML("basicmap", "basicmap.example", port, ann("auth-type", "basic", "auth-secret", "demo/staff-map", "auth-secret-type", "auth-map"), "") +
		localBackendYAML("basicbad", "basicbad.example", port, ann("auth-type", "basic", "auth-secret", "no-such-secret"), "") +
		// Hashes from `openssl passwd -apr1 s3cret` and `-6 hunter2`.
		"---\napiVersion: v1\nkind: Secret\nmetadata: {name: staff, namespace: demo}\nstringData:\n  auth: |\n" +
		"    alice:$apr1$3hXyQ5kD$sEciFuwqpwDltMxiURchG1\n    bob:$6$Jx2Qm0a0aG5DpG1c$VaEwUuEc1NmjvqbYpY4wqTBocWBqXbpLjkVjqGEMyu0ixs2aaehfqnTA7U/06djvoRQOb4.eqrYpcrsGWITgs1\n" +
		"---\napiVersion: v1\nkind: Secret\nmetadata: {name: staff-map, namespace: demo}\nstringData:\n  carol: \"{PLAIN}open-sesame\"\n"
	if err := os.WriteFile(filepath.Join(dir, "40-access.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--manifests", dir, "--http-port", strconv.Itoa(freePort(t)),
		"--https-port", strconv.Itoa(freePort(t)), "--status-port", strconv.Itoa(freePort(t)), "--listen-address", "127.0.0.1"}
	if plane == "nginx" {
		args = append(args, nginxPlaneArgs(t)...)
	}
	ctx, l := startController(t, args)

	type answer struct {
		status                      int
		location, www, cookie, body string
	}
	do := func(host, path, from string, hdr map[string]string) answer {
		t.Helper()
		dialer := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, l.HTTP)
		}}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s%s: %v", host, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		a := answer{status: resp.StatusCode, location: resp.Header.Get("Location"), www: resp.Header.Get("WWW-Authenticate"),
			cookie: resp.Header.Get("Set-Cookie")}
		if resp.StatusCode == 200 {
			a.body = string(b)
		}
		return a
	}
	alice := map[string]string{"Cookie": "_oauth2_proxy=alice", "X-Auth-Request-Groups": "admins", "X-Auth-Request-User": "root"}
	for _, tc := range []struct {
		name, host, path, from string
		hdr                    map[string]string
		want                   answer
	}{
		{"signed in", "authed.example", "/in?x=1", "127.0.0.1", alice,
			answer{status: 200, cookie: "_oauth2_proxy=alice; Path=/; HttpOnly; Secure", body: `app GET /in?x=1 user="alice" groups=""`}},
		{"no session: sign in", "authed.example", "/a/b?c=d%20e", "127.0.0.1", nil,
			answer{status: 302, location: "http://authed.example/oauth2/start?rd=%2Fa%2Fb%3Fc%3Dd%2520e", www: `Bearer realm="oauth2-proxy"`, cookie: "_oauth2_proxy_csrf=x1; Path=/; HttpOnly"}},
		{"no session: sign in, URI escaped as nginx's Lua escapes it", "authed.example", "/x!'()*;:@&=+$,~_.-?q=%C3%A9&r=/", "127.0.0.1", nil,
			answer{status: 302, location: "http://authed.example/oauth2/start?rd=%2Fx!'()*%3B%3A%40%26%3D%2B%24%2C~_.-%3Fq%3D%25C3%25A9%26r%3D%2F",
				www: `Bearer realm="oauth2-proxy"`, cookie: "_oauth2_proxy_csrf=x1; Path=/; HttpOnly"}},
		{"no session: 401", "challenged.example", "/", "127.0.0.1", nil, answer{status: 401, www: `Bearer realm="oauth2-proxy"`}},
		{"refused by the service", "challenged.example", "/", "127.0.0.1", map[string]string{"Cookie": "_oauth2_proxy=mallory"}, answer{status: 403}},
		{"service error", "challenged.example", "/", "127.0.0.1", map[string]string{"Cookie": "_oauth2_proxy=broken"}, answer{status: 500}},
		{"deny list", "denied.example", "/", "127.0.0.5", nil, answer{status: 403}},
		{"not on the deny list", "denied.example", "/", "127.0.0.1", nil, answer{status: 200, body: `app GET / user="" groups=""`}},
		{"limit-connections invalid: fail closed", "limited.example", "/", "127.0.0.1", nil, answer{status: 503}},
		{"basic: no credentials", "basic.example", "/", "127.0.0.1", nil, answer{status: 401, www: `Basic realm="Staff only"`}},
		{"basic: apr1 password", "basic.example", "/", "127.0.0.1", map[string]string{"Authorization": basicAuth("alice", "s3cret")}, answer{status: 200, body: `app GET / user="" groups=""`}},
		{"basic: sha512-crypt password", "basic.example", "/", "127.0.0.1", map[string]string{"Authorization": basicAuth("bob", "hunter2")}, answer{status: 200, body: `app GET / user="" groups=""`}},
		{"basic: wrong password", "basic.example", "/", "127.0.0.1", map[string]string{"Authorization": basicAuth("alice", "hunter2")}, answer{status: 401, www: `Basic realm="Staff only"`}},
		{"basic: scheme in lower case", "basic.example", "/", "127.0.0.1", map[string]string{"Authorization": "basic " + strings.TrimPrefix(basicAuth("alice", "s3cret"), "Basic ")}, answer{status: 200, body: `app GET / user="" groups=""`}},
		{"basic: not base64", "basic.example", "/", "127.0.0.1", map[string]string{"Authorization": "Basic !!!"}, answer{status: 401, www: `Basic realm="Staff only"`}},
		{"basic auth-map", "basicmap.example", "/", "127.0.0.1", map[string]string{"Authorization": basicAuth("carol", "open-sesame")}, answer{status: 200, body: `app GET / user="" groups=""`}},
		{"basic auth-map, no realm", "basicmap.example", "/", "127.0.0.1", nil, answer{status: 401, www: `Basic realm=""`}},
		{"basic, missing Secret: fail closed", "basicbad.example", "/", "127.0.0.1", map[string]string{"Authorization": basicAuth("alice", "s3cret")}, answer{status: 503}},
		{"unprotected Ingress keeps serving", "open.example", "/", "127.0.0.1", nil, answer{status: 200, body: `app GET / user="" groups=""`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := do(tc.host, tc.path, tc.from, tc.hdr); got != tc.want {
				t.Errorf("%s%s from %s:\n got %+v\nwant %+v", tc.host, tc.path, tc.from, got, tc.want)
			}
		})
	}
	// auth-cache-key: an answer without Set-Cookie is kept per key value
	// (one request to the service for five requests of bob); an answer
	// that sets a cookie is not kept, as nginx keeps none (alice's, and the
	// 401 with oauth2-proxy's CSRF cookie: five requests each).
	auth.SetQuiet("bob")
	for _, tc := range []struct {
		cookie string
		status int
		asks   int
	}{{"bob", 200, 1}, {"", 401, 5}, {"alice", 200, 5}} {
		before := len(auth.Seen())
		for range 5 {
			hdr := map[string]string{}
			if tc.cookie != "" {
				hdr["Cookie"] = "_oauth2_proxy=" + tc.cookie
			}
			a := do("cached.example", "/", "127.0.0.1", hdr)
			if a.status != tc.status || (tc.status == 200 && !strings.Contains(a.body, `user="`+tc.cookie+`"`)) {
				t.Errorf("cached, %q: %+v", tc.cookie, a)
			}
		}
		if n := len(auth.Seen()) - before; n != tc.asks {
			t.Errorf("cached, %q: five requests asked the service %d times; want %d", tc.cookie, n, tc.asks)
		}
	}
	if s := auth.Last(); s == nil || s.Header.Get("X-Original-Url") != "http://cached.example/" || s.Header.Get("X-Sent-From") != "nginx-ingress-controller" {
		t.Errorf("the service's last request: %+v", s)
	}
	// The denial is named where an operator looks: debug config and the
	// status page's data.
	for _, path := range []string{"/debug/config", "/status.json"} {
		resp, err := http.Get("http://" + l.Status + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "nginx.ingress.kubernetes.io/limit-connections") || !strings.Contains(string(b), "FailedClosed") {
			t.Errorf("%s does not name the fail-closed annotation:\n%.2000s", path, b)
		}
	}
}

func basicAuth(user, pw string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pw))
}
