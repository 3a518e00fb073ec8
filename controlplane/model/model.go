package model

import (
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/basicauth"
	"github.com/switchyard-proxy/switchyard/controlplane/digestauth"
)

// Configuration is one complete, immutable snapshot of what the cluster asks
// the data planes to serve. The control plane builds a new one on every sync
// and never mutates one it has handed to a sink; sinks never mutate it either.
//
// It mirrors ingress-nginx's ingress.Configuration, trimmed to the features
// Switchyard implements.
type Configuration struct {
	// Version increases by one with every Configuration the controller builds.
	Version uint64 `json:"version"`

	// Backends are the upstreams, sorted by name. A Backend is never
	// written once the Configuration holding it is built: a Configuration
	// refreshed for an endpoint change shares every Backend that did not
	// change with the one before, so an endpoint change costs the
	// backends it touches, not all of them. None is nil.
	Backends []*Backend `json:"backends"`

	// Servers are the virtual hosts, sorted by hostname, with the catch-all
	// server "_" first.
	Servers []Server `json:"servers"`

	// TCPServices and UDPServices come from the tcp-services and
	// udp-services ConfigMaps, sorted by port.
	TCPServices []L4Service `json:"tcpServices,omitempty"`
	UDPServices []L4Service `json:"udpServices,omitempty"`

	// PassthroughBackends are the hosts with ssl-passthrough, sorted by host.
	PassthroughBackends []PassthroughBackend `json:"passthroughBackends,omitempty"`

	// Certificates holds every TLS certificate a server refers to, keyed by
	// Certificate.UID.
	Certificates map[string]Certificate `json:"certificates,omitempty"`

	// DefaultCertificate is the UID of the certificate served for unknown
	// SNI (--default-ssl-certificate); empty means a self-signed fake.
	DefaultCertificate string `json:"defaultCertificate,omitempty"`

	// Global holds the controller ConfigMap settings.
	Global Global `json:"global"`

	// Errors lists every object-level problem found while building: an
	// invalid annotation, a bad path, a missing Secret. The objects involved
	// are still served as far as possible.
	Errors []ObjectError `json:"errors,omitempty"`
}

// DefaultBackendName is the name of the backend that serves the catch-all
// server and 404s (ingress-nginx's upstream-default-backend).
const DefaultBackendName = "upstream-default-backend"

// CatchAllHost is the hostname of the default server.
const CatchAllHost = "_"

// ObjectRef names a Kubernetes object.
type ObjectRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// ObjectError is one problem with one object: the object is named so an
// Event can be attached to it.
type ObjectError struct {
	Object ObjectRef `json:"object"`
	// Field is the annotation key or the field path at fault, e.g.
	// "nginx.ingress.kubernetes.io/proxy-body-size" or "spec.rules[0].host".
	Field string `json:"field,omitempty"`
	// Message says what is wrong, for a human.
	Message string `json:"message"`
	// Reason is the reason of the Warning Event attached to the object:
	// ReasonFailedClosed, ReasonUnsupported, or empty for
	// "InvalidConfiguration".
	Reason string `json:"reason,omitempty"`
}

// Event reasons of ObjectError.
const (
	// ReasonFailedClosed: an access-control setting Switchyard cannot carry
	// out, or whose value is invalid; the locations it covers answer 503.
	ReasonFailedClosed = "FailedClosed"
	// ReasonUnsupported: an annotation or key Switchyard does not carry
	// out; it is ignored.
	ReasonUnsupported = "UnsupportedAnnotation"
)

// Server is one virtual host.
type Server struct {
	// Hostname is the host, "*.example.com" for a wildcard, or "_" for the
	// catch-all server.
	Hostname string `json:"hostname"`
	// Aliases come from the server-alias annotation.
	Aliases []string `json:"aliases,omitempty"`
	// TLS is set when a certificate covers this host.
	TLS *ServerTLS `json:"tls,omitempty"`
	// ClientAuth, when set, is auth-tls-*: TLS clients are asked for a
	// certificate verified against its CA before any location runs.
	ClientAuth *ClientAuth `json:"clientAuth,omitempty"`
	// RedirectTo, when set, makes this server answer every request with a
	// redirect to that host (from-to-www-redirect: "www.example.com" to
	// "example.com" or the other way): Global.HTTPRedirectCode, Location
	// scheme://RedirectTo:port and the request URI without a trailing
	// slash, as ingress-nginx's redirect servers; it has no Locations.
	RedirectTo string `json:"redirectTo,omitempty"`
	// SSLPassthrough sends this host's TLS connections to the backend
	// unterminated (tcpproxy); Locations are then not used for HTTPS.
	SSLPassthrough bool `json:"sslPassthrough,omitempty"`
	// Locations are ordered as ingress-nginx orders them in nginx.conf:
	// the first match in this order wins in the Go router too.
	Locations []Location `json:"locations"`
}

