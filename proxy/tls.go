package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// certTable maps server names to certificates, built from one
// Configuration and swapped atomically: listeners keep running while
// certificates change.
type certTable struct {
	byHost   map[string]*tls.Certificate
	fallback *tls.Certificate
	// clientCAs are the CA pools of the servers with client certificate
	// authentication, by name: their handshakes ask for a certificate.
	clientCAs map[string]*x509.CertPool
}

// certStore holds the current certTable and answers tls.Config's
// GetCertificate.
type certStore struct {
	table atomic.Pointer[certTable]
	// fake is the self-signed certificate served for unknown names when no
	// default certificate is configured (ingress-nginx's "fake certificate").
	fake *tls.Certificate

	// keysMu guards ticketKeys and bases.
	keysMu sync.Mutex
	// ticketKeys are the session ticket keys set by SetSessionTicketKeys;
	// nil: crypto/tls makes and rotates its own, per process.
	ticketKeys [][32]byte
	// bases are the listener configurations made by tlsConfig, which a
	// key change reaches.
	bases []*tls.Config
}

func newCertStore() (*certStore, error) {
	fake, err := selfSigned("Switchyard Fake Certificate")
	if err != nil {
		return nil, err
	}
	s := &certStore{fake: fake}
	s.table.Store(&certTable{byHost: map[string]*tls.Certificate{}, fallback: fake})
	return s, nil
}

// update rebuilds the table. A certificate that does not parse is skipped:
// the builder already reported it; its hosts get the fallback.
func (s *certStore) update(cfg *model.Configuration) {
	parsed := map[string]*tls.Certificate{}
	for uid, c := range cfg.Certificates {
		pair, err := tls.X509KeyPair([]byte(c.PEM), []byte(c.PEM))
		if err != nil {
			continue
		}
		parsed[uid] = &pair
	}
	t := &certTable{byHost: map[string]*tls.Certificate{}, fallback: s.fake, clientCAs: map[string]*x509.CertPool{}}
	if c := parsed[cfg.DefaultCertificate]; c != nil {
		t.fallback = c
	}
	for _, srv := range cfg.Servers {
		if srv.ClientAuth != nil {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM([]byte(srv.ClientAuth.CA))
			t.clientCAs[srv.Hostname] = pool
			for _, a := range srv.Aliases {
				t.clientCAs[a] = pool
			}
		}
		if srv.TLS == nil {
			continue
		}
		c := parsed[srv.TLS.CertificateUID]
		if c == nil {
			continue
		}
		t.byHost[srv.Hostname] = c
		for _, a := range srv.Aliases {
			t.byHost[a] = c
		}
	}
	s.table.Store(t)
}

// getCertificate selects by SNI as ingress-nginx's certificate.lua: exact
// name, then the wildcard for the parent domain, then the default.
func (s *certStore) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	t := s.table.Load()
	name := strings.TrimSuffix(strings.ToLower(hello.ServerName), ".")
	if c := t.byHost[name]; c != nil {
		return c, nil
	}
	if i := strings.IndexByte(name, '.'); i > 0 {
		if c := t.byHost["*"+name[i:]]; c != nil {
			return c, nil
		}
	}
	return t.fallback, nil
}

// tlsConfig is the listener configuration: TLS 1.2+, certificates by SNI,
// and a client certificate asked for (never required by the handshake:
// each request is checked, as nginx checks it) by the servers with client
// certificate authentication.
func (s *certStore) tlsConfig() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.getCertificate}
	base.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		t := s.table.Load()
		if len(t.clientCAs) == 0 {
			return nil, nil
		}
		name := strings.TrimSuffix(strings.ToLower(hello.ServerName), ".")
		pool := t.clientCAs[name]
		if pool == nil {
			if i := strings.IndexByte(name, '.'); i > 0 {
				pool = t.clientCAs["*"+name[i:]]
			}
		}
		if pool == nil {
			return nil, nil
		}
		c := base.Clone()
		c.GetConfigForClient = nil
		c.ClientAuth, c.ClientCAs = tls.RequestClientCert, pool
		return c, nil
	}
	s.keysMu.Lock()
	if s.ticketKeys != nil {
		base.SetSessionTicketKeys(s.ticketKeys)
	}
	s.bases = append(s.bases, base)
	s.keysMu.Unlock()
	return base
}

// SetSessionTicketKeys makes the TLS listeners encrypt session tickets
// with keys[0] and accept tickets sealed with any of them, from now on
// (those already serving too). Processes that serve one port together
// (worker processes) share keys, so a client resumes its session whichever
// of them it reaches. Without a call, crypto/tls makes and rotates keys
// of its own. Empty keys are ignored.
func (p *Proxy) SetSessionTicketKeys(keys [][32]byte) {
	if len(keys) == 0 {
		return
	}
	s := p.certs
	s.keysMu.Lock()
	defer s.keysMu.Unlock()
	s.ticketKeys = slices.Clone(keys)
	for _, b := range s.bases {
		b.SetSessionTicketKeys(s.ticketKeys)
	}
}

func selfSigned(cn string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("proxy: fake certificate key: %w", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn, Organization: []string{"Switchyard"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: []string{"ingress.local"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("proxy: fake certificate: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
