package k8s

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the generated files and tokens of one cluster.
type pki struct {
	caCert, serverCert, serverKey, saKey, saPub, tokenFile string
	caPEM                                                  []byte
	tokens                                                 tokens
}

// newPKI writes into dir a CA, a serving certificate for ip and the
// in-cluster names, an RSA service-account key pair, and a static token file
// with the three identities.
func newPKI(dir, ip string) (*pki, error) {
	p := &pki{
		caCert: filepath.Join(dir, "ca.crt"), serverCert: filepath.Join(dir, "server.crt"),
		serverKey: filepath.Join(dir, "server.key"), saKey: filepath.Join(dir, "sa.key"),
		saPub: filepath.Join(dir, "sa.pub"), tokenFile: filepath.Join(dir, "tokens.csv"),
	}
	var err error
	for _, tok := range []*string{&p.tokens.admin, &p.tokens.controller, &p.tokens.nobody} {
		if *tok, err = randToken(); err != nil {
			return nil, err
		}
	}
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "switchyard-e2e-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	srvKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP(ip), net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create serving certificate: %w", err)
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generate service-account key: %w", err)
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("marshal service-account public key: %w", err)
	}
	// Token file rows: token,user,uid[,"group1,group2"].
	tokenCSV := fmt.Sprintf("%s,admin,admin-uid,system:masters\n%s,%s,controller-uid\n%s,nobody,nobody-uid\n",
		p.tokens.admin, p.tokens.controller, ControllerUser, p.tokens.nobody)
	files := []struct {
		path string
		data []byte
	}{
		{p.caCert, p.caPEM},
		{p.serverCert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER})},
		{p.serverKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(srvKey)})},
		{p.saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)})},
		{p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub})},
		{p.tokenFile, []byte(tokenCSV)},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	return p, nil
}

func randToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("read random token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