// ClientAuth is client certificate authentication (auth-tls-secret and its
// kin), as nginx's ssl_verify_client runs it in ingress-nginx's server
// block: a request over TLS without a certificate gets 400 "No required SSL
// certificate was sent", one with a certificate that does not verify gets
// 400 "The SSL certificate error" (or a 302 to ErrorPage for both), and a
// subject that does not match MatchCN gets 403. A plain-HTTP request to the
// host is refused with 403 unless ssl-redirect sends it to HTTPS (ingress-
// nginx would serve it: docs/compatibility.md).
type ClientAuth struct {
	// Secret is the auth-tls-secret Secret; CA its ca.crt, one or more PEM
	// certificates, validated.
	Secret ObjectRef `json:"secret"`
	CA     string    `json:"ca"`
	// CRL is the Secret's ca.crl, one or more PEM "X509 CRL" blocks, each
	// parsed and signed by a certificate of CA (validated); empty: no
	// revocation check. With it, as nginx's ssl_crl (OpenSSL's
	// CRL_CHECK_ALL), every certificate of the client's chain up to the CA
	// needs a current CRL of its issuer and must not be listed in it, or
	// the request gets 400 "The SSL certificate error", whatever Verify.
	CRL string `json:"crl,omitempty"`
	// Verify is auth-tls-verify-client: VerifyOn, VerifyOptional or
	// VerifyOptionalNoCA ("off" makes no ClientAuth).
	Verify ClientVerify `json:"verify"`
	// Depth is auth-tls-verify-depth: how many intermediate certificates
	// may stand between the client's and the CA's (nginx's
	// ssl_verify_depth; 1 by default).
	Depth int `json:"depth"`
	// ErrorPage is auth-tls-error-page: an http(s) URL or path that
	// clients failing verification are redirected to (302).
	ErrorPage string `json:"errorPage,omitempty"`
	// PassCertificate is auth-tls-pass-certificate-to-upstream: the
	// client's certificate, URL-escaped PEM, goes upstream as ssl-client-cert.
	PassCertificate bool `json:"passCertificate,omitempty"`
	// MatchCN is auth-tls-match-cn: a regular expression (RE2, and PCRE
	// alike: no backslash, quote or brace) the subject DN must match.
	MatchCN *Regexp `json:"matchCN,omitempty"`
}

// ClientVerify is auth-tls-verify-client.
type ClientVerify string

// The verification modes, with nginx's names.
const (
	VerifyOn           ClientVerify = "on"
	VerifyOptional     ClientVerify = "optional"
	VerifyOptionalNoCA ClientVerify = "optional_no_ca"
)

// ServerTLS refers to a certificate in Configuration.Certificates.
type ServerTLS struct {
	CertificateUID string `json:"certificateUID"`
}

// Certificate is a TLS certificate and key taken from a Secret.
type Certificate struct {
	UID    string    `json:"uid"`
	Secret ObjectRef `json:"secret"`
	// PEM is the certificate chain followed by the private key, as
	// ingress-nginx stores it.
	PEM string `json:"pem"`
	// Hosts are the DNS names the certificate is valid for.
	Hosts []string `json:"hosts,omitempty"`
	// NotAfter is the expiry in Unix seconds.
	NotAfter int64 `json:"notAfter,omitempty"`
}

// PathType is the Ingress pathType.
type PathType string

// The Ingress path types.
const (
	PathTypeExact                  PathType = "Exact"
	PathTypePrefix                 PathType = "Prefix"
	PathTypeImplementationSpecific PathType = "ImplementationSpecific"
)

// Location is one path of a server and how requests to it are handled.
type Location struct {
	// Path is the Ingress path as written (validated), "/" when empty.
	Path     string   `json:"path"`
	PathType PathType `json:"pathType"`
	// Regex is true when Path is a regular expression (use-regex, or a
	// rewrite-target on ImplementationSpecific, as ingress-nginx does).
	Regex bool `json:"regex,omitempty"`
	// PathRegexp is "(?i)" and Path, case-insensitive as nginx's
	// "location ~*": what the Go plane matches a Regex path with, and
	// takes rewrite-target's capture groups from. The builder sets it
	// (SetPathRegexp) when Regex is true or Rewrite.Target is set.
	PathRegexp *Regexp `json:"pathRegexp,omitempty"`

	// Ingress is the object this location came from; empty for the default.
	Ingress ObjectRef `json:"ingress"`
	// Service and ServicePort name the Kubernetes backend.
	Service     string `json:"service,omitempty"`
	ServicePort string `json:"servicePort,omitempty"`
	// Backend is the name of the Backend serving this location.
	Backend string `json:"backend"`
	// IsDefaultBackend is true when the location falls back to the default
	// backend.
	IsDefaultBackend bool `json:"isDefaultBackend,omitempty"`
	// LocationSettings are what the Ingress's annotations and the
	// ConfigMap say about requests to this location. The builder shares
	// one value among the locations of an Ingress (and among Ingresses
	// whose settings are equal): a 50k-Ingress build wrote 704 bytes per
	// location before, and on a fresh heap every page costs a fault. The
	// model is not written once built, so sharing is safe. nil (a Location
	// written by hand, or read from JSON without them) means the zero
	// LocationSettings; use Settings to read them without checking.
	*LocationSettings
}

// noSettings is what a Location without LocationSettings has.
var noSettings LocationSettings

// Settings returns l's settings, or the zero LocationSettings when it has
// none. The result is shared: never write through it.
func (l *Location) Settings() *LocationSettings {
	if l.LocationSettings == nil {
		return &noSettings
	}
	return l.LocationSettings
}

// Clone returns a copy of l with LocationSettings of its own, which the
// copy may write without changing l (slices and pointers inside the
// settings are still shared). A plain copy of a Location shares them.
func (l Location) Clone() Location {
	s := *l.Settings()
	l.LocationSettings = &s
	return l
}

