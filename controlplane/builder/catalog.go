package builder

// Support says what Switchyard does with one annotation ingress-nginx
// v1.15.1 knows.
type Support uint8

// The support classes. Every annotation is in exactly one.
const (
	// Supported: read with ingress-nginx's meaning and grammar.
	Supported Support = iota + 1
	// Partial: read, with a difference the entry's Note states.
	Partial
	// Refused: raw nginx configuration (snippets); a Warning Event, and the
	// rest of the Ingress is served without it.
	Refused
	// Unsupported: not carried out. A Warning Event names it; when the
	// annotation grants or restricts access (Access), every location of the
	// Ingress answers 503 instead (fail closed).
	Unsupported
)

func (s Support) String() string {
	switch s {
	case Supported:
		return "supported"
	case Partial:
		return "partial"
	case Refused:
		return "refused"
	case Unsupported:
		return "not supported"
	}
	return "unknown"
}

// AnnotationGroup is the section of the migration guide an annotation is
// listed under.
type AnnotationGroup string

// The groups, in the order the migration guide lists them.
const (
	GroupBalancing AnnotationGroup = "Balancing, affinity, canary"
	GroupRouting   AnnotationGroup = "Routing, redirects, rewrites"
	GroupProxy     AnnotationGroup = "Proxying, timeouts, buffers, upstream TLS"
	GroupAccess    AnnotationGroup = "Access control (fail closed when not supported)"
	GroupHeaders   AnnotationGroup = "Headers, CORS, error pages, TLS to clients"
	GroupOther     AnnotationGroup = "Logging, tracing, WAF, snippets, other"
)

// AnnotationGroups lists the groups in the migration guide's order.
var AnnotationGroups = []AnnotationGroup{GroupBalancing, GroupRouting, GroupProxy, GroupAccess, GroupHeaders, GroupOther}

// AnnotationInfo is one row of the catalogue.
type AnnotationInfo struct {
	// Name is the annotation without its prefix, e.g. "auth-url".
	Name  string
	Group AnnotationGroup
	// Support is what Switchyard does with it.
	Support Support
	// Access is true when the annotation grants or restricts access to
	// the location: left unsupported, it makes the Ingress fail closed.
	Access bool
	// GoPlane and NginxPlane say what each data plane does with it; empty
	// means "yes" for Supported and Partial, "no" otherwise.
	GoPlane, NginxPlane string
	// Note says what differs from ingress-nginx, or why it is refused.
	Note string
}

