package nginxcompat

import (
	"bytes"
	"crypto/sha1" // #nosec G505 -- a location name, as ingress-nginx's, not a secret
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// authV is a location's external authentication, ready to write: every
// string passed the checks of externalAuthView.
type authV struct {
	// Location is the internal location the subrequest goes to,
	// "/_external-auth-<base64url(path)>-<pathType>", as ingress-nginx
	// names it.
	Location string
	// URL, Host and Signin are nginx strings: literal URL text and
	// ${variable} references.
	URL, Host, Signin string
	// SigninLocation is the named location that redirects to Signin.
	SigninLocation string
	Method         string
	// RequestRedirect is X-Auth-Request-Redirect's value; $request_uri by
	// default.
	RequestRedirect string
	// Headers are auth-response-headers with the nginx variable each is
	// read from ($upstream_http_<lower name, '-' as '_'>).
	Headers []authHeaderV
	// SetHeaders are auth-proxy-set-headers' proxy_set_header lines:
	// literal values (no '$'), quoted.
	SetHeaders      []model.HeaderField
	AlwaysSetCookie bool
	// EscapedURI says a string uses $escaped_request_uri, which the
	// location then defines.
	EscapedURI bool
	// CacheKey is the nginx string the answer is cached under (server,
	// auth location, auth-cache-key with its variables); empty: no cache.
	// CacheValid are its proxy_cache_valid lines.
	CacheKey   string
	CacheValid []string
	// ConnectTimeout, SendTimeout and ReadTimeout are the ConfigMap's, as
	// the auth location inherits them from the http block in ingress-nginx.
	ConnectTimeout, SendTimeout, ReadTimeout int
}

type authHeaderV struct {
	Name, Var string
}

var (
	reAuthLiteral = regexp.MustCompile(`^[A-Za-z0-9\-._~:/?#\[\]@!&()*+,=%]*$`)
	reAuthHeader  = regexp.MustCompile(`^[A-Za-z0-9\-_]+$`)
	reCacheVar    = regexp.MustCompile(`^(http_[a-z0-9_]+|cookie_[A-Za-z0-9_]+|remote_addr|host|request_uri)$`)
	reCacheText   = regexp.MustCompile(`^[A-Za-z0-9\-_]*$`)
	authMethods   = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true,
		"DELETE": true, "CONNECT": true, "OPTIONS": true, "TRACE": true}
)

// nginxURL writes a URLTemplate as an nginx string: literal text checked
// again here (quote keeps it one argument; no '$' may slip in) and each
// variable as ${name}.
func nginxURL(t model.URLTemplate) (s string, escaped bool, err error) {
	var b strings.Builder
	for _, p := range t {
		if p.Var == "" {
			if !reAuthLiteral.MatchString(p.Literal) {
				return "", false, fmt.Errorf("URL text %q", p.Literal)
			}
			b.WriteString(p.Literal)
			continue
		}
		known := false
		for _, v := range model.URLVars {
			known = known || v == p.Var
		}
		if !known {
			return "", false, fmt.Errorf("URL variable %q", p.Var)
		}
		escaped = escaped || p.Var == model.VarEscapedRequestURI
		b.WriteString("${" + string(p.Var) + "}")
	}
	return b.String(), escaped, nil
}

// reSetHeaderName is an auth-proxy-set-headers name (the builder's grammar).
var reSetHeaderName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// validSetHeaderValue accepts printable ASCII without '$' (nginx would
// expand a variable) and without blanks at either end; quote escapes the
// rest.
func validSetHeaderValue(v string) bool {
	if len(v) > 4096 || strings.TrimSpace(v) != v {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == '$' {
			return false
		}
	}
	return true
}

