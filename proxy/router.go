package proxy

import (
	"cmp"
	"errors"
	"net"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// table is an immutable routing table built from one Configuration.
type table struct {
	// logFormat is the access log's format (log-format-upstream).
	logFormat *logFormat
	// skipLog is skip-access-log-urls: request URIs not logged.
	skipLog map[string]bool
	// useForwarded is use-forwarded-headers: X-Forwarded-Proto and
	// X-Forwarded-Port name the scheme and port of redirects to www.
	useForwarded bool
	// upstreamTLS are the locations' proxy-ssl-* as client TLS
	// configurations, made once per configuration.
	upstreamTLS map[*model.UpstreamTLS]*upstreamTLS
	// redirectCode is http-redirect-code for ssl-redirect (308 default).
	redirectCode int
	// fullForwardedFor is use-forwarded-headers with
	// compute-full-forwarded-for: X-Forwarded-For extends the client's
	// instead of replacing it.
	fullForwardedFor bool
	// realIP finds the client's address behind trusted proxies; nil:
	// the connection's address is the client's.
	realIP *realIP
	// builtinDefault is true when the default backend is only the
	// built-in default server (custom-http-errors answer in-process).
	builtinDefault bool
	// hsts is the Strict-Transport-Security value HTTPS answers of servers
	// with a certificate get (the ConfigMap's hsts*); empty without.
	hsts string
	// limitErr names the limit zones shared memory had no slot for
	// (Config.LimitZones): their limits refuse every request; nil
	// otherwise.
	limitErr error
	// limitReqStatus answers a request a rate limit refuses
	// (limit-req-status-code).
	limitReqStatus int
	// limitConnStatus answers a request limit-connections refuses
	// (limit-conn-status-code).
	limitConnStatus int
	exact           map[string]*vhost
	wildcards       []wildcard // longest suffix first
	catchAll        *vhost
}

type wildcard struct {
	suffix string // ".example.com" for "*.example.com"
	vh     *vhost
}

// vhost is one server's locations, pre-sorted for matching.
type vhost struct {
	name string
	// tls is true when a certificate covers the server (ssl-redirect
	// applies).
	tls    bool
	exact  map[string]*route
	regex  []*route // in configuration order
	prefix []*route // longest path first
	// clientAuth is the server's auth-tls-*; nil without. failClosed is
	// set when it could not be parsed: every location answers 503.
	clientAuth *clientAuth
	failClosed bool
	// redirectTo is from-to-www-redirect's host: every request is
	// redirected there (wwwRedirect); empty for other servers.
	redirectTo string
}

// route is one location.
type route struct {
	loc model.Location
	// setFields are the location's proxy-set-headers, as the fields the
	// upstream request carries in place of the client's (outcome's
	// addUpstreamFields).
	setFields [][2]string
	// limits are the location's rate limits (limit-rps, limit-rpm) on
	// zones that outlive the table; nil without.
	limits []routeLimit
	// conns is the location's limit-connections on a zone that outlives
	// the table; nil without.
	conns *connLimit
	re    *regexp.Regexp
	// rewrite matches the location path for rewrite-target (nginx
	// `rewrite "(?i)<path>" <target> break;`); nil without a target.
	rewrite *regexp.Regexp
	// series are the request metrics' series this location's requests
	// used last (metrics.observe).
	series routeSeries
	// errorLoc is how a custom-http-errors answer is asked for: the named
	// location proxies with proxy_pass http:// and this location's
	// timeouts and tries. nil without custom-http-errors.
	errorLoc *model.Location
}

// rewritten returns the upstream path for rewrite-target: as nginx's
// rewrite, the whole URI is replaced by the target with $1..$9 expanded from
// the match; ok is false when the path does not match (the URI is kept).
func (r *route) rewritten(path []byte) ([]byte, bool) {
	m := r.rewrite.FindSubmatchIndex(path)
	if m == nil {
		return nil, false
	}
	return r.rewrite.Expand(nil, []byte(nginxTemplate(r.loc.Rewrite.Target)), path, m), true
}

// nginxTemplate turns nginx's $1 into Go's ${1} so "$1abc" keeps meaning
// capture 1 followed by "abc".
func nginxTemplate(t string) string {
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		if t[i] == '$' && i+1 < len(t) && t[i+1] >= '0' && t[i+1] <= '9' {
			b.WriteString("${" + string(t[i+1]) + "}")
			i++
			continue
		}
		if t[i] == '$' {
			b.WriteString("$$")
			continue
		}
		b.WriteByte(t[i])
	}
	return b.String()
}