// Catalogue is every annotation ingress-nginx v1.15.1 reads (its annotation
// parsers and its annotations documentation), classified. The migration
// guide's annotation table is generated from it (TestAnnotationTableInDocs).
var Catalogue = []AnnotationInfo{
	// Balancing, affinity, canary: the balancer, the same for both planes.
	{Name: "load-balance", Group: GroupBalancing, Support: Partial, Note: "`round_robin`, `ewma`, `chash`, `chashsubset`, `sticky_balanced`, `sticky_persistent`, plus `least_request` and `peak_ewma` (docs/compatibility.md); an unknown value is reported and ignored"},
	{Name: "upstream-hash-by", Group: GroupBalancing, Support: Partial, Note: "with `load-balance: chash` and no `upstream-hash-by`, `$request_uri` is hashed instead of the literal `nil`; edits apply without recreating the Ingress; letters, digits and `-_${}` only"},
	{Name: "upstream-hash-by-subset", Group: GroupBalancing, Support: Supported},
	{Name: "upstream-hash-by-subset-size", Group: GroupBalancing, Support: Supported, Note: "1-1000, default 3"},
	{Name: "affinity", Group: GroupBalancing, Support: Supported, Note: "`cookie` only, as ingress-nginx"},
	{Name: "affinity-mode", Group: GroupBalancing, Support: Supported, Note: "`balanced` or `persistent`"},
	{Name: "affinity-canary-behavior", Group: GroupBalancing, Support: Supported, Note: "`sticky` or `legacy`"},
	{Name: "session-cookie-name", Group: GroupBalancing, Support: Supported, Note: "cookies byte-identical to ingress-nginx's"},
	{Name: "session-cookie-path", Group: GroupBalancing, Support: Supported},
	{Name: "session-cookie-domain", Group: GroupBalancing, Support: Supported},
	{Name: "session-cookie-samesite", Group: GroupBalancing, Support: Supported, Note: "takes effect only as exactly `Strict`, `Lax` or `None`, as ingress-nginx"},
	{Name: "session-cookie-conditional-samesite-none", Group: GroupBalancing, Support: Supported},
	{Name: "session-cookie-change-on-failure", Group: GroupBalancing, Support: Supported},
	{Name: "session-cookie-secure", Group: GroupBalancing, Support: Supported},
	{Name: "session-cookie-expires", Group: GroupBalancing, Support: Partial, Note: "whole seconds within bounds only; ingress-nginx accepts `0abc` and then fails every request"},
	{Name: "session-cookie-max-age", Group: GroupBalancing, Support: Partial, Note: "as `session-cookie-expires`"},
	{Name: "canary", Group: GroupBalancing, Support: Supported, Note: "affinity → header → cookie → weight, as ingress-nginx"},
	{Name: "canary-by-header", Group: GroupBalancing, Support: Supported},
	{Name: "canary-by-header-value", Group: GroupBalancing, Support: Supported},
	{Name: "canary-by-header-pattern", Group: GroupBalancing, Support: Partial, Note: "RE2 (Go `regexp`) instead of PCRE; a pattern RE2 refuses is reported"},
	{Name: "canary-by-cookie", Group: GroupBalancing, Support: Supported},
	{Name: "canary-weight", Group: GroupBalancing, Support: Supported},
	{Name: "canary-weight-total", Group: GroupBalancing, Support: Supported},

	// Routing, redirects, rewrites.
	{Name: "use-regex", Group: GroupRouting, Support: Partial, Note: "paths are RE2, matched case-insensitively (nginx `~*`); PCRE-only syntax is refused"},
	{Name: "server-alias", Group: GroupRouting, Support: Supported},
	{Name: "rewrite-target", Group: GroupRouting, Support: Supported, Note: "captures `$1`…; `${` refused"},
	{Name: "app-root", Group: GroupRouting, Support: Supported},
	{Name: "permanent-redirect", Group: GroupRouting, Support: Supported, Note: "http(s) URLs only"},
	{Name: "permanent-redirect-code", Group: GroupRouting, Support: Supported},
	{Name: "temporal-redirect", Group: GroupRouting, Support: Supported, Note: "http(s) URLs only"},
	{Name: "temporal-redirect-code", Group: GroupRouting, Support: Supported, Note: "300-307; another value is reported and 302 kept"},
	{Name: "ssl-redirect", Group: GroupRouting, Support: Supported, Note: "`http-redirect-code`, 308 by default"},
	{Name: "force-ssl-redirect", Group: GroupRouting, Support: Supported},
	{Name: "preserve-trailing-slash", Group: GroupRouting, Support: Partial, Note: "only the ssl-redirect's trailing slash is affected"},
	{Name: "from-to-www-redirect", Group: GroupRouting, Support: Supported, Note: "a server for www.<host> (or <host> without www.) redirecting to the Ingress host with http-redirect-code, its port and path, as ingress-nginx; over HTTPS only when the host's certificate also names it (else the catch-all answers), and not when an Ingress serves that name (an Event says so)"},
	{Name: "use-port-in-redirects", Group: GroupRouting, Support: Unsupported},
	{Name: "relative-redirects", Group: GroupRouting, Support: Unsupported},
	{Name: "ssl-passthrough", Group: GroupRouting, Support: Supported, Note: "with `--enable-ssl-passthrough` (SNI routing in `tcpproxy/`)"},
	{Name: "default-backend", Group: GroupRouting, Support: Partial, GoPlane: "partly: the backend custom-http-errors asks", NginxPlane: "partly: the backend custom-http-errors asks", Note: "an unmatched request gets the built-in `default backend - 404`"},
	{Name: "service-upstream", Group: GroupRouting, Support: Supported, Note: "the Service's cluster IP and port as the one endpoint; a Service without one (headless, ExternalName) keeps its endpoints, with an Event"},

	// Proxying.
	{Name: "backend-protocol", Group: GroupProxy, Support: Supported, Note: "`HTTP`, `HTTPS`, `GRPC`, `GRPCS`, `H2C`; `AJP`, `FCGI` refused; upstream certificates are not verified, as nginx's default, unless proxy-ssl-verify says so (HTTPS; GRPCS never, as in ingress-nginx)"},
	{Name: "upstream-vhost", Group: GroupProxy, Support: Supported},
	{Name: "x-forwarded-prefix", Group: GroupProxy, Support: Supported},
	{Name: "limit-rate", Group: GroupProxy, Support: Supported, Note: "KiB a second per answer, nginx `limit_rate <n>k` as ingress-nginx writes it, over the ConfigMap's `limit-rate`; as in nginx it paces only with `proxy-buffering: on` (nginx drops it for unbuffered upstream answers, ingress-nginx's default) and not gRPC; an invalid value is reported and the default kept, as ingress-nginx does. The Go plane paces the body only (nginx counts the head too), about 20 % slower than nginx over 400 KB (docs/compatibility.md)"},
	{Name: "limit-rate-after", Group: GroupProxy, Support: Supported, Note: "KiB sent before `limit-rate` applies (`limit_rate_after <n>k`), over the ConfigMap's `limit-rate-after`"},
	{Name: "proxy-body-size", Group: GroupProxy, Support: Supported, Note: "413; `0` means unlimited"},
	{Name: "proxy-connect-timeout", Group: GroupProxy, Support: Supported},
	{Name: "proxy-send-timeout", Group: GroupProxy, Support: Supported},
	{Name: "proxy-read-timeout", Group: GroupProxy, Support: Supported},
	{Name: "proxy-next-upstream", Group: GroupProxy, Support: Supported},
	{Name: "proxy-next-upstream-tries", Group: GroupProxy, Support: Partial, GoPlane: "yes, but `0` means 3 (unlimited in nginx)", Note: "0-100"},
	{Name: "proxy-next-upstream-timeout", Group: GroupProxy, Support: Supported},
	{Name: "proxy-buffering", Group: GroupProxy, Support: Partial, GoPlane: "no: bodies are always streamed"},
	{Name: "proxy-buffer-size", Group: GroupProxy, Support: Supported, Note: "the most an upstream response head may take (default 4k; 1k to 1m here): a larger one is a 502 and a log line on both planes, as nginx's \"upstream sent too big header\""},
	{Name: "proxy-buffers-number", Group: GroupProxy, Support: Partial, GoPlane: "no effect: the Go plane streams bodies", Note: "2 to 256 (nginx refuses 1)"},
	{Name: "proxy-busy-buffers-size", Group: GroupProxy, Support: Unsupported},
	{Name: "proxy-max-temp-file-size", Group: GroupProxy, Support: Unsupported},
	{Name: "proxy-request-buffering", Group: GroupProxy, Support: Supported, Note: "`on` (the default): the whole body is read before the request goes upstream, sent with its length and retried whole on the next peer; `off`: streamed as it comes (chunked when the client chunked it), read whole anyway for an HTTP/1.0 upstream. The Go plane keeps a body past the larger of 64 KiB and `client-body-buffer-size` in an unlinked file in `$TMPDIR/switchyard-client-body`"},
	{Name: "client-body-buffer-size", Group: GroupProxy, Support: Partial, GoPlane: "the memory part of a body read whole is the larger of this and 64 KiB (the rest goes to a temporary file), where nginx keeps exactly this much", Note: "1k to 64m"},
	{Name: "proxy-http-version", Group: GroupProxy, Support: Supported, Note: "`1.0` or `1.1`; any other value is reported and the ConfigMap's kept"},
	{Name: "proxy-cookie-domain", Group: GroupProxy, Support: Unsupported},
	{Name: "proxy-cookie-path", Group: GroupProxy, Support: Unsupported},
	{Name: "proxy-redirect-from", Group: GroupProxy, Support: Unsupported},
	{Name: "proxy-redirect-to", Group: GroupProxy, Support: Unsupported},
	{Name: "connection-proxy-header", Group: GroupProxy, Support: Unsupported},
	{Name: "proxy-ssl-secret", Group: GroupProxy, Support: Supported, Note: "ca.crt (required) verifies the upstream, tls.crt and tls.key (optional) are the client certificate sent to it; for backend-protocol HTTPS, as ingress-nginx writes proxy_ssl_* only for proxy_pass; a missing or invalid Secret fails closed"},
	{Name: "proxy-ssl-verify", Group: GroupProxy, Support: Supported, Note: "a value other than on or off fails closed (ingress-nginx turns it off); a failed verification is a 502, logged"},
	{Name: "proxy-ssl-verify-depth", Group: GroupProxy, Support: Supported},
	{Name: "proxy-ssl-name", Group: GroupProxy, Support: Supported, Note: "without it the name checked, and sent as SNI with proxy-ssl-server-name, is upstream_balancer, as in ingress-nginx"},
	{Name: "proxy-ssl-server-name", Group: GroupProxy, Support: Supported},
	{Name: "proxy-ssl-protocols", Group: GroupProxy, Support: Supported},
	{Name: "proxy-ssl-ciphers", Group: GroupProxy, Support: Partial, GoPlane: "OpenSSL suite names (ECDHE-RSA-AES128-GCM-SHA256:...) only; a list with other words (DEFAULT, HIGH, !aNULL) keeps Go's default suites, with a warning"},
	{Name: "mirror-target", Group: GroupProxy, Support: Partial, GoPlane: "yes, asynchronously: a slow mirror never holds up the client's connection; at most 128 copies in flight (more are dropped and counted); a body it does not hold in memory (over the larger of 64 KiB and `client-body-buffer-size`, or streamed with `proxy-request-buffering: off`) is not mirrored (docs/compatibility.md)",
		Note: "an http(s) URL with a literal host (DNS name or IPv4, optional port) and a path that may use only `$request_uri`, `$uri`, `$args`, `$query_string`, `$is_args`, `$host`, `$scheme`; anything else is reported and the Ingress served without the mirror; a target without variables may not hold a query"},
	{Name: "mirror-request-body", Group: GroupProxy, Support: Supported, Note: "`on` (default) or `off`; with `off` a request with a body is mirrored without it (nginx sends its Content-Length and no body: docs/compatibility.md)"},
	{Name: "mirror-host", Group: GroupProxy, Support: Partial, Note: "a host name with an optional port (ingress-nginx also takes regex characters); the target's host without its port by default"},
	{Name: "fastcgi-index", Group: GroupProxy, Support: Unsupported},
	{Name: "fastcgi-params-configmap", Group: GroupProxy, Support: Unsupported},

	// Access control: what is not carried out fails closed.
	{Name: "whitelist-source-range", Group: GroupAccess, Support: Supported, Access: true, Note: "403 for other clients, checked against the client's address: the connection's, or with `use-forwarded-headers`/`enable-real-ip` the one nginx's realip finds in `forwarded-for-header` behind `proxy-real-ip-cidr` (both planes); an invalid list fails closed (503)"},
	{Name: "allowlist-source-range", Group: GroupAccess, Support: Supported, Access: true, Note: "as `whitelist-source-range`"},
	{Name: "denylist-source-range", Group: GroupAccess, Support: Supported, Access: true, Note: "403 for the listed clients, checked before the allow list, as nginx's `deny` lines come first, against the client's address as `whitelist-source-range`; an invalid list fails closed (503)"},
	{Name: "auth-type", Group: GroupAccess, Support: Supported, Access: true, Note: "`basic` and `digest` on both planes; `digest` is one Go verifier answering as ingress-nginx's nginx-http-auth-digest module (MD5, qop=auth, nonces 60 s / 10 s, 20 replays), asked by nginx through `auth_request`; it needs `auth-realm` (ingress-nginx serves it unprotected without) and refuses an htdigest line it cannot read (docs/compatibility.md)"},
	{Name: "auth-secret", Group: GroupAccess, Support: Partial, Access: true, Note: "a Secret in the Ingress's namespace; hashes `$apr1$`, `$1$`, `$5$`, `$6$`, bcrypt, `{SHA}`, `{SSHA}`, `{PLAIN}`; a line of another scheme (yescrypt, DES) or a missing Secret fails closed; with `auth-type: digest`, htdigest `user:realm:HA1` lines (auth-map: `realm:HA1` values)"},
	{Name: "auth-secret-type", Group: GroupAccess, Support: Supported, Access: true, Note: "`auth-file` or `auth-map`"},
	{Name: "auth-realm", Group: GroupAccess, Support: Supported, Access: true, Note: "required with `auth-type: digest`"},
	{Name: "auth-url", Group: GroupAccess, Support: Partial, Access: true, Note: "nginx `auth_request` semantics on both planes; the URL may use only `$host`, `$http_host`, `$best_http_host`, `$scheme`, `$pass_access_scheme`, `$request_uri`, `$escaped_request_uri`; anything else fails closed"},
	{Name: "auth-method", Group: GroupAccess, Support: Supported, Access: true},
	{Name: "auth-signin", Group: GroupAccess, Support: Partial, Access: true, Note: "variables as `auth-url`; an invalid value fails closed (ingress-nginx drops it and answers 401)"},
	{Name: "auth-signin-redirect-param", Group: GroupAccess, Support: Supported, Access: true},
	{Name: "auth-response-headers", Group: GroupAccess, Support: Supported, Access: true, Note: "the client's fields of these names never reach the upstream: they are replaced by the service's, or removed"},
	{Name: "auth-request-redirect", Group: GroupAccess, Support: Supported, Access: true},
	{Name: "auth-cache-key", Group: GroupAccess, Support: Partial, Note: "variables `$http_*`, `$cookie_*`, `$remote_addr`, `$host`, `$request_uri`; another leaves requests uncached, with an Event (never more open)"},
	{Name: "auth-cache-duration", Group: GroupAccess, Support: Supported, Note: "`[code ...|any] time` lines, time in s, m, h or d; default `200 202 401 5m`"},
	{Name: "auth-keepalive", Group: GroupAccess, Support: Partial, GoPlane: "yes: connections to the service are always kept alive", NginxPlane: "no: a connection per subrequest", Note: "a performance setting; it grants nothing"},
	{Name: "auth-keepalive-requests", Group: GroupAccess, Support: Unsupported, Note: "as `auth-keepalive`"},
	{Name: "auth-keepalive-share-vars", Group: GroupAccess, Support: Unsupported, Note: "as `auth-keepalive`"},
	{Name: "auth-keepalive-timeout", Group: GroupAccess, Support: Unsupported, Note: "as `auth-keepalive`"},
	{Name: "auth-proxy-set-headers", Group: GroupAccess, Support: Partial, Access: true, Note: "a ConfigMap in the Ingress's namespace whose data go to the auth service as fields; values are literal text: a `$` (an nginx variable in ingress-nginx), a blank at either end, a byte other than printable ASCII, a field the subrequest sets itself (`Host`, `X-Original-URL`, `X-Forwarded-For`, ...), or a missing ConfigMap fails closed"},
	{Name: "auth-always-set-cookie", Group: GroupAccess, Support: Supported, Access: true},
	{Name: "enable-global-auth", Group: GroupAccess, Support: Supported, Access: true, Note: "`false` exempts the Ingress from the ConfigMap's `global-auth-url`, which applies to every location without its own `auth-url` (paths under `no-auth-locations` exempt, `/.well-known/acme-challenge` by default)"},
	{Name: "satisfy", Group: GroupAccess, Support: Unsupported, Access: true},
	{Name: "auth-tls-secret", Group: GroupAccess, Support: Partial, Access: true, Note: "`ca.crt` of a Secret in the Ingress's namespace, and `ca.crl` when present (nginx `ssl_crl`; the Go plane checks the chain the same way: a revoked certificate gets 400 under every verify mode); a `ca.crl` that does not parse or that no certificate of `ca.crt` signed fails closed; plain-HTTP requests to the host get 403 unless redirected to HTTPS (ingress-nginx serves them)"},
	{Name: "auth-tls-verify-client", Group: GroupAccess, Support: Supported, Access: true, Note: "`on`, `off`, `optional`, `optional_no_ca`"},
	{Name: "auth-tls-verify-depth", Group: GroupAccess, Support: Supported, Access: true},
	{Name: "auth-tls-error-page", Group: GroupAccess, Support: Supported, Access: true},
	{Name: "auth-tls-pass-certificate-to-upstream", Group: GroupAccess, Support: Supported, Access: true},
	{Name: "auth-tls-match-cn", Group: GroupAccess, Support: Partial, Access: true, Note: "letters, digits and `= , . - _ * + ? ^ $ ( ) | [ ] : / @` only, compiled by RE2 (the field of CVE-2025-1097); anything else fails closed"},
	{Name: "limit-rps", Group: GroupAccess, Support: Supported, Access: true, Note: "nginx `limit_req` as ingress-nginx renders it on both planes: per client address (after the real IP settings), burst = rate × `limit-burst-multiplier`, `nodelay`, refused requests get `limit-req-status-code` (503); one zone per Ingress, shared by its paths, counted per controller replica as ingress-nginx counts per pod; an invalid value fails closed"},
	{Name: "limit-rpm", Group: GroupAccess, Support: Supported, Access: true, Note: "as `limit-rps`, per minute; both apply when both are set"},
	{Name: "limit-connections", Group: GroupAccess, Support: Supported, Access: true, Note: "nginx `limit_conn` as ingress-nginx renders it on both planes: requests in progress per client address (each HTTP/2 stream one, an upgraded connection until it closes), in the Ingress's zone beside `limit-rps`'s, the same allow list; refused requests get `limit-conn-status-code` (503); counted per controller replica; a full zone (64 Ki addresses in progress on the Go plane) refuses new addresses, as nginx's; an invalid value fails closed"},
	{Name: "limit-burst-multiplier", Group: GroupAccess, Support: Supported, Access: true, Note: "default 5"},
	{Name: "limit-whitelist", Group: GroupAccess, Support: Supported, Access: true, Note: "as `limit-allowlist`, which wins when both are set"},
	{Name: "limit-allowlist", Group: GroupAccess, Support: Supported, Access: true, Note: "client addresses (CIDRs) the rate limits skip; an invalid list fails closed"},

	// Headers, CORS, error pages, client TLS.
	{Name: "enable-cors", Group: GroupHeaders, Support: Supported, Note: "preflight 204, the fields for allowed origins on every answer, `https://*.domain` wildcards, `*` for every request"},
	{Name: "cors-allow-origin", Group: GroupHeaders, Support: Supported, Note: "origins matched in any case; ingress-nginx also accepts an Origin that only ends in an allowed one"},
	{Name: "cors-allow-methods", Group: GroupHeaders, Support: Supported},
	{Name: "cors-allow-headers", Group: GroupHeaders, Support: Supported},
	{Name: "cors-expose-headers", Group: GroupHeaders, Support: Supported},
	{Name: "cors-allow-credentials", Group: GroupHeaders, Support: Supported},
	{Name: "cors-max-age", Group: GroupHeaders, Support: Supported},
	{Name: "custom-http-errors", Group: GroupHeaders, Support: Partial, NginxPlane: "yes, without X-Service-Port", Note: "the default backend (or `default-backend`'s Service) answers the listed codes, with X-Code, X-Format, X-Original-URI ..."},
	{Name: "disable-proxy-intercept-errors", Group: GroupHeaders, Support: Unsupported},
	{Name: "custom-headers", Group: GroupHeaders, Support: Partial, GoPlane: "yes", NginxPlane: "yes, with add_header and proxy_hide_header (no headers-more module)", Note: "a ConfigMap in the Ingress's namespace whose fields go on answers of status 200, 201, 204, 206, 301-304, 307, 308, replacing the upstream's; each name must be in the ConfigMap's global-allowed-response-headers, as ingress-nginx requires; values are literal text: a `$` (an nginx variable in ingress-nginx), a missing ConfigMap or a name not allowed makes the Ingress answer 503, as ingress-nginx denies it"},
	{Name: "ssl-ciphers", Group: GroupHeaders, Support: Unsupported},
	{Name: "ssl-prefer-server-ciphers", Group: GroupHeaders, Support: Unsupported},
	{Name: "http2-push-preload", Group: GroupHeaders, Support: Unsupported, Note: "documented by ingress-nginx, no longer read by it"},

	// Logging, tracing, snippets, other.
	{Name: "enable-modsecurity", Group: GroupOther, Support: Unsupported, Note: "the WAF is not run. ingress-nginx's ModSecurity only detects (`SecRuleEngine DetectionOnly`) unless a `modsecurity-snippet` turns blocking on, and that snippet fails closed"},
	{Name: "enable-owasp-core-rules", Group: GroupOther, Support: Unsupported, Note: "as `enable-modsecurity`"},
	{Name: "modsecurity-transaction-id", Group: GroupOther, Support: Unsupported},
	{Name: "enable-access-log", Group: GroupOther, Support: Supported, Note: "\"false\": the location's requests are not logged"},
	{Name: "enable-rewrite-log", Group: GroupOther, Support: Unsupported},
	{Name: "enable-opentelemetry", Group: GroupOther, Support: Unsupported},
	{Name: "opentelemetry-trust-incoming-span", Group: GroupOther, Support: Unsupported},
	{Name: "opentelemetry-operation-name", Group: GroupOther, Support: Unsupported},
	{Name: "configuration-snippet", Group: GroupOther, Support: Refused, Note: "raw nginx configuration was the way in for ingress-nginx's injection CVEs"},
	{Name: "server-snippet", Group: GroupOther, Support: Refused, Note: "as `configuration-snippet`"},
	{Name: "auth-snippet", Group: GroupOther, Support: Refused, Access: true, Note: "as `configuration-snippet`; it is auth configuration, so the Ingress fails closed"},
	{Name: "stream-snippet", Group: GroupOther, Support: Refused, Note: "as `configuration-snippet`"},
	{Name: "modsecurity-snippet", Group: GroupOther, Support: Refused, Access: true, Note: "as `configuration-snippet`; it configures the WAF, so the Ingress fails closed"},
}

// catalogueByName indexes Catalogue.
var catalogueByName = func() map[string]*AnnotationInfo {
	m := make(map[string]*AnnotationInfo, len(Catalogue))
	for i := range Catalogue {
		m[Catalogue[i].Name] = &Catalogue[i]
	}
	return m
}()

// LookupAnnotation returns the catalogue entry of an annotation name
// without its prefix.
func LookupAnnotation(name string) (AnnotationInfo, bool) {
	if e, ok := catalogueByName[name]; ok {
		return *e, true
	}
	return AnnotationInfo{}, false
}
