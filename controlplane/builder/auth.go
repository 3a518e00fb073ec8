package builder

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/switchyard-proxy/switchyard/controlplane/basicauth"
	"github.com/switchyard-proxy/switchyard/controlplane/digestauth"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

var (
	// reURLText is what the literal text of an auth URL may hold: URL
	// characters without blanks, quotes, ';', '{', '}', '\' or '$'.
	reURLText = regexp.MustCompile(`^[A-Za-z0-9\-._~:/?#\[\]@!&()*+,=%]*$`)
	// reRedirectParam is auth-signin-redirect-param.
	reRedirectParam = regexp.MustCompile(`^[A-Za-z0-9\-._~]+$`)
	// reHeaderName is one auth-response-headers entry.
	reHeaderName = regexp.MustCompile(`^[A-Za-z0-9\-_]+$`)
	// authMethods are auth-method's values, as ingress-nginx accepts them.
	authMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true,
		"DELETE": true, "CONNECT": true, "OPTIONS": true, "TRACE": true}
)

// parseURLTemplate splits an auth URL into literal text and the variables
// model.URLVars names ($name or ${name}). Anything else is an error naming
// what is wrong: a character outside reURLText, an unknown variable, or a
// result that is not an absolute http(s) URL with a host.
func parseURLTemplate(s string) (model.URLTemplate, error) {
	var t model.URLTemplate
	lit := func(text string) error {
		if !reURLText.MatchString(text) {
			return fmt.Errorf("%q: only URL characters and the variables $%s are allowed", s, joinVars())
		}
		if text != "" {
			t = append(t, model.URLPart{Literal: text})
		}
		return nil
	}
	rest := s
	for {
		i := strings.IndexByte(rest, '$')
		if i < 0 {
			if err := lit(rest); err != nil {
				return nil, err
			}
			break
		}
		if err := lit(rest[:i]); err != nil {
			return nil, err
		}
		rest = rest[i+1:]
		name, after, ok := cutVarName(rest)
		if !ok {
			return nil, fmt.Errorf("%q: unterminated ${", s)
		}
		rest = after
		if !knownVar(name) {
			return nil, fmt.Errorf("%q: variable $%s is not one of $%s", s, name, joinVars())
		}
		t = append(t, model.URLPart{Var: model.URLVar(name)})
	}
	u, err := url.Parse(sample(t))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%q is not an absolute http or https URL", s)
	}
	return t, nil
}

// cutVarName reads the name of an nginx variable after its '$': "name" or
// "{name}"; ok is false for an unterminated "{".
func cutVarName(s string) (name, rest string, ok bool) {
	if strings.HasPrefix(s, "{") {
		j := strings.IndexByte(s, '}')
		if j < 0 {
			return "", s, false
		}
		return s[1:j], s[j+1:], true
	}
	j := 0
	for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
		j++
	}
	return s[:j], s[j:], true
}

func knownVar(name string) bool {
	for _, v := range model.URLVars {
		if string(v) == name {
			return true
		}
	}
	return false
}

func joinVars() string {
	s := make([]string, len(model.URLVars))
	for i, v := range model.URLVars {
		s[i] = string(v)
	}
	return strings.Join(s, ", $")
}

// sample renders t with a plausible value per variable, for checking the
// shape of the URL it makes.
func sample(t model.URLTemplate) string {
	var b strings.Builder
	for _, p := range t {
		switch p.Var {
		case "":
			b.WriteString(p.Literal)
		case model.VarHost, model.VarHTTPHost, model.VarBestHTTPHost:
			b.WriteString("host.example")
		case model.VarScheme, model.VarPassAccessScheme:
			b.WriteString("https")
		default:
			b.WriteString("/path")
		}
	}
	return b.String()
}

