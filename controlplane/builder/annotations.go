package builder

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// annotationPrefix is ingress-nginx's annotation prefix.
const annotationPrefix = "nginx.ingress.kubernetes.io/"

// annotations holds the parsed, validated annotations of one Ingress. An
// annotation whose value is invalid is left at its default and reported.
type annotations struct {
	// settings are the Ingress's LocationSettings, made from the fields
	// below on first use (builder.settings): [0] for its paths, [1] for
	// paths under a no-auth-locations prefix.
	settings [2]*model.LocationSettings

	loadBalance      string
	hashBy           *string
	hashBySubset     bool
	hashBySubsetSize int

	affinity             string // "cookie" or ""
	affinityMode         string
	affinityCanaryLegacy bool
	cookie               model.CookieAffinity

	canary              bool
	canaryHeader        string
	canaryHeaderValue   string
	canaryHeaderPattern string
	// canaryInvalid names the first canary-* annotation whose value is
	// refused: such a canary Ingress is not used at all, as ingress-nginx
	// refuses an Ingress with an invalid annotation value.
	canaryInvalid     string
	canaryCookie      string
	canaryWeight      int
	canaryWeightTotal int

	useRegex bool
	// fromToWWW is from-to-www-redirect.
	fromToWWW bool
	// noAccessLog is enable-access-log: "false".
	noAccessLog bool
	// serviceUpstream is service-upstream; nil: the ConfigMap's default.
	serviceUpstream *bool

	// Per-location settings.
	backendProtocol       string
	sslRedirect           *bool
	forceSSLRedirect      bool
	rewriteTarget         string
	appRoot               string
	preserveTrailingSlash bool
	redirectURL           string
	redirectCode          int
	connectTimeout        *int
	sendTimeout           *int
	readTimeout           *int
	bodySize              *int64
	nextUpstream          []string
	nextUpstreamTries     *int
	nextUpstreamTimeout   *int
	buffering             *bool
	// bufferSize and buffersNumber are proxy-buffer-size and
	// proxy-buffers-number; nil: the ConfigMap's.
	bufferSize, buffersNumber *int
	// noRequestBuffering and clientBodyBuffer are proxy-request-buffering
	// and client-body-buffer-size; nil: the ConfigMap's.
	noRequestBuffering *bool
	clientBodyBuffer   *int
	// http10 is proxy-http-version ("1.0": true); nil: the ConfigMap's.
	http10 *bool
	// allowSourceRanges and denySourceRanges are nil when the annotation
	// is absent (the ConfigMap's default applies).
	allowSourceRanges []netip.Prefix
	denySourceRanges  []netip.Prefix
	// rateLimit is limit-rps and its kin, without the zone name; nil
	// without limit-rps or limit-rpm.
	rateLimit *model.RateLimit
	// limitRate and limitRateAfter are limit-rate and limit-rate-after
	// (KiB); nil: the ConfigMap's defaults.
	limitRate, limitRateAfter *int
	// denied is the first access-control annotation that cannot be
	// carried out: the Ingress's locations answer 503.
	denied *model.Denial
	// globalAuth is enable-global-auth (true unless "false").
	globalAuth bool
	// externalAuth is auth-url and its kin; nil without auth-url.
	externalAuth *model.ExternalAuth
	// authProxySetHeaders is auth-proxy-set-headers, the ConfigMap's
	// reference, resolved with the ConfigMaps into externalAuth.
	authProxySetHeaders string
	// clientAuthAnn is auth-tls-* before the Secret is looked up, and
	// clientAuth the result; nil without auth-tls-secret.
	clientAuthAnn *clientAuthAnnotations
	clientAuth    *model.ClientAuth
	// proxySSLAnn is proxy-ssl-* before the Secret is looked up, and
	// upstreamTLS the result; nil without proxy-ssl-secret.
	proxySSLAnn *proxySSLAnnotations
	upstreamTLS *model.UpstreamTLS
	// customHeadersRef is custom-headers, the ConfigMap's reference, and
	// customHeaders its fields.
	customHeadersRef string
	customHeaders    []model.HeaderField
	// basicAuthAnn is auth-type: basic before the Secret is looked up,
	// and basicAuth the result; nil without auth-type.
	basicAuthAnn     *basicAuthAnnotations
	basicAuth        *model.BasicAuth
	digestAuth       *model.DigestAuth
	cors             corsAnnotations
	customHTTPErrors []int
	defaultBackend   string
	xForwardedPrefix string
	serverAliases    []string
	upstreamVhost    string
	sslPassthrough   bool
	// mirror is mirror-target and its kin; nil without a valid
	// mirror-target. Its Source is set once the Ingress's UID is known.
	mirror *model.Mirror
}

