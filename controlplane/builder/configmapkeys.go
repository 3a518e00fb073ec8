package builder

import (
	"sort"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// KeyStatus says which data planes honour one controller ConfigMap key.
type KeyStatus uint8

// The statuses. Every ConfigMap key ingress-nginx v1.15.1 reads has one.
const (
	// BothPlanes: honoured by the nginx and the Go data plane.
	BothPlanes KeyStatus = iota + 1
	// NginxPlaneOnly: the nginx data plane's template honours it
	// (nginxcompat.ConfigMapKeys); the Go data plane does not.
	NginxPlaneOnly
	// GoPlaneOnly: the Go data plane honours it; the nginx data plane's
	// template does not.
	GoPlaneOnly
	// KeyUnsupported: neither data plane honours it.
	KeyUnsupported
	// KeyRefused: raw nginx configuration (snippets), never honoured.
	KeyRefused
)

func (s KeyStatus) String() string {
	switch s {
	case BothPlanes:
		return "both planes"
	case NginxPlaneOnly:
		return "nginx plane only"
	case GoPlaneOnly:
		return "Go plane only"
	case KeyUnsupported:
		return "not supported"
	case KeyRefused:
		return "refused (snippets)"
	}
	return "unknown"
}

// ConfigMapKey is one row of the ConfigMap key catalogue.
type ConfigMapKey struct {
	Name   string
	Status KeyStatus
	// Access is true when the key grants or restricts access. Set while
	// not supported or refused, it makes every Ingress path answer 503
	// (fail closed, globalAccess), which reports it.
	Access bool
	// Note says what differs from ingress-nginx.
	Note string
}

// ConfigMapKeys is every controller ConfigMap key ingress-nginx v1.15.1
// reads, classified, in alphabetical order. The migration guide's ConfigMap
// key table is generated from it (TestConfigMapKeyTableInDocs), and a key set
// in the ConfigMap that is not honoured on both planes gets an error
// (configMapKeyErrors).
var ConfigMapKeys = []ConfigMapKey{
	{Name: "access-log-params", Status: KeyUnsupported},
	{Name: "access-log-path", Status: KeyUnsupported},
	{Name: "add-headers", Status: BothPlanes, Note: "namespace/name of a ConfigMap whose fields go on every answer of status 200, 201, 204, 206, 301-304, 307, 308; values are literal text (no nginx variables)"},
	{Name: "allow-backend-server-header", Status: KeyUnsupported},
	{Name: "allow-cross-namespace-resources", Status: KeyUnsupported},
	{Name: "allow-snippet-annotations", Status: KeyUnsupported, Note: "snippet annotations are always refused"},
	{Name: "annotation-value-word-blocklist", Status: KeyUnsupported},
	{Name: "annotations-risk-level", Status: KeyUnsupported, Note: "snippet annotations are always refused; other annotations are read as the catalogue says"},
	{Name: "app-root", Status: KeyUnsupported, Note: "the annotation is supported; this ConfigMap default is not"},
	{Name: "bind-address", Status: KeyUnsupported},
	{Name: "bind-address-ipv4", Status: KeyUnsupported},
	{Name: "bind-address-ipv6", Status: KeyUnsupported},
	{Name: "block-cidrs", Status: BothPlanes, Access: true, Note: "denied on every location, those with their own allow or deny lists included (docs/compatibility.md); an invalid list fails closed (503)"},
	{Name: "block-referers", Status: KeyUnsupported, Access: true, Note: "every Ingress path answers 503 while it is set (fail closed)"},
	{Name: "block-user-agents", Status: KeyUnsupported, Access: true, Note: "every Ingress path answers 503 while it is set (fail closed)"},
	{Name: "brotli-level", Status: KeyUnsupported},
	{Name: "brotli-min-length", Status: KeyUnsupported},
	{Name: "brotli-types", Status: KeyUnsupported},
	{Name: "client-body-buffer-size", Status: BothPlanes, Note: "the Go data plane keeps the larger of this and 64 KiB in memory, the rest of a body read whole in a temporary file"},
	{Name: "client-body-timeout", Status: KeyUnsupported},
	{Name: "client-header-buffer-size", Status: BothPlanes},
	{Name: "client-header-timeout", Status: GoPlaneOnly, Note: "the Go data plane's read timeout (60 s) bounds it"},
	{Name: "compute-full-forwarded-for", Status: BothPlanes},
	{Name: "custom-http-errors", Status: KeyUnsupported, Note: "the annotation is supported; this ConfigMap default is not"},
	{Name: "debug-connections", Status: KeyUnsupported},
	{Name: "default-type", Status: KeyUnsupported},
	{Name: "denylist-source-range", Status: BothPlanes, Access: true, Note: "as `whitelist-source-range`"},
	{Name: "disable-access-log", Status: KeyUnsupported},
	{Name: "disable-http-access-log", Status: KeyUnsupported},
	{Name: "disable-ipv6", Status: KeyUnsupported},
	{Name: "disable-ipv6-dns", Status: KeyUnsupported},
	{Name: "disable-proxy-intercept-errors", Status: KeyUnsupported},
	{Name: "disable-stream-access-log", Status: KeyUnsupported},
	{Name: "enable-access-log-for-default-backend", Status: NginxPlaneOnly},
	{Name: "enable-aio-write", Status: KeyUnsupported},
	{Name: "enable-auth-access-log", Status: KeyUnsupported},
	{Name: "enable-brotli", Status: KeyUnsupported},
	{Name: "enable-modsecurity", Status: KeyUnsupported},
	{Name: "enable-multi-accept", Status: KeyUnsupported},
	{Name: "enable-ocsp", Status: KeyUnsupported},
	{Name: "enable-opentelemetry", Status: KeyUnsupported},
	{Name: "enable-owasp-modsecurity-crs", Status: KeyUnsupported},
	{Name: "enable-real-ip", Status: BothPlanes, Note: "an invalid value fails closed (503)"},
	{Name: "enable-serial-reloads", Status: KeyUnsupported},
	{Name: "enable-syslog", Status: KeyUnsupported},
	{Name: "enable-underscores-in-headers", Status: KeyUnsupported},
	{Name: "error-log-level", Status: KeyUnsupported},
	{Name: "error-log-path", Status: KeyUnsupported},
	{Name: "force-ssl-redirect", Status: KeyUnsupported, Note: "the annotation is supported; this ConfigMap default is not"},
	{Name: "forwarded-for-header", Status: BothPlanes},
	{Name: "forwarded-for-proxy-protocol-header", Status: KeyUnsupported},
	{Name: "forwarded-host-header", Status: KeyUnsupported},
	{Name: "generate-request-id", Status: KeyUnsupported},
	{Name: "geoip2-autoreload-in-minutes", Status: KeyUnsupported},
	{Name: "global-allowed-response-headers", Status: BothPlanes},
	{Name: "global-auth-always-set-cookie", Status: BothPlanes, Access: true},
	{Name: "global-auth-cache-duration", Status: BothPlanes},
	{Name: "global-auth-cache-key", Status: BothPlanes, Note: "the variables of the `auth-cache-key` annotation"},
	{Name: "global-auth-method", Status: BothPlanes, Access: true},
	{Name: "global-auth-request-redirect", Status: BothPlanes, Access: true},
	{Name: "global-auth-response-headers", Status: BothPlanes, Access: true},
	{Name: "global-auth-signin", Status: BothPlanes, Access: true},
	{Name: "global-auth-signin-redirect-param", Status: BothPlanes, Access: true},
	{Name: "global-auth-snippet", Status: KeyRefused, Access: true, Note: "every Ingress path answers 503 while it is set (fail closed)"},
	{Name: "global-auth-url", Status: BothPlanes, Access: true, Note: "every location without its own `auth-url`, except Ingresses with `enable-global-auth: \"false\"` and paths under `no-auth-locations`; an invalid value fails closed (503)"},
	{Name: "grpc-buffer-size-kb", Status: KeyUnsupported},
	{Name: "gzip-disable", Status: KeyUnsupported},
	{Name: "gzip-level", Status: KeyUnsupported},
	{Name: "gzip-min-length", Status: KeyUnsupported},
	{Name: "gzip-types", Status: KeyUnsupported},
	{Name: "hide-headers", Status: KeyUnsupported},
	{Name: "hsts", Status: BothPlanes},
	{Name: "hsts-include-subdomains", Status: BothPlanes},
	{Name: "hsts-max-age", Status: BothPlanes},
	{Name: "hsts-preload", Status: BothPlanes},
	{Name: "http-access-log-path", Status: KeyUnsupported},
	{Name: "http-redirect-code", Status: BothPlanes},
	{Name: "http-snippet", Status: KeyRefused, Note: "raw nginx configuration"},
	{Name: "http2-max-concurrent-streams", Status: KeyUnsupported},
	{Name: "http2-max-field-size", Status: KeyUnsupported},
	{Name: "http2-max-header-size", Status: KeyUnsupported},
	{Name: "http2-max-requests", Status: KeyUnsupported},
	{Name: "ignore-invalid-headers", Status: KeyUnsupported},
	{Name: "keep-alive", Status: BothPlanes},
	{Name: "keep-alive-requests", Status: BothPlanes},
	{Name: "large-client-header-buffers", Status: BothPlanes, Note: "a size under 512 bytes, which nginx refuses, keeps nginx's 4 8k on the nginx plane (an Event); the Go plane reads at most 33 KiB of head (docs/compatibility.md)"},
	{Name: "limit-conn-status-code", Status: BothPlanes, Note: "400-599; an invalid value is reported and 503 kept"},
	{Name: "limit-conn-zone-variable", Status: KeyUnsupported},
	{Name: "limit-rate", Status: BothPlanes, Note: "the default of the `limit-rate` annotation (KiB a second) for every Ingress path; the catch-all server is not limited, as in ingress-nginx"},
	{Name: "limit-rate-after", Status: BothPlanes, Note: "the default of the `limit-rate-after` annotation (KiB)"},
	{Name: "limit-req-status-code", Status: BothPlanes},
	{Name: "load-balance", Status: BothPlanes, Note: "the annotation's algorithms; an unknown value is reported and round_robin kept"},
	{Name: "location-snippet", Status: KeyRefused, Note: "raw nginx configuration"},
	{Name: "log-format-escape-json", Status: BothPlanes, Note: "variable values escaped as JSON strings (nginx's `escape=json`); the format's own text is not escaped; `log-format-escape-none` wins when both are true"},
	{Name: "log-format-escape-none", Status: BothPlanes, Note: "variable values written as they are (nginx's `escape=none`)"},
	{Name: "log-format-stream", Status: KeyUnsupported},
	{Name: "log-format-upstream", Status: BothPlanes, Note: "parsed once for both planes; its variables come from a closed set (section Access log), and an unknown one is an error naming it, the default format kept"},
	{Name: "lua-shared-dicts", Status: KeyUnsupported},
	{Name: "main-snippet", Status: KeyRefused, Note: "raw nginx configuration"},
	{Name: "map-hash-bucket-size", Status: KeyUnsupported},
	{Name: "max-worker-connections", Status: BothPlanes, Note: "as `worker-processes`"},
	{Name: "max-worker-open-files", Status: KeyUnsupported},
	{Name: "modsecurity-snippet", Status: KeyRefused, Access: true, Note: "every Ingress path answers 503 while it is set (fail closed)"},
	{Name: "nginx-status-ipv4-whitelist", Status: KeyUnsupported},
	{Name: "nginx-status-ipv6-whitelist", Status: KeyUnsupported},
	{Name: "no-auth-locations", Status: BothPlanes, Note: "default `/.well-known/acme-challenge`"},
	{Name: "no-tls-redirect-locations", Status: KeyUnsupported},
	{Name: "opentelemetry-config", Status: KeyUnsupported},
	{Name: "opentelemetry-operation-name", Status: KeyUnsupported},
	{Name: "opentelemetry-trust-incoming-span", Status: KeyUnsupported},
	{Name: "otel-max-export-batch-size", Status: KeyUnsupported},
	{Name: "otel-max-queuesize", Status: KeyUnsupported},
	{Name: "otel-sampler", Status: KeyUnsupported},
	{Name: "otel-sampler-parent-based", Status: KeyUnsupported},
	{Name: "otel-sampler-ratio", Status: KeyUnsupported},
	{Name: "otel-schedule-delay-millis", Status: KeyUnsupported},
	{Name: "otel-service-name", Status: KeyUnsupported},
	{Name: "otlp-collector-host", Status: KeyUnsupported},
	{Name: "otlp-collector-port", Status: KeyUnsupported},
	{Name: "preserve-trailing-slash", Status: KeyUnsupported, Note: "the annotation is supported; this ConfigMap default is not"},
	{Name: "proxy-add-original-uri-header", Status: KeyUnsupported},
	{Name: "proxy-body-size", Status: BothPlanes},
	{Name: "proxy-buffer-size", Status: BothPlanes, Note: "the default of the annotation"},
	{Name: "proxy-buffering", Status: NginxPlaneOnly, Note: "the Go data plane always streams bodies"},
	{Name: "proxy-buffers-number", Status: NginxPlaneOnly, Note: "the Go data plane streams bodies"},
	{Name: "proxy-busy-buffers-size", Status: KeyUnsupported},
	{Name: "proxy-connect-timeout", Status: BothPlanes},
	{Name: "proxy-cookie-domain", Status: KeyUnsupported},
	{Name: "proxy-cookie-path", Status: KeyUnsupported},
	{Name: "proxy-headers-hash-bucket-size", Status: KeyUnsupported},
	{Name: "proxy-headers-hash-max-size", Status: KeyUnsupported},
	{Name: "proxy-http-version", Status: BothPlanes, Note: "`1.0` or `1.1` (default); any other value is reported and 1.1 kept"},
	{Name: "proxy-max-temp-file-size", Status: KeyUnsupported},
	{Name: "proxy-next-upstream", Status: BothPlanes},
	{Name: "proxy-next-upstream-timeout", Status: BothPlanes},
	{Name: "proxy-next-upstream-tries", Status: BothPlanes, Note: "the Go data plane reads `0` as 3 (nginx: unlimited), as the annotation"},
	{Name: "proxy-protocol-header-timeout", Status: BothPlanes, Note: "the SSL passthrough router's wait for a PROXY header (`use-proxy-protocol` with `--enable-ssl-passthrough`), as in ingress-nginx; the HTTP and HTTPS listeners wait `client-header-timeout`, as nginx"},
	{Name: "proxy-read-timeout", Status: BothPlanes},
	{Name: "proxy-real-ip-cidr", Status: BothPlanes},
	{Name: "proxy-redirect-from", Status: KeyUnsupported},
	{Name: "proxy-redirect-to", Status: KeyUnsupported},
	{Name: "proxy-request-buffering", Status: BothPlanes},
	{Name: "proxy-send-timeout", Status: BothPlanes},
	{Name: "proxy-set-headers", Status: BothPlanes, Note: "namespace/name of a ConfigMap whose fields go upstream; values are literal text (a `$`, an nginx variable in ingress-nginx, is refused); fields the proxy sets itself (Host, X-Forwarded-*, X-Real-IP, X-Request-ID, ...) are refused"},
	{Name: "proxy-ssl-location-only", Status: KeyUnsupported},
	{Name: "proxy-stream-next-upstream", Status: KeyUnsupported},
	{Name: "proxy-stream-next-upstream-timeout", Status: KeyUnsupported},
	{Name: "proxy-stream-next-upstream-tries", Status: KeyUnsupported},
	{Name: "proxy-stream-responses", Status: KeyUnsupported},
	{Name: "proxy-stream-timeout", Status: KeyUnsupported},
	{Name: "relative-redirects", Status: KeyUnsupported},
	{Name: "retry-non-idempotent", Status: KeyUnsupported},
	{Name: "reuse-port", Status: KeyUnsupported},
	{Name: "server-name-hash-bucket-size", Status: KeyUnsupported},
	{Name: "server-name-hash-max-size", Status: KeyUnsupported},
	{Name: "server-snippet", Status: KeyRefused, Note: "raw nginx configuration"},
	{Name: "server-tokens", Status: NginxPlaneOnly},
	{Name: "service-upstream", Status: BothPlanes, Note: "the default of the service-upstream annotation"},
	{Name: "skip-access-log-urls", Status: BothPlanes, Note: "requests whose URI (path and query) is exactly one of these are not logged"},
	{Name: "ssl-buffer-size", Status: KeyUnsupported},
	{Name: "ssl-ciphers", Status: NginxPlaneOnly},
	{Name: "ssl-dh-param", Status: KeyUnsupported},
	{Name: "ssl-early-data", Status: KeyUnsupported},
	{Name: "ssl-ecdh-curve", Status: KeyUnsupported},
	{Name: "ssl-protocols", Status: NginxPlaneOnly},
	{Name: "ssl-redirect", Status: BothPlanes, Note: "`http-redirect-code`, 308 by default"},
	{Name: "ssl-reject-handshake", Status: KeyUnsupported},
	{Name: "ssl-session-cache", Status: KeyUnsupported},
	{Name: "ssl-session-cache-size", Status: KeyUnsupported},
	{Name: "ssl-session-ticket-key", Status: KeyUnsupported},
	{Name: "ssl-session-tickets", Status: KeyUnsupported},
	{Name: "ssl-session-timeout", Status: KeyUnsupported},
	{Name: "stream-access-log-path", Status: KeyUnsupported},
	{Name: "stream-snippet", Status: KeyRefused, Note: "raw nginx configuration"},
	{Name: "strict-validate-path-type", Status: KeyUnsupported},
	{Name: "syslog-host", Status: KeyUnsupported},
	{Name: "syslog-port", Status: KeyUnsupported},
	{Name: "upstream-hash-by", Status: KeyUnsupported, Note: "the annotation is supported; this ConfigMap default is not"},
	{Name: "upstream-hash-by-subset", Status: KeyUnsupported, Note: "the annotation is supported; this ConfigMap default is not"},
	{Name: "upstream-hash-by-subset-size", Status: KeyUnsupported, Note: "the annotation is supported; this ConfigMap default is not"},
	{Name: "upstream-keepalive-connections", Status: NginxPlaneOnly},
	{Name: "upstream-keepalive-requests", Status: NginxPlaneOnly},
	{Name: "upstream-keepalive-time", Status: NginxPlaneOnly},
	{Name: "upstream-keepalive-timeout", Status: NginxPlaneOnly},
	{Name: "use-forwarded-headers", Status: BothPlanes},
	{Name: "use-geoip2", Status: KeyUnsupported},
	{Name: "use-gzip", Status: KeyUnsupported},
	{Name: "use-http2", Status: KeyUnsupported, Note: "HTTP/2 is always on for TLS servers"},
	{Name: "use-port-in-redirects", Status: KeyUnsupported},
	{Name: "use-proxy-protocol", Status: BothPlanes, Note: "PROXY v1 and v2 on the HTTP and HTTPS ports; a connection without a valid header is closed (with `--enable-ssl-passthrough` the SNI router reads it and, as ingress-nginx's, also takes a connection without one); the header's source is the client's address from a peer in `proxy-real-ip-cidr`. With `use-forwarded-headers` too, the nginx plane cannot read X-Forwarded-For behind the PROXY header: its allow and deny lists answer 503 (docs/compatibility.md)"},
	{Name: "variables-hash-bucket-size", Status: KeyUnsupported},
	{Name: "variables-hash-max-size", Status: KeyUnsupported},
	{Name: "whitelist-source-range", Status: BothPlanes, Access: true, Note: "the default of every location without the annotation; an invalid list fails closed (503)"},
	{Name: "worker-cpu-affinity", Status: KeyUnsupported},
	{Name: "worker-processes", Status: BothPlanes, Note: "the Go data plane caps its client connections at `max-worker-connections` × `worker-processes`"},
	{Name: "worker-shutdown-timeout", Status: NginxPlaneOnly},
}

var configMapKeyByName = func() map[string]ConfigMapKey {
	m := make(map[string]ConfigMapKey, len(ConfigMapKeys))
	for _, k := range ConfigMapKeys {
		m[k.Name] = k
	}
	return m
}()

// keyGuide is where each message sends the reader.
const keyGuide = " (see the ConfigMap keys of docs/migrating-from-ingress-nginx.md)"

// configMapKeyErrors reports, in key order, each key of the controller
// ConfigMap that is not honoured on both data planes: not supported,
// refused, honoured by one plane only, or unknown to ingress-nginx v1.15.1
// (a typo). Keys already reported on the ConfigMap (an invalid value, an
// access key failing closed) are not reported again.
func configMapKeyErrors(data map[string]string, ref model.ObjectRef, reported []model.ObjectError) []model.ObjectError {
	done := map[string]bool{}
	for _, e := range reported {
		if e.Object == ref {
			done[e.Field] = true
		}
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []model.ObjectError
	for _, k := range keys {
		e, known := configMapKeyByName[k]
		if done[k] || (known && e.Access && (e.Status == KeyUnsupported || e.Status == KeyRefused)) {
			continue
		}
		var msg string
		switch {
		case !known:
			msg = "not a ConfigMap key ingress-nginx v1.15.1 knows; it has no effect"
		case e.Status == KeyRefused:
			msg = "snippet keys are refused (raw nginx configuration); it has no effect"
		case e.Status == KeyUnsupported:
			msg = "not supported by Switchyard; it has no effect"
		case e.Status == NginxPlaneOnly:
			msg = "honoured by the nginx data plane only; it has no effect on the Go data plane"
		case e.Status == GoPlaneOnly:
			msg = "honoured by the Go data plane only; it has no effect on the nginx data plane"
		default:
			continue
		}
		errs = append(errs, model.ObjectError{Object: ref, Field: k, Reason: model.ReasonUnsupported, Message: msg + keyGuide})
	}
	return errs
}