// hostOf is the Host field ingress-nginx sends the authentication service:
// the URL's host name without the port, which may be a variable.
func hostOf(t model.URLTemplate) model.URLTemplate {
	// Between "://" and the first '/', '?' or '#', without ":port" or
	// "[...]" brackets; the URL's shape was checked by parseURLTemplate.
	var out model.URLTemplate
	state := 0 // 0 before "://", 1 in the host, 2 done
	for _, p := range t {
		if p.Var != "" {
			if state == 1 {
				out = append(out, p)
			}
			continue
		}
		text := p.Literal
		if state == 0 {
			i := strings.Index(text, "://")
			if i < 0 {
				continue
			}
			text, state = text[i+3:], 1
		}
		if state == 1 {
			end := strings.IndexAny(text, "/?#")
			if end >= 0 {
				text, state = text[:end], 2
			}
			if text != "" {
				out = append(out, model.URLPart{Literal: text})
			}
		}
	}
	// Drop a literal ":port" at the end, and IPv6 brackets.
	if n := len(out); n > 0 && out[n-1].Var == "" {
		lit := out[n-1].Literal
		if i := strings.LastIndexByte(lit, ':'); i >= 0 && !strings.Contains(lit[i:], "]") {
			if _, err := strconv.Atoi(lit[i+1:]); err == nil || i == len(lit)-1 {
				lit = lit[:i]
			}
		}
		lit = strings.TrimSuffix(strings.TrimPrefix(lit, "["), "]")
		if lit == "" {
			out = out[:n-1]
		} else {
			out[n-1].Literal = lit
		}
	}
	return out
}

// signinURL appends the redirect parameter to auth-signin as ingress-nginx
// does: "?<param>=$pass_access_scheme://$http_host$escaped_request_uri", or
// with '&' when the URL has a query, and nothing when the query already
// holds the parameter.
func signinURL(raw, param string) string {
	if param == "" {
		param = "rd"
	}
	u, err := url.Parse(raw)
	if err != nil {
		return raw // parseURLTemplate reports it
	}
	q := u.Query()
	const back = "$pass_access_scheme://$http_host$escaped_request_uri"
	switch {
	case len(q) == 0:
		return raw + "?" + param + "=" + back
	case q.Get(param) != "":
		return raw
	}
	return raw + "&" + param + "=" + back
}

// externalAuthKin are the annotations that only mean something with
// auth-url.
var externalAuthKin = []string{"auth-method", "auth-signin", "auth-signin-redirect-param", "auth-response-headers",
	"auth-request-redirect", "auth-always-set-cookie", "auth-cache-key", "auth-cache-duration"}

// parseExternalAuth reads auth-url and its kin; nil without auth-url, when
// each kin present is reported to warn as having no effect. Errors go to
// bad, which fails the Ingress closed (they are access annotations).
func parseExternalAuth(get func(string) (string, bool), bad func(string, string, ...any), warn func(string, string), boolean func(string) bool) *model.ExternalAuth {
	raw, ok := get("auth-url")
	if !ok {
		for _, k := range externalAuthKin {
			if _, ok := get(k); ok {
				warn(k, "has no effect without auth-url (as in ingress-nginx); ignored")
			}
		}
		return nil
	}
	ea := &model.ExternalAuth{}
	t, err := parseURLTemplate(strings.TrimSpace(raw))
	if err != nil {
		bad("auth-url", "%v", err)
		return nil
	}
	ea.URL, ea.Host = t, hostOf(t)
	if v, ok := get("auth-method"); ok {
		if !authMethods[v] {
			bad("auth-method", "%q is not an HTTP method (GET, HEAD, POST, PUT, PATCH, DELETE, CONNECT, OPTIONS, TRACE)", v)
			return nil
		}
		ea.Method = v
	}
	param := ""
	if v, ok := get("auth-signin-redirect-param"); ok {
		if !reRedirectParam.MatchString(v) {
			bad("auth-signin-redirect-param", "%q is not a query parameter name", v)
			return nil
		}
		param = v
	}
	if v, ok := get("auth-signin"); ok {
		t, err := parseURLTemplate(signinURL(strings.TrimSpace(v), param))
		if err != nil {
			bad("auth-signin", "%v", err)
			return nil
		}
		ea.SigninURL = t
	}
	if v, ok := get("auth-response-headers"); ok {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h == "" {
				continue
			}
			if !reHeaderName.MatchString(h) {
				bad("auth-response-headers", "%q is not a comma-separated list of header names", v)
				return nil
			}
			ea.ResponseHeaders = append(ea.ResponseHeaders, h)
		}
	}
	if v, ok := get("auth-request-redirect"); ok {
		if v == "" || !reURLText.MatchString(v) {
			bad("auth-request-redirect", "%q: only URL characters are allowed", v)
			return nil
		}
		ea.RequestRedirect = v
	}
	ea.AlwaysSetCookie = boolean("auth-always-set-cookie")
	// The cache only spares the service requests: a key or duration that
	// cannot be read leaves requests uncached (never more open), reported.
	if v, ok := get("auth-cache-key"); ok {
		key, err := parseCacheKey(v)
		valid, verr := []model.CacheValid(nil), error(nil)
		if err == nil {
			d, _ := get("auth-cache-duration")
			valid, verr = parseCacheValid(d)
		}
		switch {
		case err != nil:
			warn("auth-cache-key", err.Error()+"; every request asks the service (no cache)")
		case verr != nil:
			warn("auth-cache-duration", verr.Error()+"; every request asks the service (no cache)")
		default:
			ea.CacheKey, ea.CacheValid = key, valid
		}
	}
	return ea
}

