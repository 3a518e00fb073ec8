package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/test/harness"
)

// BenchmarkClientAuthCheck is the per-request cost of client certificate
// authentication on the Go plane: check runs for every request of a
// connection (nginx verifies once per handshake).
func BenchmarkClientAuthCheck(b *testing.B) {
	ca := harness.NewCA(b, "Bench CA")
	certPEM, _ := ca.ClientCert(b, "alice")
	blk, _ := pem.Decode(certPEM)
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		b.Fatal(err)
	}
	c := newClientAuth(&model.ClientAuth{CA: string(ca.PEM), Verify: model.VerifyOn, Depth: 1})
	state := &tls.ConnectionState{ServerName: "h.example", PeerCertificates: []*x509.Certificate{leaf}}
	host := []byte("h.example")
	b.ReportAllocs()
	for b.Loop() {
		if a := c.check(state, host); a.v.status != 0 {
			b.Fatalf("status %d", a.v.status)
		}
	}
}

// TestClientAuthVerifyCache: answers are cached per chain (a revoked and a
// good certificate keep their own answers, in any order), never past what
// could change them (the leaf's expiry, the list's next update), and a
// cached answer past its time is verified again.
func TestClientAuthVerifyCache(t *testing.T) {
	ca := harness.NewRevokingCA(t, "Cache CA")
	alicePEM, _ := ca.ClientCert(t, "alice")
	bobPEM, _ := ca.ClientCert(t, "bob")
	parse := func(p []byte) *x509.Certificate {
		blk, _ := pem.Decode(p)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alice, bob := parse(alicePEM), parse(bobPEM)
	c := newClientAuth(&model.ClientAuth{CA: string(ca.PEM), CRL: string(ca.CRL(t, alicePEM)), Verify: model.VerifyOn, Depth: 1})
	check := func(cert *x509.Certificate) int {
		return c.check(&tls.ConnectionState{ServerName: "h.example", PeerCertificates: []*x509.Certificate{cert}}, []byte("h.example")).v.status
	}
	for i, want := range []struct {
		cert   *x509.Certificate
		status int
	}{{alice, 400}, {bob, 0}, {alice, 400}, {bob, 0}} {
		if got := check(want.cert); got != want.status {
			t.Fatalf("check %d: status %d; want %d", i, got, want.status)
		}
	}
	if len(c.verified) != 2 {
		t.Fatalf("%d cached answers for 2 certificates", len(c.verified))
	}
	a := c.verified[string(bob.Raw)]
	if a.until.After(bob.NotAfter) || a.until.After(c.crls[0].NextUpdate) || time.Until(a.until) > verifyTTL {
		t.Fatalf("bob's answer kept until %v: past the leaf's %v, the list's %v or the TTL", a.until, bob.NotAfter, c.crls[0].NextUpdate)
	}
	// An answer past its time is not used: a wrong one planted there is
	// replaced by a fresh verification.
	c.verified[string(bob.Raw)] = verifyAnswer{err: errors.New("planted"), until: time.Now().Add(-time.Second)}
	if got := check(bob); got != 0 {
		t.Fatalf("an expired cached answer was used: status %d", got)
	}
}
