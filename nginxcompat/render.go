package nginxcompat

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

//go:embed templates/nginx.tmpl
var templateFS embed.FS

var confTemplate = template.Must(template.New("nginx.tmpl").Funcs(template.FuncMap{
	"q":                   quote,
	"logq":                logFormatQuote,
	"onoff":               onoff,
	"checksumPlaceholder": func() string { return checksumPlaceholder },
	"prepend":             func(first string, rest []string) []string { return append([]string{first}, rest...) },
}).ParseFS(templateFS, "templates/nginx.tmpl"))

// checksumPlaceholder is replaced, after rendering, by the checksum of the
// rendered file (computed with the placeholder in place), so the status
// server answers which generation is loaded.
// It is as long as the hex checksum, so the checksum is written in place.
const checksumPlaceholder = "@@CHECKSUM" + "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@"

// RenderConfig says where the rendered nginx.conf finds its files and what it
// listens on. Zero values take the documented defaults.
type RenderConfig struct {
	// LuaDir is the directory holding balancer.lua; lua_package_path is
	// "<LuaDir>/?.lua;;". Default "/usr/share/switchyard/lua".
	LuaDir string
	// CertDir holds the certificates written by WriteCertificates, one
	// "<uid>.pem" each. Default "/etc/switchyard/certs".
	CertDir string
	// TempDir is the parent of nginx's *_temp_path directories.
	// Default "/var/lib/switchyard/nginx".
	TempDir string
	// PIDFile default "/run/switchyard-nginx.pid".
	PIDFile string
	// ErrorLog default "stderr"; AccessLog default "/dev/stdout".
	ErrorLog  string
	AccessLog string
	// HTTPListen and HTTPSListen are the listen addresses ("80",
	// "127.0.0.2:8080"). Defaults ["80"] and ["443"].
	HTTPListen  []string
	HTTPSListen []string
	// HTTPSProxyProtocol says the HTTPS listens sit behind the SNI router
	// (--enable-ssl-passthrough, ingress-nginx's port 442): every
	// connection starts with tcpproxy's PROXY header, and the client's
	// address and port come from it (realip, trusted from 127.0.0.1 only).
	// The listens should then be loopback addresses.
	HTTPSProxyProtocol bool
	// StatusListen is the loopback status server. Default "127.0.0.1:10245"
	// (10246 is left to the Go /configuration API in drop-in mode).
	StatusListen string
	// APISocket is the unix socket of the Go /configuration API, forwarded
	// from the status server's /configuration. Empty: not forwarded.
	APISocket string
	// PickSocket is the Go balancer's pick socket the Lua shim asks
	// (balancer.configure in init_by_lua). Empty: the shim's default,
	// /var/run/switchyard/pick.sock.
	PickSocket string
	// DefaultBackendListen, when set, adds ingress-nginx's built-in default
	// backend: a loopback server answering every request 404 "default
	// backend - 404". The builder's upstream-default-backend points at
	// 127.0.0.1:8181 when no --default-backend-service is given. Empty: none.
	DefaultBackendListen string
	// RequestMetrics turns on the shim's aggregated request metrics (sent
	// over the pick socket); MetricsPerHost labels them with $server_name.
	// Both only matter with PickSocket.
	RequestMetrics, MetricsPerHost bool
	// PickTimeout bounds how long the shim waits for a pick before it
	// falls back to round robin over the last peer list; zero keeps the
	// shim's default, 50 ms.
	PickTimeout time.Duration
	// DigestSocket is the unix socket of the digest verifier
	// (DigestHandler) that auth-type: digest locations ask through
	// auth_request. Empty: such locations answer 503 (fail closed).
	DigestSocket string
	// AuthDir holds the basic-authentication files WriteAuthFiles writes.
	// Default "/etc/switchyard/auth".
	AuthDir string
	// Resolvers are the name servers nginx asks for host names known only
	// at request time (an auth-url's), as ingress-nginx's resolver
	// directive; empty writes none, and such names then fail (the auth
	// subrequest answers 500: closed). ResolvConfResolvers reads them.
	Resolvers []netip.Addr
}

// ResolvConfResolvers returns the nameserver addresses of a resolv.conf
// (/etc/resolv.conf, as ingress-nginx reads them); lines that are not an
// address are skipped.
func ResolvConfResolvers(data []byte) []netip.Addr {
	var out []netip.Addr
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && a.Zone() == "" {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}

func (c RenderConfig) withDefaults() RenderConfig {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.LuaDir, "/usr/share/switchyard/lua")
	def(&c.CertDir, "/etc/switchyard/certs")
	def(&c.AuthDir, "/etc/switchyard/auth")
	def(&c.TempDir, "/var/lib/switchyard/nginx")
	def(&c.PIDFile, "/run/switchyard-nginx.pid")
	def(&c.ErrorLog, "stderr")
	def(&c.AccessLog, "/dev/stdout")
	def(&c.StatusListen, "127.0.0.1:10245")
	if len(c.HTTPListen) == 0 {
		c.HTTPListen = []string{"80"}
	}
	if len(c.HTTPSListen) == 0 {
		c.HTTPSListen = []string{"443"}
	}
	return c
}

// Rendered is one nginx.conf.
type Rendered struct {
	// Conf is the complete file.
	Conf []byte
	// Checksum is the hex SHA-256 the file's status server answers on
	// /config-checksum.
	Checksum string
	// Errors are the servers, locations and ConfigMap keys left out (or
	// defaulted) because a value failed its grammar; the rest is rendered.
	Errors []model.ObjectError
	// ClientCAs are the CA bundles and revocation lists of client
	// certificate authentication,
	// by the file the rendered configuration names; WriteClientCAs writes
	// them before nginx loads it.
	ClientCAs map[string]string
	// AuthFiles are the basic-authentication files, by the file the
	// rendered configuration names; WriteAuthFiles writes them.
	AuthFiles map[string][]byte
}