// LocationSettings are a location's per-Ingress settings (see
// Location.LocationSettings). Their JSON fields are Location's: the struct
// is embedded, so the model's JSON is as it was before the split.
type LocationSettings struct {
	// CustomDefaultBackend is the backend named by the default-backend
	// annotation, used for custom-http-errors and no-endpoint cases.
	CustomDefaultBackend string `json:"customDefaultBackend,omitempty"`

	BackendProtocol BackendProtocol `json:"backendProtocol"`
	Rewrite         Rewrite         `json:"rewrite"`
	Redirect        Redirect        `json:"redirect"`
	Proxy           Proxy           `json:"proxy"`
	// NoAccessLog is enable-access-log: "false": requests to this location
	// are not written to the access log.
	NoAccessLog bool `json:"noAccessLog,omitempty"`
	// ResponseHeaders are the ConfigMap's add-headers with the Ingress's
	// custom-headers over them, sorted by name: set on answers whose
	// status is in ResponseHeaderStatuses, replacing any field of that
	// name the upstream sent (headers-more's more_set_headers, as
	// ingress-nginx writes them).
	ResponseHeaders []HeaderField `json:"responseHeaders,omitempty"`
	// ProxySetHeaders are the ConfigMap's proxy-set-headers, sorted by
	// name: fields sent upstream in place of any the client sent under
	// that name (an empty value removes it), as nginx's proxy_set_header.
	ProxySetHeaders []HeaderField `json:"proxySetHeaders,omitempty"`
	// UpstreamTLS is proxy-ssl-*, for backend-protocol HTTPS; nil: nginx's
	// defaults (no verification, no SNI, no client certificate).
	UpstreamTLS *UpstreamTLS `json:"upstreamTLS,omitempty"`
	// Denied, when set, makes every data plane answer 503 to every request
	// of this location without going upstream, before any other check
	// (ingress-nginx's denied locations): an access-control annotation or
	// ConfigMap key Switchyard cannot carry out, or one whose value is
	// invalid, fails closed.
	Denied *Denial `json:"denied,omitempty"`
	// DenySourceRanges are the clients refused with 403: the
	// denylist-source-range annotation (or the ConfigMap's default) and the
	// ConfigMap's block-cidrs. Checked before AllowSourceRanges.
	DenySourceRanges []netip.Prefix `json:"denySourceRanges,omitempty"`
	// AllowSourceRanges are the only clients let through, others get 403:
	// whitelist-source-range / allowlist-source-range (or the ConfigMap's
	// default). Empty allows everyone. A bare address is a full-length
	// prefix.
	AllowSourceRanges []netip.Prefix `json:"allowSourceRanges,omitempty"`
	// RateLimit, when set, limits the requests of each client address
	// (limit-rps, limit-rpm, limit-connections); nil without.
	RateLimit *RateLimit `json:"rateLimit,omitempty"`
	// ResponseRate, when set, limits how fast each response goes to the
	// client (limit-rate, limit-rate-after, or the ConfigMap's defaults);
	// nil without.
	ResponseRate *ResponseRate `json:"responseRate,omitempty"`
	// BasicAuth, when set, lets through only requests with a user and
	// password its credentials accept (auth-type: basic).
	BasicAuth *BasicAuth `json:"basicAuth,omitempty"`
	// DigestAuth, when set, lets through only requests answering a digest
	// challenge with a user and password of its credentials (auth-type:
	// digest). Never set together with BasicAuth or ExternalAuth.
	DigestAuth *DigestAuth `json:"digestAuth,omitempty"`
	// ExternalAuth, when set, asks an authentication service about every
	// request before it goes upstream (auth-url), after the source lists.
	ExternalAuth *ExternalAuth `json:"externalAuth,omitempty"`
	CORS         CORS          `json:"cors"`
	// CustomHTTPErrors are upstream status codes replaced by the default
	// backend's answer.
	CustomHTTPErrors []int `json:"customHTTPErrors,omitempty"`
	// UpstreamVhost replaces the Host header sent upstream.
	UpstreamVhost string `json:"upstreamVhost,omitempty"`
	// XForwardedPrefix sets X-Forwarded-Prefix upstream.
	XForwardedPrefix string `json:"xForwardedPrefix,omitempty"`
	// Mirror, when set, sends a copy of every request that goes upstream
	// to another server (mirror-target); nil without.
	Mirror *Mirror `json:"mirror,omitempty"`
}

// Mirror is mirror-target, mirror-request-body and mirror-host, as nginx's
// mirror module runs them in ingress-nginx's template: each request of the
// location that reaches its proxy_pass is copied, its answer discarded. The
// copy has the client's method and fields (less TE, Keep-Alive, Expect and
// Upgrade) with Host set to Host, and goes to Scheme://HostPort with the
// URI URI expands to. The builder has resolved everything nginx would work
// out: the data planes only expand URI.
type Mirror struct {
	// Source is ingress-nginx's internal location of the Ingress,
	// "/_mirror-<Ingress UID>" (letters, digits, '.', '_' and '-' after
	// the dash).
	Source string `json:"source"`
	// Scheme is "http" or "https" (the certificate is not verified, as
	// nginx's proxy_ssl_verify off).
	Scheme string `json:"scheme"`
	// HostPort is the target's host, lower case, and optional ":port":
	// DNS labels or an IPv4 address (ValidUpstreamVhost).
	HostPort string `json:"hostPort"`
	// URI is the request target sent: literal text (URL characters
	// only, no blank, quote, ';', '{', '}', '$' or backslash) and the
	// variables of MirrorVars. A target without variables has the
	// client's query appended ($is_args$args), as nginx's proxy_pass
	// does, and one without a path starts with Source.
	URI URLTemplate `json:"uri"`
	// Host is the Host field sent: mirror-host, else the target's host
	// without its port (ValidUpstreamVhost).
	Host string `json:"host"`
	// RequestBody is mirror-request-body (on by default): the client's
	// body goes with the copy.
	RequestBody bool `json:"requestBody"`
}

