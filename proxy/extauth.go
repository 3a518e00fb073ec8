package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// External authentication (auth-url), as nginx's auth_request runs it in
// ingress-nginx's template: a GET (or auth-method) without the body, with the
// client's fields and the ones the template sets; 2xx lets the request
// through, 401 answers 401 (or redirects to auth-signin), 403 answers 403,
// and any other status, or a service that cannot be reached in time, 500.

// authClient asks authentication services over pooled connections. Its
// timeouts are the ConfigMap's proxy timeouts, as the auth location
// inherits them in ingress-nginx; the one deadline of an exchange is the
// connect plus the read timeout.
type authClient struct {
	connect, read atomic.Int64 // time.Duration
	tr            *http.Transport
	cache         authCache
}

func newAuthClient() *authClient {
	c := &authClient{}
	c.connect.Store(int64(5 * time.Second))
	c.read.Store(int64(60 * time.Second))
	c.tr = &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: time.Duration(c.connect.Load())}
			return d.DialContext(ctx, network, addr)
		},
		// nginx's proxy_ssl_verify is off by default and
		// proxy_ssl_server_name on in the auth location.
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, // #nosec G402 -- as ingress-nginx's auth location
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     60 * time.Second,
		DisableCompression:  true, // the client's Accept-Encoding only
		ForceAttemptHTTP2:   false,
	}
	return c
}

// setTimeouts takes the ConfigMap's proxy timeouts (seconds; zero keeps
// nginx's defaults of 5 s and 60 s).
func (c *authClient) setTimeouts(p model.Proxy) {
	if p.ConnectTimeoutSeconds > 0 {
		c.connect.Store(int64(time.Duration(p.ConnectTimeoutSeconds) * time.Second))
	}
	if p.ReadTimeoutSeconds > 0 {
		c.read.Store(int64(time.Duration(p.ReadTimeoutSeconds) * time.Second))
	}
}

// authRequest is what external authentication reads of a client request.
type authRequest struct {
	f *clientFacts
	// host is the request's host, lower case, without the port.
	host       []byte
	method     string
	requestURI string
	requestID  []byte
	// server and location name the route, for the cache key.
	server, location string
	// fields calls fn with each of the client's header fields, as sent;
	// header returns one field's value.
	fields func(fn func(name, value string))
	header func(name string) string
}

// authPass is what a request that passed authentication carries upstream
// and back: the service's Set-Cookie and the auth-response-headers fields.
type authPass struct {
	cookie string
	always bool
	// headers are name, value pairs; an empty value removes the client's
	// field of that name.
	headers [][2]string
	// info is the Authentication-Info field digest authentication adds to
	// the response (the module's, as add_header ... always).
	info string
}

// apply sets the auth-response-headers fields on the upstream request.
func (a *authPass) apply(h requestHeaders) {
	if a == nil {
		return
	}
	for _, kv := range a.headers {
		h.Del(kv[0])
		if kv[1] != "" {
			h.Set(kv[0], kv[1])
		}
	}
}

// authInfo is digest authentication's Authentication-Info field for the
// response; empty without.
func (a *authPass) authInfo() string {
	if a == nil {
		return ""
	}
	return a.info
}

// cookieFor is the service's Set-Cookie for a response of status code, as
// nginx's "add_header Set-Cookie $auth_cookie" adds it: only to 2xx and 3xx
// answers of add_header's list unless auth-always-set-cookie.
func (a *authPass) cookieFor(code int) string {
	if a == nil || a.cookie == "" {
		return ""
	}
	if a.always {
		return a.cookie
	}
	switch code {
	case 200, 201, 204, 206, 301, 302, 303, 304, 307, 308:
		return a.cookie
	}
	return ""
}

// authDropped are the client's fields the auth location does not pass:
// nginx proxy's own defaults and the ones ingress-nginx's template sets.
var authDropped = map[string]bool{
	"Host": true, "Connection": true, "Content-Length": true, "Transfer-Encoding": true, "Te": true,
	"Keep-Alive": true, "Expect": true, "Upgrade": true, "X-Forwarded-Proto": true, "X-Request-Id": true,
	"X-Original-Url": true, "X-Original-Method": true, "X-Sent-From": true, "X-Real-Ip": true,
	"X-Forwarded-For": true, "X-Auth-Request-Redirect": true, "Proxy-Connection": true,
}

// check asks the service about one request. It returns the answer to give
// the client, or status 0 with what passes upstream.
func (c *authClient) check(ctx context.Context, ea *model.ExternalAuth, r *authRequest) (verdict, *authPass) {
	if len(ea.CacheKey) == 0 {
		return c.ask(ctx, ea, r, "")
	}
	key := cacheKey(ea, r)
	if e, ok := c.cache.get(key, time.Now()); ok {
		if e.pass != nil {
			return verdict{}, e.pass // read-only, shared by the hits
		}
		return decide(ea, r, e.status, e.headers, &authPass{always: ea.AlwaysSetCookie})
	}
	return c.ask(ctx, ea, r, key)
}