// Render renders nginx.conf from cfg. Every value reaching the file passes a
// strict per-field grammar and is then quoted for nginx; a server or location
// whose value fails is left out and reported in Rendered.Errors. Only an error
// in the renderer's own settings fails the whole render.
func Render(cfg *model.Configuration, rc RenderConfig) (*Rendered, error) {
	rc = rc.withDefaults()
	if err := checkRenderConfig(rc); err != nil {
		return nil, err
	}
	v := view{
		Version:        cfg.Version,
		PIDFile:        rc.PIDFile,
		ErrorLog:       rc.ErrorLog,
		AccessLog:      rc.AccessLog,
		TempDir:        rc.TempDir,
		LuaPackagePath: rc.LuaDir + "/?.lua;;",
		HTTPListens:    rc.HTTPListen,
		HTTPSListens:   rc.HTTPSListen,
		ProxyProtocol:  rc.HTTPSProxyProtocol,
		StatusListen:   rc.StatusListen,
		APISocket:      rc.APISocket,
		DigestSocket:   rc.DigestSocket,
		PickSocket:     rc.PickSocket,
		DefaultListen:  rc.DefaultBackendListen,
		RequestMetrics: rc.RequestMetrics,
		MetricsPerHost: rc.MetricsPerHost,
		PickTimeout:    strconv.FormatFloat(rc.PickTimeout.Seconds(), 'f', -1, 64),
	}
	for _, a := range rc.Resolvers {
		if a.Is6() {
			v.Resolvers = append(v.Resolvers, "["+a.String()+"]")
		} else if a.IsValid() {
			v.Resolvers = append(v.Resolvers, a.String())
		}
	}
	v.G, v.Errors = globals(&cfg.Global)
	if v.ProxyProtocol && v.G.RealIPHeader != "" && !v.G.ProxyProtocol {
		// One real_ip_header per server: behind the SNI router, TLS
		// clients would all read as 127.0.0.1, the PROXY header's address
		// unused, and a deny list would let them through.
		v.G.sourceListsDenied = "with --enable-ssl-passthrough, nginx cannot read both the SNI router's PROXY header and the forwarded client address"
	}
	if v.G.HSTS {
		v.HSTSValue = cfg.Global.HSTSHeader()
	}
	seenHost := map[string]bool{}
	seenZone, seenUpstream := map[string]bool{}, map[string]bool{}
	cas := map[string]string{}
	authFiles := map[string][]byte{}
	for i := range cfg.Servers {
		s := &cfg.Servers[i]
		sv, errs := serverView(cfg, s, rc, &v.G)
		v.Errors = append(v.Errors, errs...)
		if sv == nil {
			continue
		}
		if sv.ClientAuth != nil {
			cas[sv.ClientAuth.File] = s.ClientAuth.CA
			if sv.ClientAuth.CRLFile != "" {
				cas[sv.ClientAuth.CRLFile] = s.ClientAuth.CRL
			}
		}
		for _, lv := range sv.Locations {
			if lv.BasicFile != "" {
				authFiles[lv.BasicFile] = lv.basicData
			}
			if ps := lv.ProxySSL; ps != nil {
				cas[ps.CAFile] = ps.caPEM
				if ps.CertFile != "" {
					cas[ps.CertFile] = ps.certKeyPEM
				}
				if !seenUpstream[ps.Upstream] {
					seenUpstream[ps.Upstream] = true
					v.TLSUpstreams = append(v.TLSUpstreams, ps.Upstream)
				}
			}
			if rl := lv.RateLimit; rl != nil && !seenZone[rl.ID] {
				seenZone[rl.ID] = true
				v.RateLimits = append(v.RateLimits, rl)
			}
		}
		dup := false
		for _, n := range sv.Names {
			if seenHost[n] {
				dup = true
			}
		}
		if dup {
			v.Errors = append(v.Errors, model.ObjectError{Object: firstIngress(s), Field: "spec.rules.host",
				Message: fmt.Sprintf("server %q: a host or alias is already served by another server; left out", s.Hostname)})
			continue
		}
		for _, n := range sv.Names {
			seenHost[n] = true
		}
		v.Servers = append(v.Servers, sv)
	}
	// One allocation of about the final size: growing a 30 MB buffer by
	// doubling cost a third of a 10k-server render in clearing and copying.
	locations := 0
	for _, sv := range v.Servers {
		locations += len(sv.Locations)
	}
	size := 16384 + int(bytesPerLocation.Load())*locations*21/20
	// The template renders everything but the server blocks, which
	// writeServer appends at the slot.
	v.ServersSlot = serversSlot
	var frame bytes.Buffer
	if err := confTemplate.Execute(&frame, &v); err != nil {
		return nil, fmt.Errorf("render nginx.conf: %w", err)
	}
	head, tail, ok := bytes.Cut(frame.Bytes(), []byte(serversSlot))
	if !ok {
		return nil, errors.New("render nginx.conf: the template lost the servers slot")
	}
	var buf bytes.Buffer
	buf.Grow(size + frame.Len())
	buf.Write(head)
	for _, sv := range v.Servers {
		writeServer(&buf, &v, sv)
	}
	buf.Write(tail)
	if locations > 0 {
		bytesPerLocation.Store(int64(buf.Len() / locations))
	}
	sum := sha256.Sum256(buf.Bytes())
	hexsum := hex.EncodeToString(sum[:])
	conf := buf.Bytes()
	if i := bytes.Index(conf, []byte(checksumPlaceholder)); i >= 0 {
		copy(conf[i:], hexsum) // same length: no second 30 MB copy
	}
	return &Rendered{Conf: conf, Checksum: hexsum, Errors: v.Errors, ClientCAs: cas, AuthFiles: authFiles}, nil
}

// bytesPerLocation is the rendered size per location of the last render, the
// estimate for the next buffer: too small doubles the buffer (a 30 MB copy),
// too large costs clearing memory that is never used.
var bytesPerLocation atomic.Int64

func init() { bytesPerLocation.Store(1600) }

// serversSlot marks where the server blocks go in the template's output.
const serversSlot = "\x00switchyard-servers\x00"

type view struct {
	Version        uint64
	PIDFile        string
	ErrorLog       string
	AccessLog      string
	TempDir        string
	LuaPackagePath string
	HTTPListens    []string
	HTTPSListens   []string
	ProxyProtocol  bool // the HTTPS listens take a PROXY header
	StatusListen   string
	APISocket      string
	DigestSocket   string
	PickSocket     string
	DefaultListen  string
	RequestMetrics bool
	MetricsPerHost bool
	PickTimeout    string // seconds; "0" keeps the shim's default
	// Resolvers are the resolver directive's addresses, IPv6 bracketed.
	Resolvers   []string
	ServersSlot string
	G           globalView
	HSTSValue   string
	Servers     []*serverV
	// RateLimits are the rate limit zones of the servers' locations, one
	// per Ingress, in the order first met.
	RateLimits []*rateLimitV
	// TLSUpstreams name an upstream block per distinct proxy-ssl-*
	// settings, in the order first met (proxySSLV.Upstream).
	TLSUpstreams []string
	Errors       []model.ObjectError
}

// rateLimitV is an Ingress's limit-rps / limit-rpm as ingress-nginx
// renders them: a geo block marking limit-allowlist's clients, a map
// giving the others' $binary_remote_addr as the key, and a limit_req_zone
// per limit (5 MB, as ingress-nginx), applied with burst and nodelay.
type rateLimitV struct {
	// ID names the zones and variables: "rl" and 16 hex digits of the
	// Ingress's zone name.
	ID                 string
	Allow              []string
	RPS, RPM           int
	BurstRPS, BurstRPM int
	// Conns is limit-connections: a limit_conn_zone and limit_conn.
	Conns int
}

type serverV struct {
	Names   []string
	Default bool
	// TLS is the certificate file the HTTPS listener serves: the
	// server's own (spec.tls) or, as ingress-nginx serves every server
	// on its HTTPS port, the default certificate; empty: no HTTPS
	// listener. OwnTLS: the server has a certificate of its own, which
	// ssl-redirect and Strict-Transport-Security ask for.
	TLS       string
	OwnTLS    bool
	Locations []*locationV
	// ClientAuth is the server's auth-tls-*; nil without.
	ClientAuth *clientAuthV
}

// corsV is a location's enable-cors. The fields are sent only when the
// request's Origin is allowed: AnyOrigin ("*" among cors-allow-origin, or
// none given) allows every request, even one without an Origin, and sends
// "Access-Control-Allow-Origin: *"; otherwise OriginRegex must match
// $http_origin, which is sent back.
type corsV struct {
	AnyOrigin                bool
	OriginRegex              string
	Methods, Headers, Expose string
	Credentials              bool
	MaxAge                   int
}