var (
	// reErrorPage is auth-tls-error-page, as ingress-nginx's redirectRegex
	// without its named-location form.
	reErrorPage = regexp.MustCompile(`^((https?://)?[A-Za-z0-9\-.]+(:\d+)?)?(/[A-Za-z0-9\-_.]+)*/?$`)
	// reMatchCN is what auth-tls-match-cn may hold: a pattern RE2 and PCRE
	// read alike (no backslash, quote, brace or blank).
	reMatchCN = regexp.MustCompile(`^[A-Za-z0-9=,.\-_*+?^$()|\[\]:/@]+$`)
)

// clientAuthAnnotations are the auth-tls-* values before the Secret is
// looked up.
type clientAuthAnnotations struct {
	secret    string
	verify    model.ClientVerify
	depth     int
	errorPage string
	pass      bool
	matchCN   string
}

var clientAuthKin = []string{"auth-tls-verify-client", "auth-tls-verify-depth", "auth-tls-error-page",
	"auth-tls-pass-certificate-to-upstream", "auth-tls-match-cn"}

// parseClientAuth reads auth-tls-secret and its kin; nil without the
// secret (each kin present is then reported as having no effect) or with
// auth-tls-verify-client: off. Errors fail the Ingress closed.
func parseClientAuth(get func(string) (string, bool), bad func(string, string, ...any), warn func(string, string),
	boolean func(string) bool, integer func(string, int, int) (int, bool)) *clientAuthAnnotations {
	secret, ok := get("auth-tls-secret")
	if !ok {
		for _, k := range clientAuthKin {
			if _, ok := get(k); ok {
				warn(k, "has no effect without auth-tls-secret (as in ingress-nginx); ignored")
			}
		}
		return nil
	}
	c := &clientAuthAnnotations{secret: strings.TrimSpace(secret), verify: model.VerifyOn, depth: 1}
	if v, ok := get("auth-tls-verify-client"); ok {
		switch v {
		case "on", "optional", "optional_no_ca":
			c.verify = model.ClientVerify(v)
		case "off":
			c.verify = ""
		default:
			bad("auth-tls-verify-client", "%q is not on, off, optional or optional_no_ca", v)
			return nil
		}
	}
	if n, ok := integer("auth-tls-verify-depth", 1, 100); ok {
		c.depth = n
	} else if _, present := get("auth-tls-verify-depth"); present {
		return nil // integer reported it
	}
	if v, ok := get("auth-tls-error-page"); ok {
		if v == "" || !reErrorPage.MatchString(v) {
			bad("auth-tls-error-page", "%q is not a URL or path", v)
			return nil
		}
		c.errorPage = v
	}
	c.pass = boolean("auth-tls-pass-certificate-to-upstream")
	if v, ok := get("auth-tls-match-cn"); ok {
		// CVE-2025-1097 came through this field: it reaches nginx.conf
		// only as a pattern of these characters that RE2 compiles.
		if _, err := regexp.Compile(v); err != nil || !reMatchCN.MatchString(v) {
			bad("auth-tls-match-cn", "%q is not a regular expression of letters, digits and = , . - _ * + ? ^ $ ( ) | [ ] : / @", v)
			return nil
		}
		c.matchCN = v
	}
	if c.verify == "" {
		return nil
	}
	return c
}

// sameNamespace splits an annotation's object reference ("name" or
// "namespace/name") and refuses one outside the Ingress's namespace, as
// ingress-nginx does by default; kind names the object in the error.
func sameNamespace(ing *networkingv1.Ingress, ref, kind string) (ns, name string, err error) {
	ns, name, found := strings.Cut(ref, "/")
	if !found {
		ns, name = ing.Namespace, ref
	}
	if ns != ing.Namespace {
		return "", "", fmt.Errorf("%s %s/%s is in another namespace, which is not allowed", kind, ns, name)
	}
	return ns, name, nil
}

