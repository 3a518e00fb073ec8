package harness

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// AuthServer is an authentication service speaking oauth2-proxy's contract
// for nginx's auth_request, on a loopback address:
//
//   - GET /oauth2/auth answers 202 Accepted with X-Auth-Request-User and
//     X-Auth-Request-Email (and a refreshed session cookie) when the request
//     carries the cookie "_oauth2_proxy=<user>" for a user in Users; 403 for
//     a user in Forbidden; 500 for the user "broken"; otherwise 401 with a
//     "WWW-Authenticate: Bearer" challenge and a CSRF cookie, as oauth2-proxy
//     answers an unauthenticated request.
//   - GET /oauth2/start?rd=<url> answers 302 to the identity provider
//     (https://idp.example/authorize?state=<rd>), as oauth2-proxy starts a
//     login.
//
// Every request to /oauth2/auth is recorded, so tests check what the data
// plane sent: method, URI, Host and fields.
type AuthServer struct {
	// Addr is host:port of the server.
	Addr string
	// Users may pass; Forbidden are known but refused (403).
	Users, Forbidden []string

	mu   sync.Mutex
	seen []*http.Request
	// quiet users pass without a refreshed session cookie (SetQuiet).
	quiet []string
	// echo are request fields a passing answer repeats (SetEcho).
	echo []string
}

// SetEcho makes a passing answer (202) repeat each of these request fields
// the service got as "X-Echo-<name>" (none when it got none), so a test can
// see through auth-response-headers what the data plane sent it.
func (a *AuthServer) SetEcho(names ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.echo = append(a.echo, names...)
}

// SetQuiet makes users pass without the Set-Cookie of a refreshed session,
// so a cache (nginx's proxy_cache does not keep answers that set cookies)
// may keep the answer.
func (a *AuthServer) SetQuiet(users ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.quiet = append(a.quiet, users...)
}

// StartAuthServer serves an AuthServer on ip (e.g. "127.0.0.1") until the
// test ends.
func StartAuthServer(t testing.TB, ip string, users, forbidden []string) *AuthServer {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	a := &AuthServer{Addr: ln.Addr().String(), Users: users, Forbidden: forbidden}
	srv := &http.Server{Handler: a, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return a
}

func has(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// ServeHTTP implements the contract above.
func (a *AuthServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/oauth2/auth":
		a.mu.Lock()
		a.seen = append(a.seen, r.Clone(r.Context()))
		a.mu.Unlock()
		user := ""
		if c, err := r.Cookie("_oauth2_proxy"); err == nil {
			user = c.Value
		}
		switch {
		case user == "broken":
			http.Error(w, "session store down", http.StatusInternalServerError)
		case has(a.Users, user):
			w.Header().Set("X-Auth-Request-User", user)
			w.Header().Set("X-Auth-Request-Email", user+"@example.com")
			a.mu.Lock()
			quiet := has(a.quiet, user)
			echo := a.echo
			a.mu.Unlock()
			for _, name := range echo {
				if vs := r.Header.Values(name); len(vs) > 0 {
					w.Header().Set("X-Echo-"+name, strings.Join(vs, " | "))
				}
			}
			if !quiet {
				w.Header().Add("Set-Cookie", "_oauth2_proxy="+user+"; Path=/; HttpOnly; Secure")
			}
			w.WriteHeader(http.StatusAccepted)
		case has(a.Forbidden, user):
			http.Error(w, "Forbidden", http.StatusForbidden)
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="oauth2-proxy"`)
			w.Header().Add("Set-Cookie", "_oauth2_proxy_csrf=x1; Path=/; HttpOnly")
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
		}
	case "/oauth2/start":
		http.Redirect(w, r, "https://idp.example/authorize?state="+url.QueryEscape(r.URL.Query().Get("rd")), http.StatusFound)
	default:
		http.NotFound(w, r)
	}
}

// Seen returns the requests /oauth2/auth got so far, oldest first.
func (a *AuthServer) Seen() []*http.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*http.Request(nil), a.seen...)
}

// Last returns the last request /oauth2/auth got, or nil.
func (a *AuthServer) Last() *http.Request {
	s := a.Seen()
	if len(s) == 0 {
		return nil
	}
	return s[len(s)-1]
}

// URL is the server's base URL, "http://<addr>".
func (a *AuthServer) URL() string { return "http://" + strings.TrimSuffix(a.Addr, "/") }
