package proxy

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// upstreamTLS is a location's proxy-ssl-* as a client TLS configuration,
// made when a configuration is loaded. id names it in the keep-alive pool
// key, so locations with other TLS settings never share a connection.
type upstreamTLS struct {
	id   string
	conf *tls.Config
	// err, when set, is why conf could not be made: every connection
	// fails with it (never an unverified one instead).
	err error
}

// newUpstreamTLS makes the client configuration of u as nginx's proxy_ssl_*
// directives behave: no SNI unless proxy-ssl-server-name; with
// proxy-ssl-verify, the chain checked against the Secret's ca.crt, the
// name against proxy-ssl-name (else upstream_balancer) and at most
// proxy-ssl-verify-depth CA certificates between the upstream's own and the
// trusted one (OpenSSL's verify depth); the Secret's key pair as client
// certificate; sessions resumed, as proxy_ssl_session_reuse on.
func newUpstreamTLS(u *model.UpstreamTLS) *upstreamTLS {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%t\x00%d\x00%s\x00%t\x00%v\x00%v", u.CA, u.CertificateKey, u.Verify, u.VerifyDepth,
		u.Name, u.ServerName, u.Protocols, u.CipherSuites)
	ut := &upstreamTLS{id: hex.EncodeToString(h.Sum(nil)[:12])}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(u.CA)) {
		ut.err = errors.New("proxy-ssl-secret: ca.crt holds no certificate")
		return ut
	}
	conf := &tls.Config{
		// Verified below as nginx does (Go's own check would tie the
		// name checked to the SNI sent).
		InsecureSkipVerify: true, // #nosec G402 -- VerifyConnection
		CipherSuites:       u.CipherSuites,
		ClientSessionCache: tls.NewLRUClientSessionCache(64),
		MinVersion:         tls.VersionTLS12,
		MaxVersion:         tls.VersionTLS13,
	}
	if len(u.Protocols) > 0 {
		conf.MinVersion, conf.MaxVersion = tls.VersionTLS13, tls.VersionTLS12
		for _, p := range u.Protocols {
			v := uint16(tls.VersionTLS12)
			if p == "TLSv1.3" {
				v = tls.VersionTLS13
			}
			conf.MinVersion, conf.MaxVersion = min(conf.MinVersion, v), max(conf.MaxVersion, v)
		}
	}
	if u.ServerName {
		conf.ServerName = u.VerifyName()
	}
	if u.CertificateKey != "" {
		pair, err := tls.X509KeyPair([]byte(u.CertificateKey), []byte(u.CertificateKey))
		if err != nil {
			ut.err = fmt.Errorf("proxy-ssl-secret: client certificate: %w", err)
			return ut
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	if u.Verify {
		name, depth := u.VerifyName(), u.VerifyDepth
		conf.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyUpstream(cs.PeerCertificates, roots, name, depth)
		}
	}
	ut.conf = conf
	return ut
}

// verifyUpstream checks an upstream's chain as nginx's proxy_ssl_verify:
// to a certificate of roots, for name, with at most depth CA certificates
// between the upstream's and the trusted one.
func verifyUpstream(certs []*x509.Certificate, roots *x509.CertPool, name string, depth int) error {
	if len(certs) == 0 {
		return errors.New("upstream SSL certificate verify error: no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	chains, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: name,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		return fmt.Errorf("upstream SSL certificate verify error: %w", err)
	}
	for _, ch := range chains {
		// OpenSSL's levels: 0 the upstream, up to depth+1 the trust
		// anchor.
		if len(ch) <= depth+2 {
			return nil
		}
	}
	return fmt.Errorf("upstream SSL certificate verify error: certificate chain too long (proxy-ssl-verify-depth %d)", depth)
}

// upstreamLogAt throttles the log of upstream faults (a failed TLS
// handshake, a head too big) to one line a second for the whole process: a
// dead or misconfigured upstream under load must not flood the log.
var upstreamLogAt atomic.Int64

// logUpstream writes what went wrong with the upstream addr, at most once
// a second, to w (nil: nowhere).
func logUpstream(w func(string), addr string, err error) {
	if w == nil {
		return
	}
	now := time.Now().Unix()
	last := upstreamLogAt.Load()
	if now == last || !upstreamLogAt.CompareAndSwap(last, now) {
		return
	}
	w("upstream " + addr + ": " + strings.TrimPrefix(err.Error(), "tls: "))
}