type locationV struct {
	// WWWRedirect is from-to-www-redirect's host: the location only
	// redirects there, with the request's scheme, port and URI.
	WWWRedirect string
	// Headers are add-headers and custom-headers (model.Location's
	// ResponseHeaders), checked again: each goes out with add_header, the
	// upstream's field of that name hidden.
	Headers []model.HeaderField
	// NoAccessLog is enable-access-log: "false".
	NoAccessLog bool
	// SetHeaders are proxy-set-headers, after the location's own
	// proxy_set_header lines.
	SetHeaders []model.HeaderField
	// ProxySSL is proxy-ssl-* (backend-protocol HTTPS); nil without.
	ProxySSL                        *proxySSLV
	Modifier, Path                  string
	Namespace, IngressName, Service string
	// ServicePort is the backend's port, set as $service_port when the
	// log format reads it.
	ServicePort string
	Backend     string
	// LocationPath is the Ingress path $location_path names, when Path was
	// changed from it (a Prefix path's trailing slash); empty: Path.
	LocationPath string
	// Denied renders the location as "return 503" only: an access setting
	// that cannot be carried out, or a value this renderer refuses (fail
	// closed, as ingress-nginx's denied locations).
	Denied bool
	// Deny and Allow are nginx access rules: deny lines first, then allow
	// lines and "deny all".
	Deny, Allow []string
	// RateLimit is the location's Ingress's limit_req and limit_conn
	// zones; nil without.
	RateLimit *rateLimitV
	// LimitRate and LimitRateAfter are limit_rate and limit_rate_after in
	// KiB; 0: none.
	LimitRate, LimitRateAfter int
	// ClientAuth is its server's client certificate authentication: the
	// location sends ingress-nginx's ssl-client-* fields and refuses plain
	// HTTP. Nil without.
	ClientAuth *clientAuthV
	// BasicRealm and BasicFile are auth_basic's; BasicFile is empty
	// without basic authentication. basicData is the file's content.
	BasicRealm, BasicFile string
	basicData             []byte
	// DigestKey names the location's digest credentials at the digest
	// socket (DigestKey); empty without digest authentication.
	DigestKey string
	// Auth is the location's external authentication; nil without.
	Auth        *authV
	SSLRedirect bool
	// PreserveTrailingSlash keeps a trailing slash in ssl-redirect's
	// Location (preserve-trailing-slash).
	PreserveTrailingSlash       bool
	AppRoot                     string
	RedirectURL                 string
	RedirectCode                int
	CORS                        *corsV
	BodySize                    string
	ConnectTimeout, SendTimeout int
	ReadTimeout                 int
	Buffering                   bool
	BufferSize, BuffersNumber   int
	// RequestBuffering and ClientBodyBuffer are proxy-request-buffering
	// and client-body-buffer-size (ingress-nginx's on and 8k).
	RequestBuffering bool
	ClientBodyBuffer int
	// HTTP10 is proxy-http-version "1.0" (ingress-nginx's 1.1 otherwise).
	HTTP10                      bool
	NextUpstream                string
	NextUpstreamTries           int
	NextUpstreamTimeout         int
	UpstreamVhost               string
	XForwardedPrefix            string
	RewriteRegex, RewriteTarget string
	GRPC                        bool
	Scheme                      string
	// CustomErrors are upstream status codes answered by ErrorBackend
	// (custom-http-errors); ErrorSlot numbers that backend among the
	// server's error backends, for the named location's name.
	CustomErrors []int
	ErrorBackend string
	ErrorSlot    int
	// Mirror is mirror-target; nil without.
	Mirror *mirrorV
}

// quote writes s as an nginx double-quoted string: only \ and " are special
// inside one (ngx_conf_file.c), so escaping those two keeps any value a
// single argument. Values still pass their field grammar first: quoting does
// not stop nginx from expanding $variables.
func quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' || c == '"' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String()
}

// logFormatQuote quotes a log format's text for nginx.conf: quote's
// escapes, and tab, CR and LF as \t, \r and \n, which nginx's reader turns
// back into those bytes.
func logFormatQuote(s string) string {
	return strings.NewReplacer("\t", `\t`, "\r", `\r`, "\n", `\n`).Replace(quote(s))
}

func onoff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

var (
	reHostLabel   = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	reK8sName     = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)
	reBackendName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)
	reUID         = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	reHeaderList  = regexp.MustCompile(`^[A-Za-z0-9!#%&'*+.^_|~-]+( ?, ?[A-Za-z0-9!#%&'*+.^_|~-]+)*$`)
	reFilePath    = regexp.MustCompile(`^/[A-Za-z0-9/._+-]*$`)
	reListen      = regexp.MustCompile(`^(([0-9]{1,3}\.){3}[0-9]{1,3}:|\[[0-9a-fA-F:]+\]:)?[0-9]{1,5}$`)
	// reRealIPHeader is forwarded-for-header's grammar, as the builder's.
	reRealIPHeader = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,63}$`)
)

// validHost accepts a lower-case DNS name, a "*." wildcard of one, or "_".
func validHost(h string) bool {
	if h == model.CatchAllHost {
		return true
	}
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, l := range strings.Split(h, ".") {
		if !reHostLabel.MatchString(l) {
			return false
		}
	}
	return true
}

// printableNoDollar accepts visible ASCII without space and '$' (and no
// control characters), the grammar of paths and URLs here.
// reResponseHeader is a response field's name as the builder allows it.
var reResponseHeader = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

// literalValue is a field value nginx reads as text: printable ASCII and
// spaces, no '$' (a variable), not empty, no blank at either end.
func literalValue(s string) bool {
	if s == "" || len(s) > 4096 || s[0] == ' ' || s[len(s)-1] == ' ' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c >= 0x7f || c == '$' {
			return false
		}
	}
	return true
}

func printableNoDollar(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '$' {
			return false
		}
	}
	return true
}

func validPath(p string) bool {
	return strings.HasPrefix(p, "/") && len(p) <= 4096 && printableNoDollar(p)
}

// validRegexPath is a use-regex path: visible ASCII, '$' allowed (a
// location regex is not interpolated; where the path is also the value of
// `set $location_path` the '$' is written as ${literal_dollar}).
func validRegexPath(p string) bool {
	if !strings.HasPrefix(p, "/") || len(p) > 4096 {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// escapeDollar writes every '$' of s as ${literal_dollar} (a geo variable
// holding "$"), for values nginx interpolates.
func escapeDollar(s string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	return strings.ReplaceAll(s, "$", "${literal_dollar}")
}

// validRewriteTarget is a path or URL whose only '$' are capture references
// ($1..$9), as rewrite-target allows.
func validRewriteTarget(s string) bool {
	if s == "" || len(s) > 4096 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f {
			return false
		}
		if c == '$' && (i+1 >= len(s) || s[i+1] < '0' || s[i+1] > '9') {
			return false
		}
	}
	return true
}

// reCORSOrigin is one cors-allow-origin origin other than "*", in the
// builder's grammar: http or https, an optional "*." first label, a host and
// a port. Of its characters only '.' means anything to PCRE.
var reCORSOrigin = regexp.MustCompile(`^https?://(\*\.)?[A-Za-z0-9.-]+(:[0-9]{1,5})?$`)

