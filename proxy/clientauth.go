package proxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// Client certificate authentication (auth-tls-*), as nginx's
// ssl_verify_client runs it in ingress-nginx's server block: the handshake
// asks for a certificate (and never fails for want of one); each request is
// then answered 400 when the certificate is missing or does not verify, as
// nginx answers after reading the request head.

// clientAuth is a server's ClientAuth, parsed once per Configuration.
type clientAuth struct {
	cfg   *model.ClientAuth
	pool  *x509.CertPool
	match *regexp.Regexp // auth-tls-match-cn; nil without
	// crls are ca.crl's revocation lists; nil: no revocation check.
	crls []*x509.RevocationList

	// verified caches verify's answers by the chain's certificates, so a
	// connection's requests verify its chain once, as nginx verifies once
	// per handshake (a verification cost 65 µs and 66 allocations per
	// request: BenchmarkClientAuthCheck). An answer is kept at most
	// verifyTTL, and never past the moment it could change (the leaf's
	// validity, the next update of a revocation list).
	mu       sync.RWMutex
	verified map[string]verifyAnswer
}

// verifyAnswer is a cached outcome of verify, with what the answer's
// upstream fields need of the leaf.
type verifyAnswer struct {
	err             error
	subject, issuer string
	escapedPEM      string // ssl-client-cert, when passed upstream
	until           time.Time
}

const (
	// verifyTTL bounds how long a verification is reused.
	verifyTTL = time.Minute
	// verifyCacheMax bounds the cached verifications of one server; past
	// it the cache starts over.
	verifyCacheMax = 4096
)

// cachedVerify is verify, reusing an answer for the same chain.
func (c *clientAuth) cachedVerify(chain []*x509.Certificate) verifyAnswer {
	now := time.Now()
	leaf := chain[0]
	c.mu.RLock()
	var a verifyAnswer
	var ok bool
	if len(chain) == 1 {
		a, ok = c.verified[string(leaf.Raw)] // no allocation for the lookup
	} else {
		a, ok = c.verified[chainKey(chain)]
	}
	c.mu.RUnlock()
	if ok && now.Before(a.until) {
		return a
	}
	a = verifyAnswer{err: c.verify(chain), subject: leaf.Subject.String(), issuer: leaf.Issuer.String()}
	if c.cfg.PassCertificate {
		p := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw})
		a.escapedPEM = string(appendEscaped(nil, string(p), nginxUnescaped))
	}
	until := now.Add(verifyTTL)
	for _, t := range []time.Time{leaf.NotAfter, leaf.NotBefore} {
		if now.Before(t) && t.Before(until) {
			until = t
		}
	}
	for _, crl := range c.crls {
		if !crl.NextUpdate.IsZero() && now.Before(crl.NextUpdate) && crl.NextUpdate.Before(until) {
			until = crl.NextUpdate
		}
	}
	c.mu.Lock()
	if c.verified == nil || len(c.verified) >= verifyCacheMax {
		c.verified = make(map[string]verifyAnswer)
	}
	a.until = until
	c.verified[chainKey(chain)] = a
	c.mu.Unlock()
	return a
}

// chainKey is the cache key of a chain: its certificates' DER, each with its
// length first.
func chainKey(chain []*x509.Certificate) string {
	if len(chain) == 1 {
		return string(chain[0].Raw)
	}
	var b strings.Builder
	for i, cert := range chain {
		if i > 0 {
			b.WriteString(strconv.Itoa(len(cert.Raw)))
			b.WriteByte(':')
		}
		b.Write(cert.Raw)
	}
	return b.String()
}

func newClientAuth(ca *model.ClientAuth) *clientAuth {
	c := &clientAuth{cfg: ca, pool: x509.NewCertPool()}
	if !c.pool.AppendCertsFromPEM([]byte(ca.CA)) {
		return nil // the builder validated it; nil fails the server closed
	}
	for rest := []byte(ca.CRL); ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			if len(strings.TrimSpace(string(rest))) != 0 {
				return nil
			}
			break
		}
		crl, err := x509.ParseRevocationList(blk.Bytes)
		if blk.Type != "X509 CRL" || err != nil {
			return nil
		}
		c.crls = append(c.crls, crl)
	}
	if ca.CRL != "" && len(c.crls) == 0 {
		return nil
	}
	if ca.MatchCN != nil {
		if c.match = ca.MatchCN.Compiled(); c.match == nil {
			return nil
		}
	}
	return c
}

// certAnswer is what the certificate check decided for one request.
type certAnswer struct {
	v verdict
	// fields are the ssl-client-* fields sent upstream.
	fields [][2]string
}

