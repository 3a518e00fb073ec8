package builder

import (
	"crypto/tls"
	"fmt"
	"regexp"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// proxySSLAnnotations are proxy-ssl-* before the Secret is looked up.
type proxySSLAnnotations struct {
	secret     string
	verify     bool
	depth      int
	name       string
	serverName bool
	protocols  []string
	ciphers    string
}

var proxySSLKin = []string{"proxy-ssl-verify", "proxy-ssl-verify-depth", "proxy-ssl-name",
	"proxy-ssl-server-name", "proxy-ssl-protocols", "proxy-ssl-ciphers"}

// parseProxySSL reads proxy-ssl-secret and its kin with ingress-nginx's
// defaults (verify off, depth 1, no name, server name off, TLSv1.2,
// DEFAULT); nil without the secret, each kin present then reported as
// having no effect, as in ingress-nginx. An invalid proxy-ssl-secret or
// proxy-ssl-verify fails the Ingress closed (a user who asked for
// verification is never served unverified; ingress-nginx would serve it
// without); another invalid value is reported and its default kept.
func parseProxySSL(get func(string) (string, bool), bad func(string, string, ...any), warn, failClosed func(string, string),
	integer func(string, int, int) (int, bool)) *proxySSLAnnotations {
	secret, ok := get("proxy-ssl-secret")
	if !ok {
		for _, k := range proxySSLKin {
			if _, ok := get(k); ok {
				warn(k, "has no effect without proxy-ssl-secret (as in ingress-nginx); ignored")
			}
		}
		return nil
	}
	secret = strings.TrimSpace(secret)
	if !reObjectRef.MatchString(secret) {
		failClosed("proxy-ssl-secret", fmt.Sprintf("%q is not a Secret name or namespace/name", secret))
		return nil
	}
	p := &proxySSLAnnotations{secret: secret, depth: 1, protocols: []string{"TLSv1.2"}, ciphers: "DEFAULT"}
	onOff := func(key string, invalid func(string)) bool {
		v, ok := get(key)
		if ok && v != "on" && v != "off" {
			invalid(fmt.Sprintf("%q is not on or off", v))
			return false
		}
		return v == "on"
	}
	verifyInvalid := false
	p.verify = onOff("proxy-ssl-verify", func(msg string) {
		verifyInvalid = true
		failClosed("proxy-ssl-verify", msg)
	})
	if verifyInvalid {
		return nil
	}
	p.serverName = onOff("proxy-ssl-server-name", func(msg string) { bad("proxy-ssl-server-name", "%s", msg) })
	if n, ok := integer("proxy-ssl-verify-depth", 0, 100); ok {
		p.depth = n
	}
	if v, ok := get("proxy-ssl-name"); ok {
		if err := validateHost(v); err != nil || strings.HasPrefix(v, "*.") {
			bad("proxy-ssl-name", "%q is not a server name", v)
		} else {
			p.name = v
		}
	}
	if v, ok := get("proxy-ssl-protocols"); ok {
		var ps []string
		for _, f := range strings.Fields(v) {
			if f != "TLSv1.2" && f != "TLSv1.3" {
				ps = nil
				break
			}
			if !slices.Contains(ps, f) {
				ps = append(ps, f)
			}
		}
		if len(ps) == 0 {
			bad("proxy-ssl-protocols", "%q is not TLSv1.2, TLSv1.3 or both", v)
		} else {
			slices.Sort(ps)
			p.protocols = ps
		}
	}
	if v, ok := get("proxy-ssl-ciphers"); ok {
		if v == "" || !reProxySSLCiphers.MatchString(v) {
			bad("proxy-ssl-ciphers", "%q is not an OpenSSL cipher list", v)
		} else {
			p.ciphers = v
		}
	}
	return p
}

// reProxySSLCiphers is ingress-nginx's grammar of proxy-ssl-ciphers.
var reProxySSLCiphers = regexp.MustCompile(`^[A-Za-z0-9+:_\-!]+$`)

// upstreamTLS looks up proxy-ssl-secret for ing (in its namespace, as
// ingress-nginx allows by default): ca.crt must be PEM certificates; tls.crt
// and tls.key, when present, a key pair sent as the client certificate.
// The Ingress's locations fail closed on an error, as ingress-nginx denies
// them. warn reports what the Go data plane cannot carry out.
func (b *builder) upstreamTLS(ing *networkingv1.Ingress, p *proxySSLAnnotations, warn func(string, string)) (*model.UpstreamTLS, error) {
	sec, err := b.ingressSecret(ing, p.secret)
	if err != nil {
		return nil, err
	}
	ca := sec.Data["ca.crt"]
	if err := validCABundle(ca); err != nil {
		return nil, fmt.Errorf("secret %s/%s: ca.crt %v", sec.Namespace, sec.Name, err)
	}
	u := &model.UpstreamTLS{
		Secret: model.ObjectRef{Kind: "Secret", Namespace: sec.Namespace, Name: sec.Name, UID: string(sec.UID)},
		CA:     string(ca), Verify: p.verify, VerifyDepth: p.depth, Name: p.name, ServerName: p.serverName,
		Protocols: p.protocols, Ciphers: p.ciphers,
	}
	crt, key := sec.Data["tls.crt"], sec.Data["tls.key"]
	switch {
	case len(crt) > 0 && len(key) > 0:
		if _, err := tls.X509KeyPair(crt, key); err != nil {
			return nil, fmt.Errorf("secret %s/%s: tls.crt and tls.key are not a key pair: %v", sec.Namespace, sec.Name, err)
		}
		u.CertificateKey = strings.TrimRight(string(crt), "\n") + "\n" + strings.TrimRight(string(key), "\n") + "\n"
	case len(crt) > 0 || len(key) > 0:
		return nil, fmt.Errorf("secret %s/%s holds only one of tls.crt and tls.key", sec.Namespace, sec.Name)
	}
	if p.ciphers != "DEFAULT" {
		suites, ok := goCipherSuites(p.ciphers)
		if ok {
			u.CipherSuites = suites
		} else {
			warn("proxy-ssl-ciphers", fmt.Sprintf("%q names ciphers Go's TLS does not know by name; the Go data plane uses Go's default TLS 1.2 suites (the nginx plane uses the list)", p.ciphers))
		}
	}
	return u, nil
}

// goCipherSuites maps an OpenSSL list of TLS 1.2 suite names
// (ECDHE-RSA-AES128-GCM-SHA256:...) to Go's suite IDs; false when a word is
// not such a name (DEFAULT, HIGH, !aNULL, ...).
func goCipherSuites(list string) ([]uint16, bool) {
	var out []uint16
	for _, w := range strings.Split(list, ":") {
		id, ok := openSSLSuites[w]
		if !ok {
			return nil, false
		}
		out = append(out, id)
	}
	return out, len(out) > 0
}

// openSSLSuites are OpenSSL's names of the TLS 1.2 suites Go implements
// securely.
var openSSLSuites = map[string]uint16{
	"ECDHE-ECDSA-AES128-GCM-SHA256": tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	"ECDHE-RSA-AES128-GCM-SHA256":   tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	"ECDHE-ECDSA-AES256-GCM-SHA384": tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	"ECDHE-RSA-AES256-GCM-SHA384":   tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	"ECDHE-ECDSA-CHACHA20-POLY1305": tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	"ECDHE-RSA-CHACHA20-POLY1305":   tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
	"ECDHE-ECDSA-AES128-SHA":        tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
	"ECDHE-RSA-AES128-SHA":          tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
	"ECDHE-ECDSA-AES256-SHA":        tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
	"ECDHE-RSA-AES256-SHA":          tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
}