// corsOriginRegex is the regex $http_origin must match, case-insensitively
// (~*), for one of cors-allow-origin's origins, as ingress-nginx's
// buildCorsOriginRegex writes it: an origin as is, its dots escaped, and a
// "*." first label standing for one label of letters, digits and '-'.
// anyOrigin reports "*" among them, or none given (the annotation's default
// is "*"): every request is allowed, and there is no regex. Every origin
// must be in reCORSOrigin's grammar, else the location is refused.
//
// Unlike ingress-nginx's, the regex is anchored at the start as well: its
// "(...)$" also allows an Origin that merely ends in an allowed one, such as
// "xhttps://web.example", which no browser sends (an origin is scheme, host
// and port, RFC 6454 section 6.1).
func corsOriginRegex(origins []string) (re string, anyOrigin bool, err error) {
	var b strings.Builder
	b.WriteString("^(")
	n := 0
	for _, o := range origins {
		if o == "*" {
			anyOrigin = true
			continue
		}
		if !reCORSOrigin.MatchString(o) {
			return "", false, fmt.Errorf("cors-allow-origin %q is not * or an http(s) origin", o)
		}
		if n > 0 {
			b.WriteByte('|')
		}
		n++
		scheme, rest, _ := strings.Cut(o, "://")
		b.WriteString(scheme)
		b.WriteString("://")
		if r, ok := strings.CutPrefix(rest, "*."); ok {
			b.WriteString(`[A-Za-z0-9-]+\.`)
			rest = r
		}
		for i := 0; i < len(rest); i++ {
			if rest[i] == '.' {
				b.WriteByte('\\')
			}
			b.WriteByte(rest[i])
		}
	}
	if anyOrigin || n == 0 {
		return "", true, nil
	}
	b.WriteString(")$")
	return b.String(), false, nil
}

