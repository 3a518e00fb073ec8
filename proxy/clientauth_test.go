package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/test/harness"
)

// auth-tls-secret with ca.crl: a revoked certificate gets nginx's 400 "The
// SSL certificate error" under every verify mode; another certificate of
// the CA passes; a list that expired or is not yet valid refuses everyone
// (OpenSSL's "CRL has expired"), as does a CA whose list is missing.
func TestClientAuthRevocation(t *testing.T) {
	ca := harness.NewRevokingCA(t, "Revoking CA")
	stranger := harness.NewRevokingCA(t, "Stranger CA")
	alicePEM, _ := ca.ClientCert(t, "alice")
	bobPEM, _ := ca.ClientCert(t, "bob")
	current := string(ca.CRL(t, alicePEM))
	expired := string(ca.CRLValid(t, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)))
	future := string(ca.CRLValid(t, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)))
	parse := func(p []byte) *x509.Certificate {
		blk, _ := pem.Decode(p)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alice, bob := parse(alicePEM), parse(bobPEM)
	for _, tc := range []struct {
		name       string
		crl        string
		verify     model.ClientVerify
		cert       *x509.Certificate
		wantStatus int
		wantVerify string // ssl-client-verify when let through
	}{
		{"revoked, on", current, model.VerifyOn, alice, 400, ""},
		{"revoked, optional", current, model.VerifyOptional, alice, 400, ""},
		{"revoked, optional_no_ca", current, model.VerifyOptionalNoCA, alice, 400, ""},
		{"not revoked", current, model.VerifyOn, bob, 0, "SUCCESS"},
		{"no CRL: revoked passes", "", model.VerifyOn, alice, 0, "SUCCESS"},
		{"expired CRL", expired, model.VerifyOn, bob, 400, ""},
		{"CRL not yet valid", future, model.VerifyOptional, bob, 400, ""},
		{"only another CA's CRL", string(stranger.CRL(t)), model.VerifyOn, bob, 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClientAuth(&model.ClientAuth{CA: string(ca.PEM), CRL: tc.crl, Verify: tc.verify, Depth: 1})
			if c == nil {
				t.Fatal("newClientAuth refused the settings")
			}
			a := c.check(&tls.ConnectionState{ServerName: "h.example", PeerCertificates: []*x509.Certificate{tc.cert}}, []byte("h.example"))
			if a.v.status != tc.wantStatus {
				t.Fatalf("status %d (%q); want %d", a.v.status, a.v.body, tc.wantStatus)
			}
			if tc.wantStatus == 400 && a.v.body != "400 The SSL certificate error" {
				t.Errorf("body %q; want nginx's", a.v.body)
			}
			if tc.wantStatus == 0 {
				got := ""
				for _, f := range a.fields {
					if f[0] == "ssl-client-verify" {
						got = f[1]
					}
				}
				if got != tc.wantVerify {
					t.Errorf("ssl-client-verify %q; want %q", got, tc.wantVerify)
				}
			}
		})
	}
	if newClientAuth(&model.ClientAuth{CA: string(ca.PEM), CRL: "not a CRL", Verify: model.VerifyOn, Depth: 1}) != nil {
		t.Error("a CRL that does not parse was accepted; want the server failed closed (nil)")
	}
}
