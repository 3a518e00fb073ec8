package nginxcompat

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// fakeCertificateUID names the self-signed certificate nginx serves on the
// HTTPS port where no Secret gives one and --default-ssl-certificate is
// unset: the catch-all server and every server without spec.tls, as
// ingress-nginx serves its "fake certificate" there, and as the Go plane
// serves its own.
const fakeCertificateUID = "switchyard-fake-certificate"

// withFakeCertificate is cfg with the fake certificate as its default
// certificate, unless it has one. Without it a server lacking spec.tls had
// no HTTPS listener, so its HTTPS requests reached whichever TLS server
// nginx listed first (an auth-tls one answered 400).
func (c *Controller) withFakeCertificate(cfg *model.Configuration) *model.Configuration {
	if cfg.DefaultCertificate != "" {
		return cfg
	}
	out := *cfg
	out.Certificates = maps.Clone(cfg.Certificates)
	if out.Certificates == nil {
		out.Certificates = map[string]model.Certificate{}
	}
	out.Certificates[fakeCertificateUID] = model.Certificate{UID: fakeCertificateUID, PEM: c.fake}
	out.DefaultCertificate = fakeCertificateUID
	return &out
}

// fakeCertificatePEM makes the fake certificate: self-signed, ECDSA P-256,
// "Switchyard Fake Certificate" for ingress.local (the Go plane's), chain
// then key as model.Certificate.PEM holds them.
func fakeCertificatePEM() (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", fmt.Errorf("nginxcompat: fake certificate key: %w", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Switchyard Fake Certificate", Organization: []string{"Switchyard"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: []string{"ingress.local"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", fmt.Errorf("nginxcompat: fake certificate: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", fmt.Errorf("nginxcompat: fake certificate key: %w", err)
	}
	var b bytes.Buffer
	_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	_ = pem.Encode(&b, &pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	return b.String(), nil
}