type corsAnnotations struct {
	enabled          bool
	allowOrigin      []string
	allowMethods     string
	allowHeaders     string
	exposeHeaders    string
	allowCredentials bool
	maxAge           int
}

// annotationError is one rejected, refused or unsupported annotation; msg
// says what happens to it and reason is the Event reason (empty means
// InvalidConfiguration).
type annotationError struct {
	key, msg, reason string
}

var (
	// Value grammars, as strict as ingress-nginx's validators or stricter.
	reHashBy     = regexp.MustCompile(`^[A-Za-z0-9\-_${}]+$`)
	reToken      = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+\-.^_` + "`" + `|~]+$`)
	reCookiePath = regexp.MustCompile(`^/[A-Za-z0-9\-._~!&()*+,=:@/%]*$`)
	reDomain     = regexp.MustCompile(`^\.?([A-Za-z0-9]([A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9\-]{0,61}[A-Za-z0-9])?$`)
	reHeaderVal  = regexp.MustCompile(`^[\x20-\x7e]*$`)
)

// parseAnnotations validates the annotations Switchyard understands.
func parseAnnotations(raw map[string]string) (*annotations, []annotationError) {
	a := new(annotations)
	return a, a.parse(raw)
}

// parse sets a, which must be zero, from raw. A build parses every
// Ingress into the same value in turn (BuildIndexed).
func (a *annotations) parse(raw map[string]string) []annotationError {
	a.hashBySubsetSize, a.canaryWeightTotal = 3, 100
	var errs []annotationError
	// ours are raw's annotations under the prefix, the prefix cut: when
	// they are few (most Ingresses), get scans them instead of putting a
	// key together and looking it up in raw, ~100 times per Ingress.
	var oursBuf [8]struct{ name, value string }
	ours := oursBuf[:0]
	for k, v := range raw {
		if name, ok := strings.CutPrefix(k, annotationPrefix); ok {
			ours = append(ours, struct{ name, value string }{name, v})
		}
	}
	get := func(name string) (string, bool) {
		if len(ours) <= len(oursBuf) {
			for _, kv := range ours {
				if kv.name == name {
					return kv.value, true
				}
			}
			return "", false
		}
		// The key is put together on the stack: a concatenation would
		// allocate on every lookup.
		var buf [96]byte
		key := append(append(buf[:0], annotationPrefix...), name...)
		v, ok := raw[string(key)]
		return v, ok
	}
	bad := func(name, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if e, ok := catalogueByName[name]; ok && e.Access {
			// An access setting whose value is invalid is not dropped:
			// the Ingress fails closed.
			a.deny(name, msg)
			errs = append(errs, annotationError{key: annotationPrefix + name, reason: model.ReasonFailedClosed,
				msg: msg + "; every path of this Ingress answers 503 until it is fixed (fail closed)"})
			return
		}
		errs = append(errs, annotationError{key: annotationPrefix + name, msg: msg + "; the annotation is ignored"})
	}
	boolean := func(name string) bool {
		v, ok := get(name)
		if !ok {
			return false
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			bad(name, "%q is not true or false", v)
			return false
		}
		return b
	}
	integer := func(name string, lo, hi int) (int, bool) {
		v, ok := get(name)
		if !ok {
			return 0, false
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			bad(name, "%q is not an integer in [%d, %d]", v, lo, hi)
			return 0, false
		}
		return n, true
	}
	token := func(name string) string {
		v, ok := get(name)
		if !ok {
			return ""
		}
		if !reToken.MatchString(v) {
			bad(name, "%q is not a header or cookie name", v)
			return ""
		}
		return v
	}

	errs = append(errs, a.classify(raw)...)

	if v, ok := get("load-balance"); ok {
		if !isAlgorithm(v) {
			bad("load-balance", "%q is not one of %s", v, algorithmNames())
		} else {
			a.loadBalance = v
		}
	}
	if v, ok := get("upstream-hash-by"); ok {
		if !reHashBy.MatchString(v) {
			bad("upstream-hash-by", "%q may only contain letters, digits and - _ $ { }", v)
		} else {
			a.hashBy = ptr(v)
		}
	}
	a.hashBySubset = boolean("upstream-hash-by-subset")
	if n, ok := integer("upstream-hash-by-subset-size", 1, 1000); ok {
		a.hashBySubsetSize = n
	}

	if v, ok := get("affinity"); ok {
		if v != "cookie" {
			bad("affinity", "%q is not cookie", v)
		} else {
			a.affinity = v
		}
	}
	if v, ok := get("affinity-mode"); ok {
		if v != "balanced" && v != "persistent" {
			bad("affinity-mode", "%q is not balanced or persistent", v)
		} else {
			a.affinityMode = v
		}
	}
	if v, ok := get("affinity-canary-behavior"); ok {
		switch v {
		case "legacy":
			a.affinityCanaryLegacy = true
		case "sticky":
		default:
			bad("affinity-canary-behavior", "%q is not sticky or legacy", v)
		}
	}
	if a.affinity == "cookie" {
		a.cookie.Name = "INGRESSCOOKIE"
		if v := token("session-cookie-name"); v != "" {
			a.cookie.Name = v
		}
		if v, ok := get("session-cookie-path"); ok {
			if !reCookiePath.MatchString(v) {
				bad("session-cookie-path", "%q is not a cookie path", v)
			} else {
				a.cookie.Path = v
			}
		}
		if v, ok := get("session-cookie-domain"); ok {
			if !reDomain.MatchString(v) {
				bad("session-cookie-domain", "%q is not a domain", v)
			} else {
				a.cookie.Domain = v
			}
		}
		for _, k := range []struct {
			name string
			dst  **int64
		}{{"session-cookie-expires", &a.cookie.Expires}, {"session-cookie-max-age", &a.cookie.MaxAge}} {
			if n, ok := integer(k.name, 0, 1<<31-1); ok {
				v := int64(n)
				*k.dst = &v
			}
		}
		if v, ok := get("session-cookie-samesite"); ok {
			switch strings.ToLower(v) {
			case "none", "lax", "strict":
				if v == "None" || v == "Lax" || v == "Strict" {
					a.cookie.SameSite = v // only the exact case takes effect, as in ingress-nginx
				}
			default:
				bad("session-cookie-samesite", "%q is not None, Lax or Strict", v)
			}
		}
		a.cookie.ConditionalSameSiteNone = boolean("session-cookie-conditional-samesite-none")
		a.cookie.ChangeOnFailure = boolean("session-cookie-change-on-failure")
		a.cookie.Secure = boolean("session-cookie-secure")
	}

	a.canary = boolean("canary")
	if a.canary {
		before := len(errs)
		a.canaryHeader = token("canary-by-header")
		if v, ok := get("canary-by-header-value"); ok {
			if !reHeaderVal.MatchString(v) {
				bad("canary-by-header-value", "%q contains characters a header value cannot", v)
			} else {
				a.canaryHeaderValue = v
			}
		}
		if v, ok := get("canary-by-header-pattern"); ok {
			if _, err := regexp.Compile(v); err != nil || !reHeaderVal.MatchString(v) {
				bad("canary-by-header-pattern", "%q is not a regular expression RE2 accepts", v)
			} else {
				a.canaryHeaderPattern = v
			}
		}
		a.canaryCookie = token("canary-by-cookie")
		if n, ok := integer("canary-weight-total", 1, 1<<31-1); ok {
			a.canaryWeightTotal = n
		}
		if n, ok := integer("canary-weight", 0, 1<<31-1); ok {
			a.canaryWeight = n
		}
		if len(errs) > before {
			a.canaryInvalid = errs[before].key
		}
	}
	a.useRegex = boolean("use-regex")
	a.fromToWWW = boolean("from-to-www-redirect")
	if _, ok := get("enable-access-log"); ok {
		a.noAccessLog = !boolean("enable-access-log")
	}
	if _, ok := get("service-upstream"); ok {
		v := boolean("service-upstream")
		a.serviceUpstream = &v
	}
	a.globalAuth = true
	if _, ok := get("enable-global-auth"); ok {
		a.globalAuth = boolean("enable-global-auth")
	}
	warn := func(name, msg string) {
		errs = append(errs, annotationError{key: annotationPrefix + name, reason: model.ReasonUnsupported, msg: msg})
	}
	a.externalAuth = parseExternalAuth(get, bad, warn, boolean)
	if v, ok := get("auth-proxy-set-headers"); ok {
		switch {
		case a.externalAuth == nil:
			if _, hasURL := get("auth-url"); !hasURL {
				warn("auth-proxy-set-headers", "has no effect without auth-url (as in ingress-nginx); ignored")
			}
		case !reObjectRef.MatchString(strings.TrimSpace(v)):
			bad("auth-proxy-set-headers", "%q is not a ConfigMap name or namespace/name", v)
		default:
			a.authProxySetHeaders = strings.TrimSpace(v)
		}
	}
	a.clientAuthAnn = parseClientAuth(get, bad, warn, boolean, integer)
	failClosed := func(name, msg string) {
		a.deny(name, msg)
		errs = append(errs, annotationError{key: annotationPrefix + name, reason: model.ReasonFailedClosed,
			msg: msg + "; every path of this Ingress answers 503 until it is fixed (fail closed)"})
	}
	a.proxySSLAnn = parseProxySSL(get, bad, warn, failClosed, integer)
	if v, ok := get("custom-headers"); ok {
		if v = strings.TrimSpace(v); reObjectRef.MatchString(v) {
			a.customHeadersRef = v
		} else {
			failClosed("custom-headers", fmt.Sprintf("%q is not a ConfigMap name or namespace/name", v))
		}
	}
	if a.proxySSLAnn != nil && a.backendProtocol != string(model.ProtocolHTTPS) {
		warn("proxy-ssl-secret", "has no effect unless backend-protocol is HTTPS (as in ingress-nginx, whose proxy_ssl_* apply to proxy_pass https only)")
	}
	a.basicAuthAnn = parseBasicAuth(get, bad, warn)
	a.mirror = parseMirror(get, bad, warn)
	parseLocationAnnotations(a, get, bad, boolean, integer)
	return errs
}

