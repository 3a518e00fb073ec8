package admission

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writePair writes a self-signed certificate for localhost with the given
// serial and its key to dir, replacing them by rename as a Secret volume
// update does.
func writePair(t *testing.T, dir string, serial int64) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "webhook"},
		DNSNames: []string{"localhost"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert"), filepath.Join(dir, "key")
	for _, f := range []struct {
		path string
		data []byte
	}{
		{certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})},
		{keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})},
	} {
		if err := os.WriteFile(f.path+".new", f.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(f.path+".new", f.path); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// handshakeSerial connects to addr with TLS (maxVersion 0: the default)
// and returns the serial of the certificate served.
func handshakeSerial(t *testing.T, addr string, maxVersion uint16) (int64, error) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: maxVersion}) //nolint:gosec // the test reads the served certificate
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

func TestCertReloader(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writePair(t, dir, 1)
	r, err := NewCertReloader(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	r.interval = 0 // look at the files on every handshake
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	if got, err := handshakeSerial(t, addr, 0); err != nil || got != 1 {
		t.Fatalf("first certificate: serial %d, %v; want 1", got, err)
	}
	writePair(t, dir, 2)
	if got, err := handshakeSerial(t, addr, 0); err != nil || got != 2 {
		t.Fatalf("after rotation: serial %d, %v; want 2", got, err)
	}
	// A half-written rotation keeps the last good pair.
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := handshakeSerial(t, addr, 0); err != nil || got != 2 {
		t.Fatalf("after a broken key: serial %d, %v; want 2 still", got, err)
	}
	if _, err := handshakeSerial(t, addr, tls.VersionTLS11); err == nil {
		t.Error("a TLS 1.1 client completed a handshake; want TLS 1.2 at least")
	}
	if _, err := NewCertReloader(certFile, keyFile); err == nil {
		t.Error("NewCertReloader accepted a broken key")
	}
}