// ask sends the service the request and decides on its answer, keeping it
// under key when key is set and nginx would keep it.
func (c *authClient) ask(ctx context.Context, ea *model.ExternalAuth, r *authRequest, key string) (verdict, *authPass) {
	target := expandURL(nil, ea.URL, r)
	method := http.MethodGet
	if ea.Method != "" {
		method = ea.Method
	}
	timeout := time.Duration(c.connect.Load() + c.read.Load())
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, string(target), nil)
	if err != nil {
		return verdict{status: 500}, nil
	}
	req.Host = string(expandURL(nil, ea.Host, r))
	h := req.Header
	r.fields(func(name, value string) {
		name = http.CanonicalHeaderKey(name)
		if authDropped[name] || (ea.Method != "" && (name == "X-Original-Uri" || name == "X-Scheme")) {
			return
		}
		h[name] = append(h[name], value)
	})
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{""} // net/http would add its own
	}
	scheme := "http"
	if r.f.tls {
		scheme = "https"
	}
	h.Set("X-Request-ID", string(r.requestID))
	if ea.Method != "" {
		h.Set("X-Original-URI", r.requestURI)
		h.Set("X-Scheme", scheme)
	}
	h.Set("X-Original-URL", scheme+"://"+string(r.f.host)+r.requestURI)
	h.Set("X-Original-Method", r.method)
	h.Set("X-Sent-From", "nginx-ingress-controller")
	h.Set("X-Real-IP", string(r.f.appendRemote(nil)))
	h.Set("X-Forwarded-For", string(r.f.appendForwardedFor(nil, []byte(r.header("X-Forwarded-For")))))
	if ea.RequestRedirect != "" {
		h.Set("X-Auth-Request-Redirect", ea.RequestRedirect)
	} else {
		h.Set("X-Auth-Request-Redirect", r.requestURI)
	}
	for _, f := range ea.ProxySetHeaders {
		// auth-proxy-set-headers, as nginx's proxy_set_header: the
		// client's field of that name replaced; an empty value sends none.
		if f.Value == "" {
			h.Del(f.Name)
		} else {
			h.Set(f.Name, f.Value)
		}
	}
	resp, err := c.tr.RoundTrip(req)
	if err != nil {
		return verdict{status: 500}, nil
	}
	// Only the head matters, as for nginx's header-only subrequest; a
	// short body is drained so the connection can be kept.
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	_ = resp.Body.Close()
	pass := &authPass{always: ea.AlwaysSetCookie}
	if v := resp.Header.Values("Set-Cookie"); len(v) > 0 {
		pass.cookie = v[0] // $upstream_http_set_cookie: the first one
	}
	v, pass := decide(ea, r, resp.StatusCode, resp.Header, pass)
	if key != "" {
		if ttl := cacheTTL(ea, resp); ttl > 0 {
			// A kept answer never set a cookie (cacheTTL): its pass is
			// the same for every hit.
			c.cache.put(key, authCached{until: time.Now().Add(ttl), status: resp.StatusCode, headers: resp.Header.Clone(), pass: pass}, time.Now())
		}
	}
	return v, pass
}

// decide turns the service's status and fields into the client's answer,
// or the pass upstream.
func decide(ea *model.ExternalAuth, r *authRequest, status int, header http.Header, pass *authPass) (verdict, *authPass) {
	switch code := status; {
	case code >= 200 && code < 300:
		for _, name := range ea.ResponseHeaders {
			pass.headers = append(pass.headers, [2]string{name, header.Get(name)})
		}
		return verdict{}, pass
	case code == http.StatusUnauthorized && len(ea.SigninURL) > 0:
		// error_page 401 = @signin: a 302 whose add_header Set-Cookie
		// applies (302 is in its list); nginx keeps the service's
		// WWW-Authenticate, which auth_request copied, on it.
		return verdict{status: http.StatusFound, location: string(expandURL(nil, ea.SigninURL, r)),
			wwwAuthenticate: header.Get("WWW-Authenticate"), setCookie: pass.cookie}, nil
	case code == http.StatusUnauthorized:
		return verdict{status: code, wwwAuthenticate: header.Get("WWW-Authenticate"), setCookie: pass.cookieFor(code)}, nil
	case code == http.StatusForbidden:
		return verdict{status: code, setCookie: pass.cookieFor(code)}, nil
	}
	return verdict{status: 500, setCookie: pass.cookieFor(500)}, nil
}