// check verifies the client's certificate for a request to a server with
// client authentication. state is nil for plain HTTP; host is the request's
// host, lower case without the port.
func (c *clientAuth) check(state *tls.ConnectionState, host []byte) certAnswer {
	if state == nil {
		// No certificate protects plain HTTP: auth-tls-match-cn refuses it
		// in the server's rewrite phase, as nginx's `if`; otherwise the
		// location refuses it after its redirects (refusePlain).
		if c.match != nil {
			return certAnswer{v: verdict{status: 403, body: "client certificate unauthorized"}}
		}
		return certAnswer{}
	}
	if sni := strings.TrimSuffix(strings.ToLower(state.ServerName), "."); sni != string(host) {
		// The handshake was another server's, which may not have asked for
		// a certificate: nginx answers 421.
		return certAnswer{v: verdict{status: 421}}
	}
	verify, subject, issuer, escapedPEM := "NONE", "", "", ""
	var verr error
	if len(state.PeerCertificates) > 0 {
		a := c.cachedVerify(state.PeerCertificates)
		subject, issuer, escapedPEM, verr = a.subject, a.issuer, a.escapedPEM, a.err
		verify = "SUCCESS"
		if verr != nil {
			verify = "FAILED:" + verr.Error()
		}
	}
	fail := ""
	switch {
	case verify == "NONE" && c.cfg.Verify == model.VerifyOn:
		fail = "No required SSL certificate was sent"
	case strings.HasPrefix(verify, "FAILED:") && (c.cfg.Verify != model.VerifyOptionalNoCA || errors.As(verr, new(revocationError))):
		// optional_no_ca forgives an unknown issuer only (nginx's
		// ngx_ssl_verify_error_optional), not a revoked certificate.
		fail = "The SSL certificate error"
	}
	if fail != "" {
		if c.cfg.ErrorPage != "" {
			return certAnswer{v: verdict{status: 302, location: c.cfg.ErrorPage}}
		}
		return certAnswer{v: verdict{status: 400, body: "400 " + fail}}
	}
	if c.match != nil && !c.match.MatchString(subject) {
		return certAnswer{v: verdict{status: 403, body: "client certificate unauthorized"}}
	}
	a := certAnswer{fields: make([][2]string, 0, 4)}
	if c.cfg.PassCertificate && escapedPEM != "" {
		a.fields = append(a.fields, [2]string{"ssl-client-cert", escapedPEM})
	}
	a.fields = append(a.fields, [2]string{"ssl-client-verify", verify}, [2]string{"ssl-client-subject-dn", subject},
		[2]string{"ssl-client-issuer-dn", issuer})
	return a
}

// verify checks chain (the client's certificate first) against the CA
// bundle within ssl_verify_depth, and names a failure as OpenSSL's
// X509_verify_cert_error_string does for the common cases.
func (c *clientAuth) verify(chain []*x509.Certificate) error {
	inter := x509.NewCertPool()
	for _, cert := range chain[1:] {
		inter.AddCert(cert)
	}
	leaf := chain[0]
	now := time.Now()
	if now.After(leaf.NotAfter) {
		return errors.New("certificate has expired")
	}
	if now.Before(leaf.NotBefore) {
		return errors.New("certificate is not yet valid")
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: c.pool, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		var ua x509.UnknownAuthorityError
		if errors.As(err, &ua) {
			switch {
			case len(chain) == 1 && leaf.CheckSignatureFrom(leaf) == nil:
				return errors.New("self-signed certificate")
			case len(chain) == 1:
				// OpenSSL's X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE
				// (measured in TestControllerClientCertificates).
				return errors.New("unable to verify the first certificate")
			}
			return errors.New("unable to get local issuer certificate")
		}
		return errors.New("certificate verify failed")
	}
	for _, ch := range chains {
		// ssl_verify_depth N: at most N certificates above the client's.
		if len(ch)-1 <= c.cfg.Depth {
			return c.revoked(ch, now)
		}
	}
	return errors.New("certificate chain too long")
}

// revocationError is a failed revocation check: it refuses the client
// under every auth-tls-verify-client mode, as nginx's does.
type revocationError string

func (e revocationError) Error() string { return string(e) }

// revoked checks a verified chain (the client's certificate first, the CA's
// last) against ca.crl as nginx's ssl_crl has OpenSSL do it
// (X509_V_FLAG_CRL_CHECK_ALL): each certificate, the CA's included, needs a
// revocation list of its issuer, signed by it and current, that does not
// list it. The messages are OpenSSL's.
func (c *clientAuth) revoked(chain []*x509.Certificate, now time.Time) error {
	if len(c.crls) == 0 {
		return nil
	}
	for i, cert := range chain {
		issuer := cert
		if i+1 < len(chain) {
			issuer = chain[i+1]
		}
		var crl *x509.RevocationList
		for _, l := range c.crls {
			if bytes.Equal(l.RawIssuer, cert.RawIssuer) && l.CheckSignatureFrom(issuer) == nil {
				crl = l
				break
			}
		}
		switch {
		case crl == nil:
			return revocationError("unable to get certificate CRL")
		case now.Before(crl.ThisUpdate):
			return revocationError("CRL is not yet valid")
		case !crl.NextUpdate.IsZero() && now.After(crl.NextUpdate):
			return revocationError("CRL has expired")
		}
		for _, r := range crl.RevokedCertificateEntries {
			if r.SerialNumber.Cmp(cert.SerialNumber) == 0 {
				return revocationError("certificate revoked")
			}
		}
	}
	return nil
}
