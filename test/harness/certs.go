package harness

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

// SelfSignedPEM returns a PEM certificate for host, valid for an hour either
// side of now, and its P-256 key, as a kubernetes.io/tls Secret holds them.
func SelfSignedPEM(t testing.TB, host string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return SelfSignedPEMWithKey(t, host, key)
}

// SelfSignedPEMWithKey is SelfSignedPEM with the given key (written as
// PKCS #8, "PRIVATE KEY").
func SelfSignedPEMWithKey(t testing.TB, host string, key crypto.Signer) (certPEM, keyPEM []byte) {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})
}

// CA is a certificate authority for tests: it signs client certificates.
type CA struct {
	// PEM is the CA's certificate.
	PEM  []byte
	cert *x509.Certificate
	key  crypto.Signer
	// parent is the CA that signed this one (Intermediate); nil for a root.
	parent *CA
}

// NewCA makes a CA named cn, valid for an hour either side of now.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	return makeCA(t, cn, x509.KeyUsageCertSign|x509.KeyUsageDigitalSignature, nil)
}

// makeCA makes a CA named cn with key usage usage, signed by parent (nil:
// self-signed), valid for an hour either side of now.
func makeCA(t testing.TB, cn string, usage x509.KeyUsage, parent *CA) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn, Organization: []string{"Switchyard Test"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: usage}
	signer, signerKey := tmpl, crypto.Signer(key)
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, key.Public(), signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key, parent: parent}
}

// ClientCert issues a client certificate (extended key usage clientAuth)
// with subject CN=cn, O=Switchyard Test, as a tls.Certificate's PEM parts.
func (ca *CA) ClientCert(t testing.TB, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	return ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: cn, Organization: []string{"Switchyard Test"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

// issue signs a leaf certificate of tmpl (serial, validity and key usage
// filled in) with a new key, as a tls.Certificate's PEM parts; certPEM is
// the leaf followed by the CA's own certificate when the CA is an
// intermediate, as a server sends its chain.
func (ca *CA) issue(t testing.TB, tmpl *x509.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if ca.parent != nil {
		certPEM = append(certPEM, ca.PEM...)
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})
}

// NewRevokingCA makes a CA as NewCA does whose certificate may also sign
// certificate revocation lists (key usage cRLSign), for CRL.
func NewRevokingCA(t testing.TB, cn string) *CA {
	t.Helper()
	return makeCA(t, cn, x509.KeyUsageCertSign|x509.KeyUsageCRLSign|x509.KeyUsageDigitalSignature, nil)
}

// CRL is a certificate revocation list of the CA, PEM ("X509 CRL"), current
// for an hour either side of now, listing the certificates given as PEM
// (ClientCert's certPEM).
func (ca *CA) CRL(t testing.TB, revoked ...[]byte) []byte {
	t.Helper()
	return ca.CRLValid(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), revoked...)
}

// CRLValid is CRL with thisUpdate and nextUpdate as given (an expired or
// not yet valid list).
func (ca *CA) CRLValid(t testing.TB, thisUpdate, nextUpdate time.Time, revoked ...[]byte) []byte {
	t.Helper()
	tmpl := &x509.RevocationList{Number: big.NewInt(time.Now().UnixNano()), ThisUpdate: thisUpdate, NextUpdate: nextUpdate}
	for _, p := range revoked {
		blk, _ := pem.Decode(p)
		if blk == nil {
			t.Fatal("CRL: a revoked certificate is not PEM")
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries,
			x509.RevocationListEntry{SerialNumber: c.SerialNumber, RevocationTime: time.Now().Add(-time.Minute)})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, ca.cert, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der})
}

// ServerCert issues a server certificate (extended key usage serverAuth)
// for the DNS names, as a tls.Certificate's PEM parts; certPEM is the leaf
// followed by the CA's own certificate when the CA is an intermediate
// (Intermediate), as a server sends its chain.
func (ca *CA) ServerCert(t testing.TB, names ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	return ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: names[0], Organization: []string{"Switchyard Test"}},
		DNSNames: names, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
}

// Intermediate makes a CA named cn that ca signs: certificates it issues
// chain to ca through it.
func (ca *CA) Intermediate(t testing.TB, cn string) *CA {
	t.Helper()
	return makeCA(t, cn, x509.KeyUsageCertSign|x509.KeyUsageDigitalSignature, ca)
}