// deny makes the Ingress fail closed, keeping the first reason.
func (a *annotations) deny(name, reason string) {
	if a.denied == nil {
		a.denied = &model.Denial{Field: annotationPrefix + name, Reason: reason}
	}
}

// classify accounts for every annotation under the prefix against the
// catalogue: snippets are refused, unsupported ones reported, and an
// access-control annotation that is refused or unsupported makes the
// Ingress fail closed. Keys are visited in order so messages are stable.
func (a *annotations) classify(raw map[string]string) []annotationError {
	var buf [8]string // on the stack for most Ingresses
	keys := buf[:0]
	for k := range raw {
		if strings.HasPrefix(k, annotationPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var errs []annotationError
	for _, k := range keys {
		name := strings.TrimPrefix(k, annotationPrefix)
		e, known := catalogueByName[name]
		switch {
		case !known:
			errs = append(errs, annotationError{key: k, reason: model.ReasonUnsupported,
				msg: "not an annotation ingress-nginx v1.15.1 knows; ignored"})
		case e.Support == Refused && e.Access:
			a.deny(name, "snippet annotations are refused")
			errs = append(errs, annotationError{key: k, reason: model.ReasonFailedClosed,
				msg: "snippet annotations are refused; it configures access control, so every path of this Ingress answers 503 (fail closed)"})
		case e.Support == Refused:
			errs = append(errs, annotationError{key: k, msg: "snippet annotations are refused; the rest of the Ingress is served without it"})
		case e.Support == Unsupported && e.Access:
			a.deny(name, "not supported by Switchyard")
			errs = append(errs, annotationError{key: k, reason: model.ReasonFailedClosed,
				msg: "access control Switchyard does not support yet; every path of this Ingress answers 503 rather than serve unprotected (fail closed)"})
		case e.Support == Unsupported:
			errs = append(errs, annotationError{key: k, reason: model.ReasonUnsupported,
				msg: "not supported by Switchyard; ignored (see docs/migrating-from-ingress-nginx.md)"})
		}
	}
	return errs
}

// parseSourceRanges reads a comma-separated list of CIDRs or addresses, as
// whitelist-source-range and its kin take them.
func parseSourceRanges(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, r := range strings.Split(v, ",") {
		r = strings.TrimSpace(r)
		if p, err := netip.ParsePrefix(r); err == nil {
			out = append(out, p.Masked())
		} else if ip, err := netip.ParseAddr(r); err == nil && ip.Zone() == "" {
			out = append(out, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
		} else {
			return nil, fmt.Errorf("%q is not a comma-separated list of CIDRs", v)
		}
	}
	return out, nil
}

func isAlgorithm(name string) bool {
	_, ok := model.ParseAlgorithm(name)
	return ok
}

// algorithmNames lists the load-balance values, for messages.
func algorithmNames() string {
	names := make([]string, len(model.Algorithms))
	for i, a := range model.Algorithms {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

var (
	reRewrite   = regexp.MustCompile(`^/?[A-Za-z0-9\-._~!&()*+,=:@/%$]*$`)
	reURL       = regexp.MustCompile(`^https?://[A-Za-z0-9\-.]+(:[0-9]{1,5})?(/[A-Za-z0-9\-._~!&()*+,=:@/%?]*)?$`)
	reOrigin    = regexp.MustCompile(`^(\*|https?://(\*\.)?[A-Za-z0-9\-.]+(:[0-9]{1,5})?)$`)
	reTokenList = regexp.MustCompile(`^[A-Za-z0-9\-_]+(\s*,\s*[A-Za-z0-9\-_]+)*$`)
	reLabel     = regexp.MustCompile(`^[a-z]([a-z0-9\-]{0,61}[a-z0-9])?$`)
	// reObjectRef is "name" or "namespace/name".
	reObjectRef        = regexp.MustCompile(`^([a-z0-9]([a-z0-9\-]{0,61}[a-z0-9])?/)?[a-z0-9]([a-z0-9.\-]{0,251}[a-z0-9])?$`)
	nextUpstreamTokens = map[string]bool{"error": true, "timeout": true, "invalid_header": true, "http_500": true,
		"http_502": true, "http_503": true, "http_504": true, "http_403": true, "http_404": true, "http_429": true,
		"non_idempotent": true, "off": true}
)

// parseLocationAnnotations reads the per-location annotations: protocol,
// redirects and rewrites, proxy settings, access, CORS, error pages.
func parseLocationAnnotations(a *annotations, get func(string) (string, bool), bad func(string, string, ...any),
	boolean func(string) bool, integer func(string, int, int) (int, bool)) {
	if v, ok := get("backend-protocol"); ok {
		switch up := strings.ToUpper(v); up {
		case "HTTP", "HTTPS", "GRPC", "GRPCS", "H2C":
			a.backendProtocol = up
		default:
			bad("backend-protocol", "%q is not HTTP, HTTPS, GRPC, GRPCS or H2C", v)
		}
	}
	if v, ok := get("ssl-redirect"); ok {
		if b, err := strconv.ParseBool(v); err == nil {
			a.sslRedirect = ptr(b)
		} else {
			bad("ssl-redirect", "%q is not true or false", v)
		}
	}
	a.forceSSLRedirect = boolean("force-ssl-redirect")
	a.preserveTrailingSlash = boolean("preserve-trailing-slash")
	if v, ok := get("rewrite-target"); ok {
		if !reRewrite.MatchString(v) || strings.Contains(v, "${") {
			bad("rewrite-target", "%q is not a path (captures as $1 allowed)", v)
		} else {
			a.rewriteTarget = v
		}
	}
	if v, ok := get("app-root"); ok {
		if validatePath(v, false) != nil {
			bad("app-root", "%q is not a path", v)
		} else {
			a.appRoot = v
		}
	}
	// temporal-redirect wins when both are set, as ingress-nginx's
	// redirect parser reads it first; a code out of range is reported and
	// the default (302, 301) kept.
	if v, ok := get("temporal-redirect"); ok {
		if !reURL.MatchString(v) {
			bad("temporal-redirect", "%q is not an http(s) URL", v)
		} else {
			a.redirectURL, a.redirectCode = v, 302
			if n, ok := integer("temporal-redirect-code", 300, 307); ok {
				a.redirectCode = n
			}
		}
	}
	if v, ok := get("permanent-redirect"); ok {
		switch {
		case !reURL.MatchString(v):
			bad("permanent-redirect", "%q is not an http(s) URL", v)
		case a.redirectURL != "":
			bad("permanent-redirect", "%q beside temporal-redirect, which wins (as in ingress-nginx)", v)
		default:
			a.redirectURL, a.redirectCode = v, 301
			if n, ok := integer("permanent-redirect-code", 300, 308); ok {
				a.redirectCode = n
			}
		}
	}
	parseProxyAnnotations(a, get, bad, integer)
	for _, key := range []string{"whitelist-source-range", "allowlist-source-range"} {
		if v, ok := get(key); ok {
			if ranges, err := parseSourceRanges(v); err != nil {
				bad(key, "%v", err)
			} else {
				a.allowSourceRanges = ranges
			}
		}
	}
	parseRateLimit(a, get, bad, integer)
	if v, ok := get("denylist-source-range"); ok {
		if ranges, err := parseSourceRanges(v); err != nil {
			bad("denylist-source-range", "%v", err)
		} else {
			a.denySourceRanges = ranges
		}
	}
	if a.cors.enabled = boolean("enable-cors"); a.cors.enabled {
		a.cors.allowOrigin = []string{"*"}
		a.cors.allowMethods = "GET, PUT, POST, DELETE, PATCH, OPTIONS"
		a.cors.allowHeaders = "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization"
		a.cors.allowCredentials = true
		a.cors.maxAge = 1728000
		if v, ok := get("cors-allow-origin"); ok {
			var origins []string
			valid := true
			for _, o := range strings.Split(v, ",") {
				o = strings.TrimSpace(o)
				if !reOrigin.MatchString(o) {
					valid = false
				}
				origins = append(origins, o)
			}
			if valid {
				a.cors.allowOrigin = origins
			} else {
				bad("cors-allow-origin", "%q is not * or a list of http(s) origins", v)
			}
		}
		for _, k := range []struct {
			name string
			dst  *string
		}{{"cors-allow-methods", &a.cors.allowMethods}, {"cors-allow-headers", &a.cors.allowHeaders}, {"cors-expose-headers", &a.cors.exposeHeaders}} {
			if v, ok := get(k.name); ok {
				if !reTokenList.MatchString(v) {
					bad(k.name, "%q is not a comma-separated list of tokens", v)
				} else {
					*k.dst = v
				}
			}
		}
		if v, ok := get("cors-allow-credentials"); ok {
			if b, err := strconv.ParseBool(v); err == nil {
				a.cors.allowCredentials = b
			} else {
				bad("cors-allow-credentials", "%q is not true or false", v)
			}
		}
		if n, ok := integer("cors-max-age", 0, 1<<31-1); ok {
			a.cors.maxAge = n
		}
	}
	if v, ok := get("custom-http-errors"); ok {
		var codes []int
		valid := true
		for _, c := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(c))
			if err != nil || n < 400 || n > 599 {
				valid = false
			}
			codes = append(codes, n)
		}
		if valid {
			a.customHTTPErrors = codes
		} else {
			bad("custom-http-errors", "%q is not a comma-separated list of 4xx/5xx codes", v)
		}
	}
	if v, ok := get("default-backend"); ok {
		if !reLabel.MatchString(v) {
			bad("default-backend", "%q is not a Service name", v)
		} else {
			a.defaultBackend = v
		}
	}
	if v, ok := get("x-forwarded-prefix"); ok {
		if validatePath(v, false) != nil {
			bad("x-forwarded-prefix", "%q is not a path", v)
		} else {
			a.xForwardedPrefix = v
		}
	}
	if v, ok := get("server-alias"); ok {
		var aliases []string
		valid := true
		for _, h := range strings.Split(v, ",") {
			h = strings.TrimSpace(h)
			if validateHost(h) != nil {
				valid = false
			}
			aliases = append(aliases, h)
		}
		if valid {
			a.serverAliases = aliases
		} else {
			bad("server-alias", "%q is not a comma-separated list of host names", v)
		}
	}
	if v, ok := get("upstream-vhost"); ok {
		if !model.ValidUpstreamVhost(v) {
			bad("upstream-vhost", "%q is not a host name with an optional port (1-65535)", v)
		} else {
			a.upstreamVhost = v
		}
	}
	a.sslPassthrough = boolean("ssl-passthrough")
}

// parseRateLimit reads limit-rps, limit-rpm, limit-connections,
// limit-burst-multiplier and limit-allowlist (limit-whitelist); an invalid
// value fails the Ingress closed (bad, as for every access setting). It
// also reads limit-rate and limit-rate-after, which restrict no access: an
// invalid one is reported and the ConfigMap's default used, as
// ingress-nginx does.
func parseRateLimit(a *annotations, get func(string) (string, bool), bad func(string, string, ...any),
	integer func(string, int, int) (int, bool)) {
	for _, k := range []struct {
		name string
		dst  **int
	}{{"limit-rate", &a.limitRate}, {"limit-rate-after", &a.limitRateAfter}} {
		if n, ok := integer(k.name, 0, maxLimitRate); ok {
			*k.dst = ptr(n)
		}
	}
	rps, _ := integer("limit-rps", 0, maxRateLimit)
	rpm, _ := integer("limit-rpm", 0, maxRateLimit)
	conns, _ := integer("limit-connections", 0, maxRateLimit)
	burst := 5
	if n, ok := integer("limit-burst-multiplier", 0, 1000); ok {
		burst = n
	}
	var allow []netip.Prefix
	for _, key := range []string{"limit-whitelist", "limit-allowlist"} {
		if v, ok := get(key); ok && strings.TrimSpace(v) != "" {
			if ranges, err := parseSourceRanges(v); err != nil {
				bad(key, "%v", err)
			} else {
				allow = ranges
			}
		}
	}
	if rps == 0 && rpm == 0 && conns == 0 {
		return
	}
	a.rateLimit = &model.RateLimit{RPS: rps, RPM: rpm, Connections: conns, BurstMultiplier: burst, Allowlist: allow}
}

// maxRateLimit bounds limit-rps, limit-rpm and limit-connections.
const maxRateLimit = 1_000_000

// maxLimitRate bounds limit-rate and limit-rate-after, in KiB (1 TiB).
const maxLimitRate = 1 << 30

// responseRate is the ResponseRate of limit-rate and limit-rate-after in
// KiB; nil without a rate.
func responseRate(rate, after int) *model.ResponseRate {
	if rate <= 0 {
		return nil // nginx's limit_rate_after does nothing alone
	}
	return &model.ResponseRate{KBPerSecond: rate, AfterKB: after}
}

// bodySize parses a proxy-body-size value: 1 to 12 digits and an
// optional k, m or g (either case), in bytes. Written out rather than as
// a regular expression, whose submatches allocated for every Ingress.
func bodySize(v string) (int64, bool) {
	shift := 0
	if v != "" {
		switch v[len(v)-1] {
		case 'k', 'K':
			shift = 10
		case 'm', 'M':
			shift = 20
		case 'g', 'G':
			shift = 30
		}
	}
	if shift > 0 {
		v = v[:len(v)-1]
	}
	if v == "" || len(v) > 12 || strings.TrimLeft(v, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n << shift, err == nil
}

// parseProxyAnnotations reads the proxy-* keys; the controller ConfigMap uses
// the same names and grammar for its defaults.
func parseProxyAnnotations(a *annotations, get func(string) (string, bool), bad func(string, string, ...any),
	integer func(string, int, int) (int, bool)) {
	for _, k := range []struct {
		name string
		dst  **int
		lo   int
		hi   int
	}{
		{"proxy-connect-timeout", &a.connectTimeout, 1, 3600}, {"proxy-send-timeout", &a.sendTimeout, 1, 86400},
		{"proxy-read-timeout", &a.readTimeout, 1, 86400}, {"proxy-next-upstream-tries", &a.nextUpstreamTries, 0, 100},
		{"proxy-next-upstream-timeout", &a.nextUpstreamTimeout, 0, 86400},
	} {
		if n, ok := integer(k.name, k.lo, k.hi); ok {
			// ptr(n), not &n: n's address would move it to the heap on
			// every iteration, the annotation set or not.
			*k.dst = ptr(n)
		}
	}
	if v, ok := get("proxy-body-size"); ok {
		if n, ok := bodySize(v); !ok {
			bad("proxy-body-size", "%q is not a size (e.g. 8m, 512k, 0 for unlimited)", v)
		} else {
			a.bodySize = ptr(n)
		}
	}
	if v, ok := get("proxy-next-upstream"); ok {
		toks := strings.Fields(v)
		valid := len(toks) > 0
		for _, tk := range toks {
			valid = valid && nextUpstreamTokens[tk]
		}
		if !valid {
			bad("proxy-next-upstream", "%q is not a list of error, timeout, invalid_header, http_5xx/403/404/429, non_idempotent or off", v)
		} else {
			a.nextUpstream = toks
		}
	}
	if v, ok := get("proxy-buffer-size"); ok {
		// At most 1 MiB: the Go plane holds a head of that size per
		// connection while it reads it.
		if n, err := nginxSize(v); err != nil || n < 1<<10 || n > 1<<20 {
			bad("proxy-buffer-size", "%q is not a size from 1k to 1m", v)
		} else {
			a.bufferSize = ptr(n)
		}
	}
	// At least 2: nginx refuses proxy_buffers of one (its busy buffers
	// must be smaller than all buffers but one).
	if n, ok := integer("proxy-buffers-number", 2, 256); ok {
		a.buffersNumber = ptr(n)
	}
	if v, ok := get("proxy-buffering"); ok {
		switch v {
		case "on", "off":
			b := v == "on"
			a.buffering = &b
		default:
			bad("proxy-buffering", "%q is not on or off", v)
		}
	}
	if v, ok := get("proxy-request-buffering"); ok {
		switch v {
		case "on", "off":
			off := v == "off"
			a.noRequestBuffering = &off
		default:
			bad("proxy-request-buffering", "%q is not on or off", v)
		}
	}
	if v, ok := get("client-body-buffer-size"); ok {
		if n, err := nginxSize(v); err != nil || n < 1<<10 || n > 64<<20 {
			bad("client-body-buffer-size", "%q is not a size from 1k to 64m", v)
		} else {
			a.clientBodyBuffer = ptr(n)
		}
	}
	// ingress-nginx validates the annotation against "1.0" and "1.1",
	// case-sensitive, after trimming blanks, and keeps the ConfigMap's
	// value for any other.
	if v, ok := get("proxy-http-version"); ok {
		switch strings.TrimSpace(v) {
		case "1.0", "1.1":
			old := strings.TrimSpace(v) == "1.0"
			a.http10 = &old
		default:
			bad("proxy-http-version", "%q is not 1.0 or 1.1", v)
		}
	}
}