// ingressSecret is the Secret an annotation of ing names ("name" or
// "namespace/name"): only in the Ingress's namespace, as ingress-nginx
// allows by default.
func (b *builder) ingressSecret(ing *networkingv1.Ingress, ref string) (*corev1.Secret, error) {
	ns, name, err := sameNamespace(ing, ref, "secret")
	if err != nil {
		return nil, err
	}
	sec := b.secrets[ns+"/"+name]
	if sec == nil {
		return nil, fmt.Errorf("secret %s/%s does not exist", ns, name)
	}
	return sec, nil
}

// clientAuth looks up the CA Secret of auth-tls-secret for ing: in the
// Ingress's namespace (a Secret of another namespace is refused, as
// ingress-nginx refuses it by default), holding a PEM bundle of
// certificates under ca.crt, and revocation lists under ca.crl when present
// (validCRLs).
func (b *builder) clientAuth(ing *networkingv1.Ingress, c *clientAuthAnnotations) (*model.ClientAuth, error) {
	sec, err := b.ingressSecret(ing, c.secret)
	if err != nil {
		return nil, err
	}
	ns, name := sec.Namespace, sec.Name
	ca := sec.Data["ca.crt"]
	if err := validCABundle(ca); err != nil {
		return nil, fmt.Errorf("secret %s/%s: ca.crt %v", ns, name, err)
	}
	crl, hasCRL := sec.Data["ca.crl"]
	if hasCRL {
		if err := validCRLs(crl, ca); err != nil {
			return nil, fmt.Errorf("secret %s/%s: ca.crl %v", ns, name, err)
		}
	}
	return &model.ClientAuth{
		Secret: model.ObjectRef{Kind: "Secret", Namespace: ns, Name: name, UID: string(sec.UID)},
		CA:     string(ca), CRL: string(crl), Verify: c.verify, Depth: c.depth, ErrorPage: c.errorPage, PassCertificate: c.pass, MatchCN: matchCN(c.matchCN),
	}, nil
}

// validCRLs accepts PEM X509 CRL blocks, at least one and nothing else,
// each parsing and signed by a certificate of the CA bundle (allowed to
// sign CRLs): a list nginx could not use would refuse every client, and
// one Switchyard cannot check must not let a revoked one in.
func validCRLs(data, caBundle []byte) error {
	var cas []*x509.Certificate
	for rest := caBundle; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
			cas = append(cas, c)
		}
	}
	n := 0
	for {
		var blk *pem.Block
		blk, data = pem.Decode(data)
		if blk == nil {
			break
		}
		if blk.Type != "X509 CRL" {
			return fmt.Errorf("holds a %s block", blk.Type)
		}
		crl, err := x509.ParseRevocationList(blk.Bytes)
		if err != nil {
			return fmt.Errorf("holds a revocation list that does not parse: %v", err)
		}
		signed := false
		for _, c := range cas {
			signed = signed || (bytes.Equal(c.RawSubject, crl.RawIssuer) && crl.CheckSignatureFrom(c) == nil)
		}
		if !signed {
			return fmt.Errorf("holds a revocation list of %s not signed by a certificate of ca.crt", crl.Issuer)
		}
		n++
	}
	if n == 0 || len(strings.TrimSpace(string(data))) != 0 {
		return fmt.Errorf("is not a PEM bundle of revocation lists")
	}
	return nil
}

// validCABundle accepts PEM CERTIFICATE blocks that parse, at least one, and
// nothing else but blank space between them.
func validCABundle(data []byte) error {
	n := 0
	for {
		var blk *pem.Block
		blk, data = pem.Decode(data)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return fmt.Errorf("holds a %s block", blk.Type)
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return fmt.Errorf("holds a certificate that does not parse: %v", err)
		}
		n++
	}
	if n == 0 || len(strings.TrimSpace(string(data))) != 0 {
		return fmt.Errorf("is not a PEM bundle of certificates")
	}
	return nil
}

// reRealm is auth-realm, as ingress-nginx's CharsWithSpace.
var reRealm = regexp.MustCompile(`^[/\-._~a-zA-Z0-9: ]*$`)

// basicAuthAnnotations are auth-type: basic's values before the Secret is
// looked up.
type basicAuthAnnotations struct {
	secret, secretType, realm string
	// digest is auth-type: digest.
	digest bool
}

var basicAuthKin = []string{"auth-secret", "auth-secret-type", "auth-realm"}