// externalAuthView checks a location's ExternalAuth and makes its authV.
func externalAuthView(l *model.Location, path, server string, g *globalView) (*authV, error) {
	ea := l.ExternalAuth
	av := &authV{Method: ea.Method, AlwaysSetCookie: ea.AlwaysSetCookie, RequestRedirect: "$request_uri",
		ConnectTimeout: g.Proxy.ConnectTimeoutSeconds, SendTimeout: g.Proxy.SendTimeoutSeconds, ReadTimeout: g.Proxy.ReadTimeoutSeconds}
	pt := string(l.PathType)
	if pt == "" {
		pt = "default"
	}
	if !reK8sName.MatchString(strings.ToLower(pt)) {
		return nil, fmt.Errorf("path type %q", pt)
	}
	av.Location = "/_external-auth-" + base64.RawURLEncoding.EncodeToString([]byte(path)) + "-" + pt
	var err error
	var esc bool
	if av.URL, esc, err = nginxURL(ea.URL); err != nil || av.URL == "" {
		return nil, fmt.Errorf("auth-url: %v", err)
	}
	av.EscapedURI = esc
	if av.Host, esc, err = nginxURL(ea.Host); err != nil || av.Host == "" {
		return nil, fmt.Errorf("auth-url host: %v", err)
	}
	av.EscapedURI = av.EscapedURI || esc
	if len(ea.SigninURL) > 0 {
		if av.Signin, esc, err = nginxURL(ea.SigninURL); err != nil {
			return nil, fmt.Errorf("auth-signin: %v", err)
		}
		av.EscapedURI = av.EscapedURI || esc
		h := sha1.Sum([]byte(path + av.Signin)) // #nosec G401
		av.SigninLocation = "@" + hex.EncodeToString(h[:])
	}
	for _, h := range ea.ProxySetHeaders {
		if !reSetHeaderName.MatchString(h.Name) || model.AuthSubrequestField(h.Name) || !validSetHeaderValue(h.Value) {
			return nil, fmt.Errorf("auth-proxy-set-headers field %q", h.Name)
		}
		av.SetHeaders = append(av.SetHeaders, h)
	}
	if len(ea.CacheKey) > 0 {
		// The server's name first, as ingress-nginx's key: two servers'
		// locations of one path never share an answer.
		if !validHost(server) {
			return nil, fmt.Errorf("server name %q", server)
		}
		key := server + av.Location
		for _, p := range ea.CacheKey {
			switch {
			case p.Var != "" && reCacheVar.MatchString(p.Var):
				key += "${" + p.Var + "}"
			case p.Var == "" && reCacheText.MatchString(p.Literal):
				key += p.Literal
			default:
				return nil, fmt.Errorf("auth-cache-key part %+v", p)
			}
		}
		av.CacheKey = key
		for _, v := range ea.CacheValid {
			if v.Seconds <= 0 {
				return nil, fmt.Errorf("auth-cache-duration %+v", v)
			}
			line := ""
			if v.Any {
				line = "any "
			}
			for _, c := range v.Codes {
				if c < 100 || c > 599 {
					return nil, fmt.Errorf("auth-cache-duration code %d", c)
				}
				line += strconv.Itoa(c) + " "
			}
			av.CacheValid = append(av.CacheValid, line+strconv.Itoa(v.Seconds)+"s")
		}
	}
	if ea.Method != "" && !authMethods[ea.Method] {
		return nil, fmt.Errorf("auth-method %q", ea.Method)
	}
	if ea.RequestRedirect != "" {
		if !reAuthLiteral.MatchString(ea.RequestRedirect) {
			return nil, fmt.Errorf("auth-request-redirect %q", ea.RequestRedirect)
		}
		av.RequestRedirect = quote(ea.RequestRedirect)
	}
	for _, h := range ea.ResponseHeaders {
		if !reAuthHeader.MatchString(h) {
			return nil, fmt.Errorf("auth-response-headers %q", h)
		}
		av.Headers = append(av.Headers, authHeaderV{Name: h, Var: "upstream_http_" + strings.ReplaceAll(strings.ToLower(h), "-", "_")})
	}
	return av, nil
}