// MirrorVars are the variables a Mirror's URI may use, with nginx's
// meaning in the mirror's subrequest: VarRequestURI, VarArgs (the query
// as sent, without '?'), VarIsArgs ("?" when there is a query), VarHost
// and VarScheme.
var MirrorVars = []URLVar{VarRequestURI, VarArgs, VarIsArgs, VarHost, VarScheme}

// ValidMirrorSource reports whether s is "/_mirror-" and one or more
// letters, digits, '.', '_' or '-'.
func ValidMirrorSource(s string) bool {
	rest, ok := strings.CutPrefix(s, "/_mirror-")
	if !ok || rest == "" || len(rest) > 253 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// RateLimit is limit-rps, limit-rpm, limit-connections,
// limit-burst-multiplier and limit-allowlist (or limit-whitelist), as
// nginx's limit_req and limit_conn run them in ingress-nginx: per client
// address ($remote_addr, after the real IP settings), a leaky bucket
// draining Rate requests per second (or per minute) that lets a request
// through at once while no more than Burst requests are in excess
// (nodelay), and answers the others with Global.LimitReqStatus; and a
// count of the address's requests in progress, answering those over
// Connections with Global.LimitConnStatus. Each Ingress has its own zones,
// shared by all its paths; state is per controller replica.
type RateLimit struct {
	// Zone names the Ingress's zones: namespace_name_uid, as ingress-nginx
	// names them; letters, digits, '-', '.' and '_' only.
	Zone string `json:"zone"`
	// RPS and RPM are limit-rps and limit-rpm, each a limit of its own
	// (both apply when both are set); 0 means none.
	RPS int `json:"rps,omitempty"`
	RPM int `json:"rpm,omitempty"`
	// Connections is limit-connections: how many requests of one address
	// may be in progress at once (nginx's limit_conn, which counts
	// requests, each HTTP/2 stream one); 0 means no limit. A request
	// counts from its check until its response has been written, or its
	// upgraded connection closed.
	Connections int `json:"connections,omitempty"`
	// BurstMultiplier is limit-burst-multiplier (default 5): each limit's
	// burst is its rate times it.
	BurstMultiplier int `json:"burstMultiplier"`
	// Allowlist are the client addresses not limited (limit-allowlist).
	Allowlist []netip.Prefix `json:"allowlist,omitempty"`
}

// ResponseRate is limit-rate and limit-rate-after as ingress-nginx writes
// them (nginx's limit_rate and limit_rate_after, in KiB): each response
// goes to the client at no more than KBPerSecond KiB a second once its
// first AfterKB KiB have gone.
type ResponseRate struct {
	// KBPerSecond is limit-rate, at least 1.
	KBPerSecond int `json:"kbPerSecond"`
	// AfterKB is limit-rate-after; 0: from the first byte.
	AfterKB int `json:"afterKB,omitempty"`
}

// Limited reports whether the client at ip is subject to the limits.
func (r *RateLimit) Limited(ip netip.Addr) bool {
	return !anyContains(r.Allowlist, ip.Unmap())
}

// anyContains reports whether one of prefixes contains ip.
func anyContains(prefixes []netip.Prefix, ip netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Denial says why a location fails closed.
type Denial struct {
	// Field is the annotation or ConfigMap key at fault, prefix included.
	Field string `json:"field"`
	// Reason says why, for a human.
	Reason string `json:"reason"`
}

// SourceAllowed reports whether a client address passes the location's deny
// and allow lists, as nginx's deny lines followed by allow lines and a final
// "deny all" when there is an allow list.
func (l *Location) SourceAllowed(ip netip.Addr) bool {
	ip = ip.Unmap()
	s := l.Settings()
	if anyContains(s.DenySourceRanges, ip) {
		return false
	}
	return len(s.AllowSourceRanges) == 0 || anyContains(s.AllowSourceRanges, ip)
}

// BasicAuth is auth-type: basic with auth-secret, auth-secret-type and
// auth-realm, as nginx's auth_basic runs it: a request without a user and
// password the credentials accept gets 401 with
// `WWW-Authenticate: Basic realm="<Realm>"`.
type BasicAuth struct {
	// Realm is auth-realm: letters, digits, blanks and - . _ ~ / : only.
	Realm string `json:"realm"`
	// Secret is the auth-secret Secret the credentials came from.
	Secret ObjectRef `json:"secret"`
	// Credentials are its users and password hashes, validated (in JSON:
	// their number and digest only).
	Credentials *basicauth.Credentials `json:"credentials"`
}

// DigestAuth is auth-type: digest with auth-secret, auth-secret-type and
// auth-realm, as ingress-nginx's nginx-http-auth-digest module runs it
// (digestauth.Verifier, on both planes).
type DigestAuth struct {
	// Realm is auth-realm, never empty: letters, digits, blanks and
	// - . _ ~ / : only.
	Realm string `json:"realm"`
	// Secret is the auth-secret Secret the credentials came from.
	Secret ObjectRef `json:"secret"`
	// Credentials are its htdigest lines, validated (in JSON: their number
	// and digest only).
	Credentials *digestauth.Credentials `json:"credentials"`
}

// ExternalAuth is auth-url and its kin, as nginx's auth_request runs them in
// ingress-nginx's template: a subrequest without the body, with the client's
// fields and X-Original-URL, X-Original-Method, X-Auth-Request-Redirect,
// X-Sent-From, X-Real-IP, X-Forwarded-For and X-Request-ID; 2xx lets the
// request through with ResponseHeaders copied upstream, 401 answers 401 (or
// redirects to SigninURL), 403 answers 403, anything else 500.
type ExternalAuth struct {
	// URL is auth-url: an http(s) URL whose text may hold the variables of
	// URLTemplate.
	URL URLTemplate `json:"url"`
	// Host is the Host field sent to the service: the URL's host without
	// its port (ingress-nginx sends the host name only).
	Host URLTemplate `json:"host"`
	// Method is auth-method; empty sends the client's method, as nginx's
	// subrequest does. When set, X-Original-URI and X-Scheme are sent too.
	Method string `json:"method,omitempty"`
	// SigninURL is auth-signin with the redirect parameter appended as
	// ingress-nginx appends it (auth-signin-redirect-param, "rd" by
	// default); empty answers a 401 of the service with 401.
	SigninURL URLTemplate `json:"signinURL,omitempty"`
	// ResponseHeaders are auth-response-headers: each is taken from the
	// service's answer and set on the upstream request, replacing what the
	// client sent (removed when the service sent none).
	ResponseHeaders []string `json:"responseHeaders,omitempty"`
	// RequestRedirect is auth-request-redirect, sent as
	// X-Auth-Request-Redirect; empty sends the request URI.
	RequestRedirect string `json:"requestRedirect,omitempty"`
	// ProxySetHeaders are auth-proxy-set-headers: the data of the
	// ConfigMap it names, sent to the service on every subrequest, replacing
	// the client's fields of those names; an empty value sends none (nginx's
	// proxy_set_header). Sorted by name; names are letters, digits, '-' and
	// '_', none the subrequest sets itself; values printable ASCII without
	// '$' or blanks at either end (validated).
	ProxySetHeaders []HeaderField `json:"proxySetHeaders,omitempty"`
	// AlwaysSetCookie is auth-always-set-cookie: the service's Set-Cookie
	// reaches the client whatever the status, not only on 2xx and 3xx.
	AlwaysSetCookie bool `json:"alwaysSetCookie,omitempty"`
	// CacheKey is auth-cache-key: answers of the service are kept per
	// value of this key (and server and location), as nginx's proxy_cache
	// keeps them; empty: no cache.
	CacheKey []CacheKeyPart `json:"cacheKey,omitempty"`
	// CacheValid is auth-cache-duration (default "200 202 401 5m"): how
	// long an answer of each status is kept, as proxy_cache_valid lines.
	CacheValid []CacheValid `json:"cacheValid,omitempty"`
}

// AuthSubrequestField reports whether the auth subrequest sets the field
// name itself (or it is hop-by-hop), so auth-proxy-set-headers may not: nginx
// would send two and the planes would not agree.
func AuthSubrequestField(name string) bool {
	switch strings.ToLower(name) {
	case "host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
		"proxy-connection", "x-original-url", "x-original-method", "x-original-uri", "x-scheme", "x-sent-from",
		"x-real-ip", "x-forwarded-for", "x-forwarded-proto", "x-auth-request-redirect", "x-request-id",
		"ssl-client-cert", "ssl-client-verify", "ssl-client-subject-dn", "ssl-client-issuer-dn":
		return true
	}
	return false
}

// HeaderField is one request field's name and value.
type HeaderField struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// CacheKeyPart is literal text, or one request variable when Var is set:
// "http_<field>" or "cookie_<name>" (lower case, '_' for '-'),
// "remote_addr", "host" or "request_uri".
type CacheKeyPart struct {
	Literal string `json:"literal,omitempty"`
	Var     string `json:"var,omitempty"`
}

// CacheValid is one proxy_cache_valid line: answers with one of Codes (any
// status when Any; 200, 301 and 302 when neither is set, as nginx) are kept
// for Seconds.
type CacheValid struct {
	Codes   []int `json:"codes,omitempty"`
	Any     bool  `json:"any,omitempty"`
	Seconds int   `json:"seconds"`
}

// URLTemplate is a URL as text and nginx variables, validated: Literal parts
// hold only URL characters (no blank, quote, ';', '{', '}', '$' or backslash).
type URLTemplate []URLPart

// URLPart is literal text, or one variable when Var is set.
type URLPart struct {
	Literal string `json:"literal,omitempty"`
	Var     URLVar `json:"var,omitempty"`
}

// URLVar is an nginx variable a URLTemplate may use.
type URLVar string

// The variables of a URLTemplate, with nginx's meaning.
const (
	VarHost              URLVar = "host"                // the request's host, lower case, no port
	VarHTTPHost          URLVar = "http_host"           // the Host field as sent
	VarBestHTTPHost      URLVar = "best_http_host"      // ingress-nginx's: the Host field, else the server name
	VarScheme            URLVar = "scheme"              // http or https
	VarPassAccessScheme  URLVar = "pass_access_scheme"  // ingress-nginx's: the scheme (X-Forwarded-Proto with use-forwarded-headers)
	VarRequestURI        URLVar = "request_uri"         // the request target as sent
	VarEscapedRequestURI URLVar = "escaped_request_uri" // request_uri escaped as a URI component
	VarArgs              URLVar = "args"                // the query as sent, without '?' (Mirror only)
	VarIsArgs            URLVar = "is_args"             // "?" when the request has a query, else empty (Mirror only)
)

// URLVars lists the variables a URLTemplate may use.
var URLVars = []URLVar{VarHost, VarHTTPHost, VarBestHTTPHost, VarScheme, VarPassAccessScheme, VarRequestURI, VarEscapedRequestURI}

// BackendProtocol is the backend-protocol annotation.
type BackendProtocol string

// The backend protocols.
const (
	ProtocolHTTP  BackendProtocol = "HTTP"
	ProtocolHTTPS BackendProtocol = "HTTPS"
	ProtocolGRPC  BackendProtocol = "GRPC"
	ProtocolGRPCS BackendProtocol = "GRPCS"
	ProtocolH2C   BackendProtocol = "H2C"
)

// Rewrite holds rewrite-target, ssl-redirect and app-root.
type Rewrite struct {
	// Target is rewrite-target; may reference regex captures ($1).
	Target string `json:"target,omitempty"`
	// SSLRedirect is ssl-redirect (true by default when the server has TLS).
	SSLRedirect bool `json:"sslRedirect"`
	// ForceSSLRedirect is force-ssl-redirect.
	ForceSSLRedirect bool `json:"forceSSLRedirect,omitempty"`
	// AppRoot is app-root: "/" redirects there.
	AppRoot string `json:"appRoot,omitempty"`
	// UseRegex is use-regex.
	UseRegex bool `json:"useRegex,omitempty"`
	// PreserveTrailingSlash is preserve-trailing-slash.
	PreserveTrailingSlash bool `json:"preserveTrailingSlash,omitempty"`
}

// Redirect holds permanent-redirect / temporal-redirect.
type Redirect struct {
	URL string `json:"url,omitempty"`
	// Code is the status: 301 (or permanent-redirect-code) or 302.
	Code int `json:"code,omitempty"`
}

// Proxy holds the proxy-* annotations. Durations are seconds, as nginx
// writes them; sizes are bytes (0 = unlimited for BodySize).
type Proxy struct {
	ConnectTimeoutSeconds int   `json:"connectTimeout"`
	SendTimeoutSeconds    int   `json:"sendTimeout"`
	ReadTimeoutSeconds    int   `json:"readTimeout"`
	BodySizeBytes         int64 `json:"bodySize"`
	// NextUpstream is proxy-next-upstream, e.g. ["error", "timeout"].
	NextUpstream []string `json:"nextUpstream,omitempty"`
	// NextUpstreamTries is proxy-next-upstream-tries (3 by default).
	NextUpstreamTries int `json:"nextUpstreamTries"`
	// NextUpstreamTimeoutSeconds is proxy-next-upstream-timeout; 0 = none.
	NextUpstreamTimeoutSeconds int `json:"nextUpstreamTimeout"`
	// Buffering is proxy-buffering ("on"/"off" in nginx).
	Buffering bool `json:"buffering,omitempty"`
	// BufferSizeBytes is proxy-buffer-size, the most an upstream's
	// response head may take (nginx: "upstream sent too big header", 502);
	// 0 means 4096, ingress-nginx's 4k.
	BufferSizeBytes int `json:"bufferSize,omitempty"`
	// BuffersNumber is proxy-buffers-number, nginx's proxy_buffers count;
	// 0 means 4.
	BuffersNumber int `json:"buffersNumber,omitempty"`
	// HTTP10 is proxy-http-version "1.0": requests go upstream as
	// HTTP/1.0 (nginx's proxy_http_version 1.0); the connection is kept
	// only when the upstream answers HTTP/1.1 without Connection: close.
	// False: HTTP/1.1, ingress-nginx's default.
	HTTP10 bool `json:"http10,omitempty"`
	// NoRequestBuffering is proxy-request-buffering: "off": nginx sends a
	// request body upstream as it arrives instead of reading it whole
	// first. The Go plane reads a body of up to 64 KiB whole and streams a
	// larger one either way.
	NoRequestBuffering bool `json:"noRequestBuffering,omitempty"`
	// ClientBodyBufferBytes is client-body-buffer-size, nginx's memory
	// buffer for a request body before it spills to a file; 0 means 8192.
	// No effect on the Go plane, which never writes bodies to disk.
	ClientBodyBufferBytes int `json:"clientBodyBufferSize,omitempty"`
}

// CORS holds enable-cors and the cors-* annotations.
type CORS struct {
	Enabled          bool     `json:"enabled,omitempty"`
	AllowOrigin      []string `json:"allowOrigin,omitempty"`
	AllowMethods     string   `json:"allowMethods,omitempty"`
	AllowHeaders     string   `json:"allowHeaders,omitempty"`
	ExposeHeaders    string   `json:"exposeHeaders,omitempty"`
	AllowCredentials bool     `json:"allowCredentials,omitempty"`
	MaxAgeSeconds    int      `json:"maxAge,omitempty"`
}

// L4Service is one entry of the tcp-services / udp-services ConfigMap.
type L4Service struct {
	// Port is the port the data plane listens on.
	Port int `json:"port"`
	// Backend is the name of its Backend (tcp-<ns>-<svc>-<port>).
	Backend string `json:"backend"`
	// Service is ns/name and ServicePort its port as written.
	Service     ObjectRef `json:"service"`
	ServicePort string    `json:"servicePort"`
	// DecodeProxyProtocol expects PROXY protocol from clients;
	// EncodeProxyProtocol sends it upstream.
	DecodeProxyProtocol bool `json:"decodeProxyProtocol,omitempty"`
	EncodeProxyProtocol bool `json:"encodeProxyProtocol,omitempty"`
}

// PassthroughBackend routes TLS connections for Hostname, unterminated, to
// Backend.
type PassthroughBackend struct {
	Hostname string `json:"hostname"`
	Backend  string `json:"backend"`
}

// RealIP is ingress-nginx's real_ip settings, as nginx's realip module runs
// them with real_ip_recursive on: while the address at hand (first the
// connection's) lies in a trusted range, the next address of Header, read
// right to left, replaces it.
type RealIP struct {
	// Header is forwarded-for-header (X-Forwarded-For by default): letters,
	// digits and '-' only. Exactly "X-Forwarded-For" reads every field of
	// that name, the last first; any other name reads the first field of
	// that name only (nginx's realip module).
	Header string `json:"header"`
	// From is proxy-real-ip-cidr (0.0.0.0/0 by default): the trusted
	// proxies, masked. IPv4 ranges match IPv4-mapped IPv6 addresses too.
	From []netip.Prefix `json:"from"`
	// ProxyProtocol is use-proxy-protocol: the HTTP and HTTPS listeners
	// take only connections that open with a PROXY header (v1 or v2), and
	// the header's source is the client's address when the connection
	// comes from a trusted range (nginx's real_ip_header proxy_protocol);
	// the header's destination port is the port the client connected to
	// (X-Forwarded-Port). Header is then read only with
	// use-forwarded-headers (HeaderRead), from a PROXY source that is
	// trusted too, as ingress-nginx's forwarded-for-proxy-protocol-header.
	ProxyProtocol bool `json:"proxyProtocol,omitempty"`
}

// HeaderRead reports whether Header is read: always without the PROXY
// protocol, with it only under use-forwarded-headers (ingress-nginx writes
// real_ip_header proxy_protocol otherwise, enable-real-ip or not).
func (r *RealIP) HeaderRead(useForwardedHeaders bool) bool {
	return !r.ProxyProtocol || useForwardedHeaders
}

// Trusted reports whether addr lies in one of the trusted ranges, as
// nginx's ngx_cidr_match: an IPv4-mapped IPv6 address is read as IPv4.
func (r *RealIP) Trusted(addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, p := range r.From {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// Global holds the settings of the controller ConfigMap, parsed and
// validated by the builder. Keys and defaults follow ingress-nginx's
// ConfigMap; data planes read the typed values and parse nothing.
type Global struct {
	// LoadBalance is load-balance; empty means round_robin.
	LoadBalance Algorithm `json:"loadBalance,omitempty"`
	// UseForwardedHeaders is use-forwarded-headers.
	UseForwardedHeaders bool `json:"useForwardedHeaders,omitempty"`
	// ComputeFullForwardedFor is compute-full-forwarded-for.
	ComputeFullForwardedFor bool `json:"computeFullForwardedFor,omitempty"`
	// RealIP, when set, is where the client's address is read from behind
	// trusted proxies (use-forwarded-headers or enable-real-ip): every data
	// plane takes it as the client's address ($remote_addr) for the allow
	// and deny lists, X-Real-IP, X-Forwarded-For and the access log. Nil:
	// the connection's address is the client's.
	RealIP *RealIP `json:"realIP,omitempty"`
	// SSLRedirect is ssl-redirect (default true).
	SSLRedirect bool `json:"sslRedirect"`
	// HTTPRedirectCode is http-redirect-code (default 308).
	HTTPRedirectCode int `json:"httpRedirectCode"`
	// HSTS, HSTSMaxAgeSeconds, HSTSIncludeSubdomains, HSTSPreload are
	// hsts, hsts-max-age, hsts-include-subdomains and hsts-preload. The
	// builder sets ingress-nginx's defaults (true, 31536000, true, false);
	// a zero HSTSMaxAgeSeconds is max-age=0, which a user may ask for.
	HSTS                  bool   `json:"hsts"`
	HSTSMaxAgeSeconds     uint32 `json:"hstsMaxAgeSeconds"`
	HSTSIncludeSubdomains bool   `json:"hstsIncludeSubdomains"`
	HSTSPreload           bool   `json:"hstsPreload,omitempty"`
	// Proxy holds the ConfigMap defaults of the per-location proxy settings.
	Proxy Proxy `json:"proxy"`
	// LimitReqStatus is limit-req-status-code, the answer to a request a
	// rate limit refuses (400-599); 0 means 503.
	LimitReqStatus int `json:"limitReqStatus,omitempty"`
	// LimitConnStatus is limit-conn-status-code, the answer to a request
	// limit-connections refuses (400-599); 0 means 503.
	LimitConnStatus int `json:"limitConnStatus,omitempty"`

	// Client connections and request heads (docs/migrating-from-ingress-
	// nginx.md, "Client connections" and "Request heads"). Each zero value is ingress-nginx's
	// default.
	//
	// KeepAliveSeconds is keep-alive; 0 means 75. DisableKeepAlive is
	// keep-alive: "0" or keep-alive-requests: "0" (every connection closes
	// after one request).
	KeepAliveSeconds int  `json:"keepAliveSeconds,omitempty"`
	DisableKeepAlive bool `json:"disableKeepAlive,omitempty"`
	// KeepAliveRequests is keep-alive-requests: a client connection closes
	// after this many requests; 0 means 1000.
	KeepAliveRequests int `json:"keepAliveRequests,omitempty"`
	// MaxWorkerConnections is max-worker-connections, nginx's
	// worker_connections per worker; 0 means 16384. The Go data plane caps
	// its open client connections at MaxWorkerConnections × WorkerProcesses.
	MaxWorkerConnections int `json:"maxWorkerConnections,omitempty"`
	// WorkerProcesses is worker-processes; 0 means auto (one per CPU).
	WorkerProcesses int `json:"workerProcesses,omitempty"`
	// ClientHeaderTimeoutSeconds is client-header-timeout; 0 means 60.
	ClientHeaderTimeoutSeconds int `json:"clientHeaderTimeoutSeconds,omitempty"`
	// ProxyProtocolHeaderTimeout is proxy-protocol-header-timeout: how
	// long the SSL passthrough router waits for a client's PROXY header
	// under use-proxy-protocol; 0 means 5s.
	ProxyProtocolHeaderTimeout time.Duration `json:"proxyProtocolHeaderTimeout,omitempty"`
	// ClientHeaderBufferSize is client-header-buffer-size in bytes; 0
	// means 1024.
	ClientHeaderBufferSize int `json:"clientHeaderBufferSize,omitempty"`
	// LargeClientHeaderBuffers and LargeClientHeaderBufferSize are
	// large-client-header-buffers, number and size in bytes; 0 means 4
	// and 8192.
	LargeClientHeaderBuffers    int `json:"largeClientHeaderBuffers,omitempty"`
	LargeClientHeaderBufferSize int `json:"largeClientHeaderBufferSize,omitempty"`
	// SkipAccessLogURLs is skip-access-log-urls: requests whose URI (path
	// and query, as sent) is one of these are not logged.
	SkipAccessLogURLs []string `json:"skipAccessLogURLs,omitempty"`
	// AccessLogFormat is log-format-upstream with log-format-escape-json
	// and log-format-escape-none, parsed once: both data planes write
	// their access log lines with it.
	AccessLogFormat LogFormat `json:"accessLogFormat,omitzero"`
	// Nginx holds the keys only the nginx data plane carries out.
	Nginx NginxSettings `json:"nginx,omitzero"`
}

// HSTSHeader is the Strict-Transport-Security value both data planes send
// on HTTPS responses when HSTS is on, as ingress-nginx writes it.
func (g *Global) HSTSHeader() string {
	v := "max-age=" + strconv.FormatUint(uint64(g.HSTSMaxAgeSeconds), 10)
	if g.HSTSIncludeSubdomains {
		v += "; includeSubDomains"
	}
	if g.HSTSPreload {
		v += "; preload"
	}
	return v
}

// NginxSettings are the ConfigMap keys only the nginx data plane carries out
// (the migration guide's ConfigMap table marks them so). The builder parses
// and validates each; each zero value is ingress-nginx's default.
type NginxSettings struct {
	// WorkerShutdownTimeout is worker-shutdown-timeout; 0 means 240s.
	WorkerShutdownTimeout time.Duration `json:"workerShutdownTimeout,omitempty"`
	// ServerTokens is server-tokens: nginx names its version in the Server
	// header and error pages.
	ServerTokens bool `json:"serverTokens,omitempty"`
	// AccessLogDefaultBackend is enable-access-log-for-default-backend:
	// requests the default backend answers are logged only with it.
	AccessLogDefaultBackend bool `json:"accessLogDefaultBackend,omitempty"`
	// SSLProtocols is ssl-protocols, each of TLSv1, TLSv1.1, TLSv1.2 and
	// TLSv1.3 at most once; empty means TLSv1.2 and TLSv1.3.
	SSLProtocols []string `json:"sslProtocols,omitempty"`
	// SSLCiphers is ssl-ciphers, an OpenSSL cipher list (ValidCipherList);
	// empty means ingress-nginx's default list.
	SSLCiphers string `json:"sslCiphers,omitempty"`
	// UpstreamKeepalive is upstream-keepalive-*.
	UpstreamKeepalive UpstreamKeepalive `json:"upstreamKeepalive,omitzero"`
}

// UpstreamKeepalive is how nginx keeps idle connections to upstreams.
type UpstreamKeepalive struct {
	// Connections is upstream-keepalive-connections, the idle connections
	// each worker keeps per upstream; nil means 320 and 0 keeps none.
	Connections *int `json:"connections,omitempty"`
	// Time is upstream-keepalive-time, the longest a connection is reused;
	// 0 means 1h.
	Time time.Duration `json:"time,omitempty"`
	// Timeout is upstream-keepalive-timeout, how long an idle connection
	// is kept; nil means 60s.
	Timeout *time.Duration `json:"timeout,omitempty"`
	// Requests is upstream-keepalive-requests, the requests one connection
	// carries; 0 means 10000.
	Requests int `json:"requests,omitempty"`
}

// ValidCipherList reports whether s is made only of the characters of an
// OpenSSL cipher list (names, ':', '+', '!', '@', '.', '_', '-'), so it can
// be written into nginx.conf as one word.
func ValidCipherList(s string) bool {
	if s == "" || len(s) > 4096 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte(":+!@._-", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// ValidUpstreamVhost reports whether s is what upstream-vhost may hold: a
// DNS name of lowercase labels, with an optional port from 1 to 65535.
func ValidUpstreamVhost(s string) bool {
	host := s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		p, err := strconv.ParseUint(s[i+1:], 10, 16)
		if err != nil || p == 0 {
			return false
		}
		host = s[:i]
	}
	if host == "" || len(host) > 253 {
		return false
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// ResponseHeaderStatus reports whether an answer of this status gets a
// location's ResponseHeaders: 200, 201, 204, 206, 301, 302, 303, 304, 307
// and 308, the statuses nginx's add_header and headers-more's
// more_set_headers act on by default.
func ResponseHeaderStatus(code int) bool {
	switch code {
	case 200, 201, 204, 206, 301, 302, 303, 304, 307, 308:
		return true
	}
	return false
}

// WWWRedirectLocation is the Location of a from-to-www-redirect answer, as
// ingress-nginx's redirect server builds it: scheme://to:port and the
// request URI less one trailing slash ("/" becomes "").
func WWWRedirectLocation(scheme, to, port string, requestURI []byte) string {
	uri := requestURI
	if n := len(uri); n > 0 && uri[n-1] == '/' {
		uri = uri[:n-1]
	}
	return scheme + "://" + to + ":" + port + string(uri)
}