// expandURL appends t to dst with its variables' values for r, as nginx
// would expand them.
func expandURL(dst []byte, t model.URLTemplate, r *authRequest) []byte {
	for _, p := range t {
		switch p.Var {
		case "":
			dst = append(dst, p.Literal...)
		case model.VarHost:
			dst = append(dst, r.host...)
		case model.VarHTTPHost, model.VarBestHTTPHost:
			// $best_http_host is $http_host unless use-forwarded-headers
			// (X-Forwarded-Host), which this data plane does not apply yet.
			dst = append(dst, r.f.host...)
		case model.VarScheme, model.VarPassAccessScheme:
			if r.f.tls {
				dst = append(dst, "https"...)
			} else {
				dst = append(dst, "http"...)
			}
		case model.VarRequestURI:
			dst = append(dst, r.requestURI...)
		case model.VarEscapedRequestURI:
			dst = appendEscaped(dst, r.requestURI, luaUnescaped)
		}
	}
	return dst
}

// The bytes besides ALPHA and DIGIT that an escaping keeps: Debian's nginx
// Lua module's ngx.escape_uri (measured against it in
// TestControllerAccessControl), and nginx's own URI-component escaping
// ($ssl_client_escaped_cert).
const (
	luaUnescaped   = "-._~!'()*"
	nginxUnescaped = "-._~"
)

// appendEscaped appends s with every byte but ALPHA, DIGIT and those in
// keep as %XX, upper case.
func appendEscaped(dst []byte, s, keep string) []byte {
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte(keep, c) >= 0 {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
	}
	return dst
}

// authCache keeps answers of authentication services for auth-cache-key,
// as nginx's proxy_cache keeps them in ingress-nginx's auth location: by
// server, location and the key's value, for the time auth-cache-duration
// (or the answer's X-Accel-Expires or Cache-Control max-age) gives; answers
// carrying Set-Cookie, Cache-Control no-cache/no-store/private or
// "Vary: *" are not kept, as nginx does not keep them. At most
// authCacheSize entries: when full, expired ones go first, then any.
type authCache struct {
	mu      sync.Mutex
	entries map[string]authCached
}

const authCacheSize = 10000

type authCached struct {
	until   time.Time
	status  int
	headers http.Header
	// pass is the decided pass of a 2xx answer; nil otherwise.
	pass *authPass
}

func (c *authCache) get(key string, now time.Time) (authCached, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || now.After(e.until) {
		return authCached{}, false
	}
	return e, true
}

func (c *authCache) put(key string, e authCached, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]authCached{}
	}
	if len(c.entries) >= authCacheSize {
		for k, old := range c.entries {
			if now.After(old.until) {
				delete(c.entries, k)
			}
		}
		for k := range c.entries {
			if len(c.entries) < authCacheSize*3/4 {
				break
			}
			delete(c.entries, k)
		}
	}
	c.entries[key] = e
}

// cacheTTL is how long nginx would keep resp under ea's proxy_cache_valid
// lines; zero: not kept.
func cacheTTL(ea *model.ExternalAuth, resp *http.Response) time.Duration {
	h := resp.Header
	if len(h.Values("Set-Cookie")) > 0 || h.Get("Vary") == "*" {
		return 0
	}
	if v := h.Get("X-Accel-Expires"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	for _, cc := range strings.Split(h.Get("Cache-Control"), ",") {
		cc = strings.ToLower(strings.TrimSpace(cc))
		switch {
		case cc == "no-cache" || cc == "no-store" || cc == "private":
			return 0
		case strings.HasPrefix(cc, "max-age="):
			n, err := strconv.Atoi(cc[len("max-age="):])
			if err != nil || n <= 0 {
				return 0
			}
			return time.Duration(n) * time.Second
		}
	}
	for _, v := range ea.CacheValid {
		match := v.Any
		if len(v.Codes) == 0 && !v.Any {
			match = resp.StatusCode == 200 || resp.StatusCode == 301 || resp.StatusCode == 302
		}
		for _, c := range v.Codes {
			match = match || c == resp.StatusCode
		}
		if match {
			return time.Duration(v.Seconds) * time.Second
		}
	}
	return 0
}

// cacheKey is the cache key of a request: its server and location, then
// the auth-cache-key's value.
func cacheKey(ea *model.ExternalAuth, r *authRequest) string {
	var b strings.Builder
	b.WriteString(r.server)
	b.WriteByte(0)
	b.WriteString(r.location)
	b.WriteByte(0)
	for _, p := range ea.CacheKey {
		switch {
		case p.Var == "":
			b.WriteString(p.Literal)
		case p.Var == "remote_addr":
			b.Write(r.f.appendRemote(nil))
		case p.Var == "host":
			b.Write(r.host)
		case p.Var == "request_uri":
			b.WriteString(r.requestURI)
		case strings.HasPrefix(p.Var, "http_"):
			b.WriteString(r.header(strings.ReplaceAll(p.Var[len("http_"):], "_", "-")))
		case strings.HasPrefix(p.Var, "cookie_"):
			b.WriteString(cookieValue(r.header("Cookie"), p.Var[len("cookie_"):]))
		}
	}
	return b.String()
}

// cookieValue is nginx's $cookie_<name>: the value of the first cookie of
// that name in a Cookie field.
func cookieValue(field, name string) string {
	for _, c := range strings.Split(field, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(c), "=")
		if ok && strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}