// newTable builds the routing table. Locations whose regex does not compile
// are skipped (the builder already validated them).
// limits keeps the rate limit zones across tables; nil gives the table
// zones of its own.
func newTable(cfg *model.Configuration, limits *rateLimits) *table {
	if limits == nil {
		limits = &rateLimits{}
	}
	zones := newZoneSet()
	defer limits.keepOnly(zones)
	var limitErrs []error
	t := &table{limitReqStatus: cmp.Or(cfg.Global.LimitReqStatus, 503), limitConnStatus: cmp.Or(cfg.Global.LimitConnStatus, 503), exact: map[string]*vhost{}, redirectCode: cfg.Global.HTTPRedirectCode, builtinDefault: builtinDefault(cfg),
		fullForwardedFor: cfg.Global.UseForwardedHeaders && cfg.Global.ComputeFullForwardedFor, realIP: newRealIP(cfg.Global.RealIP, cfg.Global.UseForwardedHeaders)}
	if t.redirectCode == 0 {
		t.redirectCode = 308
	}
	if cfg.Global.HSTS {
		t.hsts = cfg.Global.HSTSHeader()
	}
	t.useForwarded = cfg.Global.UseForwardedHeaders
	t.logFormat = newLogFormat(cfg.Global.AccessLogFormat)
	for _, u := range cfg.Global.SkipAccessLogURLs {
		if t.skipLog == nil {
			t.skipLog = map[string]bool{}
		}
		t.skipLog[u] = true
	}
	for i := range cfg.Servers {
		s := &cfg.Servers[i]
		vh := &vhost{name: s.Hostname, exact: map[string]*route{}, tls: s.TLS != nil, redirectTo: s.RedirectTo}
		if s.ClientAuth != nil {
			vh.clientAuth = newClientAuth(s.ClientAuth)
			vh.failClosed = vh.clientAuth == nil
		}
		for _, loc := range s.Locations {
			// A Location written by hand may have no settings: the
			// route reads the zero ones.
			loc.LocationSettings = loc.Settings()
			r := &route{loc: loc}
			if len(loc.CustomHTTPErrors) > 0 {
				r.errorLoc = &model.Location{LocationSettings: &model.LocationSettings{BackendProtocol: model.ProtocolHTTP, Proxy: loc.Proxy}}
			}
			var err error
			if r.limits, r.conns, err = limits.routeLimits(loc.RateLimit, zones); err != nil {
				limitErrs = append(limitErrs, err)
			}
			for _, h := range loc.ProxySetHeaders {
				r.setFields = append(r.setFields, [2]string{h.Name, h.Value})
			}
			if u := loc.UpstreamTLS; u != nil && t.upstreamTLS[u] == nil {
				if t.upstreamTLS == nil {
					t.upstreamTLS = map[*model.UpstreamTLS]*upstreamTLS{}
				}
				t.upstreamTLS[u] = newUpstreamTLS(u)
			}
			if loc.Rewrite.Target != "" {
				r.rewrite = loc.PathRegexp.Compiled() // nil: no capture groups
			}
			switch {
			case loc.PathType == model.PathTypeExact:
				vh.exact[loc.Path] = r
			case loc.Regex:
				// ingress-nginx writes use-regex paths as case-insensitive
				// "location ~*".
				re := loc.PathRegexp.Compiled()
				if re == nil {
					continue // the builder refuses such a path
				}
				r.re = re
				vh.regex = append(vh.regex, r)
			default:
				vh.prefix = append(vh.prefix, r)
			}
		}
		sort.SliceStable(vh.prefix, func(i, j int) bool { return len(vh.prefix[i].loc.Path) > len(vh.prefix[j].loc.Path) })
		switch {
		case s.Hostname == model.CatchAllHost:
			t.catchAll = vh
		case strings.HasPrefix(s.Hostname, "*."):
			t.wildcards = append(t.wildcards, wildcard{suffix: s.Hostname[1:], vh: vh})
			for _, a := range s.Aliases {
				t.exact[a] = vh
			}
		default:
			t.exact[s.Hostname] = vh
			for _, a := range s.Aliases {
				t.exact[a] = vh
			}
		}
	}
	sort.SliceStable(t.wildcards, func(i, j int) bool { return len(t.wildcards[i].suffix) > len(t.wildcards[j].suffix) })
	t.limitErr = errors.Join(limitErrs...)
	return t
}

// lookup finds the route for a host (lower case, no port) and path, as nginx
// would: exact host, then the longest wildcard, then the catch-all server;
// within it an exact location, then the first regex that matches, then the
// longest prefix (element-wise, so /foo matches /foo/bar but not /foobar).
func (t *table) lookup(host, path []byte) (*vhost, *route) {
	vh := t.exact[string(host)]
	if vh == nil {
		for _, w := range t.wildcards {
			// "*.example.com" matches one or more labels before the suffix.
			if len(host) > len(w.suffix) && strings.HasSuffix(string(host), w.suffix) {
				vh = w.vh
				break
			}
		}
	}
	if vh == nil {
		vh = t.catchAll
	}
	if vh == nil {
		return nil, nil
	}
	if r := vh.exact[string(path)]; r != nil {
		return vh, r
	}
	for _, r := range vh.regex {
		if r.re.Match(path) {
			return vh, r
		}
	}
	for _, r := range vh.prefix {
		if prefixMatch(r.loc.Path, path) {
			return vh, r
		}
	}
	// nginx does not fall back to another server: the default backend
	// answers.
	return vh, nil
}

// prefixMatch is the Ingress Prefix path type: element-wise.
func prefixMatch(prefix string, path []byte) bool {
	if prefix == "/" {
		return true
	}
	p := strings.TrimSuffix(prefix, "/")
	if len(path) < len(p) || string(path[:len(p)]) != p {
		return false
	}
	return len(path) == len(p) || path[len(p)] == '/'
}

// wwwRedirect is the Location from-to-www-redirect sends a request to: the
// scheme and the port it came in on (X-Forwarded-Proto and -Port instead
// with use-forwarded-headers, when sent), as ingress-nginx's redirect
// servers.
func (t *table) wwwRedirect(vh *vhost, tls bool, local net.Addr, forwardedProto, forwardedPort string, requestURI []byte) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	port := ""
	if ap, err := netip.ParseAddrPort(local.String()); err == nil {
		port = strconv.Itoa(int(ap.Port()))
	}
	if t.useForwarded {
		scheme, port = cmp.Or(forwardedProto, scheme), cmp.Or(forwardedPort, port)
	}
	return model.WWWRedirectLocation(scheme, vh.redirectTo, port, requestURI)
}