// parseBasicAuth reads auth-type and its kin; nil without auth-type (each
// kin present is then reported as having no effect). Invalid values, and
// digest without auth-realm, fail the Ingress closed.
func parseBasicAuth(get func(string) (string, bool), bad func(string, string, ...any), warn func(string, string)) *basicAuthAnnotations {
	typ, ok := get("auth-type")
	if !ok {
		for _, k := range basicAuthKin {
			if _, ok := get(k); ok {
				warn(k, "has no effect without auth-type (as in ingress-nginx); ignored")
			}
		}
		return nil
	}
	c := &basicAuthAnnotations{secretType: "auth-file"}
	switch typ {
	case "basic":
	case "digest":
		c.digest = true
	default:
		bad("auth-type", "%q is not basic or digest", typ)
		return nil
	}
	secret, ok := get("auth-secret")
	if !ok || strings.TrimSpace(secret) == "" {
		bad("auth-type", "auth-secret is missing")
		return nil
	}
	c.secret = strings.TrimSpace(secret)
	if v, ok := get("auth-secret-type"); ok {
		if v != "auth-file" && v != "auth-map" {
			bad("auth-secret-type", "%q is not auth-file or auth-map", v)
			return nil
		}
		c.secretType = v
	}
	if v, ok := get("auth-realm"); ok {
		if !reRealm.MatchString(v) {
			bad("auth-realm", "%q may only hold letters, digits, blanks and - . _ ~ / :", v)
			return nil
		}
		c.realm = v
	}
	if c.digest && c.realm == "" {
		// The module treats an empty realm as auth_digest off: ingress-nginx
		// would serve the Ingress open.
		bad("auth-realm", "is required with auth-type: digest (without it ingress-nginx serves the Ingress unprotected)")
		return nil
	}
	return c
}

// basicAuth looks up the credentials Secret of auth-secret for ing: in the
// Ingress's namespace, its "auth" key an htpasswd file (auth-file) or each
// key a user (auth-map), every line valid.
func (b *builder) basicAuth(ing *networkingv1.Ingress, c *basicAuthAnnotations) (*model.BasicAuth, error) {
	creds, ref, err := authSecret(b, ing, c, basicauth.ParseMap, basicauth.Parse)
	if err != nil {
		return nil, err
	}
	return &model.BasicAuth{Realm: c.realm, Secret: ref, Credentials: creds}, nil
}

// digestAuth looks up the credentials Secret of auth-secret for ing, as
// basicAuth: its "auth" key an htdigest file (auth-file) or each key a user
// whose value is "realm:HA1" (auth-map), every line valid.
func (b *builder) digestAuth(ing *networkingv1.Ingress, c *basicAuthAnnotations) (*model.DigestAuth, error) {
	creds, ref, err := authSecret(b, ing, c, digestauth.ParseMap, digestauth.Parse)
	if err != nil {
		return nil, err
	}
	return &model.DigestAuth{Realm: c.realm, Secret: ref, Credentials: creds}, nil
}

// authSecret reads the credentials of auth-secret with the parsers of one
// auth-type: parseMap for auth-map, parse of the "auth" key for auth-file.
func authSecret[T any](b *builder, ing *networkingv1.Ingress, c *basicAuthAnnotations,
	parseMap func(map[string][]byte) (T, error), parse func([]byte) (T, error)) (T, model.ObjectRef, error) {
	var zero T
	sec, err := b.ingressSecret(ing, c.secret)
	if err != nil {
		return zero, model.ObjectRef{}, err
	}
	ns, name := sec.Namespace, sec.Name
	var creds T
	if c.secretType == "auth-map" {
		creds, err = parseMap(sec.Data)
	} else {
		data, ok := sec.Data["auth"]
		if !ok {
			return zero, model.ObjectRef{}, fmt.Errorf("secret %s/%s has no key auth", ns, name)
		}
		creds, err = parse(data)
	}
	if err != nil {
		return zero, model.ObjectRef{}, fmt.Errorf("secret %s/%s: %v", ns, name, err)
	}
	return creds, model.ObjectRef{Kind: "Secret", Namespace: ns, Name: name, UID: string(sec.UID)}, nil
}

var (
	reCacheVar  = regexp.MustCompile(`^(http_[a-z0-9_]+|cookie_[A-Za-z0-9_]+|remote_addr|host|request_uri)$`)
	reCacheText = regexp.MustCompile(`^[A-Za-z0-9\-_]*$`)
	reCacheTime = regexp.MustCompile(`^([0-9]{1,9})(s|m|h|d)?$`)
)