// writeAuthLocations writes the internal location the auth subrequest goes
// to and, with auth-signin, the named location that redirects there, as
// ingress-nginx's template does (without its cache, keepalive upstream and
// snippet parts). hsts goes on the sign-in location's answer (writeHSTS).
func writeAuthLocations(b *bytes.Buffer, v *view, l *locationV, hsts string) {
	a := l.Auth
	b.WriteString("\n        location = ")
	b.WriteString(a.Location)
	b.WriteString(" {\n            internal;\n            access_log off;\n            proxy_intercept_errors off;\n            proxy_pass_request_body off;\n            proxy_set_header Content-Length \"\";\n            proxy_set_header X-Forwarded-Proto \"\";\n            proxy_set_header X-Request-ID $req_id;")
	if a.Method != "" {
		b.WriteString("\n            proxy_method ")
		b.WriteString(a.Method)
		b.WriteString(";\n            proxy_set_header X-Original-URI $request_uri;\n            proxy_set_header X-Scheme $pass_access_scheme;")
	}
	b.WriteString("\n            proxy_set_header Host ")
	b.WriteString(quote(a.Host))
	b.WriteString(";\n            proxy_set_header X-Original-URL $scheme://$http_host$request_uri;\n            proxy_set_header X-Original-Method $request_method;\n            proxy_set_header X-Sent-From \"nginx-ingress-controller\";\n            proxy_set_header X-Real-IP $remote_addr;")
	if v.G.UseForwardedHeaders && v.G.ComputeFullForwardedFor {
		b.WriteString("\n            proxy_set_header X-Forwarded-For $full_x_forwarded_for;")
	} else {
		b.WriteString("\n            proxy_set_header X-Forwarded-For $remote_addr;")
	}
	b.WriteString("\n            proxy_set_header X-Auth-Request-Redirect ")
	b.WriteString(a.RequestRedirect)
	b.WriteByte(';')
	for _, h := range a.SetHeaders {
		// auth-proxy-set-headers; an empty value sends no field.
		b.WriteString("\n            proxy_set_header ")
		b.WriteString(h.Name)
		b.WriteByte(' ')
		b.WriteString(quote(h.Value))
		b.WriteByte(';')
	}
	if a.CacheKey != "" {
		// As ingress-nginx's auth location: the answer cached under a
		// hash of the key.
		b.WriteString("\n            set $tmp_cache_key ")
		b.WriteString(quote(a.CacheKey))
		b.WriteString(";\n            set $cache_key \"\";\n            rewrite_by_lua_block {\n                ngx.var.cache_key = ngx.encode_base64(ngx.sha1_bin(ngx.var.tmp_cache_key))\n            }\n            proxy_cache auth_cache;")
		for _, v := range a.CacheValid {
			b.WriteString("\n            proxy_cache_valid ")
			b.WriteString(v)
			b.WriteByte(';')
		}
		b.WriteString("\n            proxy_cache_key \"$cache_key\";\n            proxy_buffering on;")
	} else {
		b.WriteString("\n            proxy_buffering off;")
	}
	b.WriteString("\n            proxy_ssl_server_name on;\n            proxy_pass_request_headers on;\n            proxy_connect_timeout ")
	writeInt(b, a.ConnectTimeout)
	b.WriteString("s;\n            proxy_send_timeout ")
	writeInt(b, a.SendTimeout)
	b.WriteString("s;\n            proxy_read_timeout ")
	writeInt(b, a.ReadTimeout)
	b.WriteString("s;\n            proxy_http_version 1.1;\n            set $target ")
	b.WriteString(quote(a.URL))
	b.WriteString(";\n            proxy_pass $target;\n        }")
	if a.SigninLocation != "" {
		b.WriteString("\n        location ")
		b.WriteString(a.SigninLocation)
		b.WriteString(" {\n            internal;\n            add_header Set-Cookie $auth_cookie;")
		writeHSTS(b, "\n            ", hsts)
		b.WriteString("\n            return 302 ")
		b.WriteString(quote(a.Signin))
		b.WriteString(";\n        }")
	}
}

// writeAuthRequest writes, inside the protected location, what asks the
// subrequest and applies its answer.
func writeAuthRequest(b *bytes.Buffer, a *authV) {
	if a.EscapedURI {
		// ingress-nginx's set_escape_uri, with the Lua module at hand.
		b.WriteString("\n            set_by_lua_block $escaped_request_uri {\n                return ngx.escape_uri(ngx.var.request_uri)\n            }")
	}
	b.WriteString("\n            auth_request ")
	b.WriteString(a.Location)
	b.WriteString(";\n            auth_request_set $auth_cookie $upstream_http_set_cookie;\n            add_header Set-Cookie $auth_cookie")
	if a.AlwaysSetCookie {
		b.WriteString(" always")
	}
	b.WriteByte(';')
	for i, h := range a.Headers {
		b.WriteString("\n            auth_request_set $authHeader")
		writeInt(b, i)
		b.WriteString(" $")
		b.WriteString(h.Var)
		b.WriteString(";\n            proxy_set_header ")
		b.WriteString(quote(h.Name))
		b.WriteString(" $authHeader")
		writeInt(b, i)
		b.WriteByte(';')
	}
	if a.SigninLocation != "" {
		b.WriteString("\n            error_page 401 = ")
		b.WriteString(a.SigninLocation)
		b.WriteByte(';')
	}
}

// clientAuthV is a server's client certificate authentication, ready to
// write.
type clientAuthV struct {
	// File is the CA bundle's file in CertDir, named by its content;
	// CRLFile the revocation lists' (ssl_crl), empty without.
	File      string
	CRLFile   string
	Verify    string
	Depth     int
	ErrorPage string
	MatchCN   string
	Pass      bool
}

var (
	reMatchCN   = regexp.MustCompile(`^[A-Za-z0-9=,.\-_*+?^$()|\[\]:/@]+$`)
	reErrorPage = regexp.MustCompile(`^((https?://)?[A-Za-z0-9\-.]+(:\d+)?)?(/[A-Za-z0-9\-_.]+)*/?$`)
)