func validURL(s string) bool {
	if !printableNoDollar(s) || len(s) > 4096 {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

var nextUpstreamWords = map[string]bool{
	"error": true, "timeout": true, "invalid_header": true, "http_500": true, "http_502": true,
	"http_503": true, "http_504": true, "http_403": true, "http_404": true, "http_429": true,
	"non_idempotent": true, "off": true,
}

func checkRenderConfig(rc RenderConfig) error {
	for name, p := range map[string]string{"LuaDir": rc.LuaDir, "CertDir": rc.CertDir, "AuthDir": rc.AuthDir, "TempDir": rc.TempDir, "PIDFile": rc.PIDFile} {
		if !reFilePath.MatchString(p) {
			return fmt.Errorf("nginxcompat: RenderConfig.%s %q: want an absolute path of [A-Za-z0-9/._+-]", name, p)
		}
	}
	for name, p := range map[string]string{"ErrorLog": rc.ErrorLog, "AccessLog": rc.AccessLog} {
		if p != "stderr" && !reFilePath.MatchString(p) {
			return fmt.Errorf("nginxcompat: RenderConfig.%s %q: want stderr or an absolute path", name, p)
		}
	}
	if rc.DigestSocket != "" && !reSocketPath.MatchString(rc.DigestSocket) {
		return fmt.Errorf("nginxcompat: RenderConfig.DigestSocket %q: want an absolute path", rc.DigestSocket)
	}
	if rc.APISocket != "" && !reFilePath.MatchString(rc.APISocket) {
		return fmt.Errorf("nginxcompat: RenderConfig.APISocket %q: want an absolute path", rc.APISocket)
	}
	if rc.PickSocket != "" && !reFilePath.MatchString(rc.PickSocket) {
		return fmt.Errorf("nginxcompat: RenderConfig.PickSocket %q: want an absolute path", rc.PickSocket)
	}
	listens := append(append([]string{rc.StatusListen}, rc.HTTPListen...), rc.HTTPSListen...)
	if rc.DefaultBackendListen != "" {
		listens = append(listens, rc.DefaultBackendListen)
	}
	for _, l := range listens {
		if !reListen.MatchString(l) {
			return fmt.Errorf("nginxcompat: listen address %q: want port, ipv4:port or [ipv6]:port", l)
		}
	}
	return nil
}

func firstIngress(s *model.Server) model.ObjectRef {
	for _, l := range s.Locations {
		if l.Ingress.Name != "" {
			return l.Ingress
		}
	}
	return model.ObjectRef{}
}

func serverView(cfg *model.Configuration, s *model.Server, rc RenderConfig, g *globalView) (*serverV, []model.ObjectError) {
	var errs []model.ObjectError
	bad := func(obj model.ObjectRef, field, format string, args ...any) {
		errs = append(errs, model.ObjectError{Object: obj, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if !validHost(s.Hostname) {
		bad(firstIngress(s), "spec.rules.host", "host %q is not a lower-case DNS name; server left out", s.Hostname)
		return nil, errs
	}
	sv := &serverV{Names: []string{s.Hostname}, Default: s.Hostname == model.CatchAllHost}
	for _, a := range s.Aliases {
		if !validHost(a) || a == model.CatchAllHost {
			bad(firstIngress(s), "nginx.ingress.kubernetes.io/server-alias", "alias %q is not a DNS name; left out", a)
			continue
		}
		if slices.Contains(sv.Names, a) {
			continue
		}
		sv.Names = append(sv.Names, a)
	}
	uid := cfg.DefaultCertificate
	if s.TLS != nil {
		uid = s.TLS.CertificateUID
	}
	if uid != "" {
		if c, ok := cfg.Certificates[uid]; ok && reUID.MatchString(uid) {
			sv.TLS = certFile(rc.CertDir, uid, c.PEM)
			sv.OwnTLS = s.TLS != nil
		} else {
			bad(firstIngress(s), "spec.tls", "server %q: certificate %q is missing or has a bad UID; served without TLS", s.Hostname, uid)
		}
	}
	denyAll := false
	if s.ClientAuth != nil {
		cav, err := clientAuthView(s.ClientAuth, rc.CertDir)
		if err != nil {
			bad(firstIngress(s), "nginx.ingress.kubernetes.io/auth-tls-secret", "server %q: %v; its locations answer 503 (fail closed)", s.Hostname, err)
			denyAll = true
		} else {
			sv.ClientAuth = cav
		}
	}
	if s.RedirectTo != "" {
		// from-to-www-redirect: one location answering every request.
		if !validHost(s.RedirectTo) || strings.HasPrefix(s.RedirectTo, "*.") || s.RedirectTo == model.CatchAllHost {
			bad(firstIngress(s), "nginx.ingress.kubernetes.io/from-to-www-redirect", "redirect to %q: not a host; server left out", s.RedirectTo)
			return nil, errs
		}
		sv.Locations = []*locationV{{Path: "/", WWWRedirect: s.RedirectTo}}
		return sv, errs
	}
	seen := map[string]bool{}
	for i := range s.Locations {
		l := &s.Locations[i]
		lv, err := locationView(l, sv.OwnTLS, g, rc, s.Hostname)
		if err == nil && denyAll {
			lv = &locationV{Modifier: lv.Modifier, Path: lv.Path, Backend: lv.Backend, Denied: true}
		}
		if err == nil && sv.ClientAuth != nil && !lv.Denied {
			lv.ClientAuth = sv.ClientAuth
		}
		switch {
		case err != nil && lv == nil:
			bad(l.Ingress, "spec.rules.http.paths", "server %q path %q: %v; location left out", s.Hostname, l.Path, err)
			continue
		case err != nil:
			// The path is sound but a setting is not: the location answers
			// 503 rather than leave its requests to a shorter, maybe less
			// protected, location.
			bad(l.Ingress, "spec.rules.http.paths", "server %q path %q: %v; the location answers 503 (fail closed)", s.Hostname, l.Path, err)
			lv = &locationV{Modifier: lv.Modifier, Path: lv.Path, Backend: lv.Backend, Denied: true}
		}
		if l.PathType == model.PathTypePrefix && !l.Regex && lv.Modifier == "" && !strings.HasSuffix(lv.Path, "/") {
			// As ingress-nginx: Prefix /p is "= /p" plus "/p/", so that
			// /px is not matched (element-wise prefix); an Exact /p of
			// the server comes first and keeps its own location.
			exact := *lv
			exact.Modifier, exact.LocationPath = "= ", lv.Path
			if !seen["= "+lv.Path] {
				seen["= "+lv.Path] = true
				sv.Locations = append(sv.Locations, &exact)
			}
			lv.LocationPath = lv.Path
			lv.Path += "/"
		}
		key := lv.Modifier + lv.Path
		if seen[key] {
			bad(l.Ingress, "spec.rules.http.paths", "server %q path %q (%s): already defined; location left out", s.Hostname, l.Path, l.PathType)
			continue
		}
		seen[key] = true
		sv.Locations = append(sv.Locations, lv)
	}
	return sv, errs
}

// rateLimitView checks a location's rate limits and names their zones.
func rateLimitView(rl *model.RateLimit) (*rateLimitV, error) {
	const maxRate = 1_000_000
	switch {
	case rl.Zone == "" || !reBackendName.MatchString(rl.Zone):
		return nil, fmt.Errorf("rate limit zone %q", rl.Zone)
	case rl.RPS < 0 || rl.RPS > maxRate || rl.RPM < 0 || rl.RPM > maxRate || rl.Connections < 0 || rl.Connections > maxRate ||
		rl.RPS+rl.RPM+rl.Connections == 0:
		return nil, fmt.Errorf("rate limits %d r/s, %d r/m, %d connections", rl.RPS, rl.RPM, rl.Connections)
	case rl.BurstMultiplier < 0 || rl.BurstMultiplier > 1000:
		return nil, fmt.Errorf("rate limit burst multiplier %d", rl.BurstMultiplier)
	}
	sum := sha256.Sum256([]byte(rl.Zone))
	rv := &rateLimitV{ID: "rl" + hex.EncodeToString(sum[:8]), RPS: rl.RPS, RPM: rl.RPM, Conns: rl.Connections,
		BurstRPS: rl.RPS * rl.BurstMultiplier, BurstRPM: rl.RPM * rl.BurstMultiplier}
	for _, p := range rl.Allowlist {
		if !p.IsValid() {
			return nil, fmt.Errorf("rate limit allow list entry %v is not a CIDR", p)
		}
		rv.Allow = append(rv.Allow, p.Masked().String())
	}
	return rv, nil
}

// reRealm is auth-realm's grammar.
var reRealm = regexp.MustCompile(`^[/\-._~a-zA-Z0-9: ]*$`)

func locationView(l *model.Location, tls bool, g *globalView, rc RenderConfig, server string) (*locationV, error) {
	if l.LocationSettings == nil {
		// Written by hand, without settings: render the zero ones.
		c := *l
		c.LocationSettings = l.Settings()
		l = &c
	}
	authDir, digestSocket := rc.AuthDir, rc.DigestSocket
	p := l.Path
	if p == "" {
		p = "/"
	}
	switch {
	case l.Regex && !validRegexPath(p):
		return nil, fmt.Errorf("regex path must start with / and hold visible ASCII")
	case !l.Regex && !validPath(p):
		return nil, fmt.Errorf("path must start with / and hold visible ASCII without $")
	}
	lv := &locationV{Path: p, Backend: l.Backend}
	for _, h := range l.ResponseHeaders {
		if !reResponseHeader.MatchString(h.Name) || !literalValue(h.Value) {
			return lv, fmt.Errorf("response header %q", h.Name)
		}
	}
	lv.Headers = l.ResponseHeaders
	lv.NoAccessLog = l.NoAccessLog
	for _, h := range l.ProxySetHeaders {
		if !reResponseHeader.MatchString(h.Name) || (h.Value != "" && !literalValue(h.Value)) {
			return lv, fmt.Errorf("proxy-set-headers field %q", h.Name)
		}
	}
	lv.SetHeaders = l.ProxySetHeaders
	switch {
	case l.Regex:
		lv.Modifier = "~* "
		lv.Path = "^" + p
	case l.PathType == model.PathTypeExact:
		lv.Modifier = "= "
	}
	if !reBackendName.MatchString(l.Backend) {
		return nil, fmt.Errorf("backend name %q", l.Backend)
	}
	for _, n := range []string{l.Ingress.Namespace, l.Ingress.Name, l.Service} {
		if n != "" && !reK8sName.MatchString(n) {
			return nil, fmt.Errorf("object name %q", n)
		}
	}
	lv.Namespace, lv.IngressName, lv.Service, lv.ServicePort = l.Ingress.Namespace, l.Ingress.Name, l.Service, l.ServicePort
	if l.Denied != nil {
		lv.Denied = true
		return lv, nil
	}
	for _, r := range []struct {
		dst *[]string
		src []netip.Prefix
	}{{&lv.Deny, l.DenySourceRanges}, {&lv.Allow, l.AllowSourceRanges}} {
		for _, p := range r.src {
			if !p.IsValid() {
				return lv, fmt.Errorf("source range %v is not a CIDR", p)
			}
			*r.dst = append(*r.dst, p.Masked().String())
		}
	}
	if len(lv.Deny)+len(lv.Allow) > 0 && g.sourceListsDenied != "" {
		return lv, errors.New(g.sourceListsDenied)
	}
	if rl := l.RateLimit; rl != nil {
		rv, err := rateLimitView(rl)
		if err != nil {
			return lv, err
		}
		lv.RateLimit = rv
	}
	if rr := l.ResponseRate; rr != nil {
		const maxKB = 1 << 30
		if rr.KBPerSecond < 1 || rr.KBPerSecond > maxKB || rr.AfterKB < 0 || rr.AfterKB > maxKB {
			return lv, fmt.Errorf("limit-rate %dk after %dk", rr.KBPerSecond, rr.AfterKB)
		}
		lv.LimitRate, lv.LimitRateAfter = rr.KBPerSecond, rr.AfterKB
	}
	if ba := l.BasicAuth; ba != nil {
		if !reRealm.MatchString(ba.Realm) || ba.Credentials == nil || len(ba.Credentials.File()) == 0 {
			return lv, fmt.Errorf("basic authentication: realm %q or credentials", ba.Realm)
		}
		lv.BasicRealm, lv.basicData = ba.Realm, ba.Credentials.File()
		lv.BasicFile = filepath.Join(authDir, ba.Credentials.Digest()+".htpasswd")
	}
	if da := l.DigestAuth; da != nil {
		switch {
		case da.Realm == "" || !reRealm.MatchString(da.Realm) || da.Credentials == nil || da.Credentials.Users() == 0:
			return lv, fmt.Errorf("digest authentication: realm %q or credentials", da.Realm)
		case l.ExternalAuth != nil || l.BasicAuth != nil:
			return lv, errors.New("digest authentication with another authentication")
		case !reSocketPath.MatchString(digestSocket):
			return lv, fmt.Errorf("digest authentication: no digest socket (%q)", digestSocket)
		}
		lv.DigestKey = DigestKey(da)
	}
	if l.ExternalAuth != nil {
		av, err := externalAuthView(l, p, server, g)
		if err != nil {
			return lv, err
		}
		lv.Auth = av
	}
	if len(l.CustomHTTPErrors) > 0 {
		eb := l.CustomDefaultBackend
		if eb == "" {
			eb = model.DefaultBackendName
		}
		if !reBackendName.MatchString(eb) {
			return nil, fmt.Errorf("default-backend name %q", eb)
		}
		for _, c := range l.CustomHTTPErrors {
			if c < 400 || c > 599 {
				return nil, fmt.Errorf("custom-http-errors code %d is not 4xx/5xx", c)
			}
		}
		lv.CustomErrors, lv.ErrorBackend = append([]int(nil), l.CustomHTTPErrors...), eb
	}
	lv.SSLRedirect = l.Rewrite.ForceSSLRedirect || (tls && l.Rewrite.SSLRedirect)
	lv.PreserveTrailingSlash = l.Rewrite.PreserveTrailingSlash
	if r := l.Rewrite.AppRoot; r != "" {
		if !validPath(r) {
			return nil, fmt.Errorf("app-root %q", r)
		}
		lv.AppRoot = r
	}
	if l.Redirect.URL != "" {
		if !validURL(l.Redirect.URL) {
			return nil, fmt.Errorf("redirect URL %q", l.Redirect.URL)
		}
		switch l.Redirect.Code {
		case 0:
			lv.RedirectCode = 301
		case 301, 302, 303, 307, 308:
			lv.RedirectCode = l.Redirect.Code
		default:
			return nil, fmt.Errorf("redirect code %d", l.Redirect.Code)
		}
		lv.RedirectURL = l.Redirect.URL
	}
	if l.CORS.Enabled {
		// The cors-* annotations' defaults, as the builder sets them; a
		// model without them gets the same.
		c := &corsV{Methods: "GET, PUT, POST, DELETE, PATCH, OPTIONS",
			Headers:     "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization",
			Credentials: l.CORS.AllowCredentials, MaxAge: 1728000}
		re, anyOrigin, err := corsOriginRegex(l.CORS.AllowOrigin)
		if err != nil {
			return nil, err
		}
		c.AnyOrigin, c.OriginRegex = anyOrigin, re
		for _, f := range []struct {
			dst *string
			src string
		}{{&c.Methods, l.CORS.AllowMethods}, {&c.Headers, l.CORS.AllowHeaders}, {&c.Expose, l.CORS.ExposeHeaders}} {
			if f.src == "" {
				continue
			}
			if !reHeaderList.MatchString(f.src) {
				return nil, fmt.Errorf("cors list %q", f.src)
			}
			*f.dst = f.src
		}
		if l.CORS.MaxAgeSeconds > 0 {
			c.MaxAge = l.CORS.MaxAgeSeconds
		}
		lv.CORS = c
	}
	pr, def := l.Proxy, g.Proxy
	pick := func(v, d, fallback int) int {
		if v > 0 {
			return v
		}
		if d > 0 {
			return d
		}
		return fallback
	}
	lv.ConnectTimeout = pick(pr.ConnectTimeoutSeconds, def.ConnectTimeoutSeconds, 5)
	lv.SendTimeout = pick(pr.SendTimeoutSeconds, def.SendTimeoutSeconds, 60)
	lv.ReadTimeout = pick(pr.ReadTimeoutSeconds, def.ReadTimeoutSeconds, 60)
	lv.NextUpstreamTries = pick(pr.NextUpstreamTries, def.NextUpstreamTries, 3)
	lv.NextUpstreamTimeout = pick(pr.NextUpstreamTimeoutSeconds, def.NextUpstreamTimeoutSeconds, 0)
	if pr.BodySizeBytes < 0 {
		return nil, fmt.Errorf("negative body size")
	}
	lv.BodySize = strconv.FormatInt(pr.BodySizeBytes, 10)
	lv.Buffering = pr.Buffering
	// proxy-buffer-size and proxy-buffers-number, ingress-nginx's 4k and 4
	// when unset; the builder keeps them within 1k-1m and 2-256.
	lv.BufferSize, lv.BuffersNumber = cmp.Or(pr.BufferSizeBytes, 4<<10), cmp.Or(pr.BuffersNumber, 4)
	lv.RequestBuffering, lv.ClientBodyBuffer = !pr.NoRequestBuffering, cmp.Or(pr.ClientBodyBufferBytes, 8<<10)
	lv.HTTP10 = pr.HTTP10
	if lv.ClientBodyBuffer < 1<<10 || lv.ClientBodyBuffer > 64<<20 {
		return lv, fmt.Errorf("client-body-buffer-size %d", lv.ClientBodyBuffer)
	}
	if lv.BufferSize < 1<<10 || lv.BufferSize > 1<<20 || lv.BuffersNumber < 2 || lv.BuffersNumber > 256 {
		return lv, fmt.Errorf("proxy-buffer-size %d or proxy-buffers-number %d", lv.BufferSize, lv.BuffersNumber)
	}
	nu := pr.NextUpstream
	if len(nu) == 0 {
		nu = def.NextUpstream
	}
	if len(nu) == 0 {
		nu = []string{"error", "timeout"}
	}
	for _, w := range nu {
		if !nextUpstreamWords[w] {
			return nil, fmt.Errorf("proxy-next-upstream %q", w)
		}
	}
	lv.NextUpstream = strings.Join(nu, " ")
	if l.UpstreamVhost != "" {
		if !model.ValidUpstreamVhost(l.UpstreamVhost) {
			return nil, fmt.Errorf("upstream-vhost %q", l.UpstreamVhost)
		}
		lv.UpstreamVhost = l.UpstreamVhost
	}
	if l.Mirror != nil {
		mv, err := mirrorView(l.Mirror)
		if err != nil {
			return lv, err
		}
		lv.Mirror = mv
	}
	if l.XForwardedPrefix != "" {
		if !validPath(l.XForwardedPrefix) {
			return nil, fmt.Errorf("x-forwarded-prefix %q", l.XForwardedPrefix)
		}
		lv.XForwardedPrefix = l.XForwardedPrefix
	}
	if t := l.Rewrite.Target; t != "" {
		if !validRewriteTarget(t) {
			return nil, fmt.Errorf("rewrite-target %q", t)
		}
		lv.RewriteTarget = t
		if l.Regex {
			lv.RewriteRegex = "(?i)" + p
		} else {
			lv.RewriteRegex = "(?i)^" + regexp.QuoteMeta(p)
		}
	}
	switch l.BackendProtocol {
	case "", model.ProtocolHTTP:
		lv.Scheme = "http"
	case model.ProtocolHTTPS:
		lv.Scheme = "https"
		if l.UpstreamTLS != nil {
			ps, err := proxySSLView(l.UpstreamTLS, rc.CertDir)
			if err != nil {
				return lv, err
			}
			lv.ProxySSL = ps
		}
	case model.ProtocolH2C:
		// nginx cannot proxy_pass over h2c; grpc_pass speaks HTTP/2
		// cleartext, as ingress-nginx does for H2C.
		lv.Scheme, lv.GRPC = "grpc", true
	case model.ProtocolGRPC:
		lv.Scheme, lv.GRPC = "grpc", true
	case model.ProtocolGRPCS:
		lv.Scheme, lv.GRPC = "grpcs", true
	default:
		return nil, fmt.Errorf("backend-protocol %q", l.BackendProtocol)
	}
	return lv, nil
}

// globalView is the validated ConfigMap.
type globalView struct {
	WorkerProcesses       string
	WorkerShutdownTimeout string
	MaxWorkerConnections  int
	KeepAlive             int
	KeepAliveRequests     int
	ServerTokens          bool
	// AccessLogDefaultBackend is enable-access-log-for-default-backend:
	// requests answered by the default backend are logged only with it.
	AccessLogDefaultBackend bool
	UseForwardedHeaders     bool
	ComputeFullForwardedFor bool
	SSLProtocols            string
	SSLCiphers              string
	LogFormatUpstream       string
	// LogEscape is log_format's escape= (json or none); empty for
	// nginx's default escaping.
	LogEscape string
	// LogServicePort and LogTheRealIP: the format reads $service_port or
	// $the_real_ip, which nginx.conf then defines as ingress-nginx does.
	LogServicePort, LogTheRealIP bool
	HTTPRedirectCode             int
	// LimitReqStatus is limit-req-status-code (503 by default);
	// LimitConnStatus is limit-conn-status-code (503 by default).
	LimitReqStatus               int
	LimitConnStatus              int
	HSTS                         bool
	UpstreamKeepaliveConnections int
	UpstreamKeepaliveTime        string
	UpstreamKeepaliveTimeout     string
	UpstreamKeepaliveRequests    int
	Proxy                        model.Proxy
	// SkipAccessLog is skip-access-log-urls, checked again.
	SkipAccessLog []string
	// RealIPHeader and RealIPFrom are real_ip_header and the
	// set_real_ip_from ranges (model.Global.RealIP); RealIPHeader is empty
	// without. FullForwardedFrom is the variable compute-full-forwarded-for
	// appends: the connection's address, $realip_remote_addr once realip
	// has replaced $remote_addr, as ingress-nginx.
	RealIPHeader      string
	RealIPFrom        []string
	FullForwardedFrom string
	// ProxyProtocol is use-proxy-protocol: every HTTP and HTTPS listen
	// takes a PROXY header (RealIPHeader is then proxy_protocol).
	ProxyProtocol bool
	// ClientHeaderBuffer and LargeClientHeaderBuffers are
	// client_header_buffer_size and large_client_header_buffers, from
	// client-header-buffer-size and large-client-header-buffers (1k, 4 8k).
	ClientHeaderBuffer       int
	LargeClientHeaderBuffers [2]int
	// sourceListsDenied, when set, says why locations with allow or deny
	// lists cannot be carried out: they fail closed.
	sourceListsDenied string
}

// defaultLogFormat is ingress-nginx's log-format-upstream default.
const defaultLogFormat = model.DefaultLogFormatText

// ConfigMapKeys lists the ingress-nginx ConfigMap keys the template honours.
var ConfigMapKeys = []string{
	"worker-processes", "worker-shutdown-timeout", "max-worker-connections", "keep-alive",
	"keep-alive-requests", "server-tokens", "enable-access-log-for-default-backend", "ssl-protocols", "ssl-ciphers", "log-format-upstream", "log-format-escape-json", "log-format-escape-none",
	"upstream-keepalive-connections", "upstream-keepalive-time", "upstream-keepalive-timeout",
	"upstream-keepalive-requests", "use-forwarded-headers", "compute-full-forwarded-for",
	"http-redirect-code", "hsts", "hsts-max-age", "hsts-include-subdomains", "hsts-preload",
	"ssl-redirect", "proxy-connect-timeout", "proxy-send-timeout", "proxy-read-timeout",
	"proxy-body-size", "proxy-next-upstream", "proxy-next-upstream-tries", "proxy-next-upstream-timeout",
	"proxy-buffering", "proxy-buffer-size", "proxy-buffers-number", "proxy-request-buffering", "client-body-buffer-size", "enable-real-ip", "forwarded-for-header", "proxy-real-ip-cidr",
}

// minLargeHeaderBuffer is the smallest large_client_header_buffers size
// nginx -t accepts: its connection_pool_size on 64-bit systems.
const minLargeHeaderBuffer = 512

// configMapRef names the controller ConfigMap; the caller knows its name.
var configMapRef = model.ObjectRef{Kind: "ConfigMap"}

func globals(g *model.Global) (globalView, []model.ObjectError) {
	v := globalView{
		WorkerProcesses: "auto", WorkerShutdownTimeout: "240s", MaxWorkerConnections: 16384,
		KeepAlive: 75, KeepAliveRequests: 1000, SSLProtocols: "TLSv1.2 TLSv1.3",
		SSLCiphers:        "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384",
		LogFormatUpstream: defaultLogFormat, HTTPRedirectCode: 308,
		UpstreamKeepaliveConnections: 320, UpstreamKeepaliveTime: "1h", UpstreamKeepaliveTimeout: "60s",
		UpstreamKeepaliveRequests: 10000,
		UseForwardedHeaders:       g.UseForwardedHeaders, ComputeFullForwardedFor: g.ComputeFullForwardedFor,
		HSTS: g.HSTS, Proxy: g.Proxy, FullForwardedFrom: "$remote_addr",
	}
	var errs []model.ObjectError
	// The client connection keys, parsed and checked by the builder
	// (model.Global), as the Go data plane reads them.
	if g.WorkerProcesses > 0 {
		v.WorkerProcesses = strconv.Itoa(g.WorkerProcesses)
	}
	if g.MaxWorkerConnections > 0 {
		v.MaxWorkerConnections = g.MaxWorkerConnections
	}
	if g.KeepAliveSeconds > 0 {
		v.KeepAlive = g.KeepAliveSeconds
	}
	if g.KeepAliveRequests > 0 {
		v.KeepAliveRequests = g.KeepAliveRequests
	}
	if g.DisableKeepAlive {
		v.KeepAlive = 0 // keepalive_timeout 0: no keep-alive
	}
	// Request heads: the builder keeps the sizes positive; nginx needs
	// them so (a zero large buffer would refuse every long line).
	v.ClientHeaderBuffer = cmp.Or(g.ClientHeaderBufferSize, 1<<10)
	v.LargeClientHeaderBuffers = [2]int{cmp.Or(g.LargeClientHeaderBuffers, 4), cmp.Or(g.LargeClientHeaderBufferSize, 8<<10)}
	if v.ClientHeaderBuffer < 0 || v.LargeClientHeaderBuffers[0] < 0 || v.LargeClientHeaderBuffers[1] < minLargeHeaderBuffer {
		// nginx -t refuses a large buffer smaller than its
		// connection_pool_size (512 on 64-bit systems): the whole file
		// would be refused for one key.
		v.ClientHeaderBuffer, v.LargeClientHeaderBuffers = 1<<10, [2]int{4, 8 << 10}
		errs = append(errs, model.ObjectError{Object: configMapRef, Field: "large-client-header-buffers",
			Message: fmt.Sprintf("header buffers %d and %d×%d: nginx needs large buffers of at least %d bytes; nginx's defaults (1k, 4 8k) kept on the nginx data plane",
				g.ClientHeaderBufferSize, g.LargeClientHeaderBuffers, g.LargeClientHeaderBufferSize, minLargeHeaderBuffer)})
	}
	if r := g.RealIP; r != nil {
		// Checked again here: the header is written bare.
		v.FullForwardedFrom = "$realip_remote_addr"
		v.ProxyProtocol = r.ProxyProtocol
		if r.ProxyProtocol {
			// compute-full-forwarded-for appends the PROXY source, as
			// ingress-nginx's map.
			v.FullForwardedFrom = "$proxy_protocol_addr"
		}
		ok := reRealIPHeader.MatchString(r.Header) && len(r.From) > 0
		for _, p := range r.From {
			ok = ok && p.IsValid()
			v.RealIPFrom = append(v.RealIPFrom, p.Masked().String())
		}
		switch {
		case ok && r.ProxyProtocol:
			// ingress-nginx's real_ip_header proxy_protocol, with
			// enable-real-ip or without.
			v.RealIPHeader = "proxy_protocol"
			if r.HeaderRead(g.UseForwardedHeaders) {
				// ingress-nginx then rewrites a request field with
				// headers-more before realip reads it (the PROXY
				// source's X-Forwarded-For when that source is trusted),
				// which Debian's nginx cannot: the address is the PROXY
				// header's, and lists that would need the forwarded one
				// fail closed.
				v.sourceListsDenied = "with use-proxy-protocol, the nginx data plane cannot read the client's address from " + r.Header + " (use-forwarded-headers)"
				errs = append(errs, model.ObjectError{Object: configMapRef, Field: "use-forwarded-headers",
					Message: "with use-proxy-protocol the nginx data plane reads the client's address from the PROXY header only, not " + r.Header + "; locations with allow or deny lists answer 503 (fail closed)"})
			}
		case ok:
			v.RealIPHeader = r.Header
		default:
			v.RealIPFrom = nil
			v.sourceListsDenied = "the real IP settings (forwarded-for-header, proxy-real-ip-cidr) are invalid"
			errs = append(errs, model.ObjectError{Object: configMapRef, Field: "forwarded-for-header",
				Message: fmt.Sprintf("real IP header %q or ranges %v invalid; locations with allow or deny lists answer 503 (fail closed)", r.Header, r.From)})
		}
	}
	bad := func(key, val, want string) {
		errs = append(errs, model.ObjectError{Object: configMapRef, Field: key,
			Message: fmt.Sprintf("%s %q: want %s; default kept", key, val, want)})
	}
	v.LimitReqStatus = 503
	if c := g.LimitReqStatus; c != 0 {
		if c >= 400 && c <= 599 {
			v.LimitReqStatus = c
		} else {
			bad("limit-req-status-code", strconv.Itoa(c), "400-599")
		}
	}
	v.LimitConnStatus = 503
	if c := g.LimitConnStatus; c != 0 {
		if c >= 400 && c <= 599 {
			v.LimitConnStatus = c
		} else {
			bad("limit-conn-status-code", strconv.Itoa(c), "400-599")
		}
	}
	switch c := g.HTTPRedirectCode; c {
	case 0:
	case 301, 302, 307, 308:
		v.HTTPRedirectCode = c
	default:
		bad("http-redirect-code", strconv.Itoa(c), "301, 302, 307 or 308")
	}
	for _, u := range g.SkipAccessLogURLs {
		if strings.HasPrefix(u, "/") && literalValue(u) && !strings.ContainsAny(u, " \"\\'") {
			v.SkipAccessLog = append(v.SkipAccessLog, u)
		} else {
			bad("skip-access-log-urls", u, "a request URI")
		}
	}
	// The nginx-only keys, parsed and checked by the builder
	// (model.NginxSettings); checked again here where a value is written
	// bare into nginx.conf.
	n := &g.Nginx
	if d := n.WorkerShutdownTimeout; d > 0 {
		v.WorkerShutdownTimeout = nginxTime(d)
	}
	v.ServerTokens = n.ServerTokens
	v.AccessLogDefaultBackend = n.AccessLogDefaultBackend
	if len(n.SSLProtocols) > 0 {
		ok := true
		for _, p := range n.SSLProtocols {
			ok = ok && (p == "TLSv1" || p == "TLSv1.1" || p == "TLSv1.2" || p == "TLSv1.3")
		}
		if ok {
			v.SSLProtocols = strings.Join(n.SSLProtocols, " ")
		} else {
			bad("ssl-protocols", strings.Join(n.SSLProtocols, " "), "TLSv1.2 TLSv1.3 or similar")
		}
	}
	if c := n.SSLCiphers; c != "" {
		if model.ValidCipherList(c) {
			v.SSLCiphers = c
		} else {
			bad("ssl-ciphers", c, "an OpenSSL cipher list")
		}
	}
	if f := g.AccessLogFormat; f.Segments != nil {
		// Checked again: the text is written into nginx.conf.
		if model.ValidLogFormatSegments(f.Segments) {
			v.LogFormatUpstream = model.LogFormatText(f.Segments)
		} else {
			bad("log-format-upstream", model.LogFormatText(f.Segments), "text and known variables")
		}
	}
	switch e := g.AccessLogFormat.Escape; e {
	case model.EscapeDefault:
	case model.EscapeJSON, model.EscapeNone:
		v.LogEscape = string(e)
	default:
		bad("log-format-escape-json", string(e), "json or none")
	}
	if v.LogFormatUpstream != defaultLogFormat {
		// Variables ingress-nginx's locations define that only a
		// format can read: defined when the format names them.
		for _, s := range g.AccessLogFormat.Segments {
			v.LogServicePort = v.LogServicePort || s.Var == model.LogServicePort
			v.LogTheRealIP = v.LogTheRealIP || s.Var == model.LogTheRealIP
		}
	}
	ka := &n.UpstreamKeepalive
	if ka.Connections != nil {
		v.UpstreamKeepaliveConnections = max(*ka.Connections, 0)
	}
	if ka.Time > 0 {
		v.UpstreamKeepaliveTime = nginxTime(ka.Time)
	}
	if ka.Timeout != nil {
		v.UpstreamKeepaliveTimeout = nginxTime(max(*ka.Timeout, 0))
	}
	if ka.Requests > 0 {
		v.UpstreamKeepaliveRequests = ka.Requests
	}
	return v, errs
}

// nginxTime writes d in nginx's time syntax: whole seconds as "Ns", else
// milliseconds.
func nginxTime(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}