// parseCacheKey reads auth-cache-key: text of letters, digits, '-', '_'
// and the variables reCacheVar names ($name or ${name}).
func parseCacheKey(s string) ([]model.CacheKeyPart, error) {
	var out []model.CacheKeyPart
	rest := strings.Trim(s, `"`)
	for rest != "" {
		i := strings.IndexByte(rest, '$')
		if i < 0 {
			i = len(rest)
		}
		if lit := rest[:i]; lit != "" {
			if !reCacheText.MatchString(lit) {
				return nil, fmt.Errorf("%q: only letters, digits, - _ and variables", s)
			}
			out = append(out, model.CacheKeyPart{Literal: lit})
		}
		rest = rest[i:]
		if rest == "" {
			break
		}
		rest = rest[1:]
		name, after, ok := cutVarName(rest)
		if !ok {
			return nil, fmt.Errorf("%q: unterminated ${", s)
		}
		rest = after
		if !reCacheVar.MatchString(name) {
			return nil, fmt.Errorf("%q: variable $%s is not $http_*, $cookie_*, $remote_addr, $host or $request_uri", s, name)
		}
		out = append(out, model.CacheKeyPart{Var: name})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q is empty", s)
	}
	return out, nil
}

// parseCacheValid reads auth-cache-duration: comma-separated
// proxy_cache_valid lines, "[code ...|any] time" (time in s, m, h or d).
func parseCacheValid(s string) ([]model.CacheValid, error) {
	if strings.TrimSpace(s) == "" {
		s = "200 202 401 5m"
	}
	var out []model.CacheValid
	for _, line := range strings.Split(s, ",") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		m := reCacheTime.FindStringSubmatch(f[len(f)-1])
		if m == nil {
			return nil, fmt.Errorf("%q: %q is not a time such as 5m", s, f[len(f)-1])
		}
		n, _ := strconv.Atoi(m[1])
		n *= map[string]int{"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]]
		v := model.CacheValid{Seconds: n}
		for _, c := range f[:len(f)-1] {
			if c == "any" {
				v.Any = true
				continue
			}
			code, err := strconv.Atoi(c)
			if err != nil || code < 100 || code > 599 {
				return nil, fmt.Errorf("%q: %q is not a status code", s, c)
			}
			v.Codes = append(v.Codes, code)
		}
		out = append(out, v)
	}
	return out, nil
}

// reProxySetHeader is an auth-proxy-set-headers name, as ingress-nginx's
// ValidHeader.
var reProxySetHeader = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// ValidProxySetHeader reports why a field of an auth-proxy-set-headers
// ConfigMap cannot be sent the same on both planes; nil when it can. Values
// are literal: a '$', which nginx would expand as a variable (ingress-nginx
// writes values into proxy_set_header as they are), is refused.
func ValidProxySetHeader(name, value string) error {
	if !reProxySetHeader.MatchString(name) {
		return fmt.Errorf("%q is not a header name (letters, digits, '-' and '_')", name)
	}
	if model.AuthSubrequestField(name) {
		return fmt.Errorf("%s is set by the auth subrequest itself", name)
	}
	return literalFieldValue(name, value)
}

// authProxySetHeaders reads the ConfigMap auth-proxy-set-headers names: in
// the Ingress's namespace (another is refused, as ingress-nginx by
// default), existing, every field valid (ValidProxySetHeader); sorted by
// name.
func (b *builder) authProxySetHeaders(ing *networkingv1.Ingress, ref string) ([]model.HeaderField, error) {
	ns, name, err := sameNamespace(ing, ref, "configmap")
	if err != nil {
		return nil, err
	}
	cm := b.cms[ns+"/"+name]
	if cm == nil {
		return nil, fmt.Errorf("configmap %s/%s does not exist", ns, name)
	}
	out := make([]model.HeaderField, 0, len(cm.Data))
	for k, v := range cm.Data {
		if err := ValidProxySetHeader(k, v); err != nil {
			return nil, fmt.Errorf("configmap %s/%s: %v", ns, name, err)
		}
		out = append(out, model.HeaderField{Name: k, Value: v})
	}
	if len(cm.BinaryData) > 0 {
		return nil, fmt.Errorf("configmap %s/%s holds binaryData, which cannot be sent as fields", ns, name)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// matchCN is auth-tls-match-cn, checked by the caller; nil when unset.
func matchCN(v string) *model.Regexp {
	if v == "" {
		return nil
	}
	return model.NewRegexp(v)
}