// clientCAFile is where a CA bundle is written: named by its content, so a
// new bundle never overwrites one a running nginx would read again.
func clientCAFile(dir, pem string) string { return pemFile(dir, "client-ca-", ".crt", pem) }

// clientCRLFile is where a server's revocation lists are written, named by
// their content as clientCAFile (not .pem, which RemoveStaleCertificates
// owns).
func clientCRLFile(dir, pem string) string { return pemFile(dir, "client-crl-", ".crl", pem) }

// clientAuthView checks a server's ClientAuth.
func clientAuthView(ca *model.ClientAuth, certDir string) (*clientAuthV, error) {
	switch ca.Verify {
	case model.VerifyOn, model.VerifyOptional, model.VerifyOptionalNoCA:
	default:
		return nil, fmt.Errorf("auth-tls-verify-client %q", ca.Verify)
	}
	if ca.Depth < 1 || ca.Depth > 100 {
		return nil, fmt.Errorf("auth-tls-verify-depth %d", ca.Depth)
	}
	if ca.ErrorPage != "" && !reErrorPage.MatchString(ca.ErrorPage) {
		return nil, fmt.Errorf("auth-tls-error-page %q", ca.ErrorPage)
	}
	if ca.MatchCN != nil {
		// The builder compiled it; checked again for what nginx reads bare.
		if !reMatchCN.MatchString(ca.MatchCN.String()) {
			return nil, fmt.Errorf("auth-tls-match-cn %q", ca.MatchCN)
		}
	}
	if !strings.HasPrefix(ca.CA, "-----BEGIN CERTIFICATE-----") {
		return nil, fmt.Errorf("auth-tls-secret: the CA is not PEM")
	}
	v := &clientAuthV{File: clientCAFile(certDir, ca.CA), Verify: string(ca.Verify), Depth: ca.Depth,
		ErrorPage: ca.ErrorPage, MatchCN: ca.MatchCN.String(), Pass: ca.PassCertificate}
	if ca.CRL != "" {
		// Written to a file, never into nginx.conf; it must be PEM CRLs
		// only, or nginx would refuse the file (the builder checked more).
		if !strings.HasPrefix(ca.CRL, "-----BEGIN X509 CRL-----") || strings.Contains(ca.CRL, "-----BEGIN CERTIFICATE") ||
			strings.Contains(ca.CRL, "PRIVATE KEY") {
			return nil, fmt.Errorf("auth-tls-secret: ca.crl is not PEM revocation lists")
		}
		v.CRLFile = clientCRLFile(certDir, ca.CRL)
	}
	return v, nil
}

// writeClientAuth writes a TLS server's ssl_verify_client part, as
// ingress-nginx's server block.
func writeClientAuth(b *bytes.Buffer, c *clientAuthV) {
	b.WriteString("\n        ssl_client_certificate ")
	b.WriteString(quote(c.File))
	if c.CRLFile != "" {
		b.WriteString(";\n        ssl_crl ")
		b.WriteString(quote(c.CRLFile))
	}
	b.WriteString(";\n        ssl_verify_client ")
	b.WriteString(c.Verify)
	b.WriteString(";\n        ssl_verify_depth ")
	writeInt(b, c.Depth)
	b.WriteByte(';')
	if c.ErrorPage != "" {
		b.WriteString("\n        error_page 495 496 = ")
		b.WriteString(quote(c.ErrorPage))
		b.WriteByte(';')
	}
	if c.MatchCN != "" {
		b.WriteString("\n        if ($ssl_client_s_dn !~ ")
		b.WriteString(quote(c.MatchCN))
		b.WriteString(" ) {\n            return 403 \"client certificate unauthorized\";\n        }")
	}
}

// writeClientAuthHeaders writes, in a location of such a server, the
// fields ingress-nginx sends upstream about the client's certificate, and
// refuses plain HTTP (which no certificate protects).
func writeClientAuthHeaders(b *bytes.Buffer, c *clientAuthV) {
	b.WriteString("\n            if ($scheme = http) {\n                return 403;\n            }")
	if c.Pass {
		b.WriteString("\n            proxy_set_header ssl-client-cert $ssl_client_escaped_cert;")
	}
	b.WriteString("\n            proxy_set_header ssl-client-verify $ssl_client_verify;\n            proxy_set_header ssl-client-subject-dn $ssl_client_s_dn;\n            proxy_set_header ssl-client-issuer-dn $ssl_client_i_dn;")
}
