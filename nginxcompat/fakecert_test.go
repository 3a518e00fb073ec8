package nginxcompat

import (
	"crypto/tls"
	"slices"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// Every server listens on the HTTPS port, with its own certificate or the
// default one; Strict-Transport-Security and ssl-redirect belong to a
// server with a certificate of its own only (as on the Go plane).
func TestRenderEveryServerServesHTTPS(t *testing.T) {
	loc := func(ing string) model.Location {
		return model.Location{Path: "/", PathType: model.PathTypePrefix, Backend: "be", LocationSettings: &model.LocationSettings{Rewrite: model.Rewrite{SSLRedirect: true}},
			Ingress: model.ObjectRef{Kind: "Ingress", Namespace: "ns", Name: ing}}
	}
	cfg := &model.Configuration{
		Global: model.Global{HSTS: true, HSTSMaxAgeSeconds: 60, SSLRedirect: true},
		Servers: []model.Server{
			{Hostname: "_", Locations: []model.Location{{Path: "/", Backend: model.DefaultBackendName}}},
			{Hostname: "own.example", TLS: &model.ServerTLS{CertificateUID: "own"}, Locations: []model.Location{loc("own")}},
			{Hostname: "plain.example", Locations: []model.Location{loc("plain")}},
		},
		Certificates:       map[string]model.Certificate{"own": {UID: "own", PEM: "own-pem"}, "def": {UID: "def", PEM: "def-pem"}},
		DefaultCertificate: "def",
	}
	_, ds := renderParsed(t, cfg)
	type server struct {
		ssl, hsts, redirect bool
		cert                string
	}
	got := map[string]*server{}
	walk(ds, func(d, parent *directive) {
		if d.Name != "server" || !d.IsBlock {
			return
		}
		var name string
		s := &server{}
		walk(d.Block, func(e, _ *directive) {
			switch e.Name {
			case "server_name":
				name = e.Args[0]
			case "listen":
				s.ssl = s.ssl || slices.Contains(e.Args, "ssl")
			case "ssl_certificate":
				s.cert = e.Args[0]
			case "add_header":
				s.hsts = s.hsts || e.Args[0] == "Strict-Transport-Security"
			case "return":
				s.redirect = s.redirect || e.Args[0] == "308"
			}
		})
		got[name] = s
	})
	dir := goldenRenderConfig.withDefaults().CertDir
	for name, want := range map[string]server{
		"_":             {ssl: true, cert: certFile(dir, "def", "def-pem")},
		"own.example":   {ssl: true, hsts: true, redirect: true, cert: certFile(dir, "own", "own-pem")},
		"plain.example": {ssl: true, cert: certFile(dir, "def", "def-pem")},
	} {
		if s := got[name]; s == nil || *s != want {
			t.Errorf("server %s: %+v; want %+v", name, s, want)
		}
	}
}

// Without --default-ssl-certificate, nginx serves a self-signed fake
// certificate where no Secret gives one; with it, that one.
func TestWithFakeCertificate(t *testing.T) {
	pem, err := fakeCertificatePEM()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair([]byte(pem), []byte(pem)); err != nil {
		t.Fatalf("the fake certificate does not load: %v", err)
	}
	c := &Controller{fake: pem}
	cfg := &model.Configuration{Certificates: map[string]model.Certificate{"own": {UID: "own", PEM: "x"}}}
	out := c.withFakeCertificate(cfg)
	if out.DefaultCertificate != fakeCertificateUID || out.Certificates[fakeCertificateUID].PEM != pem || out.Certificates["own"].PEM != "x" {
		t.Fatalf("default %q, certificates %v", out.DefaultCertificate, out.Certificates)
	}
	if cfg.DefaultCertificate != "" || len(cfg.Certificates) != 1 {
		t.Fatal("the snapshot itself was changed")
	}
	cfg.DefaultCertificate = "own"
	if c.withFakeCertificate(cfg) != cfg {
		t.Fatal("a configured default certificate was replaced")
	}
}
